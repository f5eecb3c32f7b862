//! The MAC array's convolutions, tile by tile: each command's output rows in the row tiles
//! and its output channels in the weight blocks its [`Tile`] names, each tile an im2col of
//! its input rows and an exact int8 GEMM — `Σ w·x − zp_in·Σ w` in wrapping int32, which is
//! `Σ w·(x − zp_in)` modulo 2³², the reference kernel's accumulator — then the binary's own
//! per-channel `(multiplier, shift)`. The GEMM uses AVX2's `vpmaddwd` when the CPU has it
//! (detected at run time; `NPU_NO_SIMD=1` forces the portable loop) and gives the same
//! bits either way. Depthwise-style convolutions (one input channel per group) take a
//! direct loop.

use crate::compiler::lower::Tile;
use crate::sim::integer::fixed::mbqm;
use crate::sim::integer::kernels::ConvGeom;
use rayon::prelude::*;

/// A convolution's weights packed for the GEMM: per output channel, the reduction
/// (`k` = input channels per group × kernel taps) as pairs of int16 in one `i32` each (the
/// operand `vpmaddwd` broadcasts), the plain codes, their sums and the bias as the int32
/// accumulator adds it.
pub struct Packed {
    k2: usize,
    pairs: Vec<i32>,
    w: Vec<i32>,
    wsum: Vec<i32>,
    bias: Vec<i32>,
}

impl Packed {
    /// `w` in OIHW (`o` rows of `k` codes); `bias` per output channel (missing: 0).
    pub fn new(w: &[i64], o: usize, k: usize, bias: &[i64]) -> Self {
        let k2 = k.div_ceil(2);
        let mut pairs = vec![0i32; o * k2];
        let mut wsum = vec![0i32; o];
        for oc in 0..o {
            let row = &w[oc * k..(oc + 1) * k];
            for (j, pair) in row.chunks(2).enumerate() {
                let lo = pair[0] as i16 as u16;
                let hi = pair.get(1).map_or(0, |&v| v as i16 as u16);
                pairs[oc * k2 + j] = (u32::from(lo) | (u32::from(hi) << 16)) as i32;
            }
            wsum[oc] = row.iter().fold(0i32, |a, &v| a.wrapping_add(v as i32));
        }
        Self {
            k2,
            pairs,
            w: w.iter().map(|&v| v as i32).collect(),
            wsum,
            bias: (0..o).map(|oc| bias.get(oc).copied().unwrap_or(0) as i32).collect(),
        }
    }

    /// Output channels packed.
    pub fn outputs(&self) -> usize {
        self.bias.len()
    }
}

/// The output stage of one accumulator: bias, the channel's multiplier, zero point, clamp.
#[derive(Clone, Copy)]
pub struct Stage<'a> {
    pub requant: &'a [(i32, i32)],
    pub zp_in: i32,
    pub zp_out: i32,
    pub range: (i32, i32),
}

impl Stage<'_> {
    /// The output stage of channel `oc`.
    #[inline]
    fn channel(&self, oc: usize, pk: &Packed) -> Channel {
        let (q, s) = self.requant[oc % self.requant.len()];
        Channel {
            q,
            s,
            offset: pk.bias[oc].wrapping_sub(self.zp_in.wrapping_mul(pk.wsum[oc])),
            zp_out: self.zp_out,
            range: self.range,
        }
    }
}

/// One channel's output stage: `M(acc + bias − zp_in·Σw) + zp_out`, clamped.
#[derive(Clone, Copy)]
struct Channel {
    q: i32,
    s: i32,
    offset: i32,
    zp_out: i32,
    range: (i32, i32),
}

impl Channel {
    #[inline]
    fn out(&self, acc: i32) -> i32 {
        mbqm(acc.wrapping_add(self.offset), self.q, self.s)
            .wrapping_add(self.zp_out)
            .clamp(self.range.0, self.range.1)
    }

    /// `out[i] = self.out(acc[i] + extra)` for the shorter of the two.
    #[inline]
    fn apply(&self, acc: &[i32], extra: i32, out: &mut [i32]) {
        let n = acc.len().min(out.len());
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if simd() && self.q >= 0 {
            // SAFETY: AVX2 is present (checked at run time); it reads and writes whole
            // groups of 8 inside the first `n` of each slice.
            done = unsafe { self.apply_avx2(&acc[..n], extra, &mut out[..n]) };
        }
        for (o, &a) in out[done..n].iter_mut().zip(&acc[done..n]) {
            *o = self.out(a.wrapping_add(extra));
        }
    }

    /// [`Self::apply`] eight lanes at a time, the same arithmetic as `mbqm` (gemmlowp's
    /// `SaturatingRoundingDoublingHighMul` with a non-negative multiplier, then
    /// `RoundingDivideByPOT`); the lanes it did (a multiple of 8).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn apply_avx2(&self, acc: &[i32], extra: i32, out: &mut [i32]) -> usize {
        use std::arch::x86_64::{
            __m256i, _mm_cvtsi32_si128, _mm256_add_epi32, _mm256_add_epi64, _mm256_and_si256, _mm256_blend_epi32,
            _mm256_blendv_epi8, _mm256_cmpgt_epi32, _mm256_cmpgt_epi64, _mm256_loadu_si256, _mm256_max_epi32,
            _mm256_min_epi32, _mm256_mul_epi32, _mm256_set1_epi32, _mm256_set1_epi64x, _mm256_setzero_si256,
            _mm256_shuffle_epi32, _mm256_sll_epi32, _mm256_sra_epi32, _mm256_srli_epi64, _mm256_storeu_si256,
            _mm256_sub_epi32,
        };
        let left = self.s.clamp(0, 31);
        let right = (-self.s).clamp(0, 31);
        let n = acc.len() / 8 * 8;
        // SAFETY: loads and stores of 8 lanes at `k < n ≤ len`.
        unsafe {
            let zero = _mm256_setzero_si256();
            let add = _mm256_set1_epi32(extra.wrapping_add(self.offset));
            let lsh = _mm_cvtsi32_si128(left);
            let rsh = _mm_cvtsi32_si128(right);
            let q = _mm256_set1_epi32(self.q);
            let pos = _mm256_set1_epi64x(1 << 30);
            let neg = _mm256_set1_epi64x(1 - (1 << 30));
            let round = _mm256_set1_epi64x((1 << 31) - 1);
            let mask = _mm256_set1_epi32(((1i64 << right) - 1) as i32);
            let half = _mm256_set1_epi32((((1i64 << right) - 1) as i32) >> 1);
            let (lo, hi) = (_mm256_set1_epi32(self.range.0), _mm256_set1_epi32(self.range.1));
            let zp = _mm256_set1_epi32(self.zp_out);
            // (a·q + nudge) / 2³¹ truncated, for the even 32-bit lanes of `a` (as i64).
            let high = |a: __m256i| -> __m256i {
                let ab = _mm256_mul_epi32(a, q);
                let t = _mm256_add_epi64(ab, _mm256_blendv_epi8(pos, neg, _mm256_cmpgt_epi64(zero, ab)));
                // Division truncating toward zero: a negative `t` first gains 2³¹ − 1.
                let t = _mm256_add_epi64(t, _mm256_and_si256(_mm256_cmpgt_epi64(zero, t), round));
                _mm256_srli_epi64(t, 31)
            };
            let mut k = 0;
            while k < n {
                let a = _mm256_add_epi32(_mm256_loadu_si256(acc.as_ptr().add(k).cast()), add);
                let x = _mm256_sll_epi32(a, lsh);
                let even = high(x);
                let odd = high(_mm256_srli_epi64(x, 32));
                // The low 32 bits of each 64-bit result: even lanes in place, odd lanes up.
                let v = _mm256_blend_epi32(even, _mm256_shuffle_epi32(odd, 0b10_11_00_01), 0b1010_1010);
                // RoundingDivideByPOT.
                let rem = _mm256_and_si256(v, mask);
                let thr = _mm256_sub_epi32(half, _mm256_cmpgt_epi32(zero, v));
                let r = _mm256_sub_epi32(_mm256_sra_epi32(v, rsh), _mm256_cmpgt_epi32(rem, thr));
                let r = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(r, zp), lo), hi);
                _mm256_storeu_si256(out.as_mut_ptr().add(k).cast(), r);
                k += 8;
            }
        }
        n
    }
}

/// `out[i] = M(acc[i]) + zp_out`, clamped to `range`, with the multiplier and shift
/// `(q, s)` (the elementwise unit's output stage; AVX2 when available).
pub fn requantize(acc: &[i32], (q, s): (i32, i32), zp_out: i32, range: (i32, i32)) -> Vec<i32> {
    let mut out = vec![0i32; acc.len()];
    Channel {
        q,
        s,
        offset: 0,
        zp_out,
        range,
    }
    .apply(acc, 0, &mut out);
    out
}

static SIMD: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether the AVX2 GEMM runs: the CPU has AVX2, `NPU_NO_SIMD` is not set and
/// [`set_portable`] did not turn it off.
pub fn simd() -> bool {
    use std::sync::atomic::Ordering;
    match SIMD.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            #[cfg(target_arch = "x86_64")]
            let on = std::is_x86_feature_detected!("avx2") && std::env::var_os("NPU_NO_SIMD").is_none();
            #[cfg(not(target_arch = "x86_64"))]
            let on = false;
            SIMD.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
    }
}

/// Forces the portable GEMM (`true`) or returns to detection (`false`), for tests that
/// compare the two.
pub fn set_portable(portable: bool) {
    SIMD.store(if portable { 2 } else { 0 }, std::sync::atomic::Ordering::Relaxed);
}

/// One tile's work: a batch, a row range and an output-channel range inside one group.
struct Job {
    b: usize,
    rows: (usize, usize),
    oc: (usize, usize),
}

/// CONV_2D / DEPTHWISE_CONV_2D int8 of geometry `g` tile by tile. `x` holds int8 codes
/// (every kernel clamps to its output's type, and [`super::check`] refuses copies between
/// types).
pub fn conv(g: &ConvGeom, x: &[i32], pk: &Packed, st: Stage, tile: &Tile) -> Vec<i32> {
    let [n, c, h, wd] = g.x;
    let [o, cg, kh, kw] = g.w;
    let [oh, ow] = g.y;
    let groups = g.groups.max(1);
    let per_group = o / groups;
    let rows = tile.rows.clamp(1, oh.max(1));
    let block = tile.channels.max(1);
    // Tiles: row tiles × channel blocks, a block cut at group boundaries.
    let mut jobs = Vec::new();
    for b in 0..n {
        for r0 in (0..oh).step_by(rows) {
            let mut oc = 0;
            while oc < o {
                // A block of a grouped convolution stays in one group (one-channel groups
                // run channel by channel inside any block).
                let end = if cg == 1 {
                    (oc + block).min(o)
                } else {
                    (oc + block).min(o).min((oc / per_group + 1) * per_group)
                };
                jobs.push(Job {
                    b,
                    rows: (r0, (r0 + rows).min(oh)),
                    oc: (oc, end),
                });
                oc = end;
            }
        }
    }
    let plane = oh * ow;
    let [pt, pl] = g.pads;
    let [sy, sx] = g.strides;
    let [dy, dx] = g.dilations;
    let results: Vec<(Job, Vec<i32>)> = jobs
        .into_par_iter()
        .map(|j| {
            let (r0, r1) = j.rows;
            let p = (r1 - r0) * ow;
            let group = j.oc.0 / per_group.max(1);
            let mut out = vec![0i32; (j.oc.1 - j.oc.0) * p];
            if p == 0 {
                return (j, out);
            }
            if cg == 1 {
                // One input channel per group: the tile's input rows, zero point
                // subtracted and zero-padded, then a multiply-add per tap along each row.
                let (y0, y1) = (r0 * sy, (r1 - 1) * sy + (kh - 1) * dy + 1);
                let wp = (ow - 1) * sx + (kw - 1) * dx + 1;
                let mut pad = vec![0i32; (y1 - y0) * wp];
                let mut filled = None;
                let mut acc = vec![0i32; ow];
                for (l, oc) in (j.oc.0..j.oc.1).enumerate() {
                    let chan = oc / per_group.max(1);
                    if filled != Some(chan) {
                        let xp = &x[(j.b * c + chan) * h * wd..][..h * wd];
                        for (r, iy) in (y0..y1).enumerate() {
                            let dst = &mut pad[r * wp..(r + 1) * wp];
                            let Some(iy) = iy.checked_sub(pt).filter(|&v| v < h) else {
                                dst.fill(0);
                                continue;
                            };
                            for (cx, d) in dst.iter_mut().enumerate() {
                                *d = match cx.checked_sub(pl).filter(|&v| v < wd) {
                                    Some(ix) => xp[iy * wd + ix] - st.zp_in,
                                    None => 0,
                                };
                            }
                        }
                        filled = Some(chan);
                    }
                    let wr = &pk.w[oc * kh * kw..(oc + 1) * kh * kw];
                    for oy in r0..r1 {
                        let taps = Taps {
                            pad: &pad[(oy - r0) * sy * wp..],
                            wp,
                            w: wr,
                            kw,
                            dy,
                            dx,
                            sx,
                        };
                        #[cfg(target_arch = "x86_64")]
                        if simd() {
                            // SAFETY: AVX2 is present (checked at run time).
                            unsafe { taps.row_avx2(&mut acc) };
                        } else {
                            taps.row(&mut acc);
                        }
                        #[cfg(not(target_arch = "x86_64"))]
                        taps.row(&mut acc);
                        // The loop subtracted zp_in per tap: add back the stage's
                        // `zp_in·Σw` (the same value modulo 2³²).
                        let back = st.zp_in.wrapping_mul(pk.wsum[oc]);
                        st.channel(oc, pk)
                            .apply(&acc, back, &mut out[l * p + (oy - r0) * ow..][..ow]);
                    }
                }
                return (j, out);
            }
            // im2col of the tile's rows as int16 pairs along the reduction, columns padded
            // to 16: `cols[(kk·pp + q)·2 + e]` holds tap `2·kk + e` of output `q`. Taps
            // outside the input hold zp_in (so they add nothing once `zp_in·Σw` is taken).
            let pp = p.div_ceil(16) * 16;
            let mut cols = vec![0i16; pk.k2 * pp * 2];
            for ic in 0..cg {
                let xp = &x[(j.b * c + group * cg + ic) * h * wd..][..h * wd];
                for ky in 0..kh {
                    for kx in 0..kw {
                        let kk = (ic * kh + ky) * kw + kx;
                        let base = (kk / 2) * pp * 2 + kk % 2;
                        for oy in r0..r1 {
                            let iy = (oy * sy + ky * dy).checked_sub(pt).filter(|&v| v < h);
                            for ox in 0..ow {
                                let q = (oy - r0) * ow + ox;
                                let v = match (iy, (ox * sx + kx * dx).checked_sub(pl).filter(|&v| v < wd)) {
                                    (Some(iy), Some(ix)) => xp[iy * wd + ix],
                                    _ => st.zp_in,
                                };
                                cols[base + q * 2] = v as i16;
                            }
                        }
                    }
                }
            }
            gemm(pk, j.oc, &cols, p, pp, &mut out, st);
            (j, out)
        })
        .collect();
    let mut y = vec![0i32; n * o * plane];
    for (j, out) in results {
        let p = (j.rows.1 - j.rows.0) * ow;
        for (l, oc) in (j.oc.0..j.oc.1).enumerate() {
            let at = (j.b * o + oc) * plane + j.rows.0 * ow;
            y[at..at + p].copy_from_slice(&out[l * p..(l + 1) * p]);
        }
    }
    y
}

/// One output row of a one-channel-per-group convolution: the zero-point-subtracted,
/// zero-padded input rows from its first tap row, and the channel's taps.
struct Taps<'a> {
    pad: &'a [i32],
    wp: usize,
    w: &'a [i32],
    kw: usize,
    dy: usize,
    dx: usize,
    sx: usize,
}

impl Taps<'_> {
    /// `acc[ox] = Σ_taps w·pad` in wrapping int32.
    #[inline(always)]
    fn row(&self, acc: &mut [i32]) {
        acc.fill(0);
        for (t, &wv) in self.w.iter().enumerate() {
            let (ky, kx) = (t / self.kw, t % self.kw);
            let src = &self.pad[ky * self.dy * self.wp + kx * self.dx..];
            if self.sx == 1 {
                for (a, &v) in acc.iter_mut().zip(src) {
                    *a = a.wrapping_add(wv * v);
                }
            } else {
                for (ox, a) in acc.iter_mut().enumerate() {
                    *a = a.wrapping_add(wv * src[ox * self.sx]);
                }
            }
        }
    }

    /// [`Self::row`] compiled for AVX2 (the same loop, eight lanes).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn row_avx2(&self, acc: &mut [i32]) {
        self.row(acc);
    }
}

/// `out[l][q] = stage(Σ_k w[oc0 + l][k] · col_q[k])` for the channels `oc` and the `p`
/// columns (of `pp`, a multiple of 16), four channels by sixteen columns at a time.
fn gemm(pk: &Packed, (oc0, oc1): (usize, usize), cols: &[i16], p: usize, pp: usize, out: &mut [i32], st: Stage) {
    let mut oc = oc0;
    let mut acc = [[0i32; 16]; 4];
    while oc < oc1 {
        let m = (oc1 - oc).min(4);
        for q0 in (0..pp).step_by(16) {
            block(pk, oc, m, cols, pp, q0, &mut acc);
            for (i, row) in acc[..m].iter().enumerate() {
                let n = p.saturating_sub(q0).min(16);
                st.channel(oc + i, pk)
                    .apply(row, 0, &mut out[(oc - oc0 + i) * p + q0..][..n]);
            }
        }
        oc += m;
    }
}

/// The accumulators of `m` ≤ 4 channels from `oc` and the 16 columns from `q0`, in
/// wrapping int32.
#[inline]
fn block(pk: &Packed, oc: usize, m: usize, cols: &[i16], pp: usize, q0: usize, acc: &mut [[i32; 16]; 4]) {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: AVX2 is present (checked at run time); every load is inside `cols`
        // (`k2` rows of `pp` pairs, `q0 + 16 ≤ pp`) and `pairs` (`m` rows of `k2`).
        unsafe { block_avx2(pk, oc, m, cols, pp, q0, acc) };
        return;
    }
    for (i, row) in acc[..m].iter_mut().enumerate() {
        row.fill(0);
        let w = &pk.pairs[(oc + i) * pk.k2..(oc + i + 1) * pk.k2];
        for (kk, &pair) in w.iter().enumerate() {
            let (w0, w1) = (i32::from(pair as i16), pair >> 16);
            let c = &cols[(kk * pp + q0) * 2..(kk * pp + q0 + 16) * 2];
            for (e, a) in row.iter_mut().enumerate() {
                let v = w0 * i32::from(c[2 * e]) + w1 * i32::from(c[2 * e + 1]);
                *a = a.wrapping_add(v);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_avx2(pk: &Packed, oc: usize, m: usize, cols: &[i16], pp: usize, q0: usize, acc: &mut [[i32; 16]; 4]) {
    use std::arch::x86_64::{
        _mm256_add_epi32, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_set1_epi32, _mm256_setzero_si256,
        _mm256_storeu_si256,
    };
    let k2 = pk.k2;
    debug_assert!(cols.len() >= k2 * pp * 2 && q0 + 16 <= pp && pk.pairs.len() >= (oc + m) * k2);
    // SAFETY: see `block`.
    unsafe {
        let mut s = [[_mm256_setzero_si256(); 2]; 4];
        let cp = cols.as_ptr();
        let wp = pk.pairs.as_ptr().add(oc * k2);
        for kk in 0..k2 {
            let at = cp.add((kk * pp + q0) * 2);
            let x0 = _mm256_loadu_si256(at.cast());
            let x1 = _mm256_loadu_si256(at.add(16).cast());
            for (i, si) in s.iter_mut().enumerate().take(m) {
                let w = _mm256_set1_epi32(*wp.add(i * k2 + kk));
                si[0] = _mm256_add_epi32(si[0], _mm256_madd_epi16(x0, w));
                si[1] = _mm256_add_epi32(si[1], _mm256_madd_epi16(x1, w));
            }
        }
        for (i, si) in s.iter().enumerate().take(m) {
            _mm256_storeu_si256(acc[i].as_mut_ptr().cast(), si[0]);
            _mm256_storeu_si256(acc[i].as_mut_ptr().add(8).cast(), si[1]);
        }
    }
}
