//! The integer ops of a [`Program`](super::Program): what each computes, with TFLite's
//! reference-kernel semantics.

use serde::{Deserialize, Serialize};
use std::ops::RangeInclusive;

/// A fused activation, applied as TFLite's `CalculateActivationRangeQuantized` clamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Act {
    None,
    Relu,
    Relu6,
    ReluN1To1,
}

/// One integer op; tensors in the graph's layout (NCHW for images).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum OpKind {
    /// Inputs: x, weights (OIHW, int8 per output channel), bias (int32). Depthwise when
    /// `groups` equals the input channels.
    Conv {
        strides: [usize; 2],
        dilations: [usize; 2],
        /// Top, left, bottom, right.
        pads: [usize; 4],
        groups: usize,
        act: Act,
    },
    /// Inputs: x, weights (`[C_out, C_in, kH, kW]`, int8 per output channel), bias
    /// (int32). No padding; output `(in − 1)·stride + k`.
    TransposeConv {
        strides: [usize; 2],
        act: Act,
    },
    /// Nearest-neighbour resize (TFLite's index rule, no corner alignment).
    ResizeNearest,
    /// Inputs: x (`[.., K]`), weights (`[N, K]`, int8 per output channel), bias (int32).
    FullyConnected {
        act: Act,
    },
    Add {
        act: Act,
    },
    Sub {
        act: Act,
    },
    Mul {
        act: Act,
    },
    Mean {
        axes: Vec<usize>,
    },
    /// MAX_POOL_2D (the raw maximum, on the input's grid) or AVERAGE_POOL_2D (the rounded
    /// mean of the window's valid elements).
    Pool {
        kind: PoolKind,
        kernel: [usize; 2],
        strides: [usize; 2],
        pads: [usize; 4],
        act: Act,
    },
    HardSwish,
    Logistic,
    Tanh,
    /// Over the last axis.
    Softmax {
        beta: f32,
    },
    Reshape,
    Transpose {
        perm: Vec<usize>,
    },
    Concat {
        axis: usize,
    },
    /// int8 → int8 on another grid (TFLite's QUANTIZE between integer tensors).
    Requantize,
    /// A standalone RELU, RELU6 or RELU_N1_TO_1 (TFLite's `ReluX`): the input moved to the
    /// output's grid with the multiplier of the float32 quotient `s_in / s_out`, then
    /// clamped to the activation's range on that grid.
    Relu {
        act: Act,
    },
    /// A strided copy: per axis of the input, the first index, the count and the step
    /// (axes not listed are copied whole). Output on the input's grid.
    Slice {
        axes: Vec<SliceAxis>,
    },
    /// Inputs: a (`[.., M, K]`), b (`[.., K, N]`), both activations; batch dims broadcast.
    /// TFLite's BATCH_MATMUL: int32 accumulator, the multiplier of f32(s_a·s_b)/s_out.
    BatchMatMul,
    /// Padding per axis (before, after): a constant (its code on the input's grid) or a
    /// reflection. Output on the input's grid.
    Pad {
        pads: Vec<[usize; 2]>,
        mode: PadMode,
    },
    /// REDUCE_MAX / REDUCE_MIN: the raw maximum (minimum) over `axes`; output on the
    /// input's grid.
    Reduce {
        which: Extreme,
        axes: Vec<usize>,
    },
    /// TFLite's int8 SQRT: `(int)(sqrtf(s_in·(x − zp_in)) / s_out) + zp_out`, truncating.
    Sqrt,
    /// TFLite's int8 LOG and EXP: 256-entry float32 look-up tables.
    Log,
    Exp,
    /// MAXIMUM / MINIMUM of raw codes: both inputs and the output on one grid.
    Extremum {
        which: Extreme,
    },
    /// BROADCAST_TO the output's shape (a copy).
    BroadcastTo,
    /// TFLite's GATHER: the slices of input 0 along `axis` at the int32 indices of input 1,
    /// each in `[0, dim)` (LiteRT refuses others at run time, and so does the integer
    /// reference). Output `x[..axis] ++ indices ++ x[axis + 1..]`, on the input's grid.
    Gather {
        axis: usize,
    },
    /// TFLite's ARG_MAX / ARG_MIN: the index of the first largest (smallest) code along
    /// `axis`, which the output drops; int32 indices out.
    ArgExtreme {
        which: Extreme,
        axis: usize,
    },
    /// TFLite's RSQRT: int8 by the gemmlowp inverse square root of `x − zp_in` and the
    /// multiplier of `1 / (√s_in · s_out)`; int16 by a 513-entry table. An input code
    /// below the zero point is an error, as in LiteRT.
    Rsqrt,
    /// TFLite's int8 SQUARED_DIFFERENCE with broadcasting: both inputs moved to a common
    /// grid (left shift 7, multipliers of `s / 2·max(s_a, s_b)`), the difference squared,
    /// then the multiplier of `(2·max(s_a, s_b))² / (2¹⁴·s_out)`.
    SquaredDifference,
    /// An op with no integer form, run in float32 between TFLite's DEQUANTIZE of its
    /// integer inputs and QUANTIZE of its output (a boolean output is not quantized).
    Float {
        op: FloatOp,
    },
}

/// The two pools of [`OpKind::Pool`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolKind {
    Max,
    Avg,
}

/// Which of the maximum and minimum [`OpKind::Reduce`] and [`OpKind::Extremum`] take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Extreme {
    Max,
    Min,
}

impl Extreme {
    /// The larger (smaller) of two codes.
    pub fn pick(self, a: i32, b: i32) -> i32 {
        match self {
            Self::Max => a.max(b),
            Self::Min => a.min(b),
        }
    }
}

/// How [`OpKind::Pad`] fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PadMode {
    Constant(i32),
    Reflect,
}

/// The float32 ops of [`OpKind::Float`], each as LiteRT's float reference kernels compute.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FloatOp {
    /// LayerNormalization over the last axis, as the TFLite float ops MEAN,
    /// SQUARED_DIFFERENCE, MEAN, ADD ε, RSQRT, SUB, MUL, MUL γ, ADD β compute it.
    LayerNorm {
        epsilon: f32,
        gamma: Vec<f32>,
        beta: Vec<f32>,
    },
    /// DIV with broadcasting.
    Div,
    /// EQUAL with broadcasting; a boolean output.
    Equal,
    /// SELECT_V2 (inputs: condition, then, else) with broadcasting.
    Where,
    /// `1 / x` (TFLite DIV by the tensor).
    Reciprocal,
    /// CAST to float32 (from booleans or int32).
    Cast,
    /// HARD_SWISH in float32 (no int16 kernel).
    HardSwish,
    /// An element-wise function of one input (a layer the plan keeps in float).
    Unary { f: UnaryFn },
    /// An element-wise function of two inputs, with broadcasting.
    Binary { f: BinaryFn },
    /// A reduction over `axes` of the input (the output's shape says whether they are kept).
    Reduce { f: ReduceFn, axes: Vec<usize> },
    /// SOFTMAX over the last axis (beta 1).
    Softmax,
    /// A node with no integer form, kept as the ONNX op it is and run in float32 on the
    /// host by the simulator's kernel (the float fallback).
    Node(Box<FloatNode>),
}

/// The float fallback's op: one ONNX node as a one-node ONNX model whose graph inputs are
/// the program op's inputs in order (constants are initializers) and whose graph outputs
/// are the program op's outputs in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FloatNode {
    /// The ONNX op type.
    pub op: String,
    /// Its domain (`""` for the default ONNX domain).
    pub domain: String,
    /// The one-node model, as ONNX protobuf bytes.
    pub onnx: Vec<u8>,
}

/// The element-wise functions of [`FloatOp::Unary`], each as LiteRT's float reference kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnaryFn {
    Exp,
    Log,
    Sqrt,
    Tanh,
    Logistic,
    Neg,
    Abs,
    Relu,
    /// `1 / sqrt(x)` (RSQRT; from a TFLite file's float ops, e.g. a LayerNorm island).
    Rsqrt,
}

/// The element-wise functions of [`FloatOp::Binary`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BinaryFn {
    Add,
    Sub,
    Mul,
    Maximum,
    Minimum,
    /// `(a − b)·(a − b)` (SQUARED_DIFFERENCE; from a TFLite file's float ops).
    SquaredDifference,
}

/// The reductions of [`FloatOp::Reduce`]: TFLite's SUM, REDUCE_MAX, REDUCE_MIN and MEAN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReduceFn {
    Sum,
    Max,
    Min,
    Mean,
}

impl UnaryFn {
    /// The functions of the binary format's op codes 37–44 (in order); [`Self::Rsqrt`] has
    /// its own code.
    pub const ALL: [Self; 8] = [
        Self::Exp,
        Self::Log,
        Self::Sqrt,
        Self::Tanh,
        Self::Logistic,
        Self::Neg,
        Self::Abs,
        Self::Relu,
    ];
}

impl BinaryFn {
    /// The functions of the binary format's op codes 45–49 (in order);
    /// [`Self::SquaredDifference`] has its own code.
    pub const ALL: [Self; 5] = [Self::Add, Self::Sub, Self::Mul, Self::Maximum, Self::Minimum];
}

impl ReduceFn {
    pub const ALL: [Self; 4] = [Self::Sum, Self::Max, Self::Min, Self::Mean];
}

impl FloatOp {
    /// The op's code in the binary format and its row of [`OPS`].
    pub fn code(&self) -> u8 {
        match self {
            Self::LayerNorm { .. } => 29,
            Self::Div => 30,
            Self::Equal => 31,
            Self::Where => 32,
            Self::Reciprocal => 33,
            Self::Cast => 34,
            Self::HardSwish => 35,
            Self::Unary { f: UnaryFn::Rsqrt } => 55,
            Self::Binary {
                f: BinaryFn::SquaredDifference,
            } => 56,
            Self::Unary { f } => 37 + UnaryFn::ALL.iter().position(|g| g == f).unwrap_or(0) as u8,
            Self::Binary { f } => 45 + BinaryFn::ALL.iter().position(|g| g == f).unwrap_or(0) as u8,
            Self::Reduce { f, .. } => 50 + ReduceFn::ALL.iter().position(|g| g == f).unwrap_or(0) as u8,
            Self::Softmax => 54,
            Self::Node(_) => 57,
        }
    }

    /// The op's name: its table row's without the `Float` prefix.
    pub fn name(&self) -> &'static str {
        let n = OPS[usize::from(self.code())].name;
        n.strip_prefix("Float").unwrap_or(n)
    }

    /// The op's name as a user knows it: the ONNX op type for the float fallback.
    pub fn display_name(&self) -> String {
        match self {
            Self::Node(n) => n.op.clone(),
            other => other.name().to_string(),
        }
    }
}

/// One axis of a [`OpKind::Slice`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceAxis {
    pub axis: usize,
    pub first: usize,
    pub count: usize,
    pub step: isize,
}

impl OpKind {
    /// The op's code in the binary format and its row of [`OPS`]: the one match from
    /// variants to the table.
    pub fn code(&self) -> u8 {
        match self {
            Self::Conv { .. } => 0,
            Self::TransposeConv { .. } => 1,
            Self::ResizeNearest => 2,
            Self::FullyConnected { .. } => 3,
            Self::Add { .. } => 4,
            Self::Sub { .. } => 5,
            Self::Mul { .. } => 6,
            Self::Mean { .. } => 7,
            Self::Pool {
                kind: PoolKind::Max, ..
            } => 8,
            Self::Pool {
                kind: PoolKind::Avg, ..
            } => 9,
            Self::HardSwish => 10,
            Self::Logistic => 11,
            Self::Tanh => 12,
            Self::Softmax { .. } => 13,
            Self::Reshape => 14,
            Self::Transpose { .. } => 15,
            Self::Concat { .. } => 16,
            Self::Requantize => 17,
            Self::Slice { .. } => 18,
            Self::BatchMatMul => 19,
            Self::Pad { .. } => 20,
            Self::Reduce {
                which: Extreme::Max, ..
            } => 21,
            Self::Reduce {
                which: Extreme::Min, ..
            } => 22,
            Self::Sqrt => 23,
            Self::Log => 24,
            Self::Exp => 25,
            Self::Extremum { which: Extreme::Max } => 26,
            Self::Extremum { which: Extreme::Min } => 27,
            Self::BroadcastTo => 28,
            Self::Float { op } => op.code(),
            Self::Relu { .. } => 36,
            Self::Gather { .. } => 58,
            Self::ArgExtreme {
                which: Extreme::Max, ..
            } => 59,
            Self::ArgExtreme {
                which: Extreme::Min, ..
            } => 60,
            Self::Rsqrt => 61,
            Self::SquaredDifference => 62,
        }
    }

    /// The op's row of the op table.
    pub fn spec(&self) -> &'static OpSpec {
        &OPS[usize::from(self.code())]
    }

    /// The op's name (a float op's without the table's `Float` prefix).
    pub fn name(&self) -> &'static str {
        let n = self.spec().name;
        n.strip_prefix("Float").filter(|_| self.is_float()).unwrap_or(n)
    }

    /// Runs in float32 between a dequantization and a quantization (no int8 form).
    pub fn is_float(&self) -> bool {
        matches!(self, Self::Float { .. })
    }
}

/// One row of the op table: what the binary format, the emulator's structural checks, the
/// target rules and the supported-ops document know of an op without looking at its
/// parameters.
#[derive(Debug)]
pub struct OpSpec {
    /// The op's name; float ops (no integer form) carry a `Float` prefix.
    pub name: &'static str,
    /// The TFLite builtins the op is written as, which a target's table lists (float ops:
    /// the float builtins it is run as).
    pub builtins: &'static [&'static str],
    /// How many inputs and outputs it takes.
    pub inputs: RangeInclusive<usize>,
    pub outputs: RangeInclusive<usize>,
    /// It copies codes: every input and the output have one storage type.
    pub copies: bool,
    /// What it computes, in a sentence.
    pub summary: &'static str,
}

const fn op(
    name: &'static str,
    builtins: &'static [&'static str],
    inputs: RangeInclusive<usize>,
    copies: bool,
    summary: &'static str,
) -> OpSpec {
    OpSpec {
        name,
        builtins,
        inputs,
        outputs: 1..=1,
        copies,
        summary,
    }
}

const ANY: RangeInclusive<usize> = 1..=usize::MAX;
const ONE: RangeInclusive<usize> = 1..=1;
const TWO: RangeInclusive<usize> = 2..=2;
const THREE: RangeInclusive<usize> = 3..=3;

/// The op table, row `i` being op code `i` of the binary format (`docs/binary-format.md`).
#[rustfmt::skip]
pub const OPS: [OpSpec; 63] = [
    op("Conv", &["CONV_2D", "DEPTHWISE_CONV_2D"], THREE, false, "convolution with int8 (or int4) per-channel weights, int32 (int64 under 16-bit activations) bias and a fused activation"),
    op("TransposeConv", &["TRANSPOSE_CONV"], THREE, false, "transposed convolution without padding, output (in − 1)·stride + k"),
    op("ResizeNearest", &["RESIZE_NEAREST_NEIGHBOR"], ONE, true, "nearest-neighbour resize (no corner alignment, no half pixels)"),
    op("FullyConnected", &["FULLY_CONNECTED"], THREE, false, "matrix product with per-channel weights, requantized in float as the reference kernel does"),
    op("Add", &["ADD"], TWO, false, "broadcasting sum, inputs moved to a common grid by left shift and multiplier"),
    op("Sub", &["SUB"], TWO, false, "broadcasting difference, as ADD"),
    op("Mul", &["MUL"], TWO, false, "broadcasting product, the multiplier of s_a·s_b / s_out"),
    op("Mean", &["MEAN"], ONE, false, "mean over axes, rounded as the reference kernel"),
    op("MaxPool", &["MAX_POOL_2D"], ONE, false, "window maximum with a fused activation"),
    op("AvgPool", &["AVERAGE_POOL_2D"], ONE, false, "rounded window mean over the valid elements"),
    op("HardSwish", &["HARD_SWISH"], ONE, false, "x·relu6(x + 3)/6 in the reference kernel's fixed point"),
    op("Logistic", &["LOGISTIC"], ONE, false, "sigmoid: a 256-entry table (int8) or the 16-bit fixed-point kernel, output on (1/256, −128) or (1/32768, 0)"),
    op("Tanh", &["TANH"], ONE, false, "tanh: a 256-entry table (int8) or the 16-bit fixed-point kernel, output on (1/128, 0) or (1/32768, 0)"),
    op("Softmax", &["SOFTMAX"], ONE, false, "softmax over the last axis in gemmlowp fixed point (int8) or the 16-bit tables"),
    op("Reshape", &["RESHAPE"], ONE, true, "the same codes in another shape"),
    op("Transpose", &["TRANSPOSE"], ONE, true, "a permutation of axes"),
    op("Concat", &["CONCATENATION"], ANY, true, "concatenation on one axis, every input on the output's grid"),
    op("Requantize", &["QUANTIZE"], ONE, false, "codes moved to another grid (or type)"),
    op("Slice", &["STRIDED_SLICE"], ONE, true, "a strided slice: first index, count and step per axis"),
    op("BatchMatMul", &["BATCH_MATMUL"], TWO, false, "product of two activations with broadcast batch axes"),
    op("Pad", &["PAD", "MIRROR_PAD"], ONE, true, "constant padding (the constant's code on the input's grid) or reflection"),
    op("ReduceMax", &["REDUCE_MAX"], ONE, true, "maximum over axes, on the input's grid"),
    op("ReduceMin", &["REDUCE_MIN"], ONE, true, "minimum over axes, on the input's grid"),
    op("Sqrt", &["SQRT"], ONE, false, "square root, truncated as the reference kernel"),
    op("Log", &["LOG"], ONE, false, "natural logarithm: a 256-entry float32 table"),
    op("Exp", &["EXP"], ONE, false, "exponential: a 256-entry float32 table"),
    op("Maximum", &["MAXIMUM"], TWO, true, "broadcasting maximum of two inputs on one grid"),
    op("Minimum", &["MINIMUM"], TWO, true, "broadcasting minimum of two inputs on one grid"),
    op("BroadcastTo", &["BROADCAST_TO"], ONE, true, "a broadcasting copy to the output's shape"),
    op("FloatLayerNorm", &["MEAN", "SQUARED_DIFFERENCE", "ADD", "RSQRT", "SUB", "MUL"], ONE, false, "layer normalization over the last axis, in float32"),
    op("FloatDiv", &["DIV"], TWO, false, "broadcasting division, in float32"),
    op("FloatEqual", &["EQUAL"], TWO, false, "broadcasting equality, a boolean output"),
    op("FloatWhere", &["SELECT_V2"], THREE, false, "broadcasting select of condition, then, else"),
    op("FloatReciprocal", &["DIV"], ONE, false, "1 / x, in float32"),
    op("FloatCast", &["CAST"], ONE, false, "a cast to float32 (from booleans or int32)"),
    op("FloatHardSwish", &["HARD_SWISH"], ONE, false, "hard swish in float32 (16-bit activations have no integer kernel)"),
    op("Relu", &["RELU", "RELU6", "RELU_N1_TO_1"], ONE, false, "the input moved to the output's grid and clamped to the activation's range"),
    op("FloatExp", &["EXP"], ONE, false, "exponential, in float32"),
    op("FloatLog", &["LOG"], ONE, false, "natural logarithm, in float32"),
    op("FloatSqrt", &["SQRT"], ONE, false, "square root, in float32"),
    op("FloatTanh", &["TANH"], ONE, false, "tanh, in float32"),
    op("FloatLogistic", &["LOGISTIC"], ONE, false, "sigmoid, in float32"),
    op("FloatNeg", &["NEG"], ONE, false, "negation, in float32"),
    op("FloatAbs", &["ABS"], ONE, false, "absolute value, in float32"),
    op("FloatRelu", &["RELU"], ONE, false, "max(x, 0), in float32"),
    op("FloatAdd", &["ADD"], TWO, false, "broadcasting sum, in float32"),
    op("FloatSub", &["SUB"], TWO, false, "broadcasting difference, in float32"),
    op("FloatMul", &["MUL"], TWO, false, "broadcasting product, in float32"),
    op("FloatMaximum", &["MAXIMUM"], TWO, false, "broadcasting maximum, in float32"),
    op("FloatMinimum", &["MINIMUM"], TWO, false, "broadcasting minimum, in float32"),
    op("FloatSum", &["SUM"], ONE, false, "sum over axes, in float32"),
    op("FloatReduceMax", &["REDUCE_MAX"], ONE, false, "maximum over axes, in float32"),
    op("FloatReduceMin", &["REDUCE_MIN"], ONE, false, "minimum over axes, in float32"),
    op("FloatMean", &["MEAN"], ONE, false, "mean over axes, in float32"),
    op("FloatSoftmax", &["SOFTMAX"], ONE, false, "softmax over the last axis, in float32"),
    op("FloatRsqrt", &["RSQRT"], ONE, false, "1 / sqrt(x), in float32"),
    op("FloatSquaredDifference", &["SQUARED_DIFFERENCE"], TWO, false, "broadcasting (a − b)², in float32"),
    OpSpec {
        name: "FloatNode",
        builtins: &[],
        inputs: 0..=usize::MAX,
        outputs: ANY,
        copies: false,
        summary: "any ONNX node with no integer form, run in float32 on the host by the FP32 executor's kernel (the float fallback)",
    },
    op("Gather", &["GATHER"], TWO, false, "the slices along an axis at int32 indices, on the input's grid"),
    op("ArgMax", &["ARG_MAX"], ONE, false, "the int32 index of the first largest code along an axis (dropped)"),
    op("ArgMin", &["ARG_MIN"], ONE, false, "the int32 index of the first smallest code along an axis (dropped)"),
    op("Rsqrt", &["RSQRT"], ONE, false, "1 / sqrt(x): the gemmlowp inverse square root (int8) or a 513-entry table (int16); codes below the zero point are refused"),
    op("SquaredDifference", &["SQUARED_DIFFERENCE"], TWO, false, "broadcasting (a − b)², int8: inputs rescaled to a common grid, squared, requantized"),
];

/// The TFLite builtins integer ops are written as: the op names a target's table may list.
pub fn integer_builtins() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = OPS
        .iter()
        .filter(|s| !s.name.starts_with("Float"))
        .flat_map(|s| s.builtins.iter().copied())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}
