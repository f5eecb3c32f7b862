//! The graph optimizer on real models: PP-OCR det/cls/rec (PaddlePaddle) on real photos,
//! and the PyTorch and tf2onnx exports on their test sets. Every patch keeps the graph
//! valid, the fixed point is reached, and the outputs before and after agree to 1e-5
//! relative (max|err| / max|ref|). The optimized models are written as ONNX to
//! `data/optimized/` (read back here, and run in onnxruntime by `scripts/check_cli_vs_ort.py`).

use ndarray::ArrayD;
use ndarray_npy::ReadNpyExt;
use npu_core::ir::{Model, Tensor};
use npu_core::passes::{Optimized, Options, op_counts, optimize};
use npu_core::sim::Executor;
use npu_tests::{data_dir, feeds, max_rel_err, read_pb_set, real_model_dirs, sub_dirs};
use std::collections::HashMap;
use std::path::Path;

fn optimized(model: &Model, label: &str) -> Optimized {
    let opts = Options {
        validate_each: true,
        ..Options::default()
    };
    let o = optimize(model, &opts).unwrap_or_else(|e| panic!("{label}: {e}"));
    assert!(o.converged, "{label}: no fixed point after {} rounds", o.rounds);
    o.model.validate().unwrap_or_else(|e| panic!("{label}: {e}"));
    println!(
        "{label}: {} nodes → {} nodes, {} rewrites in {} rounds",
        model.graph.nodes.len(),
        o.model.graph.nodes.len(),
        o.patches.len(),
        o.rounds
    );
    let (before, after) = (op_counts(model), op_counts(&o.model));
    for op in before
        .keys()
        .chain(after.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (b, a) = (
            before.get(op).copied().unwrap_or(0),
            after.get(op).copied().unwrap_or(0),
        );
        if a != b {
            println!("    {op:<30} {b:>5} → {a}");
        }
    }
    o
}

/// Writes the optimized model as ONNX and reads it back.
fn round_trip(o: &Optimized, name: &str) -> Model {
    let dir = data_dir().join("optimized");
    std::fs::create_dir_all(&dir).expect("data/optimized");
    let path = dir.join(format!("{name}.onnx"));
    npu_core::export::onnx::save(&o.model, &path).expect("write");
    let (back, _) = npu_core::import::onnx::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    back
}

fn assert_close(got: &Tensor, want: &Tensor, what: &str, tol: f64) -> f64 {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let rel = max_rel_err(got, want);
    println!("    {what}: max|err|/max|ref| = {rel:.2e}");
    assert!(rel <= tol, "{what}: max|err|/max|ref| = {rel:.3e} exceeds {tol:.0e}");
    rel
}

fn read(path: &Path) -> ArrayD<f32> {
    let f =
        std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch_models.py)", path.display()));
    ArrayD::<f32>::read_npy(f).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `tol` bounds max|err|/max|ref| between the model before and after. Folding BatchNorm
/// and scales into weights rounds differently, and det and rec amplify rounding: onnxruntime's
/// own graph optimizer moves their outputs by up to 2.8e-5 (det) and 6.7e-5 (rec, on the
/// astronaut photo) against its unoptimized run (`scripts/check_cli_vs_ort.py` measures this
/// floor per input and holds the optimized files to four times it; rec's limit here is
/// that: 2.7e-4).
fn ppocr(kind: &str, tol: f64) -> (Model, Optimized) {
    let data = data_dir();
    let (model, _) =
        npu_core::import::onnx::load(&data.join("models").join(format!("ppocr_{kind}.onnx"))).expect("loads");
    let o = optimized(&model, &format!("ppocr_{kind}"));
    let back = round_trip(&o, &format!("ppocr_{kind}"));
    let runs = [
        Executor::new(&model, 2).expect("plan"),
        Executor::new(&o.model, 2).expect("plan optimized"),
        Executor::new(&back, 2).expect("plan written file"),
    ];
    let input = model.graph.values[model.graph.inputs[0]].name.clone();
    let mut files: Vec<_> = std::fs::read_dir(data.join("inputs"))
        .expect("inputs")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{kind}_")))
        })
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{kind}: expected 6 real inputs");
    let mut worst = 0f64;
    for f in &files {
        let feeds = HashMap::from([(input.clone(), Tensor::F32(read(f)))]);
        let outs: Vec<_> = runs.iter().map(|e| e.run(&feeds).expect("runs")).collect();
        let what = format!("{kind} {}", f.display());
        worst = worst.max(assert_close(&outs[1][0].1, &outs[0][0].1, &what, tol));
        assert_close(&outs[2][0].1, &outs[1][0].1, &format!("{what} (written file)"), 1e-6);
    }
    println!(
        "ppocr_{kind}: {} inputs, worst max|err|/max|ref| = {worst:.3e}",
        files.len()
    );
    (model, o)
}

#[test]
fn ppocr_det_optimizes_and_agrees() {
    let (model, o) = ppocr("det", 1e-4);
    let after = op_counts(&o.model);
    assert_eq!(op_counts(&model).get("Constant"), Some(&342));
    assert_eq!(after.get("Constant"), None, "every Constant becomes an initializer");
    // Two BatchNorms follow convs; the third follows ConvTranspose + bias Add, which fold first.
    assert_eq!(op_counts(&model).get("BatchNormalization"), Some(&3));
    assert_eq!(after.get("BatchNormalization"), None);
    assert!(after.get("FusedConv").copied().unwrap_or(0) >= 40, "{after:?}");
    assert!(o.model.graph.nodes.len() * 3 < model.graph.nodes.len(), "{after:?}");
}

#[test]
fn ppocr_cls_optimizes_and_agrees() {
    let (_, o) = ppocr("cls", 1e-5);
    let after = op_counts(&o.model);
    assert_eq!(after.get("BatchNormalization"), None);
    assert_eq!(after.get("Constant"), None);
    assert_eq!(after.get("Clip"), None, "every HardSwish chain is recognised");
}

#[test]
fn ppocr_rec_optimizes_and_agrees() {
    let (model, o) = ppocr("rec", 2.7e-4);
    let after = op_counts(&o.model);
    assert_eq!(after.get("BatchNormalization"), None);
    assert_eq!(after.get("Constant"), None);
    // SVTR's LayerNorms, written out as ReduceMean/Sub/Pow/Sqrt/Div chains.
    assert_eq!(
        after.get("LayerNormalization").copied().unwrap_or(0),
        op_counts(&model).get("Sqrt").copied().unwrap_or(0)
    );
    assert_eq!(after.get("AveragePool"), None, "AveragePool became a depthwise Conv");
}

#[test]
fn real_exports_optimize_and_agree() {
    let mut total = 0;
    for dir in real_model_dirs() {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        let (model, _) = npu_core::import::onnx::load(&dir.join("model.onnx")).expect("loads");
        let o = optimized(&model, &name);
        let back = round_trip(&o, &name);
        let execs = [
            Executor::new(&model, 2).expect("plan"),
            Executor::new(&o.model, 2).expect("plan optimized"),
            Executor::new(&back, 2).expect("plan written file"),
        ];
        let sets = sub_dirs(&dir);
        for set in &sets {
            let inputs = read_pb_set(set, "input").expect("inputs");
            let feeds = feeds(&model, inputs);
            let outs: Vec<_> = execs.iter().map(|e| e.run(&feeds).expect("runs")).collect();
            for (k, (oname, want)) in outs[0].iter().enumerate() {
                let what = format!("{} output {oname}", set.display());
                assert_eq!(&outs[1][k].0, oname, "{what}: output names are kept");
                assert_close(&outs[1][k].1, want, &what, 1e-5);
                assert_close(&outs[2][k].1, want, &format!("{what} (written file)"), 1e-5);
            }
        }
        total += 1;
    }
    assert!(total >= 5, "expected 5 exported models, found {total}");
}
