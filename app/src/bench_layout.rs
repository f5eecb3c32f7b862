//! `npu-studio bench-layout`: layout and paint timings of the graph view on synthetic
//! DAGs and on model files. Single-threaded, as the studio's layout job is.

use crate::graph::doc::GraphDoc;
use crate::graph::scene::{Scene, SceneBuilder};
use crate::graph::synthetic;
use crate::studio::ViewState;
use crate::studio::graph_view::{Highlights, Xf, paint};
use crate::studio::theme::Theme;
use npu_core::ir::Model;
use serde::Serialize;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

/// Canvas size used for frame timings (points).
const CANVAS: [f32; 2] = [1200.0, 800.0];
const FRAMES: usize = 40;

#[derive(Serialize)]
pub struct FrameTimes {
    pub zoom: f32,
    pub visible_boxes: usize,
    pub median_ms: f64,
    pub max_ms: f64,
}

#[derive(Serialize)]
pub struct GraphBench {
    pub name: String,
    pub nodes: usize,
    pub cards: usize,
    pub scopes: usize,
    /// Import time (files only).
    pub import_ms: Option<f64>,
    /// Cards and scope tree.
    pub doc_ms: f64,
    /// Layout with every scope expanded.
    pub layout_expanded_ms: f64,
    /// Open as the studio does: cards, layout with scopes collapsed when large, first frame.
    pub open_ms: f64,
    pub opened_collapsed: bool,
    /// Scopes expanded one at a time from the opened state.
    pub expansions: usize,
    /// Slowest of those expansions (incremental layout of the new scene).
    pub expand_max_ms: Option<f64>,
    pub expand_scope: Option<String>,
    /// Panning the fully expanded graph: at fit-to-window zoom, 5%, 15%, 50% and 100%.
    pub pan_frames: Vec<FrameTimes>,
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn frame_times(doc: &GraphDoc, model: &Model, scene: &Scene, zoom: f32) -> FrameTimes {
    let ctx = egui::Context::default();
    let theme = Theme::light();
    let canvas = egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(CANVAS[0], CANVAS[1]));
    // Start at the top of the graph (the whole graph when it fits).
    let start = egui::pos2(
        scene.bounds.center().x,
        (scene.bounds.min.y + CANVAS[1] / (2.0 * zoom)).min(scene.bounds.center().y),
    );
    let mut view = ViewState { center: start, zoom };
    let hl = Highlights::default();
    let mut times = Vec::with_capacity(FRAMES);
    let mut visible = 0;
    for f in 0..FRAMES + 3 {
        // Pan back and forth by up to a third of the canvas, as a drag does.
        let a = f as f32 * 0.4;
        view.center = start + egui::vec2(a.sin() * CANVAS[0] / 3.0, (1.0 - a.cos()) * CANVAS[1] / 4.0) / zoom;
        let input = egui::RawInput {
            screen_rect: Some(canvas),
            ..Default::default()
        };
        let t = Instant::now();
        let mut out = ctx.run_ui(input, |ui| {
            let painter = ui.painter().with_clip_rect(canvas);
            paint(&painter, scene, doc, model, &Xf::new(canvas, &view), &theme, &hl);
        });
        // No renderer here: the font atlas upload is dropped on purpose.
        out.textures_delta.clear();
        let prims = ctx.tessellate(std::mem::take(&mut out.shapes), out.pixels_per_point);
        std::hint::black_box(prims);
        if f >= 3 {
            times.push(ms(t));
        }
        let vis = crate::studio::graph_view::visible_graph_rect(canvas, &view);
        visible = visible.max(scene.boxes.iter().filter(|b| b.rect.intersects(vis)).count());
    }
    times.sort_by(f64::total_cmp);
    FrameTimes {
        zoom,
        visible_boxes: visible,
        median_ms: times[times.len() / 2],
        max_ms: times[times.len() - 1],
    }
}

pub fn bench_model(name: &str, model: &Model, import_ms: Option<f64>) -> GraphBench {
    let t = Instant::now();
    let doc = Arc::new(GraphDoc::build(model));
    let doc_ms = ms(t);
    let t = Instant::now();
    let mut expanded = SceneBuilder::new(doc.clone());
    let full = expanded.build(&HashSet::new());
    let layout_expanded_ms = ms(t);
    // Open as the studio does.
    let t = Instant::now();
    let doc2 = Arc::new(GraphDoc::build(model));
    let collapse = doc2.items.len() > crate::studio::COLLAPSE_ABOVE_ITEMS;
    let mut collapsed: HashSet<usize> = if collapse {
        (1..doc2.scopes.len()).collect()
    } else {
        HashSet::new()
    };
    let mut builder = SceneBuilder::new(doc2.clone());
    let opened = builder.build(&collapsed);
    let prepared_ms = ms(t);
    // The first frame (context creation excluded: the window already has one).
    let open_ms = prepared_ms + frame_times_single(&doc2, model, &opened);
    // Expand scopes one at a time as a user would: every top-level scope, and within the
    // first three of them every scope below, parents before children.
    let mut expand_max: Option<(f64, String)> = None;
    let mut expansions = 0usize;
    if collapse {
        let mut time_expand = |s: usize, collapsed: &mut HashSet<usize>, builder: &mut SceneBuilder| {
            collapsed.remove(&s);
            builder.invalidate(s);
            let t = Instant::now();
            std::hint::black_box(builder.build(collapsed));
            let dt = ms(t);
            expansions += 1;
            if expand_max.as_ref().is_none_or(|(m, _)| dt > *m) {
                expand_max = Some((dt, doc2.scopes[s].path.clone()));
            }
        };
        for (k, &top) in doc2.scopes[0].children.iter().enumerate() {
            time_expand(top, &mut collapsed, &mut builder);
            if k < 3 {
                let mut stack: Vec<usize> = doc2.scopes[top].children.iter().rev().copied().collect();
                while let Some(s) = stack.pop() {
                    time_expand(s, &mut collapsed, &mut builder);
                    stack.extend(doc2.scopes[s].children.iter().rev());
                }
            }
            // Collapse it (and everything below) again.
            let mut stack = vec![top];
            while let Some(s) = stack.pop() {
                collapsed.insert(s);
                builder.invalidate(s);
                stack.extend(&doc2.scopes[s].children);
            }
        }
    }
    let fit = (CANVAS[0] / full.bounds.width().max(1.0)).min(CANVAS[1] / full.bounds.height().max(1.0));
    // Fit to window, then the zooms where most cards are in view at each level of detail.
    let pan_frames = [
        fit.clamp(crate::studio::graph_view::MIN_ZOOM, 1.0),
        0.05,
        0.15,
        0.5,
        1.0,
    ]
    .into_iter()
    .map(|z| frame_times(&doc, model, &full, z))
    .collect();
    GraphBench {
        name: name.to_owned(),
        nodes: model.graph.nodes.len(),
        cards: doc.items.len(),
        scopes: doc.scopes.len() - 1,
        import_ms,
        doc_ms,
        layout_expanded_ms,
        open_ms,
        opened_collapsed: collapse,
        expansions,
        expand_max_ms: expand_max.as_ref().map(|e| e.0),
        expand_scope: expand_max.map(|e| e.1),
        pan_frames,
    }
}

/// Time of one frame at the opening view, in ms.
fn frame_times_single(doc: &GraphDoc, model: &Model, scene: &Scene) -> f64 {
    let ctx = egui::Context::default();
    let canvas = egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(CANVAS[0], CANVAS[1]));
    let view = ViewState {
        center: scene.bounds.center(),
        zoom: (CANVAS[0] / scene.bounds.width().max(1.0)).clamp(0.05, 1.0),
    };
    let theme = Theme::light();
    let t = Instant::now();
    let mut out = ctx.run_ui(
        egui::RawInput {
            screen_rect: Some(canvas),
            ..Default::default()
        },
        |ui| {
            let painter = ui.painter().with_clip_rect(canvas);
            paint(
                &painter,
                scene,
                doc,
                model,
                &Xf::new(canvas, &view),
                &theme,
                &Highlights::default(),
            );
        },
    );
    out.textures_delta.clear();
    std::hint::black_box(ctx.tessellate(std::mem::take(&mut out.shapes), out.pixels_per_point));
    ms(t)
}

pub fn synthetic(n: usize) -> GraphBench {
    let m = synthetic::model(n);
    bench_model(&format!("synthetic {n}"), &m, None)
}

pub fn print(b: &GraphBench) {
    println!(
        "{}: {} nodes, {} cards, {} scopes{}",
        b.name,
        b.nodes,
        b.cards,
        b.scopes,
        b.import_ms.map_or_else(String::new, |t| format!(", import {t:.1} ms"))
    );
    println!("  cards + scopes        {:9.1} ms", b.doc_ms);
    println!("  layout, all expanded  {:9.1} ms", b.layout_expanded_ms);
    println!(
        "  open ({})  {:9.1} ms",
        if b.opened_collapsed {
            "scopes collapsed"
        } else {
            "all expanded    "
        },
        b.open_ms
    );
    if let (Some(t), Some(s)) = (b.expand_max_ms, &b.expand_scope) {
        println!(
            "  expand one scope, max {t:9.1} ms  ({s}; {} expansions timed)",
            b.expansions
        );
    }
    for f in &b.pan_frames {
        println!(
            "  pan frame at {:5.1}% zoom: median {:6.2} ms, max {:6.2} ms ({} boxes in view)",
            f.zoom * 100.0,
            f.median_ms,
            f.max_ms,
            f.visible_boxes
        );
    }
}
