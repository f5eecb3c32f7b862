//! TFLite export of a legalized integer [`Program`]: a fully quantized int8 model,
//! weights and biases as the program's codes with per-channel parameters, int8 inputs
//! and outputs (or float ones behind QUANTIZE/DEQUANTIZE), a `serving_default`
//! signature, tensor names equal to the graph's value names. Ops with no int8 TFLite form
//! (LayerNormalization) run as TFLite float ops between DEQUANTIZE and QUANTIZE, and
//! [`Written::float_nodes`] names them. The flatbuffer code is the generated
//! `tflite-schema` crate.
//!
//! Layout: the rank-4 activations that reach a convolution, pooling or resize are NHWC in
//! the file (see [`layouts`]); every other tensor keeps the graph's layout. Convolution
//! filters are OHWI (depthwise `[1, H, W, C·m]`); axes of Mean, Concat, Slice and
//! Transpose are remapped; where an op needs the other layout a TRANSPOSE (or a RESHAPE,
//! when only dims of size 1 move) converts. Padding that SAME or VALID cannot express
//! becomes an explicit PAD (with the zero point; −128 before a max pool).

use crate::ir::Tensor;
use crate::program::{
    Act, BinaryFn, Extreme, FloatNode, FloatOp, IOp, ITensor, OpKind, PadMode, PoolKind, Program, ReduceFn, UnaryFn,
};
use crate::program::{IntType, QParams};
use crate::sim::integer::kernels::transpose;
use std::collections::HashMap;
use tflite_schema as tfl;

/// Model inputs and outputs as int8 codes or as float32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Io {
    Int8,
    Float,
}

/// What the exporter wrote, for the command's result line.
#[derive(Clone, Debug, Default)]
pub struct Written {
    pub bytes: Vec<u8>,
    pub operators: usize,
    /// Graph nodes left in float (none: every op has an int8 form).
    pub float_nodes: Vec<String>,
    /// Inputs as the file has them: (name, shape, NHWC).
    pub inputs: Vec<(String, Vec<usize>, bool)>,
}

/// An op the TFLite writer cannot express; names the node.
#[derive(Debug, thiserror::Error)]
#[error("node {node} ({op}): {message}")]
pub struct TfliteError {
    pub node: String,
    pub op: &'static str,
    pub message: String,
}

const NCHW_TO_NHWC: [usize; 4] = [0, 2, 3, 1];
const NHWC_TO_NCHW: [usize; 4] = [0, 3, 1, 2];

fn nhwc(shape: &[usize]) -> Vec<usize> {
    if shape.len() == 4 {
        NCHW_TO_NHWC.iter().map(|&p| shape[p]).collect()
    } else {
        shape.to_vec()
    }
}

/// A permutation of `shape` that leaves the elements' memory order unchanged (only
/// dims of size 1 move).
fn trivial_perm(shape: &[usize], perm: &[usize]) -> bool {
    let before: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] != 1).collect();
    let after: Vec<usize> = perm.iter().copied().filter(|&d| shape[d] != 1).collect();
    before == after
}

fn act_fn(a: Act) -> tfl::ActivationFunctionType {
    match a {
        Act::None => tfl::ActivationFunctionType::NONE,
        Act::Relu => tfl::ActivationFunctionType::RELU,
        Act::Relu6 => tfl::ActivationFunctionType::RELU6,
        Act::ReluN1To1 => tfl::ActivationFunctionType::RELU_N1_TO_1,
    }
}

fn ttype(t: IntType) -> tfl::TensorType {
    match t {
        IntType::I4 => tfl::TensorType::INT4,
        IntType::I8 => tfl::TensorType::INT8,
        IntType::I16 => tfl::TensorType::INT16,
        IntType::I32 | IntType::Index => tfl::TensorType::INT32,
        IntType::I64 => tfl::TensorType::INT64,
        IntType::F32 => tfl::TensorType::FLOAT32,
        IntType::Bool => tfl::TensorType::BOOL,
    }
}

/// How a window op's padding is written.
enum Pad {
    Same,
    Valid,
    /// Explicit (top, bottom, left, right), then VALID.
    Explicit([usize; 4]),
}

/// SAME when TFLite's SAME gives this output size and "before" padding on both axes,
/// VALID when there is no padding, else explicit.
fn padding(
    input: [usize; 2],
    output: [usize; 2],
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    pads: [usize; 4],
) -> Pad {
    let same = (0..2).all(|i| {
        let ek = (kernel[i] - 1) * dilations[i] + 1;
        let out = input[i].div_ceil(strides[i]);
        let total = ((out.saturating_sub(1)) * strides[i] + ek).saturating_sub(input[i]);
        out == output[i] && total / 2 == pads[i]
    });
    if same {
        return Pad::Same;
    }
    if pads.iter().all(|&p| p == 0) {
        return Pad::Valid;
    }
    Pad::Explicit([pads[0], pads[2], pads[1], pads[3]])
}

/// Which program tensors are NHWC in the file: the rank-4 activations that reach a spatial
/// op (convolution, pooling, resize) through ops that do not care about the layout
/// (element-wise ops, look-up tables, requantization, Concat, Slice, a Mean that keeps its
/// dims). Every other tensor keeps the graph's layout, so attention maps, sequences and
/// other rank-4 tensors that are not images keep their axes.
fn layouts(p: &Program) -> Vec<bool> {
    fn find(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let n = p.tensors.len();
    let mut parent: Vec<usize> = (0..n).collect();
    let mut forced = vec![false; n];
    let rank4 = |t: usize| p.tensors[t].shape.len() == 4 && p.tensors[t].data.is_none();
    for op in &p.ops {
        let spatial = matches!(
            op.kind,
            OpKind::Conv { .. } | OpKind::TransposeConv { .. } | OpKind::Pool { .. } | OpKind::ResizeNearest
        );
        if spatial {
            forced[op.inputs[0]] = true;
            forced[op.outputs[0]] = true;
            continue;
        }
        let agnostic = match &op.kind {
            OpKind::Add { .. }
            | OpKind::Sub { .. }
            | OpKind::Mul { .. }
            | OpKind::HardSwish
            | OpKind::Logistic
            | OpKind::Tanh
            | OpKind::Requantize
            | OpKind::Relu { .. }
            | OpKind::Concat { .. }
            | OpKind::Slice { .. }
            | OpKind::Pad { .. }
            | OpKind::Sqrt
            | OpKind::Rsqrt
            | OpKind::SquaredDifference
            | OpKind::Log
            | OpKind::Exp
            | OpKind::Extremum { .. } => true,
            OpKind::Mean { .. } | OpKind::Reduce { .. } => p.tensors[op.outputs[0]].shape.len() == 4,
            _ => false,
        };
        if !agnostic {
            continue;
        }
        let members: Vec<usize> = op
            .inputs
            .iter()
            .chain(&op.outputs)
            .copied()
            .filter(|&t| rank4(t))
            .collect();
        for w in members.windows(2) {
            let (a, b) = (find(&mut parent, w[0]), find(&mut parent, w[1]));
            parent[a] = b;
        }
    }
    let mut group_nhwc = vec![false; n];
    for (t, &f) in forced.iter().enumerate() {
        if f {
            let r = find(&mut parent, t);
            group_nhwc[r] = true;
        }
    }
    (0..n)
        .map(|t| {
            rank4(t) && {
                let r = find(&mut parent, t);
                group_nhwc[r]
            }
        })
        .collect()
}

/// A transpose to emit after an op that wrote `from` in the other layout than `to`'s.
struct Pending {
    from: i32,
    to: i32,
    perm: [usize; 4],
    shape: Vec<usize>,
}

struct Writer<'p> {
    p: &'p Program,
    tensors: Vec<tfl::TensorT>,
    buffers: Vec<tfl::BufferT>,
    ops: Vec<tfl::OperatorT>,
    codes: Vec<(tfl::BuiltinOperator, i32)>,
    /// Program tensor → file tensor, in its layout.
    map: Vec<Option<i32>>,
    /// Program tensor → NHWC in the file.
    nhwc: Vec<bool>,
    /// Program tensor → a copy in the other layout (made by a TRANSPOSE or RESHAPE).
    other: HashMap<usize, i32>,
    /// Program tensor → its DEQUANTIZE to float32 (graph layout).
    dequant: HashMap<usize, i32>,
    float_nodes: Vec<String>,
}

/// The float fallback's node while it is written: its one-node model, the file tensor of
/// each of its values met so far, and their shapes.
struct FloatNodeIo<'a> {
    g: &'a crate::ir::Graph,
    node: &'a crate::ir::Node,
    file: HashMap<crate::ir::ValueId, i32>,
    shapes: HashMap<crate::ir::ValueId, Vec<usize>>,
    /// Prefix of the tensors it adds (its first output's name).
    base: String,
}

impl FloatNodeIo<'_> {
    fn value(&self, k: usize) -> Option<crate::ir::ValueId> {
        self.node.inputs.get(k).copied().flatten()
    }

    /// Input `k`'s constant, if it is one.
    fn constant(&self, k: usize) -> Option<&crate::ir::Constant> {
        self.value(k).and_then(|v| self.g.values[v].constant.as_ref())
    }

    /// Input `k`'s shape: the program tensor's or the constant's.
    fn shape(&self, k: usize) -> Option<&[usize]> {
        let v = self.value(k)?;
        self.shapes
            .get(&v)
            .map(Vec::as_slice)
            .or_else(|| self.g.values[v].constant.as_ref().map(|c| c.shape.as_slice()))
    }
}

fn quant(q: &QParams, dim: i32) -> Option<tfl::QuantizationParametersT> {
    q.ty.is_quantized().then(|| tfl::QuantizationParametersT {
        scale: Some(q.scale.clone()),
        zero_point: Some(q.zero_point.iter().map(|&z| i64::from(z)).collect()),
        quantized_dimension: dim,
        ..Default::default()
    })
}

fn le_bytes(ty: IntType, data: &[i64]) -> Vec<u8> {
    match ty {
        // Two per byte over the flattened tensor, low nibble first.
        IntType::I4 => data
            .chunks(2)
            .map(|p| (p[0] as u8 & 0x0F) | ((p.get(1).copied().unwrap_or(0) as u8 & 0x0F) << 4))
            .collect(),
        IntType::I8 => data.iter().map(|&v| v as i8 as u8).collect(),
        IntType::I16 => data.iter().flat_map(|&v| (v as i16).to_le_bytes()).collect(),
        // Float32 values are kept as their bits.
        IntType::I32 | IntType::F32 | IntType::Index => data.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect(),
        IntType::I64 => data.iter().flat_map(|&v| v.to_le_bytes()).collect(),
        IntType::Bool => data.iter().map(|&v| u8::from(v != 0)).collect(),
    }
}

fn i32_bytes(data: &[i32]) -> Vec<u8> {
    data.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn f32_bytes(data: &[f32]) -> Vec<u8> {
    data.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The position in the file of each graph axis of a tensor (`NHWC_TO_NCHW` when NHWC).
fn file_axis(nhwc: bool, axis: usize) -> usize {
    if nhwc { NHWC_TO_NCHW[axis] } else { axis }
}

impl Writer<'_> {
    fn new_tensor(
        &mut self,
        name: String,
        shape: &[usize],
        ty: tfl::TensorType,
        q: Option<tfl::QuantizationParametersT>,
        data: Option<Vec<u8>>,
    ) -> i32 {
        let buffer = match data {
            Some(d) => {
                self.buffers.push(tfl::BufferT {
                    data: Some(d),
                    ..Default::default()
                });
                (self.buffers.len() - 1) as u32
            }
            None => 0,
        };
        self.tensors.push(tfl::TensorT {
            shape: Some(shape.iter().map(|&d| d as i32).collect()),
            type_: ty,
            buffer,
            name: Some(name),
            quantization: q.map(Box::new),
            ..Default::default()
        });
        (self.tensors.len() - 1) as i32
    }

    fn int32_const(&mut self, name: String, values: &[i32]) -> i32 {
        let bytes = i32_bytes(values);
        self.new_tensor(name, &[values.len()], tfl::TensorType::INT32, None, Some(bytes))
    }

    fn f32_const(&mut self, name: String, shape: &[usize], values: &[f32]) -> i32 {
        self.new_tensor(name, shape, tfl::TensorType::FLOAT32, None, Some(f32_bytes(values)))
    }

    fn f32_hidden(&mut self, name: String, shape: &[usize]) -> i32 {
        self.new_tensor(name, shape, tfl::TensorType::FLOAT32, None, None)
    }

    /// The shape of a program tensor in the file.
    fn file_shape(&self, t: usize) -> Vec<usize> {
        let shape = &self.p.tensors[t].shape;
        if self.nhwc[t] { nhwc(shape) } else { shape.clone() }
    }

    /// The file tensor of a program tensor, in its layout.
    fn tensor(&mut self, t: usize) -> i32 {
        if let Some(i) = self.map[t] {
            return i;
        }
        let it: &ITensor = &self.p.tensors[t];
        let shape = self.file_shape(t);
        let data = it.data.as_ref().map(|d| le_bytes(it.q.ty, d));
        let dim = it.q.axis.map_or(0, |a| a as i32);
        let i = self.new_tensor(it.name.clone(), &shape, ttype(it.q.ty), quant(&it.q, dim), data);
        self.map[t] = Some(i);
        i
    }

    /// The file tensor of `t` in the given layout: the tensor itself, or a copy behind a
    /// TRANSPOSE (a RESHAPE when only dims of size 1 move).
    fn tensor_as(&mut self, t: usize, want_nhwc: bool) -> i32 {
        let it = &self.p.tensors[t];
        if self.nhwc[t] == want_nhwc || it.shape.len() != 4 {
            return self.tensor(t);
        }
        if let Some(&i) = self.other.get(&t) {
            return i;
        }
        let src = self.tensor(t);
        let (perm, shape, suffix) = if want_nhwc {
            (NCHW_TO_NHWC, nhwc(&it.shape), "nhwc")
        } else {
            (NHWC_TO_NCHW, it.shape.clone(), "nchw")
        };
        let (name, q, from_shape) = (format!("{}:{suffix}", it.name), it.q.clone(), self.file_shape(t));
        let y = self.hidden(name, &shape, &q);
        self.relayout(src, y, &from_shape, perm, &shape);
        self.other.insert(t, y);
        y
    }

    /// The tensor an op writing `t` in the given layout writes, and the transpose to emit
    /// after the op when that is not `t`'s layout.
    fn output_as(&mut self, t: usize, want_nhwc: bool) -> (i32, Option<Pending>) {
        let to = self.tensor(t);
        let it = &self.p.tensors[t];
        if self.nhwc[t] == want_nhwc || it.shape.len() != 4 {
            return (to, None);
        }
        let (perm, shape, suffix) = if want_nhwc {
            (NHWC_TO_NCHW, nhwc(&it.shape), "nhwc")
        } else {
            (NCHW_TO_NHWC, it.shape.clone(), "nchw")
        };
        let (name, q) = (format!("{}:{suffix}", it.name), it.q.clone());
        let from = self.hidden(name, &shape, &q);
        (from, Some(Pending { from, to, perm, shape }))
    }

    fn flush(&mut self, pending: Option<Pending>) {
        if let Some(p) = pending {
            let out_shape: Vec<usize> = p.perm.iter().map(|&i| p.shape[i]).collect();
            self.relayout(p.from, p.to, &p.shape, p.perm, &out_shape);
        }
    }

    /// `y = transpose(x, perm)`, as a RESHAPE when the elements keep their order.
    fn relayout(&mut self, x: i32, y: i32, x_shape: &[usize], perm: [usize; 4], y_shape: &[usize]) {
        if trivial_perm(x_shape, &perm) {
            let shape: Vec<i32> = y_shape.iter().map(|&d| d as i32).collect();
            let name = format!("{}:shape", self.tensors[y as usize].name.clone().unwrap_or_default());
            let st = self.int32_const(name, &shape);
            self.emit(
                tfl::BuiltinOperator::RESHAPE,
                1,
                vec![x, st],
                vec![y],
                tfl::BuiltinOptionsT::ReshapeOptions(Box::new(tfl::ReshapeOptionsT { new_shape: Some(shape) })),
            );
        } else {
            let p: Vec<i32> = perm.iter().map(|&v| v as i32).collect();
            let name = format!("{}:perm", self.tensors[y as usize].name.clone().unwrap_or_default());
            let pt = self.int32_const(name, &p);
            self.emit(
                tfl::BuiltinOperator::TRANSPOSE,
                2,
                vec![x, pt],
                vec![y],
                tfl::BuiltinOptionsT::TransposeOptions(Box::default()),
            );
        }
    }

    /// A constant operand of an element-wise op whose output has `out_rank` dims: padded
    /// with leading 1s to that rank and, when the output is NHWC, permuted to it.
    fn operand(&mut self, t: usize, out_rank: usize, out_nhwc: bool) -> i32 {
        let it = &self.p.tensors[t];
        if it.data.is_none() {
            return self.tensor_as(t, out_nhwc);
        }
        if !out_nhwc || it.shape.len() > out_rank {
            return self.tensor(t);
        }
        let mut shape = vec![1usize; out_rank - it.shape.len()];
        shape.extend(&it.shape);
        let data = transpose(it.data.as_deref().unwrap_or(&[]), &shape, &NCHW_TO_NHWC);
        let bytes = le_bytes(it.q.ty, &data);
        let q = quant(&it.q, 0);
        self.new_tensor(it.name.clone(), &nhwc(&shape), ttype(it.q.ty), q, Some(bytes))
    }

    fn emit(
        &mut self,
        code: tfl::BuiltinOperator,
        version: i32,
        inputs: Vec<i32>,
        outputs: Vec<i32>,
        options: tfl::BuiltinOptionsT,
    ) {
        let key = (code, version);
        let idx = self.codes.iter().position(|c| *c == key).unwrap_or_else(|| {
            self.codes.push(key);
            self.codes.len() - 1
        });
        self.ops.push(tfl::OperatorT {
            opcode_index: idx as u32,
            inputs: Some(inputs),
            outputs: Some(outputs),
            builtin_options: options,
            ..Default::default()
        });
    }

    /// A hidden activation tensor on `q`.
    fn hidden(&mut self, name: String, shape: &[usize], q: &QParams) -> i32 {
        self.new_tensor(name, shape, ttype(q.ty), quant(q, 0), None)
    }

    /// Explicit padding of `x` (NHWC) with `value` codes on `q`.
    fn pad(
        &mut self,
        x: i32,
        shape: &[usize],
        q: &QParams,
        pads: [usize; 4],
        value: Option<i32>,
        name: &str,
    ) -> (i32, Vec<usize>) {
        let [t, b, l, r] = pads;
        let out = vec![shape[0], shape[1] + t + b, shape[2] + l + r, shape[3]];
        let paddings = self.new_tensor(
            format!("{name}:paddings"),
            &[4, 2],
            tfl::TensorType::INT32,
            None,
            Some(i32_bytes(&[0, 0, t as i32, b as i32, l as i32, r as i32, 0, 0])),
        );
        let y = self.hidden(format!("{name}:padded"), &out, q);
        match value {
            None => self.emit(
                tfl::BuiltinOperator::PAD,
                2,
                vec![x, paddings],
                vec![y],
                tfl::BuiltinOptionsT::PadOptions(Box::default()),
            ),
            Some(v) => {
                let c = self.new_tensor(
                    format!("{name}:pad_value"),
                    &[1],
                    ttype(q.ty),
                    quant(q, 0),
                    Some(le_bytes(q.ty, &[i64::from(v)])),
                );
                self.emit(
                    tfl::BuiltinOperator::PADV2,
                    2,
                    vec![x, paddings, c],
                    vec![y],
                    tfl::BuiltinOptionsT::PadV2Options(Box::default()),
                );
            }
        }
        (y, out)
    }

    /// A float op of the TFLite float set: its inputs and one hidden float32 output.
    fn float_op(
        &mut self,
        code: tfl::BuiltinOperator,
        inputs: Vec<i32>,
        name: String,
        shape: &[usize],
        options: tfl::BuiltinOptionsT,
    ) -> i32 {
        let y = self.f32_hidden(name, shape);
        self.emit(code, 1, inputs, vec![y], options);
        y
    }

    /// `t` as float32 in the graph's layout: a DEQUANTIZE of its codes (one per tensor), or
    /// the tensor itself when it is float32 or boolean.
    fn dequantized(&mut self, t: usize) -> i32 {
        let x = self.tensor_as(t, false);
        let it = &self.p.tensors[t];
        if !it.q.ty.is_quantized() {
            return x;
        }
        if let Some(&f) = self.dequant.get(&t) {
            return f;
        }
        let f = self.f32_hidden(format!("{}:float", it.name), &it.shape.clone());
        self.emit(
            tfl::BuiltinOperator::DEQUANTIZE,
            2,
            vec![x],
            vec![f],
            tfl::BuiltinOptionsT::NONE,
        );
        self.dequant.insert(t, f);
        f
    }

    /// The float32 tensor a float op writes for program tensor `t` (graph layout), and the
    /// QUANTIZE (and layout change) to emit after it when `t` holds codes.
    fn float_output(&mut self, t: usize) -> (i32, Option<(i32, i32, Option<Pending>)>) {
        let (y, pending) = self.output_as(t, false);
        let it = &self.p.tensors[t];
        if !it.q.ty.is_quantized() {
            return (y, pending.map(|p| (p.from, p.from, Some(p))));
        }
        let f = self.f32_hidden(format!("{}:float", it.name), &it.shape.clone());
        (f, Some((f, y, pending)))
    }

    fn finish_float(&mut self, after: Option<(i32, i32, Option<Pending>)>) {
        let Some((f, y, pending)) = after else { return };
        if f != y {
            self.emit(
                tfl::BuiltinOperator::QUANTIZE,
                2,
                vec![f],
                vec![y],
                tfl::BuiltinOptionsT::QuantizeOptions(Box::default()),
            );
        }
        self.flush(pending);
    }

    /// A float op with no int8 form: DEQUANTIZE of its integer inputs, the TFLite float
    /// op(s), QUANTIZE of its output.
    fn float(&mut self, op: &IOp, fop: &FloatOp) {
        use tfl::BuiltinOperator as B;
        let ins: Vec<i32> = op.inputs.iter().map(|&k| self.dequantized(k)).collect();
        let (y, after) = self.float_output(op.outputs[0]);
        match fop {
            FloatOp::LayerNorm { epsilon, gamma, beta } => self.layer_norm(op, ins[0], y, *epsilon, gamma, beta),
            FloatOp::Div => self.emit(
                B::DIV,
                1,
                ins,
                vec![y],
                tfl::BuiltinOptionsT::DivOptions(Box::default()),
            ),
            FloatOp::Equal => self.emit(B::EQUAL, 1, ins, vec![y], tfl::BuiltinOptionsT::NONE),
            FloatOp::HardSwish => self.emit(
                B::HARD_SWISH,
                1,
                ins,
                vec![y],
                tfl::BuiltinOptionsT::HardSwishOptions(Box::default()),
            ),
            FloatOp::Reciprocal => {
                let one = self.f32_const(format!("{}:one", self.p.tensors[op.outputs[0]].name), &[1], &[1.0]);
                self.emit(
                    B::DIV,
                    1,
                    vec![one, ins[0]],
                    vec![y],
                    tfl::BuiltinOptionsT::DivOptions(Box::default()),
                );
            }
            FloatOp::Cast => self.emit(
                B::CAST,
                1,
                ins,
                vec![y],
                tfl::BuiltinOptionsT::CastOptions(Box::new(tfl::CastOptionsT {
                    in_data_type: ttype(self.p.tensors[op.inputs[0]].q.ty),
                    out_data_type: tfl::TensorType::FLOAT32,
                })),
            ),
            FloatOp::Where => self.emit(
                B::SELECT_V2,
                1,
                ins,
                vec![y],
                tfl::BuiltinOptionsT::SelectV2Options(Box::default()),
            ),
            FloatOp::Unary { f } => {
                let (code, options) = match f {
                    UnaryFn::Exp => (B::EXP, tfl::BuiltinOptionsT::ExpOptions(Box::default())),
                    UnaryFn::Log => (B::LOG, tfl::BuiltinOptionsT::NONE),
                    UnaryFn::Sqrt => (B::SQRT, tfl::BuiltinOptionsT::NONE),
                    UnaryFn::Tanh => (B::TANH, tfl::BuiltinOptionsT::NONE),
                    UnaryFn::Logistic => (B::LOGISTIC, tfl::BuiltinOptionsT::NONE),
                    UnaryFn::Neg => (B::NEG, tfl::BuiltinOptionsT::NegOptions(Box::default())),
                    UnaryFn::Abs => (B::ABS, tfl::BuiltinOptionsT::AbsOptions(Box::default())),
                    UnaryFn::Relu => (B::RELU, tfl::BuiltinOptionsT::NONE),
                    UnaryFn::Rsqrt => (B::RSQRT, tfl::BuiltinOptionsT::NONE),
                };
                self.emit(code, 1, ins, vec![y], options);
            }
            FloatOp::Binary { f } => {
                let (code, options) = match f {
                    BinaryFn::Add => (B::ADD, tfl::BuiltinOptionsT::AddOptions(Box::default())),
                    BinaryFn::Sub => (B::SUB, tfl::BuiltinOptionsT::SubOptions(Box::default())),
                    BinaryFn::Mul => (B::MUL, tfl::BuiltinOptionsT::MulOptions(Box::default())),
                    BinaryFn::Maximum => (B::MAXIMUM, tfl::BuiltinOptionsT::MaximumMinimumOptions(Box::default())),
                    BinaryFn::Minimum => (B::MINIMUM, tfl::BuiltinOptionsT::MaximumMinimumOptions(Box::default())),
                    BinaryFn::SquaredDifference => (
                        B::SQUARED_DIFFERENCE,
                        tfl::BuiltinOptionsT::SquaredDifferenceOptions(Box::default()),
                    ),
                };
                self.emit(code, 1, ins, vec![y], options);
            }
            FloatOp::Reduce { f, axes } => {
                let code = match f {
                    ReduceFn::Sum => B::SUM,
                    ReduceFn::Max => B::REDUCE_MAX,
                    ReduceFn::Min => B::REDUCE_MIN,
                    ReduceFn::Mean => B::MEAN,
                };
                let (xt, yt) = (&self.p.tensors[op.inputs[0]], &self.p.tensors[op.outputs[0]]);
                let keep_dims = xt.shape.len() == yt.shape.len();
                let list: Vec<i32> = axes.iter().map(|&a| a as i32).collect();
                let axes = self.int32_const(format!("{}:axes", yt.name), &list);
                self.emit(
                    code,
                    1,
                    vec![ins[0], axes],
                    vec![y],
                    tfl::BuiltinOptionsT::ReducerOptions(Box::new(tfl::ReducerOptionsT { keep_dims })),
                );
            }
            FloatOp::Softmax => self.emit(
                B::SOFTMAX,
                1,
                ins,
                vec![y],
                tfl::BuiltinOptionsT::SoftmaxOptions(Box::new(tfl::SoftmaxOptionsT { beta: 1.0 })),
            ),
            // Lowered before the float ops (see `float_node`).
            FloatOp::Node(_) => {}
        }
        self.finish_float(after);
        if !self.float_nodes.contains(&op.node) {
            self.float_nodes.push(op.node.clone());
        }
    }

    /// The float fallback's ONNX node as TFLite float ops, between the DEQUANTIZE of its
    /// integer inputs and the QUANTIZE of its outputs, where the node has a TFLite float
    /// form; otherwise an error that names the op and what is missing.
    fn float_node(&mut self, op: &IOp, n: &FloatNode) -> Result<(), String> {
        let (model, _) = crate::import::onnx::from_bytes(
            bytes::Bytes::from(n.onnx.clone()),
            std::path::Path::new("."),
            std::path::Path::new(&op.node),
            &crate::import::LoadOptions::default(),
        )
        .map_err(|e| format!("its float model does not load: {e}"))?;
        let g = &model.graph;
        let [node] = g.nodes.as_slice() else {
            return Err(format!("its float model has {} nodes, not one", g.nodes.len()));
        };
        if g.inputs.len() != op.inputs.len() || g.outputs.len() != op.outputs.len() {
            return Err(format!(
                "its float model has {} inputs and {} outputs for {} and {}",
                g.inputs.len(),
                g.outputs.len(),
                op.inputs.len(),
                op.outputs.len()
            ));
        }
        let mut f = FloatNodeIo {
            g,
            node,
            file: HashMap::new(),
            shapes: HashMap::new(),
            base: self.p.tensors[op.outputs[0]].name.clone(),
        };
        for (&gi, &t) in g.inputs.iter().zip(&op.inputs) {
            let x = self.dequantized(t);
            f.file.insert(gi, x);
            f.shapes.insert(gi, self.p.tensors[t].shape.clone());
        }
        let outs: Vec<_> = op.outputs.iter().map(|&t| self.float_output(t)).collect();
        let ys: Vec<i32> = outs.iter().map(|o| o.0).collect();
        let out_shapes: Vec<Vec<usize>> = op.outputs.iter().map(|&t| self.p.tensors[t].shape.clone()).collect();
        self.node_ops(&mut f, &ys, &out_shapes)
            .map_err(|m| format!("{} runs in the float fallback; {m}", n.op))?;
        for (_, after) in outs {
            self.finish_float(after);
        }
        if !self.float_nodes.contains(&op.node) {
            self.float_nodes.push(op.node.clone());
        }
        Ok(())
    }

    /// A file tensor for input `k` of the fallback's node: the program's tensor, or the
    /// node's constant written as a float32, int32 or boolean constant (`None`: omitted).
    fn node_input(&mut self, f: &mut FloatNodeIo, k: usize) -> Result<Option<i32>, String> {
        let Some(v) = f.node.inputs.get(k).copied().flatten() else {
            return Ok(None);
        };
        if let Some(&x) = f.file.get(&v) {
            return Ok(Some(x));
        }
        let val = &f.g.values[v];
        let c = val
            .constant
            .as_ref()
            .ok_or_else(|| format!("input {} is neither an input nor a constant", val.name))?;
        let name = format!("{}:{}", f.base, val.name);
        let t = c.tensor();
        let x = match t {
            Tensor::Bool(a) => {
                let bytes = a.iter().map(|&b| u8::from(b)).collect();
                self.new_tensor(name, &c.shape, tfl::TensorType::BOOL, None, Some(bytes))
            }
            t if t.dtype().is_float() => {
                self.f32_const(name, &c.shape, &t.to_f32().iter().copied().collect::<Vec<_>>())
            }
            t => {
                let v = t
                    .to_i64()
                    .ok_or_else(|| format!("constant {} is {}", val.name, t.dtype()))?;
                let v: Vec<i32> = v
                    .iter()
                    .map(|&e| i32::try_from(e).map_err(|_| format!("constant {} holds {e}, beyond int32", val.name)))
                    .collect::<Result<_, _>>()?;
                self.new_tensor(name, &c.shape, tfl::TensorType::INT32, None, Some(i32_bytes(&v)))
            }
        };
        f.file.insert(v, x);
        f.shapes.insert(v, c.shape.clone());
        Ok(Some(x))
    }

    fn node_ops(&mut self, f: &mut FloatNodeIo, ys: &[i32], out_shapes: &[Vec<usize>]) -> Result<(), String> {
        use tfl::BuiltinOperator as B;
        use tfl::BuiltinOptionsT as O;
        let node = f.node;
        let need = |w: &mut Self, f: &mut FloatNodeIo, k: usize| -> Result<i32, String> {
            w.node_input(f, k)?.ok_or_else(|| format!("input {k} is missing"))
        };
        let rank = |f: &FloatNodeIo, k: usize| f.shape(k).map_or(0, <[usize]>::len);
        let axis_of = |a: i64, r: usize| -> Result<usize, String> {
            let v = if a < 0 { a + r as i64 } else { a };
            usize::try_from(v)
                .ok()
                .filter(|&v| v < r.max(1))
                .ok_or_else(|| format!("axis {a} is out of range for rank {r}"))
        };
        let y = ys[0];
        let y_shape = out_shapes[0].clone();
        let one = |w: &mut Self, f: &mut FloatNodeIo, code: B, options: O| -> Result<(), String> {
            let x = need(w, f, 0)?;
            w.emit(code, 1, vec![x], vec![y], options);
            Ok(())
        };
        let two = |w: &mut Self, f: &mut FloatNodeIo, code: B, options: O| -> Result<(), String> {
            let (a, b) = (need(w, f, 0)?, need(w, f, 1)?);
            w.emit(code, 1, vec![a, b], vec![y], options);
            Ok(())
        };
        match node.op.as_str() {
            "Relu" => one(self, f, B::RELU, O::NONE),
            "Sigmoid" => one(self, f, B::LOGISTIC, O::NONE),
            "Tanh" => one(self, f, B::TANH, O::NONE),
            "Exp" => one(self, f, B::EXP, O::ExpOptions(Box::default())),
            "Log" => one(self, f, B::LOG, O::NONE),
            "Sqrt" => one(self, f, B::SQRT, O::NONE),
            "Abs" => one(self, f, B::ABS, O::AbsOptions(Box::default())),
            "Neg" => one(self, f, B::NEG, O::NegOptions(Box::default())),
            "Floor" => one(self, f, B::FLOOR, O::NONE),
            "Ceil" => one(self, f, B::CEIL, O::NONE),
            "Round" => one(self, f, B::ROUND, O::NONE),
            "Sin" => one(self, f, B::SIN, O::NONE),
            "Cos" => one(self, f, B::COS, O::CosOptions(Box::default())),
            "Not" => one(self, f, B::LOGICAL_NOT, O::LogicalNotOptions(Box::default())),
            "HardSwish" => one(self, f, B::HARD_SWISH, O::HardSwishOptions(Box::default())),
            "LeakyRelu" => {
                let alpha = node.attr_f("alpha").unwrap_or(0.01);
                one(
                    self,
                    f,
                    B::LEAKY_RELU,
                    O::LeakyReluOptions(Box::new(tfl::LeakyReluOptionsT { alpha })),
                )
            }
            "Elu" if node.attr_f("alpha").unwrap_or(1.0) == 1.0 => one(self, f, B::ELU, O::NONE),
            "Gelu" => {
                let approximate = node.attr_s("approximate") == Some("tanh");
                one(
                    self,
                    f,
                    B::GELU,
                    O::GeluOptions(Box::new(tfl::GeluOptionsT { approximate })),
                )
            }
            "Softmax" | "LogSoftmax" => {
                // Over the last axis; another axis is swapped with the last one around it
                // (TFLite's SOFTMAX runs over the last axis only).
                let r = rank(f, 0);
                let axis = axis_of(node.attr_i("axis").unwrap_or(-1), r)?;
                let (code, options) = if node.op == "Softmax" {
                    (
                        B::SOFTMAX,
                        O::SoftmaxOptions(Box::new(tfl::SoftmaxOptionsT { beta: 1.0 })),
                    )
                } else {
                    (B::LOG_SOFTMAX, O::LogSoftmaxOptions(Box::default()))
                };
                let x = need(self, f, 0)?;
                if axis + 1 == r {
                    self.emit(code, 1, vec![x], vec![y], options);
                    return Ok(());
                }
                let mut perm: Vec<i32> = (0..r as i32).collect();
                perm.swap(axis, r - 1);
                let mut swapped = y_shape.clone();
                swapped.swap(axis, r - 1);
                let pt = self.int32_const(format!("{}:softmax_perm", f.base), &perm);
                let a = self.f32_hidden(format!("{}:softmax_in", f.base), &swapped);
                self.emit(
                    B::TRANSPOSE,
                    1,
                    vec![x, pt],
                    vec![a],
                    O::TransposeOptions(Box::default()),
                );
                let b = self.f32_hidden(format!("{}:softmax_out", f.base), &swapped);
                self.emit(code, 1, vec![a], vec![b], options);
                self.emit(
                    B::TRANSPOSE,
                    1,
                    vec![b, pt],
                    vec![y],
                    O::TransposeOptions(Box::default()),
                );
                Ok(())
            }
            "Add" => two(self, f, B::ADD, O::AddOptions(Box::default())),
            "Sub" => two(self, f, B::SUB, O::SubOptions(Box::default())),
            "Mul" => two(self, f, B::MUL, O::MulOptions(Box::default())),
            "Div" => two(self, f, B::DIV, O::DivOptions(Box::default())),
            "Pow" => two(self, f, B::POW, O::PowOptions(Box::default())),
            "Max" if node.inputs.len() == 2 => two(self, f, B::MAXIMUM, O::MaximumMinimumOptions(Box::default())),
            "Min" if node.inputs.len() == 2 => two(self, f, B::MINIMUM, O::MaximumMinimumOptions(Box::default())),
            "Equal" => two(self, f, B::EQUAL, O::EqualOptions(Box::default())),
            "Greater" => two(self, f, B::GREATER, O::GreaterOptions(Box::default())),
            "Less" => two(self, f, B::LESS, O::LessOptions(Box::default())),
            "GreaterOrEqual" => two(self, f, B::GREATER_EQUAL, O::GreaterEqualOptions(Box::default())),
            "LessOrEqual" => two(self, f, B::LESS_EQUAL, O::LessEqualOptions(Box::default())),
            "And" => two(self, f, B::LOGICAL_AND, O::LogicalAndOptions(Box::default())),
            "Or" => two(self, f, B::LOGICAL_OR, O::LogicalOrOptions(Box::default())),
            "PRelu" => two(self, f, B::PRELU, O::NONE),
            "Where" => {
                let ins = (0..3).map(|k| need(self, f, k)).collect::<Result<Vec<_>, _>>()?;
                self.emit(B::SELECT_V2, 1, ins, vec![y], O::SelectV2Options(Box::default()));
                Ok(())
            }
            "Cast" => {
                let x = need(self, f, 0)?;
                let in_data_type = self.tensors[x as usize].type_;
                let out_data_type = self.tensors[y as usize].type_;
                self.emit(
                    B::CAST,
                    1,
                    vec![x],
                    vec![y],
                    O::CastOptions(Box::new(tfl::CastOptionsT {
                        in_data_type,
                        out_data_type,
                    })),
                );
                Ok(())
            }
            "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Identity" | "Dropout" => {
                let x = need(self, f, 0)?;
                self.reshape_to(x, y, &y_shape, &f.base);
                Ok(())
            }
            "Transpose" => {
                let x = need(self, f, 0)?;
                let r = rank(f, 0);
                let perm: Vec<i32> = match node.attr_ints("perm") {
                    Some(p) => p.iter().map(|&a| a as i32).collect(),
                    None => (0..r as i32).rev().collect(),
                };
                let p = self.int32_const(format!("{}:perm", f.base), &perm);
                self.emit(
                    B::TRANSPOSE,
                    1,
                    vec![x, p],
                    vec![y],
                    O::TransposeOptions(Box::default()),
                );
                Ok(())
            }
            "Concat" => {
                let axis = axis_of(node.attr_i("axis").unwrap_or(0), y_shape.len())? as i32;
                let ins = (0..node.inputs.len())
                    .map(|k| need(self, f, k))
                    .collect::<Result<Vec<_>, _>>()?;
                let options = O::ConcatenationOptions(Box::new(tfl::ConcatenationOptionsT {
                    axis,
                    fused_activation_function: tfl::ActivationFunctionType::NONE,
                }));
                self.emit(B::CONCATENATION, 1, ins, vec![y], options);
                Ok(())
            }
            "Split" => {
                let x = need(self, f, 0)?;
                let axis = axis_of(node.attr_i("axis").unwrap_or(0), rank(f, 0))?;
                let sizes: Vec<i32> = out_shapes
                    .iter()
                    .map(|s| s.get(axis).map_or(0, |&d| d as i32))
                    .collect();
                let st = self.int32_const(format!("{}:size_splits", f.base), &sizes);
                let at = self.new_tensor(
                    format!("{}:axis", f.base),
                    &[],
                    tfl::TensorType::INT32,
                    None,
                    Some(i32_bytes(&[axis as i32])),
                );
                let num_splits = ys.len() as i32;
                self.emit(
                    B::SPLIT_V,
                    1,
                    vec![x, st, at],
                    ys.to_vec(),
                    O::SplitVOptions(Box::new(tfl::SplitVOptionsT { num_splits })),
                );
                Ok(())
            }
            "Gather" => {
                let data = need(self, f, 0)?;
                let r = rank(f, 0);
                let axis = axis_of(node.attr_i("axis").unwrap_or(0), r)?;
                // Constant indices: negative ones counted from the end (TFLite's GATHER
                // takes only in-range indices).
                let dim = f.shape(0).and_then(|s| s.get(axis).copied()).unwrap_or(0) as i64;
                let idx = match f.constant(1).and_then(|c| c.tensor().to_i64()) {
                    Some(v) => {
                        let shape = v.shape().to_vec();
                        let v: Vec<i32> = v
                            .iter()
                            .map(|&i| {
                                let j = if i < 0 { i + dim } else { i };
                                i32::try_from(j)
                                    .ok()
                                    .filter(|&j| (0..dim).contains(&i64::from(j)))
                                    .ok_or_else(|| format!("index {i} is out of range for a dimension of {dim}"))
                            })
                            .collect::<Result<_, _>>()?;
                        self.new_tensor(
                            format!("{}:indices", f.base),
                            &shape,
                            tfl::TensorType::INT32,
                            None,
                            Some(i32_bytes(&v)),
                        )
                    }
                    None => need(self, f, 1)?,
                };
                let options = O::GatherOptions(Box::new(tfl::GatherOptionsT {
                    axis: axis as i32,
                    batch_dims: 0,
                }));
                self.emit(B::GATHER, 1, vec![data, idx], vec![y], options);
                Ok(())
            }
            "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" => {
                let code = match node.op.as_str() {
                    "ReduceMean" => B::MEAN,
                    "ReduceSum" => B::SUM,
                    "ReduceMax" => B::REDUCE_MAX,
                    _ => B::REDUCE_MIN,
                };
                let x = need(self, f, 0)?;
                let r = rank(f, 0);
                let listed: Vec<i64> = match node.attr_ints("axes") {
                    Some(a) => a.to_vec(),
                    None => f
                        .constant(1)
                        .and_then(|c| c.tensor().to_i64())
                        .map(|a| a.iter().copied().collect())
                        .unwrap_or_default(),
                };
                if listed.is_empty() && node.inputs.get(1).copied().flatten().is_some() && f.constant(1).is_none() {
                    return Err("its axes are computed at run time".into());
                }
                let mut axes: Vec<i32> = if listed.is_empty() {
                    (0..r as i32).collect()
                } else {
                    listed
                        .iter()
                        .map(|&a| axis_of(a, r).map(|a| a as i32))
                        .collect::<Result<_, _>>()?
                };
                axes.sort_unstable();
                let keep_dims = node.attr_i("keepdims").unwrap_or(1) != 0;
                let a = self.int32_const(format!("{}:axes", f.base), &axes);
                self.emit(
                    code,
                    1,
                    vec![x, a],
                    vec![y],
                    O::ReducerOptions(Box::new(tfl::ReducerOptionsT { keep_dims })),
                );
                Ok(())
            }
            "ArgMax" | "ArgMin" => {
                if node.attr_i("select_last_index").unwrap_or(0) != 0 {
                    return Err("TFLite's ARG_MAX/ARG_MIN pick the first index, not the last".into());
                }
                let x = need(self, f, 0)?;
                let axis = axis_of(node.attr_i("axis").unwrap_or(0), rank(f, 0))?;
                let a = self.int32_const(format!("{}:axis", f.base), &[axis as i32]);
                let keep = node.attr_i("keepdims").unwrap_or(1) != 0;
                let out = if keep {
                    let mut s = y_shape.clone();
                    s.remove(axis);
                    self.new_tensor(format!("{}:arg", f.base), &s, tfl::TensorType::INT32, None, None)
                } else {
                    y
                };
                let (code, options) = if node.op == "ArgMax" {
                    let o = tfl::ArgMaxOptionsT {
                        output_type: tfl::TensorType::INT32,
                    };
                    (B::ARG_MAX, O::ArgMaxOptions(Box::new(o)))
                } else {
                    let o = tfl::ArgMinOptionsT {
                        output_type: tfl::TensorType::INT32,
                    };
                    (B::ARG_MIN, O::ArgMinOptions(Box::new(o)))
                };
                self.emit(code, 1, vec![x, a], vec![out], options);
                if keep {
                    self.reshape_to(out, y, &y_shape, &f.base);
                }
                Ok(())
            }
            "Clip" => {
                // MAXIMUM with the lower bound, then MINIMUM with the upper one (constants
                // or tensors computed at run time; an absent bound is no op).
                let x = need(self, f, 0)?;
                let mut bounds = Vec::new();
                for (k, attr, code) in [(1, "min", B::MAXIMUM), (2, "max", B::MINIMUM)] {
                    let t = match (f.value(k), node.attr_f(attr)) {
                        (Some(_), _) => need(self, f, k)?,
                        (None, Some(b)) => self.f32_const(format!("{}:clip_{attr}", f.base), &[], &[b]),
                        (None, None) => continue,
                    };
                    bounds.push((t, code));
                }
                let mut cur = x;
                for (i, &(b, code)) in bounds.iter().enumerate() {
                    let out = if i + 1 == bounds.len() {
                        y
                    } else {
                        self.f32_hidden(format!("{}:clip_lo", f.base), &y_shape)
                    };
                    self.emit(
                        code,
                        1,
                        vec![cur, b],
                        vec![out],
                        O::MaximumMinimumOptions(Box::default()),
                    );
                    cur = out;
                }
                if bounds.is_empty() {
                    self.reshape_to(x, y, &y_shape, &f.base);
                }
                Ok(())
            }
            "BatchNormalization" => {
                let x = need(self, f, 0)?;
                let p: Vec<Vec<f32>> = (1..5)
                    .map(|k| f.constant(k).map(|c| c.tensor().to_f32().iter().copied().collect()))
                    .collect::<Option<_>>()
                    .ok_or("its scale, bias, mean and variance are not constants")?;
                let eps = node.attr_f("epsilon").unwrap_or(1e-5);
                let scale: Vec<f32> = p[0].iter().zip(&p[3]).map(|(&s, &v)| s / (v + eps).sqrt()).collect();
                let shift: Vec<f32> = p[1]
                    .iter()
                    .zip(&p[2])
                    .zip(&scale)
                    .map(|((&b, &m), &s)| b - m * s)
                    .collect();
                let mut cshape = vec![scale.len()];
                cshape.resize(rank(f, 0).saturating_sub(1).max(1), 1);
                let s = self.f32_const(format!("{}:bn_scale", f.base), &cshape, &scale);
                let b = self.f32_const(format!("{}:bn_shift", f.base), &cshape, &shift);
                let mid = self.f32_hidden(format!("{}:bn_scaled", f.base), &y_shape);
                self.emit(B::MUL, 1, vec![x, s], vec![mid], O::MulOptions(Box::default()));
                self.emit(B::ADD, 1, vec![mid, b], vec![y], O::AddOptions(Box::default()));
                Ok(())
            }
            "Gemm" | "FusedGemm" | "MatMul" => self.node_matmul(f, y, &y_shape),
            "Conv" | "FusedConv" => self.node_conv(f, y, &y_shape),
            other => Err(format!("TFLite has no float op for {other} in this exporter")),
        }
    }

    /// Gemm (alpha·A·B + beta·C, B constant), MatMul, and onnxruntime's FusedGemm (a Gemm
    /// with its activation) as FULLY_CONNECTED, or BATCH_MATMUL when B is computed.
    fn node_matmul(&mut self, f: &mut FloatNodeIo, y: i32, y_shape: &[usize]) -> Result<(), String> {
        use tfl::BuiltinOperator as B;
        use tfl::BuiltinOptionsT as O;
        let node = f.node;
        let gemm = node.op != "MatMul";
        if gemm && node.attr_i("transA").unwrap_or(0) != 0 {
            return Err("transA = 1 has no TFLite form here".into());
        }
        let trans_b = gemm && node.attr_i("transB").unwrap_or(0) != 0;
        let (alpha, beta) = (node.attr_f("alpha").unwrap_or(1.0), node.attr_f("beta").unwrap_or(1.0));
        let (act, post) = match node.attr_s("activation") {
            None => (tfl::ActivationFunctionType::NONE, None),
            Some("Relu") => (tfl::ActivationFunctionType::RELU, None),
            Some("LeakyRelu") => {
                let alpha = node.attr_f("activation_alpha").unwrap_or(0.01);
                let o = O::LeakyReluOptions(Box::new(tfl::LeakyReluOptionsT { alpha }));
                (tfl::ActivationFunctionType::NONE, Some((B::LEAKY_RELU, o)))
            }
            Some("Sigmoid") => (tfl::ActivationFunctionType::NONE, Some((B::LOGISTIC, O::NONE))),
            Some("Tanh") => (tfl::ActivationFunctionType::NONE, Some((B::TANH, O::NONE))),
            Some(a) => return Err(format!("a fused {a} has no TFLite form here")),
        };
        let a = self.node_input(f, 0)?.ok_or("input 0 is missing")?;
        let out = if post.is_some() {
            self.f32_hidden(format!("{}:gemm", f.base), y_shape)
        } else {
            y
        };
        let b_const = f
            .constant(1)
            .filter(|c| c.shape.len() == 2)
            .map(|c| (c.shape.clone(), c.tensor().to_f32()));
        match b_const {
            Some((bs, b)) => {
                // FULLY_CONNECTED's weights are [N, K].
                let b: Vec<f32> = b.iter().copied().collect();
                let (k, n) = if trans_b { (bs[1], bs[0]) } else { (bs[0], bs[1]) };
                let mut w = vec![0f32; n * k];
                for (i, wi) in w.iter_mut().enumerate() {
                    let (row, col) = (i / k, i % k);
                    *wi = alpha * if trans_b { b[row * k + col] } else { b[col * n + row] };
                }
                let wt = self.f32_const(format!("{}:weights", f.base), &[n, k], &w);
                let bias = match f.constant(2) {
                    Some(c) if gemm => {
                        let v: Vec<f32> = c.tensor().to_f32().iter().map(|&v| v * beta).collect();
                        let v = match v.len() {
                            1 => vec![v[0]; n],
                            l if l == n => v,
                            l => {
                                return Err(format!(
                                    "a bias of {l} values for {n} outputs has no FULLY_CONNECTED form"
                                ));
                            }
                        };
                        self.f32_const(format!("{}:bias", f.base), &[n], &v)
                    }
                    None if node.inputs.get(2).copied().flatten().is_none() => -1,
                    _ => return Err("its bias is computed at run time".into()),
                };
                let keep_num_dims = f.shape(0).is_some_and(|s| s.len() > 2);
                let options = O::FullyConnectedOptions(Box::new(tfl::FullyConnectedOptionsT {
                    fused_activation_function: act,
                    keep_num_dims,
                    ..Default::default()
                }));
                self.emit(
                    B::FULLY_CONNECTED,
                    if keep_num_dims { 5 } else { 1 },
                    vec![a, wt, bias],
                    vec![out],
                    options,
                );
            }
            None if !gemm => {
                let b = self.node_input(f, 1)?.ok_or("input 1 is missing")?;
                self.emit(
                    B::BATCH_MATMUL,
                    1,
                    vec![a, b],
                    vec![out],
                    O::BatchMatMulOptions(Box::default()),
                );
            }
            None => return Err("B is computed at run time".into()),
        }
        if let Some((code, options)) = post {
            self.emit(code, 1, vec![out], vec![y], options);
        }
        Ok(())
    }

    /// A 1-D or 2-D Conv or FusedConv in float32: the input to NHWC (a RESHAPE adds H = 1 to
    /// a 1-D input), CONV_2D or DEPTHWISE_CONV_2D on the constant filter (OHWI, or
    /// `[1, H, W, C·m]`) with explicit padding as PAD where SAME and VALID cannot say it,
    /// the fused activation, and the output back to the graph's layout.
    fn node_conv(&mut self, f: &mut FloatNodeIo, y: i32, y_shape: &[usize]) -> Result<(), String> {
        use tfl::BuiltinOperator as B;
        use tfl::BuiltinOptionsT as O;
        let node = f.node;
        if node.attr_s("auto_pad").is_some_and(|a| a != "NOTSET") {
            return Err("auto_pad has no TFLite form here (explicit pads have)".into());
        }
        let xs = f.shape(0).ok_or("input 0 is missing")?.to_vec();
        let c = f.constant(1).ok_or("its filter is not a constant")?;
        let (ws, w) = (
            c.shape.clone(),
            c.tensor().to_f32().iter().copied().collect::<Vec<f32>>(),
        );
        let one_d = xs.len() == 3;
        if !(one_d || xs.len() == 4) || ws.len() != xs.len() || y_shape.len() != xs.len() {
            return Err("only 1-D and 2-D convolutions have a TFLite form".into());
        }
        let ints = |k: &str, n: usize, d: i64| -> Vec<usize> {
            node.attr_ints(k)
                .map_or_else(|| vec![d as usize; n], |v| v.iter().map(|&a| a as usize).collect())
        };
        let sp = xs.len() - 2;
        let (strides, dil, pads) = (
            ints("strides", sp, 1),
            ints("dilations", sp, 1),
            ints("pads", 2 * sp, 0),
        );
        // Everything as 2-D: H = 1 for a 1-D convolution.
        let (x4, w4, y4, strides, dil, pads) = if one_d {
            (
                vec![xs[0], xs[1], 1, xs[2]],
                vec![ws[0], ws[1], 1, ws[2]],
                vec![y_shape[0], y_shape[1], 1, y_shape[2]],
                [1, strides[0]],
                [1, dil[0]],
                [0, pads[0], 0, pads[1]],
            )
        } else {
            (
                xs.clone(),
                ws.clone(),
                y_shape.to_vec(),
                [strides[0], strides[1]],
                [dil[0], dil[1]],
                [pads[0], pads[1], pads[2], pads[3]],
            )
        };
        let (act, post) = match node.attr_s("activation") {
            None => (tfl::ActivationFunctionType::NONE, None),
            Some("Relu") => (tfl::ActivationFunctionType::RELU, None),
            Some(a @ ("LeakyRelu" | "Sigmoid" | "Tanh" | "HardSwish")) => (tfl::ActivationFunctionType::NONE, Some(a)),
            Some(a) => return Err(format!("a fused {a} has no TFLite form here")),
        };
        let groups = node.attr_i("group").unwrap_or(1) as usize;
        let (o, c_in) = (w4[0], x4[1]);
        let depthwise = groups > 1 && groups == c_in && w4[1] == 1;
        let base = f.base.clone();
        let mut x = self.node_input(f, 0)?.ok_or("input 0 is missing")?;
        if one_d {
            let t = self.f32_hidden(format!("{base}:conv_2d_input"), &x4);
            self.reshape_to(x, t, &x4, &format!("{base}:conv_2d_input"));
            x = t;
        }
        let xn = self.f32_hidden(format!("{base}:conv_input_nhwc"), &nhwc(&x4));
        self.relayout(x, xn, &x4, NCHW_TO_NHWC, &nhwc(&x4));
        let mut x = xn;
        let padding = match padding([x4[2], x4[3]], [y4[2], y4[3]], [w4[2], w4[3]], strides, dil, pads) {
            Pad::Same => tfl::Padding::SAME,
            Pad::Valid => tfl::Padding::VALID,
            Pad::Explicit([t, b, l, r]) => {
                let p = self.new_tensor(
                    format!("{base}:conv_paddings"),
                    &[4, 2],
                    tfl::TensorType::INT32,
                    None,
                    Some(i32_bytes(&[0, 0, t as i32, b as i32, l as i32, r as i32, 0, 0])),
                );
                let shape = [x4[0], x4[2] + t + b, x4[3] + l + r, x4[1]];
                let padded = self.f32_hidden(format!("{base}:conv_padded"), &shape);
                self.emit(B::PAD, 1, vec![x, p], vec![padded], O::PadOptions(Box::default()));
                x = padded;
                tfl::Padding::VALID
            }
        };
        // Filter [O, C/g, KH, KW] to OHWI, or to [1, KH, KW, O] for a depthwise one.
        let (kh, kw, ci) = (w4[2], w4[3], w4[1]);
        let at = |oo: usize, cc: usize, h: usize, wv: usize| w[((oo * ci + cc) * kh + h) * kw + wv];
        let (fshape, fdata) = if depthwise {
            let mut d = Vec::with_capacity(w.len());
            for h in 0..kh {
                for wv in 0..kw {
                    for oo in 0..o {
                        d.push(at(oo, 0, h, wv));
                    }
                }
            }
            (vec![1, kh, kw, o], d)
        } else {
            let mut d = Vec::with_capacity(w.len());
            for oo in 0..o {
                for h in 0..kh {
                    for wv in 0..kw {
                        for cc in 0..ci {
                            d.push(at(oo, cc, h, wv));
                        }
                    }
                }
            }
            (vec![o, kh, kw, ci], d)
        };
        let wt = self.f32_const(format!("{base}:filter"), &fshape, &fdata);
        let bias = match f.constant(2) {
            Some(c) => self.f32_const(
                format!("{base}:bias"),
                &[o],
                &c.tensor().to_f32().iter().copied().collect::<Vec<_>>(),
            ),
            None if f.value(2).is_none() => self.f32_const(format!("{base}:bias"), &[o], &vec![0.0; o]),
            None => return Err("its bias is computed at run time".into()),
        };
        let yn_shape = nhwc(&y4);
        let mut yn = self.f32_hidden(format!("{base}:conv_nhwc"), &yn_shape);
        let options = if depthwise {
            O::DepthwiseConv2DOptions(Box::new(tfl::DepthwiseConv2DOptionsT {
                padding,
                stride_w: strides[1] as i32,
                stride_h: strides[0] as i32,
                depth_multiplier: (o / c_in) as i32,
                fused_activation_function: act,
                dilation_w_factor: dil[1] as i32,
                dilation_h_factor: dil[0] as i32,
            }))
        } else {
            O::Conv2DOptions(Box::new(tfl::Conv2DOptionsT {
                padding,
                stride_w: strides[1] as i32,
                stride_h: strides[0] as i32,
                fused_activation_function: act,
                dilation_w_factor: dil[1] as i32,
                dilation_h_factor: dil[0] as i32,
                ..Default::default()
            }))
        };
        let code = if depthwise { B::DEPTHWISE_CONV_2D } else { B::CONV_2D };
        self.emit(code, 1, vec![x, wt, bias], vec![yn], options);
        if let Some(a) = post {
            let z = self.f32_hidden(format!("{base}:conv_activation"), &yn_shape);
            let (code, options) = match a {
                "LeakyRelu" => {
                    let alpha = node
                        .attr_floats("activation_params")
                        .and_then(|p| p.first().copied())
                        .unwrap_or(0.01);
                    (
                        B::LEAKY_RELU,
                        O::LeakyReluOptions(Box::new(tfl::LeakyReluOptionsT { alpha })),
                    )
                }
                "Sigmoid" => (B::LOGISTIC, O::NONE),
                "Tanh" => (B::TANH, O::NONE),
                _ => (B::HARD_SWISH, O::HardSwishOptions(Box::default())),
            };
            self.emit(code, 1, vec![yn], vec![z], options);
            yn = z;
        }
        if one_d {
            let t = self.f32_hidden(format!("{base}:conv_nchw"), &y4);
            self.relayout(yn, t, &yn_shape, NHWC_TO_NCHW, &y4);
            self.reshape_to(t, y, y_shape, &format!("{base}:conv_output"));
        } else {
            self.relayout(yn, y, &yn_shape, NHWC_TO_NCHW, y_shape);
        }
        Ok(())
    }

    /// `y = reshape(x)` to `shape`.
    fn reshape_to(&mut self, x: i32, y: i32, shape: &[usize], base: &str) {
        let s: Vec<i32> = shape.iter().map(|&d| d as i32).collect();
        let st = self.int32_const(format!("{base}:shape"), &s);
        self.emit(
            tfl::BuiltinOperator::RESHAPE,
            1,
            vec![x, st],
            vec![y],
            tfl::BuiltinOptionsT::ReshapeOptions(Box::new(tfl::ReshapeOptionsT { new_shape: Some(s) })),
        );
    }

    /// LayerNormalization over the last axis in float32 (`xf` → `yf`): MEAN,
    /// SQUARED_DIFFERENCE, MEAN, ADD ε, RSQRT, SUB, MUL, MUL γ, ADD β.
    fn layer_norm(&mut self, op: &IOp, xf: i32, yf: i32, epsilon: f32, gamma: &[f32], beta: &[f32]) {
        use tfl::BuiltinOperator as B;
        let p = self.p;
        let (xt, yt) = (&p.tensors[op.inputs[0]], &p.tensors[op.outputs[0]]);
        let shape = xt.shape.clone();
        let rank = shape.len();
        let mut reduced = shape.clone();
        reduced[rank - 1] = 1;
        let base = yt.name.clone();
        let axis = self.int32_const(format!("{base}:ln_axis"), &[(rank - 1) as i32]);
        let keep = || tfl::BuiltinOptionsT::ReducerOptions(Box::new(tfl::ReducerOptionsT { keep_dims: true }));
        let mean = self.float_op(B::MEAN, vec![xf, axis], format!("{base}:ln_mean"), &reduced, keep());
        let sq = self.float_op(
            B::SQUARED_DIFFERENCE,
            vec![xf, mean],
            format!("{base}:ln_squared"),
            &shape,
            tfl::BuiltinOptionsT::SquaredDifferenceOptions(Box::default()),
        );
        let var = self.float_op(B::MEAN, vec![sq, axis], format!("{base}:ln_variance"), &reduced, keep());
        let eps = self.f32_const(format!("{base}:ln_epsilon"), &[1], &[epsilon]);
        let add = |w: &mut Self, a: i32, b: i32, name: String, shape: &[usize]| {
            w.float_op(
                B::ADD,
                vec![a, b],
                name,
                shape,
                tfl::BuiltinOptionsT::AddOptions(Box::default()),
            )
        };
        let mul = |w: &mut Self, a: i32, b: i32, name: String, shape: &[usize]| {
            w.float_op(
                B::MUL,
                vec![a, b],
                name,
                shape,
                tfl::BuiltinOptionsT::MulOptions(Box::default()),
            )
        };
        let ve = add(self, var, eps, format!("{base}:ln_variance_eps"), &reduced);
        let r = self.float_op(
            B::RSQRT,
            vec![ve],
            format!("{base}:ln_rstd"),
            &reduced,
            tfl::BuiltinOptionsT::NONE,
        );
        let c = self.float_op(
            B::SUB,
            vec![xf, mean],
            format!("{base}:ln_centered"),
            &shape,
            tfl::BuiltinOptionsT::SubOptions(Box::default()),
        );
        let normed = mul(self, c, r, format!("{base}:ln_normalized"), &shape);
        let width = shape[rank - 1];
        let g = self.f32_const(format!("{base}:ln_gamma"), &[width], gamma);
        let scaled = mul(self, normed, g, format!("{base}:ln_scaled"), &shape);
        let b = self.f32_const(format!("{base}:ln_beta"), &[width], beta);
        self.emit(
            B::ADD,
            1,
            vec![scaled, b],
            vec![yf],
            tfl::BuiltinOptionsT::AddOptions(Box::default()),
        );
    }

    /// MEAN, REDUCE_MAX or REDUCE_MIN over `axes`, in the input's layout when the kept
    /// axes keep their order there.
    fn reduce(&mut self, op: &IOp, code: tfl::BuiltinOperator, axes: &[usize]) {
        let p = self.p;
        let (xt, yt) = (&p.tensors[op.inputs[0]], &p.tensors[op.outputs[0]]);
        let rank = xt.shape.len();
        let keep = yt.shape.len() == rank;
        let mut in_nhwc = self.nhwc[op.inputs[0]];
        if in_nhwc && !keep {
            // The kept axes must stay in the graph's order.
            let kept: Vec<usize> = (0..rank).filter(|d| !axes.contains(d)).collect();
            let mut in_file = kept.clone();
            in_file.sort_by_key(|&d| file_axis(true, d));
            in_nhwc = kept == in_file;
        }
        let mut ax: Vec<i32> = axes.iter().map(|&a| file_axis(in_nhwc, a) as i32).collect();
        ax.sort_unstable();
        let x = self.tensor_as(op.inputs[0], in_nhwc);
        let a = self.int32_const(format!("{}:axes", yt.name), &ax);
        let (y, pending) = self.output_as(op.outputs[0], in_nhwc && keep);
        self.emit(
            code,
            2,
            vec![x, a],
            vec![y],
            tfl::BuiltinOptionsT::ReducerOptions(Box::new(tfl::ReducerOptionsT { keep_dims: keep })),
        );
        self.flush(pending);
    }

    fn lower(&mut self, op: &IOp) -> Result<(), String> {
        if let OpKind::Float { op: FloatOp::Node(n) } = &op.kind {
            return self.float_node(op, n);
        }
        let p = self.p;
        let xt = &p.tensors[op.inputs[0]];
        let yt = &p.tensors[op.outputs[0]];
        match &op.kind {
            OpKind::Conv {
                strides,
                dilations,
                pads,
                groups,
                act,
            } => {
                let wt = &p.tensors[op.inputs[1]];
                let (c_in, o) = (xt.shape[1], wt.shape[0]);
                let depthwise = *groups > 1 && *groups == c_in && wt.shape[1] == 1;
                // Grouped (not depthwise): CONV_2D with a filter of C/groups channels, which
                // the reference kernel supports.
                let mut x = self.tensor_as(op.inputs[0], true);
                let pad = padding(
                    [xt.shape[2], xt.shape[3]],
                    [yt.shape[2], yt.shape[3]],
                    [wt.shape[2], wt.shape[3]],
                    *strides,
                    *dilations,
                    *pads,
                );
                let padding = match pad {
                    Pad::Same => tfl::Padding::SAME,
                    Pad::Valid => tfl::Padding::VALID,
                    Pad::Explicit(e) => {
                        let shape = nhwc(&xt.shape);
                        x = self.pad(x, &shape, &xt.q, e, None, &format!("{}:pad", yt.name)).0;
                        tfl::Padding::VALID
                    }
                };
                let w_data = wt.data.as_deref().ok_or("weights are not constant")?;
                let (wshape, wdata, dim) = if depthwise {
                    let perm = [1, 2, 3, 0];
                    (
                        perm.iter().map(|&i| wt.shape[i]).collect::<Vec<_>>(),
                        transpose(w_data, &wt.shape, &perm),
                        3,
                    )
                } else {
                    (nhwc(&wt.shape), transpose(w_data, &wt.shape, &NCHW_TO_NHWC), 0)
                };
                let w = self.new_tensor(
                    wt.name.clone(),
                    &wshape,
                    ttype(wt.q.ty),
                    quant(&wt.q, dim),
                    Some(le_bytes(wt.q.ty, &wdata)),
                );
                let b = self.tensor(op.inputs[2]);
                let (y, pending) = self.output_as(op.outputs[0], true);
                if depthwise {
                    self.emit(
                        tfl::BuiltinOperator::DEPTHWISE_CONV_2D,
                        3,
                        vec![x, w, b],
                        vec![y],
                        tfl::BuiltinOptionsT::DepthwiseConv2DOptions(Box::new(tfl::DepthwiseConv2DOptionsT {
                            padding,
                            stride_w: strides[1] as i32,
                            stride_h: strides[0] as i32,
                            depth_multiplier: (o / c_in) as i32,
                            fused_activation_function: act_fn(*act),
                            dilation_w_factor: dilations[1] as i32,
                            dilation_h_factor: dilations[0] as i32,
                        })),
                    );
                } else {
                    self.emit(
                        tfl::BuiltinOperator::CONV_2D,
                        3,
                        vec![x, w, b],
                        vec![y],
                        tfl::BuiltinOptionsT::Conv2DOptions(Box::new(tfl::Conv2DOptionsT {
                            padding,
                            stride_w: strides[1] as i32,
                            stride_h: strides[0] as i32,
                            fused_activation_function: act_fn(*act),
                            dilation_w_factor: dilations[1] as i32,
                            dilation_h_factor: dilations[0] as i32,
                            ..Default::default()
                        })),
                    );
                }
                self.flush(pending);
            }
            OpKind::TransposeConv { strides, act } => {
                let x = self.tensor_as(op.inputs[0], true);
                let wt = &p.tensors[op.inputs[1]];
                let w_data = wt.data.as_deref().ok_or("weights are not constant")?;
                let w = self.new_tensor(
                    wt.name.clone(),
                    &nhwc(&wt.shape),
                    tfl::TensorType::INT8,
                    quant(&wt.q, 0),
                    Some(le_bytes(IntType::I8, &transpose(w_data, &wt.shape, &NCHW_TO_NHWC))),
                );
                let b = self.tensor(op.inputs[2]);
                let (y, pending) = self.output_as(op.outputs[0], true);
                let shape: Vec<i32> = nhwc(&yt.shape).iter().map(|&d| d as i32).collect();
                let st = self.int32_const(format!("{}:output_shape", yt.name), &shape);
                self.emit(
                    tfl::BuiltinOperator::TRANSPOSE_CONV,
                    3,
                    vec![st, w, x, b],
                    vec![y],
                    tfl::BuiltinOptionsT::TransposeConvOptions(Box::new(tfl::TransposeConvOptionsT {
                        padding: tfl::Padding::VALID,
                        stride_w: strides[1] as i32,
                        stride_h: strides[0] as i32,
                        fused_activation_function: act_fn(*act),
                        ..Default::default()
                    })),
                );
                self.flush(pending);
            }
            OpKind::ResizeNearest => {
                let x = self.tensor_as(op.inputs[0], true);
                let (y, pending) = self.output_as(op.outputs[0], true);
                let size = self.int32_const(format!("{}:size", yt.name), &[yt.shape[2] as i32, yt.shape[3] as i32]);
                self.emit(
                    tfl::BuiltinOperator::RESIZE_NEAREST_NEIGHBOR,
                    3,
                    vec![x, size],
                    vec![y],
                    tfl::BuiltinOptionsT::ResizeNearestNeighborOptions(Box::new(tfl::ResizeNearestNeighborOptionsT {
                        align_corners: false,
                        half_pixel_centers: false,
                    })),
                );
                self.flush(pending);
            }
            OpKind::FullyConnected { act } => {
                let x = self.tensor_as(op.inputs[0], false);
                let w = self.tensor(op.inputs[1]);
                let b = self.tensor(op.inputs[2]);
                let (y, pending) = self.output_as(op.outputs[0], false);
                self.emit(
                    tfl::BuiltinOperator::FULLY_CONNECTED,
                    5,
                    vec![x, w, b],
                    vec![y],
                    tfl::BuiltinOptionsT::FullyConnectedOptions(Box::new(tfl::FullyConnectedOptionsT {
                        fused_activation_function: act_fn(*act),
                        keep_num_dims: yt.shape.len() > 2,
                        ..Default::default()
                    })),
                );
                self.flush(pending);
            }
            OpKind::Add { act } | OpKind::Sub { act } | OpKind::Mul { act } => {
                let rank = yt.shape.len();
                let out_nhwc = self.nhwc[op.outputs[0]];
                if out_nhwc
                    && op
                        .inputs
                        .iter()
                        .any(|&k| p.tensors[k].data.is_none() && p.tensors[k].shape.len() != rank)
                {
                    return Err(
                        "an element-wise op on an image and a tensor of another rank is not written yet".into(),
                    );
                }
                let a = self.operand(op.inputs[0], rank, out_nhwc);
                let b = self.operand(op.inputs[1], rank, out_nhwc);
                let (y, pending) = self.output_as(op.outputs[0], out_nhwc);
                let f = act_fn(*act);
                let (code, opts) = match op.kind {
                    OpKind::Add { .. } => (
                        tfl::BuiltinOperator::ADD,
                        tfl::BuiltinOptionsT::AddOptions(Box::new(tfl::AddOptionsT {
                            fused_activation_function: f,
                            pot_scale_int16: false,
                        })),
                    ),
                    OpKind::Sub { .. } => (
                        tfl::BuiltinOperator::SUB,
                        tfl::BuiltinOptionsT::SubOptions(Box::new(tfl::SubOptionsT {
                            fused_activation_function: f,
                            pot_scale_int16: false,
                        })),
                    ),
                    _ => (
                        tfl::BuiltinOperator::MUL,
                        tfl::BuiltinOptionsT::MulOptions(Box::new(tfl::MulOptionsT {
                            fused_activation_function: f,
                        })),
                    ),
                };
                self.emit(code, 2, vec![a, b], vec![y], opts);
                self.flush(pending);
            }
            OpKind::Mean { axes } => self.reduce(op, tfl::BuiltinOperator::MEAN, axes),
            OpKind::Reduce { which, axes } => {
                let code = match which {
                    Extreme::Max => tfl::BuiltinOperator::REDUCE_MAX,
                    Extreme::Min => tfl::BuiltinOperator::REDUCE_MIN,
                };
                self.reduce(op, code, axes);
            }
            OpKind::Pool {
                kind,
                kernel,
                strides,
                pads,
                act,
            } => {
                let max = *kind == PoolKind::Max;
                let mut x = self.tensor_as(op.inputs[0], true);
                let pad = padding(
                    [xt.shape[2], xt.shape[3]],
                    [yt.shape[2], yt.shape[3]],
                    *kernel,
                    *strides,
                    [1, 1],
                    *pads,
                );
                let padding = match pad {
                    Pad::Same => tfl::Padding::SAME,
                    Pad::Valid => tfl::Padding::VALID,
                    Pad::Explicit(e) => {
                        if !max {
                            return Err("average pooling with padding SAME cannot express is not written yet".into());
                        }
                        let shape = nhwc(&xt.shape);
                        let lowest = xt.q.ty.range().0;
                        x = self
                            .pad(x, &shape, &xt.q, e, Some(lowest), &format!("{}:pad", yt.name))
                            .0;
                        tfl::Padding::VALID
                    }
                };
                let (y, pending) = self.output_as(op.outputs[0], true);
                self.emit(
                    if max {
                        tfl::BuiltinOperator::MAX_POOL_2D
                    } else {
                        tfl::BuiltinOperator::AVERAGE_POOL_2D
                    },
                    2,
                    vec![x],
                    vec![y],
                    tfl::BuiltinOptionsT::Pool2DOptions(Box::new(tfl::Pool2DOptionsT {
                        padding,
                        stride_w: strides[1] as i32,
                        stride_h: strides[0] as i32,
                        filter_width: kernel[1] as i32,
                        filter_height: kernel[0] as i32,
                        fused_activation_function: act_fn(*act),
                    })),
                );
                self.flush(pending);
            }
            OpKind::HardSwish | OpKind::Logistic | OpKind::Tanh | OpKind::Requantize | OpKind::Relu { .. } => {
                let layout = self.nhwc[op.outputs[0]];
                let x = self.tensor_as(op.inputs[0], layout);
                let (y, pending) = self.output_as(op.outputs[0], layout);
                let (code, version, opts) = match op.kind {
                    OpKind::HardSwish => (
                        tfl::BuiltinOperator::HARD_SWISH,
                        1,
                        tfl::BuiltinOptionsT::HardSwishOptions(Box::default()),
                    ),
                    OpKind::Logistic => (tfl::BuiltinOperator::LOGISTIC, 2, tfl::BuiltinOptionsT::NONE),
                    OpKind::Tanh => (tfl::BuiltinOperator::TANH, 2, tfl::BuiltinOptionsT::NONE),
                    OpKind::Relu { act } => (
                        match act {
                            Act::Relu6 => tfl::BuiltinOperator::RELU6,
                            Act::ReluN1To1 => tfl::BuiltinOperator::RELU_N1_TO_1,
                            _ => tfl::BuiltinOperator::RELU,
                        },
                        2,
                        tfl::BuiltinOptionsT::NONE,
                    ),
                    _ => (
                        tfl::BuiltinOperator::QUANTIZE,
                        2,
                        tfl::BuiltinOptionsT::QuantizeOptions(Box::default()),
                    ),
                };
                self.emit(code, version, vec![x], vec![y], opts);
                self.flush(pending);
            }
            OpKind::Softmax { beta } => {
                let x = self.tensor_as(op.inputs[0], false);
                let (y, pending) = self.output_as(op.outputs[0], false);
                self.emit(
                    tfl::BuiltinOperator::SOFTMAX,
                    2,
                    vec![x],
                    vec![y],
                    tfl::BuiltinOptionsT::SoftmaxOptions(Box::new(tfl::SoftmaxOptionsT { beta: *beta })),
                );
                self.flush(pending);
            }
            OpKind::Reshape => {
                let x = self.tensor_as(op.inputs[0], false);
                let (y, pending) = self.output_as(op.outputs[0], false);
                let shape: Vec<i32> = yt.shape.iter().map(|&d| d as i32).collect();
                let st = self.int32_const(format!("{}:shape", yt.name), &shape);
                self.emit(
                    tfl::BuiltinOperator::RESHAPE,
                    1,
                    vec![x, st],
                    vec![y],
                    tfl::BuiltinOptionsT::ReshapeOptions(Box::new(tfl::ReshapeOptionsT { new_shape: Some(shape) })),
                );
                self.flush(pending);
            }
            OpKind::Transpose { perm } => {
                let rank = perm.len();
                let (in_nhwc, out_nhwc) = (self.nhwc[op.inputs[0]], self.nhwc[op.outputs[0]]);
                let fwd_out: Vec<usize> = if out_nhwc {
                    NCHW_TO_NHWC.to_vec()
                } else {
                    (0..rank).collect()
                };
                let q: Vec<i32> = (0..rank).map(|i| file_axis(in_nhwc, perm[fwd_out[i]]) as i32).collect();
                let x = self.tensor(op.inputs[0]);
                let y = self.tensor(op.outputs[0]);
                let pt = self.int32_const(format!("{}:perm", yt.name), &q);
                self.emit(
                    tfl::BuiltinOperator::TRANSPOSE,
                    2,
                    vec![x, pt],
                    vec![y],
                    tfl::BuiltinOptionsT::TransposeOptions(Box::default()),
                );
            }
            OpKind::Concat { axis } => {
                let layout = self.nhwc[op.outputs[0]];
                let a = file_axis(layout, *axis);
                let ins: Vec<i32> = op
                    .inputs
                    .iter()
                    .map(|&k| self.operand(k, yt.shape.len(), layout))
                    .collect();
                let (y, pending) = self.output_as(op.outputs[0], layout);
                self.emit(
                    tfl::BuiltinOperator::CONCATENATION,
                    2,
                    ins,
                    vec![y],
                    tfl::BuiltinOptionsT::ConcatenationOptions(Box::new(tfl::ConcatenationOptionsT {
                        axis: a as i32,
                        fused_activation_function: tfl::ActivationFunctionType::NONE,
                    })),
                );
                self.flush(pending);
            }
            OpKind::Slice { axes } => {
                let layout = self.nhwc[op.outputs[0]];
                let rank = xt.shape.len();
                let mut begin = vec![0i32; rank];
                let file_in = if layout && rank == 4 {
                    nhwc(&xt.shape)
                } else {
                    xt.shape.clone()
                };
                let mut end: Vec<i32> = file_in.iter().map(|&d| d as i32).collect();
                let mut strides = vec![1i32; rank];
                let mut end_mask = 0i32;
                for a in axes {
                    let f = file_axis(layout && rank == 4, a.axis);
                    begin[f] = a.first as i32;
                    strides[f] = a.step as i32;
                    let last = a.first as isize + (a.count as isize - 1).max(0) * a.step;
                    if a.count == 0 {
                        end[f] = a.first as i32;
                    } else if a.step > 0 {
                        end[f] = (last + 1) as i32;
                    } else if last == 0 {
                        // A negative end would count from the back: run to the start.
                        end_mask |= 1 << f;
                        end[f] = 0;
                    } else {
                        end[f] = (last - 1) as i32;
                    }
                }
                let x = self.tensor_as(op.inputs[0], layout);
                let (y, pending) = self.output_as(op.outputs[0], layout);
                let b = self.int32_const(format!("{}:begin", yt.name), &begin);
                let e = self.int32_const(format!("{}:end", yt.name), &end);
                let s = self.int32_const(format!("{}:strides", yt.name), &strides);
                self.emit(
                    tfl::BuiltinOperator::STRIDED_SLICE,
                    4,
                    vec![x, b, e, s],
                    vec![y],
                    tfl::BuiltinOptionsT::StridedSliceOptions(Box::new(tfl::StridedSliceOptionsT {
                        end_mask,
                        ..Default::default()
                    })),
                );
                self.flush(pending);
            }
            OpKind::BatchMatMul => {
                let a = self.tensor_as(op.inputs[0], false);
                let b = self.tensor_as(op.inputs[1], false);
                let (y, pending) = self.output_as(op.outputs[0], false);
                self.emit(
                    tfl::BuiltinOperator::BATCH_MATMUL,
                    4,
                    vec![a, b],
                    vec![y],
                    tfl::BuiltinOptionsT::BatchMatMulOptions(Box::default()),
                );
                self.flush(pending);
            }
            OpKind::Float { op: fop } => self.float(op, fop),
            OpKind::Extremum { .. } | OpKind::SquaredDifference => {
                let layout = self.nhwc[op.outputs[0]];
                let rank = yt.shape.len();
                let a = self.operand(op.inputs[0], rank, layout);
                let b = self.operand(op.inputs[1], rank, layout);
                let (y, pending) = self.output_as(op.outputs[0], layout);
                let (code, options) = match op.kind {
                    OpKind::Extremum { which: Extreme::Max } => (
                        tfl::BuiltinOperator::MAXIMUM,
                        tfl::BuiltinOptionsT::MaximumMinimumOptions(Box::default()),
                    ),
                    OpKind::Extremum { which: Extreme::Min } => (
                        tfl::BuiltinOperator::MINIMUM,
                        tfl::BuiltinOptionsT::MaximumMinimumOptions(Box::default()),
                    ),
                    _ => (
                        tfl::BuiltinOperator::SQUARED_DIFFERENCE,
                        tfl::BuiltinOptionsT::SquaredDifferenceOptions(Box::default()),
                    ),
                };
                self.emit(code, 2, vec![a, b], vec![y], options);
                self.flush(pending);
            }
            OpKind::Rsqrt => {
                let layout = self.nhwc[op.outputs[0]];
                let x = self.tensor_as(op.inputs[0], layout);
                let (y, pending) = self.output_as(op.outputs[0], layout);
                // Version 2 is the int8 kernel, 3 the int16 one.
                let version = if xt.q.ty == IntType::I16 { 3 } else { 2 };
                self.emit(
                    tfl::BuiltinOperator::RSQRT,
                    version,
                    vec![x],
                    vec![y],
                    tfl::BuiltinOptionsT::NONE,
                );
                self.flush(pending);
            }
            OpKind::BroadcastTo => {
                let x = self.tensor_as(op.inputs[0], false);
                let (y, pending) = self.output_as(op.outputs[0], false);
                let shape: Vec<i32> = yt.shape.iter().map(|&d| d as i32).collect();
                let st = self.int32_const(format!("{}:shape", yt.name), &shape);
                self.emit(
                    tfl::BuiltinOperator::BROADCAST_TO,
                    2,
                    vec![x, st],
                    vec![y],
                    tfl::BuiltinOptionsT::BroadcastToOptions(Box::default()),
                );
                self.flush(pending);
            }
            OpKind::ArgExtreme { which, axis } => {
                // In the graph's layout, as GATHER: the output drops an axis.
                let x = self.tensor_as(op.inputs[0], false);
                let a = self.int32_const(format!("{}:axis", yt.name), &[*axis as i32]);
                let (y, pending) = self.output_as(op.outputs[0], false);
                let version = if xt.q.ty == IntType::I8 { 2 } else { 1 };
                let (code, options) = match which {
                    Extreme::Max => (
                        tfl::BuiltinOperator::ARG_MAX,
                        tfl::BuiltinOptionsT::ArgMaxOptions(Box::new(tfl::ArgMaxOptionsT {
                            output_type: tfl::TensorType::INT32,
                        })),
                    ),
                    Extreme::Min => (
                        tfl::BuiltinOperator::ARG_MIN,
                        tfl::BuiltinOptionsT::ArgMinOptions(Box::new(tfl::ArgMinOptionsT {
                            output_type: tfl::TensorType::INT32,
                        })),
                    ),
                };
                self.emit(code, version, vec![x, a], vec![y], options);
                self.flush(pending);
            }
            OpKind::Gather { axis } => {
                // In the graph's layout: the output's rank differs from the input's.
                let x = self.tensor_as(op.inputs[0], false);
                let i = self.tensor_as(op.inputs[1], false);
                let (y, pending) = self.output_as(op.outputs[0], false);
                let version = match self.p.tensors[op.inputs[0]].q.ty {
                    IntType::I8 => 2,
                    IntType::Bool => 3,
                    IntType::I16 => 4,
                    _ => 1,
                };
                self.emit(
                    tfl::BuiltinOperator::GATHER,
                    version,
                    vec![x, i],
                    vec![y],
                    tfl::BuiltinOptionsT::GatherOptions(Box::new(tfl::GatherOptionsT {
                        axis: *axis as i32,
                        batch_dims: 0,
                    })),
                );
                self.flush(pending);
            }
            OpKind::Pad { pads, mode } => {
                let layout = self.nhwc[op.outputs[0]];
                let rank = pads.len();
                let mut paddings = vec![0i32; 2 * rank];
                for (d, p) in pads.iter().enumerate() {
                    let f = file_axis(layout && rank == 4, d);
                    paddings[2 * f] = p[0] as i32;
                    paddings[2 * f + 1] = p[1] as i32;
                }
                let x = self.tensor_as(op.inputs[0], layout);
                let (y, pending) = self.output_as(op.outputs[0], layout);
                let pt = self.new_tensor(
                    format!("{}:paddings", yt.name),
                    &[rank, 2],
                    tfl::TensorType::INT32,
                    None,
                    Some(i32_bytes(&paddings)),
                );
                match mode {
                    PadMode::Constant(c) if *c == yt.q.zp() => self.emit(
                        tfl::BuiltinOperator::PAD,
                        2,
                        vec![x, pt],
                        vec![y],
                        tfl::BuiltinOptionsT::PadOptions(Box::default()),
                    ),
                    PadMode::Constant(c) => {
                        let v = self.new_tensor(
                            format!("{}:pad_value", yt.name),
                            &[1],
                            ttype(yt.q.ty),
                            quant(&yt.q, 0),
                            Some(le_bytes(yt.q.ty, &[i64::from(*c)])),
                        );
                        self.emit(
                            tfl::BuiltinOperator::PADV2,
                            2,
                            vec![x, pt, v],
                            vec![y],
                            tfl::BuiltinOptionsT::PadV2Options(Box::default()),
                        );
                    }
                    PadMode::Reflect => self.emit(
                        tfl::BuiltinOperator::MIRROR_PAD,
                        2,
                        vec![x, pt],
                        vec![y],
                        tfl::BuiltinOptionsT::MirrorPadOptions(Box::new(tfl::MirrorPadOptionsT {
                            mode: tfl::MirrorPadMode::REFLECT,
                        })),
                    ),
                }
                self.flush(pending);
            }
            OpKind::Sqrt | OpKind::Log | OpKind::Exp => {
                let layout = self.nhwc[op.outputs[0]];
                let x = self.tensor_as(op.inputs[0], layout);
                let (y, pending) = self.output_as(op.outputs[0], layout);
                let code = match op.kind {
                    OpKind::Sqrt => tfl::BuiltinOperator::SQRT,
                    OpKind::Log => tfl::BuiltinOperator::LOG,
                    _ => tfl::BuiltinOperator::EXP,
                };
                self.emit(code, 2, vec![x], vec![y], tfl::BuiltinOptionsT::NONE);
                self.flush(pending);
            }
        }
        Ok(())
    }
}

/// Writes `p` as a TFLite flatbuffer.
pub fn write(p: &Program, io: Io) -> Result<Written, TfliteError> {
    let mut w = Writer {
        p,
        tensors: Vec::new(),
        buffers: vec![tfl::BufferT::default()],
        ops: Vec::new(),
        codes: Vec::new(),
        map: vec![None; p.tensors.len()],
        nhwc: layouts(p),
        other: HashMap::new(),
        dequant: HashMap::new(),
        float_nodes: Vec::new(),
    };
    let mut inputs = Vec::new();
    let mut written_inputs = Vec::new();
    for &t in &p.inputs {
        let it = &p.tensors[t];
        let shape = w.file_shape(t);
        written_inputs.push((it.name.clone(), shape.clone(), w.nhwc[t]));
        if io == Io::Float {
            let f = w.new_tensor(it.name.clone(), &shape, tfl::TensorType::FLOAT32, None, None);
            let q = w.tensor(t);
            w.tensors[q as usize].name = Some(format!("{}:int8", it.name));
            w.emit(
                tfl::BuiltinOperator::QUANTIZE,
                2,
                vec![f],
                vec![q],
                tfl::BuiltinOptionsT::QuantizeOptions(Box::default()),
            );
            inputs.push(f);
        } else {
            inputs.push(w.tensor(t));
        }
    }
    for op in &p.ops {
        w.lower(op).map_err(|message| TfliteError {
            node: op.node.clone(),
            op: op.kind.name(),
            message,
        })?;
    }
    let mut outputs = Vec::new();
    for &t in &p.outputs {
        let q = w.tensor(t);
        if io == Io::Float {
            let it = &p.tensors[t];
            w.tensors[q as usize].name = Some(format!("{}:int8", it.name));
            let shape = w.file_shape(t);
            let f = w.new_tensor(it.name.clone(), &shape, tfl::TensorType::FLOAT32, None, None);
            w.emit(
                tfl::BuiltinOperator::DEQUANTIZE,
                2,
                vec![q],
                vec![f],
                tfl::BuiltinOptionsT::NONE,
            );
            outputs.push(f);
        } else {
            outputs.push(q);
        }
    }
    let names = |ids: &[i32], prog: &[usize]| -> Vec<tfl::TensorMapT> {
        ids.iter()
            .zip(prog)
            .map(|(&i, &t)| tfl::TensorMapT {
                name: Some(p.tensors[t].name.clone()),
                tensor_index: i as u32,
            })
            .collect()
    };
    let signature = tfl::SignatureDefT {
        inputs: Some(names(&inputs, &p.inputs)),
        outputs: Some(names(&outputs, &p.outputs)),
        signature_key: Some("serving_default".into()),
        subgraph_index: 0,
    };
    let operators = w.ops.len();
    let model = tfl::ModelT {
        version: 3,
        operator_codes: Some(
            w.codes
                .iter()
                .map(|&(code, version)| tfl::OperatorCodeT {
                    deprecated_builtin_code: code.0.min(127) as i8,
                    custom_code: None,
                    version,
                    builtin_code: code,
                })
                .collect(),
        ),
        subgraphs: Some(vec![tfl::SubGraphT {
            tensors: Some(w.tensors),
            inputs: Some(inputs),
            outputs: Some(outputs),
            operators: Some(w.ops),
            name: Some("main".into()),
            ..Default::default()
        }]),
        description: Some(format!("npu-studio integer export (graph {})", p.graph)),
        buffers: Some(w.buffers),
        signature_defs: Some(vec![signature]),
        ..Default::default()
    };
    let mut fbb = tfl::flatbuffers::FlatBufferBuilder::new();
    let root = model.pack(&mut fbb);
    tfl::finish_model_buffer(&mut fbb, root);
    Ok(Written {
        bytes: fbb.finished_data().to_vec(),
        operators,
        float_nodes: w.float_nodes,
        inputs: written_inputs,
    })
}
