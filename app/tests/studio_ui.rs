//! The studio driven as a user would, by accessibility labels (no GPU needed).

mod common;

use common::{click_at, clicks_at, node, open, ppocr, sample, settle};
use egui_kittest::kittest::Queryable;
use npu_studio::graph::scene::BoxKind;
use npu_studio::info::node_info;
use npu_studio::studio::commands::{Command, Selection};

/// True when some accessibility node carries exactly this label.
fn has(h: &egui_kittest::Harness<'_, npu_studio::studio::Studio>, label: &str) -> bool {
    h.query_all_by_label(label).next().is_some()
}

fn selected_node_name(h: &egui_kittest::Harness<'_, npu_studio::studio::Studio>) -> Option<String> {
    let st = h.state();
    match st.selection? {
        Selection::Node(n) => Some(st.loaded.as_ref()?.model.graph.nodes[n].name.clone()),
        _ => None,
    }
}

#[test]
fn search_selects_a_node_and_the_inspector_shows_it() {
    let mut h = open(&sample());
    // Nothing selected: model properties.
    assert!(has(&h, "Model properties") && has(&h, "npu-studio sample generator"));
    // Ctrl+F focuses the search box; typing and Enter jump to the first match.
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::F);
    h.step();
    h.get_by_label("Search").type_text("stage4/se/fc1");
    h.step();
    h.key_press(egui::Key::Enter);
    settle(&mut h);
    assert_eq!(selected_node_name(&h).as_deref(), Some("/backbone/stage4/se/fc1"));
    // The node, its weight, bias and output tensor.
    assert_eq!(h.state().search.hits.len(), 4);
    assert!(has(&h, "1 of 4"));
    let st = h.state();
    let l = st.loaded.as_ref().expect("loaded");
    let n = node(&h, "/backbone/stage4/se/fc1");
    let info = node_info(&l.model, n);
    // Inspector: op, name, every input and output with dtype and shape.
    assert!(has(&h, &info.op) && has(&h, &info.name));
    for t in info.inputs.iter().chain(&info.outputs) {
        assert!(has(&h, &t.name), "{}", t.name);
        assert!(has(&h, &format!("{} [{}]", t.dtype, t.shape.join("×"))), "{}", t.name);
    }
    // The selection is in view.
    let r = st.rect_of(Selection::Node(n)).expect("box");
    let screen = st.canvas_rect.center() + (r.center() - st.view.center) * st.view.zoom;
    assert!(st.canvas_rect.contains(screen), "selected card is off screen");
    // Next match, then back.
    h.get_by_label("Next ▶").click();
    settle(&mut h);
    assert!(has(&h, "2 of 4"));
    h.get_by_label("◀ Previous").click();
    settle(&mut h);
    assert_eq!(selected_node_name(&h).as_deref(), Some("/backbone/stage4/se/fc1"));
}

#[test]
fn tensor_links_jump_to_producer_and_weights_show_statistics() {
    let mut h = open(&sample());
    let n = node(&h, "/backbone/stage2/pw/conv");
    h.state_mut().send(Command::Reveal(Selection::Node(n)));
    settle(&mut h);
    // The data input links to its producer.
    h.get_by_label("/backbone/stage2/dw/act_out").click();
    settle(&mut h);
    assert_eq!(selected_node_name(&h).as_deref(), Some("/backbone/stage2/dw/act"));
    // Back to the conv; its weight shows statistics and a histogram.
    h.state_mut().send(Command::Reveal(Selection::Node(n)));
    settle(&mut h);
    h.get_by_label("/backbone/stage2/pw/conv.weight").click();
    settle(&mut h);
    assert!(matches!(h.state().selection, Some(Selection::Value(_))));
    h.get_by_label("Weight");
    for k in ["count", "min", "max", "mean", "std"] {
        assert!(has(&h, k), "{k}");
    }
    // Values computed in f64 from the weight itself.
    let (min, count) = {
        let l = h.state().loaded.as_ref().expect("loaded");
        let v = l
            .model
            .graph
            .value_id("/backbone/stage2/pw/conv.weight")
            .expect("weight");
        let t = npu_studio::studio::inspector::constant_of(&l.model, v).expect("constant");
        let a = t.to_f64();
        (a.iter().copied().fold(f64::INFINITY, f64::min), a.len())
    };
    assert!(has(&h, &format!("{min:.6}")) && has(&h, &count.to_string()));
    // The consumer link goes back to the conv.
    h.get_by_label("/backbone/stage2/pw/conv (Conv)").click();
    settle(&mut h);
    assert_eq!(selected_node_name(&h).as_deref(), Some("/backbone/stage2/pw/conv"));
}

#[test]
fn scopes_collapse_and_expand_from_the_outline() {
    let mut h = open(&sample());
    let (stage2, cards) = {
        let l = h.state().loaded.as_ref().expect("loaded");
        let s = l
            .doc
            .scopes
            .iter()
            .position(|s| s.path == "backbone/stage2")
            .expect("scope");
        let cards: Vec<usize> = (0..l.doc.items.len())
            .filter(|&i| l.doc.scope_path(l.doc.items[i].scope).contains(&s))
            .collect();
        (s, cards)
    };
    let boxes_before = h
        .state()
        .loaded
        .as_ref()
        .map(|l| l.scene.boxes.len())
        .unwrap_or_default();
    h.get_by_label("Collapse backbone/stage2").click();
    settle(&mut h);
    {
        let l = h.state().loaded.as_ref().expect("loaded");
        let b = l.scene.scope_box[&stage2];
        assert!(matches!(l.scene.boxes[b].kind, BoxKind::Collapsed(_)));
        assert!(cards.iter().all(|&i| l.scene.item_box[i] == b));
        assert!(l.scene.boxes.len() < boxes_before);
    }
    h.get_by_label("Expand backbone/stage2").click();
    settle(&mut h);
    {
        let l = h.state().loaded.as_ref().expect("loaded");
        assert!(matches!(
            l.scene.boxes[l.scene.scope_box[&stage2]].kind,
            BoxKind::Frame(_)
        ));
        assert_eq!(l.scene.boxes.len(), boxes_before);
    }
    // Collapse all, then search reveals a node inside by expanding its scopes.
    h.get_by_label("Collapse all").click();
    settle(&mut h);
    h.get_by_label("Search").focus();
    h.get_by_label("Search").type_text("stage3/pw/conv");
    h.step();
    h.key_press(egui::Key::Enter);
    settle(&mut h);
    let l = h.state().loaded.as_ref().expect("loaded");
    let n = node(&h, "/backbone/stage3/pw/conv");
    let item = l.doc.node_item[n].expect("card");
    assert!(
        matches!(l.scene.boxes[l.scene.item_box[item]].kind, BoxKind::Item(_)),
        "the card is visible"
    );
}

#[test]
fn a_bad_file_shows_an_error_and_keeps_the_open_model() {
    let mut h = open(&sample());
    let bad = std::env::temp_dir().join(format!("npu-studio-bad-{}.onnx", std::process::id()));
    std::fs::write(&bad, b"\x08\x07\x12\xffnot a model").expect("write");
    h.state_mut().send(Command::Open(bad.clone()));
    settle(&mut h);
    let _ = std::fs::remove_file(&bad);
    let err = h.state().error.clone().expect("an error");
    assert!(err.contains(&bad.display().to_string()), "error names the file: {err}");
    assert!(h.state().loaded.as_ref().is_some_and(|l| l.path == sample()));
    assert!(has(&h, "The model that was open stays open."));
    h.get_by_label("OK").click();
    settle(&mut h);
    assert!(h.state().error.is_none());
}

#[test]
fn keyboard_shortcuts_zoom_fit_and_help() {
    let mut h = open(&sample());
    let z0 = h.state().view.zoom;
    h.key_press(egui::Key::Plus);
    settle(&mut h);
    assert!(h.state().view.zoom > z0 * 1.2);
    h.key_press(egui::Key::Minus);
    h.key_press(egui::Key::Minus);
    settle(&mut h);
    assert!(h.state().view.zoom < z0);
    h.key_press(egui::Key::F);
    settle(&mut h);
    let st = h.state();
    let b = st.loaded.as_ref().expect("loaded").scene.bounds;
    let vis = npu_studio::studio::graph_view::visible_graph_rect(st.canvas_rect, &st.view);
    assert!(vis.expand(1.0).contains_rect(b), "fit shows the whole graph");
    h.key_press(egui::Key::F1);
    settle(&mut h);
    assert!(has(&h, "search nodes, ops and tensors"));
}

#[test]
fn svg_export_writes_the_visible_cards() {
    let mut h = open(&sample());
    let out = std::env::temp_dir().join(format!("npu-studio-view-{}.svg", std::process::id()));
    h.state_mut().send(Command::Export(
        npu_studio::studio::commands::ExportFormat::Svg,
        Some(out.clone()),
    ));
    settle(&mut h);
    let svg = std::fs::read_to_string(&out).expect("svg written");
    let _ = std::fs::remove_file(&out);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains(">Conv<") && svg.contains("image"), "cards in the SVG");
}

/// Every node of the PP-OCR models can be selected, is shown in view, and the inspector
/// shows what `npu-studio info --json --nodes` reports.
#[test]
fn every_ppocr_node_is_selectable_and_matches_info_json() {
    for which in ["det", "cls", "rec"] {
        let path = ppocr(which);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_npu-studio"))
            .args(["info", "--json", "--nodes"])
            .arg(&path)
            .output()
            .expect("run npu-studio info");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let nodes = json["node_details"].as_array().expect("node_details");
        let mut h = open(&path);
        assert_eq!(
            nodes.len(),
            h.state().loaded.as_ref().map_or(0, |l| l.model.graph.nodes.len())
        );
        for (i, n) in nodes.iter().enumerate() {
            h.state_mut().send(Command::Reveal(Selection::Node(i)));
            h.step();
            h.step();
            let st = h.state();
            assert_eq!(st.selection, Some(Selection::Node(i)));
            let r = st.rect_of(Selection::Node(i)).expect("every node has a box");
            let screen = st.canvas_rect.center() + (r.center() - st.view.center) * st.view.zoom;
            assert!(st.canvas_rect.contains(screen), "{which}: node {i} not in view");
            let name = n["name"].as_str().expect("name");
            let op = n["op"].as_str().expect("op");
            assert!(has(&h, name), "{which}: inspector lacks name {name}");
            assert!(has(&h, op), "{which}: inspector lacks op {op} of {name}");
            for (k, v) in n["attributes"].as_object().expect("attributes") {
                assert!(has(&h, k), "{which}: {name} lacks attribute {k}");
                assert!(has(&h, v.as_str().unwrap_or_default()), "{which}: {name}.{k} value");
            }
            for t in n["inputs"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(n["outputs"].as_array().into_iter().flatten())
            {
                let tn = t["name"].as_str().unwrap_or_default();
                if tn.is_empty() {
                    continue;
                }
                let shape: Vec<String> = t["shape"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|d| d.as_str().map(String::from))
                    .collect();
                let dtype = t["dtype"].as_str().unwrap_or_default();
                // Long symbolic dims (`p2o.DynamicDimension.0`) print as letters, in full on hover.
                let text = if shape.is_empty() {
                    format!("{dtype} scalar")
                } else {
                    format!("{dtype} [{}]", npu_studio::info::short_shape(&shape).0)
                };
                assert!(has(&h, tn), "{which}: {name} lacks tensor {tn}");
                assert!(has(&h, &text), "{which}: {name} lacks '{text}' for {tn}");
            }
        }
    }
}

fn screen_of(h: &egui_kittest::Harness<'_, npu_studio::studio::Studio>, box_index: usize) -> egui::Pos2 {
    let st = h.state();
    let r = st.loaded.as_ref().expect("loaded").scene.boxes[box_index].rect;
    let xf = npu_studio::studio::graph_view::Xf::new(st.canvas_rect, &st.view);
    // A point inside the card's header (a frame's handle is its header too).
    xf.pos(r.center_top() + egui::vec2(0.0, 8.0))
}

#[test]
fn clicking_cards_selects_and_double_clicking_a_scope_toggles_it() {
    let mut h = open(&sample());
    // Click the stem conv's card.
    let (item_box, n) = {
        let l = h.state().loaded.as_ref().expect("loaded");
        let n = node(&h, "/backbone/stem/conv");
        (l.scene.item_box[l.doc.node_item[n].expect("card")], n)
    };
    h.state_mut().send(Command::Reveal(Selection::Node(n)));
    settle(&mut h);
    h.state_mut().send(Command::Select(None));
    settle(&mut h);
    let canvas = h.state().canvas_rect;
    let p = screen_of(&h, item_box);
    click_at(&mut h, p);
    settle(&mut h);
    assert_eq!(h.state().selection, Some(Selection::Node(n)));
    assert_eq!(h.state().canvas_rect, canvas, "the inspector kept its width");
    // Clicking empty canvas clears the selection.
    let empty = h.state().canvas_rect.left_top() + egui::vec2(5.0, 5.0);
    click_at(&mut h, empty);
    settle(&mut h);
    assert_eq!(h.state().selection, None);
    // Double-clicking the stem's frame header collapses it; double-clicking the box expands it.
    let stem = {
        let l = h.state().loaded.as_ref().expect("loaded");
        l.doc
            .scopes
            .iter()
            .position(|s| s.path == "backbone/stem")
            .expect("scope")
    };
    for expect_collapsed in [true, false] {
        let b = h.state().loaded.as_ref().expect("loaded").scene.scope_box[&stem];
        let p = screen_of(&h, b);
        // Let half a second pass so the earlier clicks do not make this a triple click.
        h.run_steps(30);
        clicks_at(&mut h, p, 2);
        settle(&mut h);
        let l = h.state().loaded.as_ref().expect("loaded");
        assert_eq!(l.collapsed.contains(&stem), expect_collapsed);
        let kind = l.scene.boxes[l.scene.scope_box[&stem]].kind;
        assert_eq!(matches!(kind, BoxKind::Collapsed(_)), expect_collapsed, "{kind:?}");
    }
}

fn wheel(h: &egui_kittest::Harness<'_, npu_studio::studio::Studio>, delta: egui::Vec2, modifiers: egui::Modifiers) {
    h.event(egui::Event::MouseWheel {
        unit: egui::MouseWheelUnit::Point,
        delta,
        phase: egui::TouchPhase::Move,
        source: egui::MouseWheelSource::Wheel,
        modifiers,
    });
}

#[test]
fn drag_and_scroll_pan_and_ctrl_scroll_zooms_about_the_pointer() {
    let mut h = open(&sample());
    let c = h.state().canvas_rect.center();
    // Drag right and down by (100, 50) screen points: the view moves the other way.
    let before = h.state().view;
    h.event(egui::Event::PointerMoved(c));
    h.event(egui::Event::PointerButton {
        pos: c,
        button: egui::PointerButton::Primary,
        pressed: true,
        modifiers: egui::Modifiers::NONE,
    });
    h.step();
    for k in 1..=10 {
        h.event(egui::Event::PointerMoved(c + egui::vec2(10.0, 5.0) * k as f32));
        h.step();
    }
    h.event(egui::Event::PointerButton {
        pos: c + egui::vec2(100.0, 50.0),
        button: egui::PointerButton::Primary,
        pressed: false,
        modifiers: egui::Modifiers::NONE,
    });
    settle(&mut h);
    let moved = (before.center - h.state().view.center) * before.zoom;
    assert!(
        (moved - egui::vec2(100.0, 50.0)).length() < 1.0,
        "drag moved the view by {moved:?}"
    );
    // Plain scroll pans.
    let before = h.state().view;
    h.event(egui::Event::PointerMoved(c));
    wheel(&h, egui::vec2(0.0, -120.0), egui::Modifiers::NONE);
    h.run_steps(40);
    assert!(
        h.state().view.center.y > before.center.y + 10.0,
        "scrolling down pans down"
    );
    assert_eq!(h.state().view.zoom, before.zoom);
    // Ctrl+scroll zooms in, keeping the graph point under the pointer in place.
    let p = c + egui::vec2(120.0, -80.0);
    h.event(egui::Event::PointerMoved(p));
    h.step();
    let st = h.state();
    let under = npu_studio::studio::graph_view::Xf::new(st.canvas_rect, &st.view).graph(p);
    let z0 = st.view.zoom;
    wheel(&h, egui::vec2(0.0, 120.0), egui::Modifiers::CTRL);
    h.run_steps(40);
    let st = h.state();
    assert!(
        st.view.zoom > z0 * 1.05,
        "ctrl+scroll zooms in: {z0} → {}",
        st.view.zoom
    );
    let still = npu_studio::studio::graph_view::Xf::new(st.canvas_rect, &st.view).graph(p);
    assert!(
        (still - under).length() < 1.0,
        "the point under the pointer moved by {:?}",
        still - under
    );
}
