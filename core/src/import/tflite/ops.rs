//! TFLite operators as IR nodes (ONNX semantics, opset 18).

use super::{Builder, Layout, Quant, TO_NCHW, TO_NHWC, attrs, builtin, same_pad};
use crate::ir::{Attr, DType, Tensor, ValueId};
use fb::BuiltinOperator as B;
use std::collections::BTreeMap;
use tflite_schema as fb;

/// Why an operator was not converted.
pub(crate) enum OpError {
    /// An op (or an option of it) the importer has no form for: listed with the others.
    Unsupported(String),
    /// The file is inconsistent.
    Invalid(String),
}

type R<T> = Result<T, OpError>;

fn invalid<T>(msg: impl Into<String>) -> R<T> {
    Err(OpError::Invalid(msg.into()))
}

fn unsupported<T>(msg: impl Into<String>) -> R<T> {
    Err(OpError::Unsupported(msg.into()))
}

/// Where an NHWC axis lands in NCHW.
const NHWC_AXIS_IN_NCHW: [usize; 4] = [0, 2, 3, 1];

fn transpose_tensor(t: &Tensor, perm: &[usize]) -> R<Tensor> {
    macro_rules! tr {
        ($a:expr) => {
            $a.view()
                .permuted_axes(perm.to_vec())
                .as_standard_layout()
                .into_owned()
        };
    }
    Ok(match t {
        Tensor::F32(a) => Tensor::F32(tr!(a)),
        Tensor::F16(a) => Tensor::F16(tr!(a)),
        Tensor::I8(a) => Tensor::I8(tr!(a)),
        Tensor::U8(a) => Tensor::U8(tr!(a)),
        Tensor::I16(a) => Tensor::I16(tr!(a)),
        Tensor::I32(a) => Tensor::I32(tr!(a)),
        Tensor::I64(a) => Tensor::I64(tr!(a)),
        Tensor::Bool(a) => Tensor::Bool(tr!(a)),
        other => return unsupported(format!("a {} constant in another layout", other.dtype())),
    })
}

/// A fused activation: the op, and the bounds of a Clip.
type Activation = Option<(&'static str, Option<(f32, f32)>)>;

fn act_of(f: fb::ActivationFunctionType) -> R<Activation> {
    Ok(match f {
        fb::ActivationFunctionType::NONE => None,
        fb::ActivationFunctionType::RELU => Some(("Relu", None)),
        fb::ActivationFunctionType::RELU6 => Some(("Clip", Some((0.0, 6.0)))),
        fb::ActivationFunctionType::RELU_N1_TO_1 => Some(("Clip", Some((-1.0, 1.0)))),
        fb::ActivationFunctionType::TANH => Some(("Tanh", None)),
        other => return unsupported(format!("fused activation {}", other.variant_name().unwrap_or("?"))),
    })
}

impl Builder<'_> {
    /// The NHWC (file layout) form of a tensor, made on first use.
    pub(crate) fn nhwc(&mut self, t: usize) -> R<ValueId> {
        if let Some(v) = self.forms[t].nhwc {
            return Ok(v);
        }
        if self.is_const(t) {
            let data = self.const_value(t)?;
            let v = self.constant(self.name_of(t), &data);
            self.forms[t].nhwc = Some(v);
            return Ok(v);
        }
        let Some(src) = self.forms[t].nchw else {
            return invalid(format!("tensor '{}' is read before it is computed", self.name_of(t)));
        };
        let v = self.transpose(src, &TO_NHWC, format!("{}:nhwc", self.name_of(t)));
        self.forms[t].nhwc = Some(v);
        Ok(v)
    }

    /// A Transpose node of `src` by `perm`, its output named `out`.
    fn transpose(&mut self, src: ValueId, perm: &[usize], out: String) -> ValueId {
        let dt = self.g.values[src].dtype;
        let perm = Attr::Ints(perm.iter().map(|&p| p as i64).collect());
        self.node1("Transpose", out, dt, vec![Some(src)], attrs(vec![("perm", perm)]))
    }

    /// The NCHW form of a rank-4 tensor, made on first use.
    pub(crate) fn nchw(&mut self, t: usize) -> R<ValueId> {
        if let Some(v) = self.forms[t].nchw {
            return Ok(v);
        }
        if self.rank(t) != 4 {
            return invalid(format!("tensor '{}' must have rank 4", self.name_of(t)));
        }
        if self.is_const(t) {
            let data = transpose_tensor(&self.const_value(t)?, &TO_NCHW)?;
            let v = self.constant(format!("{}:nchw", self.name_of(t)), &data);
            self.forms[t].nchw = Some(v);
            return Ok(v);
        }
        let src = self.nhwc(t)?;
        let v = self.transpose(src, &TO_NCHW, format!("{}:nchw", self.name_of(t)));
        self.forms[t].nchw = Some(v);
        Ok(v)
    }

    /// A constant operand of an element-wise op in NCHW: broadcast to rank 4 as NHWC
    /// broadcasting would, then transposed.
    fn const_nchw_bcast(&mut self, t: usize) -> R<ValueId> {
        if self.rank(t) == 4 {
            return self.nchw(t);
        }
        let data = self.const_value(t)?;
        let mut shape = vec![1usize; 4 - data.shape().len()];
        shape.extend_from_slice(data.shape());
        let r = data
            .reshaped(&shape)
            .ok_or_else(|| OpError::Invalid(format!("tensor '{}': cannot broadcast", self.name_of(t))))?;
        let data = transpose_tensor(&r, &TO_NCHW)?;
        Ok(self.constant(format!("{}:nchw", self.name_of(t)), &data))
    }

    pub(crate) fn quantize_linear(&mut self, x: ValueId, q: &Quant, out: &str) -> ValueId {
        let (scale, zp) = self.qparams(q, out);
        let dt = self.g.values[zp].dtype;
        self.node1(
            "QuantizeLinear",
            out.to_owned(),
            dt,
            vec![Some(x), Some(scale), Some(zp)],
            BTreeMap::new(),
        )
    }

    pub(crate) fn dequantize_linear(&mut self, x: ValueId, q: &Quant, out: String) -> ValueId {
        let (scale, zp) = self.qparams(q, &out);
        self.node1(
            "DequantizeLinear",
            out,
            Some(DType::F32),
            vec![Some(x), Some(scale), Some(zp)],
            BTreeMap::new(),
        )
    }

    /// Per-tensor scale and zero point constants for an activation's grid.
    fn qparams(&mut self, q: &Quant, base: &str) -> (ValueId, ValueId) {
        let scale = self.const_f32_scalar(format!("{base}:scale"), q.scale[0]);
        let zp0 = q.zero_point[0];
        let zp_t = match q.zp_dtype {
            DType::U8 => Tensor::U8(ndarray::arr0(zp0 as u8).into_dyn()),
            DType::I16 => Tensor::I16(ndarray::arr0(zp0 as i16).into_dyn()),
            _ => Tensor::I8(ndarray::arr0(zp0 as i8).into_dyn()),
        };
        let zp = self.constant(format!("{base}:zero_point"), &zp_t);
        (scale, zp)
    }

    /// The name an op's result gets: the file's name, or `name:f` before a quantizer.
    fn out_name(&self, t: usize) -> String {
        if self.quant_float(t).is_some() {
            format!("{}:f", self.name_of(t))
        } else {
            self.name_of(t)
        }
    }

    /// Records `v` as tensor `t` in `layout`, after the file's quantizer if it has one.
    fn finish(&mut self, t: usize, v: ValueId, layout: Layout) {
        let v = if let Some(q) = self.quant_float(t) {
            let name = self.name_of(t);
            let codes = self.quantize_linear(v, &q, &format!("{name}:q"));
            self.dequantize_linear(codes, &q, name)
        } else {
            v
        };
        match layout {
            Layout::Nhwc => self.forms[t].nhwc = Some(v),
            Layout::Nchw => self.forms[t].nchw = Some(v),
        }
    }

    /// Emits `op` with one output per file tensor in `outs` (NHWC, each after the file's
    /// quantizer if it has one).
    fn emit_multi(
        &mut self,
        op: &str,
        inputs: Vec<Option<ValueId>>,
        attrs_: BTreeMap<String, Attr>,
        outs: &[i32],
    ) -> R<()> {
        let mut vs = Vec::new();
        for k in 0..outs.len() {
            let t = req(outs, k)?;
            let v = self.fresh_value(self.out_name(t), self.out_dtype(t));
            vs.push((t, v));
        }
        let name = self.g.values[vs[0].1].name.clone();
        self.add_node(op, &name, inputs, vs.iter().map(|&(_, v)| v).collect(), attrs_);
        for (t, v) in vs {
            self.finish(t, v, Layout::Nhwc);
        }
        Ok(())
    }

    /// Emits `op`, then the fused activation, as tensor `t`.
    fn emit(
        &mut self,
        op: &str,
        inputs: Vec<Option<ValueId>>,
        attrs_: BTreeMap<String, Attr>,
        t: usize,
        layout: Layout,
        act: fb::ActivationFunctionType,
    ) -> R<ValueId> {
        let act = act_of(act)?;
        let name = self.out_name(t);
        let dt = self.out_dtype(t);
        let v = match act {
            None => self.node1(op, name, dt, inputs, attrs_),
            Some((a, clip)) => {
                let pre = self.node1(op, format!("{name}:pre"), dt, inputs, attrs_);
                let mut ins = vec![Some(pre)];
                if let Some((lo, hi)) = clip {
                    let lo = self.const_f32_scalar(format!("{name}:min"), lo);
                    let hi = self.const_f32_scalar(format!("{name}:max"), hi);
                    ins.extend([Some(lo), Some(hi)]);
                }
                self.node1(a, name, dt, ins, BTreeMap::new())
            }
        };
        self.finish(t, v, layout);
        Ok(v)
    }

    /// The dtype the graph computes a tensor in (quantized tensors as float32).
    fn out_dtype(&self, t: usize) -> Option<DType> {
        if self.quant_float(t).is_some() {
            Some(DType::F32)
        } else {
            self.dtype_of(t)
        }
    }

    /// The layout an element-wise op runs in: NCHW when its output is rank 4, every
    /// computed input is rank 4, and one of them already exists in NCHW.
    fn elementwise_layout(&self, ins: &[usize], out: usize) -> Layout {
        if self.rank(out) != 4 {
            return Layout::Nhwc;
        }
        let computed: Vec<usize> = ins.iter().copied().filter(|&t| !self.is_const(t)).collect();
        let ok = !computed.is_empty()
            && computed.iter().all(|&t| self.rank(t) == 4)
            && ins.iter().all(|&t| self.rank(t) <= 4)
            && computed.iter().any(|&t| self.forms[t].nchw.is_some());
        if ok { Layout::Nchw } else { Layout::Nhwc }
    }

    /// An input in the given layout (constants broadcast for element-wise use).
    fn input_in(&mut self, t: usize, layout: Layout) -> R<ValueId> {
        match layout {
            Layout::Nhwc => self.nhwc(t),
            Layout::Nchw if self.is_const(t) => self.const_nchw_bcast(t),
            Layout::Nchw => self.nchw(t),
        }
    }

    /// A float constant for a weight: dequantized, fp16 widened, permuted.
    fn weight(&mut self, t: usize, perm: &[usize], suffix: &str) -> R<ValueId> {
        if !self.is_const(t) {
            let src = self.nhwc(t)?;
            return Ok(self.transpose(src, perm, format!("{}:{suffix}", self.name_of(t))));
        }
        let data = self.const_value(t)?;
        if data.shape().len() != perm.len() {
            return invalid(format!("weights '{}' must have rank {}", self.name_of(t), perm.len()));
        }
        let data = if data.dtype() == DType::F16 {
            self.fp16_weights = true;
            Tensor::F32(data.to_f32())
        } else {
            data
        };
        let data = transpose_tensor(&data, perm)?;
        Ok(self.constant(self.name_of(t), &data))
    }
}

fn opt(ins: &[i32], k: usize) -> Option<usize> {
    ins.get(k).and_then(|&t| usize::try_from(t).ok())
}

fn req(ins: &[i32], k: usize) -> R<usize> {
    opt(ins, k).map_or_else(|| invalid(format!("input {k} is missing")), Ok)
}

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

/// Converts one operator.
#[expect(clippy::too_many_lines, reason = "one arm per operator reads as a table")]
pub(crate) fn convert(b: &mut Builder<'_>, _k: usize, op: &fb::OperatorT, code: &fb::OperatorCodeT) -> R<()> {
    let ins: &[i32] = op.inputs.as_deref().unwrap_or_default();
    let outs: &[i32] = op.outputs.as_deref().unwrap_or_default();
    let o = req(outs, 0)?;
    let opts = &op.builtin_options;
    let none = fb::ActivationFunctionType::NONE;
    let code = builtin(code);
    match code {
        B::IF => {
            let Some(io) = opts.as_if_options() else {
                return invalid("no IfOptions");
            };
            let c = req(ins, 0)?;
            let cv = b.input_in(c, Layout::Nhwc)?;
            let mut names = Vec::new();
            for k in 1..ins.len() {
                let v = b.input_in(req(ins, k)?, Layout::Nhwc)?;
                names.push(b.g.values[v].name.clone());
            }
            // ONNX branches take no inputs: they read the IF's operands by name.
            let mut then_g = b.subgraph_graph(io.then_subgraph_index as usize, names.clone())?;
            let mut else_g = b.subgraph_graph(io.else_subgraph_index as usize, names)?;
            super::capture_inputs(&mut then_g);
            super::capture_inputs(&mut else_g);
            if then_g.outputs.len() != outs.len() || else_g.outputs.len() != outs.len() {
                return invalid(format!(
                    "branches give {} and {} outputs for {}",
                    then_g.outputs.len(),
                    else_g.outputs.len(),
                    outs.len()
                ));
            }
            let attrs_ = attrs(vec![
                ("then_branch", Attr::Graph(Box::new(then_g))),
                ("else_branch", Attr::Graph(Box::new(else_g))),
            ]);
            b.emit_multi("If", vec![Some(cv)], attrs_, outs)?;
        }
        B::WHILE => {
            let Some(wo) = opts.as_while_options() else {
                return invalid("no WhileOptions");
            };
            let (cond, body) = (wo.cond_subgraph_index as usize, wo.body_subgraph_index as usize);
            if ins.len() != outs.len() {
                return invalid(format!("{} inputs for {} outputs", ins.len(), outs.len()));
            }
            let base = b.out_name(o);
            let mut args = Vec::new();
            let mut names = Vec::new();
            for k in 0..ins.len() {
                let v = b.input_in(req(ins, k)?, Layout::Nhwc)?;
                names.push(b.g.values[v].name.clone());
                args.push(Some(v));
            }
            // The condition on the inputs: an If on `true` whose branch is the condition
            // subgraph, reading the inputs by name.
            let mut first = b.subgraph_graph(cond, names)?;
            super::capture_inputs(&mut first);
            let yes = b.constant(format!("{base}:true"), &Tensor::Bool(ndarray::arr0(true).into_dyn()));
            let cond0 = b.fresh_value(format!("{base}:cond"), Some(DType::Bool));
            let call = super::call(first);
            let name = b.g.values[cond0].name.clone();
            b.add_node("If", &name, vec![Some(yes)], vec![cond0], call);
            // The Loop body: (iteration, condition, values) → (the condition on the new
            // values, the new values).
            let carried: Vec<String> = (0..ins.len()).map(|k| format!("{base}:v{k}")).collect();
            let mut g = b.subgraph_graph(body, carried)?;
            if g.outputs.len() != ins.len() {
                return invalid(format!("the body gives {} values for {}", g.outputs.len(), ins.len()));
            }
            let new_names: Vec<String> = g.outputs.iter().map(|&v| g.values[v].name.clone()).collect();
            let mut next = b.subgraph_graph(cond, new_names)?;
            super::capture_inputs(&mut next);
            super::loop_body(&mut g, &base, next);
            let mut inputs = vec![None, Some(cond0)];
            inputs.extend(args);
            b.emit_multi("Loop", inputs, attrs(vec![("body", Attr::Graph(Box::new(g)))]), outs)?;
        }
        B::DEQUANTIZE => {
            let x = req(ins, 0)?;
            if b.is_const(x) {
                let raw = b.const_tensor(x)?;
                let data = if let Some(q) = super::quant_of(&b.tensors[x]) {
                    super::dequantize(&raw, &q, &b.name_of(x))?
                } else {
                    if raw.dtype() == DType::F16 {
                        b.fp16_weights = true;
                    }
                    Tensor::F32(raw.to_f32())
                };
                // The dequantized weights stand for the output tensor itself.
                let v = b.constant(b.name_of(o), &data);
                b.forms[o].nhwc = Some(v);
                return Ok(());
            }
            let layout = if b.forms[x].nchw.is_some() {
                Layout::Nchw
            } else {
                Layout::Nhwc
            };
            let xv = b.input_in(x, layout)?;
            let v = if b.quant_float(x).is_some() {
                // The graph already computes this tensor as its dequantized values (its
                // producer ends in a QuantizeLinear/DequantizeLinear pair).
                b.node1(
                    "Identity",
                    b.name_of(o),
                    Some(DType::F32),
                    vec![Some(xv)],
                    BTreeMap::new(),
                )
            } else if let Some(q) = super::quant_of(&b.tensors[x]) {
                let mut q = q;
                q.zp_dtype = b.dtype_of(x).unwrap_or(DType::I8);
                b.dequantize_linear(xv, &q, b.name_of(o))
            } else {
                b.node1(
                    "Cast",
                    b.name_of(o),
                    Some(DType::F32),
                    vec![Some(xv)],
                    attrs(vec![("to", Attr::Int(1))]),
                )
            };
            match layout {
                Layout::Nhwc => b.forms[o].nhwc = Some(v),
                Layout::Nchw => b.forms[o].nchw = Some(v),
            }
        }
        B::QUANTIZE => {
            // float → int: the output's grid is applied by `finish`; int → int requantizes.
            let x = req(ins, 0)?;
            let layout = if b.rank(x) == 4 && b.forms[x].nchw.is_some() {
                Layout::Nchw
            } else {
                Layout::Nhwc
            };
            let xv = b.input_in(x, layout)?;
            b.emit("Identity", vec![Some(xv)], BTreeMap::new(), o, layout, none)?;
        }
        B::CONV_2D | B::DEPTHWISE_CONV_2D => {
            let (x, w) = (req(ins, 0)?, req(ins, 1)?);
            let bias = opt(ins, 2);
            let xs = b.shape(x);
            let ws = b.shape(w);
            if xs.len() != 4 || ws.len() != 4 {
                return invalid("convolution input and weights must have rank 4");
            }
            let (pad, sh, sw, dh, dw, act, depthwise) = if code == B::CONV_2D {
                let Some(c) = opts.as_conv_2_doptions() else {
                    return invalid("no Conv2DOptions");
                };
                (
                    c.padding,
                    c.stride_h,
                    c.stride_w,
                    c.dilation_h_factor,
                    c.dilation_w_factor,
                    c.fused_activation_function,
                    false,
                )
            } else {
                let Some(c) = opts.as_depthwise_conv_2_doptions() else {
                    return invalid("no DepthwiseConv2DOptions");
                };
                (
                    c.padding,
                    c.stride_h,
                    c.stride_w,
                    c.dilation_h_factor,
                    c.dilation_w_factor,
                    c.fused_activation_function,
                    true,
                )
            };
            let [sh, sw, dh, dw] = [sh, sw, dh, dw].map(|v| usize::try_from(v).unwrap_or(1).max(1));
            let (kh, kw) = (ws[1], ws[2]);
            let (cin, cout) = (xs[3], ws[if depthwise { 3 } else { 0 }]);
            let groups = if depthwise {
                cin
            } else {
                let wi = ws[3].max(1);
                if cin % wi != 0 {
                    return invalid(format!("{cin} input channels, weights for {wi}"));
                }
                cin / wi
            };
            if depthwise && (cin == 0 || cout % cin != 0) {
                return invalid(format!("depthwise weights with {cout} channels for {cin} inputs"));
            }
            let xv = b.nchw(x)?;
            let wv = b.weight(w, if depthwise { &[3, 0, 1, 2] } else { &TO_NCHW }, "oihw")?;
            let bv = match bias {
                Some(t) => Some(b.nhwc(t)?),
                None => None,
            };
            let mut a = vec![
                ("kernel_shape", ints(&[kh as i64, kw as i64])),
                ("strides", ints(&[sh as i64, sw as i64])),
                ("dilations", ints(&[dh as i64, dw as i64])),
                ("group", Attr::Int(groups as i64)),
            ];
            if pad == fb::Padding::SAME && (b.dynamic_dim(x, 1) || b.dynamic_dim(x, 2)) {
                a.push(("auto_pad", Attr::String("SAME_UPPER".into())));
            } else {
                let (t0, b0) = same_pad(pad, xs[1], kh, sh, dh);
                let (l0, r0) = same_pad(pad, xs[2], kw, sw, dw);
                a.push(("pads", ints(&[t0 as i64, l0 as i64, b0 as i64, r0 as i64])));
            }
            b.emit("Conv", vec![Some(xv), Some(wv), bv], attrs(a), o, Layout::Nchw, act)?;
        }
        B::TRANSPOSE_CONV => {
            let (shape_t, w, x) = (req(ins, 0)?, req(ins, 1)?, req(ins, 2)?);
            let bias = opt(ins, 3);
            let Some(c) = opts.as_transpose_conv_options() else {
                return invalid("no TransposeConvOptions");
            };
            let out_shape = b.const_ints(shape_t)?;
            let (xs, ws) = (b.shape(x), b.shape(w));
            if xs.len() != 4 || ws.len() != 4 || out_shape.len() != 4 {
                return invalid("transposed convolution tensors must have rank 4");
            }
            let [sh, sw] = [c.stride_h, c.stride_w].map(|v| usize::try_from(v).unwrap_or(1).max(1) as i64);
            let (kh, kw) = (ws[1] as i64, ws[2] as i64);
            let mut pads = [0i64; 4];
            let mut extra = [0i64; 2];
            for (i, (inp, k, s, out)) in [
                (xs[1] as i64, kh, sh, out_shape[1]),
                (xs[2] as i64, kw, sw, out_shape[2]),
            ]
            .into_iter()
            .enumerate()
            {
                let total = (inp - 1) * s + k - out;
                if c.padding == fb::Padding::SAME && total > 0 {
                    pads[i] = total / 2;
                    pads[i + 2] = total - total / 2;
                } else if total < 0 {
                    extra[i] = -total;
                } else if total > 0 {
                    pads[i + 2] = total;
                }
            }
            let xv = b.nchw(x)?;
            let wv = b.weight(w, &[3, 0, 1, 2], "iohw")?;
            let bv = match bias {
                Some(t) => Some(b.nhwc(t)?),
                None => None,
            };
            let mut a = vec![
                ("kernel_shape", ints(&[kh, kw])),
                ("strides", ints(&[sh, sw])),
                ("pads", ints(&pads)),
            ];
            if extra != [0, 0] {
                a.push(("output_padding", ints(&extra)));
            }
            b.emit(
                "ConvTranspose",
                vec![Some(xv), Some(wv), bv],
                attrs(a),
                o,
                Layout::Nchw,
                c.fused_activation_function,
            )?;
        }
        B::MAX_POOL_2D | B::AVERAGE_POOL_2D => {
            let x = req(ins, 0)?;
            let Some(p) = opts.as_pool_2_doptions() else {
                return invalid("no Pool2DOptions");
            };
            let xs = b.shape(x);
            if xs.len() != 4 {
                return invalid("pooling input must have rank 4");
            }
            let [sh, sw, kh, kw] = [p.stride_h, p.stride_w, p.filter_height, p.filter_width]
                .map(|v| usize::try_from(v).unwrap_or(1).max(1));
            let (t0, b0) = same_pad(p.padding, xs[1], kh, sh, 1);
            let (l0, r0) = same_pad(p.padding, xs[2], kw, sw, 1);
            let xv = b.nchw(x)?;
            let mut a = vec![
                ("kernel_shape", ints(&[kh as i64, kw as i64])),
                ("strides", ints(&[sh as i64, sw as i64])),
                ("pads", ints(&[t0 as i64, l0 as i64, b0 as i64, r0 as i64])),
            ];
            let onnx = if code == B::MAX_POOL_2D {
                "MaxPool"
            } else {
                a.push(("count_include_pad", Attr::Int(0)));
                "AveragePool"
            };
            b.emit(
                onnx,
                vec![Some(xv)],
                attrs(a),
                o,
                Layout::Nchw,
                p.fused_activation_function,
            )?;
        }
        B::FULLY_CONNECTED => {
            let (x, w) = (req(ins, 0)?, req(ins, 1)?);
            let bias = opt(ins, 2);
            let Some(c) = opts.as_fully_connected_options() else {
                return invalid("no FullyConnectedOptions");
            };
            if c.weights_format != fb::FullyConnectedOptionsWeightsFormat::DEFAULT {
                return unsupported("shuffled weights");
            }
            let ws = b.shape(w);
            if ws.len() != 2 {
                return invalid("fully-connected weights must have rank 2");
            }
            let (n, k) = (ws[0] as i64, ws[1] as i64);
            let xv = b.nhwc(x)?;
            let name = b.name_of(o);
            let x2 = if b.rank(x) == 2 {
                xv
            } else {
                let s = b.const_i64(format!("{name}:flat_shape"), &[-1, k]);
                b.node1(
                    "Reshape",
                    format!("{name}:flat"),
                    Some(DType::F32),
                    vec![Some(xv), Some(s)],
                    BTreeMap::new(),
                )
            };
            let wv = b.weight(w, &[0, 1], "w")?;
            let bv = match bias {
                Some(t) => Some(b.nhwc(t)?),
                None => None,
            };
            let keep = c.keep_num_dims && b.rank(x) != 2;
            if keep {
                let mut shape: Vec<i64> = b.shape(o).iter().map(|&d| d as i64).collect();
                if let Some(l) = shape.last_mut() {
                    *l = n;
                }
                shape[0] = -1;
                let g = b.node1(
                    "Gemm",
                    format!("{}:2d", b.out_name(o)),
                    Some(DType::F32),
                    vec![Some(x2), Some(wv), bv],
                    attrs(vec![("transB", Attr::Int(1))]),
                );
                let s = b.const_i64(format!("{name}:shape"), &shape);
                b.emit(
                    "Reshape",
                    vec![Some(g), Some(s)],
                    BTreeMap::new(),
                    o,
                    Layout::Nhwc,
                    c.fused_activation_function,
                )?;
            } else {
                b.emit(
                    "Gemm",
                    vec![Some(x2), Some(wv), bv],
                    attrs(vec![("transB", Attr::Int(1))]),
                    o,
                    Layout::Nhwc,
                    c.fused_activation_function,
                )?;
            }
        }
        B::ADD
        | B::SUB
        | B::MUL
        | B::DIV
        | B::MAXIMUM
        | B::MINIMUM
        | B::POW
        | B::SQUARED_DIFFERENCE
        | B::PRELU
        | B::EQUAL
        | B::NOT_EQUAL
        | B::LESS
        | B::LESS_EQUAL
        | B::GREATER
        | B::GREATER_EQUAL
        | B::LOGICAL_AND
        | B::LOGICAL_OR
        | B::FLOOR_DIV
        | B::FLOOR_MOD => {
            let (x, y) = (req(ins, 0)?, req(ins, 1)?);
            let act = match code {
                B::ADD => opts.as_add_options().map_or(none, |a| a.fused_activation_function),
                B::SUB => opts.as_sub_options().map_or(none, |a| a.fused_activation_function),
                B::MUL => opts.as_mul_options().map_or(none, |a| a.fused_activation_function),
                B::DIV => opts.as_div_options().map_or(none, |a| a.fused_activation_function),
                _ => none,
            };
            let layout = b.elementwise_layout(&[x, y], o);
            let xv = b.input_in(x, layout)?;
            let yv = b.input_in(y, layout)?;
            let onnx = match code {
                B::ADD => "Add",
                B::SUB | B::SQUARED_DIFFERENCE => "Sub",
                B::MUL => "Mul",
                B::DIV | B::FLOOR_DIV => "Div",
                B::MAXIMUM => "Max",
                B::MINIMUM => "Min",
                B::POW => "Pow",
                B::PRELU => "PRelu",
                B::EQUAL | B::NOT_EQUAL => "Equal",
                B::LESS => "Less",
                B::LESS_EQUAL => "LessOrEqual",
                B::GREATER => "Greater",
                B::GREATER_EQUAL => "GreaterOrEqual",
                B::LOGICAL_AND => "And",
                B::LOGICAL_OR => "Or",
                _ => "Mod",
            };
            match code {
                B::SQUARED_DIFFERENCE | B::NOT_EQUAL | B::FLOOR_DIV => {
                    let name = b.out_name(o);
                    let dt = if code == B::SQUARED_DIFFERENCE {
                        Some(DType::F32)
                    } else {
                        b.dtype_of(x)
                    };
                    let dt = if code == B::NOT_EQUAL { Some(DType::Bool) } else { dt };
                    let d = b.node1(
                        onnx,
                        format!("{name}:pre"),
                        dt,
                        vec![Some(xv), Some(yv)],
                        BTreeMap::new(),
                    );
                    let (op2, ins2) = match code {
                        B::SQUARED_DIFFERENCE => ("Mul", vec![Some(d), Some(d)]),
                        B::NOT_EQUAL => ("Not", vec![Some(d)]),
                        _ => ("Floor", vec![Some(d)]),
                    };
                    if code == B::FLOOR_DIV && !matches!(b.dtype_of(o), Some(DType::F32)) {
                        return unsupported("integer FLOOR_DIV");
                    }
                    b.emit(op2, ins2, BTreeMap::new(), o, layout, none)?;
                }
                B::FLOOR_MOD => {
                    let fmod = i64::from(matches!(b.dtype_of(o), Some(DType::F32)));
                    if fmod == 1 {
                        return unsupported("float FLOOR_MOD");
                    }
                    b.emit(onnx, vec![Some(xv), Some(yv)], BTreeMap::new(), o, layout, none)?;
                }
                _ => {
                    b.emit(onnx, vec![Some(xv), Some(yv)], BTreeMap::new(), o, layout, act)?;
                }
            }
        }
        B::RELU
        | B::RELU6
        | B::RELU_N1_TO_1
        | B::RELU_0_TO_1
        | B::LOGISTIC
        | B::TANH
        | B::HARD_SWISH
        | B::NEG
        | B::SQRT
        | B::RSQRT
        | B::EXP
        | B::LOG
        | B::ABS
        | B::SQUARE
        | B::LEAKY_RELU
        | B::ELU
        | B::FLOOR
        | B::CEIL
        | B::ROUND
        | B::SIN
        | B::COS
        | B::LOGICAL_NOT
        | B::GELU
        | B::SIGN => {
            let x = req(ins, 0)?;
            let layout = b.elementwise_layout(&[x], o);
            let xv = b.input_in(x, layout)?;
            let name = b.out_name(o);
            match code {
                B::RELU6 | B::RELU_N1_TO_1 | B::RELU_0_TO_1 => {
                    let (lo, hi) = match code {
                        B::RELU6 => (0.0, 6.0),
                        B::RELU_N1_TO_1 => (-1.0, 1.0),
                        _ => (0.0, 1.0),
                    };
                    let lo = b.const_f32_scalar(format!("{name}:min"), lo);
                    let hi = b.const_f32_scalar(format!("{name}:max"), hi);
                    b.emit(
                        "Clip",
                        vec![Some(xv), Some(lo), Some(hi)],
                        BTreeMap::new(),
                        o,
                        layout,
                        none,
                    )?;
                }
                B::RSQRT => {
                    let s = b.node1(
                        "Sqrt",
                        format!("{name}:sqrt"),
                        Some(DType::F32),
                        vec![Some(xv)],
                        BTreeMap::new(),
                    );
                    b.emit("Reciprocal", vec![Some(s)], BTreeMap::new(), o, layout, none)?;
                }
                B::SQUARE => {
                    b.emit("Mul", vec![Some(xv), Some(xv)], BTreeMap::new(), o, layout, none)?;
                }
                B::LEAKY_RELU => {
                    let alpha = opts.as_leaky_relu_options().map_or(0.2, |l| l.alpha);
                    b.emit(
                        "LeakyRelu",
                        vec![Some(xv)],
                        attrs(vec![("alpha", Attr::Float(alpha))]),
                        o,
                        layout,
                        none,
                    )?;
                }
                B::GELU => {
                    let approx = opts.as_gelu_options().is_some_and(|g| g.approximate);
                    let a = attrs(vec![(
                        "approximate",
                        Attr::String(if approx { "tanh" } else { "none" }.into()),
                    )]);
                    b.emit("Gelu", vec![Some(xv)], a, o, layout, none)?;
                }
                _ => {
                    let onnx = match code {
                        B::RELU => "Relu",
                        B::LOGISTIC => "Sigmoid",
                        B::TANH => "Tanh",
                        B::HARD_SWISH => "HardSwish",
                        B::NEG => "Neg",
                        B::SQRT => "Sqrt",
                        B::EXP => "Exp",
                        B::LOG => "Log",
                        B::ABS => "Abs",
                        B::ELU => "Elu",
                        B::FLOOR => "Floor",
                        B::CEIL => "Ceil",
                        B::ROUND => "Round",
                        B::SIN => "Sin",
                        B::COS => "Cos",
                        B::SIGN => "Sign",
                        _ => "Not",
                    };
                    b.emit(onnx, vec![Some(xv)], BTreeMap::new(), o, layout, none)?;
                }
            }
        }
        B::CONCATENATION => {
            let Some(c) = opts.as_concatenation_options() else {
                return invalid("no ConcatenationOptions");
            };
            let list: Vec<usize> = ins.iter().filter_map(|&t| usize::try_from(t).ok()).collect();
            let rank = b.rank(o);
            let axis = norm_axis(i64::from(c.axis), rank)?;
            let layout = if list.iter().all(|&t| b.rank(t) == 4) {
                b.elementwise_layout(&list, o)
            } else {
                Layout::Nhwc
            };
            let mut vs = Vec::new();
            for &t in &list {
                vs.push(Some(match layout {
                    Layout::Nchw => b.nchw(t)?,
                    Layout::Nhwc => b.nhwc(t)?,
                }));
            }
            let axis = if layout == Layout::Nchw {
                NHWC_AXIS_IN_NCHW[axis]
            } else {
                axis
            };
            b.emit(
                "Concat",
                vs,
                attrs(vec![("axis", Attr::Int(axis as i64))]),
                o,
                layout,
                c.fused_activation_function,
            )?;
        }
        B::PAD | B::PADV2 | B::MIRROR_PAD => {
            let (x, p) = (req(ins, 0)?, req(ins, 1)?);
            let pads = b.const_ints(p)?;
            let rank = b.rank(x);
            if pads.len() != rank * 2 {
                return invalid(format!("paddings hold {} values for rank {rank}", pads.len()));
            }
            let layout = if rank == 4 && b.forms[x].nchw.is_some() {
                Layout::Nchw
            } else {
                Layout::Nhwc
            };
            let order: Vec<usize> = if layout == Layout::Nchw {
                TO_NCHW.to_vec()
            } else {
                (0..rank).collect()
            };
            let mut onnx_pads: Vec<i64> = order.iter().map(|&a| pads[2 * a]).collect();
            onnx_pads.extend(order.iter().map(|&a| pads[2 * a + 1]));
            let xv = b.input_in(x, layout)?;
            let name = b.out_name(o);
            let pv = b.const_i64(format!("{name}:pads"), &onnx_pads);
            let mut inputs = vec![Some(xv), Some(pv)];
            let mut a = Vec::new();
            if code == B::MIRROR_PAD {
                let mode = opts
                    .as_mirror_pad_options()
                    .map_or(fb::MirrorPadMode::REFLECT, |m| m.mode);
                if mode != fb::MirrorPadMode::REFLECT {
                    return unsupported("SYMMETRIC mirror padding");
                }
                a.push(("mode", Attr::String("reflect".into())));
            } else if let Some(cv) = opt(ins, 2) {
                let c = b.nhwc(cv)?;
                inputs.push(Some(c));
            }
            b.emit("Pad", inputs, attrs(a), o, layout, none)?;
        }
        B::MEAN | B::SUM | B::REDUCE_MAX | B::REDUCE_MIN | B::REDUCE_PROD => {
            let (x, ax) = (req(ins, 0)?, req(ins, 1)?);
            let keep = opts.as_reducer_options().is_some_and(|r| r.keep_dims);
            let rank = b.rank(x);
            let mut axes: Vec<usize> = b
                .const_ints(ax)?
                .iter()
                .map(|&a| norm_axis(a, rank))
                .collect::<R<_>>()?;
            axes.sort_unstable();
            axes.dedup();
            // NCHW when the input is there already and the kept dims stay in order.
            let mut layout = Layout::Nhwc;
            if rank == 4 && b.forms[x].nchw.is_some() {
                let kept_nhwc: Vec<usize> = (0..4).filter(|a| !axes.contains(a)).collect();
                let kept_in_nchw_order: Vec<usize> = TO_NCHW.iter().copied().filter(|a| !axes.contains(a)).collect();
                if keep || kept_nhwc == kept_in_nchw_order {
                    layout = Layout::Nchw;
                }
            }
            let onnx_axes: Vec<i64> = axes
                .iter()
                .map(|&a| {
                    if layout == Layout::Nchw {
                        NHWC_AXIS_IN_NCHW[a] as i64
                    } else {
                        a as i64
                    }
                })
                .collect();
            let xv = b.input_in(x, layout)?;
            let name = b.out_name(o);
            let av = b.const_i64(format!("{name}:axes"), &onnx_axes);
            let onnx = match code {
                B::MEAN => "ReduceMean",
                B::SUM => "ReduceSum",
                B::REDUCE_MAX => "ReduceMax",
                B::REDUCE_MIN => "ReduceMin",
                _ => "ReduceProd",
            };
            let out_layout = if keep { layout } else { Layout::Nhwc };
            b.emit(
                onnx,
                vec![Some(xv), Some(av)],
                attrs(vec![("keepdims", Attr::Int(i64::from(keep)))]),
                o,
                out_layout,
                none,
            )?;
        }
        B::RESIZE_BILINEAR | B::RESIZE_NEAREST_NEIGHBOR => {
            let (x, s) = (req(ins, 0)?, req(ins, 1)?);
            let size = b.const_ints(s)?;
            let xs = b.shape(x);
            if xs.len() != 4 || size.len() != 2 {
                return invalid("resize takes a rank-4 input and two sizes");
            }
            let (align, half) = if code == B::RESIZE_BILINEAR {
                opts.as_resize_bilinear_options()
                    .map_or((false, false), |r| (r.align_corners, r.half_pixel_centers))
            } else {
                opts.as_resize_nearest_neighbor_options()
                    .map_or((false, false), |r| (r.align_corners, r.half_pixel_centers))
            };
            let linear = code == B::RESIZE_BILINEAR;
            let ctm = match (align, half, linear) {
                (true, _, _) => "align_corners",
                (false, true, true) => "half_pixel",
                (false, true, false) => "tf_half_pixel_for_nn",
                _ => "asymmetric",
            };
            let xv = b.nchw(x)?;
            let name = b.out_name(o);
            let sizes = b.const_i64(format!("{name}:sizes"), &[xs[0] as i64, xs[3] as i64, size[0], size[1]]);
            let mut a = vec![
                ("mode", Attr::String(if linear { "linear" } else { "nearest" }.into())),
                ("coordinate_transformation_mode", Attr::String(ctm.into())),
            ];
            if !linear {
                a.push((
                    "nearest_mode",
                    Attr::String(if align { "round_prefer_ceil" } else { "floor" }.into()),
                ));
            }
            b.emit(
                "Resize",
                vec![Some(xv), None, None, Some(sizes)],
                attrs(a),
                o,
                Layout::Nchw,
                none,
            )?;
        }
        B::DEPTH_TO_SPACE | B::SPACE_TO_DEPTH => {
            let x = req(ins, 0)?;
            let bs = if code == B::DEPTH_TO_SPACE {
                opts.as_depth_to_space_options().map_or(0, |d| d.block_size)
            } else {
                opts.as_space_to_depth_options().map_or(0, |d| d.block_size)
            };
            let xv = b.nchw(x)?;
            let mut a = vec![("blocksize", Attr::Int(i64::from(bs)))];
            let onnx = if code == B::DEPTH_TO_SPACE {
                a.push(("mode", Attr::String("DCR".into())));
                "DepthToSpace"
            } else {
                "SpaceToDepth"
            };
            b.emit(onnx, vec![Some(xv)], attrs(a), o, Layout::Nchw, none)?;
        }
        B::RESHAPE => {
            let x = req(ins, 0)?;
            let xv = b.nhwc(x)?;
            let name = b.out_name(o);
            let shape = match opt(ins, 1) {
                Some(s) if b.is_const(s) => {
                    let v = b.const_ints(s)?;
                    b.const_i64(format!("{name}:shape"), &v)
                }
                Some(s) => {
                    let sv = b.nhwc(s)?;
                    b.node1(
                        "Cast",
                        format!("{name}:shape"),
                        Some(DType::I64),
                        vec![Some(sv)],
                        attrs(vec![("to", Attr::Int(7))]),
                    )
                }
                None => {
                    let v: Vec<i64> = match opts.as_reshape_options().and_then(|r| r.new_shape.clone()) {
                        Some(v) => v.into_iter().map(i64::from).collect(),
                        None => b.shape(o).iter().map(|&d| d as i64).collect(),
                    };
                    b.const_i64(format!("{name}:shape"), &v)
                }
            };
            b.emit(
                "Reshape",
                vec![Some(xv), Some(shape)],
                BTreeMap::new(),
                o,
                Layout::Nhwc,
                none,
            )?;
        }
        B::SQUEEZE => {
            let x = req(ins, 0)?;
            let xv = b.nhwc(x)?;
            let dims: Vec<i64> = opts
                .as_squeeze_options()
                .and_then(|s| s.squeeze_dims.clone())
                .unwrap_or_default()
                .into_iter()
                .map(i64::from)
                .collect();
            let mut inputs = vec![Some(xv)];
            if !dims.is_empty() {
                let name = b.out_name(o);
                inputs.push(Some(b.const_i64(format!("{name}:axes"), &dims)));
            }
            b.emit("Squeeze", inputs, BTreeMap::new(), o, Layout::Nhwc, none)?;
        }
        B::EXPAND_DIMS => {
            let (x, a) = (req(ins, 0)?, req(ins, 1)?);
            let axis = b.const_ints(a)?;
            let xv = b.nhwc(x)?;
            let name = b.out_name(o);
            let av = b.const_i64(format!("{name}:axes"), &axis);
            b.emit(
                "Unsqueeze",
                vec![Some(xv), Some(av)],
                BTreeMap::new(),
                o,
                Layout::Nhwc,
                none,
            )?;
        }
        B::TRANSPOSE => {
            let (x, p) = (req(ins, 0)?, req(ins, 1)?);
            let perm = b.const_ints(p)?;
            let xv = b.nhwc(x)?;
            b.emit(
                "Transpose",
                vec![Some(xv)],
                attrs(vec![("perm", ints(&perm))]),
                o,
                Layout::Nhwc,
                none,
            )?;
        }
        B::STRIDED_SLICE => {
            let x = req(ins, 0)?;
            let (begin, end) = (b.const_ints(req(ins, 1)?)?, b.const_ints(req(ins, 2)?)?);
            let strides = match opt(ins, 3) {
                Some(s) => b.const_ints(s)?,
                None => vec![1; begin.len()],
            };
            let Some(so) = opts.as_strided_slice_options() else {
                return invalid("no StridedSliceOptions");
            };
            if so.ellipsis_mask != 0 || so.new_axis_mask != 0 {
                return unsupported("ellipsis or new-axis mask");
            }
            if begin.len() != end.len() || begin.len() != strides.len() || begin.len() > b.rank(x) {
                return invalid("begin, end and strides must have one value per sliced axis");
            }
            let (mut starts, mut ends, mut axes, mut steps, mut shrink) = (vec![], vec![], vec![], vec![], vec![]);
            for i in 0..begin.len() {
                let bit = 1 << i;
                let s = strides[i];
                if s == 0 {
                    return invalid(format!("stride 0 on axis {i}"));
                }
                let (mut st, mut en) = (begin[i], if so.offset { begin[i] + end[i] } else { end[i] });
                if so.shrink_axis_mask & bit != 0 {
                    en = if st == -1 { i64::MAX } else { st + 1 };
                    shrink.push(i as i64);
                    starts.push(st);
                    ends.push(en);
                    axes.push(i as i64);
                    steps.push(1);
                    continue;
                }
                if so.begin_mask & bit != 0 {
                    st = if s > 0 { 0 } else { i64::MAX };
                }
                if so.end_mask & bit != 0 {
                    en = if s > 0 { i64::MAX } else { i64::MIN };
                }
                starts.push(st);
                ends.push(en);
                axes.push(i as i64);
                steps.push(s);
            }
            let xv = b.nhwc(x)?;
            let name = b.out_name(o);
            let sv = b.const_i64(format!("{name}:starts"), &starts);
            let ev = b.const_i64(format!("{name}:ends"), &ends);
            let av = b.const_i64(format!("{name}:axes"), &axes);
            let tv = b.const_i64(format!("{name}:steps"), &steps);
            let inputs = vec![Some(xv), Some(sv), Some(ev), Some(av), Some(tv)];
            if shrink.is_empty() {
                b.emit("Slice", inputs, BTreeMap::new(), o, Layout::Nhwc, none)?;
            } else {
                let dt = b.out_dtype(o);
                let sl = b.node1("Slice", format!("{name}:slice"), dt, inputs, BTreeMap::new());
                let sq = b.const_i64(format!("{name}:shrink"), &shrink);
                b.emit(
                    "Squeeze",
                    vec![Some(sl), Some(sq)],
                    BTreeMap::new(),
                    o,
                    Layout::Nhwc,
                    none,
                )?;
            }
        }
        B::SLICE => {
            let x = req(ins, 0)?;
            let (begin, size) = (b.const_ints(req(ins, 1)?)?, b.const_ints(req(ins, 2)?)?);
            if begin.len() != size.len() {
                return invalid("begin and size differ in length");
            }
            let ends: Vec<i64> = begin
                .iter()
                .zip(&size)
                .map(|(&s, &n)| if n < 0 { i64::MAX } else { s + n })
                .collect();
            let axes: Vec<i64> = (0..begin.len() as i64).collect();
            let xv = b.nhwc(x)?;
            let name = b.out_name(o);
            let sv = b.const_i64(format!("{name}:starts"), &begin);
            let ev = b.const_i64(format!("{name}:ends"), &ends);
            let av = b.const_i64(format!("{name}:axes"), &axes);
            b.emit(
                "Slice",
                vec![Some(xv), Some(sv), Some(ev), Some(av)],
                BTreeMap::new(),
                o,
                Layout::Nhwc,
                none,
            )?;
        }
        B::GATHER => {
            let (x, i) = (req(ins, 0)?, req(ins, 1)?);
            let g = opts.as_gather_options().map_or((0, 0), |g| (g.axis, g.batch_dims));
            if g.1 != 0 {
                return unsupported("batch_dims");
            }
            let xv = b.nhwc(x)?;
            let iv = b.nhwc(i)?;
            b.emit(
                "Gather",
                vec![Some(xv), Some(iv)],
                attrs(vec![("axis", Attr::Int(i64::from(g.0)))]),
                o,
                Layout::Nhwc,
                none,
            )?;
        }
        B::SPLIT | B::SPLIT_V | B::UNPACK => {
            let (x, axis, sizes) = match code {
                B::SPLIT => {
                    let (a, x) = (req(ins, 0)?, req(ins, 1)?);
                    let axis = norm_axis(*b.const_ints(a)?.first().unwrap_or(&0), b.rank(x))?;
                    let n = outs.len();
                    let dim = b.shape(x)[axis];
                    if n == 0 || !dim.is_multiple_of(n) {
                        return invalid(format!("{dim} does not split into {n}"));
                    }
                    (x, axis, vec![(dim / n) as i64; n])
                }
                B::SPLIT_V => {
                    let (x, s, a) = (req(ins, 0)?, req(ins, 1)?, req(ins, 2)?);
                    let axis = norm_axis(*b.const_ints(a)?.first().unwrap_or(&0), b.rank(x))?;
                    let mut sizes = b.const_ints(s)?;
                    let dim = b.shape(x)[axis] as i64;
                    let known: i64 = sizes.iter().filter(|&&v| v >= 0).sum();
                    for v in &mut sizes {
                        if *v < 0 {
                            *v = dim - known;
                        }
                    }
                    (x, axis, sizes)
                }
                _ => {
                    let x = req(ins, 0)?;
                    let axis = norm_axis(i64::from(opts.as_unpack_options().map_or(0, |u| u.axis)), b.rank(x))?;
                    (x, axis, vec![1; outs.len()])
                }
            };
            if sizes.len() != outs.len() {
                return invalid(format!("{} sizes for {} outputs", sizes.len(), outs.len()));
            }
            let xv = b.nhwc(x)?;
            let name = b.out_name(o);
            let sv = b.const_i64(format!("{name}:split"), &sizes);
            let mut vals = Vec::new();
            for &t in outs {
                let t = t as usize;
                let n = if code == B::UNPACK {
                    format!("{}:part", b.out_name(t))
                } else {
                    b.out_name(t)
                };
                let dt = b.out_dtype(t);
                vals.push(b.fresh_value(n, dt));
            }
            let node_name = b.g.values[vals[0]].name.clone();
            b.add_node(
                "Split",
                &node_name,
                vec![Some(xv), Some(sv)],
                vals.clone(),
                attrs(vec![("axis", Attr::Int(axis as i64))]),
            );
            for (k, &t) in outs.iter().enumerate() {
                let t = t as usize;
                if code == B::UNPACK {
                    let ax = b.const_i64(format!("{}:axes", b.out_name(t)), &[axis as i64]);
                    b.emit(
                        "Squeeze",
                        vec![Some(vals[k]), Some(ax)],
                        BTreeMap::new(),
                        t,
                        Layout::Nhwc,
                        none,
                    )?;
                } else {
                    b.finish(t, vals[k], Layout::Nhwc);
                }
            }
        }
        B::PACK => {
            let axis = opts.as_pack_options().map_or(0, |p| p.axis);
            let axis = norm_axis(i64::from(axis), b.rank(o))?;
            let name = b.out_name(o);
            let ax = b.const_i64(format!("{name}:axes"), &[axis as i64]);
            let mut parts = Vec::new();
            for (k, &t) in ins.iter().enumerate() {
                let t = usize::try_from(t).map_err(|_| OpError::Invalid("missing input".into()))?;
                let v = b.nhwc(t)?;
                let dt = b.g.values[v].dtype;
                parts.push(Some(b.node1(
                    "Unsqueeze",
                    format!("{name}:{k}"),
                    dt,
                    vec![Some(v), Some(ax)],
                    BTreeMap::new(),
                )));
            }
            b.emit(
                "Concat",
                parts,
                attrs(vec![("axis", Attr::Int(axis as i64))]),
                o,
                Layout::Nhwc,
                none,
            )?;
        }
        B::SHAPE => {
            let x = req(ins, 0)?;
            let xv = b.nhwc(x)?;
            let name = b.out_name(o);
            let s = b.node1(
                "Shape",
                format!("{name}:i64"),
                Some(DType::I64),
                vec![Some(xv)],
                BTreeMap::new(),
            );
            let to = onnx_type(b.dtype_of(o).unwrap_or(DType::I32))?;
            b.emit(
                "Cast",
                vec![Some(s)],
                attrs(vec![("to", Attr::Int(to))]),
                o,
                Layout::Nhwc,
                none,
            )?;
        }
        B::CAST => {
            let x = req(ins, 0)?;
            let layout = b.elementwise_layout(&[x], o);
            let xv = b.input_in(x, layout)?;
            let to = onnx_type(
                b.dtype_of(o)
                    .ok_or_else(|| OpError::Unsupported("output type".into()))?,
            )?;
            b.emit(
                "Cast",
                vec![Some(xv)],
                attrs(vec![("to", Attr::Int(to))]),
                o,
                layout,
                none,
            )?;
        }
        B::ARG_MAX | B::ARG_MIN => {
            let (x, a) = (req(ins, 0)?, req(ins, 1)?);
            let axis = *b.const_ints(a)?.first().unwrap_or(&0);
            let xv = b.nhwc(x)?;
            let name = b.out_name(o);
            let onnx = if code == B::ARG_MAX { "ArgMax" } else { "ArgMin" };
            let am = b.node1(
                onnx,
                format!("{name}:i64"),
                Some(DType::I64),
                vec![Some(xv)],
                attrs(vec![("axis", Attr::Int(axis)), ("keepdims", Attr::Int(0))]),
            );
            let to = onnx_type(b.dtype_of(o).unwrap_or(DType::I64))?;
            b.emit(
                "Cast",
                vec![Some(am)],
                attrs(vec![("to", Attr::Int(to))]),
                o,
                Layout::Nhwc,
                none,
            )?;
        }
        B::SOFTMAX | B::LOG_SOFTMAX => {
            let x = req(ins, 0)?;
            let beta = opts.as_softmax_options().map_or(1.0, |s| s.beta);
            let mut xv = b.nhwc(x)?;
            let name = b.out_name(o);
            if code == B::SOFTMAX && (beta - 1.0).abs() > 0.0 {
                let bv = b.const_f32_scalar(format!("{name}:beta"), beta);
                xv = b.node1(
                    "Mul",
                    format!("{name}:scaled"),
                    Some(DType::F32),
                    vec![Some(xv), Some(bv)],
                    BTreeMap::new(),
                );
            }
            let onnx = if code == B::SOFTMAX { "Softmax" } else { "LogSoftmax" };
            b.emit(
                onnx,
                vec![Some(xv)],
                attrs(vec![("axis", Attr::Int(-1))]),
                o,
                Layout::Nhwc,
                none,
            )?;
        }
        B::BATCH_MATMUL => {
            let (x, y) = (req(ins, 0)?, req(ins, 1)?);
            let (ax, ay) = opts
                .as_batch_mat_mul_options()
                .map_or((false, false), |m| (m.adj_x, m.adj_y));
            let name = b.out_name(o);
            let mut vs = Vec::new();
            for (t, adj, tag) in [(x, ax, "a"), (y, ay, "b")] {
                let v = b.nhwc(t)?;
                if adj {
                    let r = b.rank(t);
                    let mut perm: Vec<i64> = (0..r as i64).collect();
                    perm.swap(r - 1, r - 2);
                    let dt = b.g.values[v].dtype;
                    vs.push(Some(b.node1(
                        "Transpose",
                        format!("{name}:{tag}T"),
                        dt,
                        vec![Some(v)],
                        attrs(vec![("perm", ints(&perm))]),
                    )));
                } else {
                    vs.push(Some(v));
                }
            }
            b.emit("MatMul", vs, BTreeMap::new(), o, Layout::Nhwc, none)?;
        }
        B::SELECT | B::SELECT_V2 => {
            let (c, x, y) = (req(ins, 0)?, req(ins, 1)?, req(ins, 2)?);
            let vs = vec![Some(b.nhwc(c)?), Some(b.nhwc(x)?), Some(b.nhwc(y)?)];
            b.emit("Where", vs, BTreeMap::new(), o, Layout::Nhwc, none)?;
        }
        B::TILE | B::BROADCAST_TO => {
            let (x, m) = (req(ins, 0)?, req(ins, 1)?);
            let mv = b.const_ints(m)?;
            let xv = b.nhwc(x)?;
            let name = b.out_name(o);
            let c = b.const_i64(
                format!("{name}:{}", if code == B::TILE { "repeats" } else { "shape" }),
                &mv,
            );
            let onnx = if code == B::TILE { "Tile" } else { "Expand" };
            b.emit(onnx, vec![Some(xv), Some(c)], BTreeMap::new(), o, Layout::Nhwc, none)?;
        }
        B::DENSIFY => {
            // Sparse weights: folded into the dense constant LiteRT's DENSIFY makes of them
            // once, before the first run.
            let x = req(ins, 0)?;
            let dense = densify(b, x)?;
            let v = b.constant(b.name_of(o), &dense);
            b.forms[o].nhwc = Some(v);
        }
        _ => return unsupported(String::new()),
    }
    Ok(())
}

/// One level of a sparse tensor's storage: dense of its size, or CSR (segments into the
/// indices, per position of the levels before it).
enum Level {
    Dense(usize),
    Csr(Vec<usize>, Vec<usize>),
}

/// A sparse constant (TFLite's `SparsityParameters`) as a dense tensor of its type, as
/// LiteRT's format converter expands it: the levels in traversal order (the identity; block
/// sparsity is refused), each value at the coordinates its path through them gives, zeros
/// elsewhere.
fn densify(b: &Builder, x: usize) -> R<Tensor> {
    let name = b.name_of(x);
    let t = &b.tensors[x];
    let Some(sp) = t.sparsity.as_ref() else {
        return invalid(format!("DENSIFY's input '{name}' has no sparsity parameters"));
    };
    let shape = b.shape(x);
    let n = shape.len();
    if sp.block_map.as_ref().is_some_and(|m| !m.is_empty()) {
        return unsupported(format!("block-sparse weights ('{name}')"));
    }
    let order: Vec<i32> = sp.traversal_order.clone().unwrap_or_else(|| (0..n as i32).collect());
    if order != (0..n as i32).collect::<Vec<_>>() {
        return unsupported(format!("sparse weights in traversal order {order:?} ('{name}')"));
    }
    let dims = sp.dim_metadata.as_deref().unwrap_or(&[]);
    if dims.len() != n {
        return invalid(format!("'{name}': {} sparsity levels for rank {n}", dims.len()));
    }
    let indices = |v: &fb::SparseIndexVectorT| -> Option<Vec<usize>> {
        match v {
            fb::SparseIndexVectorT::Int32Vector(a) => {
                a.values.as_ref()?.iter().map(|&i| usize::try_from(i).ok()).collect()
            }
            fb::SparseIndexVectorT::Uint16Vector(a) => {
                Some(a.values.as_ref()?.iter().map(|&i| usize::from(i)).collect())
            }
            fb::SparseIndexVectorT::Uint8Vector(a) => {
                Some(a.values.as_ref()?.iter().map(|&i| usize::from(i)).collect())
            }
            fb::SparseIndexVectorT::NONE => None,
        }
    };
    let mut levels = Vec::with_capacity(n);
    for (i, d) in dims.iter().enumerate() {
        levels.push(match d.format {
            fb::DimensionType::DENSE => {
                if usize::try_from(d.dense_size).ok() != Some(shape[i]) {
                    return invalid(format!(
                        "'{name}': level {i} is dense of size {} for a dim of {}",
                        d.dense_size, shape[i]
                    ));
                }
                Level::Dense(shape[i])
            }
            fb::DimensionType::SPARSE_CSR => match (indices(&d.array_segments), indices(&d.array_indices)) {
                (Some(seg), Some(idx)) => Level::Csr(seg, idx),
                _ => return invalid(format!("'{name}': sparse level {i} without segments and indices")),
            },
            other => return unsupported(format!("sparse level format {other:?} ('{name}')")),
        });
    }
    let dt = b.dtype_of(x).filter(|d| d.bits() % 8 == 0).ok_or_else(|| {
        OpError::Unsupported(format!(
            "sparse weights of type {:?} ('{name}')",
            t.type_.variant_name()
        ))
    })?;
    let w = dt.bits() / 8;
    let values = b.raw(x).unwrap_or(&[]);
    let mut strides = vec![1usize; n];
    for i in (0..n.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    // The dense size is the declared shape's, not the buffer's: bounded before allocating.
    let count = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= 1 << 28)
        .ok_or_else(|| OpError::Invalid(format!("'{name}': a dense shape {shape:?} too large to expand")))?;
    let mut out = vec![0u8; count * w];
    let bad = || {
        OpError::Invalid(format!(
            "'{name}': its sparsity parameters point outside the tensor or its values"
        ))
    };
    // (level, position in that level's storage, dense offset so far), depth first.
    let mut stack = vec![(0usize, 0usize, 0usize)];
    while let Some((level, pos, offset)) = stack.pop() {
        if level == n {
            let src = values.get(pos * w..(pos + 1) * w).ok_or_else(bad)?;
            out.get_mut(offset * w..(offset + 1) * w)
                .ok_or_else(bad)?
                .copy_from_slice(src);
            continue;
        }
        match &levels[level] {
            Level::Dense(size) => {
                for i in (0..*size).rev() {
                    stack.push((level + 1, pos * size + i, offset + i * strides[level]));
                }
            }
            Level::Csr(seg, idx) => {
                let (&from, &to) = (seg.get(pos).ok_or_else(bad)?, seg.get(pos + 1).ok_or_else(bad)?);
                for k in (from..to).rev() {
                    let c = *idx.get(k).filter(|&&c| c < shape[level]).ok_or_else(bad)?;
                    stack.push((level + 1, k, offset + c * strides[level]));
                }
            }
        }
    }
    Tensor::from_raw(dt, &shape, &out).map_err(|e| OpError::Invalid(format!("tensor '{name}': {e}")))
}

fn norm_axis(a: i64, rank: usize) -> R<usize> {
    let r = rank as i64;
    let a2 = if a < 0 { a + r } else { a };
    if (0..r.max(1)).contains(&a2) {
        Ok(a2 as usize)
    } else {
        invalid(format!("axis {a} out of range for rank {rank}"))
    }
}

/// The ONNX `TensorProto.DataType` code of a dtype (for Cast's `to`).
fn onnx_type(d: DType) -> R<i64> {
    Ok(match d {
        DType::F32 => 1,
        DType::U8 => 2,
        DType::I8 => 3,
        DType::U16 => 4,
        DType::I16 => 5,
        DType::I32 => 6,
        DType::I64 => 7,
        DType::Bool => 9,
        DType::F16 => 10,
        DType::F64 => 11,
        DType::U32 => 12,
        DType::U64 => 13,
        other => return unsupported(format!("a cast to {other}")),
    })
}
