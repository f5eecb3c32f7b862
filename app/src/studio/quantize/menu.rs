//! The quantization view's section of a card's context menu (and the inspector's precision
//! choice): the precision of the node (or of the multi-selection), of every node of its op
//! type, and "select all of this op type".

use super::QuantView;
use super::overlay::PRECISIONS;
use crate::studio::commands::Command;
use npu_core::ir::{Model, NodeId};

/// The precision radio buttons for `nodes`; true once one was chosen.
pub fn precision_menu(ui: &mut egui::Ui, q: &QuantView, nodes: &[NodeId], out: &mut Vec<Command>) -> bool {
    // The precision they share, if they do.
    let mut all = nodes.iter().filter_map(|&n| q.precision_of(n));
    let first = all.next();
    let current = first.filter(|p| all.all(|x| x == *p));
    let mut chosen = false;
    for (name, p) in PRECISIONS {
        if ui.radio(current == Some(p), name).clicked() {
            out.push(Command::SetPrecision(nodes.to_vec(), p));
            chosen = true;
        }
    }
    chosen
}

/// "Every node of this op type" in a card's context menu: one undoable edit.
fn op_type_menu(ui: &mut egui::Ui, q: &QuantView, model: &Model, node: NodeId, out: &mut Vec<Command>) -> bool {
    let op = model.graph.nodes[node].op.clone();
    let same: Vec<NodeId> = (0..model.graph.nodes.len())
        .filter(|&n| model.graph.nodes[n].op == op && q.session.as_ref().is_some_and(|s| s.rows.contains_key(&n)))
        .collect();
    let mut chosen = false;
    ui.menu_button(format!("All {} {op} nodes", same.len()), |ui| {
        for (name, p) in PRECISIONS {
            if ui.button(name).clicked() {
                out.push(Command::SetPrecision(same.clone(), p));
                chosen = true;
                ui.close();
            }
        }
    });
    chosen
}

/// The card menu of node `n` (right-clicked), acting on the multi-selection when `n` is in
/// it. Only shown once a plan is simulated.
pub fn node_menu_ui(
    ui: &mut egui::Ui,
    q: &QuantView,
    model: &Model,
    n: NodeId,
    multi: &std::collections::BTreeSet<NodeId>,
    out: &mut Vec<Command>,
) {
    let group: Vec<NodeId> = if multi.len() > 1 && multi.contains(&n) {
        multi.iter().copied().collect()
    } else {
        vec![n]
    };
    if group.len() > 1 {
        ui.strong(format!("Precision of {} selected nodes", group.len()));
    } else {
        ui.strong(format!("Precision of {}", model.graph.nodes[n].label()));
        if q.precision_of(n).is_none() {
            ui.label("(not quantized: no layer of the plan)");
            return;
        }
    }
    if precision_menu(ui, q, &group, out) {
        ui.close();
    }
    ui.separator();
    if op_type_menu(ui, q, model, n, out) {
        ui.close();
    }
    let op = &model.graph.nodes[n].op;
    let same: Vec<NodeId> = (0..model.graph.nodes.len())
        .filter(|&m| &model.graph.nodes[m].op == op)
        .collect();
    if ui.button(format!("Select all {} {op} nodes", same.len())).clicked() {
        out.push(Command::SetMulti(same));
        ui.close();
    }
}
