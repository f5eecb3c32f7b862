//! The quantization view driven as a user would: samples typed into the panel, a run, a
//! layer's precision changed from the inspector, the heatmap and the output SQNR following,
//! undo and redo restoring them (no GPU needed).

mod common;

use common::{open, ppocr, settle};
use egui::Color32;
use egui_kittest::kittest::Queryable;
use npu_studio::studio::Studio;
use npu_studio::studio::commands::{Command, Selection};
use npu_studio::studio::quantize::Overlay;
use std::path::PathBuf;

/// A folder of this test with PP-OCR cls's six preprocessed photos.
fn cls_samples(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("npu_quant_ui_{name}_{}", std::process::id()));
    common::cls_samples_in(&dir);
    dir
}

/// (colour of the node's card, its local SQNR, the output SQNR).
fn state_of(st: &Studio, n: usize) -> (Color32, Option<f64>, Option<f64>) {
    let marks = st.quant.card_marks(&st.theme.quant);
    let s = st.quant.session.as_ref().expect("session");
    let row = s.row(n).expect("row");
    let out = s.result.as_ref().expect("result").report.outputs[0].sqnr_db;
    (marks.get(&n).expect("mark").0, row.sqnr_local_db, out)
}

#[test]
fn precision_change_moves_the_heatmap_and_undo_restores_it() {
    let dir = cls_samples("edit");
    let mut h = common::cls_with_samples_typed(dir.to_str().expect("utf-8"));
    h.step();
    h.get_by_label("Calibrate & simulate").click();
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    let st = h.state();
    let s = st.quant.session.as_ref().expect("session");
    let r = s.result.as_ref().expect("first simulation");
    assert_eq!(r.report.eval_samples, 6);
    // Every node with a quantized output has a mark on its card.
    assert!(
        st.quant.card_marks(&st.theme.quant).len() > 50,
        "{} marks",
        st.quant.card_marks(&st.theme.quant).len()
    );
    // The layer with the lowest local SQNR.
    let n = *s
        .rows
        .keys()
        .min_by(|a, b| {
            let k = |n: &usize| s.row(*n).and_then(|t| t.sqnr_local_db).unwrap_or(f64::INFINITY);
            k(a).total_cmp(&k(b)).then(a.cmp(b))
        })
        .expect("a quantized layer");
    h.state_mut().quant.overlay = Overlay::LocalSqnr;
    h.state_mut().send(Command::Reveal(Selection::Node(n)));
    settle(&mut h);
    let before = state_of(h.state(), n);
    assert!(before.1.expect("inexact") < 38.0, "{before:?}");
    assert!(
        h.query_all_by_label("Quantization").next().is_some(),
        "inspector section"
    );
    // FP32 against quantized values, the value histogram with the clipping range and step,
    // and the error histogram of the selected layer.
    let i = h
        .state()
        .quant
        .session
        .as_ref()
        .and_then(|s| s.inspect.clone())
        .expect("values");
    assert_eq!(i.fp32.len(), i.quant.len());
    assert!(!i.fp32.is_empty() && i.fp32 != i.quant, "{i:?}");
    let errors: usize = i.errors.iter().map(|e| e.1).sum();
    assert!(errors > 1000, "{errors}");
    assert_eq!(i.values.iter().map(|e| e.1).sum::<usize>(), errors);
    let Some((_, (lo, hi), Some(step))) = i.grid else {
        panic!("an 8-bit grid: {:?}", i.grid)
    };
    assert!((step - (hi - lo) / 255.0).abs() < 1e-12, "{lo} {hi} {step}");
    assert!(h.query_all_by_label("Error histogram (every sample)").next().is_some());
    // fp16 from the inspector.
    h.get_by_label("fp16").click();
    settle(&mut h);
    let after = state_of(h.state(), n);
    println!("cls node {n}: int8 {before:?} → fp16 {after:?}");
    assert_ne!(after.0, before.0, "the card's colour follows");
    assert!(after.1.expect("inexact") > before.1.expect("inexact") + 3.0);
    assert_ne!(after.2, before.2, "the output SQNR follows");
    assert!(h.state().quant.session.as_ref().expect("s").last_latency_ms.is_some());
    // Undo, redo.
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Z);
    settle(&mut h);
    assert_eq!(state_of(h.state(), n), before, "undo restores colour and numbers");
    h.key_press_modifiers(egui::Modifiers::COMMAND | egui::Modifiers::SHIFT, egui::Key::Z);
    settle(&mut h);
    assert_eq!(state_of(h.state(), n), after, "redo");
    // The precision overlay shows the edit.
    h.state_mut().quant.overlay = Overlay::Precision;
    h.step();
    let marks = h.state().quant.card_marks(&h.state().theme.quant);
    assert_eq!(marks.get(&n).map(|m| m.1.as_str()), Some("f16"));
    // With no overlay, the edited layer alone keeps its badge.
    h.state_mut().quant.overlay = Overlay::Off;
    h.step();
    let marks = h.state().quant.card_marks(&h.state().theme.quant);
    assert_eq!(marks.len(), 1, "{marks:?}");
    assert_eq!(marks.get(&n).map(|m| m.1.as_str()), Some("f16"));
}

#[test]
fn bad_samples_folder_shows_an_error() {
    let mut h = common::cls_with_samples_typed("/nonexistent/folder");
    h.step();
    h.get_by_label("Calibrate & simulate").click();
    settle(&mut h);
    let e = h.state().error.clone().expect("an error");
    assert!(e.contains("/nonexistent/folder"), "{e}");
    assert!(h.state().quant.session.is_none());
}

/// Output SQNR and every card's mark.
fn snapshot_of(st: &Studio) -> (Option<f64>, Vec<(usize, Color32, String)>) {
    let s = st.quant.session.as_ref().expect("session");
    let out = s.result.as_ref().expect("result").report.outputs[0].sqnr_db;
    let mut marks: Vec<(usize, Color32, String)> = st
        .quant
        .card_marks(&st.theme.quant)
        .into_iter()
        .map(|(n, (c, t))| (n, c, t))
        .collect();
    marks.sort_by_key(|m| m.0);
    (out, marks)
}

#[test]
fn project_reopens_with_the_same_overlays_and_recovers_unsaved_edits() {
    use npu_core::quant::LayerPrecision;
    let dir = cls_samples("project");
    let project = dir.join("cls.npuproj.ron");
    let mut h = open(&ppocr("cls"));
    h.state_mut().quant.setup.data = dir.display().to_string();
    h.state_mut().start_quantization();
    settle(&mut h);
    let conv = |st: &Studio, k: usize| -> usize {
        let s = st.quant.session.as_ref().expect("session");
        let mut nodes: Vec<usize> = s.rows.keys().copied().collect();
        nodes.sort_unstable();
        nodes[k]
    };
    let n = conv(h.state(), 3);
    h.state_mut().send(Command::SetPrecision(vec![n], LayerPrecision::FP16));
    settle(&mut h);
    let saved = snapshot_of(h.state());
    h.state_mut().send(Command::SaveProject(Some(project.clone())));
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    drop(h);

    // Closed and reopened: the same numbers and marks.
    let mut h = common::harness(npu_studio::studio::Settings::default());
    h.state_mut().send(Command::OpenProject(project.clone()));
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    assert!(h.state().recovery.is_none(), "{:?}", h.state().recovery);
    assert_eq!(snapshot_of(h.state()), saved, "reopened project");

    // An edit, then the process goes away without saving.
    let m = conv(h.state(), 20);
    h.state_mut()
        .send(Command::SetPrecision(vec![m], LayerPrecision::INT16));
    settle(&mut h);
    let edited = snapshot_of(h.state());
    assert_ne!(edited, saved);
    drop(h);

    let mut h = common::harness(npu_studio::studio::Settings::default());
    h.state_mut().send(Command::OpenProject(project.clone()));
    settle(&mut h);
    assert_eq!(snapshot_of(h.state()), saved, "the project file holds the saved state");
    assert!(h.state().recovery.is_some(), "the unsaved edit is offered");
    h.get_by_label("Recover edits").click();
    settle(&mut h);
    assert_eq!(snapshot_of(h.state()), edited, "recovered");
    let _ = std::fs::remove_dir_all(&dir);
}

/// CPU time (ms) the calling thread has used: the UI thread's own work, whatever else the
/// machine runs (the other tests of this binary run beside this one).
fn thread_cpu_ms() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut t) };
    assert_eq!(r, 0, "CLOCK_THREAD_CPUTIME_ID");
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

/// Calibration and simulation run on the worker: frames keep coming at their usual cost
/// while they run. A frame's cost is the UI thread's CPU time; its wall time is bounded too,
/// so a frame that waits on the worker fails as well.
#[test]
fn frames_keep_their_time_while_the_quantizer_runs() {
    let dir = cls_samples("frames");
    let mut h = open(&ppocr("cls"));
    h.key_press(egui::Key::Q);
    h.step();
    let time = |h: &mut egui_kittest::Harness<'_, Studio>| {
        let (t, cpu) = (std::time::Instant::now(), thread_cpu_ms());
        h.step();
        let wall = t.elapsed().as_secs_f64() * 1e3;
        assert!(wall < 250.0, "a frame waited {wall:.1} ms");
        thread_cpu_ms() - cpu
    };
    let mut idle: Vec<f64> = (0..20).map(|_| time(&mut h)).collect();
    idle.sort_by(f64::total_cmp);
    h.state_mut().quant.setup.data = dir.display().to_string();
    h.state_mut().start_quantization();
    // Frame times until the worker is done.
    let busy_frames = |h: &mut egui_kittest::Harness<'_, Studio>, what: &str| {
        let mut busy = Vec::new();
        while h.state().quant.busy() {
            busy.push(time(h));
            std::thread::sleep(std::time::Duration::from_millis(5));
            assert!(busy.len() < 20_000, "{what} never finished");
        }
        assert!(h.state().error.is_none(), "{:?}", h.state().error);
        busy
    };
    let busy = busy_frames(&mut h, "calibration");
    let worst = busy.iter().copied().fold(0.0, f64::max);
    let median_idle = idle[idle.len() / 2];
    println!(
        "frames while calibrating: {} frames, worst {worst:.1} ms; idle median {median_idle:.1} ms",
        busy.len()
    );
    assert!(busy.len() >= 10, "{} frames", busy.len());
    assert!(worst < (4.0 * median_idle).max(50.0), "a frame took {worst:.1} ms");
    // The sensitivity analysis and the mixed-precision search run on the worker too.
    for (button, what) in [
        ("Measure sensitivity", "sensitivity"),
        ("Find mixed precision", "mixed precision"),
    ] {
        settle(&mut h);
        common::click_in_view(&mut h, button);
        h.step();
        let busy = busy_frames(&mut h, what);
        let worst = busy.iter().copied().fold(0.0, f64::max);
        println!("frames during {what}: {} frames, worst {worst:.1} ms", busy.len());
        assert!(busy.len() >= 10, "{} frames", busy.len());
        assert!(
            worst < (4.0 * median_idle).max(50.0),
            "a frame took {worst:.1} ms during {what}"
        );
    }
}

#[test]
fn recipe_rules_apply_as_one_undoable_edit() {
    let dir = cls_samples("rules");
    let mut h = open(&ppocr("cls"));
    h.state_mut().quant.open = true;
    h.state_mut().quant.setup.data = dir.display().to_string();
    h.state_mut().start_quantization();
    settle(&mut h);
    h.get_by_label("Recipe…").click();
    // Let the window appear.
    for _ in 0..5 {
        h.step();
    }
    h.get_by_label("Add rule").click();
    h.step();
    h.step();
    for _ in 0..5 {
        h.step();
    }
    h.get_by_label("Apply rules").click();
    settle(&mut h);
    let st = h.state();
    let n_conv = st
        .quant
        .layers()
        .values()
        .filter(|p| **p == npu_core::quant::LayerPrecision::INT16)
        .count();
    assert!(n_conv > 20, "{n_conv} layers set by the rule `op Conv → int16`");
    assert!(
        st.quant.rules_note.as_deref().is_some_and(|n| n.starts_with("applied")),
        "{:?}",
        st.quant.rules_note
    );
    h.state_mut().quant.overlay = Overlay::Precision;
    h.step();
    let marks = h.state().quant.card_marks(&h.state().theme.quant);
    assert!(marks.values().filter(|m| m.1 == "i16").count() > 20);
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Z);
    settle(&mut h);
    assert!(
        h.state().quant.layers().is_empty(),
        "undo takes the whole rule application back"
    );
}
