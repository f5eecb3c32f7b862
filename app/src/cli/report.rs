//! `npu-studio export MODEL --plan PLAN.ron --format report --out FILE.html`: the study
//! report (`npu_core::report`) with the graph picture laid out as the studio lays it out;
//! `FILE.json` and `FILE.csv` beside it.

use super::progress::{Stderr, end_progress};
use super::quant::{open_set, plan_inputs, simulate};
use crate::graph::picture::picture;
use anyhow::{Context, Result, bail};
use npu_core::pipeline;
use npu_core::report::{ModelSummary, StudyReport};
use std::collections::HashMap;
use std::path::Path;

/// What `export --format report` is asked for.
pub struct ReportArgs<'a> {
    pub model: &'a Path,
    pub plan: &'a Path,
    pub out: &'a Path,
    pub eval: Option<&'a str>,
    pub calib: Option<&'a str>,
    pub preprocess: &'a str,
    pub target: Option<&'a str>,
    pub target_sqnr: Option<f64>,
    pub promote_to: &'a str,
    pub shapes: &'a HashMap<String, Vec<usize>>,
    pub threads: usize,
    pub no_sensitivity: bool,
}

pub fn report(a: &ReportArgs<'_>) -> Result<()> {
    let Some(eval) = a.eval else {
        bail!(
            "--format report needs --eval DATA: the samples the plan is measured on (keep them apart from calibration)"
        );
    };
    let t0 = std::time::Instant::now();
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let (plan, model) = plan_inputs(a.model, a.plan)?;
    let promote_to = a
        .target_sqnr
        .map(|_| npu_core::quant::LayerPrecision::parse(a.promote_to))
        .transpose()?;
    let target = a.target.map(pipeline::target).transpose()?;
    let q = pipeline::quantizer(&model, a.threads)?;
    let set = open_set("evaluation", eval, a.preprocess)?;
    let sim = simulate(&q, &plan, &set)?;
    let analysis = if a.no_sensitivity {
        None
    } else {
        let r = pipeline::analyze(&q, &plan, &set, &Stderr);
        end_progress();
        Some(r?)
    };
    let amp = match (a.target_sqnr, promote_to) {
        (Some(db), Some(to)) => {
            let Some(calib) = a.calib else {
                bail!("--target-sqnr needs --calib DATA: the mixed-precision search runs on the calibration set");
            };
            let calib = open_set("calibration", calib, a.preprocess)?;
            let estimate =
                |p: &npu_core::quant::QuantPlan| target.as_ref().and_then(|t| pipeline::latency_estimate(&model, t, p));
            let cost = match &target {
                Some(t) => npu_core::quant::amp::Cost::Latency {
                    name: &t.id,
                    estimate: &estimate,
                },
                None => npu_core::quant::amp::Cost::Bytes,
            };
            let r = pipeline::mixed_precision(&q, &plan, &calib, db, to, cost, &Stderr);
            end_progress();
            Some(r?.0)
        }
        _ => None,
    };
    let compiled = match &target {
        Some(t) => {
            let p = pipeline::legalize(&model, &plan, a.shapes)
                .with_context(|| format!("legalizing {} for {}", a.model.display(), t.id))?;
            Some(pipeline::compile(&p, t, &npu_core::compiler::Options::default()))
        }
        None => None,
    };
    let mut r = StudyReport::new(
        ModelSummary::of(&model, &a.model.display().to_string(), &plan.input_shapes),
        &plan,
        &sim,
        analysis.as_ref(),
        amp,
        compiled.as_ref(),
    );
    r.graph = picture(&model, &r);
    let [_, json, csv] = pipeline::write_study_report(&r, a.out)?;
    let page_kb = std::fs::metadata(a.out).map_or(0, |m| m.len() / 1024);
    let low = r.outputs.iter().filter_map(|o| o.sqnr_db).reduce(f64::min);
    println!(
        "wrote {} ({} KB): {} layers, output SQNR {}{}{}; {} and {} beside it ({:.1} s)",
        a.out.display(),
        page_kb,
        r.layers.len(),
        low.map_or_else(|| "exact".into(), |v| format!("{v:.2} dB")),
        if r.mixed_precision.is_some() {
            ", mixed-precision curve"
        } else {
            ""
        },
        r.target
            .as_ref()
            .map(|t| format!(", {} of {} ops on the NPU of {}", t.ops_on_npu, t.ops_total, t.target))
            .unwrap_or_default(),
        json.display(),
        csv.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
