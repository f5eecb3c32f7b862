//! Subcommands: `info`, `run`, `bench`, `bench-layout`, `optimize`, `quantize`, `analyze`,
//! `simulate`, `export`, `targets`, `compile`, `bench-quant-edit`; no subcommand opens the studio. Their flags and JSON
//! fields are a stable contract.

mod benches;
mod compile;
mod inspect;
mod integer;
mod optimize;
pub mod progress;
mod quant;
mod report;
mod run;

use anyhow::Result;
use clap::{Parser, Subcommand};
use npu_core::ir::Model;
use std::path::{Path, PathBuf};

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
    /// Inputs, outputs, op histogram, parameters, MACs, opsets and producer of a model;
    /// for a compiled binary (.npub): header, sections, commands per unit, segments.
    Info {
        model: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Fix a dynamic input shape for MAC counting, e.g. `x=1x3x640x640`.
        #[arg(long = "shape", value_name = "NAME=DIMS")]
        shapes: Vec<String>,
        /// Also list every node: name, op, attributes, inputs and outputs with dtype and
        /// shape (for a binary: every command and the graph nodes it runs).
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
        /// Run a quantization plan with integer arithmetic (LiteRT's reference kernels):
        /// an integer input array is taken as codes on the input's grid, a float one is
        /// quantized as TFLite's QUANTIZE does; each output is written as its codes with
        /// `<name>.quant.json` (scale, zero_point, axis).
        #[arg(long, value_name = "PLAN.ron")]
        plan: Option<PathBuf>,
        /// With --plan: write outputs as float32 instead of codes.
        #[arg(long, requires = "plan")]
        dequantize: bool,
    },
    /// Exports a quantization plan as a deployable model: `--format tflite` writes a fully
    /// quantized int8 TFLite file (NHWC, per-channel weights, a serving_default signature);
    /// `--format onnx-qdq` the optimized graph with QuantizeLinear/DequantizeLinear pairs;
    /// `--format report` a self-contained HTML report measured on `--eval` (model, recipe,
    /// per-layer SQNR, plots, graph heatmap; placement and latency with `--target`), with
    /// FILE.json and FILE.csv beside it.
    Export {
        model: PathBuf,
        #[arg(long, value_name = "PLAN.ron")]
        plan: PathBuf,
        /// tflite, onnx-qdq or report.
        #[arg(long, default_value = "tflite")]
        format: String,
        /// Report: the evaluation data (a folder of .npy/.npz/images, or one file).
        #[arg(long, value_name = "PATH")]
        eval: Option<String>,
        /// Report: how images become inputs (as `quantize --preprocess`).
        #[arg(long, value_name = "SPEC", default_value = "")]
        preprocess: String,
        /// Report: add the placement and latency tables for this NPU target (an id or a .ron).
        #[arg(long, value_name = "TARGET")]
        target: Option<String>,
        /// Report: add the mixed-precision curve up to this output SQNR (searched on --calib).
        #[arg(long, value_name = "DB", requires = "calib")]
        target_sqnr: Option<f64>,
        /// Report: the calibration data the mixed-precision search runs on.
        #[arg(long, value_name = "PATH")]
        calib: Option<String>,
        /// Report: what the mixed-precision search promotes layers to.
        #[arg(long, default_value = "int16")]
        promote_to: String,
        /// Report: leave out the per-layer sensitivity sweeps (two simulations per layer).
        #[arg(long)]
        no_sensitivity: bool,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// The file, written atomically.
        #[arg(long)]
        out: PathBuf,
        /// Model inputs and outputs: int8 codes, or float32 behind QUANTIZE/DEQUANTIZE.
        #[arg(long, default_value = "int8")]
        io: String,
        /// Fix an input shape (default: the plan's calibration shape), e.g. `x=1x3x48x192`.
        #[arg(long = "shape", value_name = "NAME=DIMS")]
        shapes: Vec<String>,
    },
    /// Lists the NPU targets (`plugins/targets/*.ron`): id, MAC rates, clock, SRAM,
    /// bandwidths, host CPU and the ops each runs on the NPU.
    Targets {
        #[arg(long)]
        json: bool,
        /// Print the supported-ops document (docs/supported-ops.md) instead.
        #[arg(long, conflicts_with = "json")]
        markdown: bool,
    },
    /// Partitions a plan's integer program between a target's NPU and its host CPU and
    /// estimates its cost: placement and reason per op, segments, SRAM peak, per-layer
    /// cycles (compute against memory), latency with the CPU segments, energy.
    Compile {
        model: PathBuf,
        /// The quantization plan; optional for a quantized TFLite file, whose own integer
        /// program (scales, zero points, codes) is compiled as it is.
        #[arg(long, value_name = "PLAN.ron")]
        plan: Option<PathBuf>,
        /// A target id (`npu-studio targets`) or a target file (.ron).
        #[arg(long, default_value = "ethos-u55-128")]
        target: String,
        /// Fix an input shape (default: the plan's calibration shape), e.g. `x=1x3x48x192`.
        #[arg(long = "shape", value_name = "NAME=DIMS")]
        shapes: Vec<String>,
        /// Keep this graph node on the CPU (repeat).
        #[arg(long = "force-cpu", value_name = "NODE")]
        force_cpu: Vec<String>,
        /// The whole result as JSON (`placements`, `segments`, `boundaries`, `layers`,
        /// `memory`, `totals`), written atomically.
        #[arg(long, value_name = "FILE.json")]
        report: Option<PathBuf>,
        /// The per-layer table as CSV.
        #[arg(long, value_name = "FILE.csv")]
        csv: Option<PathBuf>,
        /// Write the deployable binary (docs/binary-format.md), atomically.
        #[arg(long, value_name = "FILE.npub")]
        out: Option<PathBuf>,
        /// Print the report as JSON instead of the summary.
        #[arg(long)]
        json: bool,
    },
    /// Runs a compiled binary (.npub) from its bytes: NPU commands with the target's integer
    /// arithmetic, host ops for the CPU segments; outputs as `run --plan` writes them.
    Emulate {
        binary: PathBuf,
        /// An input as NAME=FILE.npy (float32 is quantized on the input's grid; integer
        /// arrays are codes).
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        #[arg(long, default_value = ".")]
        output_dir: PathBuf,
        /// Write float32 outputs instead of codes.
        #[arg(long)]
        dequantize: bool,
        /// Write every computed tensor's codes into this folder (and, with --model and
        /// --plan, `trace.json`: every tensor compared).
        #[arg(long, value_name = "DIR")]
        trace: Option<PathBuf>,
        /// Print a JSON report (outputs, timing; with --model and --plan every tensor).
        #[arg(long)]
        json: bool,
        /// The model the binary was compiled from: compare every tensor with its FP32 run,
        /// the fake-quant simulation of --plan and the integer reference.
        #[arg(long, value_name = "MODEL", requires = "plan")]
        model: Option<PathBuf>,
        #[arg(long, value_name = "PLAN.ron", requires = "model")]
        plan: Option<PathBuf>,
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
        /// Cross-layer equalization before calibration: conv pairs with a Relu (or none)
        /// between them get equal per-channel weight ranges (same as `equalize: true` in a
        /// recipe).
        #[arg(long)]
        equalize: bool,
        /// Bias absorption: move a per-channel constant from a conv's output into the next
        /// conv's bias (after a Relu, at most the channel's calibrated minimum; with nothing
        /// between, as far as it must to fit a grid centred on zero), narrowing the
        /// activation grid between them; kept only when it wins on held-back calibration
        /// samples (same as `absorb_bias: true` in a recipe).
        #[arg(long)]
        absorb_bias: bool,
        /// Choose each activation's clipping range by the output SQNR it gives (tried
        /// narrower and wider, in graph order), kept only when it wins on held-back
        /// calibration samples (same as `refine_ranges: true` in a recipe).
        #[arg(long)]
        refine_ranges: bool,
        /// SeqMSE: choose each output channel's weight range (max-abs or narrower) by the
        /// squared error of the layer's output on the calibration samples, kept only when it
        /// wins on held-back calibration samples (same as `seq_mse: true` in a recipe).
        #[arg(long)]
        seq_mse: bool,
        /// SmoothQuant: divide each LayerNorm's output channels by s and multiply the rows
        /// of the MatMul/Gemm weights that read them by s (s = sqrt(activation max / weight
        /// max)), kept only when it wins on held-back calibration samples (same as
        /// `smooth_quant: true` in a recipe).
        #[arg(long)]
        smooth_quant: bool,
        /// GPTQ: choose the int4/int8 weight codes of MatMul, Gemm and 1×1 conv layers
        /// against their calibration inputs, each rounding error moved onto the weights not
        /// yet rounded; kept only when it wins on held-back calibration samples
        /// (same as `gptq: true` in a recipe).
        #[arg(long)]
        gptq: bool,
        /// Automatic mixed precision: promote the fewest layers needed to reach this output
        /// SQNR (dB) on the calibration set; prints the curve.
        #[arg(long, value_name = "DB")]
        target_sqnr: Option<f64>,
        /// What --target-sqnr promotes layers to: int16, fp16 or float.
        #[arg(long, default_value = "int16")]
        promote_to: String,
        /// Weigh --target-sqnr's promotions by the estimated latency on this NPU target
        /// (an id or a .ron file): layers in order of SQNR gained per microsecond, each
        /// point of the curve with its latency.
        #[arg(long, value_name = "TARGET", requires = "target_sqnr")]
        cost_target: Option<String>,
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
        }) => inspect::info(&model, json, nodes, &shapes),
        Some(Command::Run {
            model,
            inputs,
            output_dir,
            threads,
            dump,
            plan,
            dequantize,
        }) => match plan {
            Some(plan) => integer::run(&model, &plan, &inputs, &output_dir, dequantize, dump.as_deref()),
            None => integer::run_file_program(&model, &inputs, &output_dir, dequantize, dump.as_deref())
                .unwrap_or_else(|| run::run(&model, &inputs, &output_dir, threads, dump.as_deref())),
        },
        Some(Command::Export {
            model,
            plan,
            format,
            out,
            io: _,
            shapes,
            eval,
            preprocess,
            target,
            target_sqnr,
            calib,
            promote_to,
            no_sensitivity,
            threads,
        }) if format == "report" => {
            let shapes: std::collections::HashMap<String, Vec<usize>> =
                shapes.iter().map(|s| run::parse_shape(s)).collect::<Result<_>>()?;
            report::report(&report::ReportArgs {
                model: &model,
                plan: &plan,
                out: &out,
                eval: eval.as_deref(),
                calib: calib.as_deref(),
                preprocess: &preprocess,
                target: target.as_deref(),
                target_sqnr,
                promote_to: &promote_to,
                shapes: &shapes,
                threads,
                no_sensitivity,
            })
        }
        Some(Command::Export {
            model,
            plan,
            format,
            out,
            io,
            shapes,
            ..
        }) => integer::export(&model, &plan, &format, &out, &io, &shapes),
        Some(Command::Targets { json, markdown }) => compile::targets(json, markdown),
        Some(Command::Compile {
            model,
            plan,
            target,
            shapes,
            force_cpu,
            report,
            csv,
            out,
            json,
        }) => compile::compile(&compile::CompileArgs {
            model: &model,
            plan: plan.as_deref(),
            target: &target,
            shapes: &shapes,
            force_cpu: &force_cpu,
            report: report.as_deref(),
            csv: csv.as_deref(),
            out: out.as_deref(),
            json,
        }),
        Some(Command::Emulate {
            binary,
            inputs,
            output_dir,
            dequantize,
            trace,
            json,
            model,
            plan,
        }) => integer::emulate(&integer::EmulateArgs {
            file: &binary,
            inputs: &inputs,
            out_dir: &output_dir,
            dequantize,
            trace: trace.as_deref(),
            json,
            model: model.as_deref(),
            plan: plan.as_deref(),
        }),
        Some(Command::BenchLayout {
            models,
            synthetic,
            json,
        }) => benches::bench_layout(&models, &synthetic, json),
        Some(Command::BenchQuantEdit {
            model,
            data,
            preprocess,
            preset,
            edits,
            json,
        }) => benches::bench_quant_edit(&model, data, preprocess, preset, edits, json),
        Some(Command::Optimize {
            model,
            out,
            passes,
            log,
            json,
        }) => optimize::optimize(&model, &out, &passes, log.as_deref(), json),
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
        }) => run::bench(&model, &inputs, &shapes, threads, runs, warmup, json, profile, optimize),
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
            equalize,
            absorb_bias,
            refine_ranges,
            seq_mse,
            smooth_quant,
            gptq,
            target_sqnr,
            promote_to,
            cost_target,
        }) => quant::quantize(&quant::QuantizeArgs {
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
            equalize,
            absorb_bias,
            refine_ranges,
            seq_mse,
            smooth_quant,
            gptq,
            target_sqnr,
            promote_to: &promote_to,
            cost_target: cost_target.as_deref(),
        }),
        Some(Command::Analyze {
            model,
            plan,
            eval,
            preprocess,
            report,
            threads,
        }) => quant::analyze(&model, &plan, &eval, preprocess.as_deref(), &report, threads),
        Some(Command::Simulate {
            model,
            plan,
            eval,
            preprocess,
            report,
            csv,
            threads,
        }) => quant::simulate_plan(
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

/// Imports a model for a command; the importer's warnings go to stderr.
fn load(path: &Path) -> Result<Model> {
    let npu_core::pipeline::Imported { model, report } = npu_core::pipeline::import(
        path,
        &npu_core::import::LoadOptions::default(),
        &npu_core::progress::Silent,
    )?;
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    Ok(model)
}
