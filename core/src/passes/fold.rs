//! Constant folding, dead code and unused initializer elimination, and common
//! subexpression elimination.

use super::{Cx, Pass};
use crate::ir::{Attr, Constant, Node, Tensor};
use crate::sim::{OpCtx, ops};
use std::collections::HashMap;

/// Ops never folded: control flow, ops whose result is not a function of their inputs, and
/// Q/DQ pairs (folding them would throw away a quantized model's integer weights).
const NOT_FOLDED: &[&str] = &[
    "If",
    "Loop",
    "Scan",
    "Dropout",
    "Constant",
    "QuantizeLinear",
    "DequantizeLinear",
];

/// A folded result may be at most this many elements larger than its inputs (a Tile or an
/// Expand of a constant stays a node instead of becoming a large initializer).
const MAX_GROWTH: usize = 1 << 16;

pub struct FoldConstants;

impl Pass for FoldConstants {
    fn name(&self) -> &'static str {
        "fold-constants"
    }
    fn about(&self) -> &'static str {
        "Constant nodes become initializers; nodes whose inputs are all constant, and Shape/Size of static shapes, are computed once"
    }
    fn run(&self, cx: &mut Cx<'_>) {
        let ctx = OpCtx {
            opset: cx.opset,
            threads: 1,
        };
        for (id, n) in cx.nodes() {
            if !n.domain.is_empty() || n.has_subgraphs() {
                continue;
            }
            let outs: Vec<_> = n.outputs.iter().flatten().copied().collect();
            if outs.is_empty() || outs.iter().any(|&o| cx.is_output(o) || !cx.can_replace_value_name(o)) {
                continue;
            }
            // Constant node → initializer.
            if n.op == "Constant" {
                let Some(t) = constant_node_value(n) else { continue };
                let mut p = cx.patch("constant-node");
                p.remove.push(id);
                p.set_const.push((outs[0], Constant::from_tensor(&t)));
                cx.emit(p);
                continue;
            }
            // Shape/Size of a value whose shape is known.
            if matches!(n.op.as_str(), "Shape" | "Size")
                && let Some(shape) = cx.shape(n.input(0))
                && let Some(t) = shape_value(n, &shape)
            {
                let mut p = cx.patch("shape-of-static");
                p.remove.push(id);
                p.set_const.push((outs[0], Constant::from_tensor(&t)));
                cx.emit(p);
                continue;
            }
            if NOT_FOLDED.contains(&n.op.as_str()) || !ops::SUPPORTED_OPS.contains(&n.op.as_str()) {
                continue;
            }
            let mut inputs: Vec<Option<&Tensor>> = Vec::with_capacity(n.inputs.len());
            let mut all_const = true;
            for v in &n.inputs {
                match v {
                    None => inputs.push(None),
                    Some(v) => {
                        if let Some(t) = cx.constant(*v) {
                            inputs.push(Some(t));
                        } else {
                            all_const = false;
                            break;
                        }
                    }
                }
            }
            if !all_const || n.inputs.is_empty() {
                continue;
            }
            let in_elems: usize = inputs.iter().flatten().map(|t| t.len()).sum();
            let Ok(results) = ops::eval(n, &inputs, &ctx) else {
                continue;
            };
            let out_elems: usize = results.iter().map(Tensor::len).sum();
            if out_elems > in_elems + MAX_GROWTH || results.len() < outs.len() {
                continue;
            }
            let mut p = cx.patch("evaluate");
            p.remove.push(id);
            for (v, t) in n.outputs.iter().zip(&results) {
                if let Some(v) = v {
                    p.set_const.push((*v, Constant::from_tensor(t)));
                }
            }
            cx.emit(p);
        }
    }
}

impl Cx<'_> {
    /// Whether `v` may change how it is defined (not read by name from a subgraph).
    pub(super) fn can_replace_value_name(&self, v: usize) -> bool {
        !self.subgraph_names.contains(&self.g.values[v].name)
    }
}

/// The tensor of a Constant node (`value`, or the `value_*` scalar and list forms).
fn constant_node_value(n: &Node) -> Option<Tensor> {
    let t = match n.attrs.iter().next()? {
        (k, Attr::Tensor(c)) if k == "value" => c.tensor().clone(),
        (k, Attr::Float(f)) if k == "value_float" => Tensor::scalar_f32(*f),
        (k, Attr::Floats(f)) if k == "value_floats" => Tensor::from_f32(&[f.len()], f.clone())?,
        (k, Attr::Int(i)) if k == "value_int" => Tensor::I64(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), *i)),
        (k, Attr::Ints(i)) if k == "value_ints" => {
            Tensor::I64(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[i.len()]), i.clone()).ok()?)
        }
        _ => return None,
    };
    (n.attrs.len() == 1).then_some(t)
}

/// The output of Shape (with `start`/`end`) or Size for a known input shape.
fn shape_value(n: &Node, shape: &[usize]) -> Option<Tensor> {
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    if n.op == "Size" {
        let count: i64 = dims.iter().product();
        return Some(Tensor::I64(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), count)));
    }
    let r = dims.len() as i64;
    let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) } as usize;
    let start = clamp(n.attr_i("start").unwrap_or(0));
    let end = clamp(n.attr_i("end").unwrap_or(r));
    let part = dims.get(start..end.max(start))?.to_vec();
    Some(Tensor::I64(
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[part.len()]), part).ok()?,
    ))
}

pub struct DeadCode;

impl Pass for DeadCode {
    fn name(&self) -> &'static str {
        "dead-code"
    }
    fn about(&self) -> &'static str {
        "Removes nodes whose outputs nothing reads and initializers no node uses"
    }
    fn run(&self, cx: &mut Cx<'_>) {
        for (id, n) in cx.nodes() {
            let dead = n
                .outputs
                .iter()
                .flatten()
                .all(|&o| !cx.is_output(o) && cx.consumers[o].is_empty() && cx.can_replace_value_name(o));
            if dead {
                let mut p = cx.patch("dead-node");
                p.remove.push(id);
                cx.emit(p);
            }
        }
        for (v, val) in cx.g.values.iter().enumerate() {
            if val.constant.is_some()
                && cx.consumers[v].is_empty()
                && !cx.is_output(v)
                && !cx.is_input(v)
                && cx.can_replace_value_name(v)
            {
                let mut p = cx.patch("unused-initializer");
                p.drop.push(v);
                cx.emit(p);
            }
        }
    }
}

pub struct Cse;

/// A key that is equal for attributes with equal meaning; `None` for subgraphs.
fn attr_key(a: &Attr) -> Option<String> {
    Some(match a {
        Attr::Float(f) => format!("f{}", f.to_bits()),
        Attr::Int(i) => format!("i{i}"),
        Attr::String(s) => format!("s{s:?}"),
        Attr::Floats(v) => format!("F{:?}", v.iter().map(|f| f.to_bits()).collect::<Vec<_>>()),
        Attr::Ints(v) => format!("I{v:?}"),
        Attr::Strings(v) => format!("S{v:?}"),
        Attr::Tensor(c) => format!("T{}{:?}{:?}", c.dtype, c.shape, c.raw()),
        Attr::Graph(_) | Attr::Graphs(_) => return None,
    })
}

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }
    fn about(&self) -> &'static str {
        "Merges identical constants and nodes that compute the same thing from the same inputs"
    }
    fn run(&self, cx: &mut Cx<'_>) {
        let g = cx.g;
        // Identical constants: same dtype, shape and bytes.
        let mut seen: HashMap<(String, Vec<usize>, &[u8]), usize> = HashMap::new();
        for (v, val) in g.values.iter().enumerate() {
            let Some(c) = &val.constant else { continue };
            if cx.is_input(v) || cx.consumers[v].is_empty() {
                continue;
            }
            let key = (c.dtype.to_string(), c.shape.clone(), c.raw());
            match seen.get(&key) {
                Some(&first) if cx.can_replace(v, first) && !cx.is_output(v) => {
                    let mut p = cx.patch("duplicate-constant");
                    p.replace.push((v, first));
                    p.drop.push(v);
                    cx.emit(p);
                }
                Some(_) => {}
                None => {
                    seen.insert(key, v);
                }
            }
        }
        // Identical nodes.
        let mut nodes: HashMap<String, usize> = HashMap::new();
        for (id, n) in cx.nodes() {
            if n.has_subgraphs()
                || matches!(
                    n.op.as_str(),
                    "Dropout" | "RandomNormal" | "RandomUniform" | "Multinomial"
                )
            {
                continue;
            }
            let Some(attrs) = n
                .attrs
                .iter()
                .map(|(k, a)| attr_key(a).map(|s| format!("{k}={s}")))
                .collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            let key = format!(
                "{}|{}|{:?}|{}|{}",
                n.domain,
                n.op,
                n.inputs,
                n.outputs.len(),
                attrs.join(";")
            );
            match nodes.get(&key) {
                Some(&first) => {
                    let keep = &g.nodes[first];
                    let pairs: Vec<_> = n.outputs.iter().zip(&keep.outputs).collect();
                    let ok = pairs.iter().all(|(a, b)| match (a, b) {
                        (Some(a), Some(b)) => !cx.is_output(*a) && cx.can_replace(*a, *b),
                        (None, _) => true,
                        (Some(a), None) => cx.consumers[*a].is_empty() && !cx.is_output(*a),
                    });
                    if !ok {
                        continue;
                    }
                    let mut p = cx.patch("duplicate-node");
                    p.remove.push(id);
                    for (a, b) in pairs {
                        if let (Some(a), Some(b)) = (a, b) {
                            p.replace.push((*a, *b));
                        }
                    }
                    cx.emit(p);
                }
                None => {
                    nodes.insert(key, id);
                }
            }
        }
    }
}
