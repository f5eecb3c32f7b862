//! Rendered images of the studio (wgpu on a software renderer): snapshot tests under
//! `tests/snapshots/`, and the README's screenshots under `screenshots/`, both compared
//! with the committed PNGs. Update with `UPDATE_SNAPSHOTS=1`.

mod common;

use common::{open, ppocr, repo, sample, settle};
use egui_kittest::SnapshotOptions;
use npu_studio::studio::commands::{Command, Selection};

fn node(h: &egui_kittest::Harness<'_, npu_studio::studio::Studio>, name: &str) -> usize {
    let l = h.state().loaded.as_ref().expect("loaded");
    l.model
        .graph
        .nodes
        .iter()
        .position(|n| n.name == name)
        .unwrap_or_else(|| panic!("no node {name}"))
}

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
