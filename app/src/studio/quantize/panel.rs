//! The quantization panel (bottom of the window): the calibration setup and its run button,
//! then, once a plan is simulated, the output SQNR, the overlay switch and legend, undo and
//! redo, the multi-selection's precision buttons, the plots and the worst layers.

use super::overlay::{Overlay, PRECISIONS, db, legend_ui};
use super::{QuantView, analysis, preview, recipe_editor};
use crate::studio::commands::{Command, Dialog, Selection, Setup};
use crate::studio::document::Loaded;
use crate::studio::theme::Theme;
use crate::studio::widgets::labelled_text;
use npu_core::ir::NodeId;
use npu_core::quant::{PRESETS, TensorReport};
use std::collections::BTreeSet;

/// What the panel reads of the rest of the studio.
pub struct PanelCx<'a> {
    pub loaded: Option<&'a Loaded>,
    pub multi: &'a BTreeSet<NodeId>,
    pub theme: &'a Theme,
}

/// The quantization panel: a fixed row of controls on top, everything else below it in a
/// scroll area, so the panel keeps the height the user gave it whatever arrives (and the
/// run button stays under the pointer).
pub fn panel_ui(ui: &mut egui::Ui, q: &mut QuantView, cx: &PanelCx<'_>, out: &mut Vec<Command>) {
    let mut setup = q.setup.clone();
    controls_ui(ui, q, cx, &mut setup, out);
    egui::ScrollArea::vertical()
        .id_salt("quant_panel_scroll")
        .auto_shrink([false, false])
        .show(ui, |ui| {
            // The recipe window: available before calibration too (a loaded recipe waits for it).
            let mut open = q.show_recipe;
            egui::Window::new("Recipe")
                .open(&mut open)
                .default_pos(ui.max_rect().left_top() - egui::vec2(0.0, 220.0))
                .show(ui.ctx(), |ui| recipe_editor::recipe_ui(ui, q, &mut setup, out));
            q.show_recipe = open;
            if q.show_preprocess_form {
                preview::preprocess_form_ui(ui, &mut setup.preprocess);
            }
            preview::preview_ui(ui, q, cx.loaded);
            results_ui(ui, q, cx, out);
        });
    if setup != q.setup {
        out.push(Command::SetQuantSetup(setup));
    }
}

/// The fixed row: samples, preprocessing, preset, recipe, and Calibrate (or its progress).
fn controls_ui(ui: &mut egui::Ui, q: &mut QuantView, cx: &PanelCx<'_>, setup: &mut Setup, out: &mut Vec<Command>) {
    ui.horizontal_wrapped(|ui| {
        ui.strong("Quantize");
        labelled_text(
            ui,
            "Samples:",
            &mut setup.data,
            "folder of .npy/.png, or synthetic:8",
            260.0,
        );
        if ui.button("Browse…").clicked() {
            out.push(Command::Dialog(Dialog::Samples { then_calibrate: false }));
        }
        labelled_text(
            ui,
            "Preprocess:",
            &mut setup.preprocess,
            "size=48x192;scale=1/255;mean=0.5;std=0.5",
            220.0,
        );
        ui.toggle_value(&mut q.show_preprocess_form, "Form…")
            .on_hover_text("edit the preprocessing field by field");
        egui::ComboBox::from_id_salt("quant_preset")
            .selected_text(setup.preset.clone())
            .show_ui(ui, |ui| {
                for p in PRESETS {
                    ui.selectable_value(&mut setup.preset, p.to_string(), p);
                }
            });
        ui.checkbox(&mut setup.equalize, "Equalize")
            .on_hover_text("cross-layer equalization: conv pairs with a Relu (or nothing) between them get equal per-channel weight ranges before calibration");
        ui.checkbox(&mut setup.absorb_bias, "Absorb bias")
            .on_hover_text("move per-channel constants from a conv's output into the next conv's bias (after a Relu, at most the channel's calibrated minimum; with nothing between, as far as it must to fit a grid centred on zero), kept only when it wins on held-back calibration samples");
        ui.checkbox(&mut setup.refine_ranges, "Refine ranges")
            .on_hover_text("choose each activation's clipping range by the output SQNR it gives, kept only when it also wins on held-back calibration samples");
        ui.checkbox(&mut setup.smooth_quant, "SmoothQuant")
            .on_hover_text("move LayerNorm outlier channels into the MatMul weights that read them (the FP32 function is unchanged), kept only when it wins on held-back calibration samples");
        ui.checkbox(&mut setup.seq_mse, "SeqMSE weights")
            .on_hover_text("choose each output channel's weight range (max-abs or narrower) by the error of the layer's output on the calibration samples, kept only when it also wins on held-back calibration samples");
        ui.checkbox(&mut setup.gptq, "GPTQ weights")
            .on_hover_text("choose the int4/int8 weight codes of MatMul, Gemm and 1×1 conv layers against their calibration inputs, each rounding error moved onto the weights not yet rounded; kept only when it wins on held-back calibration samples");
        ui.toggle_value(&mut q.show_recipe, "Recipe…");
        if let Some(s) = q.session.as_ref().filter(|s| s.starting()) {
            let (f, what) = s.progress.fraction();
            ui.add(egui::ProgressBar::new(f).desired_width(180.0).text(what).animate(true));
            if ui.button("Cancel quantization").clicked() {
                out.push(Command::CancelQuantization);
            }
        } else if ui
            .add_enabled(cx.loaded.is_some(), egui::Button::new("Calibrate & simulate"))
            .clicked()
        {
            out.push(Command::StartQuantization);
        }
    });
}

/// Once a plan is simulated: the output SQNR, the overlay and its legend, undo and redo,
/// the multi-selection's buttons, the plots and the worst layers.
fn results_ui(ui: &mut egui::Ui, q: &mut QuantView, cx: &PanelCx<'_>, out: &mut Vec<Command>) {
    let Some(s) = &q.session else {
        ui.label("Pick a folder of samples and run: the heatmap shows on the graph.");
        return;
    };
    let Some(r) = &s.result else { return };
    let outputs: Vec<String> = r
        .report
        .outputs
        .iter()
        .map(|o| format!("Output {}: {}", o.name, db(o.sqnr_db)))
        .collect();
    let refinement = s.refinement.clone();
    let status = match (s.updating(), s.last_latency_ms, q.show_timings) {
        (true, ..) => None,
        (false, Some(ms), true) => Some(format!("updated in {ms:.0} ms ({} node runs)", r.recomputed)),
        (false, Some(_), false) => Some(format!("updated ({} node runs)", r.recomputed)),
        (false, None, true) => Some(format!(
            "{} samples simulated in {:.1} s",
            r.report.eval_samples, r.seconds
        )),
        (false, None, false) => Some(format!("{} samples simulated", r.report.eval_samples)),
    };
    ui.horizontal_wrapped(|ui| {
        for o in &outputs {
            ui.label(o);
        }
        ui.separator();
        if let Some(text) = &status {
            ui.label(text);
        } else {
            ui.spinner();
            ui.label("updating…");
        }
        if let Some(r) = &refinement {
            ui.separator();
            ui.label(r);
        }
        ui.separator();
        for o in Overlay::ALL {
            ui.selectable_value(&mut q.overlay, o, o.label());
        }
        ui.separator();
        ui.label("red below");
        ui.add(egui::DragValue::new(&mut q.red_below).speed(0.5).suffix(" dB"));
        ui.label("green above");
        ui.add(egui::DragValue::new(&mut q.green_above).speed(0.5).suffix(" dB"));
        if q.overlay == Overlay::Gap {
            ui.label("gap above");
            ui.add(
                egui::DragValue::new(&mut q.gap_db)
                    .speed(0.1)
                    .range(0.0..=60.0)
                    .suffix(" dB"),
            );
        }
        ui.separator();
        if ui.add_enabled(q.can_undo(), egui::Button::new("Undo")).clicked() {
            out.push(Command::Undo);
        }
        if ui.add_enabled(q.can_redo(), egui::Button::new("Redo")).clicked() {
            out.push(Command::Redo);
        }
    });
    legend_ui(ui, q, &cx.theme.quant);
    if !cx.multi.is_empty() {
        let nodes: Vec<NodeId> = cx.multi.iter().copied().collect();
        ui.horizontal_wrapped(|ui| {
            ui.label(format!("{} nodes selected:", nodes.len()));
            for (name, p) in PRECISIONS {
                if ui.button(format!("Set selected to {name}")).clicked() {
                    out.push(Command::SetPrecision(nodes.clone(), p));
                }
            }
            if ui.button("Clear selection").clicked() {
                out.push(Command::SetMulti(Vec::new()));
            }
        });
    }
    let Some(report) = q
        .session
        .as_ref()
        .and_then(|s| s.result.as_ref())
        .map(|r| r.report.clone())
    else {
        return;
    };
    let mut select = None;
    ui.columns(3, |cols| {
        analysis::depth_plot_ui(&mut cols[0], &report, q.red_below, &cx.theme.quant);
        if let Some(n) = analysis::sensitivity_ui(&mut cols[1], q, out) {
            select = Some(n);
        }
        analysis::pareto_ui(&mut cols[2], q, &cx.theme.quant, out);
    });
    let Some(s) = &q.session else { return };
    ui.horizontal_wrapped(|ui| {
        ui.label("Worst layers (cumulative):");
        let mut rows: Vec<(NodeId, &TensorReport)> = s.rows.keys().filter_map(|&n| Some((n, s.row(n)?))).collect();
        rows.sort_by(|a, b| {
            let k = |t: &TensorReport| t.sqnr_cumulative_db.unwrap_or(f64::INFINITY);
            k(a.1).total_cmp(&k(b.1)).then(a.0.cmp(&b.0))
        });
        rows.dedup_by_key(|x| x.1.name.clone());
        for (n, t) in rows.into_iter().take(8) {
            if ui.link(format!("{} {}", t.node, db(t.sqnr_cumulative_db))).clicked() {
                select = Some(n);
            }
        }
    });
    if let Some(n) = select {
        out.push(Command::Reveal(Selection::Node(n)));
    }
}
