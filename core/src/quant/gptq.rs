//! GPTQ: weight codes of linear layers chosen against the inputs they meet (Frantar
//! et al., "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
//! Transformers", 2023). Rounding each weight to its nearest code ignores that the errors of
//! one output channel add up over correlated inputs. GPTQ rounds the channel's weights one
//! input at a time (largest input energy first) and moves each rounding error onto the
//! weights not yet rounded, weighted by the inverse of the inputs' second moment
//! `H = Σ x xᵀ`, so that the channel's output error `δᵀ H δ` stays small.
//!
//! Layers: MatMul with a constant 2-D weight, Gemm, and 1×1 convolutions (one group, stride
//! 1, no padding), whose weights are 4-bit (`int4`, codes −7..7) or 8-bit (codes −127..127).
//! `H` is summed over the calibration
//! samples' FP32 inputs put on their grids, as the other weight steps see them. The grid is
//! the plan's own (one scale per output channel from the channel's largest weight, times any
//! SeqMSE factor), so the codes are valid wherever that grid is: the plan keeps them by layer
//! name ([`super::QuantPlan::gptq`]), one hex digit per 4-bit weight and two per 8-bit
//! one, and the simulator, the
//! integer program and the QDQ export all take them from there.
//!
//! The codes are kept only when the model's output SQNR on a held-back part of the
//! calibration set does not drop (then fitted again on every sample), as for the other
//! data-driven steps.

use super::data::{Preprocess, Source};
use super::params::{WeightCodes, weight_codes};
use super::scheme::WeightFormat;
use super::{QuantError, QuantPlan, Quantizer, weight_axis};
use crate::ir::{Graph, Node, NodeId, Tensor};
use crate::progress::Progress;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// The largest reduction (inputs per output channel) a layer may have: `H` is K×K in f64
/// and its factorization costs K³.
pub const MAX_INPUTS: usize = 4096;

/// Dampening added to `H`'s diagonal, relative to its mean (the paper's 1%).
const DAMP: f64 = 0.01;

/// Shrinkages of `H` towards its diagonal tried for every layer ([`solve`]); the one whose
/// codes give the smallest output error on the held-back samples' moments is kept, or
/// rounding to nearest where none beats it.
pub const SHRINKAGE: [f64; 5] = [0.0, 0.1, 0.3, 1.0, 3.0];

/// What GPTQ did to one layer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerGptq {
    pub node: String,
    /// Inputs per output channel (the reduction).
    pub inputs: usize,
    pub channels: usize,
    /// Codes that differ from rounding to nearest.
    pub changed: usize,
    /// The shrinkage of `H` towards its diagonal chosen on the held-back samples
    /// ([`SHRINKAGE`]); `None`: none beat rounding to nearest, which the layer keeps.
    pub shrinkage: Option<f64>,
    /// The layer's output SQNR from its weights alone (inputs on their grids), on the
    /// held-back samples, with codes fitted on the others: rounded to nearest, and the
    /// chosen codes.
    pub before_db: Option<f64>,
    pub after_db: Option<f64>,
}

/// What GPTQ did.
#[derive(Clone, Debug, Serialize)]
pub struct Gptq {
    /// Every layer solved, in graph order.
    pub layers: Vec<LayerGptq>,
    /// Output SQNR on the held-back samples with codes rounded to nearest and with GPTQ's.
    pub held_before_db: Option<f64>,
    pub held_after_db: Option<f64>,
    /// Whether the codes are in the plan (they did not lose on the held-back samples).
    pub kept: bool,
    /// Calibration samples held back to judge it; 0 when the set is too small to split
    /// and it is judged on the samples it was fitted to.
    pub held_back: usize,
    pub seconds: f64,
}

impl Gptq {
    /// One line: layers solved, the median layer gain, the held-back verdict.
    pub fn summary(&self) -> String {
        let solved = || self.layers.iter().filter(|l| l.shrinkage.is_some());
        let median = super::median_gain(solved().map(|l| (l.before_db, l.after_db)));
        format!(
            "GPTQ weight codes: {} of {} layers (median layer output {median:+.2} dB); {}",
            solved().count(),
            self.layers.len(),
            super::held_verdict(self.held_back, self.held_before_db, self.held_after_db, self.kept)
        )
    }
}

/// The largest code of a weight format GPTQ solves: 7 for int4 with one scale per output
/// channel, 127 for int8; `None` for the others.
pub fn top(format: WeightFormat) -> Option<i8> {
    match format {
        WeightFormat::Int4 { group: 0 } => Some(7),
        WeightFormat::Int8 => Some(127),
        _ => None,
    }
}

/// Codes as text, in two's complement: one hex digit per code when `top` is 7 (`9`…`f`:
/// −7…−1), two otherwise (`81`…`ff`: −127…−1).
pub fn encode(codes: &[i8], top: i8) -> String {
    if top <= 7 {
        codes
            .iter()
            .map(|&c| char::from_digit(u32::from(c as u8 & 0xF), 16).unwrap_or('0'))
            .collect()
    } else {
        codes
            .iter()
            .flat_map(|&c| {
                let b = u32::from(c as u8);
                [b >> 4, b & 0xF].map(|d| char::from_digit(d, 16).unwrap_or('0'))
            })
            .collect()
    }
}

/// Codes from [`encode`]'s text for `top`; `None` for text that holds no codes in
/// −top..=top.
pub fn decode(text: &str, top: i8) -> Option<Vec<i8>> {
    let digits: Vec<u8> = text
        .chars()
        .map(|c| c.to_digit(16).map(|d| d as u8))
        .collect::<Option<_>>()?;
    let codes: Vec<i8> = if top <= 7 {
        digits.iter().map(|&d| ((d << 4) as i8) >> 4).collect()
    } else {
        if !digits.len().is_multiple_of(2) {
            return None;
        }
        digits.chunks_exact(2).map(|p| ((p[0] << 4) | p[1]) as i8).collect()
    };
    codes.iter().all(|&c| c >= -top && c <= top).then_some(codes)
}

/// Why a plan's GPTQ codes do not fit a graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("gptq of `{node}`: {problem}")]
pub struct GptqError {
    pub node: String,
    pub problem: String,
}

/// Checks a plan's `gptq` codes against the graph it is used on: every name a layer with a
/// constant weight, and per weight one hex digit holding a code in −7..=7 or two holding one
/// in −127..=127. (Codes whose width is not the layer's precision are not used: a layer
/// promoted to float keeps them for when it is set back.)
pub fn check(g: &Graph, codes: &BTreeMap<String, String>) -> Result<(), GptqError> {
    for (name, text) in codes {
        let err = |problem: String| GptqError {
            node: name.clone(),
            problem,
        };
        let node = g
            .nodes
            .iter()
            .find(|n| &n.name == name)
            .ok_or_else(|| err("no node of the graph has this name".into()))?;
        let count = weight_axis(g, node, 1)
            .and(node.input(1).and_then(|w| g.values[w].constant.as_ref()))
            .map(|c| c.shape.iter().product::<usize>())
            .ok_or_else(|| err(format!("a {} without a constant weight", node.op)))?;
        let top = match text.len() {
            n if n == count => 7,
            n if n == 2 * count => 127,
            n => {
                return Err(err(format!(
                    "{n} hex digits for {count} weights (one or two per weight)"
                )));
            }
        };
        if decode(text, top).is_none() {
            return Err(err(format!("a digit that is no code in −{top}..{top}")));
        }
    }
    Ok(())
}

/// The weight grid of `node` under `plan` when GPTQ chose its codes (int4 or int8 weights,
/// one scale per output channel): the codes and the plan's per-channel scales. `data`: the
/// float weight (`shape`, output channels on `axis`).
pub fn plan_codes(plan: &QuantPlan, node: &Node, data: &[f32], shape: &[usize], axis: usize) -> Option<WeightCodes> {
    let top = top(plan.precision(node).weights)?;
    let codes = decode(plan.gptq.get(&node.name)?, top)?;
    if codes.len() != data.len() {
        return None;
    }
    let scales = weight_codes(data, shape, axis, f64::from(top), plan.clip(node)).scales;
    Some(WeightCodes {
        codes: codes.into_iter().map(i32::from).collect(),
        scales,
    })
}

/// The dequantized weight of [`plan_codes`] (what the simulator computes with).
pub fn dequantize(w: &WeightCodes, shape: &[usize], axis: usize) -> Vec<f32> {
    let channels = shape.get(axis).copied().unwrap_or(1).max(1);
    let inner: usize = shape.get(axis + 1..).map_or(1, |s| s.iter().product::<usize>().max(1));
    w.codes
        .iter()
        .enumerate()
        .map(|(i, &c)| (f64::from(c) * w.scales[(i / inner) % channels]) as f32)
        .collect()
}

/// One layer's summed input second moments (K×K, upper triangle filled).
struct Moments {
    k: usize,
    h: Vec<f64>,
}

impl Moments {
    fn add(&mut self, o: &Self) {
        if o.k == self.k {
            self.h.iter_mut().zip(&o.h).for_each(|(a, b)| *a += b);
        }
    }
}

/// Element (row, feature)'s index in a layer input.
type RowIndex = Box<dyn Fn(usize, usize) -> usize>;

/// The rows (inputs of one output position) of a layer's input `x`: how many, and a
/// function from row and feature to the element's index in `x` (standard layout).
fn rows_of(node: &Node, shape: &[usize], k: usize) -> Option<(usize, RowIndex)> {
    let len: usize = shape.iter().product();
    match node.op.as_str() {
        "Conv" | "FusedConv" => {
            let (&b, &c) = (shape.first()?, shape.get(1)?);
            if c != k || b == 0 {
                return None;
            }
            let plane = len / (b * c);
            Some((
                b * plane,
                Box::new(move |r, f| (r / plane) * c * plane + f * plane + r % plane),
            ))
        }
        "Gemm" | "FusedGemm" if node.attr_i("transA").unwrap_or(0) != 0 => {
            let m = len / k;
            (shape.first() == Some(&k)).then(|| (m, Box::new(move |r, f| f * m + r) as RowIndex))
        }
        _ => (shape.last() == Some(&k)).then(|| (len / k, Box::new(move |r, f| r * k + f) as RowIndex)),
    }
}

/// The weight of a target as rows of output channels: `(N, K)` and element (n, r)'s index
/// in the tensor (`shape`, channels on `axis`).
fn matrix_index(shape: &[usize], axis: usize) -> (usize, usize, impl Fn(usize, usize) -> usize) {
    let channels = shape.get(axis).copied().unwrap_or(1).max(1);
    let inner: usize = shape.get(axis + 1..).map_or(1, |s| s.iter().product::<usize>().max(1));
    let k = shape.iter().product::<usize>() / channels;
    // The inverse of qdq_weight's map: element i has channel (i / inner) % channels and
    // reduction index (i / (inner·channels))·inner + i % inner.
    (channels, k, move |n: usize, r: usize| {
        (r / inner) * inner * channels + n * inner + r % inner
    })
}

/// Lower Cholesky factor of the symmetric positive definite `a` (n×n, lower triangle read);
/// `None` when it is not positive definite.
fn cholesky(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let mut s = a[i * n + j];
            for p in 0..j {
                s -= l[i * n + p] * l[j * n + p];
            }
            if i == j {
                if s <= 0.0 || !s.is_finite() {
                    return None;
                }
                l[i * n + i] = s.sqrt();
            } else {
                l[i * n + j] = s / l[j * n + j];
            }
        }
    }
    Some(l)
}

/// The upper factor `U` of `H⁻¹ = Uᵀ U` for the symmetric `h` (n×n, full): GPTQ's
/// update rows. `None` when `h` is not positive definite.
fn inverse_factor(h: &[f64], n: usize) -> Option<Vec<f64>> {
    let l = cholesky(h, n)?;
    // L⁻¹ by forward substitution, column by column (lower triangular).
    let mut li = vec![0.0; n * n];
    for c in 0..n {
        li[c * n + c] = 1.0 / l[c * n + c];
        for i in c + 1..n {
            let mut s = 0.0;
            for p in c..i {
                s -= l[i * n + p] * li[p * n + c];
            }
            li[i * n + c] = s / l[i * n + i];
        }
    }
    // H⁻¹ = L⁻ᵀ L⁻¹.
    let mut inv = vec![0.0; n * n];
    inv.par_chunks_mut(n).enumerate().for_each(|(i, row)| {
        for (j, x) in row.iter_mut().enumerate() {
            let from = i.max(j);
            *x = (from..n).map(|p| li[p * n + i] * li[p * n + j]).sum();
        }
    });
    // Hinv = L2 L2ᵀ, U = L2ᵀ.
    let l2 = cholesky(&inv, n)?;
    let mut u = vec![0.0; n * n];
    for i in 0..n {
        for j in i..n {
            u[i * n + j] = l2[j * n + i];
        }
    }
    Some(u)
}

/// `δᵀ H δ` for a row `d` and the symmetric `h` (upper triangle filled).
fn quadratic(h: &[f64], k: usize, d: &[f64]) -> f64 {
    let mut s = 0.0;
    for a in 0..k {
        if d[a] == 0.0 {
            continue;
        }
        let row = &h[a * k..(a + 1) * k];
        s += d[a] * d[a] * row[a];
        let mut t = 0.0;
        for b in a + 1..k {
            t += row[b] * d[b];
        }
        s += 2.0 * d[a] * t;
    }
    s
}

/// Codes in −top..=top rounded to nearest on the per-row grids (`w`: N rows of K).
pub fn nearest(w: &[f64], scales: &[f64], k: usize, top: i8) -> Vec<i8> {
    let t = f64::from(top);
    w.iter()
        .enumerate()
        .map(|(i, &x)| (x / scales[i / k]).round_ties_even().clamp(-t, t) as i8)
        .collect()
}

/// The output error energy `Σ δᵀ H δ` of `codes` (δ: each row's weights less its codes
/// times its scale) and the FP32 output energy `Σ wᵀ H w`, for the moments `h` (K×K, upper
/// triangle).
pub fn output_error(w: &[f64], scales: &[f64], codes: &[i8], h: &[f64], k: usize) -> (f64, f64) {
    (0..scales.len())
        .into_par_iter()
        .map(|r| {
            let row = &w[r * k..(r + 1) * k];
            let d: Vec<f64> = row
                .iter()
                .zip(&codes[r * k..(r + 1) * k])
                .map(|(&x, &c)| x - f64::from(c) * scales[r])
                .collect();
            (quadratic(h, k, &d), quadratic(h, k, row))
        })
        .reduce(|| (0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1))
}

/// GPTQ's codes in −top..=top for one weight matrix `w` (N rows of K, f64) with per-row
/// `scales` against
/// the input moments `h` (K×K, upper triangle), row-major N×K. `lambda` shrinks `H` towards
/// its diagonal (`H + λ·diag(H)`): with few calibration rows `H` has fewer dimensions than
/// inputs, and the undamped solution fits the rounding errors into directions those rows
/// never visit; a large `lambda` tends to rounding to nearest.
pub fn solve(w: &[f64], scales: &[f64], h: &[f64], k: usize, lambda: f64, top: i8) -> Vec<i8> {
    let top_code = top;
    let top = f64::from(top);
    let round = |x: f64, s: f64| (x / s).round_ties_even().clamp(-top, top);
    // The full symmetric H, dead inputs (never nonzero) given a unit diagonal.
    let mut full = vec![0.0; k * k];
    for a in 0..k {
        for b in a..k {
            full[a * k + b] = h[a * k + b];
            full[b * k + a] = h[a * k + b];
        }
    }
    for a in 0..k {
        if full[a * k + a] <= 0.0 {
            full[a * k + a] = 1.0;
        }
    }
    // Largest input energy first (the paper's act-order).
    let mut perm: Vec<usize> = (0..k).collect();
    perm.sort_by(|&a, &b| full[b * k + b].total_cmp(&full[a * k + a]));
    let mean_diag = (0..k).map(|a| full[a * k + a]).sum::<f64>() / k.max(1) as f64;
    let mut damp = DAMP * mean_diag;
    let u = loop {
        let mut p = vec![0.0; k * k];
        for (i, &a) in perm.iter().enumerate() {
            for (j, &b) in perm.iter().enumerate() {
                p[i * k + j] = full[a * k + b];
            }
            p[i * k + i] += lambda * full[a * k + a] + damp;
        }
        if let Some(u) = inverse_factor(&p, k) {
            break Some(u);
        }
        if damp > 1e6 * mean_diag.max(1e-30) {
            break None;
        }
        damp *= 10.0;
    };
    let Some(u) = u else {
        return nearest(w, scales, k, top_code);
    };
    let mut codes = vec![0i8; w.len()];
    codes.par_chunks_mut(k).enumerate().for_each(|(r, out)| {
        let s = scales[r];
        let row = &w[r * k..(r + 1) * k];
        let mut x: Vec<f64> = perm.iter().map(|&a| row[a]).collect();
        for i in 0..k {
            let q = round(x[i], s);
            out[perm[i]] = q as i8;
            let e = (x[i] - q * s) / u[i * k + i];
            let ui = &u[i * k..(i + 1) * k];
            for j in i + 1..k {
                x[j] -= e * ui[j];
            }
        }
    });
    codes
}

fn sqnr(energy: f64, err: f64) -> Option<f64> {
    (err > 0.0).then(|| 10.0 * (energy / err).log10())
}

/// Whether `node` is a 1×1 convolution that reads each position alone (one group, stride 1,
/// no padding).
fn pointwise(node: &Node, shape: &[usize]) -> bool {
    shape.len() == 4
        && shape[2] == 1
        && shape[3] == 1
        && node.attr_i("group").unwrap_or(1) == 1
        && node.attr_ints("strides").is_none_or(|s| s.iter().all(|&v| v == 1))
        && node.attr_ints("pads").is_none_or(|p| p.iter().all(|&v| v == 0))
}

impl Quantizer<'_> {
    /// Layers GPTQ solves: MatMul with a constant 2-D weight, Gemm and 1×1 convolutions,
    /// with float32 weights that the plan stores in 4 or 8 bits, one scale per output
    /// channel.
    fn gptq_targets(&self, plan: &QuantPlan) -> Vec<NodeId> {
        let g = self.graph();
        self.order
            .iter()
            .copied()
            .filter(|&n| {
                let node = &g.nodes[n];
                let Some(c) = node.input(1).and_then(|w| g.values[w].constant.as_ref()) else {
                    return false;
                };
                let shape_ok = match node.op.as_str() {
                    "MatMul" => c.shape.len() == 2,
                    "Gemm" | "FusedGemm" => true,
                    "Conv" | "FusedConv" => pointwise(node, &c.shape),
                    _ => false,
                };
                shape_ok
                    && weight_axis(g, node, 1).is_some()
                    && matches!(c.tensor(), Tensor::F32(_))
                    && top(plan.precision(node).weights).is_some()
                    && c.shape.iter().product::<usize>()
                        / c.shape
                            .get(weight_axis(g, node, 1).unwrap_or(0))
                            .copied()
                            .unwrap_or(1)
                            .max(1)
                        <= MAX_INPUTS
            })
            .collect()
    }

    /// Every target's input moments over `samples`.
    fn moments(
        &self,
        plan: &QuantPlan,
        targets: &[NodeId],
        samples: &mut dyn Iterator<Item = Result<(String, HashMap<String, Tensor>), QuantError>>,
        total: usize,
        progress: &dyn Progress,
    ) -> Result<HashMap<NodeId, Moments>, QuantError> {
        let g = self.graph();
        let mut out: HashMap<NodeId, Moments> = HashMap::new();
        let steps = total.max(1) * targets.len();
        for (s_i, s) in samples.enumerate() {
            let (label, sample) = s?;
            let reference = self.forward(&sample, &HashMap::new(), &mut |_, _| Ok(()), true)?;
            for (j, &n) in targets.iter().enumerate() {
                if progress.cancelled() {
                    return Err(QuantError::Cancelled);
                }
                let node = &g.nodes[n];
                progress.update(
                    s_i * targets.len() + j,
                    steps,
                    &format!("GPTQ: input moments of {} on {label}", node.name),
                );
                let (Some(x), Some(c), Some(axis)) = (
                    node.input(0),
                    node.input(1).and_then(|w| g.values[w].constant.as_ref()),
                    weight_axis(g, node, 1),
                ) else {
                    continue;
                };
                let k = c.shape.iter().product::<usize>() / c.shape.get(axis).copied().unwrap_or(1).max(1);
                let Some(t) = self.local_input(plan, x, &reference, &HashMap::new(), true) else {
                    continue;
                };
                let Tensor::F32(a) = t else { continue };
                let a = a.as_standard_layout();
                let Some(data) = a.as_slice() else { continue };
                let Some((rows, at)) = rows_of(node, a.shape(), k) else {
                    continue;
                };
                let mut dense = vec![0f64; rows * k];
                for r in 0..rows {
                    for f in 0..k {
                        dense[r * k + f] = f64::from(data[at(r, f)]);
                    }
                }
                let m = out.entry(n).or_insert_with(|| Moments { k, h: vec![0.0; k * k] });
                if m.k != k {
                    continue;
                }
                self.pool.install(|| {
                    m.h.par_chunks_mut(k).enumerate().for_each(|(p, hrow)| {
                        for row in dense.chunks_exact(k) {
                            let xp = row[p];
                            if xp == 0.0 {
                                continue;
                            }
                            for (hv, &xq) in hrow[p..].iter_mut().zip(&row[p..]) {
                                *hv += xp * xq;
                            }
                        }
                    });
                });
            }
        }
        Ok(out)
    }

    /// A target's weight as rows of output channels (f64, N×K), its per-channel scales
    /// under `plan`, and the map from (row, input) to the tensor's element.
    fn layer_matrix(&self, plan: &QuantPlan, n: NodeId) -> Option<LayerMatrix> {
        let g = self.graph();
        let node = &g.nodes[n];
        let c = node.input(1).and_then(|w| g.values[w].constant.as_ref())?;
        let axis = weight_axis(g, node, 1)?;
        let data: Vec<f32> = c.tensor().to_f32().iter().copied().collect();
        let (channels, k, at) = matrix_index(&c.shape, axis);
        let top = top(plan.precision(node).weights)?;
        let scales = weight_codes(&data, &c.shape, axis, f64::from(top), plan.clip(node)).scales;
        let mut w = vec![0f64; channels * k];
        let mut index = vec![0usize; channels * k];
        for r in 0..channels {
            for f in 0..k {
                index[r * k + f] = at(r, f);
                w[r * k + f] = f64::from(data[at(r, f)]);
            }
        }
        Some(LayerMatrix {
            w,
            scales,
            k,
            top,
            index,
        })
    }

    /// Per target, the shrinkage whose codes (fitted on `fit`) give the smallest output
    /// error on `held`'s moments, when it beats rounding to nearest there: the codes by node
    /// name, the shrinkage chosen by node, and what each layer gained.
    fn choose_codes(
        &self,
        plan: &QuantPlan,
        targets: &[NodeId],
        fit: &HashMap<NodeId, Moments>,
        held: &HashMap<NodeId, Moments>,
        progress: &dyn Progress,
    ) -> Result<Chosen, QuantError> {
        let g = self.graph();
        let mut chosen = Chosen::default();
        for (j, &n) in targets.iter().enumerate() {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            let node = &g.nodes[n];
            progress.update(j, targets.len(), &format!("GPTQ: codes of {}", node.name));
            let (Some(mf), Some(lm)) = (fit.get(&n), self.layer_matrix(plan, n)) else {
                continue;
            };
            let mh = held.get(&n).unwrap_or(mf);
            if mf.k != lm.k || mh.k != lm.k {
                continue;
            }
            let k = lm.k;
            let rtn = nearest(&lm.w, &lm.scales, k, lm.top);
            let (rtn_err, energy) = output_error(&lm.w, &lm.scales, &rtn, &mh.h, k);
            let mut best: Option<(f64, f64, Vec<i8>)> = None;
            for &lambda in &SHRINKAGE {
                let codes = self.pool.install(|| solve(&lm.w, &lm.scales, &mf.h, k, lambda, lm.top));
                let (err, _) = output_error(&lm.w, &lm.scales, &codes, &mh.h, k);
                if err < best.as_ref().map_or(rtn_err, |b| b.1) {
                    best = Some((lambda, err, codes));
                }
            }
            let after = best.as_ref().map_or(rtn_err, |b| b.1);
            chosen.layers.push(LayerGptq {
                node: node.name.clone(),
                inputs: k,
                channels: lm.scales.len(),
                changed: best
                    .as_ref()
                    .map_or(0, |b| b.2.iter().zip(&rtn).filter(|(a, b)| a != b).count()),
                shrinkage: best.as_ref().map(|b| b.0),
                before_db: sqnr(energy, rtn_err),
                after_db: sqnr(energy, after),
            });
            if let Some((lambda, _, codes)) = best {
                chosen.codes.insert(node.name.clone(), lm.encode(&codes));
                chosen.shrinkage.insert(n, lambda);
            }
        }
        Ok(chosen)
    }

    /// GPTQ codes for `plan`'s 4- and 8-bit linear layers (see the module's description), judged
    /// on held-back calibration samples.
    pub fn gptq(
        &self,
        plan: QuantPlan,
        src: &Source,
        pre: &Preprocess,
        progress: &dyn Progress,
    ) -> Result<(QuantPlan, Gptq), QuantError> {
        let t0 = std::time::Instant::now();
        let mut plan = plan;
        plan.gptq.clear();
        let targets = self.gptq_targets(&plan);
        let (fit, judge, held_back) = src.fit_and_judge();
        let mut moments = self.moments(&plan, &targets, &mut fit.samples(self.model, pre), fit.len(), progress)?;
        let held = if held_back > 0 {
            self.moments(
                &plan,
                &targets,
                &mut judge.samples(self.model, pre),
                judge.len(),
                progress,
            )?
        } else {
            HashMap::new()
        };
        let chosen = self.choose_codes(&plan, &targets, &moments, &held, progress)?;
        let mut with = plan.clone();
        with.gptq = chosen.codes;
        let (held_before, held_after) = if with.gptq.is_empty() {
            (None, None)
        } else {
            let cached = self.cache(&mut judge.samples(self.model, pre))?;
            (
                self.output_sqnr(&plan, &cached)?.sqnr_db,
                self.output_sqnr(&with, &cached)?.sqnr_db,
            )
        };
        let kept = !with.gptq.is_empty() && super::no_worse(held_after, held_before);
        if kept && held_back > 0 {
            // Solved again on every sample with the shrinkage each layer chose: the
            // held-back samples' moments added.
            for (n, h) in &held {
                if let Some(m) = moments.get_mut(n) {
                    m.add(h);
                }
            }
            with.gptq.clear();
            for (&n, &lambda) in &chosen.shrinkage {
                let (Some(m), Some(lm)) = (moments.get(&n), self.layer_matrix(&plan, n)) else {
                    continue;
                };
                let codes = self
                    .pool
                    .install(|| solve(&lm.w, &lm.scales, &m.h, lm.k, lambda, lm.top));
                with.gptq.insert(self.graph().nodes[n].name.clone(), lm.encode(&codes));
            }
        }
        let report = Gptq {
            layers: chosen.layers,
            held_before_db: held_before,
            held_after_db: held_after,
            kept,
            held_back,
            seconds: t0.elapsed().as_secs_f64(),
        };
        Ok((if kept { with } else { plan }, report))
    }
}

/// A layer's weight as a matrix ([`Quantizer::layer_matrix`]).
struct LayerMatrix {
    w: Vec<f64>,
    scales: Vec<f64>,
    k: usize,
    /// The largest code (7 or 127).
    top: i8,
    /// Element (row r, input f)'s index in the weight tensor, at `r·k + f`.
    index: Vec<usize>,
}

impl LayerMatrix {
    /// Row-major codes as the plan's text, in the weight tensor's order.
    fn encode(&self, codes: &[i8]) -> String {
        let mut t = vec![0i8; codes.len()];
        for (&i, &c) in self.index.iter().zip(codes) {
            t[i] = c;
        }
        encode(&t, self.top)
    }
}

/// What [`Quantizer::choose_codes`] chose.
#[derive(Default)]
struct Chosen {
    codes: BTreeMap<String, String>,
    shrinkage: HashMap<NodeId, f64>,
    layers: Vec<LayerGptq>,
}

#[cfg(test)]
mod tests {
    use super::super::equalize::tests::{sequential, uniform};
    use super::super::{Calibration, LayerPrecision};
    use super::*;
    use crate::progress::Silent;
    use crate::quant::data::{Preprocess, Source};

    /// Input moments of `rows` random rows of `k` features sharing one strong component
    /// (what a layer after a mixing layer sees), upper triangle.
    fn correlated(k: usize, rows: usize, seed: u64) -> Vec<f64> {
        let mut rnd = uniform(seed);
        let mut h = vec![0.0; k * k];
        for _ in 0..rows {
            let common = f64::from(rnd());
            let x: Vec<f64> = (0..k).map(|_| common + 0.3 * f64::from(rnd())).collect();
            for a in 0..k {
                for b in a..k {
                    h[a * k + b] += x[a] * x[b];
                }
            }
        }
        h
    }

    #[test]
    fn codes_round_trip_as_text() {
        let codes: Vec<i8> = (-7..=7).collect();
        assert_eq!(decode(&encode(&codes, 7), 7), Some(codes));
        assert_eq!(encode(&[-1, 0, 7, -7], 7), "f079");
        // 8 is −8, outside the symmetric grid; `g` is no digit.
        assert_eq!(decode("08", 7), None);
        assert_eq!(decode("0g", 7), None);
        let codes: Vec<i8> = (-127..=127).collect();
        assert_eq!(decode(&encode(&codes, 127), 127), Some(codes));
        assert_eq!(encode(&[-1, 0, 127, -127], 127), "ff007f81");
        assert_eq!(decode("80", 127), None);
        assert_eq!(decode("7", 127), None);
    }

    /// On correlated inputs GPTQ's codes give a smaller output error than rounding to
    /// nearest; on uncorrelated inputs (diagonal moments) nothing is moved, so the codes are
    /// the nearest ones.
    #[test]
    fn solve_lowers_the_output_error_and_leaves_uncorrelated_inputs_alone() {
        let (n, k) = (12, 48);
        let mut rnd = uniform(3);
        let w: Vec<f64> = (0..n * k).map(|_| f64::from(rnd())).collect();
        let scales: Vec<f64> = (0..n)
            .map(|r| w[r * k..(r + 1) * k].iter().fold(0f64, |m, x| m.max(x.abs())) / 7.0)
            .collect();
        let h = correlated(k, 400, 9);
        let codes = solve(&w, &scales, &h, k, 0.0, 7);
        let near = nearest(&w, &scales, k, 7);
        let (err, energy) = output_error(&w, &scales, &codes, &h, k);
        let (rtn, _) = output_error(&w, &scales, &near, &h, k);
        assert!(codes.iter().all(|c| (-7..=7).contains(c)));
        assert!(energy > 0.0 && rtn > 0.0);
        assert!(err < 0.5 * rtn, "GPTQ {err} against nearest {rtn}");
        assert_ne!(codes, near);
        // Shrinking H towards its diagonal moves the codes towards the nearest ones.
        let shrunk = solve(&w, &scales, &h, k, 1000.0, 7);
        let differ = |c: &[i8]| c.iter().zip(&near).filter(|(a, b)| a != b).count();
        assert!(
            differ(&shrunk) < differ(&codes) / 4,
            "{} {}",
            differ(&shrunk),
            differ(&codes)
        );
        let mut diag = vec![0.0; k * k];
        for a in 0..k {
            diag[a * k + a] = 1.0 + a as f64;
        }
        assert_eq!(solve(&w, &scales, &diag, k, 0.0, 7), near);
        // 8-bit codes on a 127-step grid: the same gain in kind.
        let fine: Vec<f64> = scales.iter().map(|s| s * 7.0 / 127.0).collect();
        let codes = solve(&w, &fine, &h, k, 0.0, 127);
        let near = nearest(&w, &fine, k, 127);
        let (err, _) = output_error(&w, &fine, &codes, &h, k);
        let (rtn, _) = output_error(&w, &fine, &near, &h, k);
        assert!(codes.iter().all(|c| (-127..=127).contains(c)));
        assert!(err < 0.5 * rtn, "GPTQ {err} against nearest {rtn}");
    }

    /// x → MatMul by a mixing matrix (kept float) → MatMul by a 4-bit weight: GPTQ solves the
    /// second, raises its output SQNR, and the simulator's weight is its codes on the plan's
    /// per-channel grid; `check` refuses codes that do not fit.
    #[test]
    fn gptq_raises_a_correlated_layers_sqnr_and_its_codes_reach_the_simulator() {
        let mut rnd = uniform(11);
        let mix: Vec<f32> = (0..32 * 32)
            .map(|i| if i / 32 == i % 32 { 1.0 } else { 0.0 } + 0.6 * (1.0 + rnd()))
            .collect();
        let w: Vec<f32> = (0..32 * 24).map(|_| rnd()).collect();
        let m = sequential(
            &[1, 16, 32],
            vec![
                ("MatMul", vec![Tensor::from_f32(&[32, 32], mix).expect("mix")], vec![]),
                ("MatMul", vec![Tensor::from_f32(&[32, 24], w).expect("w")], vec![]),
            ],
        );
        let q = Quantizer::new(&m, 1).expect("quantizer");
        let src = Source::Synthetic(6);
        let pre = Preprocess::default();
        let stats = q
            .observe(&mut src.samples(&m, &pre), src.len(), &Silent)
            .expect("calibrates");
        let mut plan = q.plan_from_stats(&stats, "w4a16", Calibration::MinMax).expect("plan");
        plan.layers.insert("n0".into(), LayerPrecision::FLOAT);
        let (solved, r) = q.gptq(plan.clone(), &src, &pre, &Silent).expect("solves");
        assert_eq!(r.held_back, 2);
        assert_eq!(r.layers.len(), 1, "{r:?}");
        let l = &r.layers[0];
        assert_eq!((l.node.as_str(), l.inputs, l.channels), ("n1", 32, 24));
        let (b, a) = (l.before_db.expect("error"), l.after_db.expect("error"));
        assert!(a > b + 1.0, "{l:?}");
        assert!(l.changed > 0);
        assert!(l.shrinkage.is_some(), "{l:?}");
        assert!(
            r.summary().contains("GPTQ weight codes: 1 of 1 layers"),
            "{}",
            r.summary()
        );
        assert!(r.kept, "{r:?}");
        assert!(r.held_after_db > r.held_before_db, "{r:?}");
        check(&m.graph, &solved.gptq).expect("its own codes fit");
        // The simulator's weight is the codes times the per-channel scales.
        let g = &m.graph;
        let node = g.nodes.iter().find(|n| n.name == "n1").expect("n1");
        let wv = node.input(1).expect("weight");
        let c = g.values[wv].constant.as_ref().expect("constant");
        let data: Vec<f32> = c.tensor().to_f32().iter().copied().collect();
        let codes = plan_codes(&solved, node, &data, &c.shape, 1).expect("codes");
        let sim = q.quantized_weights(&solved)[&wv].to_f32();
        let rtn = q.quantized_weights(&plan)[&wv].to_f32();
        assert_ne!(sim, rtn);
        for (i, (&code, &f)) in codes.codes.iter().zip(sim.iter()).enumerate() {
            assert_eq!((f64::from(code) * codes.scales[i % 24]) as f32, f, "element {i}");
        }
        // 4-bit codes are not read under 8-bit weights, nor under float.
        let mut promoted = solved.clone();
        promoted.layers.insert("n1".into(), LayerPrecision::INT8);
        assert!(plan_codes(&promoted, node, &data, &c.shape, 1).is_none());
        promoted.layers.insert("n1".into(), LayerPrecision::FLOAT);
        assert!(plan_codes(&promoted, node, &data, &c.shape, 1).is_none());
        // With 8-bit weights: two digits per code, on the 127-step grid.
        let mut plan8 = plan.clone();
        plan8.default = LayerPrecision::INT16;
        let (solved8, r8) = q.gptq(plan8, &src, &pre, &Silent).expect("solves");
        assert!(r8.layers[0].after_db > r8.layers[0].before_db, "{r8:?}");
        assert!(r8.kept, "{r8:?}");
        assert_eq!(solved8.gptq["n1"].len(), 2 * 32 * 24);
        let codes = plan_codes(&solved8, node, &data, &c.shape, 1).expect("codes");
        assert!(codes.codes.iter().any(|c| c.abs() > 7));
        check(g, &solved8.gptq).expect("its own codes fit");
        let wrong = |name: &str, text: String| check(g, &BTreeMap::from([(name.to_owned(), text)]));
        assert!(
            wrong("nope", "0".into())
                .expect_err("no node")
                .to_string()
                .contains("nope")
        );
        assert!(wrong("n1", "0".repeat(32 * 24 + 1)).is_err());
        assert!(wrong("n1", "8".repeat(32 * 24)).is_err());
        assert!(wrong("n1", "f".repeat(32 * 24)).is_ok());
        assert!(wrong("n1", "81".repeat(32 * 24)).is_ok());
        assert!(wrong("n1", "80".repeat(32 * 24)).is_err());
    }
}
