//! The pipeline panel, multi-selection, sensitivity bars, the mixed-precision curve, the
//! calibration preview and recipe files, driven as a user would on PP-OCR cls with its six
//! preprocessed photos (no GPU needed).

mod common;

use common::{open, ppocr, settle};
use egui::{Event, Modifiers, PointerButton, Pos2, Rect};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use npu_core::quant::LayerPrecision;
use npu_studio::studio::Studio;
use npu_studio::studio::commands::{Command, Selection};
use npu_studio::studio::graph_view::Xf;
use npu_studio::studio::pipeline::{Stage, Status};
use std::path::PathBuf;

fn cls_samples(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("npu_pipeline_ui_{name}_{}", std::process::id()));
    common::cls_samples_in(&dir);
    dir
}

/// PP-OCR cls open, calibrated and simulated on its six photos.
fn quantized<'a>(name: &str) -> (Harness<'a, Studio>, PathBuf) {
    let dir = cls_samples(name);
    let mut h = open(&ppocr("cls"));
    h.state_mut().quant.open = true;
    h.state_mut().quant.setup.data = dir.display().to_string();
    h.state_mut().start_quantization();
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    (h, dir)
}

fn output_db(st: &Studio) -> Option<f64> {
    st.quant.session.as_ref()?.result.as_ref()?.report.outputs[0].sqnr_db
}

/// The card of a node on screen.
fn card(st: &Studio, n: usize) -> Rect {
    let r = st.rect_of(Selection::Node(n)).expect("a card");
    Xf::new(st.canvas_rect, &st.view).rect(r)
}

fn with_shift(h: &mut Harness<'_, Studio>, f: impl FnOnce(&mut Harness<'_, Studio>)) {
    h.event(Event::ModifiersChanged(Modifiers::SHIFT));
    h.step();
    f(h);
    h.event(Event::ModifiersChanged(Modifiers::NONE));
    h.step();
}

fn press(h: &mut Harness<'_, Studio>, pos: Pos2, button: PointerButton, pressed: bool, modifiers: Modifiers) {
    h.event(Event::PointerButton {
        pos,
        button,
        pressed,
        modifiers,
    });
}

#[test]
fn shift_click_box_select_and_op_type_select_set_every_precision() {
    let (mut h, dir) = quantized("multi");
    // Two quantized nodes whose cards are on screen together.
    let mut nodes: Vec<usize> = h
        .state()
        .quant
        .session
        .as_ref()
        .expect("s")
        .rows
        .keys()
        .copied()
        .collect();
    nodes.sort_unstable();
    let a = nodes[4];
    h.state_mut().send(Command::Reveal(Selection::Node(a)));
    settle(&mut h);
    let canvas = h.state().canvas_rect.shrink(40.0);
    let b = *nodes
        .iter()
        .filter(|&&n| n != a && canvas.contains_rect(card(h.state(), n)))
        .min_by(|x, y| {
            let d = |n: usize| card(h.state(), n).center().distance(card(h.state(), a).center());
            d(**x).total_cmp(&d(**y))
        })
        .expect("a second card on screen");
    let (ra, rb) = (card(h.state(), a), card(h.state(), b));
    // Click a, Shift+click b.
    common::click_at(&mut h, ra.center());
    with_shift(&mut h, |h| {
        h.event(Event::PointerMoved(rb.center()));
        press(h, rb.center(), PointerButton::Primary, true, Modifiers::SHIFT);
        press(h, rb.center(), PointerButton::Primary, false, Modifiers::SHIFT);
        h.step();
    });
    h.step();
    assert_eq!(h.state().multi.iter().copied().collect::<Vec<_>>(), {
        let mut v = vec![a, b];
        v.sort_unstable();
        v
    });
    // The right-click menu speaks of both.
    h.event(Event::PointerMoved(rb.center()));
    press(&mut h, rb.center(), PointerButton::Secondary, true, Modifiers::NONE);
    press(&mut h, rb.center(), PointerButton::Secondary, false, Modifiers::NONE);
    for _ in 0..3 {
        h.step();
    }
    assert!(h.query_by_label("Precision of 2 selected nodes").is_some());
    h.key_press(egui::Key::Escape);
    h.step();
    // Escape closed the menu and cleared the selection: select both again with a band.
    assert!(h.state().multi.is_empty());
    // Shift+click a, b, then b again: b leaves the selection and is no longer selected.
    let shift_click = |h: &mut Harness<'_, Studio>, at: Pos2| {
        with_shift(h, |h| {
            h.event(Event::PointerMoved(at));
            press(h, at, PointerButton::Primary, true, Modifiers::SHIFT);
            press(h, at, PointerButton::Primary, false, Modifiers::SHIFT);
            h.step();
        });
        h.step();
    };
    shift_click(&mut h, ra.center());
    shift_click(&mut h, rb.center());
    shift_click(&mut h, rb.center());
    assert_eq!(h.state().multi.iter().copied().collect::<Vec<_>>(), vec![a]);
    assert_eq!(h.state().selection, None);
    h.key_press(egui::Key::Escape);
    h.step();
    let band = ra.union(rb).expand(6.0);
    with_shift(&mut h, |h| {
        h.event(Event::PointerMoved(band.left_top()));
        press(h, band.left_top(), PointerButton::Primary, true, Modifiers::SHIFT);
        h.step();
        for k in 1..=4 {
            let p = band.left_top() + (band.right_bottom() - band.left_top()) * (k as f32 / 4.0);
            h.event(Event::PointerMoved(p));
            h.step();
        }
        press(h, band.right_bottom(), PointerButton::Primary, false, Modifiers::SHIFT);
        h.step();
    });
    h.step();
    let multi = h.state().multi.clone();
    assert!(multi.contains(&a) && multi.contains(&b), "{multi:?} lacks {a} or {b}");
    // One click sets every selected node's precision; one undo restores them all.
    let before = output_db(h.state());
    common::click_in_view(&mut h, "Set selected to int16");
    settle(&mut h);
    for &n in &multi {
        if h.state().quant.precision_of(n).is_some() {
            assert_eq!(h.state().quant.precision_of(n), Some(LayerPrecision::INT16), "node {n}");
        }
    }
    assert_ne!(output_db(h.state()), before);
    h.key_press_modifiers(Modifiers::COMMAND, egui::Key::Z);
    settle(&mut h);
    assert_eq!(h.state().quant.precision_of(a), Some(LayerPrecision::INT8));
    assert_eq!(h.state().quant.precision_of(b), Some(LayerPrecision::INT8));
    assert_eq!(output_db(h.state()), before, "one undo restores every node");
    // "Select all of op type" from the card's menu.
    let op = h.state().loaded.as_ref().expect("l").model.graph.nodes[a].op.clone();
    let same = h
        .state()
        .loaded
        .as_ref()
        .expect("l")
        .model
        .graph
        .nodes
        .iter()
        .filter(|n| n.op == op)
        .count();
    h.event(Event::PointerMoved(ra.center()));
    press(&mut h, ra.center(), PointerButton::Secondary, true, Modifiers::NONE);
    press(&mut h, ra.center(), PointerButton::Secondary, false, Modifiers::NONE);
    for _ in 0..3 {
        h.step();
    }
    h.get_by_label(&format!("Select all {same} {op} nodes")).click();
    h.step();
    h.step();
    assert_eq!(h.state().multi.len(), same);
    assert!(h.query_by_label(&format!("{same} nodes selected:")).is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pipeline_stages_run_export_and_go_stale() {
    let dir = cls_samples("pipeline");
    let mut h = open(&ppocr("cls"));
    let st = h.state();
    assert!(matches!(st.stage_status(Stage::Import), Status::Done(_)));
    assert!(matches!(st.stage_status(Stage::Calibrate), Status::Waiting(_)));
    assert!(matches!(st.stage_status(Stage::Compile), Status::Waiting(_)));
    assert!(matches!(st.stage_status(Stage::Emulate), Status::Waiting(_)));
    assert!(h.query_by_label("Run import").is_some());
    // Run the calibration from the pipeline: it shows progress while it runs.
    h.state_mut().quant.setup.data = dir.display().to_string();
    h.step();
    h.get_by_label("Run calibrate").click();
    let mut seen_running = false;
    for _ in 0..4000 {
        h.step();
        let st = h.state();
        if matches!(st.stage_status(Stage::Calibrate), Status::Running(..))
            || matches!(st.stage_status(Stage::Simulate), Status::Running(..))
        {
            seen_running = true;
        }
        if !st.busy() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    settle(&mut h);
    assert!(seen_running, "a progress bar while calibrating");
    let st = h.state();
    assert!(st.error.is_none(), "{:?}", st.error);
    assert!(
        matches!(st.stage_status(Stage::Optimize), Status::Done(_)),
        "{:?}",
        st.stage_status(Stage::Optimize)
    );
    assert!(matches!(st.stage_status(Stage::Calibrate), Status::Done(_)));
    let Status::Done(sim) = st.stage_status(Stage::Simulate) else {
        panic!("{:?}", st.stage_status(Stage::Simulate))
    };
    assert!(sim.contains("6 samples"), "{sim}");
    // Export: the optimized ONNX, the plan and the report.
    let out = dir.join("export");
    h.state_mut().pipeline.export_dir = Some(out.clone());
    h.get_by_label("Run export").click();
    // The files are written by a background job.
    settle(&mut h);
    println!(
        "export: {:?} {:?} {:?}",
        h.state().stage_status(Stage::Export),
        h.state().quant.exported,
        h.state().status
    );
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    assert!(matches!(h.state().stage_status(Stage::Export), Status::Done(_)));
    let onnx = npu_core::import::onnx::load(&out.join("ppocr_cls.optimized.onnx")).expect("the exported ONNX loads");
    let s = h.state().quant.session.as_ref().expect("s");
    let m = s.mapping.as_ref().expect("mapping");
    assert_eq!(onnx.0.graph.nodes.len(), m.optimized.graph.nodes.len());
    let plan: npu_core::quant::QuantPlan =
        ron::from_str(&std::fs::read_to_string(out.join("ppocr_cls.quant.ron")).expect("plan")).expect("a plan");
    assert_eq!(&plan, &s.result.as_ref().expect("r").plan);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("ppocr_cls.quant_report.json")).expect("report"))
            .expect("json");
    assert_eq!(report["eval_samples"], 6);
    let n = *s.rows.keys().min().expect("a layer");
    // The deployable files: the int8 TFLite model and the QDQ ONNX model.
    let tfl = std::fs::read(out.join("ppocr_cls.int8.tflite")).expect("the TFLite file");
    assert_eq!(&tfl[4..8], b"TFL3");
    let qdq = npu_core::import::onnx::load(&out.join("ppocr_cls.qdq.onnx")).expect("the QDQ ONNX loads");
    assert!(qdq.0.graph.nodes.iter().any(|n| n.op == "QuantizeLinear"));
    // The HTML report, with its JSON and CSV: every simulated tensor in the table.
    let page = std::fs::read_to_string(out.join("ppocr_cls.report.html")).expect("the HTML report");
    assert!(page.contains("<section id=\"layers\"") && page.contains("<section id=\"graph\""));
    let csv = std::fs::read_to_string(out.join("ppocr_cls.report.csv")).expect("the report's CSV");
    assert_eq!(
        csv.lines().count(),
        s.result.as_ref().expect("r").report.tensors.len() + 1
    );
    assert!(out.join("ppocr_cls.report.json").exists());
    assert!(h.state().status.contains("Exported 8 files"), "{}", h.state().status);
    // The formats menu: with TFLite unticked the next export leaves it out.
    h.get_by_label("Formats").click();
    for _ in 0..4 {
        h.step();
    }
    h.get_by_label("TFLite (.int8.tflite, .int16.tflite with 16-bit layers)")
        .click();
    for _ in 0..4 {
        h.step();
    }
    assert!(!h.state().pipeline.formats.tflite);
    assert!(h.state().pipeline.formats.qdq);
    let out2 = dir.join("export2");
    h.state_mut().send(Command::SetExportDir(out2.clone()));
    h.state_mut().send(Command::ExportPlan);
    settle(&mut h);
    assert!(h.state().status.contains("Exported 7 files"), "{}", h.state().status);
    assert!(out2.join("ppocr_cls.qdq.onnx").exists() && !out2.join("ppocr_cls.int8.tflite").exists());
    // Compile for the default target: PP-OCR cls runs on the NPU whole, and the graph
    // shows the placement.
    h.get_by_label("Run compile").click();
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    let Status::Done(c) = h.state().stage_status(Stage::Compile) else {
        panic!("{:?}", h.state().stage_status(Stage::Compile))
    };
    assert!(c.starts_with("ethos-u55-128: ") && c.contains("ops on NPU"), "{c}");
    assert!(
        h.state().status.starts_with("Compiled for ethos-u55-128"),
        "{}",
        h.state().status
    );
    assert!(h.state().compile.show_placement);
    // The compile report: latency bars, memory over the schedule, the roofline.
    assert!(h.query_by_label("Compile report").is_some());
    assert!(h.query_by_label("Close report").is_some());
    let marks = h.state().compile.card_marks(&h.state().theme.quant);
    assert!(!marks.is_empty());
    assert!(marks.values().all(|(_, badge)| badge.starts_with("NPU")), "{marks:?}");
    // The inspector says where the selected node runs.
    let placed = *marks.keys().min().expect("a node");
    h.state_mut().send(Command::Select(Some(Selection::Node(placed))));
    for _ in 0..3 {
        h.step();
    }
    assert!(h.query_by_label("Placement").is_some());
    // Another target from the Compile card's menu: the compile follows by itself.
    h.get_by_label("Target").click();
    for _ in 0..4 {
        h.step();
    }
    h.get_by_label("phone-npu — Phone NPU, 4 TOPS class").click();
    settle(&mut h);
    assert!(
        h.state().status.starts_with("Compile updated: phone-npu"),
        "{}",
        h.state().status
    );
    println!("update after a target change: {}", h.state().status);
    let Status::Done(c) = h.state().stage_status(Stage::Compile) else {
        panic!("{:?}", h.state().stage_status(Stage::Compile))
    };
    assert!(c.starts_with("phone-npu: "), "{c}");
    // Keep a node on the CPU: the compile follows, and the node is on the CPU, saying why.
    h.state_mut().send(Command::ForceCpu(vec![placed], true));
    settle(&mut h);
    let marks = h.state().compile.card_marks(&h.state().theme.quant);
    assert!(marks[&placed].1.starts_with("CPU"), "{:?}", marks[&placed]);
    let (_, line) = h
        .state()
        .compile
        .placement_line(Some(Selection::Node(placed)), &h.state().theme.quant)
        .expect("placed");
    assert!(line.contains("forced to the CPU by the user"), "{line}");
    let Status::Done(c) = h.state().stage_status(Stage::Compile) else {
        panic!("{:?}", h.state().stage_status(Stage::Compile))
    };
    assert!(!c.contains(": 0/"), "{c}");
    // The latency overlay, from the Target menu: nodes coloured by their time, their share
    // in the badge.
    h.get_by_label("Target").click();
    for _ in 0..4 {
        h.step();
    }
    h.get_by_label("Colour by latency").click();
    for _ in 0..3 {
        h.step();
    }
    assert!(h.state().compile.colour_by_latency && h.state().compile.show_placement);
    let marks = h.state().compile.card_marks(&h.state().theme.quant);
    assert!(marks.values().any(|(_, b)| b.ends_with('%')), "{marks:?}");
    let colours: std::collections::HashSet<_> = marks.values().map(|(c, _)| *c).collect();
    assert!(colours.len() > 3, "a heat map has more than a few colours");
    // Write the binary of this compile, and read it back.
    let npub = out2.join("cls.npub");
    h.state_mut().send(Command::WriteBinary(Some(npub.clone())));
    settle(&mut h);
    assert!(h.state().status.starts_with("Wrote "), "{}", h.state().status);
    let b = npu_core::compiler::binary::read(&std::fs::read(&npub).expect("written")).expect("a binary");
    assert_eq!(b.target, "phone-npu");
    let compiled = &h.state().compile.result.as_ref().expect("compiled").compiled;
    assert_eq!(b.commands.len(), compiled.lowered.commands.len());
    assert_eq!(b.host.len(), compiled.headline().host_ops);
    assert!(!b.host.is_empty(), "the forced node runs on the host");
    // Emulate that binary: every tensor equals the integer reference, and the overlays
    // and the inspector show what the binary delivers beside what the simulation promises.
    h.get_by_label("Run emulate").click();
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    let Status::Done(e) = h.state().stage_status(Stage::Emulate) else {
        panic!("{:?}", h.state().stage_status(Stage::Emulate))
    };
    assert!(e.starts_with("phone-npu: 0 codes off the integer reference"), "{e}");
    println!("emulated: {}", h.state().status);
    h.state_mut().quant.overlay = npu_studio::studio::quantize::Overlay::EmulatedSqnr;
    let st = h.state();
    let r = st.emulate.result.as_ref().expect("emulated");
    assert_eq!(r.mismatches, 0);
    assert!(
        r.tensors > 50 && r.nodes.len() > 30,
        "{} tensors, {} nodes",
        r.tensors,
        r.nodes.len()
    );
    assert!(r.outputs.iter().all(|(_, e, s)| e.is_some() && s.is_some()));
    let marks = st
        .emulate
        .card_marks(false, 1.0, |x| st.quant.heat(&st.theme.quant, x), &st.theme.quant);
    assert!(marks.values().all(|(_, b)| b.starts_with("emu ")) && marks.len() == r.nodes.len());
    let gaps = st
        .emulate
        .card_marks(true, 1.0, |x| st.quant.heat(&st.theme.quant, x), &st.theme.quant);
    let over = gaps.values().filter(|(c, _)| *c == st.theme.quant.low).count();
    let expect = r
        .nodes
        .values()
        .filter(|n| n.trace.gap_db().is_some_and(|g| g > 1.0))
        .count();
    assert_eq!(over, expect);
    h.state_mut().send(Command::Select(Some(Selection::Node(placed))));
    for _ in 0..3 {
        h.step();
    }
    assert!(
        h.query_by_label_contains("Emulated on phone-npu").is_some(),
        "the inspector's emulated section"
    );
    // A precision edit makes the export stale; the simulation follows it.
    h.state_mut().send(Command::SetPrecision(vec![n], LayerPrecision::FP16));
    settle(&mut h);
    assert!(matches!(h.state().stage_status(Stage::Export), Status::Stale(_)));
    // fp16 has no integer form: the float fallback runs the layer in float32 on the host,
    // so the compile follows, puts it on the CPU and says why.
    assert!(
        matches!(h.state().stage_status(Stage::Compile), Status::Done(_)),
        "{}",
        h.state().status
    );
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    let marks = h.state().compile.card_marks(&h.state().theme.quant);
    assert!(marks[&n].1.starts_with("CPU"), "{:?}", marks[&n]);
    let (_, line) = h
        .state()
        .compile
        .placement_line(Some(Selection::Node(n)), &h.state().theme.quant)
        .expect("placed");
    // (The layer was forced to the CPU above; its class says it runs as its float op.)
    assert!(line.contains("float32 "), "{line}");
    assert!(matches!(h.state().stage_status(Stage::Simulate), Status::Done(_)));
    // Back to int8, and the Softmax kept in float: the compile follows, and the Softmax
    // runs in float32 on the host, saying why.
    h.state_mut().send(Command::SetPrecision(vec![n], LayerPrecision::INT8));
    let soft = {
        let st = h.state();
        let model = &st.loaded.as_ref().expect("l").model;
        let rows = &st.quant.session.as_ref().expect("s").rows;
        *rows
            .keys()
            .find(|&&k| model.graph.nodes[k].op == "Softmax")
            .expect("a Softmax row")
    };
    h.state_mut()
        .send(Command::SetPrecision(vec![soft], LayerPrecision::FLOAT));
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    assert!(matches!(h.state().stage_status(Stage::Compile), Status::Done(_)));
    let marks = h.state().compile.card_marks(&h.state().theme.quant);
    assert!(marks[&soft].1.starts_with("CPU"), "{:?}", marks[&soft]);
    let (_, line) = h
        .state()
        .compile
        .placement_line(Some(Selection::Node(soft)), &h.state().theme.quant)
        .expect("placed");
    assert!(line.contains("a layer the plan keeps in float"), "{line}");
    // A full re-simulation gives the numbers the incremental one gave.
    let incremental = h
        .state()
        .quant
        .session
        .as_ref()
        .expect("s")
        .result
        .as_ref()
        .expect("r")
        .report
        .clone();
    h.get_by_label("Run simulate").click();
    settle(&mut h);
    let r = h.state().quant.session.as_ref().expect("s").result.as_ref().expect("r");
    assert!(r.recomputed > 0);
    for (a, b) in incremental.tensors.iter().zip(&r.report.tensors) {
        assert_eq!(a.name, b.name);
        assert!(
            a.sqnr_cumulative_db == b.sqnr_cumulative_db
                || (a.sqnr_cumulative_db.unwrap_or(0.0) - b.sqnr_cumulative_db.unwrap_or(0.0)).abs() < 1e-9,
            "{}: {:?} vs {:?}",
            a.name,
            a.sqnr_cumulative_db,
            b.sqnr_cumulative_db
        );
    }
    // Changing the preprocessing or the optimizer's passes makes the calibration stale.
    h.state_mut().quant.setup.preprocess = "scale=1/255".into();
    h.step();
    assert!(matches!(h.state().stage_status(Stage::Calibrate), Status::Stale(_)));
    assert!(matches!(h.state().stage_status(Stage::Simulate), Status::Stale(_)));
    h.state_mut().quant.setup.preprocess = String::new();
    h.state_mut().optimizer.passes[0].2 = false;
    h.step();
    let Status::Stale(why) = h.state().stage_status(Stage::Calibrate) else {
        panic!("{:?}", h.state().stage_status(Stage::Calibrate))
    };
    assert!(why.contains("passes"), "{why}");
    h.state_mut().optimizer.passes[0].2 = true;
    h.step();
    assert!(matches!(h.state().stage_status(Stage::Calibrate), Status::Done(_)));
    // Cancel while calibrating.
    h.get_by_label("Run calibrate").click();
    h.step();
    h.step();
    assert!(matches!(h.state().stage_status(Stage::Calibrate), Status::Running(..)));
    h.get_by_label("Cancel calibrate").click();
    h.step();
    assert!(h.state().quant.session.is_none());
    assert!(matches!(h.state().stage_status(Stage::Calibrate), Status::Waiting(_)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sensitivity_bars_and_an_applied_pareto_point_survive_a_reopen() {
    let (mut h, dir) = quantized("pareto");
    let before = output_db(h.state()).expect("inexact");
    common::click_in_view(&mut h, "Measure sensitivity");
    settle(&mut h);
    let st = h.state();
    let s = st.quant.session.as_ref().expect("s");
    let (_, a) = s.sensitivity.as_ref().expect("a sensitivity analysis");
    let gains = npu_studio::studio::quantize::sensitivity_gains(a, a.full.sqnr_db.expect("inexact"));
    assert!(gains.len() >= 5 && gains[0].1 > 0.5, "{gains:?}");
    assert!(
        (a.full.sqnr_db.expect("db") - before).abs() < 1e-6,
        "the analysis measures the current plan"
    );
    // Six photos: the ranking is made on four and checked on two, and the panel says how
    // it held.
    assert_eq!(a.held_back, 2);
    let check = a.rank_check.as_ref().expect("a ranking check").summary(2);
    assert!(h.query_by_label(&check).is_some(), "no line {check:?}");
    // The mixed-precision curve, and one of its points applied.
    common::click_in_view(&mut h, "Find mixed precision");
    settle(&mut h);
    let (k, point_db, promoted) = {
        let s = h.state().quant.session.as_ref().expect("s");
        let (_, m) = s.pareto.as_ref().expect("a curve");
        assert!(m.curve.len() >= 4, "{:?}", m.curve);
        for c in &m.curve {
            println!("curve: {} promoted, {:?} dB", c.promoted, c.sqnr_db);
        }
        println!("ranking: {:?}", &m.ranking[..6]);
        assert_eq!(m.plans.len(), m.curve.len());
        // The search weighs the latency on the Compile stage's target (the default one).
        assert_eq!(m.cost, "latency on ethos-u55-128");
        assert!(
            m.curve.iter().all(|c| c.latency_us.is_some_and(|us| us > 0.0)),
            "{:?}",
            m.curve
        );
        // Six photos: the search fits on four and validates on two.
        assert_eq!((m.fit_samples, m.held_back), (4, 2));
        let c = &m.curve[3];
        (3, (c.sqnr_db.expect("db"), c.held_db.expect("db")), c.promoted)
    };
    h.state_mut().quant.pareto_point = k;
    h.step();
    assert!(h.query_by_label("Apply this point").is_some());
    common::click_in_view(&mut h, "Apply this point");
    settle(&mut h);
    let applied = output_db(h.state()).expect("db");
    let (fit_db, held_db) = point_db;
    println!(
        "cls: w8a8 {before:.2} dB; point {k} ({promoted} promoted) {fit_db:.2} dB fitting, {held_db:.2} dB held back, applied {applied:.2} dB"
    );
    // On all six photos (one output): between its figures on the two parts.
    assert!(
        applied >= fit_db.min(held_db) - 1e-6 && applied <= fit_db.max(held_db) + 1e-6,
        "{applied} vs the curve's {fit_db} and {held_db}"
    );
    // (On cls, 16-bit activations without bias correction lose to 8-bit ones: the curve is not
    // monotonic, and it is shown as measured.)
    assert!((applied - before).abs() > 0.01);
    assert!(h.state().quant.base().is_some());
    // Undo takes the point back, redo applies it again.
    h.state_mut().send(Command::Undo);
    settle(&mut h);
    assert_eq!(output_db(h.state()), Some(before));
    h.state_mut().send(Command::Redo);
    settle(&mut h);
    assert_eq!(output_db(h.state()), Some(applied));
    // Saved, closed, reopened: the same numbers.
    let project = dir.join("cls.npuproj.ron");
    h.state_mut().send(Command::SaveProject(Some(project.clone())));
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    drop(h);
    let mut h = common::harness(npu_studio::studio::Settings::default());
    h.state_mut().send(Command::OpenProject(project));
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    assert_eq!(output_db(h.state()), Some(applied), "reopened");
    assert!(h.state().quant.base().is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Absorb bias, SmoothQuant, SeqMSE and GPTQ boxes: the studio's calibration runs all
/// four, shows their one-line verdicts, and what a kept step chose is in the simulated plan
/// (cls has no LayerNorm: SmoothQuant says so).
#[test]
fn absorb_seq_mse_smooth_quant_and_gptq_boxes_run_and_show_their_verdicts() {
    let dir = cls_samples("seqmse");
    let mut h = open(&ppocr("cls"));
    h.state_mut().quant.open = true;
    h.state_mut().quant.setup.data = dir.display().to_string();
    h.state_mut().quant.setup.preset = "w4a16".into();
    h.step();
    common::click_in_view(&mut h, "SeqMSE weights");
    common::click_in_view(&mut h, "SmoothQuant");
    common::click_in_view(&mut h, "Absorb bias");
    common::click_in_view(&mut h, "GPTQ weights");
    h.step();
    let setup = &h.state().quant.setup;
    assert!(
        setup.seq_mse && setup.smooth_quant && setup.absorb_bias && setup.gptq,
        "the boxes are ticked"
    );
    common::click_in_view(&mut h, "Calibrate & simulate");
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    let (text, clips, shifts, codes) = {
        let s = h.state().quant.session.as_ref().expect("a session");
        let text = s.refinement.clone().expect("the verdict lines");
        let plan = &s.result.as_ref().expect("simulated").plan;
        (text, plan.weight_clip.len(), plan.absorption.len(), plan.gptq.len())
    };
    println!("{text}; {clips} layers with factors, {shifts} with shifts, {codes} with GPTQ codes");
    assert!(h.query_by_label(&text).is_some(), "no label {text:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("Bias absorption: 12 conv pairs"), "{text}");
    assert_eq!(lines[0].ends_with("kept"), shifts > 0, "{text}");
    assert!(lines[1].starts_with("SmoothQuant: no LayerNorm"), "{text}");
    let line = lines[2];
    assert!(line.starts_with("SeqMSE weight ranges:"), "{text}");
    if line.ends_with("kept") {
        assert!(clips > 0);
    } else {
        assert!(line.ends_with("dropped") && clips == 0, "{line}; {clips}");
    }
    let line = lines[3];
    assert!(line.starts_with("GPTQ weight codes:"), "{text}");
    if line.ends_with("kept") {
        assert!(codes > 0);
    } else {
        assert!(line.ends_with("dropped") && codes == 0, "{line}; {codes}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn calibration_preview_and_recipe_files() {
    let dir = cls_samples("preview");
    let mut h = common::cls_with_samples_typed(dir.to_str().expect("utf-8"));
    settle(&mut h);
    let p = h.state().quant.preview.as_ref().expect("a preview");
    let img = p.image.as_ref().expect("an image");
    assert_eq!(img.size, [192, 48], "{}", p.text);
    assert!(p.text.contains("[1, 3, 48, 192]"), "{}", p.text);
    // The form edits the spec: BGR and NHWC, and the preview follows.
    let rgb = img.clone();
    h.get_by_label("Form…").click();
    h.step();
    h.step();
    h.get_by_label("BGR").click();
    h.step();
    assert_eq!(h.state().quant.setup.preprocess, "color=bgr");
    settle(&mut h);
    let p = h.state().quant.preview.as_ref().expect("a preview");
    assert_eq!(p.key.1, "color=bgr");
    let bgr = p.image.as_ref().expect("an image");
    assert_eq!(bgr.pixels[0].r(), rgb.pixels[0].b(), "red and blue swap");
    assert_eq!(bgr.pixels[0].b(), rgb.pixels[0].r());
    h.get_by_label("RGB").click();
    h.step();
    assert_eq!(h.state().quant.setup.preprocess, "");
    // A folder that does not exist: the preview says why.
    h.state_mut().quant.setup.data = dir.join("missing").display().to_string();
    settle(&mut h);
    let p = h.state().quant.preview.as_ref().expect("a preview");
    assert!(p.image.is_none() && p.text.contains("missing"), "{}", p.text);
    h.state_mut().quant.setup.data = dir.display().to_string();
    // A recipe file loaded before the calibration: every Conv at int16, one override at
    // fp16 (names of the optimized graph).
    let (conv, other) = {
        let model = h.state().loaded.as_ref().expect("l").model.clone();
        let opt = npu_core::passes::optimize(&model, &npu_core::passes::Options::default())
            .expect("optimizes")
            .model;
        let names: Vec<String> = opt
            .graph
            .nodes
            .iter()
            .filter(|n| n.op.ends_with("Conv"))
            .map(|n| n.name.clone())
            .collect();
        (names.len(), names[0].clone())
    };
    let recipe = format!(
        "(preset: \"w8a8\", rules: [(op: Some(\"Conv\"), precision: \"int16\")], overrides: {{\"{other}\": \"fp16\"}})"
    );
    let file = dir.join("r.ron");
    std::fs::write(&file, recipe).expect("write");
    h.state_mut().quant.show_recipe = true;
    for _ in 0..4 {
        h.step();
    }
    h.get_by_label("Recipe file:").click();
    h.step();
    h.get_by_label("Recipe file:").type_text(file.to_str().expect("utf-8"));
    h.step();
    h.get_by_label("Load recipe").click();
    h.step();
    let note = h.state().quant.rules_note.clone().expect("a note");
    assert!(note.contains("once the plan is calibrated"), "{note}");
    assert!(h.state().quant.layers().is_empty());
    // The calibration applies it.
    h.state_mut().start_quantization();
    settle(&mut h);
    let q = &h.state().quant;
    assert_eq!(q.layers().len(), conv, "{:?}", q.rules_note);
    assert_eq!(q.layers().get(&other), Some(&LayerPrecision::FP16));
    assert!(h.query_by_label(&format!("Remove override {other}")).is_some());
    // A file that is not a recipe: the editor says which file and why.
    let bad = dir.join("bad.ron");
    std::fs::write(&bad, "(preset: 3)").expect("write");
    h.state_mut().quant.recipe_path = bad.display().to_string();
    h.get_by_label("Load recipe").click();
    h.step();
    let note = h.state().quant.rules_note.clone().expect("a note");
    assert!(note.contains("bad.ron") && note.contains("not a recipe"), "{note}");
    assert_eq!(h.state().quant.layers().len(), conv, "nothing changed");
    // Saved back: the same rules, and the overrides it now holds.
    let back = dir.join("back.ron");
    h.state_mut().quant.recipe_path = back.display().to_string();
    h.get_by_label("Save recipe").click();
    settle(&mut h);
    assert_eq!(
        h.state().quant.rules_note.as_deref(),
        Some(format!("saved to {}", back.display()).as_str())
    );
    let r =
        npu_core::quant::recipe::Recipe::parse_ron(&std::fs::read_to_string(&back).expect("saved")).expect("a recipe");
    assert_eq!(r.rules, h.state().quant.rules);
    assert_eq!(r.overrides.len(), conv);
    assert_eq!(r.overrides.get(&other).map(String::as_str), Some("fp16"));
    // Removing an override is an edit of its own.
    let first = h.state().quant.layers().keys().next().expect("an override").clone();
    h.get_by_label(&format!("Remove override {first}")).click();
    settle(&mut h);
    assert_eq!(h.state().quant.layers().get(&first), None);
    assert_eq!(h.state().quant.layers().len(), conv - 1);
    let _ = std::fs::remove_dir_all(&dir);
}
