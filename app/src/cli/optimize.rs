//! `npu-studio optimize`: the graph-optimization passes to a fixed point, the result
//! written as ONNX, with a summary and the pass log.

use anyhow::{Context, Result};
use npu_core::pipeline::{self, Passes};
use npu_core::progress::Silent;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

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

pub fn optimize(path: &Path, out: &Path, passes: &[String], log: Option<&Path>, json: bool) -> Result<()> {
    use npu_core::passes;
    let model = super::load(path)?;
    let selected = if passes.is_empty() {
        Passes::All
    } else {
        Passes::Only(passes.to_vec())
    };
    let names: Vec<String> = match &selected {
        Passes::All => passes::all_passes().iter().map(|p| p.name().to_owned()).collect(),
        Passes::Only(_) => passes::select(passes)?.iter().map(|p| p.name().to_owned()).collect(),
    };
    let result =
        pipeline::optimize(&model, &selected, &Silent).with_context(|| format!("optimizing {}", path.display()))?;
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
