//! Tensor-shape ops: reshape, transpose, concat, split, slice, gather, pad, resize, …

use super::{OpResult, axis_dim, input, input_ints, norm_axis, opt_input};
use crate::ir::{Attr, DType, Node, Tensor};
use crate::map_tensor;
use crate::sim::OpCtx;
use ndarray::{ArrayD, Axis, Dimension, IxDyn, Slice};

#[expect(clippy::unnecessary_wraps, reason = "every arm of the op table returns an OpResult")]
fn one(t: Tensor) -> OpResult {
    Ok(vec![t])
}

/// Output shape of ONNX Reshape (0 copies a dim unless `allowzero`, -1 is inferred).
pub fn reshape_dims(input: &[usize], spec: &[i64], allowzero: bool) -> Result<Vec<usize>, String> {
    let total: usize = input.iter().product();
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 => {
                if infer.is_some() {
                    return Err("more than one -1 in shape".into());
                }
                infer = Some(i);
                out.push(1);
            }
            0 if !allowzero => out.push(*input.get(i).ok_or("0 refers past the input rank")?),
            d if d >= 0 => out.push(d as usize),
            d => return Err(format!("invalid dimension {d}")),
        }
    }
    if let Some(i) = infer {
        let known: usize = out.iter().product();
        if known == 0 || !total.is_multiple_of(known) {
            return Err(format!("cannot reshape {input:?} into {spec:?}"));
        }
        out[i] = total / known;
    }
    if out.iter().product::<usize>() != total {
        return Err(format!("cannot reshape {input:?} ({total} elements) into {out:?}"));
    }
    Ok(out)
}

pub(crate) fn reshape(t: &Tensor, dims: &[usize]) -> Result<Tensor, String> {
    t.reshaped(dims)
        .ok_or_else(|| format!("cannot reshape {:?} into {dims:?}", t.shape()))
}

/// Squeeze/Unsqueeze axes from the attribute (old opsets) or the second input.
fn axes_of(node: &Node, inputs: &[Option<&Tensor>], idx: usize) -> Result<Option<Vec<i64>>, String> {
    if let Some(a) = node.attr_ints("axes") {
        return Ok(Some(a.to_vec()));
    }
    match opt_input(inputs, idx) {
        Some(t) => Ok(Some(t.as_i64_vec().ok_or("axes must be integers")?)),
        None => Ok(None),
    }
}

pub fn transpose(t: &Tensor, perm: &[usize]) -> Tensor {
    map_tensor!(t, a => standard_copy(&a.view().permuted_axes(IxDyn(perm))))
}

pub(crate) fn concat(ts: &[&Tensor], axis: usize) -> Result<Tensor, String> {
    let first = ts.first().ok_or("no inputs")?;
    macro_rules! cat {
        ($variant:ident) => {{
            let mut views = Vec::with_capacity(ts.len());
            for t in ts {
                match t {
                    Tensor::$variant(a) => {
                        if a.len() > 0 || a.ndim() == first.shape().len() {
                            views.push(a.view())
                        }
                    }
                    _ => return Err("inputs have different dtypes".into()),
                }
            }
            match concat_blocks(&views, axis) {
                Some(a) => Tensor::$variant(a),
                None => Tensor::$variant(ndarray::concatenate(Axis(axis), &views).map_err(|e| e.to_string())?),
            }
        }};
    }
    Ok(match first {
        Tensor::F32(_) => cat!(F32),
        Tensor::F64(_) => cat!(F64),
        Tensor::F16(_) => cat!(F16),
        Tensor::BF16(_) => cat!(BF16),
        Tensor::I8(_) => cat!(I8),
        Tensor::U8(_) => cat!(U8),
        Tensor::I16(_) => cat!(I16),
        Tensor::U16(_) => cat!(U16),
        Tensor::I32(_) => cat!(I32),
        Tensor::I64(_) => cat!(I64),
        Tensor::U32(_) => cat!(U32),
        Tensor::U64(_) => cat!(U64),
        Tensor::Bool(_) => cat!(Bool),
        Tensor::Str(_) => cat!(Str),
        Tensor::Small(dt, _) => {
            let mut views = Vec::new();
            for t in ts {
                match t {
                    Tensor::Small(d2, a) if d2 == dt => views.push(a.view()),
                    _ => return Err("inputs have different dtypes".into()),
                }
            }
            Tensor::Small(
                *dt,
                ndarray::concatenate(Axis(axis), &views).map_err(|e| e.to_string())?,
            )
        }
    })
}

/// Concatenation of standard-layout arrays that agree on every axis but `axis`: for each
/// index of the axes before it, each input's block after it, copied whole. `None` when an
/// input is strided or the shapes do not fit (ndarray's general path decides then).
fn concat_blocks<T: Clone + Send + Sync>(views: &[ndarray::ArrayViewD<'_, T>], axis: usize) -> Option<ArrayD<T>> {
    let first = views.first()?;
    let rank = first.ndim();
    if axis >= rank {
        return None;
    }
    let mut shape = first.shape().to_vec();
    shape[axis] = 0;
    let mut blocks = Vec::with_capacity(views.len());
    for v in views {
        let same = v.ndim() == rank && (0..rank).all(|a| a == axis || v.shape()[a] == first.shape()[a]);
        if !same {
            return None;
        }
        shape[axis] += v.shape()[axis];
        blocks.push((v.as_slice()?, v.shape()[axis..].iter().product::<usize>()));
    }
    let outer: usize = first.shape()[..axis].iter().product();
    let total: usize = shape.iter().product();
    let row: usize = blocks.iter().map(|b| b.1).sum();
    if total >= PAR_COPY_MIN && total < 256 * outer * blocks.len() && row > 0 && rayon::current_num_threads() > 1 {
        // Tiny pieces (a concat along a last axis of 1: Basic Pitch's harmonic stack is
        // 425,000 one-element pieces): the threads take runs of whole output rows.
        use rayon::prelude::*;
        let mut out = Vec::with_capacity(total);
        let rows_per = (1 << 14) / row + 1;
        out.spare_capacity_mut()[..total]
            .par_chunks_mut(row * rows_per)
            .enumerate()
            .for_each(|(ci, dst)| {
                let rows = dst.len() / row;
                let mut at = dst.iter_mut();
                for o in ci * rows_per..ci * rows_per + rows {
                    for &(data, len) in &blocks {
                        // The source first: `zip` takes from its first iterator before
                        // it finds the second one empty.
                        for (v, d) in data[o * len..(o + 1) * len].iter().zip(at.by_ref()) {
                            d.write(v.clone());
                        }
                    }
                }
            });
        // SAFETY: each chunk holds whole output rows (its length is a multiple of `row`, the
        // last one too, since `total` = outer·row), and every element of them was written.
        unsafe { out.set_len(total) };
        return ArrayD::from_shape_vec(IxDyn(&shape), out).ok();
    }
    let pieces = (0..outer).flat_map(|o| {
        blocks
            .iter()
            .map(move |&(data, len)| ndarray::ArrayView1::from(&data[o * len..(o + 1) * len]))
    });
    let out = gather_pieces(pieces, outer * blocks.len(), total);
    ArrayD::from_shape_vec(IxDyn(&shape), out).ok()
}

/// Elements from which copying is split between the pool's threads (below it, waking the
/// other threads costs more than the copy).
const PAR_COPY_MIN: usize = 1 << 16;

/// Elements per job of a parallel copy.
const CHUNK: usize = 1 << 14;

/// The `count` `pieces`, one after another, copied into one new buffer of `total` elements
/// (their lengths must add up to it); by the pool's threads when it is large and the pieces
/// are not tiny (a concat along a last axis of 1 is a piece per element).
fn gather_pieces<'a, T: Clone + Send + Sync + 'a>(
    pieces: impl Iterator<Item = ndarray::ArrayView1<'a, T>>,
    count: usize,
    total: usize,
) -> Vec<T> {
    use rayon::prelude::*;
    let mut out = Vec::with_capacity(total);
    if total < PAR_COPY_MIN || total < 256 * count || rayon::current_num_threads() < 2 {
        for p in pieces {
            match p.as_slice() {
                Some(s) => out.extend_from_slice(s),
                None => out.extend(p.iter().cloned()),
            }
        }
        assert_eq!(out.len(), total, "pieces do not add up to the buffer");
        return out;
    }
    // Jobs of at most CHUNK elements: a long piece is cut, short ones go in runs.
    let mut rest = &mut out.spare_capacity_mut()[..total];
    let mut jobs = Vec::new();
    for p in pieces {
        let mut from = 0;
        while from < p.len() {
            let n = (p.len() - from).min(CHUNK);
            let (dst, r) = std::mem::take(&mut rest).split_at_mut(n);
            rest = r;
            jobs.push((dst, p.slice_move(ndarray::s![from..from + n])));
            from += n;
        }
    }
    assert!(rest.is_empty(), "pieces do not add up to the buffer");
    let per_job = total / jobs.len().max(1);
    jobs.into_par_iter()
        .with_min_len((CHUNK / per_job.max(1)).max(1))
        .for_each(|(dst, src)| match src.as_slice() {
            Some(s) => {
                dst.write_clone_of_slice(s);
            }
            None => {
                for (d, v) in dst.iter_mut().zip(src.iter()) {
                    d.write(v.clone());
                }
            }
        });
    // SAFETY: the jobs' destinations tile the first `total` elements (checked above), and
    // each job wrote every element of its own.
    unsafe { out.set_len(total) };
    out
}

/// A strided view copied into standard layout. Unit axes are dropped first and views of up
/// to four remaining axes are copied at a fixed rank, where ndarray's iteration is several
/// times faster than over dynamic dimensions.
pub(crate) fn standard_copy<T: Clone + Send + Sync>(v: &ndarray::ArrayViewD<'_, T>) -> ArrayD<T> {
    use ndarray::{Ix1, Ix2, Ix3, Ix4};
    let shape = v.shape().to_vec();
    if v.is_standard_layout() || v.is_empty() {
        return v.to_owned();
    }
    let mut c = v.view();
    for ax in (0..c.ndim()).rev() {
        if c.len_of(Axis(ax)) == 1 && c.ndim() > 1 {
            c = c.index_axis_move(Axis(ax), 0);
        }
    }
    // Rows along the last axis (a transpose that keeps it, a slice of whole rows, a slice
    // with a step along it) are copied a row at a time.
    let row = c.shape().last().copied().unwrap_or(0);
    if c.ndim() > 1 && row >= 8 {
        let owned = gather_pieces(c.rows().into_iter(), c.len() / row, c.len());
        if let Ok(a) = ArrayD::from_shape_vec(IxDyn(&shape), owned) {
            return a;
        }
    }
    // Logical-order iteration at a fixed rank (fast) or at the dynamic one (the fallback).
    let owned: Vec<T> = match c.ndim() {
        1 => c
            .view()
            .into_dimensionality::<Ix1>()
            .map(|x| x.iter().cloned().collect())
            .ok(),
        2 => c
            .view()
            .into_dimensionality::<Ix2>()
            .map(|x| x.iter().cloned().collect())
            .ok(),
        3 => c
            .view()
            .into_dimensionality::<Ix3>()
            .map(|x| x.iter().cloned().collect())
            .ok(),
        4 => c
            .view()
            .into_dimensionality::<Ix4>()
            .map(|x| x.iter().cloned().collect())
            .ok(),
        _ => None,
    }
    .unwrap_or_else(|| c.iter().cloned().collect());
    match ArrayD::from_shape_vec(IxDyn(&shape), owned) {
        Ok(a) => a,
        // Not reached (same element count); the plain copy keeps it panic-free.
        Err(_) => v.as_standard_layout().into_owned(),
    }
}

pub(crate) fn slice_axis(t: &Tensor, axis: usize, start: isize, end: Option<isize>, step: isize) -> Tensor {
    map_tensor!(t, a => standard_copy(&a.slice_axis(Axis(axis), Slice::new(start, end, step))))
}

/// Clamps ONNX Slice bounds for one axis and returns (start, end, step) for ndarray.
fn slice_bounds(dim: usize, start: i64, end: i64, step: i64) -> (isize, Option<isize>, isize) {
    let d = dim as i64;
    let norm = |v: i64| if v < 0 { v + d } else { v };
    if step > 0 {
        let s = norm(start).clamp(0, d);
        let e = norm(end).clamp(0, d);
        if e <= s {
            return (0, Some(0), 1);
        }
        (s as isize, Some(e as isize), step as isize)
    } else {
        // Negative steps walk from start down to (exclusive) end.
        let s = norm(start).clamp(-1, d - 1);
        let e = norm(end).clamp(-1, d - 1);
        if s <= e {
            return (0, Some(0), 1);
        }
        // ndarray: a negative step over [e+1, s+1) iterates from s downwards.
        ((e + 1) as isize, Some((s + 1) as isize), step as isize)
    }
}

pub(crate) fn gather(data: &Tensor, indices: &Tensor, axis: usize) -> Result<Tensor, String> {
    let idx = indices.to_i64().ok_or("indices must be integers")?;
    let dim = *data.shape().get(axis).ok_or("axis out of range")? as i64;
    let mut flat = Vec::with_capacity(idx.len());
    for &i in &idx {
        let j = if i < 0 { i + dim } else { i };
        if j < 0 || j >= dim {
            return Err(format!("index {i} is out of range for axis of size {dim}"));
        }
        flat.push(j as usize);
    }
    let mut out_shape: Vec<usize> = data.shape()[..axis].to_vec();
    out_shape.extend_from_slice(idx.shape());
    out_shape.extend_from_slice(&data.shape()[axis + 1..]);
    // Runs of `inner` contiguous elements copied from the standard-layout data: for each
    // block of the axes before `axis`, one run per index.
    let inner: usize = data.shape()[axis + 1..].iter().product();
    let dim = dim as usize;
    Ok(map_tensor!(data, a => {
        let std = a.as_standard_layout();
        let src = std.as_slice().ok_or("layout")?;
        let mut out = Vec::with_capacity(src.len() / (dim * inner).max(1) * flat.len() * inner);
        for block in src.chunks_exact((dim * inner).max(1)) {
            for &j in &flat {
                out.extend_from_slice(&block[j * inner..(j + 1) * inner]);
            }
        }
        ArrayD::from_shape_vec(IxDyn(&out_shape), out).map_err(|e| e.to_string())?
    }))
}

#[expect(
    clippy::clone_on_copy,
    reason = "one body serves every dtype through `map_tensor!`, strings (not Copy) included"
)]
fn gather_elements(data: &Tensor, indices: &Tensor, axis: usize) -> Result<Tensor, String> {
    let idx = indices.to_i64().ok_or("indices must be integers")?;
    let dim = *data.shape().get(axis).ok_or("axis out of range")? as i64;
    Ok(map_tensor!(data, a => {
        let mut err = None;
        let out = ArrayD::from_shape_fn(IxDyn(idx.shape()), |ix| {
            let mut j = ix.clone();
            let mut k = idx[&ix];
            if k < 0 { k += dim; }
            if k < 0 || k >= dim { err = Some(format!("index {} out of range", idx[&ix])); k = 0; }
            j[axis] = k as usize;
            a[j].clone()
        });
        if let Some(e) = err { return Err(e); }
        out
    }))
}

fn pad(node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Result<Tensor, String> {
    let x = input(inputs, 0)?;
    let rank = x.shape().len();
    let mode = node.attr_s("mode").unwrap_or("constant");
    let (pads, value, axes): (Vec<i64>, f64, Vec<usize>) = if ctx.opset < 11 {
        let p = node
            .attr_ints("pads")
            .or_else(|| node.attr_ints("paddings"))
            .ok_or("pads missing")?
            .to_vec();
        (p, f64::from(node.attr_f("value").unwrap_or(0.0)), (0..rank).collect())
    } else {
        let p = input_ints(inputs, 1)?;
        let v = opt_input(inputs, 2)
            .and_then(|t| t.to_f64().iter().next().copied())
            .unwrap_or(0.0);
        let axes = match opt_input(inputs, 3) {
            Some(a) => a
                .as_i64_vec()
                .ok_or("axes must be integers")?
                .iter()
                .map(|&ax| norm_axis(ax, rank))
                .collect::<Result<_, _>>()?,
            None => (0..rank).collect(),
        };
        (p, v, axes)
    };
    if pads.len() != 2 * axes.len() {
        return Err(format!("expected {} pads, got {}", 2 * axes.len(), pads.len()));
    }
    let mut begin = vec![0i64; rank];
    let mut end = vec![0i64; rank];
    for (k, &ax) in axes.iter().enumerate() {
        begin[ax] = pads[k];
        end[ax] = pads[k + axes.len()];
    }
    pad_tensor(x, &begin, &end, mode, value)
}

/// Pads (or crops, for negative pads) every axis.
pub fn pad_tensor(x: &Tensor, begin: &[i64], end: &[i64], mode: &str, value: f64) -> Result<Tensor, String> {
    let shape = x.shape().to_vec();
    let mut out_shape = Vec::with_capacity(shape.len());
    for i in 0..shape.len() {
        let d = shape[i] as i64 + begin[i] + end[i];
        if d < 0 {
            return Err("padding makes a negative dimension".into());
        }
        out_shape.push(d as usize);
    }
    let fill = crate::sim::ops::quant::cast_f64(&ArrayD::from_elem(IxDyn(&[]), value), x.dtype())?;
    let src_index = |o: usize, i: usize| -> Option<usize> {
        let n = shape[i] as i64;
        let p = o as i64 - begin[i];
        if (0..n).contains(&p) {
            return Some(p as usize);
        }
        if n == 0 {
            return None;
        }
        match mode {
            "edge" => Some(p.clamp(0, n - 1) as usize),
            "reflect" => {
                if n == 1 {
                    return Some(0);
                }
                let period = 2 * (n - 1);
                let mut q = p.rem_euclid(period);
                if q >= n {
                    q = period - q;
                }
                Some(q as usize)
            }
            "wrap" => Some(p.rem_euclid(n) as usize),
            _ => None,
        }
    };
    let maps: Vec<Vec<Option<usize>>> = (0..shape.len())
        .map(|i| (0..out_shape[i]).map(|o| src_index(o, i)).collect())
        .collect();
    Ok(map_tensor!(x, a => pad_array(a, &fill, &maps, &out_shape, begin)))
}

/// The padded (or cropped) array: `maps[i][o]` is the input index that output index `o`
/// of axis `i` reads (`None`: the fill). Built row by row along the last padded axis, the
/// unpadded axes after it making each index of a row one contiguous block; the indices
/// that read the input in order (`o − begin` inside it) are copied as one run.
fn pad_array<T: Clone + Default + 'static>(
    a: &ArrayD<T>,
    fill: &Tensor,
    maps: &[Vec<Option<usize>>],
    out_shape: &[usize],
    begin: &[i64],
) -> ArrayD<T> {
    let f: T = fill_value(fill, T::default());
    let in_shape = a.shape();
    let Some(k) = (0..out_shape.len())
        .rev()
        .find(|&i| out_shape[i] != in_shape[i] || begin[i] != 0)
    else {
        return a.clone();
    };
    let a = a.as_standard_layout();
    let src = a.as_slice().expect("standard layout");
    let inner: usize = in_shape[k + 1..].iter().product();
    let (ow, iw) = (out_shape[k], in_shape[k]);
    let lead = &out_shape[..k];
    // Output indices o0..o1 of axis k read input indices o0 − b.. in order.
    let b = begin[k];
    let o0 = b.clamp(0, ow as i64) as usize;
    let o1 = (b + iw as i64).clamp(o0 as i64, ow as i64) as usize;
    let s0 = (o0 as i64 - b).max(0) as usize;
    let rows: usize = lead.iter().product();
    let mut out = Vec::with_capacity(rows * ow * inner);
    let mut idx = vec![0usize; k];
    for _ in 0..rows {
        let row = idx
            .iter()
            .zip(&maps[..k])
            .zip(in_shape)
            .try_fold(0usize, |off, ((&o, m), &n)| m[o].map(|s| off * n + s));
        match row {
            None => out.extend(std::iter::repeat_n(f.clone(), ow * inner)),
            Some(r) => {
                let s = &src[r * iw * inner..(r + 1) * iw * inner];
                let edge = |out: &mut Vec<T>, m: &Option<usize>| match m {
                    Some(c) => out.extend_from_slice(&s[c * inner..(c + 1) * inner]),
                    None => out.extend(std::iter::repeat_n(f.clone(), inner)),
                };
                maps[k][..o0].iter().for_each(|m| edge(&mut out, m));
                if o1 > o0 {
                    out.extend_from_slice(&s[s0 * inner..(s0 + o1 - o0) * inner]);
                }
                maps[k][o1..].iter().for_each(|m| edge(&mut out, m));
            }
        }
        for d in (0..k).rev() {
            idx[d] += 1;
            if idx[d] < lead[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    ArrayD::from_shape_vec(IxDyn(out_shape), out).expect("padded shape")
}

/// The fill value of a constant pad, as the element type of the padded tensor.
fn fill_value<T: Clone + 'static>(fill: &Tensor, fallback: T) -> T {
    let any: Option<&dyn std::any::Any> =
        crate::for_each_tensor!(fill, a => a.iter().next().map(|v| v as &dyn std::any::Any));
    any.and_then(|v| v.downcast_ref::<T>()).cloned().unwrap_or(fallback)
}

fn depth_space(node: &Node, x: &Tensor, to_space: bool) -> Result<Tensor, String> {
    let b = node.attr_i("blocksize").ok_or("blocksize missing")? as usize;
    let s = x.shape();
    if s.len() != 4 || b == 0 {
        return Err("expects a 4-D NCHW input".into());
    }
    let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
    if to_space {
        if c % (b * b) != 0 {
            return Err("channels not divisible by blocksize²".into());
        }
        let crd = node.attr_s("mode") == Some("CRD");
        let (tmp, perm): (Vec<usize>, [usize; 6]) = if crd {
            (vec![n, c / (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3])
        } else {
            (vec![n, b, b, c / (b * b), h, w], [0, 3, 4, 1, 5, 2])
        };
        let t = reshape(x, &tmp)?;
        reshape(&transpose(&t, &perm), &[n, c / (b * b), h * b, w * b])
    } else {
        if h % b != 0 || w % b != 0 {
            return Err("spatial size not divisible by blocksize".into());
        }
        let t = reshape(x, &[n, c, h / b, b, w / b, b])?;
        reshape(&transpose(&t, &[0, 3, 5, 1, 2, 4]), &[n, c * b * b, h / b, w / b])
    }
}

fn range(inputs: &[Option<&Tensor>]) -> Result<Tensor, String> {
    let start = input(inputs, 0)?;
    let limit = input(inputs, 1)?;
    let delta = input(inputs, 2)?;
    let s = start.to_f64().iter().next().copied().ok_or("empty start")?;
    let l = limit.to_f64().iter().next().copied().ok_or("empty limit")?;
    let d = delta.to_f64().iter().next().copied().ok_or("empty delta")?;
    if d == 0.0 {
        return Err("delta is zero".into());
    }
    let n = ((l - s) / d).ceil().max(0.0) as usize;
    if n > (1 << 31) {
        return Err("range too large".into());
    }
    match start {
        Tensor::I64(_) | Tensor::I32(_) | Tensor::I16(_) => {
            let (si, di) = (s as i64, d as i64);
            let v: ArrayD<i64> = ArrayD::from_shape_fn(IxDyn(&[n]), |i| si + di * i[0] as i64);
            crate::sim::ops::quant::cast(&Tensor::I64(v), start.dtype(), true, crate::ir::small::E8M0Round::Up)
        }
        Tensor::F32(_) => {
            let (sf, df) = (s as f32, d as f32);
            Ok(Tensor::F32(ArrayD::from_shape_fn(IxDyn(&[n]), |i| {
                sf + df * i[0] as f32
            })))
        }
        _ => crate::sim::ops::quant::cast_f64(
            &ArrayD::from_shape_fn(IxDyn(&[n]), |i| s + d * i[0] as f64),
            start.dtype(),
        ),
    }
}

#[expect(
    clippy::clone_on_copy,
    reason = "one body serves every dtype through `map_tensor!`, strings (not Copy) included"
)]
fn tile(x: &Tensor, reps: &[i64]) -> Result<Tensor, String> {
    if reps.len() != x.shape().len() {
        return Err("repeats length must equal the input rank".into());
    }
    let shape = x.shape().to_vec();
    let out: Vec<usize> = shape.iter().zip(reps).map(|(&d, &r)| d * r.max(0) as usize).collect();
    Ok(map_tensor!(x, a => ArrayD::from_shape_fn(IxDyn(&out), |ix| {
        let src: Vec<usize> = (0..ix.ndim()).map(|i| ix[i] % shape[i].max(1)).collect();
        a[IxDyn(&src)].clone()
    })))
}

fn expand(x: &Tensor, shape: &[i64]) -> Result<Tensor, String> {
    let target: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    let out = super::broadcast_shapes(x.shape(), &target)?;
    Ok(map_tensor!(x, a => a.broadcast(IxDyn(&out)).ok_or("cannot expand")?.to_owned()))
}

#[expect(
    clippy::cloned_instead_of_copied,
    reason = "one body serves every dtype through `map_tensor!`, strings (not Copy) included"
)]
fn constant_of_shape(node: &Node, inputs: &[Option<&Tensor>]) -> Result<Tensor, String> {
    let dims: Vec<usize> = input_ints(inputs, 0)?.iter().map(|&d| d.max(0) as usize).collect();
    let value = match node.attr("value") {
        Some(Attr::Tensor(c)) => c.tensor().clone(),
        _ => Tensor::scalar_f32(0.0),
    };
    Ok(map_tensor!(&value, a => {
        let v = a.iter().next().cloned().unwrap_or_default();
        ArrayD::from_elem(IxDyn(&dims), v)
    }))
}

fn constant(node: &Node) -> Result<Tensor, String> {
    if let Some(Attr::Tensor(c)) = node.attr("value") {
        return Ok(c.tensor().clone());
    }
    if let Some(v) = node.attr_f("value_float") {
        return Ok(Tensor::scalar_f32(v));
    }
    if let Some(v) = node.attr_i("value_int") {
        return Ok(Tensor::I64(ArrayD::from_elem(IxDyn(&[]), v)));
    }
    if let Some(v) = node.attr_floats("value_floats") {
        return Ok(Tensor::F32(
            ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).map_err(|e| e.to_string())?,
        ));
    }
    if let Some(v) = node.attr_ints("value_ints") {
        return Ok(Tensor::I64(
            ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).map_err(|e| e.to_string())?,
        ));
    }
    Err("Constant has no supported value attribute".into())
}

fn split(node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> OpResult {
    let x = input(inputs, 0)?;
    let (axis, dim) = axis_dim(node.attr_i("axis").unwrap_or(0), x.shape())?;
    let n_out = node.outputs.len();
    let sizes: Vec<usize> = if let Some(s) = node.attr_ints("split") {
        s.iter().map(|&v| v.max(0) as usize).collect()
    } else if let Some(t) = opt_input(inputs, 1).filter(|_| ctx.opset >= 13) {
        t.as_i64_vec()
            .ok_or("split must be integers")?
            .iter()
            .map(|&v| v.max(0) as usize)
            .collect()
    } else {
        let n = node.attr_i("num_outputs").map_or(n_out, |v| v as usize).max(1);
        let chunk = dim.div_ceil(n);
        (0..n).map(|i| chunk.min(dim.saturating_sub(i * chunk))).collect()
    };
    if sizes.iter().sum::<usize>() != dim {
        return Err(format!("split sizes {sizes:?} do not add up to {dim}"));
    }
    let mut start = 0;
    let mut outs = Vec::with_capacity(sizes.len());
    for s in sizes {
        outs.push(slice_axis(x, axis, start as isize, Some((start + s) as isize), 1));
        start += s;
    }
    Ok(outs)
}

/// One sliced axis: the first index read, how many are read, and the step between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SliceAxis {
    pub axis: usize,
    pub first: usize,
    pub count: usize,
    pub step: isize,
}

/// The axes a Slice node selects on an input of `shape`, with ONNX's clamping.
pub(crate) fn slice_spec(
    node: &Node,
    inputs: &[Option<&Tensor>],
    opset: i64,
    shape: &[usize],
) -> Result<Vec<SliceAxis>, String> {
    let (starts, ends, axes, steps) = if opset < 10 {
        let s = node.attr_ints("starts").ok_or("starts missing")?.to_vec();
        let e = node.attr_ints("ends").ok_or("ends missing")?.to_vec();
        let a = node
            .attr_ints("axes")
            .map_or_else(|| (0..s.len() as i64).collect(), <[i64]>::to_vec);
        let st = vec![1; s.len()];
        (s, e, a, st)
    } else {
        let s = input_ints(inputs, 1)?;
        let e = input_ints(inputs, 2)?;
        let a = match opt_input(inputs, 3) {
            Some(t) => t.as_i64_vec().ok_or("axes must be integers")?,
            None => (0..s.len() as i64).collect(),
        };
        let st = match opt_input(inputs, 4) {
            Some(t) => t.as_i64_vec().ok_or("steps must be integers")?,
            None => vec![1; s.len()],
        };
        (s, e, a, st)
    };
    if starts.len() != ends.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err("starts, ends, axes and steps differ in length".into());
    }
    let mut out = Vec::with_capacity(starts.len());
    for i in 0..starts.len() {
        let (axis, dim) = axis_dim(axes[i], shape)?;
        if steps[i] == 0 {
            return Err("step 0".into());
        }
        let (s, e, st) = slice_bounds(dim, starts[i], ends[i], steps[i]);
        let (lo, hi) = (s.max(0) as usize, e.unwrap_or(dim as isize).max(0) as usize);
        let len = hi.saturating_sub(lo);
        let count = len.div_ceil(st.unsigned_abs());
        // ndarray walks a negative step from the top of [lo, hi).
        let first = if st > 0 { lo } else { hi.saturating_sub(1) };
        out.push(SliceAxis {
            axis,
            first,
            count,
            step: st,
        });
    }
    Ok(out)
}

fn slice(node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Result<Tensor, String> {
    let x = input(inputs, 0)?;
    // Every axis narrowed on one view, then one copy (no copy of the whole input).
    let cuts: Vec<(usize, Slice)> = slice_spec(node, inputs, ctx.opset, x.shape())?
        .iter()
        .map(|a| {
            let cut = if a.count == 0 {
                Slice::new(0, Some(0), 1)
            } else if a.step > 0 {
                let end = a.first as isize + (a.count as isize - 1) * a.step + 1;
                Slice::new(a.first as isize, Some(end), a.step)
            } else {
                let last = a.first as isize + (a.count as isize - 1) * a.step;
                Slice::new(last, Some(a.first as isize + 1), a.step)
            };
            (a.axis, cut)
        })
        .collect();
    Ok(map_tensor!(x, a => {
        let mut v = a.view();
        for &(axis, cut) in &cuts {
            v.slice_axis_inplace(Axis(axis), cut);
        }
        standard_copy(&v)
    }))
}

/// Weights of one output position along one axis: (source index, weight) pairs.
type Taps = Vec<(usize, f32)>;

#[derive(Clone, Copy)]
struct ResizeCfg<'a> {
    mode: &'a str,
    coord: &'a str,
    nearest: &'a str,
    cubic_a: f64,
    exclude_outside: bool,
    antialias: bool,
}

fn cubic_w(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// Taps for every output position of one axis, plus extrapolation flags.
fn resize_taps(
    cfg: ResizeCfg<'_>,
    in_len: usize,
    out_len: usize,
    scale: f64,
    roi: (f64, f64),
) -> (Vec<Taps>, Vec<bool>) {
    let out_w = scale * in_len as f64;
    let inl = in_len as f64;
    let mut taps = Vec::with_capacity(out_len);
    let mut extrap = vec![false; out_len];
    for (o, outside) in extrap.iter_mut().enumerate() {
        let y = o as f64;
        let x = match cfg.coord {
            "align_corners" => {
                if out_w == 1.0 {
                    0.0
                } else {
                    y * (inl - 1.0) / (out_w - 1.0)
                }
            }
            "asymmetric" => y / scale,
            "tf_crop_and_resize" => {
                let x = if out_w == 1.0 {
                    (roi.1 - roi.0) * (inl - 1.0) / 2.0
                } else {
                    y * (roi.1 - roi.0) * (inl - 1.0) / (out_w - 1.0)
                } + roi.0 * (inl - 1.0);
                *outside = x < 0.0 || x > inl - 1.0;
                x
            }
            "pytorch_half_pixel" => {
                if out_w == 1.0 {
                    -0.5
                } else {
                    (y + 0.5) / scale - 0.5
                }
            }
            "half_pixel_symmetric" => {
                let adj = out_len as f64 / out_w;
                let center = inl / 2.0;
                center * (1.0 - adj) + (y + 0.5) / scale - 0.5
            }
            _ => (y + 0.5) / scale - 0.5,
        };
        let fl = x.floor();
        let (base, ratio) = if x == fl {
            (fl as i64 - 1, 1.0)
        } else {
            (fl as i64, x - fl)
        };
        let mut coeffs: Vec<(i64, f64)> = match cfg.mode {
            "nearest" => {
                let up = match cfg.nearest {
                    "round_prefer_ceil" => ratio >= 0.5,
                    "floor" => ratio == 1.0,
                    "ceil" => true,
                    _ => ratio > 0.5,
                };
                let up = up || ratio == 1.0;
                vec![(if up { base + 1 } else { base }, 1.0)]
            }
            "cubic" => {
                if cfg.antialias && scale < 1.0 {
                    let start = (-2.0 / scale).floor() as i64 + 1;
                    let end = 2 - start;
                    let v: Vec<(i64, f64)> = (start..end)
                        .map(|k| (base + k, cubic_w(scale * (k as f64 - ratio), cfg.cubic_a)))
                        .collect();
                    let s: f64 = v.iter().map(|p| p.1).sum();
                    v.into_iter().map(|(i, w)| (i, w / s)).collect()
                } else {
                    (-1..=2)
                        .map(|k| (base + k, cubic_w(k as f64 - ratio, cfg.cubic_a)))
                        .collect()
                }
            }
            _ => {
                if cfg.antialias && scale < 1.0 {
                    let start = (-1.0 / scale).floor() as i64 + 1;
                    let n = 2 - 2 * start;
                    let v: Vec<(i64, f64)> = (start..start + n)
                        .map(|k| (base + k, (1.0 - ((k as f64 - ratio) * scale).abs()).clamp(0.0, 1.0)))
                        .collect();
                    let s: f64 = v.iter().map(|p| p.1).sum();
                    v.into_iter().map(|(i, w)| (i, w / s)).collect()
                } else {
                    vec![(base, 1.0 - ratio), (base + 1, ratio)]
                }
            }
        };
        if cfg.exclude_outside && cfg.mode != "nearest" {
            for c in &mut coeffs {
                if c.0 < 0 || c.0 >= in_len as i64 {
                    c.1 = 0.0;
                }
            }
            let s: f64 = coeffs.iter().map(|c| c.1).sum();
            if s != 0.0 {
                for c in &mut coeffs {
                    c.1 /= s;
                }
            }
        }
        let last = in_len.saturating_sub(1) as i64;
        taps.push(
            coeffs
                .into_iter()
                .filter(|c| c.1 != 0.0)
                .map(|(i, w)| (i.clamp(0, last) as usize, w as f32))
                .collect(),
        );
    }
    (taps, extrap)
}

/// Resamples `a` along `axis` with per-output taps.
fn resample_axis(a: &ArrayD<f32>, axis: usize, taps: &[Taps], extrap: &[bool], extrap_value: f32) -> ArrayD<f32> {
    let mut shape = a.shape().to_vec();
    shape[axis] = taps.len();
    let mut out = ArrayD::<f32>::zeros(IxDyn(&shape));
    let a = a.as_standard_layout();
    if axis + 1 == a.ndim() {
        let in_len = a.shape()[axis];
        let out_len = taps.len();
        if let (Some(src), Some(dst)) = (a.as_slice(), out.as_slice_mut()) {
            use rayon::prelude::*;
            let work = |(srow, drow): (&[f32], &mut [f32])| {
                for (o, t) in taps.iter().enumerate() {
                    drow[o] = if extrap[o] {
                        extrap_value
                    } else {
                        t.iter().map(|&(i, w)| srow[i] * w).sum()
                    };
                }
            };
            if src.len() >= 1 << 15 {
                src.par_chunks(in_len.max(1))
                    .zip(dst.par_chunks_mut(out_len.max(1)))
                    .for_each(work);
            } else {
                src.chunks(in_len.max(1))
                    .zip(dst.chunks_mut(out_len.max(1)))
                    .for_each(work);
            }
            return out;
        }
    }
    for (o, t) in taps.iter().enumerate() {
        let mut dst = out.index_axis_mut(Axis(axis), o);
        if extrap[o] {
            dst.fill(extrap_value);
            continue;
        }
        for &(i, w) in t {
            dst.scaled_add(w, &a.index_axis(Axis(axis), i));
        }
    }
    out
}

fn resize(node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Result<Tensor, String> {
    let x = input(inputs, 0)?;
    let rank = x.shape().len();
    let in_shape = x.shape().to_vec();
    let upsample = node.op == "Upsample";
    let (roi_t, scales_t, sizes_t) = if upsample || ctx.opset < 11 {
        (None, opt_input(inputs, 1), None)
    } else {
        (opt_input(inputs, 1), opt_input(inputs, 2), opt_input(inputs, 3))
    };
    let axes: Vec<usize> = match node.attr_ints("axes") {
        Some(a) => a.iter().map(|&v| norm_axis(v, rank)).collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    let mut scales = vec![1.0f64; rank];
    let mut out_shape = in_shape.clone();
    let attr_scales = node
        .attr_floats("scales")
        .map(|s| s.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
    let scale_vals = match (scales_t.filter(|t| !t.is_empty()), attr_scales) {
        (Some(t), _) => Some(t.to_f32().iter().map(|&v| f64::from(v)).collect::<Vec<f64>>()),
        (None, s) => s,
    };
    if let Some(sv) = scale_vals {
        if sv.len() != axes.len() {
            return Err(format!("{} scales for {} axes", sv.len(), axes.len()));
        }
        for (k, &ax) in axes.iter().enumerate() {
            scales[ax] = sv[k];
            out_shape[ax] = (in_shape[ax] as f64 * sv[k]).floor() as usize;
        }
    } else if let Some(st) = sizes_t {
        let sz = st.as_i64_vec().ok_or("sizes must be integers")?;
        if sz.len() != axes.len() {
            return Err(format!("{} sizes for {} axes", sz.len(), axes.len()));
        }
        let policy = node.attr_s("keep_aspect_ratio_policy").unwrap_or("stretch");
        if policy == "stretch" {
            for (k, &ax) in axes.iter().enumerate() {
                out_shape[ax] = sz[k].max(0) as usize;
                scales[ax] = sz[k] as f64 / in_shape[ax] as f64;
            }
        } else {
            let ratios = axes
                .iter()
                .enumerate()
                .map(|(k, &ax)| sz[k] as f64 / in_shape[ax] as f64);
            let s = if policy == "not_larger" {
                ratios.fold(f64::INFINITY, f64::min)
            } else {
                ratios.fold(0.0, f64::max)
            };
            for &ax in &axes {
                scales[ax] = s;
                out_shape[ax] = (s * in_shape[ax] as f64 + 0.5).floor() as usize;
            }
        }
    } else {
        return Err("neither scales nor sizes given".into());
    }
    let mode_attr = node.attr_s("mode").unwrap_or("nearest");
    let mode = match mode_attr {
        "bilinear" | "trilinear" | "linear" => "linear",
        "cubic" | "bicubic" => "cubic",
        _ => "nearest",
    };
    let old = upsample || ctx.opset < 11;
    let coord = if old {
        "asymmetric"
    } else {
        node.attr_s("coordinate_transformation_mode").unwrap_or("half_pixel")
    };
    let nearest = if old {
        "floor"
    } else {
        node.attr_s("nearest_mode").unwrap_or("round_prefer_floor")
    };
    let cfg = ResizeCfg {
        mode,
        coord,
        nearest,
        cubic_a: f64::from(node.attr_f("cubic_coeff_a").unwrap_or(-0.75)),
        exclude_outside: node.attr_i("exclude_outside").unwrap_or(0) != 0,
        antialias: node.attr_i("antialias").unwrap_or(0) != 0,
    };
    let extrap_value = node.attr_f("extrapolation_value").unwrap_or(0.0);
    let roi: Vec<f64> = roi_t
        .filter(|t| !t.is_empty())
        .map(|t| t.to_f64().iter().copied().collect())
        .unwrap_or_default();
    let roi_of = |ax: usize| -> (f64, f64) {
        if roi.len() == 2 * axes.len() {
            if let Some(k) = axes.iter().position(|&a| a == ax) {
                return (roi[k], roi[k + axes.len()]);
            }
        } else if roi.len() == 2 * rank {
            return (roi[ax], roi[ax + rank]);
        }
        (0.0, 1.0)
    };
    if mode == "nearest" && coord != "tf_crop_and_resize" {
        // Pure index mapping: works for every dtype.
        let maps: Vec<Vec<usize>> = (0..rank)
            .map(|ax| {
                if out_shape[ax] == in_shape[ax] && scales[ax] == 1.0 {
                    return (0..in_shape[ax]).collect();
                }
                let (taps, _) = resize_taps(cfg, in_shape[ax], out_shape[ax], scales[ax], roi_of(ax));
                taps.iter().map(|t| t.first().map_or(0, |p| p.0)).collect()
            })
            .collect();
        if in_shape.contains(&0) {
            return Ok(map_tensor!(x, _a => ArrayD::from_shape_simple_fn(IxDyn(&out_shape), Default::default)));
        }
        return Ok(map_tensor!(x, a => gather_nd(a, &maps, &out_shape)));
    }
    let mut a = x.to_f32();
    for ax in 0..rank {
        if out_shape[ax] == in_shape[ax] && scales[ax] == 1.0 && coord != "tf_crop_and_resize" {
            continue;
        }
        let (taps, extrap) = resize_taps(cfg, in_shape[ax], out_shape[ax], scales[ax], roi_of(ax));
        a = resample_axis(&a, ax, &taps, &extrap, extrap_value);
    }
    match x.dtype() {
        DType::F32 | DType::F16 | DType::BF16 | DType::F64 => Ok(super::f32_as(x.dtype(), a)),
        dt => crate::sim::ops::quant::cast_f64(&a.mapv(|v| f64::from(v.round())), dt),
    }
}

/// Output element `o` takes input element `maps[axis][o_axis]` along every axis.
fn gather_nd<T: Clone + Default + Send + Sync>(a: &ArrayD<T>, maps: &[Vec<usize>], out_shape: &[usize]) -> ArrayD<T> {
    fn rec<T: Clone>(src: &[T], in_strides: &[usize], out_strides: &[usize], maps: &[Vec<usize>], dst: &mut [T]) {
        let Some((m, rest)) = maps.split_first() else {
            dst[0] = src[0].clone();
            return;
        };
        if rest.is_empty() {
            for (d, &i) in dst.iter_mut().zip(m) {
                *d = src[i].clone();
            }
            return;
        }
        for (o, &i) in m.iter().enumerate() {
            rec(
                &src[i * in_strides[0]..],
                &in_strides[1..],
                &out_strides[1..],
                rest,
                &mut dst[o * out_strides[0]..(o + 1) * out_strides[0]],
            );
        }
    }
    let a = a.as_standard_layout();
    let src = a.as_slice().unwrap_or(&[]);
    let strides = |s: &[usize]| -> Vec<usize> { (0..s.len()).map(|i| s[i + 1..].iter().product()).collect() };
    let (is, os) = (strides(a.shape()), strides(out_shape));
    let n: usize = out_shape.iter().product();
    let mut out = vec![T::default(); n];
    if n > 0 && !src.is_empty() {
        // Leading axes of output size 1 (the batch) only offset the source; the work is
        // split along the first axis after them.
        let (mut k, mut base) = (0, 0);
        while k + 1 < out_shape.len() && out_shape[k] == 1 {
            base += maps[k][0] * is[k];
            k += 1;
        }
        let src = &src[base..];
        if out_shape.len() - k > 1 && out_shape[k] > 1 {
            use rayon::prelude::*;
            out.par_chunks_mut(os[k]).zip(maps[k].par_iter()).for_each(|(d, &i)| {
                rec(&src[i * is[k]..], &is[k + 1..], &os[k + 1..], &maps[k + 1..], d);
            });
        } else {
            rec(src, &is[k..], &os[k..], &maps[k..], &mut out);
        }
    }
    ArrayD::from_shape_vec(IxDyn(out_shape), out)
        .unwrap_or_else(|_| ArrayD::from_shape_simple_fn(IxDyn(out_shape), T::default))
}

fn eye_like(node: &Node, x: &Tensor) -> Result<Tensor, String> {
    let s = x.shape();
    if s.len() != 2 {
        return Err("EyeLike needs a 2-D input".into());
    }
    let k = node.attr_i("k").unwrap_or(0);
    let dt = node
        .attr_i("dtype")
        .and_then(|c| DType::from_onnx(c as i32))
        .unwrap_or(x.dtype());
    let a = ArrayD::from_shape_fn(IxDyn(s), |ix| if ix[1] as i64 - ix[0] as i64 == k { 1.0 } else { 0.0 });
    crate::sim::ops::quant::cast_f64(&a, dt)
}

fn trilu(node: &Node, inputs: &[Option<&Tensor>]) -> Result<Tensor, String> {
    let x = input(inputs, 0)?;
    let k = opt_input(inputs, 1)
        .and_then(Tensor::as_i64_vec)
        .and_then(|v| v.first().copied())
        .unwrap_or(0);
    let upper = node.attr_i("upper").unwrap_or(1) != 0;
    let r = x.shape().len();
    if r < 2 {
        return Err("Trilu needs rank >= 2".into());
    }
    Ok(map_tensor!(x, a => tri_mask(a, k, upper)))
}

fn tri_mask<T: Clone + Default>(a: &ArrayD<T>, k: i64, upper: bool) -> ArrayD<T> {
    let r = a.ndim();
    let mut b = a.clone();
    for (ix, v) in b.indexed_iter_mut() {
        let (i, j) = (ix[r - 2] as i64, ix[r - 1] as i64);
        let keep = if upper { j - i >= k } else { j - i <= k };
        if !keep {
            *v = T::default();
        }
    }
    b
}

/// numpy's legacy `RandomState` (MT19937), so that seeded Dropout matches the reference.
struct Mt19937 {
    mt: [u32; 624],
    idx: usize,
}

impl Mt19937 {
    fn new(seed: u32) -> Self {
        let mut mt = [0u32; 624];
        mt[0] = seed;
        for i in 1..624 {
            mt[i] = 1_812_433_253u32
                .wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        Self { mt, idx: 624 }
    }

    fn next_u32(&mut self) -> u32 {
        if self.idx >= 624 {
            for i in 0..624 {
                let y = (self.mt[i] & 0x8000_0000) | (self.mt[(i + 1) % 624] & 0x7fff_ffff);
                let mut v = self.mt[(i + 397) % 624] ^ (y >> 1);
                if y & 1 != 0 {
                    v ^= 0x9908_b0df;
                }
                self.mt[i] = v;
            }
            self.idx = 0;
        }
        let mut y = self.mt[self.idx];
        self.idx += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// A double in [0, 1) built from 53 random bits, as numpy's `random_sample`.
    fn next_f64(&mut self) -> f64 {
        let a = f64::from(self.next_u32() >> 5);
        let b = f64::from(self.next_u32() >> 6);
        (a * 67_108_864.0 + b) / 9_007_199_254_740_992.0
    }
}

fn dropout(node: &Node, inputs: &[Option<&Tensor>]) -> OpResult {
    let x = input(inputs, 0)?;
    let ratio = opt_input(inputs, 1)
        .and_then(|t| t.to_f64().iter().next().copied())
        .or_else(|| node.attr_f("ratio").map(f64::from))
        .unwrap_or(0.5);
    let training = opt_input(inputs, 2)
        .and_then(crate::ir::tensor::Tensor::as_i64_vec)
        .and_then(|v| v.first().copied())
        .unwrap_or(0)
        != 0;
    if !training || ratio == 0.0 {
        let mask = Tensor::Bool(ArrayD::from_elem(IxDyn(x.shape()), true));
        return Ok(vec![x.clone(), mask]);
    }
    let seed = node.attr_i("seed").map_or_else(
        || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        },
        |s| s as u32,
    );
    let mut rng = Mt19937::new(seed);
    let keep: Vec<bool> = (0..x.len()).map(|_| rng.next_f64() >= ratio).collect();
    let mask = ArrayD::from_shape_vec(IxDyn(x.shape()), keep).map_err(|e| e.to_string())?;
    let scale = 1.0 / (1.0 - ratio);
    let xf = x.to_f64();
    let y = ndarray::Zip::from(&xf)
        .and(&mask)
        .map_collect(|&v, &k| if k { v * scale } else { 0.0 });
    Ok(vec![super::quant::cast_f64(&y, x.dtype())?, Tensor::Bool(mask)])
}

/// The output dims of an op that only renames the shape of its first input (Reshape,
/// Flatten, Squeeze, Unsqueeze), from that input's `shape` and the other inputs (`inputs[0]`
/// is not read); `None` for any other op. The executor uses it to move a dying input
/// into its output instead of copying it.
pub(crate) fn view_dims(
    op: &str,
    node: &Node,
    shape: &[usize],
    inputs: &[Option<&Tensor>],
    ctx: &OpCtx,
) -> Option<Result<Vec<usize>, String>> {
    if !matches!(op, "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze") {
        return None;
    }
    let r = shape.len();
    Some((|| match op {
        "Reshape" => {
            let spec = if ctx.opset < 5 {
                node.attr_ints("shape").ok_or("shape missing")?.to_vec()
            } else {
                input_ints(inputs, 1)?
            };
            reshape_dims(shape, &spec, node.attr_i("allowzero").unwrap_or(0) != 0)
        }
        "Flatten" => {
            let axis = node.attr_i("axis").unwrap_or(1);
            let axis = if axis < 0 { axis + r as i64 } else { axis };
            if axis < 0 || axis as usize > r {
                return Err(format!("axis {axis} out of range"));
            }
            let outer: usize = shape[..axis as usize].iter().product();
            Ok(vec![outer, shape.iter().product::<usize>() / outer.max(1)])
        }
        "Squeeze" => Ok(match axes_of(node, inputs, 1)? {
            Some(ax) => {
                let ax: Vec<usize> = ax.iter().map(|&a| norm_axis(a, r)).collect::<Result<_, _>>()?;
                for &a in &ax {
                    if shape[a] != 1 {
                        return Err(format!("cannot squeeze axis {a} of size {}", shape[a]));
                    }
                }
                shape
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !ax.contains(i))
                    .map(|(_, &d)| d)
                    .collect()
            }
            None => shape.iter().copied().filter(|&d| d != 1).collect(),
        }),
        _ => {
            // Unsqueeze
            let axes = axes_of(node, inputs, 1)?.ok_or("axes missing")?;
            let r = r + axes.len();
            let mut ax: Vec<usize> = axes.iter().map(|&a| norm_axis(a, r)).collect::<Result<_, _>>()?;
            ax.sort_unstable();
            let mut dims = Vec::with_capacity(r);
            let mut src = shape.iter();
            for i in 0..r {
                if ax.contains(&i) {
                    dims.push(1);
                } else {
                    dims.push(*src.next().ok_or("bad axes")?);
                }
            }
            Ok(dims)
        }
    })())
}

/// Dispatches the shape family; `None` if `op` is not one of them.
pub fn eval(op: &str, node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Option<OpResult> {
    let r = (|| -> OpResult {
        match op {
            "Identity" => one(input(inputs, 0)?.clone()),
            "Dropout" => dropout(node, inputs),
            "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => {
                let x = input(inputs, 0)?;
                let dims = view_dims(op, node, x.shape(), inputs, ctx).unwrap_or_else(|| Err(op.to_owned()))?;
                one(reshape(x, &dims)?)
            }
            "Transpose" => {
                let x = input(inputs, 0)?;
                let r = x.shape().len();
                let perm: Vec<usize> = match node.attr_ints("perm") {
                    Some(p) => p.iter().map(|&v| norm_axis(v, r)).collect::<Result<_, _>>()?,
                    None => (0..r).rev().collect(),
                };
                let mut seen = vec![false; r];
                for &p in &perm {
                    if p >= r || std::mem::replace(&mut seen[p], true) {
                        return Err(format!("invalid perm {perm:?}"));
                    }
                }
                if perm.len() != r {
                    return Err(format!("perm {perm:?} does not match rank {r}"));
                }
                one(transpose(x, &perm))
            }
            "Concat" => {
                let ts: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
                let r = ts.first().ok_or("no inputs")?.shape().len();
                let axis = norm_axis(node.attr_i("axis").ok_or("axis missing")?, r)?;
                one(concat(&ts, axis)?)
            }
            "Split" => split(node, inputs, ctx),
            "Slice" => one(slice(node, inputs, ctx)?),
            "Gather" => {
                let x = input(inputs, 0)?;
                let axis = norm_axis(node.attr_i("axis").unwrap_or(0), x.shape().len())?;
                one(gather(x, input(inputs, 1)?, axis)?)
            }
            "GatherElements" => {
                let x = input(inputs, 0)?;
                let axis = norm_axis(node.attr_i("axis").unwrap_or(0), x.shape().len())?;
                one(gather_elements(x, input(inputs, 1)?, axis)?)
            }
            "Pad" => one(pad(node, inputs, ctx)?),
            "Resize" | "Upsample" => one(resize(node, inputs, ctx)?),
            "Expand" => one(expand(input(inputs, 0)?, &input_ints(inputs, 1)?)?),
            "Tile" => one(tile(input(inputs, 0)?, &input_ints(inputs, 1)?)?),
            "Shape" => {
                let x = input(inputs, 0)?;
                let r = x.shape().len() as i64;
                let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                let start = clampi(node.attr_i("start").unwrap_or(0));
                let end = clampi(node.attr_i("end").unwrap_or(r));
                let dims: Vec<i64> = x.shape()[start..end.max(start)].iter().map(|&d| d as i64).collect();
                one(Tensor::I64(
                    ArrayD::from_shape_vec(IxDyn(&[dims.len()]), dims).map_err(|e| e.to_string())?,
                ))
            }
            "Size" => one(Tensor::I64(ArrayD::from_elem(
                IxDyn(&[]),
                input(inputs, 0)?.len() as i64,
            ))),
            "ConstantOfShape" => one(constant_of_shape(node, inputs)?),
            "Constant" => one(constant(node)?),
            "Range" => one(range(inputs)?),
            "DepthToSpace" => one(depth_space(node, input(inputs, 0)?, true)?),
            "SpaceToDepth" => one(depth_space(node, input(inputs, 0)?, false)?),
            "EyeLike" => one(eye_like(node, input(inputs, 0)?)?),
            "Trilu" => one(trilu(node, inputs)?),
            _ => Err(String::new()),
        }
    })();
    match r {
        Err(e) if e.is_empty() => None,
        r => Some(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(shape: &[usize], from: f32) -> ArrayD<f32> {
        let n: usize = shape.iter().product();
        ArrayD::from_shape_vec(IxDyn(shape), (0..n).map(|i| from + i as f32).collect()).expect("shape")
    }

    /// Large copies go to the pool's threads in pieces; what they build must be what
    /// ndarray builds, for long pieces (a concat along channels, rows of a slice), pieces
    /// cut at the job size, and tiny ones (a concat along a last axis of 1).
    #[test]
    fn parallel_concat_and_slice_match_ndarray() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
        pool.install(|| {
            for (shapes, axis) in [
                (
                    vec![vec![1, 24, 104, 104], vec![1, 8, 104, 104], vec![1, 16, 104, 104]],
                    1,
                ),
                (vec![vec![2, 3, 100, 300], vec![2, 5, 100, 300]], 1),
                (vec![vec![1, 172, 309, 1]; 8], 3),
                (vec![vec![3, 40000], vec![3, 25000]], 1),
            ] {
                let arrays: Vec<ArrayD<f32>> = shapes
                    .iter()
                    .enumerate()
                    .map(|(i, s)| ramp(s, 1e6 * i as f32))
                    .collect();
                let tensors: Vec<Tensor> = arrays.iter().cloned().map(Tensor::F32).collect();
                let refs: Vec<&Tensor> = tensors.iter().collect();
                let got = concat(&refs, axis).expect("concat");
                let views: Vec<_> = arrays.iter().map(|a| a.view()).collect();
                let want = ndarray::concatenate(Axis(axis), &views).expect("ndarray");
                assert_eq!(got.f32_cow().to_owned(), want, "concat of {shapes:?} on axis {axis}");
            }
            let x = Tensor::F32(ramp(&[1, 3, 416, 416], 0.0));
            for (axis, start, step) in [(2, 0, 2), (3, 1, 2), (2, 1, 1), (3, 0, 3)] {
                let got = slice_axis(&x, axis, start, None, step);
                let xa = x.f32_cow();
                let want = xa.slice_axis(Axis(axis), Slice::new(start, None, step)).to_owned();
                assert_eq!(
                    got.f32_cow().to_owned(),
                    want,
                    "slice on axis {axis} from {start} step {step}"
                );
            }
        });
    }
}
