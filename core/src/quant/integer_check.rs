//! The integer reference beside the fake-quant simulation: on every evaluation sample the
//! legalized program runs with integer arithmetic, and each tensor's dequantized codes are
//! compared with FP32 — cumulatively (the integer model so far) and locally (the node's
//! integer ops alone, on the FP32 inputs quantized to their grids). The report shows both
//! next to the fake-quant figures, and each legalization constraint with the local SQNR
//! of its tensor under both.

use super::legalize::legalize;
use super::scheme::ErrorStats;
use super::{QuantPlan, Quantizer};
use crate::ir::{Tensor, ValueId};
use crate::program::{Constraint, Program, quantize_code};
use crate::sim::integer::{Input, eval_op_all, run};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A legalization constraint and what it costs at its tensor.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConstraintReport {
    #[serde(flatten)]
    pub constraint: Constraint,
    /// The graph tensor whose SQNR is shown (a hidden tensor's node output).
    pub measured_on: String,
    pub fake_quant_local_db: Option<f64>,
    pub integer_local_db: Option<f64>,
}

/// Legalized programs by the samples' input shapes (sorted), or why there is none.
type Programs = HashMap<Vec<(String, Vec<usize>)>, Result<Program, String>>;

/// Integer-vs-FP32 error sums by graph value name.
#[derive(Default)]
pub struct IntegerCheck {
    programs: Programs,
    pub local: HashMap<String, ErrorStats>,
    pub cumulative: HashMap<String, ErrorStats>,
    /// Why there is no integer result (the legalization error), if any.
    pub note: Option<String>,
    pub constraints: Vec<Constraint>,
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_f32().iter().copied().collect()
}

impl IntegerCheck {
    /// Runs the sample through the integer program and adds its errors against the FP32
    /// `reference` values.
    pub fn add(
        &mut self,
        q: &Quantizer<'_>,
        plan: &QuantPlan,
        sample: &HashMap<String, Tensor>,
        reference: &HashMap<ValueId, Tensor>,
    ) {
        let g = &q.model.graph;
        let mut key: Vec<(String, Vec<usize>)> = sample.iter().map(|(k, t)| (k.clone(), t.shape().to_vec())).collect();
        key.sort();
        let shapes: HashMap<String, Vec<usize>> = key.iter().cloned().collect();
        let entry = self
            .programs
            .entry(key)
            .or_insert_with(|| legalize(q.model, plan, &shapes).map_err(|e| e.to_string()));
        let p = match entry {
            Ok(p) => p,
            Err(e) => {
                self.note.get_or_insert_with(|| format!("not legalized: {e}"));
                return;
            }
        };
        if self.constraints.is_empty() {
            self.constraints.clone_from(&p.constraints);
        }
        let inputs: Vec<Input> = p
            .inputs
            .iter()
            .map(|&t| Input::Float(sample.get(&p.tensors[t].name).map(f32s).unwrap_or_default()))
            .collect();
        let r = match run(p, inputs) {
            Ok(r) => r,
            Err(e) => {
                self.note.get_or_insert_with(|| format!("integer run failed: {e}"));
                return;
            }
        };
        let ids = g.value_ids();
        let refs: Vec<Option<Vec<f32>>> = p
            .tensors
            .iter()
            .map(|t| {
                let v = *ids.get(t.name.as_str())?;
                let r = reference.get(&v)?;
                (r.len() == t.shape.iter().product::<usize>()).then(|| f32s(r))
            })
            .collect();
        for (k, t) in p.tensors.iter().enumerate() {
            if let (Some(rf), Some(codes), None) = (&refs[k], &r.values[k], &t.data) {
                let deq: Vec<f32> = codes.iter().map(|&c| t.q.real(c)).collect();
                self.cumulative.entry(t.name.clone()).or_default().add(rf, &deq);
            }
        }
        // Local: each node's ops alone, graph-valued inputs from FP32 put on their grids.
        let mut start = 0;
        while start < p.ops.len() {
            let mut end = start + 1;
            while end < p.ops.len() && p.ops[end].node == p.ops[start].node {
                end += 1;
            }
            let mut vals: Vec<Option<Vec<i32>>> = vec![None; p.tensors.len()];
            let made: Vec<usize> = p.ops[start..end].iter().flat_map(|o| o.outputs.clone()).collect();
            let mut ok = true;
            for op in &p.ops[start..end] {
                for &i in &op.inputs {
                    if made.contains(&i) || vals[i].is_some() {
                        continue;
                    }
                    let t = &p.tensors[i];
                    vals[i] = match (&t.data, &refs[i]) {
                        (Some(d), _) => Some(d.iter().map(|&c| c as i32).collect()),
                        (None, Some(rf)) => Some(rf.iter().map(|&x| quantize_code(x, &t.q)).collect()),
                        // A hidden input (a requantized Concat input): the integer run's.
                        (None, None) => r.values[i].clone(),
                    };
                    ok &= vals[i].is_some();
                }
            }
            for op in &p.ops[start..end] {
                if !ok {
                    break;
                }
                match eval_op_all(p, op, &vals) {
                    Ok(outs) => {
                        for (&t, v) in op.outputs.iter().zip(outs) {
                            vals[t] = Some(v);
                        }
                    }
                    Err(_) => ok = false,
                }
            }
            if ok {
                for &o in &made {
                    if let (Some(rf), Some(codes)) = (&refs[o], &vals[o]) {
                        let t = &p.tensors[o];
                        let deq: Vec<f32> = codes.iter().map(|&c| t.q.real(c)).collect();
                        self.local.entry(t.name.clone()).or_default().add(rf, &deq);
                    }
                }
            }
            start = end;
        }
    }

    /// The constraints with the local SQNR of their tensors (`fake_local`: the fake-quant
    /// local SQNR by tensor name).
    pub fn constraint_reports(&self, fake_local: &HashMap<String, Option<f64>>) -> Vec<ConstraintReport> {
        self.constraints
            .iter()
            .map(|c| {
                let measured_on = if self.local.contains_key(&c.tensor) {
                    c.tensor.clone()
                } else {
                    c.tensor
                        .rsplit_once(':')
                        .map_or(c.tensor.clone(), |(a, _)| a.to_string())
                };
                ConstraintReport {
                    constraint: c.clone(),
                    fake_quant_local_db: fake_local.get(&measured_on).copied().flatten(),
                    integer_local_db: self.local.get(&measured_on).and_then(ErrorStats::sqnr_db),
                    measured_on,
                }
            })
            .collect()
    }
}
