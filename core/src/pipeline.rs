//! The pipeline, one typed call per stage: [`import`] → [`optimize`] → [`calibrate`] →
//! [`plan`] → [`simulate`] (→ compile and emulate as they come) → [`export_bundle`]. Each call
//! takes a [`Progress`] (progress and cancellation), returns the stage's value, which the
//! studio shows and a user can save, and fails with the stage's own error, `Cancelled` among
//! its variants. The command line and the studio's workers both go through these calls, so
//! the stages are strung together in one place.
//!
//! ```no_run
//! use npu_core::pipeline::{self, Passes, PlanRequest, Samples};
//! use npu_core::progress::Silent;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let imported = pipeline::import(std::path::Path::new("model.onnx"), &Default::default(), &Silent)?;
//! let optimized = pipeline::optimize(&imported.model, &Passes::All, &Silent)?;
//! let q = pipeline::quantizer(&optimized.model, pipeline::default_threads())?;
//! let calib = Samples::open("photos/", "size=48x192;scale=1/255")?;
//! let stats = pipeline::calibrate(&q, &calib, &Silent)?;
//! let planned = pipeline::plan(&q, &stats, &calib, &PlanRequest::preset("w8a8"), &Silent)?;
//! let report = pipeline::simulate(&q, &planned.plan, &calib, &Silent)?;
//! # let _ = report; Ok(()) }
//! ```

use crate::export::{ExportError, write_atomic};
use crate::import::{ImportError, ImportReport, LoadOptions};
use crate::ir::{Model, Tensor};
use crate::passes::{OptimizeError, Optimized};
use crate::progress::Progress;
use crate::quant::amp::MixedPrecision;
use crate::quant::analysis::Analysis;
use crate::quant::data::{DataError, Preprocess, PreprocessError, Source, source};
use crate::quant::live::{Keep, Live};
use crate::quant::observer::Calibration;
use crate::quant::recipe::{Recipe, RecipeError};
use crate::quant::{BiasCorrectionNote, LayerPrecision, QuantError, QuantPlan, Quantizer, Report, Stats};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The threads the kernels use when nobody says: every core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

// ---- import -----------------------------------------------------------------------------

/// Stage 1: the model as imported, with the importer's warnings.
pub struct Imported {
    pub model: Model,
    pub report: ImportReport,
}

/// Imports a model file with the importer its content calls for (see
/// [`crate::import::detect`]).
pub fn import(path: &Path, options: &LoadOptions, progress: &dyn Progress) -> Result<Imported, ImportError> {
    progress.update(0, 1, "reading");
    if progress.cancelled() {
        return Err(ImportError::Cancelled);
    }
    let (model, report) = crate::import::load_with(path, options)?;
    if progress.cancelled() {
        return Err(ImportError::Cancelled);
    }
    progress.update(1, 1, "imported");
    Ok(Imported { model, report })
}

// ---- optimize ---------------------------------------------------------------------------

/// Which graph-optimization passes run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Passes {
    /// Every pass of [`crate::passes::all_passes`].
    #[default]
    All,
    /// Only these (by name), in the standard order.
    Only(Vec<String>),
}

/// Stage 2: the passes to a fixed point; the result keeps every patch and the log, so any
/// step can be replayed.
pub fn optimize(model: &Model, passes: &Passes, progress: &dyn Progress) -> Result<Optimized, OptimizeError> {
    let passes = match passes {
        Passes::All => crate::passes::all_passes(),
        Passes::Only(names) => crate::passes::select(names)?,
    };
    let opts = crate::passes::Options {
        passes,
        progress,
        ..crate::passes::Options::default()
    };
    crate::passes::optimize(model, &opts)
}

/// The quantizer on an optimized graph: what stages 3 to 5 run on.
pub fn quantizer(optimized: &Model, threads: usize) -> Result<Quantizer<'_>, QuantError> {
    Quantizer::new(optimized, threads)
}

// ---- samples ----------------------------------------------------------------------------

/// A calibration or evaluation set: where the samples are and how images become inputs.
#[derive(Clone, Debug)]
pub struct Samples {
    /// As the user gave it: a folder, one file, or `synthetic:N`.
    pub path: String,
    pub source: Source,
    pub preprocess: Preprocess,
}

/// Why a sample set cannot be opened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SamplesError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Preprocess(#[from] PreprocessError),
}

impl Samples {
    /// Lists `path` (a folder of `.npy`/`.npz`/`.png`/`.jpg`, one such file, or
    /// `synthetic:N`) and parses the preprocessing spec.
    pub fn open(path: &str, preprocess: &str) -> Result<Self, SamplesError> {
        let preprocess = Preprocess::parse(preprocess)?;
        Ok(Self {
            path: path.to_owned(),
            source: source(path)?,
            preprocess,
        })
    }

    pub fn len(&self) -> usize {
        self.source.len()
    }

    pub fn is_empty(&self) -> bool {
        self.source.is_empty()
    }

    /// Random data: the figures it gives do not describe real inputs.
    pub fn is_synthetic(&self) -> bool {
        matches!(self.source, Source::Synthetic(_) | Source::SyntheticFrom(..))
    }

    /// Streams the samples as `model`'s inputs, each checked (errors name the file).
    pub fn iter<'a>(
        &'a self,
        model: &'a Model,
    ) -> impl Iterator<Item = Result<(String, HashMap<String, Tensor>), QuantError>> + 'a {
        self.source.samples(model, &self.preprocess)
    }

    /// Every sample, in memory (what the studio's live simulation keeps).
    pub fn load(&self, model: &Model, progress: &dyn Progress) -> Result<Vec<HashMap<String, Tensor>>, QuantError> {
        let mut out = Vec::with_capacity(self.len());
        for (k, s) in self.iter(model).enumerate() {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            progress.update(k, self.len(), "reading the samples");
            out.push(s?.1);
        }
        Ok(out)
    }
}

/// A quantizer error as a stage's: its `Cancelled` as the stage's `Cancelled`.
macro_rules! from_quant_error {
    ($($stage:ty),*) => {
        $(impl From<QuantError> for $stage {
            fn from(e: QuantError) -> Self {
                match e {
                    QuantError::Cancelled => Self::Cancelled,
                    e => Self::Quant(e),
                }
            }
        })*
    };
}

from_quant_error!(CalibrateError, PlanError, SimulateError);

// ---- calibrate --------------------------------------------------------------------------

/// Why calibration stopped.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// A sample that cannot be read or run (the message names the file and node).
    #[error(transparent)]
    Quant(QuantError),
    #[error("cancelled")]
    Cancelled,
}

/// Stage 3: one streaming pass over the calibration set; every quantized activation's
/// statistics (exact extremes, moving averages, a growing histogram).
pub fn calibrate(q: &Quantizer<'_>, samples: &Samples, progress: &dyn Progress) -> Result<Stats, CalibrateError> {
    let stats = q.observe(&mut samples.iter(q.model), samples.len(), progress)?;
    progress.update(stats.samples, samples.len(), "choosing ranges");
    Ok(stats)
}

// ---- plan -------------------------------------------------------------------------------

/// Whether a plan gets the empirical bias correction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BiasCorrection {
    /// Fitted on the calibration set, kept only where it raises the output SQNR on a
    /// held-back third of it (see [`Quantizer::correct_bias`]).
    #[default]
    Measure,
    Off,
}

/// What the plan stage is asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanRequest {
    pub recipe: Recipe,
    /// What the plan records as its recipe: the preset, or the recipe file's name.
    pub label: String,
    /// Overrides the recipe's (or its preset's) calibration method.
    pub calibration: Option<Calibration>,
    pub bias_correction: BiasCorrection,
}

impl PlanRequest {
    /// A preset's recipe, its own calibration method, bias correction measured.
    pub fn preset(name: &str) -> Self {
        Self::recipe(Recipe::from_preset(name), name.to_owned())
    }

    pub fn recipe(recipe: Recipe, label: String) -> Self {
        Self {
            recipe,
            label,
            calibration: None,
            bias_correction: BiasCorrection::Measure,
        }
    }
}

/// Stage 4's value: the plan, and how it was made.
#[derive(Clone, Debug)]
pub struct Planned {
    pub plan: QuantPlan,
    /// The calibration method the ranges were chosen with.
    pub method: Calibration,
    /// How many nodes of the optimized graph each recipe rule matched (in rule order).
    pub rules_matched: Vec<usize>,
    /// Layers whose preset precision was changed for the integer kernels' sake.
    pub adjusted: Vec<crate::quant::recipe::Adjustment>,
    /// What the bias correction did (`None`: not asked for).
    pub bias_correction: Option<BiasCorrectionNote>,
    /// What the range refinement did (`None`: the recipe does not ask for it).
    pub refined: Option<crate::quant::refine::Refined>,
    /// What the SeqMSE weight-range search did (`None`: the recipe does not ask for it).
    pub seq_mse: Option<crate::quant::seqmse::SeqMse>,
    /// What GPTQ did (`None`: the recipe does not ask for it).
    pub gptq: Option<crate::quant::gptq::Gptq>,
}

/// Why planning stopped.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Recipe(#[from] RecipeError),
    #[error(transparent)]
    Quant(QuantError),
    #[error("cancelled")]
    Cancelled,
}

/// Stage 4: the recipe resolved on the optimized graph, every clipping range chosen from
/// the statistics, and (when asked) the empirical bias correction measured on `calib`.
pub fn plan(
    q: &Quantizer<'_>,
    stats: &Stats,
    calib: &Samples,
    request: &PlanRequest,
    progress: &dyn Progress,
) -> Result<Planned, PlanError> {
    let recipe = &request.recipe;
    let resolved = resolve_recipe(q.model, recipe, &stats.input_shapes)?;
    let method = request.calibration.unwrap_or(resolved.calibration);
    let mut plan = q.plan_from_stats(stats, &recipe.preset, method)?;
    plan.preset.clone_from(&request.label);
    plan.inputs = resolved.inputs;
    plan.layers = resolved.layers;
    let mut refined = None;
    if recipe.refine_ranges {
        let (p, r) = q.refine_ranges(plan, stats, &calib.source, &calib.preprocess, progress)?;
        plan = p;
        refined = Some(r);
    }
    let mut seq_mse = None;
    if recipe.seq_mse {
        let (p, r) = q.seq_mse(plan, &calib.source, &calib.preprocess, progress)?;
        plan = p;
        seq_mse = Some(r);
    }
    let mut gptq = None;
    if recipe.gptq {
        let (p, r) = q.gptq(plan, &calib.source, &calib.preprocess, progress)?;
        plan = p;
        gptq = Some(r);
    }
    let mut note = None;
    if request.bias_correction == BiasCorrection::Measure {
        let (p, n) = q.correct_bias(plan, &calib.source, &calib.preprocess, progress)?;
        plan = p;
        note = Some(n);
    }
    Ok(Planned {
        plan,
        method,
        rules_matched: resolved.matched,
        adjusted: resolved.adjusted,
        bias_correction: note,
        refined,
        seq_mse,
        gptq,
    })
}

/// `model` (the optimized graph) with the recipe's cross-layer equalization applied, and
/// what it did (`None`: the recipe does not ask for it).
pub fn equalized(model: Model, recipe: &Recipe) -> (Model, Option<crate::quant::equalize::Equalized>) {
    if !recipe.equalize {
        return (model, None);
    }
    let (m, e) = crate::quant::equalize::equalize(&model);
    (m, Some(e))
}

/// `model` (the optimized graph, equalized first) with the recipe's bias-absorption shifts
/// applied when they win on held-back calibration samples, and what they did (`None`: the
/// recipe does not ask for it).
pub fn absorbed(
    model: Model,
    recipe: &Recipe,
    calib: &Samples,
    threads: usize,
    progress: &dyn Progress,
) -> Result<(Model, Option<crate::quant::absorb::Absorbed>), PlanError> {
    if !recipe.absorb_bias {
        return Ok((model, None));
    }
    let a = Quantizer::new(&model, threads)?.absorb(recipe, &calib.source, &calib.preprocess, progress)?;
    let mut model = model;
    crate::quant::absorb::apply(&mut model, &a.shifts)
        .map_err(|e| PlanError::Quant(QuantError::Data(e.to_string())))?;
    Ok((model, Some(a)))
}

/// `model` (the optimized graph, equalized first) with the recipe's SmoothQuant scales
/// applied when they win on held-back calibration samples, and what they did (`None`: the
/// recipe does not ask for it).
pub fn smoothed(
    model: Model,
    recipe: &Recipe,
    calib: &Samples,
    threads: usize,
    progress: &dyn Progress,
) -> Result<(Model, Option<crate::quant::smooth::Smoothed>), PlanError> {
    if !recipe.smooth_quant {
        return Ok((model, None));
    }
    let s = Quantizer::new(&model, threads)?.smooth(recipe, &calib.source, &calib.preprocess, progress)?;
    let mut model = model;
    crate::quant::smooth::apply(&mut model, &s.scales)
        .map_err(|e| PlanError::Quant(QuantError::Data(e.to_string())))?;
    Ok((model, Some(s)))
}

/// The optimized graph after the weight transforms a recipe asks for, and what each did.
pub struct Transformed {
    pub model: Model,
    pub equalized: Option<crate::quant::equalize::Equalized>,
    pub absorbed: Option<crate::quant::absorb::Absorbed>,
    pub smoothed: Option<crate::quant::smooth::Smoothed>,
}

/// The recipe's weight transforms on `model` (the optimized graph), in their one order:
/// cross-layer equalization ([`equalized`]), then bias absorption ([`absorbed`]), then
/// SmoothQuant ([`smoothed`]), each measured on the graph the previous one left. The
/// command line and the studio's calibration both start from it.
pub fn transform_weights(
    model: Model,
    recipe: &Recipe,
    calib: &Samples,
    threads: usize,
    progress: &dyn Progress,
) -> Result<Transformed, PlanError> {
    let (model, equalized) = equalized(model, recipe);
    let (model, absorbed) = absorbed(model, recipe, calib, threads, progress)?;
    let (model, smoothed) = smoothed(model, recipe, calib, threads, progress)?;
    Ok(Transformed {
        model,
        equalized,
        absorbed,
        smoothed,
    })
}

/// `recipe` resolved on `model` (the optimized graph) with its inputs fixed to
/// `input_shapes` (a calibrated plan's), so that the layers whose precision depends on a
/// shape (a Softmax's width) see it even when the model's dims are dynamic.
pub fn resolve_recipe(
    model: &Model,
    recipe: &Recipe,
    input_shapes: &BTreeMap<String, Vec<usize>>,
) -> Result<crate::quant::recipe::Resolved, RecipeError> {
    let shapes: HashMap<String, Vec<usize>> = input_shapes.clone().into_iter().collect();
    if !shapes.is_empty() {
        let mut fixed = model.clone();
        if crate::import::shapes::fix_inputs(&mut fixed, &shapes).is_ok() {
            return recipe.resolve(&fixed.graph);
        }
    }
    recipe.resolve(&model.graph)
}

/// Part of planning: automatic mixed precision from `plan` to `target_db` on the
/// calibration set (where the bias corrections it measures again come from), its last
/// third held back to validate each point. Returns the curve and the plan with the fewest
/// promoted layers that reaches the target on both parts.
pub fn mixed_precision(
    q: &Quantizer<'_>,
    plan: &QuantPlan,
    calib: &Samples,
    target_db: f64,
    promote_to: LayerPrecision,
    cost: crate::quant::amp::Cost<'_>,
    progress: &dyn Progress,
) -> Result<(MixedPrecision, QuantPlan), PlanError> {
    let cached = q.cache(&mut calib.iter(q.model))?;
    Ok(q.mixed_precision_by(plan, &cached, target_db, promote_to, cost, progress)?)
}

/// A plan's estimated latency on `target` (legalized on `model`, the optimized graph, and
/// compiled): what a mixed-precision search weighs with [`crate::quant::amp::Cost::Latency`].
/// `None` for a plan with no integer form.
pub fn latency_estimate(
    model: &Model,
    target: &crate::target::Target,
    plan: &QuantPlan,
) -> Option<crate::quant::amp::Latency> {
    let program = legalize(model, plan, &HashMap::new()).ok()?;
    let c = compile(&program, target, &crate::compiler::Options::default());
    let mut per_node_us: HashMap<String, f64> = HashMap::new();
    for l in &c.layers {
        *per_node_us.entry(l.node.clone()).or_default() += l.latency_us;
    }
    Some(crate::quant::amp::Latency {
        total_us: c.totals.latency_ms * 1e3,
        per_node_us,
    })
}

// ---- simulate ---------------------------------------------------------------------------

/// Why a simulation stopped.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Quant(QuantError),
    #[error("cancelled")]
    Cancelled,
}

/// Stage 5: fake-quant simulation of `plan` on the evaluation set; every tensor's local
/// and cumulative error against FP32, and every output's.
pub fn simulate(
    q: &Quantizer<'_>,
    plan: &QuantPlan,
    eval: &Samples,
    progress: &dyn Progress,
) -> Result<Report, SimulateError> {
    Ok(q.simulate(plan, &mut eval.iter(q.model), eval.len(), progress)?)
}

/// Stage 5 as the studio runs it: every sample's FP32 and fake-quant values kept, so an
/// edit of the plan re-runs only what lies downstream ([`Quantizer::live_update`]).
#[expect(clippy::implicit_hasher, reason = "samples are the std maps the quantizer keeps")]
pub fn simulate_live(
    q: &Quantizer<'_>,
    plan: QuantPlan,
    inputs: Vec<HashMap<String, Tensor>>,
    keep: Keep,
    progress: &dyn Progress,
) -> Result<Live, SimulateError> {
    Ok(q.live(plan, inputs, keep, progress)?)
}

/// Stage 5 with the analyses: weights-only and activations-only error, per-layer sweeps,
/// histograms with the plan's clipping ranges.
pub fn analyze(
    q: &Quantizer<'_>,
    plan: &QuantPlan,
    eval: &Samples,
    progress: &dyn Progress,
) -> Result<Analysis, SimulateError> {
    let cached = q.cache(&mut eval.iter(q.model))?;
    Ok(q.analyze(plan, &cached, progress)?)
}

// ---- export -----------------------------------------------------------------------------

/// Writes a plan as RON (what `npu-studio quantize --out` writes), atomically.
pub fn export_plan(plan: &QuantPlan, path: &Path) -> Result<(), ExportError> {
    let text = ron::ser::to_string_pretty(plan, ron::ser::PrettyConfig::default()).map_err(|e| ExportError::Model {
        file: path.display().to_string(),
        message: e.to_string(),
    })?;
    write_atomic(path, text.as_bytes())
}

/// Writes any report as pretty JSON, atomically.
pub fn export_json(value: &impl serde::Serialize, path: &Path) -> Result<(), ExportError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| ExportError::Model {
        file: path.display().to_string(),
        message: e.to_string(),
    })?;
    write_atomic(path, text.as_bytes())
}

/// A plan file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PlanFileError {
    #[error("reading {file}: {source}")]
    Io { file: String, source: std::io::Error },
    #[error("{file}: not a quantization plan: {message}")]
    Format { file: String, message: String },
}

/// Reads a plan written by [`export_plan`].
pub fn load_plan(path: &Path) -> Result<QuantPlan, PlanFileError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| PlanFileError::Io {
        file: file.clone(),
        source,
    })?;
    ron::from_str(&text).map_err(|e| PlanFileError::Format {
        file,
        message: e.to_string(),
    })
}

/// Which deployable files the export stage writes beside the graph, plan and report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BundleFormats {
    /// `<stem>.int8.tflite`, or `<stem>.int16.tflite` when layers have 16-bit activations
    /// (when the plan has an integer form).
    pub tflite: bool,
    /// `<stem>.qdq.onnx`.
    pub qdq: bool,
    /// `<stem>.report.html` with `.report.json` and `.report.csv` beside it.
    pub report: bool,
}

impl Default for BundleFormats {
    fn default() -> Self {
        Self {
            tflite: true,
            qdq: true,
            report: true,
        }
    }
}

/// Writes a study report: the HTML page at `html`, its JSON and its per-layer CSV beside
/// it (the same stem, `.json` and `.csv`), each atomically. Returns the three paths.
pub fn write_study_report(r: &crate::report::StudyReport, html: &Path) -> Result<[PathBuf; 3], ExportError> {
    let page = crate::report::html(r);
    crate::export::write_atomic(html, page.as_bytes())?;
    let (json, csv) = (html.with_extension("json"), html.with_extension("csv"));
    export_json(r, &json)?;
    crate::export::write_atomic(&csv, r.layers_csv().as_bytes())?;
    Ok([html.to_path_buf(), json, csv])
}

/// What the export stage wrote, and why a chosen file was not written.
#[derive(Clone, Debug, Default)]
pub struct Bundle {
    pub files: Vec<PathBuf>,
    pub skipped: Vec<String>,
    /// What a user should know of a written file (nodes left in float).
    pub notes: Vec<String>,
}

/// The export stage: the optimized graph (`<stem>.optimized.onnx`), the plan
/// (`<stem>.quant.ron`, what `analyze --plan` reads), its error report
/// (`<stem>.quant_report.json`) and the chosen deployable files (`<stem>.int8.tflite` —
/// `.int16.tflite` with 16-bit layers — and `<stem>.qdq.onnx`) in `dir`, each written
/// atomically; with `study` and [`BundleFormats::report`], the study report
/// (`<stem>.report.html`, `.json`, `.csv`). A TFLite file the plan cannot
/// become (no integer form yet) is skipped with the reason; every other failure is an
/// error.
pub fn export_bundle(
    optimized: &Model,
    plan: &QuantPlan,
    report: &Report,
    dir: &Path,
    stem: &str,
    formats: BundleFormats,
    study: Option<&crate::report::StudyReport>,
    progress: &dyn Progress,
) -> Result<Bundle, ExportError> {
    std::fs::create_dir_all(dir).map_err(|source| ExportError::Io {
        file: dir.display().to_string(),
        source,
    })?;
    let onnx = dir.join(format!("{stem}.optimized.onnx"));
    let plan_path = dir.join(format!("{stem}.quant.ron"));
    let report_path = dir.join(format!("{stem}.quant_report.json"));
    let steps = 3 + usize::from(formats.tflite) + usize::from(formats.qdq);
    progress.update(0, steps, "writing the optimized graph");
    // (`save` writes the fused forms onnxruntime lacks as their ONNX equivalents.)
    crate::export::onnx::save(optimized, &onnx)?;
    if progress.cancelled() {
        return Err(ExportError::Cancelled);
    }
    progress.update(1, steps, "writing the plan");
    // `optimized` already carries any equalized weights; the plan written beside it must
    // not scale them again when the two are read together.
    let mut beside = plan.clone();
    beside.equalization.clear();
    beside.absorption.clear();
    beside.smoothing.clear();
    export_plan(&beside, &plan_path)?;
    progress.update(2, steps, "writing the report");
    export_json(report, &report_path)?;
    let mut bundle = Bundle {
        files: vec![onnx, plan_path, report_path],
        skipped: Vec::new(),
        notes: Vec::new(),
    };
    let mut step = 3;
    if formats.tflite {
        progress.update(step, steps, "writing the TFLite model");
        step += 1;
        match legalize(optimized, plan, &HashMap::new()) {
            Ok(p) => {
                let wide = p
                    .tensors
                    .iter()
                    .any(|t| t.data.is_none() && t.q.ty == crate::program::IntType::I16);
                let path = dir.join(format!("{stem}.{}.tflite", if wide { "int16" } else { "int8" }));
                let w = export_tflite(&p, crate::export::tflite::Io::Int8, &path)?;
                if !w.float_nodes.is_empty() {
                    bundle.notes.push(format!(
                        "{} node(s) with no integer TFLite form run in float32: {}",
                        w.float_nodes.len(),
                        w.float_nodes.join(", ")
                    ));
                }
                bundle.files.push(path);
            }
            Err(e) => bundle.skipped.push(format!("TFLite not written: {e}")),
        }
    }
    if progress.cancelled() {
        return Err(ExportError::Cancelled);
    }
    if formats.qdq {
        progress.update(step, steps, "writing the QDQ ONNX model");
        let path = dir.join(format!("{stem}.qdq.onnx"));
        let q = Quantizer::new(optimized, 1).map_err(|e| ExportError::Model {
            file: path.display().to_string(),
            message: e.to_string(),
        })?;
        export_qdq(&q, plan, &path)?;
        bundle.files.push(path);
    }
    if let (true, Some(r)) = (formats.report, study) {
        if progress.cancelled() {
            return Err(ExportError::Cancelled);
        }
        progress.update(steps, steps + 1, "writing the HTML report");
        bundle
            .files
            .extend(write_study_report(r, &dir.join(format!("{stem}.report.html")))?);
    }
    progress.update(steps, steps, "exported");
    Ok(bundle)
}

/// Stage 4a: the plan made integer — every tensor's storage type, scales and zero points,
/// weights and biases as codes, one integer op per step — at the given input shapes (the
/// plan's calibration shapes where not given). A plan of another graph is an error.
#[expect(clippy::implicit_hasher, reason = "shapes come from the std maps the samples use")]
pub fn legalize(
    optimized: &Model,
    plan: &QuantPlan,
    shapes: &HashMap<String, Vec<usize>>,
) -> Result<crate::program::Program, crate::quant::legalize::LegalizeError> {
    crate::quant::legalize::legalize(optimized, plan, shapes)
}

/// The integer reference execution of a legalized program (LiteRT's reference-kernel
/// arithmetic): every tensor's codes.
pub fn run_integer(
    program: &crate::program::Program,
    inputs: Vec<crate::sim::integer::Input>,
) -> Result<crate::sim::integer::Run, crate::sim::integer::RunError> {
    crate::sim::integer::run(program, inputs)
}

/// The bundled NPU targets (`plugins/targets/*.ron`).
pub fn targets() -> Result<Vec<crate::target::Target>, crate::target::TargetError> {
    crate::target::load_dir(&crate::target::builtin_dir())
}

/// A bundled target by id, or a target file.
pub fn target(id_or_path: &str) -> Result<crate::target::Target, crate::target::TargetError> {
    crate::target::find(id_or_path)
}

/// The integer program a quantized TFLite file carries (its scales, zero points and codes,
/// one integer op per operator; see [`crate::import::tflite::program`]): `None` for any
/// other file, an error listing the operators the reader lacks.
pub fn file_program(path: &Path) -> Result<Option<crate::program::Program>, ImportError> {
    crate::import::tflite::program::load(path)
}

/// The compile stage on a legalized program: NPU/CPU placement with reasons, segments,
/// activation memory and the per-layer performance estimate for `target`.
pub fn compile(
    program: &crate::program::Program,
    target: &crate::target::Target,
    options: &crate::compiler::Options,
) -> crate::compiler::Compiled {
    crate::compiler::compile(program, target, options)
}

/// The TFLite export of a legalized program, written atomically.
pub fn export_tflite(
    program: &crate::program::Program,
    io: crate::export::tflite::Io,
    path: &Path,
) -> Result<crate::export::tflite::Written, ExportError> {
    let written = crate::export::tflite::write(program, io).map_err(|e| ExportError::Model {
        file: path.display().to_string(),
        message: e.to_string(),
    })?;
    write_atomic(path, &written.bytes)?;
    Ok(written)
}

/// The QDQ ONNX export of a plan on its optimized graph, written atomically.
pub fn export_qdq(
    q: &Quantizer<'_>,
    plan: &QuantPlan,
    path: &Path,
) -> Result<crate::export::qdq::QdqSummary, ExportError> {
    crate::quant::params::check_graph(plan, q.model).map_err(|(plan, graph)| ExportError::Model {
        file: path.display().to_string(),
        message: crate::quant::legalize::LegalizeError::WrongGraph { plan, graph }.to_string(),
    })?;
    let (model, summary) = crate::export::qdq::qdq_model(q, plan);
    crate::export::onnx::save(&model, path)?;
    Ok(summary)
}

// The binary and its emulation: what the CLI's `compile --out`, `emulate`, `bench FILE.npub`
// and `info FILE.npub` and the studio's Compile and Emulate stages go through. The app
// reaches the binary format, the emulator and the integer reference only here.

pub use crate::compiler::binary::{Binary, BinaryError, Location};
pub use crate::emulator::trace::TensorTrace;
pub use crate::emulator::{EmulateError, Emulator};
pub use crate::sim::integer::{Input, Run, RunError};

/// The `.npub` binary of a compiled program (`docs/binary-format.md`).
pub fn write_binary(program: &crate::program::Program, compiled: &crate::compiler::Compiled) -> Vec<u8> {
    crate::compiler::binary::write(program, compiled)
}

/// A binary's sections decoded (header, tensors, commands, host ops), without the checks
/// [`load_binary`] runs: what `info FILE.npub` shows.
pub fn read_binary(bytes: &[u8]) -> Result<Binary, BinaryError> {
    crate::compiler::binary::read(bytes)
}

/// A binary decoded and checked for consistency, ready to run.
pub fn load_binary(bytes: &[u8]) -> Result<Emulator, EmulateError> {
    Emulator::load(bytes)
}

/// Whether the emulator's MAC kernels take the AVX2 path on this machine (else the
/// portable loop).
pub fn emulator_simd() -> bool {
    crate::emulator::mac::simd()
}

/// What an emulation is compared with: FP32 values (by tensor name), the fake-quant
/// simulation's, and the program the integer reference runs (the one the binary was
/// written from).
pub struct EmulationReferences<'a> {
    pub fp32: &'a HashMap<String, Vec<f32>>,
    pub simulated: Option<&'a HashMap<String, Vec<f32>>>,
    pub program: &'a crate::program::Program,
}

/// An emulation compared tensor by tensor.
pub struct ComparedEmulation {
    /// Every tensor's codes as the integer reference computed them (program order).
    pub integer: Vec<Option<Vec<i32>>>,
    /// One row per tensor the binary computed: SQNR against FP32 (emulated, simulated),
    /// codes that differ from the integer reference.
    pub traces: Vec<TensorTrace>,
}

/// Why an emulation could not be compared.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("the integer reference: {0}")]
    Integer(#[from] RunError),
    #[error("input {0}: {1}")]
    Input(String, String),
}

/// Runs the integer reference of `refs.program` on the inputs `input` gives by name (the
/// same values the emulation ran on) and compares every tensor of `emulated` (the codes
/// [`Emulator::run`] returned) with it, with FP32 and with the simulation. Codes are
/// compared only when the program's tensor table is the binary's (same names in order).
pub fn compare_emulation(
    e: &Emulator,
    emulated: &[Option<Vec<i32>>],
    refs: &EmulationReferences<'_>,
    input: &dyn Fn(&str) -> Result<Input, String>,
) -> Result<ComparedEmulation, CompareError> {
    let p = refs.program;
    let ins = p
        .inputs
        .iter()
        .map(|&i| {
            let name = &p.tensors[i].name;
            input(name).map_err(|why| CompareError::Input(name.clone(), why))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let integer = crate::sim::integer::run(p, ins)?.values;
    let same_table = p.tensors.len() == e.binary.tensors.len()
        && p.tensors
            .iter()
            .zip(&e.binary.tensors)
            .all(|(a, b)| a.name == b.tensor.name);
    let r = crate::emulator::trace::References {
        fp32: refs.fp32,
        simulated: refs.simulated,
        integer: same_table.then_some(integer.as_slice()),
    };
    let traces = crate::emulator::trace::compare(e, emulated, &r);
    Ok(ComparedEmulation { integer, traces })
}

/// The binary's input names, in the order [`Emulator::run`] takes them.
pub fn binary_inputs(e: &Emulator) -> Vec<&str> {
    e.binary
        .inputs
        .iter()
        .map(|&i| e.binary.tensors[i].tensor.name.as_str())
        .collect()
}
