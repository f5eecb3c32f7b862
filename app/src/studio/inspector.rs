//! The inspector: the selected node, tensor or scope, or the model's properties when
//! nothing is selected. Tensor names are links to their producer and consumers.

use super::commands::{Command, Selection};
use super::document::Loaded;
use super::jobs::Job;
use super::plots;
use super::widgets::labelled_text;
use crate::info::{IoInfo, model_info, node_info, value_info};
use egui_plot::{Bar, BarChart};
use npu_core::ir::{Attr, Model, Tensor, ValueId};
use std::sync::Arc;

/// Histogram bins of a weight.
const BINS: usize = 48;
/// Values listed under a weight's statistics.
const FIRST_VALUES: usize = 12;

#[derive(Default)]
pub struct InspectorState {
    stats: Option<(ValueId, Arc<WeightStats>)>,
    /// The model's properties, computed once per model.
    info: Option<Arc<crate::info::InfoReport>>,
    /// The input shape typed for the MAC count of a model with dynamic inputs.
    pub macs_shape: String,
    /// The MACs at a fixed input shape, once counted, and the count under way.
    macs: Option<MacsAt>,
    macs_job: Option<(Shapes, Job<MacsAt>)>,
}

/// Input shapes by input name.
type Shapes = Vec<(String, Vec<usize>)>;

/// The MAC count of a dynamic model at one input shape.
#[derive(Clone, Debug, PartialEq)]
pub struct MacsAt {
    pub shapes: Vec<(String, Vec<usize>)>,
    /// The count and whether some shape was still unknown, or why it could not be counted.
    pub macs: Result<(u64, bool), String>,
}

/// Where the input shape of a dynamic model comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeSource {
    /// Typed by the user in the inspector.
    Typed,
    /// The first calibration sample's.
    Calibration,
}

/// Statistics of a constant tensor, computed in f64.
#[derive(Clone, Debug)]
pub struct WeightStats {
    pub count: usize,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub std: f64,
    /// Non-finite values (NaN, ±inf), left out of the other numbers.
    pub non_finite: usize,
    /// (bin centre, count).
    pub histogram: Vec<(f64, usize)>,
    pub bin_width: f64,
    pub first: Vec<f64>,
}

impl WeightStats {
    pub fn of(t: &Tensor) -> Self {
        let a = t.to_f64();
        let flat: Vec<f64> = a.iter().copied().collect();
        let finite: Vec<f64> = flat.iter().copied().filter(|x| x.is_finite()).collect();
        let n = finite.len();
        let (min, max) = finite.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
        let mean = if n > 0 {
            finite.iter().sum::<f64>() / n as f64
        } else {
            f64::NAN
        };
        let var = if n > 0 {
            finite.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64
        } else {
            f64::NAN
        };
        let (histogram, bin_width) = if n > 0 {
            let width = ((max - min) / BINS as f64).max(f64::MIN_POSITIVE);
            let mut counts = vec![0usize; BINS];
            for &x in &finite {
                let b = (((x - min) / width) as usize).min(BINS - 1);
                counts[b] += 1;
            }
            let h = counts
                .into_iter()
                .enumerate()
                .map(|(i, c)| (min + (i as f64 + 0.5) * width, c))
                .collect();
            (h, width)
        } else {
            (Vec::new(), 0.0)
        };
        Self {
            count: flat.len(),
            min,
            max,
            mean,
            std: var.sqrt(),
            non_finite: flat.len() - n,
            histogram,
            bin_width,
            first: flat.iter().take(FIRST_VALUES).copied().collect(),
        }
    }
}

/// The constant data behind a value: an initializer, or a `Constant` node's tensor.
pub fn constant_of(model: &Model, v: ValueId) -> Option<Tensor> {
    let val = &model.graph.values[v];
    if let Some(c) = &val.constant {
        return Some(c.tensor().clone());
    }
    let p = &model.graph.nodes[val.producer?];
    if p.op != "Constant" {
        return None;
    }
    match p.attr("value")? {
        Attr::Tensor(c) => Some(c.tensor().clone()),
        _ => None,
    }
}

/// A tensor's dtype and shape, short (symbolic expressions as letters), and what the
/// letters stand for (`None` when there are none).
fn shape_text(t: &IoInfo) -> (String, Option<String>) {
    if t.shape.is_empty() {
        return (format!("{} scalar", t.dtype), None);
    }
    let (short, legend) = crate::info::short_shape(&t.shape);
    let hover = (!legend.is_empty()).then(|| {
        legend
            .iter()
            .map(|(c, e)| format!("{c} = {e}"))
            .collect::<Vec<_>>()
            .join("\n")
    });
    (format!("{} [{short}]", t.dtype), hover)
}

/// The inspector panel. `calib_shapes` are the first calibration sample's input shapes
/// (the MAC count of a dynamic model uses them); `node_section` draws what features add
/// under a selected node (the quantization section).
pub fn inspector_ui(
    ui: &mut egui::Ui,
    state: &mut InspectorState,
    loaded: Option<&Loaded>,
    selection: Option<Selection>,
    calib_shapes: Option<&[(String, Vec<usize>)]>,
    out: &mut Vec<Command>,
    node_section: impl FnOnce(&mut egui::Ui, usize, &mut Vec<Command>),
) {
    // The panel keeps its width whatever is selected, so the canvas never jumps.
    egui::ScrollArea::vertical()
        .id_salt("inspector_scroll")
        .auto_shrink(false)
        .show(ui, |ui| {
            // Names of TFLite tensors run to hundreds of characters without a space: they
            // wrap anywhere rather than widen the panel past the window.
            ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Wrap);
            ui.set_max_width(ui.available_width());
            let Some(l) = loaded else {
                ui.heading("Inspector");
                ui.label("No model open");
                return;
            };
            let model = l.model.clone();
            let doc = l.doc.clone();
            match selection {
                None => {
                    let info = state
                        .info
                        .get_or_insert_with(|| Arc::new(model_info(&model, &l.path, false)))
                        .clone();
                    let macs = state.macs_at(&model, &info, calib_shapes, ui.ctx());
                    model_ui(ui, &model, &info, &l.path, &l.warnings, macs.as_ref(), out);
                    if info.macs_partial {
                        ui.add(egui::Label::new(egui::RichText::new(macs_note(macs.as_ref())).weak()).wrap());
                        ui.horizontal(|ui| {
                            labelled_text(
                                ui,
                                "MACs at input shape:",
                                &mut state.macs_shape,
                                "images=1x3x320x320",
                                170.0,
                            );
                        });
                    }
                }
                Some(Selection::Node(n)) => node_ui(ui, &model, &doc.consumers, n, out),
                Some(Selection::Value(v)) => {
                    let stats = weight_stats_cached(state, &model, v);
                    value_ui(ui, &model, &doc.consumers, v, stats.as_deref(), out);
                }
                Some(Selection::Scope(s)) => {
                    let sc = &doc.scopes[s];
                    ui.heading("Scope");
                    ui.label(egui::RichText::new(&sc.path).strong());
                    ui.label(format!("{} nodes", sc.total_items));
                    let collapsed = l.collapsed.contains(&s);
                    if ui
                        .button(if collapsed { "Expand scope" } else { "Collapse scope" })
                        .clicked()
                    {
                        out.push(Command::ToggleScope(s));
                    }
                }
            }
            if let Some(Selection::Node(n)) = selection {
                node_section(ui, n, out);
            }
        });
}

fn weight_stats_cached(state: &mut InspectorState, model: &Model, v: ValueId) -> Option<Arc<WeightStats>> {
    if let Some((cv, s)) = &state.stats
        && *cv == v
    {
        return Some(s.clone());
    }
    let t = constant_of(model, v)?;
    let s = Arc::new(WeightStats::of(&t));
    state.stats = Some((v, s.clone()));
    Some(s)
}

fn model_ui(
    ui: &mut egui::Ui,
    model: &Model,
    r: &crate::info::InfoReport,
    path: &std::path::Path,
    warnings: &[String],
    macs_at: Option<&(ShapeSource, MacsAt)>,
    out: &mut Vec<Command>,
) {
    ui.heading("Model properties");
    egui::Grid::new("model_props")
        .num_columns(2)
        .striped(true)
        .show(ui, |ui| {
            ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
            let mut row = |k: &str, v: String| {
                ui.label(k);
                ui.label(v);
                ui.end_row();
            };
            row(
                "file",
                path.file_name()
                    .map_or_else(|| r.file.clone(), |f| f.to_string_lossy().into_owned()),
            );
            row(
                "producer",
                format!("{} {}", r.producer, r.producer_version).trim().to_owned(),
            );
            row("IR version", r.ir_version.to_string());
            row(
                "opsets",
                r.opsets
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
            row("nodes", r.nodes.to_string());
            row("parameters", r.parameters.to_string());
            row("parameter bytes", r.parameter_bytes.to_string());
            row("MACs", macs_text(r, macs_at));
        });
    ui.separator();
    ui.strong("Inputs");
    for (t, &v) in r.inputs.iter().zip(&model.graph.inputs) {
        tensor_row(ui, t, v, out);
    }
    ui.strong("Outputs");
    for (t, &v) in r.outputs.iter().zip(&model.graph.outputs) {
        tensor_row(ui, t, v, out);
    }
    ui.separator();
    ui.strong("Ops");
    egui::Grid::new("op_hist").num_columns(2).show(ui, |ui| {
        ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
        for (op, n) in &r.ops {
            ui.label(op);
            ui.label(n.to_string());
            ui.end_row();
        }
    });
    if !warnings.is_empty() {
        ui.separator();
        ui.strong("Import warnings");
        for w in warnings {
            ui.label(w);
        }
    }
}

/// A tensor name (a link that selects the tensor) with its dtype and shape.
fn tensor_row(ui: &mut egui::Ui, t: &IoInfo, v: ValueId, out: &mut Vec<Command>) {
    if ui.link(&t.name).on_hover_text("Show this tensor").clicked() {
        out.push(Command::Reveal(Selection::Value(v)));
    }
    shape_line(ui, t);
}

/// A weak, wrapping line under a tensor link.
fn indented_weak(ui: &mut egui::Ui, text: &str) {
    indented_weak_hover(ui, text, None);
}

fn indented_weak_hover(ui: &mut egui::Ui, text: &str, hover: Option<&str>) {
    egui::Frame::NONE
        .inner_margin(egui::Margin {
            left: 14,
            ..Default::default()
        })
        .show(ui, |ui| {
            let r = ui.add(egui::Label::new(egui::RichText::new(text).weak()).wrap());
            if let Some(h) = hover {
                r.on_hover_text(h);
            }
        });
}

/// A tensor's dtype and short shape under its link; the full expressions on hover.
fn shape_line(ui: &mut egui::Ui, t: &IoInfo) {
    let (text, hover) = shape_text(t);
    indented_weak_hover(ui, &text, hover.as_deref());
}

/// The MAC row: the count (a lower bound while some shape is unknown).
fn macs_text(r: &crate::info::InfoReport, at: Option<&(ShapeSource, MacsAt)>) -> String {
    match at.map(|(_, m)| &m.macs) {
        Some(Ok((n, false))) => n.to_string(),
        Some(Ok((n, true))) => format!("{n} (lower bound)"),
        _ if r.macs_partial => format!("{} (lower bound)", r.macs),
        _ => r.macs.to_string(),
    }
}

/// Under the properties of a model with dynamic inputs: the shape its MACs were counted at
/// and where that shape came from, or how to give one.
fn macs_note(at: Option<&(ShapeSource, MacsAt)>) -> String {
    let Some((source, m)) = at else {
        return "The inputs are dynamic, so the MACs are a lower bound: give an input shape below, or a folder of calibration samples, to count them at it.".into();
    };
    let shape = m
        .shapes
        .iter()
        .map(|(n, d)| {
            format!(
                "{n}={}",
                d.iter().map(ToString::to_string).collect::<Vec<_>>().join("×")
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let from = match source {
        ShapeSource::Typed => "the shape typed below",
        ShapeSource::Calibration => "the calibration samples' shape",
    };
    match &m.macs {
        Ok(_) => format!("MACs at {shape} ({from})"),
        Err(e) => format!("MACs at {shape} ({from}): {e}"),
    }
}

impl InspectorState {
    /// The MAC count at the typed shape, else at the calibration samples' shape; counted
    /// off the UI thread (shape inference runs again), `None` until it is there.
    fn macs_at(
        &mut self,
        model: &Arc<Model>,
        info: &crate::info::InfoReport,
        calib: Option<&[(String, Vec<usize>)]>,
        ctx: &egui::Context,
    ) -> Option<(ShapeSource, MacsAt)> {
        if !info.macs_partial {
            return None;
        }
        let typed: Option<Vec<(String, Vec<usize>)>> = {
            let specs: Vec<&str> = self
                .macs_shape
                .split([';', ' '])
                .filter(|s| !s.trim().is_empty())
                .collect();
            (!specs.is_empty())
                .then(|| {
                    specs
                        .iter()
                        .map(|s| crate::info::parse_shape(s))
                        .collect::<Result<Vec<_>, _>>()
                        .ok()
                })
                .flatten()
        };
        let (source, shapes) = match (typed, calib) {
            (Some(t), _) => (ShapeSource::Typed, t),
            (None, Some(c)) if !c.is_empty() => (ShapeSource::Calibration, c.to_vec()),
            _ => return None,
        };
        let current = self.macs.as_ref().is_some_and(|m| m.shapes == shapes);
        let running = self.macs_job.as_ref().is_some_and(|(s, _)| *s == shapes);
        if !current && !running {
            let model = model.clone();
            let key = shapes.clone();
            let job = Job::spawn("count-macs", Some(ctx), move |_| {
                let map: std::collections::HashMap<String, Vec<usize>> = key.iter().cloned().collect();
                let macs = crate::info::macs_at(&model, &map).map_err(|e| e.to_string());
                Ok(MacsAt { shapes: key, macs })
            });
            self.macs_job = Some((shapes.clone(), job));
        }
        self.macs.clone().filter(|m| m.shapes == shapes).map(|m| (source, m))
    }

    /// Takes a finished MAC count.
    pub fn poll(&mut self) {
        if let Some((_, j)) = &self.macs_job
            && let Some(r) = j.poll()
        {
            self.macs_job = None;
            if let Ok(m) = r {
                self.macs = Some(m);
            }
        }
    }

    /// True while a MAC count runs.
    pub fn busy(&self) -> bool {
        self.macs_job.is_some()
    }
}

fn node_ui(ui: &mut egui::Ui, model: &Model, consumers: &[Vec<usize>], n: usize, out: &mut Vec<Command>) {
    let info = node_info(model, n);
    let node = &model.graph.nodes[n];
    ui.heading(&info.op);
    ui.label(egui::RichText::new(&info.name).strong());
    if !info.domain.is_empty() {
        ui.label(format!("domain {}", info.domain));
    }
    let scope = node.scope();
    if !scope.is_empty() {
        ui.weak(format!("scope {}", scope.join("/")));
    }
    ui.separator();
    ui.strong("Attributes");
    if info.attributes.is_empty() {
        ui.weak("none");
    }
    egui::Grid::new("attrs").num_columns(2).striped(true).show(ui, |ui| {
        ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
        for (k, v) in &info.attributes {
            ui.label(k);
            ui.label(v);
            ui.end_row();
        }
    });
    ui.separator();
    ui.strong("Inputs");
    for (t, v) in info.inputs.iter().zip(&node.inputs) {
        let Some(v) = *v else {
            ui.weak("(omitted)");
            continue;
        };
        let val = &model.graph.values[v];
        let weight = val.constant.is_some() || val.producer.is_some_and(|p| model.graph.nodes[p].op == "Constant");
        if ui
            .link(&t.name)
            .on_hover_text(if weight {
                "Show this weight"
            } else {
                "Go to the producer"
            })
            .clicked()
        {
            out.push(match val.producer {
                Some(p) if !weight => Command::Reveal(Selection::Node(p)),
                _ => Command::Reveal(Selection::Value(v)),
            });
        }
        shape_line(ui, t);
        if weight {
            indented_weak(ui, "weight");
        }
    }
    ui.strong("Outputs");
    for (t, v) in info.outputs.iter().zip(&node.outputs) {
        let Some(v) = *v else { continue };
        if ui.link(&t.name).on_hover_text("Show this tensor").clicked() {
            out.push(Command::Reveal(Selection::Value(v)));
        }
        shape_line(ui, t);
        for &c in &consumers[v] {
            let cn = &model.graph.nodes[c];
            ui.horizontal(|ui| {
                ui.weak("  →");
                if ui
                    .link(format!("{} ({})", cn.label(), cn.op))
                    .on_hover_text("Go to this consumer")
                    .clicked()
                {
                    out.push(Command::Reveal(Selection::Node(c)));
                }
            });
        }
    }
    if node.op == "Constant"
        && let Some(&Some(v)) = node.outputs.first()
        && let Some(t) = constant_of(model, v)
    {
        ui.separator();
        stats_ui(ui, &WeightStats::of(&t));
    }
}

fn value_ui(
    ui: &mut egui::Ui,
    model: &Model,
    consumers: &[Vec<usize>],
    v: ValueId,
    stats: Option<&WeightStats>,
    out: &mut Vec<Command>,
) {
    let t = value_info(model, v);
    let val = &model.graph.values[v];
    ui.heading(if stats.is_some() { "Weight" } else { "Tensor" });
    ui.label(egui::RichText::new(&t.name).strong());
    let (text, hover) = shape_text(&t);
    let r = ui.label(text);
    if let Some(h) = hover {
        r.on_hover_text(h);
    }
    if let Some(p) = val.producer {
        let pn = &model.graph.nodes[p];
        ui.horizontal(|ui| {
            ui.label("producer");
            if ui.link(format!("{} ({})", pn.label(), pn.op)).clicked() {
                out.push(Command::Reveal(Selection::Node(p)));
            }
        });
    } else if model.graph.inputs.contains(&v) && val.constant.is_none() {
        ui.label("graph input");
    }
    for &c in &consumers[v] {
        let cn = &model.graph.nodes[c];
        ui.horizontal(|ui| {
            ui.label("consumer");
            if ui.link(format!("{} ({})", cn.label(), cn.op)).clicked() {
                out.push(Command::Reveal(Selection::Node(c)));
            }
        });
    }
    if let Some(s) = stats {
        ui.separator();
        stats_ui(ui, s);
    }
}

fn stats_ui(ui: &mut egui::Ui, s: &WeightStats) {
    egui::Grid::new("weight_stats")
        .num_columns(2)
        .striped(true)
        .show(ui, |ui| {
            ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
            for (k, v) in [
                ("count", s.count.to_string()),
                ("min", format!("{:.6}", s.min)),
                ("max", format!("{:.6}", s.max)),
                ("mean", format!("{:.6}", s.mean)),
                ("std", format!("{:.6}", s.std)),
            ] {
                ui.label(k);
                ui.label(v);
                ui.end_row();
            }
            if s.non_finite > 0 {
                ui.label("non-finite");
                ui.label(s.non_finite.to_string());
                ui.end_row();
            }
        });
    if !s.histogram.is_empty() {
        let bars: Vec<Bar> = s
            .histogram
            .iter()
            .map(|&(x, c)| Bar::new(x, c as f64).width(s.bin_width * 0.95))
            .collect();
        plots::fixed("weight_histogram", 130.0)
            .show_y(false)
            .show(ui, |p| p.bar_chart(BarChart::new("values", bars)));
    }
    ui.label(format!(
        "first values: {}",
        s.first.iter().map(|x| format!("{x:.4}")).collect::<Vec<_>>().join(", ")
    ));
}

/// The integer ops a quantized file computes for node `n` (its own program, read from the
/// file): each op with its output's type, scale and zero point, and where a node has
/// per-channel weights, their channel count.
pub fn program_section(ui: &mut egui::Ui, loaded: &Loaded, n: usize) {
    let Some(p) = loaded.program.as_ref() else {
        return;
    };
    let Some(node) = loaded.model.graph.nodes.get(n) else {
        return;
    };
    let base = super::compile::base_name(&node.name);
    let ops: Vec<_> = p
        .ops
        .iter()
        .filter(|op| super::compile::base_name(&op.node) == base)
        .collect();
    if ops.is_empty() {
        return;
    }
    ui.separator();
    ui.strong("Integer program (from the file)");
    for op in ops {
        let grid = |t: usize| {
            let t = &p.tensors[t];
            let q = &t.q;
            if q.scale.len() > 1 {
                format!("{} per-channel ({} scales)", q.ty.name(), q.scale.len())
            } else {
                format!("{} scale {:.6e} zero point {}", q.ty.name(), q.s(), q.zp())
            }
        };
        ui.label(egui::RichText::new(op.kind.name()).monospace());
        for &i in &op.inputs {
            let what = if p.tensors[i].data.is_some() { "const" } else { "in" };
            indented_weak(ui, &format!("{what}: {}", grid(i)));
        }
        for &o in &op.outputs {
            indented_weak(ui, &format!("out: {}", grid(o)));
        }
    }
}
