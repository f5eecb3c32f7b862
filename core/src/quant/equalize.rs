//! Cross-layer equalization (Nagel et al., "Data-Free Quantization Through Weight
//! Equalization and Bias Correction", 2019; AIMET's CLE): for two convolutions in a row
//! with a positively homogeneous activation between them (none, Relu, LeakyRelu), output
//! channel `i` of the first is divided by `s_i` and input channel `i` of the second is
//! multiplied by it. `relu(x / s) = relu(x) / s` for `s > 0`, so the FP32 function is
//! unchanged; `s_i = sqrt(r1_i / r2_i)` gives both layers the channel range
//! `sqrt(r1_i · r2_i)`, which evens out per-tensor weight grids and the activation range
//! between them (the outlier channels of a depthwise conv or a detector's neck).
//!
//! A plan keeps the scales (by the first layer's name), so every command that reads the
//! plan makes the same equalized weights from the optimized graph ([`apply`]).

use crate::ir::{Constant, Graph, Model, NodeId, Tensor, ValueId};
use std::collections::BTreeMap;

/// Scales of one equalized layer: output channel `i` of `first` is divided by `scales[i]`,
/// input channel `i` of its only consumer multiplied by it.
pub type Scales = BTreeMap<String, Vec<f32>>;

/// What equalization did to one pair of layers.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PairReport {
    pub first: String,
    pub second: String,
    pub channels: usize,
    /// Largest over smallest live channel range of the first layer's weights, before
    /// and after (channels under a millionth of the largest are left out).
    pub first_spread_before: f64,
    pub first_spread_after: f64,
    pub second_spread_before: f64,
    pub second_spread_after: f64,
}

/// The result of [`equalize`].
#[derive(Clone, Debug, Default)]
pub struct Equalized {
    pub scales: Scales,
    pub pairs: Vec<PairReport>,
}

/// Sweeps over all pairs: a chain conv → depthwise → conv converges to the three-layer
/// solution by alternating the two pairs.
const SWEEPS: usize = 20;
/// Scales are kept within these bounds (a dead channel has range 0).
const S_MIN: f64 = 1e-3;
const S_MAX: f64 = 1e3;

/// Whether `relu(x / s) = relu(x) / s`-style homogeneity holds for the node's activation.
fn homogeneous(g: &Graph, n: NodeId) -> bool {
    let node = &g.nodes[n];
    match node.op.as_str() {
        "Conv" => true,
        "FusedConv" => matches!(node.attr_s("activation"), None | Some("Relu" | "LeakyRelu")),
        _ => false,
    }
}

/// A float32 constant that only `n` reads.
pub(crate) fn own_f32(g: &Graph, consumers: &[Vec<NodeId>], v: Option<ValueId>, n: NodeId) -> Option<ValueId> {
    let v = v?;
    let c = g.values[v].constant.as_ref()?;
    (matches!(c.tensor(), Tensor::F32(_)) && consumers[v].iter().all(|&u| u == n)).then_some(v)
}

/// A convolution's parts: weight value and shape (OIHW), bias value (if any), groups.
pub(crate) struct ConvParts {
    pub(crate) w: ValueId,
    pub(crate) shape: Vec<usize>,
    pub(crate) b: Option<ValueId>,
    pub(crate) groups: usize,
}

fn conv_parts(g: &Graph, consumers: &[Vec<NodeId>], n: NodeId) -> Option<ConvParts> {
    let node = &g.nodes[n];
    let plain = node.op == "Conv" && node.domain.is_empty();
    if !(plain || node.op == "FusedConv") {
        return None;
    }
    // A fused residual (a fourth input) would have to be scaled too.
    if node.inputs.len() > 3 && node.inputs[3].is_some() {
        return None;
    }
    let w = own_f32(g, consumers, node.input(1), n)?;
    let shape = g.values[w].constant.as_ref()?.shape.clone();
    if shape.len() < 3 {
        return None;
    }
    let b = match node.input(2) {
        Some(_) => Some(own_f32(g, consumers, node.input(2), n)?),
        None => None,
    };
    let groups = usize::try_from(node.attr_i("group").unwrap_or(1)).ok()?.max(1);
    Some(ConvParts { w, shape, b, groups })
}

/// Two convolutions CLE equalizes, with their parts.
pub(crate) struct Pair {
    pub(crate) first: NodeId,
    pub(crate) second: NodeId,
    pub(crate) a: ConvParts,
    pub(crate) b: ConvParts,
}

/// The pairs CLE can equalize: a convolution with a homogeneous activation whose output
/// only one other convolution reads (and no graph output is).
pub(crate) fn find_pairs(g: &Graph) -> Vec<Pair> {
    let consumers = g.consumers();
    let mut out = Vec::new();
    for (first, node) in g.nodes.iter().enumerate() {
        if !homogeneous(g, first) {
            continue;
        }
        let Some(a) = conv_parts(g, &consumers, first) else {
            continue;
        };
        let Some(y) = node.outputs.first().copied().flatten() else {
            continue;
        };
        if g.outputs.contains(&y) || consumers[y].len() != 1 {
            continue;
        }
        let second = consumers[y][0];
        if g.nodes[second].input(0) != Some(y) {
            continue;
        }
        let Some(b) = conv_parts(g, &consumers, second) else {
            continue;
        };
        // The second layer's input channels are the first's output channels.
        if b.shape[1] * b.groups != a.shape[0] {
            continue;
        }
        out.push(Pair { first, second, a, b });
    }
    out
}

/// The (first, second) node ids of the pairs CLE can equalize.
pub fn pairs(g: &Graph) -> Vec<(NodeId, NodeId)> {
    find_pairs(g).iter().map(|p| (p.first, p.second)).collect()
}

/// Range (max |w|) of each output channel of an OIHW weight.
fn out_ranges(w: &[f32], o: usize) -> Vec<f64> {
    let per = w.len() / o.max(1);
    w.chunks(per.max(1))
        .map(|c| c.iter().fold(0f64, |m, &x| m.max(f64::from(x.abs()))))
        .collect()
}

/// The input channel (of the layer's whole input) that weight row `o`, column `j` reads.
pub(crate) fn in_channel(o: usize, j: usize, out_channels: usize, in_per_group: usize, groups: usize) -> usize {
    let out_per_group = out_channels / groups;
    (o / out_per_group.max(1)) * in_per_group + j
}

/// Range of each input channel of an OIHW weight with `groups`.
fn in_ranges(w: &[f32], shape: &[usize], groups: usize) -> Vec<f64> {
    let (o, ipg) = (shape[0], shape[1]);
    let k: usize = shape[2..].iter().product();
    let mut r = vec![0f64; ipg * groups];
    for oc in 0..o {
        for j in 0..ipg {
            let c = in_channel(oc, j, o, ipg, groups);
            let base = (oc * ipg + j) * k;
            for &x in &w[base..base + k] {
                r[c] = r[c].max(f64::from(x.abs()));
            }
        }
    }
    r
}

/// Largest over smallest channel range; dead channels (below a millionth of the largest,
/// which no scale can bring up) are left out.
pub(crate) fn spread(r: &[f64]) -> f64 {
    let max = r.iter().copied().fold(0f64, f64::max);
    let min = r
        .iter()
        .copied()
        .filter(|&x| x > max * 1e-6)
        .fold(f64::INFINITY, f64::min);
    if min.is_finite() { max / min } else { 1.0 }
}

/// Weights being equalized, by value, as flat f32 (read from the graph on first use).
struct Work {
    data: BTreeMap<ValueId, Vec<f32>>,
}

impl Work {
    fn new() -> Self {
        Self { data: BTreeMap::new() }
    }

    fn get(&mut self, g: &Graph, v: ValueId) -> &mut Vec<f32> {
        self.data.entry(v).or_insert_with(|| {
            let c = g.values[v].constant.as_ref().expect("a constant");
            c.tensor().to_f32().iter().copied().collect()
        })
    }

    /// Per-channel ranges of a pair: the first layer's outputs, the second's inputs.
    fn ranges(&mut self, g: &Graph, p: &Pair) -> (Vec<f64>, Vec<f64>) {
        let r1 = out_ranges(self.get(g, p.a.w), p.a.shape[0]);
        let r2 = in_ranges(self.get(g, p.b.w), &p.b.shape, p.b.groups);
        (r1, r2)
    }

    /// Scales output channels of the first layer by `1/s` and input channels of the
    /// second by `s`.
    fn scale(&mut self, g: &Graph, p: &Pair, s: &[f64]) {
        let w = self.get(g, p.a.w);
        let per = w.len() / p.a.shape[0].max(1);
        for (c, row) in w.chunks_mut(per.max(1)).enumerate() {
            for x in row.iter_mut() {
                *x = (f64::from(*x) / s[c]) as f32;
            }
        }
        if let Some(bv) = p.a.b {
            for (c, x) in self.get(g, bv).iter_mut().enumerate() {
                *x = (f64::from(*x) / s[c]) as f32;
            }
        }
        let shape = &p.b.shape;
        let (o, ipg) = (shape[0], shape[1]);
        let k: usize = shape[2..].iter().product();
        let w = self.get(g, p.b.w);
        for oc in 0..o {
            for j in 0..ipg {
                let c = in_channel(oc, j, o, ipg, p.b.groups);
                let base = (oc * ipg + j) * k;
                for x in &mut w[base..base + k] {
                    *x = (f64::from(*x) * s[c]) as f32;
                }
            }
        }
    }

    /// Writes the worked weights back as constants.
    fn store(self, model: &mut Model) {
        for (v, data) in self.data {
            let shape = model.graph.values[v]
                .constant
                .as_ref()
                .expect("a constant")
                .shape
                .clone();
            let t = Tensor::from_f32(&shape, data).expect("same shape");
            model.graph.values[v].constant = Some(Constant::from_tensor(&t));
        }
    }
}

/// Equalizes every pair of `model` (the optimized graph): the equalized model and the
/// scales a plan keeps.
pub fn equalize(model: &Model) -> (Model, Equalized) {
    let g = &model.graph;
    let pairs = find_pairs(g);
    let mut work = Work::new();
    let mut total: BTreeMap<NodeId, Vec<f64>> = BTreeMap::new();
    let before: Vec<(Vec<f64>, Vec<f64>)> = pairs.iter().map(|p| work.ranges(g, p)).collect();
    for _ in 0..SWEEPS {
        let mut moved = 0f64;
        for p in &pairs {
            let (r1, r2) = work.ranges(g, p);
            let s: Vec<f64> = r1
                .iter()
                .zip(&r2)
                .map(|(&x, &y)| {
                    if x > 0.0 && y > 0.0 {
                        (x / y).sqrt().clamp(S_MIN, S_MAX)
                    } else {
                        1.0
                    }
                })
                .collect();
            moved = s.iter().fold(moved, |m, &x| m.max(x.ln().abs()));
            work.scale(g, p, &s);
            let t = total.entry(p.first).or_insert_with(|| vec![1.0; s.len()]);
            t.iter_mut().zip(&s).for_each(|(t, s)| *t *= s);
        }
        if moved < 1e-4 {
            break;
        }
    }
    let scales: Scales = total
        .into_iter()
        .map(|(a, s)| (g.nodes[a].name.clone(), s.into_iter().map(|x| x as f32).collect()))
        .collect();
    // The model a plan's readers make: the original weights scaled once by the totals.
    let mut out = model.clone();
    apply(&mut out, &scales).expect("scales of this graph's pairs");
    let mut after = Work::new();
    let reports = pairs
        .iter()
        .zip(before)
        .map(|(p, (r1, r2))| {
            let (a1, a2) = after.ranges(&out.graph, p);
            PairReport {
                first: g.nodes[p.first].name.clone(),
                second: g.nodes[p.second].name.clone(),
                channels: p.a.shape[0],
                first_spread_before: spread(&r1),
                first_spread_after: spread(&a1),
                second_spread_before: spread(&r2),
                second_spread_after: spread(&a2),
            }
        })
        .collect();
    (out, Equalized { scales, pairs: reports })
}

/// Why a plan's scales do not fit a graph.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("equalization of `{node}`: {problem}")]
pub struct ApplyError {
    pub node: String,
    pub problem: String,
}

/// Applies a plan's scales to `model` (the optimized graph it was made on).
pub fn apply(model: &mut Model, scales: &Scales) -> Result<(), ApplyError> {
    if scales.is_empty() {
        return Ok(());
    }
    let g = &model.graph;
    let pairs = find_pairs(g);
    let mut work = Work::new();
    for (name, s) in scales {
        let err = |problem: &str| ApplyError {
            node: name.clone(),
            problem: problem.into(),
        };
        let p = pairs
            .iter()
            .find(|p| &g.nodes[p.first].name == name)
            .ok_or_else(|| err("no equalizable pair starts at this node"))?;
        let channels = p.a.shape[0];
        if s.len() != channels || s.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
            return Err(err(&format!(
                "{} scales for {channels} channels, or one not positive",
                s.len()
            )));
        }
        let s: Vec<f64> = s.iter().map(|&x| f64::from(x)).collect();
        work.scale(g, p, &s);
    }
    work.store(model);
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ir::{Attr, DType, Dim, Node, Value};
    use std::collections::HashMap;

    /// An op of a test chain: its type, constant inputs and attributes.
    pub(crate) type Step<'a> = (&'a str, Vec<Tensor>, Vec<(&'a str, Attr)>);

    /// A seeded generator of values in [−1, 1) (an LCG's high bits).
    pub(crate) fn uniform(mut seed: u64) -> impl FnMut() -> f32 {
        move || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((seed >> 33) % 20_000) as f32 / 10_000.0 - 1.0
        }
    }

    /// A chain of ops on one float input `x` of `shape`, each with its constant inputs
    /// after the running value (node `n{k}` makes `y{k}`), shapes inferred and optimized.
    pub(crate) fn sequential(shape: &[usize], steps: Vec<Step<'_>>) -> Model {
        let mut m = Model::default();
        m.meta.ir_version = 8;
        m.meta.opsets.insert(String::new(), 13);
        let g = &mut m.graph;
        let value = |g: &mut Graph, name: String, t: Option<Tensor>| {
            let mut v = Value::new(&name);
            if let Some(t) = t {
                v.dtype = Some(DType::F32);
                v.shape = Some(t.shape().iter().map(|&d| Dim::Fixed(d)).collect());
                v.constant = Some(Constant::from_tensor(&t));
            }
            g.values.push(v);
            g.values.len() - 1
        };
        let x = value(g, "x".into(), None);
        g.values[x].dtype = Some(DType::F32);
        g.values[x].shape = Some(shape.iter().map(|&d| Dim::Fixed(d)).collect());
        g.inputs.push(x);
        let mut cur = x;
        for (k, (op, consts, attrs)) in steps.into_iter().enumerate() {
            let mut inputs = vec![Some(cur)];
            for (j, t) in consts.into_iter().enumerate() {
                inputs.push(Some(value(g, format!("c{k}_{j}"), Some(t))));
            }
            let y = value(g, format!("y{k}"), None);
            g.values[y].producer = Some(g.nodes.len());
            g.nodes.push(Node {
                name: format!("n{k}"),
                op: op.into(),
                domain: String::new(),
                inputs,
                outputs: vec![Some(y)],
                attrs: attrs.into_iter().map(|(k, a)| (k.to_owned(), a)).collect(),
                origin: vec![k],
            });
            cur = y;
        }
        g.outputs.push(cur);
        crate::import::shapes::infer(&mut m);
        crate::passes::optimize(&m, &crate::passes::Options::default())
            .expect("optimizes")
            .model
    }

    /// A constant of `shape` drawn from `rnd`, each output channel (dim 0) scaled by
    /// `gain`.
    pub(crate) fn weights(rnd: &mut impl FnMut() -> f32, shape: &[usize], gain: &dyn Fn(usize) -> f32) -> Tensor {
        let per: usize = shape[1..].iter().product();
        let data = (0..shape.iter().product::<usize>())
            .map(|i| rnd() * gain(i / per.max(1)))
            .collect();
        Tensor::from_f32(shape, data).expect("shape")
    }

    /// Input [1,4,8,8] → Conv 3×3 (6 out, one outlier channel) → Relu → depthwise 3×3 →
    /// Relu → Conv 1×1 (3 out), optimized into three FusedConv.
    pub(crate) fn chain() -> Model {
        let mut rnd = uniform(11);
        let w1 = weights(&mut rnd, &[6, 4, 3, 3], &|o| if o == 2 { 40.0 } else { 1.0 });
        let b1 = weights(&mut rnd, &[6], &|_| 0.5);
        let w2 = weights(&mut rnd, &[6, 1, 3, 3], &|o| if o == 4 { 0.02 } else { 1.0 });
        let b2 = weights(&mut rnd, &[6], &|_| 0.1);
        let w3 = weights(&mut rnd, &[3, 6, 1, 1], &|_| 1.0);
        sequential(
            &[1, 4, 8, 8],
            vec![
                ("Conv", vec![w1, b1], vec![("pads", Attr::Ints(vec![1; 4]))]),
                ("Relu", vec![], vec![]),
                (
                    "Conv",
                    vec![w2, b2],
                    vec![("pads", Attr::Ints(vec![1; 4])), ("group", Attr::Int(6))],
                ),
                ("Relu", vec![], vec![]),
                ("Conv", vec![w3], vec![]),
            ],
        )
    }

    fn run(m: &Model, x: &Tensor) -> Vec<f32> {
        let e = crate::sim::Executor::new(m, 1).expect("executor");
        let out = e.run(&HashMap::from([("x".to_owned(), x.clone())])).expect("runs");
        out[0].1.to_f32().iter().copied().collect()
    }

    #[test]
    fn equalization_keeps_the_function_and_evens_channel_ranges() {
        let m = chain();
        assert_eq!(m.graph.nodes.iter().filter(|n| n.op == "FusedConv").count(), 2);
        assert_eq!(pairs(&m.graph).len(), 2, "conv→dw and dw→conv");
        let (eq, e) = equalize(&m);
        // The function is unchanged: Relu is positively homogeneous.
        let x = Tensor::from_f32(
            &[1, 4, 8, 8],
            (0..256).map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0).collect(),
        )
        .expect("shape");
        let (a, b) = (run(&m, &x), run(&eq, &x));
        let scale = a.iter().fold(0f32, |s, v| s.max(v.abs()));
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() <= 1e-5 * scale, "{p} vs {q}");
        }
        // The outlier channels are gone: both layers of each pair share channel ranges.
        for p in &e.pairs {
            assert!(p.first_spread_after < p.first_spread_before, "{p:?}");
        }
        assert!(
            e.pairs[0].first_spread_before > 20.0
                && e.pairs[0].first_spread_after * 3.0 < e.pairs[0].first_spread_before,
            "{:?}",
            e.pairs[0]
        );
        let mut w = Work::new();
        for p in &find_pairs(&eq.graph) {
            let (r1, r2) = w.ranges(&eq.graph, p);
            for (x, y) in r1.iter().zip(&r2) {
                assert!(
                    (x / y - 1.0).abs() < 0.05,
                    "{}: channel ranges {x} and {y}",
                    eq.graph.nodes[p.first].name
                );
            }
        }
        // A plan's scales make the same weights from the original graph.
        let mut again = m.clone();
        apply(&mut again, &e.scales).expect("applies");
        for (v, w) in again.graph.values.iter().zip(&eq.graph.values) {
            if let (Some(p), Some(q)) = (&v.constant, &w.constant) {
                assert_eq!(p.raw(), q.raw(), "{}", v.name);
            }
        }
        // Scales of another graph are refused, naming the node.
        let bad: Scales = BTreeMap::from([("nope".to_owned(), vec![1.0])]);
        let err = apply(&mut m.clone(), &bad).expect_err("no such pair");
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
