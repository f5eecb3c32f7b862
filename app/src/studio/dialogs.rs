//! System file dialogs, each run as the "file-dialog" job so the window keeps drawing while
//! one is open. Under Xvfb or CI no dialog appears and the job answers `None`; everything a
//! dialog asks for can also be typed (a path field) or given on the command line.

use super::commands::{Dialog, ExportFormat};
use super::jobs::Job;
use std::path::PathBuf;

/// Where the dialog starts and the file name it suggests.
pub struct DialogStart {
    pub dir: Option<PathBuf>,
    /// The open model's file name without its extension.
    pub stem: Option<String>,
}

/// Opens `dialog` on a job thread; the job answers the dialog and the path picked.
pub fn spawn(dialog: Dialog, start: DialogStart, ctx: Option<&egui::Context>) -> Job<(Dialog, Option<PathBuf>)> {
    Job::spawn("file-dialog", ctx, move |_| {
        let mut d = rfd::FileDialog::new();
        if let Some(dir) = &start.dir {
            d = d.set_directory(dir);
        }
        let stem = start.stem.unwrap_or_else(|| "graph".into());
        let picked = match dialog {
            Dialog::OpenModel => d
                .add_filter("Model (ONNX, TFLite)", &["onnx", "tflite"])
                .add_filter("ONNX model", &["onnx"])
                .add_filter("TFLite model", &["tflite"])
                .add_filter("All files", &["*"])
                .pick_file(),
            Dialog::OpenProject => d.add_filter("NPU Studio project", &["ron"]).pick_file(),
            Dialog::SaveProject => d
                .add_filter("NPU Studio project", &["ron"])
                .set_file_name(format!("{stem}.npuproj.ron"))
                .save_file(),
            Dialog::ExportView(f) => {
                let ext = match f {
                    ExportFormat::Png => "png",
                    ExportFormat::Svg => "svg",
                };
                d.add_filter(ext.to_uppercase(), &[ext])
                    .set_file_name(format!("{stem}.{ext}"))
                    .save_file()
            }
            Dialog::Samples { .. } | Dialog::ExportFolder => d.pick_folder(),
            Dialog::RecipeFile => d.add_filter("Recipe", &["ron"]).pick_file(),
            Dialog::WriteBinary => d
                .add_filter("NPU binary", &["npub"])
                .set_file_name(format!("{stem}.npub"))
                .save_file(),
        };
        Ok((dialog, picked))
    })
}
