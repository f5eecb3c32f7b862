//! The studio window: a Netron-class graph view with an inspector, search, collapsible
//! name scopes and export, the graph optimizer's before/after view, the quantization view
//! and the pipeline row. `Studio::ui` draws one frame; `eframe` or a test harness calls it.
//!
//! Layers, each using only the ones above it:
//! - `commands`, `theme`, `jobs`, `plots`, `widgets`, `graph_view`, `document`: vocabulary,
//!   colours, background jobs, plots, shared widgets, one graph pane (knows nothing of
//!   `Studio`), the open model;
//! - the features, which draw from their own state and a read-only context and send
//!   commands: `search`, `inspector`, `outline`, `optimize`, `quantize/`, `pipeline`,
//!   `project`, `export`, `dialogs`;
//! - the studio itself: this file (state and frame order), `command_handling`,
//!   `shortcuts`, `view`, `opening`, `menus`, `canvas` and `app` (the eframe app).

pub mod app;
pub mod canvas;
mod command_handling;
pub mod commands;
pub mod compile;
pub mod dialogs;
pub mod document;
pub mod emulate;
pub mod export;
pub mod graph_view;
pub mod inspector;
pub mod jobs;
mod menus;
mod opening;
pub mod optimize;
pub mod outline;
pub mod pipeline;
pub mod plots;
pub mod project;
pub mod quantize;
pub mod search;
pub mod shortcuts;
pub mod theme;
mod view;
pub mod widgets;

pub use app::{Settings, StudioApp, run};
pub use document::{COLLAPSE_ABOVE_ITEMS, Loaded};
pub use graph_view::ViewState;

use command_handling::Written;
use commands::{Command, Dialog, Selection};
use document::{Opened, Relaid};
use jobs::{Job, Jobs};
use npu_core::ir::NodeId;
use std::collections::BTreeSet;
use std::path::PathBuf;
use theme::Theme;

pub struct Studio {
    pub settings: Settings,
    pub theme: Theme,
    pub loaded: Option<Loaded>,
    pub view: ViewState,
    pub selection: Option<Selection>,
    /// Nodes selected together (Shift+click, Shift+drag, "select all of op type").
    pub multi: BTreeSet<NodeId>,
    /// The node whose card menu is open.
    pub menu_node: Option<NodeId>,
    pub search: search::Search,
    pub inspector: inspector::InspectorState,
    pub status: String,
    pub error: Option<String>,
    pub show_help: bool,
    pub optimizer: optimize::OptimizerState,
    pub quant: quantize::QuantView,
    pub pipeline: pipeline::PipelineState,
    /// The Compile stage: target, last compile, placement overlay.
    pub compile: compile::CompileState,
    pub emulate: emulate::EmulateState,
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
    dialog_job: Option<Job<(Dialog, Option<PathBuf>)>>,
    /// Project saves, autosaves, recipe saves and the pipeline's export.
    writes: Jobs<Written>,
    pending_view: Option<view::PendingView>,
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
            multi: BTreeSet::new(),
            menu_node: None,
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
                formats: npu_core::pipeline::BundleFormats::default(),
            },
            compile: compile::CompileState::default(),
            emulate: emulate::EmulateState::default(),
            project_path: None,
            saved_project: None,
            recovery: None,
            pending_project: None,
            autosave_dir: None,
            commands: Vec::new(),
            open_job: None,
            layout_job: None,
            dialog_job: None,
            writes: Jobs::default(),
            pending_view: None,
            canvas_rect: egui::Rect::NOTHING,
            export: export::ExportState::default(),
            ctx: None,
            theme_applied: None,
        }
    }

    /// Queues a command; it is applied after the next frame's layout.
    pub fn send(&mut self, c: Command) {
        self.commands.push(c);
    }

    /// True while commands wait, a model is opening, a layout runs, a dialog is open, a
    /// file is being written, or a feature's job runs.
    pub fn busy(&self) -> bool {
        !self.commands.is_empty()
            || self.open_job.is_some()
            || self.layout_job.is_some()
            || self.dialog_job.is_some()
            || self.writes.busy()
            || (self.quant.dirty && self.loaded.is_some())
            || self.export.pending()
            || self.optimizer.busy()
            || self.quant.busy()
            || self.inspector.busy()
            || self.compile.busy()
            || self.emulate.busy()
    }

    /// What the pipeline row reads.
    pub fn pipeline_cx(&self) -> pipeline::PipelineCx<'_> {
        pipeline::PipelineCx {
            loaded: self.loaded.as_ref(),
            opening: self.open_job.as_ref().map(|j| &*j.progress),
            optimizer: &self.optimizer,
            quant: &self.quant,
            exporting: self.writes.running("export-plan"),
            export_dir: self.pipeline.export_dir(self.loaded.as_ref()),
            formats: self.pipeline.formats,
            compile: &self.compile,
            emulate: &self.emulate,
        }
    }

    /// Where a stage of the pipeline stands.
    pub fn stage_status(&self, stage: pipeline::Stage) -> pipeline::Status {
        pipeline::status(&self.pipeline_cx(), stage)
    }

    /// Draws one frame: jobs are polled and input read first, then the panels draw and send
    /// commands; every command (the panels', the shortcuts', those sent from outside) is
    /// applied once, after layout.
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
        let mut out = shortcuts::commands(self, &ctx);
        egui::Panel::top("menu_bar").show(ui, |ui| menus::menu_ui(self, ui, &mut out));
        egui::Panel::top("tool_bar").show(ui, |ui| {
            search::toolbar_ui(ui, &mut self.search, self.loaded.as_ref(), &mut out);
        });
        if self.pipeline.open && self.loaded.is_some() {
            egui::Panel::top("pipeline").show(ui, |ui| {
                pipeline::panel_ui(ui, &self.pipeline_cx(), &self.theme, &mut out);
            });
        }
        if self.recovery.is_some() {
            egui::Panel::top("recovery_bar").show(ui, |ui| menus::recovery_ui(self, ui, &mut out));
        }
        egui::Panel::bottom("status_bar").show(ui, |ui| menus::status_ui(self, ui, &mut out));
        // The inspector runs the full height, beside the bottom panels.
        egui::Panel::right("inspector")
            .resizable(true)
            .default_size(330.0)
            .size_range(240.0..=720.0)
            .show(ui, |ui| {
                let calib_shapes = self.quant.preview.as_ref().map(|p| p.shapes.clone());
                let quant = &mut self.quant;
                let theme = &self.theme;
                let placement = self.compile.placement_line(self.selection, &self.theme.quant);
                let emulated = &self.emulate;
                let loaded = self.loaded.as_ref();
                inspector::inspector_ui(
                    ui,
                    &mut self.inspector,
                    loaded,
                    self.selection,
                    calib_shapes.as_deref(),
                    &mut out,
                    |ui, n, out| {
                        quantize::inspector::section_ui(ui, quant, n, theme, out);
                        if let Some(l) = loaded {
                            inspector::program_section(ui, l, n);
                        }
                        if let Some((colour, line)) = placement {
                            ui.separator();
                            ui.strong("Placement");
                            ui.colored_label(colour, line);
                        }
                        emulate::inspector_ui(ui, emulated, n);
                    },
                );
            });
        if self.compile.report_open && self.compile.result.is_some() {
            egui::Panel::bottom("compile_report").show(ui, |ui| {
                compile::panel_ui(ui, &self.compile, &self.theme, &mut out);
            });
        }
        if self.optimizer.open {
            egui::Panel::bottom("optimizer").show(ui, |ui| {
                optimize::panel_ui(ui, &self.optimizer, self.loaded.as_ref(), &mut out);
            });
        }
        if self.quant.open {
            // A height the user sets (drag the top edge) and the studio remembers, never
            // more than leaves half of the window to the graph.
            let free = ui.available_rect_before_wrap().height();
            let window = ui.ctx().content_rect().height();
            let max = (free - 0.5 * window).max(app::QUANT_PANEL_MIN);
            let shown = egui::Panel::bottom("quantize")
                .resizable(true)
                .default_size(self.settings.quant_panel_height)
                .size_range(app::QUANT_PANEL_MIN..=max)
                .show(ui, |ui| {
                    let cx = quantize::panel::PanelCx {
                        loaded: self.loaded.as_ref(),
                        multi: &self.multi,
                        theme: &self.theme,
                    };
                    quantize::panel::panel_ui(ui, &mut self.quant, &cx, &mut out);
                });
            // A height the window forced is not the user's choice.
            let h = shown.response.rect.height();
            if (h - max).abs() > 0.5 {
                self.settings.quant_panel_height = h;
            }
        }
        egui::Panel::left("outline")
            .resizable(true)
            .default_size(230.0)
            .show(ui, |ui| {
                outline::outline_ui(ui, self.loaded.as_ref(), self.selection, &self.theme, &mut out);
            });
        egui::CentralPanel::no_frame().show(ui, |ui| canvas::canvas_ui(self, ui, &mut out));
        menus::windows_ui(self, &ctx, &mut out);
        // After layout: what was asked for, in order (sent from outside, then this frame's).
        self.commands.extend(out);
        if !self.commands.is_empty() {
            ctx.request_repaint();
        }
        self.run_commands();
        self.autosave();
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
}
