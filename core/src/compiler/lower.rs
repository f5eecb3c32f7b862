//! Lowering: the program's NPU ops become commands for the NPU's units, in program order.
//!
//! - A convolution, transposed convolution, fully connected layer or batched matmul is one
//!   MAC command with its bias, its fused clamp and its requantization (the integer plan's
//!   per-channel multipliers and shifts, as `QuantizeMultiplier` makes them).
//! - An int8 Logistic, Tanh, HardSwish, Exp, Log, Sqrt or Rsqrt becomes a 256-entry table. When
//!   its input comes from a MAC or elementwise command of the same segment and nothing else
//!   reads that input, the table is applied in that command's output stage (the
//!   intermediate tensor is never written); otherwise it is a LUT command of its own.
//! - A RESHAPE is no command: its output is a view of its input's buffer.
//! - A convolution whose stride the target splits ([`Rule::StrideOrSplit`]) is one command
//!   marked with its piece count (one stride-1 convolution per output position).
//! - Ops on the CPU stay program ops, run by the host between NPU segments.
//!
//! [`Rule::StrideOrSplit`]: crate::target::Rule::StrideOrSplit

use super::Place;
use crate::program::{IOp, ITensor, IntType, OpKind, Program};
use crate::sim::integer::{channel_multipliers, eval_op, fixed};
use crate::target::{OpView, Target};
use serde::{Deserialize, Serialize};

/// The NPU block that runs a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unit {
    /// The MAC array (convolutions, fully connected, matmul).
    Mac,
    /// The pooling/reduction unit (max, average, mean, reduce).
    Pool,
    /// The elementwise unit (add, sub, mul, maximum, minimum).
    Elementwise,
    /// The table unit (a 256-entry LUT, softmax).
    Lut,
    /// Data movement (concat, slice, transpose, pad, resize, requantize).
    Dma,
}

impl Unit {
    pub const ALL: [Self; 5] = [Self::Mac, Self::Pool, Self::Elementwise, Self::Lut, Self::Dma];

    pub fn name(self) -> &'static str {
        match self {
            Self::Mac => "mac",
            Self::Pool => "pool",
            Self::Elementwise => "elementwise",
            Self::Lut => "lut",
            Self::Dma => "dma",
        }
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(c: u8) -> Option<Self> {
        Self::ALL.get(usize::from(c)).copied()
    }

    fn of(kind: &OpKind) -> Self {
        match kind {
            OpKind::Conv { .. }
            | OpKind::TransposeConv { .. }
            | OpKind::FullyConnected { .. }
            | OpKind::BatchMatMul => Self::Mac,
            OpKind::Pool { .. } | OpKind::Mean { .. } | OpKind::Reduce { .. } => Self::Pool,
            OpKind::Add { .. }
            | OpKind::Sub { .. }
            | OpKind::Mul { .. }
            | OpKind::Extremum { .. }
            | OpKind::SquaredDifference
            | OpKind::Relu { .. } => Self::Elementwise,
            k if lut_op(k) => Self::Lut,
            OpKind::Softmax { .. } => Self::Lut,
            _ => Self::Dma,
        }
    }
}

/// Unary ops that are a function of one int8 code, so a 256-entry table.
fn lut_op(k: &OpKind) -> bool {
    matches!(
        k,
        OpKind::Logistic | OpKind::Tanh | OpKind::HardSwish | OpKind::Exp | OpKind::Log | OpKind::Sqrt | OpKind::Rsqrt
    )
}

/// How a command's work is cut to fit the SRAM left beside the activation arena.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tile {
    /// Output rows per tile (the whole height when the feature maps stay in SRAM).
    pub rows: usize,
    /// Output channels per weight block (all of them when the weights fit at once).
    pub channels: usize,
    /// Tiles the command runs as (row tiles × channel blocks).
    pub count: usize,
    /// Bytes of the double-buffered weight, input and output staging buffers.
    pub weight_buffer: u64,
    pub ifm_buffer: u64,
    pub ofm_buffer: u64,
}

/// One NPU command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Command {
    pub unit: Unit,
    /// The program op it runs.
    pub op: usize,
    /// A LUT op fused into its output stage (its program op), and the table.
    pub fused: Option<usize>,
    pub lut: Vec<i32>,
    /// Per output channel `(multiplier, shift)` of MAC commands.
    pub requant: Vec<(i32, i32)>,
    /// Stride-1 pieces a split convolution runs as (1 otherwise).
    pub pieces: usize,
    pub tile: Tile,
}

impl Command {
    /// The tensor the command writes (a fused table's output when it has one).
    pub fn output(&self, p: &Program) -> usize {
        p.ops[self.fused.unwrap_or(self.op)].outputs[0]
    }
}

/// One step of the schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    /// An NPU command (its index).
    Npu(usize),
    /// A program op the host runs.
    Host(usize),
}

/// The lowered program: NPU commands and host ops in schedule order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Lowered {
    pub commands: Vec<Command>,
    pub steps: Vec<Step>,
    /// Program ops that became no step (RESHAPE views, fused tables).
    pub elided: Vec<usize>,
    /// Per program op, the command that runs it (`None` for host ops and views).
    pub command_of: Vec<Option<usize>>,
}

/// The 256 output codes of an int8 unary op, from its reference kernel.
pub fn table(p: &Program, op: &IOp) -> Result<Vec<i32>, String> {
    let one = |t: &ITensor| ITensor {
        name: t.name.clone(),
        shape: vec![256],
        q: t.q.clone(),
        data: None,
    };
    let mini = Program {
        graph: String::new(),
        tensors: vec![one(&p.tensors[op.inputs[0]]), one(&p.tensors[op.outputs[0]])],
        ops: Vec::new(),
        inputs: vec![0],
        outputs: vec![1],
        constraints: Vec::new(),
    };
    let o = IOp {
        node: op.node.clone(),
        kind: op.kind.clone(),
        inputs: vec![0],
        outputs: vec![1],
    };
    eval_op(&mini, &o, &[Some((-128..128).collect()), None])
}

fn is_int8(p: &Program, t: usize) -> bool {
    p.tensors[t].q.ty == IntType::I8
}

/// Requantization of a MAC op's accumulator to its output grid.
fn requant(p: &Program, op: &IOp) -> Vec<(i32, i32)> {
    let q = |k: usize| &p.tensors[op.inputs[k]].q;
    let y = &p.tensors[op.outputs[0]].q;
    match op.kind {
        OpKind::Conv { .. } | OpKind::TransposeConv { .. } | OpKind::FullyConnected { .. } => {
            channel_multipliers(q(0), q(1), y)
        }
        OpKind::BatchMatMul => vec![fixed::quantize_multiplier(
            f64::from(q(0).s() * q(1).s()) / f64::from(y.s()),
        )],
        _ => Vec::new(),
    }
}

/// Lowers the NPU ops of `p` (placed by `places`, viewed by `views`) for `target`;
/// `offchip` marks the program tensors that live off-chip, and `work` is the SRAM left
/// for staging beside the arena.
pub fn lower(p: &Program, places: &[Place], views: &[OpView], target: &Target, offchip: &[bool], work: u64) -> Lowered {
    let mut readers = vec![0usize; p.tensors.len()];
    for op in &p.ops {
        for &x in &op.inputs {
            readers[x] += 1;
        }
    }
    for &o in &p.outputs {
        readers[o] += 1;
    }
    let mut l = Lowered {
        command_of: vec![None; p.ops.len()],
        ..Lowered::default()
    };
    // The command that wrote each tensor, while it may still take a table.
    let mut open: Vec<Option<usize>> = vec![None; p.tensors.len()];
    for (i, op) in p.ops.iter().enumerate() {
        if places[i] == Place::Cpu {
            l.steps.push(Step::Host(i));
            continue;
        }
        if matches!(op.kind, OpKind::Reshape) {
            l.elided.push(i);
            continue;
        }
        let x = op.inputs.first().copied();
        let unary8 = lut_op(&op.kind) && x.is_some_and(|x| is_int8(p, x)) && is_int8(p, op.outputs[0]);
        if unary8 {
            // A kernel that cannot tabulate (never expected) leaves a LUT command without
            // a table, which runs the op's kernel.
            let t = table(p, op).unwrap_or_default();
            if t.is_empty() {
                push(&mut l, i, Unit::Lut, t, p, views, target, offchip, work);
                continue;
            }
            if let Some(c) = x.filter(|&x| readers[x] == 1).and_then(|x| open[x]) {
                let cmd = &mut l.commands[c];
                cmd.fused = Some(i);
                cmd.lut = t;
                l.command_of[i] = Some(c);
                l.elided.push(i);
                open[op.outputs[0]] = None;
                continue;
            }
            push(&mut l, i, Unit::Lut, t, p, views, target, offchip, work);
            continue;
        }
        let unit = Unit::of(&op.kind);
        let c = push(&mut l, i, unit, Vec::new(), p, views, target, offchip, work);
        if matches!(unit, Unit::Mac | Unit::Elementwise) && op.outputs.len() == 1 {
            open[op.outputs[0]] = Some(c);
        }
    }
    l
}

#[expect(
    clippy::too_many_arguments,
    reason = "one call site, each argument a different stage's value"
)]
fn push(
    l: &mut Lowered,
    i: usize,
    unit: Unit,
    lut: Vec<i32>,
    p: &Program,
    views: &[OpView],
    target: &Target,
    offchip: &[bool],
    work: u64,
) -> usize {
    let op = &p.ops[i];
    let c = l.commands.len();
    l.commands.push(Command {
        unit,
        op: i,
        fused: None,
        lut,
        requant: requant(p, op),
        pieces: target.split_pieces(&views[i]),
        tile: tile(p, op, target, offchip, work),
    });
    l.command_of[i] = Some(c);
    l.steps.push(Step::Npu(c));
    c
}

/// Cuts one op's work so its staging buffers fit `work` bytes: weights streamed from
/// off-chip in output-channel blocks, feature maps that live off-chip in row tiles, each
/// buffer doubled so the next block loads while this one computes.
fn tile(p: &Program, op: &IOp, t: &Target, offchip: &[bool], work: u64) -> Tile {
    let bytes = |x: usize| super::memory::tensor_bytes(p.tensors[x].q.ty, p.tensors[x].shape.iter().product());
    let y = op.outputs[0];
    let shape = &p.tensors[y].shape;
    let (rows, cout) = match shape.len() {
        4 => (shape[2], shape[1]),
        0 => (1, 1),
        _ => (1, *shape.last().unwrap_or(&1)),
    };
    let rows = rows.max(1);
    let cout = cout.max(1);
    let weights: u64 = op
        .inputs
        .iter()
        .filter(|&&x| p.tensors[x].data.is_some())
        .map(|&x| bytes(x))
        .sum();
    let streamed_w = if t.memory.weights_offchip { weights } else { 0 };
    let ifm: u64 = op
        .inputs
        .iter()
        .filter(|&&x| p.tensors[x].data.is_none() && offchip[x])
        .map(|&x| bytes(x))
        .sum();
    let ofm = if offchip[y] { bytes(y) } else { 0 };
    // Half the staging space for weights, half for feature maps.
    let half = (work / 2).max(1);
    let block = t.compute.ofm_channel_block.max(1);
    let mut channels = cout;
    while channels > block && 2 * streamed_w * channels as u64 / cout as u64 > half {
        channels = (channels / 2).div_ceil(block) * block;
    }
    let mut r = rows;
    while r > 1 && 2 * (ifm + ofm) * r as u64 / rows as u64 > half {
        r = r.div_ceil(2);
    }
    Tile {
        rows: r,
        channels,
        count: rows.div_ceil(r) * cout.div_ceil(channels),
        weight_buffer: if streamed_w > 0 {
            2 * streamed_w * channels as u64 / cout as u64
        } else {
            0
        },
        ifm_buffer: 2 * ifm * r as u64 / rows as u64,
        ofm_buffer: 2 * ofm * r as u64 / rows as u64,
    }
}
