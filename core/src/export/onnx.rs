//! IR → ONNX protobuf, the inverse of `import::onnx`: nodes, attributes (subgraphs
//! included), initializers as raw data, typed inputs and outputs, opsets and metadata.

use super::{ExportError, write_atomic};
use crate::import::onnx::proto::{
    self, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, attribute_proto::AttributeType,
};
use crate::ir::{Attr, Constant, DType, Dim, Graph, Model, Node, Tensor, Value, ValueKind};
use bytes::Bytes;
use prost::Message;
use std::collections::BTreeMap;
use std::path::Path;

/// The model as ONNX protobuf bytes.
pub fn to_bytes(model: &Model) -> Vec<u8> {
    model_proto(model).encode_to_vec()
}

/// Writes the model as an ONNX file, atomically.
pub fn save(model: &Model, path: &Path) -> Result<(), ExportError> {
    let bytes = to_bytes(model);
    if bytes.len() > i32::MAX as usize {
        return Err(ExportError::Model {
            file: path.display().to_string(),
            message: "the model is over 2 GB; external data is not written yet".into(),
        });
    }
    write_atomic(path, &bytes)
}

/// Rewrites the few fused forms onnxruntime cannot run as one node into their ONNX
/// equivalents: FusedConv with a SiLU activation becomes Conv + QuickGelu(alpha 1), and
/// HardSwish below opset 14 (where it does not exist) becomes HardSigmoid(1/6, 0.5) · x.
/// Returns `None` when nothing needs rewriting.
pub fn lowered(model: &Model) -> Option<Model> {
    let opset = model.opset();
    let needs = |n: &Node| {
        (n.op == "FusedConv" && n.attr_s("activation") == Some("Silu"))
            || (n.op == "HardSwish" && n.domain.is_empty() && opset < 14)
    };
    if !model.graph.nodes.iter().any(needs) {
        return None;
    }
    let mut m = model.clone();
    let g = &mut m.graph;
    let old = std::mem::take(&mut g.nodes);
    for mut n in old {
        if !needs(&n) {
            let id = g.nodes.len();
            for &o in n.outputs.iter().flatten() {
                g.values[o].producer = Some(id);
            }
            g.nodes.push(n);
            continue;
        }
        let Some(Some(out)) = n.outputs.first().copied() else {
            continue;
        };
        let mut mid = g.values[out].clone();
        mid.name = format!("{}:pre_activation", g.values[out].name);
        mid.producer = Some(g.nodes.len());
        let mid_id = g.values.len();
        g.values.push(mid);
        let name = n.name.clone();
        let (first, second) = if n.op == "FusedConv" {
            n.op = "Conv".into();
            n.domain.clear();
            n.attrs.remove("activation");
            n.attrs.remove("activation_params");
            n.outputs = vec![Some(mid_id)];
            let mut act = Node {
                name: format!("{name}/silu"),
                op: "QuickGelu".into(),
                domain: crate::sim::ops::MICROSOFT.into(),
                inputs: vec![Some(mid_id)],
                outputs: vec![Some(out)],
                attrs: BTreeMap::new(),
                origin: n.origin.clone(),
            };
            act.attrs.insert("alpha".into(), Attr::Float(1.0));
            (n, act)
        } else {
            let x = n.input(0);
            let mut hs = Node {
                name: format!("{name}/hardsigmoid"),
                op: "HardSigmoid".into(),
                domain: String::new(),
                inputs: vec![x],
                outputs: vec![Some(mid_id)],
                attrs: BTreeMap::new(),
                origin: n.origin.clone(),
            };
            hs.attrs.insert("alpha".into(), Attr::Float(1.0 / 6.0));
            hs.attrs.insert("beta".into(), Attr::Float(0.5));
            let mul = Node {
                name,
                op: "Mul".into(),
                domain: String::new(),
                inputs: vec![x, Some(mid_id)],
                outputs: vec![Some(out)],
                attrs: BTreeMap::new(),
                origin: n.origin,
            };
            (hs, mul)
        };
        g.values[out].producer = Some(g.nodes.len() + 1);
        g.nodes.push(first);
        g.nodes.push(second);
    }
    Some(m)
}

fn model_proto(model: &Model) -> ModelProto {
    let lowered = lowered(model);
    let model = lowered.as_ref().unwrap_or(model);
    let mut m = model.meta.clone();
    if model.graph.nodes.iter().any(|n| n.domain == crate::sim::ops::MICROSOFT) {
        m.opsets.entry(crate::sim::ops::MICROSOFT.into()).or_insert(1);
    }
    let m = &m;
    ModelProto {
        ir_version: Some(m.ir_version.max(3)),
        opset_import: m
            .opsets
            .iter()
            .map(|(d, v)| OperatorSetIdProto {
                domain: Some(d.clone()),
                version: Some(*v),
            })
            .collect(),
        producer_name: Some(m.producer_name.clone()),
        producer_version: Some(m.producer_version.clone()),
        doc_string: (!m.doc.is_empty()).then(|| m.doc.clone()),
        metadata_props: m
            .props
            .iter()
            .map(|(k, v)| StringStringEntryProto {
                key: Some(k.clone()),
                value: Some(v.clone()),
            })
            .collect(),
        graph: Some(graph_proto(&model.graph)),
        ..ModelProto::default()
    }
}

/// A tensor as an ONNX `TensorProto` (raw little-endian data; strings as `string_data`).
pub fn tensor_proto(name: &str, dtype: DType, shape: &[usize], raw: &[u8], t: Option<&Tensor>) -> TensorProto {
    let mut p = TensorProto {
        dims: shape.iter().map(|&d| d as i64).collect(),
        data_type: Some(dtype.onnx_code()),
        name: Some(name.to_owned()),
        ..TensorProto::default()
    };
    if let Some(Tensor::Str(a)) = t {
        p.string_data = a.iter().map(|s| Bytes::from(s.clone().into_bytes())).collect();
    } else {
        p.raw_data = Some(Bytes::copy_from_slice(raw));
    }
    p
}

fn constant_proto(name: &str, c: &Constant) -> TensorProto {
    let t = (c.dtype == DType::String).then(|| c.tensor());
    tensor_proto(name, c.dtype, &c.shape, c.raw(), t)
}

fn type_proto(v: &Value) -> Option<TypeProto> {
    // A type without its element type is invalid ONNX; an absent type is allowed.
    v.dtype?;
    let tensor = |v: &Value| proto::type_proto::Tensor {
        elem_type: v.dtype.map(DType::onnx_code),
        shape: v.shape.as_ref().map(|s| TensorShapeProto {
            dim: s
                .iter()
                .map(|d| proto::tensor_shape_proto::Dimension {
                    value: Some(match d {
                        Dim::Fixed(n) => proto::tensor_shape_proto::dimension::Value::DimValue(*n as i64),
                        Dim::Sym(s) => proto::tensor_shape_proto::dimension::Value::DimParam(s.clone()),
                    }),
                    ..Default::default()
                })
                .collect(),
        }),
    };
    let value = match v.kind {
        ValueKind::Tensor => proto::type_proto::Value::TensorType(tensor(v)),
        ValueKind::Sequence => proto::type_proto::Value::SequenceType(Box::new(proto::type_proto::Sequence {
            elem_type: Some(Box::new(TypeProto {
                value: Some(proto::type_proto::Value::TensorType(tensor(v))),
                ..Default::default()
            })),
        })),
        ValueKind::Optional => proto::type_proto::Value::OptionalType(Box::new(proto::type_proto::Optional {
            elem_type: Some(Box::new(TypeProto {
                value: Some(proto::type_proto::Value::TensorType(tensor(v))),
                ..Default::default()
            })),
        })),
        ValueKind::Other => return None,
    };
    Some(TypeProto {
        value: Some(value),
        ..Default::default()
    })
}

fn value_info_proto(v: &Value) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(v.name.clone()),
        r#type: type_proto(v),
        ..Default::default()
    }
}

fn graph_proto(g: &Graph) -> GraphProto {
    let name = |v: Option<usize>| v.map_or_else(String::new, |v| g.values[v].name.clone());
    let node = g
        .nodes
        .iter()
        .map(|n| NodeProto {
            input: n.inputs.iter().map(|&v| name(v)).collect(),
            output: n.outputs.iter().map(|&v| name(v)).collect(),
            name: (!n.name.is_empty()).then(|| n.name.clone()),
            op_type: Some(n.op.clone()),
            domain: (!n.domain.is_empty()).then(|| n.domain.clone()),
            attribute: n.attrs.iter().map(|(k, a)| attribute(k, a)).collect(),
            ..Default::default()
        })
        .collect();
    let initializer = g
        .values
        .iter()
        .filter(|v| v.producer.is_none() && !v.outer)
        .filter_map(|v| v.constant.as_ref().map(|c| constant_proto(&v.name, c)))
        .collect();
    GraphProto {
        node,
        name: Some(g.name.clone()),
        initializer,
        input: g.inputs.iter().map(|&v| value_info_proto(&g.values[v])).collect(),
        output: g.outputs.iter().map(|&v| value_info_proto(&g.values[v])).collect(),
        // Intermediate types are left to the reader: ours are inferred, not declared.
        ..Default::default()
    }
}

fn attribute(name: &str, a: &Attr) -> AttributeProto {
    let mut p = AttributeProto {
        name: Some(name.to_owned()),
        ..Default::default()
    };
    let kind = match a {
        Attr::Float(f) => {
            p.f = Some(*f);
            AttributeType::Float
        }
        Attr::Int(i) => {
            p.i = Some(*i);
            AttributeType::Int
        }
        Attr::String(s) => {
            p.s = Some(Bytes::from(s.clone().into_bytes()));
            AttributeType::String
        }
        Attr::Tensor(c) => {
            p.t = Some(constant_proto("", c));
            AttributeType::Tensor
        }
        Attr::Graph(g) => {
            p.g = Some(graph_proto(g));
            AttributeType::Graph
        }
        Attr::Floats(v) => {
            p.floats.clone_from(v);
            AttributeType::Floats
        }
        Attr::Ints(v) => {
            p.ints.clone_from(v);
            AttributeType::Ints
        }
        Attr::Strings(v) => {
            p.strings = v.iter().map(|s| Bytes::from(s.clone().into_bytes())).collect();
            AttributeType::Strings
        }
        Attr::Graphs(v) => {
            p.graphs = v.iter().map(graph_proto).collect();
            AttributeType::Graphs
        }
    };
    p.r#type = Some(kind as i32);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Model {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/models/sample_cnn.onnx");
        crate::import::load(Path::new(path)).expect("sample loads").0
    }

    #[test]
    fn round_trip_keeps_graph_weights_and_outputs() {
        let m = sample();
        let bytes = to_bytes(&m);
        let dir = std::env::temp_dir();
        let (back, _) = crate::import::onnx::from_bytes(
            Bytes::from(bytes),
            &dir,
            Path::new("round-trip.onnx"),
            &crate::import::onnx::LoadOptions::default(),
        )
        .expect("re-import");
        assert_eq!(back.graph.nodes.len(), m.graph.nodes.len());
        assert_eq!(back.meta.opsets, m.meta.opsets);
        for (a, b) in m.graph.nodes.iter().zip(&back.graph.nodes) {
            assert_eq!((&a.name, &a.op, a.attrs.len()), (&b.name, &b.op, b.attrs.len()));
        }
        for (a, b) in m.graph.values.iter().zip(&back.graph.values) {
            if let (Some(ca), Some(cb)) = (&a.constant, &b.constant) {
                assert_eq!(ca.raw(), cb.raw(), "{}", a.name);
            }
        }
        let x = Tensor::from_f32(
            &[1, 3, 224, 224],
            (0..3 * 224 * 224).map(|i| (i % 255) as f32 / 255.0).collect(),
        )
        .expect("input");
        let feeds: std::collections::HashMap<String, Tensor> = [("image".to_owned(), x)].into();
        let ya = crate::sim::Executor::new(&m, 1)
            .expect("plan")
            .run(&feeds)
            .expect("run");
        let yb = crate::sim::Executor::new(&back, 1)
            .expect("plan")
            .run(&feeds)
            .expect("run");
        assert_eq!(ya[0].1.to_f32(), yb[0].1.to_f32());
    }
}
