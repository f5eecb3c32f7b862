//! SmoothQuant (Xiao et al., "SmoothQuant: Accurate and Efficient Post-Training
//! Quantization for Large Language Models", 2023): a transformer's LayerNorm output carries a
//! few channels far larger than the rest, and one per-tensor 8-bit grid spends its codes on
//! them. Channel `j` of the LayerNorm is divided by `s_j` (its scale and bias are) and row
//! `j` of every MatMul/Gemm weight that reads it is multiplied by `s_j`, so the FP32 function
//! is unchanged and the outliers move into the weights, which have a grid per output channel.
//! `s_j = max|X_j|^α / max|W_j|^(1−α)` with `α` = [`ALPHA`] balances the two, `max|X_j|`
//! measured on the calibration samples.
//!
//! The scales come from two thirds of the calibration set; the smoothed model is kept only
//! when, calibrated on those samples, it scores an output SQNR on the held-back third at
//! least the unsmoothed model's (then the scales are measured again on every sample). A
//! plan keeps them by LayerNorm name ([`super::QuantPlan::smoothing`]), so every command
//! that reads the plan makes the same weights from the optimized graph ([`apply`]).

use super::data::{Preprocess, Source};
use super::equalize::{own_f32, spread};
use super::recipe::Recipe;
use super::{QuantError, Quantizer};
use crate::ir::{Constant, Graph, Model, NodeId, Tensor, ValueId};
use crate::progress::Progress;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Scales by LayerNorm name: its output channel `j` is divided by `scales[j]`, row `j` of
/// its readers' weights multiplied by it.
pub type Scales = BTreeMap<String, Vec<f32>>;

/// Migration strength: how much of an activation channel's range moves into the weights.
pub const ALPHA: f64 = 0.5;
/// Scales are kept within these bounds (a dead channel has range 0).
const S_MIN: f64 = 1e-3;
const S_MAX: f64 = 1e3;

/// A weight reading the smoothed channels: its value, and whether channel `j` is its row
/// (`[K, N]`: MatMul, Gemm) or its column (`[N, K]`: Gemm with `transB`).
struct Reader {
    node: NodeId,
    w: ValueId,
    rows: bool,
}

/// A LayerNormalization over the last axis whose output only MatMul/Gemm weights (and
/// Shape) read.
struct Site {
    ln: NodeId,
    y: ValueId,
    gamma: ValueId,
    beta: Option<ValueId>,
    channels: usize,
    readers: Vec<Reader>,
}

fn shape_of(g: &Graph, v: ValueId) -> Option<&[usize]> {
    g.values[v].constant.as_ref().map(|c| c.shape.as_slice())
}

fn find_sites(g: &Graph) -> Vec<Site> {
    let consumers = g.consumers();
    let mut out = Vec::new();
    for (ln, node) in g.nodes.iter().enumerate() {
        if node.op != "LayerNormalization" || !node.domain.is_empty() {
            continue;
        }
        let (Some(x), Some(y)) = (node.input(0), node.outputs.first().copied().flatten()) else {
            continue;
        };
        let rank = g.values[x].shape.as_ref().map_or(0, Vec::len) as i64;
        let axis = node.attr_i("axis").unwrap_or(-1);
        if !(axis == -1 || (rank > 0 && axis == rank - 1)) || node.outputs.iter().skip(1).any(Option::is_some) {
            continue;
        }
        let Some(gamma) = own_f32(g, &consumers, node.input(1), ln) else {
            continue;
        };
        let Some(&[channels]) = shape_of(g, gamma) else {
            continue;
        };
        let beta = match node.input(2) {
            Some(_) => match own_f32(g, &consumers, node.input(2), ln) {
                Some(b) if shape_of(g, b) == Some(&[channels]) => Some(b),
                _ => continue,
            },
            None => None,
        };
        if g.outputs.contains(&y) {
            continue;
        }
        let mut readers = Vec::new();
        let mut ok = true;
        for &r in &consumers[y] {
            let rn = &g.nodes[r];
            if rn.op == "Shape" {
                continue;
            }
            let rows = match rn.op.as_str() {
                "MatMul" if rn.domain.is_empty() => Some(true),
                "Gemm" | "FusedGemm" if rn.attr_i("transA").unwrap_or(0) == 0 => {
                    Some(rn.attr_i("transB").unwrap_or(0) == 0)
                }
                _ => None,
            };
            let w = own_f32(g, &consumers, rn.input(1), r);
            match (rows, w) {
                (Some(rows), Some(w)) if rn.input(0) == Some(y) && rn.input(1) != Some(y) => {
                    let s = shape_of(g, w).unwrap_or(&[]);
                    let k = if rows { s.first() } else { s.get(1) };
                    if s.len() != 2 || k != Some(&channels) {
                        ok = false;
                    }
                    readers.push(Reader { node: r, w, rows });
                }
                _ => ok = false,
            }
        }
        if ok && !readers.is_empty() {
            out.push(Site {
                ln,
                y,
                gamma,
                beta,
                channels,
                readers,
            });
        }
    }
    out
}

/// The names of the LayerNorms SmoothQuant can smooth, with their readers.
pub fn sites(g: &Graph) -> Vec<(String, Vec<String>)> {
    find_sites(g)
        .iter()
        .map(|s| {
            (
                g.nodes[s.ln].name.clone(),
                s.readers.iter().map(|r| g.nodes[r.node].name.clone()).collect(),
            )
        })
        .collect()
}

pub(super) fn f32_of(g: &Graph, v: ValueId) -> Vec<f32> {
    g.values[v]
        .constant
        .as_ref()
        .map(|c| c.tensor().to_f32().iter().copied().collect())
        .unwrap_or_default()
}

/// Largest |w| of each channel row (or column) over a site's weights.
fn weight_maxima(g: &Graph, s: &Site) -> Vec<f64> {
    let mut m = vec![0f64; s.channels];
    for r in &s.readers {
        let w = f32_of(g, r.w);
        let n = w.len() / s.channels.max(1);
        for (i, &x) in w.iter().enumerate() {
            let j = if r.rows { i / n.max(1) } else { i % s.channels };
            m[j] = m[j].max(f64::from(x).abs());
        }
    }
    m
}

/// What smoothing did at one LayerNorm.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteReport {
    pub layer_norm: String,
    pub readers: Vec<String>,
    pub channels: usize,
    /// Largest over smallest channel maximum of the LayerNorm's output on the calibration
    /// samples, before and after.
    pub activation_spread_before: f64,
    pub activation_spread_after: f64,
    /// The same for the readers' weight rows.
    pub weight_spread_before: f64,
    pub weight_spread_after: f64,
}

/// The result of [`Quantizer::smooth`].
#[derive(Clone, Debug, Serialize)]
pub struct Smoothed {
    /// The scales the plan keeps (empty when dropped).
    #[serde(skip)]
    pub scales: Scales,
    /// The scales measured, kept or not.
    #[serde(skip)]
    pub fitted: Scales,
    pub sites: Vec<SiteReport>,
    /// Output SQNR on the held-back samples of the model calibrated without and with the
    /// scales (both on the fitting samples).
    pub held_before_db: Option<f64>,
    pub held_after_db: Option<f64>,
    pub kept: bool,
    /// Calibration samples held back to judge it; 0 when the set is too small to split
    /// and it is judged on the samples it was fitted to.
    pub held_back: usize,
    pub seconds: f64,
}

impl Smoothed {
    /// One line: the LayerNorms smoothed, the median activation spread, the verdict.
    pub fn summary(&self) -> String {
        if self.sites.is_empty() {
            return "SmoothQuant: no LayerNorm whose output only MatMul/Gemm weights read; nothing smoothed".into();
        }
        let db = |x: Option<f64>| x.map_or("exact".to_owned(), |v| format!("{v:.2} dB"));
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(1.0)
        };
        format!(
            "SmoothQuant: {} LayerNorms, median activation channel spread {:.1} → {:.1}; held back ({}): {} → {}; {}",
            self.sites.len(),
            median(self.sites.iter().map(|s| s.activation_spread_before).collect()),
            median(self.sites.iter().map(|s| s.activation_spread_after).collect()),
            self.held_back,
            db(self.held_before_db),
            db(self.held_after_db),
            if self.kept { "kept" } else { "dropped" }
        )
    }
}

/// The scales of a site from its activation and weight channel maxima.
fn site_scales(act: &[f64], w: &[f64]) -> Vec<f64> {
    act.iter()
        .zip(w)
        .map(|(&x, &w)| {
            if x > 0.0 && w > 0.0 {
                (x.powf(ALPHA) / w.powf(1.0 - ALPHA)).clamp(S_MIN, S_MAX)
            } else {
                1.0
            }
        })
        .collect()
}

/// Why a plan's scales do not fit a graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("smoothing of `{node}`: {problem}")]
pub struct ApplyError {
    pub node: String,
    pub problem: String,
}

pub(super) fn store(model: &mut Model, v: ValueId, data: Vec<f32>) {
    let shape = model.graph.values[v]
        .constant
        .as_ref()
        .map(|c| c.shape.clone())
        .unwrap_or_default();
    if let Some(t) = Tensor::from_f32(&shape, data) {
        model.graph.values[v].constant = Some(Constant::from_tensor(&t));
    }
}

/// Applies a plan's scales to `model` (the optimized graph, equalized first if the plan
/// says so).
pub fn apply(model: &mut Model, scales: &Scales) -> Result<(), ApplyError> {
    if scales.is_empty() {
        return Ok(());
    }
    let sites = find_sites(&model.graph);
    for (name, s) in scales {
        let err = |problem: String| ApplyError {
            node: name.clone(),
            problem,
        };
        let g = &model.graph;
        let site = sites
            .iter()
            .find(|x| &g.nodes[x.ln].name == name)
            .ok_or_else(|| err("no LayerNorm with MatMul readers by this name".into()))?;
        if s.len() != site.channels || s.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
            return Err(err(format!(
                "{} scales for {} channels, or one not positive",
                s.len(),
                site.channels
            )));
        }
        let s: Vec<f64> = s.iter().map(|&x| f64::from(x)).collect();
        let div = |d: Vec<f32>| -> Vec<f32> { d.iter().zip(&s).map(|(&x, &k)| (f64::from(x) / k) as f32).collect() };
        let gamma = div(f32_of(g, site.gamma));
        let beta = site.beta.map(|b| (b, div(f32_of(g, b))));
        let weights: Vec<(ValueId, Vec<f32>)> = site
            .readers
            .iter()
            .map(|r| {
                let w = f32_of(g, r.w);
                let n = w.len() / site.channels.max(1);
                let scaled = w
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| {
                        let j = if r.rows { i / n.max(1) } else { i % site.channels };
                        (f64::from(x) * s[j]) as f32
                    })
                    .collect();
                (r.w, scaled)
            })
            .collect();
        store(model, site.gamma, gamma);
        if let Some((b, d)) = beta {
            store(model, b, d);
        }
        for (w, d) in weights {
            store(model, w, d);
        }
    }
    Ok(())
}

/// What [`Quantizer::judged_rewrite`] measured, derived and decided.
pub(super) struct Judged<S, P> {
    /// The statistics (of every calibration sample when kept).
    pub stats: S,
    /// The parameters derived from them, kept or not.
    pub params: P,
    /// Output SQNR on the held-back samples without and with the rewrite.
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub kept: bool,
    pub held_back: usize,
}

impl Quantizer<'_> {
    /// Per-channel |max| of every site's LayerNorm output on `samples`.
    fn channel_maxima(
        &self,
        sites: &[Site],
        samples: &mut dyn Iterator<Item = Result<(String, HashMap<String, Tensor>), QuantError>>,
        total: usize,
        progress: &dyn Progress,
    ) -> Result<HashMap<ValueId, Vec<f64>>, QuantError> {
        let mut maxima: HashMap<ValueId, Vec<f64>> = sites.iter().map(|s| (s.y, vec![0.0; s.channels])).collect();
        for (k, s) in samples.enumerate() {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            let (label, sample) = s?;
            progress.update(k, total.max(1), &format!("SmoothQuant: channel ranges on {label}"));
            let mut see = |v: ValueId, t: &mut Tensor| -> Result<(), QuantError> {
                if let (Some(m), Tensor::F32(a)) = (maxima.get_mut(&v), &*t) {
                    let c = m.len().max(1);
                    for (i, x) in a.as_standard_layout().iter().enumerate() {
                        m[i % c] = m[i % c].max(f64::from(*x).abs());
                    }
                }
                Ok(())
            };
            self.forward(&sample, &HashMap::new(), &mut see, false)?;
        }
        Ok(maxima)
    }

    /// Scales of every site from activation maxima.
    fn scales_from(&self, sites: &[Site], maxima: &HashMap<ValueId, Vec<f64>>) -> Scales {
        let g = self.graph();
        sites
            .iter()
            .filter_map(|s| {
                let act = maxima.get(&s.y)?;
                let sc = site_scales(act, &weight_maxima(g, s));
                Some((g.nodes[s.ln].name.clone(), sc.into_iter().map(|x| x as f32).collect()))
            })
            .collect()
    }

    /// The output SQNR on `judge` of `model` calibrated on `fit` with `recipe` (its preset,
    /// rules and calibration method; no bias correction or other data-driven step).
    fn recipe_sqnr(
        model: &Model,
        threads: usize,
        recipe: &Recipe,
        fit: &Source,
        judge: &Source,
        pre: &Preprocess,
        progress: &dyn Progress,
    ) -> Result<Option<f64>, QuantError> {
        let q = Quantizer::new(model, threads)?;
        let (_, method) = super::preset(&recipe.preset)?;
        let stats = q.observe(&mut fit.samples(model, pre), fit.len(), progress)?;
        let mut plan = q.plan_from_stats(&stats, &recipe.preset, recipe.calibration.unwrap_or(method))?;
        let resolved = recipe
            .resolve(&model.graph)
            .map_err(|e| QuantError::Data(e.to_string()))?;
        plan.inputs = resolved.inputs;
        plan.layers = resolved.layers;
        let cached = q.cache(&mut judge.samples(model, pre))?;
        Ok(q.output_sqnr(&plan, &cached)?.sqnr_db)
    }

    /// A rewrite of this quantizer's model whose parameters `derive` from statistics
    /// `measure`d on calibration samples, judged held back: measured on the fitting part of
    /// `src` and applied; kept only when the rewritten model, calibrated with `recipe` on
    /// the fitting part, scores an output SQNR on the held-back part at least the original
    /// model's; when kept, measured again on the held-back part too (`merge`d in) for the
    /// parameters a plan keeps.
    pub(super) fn judged_rewrite<S, P>(
        &self,
        (recipe, src, pre, progress): (&Recipe, &Source, &Preprocess, &dyn Progress),
        measure: impl Fn(&Source) -> Result<S, QuantError>,
        merge: impl Fn(&mut S, S),
        derive: impl Fn(&S) -> P,
        apply: impl Fn(&mut Model, &P) -> Result<(), String>,
    ) -> Result<Judged<S, P>, QuantError> {
        let (fit, judge, held_back) = src.fit_and_judge();
        let mut stats = measure(&fit)?;
        let params = derive(&stats);
        let mut rewritten = self.model.clone();
        apply(&mut rewritten, &params).map_err(QuantError::Data)?;
        let threads = self.pool.current_num_threads();
        let before = Self::recipe_sqnr(self.model, threads, recipe, &fit, &judge, pre, progress)?;
        let after = Self::recipe_sqnr(&rewritten, threads, recipe, &fit, &judge, pre, progress)?;
        let kept = super::no_worse(after, before);
        let params = if kept && held_back > 0 {
            merge(&mut stats, measure(&judge)?);
            derive(&stats)
        } else {
            params
        };
        Ok(Judged {
            stats,
            params,
            before,
            after,
            kept,
            held_back,
        })
    }

    /// SmoothQuant on this quantizer's model (see the module's description): the scales,
    /// what they do to each LayerNorm's channel spread, and the held-back verdict.
    pub fn smooth(
        &self,
        recipe: &Recipe,
        src: &Source,
        pre: &Preprocess,
        progress: &dyn Progress,
    ) -> Result<Smoothed, QuantError> {
        let t0 = std::time::Instant::now();
        let g = self.graph();
        let sites = find_sites(g);
        if sites.is_empty() {
            return Ok(Smoothed {
                scales: Scales::new(),
                fitted: Scales::new(),
                sites: Vec::new(),
                held_before_db: None,
                held_after_db: None,
                kept: false,
                held_back: src.fit_and_judge().2,
                seconds: t0.elapsed().as_secs_f64(),
            });
        }
        let Judged {
            stats: maxima,
            params: scales,
            before,
            after,
            kept,
            held_back,
        } = self.judged_rewrite(
            (recipe, src, pre, progress),
            |s: &Source| self.channel_maxima(&sites, &mut s.samples(self.model, pre), s.len(), progress),
            |maxima: &mut HashMap<ValueId, Vec<f64>>, held| {
                for (v, h) in held {
                    if let Some(m) = maxima.get_mut(&v) {
                        m.iter_mut().zip(h).for_each(|(a, b)| *a = a.max(b));
                    }
                }
            },
            |maxima| self.scales_from(&sites, maxima),
            |model, scales| apply(model, scales).map_err(|e| e.to_string()),
        )?;
        let reports = sites
            .iter()
            .map(|s| {
                let name = &g.nodes[s.ln].name;
                let act = maxima.get(&s.y).cloned().unwrap_or_default();
                let w = weight_maxima(g, s);
                let sc: Vec<f64> = scales
                    .get(name)
                    .map_or_else(|| vec![1.0; s.channels], |v| v.iter().map(|&x| f64::from(x)).collect());
                let act_after: Vec<f64> = act.iter().zip(&sc).map(|(a, k)| a / k).collect();
                let w_after: Vec<f64> = w.iter().zip(&sc).map(|(a, k)| a * k).collect();
                SiteReport {
                    layer_norm: name.clone(),
                    readers: s.readers.iter().map(|r| g.nodes[r.node].name.clone()).collect(),
                    channels: s.channels,
                    activation_spread_before: spread(&act),
                    activation_spread_after: spread(&act_after),
                    weight_spread_before: spread(&w),
                    weight_spread_after: spread(&w_after),
                }
            })
            .collect();
        Ok(Smoothed {
            scales: if kept { scales.clone() } else { Scales::new() },
            fitted: scales,
            sites: reports,
            held_before_db: before,
            held_after_db: after,
            kept,
            held_back,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, DType, Dim, Node, Value};
    use crate::progress::Silent;

    /// Input [1, 64, 32] → LayerNormalization (channel 3's scale 40× the others') → MatMul
    /// by a [32, 16] weight.
    fn ln_matmul() -> Model {
        let mut m = Model::default();
        m.meta.ir_version = 8;
        m.meta.opsets.insert(String::new(), 17);
        let g = &mut m.graph;
        let mut rnd = crate::quant::equalize::tests::uniform(5);
        let value = |g: &mut Graph, name: &str, shape: &[usize], data: Option<Vec<f32>>| {
            let mut v = Value::new(name);
            v.dtype = Some(DType::F32);
            v.shape = Some(shape.iter().map(|&d| Dim::Fixed(d)).collect());
            if let Some(d) = data {
                let t = Tensor::from_f32(shape, d).expect("shape");
                v.constant = Some(Constant::from_tensor(&t));
            }
            g.values.push(v);
            g.values.len() - 1
        };
        let x = value(g, "x", &[1, 64, 32], None);
        g.inputs.push(x);
        let gamma = value(
            g,
            "gamma",
            &[32],
            Some((0..32).map(|j| if j == 3 { 40.0 } else { 1.0 }).collect()),
        );
        let beta = value(g, "beta", &[32], Some((0..32).map(|j| 0.01 * j as f32).collect()));
        let w = value(g, "w", &[32, 16], Some((0..512).map(|_| rnd()).collect()));
        let h = value(g, "h", &[1, 64, 32], None);
        let y = value(g, "y", &[1, 64, 16], None);
        g.values[h].producer = Some(0);
        g.values[y].producer = Some(1);
        g.nodes.push(Node {
            name: "ln".into(),
            op: "LayerNormalization".into(),
            domain: String::new(),
            inputs: vec![Some(x), Some(gamma), Some(beta)],
            outputs: vec![Some(h)],
            attrs: [("axis".to_owned(), Attr::Int(-1))].into_iter().collect(),
            origin: vec![0],
        });
        g.nodes.push(Node {
            name: "mm".into(),
            op: "MatMul".into(),
            domain: String::new(),
            inputs: vec![Some(h), Some(w)],
            outputs: vec![Some(y)],
            attrs: BTreeMap::default(),
            origin: vec![1],
        });
        g.outputs.push(y);
        m
    }

    fn run(m: &Model, x: &Tensor) -> Vec<f32> {
        let e = crate::sim::Executor::new(m, 1).expect("executor");
        let out = e.run(&HashMap::from([("x".to_owned(), x.clone())])).expect("runs");
        out[0].1.to_f32().iter().copied().collect()
    }

    #[test]
    fn smoothing_keeps_the_function_evens_the_channels_and_wins_held_back() {
        let m = ln_matmul();
        assert_eq!(sites(&m.graph), vec![("ln".to_owned(), vec!["mm".to_owned()])]);
        let q = Quantizer::new(&m, 1).expect("quantizer");
        let src = Source::Synthetic(6);
        // 16-bit graph inputs and MatMul output: the LayerNorm's 8-bit output grid is what
        // the error is made of.
        let recipe = Recipe {
            inputs: Some(crate::quant::scheme::ActFormat::Int16),
            overrides: BTreeMap::from([("mm".to_owned(), "int16".to_owned())]),
            calibration: Some(crate::quant::Calibration::MinMax),
            ..Recipe::from_preset("w8a8")
        };
        let s = q
            .smooth(&recipe, &src, &Preprocess::default(), &Silent)
            .expect("smooths");
        let site = &s.sites[0];
        // The outlier channel's 40× is shared between the activation and the weight.
        assert!(site.activation_spread_before > 20.0, "{site:?}");
        assert!(
            site.activation_spread_after * 4.0 < site.activation_spread_before,
            "{site:?}"
        );
        assert!(site.weight_spread_after > site.weight_spread_before, "{site:?}");
        assert_eq!(s.held_back, 2);
        assert!(s.kept, "{}", s.summary());
        assert!(
            s.held_after_db.expect("inexact") > s.held_before_db.expect("inexact") + 1.0,
            "{}",
            s.summary()
        );
        // The FP32 function is unchanged.
        let mut smoothed = m.clone();
        apply(&mut smoothed, &s.scales).expect("applies");
        let x = Tensor::from_f32(
            &[1, 64, 32],
            (0..2048).map(|i| ((i * 37 % 101) as f32 / 25.0) - 2.0).collect(),
        )
        .expect("shape");
        let (a, b) = (run(&m, &x), run(&smoothed, &x));
        let scale = a.iter().fold(0f32, |s, v| s.max(v.abs()));
        for (p, r) in a.iter().zip(&b) {
            assert!((p - r).abs() <= 1e-5 * scale, "{p} vs {r}");
        }
        assert_ne!(a, b, "the weights did change");
        // Scales of another graph are refused, naming the node.
        let bad: Scales = BTreeMap::from([("nope".to_owned(), vec![1.0; 32])]);
        let err = apply(&mut m.clone(), &bad).expect_err("no such LayerNorm");
        assert!(err.to_string().contains("nope"), "{err}");
        let short: Scales = BTreeMap::from([("ln".to_owned(), vec![1.0; 3])]);
        assert!(apply(&mut m.clone(), &short).is_err());
    }
}
