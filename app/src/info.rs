//! What `npu-studio info` reports and the studio's inspector shows: one source for both,
//! so the two never disagree.

use npu_core::ir::{Model, NodeId, ValueId};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// A tensor as reported: name, dtype and dims (`?`-free strings, symbols kept).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IoInfo {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<String>,
}

/// Model-level facts.
#[derive(Serialize)]
pub struct InfoReport {
    pub file: String,
    pub producer: String,
    pub producer_version: String,
    pub ir_version: i64,
    pub opsets: BTreeMap<String, i64>,
    pub inputs: Vec<IoInfo>,
    pub outputs: Vec<IoInfo>,
    pub nodes: usize,
    pub ops: BTreeMap<String, usize>,
    pub parameters: usize,
    pub parameter_bytes: usize,
    /// Multiply-accumulates of Conv, ConvTranspose, MatMul and Gemm with known shapes.
    pub macs: u64,
    /// True when some of those ops had unknown shapes, so `macs` is a lower bound.
    pub macs_partial: bool,
    /// Per-node details (`info --nodes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_details: Option<Vec<NodeInfo>>,
}

/// One node as the inspector shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeInfo {
    pub name: String,
    pub op: String,
    pub domain: String,
    /// Attribute name → short rendering.
    pub attributes: BTreeMap<String, String>,
    /// Inputs in order; an omitted optional input has an empty name.
    pub inputs: Vec<IoInfo>,
    pub outputs: Vec<IoInfo>,
}

pub fn value_info(model: &Model, v: ValueId) -> IoInfo {
    let v = &model.graph.values[v];
    IoInfo {
        name: v.name.clone(),
        dtype: v.dtype.map_or_else(|| "?".into(), |d| d.name().to_owned()),
        shape: v
            .shape
            .as_ref()
            .map_or_else(Vec::new, |s| s.iter().map(ToString::to_string).collect()),
    }
}

fn missing() -> IoInfo {
    IoInfo {
        name: String::new(),
        dtype: String::new(),
        shape: Vec::new(),
    }
}

pub fn node_info(model: &Model, n: NodeId) -> NodeInfo {
    let node = &model.graph.nodes[n];
    let io = |list: &[Option<ValueId>]| {
        list.iter()
            .map(|v| v.map_or_else(missing, |v| value_info(model, v)))
            .collect()
    };
    NodeInfo {
        name: node.name.clone(),
        op: node.op.clone(),
        domain: node.domain.clone(),
        attributes: node.attrs.iter().map(|(k, a)| (k.clone(), a.summary())).collect(),
        inputs: io(&node.inputs),
        outputs: io(&node.outputs),
    }
}

pub fn model_info(model: &Model, path: &Path, with_nodes: bool) -> InfoReport {
    let (params, bytes) = model.parameter_count();
    let (macs, partial) = npu_core::sim::count_macs(model);
    let ios = |ids: &[ValueId]| ids.iter().map(|&v| value_info(model, v)).collect();
    InfoReport {
        file: path.display().to_string(),
        producer: model.meta.producer_name.clone(),
        producer_version: model.meta.producer_version.clone(),
        ir_version: model.meta.ir_version,
        opsets: model
            .meta
            .opsets
            .iter()
            .map(|(k, v)| (if k.is_empty() { "ai.onnx".into() } else { k.clone() }, *v))
            .collect(),
        inputs: ios(&model.graph.inputs),
        outputs: ios(&model.graph.outputs),
        nodes: model.graph.nodes.len(),
        ops: model.op_histogram().into_iter().collect(),
        parameters: params,
        parameter_bytes: bytes,
        macs,
        macs_partial: partial,
        node_details: with_nodes.then(|| (0..model.graph.nodes.len()).map(|n| node_info(model, n)).collect()),
    }
}
