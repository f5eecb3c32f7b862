//! Normalizations, softmax, reductions, arg-reductions and CumSum.

use super::{OpResult, f32_as, input, norm_axis, opt_input};
use crate::ir::{DType, Node, Tensor};
use crate::sim::OpCtx;
use ndarray::{ArrayD, Axis, IxDyn};
use rayon::prelude::*;

/// Output in the input's dtype: floats through f32, integers through f64.
fn restore(dt: DType, a: &ArrayD<f64>) -> Result<Tensor, String> {
    super::quant::cast_f64(a, dt)
}

fn batch_norm(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let xt = input(inputs, 0)?;
    let x = xt.to_f32();
    let scale = input(inputs, 1)?.to_f32();
    let bias = input(inputs, 2)?.to_f32();
    let mean = input(inputs, 3)?.to_f32();
    let var = input(inputs, 4)?.to_f32();
    let eps = node.attr_f("epsilon").unwrap_or(1e-5);
    let training = node.attr_i("training_mode").unwrap_or(0) != 0;
    if x.ndim() < 2 {
        return Err("input must have a channel axis".into());
    }
    let c = x.shape()[1];
    let (n, plane) = (x.shape()[0], x.shape()[2..].iter().product::<usize>());
    for (name, p) in [("scale", &scale), ("B", &bias), ("mean", &mean), ("var", &var)] {
        if p.len() != c {
            return Err(format!("{name} has {} values for {c} channels", p.len()));
        }
    }
    let xs = x.as_standard_layout();
    let xd = xs.as_slice().ok_or("layout")?;
    let (use_mean, use_var): (Vec<f32>, Vec<f32>) = if training {
        let cnt = (n * plane) as f64;
        let mut m = vec![0f64; c];
        let mut v = vec![0f64; c];
        for b in 0..n {
            for ch in 0..c {
                for &val in &xd[(b * c + ch) * plane..(b * c + ch + 1) * plane] {
                    m[ch] += f64::from(val);
                }
            }
        }
        for x in &mut m {
            *x /= cnt;
        }
        for b in 0..n {
            for ch in 0..c {
                for &val in &xd[(b * c + ch) * plane..(b * c + ch + 1) * plane] {
                    v[ch] += (f64::from(val) - m[ch]).powi(2);
                }
            }
        }
        for x in &mut v {
            *x /= cnt;
        }
        (
            m.iter().map(|&x| x as f32).collect(),
            v.iter().map(|&x| x as f32).collect(),
        )
    } else {
        (mean.iter().copied().collect(), var.iter().copied().collect())
    };
    let mul: Vec<f32> = (0..c).map(|i| scale[i] / (use_var[i] + eps).sqrt()).collect();
    let add: Vec<f32> = (0..c).map(|i| bias[i] - use_mean[i] * mul[i]).collect();
    let mut out = vec![0f32; xd.len()];
    out.par_chunks_mut(plane.max(1))
        .zip(xd.par_chunks(plane.max(1)))
        .enumerate()
        .for_each(|(i, (o, s))| {
            let ch = i % c;
            for (d, v) in o.iter_mut().zip(s) {
                *d = v * mul[ch] + add[ch];
            }
        });
    let y = f32_as(
        xt.dtype(),
        ArrayD::from_shape_vec(IxDyn(x.shape()), out).map_err(|e| e.to_string())?,
    );
    if !training || node.outputs.len() < 3 {
        return Ok(vec![y]);
    }
    let mom = node.attr_f("momentum").unwrap_or(0.9);
    let rm: Vec<f32> = (0..c).map(|i| mean[i] * mom + use_mean[i] * (1.0 - mom)).collect();
    let rv: Vec<f32> = (0..c).map(|i| var[i] * mom + use_var[i] * (1.0 - mom)).collect();
    let mk = |v: Vec<f32>| {
        f32_as(
            xt.dtype(),
            ArrayD::from_shape_vec(IxDyn(&[c]), v).unwrap_or_else(|_| ArrayD::zeros(IxDyn(&[c]))),
        )
    };
    Ok(vec![y, mk(rm), mk(rv)])
}

fn instance_norm(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let xt = input(inputs, 0)?;
    let x = xt.to_f32();
    let scale = input(inputs, 1)?.to_f32();
    let bias = input(inputs, 2)?.to_f32();
    let eps = f64::from(node.attr_f("epsilon").unwrap_or(1e-5));
    if x.ndim() < 3 {
        return Err("input must be N×C×…".into());
    }
    let c = x.shape()[1];
    let plane: usize = x.shape()[2..].iter().product();
    let xs = x.as_standard_layout();
    let xd = xs.as_slice().ok_or("layout")?;
    let sc: Vec<f32> = scale.iter().copied().collect();
    let bi: Vec<f32> = bias.iter().copied().collect();
    if sc.len() != c || bi.len() != c {
        return Err("scale and B must have C values".into());
    }
    let mut out = vec![0f32; xd.len()];
    out.par_chunks_mut(plane.max(1))
        .zip(xd.par_chunks(plane.max(1)))
        .enumerate()
        .for_each(|(i, (o, s))| {
            let ch = i % c;
            let mean = super::sum_f64_by(s, |v| v) / plane as f64;
            let var = super::sum_f64_by(s, |v| (v - mean) * (v - mean)) / plane as f64;
            let inv = 1.0 / (var + eps).sqrt();
            for (d, &v) in o.iter_mut().zip(s) {
                *d = ((f64::from(v) - mean) * inv) as f32 * sc[ch] + bi[ch];
            }
        });
    Ok(vec![f32_as(
        xt.dtype(),
        ArrayD::from_shape_vec(IxDyn(x.shape()), out).map_err(|e| e.to_string())?,
    )])
}

/// LayerNormalization, or with `rms` SimplifiedLayerNormalization (RMSNorm: no mean is
/// subtracted and there is no bias; outputs Y and the inverse RMS).
fn layer_norm(node: &Node, inputs: &[Option<&Tensor>], rms: bool) -> OpResult {
    let xt = input(inputs, 0)?;
    let x = xt.to_f32();
    let r = x.ndim();
    let axis = norm_axis(node.attr_i("axis").unwrap_or(-1), r)?;
    let eps = f64::from(node.attr_f("epsilon").unwrap_or(1e-5));
    let inner: usize = x.shape()[axis..].iter().product();
    let outer: usize = x.shape()[..axis].iter().product();
    let norm_shape = &x.shape()[axis..];
    let scale = input(inputs, 1)?.to_f32();
    let sc = scale
        .broadcast(IxDyn(norm_shape))
        .ok_or("scale does not broadcast")?
        .iter()
        .copied()
        .collect::<Vec<f32>>();
    let bi = match opt_input(inputs, 2).filter(|_| !rms) {
        Some(b) => {
            let b = b.to_f32();
            b.broadcast(IxDyn(norm_shape))
                .ok_or("B does not broadcast")?
                .iter()
                .copied()
                .collect::<Vec<f32>>()
        }
        None => vec![0.0; inner],
    };
    let xs = x.as_standard_layout();
    let xd = xs.as_slice().ok_or("layout")?;
    let mut out = vec![0f32; xd.len()];
    let mut means = vec![0f32; outer];
    let mut invs = vec![0f32; outer];
    out.par_chunks_mut(inner.max(1))
        .zip(xd.par_chunks(inner.max(1)))
        .zip(means.par_iter_mut().zip(invs.par_iter_mut()))
        .with_min_len((8192 / inner.max(1)).max(1))
        .for_each(|((o, s), (mo, io))| {
            let (mean, inv) = layer_norm_row(s, o, (&sc, &bi), rms, eps);
            *mo = mean as f32;
            *io = inv as f32;
        });
    let y = f32_as(
        xt.dtype(),
        ArrayD::from_shape_vec(IxDyn(x.shape()), out).map_err(|e| e.to_string())?,
    );
    let mut stat_shape = x.shape()[..axis].to_vec();
    stat_shape.extend(std::iter::repeat_n(1, r - axis));
    let mk = |v: Vec<f32>| {
        ArrayD::from_shape_vec(IxDyn(&stat_shape), v)
            .map(Tensor::F32)
            .map_err(|e| e.to_string())
    };
    if rms {
        return Ok(vec![y, mk(invs)?]);
    }
    Ok(vec![y, mk(means)?, mk(invs)?])
}

crate::simd_dispatch!(fn layer_norm_row(
    s: &[f32],
    o: &mut [f32],
    scale_bias: (&[f32], &[f32]),
    rms: bool,
    eps: f64,
) -> (f64, f64) => layer_norm_row_impl);

/// One row of (RMS) layer normalization, statistics in f64; returns the mean and the
/// inverse standard deviation (or RMS).
#[inline(always)]
fn layer_norm_row_impl<const FMA: bool>(
    s: &[f32],
    o: &mut [f32],
    (sc, bi): (&[f32], &[f32]),
    rms: bool,
    eps: f64,
) -> (f64, f64) {
    let n = s.len() as f64;
    let mean = if rms { 0.0 } else { super::sum_f64_by(s, |v| v) / n };
    let var = super::sum_f64_by(s, |v| (v - mean) * (v - mean)) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for (((d, &v), &g), &b) in o.iter_mut().zip(s).zip(sc).zip(bi) {
        *d = ((f64::from(v) - mean) * inv) as f32 * g + b;
    }
    (mean, inv)
}

crate::simd_dispatch!(fn softmax_row(s: &[f32], o: &mut [f32], log: bool) => softmax_row_impl);

/// (Log)softmax of one contiguous row, with eight lanes for the max and the sum so that
/// the loops vectorize.
#[inline(always)]
fn softmax_row_impl<const FMA: bool>(s: &[f32], o: &mut [f32], log: bool) {
    let mut m8 = [f32::NEG_INFINITY; 8];
    let mut chunks = s.chunks_exact(8);
    for c in &mut chunks {
        for (m, &v) in m8.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    let mx = chunks
        .remainder()
        .iter()
        .chain(&m8)
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    for (d, &v) in o.iter_mut().zip(s) {
        *d = crate::sim::simd::exp_approx_by::<FMA>(v - mx);
    }
    let mut s8 = [0f32; 8];
    let mut oc = o.chunks_exact(8);
    for c in &mut oc {
        for (a, &v) in s8.iter_mut().zip(c) {
            *a += v;
        }
    }
    let sum = oc.remainder().iter().sum::<f32>() + s8.iter().sum::<f32>();
    if log {
        let ls = sum.ln();
        for (d, &v) in o.iter_mut().zip(s) {
            *d = v - mx - ls;
        }
    } else {
        let inv = 1.0 / sum;
        for d in o.iter_mut() {
            *d *= inv;
        }
    }
}

fn softmax(node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx, log: bool) -> OpResult {
    let xt = input(inputs, 0)?;
    let x = xt.f32_cow();
    let r = x.ndim();
    let default_axis = if ctx.opset < 13 { 1 } else { -1 };
    if r == 0 {
        return Err("the input is a scalar; it needs rank 1 or more".into());
    }
    let axis = norm_axis(node.attr_i("axis").unwrap_or(default_axis), r)?;
    // Opset < 13 coerces to 2-D at `axis`; 13+ works along one axis.
    let (len, inner) = if ctx.opset < 13 {
        (x.shape()[axis..].iter().product::<usize>(), 1)
    } else {
        (x.shape()[axis], x.shape()[axis + 1..].iter().product::<usize>())
    };
    let xs = x.as_standard_layout();
    let xd = xs.as_slice().ok_or("layout")?;
    let mut out = vec![0f32; xd.len()];
    let block = len * inner;
    if inner == 1 {
        // Short rows go to the threads several at a time.
        out.par_chunks_mut(len.max(1))
            .zip(xd.par_chunks(len.max(1)))
            .with_min_len((8192 / len.max(1)).max(1))
            .for_each(|(o, s)| softmax_row(s, o, log));
        let a = ArrayD::from_shape_vec(IxDyn(x.shape()), out).map_err(|e| e.to_string())?;
        return Ok(vec![f32_as(xt.dtype(), a)]);
    }
    // Along a middle axis: columns of `inner` contiguous values, taken `SOFTMAX_COLS` at a
    // time so that every pass is a contiguous, vectorized loop; the (block, column chunk)
    // pieces are spread over the threads.
    let chunks = inner.div_ceil(SOFTMAX_COLS);
    let pieces = (xd.len() / block.max(1)) * chunks;
    let optr = super::SendPtr(out.as_mut_ptr());
    (0..pieces).into_par_iter().for_each_init(Vec::new, |buf, p| {
        let (b, c) = (p / chunks, p % chunks);
        let (j0, w) = (c * SOFTMAX_COLS, SOFTMAX_COLS.min(inner - c * SOFTMAX_COLS));
        let src = &xd[b * block..(b + 1) * block];
        buf.resize(len * w, 0.0);
        softmax_cols(src, inner, j0, buf, log);
        for k in 0..len {
            let at = b * block + k * inner + j0;
            // SAFETY: `out` has `xd.len()` elements; piece (b, c) alone writes columns
            // j0..j0+w of rows b·block + k·inner, so no two pieces write the same element.
            unsafe { std::ptr::copy_nonoverlapping(buf[k * w..].as_ptr(), optr.get().add(at), w) };
        }
    });
    Ok(vec![f32_as(
        xt.dtype(),
        ArrayD::from_shape_vec(IxDyn(x.shape()), out).map_err(|e| e.to_string())?,
    )])
}

/// Columns of a middle-axis softmax taken at a time.
const SOFTMAX_COLS: usize = 512;

crate::simd_dispatch!(fn softmax_cols(s: &[f32], inner: usize, j0: usize, o: &mut [f32], log: bool) => softmax_cols_impl);

/// (Log)softmax down the columns `j0..j0 + w` of `s` (rows of `inner` values), into `o`
/// as `len` rows of `w = o.len() / len` values.
#[inline(always)]
fn softmax_cols_impl<const FMA: bool>(s: &[f32], inner: usize, j0: usize, o: &mut [f32], log: bool) {
    let len = s.len() / inner;
    let w = o.len() / len;
    let mut mx = s[j0..j0 + w].to_vec();
    for k in 1..len {
        for (m, &v) in mx.iter_mut().zip(&s[k * inner + j0..k * inner + j0 + w]) {
            *m = if v > *m { v } else { *m };
        }
    }
    let mut sum = vec![0f32; w];
    for k in 0..len {
        let row = &s[k * inner + j0..k * inner + j0 + w];
        let dst = &mut o[k * w..(k + 1) * w];
        for (((d, &v), &m), a) in dst.iter_mut().zip(row).zip(&mx).zip(sum.iter_mut()) {
            let e = crate::sim::simd::exp_approx_by::<FMA>(v - m);
            *d = e;
            *a += e;
        }
    }
    if log {
        for (m, a) in mx.iter_mut().zip(&sum) {
            *m += a.ln();
        }
        for k in 0..len {
            let row = &s[k * inner + j0..k * inner + j0 + w];
            for ((d, &v), &m) in o[k * w..(k + 1) * w].iter_mut().zip(row).zip(&mx) {
                *d = v - m;
            }
        }
    } else {
        for a in &mut sum {
            *a = 1.0 / *a;
        }
        for k in 0..len {
            for (d, &i) in o[k * w..(k + 1) * w].iter_mut().zip(&sum) {
                *d *= i;
            }
        }
    }
}

fn reduce(op: &str, node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> OpResult {
    let xt = input(inputs, 0)?;
    let r = xt.shape().len();
    let axes_from_input = if op == "ReduceSum" {
        ctx.opset >= 13
    } else {
        ctx.opset >= 18
    };
    let axes: Option<Vec<i64>> = if axes_from_input {
        opt_input(inputs, 1)
            .filter(|t| !t.is_empty())
            .map(|t| t.as_i64_vec().unwrap_or_default())
    } else {
        node.attr_ints("axes").map(<[i64]>::to_vec)
    };
    let keep = node.attr_i("keepdims").unwrap_or(1) != 0;
    let noop = node.attr_i("noop_with_empty_axes").unwrap_or(0) != 0;
    let mut axes: Vec<usize> = match axes {
        Some(a) if !a.is_empty() => a.iter().map(|&v| norm_axis(v, r)).collect::<Result<_, _>>()?,
        _ if noop => return Ok(vec![xt.clone()]),
        _ => (0..r).collect(),
    };
    axes.sort_unstable();
    axes.dedup();
    let x = xt.to_f64();
    let count: usize = axes.iter().map(|&a| x.shape()[a]).product();
    // Element-wise transform first, so multi-axis reductions combine partial results correctly.
    let mut shift = None;
    let mut acc = match op {
        "ReduceL1" => x.mapv(f64::abs),
        "ReduceL2" | "ReduceSumSquare" => x.mapv(|v| v * v),
        "ReduceLogSumExp" => {
            let mut m = x.clone();
            for &ax in axes.iter().rev() {
                m = m
                    .fold_axis(Axis(ax), f64::NEG_INFINITY, |a, &b| a.max(b))
                    .insert_axis(Axis(ax));
            }
            m.mapv_inplace(|v| if v.is_finite() { v } else { 0.0 });
            let e = (&x - &m).mapv(f64::exp);
            shift = Some(m);
            e
        }
        _ => x,
    };
    for &ax in axes.iter().rev() {
        acc = match op {
            "ReduceMax" => acc.fold_axis(
                Axis(ax),
                f64::NEG_INFINITY,
                |a, &b| if b.is_nan() || *a > b { *a } else { b },
            ),
            "ReduceMin" => acc.fold_axis(
                Axis(ax),
                f64::INFINITY,
                |a, &b| if b.is_nan() || *a < b { *a } else { b },
            ),
            "ReduceProd" => acc.fold_axis(Axis(ax), 1.0, |a, &b| a * b),
            _ => acc.sum_axis(Axis(ax)),
        };
        acc = acc.insert_axis(Axis(ax));
    }
    match op {
        "ReduceMean" => acc.mapv_inplace(|v| v / count as f64),
        "ReduceL2" => acc.mapv_inplace(f64::sqrt),
        "ReduceLogSum" => acc.mapv_inplace(f64::ln),
        "ReduceLogSumExp" => {
            acc.mapv_inplace(f64::ln);
            if let Some(m) = shift {
                acc = acc + m;
            }
        }
        _ => {}
    }
    if !keep {
        for &ax in axes.iter().rev() {
            acc = acc.index_axis_move(Axis(ax), 0);
        }
    }
    Ok(vec![restore(xt.dtype(), &acc)?])
}

fn arg_reduce(node: &Node, inputs: &[Option<&Tensor>], max: bool) -> OpResult {
    let xt = input(inputs, 0)?;
    let x = xt.to_f64();
    let r = x.ndim();
    let axis = norm_axis(node.attr_i("axis").unwrap_or(0), r)?;
    let keep = node.attr_i("keepdims").unwrap_or(1) != 0;
    let last = node.attr_i("select_last_index").unwrap_or(0) != 0;
    let out = x.map_axis(Axis(axis), |lane| {
        let mut best = 0usize;
        for (i, &v) in lane.iter().enumerate() {
            let b = lane[best];
            let better = if max {
                v > b || (last && v == b)
            } else {
                v < b || (last && v == b)
            };
            if better {
                best = i;
            }
        }
        best as i64
    });
    let out = if keep { out.insert_axis(Axis(axis)) } else { out };
    Ok(vec![Tensor::I64(out)])
}

/// ONNX LRN across channels (axis 1): x / (bias + α/size · Σ x²)^β over a window of
/// `size` channels centred on each.
fn lrn(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let xt = input(inputs, 0)?;
    let x = xt.to_f64();
    if x.ndim() < 2 {
        return Err("LRN needs an input of rank 2 or more".into());
    }
    let size = usize::try_from(node.attr_i("size").ok_or("size missing")?).map_err(|_| "negative size")?;
    let alpha = f64::from(node.attr_f("alpha").unwrap_or(1e-4));
    let beta = f64::from(node.attr_f("beta").unwrap_or(0.75));
    let bias = f64::from(node.attr_f("bias").unwrap_or(1.0));
    let c = x.shape()[1];
    let (before, after) = ((size.max(1) - 1) / 2, (size.max(1) - 1).div_ceil(2));
    let mut out = x.clone();
    for (mut o, s) in out.lanes_mut(Axis(1)).into_iter().zip(x.lanes(Axis(1))) {
        for k in 0..c {
            let (lo, hi) = (k.saturating_sub(before), (k + after).min(c - 1));
            let sum: f64 = (lo..=hi).map(|j| s[j] * s[j]).sum();
            o[k] = s[k] / (bias + alpha / size as f64 * sum).powf(beta);
        }
    }
    Ok(vec![restore(xt.dtype(), &out)?])
}

/// ONNX GroupNormalization: each group of channels normalized over its channels and
/// spatial dims, then scaled and shifted per channel (per group when scale and bias hold
/// one value a group, as opset 18 gives them).
fn group_norm(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let xt = input(inputs, 0)?;
    let x = xt.to_f64();
    let shape = x.shape().to_vec();
    if shape.len() < 2 {
        return Err("GroupNormalization needs an input of rank 2 or more".into());
    }
    let groups =
        usize::try_from(node.attr_i("num_groups").ok_or("num_groups missing")?).map_err(|_| "negative num_groups")?;
    let (n, c) = (shape[0], shape[1]);
    if groups == 0 || c % groups != 0 {
        return Err(format!("{c} channels in {groups} groups"));
    }
    let eps = f64::from(node.attr_f("epsilon").unwrap_or(1e-5));
    let scale: Vec<f64> = input(inputs, 1)?.to_f64().iter().copied().collect();
    let bias: Vec<f64> = input(inputs, 2)?.to_f64().iter().copied().collect();
    let per = |v: &[f64], ch: usize| -> Result<f64, String> {
        match v.len() {
            l if l == c => Ok(v[ch]),
            l if l == groups => Ok(v[ch / (c / groups)]),
            l => Err(format!("{l} scale or bias values for {c} channels in {groups} groups")),
        }
    };
    let inner: usize = shape[2..].iter().product();
    let span = c / groups * inner;
    let xs = x.as_standard_layout();
    let xd = xs.as_slice().ok_or("layout")?;
    let mut out = vec![0f64; xd.len()];
    for b in 0..n {
        for g in 0..groups {
            let start = (b * c + g * (c / groups)) * inner;
            let s = &xd[start..start + span];
            let mean = s.iter().sum::<f64>() / span as f64;
            let var = s.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / span as f64;
            let inv = 1.0 / (var + eps).sqrt();
            for (k, &v) in s.iter().enumerate() {
                let ch = g * (c / groups) + k / inner.max(1);
                out[start + k] = (v - mean) * inv * per(&scale, ch)? + per(&bias, ch)?;
            }
        }
    }
    let a = ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| e.to_string())?;
    Ok(vec![restore(xt.dtype(), &a)?])
}

/// NegativeLogLikelihoodLoss, or SoftmaxCrossEntropyLoss with `softmax` (log-softmax over
/// the class axis first; its second output, when asked for, is that log-probability), as
/// the ONNX reference computes them: class weights gathered by target, ignored targets
/// weighing 0, and a weighted mean divided by the weights' sum.
fn nll_loss(node: &Node, inputs: &[Option<&Tensor>], softmax: bool) -> OpResult {
    let xt = input(inputs, 0)?;
    let x = xt.to_f64();
    let target = input(inputs, 1)?.to_i64().ok_or("target must be integers")?;
    let shape = x.shape().to_vec();
    if shape.len() < 2 || target.shape() != [&shape[..1], &shape[2..]].concat() {
        return Err(format!("input {shape:?} and target {:?} do not fit", target.shape()));
    }
    let (n, c) = (shape[0], shape[1]);
    let d: usize = shape[2..].iter().product();
    let mut logp = x.as_standard_layout().into_owned();
    if softmax {
        for mut lane in logp.lanes_mut(Axis(1)) {
            let m = lane.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + lane.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            lane.mapv_inplace(|v| v - lse);
        }
    }
    let lp = logp.as_slice().ok_or("layout")?;
    let ignore = node.attr_i("ignore_index");
    let weight = opt_input(inputs, 2).map(|w| w.to_f64().iter().copied().collect::<Vec<f64>>());
    // The reference keeps per-element weights unless there are no class weights and the
    // ignored index is -1 (NLL) or absent (softmax cross-entropy).
    let weighted = weight.is_some() || if softmax { ignore.is_some() } else { ignore != Some(-1) };
    let tg: Vec<i64> = target.iter().copied().collect();
    let mut loss = vec![0f64; n * d];
    let mut gw = vec![1f64; n * d];
    for i in 0..n {
        for k in 0..d {
            let t = tg[i * d + k];
            if Some(t) == ignore {
                gw[i * d + k] = 0.0;
                continue;
            }
            let cls = usize::try_from(t)
                .ok()
                .filter(|&t| t < c)
                .ok_or(format!("target {t} for {c} classes"))?;
            loss[i * d + k] = -lp[(i * c + cls) * d + k];
            if let Some(w) = &weight {
                gw[i * d + k] = *w.get(cls).ok_or("a weight per class")?;
            }
        }
    }
    if weighted {
        for (l, w) in loss.iter_mut().zip(&gw) {
            *l *= w;
        }
    }
    let reduction = node.attr_s("reduction").unwrap_or("mean");
    let out = match reduction {
        "none" => ArrayD::from_shape_vec(IxDyn(target.shape()), loss).map_err(|e| e.to_string())?,
        "sum" => ndarray::arr0(loss.iter().sum::<f64>()).into_dyn(),
        "mean" if weighted => ndarray::arr0(loss.iter().sum::<f64>() / gw.iter().sum::<f64>()).into_dyn(),
        "mean" => ndarray::arr0(loss.iter().sum::<f64>() / loss.len().max(1) as f64).into_dyn(),
        r => return Err(format!("reduction {r} (none, sum, mean)")),
    };
    let mut outs = vec![restore(xt.dtype(), &out)?];
    if softmax && node.outputs.len() > 1 {
        outs.push(restore(xt.dtype(), &logp)?);
    }
    Ok(outs)
}

/// ONNX Hardmax: 1 at the first maximum along `axis` (default −1), 0 elsewhere.
fn hardmax(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let xt = input(inputs, 0)?;
    let x = xt.to_f64();
    let axis = norm_axis(node.attr_i("axis").unwrap_or(-1), x.ndim())?;
    let mut out = ArrayD::<f64>::zeros(x.raw_dim());
    for (mut o, s) in out.lanes_mut(Axis(axis)).into_iter().zip(x.lanes(Axis(axis))) {
        let mut best = 0;
        for k in 1..s.len() {
            if s[k] > s[best] {
                best = k;
            }
        }
        if !s.is_empty() {
            o[best] = 1.0;
        }
    }
    Ok(vec![restore(xt.dtype(), &out)?])
}

/// ONNX LpNormalization: x / ‖x‖_p along `axis` (p 1 or 2).
fn lp_normalization(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let xt = input(inputs, 0)?;
    let x = xt.to_f64();
    let axis = norm_axis(node.attr_i("axis").unwrap_or(-1), x.ndim())?;
    let p = node.attr_i("p").unwrap_or(2);
    if p != 1 && p != 2 {
        return Err(format!("p = {p} (1 or 2)"));
    }
    let mut out = x.clone();
    for (mut o, s) in out.lanes_mut(Axis(axis)).into_iter().zip(x.lanes(Axis(axis))) {
        let norm = if p == 1 {
            s.iter().map(|v| v.abs()).sum::<f64>()
        } else {
            s.iter().map(|v| v * v).sum::<f64>().sqrt()
        };
        if norm != 0.0 {
            o.mapv_inplace(|v| v / norm);
        }
    }
    Ok(vec![restore(xt.dtype(), &out)?])
}

/// CumSum, or CumProd with `product`.
fn cumsum(node: &Node, inputs: &[Option<&Tensor>], product: bool) -> OpResult {
    let xt = input(inputs, 0)?;
    let x = xt.to_f64();
    let axis_v = input(inputs, 1)?
        .as_i64_vec()
        .and_then(|v| v.first().copied())
        .ok_or("axis must be an integer")?;
    let axis = norm_axis(axis_v, x.ndim())?;
    let exclusive = node.attr_i("exclusive").unwrap_or(0) != 0;
    let reverse = node.attr_i("reverse").unwrap_or(0) != 0;
    let mut out = x.clone();
    for (mut o, s) in out.lanes_mut(Axis(axis)).into_iter().zip(x.lanes(Axis(axis))) {
        let n = s.len();
        let mut acc = if product { 1.0 } else { 0.0 };
        let step = |acc: f64, v: f64| if product { acc * v } else { acc + v };
        for k in 0..n {
            let i = if reverse { n - 1 - k } else { k };
            if exclusive {
                o[i] = acc;
                acc = step(acc, s[i]);
            } else {
                acc = step(acc, s[i]);
                o[i] = acc;
            }
        }
    }
    Ok(vec![restore(xt.dtype(), &out)?])
}

/// Dispatches the NN family; `None` if `op` is not one of them.
pub fn eval(op: &str, node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Option<OpResult> {
    Some(match op {
        "BatchNormalization" => batch_norm(node, inputs),
        "InstanceNormalization" => instance_norm(node, inputs),
        "LayerNormalization" => layer_norm(node, inputs, false),
        "SimplifiedLayerNormalization" | "RMSNormalization" => layer_norm(node, inputs, true),
        "Softmax" => softmax(node, inputs, ctx, false),
        "LogSoftmax" => softmax(node, inputs, ctx, true),
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1" | "ReduceL2"
        | "ReduceSumSquare" | "ReduceLogSum" | "ReduceLogSumExp" => reduce(op, node, inputs, ctx),
        "ArgMax" => arg_reduce(node, inputs, true),
        "ArgMin" => arg_reduce(node, inputs, false),
        "CumSum" => cumsum(node, inputs, false),
        "CumProd" => cumsum(node, inputs, true),
        "Hardmax" => hardmax(node, inputs),
        "NegativeLogLikelihoodLoss" => nll_loss(node, inputs, false),
        "SoftmaxCrossEntropyLoss" => nll_loss(node, inputs, true),
        "LRN" => lrn(node, inputs),
        "GroupNormalization" => group_norm(node, inputs),
        "LpNormalization" => lp_normalization(node, inputs),
        _ => return None,
    })
}
