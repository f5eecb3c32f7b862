//! `npu-studio info`: what a model holds, from the same function the inspector uses.

use anyhow::Result;
use std::collections::HashMap;
use std::path::Path;

pub fn info(path: &Path, json: bool, nodes: bool, shapes: &[String]) -> Result<()> {
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
