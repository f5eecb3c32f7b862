//! The window's frame around the graph: the menu bar, the status bar (with the running
//! job's progress and Cancel), the recovery bar, and the help and error windows.

use super::Studio;
use super::commands::{Command, Dialog, ExportFormat};
use super::shortcuts;

/// The menu bar: File, View, Optimize, Help.
pub fn menu_ui(st: &Studio, ui: &mut egui::Ui, out: &mut Vec<Command>) {
    egui::MenuBar::new().ui(ui, |ui| {
        ui.menu_button("File", |ui| {
            if ui.button("Open…").clicked() {
                out.push(Command::Dialog(Dialog::OpenModel));
            }
            if ui.button("Open project…").clicked() {
                out.push(Command::Dialog(Dialog::OpenProject));
            }
            if ui
                .add_enabled(st.loaded.is_some(), egui::Button::new("Save project"))
                .clicked()
            {
                out.push(Command::SaveProject(None));
            }
            ui.menu_button("Open recent", |ui| {
                if st.settings.recent.is_empty() {
                    ui.label("No recent files");
                }
                for p in st.settings.recent.clone() {
                    if ui.button(p.display().to_string()).clicked() {
                        out.push(Command::Open(p));
                    }
                }
            });
            ui.separator();
            if ui.button("Export view as PNG…").clicked() {
                out.push(Command::Export(ExportFormat::Png, None));
            }
            if ui.button("Export view as SVG…").clicked() {
                out.push(Command::Export(ExportFormat::Svg, None));
            }
        });
        ui.menu_button("View", |ui| {
            if ui.button("Fit to window").clicked() {
                out.push(Command::FitView);
            }
            if ui.button("Zoom to selection").clicked() {
                out.push(Command::ZoomToSelection);
            }
            if ui.button("Collapse all scopes").clicked() {
                out.push(Command::SetAllScopes { collapsed: true });
            }
            if ui.button("Expand all scopes").clicked() {
                out.push(Command::SetAllScopes { collapsed: false });
            }
            let mut pipeline = st.pipeline.open;
            if ui.checkbox(&mut pipeline, "Pipeline (P)").changed() {
                out.push(Command::TogglePipeline);
            }
            let mut quant = st.quant.open;
            if ui.checkbox(&mut quant, "Quantization panel (Q)").changed() {
                out.push(Command::ToggleQuantize);
            }
            let mut dark = st.settings.dark;
            if ui.checkbox(&mut dark, "Dark theme").changed() {
                out.push(Command::SetDarkTheme(dark));
            }
        });
        ui.menu_button("Optimize", |ui| {
            if ui.button("Graph optimizer…").clicked() {
                out.push(Command::ToggleOptimizer);
            }
            if ui
                .add_enabled(st.loaded.is_some(), egui::Button::new("Run all enabled passes"))
                .clicked()
            {
                out.push(Command::RunOptimizer);
            }
        });
        ui.menu_button("Help", |ui| {
            if ui.button("Keyboard shortcuts").clicked() {
                out.push(Command::ToggleHelp);
            }
        });
    });
}

/// The status bar: the opening or layout job's progress and Cancel, the last status line,
/// the zoom.
pub fn status_ui(st: &Studio, ui: &mut egui::Ui, out: &mut Vec<Command>) {
    ui.horizontal(|ui| {
        let jobs: Vec<(f32, String)> = [
            st.open_job.as_ref().map(|j| j.progress.fraction()),
            st.layout_job.as_ref().map(|j| j.progress.fraction()),
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
                out.push(Command::CancelJobs);
            }
        }
        // One line whatever it says (the panels above keep their place); all of it on hover.
        ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
            ui.label(format!("{:.0}%", st.view.zoom * 100.0));
            ui.with_layout(egui::Layout::left_to_right(egui::Align::Center), |ui| {
                ui.add(egui::Label::new(&st.status).truncate())
                    .on_hover_text(&st.status);
            });
        });
    });
}

/// The help window (F1) and the error window.
pub fn windows_ui(st: &mut Studio, ctx: &egui::Context, out: &mut Vec<Command>) {
    if st.show_help {
        let mut open = true;
        egui::Window::new("Keyboard shortcuts")
            .open(&mut open)
            .resizable(false)
            .show(ctx, shortcuts::help_ui);
        st.show_help = open;
    }
    if let Some(e) = st.error.clone() {
        egui::Window::new("Error")
            .collapsible(false)
            .resizable(true)
            .show(ctx, |ui| {
                ui.colored_label(st.theme.error, e);
                if st.loaded.is_some() {
                    ui.label("The model that was open stays open.");
                }
                if ui.button("OK").clicked() {
                    out.push(Command::DismissError);
                }
            });
    }
}

/// The bar that offers the unsaved edits an autosave file holds.
pub fn recovery_ui(st: &Studio, ui: &mut egui::Ui, out: &mut Vec<Command>) {
    ui.horizontal(|ui| {
        let n = st.recovery.as_ref().map_or(0, |p| p.layers.len());
        ui.label(format!(
            "Unsaved edits from an earlier session were found ({n} layer precisions)."
        ));
        if ui.button("Recover edits").clicked() {
            out.push(Command::RecoverEdits);
        }
        if ui.button("Discard").clicked() {
            out.push(Command::DiscardRecovery);
        }
    });
}
