//! `npu-studio quantize` and `npu-studio analyze`: the quantizer from the command line.

use anyhow::{Context, Result, bail};
use npu_core::ir::Model;
use npu_core::progress::Progress;
use npu_core::quant::data::{Preprocess, source};
use npu_core::quant::observer::Calibration;
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

#[allow(clippy::too_many_arguments)]
pub fn quantize(
    model_path: &Path,
    calib: &str,
    preprocess: Option<&str>,
    preset_name: &str,
    method: Option<&str>,
    eval: Option<&str>,
    out: &Path,
    report_path: Option<&Path>,
    csv: Option<&Path>,
    threads: usize,
    no_bias_correction: bool,
    target_sqnr: Option<f64>,
    promote_to: &str,
) -> Result<()> {
    if eval.is_none() && (report_path.is_some() || csv.is_some()) {
        bail!("--report and --csv need --eval PATH (the evaluation set)");
    }
    let (_, default_method) = preset(preset_name).map_err(anyhow::Error::msg)?;
    let method = match method {
        Some(m) => Calibration::parse(m).map_err(anyhow::Error::msg)?,
        None => default_method,
    };
    let pre = Preprocess::parse(preprocess.unwrap_or("")).map_err(anyhow::Error::msg)?;
    let model = optimized(model_path)?;
    let q = Quantizer::new(&model, threads)?;
    warn_synthetic("calibration", calib);
    let src = source(calib)?;
    let t = std::time::Instant::now();
    let plan = q.calibrate(&mut src.samples(&model, &pre), src.len(), preset_name, method, &Stderr);
    end_progress();
    let mut plan = plan?;
    if !no_bias_correction {
        let corr = q.bias_corrections(&plan, &mut src.samples(&model, &pre), &Stderr);
        end_progress();
        let corr = corr?;
        // Keep the correction only where it helps the whole model on the calibration data:
        // each layer's shift is measured alone, and on some models the shifts interact.
        let cached = q.cache(&mut src.samples(&model, &pre))?;
        let without = q.output_sqnr(&plan, &cached)?.sqnr_db;
        let mut with_plan = plan.clone();
        with_plan.bias_correction = corr;
        let with = q.output_sqnr(&with_plan, &cached)?.sqnr_db;
        let db = |x: Option<f64>| x.map_or("exact".into(), |v| format!("{v:.2} dB"));
        if with.unwrap_or(f64::INFINITY) >= without.unwrap_or(f64::INFINITY) {
            println!(
                "bias correction: calibration-set output SQNR {} → {}; kept",
                db(without),
                db(with)
            );
            plan = with_plan;
        } else {
            println!(
                "bias correction: calibration-set output SQNR {} → {}; dropped",
                db(without),
                db(with)
            );
        }
    }
    let calib_s = t.elapsed().as_secs_f64();
    let mut amp = None;
    if let Some(target) = target_sqnr {
        let to = npu_core::quant::LayerPrecision::parse(promote_to).map_err(anyhow::Error::msg)?;
        let set = eval.unwrap_or(calib);
        let src = source(set)?;
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
            Some(k) => println!(
                "  chosen: {k} layers ({:.1}% of {}), in {:.1} s",
                100.0 * k as f64 / mp.layers_total.max(1) as f64,
                mp.layers_total,
                mp.seconds
            ),
            None => println!("  the target is not reached even with every layer promoted; plan left unchanged"),
        }
        plan = p;
        amp = Some(mp);
    }
    let text = ron::ser::to_string_pretty(&plan, ron::ser::PrettyConfig::default())?;
    npu_core::export::write_atomic(out, text.as_bytes()).with_context(|| format!("writing {}", out.display()))?;
    println!(
        "{}: {} preset, {} calibration on {} samples in {calib_s:.1} s, {} activations; plan written to {}",
        model_path.display(),
        preset_name,
        method.name(),
        plan.calibration_samples,
        plan.ranges.len(),
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
    let text = std::fs::read_to_string(plan_path).with_context(|| format!("reading {}", plan_path.display()))?;
    let plan: QuantPlan =
        ron::from_str(&text).with_context(|| format!("{}: not a quantization plan", plan_path.display()))?;
    let pre = Preprocess::parse(preprocess.unwrap_or("")).map_err(anyhow::Error::msg)?;
    let model = optimized(model_path)?;
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
