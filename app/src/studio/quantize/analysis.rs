//! The quantization panel's plots: cumulative SQNR along the graph with the worst tensors
//! marked, the layer-sensitivity bars, and the mixed-precision (Pareto) curve with a point
//! to apply.

use super::QuantView;
use super::overlay::db;
use super::worker::{Mapping, Session};
use crate::studio::commands::{Command, JobKind};
use crate::studio::plots;
use crate::studio::theme::QuantColours;
use npu_core::ir::NodeId;
use npu_core::quant::Report;
use npu_core::quant::analysis::Analysis;

/// The run button, progress and cancel of an analysis job; true when Run was clicked.
fn job_row(ui: &mut egui::Ui, s: &Session, kind: JobKind, run: &str, out: &mut Vec<Command>) -> bool {
    let mut clicked = false;
    ui.horizontal(|ui| match s.job.clone() {
        Some((k, p)) if k == kind => {
            let (f, what) = p.fraction();
            ui.add(egui::ProgressBar::new(f).desired_width(160.0).text(what).animate(true));
            if ui.button(format!("Cancel {}", run.to_lowercase())).clicked() {
                out.push(Command::CancelAnalysis);
            }
        }
        busy => {
            clicked = ui.add_enabled(busy.is_none(), egui::Button::new(run)).clicked();
        }
    });
    if let Some((k, e)) = &s.job_error
        && *k == kind
    {
        ui.colored_label(ui.visuals().error_fg_color, e);
    }
    clicked
}

/// The node of the open model an optimized node was made from.
fn open_node(m: &Mapping, optimized_name: &str) -> Option<NodeId> {
    m.optimized
        .graph
        .nodes
        .iter()
        .find(|n| n.name == optimized_name)
        .and_then(|n| n.origin.last().copied())
}

/// Sensitivity bars: the output SQNR gained when one layer alone stays float (all the
/// others quantized), the largest first. Returns a layer the user clicked.
pub fn sensitivity_ui(ui: &mut egui::Ui, q: &QuantView, out: &mut Vec<Command>) -> Option<NodeId> {
    let s = q.session.as_ref()?;
    let mut select = None;
    egui::CollapsingHeader::new("Layer sensitivity")
        .default_open(true)
        .show(ui, |ui| {
            if job_row(ui, s, JobKind::Sensitivity, "Measure sensitivity", out) {
                out.push(Command::RunAnalysis(JobKind::Sensitivity, 0.0));
            }
            let Some((g, a)) = &s.sensitivity else {
                ui.weak("Each layer alone kept float: how much output SQNR it gains.");
                return;
            };
            let Some(full) = a.full.sqnr_db else {
                ui.label("The plan is exact: no layer loses anything.");
                return;
            };
            let gains = sensitivity_gains(a, full);
            if *g != s.generation() {
                ui.weak("measured on an earlier plan: measure again");
            }
            let bars: Vec<egui_plot::Bar> = gains
                .iter()
                .enumerate()
                .map(|(k, (n, d))| egui_plot::Bar::new(k as f64, *d).name(n).width(0.7))
                .collect();
            plots::small("sensitivity_bars")
                .x_axis_label("layer (most sensitive first)")
                .y_axis_label("dB gained")
                .show(ui, |p| p.bar_chart(egui_plot::BarChart::new("gain", bars)));
            ui.horizontal_wrapped(|ui| {
                for (n, d) in gains.iter().take(5) {
                    if ui.link(format!("{n} +{d:.1} dB")).clicked() {
                        select = s.mapping.as_deref().and_then(|m| open_node(m, n));
                    }
                }
            });
            if let Some(c) = &a.rank_check {
                ui.weak(c.summary(a.held_back));
            }
        });
    select
}

/// The 12 layers whose staying float gains the output the most: (layer, dB gained).
pub fn sensitivity_gains(a: &Analysis, full_db: f64) -> Vec<(String, f64)> {
    let mut gains: Vec<(String, f64)> = a
        .layers
        .iter()
        .filter_map(|l| Some((l.node.clone(), l.all_but_this_db? - full_db)))
        .collect();
    gains.sort_by(|a, b| b.1.total_cmp(&a.1));
    gains.truncate(12);
    gains
}

/// The mixed-precision curve (output SQNR against layers promoted to 16-bit activations),
/// a point picked on it, and "Apply this point".
pub fn pareto_ui(ui: &mut egui::Ui, q: &mut QuantView, colours: &QuantColours, out: &mut Vec<Command>) {
    let (mid, low) = (colours.mid, colours.low);
    let Some(s) = q.session.as_ref() else { return };
    let mut apply = None;
    egui::CollapsingHeader::new("Mixed precision (Pareto curve)")
        .default_open(true)
        .show(ui, |ui| {
            ui.horizontal(|ui| {
                let label = ui.label("target");
                ui.add(egui::DragValue::new(&mut q.pareto_target).speed(0.5).suffix(" dB"))
                    .labelled_by(label.id);
            });
            if job_row(ui, s, JobKind::Pareto, "Find mixed precision", out) {
                out.push(Command::RunAnalysis(JobKind::Pareto, q.pareto_target));
            }
            let Some((g, m)) = &s.pareto else {
                ui.weak(
                    "Promotes the most sensitive layers to 16-bit activations, one at a time, \
                     weighing each by the latency it adds on the Compile stage's target.",
                );
                return;
            };
            if *g != s.generation() {
                ui.weak("searched from an earlier plan");
            }
            let last = m.curve.len().saturating_sub(1);
            q.pareto_point = q.pareto_point.min(last);
            // SQNR against latency when the search weighed it, else against layers promoted.
            let by_latency = m.curve.iter().all(|c| c.latency_us.is_some());
            let x = |c: &npu_core::quant::amp::CurvePoint| {
                if by_latency {
                    c.latency_us.unwrap_or(0.0)
                } else {
                    c.promoted as f64
                }
            };
            let pts: Vec<[f64; 2]> = m.curve.iter().filter_map(|c| Some([x(c), c.sqnr_db?])).collect();
            let held: Vec<[f64; 2]> = m.curve.iter().filter_map(|c| Some([x(c), c.held_db?])).collect();
            let picked = &m.curve[q.pareto_point];
            let x_label = if by_latency {
                format!("µs, {}", m.cost)
            } else {
                "layers at 16 bits".into()
            };
            let r = plots::small("pareto_curve")
                .x_axis_label(x_label)
                .y_axis_label("output dB")
                .show(ui, |p| {
                    p.line(egui_plot::Line::new("SQNR", pts.clone()));
                    if !held.is_empty() {
                        p.line(egui_plot::Line::new("held back", held.clone()).color(low));
                    }
                    p.points(egui_plot::Points::new("points", pts.clone()).radius(2.5));
                    p.hline(egui_plot::HLine::new("target", m.target_db).color(mid));
                    if let Some(v) = picked.sqnr_db {
                        p.points(
                            egui_plot::Points::new("picked", vec![[x(picked), v]])
                                .radius(5.0)
                                .color(low),
                        );
                    }
                    p.pointer_coordinate()
                });
            // A click on the plot picks the nearest point.
            if r.response.clicked()
                && let Some(at) = r.inner
            {
                let near = m.curve.iter().enumerate().min_by(|a, b| {
                    let d = |c: &npu_core::quant::amp::CurvePoint| (x(c) - at.x).abs();
                    d(a.1).total_cmp(&d(b.1))
                });
                if let Some((k, _)) = near {
                    q.pareto_point = k;
                }
            }
            ui.horizontal_wrapped(|ui| {
                let label = ui.label("point");
                ui.add(egui::Slider::new(&mut q.pareto_point, 0..=last))
                    .labelled_by(label.id);
                let c = &m.curve[q.pareto_point];
                ui.label(format!(
                    "{} of {} at 16 bits · {}{} · {:.0} KiB{}",
                    c.promoted,
                    m.layers_total,
                    db(c.sqnr_db),
                    c.held_db
                        .map(|h| format!(" (held back {})", db(Some(h))))
                        .unwrap_or_default(),
                    c.cost_bytes / 1024.0,
                    c.latency_us
                        .map(|us| format!(" · {}", crate::studio::widgets::latency(us)))
                        .unwrap_or_default()
                ));
                let current = *g == s.generation();
                if m.plans.get(q.pareto_point).is_some()
                    && ui
                        .add_enabled(current, egui::Button::new("Apply this point"))
                        .on_disabled_hover_text("the plan changed since the search: find mixed precision again")
                        .clicked()
                {
                    apply = Some(q.pareto_point);
                }
            });
        });
    if let Some(k) = apply {
        out.push(Command::ApplyParetoPoint(k));
    }
}

/// Cumulative SQNR of every quantized tensor in graph order, the five worst marked.
pub fn depth_plot_ui(ui: &mut egui::Ui, report: &Report, red_below: f64, colours: &QuantColours) {
    use egui_plot::{HLine, Line, PlotPoint, Points, Text};
    let pts: Vec<[f64; 2]> = report
        .tensors
        .iter()
        .enumerate()
        .filter_map(|(k, t)| Some([k as f64, t.sqnr_cumulative_db?]))
        .collect();
    let mut worst: Vec<(usize, f64)> = report
        .tensors
        .iter()
        .enumerate()
        .filter_map(|(k, t)| Some((k, t.sqnr_cumulative_db?)))
        .collect();
    worst.sort_by(|a, b| a.1.total_cmp(&b.1));
    worst.truncate(5);
    egui::CollapsingHeader::new("Cumulative SQNR along the graph")
        .default_open(true)
        .show(ui, |ui| {
            plots::small("cumulative_sqnr_depth")
                .x_axis_label("tensor (graph order)")
                .y_axis_label("dB")
                .show(ui, |p| {
                    p.line(Line::new("cumulative SQNR", pts.clone()));
                    p.hline(HLine::new("red below", red_below).color(colours.low));
                    let marks: Vec<[f64; 2]> = worst.iter().map(|&(k, v)| [k as f64, v]).collect();
                    p.points(Points::new("worst", marks).radius(4.0).color(colours.low));
                    for &(k, v) in &worst {
                        p.text(Text::new(
                            "worst",
                            PlotPoint::new(k as f64, v - 1.5),
                            report.tensors[k].node.clone(),
                        ));
                    }
                });
        });
}
