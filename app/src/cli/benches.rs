//! `npu-studio bench-layout` and `bench-quant-edit`: the studio's graph view and its
//! quantization edits, timed headless.

use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub fn bench_layout(models: &[PathBuf], synthetic: &[usize], json: bool) -> Result<()> {
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
        let opts = npu_core::import::LoadOptions {
            allow_unsupported: true,
        };
        let model = npu_core::pipeline::import(path, &opts, &npu_core::progress::Silent)?.model;
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

pub fn bench_quant_edit(
    model: &Path,
    data: String,
    preprocess: String,
    preset: String,
    edits: usize,
    json: bool,
) -> Result<()> {
    let m = super::load(model)?;
    let setup = crate::studio::quantize::Setup {
        data,
        preprocess,
        preset,
        equalize: false,
        absorb_bias: false,
        refine_ranges: false,
        seq_mse: false,
        smooth_quant: false,
        gptq: false,
    };
    let r = crate::bench_quant_edit::bench_edits(&std::sync::Arc::new(m), &model.display().to_string(), setup, edits)
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
