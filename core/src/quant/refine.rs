//! Clipping ranges judged by their effect downstream. The calibration methods choose each
//! activation's range from its own histogram, which weighs every element alike; what matters
//! is the error the clipping and rounding leave in what the consumers compute (a convolution
//! weighs channels unequally, a residual add passes the clipped tail on). Each activation's
//! range, in graph order, is tried narrower and wider, and the one whose consumers' outputs
//! come out closest to FP32 on the calibration samples is kept (coordinate descent,
//! simulated incrementally: only what lies downstream of the tensor runs again, and each
//! choice sees the ones made upstream). The error is measured at the consumers rather than
//! at the model's output: a handful of samples' outputs is too few numbers to choose over a
//! hundred ranges from (on PP-OCR cls that overfits: +21 dB on the fitting samples, -8 dB
//! on held-back ones). A change must not lower the output SQNR on the fitting samples
//! either (better consumers alone lowered PP-OCR rec's by 1.6 dB). The refined plan is kept
//! only when its output SQNR on a held-back part of the calibration set is at least the
//! unrefined plan's.

use super::data::{Preprocess, Source};
use super::live::Keep;
use super::scheme::ActFormat;
use super::{QuantError, QuantPlan, Quantizer, Ranges, Stats};
use crate::progress::Progress;
use serde::Serialize;

/// Factors the current range is scaled by (both ends, so a zero end stays zero); the
/// widened ones are capped at the extremes seen in calibration.
const FACTORS: [f64; 5] = [0.5, 0.7, 0.85, 1.2, 1.5];

/// Smallest gain (dB) in the consumers' error for which a range is changed.
const MIN_GAIN_DB: f64 = 0.05;

/// One activation whose range the refinement changed.
#[derive(Clone, Debug, Serialize)]
pub struct RangeChoice {
    pub value: String,
    pub from: (f64, f64),
    pub to: (f64, f64),
    /// What the consumers it was judged at gained on the fitting samples (dB of their
    /// summed relative error).
    pub gain_db: f64,
    /// The values it was judged at: the outputs of the layers that read it (itself when
    /// only pass-through ops or graph outputs read it).
    pub judged_at: Vec<String>,
}

/// What the refinement did.
#[derive(Clone, Debug, Serialize)]
pub struct Refined {
    pub choices: Vec<RangeChoice>,
    /// Output SQNR on the fitting samples before and after.
    pub fit_before_db: Option<f64>,
    pub fit_after_db: Option<f64>,
    /// Output SQNR on the held-back samples before and after.
    pub held_before_db: Option<f64>,
    pub held_after_db: Option<f64>,
    /// Whether the refined ranges are in the plan (they won on the held-back samples).
    pub kept: bool,
    /// Calibration samples held back to judge it; 0 when the set is too small to split
    /// and it is judged on the samples it was fitted to.
    pub held_back: usize,
    /// Activations tried.
    pub tried: usize,
    pub seconds: f64,
}

impl Refined {
    /// The held-back verdict in one line: `{before} → {after}; kept` (or `dropped`), SQNRs
    /// with two decimals; `None` when no range changed.
    pub fn verdict(&self) -> Option<String> {
        let db = |x: Option<f64>| x.map_or("exact".to_owned(), |v| format!("{v:.2} dB"));
        (!self.choices.is_empty()).then(|| {
            format!(
                "{} → {}; {}",
                db(self.held_before_db),
                db(self.held_after_db),
                if self.kept { "kept" } else { "dropped" }
            )
        })
    }
}

fn scaled(r: (f64, f64), f: f64, seen: (f64, f64)) -> (f64, f64) {
    let lo = (r.0 * f).max(seen.0.min(r.0));
    let hi = (r.1 * f).min(seen.1.max(r.1));
    (lo, hi)
}

impl Quantizer<'_> {
    /// Refines `plan`'s activation ranges against their consumers' error, guarded by the
    /// output SQNR and judged on held-back samples (see the module's description); `stats`
    /// are the calibration statistics the ranges came from.
    pub fn refine_ranges(
        &self,
        plan: QuantPlan,
        stats: &Stats,
        src: &Source,
        pre: &Preprocess,
        progress: &dyn Progress,
    ) -> Result<(QuantPlan, Refined), QuantError> {
        let t0 = std::time::Instant::now();
        let g = self.graph();
        let (fit, judge, held_back) = src.fit_and_judge();
        let fit_samples = fit
            .samples(self.model, pre)
            .map(|s| s.map(|(_, s)| s))
            .collect::<Result<Vec<_>, _>>()?;
        let mut live = self.live(plan.clone(), fit_samples, Keep::References, progress)?;
        let fit_before = self.live_output_sqnr(&live, None);
        let points: Vec<_> = self
            .quant_points
            .iter()
            .copied()
            .filter(|v| plan.ranges.contains_key(&g.values[*v].name) && self.grid(&plan, *v).is_some())
            // A bounded function's output grid is fixed (`fixed_output_ranges`).
            .filter(|v| {
                g.values[*v]
                    .producer
                    .and_then(|p| super::bounded_output(&g.nodes[p]))
                    .is_none()
            })
            .collect();
        let mut choices = Vec::new();
        let mut output_db = fit_before.unwrap_or(f64::INFINITY);
        for (k, &v) in points.iter().enumerate() {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            let name = &g.values[v].name;
            progress.update(k, points.len(), &format!("refining the range of {name}"));
            let Some((format, current)) = self.grid(&live.plan, v) else {
                continue;
            };
            let mut targets: Vec<_> = self
                .grid_readers(&[v])
                .into_iter()
                .flat_map(|n| g.nodes[n].outputs.iter().flatten().copied())
                .filter(|o| self.source[*o].is_some_and(|s| s != v))
                .collect();
            targets.sort_unstable();
            targets.dedup();
            if targets.is_empty() {
                targets.push(v);
            }
            let error = |ch: Option<&super::live::Change>| -> f64 {
                self.live_relative_errors(&live, ch, &targets).iter().sum()
            };
            let before = error(None);
            let seen = stats
                .observers
                .get(&v)
                .map_or(current, |o| (o.min.min(0.0), o.max.max(0.0)));
            let mut best: Option<(f64, super::live::Change, (f64, f64))> = None;
            let mut tried: Vec<(f64, f64)> = vec![current];
            for f in FACTORS {
                let r = scaled(current, f, seen);
                if r.1 - r.0 <= 0.0 || tried.iter().any(|t| (t.0 - r.0).abs() + (t.1 - r.1).abs() < 1e-12) {
                    continue;
                }
                tried.push(r);
                let mut p = live.plan.clone();
                let Some(entry) = p.ranges.get_mut(name) else { continue };
                set(entry, format, r);
                let ch = self.live_try(&live, &p, progress)?;
                let e = error(Some(&ch));
                let bar = best.as_ref().map_or(before * 10f64.powf(-MIN_GAIN_DB / 10.0), |b| b.0);
                if e < bar && self.live_output_sqnr(&live, Some(&ch)).unwrap_or(f64::INFINITY) >= output_db {
                    best = Some((e, ch, r));
                }
            }
            if let Some((e, ch, r)) = best {
                choices.push(RangeChoice {
                    value: name.clone(),
                    from: current,
                    to: r,
                    gain_db: 10.0 * (before / e.max(f64::MIN_POSITIVE)).log10(),
                    judged_at: targets.iter().map(|t| g.values[*t].name.clone()).collect(),
                });
                self.live_commit(&mut live, ch)?;
                output_db = self.live_output_sqnr(&live, None).unwrap_or(f64::INFINITY);
            }
        }
        let fit_after = self.live_output_sqnr(&live, None);
        let refined_plan = live.plan.clone();
        let (held_before, held_after) = if choices.is_empty() {
            (None, None)
        } else {
            let cached = self.cache(&mut judge.samples(self.model, pre))?;
            (
                self.output_sqnr(&plan, &cached)?.sqnr_db,
                self.output_sqnr(&refined_plan, &cached)?.sqnr_db,
            )
        };
        let kept = !choices.is_empty() && super::no_worse(held_after, held_before);
        let refined = Refined {
            choices,
            fit_before_db: fit_before,
            fit_after_db: fit_after,
            held_before_db: held_before,
            held_after_db: held_after,
            kept,
            held_back,
            tried: points.len(),
            seconds: t0.elapsed().as_secs_f64(),
        };
        Ok((if kept { refined_plan } else { plan }, refined))
    }
}

fn set(r: &mut Ranges, format: ActFormat, to: (f64, f64)) {
    if format == ActFormat::Int16 {
        r.int16 = to;
    } else {
        r.int8 = to;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_keeps_a_zero_end_and_caps_at_the_extremes() {
        assert_eq!(scaled((0.0, 4.0), 0.5, (0.0, 10.0)), (0.0, 2.0));
        assert_eq!(scaled((-2.0, 4.0), 1.5, (-2.5, 5.0)), (-2.5, 5.0));
        // A range already wider than what was seen is not widened further.
        assert_eq!(scaled((-2.0, 4.0), 1.5, (-1.0, 3.0)), (-2.0, 4.0));
    }

    /// A range clipped to a third of its calibrated width is widened again, the output
    /// SQNR rises on the fitting samples and on the held-back ones, and the choice names
    /// where it was judged; an activation nobody mis-set keeps a range near its own.
    #[test]
    fn a_clipped_range_is_widened_and_kept_on_held_back_samples() {
        use crate::progress::Silent;
        let m = super::super::equalize::tests::chain();
        let q = Quantizer::new(&m, 1).expect("quantizer");
        let src = Source::Synthetic(9);
        let pre = Preprocess::default();
        let stats = q
            .observe(&mut src.samples(&m, &pre), src.len(), &Silent)
            .expect("calibrates");
        let mut plan = q
            .plan_from_stats(&stats, "w8a8", super::super::Calibration::Mse)
            .expect("plan");
        let g = &m.graph;
        let v = *q
            .quant_points
            .iter()
            .find(|v| !g.inputs.contains(v) && !g.outputs.contains(v))
            .expect("a hidden activation");
        let name = g.values[v].name.clone();
        let calibrated = plan.ranges[&name].int8;
        plan.ranges.get_mut(&name).expect("range").int8 = (calibrated.0 / 3.0, calibrated.1 / 3.0);
        let (refined, r) = q
            .refine_ranges(plan.clone(), &stats, &src, &pre, &Silent)
            .expect("refines");
        assert_eq!(r.held_back, 3);
        let choice = r
            .choices
            .iter()
            .find(|c| c.value == name)
            .expect("the clipped range is changed");
        assert!(choice.to.1 > choice.from.1 * 1.4, "{choice:?}");
        assert!(choice.gain_db > 0.0 && !choice.judged_at.is_empty(), "{choice:?}");
        assert!(
            r.fit_after_db.expect("finite") > r.fit_before_db.expect("finite") + 1.0,
            "{r:?}"
        );
        assert!(
            r.held_after_db.expect("finite") > r.held_before_db.expect("finite") + 1.0,
            "{r:?}"
        );
        assert!(r.kept);
        assert_eq!(refined.ranges[&name].int8, choice.to);
        assert_ne!(refined, plan);
    }
}
