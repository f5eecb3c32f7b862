//! A quantized TFLite file as an integer [`Program`]: the file's own int8/int16 tensors,
//! scales, zero points, weight and bias codes, and one integer op per operator with
//! LiteRT's reference-kernel arithmetic — what the integer reference runs, the compiler
//! lowers and the emulator executes, with no calibration of ours in between.
//!
//! Tensors keep the file's NHWC layout at the inputs and outputs; convolutions, pools and
//! resizes run NCHW (the integer kernels' layout) between `Transpose` ops, which move codes
//! and change no value.

use super::{File, TO_NCHW, TO_NHWC, builtin, dtype, op_name, parse, quant_of, same_pad, tensor_name};
use crate::import::{ImportError, UnsupportedOp};
use crate::ir::DType;
use crate::program::{
    Act, Extreme, FloatOp, IOp, ITensor, IntType, OpKind, PadMode, PoolKind, Program, QParams, SliceAxis,
};
use fb::BuiltinOperator as B;
use std::path::Path;
use tflite_schema as fb;

/// Whether a parsed file computes on integers: some operator other than DEQUANTIZE writes
/// an int8 or int16 tensor with scales, or reads one that is not a constant (an ARG_MAX
/// on a quantized input writes int32; a float model's hybrid ops read int8 weights).
fn is_integer(file: &File) -> bool {
    let sg = &file.model.subgraphs.as_deref().unwrap_or_default()[file.subgraph];
    let tensors = sg.tensors.as_deref().unwrap_or_default();
    let quantized =
        |t: &fb::TensorT| matches!(t.type_, fb::TensorType::INT8 | fb::TensorType::INT16) && quant_of(t).is_some();
    sg.operators.iter().flatten().any(|op| {
        let codes = file.model.operator_codes.as_deref().unwrap_or_default();
        let tensor = |&t: &i32| usize::try_from(t).ok().and_then(|t| tensors.get(t));
        builtin(&codes[op.opcode_index as usize]) != B::DEQUANTIZE
            && (op.outputs.iter().flatten().filter_map(tensor).any(quantized)
                || op
                    .inputs
                    .iter()
                    .flatten()
                    .filter_map(tensor)
                    .any(|t| quantized(t) && file.data(t).is_none()))
    })
}

/// The integer program of a quantized TFLite file; `Ok(None)` for a float model.
pub fn load(path: &Path) -> Result<Option<Program>, ImportError> {
    let bytes = std::fs::read(path).map_err(|e| ImportError::io(path, e))?;
    from_bytes(&bytes, path)
}

/// [`load`] from bytes.
pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Option<Program>, ImportError> {
    if crate::import::detect(bytes.get(..16).unwrap_or(bytes)) != crate::import::Content::TfLite {
        return Ok(None);
    }
    let file = parse(bytes, path)?;
    if !is_integer(&file) {
        return Ok(None);
    }
    let mut b = Lower::new(&file, path);
    b.run();
    if !b.errors.is_empty() {
        return Err(super::format_err(path, b.errors.join("\n")));
    }
    if !b.unsupported.is_empty() {
        if b.downstream > 0 {
            let n = b.downstream;
            b.unsupported.push(UnsupportedOp {
                node: format!("{n} op(s) downstream"),
                op: "(not read: their inputs come from the ops above)".into(),
            });
        }
        return Err(ImportError::Unsupported {
            file: path.to_path_buf(),
            ops: b.unsupported,
        });
    }
    Ok(Some(b.prog))
}

type R<T> = Result<T, Why>;

enum Why {
    Unsupported(String),
    Invalid(String),
}

fn invalid<T>(m: impl Into<String>) -> R<T> {
    Err(Why::Invalid(m.into()))
}

fn unsupported<T>(m: impl Into<String>) -> R<T> {
    Err(Why::Unsupported(m.into()))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    Nhwc,
    Nchw,
}

struct Lower<'f> {
    file: &'f File,
    tensors: &'f [fb::TensorT],
    codes: &'f [fb::OperatorCodeT],
    prog: Program,
    nhwc: Vec<Option<usize>>,
    nchw: Vec<Option<usize>>,
    outputs: Vec<usize>,
    /// Float tensors that are a DEQUANTIZE of an integer activation: the integer tensor.
    dequantized: Vec<Option<usize>>,
    /// Float tensors a float op makes, waiting for their QUANTIZE (the only reader): the op
    /// and its operands (file tensors, see [`Lower::float_operands`]).
    pending: Vec<Option<(FloatOp, Vec<usize>)>>,
    /// Tensors whose only reader is one QUANTIZE (and that are no graph output).
    quantize_only: Vec<bool>,
    /// Tensors downstream of an op that could not be read.
    poisoned: Vec<bool>,
    downstream: usize,
    unsupported: Vec<UnsupportedOp>,
    errors: Vec<String>,
}

fn permute(v: &[usize], perm: &[usize]) -> Vec<usize> {
    perm.iter().map(|&p| v[p]).collect()
}

/// Codes of a row-major array of `shape` permuted by `perm`.
fn permute_codes(data: &[i64], shape: &[usize], perm: &[usize]) -> Vec<i64> {
    let out_shape = permute(shape, perm);
    let rank = shape.len();
    let mut strides = vec![1usize; rank];
    for d in (0..rank.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; rank];
    for _ in 0..n {
        let src: usize = (0..rank).map(|d| idx[d] * strides[perm[d]]).sum();
        out.push(data[src]);
        for d in (0..rank).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

fn act_of(f: fb::ActivationFunctionType) -> R<Act> {
    Ok(match f {
        fb::ActivationFunctionType::NONE => Act::None,
        fb::ActivationFunctionType::RELU => Act::Relu,
        fb::ActivationFunctionType::RELU6 => Act::Relu6,
        fb::ActivationFunctionType::RELU_N1_TO_1 => Act::ReluN1To1,
        other => return unsupported(format!("fused {}", other.variant_name().unwrap_or("?"))),
    })
}

impl<'f> Lower<'f> {
    fn new(file: &'f File, path: &'f Path) -> Self {
        let sg = &file.model.subgraphs.as_deref().unwrap_or_default()[file.subgraph];
        let tensors = sg.tensors.as_deref().unwrap_or_default();
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let codes = file.model.operator_codes.as_deref().unwrap_or_default();
        let mut readers: Vec<Vec<B>> = vec![Vec::new(); tensors.len()];
        for op in sg.operators.iter().flatten() {
            let code = codes.get(op.opcode_index as usize).map_or(B::CUSTOM, builtin);
            for &t in op.inputs.iter().flatten() {
                if let Some(r) = usize::try_from(t).ok().and_then(|t| readers.get_mut(t)) {
                    r.push(code);
                }
            }
        }
        let outputs: Vec<usize> = sg.outputs.iter().flatten().map(|&t| t as usize).collect();
        let quantize_only = readers
            .iter()
            .enumerate()
            .map(|(t, r)| r.as_slice() == [B::QUANTIZE] && !outputs.contains(&t))
            .collect();
        Self {
            file,
            tensors,
            codes,
            prog: Program {
                graph: format!("tflite:{name}"),
                tensors: Vec::new(),
                ops: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                constraints: Vec::new(),
            },
            nhwc: vec![None; tensors.len()],
            nchw: vec![None; tensors.len()],
            outputs,
            dequantized: vec![None; tensors.len()],
            pending: vec![None; tensors.len()],
            quantize_only,
            poisoned: vec![false; tensors.len()],
            downstream: 0,
            unsupported: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn name(&self, t: usize) -> String {
        tensor_name(&self.tensors[t], t)
    }

    fn shape(&self, t: usize) -> Vec<usize> {
        self.tensors[t]
            .shape
            .iter()
            .flatten()
            .map(|&d| usize::try_from(d).unwrap_or(0))
            .collect()
    }

    fn q(&self, t: usize) -> R<QParams> {
        let info = &self.tensors[t];
        let ty = match info.type_ {
            fb::TensorType::INT8 => IntType::I8,
            fb::TensorType::INT16 => IntType::I16,
            fb::TensorType::INT4 => IntType::I4,
            fb::TensorType::INT32 if quant_of(info).is_some() => IntType::I32,
            fb::TensorType::INT32 => IntType::Index,
            fb::TensorType::INT64 => IntType::I64,
            fb::TensorType::FLOAT32 => IntType::F32,
            fb::TensorType::BOOL => IntType::Bool,
            other => return unsupported(format!("a {} tensor", other.variant_name().unwrap_or("?"))),
        };
        let Some(q) = quant_of(info) else {
            if matches!(ty, IntType::I8 | IntType::I16) {
                return invalid(format!("integer tensor '{}' has no scale", self.name(t)));
            }
            return Ok(QParams::per_tensor(ty, 1.0, 0));
        };
        let per_channel = q.scale.len() > 1;
        Ok(QParams {
            ty,
            scale: q.scale.clone(),
            zero_point: q.zero_point.iter().map(|&z| z as i32).collect(),
            axis: per_channel.then_some(q.axis),
        })
    }

    fn raw(&self, t: usize) -> Option<&'f [u8]> {
        self.file.data(&self.tensors[t])
    }

    /// A constant's codes, as stored.
    fn codes_of(&self, t: usize) -> R<Vec<i64>> {
        let raw = self
            .raw(t)
            .ok_or_else(|| Why::Invalid(format!("'{}' must be a constant", self.name(t))))?;
        let dt = dtype(self.tensors[t].type_).ok_or_else(|| Why::Unsupported("constant type".into()))?;
        let shape = self.shape(t);
        if dt == DType::I4 {
            // Two's-complement nibbles, two per byte, low nibble first.
            let n: usize = shape.iter().product();
            if raw.len() != n.div_ceil(2) {
                return invalid(format!(
                    "tensor '{}': {} bytes for {n} int4 values",
                    self.name(t),
                    raw.len()
                ));
            }
            return Ok((0..n)
                .map(|i| i64::from((((raw[i / 2] >> ((i % 2) * 4)) & 0x0F) << 4) as i8 >> 4))
                .collect());
        }
        let tensor = crate::ir::Tensor::from_raw(dt, &shape, raw)
            .map_err(|e| Why::Invalid(format!("tensor '{}': {e}", self.name(t))))?;
        if dt == DType::F32 {
            return Ok(tensor.to_f32().iter().map(|v| i64::from(v.to_bits())).collect());
        }
        tensor
            .as_i64_vec()
            .ok_or_else(|| Why::Invalid(format!("tensor '{}' must hold integers", self.name(t))))
    }

    /// The axes a constant `a` names over `x` (negative from the end).
    fn axes_of(&self, x: usize, a: usize) -> R<Vec<usize>> {
        let rank = self.shape(x).len() as i64;
        Ok(self
            .codes_of(a)?
            .iter()
            .map(|&v| (if v < 0 { v + rank } else { v }) as usize)
            .collect())
    }

    fn push(&mut self, t: ITensor) -> usize {
        self.prog.tensors.push(t);
        self.prog.tensors.len() - 1
    }

    fn op(&mut self, node: &str, kind: OpKind, inputs: Vec<usize>, outputs: Vec<usize>) {
        self.prog.ops.push(IOp {
            node: node.to_owned(),
            kind,
            inputs,
            outputs,
        });
    }

    /// A constant operand in `layout` (broadcast to rank 4 and transposed for NCHW).
    fn constant(&mut self, t: usize, layout: Layout) -> R<usize> {
        let mut shape = self.shape(t);
        let mut data = self.codes_of(t)?;
        let mut q = self.q(t)?;
        if layout == Layout::Nchw {
            if shape.len() > 4 {
                return invalid(format!("constant '{}' of rank {}", self.name(t), shape.len()));
            }
            let pad = 4 - shape.len();
            let mut s4 = vec![1; pad];
            s4.extend(&shape);
            data = permute_codes(&data, &s4, &TO_NCHW);
            shape = permute(&s4, &TO_NCHW);
            if let Some(a) = q.axis {
                q.axis = Some(TO_NCHW.iter().position(|&p| p == a + pad).unwrap_or(0));
            }
        }
        let name = self.name(t);
        Ok(self.push(ITensor {
            name,
            shape,
            q,
            data: Some(data),
        }))
    }

    /// Refuses an op that copies codes from `x` into `y` on another grid.
    fn same_grid(&self, x: usize, y: usize) -> R<()> {
        let (a, b) = (self.q(x)?, self.q(y)?);
        if a.ty != b.ty || a.scale != b.scale || a.zero_point != b.zero_point {
            return unsupported(format!(
                "'{}' copied onto another grid ('{}')",
                self.name(x),
                self.name(y)
            ));
        }
        Ok(())
    }

    /// Ops one after another from `x` to `y` through hidden tensors on `x`'s grid (each
    /// step's shape; the last step writes `y`).
    fn chain(&mut self, node: &str, x: usize, steps: Vec<(OpKind, Vec<usize>)>, y: usize) {
        let q = self.prog.tensors[x].q.clone();
        let (mut cur, last) = (x, steps.len().saturating_sub(1));
        for (k, (kind, shape)) in steps.into_iter().enumerate() {
            let next = if k == last {
                y
            } else {
                self.push(ITensor {
                    name: format!("{node}:{k}"),
                    shape,
                    q: q.clone(),
                    data: None,
                })
            };
            self.op(node, kind, vec![cur], vec![next]);
            cur = next;
        }
    }

    fn is_const(&self, t: usize) -> bool {
        self.raw(t).is_some()
    }

    /// An output tensor in `layout`: the file's name, or `name:nchw` before the Transpose
    /// that gives a graph output its file layout.
    fn out(&mut self, t: usize, layout: Layout) -> R<usize> {
        let shape = self.shape(t);
        let (shape, name) = match layout {
            Layout::Nhwc => (shape, self.name(t)),
            Layout::Nchw => {
                if shape.len() != 4 {
                    return invalid(format!("'{}' must have rank 4", self.name(t)));
                }
                let n = if self.outputs.contains(&t) {
                    format!("{}:nchw", self.name(t))
                } else {
                    self.name(t)
                };
                (permute(&shape, &TO_NCHW), n)
            }
        };
        let q = self.q(t)?;
        let id = self.push(ITensor {
            name,
            shape,
            q,
            data: None,
        });
        match layout {
            Layout::Nhwc => self.nhwc[t] = Some(id),
            Layout::Nchw => self.nchw[t] = Some(id),
        }
        Ok(id)
    }

    fn get(&mut self, t: usize, layout: Layout) -> R<usize> {
        if self.is_const(t) {
            return self.constant(t, layout);
        }
        let (have, other, perm, suffix) = match layout {
            Layout::Nhwc => (self.nhwc[t], self.nchw[t], TO_NHWC, "nhwc"),
            Layout::Nchw => (self.nchw[t], self.nhwc[t], TO_NCHW, "nchw"),
        };
        if let Some(id) = have {
            return Ok(id);
        }
        let Some(src) = other else {
            if self.dequantized[t].is_some() || self.pending[t].is_some() {
                return unsupported(format!(
                    "float32 '{}' read by an op that has no float32 form here",
                    self.name(t)
                ));
            }
            return invalid(format!("'{}' is read before it is computed", self.name(t)));
        };
        let st = self.prog.tensors[src].clone();
        if st.shape.len() != 4 {
            return invalid(format!("'{}' must have rank 4", self.name(t)));
        }
        let name = if layout == Layout::Nhwc && self.outputs.contains(&t) {
            self.name(t)
        } else {
            format!("{}:{suffix}", self.name(t))
        };
        let id = self.push(ITensor {
            name: name.clone(),
            shape: permute(&st.shape, &perm),
            q: st.q,
            data: None,
        });
        self.op(&name, OpKind::Transpose { perm: perm.to_vec() }, vec![src], vec![id]);
        match layout {
            Layout::Nhwc => self.nhwc[t] = Some(id),
            Layout::Nchw => self.nchw[t] = Some(id),
        }
        Ok(id)
    }

    /// NCHW when the output is rank 4, every computed input is rank 4 and one of them is
    /// already NCHW.
    fn elementwise_layout(&self, ins: &[usize], out: usize) -> Layout {
        if self.shape(out).len() != 4 {
            return Layout::Nhwc;
        }
        let computed: Vec<usize> = ins.iter().copied().filter(|&t| !self.is_const(t)).collect();
        let ok = !computed.is_empty()
            && computed.iter().all(|&t| self.shape(t).len() == 4)
            && ins.iter().all(|&t| self.shape(t).len() <= 4)
            && computed.iter().any(|&t| self.nchw[t].is_some());
        if ok { Layout::Nchw } else { Layout::Nhwc }
    }

    fn run(&mut self) {
        let sg = &self.file.model.subgraphs.as_deref().unwrap_or_default()[self.file.subgraph];
        for &t in sg.inputs.iter().flatten() {
            match self.out(t as usize, Layout::Nhwc) {
                Ok(id) => self.prog.inputs.push(id),
                Err(Why::Invalid(m) | Why::Unsupported(m)) => {
                    self.errors.push(format!("input '{}': {m}", self.name(t as usize)));
                }
            }
        }
        for (k, op) in sg.operators.iter().flatten().enumerate() {
            let code = &self.codes[op.opcode_index as usize];
            let outs = op.outputs.as_deref().unwrap_or_default();
            let node = outs
                .first()
                .map_or_else(|| format!("operator {k}"), |&t| self.name(t as usize));
            let poisoned = op
                .inputs
                .iter()
                .flatten()
                .any(|&t| usize::try_from(t).is_ok_and(|t| self.poisoned[t]));
            if poisoned {
                self.downstream += 1;
                for &t in outs {
                    self.poisoned[t as usize] = true;
                }
                continue;
            }
            let result = self.convert(op, code, &node);
            if result.is_err() {
                for &t in outs {
                    self.poisoned[t as usize] = true;
                }
            }
            match result {
                Ok(()) => {}
                Err(Why::Unsupported(why)) => {
                    let name = op_name(code);
                    self.unsupported.push(UnsupportedOp {
                        node,
                        op: if why.is_empty() {
                            name
                        } else {
                            format!("{name} ({why})")
                        },
                    });
                }
                Err(Why::Invalid(why)) => {
                    self.errors
                        .push(format!("operator {k} ({}) making '{node}': {why}", op_name(code)));
                }
            }
        }
        if !self.unsupported.is_empty() || !self.errors.is_empty() {
            return;
        }
        for t in self.outputs.clone() {
            match self.get(t, Layout::Nhwc) {
                Ok(id) => self.prog.outputs.push(id),
                Err(Why::Invalid(m) | Why::Unsupported(m)) => {
                    self.errors.push(format!("output '{}': {m}", self.name(t)));
                }
            }
        }
        // A float input quantized on entry (an output dequantized on exit) keeps the file's
        // name: the program takes (gives) its codes, or floats with `--dequantize`.
        let file_io = sg.inputs.iter().flatten().zip(self.prog.inputs.clone());
        let file_io = file_io.chain(sg.outputs.iter().flatten().zip(self.prog.outputs.clone()));
        for (&t, id) in file_io.collect::<Vec<_>>() {
            let name = self.name(t as usize);
            if self.prog.tensors[id].name != name && self.prog.tensor_id(&name).is_none() {
                self.prog.tensors[id].name = name;
            }
        }
    }

    /// The operands of a float op: each a DEQUANTIZE of an integer activation (the integer
    /// tensor), a float32, boolean or plain int32 tensor computed before (itself), or a
    /// float32 or int32 constant (itself); `None` otherwise.
    fn float_operands(&self, ins: &[Option<usize>]) -> Option<Vec<usize>> {
        ins.iter()
            .map(|&t| {
                let t = t?;
                let ty = self.tensors[t].type_;
                let plain = matches!(ty, fb::TensorType::FLOAT32 | fb::TensorType::BOOL)
                    || ty == fb::TensorType::INT32 && quant_of(&self.tensors[t]).is_none();
                if let Some(x) = self.dequantized[t] {
                    Some(x)
                } else if plain && (self.nhwc[t].is_some() || self.is_const(t) && ty != fb::TensorType::BOOL) {
                    Some(t)
                } else {
                    None
                }
            })
            .collect()
    }

    /// A TFLite float op as one of ours: the op and the inputs that are its operands (a
    /// reduction's axes become the op's); `None` when `code` has no float32 form here.
    fn float_op(
        &self,
        code: B,
        op: &fb::OperatorT,
        ins: &[Option<usize>],
        o: usize,
    ) -> R<Option<(FloatOp, Vec<Option<usize>>)>> {
        use crate::program::{BinaryFn as Bf, ReduceFn as Rf, UnaryFn as Uf};
        let opts = &op.builtin_options;
        let fused = match code {
            B::ADD => opts.as_add_options().map(|a| a.fused_activation_function),
            B::SUB => opts.as_sub_options().map(|a| a.fused_activation_function),
            B::MUL => opts.as_mul_options().map(|a| a.fused_activation_function),
            B::DIV => opts.as_div_options().map(|a| a.fused_activation_function),
            _ => None,
        };
        if fused.is_some_and(|f| f != fb::ActivationFunctionType::NONE) {
            return unsupported("a fused activation on a float32 op");
        }
        let unary = |f| Some((FloatOp::Unary { f }, ins.get(..1).unwrap_or_default().to_vec()));
        let binary = |f| Some((FloatOp::Binary { f }, ins.to_vec()));
        Ok(match code {
            B::EXP => unary(Uf::Exp),
            B::LOG => unary(Uf::Log),
            B::SQRT => unary(Uf::Sqrt),
            B::RSQRT => unary(Uf::Rsqrt),
            B::TANH => unary(Uf::Tanh),
            B::LOGISTIC => unary(Uf::Logistic),
            B::NEG => unary(Uf::Neg),
            B::ABS => unary(Uf::Abs),
            B::RELU => unary(Uf::Relu),
            B::ADD => binary(Bf::Add),
            B::SUB => binary(Bf::Sub),
            B::MUL => binary(Bf::Mul),
            B::MAXIMUM => binary(Bf::Maximum),
            B::MINIMUM => binary(Bf::Minimum),
            B::SQUARED_DIFFERENCE => binary(Bf::SquaredDifference),
            B::HARD_SWISH => Some((FloatOp::HardSwish, ins.to_vec())),
            B::EQUAL => Some((FloatOp::Equal, ins.to_vec())),
            B::SELECT_V2 => Some((FloatOp::Where, ins.to_vec())),
            B::CAST => Some((FloatOp::Cast, ins.to_vec())),
            B::DIV => {
                let one = |t: Option<usize>| {
                    t.is_some_and(|t| {
                        self.is_const(t)
                            && self.tensors[t].type_ == fb::TensorType::FLOAT32
                            && self
                                .codes_of(t)
                                .is_ok_and(|c| c.iter().all(|&v| v == i64::from(1.0f32.to_bits())))
                    })
                };
                if one(ins.first().copied().flatten()) {
                    Some((FloatOp::Reciprocal, ins.get(1..2).unwrap_or_default().to_vec()))
                } else {
                    Some((FloatOp::Div, ins.to_vec()))
                }
            }
            B::SOFTMAX => {
                if opts.as_softmax_options().is_some_and(|s| s.beta != 1.0) {
                    return unsupported("a float32 SOFTMAX with beta other than 1");
                }
                Some((FloatOp::Softmax, ins.get(..1).unwrap_or_default().to_vec()))
            }
            B::SUM | B::REDUCE_MAX | B::REDUCE_MIN | B::MEAN => {
                let f = match code {
                    B::SUM => Rf::Sum,
                    B::REDUCE_MAX => Rf::Max,
                    B::REDUCE_MIN => Rf::Min,
                    _ => Rf::Mean,
                };
                let (Some(Some(x)), Some(Some(a))) = (ins.first(), ins.get(1)) else {
                    return invalid("a reduction needs its input and axes");
                };
                let rank = self.shape(*x).len();
                let mut axes = self.axes_of(*x, *a)?;
                if axes.iter().any(|&d| d >= rank) {
                    return invalid(format!("reduction axes {axes:?} of a rank-{rank} tensor"));
                }
                axes.sort_unstable();
                axes.dedup();
                let kept = self.shape(o).len() == rank;
                if !kept && self.shape(o).len() + axes.len() != rank {
                    return invalid("the reduced shape does not match the axes");
                }
                Some((FloatOp::Reduce { f, axes }, vec![Some(*x)]))
            }
            _ => None,
        })
    }

    /// An operator as a float op with its operands: one [`Self::float_op`] knows, every
    /// operand a [`Self::float_operands`] one, its output float32 (boolean for EQUAL);
    /// `None` otherwise.
    fn float_form(
        &self,
        code: B,
        op: &fb::OperatorT,
        ins: &[Option<usize>],
        o: usize,
    ) -> R<Option<(FloatOp, Vec<usize>)>> {
        let out_ty = self.tensors[o].type_;
        let out_ok = if code == B::EQUAL {
            out_ty == fb::TensorType::BOOL
        } else {
            out_ty == fb::TensorType::FLOAT32
        };
        if !out_ok {
            return Ok(None);
        }
        let Some((fop, list)) = self.float_op(code, op, ins, o)? else {
            return Ok(None);
        };
        Ok(self.float_operands(&list).map(|list| (fop, list)))
    }

    /// Weights (OIHW codes, per-output-channel scales on axis 0) and an int32 bias.
    fn conv_weights(&mut self, w: usize, bias: Option<usize>, perm: &[usize], x: usize) -> R<(usize, usize)> {
        let shape = self.shape(w);
        let data = permute_codes(&self.codes_of(w)?, &shape, perm);
        let out_shape = permute(&shape, perm);
        let channels = out_shape[0];
        let mut q = self.q(w)?;
        if q.zero_point.iter().any(|&z| z != 0) {
            return unsupported("weights with a zero point");
        }
        if q.scale.len() == 1 {
            q.scale = vec![q.scale[0]; channels];
            q.zero_point = vec![0; channels];
        } else if q.scale.len() != channels {
            return invalid(format!("{} weight scales for {channels} channels", q.scale.len()));
        }
        q.axis = Some(0);
        let s_in = self.q(x)?.scale[0];
        let wscales = q.scale.clone();
        let wt = self.push(ITensor {
            name: self.name(w),
            shape: out_shape,
            q,
            data: Some(data),
        });
        let bias_q = QParams {
            ty: IntType::I32,
            scale: wscales
                .iter()
                .map(|&s| (f64::from(s_in) * f64::from(s)) as f32)
                .collect(),
            zero_point: vec![0; channels],
            axis: Some(0),
        };
        let (name, data) = match bias {
            Some(b) => {
                let d = self.codes_of(b)?;
                if d.len() != channels {
                    return invalid(format!("{} bias values for {channels} channels", d.len()));
                }
                (self.name(b), d)
            }
            None => (format!("{}:bias", self.name(w)), vec![0; channels]),
        };
        let ty = bias.map_or(IntType::I32, |b| {
            if self.tensors[b].type_ == fb::TensorType::INT64 {
                IntType::I64
            } else {
                IntType::I32
            }
        });
        let bt = self.push(ITensor {
            name,
            shape: vec![channels],
            q: QParams { ty, ..bias_q },
            data: Some(data),
        });
        Ok((wt, bt))
    }

    #[expect(clippy::too_many_lines, reason = "one arm per operator reads as a table")]
    fn convert(&mut self, op: &fb::OperatorT, code: &fb::OperatorCodeT, node: &str) -> R<()> {
        let ins: Vec<Option<usize>> = op.inputs.iter().flatten().map(|&t| usize::try_from(t).ok()).collect();
        let outs: Vec<usize> = op.outputs.iter().flatten().map(|&t| t as usize).collect();
        let req = |k: usize| {
            ins.get(k)
                .copied()
                .flatten()
                .ok_or_else(|| Why::Invalid(format!("input {k} is missing")))
        };
        let o = *outs.first().ok_or_else(|| Why::Invalid("no output".into()))?;
        let opts = &op.builtin_options;
        let code = builtin(code);
        let float = self.float_form(code, op, &ins, o)?;
        match code {
            B::QUANTIZE if self.pending[req(0)?].is_some() => {
                // The end of a float island: the float op that makes its only input writes
                // the codes.
                let (fop, list) = self.pending[req(0)?].clone().unwrap_or_else(|| unreachable!());
                let mut xs = Vec::new();
                for t in list {
                    xs.push(self.get(t, Layout::Nhwc)?);
                }
                let y = self.out(o, Layout::Nhwc)?;
                self.op(node, OpKind::Float { op: fop }, xs, vec![y]);
            }
            _ if float.is_some() => {
                let (fop, list) = float.unwrap_or_else(|| unreachable!());
                if self.quantize_only[o] {
                    self.pending[o] = Some((fop, list));
                } else {
                    // Read by float ops (or a graph output): a float32 (boolean) tensor.
                    let mut xs = Vec::new();
                    for t in list {
                        xs.push(self.get(t, Layout::Nhwc)?);
                    }
                    let y = self.out(o, Layout::Nhwc)?;
                    self.op(node, OpKind::Float { op: fop }, xs, vec![y]);
                }
            }
            B::CONV_2D | B::DEPTHWISE_CONV_2D => {
                let (x, w) = (req(0)?, req(1)?);
                let bias = ins.get(2).copied().flatten();
                let (xs, ws) = (self.shape(x), self.shape(w));
                if xs.len() != 4 || ws.len() != 4 {
                    return invalid("convolution input and weights must have rank 4");
                }
                let depthwise = code == B::DEPTHWISE_CONV_2D;
                let (pad, sh, sw, dh, dw, act) = if let Some(c) = opts.as_conv_2_doptions() {
                    (
                        c.padding,
                        c.stride_h,
                        c.stride_w,
                        c.dilation_h_factor,
                        c.dilation_w_factor,
                        c.fused_activation_function,
                    )
                } else if let Some(c) = opts.as_depthwise_conv_2_doptions() {
                    (
                        c.padding,
                        c.stride_h,
                        c.stride_w,
                        c.dilation_h_factor,
                        c.dilation_w_factor,
                        c.fused_activation_function,
                    )
                } else {
                    return invalid("no convolution options");
                };
                let [sh, sw, dh, dw] = [sh, sw, dh, dw].map(|v| usize::try_from(v).unwrap_or(1).max(1));
                let groups = if depthwise { xs[3] } else { xs[3] / ws[3].max(1) };
                let (t0, b0) = same_pad(pad, xs[1], ws[1], sh, dh);
                let (l0, r0) = same_pad(pad, xs[2], ws[2], sw, dw);
                let xi = self.get(x, Layout::Nchw)?;
                let (wt, bt) = self.conv_weights(w, bias, if depthwise { &[3, 0, 1, 2] } else { &TO_NCHW }, x)?;
                let y = self.out(o, Layout::Nchw)?;
                let kind = OpKind::Conv {
                    strides: [sh, sw],
                    dilations: [dh, dw],
                    pads: [t0, l0, b0, r0],
                    groups,
                    act: act_of(act)?,
                };
                self.op(node, kind, vec![xi, wt, bt], vec![y]);
            }
            B::FULLY_CONNECTED => {
                let (x, w) = (req(0)?, req(1)?);
                let bias = ins.get(2).copied().flatten();
                let Some(c) = opts.as_fully_connected_options() else {
                    return invalid("no FullyConnectedOptions");
                };
                if self.shape(w).len() != 2 {
                    return invalid("fully-connected weights must have rank 2");
                }
                let xi = self.get(x, Layout::Nhwc)?;
                let (wt, bt) = self.conv_weights(w, bias, &[0, 1], x)?;
                let y = self.out(o, Layout::Nhwc)?;
                self.op(
                    node,
                    OpKind::FullyConnected {
                        act: act_of(c.fused_activation_function)?,
                    },
                    vec![xi, wt, bt],
                    vec![y],
                );
            }
            B::ADD | B::SUB | B::MUL => {
                let (x, z) = (req(0)?, req(1)?);
                let act = match code {
                    B::ADD => opts.as_add_options().map(|a| a.fused_activation_function),
                    B::SUB => opts.as_sub_options().map(|a| a.fused_activation_function),
                    _ => opts.as_mul_options().map(|a| a.fused_activation_function),
                }
                .unwrap_or(fb::ActivationFunctionType::NONE);
                let act = act_of(act)?;
                let layout = self.elementwise_layout(&[x, z], o);
                let a = self.get(x, layout)?;
                let b = self.get(z, layout)?;
                let y = self.out(o, layout)?;
                let kind = match code {
                    B::ADD => OpKind::Add { act },
                    B::SUB => OpKind::Sub { act },
                    _ => OpKind::Mul { act },
                };
                self.op(node, kind, vec![a, b], vec![y]);
            }
            B::RELU | B::RELU6 | B::RELU_N1_TO_1 | B::LOGISTIC | B::TANH | B::HARD_SWISH => {
                let x = req(0)?;
                let layout = self.elementwise_layout(&[x], o);
                let xi = self.get(x, layout)?;
                let y = self.out(o, layout)?;
                let kind = match code {
                    B::RELU => OpKind::Relu { act: Act::Relu },
                    B::RELU6 => OpKind::Relu { act: Act::Relu6 },
                    B::RELU_N1_TO_1 => OpKind::Relu { act: Act::ReluN1To1 },
                    B::LOGISTIC => OpKind::Logistic,
                    B::TANH => OpKind::Tanh,
                    _ => OpKind::HardSwish,
                };
                self.op(node, kind, vec![xi], vec![y]);
            }
            B::SQRT | B::RSQRT | B::LOG | B::EXP => {
                let x = req(0)?;
                let layout = self.elementwise_layout(&[x], o);
                let xi = self.get(x, layout)?;
                let y = self.out(o, layout)?;
                let kind = match code {
                    B::SQRT => OpKind::Sqrt,
                    B::RSQRT => OpKind::Rsqrt,
                    B::LOG => OpKind::Log,
                    _ => OpKind::Exp,
                };
                self.op(node, kind, vec![xi], vec![y]);
            }
            B::SQUARED_DIFFERENCE => {
                let (x, z) = (req(0)?, req(1)?);
                let layout = self.elementwise_layout(&[x, z], o);
                let a = self.get(x, layout)?;
                let b = self.get(z, layout)?;
                let y = self.out(o, layout)?;
                self.op(node, OpKind::SquaredDifference, vec![a, b], vec![y]);
            }
            B::MAXIMUM | B::MINIMUM => {
                let (x, z) = (req(0)?, req(1)?);
                let (qx, qz, qy) = (self.q(x)?, self.q(z)?, self.q(o)?);
                let same = |a: &QParams, b: &QParams| a.scale == b.scale && a.zero_point == b.zero_point;
                if !same(&qx, &qy) || !same(&qz, &qy) {
                    return unsupported("inputs on another grid than the output");
                }
                let layout = self.elementwise_layout(&[x, z], o);
                let a = self.get(x, layout)?;
                let b = self.get(z, layout)?;
                let y = self.out(o, layout)?;
                let which = if code == B::MAXIMUM { Extreme::Max } else { Extreme::Min };
                let kind = OpKind::Extremum { which };
                self.op(node, kind, vec![a, b], vec![y]);
            }
            B::REDUCE_MAX | B::REDUCE_MIN => {
                let (x, a) = (req(0)?, req(1)?);
                let axes = self.axes_of(x, a)?;
                let xi = self.get(x, Layout::Nhwc)?;
                let y = self.out(o, Layout::Nhwc)?;
                let which = if code == B::REDUCE_MAX {
                    Extreme::Max
                } else {
                    Extreme::Min
                };
                let kind = OpKind::Reduce { which, axes };
                self.op(node, kind, vec![xi], vec![y]);
            }
            B::BATCH_MATMUL => {
                let (x, z) = (req(0)?, req(1)?);
                if opts.as_batch_mat_mul_options().is_some_and(|b| b.adj_x || b.adj_y) {
                    return unsupported("adjoint operands");
                }
                let a = self.get(x, Layout::Nhwc)?;
                let b = self.get(z, Layout::Nhwc)?;
                let y = self.out(o, Layout::Nhwc)?;
                self.op(node, OpKind::BatchMatMul, vec![a, b], vec![y]);
            }
            B::MAX_POOL_2D | B::AVERAGE_POOL_2D => {
                let x = req(0)?;
                let Some(p) = opts.as_pool_2_doptions() else {
                    return invalid("no Pool2DOptions");
                };
                let xs = self.shape(x);
                if xs.len() != 4 {
                    return invalid("pooling input must have rank 4");
                }
                let [sh, sw, kh, kw] = [p.stride_h, p.stride_w, p.filter_height, p.filter_width]
                    .map(|v| usize::try_from(v).unwrap_or(1).max(1));
                let (t0, b0) = same_pad(p.padding, xs[1], kh, sh, 1);
                let (l0, r0) = same_pad(p.padding, xs[2], kw, sw, 1);
                let xi = self.get(x, Layout::Nchw)?;
                let y = self.out(o, Layout::Nchw)?;
                let act = act_of(p.fused_activation_function)?;
                let (kernel, strides, pads) = ([kh, kw], [sh, sw], [t0, l0, b0, r0]);
                let kind = OpKind::Pool {
                    kind: if code == B::MAX_POOL_2D {
                        PoolKind::Max
                    } else {
                        PoolKind::Avg
                    },
                    kernel,
                    strides,
                    pads,
                    act,
                };
                self.op(node, kind, vec![xi], vec![y]);
            }
            B::PAD | B::PADV2 | B::MIRROR_PAD => {
                let (x, p) = (req(0)?, req(1)?);
                let pads = self.codes_of(p)?;
                let rank = self.shape(x).len();
                if pads.len() != 2 * rank || pads.iter().any(|&v| v < 0) {
                    return invalid(format!("paddings {pads:?} for rank {rank}"));
                }
                let layout = if rank == 4 && self.nchw[x].is_some() {
                    Layout::Nchw
                } else {
                    Layout::Nhwc
                };
                let order: Vec<usize> = if layout == Layout::Nchw {
                    TO_NCHW.to_vec()
                } else {
                    (0..rank).collect()
                };
                let per_axis: Vec<[usize; 2]> = order
                    .iter()
                    .map(|&a| [pads[2 * a] as usize, pads[2 * a + 1] as usize])
                    .collect();
                let xq = self.q(x)?;
                let mode = if code == B::MIRROR_PAD {
                    let m = opts
                        .as_mirror_pad_options()
                        .map_or(fb::MirrorPadMode::REFLECT, |m| m.mode);
                    if m != fb::MirrorPadMode::REFLECT {
                        return unsupported("SYMMETRIC mirror padding");
                    }
                    PadMode::Reflect
                } else {
                    PadMode::Constant(match ins.get(2).copied().flatten() {
                        Some(c) => *self
                            .codes_of(c)?
                            .first()
                            .ok_or_else(|| Why::Invalid("empty pad value".into()))?
                            as i32,
                        None => xq.zp(),
                    })
                };
                let xi = self.get(x, layout)?;
                let y = self.out(o, layout)?;
                self.op(node, OpKind::Pad { pads: per_axis, mode }, vec![xi], vec![y]);
            }
            B::CONCATENATION => {
                let Some(c) = opts.as_concatenation_options() else {
                    return invalid("no ConcatenationOptions");
                };
                if act_of(c.fused_activation_function)? != Act::None {
                    return unsupported("a fused activation");
                }
                let list: Vec<usize> = ins.iter().copied().flatten().collect();
                let yq = self.q(o)?;
                for &t in &list {
                    let q = self.q(t)?;
                    if q.scale != yq.scale || q.zero_point != yq.zero_point {
                        return unsupported("inputs on another grid than the output");
                    }
                }
                let rank = self.shape(o).len() as i32;
                let axis = if c.axis < 0 { c.axis + rank } else { c.axis };
                let axis = usize::try_from(axis).map_err(|_| Why::Invalid(format!("axis {}", c.axis)))?;
                let layout = self.elementwise_layout(&list, o);
                let mut xs = Vec::new();
                for &t in &list {
                    xs.push(self.get(t, layout)?);
                }
                let axis = if layout == Layout::Nchw {
                    [0, 2, 3, 1][axis.min(3)]
                } else {
                    axis
                };
                let y = self.out(o, layout)?;
                self.op(node, OpKind::Concat { axis }, xs, vec![y]);
            }
            B::RESHAPE | B::SQUEEZE | B::EXPAND_DIMS => {
                let x = req(0)?;
                let (xq, yq) = (self.q(x)?, self.q(o)?);
                if xq.scale != yq.scale || xq.zero_point != yq.zero_point {
                    return unsupported("a reshape onto another grid");
                }
                let xi = self.get(x, Layout::Nhwc)?;
                let y = self.out(o, Layout::Nhwc)?;
                self.op(node, OpKind::Reshape, vec![xi], vec![y]);
            }
            B::TRANSPOSE => {
                let (x, p) = (req(0)?, req(1)?);
                let perm: Vec<usize> = self.codes_of(p)?.iter().map(|&v| v as usize).collect();
                let xi = self.get(x, Layout::Nhwc)?;
                let y = self.out(o, Layout::Nhwc)?;
                self.op(node, OpKind::Transpose { perm }, vec![xi], vec![y]);
            }
            B::SOFTMAX => {
                let x = req(0)?;
                let beta = opts.as_softmax_options().map_or(1.0, |s| s.beta);
                let xi = self.get(x, Layout::Nhwc)?;
                let y = self.out(o, Layout::Nhwc)?;
                self.op(node, OpKind::Softmax { beta }, vec![xi], vec![y]);
            }
            B::MEAN => {
                let (x, a) = (req(0)?, req(1)?);
                let axes = self.axes_of(x, a)?;
                let xi = self.get(x, Layout::Nhwc)?;
                let y = self.out(o, Layout::Nhwc)?;
                self.op(node, OpKind::Mean { axes }, vec![xi], vec![y]);
            }
            B::QUANTIZE => {
                let x = req(0)?;
                if self.tensors[x].type_ == fb::TensorType::FLOAT32 {
                    // A float graph input quantized on entry: the program takes the codes (or
                    // floats, quantized as QUANTIZE does) at the quantized tensor.
                    let pos = self.prog.inputs.iter().position(|&i| Some(i) == self.nhwc[x]);
                    let Some(pos) = pos else {
                        // A float32 tensor other float ops read too: its codes by a float
                        // copy whose output is quantized as QUANTIZE does.
                        let xi = self.get(x, Layout::Nhwc)?;
                        let y = self.out(o, Layout::Nhwc)?;
                        self.op(node, OpKind::Float { op: FloatOp::Cast }, vec![xi], vec![y]);
                        return Ok(());
                    };
                    let y = self.out(o, Layout::Nhwc)?;
                    let float = std::mem::replace(&mut self.prog.inputs[pos], y);
                    // Unused now; its name goes to the codes (see `run`).
                    self.prog.tensors[float].name.push_str(":float");
                    return Ok(());
                }
                let layout = if self.nchw[x].is_some() {
                    Layout::Nchw
                } else {
                    Layout::Nhwc
                };
                let xi = self.get(x, layout)?;
                let y = self.out(o, layout)?;
                self.op(node, OpKind::Requantize, vec![xi], vec![y]);
            }
            B::DEQUANTIZE => {
                let x = req(0)?;
                if !self.outputs.contains(&o) {
                    // The start of a float island.
                    if self.is_const(x) {
                        return unsupported("a DEQUANTIZE of a constant");
                    }
                    self.dequantized[o] = Some(x);
                    return Ok(());
                }
                // A graph output dequantized on exit: the program ends at the codes.
                let pos = self.outputs.iter().position(|&t| t == o).unwrap_or(0);
                self.outputs[pos] = x;
            }
            B::STRIDED_SLICE => {
                let x = req(0)?;
                let (begin, end) = (self.codes_of(req(1)?)?, self.codes_of(req(2)?)?);
                let strides = match ins.get(3).copied().flatten() {
                    Some(t) => self.codes_of(t)?,
                    None => vec![1; begin.len()],
                };
                let Some(so) = opts.as_strided_slice_options() else {
                    return invalid("no StridedSliceOptions");
                };
                if so.ellipsis_mask != 0 || so.new_axis_mask != 0 {
                    return unsupported("ellipsis or new-axis mask");
                }
                let xs = self.shape(x);
                if begin.len() != end.len() || begin.len() != strides.len() || begin.len() > xs.len() {
                    return invalid("begin, end and strides must have one value per sliced axis");
                }
                let mut axes = Vec::new();
                let mut sliced = xs.clone();
                for i in 0..begin.len() {
                    let (d, bit) = (xs[i] as i64, 1 << i);
                    let mut st = strides[i];
                    if st == 0 {
                        return invalid(format!("stride 0 on axis {i}"));
                    }
                    let norm = |v: i64| if v < 0 { v + d } else { v };
                    let clamp = |v: i64, s: i64| if s > 0 { v.clamp(0, d) } else { v.clamp(-1, d - 1) };
                    let mut b = if so.begin_mask & bit != 0 {
                        if st > 0 { 0 } else { d - 1 }
                    } else {
                        clamp(norm(begin[i]), st)
                    };
                    let mut e = if so.end_mask & bit != 0 {
                        if st > 0 { d } else { -1 }
                    } else if so.offset {
                        clamp(b + end[i], st)
                    } else {
                        clamp(norm(end[i]), st)
                    };
                    if so.shrink_axis_mask & bit != 0 {
                        b = norm(begin[i]);
                        e = b + 1;
                        st = 1;
                    }
                    let (span, step) = if st > 0 {
                        ((e - b).max(0), st)
                    } else {
                        ((b - e).max(0), -st)
                    };
                    let count = (span + step - 1) / step;
                    if count > 0 && !(0..d).contains(&b) {
                        return invalid(format!("axis {i} starts at {b} of {d}"));
                    }
                    sliced[i] = count as usize;
                    axes.push(SliceAxis {
                        axis: i,
                        first: b.max(0) as usize,
                        count: count as usize,
                        step: st as isize,
                    });
                }
                let xi = self.get(x, Layout::Nhwc)?;
                let q = self.q(o)?;
                if sliced == self.shape(o) {
                    let y = self.out(o, Layout::Nhwc)?;
                    self.op(node, OpKind::Slice { axes }, vec![xi], vec![y]);
                } else {
                    let mid = self.push(ITensor {
                        name: format!("{node}:slice"),
                        shape: sliced,
                        q,
                        data: None,
                    });
                    self.op(&format!("{node}:slice"), OpKind::Slice { axes }, vec![xi], vec![mid]);
                    let y = self.out(o, Layout::Nhwc)?;
                    self.op(node, OpKind::Reshape, vec![mid], vec![y]);
                }
            }
            B::DEPTH_TO_SPACE | B::SPACE_TO_DEPTH => {
                // NHWC block moves as RESHAPE to rank 6, TRANSPOSE of the two middle axes,
                // RESHAPE: the codes copied, as the reference kernels copy them.
                let x = req(0)?;
                self.same_grid(x, o)?;
                let b = if code == B::DEPTH_TO_SPACE {
                    opts.as_depth_to_space_options().map_or(0, |d| d.block_size)
                } else {
                    opts.as_space_to_depth_options().map_or(0, |d| d.block_size)
                };
                let b = usize::try_from(b)
                    .ok()
                    .filter(|&b| b > 0)
                    .ok_or(Why::Invalid(format!("block size {b}")))?;
                let [n, h, w, c] = <[usize; 4]>::try_from(self.shape(x).as_slice())
                    .map_err(|_| Why::Invalid("the input is not rank 4".into()))?;
                let split = if code == B::DEPTH_TO_SPACE {
                    if c % (b * b) != 0 {
                        return invalid(format!("{c} channels in blocks of {b}×{b}"));
                    }
                    vec![n, h, w, b, b, c / (b * b)]
                } else {
                    if h % b != 0 || w % b != 0 {
                        return invalid(format!("{h}×{w} in blocks of {b}×{b}"));
                    }
                    vec![n, h / b, b, w / b, b, c]
                };
                let perm = vec![0, 1, 3, 2, 4, 5];
                let moved = perm.iter().map(|&p| split[p]).collect();
                let xi = self.get(x, Layout::Nhwc)?;
                let y = self.out(o, Layout::Nhwc)?;
                let steps = vec![
                    (OpKind::Reshape, split),
                    (OpKind::Transpose { perm }, moved),
                    (OpKind::Reshape, vec![]),
                ];
                self.chain(node, xi, steps, y);
            }
            B::TILE => {
                // A RESHAPE with a unit axis before each repeated one, BROADCAST_TO the
                // repeat counts, RESHAPE to the output.
                let x = req(0)?;
                self.same_grid(x, o)?;
                let (xs, ys) = (self.shape(x), self.shape(o));
                let Some((unit, wide)) = crate::program::tile_shapes(&xs, &ys) else {
                    return invalid(format!("output {ys:?} is not a tiling of input {xs:?}"));
                };
                let xi = self.get(x, Layout::Nhwc)?;
                let y = self.out(o, Layout::Nhwc)?;
                let steps = vec![
                    (OpKind::Reshape, unit),
                    (OpKind::BroadcastTo, wide),
                    (OpKind::Reshape, vec![]),
                ];
                self.chain(node, xi, steps, y);
            }
            B::PACK => {
                // Each input RESHAPEd with a unit axis, then CONCATENATION on it.
                let rank = self.shape(o).len();
                let axis = opts.as_pack_options().map_or(0, |p| p.axis);
                let axis = usize::try_from(if axis < 0 { axis + rank as i32 } else { axis })
                    .ok()
                    .filter(|&a| a < rank)
                    .ok_or(Why::Invalid(format!("axis {axis} of a rank-{rank} output")))?;
                let mut parts = Vec::new();
                for k in 0..ins.len() {
                    let x = req(k)?;
                    self.same_grid(x, o)?;
                    let mut shape = self.shape(x);
                    shape.insert(axis, 1);
                    let xi = self.get(x, Layout::Nhwc)?;
                    let q = self.prog.tensors[xi].q.clone();
                    let part = self.push(ITensor {
                        name: format!("{node}:{k}"),
                        shape,
                        q,
                        data: None,
                    });
                    self.op(node, OpKind::Reshape, vec![xi], vec![part]);
                    parts.push(part);
                }
                let y = self.out(o, Layout::Nhwc)?;
                self.op(node, OpKind::Concat { axis }, parts, vec![y]);
            }
            B::UNPACK | B::SPLIT | B::SPLIT_V => {
                // One strided slice per output along the axis (UNPACK: one index, the
                // axis RESHAPEd away).
                let (x, axis_t) = match code {
                    B::SPLIT => (req(1)?, Some(req(0)?)),
                    B::SPLIT_V => (req(0)?, Some(req(2)?)),
                    _ => (req(0)?, None),
                };
                let xs = self.shape(x);
                let rank = xs.len() as i64;
                let axis = match axis_t {
                    Some(a) => match self.codes_of(a)?[..] {
                        [v] => v,
                        _ => return invalid("an axis tensor of more than one value"),
                    },
                    None => i64::from(opts.as_unpack_options().map_or(0, |u| u.axis)),
                };
                let axis = usize::try_from(if axis < 0 { axis + rank } else { axis })
                    .ok()
                    .filter(|&a| a < xs.len())
                    .ok_or(Why::Invalid(format!("axis {axis} of a rank-{rank} input")))?;
                let xi = self.get(x, Layout::Nhwc)?;
                let mut first = 0;
                for &t in &outs {
                    self.same_grid(x, t)?;
                    let count = if code == B::UNPACK {
                        1
                    } else {
                        self.shape(t).get(axis).copied().unwrap_or(0)
                    };
                    if first + count > xs[axis] {
                        return invalid(format!("the outputs take more than {} along axis {axis}", xs[axis]));
                    }
                    let sl = vec![SliceAxis {
                        axis,
                        first,
                        count,
                        step: 1,
                    }];
                    first += count;
                    let y = self.out(t, Layout::Nhwc)?;
                    if code == B::UNPACK {
                        let mut shape = xs.clone();
                        shape[axis] = 1;
                        self.chain(
                            node,
                            xi,
                            vec![(OpKind::Slice { axes: sl }, shape), (OpKind::Reshape, vec![])],
                            y,
                        );
                    } else {
                        self.op(node, OpKind::Slice { axes: sl }, vec![xi], vec![y]);
                    }
                }
                if first != xs[axis] {
                    return invalid(format!("the outputs take {first} of {} along axis {axis}", xs[axis]));
                }
            }
            B::ARG_MAX | B::ARG_MIN => {
                let (x, a) = (req(0)?, req(1)?);
                let out_type = if code == B::ARG_MAX {
                    opts.as_arg_max_options().map(|o| o.output_type)
                } else {
                    opts.as_arg_min_options().map(|o| o.output_type)
                };
                if out_type != Some(fb::TensorType::INT32) {
                    return unsupported("indices out that are not int32");
                }
                let axes = self.axes_of(x, a)?;
                let rank = self.shape(x).len();
                let [axis] = axes[..] else {
                    return invalid("an axis tensor of more than one value");
                };
                if axis >= rank {
                    return invalid(format!("axis {axis} of a rank-{rank} input"));
                }
                let xi = self.get(x, Layout::Nhwc)?;
                if !self.prog.tensors[xi].q.ty.is_quantized() {
                    return unsupported("an input that is not quantized");
                }
                let y = self.out(o, Layout::Nhwc)?;
                let which = if code == B::ARG_MAX { Extreme::Max } else { Extreme::Min };
                self.op(node, OpKind::ArgExtreme { which, axis }, vec![xi], vec![y]);
            }
            B::GATHER => {
                let (x, i) = (req(0)?, req(1)?);
                let Some(c) = opts.as_gather_options() else {
                    return invalid("no GatherOptions");
                };
                if c.batch_dims != 0 {
                    return unsupported("a GATHER with batch_dims");
                }
                let rank = self.shape(x).len() as i32;
                let axis = if c.axis < 0 { c.axis + rank } else { c.axis };
                let axis = usize::try_from(axis)
                    .ok()
                    .filter(|&a| a < rank as usize)
                    .ok_or_else(|| Why::Invalid(format!("axis {} of a rank-{rank} input", c.axis)))?;
                let (xq, yq) = (self.q(x)?, self.q(o)?);
                if xq.scale != yq.scale || xq.zero_point != yq.zero_point {
                    return unsupported("an output on another grid than the input");
                }
                let xi = self.get(x, Layout::Nhwc)?;
                let ii = self.get(i, Layout::Nhwc)?;
                if self.prog.tensors[ii].q.ty != IntType::Index {
                    return unsupported("indices that are not int32");
                }
                let y = self.out(o, Layout::Nhwc)?;
                self.op(node, OpKind::Gather { axis }, vec![xi, ii], vec![y]);
            }
            B::BROADCAST_TO => {
                let x = req(0)?;
                let xi = self.get(x, Layout::Nhwc)?;
                let y = self.out(o, Layout::Nhwc)?;
                self.op(node, OpKind::BroadcastTo, vec![xi], vec![y]);
            }
            B::TRANSPOSE_CONV => {
                let (w, x) = (req(1)?, req(2)?);
                let bias = ins.get(3).copied().flatten();
                let Some(c) = opts.as_transpose_conv_options() else {
                    return invalid("no TransposeConvOptions");
                };
                let (xs, ws, ys) = (self.shape(x), self.shape(w), self.shape(o));
                if xs.len() != 4 || ws.len() != 4 || ys.len() != 4 {
                    return invalid("transposed convolution tensors must have rank 4");
                }
                let [sh, sw] = [c.stride_h, c.stride_w].map(|v| usize::try_from(v).unwrap_or(1).max(1));
                if ys[1] != (xs[1] - 1) * sh + ws[1] || ys[2] != (xs[2] - 1) * sw + ws[2] {
                    return unsupported("padding or an output size other than (in − 1)·stride + kernel");
                }
                let xi = self.get(x, Layout::Nchw)?;
                let (wt, bt) = self.conv_weights(w, bias, &TO_NCHW, x)?;
                let y = self.out(o, Layout::Nchw)?;
                let act = act_of(c.fused_activation_function)?;
                self.op(
                    node,
                    OpKind::TransposeConv { strides: [sh, sw], act },
                    vec![xi, wt, bt],
                    vec![y],
                );
            }
            B::RESIZE_NEAREST_NEIGHBOR => {
                let x = req(0)?;
                let r = opts.as_resize_nearest_neighbor_options();
                if r.is_some_and(|r| r.align_corners || r.half_pixel_centers) {
                    return unsupported("corner alignment or half-pixel centres");
                }
                let xi = self.get(x, Layout::Nchw)?;
                let y = self.out(o, Layout::Nchw)?;
                self.op(node, OpKind::ResizeNearest, vec![xi], vec![y]);
            }
            _ => return unsupported(String::new()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::permute_codes;

    #[test]
    fn codes_permute_like_numpy_transpose() {
        // shape [2, 3]: [[0, 1, 2], [3, 4, 5]] → transposed [[0, 3], [1, 4], [2, 5]]
        assert_eq!(
            permute_codes(&[0, 1, 2, 3, 4, 5], &[2, 3], &[1, 0]),
            vec![0, 3, 1, 4, 2, 5]
        );
        // NHWC [1, 1, 2, 3] → NCHW [1, 3, 1, 2]
        let nhwc: Vec<i64> = (0..6).collect();
        assert_eq!(
            permute_codes(&nhwc, &[1, 1, 2, 3], &[0, 3, 1, 2]),
            vec![0, 3, 1, 4, 2, 5]
        );
    }
}
