//! The studio's side of the document jobs: opening a model in the background (the model
//! already open stays until the new one is ready), swapping in a finished layout, and
//! resetting what belonged to the previous model.

use super::Studio;
use super::document::{self, Opened};
use super::inspector::InspectorState;
use super::jobs::{Job, JobError, take_finished};
use super::project;
use super::search::Search;
use super::view::PendingView;
use crate::graph::doc::ScopeId;
use std::path::PathBuf;
use std::sync::Arc;

/// How many recent files the File menu keeps.
const RECENT_MAX: usize = 10;

impl Studio {
    /// Opens a model in the background; the current one stays until this succeeds.
    pub fn open(&mut self, path: PathBuf) {
        if let Some(j) = &self.open_job {
            j.cancel();
        }
        self.status = format!("Opening {}…", path.display());
        let ctx = self.ctx.clone();
        // A project being opened checks that its model did not change.
        let hash = self.pending_project.is_some();
        self.open_job = Some(Job::spawn("open-model", ctx.as_ref(), move |p| {
            document::open_model(&path, hash, p)
        }));
    }

    /// Takes a finished open or layout job.
    pub(super) fn poll_document_jobs(&mut self) {
        match take_finished(&mut self.open_job) {
            Some(Ok(o)) => self.finish_open(o),
            Some(Err(JobError::Cancelled)) => self.status = "Opening cancelled".into(),
            Some(Err(JobError::Failed(e))) => {
                self.status = "Could not open the model".into();
                self.error = Some(e);
            }
            None => {}
        }
        match take_finished(&mut self.layout_job) {
            Some(Ok(relaid)) => {
                if let Some(l) = &mut self.loaded {
                    l.scene = Arc::new(relaid.scene);
                    l.scene_collapsed = relaid.collapsed;
                    l.builder = Some(relaid.builder);
                    if l.scene_collapsed == l.collapsed {
                        self.apply_pending_view();
                    } else {
                        self.relayout();
                    }
                }
            }
            Some(Err(e)) => self.error = Some(format!("Layout failed: {e}")),
            None => {}
        }
    }

    fn finish_open(&mut self, o: Opened) {
        let file = o
            .path
            .file_name()
            .map_or_else(|| o.path.display().to_string(), |f| f.to_string_lossy().into_owned());
        self.status = format!(
            "Opened {file}: {} nodes, {} cards, {} scopes",
            o.model.graph.nodes.len(),
            o.doc.items.len(),
            o.doc.scopes.len() - 1
        );
        self.settings.recent.retain(|p| p != &o.path);
        self.settings.recent.insert(0, o.path.clone());
        self.settings.recent.truncate(RECENT_MAX);
        // A layout still running belongs to the previous model: its result is dropped.
        self.layout_job = None;
        self.selection = None;
        self.multi.clear();
        self.search = Search::default();
        self.inspector = InspectorState::default();
        self.optimizer.reset();
        // The plan belongs to the previous model; the setup form stays.
        self.quant.reset();
        self.compile.reset();
        self.emulate.reset();
        self.recovery = None;
        self.menu_node = None;
        if let Some(p) = self.pending_project.take() {
            if o.hash.as_ref().is_some_and(|h| *h != p.model_hash) {
                self.error = Some(format!(
                    "{} changed since the project was saved: layer names may no longer match",
                    o.path.display()
                ));
            }
            self.quant.setup = p.setup();
            self.quant.rules.clone_from(&p.rules);
            self.quant.open = true;
            if !p.data.is_empty() {
                self.quant
                    .start(o.model.clone(), self.optimizer.enabled(), self.ctx.clone());
            }
            self.quant.pending_layers = Some(p.edits());
            self.compile.apply_choice(&p.compile, &o.model);
            self.quant.dirty = false;
            self.saved_project = Some(p);
        } else {
            self.project_path = None;
            self.saved_project = None;
            // A model that ships with calibration images (the bundled sample) gets them as
            // the samples folder: Calibrate's Run is the one click to the heatmap, the
            // placement and the latency.
            if let Some(dir) = bundled_calibration(&o.path)
                && self.quant.setup.data.is_empty()
            {
                self.quant.setup.data = dir.display().to_string();
                self.status = format!(
                    "{}; its bundled calibration images are set: press Calibrate's Run for the SQNR heatmap, the placement on {} and the latency",
                    self.status, self.compile.target
                );
            }
        }
        let side = project::autosave_path(self.project_path.as_deref(), &o.path, self.autosave_dir.as_deref());
        self.recovery = project::recoverable(&side, self.saved_project.as_ref());
        self.loaded = Some(o.into_loaded());
        self.pending_view = Some(PendingView::OpenDefault);
        self.apply_pending_view();
    }

    /// Starts a layout for the current collapsed set (or leaves it to the running one).
    pub(super) fn relayout(&mut self) {
        if self.layout_job.is_some() {
            return;
        }
        let Some(l) = &mut self.loaded else { return };
        let Some(builder) = l.builder.take() else { return };
        let collapsed = l.collapsed.clone();
        let changed: Vec<ScopeId> = collapsed.symmetric_difference(&l.scene_collapsed).copied().collect();
        let ctx = self.ctx.clone();
        self.layout_job = Some(Job::spawn("layout", ctx.as_ref(), move |p| {
            Ok(document::relayout(builder, collapsed, changed, p))
        }));
    }
}

/// `assets/calibration/<stem>/` beside `assets/models/<stem>.onnx`, when it holds images.
pub fn bundled_calibration(model: &std::path::Path) -> Option<std::path::PathBuf> {
    let stem = model.file_stem()?;
    let dir = model.parent()?.parent()?.join("calibration").join(stem);
    let has_images = std::fs::read_dir(&dir).ok()?.flatten().any(|e| {
        e.path()
            .extension()
            .is_some_and(|x| ["jpg", "jpeg", "png"].iter().any(|k| x.eq_ignore_ascii_case(k)))
    });
    // Shown in the Samples field: relative to the working directory when under it.
    let here = std::env::current_dir().ok();
    let shown = here
        .as_deref()
        .and_then(|h| dir.strip_prefix(h).ok())
        .map_or_else(|| dir.clone(), std::path::Path::to_path_buf);
    has_images.then_some(shown)
}
