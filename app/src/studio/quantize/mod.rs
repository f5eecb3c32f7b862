//! The quantization view: calibrate a plan on a folder of samples, paint local or cumulative
//! SQNR or each layer's precision on the graph, change a layer's precision from the card's
//! context menu or the inspector, and watch the heatmap follow. A worker thread owns the
//! quantizer and the FP32 and fake-quant values of every sample; after a change it runs
//! only what lies downstream (off the UI thread), and the overlay updates when it replies.
//! Every precision edit can be undone (Ctrl+Z) and redone (Ctrl+Shift+Z).
//!
//! - `worker`: the worker thread, its messages and the UI's [`Session`] handle on it;
//! - `edits`: the precision state and its undo history (pure, unit-tested);
//! - `overlay`: card colours, badges and the legend;
//! - `panel`, `analysis`, `recipe_editor`, `preview`, `inspector`, `menu`: what is drawn.

mod analysis;
mod edits;
pub mod inspector;
pub mod menu;
mod overlay;
pub mod panel;
mod preview;
mod recipe_editor;
mod worker;

pub use crate::studio::commands::{JobKind, Setup};
pub use analysis::sensitivity_gains;
pub use edits::{Edits, History};
pub use overlay::{Overlay, PRECISIONS, db, precision_name};
pub use preview::{Preview, make_preview};
pub use worker::{Inspect, Mapping, Reply, Session, update};

use super::jobs::{Job, JobError};
use npu_core::ir::{Model, NodeId};
use npu_core::quant::recipe::{Recipe, Rule};
use npu_core::quant::{LayerPrecision, QuantPlan};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What polling the session found.
#[derive(Debug, PartialEq, Eq)]
pub enum Polled {
    Nothing,
    /// The calibration's first simulation arrived this frame.
    FirstResult,
    /// The session ended: cancelled, or failed.
    Ended(JobError),
}

/// The quantization panel's state: the setup form, the session, the overlay and the
/// edit history.
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent flags of one panel: shown, timings, unsaved, windows"
)]
pub struct QuantView {
    pub open: bool,
    pub setup: Setup,
    pub overlay: Overlay,
    /// Cards below this SQNR are red, above `green_above` green, yellow between.
    pub red_below: f64,
    pub green_above: f64,
    /// The Gap overlay marks nodes whose simulated SQNR exceeds the emulated one by more.
    pub gap_db: f64,
    pub session: Option<Session>,
    /// The precision edits and their undo history (the project's state).
    history: History,
    /// The node whose context menu is open.
    pub menu_node: Option<NodeId>,
    /// Show update times (off for reproducible screenshots).
    pub show_timings: bool,
    /// Edits to apply once the session's first simulation arrives (a project being opened).
    pub pending_layers: Option<Edits>,
    /// An edit not yet autosaved.
    pub dirty: bool,
    /// The recipe's ordered rules (name regex and/or op type → precision; later rules win).
    pub rules: Vec<Rule>,
    /// What the last "Apply rules" did, or why it failed.
    pub rules_note: Option<String>,
    /// The recipe window is open.
    pub show_recipe: bool,
    /// The recipe file the recipe window loads and saves.
    pub recipe_path: String,
    /// The preprocessing form is shown (it edits `setup.preprocess`).
    pub show_preprocess_form: bool,
    /// A recipe loaded before a plan with its preset was calibrated.
    pub pending_recipe: Option<Recipe>,
    /// The mixed-precision search's target output SQNR (dB).
    pub pareto_target: f64,
    /// The point of the mixed-precision curve picked for "Apply this point".
    pub pareto_point: usize,
    /// The edit generation last exported, and where.
    pub exported: Option<(u64, std::path::PathBuf)>,
    /// The first preprocessed sample, its texture, and the job making the next one.
    pub preview: Option<Preview>,
    preview_texture: Option<egui::TextureHandle>,
    preview_job: Option<Job<Preview>>,
    /// Threads the quantizer's kernels use.
    pub threads: usize,
}

impl Default for QuantView {
    fn default() -> Self {
        Self {
            open: false,
            setup: Setup::default(),
            overlay: Overlay::CumulativeSqnr,
            red_below: 20.0,
            green_above: 40.0,
            gap_db: 1.0,
            session: None,
            history: History::default(),
            menu_node: None,
            show_timings: true,
            pending_layers: None,
            dirty: false,
            rules: Vec::new(),
            rules_note: None,
            show_recipe: false,
            recipe_path: String::new(),
            show_preprocess_form: false,
            pending_recipe: None,
            pareto_target: 30.0,
            pareto_point: 0,
            exported: None,
            preview: None,
            preview_texture: None,
            preview_job: None,
            threads: npu_core::pipeline::default_threads(),
        }
    }
}

impl QuantView {
    pub fn busy(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| s.starting() || s.updating() || s.job.is_some())
            || self.preview_job.is_some()
    }

    /// Starts calibration and simulation of the open model, optimized with `passes`.
    pub fn start(&mut self, model: Arc<Model>, passes: Vec<String>, ctx: Option<egui::Context>) {
        self.exported = None;
        self.session = Some(Session::start(model, self.setup.clone(), passes, self.threads, ctx));
        if self.history.current() != &Edits::default() {
            self.dirty = true;
        }
        self.history.clear();
    }

    /// Forgets the session and the edits (another model was opened).
    pub fn reset(&mut self) {
        self.session = None;
        self.history.clear();
        self.menu_node = None;
    }

    /// Stops a calibration that has not produced its first simulation (the session goes).
    pub fn cancel(&mut self) {
        if self.session.as_ref().is_some_and(Session::starting) {
            self.session = None;
        }
    }

    /// Takes the worker's replies: whether the first simulation just arrived, or why the
    /// session ended.
    pub fn poll(&mut self) -> Polled {
        let Some(s) = self.session.as_mut() else {
            return Polled::Nothing;
        };
        let had = s.result.is_some();
        match s.poll() {
            Ok(_) => {
                let preset = s.result.as_ref().map(|_| s.setup.preset.clone());
                if preset.is_some()
                    && let Some(edits) = self.pending_layers.take()
                {
                    self.history.restore(edits);
                    self.push();
                }
                // A recipe loaded before calibration (or for another preset) applies now.
                if let Some(preset) = preset
                    && self.pending_recipe.as_ref().is_some_and(|r| r.preset == preset)
                    && let Some(r) = self.pending_recipe.take()
                {
                    self.apply_recipe(&r);
                }
                let first = !had && self.session.as_ref().is_some_and(|s| s.result.is_some());
                if first { Polled::FirstResult } else { Polled::Nothing }
            }
            Err(e) => {
                self.session = None;
                Polled::Ended(e)
            }
        }
    }

    /// The layer of the open model with the lowest cumulative SQNR, and that SQNR.
    pub fn worst_layer(&self) -> Option<(NodeId, f64)> {
        let s = self.session.as_ref()?;
        s.rows
            .keys()
            .filter_map(|&n| Some((n, s.row(n)?.sqnr_cumulative_db?)))
            .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
    }

    /// The current per-layer edits (optimized node name → precision).
    pub fn layers(&self) -> &BTreeMap<String, LayerPrecision> {
        &self.history.current().layers
    }

    /// The applied mixed-precision point's plan, if any.
    pub fn base(&self) -> Option<&Arc<QuantPlan>> {
        self.history.current().base.as_ref()
    }

    /// The edit generation the newest request carries.
    pub fn generation(&self) -> u64 {
        self.history.generation()
    }

    /// The precision a node of the open model has in the current edits (or the plan's).
    pub fn precision_of(&self, node: NodeId) -> Option<LayerPrecision> {
        let s = self.session.as_ref()?;
        let m = s.mapping.as_ref()?;
        let plan = &s.result.as_ref()?.plan;
        let opt = *m.to_optimized.get(&node)?.last()?;
        let name = &m.optimized.graph.nodes[opt].name;
        Some(self.layers().get(name).copied().unwrap_or(plan.default))
    }

    /// Sets the precision of nodes of the open model (an undoable edit) and asks the worker
    /// to simulate it.
    pub fn set_precision(&mut self, nodes: &[NodeId], p: LayerPrecision) {
        let Some(s) = &self.session else { return };
        let (Some(m), Some(r)) = (&s.mapping, &s.result) else {
            return;
        };
        let mut next = self.history.current().clone();
        // Only nodes that went into a layer of the plan (a Reshape has no precision).
        for n in nodes.iter().filter(|n| s.rows.contains_key(n)) {
            for &o in m.to_optimized.get(n).map_or(&[][..], Vec::as_slice) {
                let name = m.optimized.graph.nodes[o].name.clone();
                if p == r.plan.default {
                    next.layers.remove(&name);
                } else {
                    next.layers.insert(name, p);
                }
            }
        }
        if self.history.edit(next) {
            self.push();
        }
    }

    /// The project's precision state.
    pub fn edits(&self) -> Edits {
        self.history.current().clone()
    }

    /// Simulates every sample again from scratch with the current edits.
    pub fn resimulate(&mut self, ctx: Option<egui::Context>) {
        if self
            .session
            .as_ref()
            .is_some_and(|s| s.result.is_some() && s.full.is_none())
        {
            let g = self.history.bump();
            if let Some(s) = &mut self.session {
                s.simulate_again(g, ctx);
            }
        }
    }

    pub fn can_undo(&self) -> bool {
        self.history.can_undo()
    }

    pub fn can_redo(&self) -> bool {
        self.history.can_redo()
    }

    pub fn undo(&mut self) {
        if self.history.undo() {
            self.push();
        }
    }

    pub fn redo(&mut self) {
        if self.history.redo() {
            self.push();
        }
    }

    /// Replaces every edit at once (an undoable edit once the session runs; applied when
    /// its first simulation arrives before that).
    pub fn apply_edits(&mut self, edits: Edits) {
        if self.session.as_ref().is_some_and(|s| s.result.is_some()) {
            if self.history.edit(edits) {
                self.push();
            }
        } else {
            self.pending_layers = Some(edits);
        }
    }

    /// Replaces the per-layer edits (keeping the base plan) as one undoable edit.
    pub fn apply_layers(&mut self, layers: BTreeMap<String, LayerPrecision>) {
        let base = self.base().cloned();
        self.apply_edits(Edits { layers, base });
    }

    /// Makes point `k` of the mixed-precision curve the current plan (an undoable edit).
    pub fn apply_pareto_point(&mut self, k: usize) {
        let Some(plan) = self
            .session
            .as_ref()
            .and_then(|s| s.pareto.as_ref())
            .and_then(|(_, m)| m.plans.get(k))
            .cloned()
        else {
            return;
        };
        let layers = plan.layers.clone();
        self.apply_edits(Edits {
            layers,
            base: Some(Arc::new(plan)),
        });
    }

    /// Sends the current edits to the worker as the current generation.
    fn push(&mut self) {
        self.dirty = true;
        let g = self.history.generation();
        let edits = self.edits();
        if let Some(s) = &mut self.session {
            s.send(g, edits);
        }
    }

    /// The precision state a project saved now holds: the edits waiting for the
    /// calibration, if any, else the current ones.
    pub fn project_edits(&self) -> Edits {
        self.pending_layers.clone().unwrap_or_else(|| self.edits())
    }

    /// The setup a project saved now holds: the one the calibrated plan was made with (the
    /// edits refer to it), else the form's.
    pub fn project_setup(&self) -> Setup {
        self.session
            .as_ref()
            .filter(|s| s.result.is_some())
            .map_or_else(|| self.setup.clone(), |s| s.setup.clone())
    }
}
