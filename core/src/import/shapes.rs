//! Shape and dtype inference with symbolic dimensions.
//!
//! Values computable at import time (constants, `Shape` of static shapes and whatever
//! follows from them) are folded by running the kernel; every other supported op has a
//! rule that maps input shapes (fixed or symbolic) to output shapes.

use crate::ir::{Attr, DType, Dim, Graph, Model, Node, Shape, Tensor, concrete};
use crate::sim::OpCtx;

/// Largest tensor (elements) folded at import time.
const FOLD_LIMIT: usize = 1 << 16;

/// Fills in `dtype` and `shape` of every value that can be inferred.
pub fn infer(model: &mut Model) {
    let opset = model.opset();
    infer_graph(&mut model.graph, opset);
}

/// A fixed input shape asked for an input the model does not have.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the model has no input named '{0}'")]
pub struct NoSuchInput(pub String);

/// Fixes the dims of the named graph inputs (e.g. a dynamic height and width) and infers
/// every other shape again from them: what MAC counts and the studio's shapes use when a
/// model is dynamic.
pub fn fix_inputs<S: std::hash::BuildHasher>(
    model: &mut Model,
    shapes: &std::collections::HashMap<String, Vec<usize>, S>,
) -> Result<(), NoSuchInput> {
    for name in shapes.keys() {
        if !model.graph.inputs.iter().any(|&i| &model.graph.values[i].name == name) {
            return Err(NoSuchInput(name.clone()));
        }
    }
    for &i in &model.graph.inputs {
        let v = &mut model.graph.values[i];
        if let Some(dims) = shapes.get(&v.name) {
            v.shape = Some(dims.iter().map(|&d| Dim::Fixed(d)).collect());
        }
    }
    for v in &mut model.graph.values {
        if v.producer.is_some() {
            v.shape = None;
        }
    }
    infer(model);
    Ok(())
}

fn infer_graph(g: &mut Graph, opset: i64) {
    let Ok(order) = g.topo_order() else {
        return;
    };
    let ctx = OpCtx { opset, threads: 1 };
    let mut known: Vec<Option<Tensor>> = g
        .values
        .iter()
        .map(|v| {
            v.constant
                .as_ref()
                .filter(|c| c.len() <= FOLD_LIMIT)
                .map(|c| c.tensor().clone())
        })
        .collect();
    let mut symv: Vec<Option<SymVec>> = vec![None; g.values.len()];
    for n in order {
        // Subgraphs first: an If's outputs take their types from its branches.
        for a in g.nodes[n].attrs.values_mut() {
            if let Attr::Graph(sub) = a {
                infer_graph(sub, opset);
            }
        }
        let node = g.nodes[n].clone();
        let ins: Vec<Option<(Option<DType>, Option<Shape>)>> = node
            .inputs
            .iter()
            .map(|v| v.map(|v| (g.values[v].dtype, g.values[v].shape.clone())))
            .collect();
        // Fold when every input value is known (or the op only needs shapes).
        let all_known = node.inputs.iter().flatten().all(|&v| known[v].is_some());
        let shape_only = node.op == "Shape" || node.op == "Size";
        let mut folded = None;
        if all_known
            && !matches!(
                node.op.as_str(),
                "If" | "Loop" | "Scan" | "RandomNormal" | "RandomUniform" | "Dropout"
            )
        {
            let vals: Vec<Option<&Tensor>> = node.inputs.iter().map(|v| v.and_then(|v| known[v].as_ref())).collect();
            // Constant nodes always give their shape; other ops only fold small results.
            if let Ok(outs) = crate::sim::ops::eval(&node, &vals, &ctx)
                && (node.op == "Constant" || outs.iter().all(|t| t.len() <= FOLD_LIMIT))
            {
                folded = Some(outs);
            }
        } else if shape_only
            && let Some(Some((_, Some(s)))) = ins.first()
            && let Some(dims) = concrete(s)
        {
            let r = dims.len() as i64;
            let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
            let start = clampi(node.attr_i("start").unwrap_or(0));
            let end = clampi(node.attr_i("end").unwrap_or(r));
            let t = if node.op == "Shape" {
                let d: Vec<i64> = dims[start..end.max(start)].iter().map(|&d| d as i64).collect();
                Tensor::I64(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[d.len()]), d).unwrap_or_default())
            } else {
                Tensor::I64(ndarray::ArrayD::from_elem(
                    ndarray::IxDyn(&[]),
                    dims.iter().product::<usize>() as i64,
                ))
            };
            folded = Some(vec![t]);
        }
        if let Some(outs) = folded {
            for (o, t) in node.outputs.iter().zip(outs) {
                if let Some(o) = o {
                    let v = &mut g.values[*o];
                    v.dtype = Some(t.dtype());
                    v.shape = Some(t.shape().iter().map(|&d| Dim::Fixed(d)).collect());
                    if t.len() <= FOLD_LIMIT {
                        known[*o] = Some(t);
                    }
                }
            }
            continue;
        }
        let kv = |i: usize| node.input(i).and_then(|v| known[v].as_ref());
        let mut outs = rule(&node, &ins, &kv, opset);
        // Shape values with symbolic entries: tracked through the small integer ops that
        // build a Reshape's or Expand's target from `Shape`, then used there.
        if let Some(sv) = sym_value(&node, g, &known, &symv, opset)
            && let Some(Some(o)) = node.outputs.first()
        {
            symv[*o] = Some(sv);
        }
        if matches!(node.op.as_str(), "Reshape" | "Expand")
            && kv(1).is_none()
            && let Some(want) = node.input(1).and_then(|v| symv[v].as_ref())
            && let Some(first) = outs.first_mut()
        {
            let x = ins.first().cloned().flatten().and_then(|x| x.1);
            let s = if node.op == "Reshape" {
                Some(sym_reshape(
                    x.as_deref(),
                    &want.items,
                    node.attr_i("allowzero").unwrap_or(0) != 0,
                ))
            } else {
                x.map(|x| sym_expand(&x, &want.items))
            };
            if s.is_some() {
                first.1 = s;
            }
        }
        for (k, o) in node.outputs.iter().enumerate() {
            let Some(o) = o else { continue };
            if let Some((dt, sh)) = outs.get(k) {
                let v = &mut g.values[*o];
                if v.dtype.is_none() {
                    v.dtype = *dt;
                }
                if sh.is_some()
                    && v.shape
                        .as_ref()
                        .is_none_or(|s| s.iter().all(|d| matches!(d, Dim::Sym(x) if x.is_empty())))
                {
                    v.shape.clone_from(sh);
                }
            }
        }
    }
}

type Io = (Option<DType>, Option<Shape>);

/// One entry of a shape value: a known integer or a named symbolic dim (anonymous
/// symbols, `Sym("")`, stand for unknown sizes and never equal each other).
#[derive(Clone, Debug, PartialEq)]
enum Item {
    Int(i64),
    Sym(String),
}

/// A small integer tensor (rank 0 or 1) whose entries are dims, some symbolic: `Shape` of a
/// dynamic tensor and what Slice, Gather, Concat, Cast, Squeeze and Unsqueeze make of it.
#[derive(Clone, Debug)]
struct SymVec {
    scalar: bool,
    items: Vec<Item>,
}

/// The shape value a node computes, when its inputs are shape values or constants.
fn sym_value(node: &Node, g: &Graph, known: &[Option<Tensor>], symv: &[Option<SymVec>], opset: i64) -> Option<SymVec> {
    if !node.domain.is_empty() {
        return None;
    }
    // Input `i` as a shape value: tracked, or a small integer constant.
    let arg = |i: usize| -> Option<SymVec> {
        let v = node.input(i)?;
        if let Some(s) = &symv[v] {
            return Some(s.clone());
        }
        let t = known[v].as_ref()?;
        if t.shape().len() > 1 || t.len() > 64 {
            return None;
        }
        Some(SymVec {
            scalar: t.shape().is_empty(),
            items: t.as_i64_vec()?.into_iter().map(Item::Int).collect(),
        })
    };
    let ints = |i: usize| {
        node.input(i)
            .and_then(|v| known[v].as_ref())
            .and_then(Tensor::as_i64_vec)
    };
    let tracked = |i: usize| node.input(i).is_some_and(|v| symv[v].is_some());
    match node.op.as_str() {
        "Shape" => {
            let dims = g.values[node.input(0)?].shape.as_ref()?;
            let r = dims.len() as i64;
            let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
            let start = clampi(node.attr_i("start").unwrap_or(0));
            let end = clampi(node.attr_i("end").unwrap_or(r)).max(start);
            let items = dims[start..end]
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => Item::Int(*n as i64),
                    Dim::Sym(s) => Item::Sym(s.clone()),
                })
                .collect();
            Some(SymVec { scalar: false, items })
        }
        "Cast" | "Identity" if tracked(0) => {
            let to = node.attr_i("to").and_then(|c| DType::from_onnx(c as i32));
            (node.op == "Identity" || matches!(to, Some(DType::I64 | DType::I32))).then(|| arg(0))?
        }
        "Concat" if (0..node.inputs.len()).any(tracked) => {
            let mut items = vec![];
            for i in 0..node.inputs.len() {
                let a = arg(i)?;
                if a.scalar {
                    return None;
                }
                items.extend(a.items);
            }
            Some(SymVec { scalar: false, items })
        }
        "Slice" if tracked(0) => {
            let a = arg(0)?;
            if a.scalar {
                return None;
            }
            let (starts, ends, axes, steps) = if opset >= 10 {
                (
                    ints(1)?,
                    ints(2)?,
                    node.input(3).map(|_| ints(3)),
                    node.input(4).map(|_| ints(4)),
                )
            } else {
                (
                    node.attr_ints("starts")?.to_vec(),
                    node.attr_ints("ends")?.to_vec(),
                    node.attr_ints("axes").map(|a| Some(a.to_vec())),
                    None,
                )
            };
            let axes_ok = axes.is_none_or(|a| a.is_some_and(|a| a.iter().all(|&x| x == 0 || x == -1)));
            let steps_ok = steps.is_none_or(|s| s.is_some_and(|s| s.iter().all(|&x| x == 1)));
            if starts.len() != 1 || ends.len() != 1 || !axes_ok || !steps_ok {
                return None;
            }
            let n = a.items.len() as i64;
            let clampi = |v: i64| (if v < 0 { v + n } else { v }).clamp(0, n) as usize;
            let (s, e) = (clampi(starts[0]), clampi(ends[0]));
            Some(SymVec {
                scalar: false,
                items: a.items[s..e.max(s)].to_vec(),
            })
        }
        "Gather" if tracked(0) && node.attr_i("axis").unwrap_or(0) == 0 => {
            let a = arg(0)?;
            let t = node.input(1).and_then(|v| known[v].as_ref())?;
            let idx = t.as_i64_vec()?;
            if a.scalar || t.shape().len() > 1 {
                return None;
            }
            let n = a.items.len() as i64;
            let items = idx
                .iter()
                .map(|&i| {
                    a.items
                        .get(usize::try_from(if i < 0 { i + n } else { i }).ok()?)
                        .cloned()
                })
                .collect::<Option<Vec<_>>>()?;
            Some(SymVec {
                scalar: t.shape().is_empty(),
                items,
            })
        }
        "Unsqueeze" if tracked(0) => {
            let a = arg(0)?;
            let axes = node.attr_ints("axes").map(<[i64]>::to_vec).or_else(|| ints(1))?;
            (a.scalar && axes == [0]).then_some(SymVec {
                scalar: false,
                items: a.items,
            })
        }
        "Squeeze" if tracked(0) => {
            let a = arg(0)?;
            (!a.scalar && a.items.len() == 1).then_some(SymVec {
                scalar: true,
                items: a.items,
            })
        }
        _ => None,
    }
}

/// A dim as a shape value's entry.
fn item_dim(i: &Item) -> Dim {
    match i {
        Item::Int(v) => Dim::Fixed((*v).max(0) as usize),
        Item::Sym(s) => Dim::Sym(s.clone()),
    }
}

/// The product of dims as a known factor and the named symbols it multiplies (None when
/// an anonymous symbol is among them).
fn sym_product<'a>(dims: impl Iterator<Item = &'a Dim>) -> Option<(usize, Vec<String>)> {
    let mut k = 1;
    let mut names = vec![];
    for d in dims {
        match d {
            Dim::Fixed(v) => k *= v,
            Dim::Sym(s) if !s.is_empty() => names.push(s.clone()),
            Dim::Sym(_) => return None,
        }
    }
    names.sort();
    Some((k, names))
}

/// Reshape of `x` to a target with symbolic entries; a −1 is solved when the input's
/// product divided by the other entries' leaves a known size or one named symbol.
fn sym_reshape(x: Option<&[Dim]>, want: &[Item], allowzero: bool) -> Shape {
    let mut out: Shape = want
        .iter()
        .enumerate()
        .map(|(i, it)| match it {
            Item::Int(0) if !allowzero => x.and_then(|x| x.get(i).cloned()).unwrap_or_else(sym),
            Item::Int(v) if *v < 0 => sym(),
            it => item_dim(it),
        })
        .collect();
    if let Some(p) = want.iter().position(|it| *it == Item::Int(-1)) {
        out[p] = sym();
        let solved = x.and_then(|x| sym_product(x.iter())).zip(sym_product(
            out.iter().enumerate().filter(|(i, _)| *i != p).map(|(_, d)| d),
        ));
        if let Some(((kx, mut nx), (ko, no))) = solved
            && ko > 0
            && kx % ko == 0
        {
            for n in &no {
                let Some(k) = nx.iter().position(|m| m == n) else {
                    return out;
                };
                nx.remove(k);
            }
            out[p] = match nx.as_slice() {
                [] => Dim::Fixed(kx / ko),
                [n] if kx == ko => Dim::Sym(n.clone()),
                _ => sym(),
            };
        }
    }
    out
}

/// NumPy broadcasting of `x` against a target with symbolic entries (Expand).
fn sym_expand(x: &[Dim], want: &[Item]) -> Shape {
    let rank = x.len().max(want.len());
    (0..rank)
        .map(|i| {
            let a = (i + x.len()).checked_sub(rank).map(|k| x[k].clone());
            let b = (i + want.len()).checked_sub(rank).map(|k| &want[k]);
            match (a, b) {
                (Some(d), None | Some(Item::Int(1))) => d,
                (None | Some(Dim::Fixed(1)), Some(w)) => item_dim(w),
                (Some(Dim::Fixed(d)), Some(Item::Int(w))) if d as i64 == *w => Dim::Fixed(d),
                (Some(Dim::Sym(s)), Some(Item::Sym(w))) if !s.is_empty() && s == *w => Dim::Sym(s),
                _ => sym(),
            }
        })
        .collect()
}

fn sym() -> Dim {
    Dim::Sym(String::new())
}

/// Broadcasts symbolic shapes (unknown when two different symbols meet).
fn broadcast(shapes: &[&Shape]) -> Shape {
    let n = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    (0..n)
        .map(|i| {
            let mut out = Dim::Fixed(1);
            for s in shapes {
                let Some(d) = (i + s.len()).checked_sub(n).map(|j| &s[j]) else {
                    continue;
                };
                out = match (&out, d) {
                    (Dim::Fixed(1), d) => d.clone(),
                    (o, Dim::Fixed(1)) => o.clone(),
                    (o, d) if o == d => o.clone(),
                    (Dim::Fixed(_), Dim::Sym(_)) => out.clone(),
                    (Dim::Sym(_), Dim::Fixed(_)) => d.clone(),
                    _ => sym(),
                };
            }
            out
        })
        .collect()
}

fn axis(v: i64, r: usize) -> Option<usize> {
    let a = if v < 0 { v + r as i64 } else { v };
    (0..=r as i64).contains(&a).then_some(a as usize)
}

fn window_out(d: &Dim, k: usize, s: usize, dl: usize, pb: usize, pe: usize, same: bool, ceil: bool) -> Dim {
    match d {
        Dim::Fixed(n) if same => Dim::Fixed(n.div_ceil(s)),
        Dim::Fixed(n) => {
            let eff = (k - 1) * dl + 1;
            let span = n + pb + pe;
            if span < eff {
                return sym();
            }
            Dim::Fixed(if ceil {
                (span - eff).div_ceil(s) + 1
            } else {
                (span - eff) / s + 1
            })
        }
        Dim::Sym(_) => sym(),
    }
}

fn rule<'k>(node: &Node, ins: &[Option<Io>], known: &dyn Fn(usize) -> Option<&'k Tensor>, opset: i64) -> Vec<Io> {
    let i0 = ins.first().cloned().flatten().unwrap_or((None, None));
    let shape = |i: usize| ins.get(i).cloned().flatten().and_then(|x| x.1);
    let dt = |i: usize| ins.get(i).cloned().flatten().and_then(|x| x.0);
    let same = || vec![i0.clone()];
    let op = node.op.as_str();
    match op {
        "Relu"
        | "LeakyRelu"
        | "PRelu"
        | "Sigmoid"
        | "Tanh"
        | "HardSigmoid"
        | "HardSwish"
        | "Elu"
        | "Selu"
        | "Celu"
        | "Softplus"
        | "Softsign"
        | "Gelu"
        | "Mish"
        | "Erf"
        | "Exp"
        | "Log"
        | "Sqrt"
        | "Reciprocal"
        | "Neg"
        | "Abs"
        | "Clip"
        | "Softmax"
        | "LogSoftmax"
        | "Identity"
        | "Ceil"
        | "Floor"
        | "Round"
        | "Sign"
        | "Sin"
        | "Cos"
        | "Tan"
        | "Asin"
        | "Acos"
        | "Atan"
        | "Sinh"
        | "Cosh"
        | "Asinh"
        | "Acosh"
        | "Atanh"
        | "ThresholdedRelu"
        | "CumSum"
        | "BatchNormalization"
        | "InstanceNormalization"
        | "Trilu"
        | "QuickGelu"
        | "Not" => same(),
        "Dropout" => vec![i0.clone(), (Some(DType::Bool), i0.1.clone())],
        "LayerNormalization" => vec![i0.clone(), (Some(DType::F32), None), (Some(DType::F32), None)],
        "SimplifiedLayerNormalization" => vec![i0.clone(), (Some(DType::F32), None)],
        "IsNaN" | "IsInf" => vec![(Some(DType::Bool), i0.1)],
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod" | "Max" | "Min" | "Sum" | "Mean" | "Where" | "Equal" | "Less"
        | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or" | "Xor" => {
            let shapes: Vec<Shape> = (0..ins.len()).filter_map(shape).collect();
            let s =
                (shapes.len() == ins.iter().flatten().count()).then(|| broadcast(&shapes.iter().collect::<Vec<_>>()));
            let d = match op {
                "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" | "And" | "Or" | "Xor" => {
                    Some(DType::Bool)
                }
                "Where" => dt(1),
                _ => dt(0),
            };
            vec![(d, s)]
        }
        "Cast" => vec![(node.attr_i("to").and_then(|c| DType::from_onnx(c as i32)), i0.1)],
        "CastLike" | "DequantizeLinear" => vec![(dt(1), i0.1)],
        "QuantizeLinear" => {
            let d = dt(2)
                .or_else(|| node.attr_i("output_dtype").and_then(|c| DType::from_onnx(c as i32)))
                .or(Some(DType::U8));
            vec![(d, i0.1)]
        }
        "Conv" | "FusedConv" | "MaxPool" | "AveragePool" | "LpPool" => {
            let Some(x) = i0.1.clone() else {
                return vec![(i0.0, None)];
            };
            if x.len() < 3 {
                return vec![(i0.0, None)];
            }
            let nsp = x.len() - 2;
            let kernel: Vec<usize> = match node.attr_ints("kernel_shape") {
                Some(k) => k.iter().map(|&v| v.max(1) as usize).collect(),
                None => match shape(1).and_then(|w| concrete(&w)) {
                    Some(w) if w.len() == x.len() => w[2..].to_vec(),
                    _ => return vec![(i0.0, None)],
                },
            };
            if kernel.len() != nsp {
                return vec![(i0.0, None)];
            }
            let get = |name: &str, d: usize| -> Vec<usize> {
                node.attr_ints(name)
                    .map_or(vec![d; nsp], |v| v.iter().map(|&x| x.max(0) as usize).collect())
            };
            let (s, dl) = (get("strides", 1), get("dilations", 1));
            let pads = node
                .attr_ints("pads")
                .map_or(vec![0; 2 * nsp], |v| v.iter().map(|&x| x.max(0) as usize).collect());
            if s.len() != nsp
                || dl.len() != nsp
                || pads.len() != 2 * nsp
                || s.contains(&0)
                || dl.contains(&0)
                || kernel.contains(&0)
            {
                return vec![(i0.0, None)];
            }
            let same_pad = node.attr_s("auto_pad").is_some_and(|a| a.starts_with("SAME"));
            let ceil = node.attr_i("ceil_mode").unwrap_or(0) != 0;
            let c = if matches!(op, "Conv" | "FusedConv") {
                shape(1).and_then(|w| w.first().cloned()).unwrap_or_else(sym)
            } else {
                x[1].clone()
            };
            let mut out = vec![x[0].clone(), c];
            for i in 0..nsp {
                out.push(window_out(
                    &x[i + 2],
                    kernel[i],
                    s[i],
                    dl[i],
                    pads[i],
                    pads[i + nsp],
                    same_pad,
                    ceil,
                ));
            }
            let mut v = vec![(i0.0, Some(out.clone()))];
            if op == "MaxPool" {
                v.push((Some(DType::I64), Some(out)));
            }
            v
        }
        "ConvTranspose" => {
            let (Some(x), Some(w)) = (i0.1.clone(), shape(1)) else {
                return vec![(i0.0, None)];
            };
            if x.len() < 3 || w.len() != x.len() {
                return vec![(i0.0, None)];
            }
            let nsp = x.len() - 2;
            let group = node.attr_i("group").unwrap_or(1).max(1) as usize;
            let m = match &w[1] {
                Dim::Fixed(v) => Dim::Fixed(v * group),
                Dim::Sym(s) => Dim::Sym(s.clone()),
            };
            let mut out = vec![x[0].clone(), m];
            let kernel: Vec<usize> = match node.attr_ints("kernel_shape") {
                Some(k) => k.iter().map(|&v| v.max(1) as usize).collect(),
                None => concrete(&w).map_or(vec![1; nsp], |w| w[2..].to_vec()),
            };
            let get = |name: &str, d: usize| -> Vec<usize> {
                node.attr_ints(name)
                    .map_or(vec![d; nsp], |v| v.iter().map(|&x| x.max(0) as usize).collect())
            };
            let (s, dl, op_) = (get("strides", 1), get("dilations", 1), get("output_padding", 0));
            let pads = node
                .attr_ints("pads")
                .map_or(vec![0; 2 * nsp], |v| v.iter().map(|&x| x.max(0) as usize).collect());
            if s.len() != nsp
                || dl.len() != nsp
                || op_.len() != nsp
                || pads.len() != 2 * nsp
                || kernel.len() != nsp
                || kernel.contains(&0)
            {
                return vec![(i0.0, None)];
            }
            let os = node.attr_ints("output_shape");
            for i in 0..nsp {
                out.push(match (&x[i + 2], os) {
                    (_, Some(o)) if o.len() >= nsp => Dim::Fixed(o[o.len() - nsp + i].max(0) as usize),
                    (Dim::Fixed(n), _) if node.attr_s("auto_pad").is_some_and(|a| a.starts_with("SAME")) => {
                        Dim::Fixed(n * s[i])
                    }
                    (Dim::Fixed(n), _) => {
                        let full = s[i] * (n - 1) + op_[i] + (kernel[i] - 1) * dl[i] + 1;
                        full.checked_sub(pads[i] + pads[i + nsp]).map_or_else(sym, Dim::Fixed)
                    }
                    _ => sym(),
                });
            }
            vec![(i0.0, Some(out))]
        }
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let s = i0.1.clone().map(|x| {
                x.iter()
                    .enumerate()
                    .map(|(i, d)| if i < 2 { d.clone() } else { Dim::Fixed(1) })
                    .collect()
            });
            vec![(i0.0, s)]
        }
        "MatMul" => {
            let (Some(a), Some(b)) = (i0.1.clone(), shape(1)) else {
                return vec![(i0.0, None)];
            };
            if a.len() < 2 || b.len() < 2 {
                return vec![(i0.0, None)];
            }
            let mut batch = broadcast(&[&a[..a.len() - 2].to_vec(), &b[..b.len() - 2].to_vec()]);
            batch.push(a[a.len() - 2].clone());
            batch.push(b[b.len() - 1].clone());
            vec![(i0.0, Some(batch))]
        }
        "Gemm" | "FusedGemm" => {
            let (Some(a), Some(b)) = (i0.1.clone(), shape(1)) else {
                return vec![(i0.0, None)];
            };
            if a.len() != 2 || b.len() != 2 {
                return vec![(i0.0, None)];
            }
            let m = if node.attr_i("transA").unwrap_or(0) != 0 {
                a[1].clone()
            } else {
                a[0].clone()
            };
            let n = if node.attr_i("transB").unwrap_or(0) != 0 {
                b[0].clone()
            } else {
                b[1].clone()
            };
            vec![(i0.0, Some(vec![m, n]))]
        }
        "Flatten" => {
            let Some(x) = i0.1.clone() else {
                return vec![(i0.0, None)];
            };
            let Some(a) = axis(node.attr_i("axis").unwrap_or(1), x.len()) else {
                return vec![(i0.0, None)];
            };
            let prod = |s: &[Dim]| concrete(s).map_or_else(sym, |v| Dim::Fixed(v.iter().product()));
            vec![(i0.0, Some(vec![prod(&x[..a]), prod(&x[a..])]))]
        }
        "Reshape" => {
            let spec = known(1)
                .and_then(Tensor::as_i64_vec)
                .or_else(|| node.attr_ints("shape").map(<[i64]>::to_vec));
            let s = spec.map(|sp| {
                let x = i0.1.clone().unwrap_or_default();
                let allowzero = node.attr_i("allowzero").unwrap_or(0) != 0;
                let mut out: Shape = sp
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| match d {
                        0 if !allowzero => x.get(i).cloned().unwrap_or_else(sym),
                        d if d > 0 => Dim::Fixed(d as usize),
                        _ => sym(),
                    })
                    .collect();
                if let (Some(xs), Some(p)) = (concrete(&x), sp.iter().position(|&d| d == -1)) {
                    let known_prod: Option<usize> = out
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != p)
                        .map(|(_, d)| if let Dim::Fixed(v) = d { Some(v) } else { None })
                        .product();
                    if let Some(kp) = known_prod.filter(|&k| k > 0) {
                        out[p] = Dim::Fixed(xs.iter().product::<usize>() / kp);
                    }
                }
                out
            });
            vec![(i0.0, s)]
        }
        "Gather" => {
            // data[..axis] ++ indices ++ data[axis + 1..].
            let s = match (i0.1.clone(), shape(1)) {
                (Some(x), Some(idx)) => node
                    .attr_i("axis")
                    .map_or(Some(0), |a| axis(a, x.len()))
                    .filter(|&a| a < x.len())
                    .map(|a| [&x[..a], &idx[..], &x[a + 1..]].concat()),
                _ => None,
            };
            vec![(i0.0, s)]
        }
        "DepthToSpace" | "SpaceToDepth" => {
            // NCHW: channels ÷ b², height and width × b (and the reverse).
            let b = node
                .attr_i("blocksize")
                .and_then(|b| usize::try_from(b).ok())
                .filter(|&b| b > 0);
            let s = match (i0.1.clone(), b) {
                (Some(x), Some(b)) if x.len() == 4 => {
                    // `d · f`, or `d / f` where f divides it.
                    let scale = |d: &Dim, f: usize, mul: bool| match d {
                        Dim::Fixed(v) if mul => Dim::Fixed(v * f),
                        Dim::Fixed(v) if v % f == 0 => Dim::Fixed(v / f),
                        Dim::Fixed(_) | Dim::Sym(_) => sym(),
                    };
                    let d2s = op == "DepthToSpace";
                    Some(vec![
                        x[0].clone(),
                        scale(&x[1], b * b, !d2s),
                        scale(&x[2], b, d2s),
                        scale(&x[3], b, d2s),
                    ])
                }
                _ => None,
            };
            vec![(i0.0, s)]
        }
        "Tile" => {
            let s = match (i0.1.clone(), known(1).and_then(Tensor::as_i64_vec)) {
                (Some(x), Some(r)) if r.len() == x.len() => Some(
                    x.iter()
                        .zip(&r)
                        .map(|(d, &k)| match (d, usize::try_from(k)) {
                            (_, Ok(1)) => d.clone(),
                            (Dim::Fixed(v), Ok(k)) => Dim::Fixed(v * k),
                            _ => sym(),
                        })
                        .collect(),
                ),
                _ => None,
            };
            vec![(i0.0, s)]
        }
        "Transpose" => {
            let s = i0.1.clone().map(|x| {
                let perm: Vec<usize> = node.attr_ints("perm").map_or_else(
                    || (0..x.len()).rev().collect(),
                    |p| p.iter().map(|&v| v as usize).collect(),
                );
                perm.iter().map(|&p| x.get(p).cloned().unwrap_or_else(sym)).collect()
            });
            vec![(i0.0, s)]
        }
        "Unsqueeze" | "Squeeze" => {
            let axes = node
                .attr_ints("axes")
                .map(<[i64]>::to_vec)
                .or_else(|| known(1).and_then(Tensor::as_i64_vec));
            let s = match (i0.1.clone(), axes) {
                (Some(x), Some(ax)) if op == "Unsqueeze" => {
                    let r = x.len() + ax.len();
                    let ax: Vec<usize> = ax.iter().filter_map(|&a| axis(a, r).filter(|&v| v < r)).collect();
                    let mut src = x.into_iter();
                    Some(
                        (0..r)
                            .map(|i| {
                                if ax.contains(&i) {
                                    Dim::Fixed(1)
                                } else {
                                    src.next().unwrap_or_else(sym)
                                }
                            })
                            .collect(),
                    )
                }
                (Some(x), Some(ax)) => {
                    let r = x.len();
                    let ax: Vec<usize> = ax.iter().filter_map(|&a| axis(a, r)).collect();
                    Some(
                        x.into_iter()
                            .enumerate()
                            .filter(|(i, _)| !ax.contains(i))
                            .map(|(_, d)| d)
                            .collect(),
                    )
                }
                (Some(x), None) if op == "Squeeze" => {
                    concrete(&x).map(|v| v.into_iter().filter(|&d| d != 1).map(Dim::Fixed).collect())
                }
                _ => None,
            };
            vec![(i0.0, s)]
        }
        "Concat" => {
            let shapes: Vec<Shape> = (0..ins.len()).filter_map(shape).collect();
            let s = (shapes.len() == ins.len() && !shapes.is_empty()).then(|| {
                let r = shapes[0].len();
                let a = axis(node.attr_i("axis").unwrap_or(0), r).unwrap_or(0);
                let mut out = shapes[0].clone();
                if a < r {
                    let total: Option<usize> = shapes
                        .iter()
                        .map(|s| {
                            if let Some(Dim::Fixed(v)) = s.get(a) {
                                Some(*v)
                            } else {
                                None
                            }
                        })
                        .sum();
                    out[a] = total.map_or_else(sym, Dim::Fixed);
                }
                out
            });
            vec![(i0.0, s)]
        }
        "Resize" | "Upsample" => {
            let Some(x) = i0.1.clone() else {
                return vec![(i0.0, None)];
            };
            let scales = known(if opset >= 11 && op == "Resize" { 2 } else { 1 })
                .filter(|t| !t.is_empty())
                .map(|t| t.to_f32().iter().copied().collect::<Vec<f32>>());
            let sizes = if opset >= 11 {
                known(3).and_then(Tensor::as_i64_vec)
            } else {
                None
            };
            let s: Shape = x
                .iter()
                .enumerate()
                .map(|(i, d)| match (&scales, &sizes, d) {
                    (_, Some(sz), _) if sz.len() == x.len() => Dim::Fixed(sz[i].max(0) as usize),
                    (Some(sc), _, Dim::Fixed(n)) if sc.len() == x.len() => {
                        Dim::Fixed((*n as f32 * sc[i]).floor() as usize)
                    }
                    (Some(sc), _, d) if sc.len() == x.len() && sc[i] == 1.0 => d.clone(),
                    _ => sym(),
                })
                .collect();
            vec![(i0.0, Some(s))]
        }
        "Shape" => vec![(Some(DType::I64), i0.1.map(|x| vec![Dim::Fixed(x.len())]))],
        "Size" => vec![(Some(DType::I64), Some(vec![]))],
        "ArgMax" | "ArgMin" | "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceSumSquare" | "ReduceLogSum" | "ReduceLogSumExp" => {
            let d = if op.starts_with("Arg") { Some(DType::I64) } else { i0.0 };
            let keep = node.attr_i("keepdims").unwrap_or(1) != 0;
            let axes: Option<Vec<i64>> = if op.starts_with("Arg") {
                Some(vec![node.attr_i("axis").unwrap_or(0)])
            } else {
                node.attr_ints("axes")
                    .map(<[i64]>::to_vec)
                    .or_else(|| known(1).and_then(Tensor::as_i64_vec))
            };
            let s = i0.1.clone().and_then(|x| {
                let r = x.len();
                let ax: Vec<usize> = match &axes {
                    Some(a) => a.iter().filter_map(|&v| axis(v, r).filter(|&a| a < r)).collect(),
                    None if ins.len() < 2 => (0..r).collect(),
                    None => return None,
                };
                Some(
                    x.into_iter()
                        .enumerate()
                        .filter_map(|(i, dd)| {
                            if ax.contains(&i) {
                                keep.then_some(Dim::Fixed(1))
                            } else {
                                Some(dd)
                            }
                        })
                        .collect(),
                )
            });
            vec![(d, s)]
        }
        "Expand" => {
            // NumPy broadcasting of the input's shape and the requested one.
            let (Some(x), Some(want)) = (i0.1.clone(), known(1).and_then(Tensor::as_i64_vec)) else {
                return vec![(i0.0, None)];
            };
            let rank = x.len().max(want.len());
            let out = (0..rank)
                .map(|i| {
                    let a = (i + x.len()).checked_sub(rank).map(|k| x[k].clone());
                    let b = (i + want.len()).checked_sub(rank).map(|k| want[k]);
                    match (a, b) {
                        (Some(d), None | Some(1)) => d,
                        (None | Some(Dim::Fixed(1)), Some(w)) => Dim::Fixed(w.max(0) as usize),
                        (Some(Dim::Fixed(d)), Some(w)) if d as i64 == w => Dim::Fixed(d),
                        _ => sym(),
                    }
                })
                .collect();
            vec![(i0.0, Some(out))]
        }
        "Pad" => {
            let Some(x) = i0.1.clone() else {
                return vec![(i0.0, None)];
            };
            let rank = x.len();
            let pads = node
                .attr_ints("pads")
                .map(<[i64]>::to_vec)
                .or_else(|| known(1).and_then(Tensor::as_i64_vec));
            let axes: Option<Vec<usize>> = match known(3).and_then(Tensor::as_i64_vec) {
                Some(a) => a
                    .iter()
                    .map(|&v| {
                        usize::try_from(if v < 0 { v + rank as i64 } else { v })
                            .ok()
                            .filter(|&v| v < rank)
                    })
                    .collect(),
                None if node.input(3).is_some() => None,
                None => Some((0..rank).collect()),
            };
            let (Some(pads), Some(axes)) = (pads, axes) else {
                return vec![(i0.0, None)];
            };
            if pads.len() != 2 * axes.len() {
                return vec![(i0.0, None)];
            }
            let mut out = x;
            for (i, &a) in axes.iter().enumerate() {
                out[a] = match &out[a] {
                    Dim::Fixed(d) => {
                        let v = *d as i64 + pads[i] + pads[i + axes.len()];
                        if v < 0 {
                            return vec![(i0.0, None)];
                        }
                        Dim::Fixed(v as usize)
                    }
                    Dim::Sym(_) => sym(),
                };
            }
            vec![(i0.0, Some(out))]
        }
        "Slice" => {
            // Symbolic dims stand in as a large size: an axis sliced there stays symbolic.
            const UNKNOWN: usize = 1 << 40;
            let Some(x) = i0.1.clone() else {
                return vec![(i0.0, None)];
            };
            let fake: Vec<usize> = x
                .iter()
                .map(|d| if let Dim::Fixed(v) = d { *v } else { UNKNOWN })
                .collect();
            let consts: Vec<Option<&Tensor>> = (0..node.inputs.len()).map(known).collect();
            let Ok(spec) = crate::sim::ops::shape::slice_spec(node, &consts, opset, &fake) else {
                return vec![(i0.0, None)];
            };
            let mut out = x.clone();
            for a in spec {
                out[a.axis] = if fake[a.axis] == UNKNOWN {
                    // The whole axis in order keeps its symbolic size. Exporters write
                    // "to the end" as a huge end (tf2onnx 1e9, others i32/i64::MAX): an
                    // end from 2^29 up is taken as one.
                    if a.first == 0 && a.step == 1 && a.count >= 1 << 29 {
                        continue;
                    }
                    sym()
                } else {
                    Dim::Fixed(a.count)
                };
            }
            vec![(i0.0, Some(out))]
        }
        "Split" => {
            // Sizes from the `split` input (opset 13+) or attribute, else equal parts
            // (the last one smaller when the axis does not divide, as opset 18 allows).
            let n = node.outputs.len();
            let Some(x) = i0.1.clone() else {
                return vec![(i0.0, None); n];
            };
            let rank = x.len() as i64;
            let axis = node.attr_i("axis").unwrap_or(0);
            let Some(axis) = usize::try_from(if axis < 0 { axis + rank } else { axis })
                .ok()
                .filter(|&a| a < x.len())
            else {
                return vec![(i0.0, None); n];
            };
            let sizes: Option<Vec<i64>> = if opset >= 13 {
                known(1).and_then(Tensor::as_i64_vec)
            } else {
                node.attr_ints("split").map(<[i64]>::to_vec)
            };
            let dims: Vec<Dim> = match (sizes, &x[axis]) {
                (Some(s), _) if s.len() == n => s.iter().map(|&d| Dim::Fixed(d.max(0) as usize)).collect(),
                (None, Dim::Fixed(d)) if n > 0 => {
                    let part = d.div_ceil(n);
                    (0..n)
                        .map(|k| Dim::Fixed(part.min(d.saturating_sub(k * part))))
                        .collect()
                }
                _ => vec![sym(); n],
            };
            dims.into_iter()
                .map(|d| {
                    let mut s = x.clone();
                    s[axis] = d;
                    (i0.0, Some(s))
                })
                .collect()
        }
        "LSTM" => vec![(i0.0, None), (i0.0, None), (i0.0, None)],
        "If" => (0..node.outputs.len())
            .map(|k| {
                let branch = |name: &str| {
                    node.attr_graph(name).and_then(|g| {
                        g.outputs
                            .get(k)
                            .map(|&v| (g.values[v].dtype, g.values[v].shape.clone()))
                    })
                };
                let (a, b) = (branch("then_branch"), branch("else_branch"));
                let dtype = a.as_ref().and_then(|x| x.0).or_else(|| b.as_ref().and_then(|x| x.0));
                // The shape is known only when both branches agree on it.
                let shape = match (a.and_then(|x| x.1), b.and_then(|x| x.1)) {
                    (Some(x), Some(y)) if x == y => Some(x),
                    _ => None,
                };
                (dtype, shape)
            })
            .collect(),
        "ConstantOfShape" => {
            let dtype = match node.attr("value") {
                Some(Attr::Tensor(c)) => c.dtype,
                _ => DType::F32,
            };
            let shape = known(0)
                .and_then(Tensor::as_i64_vec)
                .map(|d| d.iter().map(|&x| Dim::Fixed(x.max(0) as usize)).collect());
            vec![(Some(dtype), shape)]
        }
        "Loop" | "Scan" => vec![(None, None); node.outputs.len()],
        _ => vec![(i0.0, None); node.outputs.len()],
    }
}
