//! The studio window: a Netron-class graph view with an inspector, search, collapsible
//! name scopes and export. `Studio::ui` draws one frame; `eframe` or a test harness
//! calls it.

pub mod canvas;
pub mod commands;
pub mod export;
pub mod inspector;
pub mod jobs;
pub mod optimize;
pub mod pipeline;
pub mod project;
pub mod quantize;
pub mod search;
pub mod theme;

use crate::graph::doc::{GraphDoc, ScopeId};
use crate::graph::scene::{Scene, SceneBuilder};
use commands::{Command, ExportFormat, Selection};
use jobs::{Job, JobProgress};
use npu_core::ir::Model;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use theme::Theme;

/// Models with more cards than this open with their scopes collapsed.
pub const COLLAPSE_ABOVE_ITEMS: usize = 1500;
/// How many recent files the File menu keeps.
const RECENT_MAX: usize = 10;

/// Settings kept between runs.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Settings {
    pub recent: Vec<PathBuf>,
    pub dark: bool,
}

/// An open model with its cards and current layout.
pub struct Loaded {
    pub path: PathBuf,
    pub model: Arc<Model>,
    pub doc: Arc<GraphDoc>,
    pub scene: Arc<Scene>,
    /// Collapsed scopes as the user set them (the scene may lag while a layout runs).
    pub collapsed: HashSet<ScopeId>,
    /// Collapsed scopes of `scene`.
    scene_collapsed: HashSet<ScopeId>,
    /// `None` while a layout job owns it.
    builder: Option<SceneBuilder>,
    pub warnings: Vec<String>,
    /// The file's modification time when it was opened (a later one makes the import stale).
    pub modified: Option<std::time::SystemTime>,
}

/// Pan and zoom of the graph canvas.
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

struct Opened {
    path: PathBuf,
    model: Arc<Model>,
    doc: Arc<GraphDoc>,
    builder: SceneBuilder,
    scene: Scene,
    collapsed: HashSet<ScopeId>,
    warnings: Vec<String>,
    modified: Option<std::time::SystemTime>,
}

struct Relaid {
    builder: SceneBuilder,
    scene: Scene,
    collapsed: HashSet<ScopeId>,
}

/// A file chosen in a dialog: to open (`None`) or to export to.
type DialogChoice = Option<(PathBuf, Option<ExportFormat>)>;

/// Where the view goes once a layout lands.
#[derive(Clone, Copy, Debug)]
enum PendingView {
    OpenDefault,
    Fit,
    Reveal(Selection),
}

pub struct Studio {
    pub settings: Settings,
    pub theme: Theme,
    pub loaded: Option<Loaded>,
    pub view: ViewState,
    pub selection: Option<Selection>,
    /// Nodes selected together (Shift+click, Shift+drag, "select all of op type").
    pub multi: std::collections::BTreeSet<npu_core::ir::NodeId>,
    pub search: search::Search,
    pub inspector: inspector::InspectorState,
    pub status: String,
    pub error: Option<String>,
    pub show_help: bool,
    pub optimizer: optimize::OptimizerState,
    pub quant: quantize::QuantView,
    pub pipeline: pipeline::PipelineState,
    /// The project file, once saved or opened.
    pub project_path: Option<PathBuf>,
    /// The project as last saved or opened.
    saved_project: Option<project::Project>,
    /// Unsaved edits found in an autosave file, offered for recovery.
    pub recovery: Option<project::Project>,
    pending_project: Option<project::Project>,
    /// Where autosave files go (`None`: next to the project, or the model).
    pub autosave_dir: Option<PathBuf>,
    commands: Vec<Command>,
    open_job: Option<Job<Opened>>,
    layout_job: Option<Job<Relaid>>,
    dialog_job: Option<Job<DialogChoice>>,
    pending_view: Option<PendingView>,
    /// Canvas rectangle of the last frame (screen points).
    pub canvas_rect: egui::Rect,
    export: export::ExportState,
    ctx: Option<egui::Context>,
    theme_applied: Option<bool>,
}

impl Default for Studio {
    fn default() -> Self {
        Self::new(Settings::default())
    }
}

impl Studio {
    pub fn new(settings: Settings) -> Self {
        Self {
            theme: Theme::new(settings.dark),
            settings,
            loaded: None,
            view: ViewState::default(),
            selection: None,
            multi: std::collections::BTreeSet::new(),
            search: search::Search::default(),
            inspector: inspector::InspectorState::default(),
            status: "Open a model: File › Open…, drop a file here, or pass one on the command line".into(),
            error: None,
            show_help: false,
            optimizer: optimize::OptimizerState::default(),
            quant: quantize::QuantView::default(),
            pipeline: pipeline::PipelineState {
                open: true,
                export_dir: None,
            },
            project_path: None,
            saved_project: None,
            recovery: None,
            pending_project: None,
            autosave_dir: None,
            commands: Vec::new(),
            open_job: None,
            layout_job: None,
            dialog_job: None,
            pending_view: None,
            canvas_rect: egui::Rect::NOTHING,
            export: export::ExportState::default(),
            ctx: None,
            theme_applied: None,
        }
    }

    /// Starts calibration and simulation of the open model with the quantization panel's
    /// setup and the optimizer's enabled passes.
    pub fn start_quantization(&mut self) {
        if let Some(l) = &self.loaded {
            let model = l.model.clone();
            self.quant.start(model, self.optimizer.enabled(), self.ctx.clone());
        }
    }

    /// Queues a command; it runs at the start of the next frame.
    pub fn send(&mut self, c: Command) {
        self.commands.push(c);
    }

    /// True while a model is opening, a layout runs or a dialog is open.
    pub fn busy(&self) -> bool {
        self.open_job.is_some()
            || self.layout_job.is_some()
            || self.dialog_job.is_some()
            || self.export.pending()
            || self.optimizer.busy()
            || self.quant.busy()
    }

    /// Draws one frame.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        let ctx = ui.ctx().clone();
        self.ctx = Some(ctx.clone());
        if self.theme_applied.is_none() {
            Theme::install_fonts(&ctx);
        }
        if self.theme_applied != Some(self.theme.dark) {
            self.theme.apply(&ctx);
            self.theme_applied = Some(self.theme.dark);
        }
        self.poll_jobs();
        self.handle_dropped_files(&ctx);
        self.handle_shortcuts(&ctx);
        self.run_commands();
        self.autosave();

        egui::Panel::top("menu_bar").show(ui, |ui| self.menu_ui(ui));
        egui::Panel::top("tool_bar").show(ui, |ui| search::toolbar_ui(self, ui));
        if self.pipeline.open && self.loaded.is_some() {
            egui::Panel::top("pipeline").show(ui, |ui| pipeline::panel_ui(self, ui));
        }
        if self.recovery.is_some() {
            egui::Panel::top("recovery_bar").show(ui, |ui| {
                ui.horizontal(|ui| {
                    let n = self.recovery.as_ref().map_or(0, |p| p.layers.len());
                    ui.label(format!(
                        "Unsaved edits from an earlier session were found ({n} layer precisions)."
                    ));
                    if ui.button("Recover edits").clicked() {
                        self.send(Command::RecoverEdits);
                    }
                    if ui.button("Discard").clicked() {
                        self.send(Command::DiscardRecovery);
                    }
                });
            });
        }
        egui::Panel::bottom("status_bar").show(ui, |ui| self.status_ui(ui));
        // The inspector runs the full height, beside the bottom panels.
        egui::Panel::right("inspector")
            .resizable(true)
            .default_size(330.0)
            .size_range(240.0..=720.0)
            .show(ui, |ui| inspector::inspector_ui(self, ui));
        if self.optimizer.open {
            egui::Panel::bottom("optimizer").show(ui, |ui| optimize::panel_ui(self, ui));
        }
        if self.quant.open {
            egui::Panel::bottom("quantize").show(ui, |ui| quantize::panel_ui(self, ui));
        }
        egui::Panel::left("outline")
            .resizable(true)
            .default_size(230.0)
            .show(ui, |ui| self.outline_ui(ui));
        egui::CentralPanel::no_frame().show(ui, |ui| canvas::canvas_ui(self, ui));
        self.windows_ui(&ctx);
        self.export.poll(&mut self.status, &mut self.error);
        if self.busy() {
            ctx.request_repaint_after(std::time::Duration::from_millis(50));
        }
    }

    fn handle_dropped_files(&mut self, ctx: &egui::Context) {
        let dropped: Vec<PathBuf> = ctx.input(|i| {
            i.raw
                .dropped_files
                .iter()
                .map(|f| f.path().to_path_buf())
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        });
        if let Some(p) = dropped.into_iter().next() {
            self.send(Command::Open(p));
        }
    }

    fn handle_shortcuts(&mut self, ctx: &egui::Context) {
        use egui::{Key, KeyboardShortcut, Modifiers};
        let typing = ctx.egui_wants_keyboard_input();
        let shortcut = |m: Modifiers, k: Key| ctx.input_mut(|i| i.consume_shortcut(&KeyboardShortcut::new(m, k)));
        if shortcut(Modifiers::COMMAND, Key::O) {
            self.send(Command::OpenDialog);
        }
        if shortcut(Modifiers::COMMAND, Key::F) {
            self.search.focus_requested = true;
        }
        if shortcut(Modifiers::COMMAND | Modifiers::SHIFT, Key::E) {
            self.send(Command::Export(ExportFormat::Svg, None));
        }
        if shortcut(Modifiers::COMMAND, Key::E) {
            self.send(Command::Export(ExportFormat::Png, None));
        }
        if shortcut(Modifiers::COMMAND, Key::S) {
            self.send(Command::SaveProject(None));
        }
        if shortcut(Modifiers::COMMAND | Modifiers::SHIFT, Key::Z) {
            self.send(Command::Redo);
        }
        if shortcut(Modifiers::COMMAND, Key::Z) {
            self.send(Command::Undo);
        }
        if shortcut(Modifiers::COMMAND, Key::T) {
            self.send(Command::SetDarkTheme(!self.settings.dark));
        }
        if typing {
            return;
        }
        let pressed = |k: Key| ctx.input(|i| i.key_pressed(k) && !i.modifiers.command);
        if pressed(Key::O) {
            self.send(Command::ToggleOptimizer);
        }
        if pressed(Key::Q) {
            self.send(Command::ToggleQuantize);
        }
        if pressed(Key::P) {
            self.pipeline.open = !self.pipeline.open;
        }
        if pressed(Key::F1) || pressed(Key::Questionmark) {
            self.send(Command::ToggleHelp);
        }
        if pressed(Key::Plus) || pressed(Key::Equals) {
            self.send(Command::ZoomBy(1.25));
        }
        if pressed(Key::Minus) {
            self.send(Command::ZoomBy(0.8));
        }
        if pressed(Key::F) || pressed(Key::Num0) {
            self.send(Command::FitView);
        }
        if pressed(Key::Z) || pressed(Key::Period) {
            self.send(Command::ZoomToSelection);
        }
        if pressed(Key::Escape) {
            self.send(Command::Select(None));
            self.send(Command::SetMulti(Vec::new()));
        }
        if pressed(Key::N) {
            let back = ctx.input(|i| i.modifiers.shift);
            self.send(Command::SearchStep(if back { -1 } else { 1 }));
        }
        if pressed(Key::Enter)
            && let Some(Selection::Scope(s)) = self.selection
        {
            self.send(Command::ToggleScope(s));
        }
        let step = 60.0 / self.view.zoom;
        for (k, d) in [
            (Key::ArrowLeft, egui::vec2(-step, 0.0)),
            (Key::ArrowRight, egui::vec2(step, 0.0)),
            (Key::ArrowUp, egui::vec2(0.0, -step)),
            (Key::ArrowDown, egui::vec2(0.0, step)),
        ] {
            if pressed(k) {
                self.view.center += d;
            }
        }
    }

    fn run_commands(&mut self) {
        let commands = std::mem::take(&mut self.commands);
        for c in commands {
            self.apply(c);
        }
    }

    fn apply(&mut self, c: Command) {
        match c {
            Command::Open(path) => self.open(path),
            Command::OpenDialog => self.start_dialog(None),
            Command::Select(s) => {
                self.selection = s;
            }
            Command::SetMulti(nodes) => self.multi = nodes.into_iter().collect(),
            Command::Reveal(s) => self.reveal(s),
            Command::ToggleScope(s) => {
                if let Some(l) = &mut self.loaded {
                    if !l.collapsed.remove(&s) {
                        l.collapsed.insert(s);
                    }
                    self.relayout();
                }
            }
            Command::SetAllScopes { collapsed } => {
                if let Some(l) = &mut self.loaded {
                    l.collapsed = if collapsed {
                        (1..l.doc.scopes.len()).collect()
                    } else {
                        HashSet::new()
                    };
                    self.relayout();
                }
            }
            Command::FitView => {
                if self.layout_job.is_some() {
                    self.pending_view = Some(PendingView::Fit);
                } else {
                    self.fit_view();
                }
            }
            Command::ZoomBy(f) => self.view.zoom = (self.view.zoom * f).clamp(canvas::MIN_ZOOM, canvas::MAX_ZOOM),
            Command::ZoomToSelection => {
                if let Some(r) = self.selection_rect() {
                    self.zoom_to(r, 1.2);
                }
            }
            Command::SearchStep(d) => search::step(self, d),
            Command::Export(format, path) => match path {
                Some(p) => self.export_to(format, p),
                None => self.start_dialog(Some(format)),
            },
            Command::SetDarkTheme(dark) => {
                self.settings.dark = dark;
                self.theme = Theme::new(dark);
            }
            Command::ToggleHelp => self.show_help = !self.show_help,
            Command::ToggleOptimizer => self.optimizer.open = !self.optimizer.open,
            Command::ToggleQuantize => self.quant.open = !self.quant.open,
            Command::SetPrecision(nodes, p) => self.quant.set_precision(&nodes, p),
            Command::Undo => self.quant.undo(),
            Command::SaveProject(path) => self.save_project(path),
            Command::OpenProject(path) => match project::Project::load(&path) {
                Ok(p) => {
                    self.project_path = Some(path);
                    let model = p.model.clone();
                    self.pending_project = Some(p);
                    self.open(model);
                }
                Err(e) => self.error = Some(e),
            },
            Command::RecoverEdits => {
                if let Some(p) = self.recovery.take() {
                    let start = self.quant.session.is_none() && !p.data.is_empty();
                    self.quant.setup = p.setup();
                    self.quant.rules.clone_from(&p.rules);
                    self.quant.open = true;
                    self.quant.apply_edits(p.edits());
                    if start && let Some(l) = &self.loaded {
                        let model = l.model.clone();
                        let pending = self.quant.pending_layers.take();
                        self.quant.start(model, self.optimizer.enabled(), self.ctx.clone());
                        self.quant.pending_layers = pending;
                    }
                    self.status = "Recovered the unsaved edits".into();
                }
            }
            Command::DiscardRecovery => {
                self.recovery = None;
                if let Some(l) = &self.loaded {
                    let _ = std::fs::remove_file(project::autosave_path(
                        self.project_path.as_deref(),
                        &l.path,
                        self.autosave_dir.as_deref(),
                    ));
                }
            }
            Command::Redo => self.quant.redo(),
            Command::RunOptimizer => {
                self.optimizer.open = true;
                optimize::start(self);
            }
            Command::CancelJobs => {
                for p in [
                    self.open_job.as_ref().map(|j| &j.progress),
                    self.layout_job.as_ref().map(|j| &j.progress),
                ]
                .into_iter()
                .flatten()
                {
                    p.cancel.cancel();
                }
                self.optimizer.cancel();
                self.quant.cancel();
            }
            Command::DismissError => self.error = None,
        }
    }

    /// Writes every project edit to the sidecar autosave file at once (atomically).
    fn autosave(&mut self) {
        if !self.quant.dirty {
            return;
        }
        self.quant.dirty = false;
        let Some(l) = &self.loaded else { return };
        let side = project::autosave_path(self.project_path.as_deref(), &l.path, self.autosave_dir.as_deref());
        let r = project::Project::new(
            &l.path,
            &self.quant.project_setup(),
            &self.quant.project_edits(),
            &self.quant.rules,
        )
        .and_then(|p| p.save(&side));
        if let Err(e) = r {
            self.status = format!("Autosave failed: {e}");
        }
    }

    fn save_project(&mut self, path: Option<PathBuf>) {
        let Some(l) = &self.loaded else {
            self.error = Some("Nothing to save: no model is open".into());
            return;
        };
        let path = match path.or_else(|| self.project_path.clone()) {
            Some(p) => p,
            None => {
                let stem = l
                    .path
                    .file_stem()
                    .map_or_else(|| "project".into(), |s| s.to_string_lossy().into_owned());
                // Under Xvfb or CI no dialog appears: nothing is saved.
                match rfd::FileDialog::new()
                    .add_filter("NPU Studio project", &["ron"])
                    .set_file_name(format!("{stem}.npuproj.ron"))
                    .save_file()
                {
                    Some(p) => p,
                    None => return,
                }
            }
        };
        let r = project::Project::new(
            &l.path,
            &self.quant.project_setup(),
            &self.quant.project_edits(),
            &self.quant.rules,
        )
        .and_then(|p| {
            p.save(&path)?;
            Ok(p)
        });
        match r {
            Ok(p) => {
                let old_side =
                    project::autosave_path(self.project_path.as_deref(), &l.path, self.autosave_dir.as_deref());
                let _ = std::fs::remove_file(old_side);
                self.status = format!("Project saved to {}", path.display());
                self.project_path = Some(path);
                self.saved_project = Some(p);
            }
            Err(e) => self.error = Some(format!("Could not save the project: {e}")),
        }
    }

    /// Opens a model in the background; the current one stays until this succeeds.
    pub fn open(&mut self, path: PathBuf) {
        if let Some(j) = &self.open_job {
            j.progress.cancel.cancel();
        }
        self.status = format!("Opening {}…", path.display());
        let ctx = self.ctx.clone();
        self.open_job = Some(Job::spawn("open-model", ctx.as_ref(), move |p| open_model(&path, p)));
    }

    fn start_dialog(&mut self, export: Option<ExportFormat>) {
        if self.dialog_job.is_some() {
            return;
        }
        let dir = self
            .loaded
            .as_ref()
            .and_then(|l| l.path.parent().map(Path::to_path_buf));
        let stem = self
            .loaded
            .as_ref()
            .and_then(|l| l.path.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "graph".into());
        let ctx = self.ctx.clone();
        self.dialog_job = Some(Job::spawn("file-dialog", ctx.as_ref(), move |_| {
            let mut d = rfd::FileDialog::new();
            if let Some(dir) = dir {
                d = d.set_directory(dir);
            }
            Ok(match export {
                None => d
                    .add_filter("ONNX model", &["onnx"])
                    .add_filter("All files", &["*"])
                    .pick_file()
                    .map(|p| (p, None)),
                Some(f) => {
                    let ext = match f {
                        ExportFormat::Png => "png",
                        ExportFormat::Svg => "svg",
                    };
                    d.add_filter(ext.to_uppercase(), &[ext])
                        .set_file_name(format!("{stem}.{ext}"))
                        .save_file()
                        .map(|p| (p, Some(f)))
                }
            })
        }));
    }

    fn export_to(&mut self, format: ExportFormat, path: PathBuf) {
        let Some(l) = &self.loaded else {
            self.error = Some("Nothing to export: no model is open".into());
            return;
        };
        match format {
            ExportFormat::Svg => {
                let visible = canvas::visible_graph_rect(self.canvas_rect, &self.view);
                let svg = export::svg(&l.doc, &l.scene, visible, &self.theme);
                match export::write_atomic(&path, svg.as_bytes()) {
                    Ok(()) => self.status = format!("Exported the view to {}", path.display()),
                    Err(e) => self.error = Some(format!("Could not write the view: {e}")),
                }
            }
            ExportFormat::Png => {
                if let Some(ctx) = &self.ctx {
                    self.export.request_png(ctx, path, self.canvas_rect);
                }
            }
        }
    }

    fn poll_jobs(&mut self) {
        optimize::poll(self);
        if let Some(e) = self.quant.poll() {
            self.error = Some(e);
        }
        if let Some(r) = self.open_job.as_ref().and_then(Job::poll) {
            self.open_job = None;
            match r {
                Ok(o) => self.finish_open(o),
                Err(e) if e == "cancelled" => self.status = "Opening cancelled".into(),
                Err(e) => {
                    self.status = "Could not open the model".into();
                    self.error = Some(e);
                }
            }
        }
        if let Some(r) = self.layout_job.as_ref().and_then(Job::poll) {
            self.layout_job = None;
            match r {
                Ok(relaid) => {
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
                Err(e) => self.error = Some(format!("Layout failed: {e}")),
            }
        }
        if let Some(r) = self.dialog_job.as_ref().and_then(Job::poll) {
            self.dialog_job = None;
            match r {
                Ok(Some((p, None))) => self.send(Command::Open(p)),
                Ok(Some((p, Some(f)))) => self.send(Command::Export(f, Some(p))),
                Ok(None) => self.status = "No file chosen".into(),
                Err(e) => self.error = Some(e),
            }
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
        self.search = search::Search::default();
        self.inspector = inspector::InspectorState::default();
        self.optimizer.reset();
        // The plan belongs to the previous model; the setup form stays.
        self.quant.reset();
        self.recovery = None;
        match self.pending_project.take() {
            Some(p) => {
                if project::file_hash(&o.path).is_ok_and(|h| h != p.model_hash) {
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
                self.quant.dirty = false;
                self.saved_project = Some(p);
            }
            None => {
                self.project_path = None;
                self.saved_project = None;
            }
        }
        let side = project::autosave_path(self.project_path.as_deref(), &o.path, self.autosave_dir.as_deref());
        self.recovery = project::recoverable(&side, self.saved_project.as_ref());
        self.loaded = Some(Loaded {
            path: o.path,
            model: o.model,
            doc: o.doc,
            scene: Arc::new(o.scene),
            scene_collapsed: o.collapsed.clone(),
            collapsed: o.collapsed,
            builder: Some(o.builder),
            warnings: o.warnings,
            modified: o.modified,
        });
        self.pending_view = Some(PendingView::OpenDefault);
        self.apply_pending_view();
    }

    /// Starts a layout for the current collapsed set (or leaves it to the running one).
    fn relayout(&mut self) {
        if self.layout_job.is_some() {
            return;
        }
        let Some(l) = &mut self.loaded else { return };
        let Some(mut builder) = l.builder.take() else { return };
        let collapsed = l.collapsed.clone();
        let changed: Vec<ScopeId> = collapsed.symmetric_difference(&l.scene_collapsed).copied().collect();
        let ctx = self.ctx.clone();
        self.layout_job = Some(Job::spawn("layout", ctx.as_ref(), move |p| {
            p.set(0.0, "laying out");
            for s in changed {
                builder.invalidate(s);
            }
            let scene = builder.build(&collapsed);
            Ok(Relaid {
                builder,
                scene,
                collapsed,
            })
        }));
    }

    fn apply_pending_view(&mut self) {
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
    pub(crate) fn canvas_ready(&mut self, rect: egui::Rect) {
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
                .position(|it| matches!(it.kind, crate::graph::doc::ItemKind::Input(_)))
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

    fn zoom_to(&mut self, r: egui::Rect, max_zoom: f32) {
        let c = self.canvas_rect;
        if c.width() <= 1.0 {
            return;
        }
        let fit = (c.width() / r.width().max(1.0)).min(c.height() / r.height().max(1.0)) * 0.92;
        self.view.zoom = fit.clamp(canvas::MIN_ZOOM, max_zoom);
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
                .or_else(|| {
                    l.doc
                        .items
                        .iter()
                        .position(|it| it.kind == crate::graph::doc::ItemKind::Input(v))
                })
                .or_else(|| l.doc.consumers[v].iter().find_map(|&n| l.doc.node_item[n]))
                .map(|i| l.scene.item_box[i]),
        }
    }

    /// The rectangle (graph units) of the box that shows a selection.
    pub fn rect_of(&self, s: Selection) -> Option<egui::Rect> {
        let l = self.loaded.as_ref()?;
        l.scene.boxes.get(self.box_of(s)?).map(|b| b.rect)
    }

    fn selection_rect(&self) -> Option<egui::Rect> {
        self.selection.and_then(|s| self.rect_of(s))
    }

    /// Selects, expands the scopes that hide the selection, and centres it.
    fn reveal(&mut self, s: Selection) {
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

    fn menu_ui(&mut self, ui: &mut egui::Ui) {
        egui::MenuBar::new().ui(ui, |ui| {
            ui.menu_button("File", |ui| {
                if ui.button("Open…").clicked() {
                    self.send(Command::OpenDialog);
                }
                if ui.button("Open project…").clicked() {
                    if let Some(p) = rfd::FileDialog::new()
                        .add_filter("NPU Studio project", &["ron"])
                        .pick_file()
                    {
                        self.send(Command::OpenProject(p));
                    }
                }
                if ui
                    .add_enabled(self.loaded.is_some(), egui::Button::new("Save project"))
                    .clicked()
                {
                    self.send(Command::SaveProject(None));
                }
                ui.menu_button("Open recent", |ui| {
                    if self.settings.recent.is_empty() {
                        ui.label("No recent files");
                    }
                    for p in self.settings.recent.clone() {
                        if ui.button(p.display().to_string()).clicked() {
                            self.send(Command::Open(p));
                        }
                    }
                });
                ui.separator();
                if ui.button("Export view as PNG…").clicked() {
                    self.send(Command::Export(ExportFormat::Png, None));
                }
                if ui.button("Export view as SVG…").clicked() {
                    self.send(Command::Export(ExportFormat::Svg, None));
                }
            });
            ui.menu_button("View", |ui| {
                if ui.button("Fit to window").clicked() {
                    self.send(Command::FitView);
                }
                if ui.button("Zoom to selection").clicked() {
                    self.send(Command::ZoomToSelection);
                }
                if ui.button("Collapse all scopes").clicked() {
                    self.send(Command::SetAllScopes { collapsed: true });
                }
                if ui.button("Expand all scopes").clicked() {
                    self.send(Command::SetAllScopes { collapsed: false });
                }
                ui.checkbox(&mut self.pipeline.open, "Pipeline (P)");
                ui.checkbox(&mut self.quant.open, "Quantization panel (Q)");
                let mut dark = self.settings.dark;
                if ui.checkbox(&mut dark, "Dark theme").changed() {
                    self.send(Command::SetDarkTheme(dark));
                }
            });
            ui.menu_button("Optimize", |ui| {
                if ui.button("Graph optimizer…").clicked() {
                    self.send(Command::ToggleOptimizer);
                }
                if ui
                    .add_enabled(self.loaded.is_some(), egui::Button::new("Run all enabled passes"))
                    .clicked()
                {
                    self.send(Command::RunOptimizer);
                }
            });
            ui.menu_button("Help", |ui| {
                if ui.button("Keyboard shortcuts").clicked() {
                    self.send(Command::ToggleHelp);
                }
            });
        });
    }

    fn status_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal(|ui| {
            let jobs: Vec<(f32, String)> = [
                self.open_job.as_ref().map(|j| j.progress.fraction()),
                self.layout_job.as_ref().map(|j| j.progress.fraction()),
            ]
            .into_iter()
            .flatten()
            .collect();
            if let Some((f, what)) = jobs.first() {
                ui.add(
                    egui::ProgressBar::new(*f)
                        .desired_width(160.0)
                        .text(what.clone())
                        .animate(true),
                );
                if ui.button("Cancel").clicked() {
                    self.send(Command::CancelJobs);
                }
            }
            ui.label(&self.status);
            ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                ui.label(format!("{:.0}%", self.view.zoom * 100.0));
            });
        });
    }

    fn outline_ui(&mut self, ui: &mut egui::Ui) {
        ui.heading("Scopes");
        let Some(l) = &self.loaded else {
            ui.label("No model open");
            return;
        };
        let doc = l.doc.clone();
        let collapsed = l.collapsed.clone();
        ui.horizontal(|ui| {
            if ui.small_button("Collapse all").clicked() {
                self.send(Command::SetAllScopes { collapsed: true });
            }
            if ui.small_button("Expand all").clicked() {
                self.send(Command::SetAllScopes { collapsed: false });
            }
        });
        egui::ScrollArea::vertical()
            .id_salt("scope_tree")
            .max_height(ui.available_height() * 0.6)
            .show(ui, |ui| {
                if doc.scopes.len() <= 1 {
                    ui.label("This model has no name scopes");
                }
                let mut out = Vec::new();
                for &c in &doc.scopes[0].children {
                    scope_tree_ui(ui, &doc, c, &collapsed, self.selection, &mut out);
                }
                self.commands.extend(out);
            });
        ui.separator();
        ui.heading("Op families");
        for f in crate::graph::doc::Family::ALL {
            ui.horizontal(|ui| {
                let (r, _) = ui.allocate_exact_size(egui::vec2(14.0, 14.0), egui::Sense::hover());
                ui.painter().rect_filled(r, 3.0, self.theme.family(f));
                ui.label(f.label());
            });
        }
    }

    fn windows_ui(&mut self, ctx: &egui::Context) {
        if self.show_help {
            let mut open = true;
            egui::Window::new("Keyboard shortcuts")
                .open(&mut open)
                .resizable(false)
                .show(ctx, |ui| {
                    egui::Grid::new("shortcuts").striped(true).show(ui, |ui| {
                        for (k, what) in SHORTCUTS {
                            ui.label(*k);
                            ui.label(*what);
                            ui.end_row();
                        }
                    });
                });
            self.show_help = open;
        }
        if let Some(e) = self.error.clone() {
            egui::Window::new("Error")
                .collapsible(false)
                .resizable(true)
                .show(ctx, |ui| {
                    ui.colored_label(self.theme.error, e);
                    if self.loaded.is_some() {
                        ui.label("The model that was open stays open.");
                    }
                    if ui.button("OK").clicked() {
                        self.send(Command::DismissError);
                    }
                });
        }
    }
}

/// Keyboard shortcuts, shown in the help window.
pub const SHORTCUTS: &[(&str, &str)] = &[
    ("Ctrl+O", "open a model"),
    ("O", "show or hide the graph optimizer"),
    ("Ctrl+F", "search nodes, ops and tensors"),
    ("Enter / Shift+Enter", "next / previous match (in the search box)"),
    ("N / Shift+N", "next / previous match"),
    ("drag, scroll, arrows", "pan"),
    ("Ctrl+scroll, pinch, + / −", "zoom"),
    ("F or 0", "fit the graph to the window"),
    ("Z or .", "zoom to the selection"),
    ("double-click a scope", "expand or collapse it"),
    ("Enter", "expand or collapse the selected scope"),
    ("Shift+click, Shift+drag", "add nodes to the multi-selection"),
    ("right-click a node", "set its precision (or the multi-selection's)"),
    ("Ctrl+Z / Ctrl+Shift+Z", "undo / redo a precision edit"),
    ("Ctrl+S", "save the project"),
    ("Q", "show or hide the quantization panel"),
    ("P", "show or hide the pipeline"),
    ("Esc", "clear the selection"),
    ("Ctrl+E / Ctrl+Shift+E", "export the view as PNG / SVG"),
    ("Ctrl+T", "switch light / dark theme"),
    ("F1 or ?", "this help"),
];

fn scope_tree_ui(
    ui: &mut egui::Ui,
    doc: &GraphDoc,
    s: ScopeId,
    collapsed: &HashSet<ScopeId>,
    selection: Option<Selection>,
    out: &mut Vec<Command>,
) {
    let sc = &doc.scopes[s];
    let is_collapsed = collapsed.contains(&s);
    let row = |ui: &mut egui::Ui, out: &mut Vec<Command>| {
        let (icon, verb) = if is_collapsed {
            ("⊞", "Expand")
        } else {
            ("⊟", "Collapse")
        };
        let label = format!("{verb} {}", sc.path);
        let resp = ui.small_button(icon).on_hover_text(format!("{label} in the graph"));
        resp.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Button, true, &label));
        if resp.clicked() {
            out.push(Command::ToggleScope(s));
        }
        let selected = selection == Some(Selection::Scope(s));
        if ui
            .selectable_label(selected, format!("{} ({})", sc.name, sc.total_items))
            .clicked()
        {
            out.push(Command::Reveal(Selection::Scope(s)));
        }
    };
    if sc.children.is_empty() {
        ui.horizontal(|ui| row(ui, out));
    } else {
        let id = ui.make_persistent_id(("scope", s));
        // Small trees start open at the top level; large ones start closed.
        let open = sc.depth <= 1 && doc.scopes.len() <= 200;
        egui::collapsing_header::CollapsingState::load_with_default_open(ui.ctx(), id, open)
            .show_header(ui, |ui| row(ui, out))
            .body(|ui| {
                for &c in &sc.children {
                    scope_tree_ui(ui, doc, c, collapsed, selection, out);
                }
            });
    }
}

/// Imports, builds the cards and lays out: the open job.
fn open_model(path: &Path, p: &JobProgress) -> Result<Opened, String> {
    p.set(0.05, "reading");
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let opts = npu_core::import::onnx::LoadOptions {
        allow_unsupported: true,
    };
    let (model, report) = npu_core::import::onnx::load_with(path, &opts).map_err(|e| e.to_string())?;
    p.check()?;
    p.set(0.4, "building cards");
    let doc = Arc::new(GraphDoc::build(&model));
    p.check()?;
    let collapsed: HashSet<ScopeId> = if doc.items.len() > COLLAPSE_ABOVE_ITEMS {
        (1..doc.scopes.len()).collect()
    } else {
        HashSet::new()
    };
    p.set(0.6, "laying out");
    let mut builder = SceneBuilder::new(doc.clone());
    let scene = builder.build(&collapsed);
    p.check()?;
    p.set(1.0, "done");
    Ok(Opened {
        path: path.to_path_buf(),
        model: Arc::new(model),
        doc,
        builder,
        scene,
        collapsed,
        warnings: report.warnings,
        modified,
    })
}

/// The eframe application: the studio plus persistence.
pub struct StudioApp {
    pub studio: Studio,
}

impl StudioApp {
    pub fn new(cc: &eframe::CreationContext<'_>, model: Option<PathBuf>) -> Self {
        let settings: Settings = cc
            .storage
            .and_then(|s| eframe::get_value(s, "settings"))
            .unwrap_or_default();
        let mut studio = Studio::new(settings);
        if let Some(m) = model {
            studio.send(Command::Open(m));
        }
        Self { studio }
    }
}

impl eframe::App for StudioApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.studio.ui(ui);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, "settings", &self.studio.settings);
    }
}

/// Opens the studio window; blocks until it closes.
pub fn run(model: Option<PathBuf>) -> anyhow::Result<()> {
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title("NPU Studio")
            .with_inner_size([1440.0, 900.0])
            .with_drag_and_drop(true),
        ..Default::default()
    };
    eframe::run_native(
        "NPU Studio",
        options,
        Box::new(move |cc| Ok(Box::new(StudioApp::new(cc, model)))),
    )
    .map_err(|e| anyhow::anyhow!("could not open the studio window: {e}"))
}
