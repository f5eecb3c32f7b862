//! Integer parameters as a device stores them: storage type, float32 scale(s), zero
//! point(s) and axis, derived from a plan's float clipping ranges by the TFLite int8
//! scheme (activations int8 asymmetric in −128..127, weights int8 symmetric per output
//! channel in −127..127, biases int32 on the grid of input scale × weight scale), and the
//! identity of the graph a plan belongs to.

use super::scheme::{ActFormat, Affine};
use crate::ir::{Attr, Model};

pub use crate::program::{IntType, QParams};

/// The grids a plan's activation formats put activations on.
impl QParams {
    /// The integer grid of an activation's fake-quant range. int8: the same steps as the
    /// simulator's unsigned grid, shifted by 128, with the scale rounded to float32. int16:
    /// TFLite's 16×8 scheme, symmetric with zero point 0 (`max(|lo|, |hi|) / 32767`), which
    /// the reference kernels require.
    pub fn activation(format: ActFormat, range: (f64, f64)) -> Option<Self> {
        match format {
            ActFormat::Int8 => {
                let a = Affine::from_range(range.0, range.1, 255.0);
                Some(Self::per_tensor(
                    IntType::I8,
                    a.scale as f32,
                    (a.zero_point - 128) as i32,
                ))
            }
            ActFormat::Int16 => {
                let m = range.0.abs().max(range.1.abs());
                let s = if m > 0.0 { m / 32767.0 } else { 1.0 };
                Some(Self::per_tensor(IntType::I16, s as f32, 0))
            }
            _ => None,
        }
    }

    /// The format of an activation grid.
    pub fn format(&self) -> ActFormat {
        if self.ty == IntType::I16 {
            ActFormat::Int16
        } else {
            ActFormat::Int8
        }
    }
}

/// A per-output-channel int8 weight: codes in −127..127 and one scale per channel, the
/// same grid as the simulator's `qdq_weight` for `WeightFormat::Int8`.
pub struct WeightCodes {
    pub codes: Vec<i32>,
    /// Per channel, as the simulator computes it (f64).
    pub scales: Vec<f64>,
}

/// Per-channel symmetric int8 codes of `data` (`shape`, channels on `axis`), ranges scaled
/// by `clip` (per channel; empty: none).
pub fn int8_weight_codes(data: &[f32], shape: &[usize], axis: usize, clip: &[f32]) -> WeightCodes {
    weight_codes(data, shape, axis, 127.0, clip)
}

/// Per-channel symmetric codes in `−top..=top` (127 for int8, 7 for int4), ranges scaled by
/// `clip` (per channel; empty: none) as the simulator's `qdq_weight` scales them.
pub fn weight_codes(data: &[f32], shape: &[usize], axis: usize, top: f64, clip: &[f32]) -> WeightCodes {
    let channels = shape.get(axis).copied().unwrap_or(1).max(1);
    let inner: usize = shape.get(axis + 1..).map_or(1, |s| s.iter().product::<usize>().max(1));
    let mut amax = vec![0f64; channels];
    for (i, &v) in data.iter().enumerate() {
        let c = (i / inner) % channels;
        amax[c] = amax[c].max(f64::from(v).abs());
    }
    super::scheme::clip_ranges(&mut amax, 1, clip);
    let scales: Vec<f64> = amax.iter().map(|m| if *m > 0.0 { m / top } else { 1.0 }).collect();
    let codes = data
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let s = scales[(i / inner) % channels];
            (f64::from(v) / s).round_ties_even().clamp(-top, top) as i32
        })
        .collect();
    WeightCodes { codes, scales }
}

/// One per-tensor symmetric int8 grid for a constant operand (Add/Mul by a constant).
pub fn int8_operand(data: &[f32]) -> (Vec<i64>, QParams) {
    operand_codes(data, IntType::I8)
}

/// One per-tensor symmetric grid of `ty` (int8: −127..127, int16: −32767..32767) for a
/// constant operand of an element-wise op.
pub fn operand_codes(data: &[f32], ty: IntType) -> (Vec<i64>, QParams) {
    let top = if ty == IntType::I16 { 32767.0 } else { 127.0 };
    let amax = data.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
    let s = if amax > 0.0 { amax / top } else { 1.0 };
    let codes = data
        .iter()
        .map(|&v| (f64::from(v) / s).round_ties_even().clamp(-top, top) as i64)
        .collect();
    (codes, QParams::per_tensor(ty, s as f32, 0))
}

/// Bias codes on the grid `s_in · s_w[c]` (float32 scales widened to f64, as the converter
/// writes them), saturated to int32 (or int64, under 16-bit activations).
pub fn bias_codes(bias: &[f32], s_in: f32, s_w: &[f32], ty: IntType) -> Vec<i64> {
    let (lo, hi) = if ty == IntType::I64 {
        (i64::MIN as f64, i64::MAX as f64)
    } else {
        (f64::from(i32::MIN), f64::from(i32::MAX))
    };
    bias.iter()
        .enumerate()
        .map(|(c, &b)| {
            let s = f64::from(s_in) * f64::from(s_w.get(c % s_w.len().max(1)).copied().unwrap_or(1.0));
            if s > 0.0 {
                (f64::from(b) / s).round_ties_even().clamp(lo, hi) as i64
            } else {
                0
            }
        })
        .collect()
}

/// The identity of an optimized graph: a 64-bit FNV-1a hash over its nodes (op, name,
/// attributes, input and output names), its inputs and outputs, and every constant's
/// shape and bytes, written as 16 hex digits. A plan records it; a plan used on another
/// graph is an error.
pub fn graph_id(model: &Model) -> String {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    let g = &model.graph;
    let name = |v: Option<usize>| v.map_or("", |v| g.values[v].name.as_str());
    for n in &g.nodes {
        h.str(&n.op);
        h.str(&n.name);
        for (k, a) in &n.attrs {
            h.str(k);
            match a {
                Attr::Graph(_) | Attr::Graphs(_) => h.str("graph"),
                a => h.str(&a.summary()),
            }
        }
        for i in &n.inputs {
            h.str(name(*i));
        }
        h.str("->");
        for o in &n.outputs {
            h.str(name(*o));
        }
    }
    for &i in g.inputs.iter().chain(&g.outputs) {
        h.str(&g.values[i].name);
    }
    for v in &g.values {
        if let Some(c) = &v.constant {
            h.str(&v.name);
            h.str(&format!("{:?}{:?}", c.dtype, c.shape));
            h.bytes(c.raw());
        }
    }
    format!("{:016x}", h.0)
}

/// The identity of `model`, or `Err((plan's, model's))` when the plan records another
/// graph (plans written before graphs were recorded pass).
pub fn check_graph(plan: &super::QuantPlan, model: &Model) -> Result<String, (String, String)> {
    let id = graph_id(model);
    match &plan.graph {
        Some(p) if *p != id => Err((p.clone(), id)),
        _ => Ok(id),
    }
}

struct Fnv(u64);

impl Fnv {
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
        self.bytes(&[0xff]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::scheme::{WeightFormat, qdq_weight};

    #[test]
    fn weight_codes_are_the_simulators_grid() {
        let w: Vec<f32> = (0..24).map(|i| ((i * 7919) % 23) as f32 / 7.0 - 1.5).collect();
        for (shape, axis) in [(vec![4usize, 6], 0usize), (vec![2, 3, 4], 2), (vec![6, 4], 1)] {
            let q = qdq_weight(&w, &shape, axis, WeightFormat::Int8, &[]);
            let c = int8_weight_codes(&w, &shape, axis, &[]);
            let inner: usize = shape[axis + 1..].iter().product();
            for (i, (&code, &fq)) in c.codes.iter().zip(&q).enumerate() {
                let s = c.scales[(i / inner) % shape[axis]];
                assert_eq!((f64::from(code) * s) as f32, fq, "element {i} of {shape:?} axis {axis}");
                assert!(code.abs() <= 127);
            }
        }
    }

    #[test]
    fn activation_grid_is_the_unsigned_grid_shifted() {
        let p = QParams::activation(ActFormat::Int8, (-1.0, 3.0)).expect("int8");
        let a = Affine::from_range(-1.0, 3.0, 255.0);
        assert_eq!(p.zp(), (a.zero_point - 128) as i32);
        assert_eq!(p.s(), a.scale as f32);
        assert_eq!(p.real(p.zp()), 0.0);
    }
}
