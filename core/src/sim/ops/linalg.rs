//! MatMul and Gemm on the `gemm` crate's kernels.

use super::{OpResult, SendPtr, broadcast_shapes, f32_as, input, opt_input};
use crate::ir::{Node, Tensor};
use crate::sim::OpCtx;
use ndarray::{ArrayD, Axis, IxDyn};
use rayon::prelude::*;

/// A row- or column-major view of a matrix for [`sgemm`].
#[derive(Clone, Copy)]
pub struct Mat<'a> {
    pub data: &'a [f32],
    /// Stride between rows.
    pub rs: isize,
    /// Stride between columns.
    pub cs: isize,
}

impl<'a> Mat<'a> {
    /// A row-major matrix with `cols` columns.
    pub fn rows(data: &'a [f32], cols: usize) -> Self {
        Self {
            data,
            rs: cols as isize,
            cs: 1,
        }
    }
    /// The transpose of a row-major matrix with `cols` columns.
    pub fn transposed(data: &'a [f32], cols: usize) -> Self {
        Self {
            data,
            rs: 1,
            cs: cols as isize,
        }
    }
}

/// Checks that a strided view of `rows × cols` stays inside its slice.
fn fits(m: Mat<'_>, rows: usize, cols: usize) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    let last = (rows as isize - 1) * m.rs + (cols as isize - 1) * m.cs;
    last >= 0 && (last as usize) < m.data.len() && m.rs >= 0 && m.cs >= 0
}

/// `c (m×n, row-major) = [c +] a (m×k) · b (k×n)`, in parallel when `threads > 1`.
pub fn sgemm(m: usize, n: usize, k: usize, a: Mat<'_>, b: Mat<'_>, c: &mut [f32], accumulate: bool, threads: usize) {
    sgemm_scaled(m, n, k, a, b, c, accumulate, 1.0, threads);
}

/// Runs on each row segment of C right after the block holding it is computed (while it is
/// still in cache): `(row, segment)`. Conv uses it to add the bias and apply the activation.
pub type Epilogue<'a> = &'a (dyn Fn(usize, &mut [f32]) + Sync);

/// [`sgemm`] with an epilogue over every row segment of the result.
pub fn sgemm_then(
    m: usize,
    n: usize,
    k: usize,
    a: Mat<'_>,
    b: Mat<'_>,
    c: &mut [f32],
    threads: usize,
    epi: Epilogue<'_>,
) {
    sgemm_impl(m, n, k, a, b, c, false, 1.0, threads, Some(epi));
}

/// `c = [c +] scale · a · b`.
pub fn sgemm_scaled(
    m: usize,
    n: usize,
    k: usize,
    a: Mat<'_>,
    b: Mat<'_>,
    c: &mut [f32],
    accumulate: bool,
    scale: f32,
    threads: usize,
) {
    sgemm_impl(m, n, k, a, b, c, accumulate, scale, threads, None);
}

fn sgemm_impl(
    m: usize,
    n: usize,
    k: usize,
    a: Mat<'_>,
    b: Mat<'_>,
    c: &mut [f32],
    accumulate: bool,
    scale: f32,
    threads: usize,
    epi: Option<Epilogue<'_>>,
) {
    assert!(
        fits(a, m, k) && fits(b, k, n) && c.len() >= m * n,
        "sgemm operands out of bounds"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c[..m * n].fill(0.0);
        }
        if let Some(f) = epi {
            c[..m * n].chunks_mut(n).enumerate().for_each(|(r, row)| f(r, row));
        }
        return;
    }
    if threads > 1 && m * n * k >= 1 << 16 {
        // Split the output into blocks ourselves: the crate's own splitting leaves a core
        // idle on the short, wide products of convolutions. Wide products (a 1×1 conv over
        // a map) go in four column blocks per thread, so that a thread that starts late or
        // runs slow does not hold the op up, each block packing only its own columns
        // (YOLOv8n on two threads: 23.6 → 22.4 ms); others in one block of rows (when there
        // are enough) or columns per thread.
        let (parts, by_rows) = if n >= 256 * threads && n > m {
            (4 * threads, false)
        } else {
            (threads, m >= 16 * threads || m >= n)
        };
        let len = if by_rows { m } else { n };
        let align = if by_rows { 8 } else { 16 };
        let step = len.div_ceil(parts).div_ceil(align) * align;
        let out = SendPtr(c.as_mut_ptr());
        (0..len.div_ceil(step)).into_par_iter().for_each(|p| {
            let lo = p * step;
            let cnt = step.min(len - lo);
            // SAFETY: block p writes rows (or columns) lo..lo+cnt of C, which no other block
            // touches; all operand bounds were checked above.
            unsafe {
                if by_rows {
                    gemm_raw(
                        cnt,
                        n,
                        k,
                        out.get().add(lo * n),
                        n,
                        a.data.as_ptr().offset(lo as isize * a.rs),
                        a,
                        b.data.as_ptr(),
                        b,
                        accumulate,
                        scale,
                    );
                    if let Some(f) = epi {
                        // SAFETY: rows lo..lo+cnt belong to this block only.
                        let blk = std::slice::from_raw_parts_mut(out.get().add(lo * n), cnt * n);
                        blk.chunks_mut(n).enumerate().for_each(|(r, row)| f(lo + r, row));
                    }
                } else {
                    gemm_raw(
                        m,
                        cnt,
                        k,
                        out.get().add(lo),
                        n,
                        a.data.as_ptr(),
                        a,
                        b.data.as_ptr().offset(lo as isize * b.cs),
                        b,
                        accumulate,
                        scale,
                    );
                    if let Some(f) = epi {
                        for r in 0..m {
                            // SAFETY: columns lo..lo+cnt of every row belong to this block only.
                            f(r, std::slice::from_raw_parts_mut(out.get().add(r * n + lo), cnt));
                        }
                    }
                }
            }
        });
        return;
    }
    // SAFETY: the bounds of all three operands were checked above; `c` is uniquely borrowed.
    unsafe {
        gemm_raw(
            m,
            n,
            k,
            c.as_mut_ptr(),
            n,
            a.data.as_ptr(),
            a,
            b.data.as_ptr(),
            b,
            accumulate,
            scale,
        );
    }
    if let Some(f) = epi {
        c[..m * n].chunks_mut(n).enumerate().for_each(|(r, row)| f(r, row));
    }
}

/// One single-threaded GEMM on raw pointers: `c (m×n, row stride ldc) = [c +] scale · a · b`,
/// with `a` and `b` strided as their views say.
///
/// # Safety
/// The pointers must address `m×k`, `k×n` and `m×n` elements at the views' strides.
unsafe fn gemm_raw(
    m: usize,
    n: usize,
    k: usize,
    c: *mut f32,
    ldc: usize,
    a: *const f32,
    av: Mat<'_>,
    b: *const f32,
    bv: Mat<'_>,
    accumulate: bool,
    scale: f32,
) {
    // SAFETY: guaranteed by the caller.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            1,
            ldc as isize,
            accumulate,
            a,
            av.cs,
            av.rs,
            b,
            bv.cs,
            bv.rs,
            1.0,
            scale,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Numpy matmul semantics (1-D operands promoted, batch dims broadcast) in f32.
pub fn matmul_f32(a: &ArrayD<f32>, b: &ArrayD<f32>, threads: usize) -> Result<ArrayD<f32>, String> {
    let (mut sa, mut sb) = (a.shape().to_vec(), b.shape().to_vec());
    let a_vec = sa.len() == 1;
    let b_vec = sb.len() == 1;
    if a_vec {
        sa.insert(0, 1);
    }
    if b_vec {
        sb.push(1);
    }
    if sa.len() < 2 || sb.len() < 2 {
        return Err("MatMul operands must have rank >= 1".into());
    }
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let (k2, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
    if k != k2 {
        return Err(format!("inner dimensions differ: {:?} x {:?}", a.shape(), b.shape()));
    }
    let batch = broadcast_shapes(&sa[..sa.len() - 2], &sb[..sb.len() - 2])?;
    let nb: usize = batch.iter().product();
    let mut full_a = batch.clone();
    full_a.extend([m, k]);
    let mut full_b = batch.clone();
    full_b.extend([k, n]);
    // A 1-D operand gains its unit axis; a strided operand (e.g. a transposed view) is fine.
    let av = if a_vec { a.view().insert_axis(Axis(0)) } else { a.view() };
    let bv = if b_vec { b.view().insert_axis(Axis(1)) } else { b.view() };
    // Views in standard layout are used in place; only broadcast or strided operands are copied.
    let a_b = av.broadcast(IxDyn(&full_a)).ok_or("broadcast failed")?;
    let a_std = a_b.as_standard_layout();
    // Avoid materializing a broadcast weight matrix: if b has no batch dims, share it.
    let b_shared = sb.len() == 2;
    let b_b = if b_shared {
        bv.view()
    } else {
        bv.broadcast(IxDyn(&full_b)).ok_or("broadcast failed")?
    };
    let b_std = b_b.as_standard_layout();
    let ad = a_std.as_slice().ok_or("layout")?;
    let bd = b_std.as_slice().ok_or("layout")?;
    let mut out = vec![0f32; nb * m * n];
    if b_shared && nb > 1 {
        // Fold the batch into M: one large GEMM.
        sgemm(
            nb * m,
            n,
            k,
            Mat::rows(ad, k),
            Mat::rows(bd, n),
            &mut out,
            false,
            threads,
        );
    } else {
        for i in 0..nb {
            let bs = if b_shared { bd } else { &bd[i * k * n..(i + 1) * k * n] };
            sgemm(
                m,
                n,
                k,
                Mat::rows(&ad[i * m * k..(i + 1) * m * k], k),
                Mat::rows(bs, n),
                &mut out[i * m * n..(i + 1) * m * n],
                false,
                threads,
            );
        }
    }
    let mut out_shape = batch;
    if !a_vec {
        out_shape.push(m);
    }
    if !b_vec {
        out_shape.push(n);
    }
    ArrayD::from_shape_vec(IxDyn(&out_shape), out).map_err(|e| e.to_string())
}

fn matmul(inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Result<Tensor, String> {
    let a = input(inputs, 0)?;
    let b = input(inputs, 1)?;
    match (a, b) {
        (Tensor::F32(x), Tensor::F32(y)) => Ok(Tensor::F32(matmul_f32(x, y, ctx.threads)?)),
        (Tensor::F64(_) | Tensor::F16(_) | Tensor::BF16(_), _) => {
            Ok(f32_as(a.dtype(), matmul_f32(&a.to_f32(), &b.to_f32(), ctx.threads)?))
        }
        _ => {
            // Integer matmul: exact in i64.
            let x = a.to_i64().ok_or("unsupported dtype")?;
            let y = b.to_i64().ok_or("unsupported dtype")?;
            let r = matmul_i64(&x, &y)?;
            crate::sim::ops::quant::cast(&Tensor::I64(r), a.dtype(), true, crate::ir::small::E8M0Round::Up)
        }
    }
}

fn matmul_i64(a: &ArrayD<i64>, b: &ArrayD<i64>) -> Result<ArrayD<i64>, String> {
    let af = a.mapv(|v| v as f64);
    let bf = b.mapv(|v| v as f64);
    if a.ndim() != 2 || b.ndim() != 2 {
        return Err("integer MatMul supports 2-D operands".into());
    }
    let r = af
        .into_dimensionality::<ndarray::Ix2>()
        .map_err(|e| e.to_string())?
        .dot(&bf.into_dimensionality::<ndarray::Ix2>().map_err(|e| e.to_string())?);
    Ok(r.mapv(|v| v as i64).into_dyn())
}

fn gemm_op(node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Result<Tensor, String> {
    let at = input(inputs, 0)?;
    // Borrowed where they are float32 and in standard layout already (a classifier's weights
    // are megabytes: copying them costs more than the product).
    let a = at.f32_cow();
    let b = input(inputs, 1)?.f32_cow();
    let c = opt_input(inputs, 2).map(Tensor::f32_cow);
    let alpha = node.attr_f("alpha").unwrap_or(1.0);
    let beta = node.attr_f("beta").unwrap_or(1.0);
    let ta = node.attr_i("transA").unwrap_or(0) != 0;
    let tb = node.attr_i("transB").unwrap_or(0) != 0;
    if a.ndim() != 2 || b.ndim() != 2 {
        return Err(format!(
            "Gemm needs 2-D A and B, got {:?} and {:?}",
            a.shape(),
            b.shape()
        ));
    }
    let a = a.as_standard_layout();
    let b = b.as_standard_layout();
    let (m, k) = if ta {
        (a.shape()[1], a.shape()[0])
    } else {
        (a.shape()[0], a.shape()[1])
    };
    let (k2, n) = if tb {
        (b.shape()[1], b.shape()[0])
    } else {
        (b.shape()[0], b.shape()[1])
    };
    if k != k2 {
        return Err(format!("inner dimensions differ: {k} vs {k2}"));
    }
    let ad = a.as_slice().ok_or("layout")?;
    let bd = b.as_slice().ok_or("layout")?;
    let am = if ta { Mat::transposed(ad, m) } else { Mat::rows(ad, k) };
    let bm = if tb { Mat::transposed(bd, k) } else { Mat::rows(bd, n) };
    let mut out = vec![0f32; m * n];
    let accumulate = if let Some(c) = &c {
        let cb = c
            .broadcast(IxDyn(&[m, n]))
            .ok_or_else(|| format!("C {:?} does not broadcast to [{m}, {n}]", c.shape()))?;
        for (o, v) in out.iter_mut().zip(cb.iter()) {
            *o = beta * v;
        }
        true
    } else {
        false
    };
    if m == 1 && tb {
        gemv_rows(ad, bd, k, &mut out, accumulate, alpha, ctx.threads);
    } else {
        sgemm_scaled(m, n, k, am, bm, &mut out, accumulate, alpha, ctx.threads);
    }
    let r = ArrayD::from_shape_vec(IxDyn(&[m, n]), out).map_err(|e| e.to_string())?;
    Ok(f32_as(at.dtype(), r))
}

/// `out[j] = [out[j] +] scale · Σ_k x[k]·w[j·k_len + k]`: one row times a weight matrix
/// stored by output (a classifier head, `transB` = 1), as dot products over contiguous rows,
/// in parallel over blocks of outputs. The GEMM path would pack the whole matrix for one row.
fn gemv_rows(x: &[f32], w: &[f32], k_len: usize, out: &mut [f32], accumulate: bool, scale: f32, threads: usize) {
    let dot = |row: &[f32]| -> f32 {
        let mut acc = [0f32; 16];
        let mut chunks = row.chunks_exact(16).zip(x.chunks_exact(16));
        for (r, v) in &mut chunks {
            for ((a, &p), &q) in acc.iter_mut().zip(r).zip(v) {
                *a += p * q;
            }
        }
        let tail = k_len - k_len % 16;
        let t: f32 = row[tail..].iter().zip(&x[tail..]).map(|(p, q)| p * q).sum();
        acc.iter().sum::<f32>() + t
    };
    let work = |(j0, o): (usize, &mut [f32])| {
        for (j, y) in o.iter_mut().enumerate() {
            let r = (j0 * 64 + j) * k_len;
            let v = scale * dot(&w[r..r + k_len]);
            *y = if accumulate { *y + v } else { v };
        }
    };
    if threads > 1 && out.len() * k_len >= 1 << 16 {
        out.par_chunks_mut(64).enumerate().for_each(work);
    } else {
        out.chunks_mut(64).enumerate().for_each(work);
    }
}

/// Dispatches the linear-algebra family; `None` if `op` is not one of them.
pub fn eval(op: &str, node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Option<OpResult> {
    let r = match op {
        "MatMul" => matmul(inputs, ctx),
        "Gemm" => gemm_op(node, inputs, ctx),
        // com.microsoft FusedGemm: Gemm, then the activation named in its attributes.
        "FusedGemm" => gemm_op(node, inputs, ctx).and_then(|mut y| {
            if let Some(act) = super::elementwise::Activation::from_attrs(node)?
                && let Tensor::F32(a) = &mut y
            {
                if let Some(s) = a.as_slice_mut() {
                    act.apply_slice(s);
                } else {
                    a.mapv_inplace(|v| act.apply(v));
                }
            }
            Ok(y)
        }),
        _ => return None,
    };
    Some(r.map(|t| vec![t]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The threaded GEMM against a plain f64 loop, on shapes that take each way of
    /// splitting (four column blocks per thread, rows, columns, one block), with the
    /// epilogue seeing every row segment once, with its own row index.
    #[test]
    fn threaded_gemm_and_epilogue_match_a_plain_loop() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
        for (m, n, k) in [
            (48, 2704, 96),
            (96, 676, 192),
            (197, 576, 192),
            (64, 40, 300),
            (5, 7, 3),
        ] {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0).collect();
            let mut c = vec![f32::NAN; m * n];
            let seen = std::sync::Mutex::new(vec![0usize; m]);
            let epi = |r: usize, seg: &mut [f32]| {
                seen.lock().expect("lock")[r] += seg.len();
                for v in seg.iter_mut() {
                    *v += r as f32;
                }
            };
            pool.install(|| sgemm_then(m, n, k, Mat::rows(&a, k), Mat::rows(&b, n), &mut c, 2, &epi));
            assert!(
                seen.into_inner().expect("lock").iter().all(|&s| s == n),
                "{m}×{n}×{k}: a row segment missed or seen twice"
            );
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                        .sum::<f64>()
                        + i as f64;
                    let got = f64::from(c[i * n + j]);
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{m}×{n}×{k} at ({i}, {j}): {got} vs {want}"
                    );
                }
            }
        }
    }
}
