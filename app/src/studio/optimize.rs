//! The optimizer view: pass toggles and a run button, then the graph before and after step
//! N side by side. Nodes a rewrite removed are struck out in the "before" pane, nodes it
//! made or rewrote are outlined in both, and selecting a node in one pane outlines the
//! nodes it is linked to in the other through the origin ids every new node keeps.

use super::canvas::{Highlights, own_card_box, pane_ui};
use super::commands::{Command, Selection};
use super::jobs::Job;
use super::{Studio, ViewState};
use crate::graph::doc::{GraphDoc, ItemKind};
use crate::graph::scene::{BoxKind, Scene, SceneBuilder};
use egui::Rect;
use npu_core::ir::{Model, NodeId};
use npu_core::passes::{self, LogEntry, Patch};
use std::collections::HashSet;
use std::sync::Arc;

/// A finished optimization run of the open model.
pub struct OptRun {
    pub patches: Vec<Patch>,
    pub log: Vec<LogEntry>,
    pub rounds: usize,
    pub converged: bool,
    pub nodes_after: usize,
    /// The passes it ran.
    pub passes: Vec<String>,
}

/// The model after one step, laid out, with what changed against the original.
pub struct AfterPane {
    pub step: usize,
    pub model: Arc<Model>,
    pub doc: Arc<GraphDoc>,
    pub scene: Arc<Scene>,
    builder: SceneBuilder,
    collapsed: HashSet<crate::graph::doc::ScopeId>,
    pub view: ViewState,
    /// Screen rectangle of the pane in the last frame.
    pub rect: Rect,
    fitted: bool,
    /// Nodes (of this model) a rewrite made or changed.
    pub rewritten: HashSet<NodeId>,
    /// Nodes of the original model that no node comes from any more.
    pub removed_before: HashSet<NodeId>,
    /// Nodes of the original model that went into a rewritten node.
    pub rewritten_before: HashSet<NodeId>,
}

impl AfterPane {
    fn new(original: &Model, patches: &[Patch], step: usize) -> Result<Self, String> {
        let model = passes::replay(original, &patches[..step]).map_err(|e| e.to_string())?;
        let mut rewritten = HashSet::new();
        let mut kept = HashSet::new();
        let mut rewritten_before = HashSet::new();
        for (k, n) in model.graph.nodes.iter().enumerate() {
            kept.extend(n.origin.iter().copied());
            // Unchanged: one origin with the same op, attributes and input names (a new
            // weight gets a new name).
            let names = |g: &npu_core::ir::Graph, node: &npu_core::ir::Node| -> Vec<String> {
                node.inputs
                    .iter()
                    .map(|v| v.map_or_else(String::new, |v| g.values[v].name.clone()))
                    .collect()
            };
            let same = match n.origin.as_slice() {
                [o] => original.graph.nodes.get(*o).is_some_and(|b| {
                    b.op == n.op
                        && b.attrs.keys().eq(n.attrs.keys())
                        && names(&original.graph, b) == names(&model.graph, n)
                }),
                _ => false,
            };
            if !same {
                rewritten.insert(k);
                rewritten_before.extend(n.origin.iter().copied());
            }
        }
        let removed_before = (0..original.graph.nodes.len()).filter(|n| !kept.contains(n)).collect();
        let doc = Arc::new(GraphDoc::build(&model));
        let collapsed: HashSet<_> = if doc.items.len() > super::COLLAPSE_ABOVE_ITEMS {
            (1..doc.scopes.len()).collect()
        } else {
            HashSet::new()
        };
        let mut builder = SceneBuilder::new(doc.clone());
        let scene = Arc::new(builder.build(&collapsed));
        Ok(Self {
            step,
            model: Arc::new(model),
            doc,
            scene,
            builder,
            collapsed,
            view: ViewState::default(),
            rect: Rect::NOTHING,
            fitted: false,
            rewritten,
            removed_before,
            rewritten_before,
        })
    }

    /// Original nodes linked to a node of this pane.
    pub fn linked_before(&self, after_node: Option<NodeId>) -> Vec<NodeId> {
        after_node
            .and_then(|n| self.model.graph.nodes.get(n))
            .map(|n| n.origin.clone())
            .unwrap_or_default()
    }

    /// Nodes of this pane made from an original node.
    pub fn linked_after(&self, before_node: NodeId) -> Vec<NodeId> {
        (0..self.model.graph.nodes.len())
            .filter(|&k| self.model.graph.nodes[k].origin.contains(&before_node))
            .collect()
    }

    fn boxes(&self, nodes: impl IntoIterator<Item = NodeId>) -> HashSet<usize> {
        nodes
            .into_iter()
            .filter_map(|n| own_card_box(&self.doc, &self.scene, n))
            .collect()
    }

    /// Collapses or expands a scope of this pane and lays it out again.
    fn toggle_scope(&mut self, s: crate::graph::doc::ScopeId) {
        if !self.collapsed.remove(&s) {
            self.collapsed.insert(s);
        }
        self.builder.invalidate(s);
        self.scene = Arc::new(self.builder.build(&self.collapsed));
    }
}

/// State of the optimizer panel.
pub struct OptimizerState {
    pub open: bool,
    /// Per pass of `passes::all_passes()`: name, description, enabled.
    pub passes: Vec<(&'static str, &'static str, bool)>,
    job: Option<Job<OptRun>>,
    pub run: Option<OptRun>,
    /// The step the slider asks for.
    pub step: usize,
    pub after: Option<AfterPane>,
    /// The node selected in the "after" pane.
    pub after_selected: Option<NodeId>,
}

impl Default for OptimizerState {
    fn default() -> Self {
        Self {
            open: false,
            passes: passes::all_passes()
                .iter()
                .map(|p| (p.name(), p.about(), true))
                .collect(),
            job: None,
            run: None,
            step: 0,
            after: None,
            after_selected: None,
        }
    }
}

impl OptimizerState {
    /// Forgets the run (another model was opened); keeps the pass choice.
    pub fn reset(&mut self) {
        if let Some(j) = &self.job {
            j.progress.cancel.cancel();
        }
        *self = Self {
            open: self.open,
            passes: std::mem::take(&mut self.passes),
            ..Self::default()
        };
    }

    pub fn busy(&self) -> bool {
        self.job.is_some()
    }

    /// The names of the enabled passes.
    pub fn enabled(&self) -> Vec<String> {
        self.passes.iter().filter(|p| p.2).map(|p| p.0.to_owned()).collect()
    }

    /// The running job's progress.
    pub fn progress(&self) -> Option<(f32, String)> {
        self.job.as_ref().map(|j| j.progress.fraction())
    }

    pub fn cancel(&self) {
        if let Some(j) = &self.job {
            j.progress.cancel.cancel();
        }
    }
}

/// Starts an optimization run of the open model with the enabled passes.
pub fn start(st: &mut Studio) {
    let Some(l) = &st.loaded else { return };
    let names: Vec<String> = st
        .optimizer
        .passes
        .iter()
        .filter(|p| p.2)
        .map(|p| p.0.to_owned())
        .collect();
    let model = l.model.clone();
    let ctx = st.ctx.clone();
    st.optimizer.reset();
    st.optimizer.job = Some(Job::spawn("optimize", ctx.as_ref(), move |p| {
        let passes = passes::select(&names)?;
        let ran = names.clone();
        let opts = passes::Options {
            passes,
            progress: p,
            ..passes::Options::default()
        };
        let r = passes::optimize(&model, &opts).map_err(|e| e.to_string())?;
        Ok(OptRun {
            nodes_after: r.model.graph.nodes.len(),
            patches: r.patches,
            log: r.log,
            rounds: r.rounds,
            converged: r.converged,
            passes: ran,
        })
    }));
    st.status = "Optimizing…".into();
}

/// Polls the running job; shows the last step when it lands.
pub fn poll(st: &mut Studio) {
    let Some(r) = st.optimizer.job.as_ref().and_then(Job::poll) else {
        return;
    };
    st.optimizer.job = None;
    match r {
        Ok(run) => {
            st.status = format!("Optimized: {} rewrites in {} rounds", run.patches.len(), run.rounds);
            let last = run.patches.len();
            st.optimizer.run = Some(run);
            set_step(st, last);
        }
        Err(e) if e == "cancelled" => st.status = "Optimization cancelled".into(),
        Err(e) => st.error = Some(format!("Optimization failed: {e}")),
    }
}

/// Shows the model after `step` patches in the "after" pane.
pub fn set_step(st: &mut Studio, step: usize) {
    let (Some(l), Some(run)) = (&st.loaded, &st.optimizer.run) else {
        return;
    };
    let step = step.min(run.patches.len());
    if st.optimizer.after.as_ref().is_some_and(|a| a.step == step) {
        st.optimizer.step = step;
        return;
    }
    match AfterPane::new(&l.model, &run.patches, step) {
        Ok(mut pane) => {
            if let Some(old) = &st.optimizer.after {
                pane.view = old.view;
                pane.fitted = old.fitted;
            }
            st.optimizer.after_selected = None;
            st.optimizer.after = Some(pane);
            st.optimizer.step = step;
        }
        Err(e) => st.error = Some(format!("Replaying the optimization failed: {e}")),
    }
}

/// Writes the model after the current step next to the open file as `<name>.opt.onnx`.
fn save(st: &mut Studio) {
    let (Some(l), Some(after)) = (&st.loaded, &st.optimizer.after) else {
        return;
    };
    let stem = l
        .path
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    let path = l.path.with_file_name(format!("{stem}.opt.onnx"));
    match npu_core::export::onnx::save(&after.model, &path) {
        Ok(()) => st.status = format!("Wrote {}", path.display()),
        Err(e) => st.error = Some(e.to_string()),
    }
}

/// The optimizer panel (bottom of the window).
pub fn panel_ui(st: &mut Studio, ui: &mut egui::Ui) {
    ui.horizontal(|ui| {
        ui.strong("Graph optimizer");
        ui.label("passes, in the order they run each round:");
    });
    ui.horizontal_wrapped(|ui| {
        for (name, about, on) in &mut st.optimizer.passes {
            ui.checkbox(on, *name).on_hover_text(*about);
        }
    });
    ui.horizontal(|ui| {
        let can_run = st.loaded.is_some() && st.optimizer.job.is_none();
        if ui.add_enabled(can_run, egui::Button::new("Run passes")).clicked() {
            start(st);
        }
        if let Some(j) = &st.optimizer.job {
            let (f, what) = j.progress.fraction();
            ui.add(egui::ProgressBar::new(f).desired_width(200.0).text(what));
            if ui.button("Cancel").clicked() {
                j.progress.cancel.cancel();
            }
        }
        if let (Some(l), Some(run)) = (&st.loaded, &st.optimizer.run) {
            ui.label(format!(
                "{} → {} nodes in {} rewrites, {} rounds{}",
                l.model.graph.nodes.len(),
                run.nodes_after,
                run.patches.len(),
                run.rounds,
                if run.converged { "" } else { " (round limit reached)" }
            ));
            if ui
                .button("Save as ONNX")
                .on_hover_text("Writes <name>.opt.onnx next to the model")
                .clicked()
            {
                save(st);
            }
            if ui.button("Close comparison").clicked() {
                st.optimizer.after = None;
                st.optimizer.run = None;
            }
        }
    });
    let Some(run) = &st.optimizer.run else { return };
    let total = run.patches.len();
    let mut step = st.optimizer.step;
    ui.horizontal(|ui| {
        let label = ui.label("Step");
        if ui.button("First").on_hover_text("Before any rewrite").clicked() {
            step = 0;
        }
        if ui.button("◀").on_hover_text("Previous step").clicked() {
            step = step.saturating_sub(1);
        }
        ui.add(egui::Slider::new(&mut step, 0..=total).suffix(format!(" / {total}")))
            .labelled_by(label.id);
        if ui.button("▶").on_hover_text("Next step").clicked() {
            step = (step + 1).min(total);
        }
        if ui.button("Last").on_hover_text("After every rewrite").clicked() {
            step = total;
        }
    });
    let text = match step.checked_sub(1).and_then(|i| run.log.get(i)) {
        Some(e) => {
            let names = |v: &[passes::NodeRef]| {
                if v.is_empty() {
                    "—".to_owned()
                } else {
                    v.iter()
                        .map(|n| format!("{} ({})", n.name, n.op))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            };
            let mut t = format!(
                "step {}: {} / {}: removed {}; added {}",
                e.step,
                e.pass,
                e.rule,
                names(&e.removed),
                names(&e.added)
            );
            if !e.constants_removed.is_empty() {
                t += &format!("; constants removed: {}", e.constants_removed.join(", "));
            }
            t
        }
        None => "step 0: the imported model".into(),
    };
    ui.label(text);
    if step != st.optimizer.step {
        set_step(st, step);
    }
}

/// The "after" pane: the model after the current step, with rewritten nodes outlined and
/// the nodes linked to the selection in the "before" pane outlined in blue.
pub fn after_pane_ui(st: &mut Studio, ui: &mut egui::Ui, rect: Rect) {
    let theme = st.theme.clone();
    let main_zoom = st.view.zoom;
    let before_sel = match st.selection {
        Some(Selection::Node(n)) => Some(n),
        _ => None,
    };
    let Some(pane) = &mut st.optimizer.after else { return };
    pane.rect = rect;
    if !pane.fitted && rect.width() > 1.0 {
        // The zoom of the "before" pane, the graph's first input at the top.
        let b = pane.scene.bounds;
        let zoom = main_zoom.clamp(super::canvas::MIN_ZOOM, super::canvas::MAX_ZOOM);
        let top = pane
            .doc
            .items
            .iter()
            .position(|it| matches!(it.kind, ItemKind::Input(_)))
            .map_or(b.center_top(), |i| {
                pane.scene.boxes[pane.scene.item_box[i]].rect.center_top()
            });
        let half = rect.height() / (2.0 * zoom);
        let center = if b.height() * zoom <= rect.height() {
            b.center()
        } else {
            egui::pos2(top.x, top.y + half - 30.0 / zoom)
        };
        pane.view = ViewState { center, zoom };
        pane.fitted = true;
    }
    let hl = Highlights {
        selected_box: st
            .optimizer
            .after_selected
            .and_then(|n| pane.boxes([n]).into_iter().next()),
        rewritten: pane.boxes(pane.rewritten.iter().copied()),
        linked: before_sel.map(|n| pane.boxes(pane.linked_after(n))).unwrap_or_default(),
        ..Highlights::default()
    };
    let (scene, doc, model) = (pane.scene.clone(), pane.doc.clone(), pane.model.clone());
    let events = pane_ui(
        ui,
        rect,
        ui.scope_id().with("after_canvas"),
        &scene,
        &doc,
        &model,
        &mut pane.view,
        &theme,
        &hl,
        false,
    );
    let title = format!(
        "After step {} · {} nodes · green: made or rewritten",
        pane.step,
        model.graph.nodes.len()
    );
    super::canvas::pane_title(&ui.painter_at(rect), rect, &title, &theme);
    if let Some(b) = events.double_clicked
        && let BoxKind::Collapsed(s) | BoxKind::Frame(s) = scene.boxes[b].kind
        && let Some(pane) = &mut st.optimizer.after
    {
        pane.toggle_scope(s);
    } else if let Some(hit) = events.clicked {
        let node = hit.and_then(|b| match scene.boxes[b].kind {
            BoxKind::Item(i) => match doc.items[i].kind {
                ItemKind::Node(n) => Some(n),
                _ => None,
            },
            _ => None,
        });
        st.optimizer.after_selected = node;
        // The first original node it comes from becomes the "before" selection's link.
        if let Some(n) = node {
            st.status = format!(
                "{} ({}) comes from {} node(s) of the imported model",
                model.graph.nodes[n].name,
                model.graph.nodes[n].op,
                model.graph.nodes[n].origin.len()
            );
            if let Some(&o) = model.graph.nodes[n].origin.first() {
                st.send(Command::Reveal(Selection::Node(o)));
            }
        }
    }
}
