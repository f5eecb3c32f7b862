//! Ops on ONNX's container values: If (whose branches may return any value), Loop (whose
//! loop-carried values may be any value), Identity of a sequence or optional, and the
//! Sequence*/Optional* ops.

use super::shape::{concat, reshape, slice_axis};
use super::{axis_dim, norm_axis};
use crate::ir::{DType, Node, Tensor, Val};
use crate::sim::OpCtx;

/// Ops that take or make non-tensor values (Identity only when its input is one).
pub const CONTAINER_OPS: &[&str] = &[
    "If",
    "Loop",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceAt",
    "SequenceLength",
    "SequenceInsert",
    "SequenceErase",
    "ConcatFromSequence",
    "SplitToSequence",
    "Optional",
    "OptionalHasElement",
    "OptionalGetElement",
];

type ValResult = Result<Vec<Val>, String>;

fn val(inputs: &[Option<Val>], i: usize) -> Result<&Val, String> {
    inputs
        .get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| format!("input {i} is missing"))
}

fn tensor(inputs: &[Option<Val>], i: usize) -> Result<&Tensor, String> {
    match val(inputs, i)? {
        Val::Tensor(t) => Ok(t),
        other => Err(format!("input {i} is {}, expected a tensor", other.kind())),
    }
}

fn seq(inputs: &[Option<Val>], i: usize) -> Result<&[Tensor], String> {
    match val(inputs, i)? {
        Val::Seq(s) => Ok(s),
        other => Err(format!("input {i} is {}, expected a sequence", other.kind())),
    }
}

fn scalar_i64(t: &Tensor, what: &str) -> Result<i64, String> {
    match t.as_i64_vec().as_deref() {
        Some([v]) => Ok(*v),
        _ => Err(format!("{what} must be one integer")),
    }
}

/// A position in a sequence of `len` (negative counts from the end; `len` itself allowed
/// when inserting).
fn position(pos: i64, len: usize, insert: bool) -> Result<usize, String> {
    let n = len as i64;
    let p = if pos < 0 { pos + n } else { pos };
    let max = if insert { n } else { n - 1 };
    if p < 0 || p > max {
        return Err(format!("position {pos} is out of range for a sequence of {len}"));
    }
    Ok(p as usize)
}

fn if_op(node: &Node, inputs: &[Option<Val>], ctx: &OpCtx, lookup: &dyn Fn(&str) -> Option<Val>) -> ValResult {
    let c = match tensor(inputs, 0)? {
        Tensor::Bool(a) => *a.iter().next().ok_or("empty condition")?,
        other => other.to_f64().iter().next().copied().ok_or("empty condition")? != 0.0,
    };
    let branch = if c { "then_branch" } else { "else_branch" };
    let g = node.attr_graph(branch).ok_or_else(|| format!("{branch} is missing"))?;
    crate::sim::run_subgraph(g, &[], lookup, ctx)
}

/// Iterations a Loop without a trip count may run before it is called endless.
const MAX_ITERATIONS: i64 = 1 << 24;

/// ONNX Loop: inputs (trip count M, condition, loop-carried values…); the body takes
/// (iteration, condition, values…) and gives (condition, values…, scan outputs…). The
/// outputs are the final values, then each scan output stacked over the iterations.
fn loop_op(node: &Node, inputs: &[Option<Val>], ctx: &OpCtx, lookup: &dyn Fn(&str) -> Option<Val>) -> ValResult {
    let body = node.attr_graph("body").ok_or("body is missing")?;
    let trips = match inputs.first().and_then(Option::as_ref) {
        Some(Val::Tensor(t)) => Some(scalar_i64(t, "M")?),
        Some(other) => return Err(format!("M is {}, expected a tensor", other.kind())),
        None => None,
    };
    let truth = |t: &Tensor| -> Result<bool, String> {
        match t {
            Tensor::Bool(a) => a.iter().next().copied().ok_or_else(|| "empty condition".to_string()),
            other => Ok(other.to_f64().iter().next().copied().ok_or("empty condition")? != 0.0),
        }
    };
    let mut cond = match inputs.get(1).and_then(Option::as_ref) {
        Some(Val::Tensor(t)) => truth(t)?,
        Some(other) => return Err(format!("cond is {}, expected a tensor", other.kind())),
        None => true,
    };
    let mut carried: Vec<Val> = (2..inputs.len())
        .map(|i| val(inputs, i).cloned())
        .collect::<Result<_, _>>()?;
    let n = carried.len();
    let scans = body.outputs.len().checked_sub(1 + n).ok_or_else(|| {
        format!(
            "the body gives {} outputs for {n} loop-carried values",
            body.outputs.len()
        )
    })?;
    let mut stacked: Vec<Vec<Tensor>> = vec![Vec::new(); scans];
    let mut i: i64 = 0;
    while cond && trips.is_none_or(|m| i < m) {
        if trips.is_none() && i >= MAX_ITERATIONS {
            return Err(format!(
                "no trip count and still running after {MAX_ITERATIONS} iterations"
            ));
        }
        let mut args = vec![
            Val::Tensor(Tensor::I64(ndarray::arr0(i).into_dyn())),
            Val::Tensor(Tensor::Bool(ndarray::arr0(cond).into_dyn())),
        ];
        args.append(&mut carried);
        let mut outs = crate::sim::run_subgraph(body, &args, lookup, ctx)?.into_iter();
        cond = match outs.next() {
            Some(Val::Tensor(t)) => truth(&t)?,
            _ => return Err("the body's condition output is not a tensor".into()),
        };
        carried = outs.by_ref().take(n).collect();
        for (k, v) in outs.enumerate() {
            match v {
                Val::Tensor(t) => stacked[k].push(t),
                other => return Err(format!("scan output {k} is {}, expected a tensor", other.kind())),
            }
        }
        i += 1;
    }
    for (k, items) in stacked.into_iter().enumerate() {
        let expanded: Vec<Tensor> = items
            .iter()
            .map(|t| {
                let mut dims = t.shape().to_vec();
                dims.insert(0, 1);
                reshape(t, &dims)
            })
            .collect::<Result<_, _>>()?;
        if expanded.is_empty() {
            return Err(format!("scan output {k} of a loop that ran no iteration has no shape"));
        }
        carried.push(Val::Tensor(concat(&expanded.iter().collect::<Vec<_>>(), 0)?));
    }
    Ok(carried)
}

fn split_to_sequence(node: &Node, inputs: &[Option<Val>]) -> Result<Vec<Tensor>, String> {
    let x = tensor(inputs, 0)?;
    let (axis, dim) = axis_dim(node.attr_i("axis").unwrap_or(0), x.shape())?;
    let split = inputs.get(1).and_then(Option::as_ref);
    let (sizes, squeeze) = match split {
        None => (vec![1; dim], node.attr_i("keepdims").unwrap_or(1) == 0),
        Some(Val::Tensor(t)) if t.shape().is_empty() => {
            let chunk = usize::try_from(scalar_i64(t, "split")?).map_err(|_| "split must be positive")?;
            if chunk == 0 {
                return Err("split must be positive".into());
            }
            let mut sizes = vec![chunk; dim / chunk];
            if dim % chunk != 0 {
                sizes.push(dim % chunk);
            }
            (sizes, false)
        }
        Some(Val::Tensor(t)) => {
            let sizes: Vec<usize> = t
                .as_i64_vec()
                .ok_or("split must be integers")?
                .iter()
                .map(|&v| usize::try_from(v).map_err(|_| format!("negative split size {v}")))
                .collect::<Result<_, _>>()?;
            (sizes, false)
        }
        Some(other) => return Err(format!("split is {}, expected a tensor", other.kind())),
    };
    if sizes.iter().sum::<usize>() != dim {
        return Err(format!("split sizes {sizes:?} do not add up to {dim}"));
    }
    let mut start = 0;
    let mut out = Vec::with_capacity(sizes.len());
    for s in sizes {
        let mut part = slice_axis(x, axis, start as isize, Some((start + s) as isize), 1);
        if squeeze {
            let mut dims = part.shape().to_vec();
            dims.remove(axis);
            part = reshape(&part, &dims)?;
        }
        out.push(part);
        start += s;
    }
    Ok(out)
}

fn concat_from_sequence(node: &Node, items: &[Tensor]) -> Result<Tensor, String> {
    let first = items.first().ok_or("the sequence is empty")?;
    let new_axis = node.attr_i("new_axis").unwrap_or(0) == 1;
    let rank = first.shape().len() + usize::from(new_axis);
    if rank == 0 {
        return Err("cannot concatenate scalars without new_axis".into());
    }
    let axis = norm_axis(node.attr_i("axis").ok_or("axis missing")?, rank)?;
    if new_axis {
        let expanded: Vec<Tensor> = items
            .iter()
            .map(|t| {
                let mut dims = t.shape().to_vec();
                dims.insert(axis, 1);
                reshape(t, &dims)
            })
            .collect::<Result<_, _>>()?;
        concat(&expanded.iter().collect::<Vec<_>>(), axis)
    } else {
        concat(&items.iter().collect::<Vec<_>>(), axis)
    }
}

/// Runs a container op (or Identity of a container).
pub fn eval(node: &Node, inputs: &[Option<Val>], ctx: &OpCtx, lookup: &dyn Fn(&str) -> Option<Val>) -> ValResult {
    let one = |v: Val| Ok(vec![v]);
    match node.op.as_str() {
        "If" => if_op(node, inputs, ctx, lookup),
        "Loop" => loop_op(node, inputs, ctx, lookup),
        "Identity" => one(val(inputs, 0)?.clone()),
        "SequenceConstruct" => {
            let items: Vec<Tensor> = (0..inputs.len())
                .map(|i| tensor(inputs, i).cloned())
                .collect::<Result<_, _>>()?;
            if items.windows(2).any(|w| w[0].dtype() != w[1].dtype()) {
                return Err("sequence elements must share one dtype".into());
            }
            one(Val::Seq(items))
        }
        "SequenceEmpty" => {
            // The dtype attribute only types the empty sequence; nothing to allocate.
            if let Some(code) = node.attr_i("dtype")
                && DType::from_onnx(code as i32).is_none()
            {
                return Err(format!("dtype {code} is not a known tensor type"));
            }
            one(Val::Seq(Vec::new()))
        }
        "SequenceAt" => {
            let s = seq(inputs, 0)?;
            let p = position(scalar_i64(tensor(inputs, 1)?, "position")?, s.len(), false)?;
            one(Val::Tensor(s[p].clone()))
        }
        "SequenceLength" => {
            let n = seq(inputs, 0)?.len() as i64;
            one(Val::Tensor(Tensor::I64(ndarray::arr0(n).into_dyn())))
        }
        "SequenceInsert" => {
            let mut s = seq(inputs, 0)?.to_vec();
            let t = tensor(inputs, 1)?.clone();
            if s.first().is_some_and(|f| f.dtype() != t.dtype()) {
                return Err(format!("inserting {} into a sequence of {}", t.dtype(), s[0].dtype()));
            }
            let p = match inputs.get(2).and_then(Option::as_ref) {
                Some(_) => position(scalar_i64(tensor(inputs, 2)?, "position")?, s.len(), true)?,
                None => s.len(),
            };
            s.insert(p, t);
            one(Val::Seq(s))
        }
        "SequenceErase" => {
            let mut s = seq(inputs, 0)?.to_vec();
            let p = match inputs.get(1).and_then(Option::as_ref) {
                Some(_) => position(scalar_i64(tensor(inputs, 1)?, "position")?, s.len(), false)?,
                None => s.len().checked_sub(1).ok_or("erasing from an empty sequence")?,
            };
            s.remove(p);
            one(Val::Seq(s))
        }
        "ConcatFromSequence" => one(Val::Tensor(concat_from_sequence(node, seq(inputs, 0)?)?)),
        "SplitToSequence" => one(Val::Seq(split_to_sequence(node, inputs)?)),
        "Optional" => one(Val::Opt(inputs.first().cloned().flatten().map(Box::new))),
        "OptionalHasElement" => {
            let has = match inputs.first().and_then(Option::as_ref) {
                None | Some(Val::Opt(None)) => false,
                Some(_) => true,
            };
            one(Val::Tensor(Tensor::Bool(ndarray::arr0(has).into_dyn())))
        }
        "OptionalGetElement" => match val(inputs, 0)? {
            Val::Opt(Some(v)) => one((**v).clone()),
            Val::Opt(None) => Err("the optional is empty".into()),
            other => one(other.clone()),
        },
        other => Err(format!("op {other} is not a container op")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn node(op: &str, attrs: &[(&str, i64)]) -> Node {
        Node {
            name: op.into(),
            op: op.into(),
            domain: String::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            attrs: attrs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), crate::ir::Attr::Int(*v)))
                .collect::<BTreeMap<_, _>>(),
            origin: Vec::new(),
        }
    }

    fn f32s(shape: &[usize], v: Vec<f32>) -> Val {
        Val::Tensor(Tensor::F32(ndarray::ArrayD::from_shape_vec(shape, v).expect("shape")))
    }

    /// A scalar has no axis to split or concatenate along (found by the loader fuzzer).
    #[test]
    fn scalars_are_errors_not_panics() {
        let ctx = OpCtx { opset: 18, threads: 1 };
        let none = |_: &str| None;
        let split = eval(
            &node("SplitToSequence", &[]),
            &[Some(f32s(&[], vec![1.0]))],
            &ctx,
            &none,
        );
        assert!(split.is_err_and(|e| e.contains("scalar")));
        let seq = Val::Seq(vec![Tensor::F32(ndarray::arr0(1.0).into_dyn())]);
        let concat = eval(&node("ConcatFromSequence", &[("axis", 0)]), &[Some(seq)], &ctx, &none);
        assert!(concat.is_err());
    }

    #[test]
    fn sequence_round_trip() {
        let ctx = OpCtx { opset: 18, threads: 1 };
        let none = |_: &str| None;
        let x = f32s(&[4, 2], (0..8).map(|v| v as f32).collect());
        let parts = eval(
            &node("SplitToSequence", &[("axis", 0)]),
            &[Some(x.clone()), None],
            &ctx,
            &none,
        )
        .expect("split");
        let Val::Seq(items) = &parts[0] else {
            panic!("a sequence")
        };
        assert_eq!(items.len(), 4);
        let back = eval(
            &node("ConcatFromSequence", &[("axis", 0)]),
            &[Some(parts[0].clone())],
            &ctx,
            &none,
        )
        .expect("concat");
        assert_eq!(back[0], x);
        let len = eval(&node("SequenceLength", &[]), &[Some(parts[0].clone())], &ctx, &none).expect("length");
        assert_eq!(len[0], Val::Tensor(Tensor::I64(ndarray::arr0(4).into_dyn())));
    }
}
