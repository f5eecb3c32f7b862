//! Bias absorption (Nagel et al., "Data-Free Quantization Through Weight Equalization and
//! Bias Correction", 2019, §4.1; AIMET's high-bias fold): for two convolutions in a row,
//! a constant `a_c` taken out of output channel `c` of the first (its bias lowered by
//! `a_c`) is put back through the second (its bias raised by `Σ W2[o, c, ·] · a_c`). The
//! activation grid between them then spans `[min − a, max − a]` per channel instead of
//! `[min, max]`: channels that sit far from zero (a Relu channel that never reaches it, a
//! linear output with an offset) stop stretching the one per-tensor 8-bit grid.
//!
//! - Between the two, no activation: any shift is exact; `a_c` centres the channel's
//!   calibrated range on zero.
//! - A Relu or LeakyRelu: `relu(z − a) = relu(z) − a` wherever `z ≥ a ≥ 0`; `a_c` is the
//!   channel's smallest calibrated output (0 when it reaches zero), so the function is
//!   unchanged on every sample it was measured on.
//! - The second convolution must not pad: its zero padding would stand for `−a`.
//!
//! The shifts come from two thirds of the calibration set; they are kept only when the
//! model calibrated on those samples scores an output SQNR on the held-back third at least
//! the unshifted model's (then they are measured again on every sample). A plan keeps them
//! by the first layer's name ([`super::QuantPlan::absorption`]), so every command that
//! reads the plan makes the same biases from the optimized graph ([`apply`]).

use super::data::{Preprocess, Source};
use super::equalize::{find_pairs, in_channel};
use super::recipe::Recipe;
use super::smooth::{Judged, f32_of, store};
use super::{QuantError, Quantizer};
use crate::ir::{Graph, Model, NodeId, Tensor, ValueId};
use crate::progress::Progress;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Shifts by the first layer's name: its output channel `c` is lowered by `shifts[c]`, and
/// the second layer's bias makes up for it.
pub type Shifts = BTreeMap<String, Vec<f32>>;

/// Two convolutions whose biases can trade a per-channel constant.
struct Site {
    first: NodeId,
    second: NodeId,
    /// The first layer's output.
    y: ValueId,
    b1: ValueId,
    b2: ValueId,
    w2: ValueId,
    shape2: Vec<usize>,
    groups2: usize,
    channels: usize,
    /// A Relu or LeakyRelu between them (else nothing).
    rectified: bool,
}

/// Whether a convolution reads no padding.
fn unpadded(node: &crate::ir::Node) -> bool {
    let auto = node.attr_s("auto_pad").unwrap_or("NOTSET");
    (auto == "NOTSET" || auto == "VALID") && node.attr_ints("pads").is_none_or(|p| p.iter().all(|&x| x == 0))
}

fn find_sites(g: &Graph) -> Vec<Site> {
    find_pairs(g)
        .into_iter()
        .filter_map(|p| {
            let first = &g.nodes[p.first];
            let rectified = match (first.op.as_str(), first.attr_s("activation")) {
                ("Conv", _) | ("FusedConv", None) => false,
                ("FusedConv", Some("Relu" | "LeakyRelu")) => true,
                _ => return None,
            };
            if !unpadded(&g.nodes[p.second]) {
                return None;
            }
            Some(Site {
                first: p.first,
                second: p.second,
                y: first.outputs.first().copied().flatten()?,
                b1: p.a.b?,
                b2: p.b.b?,
                w2: p.b.w,
                shape2: p.b.shape.clone(),
                groups2: p.b.groups,
                channels: p.a.shape[0],
                rectified,
            })
        })
        .collect()
}

/// The (first, second) layer names of the pairs whose biases can absorb a shift.
pub fn sites(g: &Graph) -> Vec<(String, String)> {
    find_sites(g)
        .iter()
        .map(|s| (g.nodes[s.first].name.clone(), g.nodes[s.second].name.clone()))
        .collect()
}

/// What the calibration samples say of one channel of a site's first output.
#[derive(Clone, Copy, Debug)]
struct Channel {
    lo: f64,
    hi: f64,
    n: f64,
    sum: f64,
    sum_sq: f64,
}

impl Channel {
    const EMPTY: Self = Self {
        lo: f64::INFINITY,
        hi: f64::NEG_INFINITY,
        n: 0.0,
        sum: 0.0,
        sum_sq: 0.0,
    };

    fn see(&mut self, x: f64) {
        self.lo = self.lo.min(x);
        self.hi = self.hi.max(x);
        self.n += 1.0;
        self.sum += x;
        self.sum_sq += x * x;
    }

    fn merge(&mut self, o: &Self) {
        self.lo = self.lo.min(o.lo);
        self.hi = self.hi.max(o.hi);
        self.n += o.n;
        self.sum += o.sum;
        self.sum_sq += o.sum_sq;
    }

    /// The range the channel can be moved down to: its own after a Relu, raised to no
    /// more than three standard deviations under its mean (AIMET's `β − 3γ`) so that
    /// samples it has not seen rarely reach below it, where `relu(z − a)` and
    /// `relu(z) − a` part; with nothing between, its own range.
    fn movable(&self, rectified: bool) -> Option<(f64, f64)> {
        if self.n == 0.0 || !(self.lo.is_finite() && self.hi.is_finite()) {
            return None;
        }
        if rectified {
            let mean = self.sum / self.n;
            let sd = (self.sum_sq / self.n - mean * mean).max(0.0).sqrt();
            Some((self.lo.min(mean - 3.0 * sd).max(0.0), self.hi))
        } else {
            Some((self.lo, self.hi))
        }
    }
}

/// Per-channel statistics of a site's first output.
type Extrema = Vec<Channel>;

/// The shift of each channel from its calibrated statistics: the least that brings it
/// into the narrowest grid the shifts can give, `[0, H]` after a Relu (`H` the widest
/// channel once moved down as far as it may go) and `[−W/2, W/2]` with nothing between
/// (`W` the widest channel). A channel already inside stays where it is, so fewer
/// channels reach the grid's ends, where samples not seen in calibration would clip.
fn site_shifts(s: &Site, ext: &Extrema) -> Vec<f64> {
    let ranges: Vec<Option<(f64, f64)>> = ext.iter().map(|c| c.movable(s.rectified)).collect();
    let widest = ranges.iter().flatten().fold(0f64, |w, (lo, hi)| w.max(hi - lo));
    let (bottom, top) = if s.rectified {
        (0.0, widest)
    } else {
        (-widest / 2.0, widest / 2.0)
    };
    ranges
        .iter()
        .map(|r| match *r {
            Some((_, hi)) if hi > top => hi - top,
            Some((lo, _)) if lo < bottom => lo - bottom,
            _ => 0.0,
        })
        .collect()
}

/// What absorption did between two layers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteReport {
    pub first: String,
    pub second: String,
    /// `relu` (a Relu or LeakyRelu between the two) or `linear`.
    pub activation: &'static str,
    pub channels: usize,
    /// Channels given a non-zero shift.
    pub shifted: usize,
    /// Width of the first layer's output grid on the calibration samples (its range,
    /// widened to hold zero), before and after.
    pub grid_width_before: f64,
    pub grid_width_after: f64,
}

/// The result of [`Quantizer::absorb`].
#[derive(Clone, Debug, Serialize)]
pub struct Absorbed {
    /// The shifts the plan keeps (empty when dropped).
    #[serde(skip)]
    pub shifts: Shifts,
    /// The shifts measured, kept or not.
    #[serde(skip)]
    pub fitted: Shifts,
    pub sites: Vec<SiteReport>,
    /// Output SQNR on the held-back samples of the model calibrated without and with the
    /// shifts (both on the fitting samples).
    pub held_before_db: Option<f64>,
    pub held_after_db: Option<f64>,
    pub kept: bool,
    /// Calibration samples held back to judge it; 0 when the set is too small to split
    /// and it is judged on the samples it was fitted to.
    pub held_back: usize,
    pub seconds: f64,
}

impl Absorbed {
    /// One line: the pairs, the median narrowing of their grids, the verdict.
    pub fn summary(&self) -> String {
        if self.sites.is_empty() {
            return "Bias absorption: no conv pair (Relu or nothing between, no padding in the second); nothing absorbed".into();
        }
        let db = |x: Option<f64>| x.map_or("exact".to_owned(), |v| format!("{v:.2} dB"));
        let mut ratios: Vec<f64> = self
            .sites
            .iter()
            .filter(|s| s.grid_width_after > 0.0)
            .map(|s| s.grid_width_before / s.grid_width_after)
            .collect();
        ratios.sort_by(f64::total_cmp);
        format!(
            "Bias absorption: {} conv pairs, {} channels shifted, median grid narrowed {:.2}×; held back ({}): {} → {}; {}",
            self.sites.len(),
            self.sites.iter().map(|s| s.shifted).sum::<usize>(),
            ratios.get(ratios.len() / 2).copied().unwrap_or(1.0),
            self.held_back,
            db(self.held_before_db),
            db(self.held_after_db),
            if self.kept { "kept" } else { "dropped" }
        )
    }
}

/// Why a plan's shifts do not fit a graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bias absorption at `{node}`: {problem}")]
pub struct ApplyError {
    pub node: String,
    pub problem: String,
}

/// Applies a plan's shifts to `model` (the optimized graph, equalized first if the plan
/// says so).
pub fn apply(model: &mut Model, shifts: &Shifts) -> Result<(), ApplyError> {
    if shifts.is_empty() {
        return Ok(());
    }
    let sites = find_sites(&model.graph);
    for (name, a) in shifts {
        let err = |problem: String| ApplyError {
            node: name.clone(),
            problem,
        };
        let g = &model.graph;
        let site = sites
            .iter()
            .find(|x| &g.nodes[x.first].name == name)
            .ok_or_else(|| err("no conv pair whose biases can absorb a shift starts at this node".into()))?;
        if a.len() != site.channels || a.iter().any(|x| !x.is_finite()) {
            return Err(err(format!(
                "{} shifts for {} channels, or one not finite",
                a.len(),
                site.channels
            )));
        }
        if site.rectified && a.iter().any(|&x| x < 0.0) {
            return Err(err("a negative shift before a Relu".into()));
        }
        let a: Vec<f64> = a.iter().map(|&x| f64::from(x)).collect();
        let b1: Vec<f32> = f32_of(g, site.b1)
            .iter()
            .zip(&a)
            .map(|(&b, &s)| (f64::from(b) - s) as f32)
            .collect();
        let w2 = f32_of(g, site.w2);
        let (o, ipg) = (site.shape2[0], site.shape2[1]);
        let k: usize = site.shape2[2..].iter().product();
        let b2: Vec<f32> = f32_of(g, site.b2)
            .iter()
            .enumerate()
            .map(|(oc, &b)| {
                let mut acc = f64::from(b);
                for j in 0..ipg {
                    let s = a[in_channel(oc, j, o, ipg, site.groups2)];
                    let base = (oc * ipg + j) * k;
                    acc += w2[base..base + k].iter().map(|&w| f64::from(w)).sum::<f64>() * s;
                }
                acc as f32
            })
            .collect();
        store(model, site.b1, b1);
        store(model, site.b2, b2);
    }
    Ok(())
}

impl Quantizer<'_> {
    /// Per-channel (axis 1) extrema of every site's first output on `samples`.
    fn channel_extrema(
        &self,
        sites: &[Site],
        samples: &mut dyn Iterator<Item = Result<(String, HashMap<String, Tensor>), QuantError>>,
        total: usize,
        progress: &dyn Progress,
    ) -> Result<HashMap<ValueId, Extrema>, QuantError> {
        let mut ext: HashMap<ValueId, Extrema> =
            sites.iter().map(|s| (s.y, vec![Channel::EMPTY; s.channels])).collect();
        for (k, s) in samples.enumerate() {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            let (label, sample) = s?;
            progress.update(k, total.max(1), &format!("Bias absorption: channel ranges on {label}"));
            let mut see = |v: ValueId, t: &mut Tensor| -> Result<(), QuantError> {
                if let (Some(e), Tensor::F32(a)) = (ext.get_mut(&v), &*t) {
                    let c = e.len().max(1);
                    let inner: usize = a.shape().iter().skip(2).product();
                    for (i, &x) in a.as_standard_layout().iter().enumerate() {
                        e[(i / inner.max(1)) % c].see(f64::from(x));
                    }
                }
                Ok(())
            };
            self.forward(&sample, &HashMap::new(), &mut see, false)?;
        }
        Ok(ext)
    }

    /// The shifts of every site from channel extrema.
    fn shifts_from(&self, sites: &[Site], ext: &HashMap<ValueId, Extrema>) -> Shifts {
        let g = self.graph();
        sites
            .iter()
            .filter_map(|s| {
                let a = site_shifts(s, ext.get(&s.y)?);
                Some((g.nodes[s.first].name.clone(), a.into_iter().map(|x| x as f32).collect()))
            })
            .collect()
    }

    /// Bias absorption on this quantizer's model (see the module's description): the
    /// shifts, what they do to each pair's activation grid, and the held-back verdict.
    pub fn absorb(
        &self,
        recipe: &Recipe,
        src: &Source,
        pre: &Preprocess,
        progress: &dyn Progress,
    ) -> Result<Absorbed, QuantError> {
        let t0 = std::time::Instant::now();
        let g = self.graph();
        let sites = find_sites(g);
        if sites.is_empty() {
            return Ok(Absorbed {
                shifts: Shifts::new(),
                fitted: Shifts::new(),
                sites: Vec::new(),
                held_before_db: None,
                held_after_db: None,
                kept: false,
                held_back: src.fit_and_judge().2,
                seconds: t0.elapsed().as_secs_f64(),
            });
        }
        let Judged {
            stats: ext,
            params: shifts,
            before,
            after,
            kept,
            held_back,
        } = self.judged_rewrite(
            (recipe, src, pre, progress),
            |s: &Source| self.channel_extrema(&sites, &mut s.samples(self.model, pre), s.len(), progress),
            |ext: &mut HashMap<ValueId, Extrema>, held| {
                for (v, h) in held {
                    if let Some(e) = ext.get_mut(&v) {
                        e.iter_mut().zip(&h).for_each(|(a, b)| a.merge(b));
                    }
                }
            },
            |ext| self.shifts_from(&sites, ext),
            |model, shifts| apply(model, shifts).map_err(|e| e.to_string()),
        )?;
        let width = |it: &mut dyn Iterator<Item = (f64, f64)>| {
            let (lo, hi) = it.fold((0f64, 0f64), |(l, h), (a, b)| (l.min(a), h.max(b)));
            hi - lo
        };
        let reports = sites
            .iter()
            .map(|s| {
                let name = &g.nodes[s.first].name;
                let e: Vec<(f64, f64)> = ext
                    .get(&s.y)
                    .map(|e| e.iter().filter(|c| c.n > 0.0).map(|c| (c.lo, c.hi)).collect())
                    .unwrap_or_default();
                let a: Vec<f64> = shifts
                    .get(name)
                    .map_or_else(|| vec![0.0; e.len()], |v| v.iter().map(|&x| f64::from(x)).collect());
                SiteReport {
                    first: name.clone(),
                    second: g.nodes[s.second].name.clone(),
                    activation: if s.rectified { "relu" } else { "linear" },
                    channels: s.channels,
                    shifted: a.iter().filter(|&&x| x != 0.0).count(),
                    grid_width_before: width(&mut e.iter().copied()),
                    grid_width_after: width(&mut e.iter().zip(&a).map(|(&(lo, hi), &k)| (lo - k, hi - k))),
                }
            })
            .collect();
        Ok(Absorbed {
            shifts: if kept { shifts.clone() } else { Shifts::new() },
            fitted: shifts,
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
    use crate::ir::Attr;
    use crate::progress::Silent;

    /// Input [1, 4, 8, 8] → Conv 3×3 (channels 0 and 3 biased far above zero) → Relu →
    /// Conv 1×1 (outputs with offsets) → Conv 1×1, optimized.
    fn offsets() -> Model {
        use crate::quant::equalize::tests::{sequential, uniform, weights};
        let mut rnd = uniform(3);
        let w1 = weights(&mut rnd, &[6, 4, 3, 3], &|_| 0.1);
        // Offsets that the random part cannot hide.
        let lift = |t: Tensor, by: &[f32]| {
            let d = t.to_f32().iter().zip(by).map(|(x, k)| x + k).collect();
            Tensor::from_f32(t.shape(), d).expect("shape")
        };
        let b1 = lift(weights(&mut rnd, &[6], &|_| 0.2), &[20.0, 0.0, 0.0, 12.0, 0.0, 0.0]);
        let w2 = weights(&mut rnd, &[5, 6, 1, 1], &|_| 1.0);
        let b2 = lift(weights(&mut rnd, &[5], &|_| 0.2), &[0.0, 15.0, 0.0, 0.0, -10.0]);
        let w3 = weights(&mut rnd, &[3, 5, 1, 1], &|_| 1.0);
        let b3 = weights(&mut rnd, &[3], &|_| 0.2);
        sequential(
            &[1, 4, 8, 8],
            vec![
                ("Conv", vec![w1, b1], vec![("pads", Attr::Ints(vec![1; 4]))]),
                ("Relu", vec![], vec![]),
                ("Conv", vec![w2, b2], vec![]),
                ("Conv", vec![w3, b3], vec![]),
            ],
        )
    }

    fn run(m: &Model, x: &HashMap<String, Tensor>) -> Vec<f32> {
        let e = crate::sim::Executor::new(m, 1).expect("executor");
        let out = e.run(x).expect("runs");
        out[0].1.to_f32().iter().copied().collect()
    }

    #[test]
    fn absorption_keeps_the_function_narrows_the_grids_and_wins_held_back() {
        let m = offsets();
        let found = sites(&m.graph);
        assert_eq!(found.len(), 2, "{found:?}");
        let first_of = |second: &str| found.iter().find(|p| p.1 == second).expect("a pair").0.clone();
        // A padded second layer (the equalization chain's depthwise) or one without a
        // bias is no site.
        assert!(sites(&crate::quant::equalize::tests::chain().graph).is_empty());
        let q = Quantizer::new(&m, 1).expect("quantizer");
        let src = Source::Synthetic(6);
        // 16-bit graph inputs and last layer: the 8-bit grids between the convs are what
        // the error is made of.
        let last = m.graph.nodes[m.graph.values[m.graph.outputs[0]].producer.expect("made")]
            .name
            .clone();
        let recipe = Recipe {
            inputs: Some(crate::quant::scheme::ActFormat::Int16),
            overrides: BTreeMap::from([(last, "int16".to_owned())]),
            calibration: Some(crate::quant::Calibration::MinMax),
            ..Recipe::from_preset("w8a8")
        };
        let a = q
            .absorb(&recipe, &src, &Preprocess::default(), &Silent)
            .expect("absorbs");
        assert_eq!(a.held_back, 2);
        assert!(a.kept, "{}", a.summary());
        assert!(
            a.held_after_db.expect("inexact") > a.held_before_db.expect("inexact") + 1.0,
            "{}",
            a.summary()
        );
        let of = |act: &str| a.sites.iter().find(|s| s.activation == act).expect("both kinds");
        let (relu, linear) = (of("relu"), of("linear"));
        // The Relu pair shifts only the two lifted channels (the others reach zero); the
        // linear pair centres every channel.
        assert_eq!((relu.shifted, linear.shifted), (2, 5), "{:?}", a.sites);
        for s in &a.sites {
            assert!(s.grid_width_after * 1.5 < s.grid_width_before, "{s:?}");
        }
        // The FP32 function is unchanged on the samples the shifts were measured on.
        let mut shifted = m.clone();
        apply(&mut shifted, &a.shifts).expect("applies");
        for s in src.samples(&m, &Preprocess::default()) {
            let (_, x) = s.expect("sample");
            let (p, r) = (run(&m, &x), run(&shifted, &x));
            let scale = p.iter().fold(0f32, |s, v| s.max(v.abs()));
            for (u, v) in p.iter().zip(&r) {
                assert!((u - v).abs() <= 1e-5 * scale, "{u} vs {v}");
            }
        }
        // Shifts of another graph are refused, naming the node.
        let bad: Shifts = BTreeMap::from([("nope".to_owned(), vec![0.0; 6])]);
        let err = apply(&mut m.clone(), &bad).expect_err("no such pair");
        assert!(err.to_string().contains("nope"), "{err}");
        let short: Shifts = BTreeMap::from([(first_of(&relu.second), vec![0.0; 2])]);
        assert!(apply(&mut m.clone(), &short).is_err());
        let below: Shifts = BTreeMap::from([(first_of(&relu.second), vec![-1.0; 6])]);
        assert!(apply(&mut m.clone(), &below).is_err(), "a negative shift before a Relu");
    }
}
