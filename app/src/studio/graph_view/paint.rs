//! Painting a scene: frames, edges, cards (or plain boxes when zoomed out), overlay marks
//! and outlines; only what intersects the view.

use super::{BOX_ONLY_BELOW, EDGE_LABELS_ABOVE, Highlights, Xf};
use crate::graph::doc::{CARD_HEADER, CARD_LINE, CARD_PAD, GraphDoc, ItemId, dims_string};
use crate::graph::scene::{BoxKind, FRAME_HEADER, Scene};
use crate::studio::theme::Theme;
use egui::epaint::{CubicBezierShape, PathShape};
use egui::{Align2, Color32, CornerRadius, FontId, Painter, Pos2, Rect, Shape, Stroke, StrokeKind, pos2, vec2};
use npu_core::ir::Model;

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
        if let Some((c, text)) = hl.side_marks.get(&bi) {
            paint_side_mark(painter, r, z, detailed, *c, text, theme.quant.badge_text);
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

/// A second overlay's mark: a badge on the card's lower left corner (a corner square when
/// zoomed out).
fn paint_side_mark(painter: &Painter, r: Rect, z: f32, detailed: bool, c: Color32, text: &str, ink: Color32) {
    if !detailed {
        let s = (r.height() * 0.45).min(r.width() * 0.3);
        painter.rect_filled(Rect::from_min_size(pos2(r.min.x, r.max.y - s), vec2(s, s)), 0.0, c);
        return;
    }
    let galley = painter.layout_no_wrap(text.to_owned(), FontId::proportional(10.0 * z), ink);
    let size = galley.size() + vec2(6.0 * z, 2.0 * z);
    let at = pos2(r.min.x, r.max.y - 2.0 * z);
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
