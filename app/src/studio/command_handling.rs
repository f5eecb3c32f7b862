//! Applying commands, once per frame after layout, and the background work they start:
//! file dialogs, file writes (projects, autosaves, recipes, the pipeline's export) and what
//! their jobs answer.

use super::Studio;
use super::commands::{Command, Dialog, ExportFormat, Selection};
use super::dialogs::{self, DialogStart};
use super::export;
use super::graph_view::{self, visible_graph_rect};
use super::jobs::{JobError, take_finished};
use super::project::{self, Project};
use super::quantize::{Polled, Setup};
use super::theme::Theme;
use super::view::PendingView;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// What a finished write job did.
pub(super) enum Written {
    /// A project saved to `path` (the old autosave sidecar goes).
    Project { path: PathBuf, project: Box<Project> },
    /// The autosave sidecar is up to date, or why not (said in the status bar: the edit
    /// itself is not lost).
    Autosave(Result<(), String>),
    /// The recipe editor's recipe saved, or why not (said in the editor).
    Recipe(Result<PathBuf, String>),
    /// A file written; the status line says where (a view export, "Save as ONNX").
    Saved(String),
    /// The pipeline's export of the plan of edit generation `generation`.
    Exported {
        generation: u64,
        dir: PathBuf,
        files: usize,
        /// Chosen files not written, with the reason, and notes on the written ones.
        skipped: Vec<String>,
    },
}

impl Studio {
    /// Applies every queued command, in the order they were sent.
    pub(super) fn run_commands(&mut self) {
        let commands = std::mem::take(&mut self.commands);
        for c in commands {
            self.apply(c);
        }
    }

    fn apply(&mut self, c: Command) {
        match c {
            Command::Open(path) => self.open(path),
            Command::Dialog(d) => self.start_dialog(d),
            Command::Select(s) => self.selection = s,
            Command::ClearSelection => {
                self.selection = None;
                self.multi.clear();
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
            Command::ZoomBy(f) => {
                self.view.zoom = (self.view.zoom * f).clamp(graph_view::MIN_ZOOM, graph_view::MAX_ZOOM);
            }
            Command::PanBy(d) => self.view.center += d,
            Command::ZoomToSelection => {
                if let Some(r) = self.selection_rect() {
                    self.zoom_to(r, 1.2);
                }
            }
            Command::FocusSearch => self.search.focus_requested = true,
            Command::SearchStep(d) => {
                if let Some(s) = self.search.step(self.loaded.as_ref(), d) {
                    self.reveal(s);
                }
            }
            Command::Export(format, path) => match path {
                Some(p) => self.export_view(format, p),
                None => self.start_dialog(Dialog::ExportView(format)),
            },
            Command::SetDarkTheme(dark) => {
                self.settings.dark = dark;
                self.theme = Theme::new(dark);
            }
            Command::ToggleHelp => self.show_help = !self.show_help,
            Command::TogglePipeline => self.pipeline.open = !self.pipeline.open,
            Command::ToggleOptimizer => self.optimizer.open = !self.optimizer.open,
            Command::SetPass { index, enabled } => {
                if let Some(p) = self.optimizer.passes.get_mut(index) {
                    p.2 = enabled;
                }
            }
            Command::RunOptimizer => {
                self.optimizer.open = true;
                if let Some(l) = &self.loaded {
                    self.optimizer.start(l.model.clone(), self.ctx.as_ref());
                    self.status = "Optimizing…".into();
                }
            }
            Command::SetOptimizerStep(step) => {
                if let Some(l) = &self.loaded {
                    self.optimizer.set_step(&l.model, step, self.ctx.as_ref());
                }
            }
            Command::SelectAfter(n) => self.optimizer.after_selected = n,
            Command::ToggleAfterScope(s) => self.optimizer.toggle_after_scope(s),
            Command::SaveOptimizedStep => {
                if let Some((model, path)) = self.loaded.as_ref().and_then(|l| self.optimizer.save_target(l)) {
                    self.writes.spawn("save-optimized", self.ctx.as_ref(), move |_| {
                        npu_core::export::onnx::save(&model, &path)?;
                        Ok(Written::Saved(format!("Wrote {}", path.display())))
                    });
                }
            }
            Command::CloseComparison => self.optimizer.close(),
            Command::CancelOptimizer => self.optimizer.cancel(),
            Command::ToggleQuantize => self.quant.open = !self.quant.open,
            Command::SetQuantSetup(setup) => self.quant.setup = setup,
            Command::StartQuantization => {
                self.quant.open = true;
                self.start_quantization();
            }
            Command::CancelQuantization => self.quant.cancel(),
            Command::Resimulate => {
                let ctx = self.ctx.clone();
                self.quant.resimulate(ctx);
            }
            Command::CancelResimulation => {
                if let Some(s) = &self.quant.session {
                    s.cancel_full();
                }
            }
            Command::RunAnalysis(kind, target_db) => {
                let ctx = self.ctx.clone();
                // The mixed-precision search weighs latency on the Compile stage's target.
                let npu = self.compile.chosen().cloned();
                if let Some(s) = &mut self.quant.session {
                    s.start_job(kind, target_db, npu, ctx);
                }
            }
            Command::CancelAnalysis => {
                if let Some(s) = &mut self.quant.session {
                    s.cancel_job();
                }
            }
            Command::ApplyParetoPoint(k) => self.quant.apply_pareto_point(k),
            Command::SetPrecision(nodes, p) => self.quant.set_precision(&nodes, p),
            Command::SetRules(rules) => {
                self.quant.rules = rules;
                self.quant.dirty = true;
            }
            Command::ApplyRules => self.quant.apply_rules(),
            Command::LoadRecipe(path) => self.quant.load_recipe(&path),
            Command::SaveRecipe(path) => self.save_recipe(path),
            Command::RemoveOverride(name) => {
                let mut layers = self.quant.layers().clone();
                layers.remove(&name);
                self.quant.apply_layers(layers);
            }
            Command::Undo => self.quant.undo(),
            Command::Redo => self.quant.redo(),
            Command::SaveProject(path) => self.save_project(path),
            Command::OpenProject(path) => match Project::load(&path) {
                Ok(p) => {
                    self.project_path = Some(path);
                    let model = p.model.clone();
                    self.pending_project = Some(p);
                    self.open(model);
                }
                Err(e) => self.error = Some(e),
            },
            Command::RecoverEdits => self.recover_edits(),
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
            Command::ExportPlan => self.export_plan(),
            Command::RunCompile => {
                let file = self
                    .loaded
                    .as_ref()
                    .and_then(|l| Some((l.model.clone(), l.program.clone()?)));
                let r = match (&self.quant.session, file) {
                    (Some(s), _) => self.compile.start(s, self.ctx.as_ref()),
                    // A quantized file without a plan of ours: its own integer program.
                    (None, Some((model, program))) => self.compile.start_file(&model, &program, self.ctx.as_ref()),
                    (None, None) => Err("nothing to compile: run the calibration first".into()),
                };
                if let Err(e) = r {
                    self.error = Some(format!("Compile failed: {e}"));
                }
            }
            Command::CancelCompile => self.compile.cancel(),
            Command::RunEmulate => {
                let r = match (&self.quant.session, &self.compile.result, &self.loaded) {
                    (_, Some(c), Some(l)) if c.from_file => {
                        self.emulate
                            .start_file(&l.model, &self.quant.setup, c, self.ctx.as_ref())
                    }
                    (Some(s), Some(c), _) => self.emulate.start(s, c, self.ctx.as_ref()),
                    _ => Err("nothing to emulate: compile first".into()),
                };
                if let Err(e) = r {
                    self.error = Some(format!("Emulate failed: {e}"));
                }
            }
            Command::CancelEmulate => self.emulate.cancel(),
            Command::SetTarget(id) => {
                self.compile.target = id;
                self.quant.dirty = true;
            }
            Command::ForceCpu(nodes, on) => {
                for n in nodes {
                    if on {
                        self.compile.force_cpu.insert(n);
                    } else {
                        self.compile.force_cpu.remove(&n);
                    }
                }
                self.quant.dirty = true;
            }
            Command::ShowPlacement(on) => self.compile.show_placement = on,
            Command::ShowLatency(on) => {
                self.compile.colour_by_latency = on;
                if on {
                    self.compile.show_placement = true;
                }
            }
            Command::WriteBinary(path) => match (path, &self.compile.result) {
                (_, None) => self.error = Some("Nothing to write: compile first (the Compile stage's Run)".into()),
                (None, Some(_)) => self.start_dialog(Dialog::WriteBinary),
                (Some(p), Some(r)) => match super::compile::write_binary(r, &p) {
                    Ok(line) => self.status = line,
                    Err(e) => self.error = Some(e),
                },
            },
            Command::ShowCompileReport(on) => self.compile.report_open = on,
            Command::SetExportDir(d) => {
                self.status = format!("Export writes to {}", d.display());
                self.pipeline.export_dir = Some(d);
            }
            Command::SetExportFormats(f) => self.pipeline.formats = f,
            Command::CancelOpen => {
                if let Some(j) = &self.open_job {
                    j.cancel();
                }
            }
            Command::CancelJobs => {
                if let Some(j) = &self.open_job {
                    j.cancel();
                }
                if let Some(j) = &self.layout_job {
                    j.cancel();
                }
                self.optimizer.cancel();
                self.quant.cancel();
            }
            Command::DismissError => self.error = None,
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

    /// After the first simulation: when the cards are too small to read, the worst layer
    /// (lowest cumulative SQNR) is brought into view at a readable zoom and selected; the
    /// status line says which it is and how to see the whole graph again.
    fn show_worst_layer(&mut self) {
        let Some((n, db)) = self.quant.worst_layer() else {
            return;
        };
        let Some(name) = self.loaded.as_ref().map(|l| l.model.graph.nodes[n].label()) else {
            return;
        };
        if self.view.zoom < graph_view::BOX_ONLY_BELOW {
            self.reveal(Selection::Node(n));
            self.status = format!(
                "Simulated: the worst layer, {name} ({db:.1} dB cumulative), is in view; F fits the whole graph, the panel lists the others"
            );
        } else {
            self.status = format!(
                "Simulated: the worst layer is {name} ({db:.1} dB cumulative); the panel lists the worst layers, click one to go there"
            );
        }
    }

    /// Applies the edits found in the autosave file (calibrating first when needed).
    fn recover_edits(&mut self) {
        let Some(p) = self.recovery.take() else { return };
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

    fn start_dialog(&mut self, dialog: Dialog) {
        if self.dialog_job.is_some() {
            return;
        }
        let start = DialogStart {
            dir: self
                .loaded
                .as_ref()
                .and_then(|l| l.path.parent().map(Path::to_path_buf)),
            stem: self.loaded.as_ref().map(super::document::Loaded::stem),
        };
        self.dialog_job = Some(dialogs::spawn(dialog, start, self.ctx.as_ref()));
    }

    /// What a closed dialog asks for next.
    fn dialog_closed(&mut self, dialog: Dialog, picked: Option<PathBuf>) {
        let Some(p) = picked else {
            self.status = match dialog {
                Dialog::Samples { then_calibrate: true } => "Choose a folder of samples in the Quantize panel first",
                _ => "No file chosen",
            }
            .into();
            return;
        };
        match dialog {
            Dialog::OpenModel => self.send(Command::Open(p)),
            Dialog::OpenProject => self.send(Command::OpenProject(p)),
            Dialog::SaveProject => self.send(Command::SaveProject(Some(p))),
            Dialog::ExportView(f) => self.send(Command::Export(f, Some(p))),
            Dialog::Samples { then_calibrate } => {
                self.send(Command::SetQuantSetup(Setup {
                    data: p.display().to_string(),
                    ..self.quant.setup.clone()
                }));
                if then_calibrate {
                    self.send(Command::StartQuantization);
                }
            }
            Dialog::RecipeFile => self.quant.recipe_path = p.display().to_string(),
            Dialog::ExportFolder => self.send(Command::SetExportDir(p)),
            Dialog::WriteBinary => self.send(Command::WriteBinary(Some(p))),
        }
    }

    fn export_view(&mut self, format: ExportFormat, path: PathBuf) {
        let Some(l) = &self.loaded else {
            self.error = Some("Nothing to export: no model is open".into());
            return;
        };
        match format {
            ExportFormat::Svg => {
                let visible = visible_graph_rect(self.canvas_rect, &self.view);
                let svg = export::svg(&l.doc, &l.scene, visible, &self.theme);
                self.writes.spawn("export-view", self.ctx.as_ref(), move |_| {
                    Ok(Written::Saved(export::write_svg(&path, &svg)?))
                });
            }
            ExportFormat::Png => {
                if let Some(ctx) = &self.ctx {
                    self.export.request_png(ctx, path, self.canvas_rect);
                }
            }
        }
    }

    /// The Compile stage's choices, with node names of the open model.
    fn compile_choice(&self) -> super::project::CompileChoice {
        let names = self.loaded.as_ref().map(|l| &l.model.graph.nodes);
        super::project::CompileChoice {
            target: Some(self.compile.target.clone()).filter(|t| !t.is_empty()),
            force_cpu: self
                .compile
                .force_cpu
                .iter()
                .filter_map(|&n| names.and_then(|g| g.get(n)).map(|x| x.name.clone()))
                .collect(),
        }
    }

    /// The project as it stands: the model, the setup the plan was calibrated with, the
    /// edits and the rules.
    fn project_parts(
        &self,
    ) -> Option<(
        PathBuf,
        Setup,
        super::quantize::Edits,
        Vec<npu_core::quant::recipe::Rule>,
    )> {
        let l = self.loaded.as_ref()?;
        Some((
            l.path.clone(),
            self.quant.project_setup(),
            self.quant.project_edits(),
            self.quant.rules.clone(),
        ))
    }

    fn save_project(&mut self, path: Option<PathBuf>) {
        let Some((model, setup, edits, rules)) = self.project_parts() else {
            self.error = Some("Nothing to save: no model is open".into());
            return;
        };
        let Some(path) = path.or_else(|| self.project_path.clone()) else {
            self.start_dialog(Dialog::SaveProject);
            return;
        };
        let choice = self.compile_choice();
        self.writes.spawn("save-project", self.ctx.as_ref(), move |_| {
            let project = Project::new(&model, &setup, &edits, &rules)
                .map(|p| p.with_compile(choice))
                .and_then(|p| {
                    p.save(&path)?;
                    Ok(p)
                })
                .map_err(|e| JobError::Failed(format!("Could not save the project: {e}")))?;
            Ok(Written::Project {
                path,
                project: Box::new(project),
            })
        });
    }

    /// Writes every project edit to the sidecar autosave file (atomically, in the
    /// background; one autosave at a time, the newest state last).
    pub(super) fn autosave(&mut self) {
        if !self.quant.dirty || self.writes.running("autosave").is_some() {
            return;
        }
        self.quant.dirty = false;
        let Some(l) = &self.loaded else { return };
        let side = project::autosave_path(self.project_path.as_deref(), &l.path, self.autosave_dir.as_deref());
        let Some((model, setup, edits, rules)) = self.project_parts() else {
            return;
        };
        let choice = self.compile_choice();
        self.writes.spawn("autosave", self.ctx.as_ref(), move |_| {
            let r = Project::new(&model, &setup, &edits, &rules).and_then(|p| p.with_compile(choice).save(&side));
            Ok(Written::Autosave(r))
        });
    }

    fn save_recipe(&mut self, path: PathBuf) {
        if path.as_os_str().is_empty() {
            self.quant.rules_note = Some("type a recipe file name first".into());
            return;
        }
        let text = self.quant.recipe().to_ron();
        self.writes.spawn("save-recipe", self.ctx.as_ref(), move |_| {
            let r = npu_core::export::write_atomic(&path, text.as_bytes())
                .map(|()| path.clone())
                .map_err(|e| format!("{}: {e}", path.display()));
            Ok(Written::Recipe(r))
        });
    }

    /// The pipeline's Export stage: the optimized graph, the plan and its report.
    fn export_plan(&mut self) {
        let Some(l) = &self.loaded else { return };
        let Some(dir) = self.pipeline.export_dir(Some(l)) else {
            return;
        };
        let Some(s) = &self.quant.session else {
            self.error = Some("Export failed: nothing to export: run the calibration first".into());
            return;
        };
        let (Some(m), Some(r)) = (&s.mapping, &s.result) else {
            self.error = Some("Export failed: nothing to export yet: the simulation has not finished".into());
            return;
        };
        let (optimized, plan, report) = (m.optimized.clone(), r.plan.clone(), r.report.clone());
        let (generation, stem, formats) = (s.generation(), l.stem(), self.pipeline.formats);
        // The report's placement section: the compile of this very plan, if there is one.
        let compiled = self
            .compile
            .result
            .as_ref()
            .filter(|c| c.generation == generation)
            .map(|c| c.compiled.clone());
        let file = l.path.display().to_string();
        self.writes.spawn("export-plan", self.ctx.as_ref(), move |p| {
            let study = formats.report.then(|| {
                let mut r = npu_core::report::StudyReport::new(
                    npu_core::report::ModelSummary::of(&optimized, &file, &plan.input_shapes),
                    &plan,
                    &report,
                    None,
                    None,
                    compiled.as_deref(),
                );
                r.graph = crate::graph::picture::picture(&optimized, &r);
                r
            });
            let bundle =
                npu_core::pipeline::export_bundle(&optimized, &plan, &report, &dir, &stem, formats, study.as_ref(), p)
                    .map_err(|e| JobError::Failed(format!("Export failed: {e}")))?;
            Ok(Written::Exported {
                generation,
                dir,
                files: bundle.files.len(),
                skipped: bundle.skipped.into_iter().chain(bundle.notes).collect(),
            })
        });
    }

    /// Takes what every background job answered.
    pub(super) fn poll_jobs(&mut self) {
        let original = self.loaded.as_ref().map(|l| l.model.clone());
        for note in self.optimizer.poll(original.as_ref(), self.ctx.as_ref()) {
            match note {
                Ok(status) => self.status = status,
                Err(e) => self.error = Some(e),
            }
        }
        match self.quant.poll() {
            Polled::Ended(JobError::Cancelled) => self.status = "Quantization cancelled".into(),
            Polled::Ended(JobError::Failed(e)) => self.error = Some(format!("Quantization failed: {e}")),
            Polled::FirstResult => {
                self.show_worst_layer();
                if let Some(s) = &self.quant.session {
                    self.compile.follow_first_simulation(s, self.ctx.as_ref());
                }
            }
            Polled::Nothing => {}
        }
        self.poll_document_jobs();
        self.inspector.poll();
        match self.compile.poll() {
            Some(Ok(super::compile::Note::Replace(line))) => self.status = line,
            Some(Ok(super::compile::Note::Append(more))) => self.status = format!("{}; {more}", self.status),
            Some(Err(e)) => self.error = Some(e),
            None => {}
        }
        match self.emulate.poll(self.quant.show_timings) {
            Some(Ok(line)) => {
                self.status = line;
                // A quantized file's first emulation paints its per-tensor SQNR (against
                // the file's float graph): the heatmap a plan's simulation would give.
                if self.quant.session.is_none()
                    && self.quant.overlay == super::quantize::Overlay::CumulativeSqnr
                    && self.emulate.result.as_ref().is_some_and(|r| r.from_file)
                {
                    self.quant.overlay = super::quantize::Overlay::EmulatedSqnr;
                }
            }
            Some(Err(e)) => self.error = Some(e),
            None => {}
        }
        // A quantized file's compile and emulation follow the target and the overrides.
        if self.quant.session.is_none()
            && let Some(l) = &self.loaded
            && let Some(program) = &l.program
            && self.compile.file_wants_update()
        {
            let (model, program) = (l.model.clone(), program.clone());
            self.compile.update_file(&model, &program, self.ctx.as_ref());
        }
        if let (Some(l), Some(c)) = (&self.loaded, &self.compile.result)
            && c.from_file
            && !self.compile.busy()
            && self.emulate.wants_update(c)
            && let Err(e) = self
                .emulate
                .start_file(&l.model, &self.quant.setup, c, self.ctx.as_ref())
        {
            self.error = Some(format!("Emulate failed: {e}"));
        }
        // An emulation follows its compile (a precision edit, another target) by itself.
        if let (Some(s), Some(c)) = (&self.quant.session, &self.compile.result)
            && !self.compile.busy()
            && self.emulate.wants_update(c)
            && let Err(e) = self.emulate.start(s, c, self.ctx.as_ref())
        {
            self.error = Some(format!("Emulate failed: {e}"));
        }
        // Keep the compile current as the plan, target or overrides change (not while the
        // calibration is stale: its plan is about to be replaced).
        if let Some(s) = &self.quant.session
            && !s.updating()
            && s.setup == self.quant.setup
            && s.passes == self.optimizer.enabled()
            && self.compile.wants_update(s)
        {
            self.compile.update(s, self.ctx.as_ref());
        }
        match take_finished(&mut self.dialog_job) {
            Some(Ok((dialog, picked))) => self.dialog_closed(dialog, picked),
            Some(Err(e)) => self.error = Some(e.to_string()),
            None => {}
        }
        if let Some(shot) = self.export.poll() {
            self.writes.spawn("export-view", self.ctx.as_ref(), move |_| {
                Ok(Written::Saved(shot.write()?))
            });
        }
        for w in self.writes.finished() {
            match w {
                Ok(Written::Project { path, project }) => {
                    if let Some(l) = &self.loaded {
                        let old =
                            project::autosave_path(self.project_path.as_deref(), &l.path, self.autosave_dir.as_deref());
                        let _ = std::fs::remove_file(old);
                    }
                    self.status = format!("Project saved to {}", path.display());
                    self.project_path = Some(path);
                    self.saved_project = Some(*project);
                }
                Ok(Written::Autosave(Err(e))) => self.status = format!("Autosave failed: {e}"),
                Ok(Written::Saved(status)) => self.status = status,
                Ok(Written::Recipe(r)) => {
                    self.quant.rules_note = Some(match r {
                        Ok(path) => format!("saved to {}", path.display()),
                        Err(e) => e,
                    });
                }
                Ok(Written::Exported {
                    generation,
                    dir,
                    files,
                    skipped,
                }) => {
                    self.status = format!("Exported {files} files to {}", dir.display());
                    for s in &skipped {
                        self.status.push_str("; ");
                        self.status.push_str(s.chars().take(160).collect::<String>().as_str());
                    }
                    self.quant.exported = Some((generation, dir));
                }
                Ok(Written::Autosave(Ok(()))) | Err(JobError::Cancelled) => {}
                Err(JobError::Failed(e)) => self.error = Some(e),
            }
        }
    }
}
