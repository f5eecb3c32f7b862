//! Integer plans beyond int8 CNNs, on real models: PP-OCR rec (LayerNorm as float ops,
//! attention as BATCH_MATMUL), the 16×8 scheme (int16 activations, int64 biases), 4-bit
//! weights (int4 packed two per byte), and Magika, whose input is int32 byte values.
//! (Bit-exactness of all of them against LiteRT's reference kernels:
//! `scripts/check_tflite_litert.py`, run by `scripts/test.sh`.)

use npu_core::ir::Model;
use npu_core::program::{FloatOp, IntType, OpKind, Program};
use npu_core::progress::Silent;
use npu_core::quant::data::{Preprocess, source};
use npu_core::quant::legalize::legalize;
use npu_core::quant::observer::Calibration;
use npu_core::quant::{QuantPlan, Quantizer};
use npu_core::sim::integer::{Input, run};
use npu_tests::{data_dir, optimized};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A folder of links to `data/inputs/<names>` (disjoint from the evaluation files).
fn folder(tag: &str, names: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("npu_integer_{tag}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tmp");
    for n in names {
        std::fs::copy(data_dir().join("inputs").join(n), dir.join(n)).expect("data/inputs (scripts/fetch_models.py)");
    }
    dir
}

fn plan(model: &Model, calib: &Path, pre: &str, preset: &str) -> QuantPlan {
    let q = Quantizer::new(model, 2).expect("quantizer");
    let src = source(calib.to_str().expect("path")).expect("samples");
    let pre = Preprocess::parse(pre).expect("spec");
    q.calibrate(
        &mut src.samples(model, &pre),
        src.len(),
        preset,
        Calibration::Mse,
        &Silent,
    )
    .expect("calibrates")
}

fn cls() -> (Model, PathBuf) {
    let m = optimized(&data_dir().join("models").join("ppocr_cls.onnx"));
    (m, data_dir().join("crops8"))
}

const CLS_PRE: &str = "size=48x192;color=bgr;scale=1/255;mean=0.5;std=0.5";

fn float_ops(p: &Program) -> Vec<&FloatOp> {
    p.ops
        .iter()
        .filter_map(|o| match &o.kind {
            OpKind::Float { op } => Some(op),
            _ => None,
        })
        .collect()
}

fn parse(bytes: &[u8]) -> tflite_schema::Model<'_> {
    tflite_schema::root_as_model(bytes).expect("a valid TFLite flatbuffer")
}

#[test]
fn rec_runs_attention_as_batch_matmul_and_layernorm_in_float() {
    let model = optimized(&data_dir().join("models").join("ppocr_rec.onnx"));
    let calib = folder("rec", &["rec_astronaut.npy", "rec_chelsea.npy", "rec_coffee.npy"]);
    let plan = plan(&model, &calib, "", "w8a8");
    let p = legalize(&model, &plan, &HashMap::new()).expect("rec legalizes");
    let bmm = p.ops.iter().filter(|o| o.kind == OpKind::BatchMatMul).count();
    let ln = float_ops(&p)
        .iter()
        .filter(|o| matches!(o, FloatOp::LayerNorm { .. }))
        .count();
    // Two attention blocks of Q·Kᵀ and softmax·V; five LayerNorms.
    assert_eq!((bmm, ln), (4, 5), "BATCH_MATMULs and LayerNorms");
    // SiLU (x·sigmoid(x)) as LOGISTIC and MUL, the sigmoid on the fixed (1/256, −128) grid.
    let sig: Vec<_> = p
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::Logistic)
        .map(|o| &p.tensors[o.outputs[0]])
        .collect();
    assert_eq!(sig.len(), 7, "the seven sigmoids of rec's SiLUs");
    assert!(sig.iter().all(|t| (t.q.s(), t.q.zp()) == (1.0 / 256.0, -128)));

    // The export names the float nodes and brackets them with DEQUANTIZE and QUANTIZE.
    let w = npu_core::export::tflite::write(&p, npu_core::export::tflite::Io::Int8).expect("writes");
    assert_eq!(w.float_nodes.len(), 5, "{:?}", w.float_nodes);
    let m = parse(&w.bytes);
    let codes: Vec<tflite_schema::BuiltinOperator> = m
        .operator_codes()
        .expect("codes")
        .iter()
        .map(|c| c.builtin_code())
        .collect();
    let ops = m.subgraphs().expect("subgraphs").get(0).operators().expect("ops");
    let count =
        |code: tflite_schema::BuiltinOperator| ops.iter().filter(|o| codes[o.opcode_index() as usize] == code).count();
    assert_eq!(count(tflite_schema::BuiltinOperator::BATCH_MATMUL), 4);
    assert_eq!(count(tflite_schema::BuiltinOperator::RSQRT), 5);
    assert!(count(tflite_schema::BuiltinOperator::DEQUANTIZE) >= 5);

    // The integer run stays close to FP32 on a photo the plan was not calibrated on.
    let x = npu_core::ir::npy::read(&data_dir().join("inputs").join("rec_page.npy")).expect("input");
    let r = run(&p, vec![Input::Float(x.to_f32().iter().copied().collect())]).expect("runs");
    let out = &p.tensors[p.outputs[0]];
    let got: Vec<f32> = r.values[p.outputs[0]]
        .as_ref()
        .expect("output")
        .iter()
        .map(|&c| out.q.real(c))
        .collect();
    let e = npu_core::sim::Executor::new(&model, 1).expect("executor");
    let reference = e.run(&npu_tests::feeds(&model, vec![x])).expect("fp32");
    let fp: Vec<f32> = reference[0].1.to_f32().iter().copied().collect();
    let (num, den) = fp.iter().zip(&got).fold((0f64, 0f64), |(n, d), (&a, &b)| {
        (n + f64::from(a) * f64::from(a), d + f64::from(a - b).powi(2))
    });
    let sqnr = 10.0 * (num / den).log10();
    println!("rec w8a8 integer reference on the page photo: {sqnr:.2} dB vs FP32");
    assert!(sqnr > 8.0, "{sqnr} dB");
}

#[test]
fn the_16x8_scheme_has_symmetric_int16_activations_and_int64_biases() {
    let (model, calib) = cls();
    let plan = plan(&model, &calib, CLS_PRE, "w8a16");
    let p = legalize(&model, &plan, &HashMap::new()).expect("cls w8a16 legalizes");
    let acts: Vec<_> = p.tensors.iter().filter(|t| t.data.is_none()).collect();
    assert!(
        acts.iter().all(|t| t.q.ty == IntType::I16 && t.q.zp() == 0),
        "activations int16, zero point 0"
    );
    let convs: Vec<_> = p
        .ops
        .iter()
        .filter(|o| matches!(o.kind, OpKind::Conv { .. } | OpKind::FullyConnected { .. }))
        .collect();
    assert!(!convs.is_empty());
    for c in &convs {
        assert_eq!(p.tensors[c.inputs[1]].q.ty, IntType::I8, "weights stay int8");
        assert_eq!(p.tensors[c.inputs[2]].q.ty, IntType::I64, "biases are int64");
    }
    // Softmax on 2^-15; HardSwish (no int16 TFLite kernel) in float.
    let out = &p.tensors[p.outputs[0]];
    assert_eq!((out.q.s(), out.q.zp()), (1.0 / 32768.0, 0));
    assert!(float_ops(&p).iter().any(|o| matches!(o, FloatOp::HardSwish)));
    assert!(p.constraints.iter().any(|c| c.rule == "int16-symmetric"));

    let w = npu_core::export::tflite::write(&p, npu_core::export::tflite::Io::Int8).expect("writes");
    let m = parse(&w.bytes);
    let types: Vec<tflite_schema::TensorType> = m
        .subgraphs()
        .expect("sg")
        .get(0)
        .tensors()
        .expect("tensors")
        .iter()
        .map(|t| t.type_())
        .collect();
    assert!(types.contains(&tflite_schema::TensorType::INT16) && types.contains(&tflite_schema::TensorType::INT64));
}

#[test]
fn int4_weights_pack_two_per_byte_where_tflite_takes_them() {
    let (model, calib) = cls();
    let plan = plan(&model, &calib, CLS_PRE, "w4a16");
    let p = legalize(&model, &plan, &HashMap::new()).expect("cls w4a16 legalizes");
    let mut int4 = 0;
    for o in &p.ops {
        let OpKind::Conv { groups, .. } = o.kind else { continue };
        let w = &p.tensors[o.inputs[1]];
        if groups > 1 && groups == w.shape[0] {
            // Depthwise under int16 inputs: TFLite's kernel reads int4 filters as int8.
            assert_eq!(w.q.ty, IntType::I8, "{}", w.name);
        } else {
            assert_eq!(w.q.ty, IntType::I4, "{}", w.name);
            assert!(w.data.as_ref().is_some_and(|d| d.iter().all(|c| (-7..=7).contains(c))));
            int4 += 1;
        }
    }
    assert!(int4 > 10, "{int4} int4 convolutions");
    assert!(p.constraints.iter().any(|c| c.rule == "int4-weights-as-int8"));

    // In the file: INT4 tensors of ceil(n/2) bytes, low nibble first, OHWI order.
    let w = npu_core::export::tflite::write(&p, npu_core::export::tflite::Io::Int8).expect("writes");
    let m = parse(&w.bytes);
    let sg = m.subgraphs().expect("sg").get(0);
    let buffers = m.buffers().expect("buffers");
    let conv = p
        .ops
        .iter()
        .find(|o| matches!(o.kind, OpKind::Conv { .. }) && p.tensors[o.inputs[1]].q.ty == IntType::I4)
        .expect("an int4 conv");
    let wt = &p.tensors[conv.inputs[1]];
    let ft = sg
        .tensors()
        .expect("tensors")
        .iter()
        .find(|t| t.name() == Some(wt.name.as_str()))
        .expect("the weight in the file");
    assert_eq!(ft.type_(), tflite_schema::TensorType::INT4);
    let bytes = buffers.get(ft.buffer() as usize).data().expect("data").bytes().to_vec();
    let n: usize = wt.shape.iter().product();
    assert_eq!(bytes.len(), n.div_ceil(2));
    let ohwi = npu_core::sim::integer::kernels::transpose(wt.data.as_deref().expect("codes"), &wt.shape, &[0, 2, 3, 1]);
    let unpacked: Vec<i64> = (0..n)
        .map(|i| {
            let b = bytes[i / 2];
            let nib = if i % 2 == 0 { b & 0x0F } else { b >> 4 };
            i64::from(((nib << 4) as i8) >> 4)
        })
        .collect();
    assert_eq!(unpacked, ohwi);
}

#[test]
fn magika_takes_its_byte_values_as_int32() {
    let path = data_dir().join("real").join("magika_standard_v3_3").join("model.onnx");
    let model = optimized(&path);
    let calib = folder("magika", &["magika_0.npy", "magika_1.npy", "magika_2.npy"]);
    let plan = plan(&model, &calib, "", "w8a8");
    let p = legalize(&model, &plan, &HashMap::new()).expect("magika legalizes");
    let input = &p.tensors[p.inputs[0]];
    assert_eq!(input.q.ty, IntType::Index, "the byte values are never quantized");
    assert!(
        float_ops(&p).iter().any(|o| matches!(o, FloatOp::Equal)),
        "one-hot by EQUAL"
    );
    let x = npu_core::ir::npy::read(&data_dir().join("inputs").join("magika_3.npy")).expect("input");
    let codes: Vec<i32> = x.to_i64().expect("ints").iter().map(|&v| v as i32).collect();
    let r = run(&p, vec![Input::Codes(codes)]).expect("runs");
    let out = &p.tensors[p.outputs[0]];
    let probs: Vec<f32> = r.values[p.outputs[0]]
        .as_ref()
        .expect("output")
        .iter()
        .map(|&c| out.q.real(c))
        .collect();
    // Six files, a softmax row each (DIV in float between DEQUANTIZE and QUANTIZE).
    assert_eq!(probs.len() % 6, 0);
    for row in probs.chunks(probs.len() / 6) {
        let s: f32 = row.iter().sum();
        assert!((s - 1.0).abs() < 0.1, "row sums to {s}");
    }
}
