//! The tiles of an NPU command. The command's [`Tile`] cuts its output into row tiles ×
//! channel blocks (rank-4 outputs: rows along axis 2, channels along axis 1; lower ranks:
//! channel blocks along the last axis), and a convolution the target splits for its
//! stride runs one output position at a time along each split axis. Each [`Window`] of the
//! output is computed from its own operands: the input rows and columns it reads (with
//! the halo of a kernel window, padding where the window leaves the map), the weight
//! block and bias of its channels. A [`Plan`] records those cuts, made from shapes alone
//! when the binary loads; running it gives the window's codes.

use crate::compiler::lower::Tile;
use crate::program::{IOp, ITensor, OpKind, PadMode, Program, SliceAxis};
use crate::sim::integer::kernels::nearest_source;
use rayon::prelude::*;
use std::borrow::Cow;
use std::ops::Range;

/// Per output axis, the part of the output one tile computes.
pub type Window = Vec<Range<usize>>;

/// How a tile computes its window.
#[derive(Clone, Debug)]
pub enum Kernel {
    /// The op (with its window's parameters) on the cut operands.
    Op(OpKind),
    /// A nearest-neighbour gather: per window row and column, its source in the cut input.
    Gather { rows: Vec<usize>, cols: Vec<usize> },
}

/// The cuts of one operand: `(axis, range)`, in order.
pub type Cuts = Vec<(usize, Range<usize>)>;

/// One tile: the cut operands, the kernel, and where its result goes.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Per operand: the op input it comes from and its cuts `(axis, range)`, in order.
    pub operands: Vec<(usize, Cuts)>,
    pub kernel: Kernel,
    /// The kernel's output shape, and the part of it that is the window (a transposed
    /// convolution computes the rows above the window that its first input row reaches).
    pub shape: Vec<usize>,
    pub keep: Window,
    pub window: Window,
}

/// `0..n` in runs of `step`, also cut at multiples of `align`.
fn runs(n: usize, step: usize, align: usize) -> Vec<Range<usize>> {
    let step = step.clamp(1, n.max(1));
    let mut out = Vec::new();
    let mut a = 0;
    while a < n {
        let mut b = (a + step).min(n);
        if align > 1 {
            b = b.min((a / align + 1) * align);
        }
        out.push(a..b);
        a = b;
    }
    out
}

/// The windows of a command: row tiles × channel blocks, each cut into its stride-1
/// pieces. With `inner` false the row tiles and channel blocks are left whole (the MAC
/// path cuts them itself) and only the pieces are windows.
pub fn windows(p: &Program, op: &IOp, tile: &Tile, pieces: usize, inner: bool) -> Vec<Window> {
    let y = &p.tensors[op.outputs[0]].shape;
    let whole: Window = y.iter().map(|&d| 0..d).collect();
    if y.is_empty() || y.contains(&0) {
        return vec![whole];
    }
    let rank = y.len();
    let mut axes: Vec<Vec<Range<usize>>> = whole.iter().map(|r| vec![r.clone()]).collect();
    if inner {
        let chan = if rank == 4 { 1 } else { rank - 1 };
        if rank == 4 {
            axes[2] = runs(y[2], tile.rows, 1);
        }
        // A block of a grouped convolution stays inside one group.
        let align = match op.kind {
            OpKind::Conv { groups, .. } if groups > 1 && rank == 4 => y[1] / groups,
            _ => 1,
        };
        axes[chan] = runs(y[chan], tile.channels, align);
    }
    if let (true, OpKind::Conv { strides, .. }) = (pieces > 1 && rank == 4, &op.kind) {
        // The split axes: the largest strides first, as many as make the piece count.
        let mut order = [0usize, 1];
        order.sort_by_key(|&a| std::cmp::Reverse(strides[a]));
        let (mut count, mut split) = (1, Vec::new());
        for a in order {
            if count == pieces || strides[a] <= 1 {
                break;
            }
            count *= y[2 + a];
            split.push(2 + a);
        }
        if count == pieces {
            for a in split {
                axes[a] = axes[a].iter().flat_map(|r| r.clone().map(|i| i..i + 1)).collect();
            }
        }
    }
    let mut out = vec![Vec::new()];
    for ranges in axes {
        out = out
            .into_iter()
            .flat_map(|w: Window| {
                ranges.iter().map(move |r| {
                    let mut w = w.clone();
                    w.push(r.clone());
                    w
                })
            })
            .collect();
    }
    out
}

/// The input range a kernel window of size `k` (stride `s`, dilation `d`, `pad` before)
/// reads for outputs `r` of an input of size `n`, and the padding before and after it.
fn halo(r: &Range<usize>, s: usize, d: usize, k: usize, pad: usize, n: usize) -> Option<(Range<usize>, [usize; 2])> {
    let a = (r.start * s) as isize - pad as isize;
    let b = ((r.end - 1) * s + (k.max(1) - 1) * d + 1) as isize - pad as isize;
    let (lo, hi) = (a.max(0), b.min(n as isize));
    (hi > lo).then(|| (lo as usize..hi as usize, [(lo - a) as usize, (b - hi) as usize]))
}

fn whole(r: &Range<usize>, n: usize) -> bool {
    r.start == 0 && r.end == n
}

/// The tile computing window `w` of `op`, from shapes alone; `None` when the op cannot
/// be cut there (it then runs whole).
pub fn plan(p: &Program, op: &IOp, w: &Window) -> Option<Plan> {
    let shape = |k: usize| -> Option<&[usize]> { Some(&p.tensors[*op.inputs.get(k)?].shape) };
    let y = &p.tensors[op.outputs[0]].shape;
    let rank = y.len();
    if w.len() != rank || w.iter().zip(y).any(|(r, &n)| r.start >= r.end || r.end > n) {
        return None;
    }
    let out: Vec<usize> = w.iter().map(ExactSizeIterator::len).collect();
    let keep_all = |s: &[usize]| -> Window { s.iter().map(|&d| 0..d).collect() };
    let simple = |operands, kind: OpKind| {
        Some(Plan {
            operands,
            kernel: Kernel::Op(kind),
            keep: keep_all(&out),
            shape: out.clone(),
            window: w.clone(),
        })
    };
    // Cuts of an input along the output's axes (same rank, same dims where cut).
    let aligned = |x: &[usize]| -> Option<Vec<(usize, Range<usize>)>> {
        if x.len() > rank {
            return None;
        }
        let off = rank - x.len();
        let mut cuts = Vec::new();
        for (i, &d) in x.iter().enumerate() {
            let r = &w[i + off];
            if whole(r, y[i + off]) && d == y[i + off] {
                continue;
            }
            if d == y[i + off] {
                cuts.push((i, r.clone()));
            } else if d != 1 {
                return None;
            }
        }
        Some(cuts)
    };
    match &op.kind {
        OpKind::Add { .. }
        | OpKind::Sub { .. }
        | OpKind::Mul { .. }
        | OpKind::Extremum { .. }
        | OpKind::Requantize
        | OpKind::Relu { .. }
        | OpKind::HardSwish
        | OpKind::Logistic
        | OpKind::Tanh
        | OpKind::Exp
        | OpKind::Log
        | OpKind::Sqrt
        | OpKind::Rsqrt
        | OpKind::SquaredDifference => {
            let operands = (0..op.inputs.len())
                .map(|k| Some((k, aligned(shape(k)?)?)))
                .collect::<Option<Vec<_>>>()?;
            simple(operands, op.kind.clone())
        }
        OpKind::Softmax { .. } if whole(&w[rank - 1], y[rank - 1]) => {
            simple(vec![(0, aligned(shape(0)?)?)], op.kind.clone())
        }
        OpKind::Conv {
            strides,
            dilations,
            pads,
            groups,
            act,
        } if rank == 4 => {
            let (xs, ws) = (shape(0)?, shape(1)?);
            let g = (*groups).max(1);
            let (cin, cout) = (xs[1], ws[0]);
            let (cpg, cin_pg) = (cout / g, cin / g);
            let (ry, py) = halo(&w[2], strides[0], dilations[0], ws[2], pads[0], xs[2])?;
            let (rx, px) = halo(&w[3], strides[1], dilations[1], ws[3], pads[1], xs[3])?;
            let c = w[1].clone();
            let (xc, g2) = if g == 1 {
                (0..cin, 1)
            } else if cpg > 0 && c.start.is_multiple_of(cpg) && c.end.is_multiple_of(cpg) {
                (c.start / cpg * cin_pg..c.end / cpg * cin_pg, c.len() / cpg)
            } else if cpg > 0 && c.start / cpg == (c.end - 1) / cpg {
                // Part of one group: a plain convolution over that group's inputs.
                let grp = c.start / cpg;
                (grp * cin_pg..(grp + 1) * cin_pg, 1)
            } else {
                return None;
            };
            let bias = if shape(2)?.first() == Some(&cout) {
                vec![(0, c.clone())]
            } else {
                Vec::new()
            };
            simple(
                vec![
                    (0, vec![(0, w[0].clone()), (1, xc), (2, ry), (3, rx)]),
                    (1, vec![(0, c)]),
                    (2, bias),
                ],
                OpKind::Conv {
                    strides: *strides,
                    dilations: *dilations,
                    pads: [py[0], px[0], py[1], px[1]],
                    groups: g2,
                    act: *act,
                },
            )
        }
        OpKind::Pool {
            kind,
            kernel,
            strides,
            pads,
            act,
        } if rank == 4 => {
            let xs = shape(0)?;
            let (ry, py) = halo(&w[2], strides[0], 1, kernel[0], pads[0], xs[2])?;
            let (rx, px) = halo(&w[3], strides[1], 1, kernel[1], pads[1], xs[3])?;
            let pads = [py[0], px[0], py[1], px[1]];
            let kind = OpKind::Pool {
                kind: *kind,
                kernel: *kernel,
                strides: *strides,
                pads,
                act: *act,
            };
            simple(
                vec![(0, vec![(0, w[0].clone()), (1, w[1].clone()), (2, ry), (3, rx)])],
                kind,
            )
        }
        OpKind::TransposeConv { strides, .. } if rank == 4 => {
            let (xs, ws) = (shape(0)?, shape(1)?);
            // The input rows (columns) reaching outputs `r`: from the first whose last tap
            // reaches `r.start` (or one at or above it), to the last starting inside `r`.
            let reach = |r: &Range<usize>, s: usize, k: usize, n: usize| {
                let s = s.max(1);
                let i0 = (r.start + 1).saturating_sub(k).div_ceil(s).min(r.start / s);
                let i1 = ((r.end - 1) / s + 1).min(n);
                (i1 > i0).then_some((i0..i1, i0 * s))
            };
            let (ry, oy) = reach(&w[2], strides[0], ws[2], xs[2])?;
            let (rx, ox) = reach(&w[3], strides[1], ws[3], xs[3])?;
            let c = w[1].clone();
            let bias = if shape(2)?.first() == Some(&ws[0]) {
                vec![(0, c.clone())]
            } else {
                Vec::new()
            };
            let sub = vec![out[0], out[1], w[2].end - oy, w[3].end - ox];
            Some(Plan {
                operands: vec![
                    (0, vec![(0, w[0].clone()), (2, ry), (3, rx)]),
                    (1, vec![(0, c)]),
                    (2, bias),
                ],
                kernel: Kernel::Op(op.kind.clone()),
                keep: vec![0..out[0], 0..out[1], w[2].start - oy..sub[2], w[3].start - ox..sub[3]],
                shape: sub,
                window: w.clone(),
            })
        }
        OpKind::ResizeNearest if rank == 4 => {
            let xs = shape(0)?;
            let src = |r: &Range<usize>, i: usize, n: usize| -> Vec<usize> {
                r.clone().map(|o| nearest_source(o, i, n)).collect()
            };
            let (rows, cols) = (src(&w[2], xs[2], y[2]), src(&w[3], xs[3], y[3]));
            let span = |v: &[usize]| -> Option<Range<usize>> { Some(*v.iter().min()?..*v.iter().max()? + 1) };
            let (ry, rx) = (span(&rows)?, span(&cols)?);
            Some(Plan {
                operands: vec![(
                    0,
                    vec![(0, w[0].clone()), (1, w[1].clone()), (2, ry.clone()), (3, rx.clone())],
                )],
                kernel: Kernel::Gather {
                    rows: rows.iter().map(|&i| i - ry.start).collect(),
                    cols: cols.iter().map(|&i| i - rx.start).collect(),
                },
                keep: keep_all(&out),
                shape: out.clone(),
                window: w.clone(),
            })
        }
        OpKind::Concat { axis } if *axis < rank => {
            let mut operands = Vec::new();
            let mut off = 0;
            for k in 0..op.inputs.len() {
                let s = shape(k)?;
                if s.len() != rank {
                    return None;
                }
                let (a, b) = (off, off + s[*axis]);
                off = b;
                let r = &w[*axis];
                let (lo, hi) = (r.start.max(a), r.end.min(b));
                if lo >= hi {
                    continue;
                }
                let cuts = (0..rank)
                    .map(|d| (d, if d == *axis { lo - a..hi - a } else { w[d].clone() }))
                    .collect();
                operands.push((k, cuts));
            }
            simple(operands, op.kind.clone())
        }
        OpKind::Slice { axes } => {
            let xs = shape(0)?;
            if xs.len() != rank {
                return None;
            }
            let mut cuts = Vec::new();
            let mut sub = Vec::new();
            for d in 0..rank {
                let r = &w[d];
                match axes.iter().find(|a| a.axis == d) {
                    Some(a) => {
                        let (first, step) = (a.first as isize, a.step);
                        let at = |o: usize| first + o as isize * step;
                        let (lo, hi) = match step {
                            s if s > 0 => (at(r.start), at(r.end - 1) + 1),
                            s if s < 0 => (at(r.end - 1), at(r.start) + 1),
                            _ => return None,
                        };
                        if lo < 0 || hi as usize > xs[d] {
                            return None;
                        }
                        cuts.push((d, lo as usize..hi as usize));
                        let first = if step > 0 { 0 } else { (hi - 1 - lo) as usize };
                        sub.push(SliceAxis {
                            axis: d,
                            first,
                            count: r.len(),
                            step,
                        });
                    }
                    None if xs[d] == y[d] => cuts.push((d, r.clone())),
                    None => return None,
                }
            }
            simple(vec![(0, cuts)], OpKind::Slice { axes: sub })
        }
        OpKind::Transpose { perm } if perm.len() == rank => {
            let cuts = (0..rank).map(|a| (perm[a], w[a].clone())).collect();
            simple(vec![(0, cuts)], op.kind.clone())
        }
        OpKind::Pad {
            pads,
            mode: PadMode::Constant(c),
        } if pads.len() == rank => {
            let xs = shape(0)?;
            let mut cuts = Vec::new();
            let mut sub = Vec::new();
            for d in 0..rank {
                let (r, before) = (&w[d], pads[d][0] as isize);
                let n = xs[d] as isize;
                let lo = (r.start as isize - before).clamp(0, n);
                let hi = (r.end as isize - before).clamp(lo, n);
                let pb = (before - r.start as isize).clamp(0, r.len() as isize);
                let pa = r.len() as isize - pb - (hi - lo);
                if pa < 0 {
                    return None;
                }
                cuts.push((d, lo as usize..hi as usize));
                sub.push([pb as usize, pa as usize]);
            }
            simple(
                vec![(0, cuts)],
                OpKind::Pad {
                    pads: sub,
                    mode: PadMode::Constant(*c),
                },
            )
        }
        OpKind::FullyConnected { .. } => {
            let (xs, ws) = (shape(0)?, shape(1)?);
            if xs.len() != rank || ws.len() != 2 {
                return None;
            }
            let c = w[rank - 1].clone();
            let bias = if shape(2)?.first() == Some(&ws[0]) {
                vec![(0, c.clone())]
            } else {
                Vec::new()
            };
            // The leading dims are the output's: cut them as the window does.
            let x: Vec<(usize, Range<usize>)> = (0..rank - 1)
                .filter(|&d| !whole(&w[d], y[d]))
                .map(|d| (d, w[d].clone()))
                .collect();
            if (0..rank - 1).any(|d| xs[d] != y[d]) {
                return None;
            }
            simple(vec![(0, x), (1, vec![(0, c)]), (2, bias)], op.kind.clone())
        }
        OpKind::BatchMatMul if rank >= 2 => {
            if (0..rank - 2).any(|d| !whole(&w[d], y[d])) {
                return None;
            }
            let (a, b) = (shape(0)?, shape(1)?);
            let cuts_a = if whole(&w[rank - 2], y[rank - 2]) {
                Vec::new()
            } else {
                vec![(a.len() - 2, w[rank - 2].clone())]
            };
            let cuts_b = if whole(&w[rank - 1], y[rank - 1]) {
                Vec::new()
            } else {
                vec![(b.len() - 1, w[rank - 1].clone())]
            };
            simple(vec![(0, cuts_a), (1, cuts_b)], op.kind.clone())
        }
        _ => None,
    }
}

/// `v` (of `shape`) restricted to `r` along `axis`.
fn take<T: Copy>(v: &[T], shape: &[usize], axis: usize, r: &Range<usize>) -> Vec<T> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let n = shape[axis];
    let mut out = Vec::with_capacity(outer * r.len() * inner);
    for o in 0..outer {
        out.extend_from_slice(&v[(o * n + r.start) * inner..(o * n + r.end) * inner]);
    }
    out
}

/// `v` (of `shape`) after `cuts`, and its shape.
fn cut_all<T: Copy>(v: &[T], shape: &[usize], cuts: &[(usize, Range<usize>)]) -> (Vec<T>, Vec<usize>) {
    let mut s = shape.to_vec();
    let mut cur: Cow<[T]> = Cow::Borrowed(v);
    for (a, r) in cuts {
        if whole(r, s[*a]) {
            continue;
        }
        cur = Cow::Owned(take(&cur, &s, *a, r));
        s[*a] = r.len();
    }
    (cur.into_owned(), s)
}

/// A tensor and its codes cut as an operand: its shape, constant data and per-channel
/// parameters along the cut axes.
pub fn operand(t: &ITensor, v: &[i32], cuts: &[(usize, Range<usize>)]) -> Result<(ITensor, Vec<i32>), String> {
    let n: usize = t.shape.iter().product();
    let bad = |what: &str, len: usize| format!("{what} of {} has {len} values for shape {:?}", t.name, t.shape);
    if v.len() != n {
        return Err(bad("the codes", v.len()));
    }
    if cuts
        .iter()
        .any(|(a, r)| *a >= t.shape.len() || r.end > t.shape[*a] || r.start > r.end)
    {
        return Err(format!("a tile reads outside {} of shape {:?}", t.name, t.shape));
    }
    let (codes, shape) = cut_all(v, &t.shape, cuts);
    let data = match &t.data {
        Some(d) if d.len() != n => return Err(bad("the constant", d.len())),
        Some(d) => Some(cut_all(d, &t.shape, cuts).0),
        None => None,
    };
    let mut q = t.q.clone();
    for (a, r) in cuts {
        if q.axis == Some(*a) {
            if q.scale.len() == t.shape[*a] {
                q.scale = q.scale[r.clone()].to_vec();
            }
            if q.zero_point.len() == t.shape[*a] {
                q.zero_point = q.zero_point[r.clone()].to_vec();
            }
        }
    }
    Ok((
        ITensor {
            name: t.name.clone(),
            shape,
            q,
            data,
        },
        codes,
    ))
}

/// The part `keep` of `v` (of `shape`).
pub fn crop(v: Vec<i32>, shape: &[usize], keep: &Window) -> Vec<i32> {
    let cuts: Vec<(usize, Range<usize>)> = keep.iter().cloned().enumerate().collect();
    if cuts.iter().all(|(a, r)| whole(r, shape[*a])) {
        return v;
    }
    cut_all(&v, shape, &cuts).0
}

/// Writes a window's codes `part` into `out` (of `shape`).
pub fn put(out: &mut [i32], shape: &[usize], w: &Window, part: &[i32]) {
    let rank = shape.len();
    if rank == 0 {
        out.copy_from_slice(part);
        return;
    }
    let run = w[rank - 1].len();
    let lens: Vec<usize> = w.iter().map(ExactSizeIterator::len).collect();
    let rows: usize = lens[..rank - 1].iter().product();
    for (i, src) in part.chunks(run.max(1)).enumerate().take(rows) {
        // The row's multi-index in the window, then its flat offset in `out`.
        let (mut rest, mut at, mut stride) = (i, w[rank - 1].start, shape[rank - 1]);
        for d in (0..rank - 1).rev() {
            at += (w[d].start + rest % lens[d]) * stride;
            rest /= lens[d];
            stride *= shape[d];
        }
        out[at..at + src.len()].copy_from_slice(src);
    }
}

/// A kernel a tile runs: an op of a program on its values.
pub type KernelFn<'a> = dyn Fn(&Program, &IOp, &[Option<Vec<i32>>]) -> Result<Vec<i32>, String> + Sync + 'a;

/// `op` of `p` tile by tile: each plan's operands cut from `values`, `kernel` on them (a
/// gather for a resize), the window written into the output.
pub fn run(
    p: &Program,
    op: &IOp,
    plans: &[Plan],
    values: &[Option<Vec<i32>>],
    kernel: &KernelFn,
) -> Result<Vec<i32>, String> {
    let y = &p.tensors[op.outputs[0]];
    let parts: Vec<Result<Vec<i32>, String>> = plans
        .par_iter()
        .map(|plan| run_one(p, op, plan, values, kernel))
        .collect();
    let mut out = vec![0i32; y.shape.iter().product()];
    for (plan, part) in plans.iter().zip(parts) {
        let part = part?;
        let want: usize = plan.window.iter().map(ExactSizeIterator::len).product();
        if part.len() != want {
            return Err(format!(
                "a tile computed {} values for its window {:?}",
                part.len(),
                plan.window
            ));
        }
        put(&mut out, &y.shape, &plan.window, &part);
    }
    Ok(out)
}

/// One tile: its operands cut from `values`, its kernel, the window's part of the result.
fn run_one(
    p: &Program,
    op: &IOp,
    plan: &Plan,
    values: &[Option<Vec<i32>>],
    kernel: &KernelFn,
) -> Result<Vec<i32>, String> {
    let mut tensors = Vec::with_capacity(plan.operands.len() + 1);
    let mut vals = Vec::with_capacity(plan.operands.len() + 1);
    for (i, cuts) in &plan.operands {
        let x = *op.inputs.get(*i).ok_or_else(|| format!("the op has no input {i}"))?;
        let t = &p.tensors[x];
        let v = values[x]
            .as_deref()
            .ok_or_else(|| format!("input {} was not computed", t.name))?;
        let (t, v) = operand(t, v, cuts)?;
        tensors.push(t);
        vals.push(Some(v));
    }
    let y = &p.tensors[op.outputs[0]];
    let n = tensors.len();
    let kind = match &plan.kernel {
        Kernel::Op(kind) => kind.clone(),
        Kernel::Gather { rows, cols } => {
            let (s, x) = (&tensors[0].shape, vals[0].as_deref().unwrap_or_default());
            let mut out = Vec::with_capacity(s[0] * s[1] * rows.len() * cols.len());
            for plane in 0..s[0] * s[1] {
                for &iy in rows {
                    let row = &x[(plane * s[2] + iy) * s[3]..][..s[3]];
                    out.extend(cols.iter().map(|&ix| row[ix]));
                }
            }
            return Ok(out);
        }
    };
    tensors.push(ITensor {
        name: y.name.clone(),
        shape: plan.shape.clone(),
        q: y.q.clone(),
        data: None,
    });
    vals.push(None);
    let mini = Program {
        graph: String::new(),
        tensors,
        ops: Vec::new(),
        inputs: Vec::new(),
        outputs: vec![n],
        constraints: Vec::new(),
    };
    let sub = IOp {
        node: op.node.clone(),
        kind,
        inputs: (0..n).collect(),
        outputs: vec![n],
    };
    let codes = kernel(&mini, &sub, &vals)?;
    Ok(crop(codes, &plan.shape, &plan.keep))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{Act, IntType, PoolKind, QParams};
    use crate::sim::integer::eval_op;

    /// A test operand: shape, type, and whether it is a constant (per-channel weights
    /// along axis 0 when `per_channel`).
    struct Arg {
        shape: Vec<usize>,
        ty: IntType,
        constant: bool,
        per_channel: bool,
    }

    fn arg(shape: &[usize], ty: IntType) -> Arg {
        Arg {
            shape: shape.to_vec(),
            ty,
            constant: false,
            per_channel: false,
        }
    }

    fn weights(shape: &[usize]) -> Arg {
        Arg {
            shape: shape.to_vec(),
            ty: IntType::I8,
            constant: true,
            per_channel: true,
        }
    }

    fn bias(n: usize, ty: IntType) -> Arg {
        Arg {
            shape: vec![n],
            ty,
            constant: true,
            per_channel: false,
        }
    }

    /// Runs `kind` on random codes whole and tile by tile for each `(rows, channels,
    /// pieces)`: every window must plan, and the tiles must give the whole op's codes.
    fn same_as_whole(kind: OpKind, args: &[Arg], y: (&[usize], IntType), tiles: &[(usize, usize, usize)]) {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |lo: i64, hi: i64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            lo + (seed % (hi - lo + 1) as u64) as i64
        };
        let mut tensors = Vec::new();
        let mut values = Vec::new();
        for (k, a) in args.iter().enumerate() {
            let n: usize = a.shape.iter().product();
            let (lo, hi) = match a.ty {
                IntType::I16 => (-2000, 2000),
                IntType::I32 | IntType::I64 => (-5000, 5000),
                _ => (-128, 127),
            };
            let codes: Vec<i64> = (0..n).map(|_| next(lo, hi)).collect();
            let q = if a.per_channel {
                QParams {
                    ty: a.ty,
                    scale: (0..a.shape[0]).map(|c| 0.002 + 0.001 * c as f32).collect(),
                    zero_point: vec![0; a.shape[0]],
                    axis: Some(0),
                }
            } else {
                let zp = if a.ty == IntType::I8 { 3 } else { 0 };
                QParams::per_tensor(a.ty, 0.05, zp)
            };
            tensors.push(ITensor {
                name: format!("t{k}"),
                shape: a.shape.clone(),
                q,
                data: a.constant.then(|| codes.clone()),
            });
            values.push(Some(codes.iter().map(|&c| c as i32).collect::<Vec<i32>>()));
        }
        let zp = if y.1 == IntType::I8 { -5 } else { 0 };
        tensors.push(ITensor {
            name: "y".into(),
            shape: y.0.to_vec(),
            q: QParams::per_tensor(y.1, 0.07, zp),
            data: None,
        });
        values.push(None);
        let n = args.len();
        let p = Program {
            graph: String::new(),
            tensors,
            ops: Vec::new(),
            inputs: Vec::new(),
            outputs: vec![n],
            constraints: Vec::new(),
        };
        let op = IOp {
            node: "op".into(),
            kind,
            inputs: (0..n).collect(),
            outputs: vec![n],
        };
        let want = eval_op(&p, &op, &values).expect("runs whole");
        assert_eq!(want.len(), y.0.iter().product::<usize>(), "{:?}", op.kind);
        for &(rows, channels, pieces) in tiles {
            let tile = Tile {
                rows,
                channels,
                count: 0,
                weight_buffer: 0,
                ifm_buffer: 0,
                ofm_buffer: 0,
            };
            let ws = windows(&p, &op, &tile, pieces, true);
            assert!(
                ws.len() > 1,
                "{:?}: one window for {rows} rows, {channels} channels",
                op.kind
            );
            let plans: Vec<Plan> = ws
                .iter()
                .map(|w| plan(&p, &op, w).unwrap_or_else(|| panic!("{:?}: no plan for {w:?}", op.kind)))
                .collect();
            let got = run(&p, &op, &plans, &values, &eval_op).expect("runs tile by tile");
            let diff = got.iter().zip(&want).filter(|(a, b)| a != b).count();
            assert_eq!(
                diff,
                0,
                "{:?} in {} tiles ({rows} rows, {channels} channels)",
                op.kind,
                ws.len()
            );
        }
    }

    #[test]
    fn tiles_of_convolutions_equal_the_whole_op() {
        use IntType::{I8, I16, I64};
        let conv = |strides, dilations, pads, groups| OpKind::Conv {
            strides,
            dilations,
            pads,
            groups,
            act: Act::None,
        };
        // 16-bit activations, stride 2 by dilation 2, padded: rows, channel blocks, pieces.
        same_as_whole(
            conv([2, 1], [1, 2], [1, 1, 1, 1], 1),
            &[arg(&[1, 4, 9, 7], I16), weights(&[6, 4, 3, 3]), bias(6, I64)],
            (&[1, 6, 5, 5], I16),
            &[(2, 4, 1), (1, 6, 1), (5, 2, 5), (3, 3, 25)],
        );
        // Grouped (3 channels a group, blocks of 2 cut at the groups) and depthwise.
        same_as_whole(
            conv([1, 1], [1, 1], [1, 1, 1, 1], 2),
            &[arg(&[1, 4, 8, 8], I8), weights(&[6, 2, 3, 3]), bias(6, IntType::I32)],
            (&[1, 6, 8, 8], I8),
            &[(3, 2, 1), (8, 1, 1)],
        );
        same_as_whole(
            conv([2, 2], [1, 1], [0, 0, 1, 1], 4),
            &[arg(&[1, 4, 9, 9], I8), weights(&[4, 1, 3, 3]), bias(4, IntType::I32)],
            (&[1, 4, 4, 4], I8),
            &[(1, 4, 1), (3, 1, 1)],
        );
        // Transposed: stride 2 under a 3×3 kernel, and stride 3 over a 2×2 one.
        same_as_whole(
            OpKind::TransposeConv {
                strides: [2, 2],
                act: Act::None,
            },
            &[arg(&[1, 2, 4, 5], I8), weights(&[3, 2, 3, 3]), bias(3, IntType::I32)],
            (&[1, 3, 9, 11], I8),
            &[(2, 3, 1), (1, 2, 1), (4, 1, 1)],
        );
        same_as_whole(
            OpKind::TransposeConv {
                strides: [3, 3],
                act: Act::None,
            },
            &[arg(&[1, 2, 4, 3], I16), weights(&[2, 2, 2, 2]), bias(2, I64)],
            (&[1, 2, 11, 8], I16),
            &[(2, 2, 1), (5, 1, 1)],
        );
        // Fully connected on 16-bit activations, in channel blocks.
        same_as_whole(
            OpKind::FullyConnected { act: Act::None },
            &[arg(&[1, 5, 8], I16), weights(&[7, 8]), bias(7, I64)],
            (&[1, 5, 7], I16),
            &[(1, 3, 1), (1, 1, 1)],
        );
    }

    #[test]
    fn tiles_of_pools_and_data_movement_equal_the_whole_op() {
        use IntType::I8;
        let x = |s: &[usize]| arg(s, I8);
        same_as_whole(
            OpKind::Pool {
                kind: PoolKind::Avg,
                kernel: [3, 3],
                strides: [2, 2],
                pads: [1, 1, 1, 1],
                act: Act::None,
            },
            &[x(&[1, 3, 9, 9])],
            (&[1, 3, 5, 5], I8),
            &[(2, 3, 1), (1, 3, 1)],
        );
        same_as_whole(
            OpKind::Pool {
                kind: PoolKind::Max,
                kernel: [5, 5],
                strides: [1, 1],
                pads: [2, 2, 2, 2],
                act: Act::None,
            },
            &[x(&[1, 2, 6, 6])],
            (&[1, 2, 6, 6], I8),
            &[(1, 2, 1), (4, 2, 1)],
        );
        same_as_whole(
            OpKind::ResizeNearest,
            &[x(&[1, 2, 3, 5])],
            (&[1, 2, 7, 10], I8),
            &[(3, 2, 1), (1, 2, 1)],
        );
        same_as_whole(
            OpKind::Concat { axis: 2 },
            &[x(&[1, 2, 3, 4]), x(&[1, 2, 5, 4])],
            (&[1, 2, 8, 4], I8),
            &[(3, 2, 1), (1, 2, 1)],
        );
        same_as_whole(
            OpKind::Concat { axis: 1 },
            &[x(&[1, 2, 3, 4]), x(&[1, 5, 3, 4])],
            (&[1, 7, 3, 4], I8),
            &[(2, 7, 1), (1, 3, 1)],
        );
        same_as_whole(
            OpKind::Slice {
                axes: vec![SliceAxis {
                    axis: 2,
                    first: 7,
                    count: 4,
                    step: -2,
                }],
            },
            &[x(&[1, 2, 9, 4])],
            (&[1, 2, 4, 4], I8),
            &[(3, 2, 1), (1, 2, 1)],
        );
        same_as_whole(
            OpKind::Transpose { perm: vec![0, 2, 1, 3] },
            &[x(&[1, 3, 5, 4])],
            (&[1, 5, 3, 4], I8),
            &[(2, 2, 1), (1, 5, 1)],
        );
        same_as_whole(
            OpKind::Pad {
                pads: vec![[0, 0], [0, 0], [2, 3], [1, 0]],
                mode: PadMode::Constant(3),
            },
            &[x(&[1, 2, 4, 3])],
            (&[1, 2, 9, 4], I8),
            &[(2, 2, 1), (1, 2, 1)],
        );
        same_as_whole(
            OpKind::Add { act: Act::None },
            &[x(&[1, 3, 6, 5]), x(&[1, 3, 1, 5])],
            (&[1, 3, 6, 5], I8),
            &[(2, 3, 1), (1, 1, 1)],
        );
        same_as_whole(
            OpKind::BatchMatMul,
            &[x(&[1, 2, 5, 4]), x(&[1, 2, 4, 3])],
            (&[1, 2, 5, 3], I8),
            &[(2, 2, 1), (1, 2, 1)],
        );
    }

    #[test]
    fn runs_cut_at_steps_and_group_boundaries() {
        assert_eq!(runs(10, 4, 1), vec![0..4, 4..8, 8..10]);
        assert_eq!(runs(12, 6, 4), vec![0..4, 4..8, 8..12]);
        assert_eq!(runs(5, 0, 1), vec![0..1, 1..2, 2..3, 3..4, 4..5]);
    }

    #[test]
    fn halo_pads_where_the_window_leaves_the_map() {
        // 3×3, stride 1, pad 1 on 10 rows: output rows 0..4 read rows 0..5, one pad above.
        assert_eq!(halo(&(0..4), 1, 1, 3, 1, 10), Some((0..5, [1, 0])));
        // Rows 8..10 read 7..10 and one pad below.
        assert_eq!(halo(&(8..10), 1, 1, 3, 1, 10), Some((7..10, [0, 1])));
        // Stride 2: outputs 2..4 read rows 3..8.
        assert_eq!(halo(&(2..4), 2, 1, 3, 1, 10), Some((3..8, [0, 0])));
    }

    #[test]
    fn put_writes_a_window_back() {
        let shape = [2, 3, 4];
        let mut out = vec![0; 24];
        let w = vec![1..2, 1..3, 2..4];
        put(&mut out, &shape, &w, &[1, 2, 3, 4]);
        let want: Vec<usize> = vec![12 + 4 + 2, 12 + 4 + 3, 12 + 8 + 2, 12 + 8 + 3];
        for (k, &i) in want.iter().enumerate() {
            assert_eq!(out[i], k as i32 + 1);
        }
        assert_eq!(out.iter().filter(|&&v| v != 0).count(), 4);
    }
}
