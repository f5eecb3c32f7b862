//! One graph pane, knowing nothing of the studio: the graph ↔ screen transform, pan and
//! zoom, hit testing, tooltips, the highlights features ask for, and the events a pane
//! reports (clicks, double clicks, right clicks, a Shift+drag band). The studio's canvas
//! and the optimizer's after pane both draw through it.

mod minimap;
mod paint;

pub use minimap::minimap_ui;
pub use paint::paint;

use super::theme::Theme;
use crate::graph::doc::{GraphDoc, ItemKind};
use crate::graph::scene::{BoxKind, Scene};
use egui::{Align2, Color32, FontId, Painter, Pos2, Rect, Sense, Stroke, StrokeKind, Vec2, vec2};
use npu_core::ir::Model;
use std::collections::{HashMap, HashSet};

pub const MIN_ZOOM: f32 = 0.0005;
pub const MAX_ZOOM: f32 = 4.0;
/// Below this zoom cards are drawn as plain boxes.
pub const BOX_ONLY_BELOW: f32 = 0.45;
/// Above this zoom edges carry their tensor shape.
pub const EDGE_LABELS_ABOVE: f32 = 0.9;

/// Pan and zoom of a graph pane.
#[derive(Clone, Copy, Debug)]
pub struct ViewState {
    /// Graph point shown at the canvas centre.
    pub center: egui::Pos2,
    /// Screen points per graph unit.
    pub zoom: f32,
}

impl Default for ViewState {
    fn default() -> Self {
        Self {
            center: egui::Pos2::ZERO,
            zoom: 1.0,
        }
    }
}

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
    /// A second overlay beside it (the placement): box → colour and corner badge text.
    pub side_marks: HashMap<usize, (Color32, String)>,
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

/// What one pane shows.
pub struct Pane<'a> {
    pub scene: &'a Scene,
    pub doc: &'a GraphDoc,
    pub model: &'a Model,
    pub theme: &'a Theme,
    pub highlights: &'a Highlights,
    /// Shift+drag draws a selection band (the main pane); otherwise it pans.
    pub band_select: bool,
}

/// The box of a node's own card: `None` for a Constant folded into its consumer's card
/// and for a node hidden in a collapsed scope (marks on the scope box would mislead).
pub fn own_card_box(doc: &GraphDoc, scene: &Scene, n: usize) -> Option<usize> {
    let i = doc.node_item.get(n).copied().flatten()?;
    let b = *scene.item_box.get(i)?;
    (doc.items[i].kind == ItemKind::Node(n) && scene.boxes[b].kind == BoxKind::Item(i)).then_some(b)
}

/// One graph pane: pans and zooms `view`, paints, shows tooltips, and reports clicks.
pub fn pane_ui(ui: &mut egui::Ui, rect: Rect, id: egui::Id, pane: &Pane<'_>, view: &mut ViewState) -> PaneEvents {
    let Pane {
        scene,
        doc,
        model,
        theme,
        highlights: hl,
        band_select,
    } = *pane;
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

/// The "drop to open" veil while files hover over the window.
pub fn drop_overlay(painter: &Painter, rect: Rect, hovering: bool, theme: &Theme) {
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
