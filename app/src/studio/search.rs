//! Search over node names, op types and tensor names, with next/previous and jump-to.

use super::commands::{Command, Selection};
use super::document::Loaded;
use crate::graph::doc::GraphDoc;
use crate::graph::scene::Scene;
use std::collections::HashSet;

/// The most matches kept for one query.
const MAX_HITS: usize = 5000;

#[derive(Default)]
pub struct Search {
    pub query: String,
    searched: String,
    pub hits: Vec<Hit>,
    /// Index of the match last jumped to.
    pub current: Option<usize>,
    pub focus_requested: bool,
}

#[derive(Clone, Debug)]
pub struct Hit {
    pub selection: Selection,
    pub text: String,
}

impl Search {
    /// Boxes to outline in the canvas.
    pub fn hit_boxes(&self, doc: &GraphDoc, scene: &Scene) -> HashSet<usize> {
        self.hits
            .iter()
            .filter_map(|h| match h.selection {
                Selection::Node(n) => doc.node_item.get(n).copied().flatten().map(|i| scene.item_box[i]),
                Selection::Scope(s) => scene.scope_box.get(&s).copied(),
                Selection::Value(_) => None,
            })
            .collect()
    }
}

/// Matches a query against a model: node names and op types first, then tensor names
/// (weights included), then scopes. Case-insensitive substring match.
pub fn find(model: &npu_core::ir::Model, doc: &GraphDoc, query: &str) -> Vec<Hit> {
    let q = query.trim().to_lowercase();
    if q.is_empty() {
        return Vec::new();
    }
    let g = &model.graph;
    let mut hits = Vec::new();
    for (ni, n) in g.nodes.iter().enumerate() {
        if n.name.to_lowercase().contains(&q) || n.op.to_lowercase() == q {
            hits.push(Hit {
                selection: Selection::Node(ni),
                text: format!("{} ({})", n.label(), n.op),
            });
        }
    }
    for (vi, v) in g.values.iter().enumerate() {
        if v.name.to_lowercase().contains(&q) {
            hits.push(Hit {
                selection: Selection::Value(vi),
                text: format!("tensor {}", v.name),
            });
        }
    }
    for (si, s) in doc.scopes.iter().enumerate().skip(1) {
        if s.path.to_lowercase().contains(&q) {
            hits.push(Hit {
                selection: Selection::Scope(si),
                text: format!("scope {}", s.path),
            });
        }
    }
    hits.truncate(MAX_HITS);
    hits
}

impl Search {
    /// Moves to the next (`d` > 0) or previous match; returns it, to reveal.
    pub fn step(&mut self, loaded: Option<&Loaded>, d: i32) -> Option<Selection> {
        self.refresh(loaded);
        let n = self.hits.len();
        if n == 0 {
            return None;
        }
        let next = match self.current {
            None if d >= 0 => 0,
            None => n - 1,
            Some(c) => (c as i64 + i64::from(d)).rem_euclid(n as i64) as usize,
        };
        self.current = Some(next);
        Some(self.hits[next].selection)
    }

    /// Recomputes the matches when the query changed.
    fn refresh(&mut self, loaded: Option<&Loaded>) {
        if self.searched == self.query {
            return;
        }
        self.searched = self.query.clone();
        self.current = None;
        self.hits = match loaded {
            Some(l) => find(&l.model, &l.doc, &self.query),
            None => Vec::new(),
        };
    }
}

/// The tool bar: search box, match navigation, view buttons.
pub fn toolbar_ui(ui: &mut egui::Ui, search: &mut Search, loaded: Option<&Loaded>, out: &mut Vec<Command>) {
    ui.horizontal(|ui| {
        let label = ui.label("Search");
        let resp = ui
            .add(
                egui::TextEdit::singleline(&mut search.query)
                    .hint_text("node, op type or tensor (Ctrl+F)")
                    .desired_width(300.0),
            )
            .labelled_by(label.id);
        if std::mem::take(&mut search.focus_requested) {
            resp.request_focus();
        }
        if resp.changed() {
            search.refresh(loaded);
        }
        if resp.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter)) {
            let back = ui.input(|i| i.modifiers.shift);
            out.push(Command::SearchStep(if back { -1 } else { 1 }));
            resp.request_focus();
        }
        let n = search.hits.len();
        let summary = match (n, search.current) {
            (0, _) if search.query.trim().is_empty() => String::new(),
            (0, _) => "no matches".to_owned(),
            (n, Some(c)) => format!("{} of {n}", c + 1),
            (n, None) => format!("{n} matches"),
        };
        ui.label(summary);
        if ui.add_enabled(n > 0, egui::Button::new("◀ Previous")).clicked() {
            out.push(Command::SearchStep(-1));
        }
        if ui.add_enabled(n > 0, egui::Button::new("Next ▶")).clicked() {
            out.push(Command::SearchStep(1));
        }
        if let Some(c) = search.current
            && let Some(h) = search.hits.get(c)
        {
            ui.weak(&h.text);
        }
        ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
            if ui.button("Help").on_hover_text("Keyboard shortcuts (F1)").clicked() {
                out.push(Command::ToggleHelp);
            }
            if ui.button("Zoom to selection").clicked() {
                out.push(Command::ZoomToSelection);
            }
            if ui
                .button("Fit")
                .on_hover_text("Fit the graph to the window (F)")
                .clicked()
            {
                out.push(Command::FitView);
            }
            if ui.button("−").on_hover_text("Zoom out (−)").clicked() {
                out.push(Command::ZoomBy(0.8));
            }
            if ui.button("+").on_hover_text("Zoom in (+)").clicked() {
                out.push(Command::ZoomBy(1.25));
            }
        });
    });
}
