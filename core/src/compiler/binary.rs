//! The deployable binary (`.npub`), version 1: a header, a section table and sections,
//! each with a CRC-32. `docs/binary-format.md` documents every field; [`write`] makes the
//! bytes and [`read`] checks and decodes them (into the tensors, commands and host ops the
//! emulator runs), so a corrupted or truncated file is an error naming the section, never
//! a panic.

use super::Compiled;
use super::lower::{Command, Lowered, Step, Tile, Unit};
use crate::program::{
    Act, BinaryFn, Extreme, FloatOp, IOp, ITensor, OPS, OpKind, PadMode, PoolKind, Program, ReduceFn, SliceAxis,
    UnaryFn,
};
use crate::program::{IntType, QParams};

pub const MAGIC: [u8; 4] = *b"NPUB";
pub const VERSION_MAJOR: u16 = 1;
pub const VERSION_MINOR: u16 = 6;
/// Bytes before the section table.
pub const HEADER_BYTES: usize = 96;
/// Bytes of one section-table entry.
pub const ENTRY_BYTES: usize = 24;

/// The sections, in file order.
pub const SECTIONS: [[u8; 4]; 10] = [
    *b"STRS", *b"TENS", *b"WGTS", *b"CMDS", *b"HOST", *b"SCHD", *b"SEGS", *b"IOTS", *b"TRCE", *b"VIEW",
];

/// Why bytes are not a binary this build reads.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BinaryError {
    #[error("not an NPU binary: the file does not start with \"NPUB\"")]
    Magic,
    #[error("binary format version {0}.{1}; this build reads version {VERSION_MAJOR}.x")]
    Version(u16, u16),
    #[error("truncated: the header says {want} bytes, the file has {have}")]
    Size { want: u64, have: u64 },
    #[error("section {0}: missing")]
    Missing(String),
    #[error("section {name}: checksum {have:08x}, the table says {want:08x} (the file is corrupted)")]
    Checksum { name: String, want: u32, have: u32 },
    #[error("section {section} at byte {at}: {what}")]
    Malformed { section: String, at: usize, what: String },
}

/// Where a tensor lives on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// In the SRAM activation arena, at an offset.
    Sram,
    /// In the off-chip activation arena.
    Offchip,
    /// Constant data in the weights section.
    Weights,
    /// Never written (the input of a table fused into its producer's output stage).
    None,
}

impl Location {
    fn code(self) -> u8 {
        match self {
            Self::Sram => 0,
            Self::Offchip => 1,
            Self::Weights => 2,
            Self::None => 3,
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        [Self::Sram, Self::Offchip, Self::Weights, Self::None]
            .get(usize::from(c))
            .copied()
    }
}

/// One tensor of the binary.
#[derive(Clone, Debug, PartialEq)]
pub struct BinTensor {
    pub tensor: ITensor,
    pub location: Location,
    /// Arena offset, or offset in the weights section.
    pub offset: u64,
    pub bytes: u64,
}

/// One NPU command as the binary holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct BinCommand {
    pub unit: Unit,
    pub op: IOp,
    pub fused: Option<IOp>,
    pub lut: Vec<i32>,
    pub requant: Vec<(i32, i32)>,
    pub pieces: usize,
    pub tile: Tile,
}

/// How one graph node is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trace {
    /// By this NPU command.
    Command(usize),
    /// In this NPU command's output stage (a fused table).
    Fused(usize),
    /// By this host op.
    Host(usize),
    /// By no step: a view of its input's buffer.
    View,
}

/// A decoded binary.
#[derive(Clone, Debug, PartialEq)]
pub struct Binary {
    pub version: (u16, u16),
    pub target: String,
    pub graph: String,
    pub sram_arena_bytes: u64,
    pub offchip_arena_bytes: u64,
    pub tensors: Vec<BinTensor>,
    pub commands: Vec<BinCommand>,
    pub host: Vec<IOp>,
    pub steps: Vec<Step>,
    /// Device (0 NPU, 1 host), first step, step count.
    pub segments: Vec<(u8, usize, usize)>,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
    /// Per program op in program order: its node and how it is carried out.
    pub trace: Vec<(String, Trace)>,
    /// Tensors that are views of another's buffer (a RESHAPE's output): (source, view).
    pub views: Vec<(usize, usize)>,
    /// Per section: name, offset, size, CRC-32.
    pub sections: Vec<(String, u64, u64, u32)>,
}

impl Binary {
    /// Graph nodes a command carries out (its op, and a fused table's).
    pub fn command_nodes(&self, c: usize) -> Vec<&str> {
        self.trace
            .iter()
            .filter(|(_, t)| matches!(t, Trace::Command(k) | Trace::Fused(k) if *k == c))
            .map(|(n, _)| n.as_str())
            .fold(Vec::new(), |mut v, n| {
                if v.last() != Some(&n) {
                    v.push(n);
                }
                v
            })
    }
}

// ---------------------------------------------------------------- CRC-32 (IEEE)

const CRC_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// CRC-32 as zlib computes it.
pub fn crc32(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0u32, |c, &b| {
        CRC_TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8)
    })
}

// ---------------------------------------------------------------- writing

#[derive(Default)]
struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    fn ids(&mut self, ids: &[usize]) {
        self.len(ids.len());
        for &i in ids {
            self.len(i);
        }
    }
}

struct Strings {
    list: Vec<String>,
    index: std::collections::HashMap<String, u32>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

fn dtype_code(t: IntType) -> u8 {
    match t {
        IntType::I8 => 0,
        IntType::I16 => 1,
        IntType::I32 => 2,
        IntType::I64 => 3,
        IntType::I4 => 4,
        IntType::F32 => 5,
        IntType::Bool => 6,
        IntType::Index => 7,
    }
}

fn dtype_of(c: u8) -> Option<IntType> {
    [
        IntType::I8,
        IntType::I16,
        IntType::I32,
        IntType::I64,
        IntType::I4,
        IntType::F32,
        IntType::Bool,
        IntType::Index,
    ]
    .get(usize::from(c))
    .copied()
}

/// Packs constant codes: int4 two per byte (low nibble first), the rest little-endian.
fn pack(ty: IntType, codes: &[i64], out: &mut Vec<u8>) {
    match ty {
        IntType::I4 => {
            for pair in codes.chunks(2) {
                let lo = (pair[0] & 0xF) as u8;
                let hi = pair.get(1).map_or(0, |&v| (v & 0xF) as u8);
                out.push(lo | hi << 4);
            }
        }
        IntType::I8 | IntType::Bool => out.extend(codes.iter().map(|&v| v as i8 as u8)),
        IntType::I16 => out.extend(codes.iter().flat_map(|&v| (v as i16).to_le_bytes())),
        IntType::I32 | IntType::Index | IntType::F32 => {
            out.extend(codes.iter().flat_map(|&v| (v as i32).to_le_bytes()));
        }
        IntType::I64 => out.extend(codes.iter().flat_map(|&v| v.to_le_bytes())),
    }
}

fn unpack(ty: IntType, n: usize, b: &[u8]) -> Vec<i64> {
    match ty {
        IntType::I4 => (0..n)
            .map(|i| {
                let nib = (b[i / 2] >> (4 * (i % 2))) & 0xF;
                i64::from(((nib << 4) as i8) >> 4)
            })
            .collect(),
        IntType::I8 | IntType::Bool => b[..n].iter().map(|&v| i64::from(v as i8)).collect(),
        IntType::I16 => b
            .chunks_exact(2)
            .take(n)
            .map(|c| i64::from(i16::from_le_bytes([c[0], c[1]])))
            .collect(),
        IntType::I32 | IntType::Index | IntType::F32 => b
            .chunks_exact(4)
            .take(n)
            .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        IntType::I64 => b
            .chunks_exact(8)
            .take(n)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
    }
}

fn act_code(a: Act) -> i32 {
    match a {
        Act::None => 0,
        Act::Relu => 1,
        Act::Relu6 => 2,
        Act::ReluN1To1 => 3,
    }
}

fn act_of(c: i32) -> Option<Act> {
    [Act::None, Act::Relu, Act::Relu6, Act::ReluN1To1]
        .get(usize::try_from(c).ok()?)
        .copied()
}

fn usizes(w: &mut Vec<i32>, v: &[usize]) {
    w.push(v.len() as i32);
    w.extend(v.iter().map(|&x| x as i32));
}

fn floats(w: &mut Vec<i32>, v: &[f32]) {
    w.push(v.len() as i32);
    w.extend(v.iter().map(|x| x.to_bits() as i32));
}

/// An op's code (its row of the op table) and parameter words.
fn encode_kind(k: &OpKind) -> (u8, Vec<i32>) {
    let mut w = Vec::new();
    let u = |x: usize| x as i32;
    match k {
        OpKind::Conv {
            strides,
            dilations,
            pads,
            groups,
            act,
        } => {
            w.extend(strides.iter().chain(dilations).chain(pads).map(|&x| u(x)));
            w.push(u(*groups));
            w.push(act_code(*act));
        }
        OpKind::TransposeConv { strides, act } => {
            w.extend(strides.iter().map(|&x| u(x)));
            w.push(act_code(*act));
        }
        OpKind::FullyConnected { act }
        | OpKind::Add { act }
        | OpKind::Sub { act }
        | OpKind::Mul { act }
        | OpKind::Relu { act } => {
            w.push(act_code(*act));
        }
        OpKind::Mean { axes } | OpKind::Reduce { axes, .. } | OpKind::Transpose { perm: axes } => usizes(&mut w, axes),
        OpKind::Pool {
            kernel,
            strides,
            pads,
            act,
            ..
        } => {
            w.extend(kernel.iter().chain(strides).chain(pads).map(|&x| u(x)));
            w.push(act_code(*act));
        }
        OpKind::Softmax { beta } => w.push(beta.to_bits() as i32),
        OpKind::Concat { axis } | OpKind::Gather { axis } | OpKind::ArgExtreme { axis, .. } => w.push(u(*axis)),
        OpKind::Slice { axes } => {
            w.push(axes.len() as i32);
            for a in axes {
                w.extend([u(a.axis), u(a.first), u(a.count), a.step as i32]);
            }
        }
        OpKind::Pad { pads, mode } => {
            w.push(pads.len() as i32);
            for p in pads {
                w.extend([u(p[0]), u(p[1])]);
            }
            match mode {
                PadMode::Constant(c) => w.extend([0, *c]),
                PadMode::Reflect => w.extend([1, 0]),
            }
        }
        OpKind::Float { op } => match op {
            FloatOp::LayerNorm { epsilon, gamma, beta } => {
                w.push(epsilon.to_bits() as i32);
                floats(&mut w, gamma);
                floats(&mut w, beta);
            }
            FloatOp::Reduce { axes, .. } => usizes(&mut w, axes),
            FloatOp::Node(n) => {
                bytes_words(&mut w, n.op.as_bytes());
                bytes_words(&mut w, n.domain.as_bytes());
                bytes_words(&mut w, &n.onnx);
            }
            FloatOp::Div
            | FloatOp::Equal
            | FloatOp::Where
            | FloatOp::Reciprocal
            | FloatOp::Cast
            | FloatOp::HardSwish
            | FloatOp::Unary { .. }
            | FloatOp::Binary { .. }
            | FloatOp::Softmax => {}
        },
        OpKind::ResizeNearest
        | OpKind::HardSwish
        | OpKind::Logistic
        | OpKind::Tanh
        | OpKind::Reshape
        | OpKind::Requantize
        | OpKind::BatchMatMul
        | OpKind::Sqrt
        | OpKind::Rsqrt
        | OpKind::SquaredDifference
        | OpKind::Log
        | OpKind::Exp
        | OpKind::Extremum { .. }
        | OpKind::BroadcastTo => {}
    }
    (k.code(), w)
}

/// A byte string as parameter words: its length, then four bytes per word (little-endian,
/// the last word zero-padded).
fn bytes_words(w: &mut Vec<i32>, b: &[u8]) {
    w.push(i32::try_from(b.len()).unwrap_or(i32::MAX));
    w.extend(b.chunks(4).map(|c| {
        let mut q = [0u8; 4];
        q[..c.len()].copy_from_slice(c);
        i32::from_le_bytes(q)
    }));
}

struct Words<'a> {
    w: &'a [i32],
    at: usize,
}

impl Words<'_> {
    fn next(&mut self) -> Option<i32> {
        let v = self.w.get(self.at).copied();
        self.at += 1;
        v
    }
    fn un(&mut self) -> Option<usize> {
        usize::try_from(self.next()?).ok()
    }
    fn arr<const N: usize>(&mut self) -> Option<[usize; N]> {
        let mut a = [0; N];
        for x in &mut a {
            *x = self.un()?;
        }
        Some(a)
    }
    fn act(&mut self) -> Option<Act> {
        act_of(self.next()?)
    }
    fn list(&mut self) -> Option<Vec<usize>> {
        let n = self.un()?;
        (0..n).map(|_| self.un()).collect()
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.un()?;
        let words = n.div_ceil(4);
        let mut out = Vec::with_capacity(words * 4);
        for _ in 0..words {
            out.extend(self.next()?.to_le_bytes());
        }
        if out[n..].iter().any(|&b| b != 0) {
            return None;
        }
        out.truncate(n);
        Some(out)
    }
    fn floats(&mut self) -> Option<Vec<f32>> {
        let n = self.un()?;
        (0..n).map(|_| self.next().map(|b| f32::from_bits(b as u32))).collect()
    }
}

/// Reads parameter words back; `None` when they do not make the op.
fn decode_kind(code: u8, w: &[i32]) -> Option<OpKind> {
    let mut r = Words { w, at: 0 };
    let k = match code {
        0 => OpKind::Conv {
            strides: r.arr()?,
            dilations: r.arr()?,
            pads: r.arr()?,
            groups: r.un()?,
            act: r.act()?,
        },
        1 => OpKind::TransposeConv {
            strides: r.arr()?,
            act: r.act()?,
        },
        2 => OpKind::ResizeNearest,
        3 => OpKind::FullyConnected { act: r.act()? },
        4..=6 => {
            let act = r.act()?;
            match code {
                4 => OpKind::Add { act },
                5 => OpKind::Sub { act },
                _ => OpKind::Mul { act },
            }
        }
        7 | 21 | 22 | 15 => {
            let v = r.list()?;
            match code {
                7 => OpKind::Mean { axes: v },
                21 => OpKind::Reduce {
                    which: Extreme::Max,
                    axes: v,
                },
                22 => OpKind::Reduce {
                    which: Extreme::Min,
                    axes: v,
                },
                _ => OpKind::Transpose { perm: v },
            }
        }
        8 | 9 => OpKind::Pool {
            kind: if code == 8 { PoolKind::Max } else { PoolKind::Avg },
            kernel: r.arr()?,
            strides: r.arr()?,
            pads: r.arr()?,
            act: r.act()?,
        },
        10 => OpKind::HardSwish,
        11 => OpKind::Logistic,
        12 => OpKind::Tanh,
        13 => OpKind::Softmax {
            beta: f32::from_bits(r.next()? as u32),
        },
        14 => OpKind::Reshape,
        16 => OpKind::Concat { axis: r.un()? },
        17 => OpKind::Requantize,
        18 => {
            let n = r.un()?;
            let mut axes = Vec::with_capacity(n.min(16));
            for _ in 0..n {
                axes.push(SliceAxis {
                    axis: r.un()?,
                    first: r.un()?,
                    count: r.un()?,
                    step: r.next()? as isize,
                });
            }
            OpKind::Slice { axes }
        }
        19 => OpKind::BatchMatMul,
        20 => {
            let n = r.un()?;
            let mut pads = Vec::with_capacity(n.min(16));
            for _ in 0..n {
                pads.push(r.arr()?);
            }
            let (m, c) = (r.next()?, r.next()?);
            OpKind::Pad {
                pads,
                mode: match m {
                    0 => PadMode::Constant(c),
                    1 => PadMode::Reflect,
                    _ => return None,
                },
            }
        }
        23 => OpKind::Sqrt,
        24 => OpKind::Log,
        25 => OpKind::Exp,
        26 => OpKind::Extremum { which: Extreme::Max },
        27 => OpKind::Extremum { which: Extreme::Min },
        28 => OpKind::BroadcastTo,
        61 => OpKind::Rsqrt,
        62 => OpKind::SquaredDifference,
        58 => OpKind::Gather { axis: r.un()? },
        59 | 60 => OpKind::ArgExtreme {
            which: if code == 59 { Extreme::Max } else { Extreme::Min },
            axis: r.un()?,
        },
        29 => {
            let epsilon = f32::from_bits(r.next()? as u32);
            let gamma = r.floats()?;
            let beta = r.floats()?;
            OpKind::Float {
                op: FloatOp::LayerNorm { epsilon, gamma, beta },
            }
        }
        30..=35 => OpKind::Float {
            op: [
                FloatOp::Div,
                FloatOp::Equal,
                FloatOp::Where,
                FloatOp::Reciprocal,
                FloatOp::Cast,
                FloatOp::HardSwish,
            ][usize::from(code - 30)]
            .clone(),
        },
        36 => OpKind::Relu { act: r.act()? },
        37..=44 => OpKind::Float {
            op: FloatOp::Unary {
                f: UnaryFn::ALL[usize::from(code - 37)],
            },
        },
        45..=49 => OpKind::Float {
            op: FloatOp::Binary {
                f: BinaryFn::ALL[usize::from(code - 45)],
            },
        },
        50..=53 => OpKind::Float {
            op: FloatOp::Reduce {
                f: ReduceFn::ALL[usize::from(code - 50)],
                axes: r.list()?,
            },
        },
        54 => OpKind::Float { op: FloatOp::Softmax },
        55 => OpKind::Float {
            op: FloatOp::Unary { f: UnaryFn::Rsqrt },
        },
        56 => OpKind::Float {
            op: FloatOp::Binary {
                f: BinaryFn::SquaredDifference,
            },
        },
        57 => {
            let op = String::from_utf8(r.bytes()?).ok()?;
            let domain = String::from_utf8(r.bytes()?).ok()?;
            let onnx = r.bytes()?;
            OpKind::Float {
                op: FloatOp::Node(Box::new(crate::program::FloatNode { op, domain, onnx })),
            }
        }
        _ => return None,
    };
    (r.at == w.len()).then_some(k)
}

fn op_record(w: &mut W, s: &mut Strings, op: &IOp) {
    let (code, words) = encode_kind(&op.kind);
    w.u32(s.id(&op.node));
    w.u8(code);
    w.len(words.len());
    for x in words {
        w.i32(x);
    }
    w.ids(&op.inputs);
    w.ids(&op.outputs);
}

/// Writes the binary of `c` (compiled from `p`).
pub fn write(p: &Program, c: &Compiled) -> Vec<u8> {
    let l = &c.lowered;
    let mut s = Strings {
        list: Vec::new(),
        index: std::collections::HashMap::default(),
    };
    // Tensors and weights.
    let fused_mid: std::collections::HashSet<usize> = l
        .commands
        .iter()
        .filter(|k| k.fused.is_some())
        .map(|k| p.ops[k.op].outputs[0])
        .collect();
    let mut weights = Vec::new();
    let mut tens = W::default();
    tens.len(p.tensors.len());
    for (i, t) in p.tensors.iter().enumerate() {
        let elements: usize = t.shape.iter().product();
        let bytes = super::memory::tensor_bytes(t.q.ty, elements);
        let (loc, offset) = if let Some(d) = &t.data {
            while weights.len() % 16 != 0 {
                weights.push(0);
            }
            let at = weights.len() as u64;
            pack(t.q.ty, d, &mut weights);
            (Location::Weights, at)
        } else if fused_mid.contains(&i) {
            (Location::None, 0)
        } else {
            match c.memory.range_of.get(i).copied().flatten() {
                Some(r) if c.memory.offchip.offsets.len() > r && c.memory.is_spilled(r) => {
                    (Location::Offchip, c.memory.offchip.offsets[r])
                }
                Some(r) => (Location::Sram, c.memory.sram.offsets.get(r).copied().unwrap_or(0)),
                None => (Location::None, 0),
            }
        };
        tens.u32(s.id(&t.name));
        tens.u8(dtype_code(t.q.ty));
        tens.u8(loc.code());
        tens.u8(t.q.axis.map_or(0xFF, |a| a as u8));
        tens.u8(t.shape.len() as u8);
        for &d in &t.shape {
            tens.len(d);
        }
        tens.len(t.q.scale.len());
        for &x in &t.q.scale {
            tens.u32(x.to_bits());
        }
        tens.len(t.q.zero_point.len());
        for &z in &t.q.zero_point {
            tens.i32(z);
        }
        tens.u64(offset);
        tens.u64(bytes);
    }
    // NPU commands.
    let mut cmds = W::default();
    cmds.len(l.commands.len());
    for k in &l.commands {
        cmds.u8(k.unit.code());
        cmds.u8(u8::from(k.fused.is_some()));
        cmds.u16(0);
        op_record(&mut cmds, &mut s, &p.ops[k.op]);
        if let Some(f) = k.fused {
            op_record(&mut cmds, &mut s, &p.ops[f]);
        }
        cmds.len(k.lut.len());
        for &v in &k.lut {
            cmds.u16(v as i16 as u16);
        }
        cmds.len(k.requant.len());
        for &(m, sh) in &k.requant {
            cmds.i32(m);
            cmds.i32(sh);
        }
        cmds.len(k.pieces);
        cmds.len(k.tile.rows);
        cmds.len(k.tile.channels);
        cmds.len(k.tile.count);
        cmds.u64(k.tile.weight_buffer);
        cmds.u64(k.tile.ifm_buffer);
        cmds.u64(k.tile.ofm_buffer);
    }
    // Host ops, the schedule, segments.
    let host_ops: Vec<usize> = l
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Host(i) => Some(*i),
            Step::Npu(_) => None,
        })
        .collect();
    let mut host = W::default();
    host.len(host_ops.len());
    for &i in &host_ops {
        op_record(&mut host, &mut s, &p.ops[i]);
    }
    let mut schd = W::default();
    schd.len(l.steps.len());
    let mut host_index = vec![usize::MAX; p.ops.len()];
    for (h, &i) in host_ops.iter().enumerate() {
        host_index[i] = h;
    }
    for st in &l.steps {
        match *st {
            Step::Npu(k) => {
                schd.u8(0);
                schd.len(k);
            }
            Step::Host(i) => {
                schd.u8(1);
                schd.len(host_index[i]);
            }
        }
    }
    let mut segs = W::default();
    let runs = step_segments(&l.steps);
    segs.len(runs.len());
    for (dev, first, n) in runs {
        segs.u8(dev);
        segs.len(first);
        segs.len(n);
    }
    let mut io = W::default();
    io.ids(&p.inputs);
    io.ids(&p.outputs);
    let mut trce = W::default();
    trce.len(p.ops.len());
    for (i, op) in p.ops.iter().enumerate() {
        trce.u32(s.id(&op.node));
        let (kind, at) = if host_index[i] != usize::MAX {
            (2, host_index[i])
        } else if let Some(k) = l.command_of[i] {
            (u8::from(l.commands[k].op != i), k)
        } else {
            (3, u32::MAX as usize)
        };
        trce.u8(kind);
        trce.len(at);
    }
    let views: Vec<(usize, usize)> = l
        .elided
        .iter()
        .map(|&i| &p.ops[i])
        .filter(|op| matches!(op.kind, crate::program::OpKind::Reshape))
        .map(|op| (op.inputs[0], op.outputs[0]))
        .collect();
    let mut view = W::default();
    view.len(views.len());
    for (a, b) in views {
        view.len(a);
        view.len(b);
    }
    let mut strs = W::default();
    strs.len(s.list.len());
    for x in &s.list {
        strs.len(x.len());
        strs.0.extend_from_slice(x.as_bytes());
    }
    let bodies = [
        strs.0, tens.0, weights, cmds.0, host.0, schd.0, segs.0, io.0, trce.0, view.0,
    ];
    // Header, table, sections at 16-byte boundaries.
    let table_end = HEADER_BYTES + ENTRY_BYTES * bodies.len();
    let mut offsets = Vec::new();
    let mut at = table_end.div_ceil(16) * 16;
    for b in &bodies {
        offsets.push(at);
        at = (at + b.len()).div_ceil(16) * 16;
    }
    let total = at;
    let mut out = W(Vec::with_capacity(total));
    out.0.extend_from_slice(&MAGIC);
    out.u16(VERSION_MAJOR);
    out.u16(VERSION_MINOR);
    out.u64(total as u64);
    out.len(bodies.len());
    out.u32(0);
    let fixed = |s: &str, n: usize| {
        let mut b = s.as_bytes()[..s.len().min(n)].to_vec();
        b.resize(n, 0);
        b
    };
    out.0.extend(fixed(&c.target, 32));
    out.0.extend(fixed(&c.graph, 24));
    out.u64(c.memory.sram_arena_bytes);
    out.u64(c.memory.offchip.size);
    debug_assert_eq!(out.0.len(), HEADER_BYTES);
    for (k, b) in bodies.iter().enumerate() {
        out.0.extend_from_slice(&SECTIONS[k]);
        out.u32(0);
        out.u64(offsets[k] as u64);
        out.u32(b.len() as u32);
        out.u32(crc32(b));
    }
    for (k, b) in bodies.iter().enumerate() {
        out.0.resize(offsets[k], 0);
        out.0.extend_from_slice(b);
    }
    out.0.resize(total, 0);
    let crc = header_crc(&out.0[..table_end]);
    out.0[20..24].copy_from_slice(&crc.to_le_bytes());
    out.0
}

/// Recomputes every section's checksum and the header's, in place (for tools that patch
/// a binary, and for fuzzing the decoder behind valid checksums). Bytes that are not a
/// table are left alone.
pub fn reseal(b: &mut [u8]) {
    if b.len() < HEADER_BYTES {
        return;
    }
    let nsec = u32::from_le_bytes([b[16], b[17], b[18], b[19]]) as usize;
    let table_end = HEADER_BYTES.saturating_add(nsec.saturating_mul(ENTRY_BYTES));
    if nsec > 64 || table_end > b.len() {
        return;
    }
    for k in 0..nsec {
        let e = HEADER_BYTES + k * ENTRY_BYTES;
        let off = u64::from_le_bytes(b[e + 8..e + 16].try_into().unwrap_or([0; 8]));
        let len = u64::from(u32::from_le_bytes(b[e + 16..e + 20].try_into().unwrap_or([0; 4])));
        let Some(end) = off.checked_add(len).filter(|&x| x <= b.len() as u64) else {
            continue;
        };
        let crc = crc32(&b[off as usize..end as usize]);
        b[e + 20..e + 24].copy_from_slice(&crc.to_le_bytes());
    }
    let crc = header_crc(&b[..table_end]);
    b[20..24].copy_from_slice(&crc.to_le_bytes());
}

/// CRC-32 of the header and section table with the header's checksum field (bytes
/// 20..24) read as zero.
fn header_crc(head: &[u8]) -> u32 {
    let mut h = head.to_vec();
    h[20..24].fill(0);
    crc32(&h)
}

/// Maximal runs of steps on one device: (0 NPU or 1 host, first step, count).
fn step_segments(steps: &[Step]) -> Vec<(u8, usize, usize)> {
    let mut runs: Vec<(u8, usize, usize)> = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let d = u8::from(matches!(s, Step::Host(_)));
        match runs.last_mut() {
            Some(r) if r.0 == d => r.2 += 1,
            _ => runs.push((d, i, 1)),
        }
    }
    runs
}

// ---------------------------------------------------------------- reading

struct R<'a> {
    b: &'a [u8],
    at: usize,
    name: &'a str,
}

impl<'a> R<'a> {
    fn err(&self, what: impl Into<String>) -> BinaryError {
        BinaryError::Malformed {
            section: self.name.to_string(),
            at: self.at,
            what: what.into(),
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], BinaryError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(self.err(format!("needs {n} more bytes, the section ends")));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, BinaryError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, BinaryError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, BinaryError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn i32(&mut self) -> Result<i32, BinaryError> {
        Ok(self.u32()? as i32)
    }
    fn u64(&mut self) -> Result<u64, BinaryError> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }
    /// A count of items of at least `min` bytes each (bounded by what is left).
    fn count(&mut self, min: usize) -> Result<usize, BinaryError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min.max(1)) > self.b.len() - self.at {
            return Err(self.err(format!("a count of {n} does not fit in the section")));
        }
        Ok(n)
    }
    fn index(&mut self, limit: usize, what: &str) -> Result<usize, BinaryError> {
        let i = self.u32()? as usize;
        if i >= limit {
            return Err(self.err(format!("{what} {i} out of range (there are {limit})")));
        }
        Ok(i)
    }
    fn ids(&mut self, limit: usize) -> Result<Vec<usize>, BinaryError> {
        let n = self.count(4)?;
        (0..n).map(|_| self.index(limit, "tensor")).collect()
    }
}

fn read_op(r: &mut R, strings: &[String], tensors: usize) -> Result<IOp, BinaryError> {
    let node = strings[r.index(strings.len(), "string")?].clone();
    let code = r.u8()?;
    let n = r.count(4)?;
    let words = (0..n).map(|_| r.i32()).collect::<Result<Vec<_>, _>>()?;
    let kind = decode_kind(code, &words).ok_or_else(|| {
        r.err(format!(
            "node {node}: op code {code} ({}) with {n} parameter words is not an op",
            OPS.get(usize::from(code)).map_or("unknown", |s| s.name)
        ))
    })?;
    let inputs = r.ids(tensors)?;
    let outputs = r.ids(tensors)?;
    if outputs.is_empty() {
        return Err(r.err(format!("node {node}: an op with no output")));
    }
    Ok(IOp {
        node,
        kind,
        inputs,
        outputs,
    })
}

/// Checks and decodes a binary.
pub fn read(b: &[u8]) -> Result<Binary, BinaryError> {
    if b.len() < 4 || b[..4] != MAGIC {
        return Err(BinaryError::Magic);
    }
    let mut h = R {
        b,
        at: 4,
        name: "header",
    };
    if b.len() < HEADER_BYTES {
        return Err(BinaryError::Size {
            want: HEADER_BYTES as u64,
            have: b.len() as u64,
        });
    }
    let (major, minor) = (h.u16()?, h.u16()?);
    if major != VERSION_MAJOR {
        return Err(BinaryError::Version(major, minor));
    }
    let total = h.u64()?;
    if total != b.len() as u64 {
        return Err(BinaryError::Size {
            want: total,
            have: b.len() as u64,
        });
    }
    let nsec = h.u32()? as usize;
    let head_crc = h.u32()?;
    let text = |x: &[u8]| String::from_utf8_lossy(x).trim_end_matches('\0').to_string();
    let target = text(h.take(32)?);
    let graph = text(h.take(24)?);
    let sram_arena_bytes = h.u64()?;
    let offchip_arena_bytes = h.u64()?;
    if nsec > 64 || HEADER_BYTES + nsec * ENTRY_BYTES > b.len() {
        return Err(h.err(format!("a section table of {nsec} entries does not fit")));
    }
    let table_end = HEADER_BYTES + nsec * ENTRY_BYTES;
    // Since 1.2 the header and table carry their own CRC (1.0 and 1.1 wrote 0 there).
    if minor >= 2 {
        let have = header_crc(&b[..table_end]);
        if have != head_crc {
            return Err(BinaryError::Checksum {
                name: "header".into(),
                want: head_crc,
                have,
            });
        }
    }
    let mut covered = vec![(0usize, table_end)];
    let mut sections = Vec::new();
    let mut body: std::collections::HashMap<[u8; 4], &[u8]> = std::collections::HashMap::default();
    for _ in 0..nsec {
        let name: [u8; 4] = h.take(4)?.try_into().unwrap_or([0; 4]);
        h.u32()?;
        let off = h.u64()?;
        let size = u64::from(h.u32()?);
        let crc = h.u32()?;
        let label = String::from_utf8_lossy(&name).to_string();
        let end = off.checked_add(size).filter(|&e| e <= b.len() as u64);
        let Some(end) = end else {
            return Err(BinaryError::Malformed {
                section: label,
                at: 0,
                what: format!(
                    "bytes {off}..{} are past the end of the file ({} bytes)",
                    off.saturating_add(size),
                    b.len()
                ),
            });
        };
        let s = &b[off as usize..end as usize];
        let have = crc32(s);
        if have != crc {
            return Err(BinaryError::Checksum {
                name: label,
                want: crc,
                have,
            });
        }
        covered.push((off as usize, end as usize));
        sections.push((label, off, size, crc));
        body.insert(name, s);
    }
    // Bytes outside the header, the table and the sections are zero padding.
    covered.sort_unstable();
    let mut at = 0;
    for (start, end) in covered.into_iter().chain([(b.len(), b.len())]) {
        if let Some(k) = b[at.min(start)..start].iter().position(|&v| v != 0) {
            return Err(BinaryError::Malformed {
                section: "padding".into(),
                at: at + k,
                what: "a byte between sections is not zero".into(),
            });
        }
        at = at.max(end);
    }
    let sec = |n: &'static [u8; 4]| -> Result<R<'_>, BinaryError> {
        let name = std::str::from_utf8(n).unwrap_or("?");
        body.get(n)
            .map(|b| R { b, at: 0, name })
            .ok_or_else(|| BinaryError::Missing(name.to_string()))
    };
    // Strings.
    let mut r = sec(b"STRS")?;
    let n = r.count(4)?;
    let mut strings = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.u32()? as usize;
        strings.push(String::from_utf8_lossy(r.take(len)?).to_string());
    }
    // Tensors.
    let wgts = sec(b"WGTS")?.b;
    let mut r = sec(b"TENS")?;
    let n = r.count(8)?;
    let mut tensors = Vec::with_capacity(n);
    for k in 0..n {
        let name = strings[r.index(strings.len(), "string")?].clone();
        let dt = r.u8()?;
        let ty = dtype_of(dt).ok_or_else(|| r.err(format!("tensor {name}: data type code {dt}")))?;
        let lc = r.u8()?;
        let location = Location::from_code(lc).ok_or_else(|| r.err(format!("tensor {name}: location code {lc}")))?;
        let axis = r.u8()?;
        let rank = r.u8()? as usize;
        let shape = (0..rank)
            .map(|_| r.u32().map(|d| d as usize))
            .collect::<Result<Vec<_>, _>>()?;
        let ns = r.count(4)?;
        let scale = (0..ns)
            .map(|_| r.u32().map(f32::from_bits))
            .collect::<Result<Vec<_>, _>>()?;
        let nz = r.count(4)?;
        let zero_point = (0..nz).map(|_| r.i32()).collect::<Result<Vec<_>, _>>()?;
        let offset = r.u64()?;
        let bytes = r.u64()?;
        let elements = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let want = elements.map(|e| super::memory::tensor_bytes(ty, e));
        if want != Some(bytes) {
            return Err(r.err(format!("tensor {k} ({name}): {bytes} bytes for shape {shape:?}")));
        }
        let data = if location == Location::Weights {
            let end = offset.checked_add(bytes).filter(|&e| e <= wgts.len() as u64);
            let Some(end) = end else {
                return Err(r.err(format!("tensor {name}: its data is past the end of WGTS")));
            };
            Some(unpack(ty, elements.unwrap_or(0), &wgts[offset as usize..end as usize]))
        } else {
            None
        };
        tensors.push(BinTensor {
            tensor: ITensor {
                name,
                shape,
                q: QParams {
                    ty,
                    scale,
                    zero_point,
                    axis: (axis != 0xFF).then_some(usize::from(axis)),
                },
                data,
            },
            location,
            offset,
            bytes,
        });
    }
    let nt = tensors.len();
    // Commands.
    let mut r = sec(b"CMDS")?;
    let n = r.count(16)?;
    let mut commands = Vec::with_capacity(n);
    for _ in 0..n {
        let uc = r.u8()?;
        let unit = Unit::from_code(uc).ok_or_else(|| r.err(format!("unit code {uc}")))?;
        let flags = r.u8()?;
        r.u16()?;
        let op = read_op(&mut r, &strings, nt)?;
        let fused = if flags & 1 != 0 {
            Some(read_op(&mut r, &strings, nt)?)
        } else {
            None
        };
        let nl = r.count(2)?;
        let lut = (0..nl)
            .map(|_| r.u16().map(|v| i32::from(v as i16)))
            .collect::<Result<Vec<_>, _>>()?;
        let nq = r.count(8)?;
        let requant = (0..nq)
            .map(|_| Ok((r.i32()?, r.i32()?)))
            .collect::<Result<Vec<_>, BinaryError>>()?;
        let pieces = r.u32()? as usize;
        let tile = Tile {
            rows: r.u32()? as usize,
            channels: r.u32()? as usize,
            count: r.u32()? as usize,
            weight_buffer: r.u64()?,
            ifm_buffer: r.u64()?,
            ofm_buffer: r.u64()?,
        };
        commands.push(BinCommand {
            unit,
            op,
            fused,
            lut,
            requant,
            pieces,
            tile,
        });
    }
    let mut r = sec(b"HOST")?;
    let n = r.count(16)?;
    let host = (0..n)
        .map(|_| read_op(&mut r, &strings, nt))
        .collect::<Result<Vec<_>, _>>()?;
    let mut r = sec(b"SCHD")?;
    let n = r.count(5)?;
    let mut steps = Vec::with_capacity(n);
    for _ in 0..n {
        steps.push(match r.u8()? {
            0 => Step::Npu(r.index(commands.len(), "command")?),
            1 => Step::Host(r.index(host.len(), "host op")?),
            d => return Err(r.err(format!("step device {d}"))),
        });
    }
    let mut r = sec(b"SEGS")?;
    let n = r.count(9)?;
    let mut segments = Vec::with_capacity(n);
    for _ in 0..n {
        let d = r.u8()?;
        let (first, count) = (r.u32()? as usize, r.u32()? as usize);
        if d > 1 || first.saturating_add(count) > steps.len() {
            return Err(r.err(format!(
                "segment on device {d}, steps {first}+{count} of {}",
                steps.len()
            )));
        }
        segments.push((d, first, count));
    }
    let mut r = sec(b"IOTS")?;
    let inputs = r.ids(nt)?;
    let outputs = r.ids(nt)?;
    let mut r = sec(b"TRCE")?;
    let n = r.count(9)?;
    let mut trace = Vec::with_capacity(n);
    for _ in 0..n {
        let node = strings[r.index(strings.len(), "string")?].clone();
        let kind = r.u8()?;
        let at = r.u32()? as usize;
        let t = match kind {
            0 | 1 if at < commands.len() => {
                if kind == 0 {
                    Trace::Command(at)
                } else {
                    Trace::Fused(at)
                }
            }
            2 if at < host.len() => Trace::Host(at),
            3 => Trace::View,
            _ => return Err(r.err(format!("node {node}: trace kind {kind} to {at}"))),
        };
        trace.push((node, t));
    }
    // Version 1.0 files have no views.
    let mut views = Vec::new();
    if let Ok(mut r) = sec(b"VIEW") {
        let n = r.count(8)?;
        for _ in 0..n {
            views.push((r.index(nt, "tensor")?, r.index(nt, "tensor")?));
        }
    }
    Ok(Binary {
        version: (major, minor),
        target,
        graph,
        sram_arena_bytes,
        offchip_arena_bytes,
        tensors,
        commands,
        host,
        steps,
        segments,
        inputs,
        outputs,
        trace,
        views,
        sections,
    })
}

/// Lowered commands as the binary stores them (for comparing a decoded binary).
pub fn commands_of(p: &Program, l: &Lowered) -> Vec<BinCommand> {
    l.commands
        .iter()
        .map(|k: &Command| BinCommand {
            unit: k.unit,
            op: p.ops[k.op].clone(),
            fused: k.fused.map(|f| p.ops[f].clone()),
            lut: k.lut.clone(),
            requant: k.requant.clone(),
            pieces: k.pieces,
            tile: k.tile.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_zlib() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn op_encoding_round_trips() {
        let kinds = vec![
            OpKind::Conv {
                strides: [1, 4],
                dilations: [1, 1],
                pads: [0, 1, 2, 3],
                groups: 8,
                act: Act::Relu6,
            },
            OpKind::Slice {
                axes: vec![SliceAxis {
                    axis: 3,
                    first: 5,
                    count: 2,
                    step: -1,
                }],
            },
            OpKind::Pad {
                pads: vec![[0, 0], [1, 2]],
                mode: PadMode::Constant(-7),
            },
            OpKind::Float {
                op: FloatOp::LayerNorm {
                    epsilon: 1e-5,
                    gamma: vec![1.0, 2.0],
                    beta: vec![0.5, -0.5],
                },
            },
            OpKind::Softmax { beta: 0.5 },
            OpKind::Relu { act: Act::Relu6 },
            OpKind::Float {
                op: FloatOp::Unary { f: UnaryFn::Logistic },
            },
            OpKind::Float {
                op: FloatOp::Binary { f: BinaryFn::Minimum },
            },
            OpKind::Float {
                op: FloatOp::Reduce {
                    f: ReduceFn::Mean,
                    axes: vec![1, 3],
                },
            },
            OpKind::Float { op: FloatOp::Softmax },
            OpKind::Float {
                op: FloatOp::Unary { f: UnaryFn::Rsqrt },
            },
            OpKind::Float {
                op: FloatOp::Binary {
                    f: BinaryFn::SquaredDifference,
                },
            },
            OpKind::Float {
                op: FloatOp::Node(Box::new(crate::program::FloatNode {
                    op: "LeakyRelu".into(),
                    domain: String::new(),
                    onnx: vec![8, 7, 0x12, 1, 2, 3, 4, 5, 6],
                })),
            },
            OpKind::Transpose { perm: vec![0, 2, 1] },
            OpKind::Gather { axis: 1 },
            OpKind::ArgExtreme {
                which: Extreme::Max,
                axis: 3,
            },
            OpKind::ArgExtreme {
                which: Extreme::Min,
                axis: 0,
            },
            OpKind::Concat { axis: 2 },
            OpKind::TransposeConv {
                strides: [2, 2],
                act: Act::Relu,
            },
            OpKind::FullyConnected { act: Act::None },
            OpKind::Add { act: Act::Relu },
            OpKind::Sub { act: Act::None },
            OpKind::Mul { act: Act::ReluN1To1 },
            OpKind::Mean { axes: vec![2, 3] },
            OpKind::Reduce {
                which: Extreme::Max,
                axes: vec![1],
            },
            OpKind::Reduce {
                which: Extreme::Min,
                axes: vec![0, 1],
            },
            OpKind::Float {
                op: FloatOp::Reduce {
                    f: ReduceFn::Sum,
                    axes: vec![1],
                },
            },
            OpKind::Float {
                op: FloatOp::Reduce {
                    f: ReduceFn::Max,
                    axes: vec![1],
                },
            },
            OpKind::Float {
                op: FloatOp::Reduce {
                    f: ReduceFn::Min,
                    axes: vec![1],
                },
            },
            OpKind::Pool {
                kind: PoolKind::Max,
                kernel: [2, 2],
                strides: [2, 2],
                pads: [0, 0, 0, 0],
                act: Act::Relu,
            },
            OpKind::Pool {
                kind: PoolKind::Avg,
                kernel: [3, 3],
                strides: [2, 2],
                pads: [1, 1, 1, 1],
                act: Act::None,
            },
        ];
        // Every op without parameters, from its code alone.
        let plain: Vec<OpKind> = (0..OPS.len() as u8).filter_map(|c| decode_kind(c, &[])).collect();
        let mut covered = std::collections::BTreeSet::new();
        for k in kinds.into_iter().chain(plain) {
            let (c, w) = encode_kind(&k);
            covered.insert(c);
            assert_eq!(decode_kind(c, &w), Some(k.clone()));
            // A word short or a word too many is refused.
            if !w.is_empty() {
                assert_eq!(decode_kind(c, &w[..w.len() - 1]), None, "{k:?}");
            }
            let mut more = w.clone();
            more.push(0);
            assert_eq!(decode_kind(c, &more), None, "{k:?}");
        }
        // Each row of the op table decodes to an op whose code is that row.
        let missing: Vec<&str> = OPS
            .iter()
            .enumerate()
            .filter(|(c, _)| !covered.contains(&(*c as u8)))
            .map(|(_, s)| s.name)
            .collect();
        assert!(missing.is_empty(), "op table rows without a round trip: {missing:?}");
        assert_eq!(decode_kind(OPS.len() as u8, &[]), None);
    }

    #[test]
    fn int4_weights_pack_two_per_byte() {
        let codes = vec![-7, 7, 0, -1, 3];
        let mut b = Vec::new();
        pack(IntType::I4, &codes, &mut b);
        assert_eq!(b.len(), 3);
        assert_eq!(b[0], 0x79);
        assert_eq!(unpack(IntType::I4, 5, &b), codes);
    }
}
