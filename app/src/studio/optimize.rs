//! The optimizer view: pass toggles and a run button, then the graph before and after step
//! N side by side. Nodes a rewrite removed are struck out in the "before" pane, nodes it
//! made or rewrote are outlined in both, and selecting a node in one pane outlines the
//! nodes it is linked to in the other through the origin ids every new node keeps. The
//! run and the replay of a step are background jobs (the studio writes "Save as ONNX").

use super::commands::{Command, Selection};
use super::document::{Loaded, initial_collapsed};
use super::graph_view::{self, Highlights, Pane, ViewState, own_card_box, pane_ui};
use super::jobs::{Job, JobError, take_finished};
use super::theme::Theme;
use crate::graph::doc::{GraphDoc, ItemKind};
use crate::graph::scene::{BoxKind, Scene, SceneBuilder};
use egui::Rect;
use npu_core::ir::{Model, NodeId};
use npu_core::passes::{self, LogEntry, Patch};
use npu_core::pipeline::{self, Passes};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;

/// A finished optimization run of the open model.
pub struct OptRun {
    /// Shared with the step-replay job.
    pub patches: Arc<Vec<Patch>>,
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
    fn new(original: &Model, patches: &[Patch], step: usize) -> Result<Self, JobError> {
        let model = passes::replay(original, &patches[..step])
            .map_err(|e| JobError::Failed(format!("Replaying the optimization failed: {e}")))?;
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
        let collapsed = initial_collapsed(&doc);
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
    /// The replay of the step asked for, while it runs.
    replay: Option<Job<AfterPane>>,
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
            replay: None,
            after_selected: None,
        }
    }
}

impl OptimizerState {
    /// Forgets the run (another model was opened); keeps the pass choice.
    pub fn reset(&mut self) {
        self.cancel();
        *self = Self {
            open: self.open,
            passes: std::mem::take(&mut self.passes),
            ..Self::default()
        };
    }

    pub fn busy(&self) -> bool {
        self.job.is_some() || self.replay.is_some()
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
            j.cancel();
        }
        if let Some(j) = &self.replay {
            j.cancel();
        }
    }
}

impl OptimizerState {
    /// Starts an optimization run of `model` with the enabled passes.
    pub fn start(&mut self, model: Arc<Model>, ctx: Option<&egui::Context>) {
        let names = self.enabled();
        self.reset();
        self.job = Some(Job::spawn("optimize", ctx, move |p| {
            let r = pipeline::optimize(&model, &Passes::Only(names.clone()), p)?;
            Ok(OptRun {
                nodes_after: r.model.graph.nodes.len(),
                patches: Arc::new(r.patches),
                log: r.log,
                rounds: r.rounds,
                converged: r.converged,
                passes: names,
            })
        }));
    }

    /// Takes finished jobs: a run shows its last step, a replayed step shows in the after
    /// pane. Returns (status, error) messages to show.
    pub fn poll(&mut self, original: Option<&Arc<Model>>, ctx: Option<&egui::Context>) -> Vec<Result<String, String>> {
        let mut notes = Vec::new();
        match take_finished(&mut self.job) {
            Some(Ok(run)) => {
                notes.push(Ok(format!(
                    "Optimized: {} rewrites in {} rounds",
                    run.patches.len(),
                    run.rounds
                )));
                let last = run.patches.len();
                self.run = Some(run);
                if let Some(m) = original {
                    self.set_step(m, last, ctx);
                }
            }
            Some(Err(JobError::Cancelled)) => notes.push(Ok("Optimization cancelled".into())),
            Some(Err(JobError::Failed(e))) => notes.push(Err(format!("Optimization failed: {e}"))),
            None => {}
        }
        match take_finished(&mut self.replay) {
            Some(Ok(mut pane)) => {
                if let Some(old) = &self.after {
                    pane.view = old.view;
                    pane.fitted = old.fitted;
                }
                self.after_selected = None;
                self.after = Some(pane);
            }
            Some(Err(JobError::Cancelled)) | None => {}
            Some(Err(JobError::Failed(e))) => notes.push(Err(e)),
        }
        notes
    }

    /// Shows the model after `step` patches in the "after" pane (replayed in the
    /// background; the pane keeps the previous step until it lands).
    pub fn set_step(&mut self, original: &Arc<Model>, step: usize, ctx: Option<&egui::Context>) {
        let Some(run) = &self.run else { return };
        let step = step.min(run.patches.len());
        self.step = step;
        if self.after.as_ref().is_some_and(|a| a.step == step) && self.replay.is_none() {
            return;
        }
        if let Some(j) = &self.replay {
            j.cancel();
        }
        let (model, patches) = (original.clone(), run.patches.clone());
        self.replay = Some(Job::spawn("replay-step", ctx, move |p| {
            p.check()?;
            AfterPane::new(&model, &patches, step)
        }));
    }

    /// What "Save as ONNX" writes: the model after the current step, next to the open file
    /// as `<name>.opt.onnx`.
    pub fn save_target(&self, loaded: &Loaded) -> Option<(Arc<Model>, std::path::PathBuf)> {
        let after = self.after.as_ref()?;
        let path = loaded.path.with_file_name(format!("{}.opt.onnx", loaded.stem()));
        Some((after.model.clone(), path))
    }

    /// Closes the before/after comparison.
    pub fn close(&mut self) {
        if let Some(j) = &self.replay {
            j.cancel();
        }
        self.replay = None;
        self.after = None;
        self.run = None;
    }

    /// What the "before" pane outlines: nodes a rewrite removed or rewrote, and the nodes
    /// linked to the after pane's selection.
    pub fn before_highlights(&self, doc: &GraphDoc, scene: &Scene, hl: &mut Highlights) {
        let Some(after) = &self.after else { return };
        let boxes = |nodes: &mut dyn Iterator<Item = usize>| -> HashSet<usize> {
            nodes.filter_map(|n| own_card_box(doc, scene, n)).collect()
        };
        hl.removed = boxes(&mut after.removed_before.iter().copied());
        hl.rewritten = boxes(&mut after.rewritten_before.iter().copied());
        hl.linked = boxes(&mut after.linked_before(self.after_selected).into_iter());
    }

    /// Collapses or expands a scope of the after pane.
    pub fn toggle_after_scope(&mut self, s: crate::graph::doc::ScopeId) {
        if let Some(pane) = &mut self.after {
            pane.toggle_scope(s);
        }
    }
}

/// The optimizer panel (bottom of the window).
pub fn panel_ui(ui: &mut egui::Ui, opt: &OptimizerState, loaded: Option<&Loaded>, out: &mut Vec<Command>) {
    ui.horizontal(|ui| {
        ui.strong("Graph optimizer");
        ui.label("passes, in the order they run each round:");
    });
    ui.horizontal_wrapped(|ui| {
        for (index, (name, about, on)) in opt.passes.iter().enumerate() {
            let mut enabled = *on;
            if ui.checkbox(&mut enabled, *name).on_hover_text(*about).changed() {
                out.push(Command::SetPass { index, enabled });
            }
        }
    });
    ui.horizontal(|ui| {
        let can_run = loaded.is_some() && opt.job.is_none();
        if ui.add_enabled(can_run, egui::Button::new("Run passes")).clicked() {
            out.push(Command::RunOptimizer);
        }
        if let Some(j) = &opt.job {
            let (f, what) = j.progress.fraction();
            ui.add(egui::ProgressBar::new(f).desired_width(200.0).text(what));
            if ui.button("Cancel").clicked() {
                out.push(Command::CancelOptimizer);
            }
        }
        if let (Some(l), Some(run)) = (loaded, &opt.run) {
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
                out.push(Command::SaveOptimizedStep);
            }
            if ui.button("Close comparison").clicked() {
                out.push(Command::CloseComparison);
            }
        }
    });
    let Some(run) = &opt.run else { return };
    let total = run.patches.len();
    let mut step = opt.step;
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
                let _ = write!(t, "; constants removed: {}", e.constants_removed.join(", "));
            }
            t
        }
        None => "step 0: the imported model".into(),
    };
    ui.label(text);
    if step != opt.step {
        out.push(Command::SetOptimizerStep(step));
    }
}

/// The "after" pane: the model after the current step, with rewritten nodes outlined and
/// the nodes linked to the selection in the "before" pane outlined in blue. Returns a
/// status line when a node was clicked.
pub fn after_pane_ui(
    ui: &mut egui::Ui,
    rect: Rect,
    opt: &mut OptimizerState,
    theme: &Theme,
    main_view: &ViewState,
    selection: Option<Selection>,
    out: &mut Vec<Command>,
) -> Option<String> {
    let main_zoom = main_view.zoom;
    let before_sel = match selection {
        Some(Selection::Node(n)) => Some(n),
        _ => None,
    };
    let after_selected = opt.after_selected;
    let pane = opt.after.as_mut()?;
    pane.rect = rect;
    if !pane.fitted && rect.width() > 1.0 {
        // The zoom of the "before" pane, the graph's first input at the top.
        let b = pane.scene.bounds;
        let zoom = main_zoom.clamp(graph_view::MIN_ZOOM, graph_view::MAX_ZOOM);
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
        selected_box: after_selected.and_then(|n| pane.boxes([n]).into_iter().next()),
        rewritten: pane.boxes(pane.rewritten.iter().copied()),
        linked: before_sel.map(|n| pane.boxes(pane.linked_after(n))).unwrap_or_default(),
        ..Highlights::default()
    };
    let (scene, doc, model) = (pane.scene.clone(), pane.doc.clone(), pane.model.clone());
    let events = pane_ui(
        ui,
        rect,
        ui.scope_id().with("after_canvas"),
        &Pane {
            scene: &scene,
            doc: &doc,
            model: &model,
            theme,
            highlights: &hl,
            band_select: false,
        },
        &mut pane.view,
    );
    let title = format!(
        "After step {} · {} nodes · green: made or rewritten",
        pane.step,
        model.graph.nodes.len()
    );
    graph_view::pane_title(&ui.painter_at(rect), rect, &title, theme);
    let mut status = None;
    if let Some(b) = events.double_clicked
        && let BoxKind::Collapsed(s) | BoxKind::Frame(s) = scene.boxes[b].kind
    {
        out.push(Command::ToggleAfterScope(s));
    } else if let Some(hit) = events.clicked {
        let node = hit.and_then(|b| match scene.boxes[b].kind {
            BoxKind::Item(i) => match doc.items[i].kind {
                ItemKind::Node(n) => Some(n),
                _ => None,
            },
            _ => None,
        });
        out.push(Command::SelectAfter(node));
        // The first original node it comes from becomes the "before" selection's link.
        if let Some(n) = node {
            status = Some(format!(
                "{} ({}) comes from {} node(s) of the imported model",
                model.graph.nodes[n].name,
                model.graph.nodes[n].op,
                model.graph.nodes[n].origin.len()
            ));
            if let Some(&o) = model.graph.nodes[n].origin.first() {
                out.push(Command::Reveal(Selection::Node(o)));
            }
        }
    }
    status
}
