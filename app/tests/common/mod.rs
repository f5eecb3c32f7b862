//! The shared harness: fixed size and scale, light theme, a model opened and laid out.
#![allow(dead_code, reason = "each test binary uses part of the shared harness")]

use egui_kittest::Harness;
use npu_studio::studio::commands::Command;
use npu_studio::studio::{Settings, Studio};
use std::path::{Path, PathBuf};

pub const SIZE: [f32; 2] = [1400.0, 860.0];

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn sample() -> PathBuf {
    repo().join("assets/models/sample_cnn.onnx")
}

/// A PP-OCR model fetched by `scripts/fetch_models.py` (run by the README's test command).
pub fn ppocr(which: &str) -> PathBuf {
    let p = repo().join(format!("data/models/ppocr_{which}.onnx"));
    assert!(
        p.exists(),
        "{} is missing: run `python3 scripts/fetch_models.py`",
        p.display()
    );
    p
}

/// A folder of this test (its thread) for autosave files, never next to the repository's
/// models and never shared with another test.
pub fn autosave_dir() -> PathBuf {
    let test = std::thread::current().name().unwrap_or("main").replace("::", "_");
    let d = std::env::temp_dir().join(format!("npu_studio_autosave_{}_{test}", std::process::id()));
    std::fs::create_dir_all(&d).expect("autosave dir");
    d
}

pub fn harness<'a>(settings: Settings) -> Harness<'a, Studio> {
    let mut st = Studio::new(settings);
    st.autosave_dir = Some(autosave_dir());
    Harness::builder()
        .with_size(SIZE)
        .with_pixels_per_point(1.0)
        .with_step_dt(1.0 / 60.0)
        .build_ui_state(|ui, st: &mut Studio| st.ui(ui), st)
}

/// Steps frames until background jobs are done (and a few more so the UI settles).
pub fn settle(h: &mut Harness<'_, Studio>) {
    for _ in 0..3000 {
        h.step();
        if !h.state().busy() {
            for _ in 0..3 {
                h.step();
            }
            if !h.state().busy() {
                return;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    panic!("the studio stayed busy: {}", h.state().status);
}

pub fn open<'a>(path: &Path) -> Harness<'a, Studio> {
    let mut h = harness(Settings::default());
    h.state_mut().send(Command::Open(path.to_path_buf()));
    settle(&mut h);
    assert!(h.state().error.is_none(), "error: {:?}", h.state().error);
    assert!(h.state().loaded.is_some(), "no model after opening {}", path.display());
    h
}

/// Index of the node with this name in the open model.
pub fn node(h: &Harness<'_, Studio>, name: &str) -> usize {
    let l = h.state().loaded.as_ref().expect("a model is open");
    l.model
        .graph
        .nodes
        .iter()
        .position(|n| n.name == name)
        .unwrap_or_else(|| panic!("no node {name}"))
}

/// PP-OCR cls open, the quantization panel shown (Q) and `samples` typed into its
/// Samples field, as a user would.
pub fn cls_with_samples_typed<'a>(samples: &str) -> Harness<'a, Studio> {
    use egui_kittest::kittest::Queryable;
    let mut h = open(&ppocr("cls"));
    h.key_press(egui::Key::Q);
    h.step();
    h.get_by_label("Samples:").click();
    h.step();
    h.get_by_label("Samples:").type_text(samples);
    h
}

/// Scrolls the widget with this label into view (the quantization panel keeps its height
/// and scrolls), then clicks it, as a user would.
pub fn click_in_view(h: &mut Harness<'_, Studio>, label: &str) {
    use egui_kittest::kittest::Queryable;
    h.get_by_label(label).scroll_to_me();
    for _ in 0..3 {
        h.step();
    }
    h.get_by_label(label).click();
}

/// A click of the primary button at a screen position, then one frame.
pub fn click_at(h: &mut Harness<'_, Studio>, pos: egui::Pos2) {
    clicks_at(h, pos, 1);
}

/// `n` quick clicks (a double click when 2) in one frame.
pub fn clicks_at(h: &mut Harness<'_, Studio>, pos: egui::Pos2, n: usize) {
    h.event(egui::Event::PointerMoved(pos));
    for pressed in [true, false].repeat(n) {
        h.event(egui::Event::PointerButton {
            pos,
            button: egui::PointerButton::Primary,
            pressed,
            modifiers: egui::Modifiers::NONE,
        });
    }
    h.step();
}

/// Copies PP-OCR cls's six preprocessed photos (`data/inputs/cls_*.npy`) into `dir`
/// (created afresh).
pub fn cls_samples_in(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("samples dir");
    for e in std::fs::read_dir(repo().join("data/inputs")).expect("data/inputs (run scripts/fetch_models.py)") {
        let p = e.expect("entry").path();
        let file = p.file_name().and_then(|n| n.to_str()).unwrap_or("").to_string();
        if file.starts_with("cls_") {
            std::fs::copy(&p, dir.join(file)).expect("copy");
        }
    }
}
