//! Checks a decoded binary before anything runs: every tensor's grid against its type and
//! shape, every buffer against its arena, and every command and host op against the shapes
//! of its operands, so that a file whose checksums were recomputed over inconsistent
//! contents is refused with the step and node it names instead of reaching a kernel.

use crate::compiler::binary::{Binary, Location};
use crate::compiler::lower::{Step, Unit};
use crate::program::{FloatOp, IOp, ITensor, IntType, OpKind, PadMode};

/// The most elements one tensor may have (its codes are held as `i32`).
const MAX_ELEMENTS: usize = 1 << 28;

fn elements(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// Checks the whole binary; the message names the tensor, command or host op.
pub fn binary(b: &Binary) -> Result<(), String> {
    let ts: Vec<&ITensor> = b.tensors.iter().map(|t| &t.tensor).collect();
    for (k, t) in b.tensors.iter().enumerate() {
        tensor(&t.tensor).map_err(|m| format!("tensor {k} ({}): {m}", t.tensor.name))?;
        let arena = match t.location {
            Location::Sram => Some(("SRAM", b.sram_arena_bytes)),
            Location::Offchip => Some(("off-chip", b.offchip_arena_bytes)),
            Location::Weights | Location::None => None,
        };
        if let Some((name, size)) = arena
            && t.offset.checked_add(t.bytes).is_none_or(|e| e > size)
        {
            return Err(format!(
                "tensor {k} ({}): bytes {}+{} are outside the {name} arena of {size} bytes",
                t.tensor.name, t.offset, t.bytes
            ));
        }
        let constant = t.tensor.data.is_some();
        if constant != (t.location == Location::Weights) {
            return Err(format!("tensor {k} ({}): a constant must live in WGTS", t.tensor.name));
        }
    }
    for &i in &b.inputs {
        if ts[i].data.is_some() {
            return Err(format!("input {} is a constant", ts[i].name));
        }
    }
    let mut written = vec![false; ts.len()];
    for (c, cmd) in b.commands.iter().enumerate() {
        let at = |m: String| format!("command {c} (node {}): {m}", cmd.op.node);
        op(&ts, &cmd.op).map_err(at)?;
        if cmd.unit == Unit::Mac && matches!(cmd.op.kind, OpKind::Conv { .. } | OpKind::TransposeConv { .. }) {
            let o = ts[cmd.op.inputs[1]].shape[0];
            if cmd.requant.len() != o && cmd.requant.len() != 1 {
                return Err(at(format!(
                    "{} requantization pairs for {o} output channels",
                    cmd.requant.len()
                )));
            }
        }
        for &(q, s) in &cmd.requant {
            if q < 0 || !(-31..=30).contains(&s) {
                return Err(at(format!(
                    "requantization ({q}, {s}) is not a Q31 multiplier and shift"
                )));
            }
        }
        if let Some(f) = &cmd.fused {
            op(&ts, f).map_err(|m| format!("command {c}, fused node {}: {m}", f.node))?;
            if f.inputs.first() != Some(&cmd.op.outputs[0]) {
                return Err(at(format!(
                    "the fused node {} does not read the command's output",
                    f.node
                )));
            }
        }
        match cmd.lut.len() {
            0 => {}
            256 => {
                let (lo, hi) = cmd
                    .fused
                    .as_ref()
                    .map_or(&cmd.op, |f| f)
                    .outputs
                    .first()
                    .map_or((-128, 127), |&y| ts[y].q.ty.range());
                if let Some(v) = cmd.lut.iter().find(|&&v| v < lo || v > hi) {
                    return Err(at(format!("table entry {v} outside the output range {lo}..={hi}")));
                }
                if ts[cmd.op.outputs[0]].q.ty != IntType::I8 {
                    return Err(at("a 256-entry table on a tensor that is not int8".into()));
                }
            }
            n => return Err(at(format!("a table of {n} entries (0 or 256)"))),
        }
        if cmd.pieces == 0 || cmd.tile.rows == 0 || cmd.tile.channels == 0 || cmd.tile.count == 0 {
            return Err(at("a tile or piece count of 0".into()));
        }
        // The tile count is the row tiles × channel blocks the record's sizes make, and
        // only a strided convolution is split into pieces, one per output position.
        let y = &ts[cmd.op.outputs[0]].shape;
        let (rows, chans) = match y.len() {
            4 => (y[2], y[1]),
            0 => (1, 1),
            n => (1, y[n - 1]),
        };
        let want = rows.max(1).div_ceil(cmd.tile.rows) * chans.max(1).div_ceil(cmd.tile.channels);
        if cmd.tile.count != want {
            return Err(at(format!(
                "{} tiles, but {} rows in tiles of {} and {} channels in blocks of {} make {want}",
                cmd.tile.count, rows, cmd.tile.rows, chans, cmd.tile.channels
            )));
        }
        if cmd.pieces > 1 {
            let split = match (&cmd.op.kind, y.len()) {
                (OpKind::Conv { strides, .. }, 4) => {
                    let (a, b) = (y[2] * usize::from(strides[0] > 1), y[3] * usize::from(strides[1] > 1));
                    [a, b, a * b].contains(&cmd.pieces)
                }
                _ => false,
            };
            if !split {
                return Err(at(format!(
                    "{} pieces, not one per output position of a strided axis",
                    cmd.pieces
                )));
            }
        }
    }
    for (h, o) in b.host.iter().enumerate() {
        op(&ts, o).map_err(|m| format!("host op {h} (node {}): {m}", o.node))?;
    }
    // Every tensor is written once, by a step before it is read.
    let ready = |t: usize, w: &[bool]| ts[t].data.is_some() || b.inputs.contains(&t) || w[t];
    let views: Vec<(usize, usize)> = b.views.clone();
    let mut view_done = vec![false; views.len()];
    for (i, s) in b.steps.iter().enumerate() {
        let ops: Vec<&IOp> = match *s {
            Step::Npu(k) => std::iter::once(&b.commands[k].op)
                .chain(b.commands[k].fused.as_ref())
                .collect(),
            Step::Host(h) => vec![&b.host[h]],
        };
        for o in ops {
            // Views whose sources are ready become ready.
            loop {
                let mut changed = false;
                for (v, &(src, dst)) in views.iter().enumerate() {
                    if !view_done[v] && ready(src, &written) && !written[dst] {
                        if elements(&ts[src].shape) != elements(&ts[dst].shape) {
                            return Err(format!(
                                "view {} of {}: {:?} and {:?} differ in size",
                                ts[dst].name, ts[src].name, ts[dst].shape, ts[src].shape
                            ));
                        }
                        written[dst] = true;
                        view_done[v] = true;
                        changed = true;
                    }
                }
                if !changed {
                    break;
                }
            }
            for &x in &o.inputs {
                if !ready(x, &written) {
                    return Err(format!(
                        "step {i} (node {}): input {} is read before it is written",
                        o.node, ts[x].name
                    ));
                }
            }
            for &y in &o.outputs {
                if ts[y].data.is_some() || b.inputs.contains(&y) || written[y] {
                    return Err(format!(
                        "step {i} (node {}): output {} is written twice",
                        o.node, ts[y].name
                    ));
                }
                written[y] = true;
            }
        }
    }
    for &o in &b.outputs {
        let mut t = o;
        let mut hops = 0;
        while !ready(t, &written) {
            match views.iter().find(|v| v.1 == t) {
                Some(&(src, _)) if hops < views.len() => (t, hops) = (src, hops + 1),
                _ => return Err(format!("output {} is never written", ts[o].name)),
            }
        }
    }
    Ok(())
}

/// A tensor's shape, grid and constant data agree with its type.
fn tensor(t: &ITensor) -> Result<(), String> {
    let n = elements(&t.shape)
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| format!("shape {:?} is over {MAX_ELEMENTS} elements", t.shape))?;
    let q = &t.q;
    let quantized = matches!(q.ty, IntType::I4 | IntType::I8 | IntType::I16);
    if q.scale.is_empty() || q.zero_point.is_empty() {
        return Err("no scale or zero point".into());
    }
    if quantized {
        if let Some(s) = q.scale.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(format!("scale {s} is not finite and positive"));
        }
        let (lo, hi) = q.ty.range();
        if let Some(z) = q.zero_point.iter().find(|&&z| z < lo || z > hi) {
            return Err(format!("zero point {z} outside {lo}..={hi}"));
        }
    }
    if q.scale.len() > 1 || q.zero_point.len() > 1 {
        let Some(a) = q.axis.filter(|&a| a < t.shape.len()) else {
            return Err(format!(
                "{} scales without a quantized axis in the shape",
                q.scale.len()
            ));
        };
        if q.scale.len() != t.shape[a] {
            return Err(format!("{} scales along axis {a} of {}", q.scale.len(), t.shape[a]));
        }
    }
    if let Some(d) = &t.data {
        if d.len() != n {
            return Err(format!("{} values for {n} elements", d.len()));
        }
        let (lo, hi) = q.ty.range();
        if matches!(q.ty, IntType::I4 | IntType::I8 | IntType::I16 | IntType::Bool)
            && let Some(v) = d.iter().find(|&&v| v < i64::from(lo) || v > i64::from(hi))
        {
            return Err(format!("constant value {v} outside {lo}..={hi}"));
        }
    }
    Ok(())
}

/// `shape` broadcasts to `out` (NumPy's rule, right-aligned).
fn broadcasts(shape: &[usize], out: &[usize]) -> bool {
    shape.len() <= out.len()
        && shape
            .iter()
            .zip(&out[out.len() - shape.len()..])
            .all(|(&d, &o)| d == o || d == 1)
}

/// One op's operand count, parameters and shapes.
pub fn op(ts: &[&ITensor], op: &IOp) -> Result<(), String> {
    let spec = op.kind.spec();
    let (want, outputs) = (&spec.inputs, &spec.outputs);
    if !want.contains(&op.inputs.len()) || !outputs.contains(&op.outputs.len()) {
        return Err(format!(
            "{} with {} inputs and {} outputs",
            op.kind.name(),
            op.inputs.len(),
            op.outputs.len()
        ));
    }
    let x = |k: usize| ts[op.inputs[k]];
    let y = ts[op.outputs[0]];
    if y.data.is_some() {
        return Err(format!("its output {} is a constant", y.name));
    }
    // Ops that copy codes keep their type, so every tensor holds codes of its own type
    // (the kernels clamp the rest), which the MAC path relies on.
    let copies = spec.copies;
    if let Some(t) = op.inputs.iter().map(|&i| ts[i]).find(|t| copies && t.q.ty != y.q.ty) {
        return Err(format!(
            "{} copies {} ({:?}) into {} ({:?})",
            op.kind.name(),
            t.name,
            t.q.ty,
            y.name,
            y.q.ty
        ));
    }
    let (xs, ys) = (&x(0).shape, &y.shape);
    let rank4 = |s: &[usize], what: &str| -> Result<[usize; 4], String> {
        <[usize; 4]>::try_from(s).map_err(|_| format!("{what} of shape {s:?} is not rank 4"))
    };
    let positive = |v: &[usize], what: &str| -> Result<(), String> {
        if v.contains(&0) {
            Err(format!("{what} {v:?} has a 0"))
        } else {
            Ok(())
        }
    };
    let constant = |k: usize, what: &str| -> Result<(), String> {
        if x(k).data.is_none() {
            Err(format!("its {what} {} is not a constant", x(k).name))
        } else {
            Ok(())
        }
    };
    let same_size = || -> Result<(), String> {
        if elements(xs) != elements(ys) {
            return Err(format!("output {ys:?} and input {xs:?} differ in size"));
        }
        Ok(())
    };
    let axis_ok = |a: &[usize], rank: usize| -> Result<(), String> {
        match a.iter().find(|&&d| d >= rank) {
            Some(d) => Err(format!("axis {d} of a rank-{rank} input")),
            None => Ok(()),
        }
    };
    match &op.kind {
        OpKind::Conv {
            strides,
            dilations,
            pads,
            groups,
            ..
        } => {
            let [n, c, h, w] = rank4(xs, "input")?;
            let [o, cg, kh, kw] = rank4(&x(1).shape, "weights")?;
            let [yn, yo, oh, ow] = rank4(ys, "output")?;
            constant(1, "weights")?;
            constant(2, "bias")?;
            positive(strides, "strides")?;
            positive(dilations, "dilations")?;
            positive(&[kh, kw, *groups], "kernel and groups")?;
            if cg * groups != c || o % groups != 0 || yn != n || yo != o || x(2).shape.iter().product::<usize>() != o {
                return Err(format!(
                    "input {xs:?}, weights {:?}, bias {:?}, {groups} groups and output {ys:?} do not agree",
                    x(1).shape,
                    x(2).shape
                ));
            }
            let span = |d: usize, k: usize, dil: usize, a: usize, b: usize, s: usize| {
                (d + a + b).checked_sub(dil * (k - 1) + 1).map(|r| r / s + 1)
            };
            if span(h, kh, dilations[0], pads[0], pads[2], strides[0]) != Some(oh)
                || span(w, kw, dilations[1], pads[1], pads[3], strides[1]) != Some(ow)
            {
                return Err(format!(
                    "output {ys:?} does not follow from input {xs:?} and the kernel"
                ));
            }
        }
        OpKind::TransposeConv { strides, .. } => {
            let [n, ci, h, w] = rank4(xs, "input")?;
            let [co, wi, kh, kw] = rank4(&x(1).shape, "weights")?;
            let [yn, yo, oh, ow] = rank4(ys, "output")?;
            constant(1, "weights")?;
            constant(2, "bias")?;
            positive(strides, "strides")?;
            if wi != ci
                || yn != n
                || yo != co
                || oh < h.saturating_sub(1) * strides[0]
                || ow < w.saturating_sub(1) * strides[1]
            {
                let _ = (kh, kw);
                return Err(format!(
                    "input {xs:?}, weights {:?} and output {ys:?} do not agree",
                    x(1).shape
                ));
            }
        }
        OpKind::ResizeNearest => {
            let [n, c, h, w] = rank4(xs, "input")?;
            let [yn, yc, oh, ow] = rank4(ys, "output")?;
            if yn != n || yc != c || ((h == 0 || w == 0) && oh * ow > 0) {
                return Err(format!("output {ys:?} from input {xs:?}"));
            }
        }
        OpKind::FullyConnected { .. } => {
            constant(1, "weights")?;
            let [nout, k] = <[usize; 2]>::try_from(x(1).shape.as_slice())
                .map_err(|_| format!("weights {:?} are not rank 2", x(1).shape))?;
            let xe = elements(xs).unwrap_or(0);
            if k == 0 || !xe.is_multiple_of(k) || elements(ys) != Some(xe / k * nout) {
                return Err(format!(
                    "input {xs:?}, weights [{nout}, {k}] and output {ys:?} do not agree"
                ));
            }
        }
        OpKind::Add { .. } | OpKind::Sub { .. } | OpKind::Mul { .. } | OpKind::Extremum { .. } => {
            for k in 0..2 {
                if !broadcasts(&x(k).shape, ys) {
                    return Err(format!("input {:?} does not broadcast to {ys:?}", x(k).shape));
                }
            }
        }
        OpKind::SquaredDifference => {
            for k in 0..2 {
                if !broadcasts(&x(k).shape, ys) {
                    return Err(format!("input {:?} does not broadcast to {ys:?}", x(k).shape));
                }
            }
            if [x(0), x(1), y].iter().any(|t| t.q.ty != IntType::I8) {
                return Err(format!(
                    "SquaredDifference of {:?} and {:?} into {:?} (LiteRT has an int8 kernel only)",
                    x(0).q.ty,
                    x(1).q.ty,
                    y.q.ty
                ));
            }
        }
        OpKind::Rsqrt => {
            same_size()?;
            let ty = x(0).q.ty;
            if !matches!(ty, IntType::I8 | IntType::I16) || y.q.ty != ty {
                return Err(format!("Rsqrt of {ty:?} into {:?} (int8 or int16, one type)", y.q.ty));
            }
            if ty == IntType::I16 && (x(0).q.zp() != 0 || y.q.zp() != 0) {
                return Err("an int16 Rsqrt needs zero points 0".into());
            }
        }
        OpKind::BroadcastTo => {
            if !broadcasts(xs, ys) {
                return Err(format!("input {xs:?} does not broadcast to {ys:?}"));
            }
        }
        OpKind::Mean { axes } | OpKind::Reduce { axes, .. } => {
            axis_ok(axes, xs.len())?;
            let kept: Option<usize> = elements(
                &(0..xs.len())
                    .filter(|d| !axes.contains(d))
                    .map(|d| xs[d])
                    .collect::<Vec<_>>(),
            );
            if kept != elements(ys) {
                return Err(format!("output {ys:?} from input {xs:?} reduced over {axes:?}"));
            }
        }
        OpKind::Pool { kernel, strides, .. } => {
            let [n, c, _, _] = rank4(xs, "input")?;
            let [yn, yc, _, _] = rank4(ys, "output")?;
            positive(kernel, "kernel")?;
            positive(strides, "strides")?;
            if yn != n || yc != c {
                return Err(format!("output {ys:?} from input {xs:?}"));
            }
        }
        OpKind::HardSwish
        | OpKind::Logistic
        | OpKind::Tanh
        | OpKind::Softmax { .. }
        | OpKind::Reshape
        | OpKind::Requantize
        | OpKind::Relu { .. }
        | OpKind::Sqrt
        | OpKind::Log
        | OpKind::Exp => same_size()?,
        OpKind::Transpose { perm } => {
            let mut seen = vec![false; xs.len()];
            for &p in perm {
                if p >= xs.len() || std::mem::replace(&mut seen[p], true) {
                    return Err(format!("{perm:?} is not a permutation of {} axes", xs.len()));
                }
            }
            if perm.len() != xs.len() || perm.iter().map(|&p| xs[p]).ne(ys.iter().copied()) {
                return Err(format!("output {ys:?} is not input {xs:?} permuted by {perm:?}"));
            }
        }
        OpKind::Concat { axis } => {
            let r = ys.len();
            if *axis >= r {
                return Err(format!("axis {axis} of a rank-{r} output"));
            }
            let mut sum = 0usize;
            for k in 0..op.inputs.len() {
                let s = &x(k).shape;
                let other = |a: &[usize]| -> Vec<usize> {
                    a.iter()
                        .enumerate()
                        .filter(|(d, _)| d != axis)
                        .map(|(_, &v)| v)
                        .collect()
                };
                if s.len() != r || other(s) != other(ys) {
                    return Err(format!("input {s:?} does not stack into {ys:?} along axis {axis}"));
                }
                sum = sum.saturating_add(s[*axis]);
            }
            if sum != ys[*axis] {
                return Err(format!(
                    "inputs add up to {sum} along axis {axis}, the output has {}",
                    ys[*axis]
                ));
            }
        }
        OpKind::ArgExtreme { axis, .. } => {
            if *axis >= xs.len() || xs[*axis] == 0 {
                return Err(format!("axis {axis} of an input of shape {xs:?}"));
            }
            if !x(0).q.ty.is_quantized() || y.q.ty != IntType::Index {
                return Err(format!("indexes {:?} into {:?} (int32 indices out)", x(0).q.ty, y.q.ty));
            }
            let mut out = xs.clone();
            out.remove(*axis);
            if &out != ys {
                return Err(format!(
                    "output {ys:?}, the input {xs:?} without axis {axis} is {out:?}"
                ));
            }
        }
        OpKind::Gather { axis } => {
            let is = &x(1).shape;
            if *axis >= xs.len() {
                return Err(format!("axis {axis} of a rank-{} input", xs.len()));
            }
            if x(0).q.ty != y.q.ty || x(1).q.ty != IntType::Index {
                return Err(format!(
                    "gathers {:?} at {:?} indices into {:?}",
                    x(0).q.ty,
                    x(1).q.ty,
                    y.q.ty
                ));
            }
            let out: Vec<usize> = xs[..*axis].iter().chain(is).chain(&xs[axis + 1..]).copied().collect();
            if &out != ys {
                return Err(format!(
                    "output {ys:?}, gathering {is:?} from {xs:?} along axis {axis} gives {out:?}"
                ));
            }
            if let Some(bad) = x(1)
                .data
                .iter()
                .flatten()
                .find(|&&i| !(0..xs[*axis] as i64).contains(&i))
            {
                return Err(format!("index {bad} is out of range for axis {axis} of {}", xs[*axis]));
            }
        }
        OpKind::Slice { axes } => {
            let mut out = xs.clone();
            let mut seen = vec![false; xs.len()];
            for a in axes {
                if a.axis >= xs.len() || std::mem::replace(&mut seen[a.axis], true) || a.step == 0 {
                    return Err(format!("slice axis {} (step {}) of input {xs:?}", a.axis, a.step));
                }
                if a.count > 0 {
                    let last = a.first as i128 + (a.count as i128 - 1) * a.step as i128;
                    let d = xs[a.axis] as i128;
                    if a.first as i128 >= d || !(0..d).contains(&last) {
                        return Err(format!(
                            "slice of axis {} from {} by {} for {} is outside its {d} entries",
                            a.axis, a.first, a.step, a.count
                        ));
                    }
                }
                out[a.axis] = a.count;
            }
            if &out != ys {
                return Err(format!("output {ys:?}, the slice gives {out:?}"));
            }
        }
        OpKind::BatchMatMul => {
            if xs.len() < 2 || x(1).shape.len() < 2 {
                return Err("batch matmul needs rank ≥ 2 operands".into());
            }
        }
        OpKind::Pad { pads, mode } => {
            if pads.len() != xs.len() {
                return Err(format!("{} pad pairs for a rank-{} input", pads.len(), xs.len()));
            }
            let out: Vec<usize> = xs.iter().zip(pads).map(|(&d, p)| d + p[0] + p[1]).collect();
            if &out != ys {
                return Err(format!("output {ys:?}, the padding gives {out:?}"));
            }
            match *mode {
                PadMode::Reflect => {
                    if xs
                        .iter()
                        .zip(pads)
                        .any(|(&d, p)| (p[0] > 0 || p[1] > 0) && (p[0] >= d || p[1] >= d))
                    {
                        return Err(format!("reflection of {pads:?} over input {xs:?}"));
                    }
                }
                PadMode::Constant(c) => {
                    let (lo, hi) = y.q.ty.range();
                    if c < lo || c > hi {
                        return Err(format!("pad value {c} outside {lo}..={hi}"));
                    }
                }
            }
        }
        OpKind::Float {
            op: FloatOp::Reduce { axes, .. },
        } => {
            let xs = &x(0).shape;
            if axes.iter().any(|&a| a >= xs.len()) {
                return Err(format!("reduction axes {axes:?} of a rank-{} input", xs.len()));
            }
            let kept: usize = (0..xs.len()).filter(|d| !axes.contains(d)).map(|d| xs[d]).product();
            if kept != y.shape.iter().product::<usize>() {
                return Err(format!("a reduction of {xs:?} over {axes:?} into {:?}", y.shape));
            }
        }
        OpKind::Float { .. } => {}
    }
    Ok(())
}
