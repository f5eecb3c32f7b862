//! The study report: one self-contained HTML page (styles, the sorting script and every
//! plot inlined, nothing fetched), with the same content as JSON and the per-layer table as
//! CSV beside it. [`StudyReport`] gathers the model summary, the recipe, the simulation's
//! per-layer SQNR, the sensitivity sweeps, the mixed-precision curve and, with a target,
//! the placement and latency tables; [`html`] lays it out.

mod svg;

use crate::compiler::Compiled;
use crate::ir::Model;
use crate::quant::amp::MixedPrecision;
use crate::quant::analysis::Analysis;
use crate::quant::{QuantPlan, Report, csv_field};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

pub use svg::heat_colour;

/// SQNR at or below this is red on the heatmap; at or above [`GREEN_DB`] green.
pub const RED_DB: f64 = 20.0;
pub const GREEN_DB: f64 = 40.0;

/// What the model is.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModelSummary {
    pub file: String,
    pub graph: String,
    /// Nodes of the optimized graph the plan quantizes.
    pub nodes: usize,
    pub parameters: usize,
    pub parameter_bytes: usize,
    pub macs: u64,
    /// `name: dtype [dims]`.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// Op type → count, in the optimized graph.
    pub ops: BTreeMap<String, usize>,
}

impl ModelSummary {
    /// The summary of `model` (read from `file`); its MACs at `shapes` (the plan's
    /// calibration shapes) where its inputs have dynamic dims.
    pub fn of(model: &Model, file: &str, shapes: &BTreeMap<String, Vec<usize>>) -> Self {
        let (parameters, parameter_bytes) = model.parameter_count();
        let mut fixed = model.clone();
        let shapes: HashMap<String, Vec<usize>> = shapes.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let macs = match crate::import::shapes::fix_inputs(&mut fixed, &shapes) {
            Ok(()) => crate::sim::count_macs(&fixed).0,
            Err(_) => crate::sim::count_macs(model).0,
        };
        let io = |ids: &[usize]| {
            ids.iter()
                .map(|&v| {
                    let v = &model.graph.values[v];
                    let dims = v.shape.as_ref().map_or_else(
                        || "?".to_owned(),
                        |s| s.iter().map(ToString::to_string).collect::<Vec<_>>().join("×"),
                    );
                    format!("{}: {} [{dims}]", v.name, v.dtype.map_or("?", |d| d.name()))
                })
                .collect()
        };
        Self {
            file: file.into(),
            graph: crate::quant::params::graph_id(model),
            nodes: model.graph.nodes.len(),
            parameters,
            parameter_bytes,
            macs,
            inputs: io(&model.graph.inputs),
            outputs: io(&model.graph.outputs),
            ops: model.op_histogram().into_iter().collect(),
        }
    }
}

/// How the plan was made.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RecipeSummary {
    pub preset: String,
    pub default: String,
    pub calibration: String,
    pub calibration_samples: usize,
    pub eval_samples: usize,
    /// Layers whose precision differs from the default: node → precision.
    pub overrides: BTreeMap<String, String>,
    /// Layers with an empirical bias correction.
    pub bias_corrected: usize,
}

/// A precision's keyword, or its weight and activation formats.
fn precision(p: crate::quant::LayerPrecision) -> String {
    p.keyword()
        .map_or_else(|| format!("{:?}/{:?}", p.weights, p.activations), str::to_owned)
}

impl RecipeSummary {
    pub fn of(plan: &QuantPlan, eval_samples: usize) -> Self {
        Self {
            preset: plan.preset.clone(),
            default: precision(plan.default),
            calibration: plan.calibration.name(),
            calibration_samples: plan.calibration_samples,
            eval_samples,
            overrides: plan.layers.iter().map(|(k, v)| (k.clone(), precision(*v))).collect(),
            bias_corrected: plan.bias_correction.len(),
        }
    }
}

/// One row of the per-layer table: a tensor of the simulation with its layer's
/// sensitivity and, with a target, its placement and latency.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LayerRow {
    pub index: usize,
    pub tensor: String,
    pub node: String,
    pub op: String,
    pub precision: String,
    pub sqnr_local_db: Option<f64>,
    pub sqnr_cumulative_db: Option<f64>,
    pub integer_sqnr_db: Option<f64>,
    pub integer_sqnr_cumulative_db: Option<f64>,
    pub cosine: f64,
    pub max_abs_err: f64,
    /// Output SQNR with only this layer quantized, and with all but this one.
    pub only_this_db: Option<f64>,
    pub all_but_this_db: Option<f64>,
    /// `NPU` or `CPU` on the target, and the layer's estimated latency (µs).
    pub device: Option<String>,
    pub latency_us: Option<f64>,
}

/// The placement and latency section (with `--target`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetSection {
    pub target: String,
    pub ops_on_npu: usize,
    pub ops_total: usize,
    pub npu_segments: usize,
    pub cpu_segments: usize,
    pub latency_ms: f64,
    pub npu_ms: f64,
    pub cpu_ms: f64,
    pub handoff_ms: f64,
    pub sram_peak_bytes: u64,
    pub sram_bytes: u64,
    pub fits_sram: bool,
    /// Per layer: node, op, device, precision, reason, MACs, cycles, latency, bound.
    pub layers: Vec<TargetLayer>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetLayer {
    pub node: String,
    pub op: String,
    pub device: String,
    pub precision: String,
    pub reason: String,
    pub macs: u64,
    pub cycles: f64,
    pub latency_us: f64,
    pub bound: String,
}

impl TargetSection {
    pub fn of(c: &Compiled) -> Self {
        let t = &c.totals;
        Self {
            target: c.target.clone(),
            ops_on_npu: t.ops_on_npu,
            ops_total: t.ops_total,
            npu_segments: t.npu_segments,
            cpu_segments: t.cpu_segments,
            latency_ms: t.latency_ms,
            npu_ms: t.npu_ms,
            cpu_ms: t.cpu_ms,
            handoff_ms: t.handoff_ms,
            sram_peak_bytes: t.sram_peak_bytes,
            sram_bytes: t.sram_bytes,
            fits_sram: t.fits_sram,
            layers: c
                .layers
                .iter()
                .map(|l| TargetLayer {
                    node: l.node.clone(),
                    op: l.op.clone(),
                    device: l.place.name().to_owned(),
                    precision: l.precision.clone(),
                    reason: l.reason.clone(),
                    macs: l.macs,
                    cycles: l.cycles,
                    latency_us: l.latency_us,
                    bound: l.bound.clone(),
                })
                .collect(),
        }
    }
}

/// A node of the graph picture: its box, label and heat.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GraphNode {
    pub name: String,
    pub op: String,
    pub x: f32,
    pub y: f32,
    pub w: f32,
    pub h: f32,
    /// Cumulative SQNR of its first output (`None`: exact or not simulated).
    pub sqnr_db: Option<f64>,
    /// Whether the simulation measured it (unmeasured boxes are grey).
    pub measured: bool,
    pub device: Option<String>,
}

/// The graph picture: laid-out boxes and edge routes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GraphPicture {
    pub width: f32,
    pub height: f32,
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<Vec<(f32, f32)>>,
}

/// Everything the report shows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StudyReport {
    pub version: u32,
    pub generator: String,
    pub model: ModelSummary,
    pub recipe: RecipeSummary,
    /// Per output: name, SQNR (fake-quant), integer SQNR, cosine.
    pub outputs: Vec<crate::quant::OutputReport>,
    pub layers: Vec<LayerRow>,
    /// Output SQNR with everything, only weights and only activations quantized.
    pub full_db: Option<f64>,
    pub weights_only_db: Option<f64>,
    pub activations_only_db: Option<f64>,
    pub mixed_precision: Option<MixedPrecision>,
    pub target: Option<TargetSection>,
    pub graph: GraphPicture,
    /// Evaluation samples held back from the sensitivity ranking, and how the ranking held
    /// on them (absent without a held-back part).
    #[serde(default)]
    pub sensitivity_held_back: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitivity_check: Option<crate::quant::analysis::RankCheck>,
}

impl StudyReport {
    /// Gathers the report; `analysis`, `amp` and `compiled` are optional sections.
    pub fn new(
        model: ModelSummary,
        plan: &QuantPlan,
        sim: &Report,
        analysis: Option<&Analysis>,
        amp: Option<MixedPrecision>,
        compiled: Option<&Compiled>,
    ) -> Self {
        let sens: HashMap<&str, (Option<f64>, Option<f64>)> = analysis
            .map(|a| {
                a.layers
                    .iter()
                    .map(|l| (l.node.as_str(), (l.only_this_db, l.all_but_this_db)))
                    .collect()
            })
            .unwrap_or_default();
        let mut placed: HashMap<&str, (String, f64)> = HashMap::new();
        if let Some(c) = compiled {
            for l in &c.layers {
                let e = placed
                    .entry(l.node.as_str())
                    .or_insert((l.place.name().to_owned(), 0.0));
                e.1 += l.latency_us;
            }
        }
        let layers = sim
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let (only, but) = sens.get(t.node.as_str()).copied().unwrap_or((None, None));
                let place = placed.get(t.node.as_str());
                LayerRow {
                    index: i,
                    tensor: t.name.clone(),
                    node: t.node.clone(),
                    op: t.op.clone(),
                    precision: format!("{:?}/{:?}", t.activations, t.weights),
                    sqnr_local_db: t.sqnr_local_db,
                    sqnr_cumulative_db: t.sqnr_cumulative_db,
                    integer_sqnr_db: t.integer_sqnr_db,
                    integer_sqnr_cumulative_db: t.integer_sqnr_cumulative_db,
                    cosine: t.cosine,
                    max_abs_err: t.max_abs_err,
                    only_this_db: only,
                    all_but_this_db: but,
                    device: place.map(|p| p.0.clone()),
                    latency_us: place.map(|p| p.1),
                }
            })
            .collect();
        Self {
            version: 1,
            generator: format!("NPU Studio {}", env!("CARGO_PKG_VERSION")),
            recipe: RecipeSummary::of(plan, sim.eval_samples),
            model,
            outputs: sim.outputs.clone(),
            layers,
            full_db: analysis.and_then(|a| a.full.sqnr_db),
            weights_only_db: analysis.and_then(|a| a.weights_only.sqnr_db),
            activations_only_db: analysis.and_then(|a| a.activations_only.sqnr_db),
            mixed_precision: amp,
            target: compiled.map(TargetSection::of),
            graph: GraphPicture::default(),
            sensitivity_held_back: analysis.map_or(0, |a| a.held_back),
            sensitivity_check: analysis.and_then(|a| a.rank_check.clone()),
        }
    }

    /// The per-layer table as CSV.
    pub fn layers_csv(&self) -> String {
        let f = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.4}"));
        let mut s = String::from(
            "index,tensor,node,op,precision,sqnr_local_db,sqnr_cumulative_db,integer_sqnr_db,\
             integer_sqnr_cumulative_db,cosine,max_abs_err,only_this_db,all_but_this_db,device,latency_us\n",
        );
        for l in &self.layers {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{},{:.6},{:.6e},{},{},{},{}",
                l.index,
                csv_field(&l.tensor),
                csv_field(&l.node),
                csv_field(&l.op),
                l.precision,
                f(l.sqnr_local_db),
                f(l.sqnr_cumulative_db),
                f(l.integer_sqnr_db),
                f(l.integer_sqnr_cumulative_db),
                l.cosine,
                l.max_abs_err,
                f(l.only_this_db),
                f(l.all_but_this_db),
                l.device.as_deref().unwrap_or(""),
                f(l.latency_us),
            );
        }
        s
    }
}

/// `s` with HTML's special characters escaped.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn db(x: Option<f64>) -> String {
    x.map_or_else(|| "exact".into(), |v| format!("{v:.2}"))
}

/// A sortable cell's key: exact (no error) sorts above every finite SQNR.
fn key(x: Option<f64>) -> String {
    x.map_or_else(|| "1e300".into(), |v| format!("{v}"))
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d2330;background:#f6f7f9}\
header{background:#1f2a44;color:#fff;padding:18px 28px}header h1{margin:0;font-size:22px}header p{margin:4px 0 0;opacity:.8}\
main{padding:8px 28px 40px;max-width:1400px}section{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:14px 18px;margin:16px 0}\
h2{font-size:17px;margin:0 0 10px}table{border-collapse:collapse;font-size:12.5px;width:100%}\
th,td{border-bottom:1px solid #e6e8ec;padding:4px 8px;text-align:left;white-space:nowrap}\
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#eef1f5;position:sticky;top:0}\
table.sortable th{cursor:pointer;user-select:none}table.sortable th:after{content:' \\2195';opacity:.35}\
.kv{display:grid;grid-template-columns:max-content 1fr;gap:3px 16px;font-size:13.5px}.kv b{font-weight:600}\
.scroll{max-height:520px;overflow:auto;border:1px solid #e6e8ec}.plots{display:flex;flex-wrap:wrap;gap:18px}\
.chip{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:middle;margin:0 4px 0 10px}\
.note{color:#5b6474;font-size:12.5px}.graph{overflow:auto;max-height:760px;border:1px solid #e6e8ec;background:#fbfcfd}";

const SORT_SCRIPT: &str = "document.querySelectorAll('table.sortable').forEach(function(t){\
t.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){\
var b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows),asc=th.dataset.dir!=='asc';th.dataset.dir=asc?'asc':'desc';\
rows.sort(function(a,c){var x=a.cells[i].dataset.v,y=c.cells[i].dataset.v;if(x===undefined){x=a.cells[i].textContent;}if(y===undefined){y=c.cells[i].textContent;}\
var nx=parseFloat(x),ny=parseFloat(y),r=(!isNaN(nx)&&!isNaN(ny))?nx-ny:String(x).localeCompare(String(y));return asc?r:-r;});\
rows.forEach(function(r){b.appendChild(r);});});});});";

/// The report as one self-contained HTML page.
pub fn html(r: &StudyReport) -> String {
    let mut h = String::with_capacity(64 * 1024 + r.layers.len() * 600);
    let title = format!("{} — {} quantization report", file_name(&r.model.file), r.recipe.preset);
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><style>{STYLE}</style></head><body>\
         <header><h1>{}</h1><p>{} · graph {} · {}</p></header><main>",
        esc(&title),
        esc(&title),
        esc(&r.model.file),
        esc(&r.model.graph),
        esc(&r.generator)
    );
    summary(&mut h, r);
    outputs(&mut h, r);
    plots(&mut h, r);
    graph(&mut h, r);
    layer_table(&mut h, r);
    if let Some(t) = &r.target {
        target(&mut h, t);
    }
    let _ = write!(h, "</main><script>{SORT_SCRIPT}</script></body></html>");
    h
}

fn file_name(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

fn summary(h: &mut String, r: &StudyReport) {
    let m = &r.model;
    let rc = &r.recipe;
    let ops: Vec<String> = {
        let mut v: Vec<(&String, &usize)> = m.ops.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        v.iter().map(|(k, n)| format!("{} {n}", esc(k))).collect()
    };
    let _ = write!(
        h,
        "<section id=\"summary\"><h2>Model and recipe</h2><div class=\"kv\">\
         <b>Model</b><span>{}</span><b>Inputs</b><span>{}</span><b>Outputs</b><span>{}</span>\
         <b>Optimized graph</b><span>{} nodes · {} parameters ({:.2} MB) · {:.1} M MACs</span>\
         <b>Ops</b><span>{}</span>\
         <b>Recipe</b><span>{} (default {})</span><b>Calibration</b><span>{} on {} samples · bias correction on {} layers</span>\
         <b>Evaluation</b><span>{} samples</span>\
         <b>Overrides</b><span>{}</span></div></section>",
        esc(&m.file),
        esc(&m.inputs.join(", ")),
        esc(&m.outputs.join(", ")),
        m.nodes,
        m.parameters,
        m.parameter_bytes as f64 / 1e6,
        m.macs as f64 / 1e6,
        ops.join(", "),
        esc(&rc.preset),
        esc(&rc.default),
        esc(&rc.calibration),
        rc.calibration_samples,
        rc.bias_corrected,
        rc.eval_samples,
        if rc.overrides.is_empty() {
            "none".to_owned()
        } else {
            rc.overrides
                .iter()
                .map(|(k, v)| format!("{} → {}", esc(k), esc(v)))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
}

fn outputs(h: &mut String, r: &StudyReport) {
    h.push_str(
        "<section id=\"outputs\"><h2>Outputs against FP32</h2><table><thead><tr><th>output</th>\
         <th class=\"n\">SQNR dB (fake-quant)</th><th class=\"n\">SQNR dB (integer)</th><th class=\"n\">cosine</th>\
         <th class=\"n\">max |error|</th></tr></thead><tbody>",
    );
    for o in &r.outputs {
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.5}</td><td class=\"n\">{:.4e}</td></tr>",
            esc(&o.name),
            db(o.sqnr_db),
            o.integer_sqnr_db.map_or_else(|| "—".into(), |v| format!("{v:.2}")),
            o.cosine,
            o.max_abs_err
        );
    }
    h.push_str("</tbody></table>");
    if let (Some(f), Some(w), Some(a)) = (r.full_db, r.weights_only_db, r.activations_only_db) {
        let _ = write!(
            h,
            "<p class=\"note\">Lowest output SQNR: everything quantized {f:.2} dB · weights only {w:.2} dB · activations only {a:.2} dB.</p>"
        );
    }
    h.push_str("</section>");
}

fn plots(h: &mut String, r: &StudyReport) {
    h.push_str("<section id=\"plots\"><h2>Plots</h2><div class=\"plots\">");
    let fq: Vec<(f64, f64)> = r
        .layers
        .iter()
        .filter_map(|l| Some((l.index as f64, l.sqnr_cumulative_db?)))
        .collect();
    let int: Vec<(f64, f64)> = r
        .layers
        .iter()
        .filter_map(|l| Some((l.index as f64, l.integer_sqnr_cumulative_db?)))
        .collect();
    let mut series = vec![("fake-quant", "#2f6fd0", fq)];
    if !int.is_empty() {
        series.push(("integer reference", "#d0602f", int));
    }
    h.push_str(&svg::line_plot(
        "Cumulative SQNR along the graph",
        "tensor (graph order)",
        "dB",
        &series,
        None,
    ));
    // The layers whose quantization alone costs most.
    let mut sens: Vec<(String, f64)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for l in &r.layers {
        if let Some(v) = l.only_this_db
            && seen.insert(l.node.clone())
        {
            sens.push((l.node.clone(), v));
        }
    }
    sens.sort_by(|a, b| a.1.total_cmp(&b.1));
    sens.truncate(20);
    if sens.is_empty() {
        h.push_str("<p class=\"note\">Sensitivity: not computed.</p>");
    } else {
        h.push_str(&svg::bar_plot(
            "Sensitivity: output SQNR with only this layer quantized (lowest 20)",
            &sens,
        ));
        if let Some(c) = &r.sensitivity_check {
            let _ = write!(h, "<p class=\"note\">{}</p>", esc(&c.summary(r.sensitivity_held_back)));
        }
    }
    match &r.mixed_precision {
        Some(mp) if !mp.curve.is_empty() => {
            let along = |db: fn(&crate::quant::amp::CurvePoint) -> Option<f64>| -> Vec<(f64, f64)> {
                mp.curve
                    .iter()
                    .filter_map(|c| Some((c.promoted as f64, db(c)?)))
                    .collect()
            };
            let held = along(|c| c.held_db);
            let mut lines = vec![("output SQNR, fitting samples", "#2f9d57", along(|c| c.sqnr_db))];
            if !held.is_empty() {
                lines.push(("held-back samples", "#c0392b", held));
            }
            h.push_str(&svg::line_plot(
                "Mixed precision: output SQNR by layers promoted",
                &format!("layers promoted (ranked by {})", mp.cost),
                "dB",
                &lines,
                Some((mp.target_db, "target")),
            ));
        }
        _ => h.push_str("<p class=\"note\">Mixed-precision curve: not computed (pass --target-sqnr).</p>"),
    }
    h.push_str("</div></section>");
}

fn graph(h: &mut String, r: &StudyReport) {
    if r.graph.nodes.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<section id=\"graph\"><h2>Graph: cumulative SQNR heatmap</h2><p class=\"note\">\
         <span class=\"chip\" style=\"background:{}\"></span>≤ {RED_DB} dB\
         <span class=\"chip\" style=\"background:{}\"></span>{} dB\
         <span class=\"chip\" style=\"background:{}\"></span>≥ {GREEN_DB} dB or exact\
         <span class=\"chip\" style=\"background:#c9ced6\"></span>not measured{}</p><div class=\"graph\">{}</div></section>",
        heat_colour(Some(RED_DB)),
        heat_colour(Some(f64::midpoint(RED_DB, GREEN_DB))),
        f64::midpoint(RED_DB, GREEN_DB),
        heat_colour(None),
        if r.target.is_some() {
            " · a dashed border: on the host CPU"
        } else {
            ""
        },
        svg::graph(&r.graph)
    );
}

fn layer_table(h: &mut String, r: &StudyReport) {
    let has_target = r.target.is_some();
    h.push_str(
        "<section id=\"layers\"><h2>Per-layer SQNR</h2><p class=\"note\">Click a column to sort. Local: the op alone \
         on FP32 inputs put on their grids; cumulative: the quantized model so far against FP32.</p><div class=\"scroll\">\
         <table class=\"sortable\"><thead><tr><th class=\"n\">#</th><th>tensor</th><th>node</th><th>op</th><th>precision</th>\
         <th class=\"n\">local dB</th><th class=\"n\">cumulative dB</th><th class=\"n\">integer local dB</th>\
         <th class=\"n\">integer cumulative dB</th><th class=\"n\">cosine</th><th class=\"n\">max |error|</th>\
         <th class=\"n\">only this dB</th><th class=\"n\">all but this dB</th>",
    );
    if has_target {
        h.push_str("<th>device</th><th class=\"n\">latency µs</th>");
    }
    h.push_str("</tr></thead><tbody>");
    for l in &r.layers {
        let num = |x: Option<f64>| {
            x.map_or_else(
                || "<td class=\"n\" data-v=\"-1e300\">—</td>".to_owned(),
                |v| format!("<td class=\"n\" data-v=\"{v}\">{v:.2}</td>"),
            )
        };
        let sq = |x: Option<f64>| format!("<td class=\"n\" data-v=\"{}\">{}</td>", key(x), db(x));
        let _ = write!(
            h,
            "<tr><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>{}{}{}{}\
             <td class=\"n\">{:.5}</td><td class=\"n\" data-v=\"{}\">{:.3e}</td>{}{}",
            l.index,
            esc(&l.tensor),
            esc(&l.node),
            esc(&l.op),
            esc(&l.precision),
            sq(l.sqnr_local_db),
            sq(l.sqnr_cumulative_db),
            num(l.integer_sqnr_db),
            num(l.integer_sqnr_cumulative_db),
            l.cosine,
            l.max_abs_err,
            l.max_abs_err,
            num(l.only_this_db),
            num(l.all_but_this_db),
        );
        if has_target {
            let _ = write!(
                h,
                "<td>{}</td>{}",
                esc(l.device.as_deref().unwrap_or("")),
                num(l.latency_us)
            );
        }
        h.push_str("</tr>");
    }
    h.push_str("</tbody></table></div></section>");
}

fn target(h: &mut String, t: &TargetSection) {
    let _ = write!(
        h,
        "<section id=\"target\"><h2>Placement and latency on {}</h2><div class=\"kv\">\
         <b>Ops on the NPU</b><span>{} of {} ({} NPU segments, {} CPU segments)</span>\
         <b>Latency</b><span>{:.3} ms (NPU {:.3} ms · CPU {:.3} ms · hand-offs {:.3} ms)</span>\
         <b>SRAM</b><span>peak {:.1} KiB of {:.1} KiB{}</span></div>\
         <div class=\"scroll\" style=\"margin-top:10px\"><table class=\"sortable\"><thead><tr><th>node</th><th>op</th>\
         <th>device</th><th>precision</th><th class=\"n\">MACs</th><th class=\"n\">cycles</th><th class=\"n\">latency µs</th>\
         <th>bound</th><th>reason</th></tr></thead><tbody>",
        esc(&t.target),
        t.ops_on_npu,
        t.ops_total,
        t.npu_segments,
        t.cpu_segments,
        t.latency_ms,
        t.npu_ms,
        t.cpu_ms,
        t.handoff_ms,
        t.sram_peak_bytes as f64 / 1024.0,
        t.sram_bytes as f64 / 1024.0,
        if t.fits_sram { "" } else { " (spills off-chip)" }
    );
    for l in &t.layers {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\" data-v=\"{}\">{:.0}</td>\
             <td class=\"n\" data-v=\"{}\">{:.2}</td><td>{}</td><td>{}</td></tr>",
            esc(&l.node),
            esc(&l.op),
            esc(&l.device),
            esc(&l.precision),
            l.macs,
            l.cycles,
            l.cycles,
            l.latency_us,
            l.latency_us,
            esc(&l.bound),
            esc(&l.reason)
        );
    }
    h.push_str("</tbody></table></div></section>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn exact_sorts_above_every_finite_sqnr() {
        let (exact, high) = (key(None), key(Some(250.0)));
        assert!(exact.parse::<f64>().expect("number") > high.parse::<f64>().expect("number"));
    }
}
