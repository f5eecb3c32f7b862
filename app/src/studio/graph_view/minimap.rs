//! The minimap: the whole scene in a corner, the visible part outlined; click or drag to
//! move the view there.

use super::{ViewState, visible_graph_rect};
use crate::graph::scene::{MINIMAP_CELLS, Scene};
use crate::studio::theme::Theme;
use egui::{Pos2, Rect, Sense, Stroke, StrokeKind, pos2, vec2};

/// Draws the minimap in the canvas's bottom-right corner; a click or drag moves `view`.
pub fn minimap_ui(ui: &mut egui::Ui, canvas: Rect, scene: &Scene, view: &mut ViewState, theme: &Theme) {
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
        theme.minimap_fill,
        Stroke::new(1.0, theme.card_stroke),
        StrokeKind::Outside,
    );
    let cell = vec2(w / MINIMAP_CELLS as f32, h / MINIMAP_CELLS as f32);
    for &(c, r) in &scene.minimap {
        let min = mm.min + vec2(f32::from(c) * cell.x, f32::from(r) * cell.y);
        painter.rect_filled(Rect::from_min_size(min, cell), 0.0, theme.minimap_cell);
    }
    let to_mm = |p: Pos2| mm.min + vec2((p.x - b.min.x) / b.width() * w, (p.y - b.min.y) / b.height() * h);
    let vis = visible_graph_rect(canvas, view);
    let vr = Rect::from_min_max(to_mm(vis.min), to_mm(vis.max)).intersect(mm);
    painter.rect_stroke(vr, 0.0, Stroke::new(1.5, theme.minimap_view), StrokeKind::Inside);
    if (resp.clicked() || resp.dragged())
        && let Some(p) = resp.interact_pointer_pos()
    {
        let t = (p - mm.min) / vec2(w, h);
        view.center = pos2(b.min.x + t.x * b.width(), b.min.y + t.y * b.height());
    }
}
