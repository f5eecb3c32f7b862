//! The eframe application: the studio in a native window, and the settings kept between
//! runs (recent files, theme).

use super::Studio;
use super::commands::Command;
use std::path::PathBuf;

/// Settings kept between runs.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Settings {
    pub recent: Vec<PathBuf>,
    pub dark: bool,
    /// The quantization panel's height (points) as the user last dragged it.
    pub quant_panel_height: f32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            recent: Vec::new(),
            dark: false,
            quant_panel_height: QUANT_PANEL_HEIGHT,
        }
    }
}

/// The quantization panel's height until the user drags its edge.
pub const QUANT_PANEL_HEIGHT: f32 = 300.0;
/// The least the quantization panel shrinks to: its controls row and a line of results.
pub const QUANT_PANEL_MIN: f32 = 90.0;

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
