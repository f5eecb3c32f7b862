//! The quantizer on a real model (PP-OCR cls, a PaddlePaddle export) with real photos:
//! uint8 asymmetric weight SQNR against an independent f64 computation, the w8a8 preset's
//! output SQNR and report, calibration from an image folder, and clear errors for bad
//! calibration input.

use npu_core::ir::{Model, Tensor};
use npu_core::progress::Silent;
use npu_core::quant::data::{Preprocess, source};
use npu_core::quant::observer::Calibration;
use npu_core::quant::scheme::WeightFormat;
use npu_core::quant::{QuantError, QuantPlan, Quantizer, Report};
use npu_tests::data_dir;
use std::path::{Path, PathBuf};

fn cls_model() -> Model {
    npu_tests::optimized(&data_dir().join("models").join("ppocr_cls.onnx"))
}

/// A folder holding only one PP-OCR model's preprocessed photos (`data/inputs/<which>_*.npy`).
fn model_inputs(tmp: &Path, which: &str) -> PathBuf {
    let dir = tmp.join(format!("{which}_inputs"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    for e in std::fs::read_dir(data_dir().join("inputs")).expect("data/inputs (run scripts/fetch_models.py)") {
        let p = e.expect("entry").path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("").to_string();
        if name.starts_with(&format!("{which}_")) {
            std::fs::copy(&p, dir.join(name)).expect("copy");
        }
    }
    dir
}

fn cls_inputs(tmp: &Path) -> PathBuf {
    model_inputs(tmp, "cls")
}

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("npu_quant_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp");
    d
}

/// The `w8a8` plan calibrated with MSE on every sample of `src`.
fn w8a8_plan(q: &Quantizer<'_>, src: &npu_core::quant::data::Source, pre: &Preprocess) -> QuantPlan {
    q.calibrate(
        &mut src.samples(q.model, pre),
        src.len(),
        "w8a8",
        Calibration::Mse,
        &Silent,
    )
    .expect("calibrates")
}

fn plan_and_report(model: &Model, dir: &str, pre: &Preprocess, edit: impl Fn(&mut QuantPlan)) -> (QuantPlan, Report) {
    let q = Quantizer::new(model, 2).expect("quantizer");
    let src = source(dir).expect("source");
    let mut plan = w8a8_plan(&q, &src, pre);
    edit(&mut plan);
    let report = q
        .simulate(&plan, &mut src.samples(model, pre), src.len(), &Silent)
        .expect("simulates");
    (plan, report)
}

/// SQNR of uint8 asymmetric per-tensor quantization, computed here in f64 from the formula.
fn reference_uint8_sqnr(w: &[f32]) -> f64 {
    let lo = w.iter().map(|&v| f64::from(v)).fold(0.0, f64::min);
    let hi = w.iter().map(|&v| f64::from(v)).fold(0.0, f64::max);
    let scale = (hi - lo) / 255.0;
    let zp = (-lo / scale).round_ties_even().clamp(0.0, 255.0);
    let (mut s, mut e) = (0.0, 0.0);
    for &v in w {
        let x = f64::from(v);
        let q = ((x / scale).round_ties_even() + zp).clamp(0.0, 255.0);
        let d = (q - zp) * scale;
        s += x * x;
        e += (x - d) * (x - d);
    }
    10.0 * (s / e).log10()
}

#[test]
fn uint8_asymmetric_weight_sqnr_matches_f64_reference() {
    let model = cls_model();
    let tmp = tmp_dir("uint8");
    let dir = cls_inputs(&tmp);
    let (_, report) = plan_and_report(&model, dir.to_str().expect("utf-8"), &Preprocess::default(), |p| {
        p.default.weights = WeightFormat::Uint8;
    });
    let g = &model.graph;
    let mut checked = 0;
    for w in &report.weights {
        if w.format != WeightFormat::Uint8 || w.kind == "bias" || w.elements < 16 {
            continue;
        }
        let v = g.value_id(&w.name).expect("weight exists");
        let Tensor::F32(a) = g.values[v].constant.as_ref().expect("constant").tensor() else {
            panic!("{}: not f32", w.name)
        };
        let data: Vec<f32> = a.iter().copied().collect();
        let want = reference_uint8_sqnr(&data);
        let Some(got) = w.sqnr_db else {
            assert!(want.is_infinite(), "{}: ours exact, reference {want}", w.name);
            continue;
        };
        assert!(
            (got - want).abs() <= 0.01,
            "{}: ours {got:.4} dB, f64 reference {want:.4} dB",
            w.name
        );
        // onnxruntime's debugger subtracts zero points in uint8 and reports negative SQNR
        // for such weights; the true values are well above 20 dB.
        assert!(want > 20.0, "{}: {want}", w.name);
        checked += 1;
    }
    println!("uint8 asymmetric weights checked against the f64 reference: {checked}");
    assert!(checked >= 30, "only {checked} weight tensors checked");
}

#[test]
fn w8a8_on_real_photos_reports_every_tensor() {
    let model = cls_model();
    let tmp = tmp_dir("w8a8");
    let dir = cls_inputs(&tmp);
    let (plan, report) = plan_and_report(&model, dir.to_str().expect("utf-8"), &Preprocess::default(), |_| {});
    let out = &report.outputs[0];
    let sqnr = out.sqnr_db.expect("quantized output is inexact");
    println!(
        "ppocr_cls w8a8: output SQNR {sqnr:.2} dB over {} photos",
        report.eval_samples
    );
    assert!(sqnr > 20.0, "output SQNR {sqnr}");
    assert!(out.cosine > 0.99);
    assert_eq!(report.eval_samples, 6);
    assert!(report.tensors.len() >= 60, "{} tensors", report.tensors.len());
    // The last tensor is the output: its cumulative SQNR is the output's.
    let last = report
        .tensors
        .iter()
        .find(|t| t.name == out.name)
        .expect("output tensor");
    assert_eq!(last.sqnr_cumulative_db, out.sqnr_db);
    for t in &report.tensors {
        let (l, c) = (
            t.sqnr_local_db.unwrap_or(f64::INFINITY),
            t.sqnr_cumulative_db.unwrap_or(f64::INFINITY),
        );
        assert!(l > 10.0, "{}: local {l}", t.node);
        assert!(c.is_finite() || l.is_infinite(), "{}", t.node);
    }
    // The plan round-trips through RON unchanged (what `quantize --out` writes).
    let text = ron::ser::to_string_pretty(&plan, ron::ser::PrettyConfig::default()).expect("ron");
    let back: QuantPlan = ron::from_str(&text).expect("parses");
    assert_eq!(back, plan);
}

#[test]
fn calibration_from_an_image_folder() {
    let model = cls_model();
    let pre = Preprocess::parse("size=48x192;color=bgr;scale=1/255;mean=0.5;std=0.5").expect("spec");
    let dir = data_dir().join("images");
    let (plan, report) = plan_and_report(&model, dir.to_str().expect("utf-8"), &pre, |_| {});
    let sqnr = report.outputs[0].sqnr_db.expect("inexact");
    println!("ppocr_cls w8a8 calibrated on PNG photos: output SQNR {sqnr:.2} dB");
    assert_eq!(plan.calibration_samples, 6);
    assert!(sqnr > 20.0, "{sqnr}");
}

/// What calibrating through the pipeline on `path` fails with: a set that cannot be listed
/// fails to open, a sample that cannot be read or run fails the calibration; either names
/// the path or file.
fn calib_error(model: &Model, path: &str) -> String {
    use npu_core::pipeline::{self, CalibrateError, Samples, SamplesError};
    let q = pipeline::quantizer(model, 1).expect("quantizer");
    let set = match Samples::open(path, "") {
        Ok(set) => set,
        Err(e @ SamplesError::Data(_)) => return e.to_string(),
        Err(e) => panic!("unexpected error kind: {e}"),
    };
    match pipeline::calibrate(&q, &set, &Silent) {
        Err(CalibrateError::Quant(e @ (QuantError::Samples(_) | QuantError::Data(_)))) => e.to_string(),
        Err(e) => panic!("unexpected error kind: {e}"),
        Ok(_) => panic!("{path}: calibration succeeded on bad input"),
    }
}

/// A float32 `.npy` file.
fn write_npy(path: &Path, shape: &[usize], data: &[f32]) {
    let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}{}), }}",
        dims.join(", "),
        if shape.len() == 1 { "," } else { "" }
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((header.len() as u16).to_le_bytes());
    bytes.extend(header.as_bytes());
    for v in data {
        bytes.extend(v.to_le_bytes());
    }
    std::fs::write(path, bytes).expect("write npy");
}

#[test]
fn bad_calibration_input_names_the_file() {
    let model = cls_model();
    let tmp = tmp_dir("bad");
    let missing = tmp.join("nope");
    let m = calib_error(&model, missing.to_str().expect("utf-8"));
    assert!(m.contains("nope") && m.contains("no such"), "{m}");

    let empty = tmp.join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let m = calib_error(&model, empty.to_str().expect("utf-8"));
    assert!(m.contains("empty") && m.contains("no .npy"), "{m}");

    let garbage = tmp.join("garbage");
    std::fs::create_dir_all(&garbage).expect("mkdir");
    std::fs::write(garbage.join("broken.png"), b"\x89PNG\r\n\x1a\nnot really").expect("write");
    let m = calib_error(&model, garbage.to_str().expect("utf-8"));
    assert!(m.contains("broken.png") && m.contains("decode"), "{m}");

    let shape = tmp.join("shape");
    std::fs::create_dir_all(&shape).expect("mkdir");
    write_npy(&shape.join("small.npy"), &[3, 48, 192], &vec![0.5; 3 * 48 * 192]);
    let m = calib_error(&model, shape.to_str().expect("utf-8"));
    assert!(m.contains("small.npy") && m.contains("expects shape"), "{m}");

    // Dynamic dims accept any size; one the model cannot take fails in a node, still named
    // with the file.
    let tiny = tmp.join("tiny");
    std::fs::create_dir_all(&tiny).expect("mkdir");
    write_npy(&tiny.join("tiny.npy"), &[1, 3, 1, 1], &[0.5; 3]);
    let m = calib_error(&model, tiny.to_str().expect("utf-8"));
    assert!(m.contains("tiny.npy") && m.contains("MaxPool"), "{m}");

    let nan = tmp.join("nan");
    std::fs::create_dir_all(&nan).expect("mkdir");
    let mut data = vec![0.1f32; 3 * 48 * 192];
    data[100] = f32::NAN;
    write_npy(&nan.join("nan.npy"), &[1, 3, 48, 192], &data);
    let m = calib_error(&model, nan.to_str().expect("utf-8"));
    assert!(m.contains("nan.npy") && m.contains("non-finite"), "{m}");
    println!("bad calibration input errors name the file, e.g.: {m}");
}

/// A recipe read from RON: rules by op type and name regex reach the plan, the report shows
/// each layer's format, and the promoted layers carry less error through the network.
#[test]
fn recipe_rules_reach_the_report() {
    use npu_core::quant::recipe::Recipe;
    use npu_core::quant::scheme::ActFormat;
    let model = cls_model();
    let tmp = tmp_dir("recipe");
    let dir = cls_inputs(&tmp);
    let dir = dir.to_str().expect("utf-8");
    // The last rule wins over the first on the nodes both match.
    let recipe = Recipe::parse_ron(
        r#"Recipe(
            preset: "w8a8",
            inputs: Some(Int16),
            rules: [
                (op: Some("Conv"), precision: "int16"),
                (name: Some("^Conv@(5|8|11)$"), precision: "fp16"),
            ],
            overrides: {"Conv@16": "int8"},
        )"#,
    )
    .expect("recipe parses");
    let resolved = recipe.resolve(&model.graph).expect("resolves on cls");
    assert_eq!(resolved.matched[1], 3, "three convs named by the regex");
    assert!(resolved.matched[0] > 20, "every Conv and FusedConv");
    let (_, base) = plan_and_report(&model, dir, &Preprocess::default(), |_| {});
    let (plan, report) = plan_and_report(&model, dir, &Preprocess::default(), |p| {
        p.inputs = resolved.inputs;
        p.layers.clone_from(&resolved.layers);
    });
    assert_eq!(plan.inputs, ActFormat::Int16);
    let format = |node: &str| report.tensors.iter().find(|t| t.node == node).map(|t| t.activations);
    assert_eq!(format("Conv@8"), Some(ActFormat::Fp16), "the later rule wins");
    assert_eq!(format("Conv@16"), Some(ActFormat::Int8), "the override wins");
    let others = report
        .tensors
        .iter()
        .filter(|t| t.op.ends_with("Conv") && !["Conv@5", "Conv@8", "Conv@11", "Conv@16"].contains(&t.node.as_str()));
    let mut n = 0;
    for t in others {
        if t.activations != ActFormat::Float {
            assert_eq!(t.activations, ActFormat::Int16, "{}", t.node);
            n += 1;
        }
    }
    assert!(n > 10, "{n} int16 convs");
    // Promoted convs carry less error all along the network. (cls's output is two logits
    // per photo: its SQNR over 6 photos moves either way with any change.)
    let median_cumulative = |r: &Report| {
        let mut v: Vec<f64> = r.tensors.iter().filter_map(|t| t.sqnr_cumulative_db).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b) = (median_cumulative(&base), median_cumulative(&report));
    println!("ppocr_cls: median cumulative SQNR of the tensors, w8a8 {a:.2} dB, with the recipe {b:.2} dB");
    assert!(b > a + 3.0, "w8a8 {a} vs recipe {b}");
}

/// After a precision change, the incremental simulation (only what lies downstream runs
/// again) gives exactly the report a full simulation of the new plan gives.
#[test]
fn incremental_update_matches_full_simulation() {
    use npu_core::quant::LayerPrecision;
    use npu_core::quant::live::Keep;
    let model = cls_model();
    let tmp = tmp_dir("live");
    let dir = cls_inputs(&tmp);
    let dir = dir.to_str().expect("utf-8");
    let q = Quantizer::new(&model, 2).expect("quantizer");
    let src = source(dir).expect("source");
    let pre = Preprocess::default();
    let plan = w8a8_plan(&q, &src, &pre);
    let samples: Vec<_> = src.samples(&model, &pre).map(|s| s.expect("sample").1).collect();
    let mut live = q.live(plan.clone(), samples, Keep::PerTensor, &Silent).expect("live");
    let full_nodes = model.graph.nodes.len() * live.samples();
    // Three changes in a row, deep in the network and near its start, then back.
    let layers = q.layers();
    let deep = &model.graph.nodes[layers[layers.len() * 3 / 4]].name;
    let early = &model.graph.nodes[layers[2]].name;
    let mut p = plan.clone();
    for (name, prec) in [
        (deep.clone(), LayerPrecision::INT16),
        (early.clone(), LayerPrecision::FP16),
        (deep.clone(), LayerPrecision::INT8),
    ] {
        p.layers.insert(name.clone(), prec);
        let ran = q.live_update(&mut live, &p, &Silent).expect("update");
        let inc = q.live_report(&live);
        let full = q
            .simulate(&p, &mut src.samples(&model, &pre), src.len(), &Silent)
            .expect("simulates");
        println!(
            "{name} → {prec:?}: {ran} node runs of {full_nodes}; output {:?} dB",
            inc.outputs[0].sqnr_db
        );
        assert!(ran < full_nodes, "{ran} node runs");
        assert_eq!(inc.outputs[0].sqnr_db, full.outputs[0].sqnr_db, "{name}");
        assert_eq!(inc.tensors.len(), full.tensors.len());
        for (a, b) in inc.tensors.iter().zip(&full.tensors) {
            assert_eq!(a.name, b.name);
            assert_eq!(a.activations, b.activations, "{}", a.name);
            // The same sums, added up per sample instead of in one running total.
            let close = |x: Option<f64>, y: Option<f64>| match (x, y) {
                (Some(x), Some(y)) => (x - y).abs() < 1e-9,
                (x, y) => x == y,
            };
            assert!(
                close(a.sqnr_cumulative_db, b.sqnr_cumulative_db),
                "{}: {a:?} vs {b:?}",
                a.name
            );
            assert!(close(a.sqnr_local_db, b.sqnr_local_db), "{}: {a:?} vs {b:?}", a.name);
        }
    }
    // The deep change alone recomputes less than the early one.
    let mut p2 = p.clone();
    p2.layers.insert(deep.clone(), LayerPrecision::FLOAT);
    let deep_ran = q.live_try(&live, &p2, &Silent).expect("try").recomputed;
    let mut p3 = p.clone();
    p3.layers.insert(early.clone(), LayerPrecision::FLOAT);
    let early_ran = q.live_try(&live, &p3, &Silent).expect("try").recomputed;
    assert!(deep_ran < early_ran, "deep {deep_ran} vs early {early_ran}");
}

/// Mixed precision on PP-OCR rec, searched on three calibration photos (ranked on two, each
/// point validated on the third) to 2 dB above plain w8a8 there, promotes at most a tenth of
/// the layers, and the gain holds on three held-out photos; its curve runs from no layer to
/// every candidate promoted.
/// `m` calibrated `w8a8` on `src` and simulated on `held_out`: the local SQNR of each of
/// `nodes`' outputs (each run alone on its inputs put on their grids), and the report.
fn held_out_locals(
    m: &Model,
    src: &npu_core::quant::data::Source,
    held_out: &npu_core::quant::data::Source,
    nodes: &[&str],
) -> (Vec<f64>, Report) {
    let pre = Preprocess::default();
    let q = Quantizer::new(m, 2).expect("quantizer");
    let plan = w8a8_plan(&q, src, &pre);
    let r = q
        .simulate(&plan, &mut held_out.samples(m, &pre), held_out.len(), &Silent)
        .expect("simulates");
    let at = nodes
        .iter()
        .map(|n| {
            r.tensors
                .iter()
                .find(|t| t.node == *n)
                .and_then(|t| t.sqnr_local_db)
                .unwrap_or_else(|| panic!("no local SQNR for {n}"))
        })
        .collect();
    (at, r)
}

/// PP-OCR rec's calibration photos (no text) and held-out photos (text), as folders in `tmp`.
fn rec_split(tmp: &Path) -> (npu_core::quant::data::Source, npu_core::quant::data::Source) {
    let photos = |dir: &str, names: &[&str]| {
        let d = tmp.join(dir);
        std::fs::create_dir_all(&d).expect("mkdir");
        for n in names {
            let f = format!("rec_{n}.npy");
            std::fs::copy(data_dir().join("inputs").join(&f), d.join(&f)).expect("data/inputs");
        }
        source(d.to_str().expect("utf-8")).expect("source")
    };
    (
        photos("calib", &["astronaut", "chelsea", "coffee"]),
        photos("eval", &["page", "rocket", "text"]),
    )
}

#[test]
fn mixed_precision_on_rec_holds_on_held_out_photos() {
    use npu_core::quant::LayerPrecision;
    let model = npu_tests::optimized(&data_dir().join("models").join("ppocr_rec.onnx"));
    let tmp = tmp_dir("amp");
    let (src, held_out) = rec_split(&tmp);
    let q = Quantizer::new(&model, 2).expect("quantizer");
    let pre = Preprocess::default();
    // With bias corrections (the search measures them again for the layers it changes):
    // without them no promotion raises rec's output SQNR on the calibration photos (with
    // every layer at int16, 15.4 dB against 18.2 at int8).
    let mut plan = w8a8_plan(&q, &src, &pre);
    plan.bias_correction = q
        .bias_corrections(&plan, &mut src.samples(&model, &pre), &Silent)
        .expect("bias correction");
    let cached = q.cache(&mut src.samples(&model, &pre)).expect("cache");
    let evaluated = q.cache(&mut held_out.samples(&model, &pre)).expect("cache");
    let db = |p: &npu_core::quant::QuantPlan, c| q.output_sqnr(p, c).expect("sqnr").sqnr_db.expect("inexact");
    let (on_calib, base) = (db(&plan, &cached), db(&plan, &evaluated));
    let target = on_calib + 2.0;
    let (mp, out) = q
        .mixed_precision(&plan, &cached, target, LayerPrecision::INT16, &Silent)
        .expect("search");
    assert_eq!((mp.fit_samples, mp.held_back), (2, 1));
    for c in &mp.curve {
        println!(
            "{:>3} promoted: fitting {:?} dB, held back {:?} dB",
            c.promoted, c.sqnr_db, c.held_db
        );
    }
    let k = mp.chosen.expect("target reached");
    let point = &mp.curve[mp.curve.iter().position(|c| c.promoted == k).expect("on the curve")];
    assert!(
        point.sqnr_db.expect("inexact") >= target && point.held_db.expect("inexact") >= target,
        "{point:?}"
    );
    // The point before the chosen one misses the target on one of the two.
    let before = &mp.curve[mp.curve.iter().position(|c| c.promoted == k - 1).expect("dense")];
    assert!(before.sqnr_db.expect("inexact") < target || before.held_db.expect("inexact") < target);
    let reached = db(&out, &evaluated);
    println!(
        "ppocr_rec, w8a8 {on_calib:.2} dB on the calibration photos, target {target:.2}: {k} of {} layers promoted; \
         on 3 held-out photos {base:.2} dB → {reached:.2} dB",
        mp.layers_total
    );
    assert!(k > 0 && k * 10 <= mp.layers_total, "{k} of {}", mp.layers_total);
    assert!(reached >= base + 1.0, "{reached} against {base}");
    assert_eq!(mp.curve.first().map(|c| c.promoted), Some(0));
    assert_eq!(mp.curve.last().map(|c| c.promoted), Some(mp.ranking.len()));
    assert!(mp.curve.windows(2).all(|w| w[0].cost_bytes <= w[1].cost_bytes));
    assert_eq!(mp.plans.len(), mp.curve.len());

    // Promoting by hand: the bias corrections the edit made stale, measured again. Which
    // does better depends on the samples: with every layer at int16, on these three
    // calibration photos the stale ones give 17.70 dB and the remeasured 26.39, while
    // calibrated and judged on all six photos the stale ones did better (27.9 against 23.1).
    let mut live = q
        .live(
            plan.clone(),
            cached.samples.clone(),
            npu_core::quant::live::Keep::References,
            &Silent,
        )
        .expect("live");
    let mut all16 = plan.clone();
    for n in q.layers() {
        q.promote(&mut all16, n, LayerPrecision::INT16);
    }
    q.live_update(&mut live, &all16, &Silent).expect("stale");
    let stale = q.live_output_sqnr(&live, None).expect("inexact");
    let mut fresh = all16.clone();
    let redone = q.refresh_bias_corrections(&live, &plan, &mut fresh).expect("refresh");
    q.live_update(&mut live, &fresh, &Silent).expect("fresh");
    let refreshed = q.live_output_sqnr(&live, None).expect("inexact");
    println!(
        "ppocr_rec, every layer int16: stale corrections {stale:.2} dB, {redone} measured again {refreshed:.2} dB"
    );
    assert!(redone > 10, "{redone}");
    assert!((refreshed - stale).abs() > 0.5, "{refreshed} vs {stale}");
    // Whatever the live state, the same edit gives the same corrections.
    let mut again = all16.clone();
    q.refresh_bias_corrections(&live, &plan, &mut again).expect("refresh");
    assert_eq!(again.bias_correction, fresh.bias_correction);
    // No edit: nothing measured again, the calibrated corrections kept.
    let mut same = plan.clone();
    assert_eq!(q.refresh_bias_corrections(&live, &plan, &mut same).expect("refresh"), 0);
    assert_eq!(same, plan);
}

/// SmoothQuant on PP-OCR rec (SVTR: four LayerNorms read by MatMuls): the scales fitted on
/// two calibration photos even the first LayerNorm's outlier channels (a channel-range
/// spread in the thousands), leave the FP32 function as it was, and raise the local SQNR of
/// the MatMul that reads it on the three held-out photos (run alone on its FP32 input put
/// on its grid). Where the spread is small (about 7) the scales fitted on photos without
/// text do not hold on photos with text (one reader loses 9 dB), and the model's output
/// does not gain: the held-back verdict drops the scales, and the test prints the figures.
#[test]
fn smooth_quant_on_rec_evens_layernorm_channels_and_raises_reader_sqnr() {
    use npu_core::quant::recipe::Recipe;
    use npu_core::quant::smooth;
    let model = npu_tests::optimized(&data_dir().join("models").join("ppocr_rec.onnx"));
    let tmp = tmp_dir("smooth");
    let (src, held_out) = rec_split(&tmp);
    let pre = Preprocess::default();
    let q = Quantizer::new(&model, 2).expect("quantizer");
    let s = q
        .smooth(&Recipe::from_preset("w8a8"), &src, &pre, &Silent)
        .expect("smooths");
    println!("{}", s.summary());
    assert_eq!(s.sites.len(), 4, "{:?}", s.sites);
    assert_eq!(s.held_back, 1);
    assert_eq!(s.kept, !s.scales.is_empty());
    let first = &s.sites[0];
    assert!(
        first.activation_spread_before > 100.0 && first.activation_spread_after * 2.0 < first.activation_spread_before,
        "{first:?}"
    );
    let mut smoothed = model.clone();
    smooth::apply(&mut smoothed, &s.fitted).expect("applies");
    // The FP32 function is unchanged.
    let input = model.graph.values[model.graph.inputs[0]].name.clone();
    let moved = npu_tests::fp32_moved(
        &model,
        &smoothed,
        &input,
        &data_dir().join("inputs").join("rec_text.npy"),
    );
    assert!(moved < 1e-4, "FP32 output moved by {moved}");
    // The readers' local SQNR on the held-out photos, both models calibrated alike.
    let readers: Vec<&str> = s
        .sites
        .iter()
        .flat_map(|x| x.readers.iter().map(String::as_str))
        .collect();
    let local = |m: &Model| -> (Vec<f64>, f64) {
        let (at, r) = held_out_locals(m, &src, &held_out, &readers);
        (at, r.outputs[0].sqnr_db.expect("inexact"))
    };
    let ((before, out_before), (after, out_after)) = (local(&model), local(&smoothed));
    for (n, (b, a)) in readers.iter().zip(before.iter().zip(&after)) {
        println!("{n}: local SQNR {b:.2} → {a:.2} dB");
    }
    println!("output SQNR on the held-out photos {out_before:.2} → {out_after:.2} dB");
    assert!(
        after[0] > before[0] + 0.5,
        "the outlier LayerNorm's reader: {before:?} → {after:?}"
    );
}

/// Bias absorption on PP-OCR rec (two conv pairs with a Relu between): the shifts fitted on
/// two calibration photos and judged on the third leave the FP32 function as it was on the
/// calibration photos and narrow the activation grid between each pair about tenfold. On
/// the three held-out photos the second layer of one pair gains about 4 dB of local SQNR
/// (run alone on its inputs put on their grids); the other loses about 2: the held-out
/// photos (with text) reach 1.76 where the calibration photos stopped at 1.25, and the
/// narrowed grid clips them. The model's output moves by a few dB either way with the
/// calibration method (MSE 13.81 → 15.34 dB on the integer reference, with bias correction
/// 15.42 → 12.42, MinMax 12.16 → 13.32); the test prints it and does not claim it.
#[test]
fn bias_absorption_on_rec_keeps_fp32_narrows_the_grid_and_raises_a_second_layers_sqnr() {
    use npu_core::quant::absorb;
    use npu_core::quant::recipe::Recipe;
    let model = npu_tests::optimized(&data_dir().join("models").join("ppocr_rec.onnx"));
    let tmp = tmp_dir("absorb");
    let (src, held_out) = rec_split(&tmp);
    let pre = Preprocess::default();
    let q = Quantizer::new(&model, 2).expect("quantizer");
    let a = q
        .absorb(&Recipe::from_preset("w8a8"), &src, &pre, &Silent)
        .expect("absorbs");
    println!("{}", a.summary());
    assert_eq!(a.sites.len(), 2, "{:?}", a.sites);
    assert_eq!(a.held_back, 1);
    assert_eq!(a.kept, !a.shifts.is_empty());
    for s in &a.sites {
        assert_eq!(s.activation, "relu", "{s:?}");
        assert!(s.shifted > 0 && s.grid_width_after * 4.0 < s.grid_width_before, "{s:?}");
    }
    let mut shifted = model.clone();
    absorb::apply(&mut shifted, &a.fitted).expect("applies");
    // The FP32 function is unchanged on the photos the shifts were measured on.
    let input = model.graph.values[model.graph.inputs[0]].name.clone();
    for photo in ["astronaut", "chelsea", "coffee"] {
        let file = data_dir().join("inputs").join(format!("rec_{photo}.npy"));
        let moved = npu_tests::fp32_moved(&model, &shifted, &input, &file);
        assert!(moved < 1e-4, "FP32 output moved by {moved} on {photo}");
    }
    // Each second layer's local SQNR on the held-out photos, both models calibrated alike.
    let seconds: Vec<&str> = a.sites.iter().map(|s| s.second.as_str()).collect();
    let local = |m: &Model| -> (Vec<f64>, f64, f64) {
        let (at, r) = held_out_locals(m, &src, &held_out, &seconds);
        let out = &r.outputs[0];
        (
            at,
            out.sqnr_db.expect("inexact"),
            out.integer_sqnr_db.expect("an integer reference"),
        )
    };
    let ((before, fq_before, int_before), (after, fq_after, int_after)) = (local(&model), local(&shifted));
    for (n, (b, a)) in seconds.iter().zip(before.iter().zip(&after)) {
        println!("{n}: local SQNR {b:.2} → {a:.2} dB");
    }
    let gain = before.iter().zip(&after).map(|(b, a)| a - b).fold(f64::MIN, f64::max);
    assert!(gain > 1.0, "no second layer gains: {before:?} → {after:?}");
    println!(
        "output SQNR on the held-out photos: fake-quant {fq_before:.2} → {fq_after:.2} dB, integer reference {int_before:.2} → {int_after:.2} dB"
    );
}
