//! ONNX Attention (opset 23): scaled dot-product attention over 4-D (batch, heads,
//! sequence, head size) or 3-D (batch, sequence, hidden) Q, K, V, with a past key/value
//! cache, grouped-query heads, a boolean or additive mask, causal masking, a per-batch
//! count of valid keys, soft-capping and the optional Q·Kᵀ output, as the ONNX reference
//! computes them. Computed in f64, returned in Q's dtype. And RotaryEmbedding, the
//! position rotation of Q and K that precedes it in LLM exports.

use super::quant::cast_f64;
use super::{OpResult, input, opt_input};
use crate::ir::{Node, Tensor};
use ndarray::{Array4, ArrayD, Axis, IxDyn, s};

/// `t` as (batch, heads, sequence, head size): 4-D as it is, 3-D split into `heads`.
fn heads(t: &Tensor, n: Option<i64>, what: &str) -> Result<Array4<f64>, String> {
    let a = t.to_f64();
    match a.ndim() {
        4 => a.into_dimensionality().map_err(|e| e.to_string()),
        3 => {
            let n = usize::try_from(n.ok_or(format!("3-D {what} needs its number of heads"))?)
                .map_err(|_| "negative head count")?;
            let (b, sq, hidden) = (a.shape()[0], a.shape()[1], a.shape()[2]);
            if n == 0 || hidden % n != 0 {
                return Err(format!("{what}: hidden size {hidden} over {n} heads"));
            }
            let r = a
                .into_shape_with_order(IxDyn(&[b, sq, n, hidden / n]))
                .map_err(|e| e.to_string())?
                .permuted_axes(IxDyn(&[0, 2, 1, 3]));
            r.as_standard_layout()
                .into_owned()
                .into_dimensionality()
                .map_err(|e| e.to_string())
        }
        r => Err(format!("{what} has rank {r} (3 or 4)")),
    }
}

/// The additive bias a mask gives: bool true → 0, false → −∞; floats as they are.
fn mask_bias(m: &Tensor) -> ArrayD<f64> {
    match m {
        Tensor::Bool(a) => a.mapv(|v| if v { 0.0 } else { f64::NEG_INFINITY }),
        other => other.to_f64(),
    }
}

fn attention(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let (qt, kt, vt) = (input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?);
    let three_d = qt.shape().len() == 3;
    let q_heads = node.attr_i("q_num_heads");
    let kv_heads = node.attr_i("kv_num_heads");
    let q = heads(qt, q_heads, "Q")?;
    let mut k = heads(kt, kv_heads, "K")?;
    let mut v = heads(vt, kv_heads, "V")?;
    let (b, hq, sq, d) = q.dim();
    let scale = node.attr_f("scale").map_or(1.0 / (d as f64).sqrt(), f64::from);
    let past = opt_input(inputs, 4).map_or(0, |p| p.shape().get(2).copied().unwrap_or(0));
    if let Some(p) = opt_input(inputs, 4) {
        let p: Array4<f64> = p.to_f64().into_dimensionality().map_err(|e| e.to_string())?;
        k = ndarray::concatenate(Axis(2), &[p.view(), k.view()]).map_err(|e| e.to_string())?;
    }
    if let Some(p) = opt_input(inputs, 5) {
        let p: Array4<f64> = p.to_f64().into_dimensionality().map_err(|e| e.to_string())?;
        v = ndarray::concatenate(Axis(2), &[p.view(), v.view()]).map_err(|e| e.to_string())?;
    }
    let (kb, hk, skv, dk) = k.dim();
    let dv = v.dim().3;
    if kb != b || dk != d || v.dim().2 != skv || v.dim().1 != hk || hk == 0 || hq % hk != 0 {
        return Err(format!(
            "Q {:?}, K {:?}, V {:?} do not fit together",
            q.dim(),
            k.dim(),
            v.dim()
        ));
    }
    let group = hq / hk;
    // The bias over (batch, heads, query, key): the mask (padded with −∞ to the keys),
    // causal masking, and the count of valid keys per batch.
    let mut bias = Array4::<f64>::zeros((b, hq, sq, skv));
    if let Some(m) = opt_input(inputs, 3) {
        let mb = mask_bias(m);
        let w = *mb.shape().last().ok_or("a scalar mask")?;
        let mut padded_shape = mb.shape().to_vec();
        *padded_shape.last_mut().ok_or("mask")? = skv;
        let mut padded = ArrayD::from_elem(IxDyn(&padded_shape), f64::NEG_INFINITY);
        padded
            .slice_axis_mut(Axis(mb.ndim() - 1), (0..w.min(skv)).into())
            .assign(&mb.slice_axis(Axis(mb.ndim() - 1), (0..w.min(skv)).into()));
        let bc = padded
            .broadcast(IxDyn(&[b, hq, sq, skv]))
            .ok_or_else(|| format!("a mask of shape {:?} for scores {:?}", mb.shape(), [b, hq, sq, skv]))?
            .to_owned();
        bias += &bc.into_dimensionality::<ndarray::Ix4>().map_err(|e| e.to_string())?;
    }
    if node.attr_i("is_causal").unwrap_or(0) != 0 {
        for ((_, _, i, j), x) in bias.indexed_iter_mut() {
            if j > i + past {
                *x = f64::NEG_INFINITY;
            }
        }
    }
    if let Some(n) = opt_input(inputs, 6) {
        let lens = n.as_i64_vec().ok_or("nonpad_kv_seqlen must be integers")?;
        for ((bi, _, _, j), x) in bias.indexed_iter_mut() {
            if (j as i64) >= *lens.get(bi).ok_or("a length per batch")? {
                *x = f64::NEG_INFINITY;
            }
        }
    }
    let softcap = f64::from(node.attr_f("softcap").unwrap_or(0.0));
    let mode = node.attr_i("qk_matmul_output_mode").unwrap_or(0);
    let root = scale.sqrt();
    let mut qk = Array4::<f64>::zeros((b, hq, sq, skv));
    let mut y = Array4::<f64>::zeros((b, hq, sq, dv));
    let mut probs = Array4::<f64>::zeros((b, hq, sq, skv));
    for bi in 0..b {
        for h in 0..hq {
            let (qh, kh, vh) = (
                q.slice(s![bi, h, .., ..]),
                k.slice(s![bi, h / group, .., ..]),
                v.slice(s![bi, h / group, .., ..]),
            );
            for i in 0..sq {
                let mut row = vec![0f64; skv];
                for (j, r) in row.iter_mut().enumerate() {
                    let mut acc = 0.0;
                    for c in 0..d {
                        acc += (qh[[i, c]] * root) * (kh[[j, c]] * root);
                    }
                    if softcap > 0.0 {
                        acc = (acc / softcap).tanh() * softcap;
                    }
                    qk[[bi, h, i, j]] = acc;
                    *r = acc + bias[[bi, h, i, j]];
                }
                if mode == 2 {
                    for (j, &r) in row.iter().enumerate() {
                        qk[[bi, h, i, j]] = r;
                    }
                }
                let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = row.iter().map(|&r| (r - m).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (j, &ej) in e.iter().enumerate() {
                    probs[[bi, h, i, j]] = ej / sum;
                }
                for c in 0..dv {
                    y[[bi, h, i, c]] = (0..skv).map(|j| probs[[bi, h, i, j]] * vh[[j, c]]).sum();
                }
            }
        }
    }
    if mode == 3 {
        qk = probs;
    }
    let dt = qt.dtype();
    let y = if three_d {
        y.permuted_axes([0, 2, 1, 3])
            .as_standard_layout()
            .into_owned()
            .into_shape_with_order(IxDyn(&[b, sq, hq * dv]))
            .map_err(|e| e.to_string())?
    } else {
        y.into_dyn()
    };
    let mut outs = vec![
        cast_f64(&y, dt)?,
        cast_f64(&k.into_dyn(), kt.dtype())?,
        cast_f64(&v.into_dyn(), vt.dtype())?,
        cast_f64(&qk.into_dyn(), dt)?,
    ];
    outs.truncate(node.outputs.len().max(1));
    Ok(outs)
}

/// ONNX RotaryEmbedding (opset 23): the first `rotary_embedding_dim` of each head's
/// features rotated by the cached cos/sin of its position (halves, or interleaved pairs).
fn rotary(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let xt = input(inputs, 0)?;
    let x = xt.to_f64();
    let (cos, sin) = (input(inputs, 1)?.to_f64(), input(inputs, 2)?.to_f64());
    let pos = opt_input(inputs, 3)
        .map(|p| p.to_i64().ok_or("position_ids must be integers"))
        .transpose()?;
    let interleaved = node.attr_i("interleaved").unwrap_or(0) != 0;
    // As (batch, sequence, heads, head size).
    let (b, sq, h, d, four) = match *x.shape() {
        [b, h, sq, d] => (b, sq, h, d, true),
        [b, sq, hidden] => {
            let h = usize::try_from(node.attr_i("num_heads").ok_or("3-D input needs num_heads")?)
                .map_err(|_| "negative num_heads")?;
            if h == 0 || hidden % h != 0 {
                return Err(format!("hidden size {hidden} over {h} heads"));
            }
            (b, sq, h, hidden / h, false)
        }
        _ => return Err(format!("input of shape {:?} (3-D or 4-D)", x.shape())),
    };
    let rot = match node.attr_i("rotary_embedding_dim").unwrap_or(0) {
        0 => d,
        r => usize::try_from(r).map_err(|_| "negative rotary_embedding_dim")?.min(d),
    };
    let half = rot / 2;
    let xs = x.as_standard_layout();
    let xd = xs.as_slice().ok_or("layout")?;
    let at = |bi: usize, si: usize, hi: usize, c: usize| {
        if four {
            ((bi * h + hi) * sq + si) * d + c
        } else {
            ((bi * sq + si) * h + hi) * d + c
        }
    };
    let cache = |t: &ArrayD<f64>, bi: usize, si: usize, i: usize| -> Result<f64, String> {
        let v = match &pos {
            Some(p) => {
                let row = usize::try_from(p[[bi, si]]).map_err(|_| "negative position")?;
                t.get(IxDyn(&[row, i]))
            }
            None => t.get(IxDyn(&[bi, si, i])),
        };
        v.copied()
            .ok_or_else(|| format!("the cos/sin cache {:?} has no entry there", t.shape()))
    };
    let mut out = xd.to_vec();
    for bi in 0..b {
        for si in 0..sq {
            for hi in 0..h {
                for i in 0..half {
                    let (j1, j2) = if interleaved { (2 * i, 2 * i + 1) } else { (i, i + half) };
                    let (x1, x2) = (xd[at(bi, si, hi, j1)], xd[at(bi, si, hi, j2)]);
                    let (c, s) = (cache(&cos, bi, si, i)?, cache(&sin, bi, si, i)?);
                    out[at(bi, si, hi, j1)] = c * x1 - s * x2;
                    out[at(bi, si, hi, j2)] = s * x1 + c * x2;
                }
            }
        }
    }
    let a = ArrayD::from_shape_vec(IxDyn(x.shape()), out).map_err(|e| e.to_string())?;
    Ok(vec![cast_f64(&a, xt.dtype())?])
}

/// Dispatches Attention and RotaryEmbedding; `None` for other ops.
pub fn eval(op: &str, node: &Node, inputs: &[Option<&Tensor>]) -> Option<OpResult> {
    match op {
        "Attention" => Some(attention(node, inputs)),
        "RotaryEmbedding" => Some(rotary(node, inputs)),
        _ => None,
    }
}
