//! `npu-studio run` and `bench`: the FP32 executor on `.npy` inputs, and its latency.

use anyhow::{Context, Result, bail};
use ndarray::{ArrayD, IxDyn};
use npu_core::ir::{DType, Dim, Tensor, shape_string};
use npu_core::pipeline::{self, Passes};
use npu_core::progress::Silent;
use npu_core::sim::{Executor, with_threads};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Instant;

/// Parses `NAME=1x3x640x640`.
pub fn parse_shape(spec: &str) -> Result<(String, Vec<usize>)> {
    crate::info::parse_shape(spec).map_err(anyhow::Error::msg)
}

/// Reads an `.npy` file of any supported dtype.
pub(super) fn read_npy(path: &Path) -> Result<Tensor> {
    npu_core::ir::npy::read(path).with_context(|| path.display().to_string())
}

/// Writes `t` as an `.npy` file of its own dtype, atomically.
pub(super) fn write_npy(path: &Path, t: &Tensor) -> Result<()> {
    npu_core::ir::npy::write(path, t).with_context(|| path.display().to_string())
}

pub(super) fn parse_inputs(specs: &[String]) -> Result<HashMap<String, Tensor>> {
    specs
        .iter()
        .map(|s| {
            let (name, file) = s
                .split_once('=')
                .with_context(|| format!("'{s}' is not NAME=FILE.npy"))?;
            Ok((name.to_owned(), read_npy(Path::new(file))?))
        })
        .collect()
}

/// Replaces every character outside `[A-Za-z0-9._-]` with `_`.
/// A tensor name as a file stem: every character outside `[A-Za-z0-9._-]` replaced by `_`;
/// a stem over 120 characters keeps its first 100 and ends with `_` and the 16 hex digits
/// of the name's 64-bit FNV-1a hash (file names have a length limit; tf2onnx names exceed
/// it).
pub(super) fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.len() <= 120 {
        return s;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{}_{h:016x}", &s[..100])
}

/// Feeds named by a TFLite signature's input names get the tensor names they stand for.
pub(super) fn by_tensor_name(model: &npu_core::ir::Model, feeds: HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    feeds
        .into_iter()
        .map(|(name, t)| {
            let is_input = model.graph.inputs.iter().any(|&i| model.graph.values[i].name == name);
            match model.meta.props.get(&format!("signature.input.{name}")) {
                Some(tensor) if !is_input => (tensor.clone(), t),
                _ => (name, t),
            }
        })
        .collect()
}

pub fn run(path: &Path, inputs: &[String], out_dir: &Path, threads: usize, dump: Option<&Path>) -> Result<()> {
    let model = super::load(path)?;
    let feeds = by_tensor_name(&model, parse_inputs(inputs)?);
    for &i in &model.graph.inputs {
        let name = &model.graph.values[i].name;
        if !feeds.contains_key(name) {
            bail!(
                "{}: input '{name}' needs a value (--input {name}=FILE.npy)",
                path.display()
            );
        }
    }
    let mut exec = Executor::new(&model, threads.max(1))?;
    exec.set_fusion(dump.is_none());
    let threads = if threads == 0 {
        std::thread::available_parallelism().map_or(1, usize::from)
    } else {
        threads
    };
    let outs = if let Some(dir) = dump {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut err = None;
        let mut hook = |_: usize, node: &npu_core::ir::Node, outs: &[Option<&Tensor>]| {
            for (o, t) in node.outputs.iter().zip(outs) {
                if let (Some(o), Some(t)) = (o, t) {
                    let name = &model.graph.values[*o].name;
                    if let Err(e) = write_npy(&dir.join(format!("{}.npy", sanitize(name))), t) {
                        err.get_or_insert(e);
                    }
                }
            }
        };
        let r = with_threads(threads, || exec.run_with_hook(&feeds, Some(&mut hook)));
        if let Some(e) = err {
            return Err(e);
        }
        r
    } else {
        with_threads(threads, || exec.run(&feeds))
    }
    .with_context(|| format!("running {}", path.display()))?;
    std::fs::create_dir_all(out_dir).with_context(|| format!("cannot create {}", out_dir.display()))?;
    for (name, t) in outs {
        let file = out_dir.join(format!("{}.npy", sanitize(&name)));
        write_npy(&file, &t)?;
        println!(
            "{} {} [{}] -> {}",
            name,
            t.dtype(),
            shape_string(&t.shape().iter().map(|&d| Dim::Fixed(d)).collect::<Vec<_>>()),
            file.display()
        );
    }
    Ok(())
}

/// Deterministic pseudo-random input (uniform in [0, 1) for floats, small ints otherwise).
fn random_tensor(dtype: DType, shape: &[usize], seed: u64) -> Result<Tensor> {
    let mut state = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f64 / (1u64 << 24) as f64
    };
    let n: usize = shape.iter().product();
    let vals: Vec<f64> = (0..n).map(|_| next()).collect();
    let a = ArrayD::from_shape_vec(IxDyn(shape), vals)?;
    Ok(match dtype {
        DType::F32 => Tensor::F32(a.mapv(|v| v as f32)),
        DType::F64 => Tensor::F64(a),
        DType::I64 => Tensor::I64(a.mapv(|v| (v * 4.0) as i64)),
        DType::I32 => Tensor::I32(a.mapv(|v| (v * 4.0) as i32)),
        DType::U8 => Tensor::U8(a.mapv(|v| (v * 255.0) as u8)),
        DType::I8 => Tensor::I8(a.mapv(|v| (v * 255.0 - 128.0) as i8)),
        DType::Bool => Tensor::Bool(a.mapv(|v| v > 0.5)),
        other => bail!("random inputs of dtype {other} are not supported; pass --input"),
    })
}

#[derive(Serialize)]
struct BenchReport {
    model: String,
    median_ms: f64,
    min_ms: f64,
    mean_ms: f64,
    runs: usize,
    warmup: usize,
    threads: usize,
    /// Whether the graph-optimization passes ran first (`--optimize`).
    optimized: bool,
    /// Every timed run, in order.
    times_ms: Vec<f64>,
}

pub fn bench(
    path: &Path,
    inputs: &[String],
    shapes: &[String],
    threads: usize,
    runs: usize,
    warmup: usize,
    json: bool,
    profile: bool,
    optimize: bool,
) -> Result<()> {
    if path.extension().is_some_and(|e| e == "npub") {
        return bench_binary(path, inputs, threads, runs, warmup, json, profile);
    }
    let mut model = super::load(path)?;
    if optimize {
        model = pipeline::optimize(&model, &Passes::All, &Silent)
            .with_context(|| format!("optimizing {}", path.display()))?
            .model;
    }
    let mut feeds = by_tensor_name(&model, parse_inputs(inputs)?);
    let shape_map: HashMap<String, Vec<usize>> = shapes.iter().map(|s| parse_shape(s)).collect::<Result<_>>()?;
    for &i in &model.graph.inputs {
        let v = &model.graph.values[i];
        if feeds.contains_key(&v.name) {
            continue;
        }
        let dims = match (
            shape_map.get(&v.name),
            v.shape.as_ref().and_then(|s| npu_core::ir::concrete(s)),
        ) {
            (Some(d), _) => d.clone(),
            (None, Some(d)) => d,
            (None, None) => bail!(
                "input '{}' has dynamic shape {}; pass --shape {}=DIMS or --input {}=FILE.npy",
                v.name,
                v.shape.as_ref().map_or_else(|| "?".into(), |s| shape_string(s)),
                v.name,
                v.name
            ),
        };
        let t = random_tensor(v.dtype.unwrap_or(DType::F32), &dims, i as u64 + 1)?;
        feeds.insert(v.name.clone(), t);
    }
    let threads = threads.max(1);
    let exec = Executor::new(&model, threads)?;
    let runs = runs.max(1);
    // Straight from this thread: the executor runs on its own pool, and a second pool
    // around it would only add two more threads to wake and put to sleep on every run.
    for _ in 0..warmup {
        exec.run(&feeds)?;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        exec.run(&feeds)?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    if profile {
        let mut per_op: BTreeMap<String, (f64, usize)> = BTreeMap::new();
        let mut per_node: BTreeMap<usize, (f64, String)> = BTreeMap::new();
        let last = std::sync::Mutex::new(Instant::now());
        let mut hook = |id: usize, node: &npu_core::ir::Node, outs: &[Option<&Tensor>]| {
            let now = Instant::now();
            let ms = (now - *last.lock().unwrap_or_else(std::sync::PoisonError::into_inner)).as_secs_f64() * 1e3;
            let e = per_op.entry(node.op.clone()).or_default();
            e.0 += ms;
            e.1 += 1;
            let shape = outs
                .first()
                .copied()
                .flatten()
                .map(|t| format!("{:?}", t.shape()))
                .unwrap_or_default();
            let attrs: Vec<String> = ["kernel_shape", "strides", "group"]
                .iter()
                .filter_map(|a| node.attr(a).map(|v| format!("{a}={}", v.summary())))
                .collect();
            let entry = per_node.entry(id).or_insert_with(|| {
                (
                    0.0,
                    format!("{} {} -> {shape} {}", node.op, node.label(), attrs.join(" ")),
                )
            });
            entry.0 += ms;
            *last.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
        };
        // Averaged over as many runs as were timed.
        for _ in 0..runs {
            *last.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
            exec.run_with_hook(&feeds, Some(&mut hook))?;
        }
        let mut rows: Vec<_> = per_op.into_iter().collect();
        rows.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
        let per_run = runs as f64;
        eprintln!("time per op type (mean of {runs} runs):");
        for (op, (ms, n)) in rows {
            eprintln!("  {:9.2} ms  {:5}x  {op}", ms / per_run, n / runs);
        }
        let mut per_node: Vec<(f64, String)> = per_node.into_values().map(|(ms, what)| (ms / per_run, what)).collect();
        per_node.sort_by(|a, b| b.0.total_cmp(&a.0));
        eprintln!("slowest nodes:");
        for (ms, what) in per_node.iter().take(if std::env::var_os("NPU_PROFILE_ALL").is_some() {
            usize::MAX
        } else {
            15
        }) {
            eprintln!("  {ms:9.2} ms  {what}");
        }
    }
    report(path, times, warmup, threads, optimize, json)
}

/// Prints the timing of `times` (text, or one JSON line).
fn report(path: &Path, times: Vec<f64>, warmup: usize, threads: usize, optimize: bool, json: bool) -> Result<()> {
    let runs = times.len();
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let median = if sorted.len() % 2 == 1 {
        sorted[sorted.len() / 2]
    } else {
        f64::midpoint(sorted[sorted.len() / 2 - 1], sorted[sorted.len() / 2])
    };
    let r = BenchReport {
        model: path.display().to_string(),
        median_ms: median,
        min_ms: sorted[0],
        mean_ms: times.iter().sum::<f64>() / times.len() as f64,
        runs,
        warmup,
        threads,
        optimized: optimize,
        times_ms: times,
    };
    if json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{}: median {:.2} ms, min {:.2} ms, mean {:.2} ms ({} runs, {} warmup, {} threads{})",
            r.model,
            r.median_ms,
            r.min_ms,
            r.mean_ms,
            r.runs,
            r.warmup,
            r.threads,
            if r.optimized { ", optimized graph" } else { "" }
        );
    }
    Ok(())
}

/// `npu-studio bench FILE.npub`: the emulator's time per run of the binary (decoding and
/// checking it once, before the timed runs, as the FP32 bench imports its model once).
fn bench_binary(
    path: &Path,
    inputs: &[String],
    threads: usize,
    runs: usize,
    warmup: usize,
    json: bool,
    profile: bool,
) -> Result<()> {
    use npu_core::pipeline::Input;
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let e = npu_core::pipeline::load_binary(&bytes).with_context(|| format!("{}", path.display()))?;
    let feeds = parse_inputs(inputs)?;
    let ins = || -> Result<Vec<Input>> {
        e.binary
            .inputs
            .iter()
            .enumerate()
            .map(|(k, &i)| {
                let t = &e.binary.tensors[i].tensor;
                Ok(match feeds.get(&t.name) {
                    Some(x) => Input::Float(x.to_f32().iter().copied().collect()),
                    None => match random_tensor(DType::F32, &t.shape, k as u64 + 1)? {
                        Tensor::F32(a) => Input::Float(a.iter().copied().collect()),
                        _ => bail!("a random input"),
                    },
                })
            })
            .collect()
    };
    let threads = threads.max(1);
    let times = with_threads(threads, || -> Result<Vec<f64>> {
        for _ in 0..warmup {
            e.run(ins()?)?;
        }
        let mut times = Vec::with_capacity(runs.max(1));
        for _ in 0..runs.max(1) {
            let x = ins()?;
            let t0 = Instant::now();
            e.run(x)?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        if profile {
            // Per op type, the mean over as many runs as were timed.
            let mut per_op: BTreeMap<String, f64> = BTreeMap::new();
            let mut per_step = vec![0.0; e.binary.steps.len()];
            for _ in 0..runs.max(1) {
                let mut steps = Vec::new();
                e.run_timed(ins()?, Some(&mut steps))?;
                for (k, secs) in steps.iter().enumerate() {
                    per_step[k] += secs * 1e3;
                }
                for (s, secs) in e.binary.steps.iter().zip(steps) {
                    let (what, op) = match *s {
                        npu_core::compiler::lower::Step::Npu(k) => ("npu", &e.binary.commands[k].op),
                        npu_core::compiler::lower::Step::Host(h) => ("host", &e.binary.host[h]),
                    };
                    *per_op.entry(format!("{what} {}", op.kind.name())).or_default() += secs * 1e3;
                }
            }
            let mut rows: Vec<_> = per_op.into_iter().collect();
            rows.sort_by(|a, b| b.1.total_cmp(&a.1));
            eprintln!("time per op type (mean of {} runs):", runs.max(1));
            for (op, ms) in rows {
                eprintln!("  {:9.3} ms  {op}", ms / runs.max(1) as f64);
            }
            let mut slow: Vec<(usize, f64)> = per_step.into_iter().enumerate().collect();
            slow.sort_by(|a, b| b.1.total_cmp(&a.1));
            eprintln!("slowest steps:");
            for (k, ms) in slow.into_iter().take(12) {
                let op = match e.binary.steps[k] {
                    npu_core::compiler::lower::Step::Npu(c) => &e.binary.commands[c].op,
                    npu_core::compiler::lower::Step::Host(h) => &e.binary.host[h],
                };
                let shape = |t: usize| &e.binary.tensors[t].tensor.shape;
                eprintln!(
                    "  {:9.3} ms  {} {} {:?} -> {:?}",
                    ms / runs.max(1) as f64,
                    op.kind.name(),
                    op.node,
                    op.inputs.iter().map(|&t| shape(t)).collect::<Vec<_>>(),
                    shape(op.outputs[0])
                );
            }
        }
        Ok(times)
    })?;
    report(path, times, warmup, threads, false, json)
}
