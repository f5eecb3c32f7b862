//! Analyses on a plan: weight-only vs activation-only error, per-layer sweeps (only this
//! layer quantized / all but this layer), and histograms with the chosen clipping ranges.

use super::live::Keep;
use super::observer::Observer;
use super::scheme::{ActFormat, ErrorStats};
use super::{LayerPrecision, QuantError, QuantPlan, Quantizer};
use crate::ir::{Tensor, ValueId};
use crate::progress::{Progress, Silent};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Evaluation samples and their FP32 outputs, kept in memory for repeated simulations.
pub struct Cached {
    pub samples: Vec<HashMap<String, Tensor>>,
    pub reference: Vec<HashMap<ValueId, Tensor>>,
}

/// Output SQNR of one plan variant: per output, and the worst of them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OutputSqnr {
    pub per_output: Vec<(String, Option<f64>)>,
    /// The lowest output SQNR (`null`: every output exact).
    pub sqnr_db: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LayerSensitivity {
    pub node: String,
    pub op: String,
    /// Output SQNR with only this layer quantized (all samples).
    pub only_this_db: Option<f64>,
    /// Output SQNR with every layer but this one quantized (all samples).
    pub all_but_this_db: Option<f64>,
    /// The same two on the fitting samples (what the ranking is made on) and on the
    /// held-back ones; absent without a held-back part ([`Analysis::held_back`] 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_this_fit_db: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_this_held_db: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_but_this_fit_db: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_but_this_held_db: Option<f64>,
}

/// How well the ranking made on the fitting samples holds on the held-back ones.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RankCheck {
    /// Spearman's rank correlation between the fitting and the held-back samples' output
    /// SQNR with only each layer quantized (1: the same order).
    pub only_this_rho: Option<f64>,
    /// The same for the output SQNR with every layer but each one quantized.
    pub all_but_this_rho: Option<f64>,
    /// How many of the five most sensitive layers on the fitting samples (lowest SQNR with
    /// only them quantized) are among the five most sensitive on the held-back ones.
    pub top5_overlap: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Histogram {
    pub name: String,
    pub kind: String,
    pub lo: f64,
    pub bin_width: f64,
    pub counts: Vec<u64>,
    /// The clipping range the plan uses.
    pub range: (f64, f64),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Analysis {
    pub full: OutputSqnr,
    pub weights_only: OutputSqnr,
    pub activations_only: OutputSqnr,
    /// Ranked: the layer whose quantization alone hurts most first (on the fitting samples
    /// when some are held back).
    pub layers: Vec<LayerSensitivity>,
    /// Samples held back from the ranking to check it (the last third with three or more).
    #[serde(default)]
    pub held_back: usize,
    /// The ranking checked on the held-back samples (absent without them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank_check: Option<RankCheck>,
    pub histograms: Vec<Histogram>,
    pub seconds: f64,
}

impl Quantizer<'_> {
    /// Loads the samples and runs FP32 once, keeping the outputs.
    pub fn cache(
        &self,
        samples: &mut dyn Iterator<Item = Result<(String, HashMap<String, Tensor>), QuantError>>,
    ) -> Result<Cached, QuantError> {
        let mut c = Cached {
            samples: Vec::new(),
            reference: Vec::new(),
        };
        for s in samples {
            let (_, s) = s?;
            let r = self.forward(&s, &HashMap::new(), &mut |_, _| Ok(()), false)?;
            c.samples.push(s);
            c.reference.push(r);
        }
        if c.samples.is_empty() {
            return Err(QuantError::Data("the evaluation set is empty".into()));
        }
        Ok(c)
    }

    /// Output SQNR of `plan` on cached samples.
    pub fn output_sqnr(&self, plan: &QuantPlan, cached: &Cached) -> Result<OutputSqnr, QuantError> {
        let g = &self.model.graph;
        let weights = self.quantized_weights(plan);
        let mut stats = vec![ErrorStats::default(); g.outputs.len()];
        for (s, r) in cached.samples.iter().zip(&cached.reference) {
            let mut fq = |v: ValueId, t: &mut Tensor| -> Result<(), QuantError> {
                self.fake_quant(plan, v, t);
                Ok(())
            };
            let q = self.forward(s, &weights, &mut fq, false)?;
            for (k, o) in g.outputs.iter().enumerate() {
                if let (Some(Tensor::F32(a)), Some(Tensor::F32(b))) = (r.get(o), q.get(o)) {
                    let (a, b) = (a.as_standard_layout(), b.as_standard_layout());
                    stats[k].add(a.as_slice().unwrap_or(&[]), b.as_slice().unwrap_or(&[]));
                }
            }
        }
        let per_output: Vec<(String, Option<f64>)> = g
            .outputs
            .iter()
            .zip(&stats)
            .map(|(o, s)| (g.values[*o].name.clone(), s.sqnr_db()))
            .collect();
        let sqnr_db = per_output.iter().filter_map(|p| p.1).min_by(f64::total_cmp);
        Ok(OutputSqnr { per_output, sqnr_db })
    }

    /// Nodes with a precision of their own to choose: those with a quantized output.
    pub fn layers(&self) -> Vec<usize> {
        let g = &self.model.graph;
        self.order
            .iter()
            .copied()
            .filter(|&n| g.nodes[n].outputs.iter().flatten().any(|o| self.source[*o] == Some(*o)))
            .collect()
    }

    /// All analyses of `plan` on cached samples.
    pub fn analyze(&self, plan: &QuantPlan, cached: &Cached, progress: &dyn Progress) -> Result<Analysis, QuantError> {
        let t0 = std::time::Instant::now();
        let g = &self.model.graph;
        let layers = self.layers();
        let total = 3 + 2 * layers.len();
        let mut done = 0;
        let mut step = |what: &str| -> Result<(), QuantError> {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            progress.update(done, total, what);
            done += 1;
            Ok(())
        };
        step("full plan")?;
        let full = self.output_sqnr(plan, cached)?;
        step("weights only")?;
        let mut w = plan.clone();
        w.exact_float = true;
        w.inputs = ActFormat::Float;
        w.default.activations = ActFormat::Float;
        w.layers.values_mut().for_each(|p| p.activations = ActFormat::Float);
        let weights_only = self.output_sqnr(&w, cached)?;
        step("activations only")?;
        let mut a = plan.clone();
        a.default.weights = super::scheme::WeightFormat::Float;
        a.layers
            .values_mut()
            .for_each(|p| p.weights = super::scheme::WeightFormat::Float);
        let activations_only = self.output_sqnr(&a, cached)?;
        // The sweeps run incrementally from the full plan and from the float plan: only what
        // lies downstream of the swept layer runs again.
        let mut float = plan.clone();
        float.inputs = ActFormat::Float;
        float.default = LayerPrecision::FLOAT;
        float.layers.clear();
        // What-if plans: a layer at float is unquantized, whoever reads it.
        float.exact_float = true;
        let live_full = self.live(plan.clone(), cached.samples.clone(), Keep::Outputs, &Silent)?;
        let live_float = self.live(float.clone(), cached.samples.clone(), Keep::Outputs, &Silent)?;
        // The ranking is made on the fitting samples and checked on the held-back ones (the
        // split every data-driven choice uses).
        let n_samples = cached.samples.len();
        let held_back = super::data::held_back_len(n_samples);
        let (fit, held) = (0..n_samples - held_back, n_samples - held_back..n_samples);
        let parts = |live: &super::live::Live, ch: &super::live::Change| {
            if held_back == 0 {
                return (None, None);
            }
            (
                self.live_output_sqnr_on(live, Some(ch), fit.clone()),
                self.live_output_sqnr_on(live, Some(ch), held.clone()),
            )
        };
        let mut sens = Vec::new();
        for &n in &layers {
            let node = &g.nodes[n];
            step(&format!("sweep {}", node.label()))?;
            let mut only = float.clone();
            only.layers.insert(node.name.clone(), plan.precision(node));
            let ch = self.live_try(&live_float, &only, progress)?;
            let only_this_db = self.live_output_sqnr(&live_float, Some(&ch));
            let (only_this_fit_db, only_this_held_db) = parts(&live_float, &ch);
            step(&format!("sweep {}", node.label()))?;
            let mut but = plan.clone();
            but.layers.insert(node.name.clone(), LayerPrecision::FLOAT);
            but.exact_float = true;
            let ch = self.live_try(&live_full, &but, progress)?;
            let all_but_this_db = self.live_output_sqnr(&live_full, Some(&ch));
            let (all_but_this_fit_db, all_but_this_held_db) = parts(&live_full, &ch);
            sens.push(LayerSensitivity {
                node: node.name.clone(),
                op: node.op.clone(),
                only_this_db,
                all_but_this_db,
                only_this_fit_db,
                only_this_held_db,
                all_but_this_fit_db,
                all_but_this_held_db,
            });
        }
        let key = |x: &LayerSensitivity| {
            (if held_back > 0 {
                x.only_this_fit_db
            } else {
                x.only_this_db
            })
            .unwrap_or(f64::INFINITY)
        };
        sens.sort_by(|x, y| key(x).total_cmp(&key(y)));
        let rank_check = (held_back > 0).then(|| rank_check(&sens));
        let histograms = self.histograms(plan, cached)?;
        Ok(Analysis {
            full,
            weights_only,
            activations_only,
            layers: sens,
            held_back,
            rank_check,
            histograms,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }

    /// Activation histograms on the cached samples and weight histograms, 128 bins each,
    /// with the plan's clipping ranges.
    fn histograms(&self, plan: &QuantPlan, cached: &Cached) -> Result<Vec<Histogram>, QuantError> {
        let g = &self.model.graph;
        let mut obs: HashMap<ValueId, Observer> = self.quant_points.iter().map(|&v| (v, Observer::new())).collect();
        for s in &cached.samples {
            let mut see = |v: ValueId, t: &mut Tensor| -> Result<(), QuantError> {
                if let (Some(o), Tensor::F32(a)) = (obs.get_mut(&v), &*t) {
                    o.observe(a.as_slice_memory_order().unwrap_or(&[]))
                        .map_err(|m| QuantError::Tensor {
                            name: g.values[v].name.clone(),
                            message: m.to_string(),
                        })?;
                }
                Ok(())
            };
            self.forward(s, &HashMap::new(), &mut see, false)?;
        }
        let mut out = Vec::new();
        for &v in &self.quant_points {
            let o = &obs[&v];
            let (lo, bw, bins) = o.histogram();
            let range = self.grid(plan, v).map_or((o.min, o.max), |x| x.1);
            out.push(coarse(&g.values[v].name, "activation", lo, bw, bins, range));
        }
        for (v, val) in g.values.iter().enumerate() {
            let Some(c) = &val.constant else { continue };
            let Tensor::F32(a) = c.tensor() else { continue };
            if a.len() < 16 || !self.weight_like(v) {
                continue;
            }
            let mut o = Observer::new();
            if o.observe(a.as_slice_memory_order().unwrap_or(&[])).is_ok() {
                let (lo, bw, bins) = o.histogram();
                let m = o.min.abs().max(o.max);
                out.push(coarse(&val.name, "weight", lo, bw, bins, (-m, m)));
            }
        }
        Ok(out)
    }

    fn weight_like(&self, v: ValueId) -> bool {
        let g = &self.model.graph;
        g.nodes.iter().any(|n| {
            n.inputs
                .iter()
                .enumerate()
                .any(|(k, x)| *x == Some(v) && super::weight_axis(g, n, k).is_some())
        })
    }
}

impl RankCheck {
    /// One line on how the ranking made on the fitting samples holds on `held_back` ones.
    pub fn summary(&self, held_back: usize) -> String {
        let rho = |x: Option<f64>| x.map_or("—".to_string(), |v| format!("{v:.2}"));
        format!(
            "sensitivity ranked on the fitting samples, checked on {held_back} held back: Spearman's rho {} \
             (only this layer quantized) and {} (all but this one), {} of the top 5 the same",
            rho(self.only_this_rho),
            rho(self.all_but_this_rho),
            self.top5_overlap
        )
    }
}

/// Ranks of `v` (1 = smallest; exact values count as +∞; ties share their mean rank).
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        for &k in &idx[i..=j] {
            r[k] = (i + j) as f64 / 2.0 + 1.0;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation of two equally long series (`None` below three values or
/// when either has a single rank).
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 3 {
        return None;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    // Ranks run from 1 to n: their mean is (n + 1) / 2.
    let mean = f64::midpoint(a.len() as f64, 1.0);
    let (mut num, mut da, mut db) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        num += (x - mean) * (y - mean);
        da += (x - mean) * (x - mean);
        db += (y - mean) * (y - mean);
    }
    (da > 0.0 && db > 0.0).then(|| num / (da * db).sqrt())
}

/// The fitting samples' ranking against the held-back samples'.
fn rank_check(layers: &[LayerSensitivity]) -> RankCheck {
    let pairs = |f: fn(&LayerSensitivity) -> (Option<f64>, Option<f64>)| -> (Vec<f64>, Vec<f64>) {
        layers
            .iter()
            .map(|l| {
                let (a, b) = f(l);
                (a.unwrap_or(f64::INFINITY), b.unwrap_or(f64::INFINITY))
            })
            .unzip()
    };
    let (fo, ho) = pairs(|l| (l.only_this_fit_db, l.only_this_held_db));
    let (fa, ha) = pairs(|l| (l.all_but_this_fit_db, l.all_but_this_held_db));
    let top5 = |v: &[f64]| -> Vec<usize> {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
        idx.truncate(5);
        idx
    };
    let (tf, th) = (top5(&fo), top5(&ho));
    RankCheck {
        only_this_rho: spearman(&fo, &ho),
        all_but_this_rho: spearman(&fa, &ha),
        top5_overlap: tf.iter().filter(|k| th.contains(k)).count(),
    }
}

/// Merges a fine histogram into 128 bins.
fn coarse(name: &str, kind: &str, lo: f64, bw: f64, bins: &[u64], range: (f64, f64)) -> Histogram {
    let k = bins.len() / 128;
    Histogram {
        name: name.into(),
        kind: kind.into(),
        lo,
        bin_width: bw * k as f64,
        counts: bins.chunks(k.max(1)).map(|c| c.iter().sum()).collect(),
        range,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_reads_order_not_values() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert!((spearman(&a, &[10.0, 20.0, 30.0, 40.0, 1e9]).expect("rho") - 1.0).abs() < 1e-12);
        assert!((spearman(&a, &[5.0, 4.0, 3.0, 2.0, 1.0]).expect("rho") + 1.0).abs() < 1e-12);
        // Ties share their mean rank; exact outputs (+inf) tie with each other.
        let r = spearman(&[1.0, f64::INFINITY, f64::INFINITY, 2.0], &[1.0, 3.0, 4.0, 2.0]).expect("rho");
        assert!(r > 0.9 && r < 1.0, "{r}");
        assert_eq!(spearman(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None, "a single rank");
        assert_eq!(spearman(&[1.0, 2.0], &[1.0, 2.0]), None, "too few");
    }

    #[test]
    fn rank_check_counts_the_shared_top_five() {
        let layer = |k: usize, fit: f64, held: f64| LayerSensitivity {
            node: format!("n{k}"),
            op: "Conv".into(),
            only_this_db: None,
            all_but_this_db: None,
            only_this_fit_db: Some(fit),
            only_this_held_db: Some(held),
            all_but_this_fit_db: Some(-fit),
            all_but_this_held_db: Some(-held),
        };
        // Held back, the two most sensitive layers on the fitting part become the least.
        let layers: Vec<_> = (0..8)
            .map(|k| {
                let fit = k as f64;
                let held = if k < 2 { 100.0 + fit } else { fit };
                layer(k, fit, held)
            })
            .collect();
        let c = rank_check(&layers);
        assert_eq!(c.top5_overlap, 3);
        let rho = c.only_this_rho.expect("rho");
        assert!(rho < 0.5, "{rho}");
        assert_eq!(c.all_but_this_rho, c.only_this_rho, "mirrored values, same order");
    }
}
