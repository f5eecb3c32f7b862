//! Integer plans on a real model (PP-OCR cls, a PaddlePaddle export): legalization, the
//! integer reference execution against FP32 beside the fake-quant simulation on held-out
//! photos, the TFLite writer's output parsed back, and a plan refused on another graph.
//! (Bit-exactness against LiteRT's reference kernels: `scripts/check_tflite_litert.py`.)

use npu_core::ir::Model;
use npu_core::progress::Silent;
use npu_core::quant::Quantizer;
use npu_core::quant::data::{Preprocess, source};
use npu_core::quant::legalize::{LegalizeError, legalize};
use npu_core::quant::observer::Calibration;
use npu_core::sim::integer::Input;
use npu_tests::data_dir;
use std::collections::HashMap;

fn cls_model() -> Model {
    npu_tests::optimized(&data_dir().join("models").join("ppocr_cls.onnx"))
}

#[test]
fn cls_integer_reference_tracks_fake_quant_and_exports() {
    let model = cls_model();
    let q = Quantizer::new(&model, 2).expect("quantizer");
    // Calibrate on the eight crops, evaluate on the six full photos: disjoint samples.
    let pre = Preprocess::parse("size=48x192;color=bgr;scale=1/255;mean=0.5;std=0.5").expect("spec");
    let calib =
        source(data_dir().join("crops8").to_str().expect("path")).expect("crops8 (bench/make_crops.py 8 data/crops8)");
    let plan = q
        .calibrate(
            &mut calib.samples(&model, &pre),
            calib.len(),
            "w8a8",
            Calibration::Mse,
            &Silent,
        )
        .expect("calibrates");
    assert_eq!(plan.input_shapes.get("x"), Some(&vec![1, 3, 48, 192]));
    let p = legalize(&model, &plan, &HashMap::new()).expect("cls legalizes");
    assert!(
        p.constraints.iter().any(|c| c.rule == "fixed-output-grid"),
        "softmax output fixed"
    );
    let out = &p.tensors[p.outputs[0]];
    assert_eq!((out.q.s(), out.q.zp()), (1.0 / 256.0, -128));
    // Weights: int8 codes in −127..127, per output channel.
    for t in p
        .tensors
        .iter()
        .filter(|t| t.data.is_some() && t.q.axis == Some(0) && t.q.ty == npu_core::program::IntType::I8)
    {
        assert!(
            t.data
                .as_ref()
                .is_some_and(|d| d.iter().all(|c| (-127..=127).contains(c))),
            "{}",
            t.name
        );
        assert_eq!(t.q.scale.len(), t.shape[0], "{}", t.name);
    }

    let eval_dir = folder("cls_eval", &cls_photos());
    let eval = source(eval_dir.to_str().expect("path")).expect("eval");
    let report = q
        .simulate(
            &plan,
            &mut eval.samples(&model, &Preprocess::default()),
            eval.len(),
            &Silent,
        )
        .expect("simulates");
    assert!(report.integer_note.is_none(), "{:?}", report.integer_note);
    let fake = report.outputs[0].sqnr_db.expect("fake-quant error");
    let int = report.outputs[0].integer_sqnr_db.expect("integer error");
    println!("cls output SQNR on 6 held-out photos: fake-quant {fake:.2} dB, integer reference {int:.2} dB");
    assert!(
        int > 12.0 && (int - fake).abs() < 10.0,
        "integer {int} dB vs fake-quant {fake} dB"
    );
    // Every quantized tensor has both integer columns, and the two executions agree
    // closely wherever the local errors are measured on the same grids.
    let mut close = 0;
    for t in &report.tensors {
        let (Some(a), Some(b)) = (t.sqnr_local_db, t.integer_sqnr_db) else {
            continue;
        };
        assert!(t.integer_sqnr_cumulative_db.is_some(), "{}", t.name);
        if (a - b).abs() < 1.5 {
            close += 1;
        }
    }
    assert!(
        close * 10 >= report.tensors.len() * 9,
        "{close} of {} tensors within 1.5 dB locally",
        report.tensors.len()
    );
    assert!(report.constraints.iter().all(|c| c.integer_local_db.is_some()));

    // The TFLite writer's file parses back with the same operators and tensor names.
    let w = npu_core::export::tflite::write(&p, npu_core::export::tflite::Io::Int8).expect("writes");
    let m = tflite_schema::root_as_model(&w.bytes).expect("a valid TFLite flatbuffer");
    let sg = m.subgraphs().expect("subgraphs").get(0);
    assert_eq!(sg.operators().expect("ops").len(), w.operators);
    let names: Vec<&str> = sg.tensors().expect("tensors").iter().filter_map(|t| t.name()).collect();
    assert!(names.contains(&out.name.as_str()) && names.contains(&"x"));
    let sig = m.signature_defs().expect("signature").get(0);
    assert_eq!(sig.signature_key(), Some("serving_default"));

    // Read back, the file is its own integer program, and it computes the plan's codes.
    let back = npu_core::import::tflite::program::from_bytes(&w.bytes, std::path::Path::new("cls.int8.tflite"))
        .expect("reads")
        .expect("an integer program");
    assert!(
        back.ops
            .iter()
            .any(|o| matches!(o.kind, npu_core::program::OpKind::Conv { .. }))
    );
    for n in ["astronaut", "rocket", "text"] {
        let x = npu_core::ir::npy::read(&eval_dir.join(format!("cls_{n}.npy")))
            .expect("npy")
            .to_f32();
        let nhwc = x.clone().permuted_axes(vec![0, 2, 3, 1]);
        let a = npu_core::sim::integer::run(&p, vec![Input::Float(x.iter().copied().collect())]).expect("plan runs");
        let b =
            npu_core::sim::integer::run(&back, vec![Input::Float(nhwc.iter().copied().collect())]).expect("file runs");
        assert_eq!(
            a.values[p.outputs[0]], b.values[back.outputs[0]],
            "{n}: the file's program and the plan's give other codes"
        );
    }
}

#[test]
fn a_plan_of_another_graph_is_refused() {
    let model = cls_model();
    let q = Quantizer::new(&model, 1).expect("quantizer");
    let plan = q
        .calibrate(
            &mut source(data_dir().join("crops8").to_str().expect("path"))
                .expect("crops8")
                .samples(
                    &model,
                    &Preprocess::parse("size=48x192;color=bgr;scale=1/255;mean=0.5;std=0.5").expect("spec"),
                ),
            8,
            "w8a8",
            Calibration::MinMax,
            &Silent,
        )
        .expect("calibrates");
    let (other, _) = npu_core::import::load(&data_dir().join("models").join("ppocr_cls.onnx")).expect("loads");
    // The unoptimized graph is another graph.
    match legalize(&other, &plan, &HashMap::new()) {
        Err(e @ LegalizeError::WrongGraph { .. }) => assert!(e.to_string().contains("another graph")),
        other => panic!("expected WrongGraph, got {:?}", other.map(|p| p.ops.len())),
    }
}

/// PP-OCR cls's six preprocessed photos (`data/inputs/cls_*.npy`): held out from its
/// calibration on the crops.
fn cls_photos() -> Vec<String> {
    ["astronaut", "chelsea", "coffee", "page", "rocket", "text"]
        .iter()
        .map(|n| format!("cls_{n}.npy"))
        .collect()
}

/// A folder of copies of `files` from data/inputs.
fn folder(name: &str, files: &[String]) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("npu_integer_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp");
    for f in files {
        std::fs::copy(data_dir().join("inputs").join(f), d.join(f)).expect("data/inputs");
    }
    d
}

/// A model's calibration and evaluation sets: `data/inputs/{stem}_{k}.npy` for the keys of
/// each, copied into folders of their own.
fn split(stem: &str, calib: &[&str], eval: &[&str]) -> (npu_core::pipeline::Samples, npu_core::pipeline::Samples) {
    let open = |part: &str, keys: &[&str]| {
        let files: Vec<String> = keys.iter().map(|k| format!("{stem}_{k}.npy")).collect();
        let dir = folder(&format!("{stem}_{part}"), &files);
        npu_core::pipeline::Samples::open(dir.to_str().expect("path"), "").expect(part)
    };
    (open("calib", calib), open("eval", eval))
}

/// `recipe` planned on `calib` (its statistics `stats`) without bias correction, and the
/// plan simulated on the held-out `eval`: (the planned recipe, the report).
fn plan_and_simulate(
    q: &Quantizer,
    stats: &npu_core::quant::Stats,
    calib: &npu_core::pipeline::Samples,
    eval: &npu_core::pipeline::Samples,
    recipe: npu_core::quant::recipe::Recipe,
) -> (npu_core::pipeline::Planned, npu_core::quant::Report) {
    use npu_core::pipeline::{BiasCorrection, PlanRequest};
    let label = recipe.preset.clone();
    let request = PlanRequest {
        bias_correction: BiasCorrection::Off,
        ..PlanRequest::recipe(recipe, label)
    };
    let planned = npu_core::pipeline::plan(q, stats, calib, &request, &Silent).expect("plans");
    let report = q
        .simulate(&planned.plan, &mut eval.iter(q.model), eval.len(), &Silent)
        .expect("simulates");
    (planned, report)
}

#[test]
fn rec_w8a16_runs_its_6625_class_softmax_in_int8() {
    use npu_core::pipeline::Samples;
    use npu_core::quant::recipe::Recipe;
    let model = npu_tests::optimized(&data_dir().join("models").join("ppocr_rec.onnx"));
    let q = Quantizer::new(&model, 2).expect("quantizer");
    let files = |names: &[&str]| names.iter().map(|n| format!("rec_{n}.npy")).collect::<Vec<_>>();
    let calib_dir = folder("rec_calib", &files(&["astronaut", "chelsea", "coffee"]));
    let eval_dir = folder("rec_eval", &files(&["page", "rocket", "text"]));
    let calib = Samples::open(calib_dir.to_str().expect("path"), "").expect("calibration set");
    let eval = Samples::open(eval_dir.to_str().expect("path"), "").expect("evaluation set");
    let stats = npu_core::pipeline::calibrate(&q, &calib, &Silent).expect("calibrates");
    let score = |recipe: Recipe| {
        let (planned, report) = plan_and_simulate(&q, &stats, &calib, &eval, recipe);
        let o = &report.outputs[0];
        (
            planned,
            report.constraints.clone(),
            o.sqnr_db.expect("fake"),
            o.integer_sqnr_db.expect("integer"),
        )
    };
    // The preset: the last Softmax (over the 6625 characters) runs in int8.
    let (planned, constraints, fake, int) = score(Recipe::from_preset("w8a16"));
    assert_eq!(planned.adjusted.len(), 1, "{:?}", planned.adjusted);
    let node = planned.adjusted[0].node.clone();
    assert_eq!(
        planned.plan.layers.get(&node),
        Some(&npu_core::quant::LayerPrecision::INT8)
    );
    assert!(!constraints.iter().any(|c| c.constraint.rule == "int16-softmax-floor"));
    // Named int16 by a rule, it keeps LiteRT's int16 kernel, and its exp floor costs dB.
    let forced = Recipe::parse_ron(&format!(
        r#"Recipe(preset: "w8a16", rules: [(name: Some("^{node}$"), precision: "int16")])"#
    ))
    .expect("recipe");
    let (p16, c16, fake16, int16) = score(forced);
    assert!(p16.adjusted.is_empty() && p16.plan.layers.is_empty());
    assert!(
        c16.iter()
            .any(|c| c.constraint.rule == "int16-softmax-floor" && c.constraint.node == node)
    );
    println!(
        "rec w8a16 on 3 held-out photos: int8 Softmax fake-quant {fake:.2} / integer {int:.2} dB; \
         int16 Softmax {fake16:.2} / {int16:.2} dB"
    );
    assert!(int > fake - 3.0, "integer {int} dB vs fake-quant {fake} dB");
    assert!(int > int16 + 4.0, "int8 Softmax {int} dB vs int16 {int16} dB");
}

#[test]
fn cls_cross_layer_equalization_keeps_fp32_and_raises_held_out_sqnr() {
    use npu_core::pipeline::{BiasCorrection, PlanRequest, Samples};
    use npu_core::quant::recipe::Recipe;
    let model = cls_model();
    let pre = "size=48x192;color=bgr;scale=1/255;mean=0.5;std=0.5";
    let calib = Samples::open(data_dir().join("crops8").to_str().expect("path"), pre).expect("crops8");
    let names = cls_photos();
    let eval_dir = folder("cls_cle_eval", &names);
    let eval = Samples::open(eval_dir.to_str().expect("path"), "").expect("evaluation set");
    let score = |equalize: bool| {
        let recipe = Recipe {
            equalize,
            ..Recipe::from_preset("w8a8")
        };
        let (m, eq) = npu_core::pipeline::equalized(model.clone(), &recipe);
        let q = Quantizer::new(&m, 2).expect("quantizer");
        let stats = npu_core::pipeline::calibrate(&q, &calib, &Silent).expect("calibrates");
        let request = PlanRequest {
            bias_correction: BiasCorrection::Off,
            ..PlanRequest::recipe(recipe, "w8a8".into())
        };
        let mut plan = npu_core::pipeline::plan(&q, &stats, &calib, &request, &Silent)
            .expect("plans")
            .plan;
        if let Some(e) = &eq {
            plan.equalization = e.scales.clone();
        }
        let r = q
            .simulate(&plan, &mut eval.iter(&m), eval.len(), &Silent)
            .expect("simulates");
        (m, eq, plan, r.outputs[0].integer_sqnr_db.expect("integer"))
    };
    let (_, _, _, before) = score(false);
    let (m, eq, plan, after) = score(true);
    let eq = eq.expect("equalized");
    println!(
        "cls w8a8 integer reference on 6 held-out photos: {before:.2} dB, with CLE ({} pairs) {after:.2} dB",
        eq.pairs.len()
    );
    assert!(eq.pairs.len() >= 10, "{} pairs", eq.pairs.len());
    // Measured 23.37 -> 25.24 dB when CLE landed; 24.01 -> 24.32 on this build (the
    // integer reference without CLE has risen since, and CLE's margin shrank): CLE must
    // still raise it.
    assert!(after > before, "CLE {after} dB vs {before} dB");
    // The FP32 function is the model's.
    for n in &names {
        let d = npu_tests::fp32_moved(&model, &m, "x", &eval_dir.join(n));
        assert!(d < 1e-4, "{n}: FP32 output moved by {d}");
    }
    // The plan's scales rebuild the same weights from the optimized graph.
    let mut again = model.clone();
    npu_core::quant::equalize::apply(&mut again, &plan.equalization).expect("applies");
    let same = again.graph.values.iter().zip(&m.graph.values).all(|(p, q)| {
        p.constant.as_ref().map(npu_core::ir::Constant::raw) == q.constant.as_ref().map(npu_core::ir::Constant::raw)
    });
    assert!(same, "apply() and equalize() disagree");
}

/// The `w4a16` preset planned on `calib` without bias correction, plain and with the recipe
/// step `step` turns on (so that only that step differs; one calibration for both), and the
/// integer reference's output SQNR of each on the held-out `eval`: (before, the plan with
/// the step, after).
fn w4a16_gain(
    model: &Model,
    calib: &npu_core::pipeline::Samples,
    eval: &npu_core::pipeline::Samples,
    step: fn(&mut npu_core::quant::recipe::Recipe),
) -> (f64, npu_core::pipeline::Planned, f64) {
    use npu_core::quant::recipe::Recipe;
    let q = Quantizer::new(model, 2).expect("quantizer");
    let stats = npu_core::pipeline::calibrate(&q, calib, &Silent).expect("calibrates");
    let score = |recipe: Recipe| {
        let (planned, r) = plan_and_simulate(&q, &stats, calib, eval, recipe);
        (planned, r.outputs[0].integer_sqnr_db.expect("integer"))
    };
    let (_, before) = score(Recipe::from_preset("w4a16"));
    let mut recipe = Recipe::from_preset("w4a16");
    step(&mut recipe);
    let (planned, after) = score(recipe);
    (before, planned, after)
}

/// SeqMSE on cls with 4-bit weights: per-channel weight ranges chosen by each layer's output
/// error on the calibration crops raise the integer reference's SQNR on the six held-out
/// photos, every searched layer's output error falls on the fitting crops, and the plan's
/// factors reach the integer program (its weight scales are the clipped ones).
#[test]
fn cls_seq_mse_raises_w4a16_held_out_sqnr() {
    use npu_core::pipeline::Samples;
    let model = cls_model();
    let pre = "size=48x192;color=bgr;scale=1/255;mean=0.5;std=0.5";
    let calib = Samples::open(data_dir().join("crops8").to_str().expect("path"), pre).expect("crops8");
    let eval_dir = folder("cls_seqmse_eval", &cls_photos());
    let eval = Samples::open(eval_dir.to_str().expect("path"), "").expect("evaluation set");
    let (before, planned, after) = w4a16_gain(&model, &calib, &eval, |r| r.seq_mse = true);
    let r = planned.seq_mse.expect("searched");
    println!(
        "cls w4a16 integer reference on 6 held-out photos: {before:.2} dB, with SeqMSE {after:.2} dB; {}",
        r.summary()
    );
    assert!(r.kept && r.held_back == 2, "{}", r.summary());
    assert!(r.layers.len() >= 40, "{} layers", r.layers.len());
    for l in &r.layers {
        assert!(l.after_db >= l.before_db, "{l:?}");
    }
    assert!(after > before + 2.0, "SeqMSE {after} dB vs {before} dB");
    // The plan's factors reach the integer program: each narrowed channel's weight scale is
    // its factor times the scale without them.
    let plan = &planned.plan;
    let p = legalize(&model, plan, &HashMap::new()).expect("legalizes");
    let mut plain = plan.clone();
    plain.weight_clip.clear();
    let p0 = legalize(&model, &plain, &HashMap::new()).expect("legalizes");
    let mut checked = 0;
    for (name, clip) in &plan.weight_clip {
        let node = model.graph.nodes.iter().find(|n| &n.name == name).expect("node");
        let wname = &model.graph.values[node.input(1).expect("weight")].name;
        let find = |p: &npu_core::program::Program| {
            p.tensors
                .iter()
                .find(|t| t.data.is_some() && t.q.scale.len() == clip.len() && t.name.starts_with(wname.as_str()))
                .map(|t| t.q.scale.clone())
        };
        let (Some(s), Some(s0)) = (find(&p), find(&p0)) else {
            continue;
        };
        for (ch, f) in clip.iter().enumerate() {
            let want = f64::from(s0[ch]) * f64::from(*f);
            let got = f64::from(s[ch]);
            assert!(
                (got - want).abs() <= want * 1e-6,
                "{name} channel {ch}: scale {got} vs {want}"
            );
        }
        checked += 1;
    }
    assert!(checked >= 10, "{checked} layers checked");
}

/// GPTQ on Magika (tf2onnx from a Flax model) with 4-bit weights: codes chosen against each
/// linear layer's calibration inputs raise the integer reference's output SQNR on three
/// held-out files, every layer solved gains on the held-back file's inputs or keeps its
/// nearest codes, and the plan's codes are the integer program's.
#[test]
fn magika_gptq_raises_w4a16_held_out_sqnr() {
    use npu_core::pipeline::Samples;
    let path = data_dir().join("real").join("magika_standard_v3_3").join("model.onnx");
    let model = npu_tests::optimized(&path);
    let files = |ks: &[usize]| ks.iter().map(|k| format!("magika_{k}.npy")).collect::<Vec<_>>();
    let calib_dir = folder("magika_gptq_calib", &files(&[0, 1, 2]));
    let eval_dir = folder("magika_gptq_eval", &files(&[3, 4, 5]));
    let calib = Samples::open(calib_dir.to_str().expect("path"), "").expect("calibration set");
    let eval = Samples::open(eval_dir.to_str().expect("path"), "").expect("evaluation set");
    let (before, planned, after) = w4a16_gain(&model, &calib, &eval, |r| r.gptq = true);
    let r = planned.gptq.expect("solved");
    println!(
        "magika w4a16 integer reference on 3 held-out files: {before:.2} dB, with GPTQ {after:.2} dB; {}",
        r.summary()
    );
    assert!(r.kept && r.held_back == 1, "{}", r.summary());
    assert!(r.layers.len() >= 2, "{r:?}");
    for l in &r.layers {
        match l.shrinkage {
            Some(_) => assert!(l.after_db > l.before_db && l.changed > 0, "{l:?}"),
            None => assert!(l.after_db == l.before_db && l.changed == 0, "{l:?}"),
        }
    }
    assert!(after > before + 5.0, "GPTQ {after} dB vs {before} dB");
    // The plan's codes are the integer program's weight codes (as stored, or transposed
    // where the kernel takes its filter as [out, in]).
    let plan = &planned.plan;
    let p = legalize(&model, plan, &HashMap::new()).expect("legalizes");
    assert!(!plan.gptq.is_empty());
    for (name, text) in &plan.gptq {
        let node = model.graph.nodes.iter().find(|n| &n.name == name).expect("node");
        let wv = node.input(1).expect("weight");
        let shape = model.graph.values[wv]
            .constant
            .as_ref()
            .expect("constant")
            .shape
            .clone();
        let codes: Vec<i64> = npu_core::quant::gptq::decode(text, 7)
            .expect("codes")
            .into_iter()
            .map(i64::from)
            .collect();
        let (rows, cols) = (shape[0], shape[1]);
        let transposed: Vec<i64> = (0..rows * cols).map(|i| codes[(i % rows) * cols + i / rows]).collect();
        let wname = &model.graph.values[wv].name;
        let found = p.tensors.iter().any(|t| {
            t.name.starts_with(wname.as_str()) && t.data.as_ref().is_some_and(|d| *d == codes || *d == transposed)
        });
        assert!(
            found,
            "{name}: no weight tensor of the integer program holds the plan's codes"
        );
    }
}

/// Magika with `w8a16` against the same recipe keeping in float the op types onnxruntime's
/// quantize_static leaves in float (`scripts/recipes/w8a16_ort_float_ops.ron`: the softmax's
/// Sub, Exp, ReduceSum, its max, the GELU's Tanh): those layers become float32 ops in the
/// integer program (the softmax float32 from end to end, the Tanh quantized where the int16
/// Add reads it), and the integer reference's output SQNR on three held-out batches rises.
#[test]
fn magika_layers_kept_in_float_run_in_float32_and_raise_held_out_sqnr() {
    use npu_core::program::{FloatOp, IntType, OpKind, UnaryFn};
    use npu_core::quant::recipe::Recipe;
    let path = data_dir().join("real").join("magika_standard_v3_3").join("model.onnx");
    let model = npu_tests::optimized(&path);
    let (calib, eval) = split("magika", &["0", "1", "2"], &["3", "4", "5"]);
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/recipes/w8a16_ort_float_ops.ron"),
    )
    .expect("recipe");
    let q = Quantizer::new(&model, 2).expect("quantizer");
    let stats = npu_core::pipeline::calibrate(&q, &calib, &Silent).expect("calibrates");
    let score = |recipe: Recipe| {
        let (planned, r) = plan_and_simulate(&q, &stats, &calib, &eval, recipe);
        let db = r.outputs[0].integer_sqnr_db.expect("integer");
        (planned.plan, r, db)
    };
    let (_, _, before) = score(Recipe::from_preset("w8a16"));
    let (plan, report, after) = score(Recipe::parse_ron(&text).expect("parses"));
    // Each float layer run alone on its inputs: float32 is exact to a rounding.
    for t in report.tensors.iter().filter(|t| t.op == "Exp" || t.op == "ReduceSum") {
        let local = t.integer_sqnr_db.unwrap_or(f64::INFINITY);
        assert!(local > 100.0, "{} {}: integer local {local} dB", t.op, t.name);
    }
    println!(
        "magika w8a16 integer reference on 3 held-out batches: {before:.2} dB, with onnxruntime's float op types in float {after:.2} dB"
    );
    assert!(after > before + 8.0, "{after} dB vs {before} dB");
    let p = legalize(&model, &plan, &HashMap::new()).expect("legalizes");
    let unary = |f: UnaryFn| {
        let kind = OpKind::Float {
            op: FloatOp::Unary { f },
        };
        p.ops
            .iter()
            .find(|o| o.kind == kind)
            .unwrap_or_else(|| panic!("no {kind:?}"))
    };
    let ty = |t: usize| p.tensors[t].q.ty;
    let (exp, tanh) = (unary(UnaryFn::Exp), unary(UnaryFn::Tanh));
    // The Sub before Exp writes float32, Exp too, and the softmax's Div is the output; an
    // int16 Add reads the Tanh.
    let types = [
        ty(exp.inputs[0]),
        ty(exp.outputs[0]),
        ty(p.outputs[0]),
        ty(tanh.outputs[0]),
    ];
    assert_eq!(types, [IntType::F32, IntType::F32, IntType::F32, IntType::I16]);
    // Exported, the file is its own program again: the float32 chains, the one-hot EQUAL on
    // the int32 byte values and the LayerNorm islands (RSQRT, SQUARED_DIFFERENCE, ...) read
    // back as float ops, with the plan's output bit for bit.
    let back = reads_back(
        &p,
        "magika_float.tflite",
        &data_dir().join("inputs").join("magika_3.npy"),
    );
    let float_ops: Vec<&str> = back
        .ops
        .iter()
        .filter_map(|o| match &o.kind {
            OpKind::Float { op } => Some(op.name()),
            _ => None,
        })
        .collect();
    for want in ["Equal", "Cast", "Exp", "Sum", "Rsqrt", "SquaredDifference", "Tanh"] {
        assert!(float_ops.contains(&want), "no float {want} in {float_ops:?}");
    }
}

/// `p` exported as a TFLite file and read back as the file's own integer program, which
/// must give `p`'s output values bit for bit on the int32 batch in `npy`; the program.
fn reads_back(p: &npu_core::program::Program, name: &str, npy: &std::path::Path) -> npu_core::program::Program {
    let w = npu_core::export::tflite::write(p, npu_core::export::tflite::Io::Int8).expect("writes");
    let back = npu_core::import::tflite::program::from_bytes(&w.bytes, std::path::Path::new(name))
        .expect("reads")
        .expect("an integer program");
    let x = npu_core::ir::npy::read(npy).expect("npy");
    let codes: Vec<i32> = x
        .as_i64_vec()
        .expect("integers")
        .iter()
        .map(|&v| i32::try_from(v).expect("int32"))
        .collect();
    let a = npu_core::sim::integer::run(p, vec![Input::Codes(codes.clone())]).expect("plan runs");
    let b = npu_core::sim::integer::run(&back, vec![Input::Codes(codes)]).expect("file runs");
    assert!(a.values[p.outputs[0]].is_some());
    assert_eq!(
        a.values[p.outputs[0]], b.values[back.outputs[0]],
        "{name}: the file's program and the plan's give other values"
    );
    back
}

/// Magika (tf2onnx from a Flax model) writes LayerNorm with moments, `E[x²] − E[x]²`, over
/// a middle axis and the last, reducing without kept dims and broadcasting back through
/// dynamic Reshape/Expand. Recognized, each becomes one LayerNormalization (a float
/// island in the integer program) instead of an int8 subtraction that cancels.
#[test]
fn magika_moments_layernorms_are_recognized_and_quantize_on_held_out_files() {
    use npu_core::pipeline::{BiasCorrection, PlanRequest, Samples};
    let path = data_dir().join("real").join("magika_standard_v3_3").join("model.onnx");
    let (raw, _) = npu_core::import::load(&path).expect("magika");
    let recognized = npu_tests::optimized(&path);
    let lns: Vec<&npu_core::ir::Node> = recognized
        .graph
        .nodes
        .iter()
        .filter(|n| n.op == "LayerNormalization")
        .collect();
    assert_eq!(lns.len(), 2, "both LayerNorms");
    assert!(
        !recognized
            .graph
            .nodes
            .iter()
            .any(|n| n.op == "Sqrt" || n.op == "Reciprocal")
    );
    // The same passes without pattern recognition: the moments stay as written.
    let names: Vec<String> = npu_core::passes::all_passes()
        .iter()
        .map(|p| p.name().to_owned())
        .filter(|n| n != "recognize-patterns")
        .collect();
    let written = npu_core::pipeline::optimize(&raw, &npu_core::pipeline::Passes::Only(names), &Silent)
        .expect("optimizes")
        .model;
    assert!(!written.graph.nodes.iter().any(|n| n.op == "LayerNormalization"));
    let files = |ks: &[usize]| ks.iter().map(|k| format!("magika_{k}.npy")).collect::<Vec<_>>();
    let calib_dir = folder("magika_calib", &files(&[0, 1, 2]));
    let eval_dir = folder("magika_eval", &files(&[3, 4, 5]));
    let calib = Samples::open(calib_dir.to_str().expect("path"), "").expect("calibration set");
    let eval = Samples::open(eval_dir.to_str().expect("path"), "").expect("evaluation set");
    let score = |m: &Model| {
        let q = Quantizer::new(m, 2).expect("quantizer");
        let stats = npu_core::pipeline::calibrate(&q, &calib, &Silent).expect("calibrates");
        let request = PlanRequest {
            bias_correction: BiasCorrection::Off,
            ..PlanRequest::preset("w8a8")
        };
        let plan = npu_core::pipeline::plan(&q, &stats, &calib, &request, &Silent)
            .expect("plans")
            .plan;
        let r = q
            .simulate(&plan, &mut eval.iter(m), eval.len(), &Silent)
            .expect("simulates");
        r.outputs[0].integer_sqnr_db.expect("integer")
    };
    let before = score(&written);
    let after = score(&recognized);
    println!(
        "magika w8a8 integer reference on 3 held-out batches: moments as written {before:.2} dB, recognized {after:.2} dB"
    );
    assert!(after > before + 10.0, "recognized {after} dB vs written {before} dB");
    assert!(after > 55.0, "{after} dB");
    // FP32: the recognized graph computes the model's function.
    for f in files(&[3, 4, 5]) {
        let d = npu_tests::fp32_moved(&raw, &recognized, "bytes", &eval_dir.join(&f));
        assert!(d < 1e-5, "{f}: FP32 output moved by {d}");
    }
}

/// Basic Pitch (a Keras export): activation ranges refined against the error downstream,
/// on two calibration windows with the third held back to judge them, raise the worst
/// output's integer SQNR on three held-out windows; what changed is reported per tensor.
#[test]
fn pitch_refined_ranges_raise_held_out_sqnr() {
    use npu_core::pipeline::{BiasCorrection, PlanRequest};
    use npu_core::quant::recipe::Recipe;
    let model = npu_tests::optimized(&data_dir().join("models").join("basic_pitch.onnx"));
    let (calib, eval) = split("pitch", &["house0", "house1", "boom"], &["house2", "punch", "car_door"]);
    let q = Quantizer::new(&model, 2).expect("quantizer");
    let stats = npu_core::pipeline::calibrate(&q, &calib, &Silent).expect("calibrates");
    let score = |refine_ranges: bool| {
        let recipe = Recipe {
            refine_ranges,
            ..Recipe::from_preset("w8a8")
        };
        let request = PlanRequest {
            bias_correction: BiasCorrection::Off,
            ..PlanRequest::recipe(recipe, "w8a8".into())
        };
        let planned = npu_core::pipeline::plan(&q, &stats, &calib, &request, &Silent).expect("plans");
        let r = q
            .simulate(&planned.plan, &mut eval.iter(&model), eval.len(), &Silent)
            .expect("simulates");
        let worst = r
            .outputs
            .iter()
            .map(|o| o.integer_sqnr_db.expect("integer"))
            .fold(f64::INFINITY, f64::min);
        (worst, planned.refined)
    };
    let (before, none) = score(false);
    assert!(none.is_none());
    let (after, refined) = score(true);
    let r = refined.expect("refined");
    println!(
        "pitch w8a8 integer reference, worst output on 3 held-out windows: {before:.2} dB, refined ranges {after:.2} dB \
         ({} of {} ranges changed; held-back window {:?} -> {:?} dB)",
        r.choices.len(),
        r.tried,
        r.held_before_db,
        r.held_after_db
    );
    assert!(r.kept && r.held_back == 1, "{r:?}");
    assert!(!r.choices.is_empty() && r.choices.iter().all(|c| c.gain_db > 0.0 && c.from != c.to));
    assert!(after > before + 0.3, "refined {after} dB vs {before} dB");
}

/// The YOLOX detector (ddddocr's ONNX export) calibrated on three photos without text and
/// evaluated on three with text: its objectness Sigmoids stay near 0 in calibration and
/// reach 0.99 on the held-out photos. Calibration gives every Sigmoid output LiteRT's fixed
/// grid (scale 1/256, zero point −128), so the look-up's input grid covers every output
/// code. Against the same plan with the Sigmoid outputs on their observed (MinMax) ranges,
/// as calibration chose them before, an objectness output's integer local SQNR rises by
/// more than 10 dB, and the output's integer SQNR rises; where the observed range was wide
/// enough (the class scores), the coarser input grid costs about 1 dB, never more than 1.5.
#[test]
fn yolox_sigmoid_outputs_on_the_fixed_grid_keep_held_out_objectness() {
    use npu_core::quant::{bounded_output, fixed_output_ranges};
    let model = npu_tests::optimized(&data_dir().join("models").join("yolox_ddddocr.onnx"));
    let (calib, eval) = split(
        "yolox",
        &["astronaut", "chelsea", "coffee"],
        &["page", "rocket", "text"],
    );
    let q = Quantizer::new(&model, 2).expect("quantizer");
    let stats = npu_core::pipeline::calibrate(&q, &calib, &Silent).expect("calibrates");
    let plan = q.plan_from_stats(&stats, "w8a8", Calibration::Mse).expect("plan");
    let g = &model.graph;
    let sigmoids: Vec<usize> = g
        .nodes
        .iter()
        .filter(|n| bounded_output(n) == Some("Sigmoid"))
        .filter_map(|n| n.outputs.first().copied().flatten())
        .filter(|v| plan.ranges.contains_key(&g.values[*v].name))
        .collect();
    assert!(sigmoids.len() >= 6, "objectness and class Sigmoids: {}", sigmoids.len());
    let fixed = fixed_output_ranges("Sigmoid").expect("fixed");
    let mut observed = plan.clone();
    for &v in &sigmoids {
        assert_eq!(plan.ranges[&g.values[v].name], fixed);
        observed.ranges.get_mut(&g.values[v].name).expect("range").int8 =
            stats.observers[&v].range(Calibration::MinMax, 255.0, false);
    }
    let run = |p| {
        q.simulate(p, &mut eval.iter(&model), eval.len(), &Silent)
            .expect("simulates")
    };
    let (new, old) = (run(&plan), run(&observed));
    let local = |r: &npu_core::quant::Report, v: usize| {
        let name = &g.values[v].name;
        let t = r.tensors.iter().find(|t| &t.name == name).expect("tensor");
        t.integer_sqnr_db.expect("integer local")
    };
    let mut best_gain = f64::NEG_INFINITY;
    for &v in &sigmoids {
        let (a, b) = (local(&old, v), local(&new, v));
        println!("{}: integer local {a:.2} -> {b:.2} dB", g.values[v].name);
        assert!(b > a - 1.5, "{}: {a:.2} -> {b:.2} dB", g.values[v].name);
        best_gain = best_gain.max(b - a);
    }
    let (a, b) = (
        old.outputs[0].integer_sqnr_db.expect("integer"),
        new.outputs[0].integer_sqnr_db.expect("integer"),
    );
    println!("YOLOX w8a8 integer output on 3 held-out photos: observed Sigmoid ranges {a:.2} dB, fixed grid {b:.2} dB");
    assert!(best_gain > 10.0, "best local gain {best_gain:.2} dB");
    assert!(b > a, "output {a:.2} -> {b:.2} dB");
}
