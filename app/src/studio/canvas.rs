//! The graph canvas: pan, zoom, selection, level of detail and the minimap. Only boxes and
//! edges that intersect the view are drawn; below `BOX_ONLY_BELOW` zoom cards are plain
//! boxes and edges plain polylines.

use super::commands::{Command, Selection};
use super::theme::Theme;
use super::{Studio, ViewState};
use crate::graph::doc::{CARD_HEADER, CARD_LINE, CARD_PAD, GraphDoc, ItemId, ItemKind, dims_string};
use crate::graph::scene::{BoxKind, FRAME_HEADER, MINIMAP_CELLS, Scene};
use egui::epaint::{CubicBezierShape, PathShape};
use egui::{
    Align2, Color32, CornerRadius, FontId, Painter, Pos2, Rect, Sense, Shape, Stroke, StrokeKind, Vec2, pos2, vec2,
};
use npu_core::ir::Model;
use std::collections::{HashMap, HashSet};

pub const MIN_ZOOM: f32 = 0.0005;
pub const MAX_ZOOM: f32 = 4.0;
/// Below this zoom cards are drawn as plain boxes.
pub const BOX_ONLY_BELOW: f32 = 0.45;
/// Above this zoom edges carry their tensor shape.
pub const EDGE_LABELS_ABOVE: f32 = 0.9;

/// Graph ↔ screen transform of the canvas.
#[derive(Clone, Copy, Debug)]
pub struct Xf {
    pub screen_center: Pos2,
    pub center: Pos2,
    pub zoom: f32,
}

impl Xf {
    pub fn new(canvas: Rect, view: &ViewState) -> Self {
        Self {
            screen_center: canvas.center(),
            center: view.center,
            zoom: view.zoom,
        }
    }
    pub fn pos(&self, p: Pos2) -> Pos2 {
        self.screen_center + (p - self.center) * self.zoom
    }
    pub fn rect(&self, r: Rect) -> Rect {
        Rect::from_min_max(self.pos(r.min), self.pos(r.max))
    }
    pub fn graph(&self, s: Pos2) -> Pos2 {
        self.center + (s - self.screen_center) / self.zoom
    }
}

/// The part of the graph the canvas shows.
pub fn visible_graph_rect(canvas: Rect, view: &ViewState) -> Rect {
    Rect::from_center_size(view.center, canvas.size() / view.zoom)
}

/// What the painter highlights.
#[derive(Default)]
pub struct Highlights {
    pub selected_box: Option<usize>,
    pub hits: HashSet<usize>,
    /// Optimizer view: boxes of nodes a rewrite removed, made or rewrote, and boxes linked
    /// to the selection in the other pane.
    pub removed: HashSet<usize>,
    pub rewritten: HashSet<usize>,
    pub linked: HashSet<usize>,
    /// Quantization overlay: box → colour and badge text.
    pub marks: HashMap<usize, (Color32, String)>,
    /// Boxes of the nodes in the multi-selection.
    pub multi: HashSet<usize>,
}

/// What the user did in a pane this frame.
#[derive(Default)]
pub struct PaneEvents {
    /// A click: on a box, or on empty canvas (`Some(None)`).
    pub clicked: Option<Option<usize>>,
    pub double_clicked: Option<usize>,
    /// A right-click: on a box, or on empty canvas.
    pub secondary_clicked: Option<Option<usize>>,
    /// The pane's response (for its context menu).
    pub response: Option<egui::Response>,
    /// Shift was held during the click.
    pub shift: bool,
    /// A Shift+drag ended: the band's rectangle (graph units).
    pub band: Option<Rect>,
}

pub fn canvas_ui(st: &mut Studio, ui: &mut egui::Ui) {
    let full = ui.available_rect_before_wrap();
    ui.allocate_rect(full, Sense::hover());
    let compare = st.optimizer.after.is_some() && st.loaded.is_some();
    let rect = if compare {
        Rect::from_min_max(full.min, pos2(full.center().x - 1.0, full.max.y))
    } else {
        full
    };
    main_pane(st, ui, rect);
    if compare {
        let right = Rect::from_min_max(pos2(full.center().x + 1.0, full.min.y), full.max);
        super::optimize::after_pane_ui(st, ui, right);
        ui.painter()
            .vline(full.center().x, full.y_range(), Stroke::new(2.0, st.theme.card_stroke));
    }
}

fn main_pane(st: &mut Studio, ui: &mut egui::Ui, rect: Rect) {
    st.canvas_ready(rect);
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 0.0, st.theme.canvas);
    let hovering_files = ui.input(|i| !i.raw.hovered_files.is_empty());
    let Some(l) = &st.loaded else {
        painter.text(
            rect.center(),
            Align2::CENTER_CENTER,
            "Open a model: File › Open… (Ctrl+O), or drop an .onnx file here",
            FontId::proportional(16.0),
            st.theme.text_weak,
        );
        drop_overlay(&painter, rect, hovering_files, &st.theme);
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
    if let Some(after) = &st.optimizer.after {
        let boxes = |nodes: &mut dyn Iterator<Item = usize>| -> HashSet<usize> {
            nodes.filter_map(|n| own_card_box(&doc, &scene, n)).collect()
        };
        hl.removed = boxes(&mut after.removed_before.iter().copied());
        hl.rewritten = boxes(&mut after.rewritten_before.iter().copied());
        hl.linked = boxes(&mut after.linked_before(st.optimizer.after_selected).into_iter());
    }
    let marks = st.quant.card_marks(&st.theme.quant);
    hl.marks = marks
        .into_iter()
        .filter_map(|(n, m)| Some((own_card_box(&doc, &scene, n)?, m)))
        .collect();
    let events = pane_ui(
        ui,
        rect,
        ui.scope_id().with("main_canvas"),
        &scene,
        &doc,
        &model,
        &mut st.view,
        &st.theme,
        &hl,
        true,
    );
    if let Some(b) = events.double_clicked
        && let BoxKind::Collapsed(s) | BoxKind::Frame(s) = scene.boxes[b].kind
    {
        st.send(Command::ToggleScope(s));
    } else if let Some(hit) = events.clicked {
        let sel = hit.map(|b| match scene.boxes[b].kind {
            BoxKind::Item(i) => selection_of_item(&doc, i),
            BoxKind::Collapsed(s) | BoxKind::Frame(s) => Selection::Scope(s),
        });
        match (events.shift, sel) {
            // Shift+click adds a node to the multi-selection (the selected node with it when
            // it starts one), or takes it out.
            (true, Some(Selection::Node(n))) => {
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
                st.send(Command::SetMulti(multi.into_iter().collect()));
                st.send(Command::Select(added.then_some(Selection::Node(n))));
            }
            _ => {
                st.send(Command::SetMulti(Vec::new()));
                st.send(Command::Select(sel));
            }
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
        st.send(Command::SetMulti(multi.into_iter().collect()));
    }
    if let Some(hit) = events.secondary_clicked {
        st.quant.menu_node = hit.and_then(|b| match scene.boxes[b].kind {
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
            let Some(n) = st.quant.menu_node else {
                ui.label("Right-click a node to set its precision");
                return;
            };
            let group: Vec<usize> = if st.multi.len() > 1 && st.multi.contains(&n) {
                st.multi.iter().copied().collect()
            } else {
                vec![n]
            };
            if group.len() > 1 {
                ui.strong(format!("Precision of {} selected nodes", group.len()));
            } else {
                ui.strong(format!("Precision of {}", model.graph.nodes[n].label()));
                if st.quant.precision_of(n).is_none() {
                    ui.label("(not quantized: no layer of the plan)");
                    return;
                }
            }
            if super::quantize::precision_menu(ui, &mut st.quant, &group) {
                ui.close();
            }
            ui.separator();
            if super::quantize::op_type_menu(ui, &mut st.quant, &model, n) {
                ui.close();
            }
            let op = &model.graph.nodes[n].op;
            let same: Vec<usize> = (0..model.graph.nodes.len())
                .filter(|&m| &model.graph.nodes[m].op == op)
                .collect();
            if ui.button(format!("Select all {} {op} nodes", same.len())).clicked() {
                st.send(Command::SetMulti(same));
                ui.close();
            }
        });
    }
    minimap_ui(st, ui, rect, &scene);
    if st.optimizer.after.is_some() {
        pane_title(
            &painter,
            rect,
            &format!(
                "Before · {} nodes · red: removed · green: rewritten · blue: linked",
                model.graph.nodes.len()
            ),
            &st.theme,
        );
    }
    drop_overlay(&painter, rect, hovering_files, &st.theme);
}

/// The box of a node's own card: `None` for a Constant folded into its consumer's card
/// and for a node hidden in a collapsed scope (marks on the scope box would mislead).
pub fn own_card_box(doc: &GraphDoc, scene: &Scene, n: usize) -> Option<usize> {
    let i = doc.node_item.get(n).copied().flatten()?;
    let b = *scene.item_box.get(i)?;
    (doc.items[i].kind == ItemKind::Node(n) && scene.boxes[b].kind == BoxKind::Item(i)).then_some(b)
}

/// One graph pane: pans and zooms `view`, paints, shows tooltips, and reports clicks.
#[allow(clippy::too_many_arguments)]
pub fn pane_ui(
    ui: &mut egui::Ui,
    rect: Rect,
    id: egui::Id,
    scene: &Scene,
    doc: &GraphDoc,
    model: &Model,
    view: &mut ViewState,
    theme: &Theme,
    hl: &Highlights,
    band_select: bool,
) -> PaneEvents {
    let resp = ui.interact(rect, id, Sense::click_and_drag());
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 0.0, theme.canvas);
    let mut events = PaneEvents::default();
    // Shift+drag draws a selection band; a plain drag pans.
    let band_id = id.with("band");
    if band_select && resp.drag_started() && ui.input(|i| i.modifiers.shift) {
        let start = ui.input(|i| i.pointer.press_origin()).or(resp.interact_pointer_pos());
        if let Some(p) = start {
            ui.data_mut(|d| d.insert_temp(band_id, p));
        }
    }
    let band_start: Option<Pos2> = ui.data(|d| d.get_temp(band_id));
    let band_end = ui.input(|i| i.pointer.latest_pos());
    let mut band_screen = None;
    if let (Some(a), Some(b)) = (band_start, band_end) {
        band_screen = Some(Rect::from_two_pos(a, b));
        if !resp.dragged() {
            ui.data_mut(|d| d.remove::<Pos2>(band_id));
            let xf = Xf::new(rect, view);
            events.band = Some(Rect::from_two_pos(xf.graph(a), xf.graph(b)));
        }
    } else if resp.dragged() {
        view.center -= resp.drag_delta() / view.zoom;
    }
    if resp.hovered() {
        let (scroll, zoom_delta, pointer) =
            ui.input(|i| (i.smooth_scroll_delta, i.zoom_delta(), i.pointer.hover_pos()));
        if (zoom_delta - 1.0).abs() > 1e-4 {
            let at = pointer.unwrap_or(rect.center());
            let xf = Xf::new(rect, view);
            let g = xf.graph(at);
            view.zoom = (view.zoom * zoom_delta).clamp(MIN_ZOOM, MAX_ZOOM);
            view.center = g - (at - rect.center()) / view.zoom;
        } else if scroll != Vec2::ZERO {
            view.center -= scroll / view.zoom;
        }
    }
    let xf = Xf::new(rect, view);
    let hovered = resp.hover_pos().and_then(|p| scene.hit(xf.graph(p)));
    // A click counts where the pointer last interacted, even when a tooltip covers it.
    let pressed_on = ui
        .input(|i| i.pointer.interact_pos())
        .filter(|p| rect.contains(*p))
        .and_then(|p| scene.hit(xf.graph(p)));
    events.shift = ui.input(|i| i.modifiers.shift);
    if resp.double_clicked() {
        events.double_clicked = pressed_on;
    } else if resp.clicked() {
        events.clicked = Some(pressed_on);
    }
    if resp.secondary_clicked() {
        events.secondary_clicked = Some(pressed_on);
    }
    paint(&painter, scene, doc, model, &xf, theme, hl);
    if let Some(r) = band_screen {
        painter.rect(
            r,
            2.0,
            theme.selected.gamma_multiply(0.12),
            Stroke::new(1.0, theme.selected),
            StrokeKind::Inside,
        );
    }
    if let Some(b) = hovered {
        let text = match scene.boxes[b].kind {
            BoxKind::Item(i) => format!("{}\n{}", doc.items[i].title, doc.items[i].name),
            BoxKind::Collapsed(s) => {
                format!(
                    "{}: {} nodes\ndouble-click to expand",
                    doc.scopes[s].path, doc.scopes[s].total_items
                )
            }
            BoxKind::Frame(s) => format!("{}\ndouble-click to collapse", doc.scopes[s].path),
        };
        events.response = Some(resp.clone().on_hover_text_at_pointer(text));
    } else {
        events.response = Some(resp);
    }
    events
}

/// A pane's title in its top-left corner, on a backing so cards do not hide it.
pub fn pane_title(painter: &Painter, rect: Rect, text: &str, theme: &Theme) {
    let galley = painter.layout_no_wrap(text.to_owned(), FontId::proportional(13.0), theme.text);
    let at = rect.min + vec2(10.0, 8.0);
    painter.rect_filled(
        Rect::from_min_size(at - vec2(4.0, 2.0), galley.size() + vec2(8.0, 4.0)),
        4.0,
        theme.minimap_fill,
    );
    painter.galley(at, galley, theme.text);
}

fn drop_overlay(painter: &Painter, rect: Rect, hovering: bool, theme: &Theme) {
    if hovering {
        painter.rect_filled(rect, 0.0, theme.drop_overlay);
        painter.text(
            rect.center(),
            Align2::CENTER_CENTER,
            "Drop to open",
            FontId::proportional(22.0),
            theme.text,
        );
    }
}

pub fn selection_of_item(doc: &GraphDoc, i: ItemId) -> Selection {
    match doc.items[i].kind {
        ItemKind::Node(n) => Selection::Node(n),
        ItemKind::Input(v) | ItemKind::Output(v) => Selection::Value(v),
    }
}

/// Paints the visible part of a scene.
pub fn paint(painter: &Painter, scene: &Scene, doc: &GraphDoc, model: &Model, xf: &Xf, theme: &Theme, hl: &Highlights) {
    let clip = painter.clip_rect();
    let visible = Rect::from_min_max(xf.graph(clip.min), xf.graph(clip.max)).expand(8.0);
    let z = xf.zoom;
    let detailed = z >= BOX_ONLY_BELOW;
    // Frames first (behind everything).
    for (bi, b) in scene.boxes.iter().enumerate() {
        if let BoxKind::Frame(s) = b.kind
            && b.rect.intersects(visible)
        {
            let r = xf.rect(b.rect);
            let stroke_c = if hl.selected_box == Some(bi) {
                theme.selected
            } else {
                theme.frame_stroke
            };
            painter.rect(
                r,
                6.0 * z,
                theme.frame_fill,
                Stroke::new(1.0, stroke_c),
                StrokeKind::Inside,
            );
            if z * 11.0 >= 5.0 {
                let head = Rect::from_min_size(r.min, vec2(r.width(), FRAME_HEADER * z));
                painter.text(
                    head.left_center() + vec2(6.0 * z, 0.0),
                    Align2::LEFT_CENTER,
                    format!("▾ {}", doc.scopes[s].name),
                    FontId::proportional(11.0 * z),
                    theme.text_weak,
                );
            }
        }
    }
    // Edges.
    let edge_stroke = Stroke::new((1.2 * z.sqrt()).clamp(0.6, 2.0), theme.edge);
    let mut shapes: Vec<Shape> = Vec::new();
    // Below this zoom edges are shorter than a card is tall and only blur the boxes.
    let draw_edges = z >= 0.02;
    for e in scene.edges.iter().filter(|_| draw_edges) {
        if !e.bbox.intersects(visible) {
            continue;
        }
        let pts: Vec<Pos2> = e.points.iter().map(|&p| xf.pos(p)).collect();
        if detailed {
            for w in pts.windows(2) {
                let dy = (w[1].y - w[0].y) / 2.0;
                shapes.push(Shape::CubicBezier(CubicBezierShape::from_points_stroke(
                    [w[0], w[0] + vec2(0.0, dy), w[1] - vec2(0.0, dy), w[1]],
                    false,
                    egui::Color32::TRANSPARENT,
                    edge_stroke,
                )));
            }
            let tip = pts[pts.len() - 1];
            let dir = if pts[pts.len() - 2].y <= tip.y { 1.0 } else { -1.0 };
            let s = 5.0 * z.sqrt();
            shapes.push(Shape::convex_polygon(
                vec![tip, tip + vec2(-s, -1.6 * s * dir), tip + vec2(s, -1.6 * s * dir)],
                theme.edge,
                Stroke::NONE,
            ));
            if z >= EDGE_LABELS_ABOVE {
                let de = doc.edges[e.doc_edge];
                let v = &model.graph.values[de.value];
                let mut label = dims_string(v.shape.as_deref());
                if e.count > 1 {
                    label = format!("{label} (+{})", e.count - 1);
                }
                painter.text(
                    tip + vec2(4.0, -12.0 * z * dir),
                    Align2::LEFT_CENTER,
                    label,
                    FontId::proportional(9.5 * z.min(1.6)),
                    theme.edge_label,
                );
            }
        } else {
            shapes.push(Shape::Path(PathShape::line(pts, edge_stroke)));
        }
    }
    painter.extend(shapes);
    // Cards and collapsed scopes. When cards shrink to a few pixels, one box per 2-pixel
    // cell is enough: the others would paint the same pixels.
    let tiny = z * crate::graph::doc::CARD_HEADER < 3.0;
    let (gw, gh) = ((clip.width() / 2.0) as usize + 1, (clip.height() / 2.0) as usize + 1);
    let mut painted = if tiny { vec![false; gw * gh] } else { Vec::new() };
    for (bi, b) in scene.boxes.iter().enumerate() {
        if matches!(b.kind, BoxKind::Frame(_)) || !b.rect.intersects(visible) {
            continue;
        }
        let r = xf.rect(b.rect);
        let marked = hl.selected_box == Some(bi)
            || hl.multi.contains(&bi)
            || hl.hits.contains(&bi)
            || hl.linked.contains(&bi)
            || hl.rewritten.contains(&bi)
            || hl.removed.contains(&bi);
        if tiny && !marked {
            let c = r.center() - clip.min;
            let (cx, cy) = ((c.x / 2.0).max(0.0) as usize, (c.y / 2.0).max(0.0) as usize);
            if cx < gw && cy < gh {
                if painted[cy * gw + cx] {
                    continue;
                }
                painted[cy * gw + cx] = true;
            }
        }
        let outline = if hl.selected_box == Some(bi) || hl.multi.contains(&bi) {
            Some(theme.selected)
        } else if hl.linked.contains(&bi) {
            Some(theme.linked)
        } else if hl.hits.contains(&bi) {
            Some(theme.search_hit)
        } else if hl.rewritten.contains(&bi) {
            Some(theme.rewritten)
        } else if hl.removed.contains(&bi) {
            Some(theme.removed)
        } else {
            None
        };
        match b.kind {
            BoxKind::Item(i) => paint_card(painter, doc, i, r, z, detailed, theme),
            BoxKind::Collapsed(s) => {
                painter.rect(
                    r,
                    6.0 * z,
                    theme.collapsed_fill,
                    Stroke::new(1.5, theme.frame_stroke),
                    StrokeKind::Inside,
                );
                if detailed {
                    let sc = &doc.scopes[s];
                    painter.text(
                        r.center_top() + vec2(0.0, 14.0 * z),
                        Align2::CENTER_CENTER,
                        format!("⊞ {}", sc.name),
                        FontId::proportional(12.0 * z),
                        theme.text,
                    );
                    painter.text(
                        r.center_top() + vec2(0.0, 31.0 * z),
                        Align2::CENTER_CENTER,
                        format!("{} nodes", sc.total_items),
                        FontId::proportional(10.0 * z),
                        theme.text_weak,
                    );
                }
            }
            BoxKind::Frame(_) => {}
        }
        if hl.removed.contains(&bi) {
            painter.rect_filled(r, 4.0 * z, theme.removed_fade);
        }
        if let Some((c, text)) = hl.marks.get(&bi) {
            paint_mark(painter, r, z, detailed, *c, text, theme.quant.badge_text);
        }
        if let Some(c) = outline {
            painter.rect_stroke(r.expand(2.0), 6.0 * z + 2.0, Stroke::new(2.5, c), StrokeKind::Outside);
        }
    }
}

/// A quantization overlay mark: a coloured frame and a badge (a filled box when zoomed out).
fn paint_mark(painter: &Painter, r: Rect, z: f32, detailed: bool, c: Color32, text: &str, ink: Color32) {
    if !detailed {
        painter.rect_filled(r, 2.0 * z, c);
        return;
    }
    painter.rect_stroke(r.expand(1.5), 5.0 * z, Stroke::new(3.5, c), StrokeKind::Outside);
    let galley = painter.layout_no_wrap(text.to_owned(), FontId::proportional(10.5 * z), ink);
    let size = galley.size() + vec2(6.0 * z, 2.0 * z);
    let at = pos2(r.max.x - size.x, r.min.y - size.y * 0.6);
    painter.rect_filled(Rect::from_min_size(at, size), 3.0 * z, c);
    painter.galley(at + vec2(3.0 * z, 1.0 * z), galley, ink);
}

fn paint_card(painter: &Painter, doc: &GraphDoc, i: ItemId, r: Rect, z: f32, detailed: bool, theme: &Theme) {
    let item = &doc.items[i];
    let color = theme.family(item.family);
    if !detailed {
        painter.rect_filled(r, 2.0 * z, color);
        return;
    }
    let radius = (4.0 * z) as u8;
    painter.rect(
        r,
        radius,
        theme.card_fill,
        Stroke::new(1.0, theme.card_stroke),
        StrokeKind::Inside,
    );
    let head = Rect::from_min_size(r.min, vec2(r.width(), CARD_HEADER * z));
    painter.rect_filled(
        head,
        CornerRadius {
            nw: radius,
            ne: radius,
            sw: 0,
            se: 0,
        },
        color,
    );
    let pad = CARD_PAD * z;
    painter.text(
        head.left_center() + vec2(pad, 0.0),
        Align2::LEFT_CENTER,
        &item.title,
        FontId::proportional(13.0 * z),
        theme.header_text,
    );
    let card = painter.with_clip_rect(r.intersect(painter.clip_rect()));
    let mut y = head.max.y + CARD_LINE * z / 2.0 + 1.0 * z;
    let font = FontId::proportional(11.5 * z);
    let short = item.name.rsplit('/').next().unwrap_or(&item.name);
    card.text(
        pos2(r.min.x + pad, y),
        Align2::LEFT_CENTER,
        short,
        font.clone(),
        theme.text_weak,
    );
    for line in item.attrs.iter().chain(item.weights.iter().map(|w| &w.0)) {
        y += CARD_LINE * z;
        card.text(
            pos2(r.min.x + pad, y),
            Align2::LEFT_CENTER,
            line,
            font.clone(),
            theme.text,
        );
    }
}

fn minimap_ui(st: &mut Studio, ui: &mut egui::Ui, canvas: Rect, scene: &Scene) {
    let b = scene.bounds;
    if b.width() <= 0.0 || b.height() <= 0.0 {
        return;
    }
    let aspect = b.height() / b.width();
    let w = 160.0f32;
    let h = (w * aspect).clamp(50.0, 220.0);
    let w = if w * aspect > 220.0 { 220.0 / aspect } else { w }.max(30.0);
    let mm = Rect::from_min_size(canvas.max - vec2(w + 12.0, h + 12.0), vec2(w, h));
    let resp = ui.interact(mm, ui.scope_id().with("minimap"), Sense::click_and_drag());
    let painter = ui.painter_at(mm.expand(2.0));
    painter.rect(
        mm,
        4.0,
        st.theme.minimap_fill,
        Stroke::new(1.0, st.theme.card_stroke),
        StrokeKind::Outside,
    );
    let cell = vec2(w / MINIMAP_CELLS as f32, h / MINIMAP_CELLS as f32);
    for &(c, r) in &scene.minimap {
        let min = mm.min + vec2(f32::from(c) * cell.x, f32::from(r) * cell.y);
        painter.rect_filled(Rect::from_min_size(min, cell), 0.0, st.theme.minimap_cell);
    }
    let to_mm = |p: Pos2| mm.min + vec2((p.x - b.min.x) / b.width() * w, (p.y - b.min.y) / b.height() * h);
    let vis = visible_graph_rect(canvas, &st.view);
    let vr = Rect::from_min_max(to_mm(vis.min), to_mm(vis.max)).intersect(mm);
    painter.rect_stroke(vr, 0.0, Stroke::new(1.5, st.theme.minimap_view), StrokeKind::Inside);
    if (resp.clicked() || resp.dragged())
        && let Some(p) = resp.interact_pointer_pos()
    {
        let t = (p - mm.min) / vec2(w, h);
        st.view.center = pos2(b.min.x + t.x * b.width(), b.min.y + t.y * b.height());
    }
}
