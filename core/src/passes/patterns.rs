//! Recognition of decomposed LayerNorm, RMSNorm, GELU, SiLU and HardSwish into single ops.
//!
//! LayerNorm comes in two forms: with the variance of the centred input, and with the
//! moments `E[x²] − E[x]²` (Flax's fast variance, as jax2tf exports it). The second one
//! quantizes badly as written (the subtraction cancels), so recognizing it matters for more
//! than speed.
//!
//! Exporters write these as chains of element-wise ops and reductions; each matcher starts
//! at one distinctive node, walks the chain, and checks that every value inside the chain
//! is read only inside it.

use super::{Cx, Pass, f32_tensor, same_dims};
use crate::ir::{Attr, DType, Dim, Node, NodeId, Value, ValueId};
use crate::sim::ops::MICROSOFT;

pub struct RecognizePatterns;

impl Pass for RecognizePatterns {
    fn name(&self) -> &'static str {
        "recognize-patterns"
    }
    fn about(&self) -> &'static str {
        "Decomposed LayerNorm (also with moments, E[x²]−E[x]², over any one axis), RMSNorm, GELU, SiLU (x·sigmoid(x)) and HardSwish (x·relu6(x+3)/6) become single ops"
    }
    fn run(&self, cx: &mut Cx<'_>) {
        for (id, n) in cx.nodes() {
            if !n.domain.is_empty() {
                continue;
            }
            match n.op.as_str() {
                "Div" | "Mul" => {
                    norm(cx, id, n);
                }
                "Sqrt" => {
                    norm_moments(cx, id, n);
                }
                "Erf" => gelu(cx, id, n),
                "Sigmoid" => silu(cx, id, n),
                "Clip" => hardswish_clip(cx, id, n),
                "HardSigmoid" => hardswish_hardsigmoid(cx, id, n),
                _ => {}
            }
        }
    }
}

/// Whether a scalar constant is within a relative 1e-5 of `want`.
fn near(cx: &Cx<'_>, v: Option<ValueId>, want: f64) -> bool {
    cx.scalar(v)
        .is_some_and(|x| (x - want).abs() <= 1e-5 * want.abs().max(1e-12))
}

/// For a binary op node `n` of type `op` reading `v`, the other input.
fn other(n: &Node, op: &str, v: ValueId) -> Option<ValueId> {
    if n.op != op || !n.domain.is_empty() || n.inputs.len() != 2 {
        return None;
    }
    match (n.input(0), n.input(1)) {
        (Some(a), Some(b)) if a == v => Some(b),
        (Some(a), Some(b)) if b == v && matches!(op, "Add" | "Mul") => Some(a),
        _ => None,
    }
}

/// The single consumer of the node's only output.
fn next<'g>(cx: &Cx<'g>, n: &Node) -> Option<(NodeId, &'g Node, ValueId)> {
    let out = cx.out(n)?;
    let (id, c) = cx.sole_consumer(out)?;
    Some((id, c, out))
}

/// `x·f(x)`: for a node `f` reading `x`, the Mul of `x` by its output that alone reads
/// it. Returns `x`, the Mul and the Mul's output.
fn times_input(cx: &Cx<'_>, f: &Node) -> Option<(ValueId, NodeId, ValueId)> {
    let x = f.input(0)?;
    let (mid, m, fo) = next(cx, f)?;
    if other(m, "Mul", fo) != Some(x) {
        return None;
    }
    Some((x, mid, cx.out(m)?))
}

/// Emits `nodes` replaced by one node `op(inputs)` writing `out`.
fn emit(
    cx: &mut Cx<'_>,
    rule: &'static str,
    nodes: &[NodeId],
    op: &str,
    domain: &str,
    inputs: Vec<Option<ValueId>>,
    out: ValueId,
    attrs: Vec<(&str, Attr)>,
    consts: Vec<(String, crate::ir::Tensor, usize)>,
) -> bool {
    // The chain must not broadcast its input to a higher rank (a constant of shape
    // [1,1,1] added to a [N,D] tensor does): the single op would keep the input's rank.
    let rank = |v: ValueId| cx.g.values[v].shape.as_ref().map(Vec::len);
    let Some(x) = inputs.first().copied().flatten() else {
        return false;
    };
    let keeps_rank = if let (Some(a), Some(b)) = (rank(x), rank(out)) {
        a == b
    } else {
        // Unknown ranks (dynamic reshapes): safe when every constant the chain reads is
        // a scalar, or a vector where a ReduceMean over the last axis proves rank ≥ 1.
        let const_ranks = nodes
            .iter()
            .flat_map(|&k| cx.g.nodes[k].inputs.iter().flatten())
            .filter_map(|&v| cx.constant(v).map(|t| t.shape().len()));
        let reduces = nodes.iter().any(|&k| cx.g.nodes[k].op == "ReduceMean");
        const_ranks.into_iter().all(|r| r == 0 || (r == 1 && reduces))
    };
    if !keeps_rank {
        return false;
    }
    if !closed(cx, nodes, out) {
        return false;
    }
    let last = *nodes.last().unwrap_or(&0);
    let mut p = cx.patch(rule);
    let mut inputs = inputs;
    for (name, t, slot) in consts {
        let v = p.constant(name, &t);
        inputs[slot] = Some(v);
    }
    let mut node = cx.node(cx.g.nodes[last].name.clone(), op, inputs, vec![Some(out)], nodes);
    node.domain = domain.into();
    for (k, a) in attrs {
        node.attrs.insert(k.into(), a);
    }
    p.remove.extend_from_slice(nodes);
    p.nodes.push(node);
    cx.emit(p)
}

/// Whether every value made inside `nodes` is read only inside them (but `out`).
fn closed(cx: &Cx<'_>, nodes: &[NodeId], out: ValueId) -> bool {
    nodes.iter().all(|&k| {
        cx.g.nodes[k]
            .outputs
            .iter()
            .flatten()
            .all(|&o| o == out || cx.used_only_by(o, nodes))
    })
}

/// Whether a ReduceMean reduces only the last axis of `x`, keeping dims.
fn mean_last(cx: &Cx<'_>, n: &Node, x: ValueId) -> bool {
    if n.op != "ReduceMean" || n.input(0) != Some(x) || n.attr_i("keepdims").unwrap_or(1) == 0 {
        return false;
    }
    let rank = cx.g.values[x].shape.as_ref().map(Vec::len);
    let axes = match n.attr_ints("axes") {
        Some(a) => a.to_vec(),
        None => match n
            .input(1)
            .and_then(|a| cx.constant(a))
            .and_then(crate::ir::Tensor::as_i64_vec)
        {
            Some(a) => a,
            None => return false,
        },
    };
    axes.len() == 1 && (axes[0] == -1 || rank.is_some_and(|r| axes[0] == r as i64 - 1))
}

/// A per-last-dim vector from a constant, widened to f64: `[D]`, or `[1,…,1,D]` / a scalar
/// when the rank and last dim `d` of the normalized tensor are known (then the constant
/// cannot broadcast the output to a larger shape).
fn last_dim_vec(cx: &Cx<'_>, v: ValueId, x_rank: Option<usize>, d: Option<usize>) -> Option<Vec<f64>> {
    let t = cx.constant(v)?;
    let vals: Vec<f64> = t.to_f64().iter().copied().collect();
    let s = t.shape();
    if vals.len() == 1 && x_rank.is_some_and(|r| s.len() <= r) {
        return Some(vec![vals[0]; d?]);
    }
    let fits = match x_rank {
        Some(r) => s.len() <= r && s.iter().rev().skip(1).all(|&k| k == 1),
        None => s.len() == 1,
    };
    (fits && s.last().copied() == Some(vals.len()) && d.is_none_or(|d| d == vals.len())).then_some(vals)
}

/// LayerNorm `(x-mean)/sqrt(var+eps)·γ+β` and RMSNorm `x/sqrt(mean(x²)+eps)·γ`, anchored at
/// the division (or the multiplication by a reciprocal).
fn norm(cx: &mut Cx<'_>, id: NodeId, n: &Node) -> bool {
    let (Some(num), Some(den)) = (n.input(0), n.input(1)) else {
        return false;
    };
    let mut chain = vec![];
    // den = Sqrt(Add(ReduceMean(Pow(num, 2)), eps)), or Reciprocal of it for a Mul.
    let sqrt_out = if n.op == "Mul" {
        let Some((rid, r)) = cx.producer_op(Some(den), "Reciprocal") else {
            return false;
        };
        chain.push(rid);
        r.input(0)
    } else if n.op == "Div" {
        Some(den)
    } else {
        return false;
    };
    let Some((sid, s)) = cx.producer_op(sqrt_out, "Sqrt") else {
        return false;
    };
    let Some((aid, a)) = cx.producer_op(s.input(0), "Add") else {
        return false;
    };
    let (var, eps) = match (cx.producer_op(a.input(0), "ReduceMean"), cx.scalar(a.input(1))) {
        (Some(r), Some(e)) => (r, e),
        _ => match (cx.producer_op(a.input(1), "ReduceMean"), cx.scalar(a.input(0))) {
            (Some(r), Some(e)) => (r, e),
            _ => return false,
        },
    };
    let (vid, vnode) = var;
    let Some((pid, pw)) = cx.producer(vnode.input(0)) else {
        return false;
    };
    let squares = match pw.op.as_str() {
        "Pow" => pw.input(0) == Some(num) && near(cx, pw.input(1), 2.0),
        "Mul" => pw.input(0) == Some(num) && pw.input(1) == Some(num),
        _ => false,
    };
    let Some(var_in) = pw.outputs.first().copied().flatten() else {
        return false;
    };
    if !squares || !mean_last(cx, vnode, var_in) {
        return false;
    }
    chain.extend([pid, vid, aid, sid]);
    // LayerNorm when num = Sub(x, ReduceMean(x)); RMSNorm otherwise.
    let centred = cx.producer_op(Some(num), "Sub").and_then(|(subid, sub)| {
        let (x, m) = (sub.input(0)?, sub.input(1)?);
        let (mid, mn) = cx.producer_op(Some(m), "ReduceMean")?;
        mean_last(cx, mn, x).then_some((x, subid, mid))
    });
    let x = match centred {
        Some((x, subid, mid)) => {
            chain.extend([mid, subid]);
            x
        }
        None => num,
    };
    chain.push(id);
    // The scale and bias are written as float32, so only float32 norms are rewritten.
    if cx.g.values[x].dtype != Some(crate::ir::DType::F32) {
        return false;
    }
    let x_shape = cx.g.values[x].shape.as_ref();
    let x_rank = x_shape.map(Vec::len);
    let known_d = match x_shape.and_then(|s| s.last()) {
        Some(crate::ir::Dim::Fixed(d)) => Some(*d),
        _ => None,
    };
    let Some(mut out) = cx.out(n) else {
        return false;
    };
    // Optional ·γ, then +β (LayerNorm only).
    let mut gamma = None;
    let mut beta = None;
    if let Some((mid, m)) = cx.sole_consumer(out)
        && let Some(g) = other(m, "Mul", out)
        && let Some(gv) = last_dim_vec(cx, g, x_rank, known_d)
        && let Some(mo) = cx.out(m)
    {
        gamma = Some(gv);
        chain.push(mid);
        out = mo;
        if centred.is_some()
            && let Some((bid, b)) = cx.sole_consumer(out)
            && let Some(bv) = other(b, "Add", out)
            && let Some(bvals) = last_dim_vec(cx, bv, x_rank, gamma.as_ref().map(Vec::len))
            && let Some(bo) = cx.out(b)
        {
            beta = Some(bvals);
            chain.push(bid);
            out = bo;
        }
    }
    let Some(d) = known_d.or(gamma.as_ref().map(Vec::len)) else {
        return false;
    };
    if cx.g.values[out].shape != cx.g.values[x].shape {
        return false;
    }
    let name = &cx.g.nodes[*chain.last().unwrap_or(&id)].name;
    let mut consts = vec![(
        format!("{name}:scale"),
        f32_tensor(&[d], gamma.unwrap_or_else(|| vec![1.0; d])),
        1,
    )];
    let attrs = vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(eps as f32))];
    if centred.is_some() {
        consts.push((
            format!("{name}:bias"),
            f32_tensor(&[d], beta.unwrap_or_else(|| vec![0.0; d])),
            2,
        ));
        emit(
            cx,
            "layernorm",
            &chain,
            "LayerNormalization",
            "",
            vec![Some(x), None, None],
            out,
            attrs,
            consts,
        )
    } else {
        emit(
            cx,
            "rmsnorm",
            &chain,
            "SimplifiedLayerNormalization",
            "",
            vec![Some(x), None],
            out,
            attrs,
            consts,
        )
    }
}

/// GELU `x·0.5·(1+erf(x/√2))`, anchored at the Erf.
fn gelu(cx: &mut Cx<'_>, id: NodeId, erf: &Node) {
    let Some((did, d)) = cx.producer(erf.input(0)) else {
        return;
    };
    let Some(x) = d.input(0) else { return };
    let scaled = match d.op.as_str() {
        "Div" => near(cx, d.input(1), std::f64::consts::SQRT_2),
        "Mul" => near(cx, d.input(1), std::f64::consts::FRAC_1_SQRT_2),
        _ => false,
    };
    if !scaled {
        return;
    }
    let Some((aid, a, eo)) = next(cx, erf) else { return };
    if other(a, "Add", eo).is_none_or(|one| !near(cx, Some(one), 1.0)) {
        return;
    }
    let Some((mid, m, ao)) = next(cx, a) else { return };
    let Some(k) = other(m, "Mul", ao) else { return };
    let Some(mo) = cx.out(m) else { return };
    let (chain, out) = if k == x {
        // Mul(x, 1+erf) then Mul(·, 0.5).
        let Some((hid, h)) = cx.sole_consumer(mo) else { return };
        if other(h, "Mul", mo).is_none_or(|c| !near(cx, Some(c), 0.5)) {
            return;
        }
        let Some(out) = cx.out(h) else { return };
        (vec![did, id, aid, mid, hid], out)
    } else {
        // Mul(Mul(x, 0.5), 1+erf).
        let Some((hid, h)) = cx.producer_op(Some(k), "Mul") else {
            return;
        };
        if other(h, "Mul", x).is_none_or(|c| !near(cx, Some(c), 0.5)) {
            return;
        }
        (vec![did, hid, id, aid, mid], mo)
    };
    let domain = if cx.opset >= 20 { "" } else { MICROSOFT };
    emit(cx, "gelu", &chain, "Gelu", domain, vec![Some(x)], out, vec![], vec![]);
}

/// SiLU `x·sigmoid(x)`, anchored at the Sigmoid; written as com.microsoft QuickGelu with
/// alpha 1, which onnxruntime runs.
fn silu(cx: &mut Cx<'_>, id: NodeId, s: &Node) {
    let Some((x, mid, out)) = times_input(cx, s) else {
        return;
    };
    emit(
        cx,
        "silu",
        &[id, mid],
        "QuickGelu",
        MICROSOFT,
        vec![Some(x)],
        out,
        vec![("alpha", Attr::Float(1.0))],
        vec![],
    );
}

/// The bounds of a Clip (inputs from opset 11, attributes before).
fn clip_bounds(cx: &Cx<'_>, n: &Node) -> Option<(f64, f64)> {
    if n.inputs.len() > 1 || cx.opset >= 11 {
        Some((cx.scalar(n.input(1))?, cx.scalar(n.input(2))?))
    } else {
        Some((f64::from(n.attr_f("min")?), f64::from(n.attr_f("max")?)))
    }
}

/// HardSwish `x·relu6(x+3)/6`, anchored at the Clip.
fn hardswish_clip(cx: &mut Cx<'_>, id: NodeId, c: &Node) {
    if clip_bounds(cx, c) != Some((0.0, 6.0)) {
        return;
    }
    let Some((aid, a)) = cx.producer_op(c.input(0), "Add") else {
        return;
    };
    let x = match (a.input(0), a.input(1)) {
        (Some(x), k) if near(cx, k, 3.0) => x,
        (k, Some(x)) if near(cx, k, 3.0) => x,
        _ => return,
    };
    let Some((m1id, m1, co)) = next(cx, c) else { return };
    let Some(m1o) = cx.out(m1) else { return };
    let div6 = |n: &Node, v: ValueId| match n.op.as_str() {
        "Div" => n.input(0) == Some(v) && near(cx, n.input(1), 6.0),
        "Mul" => other(n, "Mul", v).is_some_and(|k| near(cx, Some(k), 1.0 / 6.0)),
        _ => false,
    };
    let (m2id, out) = if other(m1, "Mul", co) == Some(x) {
        // x·clip, then /6.
        let Some((m2id, m2)) = cx.sole_consumer(m1o) else {
            return;
        };
        if !div6(m2, m1o) {
            return;
        }
        let Some(out) = cx.out(m2) else { return };
        (m2id, out)
    } else if div6(m1, co) {
        // clip/6, then ·x.
        let Some((m2id, m2)) = cx.sole_consumer(m1o) else {
            return;
        };
        if other(m2, "Mul", m1o) != Some(x) {
            return;
        }
        let Some(out) = cx.out(m2) else { return };
        (m2id, out)
    } else {
        return;
    };
    emit(
        cx,
        "hardswish",
        &[aid, id, m1id, m2id],
        "HardSwish",
        "",
        vec![Some(x)],
        out,
        vec![],
        vec![],
    );
}

/// HardSwish written as `x·HardSigmoid(x, 1/6, 0.5)`.
fn hardswish_hardsigmoid(cx: &mut Cx<'_>, id: NodeId, h: &Node) {
    let alpha = f64::from(h.attr_f("alpha").unwrap_or(0.2));
    let beta = f64::from(h.attr_f("beta").unwrap_or(0.5));
    if (alpha - 1.0 / 6.0).abs() > 1e-6 || (beta - 0.5).abs() > 1e-6 {
        return;
    }
    let Some((x, mid, out)) = times_input(cx, h) else {
        return;
    };
    emit(
        cx,
        "hardswish",
        &[id, mid],
        "HardSwish",
        "",
        vec![Some(x)],
        out,
        vec![],
        vec![],
    );
}

/// A mean over some axes of `src`: ReduceMean, or ReduceSum times 1/N (or over N), as
/// exporters that fold the division write it.
struct Mean {
    src: ValueId,
    axes: Vec<usize>,
    keepdims: bool,
    nodes: Vec<NodeId>,
}

/// A reduction's axes, normalized and sorted (from the attribute or the constant input).
fn reduce_axes(cx: &Cx<'_>, n: &Node, rank: usize) -> Option<Vec<usize>> {
    let a = match n.attr_ints("axes") {
        Some(a) => a.to_vec(),
        None => cx.constant(n.input(1)?)?.as_i64_vec()?,
    };
    let mut v = a
        .iter()
        .map(|&x| {
            usize::try_from(if x < 0 { x + rank as i64 } else { x })
                .ok()
                .filter(|&x| x < rank)
        })
        .collect::<Option<Vec<usize>>>()?;
    v.sort_unstable();
    v.dedup();
    (!v.is_empty()).then_some(v)
}

fn mean_of(cx: &Cx<'_>, v: ValueId) -> Option<Mean> {
    let (id, n) = cx.producer(Some(v))?;
    let shape = |x: ValueId| cx.g.values[x].shape.clone();
    let keep = |r: &Node| r.attr_i("keepdims").unwrap_or(1) != 0;
    match n.op.as_str() {
        "ReduceMean" if n.domain.is_empty() => {
            let src = n.input(0)?;
            Some(Mean {
                src,
                axes: reduce_axes(cx, n, shape(src)?.len())?,
                keepdims: keep(n),
                nodes: vec![id],
            })
        }
        "Mul" | "Div" if n.domain.is_empty() => {
            let (sum, k) = match (cx.producer_op(n.input(0), "ReduceSum"), n.op.as_str()) {
                (Some(_), _) => (n.input(0), n.input(1)),
                (None, "Mul") => (n.input(1), n.input(0)),
                _ => return None,
            };
            let (sid, r) = cx.producer_op(sum, "ReduceSum")?;
            let src = r.input(0)?;
            let dims = shape(src)?;
            let axes = reduce_axes(cx, r, dims.len())?;
            let count = axes
                .iter()
                .map(|&a| match dims[a] {
                    Dim::Fixed(d) => Some(d),
                    Dim::Sym(_) => None,
                })
                .product::<Option<usize>>()? as f64;
            let want = if n.op == "Mul" { 1.0 / count } else { count };
            near(cx, k, want).then_some(Mean {
                src,
                axes,
                keepdims: keep(r),
                nodes: vec![sid, id],
            })
        }
        _ => None,
    }
}

/// A reduced statistic of `x` (over `axes`, with or without kept dims) seen through the
/// Reshape, Unsqueeze and Expand nodes that give it back its reduced axes as size-1 dims,
/// as exporters that reduce without keeping dims write it: the statistic's value and the
/// nodes peeled, when every step provably keeps it broadcast-equal to the keep-dims form.
fn peel_keepdims(cx: &Cx<'_>, v: ValueId, x: &[Dim], axes: &[usize]) -> Option<(ValueId, Vec<NodeId>)> {
    let keep: Vec<Dim> = (0..x.len())
        .map(|i| if axes.contains(&i) { Dim::Fixed(1) } else { x[i].clone() })
        .collect();
    let reduced: Vec<Dim> = (0..x.len())
        .filter(|i| !axes.contains(i))
        .map(|i| x[i].clone())
        .collect();
    let shape_of = |v: ValueId| cx.g.values[v].shape.clone();
    let mut v = v;
    let mut nodes = vec![];
    let mut outer = true;
    loop {
        let s = shape_of(v)?;
        let Some((id, n)) = cx
            .producer(Some(v))
            .filter(|(_, n)| n.domain.is_empty() && matches!(n.op.as_str(), "Reshape" | "Expand" | "Unsqueeze"))
        else {
            // The statistic itself: kept dims, or (under a restoring node) reduced ones.
            let ok = same_dims(&s, &keep) || (!nodes.is_empty() && same_dims(&s, &reduced));
            return ok.then_some((v, nodes));
        };
        let inner = n.input(0)?;
        let si = shape_of(inner)?;
        // Each step ends in the keep-dims shape; only the outermost Expand may broadcast
        // on to x's full shape (from the keep-dims one).
        let ok = same_dims(&s, &keep) || (outer && n.op == "Expand" && same_dims(&s, x) && same_dims(&si, &keep));
        if !ok || (n.op == "Expand" && !same_dims(&si, &keep)) {
            // An Expand that is not the identity must start from the keep-dims shape; a
            // statistic that already has it stops the walk.
            return (nodes.is_empty() && same_dims(&s, &keep)).then_some((v, nodes));
        }
        nodes.push(id);
        v = inner;
        outer = false;
    }
}

/// A constant that scales (or shifts) along axis `ax` of a rank-`rank` tensor only, as a
/// vector of `d` values.
fn axis_vec(cx: &Cx<'_>, v: ValueId, rank: usize, ax: usize, d: usize) -> Option<Vec<f64>> {
    let t = cx.constant(v)?;
    let s = t.shape();
    let off = rank.checked_sub(s.len())?;
    if s.iter().enumerate().any(|(i, &k)| i + off != ax && k != 1) {
        return None;
    }
    let vals: Vec<f64> = t.to_f64().iter().copied().collect();
    match vals.len() {
        1 => Some(vec![vals[0]; d]),
        n if n == d => Some(vals),
        _ => None,
    }
}

/// LayerNorm written with moments, `(x − E[x])·rsqrt(max(E[x²] − E[x]², 0) + eps)·γ + β`,
/// anchored at the Sqrt. Normalizing one axis other than the last becomes a Transpose, a
/// LayerNormalization over the last axis and the Transpose back.
fn norm_moments(cx: &mut Cx<'_>, sid: NodeId, s: &Node) -> Option<()> {
    let (aid, a) = cx.producer_op(s.input(0), "Add")?;
    let (v1, eps) = match (a.input(0), a.input(1)) {
        (Some(p), q) if cx.scalar(q).is_some() => (p, cx.scalar(q)?),
        (q, Some(p)) if cx.scalar(q).is_some() => (p, cx.scalar(q)?),
        _ => return None,
    };
    // The variance, under restoring reshapes and an optional clamp at 0 (on either side).
    let var_of = |v: ValueId| -> Option<(ValueId, Vec<NodeId>)> {
        let (mid, m) = cx.producer_op(Some(v), "Max")?;
        let other = match (m.input(0), m.input(1)) {
            (Some(p), q) if cx.scalar(q) == Some(0.0) => p,
            (q, Some(p)) if cx.scalar(q) == Some(0.0) => p,
            _ => return None,
        };
        Some((other, vec![mid]))
    };
    let mut chain = vec![];
    let mut v = v1;
    let mut restorers = vec![];
    for _ in 0..6 {
        if let Some((o, n)) = var_of(v) {
            chain.extend(n);
            v = o;
        } else if let Some((k, n)) = cx
            .producer(Some(v))
            .filter(|(_, n)| matches!(n.op.as_str(), "Reshape" | "Expand" | "Unsqueeze"))
        {
            restorers.push(k);
            v = n.input(0)?;
        } else {
            break;
        }
    }
    let (subid, sub) = cx.producer_op(Some(v), "Sub")?;
    let (m2v, sqv) = (sub.input(0)?, sub.input(1)?);
    let (qid, q) = cx.producer(Some(sqv))?;
    let m1v = q.input(0)?;
    let squares = |n: &Node, x: ValueId| match n.op.as_str() {
        "Mul" => n.input(0) == Some(x) && n.input(1) == Some(x),
        "Pow" => n.input(0) == Some(x) && near(cx, n.input(1), 2.0),
        _ => false,
    };
    if !q.domain.is_empty() || !squares(q, m1v) {
        return None;
    }
    let m1 = mean_of(cx, m1v)?;
    let m2 = mean_of(cx, m2v)?;
    let (pid, pw) = cx.producer(Some(m2.src))?;
    let x = m1.src;
    if !pw.domain.is_empty() || !squares(pw, x) || m1.axes != m2.axes || m1.keepdims != m2.keepdims {
        return None;
    }
    if cx.g.values[x].dtype != Some(DType::F32) {
        return None;
    }
    let x_shape = cx.g.values[x].shape.clone()?;
    let rank = x_shape.len();
    let [ax] = m1.axes[..] else { return None };
    let Dim::Fixed(d) = x_shape[ax] else { return None };
    // The clamped variance the Sqrt reads must be the keep-dims statistic.
    let (inner, peeled) = peel_keepdims(cx, v1, &x_shape, &m1.axes)?;
    let mut seen = inner;
    while seen != v {
        let (k, n) = cx.producer(Some(seen))?;
        if n.op != "Max" || !chain.contains(&k) {
            return None;
        }
        seen = n.input(0).filter(|&i| cx.scalar(Some(i)).is_none()).or(n.input(1))?;
    }
    chain.extend(peeled);
    chain.extend(restorers.iter().copied());
    chain.extend(m1.nodes.iter().copied());
    chain.extend(m2.nodes.iter().copied());
    chain.extend([pid, qid, subid, aid, sid]);
    // 1/sqrt: a Reciprocal and a Mul, or a Div; γ may scale the reciprocal first.
    let so = cx.out(s)?;
    let (cid, c) = cx.sole_consumer(so)?;
    let mut gamma = None;
    let (centered, cid, c) = if c.op == "Div" && c.domain.is_empty() && c.input(1) == Some(so) {
        (c.input(0)?, cid, c)
    } else if c.op == "Reciprocal" && c.domain.is_empty() {
        chain.push(cid);
        let ro = cx.out(c)?;
        let (mid, m) = cx.sole_consumer(ro)?;
        let k = other(m, "Mul", ro)?;
        if let Some(g) = axis_vec(cx, k, rank, ax, d) {
            gamma = Some(g);
            chain.push(mid);
            let go = cx.out(m)?;
            let (nid, n) = cx.sole_consumer(go)?;
            (other(n, "Mul", go)?, nid, n)
        } else {
            (k, mid, m)
        }
    } else {
        return None;
    };
    // centered = x − E[x] (broadcast back).
    let (xsid, xs) = cx.producer_op(Some(centered), "Sub")?;
    if xs.input(0) != Some(x) {
        return None;
    }
    let (mean_in, mean_peeled) = peel_keepdims(cx, xs.input(1)?, &x_shape, &m1.axes)?;
    if mean_in != m1v {
        return None;
    }
    chain.extend(mean_peeled);
    chain.extend([xsid, cid]);
    let mut out = cx.out(c)?;
    if gamma.is_none()
        && let Some((gid, gn)) = cx.sole_consumer(out)
        && let Some(g) = other(gn, "Mul", out).and_then(|k| axis_vec(cx, k, rank, ax, d))
    {
        gamma = Some(g);
        chain.push(gid);
        out = cx.out(gn)?;
    }
    let mut beta = None;
    if let Some((bid, bn)) = cx.sole_consumer(out)
        && let Some(b) = other(bn, "Add", out).and_then(|k| axis_vec(cx, k, rank, ax, d))
    {
        beta = Some(b);
        chain.push(bid);
        out = cx.out(bn)?;
    }
    if !cx.g.values[out].shape.as_ref().is_some_and(|o| same_dims(o, &x_shape)) {
        return None;
    }
    let mut dedup = std::collections::HashSet::new();
    chain.retain(|k| dedup.insert(*k));
    let name = cx.g.nodes[*chain.last()?].name.clone();
    let consts = vec![
        (
            format!("{name}:scale"),
            f32_tensor(&[d], gamma.unwrap_or_else(|| vec![1.0; d])),
            1,
        ),
        (
            format!("{name}:bias"),
            f32_tensor(&[d], beta.unwrap_or_else(|| vec![0.0; d])),
            2,
        ),
    ];
    let attrs = vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(eps as f32))];
    if ax + 1 == rank {
        emit(
            cx,
            "layernorm-moments",
            &chain,
            "LayerNormalization",
            "",
            vec![Some(x), None, None],
            out,
            attrs,
            consts,
        );
        return Some(());
    }
    if !closed(cx, &chain, out) {
        return None;
    }
    // Another axis: move it last, normalize, move it back.
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(ax, rank - 1);
    let mut moved = x_shape.clone();
    moved.swap(ax, rank - 1);
    let mut p = cx.patch("layernorm-moments");
    let value = |p: &mut super::Patch, suffix: &str| {
        let mut val = Value::new(format!("{name}:{suffix}"));
        val.dtype = Some(DType::F32);
        val.shape = Some(moved.clone());
        p.value(val)
    };
    let xt = value(&mut p, "to_last");
    let yt = value(&mut p, "normalized");
    let mut ins = vec![Some(xt), None, None];
    for (cname, t, slot) in consts {
        ins[slot] = Some(p.constant(cname, &t));
    }
    let mut t1 = cx.node(
        format!("{name}/to_last"),
        "Transpose",
        vec![Some(x)],
        vec![Some(xt)],
        &chain,
    );
    t1.attrs.insert("perm".into(), Attr::Ints(perm.clone()));
    let mut ln = cx.node(name.clone(), "LayerNormalization", ins, vec![Some(yt)], &chain);
    for (k, a) in attrs {
        ln.attrs.insert(k.into(), a);
    }
    let mut t2 = cx.node(
        format!("{name}/back"),
        "Transpose",
        vec![Some(yt)],
        vec![Some(out)],
        &chain,
    );
    t2.attrs.insert("perm".into(), Attr::Ints(perm));
    p.remove.extend_from_slice(&chain);
    p.nodes.extend([t1, ln, t2]);
    cx.emit(p);
    Some(())
}
