//! Number formats and quantize-dequantize (fake quantization). Rounding is half to even, as
//! ONNX QuantizeLinear; integer codes are widened to i64 before the zero point is subtracted.

use serde::{Deserialize, Serialize};

/// How a layer's output activation is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ActFormat {
    /// 8-bit asymmetric (uint8 with a zero point).
    Int8,
    /// 16-bit asymmetric.
    Int16,
    Fp16,
    Float,
}

/// How a layer's weights are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WeightFormat {
    /// int8 symmetric, one scale per output channel (codes -127..=127).
    Int8,
    /// int4 symmetric (codes -7..=7), one scale per group of this many weights along the
    /// reduction axis; 0 (what `int4` is): one scale per output channel, the grid TFLite's
    /// int4 kernels and the QDQ export store, so the simulation is the deployed grid.
    Int4 {
        group: usize,
    },
    /// uint8 asymmetric, one scale and zero point for the whole tensor (onnxruntime's
    /// per-tensor default for weights).
    Uint8,
    Fp16,
    Float,
}

impl ActFormat {
    /// Grid steps of an integer format.
    pub fn levels(self) -> Option<f64> {
        match self {
            Self::Int8 => Some(255.0),
            Self::Int16 => Some(65535.0),
            Self::Fp16 | Self::Float => None,
        }
    }
    /// Bytes per element.
    pub fn bytes(self) -> f64 {
        match self {
            Self::Int8 => 1.0,
            Self::Int16 | Self::Fp16 => 2.0,
            Self::Float => 4.0,
        }
    }
}

impl WeightFormat {
    pub fn bytes(self) -> f64 {
        match self {
            Self::Int8 | Self::Uint8 => 1.0,
            Self::Int4 { .. } => 0.5,
            Self::Fp16 => 2.0,
            Self::Float => 4.0,
        }
    }
}

/// Affine parameters of an asymmetric integer grid: `x ≈ (q − zero_point) · scale`, `q` in
/// `0..=levels`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Affine {
    pub scale: f64,
    pub zero_point: i64,
    pub levels: i64,
}

impl Affine {
    /// The grid over `[lo, hi]` (which must hold 0; 0 stays exactly representable).
    pub fn from_range(lo: f64, hi: f64, levels: f64) -> Self {
        let (lo, hi) = (lo.min(0.0), hi.max(0.0));
        let levels_i = levels as i64;
        if hi - lo <= 0.0 {
            return Self {
                scale: 1.0,
                zero_point: 0,
                levels: levels_i,
            };
        }
        let scale = (hi - lo) / levels;
        let zero_point = ((-lo / scale).round_ties_even() as i64).clamp(0, levels_i);
        Self {
            scale,
            zero_point,
            levels: levels_i,
        }
    }

    #[inline]
    pub fn code(&self, x: f32) -> i64 {
        ((f64::from(x) / self.scale).round_ties_even() as i64 + self.zero_point).clamp(0, self.levels)
    }

    #[inline]
    pub fn qdq(&self, x: f32) -> f32 {
        ((self.code(x) - self.zero_point) as f64 * self.scale) as f32
    }
}

/// Quantize-dequantizes an activation in place.
pub fn qdq_activation(data: &mut [f32], format: ActFormat, range: (f64, f64)) {
    match format {
        ActFormat::Float => {}
        ActFormat::Fp16 => data.iter_mut().for_each(|v| *v = half::f16::from_f32(*v).to_f32()),
        ActFormat::Int8 | ActFormat::Int16 => {
            let a = Affine::from_range(range.0, range.1, format.levels().unwrap_or(255.0));
            for v in data.iter_mut() {
                *v = a.qdq(*v);
            }
        }
    }
}

/// The smallest per-channel weight range, relative to the tensor's largest.
pub const WEIGHT_SCALE_FLOOR: f64 = 1e-5;

/// Applies per-channel clipping factors (`clip[c]` for the `groups` slots of channel `c`;
/// empty: none) to per-slot max-abs ranges, then the floor of [`WEIGHT_SCALE_FLOOR`] times
/// the largest: what every weight grid (simulated, integer, exported) is derived from.
pub fn clip_ranges(amax: &mut [f64], groups: usize, clip: &[f32]) {
    if !clip.is_empty() {
        for (k, m) in amax.iter_mut().enumerate() {
            if let Some(&f) = clip.get(k / groups.max(1)) {
                *m *= f64::from(f);
            }
        }
    }
    // A channel of (near-)zero weights keeps a scale no finer than 1e-5 of the tensor's
    // largest: else its int32 bias grid (input scale × weight scale) would underflow and
    // the bias saturate.
    let floor = amax.iter().copied().fold(0.0, f64::max) * WEIGHT_SCALE_FLOOR;
    for m in amax {
        *m = m.max(floor);
    }
}

/// Quantize-dequantizes a weight tensor (`shape`, output channels on `axis`); returns it.
/// `clip`: per-output-channel factors on the range (empty: none), as a plan's
/// `weight_clip` gives them.
pub fn qdq_weight(data: &[f32], shape: &[usize], axis: usize, format: WeightFormat, clip: &[f32]) -> Vec<f32> {
    let mut out = data.to_vec();
    match format {
        WeightFormat::Float => {}
        WeightFormat::Fp16 => out.iter_mut().for_each(|v| *v = half::f16::from_f32(*v).to_f32()),
        WeightFormat::Uint8 => {
            let (lo, hi) = data
                .iter()
                .fold((0f64, 0f64), |(a, b), &v| (a.min(f64::from(v)), b.max(f64::from(v))));
            let a = Affine::from_range(lo, hi, 255.0);
            for (o, &v) in out.iter_mut().zip(data) {
                // The code as stored (u8), widened before the zero point is subtracted.
                let code = a.code(v) as u8;
                *o = ((i64::from(code) - a.zero_point) as f64 * a.scale) as f32;
            }
        }
        WeightFormat::Int8 | WeightFormat::Int4 { .. } => {
            let (qmax, group) = match format {
                WeightFormat::Int4 { group: 0 } => (7.0, usize::MAX),
                WeightFormat::Int4 { group } => (7.0, group),
                _ => (127.0, usize::MAX),
            };
            let channels = shape.get(axis).copied().unwrap_or(1).max(1);
            let inner: usize = shape.get(axis + 1..).map_or(1, |s| s.iter().product());
            // Element i: channel (i / inner) % channels, index along the reduction
            // (i / (inner·channels))·inner + i % inner.
            let per_channel = data.len() / channels.max(1);
            let groups = per_channel.div_ceil(group.min(per_channel.max(1)));
            let gsize = group.min(per_channel.max(1));
            let mut amax = vec![0f64; channels * groups];
            let slot = |i: usize| {
                let c = (i / inner) % channels;
                let r = (i / (inner * channels)) * inner + i % inner;
                c * groups + r / gsize
            };
            for (i, &v) in data.iter().enumerate() {
                let s = slot(i);
                amax[s] = amax[s].max(f64::from(v).abs());
            }
            clip_ranges(&mut amax, groups, clip);
            for (i, v) in out.iter_mut().enumerate() {
                let m = amax[slot(i)];
                if m > 0.0 {
                    let scale = m / qmax;
                    let q = (f64::from(*v) / scale).round_ties_even().clamp(-qmax, qmax);
                    *v = (q * scale) as f32;
                }
            }
        }
    }
    out
}

/// Error accumulators over any number of batches, in f64.
#[derive(Clone, Copy, Debug, Default)]
pub struct ErrorStats {
    pub ref_sq: f64,
    pub err_sq: f64,
    pub test_sq: f64,
    pub dot: f64,
    pub max_abs_err: f64,
    pub count: u64,
}

impl ErrorStats {
    pub fn add(&mut self, reference: &[f32], test: &[f32]) {
        for (&r, &t) in reference.iter().zip(test) {
            let (r, t) = (f64::from(r), f64::from(t));
            let d = r - t;
            self.ref_sq += r * r;
            self.err_sq += d * d;
            self.test_sq += t * t;
            self.dot += r * t;
            self.max_abs_err = self.max_abs_err.max(d.abs());
        }
        self.count += reference.len().min(test.len()) as u64;
    }

    /// Adds the sums of another batch.
    pub fn merge(&mut self, o: &ErrorStats) {
        self.ref_sq += o.ref_sq;
        self.err_sq += o.err_sq;
        self.test_sq += o.test_sq;
        self.dot += o.dot;
        self.max_abs_err = self.max_abs_err.max(o.max_abs_err);
        self.count += o.count;
    }

    /// 20·log10(‖ref‖/‖ref − x‖); `None` when the error is exactly zero (no finite value).
    pub fn sqnr_db(&self) -> Option<f64> {
        if self.err_sq == 0.0 {
            return None;
        }
        Some(10.0 * (self.ref_sq / self.err_sq).log10())
    }

    pub fn cosine(&self) -> f64 {
        if self.ref_sq == 0.0 || self.test_sq == 0.0 {
            return if self.ref_sq == self.test_sq { 1.0 } else { 0.0 };
        }
        self.dot / (self.ref_sq.sqrt() * self.test_sq.sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affine_keeps_zero_and_range() {
        let a = Affine::from_range(-1.0, 3.0, 255.0);
        assert_eq!(a.qdq(0.0), 0.0);
        assert!((a.qdq(3.0) - 3.0).abs() < a.scale as f32);
        assert!((a.qdq(10.0) - 3.0).abs() < a.scale as f32);
        assert!((a.qdq(-5.0) - -1.0).abs() < a.scale as f32);
    }

    #[test]
    fn per_channel_weights_use_their_own_scale() {
        // Two output channels with very different magnitudes.
        let w = [1.0f32, -0.5, 0.25, 0.001, 0.002, -0.003];
        let q = qdq_weight(&w, &[2, 3], 0, WeightFormat::Int8, &[]);
        for (a, b) in w.iter().zip(&q) {
            assert!((a - b).abs() <= a.abs().max(0.003) / 127.0, "{a} {b}");
        }
        // The same along the last axis (MatMul weights [K, N]).
        let q = qdq_weight(&[1.0, 0.001, -0.5, 0.002], &[2, 2], 1, WeightFormat::Int8, &[]);
        assert!((q[1] - 0.001).abs() < 0.002 / 127.0);
    }

    #[test]
    fn int4_groups() {
        let w: Vec<f32> = (0..64)
            .map(|i| if i < 32 { 1.0 } else { 0.01 } * (i as f32 - 31.5))
            .collect();
        let q = qdq_weight(&w, &[1, 64], 0, WeightFormat::Int4 { group: 32 }, &[]);
        // The second group keeps its own, 100× finer, scale.
        assert!((q[40] - w[40]).abs() <= 0.32 / 7.0);
        // Group 0: one scale for the channel, set by its largest weight (31.5 / 7).
        let q = qdq_weight(&w, &[1, 64], 0, WeightFormat::Int4 { group: 0 }, &[]);
        assert_eq!(q[40], 0.0);
        assert!((q[0] + 31.5).abs() < 1e-5);
        let codes = super::super::params::weight_codes(&w, &[1, 64], 0, 7.0, &[]);
        for (c, v) in codes.codes.iter().zip(&q) {
            assert_eq!((f64::from(*c) * codes.scales[0]) as f32, *v);
        }
    }
}
