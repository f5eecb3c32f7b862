//! One tiny hand-built graph per rewrite: the rule fires, the graph stays valid after every
//! patch, and the outputs agree with the original graph's.

use super::*;
use crate::ir::{Attr, Node, Tensor, Value};
use crate::sim::Executor;
use std::collections::HashMap;

/// A small deterministic generator (the tests must not depend on a seed source).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    fn f(&mut self) -> f32 {
        (self.next() % 20_000) as f32 / 10_000.0 - 1.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn tensor(&mut self, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_f32(shape, (0..n).map(|_| self.f()).collect()).expect("shape")
    }
}

/// Builds a graph node by node; shapes are inferred at the end.
struct B {
    m: Model,
    rng: Lcg,
}

impl B {
    fn new(opset: i64) -> Self {
        let mut m = Model::default();
        m.meta.ir_version = 8;
        m.meta.opsets.insert(String::new(), opset);
        Self { m, rng: Lcg(7) }
    }
    fn value(&mut self, name: &str) -> ValueId {
        self.m.graph.values.push(Value::new(name));
        self.m.graph.values.len() - 1
    }
    fn input(&mut self, name: &str, shape: &[usize]) -> ValueId {
        let v = self.value(name);
        self.m.graph.values[v].dtype = Some(DType::F32);
        self.m.graph.values[v].shape = Some(shape.iter().map(|&d| Dim::Fixed(d)).collect());
        self.m.graph.inputs.push(v);
        v
    }
    fn constant(&mut self, name: &str, t: &Tensor) -> ValueId {
        let v = self.value(name);
        let val = &mut self.m.graph.values[v];
        val.dtype = Some(t.dtype());
        val.shape = Some(t.shape().iter().map(|&d| Dim::Fixed(d)).collect());
        val.constant = Some(Constant::from_tensor(t));
        v
    }
    fn random(&mut self, name: &str, shape: &[usize]) -> ValueId {
        let t = self.rng.tensor(shape);
        self.constant(name, &t)
    }
    fn scalar(&mut self, name: &str, x: f32) -> ValueId {
        self.constant(name, &Tensor::scalar_f32(x))
    }
    fn ints(&mut self, name: &str, v: &[i64]) -> ValueId {
        let t = Tensor::I64(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[v.len()]), v.to_vec()).expect("shape"));
        self.constant(name, &t)
    }
    fn node_n(
        &mut self,
        op: &str,
        inputs: &[Option<ValueId>],
        outputs: usize,
        attrs: Vec<(&str, Attr)>,
    ) -> Vec<ValueId> {
        let id = self.m.graph.nodes.len();
        let name = format!("/{}_{id}", op.to_lowercase());
        let outs: Vec<ValueId> = (0..outputs).map(|k| self.value(&format!("{name}:{k}"))).collect();
        for &o in &outs {
            self.m.graph.values[o].producer = Some(id);
        }
        self.m.graph.nodes.push(Node {
            name,
            op: op.into(),
            domain: String::new(),
            inputs: inputs.to_vec(),
            outputs: outs.iter().map(|&o| Some(o)).collect(),
            attrs: attrs.into_iter().map(|(k, a)| (k.to_owned(), a)).collect(),
            origin: vec![id],
        });
        outs
    }
    fn node(&mut self, op: &str, inputs: &[ValueId], attrs: Vec<(&str, Attr)>) -> ValueId {
        let ins: Vec<Option<ValueId>> = inputs.iter().map(|&v| Some(v)).collect();
        self.node_n(op, &ins, 1, attrs)[0]
    }
    fn finish(mut self, outputs: &[ValueId]) -> Model {
        self.m.graph.outputs = outputs.to_vec();
        crate::import::shapes::infer(&mut self.m);
        self.m.validate().expect("test graph is valid");
        self.m
    }
}

fn ints(v: &[i64]) -> Attr {
    Attr::Ints(v.to_vec())
}

/// Runs `passes` with a check after every patch; compares outputs on random inputs.
fn check(model: &Model, passes: &[&str]) -> Optimized {
    let opts = Options {
        passes: select(&passes.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).expect("pass names"),
        validate_each: true,
        ..Options::default()
    };
    let out = optimize(model, &opts).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.converged, "no fixed point after {} rounds", out.rounds);
    out.model.validate().expect("valid after compaction");
    compare_outputs(model, &out.model, 11);
    // Replaying every patch gives the same graph.
    let replayed = replay(model, &out.patches).expect("replay");
    assert_eq!(op_counts(&replayed), op_counts(&out.model));
    // Every node's origin names nodes of the original model.
    for n in &out.model.graph.nodes {
        assert!(
            !n.origin.is_empty() && n.origin.iter().all(|&o| o < model.graph.nodes.len()),
            "origin of {}",
            n.name
        );
    }
    out
}

fn compare_outputs(a: &Model, b: &Model, seed: u64) {
    let mut rng = Lcg(seed);
    let feeds: HashMap<String, Tensor> = a
        .graph
        .inputs
        .iter()
        .map(|&i| {
            let v = &a.graph.values[i];
            let shape = crate::ir::concrete(v.shape.as_ref().expect("input shape")).expect("static");
            (v.name.clone(), rng.tensor(&shape))
        })
        .collect();
    let ra = Executor::new(a, 1).expect("plan a").run(&feeds).expect("run before");
    let rb = Executor::new(b, 1).expect("plan b").run(&feeds).expect("run after");
    assert_eq!(ra.len(), rb.len());
    for ((na, ta), (nb, tb)) in ra.iter().zip(&rb) {
        assert_eq!(na, nb, "output names differ");
        assert_eq!(ta.shape(), tb.shape(), "output {na} shape");
        let (x, y) = (ta.to_f64(), tb.to_f64());
        let max_ref = x.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-12);
        let max_err = x.iter().zip(y.iter()).fold(0f64, |m, (p, q)| m.max((p - q).abs()));
        assert!(
            max_err / max_ref <= 1e-5,
            "output {na}: max|err|/max|ref| = {:.3e}",
            max_err / max_ref
        );
    }
}

fn rules(o: &Optimized) -> Vec<String> {
    o.log.iter().map(|e| format!("{}/{}", e.pass, e.rule)).collect()
}

fn count(m: &Model, op: &str) -> usize {
    m.graph.nodes.iter().filter(|n| n.op == op).count()
}

#[test]
fn fold_constants_folds_constant_nodes_chains_and_static_shapes() {
    let mut b = B::new(13);
    let x = b.input("x", &[1, 3, 4, 4]);
    let two = b.node(
        "Constant",
        &[],
        vec![("value", Attr::Tensor(Constant::from_tensor(&Tensor::scalar_f32(2.0))))],
    );
    let three = b.scalar("three", 3.0);
    let s = b.node("Add", &[two, three], vec![]);
    let y = b.node("Mul", &[x, s], vec![]);
    let shape = b.node("Shape", &[y], vec![]);
    let z = b.node("Reshape", &[y, shape], vec![]);
    let m = b.finish(&[z]);
    let o = check(&m, &["fold-constants"]);
    let r = rules(&o);
    for rule in ["constant-node", "evaluate", "shape-of-static"] {
        assert!(r.contains(&format!("fold-constants/{rule}")), "{rule} in {r:?}");
    }
    assert_eq!(op_counts(&o.model).keys().collect::<Vec<_>>(), ["Mul", "Reshape"]);
}

#[test]
fn dead_code_removes_unused_nodes_and_initializers() {
    let mut b = B::new(13);
    let x = b.input("x", &[2, 5]);
    let y = b.node("Relu", &[x], vec![]);
    let _unused = b.node("Sigmoid", &[x], vec![]);
    b.random("unused_w", &[5, 5]);
    let m = b.finish(&[y]);
    let o = check(&m, &["dead-code"]);
    assert_eq!(rules(&o), ["dead-code/dead-node", "dead-code/unused-initializer"]);
    assert_eq!(o.model.graph.nodes.len(), 1);
    assert!(o.model.graph.values.iter().all(|v| v.name != "unused_w"));
}

#[test]
fn cse_merges_duplicate_constants_and_nodes() {
    let mut b = B::new(13);
    let x = b.input("x", &[2, 5]);
    let r1 = b.node("Relu", &[x], vec![]);
    let r2 = b.node("Relu", &[x], vec![]);
    let k1 = b.scalar("k1", 0.5);
    let k2 = b.scalar("k2", 0.5);
    let m1 = b.node("Mul", &[r1, k1], vec![]);
    let m2 = b.node("Mul", &[r2, k2], vec![]);
    let y = b.node("Add", &[m1, m2], vec![]);
    let m = b.finish(&[y]);
    let o = check(&m, &["cse"]);
    assert!(rules(&o).contains(&"cse/duplicate-constant".to_owned()));
    assert!(rules(&o).contains(&"cse/duplicate-node".to_owned()));
    assert_eq!((count(&o.model, "Relu"), count(&o.model, "Mul")), (1, 1));
}

#[test]
fn remove_noops_keeps_graph_output_names() {
    let mut b = B::new(13);
    let x = b.input("x", &[1, 3, 4, 4]);
    let a = b.node("Relu", &[x], vec![]);
    let i = b.node("Identity", &[a], vec![]);
    let d = b.node_n("Dropout", &[Some(i)], 2, vec![])[0];
    let shape = b.ints("shape", &[1, 3, 4, 4]);
    let r = b.node("Reshape", &[d, shape], vec![]);
    let t = b.node("Transpose", &[r], vec![("perm", ints(&[0, 1, 2, 3]))]);
    let c = b.node("Cast", &[t], vec![("to", Attr::Int(1))]);
    let y = b.node("Identity", &[c], vec![]);
    b.m.graph.values[y].name = "y".into();
    let m = b.finish(&[y]);
    let o = check(&m, &["remove-noops"]);
    assert_eq!(
        op_counts(&o.model).into_iter().collect::<Vec<_>>(),
        [("Relu".to_owned(), 1)]
    );
    let g = &o.model.graph;
    assert_eq!(g.values[g.outputs[0]].name, "y");
    for rule in ["identity", "dropout", "noop-reshape", "noop-transpose", "noop-cast"] {
        assert!(rules(&o).contains(&format!("remove-noops/{rule}")), "{rule}");
    }
}

#[test]
fn reshape_and_transpose_chains_merge() {
    let mut b = B::new(13);
    let x = b.input("x", &[1, 3, 4, 4]);
    let s1 = b.ints("s1", &[1, 48]);
    let s2 = b.ints("s2", &[1, 3, 16]);
    let r1 = b.node("Reshape", &[x, s1], vec![]);
    let r2 = b.node("Reshape", &[r1, s2], vec![]);
    let t1 = b.node("Transpose", &[x], vec![("perm", ints(&[0, 2, 3, 1]))]);
    let t2 = b.node("Transpose", &[t1], vec![("perm", ints(&[0, 3, 1, 2]))]);
    let t3 = b.node("Transpose", &[x], vec![("perm", ints(&[0, 2, 3, 1]))]);
    let t4 = b.node("Transpose", &[t3], vec![("perm", ints(&[0, 2, 1, 3]))]);
    // A graph output cannot take a graph input's place, so the cancelled pair feeds a Relu.
    let y = b.node("Relu", &[t2], vec![]);
    let m = b.finish(&[r2, y, t4]);
    let o = check(&m, &["merge-reshape-transpose", "dead-code"]);
    assert_eq!(count(&o.model, "Reshape"), 1);
    // t1·t2 cancel out; t3·t4 become one Transpose.
    assert_eq!(count(&o.model, "Transpose"), 1);
}

#[test]
fn batchnorm_folds_into_conv_convtranspose_and_gemm() {
    let mut b = B::new(13);
    let x = b.input("x", &[1, 4, 6, 6]);
    let bn = |b: &mut B, input: ValueId, c: usize, tag: &str| {
        let gamma = b.random(&format!("{tag}g"), &[c]);
        let beta = b.random(&format!("{tag}b"), &[c]);
        let mean = b.random(&format!("{tag}m"), &[c]);
        let var = Tensor::from_f32(&[c], (0..c).map(|i| 0.5 + i as f32 * 0.1).collect()).expect("var");
        let var = b.constant(&format!("{tag}v"), &var);
        b.node(
            "BatchNormalization",
            &[input, gamma, beta, mean, var],
            vec![("epsilon", Attr::Float(1e-3))],
        )
    };
    let w = b.random("w", &[6, 2, 3, 3]);
    let bias = b.random("bias", &[6]);
    let conv = b.node(
        "Conv",
        &[x, w, bias],
        vec![("group", Attr::Int(2)), ("pads", ints(&[1, 1, 1, 1]))],
    );
    let y1 = bn(&mut b, conv, 6, "a");
    let wt = b.random("wt", &[4, 3, 2, 2]);
    let ct = b.node(
        "ConvTranspose",
        &[x, wt],
        vec![("group", Attr::Int(2)), ("strides", ints(&[2, 2]))],
    );
    let y2 = bn(&mut b, ct, 6, "b");
    let a = b.input("a", &[3, 5]);
    let bw = b.random("bw", &[4, 5]);
    let gemm = b.node(
        "Gemm",
        &[a, bw],
        vec![("transB", Attr::Int(1)), ("alpha", Attr::Float(0.7))],
    );
    let y3 = bn(&mut b, gemm, 4, "c");
    let m = b.finish(&[y1, y2, y3]);
    let o = check(&m, &["fold-batchnorm"]);
    assert_eq!(count(&o.model, "BatchNormalization"), 0);
    for rule in ["conv-batchnorm", "convtranspose-batchnorm", "gemm-batchnorm"] {
        assert!(rules(&o).contains(&format!("fold-batchnorm/{rule}")), "{rule}");
    }
    // The folded conv keeps both origins.
    let conv = o.model.graph.nodes.iter().find(|n| n.op == "Conv").expect("conv");
    assert_eq!(conv.origin.len(), 2);
}

#[test]
fn bias_and_scale_fold_into_conv_and_gemm() {
    let mut b = B::new(13);
    let x = b.input("x", &[1, 3, 5, 5]);
    let w = b.random("w", &[4, 3, 3, 3]);
    let conv = b.node("Conv", &[x, w], vec![]);
    let k = b.random("k", &[1, 4, 1, 1]);
    let added = b.node("Add", &[k, conv], vec![]);
    let s = b.random("s", &[4, 1, 1]);
    let y1 = b.node("Mul", &[added, s], vec![]);
    let a = b.input("a", &[2, 6]);
    let bw = b.random("bw", &[6, 3]);
    let gemm = b.node("Gemm", &[a, bw], vec![]);
    let c = b.random("c", &[3]);
    let y2 = b.node("Add", &[gemm, c], vec![]);
    // A constant that broadcasts the output up is not a bias.
    let full = b.random("full", &[2, 4, 3, 3]);
    let w2 = b.random("w2", &[4, 3, 3, 3]);
    let x2 = b.input("x2", &[1, 3, 5, 5]);
    let conv2 = b.node("Conv", &[x2, w2], vec![]);
    let y3 = b.node("Add", &[conv2, full], vec![]);
    // ConvTranspose + bias, as PP-OCR det's head has it.
    let wt = b.random("wt", &[3, 2, 2, 2]);
    let ct = b.node(
        "ConvTranspose",
        &[x, wt],
        vec![("group", Attr::Int(1)), ("strides", ints(&[2, 2]))],
    );
    let tb = b.random("tb", &[2, 1, 1]);
    let y4 = b.node("Add", &[ct, tb], vec![]);
    let m = b.finish(&[y1, y2, y3, y4]);
    let o = check(&m, &["fold-bias"]);
    assert!(rules(&o).contains(&"fold-bias/convtranspose-add".to_owned()));
    assert_eq!(
        rules(&o).iter().filter(|r| r.starts_with("fold-bias/")).count(),
        4,
        "{:?}",
        rules(&o)
    );
    assert_eq!(count(&o.model, "Add"), 1);
    assert_eq!(count(&o.model, "Mul"), 0);
    // The first conv was rewritten twice without dead-code: value names stay unique.
    let g = &o.model.graph;
    let names: std::collections::HashSet<&str> = g.values.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names.len(), g.values.len());
}

#[test]
fn matmul_becomes_gemm_and_alpha_beta_fold() {
    let mut b = B::new(13);
    let a = b.input("a", &[2, 8]);
    let w = b.random("w", &[8, 4]);
    let y1 = b.node("MatMul", &[a, w], vec![]);
    let w2 = b.random("w2", &[8, 4]);
    let c = b.random("c", &[4]);
    let y2 = b.node(
        "Gemm",
        &[a, w2, c],
        vec![("alpha", Attr::Float(0.5)), ("beta", Attr::Float(2.0))],
    );
    let m = b.finish(&[y1, y2]);
    let o = check(&m, &["normalize-gemm"]);
    assert_eq!(count(&o.model, "Gemm"), 2);
    assert!(
        o.model
            .graph
            .nodes
            .iter()
            .all(|n| n.attr("alpha").is_none() && n.attr("beta").is_none())
    );
}

#[test]
fn decomposed_norms_and_activations_are_recognized() {
    let mut b = B::new(13);
    let x = b.input("x", &[2, 3, 8]);
    // LayerNorm as PaddlePaddle writes it.
    let axes = vec![("axes", ints(&[-1]))];
    let mean = b.node("ReduceMean", &[x], axes.clone());
    let d = b.node("Sub", &[x, mean], vec![]);
    let two = b.scalar("two", 2.0);
    let sq = b.node("Pow", &[d, two], vec![]);
    let var = b.node("ReduceMean", &[sq], axes.clone());
    let eps = b.scalar("eps", 1e-5);
    let ve = b.node("Add", &[var, eps], vec![]);
    let sd = b.node("Sqrt", &[ve], vec![]);
    let nrm = b.node("Div", &[d, sd], vec![]);
    let gamma = b.random("gamma", &[8]);
    let beta = b.random("beta", &[8]);
    let sc = b.node("Mul", &[nrm, gamma], vec![]);
    let ln = b.node("Add", &[sc, beta], vec![]);
    // RMSNorm with a reciprocal.
    let sq2 = b.node("Pow", &[x, two], vec![]);
    let ms = b.node("ReduceMean", &[sq2], axes);
    let mse = b.node("Add", &[ms, eps], vec![]);
    let rms = b.node("Sqrt", &[mse], vec![]);
    let inv = b.node("Reciprocal", &[rms], vec![]);
    let xn = b.node("Mul", &[x, inv], vec![]);
    let g2 = b.random("g2", &[8]);
    let rn = b.node("Mul", &[xn, g2], vec![]);
    // GELU as PyTorch writes it.
    let sqrt2 = b.scalar("sqrt2", std::f32::consts::SQRT_2);
    let one = b.scalar("one", 1.0);
    let half = b.scalar("half", 0.5);
    let q = b.node("Div", &[x, sqrt2], vec![]);
    let e = b.node("Erf", &[q], vec![]);
    let e1 = b.node("Add", &[e, one], vec![]);
    let xe = b.node("Mul", &[x, e1], vec![]);
    let gelu = b.node("Mul", &[xe, half], vec![]);
    // SiLU.
    let sg = b.node("Sigmoid", &[x], vec![]);
    let silu = b.node("Mul", &[sg, x], vec![]);
    // HardSwish as x·clip(x+3, 0, 6)/6, and as HardSigmoid(1/6, 0.5)·x.
    let three = b.scalar("three", 3.0);
    let zero = b.scalar("zero", 0.0);
    let six = b.scalar("six", 6.0);
    let x3 = b.node("Add", &[x, three], vec![]);
    let cl = b.node("Clip", &[x3, zero, six], vec![]);
    let xc = b.node("Mul", &[x, cl], vec![]);
    let hs1 = b.node("Div", &[xc, six], vec![]);
    let hsg = b.node(
        "HardSigmoid",
        &[x],
        vec![("alpha", Attr::Float(1.0 / 6.0)), ("beta", Attr::Float(0.5))],
    );
    let hs2 = b.node("Mul", &[x, hsg], vec![]);
    let m = b.finish(&[ln, rn, gelu, silu, hs1, hs2]);
    let o = check(&m, &["recognize-patterns", "dead-code"]);
    let ops = op_counts(&o.model);
    assert_eq!(
        ops.into_iter().collect::<Vec<_>>(),
        [
            ("Gelu".to_owned(), 1),
            ("HardSwish".to_owned(), 2),
            ("LayerNormalization".to_owned(), 1),
            ("QuickGelu".to_owned(), 1),
            ("SimplifiedLayerNormalization".to_owned(), 1)
        ]
    );
    let ln_node = o
        .model
        .graph
        .nodes
        .iter()
        .find(|n| n.op == "LayerNormalization")
        .expect("ln");
    assert_eq!(ln_node.origin.len(), 9, "LayerNorm comes from its 9 nodes");
}

/// LayerNorm with moments over `axis` as jax2tf writes Flax's: sums without kept dims
/// times 1/N, `max(E[x²] − E[x]², 0)`, broadcast back by Reshape and Expand to a shape
/// built from `Shape(x)` (the batch is dynamic), γ on the reciprocal.
fn moments_layernorm(b: &mut B, x: ValueId, shape: &[usize], axis: usize) -> ValueId {
    let n = shape[axis];
    let sh = b.node("Shape", &[x], vec![]);
    let (zero, one) = (
        b.ints(&format!("zero{axis}"), &[0]),
        b.ints(&format!("one{axis}"), &[1]),
    );
    let batch = b.node("Slice", &[sh, zero, one, zero], vec![]);
    let mut keep: Vec<i64> = shape[1..].iter().map(|&d| d as i64).collect();
    keep[axis - 1] = 1;
    let rest = b.ints(&format!("rest{axis}"), &keep);
    let cat = b.node("Concat", &[batch, rest], vec![("axis", Attr::Int(0))]);
    let target = b.node("Cast", &[cat], vec![("to", Attr::Int(7))]);
    let axes = b.ints(&format!("axes{axis}"), &[axis as i64]);
    let kd = || vec![("keepdims", Attr::Int(0))];
    let inv_n = b.scalar(&format!("inv_n{axis}"), 1.0 / n as f32);
    let s1 = b.node("ReduceSum", &[x, axes], kd());
    let mean = b.node("Mul", &[s1, inv_n], vec![]);
    let sq = b.node("Mul", &[x, x], vec![]);
    let s2 = b.node("ReduceSum", &[sq, axes], kd());
    let m2 = b.node("Mul", &[s2, inv_n], vec![]);
    let m1sq = b.node("Mul", &[mean, mean], vec![]);
    let var = b.node("Sub", &[m2, m1sq], vec![]);
    let z = b.scalar(&format!("z{axis}"), 0.0);
    let clamped = b.node("Max", &[z, var], vec![]);
    let r = b.node("Reshape", &[clamped, target], vec![]);
    let e = b.node("Expand", &[r, target], vec![]);
    let eps = b.scalar(&format!("eps{axis}"), 1e-6);
    let ve = b.node("Add", &[e, eps], vec![]);
    let sd = b.node("Sqrt", &[ve], vec![]);
    let inv = b.node("Reciprocal", &[sd], vec![]);
    let mut gshape = vec![1; shape.len()];
    gshape[axis] = n;
    let gamma = b.random(&format!("gamma{axis}"), &gshape);
    let beta = b.random(&format!("beta{axis}"), &gshape);
    let ig = b.node("Mul", &[inv, gamma], vec![]);
    let mr = b.node("Reshape", &[mean, target], vec![]);
    let me = b.node("Expand", &[mr, target], vec![]);
    let c = b.node("Sub", &[x, me], vec![]);
    let y = b.node("Mul", &[c, ig], vec![]);
    b.node("Add", &[y, beta], vec![])
}

#[test]
fn moments_layernorms_with_a_dynamic_batch_are_recognized() {
    let mut b = B::new(13);
    let shape = [3, 6, 4];
    let x = b.input("x", &shape);
    b.m.graph.values[x].shape = Some(vec![Dim::Sym("n".into()), Dim::Fixed(6), Dim::Fixed(4)]);
    // Over the middle axis (a Transpose each side), then over the last one.
    let mid = moments_layernorm(&mut b, x, &shape, 1);
    let last = moments_layernorm(&mut b, mid, &shape, 2);
    let m = b.finish(&[last]);
    // The targets' symbolic batch is followed through Shape, Slice, Concat and Cast.
    let reshaped = m
        .graph
        .nodes
        .iter()
        .find(|n| n.op == "Reshape")
        .and_then(|n| n.outputs[0]);
    assert_eq!(
        reshaped.and_then(|v| m.graph.values[v].shape.clone()),
        Some(vec![Dim::Sym("n".into()), Dim::Fixed(1), Dim::Fixed(4)])
    );
    let opts = Options {
        passes: select(&[
            "remove-noops".to_owned(),
            "recognize-patterns".to_owned(),
            "dead-code".to_owned(),
        ])
        .expect("pass names"),
        validate_each: true,
        ..Options::default()
    };
    let o = optimize(&m, &opts).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        rules(&o).iter().filter(|r| r.ends_with("/layernorm-moments")).count(),
        2
    );
    let ops = op_counts(&o.model);
    assert_eq!(
        ops.into_iter().collect::<Vec<_>>(),
        [("LayerNormalization".to_owned(), 2), ("Transpose".to_owned(), 2)]
    );
    let perms: Vec<Vec<i64>> = o
        .model
        .graph
        .nodes
        .iter()
        .filter_map(|n| n.attr_ints("perm").map(<[i64]>::to_vec))
        .collect();
    assert_eq!(perms, [vec![0, 2, 1], vec![0, 2, 1]]);
    // The function is the same at a fixed batch.
    let fix = |model: &Model| {
        let mut f = model.clone();
        crate::import::shapes::fix_inputs(&mut f, &HashMap::from([("x".to_owned(), shape.to_vec())])).expect("x");
        f
    };
    compare_outputs(&fix(&m), &fix(&o.model), 5);
}

#[test]
fn a_pattern_whose_inner_value_escapes_is_left_alone() {
    let mut b = B::new(13);
    let x = b.input("x", &[2, 8]);
    let sg = b.node("Sigmoid", &[x], vec![]);
    let silu = b.node("Mul", &[x, sg], vec![]);
    let m = b.finish(&[silu, sg]);
    let o = check(&m, &["recognize-patterns"]);
    assert!(o.log.is_empty());
}

#[test]
fn activations_fuse_into_conv_and_gemm() {
    let mut b = B::new(13);
    let x = b.input("x", &[1, 3, 5, 5]);
    let mut outs = Vec::new();
    let zero = b.scalar("zero", 0.0);
    let six = b.scalar("six", 6.0);
    for (k, act) in [
        "Relu",
        "Clip",
        "LeakyRelu",
        "Sigmoid",
        "Tanh",
        "HardSigmoid",
        "HardSwish",
    ]
    .iter()
    .enumerate()
    {
        let w = b.random(&format!("w{k}"), &[4, 3, 3, 3]);
        let c = b.node("Conv", &[x, w], vec![("pads", ints(&[1, 1, 1, 1]))]);
        let y = match *act {
            "Clip" => b.node("Clip", &[c, zero, six], vec![]),
            "LeakyRelu" => b.node(act, &[c], vec![("alpha", Attr::Float(0.2))]),
            _ => b.node(act, &[c], vec![]),
        };
        outs.push(y);
    }
    let a = b.input("a", &[2, 6]);
    let bw = b.random("bw", &[6, 3]);
    let gemm = b.node("Gemm", &[a, bw], vec![]);
    outs.push(b.node("Relu", &[gemm], vec![]));
    // FusedGemm carries its parameters as activation_alpha/activation_beta.
    let bw2 = b.random("bw2", &[6, 3]);
    let gemm2 = b.node("Gemm", &[a, bw2], vec![]);
    outs.push(b.node(
        "HardSigmoid",
        &[gemm2],
        vec![("alpha", Attr::Float(0.3)), ("beta", Attr::Float(0.4))],
    ));
    let m = b.finish(&outs);
    let o = check(&m, &["fuse-activation"]);
    assert_eq!(count(&o.model, "FusedConv"), 7);
    assert_eq!(count(&o.model, "FusedGemm"), 2);
    assert_eq!(o.model.graph.nodes.len(), 9);
    let hs = o
        .model
        .graph
        .nodes
        .iter()
        .find(|n| n.attr_s("activation") == Some("HardSigmoid") && n.op == "FusedGemm");
    assert_eq!(hs.and_then(|n| n.attr_f("activation_beta")), Some(0.4));
}

#[test]
fn silu_fuses_into_conv_through_recognition() {
    let mut b = B::new(13);
    let x = b.input("x", &[1, 3, 5, 5]);
    let w = b.random("w", &[4, 3, 1, 1]);
    let c = b.node("Conv", &[x, w], vec![]);
    let s = b.node("Sigmoid", &[c], vec![]);
    let y = b.node("Mul", &[c, s], vec![]);
    let m = b.finish(&[y]);
    let o = check(&m, &["recognize-patterns", "fuse-activation"]);
    let n = &o.model.graph.nodes;
    assert_eq!(n.len(), 1);
    assert_eq!(n[0].attr_s("activation"), Some("Silu"));
    // Written as ONNX, it becomes Conv + QuickGelu, which onnxruntime runs; reading that
    // file back gives the same outputs.
    let lowered = crate::export::onnx::lowered(&o.model).expect("lowered");
    assert_eq!(
        op_counts(&lowered).into_iter().collect::<Vec<_>>(),
        [("Conv".to_owned(), 1), ("QuickGelu".to_owned(), 1)]
    );
    compare_outputs(&m, &lowered, 3);
}

#[test]
fn pools_become_depthwise_conv_and_global_average_pool() {
    let mut b = B::new(13);
    let x = b.input("x", &[1, 3, 6, 6]);
    let p = b.node(
        "AveragePool",
        &[x],
        vec![
            ("kernel_shape", ints(&[3, 3])),
            ("pads", ints(&[1, 1, 1, 1])),
            ("count_include_pad", Attr::Int(1)),
        ],
    );
    let q = b.node(
        "AveragePool",
        &[x],
        vec![("kernel_shape", ints(&[2, 2])), ("strides", ints(&[2, 2]))],
    );
    let r = b.node("ReduceMean", &[x], vec![("axes", ints(&[2, 3]))]);
    // Padding not counted in the average: not a convolution.
    let keep = b.node(
        "AveragePool",
        &[x],
        vec![("kernel_shape", ints(&[3, 3])), ("pads", ints(&[1, 1, 1, 1]))],
    );
    let m = b.finish(&[p, q, r, keep]);
    let o = check(&m, &["pool-rewrite"]);
    assert_eq!(count(&o.model, "Conv"), 2);
    assert_eq!(count(&o.model, "GlobalAveragePool"), 1);
    assert_eq!(count(&o.model, "AveragePool"), 1);
}

#[test]
fn optimized_models_round_trip_through_onnx() {
    let mut b = B::new(11);
    let x = b.input("x", &[1, 3, 5, 5]);
    let w = b.random("w", &[4, 3, 3, 3]);
    let c = b.node("Conv", &[x, w], vec![]);
    let three = b.scalar("three", 3.0);
    let zero = b.scalar("zero", 0.0);
    let six = b.scalar("six", 6.0);
    let a = b.node("Add", &[c, three], vec![]);
    let cl = b.node("Clip", &[a, zero, six], vec![]);
    let m1 = b.node("Mul", &[c, cl], vec![]);
    let y = b.node("Div", &[m1, six], vec![]);
    let sg = b.node("Sigmoid", &[y], vec![]);
    let z = b.node("Mul", &[y, sg], vec![]);
    let m = b.finish(&[z]);
    let o = check(&m, &["recognize-patterns", "fuse-activation"]);
    assert_eq!(
        op_counts(&o.model).into_iter().collect::<Vec<_>>(),
        [("FusedConv".to_owned(), 1), ("QuickGelu".to_owned(), 1)]
    );
    let bytes = crate::export::onnx::to_bytes(&o.model);
    let dir = std::env::temp_dir().join(format!("npu-passes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("opt.onnx");
    std::fs::write(&path, bytes).expect("write");
    let (back, _) = crate::import::onnx::load(&path).expect("the optimized file loads");
    assert_eq!(back.meta.opsets.get("com.microsoft"), Some(&1));
    compare_outputs(&m, &back, 5);
    std::fs::remove_dir_all(dir).ok();
}

/// A random graph of the shapes real CNNs have: convolutions, BatchNorm, activations
/// (plain and decomposed), bias Adds, no-ops, Reshape/Transpose pairs and shared values.
fn random_graph(seed: u64) -> Model {
    let mut b = B::new(13);
    b.rng = Lcg(seed);
    let x = b.input("x", &[1, 4, 6, 6]);
    let mut live = vec![x];
    let steps = 3 + b.rng.below(12);
    for k in 0..steps {
        let pick = b.rng.below(live.len());
        let v = live[pick];
        let y = match b.rng.below(12) {
            0 | 1 => {
                let w = b.random(&format!("w{k}"), &[4, 4, 3, 3]);
                b.node("Conv", &[v, w], vec![("pads", ints(&[1, 1, 1, 1]))])
            }
            2 => {
                let p: Vec<ValueId> = (0..4).map(|i| b.random(&format!("bn{k}_{i}"), &[4])).collect();
                let var = Tensor::from_f32(&[4], vec![0.7, 1.2, 0.9, 2.0]).expect("var");
                let var = b.constant(&format!("var{k}"), &var);
                b.node("BatchNormalization", &[v, p[0], p[1], p[2], var], vec![])
            }
            3 | 10 => b.node("Relu", &[v], vec![]),
            4 => {
                let s = b.node("Sigmoid", &[v], vec![]);
                b.node("Mul", &[v, s], vec![])
            }
            5 => {
                let c = b.random(&format!("c{k}"), &[1, 4, 1, 1]);
                b.node("Add", &[v, c], vec![])
            }
            6 => b.node("Identity", &[v], vec![]),
            7 => {
                let t = b.node("Transpose", &[v], vec![("perm", ints(&[0, 2, 3, 1]))]);
                b.node("Transpose", &[t], vec![("perm", ints(&[0, 3, 1, 2]))])
            }
            8 => {
                let s1 = b.ints(&format!("s{k}"), &[1, 144]);
                let s2 = b.ints(&format!("t{k}"), &[1, 4, 6, 6]);
                let r = b.node("Reshape", &[v, s1], vec![]);
                b.node("Reshape", &[r, s2], vec![])
            }
            9 => {
                let other = live[b.rng.below(live.len())];
                b.node("Add", &[v, other], vec![])
            }
            _ => {
                let three = b.scalar(&format!("three{k}"), 3.0);
                let six = b.scalar(&format!("six{k}"), 6.0);
                let zero = b.scalar(&format!("zero{k}"), 0.0);
                let a = b.node("Add", &[v, three], vec![]);
                let c = b.node("Clip", &[a, zero, six], vec![]);
                let m = b.node("Mul", &[v, c], vec![]);
                b.node("Div", &[m, six], vec![])
            }
        };
        live.push(y);
    }
    // The last value and one random earlier value are outputs.
    let last = *live.last().unwrap_or(&x);
    let other = live[1 + b.rng.below(live.len() - 1)];
    let outs = if other == last { vec![last] } else { vec![last, other] };
    b.finish(&outs)
}

#[test]
fn fixed_point_terminates_on_random_graphs() {
    for seed in 0..150 {
        let m = random_graph(seed);
        let opts = Options {
            validate_each: true,
            ..Options::default()
        };
        let o = optimize(&m, &opts).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(o.converged, "seed {seed}: no fixed point in {} rounds", o.rounds);
        o.model.validate().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        compare_outputs(&m, &o.model, seed);
        // A second run finds nothing left to do.
        let again = optimize(&o.model, &Options::default()).expect("second run");
        assert!(
            again.patches.is_empty(),
            "seed {seed}: second run applied {:?}",
            rules(&again)
        );
    }
}
