//! NPU/CPU placement of every integer op, with the sentence that decided it, and the
//! contiguous segments it forms.

use super::Options;
use crate::program::{FloatOp, IntType, OpKind, Program};
use crate::target::{OpView, Target, op_view};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Place {
    #[serde(rename = "NPU")]
    Npu,
    #[serde(rename = "CPU")]
    Cpu,
}

impl Place {
    pub fn name(self) -> &'static str {
        match self {
            Self::Npu => "NPU",
            Self::Cpu => "CPU",
        }
    }
}

/// Where one integer op runs and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// The graph node it comes from.
    pub node: String,
    /// TFLite builtin name (`float32 <op>` for ops with no integer form).
    pub op: String,
    pub place: Place,
    /// The rule that sent it to the CPU (with what the op has), or why it runs on the NPU.
    pub reason: String,
    /// Index into [`super::Compiled::segments`].
    pub segment: usize,
}

/// A run of consecutive ops (in program order) on one side.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    #[serde(rename = "device")]
    pub place: Place,
    /// Program op indices `first..=last`.
    pub first: usize,
    pub last: usize,
    /// Ops in the segment.
    #[serde(default)]
    pub nodes: usize,
    /// Its cycles (NPU cycles; host time at the NPU clock), set by the performance model.
    #[serde(default)]
    pub cycles: f64,
}

/// Decides one op's placement.
pub fn place(p: &Program, i: usize, target: &Target, opts: &Options) -> (Place, String, OpView) {
    let op = &p.ops[i];
    let v = op_view(p, op);
    if opts.force_cpu.contains(&op.node) {
        return (Place::Cpu, "forced to the CPU by the user".into(), v);
    }
    if v.class.starts_with("float32 ") {
        let kept = matches!(
            op.kind,
            OpKind::Float {
                op: FloatOp::Unary { .. } | FloatOp::Binary { .. } | FloatOp::Reduce { .. } | FloatOp::Softmax
            }
        ) || op.outputs.iter().any(|&t| p.tensors[t].q.ty == IntType::F32);
        if let OpKind::Float { op: FloatOp::Node(n) } = &op.kind {
            let why = p
                .constraints
                .iter()
                .find(|c| c.rule == crate::program::FALLBACK_RULE && c.node == op.node)
                .map_or_else(
                    || format!("{} has no integer form: runs in float on the host", n.op),
                    |c| format!("{}: {}", n.op, c.detail),
                );
            return (Place::Cpu, why, v);
        }
        let why = if kept {
            "a layer the plan keeps in float: runs in float32 on the host, its integer inputs dequantized"
        } else {
            "no integer form: runs in float32 on the host between a dequantize and a quantize"
        };
        return (Place::Cpu, why.into(), v);
    }
    let Some(support) = target.op(&v.class) else {
        return (Place::Cpu, format!("{} is not supported by {}", v.class, target.id), v);
    };
    let Some(precision) = v.precision else {
        return (
            Place::Cpu,
            "its tensors are not int8/int16 activations (float32, booleans or int32 indices)".into(),
            v,
        );
    };
    if !support.precisions.contains(&precision) {
        let ok: Vec<&str> = support.precisions.iter().map(|p| p.name()).collect();
        return (
            Place::Cpu,
            format!(
                "{} runs at {} on {}; this op is {}",
                v.class,
                ok.join("/"),
                target.id,
                precision.name()
            ),
            v,
        );
    }
    for r in target.generic_rules.iter().chain(&support.rules) {
        if let Some(has) = r.check(&v) {
            return (Place::Cpu, format!("{} ({has})", r.doc()), v);
        }
    }
    (Place::Npu, "supported".into(), v)
}

/// Consecutive ops with the same place.
pub fn segments(places: &[Place]) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    for (i, &pl) in places.iter().enumerate() {
        match out.last_mut() {
            Some(s) if s.place == pl => s.last = i,
            _ => out.push(Segment {
                place: pl,
                first: i,
                last: i,
                nodes: 0,
                cycles: 0.0,
            }),
        }
    }
    for s in &mut out {
        s.nodes = s.last + 1 - s.first;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_maximal_runs() {
        use Place::*;
        let s = segments(&[Npu, Npu, Cpu, Npu, Npu, Npu, Cpu, Cpu]);
        let spans: Vec<(Place, usize, usize)> = s.iter().map(|s| (s.place, s.first, s.last)).collect();
        assert_eq!(spans, vec![(Npu, 0, 1), (Cpu, 2, 2), (Npu, 3, 5), (Cpu, 6, 7)]);
        assert!(segments(&[]).is_empty());
    }
}
