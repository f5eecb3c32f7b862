//! What a new user meets on a detector with dynamic batch, height and width (the YOLO-family
//! model `scripts/make_yolo_like.py` writes) and while quantizing: the quantization panel
//! keeps its controls in place and the height the user gives it, the first heatmap is
//! brought into readable view, symbolic shapes print short with the full expression on
//! hover, and MACs are counted at a shape the user or the calibration set gives.

mod common;

use common::{open, ppocr, repo, settle};
use egui::{Event, Modifiers, PointerButton, Pos2};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use npu_studio::studio::commands::{Command, Selection};
use npu_studio::studio::graph_view::BOX_ONLY_BELOW;
use npu_studio::studio::{Settings, Studio};
use std::path::PathBuf;

fn yolo() -> PathBuf {
    let p = repo().join("data/models/yolo_like.onnx");
    assert!(
        p.exists(),
        "{} is missing: run `python3 scripts/make_yolo_like.py`",
        p.display()
    );
    p
}

fn cls_samples(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("npu_dynamic_ui_{name}_{}", std::process::id()));
    common::cls_samples_in(&dir);
    dir
}

/// A drag of the primary button from `a` to `b` over a few frames.
fn drag(h: &mut Harness<'_, Studio>, a: Pos2, b: Pos2) {
    h.event(Event::PointerMoved(a));
    h.step();
    h.event(Event::PointerButton {
        pos: a,
        button: PointerButton::Primary,
        pressed: true,
        modifiers: Modifiers::NONE,
    });
    h.step();
    for k in 1..=6 {
        h.event(Event::PointerMoved(a + (b - a) * (k as f32 / 6.0)));
        h.step();
    }
    h.event(Event::PointerButton {
        pos: b,
        button: PointerButton::Primary,
        pressed: false,
        modifiers: Modifiers::NONE,
    });
    h.step();
    h.step();
}

#[test]
fn the_quantization_panel_keeps_its_controls_and_the_height_the_user_gives_it() {
    let dir = cls_samples("panel");
    let mut h = common::cls_with_samples_typed(dir.to_str().expect("utf-8"));
    settle(&mut h);
    let window = common::SIZE[1];
    let run = h.get_by_label("Calibrate & simulate").rect();
    let height = h.state().settings.quant_panel_height;
    println!("before: run {run:?} canvas {:?} height {height}", h.state().canvas_rect);
    assert_eq!(height, npu_studio::studio::app::QUANT_PANEL_HEIGHT);
    h.get_by_label("Calibrate & simulate").click();
    settle(&mut h);
    assert!(h.state().error.is_none(), "{:?}", h.state().error);
    // The results, the plots and the worst layers arrived; the run button did not move.
    assert!(h.query_by_label("Measure sensitivity").is_some());
    println!(
        "after: run {:?} canvas {:?} height {}",
        h.get_by_label("Calibrate & simulate").rect(),
        h.state().canvas_rect,
        h.state().settings.quant_panel_height
    );
    assert_eq!(
        h.get_by_label("Calibrate & simulate").rect(),
        run,
        "the run button stays put"
    );
    common::click_in_view(&mut h, "Measure sensitivity");
    settle(&mut h);
    assert_eq!(
        h.get_by_label("Calibrate & simulate").rect(),
        run,
        "after the analysis too"
    );
    assert_eq!(h.state().settings.quant_panel_height, height);
    assert!(h.state().canvas_rect.height() >= 0.5 * window - 1.0);
    // In this window the panel already has all it may take (half of the window stays the
    // graph's): dragging its top edge up changes nothing, dragging it down makes it smaller,
    // and the studio remembers that height.
    let x = h.state().canvas_rect.center().x;
    let top = h.state().canvas_rect.bottom();
    drag(&mut h, Pos2::new(x, top + 1.0), Pos2::new(x, 60.0));
    settle(&mut h);
    assert_eq!(h.state().canvas_rect.bottom(), top, "no more than half of the window");
    drag(&mut h, Pos2::new(x, top + 1.0), Pos2::new(x, top + 81.0));
    settle(&mut h);
    let smaller = h.state().settings.quant_panel_height;
    let canvas = h.state().canvas_rect.height();
    println!(
        "panel {height} (at most {:.0} here) → {smaller}; canvas {canvas} of {window}",
        window - 24.0 - top
    );
    assert!(canvas > 0.5 * window + 60.0, "the graph got the room: {canvas}");
    assert!(smaller < height - 60.0, "{height} → {smaller}");
    assert!(h.get_by_label("Calibrate & simulate").rect().top() > run.top() + 60.0);
    // A studio started with these settings opens the panel at the remembered height.
    let settings = Settings {
        quant_panel_height: smaller,
        ..h.state().settings.clone()
    };
    drop(h);
    let mut h = common::harness(settings);
    h.state_mut().send(Command::Open(ppocr("cls")));
    settle(&mut h);
    h.key_press(egui::Key::Q);
    settle(&mut h);
    let panel = h.state().canvas_rect.bottom();
    assert!(
        (panel - (top + 80.0)).abs() < 2.0,
        "the panel reopens {smaller} high: the graph ends at {panel}"
    );
    assert!((h.state().settings.quant_panel_height - smaller).abs() < 0.5);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_first_heatmap_is_brought_into_readable_view() {
    let dir = cls_samples("worst");
    let mut h = open(&ppocr("cls"));
    h.state_mut().send(Command::FitView);
    settle(&mut h);
    let fit = h.state().view.zoom;
    assert!(fit < BOX_ONLY_BELOW, "cls fitted is a column of specks: zoom {fit}");
    h.state_mut().quant.open = true;
    h.state_mut().quant.setup.data = dir.display().to_string();
    h.state_mut().send(Command::StartQuantization);
    settle(&mut h);
    let st = h.state();
    let (worst, db) = st.quant.worst_layer().expect("a simulated plan");
    assert_eq!(
        st.selection,
        Some(Selection::Node(worst)),
        "the worst layer is selected"
    );
    assert!(st.view.zoom >= 1.0, "readable: zoom {}", st.view.zoom);
    let card = st.rect_of(Selection::Node(worst)).expect("its card");
    let on_screen = npu_studio::studio::graph_view::Xf::new(st.canvas_rect, &st.view).rect(card);
    assert!(
        st.canvas_rect.contains_rect(on_screen),
        "{on_screen:?} in {:?}",
        st.canvas_rect
    );
    assert!(
        st.status.contains("worst layer") && st.status.contains("F fits"),
        "{}",
        st.status
    );
    println!("{} ({db:.1} dB)", st.status);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn symbolic_shapes_print_short_with_the_expression_on_hover() {
    let mut h = open(&yolo());
    let out = {
        let l = h.state().loaded.as_ref().expect("loaded");
        let g = &l.model.graph;
        let v = g.outputs[0];
        g.values[v].producer.expect("output0 has a producer")
    };
    h.state_mut().send(Command::Reveal(Selection::Node(out)));
    settle(&mut h);
    // batch × 84 × (a three-line sum of products of nested floors): one letter. The three
    // scales read by the Concat print the same way; the output is listed last.
    let label = h
        .get_all_by_label("f32 [batch×84×N]")
        .last()
        .expect("the output's shape");
    assert!(
        h.query_all_by_label_contains("floor(").next().is_none(),
        "no expression is spelled out until hovered"
    );
    label.hover();
    for _ in 0..40 {
        h.step();
    }
    let tip = h
        .query_all_by_label_contains("N = (floor(floor(floor(height/2 - 1/2)/2)/2) + 1)")
        .next()
        .map(|n| n.rect());
    assert!(tip.is_some(), "the hover shows what N stands for");
}

#[test]
fn macs_are_counted_at_the_shape_given_and_say_which() {
    let mut h = open(&yolo());
    assert!(
        h.query_by_label_contains("The inputs are dynamic, so the MACs are a lower bound")
            .is_some(),
        "without a shape the count says why it is low, and what to do"
    );
    let model = h.state().loaded.as_ref().expect("loaded").model.clone();
    let at_320: std::collections::HashMap<String, Vec<usize>> =
        [("images".to_string(), vec![1, 3, 320, 320])].into_iter().collect();
    let (want, partial) = npu_studio::info::macs_at(&model, &at_320).expect("images is an input");
    // onnx's own shape inference counted them when the model was written.
    let oracle: u64 = model.meta.props["conv_macs_at_1x3x320x320"].parse().expect("a count");
    assert_eq!((want, partial), (oracle, false), "every shape known at 1×3×320×320");
    // Typed in the inspector.
    h.get_by_label("MACs at input shape:").click();
    h.step();
    h.get_by_label("MACs at input shape:").type_text("images=1x3x320x320");
    settle(&mut h);
    assert!(h.query_by_label(&want.to_string()).is_some(), "{want}");
    assert!(
        h.query_by_label("MACs at images=1×3×320×320 (the shape typed below)")
            .is_some()
    );
    // From the calibration samples (the photos, resized to 256×256), once nothing is typed.
    h.state_mut().inspector.macs_shape.clear();
    h.state_mut().quant.open = true;
    h.state_mut().quant.setup.data = repo().join("data/images").display().to_string();
    h.state_mut().quant.setup.preprocess = "size=256x256".into();
    settle(&mut h);
    let at_256: std::collections::HashMap<String, Vec<usize>> =
        [("images".to_string(), vec![1, 3, 256, 256])].into_iter().collect();
    let (want, _) = npu_studio::info::macs_at(&model, &at_256).expect("images is an input");
    assert!(h.query_by_label(&want.to_string()).is_some(), "{want}");
    assert!(
        h.query_by_label("MACs at images=1×3×256×256 (the calibration samples' shape)")
            .is_some()
    );
    // The command line counts the same at the same shape.
    let mut fixed = (*model).clone();
    npu_core::import::shapes::fix_inputs(&mut fixed, &at_256).expect("fix");
    assert_eq!(npu_core::sim::count_macs(&fixed).0, want);
}
