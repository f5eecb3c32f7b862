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

use crate::quant::legalize::{Act, BinaryFn, FloatOp, IOp, ITensor, OpKind, PadMode, Program, ReduceFn, UnaryFn};
use crate::quant::params::{IntType, QParams};
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
            OpKind::Conv { .. }
                | OpKind::TransposeConv { .. }
                | OpKind::MaxPool { .. }
                | OpKind::AvgPool { .. }
                | OpKind::ResizeNearest
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
            | OpKind::Log
            | OpKind::Exp
            | OpKind::Maximum
            | OpKind::Minimum => true,
            OpKind::Mean { .. } | OpKind::ReduceMax { .. } | OpKind::ReduceMin { .. } => {
                p.tensors[op.outputs[0]].shape.len() == 4
            }
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

    /// The float fallback's ONNX node as TFLite float ops, where the node has a TFLite
    /// float builtin.
    fn float_node(&mut self, op: &IOp, n: &crate::quant::legalize::FloatNode) -> Result<(), String> {
        Err(format!(
            "{} runs in the float fallback and has no TFLite float op in this exporter yet",
            n.op
        ))
        .map(|()| self.float_nodes.push(op.node.clone()))
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
            OpKind::ReduceMax { axes } => self.reduce(op, tfl::BuiltinOperator::REDUCE_MAX, axes),
            OpKind::ReduceMin { axes } => self.reduce(op, tfl::BuiltinOperator::REDUCE_MIN, axes),
            OpKind::MaxPool {
                kernel,
                strides,
                pads,
                act,
            }
            | OpKind::AvgPool {
                kernel,
                strides,
                pads,
                act,
            } => {
                let max = matches!(op.kind, OpKind::MaxPool { .. });
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
            OpKind::Maximum | OpKind::Minimum => {
                let layout = self.nhwc[op.outputs[0]];
                let rank = yt.shape.len();
                let a = self.operand(op.inputs[0], rank, layout);
                let b = self.operand(op.inputs[1], rank, layout);
                let (y, pending) = self.output_as(op.outputs[0], layout);
                let code = if matches!(op.kind, OpKind::Maximum) {
                    tfl::BuiltinOperator::MAXIMUM
                } else {
                    tfl::BuiltinOperator::MINIMUM
                };
                self.emit(
                    code,
                    2,
                    vec![a, b],
                    vec![y],
                    tfl::BuiltinOptionsT::MaximumMinimumOptions(Box::default()),
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
