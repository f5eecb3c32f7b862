//! TFLite import: flatbuffer → [`Model`].
//!
//! The graph keeps the file's tensors, names and NHWC layout at its boundary: inputs and
//! outputs have the file's names, shapes and types, and every tensor the file computes is a
//! value of the same name. Convolutions, pools, resizes and depth/space moves run in the
//! IR's NCHW layout: the importer puts a `Transpose` where a tensor changes layout, only
//! once per tensor and only where a consumer needs the other layout, and runs element-wise
//! ops, pads, concats and reductions in whichever layout their inputs already have. The
//! model's metadata records it (`layout`, `source.format`), so passes, reports and the
//! compiler know which values are NHWC.
//!
//! Float16 weights (`DEQUANTIZE` of an fp16 constant) and int8/int16 weights with their
//! per-tensor or per-channel scales become float32 constants. Quantized activations keep
//! their grid as a `QuantizeLinear`/`DequantizeLinear` pair with the file's scale and zero
//! point, so a quantized model opens as the QDQ graph it means; the integer program itself
//! comes from [`program`].
//!
//! The signature's subgraph is the graph; IF and WHILE take the file's other subgraphs as
//! an ONNX `If`'s branches and a `Loop`'s body (see `loop_body`).

mod ops;
pub mod program;

use super::{ImportError, ImportReport, LoadOptions, UnsupportedOp};
use crate::ir::{Attr, Constant, DType, Dim, Graph, Metadata, Model, Node, Tensor, Value, ValueId};
use bytes::Bytes;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use tflite_schema as fb;

/// NHWC → NCHW.
pub(crate) const TO_NCHW: [usize; 4] = [0, 3, 1, 2];
/// NCHW → NHWC.
pub(crate) const TO_NHWC: [usize; 4] = [0, 2, 3, 1];

/// Loads a TFLite model; fails listing every unsupported op at once.
pub fn load_with(path: &Path, opts: &LoadOptions) -> Result<(Model, ImportReport), ImportError> {
    let bytes = std::fs::read(path).map_err(|e| ImportError::io(path, e))?;
    from_bytes(&bytes, path, opts)
}

/// The file parsed and unpacked, with its buffers resolved.
pub(crate) struct File {
    pub model: fb::ModelT,
    /// Every buffer's bytes (inline data, or the offset/size region after the flatbuffer).
    pub buffers: Vec<Bytes>,
    /// The subgraph that runs, and the signature it came from.
    pub subgraph: usize,
    pub signature: Option<fb::SignatureDefT>,
}

impl File {
    /// The constant data of a tensor, if its buffer holds any.
    pub(crate) fn data(&self, tensor: &fb::TensorT) -> Option<&[u8]> {
        let b = tensor.buffer as usize;
        if b == 0 {
            return None;
        }
        self.buffers.get(b).filter(|d| !d.is_empty()).map(|d| &d[..])
    }
}

/// SAME/VALID padding of one spatial axis: (before, after), as TFLite computes it.
pub(crate) fn same_pad(
    padding: fb::Padding,
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
) -> (usize, usize) {
    if padding != fb::Padding::SAME {
        return (0, 0);
    }
    let out = input.div_ceil(stride.max(1));
    let eff = (kernel.max(1) - 1) * dilation.max(1) + 1;
    let total = ((out.max(1) - 1) * stride + eff).saturating_sub(input);
    (total / 2, total - total / 2)
}

pub(crate) fn format_err(path: &Path, message: impl Into<String>) -> ImportError {
    ImportError::Format {
        file: path.to_path_buf(),
        message: message.into(),
    }
}

/// Verifies and unpacks the flatbuffer; checks every index the graph uses.
pub(crate) fn parse(bytes: &[u8], path: &Path) -> Result<File, ImportError> {
    let vopts = fb::flatbuffers::VerifierOptions {
        max_depth: 64,
        max_tables: 100_000_000,
        max_apparent_size: 1 << 40,
        ..Default::default()
    };
    let root = fb::root_as_model_with_opts(&vopts, bytes)
        .map_err(|e| format_err(path, format!("not a valid TFLite flatbuffer: {e}")))?;
    let model = root.unpack();
    if model.version != 3 {
        return Err(format_err(
            path,
            format!(
                "TFLite schema version {} (this importer reads version 3)",
                model.version
            ),
        ));
    }
    let mut buffers = Vec::new();
    for (i, b) in model.buffers.iter().flatten().enumerate() {
        if b.offset > 1 {
            let start = usize::try_from(b.offset).unwrap_or(usize::MAX);
            let end = start.checked_add(usize::try_from(b.size).unwrap_or(usize::MAX));
            match end.and_then(|end| bytes.get(start..end)) {
                Some(s) => buffers.push(Bytes::copy_from_slice(s)),
                None => {
                    return Err(format_err(
                        path,
                        format!(
                            "buffer {i} lies at bytes {}..{} past the end of the file ({} bytes)",
                            b.offset,
                            b.offset.saturating_add(b.size),
                            bytes.len()
                        ),
                    ));
                }
            }
        } else {
            buffers.push(Bytes::from(b.data.clone().unwrap_or_default()));
        }
    }
    let subgraphs = model.subgraphs.as_deref().unwrap_or_default();
    if subgraphs.is_empty() {
        return Err(format_err(path, "the model has no subgraph"));
    }
    let signature = model.signature_defs.as_ref().and_then(|s| s.first()).cloned();
    let subgraph = signature.as_ref().map_or(0, |s| s.subgraph_index as usize);
    if subgraph >= subgraphs.len() {
        return Err(format_err(
            path,
            format!(
                "signature refers to subgraph {subgraph}, the model has {}",
                subgraphs.len()
            ),
        ));
    }
    let n_codes = model.operator_codes.as_ref().map_or(0, Vec::len);
    for (s, sg) in subgraphs.iter().enumerate() {
        let tensors = sg.tensors.as_deref().unwrap_or_default();
        let check = |what: &str, list: &[i32], optional: bool| -> Result<(), ImportError> {
            for &t in list {
                if (optional && t == -1) || usize::try_from(t).is_ok_and(|t| t < tensors.len()) {
                    continue;
                }
                return Err(format_err(
                    path,
                    format!("subgraph {s}: {what} refers to tensor {t}; there are {}", tensors.len()),
                ));
            }
            Ok(())
        };
        check("an input", sg.inputs.as_deref().unwrap_or_default(), false)?;
        check("an output", sg.outputs.as_deref().unwrap_or_default(), false)?;
        for (k, op) in sg.operators.iter().flatten().enumerate() {
            if op.opcode_index as usize >= n_codes {
                return Err(format_err(
                    path,
                    format!("subgraph {s} operator {k}: opcode {} of {n_codes}", op.opcode_index),
                ));
            }
            check(&format!("operator {k}"), op.inputs.as_deref().unwrap_or_default(), true)?;
            check(
                &format!("operator {k}"),
                op.outputs.as_deref().unwrap_or_default(),
                false,
            )?;
        }
        for (k, t) in tensors.iter().enumerate() {
            if t.buffer as usize >= buffers.len().max(1) && t.buffer != 0 {
                return Err(format_err(
                    path,
                    format!(
                        "tensor {k} ('{}') uses buffer {} of {}",
                        t.name.as_deref().unwrap_or(""),
                        t.buffer,
                        buffers.len()
                    ),
                ));
            }
            if t.shape.iter().flatten().any(|&d| d < 0) {
                return Err(format_err(
                    path,
                    format!("tensor '{}' has a negative dimension", t.name.as_deref().unwrap_or("")),
                ));
            }
        }
    }
    Ok(File {
        model,
        buffers,
        subgraph,
        signature,
    })
}

/// The op name of an operator code (`CONV_2D`), or `CUSTOM:name`.
pub(crate) fn op_name(code: &fb::OperatorCodeT) -> String {
    let c = builtin(code);
    if c == fb::BuiltinOperator::CUSTOM {
        return format!("CUSTOM:{}", code.custom_code.as_deref().unwrap_or("?"));
    }
    c.variant_name()
        .map_or_else(|| format!("BUILTIN_{}", c.0), str::to_owned)
}

/// The builtin code: the larger of the deprecated 8-bit field and the 32-bit one.
pub(crate) fn builtin(code: &fb::OperatorCodeT) -> fb::BuiltinOperator {
    fb::BuiltinOperator(i32::from(code.deprecated_builtin_code).max(code.builtin_code.0))
}

/// The IR dtype of a TFLite tensor type.
pub(crate) fn dtype(t: fb::TensorType) -> Option<DType> {
    Some(match t {
        fb::TensorType::FLOAT32 => DType::F32,
        fb::TensorType::FLOAT16 => DType::F16,
        fb::TensorType::FLOAT64 => DType::F64,
        fb::TensorType::BFLOAT16 => DType::BF16,
        fb::TensorType::INT32 => DType::I32,
        fb::TensorType::UINT8 => DType::U8,
        fb::TensorType::INT64 => DType::I64,
        fb::TensorType::BOOL => DType::Bool,
        fb::TensorType::INT16 => DType::I16,
        fb::TensorType::INT8 => DType::I8,
        fb::TensorType::UINT32 => DType::U32,
        fb::TensorType::UINT16 => DType::U16,
        fb::TensorType::UINT64 => DType::U64,
        fb::TensorType::INT4 => DType::I4,
        _ => return None,
    })
}

/// A tensor's quantization: per-tensor (`axis` none) or per-channel scales and zero points.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Quant {
    pub scale: Vec<f32>,
    pub zero_point: Vec<i64>,
    pub axis: usize,
    /// The codes' type (`I8`, `U8` or `I16`).
    pub zp_dtype: DType,
}

pub(crate) fn quant_of(t: &fb::TensorT) -> Option<Quant> {
    let q = t.quantization.as_ref()?;
    let scale = q.scale.clone().filter(|s| !s.is_empty())?;
    let mut zero_point = q.zero_point.clone().unwrap_or_default();
    if zero_point.is_empty() {
        zero_point = vec![0; scale.len()];
    }
    Some(Quant {
        scale,
        zero_point,
        axis: usize::try_from(q.quantized_dimension).unwrap_or(0),
        zp_dtype: match dtype(t.type_) {
            Some(d @ (DType::U8 | DType::I16)) => d,
            _ => DType::I8,
        },
    })
}

pub(crate) fn tensor_name(t: &fb::TensorT, k: usize) -> String {
    t.name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("tensor_{k}"))
}

/// Parses a TFLite model from bytes.
pub fn from_bytes(bytes: &[u8], path: &Path, opts: &LoadOptions) -> Result<(Model, ImportReport), ImportError> {
    let file = parse(bytes, path)?;
    let mut report = ImportReport::default();
    let mut b = Builder::new(&file);
    b.run();
    if !b.errors.is_empty() {
        return Err(format_err(path, b.errors.join("\n")));
    }
    if !b.unsupported.is_empty() {
        if opts.allow_unsupported {
            for u in &b.unsupported {
                report
                    .warnings
                    .push(format!("unsupported op {} in node '{}'", u.op, u.node));
            }
        } else {
            return Err(ImportError::Unsupported {
                file: path.to_path_buf(),
                ops: b.unsupported,
            });
        }
    }
    report.warnings.append(&mut b.warnings);
    let mut meta = Metadata {
        ir_version: 8,
        producer_name: "TFLite".into(),
        producer_version: format!("schema {}", file.model.version),
        doc: file.model.description.clone().unwrap_or_default(),
        ..Metadata::default()
    };
    meta.opsets.insert(String::new(), 18);
    meta.props.insert("source.format".into(), "tflite".into());
    meta.props.insert(
        "layout".into(),
        "NHWC at the inputs and outputs, as in the file; convolutions, pools and resizes run NCHW between Transposes"
            .into(),
    );
    if let Some(sig) = &file.signature {
        meta.props
            .insert("signature".into(), sig.signature_key.clone().unwrap_or_default());
        let sg = &file.model.subgraphs.as_deref().unwrap_or_default()[file.subgraph];
        let tensors = sg.tensors.as_deref().unwrap_or_default();
        for (dir, maps) in [("input", &sig.inputs), ("output", &sig.outputs)] {
            for m in maps.iter().flatten() {
                if let (Some(name), Some(t)) = (&m.name, tensors.get(m.tensor_index as usize)) {
                    meta.props.insert(
                        format!("signature.{dir}.{name}"),
                        tensor_name(t, m.tensor_index as usize),
                    );
                }
            }
        }
    }
    if b.fp16_weights {
        meta.props
            .insert("weights.fp16".into(), "dequantized to float32 at import".into());
    }
    let mut graph = b.g;
    drop_unread_constants(&mut graph);
    let mut model = Model { graph, meta };
    model.validate().map_err(|e| ImportError::Invalid {
        file: path.to_path_buf(),
        error: e,
    })?;
    crate::import::shapes::infer(&mut model);
    Ok((model, report))
}

/// The forms a file tensor has in the graph.
#[derive(Clone, Copy, Debug, Default)]
struct Forms {
    nhwc: Option<ValueId>,
    nchw: Option<ValueId>,
}

/// Builds the IR graph from one subgraph.
pub(crate) struct Builder<'f> {
    file: &'f File,
    tensors: &'f [fb::TensorT],
    codes: &'f [fb::OperatorCodeT],
    g: Graph,
    forms: Vec<Forms>,
    names: HashSet<String>,
    node_names: HashSet<String>,
    pub unsupported: Vec<UnsupportedOp>,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    fp16_weights: bool,
    /// The subgraph this builder reads.
    sg_index: usize,
    /// Names the subgraph's inputs take (an IF branch's or a WHILE body's), instead of
    /// the file's tensor names.
    input_names: Vec<String>,
    /// Subgraphs being built around this one (a subgraph that calls itself is refused).
    stack: Vec<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    Nhwc,
    Nchw,
}

impl<'f> Builder<'f> {
    fn new(file: &'f File) -> Self {
        Self::for_subgraph(file, file.subgraph, Vec::new(), vec![file.subgraph])
    }

    fn for_subgraph(file: &'f File, sg_index: usize, input_names: Vec<String>, stack: Vec<usize>) -> Self {
        let sg = &file.model.subgraphs.as_deref().unwrap_or_default()[sg_index];
        let tensors = sg.tensors.as_deref().unwrap_or_default();
        Self {
            file,
            tensors,
            codes: file.model.operator_codes.as_deref().unwrap_or_default(),
            g: Graph {
                name: sg.name.clone().unwrap_or_else(|| "main".into()),
                ..Graph::default()
            },
            forms: vec![Forms::default(); tensors.len()],
            names: HashSet::new(),
            node_names: HashSet::new(),
            unsupported: Vec::new(),
            errors: Vec::new(),
            warnings: Vec::new(),
            fp16_weights: false,
            sg_index,
            input_names,
            stack,
        }
    }

    /// Subgraph `index` as a graph of its own (an IF branch, a WHILE condition or body),
    /// its inputs named `input_names`. Its unsupported ops and errors join this builder's.
    pub(crate) fn subgraph_graph(&mut self, index: usize, input_names: Vec<String>) -> Result<Graph, ops::OpError> {
        use ops::OpError::{Invalid, Unsupported};
        let n = self.file.model.subgraphs.as_deref().unwrap_or_default().len();
        if index >= n {
            return Err(Invalid(format!("subgraph {index} of {n}")));
        }
        if self.stack.contains(&index) {
            return Err(Invalid(format!("subgraph {index} runs itself")));
        }
        let sg = &self.file.model.subgraphs.as_deref().unwrap_or_default()[index];
        let arity = sg.inputs.as_deref().unwrap_or_default().len();
        if arity != input_names.len() {
            return Err(Invalid(format!(
                "subgraph {index} takes {arity} inputs, given {}",
                input_names.len()
            )));
        }
        let mut stack = self.stack.clone();
        stack.push(index);
        let mut b = Builder::for_subgraph(self.file, index, input_names, stack);
        b.run();
        let failed = !b.errors.is_empty() || !b.unsupported.is_empty();
        let sub = sg.name.clone().unwrap_or_else(|| format!("subgraph {index}"));
        self.errors
            .extend(b.errors.into_iter().map(|e| format!("in {sub}: {e}")));
        self.unsupported.extend(b.unsupported.into_iter().map(|mut u| {
            u.node = format!("{sub}/{}", u.node);
            u
        }));
        self.warnings.append(&mut b.warnings);
        self.fp16_weights |= b.fp16_weights;
        if failed {
            return Err(Unsupported(format!("{sub} holds ops listed here")));
        }
        let mut g = b.g;
        drop_unread_constants(&mut g);
        Ok(g)
    }

    fn subgraph(&self) -> &'f fb::SubGraphT {
        &self.file.model.subgraphs.as_deref().unwrap_or_default()[self.sg_index]
    }

    fn run(&mut self) {
        let sg = self.subgraph();
        for (k, &t) in sg.inputs.iter().flatten().enumerate() {
            let t = t as usize;
            let info = &self.tensors[t];
            let name = match self.input_names.get(k) {
                Some(n) => self.unique(n.clone()),
                None => self.unique(tensor_name(info, t)),
            };
            let mut v = Value::new(name);
            v.dtype = dtype(info.type_);
            v.shape = Some(self.signature_shape(t));
            let id = self.push_value(v);
            self.g.inputs.push(id);
            if let Some(q) = self.quant_float(t) {
                // Quantized input: the graph computes on its dequantized values.
                let dq = self.dequantize_linear(id, &q, format!("{}:dq", self.g.values[id].name));
                self.forms[t].nhwc = Some(dq);
            } else {
                self.forms[t].nhwc = Some(id);
            }
        }
        for (k, op) in sg.operators.iter().flatten().enumerate() {
            let code = &self.codes[op.opcode_index as usize];
            if let Err(e) = ops::convert(self, k, op, code) {
                match e {
                    ops::OpError::Unsupported(why) => {
                        let out = op.outputs.as_deref().unwrap_or_default();
                        let node = out.first().map_or_else(
                            || format!("operator {k}"),
                            |&t| tensor_name(&self.tensors[t as usize], t as usize),
                        );
                        let name = op_name(code);
                        self.unsupported.push(UnsupportedOp {
                            node,
                            op: if why.is_empty() {
                                name
                            } else {
                                format!("{name} ({why})")
                            },
                        });
                        self.keep_unsupported(op, code);
                    }
                    ops::OpError::Invalid(why) => {
                        let out = op.outputs.as_deref().unwrap_or_default();
                        let node = out.first().map_or_else(
                            || format!("operator {k}"),
                            |&t| tensor_name(&self.tensors[t as usize], t as usize),
                        );
                        self.errors
                            .push(format!("operator {k} ({}) making '{node}': {why}", op_name(code)));
                    }
                }
            }
        }
        for &t in sg.outputs.iter().flatten() {
            let t = t as usize;
            let Some(v) = self.output_value(t) else {
                self.errors.push(format!(
                    "graph output '{}' is never computed",
                    tensor_name(&self.tensors[t], t)
                ));
                continue;
            };
            self.g.outputs.push(v);
        }
    }

    /// The value a graph output is: the NHWC form under the file's name (quantized
    /// outputs as their codes).
    fn output_value(&mut self, t: usize) -> Option<ValueId> {
        let forms = self.forms[t];
        forms.nhwc.or(forms.nchw)?;
        let name = tensor_name(&self.tensors[t], t);
        let v = self.nhwc(t).ok()?;
        if let Some(q) = self.quant_float(t) {
            let codes = self.quantize_linear(v, &q, &name);
            return Some(self.take_name(codes, &name, "dq"));
        }
        if self.g.inputs.contains(&v) || self.g.values[v].constant.is_some() {
            return Some(self.identity(v, &format!("{name}:out")));
        }
        Some(self.take_name(v, &name, "nchw"))
    }

    /// Gives `v` the name `name`; whatever value holds it now gets `name:suffix`.
    fn take_name(&mut self, v: ValueId, name: &str, suffix: &str) -> ValueId {
        if self.g.values[v].name == name {
            return v;
        }
        if let Some(other) = self.g.value_id(name) {
            let fresh = self.unique(format!("{name}:{suffix}"));
            self.g.values[other].name = fresh;
        }
        name.clone_into(&mut self.g.values[v].name);
        self.names.insert(name.to_owned());
        v
    }

    fn identity(&mut self, v: ValueId, name: &str) -> ValueId {
        let out = self.fresh_value(name.to_owned(), self.g.values[v].dtype);
        self.add_node("Identity", name, vec![Some(v)], vec![out], BTreeMap::new());
        out
    }

    /// Keeps an op the executor lacks as an opaque node (for viewing).
    fn keep_unsupported(&mut self, op: &fb::OperatorT, code: &fb::OperatorCodeT) {
        let mut inputs = Vec::new();
        for &i in op.inputs.iter().flatten() {
            inputs.push(if i < 0 { None } else { self.nhwc(i as usize).ok() });
        }
        let mut outputs = Vec::new();
        for &o in op.outputs.iter().flatten() {
            let o = o as usize;
            let name = tensor_name(&self.tensors[o], o);
            let v = self.fresh_value(name, dtype(self.tensors[o].type_));
            self.forms[o].nhwc = Some(v);
            outputs.push(v);
        }
        let name = outputs
            .first()
            .map_or_else(|| "op".to_owned(), |&v| self.g.values[v].name.clone());
        let id = self.add_node(&op_name(code), &name, inputs, outputs, BTreeMap::new());
        self.g.nodes[id].domain = "tflite".into();
    }

    // ---- values and nodes ----

    fn unique(&mut self, base: String) -> String {
        if self.names.insert(base.clone()) {
            return base;
        }
        for k in 2.. {
            let name = format!("{base}:{k}");
            if self.names.insert(name.clone()) {
                return name;
            }
        }
        unreachable!()
    }

    fn push_value(&mut self, v: Value) -> ValueId {
        self.g.values.push(v);
        self.g.values.len() - 1
    }

    fn fresh_value(&mut self, name: String, dtype: Option<DType>) -> ValueId {
        let name = self.unique(name);
        let mut v = Value::new(name);
        v.dtype = dtype;
        self.push_value(v)
    }

    fn add_node(
        &mut self,
        op: &str,
        name: &str,
        inputs: Vec<Option<ValueId>>,
        outputs: Vec<ValueId>,
        attrs: BTreeMap<String, Attr>,
    ) -> usize {
        let mut node_name = name.to_owned();
        let mut k = 2;
        while !self.node_names.insert(node_name.clone()) {
            node_name = format!("{name}:{k}");
            k += 1;
        }
        let id = self.g.nodes.len();
        for &o in &outputs {
            self.g.values[o].producer = Some(id);
        }
        self.g.nodes.push(Node {
            name: node_name,
            op: op.to_owned(),
            domain: String::new(),
            inputs,
            outputs: outputs.into_iter().map(Some).collect(),
            attrs,
            origin: vec![id],
        });
        id
    }

    /// A node with one output named `out` (made unique).
    fn node1(
        &mut self,
        op: &str,
        out: String,
        dtype: Option<DType>,
        inputs: Vec<Option<ValueId>>,
        attrs: BTreeMap<String, Attr>,
    ) -> ValueId {
        let v = self.fresh_value(out, dtype);
        let name = self.g.values[v].name.clone();
        self.add_node(op, &name, inputs, vec![v], attrs);
        v
    }

    fn constant(&mut self, name: String, t: &Tensor) -> ValueId {
        let name = self.unique(name);
        let mut v = Value::new(name);
        v.dtype = Some(t.dtype());
        v.shape = Some(t.shape().iter().map(|&d| Dim::Fixed(d)).collect());
        v.constant = Some(Constant::from_tensor(t));
        self.push_value(v)
    }

    fn const_i64(&mut self, name: String, data: &[i64]) -> ValueId {
        let t = Tensor::I64(
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[data.len()]), data.to_vec())
                .unwrap_or_else(|_| unreachable!()),
        );
        self.constant(name, &t)
    }

    fn const_f32_scalar(&mut self, name: String, x: f32) -> ValueId {
        self.constant(name, &Tensor::scalar_f32(x))
    }

    // ---- file tensors ----

    fn name_of(&self, t: usize) -> String {
        tensor_name(&self.tensors[t], t)
    }

    /// The file's static shape of a tensor.
    pub(crate) fn shape(&self, t: usize) -> Vec<usize> {
        self.tensors[t]
            .shape
            .iter()
            .flatten()
            .map(|&d| usize::try_from(d).unwrap_or(0))
            .collect()
    }

    pub(crate) fn rank(&self, t: usize) -> usize {
        self.tensors[t].shape.as_ref().map_or(0, Vec::len)
    }

    /// The shape with `shape_signature`'s unknown (-1) dims as symbols.
    fn signature_shape(&self, t: usize) -> Vec<Dim> {
        let shape = self.shape(t);
        let sig = self.tensors[t].shape_signature.clone().unwrap_or_default();
        shape
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                if sig.len() == shape.len() && sig[i] < 0 {
                    Dim::Sym(if i == 0 { "batch".into() } else { format!("d{i}") })
                } else {
                    Dim::Fixed(d)
                }
            })
            .collect()
    }

    /// Whether a dim of a tensor is dynamic in the signature.
    pub(crate) fn dynamic_dim(&self, t: usize, i: usize) -> bool {
        self.tensors[t]
            .shape_signature
            .as_ref()
            .and_then(|s| s.get(i))
            .is_some_and(|&d| d < 0)
    }

    pub(crate) fn dtype_of(&self, t: usize) -> Option<DType> {
        dtype(self.tensors[t].type_)
    }

    /// The quantization of an integer tensor that the graph computes on as float (an int8,
    /// uint8 or int16 tensor with scales).
    pub(crate) fn quant_float(&self, t: usize) -> Option<Quant> {
        let info = &self.tensors[t];
        if !matches!(
            info.type_,
            fb::TensorType::INT8 | fb::TensorType::UINT8 | fb::TensorType::INT16 | fb::TensorType::INT4
        ) {
            return None;
        }
        quant_of(info)
    }

    /// The raw constant data of a tensor, if its buffer holds any.
    pub(crate) fn raw(&self, t: usize) -> Option<&'f [u8]> {
        self.file.data(&self.tensors[t])
    }

    /// Whether a tensor is constant: data in the file, or a constant folded at import
    /// (a dequantized weight).
    pub(crate) fn is_const(&self, t: usize) -> bool {
        self.raw(t).is_some() || self.folded(t).is_some()
    }

    /// The constant an import-time fold made for a tensor.
    fn folded(&self, t: usize) -> Option<&Tensor> {
        let v = self.forms[t].nhwc?;
        self.g.values[v].constant.as_ref().map(Constant::tensor)
    }

    /// A constant's data as a tensor of its file type.
    pub(crate) fn const_tensor(&self, t: usize) -> Result<Tensor, ops::OpError> {
        if let Some(c) = self.folded(t) {
            return Ok(c.clone());
        }
        let raw = self
            .raw(t)
            .ok_or_else(|| ops::OpError::Invalid(format!("tensor '{}' must be a constant", self.name_of(t))))?;
        let dt = self.dtype_of(t).ok_or_else(|| {
            ops::OpError::Unsupported(format!("tensor type {:?}", self.tensors[t].type_.variant_name()))
        })?;
        Tensor::from_raw(dt, &self.shape(t), raw)
            .map_err(|e| ops::OpError::Invalid(format!("tensor '{}': {e}", self.name_of(t))))
    }

    /// A constant's values as integers (shapes, axes, perms).
    pub(crate) fn const_ints(&self, t: usize) -> Result<Vec<i64>, ops::OpError> {
        self.const_tensor(t)?
            .as_i64_vec()
            .ok_or_else(|| ops::OpError::Invalid(format!("tensor '{}' must hold integers", self.name_of(t))))
    }

    /// A constant as the graph computes on it: fp16 and quantized integer data become
    /// float32.
    pub(crate) fn const_value(&mut self, t: usize) -> Result<Tensor, ops::OpError> {
        if let Some(c) = self.folded(t) {
            return Ok(c.clone());
        }
        let raw = self.const_tensor(t)?;
        if let Some(q) = self.quant_float(t) {
            return dequantize(&raw, &q, &self.name_of(t));
        }
        // An int32 bias with scales (a quantized model's) is dequantized too.
        if self.dtype_of(t) == Some(DType::I32)
            && let Some(q) = quant_of(&self.tensors[t])
        {
            return dequantize(&raw, &q, &self.name_of(t));
        }
        Ok(raw)
    }
}

/// `(q − zp) · scale` per tensor or per channel, in f64, as float32.
pub(crate) fn dequantize(t: &Tensor, q: &Quant, name: &str) -> Result<Tensor, ops::OpError> {
    let codes = t
        .to_i64()
        .or_else(|| (t.dtype() == DType::I4).then(|| t.to_f32().mapv(|v| v as i64)))
        .ok_or_else(|| ops::OpError::Invalid(format!("tensor '{name}': quantized data must be integers")))?;
    let shape = codes.shape().to_vec();
    let n = q.scale.len();
    let per_channel = n > 1;
    if per_channel && shape.get(q.axis) != Some(&n) {
        return Err(ops::OpError::Invalid(format!(
            "tensor '{name}': {n} scales along axis {} of shape {shape:?}",
            q.axis
        )));
    }
    if q.zero_point.len() != n {
        return Err(ops::OpError::Invalid(format!(
            "tensor '{name}': {n} scales but {} zero points",
            q.zero_point.len()
        )));
    }
    let inner: usize = if per_channel {
        shape[q.axis + 1..].iter().product()
    } else {
        1
    };
    let data: Vec<f32> = codes
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let ch = if per_channel { (i / inner) % n } else { 0 };
            ((c - q.zero_point[ch]) as f64 * f64::from(q.scale[ch])) as f32
        })
        .collect();
    Tensor::from_f32(&shape, data).ok_or_else(|| ops::OpError::Invalid(format!("tensor '{name}': bad shape")))
}

/// Removes constants no node reads and no output names (a weight folded at import and
/// then used in another layout); remaps value ids.
/// A subgraph's inputs become values it reads from the enclosing graph by name (how an
/// ONNX If branch takes its operands).
fn capture_inputs(g: &mut Graph) {
    for v in std::mem::take(&mut g.inputs) {
        g.values[v].outer = true;
    }
}

/// The attributes of an If on `true` that runs `g` (how a WHILE calls its condition
/// subgraph): `g` as both branches.
pub(crate) fn call(g: Graph) -> BTreeMap<String, Attr> {
    attrs(vec![
        ("then_branch", Attr::Graph(Box::new(g.clone()))),
        ("else_branch", Attr::Graph(Box::new(g))),
    ])
}

/// Makes the graph of a WHILE body an ONNX Loop body: the iteration count and the incoming
/// condition become its first inputs, and its first output is the condition subgraph
/// (`cond`, reading the new values by name) on its outputs, called through an If on `true`.
fn loop_body(g: &mut Graph, base: &str, cond: Graph) {
    let value = |g: &mut Graph, name: String, dtype: DType, constant: Option<Tensor>| {
        let mut v = Value::new(name);
        v.dtype = Some(dtype);
        v.shape = Some(Vec::new());
        v.constant = constant.as_ref().map(Constant::from_tensor);
        g.values.push(v);
        g.values.len() - 1
    };
    let iteration = value(g, format!("{base}:iteration"), DType::I64, None);
    let incoming = value(g, format!("{base}:cond_in"), DType::Bool, None);
    g.inputs.splice(0..0, [iteration, incoming]);
    let yes = value(
        g,
        format!("{base}:body_true"),
        DType::Bool,
        Some(Tensor::Bool(ndarray::arr0(true).into_dyn())),
    );
    let out = value(g, format!("{base}:cond_out"), DType::Bool, None);
    let id = g.nodes.len();
    g.values[out].producer = Some(id);
    g.nodes.push(Node {
        name: format!("{base}:cond_out"),
        op: "If".into(),
        domain: String::new(),
        inputs: vec![Some(yes)],
        outputs: vec![Some(out)],
        attrs: call(cond),
        origin: vec![id],
    });
    g.outputs.insert(0, out);
}

fn drop_unread_constants(g: &mut Graph) {
    let mut used = vec![false; g.values.len()];
    for n in &g.nodes {
        for &v in n.inputs.iter().chain(&n.outputs).flatten() {
            used[v] = true;
        }
    }
    for &v in g.inputs.iter().chain(&g.outputs) {
        used[v] = true;
    }
    let mut map = vec![usize::MAX; g.values.len()];
    let mut kept = Vec::with_capacity(g.values.len());
    for (i, v) in std::mem::take(&mut g.values).into_iter().enumerate() {
        if used[i] || v.constant.is_none() {
            map[i] = kept.len();
            kept.push(v);
        }
    }
    g.values = kept;
    for n in &mut g.nodes {
        for v in n.inputs.iter_mut().chain(n.outputs.iter_mut()).flatten() {
            *v = map[*v];
        }
    }
    for v in g.inputs.iter_mut().chain(g.outputs.iter_mut()) {
        *v = map[*v];
    }
}

pub(crate) fn attrs(list: Vec<(&str, Attr)>) -> BTreeMap<String, Attr> {
    list.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}
