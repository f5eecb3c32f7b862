//! Subcommands: `info`, `run`, `bench`, `bench-layout`, `optimize`, `quantize`, `analyze`, `simulate`, `bench-quant-edit`; no subcommand opens the studio. Their flags and JSON fields are a stable contract.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use ndarray::{ArrayD, IxDyn};
use npu_core::ir::{DType, Dim, Model, Tensor, shape_string};
use npu_core::sim::{Executor, with_threads};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "npu-studio",
    version,
    about = "Model-optimization studio for on-device AI",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Model to open (default: the bundled sample model).
    model: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

/// The bundled sample model: next to the working directory when run from the repository,
/// else where the source tree was at build time.
fn sample_model() -> PathBuf {
    let local = PathBuf::from("assets/models/sample_cnn.onnx");
    if local.exists() {
        return local;
    }
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/models/sample_cnn.onnx"))
}

#[derive(Subcommand)]
enum Command {
    /// Inputs, outputs, op histogram, parameters, MACs, opsets and producer of a model.
    Info {
        model: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Fix a dynamic input shape for MAC counting, e.g. `x=1x3x640x640`.
        #[arg(long = "shape", value_name = "NAME=DIMS")]
        shapes: Vec<String>,
        /// Also list every node: name, op, attributes, inputs and outputs with dtype and shape.
        #[arg(long)]
        nodes: bool,
    },
    /// Runs the model in FP32 and writes one `.npy` per output.
    Run {
        model: PathBuf,
        /// An input array: `NAME=FILE.npy` (repeat for each input).
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Folder for `<output name>.npy` files.
        #[arg(long, default_value = ".")]
        output_dir: PathBuf,
        /// Threads for the kernels (0 = all cores).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Also write every intermediate tensor into this folder (for debugging).
        #[arg(long, value_name = "DIR")]
        dump: Option<PathBuf>,
    },
    /// Times the graph view: layout, opening with collapsed scopes, expanding a scope and
    /// painting frames while panning, on synthetic DAGs and on the given model files.
    BenchLayout {
        models: Vec<PathBuf>,
        /// Sizes of synthetic DAGs to time (comma-separated; 0 for none).
        #[arg(long, value_delimiter = ',', default_value = "10000,50000")]
        synthetic: Vec<usize>,
        #[arg(long)]
        json: bool,
    },
    /// Times precision edits in the studio's quantization view, headless: calibrates on
    /// DATA, then changes one layer's precision at a time and measures the time from the
    /// change to the updated heatmap (incremental re-simulation and overlay colours).
    BenchQuantEdit {
        model: PathBuf,
        #[arg(long, value_name = "PATH")]
        data: String,
        #[arg(long, value_name = "SPEC", default_value = "")]
        preprocess: String,
        #[arg(long, default_value = "w8a8")]
        preset: String,
        #[arg(long, default_value_t = 30)]
        edits: usize,
        #[arg(long)]
        json: bool,
    },
    /// Runs the graph-optimization passes to a fixed point and writes the result as ONNX.
    ///
    /// Passes (in the order they run each round): fold-constants, dead-code, cse,
    /// remove-noops, merge-reshape-transpose, fold-batchnorm, fold-bias, normalize-gemm,
    /// recognize-patterns, fuse-activation, pool-rewrite.
    Optimize {
        model: PathBuf,
        /// The optimized model (ONNX), written atomically.
        #[arg(long)]
        out: PathBuf,
        /// Only these passes (comma-separated; default: all).
        #[arg(long, value_delimiter = ',')]
        passes: Vec<String>,
        /// Write the pass log (one entry per applied rewrite) as JSON.
        #[arg(long, value_name = "FILE.json")]
        log: Option<PathBuf>,
        /// Print the summary as JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Measures FP32 latency: median and min over `--runs` runs after `--warmup` runs.
    Bench {
        model: PathBuf,
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Shape for a random input with dynamic dims, e.g. `x=1x3x640x640`.
        #[arg(long = "shape", value_name = "NAME=DIMS")]
        shapes: Vec<String>,
        #[arg(long, default_value_t = 1)]
        threads: usize,
        #[arg(long, default_value_t = 10)]
        runs: usize,
        #[arg(long, default_value_t = 2)]
        warmup: usize,
        #[arg(long)]
        json: bool,
        /// Also print the time spent per op type (one extra run).
        #[arg(long)]
        profile: bool,
        /// Run the graph-optimization passes first (onnxruntime optimizes its graph by
        /// default too); the time they take is not counted.
        #[arg(long)]
        optimize: bool,
    },
    /// Calibrates a quantization plan (on the optimized graph) and, with `--eval`, simulates it
    /// with fake quantization and reports per-tensor and per-output SQNR against FP32.
    Quantize {
        model: PathBuf,
        /// Calibration data: a folder of .npy/.npz/.png/.jpg files, one file, or `synthetic:N`.
        #[arg(long, value_name = "PATH")]
        calib: String,
        /// How images become inputs: `size=HxW;resize=stretch|letterbox|pad-right|center-crop;color=rgb|bgr;scale=1/255;mean=a,b,c;std=a,b,c;layout=nchw|nhwc;dtype=f32|u8|i8`.
        #[arg(long, value_name = "SPEC")]
        preprocess: Option<String>,
        /// Built-in recipe: w8a8, w8a16, w4a16, fp16.
        #[arg(long, default_value = "w8a8", conflicts_with = "recipe")]
        preset: String,
        /// A recipe (RON): a preset, ordered rules by node-name regex and/or op type (later
        /// rules win), per-node overrides.
        #[arg(long, value_name = "FILE.ron")]
        recipe: Option<PathBuf>,
        /// Calibration method (default: the preset's): minmax, moving-average, percentile[-P], mse, entropy.
        #[arg(long, value_name = "METHOD")]
        calibration: Option<String>,
        /// Evaluation data (same forms as --calib): simulate the plan and report its error.
        #[arg(long, value_name = "PATH")]
        eval: Option<String>,
        /// The plan (RON), written atomically.
        #[arg(long, value_name = "PLAN.ron")]
        out: PathBuf,
        /// The error report (JSON): `outputs`, `tensors`.
        #[arg(long, value_name = "FILE.json")]
        report: Option<PathBuf>,
        /// The per-tensor error table as CSV.
        #[arg(long, value_name = "FILE.csv")]
        csv: Option<PathBuf>,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// Skip the empirical bias correction (a second pass over the calibration data).
        #[arg(long)]
        no_bias_correction: bool,
        /// Automatic mixed precision: promote the fewest layers needed to reach this output
        /// SQNR (dB) on the calibration set; prints the curve.
        #[arg(long, value_name = "DB")]
        target_sqnr: Option<f64>,
        /// What --target-sqnr promotes layers to: int16, fp16 or float.
        #[arg(long, default_value = "int16")]
        promote_to: String,
    },
    /// Simulates a plan and analyses it: weight-only vs activation-only error, per-layer
    /// sweeps ranked, histograms with clipping ranges; one JSON report.
    Analyze {
        model: PathBuf,
        #[arg(long, value_name = "PLAN.ron")]
        plan: PathBuf,
        #[arg(long, value_name = "PATH")]
        eval: String,
        #[arg(long, value_name = "SPEC")]
        preprocess: Option<String>,
        #[arg(long, value_name = "FILE.json")]
        report: PathBuf,
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// Simulates a plan with fake quantization on evaluation data and reports per-tensor and
    /// per-output SQNR against FP32 (no sweeps: the quick form of `analyze`).
    Simulate {
        model: PathBuf,
        #[arg(long, value_name = "PLAN.ron")]
        plan: PathBuf,
        #[arg(long, value_name = "PATH")]
        eval: String,
        #[arg(long, value_name = "SPEC")]
        preprocess: Option<String>,
        #[arg(long, value_name = "FILE.json")]
        report: Option<PathBuf>,
        #[arg(long, value_name = "FILE.csv")]
        csv: Option<PathBuf>,
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
}

pub fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        None => crate::studio::run(Some(cli.model.unwrap_or_else(sample_model))),
        Some(Command::Info {
            model,
            json,
            shapes,
            nodes,
        }) => info(&model, json, nodes, &shapes),
        Some(Command::Run {
            model,
            inputs,
            output_dir,
            threads,
            dump,
        }) => run(&model, &inputs, &output_dir, threads, dump.as_deref()),
        Some(Command::BenchLayout {
            models,
            synthetic,
            json,
        }) => bench_layout(&models, &synthetic, json),
        Some(Command::BenchQuantEdit {
            model,
            data,
            preprocess,
            preset,
            edits,
            json,
        }) => bench_quant_edit(&model, data, preprocess, preset, edits, json),
        Some(Command::Optimize {
            model,
            out,
            passes,
            log,
            json,
        }) => optimize(&model, &out, &passes, log.as_deref(), json),
        Some(Command::Bench {
            model,
            inputs,
            shapes,
            threads,
            runs,
            warmup,
            json,
            profile,
            optimize,
        }) => bench(&model, &inputs, &shapes, threads, runs, warmup, json, profile, optimize),
        Some(Command::Quantize {
            model,
            calib,
            preprocess,
            preset,
            recipe,
            calibration,
            eval,
            out,
            report,
            csv,
            threads,
            no_bias_correction,
            target_sqnr,
            promote_to,
        }) => crate::cli_quant::quantize(&crate::cli_quant::QuantizeArgs {
            model: &model,
            calib: &calib,
            preprocess: preprocess.as_deref(),
            preset: &preset,
            recipe: recipe.as_deref(),
            method: calibration.as_deref(),
            eval: eval.as_deref(),
            out: &out,
            report: report.as_deref(),
            csv: csv.as_deref(),
            threads,
            no_bias_correction,
            target_sqnr,
            promote_to: &promote_to,
        }),
        Some(Command::Analyze {
            model,
            plan,
            eval,
            preprocess,
            report,
            threads,
        }) => crate::cli_quant::analyze(&model, &plan, &eval, preprocess.as_deref(), &report, threads),
        Some(Command::Simulate {
            model,
            plan,
            eval,
            preprocess,
            report,
            csv,
            threads,
        }) => crate::cli_quant::simulate_plan(
            &model,
            &plan,
            &eval,
            preprocess.as_deref(),
            report.as_deref(),
            csv.as_deref(),
            threads,
        ),
    }
}

/// What `optimize` reports (printed with `--json`, and the head of the `--log` file).
#[derive(Serialize)]
struct OptimizeSummary {
    model: String,
    out: String,
    passes: Vec<String>,
    rounds: usize,
    converged: bool,
    steps: usize,
    nodes_before: usize,
    nodes_after: usize,
    ops_before: BTreeMap<String, usize>,
    ops_after: BTreeMap<String, usize>,
    /// Applied rewrites per `pass/rule`.
    rewrites: BTreeMap<String, usize>,
}

fn optimize(path: &Path, out: &Path, passes: &[String], log: Option<&Path>, json: bool) -> Result<()> {
    use npu_core::passes;
    let model = load(path)?;
    let selected = if passes.is_empty() {
        passes::all_passes()
    } else {
        passes::select(passes).map_err(anyhow::Error::msg)?
    };
    let names: Vec<String> = selected.iter().map(|p| p.name().to_owned()).collect();
    let opts = passes::Options {
        passes: selected,
        ..passes::Options::default()
    };
    let result = passes::optimize(&model, &opts).with_context(|| format!("optimizing {}", path.display()))?;
    result
        .model
        .validate()
        .with_context(|| format!("the optimized graph of {} is invalid", path.display()))?;
    npu_core::export::onnx::save(&result.model, out)?;
    let mut rewrites = BTreeMap::new();
    for e in &result.log {
        *rewrites.entry(format!("{}/{}", e.pass, e.rule)).or_insert(0) += 1;
    }
    let summary = OptimizeSummary {
        model: path.display().to_string(),
        out: out.display().to_string(),
        passes: names,
        rounds: result.rounds,
        converged: result.converged,
        steps: result.patches.len(),
        nodes_before: model.graph.nodes.len(),
        nodes_after: result.model.graph.nodes.len(),
        ops_before: passes::op_counts(&model),
        ops_after: passes::op_counts(&result.model),
        rewrites,
    };
    if let Some(log_path) = log {
        #[derive(Serialize)]
        struct LogFile<'a> {
            #[serde(flatten)]
            summary: &'a OptimizeSummary,
            log: &'a [passes::LogEntry],
        }
        let text = serde_json::to_string_pretty(&LogFile {
            summary: &summary,
            log: &result.log,
        })?;
        npu_core::export::write_atomic(log_path, text.as_bytes())?;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    println!(
        "{}: {} nodes → {} nodes in {} rewrites, {} rounds{}",
        path.display(),
        summary.nodes_before,
        summary.nodes_after,
        summary.steps,
        summary.rounds,
        if summary.converged {
            ""
        } else {
            " (round limit reached)"
        }
    );
    let ops: std::collections::BTreeSet<&String> = summary.ops_before.keys().chain(summary.ops_after.keys()).collect();
    println!("  {:<30} {:>7} {:>7}", "op", "before", "after");
    for op in ops {
        let (b, a) = (
            summary.ops_before.get(op).copied().unwrap_or(0),
            summary.ops_after.get(op).copied().unwrap_or(0),
        );
        if b != a {
            println!("  {op:<30} {b:>7} {a:>7}");
        }
    }
    println!("  rewrites:");
    for (rule, n) in &summary.rewrites {
        println!("  {rule:<40} {n:>6}");
    }
    println!("wrote {}", out.display());
    Ok(())
}

fn load(path: &Path) -> Result<Model> {
    let (model, report) = npu_core::import::load(path)?;
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    Ok(model)
}

/// Parses `NAME=1x3x640x640`.
fn parse_shape(spec: &str) -> Result<(String, Vec<usize>)> {
    let (name, dims) = spec
        .split_once('=')
        .with_context(|| format!("'{spec}' is not NAME=DIMS"))?;
    let dims = dims
        .split(['x', ','])
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .with_context(|| format!("bad dimension '{d}' in '{spec}'"))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((name.to_owned(), dims))
}

/// Fixes dynamic input dims and re-runs shape inference.
fn fix_shapes(model: &mut Model, shapes: &HashMap<String, Vec<usize>>) -> Result<()> {
    for &i in &model.graph.inputs {
        let v = &mut model.graph.values[i];
        if let Some(dims) = shapes.get(&v.name) {
            v.shape = Some(dims.iter().map(|&d| Dim::Fixed(d)).collect());
        }
    }
    for name in shapes.keys() {
        if !model.graph.inputs.iter().any(|&i| &model.graph.values[i].name == name) {
            bail!("the model has no input named '{name}'");
        }
    }
    for v in &mut model.graph.values {
        if v.producer.is_some() {
            v.shape = None;
        }
    }
    let mut report = npu_core::import::ImportReport::default();
    npu_core::import::shapes::infer(model, &mut report);
    Ok(())
}

fn info(path: &Path, json: bool, nodes: bool, shapes: &[String]) -> Result<()> {
    let mut model = load(path)?;
    if !shapes.is_empty() {
        let m: HashMap<String, Vec<usize>> = shapes.iter().map(|s| parse_shape(s)).collect::<Result<_>>()?;
        fix_shapes(&mut model, &m)?;
    }
    let r = crate::info::model_info(&model, path, nodes);
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!("{}", r.file);
    println!("  producer    {} {}", r.producer, r.producer_version);
    println!("  IR version  {}", r.ir_version);
    println!(
        "  opsets      {}",
        r.opsets
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (label, list) in [("input ", &r.inputs), ("output", &r.outputs)] {
        for io in list {
            println!("  {label}      {} {} [{}]", io.name, io.dtype, io.shape.join("x"));
        }
    }
    println!("  nodes       {}", r.nodes);
    println!(
        "  parameters  {} ({:.2} MB)",
        r.parameters,
        r.parameter_bytes as f64 / 1e6
    );
    println!(
        "  MACs        {:.3} G{}",
        r.macs as f64 / 1e9,
        if r.macs_partial {
            " (lower bound: some shapes are dynamic; pass --shape)"
        } else {
            ""
        }
    );
    println!("  ops:");
    for (op, n) in model.op_histogram() {
        println!("    {n:6}  {op}");
    }
    if let Some(details) = &r.node_details {
        let io = |l: &[crate::info::IoInfo]| {
            l.iter()
                .map(|t| format!("{} {}[{}]", t.name, t.dtype, t.shape.join("x")))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!("  nodes:");
        for n in details {
            println!(
                "    {} ({})  in: {}  out: {}",
                n.name,
                n.op,
                io(&n.inputs),
                io(&n.outputs)
            );
        }
    }
    Ok(())
}

fn bench_layout(models: &[PathBuf], synthetic: &[usize], json: bool) -> Result<()> {
    use crate::bench_layout as bl;
    let mut all = Vec::new();
    for &n in synthetic.iter().filter(|&&n| n > 0) {
        let b = bl::synthetic(n);
        if !json {
            bl::print(&b);
        }
        all.push(b);
    }
    for path in models {
        let t = Instant::now();
        let opts = npu_core::import::onnx::LoadOptions {
            allow_unsupported: true,
        };
        let (model, _) = npu_core::import::onnx::load_with(path, &opts)?;
        let import_ms = t.elapsed().as_secs_f64() * 1e3;
        let b = bl::bench_model(&path.display().to_string(), &model, Some(import_ms));
        if !json {
            bl::print(&b);
        }
        all.push(b);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&all)?);
    }
    Ok(())
}

/// Reads an `.npy` file of any supported dtype.
fn read_npy(path: &Path) -> Result<Tensor> {
    use ndarray_npy::ReadNpyExt;
    let open = || std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()));
    macro_rules! try_type {
        ($t:ty, $v:ident) => {
            if let Ok(a) = ArrayD::<$t>::read_npy(open()?) {
                return Ok(Tensor::$v(a));
            }
        };
    }
    try_type!(f32, F32);
    try_type!(f64, F64);
    try_type!(i64, I64);
    try_type!(i32, I32);
    try_type!(u8, U8);
    try_type!(i8, I8);
    try_type!(i16, I16);
    try_type!(u16, U16);
    try_type!(bool, Bool);
    bail!(
        "{}: not an .npy file of a supported dtype (f32, f64, i64, i32, u8, i8, i16, u16, bool)",
        path.display()
    )
}

fn write_npy(path: &Path, t: &Tensor) -> Result<()> {
    use ndarray_npy::WriteNpyExt;
    let tmp = path.with_extension("npy.tmp");
    let file = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let w = std::io::BufWriter::new(file);
    match t {
        Tensor::F32(a) => a.write_npy(w)?,
        Tensor::F64(a) => a.write_npy(w)?,
        Tensor::I64(a) => a.write_npy(w)?,
        Tensor::I32(a) => a.write_npy(w)?,
        Tensor::I8(a) => a.write_npy(w)?,
        Tensor::U8(a) => a.write_npy(w)?,
        Tensor::I16(a) => a.write_npy(w)?,
        Tensor::U16(a) => a.write_npy(w)?,
        Tensor::Bool(a) => a.write_npy(w)?,
        other => other.to_f32().write_npy(w)?,
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

fn parse_inputs(specs: &[String]) -> Result<HashMap<String, Tensor>> {
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
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn run(path: &Path, inputs: &[String], out_dir: &Path, threads: usize, dump: Option<&Path>) -> Result<()> {
    let model = load(path)?;
    let feeds = parse_inputs(inputs)?;
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

fn bench(
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
    let mut model = load(path)?;
    if optimize {
        model = npu_core::passes::optimize(&model, &npu_core::passes::Options::default())
            .with_context(|| format!("optimizing {}", path.display()))?
            .model;
    }
    let mut feeds = parse_inputs(inputs)?;
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
    let times = with_threads(threads, || -> Result<Vec<f64>> {
        for _ in 0..warmup {
            exec.run(&feeds)?;
        }
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t0 = Instant::now();
            exec.run(&feeds)?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        Ok(times)
    })?;
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
        times_ms: times.clone(),
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

fn bench_quant_edit(
    model: &Path,
    data: String,
    preprocess: String,
    preset: String,
    edits: usize,
    json: bool,
) -> Result<()> {
    let (m, _) = npu_core::import::load(model)?;
    let setup = crate::studio::quantize::Setup {
        data,
        preprocess,
        preset,
    };
    let r = crate::studio::quantize::bench_edits(std::sync::Arc::new(m), &model.display().to_string(), setup, edits)
        .map_err(anyhow::Error::msg)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "{}: {} samples; first heatmap after {:.2} s; {} edits: change → heatmap median {:.1} ms, max {:.1} ms; node runs per edit median {} of {} for a full simulation",
            r.model,
            r.samples,
            r.first_heatmap_s,
            r.edit_ms.len(),
            r.median_ms,
            r.max_ms,
            {
                let mut n = r.node_runs.clone();
                n.sort_unstable();
                n.get(n.len() / 2).copied().unwrap_or(0)
            },
            r.full_node_runs
        );
    }
    Ok(())
}
