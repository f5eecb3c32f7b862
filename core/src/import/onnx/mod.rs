//! ONNX import: protobuf → [`Model`]. Weights stay slices of the memory-mapped file.

#[allow(
    clippy::all,
    clippy::pedantic,
    reason = "generated once by prost-build from onnx.proto"
)]
pub mod proto;

use super::{ImportError, ImportReport, UnsupportedOp};
use crate::ir::{Attr, Constant, DType, Dim, Graph, Metadata, Model, Node, Shape, Tensor, Val, Value, ValueKind};
use bytes::Bytes;
use prost::Message;
use proto::{GraphProto, TensorProto, attribute_proto::AttributeType};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Options of [`load_with`].
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Keep nodes whose op the executor does not support (for viewing), instead of failing.
    pub allow_unsupported: bool,
}

/// Loads an ONNX model; fails listing every unsupported op at once.
pub fn load(path: &Path) -> Result<(Model, ImportReport), ImportError> {
    load_with(path, &LoadOptions::default())
}

/// Loads an ONNX model with options.
pub fn load_with(path: &Path, opts: &LoadOptions) -> Result<(Model, ImportReport), ImportError> {
    let bytes = map_file(path)?;
    let dir = path.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    from_bytes(bytes, &dir, path, opts)
}

/// Memory-maps a file (copies small ones) into shareable bytes.
fn map_file(path: &Path) -> Result<Bytes, ImportError> {
    let file = std::fs::File::open(path).map_err(|e| ImportError::io(path, e))?;
    let len = file.metadata().map_err(|e| ImportError::io(path, e))?.len();
    if len < 64 * 1024 {
        let data = std::fs::read(path).map_err(|e| ImportError::io(path, e))?;
        return Ok(Bytes::from(data));
    }
    // SAFETY: the map is read-only; a concurrent truncation of the file by another
    // process could fault, as with every memory-mapped reader (onnxruntime included).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| ImportError::io(path, e))?;
    Ok(Bytes::from_owner(map))
}

/// Parses a model from bytes; `dir` is the folder external data must stay within.
pub fn from_bytes(
    bytes: Bytes,
    dir: &Path,
    path: &Path,
    opts: &LoadOptions,
) -> Result<(Model, ImportReport), ImportError> {
    let proto = proto::ModelProto::decode(bytes).map_err(|e| ImportError::Format {
        file: path.to_path_buf(),
        message: format!("not a valid ONNX protobuf: {e}"),
    })?;
    let mut report = ImportReport::default();
    let ir_version = proto.ir_version.unwrap_or(0);
    if !(3..=12).contains(&ir_version) {
        if ir_version < 3 {
            return Err(ImportError::Format {
                file: path.to_path_buf(),
                message: format!("IR version {ir_version} is not supported (3 to 10 are)"),
            });
        }
        report.warnings.push(format!(
            "IR version {ir_version} is newer than the supported 3 to 10; loading anyway"
        ));
    }
    let mut meta = Metadata {
        ir_version,
        producer_name: proto.producer_name.clone().unwrap_or_default(),
        producer_version: proto.producer_version.clone().unwrap_or_default(),
        doc: proto.doc_string.clone().unwrap_or_default(),
        ..Metadata::default()
    };
    for op in &proto.opset_import {
        let domain = op.domain.clone().unwrap_or_default();
        let domain = if domain == "ai.onnx" { String::new() } else { domain };
        meta.opsets.insert(domain, op.version.unwrap_or(1));
    }
    if meta.opsets.is_empty() {
        meta.opsets.insert(String::new(), 1);
    }
    let opset = meta.opsets.get("").copied().unwrap_or(1);
    if !(7..=25).contains(&opset) {
        report
            .warnings
            .push(format!("default-domain opset {opset} is outside the supported 7 to 23"));
    }
    for p in &proto.metadata_props {
        meta.props
            .insert(p.key.clone().unwrap_or_default(), p.value.clone().unwrap_or_default());
    }
    let Some(gp) = proto.graph else {
        return Err(ImportError::Format {
            file: path.to_path_buf(),
            message: "the model has no graph".into(),
        });
    };
    let mut ctx = Ctx {
        file: path.to_path_buf(),
        dir: dir.to_path_buf(),
        external: HashMap::new(),
    };
    let graph = ctx.graph(&gp, false)?;
    let mut model = Model { graph, meta };
    model.validate().map_err(|e| ImportError::Invalid {
        file: path.to_path_buf(),
        error: e,
    })?;
    let mut unsupported = Vec::new();
    collect_unsupported(&model.graph, &model.meta, &mut unsupported);
    if !unsupported.is_empty() {
        if opts.allow_unsupported {
            for u in &unsupported {
                report
                    .warnings
                    .push(format!("unsupported op {} in node '{}'", u.op, u.node));
            }
        } else {
            return Err(ImportError::Unsupported {
                file: path.to_path_buf(),
                ops: unsupported,
            });
        }
    }
    crate::import::shapes::infer(&mut model);
    Ok((model, report))
}

fn collect_unsupported(g: &Graph, meta: &Metadata, out: &mut Vec<UnsupportedOp>) {
    for n in &g.nodes {
        let opset = meta.opsets.get(&n.domain).copied().unwrap_or(1);
        if !crate::sim::is_supported(&n.domain, &n.op, opset) {
            out.push(UnsupportedOp {
                node: n.label(),
                op: if n.domain.is_empty() {
                    n.op.clone()
                } else {
                    format!("{}::{}", n.domain, n.op)
                },
            });
        }
        for a in n.attrs.values() {
            match a {
                Attr::Graph(sub) => collect_unsupported(sub, meta, out),
                Attr::Graphs(subs) => subs.iter().for_each(|s| collect_unsupported(s, meta, out)),
                _ => {}
            }
        }
    }
}

struct Ctx {
    file: PathBuf,
    dir: PathBuf,
    external: HashMap<PathBuf, Bytes>,
}

fn dims_of(t: &TensorProto, name: &str, file: &Path) -> Result<Vec<usize>, ImportError> {
    t.dims
        .iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| ImportError::Format {
                file: file.to_path_buf(),
                message: format!("tensor '{name}' has a negative dimension {d}"),
            })
        })
        .collect()
}

impl Ctx {
    fn err(&self, message: String) -> ImportError {
        ImportError::Format {
            file: self.file.clone(),
            message,
        }
    }

    /// Converts a TensorProto into a constant, reading external data where needed.
    fn tensor(&mut self, t: &TensorProto) -> Result<Constant, ImportError> {
        let name = t.name.clone().unwrap_or_default();
        let code = t.data_type.unwrap_or(0);
        let dtype = DType::from_onnx(code)
            .ok_or_else(|| self.err(format!("tensor '{name}' has unsupported data type {code}")))?;
        if dtype == DType::String {
            return Err(self.err(format!("tensor '{name}' holds strings, which are not supported")));
        }
        let shape = dims_of(t, &name, &self.file)?;
        let count = crate::ir::tensor::checked_numel(&shape)
            .ok_or_else(|| self.err(format!("tensor '{name}' shape {shape:?} overflows")))?;
        let raw: Bytes = if t.data_location == Some(1) {
            self.external_data(t, &name)?
        } else if let Some(raw) = &t.raw_data {
            raw.clone()
        } else {
            Bytes::from(self.typed_data(t, dtype, count, &name)?)
        };
        Constant::from_raw(dtype, shape, raw).map_err(|e| self.err(format!("tensor '{name}': {e}")))
    }

    fn typed_data(&self, t: &TensorProto, dtype: DType, count: usize, name: &str) -> Result<Vec<u8>, ImportError> {
        let have = match dtype {
            DType::F32 => t.float_data.len(),
            DType::F64 => t.double_data.len(),
            DType::I64 => t.int64_data.len(),
            DType::U32 | DType::U64 => t.uint64_data.len(),
            DType::I4 | DType::U4 | DType::F4E2M1 => t.int32_data.len() * 2,
            DType::I2 | DType::U2 => t.int32_data.len() * 4,
            _ => t.int32_data.len(),
        };
        let packs = dtype.bits() < 8;
        if (!packs && have != count) || (packs && have < count) {
            return Err(self.err(format!("tensor '{name}' declares {count} elements but holds {have}")));
        }
        let mut out = Vec::with_capacity(dtype.packed_bytes(count));
        match dtype {
            DType::F32 => t.float_data.iter().for_each(|v| out.extend(v.to_le_bytes())),
            DType::F64 => t.double_data.iter().for_each(|v| out.extend(v.to_le_bytes())),
            DType::I64 => t.int64_data.iter().for_each(|v| out.extend(v.to_le_bytes())),
            DType::U64 => t.uint64_data.iter().for_each(|v| out.extend(v.to_le_bytes())),
            DType::U32 => t.uint64_data.iter().for_each(|v| out.extend((*v as u32).to_le_bytes())),
            DType::I32 => t.int32_data.iter().for_each(|v| out.extend(v.to_le_bytes())),
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => {
                t.int32_data.iter().for_each(|v| out.extend((*v as u16).to_le_bytes()));
            }
            DType::I4 | DType::U4 | DType::F4E2M1 | DType::I2 | DType::U2 => {
                // Already packed into bytes, one byte per int32 entry.
                out.extend(t.int32_data.iter().map(|v| *v as u8));
                out.truncate(dtype.packed_bytes(count));
            }
            _ => out.extend(t.int32_data.iter().map(|v| *v as u8)),
        }
        Ok(out)
    }

    fn external_data(&mut self, t: &TensorProto, name: &str) -> Result<Bytes, ImportError> {
        let mut location = None;
        let mut offset = 0usize;
        let mut length = None;
        for kv in &t.external_data {
            let v = kv.value.clone().unwrap_or_default();
            match kv.key.as_deref() {
                Some("location") => location = Some(v),
                Some("offset") => {
                    offset = v
                        .parse()
                        .map_err(|_| self.err(format!("tensor '{name}': bad external offset '{v}'")))?;
                }
                Some("length") => {
                    length = Some(
                        v.parse::<usize>()
                            .map_err(|_| self.err(format!("tensor '{name}': bad external length '{v}'")))?,
                    );
                }
                _ => {}
            }
        }
        let location = location.ok_or_else(|| self.err(format!("tensor '{name}' is external but has no location")))?;
        let rel = Path::new(&location);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir))
        {
            return Err(ImportError::ExternalOutside {
                file: self.file.clone(),
                tensor: name.to_owned(),
                location,
            });
        }
        let full = self.dir.join(rel);
        let canon_dir = self.dir.canonicalize().map_err(|e| ImportError::io(&self.dir, e))?;
        let canon = full.canonicalize().map_err(|e| ImportError::io(&full, e))?;
        if !canon.starts_with(&canon_dir) {
            return Err(ImportError::ExternalOutside {
                file: self.file.clone(),
                tensor: name.to_owned(),
                location,
            });
        }
        let data = if let Some(d) = self.external.get(&canon) {
            d.clone()
        } else {
            let d = map_file(&canon)?;
            self.external.insert(canon.clone(), d.clone());
            d
        };
        let end = match length {
            Some(l) => offset.checked_add(l),
            None => Some(data.len()),
        };
        match end {
            Some(end) if end <= data.len() && offset <= end => Ok(data.slice(offset..end)),
            _ => Err(self.err(format!(
                "tensor '{name}': external range {offset}..{} is outside '{}' ({} bytes)",
                end.map_or_else(|| "overflow".into(), |e| e.to_string()),
                location,
                data.len()
            ))),
        }
    }

    fn attr(&mut self, a: &proto::AttributeProto, node: &str) -> Result<Option<(String, Attr)>, ImportError> {
        let name = a.name.clone().unwrap_or_default();
        let s = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
        let ty = a.r#type.and_then(|t| AttributeType::try_from(t).ok());
        let value = match ty {
            Some(AttributeType::Float) => Attr::Float(a.f.unwrap_or(0.0)),
            Some(AttributeType::Int) => Attr::Int(a.i.unwrap_or(0)),
            Some(AttributeType::String) => Attr::String(a.s.as_ref().map(s).unwrap_or_default()),
            Some(AttributeType::Tensor) => match &a.t {
                Some(t) => Attr::Tensor(self.tensor(t)?),
                None => return Err(self.err(format!("node '{node}': attribute '{name}' has no tensor"))),
            },
            Some(AttributeType::Graph) => match &a.g {
                Some(g) => Attr::Graph(Box::new(self.graph(g, true)?)),
                None => return Err(self.err(format!("node '{node}': attribute '{name}' has no graph"))),
            },
            Some(AttributeType::Floats) => Attr::Floats(a.floats.clone()),
            Some(AttributeType::Ints) => Attr::Ints(a.ints.clone()),
            Some(AttributeType::Strings) => Attr::Strings(a.strings.iter().map(s).collect()),
            Some(AttributeType::Graphs) => {
                Attr::Graphs(a.graphs.iter().map(|g| self.graph(g, true)).collect::<Result<_, _>>()?)
            }
            Some(AttributeType::SparseTensor) => {
                return Err(self.err(format!(
                    "node '{node}': sparse tensor attribute '{name}' is not supported"
                )));
            }
            Some(
                AttributeType::Tensors
                | AttributeType::TypeProto
                | AttributeType::TypeProtos
                | AttributeType::SparseTensors,
            ) => {
                return Ok(None);
            }
            Some(AttributeType::Undefined) | None => {
                // Old exporters leave out the type: infer it from the field in use.
                if let Some(f) = a.f {
                    Attr::Float(f)
                } else if let Some(i) = a.i {
                    Attr::Int(i)
                } else if let Some(b) = &a.s {
                    Attr::String(s(b))
                } else if let Some(t) = &a.t {
                    Attr::Tensor(self.tensor(t)?)
                } else if let Some(g) = &a.g {
                    Attr::Graph(Box::new(self.graph(g, true)?))
                } else if !a.floats.is_empty() {
                    Attr::Floats(a.floats.clone())
                } else if !a.ints.is_empty() {
                    Attr::Ints(a.ints.clone())
                } else {
                    return Ok(None);
                }
            }
        };
        Ok(Some((name, value)))
    }

    fn graph(&mut self, gp: &GraphProto, nested: bool) -> Result<Graph, ImportError> {
        let mut g = Graph {
            name: gp.name.clone().unwrap_or_default(),
            ..Graph::default()
        };
        let mut ids: HashMap<String, usize> = HashMap::new();
        let add = |g: &mut Graph, ids: &mut HashMap<String, usize>, v: Value| {
            let id = g.values.len();
            ids.insert(v.name.clone(), id);
            g.values.push(v);
            id
        };
        for t in &gp.initializer {
            let c = self.tensor(t)?;
            let name = t.name.clone().unwrap_or_default();
            if ids.contains_key(&name) {
                return Err(self.err(format!("initializer '{name}' is defined twice")));
            }
            let mut v = Value::new(name);
            v.dtype = Some(c.dtype);
            v.shape = Some(c.shape.iter().map(|&d| Dim::Fixed(d)).collect());
            v.constant = Some(c);
            add(&mut g, &mut ids, v);
        }
        for vi in &gp.input {
            let name = vi.name.clone().unwrap_or_default();
            if ids.contains_key(&name) {
                continue; // An input with an initializer: the initializer is its value.
            }
            let mut v = Value::new(name);
            (v.dtype, v.shape) = type_of(vi);
            v.kind = kind_of(vi);
            let id = add(&mut g, &mut ids, v);
            g.inputs.push(id);
        }
        let mut infos: HashMap<&str, &proto::ValueInfoProto> = HashMap::new();
        for vi in gp.value_info.iter().chain(gp.output.iter()) {
            if let Some(n) = &vi.name {
                infos.insert(n, vi);
            }
        }
        for (ni, np) in gp.node.iter().enumerate() {
            let name = np.name.clone().unwrap_or_default();
            let op = np.op_type.clone().unwrap_or_default();
            let label = if name.is_empty() {
                format!("#{ni} ({op})")
            } else {
                name.clone()
            };
            let mut attrs = std::collections::BTreeMap::new();
            for a in &np.attribute {
                if let Some((k, v)) = self.attr(a, &label)? {
                    attrs.insert(k, v);
                }
            }
            let mut inputs = Vec::with_capacity(np.input.len());
            for iname in &np.input {
                if iname.is_empty() {
                    inputs.push(None);
                    continue;
                }
                let id = if let Some(&id) = ids.get(iname) {
                    id
                } else if nested {
                    let mut v = Value::new(iname.clone());
                    v.outer = true;
                    add(&mut g, &mut ids, v)
                } else {
                    // Defined later (unsorted graph) or never: a placeholder the validator checks.
                    add(&mut g, &mut ids, Value::new(iname.clone()))
                };
                inputs.push(Some(id));
            }
            let node_id = g.nodes.len();
            let mut outputs = Vec::with_capacity(np.output.len());
            for oname in &np.output {
                if oname.is_empty() {
                    outputs.push(None);
                    continue;
                }
                let id = match ids.get(oname) {
                    Some(&id)
                        if g.values[id].producer.is_none()
                            && g.values[id].constant.is_none()
                            && !g.inputs.contains(&id) =>
                    {
                        id
                    }
                    Some(_) => return Err(self.err(format!("node '{label}': output '{oname}' is already defined"))),
                    None => add(&mut g, &mut ids, Value::new(oname.clone())),
                };
                g.values[id].producer = Some(node_id);
                g.values[id].outer = false;
                if let Some(vi) = infos.get(oname.as_str()) {
                    let (dt, sh) = type_of(vi);
                    g.values[id].dtype = dt;
                    g.values[id].shape = sh;
                    g.values[id].kind = kind_of(vi);
                }
                outputs.push(Some(id));
            }
            g.nodes.push(Node {
                name,
                op,
                domain: np
                    .domain
                    .clone()
                    .unwrap_or_default()
                    .replace("ai.onnx", "")
                    .trim()
                    .to_owned(),
                inputs,
                outputs,
                attrs,
                origin: vec![node_id],
            });
        }
        for vi in &gp.output {
            let name = vi.name.clone().unwrap_or_default();
            let id = if let Some(&id) = ids.get(&name) {
                id
            } else if nested {
                let mut v = Value::new(name);
                v.outer = true;
                add(&mut g, &mut ids, v)
            } else {
                return Err(self.err(format!("graph output '{name}' is not produced by any node")));
            };
            if g.values[id].dtype.is_none() {
                (g.values[id].dtype, g.values[id].shape) = type_of(vi);
            }
            g.values[id].kind = kind_of(vi);
            g.outputs.push(id);
        }
        Ok(g)
    }
}

/// The kind of value a `ValueInfoProto` declares (tensor when it says nothing).
fn kind_of(vi: &proto::ValueInfoProto) -> ValueKind {
    use proto::type_proto::Value as T;
    match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        None | Some(T::TensorType(_)) => ValueKind::Tensor,
        Some(T::SequenceType(_)) => ValueKind::Sequence,
        Some(T::OptionalType(_)) => ValueKind::Optional,
        Some(_) => ValueKind::Other,
    }
}

fn type_of(vi: &proto::ValueInfoProto) -> (Option<DType>, Option<Shape>) {
    use proto::tensor_shape_proto::dimension::Value as D;
    use proto::type_proto::Value as T;
    let Some(T::TensorType(tt)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return (None, None);
    };
    let dtype = tt.elem_type.and_then(DType::from_onnx);
    let shape = tt.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(D::DimValue(v)) if *v >= 0 => Dim::Fixed(*v as usize),
                Some(D::DimParam(p)) => Dim::Sym(p.clone()),
                _ => Dim::Sym(String::new()),
            })
            .collect()
    });
    (dtype, shape)
}

/// `SequenceProto` and `OptionalProto` from `onnx-data.proto` (test data of container
/// values; the model format itself only declares their types).
mod data_proto {
    use super::proto::TensorProto;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SequenceProto {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(int32, optional, tag = "2")]
        pub elem_type: Option<i32>,
        #[prost(message, repeated, tag = "3")]
        pub tensor_values: Vec<TensorProto>,
        #[prost(message, repeated, tag = "5")]
        pub sequence_values: Vec<SequenceProto>,
        #[prost(message, repeated, tag = "7")]
        pub optional_values: Vec<OptionalProto>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct OptionalProto {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(int32, optional, tag = "2")]
        pub elem_type: Option<i32>,
        #[prost(message, optional, tag = "3")]
        pub tensor_value: Option<TensorProto>,
        #[prost(message, optional, tag = "5")]
        pub sequence_value: Option<SequenceProto>,
        #[prost(message, optional, tag = "7")]
        pub optional_value: Option<Box<OptionalProto>>,
    }

    /// Element types of `SequenceProto`/`OptionalProto`.
    pub const TENSOR: i32 = 1;
    pub const SEQUENCE: i32 = 3;
    pub const OPTIONAL: i32 = 5;
}

fn seq_from_pb(s: data_proto::SequenceProto) -> Result<Val, String> {
    if !s.sequence_values.is_empty() || !s.optional_values.is_empty() {
        return Err("sequences of sequences or optionals are not supported".into());
    }
    let items = s
        .tensor_values
        .into_iter()
        .map(|t| tensor_from_proto(t).map(|(_, t)| t))
        .collect::<Result<_, _>>()?;
    Ok(Val::Seq(items))
}

fn opt_from_pb(o: data_proto::OptionalProto) -> Result<Val, String> {
    let inner = match o.elem_type.unwrap_or(0) {
        data_proto::TENSOR => o
            .tensor_value
            .map(|t| tensor_from_proto(t).map(|(_, t)| Val::Tensor(t))),
        data_proto::SEQUENCE => o.sequence_value.map(seq_from_pb),
        data_proto::OPTIONAL => o.optional_value.map(|b| opt_from_pb(*b)),
        0 => None,
        other => return Err(format!("optional of element type {other} is not supported")),
    };
    Ok(Val::Opt(inner.transpose()?.map(Box::new)))
}

/// Decodes a serialized `TensorProto`, `SequenceProto` or `OptionalProto` (as `kind` says):
/// the `.pb` files of the ONNX test data.
pub fn value_from_pb(bytes: &[u8], kind: ValueKind) -> Result<Val, PbError> {
    match kind {
        ValueKind::Tensor => tensor_from_pb(bytes).map(|(_, t)| Val::Tensor(t)),
        ValueKind::Sequence => seq_from_pb(
            data_proto::SequenceProto::decode(bytes).map_err(|e| PbError(format!("not a SequenceProto: {e}")))?,
        )
        .map_err(PbError),
        ValueKind::Optional => opt_from_pb(
            data_proto::OptionalProto::decode(bytes).map_err(|e| PbError(format!("not an OptionalProto: {e}")))?,
        )
        .map_err(PbError),
        ValueKind::Other => Err(PbError("maps and sparse tensors are not supported".into())),
    }
}

/// A serialized value (`.pb` test data) that cannot be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PbError(pub String);

/// Decodes a serialized `TensorProto` (the `.pb` files of the ONNX test data).
pub fn tensor_from_pb(bytes: &[u8]) -> Result<(String, Tensor), PbError> {
    tensor_from_proto(TensorProto::decode(bytes).map_err(|e| PbError(format!("not a TensorProto: {e}")))?)
        .map_err(PbError)
}

fn tensor_from_proto(t: TensorProto) -> Result<(String, Tensor), String> {
    if t.data_type == Some(DType::String.onnx_code()) {
        let shape: Vec<usize> = t
            .dims
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| "negative dimension".to_owned()))
            .collect::<Result<_, _>>()?;
        let strings: Vec<String> = t
            .string_data
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        let a = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&shape), strings)
            .map_err(|e| format!("string tensor: {e}"))?;
        return Ok((t.name.unwrap_or_default(), Tensor::Str(a)));
    }
    let mut ctx = Ctx {
        file: PathBuf::from("<tensor>"),
        dir: PathBuf::from("."),
        external: HashMap::new(),
    };
    let c = ctx.tensor(&t).map_err(|e| e.to_string())?;
    Ok((t.name.unwrap_or_default(), c.tensor().clone()))
}

/// Serializes a tensor as a `TensorProto` with raw data.
pub fn tensor_to_pb(name: &str, t: &Tensor) -> Vec<u8> {
    let p = TensorProto {
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype().onnx_code()),
        name: Some(name.to_owned()),
        raw_data: Some(Bytes::from(t.to_raw())),
        ..TensorProto::default()
    };
    p.encode_to_vec()
}
