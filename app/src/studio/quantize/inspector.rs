//! The inspector's quantization section for the selected node: its layer's formats and
//! errors, its precision, its first FP32 and quantized values, the histogram of its FP32
//! values with the clipping range and the grid, and the error histogram.

use super::QuantView;
use super::menu::precision_menu;
use super::overlay::db;
use crate::studio::commands::Command;
use crate::studio::plots::{histogram_bars, small};
use crate::studio::theme::Theme;
use npu_core::ir::NodeId;

/// Grids with up to this many levels are drawn as lines on the value histogram; up to
/// `GRID_TICKS_MAX` as ticks on its axis; finer ones are only counted.
const GRID_LINES_MAX: usize = 64;
const GRID_TICKS_MAX: f64 = 4096.0;

/// The section, under the inspector's node view; nothing for a node no layer of the plan
/// comes from.
pub fn section_ui(ui: &mut egui::Ui, q: &mut QuantView, node: NodeId, theme: &Theme, out: &mut Vec<Command>) {
    let Some(s) = &q.session else { return };
    let Some(t) = s.row(node).cloned() else { return };
    ui.separator();
    egui::CollapsingHeader::new("Quantization")
        .default_open(true)
        .show(ui, |ui| {
            egui::Grid::new("quant_grid").num_columns(2).show(ui, |ui| {
                ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
                for (k, v) in [
                    ("Layer", t.node.clone()),
                    ("Activations", format!("{:?}", t.activations)),
                    ("Weights", format!("{:?}", t.weights)),
                    ("Local SQNR", db(t.sqnr_local_db)),
                    ("Cumulative SQNR", db(t.sqnr_cumulative_db)),
                    ("Cosine", format!("{:.6}", t.cosine)),
                    ("Max |err|", format!("{:.4e}", t.max_abs_err)),
                ] {
                    ui.label(k);
                    ui.label(v);
                    ui.end_row();
                }
            });
            ui.label("Precision:");
            ui.horizontal_wrapped(|ui| {
                precision_menu(ui, q, &[node], out);
            });
            let Some(s) = q.session.as_mut() else { return };
            s.request_inspect(&t.name);
            let Some(i) = s.inspect.as_ref().filter(|i| i.tensor == t.name) else {
                ui.weak("loading values…");
                return;
            };
            if i.fp32.is_empty() {
                ui.weak("no float values to show");
                return;
            }
            ui.strong("First values (sample 1)");
            egui::Grid::new("quant_values")
                .num_columns(3)
                .striped(true)
                .show(ui, |ui| {
                    ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
                    ui.weak("FP32");
                    ui.weak("quantized");
                    ui.weak("error");
                    ui.end_row();
                    for (a, b) in i.fp32.iter().zip(&i.quant) {
                        ui.label(format!("{a:.5}"));
                        ui.label(format!("{b:.5}"));
                        ui.label(format!("{:+.2e}", b - a));
                        ui.end_row();
                    }
                });
            ui.strong("Values (every sample) and the clipping range");
            match i.grid {
                Some((f, r, Some(step))) => {
                    let a = npu_core::quant::scheme::Affine::from_range(r.0, r.1, f.levels().unwrap_or(255.0));
                    ui.label(format!(
                        "{f:?}: range [{:.4}, {:.4}], grid step (scale) {step:.3e}, zero point {} of codes 0..={}",
                        r.0, r.1, a.zero_point, a.levels
                    ));
                }
                Some((f, _, None)) => {
                    ui.label(format!("{f:?}: no integer grid"));
                }
                None => {
                    ui.label("float: not quantized");
                }
            }
            let bars = histogram_bars(&i.values, i.values_bin_width);
            let range = i.grid.map(|g| g.1);
            // The grid's levels: lines when few, ticks on the axis when many.
            let levels: Vec<f64> = match i.grid {
                Some((_, (lo, hi), Some(step))) if step > 0.0 && (hi - lo) / step <= GRID_TICKS_MAX => {
                    let n = ((hi - lo) / step).round() as usize;
                    (0..=n).map(|k| lo + k as f64 * step).collect()
                }
                _ => Vec::new(),
            };
            if let Some((_, (lo, hi), Some(step))) = i.grid {
                let n = ((hi - lo) / step).round() + 1.0;
                if levels.is_empty() {
                    ui.weak(format!("{n:.0} grid levels: too fine to draw"));
                } else {
                    ui.weak(format!("{n:.0} grid levels, drawn as ticks on the axis"));
                }
            }
            let grid_colour = theme.text_weak;
            let edge = theme.quant.low;
            small("quant_value_histogram").show_y(false).show(ui, |p| {
                p.bar_chart(egui_plot::BarChart::new("values", bars));
                if let Some((lo, hi)) = range {
                    p.vline(egui_plot::VLine::new("clip low", lo).color(edge));
                    p.vline(egui_plot::VLine::new("clip high", hi).color(edge));
                }
                if levels.len() <= GRID_LINES_MAX {
                    for &x in &levels {
                        p.vline(egui_plot::VLine::new("grid", x).color(grid_colour.gamma_multiply(0.5)));
                    }
                } else {
                    let ticks: Vec<[f64; 2]> = levels.iter().map(|&x| [x, 0.0]).collect();
                    p.points(egui_plot::Points::new("grid", ticks).radius(1.0).color(grid_colour));
                }
            });
            ui.strong("Error histogram (every sample)");
            let bars = histogram_bars(&i.errors, i.bin_width);
            small("quant_error_histogram")
                .show_y(false)
                .show(ui, |p| p.bar_chart(egui_plot::BarChart::new("error", bars)));
        });
}
