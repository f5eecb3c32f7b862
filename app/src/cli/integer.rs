//! `npu-studio run --plan` (the integer reference execution of a plan) and `export`
//! (TFLite int8).

use super::run::{parse_inputs, sanitize, write_npy};
use anyhow::{Context, Result, bail};
use ndarray::{ArrayD, IxDyn};
use npu_core::ir::Tensor;
use npu_core::pipeline;
use npu_core::pipeline::Input;
use npu_core::program::{ITensor, IntType, Program};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// `<name>.quant.json`: the grid an integer output's codes lie on.
#[derive(Serialize)]
struct QuantJson {
    scale: Vec<f32>,
    zero_point: Vec<i32>,
    axis: Option<usize>,
    dtype: &'static str,
}

fn codes_tensor(t: &ITensor, codes: &[i32]) -> Result<Tensor> {
    let shape = IxDyn(&t.shape);
    Ok(match t.q.ty {
        IntType::I8 | IntType::I4 => {
            Tensor::I8(ArrayD::from_shape_vec(shape, codes.iter().map(|&v| v as i8).collect())?)
        }
        IntType::I16 => Tensor::I16(ArrayD::from_shape_vec(
            shape,
            codes.iter().map(|&v| v as i16).collect(),
        )?),
        IntType::I32 | IntType::Index => Tensor::I32(ArrayD::from_shape_vec(shape, codes.to_vec())?),
        IntType::I64 => Tensor::I64(ArrayD::from_shape_vec(
            shape,
            codes.iter().map(|&v| i64::from(v)).collect(),
        )?),
        IntType::F32 => Tensor::F32(ArrayD::from_shape_vec(
            shape,
            codes.iter().map(|&v| f32::from_bits(v as u32)).collect(),
        )?),
        IntType::Bool => Tensor::Bool(ArrayD::from_shape_vec(shape, codes.iter().map(|&v| v != 0).collect())?),
    })
}

fn dequantized(t: &ITensor, codes: &[i32]) -> Result<Tensor> {
    Ok(Tensor::F32(ArrayD::from_shape_vec(
        IxDyn(&t.shape),
        codes.iter().map(|&c| t.q.real(c)).collect(),
    )?))
}

fn write_codes(dir: &Path, t: &ITensor, codes: &[i32], dequantize: bool) -> Result<std::path::PathBuf> {
    let file = dir.join(format!("{}.npy", sanitize(&t.name)));
    if dequantize {
        write_npy(&file, &dequantized(t, codes)?)?;
    } else {
        write_npy(&file, &codes_tensor(t, codes)?)?;
        let json = serde_json::to_vec_pretty(&QuantJson {
            scale: t.q.scale.clone(),
            zero_point: t.q.zero_point.clone(),
            axis: t.q.axis,
            dtype: t.q.ty.name(),
        })?;
        npu_core::export::write_atomic(&dir.join(format!("{}.quant.json", sanitize(&t.name))), &json)?;
    }
    Ok(file)
}

/// One input per program input, by name: floats (quantized on the input's grid by the
/// run) or integer codes; a missing one is an error naming `file`.
fn integer_inputs<'a>(
    feeds: &HashMap<String, Tensor>,
    inputs: impl Iterator<Item = &'a ITensor>,
    file: &Path,
) -> Result<Vec<Input>> {
    let mut ins = Vec::new();
    for t in inputs {
        let Some(x) = feeds.get(&t.name) else {
            bail!(
                "{}: input '{}' needs a value (--input {}=FILE.npy)",
                file.display(),
                t.name,
                t.name
            );
        };
        ins.push(as_input(x, t).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?);
    }
    Ok(ins)
}

/// One array as the program input `t` takes it: floats (quantized on entry) or integer
/// codes; its shape must be the input's.
fn as_input(x: &Tensor, t: &ITensor) -> std::result::Result<Input, String> {
    if x.shape() != t.shape.as_slice() {
        return Err(format!(
            "input '{}' has shape {:?}; the program takes {:?}",
            t.name,
            x.shape(),
            t.shape
        ));
    }
    Ok(match x {
        Tensor::F32(_) | Tensor::F64(_) | Tensor::F16(_) | Tensor::BF16(_) => {
            Input::Float(x.to_f32().iter().copied().collect())
        }
        x => Input::Codes(
            x.to_i64()
                .ok_or_else(|| format!("input '{}': not an integer array", t.name))?
                .iter()
                .map(|&v| v as i32)
                .collect(),
        ),
    })
}

/// Legalizes the plan on the model's optimized graph at the inputs' shapes.
fn program(model: &Path, plan: &Path, shapes: &HashMap<String, Vec<usize>>) -> Result<Program> {
    let (plan, optimized) = super::quant::plan_inputs(model, plan)?;
    check_input_shapes(model, &optimized, shapes)?;
    let p = pipeline::legalize(&optimized, &plan, shapes).with_context(|| format!("legalizing {}", model.display()))?;
    warn_fallbacks(&p);
    Ok(p)
}

/// Every given input's shape against the model's: the same rank, and every fixed dimension
/// equal (symbolic ones take any size).
fn check_input_shapes(model: &Path, m: &npu_core::ir::Model, shapes: &HashMap<String, Vec<usize>>) -> Result<()> {
    use npu_core::ir::Dim;
    for &i in &m.graph.inputs {
        let v = &m.graph.values[i];
        let (Some(given), Some(want)) = (shapes.get(&v.name), v.shape.as_ref()) else {
            continue;
        };
        let fits = given.len() == want.len()
            && given
                .iter()
                .zip(want)
                .all(|(&g, d)| !matches!(d, Dim::Fixed(k) if *k != g));
        if !fits {
            let want: Vec<String> = want.iter().map(ToString::to_string).collect();
            bail!(
                "{}: input '{}' has shape {given:?}; the model takes [{}]",
                model.display(),
                v.name,
                want.join(", ")
            );
        }
    }
    Ok(())
}

/// Names, on stderr, every node the float fallback runs in float on the host, with its op
/// and why it has no integer form.
pub(super) fn warn_fallbacks(p: &Program) {
    let f = p.fallbacks();
    if f.is_empty() {
        return;
    }
    eprintln!(
        "warning: {} node(s) have no integer form and run in float32 on the host:",
        f.len()
    );
    for (node, op, why) in f {
        eprintln!("  {node} ({op}): {why}");
    }
}

/// `npu-studio run MODEL --plan PLAN.ron`: integer codes in, integer codes (or floats) out.
pub fn run(
    model: &Path,
    plan: &Path,
    inputs: &[String],
    out_dir: &Path,
    dequantize: bool,
    dump: Option<&Path>,
) -> Result<()> {
    let feeds = parse_inputs(inputs)?;
    let shapes: HashMap<String, Vec<usize>> = feeds.iter().map(|(k, t)| (k.clone(), t.shape().to_vec())).collect();
    let p = program(model, plan, &shapes)?;
    run_program(model, &p, &feeds, out_dir, dequantize, dump)
}

/// `npu-studio run FILE.tflite` on a quantized TFLite file: the file's own integer program
/// (its scales, zero points and codes) with LiteRT's reference-kernel arithmetic. `None`
/// when the file is not a quantized TFLite model the program importer reads.
pub fn run_file_program(
    model: &Path,
    inputs: &[String],
    out_dir: &Path,
    dequantize: bool,
    dump: Option<&Path>,
) -> Option<Result<()>> {
    let p = match npu_core::import::tflite::program::load(model) {
        Ok(Some(p)) => p,
        Ok(None) => return None,
        Err(e) => {
            eprintln!("warning: {e}; running the file's QDQ float graph instead");
            return None;
        }
    };
    Some(parse_inputs(inputs).and_then(|feeds| run_program(model, &p, &feeds, out_dir, dequantize, dump)))
}

fn run_program(
    model: &Path,
    p: &Program,
    feeds: &HashMap<String, Tensor>,
    out_dir: &Path,
    dequantize: bool,
    dump: Option<&Path>,
) -> Result<()> {
    let ins = integer_inputs(feeds, p.inputs.iter().map(|&i| &p.tensors[i]), model)?;
    let r = pipeline::run_integer(p, ins)
        .with_context(|| format!("running {} with integer arithmetic", model.display()))?;
    std::fs::create_dir_all(out_dir).with_context(|| format!("cannot create {}", out_dir.display()))?;
    for &o in &p.outputs {
        let t = &p.tensors[o];
        let codes = r.values[o].as_deref().context("an output was not computed")?;
        let file = write_codes(out_dir, t, codes, dequantize)?;
        println!(
            "{} {} {:?} scale {} zero point {} -> {}",
            t.name,
            if dequantize { "float32" } else { t.q.ty.name() },
            t.shape,
            t.q.s(),
            t.q.zp(),
            file.display()
        );
    }
    if let Some(dir) = dump {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for (t, v) in p.tensors.iter().zip(&r.values) {
            if let (None, Some(codes)) = (&t.data, v) {
                write_codes(dir, t, codes, false)?;
            }
        }
    }
    Ok(())
}

/// What `emulate --json` prints.
#[derive(Serialize)]
struct EmulateReport {
    binary: String,
    target: String,
    graph: String,
    steps: usize,
    commands: usize,
    host_ops: usize,
    /// Whether the AVX2 GEMM ran (else the portable loop).
    simd: bool,
    load_ms: f64,
    run_ms: f64,
    outputs: Vec<EmulatedOutput>,
    /// With `--model` and `--plan`: every computed tensor against FP32, the fake-quant
    /// simulation and the integer reference.
    #[serde(skip_serializing_if = "Option::is_none")]
    tensors: Option<Vec<pipeline::TensorTrace>>,
}

#[derive(Serialize)]
struct EmulatedOutput {
    name: String,
    dtype: &'static str,
    shape: Vec<usize>,
    scale: Vec<f32>,
    zero_point: Vec<i32>,
    file: String,
    /// With `--model` and `--plan`.
    #[serde(flatten)]
    compared: Option<OutputCompared>,
}

/// An output against FP32 (emulated and simulated; `null`: exact) and the integer reference.
#[derive(Serialize)]
struct OutputCompared {
    emulated_sqnr_db: Option<f64>,
    simulated_sqnr_db: Option<f64>,
    integer_mismatches: Option<usize>,
}

/// The options of `npu-studio emulate`.
pub struct EmulateArgs<'a> {
    pub file: &'a Path,
    pub inputs: &'a [String],
    pub out_dir: &'a Path,
    pub dequantize: bool,
    pub trace: Option<&'a Path>,
    pub json: bool,
    /// The model and plan the binary was compiled from, for the comparisons.
    pub model: Option<&'a Path>,
    pub plan: Option<&'a Path>,
}

/// `npu-studio emulate FILE.npub --input NAME=FILE.npy`: the binary run from its bytes, with
/// the conventions of `run --plan` (codes and `.quant.json` out, or floats); with `--model`
/// and `--plan`, every tensor compared with FP32, the simulation and the integer reference.
pub fn emulate(a: &EmulateArgs) -> Result<()> {
    let file = a.file;
    let feeds = parse_inputs(a.inputs)?;
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let t0 = std::time::Instant::now();
    let e = pipeline::load_binary(&bytes).with_context(|| format!("{}", file.display()))?;
    let load_ms = t0.elapsed().as_secs_f64() * 1e3;
    // The inputs in the binary's order, named as its tensor table names them.
    let b = &e.binary;
    let ins = integer_inputs(&feeds, b.inputs.iter().map(|&i| &b.tensors[i].tensor), file)?;
    let t0 = std::time::Instant::now();
    let values = e.run(ins).with_context(|| format!("emulating {}", file.display()))?;
    let run_ms = t0.elapsed().as_secs_f64() * 1e3;
    let traces = match (a.model, a.plan) {
        (Some(model), Some(plan)) => Some(compare_with(model, plan, &feeds, &e, &values)?),
        (None, None) => None,
        _ => bail!(
            "--model and --plan go together (the model and plan {} was compiled from)",
            file.display()
        ),
    };
    std::fs::create_dir_all(a.out_dir).with_context(|| format!("cannot create {}", a.out_dir.display()))?;
    let mut outputs = Vec::new();
    for &o in &b.outputs {
        let t = &b.tensors[o].tensor;
        let codes = values[o].as_deref().context("an output was not computed")?;
        let path = write_codes(a.out_dir, t, codes, a.dequantize)?;
        let row = traces.as_ref().and_then(|ts| ts.iter().find(|r| r.name == t.name));
        if !a.json {
            let sqnr = |x: Option<f64>| x.map_or_else(|| "exact".to_string(), |v| format!("{v:.2} dB"));
            let vs = row.map_or_else(String::new, |r| {
                format!(
                    "; vs FP32 emulated {}, simulated {}; {} codes differ from the integer reference",
                    sqnr(r.emulated_sqnr_db),
                    sqnr(r.simulated_sqnr_db),
                    r.integer_mismatches.map_or_else(|| "?".into(), |m| m.to_string())
                )
            });
            println!(
                "{} {} {:?} -> {}{vs}",
                t.name,
                if a.dequantize { "float32" } else { t.q.ty.name() },
                t.shape,
                path.display()
            );
        }
        outputs.push(EmulatedOutput {
            name: t.name.clone(),
            dtype: if a.dequantize { "float32" } else { t.q.ty.name() },
            shape: t.shape.clone(),
            scale: t.q.scale.clone(),
            zero_point: t.q.zero_point.clone(),
            file: path.display().to_string(),
            compared: row.map(|r| OutputCompared {
                emulated_sqnr_db: r.emulated_sqnr_db,
                simulated_sqnr_db: r.simulated_sqnr_db,
                integer_mismatches: r.integer_mismatches,
            }),
        });
    }
    if let Some(dir) = a.trace {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for (bt, v) in b.tensors.iter().zip(&values) {
            if let (None, Some(codes)) = (&bt.tensor.data, v) {
                write_codes(dir, &bt.tensor, codes, false)?;
            }
        }
        if let Some(ts) = &traces {
            let json = serde_json::to_vec_pretty(ts)?;
            npu_core::export::write_atomic(&dir.join("trace.json"), &json)?;
        }
    }
    if let (Some(ts), false) = (&traces, a.json) {
        let mism: usize = ts.iter().filter_map(|r| r.integer_mismatches).sum();
        let over: Vec<&pipeline::TensorTrace> = ts.iter().filter(|r| r.gap_db().is_some_and(|g| g > 1.0)).collect();
        println!(
            "{} tensors compared: {mism} codes differ from the integer reference; {} where the simulation promises over 1 dB more than the binary delivers{}",
            ts.len(),
            over.len(),
            over.first().map_or_else(String::new, |r| format!(
                " (first: {} at node {}, {:+.2} dB)",
                r.name,
                r.node,
                r.gap_db().unwrap_or(0.0)
            ))
        );
    }
    if a.json {
        let r = EmulateReport {
            binary: file.display().to_string(),
            target: b.target.clone(),
            graph: b.graph.clone(),
            steps: b.steps.len(),
            commands: b.commands.len(),
            host_ops: b.host.len(),
            simd: pipeline::emulator_simd(),
            load_ms,
            run_ms,
            outputs,
            tensors: traces,
        };
        println!("{}", serde_json::to_string_pretty(&r)?);
    }
    Ok(())
}

/// FP32, fake-quant and integer-reference values of the model and plan on `feeds`, and the
/// emulation compared with them.
fn compare_with(
    model: &Path,
    plan: &Path,
    feeds: &HashMap<String, Tensor>,
    e: &pipeline::Emulator,
    values: &[Option<Vec<i32>>],
) -> Result<Vec<pipeline::TensorTrace>> {
    let (plan, optimized) = super::quant::plan_inputs(model, plan)?;
    let id = npu_core::quant::params::graph_id(&optimized);
    if !e.binary.graph.is_empty() && !id.starts_with(&e.binary.graph) && !e.binary.graph.starts_with(&id) {
        bail!(
            "{} optimizes to graph {id}; the binary was compiled from graph {}",
            model.display(),
            e.binary.graph
        );
    }
    let q = pipeline::quantizer(&optimized, pipeline::default_threads())?;
    let fp32 = q
        .values(None, feeds)
        .with_context(|| format!("running {} in FP32", model.display()))?;
    let sim = q
        .values(Some(&plan), feeds)
        .with_context(|| format!("simulating {}", model.display()))?;
    let shapes: HashMap<String, Vec<usize>> = feeds.iter().map(|(k, t)| (k.clone(), t.shape().to_vec())).collect();
    let p =
        pipeline::legalize(&optimized, &plan, &shapes).with_context(|| format!("legalizing {}", model.display()))?;
    let refs = pipeline::EmulationReferences {
        fp32: &fp32,
        simulated: Some(&sim),
        program: &p,
    };
    let input = |name: &str| {
        let t = p.tensors.iter().find(|t| t.name == name).ok_or("not in the program")?;
        as_input(feeds.get(name).ok_or("needs a value (--input NAME=FILE.npy)")?, t)
    };
    let c = pipeline::compare_emulation(e, values, &refs, &input).with_context(|| format!("{}", model.display()))?;
    Ok(c.traces)
}

/// `npu-studio export MODEL --plan PLAN.ron --format tflite --out FILE.tflite`.
pub fn export(model: &Path, plan: &Path, format: &str, out: &Path, io: &str, shapes: &[String]) -> Result<()> {
    let shapes: HashMap<String, Vec<usize>> = shapes
        .iter()
        .map(|s| super::run::parse_shape(s))
        .collect::<Result<_>>()?;
    let io = match io {
        "int8" => npu_core::export::tflite::Io::Int8,
        "float" => npu_core::export::tflite::Io::Float,
        other => bail!("--io {other}: expected int8 or float"),
    };
    match format {
        "tflite" => {
            let p = program(model, plan, &shapes)?;
            let w = pipeline::export_tflite(&p, io, out)?;
            let inputs: Vec<String> = w
                .inputs
                .iter()
                .map(|(n, s, nhwc)| format!("{n} {s:?}{}", if *nhwc { " (NHWC)" } else { "" }))
                .collect();
            let ints: Vec<&str> = p
                .tensors
                .iter()
                .filter(|t| t.data.is_none() && t.q.ty.is_quantized())
                .map(|t| t.q.ty.name())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            println!(
                "wrote {}: {} operators, {} bytes, {} activations; inputs {}; {} constraint(s) applied",
                out.display(),
                w.operators,
                w.bytes.len(),
                ints.join(" and "),
                inputs.join(", "),
                p.constraints.len()
            );
            if w.float_nodes.is_empty() {
                println!("every op runs in integer arithmetic");
            } else {
                println!(
                    "{} node(s) with no integer TFLite form run in float32 between DEQUANTIZE and QUANTIZE: {}",
                    w.float_nodes.len(),
                    w.float_nodes.join(", ")
                );
            }
            for c in &p.constraints {
                println!("  {} {} ({}): {}", c.rule, c.tensor, c.node, c.detail);
            }
            Ok(())
        }
        "onnx-qdq" => {
            let (plan, optimized) = super::quant::plan_inputs(model, plan)?;
            let q = pipeline::quantizer(&optimized, 1)?;
            let s = pipeline::export_qdq(&q, &plan, out)?;
            println!(
                "wrote {}: {} activation Q/DQ pairs, {} quantized constants, {} nodes with float constants; Q/DQ domain {}",
                out.display(),
                s.activations,
                s.weights,
                s.float_weights,
                s.domain
            );
            Ok(())
        }
        other => bail!("--format {other}: expected tflite, onnx-qdq or report"),
    }
}
