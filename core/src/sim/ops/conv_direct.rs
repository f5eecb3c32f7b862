//! Direct convolution for AVX-512: no im2col, no packing.
//!
//! The input of one group is copied once into zero-padded *phase planes*: for strides
//! `(sh, sw)`, plane `(rp, cp)` of channel `c` holds the padded input's rows `rp, rp+sh, …`
//! and columns `cp, cp+sw, …`. A kernel tap `(ki, kj)` then reads, for the output at flat
//! position `p = oy·Wq + ox` of a `Hq × Wq` grid, the element at `p + off(c, ki, kj)` of
//! one plane: every tap of every channel is a contiguous run of the same length, whatever
//! the stride, dilation and padding. The outputs are computed on that grid (columns past
//! the output width are computed and dropped) as a GEMM whose right-hand rows are those
//! runs: tiles of 6 output channels × 64 positions, 24 accumulators in registers, weights
//! broadcast from their natural `[m][c·kh·kw]` layout. Each vector of sums is stored
//! straight into the output with its grid-only lanes squeezed out (a compress and a masked
//! store), and the activation runs over each work item's outputs while they are in cache.

use super::SendPtr;
use super::cnn::Geometry;
use super::elementwise::Activation;
use rayon::prelude::*;

/// Output channels per tile.
const MR: usize = 6;
/// Vectors of 16 positions per tile.
const NR: usize = 4;
/// Positions per tile.
const NT: usize = NR * 16;
/// Tiles of positions per work item (at most).
const P_TILES: usize = 4;

/// Whether the direct kernel is compiled and the CPU can run it.
pub fn available() -> bool {
    cfg!(target_arch = "x86_64") && crate::sim::simd::avx512()
}

/// Whether a conv of this geometry goes to [`conv_group`]: the CPU can run it, and the
/// strides are at most 2 (larger strides, such as a ViT's 16×16/16 patch embedding, split
/// the input into too many phase planes: im2col does less work there).
pub fn suits(geo: &Geometry) -> bool {
    available() && geo.strides.iter().all(|&s| s <= 2)
}

/// One group of a 2-D conv (`xg`: `cg × h × w`, `wg`: `mg × cg·kh·kw`, `og`: `mg × oh·ow`),
/// bias and activation included. Every element of `og` is written (it may come in
/// uninitialized). The caller checks [`suits`].
#[allow(clippy::too_many_arguments)]
pub fn conv_group(
    xg: &[f32],
    wg: &[f32],
    og: &mut [std::mem::MaybeUninit<f32>],
    (cg, mg): (usize, usize),
    (h, w): (usize, usize),
    geo: &Geometry,
    bias: Option<&[f32]>,
    act: Option<Activation>,
) {
    let (kh, kw) = (geo.kernel[0], geo.kernel[1]);
    let (sh, sw) = (geo.strides[0], geo.strides[1]);
    let (dh, dw) = (geo.dilations[0], geo.dilations[1]);
    let (ph, pw) = (geo.pad_begin[0], geo.pad_begin[1]);
    let (oh, ow) = (geo.out[0], geo.out[1]);
    let ksize = cg * kh * kw;
    assert!(xg.len() >= cg * h * w && wg.len() >= mg * ksize && og.len() >= mg * oh * ow);
    if mg == 0 || oh * ow == 0 {
        return;
    }
    // The phase planes a tap reads, numbered in first-use order.
    let mut phases: Vec<(usize, usize)> = Vec::new();
    let mut tap_phase = Vec::with_capacity(kh * kw);
    for ki in 0..kh {
        for kj in 0..kw {
            let ph_ = ((ki * dh) % sh, (kj * dw) % sw);
            let idx = phases.iter().position(|&p| p == ph_).unwrap_or_else(|| {
                phases.push(ph_);
                phases.len() - 1
            });
            tap_phase.push((idx, (ki * dh) / sh, (kj * dw) / sw));
        }
    }
    let hq = oh + (dh * (kh - 1)) / sh;
    let wq = ow + (dw * (kw - 1)) / sw;
    let plane = hq * wq;
    let grid = oh * wq;
    let tiles = grid.div_ceil(NT);
    let npad = tiles * NT;
    // Every run read by the last tile stays inside the buffer: slack past the last plane.
    let xq_len = cg * phases.len() * plane + npad;
    // The planes' buffer is kept by the thread between calls (taken out, so that a call
    // nested in this one by rayon's work stealing gets its own). Every element of the planes
    // is written below, padding included, in parallel; only the slack is cleared here.
    let mut xq = SCRATCH.take();
    if xq.len() < xq_len {
        xq.resize(xq_len, 0.0);
    }
    xq[cg * phases.len() * plane..xq_len].fill(0.0);
    xq[..cg * phases.len() * plane]
        .par_chunks_mut(phases.len() * plane)
        .enumerate()
        .for_each(|(c, dst)| {
            let src = &xg[c * h * w..(c + 1) * h * w];
            for (pi, &(rp, cp)) in phases.iter().enumerate() {
                let d = &mut dst[pi * plane..(pi + 1) * plane];
                // Columns q with 0 <= q·sw + cp − pw < w.
                let lo = pw.saturating_sub(cp).div_ceil(sw).min(wq);
                let hi = (w + pw).saturating_sub(cp).div_ceil(sw).clamp(lo, wq);
                for r in 0..hq {
                    let iy = (r * sh + rp) as isize - ph as isize;
                    let drow = &mut d[r * wq..(r + 1) * wq];
                    if iy < 0 || iy >= h as isize || lo == hi {
                        drow.fill(0.0);
                        continue;
                    }
                    let srow = &src[iy as usize * w..(iy as usize + 1) * w];
                    drow[..lo].fill(0.0);
                    drow[hi..].fill(0.0);
                    super::copy_strided(&mut drow[lo..hi], srow, lo * sw + cp - pw, sw);
                }
            }
        });
    let n_phases = phases.len();
    let offsets: Vec<usize> = (0..cg)
        .flat_map(|c| {
            let tap_phase = &tap_phase;
            tap_phase
                .iter()
                .map(move |&(pi, ry, rx)| (c * n_phases + pi) * plane + ry * wq + rx)
        })
        .collect();
    let out_plane = oh * ow;
    let outp = SendPtr(og.as_mut_ptr().cast::<f32>());
    // Output channels in tiles of as even a height as fits (16 = 6 + 5 + 5, not 6 + 6 + 4).
    let m_tiles = mg.div_ceil(MR);
    let m_start = |i: usize| i * (mg / m_tiles) + i.min(mg % m_tiles);
    // Work items of up to P_TILES position tiles, at least sixteen per thread so that the
    // threads finish together (with four, 96×52×52 came in 11 items of 4 tiles, and one
    // thread did 6 of them: 194 GFLOP/s on two threads against 209 now); too few position
    // tiles for that (small maps deep in a network) and the channel tiles are split
    // between items too.
    let want = 16 * rayon::current_num_threads();
    // A small map with many channels (ResNet's 256×14×14) is split by channel tiles only,
    // each item taking every position tile: an item then reads its weights once, not once
    // per position tile (256×14×14 on two threads: 163 → 171 GFLOP/s).
    let per_item = if tiles < want && m_tiles >= want {
        tiles
    } else {
        (tiles / want).clamp(1, P_TILES)
    };
    let p_items = tiles.div_ceil(per_item);
    let m_parts = if p_items >= want {
        1
    } else {
        want.div_ceil(p_items).min(m_tiles)
    };
    let items = p_items * m_parts;
    // Grid position `p` is output `oy·ow + ox` when its column `ox = p mod wq` is < ow:
    // outputs before `p`, and which of the 16 positions from `p` are outputs.
    let before = |p: usize| (p / wq) * ow + (p % wq).min(ow);
    let lanes = |p: usize| {
        let mut col = p % wq;
        let mut m = 0u16;
        for l in 0..16.min(grid.saturating_sub(p)) {
            if col < ow {
                m |= 1 << l;
            }
            col += 1;
            if col == wq {
                col = 0;
            }
        }
        m
    };
    (0..items).into_par_iter().for_each(|item| {
        let (pi, part) = (item / m_parts, item % m_parts);
        let t0 = pi * per_item;
        let t1 = (t0 + per_item).min(tiles);
        let (mt0, mt1) = (part * m_tiles / m_parts, (part + 1) * m_tiles / m_parts);
        for t in t0..t1 {
            let p0 = t * NT;
            // The last tile computes only the vectors that hold grid positions (a 14×14
            // map's 224 positions are 14 vectors: 3.5 tiles, not 4).
            let nv = (grid - p0).div_ceil(16).min(NR);
            let mut store = [(0u16, 0usize); NR];
            for (j, s) in store.iter_mut().enumerate().take(nv) {
                *s = (lanes(p0 + 16 * j), before(p0 + 16 * j));
            }
            for mt in mt0..mt1 {
                let m0 = m_start(mt);
                let rows = m_start(mt + 1) - m0;
                let mut b = [0f32; MR];
                if let Some(bs) = bias {
                    b[..rows].copy_from_slice(&bs[m0..m0 + rows]);
                }
                // SAFETY: the CPU has AVX-512F (the caller checked `available`); the tile
                // reads weight rows m0..m0+rows (in `wg`) and runs of nv·16 <= NT elements at
                // `offsets[k] + p0` (inside `xq`: offsets stay below the planes' end and
                // p0 + NT <= tiles·NT, the slack), and writes the outputs of grid
                // positions p0..p0+NT (the lanes of `store`) of output channels
                // m0..m0+rows, which no other item writes.
                unsafe {
                    let a = wg.as_ptr().add(m0 * ksize);
                    let c = outp.get().add(m0 * out_plane);
                    let x = xq.as_ptr().add(p0);
                    // One instance per tile height and vector count.
                    macro_rules! by_rows {
                        ($v:literal) => {
                            match rows {
                                6 => tile::<6, $v>(a, ksize, &offsets, x, &b, c, out_plane, &store),
                                5 => tile::<5, $v>(a, ksize, &offsets, x, &b, c, out_plane, &store),
                                4 => tile::<4, $v>(a, ksize, &offsets, x, &b, c, out_plane, &store),
                                3 => tile::<3, $v>(a, ksize, &offsets, x, &b, c, out_plane, &store),
                                2 => tile::<2, $v>(a, ksize, &offsets, x, &b, c, out_plane, &store),
                                _ => tile::<1, $v>(a, ksize, &offsets, x, &b, c, out_plane, &store),
                            }
                        };
                    }
                    match nv {
                        4 => by_rows!(4),
                        3 => by_rows!(3),
                        2 => by_rows!(2),
                        _ => by_rows!(1),
                    }
                }
            }
        }
        // The activation over the item's outputs of each channel (in L1/L2 still), in
        // runs long enough to amortize a call.
        if let Some(act) = act {
            let (o0, o1) = (before(t0 * NT), before((t1 * NT).min(grid)));
            for m in m_start(mt0)..m_start(mt1) {
                // SAFETY: the outputs this item wrote above (every output of its position
                // tiles and channel tiles: the stores' lanes cover each grid column < ow).
                let row = unsafe { std::slice::from_raw_parts_mut(outp.get().add(m * out_plane + o0), o1 - o0) };
                act.apply_slice(row);
            }
        }
    });
    SCRATCH.set(xq);
}

thread_local! {
    static SCRATCH: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// `R` output channels × `NV` vectors of 16 grid positions: `bias[i] + Σ_k a[i·lda + k] ·
/// x[offsets[k] .. +16·NV]`, whose vector `j` goes, its lanes `store[j].0` packed together,
/// to `c[i·ldc + store[j].1 ..]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
unsafe fn tile<const R: usize, const NV: usize>(
    a: *const f32,
    lda: usize,
    offsets: &[usize],
    x: *const f32,
    bias: &[f32; MR],
    c: *mut f32,
    ldc: usize,
    store: &[(u16, usize); NR],
) {
    use std::arch::x86_64::{
        _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_mask_storeu_ps, _mm512_maskz_compress_ps, _mm512_set1_ps,
        _mm512_setzero_ps, _mm512_storeu_ps,
    };
    let mut acc = [[_mm512_setzero_ps(); NV]; R];
    for i in 0..R {
        let b = _mm512_set1_ps(bias[i]);
        for j in 0..NV {
            acc[i][j] = b;
        }
    }
    for (k, &off) in offsets.iter().enumerate() {
        // SAFETY: see the caller.
        unsafe {
            let xp = x.add(off);
            let mut xv = [_mm512_setzero_ps(); NV];
            for j in 0..NV {
                xv[j] = _mm512_loadu_ps(xp.add(16 * j));
            }
            for i in 0..R {
                let av = _mm512_set1_ps(*a.add(i * lda + k));
                for j in 0..NV {
                    acc[i][j] = _mm512_fmadd_ps(av, xv[j], acc[i][j]);
                }
            }
        }
    }
    for j in 0..NV {
        let (mask, at) = store[j];
        if mask == u16::MAX {
            for i in 0..R {
                // SAFETY: see the caller.
                unsafe { _mm512_storeu_ps(c.add(i * ldc + at), acc[i][j]) };
            }
        } else if mask != 0 {
            let packed = (1u32 << mask.count_ones()) as u16;
            let packed = packed.wrapping_sub(1);
            for i in 0..R {
                // SAFETY: see the caller.
                unsafe {
                    _mm512_mask_storeu_ps(c.add(i * ldc + at), packed, _mm512_maskz_compress_ps(mask, acc[i][j]));
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<const R: usize, const NV: usize>(
    _a: *const f32,
    _lda: usize,
    _offsets: &[usize],
    _x: *const f32,
    _bias: &[f32; MR],
    _c: *mut f32,
    _ldc: usize,
    _store: &[(u16, usize); NR],
) {
    unreachable!("the direct conv runs only where `available` says so")
}
