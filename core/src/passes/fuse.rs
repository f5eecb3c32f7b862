//! Folding of BatchNorm, bias and scale into the producer's weights, and activation fusion.
//! Weights are recomputed in f64 and rounded to f32 once.

use super::{Cx, Pass, f32_tensor, is_f32};
use crate::ir::{Attr, Node, NodeId, Tensor, ValueId};
use crate::sim::ops::MICROSOFT;

/// The per-channel vector of a constant that broadcasts along axis 1 of a rank-`rank`
/// tensor with `channels` channels (shape `[C,1,1]`, `[1,C,1,1]`, `[C]` for rank 2, or a
/// single value), widened to f64.
fn per_channel(t: &Tensor, rank: usize, channels: usize) -> Option<Vec<f64>> {
    if !is_f32(t) || t.shape().len() > rank {
        return None;
    }
    let v: Vec<f64> = t.to_f64().iter().copied().collect();
    if v.len() == 1 {
        return Some(vec![v[0]; channels]);
    }
    let pad = rank - t.shape().len();
    let ok = t
        .shape()
        .iter()
        .enumerate()
        .all(|(i, &d)| if i + pad == 1 { d == channels } else { d == 1 });
    (ok && v.len() == channels).then_some(v)
}

/// Weights of a Conv/ConvTranspose/Gemm producer with constant f32 weights (and bias).
struct Producer<'g> {
    id: NodeId,
    node: &'g Node,
    w: &'g Tensor,
    b: Option<&'g Tensor>,
}

fn weighted<'g>(cx: &Cx<'g>, v: Option<ValueId>, ops: &[&str]) -> Option<Producer<'g>> {
    let (id, node) = cx.producer(v)?;
    if !node.domain.is_empty() || !ops.contains(&node.op.as_str()) {
        return None;
    }
    let out = cx.out(node)?;
    cx.sole_consumer(out)?;
    let w = cx.constant(node.input(1)?).filter(|w| is_f32(w))?;
    let b = match node.input(2) {
        Some(b) => Some(cx.constant(b).filter(|b| is_f32(b))?),
        None => None,
    };
    Some(Producer { id, node, w, b })
}

/// Maps a weight element's flat index to the output channel it feeds.
type ChannelOf = Box<dyn Fn(usize) -> usize>;

/// Output channels of a producer and the channel each weight element feeds.
fn channel_of(p: &Producer<'_>) -> Option<(usize, ChannelOf)> {
    let s = p.w.shape().to_vec();
    let rank_ok = match p.node.op.as_str() {
        "Conv" | "ConvTranspose" => s.len() >= 3,
        _ => s.len() == 2,
    };
    if !rank_ok {
        return None;
    }
    match p.node.op.as_str() {
        "Conv" => {
            let per: usize = s[1..].iter().product();
            Some((s[0], Box::new(move |i| i / per.max(1))))
        }
        "ConvTranspose" => {
            let g = p.node.attr_i("group").unwrap_or(1).max(1) as usize;
            let (cin, cg) = (s[0], s[1]);
            let per: usize = s[2..].iter().product();
            if cin % g != 0 {
                return None;
            }
            let in_per_group = cin / g;
            Some((
                cg * g,
                Box::new(move |i| {
                    let ci = i / (cg * per.max(1));
                    let j = (i / per.max(1)) % cg;
                    (ci / in_per_group) * cg + j
                }),
            ))
        }
        "Gemm" if s.len() == 2 => {
            if p.node.attr_i("transB").unwrap_or(0) != 0 {
                let k = s[1];
                Some((s[0], Box::new(move |i| i / k)))
            } else {
                let n = s[1];
                Some((n, Box::new(move |i| i % n)))
            }
        }
        _ => None,
    }
}

/// Emits the producer rewritten with `W·scale` and `b·scale + shift` (per output channel),
/// writing `out` and replacing the producer and `consumer`.
fn emit_affine(
    cx: &mut Cx<'_>,
    rule: &'static str,
    p: &Producer<'_>,
    consumer: NodeId,
    out: ValueId,
    scale: &[f64],
    shift: &[f64],
) {
    let Some((channels, ch)) = channel_of(p) else { return };
    if scale.len() != channels || shift.len() != channels {
        return;
    }
    let n = p.node;
    let mut patch = cx.patch(rule);
    let w: Vec<f64> =
        p.w.to_f64()
            .iter()
            .enumerate()
            .map(|(i, &v)| v * scale[ch(i)])
            .collect();
    let wv = patch.constant(format!("{}:W", n.name), &f32_tensor(p.w.shape(), w));
    let mut node = n.clone();
    node.origin = cx.origin(&[p.id, consumer]);
    node.outputs = vec![Some(out)];
    node.inputs[1] = Some(wv);
    let bias: Vec<f64> = if n.op == "Gemm" {
        // y = alpha·A·B + beta·C: C becomes beta·C·scale + shift, and beta goes.
        let beta = f64::from(n.attr_f("beta").unwrap_or(1.0));
        let c = match p.b {
            Some(c) => match per_channel(c, 2, channels) {
                Some(c) => c,
                None => return,
            },
            None => vec![0.0; channels],
        };
        node.attrs.remove("beta");
        (0..channels).map(|o| beta * c[o] * scale[o] + shift[o]).collect()
    } else {
        let b: Vec<f64> =
            p.b.map_or_else(|| vec![0.0; channels], |b| b.to_f64().iter().copied().collect());
        if b.len() != channels {
            return;
        }
        (0..channels).map(|o| b[o] * scale[o] + shift[o]).collect()
    };
    let bv = patch.constant(format!("{}:B", n.name), &f32_tensor(&[channels], bias));
    if node.inputs.len() < 3 {
        node.inputs.resize(3, None);
    }
    node.inputs[2] = Some(bv);
    patch.remove.extend([p.id, consumer]);
    patch.nodes.push(node);
    cx.emit(patch);
}

pub struct FoldBatchNorm;

impl Pass for FoldBatchNorm {
    fn name(&self) -> &'static str {
        "fold-batchnorm"
    }
    fn about(&self) -> &'static str {
        "BatchNormalization after Conv, ConvTranspose or Gemm is folded into its weights and bias"
    }
    fn run(&self, cx: &mut Cx<'_>) {
        for (id, n) in cx.nodes() {
            if n.op != "BatchNormalization" || !n.domain.is_empty() || n.attr_i("training_mode").unwrap_or(0) != 0 {
                continue;
            }
            let Some(y) = cx.out(n) else { continue };
            let Some(p) = weighted(cx, n.input(0), &["Conv", "ConvTranspose", "Gemm"]) else {
                continue;
            };
            let params: Option<Vec<Vec<f64>>> = (1..5)
                .map(|i| {
                    let t = cx.constant(n.input(i)?)?;
                    is_f32(t).then(|| t.to_f64().iter().copied().collect())
                })
                .collect();
            let Some(params) = params else { continue };
            let eps = f64::from(n.attr_f("epsilon").unwrap_or(1e-5));
            let (gamma, beta, mean, var) = (&params[0], &params[1], &params[2], &params[3]);
            let c = gamma.len();
            if [beta, mean, var].iter().any(|v| v.len() != c) {
                continue;
            }
            let scale: Vec<f64> = (0..c).map(|o| gamma[o] / (var[o] + eps).sqrt()).collect();
            let shift: Vec<f64> = (0..c).map(|o| beta[o] - mean[o] * scale[o]).collect();
            let rule = match p.node.op.as_str() {
                "Conv" => "conv-batchnorm",
                "ConvTranspose" => "convtranspose-batchnorm",
                _ => "gemm-batchnorm",
            };
            emit_affine(cx, rule, &p, id, y, &scale, &shift);
        }
    }
}

pub struct FoldBias;

impl Pass for FoldBias {
    fn name(&self) -> &'static str {
        "fold-bias"
    }
    fn about(&self) -> &'static str {
        "A per-channel constant Add (bias) or Mul (scale) after Conv, ConvTranspose or Gemm is folded into its weights and bias"
    }
    fn run(&self, cx: &mut Cx<'_>) {
        for (id, n) in cx.nodes() {
            if !n.domain.is_empty() || !matches!(n.op.as_str(), "Add" | "Mul") {
                continue;
            }
            let Some(y) = cx.out(n) else { continue };
            for (xi, ci) in [(0, 1), (1, 0)] {
                let Some(p) = weighted(cx, n.input(xi), &["Conv", "ConvTranspose", "Gemm"]) else {
                    continue;
                };
                let Some(k) = n.input(ci).and_then(|c| cx.constant(c)) else {
                    continue;
                };
                let rank = if p.node.op == "Gemm" { 2 } else { p.w.shape().len() };
                let Some(channels) = channel_of(&p).map(|c| c.0) else {
                    continue;
                };
                let Some(k) = per_channel(k, rank, channels) else {
                    continue;
                };
                // `per_channel` accepts only constants of rank ≤ the output's with size 1 off the
                // channel axis, so the output keeps the producer's shape.
                let (rule, scale, shift) = match (n.op.as_str(), p.node.op.as_str()) {
                    ("Add", "Conv") => ("conv-add", vec![1.0; channels], k),
                    ("Mul", "Conv") => ("conv-mul", k, vec![0.0; channels]),
                    ("Add", "ConvTranspose") => ("convtranspose-add", vec![1.0; channels], k),
                    ("Mul", "ConvTranspose") => ("convtranspose-mul", k, vec![0.0; channels]),
                    ("Add", _) => ("gemm-add", vec![1.0; channels], k),
                    _ => ("gemm-mul", k, vec![0.0; channels]),
                };
                emit_affine(cx, rule, &p, id, y, &scale, &shift);
                break;
            }
        }
    }
}

/// The activation a node applies, as com.microsoft FusedConv names it, with parameters.
fn activation(cx: &Cx<'_>, n: &Node) -> Option<(&'static str, Vec<f32>)> {
    let f = |name: &str, d: f32| n.attr_f(name).unwrap_or(d);
    if n.domain == MICROSOFT {
        // SiLU, as the pattern pass writes it.
        return (n.op == "QuickGelu" && f("alpha", 1.702) == 1.0).then(|| ("Silu", Vec::new()));
    }
    if !n.domain.is_empty() {
        return None;
    }
    Some(match n.op.as_str() {
        "Relu" => ("Relu", Vec::new()),
        "Sigmoid" => ("Sigmoid", Vec::new()),
        "Tanh" => ("Tanh", Vec::new()),
        "HardSwish" => ("HardSwish", Vec::new()),
        "LeakyRelu" => ("LeakyRelu", vec![f("alpha", 0.01)]),
        "HardSigmoid" => ("HardSigmoid", vec![f("alpha", 0.2), f("beta", 0.5)]),
        "Clip" => {
            let bound = |i: usize, attr: &str, d: f32| -> Option<f32> {
                match n.inputs.get(i).copied().flatten() {
                    Some(v) => cx.scalar(Some(v)).map(|x| x as f32),
                    None => Some(f(attr, d)),
                }
            };
            ("Clip", vec![bound(1, "min", f32::MIN)?, bound(2, "max", f32::MAX)?])
        }
        _ => return None,
    })
}

pub struct FuseActivation;

impl Pass for FuseActivation {
    fn name(&self) -> &'static str {
        "fuse-activation"
    }
    fn about(&self) -> &'static str {
        "Relu, Clip, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish and SiLU after Conv or Gemm become one FusedConv/FusedGemm"
    }
    fn run(&self, cx: &mut Cx<'_>) {
        for (id, n) in cx.nodes() {
            let Some(y) = cx.out(n) else { continue };
            let Some((pid, p)) = cx.producer(n.input(0)) else {
                continue;
            };
            if !p.domain.is_empty() || !matches!(p.op.as_str(), "Conv" | "Gemm") {
                continue;
            }
            let Some(pout) = cx.out(p) else { continue };
            if cx.sole_consumer(pout).is_none() {
                continue;
            }
            let Some((act, params)) = activation(cx, n) else {
                continue;
            };
            // onnxruntime's FusedGemm runs fewer activations than FusedConv.
            if p.op == "Gemm" && !matches!(act, "Relu" | "LeakyRelu" | "Sigmoid" | "Tanh" | "HardSigmoid") {
                continue;
            }
            // onnxruntime's fused kernels are float32 only.
            if cx.g.values[pout].dtype != Some(crate::ir::DType::F32) {
                continue;
            }
            let mut node = p.clone();
            node.op = if p.op == "Conv" { "FusedConv" } else { "FusedGemm" }.into();
            node.domain = MICROSOFT.into();
            node.outputs = vec![Some(y)];
            node.origin = cx.origin(&[pid, id]);
            node.attrs.insert("activation".into(), Attr::String(act.into()));
            if p.op == "Gemm" {
                for (k, v) in ["activation_alpha", "activation_beta"].iter().zip(&params) {
                    node.attrs.insert((*k).into(), Attr::Float(*v));
                }
            } else if !params.is_empty() {
                node.attrs.insert("activation_params".into(), Attr::Floats(params));
            }
            let rule = match act {
                "Relu" => "relu",
                "Clip" => "clip",
                "LeakyRelu" => "leakyrelu",
                "Sigmoid" => "sigmoid",
                "Tanh" => "tanh",
                "HardSigmoid" => "hardsigmoid",
                "HardSwish" => "hardswish",
                _ => "silu",
            };
            let mut patch = cx.patch(rule);
            patch.remove.extend([pid, id]);
            patch.nodes.push(node);
            cx.emit(patch);
        }
    }
}
