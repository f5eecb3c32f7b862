//! The left panel: the tree of name scopes (collapse, expand, reveal) and the legend of op
//! families.

use super::commands::{Command, Selection};
use super::document::Loaded;
use super::theme::Theme;
use crate::graph::doc::{GraphDoc, ScopeId};
use std::collections::HashSet;

/// The left panel.
pub fn outline_ui(
    ui: &mut egui::Ui,
    loaded: Option<&Loaded>,
    selection: Option<Selection>,
    theme: &Theme,
    out: &mut Vec<Command>,
) {
    ui.heading("Scopes");
    let Some(l) = loaded else {
        ui.label("No model open");
        return;
    };
    let doc = l.doc.clone();
    let collapsed = l.collapsed.clone();
    ui.horizontal(|ui| {
        if ui.small_button("Collapse all").clicked() {
            out.push(Command::SetAllScopes { collapsed: true });
        }
        if ui.small_button("Expand all").clicked() {
            out.push(Command::SetAllScopes { collapsed: false });
        }
    });
    egui::ScrollArea::vertical()
        .id_salt("scope_tree")
        .max_height(ui.available_height() * 0.6)
        .show(ui, |ui| {
            if doc.scopes.len() <= 1 {
                ui.label("This model has no name scopes");
            }
            for &c in &doc.scopes[0].children {
                scope_tree_ui(ui, &doc, c, &collapsed, selection, out);
            }
        });
    ui.separator();
    ui.heading("Op families");
    for f in crate::graph::doc::Family::ALL {
        ui.horizontal(|ui| {
            let (r, _) = ui.allocate_exact_size(egui::vec2(14.0, 14.0), egui::Sense::hover());
            ui.painter().rect_filled(r, 3.0, theme.family(f));
            ui.label(f.label());
        });
    }
}

fn scope_tree_ui(
    ui: &mut egui::Ui,
    doc: &GraphDoc,
    s: ScopeId,
    collapsed: &HashSet<ScopeId>,
    selection: Option<Selection>,
    out: &mut Vec<Command>,
) {
    let sc = &doc.scopes[s];
    let is_collapsed = collapsed.contains(&s);
    let row = |ui: &mut egui::Ui, out: &mut Vec<Command>| {
        let (icon, verb) = if is_collapsed {
            ("⊞", "Expand")
        } else {
            ("⊟", "Collapse")
        };
        let label = format!("{verb} {}", sc.path);
        let resp = ui.small_button(icon).on_hover_text(format!("{label} in the graph"));
        resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, &label));
        if resp.clicked() {
            out.push(Command::ToggleScope(s));
        }
        let selected = selection == Some(Selection::Scope(s));
        if ui
            .selectable_label(selected, format!("{} ({})", sc.name, sc.total_items))
            .clicked()
        {
            out.push(Command::Reveal(Selection::Scope(s)));
        }
    };
    if sc.children.is_empty() {
        ui.horizontal(|ui| row(ui, out));
    } else {
        let id = ui.make_persistent_id(("scope", s));
        // Small trees start open at the top level; large ones start closed.
        let open = sc.depth <= 1 && doc.scopes.len() <= 200;
        egui::collapsing_header::CollapsingState::load_with_default_open(ui.ctx(), id, open)
            .show_header(ui, |ui| row(ui, out))
            .body(|ui| {
                for &c in &sc.children {
                    scope_tree_ui(ui, doc, c, collapsed, selection, out);
                }
            });
    }
}
