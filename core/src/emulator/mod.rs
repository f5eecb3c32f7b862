//! The emulator of the NPU binary: it reads a `.npub` from its bytes (every checksum and
//! index checked by [`binary::read`]), checks every tensor, buffer and operand shape
//! before anything runs ([`check`]), and runs the schedule. Every NPU command runs tile
//! by tile as its tile record says ([`tile`]): row tiles × channel blocks, and the stride
//! pieces of a split convolution, each tile computed from its own input window (with the
//! kernel's halo) and weight block. int8 convolutions use an exact int8 GEMM and the
//! binary's own requantization ([`mac`]); tables come from the binary's 256-entry LUTs;
//! the other commands' tiles and the host ops of CPU segments use the integer reference's
//! kernels; RESHAPE views come from their source. What it computes comes from the file,
//! not from the compiler's memory. An op whose tiles cannot be cut (a mean, a reduction,
//! a reflection pad) runs whole; [`Emulator::tiles`] says how many tiles a command ran as.

pub mod check;
pub mod mac;
pub mod tile;
pub mod trace;

use crate::compiler::binary::{self, Binary, BinaryError};
use crate::compiler::lower::{Step, Unit};
use crate::program::{IOp, IntType, OpKind, Program};
use crate::sim::integer::kernels::{ConvGeom, act_range, broadcast2};
use crate::sim::integer::{Input, RunError, eval_op, eval_op_all, mul_multiplier, prepare};

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
    /// Per command, its tiles (empty: it runs whole).
    plans: Vec<Vec<tile::Plan>>,
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
        // Each command's tiles: the MAC path cuts a convolution's row tiles and channel
        // blocks itself, so its windows are the stride pieces alone.
        let plans = b
            .commands
            .iter()
            .zip(&packed)
            .map(|(c, pk): (&binary::BinCommand, &Option<mac::Packed>)| {
                let windows = tile::windows(&program, &c.op, &c.tile, c.pieces, pk.is_none());
                if windows.len() < 2 {
                    return Vec::new();
                }
                windows
                    .iter()
                    .map(|w| tile::plan(&program, &c.op, w))
                    .collect::<Option<Vec<_>>>()
                    .unwrap_or_default()
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
            plans,
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
        let out = match s {
            Step::Npu(k) => self.command(k, values),
            Step::Host(_) if op.outputs.len() > 1 => {
                // The float fallback's multi-output nodes run on the host only.
                let outs = eval_op_all(p, op, values).map_err(fail)?;
                for (&t, out) in op.outputs.iter().zip(outs) {
                    let y = &p.tensors[t];
                    if out.len() != y.shape.iter().product::<usize>() {
                        return Err(fail(format!(
                            "{} values for output {} of shape {:?}",
                            out.len(),
                            y.name,
                            y.shape
                        )));
                    }
                    values[t] = Some(out);
                }
                return Ok(());
            }
            Step::Host(_) => eval_op(p, op, values),
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
            table(lut, values[op.outputs[0]].as_deref().unwrap_or_default()).map_err(fail)?
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

    /// NPU command `k` on `values`: tile by tile as its plans say, or whole.
    fn command(&self, k: usize, values: &[Option<Vec<i32>>]) -> Result<Vec<i32>, String> {
        let (p, c) = (&self.program, &self.binary.commands[k]);
        let plans = &self.plans[k];
        if plans.is_empty() {
            return self.kernel(k, p, &c.op, values);
        }
        tile::run(
            p,
            &c.op,
            plans,
            values,
            &|p: &Program, op: &IOp, v: &[Option<Vec<i32>>]| self.kernel(k, p, op, v),
        )
    }

    /// Command `k`'s unit on `op` of `p` (the command's op, or one tile of it): the MAC
    /// path for int8 convolutions, the binary's table for a LUT command, the elementwise
    /// unit's int8 MUL, the integer reference's kernel for the rest.
    fn kernel(&self, k: usize, p: &Program, op: &IOp, values: &[Option<Vec<i32>>]) -> Result<Vec<i32>, String> {
        let c = &self.binary.commands[k];
        if let Some(pk) = &self.packed[k] {
            return mac_conv(p, op, values, c, pk);
        }
        if c.unit == Unit::Lut && c.fused.is_none() && c.lut.len() == 256 {
            let x = op.inputs[0];
            let v = values[x]
                .as_deref()
                .ok_or_else(|| format!("input {} was not computed", p.tensors[x].name))?;
            return table(&c.lut, v);
        }
        if int8_mul(p, op) {
            return int8_mul_eval(p, op, values);
        }
        eval_op(p, op, values)
    }

    /// Tiles command `k` runs as (1: whole): its windows, times the row tiles and channel
    /// blocks the MAC path cuts each into.
    pub fn tiles(&self, k: usize) -> usize {
        let c = &self.binary.commands[k];
        let windows = self.plans[k].len().max(1);
        if self.packed[k].is_some() {
            windows * c.tile.count
        } else {
            windows
        }
    }
}

/// The binary's 256-entry table on int8 codes.
fn table(lut: &[i32], codes: &[i32]) -> Result<Vec<i32>, String> {
    codes
        .iter()
        .map(|&c| {
            usize::try_from(c + 128)
                .ok()
                .and_then(|i| lut.get(i).copied())
                .ok_or_else(|| format!("code {c} outside the table's int8 range"))
        })
        .collect()
}

/// A convolution on the MAC path (the whole command or one piece of it): the command's
/// row tiles × channel blocks, its packed weights and requantization.
fn mac_conv(
    p: &Program,
    op: &IOp,
    values: &[Option<Vec<i32>>],
    c: &binary::BinCommand,
    pk: &mac::Packed,
) -> Result<Vec<i32>, String> {
    let OpKind::Conv {
        strides,
        dilations,
        pads,
        groups,
        act,
    } = &op.kind
    else {
        return Err("not a convolution".into());
    };
    let t = |k: usize| &p.tensors[op.inputs[k]];
    let y = &p.tensors[op.outputs[0]];
    let x = values[op.inputs[0]]
        .as_deref()
        .ok_or_else(|| format!("input {} was not computed", t(0).name))?;
    let s4 = |s: &[usize]| [s[0], s[1], s[2], s[3]];
    if t(1).shape[0] != pk.outputs() || c.requant.len() != pk.outputs() {
        return Err("a piece of a convolution cuts its channels".into());
    }
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
