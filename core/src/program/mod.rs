//! The integer program: every tensor's storage type, float32 scale(s) and zero point(s),
//! weights and biases as integer codes, one integer op per step with TFLite's
//! reference-kernel semantics. Legalization (`quant::legalize`) makes one from a plan or
//! the TFLite reader (`import::tflite`) from a quantized file; the integer reference
//! (`sim::integer`), the TFLite exporter, the compiler and the emulator read it. This
//! module depends on nothing but the standard library and serde, so each of them can
//! depend on it and on nothing of the others.

mod grid;
mod ops;

pub use grid::{IntType, QParams};
pub use ops::*;
use serde::{Deserialize, Serialize};

/// The constraint rule that records why a node runs in the float fallback.
pub const FALLBACK_RULE: &str = "float-fallback";

/// TILE as copies of codes: the input's shape with a unit axis before each repeated one,
/// and that shape with the repeat counts in place of the units (a RESHAPE, then a
/// BROADCAST_TO, then a RESHAPE to `ys`). `None` when `ys` is not a tiling of `xs`.
pub fn tile_shapes(xs: &[usize], ys: &[usize]) -> Option<(Vec<usize>, Vec<usize>)> {
    if xs.len() != ys.len() || xs.iter().zip(ys).any(|(&a, &b)| a == 0 || b % a != 0) {
        return None;
    }
    let (mut unit, mut wide) = (Vec::new(), Vec::new());
    for (&a, &b) in xs.iter().zip(ys) {
        if b != a {
            unit.push(1);
            wide.push(b / a);
        }
        unit.push(a);
        wide.push(a);
    }
    Some((unit, wide))
}

/// TFLite's QUANTIZE of one float: `round(x / s) + zp` in float32, saturated.
pub fn quantize_code(x: f32, q: &QParams) -> i32 {
    if q.ty == IntType::F32 {
        // A float32 tensor's codes are its bits.
        return x.to_bits() as i32;
    }
    let (lo, hi) = q.ty.range();
    ((x / q.s()).round() as i32).saturating_add(q.zp()).clamp(lo, hi)
}

/// A tensor of the program: an activation (codes made at run time) or a constant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ITensor {
    /// The graph value's name; hidden tensors (a fused pre-activation, a requantized
    /// Concat input) get the value's name and a suffix after `:`.
    pub name: String,
    pub shape: Vec<usize>,
    pub q: QParams,
    /// Constant codes (float32 constants as their bits).
    pub data: Option<Vec<i64>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IOp {
    /// The graph node it comes from.
    pub node: String,
    pub kind: OpKind,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
}

/// A place where the integer scheme overrides what calibration chose.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Constraint {
    pub tensor: String,
    pub node: String,
    /// A short stable key: `fixed-output-grid`, `lut-input-grid`, `concat-requantize`,
    /// `folded-hardsigmoid`, `int16-softmax-floor` and the others `Legalizer::constraint`
    /// is called with.
    pub rule: String,
    pub detail: String,
}

/// An integer program: what the reference executor runs and the TFLite exporter writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Program {
    /// `quant::params::graph_id` of the optimized graph.
    pub graph: String,
    pub tensors: Vec<ITensor>,
    pub ops: Vec<IOp>,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
    pub constraints: Vec<Constraint>,
}

impl Program {
    /// The nodes the float fallback runs in float on the host: (node, ONNX op, why it has
    /// no integer form).
    pub fn fallbacks(&self) -> Vec<(String, String, String)> {
        self.ops
            .iter()
            .filter_map(|op| match &op.kind {
                OpKind::Float { op: FloatOp::Node(n) } => {
                    let why = self
                        .constraints
                        .iter()
                        .find(|c| c.rule == FALLBACK_RULE && c.node == op.node)
                        .map(|c| c.detail.clone())
                        .unwrap_or_default();
                    Some((op.node.clone(), n.op.clone(), why))
                }
                _ => None,
            })
            .collect()
    }

    pub fn tensor_id(&self, name: &str) -> Option<usize> {
        self.tensors.iter().position(|t| t.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_table_rows_are_named_once_and_float_rows_say_so() {
        let mut names: Vec<&str> = OPS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), OPS.len(), "an op name appears twice in the op table");
        let k = OpKind::Float { op: FloatOp::Div };
        assert_eq!((k.spec().name, k.name()), ("FloatDiv", "Div"));
        let k = OpKind::Pool {
            kind: PoolKind::Avg,
            kernel: [2, 2],
            strides: [2, 2],
            pads: [0; 4],
            act: Act::None,
        };
        assert_eq!(
            (k.code(), k.name(), k.spec().builtins),
            (9, "AvgPool", &["AVERAGE_POOL_2D"][..])
        );
        for s in &OPS {
            assert!(
                !s.summary.is_empty() && s.inputs.start() <= s.inputs.end(),
                "{}",
                s.name
            );
        }
        assert!(integer_builtins().contains(&"GATHER"));
        assert!(
            !integer_builtins().contains(&"DIV"),
            "a float-only builtin listed as integer"
        );
    }

    /// The program is the floor the other stages stand on: it names none of them, and the
    /// integer reference names no quantizer type.
    #[test]
    fn the_program_depends_on_no_other_stage() {
        let root = concat!("crate", "::");
        let files = [
            ("program/mod.rs", include_str!("mod.rs")),
            ("program/ops.rs", include_str!("ops.rs")),
            ("program/grid.rs", include_str!("grid.rs")),
        ];
        for (file, text) in files {
            for (i, line) in text.lines().enumerate() {
                let uses_other = line
                    .match_indices(root)
                    .any(|(at, _)| !line[at + root.len()..].starts_with("program"));
                assert!(!uses_other, "{file}:{}: {line}", i + 1);
            }
        }
        let quant = concat!("crate", "::quant");
        for (file, text) in [
            ("sim/integer/mod.rs", include_str!("../sim/integer/mod.rs")),
            ("sim/integer/kernels.rs", include_str!("../sim/integer/kernels.rs")),
            ("sim/integer/fixed.rs", include_str!("../sim/integer/fixed.rs")),
        ] {
            assert!(!text.contains(quant), "{file} names the quantizer");
        }
    }
}
