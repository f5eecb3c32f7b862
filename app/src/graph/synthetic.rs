//! Synthetic models for layout benchmarks and tests: deep CNN-like DAGs with skip
//! connections, parallel branches and a three-level name-scope tree.

use npu_core::ir::{Graph, Metadata, Model, Node, Value};
use std::collections::BTreeMap;

/// A model of `n` nodes named `/stage{a}/block{b}/unit{c}/op{d}`, 10 per unit, 10 units a
/// block, 10 blocks a stage. Every 5th node adds a skip from a few nodes back; every
/// 13th starts a two-way branch that merges at the next node; every 40 nodes a four-way
/// parallel block merges in a Concat.
pub fn model(n: usize) -> Model {
    let mut g = Graph {
        name: format!("synthetic_{n}"),
        ..Graph::default()
    };
    let mut input = Value::new("x");
    input.dtype = Some(npu_core::ir::DType::F32);
    g.values.push(input);
    g.inputs.push(0);
    let mut outputs: Vec<usize> = vec![0];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rand = |m: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % m.max(1) as u64) as usize
    };
    let mut pending_branch: Option<usize> = None;
    let mut fork = 0usize;
    let mut heads = [0usize; 4];
    for i in 0..n {
        let (a, b, c, d) = (i / 1000, (i / 100) % 10, (i / 10) % 10, i % 10);
        let name = format!("/stage{a}/block{b}/unit{c}/op{d}");
        let last = *outputs.last().unwrap_or(&0);
        let k = i % 40;
        let (op, inputs): (&str, Vec<usize>) = if k < 8 && i >= 40 && i + 9 < n {
            // A four-way parallel block (as in Inception or Q/K/V projections).
            if k == 0 {
                fork = last;
            }
            let input = if k < 4 { fork } else { heads[k % 4] };
            heads[k % 4] = g.values.len();
            (["Conv", "Relu"][k / 4], vec![input])
        } else if k == 8 && i >= 40 {
            ("Concat", heads.to_vec())
        } else if let Some(br) = pending_branch.take() {
            ("Add", vec![last, br])
        } else if i % 13 == 12 && outputs.len() > 1 {
            pending_branch = Some(last);
            ("Conv", vec![outputs[outputs.len() - 2]])
        } else if i % 5 == 4 && outputs.len() > 6 {
            ("Add", vec![last, outputs[outputs.len() - 2 - rand(5)]])
        } else {
            (["Conv", "Relu", "BatchNormalization", "Mul"][i % 4], vec![last])
        };
        let out = g.values.len();
        let mut v = Value::new(format!("{name}_out"));
        v.dtype = Some(npu_core::ir::DType::F32);
        v.producer = Some(i);
        g.values.push(v);
        g.nodes.push(Node {
            name,
            op: op.into(),
            domain: String::new(),
            inputs: inputs.into_iter().map(Some).collect(),
            outputs: vec![Some(out)],
            attrs: BTreeMap::new(),
            origin: vec![i],
        });
        outputs.push(out);
    }
    if let Some(&last) = outputs.last() {
        g.outputs.push(last);
    }
    Model {
        graph: g,
        meta: Metadata::default(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn synthetic_model_is_valid_with_scopes() {
        let m = super::model(2500);
        m.validate().expect("valid");
        let doc = crate::graph::doc::GraphDoc::build(&m);
        assert_eq!(doc.items.len(), 2502);
        assert!(doc.scopes.iter().any(|s| s.path == "stage2/block4/unit9"));
    }
}
