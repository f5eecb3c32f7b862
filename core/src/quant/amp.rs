//! Automatic mixed precision: promote the fewest layers from 8-bit to 16-bit activations
//! that bring the output SQNR to a target, and the whole SQNR-versus-cost curve.
//!
//! Phase 1 measures each layer's gain: the output SQNR with only that layer promoted (on a
//! few samples). Phase 2 promotes layers greedily by gain and evaluates the plan on every
//! sample at each step of the curve (every step up to the target or 10% of the layers, then
//! spaced out to all layers), as AIMET's AMP builds its Pareto curve.

use super::analysis::Cached;
use super::scheme::ActFormat;
use super::{LayerPrecision, QuantError, QuantPlan, Quantizer};
use crate::ir::{Tensor, ValueId};
use crate::progress::Progress;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Samples phase 1 measures each layer's gain on.
pub const SENSITIVITY_SAMPLES: usize = 2;

/// One point of the curve.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Layers promoted (the first `promoted` of the ranking).
    pub promoted: usize,
    /// Activation bytes moved per inference (each quantized tensor written once).
    pub cost_bytes: f64,
    pub sqnr_db: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MixedPrecision {
    pub target_db: f64,
    pub layers_total: usize,
    /// Layers in promotion order with the gain measured alone (dB over the all-8-bit plan).
    pub ranking: Vec<(String, f64)>,
    pub curve: Vec<CurvePoint>,
    /// Layers promoted in the returned plan (`None`: the target was not reached).
    pub chosen: Option<usize>,
    pub seconds: f64,
}

impl Quantizer<'_> {
    /// Sets a layer's precision. The bias corrections of the layers that read its output
    /// were measured on its old grid: they are dropped.
    pub fn promote(&self, plan: &mut QuantPlan, node: usize, to: LayerPrecision) {
        let g = &self.model.graph;
        let outs: Vec<ValueId> = g.nodes[node].outputs.iter().flatten().copied().collect();
        plan.layers.insert(g.nodes[node].name.clone(), to);
        for n in &g.nodes {
            let reads = n
                .inputs
                .iter()
                .flatten()
                .any(|v| self.source[*v].is_some_and(|s| outs.contains(&s)));
            if reads {
                plan.bias_correction.remove(&n.name);
            }
        }
    }

    /// Runs the search on `plan` (8-bit everywhere it is quantized); returns the report and
    /// the plan with the chosen layers promoted to `to` (or the plan unchanged when the target
    /// cannot be reached).
    pub fn mixed_precision(
        &self,
        plan: &QuantPlan,
        cached: &Cached,
        target_db: f64,
        to: LayerPrecision,
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
        let elements = |n: usize| -> usize {
            g.nodes[n]
                .outputs
                .iter()
                .flatten()
                .filter(|o| self.source[**o] == Some(**o))
                .map(|o| sizes.get(o).copied().unwrap_or(0))
                .sum()
        };
        let cost = |p: &QuantPlan| -> f64 {
            layers
                .iter()
                .map(|&n| elements(n) as f64 * p.precision(&g.nodes[n]).activations.bytes())
                .sum()
        };
        let base_db = self.output_sqnr(plan, cached)?.sqnr_db.unwrap_or(f64::INFINITY);
        // Phase 1 on the first few samples.
        let few = Cached {
            samples: cached.samples.iter().take(SENSITIVITY_SAMPLES).cloned().collect(),
            reference: cached.reference.iter().take(SENSITIVITY_SAMPLES).cloned().collect(),
        };
        let few_base = self.output_sqnr(plan, &few)?.sqnr_db.unwrap_or(f64::INFINITY);
        let mut gains = Vec::new();
        for (k, &n) in layers.iter().enumerate() {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            let node = &g.nodes[n];
            progress.update(k, layers.len(), &format!("sensitivity of {}", node.label()));
            if plan.precision(node).activations != ActFormat::Int8 {
                continue;
            }
            let mut p = plan.clone();
            self.promote(&mut p, n, to);
            let db = self.output_sqnr(&p, &few)?.sqnr_db.unwrap_or(f64::INFINITY);
            gains.push((n, db - few_base));
        }
        gains.sort_by(|a, b| b.1.total_cmp(&a.1));
        // Phase 2: the curve.
        let promote = |k: usize| -> QuantPlan {
            let mut p = plan.clone();
            for &(n, _) in &gains[..k] {
                self.promote(&mut p, n, to);
            }
            p
        };
        let mut curve = vec![CurvePoint {
            promoted: 0,
            cost_bytes: cost(plan),
            sqnr_db: Some(base_db),
        }];
        let mut chosen = (base_db >= target_db).then_some(0);
        let mut k = 1;
        while k <= gains.len() {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            progress.update(k, gains.len(), &format!("mixed precision: {k} layers promoted"));
            let p = promote(k);
            let db = self.output_sqnr(&p, cached)?.sqnr_db;
            curve.push(CurvePoint {
                promoted: k,
                cost_bytes: cost(&p),
                sqnr_db: db,
            });
            if chosen.is_none() && db.unwrap_or(f64::INFINITY) >= target_db {
                chosen = Some(k);
            }
            // Every step until the target is reached (or for the first 10% of the layers
            // while it is not), then spaced out to the end.
            let dense = chosen.is_none() && k < (layers.len() / 10).max(8);
            k = if dense {
                k + 1
            } else {
                (k + k.div_ceil(2)).min(gains.len()).max(k + 1)
            };
            if k > gains.len() && curve.last().is_some_and(|c| c.promoted < gains.len()) {
                k = gains.len();
            }
        }
        let out_plan = chosen.map_or_else(|| plan.clone(), promote);
        Ok((
            MixedPrecision {
                target_db,
                layers_total: layers.len(),
                ranking: gains.iter().map(|&(n, d)| (g.nodes[n].name.clone(), d)).collect(),
                curve,
                chosen,
                seconds: t0.elapsed().as_secs_f64(),
            },
            out_plan,
        ))
    }
}
