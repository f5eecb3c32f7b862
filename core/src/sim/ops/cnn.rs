//! Convolutions and pooling (NCHW). Conv runs as direct depthwise, 1×1 GEMM or im2col + GEMM.

use super::linalg::{Mat, sgemm, sgemm_then};
use super::{OpResult, f32_as, input, opt_input};
use crate::ir::{Node, Tensor};
use crate::sim::OpCtx;
use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;

/// Spatial geometry of a convolution or pooling window, N-D.
#[derive(Clone, Debug)]
pub struct Geometry {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pad_begin: Vec<usize>,
    pub pad_end: Vec<usize>,
    pub out: Vec<usize>,
}

fn ints_or(node: &Node, name: &str, n: usize, default: usize) -> Result<Vec<usize>, String> {
    match node.attr_ints(name) {
        Some(v) if v.len() == n => v
            .iter()
            .map(|&x| {
                if x > 0 {
                    Ok(x as usize)
                } else {
                    Err(format!("{name} must be positive, got {x}"))
                }
            })
            .collect(),
        Some(v) => Err(format!("{name} has {} values for {n} spatial dims", v.len())),
        None => Ok(vec![default; n]),
    }
}

/// Computes output size and padding for a window op (Conv, pools).
pub fn geometry(node: &Node, input: &[usize], kernel: &[usize], ceil_mode: bool) -> Result<Geometry, String> {
    let n = kernel.len();
    if input.len() != n {
        return Err(format!("input has {} spatial dims, kernel {n}", input.len()));
    }
    let strides = ints_or(node, "strides", n, 1)?;
    let dilations = ints_or(node, "dilations", n, 1)?;
    let auto_pad = node.attr_s("auto_pad").unwrap_or("NOTSET");
    let mut pad_begin = vec![0; n];
    let mut pad_end = vec![0; n];
    let mut out = vec![0; n];
    for i in 0..n {
        if kernel[i] == 0 {
            return Err("kernel dimensions must be positive".into());
        }
        let eff = (kernel[i] - 1) * dilations[i] + 1;
        match auto_pad {
            "SAME_UPPER" | "SAME_LOWER" => {
                let o = input[i].div_ceil(strides[i]);
                let total = (o.saturating_sub(1) * strides[i] + eff).saturating_sub(input[i]);
                let small = total / 2;
                if auto_pad == "SAME_UPPER" {
                    (pad_begin[i], pad_end[i]) = (small, total - small);
                } else {
                    (pad_begin[i], pad_end[i]) = (total - small, small);
                }
                out[i] = o;
            }
            _ => {
                if auto_pad == "NOTSET"
                    && let Some(p) = node.attr_ints("pads")
                {
                    if p.len() != 2 * n || p.iter().any(|&v| v < 0) {
                        return Err(format!("pads {p:?} do not fit {n} spatial dims"));
                    }
                    pad_begin[i] = p[i] as usize;
                    pad_end[i] = p[i + n] as usize;
                }
                let span = input[i] + pad_begin[i] + pad_end[i];
                if span < eff {
                    return Err(format!("kernel {eff} is larger than padded input {span}"));
                }
                out[i] = if ceil_mode {
                    let o = (span - eff).div_ceil(strides[i]) + 1;
                    // The last window must start inside the input or left padding.
                    if (o - 1) * strides[i] >= input[i] + pad_begin[i] {
                        o - 1
                    } else {
                        o
                    }
                } else {
                    (span - eff) / strides[i] + 1
                };
            }
        }
    }
    Ok(Geometry {
        kernel: kernel.to_vec(),
        strides,
        dilations,
        pad_begin,
        pad_end,
        out,
    })
}

/// im2col for output rows `oy0..oy1` of one image and group: `col` is `ksize × ((oy1-oy0)·ow)`.
fn im2col_rows(x: &[f32], cg: usize, h: usize, w: usize, g: &Geometry, oy0: usize, oy1: usize, col: &mut [f32]) {
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let ow = g.out[1];
    let (sh, sw) = (g.strides[0], g.strides[1]);
    let (dh, dw) = (g.dilations[0], g.dilations[1]);
    let (ph, pw) = (g.pad_begin[0] as isize, g.pad_begin[1] as isize);
    let row_len = (oy1 - oy0) * ow;
    for r in 0..cg * kh * kw {
        let dst = &mut col[r * row_len..(r + 1) * row_len];
        let ci = r / (kh * kw);
        let ki = (r / kw) % kh;
        let kj = r % kw;
        let plane = &x[ci * h * w..(ci + 1) * h * w];
        let off_w = (kj * dw) as isize - pw;
        let lo = if off_w < 0 { ((-off_w) as usize).div_ceil(sw) } else { 0 };
        let hi = if (w as isize) > off_w {
            (((w as isize - off_w) as usize).div_ceil(sw)).min(ow)
        } else {
            0
        };
        for oy in oy0..oy1 {
            let iy = (oy * sh) as isize + (ki * dh) as isize - ph;
            let drow = &mut dst[(oy - oy0) * ow..(oy - oy0 + 1) * ow];
            if iy < 0 || iy >= h as isize || lo >= hi {
                drow.fill(0.0);
                continue;
            }
            let srow = &plane[iy as usize * w..(iy as usize + 1) * w];
            drow[..lo].fill(0.0);
            drow[hi..].fill(0.0);
            let s0 = (lo as isize * sw as isize + off_w) as usize;
            super::copy_strided(&mut drow[lo..hi], srow, s0, sw);
        }
    }
}

/// One group of a general conv: tiles of output rows, each im2col'd into a cache-sized
/// buffer and multiplied by the weights, in parallel over tiles. Each tile of the output
/// starts from the group's bias and gets the activation while it is still in cache.
fn conv_tiled(
    xg: &[f32],
    wg: &[f32],
    og: &mut [f32],
    (cg, mg): (usize, usize),
    (h, w): (usize, usize),
    geo: &Geometry,
    bias: Option<&[f32]>,
    act: Option<super::elementwise::Activation>,
    threads: usize,
) {
    let (oh, ow) = (geo.out[0], geo.out[1]);
    let ksize = cg * geo.kernel[0] * geo.kernel[1];
    let plane = oh * ow;
    // About 1 MiB of im2col per tile: fewer, larger GEMMs repack the weights less often.
    let rows = ((256 * 1024) / (ksize * ow).max(1)).clamp(1, oh.max(1));
    let tiles = oh.div_ceil(rows);
    // Fewer tiles than threads (small maps deep in a network): the output channels of each
    // tile are split too, so that every thread has work (a tile's im2col is then made by
    // each of its parts).
    let parts = if tiles >= threads {
        1
    } else {
        threads.div_ceil(tiles).min(mg.div_ceil(16)).max(1)
    };
    let per_part = mg.div_ceil(parts);
    assert!(og.len() >= mg * plane);
    let out = super::SendPtr(og.as_mut_ptr());
    let pointwise = geo.kernel == [1, 1]
        && geo.strides == [1, 1]
        && geo.pad_begin.iter().chain(&geo.pad_end).all(|&p| p == 0)
        && oh == h
        && ow == w;
    (0..tiles * parts).into_par_iter().for_each_init(Vec::new, |col, item| {
        let (t, part) = (item / parts, item % parts);
        let (r0, r1) = (part * per_part, ((part + 1) * per_part).min(mg));
        if r0 >= r1 {
            return;
        }
        let oy0 = t * rows;
        let oy1 = (oy0 + rows).min(oh);
        let n = (oy1 - oy0) * ow;
        // A 1×1 conv reads its input in place: rows of `plane` elements, this tile's columns.
        let (rhs, rhs_rs): (&[f32], usize) = if pointwise {
            (&xg[oy0 * ow..], plane)
        } else {
            col.resize(ksize * n, 0.0);
            im2col_rows(xg, cg, h, w, geo, oy0, oy1, col);
            (col.as_slice(), n)
        };
        assert!(ksize == 0 || (ksize - 1) * rhs_rs + n <= rhs.len());
        // SAFETY (here and below): work item (t, part) reads and writes columns
        // oy0*ow..oy1*ow of output rows r0..r1, which no other item touches; the bounds were
        // checked above.
        let segment = |r: usize| unsafe { std::slice::from_raw_parts_mut(out.get().add(r * plane + oy0 * ow), n) };
        if let Some(b) = bias {
            for (r, &v) in b.iter().enumerate().take(r1).skip(r0) {
                segment(r).fill(v);
            }
        }
        unsafe {
            gemm::gemm(
                r1 - r0,
                n,
                ksize,
                out.get().add(r0 * plane + oy0 * ow),
                1,
                plane as isize,
                bias.is_some(),
                wg.as_ptr().add(r0 * ksize),
                1,
                ksize as isize,
                rhs.as_ptr(),
                1,
                rhs_rs as isize,
                1.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        if let Some(a) = act {
            for r in r0..r1 {
                a.apply_slice(segment(r));
            }
        }
    });
}

crate::simd_dispatch!(fn depthwise_plane_strided(
    x: &[f32],
    h: usize,
    w: usize,
    k: &[f32],
    g: &Geometry,
    out: &mut [f32],
) => depthwise_plane_generic);

/// Output columns computed together in registers by the unit-stride depthwise kernel.
const DW_BLOCK: usize = 32;

/// Depthwise conv of one channel (multiplier 1), accumulating into `out`. The plane is first copied into a zero-padded buffer (`pad`), split by column
/// phase when the horizontal stride is above 1, so that every tap reads a full contiguous
/// block of columns and the block of sums stays in registers across all taps.
fn depthwise_plane(x: &[f32], h: usize, w: usize, k: &[f32], g: &Geometry, out: &mut [f32], pad: &mut Vec<f32>) {
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (oh, ow) = (g.out[0], g.out[1]);
    let (sh, sw) = (g.strides[0], g.strides[1]);
    let (dh, dw) = (g.dilations[0], g.dilations[1]);
    let (ph, pw) = (g.pad_begin[0], g.pad_begin[1]);
    if sw > 4 || oh == 0 || ow == 0 || kh == 0 || kw == 0 || kh * kw > MAX_DW_TAPS {
        depthwise_plane_strided(x, h, w, k, g, out);
        return;
    }
    // Padded column p (input column p - pw) lies in phase p % sw at index p / sw; padded
    // row r holds input row r - ph. Output column ox, tap kj reads padded column
    // ox·sw + kj·dw: phase (kj·dw) % sw, index ox + (kj·dw) / sw.
    let owc = ow.div_ceil(DW_BLOCK) * DW_BLOCK;
    let wp = owc + (kw - 1) * dw / sw + 1;
    let hp = (oh - 1) * sh + (kh - 1) * dh + 1;
    let phase = hp * wp;
    pad.clear();
    pad.resize(sw * phase, 0.0);
    for r in 0..hp {
        let Some(iy) = r.checked_sub(ph).filter(|&iy| iy < h) else {
            continue;
        };
        let src = &x[iy * w..(iy + 1) * w];
        if sw == 1 {
            let n = w.min(wp.saturating_sub(pw));
            pad[r * wp + pw..r * wp + pw + n].copy_from_slice(&src[..n]);
        } else {
            // Phase q holds padded columns j·sw + q, i.e. input columns j·sw + q − pw.
            for q in 0..sw {
                let j0 = pw.saturating_sub(q).div_ceil(sw);
                let j1 = wp.min((w + pw).saturating_sub(q).div_ceil(sw));
                let row = &mut pad[q * phase + r * wp..][..wp];
                for j in j0..j1 {
                    row[j] = src[j * sw + q - pw];
                }
            }
        }
    }
    // Where each tap of block `c0` of output row `oy` starts, less `oy·sh·wp + c0`.
    let mut offs = [0usize; MAX_DW_TAPS];
    for ki in 0..kh {
        for kj in 0..kw {
            let col = kj * dw;
            offs[ki * kw + kj] = (col % sw) * phase + ki * dh * wp + col / sw;
        }
    }
    let taps = DwTaps {
        k: &k[..kh * kw],
        offs: &offs[..kh * kw],
    };
    #[cfg(target_arch = "x86_64")]
    let wide = crate::sim::simd::avx512();
    for oy in 0..oh {
        let orow = &mut out[oy * ow..(oy + 1) * ow];
        for c0 in (0..owc).step_by(DW_BLOCK) {
            let n = DW_BLOCK.min(ow - c0);
            let mut acc = [0f32; DW_BLOCK];
            acc[..n].copy_from_slice(&orow[c0..c0 + n]);
            let base = oy * sh * wp + c0;
            #[cfg(target_arch = "x86_64")]
            {
                if wide {
                    // SAFETY: the CPU has AVX-512F (checked at run time).
                    unsafe { dw_block_avx512(pad, &taps, base, &mut acc) };
                    orow[c0..c0 + n].copy_from_slice(&acc[..n]);
                    continue;
                }
                if crate::sim::simd::avx2_fma() {
                    // SAFETY: the CPU has AVX2 and FMA (checked at run time).
                    unsafe { dw_block_avx2(pad, &taps, base, &mut acc) };
                    orow[c0..c0 + n].copy_from_slice(&acc[..n]);
                    continue;
                }
            }
            dw_block(pad, &taps, base, &mut acc);
            orow[c0..c0 + n].copy_from_slice(&acc[..n]);
        }
    }
}

/// Taps of a depthwise kernel at most (larger kernels take the per-tap loop).
const MAX_DW_TAPS: usize = 64;

/// The weights of one depthwise plane and where each tap starts in its padded buffer
/// (relative to the start of an output block).
struct DwTaps<'a> {
    k: &'a [f32],
    offs: &'a [usize],
}

/// One block of `DW_BLOCK` output columns whose taps start at `base + offs[t]`.
fn dw_block(pad: &[f32], t: &DwTaps<'_>, base: usize, acc: &mut [f32; DW_BLOCK]) {
    for (&wv, &off) in t.k.iter().zip(t.offs) {
        let src = &pad[base + off..][..DW_BLOCK];
        for (a, &s) in acc.iter_mut().zip(src) {
            *a += wv * s;
        }
    }
}

/// [`dw_block`] with the block of sums in four AVX registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dw_block_avx2(pad: &[f32], t: &DwTaps<'_>, base: usize, acc: &mut [f32; DW_BLOCK]) {
    use std::arch::x86_64::{_mm256_fmadd_ps, _mm256_loadu_ps, _mm256_set1_ps, _mm256_storeu_ps};
    // SAFETY: every load reads 32 floats of a slice whose length was checked to be at
    // least 32; the accumulator array has 32 floats.
    unsafe {
        let p = acc.as_mut_ptr();
        let (mut a0, mut a1, mut a2, mut a3) = (
            _mm256_loadu_ps(p),
            _mm256_loadu_ps(p.add(8)),
            _mm256_loadu_ps(p.add(16)),
            _mm256_loadu_ps(p.add(24)),
        );
        for (&w, &off) in t.k.iter().zip(t.offs) {
            let wv = _mm256_set1_ps(w);
            let src = pad[base + off..][..DW_BLOCK].as_ptr();
            a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src), a0);
            a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src.add(8)), a1);
            a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src.add(16)), a2);
            a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src.add(24)), a3);
        }
        _mm256_storeu_ps(p, a0);
        _mm256_storeu_ps(p.add(8), a1);
        _mm256_storeu_ps(p.add(16), a2);
        _mm256_storeu_ps(p.add(24), a3);
    }
}

/// [`dw_block`] with the block of sums in two AVX-512 registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn dw_block_avx512(pad: &[f32], t: &DwTaps<'_>, base: usize, acc: &mut [f32; DW_BLOCK]) {
    use std::arch::x86_64::{_mm512_fmadd_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_storeu_ps};
    // SAFETY: every load reads 32 floats of a slice whose length was checked to be at
    // least 32; the accumulator array has 32 floats.
    unsafe {
        let p = acc.as_mut_ptr();
        let (mut a0, mut a1) = (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)));
        for (&w, &off) in t.k.iter().zip(t.offs) {
            let wv = _mm512_set1_ps(w);
            let src = pad[base + off..][..DW_BLOCK].as_ptr();
            a0 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(src), a0);
            a1 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(src.add(16)), a1);
        }
        _mm512_storeu_ps(p, a0);
        _mm512_storeu_ps(p.add(16), a1);
    }
}

/// Depthwise conv of one channel for any stride: one pass per tap over each output row.
#[inline(always)]
fn depthwise_plane_generic<const FMA: bool>(x: &[f32], h: usize, w: usize, k: &[f32], g: &Geometry, out: &mut [f32]) {
    use crate::sim::simd::madd;
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (oh, ow) = (g.out[0], g.out[1]);
    let (sh, sw) = (g.strides[0], g.strides[1]);
    let (dh, dw) = (g.dilations[0], g.dilations[1]);
    let (ph, pw) = (g.pad_begin[0] as isize, g.pad_begin[1] as isize);
    for kj in 0..kw {
        let off_w = (kj * dw) as isize - pw;
        let lo = if off_w < 0 { ((-off_w) as usize).div_ceil(sw) } else { 0 };
        let hi = if (w as isize) > off_w {
            (((w as isize - off_w) as usize).div_ceil(sw)).min(ow)
        } else {
            0
        };
        if lo >= hi {
            continue;
        }
        for oy in 0..oh {
            let orow = &mut out[oy * ow..(oy + 1) * ow];
            for ki in 0..kh {
                let iy = (oy * sh) as isize + (ki * dh) as isize - ph;
                if iy < 0 || iy >= h as isize {
                    continue;
                }
                let wv = k[ki * kw + kj];
                let srow = &x[iy as usize * w..(iy as usize + 1) * w];
                if sw == 1 {
                    let s0 = (lo as isize + off_w) as usize;
                    for (o, &s) in orow[lo..hi].iter_mut().zip(&srow[s0..s0 + hi - lo]) {
                        *o = madd::<FMA>(*o, wv, s);
                    }
                } else {
                    for (ox, o) in orow.iter_mut().enumerate().take(hi).skip(lo) {
                        *o = madd::<FMA>(*o, wv, srow[(ox as isize * sw as isize + off_w) as usize]);
                    }
                }
            }
        }
    }
}

/// Lifts 1-D conv attributes to 2-D by adding a unit height.
fn as_2d(shape: &[usize]) -> Vec<usize> {
    if shape.len() == 3 {
        vec![shape[0], shape[1], 1, shape[2]]
    } else {
        shape.to_vec()
    }
}

fn lift_geometry(g: Geometry) -> Geometry {
    if g.kernel.len() != 1 {
        return g;
    }
    let pre = |v: Vec<usize>, x: usize| vec![x, v[0]];
    Geometry {
        kernel: pre(g.kernel, 1),
        strides: pre(g.strides, 1),
        dilations: pre(g.dilations, 1),
        pad_begin: pre(g.pad_begin, 0),
        pad_end: pre(g.pad_end, 0),
        out: pre(g.out, 1),
    }
}

/// Conv with optional bias; `act` is applied in the output loop when given.
pub fn conv2d(
    x: &ndarray::ArrayViewD<'_, f32>,
    wt: &ndarray::ArrayViewD<'_, f32>,
    bias: Option<&[f32]>,
    group: usize,
    geo: &Geometry,
    threads: usize,
    act: Option<super::elementwise::Activation>,
) -> Result<ArrayD<f32>, String> {
    let xs = as_2d(x.shape());
    let ws = as_2d(wt.shape());
    let (n, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let (m, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    if group == 0 || c % group != 0 || m % group != 0 || cg != c / group {
        return Err(format!(
            "weights {:?} do not fit input {:?} with group {group}",
            wt.shape(),
            x.shape()
        ));
    }
    let geo = lift_geometry(geo.clone());
    if geo.kernel != [kh, kw] || geo.strides.len() != 2 || geo.dilations.len() != 2 || geo.pad_begin.len() != 2 {
        return Err(format!(
            "kernel_shape {:?} does not match weights {:?}",
            geo.kernel,
            wt.shape()
        ));
    }
    let (oh, ow) = (geo.out[0], geo.out[1]);
    let mg = m / group;
    let xd = x.as_standard_layout();
    let xd = xd.as_slice().ok_or("layout")?;
    let wd = wt.as_standard_layout();
    let wd = wd.as_slice().ok_or("layout")?;
    let plane = oh * ow;
    if let Some(b) = bias
        && b.len() != m
    {
        return Err(format!("bias has {} values for {m} output channels", b.len()));
    }
    // One input and one output channel per group, over several groups. A single channel
    // in and out (an audio front end's 1×256 filter over 43,844 samples) is one plane: the
    // depthwise kernel would run it on one thread, and the direct kernel splits its
    // positions between the threads (Basic Pitch's 26 CQT convs: 9.3 → 1.6 ms on one
    // thread, 9.1 → 1.2 ms on two).
    let depthwise = cg == 1 && mg == 1 && (group > 1 || !super::conv_direct::suits(&geo));
    let pointwise = kh == 1
        && kw == 1
        && geo.strides.iter().all(|&s| s == 1)
        && geo.pad_begin.iter().chain(&geo.pad_end).all(|&p| p == 0);
    // Every kernel applies the activation (and a pointwise conv its bias, after the sum as
    // onnxruntime does) to each piece of the output as soon as it is computed, while it is
    // in cache. A depthwise plane and a tile of the general path start from their bias
    // (onnxruntime's order too: PP-OCR rec on a photo moves by 2e-4 with the other one).
    let finish = |ch: usize, o: &mut [f32], with_bias: bool| {
        if with_bias && let Some(b) = bias {
            let v = b[ch];
            for q in o.iter_mut() {
                *q += v;
            }
        }
        if let Some(a) = act {
            a.apply_slice(o);
        }
    };
    let ksize = cg * kh * kw;
    if !depthwise && !pointwise && super::conv_direct::suits(&geo) {
        // The direct kernel writes every output: no zeroing first (on one thread, while the
        // others wait, for the allocator's clearing).
        let mut out: Vec<f32> = Vec::with_capacity(n * m * plane);
        let spare = &mut out.spare_capacity_mut()[..n * m * plane];
        for b in 0..n {
            let xb = &xd[b * c * h * w..(b + 1) * c * h * w];
            for gi in 0..group {
                let xg = &xb[gi * cg * h * w..(gi + 1) * cg * h * w];
                let wg = &wd[gi * mg * ksize..(gi + 1) * mg * ksize];
                let og = &mut spare[(b * m + gi * mg) * plane..(b * m + (gi + 1) * mg) * plane];
                let bg = bias.map(|b| &b[gi * mg..(gi + 1) * mg]);
                super::conv_direct::conv_group(xg, wg, og, (cg, mg), (h, w), &geo, bg, act);
            }
        }
        // SAFETY: `conv_group` wrote every element of each group's block, and the blocks
        // tile the buffer.
        unsafe { out.set_len(n * m * plane) };
        return conv_output(x.ndim(), n, m, (oh, ow), out);
    }
    let mut out = super::par_zeroed(n * m * plane);
    for b in 0..n {
        let xb = &xd[b * c * h * w..(b + 1) * c * h * w];
        let ob = &mut out[b * m * plane..(b + 1) * m * plane];
        if depthwise {
            // Small planes go to the threads a few at a time (a task per plane costs more
            // than the plane).
            ob.par_chunks_mut(plane)
                .enumerate()
                .with_min_len((4096 / plane.max(1)).max(1))
                .for_each_init(Vec::new, |pad, (ch, o)| {
                    if let Some(b) = bias {
                        o.fill(b[ch]);
                    }
                    depthwise_plane(
                        &xb[ch * h * w..(ch + 1) * h * w],
                        h,
                        w,
                        &wd[ch * kh * kw..(ch + 1) * kh * kw],
                        &geo,
                        o,
                        pad,
                    );
                    finish(ch, o, false);
                });
            continue;
        }
        for gi in 0..group {
            let xg = &xb[gi * cg * h * w..(gi + 1) * cg * h * w];
            let wg = &wd[gi * mg * ksize..(gi + 1) * mg * ksize];
            let og = &mut ob[gi * mg * plane..(gi + 1) * mg * plane];
            if pointwise {
                // Large channel counts: one big GEMM (the crate blocks and parallelizes it).
                let epi = |r: usize, seg: &mut [f32]| finish(gi * mg + r, seg, true);
                sgemm_then(
                    mg,
                    plane,
                    ksize,
                    Mat::rows(wg, ksize),
                    Mat::rows(xg, plane),
                    og,
                    threads,
                    &epi,
                );
            } else {
                let bg = bias.map(|b| &b[gi * mg..(gi + 1) * mg]);
                conv_tiled(xg, wg, og, (cg, mg), (h, w), &geo, bg, act, threads);
            }
        }
    }
    conv_output(x.ndim(), n, m, (oh, ow), out)
}

/// A conv's output buffer as an array of the input's rank (3: N×M×W, else N×M×H×W).
fn conv_output(
    rank: usize,
    n: usize,
    m: usize,
    (oh, ow): (usize, usize),
    out: Vec<f32>,
) -> Result<ArrayD<f32>, String> {
    let mut shape = vec![n, m];
    shape.extend(if rank == 3 { vec![ow] } else { vec![oh, ow] });
    ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| e.to_string())
}

fn kernel_of(node: &Node, wshape: &[usize]) -> Vec<usize> {
    node.attr_ints("kernel_shape").map_or_else(
        || wshape[2..].to_vec(),
        |k| k.iter().map(|&v| v.max(1) as usize).collect(),
    )
}

fn conv(node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Result<Tensor, String> {
    let xt = input(inputs, 0)?;
    let x = xt.f32_cow();
    let wt = input(inputs, 1)?.f32_cow();
    let bias = opt_input(inputs, 2).map(Tensor::to_f32);
    if x.ndim() < 3 || x.ndim() > 4 || wt.ndim() != x.ndim() {
        return Err(format!(
            "Conv supports 1-D and 2-D NCHW inputs; got input {:?}, weights {:?}",
            x.shape(),
            wt.shape()
        ));
    }
    let kernel = kernel_of(node, wt.shape());
    let geo = geometry(node, &x.shape()[2..], &kernel, false)?;
    let group = node.attr_i("group").unwrap_or(1).max(1) as usize;
    let b = bias.as_ref().map(|b| b.iter().copied().collect::<Vec<f32>>());
    // com.microsoft FusedConv carries its activation in attributes; Conv has none.
    let act = super::elementwise::Activation::from_attrs(node)?;
    let r = conv2d(&x.view(), &wt.view(), b.as_deref(), group, &geo, ctx.threads, act)?;
    Ok(f32_as(xt.dtype(), r))
}

fn conv_transpose(node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Result<Tensor, String> {
    let xt = input(inputs, 0)?;
    let x = xt.f32_cow();
    let wt = input(inputs, 1)?.f32_cow();
    let bias = opt_input(inputs, 2).map(Tensor::to_f32);
    if x.ndim() < 3 || x.ndim() > 4 || wt.ndim() != x.ndim() {
        return Err(format!(
            "ConvTranspose supports 1-D and 2-D inputs; got {:?}",
            x.shape()
        ));
    }
    let nsp = x.ndim() - 2;
    let group = node.attr_i("group").unwrap_or(1).max(1) as usize;
    let kernel = kernel_of(node, wt.shape());
    let strides = ints_or(node, "strides", nsp, 1)?;
    let dil = ints_or(node, "dilations", nsp, 1)?;
    let outpad: Vec<usize> = node
        .attr_ints("output_padding")
        .map_or(vec![0; nsp], |v| v.iter().map(|&p| p.max(0) as usize).collect());
    let in_sp = &x.shape()[2..];
    let mut pb = vec![0usize; nsp];
    let mut pe = vec![0usize; nsp];
    let mut out_sp = vec![0usize; nsp];
    let auto_pad = node.attr_s("auto_pad").unwrap_or("NOTSET");
    let out_shape_attr = node
        .attr_ints("output_shape")
        .map(|v| v[v.len().saturating_sub(nsp)..].to_vec());
    for i in 0..nsp {
        let full = strides[i] * (in_sp[i] - 1) + outpad[i] + (kernel[i] - 1) * dil[i] + 1;
        let target = match (&out_shape_attr, auto_pad) {
            (Some(o), _) => Some(o[i].max(0) as usize),
            (None, "SAME_UPPER" | "SAME_LOWER") => Some(in_sp[i] * strides[i]),
            _ => None,
        };
        if let Some(t) = target {
            let total = full.saturating_sub(t);
            if auto_pad == "SAME_UPPER" || (auto_pad != "SAME_LOWER" && out_shape_attr.is_some()) {
                (pb[i], pe[i]) = (total / 2, total - total / 2);
            } else {
                (pb[i], pe[i]) = (total - total / 2, total / 2);
            }
            out_sp[i] = t;
        } else {
            if let Some(p) = node.attr_ints("pads") {
                pb[i] = p[i].max(0) as usize;
                pe[i] = p[i + nsp].max(0) as usize;
            }
            out_sp[i] = full.checked_sub(pb[i] + pe[i]).ok_or("padding larger than output")?;
        }
    }
    let xs = as_2d(x.shape());
    let ws = as_2d(wt.shape());
    let lift = |v: &[usize], d: usize| if nsp == 1 { vec![d, v[0]] } else { v.to_vec() };
    let (kernel, strides, dil, pb, out_sp) = (
        lift(&kernel, 1),
        lift(&strides, 1),
        lift(&dil, 1),
        lift(&pb, 0),
        lift(&out_sp, 1),
    );
    let (n, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let (cw, mg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    if kernel != [kh, kw] {
        return Err(format!("kernel_shape does not match weights {:?}", wt.shape()));
    }
    if cw != c || c % group != 0 {
        return Err(format!("weights {:?} do not fit input {:?}", wt.shape(), x.shape()));
    }
    let cg = c / group;
    let m = mg * group;
    let (oh, ow) = (out_sp[0], out_sp[1]);
    let xd = x.as_standard_layout();
    let xd = xd.as_slice().ok_or("layout")?;
    let wd = wt.as_standard_layout();
    let wd = wd.as_slice().ok_or("layout")?;
    let mut out = vec![0f32; n * m * oh * ow];
    let rows = mg * kh * kw;
    let mut col = vec![0f32; rows * h * w];
    for b in 0..n {
        for gi in 0..group {
            let xg = &xd[(b * c + gi * cg) * h * w..(b * c + (gi + 1) * cg) * h * w];
            let wg = &wd[gi * cg * rows..(gi + 1) * cg * rows];
            // col (rows × HW) = Wᵀ (rows × cg) · X (cg × HW)
            sgemm(
                rows,
                h * w,
                cg,
                Mat::transposed(wg, rows),
                Mat::rows(xg, h * w),
                &mut col,
                false,
                ctx.threads,
            );
            let og = &mut out[(b * m + gi * mg) * oh * ow..(b * m + (gi + 1) * mg) * oh * ow];
            og.par_chunks_mut(oh * ow).enumerate().for_each(|(mi, plane)| {
                for ki in 0..kh {
                    for kj in 0..kw {
                        let crow = &col[((mi * kh + ki) * kw + kj) * h * w..][..h * w];
                        // Input columns ix with 0 ≤ ix·s + off < ow, off = kj·d − pad.
                        let (s1, off) = (strides[1], (kj * dil[1]) as isize - pb[1] as isize);
                        let ix0 = if off < 0 { (-off as usize).div_ceil(s1) } else { 0 };
                        let ix1 = w.min(((ow as isize - off).max(0) as usize).div_ceil(s1));
                        for iy in 0..h {
                            let oy = (iy * strides[0] + ki * dil[0]) as isize - pb[0] as isize;
                            if oy < 0 || oy >= oh as isize || ix0 >= ix1 {
                                continue;
                            }
                            let orow = &mut plane[oy as usize * ow..][..ow];
                            let src = &crow[iy * w..][..w];
                            for ix in ix0..ix1 {
                                orow[(ix as isize * s1 as isize + off) as usize] += src[ix];
                            }
                        }
                    }
                }
            });
        }
    }
    if let Some(bv) = &bias {
        let bv: Vec<f32> = bv.iter().copied().collect();
        out.par_chunks_mut(oh * ow).enumerate().for_each(|(i, p)| {
            let v = bv[i % m];
            for x in p.iter_mut() {
                *x += v;
            }
        });
    }
    let mut shape = vec![n, m];
    shape.extend(if nsp == 1 { vec![ow] } else { vec![oh, ow] });
    Ok(f32_as(
        xt.dtype(),
        ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| e.to_string())?,
    ))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pool {
    Max,
    Avg,
    Lp(i32),
}

/// One plane of a 2-D max or average pool, separably: for each output row, the input rows
/// of its window are reduced into a padded row (so that no bound is checked in the inner
/// loops; the height first, which a stride along it makes the smaller pass), then that row
/// is reduced along the width. `div` holds, for an average, the divisor of each output
/// position (row count × column count); the loops over a row are plain slice loops the
/// compiler vectorizes.
#[inline(always)]
fn pool2d_plane_impl<const FMA: bool>(
    src: &[f32],
    (h, w): (usize, usize),
    g: &Geometry,
    max: bool,
    div: &[f32],
    bufs: &mut (Vec<f32>, Vec<f32>),
    out: &mut [f32],
) {
    let (oh, ow) = (g.out[0], g.out[1]);
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (sh, sw) = (g.strides[0], g.strides[1]);
    let (dh, dw) = (g.dilations[0], g.dilations[1]);
    let (pt, pl) = (g.pad_begin[0], g.pad_begin[1]);
    let init = if max { f32::NEG_INFINITY } else { 0.0 };
    // The padded row covers every window, ceil-mode windows past the end padding included.
    let wp = (w + pl + g.pad_end[1]).max((ow - 1) * sw + (kw - 1) * dw + 1);
    // With a stride, the padded row is split into its `sw` phases (columns ≡ q mod sw), so
    // that every tap reads a contiguous run of one phase: loops over runs vectorize.
    let wq = wp.div_ceil(sw);
    let (padded, _) = bufs;
    padded.clear();
    padded.resize(wp + if sw > 1 { sw * wq } else { 0 }, init);
    for oy in 0..oh {
        let (row, phases) = padded.split_at_mut(wp);
        let acc = &mut row[pl..pl + w];
        let mut any = false;
        for i in 0..kh {
            let iy = (oy * sh + i * dh) as isize - pt as isize;
            if iy < 0 || iy >= h as isize {
                continue;
            }
            let r = &src[iy as usize * w..(iy as usize + 1) * w];
            if !any {
                acc.copy_from_slice(r);
                any = true;
            } else if max {
                acc.iter_mut().zip(r).for_each(|(a, &v)| *a = a.max(v));
            } else {
                acc.iter_mut().zip(r).for_each(|(a, &v)| *a += v);
            }
        }
        if !any {
            // A window wholly in the padding (ceil mode).
            acc.fill(init);
        }
        if sw == 2 {
            let (even, odd) = phases.split_at_mut(wq);
            for ((e, o), p) in even.iter_mut().zip(odd.iter_mut()).zip(row.chunks_exact(2)) {
                (*e, *o) = (p[0], p[1]);
            }
            if wp % 2 == 1 {
                even[wq - 1] = row[wp - 1];
            }
        } else if sw > 2 {
            for (i, col) in row.chunks(sw).enumerate() {
                for (q, &v) in col.iter().enumerate() {
                    phases[q * wq + i] = v;
                }
            }
        }
        let o = &mut out[oy * ow..(oy + 1) * ow];
        for j in 0..kw {
            let tap = if sw == 1 {
                &row[j * dw..j * dw + ow]
            } else {
                let (q, at) = ((j * dw) % sw, (j * dw) / sw);
                &phases[q * wq + at..q * wq + at + ow]
            };
            if j == 0 {
                o.copy_from_slice(tap);
            } else if max {
                o.iter_mut().zip(tap).for_each(|(a, &v)| *a = a.max(v));
            } else {
                o.iter_mut().zip(tap).for_each(|(a, &v)| *a += v);
            }
        }
        if !max {
            o.iter_mut()
                .zip(&div[oy * ow..(oy + 1) * ow])
                .for_each(|(a, &d)| *a = if d == 0.0 { 0.0 } else { *a / d });
        }
    }
}

crate::simd_dispatch!(fn pool2d_plane(
    src: &[f32],
    hw: (usize, usize),
    g: &Geometry,
    max: bool,
    div: &[f32],
    bufs: &mut (Vec<f32>, Vec<f32>),
    out: &mut [f32],
) => pool2d_plane_impl);

/// 2-D max or average pooling of every plane (no argmax indices), in parallel over planes.
fn pool2d(xd: &[f32], planes: usize, (h, w): (usize, usize), g: &Geometry, max: bool, count_pad: bool) -> Vec<f32> {
    let (oh, ow) = (g.out[0], g.out[1]);
    // Per axis, how many taps of the window at output position `o` count: inside the input,
    // or with `count_include_pad` inside the input or its padding.
    let counts = |ax: usize, n: usize, size: usize| -> Vec<usize> {
        let (lo, hi) = if count_pad {
            (-(g.pad_begin[ax] as isize), (size + g.pad_end[ax]) as isize)
        } else {
            (0, size as isize)
        };
        (0..n)
            .map(|o| {
                (0..g.kernel[ax])
                    .filter(|&k| {
                        let p = (o * g.strides[ax] + k * g.dilations[ax]) as isize - g.pad_begin[ax] as isize;
                        p >= lo && p < hi
                    })
                    .count()
            })
            .collect()
    };
    let div: Vec<f32> = if max {
        Vec::new()
    } else {
        let (cy, cx) = (counts(0, oh, h), counts(1, ow, w));
        cy.iter()
            .flat_map(|&a| cx.iter().map(move |&b| (a * b) as f32))
            .collect()
    };
    let mut out = super::par_zeroed(planes * oh * ow);
    out.par_chunks_mut((oh * ow).max(1)).enumerate().for_each_init(
        || (Vec::new(), Vec::new()),
        |bufs, (pi, o)| pool2d_plane(&xd[pi * h * w..(pi + 1) * h * w], (h, w), g, max, &div, bufs, o),
    );
    out
}

/// N-D pooling over NC… inputs. Returns the pooled values and, for MaxPool with `want_idx`,
/// flat argmax indices.
fn pool(
    node: &Node,
    x: &ndarray::ArrayViewD<'_, f32>,
    kind: Pool,
    want_idx: bool,
) -> Result<(ArrayD<f32>, Vec<i64>), String> {
    if x.ndim() < 3 {
        return Err(format!("pooling needs an N×C×… input, got {:?}", x.shape()));
    }
    let sp = &x.shape()[2..];
    let kernel: Vec<usize> = node
        .attr_ints("kernel_shape")
        .ok_or("kernel_shape missing")?
        .iter()
        .map(|&v| v.max(1) as usize)
        .collect();
    let ceil = node.attr_i("ceil_mode").unwrap_or(0) != 0;
    let g = geometry(node, sp, &kernel, ceil)?;
    let count_pad = node.attr_i("count_include_pad").unwrap_or(0) != 0;
    let storage_order = node.attr_i("storage_order").unwrap_or(0);
    let nsp = sp.len();
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let in_plane: usize = sp.iter().product();
    let out_plane: usize = g.out.iter().product();
    let xs = x.as_standard_layout();
    let xd = xs.as_slice().ok_or("layout")?;
    let mut shape = vec![n, c];
    shape.extend(&g.out);
    if nsp == 2 && !matches!(kind, Pool::Lp(_)) && !want_idx && out_plane > 0 {
        let out = pool2d(xd, n * c, (sp[0], sp[1]), &g, kind == Pool::Max, count_pad);
        return Ok((
            ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| e.to_string())?,
            Vec::new(),
        ));
    }
    let mut out = vec![0f32; n * c * out_plane];
    let mut idx = vec![0i64; if kind == Pool::Max { n * c * out_plane } else { 0 }];
    let win: usize = kernel.iter().product();
    let work = |(pi, (dst, ids)): (usize, (&mut [f32], &mut [i64]))| {
        let src = &xd[pi * in_plane..(pi + 1) * in_plane];
        let mut o_idx = vec![0usize; nsp];
        for (oi, d) in dst.iter_mut().enumerate() {
            let mut rem = oi;
            for k in (0..nsp).rev() {
                o_idx[k] = rem % g.out[k];
                rem /= g.out[k];
            }
            let mut acc = match kind {
                Pool::Max => f32::NEG_INFINITY,
                _ => 0.0,
            };
            let mut best = -1i64;
            let mut count = 0usize;
            let mut padded_count = 0usize;
            for wi in 0..win {
                let mut r = wi;
                let mut flat = 0usize;
                let mut inside = true;
                let mut in_padded = true;
                let mut coords = [0usize; 8];
                for k in (0..nsp).rev() {
                    let kk = r % kernel[k];
                    r /= kernel[k];
                    let pos = (o_idx[k] * g.strides[k] + kk * g.dilations[k]) as isize - g.pad_begin[k] as isize;
                    if pos < 0 || pos >= sp[k] as isize {
                        inside = false;
                        if pos < -(g.pad_begin[k] as isize) || pos >= (sp[k] + g.pad_end[k]) as isize {
                            in_padded = false;
                        }
                    } else if k < 8 {
                        coords[k] = pos as usize;
                    }
                }
                if in_padded {
                    padded_count += 1;
                }
                if !inside {
                    continue;
                }
                for k in 0..nsp {
                    flat = flat * sp[k] + coords[k];
                }
                let v = src[flat];
                count += 1;
                match kind {
                    Pool::Max => {
                        if v > acc || best < 0 {
                            acc = v;
                            let sflat = if storage_order == 1 && nsp == 2 {
                                coords[1] * sp[0] + coords[0]
                            } else {
                                flat
                            };
                            best = sflat as i64;
                        }
                    }
                    Pool::Avg => acc += v,
                    Pool::Lp(p) => acc += v.abs().powi(p),
                }
            }
            *d = match kind {
                Pool::Max => acc,
                Pool::Avg => {
                    let div = if count_pad { padded_count } else { count };
                    if div == 0 { 0.0 } else { acc / div as f32 }
                }
                Pool::Lp(p) => acc.powf(1.0 / p as f32),
            };
            if kind == Pool::Max {
                ids[oi] = (pi * in_plane) as i64 + best;
            }
        }
    };
    if kind == Pool::Max {
        out.par_chunks_mut(out_plane.max(1))
            .zip(idx.par_chunks_mut(out_plane.max(1)))
            .enumerate()
            .for_each(work);
    } else {
        let mut dummy = vec![0i64; n * c * out_plane];
        out.par_chunks_mut(out_plane.max(1))
            .zip(dummy.par_chunks_mut(out_plane.max(1)))
            .enumerate()
            .for_each(work);
    }
    Ok((
        ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| e.to_string())?,
        idx,
    ))
}

/// Global max or average pool over every axis after the first two; averages summed in f64.
fn global_pool(x: &ArrayD<f32>, max: bool) -> Result<ArrayD<f32>, String> {
    if x.ndim() < 3 {
        return Err("global pooling needs an N×C×… input".into());
    }
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let plane: usize = x.shape()[2..].iter().product();
    let xs = x.as_standard_layout();
    let xd = xs.as_slice().ok_or("layout")?;
    let out: Vec<f32> = xd
        .par_chunks(plane.max(1))
        .map(|p| {
            if max {
                p.iter().copied().fold(f32::NEG_INFINITY, f32::max)
            } else {
                (super::sum_f64_by(p, |v| v) / plane as f64) as f32
            }
        })
        .collect();
    let mut shape = vec![n, c];
    shape.extend(std::iter::repeat_n(1, x.ndim() - 2));
    ArrayD::from_shape_vec(IxDyn(&shape), out).map_err(|e| e.to_string())
}

/// Dispatches the CNN family; `None` if `op` is not one of them.
pub fn eval(op: &str, node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Option<OpResult> {
    let r = match op {
        "Conv" | "FusedConv" => conv(node, inputs, ctx).map(|t| vec![t]),
        "ConvTranspose" => conv_transpose(node, inputs, ctx).map(|t| vec![t]),
        "MaxPool" | "AveragePool" | "LpPool" => (|| {
            let xt = input(inputs, 0)?;
            let kind = match op {
                "MaxPool" => Pool::Max,
                "AveragePool" => Pool::Avg,
                _ => Pool::Lp(node.attr_i("p").unwrap_or(2) as i32),
            };
            let want_idx = kind == Pool::Max && node.outputs.get(1).is_some_and(Option::is_some);
            // Borrowed when it is f32 already, and the output moved, not copied (both
            // copies ran on one thread while the other waited).
            let (y, idx) = pool(node, &xt.f32_cow().view(), kind, want_idx)?;
            let out_shape = y.shape().to_vec();
            let yt = if xt.dtype().is_float() {
                f32_as(xt.dtype(), y)
            } else {
                super::quant::cast_f64(&y.mapv(f64::from), xt.dtype())?
            };
            let mut outs = vec![yt];
            if want_idx {
                outs.push(Tensor::I64(
                    ArrayD::from_shape_vec(IxDyn(&out_shape), idx).map_err(|e| e.to_string())?,
                ));
            }
            Ok(outs)
        })(),
        "GlobalAveragePool" | "GlobalMaxPool" => (|| {
            let xt = input(inputs, 0)?;
            Ok(vec![f32_as(
                xt.dtype(),
                global_pool(&xt.to_f32(), op == "GlobalMaxPool")?,
            )])
        })(),
        _ => return None,
    };
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Attr;

    fn pool_node(attrs: Vec<(&str, Attr)>) -> Node {
        Node {
            name: "pool".into(),
            op: "MaxPool".into(),
            domain: String::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            attrs: attrs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            origin: Vec::new(),
        }
    }

    /// The separable 2-D pool against the general N-D loop (the same pool on a 3-D input
    /// whose last axis is 1), for max and average, with and without counting the padding,
    /// over kernels, strides, dilations, asymmetric pads and ceil mode.
    #[test]
    fn separable_pool_matches_nd_loop() {
        let mut seed = 3u32;
        let mut next = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        for &(h, w, k, s, d, pads, ceil) in &[
            (10, 10, 5, 1, 1, [2, 2, 2, 2], 0),
            (56, 57, 3, 2, 1, [1, 1, 1, 1], 0),
            (9, 13, 3, 2, 1, [0, 1, 1, 0], 1),
            (8, 11, 2, 2, 1, [0, 0, 0, 0], 1),
            (12, 9, 3, 1, 2, [2, 1, 0, 2], 0),
            (7, 7, 7, 1, 1, [0, 0, 0, 0], 0),
            (6, 20, 3, 3, 1, [1, 1, 1, 1], 1),
        ] {
            let x: Vec<f32> = (0..2 * h * w).map(|_| next()).collect();
            for kind in [Pool::Max, Pool::Avg] {
                for count_pad in [0, 1] {
                    let attrs = |n: usize| {
                        let mut p = pads[..2].to_vec();
                        p.resize(n, 0);
                        p.extend(&pads[2..]);
                        p.resize(2 * n, 0);
                        vec![
                            ("kernel_shape", Attr::Ints([k as i64, k as i64, 1][..n].to_vec())),
                            ("strides", Attr::Ints([s as i64, s as i64, 1][..n].to_vec())),
                            ("dilations", Attr::Ints([d as i64, d as i64, 1][..n].to_vec())),
                            ("pads", Attr::Ints(p)),
                            ("ceil_mode", Attr::Int(ceil)),
                            ("count_include_pad", Attr::Int(count_pad)),
                        ]
                    };
                    let x2 = ArrayD::from_shape_vec(IxDyn(&[1, 2, h, w]), x.clone()).expect("shape");
                    let x3 = ArrayD::from_shape_vec(IxDyn(&[1, 2, h, w, 1]), x.clone()).expect("shape");
                    let (fast, _) = pool(&pool_node(attrs(2)), &x2.view(), kind, false).expect("2-D pool");
                    let (nd, _) = pool(&pool_node(attrs(3)), &x3.view(), kind, false).expect("3-D pool");
                    assert_eq!(&fast.shape()[..4], &nd.shape()[..4], "{h}x{w} k{k} s{s} d{d} {pads:?}");
                    for (i, (a, b)) in fast.iter().zip(nd.iter()).enumerate() {
                        assert!(
                            (a - b).abs() <= 1e-6 || a == b,
                            "{h}x{w} k{k} s{s} d{d} {pads:?} ceil {ceil} pad {count_pad}: element {i}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    /// The blocked depthwise kernel (padded, phase-split, AVX2 where present) against the
    /// plain per-tap loop, over strides, dilations, paddings and widths around a block.
    #[test]
    fn blocked_depthwise_matches_plain_loop() {
        let mut seed = 7u32;
        let mut next = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        for &(h, w, k, s, d, p) in &[
            (9, 70, 3, 1, 1, 1),
            (6, 80, 5, 1, 1, 2),
            (12, 33, 3, 2, 1, 1),
            (11, 65, 5, 2, 1, 2),
            (7, 40, 3, 3, 2, 2),
            (5, 31, 3, 1, 2, 0),
            (4, 100, 1, 2, 1, 0),
        ] {
            let x: Vec<f32> = (0..h * w).map(|_| next()).collect();
            let kern: Vec<f32> = (0..k * k).map(|_| next()).collect();
            let out_dim = |n: usize| (n + 2 * p - d * (k - 1) - 1) / s + 1;
            let geo = Geometry {
                kernel: vec![k, k],
                strides: vec![s, s],
                dilations: vec![d, d],
                pad_begin: vec![p, p],
                pad_end: vec![p, p],
                out: vec![out_dim(h), out_dim(w)],
            };
            let plane = geo.out[0] * geo.out[1];
            let mut want = vec![0.25f32; plane];
            depthwise_plane_generic::<false>(&x, h, w, &kern, &geo, &mut want);
            let mut got = vec![0.25f32; plane];
            depthwise_plane(&x, h, w, &kern, &geo, &mut got, &mut Vec::new());
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5,
                    "{h}x{w} k{k} s{s} d{d} p{p}: element {i}: {a} vs {b}"
                );
            }
        }
    }

    /// A small pseudo-random conv group: input, weights, bias and geometry.
    fn random_group(
        (c, m, h, w): (usize, usize, usize, usize),
        (kh, kw): (usize, usize),
        (sh, sw): (usize, usize),
        (dh, dw): (usize, usize),
        pads: [usize; 4],
        seed: u32,
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>, Geometry) {
        let mut seed = seed;
        let mut next = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        let out = |n: usize, k: usize, s: usize, d: usize, p: usize| (n + p - d * (k - 1) - 1) / s + 1;
        let geo = Geometry {
            kernel: vec![kh, kw],
            strides: vec![sh, sw],
            dilations: vec![dh, dw],
            pad_begin: vec![pads[0], pads[1]],
            pad_end: vec![pads[2], pads[3]],
            out: vec![
                out(h, kh, sh, dh, pads[0] + pads[2]),
                out(w, kw, sw, dw, pads[1] + pads[3]),
            ],
        };
        let x = (0..c * h * w).map(|_| next()).collect();
        let wt = (0..m * c * kh * kw).map(|_| next()).collect();
        let b = (0..m).map(|_| next()).collect();
        (x, wt, b, geo)
    }

    /// (c, m, h, w), kernel, strides, dilations, pads.
    type DirectCase = (
        (usize, usize, usize, usize),
        (usize, usize),
        (usize, usize),
        (usize, usize),
        [usize; 4],
    );
    /// (c, m, h, w), square kernel, stride.
    type SpeedCase = ((usize, usize, usize, usize), usize, usize);

    /// The convolution written out as sums in f64 (bias, no activation), `[m][oy][ox]`.
    fn conv_by_sums(
        x: &[f32],
        wt: &[f32],
        b: &[f32],
        (c, m): (usize, usize),
        (h, w): (usize, usize),
        geo: &Geometry,
    ) -> Vec<f64> {
        let (kh, kw) = (geo.kernel[0], geo.kernel[1]);
        let (oh, ow) = (geo.out[0], geo.out[1]);
        let mut out = vec![0f64; m * oh * ow];
        for o in 0..m {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = f64::from(b[o]);
                    for ci in 0..c {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * geo.strides[0] + ky * geo.dilations[0]).checked_sub(geo.pad_begin[0]);
                                let ix = (ox * geo.strides[1] + kx * geo.dilations[1]).checked_sub(geo.pad_begin[1]);
                                if let (Some(iy), Some(ix)) = (iy, ix)
                                    && iy < h
                                    && ix < w
                                {
                                    acc += f64::from(x[(ci * h + iy) * w + ix])
                                        * f64::from(wt[((o * c + ci) * kh + ky) * kw + kx]);
                                }
                            }
                        }
                    }
                    out[(o * oh + oy) * ow + ox] = acc;
                }
            }
        }
        out
    }

    /// im2col + GEMM against the convolution written out as f64 sums, and the direct
    /// AVX-512 conv against im2col + GEMM on a CPU that has AVX-512 (elsewhere the portable
    /// path is all that runs, and the test says so): strides 1–3, dilations, asymmetric
    /// pads, 1-row (1-D) maps, output-channel counts around its 6-row tiles and grids around
    /// its 64-position tiles, with and without an activation.
    #[test]
    fn direct_conv_matches_im2col() {
        let direct = super::super::conv_direct::available();
        if !direct {
            println!("no AVX-512 on this CPU: im2col + GEMM checked against the f64 sums only");
        }
        let cases: &[DirectCase] = &[
            ((16, 32, 20, 20), (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
            ((3, 16, 33, 31), (3, 3), (2, 2), (1, 1), [1, 1, 1, 1]),
            ((8, 7, 9, 13), (3, 3), (2, 2), (1, 1), [0, 1, 1, 0]),
            ((5, 13, 10, 10), (5, 5), (1, 1), (1, 1), [2, 2, 2, 2]),
            ((4, 6, 12, 17), (3, 3), (1, 1), (2, 2), [2, 2, 2, 2]),
            ((6, 11, 15, 14), (3, 5), (3, 2), (1, 2), [1, 0, 2, 3]),
            ((9, 1, 7, 7), (7, 7), (1, 1), (1, 1), [0, 0, 0, 0]),
            ((12, 20, 1, 50), (1, 5), (1, 2), (1, 1), [0, 2, 0, 2]),
            ((32, 64, 10, 10), (1, 1), (2, 2), (1, 1), [0, 0, 0, 0]),
            ((10, 17, 4, 64), (2, 2), (2, 2), (1, 1), [0, 0, 0, 0]),
            // One channel in and out, a long filter (Basic Pitch's CQT front end).
            ((1, 1, 1, 2000), (1, 256), (1, 2), (1, 1), [0, 0, 0, 0]),
            // A small map with many output channels (split by channel tiles only).
            ((8, 200, 12, 12), (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
        ];
        for (n, &(dims, k, s, d, pads)) in cases.iter().enumerate() {
            let (c, m, h, w) = dims;
            let (x, wt, b, geo) = random_group(dims, k, s, d, pads, 11 + n as u32);
            let plane = geo.out[0] * geo.out[1];
            for act in [None, Some(super::super::elementwise::Activation::Silu)] {
                let mut want = vec![f32::NAN; m * plane];
                conv_tiled(&x, &wt, &mut want, (c, m), (h, w), &geo, Some(&b), act, 2);
                if act.is_none() {
                    let sums = conv_by_sums(&x, &wt, &b, (c, m), (h, w), &geo);
                    let terms = (c * k.0 * k.1) as f64;
                    for (i, (a, e)) in want.iter().zip(&sums).enumerate() {
                        assert!(
                            (f64::from(*a) - e).abs() <= 1e-6 * terms.sqrt() * (1.0 + e.abs()),
                            "case {n} {dims:?}: im2col element {i}: {a} vs {e}"
                        );
                    }
                }
                if !direct {
                    continue;
                }
                let mut got = vec![f32::NAN; m * plane];
                super::super::conv_direct::conv_group(
                    &x,
                    &wt,
                    super::super::as_uninit(&mut got),
                    (c, m),
                    (h, w),
                    &geo,
                    Some(&b),
                    act,
                );
                for (i, (a, e)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - e).abs() <= 1e-5 * (1.0 + e.abs()),
                        "case {n} {dims:?} k{k:?} s{s:?} d{d:?} {pads:?} {act:?}: element {i}: {a} vs {e}"
                    );
                }
            }
        }
    }

    /// Thread pools of one and two threads, for the micro-benchmarks.
    fn one_and_two_threads() -> Vec<rayon::ThreadPool> {
        (1..=2)
            .map(|n| rayon::ThreadPoolBuilder::new().num_threads(n).build().expect("pool"))
            .collect()
    }

    /// Not a test: the direct conv and im2col + GEMM side by side on the shapes of
    /// YOLOv8n at 320×320 and ResNet-18 (best of 40 runs each, on 1 and 2 threads).
    /// `cargo test --release -p npu-core direct_conv_speed -- --ignored --nocapture`
    #[test]
    #[ignore = "benchmark, run by hand"]
    fn direct_conv_speed() {
        let pools = one_and_two_threads();
        let cases: &[SpeedCase] = &[
            ((3, 16, 320, 320), 3, 2),
            ((16, 32, 160, 160), 3, 2),
            ((16, 16, 80, 80), 3, 1),
            ((64, 64, 40, 40), 3, 1),
            ((32, 64, 80, 80), 3, 2),
            ((64, 64, 20, 20), 3, 1),
            ((128, 128, 10, 10), 3, 1),
            ((128, 256, 20, 20), 3, 2),
            ((64, 64, 56, 56), 3, 1),
            ((96, 96, 52, 52), 3, 1),
            ((12, 24, 208, 208), 3, 1),
            ((24, 48, 208, 208), 3, 2),
            ((256, 256, 14, 14), 3, 1),
            ((512, 512, 7, 7), 3, 1),
            ((64, 128, 56, 56), 1, 2),
            ((192, 64, 40, 40), 1, 1),
            ((384, 128, 20, 20), 1, 1),
            ((32, 32, 80, 80), 1, 1),
            ((192, 96, 26, 26), 1, 1),
            ((96, 48, 52, 52), 1, 1),
            ((96, 96, 52, 52), 1, 1),
            ((48, 48, 104, 104), 1, 1),
        ];
        for &(dims, k, s) in cases {
            let (c, m, h, w) = dims;
            let p = k / 2;
            let (x, wt, b, geo) = random_group(dims, (k, k), (s, s), (1, 1), [p; 4], 5);
            let plane = geo.out[0] * geo.out[1];
            let act = Some(super::super::elementwise::Activation::Silu);
            let best = |f: &dyn Fn(&mut [f32])| {
                let mut o = vec![0f32; m * plane];
                (0..40)
                    .map(|_| {
                        let t = std::time::Instant::now();
                        f(&mut o);
                        t.elapsed().as_secs_f64() * 1e3
                    })
                    .fold(f64::MAX, f64::min)
            };
            for (threads, pool) in pools.iter().enumerate() {
                pool.install(|| {
                    let im2col = best(&|o| conv_tiled(&x, &wt, o, (c, m), (h, w), &geo, Some(&b), act, threads + 1));
                    let direct = best(&|o| {
                        super::super::conv_direct::conv_group(
                            &x,
                            &wt,
                            super::super::as_uninit(o),
                            (c, m),
                            (h, w),
                            &geo,
                            Some(&b),
                            act,
                        );
                    });
                    let gflop = 2.0 * (m * c * k * k * plane) as f64 / 1e9;
                    // The path `conv2d` takes for a 1×1 stride-1 conv: one GEMM, bias and
                    // activation after it.
                    let gemm = (k == 1 && s == 1).then(|| {
                        best(&|o| {
                            let epi = |r: usize, seg: &mut [f32]| {
                                for q in seg.iter_mut() {
                                    *q += b[r];
                                }
                                if let Some(a) = act {
                                    a.apply_slice(seg);
                                }
                            };
                            sgemm_then(
                                m,
                                plane,
                                c,
                                Mat::rows(&wt, c),
                                Mat::rows(&x, plane),
                                o,
                                threads + 1,
                                &epi,
                            );
                        })
                    });
                    println!(
                        "{dims:?} k{k} s{s} {} thread(s): im2col {im2col:.3} ms ({:.0} GFLOP/s), direct {direct:.3} ms \
                         ({:.0} GFLOP/s){}",
                        threads + 1,
                        gflop / im2col * 1e3,
                        gflop / direct * 1e3,
                        gemm.map_or(String::new(), |g| format!(
                            ", gemm {g:.3} ms ({:.0} GFLOP/s)",
                            gflop / g * 1e3
                        ))
                    );
                });
            }
        }
    }

    /// Not a test: 2-D max and average pooling on the shapes of ResNet-18's stem and
    /// YOLO's SPPF (best of 40 runs, on 1 and 2 threads).
    /// `cargo test --release -p npu-core pool_speed -- --ignored --nocapture`
    #[test]
    #[ignore = "benchmark, run by hand"]
    fn pool_speed() {
        let pools = one_and_two_threads();
        for &((c, h, w), k, s, max) in &[
            ((64, 112, 112), 3, 2, true),
            ((128, 10, 10), 5, 1, true),
            ((256, 13, 13), 5, 1, true),
            ((64, 56, 56), 3, 1, false),
        ] {
            let p = k / 2;
            let (x, _, _, geo) = random_group((c, 1, h, w), (k, k), (s, s), (1, 1), [p; 4], 7);
            for (threads, pool) in pools.iter().enumerate() {
                let ms = pool.install(|| {
                    (0..40)
                        .map(|_| {
                            let t = std::time::Instant::now();
                            std::hint::black_box(pool2d(&x, c, (h, w), &geo, max, false));
                            t.elapsed().as_secs_f64() * 1e3
                        })
                        .fold(f64::MAX, f64::min)
                });
                println!(
                    "{} {c}x{h}x{w} k{k} s{s} {} thread(s): {ms:.3} ms",
                    if max { "max" } else { "avg" },
                    threads + 1
                );
            }
        }
    }
}
