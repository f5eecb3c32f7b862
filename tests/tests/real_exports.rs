//! Real models from other exporters than PaddlePaddle, checked against onnxruntime's
//! outputs: Silero VAD (PyTorch 2.3 and 2.11 exports, and a spox build with nested If) run
//! chunk by chunk as a VAD runs, and Magika (Keras through tf2onnx 1.16) on the bytes of
//! real files; openwakeword's mel front end, speech embedding and wake-word classifiers
//! (PyTorch and tf2onnx exports) on real audio. The cases are written by `scripts/fetch_models.py` in the ONNX backend-test
//! layout under `data/real/`.

use npu_core::import::onnx::load;
use npu_core::sim::Executor;
use npu_tests::{feeds, max_rel_err, read_pb_set, real_model_dirs, sub_dirs};
use std::path::Path;

/// Runs every test set of one model; returns (sets, worst max|err|/max|ref|).
fn check_model(dir: &Path) -> (usize, f64) {
    let (model, _) = load(&dir.join("model.onnx")).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    model.validate().unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let exec = Executor::new(&model, 2).expect("plan");
    let g = &model.graph;
    let sets = sub_dirs(dir);
    let mut worst = 0f64;
    for set in &sets {
        let inputs = read_pb_set(set, "input").expect("inputs");
        let want = read_pb_set(set, "output").expect("outputs");
        assert_eq!(inputs.len(), g.inputs.len(), "{}: input count", set.display());
        let feeds = feeds(&model, inputs);
        let outs = exec.run(&feeds).unwrap_or_else(|e| panic!("{}: {e}", set.display()));
        assert_eq!(outs.len(), want.len(), "{}: output count", set.display());
        for ((name, got), want) in outs.iter().zip(&want) {
            assert_eq!(got.shape(), want.shape(), "{}: output '{name}' shape", set.display());
            let rel = max_rel_err(got, want);
            // max|ref| is no scale for a probability near 0 (openwakeword's scores on audio
            // without a wake word are ~1e-5): there the error is judged against 1, the
            // probability's own scale.
            let (g, w) = (got.to_f64(), want.to_f64());
            let max_ref = w.iter().fold(0f64, |m, v| m.max(v.abs()));
            let near_zero = max_ref < 1e-3 && g.iter().chain(w.iter()).all(|v| (0.0..=1.0).contains(v));
            let rel = if near_zero { rel * max_ref } else { rel };
            assert!(
                rel <= 1e-4,
                "{}: output '{name}': max|err|/max|ref| = {rel:.3e} exceeds 1e-4",
                set.display()
            );
            worst = worst.max(rel);
        }
    }
    (sets.len(), worst)
}

#[test]
fn exported_models_match_onnxruntime() {
    let models = real_model_dirs();
    let mut total = 0;
    for dir in &models {
        let (sets, worst) = check_model(dir);
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        println!("{name}: {sets} test sets, worst max|err|/max|ref| = {worst:.3e}");
        assert!(sets >= 3, "{name}: expected at least 3 test sets, found {sets}");
        total += 1;
    }
    // magika (tf2onnx); silero_vad at 16 kHz and 8 kHz (both If branches), its PyTorch 2.3
    // export, and the PyTorch 2.11 sequence export with an LSTM.
    assert!(total >= 5, "expected 5 exported models, found {total}");
}
