//! The studio's main graph pane: it gathers what each feature highlights (the selection,
//! search hits, the optimizer's before view, the quantization overlay) and contributes to
//! the card menu, draws through `graph_view`, and turns the pane's clicks, bands and
//! double clicks into commands. With the optimizer's comparison open the canvas splits and
//! the right half is the optimizer's after pane.

use super::Studio;
use super::commands::{Command, Selection};
use super::graph_view::{self, Highlights, Pane, own_card_box, pane_ui};
use super::optimize;
use super::quantize;
use crate::graph::doc::{GraphDoc, ItemId, ItemKind};
use crate::graph::scene::BoxKind;
use egui::{Align2, FontId, Rect, Sense, Stroke, pos2};
use std::collections::HashMap;

/// The canvas (central panel).
pub fn canvas_ui(st: &mut Studio, ui: &mut egui::Ui, out: &mut Vec<Command>) {
    let full = ui.available_rect_before_wrap();
    ui.allocate_rect(full, Sense::hover());
    let compare = st.optimizer.after.is_some() && st.loaded.is_some();
    let rect = if compare {
        Rect::from_min_max(full.min, pos2(full.center().x - 1.0, full.max.y))
    } else {
        full
    };
    main_pane(st, ui, rect, out);
    if compare {
        let right = Rect::from_min_max(pos2(full.center().x + 1.0, full.min.y), full.max);
        let theme = st.theme.clone();
        if let Some(status) = optimize::after_pane_ui(ui, right, &mut st.optimizer, &theme, &st.view, st.selection, out)
        {
            st.status = status;
        }
        ui.painter()
            .vline(full.center().x, full.y_range(), Stroke::new(2.0, st.theme.card_stroke));
    }
}

/// What a click on an item selects.
fn selection_of_item(doc: &GraphDoc, i: ItemId) -> Selection {
    match doc.items[i].kind {
        ItemKind::Node(n) => Selection::Node(n),
        ItemKind::Input(v) | ItemKind::Output(v) => Selection::Value(v),
    }
}

fn main_pane(st: &mut Studio, ui: &mut egui::Ui, rect: Rect, out: &mut Vec<Command>) {
    st.canvas_ready(rect);
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 0.0, st.theme.canvas);
    let hovering_files = ui.input(|i| !i.raw.hovered_files.is_empty());
    let Some(l) = &st.loaded else {
        painter.text(
            rect.center(),
            Align2::CENTER_CENTER,
            "Open a model: File › Open… (Ctrl+O), or drop an .onnx or .tflite file here",
            FontId::proportional(16.0),
            st.theme.text_weak,
        );
        graph_view::drop_overlay(&painter, rect, hovering_files, &st.theme);
        return;
    };
    let scene = l.scene.clone();
    let doc = l.doc.clone();
    let model = l.model.clone();
    let mut hl = Highlights {
        selected_box: st.selection.and_then(|s| st.box_of(s)),
        hits: st.search.hit_boxes(&doc, &scene),
        multi: st.multi.iter().filter_map(|&n| own_card_box(&doc, &scene, n)).collect(),
        ..Highlights::default()
    };
    st.optimizer.before_highlights(&doc, &scene, &mut hl);
    // The quantization overlay frames the cards; the placement rides beside it as a corner
    // badge (or takes the frame when there is no quantization overlay, or when it colours
    // by latency).
    let quant = if st.quant.overlay.emulated() {
        let q = &st.quant;
        st.emulate.card_marks(
            q.overlay == quantize::Overlay::Gap,
            q.gap_db,
            |x| q.heat(&st.theme.quant, x),
            &st.theme.quant,
        )
    } else {
        st.quant.card_marks(&st.theme.quant)
    };
    let (marks, side) = if st.compile.show_placement && st.compile.result.is_some() {
        let placed = st.compile.card_marks(&st.theme.quant);
        if st.compile.colour_by_latency || quant.is_empty() {
            (placed, HashMap::new())
        } else {
            (quant, placed)
        }
    } else {
        (quant, HashMap::new())
    };
    let boxes = |m: HashMap<_, _>| {
        m.into_iter()
            .filter_map(|(n, m)| Some((own_card_box(&doc, &scene, n)?, m)))
            .collect()
    };
    hl.marks = boxes(marks);
    hl.side_marks = boxes(side);
    let events = pane_ui(
        ui,
        rect,
        ui.scope_id().with("main_canvas"),
        &Pane {
            scene: &scene,
            doc: &doc,
            model: &model,
            theme: &st.theme,
            highlights: &hl,
            band_select: true,
        },
        &mut st.view,
    );
    if let Some(b) = events.double_clicked
        && let BoxKind::Collapsed(s) | BoxKind::Frame(s) = scene.boxes[b].kind
    {
        out.push(Command::ToggleScope(s));
    } else if let Some(hit) = events.clicked {
        let sel = hit.map(|b| match scene.boxes[b].kind {
            BoxKind::Item(i) => selection_of_item(&doc, i),
            BoxKind::Collapsed(s) | BoxKind::Frame(s) => Selection::Scope(s),
        });
        // Shift+click adds a node to the multi-selection (the selected node with it when it
        // starts one), or takes it out.
        if let (true, Some(Selection::Node(n))) = (events.shift, sel) {
            let mut multi = st.multi.clone();
            if multi.is_empty()
                && let Some(Selection::Node(m)) = st.selection
            {
                multi.insert(m);
            }
            let added = !multi.remove(&n);
            if added {
                multi.insert(n);
            }
            out.push(Command::SetMulti(multi.into_iter().collect()));
            out.push(Command::Select(added.then_some(Selection::Node(n))));
        } else {
            out.push(Command::SetMulti(Vec::new()));
            out.push(Command::Select(sel));
        }
    }
    if let Some(band) = events.band {
        // Every node card the band touches joins the multi-selection.
        let mut multi = st.multi.clone();
        for b in &scene.boxes {
            if let BoxKind::Item(i) = b.kind
                && let ItemKind::Node(n) = doc.items[i].kind
                && b.rect.intersects(band)
            {
                multi.insert(n);
            }
        }
        out.push(Command::SetMulti(multi.into_iter().collect()));
    }
    if let Some(hit) = events.secondary_clicked {
        // Which card the menu belongs to: the pane's own state while the menu is open.
        st.menu_node = hit.and_then(|b| match scene.boxes[b].kind {
            BoxKind::Item(i) => match doc.items[i].kind {
                ItemKind::Node(n) => Some(n),
                _ => None,
            },
            _ => None,
        });
    }
    let quantized = st.quant.session.as_ref().is_some_and(|s| s.result.is_some());
    if quantized && let Some(resp) = &events.response {
        resp.context_menu(|ui| {
            let Some(n) = st.menu_node else {
                ui.label("Right-click a node to set its precision");
                return;
            };
            quantize::menu::node_menu_ui(ui, &st.quant, &model, n, &st.multi, out);
            ui.separator();
            // The override applies to the multi-selection when the node is in it.
            let nodes: Vec<usize> = if st.multi.contains(&n) {
                st.multi.iter().copied().collect()
            } else {
                vec![n]
            };
            let mut on = nodes.iter().all(|m| st.compile.force_cpu.contains(m));
            if ui
                .checkbox(&mut on, "Keep on the CPU")
                .on_hover_text("The compile places these nodes on the host CPU")
                .changed()
            {
                out.push(Command::ForceCpu(nodes, on));
                ui.close();
            }
        });
    }
    graph_view::minimap_ui(ui, rect, &scene, &mut st.view, &st.theme);
    if st.optimizer.after.is_some() {
        graph_view::pane_title(
            &painter,
            rect,
            &format!(
                "Before · {} nodes · red: removed · green: rewritten · blue: linked",
                model.graph.nodes.len()
            ),
            &st.theme,
        );
    }
    graph_view::drop_overlay(&painter, rect, hovering_files, &st.theme);
}
