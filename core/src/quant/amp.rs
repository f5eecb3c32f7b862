//! Automatic mixed precision: promote the fewest layers from 8-bit to 16-bit activations
//! that bring the output SQNR to a target, and the whole SQNR-versus-cost curve.
//!
//! With three samples or more, the last third is held back (as the bias correction and
//! the range refinement hold it back): the search fits on the rest and each point of the
//! curve is also measured on the held-back samples; the chosen point is the first that
//! reaches the target on both. A target reached only on the samples the ranking was fitted
//! to is not reached.
//!
//! Phase 1 ranks the candidates (every 8-bit layer, and the graph inputs' quantizer) on a
//! few fitting samples (those with the largest output error): starting from the plan with
//! all of them promoted, the output SQNR lost when one alone stays 8-bit. Phase 2 promotes
//! them in that order, point by point until the target is reached, then spaced out to all
//! of them: the SQNR-versus-cost curve, as AIMET's AMP builds its Pareto curve. Each point
//! is simulated incrementally (only what lies downstream of a change runs again), and the
//! bias corrections of the layers that read a promoted one are measured again.

use super::analysis::Cached;
use super::live::{Change, Keep, Live};
use super::scheme::ActFormat;
use super::{LayerPrecision, QuantError, QuantPlan, Quantizer};
use crate::ir::{Tensor, ValueId};
use crate::progress::Progress;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Samples phase 1 ranks the candidates on (those with the largest output error).
pub const SENSITIVITY_SAMPLES: usize = 2;

/// One point of the curve.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Layers promoted (the first `promoted` of the ranking).
    pub promoted: usize,
    /// Activation bytes moved per inference (each quantized tensor written once).
    pub cost_bytes: f64,
    /// Output SQNR on the fitting samples.
    pub sqnr_db: Option<f64>,
    /// Output SQNR on the held-back samples (absent without a held-back part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_db: Option<f64>,
    /// Estimated latency on the cost target (a search with [`Cost::Latency`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
}

/// A plan's estimated latency on a target: the total and each graph node's share (by
/// node name), or `None` when the plan has no integer form.
pub struct Latency {
    pub total_us: f64,
    pub per_node_us: HashMap<String, f64>,
}

/// What the search weighs a promotion by.
#[derive(Clone, Copy, Default)]
pub enum Cost<'a> {
    /// Activation bytes: the candidates in order of SQNR lost.
    #[default]
    Bytes,
    /// Estimated latency on a target (`name`): the candidates in order of SQNR lost per
    /// microsecond the promotion adds, each curve point with its latency.
    Latency {
        name: &'a str,
        estimate: &'a (dyn Fn(&QuantPlan) -> Option<Latency> + Sync),
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MixedPrecision {
    pub target_db: f64,
    pub layers_total: usize,
    /// Samples the search fitted on (ranked and measured the curve on).
    #[serde(default)]
    pub fit_samples: usize,
    /// Held-back samples each point was validated on (0: fewer than three samples).
    #[serde(default)]
    pub held_back: usize,
    /// Layers (and the graph inputs) in promotion order, each with the output SQNR lost (dB,
    /// on the samples with the largest error) when it alone stays 8-bit and every other candidate is promoted.
    pub ranking: Vec<(String, f64)>,
    pub curve: Vec<CurvePoint>,
    /// The cost the ranking weighs: `activation bytes`, or `latency on TARGET`.
    #[serde(default)]
    pub cost: String,
    /// Layers promoted in the returned plan, the first point at the target on the fitting
    /// and the held-back samples (`None`: the target was not reached).
    pub chosen: Option<usize>,
    pub seconds: f64,
    /// The plan of each point of the curve (not written to reports).
    #[serde(skip)]
    pub plans: Vec<QuantPlan>,
}

impl Quantizer<'_> {
    /// Sets a layer's precision.
    pub fn promote(&self, plan: &mut QuantPlan, node: usize, to: LayerPrecision) {
        plan.layers.insert(self.model.graph.nodes[node].name.clone(), to);
    }

    /// Sets a candidate's precision and measures again, on the live samples, the bias corrections of
    /// the layers that read it: they were measured on its 8-bit grid, whose clipping they
    /// partly correct. Dropping them instead loses the correction of the readers' own
    /// weights (on PP-OCR det with every layer at 16 bits: 21.7 dB measured again, 20.2 dB
    /// kept stale, 16.0 dB dropped).
    fn set_candidate(
        &self,
        plan: &mut QuantPlan,
        c: Candidate,
        to: LayerPrecision,
        live: &Live,
    ) -> Result<(), QuantError> {
        let before = plan.clone();
        match c {
            Candidate::Inputs => plan.inputs = to.activations,
            Candidate::Layer(n) => self.promote(plan, n, to),
        }
        self.refresh_bias_corrections(live, &before, plan)?;
        Ok(())
    }

    /// Measures again the bias corrections that editing `base` into `plan` made stale: those
    /// of the layers whose weights changed and of the layers that read an activation whose
    /// format changed (the graph inputs' included). The corrections depend only on the plan
    /// and the FP32 values, so the result is a function of (`base`, `plan`), whatever order the
    /// edits came in. Returns how many layers were measured again.
    pub fn refresh_bias_corrections(
        &self,
        live: &Live,
        base: &QuantPlan,
        plan: &mut QuantPlan,
    ) -> Result<usize, QuantError> {
        let g = &self.model.graph;
        let mut sources: Vec<ValueId> = Vec::new();
        let mut own = Vec::new();
        if plan.inputs != base.inputs {
            sources.extend(&g.inputs);
        }
        for (n, node) in g.nodes.iter().enumerate() {
            let (a, b) = (base.precision(node), plan.precision(node));
            if a.activations != b.activations {
                sources.extend(node.outputs.iter().flatten().copied());
            }
            if a.weights != b.weights {
                own.push(n);
            }
        }
        let mut readers = self.grid_readers(&sources);
        readers.extend(own);
        readers.sort_unstable();
        readers.dedup();
        readers.retain(|n| base.bias_correction.contains_key(&g.nodes[*n].name));
        plan.bias_correction.clone_from(&base.bias_correction);
        if readers.is_empty() {
            return Ok(0);
        }
        let fresh = self.live_bias_corrections(live, plan, &readers)?;
        for &n in &readers {
            let name = &g.nodes[n].name;
            match fresh.get(name) {
                Some(c) => plan.bias_correction.insert(name.clone(), c.clone()),
                None => plan.bias_correction.remove(name),
            };
        }
        Ok(readers.len())
    }

    /// Runs the search on `plan` (8-bit everywhere it is quantized); returns the report and
    /// the plan with the chosen layers promoted to `to` (or the plan unchanged when the target
    /// cannot be reached), the target judged on the fitting and the held-back samples (see
    /// the module's description). The graph inputs' quantizer is a candidate like a layer (an 8-bit
    /// image input costs PP-OCR det 3.5 dB on its own) and counts as one.
    pub fn mixed_precision(
        &self,
        plan: &QuantPlan,
        cached: &Cached,
        target_db: f64,
        to: LayerPrecision,
        progress: &dyn Progress,
    ) -> Result<(MixedPrecision, QuantPlan), QuantError> {
        self.mixed_precision_by(plan, cached, target_db, to, Cost::Bytes, progress)
    }

    /// [`Quantizer::mixed_precision`] weighing promotions by `cost`.
    pub fn mixed_precision_by(
        &self,
        plan: &QuantPlan,
        cached: &Cached,
        target_db: f64,
        to: LayerPrecision,
        cost_of: Cost<'_>,
        progress: &dyn Progress,
    ) -> Result<(MixedPrecision, QuantPlan), QuantError> {
        let t0 = std::time::Instant::now();
        let g = &self.model.graph;
        let layers = self.layers();
        // Activation elements each layer writes, from one FP32 run.
        let mut sizes: HashMap<ValueId, usize> = HashMap::new();
        let mut see = |v: ValueId, t: &mut Tensor| -> Result<(), QuantError> {
            sizes.insert(v, t.len());
            Ok(())
        };
        self.forward(&cached.samples[0], &HashMap::new(), &mut see, false)?;
        let held_n = super::data::held_back_len(cached.samples.len());
        let (fit_samples, held_samples) = cached.samples.split_at(cached.samples.len() - held_n);
        let elements = |n: usize| -> usize {
            g.nodes[n]
                .outputs
                .iter()
                .flatten()
                .filter(|o| self.source[**o] == Some(**o))
                .map(|o| sizes.get(o).copied().unwrap_or(0))
                .sum()
        };
        let input_elements: usize = g
            .inputs
            .iter()
            .filter(|v| self.source[**v] == Some(**v))
            .map(|v| sizes.get(v).copied().unwrap_or(0))
            .sum();
        let cost = |p: &QuantPlan| -> f64 {
            input_elements as f64 * p.inputs.bytes()
                + layers
                    .iter()
                    .map(|&n| elements(n) as f64 * p.precision(&g.nodes[n]).activations.bytes())
                    .sum::<f64>()
        };
        let mut candidates = Vec::new();
        if input_elements > 0 && plan.inputs == ActFormat::Int8 {
            candidates.push(Candidate::Inputs);
        }
        candidates.extend(
            layers
                .iter()
                .filter(|&&n| plan.precision(&g.nodes[n]).activations == ActFormat::Int8)
                .map(|&n| Candidate::Layer(n)),
        );
        let layers_total = layers.len() + usize::from(input_elements > 0);
        let name = |c: Candidate| match c {
            Candidate::Inputs => format!(
                "graph inputs ({})",
                g.inputs
                    .iter()
                    .map(|v| g.values[*v].name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Candidate::Layer(n) => g.nodes[n].name.clone(),
        };
        // Each candidate is simulated incrementally: only what lies downstream of it runs.
        let sqnr = |live: &Live, p: &QuantPlan| -> Result<(f64, Change), QuantError> {
            let ch = self.live_try(live, p, progress)?;
            Ok((self.live_output_sqnr(live, Some(&ch)).unwrap_or(f64::INFINITY), ch))
        };
        // Phase 1 runs on the samples with the largest output error: they weigh most in the
        // set's SQNR (on PP-OCR det, the text pages rather than the photos).
        let mut live = self.live(plan.clone(), fit_samples.to_vec(), Keep::References, progress)?;
        let base_db = self.live_output_sqnr(&live, None).unwrap_or(f64::INFINITY);
        let mut held = if held_samples.is_empty() {
            None
        } else {
            Some(self.live(plan.clone(), held_samples.to_vec(), Keep::References, progress)?)
        };
        let base_held = held
            .as_ref()
            .map(|h| self.live_output_sqnr(h, None).unwrap_or(f64::INFINITY));
        // A point is chosen when it reaches the target on the fitting samples and on the
        // held-back ones.
        let reaches = |db: f64, held_db: Option<f64>| db >= target_db && held_db.is_none_or(|h| h >= target_db);
        let errors = self.live_sample_errors(&live);
        let mut worst: Vec<usize> = (0..errors.len()).collect();
        worst.sort_by(|a, b| errors[*b].total_cmp(&errors[*a]));
        worst.truncate(SENSITIVITY_SAMPLES);
        let few_samples: Vec<_> = worst.iter().map(|&k| fit_samples[k].clone()).collect();
        let few = self.live(plan.clone(), few_samples, Keep::References, progress)?;
        // From the plan with every candidate promoted, how much output SQNR is lost when one
        // alone stays 8-bit. Measured the other way round (promoting one layer of an 8-bit
        // plan) the gains say little on some models: on PP-OCR det, promoting the input or
        // one stem layer alone lowers the output SQNR, while promoting the stem together
        // gains 2.6 dB.
        let mut top = plan.clone();
        for &c in &candidates {
            match c {
                Candidate::Inputs => top.inputs = to.activations,
                Candidate::Layer(n) => self.promote(&mut top, n, to),
            }
        }
        let corrected: Vec<usize> = (0..g.nodes.len())
            .filter(|n| top.bias_correction.contains_key(&g.nodes[*n].name))
            .collect();
        if !corrected.is_empty() {
            top.bias_correction = self.live_bias_corrections(&few, &top, &corrected)?;
        }
        let few_top = self.live(top.clone(), few.sample_inputs(), Keep::References, progress)?;
        drop(few);
        let top_db = self.live_output_sqnr(&few_top, None).unwrap_or(f64::INFINITY);
        let mut losses = Vec::new();
        for (k, &c) in candidates.iter().enumerate() {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            progress.update(k, candidates.len(), &format!("sensitivity of {}", name(c)));
            let mut p = top.clone();
            let back = match c {
                Candidate::Inputs => LayerPrecision {
                    weights: plan.default.weights,
                    activations: plan.inputs,
                },
                Candidate::Layer(n) => plan.precision(&g.nodes[n]),
            };
            self.set_candidate(&mut p, c, back, &few_top)?;
            losses.push((c, top_db - sqnr(&few_top, &p)?.0));
        }
        drop(few_top);
        let latency = |p: &QuantPlan| match cost_of {
            Cost::Bytes => None,
            Cost::Latency { estimate, .. } => estimate(p),
        };
        match (latency(plan), latency(&top)) {
            // SQNR per microsecond: each candidate's loss over the time its promotion adds
            // (the nodes' estimates with every candidate promoted, against all at 8 bits).
            (Some(low), Some(high)) => {
                let added = |c: Candidate| -> f64 {
                    let node = |n: &str| {
                        high.per_node_us.get(n).copied().unwrap_or(0.0) - low.per_node_us.get(n).copied().unwrap_or(0.0)
                    };
                    match c {
                        Candidate::Inputs => 0.0,
                        Candidate::Layer(n) => node(&g.nodes[n].name),
                    }
                    .max(1e-3)
                };
                losses.sort_by(|a, b| (b.1 / added(b.0)).total_cmp(&(a.1 / added(a.0))));
            }
            _ => losses.sort_by(|a, b| b.1.total_cmp(&a.1)),
        }
        // Phase 2, on every sample: promote in ranking order, one more at each point of the
        // curve (densely until the target is reached or a tenth of the layers are promoted,
        // then spaced out to all of them).
        let mut curve = vec![CurvePoint {
            promoted: 0,
            cost_bytes: cost(plan),
            sqnr_db: Some(base_db),
            held_db: base_held.filter(|d| d.is_finite()),
            latency_us: latency(plan).map(|l| l.total_us),
        }];
        let mut plans = vec![plan.clone()];
        let mut chosen = reaches(base_db, base_held).then_some(0);
        let mut chosen_plan = chosen.map(|_| plan.clone());
        let dense = (layers_total / 10).max(8);
        let mut current = plan.clone();
        let mut done = 0;
        let mut k = 1;
        while k <= losses.len() {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            progress.update(k, losses.len(), &format!("mixed precision: {k} promoted"));
            for &(c, _) in &losses[done..k] {
                self.set_candidate(&mut current, c, to, &live)?;
            }
            done = k;
            let (db, ch) = sqnr(&live, &current)?;
            self.live_commit(&mut live, ch)?;
            let held_db = match held.as_mut() {
                Some(h) => {
                    let (d, ch) = sqnr(h, &current)?;
                    self.live_commit(h, ch)?;
                    Some(d)
                }
                None => None,
            };
            curve.push(CurvePoint {
                promoted: k,
                cost_bytes: cost(&current),
                sqnr_db: db.is_finite().then_some(db),
                held_db: held_db.filter(|d| d.is_finite()),
                latency_us: latency(&current).map(|l| l.total_us),
            });
            plans.push(current.clone());
            if chosen.is_none() && reaches(db, held_db) {
                chosen = Some(k);
                chosen_plan = Some(current.clone());
            }
            // (After the last point, k + 1 ends the loop.)
            k = if (chosen.is_none() && k < dense) || k == losses.len() {
                k + 1
            } else {
                (k + k.div_ceil(2)).min(losses.len())
            };
        }
        Ok((
            MixedPrecision {
                target_db,
                layers_total,
                fit_samples: fit_samples.len(),
                held_back: held_samples.len(),
                ranking: losses.iter().map(|&(c, d)| (name(c), d)).collect(),
                curve,
                cost: match cost_of {
                    Cost::Bytes => "activation bytes".into(),
                    Cost::Latency { name, .. } => format!("latency on {name}"),
                },
                chosen,
                seconds: t0.elapsed().as_secs_f64(),
                plans,
            },
            chosen_plan.unwrap_or_else(|| plan.clone()),
        ))
    }
}

/// What mixed precision can promote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Candidate {
    /// The quantizer of the graph inputs.
    Inputs,
    Layer(usize),
}
