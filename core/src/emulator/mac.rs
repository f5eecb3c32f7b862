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

/// A convolution's weights packed for the GEMM: rows of `kp` (the reduction length `k`
/// rounded up to 16) int16 values, their sums, and the bias as the int32 accumulator adds it.
pub struct Packed {
    k: usize,
    kp: usize,
    w: Vec<i16>,
    wsum: Vec<i32>,
    bias: Vec<i32>,
}

impl Packed {
    /// `w` in OIHW (`o` rows of `k` codes); `bias` per output channel (missing: 0).
    pub fn new(w: &[i64], o: usize, k: usize, bias: &[i64]) -> Self {
        let kp = k.div_ceil(16).max(1) * 16;
        let mut packed = vec![0i16; o * kp];
        let mut wsum = vec![0i32; o];
        for oc in 0..o {
            for (j, &v) in w[oc * k..(oc + 1) * k].iter().enumerate() {
                packed[oc * kp + j] = v as i16;
                wsum[oc] = wsum[oc].wrapping_add(v as i32);
            }
        }
        Self {
            k,
            kp,
            w: packed,
            wsum,
            bias: (0..o).map(|oc| bias.get(oc).copied().unwrap_or(0) as i32).collect(),
        }
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
    #[inline]
    fn out(&self, acc: i32, oc: usize, pk: &Packed) -> i32 {
        let (q, s) = self.requant[oc % self.requant.len()];
        let a = acc.wrapping_sub(self.zp_in.wrapping_mul(pk.wsum[oc])).wrapping_add(pk.bias[oc]);
        mbqm(a, q, s).wrapping_add(self.zp_out).clamp(self.range.0, self.range.1)
    }
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
/// (checked: a code outside int16 is an error naming it).
pub fn conv(g: &ConvGeom, x: &[i32], pk: &Packed, st: Stage, tile: &Tile) -> Result<Vec<i32>, String> {
    let [n, c, h, wd] = g.x;
    let [o, cg, kh, kw] = g.w;
    let [oh, ow] = g.y;
    let groups = g.groups.max(1);
    let per_group = o / groups;
    if let Some(v) = x.iter().find(|&&v| !(-32768..=32767).contains(&v)) {
        return Err(format!("input code {v} is outside int16"));
    }
    let rows = tile.rows.clamp(1, oh.max(1));
    let block = tile.channels.max(1);
    // Tiles: row tiles × channel blocks, a block cut at group boundaries.
    let mut jobs = Vec::new();
    for b in 0..n {
        for r0 in (0..oh).step_by(rows) {
            let mut oc = 0;
            while oc < o {
                let end = (oc + block).min(o).min((oc / per_group + 1) * per_group);
                jobs.push(Job {
                    b,
                    rows: (r0, (r0 + rows).min(oh)),
                    oc: (oc, end),
                });
                oc = end;
            }
        }
    }
    let tap = |iy: usize, ky: usize| (iy * g.strides[0] + ky * g.dilations[0]).checked_sub(g.pads[0]).filter(|&v| v < h);
    let tapx = |ix: usize, kx: usize| (ix * g.strides[1] + kx * g.dilations[1]).checked_sub(g.pads[1]).filter(|&v| v < wd);
    let plane = oh * ow;
    let results: Vec<(Job, Vec<i32>)> = jobs
        .into_par_iter()
        .map(|j| {
            let (r0, r1) = j.rows;
            let p = (r1 - r0) * ow;
            let group = j.oc.0 / per_group.max(1);
            let mut out = vec![0i32; (j.oc.1 - j.oc.0) * p];
            if cg == 1 {
                // One input channel per group: a direct loop.
                let chan = group;
                let xp = &x[(j.b * c + chan) * h * wd..(j.b * c + chan + 1) * h * wd];
                for (l, oc) in (j.oc.0..j.oc.1).enumerate() {
                    let wr = &pk.w[oc * pk.kp..oc * pk.kp + kh * kw];
                    for oy in r0..r1 {
                        for ox in 0..ow {
                            let mut acc = 0i32;
                            for ky in 0..kh {
                                let Some(iy) = tap(oy, ky) else { continue };
                                let row = &xp[iy * wd..(iy + 1) * wd];
                                for kx in 0..kw {
                                    if let Some(ix) = tapx(ox, kx) {
                                        acc = acc.wrapping_add(i32::from(wr[ky * kw + kx]) * (row[ix] - st.zp_in));
                                    }
                                }
                            }
                            // The direct loop subtracted zp_in per tap: undo the stage's
                            // `zp_in·Σw` (same value modulo 2³²).
                            let acc = acc.wrapping_add(st.zp_in.wrapping_mul(pk.wsum[oc]));
                            out[l * p + (oy - r0) * ow + ox] = st.out(acc, oc, pk);
                        }
                    }
                }
                return (j, out);
            }
            // im2col of the tile's rows: padded taps hold zp_in (so they add nothing).
            let kp = pk.kp;
            let mut cols = vec![0i16; p * kp];
            for oy in r0..r1 {
                for ox in 0..ow {
                    let col = &mut cols[((oy - r0) * ow + ox) * kp..][..pk.k];
                    for ic in 0..cg {
                        let xp = &x[(j.b * c + group * cg + ic) * h * wd..][..h * wd];
                        for ky in 0..kh {
                            let iy = tap(oy, ky);
                            for kx in 0..kw {
                                let v = match (iy, tapx(ox, kx)) {
                                    (Some(iy), Some(ix)) => xp[iy * wd + ix],
                                    _ => st.zp_in,
                                };
                                col[(ic * kh + ky) * kw + kx] = v as i16;
                            }
                        }
                    }
                }
            }
            gemm(pk, j.oc, &cols, p, &mut out, st);
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
    Ok(y)
}

/// `out[l][q] = stage(Σ_k w[oc0 + l][k] · cols[q][k])` for the channels `oc` and `p` columns.
fn gemm(pk: &Packed, (oc0, oc1): (usize, usize), cols: &[i16], p: usize, out: &mut [i32], st: Stage) {
    let kp = pk.kp;
    let mut oc = oc0;
    while oc < oc1 {
        let m = (oc1 - oc).min(4);
        let w = &pk.w[oc * kp..(oc + m) * kp];
        for q in 0..p {
            let col = &cols[q * kp..(q + 1) * kp];
            let mut acc = [0i32; 4];
            dots(w, m, col, &mut acc);
            for (i, &a) in acc[..m].iter().enumerate() {
                out[(oc - oc0 + i) * p + q] = st.out(a, oc + i, pk);
            }
        }
        oc += m;
    }
}

/// `acc[i] = Σ w[i·kp..][k]·col[k]` for the `m` ≤ 4 rows of `w`, in wrapping int32.
#[inline]
fn dots(w: &[i16], m: usize, col: &[i16], acc: &mut [i32; 4]) {
    #[cfg(target_arch = "x86_64")]
    if m == 4 && simd() {
        // SAFETY: AVX2 is present (checked at run time); rows and column have `kp`
        // (a multiple of 16) values each.
        unsafe { dots4_avx2(w, col, acc) };
        return;
    }
    let kp = col.len();
    for (i, a) in acc[..m].iter_mut().enumerate() {
        *a = w[i * kp..(i + 1) * kp]
            .iter()
            .zip(col)
            .fold(0i32, |s, (&x, &y)| s.wrapping_add(i32::from(x) * i32::from(y)));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dots4_avx2(w: &[i16], col: &[i16], acc: &mut [i32; 4]) {
    use std::arch::x86_64::*;
    let kp = col.len();
    debug_assert!(kp % 16 == 0 && w.len() >= 4 * kp);
    // SAFETY: every load reads 16 int16 inside `col` or one of the four rows of `w`.
    unsafe {
        let mut s = [_mm256_setzero_si256(); 4];
        let cp = col.as_ptr();
        let wp = w.as_ptr();
        let mut k = 0;
        while k < kp {
            let c = _mm256_loadu_si256(cp.add(k).cast());
            for (i, si) in s.iter_mut().enumerate() {
                let r = _mm256_loadu_si256(wp.add(i * kp + k).cast());
                *si = _mm256_add_epi32(*si, _mm256_madd_epi16(r, c));
            }
            k += 16;
        }
        for (i, si) in s.iter().enumerate() {
            let lo = _mm256_castsi256_si128(*si);
            let hi = _mm256_extracti128_si256(*si, 1);
            let v = _mm_add_epi32(lo, hi);
            let v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0b01_00_11_10));
            let v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0b10_11_00_01));
            acc[i] = _mm_cvtsi128_si32(v);
        }
    }
}
