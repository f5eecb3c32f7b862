//! Streaming range observers: one pass over the calibration data with bounded memory. Each
//! activation keeps its exact min and max, an exponential moving average of per-batch
//! extremes, and a fixed-size histogram whose range grows by whole doublings (old bins merge
//! exactly into new ones), so no activation is ever stored.

use serde::{Deserialize, Serialize};

/// Bins per histogram.
pub const BINS: usize = 2048;

/// How an activation's clipping range is chosen from its statistics.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Calibration {
    /// The extremes seen.
    MinMax,
    /// Exponential moving average (factor 0.01) of each batch's extremes, as TensorFlow's.
    MovingAverage,
    /// Both tails clipped at this percentile (e.g. 99.999).
    Percentile(f64),
    /// The range that minimises the expected squared error (clipping plus rounding) of
    /// the quantized values on the histogram.
    Mse,
    /// The symmetric threshold that minimises the KL divergence between the clipped and the
    /// quantized distribution (TensorRT's entropy calibration).
    Entropy,
}

impl Calibration {
    pub fn name(self) -> String {
        match self {
            Self::MinMax => "minmax".into(),
            Self::MovingAverage => "moving-average".into(),
            Self::Percentile(p) => format!("percentile-{p}"),
            Self::Mse => "mse".into(),
            Self::Entropy => "entropy".into(),
        }
    }

    /// Parses `minmax`, `moving-average`, `percentile[-P]`, `mse`, `entropy`.
    pub fn parse(s: &str) -> Result<Self, super::SpecError> {
        Ok(match s {
            "minmax" => Self::MinMax,
            "moving-average" => Self::MovingAverage,
            "percentile" => Self::Percentile(99.999),
            "mse" => Self::Mse,
            "entropy" => Self::Entropy,
            _ => match s.strip_prefix("percentile-").map(str::parse::<f64>) {
                Some(Ok(p)) if p > 50.0 && p <= 100.0 => Self::Percentile(p),
                _ => return Err(super::SpecError::Calibration(s.to_owned())),
            },
        })
    }
}

/// A batch held a NaN or an infinity (the value).
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("holds a non-finite value ({0})")]
pub struct NonFinite(pub f32);

/// Statistics of one tensor over the calibration set.
#[derive(Clone, Debug)]
pub struct Observer {
    pub min: f64,
    pub max: f64,
    ema: Option<(f64, f64)>,
    /// Histogram range: `[lo, lo + width)` in `BINS` equal bins.
    lo: f64,
    width: f64,
    bins: Vec<u64>,
    pub count: u64,
}

impl Default for Observer {
    fn default() -> Self {
        Self::new()
    }
}

impl Observer {
    pub fn new() -> Self {
        Self {
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            ema: None,
            lo: 0.0,
            width: 0.0,
            bins: vec![0; BINS],
            count: 0,
        }
    }

    /// Adds one batch. Non-finite values are an error (the caller names the tensor).
    pub fn observe(&mut self, data: &[f32]) -> Result<(), NonFinite> {
        if data.is_empty() {
            return Ok(());
        }
        let (mut bmin, mut bmax) = (f32::INFINITY, f32::NEG_INFINITY);
        for &v in data {
            if !v.is_finite() {
                return Err(NonFinite(v));
            }
            bmin = bmin.min(v);
            bmax = bmax.max(v);
        }
        let (bmin, bmax) = (f64::from(bmin), f64::from(bmax));
        self.min = self.min.min(bmin);
        self.max = self.max.max(bmax);
        self.ema = Some(match self.ema {
            None => (bmin, bmax),
            Some((a, b)) => (a + 0.01 * (bmin - a), b + 0.01 * (bmax - b)),
        });
        self.cover(bmin, bmax);
        let scale = BINS as f64 / self.width;
        for &v in data {
            let i = ((f64::from(v) - self.lo) * scale) as usize;
            self.bins[i.min(BINS - 1)] += 1;
        }
        self.count += data.len() as u64;
        Ok(())
    }

    /// Grows the histogram range to hold `[a, b]`: the width doubles `j` times and the old
    /// range lands on a whole multiple `p` of its width, so every old bin maps into exactly one
    /// new bin.
    fn cover(&mut self, a: f64, b: f64) {
        if self.width == 0.0 {
            let span = (b - a).max(a.abs().max(b.abs()) * 1e-6).max(1e-12);
            self.lo = a;
            self.width = span * (1.0 + 1e-9);
            return;
        }
        if a >= self.lo && b < self.lo + self.width {
            return;
        }
        let w = self.width;
        let mut j = 0u32;
        loop {
            let f = 2f64.powi(j as i32);
            // Smallest p putting the new low end at or below a, and check the top.
            let p = ((self.lo - a) / w).ceil().max(0.0);
            if p < f && self.lo - p * w + f * w > b {
                let (p, f) = (p as usize, f as usize);
                let mut nb = vec![0u64; BINS];
                for (i, &c) in self.bins.iter().enumerate() {
                    nb[(p * BINS + i) / f] += c;
                }
                self.bins = nb;
                self.lo -= p as f64 * w;
                self.width = f as f64 * w;
                return;
            }
            j += 1;
        }
    }

    fn center(&self, i: usize) -> f64 {
        self.lo + (i as f64 + 0.5) * self.width / BINS as f64
    }

    /// The clipping range `[lo, hi]` (always holding 0) for a grid of `levels` steps.
    pub fn range(&self, method: Calibration, levels: f64, symmetric: bool) -> (f64, f64) {
        if self.count == 0 {
            return (0.0, 0.0);
        }
        let (lo, hi) = match method {
            Calibration::MinMax => (self.min, self.max),
            Calibration::MovingAverage => self.ema.unwrap_or((self.min, self.max)),
            Calibration::Percentile(p) => (self.quantile(1.0 - p / 100.0), self.quantile(p / 100.0)),
            Calibration::Mse => self.mse_range(levels, symmetric),
            Calibration::Entropy => {
                let t = self.entropy_threshold(levels);
                (self.min.max(-t), self.max.min(t))
            }
        };
        let (lo, hi) = (lo.min(0.0), hi.max(0.0));
        if symmetric {
            let m = lo.abs().max(hi);
            (-m, m)
        } else {
            (lo, hi)
        }
    }

    /// The value below which a fraction `q` of the samples lie (linear within a bin).
    fn quantile(&self, q: f64) -> f64 {
        let target = q.clamp(0.0, 1.0) * self.count as f64;
        let mut acc = 0.0;
        let bw = self.width / BINS as f64;
        for (i, &c) in self.bins.iter().enumerate() {
            let c = c as f64;
            if acc + c >= target && c > 0.0 {
                let v = self.lo + (i as f64 + (target - acc) / c) * bw;
                return v.clamp(self.min, self.max);
            }
            acc += c;
        }
        self.max
    }

    /// Expected squared error of quantizing the histogram to `[lo, hi]` with `levels` steps.
    fn expected_mse(&self, lo: f64, hi: f64, levels: f64) -> f64 {
        let step = (hi - lo) / levels;
        let noise = step * step / 12.0;
        let mut e = 0.0;
        for (i, &c) in self.bins.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let v = self.center(i);
            let d = if v < lo {
                (lo - v) * (lo - v)
            } else if v > hi {
                (v - hi) * (v - hi)
            } else {
                noise
            };
            e += c as f64 * d;
        }
        e
    }

    /// Searches shrink factors for each end of the range (coarse, then fine around the best).
    fn mse_range(&self, levels: f64, symmetric: bool) -> (f64, f64) {
        let (lo0, hi0) = (self.min.min(0.0), self.max.max(0.0));
        if symmetric {
            let m = lo0.abs().max(hi0);
            let best = (1..=200)
                .map(|k| f64::from(k) / 200.0)
                .map(|t| (t, self.expected_mse(-m * t, m * t, levels)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map_or(1.0, |b| b.0);
            return (-m * best, m * best);
        }
        let grid: Vec<f64> = (1..=50).map(|k| f64::from(k) / 50.0).collect();
        let mut best = (1.0, 1.0, f64::INFINITY);
        for &a in &grid {
            for &b in &grid {
                let e = self.expected_mse(lo0 * a, hi0 * b, levels);
                if e < best.2 {
                    best = (a, b, e);
                }
            }
        }
        let fine = |c: f64| (-10..=10).map(move |k| (c + f64::from(k) / 1000.0).clamp(0.001, 1.0));
        let (ca, cb) = (best.0, best.1);
        for a in fine(ca) {
            for b in fine(cb) {
                let e = self.expected_mse(lo0 * a, hi0 * b, levels);
                if e < best.2 {
                    best = (a, b, e);
                }
            }
        }
        (lo0 * best.0, hi0 * best.1)
    }

    /// TensorRT-style entropy calibration on the histogram of |x|.
    fn entropy_threshold(&self, levels: f64) -> f64 {
        const N: usize = 2048;
        // Fold into a histogram of magnitudes over [0, m).
        let m = self.min.abs().max(self.max);
        if m == 0.0 {
            return 0.0;
        }
        let mut h = vec![0f64; N];
        for (i, &c) in self.bins.iter().enumerate() {
            let v = self.center(i).abs();
            h[((v / m * N as f64) as usize).min(N - 1)] += c as f64;
        }
        let q = f64::midpoint(levels, 1.0).round().max(2.0) as usize;
        let mut best = (N, f64::INFINITY);
        let mut i = q;
        while i <= N {
            // P: the first i bins, the tail folded into the last one.
            let mut p: Vec<f64> = h[..i].to_vec();
            p[i - 1] += h[i..].iter().sum::<f64>();
            // Q: the first i bins merged into q levels and spread back over non-empty bins.
            let mut qd = vec![0f64; i];
            for k in 0..q {
                let (s, e) = (k * i / q, ((k + 1) * i / q).max(k * i / q + 1).min(i));
                let total: f64 = h[s..e].iter().sum();
                let nz = h[s..e].iter().filter(|&&c| c > 0.0).count();
                if nz > 0 {
                    for j in s..e {
                        if h[j] > 0.0 {
                            qd[j] = total / nz as f64;
                        }
                    }
                }
            }
            let (sp, sq): (f64, f64) = (p.iter().sum(), qd.iter().sum());
            if sp > 0.0 && sq > 0.0 {
                let mut kl = 0.0;
                for j in 0..i {
                    if p[j] > 0.0 {
                        let pj = p[j] / sp;
                        let qj = (qd[j] / sq).max(1e-12);
                        kl += pj * (pj / qj).ln();
                    }
                }
                if kl < best.1 {
                    best = (i, kl);
                }
            }
            i += if N > 512 { 16 } else { 1 };
        }
        best.0 as f64 / N as f64 * m
    }

    /// The histogram as (bin low edge, bin width, counts), for plots.
    pub fn histogram(&self) -> (f64, f64, &[u64]) {
        (self.lo, self.width / BINS as f64, &self.bins)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growing_histogram_keeps_every_sample_in_its_bin() {
        let mut o = Observer::new();
        o.observe(&[0.0, 1.0]).expect("finite");
        o.observe(&[-3.0, 5.0, 0.5]).expect("finite");
        o.observe(&[100.0]).expect("finite");
        assert_eq!(o.count, 6);
        assert_eq!(o.bins.iter().sum::<u64>(), 6);
        let (lo, bw, bins) = o.histogram();
        assert!(lo <= -3.0 && lo + bw * BINS as f64 > 100.0);
        // -3 sits in the first non-empty bin.
        let first = bins.iter().position(|&c| c > 0).expect("a non-empty bin");
        assert!((lo + first as f64 * bw - -3.0).abs() <= bw);
        assert_eq!((o.min, o.max), (-3.0, 100.0));
    }

    #[test]
    fn percentile_and_mse_clip_outliers_minmax_does_not() {
        let mut o = Observer::new();
        let mut data: Vec<f32> = (0..100_000).map(|i| ((i % 2001) as f32 - 1000.0) / 1000.0).collect();
        data.push(50.0);
        o.observe(&data).expect("finite");
        assert_eq!(o.range(Calibration::MinMax, 255.0, false).1, 50.0);
        assert!(o.range(Calibration::Percentile(99.9), 255.0, false).1 < 1.1);
        // One far outlier costs more clipped (49²) than the coarser grid does: MSE keeps it.
        let (lo, hi) = o.range(Calibration::Mse, 255.0, false);
        assert!(hi > 40.0 && lo > -1.1, "{lo} {hi}");
        let (lo, hi) = o.range(Calibration::Entropy, 255.0, false);
        assert!(hi < 50.0 && lo >= -1.0, "{lo} {hi}");
    }

    #[test]
    fn mse_clips_a_long_tail() {
        // Laplace(1) samples: the MSE-optimal 4-bit clip is about 5 (far below the max, ~11).
        let mut u = uniform(0x2545_F491_4F6C_DD1D);
        let data: Vec<f32> = (0..100_000)
            .map(|_| {
                let m = -u().ln();
                (if u() < 0.5 { -m } else { m }) as f32
            })
            .collect();
        let mut o = Observer::new();
        o.observe(&data).expect("finite");
        let (lo, hi) = o.range(Calibration::Mse, 15.0, true);
        let m = o.min.abs().max(o.max);
        assert!(hi > 3.0 && hi < 0.7 * m && lo == -hi, "{lo} {hi} (max {m})");
        assert!(o.expected_mse(lo, hi, 15.0) < o.expected_mse(-m, m, 15.0));
    }

    #[test]
    fn entropy_threshold_of_a_gaussian_is_a_few_sigma() {
        let mut o = Observer::new();
        let mut u = uniform(88_172_645_463_325_252);
        let data: Vec<f32> = (0..200_000)
            .map(|_| ((-2.0 * u().ln()).sqrt() * (std::f64::consts::TAU * u()).cos()) as f32)
            .collect();
        o.observe(&data).expect("finite");
        let (lo, hi) = o.range(Calibration::Entropy, 255.0, true);
        eprintln!("entropy range {lo} {hi}, minmax {} {}", o.min, o.max);
        assert!(hi > 2.0 && hi < o.max, "{hi}");
    }

    /// Deterministic uniform samples in (0, 1) (xorshift).
    fn uniform(mut state: u64) -> impl FnMut() -> f64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }
    }

    #[test]
    fn nan_is_refused() {
        assert!(Observer::new().observe(&[1.0, f32::NAN]).is_err());
    }
}
