//! `npu-studio targets` (the NPU targets and their supported ops) and `npu-studio compile`
//! (placement, segments, memory and the performance estimate of a plan on a target).

use anyhow::{Context, Result};
use npu_core::compiler::{Options, Place};
use npu_core::pipeline;
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

/// What `compile --report` writes: the target, then everything the stage decided.
#[derive(Serialize)]
struct Report<'a> {
    model: String,
    plan: String,
    #[serde(flatten)]
    compiled: &'a npu_core::compiler::Compiled,
}

pub struct CompileArgs<'a> {
    pub model: &'a Path,
    pub plan: &'a Path,
    pub target: &'a str,
    pub shapes: &'a [String],
    pub force_cpu: &'a [String],
    pub report: Option<&'a Path>,
    pub csv: Option<&'a Path>,
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
    let (plan, optimized) = super::quant::plan_inputs(a.model, a.plan)?;
    let program =
        pipeline::legalize(&optimized, &plan, &shapes).with_context(|| format!("legalizing {}", a.model.display()))?;
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
    let c = pipeline::compile(&program, &target, &options);
    let report = Report {
        model: a.model.display().to_string(),
        plan: a.plan.display().to_string(),
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
