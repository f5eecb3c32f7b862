//! Where the main pane looks: fitting the graph, zooming to a box, revealing a selection
//! (expanding the scopes that hide it), and the view a model opens with.

use super::Studio;
use super::commands::Selection;
use super::graph_view::MIN_ZOOM;
use crate::graph::doc::ItemKind;

/// Where the view goes once a layout lands.
#[derive(Clone, Copy, Debug)]
pub(super) enum PendingView {
    OpenDefault,
    Fit,
    Reveal(Selection),
}

impl Studio {
    pub(super) fn apply_pending_view(&mut self) {
        if self.canvas_rect.width() <= 1.0 {
            return; // no canvas yet: wait for the first frame
        }
        match self.pending_view.take() {
            Some(PendingView::OpenDefault) => self.default_view(),
            Some(PendingView::Fit) => self.fit_view(),
            Some(PendingView::Reveal(s)) => {
                if let Some(r) = self.rect_of(s) {
                    self.view.center = r.center();
                    self.view.zoom = self.view.zoom.max(1.0);
                }
            }
            None => {}
        }
    }

    /// Called by the canvas once its rectangle is known.
    pub(super) fn canvas_ready(&mut self, rect: egui::Rect) {
        self.canvas_rect = rect;
        if self.pending_view.is_some() && self.layout_job.is_none() {
            self.apply_pending_view();
        }
    }

    /// Fits the whole graph when that keeps cards readable, else shows its top at a
    /// readable zoom (as Netron opens).
    fn default_view(&mut self) {
        let Some(l) = &self.loaded else { return };
        let b = l.scene.bounds;
        let c = self.canvas_rect;
        let fit = (c.width() / b.width().max(1.0)).min(c.height() / b.height().max(1.0)) * 0.95;
        if fit >= 0.55 {
            self.view.zoom = fit.min(1.0);
            self.view.center = b.center();
        } else {
            // Readable cards, the first graph input at the top.
            self.view.zoom = 1.0;
            let half = c.size() / (2.0 * self.view.zoom);
            let top = l
                .doc
                .items
                .iter()
                .position(|it| matches!(it.kind, ItemKind::Input(_)))
                .map_or(b.center_top(), |i| l.scene.boxes[l.scene.item_box[i]].rect.center_top());
            self.view.center = egui::pos2(top.x, top.y + half.y - 30.0);
        }
    }

    pub fn fit_view(&mut self) {
        if let Some(l) = &self.loaded {
            let b = l.scene.bounds;
            self.zoom_to(b, 1.0);
        }
    }

    pub(super) fn zoom_to(&mut self, r: egui::Rect, max_zoom: f32) {
        let c = self.canvas_rect;
        if c.width() <= 1.0 {
            return;
        }
        let fit = (c.width() / r.width().max(1.0)).min(c.height() / r.height().max(1.0)) * 0.92;
        self.view.zoom = fit.clamp(MIN_ZOOM, max_zoom);
        self.view.center = r.center();
    }

    /// The box that shows a selection in the current scene.
    pub fn box_of(&self, s: Selection) -> Option<usize> {
        let l = self.loaded.as_ref()?;
        match s {
            Selection::Node(n) => l.doc.node_item.get(n).copied().flatten().map(|i| l.scene.item_box[i]),
            Selection::Scope(sc) => l.scene.scope_box.get(&sc).copied(),
            Selection::Value(v) => l.model.graph.values[v]
                .producer
                .and_then(|p| l.doc.node_item[p])
                .or_else(|| l.doc.items.iter().position(|it| it.kind == ItemKind::Input(v)))
                .or_else(|| l.doc.consumers[v].iter().find_map(|&n| l.doc.node_item[n]))
                .map(|i| l.scene.item_box[i]),
        }
    }

    /// The rectangle (graph units) of the box that shows a selection.
    pub fn rect_of(&self, s: Selection) -> Option<egui::Rect> {
        let l = self.loaded.as_ref()?;
        l.scene.boxes.get(self.box_of(s)?).map(|b| b.rect)
    }

    pub(super) fn selection_rect(&self) -> Option<egui::Rect> {
        self.selection.and_then(|s| self.rect_of(s))
    }

    /// Selects, expands the scopes that hide the selection, and centres it.
    pub(super) fn reveal(&mut self, s: Selection) {
        self.selection = Some(s);
        let Some(l) = &mut self.loaded else { return };
        let scope = match s {
            Selection::Node(n) => l.doc.node_item.get(n).copied().flatten().map(|i| l.doc.items[i].scope),
            Selection::Scope(sc) => l.doc.scopes[sc].parent,
            Selection::Value(v) => l.model.graph.values[v]
                .producer
                .and_then(|p| l.doc.node_item[p])
                .map(|i| l.doc.items[i].scope),
        };
        let mut changed = false;
        if let Some(scope) = scope {
            for s in l.doc.scope_path(scope) {
                changed |= l.collapsed.remove(&s);
            }
        }
        self.pending_view = Some(PendingView::Reveal(s));
        if changed || self.layout_job.is_some() {
            self.relayout();
        } else {
            self.apply_pending_view();
        }
    }
}
