//! `npu-studio quantize`, `simulate` and `analyze`: the quantizer from the command line,
//! stage by stage through `npu_core::pipeline`.

use super::progress::{Stderr, end_progress};
use anyhow::{Context, Result, bail};
use npu_core::ir::Model;
use npu_core::pipeline::{self, BiasCorrection, Passes, PlanRequest, Samples};
use npu_core::progress::Silent;
use npu_core::quant::observer::Calibration;
use npu_core::quant::recipe::Recipe;
use npu_core::quant::{QuantPlan, Report, preset};
use serde::Serialize;
use std::path::Path;

/// The model with every graph-optimization pass applied (the plan's names refer to it).
fn optimized(path: &Path) -> Result<Model> {
    let imported = super::load(path)?;
    let o = pipeline::optimize(&imported, &Passes::All, &Silent)
        .with_context(|| format!("optimizing {}", path.display()))?;
    Ok(o.model)
}

fn write_report(path: &Path, report: &impl Serialize) -> Result<()> {
    pipeline::export_json(report, path).with_context(|| format!("writing {}", path.display()))
}

/// Opens a calibration or evaluation set, warning loudly when it is synthetic.
pub(super) fn open_set(what: &str, path: &str, preprocess: &str) -> Result<Samples> {
    let set = Samples::open(path, preprocess)?;
    if set.is_synthetic() {
        eprintln!(
            "WARNING: {what} uses SYNTHETIC random data ({}); ranges and errors will not match real inputs",
            set.path
        );
    }
    Ok(set)
}

/// What `npu-studio quantize` is asked to do.
#[expect(clippy::struct_excessive_bools, reason = "one field per command-line switch")]
pub struct QuantizeArgs<'a> {
    pub model: &'a Path,
    pub calib: &'a str,
    pub preprocess: Option<&'a str>,
    pub preset: &'a str,
    pub recipe: Option<&'a Path>,
    pub method: Option<&'a str>,
    pub eval: Option<&'a str>,
    pub out: &'a Path,
    pub report: Option<&'a Path>,
    pub csv: Option<&'a Path>,
    pub threads: usize,
    pub no_bias_correction: bool,
    pub equalize: bool,
    pub absorb_bias: bool,
    pub refine_ranges: bool,
    pub seq_mse: bool,
    pub smooth_quant: bool,
    pub gptq: bool,
    pub target_sqnr: Option<f64>,
    pub promote_to: &'a str,
    pub cost_target: Option<&'a str>,
}

fn load_recipe(path: &Path) -> Result<Recipe> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Recipe::parse_ron(&text).map_err(|e| anyhow::anyhow!("{}: not a recipe: {e}", path.display()))
}

pub fn quantize(a: &QuantizeArgs<'_>) -> Result<()> {
    let QuantizeArgs {
        model: model_path,
        calib,
        preprocess,
        preset: preset_name,
        recipe,
        method,
        eval,
        out,
        report: report_path,
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
    } = *a;
    let cost_target = cost_target.map(pipeline::target).transpose()?;
    if eval.is_none() && (report_path.is_some() || csv.is_some()) {
        bail!("--report and --csv need --eval PATH (the evaluation set)");
    }
    let mut recipe = match recipe {
        Some(p) => load_recipe(p)?,
        None => Recipe::from_preset(preset_name),
    };
    recipe.equalize |= equalize;
    recipe.absorb_bias |= absorb_bias;
    recipe.refine_ranges |= refine_ranges;
    recipe.seq_mse |= seq_mse;
    recipe.smooth_quant |= smooth_quant;
    recipe.gptq |= gptq;
    let label = recipe_name(a.recipe, &recipe);
    preset(&recipe.preset)?;
    let method = method.map(Calibration::parse).transpose()?;
    let promote_to = target_sqnr
        .map(|_| npu_core::quant::LayerPrecision::parse(promote_to))
        .transpose()?;
    let pre = preprocess.unwrap_or("");
    let calib_set = open_set("calibration", calib, pre)?;
    let transformed = pipeline::transform_weights(optimized(model_path)?, &recipe, &calib_set, threads, &Stderr);
    end_progress();
    let pipeline::Transformed {
        model,
        equalized,
        absorbed,
        smoothed,
    } = transformed?;
    if let Some(e) = &equalized {
        print_equalization(e);
    }
    if let Some(a) = &absorbed {
        print_absorbed(a);
    }
    if let Some(s) = &smoothed {
        print_smoothed(s);
    }
    // Checked before the calibration: a recipe that does not fit the graph fails at once,
    // naming the file, and rules that match nothing are reported first.
    let resolved = recipe.resolve(&model.graph).map_err(|e| match a.recipe {
        Some(p) => anyhow::anyhow!("{}: {e}", p.display()),
        None => anyhow::anyhow!("{e}"),
    })?;
    if a.recipe.is_some() {
        for (k, (r, n)) in recipe.rules.iter().zip(&resolved.matched).enumerate() {
            if *n == 0 {
                eprintln!(
                    "warning: recipe rule {} (name {:?}, op {:?}) matches no node of the optimized graph",
                    k + 1,
                    r.name.as_deref().unwrap_or("*"),
                    r.op.as_deref().unwrap_or("*")
                );
            }
        }
    }
    let q = pipeline::quantizer(&model, threads)?;
    let t = std::time::Instant::now();
    let request = PlanRequest {
        calibration: method,
        bias_correction: if no_bias_correction {
            BiasCorrection::Off
        } else {
            BiasCorrection::Measure
        },
        ..PlanRequest::recipe(recipe, label)
    };
    let planned = pipeline::calibrate(&q, &calib_set, &Stderr)
        .map_err(anyhow::Error::from)
        .and_then(|stats| pipeline::plan(&q, &stats, &calib_set, &request, &Stderr).map_err(anyhow::Error::from));
    end_progress();
    let planned = planned?;
    for a in &planned.adjusted {
        println!(
            "{}: {} instead of the preset's precision ({})",
            a.node,
            a.precision.keyword().unwrap_or("?"),
            a.reason
        );
    }
    if let Some(r) = &planned.refined {
        print_refined(r);
    }
    if let Some(r) = &planned.seq_mse {
        print_seq_mse(r);
    }
    if let Some(r) = &planned.gptq {
        print_gptq(r);
    }
    if let Some(bc) = planned.bias_correction {
        let judged = judged_on(bc.held_back);
        println!(
            "bias correction: output SQNR {judged} {} → {}; {}",
            db2(bc.without),
            db2(bc.with),
            if bc.kept { "kept" } else { "dropped" }
        );
    }
    let mut plan = planned.plan;
    if let Some(e) = &equalized {
        plan.equalization.clone_from(&e.scales);
    }
    if let Some(a) = &absorbed {
        plan.absorption.clone_from(&a.shifts);
    }
    if let Some(s) = &smoothed {
        plan.smoothing.clone_from(&s.scales);
    }
    let calib_s = t.elapsed().as_secs_f64();
    let mut amp = None;
    if let (Some(target), Some(to)) = (target_sqnr, promote_to) {
        // The search is part of making the plan: it runs on the calibration set (where the
        // bias corrections it measures again come from); --eval only reports.
        let estimate = |p: &npu_core::quant::QuantPlan| {
            cost_target
                .as_ref()
                .and_then(|t| pipeline::latency_estimate(&model, t, p))
        };
        let cost = match &cost_target {
            Some(t) => npu_core::quant::amp::Cost::Latency {
                name: &t.id,
                estimate: &estimate,
            },
            None => npu_core::quant::amp::Cost::Bytes,
        };
        let r = pipeline::mixed_precision(&q, &plan, &calib_set, target, to, cost, &Stderr);
        end_progress();
        let (mp, p) = r?;
        print_curve(&mp, target, a.promote_to);
        plan = p;
        amp = Some(mp);
    }
    pipeline::export_plan(&plan, out)?;
    println!(
        "{}: {} recipe, {} calibration on {} samples in {calib_s:.1} s, {} activations ({} layers off the default); plan written to {}",
        model_path.display(),
        plan.preset,
        planned.method.name(),
        plan.calibration_samples,
        plan.ranges.len(),
        plan.layers.len(),
        out.display()
    );
    let Some(eval) = eval else {
        return Ok(());
    };
    let report = simulate(&q, &plan, &open_set("evaluation", eval, pre)?)?;
    print_summary(&report);
    if let Some(p) = report_path {
        write_report(
            p,
            &QuantizeReport {
                report: &report,
                mixed_precision: amp.as_ref(),
                equalization: equalized.as_ref().map(|e| e.pairs.as_slice()),
                bias_absorption: absorbed.as_ref(),
                range_refinement: planned.refined.as_ref(),
                seq_mse: planned.seq_mse.as_ref(),
                gptq: planned.gptq.as_ref(),
                smoothing: smoothed.as_ref(),
            },
        )?;
    }
    if let Some(p) = csv {
        npu_core::export::write_atomic(p, report.to_csv().as_bytes())?;
    }
    Ok(())
}

/// Which samples a data-driven choice was judged on.
fn judged_on(held_back: usize) -> String {
    if held_back > 0 {
        format!("on {held_back} held-back calibration samples")
    } else {
        "on the calibration samples it was fitted to (fewer than 3 to split)".to_owned()
    }
}

/// What the range refinement changed and how it was judged.
fn print_refined(r: &npu_core::quant::refine::Refined) {
    println!(
        "range refinement: {} of {} activation ranges changed in {:.1} s; output SQNR on the fitting samples {} → {}",
        r.choices.len(),
        r.tried,
        r.seconds,
        db2(r.fit_before_db),
        db2(r.fit_after_db)
    );
    if let Some(v) = r.verdict() {
        println!("  {}: {v}", judged_on(r.held_back));
    }
}

/// What bias absorption did at each conv pair and how it was judged.
fn print_absorbed(a: &npu_core::quant::absorb::Absorbed) {
    println!("{} ({:.1} s)", a.summary(), a.seconds);
    for s in &a.sites {
        println!(
            "  {} → {} ({}): {} of {} channels shifted, activation grid width {:.3} → {:.3}",
            s.first, s.second, s.activation, s.shifted, s.channels, s.grid_width_before, s.grid_width_after
        );
    }
}

/// What SmoothQuant did at each LayerNorm and how it was judged.
fn print_smoothed(s: &npu_core::quant::smooth::Smoothed) {
    println!("{} ({:.1} s)", s.summary(), s.seconds);
    for site in &s.sites {
        println!(
            "  {} → {}: {} channels, activation spread {:.1} → {:.1}, weight spread {:.1} → {:.1}",
            site.layer_norm,
            site.readers.join(", "),
            site.channels,
            site.activation_spread_before,
            site.activation_spread_after,
            site.weight_spread_before,
            site.weight_spread_after
        );
    }
}

/// What GPTQ did, the layers it helped most, and how it was judged.
fn print_gptq(r: &npu_core::quant::gptq::Gptq) {
    println!(
        "GPTQ weight codes: {} of {} layers beat rounding to nearest on the held-back samples ({:.1} s)",
        r.layers.iter().filter(|l| l.shrinkage.is_some()).count(),
        r.layers.len(),
        r.seconds
    );
    let mut best: Vec<_> = r
        .layers
        .iter()
        .filter_map(|l| Some((l.after_db? - l.before_db?, l, l.shrinkage?)))
        .collect();
    best.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (gain, l, lambda) in best.iter().take(5) {
        println!(
            "  {}: {} of {} codes changed ({} inputs, shrinkage {lambda}), layer output {} → {} ({gain:+.2} dB)",
            l.node,
            l.changed,
            l.inputs * l.channels,
            l.inputs,
            db2(l.before_db),
            db2(l.after_db)
        );
    }
    print_held_verdict(r.held_back, r.held_before_db, r.held_after_db, r.kept);
}

/// What the SeqMSE search chose, the layers it helped most, and how it was judged.
fn print_seq_mse(r: &npu_core::quant::seqmse::SeqMse) {
    println!(
        "SeqMSE weight ranges: {} of {} layers narrowed in {:.1} s",
        r.clipped_layers(),
        r.layers.len(),
        r.seconds
    );
    let mut best: Vec<_> = r
        .layers
        .iter()
        .filter(|l| l.clipped > 0)
        .filter_map(|l| Some((l.after_db? - l.before_db?, l)))
        .collect();
    best.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (gain, l) in best.iter().take(5) {
        println!(
            "  {}: {} of {} channels narrowed (mean factor {:.3}), layer output {} → {} (+{gain:.2} dB)",
            l.node,
            l.clipped,
            l.channels,
            l.mean_factor,
            db2(l.before_db),
            db2(l.after_db)
        );
    }
    print_held_verdict(r.held_back, r.held_before_db, r.held_after_db, r.kept);
}

/// A weight step's output SQNR without and with it where it was judged, and the verdict.
fn print_held_verdict(held_back: usize, before: Option<f64>, after: Option<f64>, kept: bool) {
    println!(
        "  output SQNR {} {} → {}; {}",
        judged_on(held_back),
        db2(before),
        db2(after),
        if kept { "kept" } else { "dropped" }
    );
}

/// An SQNR with two decimals (`exact` for an error-free tensor).
fn db2(x: Option<f64>) -> String {
    x.map_or("exact".into(), |v| format!("{v:.2} dB"))
}

/// The mixed-precision curve and the layers it promotes.
fn print_curve(mp: &npu_core::quant::amp::MixedPrecision, target: f64, promote_to: &str) {
    println!(
        "mixed precision to {target:.2} dB (layers promoted to {promote_to}, of {}):",
        mp.layers_total
    );
    println!("  promotions weighed by {}", mp.cost);
    if mp.held_back > 0 {
        println!(
            "  output SQNR on {} calibration samples (ranked on them) and on {} held back (the target must hold on both)",
            mp.fit_samples, mp.held_back
        );
    } else {
        println!("  output SQNR on the calibration samples (too few to hold any back)");
    }
    for c in &mp.curve {
        println!(
            "  {:>4} layers  {:>10.0} activation bytes  {}{}{}",
            c.promoted,
            c.cost_bytes,
            db2(c.sqnr_db),
            if mp.held_back > 0 {
                format!("  held back {}", db2(c.held_db))
            } else {
                String::new()
            },
            c.latency_us.map(|us| format!("  {us:.1} µs")).unwrap_or_default()
        );
    }
    match mp.chosen {
        Some(k) => {
            println!(
                "  chosen: {k} layers ({:.1}% of {}), in {:.1} s:",
                100.0 * k as f64 / mp.layers_total.max(1) as f64,
                mp.layers_total,
                mp.seconds
            );
            for (name, gain) in &mp.ranking[..k] {
                println!("    {name} (left at 8 bits alone: −{gain:.2} dB)");
            }
        }
        None => println!(
            "  the target is not reached on this curve (on the fitting and the held-back samples; {:.1} s); plan left unchanged",
            mp.seconds
        ),
    }
}

/// What `quantize --report` writes: the simulation report, plus the mixed-precision curve
/// when `--target-sqnr` was given.
#[derive(Serialize)]
struct QuantizeReport<'a> {
    #[serde(flatten)]
    report: &'a Report,
    #[serde(skip_serializing_if = "Option::is_none")]
    mixed_precision: Option<&'a npu_core::quant::amp::MixedPrecision>,
    /// Cross-layer equalization, pair by pair: weight channel-range spread before and after.
    #[serde(skip_serializing_if = "Option::is_none")]
    equalization: Option<&'a [npu_core::quant::equalize::PairReport]>,
    /// Bias absorption: each conv pair (the activation between, channels shifted, the
    /// activation grid's width before and after) and the held-back verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    bias_absorption: Option<&'a npu_core::quant::absorb::Absorbed>,
    /// Range refinement: every activation range it changed (from, to, the gain where it was
    /// judged) and the held-back verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    range_refinement: Option<&'a npu_core::quant::refine::Refined>,
    /// SeqMSE weight ranges: every layer searched (channels narrowed, its output SQNR with
    /// max-abs and with the chosen ranges) and the held-back verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    seq_mse: Option<&'a npu_core::quant::seqmse::SeqMse>,
    /// GPTQ: every layer solved (inputs, channels, codes changed, its output SQNR from the
    /// weights rounded to nearest and from GPTQ's codes) and the held-back verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    gptq: Option<&'a npu_core::quant::gptq::Gptq>,
    /// SmoothQuant: each LayerNorm smoothed (its readers, the activation and weight channel
    /// spreads before and after) and the held-back verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    smoothing: Option<&'a npu_core::quant::smooth::Smoothed>,
}

/// The name a plan records for its recipe: the preset, or the recipe file's name.
fn recipe_name(path: Option<&Path>, recipe: &Recipe) -> String {
    match path {
        Some(p) => format!(
            "{} ({} rules on {})",
            p.file_name()
                .map_or_else(|| p.display().to_string(), |f| f.to_string_lossy().into_owned()),
            recipe.rules.len(),
            recipe.preset
        ),
        None => recipe.preset.clone(),
    }
}

/// What `simulate` and `analyze` start from: the plan, the preprocessing and the optimized
/// model its names refer to.
pub(super) fn plan_inputs(model_path: &Path, plan_path: &Path) -> Result<(QuantPlan, Model)> {
    let plan = pipeline::load_plan(plan_path)?;
    let mut model = optimized(model_path)?;
    npu_core::quant::equalize::apply(&mut model, &plan.equalization)
        .with_context(|| format!("{} on {}", plan_path.display(), model_path.display()))?;
    npu_core::quant::absorb::apply(&mut model, &plan.absorption)
        .with_context(|| format!("{} on {}", plan_path.display(), model_path.display()))?;
    npu_core::quant::smooth::apply(&mut model, &plan.smoothing)
        .with_context(|| format!("{} on {}", plan_path.display(), model_path.display()))?;
    npu_core::quant::seqmse::check(&model.graph, &plan.weight_clip)
        .with_context(|| format!("{} on {}", plan_path.display(), model_path.display()))?;
    npu_core::quant::gptq::check(&model.graph, &plan.gptq)
        .with_context(|| format!("{} on {}", plan_path.display(), model_path.display()))?;
    Ok((plan, model))
}

/// One line for cross-layer equalization: pairs, and the median channel-range spread of
/// their weights before and after.
fn print_equalization(e: &npu_core::quant::equalize::Equalized) {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(1.0)
    };
    let of = |f: fn(&npu_core::quant::equalize::PairReport) -> f64| median(e.pairs.iter().map(f).collect());
    println!(
        "cross-layer equalization: {} conv pairs; median weight channel-range spread (max/min) of the first layer {:.1} → {:.1}, of the second {:.1} → {:.1}",
        e.pairs.len(),
        of(|p| p.first_spread_before),
        of(|p| p.first_spread_after),
        of(|p| p.second_spread_before),
        of(|p| p.second_spread_after),
    );
}

/// `npu-studio simulate`: the fake-quant simulation of a plan and its error report.
pub fn simulate_plan(
    model_path: &Path,
    plan_path: &Path,
    eval: &str,
    preprocess: Option<&str>,
    report_path: Option<&Path>,
    csv: Option<&Path>,
    threads: usize,
) -> Result<()> {
    let (plan, model) = plan_inputs(model_path, plan_path)?;
    let q = pipeline::quantizer(&model, threads)?;
    let report = simulate(&q, &plan, &open_set("evaluation", eval, preprocess.unwrap_or(""))?)?;
    print_summary(&report);
    if let Some(p) = report_path {
        write_report(p, &report)?;
    }
    if let Some(p) = csv {
        npu_core::export::write_atomic(p, report.to_csv().as_bytes())?;
    }
    Ok(())
}

pub(super) fn simulate(q: &npu_core::quant::Quantizer<'_>, plan: &QuantPlan, set: &Samples) -> Result<Report> {
    let r = pipeline::simulate(q, plan, set, &Stderr);
    end_progress();
    Ok(r?)
}

fn print_summary(r: &Report) {
    let f = |x: Option<f64>| x.map_or("exact".to_string(), |v| format!("{v:.2} dB"));
    for o in &r.outputs {
        let integer = if r.integer_note.is_none() {
            format!("; integer reference {}", f(o.integer_sqnr_db))
        } else {
            String::new()
        };
        println!(
            "output {}: SQNR {} (cosine {:.6}){integer}",
            o.name,
            f(o.sqnr_db),
            o.cosine
        );
    }
    if let Some(n) = &r.integer_note {
        println!("integer reference: {n}");
    }
    let mut worst: Vec<_> = r.tensors.iter().filter(|t| t.sqnr_local_db.is_some()).collect();
    worst.sort_by(|a, b| {
        a.sqnr_local_db
            .unwrap_or(0.0)
            .total_cmp(&b.sqnr_local_db.unwrap_or(0.0))
    });
    println!(
        "worst layers by local SQNR ({} tensors, {} eval samples, {:.1} s):",
        r.tensors.len(),
        r.eval_samples,
        r.seconds
    );
    for t in worst.iter().take(5) {
        println!(
            "  {:>8}  local {:>10}  cumulative {:>10}  {}",
            t.op,
            f(t.sqnr_local_db),
            f(t.sqnr_cumulative_db),
            t.node
        );
    }
}

/// What `analyze --report` writes: the simulation report plus the analyses.
#[derive(Serialize)]
struct AnalyzeReport {
    #[serde(flatten)]
    report: Report,
    analysis: npu_core::quant::analysis::Analysis,
}

pub fn analyze(
    model_path: &Path,
    plan_path: &Path,
    eval: &str,
    preprocess: Option<&str>,
    report_path: &Path,
    threads: usize,
) -> Result<()> {
    let (plan, model) = plan_inputs(model_path, plan_path)?;
    let pre = preprocess.unwrap_or("");
    let q = pipeline::quantizer(&model, threads)?;
    let t = std::time::Instant::now();
    let set = open_set("evaluation", eval, pre)?;
    let report = simulate(&q, &plan, &set)?;
    let analysis = pipeline::analyze(&q, &plan, &set, &Stderr);
    end_progress();
    let analysis = analysis?;
    print_summary(&report);
    let f = |x: Option<f64>| x.map_or("exact".to_string(), |v| format!("{v:.2} dB"));
    println!(
        "output SQNR: full plan {}, weights only {}, activations only {}",
        f(analysis.full.sqnr_db),
        f(analysis.weights_only.sqnr_db),
        f(analysis.activations_only.sqnr_db)
    );
    println!("most sensitive layers (output SQNR with only this layer quantized / all but this one):");
    for l in analysis.layers.iter().take(5) {
        let held = if analysis.held_back > 0 {
            format!(
                "  (fitting {} / {}, held back {} / {})",
                f(l.only_this_fit_db),
                f(l.all_but_this_fit_db),
                f(l.only_this_held_db),
                f(l.all_but_this_held_db)
            )
        } else {
            String::new()
        };
        println!(
            "  {:>8}  {:>10} / {:>10}  {}{held}",
            l.op,
            f(l.only_this_db),
            f(l.all_but_this_db),
            l.node
        );
    }
    if let Some(c) = &analysis.rank_check {
        println!("{}", c.summary(analysis.held_back));
    }
    println!(
        "{} layers swept, {} histograms; analysis took {:.1} s; report written to {}",
        analysis.layers.len(),
        analysis.histograms.len(),
        t.elapsed().as_secs_f64(),
        report_path.display()
    );
    write_report(report_path, &AnalyzeReport { report, analysis })
}
