//! IR → ONNX protobuf, the inverse of `import::onnx`: nodes, attributes (subgraphs
//! included), initializers as raw data, typed inputs and outputs, opsets and metadata.

use super::{ExportError, write_atomic};
use crate::import::onnx::proto::{
    self, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, attribute_proto::AttributeType,
};
use crate::ir::{Attr, Constant, DType, Dim, Graph, Model, Tensor, Value, ValueKind};
use bytes::Bytes;
use prost::Message;
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

fn model_proto(model: &Model) -> ModelProto {
    let m = &model.meta;
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
