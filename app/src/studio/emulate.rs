//! The Emulate stage: the compiled binary written to bytes and run by the emulator on the
//! first evaluation sample, every tensor compared with FP32, the fake-quant simulation and
//! the integer reference ([`npu_core::pipeline::compare_emulation`]). It feeds the "Emulated SQNR"
//! overlay (what the device delivers, beside the simulated one), the "Gap" overlay (where
//! the simulation promises more than the binary delivers) and the inspector's values of
//! the selected node, side by side.

use super::compile::CompileResult;
use super::jobs::{Job, JobError, JobProgress, take_finished};
use super::quantize::Session;
use npu_core::ir::NodeId;
use npu_core::pipeline::{self, Emulator, Input, TensorTrace};
use std::collections::HashMap;

/// Values the inspector lists per column.
const FIRST: usize = 6;

/// One node of the open model, as the binary computed its output.
#[derive(Clone, Debug, PartialEq)]
pub struct EmulatedNode {
    pub trace: TensorTrace,
    /// The first values of its output: simulated (fake-quant), integer reference, emulated.
    pub simulated: Vec<f32>,
    pub integer: Vec<f32>,
    pub emulated: Vec<f32>,
}

/// A finished emulation.
pub struct EmulateResult {
    /// The compile (plan generation and target) it emulated.
    pub generation: u64,
    pub target: String,
    /// The sample it ran.
    pub sample: String,
    pub nodes: HashMap<NodeId, EmulatedNode>,
    /// Every compared tensor.
    pub tensors: usize,
    /// Codes that differ from the integer reference, over every tensor.
    pub mismatches: usize,
    /// The graph outputs: (name, emulated SQNR, simulated SQNR) against FP32.
    pub outputs: Vec<(String, Option<f64>, Option<f64>)>,
    pub ms: f64,
    /// Emulated a compile of the file's own program: SQNR against the file's float graph
    /// (float kernels between its quantizers), no simulation.
    pub from_file: bool,
}

/// The compiled binary, written and loaded, and the first sample of `setup`'s data as
/// `model`'s inputs (with its file's label).
fn first_sample(
    program: &npu_core::program::Program,
    compiled: &npu_core::compiler::Compiled,
    setup: &super::commands::Setup,
    model: &npu_core::ir::Model,
    p: &JobProgress,
) -> Result<(Emulator, String, HashMap<String, npu_core::ir::Tensor>), JobError> {
    let fail = |e: String| JobError::Failed(format!("Emulate failed: {e}"));
    p.set(0.05, "writing the binary");
    let bytes = pipeline::write_binary(program, compiled);
    let e = pipeline::load_binary(&bytes).map_err(|e| fail(e.to_string()))?;
    p.check()?;
    p.set(0.15, "reading the first sample");
    let samples = npu_core::pipeline::Samples::open(&setup.data, &setup.preprocess).map_err(|e| fail(e.to_string()))?;
    let (label, sample) = samples
        .iter(model)
        .next()
        .ok_or_else(|| fail("no sample".into()))?
        .map_err(|e| fail(e.to_string()))?;
    Ok((e, label, sample))
}

/// A sample's tensor `name`, as floats (quantized on entry), or with `integers`, an integer
/// tensor as its codes.
fn feed_one(sample: &HashMap<String, npu_core::ir::Tensor>, name: &str, integers: bool) -> Result<Input, String> {
    let t = sample
        .get(name)
        .ok_or_else(|| format!("the sample has no input {name}"))?;
    Ok(
        match t
            .as_i64_vec()
            .filter(|_| integers && t.dtype() != npu_core::ir::DType::F32)
        {
            Some(codes) => Input::Codes(codes.iter().map(|&c| c as i32).collect()),
            None => Input::Float(t.to_f32().iter().copied().collect()),
        },
    )
}

/// The sample as the binary's inputs, in its order.
fn feed(sample: &HashMap<String, npu_core::ir::Tensor>, e: &Emulator, integers: bool) -> Result<Vec<Input>, JobError> {
    pipeline::binary_inputs(e)
        .into_iter()
        .map(|n| feed_one(sample, n, integers).map_err(|e| JobError::Failed(format!("Emulate failed: {e}"))))
        .collect()
}

impl EmulateResult {
    /// The result of a finished run: the graph outputs' rows, the sample's file name,
    /// mismatches over every tensor, and the time since `t0`.
    fn new(
        e: &Emulator,
        rows: &[TensorTrace],
        nodes: HashMap<NodeId, EmulatedNode>,
        (generation, target): (u64, String),
        label: &str,
        t0: std::time::Instant,
        from_file: bool,
    ) -> Self {
        let outputs = e
            .binary
            .outputs
            .iter()
            .filter_map(|&o| rows.iter().find(|r| r.name == e.binary.tensors[o].tensor.name))
            .map(|r| (r.name.clone(), r.emulated_sqnr_db, r.simulated_sqnr_db))
            .collect();
        Self {
            generation,
            target,
            sample: std::path::Path::new(label)
                .file_name()
                .map_or_else(|| label.to_owned(), |f| f.to_string_lossy().into_owned()),
            nodes,
            tensors: rows.len(),
            mismatches: rows.iter().filter_map(|r| r.integer_mismatches).sum(),
            outputs,
            ms: t0.elapsed().as_secs_f64() * 1e3,
            from_file,
        }
    }
}

#[derive(Default)]
pub struct EmulateState {
    pub job: Option<Job<EmulateResult>>,
    pub result: Option<EmulateResult>,
    /// The compile (generation, target) the running job emulates, and the last one an
    /// automatic update failed on (not tried again).
    running_for: Option<(u64, String)>,
    auto_failed: Option<(u64, String)>,
}

impl EmulateState {
    pub fn reset(&mut self) {
        self.cancel();
        self.job = None;
        self.result = None;
    }

    pub fn busy(&self) -> bool {
        self.job.is_some()
    }

    pub fn progress(&self) -> Option<&JobProgress> {
        self.job.as_ref().map(|j| &*j.progress)
    }

    pub fn cancel(&mut self) {
        if let Some(j) = &self.job {
            j.cancel();
        }
    }

    /// Emulates the binary of `compile` on the first sample of the session's data.
    pub fn start(
        &mut self,
        session: &Session,
        compile: &CompileResult,
        ctx: Option<&egui::Context>,
    ) -> Result<(), String> {
        let (Some(m), Some(r)) = (&session.mapping, &session.result) else {
            return Err("nothing to emulate yet: the simulation has not finished".into());
        };
        let (mapping, plan) = (m.clone(), r.plan.clone());
        let setup = session.setup.clone();
        let (program, compiled) = (compile.program.clone(), compile.compiled.clone());
        let (generation, target) = (compile.generation, compile.target.clone());
        self.running_for = Some((generation, target.clone()));
        self.job = Some(Job::spawn("emulate", ctx, move |p| {
            let t0 = std::time::Instant::now();
            let (e, label, sample) = first_sample(&program, &compiled, &setup, &mapping.optimized, p)?;
            p.set(0.25, &format!("emulating {} steps", e.binary.steps.len()));
            let values = e
                .run(feed(&sample, &e, false)?)
                .map_err(|e| JobError::Failed(format!("Emulate failed: {e}")))?;
            p.check()?;
            p.set(0.5, "running FP32, the simulation and the integer reference");
            let q = npu_core::pipeline::quantizer(&mapping.optimized, 1)
                .map_err(|e| JobError::Failed(format!("Emulate failed: {e}")))?;
            let fail = |e: npu_core::quant::QuantError| JobError::Failed(format!("Emulate failed: {e}"));
            let fp32 = q.values(None, &sample).map_err(fail)?;
            let sim = q.values(Some(&plan), &sample).map_err(fail)?;
            p.set(0.7, "the integer reference, and comparing every tensor");
            let refs = pipeline::EmulationReferences {
                fp32: &fp32,
                simulated: Some(&sim),
                program: &program,
            };
            let compared = pipeline::compare_emulation(&e, &values, &refs, &|n| feed_one(&sample, n, false))
                .map_err(|e| JobError::Failed(format!("Emulate failed: {e}")))?;
            p.check()?;
            let (integer, rows) = (compared.integer, compared.traces);
            // Optimized node name → the nodes of the open model it came from.
            let mut origin: HashMap<&str, &[NodeId]> = HashMap::new();
            for n in &mapping.optimized.graph.nodes {
                origin.insert(n.name.as_str(), &n.origin);
            }
            let index: HashMap<&str, usize> = e
                .binary
                .tensors
                .iter()
                .enumerate()
                .map(|(k, t)| (t.tensor.name.as_str(), k))
                .collect();
            let first = |v: Option<&[f32]>| v.map(|v| v.iter().take(FIRST).copied().collect()).unwrap_or_default();
            let dequant = |k: usize, codes: Option<&[i32]>| {
                let t = &e.binary.tensors[k].tensor;
                codes.map(|c| c.iter().take(FIRST).map(|&x| t.q.real(x)).collect::<Vec<f32>>())
            };
            let mut nodes = HashMap::new();
            for row in rows.iter().filter(|r| fp32.contains_key(&r.name)) {
                let Some(&k) = index.get(row.name.as_str()) else {
                    continue;
                };
                let n = EmulatedNode {
                    trace: row.clone(),
                    simulated: first(sim.get(&row.name).map(Vec::as_slice)),
                    integer: dequant(k, integer[k].as_deref()).unwrap_or_default(),
                    emulated: dequant(k, values[k].as_deref()).unwrap_or_default(),
                };
                // Schedule order: a node's last tensor is its output.
                for &o in origin.get(row.node.as_str()).copied().unwrap_or_default() {
                    nodes.insert(o, n.clone());
                }
            }
            Ok(EmulateResult::new(
                &e,
                &rows,
                nodes,
                (generation, target),
                &label,
                t0,
                false,
            ))
        }));
        Ok(())
    }

    /// Emulates the binary of a compile of the open file's own integer program (a quantized
    /// TFLite file) on the first sample of `setup`'s data: every tensor against the file's
    /// float graph (float kernels between its quantizers) and the integer reference.
    pub fn start_file(
        &mut self,
        model: &std::sync::Arc<npu_core::ir::Model>,
        setup: &super::commands::Setup,
        compile: &CompileResult,
        ctx: Option<&egui::Context>,
    ) -> Result<(), String> {
        if setup.data.is_empty() {
            return Err("choose a folder of samples first (Quantize panel, Samples)".into());
        }
        let (model, setup) = (model.clone(), setup.clone());
        let (program, compiled) = (compile.program.clone(), compile.compiled.clone());
        let (generation, target) = (compile.generation, compile.target.clone());
        self.running_for = Some((generation, target.clone()));
        self.job = Some(Job::spawn("emulate", ctx, move |p| {
            let t0 = std::time::Instant::now();
            let fail = |e: String| JobError::Failed(format!("Emulate failed: {e}"));
            let (e, label, sample) = first_sample(&program, &compiled, &setup, &model, p)?;
            // Integer inputs (an int8 file input) go in as their codes.
            p.set(0.25, &format!("emulating {} steps", e.binary.steps.len()));
            let values = e.run(feed(&sample, &e, true)?).map_err(|e| fail(e.to_string()))?;
            p.check()?;
            p.set(0.5, "running the file's float graph and the integer reference");
            let mut exec = npu_core::sim::Executor::new(&model, 1).map_err(|e| fail(e.to_string()))?;
            exec.set_fusion(false);
            let mut float: HashMap<String, Vec<f32>> = HashMap::new();
            let mut hook = |_: usize, node: &npu_core::ir::Node, outs: &[Option<&npu_core::ir::Tensor>]| {
                for (o, t) in node.outputs.iter().zip(outs) {
                    if let (Some(o), Some(t)) = (o, t) {
                        float.insert(
                            model.graph.values[*o].name.clone(),
                            t.to_f32().iter().copied().collect(),
                        );
                    }
                }
            };
            exec.run_with_hook(&sample, Some(&mut hook))
                .map_err(|e| fail(e.to_string()))?;
            p.set(0.7, "the integer reference, and comparing every tensor");
            let refs = pipeline::EmulationReferences {
                fp32: &float,
                simulated: None,
                program: &program,
            };
            let compared = pipeline::compare_emulation(&e, &values, &refs, &|n| feed_one(&sample, n, true))
                .map_err(|e| fail(e.to_string()))?;
            p.check()?;
            let (integer, rows) = (compared.integer, compared.traces);
            let origin = super::compile::file_origin(&model);
            let index: HashMap<&str, usize> = e
                .binary
                .tensors
                .iter()
                .enumerate()
                .map(|(k, t)| (t.tensor.name.as_str(), k))
                .collect();
            let dequant = |k: usize, codes: Option<&[i32]>| {
                let t = &e.binary.tensors[k].tensor;
                codes.map(|c| c.iter().take(FIRST).map(|&x| t.q.real(x)).collect::<Vec<f32>>())
            };
            let mut nodes = HashMap::new();
            for row in &rows {
                let Some(&k) = index.get(row.name.as_str()) else {
                    continue;
                };
                let n = EmulatedNode {
                    trace: row.clone(),
                    simulated: Vec::new(),
                    integer: dequant(k, integer[k].as_deref()).unwrap_or_default(),
                    emulated: dequant(k, values[k].as_deref()).unwrap_or_default(),
                };
                for &o in origin
                    .get(super::compile::base_name(&row.node))
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    nodes.insert(o, n.clone());
                }
            }
            Ok(EmulateResult::new(
                &e,
                &rows,
                nodes,
                (generation, target),
                &label,
                t0,
                true,
            ))
        }));
        Ok(())
    }

    /// Takes the finished job: the status line (with the time it took when `timings`), or
    /// an error.
    pub fn poll(&mut self, timings: bool) -> Option<Result<String, String>> {
        let ran = self.running_for.take();
        let r = match take_finished(&mut self.job)? {
            Ok(r) => r,
            Err(JobError::Cancelled) => return Some(Ok("Emulation cancelled".into())),
            Err(JobError::Failed(e)) => {
                self.auto_failed = ran;
                return Some(Err(e));
            }
        };
        let outs: Vec<String> = r
            .outputs
            .iter()
            .map(|(n, e, s)| {
                if r.from_file {
                    format!("{n} {} against the file's float graph", db(*e))
                } else {
                    format!("{n} {} (simulated {})", db(*e), db(*s))
                }
            })
            .collect();
        let took = if timings {
            format!(" in {:.0} ms", r.ms)
        } else {
            String::new()
        };
        let line = format!(
            "Emulated the {} binary on {}{took}: {}; {} tensors, {} codes differ from the integer reference",
            r.target,
            r.sample,
            outs.join(", "),
            r.tensors,
            r.mismatches
        );
        self.result = Some(r);
        Some(Ok(line))
    }

    /// Whether an emulation shown on the graph should follow a newer compile by itself.
    pub fn wants_update(&self, compile: &CompileResult) -> bool {
        let key = Some((compile.generation, compile.target.clone()));
        self.job.is_none()
            && self
                .result
                .as_ref()
                .is_some_and(|r| (r.generation, &r.target) != (compile.generation, &compile.target))
            && self.auto_failed != key
    }

    /// The stage's line when done, or why it is stale.
    pub fn status(&self, compile: Option<&CompileResult>) -> Option<Result<String, String>> {
        let r = self.result.as_ref()?;
        Some(match compile {
            Some(c) if c.generation == r.generation && c.target == r.target => Ok(format!(
                "{}: {} codes off the integer reference{}",
                r.target,
                r.mismatches,
                r.outputs.first().map_or_else(String::new, |(_, e, s)| format!(
                    ", output {} (sim. {})",
                    db(*e),
                    db(*s)
                ))
            )),
            _ => Err("the binary changed since the emulation".into()),
        })
    }

    /// Colour and badge of every emulated node: its emulated SQNR against FP32 (`gap`
    /// false), or the gap `simulated − emulated` marked red above `gap_db`.
    pub fn card_marks(
        &self,
        gap: bool,
        gap_db: f64,
        heat: impl Fn(Option<f64>) -> egui::Color32,
        c: &super::theme::QuantColours,
    ) -> HashMap<NodeId, (egui::Color32, String)> {
        let Some(r) = &self.result else { return HashMap::new() };
        r.nodes
            .iter()
            .map(|(&n, e)| {
                let t = &e.trace;
                let mark = if gap {
                    let g = t.gap_db().unwrap_or(0.0);
                    let colour = if g > gap_db { c.low } else { c.high };
                    (colour, format!("gap {g:+.1} dB"))
                } else {
                    (heat(t.emulated_sqnr_db), format!("emu {}", db(t.emulated_sqnr_db)))
                };
                (n, mark)
            })
            .collect()
    }
}

fn db(x: Option<f64>) -> String {
    super::quantize::db(x)
}

/// The inspector's section for the selected node: its SQNRs and first values, simulated,
/// integer and emulated side by side.
pub fn inspector_ui(ui: &mut egui::Ui, st: &EmulateState, node: NodeId) {
    let Some(r) = &st.result else { return };
    let Some(e) = r.nodes.get(&node) else { return };
    let t = &e.trace;
    ui.separator();
    ui.strong(format!("Emulated on {} ({})", r.target, r.sample));
    if r.from_file {
        ui.label(format!(
            "{}: emulated {} · local {} (vs the file's float graph); {} codes differ from the integer reference",
            t.name,
            db(t.emulated_sqnr_db),
            db(t.emulated_local_sqnr_db),
            t.integer_mismatches.map_or_else(|| "?".into(), |m| m.to_string())
        ));
    } else {
        ui.label(format!(
            "{}: emulated {} · simulated {} · local {} (vs FP32); gap {}; {} codes differ from the integer reference",
            t.name,
            db(t.emulated_sqnr_db),
            db(t.simulated_sqnr_db),
            db(t.emulated_local_sqnr_db),
            t.gap_db().map_or_else(|| "–".into(), |g| format!("{g:+.2} dB")),
            t.integer_mismatches.map_or_else(|| "?".into(), |m| m.to_string())
        ));
    }
    egui::Grid::new(("emulated-values", node)).striped(true).show(ui, |ui| {
        ui.style_mut().wrap_mode = Some(egui::TextWrapMode::Extend);
        ui.strong("#");
        ui.strong("simulated");
        ui.strong("integer");
        ui.strong("emulated");
        ui.end_row();
        for k in 0..e.emulated.len().max(e.simulated.len()) {
            ui.label(k.to_string());
            for col in [&e.simulated, &e.integer, &e.emulated] {
                ui.monospace(col.get(k).map_or_else(String::new, |v| format!("{v:.5}")));
            }
            ui.end_row();
        }
    });
}
