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
    let (m, _) = npu_core::import::load(&data_dir().join("models").join("ppocr_cls.onnx")).expect("loads");
    npu_core::passes::optimize(&m, &npu_core::passes::Options::default())
        .expect("optimizes")
        .model
}

/// A folder holding only PP-OCR cls's preprocessed photos.
fn cls_inputs(tmp: &Path) -> PathBuf {
    let dir = tmp.join("cls_inputs");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for e in std::fs::read_dir(data_dir().join("inputs")).expect("data/inputs (run scripts/fetch_models.py)") {
        let p = e.expect("entry").path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("").to_string();
        if name.starts_with("cls_") {
            std::fs::copy(&p, dir.join(name)).expect("copy");
        }
    }
    dir
}

fn tmp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("npu_quant_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp");
    d
}

fn plan_and_report(model: &Model, dir: &str, pre: &Preprocess, edit: impl Fn(&mut QuantPlan)) -> (QuantPlan, Report) {
    let q = Quantizer::new(model, 2).expect("quantizer");
    let src = source(dir).expect("source");
    let mut plan = q
        .calibrate(
            &mut src.samples(model, pre),
            src.len(),
            "w8a8",
            Calibration::Mse,
            &Silent,
        )
        .expect("calibrates");
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

fn calib_error(model: &Model, path: &str) -> String {
    let q = Quantizer::new(model, 1).expect("quantizer");
    let r = source(path).and_then(|src| {
        q.calibrate(
            &mut src.samples(model, &Preprocess::default()),
            src.len(),
            "w8a8",
            Calibration::MinMax,
            &Silent,
        )
    });
    match r {
        Err(QuantError::Data(m)) => m,
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
