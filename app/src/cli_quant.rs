//! `npu-studio quantize` and `npu-studio analyze`: the quantizer from the command line.

use anyhow::{Context, Result, bail};
use npu_core::ir::Model;
use npu_core::progress::Progress;
use npu_core::quant::data::{Preprocess, source};
use npu_core::quant::observer::Calibration;
use npu_core::quant::recipe::Recipe;
use npu_core::quant::{QuantPlan, Quantizer, Report, preset};
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// Progress on stderr, one line rewritten in place.
struct Stderr;

impl Progress for Stderr {
    fn update(&self, done: usize, total: usize, what: &str) {
        use std::io::IsTerminal;
        if !std::io::stderr().is_terminal() {
            return;
        }
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[2K[{done}/{total}] {what}");
        let _ = e.flush();
    }
    fn cancelled(&self) -> bool {
        false
    }
}

fn end_progress() {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
}

/// The model with the graph-optimization passes applied (the plan's names refer to it).
fn optimized(path: &Path) -> Result<Model> {
    let (model, report) = npu_core::import::load(path)?;
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    let o = npu_core::passes::optimize(&model, &npu_core::passes::Options::default())
        .with_context(|| format!("optimizing {}", path.display()))?;
    Ok(o.model)
}

fn write_report(path: &Path, report: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(report)?;
    npu_core::export::write_atomic(path, text.as_bytes()).with_context(|| format!("writing {}", path.display()))
}

fn warn_synthetic(what: &str, path: &str) {
    if path.starts_with("synthetic:") {
        eprintln!("WARNING: {what} uses SYNTHETIC random data ({path}); ranges and errors will not match real inputs");
    }
}

/// What `npu-studio quantize` is asked to do.
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
    pub target_sqnr: Option<f64>,
    pub promote_to: &'a str,
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
        target_sqnr,
        promote_to,
    } = *a;
    if eval.is_none() && (report_path.is_some() || csv.is_some()) {
        bail!("--report and --csv need --eval PATH (the evaluation set)");
    }
    let recipe = match recipe {
        Some(p) => load_recipe(p)?,
        None => Recipe::from_preset(preset_name),
    };
    let recipe_name = recipe_name(a.recipe, &recipe);
    preset(&recipe.preset).map_err(anyhow::Error::msg)?;
    let method = method.map(Calibration::parse).transpose().map_err(anyhow::Error::msg)?;
    let pre = Preprocess::parse(preprocess.unwrap_or("")).map_err(anyhow::Error::msg)?;
    let model = optimized(model_path)?;
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
    let method = method.unwrap_or(resolved.calibration);
    let q = Quantizer::new(&model, threads)?;
    warn_synthetic("calibration", calib);
    let src = source(calib)?;
    let t = std::time::Instant::now();
    let made = q.make_plan(
        &src,
        &pre,
        &recipe_name,
        &recipe.preset,
        &resolved,
        method,
        !no_bias_correction,
        &Stderr,
    );
    end_progress();
    let (mut plan, bc) = made?;
    if let Some(bc) = bc {
        let db = |x: Option<f64>| x.map_or("exact".into(), |v| format!("{v:.2} dB"));
        println!(
            "bias correction: calibration-set output SQNR {} → {}; {}",
            db(bc.without),
            db(bc.with),
            if bc.kept { "kept" } else { "dropped" }
        );
    }
    let calib_s = t.elapsed().as_secs_f64();
    let mut amp = None;
    if let Some(target) = target_sqnr {
        let to = npu_core::quant::LayerPrecision::parse(promote_to).map_err(anyhow::Error::msg)?;
        // The search is part of making the plan: it runs on the calibration set (where the
        // bias corrections it measures again come from); --eval only reports.
        let src = source(calib)?;
        let cached = q.cache(&mut src.samples(&model, &pre))?;
        let r = q.mixed_precision(&plan, &cached, target, to, &Stderr);
        end_progress();
        let (mp, p) = r?;
        let db = |x: Option<f64>| x.map_or("exact".into(), |v| format!("{v:.2} dB"));
        println!(
            "mixed precision to {target:.2} dB (layers promoted to {promote_to}, of {}):",
            mp.layers_total
        );
        for c in &mp.curve {
            println!(
                "  {:>4} layers  {:>10.0} activation bytes  {}",
                c.promoted,
                c.cost_bytes,
                db(c.sqnr_db)
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
                "  the target is not reached on this curve ({:.1} s); plan left unchanged",
                mp.seconds
            ),
        }
        plan = p;
        amp = Some(mp);
    }
    let text = ron::ser::to_string_pretty(&plan, ron::ser::PrettyConfig::default())?;
    npu_core::export::write_atomic(out, text.as_bytes()).with_context(|| format!("writing {}", out.display()))?;
    println!(
        "{}: {} recipe, {} calibration on {} samples in {calib_s:.1} s, {} activations ({} layers off the default); plan written to {}",
        model_path.display(),
        plan.preset,
        method.name(),
        plan.calibration_samples,
        plan.ranges.len(),
        plan.layers.len(),
        out.display()
    );
    let Some(eval) = eval else {
        return Ok(());
    };
    let report = simulate(&q, &plan, eval, &pre)?;
    print_summary(&report);
    if let Some(p) = report_path {
        write_report(
            p,
            &QuantizeReport {
                report: &report,
                mixed_precision: amp.as_ref(),
            },
        )?;
    }
    if let Some(p) = csv {
        npu_core::export::write_atomic(p, report.to_csv().as_bytes())?;
    }
    Ok(())
}

/// What `quantize --report` writes: the simulation report, plus the mixed-precision curve
/// when `--target-sqnr` was given.
#[derive(Serialize)]
struct QuantizeReport<'a> {
    #[serde(flatten)]
    report: &'a Report,
    #[serde(skip_serializing_if = "Option::is_none")]
    mixed_precision: Option<&'a npu_core::quant::amp::MixedPrecision>,
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
fn plan_inputs(
    model_path: &Path,
    plan_path: &Path,
    preprocess: Option<&str>,
) -> Result<(QuantPlan, Preprocess, Model)> {
    let plan = read_plan(plan_path)?;
    let pre = Preprocess::parse(preprocess.unwrap_or("")).map_err(anyhow::Error::msg)?;
    Ok((plan, pre, optimized(model_path)?))
}

fn read_plan(path: &Path) -> Result<QuantPlan> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    ron::from_str(&text).with_context(|| format!("{}: not a quantization plan", path.display()))
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
    let (plan, pre, model) = plan_inputs(model_path, plan_path, preprocess)?;
    let q = Quantizer::new(&model, threads)?;
    let report = simulate(&q, &plan, eval, &pre)?;
    print_summary(&report);
    if let Some(p) = report_path {
        write_report(p, &report)?;
    }
    if let Some(p) = csv {
        npu_core::export::write_atomic(p, report.to_csv().as_bytes())?;
    }
    Ok(())
}

fn simulate(q: &Quantizer<'_>, plan: &QuantPlan, eval: &str, pre: &Preprocess) -> Result<Report> {
    warn_synthetic("evaluation", eval);
    let src = source(eval)?;
    let r = q.simulate(plan, &mut src.samples(q.model, pre), src.len(), &Stderr);
    end_progress();
    Ok(r?)
}

fn print_summary(r: &Report) {
    let f = |x: Option<f64>| x.map_or("exact".to_string(), |v| format!("{v:.2} dB"));
    for o in &r.outputs {
        println!("output {}: SQNR {} (cosine {:.6})", o.name, f(o.sqnr_db), o.cosine);
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
    let (plan, pre, model) = plan_inputs(model_path, plan_path, preprocess)?;
    let q = Quantizer::new(&model, threads)?;
    let t = std::time::Instant::now();
    let report = simulate(&q, &plan, eval, &pre)?;
    let src = source(eval)?;
    let cached = q.cache(&mut src.samples(&model, &pre))?;
    let analysis = q.analyze(&plan, &cached, &Stderr);
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
        println!(
            "  {:>8}  {:>10} / {:>10}  {}",
            l.op,
            f(l.only_this_db),
            f(l.all_but_this_db),
            l.node
        );
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
