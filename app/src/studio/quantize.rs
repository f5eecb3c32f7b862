//! The quantization view: calibrate a plan on a folder of samples, paint local or cumulative
//! SQNR or each layer's precision on the graph, change a layer's precision from the card's
//! context menu or the inspector, and watch the heatmap follow. A worker thread owns the
//! quantizer and the FP32 and fake-quant values of every sample; after a change it runs
//! only what lies downstream (off the UI thread), and the overlay updates when it replies.
//! Every precision edit can be undone (Ctrl+Z) and redone (Ctrl+Shift+Z).

use super::Studio;
use super::commands::{Command, Selection};
use super::jobs::JobProgress;
use super::theme::QuantColours;
use egui::Color32;
use npu_core::ir::{Model, NodeId};
use npu_core::progress::Silent;
use npu_core::quant::amp::MixedPrecision;
use npu_core::quant::analysis::{Analysis, Cached};
use npu_core::quant::data::{Preprocess, source};
use npu_core::quant::live::Keep;
use npu_core::quant::recipe::{Recipe, Rule};
use npu_core::quant::scheme::ActFormat;
use npu_core::quant::{LayerPrecision, QuantPlan, Quantizer, Report, TensorReport};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::time::Instant;

/// What is painted on the cards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlay {
    Off,
    LocalSqnr,
    CumulativeSqnr,
    Precision,
}

impl Overlay {
    pub const ALL: [Self; 4] = [Self::Off, Self::LocalSqnr, Self::CumulativeSqnr, Self::Precision];
    pub fn label(self) -> &'static str {
        match self {
            Self::Off => "No overlay",
            Self::LocalSqnr => "Local SQNR",
            Self::CumulativeSqnr => "Cumulative SQNR",
            Self::Precision => "Precision",
        }
    }
}

/// The presets a plan starts from.
pub const PRESETS: [&str; 4] = ["w8a8", "w8a16", "w4a16", "fp16"];

/// The precisions offered for a layer, with their menu labels.
pub const PRECISIONS: [(&str, LayerPrecision); 5] = [
    ("int8", LayerPrecision::INT8),
    ("int16", LayerPrecision::INT16),
    ("fp16", LayerPrecision::FP16),
    ("int4 weights", LayerPrecision::INT4),
    ("float (CPU)", LayerPrecision::FLOAT),
];

pub fn precision_name(p: LayerPrecision) -> &'static str {
    PRECISIONS.iter().find(|(_, q)| *q == p).map_or("custom", |(n, _)| n)
}

/// Short badge text of a precision.
fn badge(p: LayerPrecision) -> &'static str {
    match p {
        LayerPrecision::INT8 => "i8",
        LayerPrecision::INT16 => "i16",
        LayerPrecision::FP16 => "f16",
        LayerPrecision::INT4 => "w4",
        LayerPrecision::FLOAT => "f32",
        _ => "mix",
    }
}

/// A simulation result the worker sends back.
pub struct Reply {
    /// The edit generation it simulates.
    pub generation: u64,
    pub plan: QuantPlan,
    pub report: Report,
    /// Node runs the update took (summed over the samples).
    pub recomputed: usize,
    /// Seconds the worker spent on it.
    pub seconds: f64,
}

/// The project's precision state: per-layer edits on top of the calibrated plan, or on top
/// of the plan of an applied mixed-precision point.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Edits {
    pub layers: BTreeMap<String, LayerPrecision>,
    /// An applied mixed-precision point's plan (its input format and re-measured bias
    /// corrections); `None`: the calibrated plan.
    pub base: Option<Arc<QuantPlan>>,
}

enum Msg {
    Layers(u64, Edits),
    /// Simulate every sample again from scratch (no incremental reuse) as this generation.
    Full(u64, Arc<JobProgress>),
    /// Measure every layer's sensitivity on the current plan.
    Sensitivity(Arc<JobProgress>),
    /// Search mixed precision (8 → 16-bit activations) from the current plan to this target.
    Pareto(f64, Arc<JobProgress>),
    /// Values of this tensor (by name in the optimized graph) for the inspector.
    Inspect(String),
}

/// What a sensitivity or mixed-precision job measured, on which edit generation, and the
/// job's progress (which identifies it).
pub struct JobReply {
    progress: Arc<JobProgress>,
    generation: u64,
    result: Result<JobResult, String>,
}

enum JobResult {
    Sensitivity(Analysis),
    Pareto(MixedPrecision),
}

/// The analyses a session can run besides simulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    Sensitivity,
    Pareto,
}

/// FP32 against fake-quant values of one tensor, for the inspector.
#[derive(Clone, Debug)]
pub struct Inspect {
    pub tensor: String,
    /// The first values of the first sample.
    pub fp32: Vec<f32>,
    pub quant: Vec<f32>,
    /// Histogram of quant − fp32 over every sample: (bin centre, count).
    pub errors: Vec<(f64, usize)>,
    pub bin_width: f64,
    /// Histogram of the FP32 values over every sample: (bin centre, count), bin width.
    pub values: Vec<(f64, usize)>,
    pub values_bin_width: f64,
    /// The grid the tensor lies on: format, clipping range, step (`None`: float).
    pub grid: Option<(ActFormat, (f64, f64), Option<f64>)>,
}

/// Grids with up to this many levels are drawn as lines on the value histogram; up to
/// `GRID_TICKS_MAX` as ticks on its axis; finer ones are only counted.
const GRID_LINES_MAX: usize = 64;
const GRID_TICKS_MAX: f64 = 4096.0;

/// Values the inspector lists.
const INSPECT_FIRST: usize = 8;
const INSPECT_BINS: usize = 41;

fn inspect(q: &Quantizer<'_>, live: &npu_core::quant::live::Live, name: &str) -> Option<Inspect> {
    let v = q.model.graph.values.iter().position(|x| x.name == name)?;
    let flat = |t: Option<&npu_core::ir::Tensor>| -> Option<Vec<f32>> {
        match t? {
            npu_core::ir::Tensor::F32(a) => Some(a.iter().copied().collect()),
            _ => None,
        }
    };
    let mut errs = Vec::new();
    // FP32 values over every sample.
    let mut all: Vec<f32> = Vec::new();
    let mut first = None;
    for k in 0..live.samples() {
        let (qt, rt) = live.values(k, v);
        let (Some(qv), Some(rv)) = (flat(qt), flat(rt)) else {
            continue;
        };
        errs.extend(qv.iter().zip(&rv).map(|(a, b)| f64::from(*a) - f64::from(*b)));
        all.extend(&rv);
        if first.is_none() {
            first = Some((
                rv.iter().take(INSPECT_FIRST).copied().collect(),
                qv.iter().take(INSPECT_FIRST).copied().collect(),
            ));
        }
    }
    let (fp32, quant) = first?;
    let grid = q
        .grid(&live.plan, v)
        .map(|(f, r)| (f, r, f.levels().map(|l| (r.1 - r.0) / l)));
    // Bins spanning the values and the clipping range.
    let (mut lo, mut hi) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
        (a.min(f64::from(x)), b.max(f64::from(x)))
    });
    if let Some((_, r, _)) = grid {
        lo = lo.min(r.0);
        hi = hi.max(r.1);
    }
    let (values, values_bin_width) = histogram(all.iter().map(|x| f64::from(*x)), lo, hi);
    let m = errs.iter().fold(0f64, |m, e| m.max(e.abs()));
    let (errors, bin_width) = histogram(errs.iter().copied(), -m, m);
    Some(Inspect {
        tensor: name.into(),
        fp32,
        quant,
        errors,
        bin_width,
        values,
        values_bin_width,
        grid,
    })
}

/// `INSPECT_BINS` bins over `[lo, hi]`: (bin centre, count) and the bin width.
fn histogram(xs: impl Iterator<Item = f64>, lo: f64, hi: f64) -> (Vec<(f64, usize)>, f64) {
    let width = ((hi - lo) / INSPECT_BINS as f64).max(f64::MIN_POSITIVE);
    let mut counts = vec![0usize; INSPECT_BINS];
    for x in xs {
        let b = ((x - lo) / width).floor().max(0.0) as usize;
        counts[b.min(INSPECT_BINS - 1)] += 1;
    }
    let bins = counts
        .into_iter()
        .enumerate()
        .map(|(b, c)| (lo + (b as f64 + 0.5) * width, c))
        .collect();
    (bins, width)
}

/// The first preprocessed sample, as the calibration will see it.
pub struct Preview {
    /// (samples folder, preprocessing) it was made from.
    pub key: (String, String, std::path::PathBuf),
    /// An RGB (or grey) picture of the first image input, its values stretched to 0–255.
    pub image: Option<egui::ColorImage>,
    /// What it is: the file, the input's name, shape and value range, or why it failed.
    pub text: String,
}

/// Makes the preview of the first sample of `data` preprocessed with `preprocess`.
#[allow(clippy::disallowed_methods)] // the pixels of a picture, not UI colours
pub fn make_preview(model: &Model, model_path: &std::path::Path, data: &str, preprocess: &str) -> Preview {
    let key = (data.to_string(), preprocess.to_string(), model_path.to_path_buf());
    let fail = |text: String| Preview {
        key: key.clone(),
        image: None,
        text,
    };
    let src = match source(data) {
        Ok(s) => s,
        Err(e) => return fail(e.to_string()),
    };
    let pre = match Preprocess::parse(preprocess) {
        Ok(p) => p,
        Err(e) => return fail(format!("preprocessing: {e}")),
    };
    let Some(first) = src.samples(model, &pre).next() else {
        return fail(format!("{data}: no samples"));
    };
    let (label, sample) = match first {
        Ok(s) => s,
        Err(e) => return fail(e.to_string()),
    };
    let mut names: Vec<&String> = sample.keys().collect();
    names.sort();
    let Some(name) = names.first() else {
        return fail(format!("{label}: no input"));
    };
    let t = sample[*name].to_f32();
    let shape = t.shape().to_vec();
    let flat: Vec<f32> = t.iter().copied().collect();
    let (lo, hi) = flat
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
    let file = std::path::Path::new(&label)
        .file_name()
        .map_or_else(|| label.clone(), |f| f.to_string_lossy().into_owned());
    let text = format!("{file} → {name} {shape:?}, values [{lo:.3}, {hi:.3}]");
    // [1, C, H, W] or [1, H, W, C] with C = 1 or 3.
    let (c, h, w, nhwc) = match shape.as_slice() {
        [1, c @ (1 | 3), h, w] if !pre.nhwc => (*c, *h, *w, false),
        [1, h, w, c @ (1 | 3)] => (*c, *h, *w, true),
        [1, c @ (1 | 3), h, w] => (*c, *h, *w, false),
        _ => {
            return Preview {
                key,
                image: None,
                text: format!("{text} (not an image)"),
            };
        }
    };
    let span = (hi - lo).max(f32::MIN_POSITIVE);
    let at = |ch: usize, y: usize, x: usize| -> u8 {
        let k = if nhwc {
            (y * w + x) * c + ch
        } else {
            (ch * h + y) * w + x
        };
        (((flat[k] - lo) / span) * 255.0).round().clamp(0.0, 255.0) as u8
    };
    let mut pixels = Vec::with_capacity(h * w);
    for y in 0..h {
        for x in 0..w {
            pixels.push(if c == 1 {
                let v = at(0, y, x);
                Color32::from_gray(v)
            } else if pre.bgr {
                Color32::from_rgb(at(2, y, x), at(1, y, x), at(0, y, x))
            } else {
                Color32::from_rgb(at(0, y, x), at(1, y, x), at(2, y, x))
            });
        }
    }
    Preview {
        key,
        image: Some(egui::ColorImage::new([w, h], pixels)),
        text,
    }
}

/// The optimized graph the plan refers to, and how its nodes map onto the open model's.
pub struct Mapping {
    pub optimized: Arc<Model>,
    /// Node of the open model → optimized nodes made from it.
    pub to_optimized: HashMap<NodeId, Vec<NodeId>>,
}

impl Mapping {
    fn new(optimized: Arc<Model>) -> Self {
        let mut to_optimized: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
        for (k, n) in optimized.graph.nodes.iter().enumerate() {
            for &o in &n.origin {
                to_optimized.entry(o).or_default().push(k);
            }
        }
        Self {
            optimized,
            to_optimized,
        }
    }
}

/// A running quantization session: the worker thread and what it last replied.
pub struct Session {
    tx: Sender<Msg>,
    rx: Receiver<Result<Started, String>>,
    updates: Option<Receiver<Result<Reply, String>>>,
    pub progress: Arc<JobProgress>,
    pub mapping: Option<Arc<Mapping>>,
    pub result: Option<Reply>,
    /// Node of the open model → row of `result.report.tensors`.
    pub rows: HashMap<NodeId, usize>,
    /// When each generation was sent (for the change-to-heatmap latency).
    sent: HashMap<u64, Instant>,
    /// Milliseconds from the last precision change to its heatmap.
    pub last_latency_ms: Option<f64>,
    inspected: Option<Receiver<Inspect>>,
    /// The inspector's values of the last requested tensor.
    pub inspect: Option<Inspect>,
    inspect_asked: Option<String>,
    jobs: Option<Receiver<JobReply>>,
    /// The analysis job running, with its progress.
    pub job: Option<(JobKind, Arc<JobProgress>)>,
    /// The last sensitivity analysis, with the edit generation it measured.
    pub sensitivity: Option<(u64, Analysis)>,
    /// The last mixed-precision curve, with the edit generation it started from.
    pub pareto: Option<(u64, MixedPrecision)>,
    /// Why the last analysis job failed.
    pub job_error: Option<(JobKind, String)>,
    /// A full re-simulation under way: its generation and progress.
    pub full: Option<(u64, Arc<JobProgress>)>,
    /// What it was started with: the setup and the optimizer's passes.
    pub setup: Setup,
    pub passes: Vec<String>,
    /// Set once calibration is done and the samples are being simulated.
    pub simulating: Arc<std::sync::atomic::AtomicBool>,
}

struct Started {
    mapping: Arc<Mapping>,
    updates: Receiver<Result<Reply, String>>,
    inspected: Receiver<Inspect>,
    jobs: Receiver<JobReply>,
}

/// What the calibration uses.
#[derive(Clone, Debug, PartialEq)]
pub struct Setup {
    /// A folder (or file) of samples: .npy/.npz/.png/.jpg, or `synthetic:N`.
    pub data: String,
    pub preprocess: String,
    pub preset: String,
}

impl Session {
    /// Starts the worker: optimizes the model, calibrates on `setup.data`, simulates every
    /// sample, then waits for plan edits.
    pub fn start(model: Arc<Model>, setup: Setup, passes: Vec<String>, ctx: Option<egui::Context>) -> Self {
        let (tx, msgs) = channel::<Msg>();
        let (started_tx, rx) = channel();
        let progress = Arc::new(JobProgress::default());
        progress.set_ctx(ctx.clone());
        let p = progress.clone();
        let simulating = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let w = Work {
            model,
            setup: setup.clone(),
            passes: passes.clone(),
            simulating: simulating.clone(),
        };
        let spawned = std::thread::Builder::new().name("quantize".into()).spawn(move || {
            worker(&w, &p, &msgs, &started_tx, ctx.as_ref());
        });
        let session = Self {
            tx,
            rx,
            updates: None,
            progress,
            mapping: None,
            result: None,
            rows: HashMap::new(),
            sent: HashMap::new(),
            last_latency_ms: None,
            inspected: None,
            inspect: None,
            inspect_asked: None,
            jobs: None,
            job: None,
            sensitivity: None,
            pareto: None,
            job_error: None,
            full: None,
            setup,
            passes,
            simulating,
        };
        if let Err(e) = spawned {
            session
                .progress
                .set(0.0, &format!("could not start the quantizer: {e}"));
        }
        session
    }

    /// True until the first simulation has arrived.
    pub fn starting(&self) -> bool {
        self.result.is_none()
    }

    /// True while an edit is being simulated (or asked-for values have not arrived).
    pub fn updating(&self) -> bool {
        let waiting_values = self
            .inspect_asked
            .as_ref()
            .is_some_and(|n| self.inspect.as_ref().is_none_or(|i| &i.tensor != n));
        waiting_values
            || self
                .result
                .as_ref()
                .is_some_and(|r| self.sent.keys().any(|g| *g > r.generation))
    }

    fn send(&mut self, generation: u64, edits: Edits) {
        self.sent.insert(generation, Instant::now());
        let _ = self.tx.send(Msg::Layers(generation, edits));
    }

    /// Takes what the worker sent; returns an error message when it failed.
    fn poll(&mut self) -> Result<bool, String> {
        let mut changed = false;
        if self.mapping.is_none() {
            match self.rx.try_recv() {
                Ok(Ok(s)) => {
                    self.mapping = Some(s.mapping);
                    self.updates = Some(s.updates);
                    self.inspected = Some(s.inspected);
                    self.jobs = Some(s.jobs);
                }
                Ok(Err(e)) => return Err(e),
                Err(TryRecvError::Empty) => return Ok(false),
                Err(TryRecvError::Disconnected) => return Err("the quantizer stopped unexpectedly".into()),
            }
        }
        if let Some(rx) = &self.inspected {
            while let Ok(i) = rx.try_recv() {
                self.inspect = Some(i);
                changed = true;
            }
        }
        if let Some(rx) = &self.jobs {
            while let Ok(j) = rx.try_recv() {
                // A cancelled job's answer (it may come after the next job started) is dropped.
                if !self.job.as_ref().is_some_and(|(_, p)| Arc::ptr_eq(p, &j.progress)) {
                    continue;
                }
                let kind = self.job.take().map_or(JobKind::Sensitivity, |(k, _)| k);
                changed = true;
                self.job_error = None;
                match j.result {
                    Ok(JobResult::Sensitivity(a)) => self.sensitivity = Some((j.generation, a)),
                    Ok(JobResult::Pareto(m)) => self.pareto = Some((j.generation, m)),
                    Err(e) if e == "cancelled" => {}
                    // The session stays: only the analysis failed.
                    Err(e) => self.job_error = Some((kind, e)),
                }
            }
        }
        let Some(updates) = &self.updates else {
            return Ok(changed);
        };
        loop {
            match updates.try_recv() {
                Ok(Ok(r)) => {
                    if let Some(t) = self.sent.remove(&r.generation) {
                        self.last_latency_ms = Some(t.elapsed().as_secs_f64() * 1e3);
                    }
                    self.sent.retain(|g, _| *g > r.generation);
                    if self.full.as_ref().is_some_and(|(g, _)| *g <= r.generation) {
                        self.full = None;
                    }
                    self.result = Some(r);
                    changed = true;
                }
                Ok(Err(e)) => return Err(e),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Err("the quantizer stopped unexpectedly".into()),
            }
        }
        if changed {
            self.index_rows();
        }
        Ok(changed)
    }

    fn index_rows(&mut self) {
        self.rows.clear();
        let (Some(m), Some(r)) = (&self.mapping, &self.result) else {
            return;
        };
        let by_name: HashMap<&str, usize> = r
            .report
            .tensors
            .iter()
            .enumerate()
            .map(|(k, t)| (t.node.as_str(), k))
            .collect();
        for (orig, opts) in &m.to_optimized {
            // The last optimized node made from it is the one whose output leaves it.
            if let Some(row) = opts
                .iter()
                .rev()
                .find_map(|&o| by_name.get(m.optimized.graph.nodes[o].name.as_str()))
            {
                self.rows.insert(*orig, *row);
            }
        }
    }

    /// Asks the worker for a tensor's FP32 and fake-quant values (once per tensor; it sends
    /// them again after every edit).
    pub fn request_inspect(&mut self, tensor: &str) {
        if self.inspect_asked.as_deref() != Some(tensor) {
            self.inspect_asked = Some(tensor.to_string());
            let _ = self.tx.send(Msg::Inspect(tensor.to_string()));
        }
    }

    /// Starts a sensitivity analysis or a mixed-precision search on the current plan.
    pub fn start_job(&mut self, kind: JobKind, target_db: f64, ctx: Option<egui::Context>) {
        if self.job.is_some() {
            return;
        }
        let p = Arc::new(JobProgress::default());
        p.set_ctx(ctx);
        p.set(0.0, "waiting for the quantizer");
        let msg = match kind {
            JobKind::Sensitivity => Msg::Sensitivity(p.clone()),
            JobKind::Pareto => Msg::Pareto(target_db, p.clone()),
        };
        if self.tx.send(msg).is_ok() {
            self.job = Some((kind, p));
        }
    }

    /// Cancels a full re-simulation (the previous results stay).
    pub fn cancel_full(&self) {
        if let Some((_, p)) = &self.full {
            p.cancel.cancel();
        }
    }

    /// Cancels the analysis job (its result is dropped).
    pub fn cancel_job(&mut self) {
        if let Some((_, p)) = self.job.take() {
            p.cancel.cancel();
        }
    }

    /// The edit generation of the newest simulation.
    pub fn generation(&self) -> u64 {
        self.result.as_ref().map_or(0, |r| r.generation)
    }

    /// The report row of a node of the open model.
    pub fn row(&self, node: NodeId) -> Option<&TensorReport> {
        let r = self.result.as_ref()?;
        self.rows.get(&node).map(|&k| &r.report.tensors[k])
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.progress.cancel.cancel();
        self.cancel_job();
        self.cancel_full();
    }
}

/// What a session's worker is given.
struct Work {
    model: Arc<Model>,
    setup: Setup,
    passes: Vec<String>,
    simulating: Arc<std::sync::atomic::AtomicBool>,
}

/// Everything the worker does: one calibration, then incremental updates until the UI
/// drops the session.
fn worker(
    w: &Work,
    progress: &JobProgress,
    msgs: &Receiver<Msg>,
    started: &Sender<Result<Started, String>>,
    ctx: Option<&egui::Context>,
) {
    let run = || -> Result<(), String> {
        let setup = &w.setup;
        progress.set(0.0, "optimizing the graph");
        let opts = npu_core::passes::Options {
            passes: npu_core::passes::select(&w.passes)?,
            ..npu_core::passes::Options::default()
        };
        let optimized = npu_core::passes::optimize(&w.model, &opts)
            .map_err(|e| format!("optimizing: {e}"))?
            .model;
        let optimized = Arc::new(optimized);
        let q = Quantizer::new(&optimized, 2).map_err(|e| e.to_string())?;
        let src = source(&setup.data).map_err(|e| e.to_string())?;
        let pre = Preprocess::parse(&setup.preprocess).map_err(|e| format!("preprocessing: {e}"))?;
        let recipe = Recipe::from_preset(&setup.preset);
        let resolved = recipe.resolve(&optimized.graph)?;
        let (plan, _) = q
            .make_plan(
                &src,
                &pre,
                &setup.preset,
                &recipe.preset,
                &resolved,
                resolved.calibration,
                true,
                progress,
            )
            .map_err(|e| e.to_string())?;
        let samples = src
            .samples(&optimized, &pre)
            .map(|s| s.map(|(_, t)| t))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let t = Instant::now();
        w.simulating.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut live = q
            .live(plan, samples, Keep::PerTensor, progress)
            .map_err(|e| e.to_string())?;
        let calibrated = live.plan.clone();
        let (updates_tx, updates) = channel();
        let (inspect_tx, inspected) = channel();
        let (jobs_tx, jobs) = channel();
        let first = Reply {
            generation: 0,
            plan: live.plan.clone(),
            report: q.live_report(&live),
            recomputed: 0,
            seconds: t.elapsed().as_secs_f64(),
        };
        started
            .send(Ok(Started {
                mapping: Arc::new(Mapping::new(optimized.clone())),
                updates,
                inspected,
                jobs,
            }))
            .map_err(|_| "the studio closed".to_string())?;
        let _ = updates_tx.send(Ok(first));
        progress.set(1.0, "ready");
        repaint(ctx);
        // Edits: only the newest waiting one is simulated.
        let mut inspected: Option<String> = None;
        let mut generation = 0;
        let mut cached: Option<Cached> = None;
        while let Ok(first) = msgs.recv() {
            let mut edit = None;
            let mut full = None;
            let mut jobs = Vec::new();
            for msg in std::iter::once(first).chain(msgs.try_iter()) {
                match msg {
                    Msg::Layers(g, l) => edit = Some((g, l)),
                    Msg::Full(g, p) => full = Some((g, p)),
                    Msg::Inspect(name) => inspected = Some(name),
                    job => jobs.push(job),
                }
            }
            // The newest edit and the full re-simulation, in the order they were asked for.
            let full_first = matches!((&edit, &full), (Some((ge, _)), Some((gf, _))) if gf < ge);
            let mut steps = Vec::new();
            if full_first {
                steps.push(Err(full.take()));
            }
            steps.push(Ok(edit.take()));
            steps.push(Err(full.take()));
            let mut gone = false;
            for step in steps {
                let reply = match step {
                    Ok(Some((g, edits))) => {
                        generation = g;
                        update(&q, &mut live, &calibrated, g, edits)
                    }
                    Err(Some((g, p))) => {
                        generation = g;
                        let t = Instant::now();
                        let plan = live.plan.clone();
                        // Cancelled: the live state stays, and the reply says what it holds.
                        match q.live(plan, live.sample_inputs(), Keep::PerTensor, &*p) {
                            Ok(l) => live = l,
                            Err(npu_core::quant::QuantError::Cancelled) => {}
                            Err(e) => {
                                gone |= updates_tx.send(Err(e.to_string())).is_err();
                                continue;
                            }
                        }
                        Ok(Reply {
                            generation: g,
                            plan: live.plan.clone(),
                            report: q.live_report(&live),
                            recomputed: optimized.graph.nodes.len() * live.samples(),
                            seconds: t.elapsed().as_secs_f64(),
                        })
                    }
                    _ => continue,
                };
                gone |= updates_tx.send(reply).is_err();
            }
            if gone {
                break;
            }
            for job in jobs {
                let (Msg::Sensitivity(p) | Msg::Pareto(_, p)) = &job else {
                    continue;
                };
                let progress = p.clone();
                if cached.is_none() {
                    // The FP32 outputs of the samples, once, for every later job.
                    let mut samples = live.sample_inputs().into_iter().map(|s| Ok((String::new(), s)));
                    cached = q.cache(&mut samples).ok();
                }
                let result = match (&job, cached.as_ref()) {
                    (_, None) => Err("could not run the samples in FP32".to_string()),
                    (Msg::Sensitivity(p), Some(c)) => q
                        .analyze(&live.plan, c, &**p)
                        .map(JobResult::Sensitivity)
                        .map_err(|e| e.to_string()),
                    (Msg::Pareto(target, p), Some(c)) => q
                        .mixed_precision(&live.plan, c, *target, LayerPrecision::INT16, &**p)
                        .map(|(m, _)| JobResult::Pareto(m))
                        .map_err(|e| e.to_string()),
                    _ => continue,
                };
                let reply = JobReply {
                    progress,
                    generation,
                    result,
                };
                if jobs_tx.send(reply).is_err() {
                    break;
                }
                repaint(ctx);
            }
            if let Some(name) = inspected.as_deref() {
                // An empty answer when the tensor has no float values: the UI stops waiting.
                let i = inspect(&q, &live, name).unwrap_or_else(|| Inspect {
                    tensor: name.to_string(),
                    fp32: Vec::new(),
                    quant: Vec::new(),
                    errors: Vec::new(),
                    bin_width: 0.0,
                    values: Vec::new(),
                    values_bin_width: 0.0,
                    grid: None,
                });
                let _ = inspect_tx.send(i);
            }
            repaint(ctx);
        }
        Ok(())
    };
    if let Err(e) = run() {
        let _ = started.send(Err(e));
        repaint(ctx);
    }
}

fn repaint(ctx: Option<&egui::Context>) {
    if let Some(c) = ctx {
        c.request_repaint();
    }
}

/// One edit: the calibrated plan (or an applied point's) with the edited layers, simulated
/// incrementally, and its report. The `bench-quant-edit` command times exactly this.
pub fn update(
    q: &Quantizer<'_>,
    live: &mut npu_core::quant::live::Live,
    calibrated: &QuantPlan,
    generation: u64,
    edits: Edits,
) -> Result<Reply, String> {
    let t = Instant::now();
    // The base plan's bias corrections are kept: measured again after a promotion they do
    // worse on PP-OCR rec (see `refresh_bias_corrections`).
    let mut plan = edits.base.as_deref().unwrap_or(calibrated).clone();
    plan.layers = edits.layers;
    let recomputed = q.live_update(live, &plan, &Silent).map_err(|e| e.to_string())?;
    let report = q.live_report(live);
    Ok(Reply {
        generation,
        plan,
        report,
        recomputed,
        seconds: t.elapsed().as_secs_f64(),
    })
}

/// The quantization panel's state: the setup form, the session, the overlay and the
/// edit history.
pub struct QuantView {
    pub open: bool,
    pub setup: Setup,
    pub overlay: Overlay,
    /// Cards below this SQNR are red, above `green_above` green, yellow between.
    pub red_below: f64,
    pub green_above: f64,
    pub session: Option<Session>,
    /// Per-node precision edits (optimized node name → precision), the project's state.
    pub layers: BTreeMap<String, LayerPrecision>,
    /// The applied mixed-precision point's plan, if any (part of the project's state).
    pub base: Option<Arc<QuantPlan>>,
    undo: Vec<Edits>,
    redo: Vec<Edits>,
    generation: u64,
    /// The node whose context menu is open.
    pub menu_node: Option<NodeId>,
    /// Show update times (off for reproducible screenshots).
    pub show_timings: bool,
    /// Edits to apply once the session's first simulation arrives (a project being opened).
    pub pending_layers: Option<Edits>,
    /// An edit not yet autosaved.
    pub dirty: bool,
    /// The recipe's ordered rules (name regex and/or op type → precision; later rules win).
    pub rules: Vec<Rule>,
    /// What the last "Apply rules" did, or why it failed.
    pub rules_note: Option<String>,
    /// The recipe window is open.
    pub show_recipe: bool,
    /// The recipe file the recipe window loads and saves.
    pub recipe_path: String,
    /// The preprocessing form is shown (it edits `setup.preprocess`).
    pub show_preprocess_form: bool,
    /// A recipe loaded before a plan with its preset was calibrated.
    pub pending_recipe: Option<Recipe>,
    /// The mixed-precision search's target output SQNR (dB).
    pub pareto_target: f64,
    /// The point of the mixed-precision curve picked for "Apply this point".
    pub pareto_point: usize,
    /// The edit generation last exported, and where.
    pub exported: Option<(u64, std::path::PathBuf)>,
    /// The first preprocessed sample, its texture, and the job making the next one.
    pub preview: Option<Preview>,
    preview_texture: Option<egui::TextureHandle>,
    preview_job: Option<super::jobs::Job<Preview>>,
}

impl Default for QuantView {
    fn default() -> Self {
        Self {
            open: false,
            setup: Setup {
                data: String::new(),
                preprocess: String::new(),
                preset: "w8a8".into(),
            },
            overlay: Overlay::CumulativeSqnr,
            red_below: 20.0,
            green_above: 40.0,
            session: None,
            layers: BTreeMap::new(),
            base: None,
            undo: Vec::new(),
            redo: Vec::new(),
            generation: 0,
            menu_node: None,
            show_timings: true,
            pending_layers: None,
            dirty: false,
            rules: Vec::new(),
            rules_note: None,
            show_recipe: false,
            recipe_path: String::new(),
            show_preprocess_form: false,
            pending_recipe: None,
            pareto_target: 30.0,
            pareto_point: 0,
            exported: None,
            preview: None,
            preview_texture: None,
            preview_job: None,
        }
    }
}

impl QuantView {
    pub fn busy(&self) -> bool {
        self.session
            .as_ref()
            .is_some_and(|s| s.starting() || s.updating() || s.job.is_some())
            || self.preview_job.is_some()
    }

    /// Starts calibration and simulation of the open model, optimized with `passes`.
    pub fn start(&mut self, model: Arc<Model>, passes: Vec<String>, ctx: Option<egui::Context>) {
        self.exported = None;
        self.session = Some(Session::start(model, self.setup.clone(), passes, ctx));
        if !self.layers.is_empty() || self.base.is_some() {
            self.dirty = true;
        }
        self.layers.clear();
        self.base = None;
        self.undo.clear();
        self.redo.clear();
        self.generation = 0;
    }

    /// Forgets the session and the edits (another model was opened).
    pub fn reset(&mut self) {
        self.session = None;
        self.layers.clear();
        self.base = None;
        self.undo.clear();
        self.redo.clear();
        self.menu_node = None;
    }

    pub fn cancel(&mut self) {
        if self.session.as_ref().is_some_and(Session::starting) {
            self.session = None;
        }
    }

    /// Takes the worker's replies; returns an error to show.
    pub fn poll(&mut self) -> Option<String> {
        let s = self.session.as_mut()?;
        match s.poll() {
            Ok(_) => {
                let preset = s.result.as_ref().map(|_| s.setup.preset.clone());
                if preset.is_some()
                    && let Some(edits) = self.pending_layers.take()
                {
                    self.set_edits(edits);
                    self.push();
                }
                // A recipe loaded before calibration (or for another preset) applies now.
                if let Some(preset) = preset
                    && self.pending_recipe.as_ref().is_some_and(|r| r.preset == preset)
                    && let Some(r) = self.pending_recipe.take()
                {
                    self.apply_recipe(&r);
                }
                None
            }
            Err(e) => {
                self.session = None;
                Some(if e == "cancelled" {
                    e
                } else {
                    format!("Quantization failed: {e}")
                })
            }
        }
    }

    /// The precision a node of the open model has in the current edits (or the plan's).
    pub fn precision_of(&self, node: NodeId) -> Option<LayerPrecision> {
        let s = self.session.as_ref()?;
        let m = s.mapping.as_ref()?;
        let plan = &s.result.as_ref()?.plan;
        let opt = *m.to_optimized.get(&node)?.last()?;
        let name = &m.optimized.graph.nodes[opt].name;
        Some(self.layers.get(name).copied().unwrap_or(plan.default))
    }

    /// Sets the precision of nodes of the open model (an undoable edit) and asks the worker
    /// to simulate it.
    pub fn set_precision(&mut self, nodes: &[NodeId], p: LayerPrecision) {
        let Some(s) = &self.session else { return };
        let (Some(m), Some(r)) = (&s.mapping, &s.result) else {
            return;
        };
        let mut layers = self.layers.clone();
        // Only nodes that went into a layer of the plan (a Reshape has no precision).
        for n in nodes.iter().filter(|n| s.rows.contains_key(n)) {
            for &o in m.to_optimized.get(n).map(Vec::as_slice).unwrap_or(&[]) {
                let name = m.optimized.graph.nodes[o].name.clone();
                if p == r.plan.default {
                    layers.remove(&name);
                } else {
                    layers.insert(name, p);
                }
            }
        }
        if layers != self.layers {
            let before = self.edits();
            self.layers = layers;
            self.undo.push(before);
            self.redo.clear();
            self.push();
        }
    }

    /// The project's precision state.
    pub fn edits(&self) -> Edits {
        Edits {
            layers: self.layers.clone(),
            base: self.base.clone(),
        }
    }

    fn set_edits(&mut self, e: Edits) {
        self.layers = e.layers;
        self.base = e.base;
    }

    /// Simulates every sample again from scratch with the current edits.
    pub fn resimulate(&mut self, ctx: Option<egui::Context>) {
        if self
            .session
            .as_ref()
            .is_some_and(|s| s.result.is_some() && s.full.is_none())
        {
            self.generation += 1;
            let g = self.generation;
            if let Some(s) = &mut self.session {
                let p = Arc::new(JobProgress::default());
                p.set_ctx(ctx);
                p.set(0.0, "simulating every sample");
                s.sent.insert(g, Instant::now());
                if s.tx.send(Msg::Full(g, p.clone())).is_ok() {
                    s.full = Some((g, p));
                }
            }
        }
    }

    pub fn can_undo(&self) -> bool {
        !self.undo.is_empty()
    }

    pub fn can_redo(&self) -> bool {
        !self.redo.is_empty()
    }

    pub fn undo(&mut self) {
        if let Some(prev) = self.undo.pop() {
            self.redo.push(self.edits());
            self.set_edits(prev);
            self.push();
        }
    }

    pub fn redo(&mut self) {
        if let Some(next) = self.redo.pop() {
            self.undo.push(self.edits());
            self.set_edits(next);
            self.push();
        }
    }

    /// Replaces every edit at once (an undoable edit once the session runs; applied when
    /// its first simulation arrives before that).
    pub fn apply_edits(&mut self, edits: Edits) {
        if self.session.as_ref().is_some_and(|s| s.result.is_some()) {
            if edits != self.edits() {
                self.undo.push(self.edits());
                self.set_edits(edits);
                self.redo.clear();
                self.push();
            }
        } else {
            self.pending_layers = Some(edits);
        }
    }

    /// Replaces the per-layer edits (keeping the base plan) as one undoable edit.
    pub fn apply_layers(&mut self, layers: BTreeMap<String, LayerPrecision>) {
        let base = self.base.clone();
        self.apply_edits(Edits { layers, base });
    }

    fn push(&mut self) {
        self.dirty = true;
        self.generation += 1;
        let g = self.generation;
        let edits = self.edits();
        if let Some(s) = &mut self.session {
            s.send(g, edits);
        }
    }

    /// Colour and badge of every node of the open model with a quantized output.
    /// With no overlay, only the layers whose precision was edited carry a badge.
    pub fn card_marks(&self, colours: &QuantColours) -> HashMap<NodeId, (Color32, String)> {
        let mut out = HashMap::new();
        let Some(s) = &self.session else { return out };
        let Some(r) = &s.result else { return out };
        for &node in s.rows.keys() {
            let Some(t) = s.row(node) else { continue };
            let p = self.precision_of(node).unwrap_or(LayerPrecision::INT8);
            if self.overlay == Overlay::Off && p == r.plan.default {
                continue;
            }
            let mark = match self.overlay {
                Overlay::LocalSqnr => (
                    self.heat(colours, t.sqnr_local_db),
                    format!("{} {}", badge(p), db(t.sqnr_local_db)),
                ),
                Overlay::CumulativeSqnr => (
                    self.heat(colours, t.sqnr_cumulative_db),
                    format!("{} {}", badge(p), db(t.sqnr_cumulative_db)),
                ),
                Overlay::Precision | Overlay::Off => (precision_colour(colours, p), badge(p).to_string()),
            };
            out.insert(node, mark);
        }
        out
    }

    /// Red below `red_below`, green above `green_above`, through yellow; exact is green.
    pub fn heat(&self, c: &QuantColours, sqnr: Option<f64>) -> Color32 {
        let Some(v) = sqnr else { return c.high };
        let t = ((v - self.red_below) / (self.green_above - self.red_below).max(1e-9)).clamp(0.0, 1.0) as f32;
        if t < 0.5 {
            c.low.lerp_to_gamma(c.mid, t * 2.0)
        } else {
            c.mid.lerp_to_gamma(c.high, (t - 0.5) * 2.0)
        }
    }
}

fn precision_colour(c: &QuantColours, p: LayerPrecision) -> Color32 {
    match p {
        LayerPrecision::INT16 => c.int16,
        LayerPrecision::FP16 => c.fp16,
        LayerPrecision::INT4 => c.int4,
        LayerPrecision::FLOAT => c.float,
        _ => c.int8,
    }
}

pub fn db(x: Option<f64>) -> String {
    x.map_or_else(|| "exact".into(), |v| format!("{v:.1} dB"))
}

/// The quantization panel (bottom): setup, run, overlay switch and legend, output SQNR,
/// worst layers, undo/redo.
pub fn panel_ui(st: &mut Studio, ui: &mut egui::Ui) {
    let mut run = false;
    let mut browse = false;
    ui.horizontal_wrapped(|ui| {
        ui.strong("Quantize");
        let label = ui.label("Samples:");
        ui.add(
            egui::TextEdit::singleline(&mut st.quant.setup.data)
                .hint_text("folder of .npy/.png, or synthetic:8")
                .desired_width(260.0),
        )
        .labelled_by(label.id);
        if ui.button("Browse…").clicked() {
            browse = true;
        }
        let label = ui.label("Preprocess:");
        ui.add(
            egui::TextEdit::singleline(&mut st.quant.setup.preprocess)
                .hint_text("size=48x192;scale=1/255;mean=0.5;std=0.5")
                .desired_width(220.0),
        )
        .labelled_by(label.id);
        ui.toggle_value(&mut st.quant.show_preprocess_form, "Form…")
            .on_hover_text("edit the preprocessing field by field");
        egui::ComboBox::from_id_salt("quant_preset")
            .selected_text(st.quant.setup.preset.clone())
            .show_ui(ui, |ui| {
                for p in PRESETS {
                    ui.selectable_value(&mut st.quant.setup.preset, p.to_string(), p);
                }
            });
        ui.toggle_value(&mut st.quant.show_recipe, "Recipe…");
        let starting = st.quant.session.as_ref().is_some_and(Session::starting);
        if starting {
            let (f, what) = st
                .quant
                .session
                .as_ref()
                .map(|s| s.progress.fraction())
                .unwrap_or_default();
            ui.add(egui::ProgressBar::new(f).desired_width(180.0).text(what).animate(true));
            if ui.button("Cancel quantization").clicked() {
                st.quant.cancel();
            }
        } else if ui
            .add_enabled(st.loaded.is_some(), egui::Button::new("Calibrate & simulate"))
            .clicked()
        {
            run = true;
        }
    });
    if browse {
        // Under Xvfb or CI no dialog appears and nothing changes: the path can be typed.
        if let Some(p) = rfd::FileDialog::new().pick_folder() {
            st.quant.setup.data = p.display().to_string();
        }
    }
    // The recipe window: available before calibration too (a loaded recipe waits for it).
    let mut open = st.quant.show_recipe;
    egui::Window::new("Recipe")
        .open(&mut open)
        .default_pos(ui.max_rect().left_top() - egui::vec2(0.0, 220.0))
        .show(ui.ctx(), |ui| rules_ui(ui, &mut st.quant));
    st.quant.show_recipe = open;
    if st.quant.show_preprocess_form {
        preprocess_form_ui(ui, &mut st.quant.setup.preprocess);
    }
    preview_ui(st, ui);
    if run {
        st.start_quantization();
    }
    let Some(s) = &st.quant.session else {
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
    let status = match (s.updating(), s.last_latency_ms, st.quant.show_timings) {
        (true, ..) => None,
        (false, Some(ms), true) => Some(format!("updated in {ms:.0} ms ({} node runs)", r.recomputed)),
        (false, Some(_), false) => Some(format!("updated ({} node runs)", r.recomputed)),
        (false, None, true) => Some(format!(
            "{} samples simulated in {:.1} s",
            r.report.eval_samples, r.seconds
        )),
        (false, None, false) => Some(format!("{} samples simulated", r.report.eval_samples)),
    };
    let mut select = None;
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
        ui.separator();
        for o in Overlay::ALL {
            ui.selectable_value(&mut st.quant.overlay, o, o.label());
        }
        ui.separator();
        ui.label("red below");
        ui.add(egui::DragValue::new(&mut st.quant.red_below).speed(0.5).suffix(" dB"));
        ui.label("green above");
        ui.add(egui::DragValue::new(&mut st.quant.green_above).speed(0.5).suffix(" dB"));
        ui.separator();
        if ui.add_enabled(st.quant.can_undo(), egui::Button::new("Undo")).clicked() {
            st.quant.undo();
        }
        if ui.add_enabled(st.quant.can_redo(), egui::Button::new("Redo")).clicked() {
            st.quant.redo();
        }
    });
    legend_ui(ui, &st.quant, &st.theme.quant);
    if !st.multi.is_empty() {
        let nodes: Vec<NodeId> = st.multi.iter().copied().collect();
        let mut clear = false;
        ui.horizontal_wrapped(|ui| {
            ui.label(format!("{} nodes selected:", nodes.len()));
            for (name, p) in PRECISIONS {
                if ui.button(format!("Set selected to {name}")).clicked() {
                    st.quant.set_precision(&nodes, p);
                }
            }
            clear = ui.button("Clear selection").clicked();
        });
        if clear {
            st.send(Command::SetMulti(Vec::new()));
        }
    }
    let Some(s) = &st.quant.session else { return };
    let Some(r) = &s.result else { return };
    let report = r.report.clone();
    ui.columns(3, |cols| {
        depth_plot_ui(&mut cols[0], &report, st.quant.red_below, &st.theme.quant);
        if let Some(n) = sensitivity_ui(&mut cols[1], st) {
            select = Some(n);
        }
        pareto_ui(&mut cols[2], st);
    });
    let Some(s) = &st.quant.session else { return };
    let Some(r) = &s.result else { return };
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
        let _ = r;
    });
    if let Some(n) = select {
        st.send(Command::Reveal(Selection::Node(n)));
    }
}

/// The preprocessing, field by field; every change rewrites the spec text.
fn preprocess_form_ui(ui: &mut egui::Ui, spec: &mut String) {
    use npu_core::quant::data::{ImageDType, Resize};
    let mut p = match Preprocess::parse(spec) {
        Ok(p) => p,
        Err(e) => {
            ui.colored_label(ui.visuals().error_fg_color, e);
            return;
        }
    };
    let before = p.clone();
    ui.horizontal_wrapped(|ui| {
        let mut own = p.size.is_some();
        ui.checkbox(&mut own, "resize to");
        if own && p.size.is_none() {
            p.size = Some((224, 224));
        } else if !own {
            p.size = None;
        }
        if let Some((h, w)) = &mut p.size {
            ui.add(egui::DragValue::new(h).range(1..=8192).prefix("H "));
            ui.add(egui::DragValue::new(w).range(1..=8192).prefix("W "));
        } else {
            ui.weak("the model's input size");
        }
        egui::ComboBox::from_id_salt("pre_resize")
            .selected_text(format!("{:?}", p.resize).to_lowercase())
            .show_ui(ui, |ui| {
                for r in [Resize::Stretch, Resize::Letterbox, Resize::PadRight, Resize::CenterCrop] {
                    ui.selectable_value(&mut p.resize, r, format!("{r:?}").to_lowercase());
                }
            });
        ui.separator();
        ui.selectable_value(&mut p.bgr, false, "RGB");
        ui.selectable_value(&mut p.bgr, true, "BGR");
        ui.separator();
        ui.label("scale");
        ui.add(egui::DragValue::new(&mut p.scale).speed(0.0001).max_decimals(6));
        if ui.small_button("1/255").clicked() {
            p.scale = 1.0 / 255.0;
        }
        if ui.small_button("1").clicked() {
            p.scale = 1.0;
        }
        ui.label("mean");
        for m in &mut p.mean {
            ui.add(egui::DragValue::new(m).speed(0.01).max_decimals(4));
        }
        ui.label("std");
        for s in &mut p.std {
            ui.add(
                egui::DragValue::new(s)
                    .speed(0.01)
                    .range(0.0001..=1000.0)
                    .max_decimals(4),
            );
        }
        ui.separator();
        ui.selectable_value(&mut p.nhwc, false, "NCHW");
        ui.selectable_value(&mut p.nhwc, true, "NHWC");
        egui::ComboBox::from_id_salt("pre_dtype")
            .selected_text(format!("{:?}", p.dtype).to_lowercase())
            .show_ui(ui, |ui| {
                for d in [ImageDType::F32, ImageDType::U8, ImageDType::I8] {
                    ui.selectable_value(&mut p.dtype, d, format!("{d:?}").to_lowercase());
                }
            });
    });
    if p != before {
        *spec = p.to_spec();
    }
}

/// The first preprocessed sample next to the form; made again (off the UI thread) whenever
/// the samples or the preprocessing change.
fn preview_ui(st: &mut Studio, ui: &mut egui::Ui) {
    let q = &mut st.quant;
    if let Some(r) = q.preview_job.as_ref().and_then(super::jobs::Job::poll) {
        q.preview_job = None;
        if let Ok(p) = r {
            q.preview_texture = p.image.clone().map(|img| {
                ui.ctx()
                    .load_texture("calibration_preview", img, egui::TextureOptions::NEAREST)
            });
            q.preview = Some(p);
        }
    }
    let model_path = st.loaded.as_ref().map(|l| l.path.clone()).unwrap_or_default();
    let key = (q.setup.data.clone(), q.setup.preprocess.clone(), model_path);
    let current = q.preview.as_ref().is_some_and(|p| p.key == key);
    if !current
        && q.preview_job.is_none()
        && !key.0.is_empty()
        && let Some(l) = &st.loaded
    {
        let model = l.model.clone();
        q.preview_job = Some(super::jobs::Job::spawn("preview", st.ctx.as_ref(), move |_| {
            Ok(make_preview(&model, &key.2, &key.0, &key.1))
        }));
    }
    let Some(p) = &q.preview else { return };
    if q.setup.data.is_empty() {
        return;
    }
    ui.horizontal(|ui| {
        ui.weak("First sample:");
        if let (Some(t), true) = (&q.preview_texture, p.image.is_some()) {
            let size = t.size_vec2();
            let scale = (48.0 / size.y).min(240.0 / size.x);
            ui.add(egui::Image::new(t).fit_to_exact_size(size * scale))
                .on_hover_text("the first sample after preprocessing, values stretched to the full grey range");
        }
        if current {
            ui.label(&p.text);
        } else {
            ui.weak("updating…");
        }
    });
}

/// The run button, progress and cancel of an analysis job; true when Run was clicked.
fn job_row(ui: &mut egui::Ui, s: &mut Session, kind: JobKind, run: &str) -> bool {
    let mut clicked = false;
    ui.horizontal(|ui| match s.job.clone() {
        Some((k, p)) if k == kind => {
            let (f, what) = p.fraction();
            ui.add(egui::ProgressBar::new(f).desired_width(160.0).text(what).animate(true));
            if ui.button(format!("Cancel {}", run.to_lowercase())).clicked() {
                s.cancel_job();
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
fn sensitivity_ui(ui: &mut egui::Ui, st: &mut Studio) -> Option<NodeId> {
    let ctx = st.ctx.clone();
    let s = st.quant.session.as_mut()?;
    let mut select = None;
    egui::CollapsingHeader::new("Layer sensitivity")
        .default_open(true)
        .show(ui, |ui| {
            if job_row(ui, s, JobKind::Sensitivity, "Measure sensitivity") {
                s.start_job(JobKind::Sensitivity, 0.0, ctx.clone());
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
            small_plot("sensitivity_bars")
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
fn pareto_ui(ui: &mut egui::Ui, st: &mut Studio) {
    let ctx = st.ctx.clone();
    let (mid, low) = (st.theme.quant.mid, st.theme.quant.low);
    let q = &mut st.quant;
    let Some(s) = q.session.as_mut() else { return };
    let mut apply = None;
    egui::CollapsingHeader::new("Mixed precision (Pareto curve)")
        .default_open(true)
        .show(ui, |ui| {
            ui.horizontal(|ui| {
                let label = ui.label("target");
                ui.add(egui::DragValue::new(&mut q.pareto_target).speed(0.5).suffix(" dB"))
                    .labelled_by(label.id);
            });
            if job_row(ui, s, JobKind::Pareto, "Find mixed precision") {
                s.start_job(JobKind::Pareto, q.pareto_target, ctx.clone());
            }
            let Some((g, m)) = &s.pareto else {
                ui.weak("Promotes the most sensitive layers to 16-bit activations, one at a time.");
                return;
            };
            if *g != s.generation() {
                ui.weak("searched from an earlier plan");
            }
            let last = m.curve.len().saturating_sub(1);
            q.pareto_point = q.pareto_point.min(last);
            let pts: Vec<[f64; 2]> = m
                .curve
                .iter()
                .filter_map(|c| Some([c.promoted as f64, c.sqnr_db?]))
                .collect();
            let picked = &m.curve[q.pareto_point];
            let r = small_plot("pareto_curve")
                .x_axis_label("layers at 16 bits")
                .y_axis_label("output dB")
                .show(ui, |p| {
                    p.line(egui_plot::Line::new("SQNR", pts.clone()));
                    p.points(egui_plot::Points::new("points", pts.clone()).radius(2.5));
                    p.hline(egui_plot::HLine::new("target", m.target_db).color(mid));
                    if let Some(v) = picked.sqnr_db {
                        p.points(
                            egui_plot::Points::new("picked", vec![[picked.promoted as f64, v]])
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
                    let d = |c: &npu_core::quant::amp::CurvePoint| (c.promoted as f64 - at.x).abs();
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
                    "{} of {} at 16 bits · {} · {:.0} KiB",
                    c.promoted,
                    m.layers_total,
                    db(c.sqnr_db),
                    c.cost_bytes / 1024.0
                ));
                let current = *g == s.generation();
                if let Some(plan) = m.plans.get(q.pareto_point)
                    && ui
                        .add_enabled(current, egui::Button::new("Apply this point"))
                        .on_disabled_hover_text("the plan changed since the search: find mixed precision again")
                        .clicked()
                {
                    apply = Some(plan.clone());
                }
            });
        });
    if let Some(plan) = apply {
        let layers = plan.layers.clone();
        q.apply_edits(Edits {
            layers,
            base: Some(Arc::new(plan)),
        });
    }
}

impl QuantView {
    /// Applies the rules to the optimized graph: every layer gets the precision of the last
    /// rule that matches it (the preset's otherwise), as one undoable edit.
    pub fn apply_rules(&mut self) {
        let Some(m) = self.session.as_ref().and_then(|s| s.mapping.clone()) else {
            return;
        };
        let recipe = Recipe {
            preset: self.setup.preset.clone(),
            rules: self.rules.clone(),
            ..Recipe::default()
        };
        match recipe.resolve(&m.optimized.graph) {
            Ok(r) => {
                self.rules_note = Some(format!(
                    "applied: {} layers off the preset; nodes matched per rule: {:?}",
                    r.layers.len(),
                    r.matched
                ));
                self.apply_layers(r.layers);
            }
            Err(e) => self.rules_note = Some(e),
        }
    }
}

/// The recipe editor: ordered rules, each a node-name regex and/or an op type and a
/// precision; Apply makes them the current edits (undoable).
fn rules_ui(ui: &mut egui::Ui, q: &mut QuantView) {
    let before = q.rules.clone();
    rules_list_ui(ui, q);
    if q.rules != before {
        q.dirty = true;
    }
}

fn rules_list_ui(ui: &mut egui::Ui, q: &mut QuantView) {
    recipe_file_ui(ui, q);
    ui.horizontal(|ui| {
        ui.label("Preset (recalibrate after a change):");
        egui::ComboBox::from_id_salt("recipe_preset")
            .selected_text(q.setup.preset.clone())
            .show_ui(ui, |ui| {
                for p in PRESETS {
                    ui.selectable_value(&mut q.setup.preset, p.to_string(), p);
                }
            });
    });
    ui.separator();
    {
        {
            ui.weak("Later rules win. A name pattern is a regex searched in the optimized graph's node names; op Conv also matches FusedConv.");
            let mut remove = None;
            let mut swap = None;
            let n = q.rules.len();
            for (k, r) in q.rules.iter_mut().enumerate() {
                ui.horizontal(|ui| {
                    ui.label(format!("{}.", k + 1));
                    optional_text(ui, "name", &mut r.name, 160.0);
                    optional_text(ui, "op", &mut r.op, 90.0);
                    egui::ComboBox::from_id_salt(("rule_precision", k))
                        .selected_text(r.precision.clone())
                        .show_ui(ui, |ui| {
                            for p in ["int8", "int16", "fp16", "int4", "float"] {
                                ui.selectable_value(&mut r.precision, p.to_string(), p);
                            }
                        });
                    if ui.add_enabled(k > 0, egui::Button::new("Up")).clicked() {
                        swap = Some(k - 1);
                    }
                    if ui.add_enabled(k + 1 < n, egui::Button::new("Down")).clicked() {
                        swap = Some(k);
                    }
                    if ui.button("Remove").clicked() {
                        remove = Some(k);
                    }
                });
            }
            if let Some(k) = swap {
                q.rules.swap(k, k + 1);
            }
            if let Some(k) = remove {
                q.rules.remove(k);
            }
            ui.horizontal(|ui| {
                if ui.button("Add rule").clicked() {
                    q.rules.push(Rule {
                        name: None,
                        op: Some("Conv".into()),
                        precision: "int16".into(),
                    });
                }
                let ready = q.session.as_ref().is_some_and(|s| s.result.is_some());
                if ui.add_enabled(ready, egui::Button::new("Apply rules")).clicked() {
                    q.apply_rules();
                }
                if let Some(note) = &q.rules_note {
                    ui.label(note);
                }
            });
        }
    }
    ui.separator();
    overrides_ui(ui, q);
}

/// The recipe file row: its path, Browse…, Load recipe and Save recipe.
fn recipe_file_ui(ui: &mut egui::Ui, q: &mut QuantView) {
    ui.horizontal(|ui| {
        let label = ui.label("Recipe file:");
        ui.add(
            egui::TextEdit::singleline(&mut q.recipe_path)
                .hint_text("recipe.ron")
                .desired_width(240.0),
        )
        .labelled_by(label.id);
        if ui.button("Browse recipes…").clicked()
            && let Some(p) = rfd::FileDialog::new().add_filter("Recipe", &["ron"]).pick_file()
        {
            q.recipe_path = p.display().to_string();
        }
        if ui.button("Load recipe").clicked() {
            q.load_recipe();
        }
        if ui.button("Save recipe").clicked() {
            q.save_recipe();
        }
    });
}

/// The per-node overrides (the current edits), each removable.
fn overrides_ui(ui: &mut egui::Ui, q: &mut QuantView) {
    let mut remove = None;
    egui::CollapsingHeader::new(format!("Per-node overrides ({})", q.layers.len()))
        .id_salt("overrides")
        .default_open(true)
        .show(ui, |ui| {
            if q.layers.is_empty() {
                ui.weak("none: right-click a node, or apply rules");
            }
            egui::ScrollArea::vertical().max_height(160.0).show(ui, |ui| {
                for (name, p) in &q.layers {
                    ui.horizontal(|ui| {
                        ui.label(name);
                        ui.label(precision_name(*p));
                        if ui.small_button(format!("Remove override {name}")).clicked() {
                            remove = Some(name.clone());
                        }
                    });
                }
            });
        });
    if let Some(n) = remove {
        let mut layers = q.layers.clone();
        layers.remove(&n);
        q.apply_layers(layers);
    }
}

impl QuantView {
    /// The recipe the editor shows: the preset, the rules and the overrides.
    pub fn recipe(&self) -> Recipe {
        Recipe {
            preset: self.setup.preset.clone(),
            rules: self.rules.clone(),
            overrides: self
                .layers
                .iter()
                .filter_map(|(n, p)| Some((n.clone(), p.keyword()?.to_string())))
                .collect(),
            ..Recipe::default()
        }
    }

    /// Reads `recipe_path`: its preset and rules replace the editor's, and once a plan is
    /// calibrated its rules and overrides become the edits (one undoable edit).
    pub fn load_recipe(&mut self) {
        let path = self.recipe_path.clone();
        let r = std::fs::read_to_string(&path)
            .map_err(|e| format!("{path}: {e}"))
            .and_then(|t| Recipe::parse_ron(&t).map_err(|e| format!("{path}: not a recipe: {e}")));
        let recipe = match r {
            Ok(r) => r,
            Err(e) => {
                self.rules_note = Some(e);
                return;
            }
        };
        if recipe.preset != self.setup.preset {
            self.setup.preset.clone_from(&recipe.preset);
        }
        self.rules.clone_from(&recipe.rules);
        self.dirty = true;
        // Its layers refer to a plan calibrated with its preset.
        let calibrated = self
            .session
            .as_ref()
            .filter(|s| s.result.is_some())
            .map(|s| s.setup.preset.clone());
        if calibrated.as_deref() == Some(recipe.preset.as_str()) {
            self.pending_recipe = None;
            self.apply_recipe(&recipe);
        } else {
            self.rules_note = Some(format!(
                "loaded {} rules and {} overrides: they apply once the plan is calibrated with preset {}",
                recipe.rules.len(),
                recipe.overrides.len(),
                recipe.preset
            ));
            self.pending_recipe = Some(recipe);
        }
    }

    /// Makes a recipe's rules and overrides the current edits (one undoable edit).
    fn apply_recipe(&mut self, recipe: &Recipe) {
        let Some(m) = self.session.as_ref().and_then(|s| s.mapping.clone()) else {
            return;
        };
        match recipe.resolve(&m.optimized.graph) {
            Ok(r) => {
                self.rules_note = Some(format!("recipe applied: {} layers off the preset", r.layers.len()));
                self.apply_layers(r.layers);
            }
            Err(e) => self.rules_note = Some(format!("{}: {e}", self.recipe_path)),
        }
    }

    /// The precision state a project saved now holds: the edits waiting for the
    /// calibration, if any, else the current ones.
    pub fn project_edits(&self) -> Edits {
        self.pending_layers.clone().unwrap_or_else(|| self.edits())
    }

    /// The setup a project saved now holds: the one the calibrated plan was made with (the
    /// edits refer to it), else the form's.
    pub fn project_setup(&self) -> Setup {
        self.session
            .as_ref()
            .filter(|s| s.result.is_some())
            .map_or_else(|| self.setup.clone(), |s| s.setup.clone())
    }

    /// Writes the editor's recipe to `recipe_path` (atomically).
    pub fn save_recipe(&mut self) {
        let path = std::path::PathBuf::from(&self.recipe_path);
        if self.recipe_path.is_empty() {
            self.rules_note = Some("type a recipe file name first".into());
            return;
        }
        self.rules_note = Some(
            match npu_core::export::write_atomic(&path, self.recipe().to_ron().as_bytes()) {
                Ok(()) => format!("saved to {}", path.display()),
                Err(e) => format!("{}: {e}", path.display()),
            },
        );
    }
}

/// A labelled text field for an optional string (empty: `None`).
fn optional_text(ui: &mut egui::Ui, label: &str, value: &mut Option<String>, width: f32) {
    let mut text = value.clone().unwrap_or_default();
    let label = ui.label(label);
    if ui
        .add(egui::TextEdit::singleline(&mut text).desired_width(width))
        .labelled_by(label.id)
        .changed()
    {
        *value = (!text.is_empty()).then_some(text);
    }
}

/// The bars of a histogram given as (bin centre, count).
fn histogram_bars(bins: &[(f64, usize)], width: f64) -> Vec<egui_plot::Bar> {
    bins.iter()
        .map(|&(x, c)| egui_plot::Bar::new(x, c as f64).width(width))
        .collect()
}

/// A plot of the quantization panel or the inspector: fixed height, no pan or zoom (the
/// panel scrolls instead).
fn small_plot(id: &str) -> egui_plot::Plot<'_> {
    egui_plot::Plot::new(id)
        .height(110.0)
        .allow_drag(false)
        .allow_zoom(false)
        .allow_scroll(false)
}

/// Cumulative SQNR of every quantized tensor in graph order, the five worst marked.
fn depth_plot_ui(ui: &mut egui::Ui, report: &Report, red_below: f64, colours: &QuantColours) {
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
            small_plot("cumulative_sqnr_depth")
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

fn legend_ui(ui: &mut egui::Ui, q: &QuantView, c: &QuantColours) {
    ui.horizontal(|ui| {
        let swatch = |ui: &mut egui::Ui, c: Color32, text: &str| {
            let (r, _) = ui.allocate_exact_size(egui::vec2(14.0, 14.0), egui::Sense::hover());
            ui.painter().rect_filled(r, 2.0, c);
            ui.label(text);
        };
        match q.overlay {
            Overlay::Off => {
                ui.weak("badges on the layers whose precision was edited");
            }
            Overlay::LocalSqnr | Overlay::CumulativeSqnr => {
                swatch(ui, q.heat(c, Some(q.red_below)), &format!("≤ {:.0} dB", q.red_below));
                swatch(
                    ui,
                    q.heat(c, Some(f64::midpoint(q.red_below, q.green_above))),
                    &format!("{:.0} dB", f64::midpoint(q.red_below, q.green_above)),
                );
                swatch(
                    ui,
                    q.heat(c, Some(q.green_above)),
                    &format!("≥ {:.0} dB or exact", q.green_above),
                );
            }
            Overlay::Precision => {
                for (name, p) in PRECISIONS {
                    swatch(ui, precision_colour(c, p), name);
                }
            }
        }
    });
}

/// The precision menu of a node card (right-click) or the inspector.
pub fn precision_menu(ui: &mut egui::Ui, q: &mut QuantView, nodes: &[NodeId]) -> bool {
    // The precision they share, if they do.
    let mut all = nodes.iter().filter_map(|&n| q.precision_of(n));
    let first = all.next();
    let current = first.filter(|p| all.all(|x| x == *p));
    let mut chosen = false;
    for (name, p) in PRECISIONS {
        if ui.radio(current == Some(p), name).clicked() {
            q.set_precision(nodes, p);
            chosen = true;
        }
    }
    chosen
}

/// "Every node of this op type" in a card's context menu: one undoable edit.
pub fn op_type_menu(ui: &mut egui::Ui, q: &mut QuantView, model: &Model, node: NodeId) -> bool {
    let op = model.graph.nodes[node].op.clone();
    let same: Vec<NodeId> = (0..model.graph.nodes.len())
        .filter(|&n| model.graph.nodes[n].op == op && q.session.as_ref().is_some_and(|s| s.rows.contains_key(&n)))
        .collect();
    let mut chosen = false;
    ui.menu_button(format!("All {} {op} nodes", same.len()), |ui| {
        for (name, p) in PRECISIONS {
            if ui.button(name).clicked() {
                q.set_precision(&same, p);
                chosen = true;
                ui.close();
            }
        }
    });
    chosen
}

/// The inspector's quantization section for a node of the open model.
pub fn inspector_ui(st: &mut Studio, ui: &mut egui::Ui, node: NodeId) {
    let Some(s) = &st.quant.session else { return };
    let Some(t) = s.row(node).cloned() else { return };
    ui.separator();
    egui::CollapsingHeader::new("Quantization")
        .default_open(true)
        .show(ui, |ui| {
            egui::Grid::new("quant_grid").num_columns(2).show(ui, |ui| {
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
                precision_menu(ui, &mut st.quant, &[node]);
            });
            let Some(s) = st.quant.session.as_mut() else { return };
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
            let grid_colour = st.theme.text_weak;
            let edge = st.theme.quant.low;
            small_plot("quant_value_histogram").show_y(false).show(ui, |p| {
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
            small_plot("quant_error_histogram")
                .show_y(false)
                .show(ui, |p| p.bar_chart(egui_plot::BarChart::new("error", bars)));
        });
}

/// Times of precision edits driven through the studio's own path: `QuantView::set_precision`,
/// the worker's incremental update, the reply, and the overlay colours of every card.
#[derive(Debug, serde::Serialize)]
pub struct EditBench {
    pub model: String,
    pub samples: usize,
    /// Seconds from the start to the first heatmap (calibration and full simulation).
    pub first_heatmap_s: f64,
    /// Milliseconds from each edit to its updated heatmap.
    pub edit_ms: Vec<f64>,
    pub median_ms: f64,
    pub max_ms: f64,
    /// Node runs of each edit, and of one full simulation, summed over the samples.
    pub node_runs: Vec<usize>,
    pub full_node_runs: usize,
}

/// Opens a session on `model`, then changes the precision of `edits` layers spread over the
/// graph (to int16, fp16 and back to the default, in turn) and times each one.
pub fn bench_edits(model: Arc<Model>, name: &str, setup: Setup, edits: usize) -> Result<EditBench, String> {
    let mut q = QuantView {
        setup,
        ..QuantView::default()
    };
    let t0 = Instant::now();
    q.start(
        model.clone(),
        npu_core::passes::all_passes()
            .iter()
            .map(|p| p.name().to_string())
            .collect(),
        None,
    );
    let wait = |q: &mut QuantView, generation: u64| -> Result<(), String> {
        loop {
            if let Some(e) = q.poll() {
                return Err(e);
            }
            let s = q.session.as_ref().ok_or("the session ended")?;
            if s.result.as_ref().is_some_and(|r| r.generation >= generation) {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    };
    wait(&mut q, 0)?;
    let first_heatmap_s = t0.elapsed().as_secs_f64();
    let s = q.session.as_ref().ok_or("no session")?;
    let samples = s.result.as_ref().map_or(0, |r| r.report.eval_samples);
    let mut nodes: Vec<NodeId> = s.rows.keys().copied().collect();
    nodes.sort_unstable();
    let full_node_runs = s
        .mapping
        .as_ref()
        .map_or(0, |m| m.optimized.graph.nodes.len() * samples);
    if nodes.is_empty() {
        return Err("no quantized layer".into());
    }
    let mut edit_ms = Vec::new();
    let mut node_runs = Vec::new();
    for k in 0..edits {
        let node = nodes[(k * 7919) % nodes.len()];
        let p = [LayerPrecision::INT16, LayerPrecision::FP16, LayerPrecision::INT8][k % 3];
        let t = Instant::now();
        let before = q.generation;
        q.set_precision(&[node], p);
        if q.generation == before {
            continue;
        }
        let g = q.generation;
        wait(&mut q, g)?;
        let marks = q.card_marks(&super::theme::Theme::light().quant);
        edit_ms.push(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(marks);
        node_runs.push(
            q.session
                .as_ref()
                .and_then(|s| s.result.as_ref())
                .map_or(0, |r| r.recomputed),
        );
    }
    let mut sorted = edit_ms.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(EditBench {
        model: name.into(),
        samples,
        first_heatmap_s,
        median_ms: sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN),
        max_ms: sorted.last().copied().unwrap_or(f64::NAN),
        edit_ms,
        node_runs,
        full_node_runs,
    })
}
