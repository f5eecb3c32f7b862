//! The pipeline panel: the stages from import to export in one row, each with its status, a
//! run button, a progress bar while it runs and a cancel button. Statuses are derived from
//! the studio's state every frame, so a stage whose inputs changed since it ran (the model
//! file, the optimizer's passes, the calibration setup, a precision edit) shows stale at once.

use super::Studio;
use super::commands::Command;
use std::path::{Path, PathBuf};

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
}

/// Why stages are stale, worked out once per frame (one look at the model file).
struct Staleness {
    /// The model file changed on disk since it was opened.
    import: Option<String>,
    /// The calibration's inputs changed since it ran.
    calibration: Option<String>,
}

impl Staleness {
    fn of(st: &Studio) -> Self {
        let import = st.loaded.as_ref().and_then(|l| {
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

pub fn status(st: &Studio, stage: Stage) -> Status {
    status_with(st, stage, &Staleness::of(st))
}

fn status_with(st: &Studio, stage: Stage, stale: &Staleness) -> Status {
    let session = st.quant.session.as_ref();
    let simulating = session.is_some_and(|s| s.simulating.load(std::sync::atomic::Ordering::Relaxed));
    match stage {
        Stage::Import => {
            if let Some(j) = &st.open_job {
                let (f, what) = j.progress.fraction();
                Status::Running(f, what)
            } else if let Some(l) = &st.loaded {
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
            let Some(l) = &st.loaded else {
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
                    super::quantize::db(out),
                    r.map_or(0, |r| r.eval_samples)
                ))
            }
            None => Status::Waiting("needs calibration".into()),
        },
        Stage::Compile => Status::Unavailable("no NPU compiler in this build yet".into()),
        Stage::Emulate => Status::Unavailable("needs a compiled NPU binary".into()),
        Stage::Export => {
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

/// The folder Export writes to.
pub fn export_dir(st: &Studio) -> Option<PathBuf> {
    if let Some(d) = &st.pipeline.export_dir {
        return Some(d.clone());
    }
    let l = st.loaded.as_ref()?;
    let stem = l.path.file_stem()?.to_string_lossy().into_owned();
    Some(l.path.with_file_name(format!("{stem}_export")))
}

/// Writes the optimized model (ONNX), the current quantization plan (RON) and its error
/// report (JSON) into `dir`, each atomically. Returns the files written.
pub fn export(st: &Studio, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let l = st.loaded.as_ref().ok_or("no model is open")?;
    let s = st
        .quant
        .session
        .as_ref()
        .ok_or("nothing to export: run the calibration first")?;
    let (Some(m), Some(r)) = (&s.mapping, &s.result) else {
        return Err("nothing to export yet: the simulation has not finished".into());
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let stem = l
        .path
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    let onnx = dir.join(format!("{stem}.optimized.onnx"));
    // (`save` writes the fused forms onnxruntime lacks as their ONNX equivalents.)
    npu_core::export::onnx::save(&m.optimized, &onnx).map_err(|e| e.to_string())?;
    let plan = dir.join(format!("{stem}.quant.ron"));
    let text = ron::ser::to_string_pretty(&r.plan, ron::ser::PrettyConfig::default()).map_err(|e| e.to_string())?;
    npu_core::export::write_atomic(&plan, text.as_bytes()).map_err(|e| format!("{}: {e}", plan.display()))?;
    let report = dir.join(format!("{stem}.quant_report.json"));
    let text = serde_json::to_string_pretty(&r.report).map_err(|e| e.to_string())?;
    npu_core::export::write_atomic(&report, text.as_bytes()).map_err(|e| format!("{}: {e}", report.display()))?;
    Ok(vec![onnx, plan, report])
}

/// Runs a stage (from its button).
fn run(st: &mut Studio, stage: Stage) {
    match stage {
        Stage::Import => match &st.loaded {
            Some(l) => {
                let p = l.path.clone();
                st.send(Command::Open(p));
            }
            None => st.send(Command::OpenDialog),
        },
        Stage::Optimize => st.send(Command::RunOptimizer),
        Stage::Calibrate => {
            st.quant.open = true;
            if st.quant.setup.data.is_empty() {
                // Under Xvfb or CI no dialog appears: the folder can be typed in the panel.
                match rfd::FileDialog::new().pick_folder() {
                    Some(p) => st.quant.setup.data = p.display().to_string(),
                    None => {
                        st.status = "Choose a folder of samples in the Quantize panel first".into();
                        return;
                    }
                }
            }
            st.start_quantization();
        }
        Stage::Simulate => {
            let ctx = st.ctx.clone();
            st.quant.resimulate(ctx);
        }
        Stage::Compile | Stage::Emulate => {}
        Stage::Export => {
            let Some(dir) = export_dir(st) else { return };
            match export(st, &dir) {
                Ok(files) => {
                    let g = st
                        .quant
                        .session
                        .as_ref()
                        .map_or(0, super::quantize::Session::generation);
                    st.quant.exported = Some((g, dir.clone()));
                    st.status = format!("Exported {} files to {}", files.len(), dir.display());
                }
                Err(e) => st.error = Some(format!("Export failed: {e}")),
            }
        }
    }
}

fn cancel(st: &mut Studio, stage: Stage) {
    match stage {
        Stage::Import => {
            if let Some(j) = &st.open_job {
                j.progress.cancel.cancel();
            }
        }
        Stage::Optimize => st.optimizer.cancel(),
        Stage::Calibrate => st.quant.cancel(),
        Stage::Simulate => match st.quant.session.as_ref() {
            Some(s) if s.full.is_some() => s.cancel_full(),
            _ => st.quant.cancel(),
        },
        Stage::Compile | Stage::Emulate | Stage::Export => {}
    }
}

/// Whether a running stage can be cancelled: an edit's incremental update cannot (it takes
/// milliseconds); the first calibration and simulation can.
fn cancellable(st: &Studio, stage: Stage) -> bool {
    match stage {
        Stage::Calibrate => st
            .quant
            .session
            .as_ref()
            .is_some_and(super::quantize::Session::starting),
        Stage::Simulate => st
            .quant
            .session
            .as_ref()
            .is_some_and(|s| s.starting() || s.full.is_some()),
        _ => true,
    }
}

/// Whether a stage's inputs are there (its run button is enabled).
fn can_run(st: &Studio, stage: Stage, status: &Status, stale: &Staleness) -> bool {
    let ready = st.quant.session.as_ref().is_some_and(|s| s.result.is_some());
    match stage {
        _ if matches!(status, Status::Running(..) | Status::Unavailable(_)) => false,
        Stage::Import => true,
        Stage::Optimize => st.loaded.is_some(),
        Stage::Calibrate => st.loaded.is_some(),
        // A stale calibration needs Run calibrate, not another simulation.
        Stage::Simulate => ready && stale.calibration.is_none(),
        Stage::Export => ready,
        Stage::Compile | Stage::Emulate => false,
    }
}

/// The pipeline row.
pub fn panel_ui(st: &mut Studio, ui: &mut egui::Ui) {
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
                Status::Done(_) => st.theme.quant.high,
                Status::Stale(_) => st.theme.quant.mid,
                Status::Running(..) => st.theme.selected,
                Status::Waiting(_) | Status::Unavailable(_) => st.theme.text_weak,
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
                                ui.horizontal(|ui| {
                                    ui.add(
                                        egui::ProgressBar::new(*f)
                                            .desired_width(width - 90.0)
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
                                if ui
                                    .add_enabled(
                                        can_run(st, *stage, other, &stale),
                                        egui::Button::new(format!("Run {}", stage.label().to_lowercase())).small(),
                                    )
                                    .clicked()
                                {
                                    clicked_run = Some(*stage);
                                }
                            }
                        }
                    });
                },
            );
        }
    });
    if let Some(s) = clicked_cancel {
        cancel(st, s);
    }
    if let Some(s) = clicked_run {
        run(st, s);
    }
}
