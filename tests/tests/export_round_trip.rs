//! The ONNX writer on real models: every PP-OCR model and every exported model under
//! `data/real/` is written back, re-imported, and run on a real input; the outputs must be
//! bit-identical to the original's. The written files go to `data/exported/`, where
//! `scripts/check_cli_vs_ort.py` checks that onnxruntime runs them with the original's
//! outputs.

use ndarray::ArrayD;
use ndarray_npy::ReadNpyExt;
use npu_core::import::onnx::load;
use npu_core::ir::{Model, Tensor};
use npu_core::sim::Executor;
use npu_tests::{data_dir, feeds, read_pb_set, real_model_dirs};
use std::collections::HashMap;
use std::path::Path;

fn round_trip(src: &Path, out_name: &str, feeds: &HashMap<String, Tensor>) {
    let (model, _) = load(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let out_dir = data_dir().join("exported");
    std::fs::create_dir_all(&out_dir).expect("data/exported");
    let out = out_dir.join(format!("{out_name}.onnx"));
    npu_core::export::onnx::save(&model, &out).unwrap_or_else(|e| panic!("{e}"));
    let (back, _) = load(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    back.validate().unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    same_structure(&model, &back, out_name);
    let a = Executor::new(&model, 2)
        .expect("plan")
        .run(feeds)
        .expect("original runs");
    let b = Executor::new(&back, 2)
        .expect("plan")
        .run(feeds)
        .expect("round trip runs");
    assert_eq!(a.len(), b.len());
    for ((na, ta), (nb, tb)) in a.iter().zip(&b) {
        assert_eq!(na, nb, "{out_name}: output names");
        assert_eq!(ta.shape(), tb.shape(), "{out_name}: '{na}' shape");
        assert!(
            ta.to_raw() == tb.to_raw(),
            "{out_name}: '{na}' differs after the round trip"
        );
    }
    println!(
        "{out_name}: {} nodes, outputs bit-identical after the round trip",
        model.graph.nodes.len()
    );
}

fn same_structure(a: &Model, b: &Model, what: &str) {
    assert_eq!(a.graph.nodes.len(), b.graph.nodes.len(), "{what}: node count");
    assert_eq!(a.meta.opsets, b.meta.opsets, "{what}: opsets");
    for (x, y) in a.graph.nodes.iter().zip(&b.graph.nodes) {
        assert_eq!((&x.name, &x.op, &x.domain), (&y.name, &y.op, &y.domain), "{what}");
        let ax: Vec<String> = x.attrs.iter().map(|(k, v)| format!("{k}={}", v.summary())).collect();
        let ay: Vec<String> = y.attrs.iter().map(|(k, v)| format!("{k}={}", v.summary())).collect();
        assert_eq!(ax, ay, "{what}: attributes of {}", x.name);
    }
}

#[test]
fn ppocr_models_round_trip() {
    for kind in ["det", "cls", "rec"] {
        let src = data_dir().join("models").join(format!("ppocr_{kind}.onnx"));
        let x = data_dir().join("inputs").join(format!("{kind}_chelsea.npy"));
        let f =
            std::fs::File::open(&x).unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch_models.py)", x.display()));
        let x = ArrayD::<f32>::read_npy(f).expect("npy");
        let (model, _) = load(&src).expect("model");
        let name = model.graph.values[model.graph.inputs[0]].name.clone();
        round_trip(&src, &format!("ppocr_{kind}"), &HashMap::from([(name, Tensor::F32(x))]));
    }
}

#[test]
fn exported_models_with_subgraphs_round_trip() {
    let dirs = real_model_dirs();
    assert!(dirs.len() >= 5, "expected the 5 exported models");
    for dir in dirs {
        let src = dir.join("model.onnx");
        let (model, _) = load(&src).expect("model");
        let inputs = read_pb_set(&dir.join("test_data_set_0"), "input").expect("inputs");
        let feeds = feeds(&model, inputs);
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        round_trip(&src, &name, &feeds);
    }
}
