//! One integer kernel per op, each the arithmetic of LiteRT's reference kernel
//! (`tflite/kernels/internal/reference/...`), in the graph's layout (NCHW).

use super::fixed::{
    downscale_to_i16, exp_on_negative_values_5, get_reciprocal, inv_sqrt_multiplier, mbqm, mbqm64, quantize_multiplier,
    rdbpot, rdbpot16, sat_shl16, sdhm16, srdhm, srdhm16,
};
use crate::program::{Act, BinaryFn, FloatOp, PadMode, QParams, ReduceFn, UnaryFn};
use rayon::prelude::*;

/// TFLite's `CalculateActivationRangeQuantized`: `Q(f) = zp + (int) roundf(f / s)`.
pub fn act_range(act: Act, q: &QParams) -> (i32, i32) {
    let (lo, hi) = q.ty.range();
    let quant = |f: f32| q.zp() + (f / q.s()).round() as i32;
    match act {
        Act::None => (lo, hi),
        Act::Relu => (lo.max(quant(0.0)), hi),
        Act::Relu6 => (lo.max(quant(0.0)), hi.min(quant(6.0))),
        Act::ReluN1To1 => (lo.max(quant(-1.0)), hi.min(quant(1.0))),
    }
}

/// Shapes of a 2-D convolution in NCHW / OIHW.
pub struct ConvGeom {
    pub x: [usize; 4],
    pub w: [usize; 4],
    /// Output height and width.
    pub y: [usize; 2],
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    /// Padding before (top, left); taps outside the input are skipped.
    pub pads: [usize; 2],
    pub groups: usize,
}

/// CONV_2D / DEPTHWISE_CONV_2D int8 (per-channel): `acc = Σ w·(x − zp_in) + bias` in
/// wrapping int32, `M(acc) + zp_out`, clamped. Depthwise is the grouped form with one group
/// per input channel (its filter zero point is 0, so both read the same). With `wide` (16×8:
/// int16 inputs, int64 bias) the accumulator is int64 and requantization the int64 `M`.
pub fn conv2d(
    g: &ConvGeom,
    x: &[i32],
    w: &[i32],
    bias: &[i64],
    wide: bool,
    zp_in: i32,
    zp_out: i32,
    mults: &[(i32, i32)],
    (lo, hi): (i32, i32),
) -> Vec<i32> {
    let [n, c, h, wd] = g.x;
    let [o, cg, kh, kw] = g.w;
    let [oh, ow] = g.y;
    let groups = g.groups.max(1);
    let per_group = (o / groups).max(1);
    let plane = oh * ow;
    let mut y = vec![0i32; n * o * plane];
    y.par_chunks_mut(plane).enumerate().for_each(|(nc, out)| {
        let (b, oc) = (nc / o, nc % o);
        let group = oc / per_group;
        let (q, s) = mults[oc % mults.len()];
        let wbase = oc * cg * kh * kw;
        for oy in 0..oh {
            for ox in 0..ow {
                let mut acc: i64 = 0;
                for ic in 0..cg {
                    let chan = group * cg + ic;
                    if chan >= c {
                        continue;
                    }
                    let xbase = (b * c + chan) * h * wd;
                    for ky in 0..kh {
                        let iy = (oy * g.strides[0] + ky * g.dilations[0]) as isize - g.pads[0] as isize;
                        if iy < 0 || iy >= h as isize {
                            continue;
                        }
                        for kx in 0..kw {
                            let ix = (ox * g.strides[1] + kx * g.dilations[1]) as isize - g.pads[1] as isize;
                            if ix < 0 || ix >= wd as isize {
                                continue;
                            }
                            let xv = x[xbase + iy as usize * wd + ix as usize] - zp_in;
                            acc += i64::from(w[wbase + (ic * kh + ky) * kw + kx]) * i64::from(xv);
                        }
                    }
                }
                let b = bias.get(oc).copied().unwrap_or(0);
                out[oy * ow + ox] = requant_acc(acc, b, wide, q, s).wrapping_add(zp_out).clamp(lo, hi);
            }
        }
    });
    y
}

/// `M(acc + bias)`: int32 wrapping and the int32 `M` (int8), or int64 and the int64 `M`
/// (16×8).
#[inline]
fn requant_acc(acc: i64, bias: i64, wide: bool, q: i32, s: i32) -> i32 {
    if wide {
        mbqm64(acc + bias, q, s)
    } else {
        mbqm((acc as i32).wrapping_add(bias as i32), q, s)
    }
}

/// FULLY_CONNECTED (reference kernel): the accumulator (int32 wrapping; int64 under 16×8),
/// then requantization in double, `round(acc · s_in·s_w/s_out)` half away from zero.
pub fn fully_connected(
    x: &[i32],
    w: &[i32],
    bias: &[i64],
    wide: bool,
    n: usize,
    k: usize,
    zp_in: i32,
    zp_out: i32,
    eff: &[f64],
    (lo, hi): (i32, i32),
) -> Vec<i32> {
    let batches = x.len() / k.max(1);
    let mut y = vec![0i32; batches * n];
    y.par_chunks_mut(n.max(1)).enumerate().for_each(|(bi, out)| {
        let row = &x[bi * k..(bi + 1) * k];
        for (j, o) in out.iter_mut().enumerate() {
            let wr = &w[j * k..(j + 1) * k];
            let mut acc: i64 = 0;
            for (a, b) in row.iter().zip(wr) {
                acc += i64::from(*b) * i64::from(a - zp_in);
            }
            let b = bias.get(j).copied().unwrap_or(0);
            let acc = if wide {
                (acc + b) as f64
            } else {
                f64::from((acc as i32).wrapping_add(b as i32))
            };
            let e = eff[j % eff.len()];
            let v = (acc * e).round().clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32;
            *o = v.saturating_add(zp_out).clamp(lo, hi);
        }
    });
    y
}

/// ADD/SUB int8 parameters (`add.cc`'s Prepare, left shift 20).
pub struct AddParams {
    za: i32,
    zb: i32,
    zy: i32,
    qa: (i32, i32),
    qb: (i32, i32),
    qy: (i32, i32),
    range: (i32, i32),
    shift: i32,
}

impl AddParams {
    /// `add.cc`'s Prepare: left shift 20 for int8, 15 for int16's general path.
    pub fn new(a: &QParams, b: &QParams, y: &QParams, range: (i32, i32)) -> Self {
        let shift = if y.ty == crate::program::IntType::I16 { 15 } else { 20 };
        let twice_max = 2.0 * a.s().max(b.s());
        let ra = f64::from(a.s()) / f64::from(twice_max);
        let rb = f64::from(b.s()) / f64::from(twice_max);
        let ry = f64::from(twice_max) / f64::from((1 << shift) as f32 * y.s());
        Self {
            za: a.zp(),
            zb: b.zp(),
            zy: y.zp(),
            qa: quantize_multiplier(ra),
            qb: quantize_multiplier(rb),
            qy: quantize_multiplier(ry),
            range,
            shift,
        }
    }

    #[inline]
    pub fn apply(&self, a: i32, b: i32, sub: bool) -> i32 {
        let sa = mbqm((a - self.za) << self.shift, self.qa.0, self.qa.1);
        let sb = mbqm((b - self.zb) << self.shift, self.qb.0, self.qb.1);
        let raw = if sub { sa - sb } else { sa + sb };
        (mbqm(raw, self.qy.0, self.qy.1) + self.zy).clamp(self.range.0, self.range.1)
    }
}

/// Row-major strides of `shape` aligned to `rank` dims, 0 where the dim broadcasts.
fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let rank = out.len();
    let mut st = vec![0usize; rank];
    let mut acc = 1;
    for i in (0..shape.len()).rev() {
        let d = shape[i];
        let oi = rank - shape.len() + i;
        st[oi] = if d == 1 && out[oi] != 1 { 0 } else { acc };
        acc *= d;
    }
    st
}

/// A binary element-wise op with NumPy broadcasting.
pub fn broadcast2(
    a: &[i32],
    sa: &[usize],
    b: &[i32],
    sb: &[usize],
    out: &[usize],
    f: impl Fn(i32, i32) -> i32 + Sync,
) -> Result<Vec<i32>, String> {
    if sa.len() > out.len() || sb.len() > out.len() {
        return Err(format!("cannot broadcast {sa:?} and {sb:?} to {out:?}"));
    }
    let total: usize = out.iter().product();
    if a.len() == total && b.len() == total {
        return Ok(a.par_iter().zip(b).map(|(&x, &y)| f(x, y)).collect());
    }
    let (ta, tb) = (broadcast_strides(sa, out), broadcast_strides(sb, out));
    // Dims of one broadcast pattern merged, so the innermost run is as long as it can be.
    let mut dims: Vec<(usize, usize, usize)> = Vec::new();
    for d in 0..out.len() {
        if out[d] == 1 {
            continue;
        }
        match dims.last_mut() {
            // Contiguous with the inner dim in both operands (both broadcast: 0 = 0·n).
            Some(l) if l.1 == ta[d] * out[d] && l.2 == tb[d] * out[d] => {
                l.0 *= out[d];
                l.1 = ta[d];
                l.2 = tb[d];
            }
            _ => dims.push((out[d], ta[d], tb[d])),
        }
    }
    let (inner, ia_step, ib_step) = dims.pop().unwrap_or((1, 0, 0));
    if total == 0 {
        return Ok(Vec::new());
    }
    let mut y = vec![0i32; total];
    y.par_chunks_mut(inner).enumerate().for_each(|(row, o)| {
        let (mut r, mut ia, mut ib) = (row, 0, 0);
        for &(n, sa, sb) in dims.iter().rev() {
            let idx = r % n;
            r /= n;
            ia += idx * sa;
            ib += idx * sb;
        }
        for (e, v) in o.iter_mut().enumerate() {
            *v = f(a[ia + e * ia_step], b[ib + e * ib_step]);
        }
    });
    Ok(y)
}

pub fn mean(x: &[i32], shape: &[usize], axes: &[usize], xq: &QParams, yq: &QParams) -> Vec<i32> {
    let rank = shape.len();
    let reduced = |d: usize| axes.contains(&d);
    let out_shape: Vec<usize> = (0..rank).map(|d| if reduced(d) { 1 } else { shape[d] }).collect();
    let total_out: usize = out_shape.iter().product();
    let n: usize = axes.iter().map(|&a| shape.get(a).copied().unwrap_or(1)).product();
    let mut sums = vec![0i32; total_out];
    let ost = broadcast_strides(&out_shape, shape);
    // Trailing axes reduced: each sum is one contiguous run.
    let trailing = n > 0 && x.len() == total_out * n && (0..rank).filter(|d| reduced(*d)).eq(rank - axes.len()..rank);
    if trailing {
        for (s, run) in sums.iter_mut().zip(x.chunks(n)) {
            *s = run.iter().fold(0i32, |a, &v| a.wrapping_add(v));
        }
    } else {
        for (i, &v) in x.iter().enumerate() {
            let (mut r, mut oi) = (i, 0);
            for d in (0..rank).rev() {
                let idx = r % shape[d];
                r /= shape[d];
                oi += idx * ost[d];
            }
            sums[oi] = sums[oi].wrapping_add(v);
        }
    }
    let (mut q, mut s) = quantize_multiplier(f64::from(xq.s()) / f64::from(yq.s()));
    let n64 = n.max(1) as i64;
    let mut shift = 63 - (n64 as u64).leading_zeros() as i32;
    shift = shift.min(32).min(31 + s);
    q = ((i64::from(q) << shift) / n64) as i32;
    s -= shift;
    let (lo, hi) = yq.ty.range();
    sums.iter()
        .map(|&sum| {
            let shifted = sum.wrapping_sub(xq.zp().wrapping_mul(n as i32));
            (mbqm(shifted, q, s) + yq.zp()).clamp(lo, hi)
        })
        .collect()
}

/// MAX_POOL_2D / AVERAGE_POOL_2D int8 in NCHW: taps outside the input are skipped; the
/// average rounds half away from zero over the in-bounds count.
pub fn pool(
    x: &[i32],
    xs: &[usize],
    ys: &[usize],
    k: [usize; 2],
    s: [usize; 2],
    pads: [usize; 2],
    (lo, hi): (i32, i32),
    max: bool,
) -> Vec<i32> {
    let (h, w) = (xs[2], xs[3]);
    let (oh, ow) = (ys[2], ys[3]);
    let planes = xs[0] * xs[1];
    let mut y = vec![0i32; planes * oh * ow];
    y.par_chunks_mut((oh * ow).max(1)).enumerate().for_each(|(p, out)| {
        let xp = &x[p * h * w..(p + 1) * h * w];
        for oy in 0..oh {
            for ox in 0..ow {
                let (mut acc, mut cnt, mut m) = (0i32, 0i32, i32::MIN);
                for ky in 0..k[0] {
                    let iy = (oy * s[0] + ky) as isize - pads[0] as isize;
                    if iy < 0 || iy >= h as isize {
                        continue;
                    }
                    for kx in 0..k[1] {
                        let ix = (ox * s[1] + kx) as isize - pads[1] as isize;
                        if ix < 0 || ix >= w as isize {
                            continue;
                        }
                        let v = xp[iy as usize * w + ix as usize];
                        acc += v;
                        cnt += 1;
                        m = m.max(v);
                    }
                }
                out[oy * ow + ox] = if max {
                    m.clamp(lo, hi)
                } else if cnt == 0 {
                    0
                } else {
                    let avg = if acc > 0 {
                        (acc + cnt / 2) / cnt
                    } else {
                        (acc - cnt / 2) / cnt
                    };
                    avg.clamp(lo, hi)
                };
            }
        }
    });
    y
}

/// HARD_SWISH int8 (`reference_ops::HardSwish`): int16 fixed point.
pub struct HardSwish {
    zp_in: i32,
    zp_out: i32,
    out_mult: i16,
    out_exp: i32,
    relu_mult: i16,
    relu_exp: i32,
    range: (i32, i32),
}

impl HardSwish {
    pub fn new(x: &QParams, y: &QParams) -> Result<Self, String> {
        let hires = (1.0f32 / 128.0) * x.s();
        let (oq, oe) = quantize_multiplier(f64::from(hires / y.s()));
        let (rq, re) = quantize_multiplier(f64::from(hires / (3.0f32 / 32768.0)));
        if oe > 0 {
            return Err(format!(
                "the input scale / 128 ({}) must be below the output scale ({})",
                x.s() / 128.0,
                y.s()
            ));
        }
        Ok(Self {
            zp_in: x.zp(),
            zp_out: y.zp(),
            out_mult: downscale_to_i16(oq),
            out_exp: oe,
            relu_mult: downscale_to_i16(rq),
            relu_exp: re,
            range: y.ty.range(),
        })
    }

    #[inline]
    pub fn apply(&self, a: i32) -> i32 {
        let input = (a - self.zp_in) as i16;
        let hires = input.wrapping_mul(1 << 7);
        let preshift = srdhm16(hires, self.out_mult);
        let mut r = hires;
        if self.relu_exp > 0 {
            r = sat_shl16(r, self.relu_exp - 1);
        }
        r = srdhm16(r, self.relu_mult);
        if self.relu_exp > 0 {
            r = sat_shl16(r, 1);
        }
        if self.relu_exp < 0 {
            r = rdbpot16(r, -self.relu_exp);
        }
        let r = ((i32::from(r) + (1 << 15)) >> 1) as i16;
        let p = sdhm16(r, preshift);
        let out = i32::from(rdbpot16(p, -self.out_exp)) + self.zp_out;
        out.clamp(self.range.0, self.range.1)
    }
}

/// LOGISTIC / TANH int8 table (`LUTPopulateInt8`, float32 with libm's expf/tanhf).
pub fn lut_int8(x: &QParams, y: &QParams, tanh: bool) -> [i32; 256] {
    if tanh {
        lut_int8_with(x, y, f32::tanh)
    } else {
        lut_int8_with(x, y, |d| 1.0f32 / (1.0f32 + (-d).exp()))
    }
}

/// `LUTPopulateInt8` for any function: for each code, `f(s_in·(v − zp_in))` in float32,
/// `roundf(f · (1/s_out)) + zp_out`, saturated.
pub fn lut_int8_with(x: &QParams, y: &QParams, f: impl Fn(f32) -> f32) -> [i32; 256] {
    let inv = 1.0f32 / y.s();
    let mut t = [0i32; 256];
    for (i, slot) in t.iter_mut().enumerate() {
        let v = i as i32 - 128;
        let d = x.s() * (v - x.zp()) as f32;
        let r = (f(d) * inv).round();
        *slot = ((r + y.zp() as f32) as i32).clamp(-128, 127);
    }
    t
}

/// SOFTMAX int8 (`reference_ops::Softmax<int8, int8>`, gemmlowp fixed point), rows of
/// `depth` over the last axis; output on (1/256, −128).
pub fn softmax(x: &[i32], depth: usize, beta: f32, in_scale: f32) -> Vec<i32> {
    let real = (f64::from(beta) * f64::from(in_scale) * f64::from(1u32 << 26)).min(f64::from(i32::MAX));
    let (mult, lshift) = quantize_multiplier(real);
    let radius = (31.0 * f64::from(1u32 << 26) / 2f64.powi(lshift)).floor();
    let diff_min = -radius;
    x.par_chunks(depth)
        .flat_map_iter(|row| {
            let mx = row.iter().copied().max().unwrap_or(0);
            let mut sum: i32 = 0;
            let exps: Vec<Option<i32>> = row
                .iter()
                .map(|&v| {
                    let d = v - mx;
                    if f64::from(d) >= diff_min {
                        let z = srdhm(d.wrapping_mul(1 << lshift), mult);
                        let e = exp_on_negative_values_5(z);
                        sum = sum.wrapping_add(rdbpot(e, 12));
                        Some(e)
                    } else {
                        None
                    }
                })
                .collect();
            let (recip, nbits) = get_reciprocal(sum, 12);
            let exponent = nbits + 31 - 8;
            exps.into_iter()
                .map(move |e| match e {
                    Some(e) => (rdbpot(srdhm(recip, e), exponent) - 128).clamp(-128, 127),
                    None => -128,
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Row-major transpose.
pub fn transpose<T: Copy>(x: &[T], shape: &[usize], perm: &[usize]) -> Vec<T> {
    let rank = shape.len();
    let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let mut st = vec![1usize; rank];
    for d in (0..rank.saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1];
    }
    let total: usize = out.iter().product();
    (0..total)
        .map(|i| {
            let (mut r, mut src) = (i, 0);
            for d in (0..rank).rev() {
                let idx = r % out[d];
                r /= out[d];
                src += idx * st[perm[d]];
            }
            x[src]
        })
        .collect()
}

/// Concatenation along `axis` (a raw copy: every input is on the output's grid).
pub fn concat(parts: &[(&[i32], &[usize])], axis: usize) -> Vec<i32> {
    let outer: usize = parts.first().map_or(1, |p| p.1[..axis].iter().product());
    let mut y = Vec::with_capacity(parts.iter().map(|p| p.0.len()).sum());
    for o in 0..outer {
        for (data, shape) in parts {
            let inner: usize = shape[axis..].iter().product();
            y.extend_from_slice(&data[o * inner..(o + 1) * inner]);
        }
    }
    y
}

/// TRANSPOSE_CONV int8 (`reference_integer_ops::TransposeConv`, no padding): the scatter
/// of `(x − zp_in)·w` into an int32 buffer, then bias, `M(acc)` per channel, `+ zp_out`.
pub fn transpose_conv(
    x: &[i32],
    xs: [usize; 4],
    w: &[i32],
    ws: [usize; 4],
    bias: &[i64],
    wide: bool,
    ys: [usize; 2],
    strides: [usize; 2],
    zp_in: i32,
    zp_out: i32,
    mults: &[(i32, i32)],
    (lo, hi): (i32, i32),
) -> Vec<i32> {
    let [n, ci, h, wd] = xs;
    let [co, _, kh, kw] = ws;
    let [oh, ow] = ys;
    let mut y = vec![0i32; n * co * oh * ow];
    y.par_chunks_mut(oh * ow).enumerate().for_each(|(bo, out)| {
        let (b, oc) = (bo / co, bo % co);
        let mut acc = vec![0i64; oh * ow];
        for ic in 0..ci {
            let xp = &x[(b * ci + ic) * h * wd..(b * ci + ic + 1) * h * wd];
            let wp = &w[(oc * ci + ic) * kh * kw..(oc * ci + ic + 1) * kh * kw];
            for iy in 0..h {
                for ix in 0..wd {
                    let xv = xp[iy * wd + ix] - zp_in;
                    for ky in 0..kh {
                        let oy = iy * strides[0] + ky;
                        if oy >= oh {
                            continue;
                        }
                        for kx in 0..kw {
                            let ox = ix * strides[1] + kx;
                            if ox < ow {
                                acc[oy * ow + ox] += i64::from(xv) * i64::from(wp[ky * kw + kx]);
                            }
                        }
                    }
                }
            }
        }
        let (q, s) = mults[oc % mults.len()];
        let bv = bias.get(oc).copied().unwrap_or(0);
        for (o, a) in out.iter_mut().zip(acc) {
            *o = requant_acc(a, bv, wide, q, s).wrapping_add(zp_out).clamp(lo, hi);
        }
    });
    y
}

/// RESIZE_NEAREST_NEIGHBOR (no corner alignment, no half-pixel centres) in NCHW: output
/// index `o` reads `min(floor(o · in/out), in − 1)` in float32.
pub fn resize_nearest(x: &[i32], xs: &[usize], ys: &[usize]) -> Vec<i32> {
    let (h, w, oh, ow) = (xs[2], xs[3], ys[2], ys[3]);
    let src = nearest_source;
    let planes = xs[0] * xs[1];
    let mut y = Vec::with_capacity(planes * oh * ow);
    for p in 0..planes {
        for oy in 0..oh {
            let iy = src(oy, h, oh);
            for ox in 0..ow {
                y.push(x[(p * h + iy) * w + src(ox, w, ow)]);
            }
        }
    }
    y
}

/// The input index RESIZE_NEAREST_NEIGHBOR reads for output index `o` along an axis of
/// `i` inputs and `n` outputs: `min(floor(o · (i / n)), i − 1)` in float32.
pub fn nearest_source(o: usize, i: usize, n: usize) -> usize {
    (((o as f32) * (i as f32 / n as f32)).floor() as usize).min(i.saturating_sub(1))
}

/// BATCH_MATMUL int8 (`reference_ops::BatchMatMul`): `a` `[.., M, K]` times `b`
/// `[.., K, N]` with broadcast batch dims, `Σ (a − zp_a)(b − zp_b)` in wrapping int32,
/// `M(acc) + zp_out`, clamped. The multiplier is `f32(s_a·s_b) / s_out` in double.
pub fn batch_matmul(
    a: &[i32],
    sa: &[usize],
    b: &[i32],
    sb: &[usize],
    zps: (i32, i32, i32),
    (q, s): (i32, i32),
    (lo, hi): (i32, i32),
    wide: bool,
) -> Result<(Vec<i32>, Vec<usize>), String> {
    let (ra, rb) = (sa.len(), sb.len());
    if ra < 2 || rb < 2 {
        return Err("batch matmul needs rank ≥ 2 operands".into());
    }
    let (m, k) = (sa[ra - 2], sa[ra - 1]);
    let (k2, n) = (sb[rb - 2], sb[rb - 1]);
    if k != k2 {
        return Err(format!("inner dims differ: {sa:?} × {sb:?}"));
    }
    let (ba, bb) = (&sa[..ra - 2], &sb[..rb - 2]);
    let rank = ba.len().max(bb.len());
    let pad = |s: &[usize]| -> Vec<usize> {
        let mut v = vec![1; rank - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (pa, pb) = (pad(ba), pad(bb));
    let mut batch = Vec::with_capacity(rank);
    for (&x, &y) in pa.iter().zip(&pb) {
        if x != y && x != 1 && y != 1 {
            return Err(format!("batch dims do not broadcast: {sa:?} × {sb:?}"));
        }
        batch.push(x.max(y));
    }
    let total: usize = batch.iter().product();
    let (za, zb, zy) = zps;
    let mut y = vec![0i32; total * m * n];
    y.par_chunks_mut((m * n).max(1)).enumerate().for_each(|(bi, out)| {
        // The batch index in each operand (broadcast dims read index 0).
        let (mut r, mut ia, mut ib, mut sta, mut stb) = (bi, 0, 0, 1, 1);
        for d in (0..rank).rev() {
            let idx = r % batch[d];
            r /= batch[d];
            if pa[d] != 1 {
                ia += idx * sta;
            }
            if pb[d] != 1 {
                ib += idx * stb;
            }
            sta *= pa[d];
            stb *= pb[d];
        }
        let am = &a[ia * m * k..(ia + 1) * m * k];
        let bm = &b[ib * k * n..(ib + 1) * k * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc: i64 = 0;
                for t in 0..k {
                    acc += i64::from(am[i * k + t] - za) * i64::from(bm[t * n + j] - zb);
                }
                out[i * n + j] = requant_acc(acc, 0, wide, q, s).wrapping_add(zy).clamp(lo, hi);
            }
        }
    });
    let mut shape = batch;
    shape.extend([m, n]);
    Ok((y, shape))
}

/// GATHER: the slices of `x` along `axis` at `indices`, each in `[0, shape[axis])` (an index
/// outside it is an error, as in LiteRT's kernel).
pub fn gather(x: &[i32], shape: &[usize], axis: usize, indices: &[i32]) -> Result<Vec<i32>, String> {
    let dim = shape[axis];
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut y = Vec::with_capacity(outer * indices.len() * inner);
    for o in 0..outer {
        for &i in indices {
            let k = usize::try_from(i)
                .ok()
                .filter(|&k| k < dim)
                .ok_or_else(|| format!("index {i} is out of range for axis {axis} of {dim}"))?;
            let at = (o * dim + k) * inner;
            y.extend_from_slice(&x[at..at + inner]);
        }
    }
    Ok(y)
}

/// ARG_MAX / ARG_MIN (`arg_min_max.h`): along `axis`, the index of the first code that
/// beats every earlier one (`std::greater` / `std::less`: ties keep the first).
pub fn arg_extreme(x: &[i32], shape: &[usize], axis: usize, which: crate::program::Extreme) -> Vec<i32> {
    let dim = shape[axis].max(1);
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let beats = |a: i32, b: i32| match which {
        crate::program::Extreme::Max => a > b,
        crate::program::Extreme::Min => a < b,
    };
    let mut y = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| x[(o * dim + k) * inner + i];
            let (mut best, mut index) = (at(0), 0);
            for k in 1..dim {
                if beats(at(k), best) {
                    (best, index) = (at(k), k);
                }
            }
            y.push(index as i32);
        }
    }
    y
}

/// A strided copy (SLICE / STRIDED_SLICE): per listed axis the first index, the count and
/// the step; other axes whole.
pub fn slice(x: &[i32], shape: &[usize], axes: &[crate::program::SliceAxis]) -> Vec<i32> {
    let rank = shape.len();
    let mut first = vec![0isize; rank];
    let mut count: Vec<usize> = shape.to_vec();
    let mut step = vec![1isize; rank];
    for a in axes {
        first[a.axis] = a.first as isize;
        count[a.axis] = a.count;
        step[a.axis] = a.step;
    }
    let mut st = vec![1isize; rank];
    for d in (0..rank.saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1] as isize;
    }
    let total: usize = count.iter().product();
    (0..total)
        .map(|i| {
            let (mut r, mut src) = (i, 0isize);
            for d in (0..rank).rev() {
                let idx = (r % count[d]) as isize;
                r /= count[d];
                src += (first[d] + idx * step[d]) * st[d];
            }
            x[src as usize]
        })
        .collect()
}

/// The flat input index of each output element under NumPy broadcasting.
fn broadcast_map(shape: &[usize], out: &[usize]) -> Result<Vec<usize>, String> {
    if shape.len() > out.len() {
        return Err(format!("cannot broadcast {shape:?} to {out:?}"));
    }
    for (i, &d) in shape.iter().enumerate() {
        let o = out[out.len() - shape.len() + i];
        if d != o && d != 1 {
            return Err(format!("cannot broadcast {shape:?} to {out:?}"));
        }
    }
    let st = broadcast_strides(shape, out);
    let total: usize = out.iter().product();
    Ok((0..total)
        .map(|i| {
            let (mut r, mut src) = (i, 0);
            for d in (0..out.len()).rev() {
                src += (r % out[d]) * st[d];
                r /= out[d];
            }
            src
        })
        .collect())
}

/// A float op of [`OpKind::Float`] on its dequantized inputs, in float32 as LiteRT's float
/// reference kernels compute (booleans as 0 and 1).
pub fn float_op(op: &FloatOp, ins: &[(Vec<f32>, &[usize])], out: &[usize]) -> Result<Vec<f32>, String> {
    let arg = |k: usize| ins.get(k).ok_or_else(|| format!("{} needs input {k}", op.name()));
    let spread = |k: usize| -> Result<Vec<f32>, String> {
        let (data, shape) = arg(k)?;
        if *shape == out && data.len() == out.iter().product::<usize>() {
            // Nothing to broadcast: no index map.
            return Ok(data.clone());
        }
        Ok(broadcast_map(shape, out)?.into_iter().map(|i| data[i]).collect())
    };
    Ok(match op {
        FloatOp::Node(n) => return Err(format!("{} runs as an ONNX node, not a float kernel", n.op)),
        FloatOp::LayerNorm { epsilon, gamma, beta } => {
            let (x, shape) = arg(0)?;
            let width = *shape.last().unwrap_or(&1);
            if gamma.len() != width || beta.len() != width {
                return Err(format!(
                    "scale and bias of {} values over a last axis of {width}",
                    gamma.len()
                ));
            }
            layer_norm_f32(x, width, *epsilon, gamma, beta)
        }
        FloatOp::Div => {
            let (a, b) = (spread(0)?, spread(1)?);
            a.iter().zip(&b).map(|(x, y)| x / y).collect()
        }
        FloatOp::Equal => {
            let (a, b) = (spread(0)?, spread(1)?);
            a.iter().zip(&b).map(|(x, y)| f32::from(u8::from(x == y))).collect()
        }
        FloatOp::Reciprocal => spread(0)?.iter().map(|x| 1.0f32 / x).collect(),
        // reference_ops::HardSwish<float>: in · min(6, max(0, in + 3)) / 6.
        FloatOp::HardSwish => spread(0)?.iter().map(|&x| hard_swish_f32(x)).collect(),
        FloatOp::Cast => spread(0)?,
        FloatOp::Where => {
            let (c, a, b) = (spread(0)?, spread(1)?, spread(2)?);
            c.iter()
                .zip(a.iter().zip(&b))
                .map(|(&c, (&a, &b))| if c == 0.0 { b } else { a })
                .collect()
        }
        FloatOp::Unary { f } => spread(0)?.iter().map(|&x| unary_f32(*f, x)).collect(),
        FloatOp::Binary { f } => {
            let (a, b) = (spread(0)?, spread(1)?);
            a.iter()
                .zip(&b)
                .map(|(&x, &y)| match f {
                    BinaryFn::Add => x + y,
                    BinaryFn::Sub => x - y,
                    BinaryFn::Mul => x * y,
                    // MaximumOp / MinimumOp: `a > b ? a : b`, `a < b ? a : b`.
                    BinaryFn::Maximum => {
                        if x > y {
                            x
                        } else {
                            y
                        }
                    }
                    BinaryFn::Minimum => {
                        if x < y {
                            x
                        } else {
                            y
                        }
                    }
                    // SquaredDifference: `d = a − b; d · d`.
                    BinaryFn::SquaredDifference => {
                        let d = x - y;
                        d * d
                    }
                })
                .collect()
        }
        FloatOp::Reduce { f, axes } => {
            let (x, shape) = arg(0)?;
            reduce_f32(*f, x, shape, axes, out)?
        }
        FloatOp::Softmax => {
            let (x, shape) = arg(0)?;
            softmax_f32(x, shape.last().copied().unwrap_or(1))
        }
    })
}

/// The float reference kernels of EXP, LOG, SQRT, TANH, LOGISTIC, NEG, ABS, RELU and RSQRT.
fn unary_f32(f: UnaryFn, x: f32) -> f32 {
    match f {
        UnaryFn::Exp => x.exp(),
        UnaryFn::Log => x.ln(),
        UnaryFn::Sqrt => x.sqrt(),
        UnaryFn::Tanh => x.tanh(),
        // reference_ops::Logistic: 1 above 16.619047, exp(x) below -9, else 1 / (1 + exp(-x)).
        UnaryFn::Logistic => {
            if x > 16.619_047_f32 {
                1.0
            } else if x < -9.0 {
                x.exp()
            } else {
                1.0 / (1.0 + (-x).exp())
            }
        }
        UnaryFn::Neg => -x,
        UnaryFn::Abs => x.abs(),
        UnaryFn::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        // elementwise.cc's Rsqrt: `1.f / std::sqrt(f)`.
        UnaryFn::Rsqrt => 1.0 / x.sqrt(),
    }
}

/// SUM, REDUCE_MAX, REDUCE_MIN and MEAN over `axes` as the reference kernels: every input
/// element in order folded into its output (MEAN: the float32 sum divided by the count).
fn reduce_f32(f: ReduceFn, x: &[f32], shape: &[usize], axes: &[usize], out: &[usize]) -> Result<Vec<f32>, String> {
    if let Some(&a) = axes.iter().find(|&&a| a >= shape.len()) {
        return Err(format!("reduction axis {a} of a rank-{} tensor", shape.len()));
    }
    let kept: Vec<usize> = (0..shape.len())
        .map(|d| if axes.contains(&d) { 1 } else { shape[d] })
        .collect();
    let n: usize = kept.iter().product();
    if out.iter().product::<usize>() != n || x.len() != shape.iter().product::<usize>() {
        return Err(format!("a reduction of {shape:?} over {axes:?} into {out:?}"));
    }
    let init = match f {
        ReduceFn::Sum | ReduceFn::Mean => 0.0,
        ReduceFn::Max => f32::MIN,
        ReduceFn::Min => f32::MAX,
    };
    let mut acc = vec![init; n];
    let strides = broadcast_strides(&kept, shape);
    for (i, &v) in x.iter().enumerate() {
        let (mut r, mut o) = (i, 0);
        for d in (0..shape.len()).rev() {
            o += (r % shape[d]) * strides[d];
            r /= shape[d];
        }
        let a = &mut acc[o];
        *a = match f {
            ReduceFn::Sum | ReduceFn::Mean => *a + v,
            // The reducers `in > current ? in : current` and `in < current ? in : current`.
            ReduceFn::Max => {
                if v > *a {
                    v
                } else {
                    *a
                }
            }
            ReduceFn::Min => {
                if v < *a {
                    v
                } else {
                    *a
                }
            }
        };
    }
    if f == ReduceFn::Mean {
        let count = (x.len() / n.max(1)) as f32;
        for a in &mut acc {
            *a /= count;
        }
    }
    Ok(acc)
}

/// reference_ops::Softmax in float32 over rows of `depth`: the row's maximum, each
/// `exp(x − max)` summed in order, each divided by the sum.
fn softmax_f32(x: &[f32], depth: usize) -> Vec<f32> {
    x.chunks(depth.max(1))
        .flat_map(|row| {
            let max = row.iter().fold(f32::MIN, |m, &v| if m < v { v } else { m });
            let e: Vec<f32> = row.iter().map(|&v| (v - max).exp()).collect();
            let mut sum = 0f32;
            for &v in &e {
                sum += v;
            }
            e.into_iter().map(move |v| v / sum)
        })
        .collect()
}

/// `in · min(6, max(0, in + 3)) / 6` in this order, as the float reference kernel.
#[expect(
    clippy::manual_clamp,
    reason = "max then min, as std::max and std::min in the reference kernel"
)]
fn hard_swish_f32(x: f32) -> f32 {
    x * (x + 3.0).max(0.0).min(6.0) / 6.0
}

/// LayerNormalization over the last axis as LiteRT's float reference kernels compute the
/// TFLite decomposition: MEAN (a float32 sum in order, divided by the count),
/// SQUARED_DIFFERENCE, MEAN, ADD ε, RSQRT (`1 / sqrtf`), SUB, MUL, MUL γ, ADD β.
pub fn layer_norm_f32(x: &[f32], width: usize, eps: f32, gamma: &[f32], beta: &[f32]) -> Vec<f32> {
    let width = width.max(1);
    let n = width as f32;
    x.par_chunks(width)
        .flat_map_iter(|row| {
            let mut sum = 0f32;
            for &v in row {
                sum += v;
            }
            let mean = sum / n;
            let mut var = 0f32;
            for &v in row {
                let d = v - mean;
                var += d * d;
            }
            let var = var / n;
            let r = 1.0f32 / (var + eps).sqrt();
            row.iter()
                .enumerate()
                .map(move |(i, &v)| (v - mean) * r * gamma[i] + beta[i])
                .collect::<Vec<_>>()
        })
        .collect()
}

/// PAD / PADV2 (a constant code) and MIRROR_PAD (REFLECT): `pads` per axis (before, after).
pub fn pad(x: &[i32], shape: &[usize], pads: &[[usize; 2]], mode: PadMode) -> Vec<i32> {
    let rank = shape.len();
    let out: Vec<usize> = (0..rank).map(|d| shape[d] + pads[d][0] + pads[d][1]).collect();
    let mut st = vec![1usize; rank];
    for d in (0..rank.saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1];
    }
    let total: usize = out.iter().product();
    (0..total)
        .map(|i| {
            let (mut r, mut src) = (i, 0usize);
            for d in (0..rank).rev() {
                let o = (r % out[d]) as isize;
                r /= out[d];
                let mut k = o - pads[d][0] as isize;
                let n = shape[d] as isize;
                if k < 0 || k >= n {
                    match mode {
                        PadMode::Constant(c) => return c,
                        PadMode::Reflect => {
                            k = if k < 0 { -k } else { 2 * (n - 1) - k };
                        }
                    }
                }
                src += k as usize * st[d];
            }
            x[src]
        })
        .collect()
}

/// REDUCE_MAX / REDUCE_MIN: the raw extreme over `axes` (output shape with or without the
/// reduced dims has the same order).
pub fn reduce_extreme(x: &[i32], shape: &[usize], axes: &[usize], max: bool) -> Vec<i32> {
    let rank = shape.len();
    let kept: Vec<usize> = (0..rank)
        .map(|d| if axes.contains(&d) { 1 } else { shape[d] })
        .collect();
    let total_out: usize = kept.iter().product();
    let mut out = vec![if max { i32::MIN } else { i32::MAX }; total_out];
    let ost = broadcast_strides(&kept, shape);
    for (i, &v) in x.iter().enumerate() {
        let (mut r, mut oi) = (i, 0);
        for d in (0..rank).rev() {
            oi += (r % shape[d]) * ost[d];
            r /= shape[d];
        }
        out[oi] = if max { out[oi].max(v) } else { out[oi].min(v) };
    }
    out
}

/// RSQRT int8 (`RsqrtEvalQuantizedInt8`): `v = x − zp_in` (0 gives 127), `1/√v` as
/// [`inv_sqrt_multiplier`], applied to 1 with 20 extra bits, then the multiplier of
/// `1 / (√s_in · s_out)` (float32 product, as the reference) and the output zero point.
/// Codes below the input zero point must be refused before.
pub fn rsqrt_int8(x: &[i32], xq: &QParams, yq: &QParams) -> Vec<i32> {
    const SHIFT: i32 = 20;
    let (m, s) = quantize_multiplier(1.0 / f64::from(xq.s().sqrt() * yq.s()));
    x.iter()
        .map(|&a| {
            let v = a - xq.zp();
            if v == 0 {
                return 127;
            }
            let (im, is) = inv_sqrt_multiplier(v);
            let d = mbqm(1, im, is + SHIFT);
            (mbqm(d, m, s - SHIFT) + yq.zp()).clamp(-128, 127)
        })
        .collect()
}

/// SQUARED_DIFFERENCE int8 (`squared_difference.cc`), broadcasting: each input's offset
/// code shifted left by 7 and scaled by `s / (2·max(s_a, s_b))`, the difference squared
/// (at most 255²·2¹⁴, no overflow), then the multiplier of `(2·max)² / (2¹⁴·s_out)`.
#[expect(
    clippy::too_many_arguments,
    reason = "two operands with their shapes and grids, and the output's"
)]
pub fn squared_difference(
    a: &[i32],
    sa: &[usize],
    qa: &QParams,
    b: &[i32],
    sb: &[usize],
    qb: &QParams,
    sy: &[usize],
    qy: &QParams,
) -> Result<Vec<i32>, String> {
    const LEFT: i32 = 7;
    // 2·max of the float32 scales is exact in float32.
    let twice = f64::from(2.0 * qa.s().max(qb.s()));
    let (m1, s1) = quantize_multiplier(f64::from(qa.s()) / twice);
    let (m2, s2) = quantize_multiplier(f64::from(qb.s()) / twice);
    let (mo, so) = quantize_multiplier(twice * twice / f64::from((1 << (2 * LEFT)) as f32 * qy.s()));
    let (za, zb, zy) = (qa.zp(), qb.zp(), qy.zp());
    broadcast2(a, sa, b, sb, sy, |x, y| {
        let d = mbqm((x - za) << LEFT, m1, s1) - mbqm((y - zb) << LEFT, m2, s2);
        (mbqm(d * d, mo, so) + zy).clamp(-128, 127)
    })
}

/// The 16-bit look-up table of `LUTPopulateInt16<float>` (513 entries over the input
/// grid's span, interpolation error halved), for RSQRT/LOG/EXP int16.
pub fn lut_int16(x: &QParams, y: &QParams, f: impl Fn(f32) -> f32) -> Vec<i32> {
    let in_min = x.s() * (-32768 - x.zp()) as f32;
    let in_max = x.s() * (32767 - x.zp()) as f32;
    let out_min = y.s() * (-32768 - y.zp()) as f32;
    let out_max = y.s() * (32767 - y.zp()) as f32;
    lut_int16_over(in_min, in_max, out_min, out_max, f)
}

#[expect(clippy::manual_midpoint, reason = "the reference computes (a + b) / 2 in this order")]
fn lut_int16_over(in_min: f32, in_max: f32, out_min: f32, out_max: f32, f: impl Fn(f32) -> f32) -> Vec<i32> {
    let step = (in_max - in_min) / 512.0;
    let half = step / 2.0;
    let inv = 65536.0f32 / (out_max - out_min);
    let mut t = vec![0i32; 513];
    for (i, slot) in t.iter_mut().enumerate().take(512) {
        let a = in_min + i as f32 * step;
        let v = f(a);
        let vm = f(a + half);
        let vn = f(in_min + (i + 1) as f32 * step);
        let interp = ((vn * inv + (v * inv).round()) / 2.0).round();
        let err = interp - (vm * inv).round();
        *slot = ((v * inv).round() - (err / 2.0).round()).clamp(-32768.0, 32767.0) as i32;
    }
    t[512] = (f(in_max) * inv).round().clamp(-32768.0, 32767.0) as i32;
    t
}

/// `LUTLookup` of an int16 value in a 513-entry table.
#[inline]
pub fn lut16_lookup(x: i32, lut: &[i32]) -> i32 {
    let idx = (256 + (x >> 7)) as usize;
    let off = x & 0x7F;
    let base = lut[idx];
    let slope = (lut[idx + 1] - base) as i16;
    i32::from((base + ((i32::from(slope) * off + 64) >> 7)) as i16)
}

/// `sigmoid_table_uint16`: sigmoid(i/24) in 0.16 fixed point (`internal/common.h`).
const SIGMOID_TABLE: [u32; 256] = [
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064, 42688,
    43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409,
    51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110,
    61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186,
    63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900,
    64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208,
    65221, 65234, 65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449,
    65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530,
    65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535,
];

/// `CheckedLog2`: the rounded log2 of `x` and whether `x` is that power of two
/// (`|frac| < 1e-3`, computed as `logf(x) · (1 / logf(2))`).
fn checked_log2(x: f32) -> (i32, bool) {
    let l = x.ln() * (1.0f32 / 2.0f32.ln());
    let r = l.round();
    (r as i32, (l - r).abs() < 1e-3)
}

/// LOGISTIC / TANH int16 (`reference_integer_ops::Logistic/Tanh`): the input rescaled to
/// Q3.12 (a power-of-two scale by a multiplier of 3 << shift, else a truncated multiplier
/// and a rounding shift), then the 256-entry sigmoid table with linear interpolation;
/// outputs on 2^−15.
pub fn logistic_tanh_int16(x: &[i32], xs: f32, tanh: bool) -> Vec<i32> {
    let (lg, pot) = checked_log2(xs);
    let mut ls = 12 + lg;
    let is_pot = pot && if tanh { ls == 0 || ls == 1 } else { ls == 0 };
    let mult: i32 = if is_pot {
        let m = 3 << ls;
        ls = 0;
        m
    } else {
        let mut m = f64::from(xs) * 4096.0 * 3.0;
        ls = 0;
        while m <= 16383.5 && ls <= 30 {
            ls += 1;
            m *= 2.0;
        }
        m as i32
    };
    let round = if ls > 0 { 1i32 << (ls - 1) } else { 0 };
    x.iter()
        .map(|&v| {
            let d = v.wrapping_mul(mult).wrapping_add(round) >> ls;
            let a = d.unsigned_abs();
            if tanh {
                let uh = (a >> 8) as usize;
                let r: i32 = if uh >= 255 {
                    0xFFFF << 8
                } else {
                    let (t0, t1) = (SIGMOID_TABLE[uh] as i32, SIGMOID_TABLE[uh + 1] as i32);
                    (t0 << 8) + (a & 0xFF) as i32 * (t1 - t0)
                };
                let r = if d >= 0 {
                    r - (1 << 23) + (1 << 7)
                } else {
                    -r + (1 << 23) + (1 << 7) - 1
                };
                i32::from((r >> 8) as i16)
            } else {
                let uh = (a >> 9) as usize;
                let r: u32 = if uh >= 255 {
                    0x7FFF << 10
                } else {
                    let (t0, t1) = (SIGMOID_TABLE[uh], SIGMOID_TABLE[uh + 1]);
                    (t0 << 9).wrapping_add((a & 0x1FF).wrapping_mul(t1.wrapping_sub(t0)))
                };
                let r = if d >= 0 { r + 512 } else { (1u32 << 25) - r + 511 };
                i32::from((r >> 10) as i16)
            }
        })
        .collect()
}

/// SOFTMAX int16 (`reference_ops::SoftmaxInt16`): exp and 1/(1+x) as 513-entry tables built
/// in double, rows over the last axis, outputs on 2^−15.
pub fn softmax_int16(x: &[i32], depth: usize, beta: f32, in_scale: f32) -> Vec<i32> {
    let exp_lut = lut_int16_f64(10.0 / 65535.0, 32767, 2.0 / 65535.0, 0, f64::exp);
    let rec_lut = lut_int16_f64(1.0 / 65535.0, -32768, 2.0 / 65535.0, 0, |v| 1.0 / (1.0 + v));
    let real = f64::from(in_scale * beta) / (10.0 / 65535.0);
    let (q, sh) = quantize_multiplier(real);
    x.par_chunks(depth.max(1))
        .flat_map_iter(|row| {
            let mx = row.iter().copied().max().unwrap_or(0);
            let exps: Vec<i32> = row
                .iter()
                .map(|&v| {
                    let z = (mbqm(v - mx, q, sh) + 32767).clamp(-32768, 32767);
                    lut16_lookup(z, &exp_lut)
                })
                .collect();
            let sum: i32 = exps.iter().sum();
            let h = sum.leading_zeros() as i32;
            let shifted = ((i64::from(sum) << (h - 1)) + (1 << 13)) >> 14;
            let rec = lut16_lookup((shifted - (1 << 15) - (1 << 16)).clamp(-32768, 32767) as i32, &rec_lut);
            let rs = 31 - h;
            exps.into_iter()
                .map(move |e| {
                    let v = (i64::from(e) * i64::from(rec) + (1i64 << (rs - 1))) >> rs;
                    v.clamp(0, 32767) as i32
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `LUTPopulateInt16<double>` for given scales and zero points (SOFTMAX int16's tables).
#[expect(clippy::manual_midpoint, reason = "the reference computes (a + b) / 2 in this order")]
fn lut_int16_f64(s_in: f64, zp_in: i32, s_out: f64, zp_out: i32, f: impl Fn(f64) -> f64) -> Vec<i32> {
    let in_min = s_in * f64::from(-32768 - zp_in);
    let in_max = s_in * f64::from(32767 - zp_in);
    let out_min = s_out * f64::from(-32768 - zp_out);
    let out_max = s_out * f64::from(32767 - zp_out);
    let step = (in_max - in_min) / 512.0;
    let half = step / 2.0;
    let inv = 65536.0 / (out_max - out_min);
    let mut t = vec![0i32; 513];
    for (i, slot) in t.iter_mut().enumerate().take(512) {
        let a = in_min + i as f64 * step;
        let v = f(a);
        let vm = f(a + half);
        let vn = f(in_min + (i + 1) as f64 * step);
        let interp = ((vn * inv + (v * inv).round()) / 2.0).round();
        let err = interp - (vm * inv).round();
        *slot = ((v * inv).round() - (err / 2.0).round()).clamp(-32768.0, 32767.0) as i32;
    }
    t[512] = (f(in_max) * inv).round().clamp(-32768.0, 32767.0) as i32;
    t
}

#[cfg(test)]
mod tests {
    use crate::program::{IntType, QParams};

    /// Output codes of LiteRT 2.3's BUILTIN_REF kernels for these inputs and grids (one-op
    /// files built from the schema), which the kernels must reproduce.
    #[test]
    fn rsqrt_and_squared_difference_give_litert_s_codes() {
        let q8 = |s, z| QParams::per_tensor(IntType::I8, s, z);
        let x = [-128, -127, -126, -120, -100, -64, 0, 1, 50, 100, 126, 127];
        assert_eq!(
            super::rsqrt_int8(&x, &q8(0.02, -128), &q8(0.05, -20)),
            vec![127, 121, 80, 30, 7, -2, -7, -8, -9, -11, -11, -11]
        );
        let (x16, y16) = (
            QParams::per_tensor(IntType::I16, 0.0002, 0),
            QParams::per_tensor(IntType::I16, 0.002, 0),
        );
        let top = 32767.0 * y16.s();
        let table = super::lut_int16(&x16, &y16, |d| if d <= 0.0 { top } else { 1.0 / d.sqrt() });
        let x = [0, 1, 2, 5, 100, 1000, 5000, 20000, 32000, 32767];
        let y: Vec<i32> = x.iter().map(|&a| super::lut16_lookup(a, &table)).collect();
        assert_eq!(y, vec![26011, 25832, 25653, 25115, 8091, 1118, 500, 250, 197, 195]);
        let y = super::squared_difference(
            &[-128, 0, 127, 40, -60, 5],
            &[2, 3],
            &q8(0.03, 5),
            &[-10, 100, -128],
            &[3],
            &q8(0.05, -10),
            &[2, 3],
            &q8(0.25, -128),
        )
        .expect("broadcasts");
        assert_eq!(y, vec![-64, 0, 127, -124, 94, 11]);
    }

    #[test]
    fn arg_extreme_takes_the_first_of_ties_along_the_axis() {
        use super::arg_extreme;
        use crate::program::Extreme;
        // Shape [2, 3]: along axis 1 and along axis 0.
        let x = [4, 9, 9, -3, -3, 7];
        assert_eq!(arg_extreme(&x, &[2, 3], 1, Extreme::Max), vec![1, 2]);
        assert_eq!(arg_extreme(&x, &[2, 3], 1, Extreme::Min), vec![0, 0]);
        assert_eq!(arg_extreme(&x, &[2, 3], 0, Extreme::Max), vec![0, 0, 0]);
        assert_eq!(arg_extreme(&x, &[2, 3], 0, Extreme::Min), vec![1, 1, 1]);
    }

    /// GATHER along a middle axis picks whole inner rows for each outer index; an index
    /// at or beyond the axis, or a negative one, is an error naming it.
    #[test]
    fn gather_picks_rows_and_refuses_indices_outside_the_axis() {
        let x: Vec<i32> = (0..12).collect(); // [2, 3, 2]
        let y = super::gather(&x, &[2, 3, 2], 1, &[2, 0]).expect("gathers");
        assert_eq!(y, vec![4, 5, 0, 1, 10, 11, 6, 7]);
        assert_eq!(
            super::gather(&x, &[2, 3, 2], 2, &[1]).expect("gathers"),
            vec![1, 3, 5, 7, 9, 11]
        );
        for bad in [3, -1] {
            let e = super::gather(&x, &[2, 3, 2], 1, &[0, bad]).expect_err("refused");
            assert_eq!(e, format!("index {bad} is out of range for axis 1 of 3"));
        }
    }
}
