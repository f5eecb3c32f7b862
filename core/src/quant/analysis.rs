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
    /// Output SQNR with only this layer quantized.
    pub only_this_db: Option<f64>,
    /// Output SQNR with every layer but this one quantized.
    pub all_but_this_db: Option<f64>,
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
    /// Ranked: the layer whose quantization alone hurts most first.
    pub layers: Vec<LayerSensitivity>,
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
        let live_full = self.live(plan.clone(), cached.samples.clone(), Keep::Outputs, &Silent)?;
        let live_float = self.live(float.clone(), cached.samples.clone(), Keep::Outputs, &Silent)?;
        let mut sens = Vec::new();
        for &n in &layers {
            let node = &g.nodes[n];
            step(&format!("sweep {}", node.label()))?;
            let mut only = float.clone();
            only.layers.insert(node.name.clone(), plan.precision(node));
            let ch = self.live_try(&live_float, &only, progress)?;
            let only_this_db = self.live_output_sqnr(&live_float, Some(&ch));
            step(&format!("sweep {}", node.label()))?;
            let mut but = plan.clone();
            but.layers.insert(node.name.clone(), LayerPrecision::FLOAT);
            let ch = self.live_try(&live_full, &but, progress)?;
            let all_but_this_db = self.live_output_sqnr(&live_full, Some(&ch));
            sens.push(LayerSensitivity {
                node: node.name.clone(),
                op: node.op.clone(),
                only_this_db,
                all_but_this_db,
            });
        }
        let key = |x: &LayerSensitivity| x.only_this_db.unwrap_or(f64::INFINITY);
        sens.sort_by(|x, y| key(x).total_cmp(&key(y)));
        let histograms = self.histograms(plan, cached)?;
        Ok(Analysis {
            full,
            weights_only,
            activations_only,
            layers: sens,
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
