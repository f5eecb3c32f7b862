//! Element-wise chains: consecutive element-wise nodes where each one consumes the previous
//! one's output (`x → Add 3 → Clip 0,6 → Div 6 → Mul x`, the exported HardSwish) run as one
//! pass over the data, tile by tile, instead of one full pass per node. A value made inside
//! the chain may feed later nodes of the chain too (the `x` of `Mul x`): the pass keeps that
//! tile aside ("a tap") instead of materializing the whole tensor.
//!
//! The chain is found when the plan is made; whether its operands fit (scalars, tensors of
//! the chain's shape, or per-channel vectors) is checked at run time, and a chain that does
//! not fit runs node by node.

use super::elementwise_sigmoid as sigmoid;
use crate::ir::{Graph, Node, Tensor, ValueId};
use rayon::prelude::*;

/// Ops a chain may contain.
const CHAIN_OPS: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Relu",
    "Clip",
    "HardSigmoid",
    "HardSwish",
    "Sigmoid",
    "LeakyRelu",
    "Tanh",
    "Neg",
    "Abs",
];

/// A chain found at plan time: `nodes[0]` consumes `start` at `carried[0]`; every later
/// node consumes its predecessor's output at `carried[k]`. `taps[k]` says where the other operand
/// of a binary node comes from when it is a value of the chain itself: 0 for `start`,
/// `i + 1` for the output of `nodes[i]`.
#[derive(Clone, Debug)]
pub struct Chain {
    pub nodes: Vec<usize>,
    pub carried: Vec<usize>,
    pub taps: Vec<Option<usize>>,
    pub start: ValueId,
    pub out: ValueId,
}

impl Chain {
    /// Whether the chain reads `start` anywhere but as the first node's input 0 outside of
    /// a tap (then the start buffer cannot be donated).
    pub fn reads_start_untapped(&self, g: &Graph) -> bool {
        self.nodes.iter().enumerate().any(|(k, &n)| {
            let tapped = self.taps[k] == Some(0);
            g.nodes[n].inputs.iter().enumerate().any(|(i, v)| {
                *v == Some(self.start) && !(k == 0 && i == self.carried[0]) && !(tapped && i == 1 - self.carried[k])
            })
        })
    }
}

/// Finds chains among consecutive steps of `order`. Returns, per step, the chain starting there.
pub fn find_chains(g: &Graph, order: &[usize]) -> Vec<Option<Chain>> {
    let consumers = g.consumers();
    let is_output = |v: ValueId| g.outputs.contains(&v);
    let single_out = |n: &Node| -> Option<ValueId> {
        match n.outputs.as_slice() {
            [Some(v)] => Some(*v),
            _ => None,
        }
    };
    let is_binary = |op: &str| matches!(op, "Add" | "Sub" | "Mul" | "Div");
    let is_const = |v: ValueId| {
        g.values[v].constant.is_some() || g.values[v].producer.is_some_and(|p| g.nodes[p].op == "Constant")
    };
    let mut chains = vec![None; order.len()];
    let mut i = 0;
    while i < order.len() {
        let first = &g.nodes[order[i]];
        // A binary first node carries its non-constant input (`Mul(scale, conv_out)`).
        let first_pos = usize::from(is_binary(&first.op) && first.input(0).is_some_and(is_const));
        let (Some(start), Some(first_out)) = (first.input(first_pos), single_out(first)) else {
            i += 1;
            continue;
        };
        if !CHAIN_OPS.contains(&first.op.as_str()) || !first.domain.is_empty() {
            i += 1;
            continue;
        }
        // Values of the chain in order: start, then each node's output.
        let mut values = vec![start, first_out];
        let mut nodes = vec![order[i]];
        let mut carried = vec![first_pos];
        let first_tap = if is_binary(&first.op) {
            first.input(1 - first_pos).filter(|&v| v == start).map(|_| 0)
        } else {
            None
        };
        let mut taps = vec![first_tap];
        let mut j = i + 1;
        while j < order.len() {
            let prev_out = values[values.len() - 1];
            let cur = &g.nodes[order[j]];
            if !CHAIN_OPS.contains(&cur.op.as_str()) || !cur.domain.is_empty() || is_output(prev_out) {
                break;
            }
            let uses: Vec<usize> = cur
                .inputs
                .iter()
                .enumerate()
                .filter(|(_, v)| **v == Some(prev_out))
                .map(|(k, _)| k)
                .collect();
            let pos = match uses.as_slice() {
                [p] if *p <= 1 => *p,
                _ => break,
            };
            let binary = is_binary(&cur.op);
            if pos == 1 && !binary {
                break;
            }
            let tap = if binary {
                cur.input(1 - pos).and_then(|v| values.iter().position(|&c| c == v))
            } else {
                None
            };
            let Some(out) = single_out(cur) else { break };
            nodes.push(order[j]);
            carried.push(pos);
            taps.push(tap);
            values.push(out);
            j += 1;
        }
        // Every value made inside the chain must be used only inside it (it is never
        // materialized); cut the chain before the first one that escapes.
        let mut len = nodes.len();
        loop {
            let escapes = (0..len - 1).find(|&k| {
                let v = values[k + 1];
                is_output(v) || consumers[v].iter().any(|c| !nodes[..len].contains(c))
            });
            match escapes {
                Some(k) => len = k + 1,
                None => break,
            }
        }
        if len >= 2 {
            nodes.truncate(len);
            carried.truncate(len);
            taps.truncate(len);
            chains[i] = Some(Chain {
                nodes,
                carried,
                taps,
                start,
                out: values[len],
            });
            i += len;
        } else {
            i += 1;
        }
    }
    chains
}

/// A chain operand resolved at run time.
enum Operand<'a> {
    None,
    Scalar(f32),
    /// Same shape as the chain's data, contiguous.
    Full(&'a [f32]),
    /// One value per run of `run` elements (per-channel scales), cycling.
    PerRun(Vec<f32>, usize),
    /// Values repeating whole along the leading axes (a bias `[C]` against `[.., C]`).
    Cycle(&'a [f32]),
    /// A value of the chain itself, kept per tile in the given save slot.
    Tap(usize),
}

impl Operand<'_> {
    #[inline]
    fn get(&self, i: usize) -> f32 {
        match self {
            Self::None => 0.0,
            Self::Scalar(q) => *q,
            Self::Full(s) => s[i],
            Self::PerRun(v, run) => v[(i / run) % v.len()],
            Self::Cycle(v) => v[i % v.len()],
            Self::Tap(_) => f32::NAN,
        }
    }
}

fn operand<'a>(t: Option<&'a Tensor>, shape: &[usize]) -> Option<Operand<'a>> {
    let Some(t) = t else { return Some(Operand::None) };
    let Tensor::F32(b) = t else { return None };
    if b.len() == 1 {
        return b.iter().next().map(|&q| Operand::Scalar(q));
    }
    if b.shape() == shape {
        return b.as_slice().map(Operand::Full);
    }
    // b, less its leading 1s, is the trailing part of the shape: it repeats whole.
    let lead = b.shape().iter().take_while(|&&d| d == 1).count();
    let tail = &b.shape()[lead..];
    if !tail.is_empty()
        && tail.len() <= shape.len()
        && shape[shape.len() - tail.len()..] == *tail
        && let Some(v) = b.as_slice()
    {
        return Some(Operand::Cycle(v));
    }
    // Per-channel: b's non-1 dims form a prefix block of the (right-aligned) shape.
    let rank = shape.len();
    if b.ndim() > rank {
        return None;
    }
    let bshape: Vec<usize> = std::iter::repeat_n(1, rank - b.ndim())
        .chain(b.shape().iter().copied())
        .collect();
    let last = bshape.iter().rposition(|&d| d != 1)?;
    for k in 0..=last {
        if bshape[k] != 1 && bshape[k] != shape[k] {
            return None;
        }
    }
    for &d in &bshape[last + 1..] {
        if d != 1 {
            return None;
        }
    }
    let run: usize = shape[last + 1..].iter().product();
    let prefix: Vec<usize> = shape[..=last]
        .iter()
        .copied()
        .chain(std::iter::repeat_n(1, rank - last - 1))
        .collect();
    let bv = b.broadcast(ndarray::IxDyn(&prefix))?;
    let vals: Vec<f32> = bv.iter().copied().collect();
    (run >= 1).then_some(Operand::PerRun(vals, run))
}

#[derive(Clone, Copy)]
enum Step {
    Add,
    Sub,
    Mul,
    Div,
    Relu,
    Clip(f32, f32),
    HardSigmoid(f32, f32),
    HardSwish,
    Sigmoid,
    LeakyRelu(f32),
    Tanh,
    Neg,
    Abs,
}

/// Runs the chain if its operands fit; `None` means "run the nodes one by one".
/// `data` is the chain's start value, already copied or donated; it becomes the output.
pub fn run_chain<'e>(
    g: &Graph,
    chain: &Chain,
    mut data: Tensor,
    lookup: &dyn Fn(ValueId) -> Option<&'e Tensor>,
    opset: i64,
) -> Result<Tensor, Tensor> {
    let shape: Vec<usize> = data.shape().to_vec();
    let mut steps = Vec::with_capacity(chain.nodes.len());
    let mut operands = Vec::with_capacity(chain.nodes.len());
    // Chain values kept per tile: `saved_at[slot]` is the tap source (0 = start).
    let mut saved_at: Vec<usize> = chain.taps.iter().flatten().copied().collect();
    saved_at.sort_unstable();
    saved_at.dedup();
    for (k, &n) in chain.nodes.iter().enumerate() {
        let node = &g.nodes[n];
        let pos = chain.carried[k];
        let other = |i: usize| node.input(i).map(lookup);
        let step = match node.op.as_str() {
            "Add" => Step::Add,
            "Sub" => Step::Sub,
            "Mul" => Step::Mul,
            "Div" => Step::Div,
            "Relu" => Step::Relu,
            "HardSwish" => Step::HardSwish,
            "Sigmoid" => Step::Sigmoid,
            "Tanh" => Step::Tanh,
            "Neg" => Step::Neg,
            "Abs" => Step::Abs,
            "HardSigmoid" => Step::HardSigmoid(node.attr_f("alpha").unwrap_or(0.2), node.attr_f("beta").unwrap_or(0.5)),
            "LeakyRelu" => Step::LeakyRelu(node.attr_f("alpha").unwrap_or(0.01)),
            "Clip" => {
                if opset < 11 {
                    Step::Clip(
                        node.attr_f("min").unwrap_or(f32::MIN),
                        node.attr_f("max").unwrap_or(f32::MAX),
                    )
                } else {
                    let bound = |i: usize, d: f32| -> Option<f32> {
                        match other(i) {
                            None => Some(d),
                            Some(Some(Tensor::F32(a))) if a.len() == 1 => a.iter().next().copied(),
                            Some(_) => None,
                        }
                    };
                    match (bound(1, f32::MIN), bound(2, f32::MAX)) {
                        (Some(lo), Some(hi)) => Step::Clip(lo, hi),
                        _ => return Err(data),
                    }
                }
            }
            _ => return Err(data),
        };
        let op = if let Some(src) = chain.taps[k] {
            Operand::Tap(saved_at.iter().position(|&s| s == src).unwrap_or_default())
        } else if matches!(step, Step::Add | Step::Sub | Step::Mul | Step::Div) {
            let idx = 1 - pos;
            let t = match other(idx) {
                Some(Some(t)) => Some(t),
                _ => return Err(data),
            };
            match operand(t, &shape) {
                Some(o) => o,
                None => return Err(data),
            }
        } else {
            Operand::None
        };
        steps.push((step, pos));
        operands.push(op);
    }
    let Tensor::F32(a) = &mut data else { return Err(data) };
    let Some(buf) = a.as_slice_mut() else { return Err(data) };
    buf.par_chunks_mut(TILE).enumerate().for_each_init(
        || vec![vec![0f32; TILE]; saved_at.len()],
        |saved, (t, chunk)| run_tile(&steps, &operands, &saved_at, saved, chunk, t * TILE),
    );
    Ok(data)
}

/// Elements a chain processes at a time (per worker).
const TILE: usize = 4096;

crate::simd_dispatch!(fn run_tile(
    steps: &[(Step, usize)],
    operands: &[Operand<'_>],
    saved_at: &[usize],
    saved: &mut [Vec<f32>],
    chunk: &mut [f32],
    base: usize,
) => run_tile_impl);

/// Every step of a chain over one tile, keeping the tapped values aside.
#[inline(always)]
fn run_tile_impl<const FMA: bool>(
    steps: &[(Step, usize)],
    operands: &[Operand<'_>],
    saved_at: &[usize],
    saved: &mut [Vec<f32>],
    chunk: &mut [f32],
    base: usize,
) {
    let save = |saved: &mut [Vec<f32>], point: usize, chunk: &[f32]| {
        if let Some(slot) = saved_at.iter().position(|&s| s == point) {
            saved[slot][..chunk.len()].copy_from_slice(chunk);
        }
    };
    save(saved, 0, chunk);
    for (k, ((step, pos), opnd)) in steps.iter().zip(operands).enumerate() {
        if let Operand::Tap(slot) = opnd {
            let tapped = Operand::Full(&saved[*slot][..chunk.len()]);
            apply(*step, *pos, &tapped, chunk, 0);
        } else {
            apply(*step, *pos, opnd, chunk, base);
        }
        save(saved, k + 1, chunk);
    }
}

#[inline(always)]
fn apply(step: Step, pos: usize, o: &Operand<'_>, chunk: &mut [f32], base: usize) {
    macro_rules! bin {
        ($f:expr) => {{
            let f = $f;
            match o {
                Operand::Scalar(q) => {
                    let q = *q;
                    if pos == 0 {
                        for v in chunk.iter_mut() {
                            *v = f(*v, q);
                        }
                    } else {
                        for v in chunk.iter_mut() {
                            *v = f(q, *v);
                        }
                    }
                }
                Operand::Full(s) => {
                    let s = &s[base..base + chunk.len()];
                    if pos == 0 {
                        chunk.iter_mut().zip(s).for_each(|(v, &q)| *v = f(*v, q));
                    } else {
                        chunk.iter_mut().zip(s).for_each(|(v, &q)| *v = f(q, *v));
                    }
                }
                Operand::PerRun(vals, run) => {
                    // One scalar per run: split the tile where the channel changes.
                    let (run, n) = ((*run).max(1), chunk.len());
                    let mut k = 0;
                    while k < n {
                        let i = base + k;
                        let q = vals[(i / run) % vals.len()];
                        let end = (k + run - i % run).min(n);
                        if pos == 0 {
                            chunk[k..end].iter_mut().for_each(|v| *v = f(*v, q));
                        } else {
                            chunk[k..end].iter_mut().for_each(|v| *v = f(q, *v));
                        }
                        k = end;
                    }
                }
                Operand::Cycle(vals) => {
                    // Split the tile where the pattern restarts.
                    let (p, n) = (vals.len(), chunk.len());
                    let mut k = 0;
                    while k < n {
                        let off = (base + k) % p;
                        let end = (k + p - off).min(n);
                        let seg = &vals[off..off + (end - k)];
                        if pos == 0 {
                            chunk[k..end].iter_mut().zip(seg).for_each(|(v, &q)| *v = f(*v, q));
                        } else {
                            chunk[k..end].iter_mut().zip(seg).for_each(|(v, &q)| *v = f(q, *v));
                        }
                        k = end;
                    }
                }
                _ => {
                    for (k, v) in chunk.iter_mut().enumerate() {
                        let q = o.get(base + k);
                        *v = if pos == 0 { f(*v, q) } else { f(q, *v) };
                    }
                }
            }
        }};
    }
    match step {
        Step::Add => bin!(|p: f32, q: f32| p + q),
        Step::Sub => bin!(|p: f32, q: f32| p - q),
        Step::Mul => bin!(|p: f32, q: f32| p * q),
        Step::Div => bin!(|p: f32, q: f32| p / q),
        Step::Relu => chunk.iter_mut().for_each(|v| *v = v.max(0.0)),
        Step::Clip(lo, hi) => chunk.iter_mut().for_each(|v| {
            let w = if *v < lo { lo } else { *v };
            *v = if w > hi { hi } else { w };
        }),
        Step::HardSigmoid(al, be) => chunk.iter_mut().for_each(|v| *v = (al * *v + be).clamp(0.0, 1.0)),
        Step::HardSwish => chunk.iter_mut().for_each(|v| *v *= (*v / 6.0 + 0.5).clamp(0.0, 1.0)),
        Step::Sigmoid => chunk.iter_mut().for_each(|v| *v = sigmoid(*v)),
        Step::LeakyRelu(al) => chunk.iter_mut().for_each(|v| *v = if *v < 0.0 { al * *v } else { *v }),
        Step::Tanh => chunk.iter_mut().for_each(|v| *v = v.tanh()),
        Step::Neg => chunk.iter_mut().for_each(|v| *v = -*v),
        Step::Abs => chunk.iter_mut().for_each(|v| *v = v.abs()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{ArrayD, IxDyn};

    /// A bias along the last axis is a repeating pattern, a per-channel scale a run per
    /// value; both give, at every tile offset, what the fully broadcast operand gives.
    #[test]
    fn trailing_and_per_channel_operands_match_full_broadcast() {
        let shape = [2usize, 5, 7];
        let n: usize = shape.iter().product();
        let bias =
            Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[7]), (0..7).map(|v| v as f32 * 0.5).collect()).expect("bias"));
        let chan = Tensor::F32(
            ArrayD::from_shape_vec(IxDyn(&[5, 1]), (0..5).map(|v| v as f32 + 1.0).collect()).expect("chan"),
        );
        assert!(matches!(operand(Some(&bias), &shape), Some(Operand::Cycle(_))));
        assert!(matches!(operand(Some(&chan), &shape), Some(Operand::PerRun(_, 7))));
        for t in [&bias, &chan] {
            let Tensor::F32(b) = t else { unreachable!() };
            let full: Vec<f32> = b.broadcast(IxDyn(&shape)).expect("broadcast").iter().copied().collect();
            let o = operand(Some(t), &shape).expect("fits");
            for (base, len) in [(0, n), (3, 11), (6, 1), (13, 29), (69, 1)] {
                for pos in [0, 1] {
                    let data: Vec<f32> = (base..base + len).map(|i| i as f32).collect();
                    let mut got = data.clone();
                    apply(Step::Sub, pos, &o, &mut got, base);
                    let mut want = data.clone();
                    apply(Step::Sub, pos, &Operand::Full(&full), &mut want, base);
                    assert_eq!(got, want, "base {base} len {len} pos {pos}");
                }
            }
        }
    }
}
