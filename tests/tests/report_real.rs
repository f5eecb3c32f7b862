//! The study report on a real model: PP-OCR cls calibrated on the eight crops, measured on
//! a held-out photo, compiled for the Ethos-U55-128. The page must hold every section and
//! every simulated tensor, fetch nothing, escape what the model names, and agree with the
//! CSV and JSON written beside it. (`scripts/check_report.py` opens it in Chromium.)

use npu_core::ir::Model;
use npu_core::pipeline::{self, Passes, PlanRequest, Samples};
use npu_core::progress::Silent;
use npu_core::quant::QuantPlan;
use npu_core::report::{ModelSummary, StudyReport, html};
use npu_tests::data_dir;
use std::collections::HashMap;

const PRE: &str = "size=48x192;color=bgr;scale=1/255;mean=0.5;std=0.5";

/// PP-OCR cls optimized, and its w8a8 plan calibrated on the eight crops (also returned).
fn cls_w8a8() -> (Model, QuantPlan, Samples) {
    let path = data_dir().join("models/ppocr_cls.onnx");
    let imported = npu_core::import::load(&path)
        .expect("loads (scripts/fetch_models.py)")
        .0;
    let model = pipeline::optimize(&imported, &Passes::All, &Silent)
        .expect("optimizes")
        .model;
    let q = pipeline::quantizer(&model, 2).expect("quantizer");
    let crops = Samples::open(data_dir().join("crops8").to_str().expect("path"), PRE).expect("crops");
    let stats = pipeline::calibrate(&q, &crops, &Silent).expect("calibrates");
    let plan = pipeline::plan(&q, &stats, &crops, &PlanRequest::preset("w8a8"), &Silent)
        .expect("plans")
        .plan;
    (model, plan, crops)
}

fn report() -> StudyReport {
    let (model, plan, _) = cls_w8a8();
    let q = pipeline::quantizer(&model, 2).expect("quantizer");
    let eval =
        Samples::open(data_dir().join("inputs/cls_coffee.npy").to_str().expect("path"), "").expect("a held-out photo");
    let sim = pipeline::simulate(&q, &plan, &eval, &Silent).expect("simulates");
    let analysis = pipeline::analyze(&q, &plan, &eval, &Silent).expect("analyzes");
    let program = pipeline::legalize(&model, &plan, &HashMap::new()).expect("legalizes");
    let target = pipeline::target("ethos-u55-128").expect("target");
    let compiled = pipeline::compile(&program, &target, &npu_core::compiler::Options::default());
    StudyReport::new(
        ModelSummary::of(&model, "models/ppocr_cls.onnx", &plan.input_shapes),
        &plan,
        &sim,
        Some(&analysis),
        None,
        Some(&compiled),
    )
}

#[test]
fn the_report_holds_every_layer_and_fetches_nothing() {
    let mut r = report();
    assert!(r.layers.len() > 50, "{} layers", r.layers.len());
    assert!(
        r.model.macs > 1_000_000,
        "MACs at the calibration shape: {}",
        r.model.macs
    );
    assert!(
        r.layers.iter().any(|l| l.only_this_db.is_some()),
        "no sensitivity joined"
    );
    assert!(
        r.layers.iter().all(|l| l.device.is_some()),
        "a layer without a placement"
    );
    // A hostile node name is shown, not run.
    r.layers[0].node = "<script>alert(1)</script>".into();
    let page = html(&r);
    assert!(!page.contains("<script>alert"), "a node name was not escaped");
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    for section in ["summary", "outputs", "plots", "layers", "target"] {
        assert!(
            page.contains(&format!("<section id=\"{section}\"")),
            "no {section} section"
        );
    }
    // Nothing to fetch: no sources, style sheets or addresses other than the SVG namespace.
    for bad in ["src=", "<link", "url(", "@import", "fetch("] {
        assert!(!page.contains(bad), "the page would fetch something: {bad}");
    }
    let addresses = page.matches("http").count();
    assert_eq!(
        addresses,
        page.matches("http://www.w3.org/2000/svg").count(),
        "an address other than the SVG namespace"
    );
    // One table row per simulated tensor, and the same rows in the CSV.
    let body = &page[page.find("<section id=\"layers\"").expect("layers")..];
    let body = &body[..body.find("</section>").expect("end")];
    assert_eq!(
        body.matches("<tr>").count(),
        r.layers.len() + 1,
        "rows (and the header)"
    );
    let csv = r.layers_csv();
    assert_eq!(csv.lines().count(), r.layers.len() + 1);
    for l in &r.layers[1..] {
        assert!(page.contains(&npu_core::report::esc(&l.tensor)), "{} missing", l.tensor);
        assert!(csv.contains(&l.tensor), "{} missing from the CSV", l.tensor);
    }
    // The JSON reads back.
    let json = serde_json::to_string(&r).expect("json");
    let back: StudyReport = serde_json::from_str(&json).expect("reads back");
    assert_eq!(back.layers.len(), r.layers.len());
    assert_eq!(
        back.target.expect("target").ops_total,
        r.target.expect("target").ops_total
    );
}

/// The sensitivity sweep ranks on the fitting part of the evaluation set and checks the
/// ranking on the held-back part: PP-OCR cls on the eight crops, the last two held back.
#[test]
fn sensitivity_is_ranked_on_fitting_crops_and_checked_on_held_back_ones() {
    let (model, plan, crops) = cls_w8a8();
    let q = pipeline::quantizer(&model, 2).expect("quantizer");
    let a = pipeline::analyze(&q, &plan, &crops, &Silent).expect("analyzes");
    assert_eq!(a.held_back, 2, "the last third of 8 samples");
    let check = a.rank_check.as_ref().expect("a ranking check with samples held back");
    for rho in [check.only_this_rho, check.all_but_this_rho] {
        let rho = rho.expect("a rank correlation over 80 layers");
        assert!((-1.0..=1.0).contains(&rho), "rho {rho}");
    }
    assert!(check.top5_overlap <= 5);
    let mut last = f64::NEG_INFINITY;
    for l in &a.layers {
        let (Some(all), Some(fit), Some(held)) = (l.only_this_db, l.only_this_fit_db, l.only_this_held_db) else {
            continue;
        };
        // Ranked on the fitting part.
        assert!(fit >= last, "{} out of order: {fit} after {last}", l.node);
        last = fit;
        // The whole set's SQNR pools both parts' energies, so it lies between them: the
        // parts are the set split, not two other measurements.
        let (lo, hi) = (fit.min(held), fit.max(held));
        assert!(
            all >= lo - 1e-9 && all <= hi + 1e-9,
            "{}: {all} dB over all crops, not between {fit} and {held}",
            l.node
        );
    }
    assert!(last > f64::NEG_INFINITY, "no layer with both parts measured");
    let line = check.summary(a.held_back);
    assert!(line.contains("2 held back"), "{line}");
}
