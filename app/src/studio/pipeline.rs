//! The pipeline panel: the stages from import to export in one row, each with its status, a
//! run button, a progress bar while it runs and a cancel button. Statuses are derived from
//! the studio's state every frame, so a stage whose inputs changed since it ran (the model
//! file, the optimizer's passes, the calibration setup, a precision edit) shows stale at once.

use super::commands::{Command, Dialog};
use super::document::Loaded;
use super::jobs::JobProgress;
use super::optimize::OptimizerState;
use super::quantize::{QuantView, Session, db};
use super::theme::Theme;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Import,
    Optimize,
    Calibrate,
    Simulate,
    Compile,
    Emulate,
    Export,
}

impl Stage {
    pub const ALL: [Self; 7] = [
        Self::Import,
        Self::Optimize,
        Self::Calibrate,
        Self::Simulate,
        Self::Compile,
        Self::Emulate,
        Self::Export,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::Import => "Import",
            Self::Optimize => "Optimize",
            Self::Calibrate => "Calibrate",
            Self::Simulate => "Simulate",
            Self::Compile => "Compile",
            Self::Emulate => "Emulate",
            Self::Export => "Export",
        }
    }
}

/// Where a stage stands.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    /// Not run; what it waits for.
    Waiting(String),
    Running(f32, String),
    Done(String),
    /// Ran, but an input changed since: why.
    Stale(String),
    /// This build cannot run it: why.
    Unavailable(String),
}

impl Status {
    pub fn word(&self) -> &'static str {
        match self {
            Self::Waiting(_) => "not run",
            Self::Running(..) => "running",
            Self::Done(_) => "done",
            Self::Stale(_) => "stale",
            Self::Unavailable(_) => "unavailable",
        }
    }

    fn detail(&self) -> &str {
        match self {
            Self::Waiting(s) | Self::Done(s) | Self::Stale(s) | Self::Unavailable(s) | Self::Running(_, s) => s,
        }
    }
}

/// The panel's own state.
#[derive(Default)]
pub struct PipelineState {
    pub open: bool,
    /// Where Export writes (default: `<model>_export` next to the model).
    pub export_dir: Option<PathBuf>,
    /// The deployable files Export writes beside the graph, plan and report.
    pub formats: npu_core::pipeline::BundleFormats,
}

impl PipelineState {
    /// The folder Export writes to.
    pub fn export_dir(&self, loaded: Option<&Loaded>) -> Option<PathBuf> {
        if let Some(d) = &self.export_dir {
            return Some(d.clone());
        }
        let l = loaded?;
        Some(l.path.with_file_name(format!("{}_export", l.stem())))
    }
}

/// What the row reads of the rest of the studio.
pub struct PipelineCx<'a> {
    pub loaded: Option<&'a Loaded>,
    /// The model being opened.
    pub opening: Option<&'a JobProgress>,
    pub optimizer: &'a OptimizerState,
    pub quant: &'a QuantView,
    /// The export being written.
    pub exporting: Option<&'a JobProgress>,
    /// Where Export writes and what.
    pub export_dir: Option<PathBuf>,
    pub formats: npu_core::pipeline::BundleFormats,
    pub compile: &'a super::compile::CompileState,
    pub emulate: &'a super::emulate::EmulateState,
}

/// Why stages are stale, worked out once per frame (one look at the model file).
struct Staleness {
    /// The model file changed on disk since it was opened.
    import: Option<String>,
    /// The calibration's inputs changed since it ran.
    calibration: Option<String>,
}

impl Staleness {
    fn of(st: &PipelineCx<'_>) -> Self {
        let import = st.loaded.and_then(|l| {
            let now = std::fs::metadata(&l.path).and_then(|m| m.modified()).ok();
            (now != l.modified).then(|| "the file changed on disk: run to reopen it".to_string())
        });
        let calibration = st.quant.session.as_ref().and_then(|s| {
            if import.is_some() {
                import.clone()
            } else if s.setup != st.quant.setup {
                Some("the samples, preprocessing or preset changed".into())
            } else if s.passes != st.optimizer.enabled() {
                Some("the optimizer's passes changed".into())
            } else {
                None
            }
        });
        Self { import, calibration }
    }
}

/// Where a stage stands now.
pub fn status(st: &PipelineCx<'_>, stage: Stage) -> Status {
    status_with(st, stage, &Staleness::of(st))
}

fn status_with(st: &PipelineCx<'_>, stage: Stage, stale: &Staleness) -> Status {
    let session = st.quant.session.as_ref();
    let simulating = session.is_some_and(|s| s.simulating.load(std::sync::atomic::Ordering::Relaxed));
    match stage {
        Stage::Import => {
            if let Some(p) = st.opening {
                let (f, what) = p.fraction();
                Status::Running(f, what)
            } else if let Some(l) = st.loaded {
                stale.import.clone().map_or_else(
                    || Status::Done(format!("{} nodes", l.model.graph.nodes.len())),
                    Status::Stale,
                )
            } else {
                Status::Waiting("open a model".into())
            }
        }
        Stage::Optimize => {
            if let Some((f, what)) = st.optimizer.progress() {
                return Status::Running(f, what);
            }
            let Some(l) = st.loaded else {
                return Status::Waiting("needs a model".into());
            };
            let before = l.model.graph.nodes.len();
            if let Some(r) = &st.optimizer.run {
                if r.passes != st.optimizer.enabled() {
                    return Status::Stale("the pass selection changed".into());
                }
                return stale.import.clone().map_or_else(
                    || {
                        Status::Done(format!(
                            "{before} → {} nodes, {} rewrites",
                            r.nodes_after,
                            r.patches.len()
                        ))
                    },
                    Status::Stale,
                );
            }
            match session.and_then(|s| s.mapping.as_ref()) {
                Some(m) if session.is_some_and(|s| s.passes == st.optimizer.enabled()) => Status::Done(format!(
                    "{before} → {} nodes (for calibration)",
                    m.optimized.graph.nodes.len()
                )),
                _ => Status::Waiting(format!("{} passes enabled", st.optimizer.enabled().len())),
            }
        }
        Stage::Calibrate => match session {
            Some(s) if s.starting() && !simulating => {
                let (f, what) = s.progress.fraction();
                Status::Running(f, what)
            }
            Some(s) => stale.calibration.clone().map_or_else(
                || {
                    let n = s.result.as_ref().map_or(0, |r| r.plan.calibration_samples);
                    Status::Done(format!("{} on {n} samples", s.setup.preset))
                },
                Status::Stale,
            ),
            None if st.loaded.is_none() => Status::Waiting("needs a model".into()),
            // A quantized file: compile and emulate take its own program; calibrating
            // makes a plan of ours from its float graph instead.
            None if let Some(p) = st.loaded.and_then(|l| l.program.as_ref()) => {
                Status::Done(format!("in the file: {} integer ops", p.ops.len()))
            }
            None if st.quant.setup.data.is_empty() => Status::Waiting("asks for a folder of samples".into()),
            None => Status::Waiting("ready".into()),
        },
        Stage::Simulate => match session {
            Some(s) if s.starting() => {
                if simulating {
                    let (f, what) = s.progress.fraction();
                    Status::Running(f, what)
                } else {
                    Status::Waiting("after calibration".into())
                }
            }
            Some(s) if s.full.is_some() => {
                let (f, what) = s.full.as_ref().map(|(_, p)| p.fraction()).unwrap_or_default();
                Status::Running(f, what)
            }
            Some(s) if s.updating() => Status::Running(0.0, "after an edit".into()),
            Some(s) => {
                if stale.calibration.is_some() {
                    return Status::Stale("the calibration is stale".into());
                }
                let r = s.result.as_ref().map(|r| &r.report);
                let out = r
                    .and_then(|r| {
                        r.outputs
                            .iter()
                            .map(|o| o.sqnr_db)
                            .min_by(|a, b| a.unwrap_or(f64::INFINITY).total_cmp(&b.unwrap_or(f64::INFINITY)))
                    })
                    .flatten();
                Status::Done(format!(
                    "output {}, {} samples",
                    db(out),
                    r.map_or(0, |r| r.eval_samples)
                ))
            }
            None if st.loaded.is_some_and(|l| l.program.is_some()) => {
                Status::Waiting("the file's program: Emulate measures it".into())
            }
            None => Status::Waiting("needs calibration".into()),
        },
        Stage::Compile => {
            let c = st.compile;
            if let Err(e) = &c.targets {
                return Status::Unavailable(format!("no targets: {e}"));
            }
            if let Some(p) = c.progress() {
                let (f, what) = p.fraction();
                return Status::Running(f, what);
            }
            let file = session.is_none() && st.loaded.is_some_and(|l| l.program.is_some());
            let now = session
                .and_then(|s| s.result.as_ref().map(|r| r.generation))
                .or(file.then_some(super::compile::FILE_GENERATION));
            match (&c.result, now) {
                (Some(r), Some(g)) => {
                    if r.generation != g || stale.calibration.is_some() {
                        Status::Stale("the plan changed since the compile".into())
                    } else if r.target != c.target {
                        Status::Stale(format!("the target is now {}", c.target))
                    } else if r.forced != c.force_cpu {
                        Status::Stale("the nodes kept on the CPU changed".into())
                    } else {
                        let t = &r.compiled.totals;
                        Status::Done(format!(
                            "{}: {}/{} ops on NPU, {:.3} ms",
                            r.target, t.ops_on_npu, t.ops_total, t.latency_ms
                        ))
                    }
                }
                (None, Some(_)) if file => Status::Waiting(format!("ready: the file's own program ({})", c.target)),
                (None, Some(_)) => Status::Waiting(format!("ready ({})", c.target)),
                _ => Status::Waiting("needs a simulated plan".into()),
            }
        }
        Stage::Emulate => {
            if let Some(p) = st.emulate.progress() {
                let (f, what) = p.fraction();
                return Status::Running(f, what);
            }
            let compile_stale = matches!(status_with(st, Stage::Compile, stale), Status::Stale(_));
            match (st.emulate.status(st.compile.result.as_ref()), &st.compile.result) {
                (Some(Ok(_)), _) if compile_stale => Status::Stale("its compile is stale".into()),
                (Some(Ok(line)), _) => Status::Done(line),
                (Some(Err(why)), _) => Status::Stale(why),
                (None, Some(c)) => Status::Waiting(format!("ready (the {} binary)", c.target)),
                (None, None) => Status::Waiting("needs a compiled binary".into()),
            }
        }
        Stage::Export => {
            if let Some(p) = st.exporting {
                let (f, what) = p.fraction();
                return Status::Running(f, what);
            }
            let ready = session.and_then(|s| s.result.as_ref().map(|r| r.generation));
            match (&st.quant.exported, ready) {
                (Some((g, dir)), Some(now)) => {
                    if *g != now || stale.calibration.is_some() {
                        Status::Stale("the plan changed since the export".into())
                    } else {
                        Status::Done(format!("to {}", dir.display()))
                    }
                }
                (_, Some(_)) => Status::Waiting("ready".into()),
                _ => Status::Waiting("needs a simulated plan".into()),
            }
        }
    }
}

/// What a stage's Run button asks for.
fn run(st: &PipelineCx<'_>, stage: Stage) -> Command {
    match stage {
        Stage::Import => match st.loaded {
            Some(l) => Command::Open(l.path.clone()),
            None => Command::Dialog(Dialog::OpenModel),
        },
        Stage::Optimize => Command::RunOptimizer,
        // Under Xvfb or CI no dialog appears: the folder can be typed in the panel.
        Stage::Calibrate if st.quant.setup.data.is_empty() => Command::Dialog(Dialog::Samples { then_calibrate: true }),
        Stage::Calibrate => Command::StartQuantization,
        Stage::Simulate => Command::Resimulate,
        Stage::Compile => Command::RunCompile,
        Stage::Emulate => Command::RunEmulate,
        Stage::Export => Command::ExportPlan,
    }
}

/// What a stage's Cancel button asks for.
fn cancel(st: &PipelineCx<'_>, stage: Stage) -> Option<Command> {
    Some(match stage {
        Stage::Import => Command::CancelOpen,
        Stage::Optimize => Command::CancelOptimizer,
        Stage::Calibrate => Command::CancelQuantization,
        Stage::Simulate => match st.quant.session.as_ref() {
            Some(s) if s.full.is_some() => Command::CancelResimulation,
            _ => Command::CancelQuantization,
        },
        Stage::Compile => Command::CancelCompile,
        Stage::Emulate => Command::CancelEmulate,
        Stage::Export => return None,
    })
}

/// Whether a running stage can be cancelled: an edit's incremental update cannot (it takes
/// milliseconds); the first calibration and simulation can.
fn cancellable(st: &PipelineCx<'_>, stage: Stage) -> bool {
    match stage {
        Stage::Calibrate => st.quant.session.as_ref().is_some_and(Session::starting),
        Stage::Export => false,
        Stage::Simulate => st
            .quant
            .session
            .as_ref()
            .is_some_and(|s| s.starting() || s.full.is_some()),
        _ => true,
    }
}

/// Whether a stage's inputs are there (its run button is enabled).
fn can_run(st: &PipelineCx<'_>, stage: Stage, status: &Status, stale: &Staleness) -> bool {
    let ready = st.quant.session.as_ref().is_some_and(|s| s.result.is_some());
    match stage {
        _ if matches!(status, Status::Running(..) | Status::Unavailable(_)) => false,
        Stage::Import => true,
        Stage::Optimize | Stage::Calibrate => st.loaded.is_some(),
        // A stale calibration needs Run calibrate, not another simulation.
        Stage::Simulate => ready && stale.calibration.is_none(),
        Stage::Export => ready,
        Stage::Compile => {
            let file = st.quant.session.is_none() && st.loaded.is_some_and(|l| l.program.is_some());
            (ready || file) && st.compile.targets.is_ok() && stale.calibration.is_none()
        }
        Stage::Emulate => st.compile.result.is_some() && !st.compile.busy(),
    }
}

/// The Export card's menu: the deployable formats and the destination folder.
fn export_menu(ui: &mut egui::Ui, st: &PipelineCx<'_>, out: &mut Vec<Command>) {
    ui.menu_button(egui::RichText::new("Formats").small(), |ui| {
        let mut f = st.formats;
        ui.checkbox(&mut f.tflite, "TFLite (.int8.tflite, .int16.tflite with 16-bit layers)")
            .on_hover_text("A fully quantized int8 TFLite model, when every layer has an integer form");
        ui.checkbox(&mut f.qdq, "QDQ ONNX (.qdq.onnx)")
            .on_hover_text("The optimized graph with QuantizeLinear/DequantizeLinear pairs");
        ui.checkbox(&mut f.report, "HTML report (.report.html, .json, .csv)")
            .on_hover_text(
                "One self-contained page: model, recipe, per-layer SQNR (sortable), plots, the graph heatmap, \
             and the placement and latency of the current compile",
            );
        if f != st.formats {
            out.push(Command::SetExportFormats(f));
        }
        ui.separator();
        let dir = st
            .export_dir
            .as_ref()
            .map_or_else(|| "next to the model".into(), |d| d.display().to_string());
        ui.label(egui::RichText::new(format!("Destination: {dir}")).small());
        if ui.button("Choose destination…").clicked() {
            out.push(Command::Dialog(Dialog::ExportFolder));
            ui.close();
        }
    });
}

/// A checkbox of a menu: its state, label, hover text and the command it sends.
type Toggle = (bool, &'static str, &'static str, fn(bool) -> Command);

/// The Compile card's menu: the target and the placement overlay.
fn target_menu(ui: &mut egui::Ui, st: &PipelineCx<'_>, out: &mut Vec<Command>) {
    ui.menu_button(egui::RichText::new("Target").small(), |ui| {
        if let Ok(targets) = &st.compile.targets {
            for t in targets {
                let label = format!("{} — {}", t.id, t.name);
                if ui
                    .radio(st.compile.target == t.id, label)
                    .on_hover_text(&t.description)
                    .clicked()
                {
                    out.push(Command::SetTarget(t.id.clone()));
                }
            }
        }
        ui.separator();
        let compiled = st.compile.result.is_some();
        let toggles: [Toggle; 3] = [
            (
                st.compile.show_placement,
                "Show placement on the graph",
                "NPU and CPU colours and each node's estimated latency",
                Command::ShowPlacement,
            ),
            (
                st.compile.colour_by_latency,
                "Colour by latency",
                "Each node coloured by its estimated time, red for the slowest; its share of the total in the badge",
                Command::ShowLatency,
            ),
            (
                st.compile.report_open,
                "Show the compile report",
                "Latency per op, activation memory over the schedule, the roofline",
                Command::ShowCompileReport,
            ),
        ];
        for (mut on, label, hover, command) in toggles {
            if ui
                .add_enabled(compiled, egui::Checkbox::new(&mut on, label))
                .on_hover_text(hover)
                .changed()
            {
                out.push(command(on));
            }
        }
        ui.separator();
        if ui
            .add_enabled(compiled, egui::Button::new("Write binary (.npub)…"))
            .on_hover_text(
                "The deployable binary of this compile: weights, command stream, host ops (docs/binary-format.md)",
            )
            .clicked()
        {
            out.push(Command::WriteBinary(None));
            ui.close();
        }
    });
}

/// The pipeline row.
pub fn panel_ui(ui: &mut egui::Ui, st: &PipelineCx<'_>, theme: &Theme, out: &mut Vec<Command>) {
    let stale = Staleness::of(st);
    let statuses: Vec<(Stage, Status)> = Stage::ALL.iter().map(|&s| (s, status_with(st, s, &stale))).collect();
    let mut clicked_run = None;
    let mut clicked_cancel = None;
    let gap = ui.spacing().item_spacing.x;
    let width = ((ui.available_width() - 6.0 * (10.0 + 2.0 * gap)) / 7.0 - 1.0).max(110.0);
    ui.horizontal(|ui| {
        for (k, (stage, status)) in statuses.iter().enumerate() {
            if k > 0 {
                ui.label("›");
            }
            let colour = match status {
                Status::Done(_) => theme.quant.high,
                Status::Stale(_) => theme.quant.mid,
                Status::Running(..) => theme.selected,
                Status::Waiting(_) | Status::Unavailable(_) => theme.text_weak,
            };
            ui.allocate_ui_with_layout(
                egui::vec2(width, 78.0),
                egui::Layout::top_down(egui::Align::Min),
                |ui| {
                    ui.set_width(width);
                    egui::Frame::group(ui.style()).show(ui, |ui| {
                        ui.set_width(width - 14.0);
                        ui.horizontal(|ui| {
                            let (r, _) = ui.allocate_exact_size(egui::vec2(10.0, 10.0), egui::Sense::hover());
                            ui.painter().circle_filled(r.center(), 5.0, colour);
                            ui.strong(stage.label());
                            ui.label(status.word());
                        });
                        let detail = match status {
                            Status::Running(..) => "",
                            other => other.detail(),
                        };
                        ui.add(egui::Label::new(egui::RichText::new(detail).small().weak()).truncate())
                            .on_hover_text(detail);
                        match status {
                            Status::Running(f, what) => {
                                // As tall as the small Run button it replaces: the row keeps
                                // its height while a stage runs.
                                let h = ui.text_style_height(&egui::TextStyle::Button);
                                ui.spacing_mut().interact_size.y = h;
                                ui.horizontal(|ui| {
                                    ui.add(
                                        egui::ProgressBar::new(*f)
                                            .desired_width(width - 90.0)
                                            .desired_height(h)
                                            .text(what.clone())
                                            .animate(true),
                                    );
                                    if cancellable(st, *stage)
                                        && ui
                                            .small_button(format!("Cancel {}", stage.label().to_lowercase()))
                                            .clicked()
                                    {
                                        clicked_cancel = Some(*stage);
                                    }
                                });
                            }
                            other => {
                                ui.horizontal(|ui| {
                                    if ui
                                        .add_enabled(
                                            can_run(st, *stage, other, &stale),
                                            egui::Button::new(format!("Run {}", stage.label().to_lowercase())).small(),
                                        )
                                        .clicked()
                                    {
                                        clicked_run = Some(*stage);
                                    }
                                    if *stage == Stage::Export {
                                        export_menu(ui, st, out);
                                    }
                                    if *stage == Stage::Compile {
                                        target_menu(ui, st, out);
                                    }
                                });
                            }
                        }
                    });
                },
            );
        }
    });
    out.extend(clicked_cancel.and_then(|s| cancel(st, s)));
    out.extend(clicked_run.map(|s| run(st, s)));
}
