//! Runs the ONNX backend node tests (from the `onnx` wheel, see
//! `scripts/fetch_onnx_node_tests.py`) against the executor.
//!
//! `tests/conformance/onnx_node_manifest.txt` lists the tests that must pass: a listed
//! test that fails is a failure. Set `NPU_CONFORMANCE_ALL=1` to run every test (single-node
//! models and the multi-node `_expanded` ones) and print the ones that pass (to update the manifest).

use npu_core::import::onnx::load;
use npu_core::ir::Val;
use npu_core::sim::Executor;
use npu_tests::{compare_val, data_dir, read_pb_values};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The ops the foundation issue claims; coverage is reported for each.
const CLAIMED: &[&str] = &[
    "Conv",
    "ConvTranspose",
    "MatMul",
    "Gemm",
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Sqrt",
    "Exp",
    "Log",
    "Neg",
    "Abs",
    "Reciprocal",
    "Erf",
    "Tanh",
    "Sigmoid",
    "Relu",
    "LeakyRelu",
    "PRelu",
    "Clip",
    "HardSigmoid",
    "HardSwish",
    "Elu",
    "Softplus",
    "Gelu",
    "Max",
    "Min",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Softmax",
    "LogSoftmax",
    "Reshape",
    "Flatten",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Concat",
    "Split",
    "Slice",
    "Gather",
    "Pad",
    "Resize",
    "Expand",
    "Tile",
    "Shape",
    "Size",
    "ConstantOfShape",
    "Constant",
    "Cast",
    "Identity",
    "Dropout",
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL2",
    "ArgMax",
    "Where",
    "Equal",
    "Less",
    "Greater",
    "GreaterOrEqual",
    "Not",
    "And",
    "Range",
    "DepthToSpace",
    "SpaceToDepth",
    "QuantizeLinear",
    "DequantizeLinear",
    "If",
    "Loop",
    "CumProd",
    "RMSNormalization",
    "Hardmax",
    "LpNormalization",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "BitwiseNot",
    "BitShift",
    "Shrink",
    "LRN",
    "GroupNormalization",
    "ScatterElements",
    "Scatter",
    "ScatterND",
    "GatherND",
    "OneHot",
    "Compress",
    "ReverseSequence",
    "TopK",
    "HannWindow",
    "HammingWindow",
    "BlackmanWindow",
    "Attention",
    "NegativeLogLikelihoodLoss",
    "SoftmaxCrossEntropyLoss",
    "RotaryEmbedding",
    "LSTM",
];

/// Runs one node test; `Err` says why it failed.
fn run_case(dir: &Path) -> Result<(), String> {
    let (model, _) = load(&dir.join("model.onnx")).map_err(|e| e.to_string())?;
    let g = &model.graph;
    let kinds = |ids: &[usize]| ids.iter().map(|&i| g.values[i].kind).collect::<Vec<_>>();
    let set = dir.join("test_data_set_0");
    let inputs = read_pb_values(&set, "input", &kinds(&g.inputs))?;
    let expected = read_pb_values(&set, "output", &kinds(&g.outputs))?;
    if inputs.len() != g.inputs.len() {
        return Err(format!("{} inputs in data, {} in graph", inputs.len(), g.inputs.len()));
    }
    let feeds: HashMap<String, Val> = g
        .inputs
        .iter()
        .zip(inputs)
        .map(|(&i, t)| (g.values[i].name.clone(), t))
        .collect();
    if expected.is_empty() {
        return Err("no expected outputs to compare".into());
    }
    let exec = Executor::new(&model, 1).map_err(|e| e.to_string())?;
    let outs = exec.run_values(&feeds).map_err(|e| e.to_string())?;
    if outs.len() != expected.len() {
        return Err(format!("{} outputs, expected {}", outs.len(), expected.len()));
    }
    for (i, ((name, got), want)) in outs.iter().zip(&expected).enumerate() {
        compare_val(got, want, 1e-3, 1e-5).map_err(|e| format!("output {i} '{name}': {e}"))?;
    }
    Ok(())
}

/// The op of a test model: the op of a single-node model, `(graph)` for a model of several
/// nodes (the `_expanded` tests and the like); `None` when the model does not load at all.
fn case_op(dir: &Path) -> Option<String> {
    let (model, _) = npu_core::import::onnx::load_with(
        &dir.join("model.onnx"),
        &npu_core::import::onnx::LoadOptions {
            allow_unsupported: true,
        },
    )
    .ok()?;
    Some(match model.graph.nodes.as_slice() {
        [node] => node.op.clone(),
        _ => "(graph)".to_owned(),
    })
}

#[test]
fn onnx_backend_node_tests() {
    let root = data_dir().join("onnx-node");
    assert!(
        root.is_dir(),
        "{} is missing: run `python3 scripts/fetch_onnx_node_tests.py` (needs onnx==1.22.0)",
        root.display()
    );
    let manifest_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("conformance/onnx_node_manifest.txt");
    let manifest = std::fs::read_to_string(&manifest_path).expect("manifest");
    let listed: Vec<&str> = manifest
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let all = std::env::var("NPU_CONFORMANCE_ALL").is_ok();

    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("read node dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.sort();
    let mut per_op: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut passed = 0;
    let mut ran_listed = 0;
    for dir in &dirs {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        let is_listed = listed.contains(&name.as_str());
        // A listed case always runs: one whose model no longer loads is a failure, not a skip.
        let op = match case_op(dir) {
            Some(op) => op,
            None if is_listed => "(not a loadable model)".to_owned(),
            None => continue,
        };
        let claimed = CLAIMED.contains(&op.as_str());
        if !is_listed && !all && !claimed {
            continue;
        }
        ran_listed += usize::from(is_listed);
        let r = std::panic::catch_unwind(|| run_case(dir)).unwrap_or_else(|_| Err("panicked".into()));
        let entry = per_op.entry(op.clone()).or_default();
        entry.1 += 1;
        match r {
            Ok(()) => {
                entry.0 += 1;
                passed += 1;
                if all {
                    println!("PASS {name}");
                }
            }
            Err(e) => {
                if is_listed {
                    failures.push(format!("{name} ({op}): {e}"));
                } else if all || claimed {
                    println!("not passing (unlisted) {name} ({op}): {e}");
                }
            }
        }
    }
    let mut low = Vec::new();
    println!("ONNX node tests per claimed op (pass/total):");
    for op in CLAIMED {
        let (p, t) = per_op.get(*op).copied().unwrap_or((0, 0));
        println!("  {op:24} {p:3}/{t:3}");
        if t > 0 && (p as f64) < 0.9 * t as f64 {
            low.push(format!("{op} {p}/{t}"));
        }
    }
    let missing: Vec<&&str> = listed.iter().filter(|l| !root.join(l).is_dir()).collect();
    println!(
        "ONNX node conformance: {passed} passed, {} listed tests failed, {} listed",
        failures.len(),
        listed.len()
    );
    assert!(
        missing.is_empty(),
        "manifest lists tests that do not exist: {missing:?}"
    );
    assert_eq!(ran_listed, listed.len(), "every listed test ran");
    assert!(
        failures.is_empty(),
        "listed node tests failed:\n{}",
        failures.join("\n")
    );
    assert!(low.is_empty(), "claimed ops below 90% coverage: {low:?}");
}

/// The harness cannot pass a case it could not check: an expected output file that is gone
/// is an error, and so is a data set with no outputs at all.
#[test]
fn a_case_without_its_expected_outputs_fails() {
    let src = data_dir().join("onnx-node").join("test_relu");
    let dir = std::env::temp_dir().join(format!("npu_conformance_gap_{}", std::process::id()));
    let set = dir.join("test_data_set_0");
    std::fs::create_dir_all(&set).expect("tmp");
    std::fs::copy(src.join("model.onnx"), dir.join("model.onnx"))
        .expect("model.onnx (run scripts/fetch_onnx_node_tests.py)");
    std::fs::copy(src.join("test_data_set_0/input_0.pb"), set.join("input_0.pb")).expect("input");
    let e = run_case(&dir).expect_err("no output_0.pb: nothing to compare");
    assert!(e.contains("output_0.pb"), "{e}");
    std::fs::copy(src.join("test_data_set_0/output_0.pb"), set.join("output_0.pb")).expect("output");
    run_case(&dir).expect("with its expected output the case passes");
    std::fs::copy(src.join("test_data_set_0/output_0.pb"), set.join("output_1.pb")).expect("output");
    let e = run_case(&dir).expect_err("an output the graph lacks");
    assert!(e.contains("output_1.pb"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
