//! The emulator of the NPU binary: it reads a `.npub` from its bytes (every checksum and
//! index checked by [`binary::read`]), checks every tensor, buffer and operand shape
//! before anything runs ([`check`]), and runs the schedule: MAC convolutions tile by tile
//! with an exact int8 GEMM and the binary's own requantization ([`mac`]), fused tables from
//! the binary's 256-entry LUTs, the other NPU commands and the host ops of CPU segments
//! with the integer reference's kernels, RESHAPE views from their source. What it computes
//! comes from the file, not from the compiler's memory.
//!
//! Elementwise and table commands whose tile cuts the rows run one row tile at a time too
//! ([`Emulator::step`]). Pooling, DMA (resize, concat, transpose, pad), fully connected,
//! matmul and transposed convolutions, and convolutions on 16-bit activations (the
//! reference kernel's int64 accumulator), run whole: their tiles split the same arithmetic.

pub mod check;
pub mod mac;
pub mod trace;

use crate::compiler::binary::{self, Binary, BinaryError};
use crate::compiler::lower::Step;
use crate::quant::legalize::{IOp, ITensor, OpKind, Program};
use crate::quant::params::IntType;
use crate::sim::integer::kernels::{ConvGeom, act_range, broadcast2};
use crate::sim::integer::{Input, RunError, eval_op, mul_multiplier, prepare};

/// Why an emulation stopped; names the command or host op.
#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    #[error(transparent)]
    Binary(#[from] BinaryError),
    #[error("the binary is inconsistent: {0}")]
    Invalid(String),
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

/// A binary decoded, checked and ready to run (weights packed for the MAC array).
pub struct Emulator {
    pub binary: Binary,
    program: Program,
    /// Per command, its packed convolution weights (convolutions on int8 activations).
    packed: Vec<Option<mac::Packed>>,
    view_of: Vec<Option<usize>>,
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
    let e = Emulator::load(bytes)?;
    let values = e.run(inputs)?;
    Ok(Emulation {
        binary: e.binary,
        values,
    })
}

/// An int8 MUL on the elementwise unit: the products of the zero-point-subtracted codes
/// (broadcast), then the unit's output stage.
fn int8_mul_eval(p: &Program, op: &IOp, values: &[Option<Vec<i32>>]) -> Result<Vec<i32>, String> {
    let OpKind::Mul { act } = op.kind else {
        return Err("not a multiplication".into());
    };
    let t = |k: usize| &p.tensors[op.inputs[k]];
    let v = |k: usize| {
        values[op.inputs[k]]
            .as_deref()
            .ok_or_else(|| format!("input {} was not computed", t(k).name))
    };
    let y = &p.tensors[op.outputs[0]];
    let (za, zb) = (t(0).q.zp(), t(1).q.zp());
    let prod = broadcast2(v(0)?, &t(0).shape, v(1)?, &t(1).shape, &y.shape, |a, b| {
        (a - za) * (b - zb)
    })?;
    Ok(mac::requantize(
        &prod,
        mul_multiplier(&t(0).q, &t(1).q, &y.q),
        y.q.zp(),
        act_range(act, &y.q),
    ))
}

/// Output rows per tile when an NPU command's op is elementwise along the rows and its
/// tile cuts the rows (`None`: it runs whole): a rank-4 output, each input of its shape or
/// broadcast along the rows.
fn row_tiles(p: &Program, op: &IOp, rows: usize) -> Option<usize> {
    let y = &p.tensors[op.outputs[0]].shape;
    let rowwise = matches!(
        op.kind,
        OpKind::Add { .. }
            | OpKind::Sub { .. }
            | OpKind::Mul { .. }
            | OpKind::Maximum
            | OpKind::Minimum
            | OpKind::Requantize
            | OpKind::HardSwish
            | OpKind::Logistic
            | OpKind::Tanh
            | OpKind::Exp
            | OpKind::Log
            | OpKind::Sqrt
    );
    let separable = y.len() == 4
        && op.inputs.iter().all(|&x| {
            let s = &p.tensors[x].shape;
            s.len() < 2 || (s.len() == 4 && (s[2] == y[2] || s[2] == 1)) || (s.len() < 4 && s[s.len() - 2] == 1)
        });
    (rowwise && separable && rows > 0 && rows < y[2]).then_some(rows)
}

/// A MUL of int8 codes (the elementwise unit's int8 path).
fn int8_mul(p: &Program, op: &IOp) -> bool {
    matches!(op.kind, OpKind::Mul { .. })
        && op
            .inputs
            .iter()
            .chain(&op.outputs)
            .all(|&t| p.tensors[t].q.ty == IntType::I8)
}

/// A convolution the MAC path runs: int8 (or int4) weights on int8 activations.
fn fast_conv(p: &Program, op: &IOp) -> bool {
    matches!(op.kind, OpKind::Conv { .. })
        && p.tensors[op.inputs[0]].q.ty == IntType::I8
        && matches!(p.tensors[op.inputs[1]].q.ty, IntType::I8 | IntType::I4)
}

impl Emulator {
    /// Decodes and checks `bytes`.
    pub fn load(bytes: &[u8]) -> Result<Self, EmulateError> {
        let b = binary::read(bytes)?;
        check::binary(&b).map_err(EmulateError::Invalid)?;
        let program = Program {
            graph: b.graph.clone(),
            tensors: b.tensors.iter().map(|t| t.tensor.clone()).collect(),
            ops: Vec::new(),
            inputs: b.inputs.clone(),
            outputs: b.outputs.clone(),
            constraints: Vec::new(),
        };
        let packed = b
            .commands
            .iter()
            .map(|c| {
                fast_conv(&program, &c.op).then(|| {
                    let w = &program.tensors[c.op.inputs[1]];
                    let o = w.shape[0];
                    let k = w.shape[1..].iter().product();
                    let data = w.data.as_deref().unwrap_or_default();
                    let bias = program.tensors[c.op.inputs[2]].data.as_deref().unwrap_or_default();
                    mac::Packed::new(data, o, k, bias)
                })
            })
            .collect();
        let mut view_of = vec![None; program.tensors.len()];
        for &(src, view) in &b.views {
            view_of[view] = Some(src);
        }
        Ok(Self {
            binary: b,
            program,
            packed,
            view_of,
        })
    }

    /// Runs the schedule on one input per graph input (in order): every tensor's codes.
    pub fn run(&self, inputs: Vec<Input>) -> Result<Vec<Option<Vec<i32>>>, EmulateError> {
        self.run_timed(inputs, None)
    }

    /// [`Self::run`], recording each step's seconds in `times` (one per step).
    pub fn run_timed(
        &self,
        inputs: Vec<Input>,
        mut times: Option<&mut Vec<f64>>,
    ) -> Result<Vec<Option<Vec<i32>>>, EmulateError> {
        let b = &self.binary;
        let mut values = prepare(&self.program, inputs)?;
        for step in 0..b.steps.len() {
            match times.as_deref_mut() {
                Some(t) => {
                    let t0 = std::time::Instant::now();
                    self.step(step, &mut values)?;
                    t.push(t0.elapsed().as_secs_f64());
                }
                None => self.step(step, &mut values)?,
            }
        }
        for &o in &b.outputs {
            materialize(o, &self.view_of, &mut values);
        }
        Ok(values)
    }

    /// Runs step `step` on `values` (its inputs computed; views are filled from their
    /// sources), writing its output (and a fused table's).
    pub fn step(&self, step: usize, values: &mut [Option<Vec<i32>>]) -> Result<(), EmulateError> {
        let (b, p) = (&self.binary, &self.program);
        let s = b.steps[step];
        let (what, index, op, fused, lut): (_, _, &IOp, Option<&IOp>, &[i32]) = match s {
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
            materialize(x, &self.view_of, values);
        }
        let packed = match s {
            Step::Npu(k) => self.packed[k].as_ref().map(|pk| (&b.commands[k], pk)),
            Step::Host(_) => None,
        };
        let tiled = match s {
            Step::Npu(k) => row_tiles(p, op, b.commands[k].tile.rows),
            Step::Host(_) => None,
        };
        let out = match (packed, tiled) {
            (Some((c, pk)), _) => self.conv(c, pk, values),
            (None, Some(rows)) => self.by_rows(op, rows, values),
            (None, None) if matches!(s, Step::Npu(_)) && int8_mul(p, op) => int8_mul_eval(p, op, values),
            (None, None) => eval_op(p, op, values),
        }
        .map_err(fail)?;
        let y = &p.tensors[op.outputs[0]];
        if out.len() != y.shape.iter().product::<usize>() {
            return Err(fail(format!(
                "{} values for output {} of shape {:?}",
                out.len(),
                y.name,
                y.shape
            )));
        }
        values[op.outputs[0]] = Some(out);
        let Some(f) = fused else { return Ok(()) };
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
            eval_op(p, f, values).map_err(fail)?
        };
        values[f.outputs[0]] = Some(y);
        Ok(())
    }

    /// The tensors (by index) step `step` reads and writes: its op's, and a fused table's.
    pub fn step_ops(&self, step: usize) -> Vec<&IOp> {
        match self.binary.steps[step] {
            Step::Npu(k) => {
                let c = &self.binary.commands[k];
                std::iter::once(&c.op).chain(c.fused.as_ref()).collect()
            }
            Step::Host(h) => vec![&self.binary.host[h]],
        }
    }

    /// The program the binary's tensor table makes (no ops).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// An elementwise command run one row tile at a time: each input's rows of the tile (an
    /// input broadcast along the rows whole), the op on them, the output rows written back.
    fn by_rows(&self, op: &IOp, rows: usize, values: &[Option<Vec<i32>>]) -> Result<Vec<i32>, String> {
        let p = &self.program;
        let y = &p.tensors[op.outputs[0]];
        let [n, c, h, w] = [y.shape[0], y.shape[1], y.shape[2], y.shape[3]];
        let mut out = vec![0i32; n * c * h * w];
        for r0 in (0..h).step_by(rows) {
            let r1 = (r0 + rows).min(h);
            let tile = |t: &ITensor| {
                let mut t = t.clone();
                if t.shape.len() == 4 && t.shape[2] == h {
                    t.shape[2] = r1 - r0;
                }
                t
            };
            let mut tensors: Vec<ITensor> = Vec::new();
            let mut vals: Vec<Option<Vec<i32>>> = Vec::new();
            for &x in &op.inputs {
                let t = &p.tensors[x];
                let v = values[x]
                    .as_deref()
                    .ok_or_else(|| format!("input {} was not computed", t.name))?;
                vals.push(Some(if t.shape.len() == 4 && t.shape[2] == h {
                    let plane = h * t.shape[3];
                    v.chunks(plane.max(1))
                        .flat_map(|pl| &pl[r0 * t.shape[3]..r1 * t.shape[3]])
                        .copied()
                        .collect()
                } else {
                    v.to_vec()
                }));
                tensors.push(tile(t));
            }
            tensors.push(tile(y));
            vals.push(None);
            let k = op.inputs.len();
            let mini = Program {
                graph: String::new(),
                tensors,
                ops: Vec::new(),
                inputs: Vec::new(),
                outputs: vec![k],
                constraints: Vec::new(),
            };
            let sub = IOp {
                node: op.node.clone(),
                kind: op.kind.clone(),
                inputs: (0..k).collect(),
                outputs: vec![k],
            };
            let part = if int8_mul(&mini, &sub) {
                int8_mul_eval(&mini, &sub, &vals)?
            } else {
                eval_op(&mini, &sub, &vals)?
            };
            let band = (r1 - r0) * w;
            for (plane, rows) in part.chunks(band.max(1)).enumerate() {
                out[plane * h * w + r0 * w..][..rows.len()].copy_from_slice(rows);
            }
        }
        Ok(out)
    }

    /// A convolution command on the MAC path, tile by tile.
    fn conv(&self, c: &binary::BinCommand, pk: &mac::Packed, values: &[Option<Vec<i32>>]) -> Result<Vec<i32>, String> {
        let p = &self.program;
        let OpKind::Conv {
            strides,
            dilations,
            pads,
            groups,
            act,
        } = &c.op.kind
        else {
            return Err("not a convolution".into());
        };
        let t = |k: usize| &p.tensors[c.op.inputs[k]];
        let y = &p.tensors[c.op.outputs[0]];
        let x = values[c.op.inputs[0]]
            .as_deref()
            .ok_or_else(|| format!("input {} was not computed", t(0).name))?;
        let s4 = |s: &[usize]| [s[0], s[1], s[2], s[3]];
        let g = ConvGeom {
            x: s4(&t(0).shape),
            w: s4(&t(1).shape),
            y: [y.shape[2], y.shape[3]],
            strides: *strides,
            dilations: *dilations,
            pads: [pads[0], pads[1]],
            groups: *groups,
        };
        let stage = mac::Stage {
            requant: &c.requant,
            zp_in: t(0).q.zp(),
            zp_out: y.q.zp(),
            range: act_range(*act, &y.q),
        };
        Ok(mac::conv(&g, x, pk, stage, &c.tile))
    }
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
