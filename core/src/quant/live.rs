//! Incremental fake-quant simulation. The FP32 and fake-quant values of every sample are
//! kept; when the plan changes, only the layers whose precision, range or bias correction
//! changed are run again, and after them only the nodes that read a value that came out
//! different (or whose input grid changed). This is what the studio runs after a precision
//! change, and what mixed precision runs for each candidate.

use super::scheme::ErrorStats;
use super::{OutputReport, QuantError, QuantPlan, Quantizer, Report};
use crate::ir::{NodeId, Tensor, ValueId};
use crate::progress::Progress;
use std::collections::{HashMap, HashSet};

/// What a `Live` state keeps besides every fake-quant value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// The FP32 outputs: output SQNR only.
    Outputs,
    /// Every FP32 value too: bias corrections can be measured again.
    References,
    /// Every FP32 value and every tensor's local and cumulative error (the studio).
    PerTensor,
}

/// One plan simulated on a fixed set of samples, ready for incremental updates.
pub struct Live {
    pub plan: QuantPlan,
    samples: Vec<HashMap<String, Tensor>>,
    /// FP32 values per sample: every value, or the outputs with `Keep::Outputs`.
    reference: Vec<HashMap<ValueId, Tensor>>,
    /// Fake-quant values per sample, every value.
    quant: Vec<HashMap<ValueId, Tensor>>,
    weights: HashMap<ValueId, Tensor>,
    /// Per-tensor errors kept (local and cumulative of every value), not just the outputs'.
    track: bool,
    /// Cumulative error per value, per sample.
    cumulative: HashMap<ValueId, Vec<ErrorStats>>,
    /// Local error per value, per sample (tracked only).
    local: HashMap<ValueId, Vec<ErrorStats>>,
}

impl Live {
    pub fn samples(&self) -> usize {
        self.samples.len()
    }

    /// The samples' input tensors (to simulate another plan on the same samples).
    pub fn sample_inputs(&self) -> Vec<HashMap<String, Tensor>> {
        self.samples.clone()
    }

    /// A value's fake-quant and FP32 tensors on one sample (FP32 only when tracked).
    pub fn values(&self, sample: usize, v: ValueId) -> (Option<&Tensor>, Option<&Tensor>) {
        (
            self.quant.get(sample).and_then(|m| m.get(&v)),
            self.reference.get(sample).and_then(|m| m.get(&v)),
        )
    }
}

/// A plan simulated against a `Live` state without changing it: the values that differ.
pub struct Change {
    plan: QuantPlan,
    weights: HashMap<ValueId, Tensor>,
    /// Per sample, the values that came out different.
    values: Vec<HashMap<ValueId, Tensor>>,
    /// Nodes whose local error must be measured again.
    local_nodes: Vec<NodeId>,
    /// Nodes whose precision, range or bias correction changed.
    pub changed_nodes: Vec<NodeId>,
    /// Nodes run again, summed over the samples.
    pub recomputed: usize,
}

fn stats(reference: &Tensor, test: &Tensor) -> Option<ErrorStats> {
    let (Tensor::F32(r), Tensor::F32(q)) = (reference, test) else {
        return None;
    };
    let (r, q) = (r.as_standard_layout(), q.as_standard_layout());
    let mut s = ErrorStats::default();
    s.add(r.as_slice()?, q.as_slice()?);
    Some(s)
}

/// The error of `v` against FP32 over every live sample, under the live plan or a tried
/// change (its new value where it has one).
fn live_error(live: &Live, change: Option<&Change>, v: ValueId, samples: std::ops::Range<usize>) -> ErrorStats {
    let mut st = ErrorStats::default();
    for k in samples.start..samples.end.min(live.samples.len()) {
        let q = change
            .and_then(|c| c.values[k].get(&v))
            .or_else(|| live.quant[k].get(&v));
        if let (Some(r), Some(q)) = (live.reference[k].get(&v), q)
            && let Some(s) = stats(r, q)
        {
            st.merge(&s);
        }
    }
    st
}

fn sum(per_sample: &[ErrorStats]) -> ErrorStats {
    per_sample.iter().fold(ErrorStats::default(), |mut a, b| {
        a.merge(b);
        a
    })
}

impl Quantizer<'_> {
    /// Simulates `plan` on `samples` and keeps every fake-quant value, and what `keep` says.
    pub fn live(
        &self,
        plan: QuantPlan,
        samples: Vec<HashMap<String, Tensor>>,
        keep: Keep,
        progress: &dyn Progress,
    ) -> Result<Live, QuantError> {
        let track = keep == Keep::PerTensor;
        if samples.is_empty() {
            return Err(QuantError::Data("the evaluation set is empty".into()));
        }
        let weights = self.quantized_weights(&plan);
        let mut live = Live {
            plan,
            samples: Vec::new(),
            reference: Vec::new(),
            quant: Vec::new(),
            weights,
            track,
            cumulative: HashMap::new(),
            local: HashMap::new(),
        };
        let total = samples.len();
        for (k, s) in samples.into_iter().enumerate() {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            progress.update(k, total, &format!("simulating sample {} of {total}", k + 1));
            let reference = self.forward(&s, &HashMap::new(), &mut |_, _| Ok(()), keep != Keep::Outputs)?;
            let plan = &live.plan;
            let mut fq = |v: ValueId, t: &mut Tensor| -> Result<(), QuantError> {
                self.fake_quant(plan, v, t);
                Ok(())
            };
            let quant = self.forward(&s, &live.weights, &mut fq, true)?;
            live.samples.push(s);
            live.reference.push(reference);
            live.quant.push(quant);
        }
        for k in 0..total {
            for (&v, r) in &live.reference[k] {
                if let Some(s) = live.quant[k].get(&v).and_then(|q| stats(r, q)) {
                    live.cumulative
                        .entry(v)
                        .or_insert_with(|| vec![ErrorStats::default(); total])[k] = s;
                }
            }
        }
        if track {
            self.measure_local(&mut live, &self.order)?;
        }
        Ok(live)
    }

    fn measure_local(&self, live: &mut Live, nodes: &[NodeId]) -> Result<(), QuantError> {
        let g = self.graph();
        let total = live.samples.len();
        for &n in nodes {
            let node = &g.nodes[n];
            if node.op == "Constant" {
                continue;
            }
            for k in 0..total {
                for (o, s) in self.local_error(&live.plan, node, &live.reference[k], &live.weights)? {
                    live.local
                        .entry(o)
                        .or_insert_with(|| vec![ErrorStats::default(); total])[k] = s;
                }
            }
        }
        Ok(())
    }

    /// Runs `plan` against `live` without changing it.
    pub fn live_try(&self, live: &Live, plan: &QuantPlan, progress: &dyn Progress) -> Result<Change, QuantError> {
        let g = self.graph();
        let old = &live.plan;
        let mut changed: HashSet<NodeId> = HashSet::new();
        for &n in &self.order {
            let node = &g.nodes[n];
            let range_changed = node.outputs.iter().flatten().any(|o| {
                let name = &g.values[*o].name;
                old.ranges.get(name) != plan.ranges.get(name)
            });
            if old.precision(node) != plan.precision(node)
                || old.bias_correction.get(&node.name) != plan.bias_correction.get(&node.name)
                || range_changed
            {
                changed.insert(n);
            }
        }
        let inputs_changed = old.inputs != plan.inputs
            || g.inputs.iter().any(|i| {
                let name = &g.values[*i].name;
                old.ranges.get(name) != plan.ranges.get(name)
            });
        // Values whose grid moved: a node reading one runs again even when the value came out
        // the same (its bias lies on a grid made from its input's scale).
        let regridded: HashSet<ValueId> = (0..g.values.len())
            .filter(|&v| self.sim_grid(old, v) != self.sim_grid(plan, v))
            .collect();
        let mut local_nodes = Vec::new();
        for &n in &self.order {
            let node = &g.nodes[n];
            if changed.contains(&n) || node.inputs.iter().flatten().any(|v| regridded.contains(v)) {
                local_nodes.push(n);
            }
        }
        let weights = if changed.is_empty() && !inputs_changed {
            live.weights.clone()
        } else {
            self.quantized_weights(plan)
        };
        if progress.cancelled() {
            return Err(QuantError::Cancelled);
        }
        // Samples run in parallel (small tensors keep one core busy each).
        let run_sample = |k: usize| -> Result<(HashMap<ValueId, Tensor>, usize), QuantError> {
            let base = &live.quant[k];
            let mut new: HashMap<ValueId, Tensor> = HashMap::new();
            let mut recomputed = 0;
            if inputs_changed {
                for (i, mut t) in self.bind(&live.samples[k])? {
                    self.fake_quant(plan, i, &mut t);
                    if base.get(&i) != Some(&t) {
                        new.insert(i, t);
                    }
                }
            }
            for &n in &self.order {
                let node = &g.nodes[n];
                let rerun = changed.contains(&n)
                    || node
                        .inputs
                        .iter()
                        .flatten()
                        .any(|v| new.contains_key(v) || regridded.contains(v));
                if !rerun {
                    continue;
                }
                let outs = self.run_node(node, |v| {
                    weights.get(&v).or_else(|| new.get(&v)).or_else(|| base.get(&v))
                })?;
                recomputed += 1;
                for (o, mut t) in node.outputs.iter().zip(outs) {
                    if let Some(o) = *o {
                        self.fake_quant(plan, o, &mut t);
                        if base.get(&o) != Some(&t) {
                            new.insert(o, t);
                        }
                    }
                }
            }
            Ok((new, recomputed))
        };
        let per_sample: Vec<(HashMap<ValueId, Tensor>, usize)> = self.pool.install(|| {
            use rayon::prelude::*;
            (0..live.samples.len())
                .into_par_iter()
                .map(run_sample)
                .collect::<Result<_, _>>()
        })?;
        let recomputed = per_sample.iter().map(|x| x.1).sum();
        let values = per_sample.into_iter().map(|x| x.0).collect();
        let mut changed_nodes: Vec<NodeId> = changed.into_iter().collect();
        changed_nodes.sort_unstable();
        Ok(Change {
            plan: plan.clone(),
            weights,
            values,
            local_nodes,
            changed_nodes,
            recomputed,
        })
    }

    /// Makes a tried plan the live one.
    pub fn live_commit(&self, live: &mut Live, change: Change) -> Result<(), QuantError> {
        let total = live.samples.len();
        for (k, new) in change.values.into_iter().enumerate() {
            for (v, t) in new {
                if let Some(s) = live.reference[k].get(&v).and_then(|r| stats(r, &t)) {
                    live.cumulative
                        .entry(v)
                        .or_insert_with(|| vec![ErrorStats::default(); total])[k] = s;
                }
                live.quant[k].insert(v, t);
            }
        }
        live.plan = change.plan;
        live.weights = change.weights;
        if live.track {
            self.measure_local(live, &change.local_nodes)?;
        }
        Ok(())
    }

    /// Tries `plan` and makes it the live one; returns how many node runs it took.
    pub fn live_update(&self, live: &mut Live, plan: &QuantPlan, progress: &dyn Progress) -> Result<usize, QuantError> {
        let change = self.live_try(live, plan, progress)?;
        let n = change.recomputed;
        self.live_commit(live, change)?;
        Ok(n)
    }

    /// Measures the empirical bias correction of `nodes` again under `plan`, on the live
    /// samples (which must keep every FP32 value). `plan`'s own corrections of these nodes are
    /// ignored; the others stay in the weights they were measured with.
    pub fn live_bias_corrections(
        &self,
        live: &Live,
        plan: &QuantPlan,
        nodes: &[NodeId],
    ) -> Result<std::collections::BTreeMap<String, Vec<f32>>, QuantError> {
        let g = self.graph();
        let mut p = plan.clone();
        for &n in nodes {
            p.bias_correction.remove(&g.nodes[n].name);
        }
        let targets: Vec<NodeId> = self
            .bias_targets(&p)
            .into_iter()
            .filter(|n| nodes.contains(n))
            .collect();
        let weights = self.quantized_weights(&p);
        let mut sums = HashMap::new();
        for reference in &live.reference {
            self.add_bias_errors(&p, &weights, &targets, reference, &mut sums)?;
        }
        Ok(self.mean_bias_errors(sums))
    }

    /// Nodes that read a value lying on the grid of one of `sources` (through pass-through ops).
    pub(crate) fn grid_readers(&self, sources: &[ValueId]) -> Vec<NodeId> {
        let g = self.graph();
        (0..g.nodes.len())
            .filter(|&n| {
                g.nodes[n]
                    .inputs
                    .iter()
                    .flatten()
                    .any(|v| self.source[*v].is_some_and(|s| sources.contains(&s)))
            })
            .collect()
    }

    /// The lowest output SQNR of the live plan, or of a tried change (`None`: exact).
    pub fn live_output_sqnr(&self, live: &Live, change: Option<&Change>) -> Option<f64> {
        self.live_output_sqnr_on(live, change, 0..live.samples.len())
    }

    /// [`Self::live_output_sqnr`] on the samples of `samples` only (by index).
    pub fn live_output_sqnr_on(
        &self,
        live: &Live,
        change: Option<&Change>,
        samples: std::ops::Range<usize>,
    ) -> Option<f64> {
        self.live_outputs(live, change, samples)
            .iter()
            .map(|o| o.sqnr_db.unwrap_or(f64::INFINITY))
            .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.min(b))))
            .filter(|v| v.is_finite())
    }

    fn live_outputs(&self, live: &Live, change: Option<&Change>, samples: std::ops::Range<usize>) -> Vec<OutputReport> {
        let g = self.graph();
        g.outputs
            .iter()
            .map(|&o| {
                let st = live_error(live, change, o, samples.clone());
                OutputReport {
                    name: g.values[o].name.clone(),
                    sqnr_db: st.sqnr_db(),
                    cosine: st.cosine(),
                    max_abs_err: st.max_abs_err,
                    integer_sqnr_db: None,
                }
            })
            .collect()
    }

    /// Relative squared error (error energy over reference energy, summed over the samples)
    /// of each of `values` under the live plan or a tried change; the live state must keep
    /// every FP32 value (`Keep::References`). Values without a float reference count 0.
    pub fn live_relative_errors(&self, live: &Live, change: Option<&Change>, values: &[ValueId]) -> Vec<f64> {
        values
            .iter()
            .map(|&v| {
                let st = live_error(live, change, v, 0..live.samples.len());
                if st.ref_sq > 0.0 { st.err_sq / st.ref_sq } else { 0.0 }
            })
            .collect()
    }

    /// Squared output error of each sample under the live plan (summed over the outputs).
    pub fn live_sample_errors(&self, live: &Live) -> Vec<f64> {
        let g = self.graph();
        (0..live.samples.len())
            .map(|k| {
                g.outputs
                    .iter()
                    .filter_map(|o| stats(live.reference[k].get(o)?, live.quant[k].get(o)?))
                    .map(|s| s.err_sq)
                    .sum()
            })
            .collect()
    }

    /// The error report of the live plan (per-tensor rows need `track`).
    pub fn live_report(&self, live: &Live) -> Report {
        let local: HashMap<ValueId, ErrorStats> = live.local.iter().map(|(v, s)| (*v, sum(s))).collect();
        let cumulative: HashMap<ValueId, ErrorStats> = live.cumulative.iter().map(|(v, s)| (*v, sum(s))).collect();
        self.report(&live.plan, &live.weights, &local, &cumulative, live.samples.len(), 0.0)
    }
}
