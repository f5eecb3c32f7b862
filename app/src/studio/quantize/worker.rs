//! The quantization worker: a thread that owns the quantizer, the calibrated plan and every
//! sample's FP32 and fake-quant values, and answers the studio's messages (an edit to
//! simulate incrementally, a full re-simulation, a sensitivity analysis, a mixed-precision
//! search, a tensor's values for the inspector). [`Session`] is the UI's handle on it.

use super::edits::Edits;
use crate::studio::commands::{JobKind, Setup};
use crate::studio::jobs::{JobError, JobProgress};
use npu_core::ir::{Model, NodeId};
use npu_core::pipeline::{self, Passes, PlanRequest, Samples};
use npu_core::progress::Silent;
use npu_core::quant::amp::MixedPrecision;
use npu_core::quant::analysis::{Analysis, Cached};
use npu_core::quant::live::Keep;
use npu_core::quant::scheme::ActFormat;
use npu_core::quant::seqmse::SeqMse;
use npu_core::quant::{LayerPrecision, QuantPlan, Quantizer, Report, TensorReport};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::time::Instant;

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

/// What the UI asks the worker for.
enum Msg {
    /// Simulate these edits (incrementally) as this generation.
    Layers(u64, Edits),
    /// Simulate every sample again from scratch (no incremental reuse) as this generation.
    Full(u64, Arc<JobProgress>),
    /// Measure every layer's sensitivity on the current plan.
    Sensitivity(Arc<JobProgress>),
    /// Search mixed precision (8 → 16-bit activations) from the current plan to this target,
    /// weighing promotions by the estimated latency on an NPU target when one is given.
    Pareto(f64, Option<Box<npu_core::target::Target>>, Arc<JobProgress>),
    /// Values of this tensor (by name in the optimized graph) for the inspector.
    Inspect(String),
}

/// What a sensitivity or mixed-precision job measured, on which edit generation, and the
/// job's progress (which identifies it).
pub struct JobReply {
    progress: Arc<JobProgress>,
    generation: u64,
    result: Result<JobResult, JobError>,
}

enum JobResult {
    Sensitivity(Analysis),
    Pareto(MixedPrecision),
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
    rx: Receiver<Result<Started, JobError>>,
    updates: Option<Receiver<Result<Reply, JobError>>>,
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
    /// What the range refinement did, in words (when the setup asked for it).
    pub refinement: Option<String>,
}

struct Started {
    mapping: Arc<Mapping>,
    refinement: Option<String>,
    updates: Receiver<Result<Reply, JobError>>,
    inspected: Receiver<Inspect>,
    jobs: Receiver<JobReply>,
}

impl Session {
    /// Starts the worker: optimizes the model, calibrates on `setup.data`, simulates every
    /// sample, then waits for plan edits.
    pub fn start(
        model: Arc<Model>,
        setup: Setup,
        passes: Vec<String>,
        threads: usize,
        ctx: Option<egui::Context>,
    ) -> Self {
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
            threads,
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
            refinement: None,
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

    /// Asks the worker to simulate the edits as `generation`.
    pub(super) fn send(&mut self, generation: u64, edits: Edits) {
        self.sent.insert(generation, Instant::now());
        let _ = self.tx.send(Msg::Layers(generation, edits));
    }

    /// Takes what the worker sent; returns an error message when it failed.
    pub(super) fn poll(&mut self) -> Result<bool, JobError> {
        let mut changed = false;
        if self.mapping.is_none() {
            match self.rx.try_recv() {
                Ok(Ok(s)) => {
                    self.mapping = Some(s.mapping);
                    self.refinement = s.refinement;
                    self.updates = Some(s.updates);
                    self.inspected = Some(s.inspected);
                    self.jobs = Some(s.jobs);
                }
                Ok(Err(e)) => return Err(e),
                Err(TryRecvError::Empty) => return Ok(false),
                Err(TryRecvError::Disconnected) => {
                    return Err(JobError::Failed("the quantizer stopped unexpectedly".into()));
                }
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
                    Err(JobError::Cancelled) => {}
                    // The session stays: only the analysis failed.
                    Err(JobError::Failed(e)) => self.job_error = Some((kind, e)),
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
                Err(TryRecvError::Disconnected) => {
                    return Err(JobError::Failed("the quantizer stopped unexpectedly".into()));
                }
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
    pub fn start_job(
        &mut self,
        kind: JobKind,
        target_db: f64,
        cost_target: Option<npu_core::target::Target>,
        ctx: Option<egui::Context>,
    ) {
        if self.job.is_some() {
            return;
        }
        let p = Arc::new(JobProgress::default());
        p.set_ctx(ctx);
        p.set(0.0, "waiting for the quantizer");
        let msg = match kind {
            JobKind::Sensitivity => Msg::Sensitivity(p.clone()),
            JobKind::Pareto => Msg::Pareto(target_db, cost_target.map(Box::new), p.clone()),
        };
        if self.tx.send(msg).is_ok() {
            self.job = Some((kind, p));
        }
    }

    /// Asks for every sample to be simulated again from scratch as `generation`.
    pub(super) fn simulate_again(&mut self, generation: u64, ctx: Option<egui::Context>) {
        let p = Arc::new(JobProgress::default());
        p.set_ctx(ctx);
        p.set(0.0, "simulating every sample");
        self.sent.insert(generation, Instant::now());
        if self.tx.send(Msg::Full(generation, p.clone())).is_ok() {
            self.full = Some((generation, p));
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
    threads: usize,
    simulating: Arc<std::sync::atomic::AtomicBool>,
}

/// Everything the worker does: one calibration, then incremental updates until the UI
/// drops the session.
fn worker(
    w: &Work,
    progress: &JobProgress,
    msgs: &Receiver<Msg>,
    started: &Sender<Result<Started, JobError>>,
    ctx: Option<&egui::Context>,
) {
    let run = || -> Result<(), JobError> {
        let setup = &w.setup;
        progress.set(0.0, "optimizing the graph");
        let optimized = match pipeline::optimize(&w.model, &Passes::Only(w.passes.clone()), progress) {
            Ok(o) => o.model,
            Err(npu_core::passes::OptimizeError::Cancelled) => return Err(JobError::Cancelled),
            Err(e) => return Err(JobError::Failed(format!("optimizing: {e}"))),
        };
        let recipe = npu_core::quant::recipe::Recipe {
            equalize: setup.equalize,
            absorb_bias: setup.absorb_bias,
            refine_ranges: setup.refine_ranges,
            seq_mse: setup.seq_mse,
            smooth_quant: setup.smooth_quant,
            gptq: setup.gptq,
            ..npu_core::quant::recipe::Recipe::from_preset(&setup.preset)
        };
        let calib = Samples::open(&setup.data, &setup.preprocess).map_err(|e| JobError::Failed(e.to_string()))?;
        let pipeline::Transformed {
            model: optimized,
            equalized,
            absorbed,
            smoothed,
        } = pipeline::transform_weights(optimized, &recipe, &calib, w.threads, progress)?;
        let optimized = Arc::new(optimized);
        let q = pipeline::quantizer(&optimized, w.threads)?;
        let stats = pipeline::calibrate(&q, &calib, progress)?;
        let mut planned = pipeline::plan(
            &q,
            &stats,
            &calib,
            &PlanRequest::recipe(recipe.clone(), setup.preset.clone()),
            progress,
        )?;
        if let Some(e) = equalized {
            // The mapping's graph carries the equalized weights; the plan keeps the scales
            // for the commands that rebuild them from the model file.
            planned.plan.equalization = e.scales;
        }
        let absorption = absorbed.map(|a| {
            planned.plan.absorption.clone_from(&a.shifts);
            a.summary()
        });
        let smoothing = smoothed.map(|s| {
            planned.plan.smoothing.clone_from(&s.scales);
            s.summary()
        });
        let refinement = planned.refined.as_ref().map(|r| {
            let verdict = r
                .verdict()
                .map_or(String::new(), |v| format!("; held-back output SQNR {v}"));
            format!("Refined ranges: {} of {} changed{verdict}", r.choices.len(), r.tried)
        });
        let lines: Vec<String> = [
            absorption,
            smoothing,
            refinement,
            planned.seq_mse.as_ref().map(SeqMse::summary),
            planned.gptq.as_ref().map(npu_core::quant::gptq::Gptq::summary),
        ]
        .into_iter()
        .flatten()
        .collect();
        let refinement = (!lines.is_empty()).then(|| lines.join("\n"));
        let samples = calib.load(&optimized, progress)?;
        let t = Instant::now();
        w.simulating.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut live = pipeline::simulate_live(&q, planned.plan, samples, Keep::PerTensor, progress)?;
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
                refinement,
                updates,
                inspected,
                jobs,
            }))
            .map_err(|_| JobError::Failed("the studio closed".into()))?;
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
                        match pipeline::simulate_live(&q, plan, live.sample_inputs(), Keep::PerTensor, &*p) {
                            Ok(l) => live = l,
                            Err(pipeline::SimulateError::Cancelled) => {}
                            Err(e) => {
                                gone |= updates_tx.send(Err(e.into())).is_err();
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
                let (Msg::Sensitivity(p) | Msg::Pareto(_, _, p)) = &job else {
                    continue;
                };
                let progress = p.clone();
                if cached.is_none() {
                    // The FP32 outputs of the samples, once, for every later job.
                    let mut samples = live.sample_inputs().into_iter().map(|s| Ok((String::new(), s)));
                    cached = q.cache(&mut samples).ok();
                }
                let result = match (&job, cached.as_ref()) {
                    (_, None) => Err(JobError::Failed("could not run the samples in FP32".into())),
                    (Msg::Sensitivity(p), Some(c)) => q
                        .analyze(&live.plan, c, &**p)
                        .map(JobResult::Sensitivity)
                        .map_err(JobError::from),
                    (Msg::Pareto(target, npu, p), Some(c)) => {
                        let estimate = |plan: &npu_core::quant::QuantPlan| {
                            npu.as_deref()
                                .and_then(|t| npu_core::pipeline::latency_estimate(q.model, t, plan))
                        };
                        let cost = match npu.as_deref() {
                            Some(t) => npu_core::quant::amp::Cost::Latency {
                                name: &t.id,
                                estimate: &estimate,
                            },
                            None => npu_core::quant::amp::Cost::Bytes,
                        };
                        q.mixed_precision_by(&live.plan, c, *target, LayerPrecision::INT16, cost, &**p)
                            .map(|(m, _)| JobResult::Pareto(m))
                            .map_err(JobError::from)
                    }
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
) -> Result<Reply, JobError> {
    let t = Instant::now();
    // The base plan's bias corrections are kept: measured again after a promotion they do
    // worse on PP-OCR rec (see `refresh_bias_corrections`).
    let mut plan = edits.base.as_deref().unwrap_or(calibrated).clone();
    plan.layers = edits.layers;
    let recomputed = q.live_update(live, &plan, &Silent)?;
    let report = q.live_report(live);
    Ok(Reply {
        generation,
        plan,
        report,
        recomputed,
        seconds: t.elapsed().as_secs_f64(),
    })
}
