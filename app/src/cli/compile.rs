//! `npu-studio targets` (the NPU targets and their supported ops) and `npu-studio compile`
//! (placement, segments, memory and the performance estimate of a plan on a target).

use anyhow::{Context, Result};
use npu_core::compiler::{Options, Place};
use npu_core::pipeline;
use npu_core::program::IntType;
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

#[derive(Serialize)]
struct TargetRow<'a> {
    id: &'a str,
    name: &'a str,
    description: &'a str,
    clock_mhz: f64,
    int8_macs_per_cycle: f64,
    int16_macs_per_cycle: Option<f64>,
    fp16_macs_per_cycle: Option<f64>,
    int8_tops: f64,
    sram_bytes: u64,
    sram_bytes_per_cycle: f64,
    offchip: &'a str,
    offchip_bytes_per_cycle: f64,
    dma_channels: u32,
    host: &'a str,
    ops: Vec<&'a str>,
}

/// `npu-studio targets [--json] [--markdown]`.
pub fn targets(json: bool, markdown: bool) -> Result<()> {
    let all = pipeline::targets()?;
    if markdown {
        print!("{}", npu_core::target::supported_ops_markdown(&all));
        return Ok(());
    }
    let rows: Vec<TargetRow> = all
        .iter()
        .map(|t| TargetRow {
            id: &t.id,
            name: &t.name,
            description: &t.description,
            clock_mhz: t.clock_mhz,
            int8_macs_per_cycle: t.compute.macs_per_cycle.int8,
            int16_macs_per_cycle: t.compute.macs_per_cycle.int16,
            fp16_macs_per_cycle: t.compute.macs_per_cycle.fp16,
            int8_tops: t.int8_tops(),
            sram_bytes: t.memory.sram_bytes,
            sram_bytes_per_cycle: t.memory.sram_bytes_per_cycle,
            offchip: &t.memory.offchip_name,
            offchip_bytes_per_cycle: t.memory.offchip_bytes_per_cycle,
            dma_channels: t.memory.dma_channels,
            host: &t.host.name,
            ops: t.ops.iter().map(|o| o.op.as_str()).collect(),
        })
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    for r in &rows {
        println!(
            "{}: {} — {} int8 MACs/cycle at {} MHz ({:.2} TOPS), {} KiB SRAM, {} ops on the NPU; host {}",
            r.id,
            r.name,
            r.int8_macs_per_cycle,
            r.clock_mhz,
            r.int8_tops,
            r.sram_bytes / 1024,
            r.ops.len(),
            r.host
        );
    }
    Ok(())
}

/// What `compile --report` writes: the headline figures, then everything the stage
/// decided.
#[derive(Serialize)]
struct Report<'a> {
    model: String,
    plan: String,
    #[serde(flatten)]
    headline: npu_core::compiler::Headline,
    /// The binary written by `--out`, and its size.
    #[serde(skip_serializing_if = "Option::is_none")]
    binary: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    binary_bytes: Option<usize>,
    /// What the stages cost here: legalizing the plan, then partitioning, estimating,
    /// lowering and writing the binary (milliseconds, and the most heap bytes in use at
    /// once above what the loaded model already held).
    timing: Timing,
    #[serde(flatten)]
    compiled: &'a npu_core::compiler::Compiled,
}

#[derive(Serialize)]
struct Timing {
    legalize_ms: f64,
    compile_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    compile_peak_heap_bytes: Option<usize>,
    /// Bytes of the model's weights (the optimized graph's constants as stored; for a
    /// quantized TFLite file, its program's constants at their integer widths).
    model_weight_bytes: u64,
}

pub struct CompileArgs<'a> {
    pub model: &'a Path,
    /// `None`: the model is a quantized TFLite file and its own program is compiled.
    pub plan: Option<&'a Path>,
    pub target: &'a str,
    pub shapes: &'a [String],
    pub force_cpu: &'a [String],
    pub report: Option<&'a Path>,
    pub csv: Option<&'a Path>,
    pub out: Option<&'a Path>,
    pub json: bool,
}

/// `npu-studio compile MODEL --plan PLAN.ron --target ID`.
pub fn compile(a: &CompileArgs) -> Result<()> {
    let target = pipeline::target(a.target)?;
    let shapes: HashMap<String, Vec<usize>> = a
        .shapes
        .iter()
        .map(|s| super::run::parse_shape(s))
        .collect::<Result<_>>()?;
    let t0 = std::time::Instant::now();
    let (program, weight_bytes) = if let Some(plan_path) = a.plan {
        let (plan, optimized) = super::quant::plan_inputs(a.model, plan_path)?;
        let program = pipeline::legalize(&optimized, &plan, &shapes)
            .with_context(|| format!("legalizing {}", a.model.display()))?;
        super::integer::warn_fallbacks(&program);
        let bytes = optimized
            .graph
            .values
            .iter()
            .filter_map(|v| v.constant.as_ref())
            .map(|c| c.raw().len() as u64)
            .sum();
        (program, bytes)
    } else {
        let program = npu_core::import::tflite::program::load(a.model)?.with_context(|| {
            format!(
                "{}: --plan PLAN.ron is needed (only a quantized TFLite file carries its own integer program)",
                a.model.display()
            )
        })?;
        let bytes = program
            .tensors
            .iter()
            .filter_map(|t| {
                let per = match t.q.ty {
                    IntType::I8 | IntType::I4 | IntType::Bool => 1,
                    IntType::I16 => 2,
                    IntType::I64 => 8,
                    _ => 4,
                };
                t.data.as_ref().map(|d| (d.len() * per) as u64)
            })
            .sum();
        (program, bytes)
    };
    let legalize_ms = t0.elapsed().as_secs_f64() * 1e3;
    let known: std::collections::HashSet<&str> = program.ops.iter().map(|o| o.node.as_str()).collect();
    for n in a.force_cpu {
        if !known.contains(n.as_str()) {
            anyhow::bail!(
                "--force-cpu {n}: no such node in the optimized graph of {}",
                a.model.display()
            );
        }
    }
    let options = Options {
        force_cpu: a.force_cpu.iter().cloned().collect(),
    };
    let heap = crate::heap::Heap::start();
    let t0 = std::time::Instant::now();
    let c = pipeline::compile(&program, &target, &options);
    let bytes = a.out.map(|_| pipeline::write_binary(&program, &c));
    let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
    let peak = heap.peak();
    if let (Some(path), Some(b)) = (a.out, &bytes) {
        npu_core::export::write_atomic(path, b)?;
    }
    let report = Report {
        model: a.model.display().to_string(),
        plan: a.plan.map_or_else(
            || "(the file's own quantization)".to_owned(),
            |p| p.display().to_string(),
        ),
        headline: c.headline(),
        binary: a.out.map(|p| p.display().to_string()),
        binary_bytes: bytes.as_ref().map(Vec::len),
        timing: Timing {
            legalize_ms,
            compile_ms,
            compile_peak_heap_bytes: peak,
            model_weight_bytes: weight_bytes,
        },
        compiled: &c,
    };
    if let Some(path) = a.report {
        npu_core::export::write_atomic(path, &serde_json::to_vec_pretty(&report)?)?;
    }
    if let Some(path) = a.csv {
        npu_core::export::write_atomic(path, c.layers_csv().as_bytes())?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("{}", c.summary());
    if let (Some(path), Some(b)) = (a.out, &bytes) {
        let h = c.headline();
        println!(
            "wrote {} ({} KiB): {} NPU commands, {} host ops",
            path.display(),
            b.len().div_ceil(1024),
            h.commands,
            h.host_ops
        );
    }
    // Each distinct reason once, in the order the ops meet it.
    let mut reasons: Vec<(String, usize)> = Vec::new();
    for p in c.placements.iter().filter(|p| p.place == Place::Cpu) {
        let r = format!("{}: {}", p.op, p.reason);
        match reasons.iter_mut().find(|(x, _)| *x == r) {
            Some((_, n)) => *n += 1,
            None => reasons.push((r, 1)),
        }
    }
    for (r, n) in reasons {
        println!("  CPU ×{n}: {r}");
    }
    Ok(())
}
