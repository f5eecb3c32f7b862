//! The graph picture of the study report: the optimized graph laid out as the studio lays
//! it out, each box with its node's cumulative SQNR and, with a target, its device.

use crate::graph::layout::{Params, layout};
use egui::vec2;
use npu_core::ir::Model;
use npu_core::report::{GraphNode, GraphPicture, StudyReport};
use std::collections::{HashMap, HashSet};

/// The optimized graph laid out as the studio lays it out, each box with the cumulative
/// SQNR of its node's first simulated tensor and, with a target, its device.
pub fn picture(model: &Model, r: &StudyReport) -> GraphPicture {
    let g = &model.graph;
    let mut heat: HashMap<&str, Option<f64>> = HashMap::new();
    for l in &r.layers {
        heat.entry(l.node.as_str()).or_insert(l.sqnr_cumulative_db);
    }
    let device: HashMap<&str, &str> = r
        .target
        .iter()
        .flat_map(|t| t.layers.iter().map(|l| (l.node.as_str(), l.device.as_str())))
        .collect();
    let sizes: Vec<egui::Vec2> = g
        .nodes
        .iter()
        .map(|n| vec2((7.0 * n.op.chars().count() as f32 + 20.0).max(64.0), 26.0))
        .collect();
    let mut edges = Vec::new();
    let mut seen = HashSet::new();
    for (j, n) in g.nodes.iter().enumerate() {
        for v in n.inputs.iter().flatten() {
            if let Some(i) = g.values[*v].producer
                && seen.insert((i, j))
            {
                edges.push((i, j));
            }
        }
    }
    let l = layout(&sizes, &edges, &Params::default());
    GraphPicture {
        width: l.size.x,
        height: l.size.y,
        nodes: g
            .nodes
            .iter()
            .zip(&l.rects)
            .map(|(n, rect)| GraphNode {
                name: n.name.clone(),
                op: n.op.clone(),
                x: rect.min.x,
                y: rect.min.y,
                w: rect.width(),
                h: rect.height(),
                sqnr_db: heat.get(n.name.as_str()).copied().flatten(),
                measured: heat.contains_key(n.name.as_str()),
                device: device.get(n.name.as_str()).map(|d| (*d).to_owned()),
            })
            .collect(),
        edges: l
            .routes
            .iter()
            .map(|r| r.points.iter().map(|p| (p.x, p.y)).collect())
            .collect(),
    }
}
