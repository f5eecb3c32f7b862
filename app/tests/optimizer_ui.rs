//! The graph optimizer in the studio, driven as a user would: open the panel with `O`,
//! turn a pass off, run, step through the rewrites, and click a rewritten node to find
//! the nodes it came from.

mod common;

use common::{click_at, open, ppocr, repo, sample, settle};
use egui_kittest::SnapshotOptions;
use egui_kittest::kittest::Queryable;
use npu_core::passes::{self, op_counts};
use npu_studio::studio::commands::{Command, Selection};

#[test]
fn run_step_and_link_before_and_after() {
    let mut h = open(&sample());
    h.key_press(egui::Key::O);
    // The panel appears, then takes its height.
    settle(&mut h);
    assert!(h.state().optimizer.open, "O opens the optimizer panel");
    // Turn one pass off, then run.
    h.get_by_label("fuse-activation").click();
    settle(&mut h);
    let off: Vec<&str> = h
        .state()
        .optimizer
        .passes
        .iter()
        .filter(|p| !p.2)
        .map(|p| p.0)
        .collect();
    assert_eq!(off, ["fuse-activation"], "clicking a pass turns it off");
    h.get_by_label("Run passes").click();
    settle(&mut h);
    let (original, total) = {
        let st = h.state();
        assert!(st.error.is_none(), "{:?}", st.error);
        let run = st.optimizer.run.as_ref().expect("a finished run");
        (st.loaded.as_ref().expect("loaded").model.clone(), run.patches.len())
    };
    // The panel's result is what the core gives with the same passes.
    let names: Vec<String> = passes::all_passes()
        .iter()
        .map(|p| p.name().to_owned())
        .filter(|n| n != "fuse-activation")
        .collect();
    let want = passes::optimize(
        &original,
        &passes::Options {
            passes: passes::select(&names).expect("names"),
            ..passes::Options::default()
        },
    )
    .expect("optimize");
    assert_eq!(total, want.patches.len());
    {
        let after = h
            .state()
            .optimizer
            .after
            .as_ref()
            .expect("the after pane shows the last step");
        assert_eq!(after.step, total);
        assert_eq!(op_counts(&after.model), op_counts(&want.model));
        assert!(!op_counts(&after.model).contains_key("BatchNormalization"));
        assert!(
            !op_counts(&after.model).contains_key("FusedConv"),
            "fuse-activation was off"
        );
        // Every BatchNorm of the original is marked as gone, its conv as rewritten.
        for (n, node) in original.graph.nodes.iter().enumerate() {
            if node.op == "BatchNormalization" {
                assert!(
                    after.rewritten_before.contains(&n),
                    "{} is rewritten into its conv",
                    node.name
                );
            }
        }
    }
    let summary = format!(
        "{} → {} nodes in {total} rewrites, {} rounds",
        original.graph.nodes.len(),
        want.model.graph.nodes.len(),
        want.rounds
    );
    assert!(h.query_by_label(&summary).is_some(), "summary '{summary}' shown");
    // Back to the start, then one step forward: the log line of step 1 shows.
    h.get_by_label("First").click();
    settle(&mut h);
    assert_eq!(
        h.state()
            .optimizer
            .after
            .as_ref()
            .expect("pane")
            .model
            .graph
            .nodes
            .len(),
        original.graph.nodes.len()
    );
    h.get_by_label("▶").click();
    settle(&mut h);
    let first = &want.log[0];
    assert_eq!(h.state().optimizer.after.as_ref().expect("pane").step, 1);
    assert!(
        h.query_all_by_label_contains(&format!("step 1: {} / {}", first.pass, first.rule))
            .next()
            .is_some(),
        "the log line of step 1"
    );
    h.get_by_label("Last").click();
    settle(&mut h);
    // Click a conv that absorbed a BatchNorm in the after pane: it is selected there, and
    // the original conv it came from is revealed and selected in the before pane.
    let (pos, origin) = {
        let after = h.state().optimizer.after.as_ref().expect("pane");
        let g = &after.model.graph;
        let n = g
            .nodes
            .iter()
            .position(|n| n.op == "Conv" && n.origin.len() == 2)
            .expect("a conv with a folded BatchNorm");
        let item = after.doc.node_item[n].expect("card");
        let r = after.scene.boxes[after.scene.item_box[item]].rect;
        let xf = npu_studio::studio::graph_view::Xf::new(after.rect, &after.view);
        (
            xf.pos(egui::pos2(r.center().x, r.min.y + 8.0)),
            g.nodes[n].origin.clone(),
        )
    };
    click_at(&mut h, pos);
    settle(&mut h);
    let st = h.state();
    assert!(
        st.optimizer.after_selected.is_some(),
        "the click selects the after node"
    );
    assert_eq!(
        st.selection,
        Some(Selection::Node(origin[0])),
        "the before pane selects its origin"
    );
}

/// The README's screenshot of the before/after view: PP-OCR cls after every rewrite,
/// zoomed on the first blocks, with a fused conv selected.
#[test]
fn readme_optimizer_screenshot() {
    let shots = SnapshotOptions::new().output_path(repo().join("screenshots"));
    let mut h = open(&ppocr("cls"));
    h.state_mut().send(Command::RunOptimizer);
    settle(&mut h);
    // Select a conv that absorbed a BatchNorm and an activation, in both panes.
    let (after_node, origin) = {
        let after = h.state().optimizer.after.as_ref().expect("pane");
        let g = &after.model.graph;
        let n = g
            .nodes
            .iter()
            .position(|n| n.op == "FusedConv" && n.origin.len() >= 3)
            .expect("a fused conv");
        (n, g.nodes[n].origin.clone())
    };
    h.state_mut().send(Command::Reveal(Selection::Node(origin[0])));
    settle(&mut h);
    {
        let st = h.state_mut();
        st.optimizer.after_selected = Some(after_node);
        st.view.zoom = 0.8;
        let after = st.optimizer.after.as_mut().expect("pane");
        let item = after.doc.node_item[after_node].expect("card");
        after.view.center = after.scene.boxes[after.scene.item_box[item]].rect.center();
        after.view.zoom = 0.8;
    }
    settle(&mut h);
    h.snapshot_options("studio_optimizer", &shots);
}
