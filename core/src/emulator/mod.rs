//! The emulator of the NPU binary: it reads a `.npub` from its bytes (every checksum and
//! index checked by [`binary::read`]) and runs its schedule — NPU commands with the
//! integer reference's kernels, fused tables applied from the binary's own 256-entry
//! LUTs, host ops of the CPU segments, RESHAPE views copied from their source — so what it
//! computes comes from the file, not from the compiler's memory.
//!
//! Not yet: per-tile execution, shape validation before the kernels run (a file whose
//! checksums are recomputed over inconsistent shapes is not yet refused up front), the CLI
//! and the studio's Emulate stage.

use crate::compiler::binary::{self, Binary, BinaryError};
use crate::compiler::lower::Step;
use crate::quant::legalize::{IOp, Program};
use crate::sim::integer::{Input, RunError, eval_op, prepare};

/// Why an emulation stopped; names the command or host op.
#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    #[error(transparent)]
    Binary(#[from] BinaryError),
    #[error(transparent)]
    Input(#[from] RunError),
    #[error("step {step}, {what} {index} (node {node}): {message}")]
    Step {
        step: usize,
        what: &'static str,
        index: usize,
        node: String,
        message: String,
    },
}

/// A finished emulation: the binary and every tensor's codes it computed.
pub struct Emulation {
    pub binary: Binary,
    pub values: Vec<Option<Vec<i32>>>,
}

impl Emulation {
    /// The codes of the binary's outputs, in order.
    pub fn outputs(&self) -> Vec<Option<&[i32]>> {
        self.binary.outputs.iter().map(|&t| self.values[t].as_deref()).collect()
    }
}

/// Emulates the binary in `bytes` on one input per graph input (in order).
pub fn emulate(bytes: &[u8], inputs: Vec<Input>) -> Result<Emulation, EmulateError> {
    let b = binary::read(bytes)?;
    let p = Program {
        graph: b.graph.clone(),
        tensors: b.tensors.iter().map(|t| t.tensor.clone()).collect(),
        ops: Vec::new(),
        inputs: b.inputs.clone(),
        outputs: b.outputs.clone(),
        constraints: Vec::new(),
    };
    let mut values = prepare(&p, inputs)?;
    let mut view_of = vec![None; p.tensors.len()];
    for &(src, view) in &b.views {
        view_of[view] = Some(src);
    }
    for (step, s) in b.steps.iter().enumerate() {
        let (what, index, op, fused, lut): (_, _, &IOp, Option<&IOp>, &[i32]) = match *s {
            Step::Npu(k) => {
                let c = &b.commands[k];
                ("command", k, &c.op, c.fused.as_ref(), &c.lut)
            }
            Step::Host(h) => ("host op", h, &b.host[h], None, &[]),
        };
        let fail = |message: String| EmulateError::Step {
            step,
            what,
            index,
            node: op.node.clone(),
            message,
        };
        for &x in op.inputs.iter().chain(fused.iter().flat_map(|f| f.inputs.iter())) {
            materialize(x, &view_of, &mut values);
        }
        let out = eval_op(&p, op, &values).map_err(fail)?;
        values[op.outputs[0]] = Some(out);
        let Some(f) = fused else { continue };
        let y = if lut.len() == 256 {
            let mid = values[op.outputs[0]].as_deref().unwrap_or_default();
            mid.iter()
                .map(|&c| {
                    usize::try_from(c + 128)
                        .ok()
                        .and_then(|i| lut.get(i).copied())
                        .ok_or_else(|| fail(format!("code {c} outside the table's int8 range")))
                })
                .collect::<Result<Vec<i32>, _>>()?
        } else {
            eval_op(&p, f, &values).map_err(fail)?
        };
        values[f.outputs[0]] = Some(y);
    }
    for &o in &b.outputs {
        materialize(o, &view_of, &mut values);
    }
    Ok(Emulation { binary: b, values })
}

/// A view's codes from its source's (views of views followed; a cycle stops).
fn materialize(t: usize, view_of: &[Option<usize>], values: &mut [Option<Vec<i32>>]) {
    if values[t].is_some() {
        return;
    }
    let mut chain = vec![t];
    let mut at = t;
    while let Some(src) = view_of[at] {
        if chain.contains(&src) || chain.len() > view_of.len() {
            return;
        }
        chain.push(src);
        if values[src].is_some() {
            let v = values[src].clone();
            for &c in &chain[..chain.len() - 1] {
                values[c].clone_from(&v);
            }
            return;
        }
        at = src;
    }
}
