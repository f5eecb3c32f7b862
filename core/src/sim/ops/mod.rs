//! Operator kernels, grouped by family. [`eval`] dispatches a node to its kernel.

pub mod attention;
pub mod cnn;
pub mod containers;
pub mod conv_direct;
pub mod elementwise;
pub mod index;
pub mod linalg;
pub mod nn;
pub mod quant;
pub mod recurrent;
pub mod shape;

use super::OpCtx;
use crate::ir::{Node, Tensor};
use ndarray::ArrayD;

/// A pointer to disjoint parts of one output, shared by the workers that write them.
/// Closures reach it through [`SendPtr::get`], so that they capture the wrapper (which is
/// `Send`), not its raw-pointer field.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut f32);
// SAFETY: each use has every worker write elements no other worker writes (see the uses:
// GEMM blocks, conv tiles, softmax column pieces).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    pub(crate) fn get(self) -> *mut f32 {
        self.0
    }
}

/// A zeroed buffer of `len` floats, zeroed by the pool's threads when it is large (the
/// allocator's own clearing runs on one thread while the others wait).
pub(crate) fn par_zeroed(len: usize) -> Vec<f32> {
    use rayon::prelude::*;
    if len < 1 << 16 {
        return vec![0.0; len];
    }
    let mut v = Vec::with_capacity(len);
    v.spare_capacity_mut()[..len]
        .par_chunks_mut(1 << 14)
        .for_each(|c| c.fill(std::mem::MaybeUninit::new(0.0)));
    // SAFETY: the first `len` elements were written just above.
    unsafe { v.set_len(len) };
    v
}

/// A float slice seen as room to write floats into (for kernels that write every element
/// of an output they are given uninitialized).
#[cfg(test)]
pub(crate) fn as_uninit(s: &mut [f32]) -> &mut [std::mem::MaybeUninit<f32>] {
    // SAFETY: `MaybeUninit<f32>` has the layout of `f32`, and only floats are written
    // through the result, so `s` stays initialized.
    unsafe { &mut *(std::ptr::from_mut(s) as *mut [std::mem::MaybeUninit<f32>]) }
}

/// `dst[i] = src[s0 + i·stride]` for every element of `dst` (the caller keeps the last
/// index inside `src`); stride 1 is a copy, stride 2 reads pairs so that the loop
/// vectorizes (shuffles instead of a gather).
#[inline]
pub(crate) fn copy_strided(dst: &mut [f32], src: &[f32], s0: usize, stride: usize) {
    match stride {
        1 => dst.copy_from_slice(&src[s0..s0 + dst.len()]),
        2 => {
            let whole = dst.len().min((src.len() - s0) / 2);
            dst[..whole]
                .iter_mut()
                .zip(src[s0..s0 + 2 * whole].chunks_exact(2))
                .for_each(|(d, p)| *d = p[0]);
            if let Some(last) = dst.get_mut(whole) {
                *last = src[s0 + 2 * whole];
            }
        }
        _ => dst
            .iter_mut()
            .zip(src[s0..].iter().step_by(stride))
            .for_each(|(d, &v)| *d = v),
    }
}

/// Σ f(v) over `p` in f64, in eight lanes so that the loop vectorizes (the order of the
/// additions depends only on the length).
#[inline(always)]
pub(crate) fn sum_f64_by(p: &[f32], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [0f64; 8];
    let mut chunks = p.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(f64::from(v));
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&v| f(f64::from(v))).sum();
    acc.iter().sum::<f64>() + tail
}

/// Result of one kernel: the node's outputs in order.
pub type OpResult = Result<Vec<Tensor>, String>;

/// Every op of the default domain that [`eval`] runs.
pub const SUPPORTED_OPS: &[&str] = &[
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "And",
    "ArgMax",
    "ArgMin",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "CastLike",
    "Ceil",
    "Celu",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "ConvTranspose",
    "Cos",
    "Cosh",
    "CumSum",
    "CumProd",
    "RMSNormalization",
    "Hardmax",
    "LpNormalization",
    "LRN",
    "GroupNormalization",
    "NegativeLogLikelihoodLoss",
    "SoftmaxCrossEntropyLoss",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "BitwiseNot",
    "BitShift",
    "Shrink",
    "DepthToSpace",
    "DequantizeLinear",
    "Div",
    "Dropout",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "EyeLike",
    "Flatten",
    "Floor",
    "Gather",
    "GatherElements",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "If",
    "InstanceNormalization",
    "IsInf",
    "IsNaN",
    "LayerNormalization",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "LogSoftmax",
    "LSTM",
    "MatMul",
    "Max",
    "MaxPool",
    "Mean",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "Pad",
    "Pow",
    "PRelu",
    "QuantizeLinear",
    "Range",
    "Reciprocal",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "Relu",
    "Reshape",
    "Resize",
    "Round",
    "Selu",
    "Shape",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Size",
    "Slice",
    "Softmax",
    "Softplus",
    "Softsign",
    "SpaceToDepth",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Tile",
    "Transpose",
    "Trilu",
    "Unsqueeze",
    "Upsample",
    "Where",
    "Xor",
];

/// onnxruntime's contrib ops (domain `com.microsoft`) that the executor runs: the fused
/// forms the optimizer writes, and the Q/DQ pairs of the QDQ export below opset 13 (the
/// same semantics as the opset-13 ops, `axis` included).
pub const MICROSOFT_OPS: &[&str] = &[
    "FusedConv",
    "FusedGemm",
    "Gelu",
    "QuickGelu",
    "QuantizeLinear",
    "DequantizeLinear",
];

/// Contrib ops onnxruntime registers in the default domain.
pub const DEFAULT_DOMAIN_CONTRIB_OPS: &[&str] = &["SimplifiedLayerNormalization"];

/// The domain of onnxruntime's contrib ops.
pub const MICROSOFT: &str = "com.microsoft";

/// Whether the executor runs `op` of `domain` at this opset.
pub fn is_supported(domain: &str, op: &str, _opset: i64) -> bool {
    match domain {
        "" | "ai.onnx" => {
            SUPPORTED_OPS.contains(&op)
                || index::OPS.contains(&op)
                || matches!(op, "Attention" | "RotaryEmbedding")
                || containers::CONTAINER_OPS.contains(&op)
                || DEFAULT_DOMAIN_CONTRIB_OPS.contains(&op)
        }
        MICROSOFT => MICROSOFT_OPS.contains(&op),
        _ => false,
    }
}

/// Runs one tensor node (container ops and If run through [`containers::eval`]).
pub fn eval(node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> OpResult {
    let op = node.op.as_str();
    if let Some(r) = elementwise::eval(op, node, inputs, ctx) {
        return r;
    }
    if let Some(r) = shape::eval(op, node, inputs, ctx) {
        return r;
    }
    if let Some(r) = cnn::eval(op, node, inputs, ctx) {
        return r;
    }
    if let Some(r) = linalg::eval(op, node, inputs, ctx) {
        return r;
    }
    if let Some(r) = nn::eval(op, node, inputs, ctx) {
        return r;
    }
    if let Some(r) = quant::eval(op, node, inputs, ctx) {
        return r;
    }
    if let Some(r) = recurrent::eval(op, node, inputs, ctx) {
        return r;
    }
    if let Some(r) = index::eval(op, node, inputs) {
        return r;
    }
    if let Some(r) = attention::eval(op, node, inputs) {
        return r;
    }
    Err(format!("op {op} is not supported"))
}

/// The i-th input, which must be present.
pub fn input<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a Tensor, String> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| format!("input {i} is missing"))
}

/// The i-th input if present (optional inputs may be omitted).
pub fn opt_input<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Option<&'a Tensor> {
    inputs.get(i).copied().flatten()
}

/// The i-th input as a list of integers (shapes, axes, indices).
pub fn input_ints(inputs: &[Option<&Tensor>], i: usize) -> Result<Vec<i64>, String> {
    input(inputs, i)?
        .as_i64_vec()
        .ok_or_else(|| format!("input {i} must be an integer tensor"))
}

/// Normalizes a possibly negative axis against a rank.
pub fn norm_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r.max(1)).contains(&a) || (r == 0 && a == 0) {
        Ok(a as usize)
    } else {
        Err(format!("axis {axis} is out of range for rank {rank}"))
    }
}

/// [`norm_axis`] for ops that index a dimension: a scalar has none, so rank 0 is an error.
/// Returns the axis and its length.
pub fn axis_dim(axis: i64, shape: &[usize]) -> Result<(usize, usize), String> {
    if shape.is_empty() {
        return Err(format!("axis {axis} needs an input of rank 1 or more, got a scalar"));
    }
    let a = norm_axis(axis, shape.len())?;
    Ok((a, shape[a]))
}

/// Numpy-style broadcast of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(format!("shapes {a:?} and {b:?} do not broadcast"));
        };
    }
    Ok(out)
}

/// Converts an f32 result back to the dtype of `like` (for f16/bf16/f64 inputs).
pub fn f32_as(like: crate::ir::DType, a: ArrayD<f32>) -> Tensor {
    use crate::ir::DType;
    match like {
        DType::F16 => Tensor::F16(a.mapv(half::f16::from_f32)),
        DType::BF16 => Tensor::BF16(a.mapv(half::bf16::from_f32)),
        DType::F64 => Tensor::F64(a.mapv(f64::from)),
        _ => Tensor::F32(a),
    }
}
