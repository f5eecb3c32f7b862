//! Index ops: scatters (ScatterElements, Scatter, ScatterND, with their reductions),
//! GatherND, OneHot, Compress, ReverseSequence and TopK; and the window generators
//! (HannWindow, HammingWindow, BlackmanWindow). Element moves go through a flat gather, so
//! every dtype (strings and booleans too) moves exactly.

use super::quant::cast_f64;
use super::shape::{concat, gather, reshape};
use super::{OpResult, input, input_ints, norm_axis};
use crate::ir::{DType, Node, Tensor};
use ndarray::{ArrayD, Axis, IxDyn};

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1];
    }
    s
}

/// An index into a dimension of `dim`, negative from the end; an error out of range.
fn wrap(i: i64, dim: usize) -> Result<usize, String> {
    let d = dim as i64;
    let j = if i < 0 { i + d } else { i };
    if j < 0 || j >= d {
        return Err(format!("index {i} out of range for a dimension of {dim}"));
    }
    Ok(j as usize)
}

/// The elements of `t` at flat positions `at`, shaped `shape` (any dtype).
fn take_flat(t: &Tensor, at: &[usize], shape: &[usize]) -> Result<Tensor, String> {
    let flat = reshape(t, &[t.shape().iter().product()])?;
    let idx = Tensor::I64(
        ArrayD::from_shape_vec(IxDyn(&[at.len()]), at.iter().map(|&p| p as i64).collect())
            .map_err(|e| e.to_string())?,
    );
    reshape(&gather(&flat, &idx, 0)?, shape)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

impl Reduction {
    fn of(node: &Node) -> Result<Self, String> {
        Ok(match node.attr_s("reduction").unwrap_or("none") {
            "none" => Self::None,
            "add" => Self::Add,
            "mul" => Self::Mul,
            "max" => Self::Max,
            "min" => Self::Min,
            r => return Err(format!("reduction {r} (none, add, mul, max, min)")),
        })
    }

    fn apply(self, old: f64, new: f64) -> f64 {
        match self {
            Self::None => new,
            Self::Add => old + new,
            Self::Mul => old * new,
            Self::Max => old.max(new),
            Self::Min => old.min(new),
        }
    }
}

/// `data` with `updates` written at the flat positions `at` (one per update, in order):
/// moved exactly without a reduction, else combined in f64 and cast back.
fn scatter_flat(data: &Tensor, updates: &Tensor, at: &[usize], red: Reduction) -> Result<Tensor, String> {
    let n: usize = data.shape().iter().product();
    if red == Reduction::None {
        if data.dtype() != updates.dtype() {
            return Err(format!("updates are {}, data {}", updates.dtype(), data.dtype()));
        }
        // Every output element is gathered from data ++ updates: the last update wins.
        let mut src: Vec<usize> = (0..n).collect();
        for (k, &p) in at.iter().enumerate() {
            src[p] = n + k;
        }
        let both = concat(
            &[
                &reshape(data, &[n])?,
                &reshape(updates, &[updates.shape().iter().product()])?,
            ],
            0,
        )?;
        return take_flat(&both, &src, data.shape());
    }
    let mut out = data.to_f64().as_standard_layout().into_owned();
    let flat = out.as_slice_mut().ok_or("layout")?;
    for (&p, &v) in at.iter().zip(updates.to_f64().iter()) {
        flat[p] = red.apply(flat[p], v);
    }
    cast_f64(&out, data.dtype())
}

/// ScatterElements (and the older Scatter): `data[… indices[i] on axis …] = updates[i]`.
fn scatter_elements(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let (data, idx, upd) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let shape = data.shape().to_vec();
    let axis = norm_axis(node.attr_i("axis").unwrap_or(0), shape.len())?;
    let idx = idx.to_i64().ok_or("indices must be integers")?;
    if idx.shape() != upd.shape() || idx.ndim() != shape.len() {
        return Err(format!(
            "indices {:?} and updates {:?} must match in shape",
            idx.shape(),
            upd.shape()
        ));
    }
    let st = strides(&shape);
    let mut at = Vec::with_capacity(idx.len());
    for (ix, &i) in idx.indexed_iter() {
        let mut p = 0;
        for d in 0..shape.len() {
            let c = if d == axis { wrap(i, shape[d])? } else { ix[d] };
            if c >= shape[d] {
                return Err(format!("index {c} out of range on axis {d}"));
            }
            p += c * st[d];
        }
        at.push(p);
    }
    Ok(vec![scatter_flat(data, upd, &at, Reduction::of(node)?)?])
}

/// The flat offsets and slice length of the index tuples in the last axis of `idx` into
/// `shape` (after `batch` leading dims shared by both).
fn nd_offsets(shape: &[usize], idx: &ArrayD<i64>, batch: usize) -> Result<(Vec<usize>, usize), String> {
    let q = *idx.shape().last().ok_or("indices must have rank 1 or more")?;
    if batch + q > shape.len() {
        return Err(format!("index tuples of {q} into a rank-{} tensor", shape.len()));
    }
    let st = strides(shape);
    let slice: usize = shape[batch + q..].iter().product();
    let batch_size: usize = shape[..batch].iter().product();
    let tuples = idx.len() / q.max(1);
    let per_batch = tuples / batch_size.max(1);
    let flat: Vec<i64> = idx.iter().copied().collect();
    let mut out = Vec::with_capacity(tuples);
    for t in 0..tuples {
        let b = t / per_batch.max(1);
        // The batch dims' offset: batch index b over shape[..batch].
        let mut p = 0;
        let mut rest = b;
        for d in (0..batch).rev() {
            p += (rest % shape[d]) * st[d];
            rest /= shape[d];
        }
        for k in 0..q {
            p += wrap(flat[t * q + k], shape[batch + k])? * st[batch + k];
        }
        out.push(p);
    }
    Ok((out, slice))
}

fn gather_nd(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let (data, idx) = (input(inputs, 0)?, input(inputs, 1)?);
    let batch = usize::try_from(node.attr_i("batch_dims").unwrap_or(0)).map_err(|_| "negative batch_dims")?;
    let idx = idx.to_i64().ok_or("indices must be integers")?;
    let shape = data.shape().to_vec();
    let (starts, slice) = nd_offsets(&shape, &idx, batch)?;
    let q = *idx.shape().last().unwrap_or(&0);
    let at: Vec<usize> = starts.iter().flat_map(|&s| s..s + slice).collect();
    let mut out_shape = idx.shape()[..idx.ndim() - 1].to_vec();
    out_shape.extend(&shape[batch + q..]);
    Ok(vec![take_flat(data, &at, &out_shape)?])
}

fn scatter_nd(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let (data, idx, upd) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let idx = idx.to_i64().ok_or("indices must be integers")?;
    let (starts, slice) = nd_offsets(data.shape(), &idx, 0)?;
    let at: Vec<usize> = starts.iter().flat_map(|&s| s..s + slice).collect();
    if at.len() != upd.shape().iter().product::<usize>() {
        return Err(format!(
            "{} updates for {} positions",
            upd.shape().iter().product::<usize>(),
            at.len()
        ));
    }
    Ok(vec![scatter_flat(data, upd, &at, Reduction::of(node)?)?])
}

/// OneHot: `values[1]` where an index hits, `values[0]` elsewhere, on a new axis of `depth`.
fn one_hot(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let idx = input(inputs, 0)?.to_f64();
    let depth = input(inputs, 1)?.to_f64().iter().next().copied().ok_or("empty depth")? as i64;
    if depth < 1 {
        return Err(format!("depth {depth}"));
    }
    let values = input(inputs, 2)?;
    if values.shape().iter().product::<usize>() != 2 {
        return Err("values must hold [off, on]".into());
    }
    let rank = idx.ndim() + 1;
    let axis = norm_axis(node.attr_i("axis").unwrap_or(-1), rank)?;
    let mut shape = idx.shape().to_vec();
    shape.insert(axis, depth as usize);
    let st = strides(&shape);
    let n: usize = shape.iter().product();
    // Gather from [off, on]: 0 everywhere, 1 where hit.
    let mut at = vec![0usize; n];
    for (ix, &v) in idx.indexed_iter() {
        let mut k = v as i64;
        if k < 0 {
            k += depth;
        }
        if k < 0 || k >= depth {
            continue;
        }
        let mut p = 0;
        let mut d = 0;
        for (a, &stride) in st.iter().enumerate() {
            let c = if a == axis {
                k as usize
            } else {
                d += 1;
                ix[d - 1]
            };
            p += c * stride;
        }
        at[p] = 1;
    }
    Ok(vec![take_flat(values, &at, &shape)?])
}

fn compress(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let x = input(inputs, 0)?;
    let cond: Vec<bool> = input(inputs, 1)?.to_f64().iter().map(|&v| v != 0.0).collect();
    let (x, axis) = match node.attr_i("axis") {
        Some(a) => (x.clone(), norm_axis(a, x.shape().len())?),
        None => (reshape(x, &[x.shape().iter().product()])?, 0),
    };
    let dim = x.shape()[axis];
    if cond.len() > dim {
        return Err(format!("a condition of {} for an axis of {dim}", cond.len()));
    }
    let keep: Vec<i64> = (0..cond.len()).filter(|&k| cond[k]).map(|k| k as i64).collect();
    let idx = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[keep.len()]), keep).map_err(|e| e.to_string())?);
    Ok(vec![gather(&x, &idx, axis)?])
}

fn reverse_sequence(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let x = input(inputs, 0)?;
    let lens = input_ints(inputs, 1)?;
    let shape = x.shape().to_vec();
    let batch_axis = norm_axis(node.attr_i("batch_axis").unwrap_or(1), shape.len())?;
    let time_axis = norm_axis(node.attr_i("time_axis").unwrap_or(0), shape.len())?;
    if lens.len() != shape[batch_axis] {
        return Err(format!(
            "{} sequence lengths for a batch of {}",
            lens.len(),
            shape[batch_axis]
        ));
    }
    let st = strides(&shape);
    let n: usize = shape.iter().product();
    let mut at = Vec::with_capacity(n);
    for p in 0..n {
        let (b, t) = (
            (p / st[batch_axis]) % shape[batch_axis],
            (p / st[time_axis]) % shape[time_axis],
        );
        let len = usize::try_from(lens[b])
            .map_err(|_| "negative sequence length")?
            .min(shape[time_axis]);
        if t < len {
            let src_t = len - 1 - t;
            at.push(p - t * st[time_axis] + src_t * st[time_axis]);
        } else {
            at.push(p);
        }
    }
    Ok(vec![take_flat(x, &at, &shape)?])
}

/// TopK: the k largest (or smallest) along `axis`, ties to the lower index; values and
/// int64 indices.
fn top_k(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let xt = input(inputs, 0)?;
    let k = usize::try_from(*input_ints(inputs, 1)?.first().ok_or("empty K")?).map_err(|_| "negative K")?;
    let axis = norm_axis(node.attr_i("axis").unwrap_or(-1), xt.shape().len())?;
    let largest = node.attr_i("largest").unwrap_or(1) != 0;
    if k > xt.shape()[axis] {
        return Err(format!("K = {k} over an axis of {}", xt.shape()[axis]));
    }
    let x = xt.to_f64();
    let mut shape = xt.shape().to_vec();
    shape[axis] = k;
    let mut idx = ArrayD::<i64>::zeros(IxDyn(&shape));
    for (s, mut o) in x.lanes(Axis(axis)).into_iter().zip(idx.lanes_mut(Axis(axis))) {
        let mut order: Vec<usize> = (0..s.len()).collect();
        order.sort_by(|&a, &b| {
            let c = s[a].total_cmp(&s[b]);
            (if largest { c.reverse() } else { c }).then(a.cmp(&b))
        });
        for j in 0..k {
            o[j] = order[j] as i64;
        }
    }
    let idx_t = Tensor::I64(idx.clone());
    // The values: gathered along the axis, lane by lane, through flat positions.
    let st = strides(xt.shape());
    let at: Vec<usize> = idx
        .indexed_iter()
        .map(|(ix, &j)| {
            (0..shape.len())
                .map(|d| if d == axis { j as usize } else { ix[d] } * st[d])
                .sum()
        })
        .collect();
    Ok(vec![take_flat(xt, &at, &shape)?, idx_t])
}

/// HannWindow, HammingWindow, BlackmanWindow of `size` (periodic by default).
fn window(op: &str, node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let size = *input_ints(inputs, 0)?.first().ok_or("empty size")?;
    let size = usize::try_from(size).map_err(|_| format!("size {size}"))?;
    let periodic = node.attr_i("periodic").unwrap_or(1) != 0;
    let n = if periodic {
        size as f64
    } else {
        size.saturating_sub(1) as f64
    };
    let tau = 2.0 * std::f64::consts::PI;
    let w: Vec<f64> = (0..size)
        .map(|i| {
            let x = i as f64 / n;
            match op {
                "HannWindow" => 0.5 - 0.5 * (tau * x).cos(),
                "HammingWindow" => 25.0 / 46.0 - 21.0 / 46.0 * (tau * x).cos(),
                _ => 0.42 - 0.5 * (tau * x).cos() + 0.08 * (2.0 * tau * x).cos(),
            }
        })
        .collect();
    let to = match node.attr_i("output_datatype") {
        Some(code) => DType::from_onnx(code as i32).ok_or(format!("output_datatype {code}"))?,
        None => DType::F32,
    };
    let a = ArrayD::from_shape_vec(IxDyn(&[size]), w).map_err(|e| e.to_string())?;
    Ok(vec![cast_f64(&a, to)?])
}

/// Dispatches the index family; `None` if `op` is not one of them.
pub fn eval(op: &str, node: &Node, inputs: &[Option<&Tensor>]) -> Option<OpResult> {
    Some(match op {
        "ScatterElements" | "Scatter" => scatter_elements(node, inputs),
        "ScatterND" => scatter_nd(node, inputs),
        "GatherND" => gather_nd(node, inputs),
        "OneHot" => one_hot(node, inputs),
        "Compress" => compress(node, inputs),
        "ReverseSequence" => reverse_sequence(node, inputs),
        "TopK" => top_k(node, inputs),
        "HannWindow" | "HammingWindow" | "BlackmanWindow" => window(op, node, inputs),
        _ => return None,
    })
}

/// The ops of this family (supported beside [`super::SUPPORTED_OPS`]; not constant-folded).
pub const OPS: &[&str] = &[
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
];
