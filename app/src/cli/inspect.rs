//! `npu-studio info`: what a model holds, from the same function the inspector uses.

use anyhow::Result;
use std::collections::HashMap;
use std::path::Path;

pub fn info(path: &Path, json: bool, nodes: bool, shapes: &[String]) -> Result<()> {
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("npub")) {
        return binary(path, json, nodes);
    }
    let mut model = super::load(path)?;
    if !shapes.is_empty() {
        let m: HashMap<String, Vec<usize>> = shapes
            .iter()
            .map(|s| super::run::parse_shape(s))
            .collect::<Result<_>>()?;
        npu_core::import::shapes::fix_inputs(&mut model, &m)?;
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

#[derive(serde::Serialize)]
struct CommandRow<'a> {
    index: usize,
    unit: &'static str,
    op: &'static str,
    fused: Option<&'static str>,
    nodes: Vec<&'a str>,
    pieces: usize,
    tiles: usize,
    output: &'a str,
}

#[derive(serde::Serialize)]
struct BinaryInfo<'a> {
    file: String,
    bytes: usize,
    version: String,
    target: &'a str,
    graph: &'a str,
    sram_arena_bytes: u64,
    offchip_arena_bytes: u64,
    weight_bytes: u64,
    tensors: usize,
    sections: Vec<serde_json::Value>,
    /// Commands per unit.
    units: std::collections::BTreeMap<&'static str, usize>,
    host_ops: Vec<&'a str>,
    segments: Vec<serde_json::Value>,
    /// The graph inputs and outputs: name, dtype, shape, scale, zero point.
    inputs: Vec<serde_json::Value>,
    outputs: Vec<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    commands: Option<Vec<CommandRow<'a>>>,
}

fn io_json(t: &npu_core::program::ITensor) -> serde_json::Value {
    serde_json::json!({
        "name": t.name,
        "dtype": t.q.ty.name(),
        "shape": t.shape,
        "scale": t.q.scale,
        "zero_point": t.q.zero_point,
    })
}

/// `npu-studio info FILE.npub`: what a compiled binary holds (`--nodes`: every command).
fn binary(path: &Path, json: bool, all: bool) -> Result<()> {
    use anyhow::Context;
    use npu_core::pipeline::{Location, read_binary};
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let b = read_binary(&bytes).with_context(|| format!("{}", path.display()))?;
    let mut units = std::collections::BTreeMap::new();
    for c in &b.commands {
        *units.entry(c.unit.name()).or_insert(0) += 1;
    }
    let rows = || {
        b.commands
            .iter()
            .enumerate()
            .map(|(i, c)| CommandRow {
                index: i,
                unit: c.unit.name(),
                op: c.op.kind.name(),
                fused: c.fused.as_ref().map(|f| f.kind.name()),
                nodes: b.command_nodes(i),
                pieces: c.pieces,
                tiles: c.tile.count,
                output: &b.tensors[c.fused.as_ref().unwrap_or(&c.op).outputs[0]].tensor.name,
            })
            .collect::<Vec<_>>()
    };
    let r = BinaryInfo {
        file: path.display().to_string(),
        bytes: bytes.len(),
        version: format!("{}.{}", b.version.0, b.version.1),
        target: &b.target,
        graph: &b.graph,
        sram_arena_bytes: b.sram_arena_bytes,
        offchip_arena_bytes: b.offchip_arena_bytes,
        weight_bytes: b.tensors.iter().filter(|t| t.location == Location::Weights).map(|t| t.bytes).sum(),
        tensors: b.tensors.len(),
        sections: b
            .sections
            .iter()
            .map(|(n, o, s, c)| serde_json::json!({"name": n, "offset": o, "bytes": s, "crc32": format!("{c:08x}")}))
            .collect(),
        units,
        host_ops: b.host.iter().map(|o| o.node.as_str()).collect(),
        segments: b
            .segments
            .iter()
            .map(|(d, f, n)| serde_json::json!({"device": if *d == 0 { "NPU" } else { "CPU" }, "first_step": f, "steps": n}))
            .collect(),
        inputs: b.inputs.iter().map(|&i| io_json(&b.tensors[i].tensor)).collect(),
        outputs: b.outputs.iter().map(|&i| io_json(&b.tensors[i].tensor)).collect(),
        commands: all.then(rows),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!("{} ({} bytes, format {})", r.file, r.bytes, r.version);
    println!("  target      {}", r.target);
    println!("  graph       {}", r.graph);
    println!(
        "  arenas      {} KiB SRAM, {} KiB off-chip; weights {} KiB",
        r.sram_arena_bytes.div_ceil(1024),
        r.offchip_arena_bytes.div_ceil(1024),
        r.weight_bytes.div_ceil(1024)
    );
    println!(
        "  commands    {} ({})",
        b.commands.len(),
        r.units
            .iter()
            .map(|(u, n)| format!("{n} {u}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("  host ops    {}", r.host_ops.len());
    println!("  segments    {}", r.segments.len());
    println!("  sections:");
    for (n, o, s, c) in &b.sections {
        println!("    {n}  at {o:>9}  {s:>9} bytes  crc32 {c:08x}");
    }
    if all {
        for c in rows() {
            println!(
                "  #{:<4} {:<12} {}{}  ← {}",
                c.index,
                c.unit,
                c.op,
                c.fused.map(|f| format!(" + {f}")).unwrap_or_default(),
                c.nodes.join(", ")
            );
        }
    }
    Ok(())
}
