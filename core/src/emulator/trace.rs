//! Per-op traces of an emulation: every tensor the binary computed, dequantized and
//! compared with the FP32 model, the fake-quant simulation and the integer reference.
//!
//! - cumulative: the emulated tensor against FP32 (the error of the whole binary so far);
//! - local: the step run alone on FP32 inputs put on their grids, against FP32 (a fused
//!   table's local error includes its producer's: they are one command);
//! - against the simulation: the emulated tensor against fake-quant's, and the gap
//!   `simulated − emulated` in dB, which is where the simulation over-promises;
//! - against the integer reference: mismatched codes (0 when the binary is bit-exact).
//!
//! SQNR in dB is `20·log10(‖ref‖ / ‖ref − x‖)` in f64; `None` when exact.

use super::Emulator;
use crate::compiler::lower::Step;
use crate::program::{ITensor, IntType, quantize_code};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One tensor the binary computed, compared.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TensorTrace {
    /// The graph value (a hidden tensor keeps the value's name and a `:` suffix).
    pub name: String,
    pub node: String,
    pub op: String,
    /// `NPU` or `CPU`.
    pub device: String,
    pub elements: usize,
    /// Emulated against FP32, cumulative.
    pub emulated_sqnr_db: Option<f64>,
    /// The step alone on FP32 inputs put on their grids, against FP32.
    pub emulated_local_sqnr_db: Option<f64>,
    /// The fake-quant simulation against FP32, cumulative.
    pub simulated_sqnr_db: Option<f64>,
    /// Emulated against the simulation's tensor.
    pub emulated_vs_simulated_sqnr_db: Option<f64>,
    /// Codes that differ from the integer reference's (`None`: not compared).
    pub integer_mismatches: Option<usize>,
}

impl TensorTrace {
    /// `simulated − emulated` SQNR in dB (positive: the simulation promises more than the
    /// binary delivers). An exact tensor counts as 200 dB.
    pub fn gap_db(&self) -> Option<f64> {
        let exact = |x: Option<f64>| x.unwrap_or(200.0);
        self.emulated_sqnr_db
            .or(self.simulated_sqnr_db)
            .map(|_| exact(self.simulated_sqnr_db) - exact(self.emulated_sqnr_db))
    }
}

/// What an emulation is compared with: values by graph value name, and the integer
/// reference's codes by tensor index (the binary's tensor table is the program's).
pub struct References<'a> {
    pub fp32: &'a HashMap<String, Vec<f32>>,
    pub simulated: Option<&'a HashMap<String, Vec<f32>>>,
    pub integer: Option<&'a [Option<Vec<i32>>]>,
}

/// `20·log10(‖r‖ / ‖r − x‖)` in f64; `None` when equal (or sizes differ).
pub fn sqnr_db(r: &[f32], x: &[f32]) -> Option<f64> {
    if r.len() != x.len() {
        return None;
    }
    let (mut s, mut e) = (0.0f64, 0.0f64);
    for (&a, &b) in r.iter().zip(x) {
        let (a, b) = (f64::from(a), f64::from(b));
        s += a * a;
        e += (a - b) * (a - b);
    }
    (e > 0.0).then(|| 10.0 * (s / e).log10())
}

fn dequantize(t: &ITensor, codes: &[i32]) -> Vec<f32> {
    codes.iter().map(|&c| t.q.real(c)).collect()
}

fn codes(t: &ITensor, x: &[f32]) -> Vec<i32> {
    match t.q.ty {
        IntType::F32 => x.iter().map(|v| v.to_bits() as i32).collect(),
        IntType::Bool | IntType::Index | IntType::I32 | IntType::I64 => x.iter().map(|&v| v as i32).collect(),
        _ => x.iter().map(|&v| quantize_code(v, &t.q)).collect(),
    }
}

/// Compares every tensor `emulated` holds (an [`Emulator::run`] of `e`) with `r`, in
/// schedule order.
pub fn compare(e: &Emulator, emulated: &[Option<Vec<i32>>], r: &References) -> Vec<TensorTrace> {
    let p = e.program();
    let b = &e.binary;
    // Local runs: constants, plus each step's inputs from FP32 (hidden tensors from the
    // emulation), cleared after the step.
    let mut loc = crate::sim::integer::constants(p);
    // The row of tensor `y` (when the emulation computed it); `local`: its codes from the
    // step run alone.
    let row = |y: usize, node: &str, op: &str, device: &str, local: Option<&[i32]>| -> Option<TensorTrace> {
        let t = &p.tensors[y];
        let got = emulated[y].as_deref()?;
        let got_f = dequantize(t, got);
        let fp = r.fp32.get(&t.name);
        let sim = r.simulated.and_then(|s| s.get(&t.name));
        Some(TensorTrace {
            name: t.name.clone(),
            node: node.to_string(),
            op: op.to_string(),
            device: device.to_string(),
            elements: got.len(),
            emulated_sqnr_db: fp.and_then(|f| sqnr_db(f, &got_f)),
            emulated_local_sqnr_db: local.zip(fp).and_then(|(l, f)| sqnr_db(f, &dequantize(t, l))),
            simulated_sqnr_db: fp.zip(sim).and_then(|(f, s)| sqnr_db(f, s)),
            emulated_vs_simulated_sqnr_db: sim.and_then(|s| sqnr_db(s, &got_f)),
            integer_mismatches: r
                .integer
                .and_then(|i| i.get(y))
                .and_then(|v| v.as_deref())
                .map(|want| got.iter().zip(want).filter(|(a, b)| a != b).count() + got.len().abs_diff(want.len())),
        })
    };
    let mut rows = Vec::new();
    for step in 0..b.steps.len() {
        let ops = e.step_ops(step);
        let mut set = Vec::new();
        for op in &ops {
            for &x in &op.inputs {
                let t = &p.tensors[x];
                if t.data.is_some() || loc[x].is_some() {
                    continue;
                }
                loc[x] = match r.fp32.get(&t.name) {
                    Some(f) if f.len() == t.shape.iter().product::<usize>() => Some(codes(t, f)),
                    _ => emulated[x].clone(),
                };
                set.push(x);
            }
        }
        let local_ok = e.step(step, &mut loc).is_ok();
        let device = if matches!(b.steps[step], Step::Npu(_)) {
            "NPU"
        } else {
            "CPU"
        };
        for op in &ops {
            for &y in &op.outputs {
                let local = loc[y].as_deref().filter(|_| local_ok);
                rows.extend(row(y, &op.node, op.kind.name(), device, local));
            }
        }
        for op in &ops {
            for &y in &op.outputs {
                loc[y] = None;
            }
        }
        for x in set {
            loc[x] = None;
        }
    }
    // Graph outputs that are views (a RESHAPE's output) are no step's: their own rows.
    for &o in &b.outputs {
        if !rows.iter().any(|x| x.name == p.tensors[o].name) {
            rows.extend(row(o, "", "Reshape", "NPU", None));
        }
    }
    rows
}
