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

/// The MACs of `model` with its dynamic inputs fixed to `shapes` (name → dims): shape
/// inference runs again on a copy. Returns the count and whether some op's shape was still
/// unknown.
pub fn macs_at<S: std::hash::BuildHasher>(
    model: &Model,
    shapes: &std::collections::HashMap<String, Vec<usize>, S>,
) -> Result<(u64, bool), npu_core::import::shapes::NoSuchInput> {
    let mut m = model.clone();
    npu_core::import::shapes::fix_inputs(&mut m, shapes)?;
    Ok(npu_core::sim::count_macs(&m))
}

/// Parses `NAME=1x3x640x640` (dims separated by `x` or `,`).
pub fn parse_shape(spec: &str) -> Result<(String, Vec<usize>), String> {
    let (name, dims) = spec
        .split_once('=')
        .ok_or_else(|| format!("'{spec}' is not NAME=DIMS"))?;
    let dims = dims
        .split(['x', ','])
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .map_err(|_| format!("bad dimension '{d}' in '{spec}'"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((name.trim().to_owned(), dims))
}

/// A shape as the inspector shows it: fixed dims and short names as they are, every other
/// symbolic dim (an expression such as `floor(height/2 - 1/2) + 1`, or a long generated
/// name) as a letter; with what each letter stands for.
pub fn short_shape(dims: &[String]) -> (String, Vec<(char, String)>) {
    const LETTERS: [char; 8] = ['N', 'M', 'K', 'L', 'P', 'Q', 'R', 'S'];
    let plain = |d: &str| d.len() <= 8 && d.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '?');
    let mut legend: Vec<(char, String)> = Vec::new();
    let mut parts = Vec::with_capacity(dims.len());
    for d in dims {
        if plain(d) {
            parts.push(d.clone());
            continue;
        }
        let letter = if let Some((c, _)) = legend.iter().find(|(_, e)| e == d) {
            *c
        } else {
            let c = LETTERS.get(legend.len()).copied().unwrap_or('?');
            legend.push((c, d.clone()));
            c
        };
        parts.push(letter.to_string());
    }
    (parts.join("×"), legend)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_become_letters_and_names_stay() {
        let dims: Vec<String> = [
            "batch",
            "84",
            "floor(height/2 - 1/2) + 1",
            "p2o.DynamicDimension.0",
            "floor(height/2 - 1/2) + 1",
        ]
        .map(String::from)
        .to_vec();
        let (text, legend) = short_shape(&dims);
        assert_eq!(text, "batch×84×N×M×N");
        assert_eq!(legend[0], ('N', "floor(height/2 - 1/2) + 1".to_owned()));
        assert_eq!(legend[1].1, "p2o.DynamicDimension.0");
        assert_eq!(
            short_shape(&["1".into(), "3".into(), "?".into()]),
            ("1×3×?".into(), vec![])
        );
        assert_eq!(
            parse_shape("images = 1x3x320x320"),
            Ok(("images".into(), vec![1, 3, 320, 320]))
        );
        assert!(parse_shape("images=1xHx3").is_err());
    }
}
