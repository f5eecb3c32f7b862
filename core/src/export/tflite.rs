//! TFLite export of a legalized integer [`Program`]: a fully quantized int8 model in NHWC,
//! weights and biases as the program's codes with per-channel parameters, int8 inputs
//! and outputs (or float ones behind QUANTIZE/DEQUANTIZE), a `serving_default`
//! signature, tensor names equal to the graph's value names. The flatbuffer code is the
//! generated `tflite-schema` crate.
//!
//! Layout: every rank-4 tensor is NHWC in the file; convolution filters OHWI (depthwise
//! `[1, H, W, C·m]`); axes of Mean, Concat and Transpose are remapped; a Reshape from or
//! to rank 4 goes through the NCHW order with TRANSPOSE ops wherever the order of the
//! elements in memory differs. Padding that SAME or VALID cannot express becomes an
//! explicit PAD (with the zero point; −128 before a max pool).

use crate::quant::legalize::{Act, IOp, ITensor, OpKind, Program};
use crate::quant::params::{IntType, QParams};
use crate::sim::integer::kernels::transpose;
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
    /// Inputs in the file's layout: (name, NHWC shape).
    pub inputs: Vec<(String, Vec<usize>)>,
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
        IntType::I8 => tfl::TensorType::INT8,
        IntType::I16 => tfl::TensorType::INT16,
        IntType::I32 => tfl::TensorType::INT32,
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

struct Writer<'p> {
    p: &'p Program,
    tensors: Vec<tfl::TensorT>,
    buffers: Vec<tfl::BufferT>,
    ops: Vec<tfl::OperatorT>,
    codes: Vec<(tfl::BuiltinOperator, i32)>,
    map: Vec<Option<i32>>,
}

fn quant(q: &QParams, dim: i32) -> tfl::QuantizationParametersT {
    tfl::QuantizationParametersT {
        scale: Some(q.scale.clone()),
        zero_point: Some(q.zero_point.iter().map(|&z| i64::from(z)).collect()),
        quantized_dimension: dim,
        ..Default::default()
    }
}

fn le_bytes(ty: IntType, data: &[i32]) -> Vec<u8> {
    match ty {
        IntType::I8 => data.iter().map(|&v| v as i8 as u8).collect(),
        IntType::I16 => data.iter().flat_map(|&v| (v as i16).to_le_bytes()).collect(),
        IntType::I32 => data.iter().flat_map(|&v| v.to_le_bytes()).collect(),
    }
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
        let bytes = le_bytes(IntType::I32, values);
        self.new_tensor(name, &[values.len()], tfl::TensorType::INT32, None, Some(bytes))
    }

    /// The file tensor of a program tensor in NHWC (constants permuted likewise).
    fn tensor(&mut self, t: usize) -> i32 {
        if let Some(i) = self.map[t] {
            return i;
        }
        let it: &ITensor = &self.p.tensors[t];
        let shape = nhwc(&it.shape);
        let data = it.data.as_ref().map(|d| {
            let d = if it.shape.len() == 4 {
                transpose(d, &it.shape, &NCHW_TO_NHWC)
            } else {
                d.clone()
            };
            le_bytes(it.q.ty, &d)
        });
        let dim = it.q.axis.map_or(0, |a| a as i32);
        let i = self.new_tensor(it.name.clone(), &shape, ttype(it.q.ty), Some(quant(&it.q, dim)), data);
        self.map[t] = Some(i);
        i
    }

    /// A constant operand broadcast against a rank-4 output: padded with leading 1s to
    /// rank 4, then NHWC.
    fn operand(&mut self, t: usize, out_rank: usize) -> i32 {
        let it = &self.p.tensors[t];
        if it.data.is_none() || it.shape.len() >= out_rank || out_rank != 4 {
            return self.tensor(t);
        }
        let mut shape = vec![1usize; 4 - it.shape.len()];
        shape.extend(&it.shape);
        let data = transpose(it.data.as_deref().unwrap_or(&[]), &shape, &NCHW_TO_NHWC);
        let bytes = le_bytes(it.q.ty, &data);
        let q = quant(&it.q, 0);
        self.new_tensor(it.name.clone(), &nhwc(&shape), ttype(it.q.ty), Some(q), Some(bytes))
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
        self.new_tensor(name, shape, ttype(q.ty), Some(quant(q, 0)), None)
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
            Some(le_bytes(
                IntType::I32,
                &[0, 0, t as i32, b as i32, l as i32, r as i32, 0, 0],
            )),
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
                    Some(quant(q, 0)),
                    Some(le_bytes(q.ty, &[v])),
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

    fn transpose_op(&mut self, x: i32, perm: &[usize], name: String, shape: &[usize], q: &QParams) -> i32 {
        let p: Vec<i32> = perm.iter().map(|&v| v as i32).collect();
        let pt = self.int32_const(format!("{name}:perm"), &p);
        let y = self.hidden(name, shape, q);
        self.emit(
            tfl::BuiltinOperator::TRANSPOSE,
            2,
            vec![x, pt],
            vec![y],
            tfl::BuiltinOptionsT::TransposeOptions(Box::default()),
        );
        y
    }

    fn lower(&mut self, op: &IOp) -> Result<(), String> {
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
                let mut x = self.tensor(op.inputs[0]);
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
                    tfl::TensorType::INT8,
                    Some(quant(&wt.q, dim)),
                    Some(le_bytes(IntType::I8, &wdata)),
                );
                let b = self.tensor(op.inputs[2]);
                let y = self.tensor(op.outputs[0]);
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
            }
            OpKind::TransposeConv { strides, act } => {
                let x = self.tensor(op.inputs[0]);
                let w = self.tensor(op.inputs[1]);
                let b = self.tensor(op.inputs[2]);
                let y = self.tensor(op.outputs[0]);
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
            }
            OpKind::ResizeNearest => {
                let x = self.tensor(op.inputs[0]);
                let y = self.tensor(op.outputs[0]);
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
            }
            OpKind::FullyConnected { act } => {
                if xt.shape.len() == 4 {
                    return Err("a fully connected layer on a rank-4 tensor is not written yet".into());
                }
                let x = self.tensor(op.inputs[0]);
                let w = self.tensor(op.inputs[1]);
                let b = self.tensor(op.inputs[2]);
                let y = self.tensor(op.outputs[0]);
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
            }
            OpKind::Add { act } | OpKind::Sub { act } | OpKind::Mul { act } => {
                let rank = yt.shape.len();
                for &k in &op.inputs {
                    let t = &p.tensors[k];
                    if t.data.is_none() && t.shape.len() != rank {
                        return Err("an element-wise op on activations of different ranks is not written yet".into());
                    }
                }
                let a = self.operand(op.inputs[0], rank);
                let b = self.operand(op.inputs[1], rank);
                let y = self.tensor(op.outputs[0]);
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
            }
            OpKind::Mean { axes } => {
                let rank = xt.shape.len();
                let mut ax: Vec<i32> = axes
                    .iter()
                    .map(|&a| if rank == 4 { NHWC_TO_NCHW[a] as i32 } else { a as i32 })
                    .collect();
                ax.sort_unstable();
                let keep = yt.shape.len() == rank;
                if !keep && rank == 4 {
                    return Err("a mean that drops image axes is not written yet".into());
                }
                let x = self.tensor(op.inputs[0]);
                let a = self.int32_const(format!("{}:axes", yt.name), &ax);
                let y = self.tensor(op.outputs[0]);
                self.emit(
                    tfl::BuiltinOperator::MEAN,
                    2,
                    vec![x, a],
                    vec![y],
                    tfl::BuiltinOptionsT::ReducerOptions(Box::new(tfl::ReducerOptionsT { keep_dims: keep })),
                );
            }
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
                let mut x = self.tensor(op.inputs[0]);
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
                let y = self.tensor(op.outputs[0]);
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
            }
            OpKind::HardSwish | OpKind::Logistic | OpKind::Tanh => {
                let x = self.tensor(op.inputs[0]);
                let y = self.tensor(op.outputs[0]);
                let (code, version, opts) = match op.kind {
                    OpKind::HardSwish => (
                        tfl::BuiltinOperator::HARD_SWISH,
                        1,
                        tfl::BuiltinOptionsT::HardSwishOptions(Box::default()),
                    ),
                    OpKind::Logistic => (tfl::BuiltinOperator::LOGISTIC, 2, tfl::BuiltinOptionsT::NONE),
                    _ => (tfl::BuiltinOperator::TANH, 2, tfl::BuiltinOptionsT::NONE),
                };
                self.emit(code, version, vec![x], vec![y], opts);
            }
            OpKind::Softmax { beta } => {
                if xt.shape.len() == 4 {
                    return Err("a softmax over an image's last (width) axis is not written yet".into());
                }
                let x = self.tensor(op.inputs[0]);
                let y = self.tensor(op.outputs[0]);
                self.emit(
                    tfl::BuiltinOperator::SOFTMAX,
                    2,
                    vec![x],
                    vec![y],
                    tfl::BuiltinOptionsT::SoftmaxOptions(Box::new(tfl::SoftmaxOptionsT { beta: *beta })),
                );
            }
            OpKind::Reshape => {
                let mut x = self.tensor(op.inputs[0]);
                if xt.shape.len() == 4 && !trivial_perm(&nhwc(&xt.shape), &NHWC_TO_NCHW) {
                    x = self.transpose_op(x, &NHWC_TO_NCHW, format!("{}:nchw", xt.name), &xt.shape, &xt.q);
                }
                let y = self.tensor(op.outputs[0]);
                let direct = yt.shape.len() != 4 || trivial_perm(&yt.shape, &NCHW_TO_NHWC);
                let target: Vec<usize> = if direct { nhwc(&yt.shape) } else { yt.shape.clone() };
                let shape: Vec<i32> = target.iter().map(|&d| d as i32).collect();
                let st = self.int32_const(format!("{}:shape", yt.name), &shape);
                let r = if direct {
                    y
                } else {
                    self.hidden(format!("{}:nchw", yt.name), &yt.shape, &yt.q)
                };
                self.emit(
                    tfl::BuiltinOperator::RESHAPE,
                    1,
                    vec![x, st],
                    vec![r],
                    tfl::BuiltinOptionsT::ReshapeOptions(Box::new(tfl::ReshapeOptionsT { new_shape: Some(shape) })),
                );
                if !direct {
                    let pt = self.int32_const(format!("{}:perm", yt.name), &[0, 2, 3, 1]);
                    self.emit(
                        tfl::BuiltinOperator::TRANSPOSE,
                        2,
                        vec![r, pt],
                        vec![y],
                        tfl::BuiltinOptionsT::TransposeOptions(Box::default()),
                    );
                }
            }
            OpKind::Transpose { perm } => {
                let rank = perm.len();
                let inv_in: Vec<usize> = if xt.shape.len() == 4 {
                    NHWC_TO_NCHW.to_vec()
                } else {
                    (0..rank).collect()
                };
                let fwd_out: Vec<usize> = if yt.shape.len() == 4 {
                    NCHW_TO_NHWC.to_vec()
                } else {
                    (0..rank).collect()
                };
                let q: Vec<i32> = (0..rank).map(|i| inv_in[perm[fwd_out[i]]] as i32).collect();
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
                let a = if yt.shape.len() == 4 {
                    NHWC_TO_NCHW[*axis]
                } else {
                    *axis
                };
                let ins: Vec<i32> = op.inputs.iter().map(|&k| self.tensor(k)).collect();
                let y = self.tensor(op.outputs[0]);
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
            }
            OpKind::Requantize => {
                let x = self.tensor(op.inputs[0]);
                let y = self.tensor(op.outputs[0]);
                self.emit(
                    tfl::BuiltinOperator::QUANTIZE,
                    2,
                    vec![x],
                    vec![y],
                    tfl::BuiltinOptionsT::QuantizeOptions(Box::default()),
                );
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
    };
    let mut inputs = Vec::new();
    let mut written_inputs = Vec::new();
    for &t in &p.inputs {
        let it = &p.tensors[t];
        let shape = nhwc(&it.shape);
        written_inputs.push((it.name.clone(), shape.clone()));
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
            let f = w.new_tensor(it.name.clone(), &nhwc(&it.shape), tfl::TensorType::FLOAT32, None, None);
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
        float_nodes: Vec::new(),
        inputs: written_inputs,
    })
}
