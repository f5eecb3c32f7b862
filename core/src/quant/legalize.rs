//! Legalization: a plan and its optimized graph become an integer [`Program`] — every
//! tensor's storage type, float32 scale(s) and zero point(s), weights and biases as
//! integer codes, one integer op per step with TFLite's reference-kernel semantics. The
//! integer reference executor (`sim::integer`) runs it and the TFLite exporter writes it,
//! so both do the same arithmetic.
//!
//! Where the integer scheme fixes what calibration chose, the program lists a
//! [`Constraint`]: Logistic and Softmax outputs on (1/256, −128), Tanh on (1/128, 0), the
//! input grid a HardSwish look-up needs when its producer is fused, Concat inputs moved to
//! the output's grid, a HardSigmoid folded into its convolution.

use super::params::{bias_codes, check_graph, int8_weight_codes, operand_codes, weight_codes};
use super::scheme::ActFormat;
use super::scheme::WeightFormat;
use super::{QuantError, QuantPlan, Quantizer};
use crate::ir::{Graph, Model, Node, NodeId, Tensor, ValueId, concrete};
use crate::program::{
    Act, BinaryFn, Constraint, Extreme, FALLBACK_RULE, FloatNode, FloatOp, IOp, ITensor, IntType, OpKind, PadMode,
    PoolKind, Program, QParams, ReduceFn, SliceAxis, UnaryFn, quantize_code,
};
use std::collections::HashMap;

/// Ops whose integer kernel copies codes: their output shares the input's grid.
const SAME_GRID: &[&str] = &[
    "ReduceMax",
    "ReduceMin",
    "MaxPool",
    "AveragePool",
    "GlobalMaxPool",
    "Resize",
    "Upsample",
    "Pad",
    "SpaceToDepth",
    "DepthToSpace",
];

/// Ops a plan may keep in float (`float` precision): run in float32 on the host between a
/// DEQUANTIZE of their integer inputs and, where an integer layer reads them, a QUANTIZE of
/// their output; float32 from one to the next.
pub const FLOAT_LAYER_OPS: &[&str] = &[
    "Exp",
    "Log",
    "Sqrt",
    "Tanh",
    "Sigmoid",
    "Neg",
    "Abs",
    "Relu",
    "Reciprocal",
    "HardSwish",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Max",
    "Min",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceMean",
    "Softmax",
    "LayerNormalization",
];

/// Data movement that carries a float32 tensor as it is (its codes are the float's bits).
const FLOAT_CARRIERS: &[&str] = &[
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Identity",
    "Dropout",
    "Expand",
];

/// A node `plan` keeps in float that has a float32 form (one of [`FLOAT_LAYER_OPS`]).
pub(crate) fn is_float_layer(plan: &QuantPlan, node: &Node) -> bool {
    plan.precision(node).activations == ActFormat::Float && FLOAT_LAYER_OPS.contains(&node.op.as_str())
}

/// Whether the integer program reads `v` only in float32: by float layers, through data
/// movement that carries float32, or as a graph output (no reader).
pub(crate) fn read_in_float(g: &Graph, consumers: &[Vec<NodeId>], plan: &QuantPlan, v: ValueId) -> bool {
    consumers[v].iter().all(|&c| {
        let c = &g.nodes[c];
        is_float_layer(plan, c)
            || FLOAT_CARRIERS.contains(&c.op.as_str())
                && c.input(0) == Some(v)
                && c.outputs
                    .iter()
                    .flatten()
                    .all(|&o| read_in_float(g, consumers, plan, o))
    })
}

/// Why a plan cannot become an integer program; each names what it concerns.
#[derive(Debug, thiserror::Error)]
pub enum LegalizeError {
    #[error(
        "the plan belongs to another graph (plan {plan}, this optimized graph {graph}): quantize this model again, with the same passes"
    )]
    WrongGraph { plan: String, graph: String },
    #[error(
        "no integer form for {} node(s): {}{}",
        .nodes.len(),
        .nodes.join("; "),
        if *.downstream > 0 { format!(" (and {} node(s) downstream of them)", .downstream) } else { String::new() }
    )]
    Unsupported { nodes: Vec<String>, downstream: usize },
    #[error("tensor {0}: its shape is not known; give the input shapes (the plan records the calibration's)")]
    Shape(String),
    #[error("input {0}: no such graph input")]
    NoSuchInput(String),
    #[error(transparent)]
    Quant(#[from] QuantError),
}

/// Legalizes `plan` on `model` (the optimized graph) at the given input shapes (by input
/// name; missing ones come from the plan, then from the model).
#[expect(clippy::implicit_hasher, reason = "shapes come from the std maps the samples use")]
pub fn legalize(
    model: &Model,
    plan: &QuantPlan,
    shapes: &HashMap<String, Vec<usize>>,
) -> Result<Program, LegalizeError> {
    let id = check_graph(plan, model).map_err(|(plan, graph)| LegalizeError::WrongGraph { plan, graph })?;
    let mut fixed = model.clone();
    let mut all: HashMap<String, Vec<usize>> = plan.input_shapes.clone().into_iter().collect();
    all.extend(shapes.clone());
    if !all.is_empty() {
        crate::import::shapes::fix_inputs(&mut fixed, &all).map_err(|e| LegalizeError::NoSuchInput(e.0))?;
    }
    // What shape inference leaves open (control flow's outputs): the calibration's shapes.
    for v in &mut fixed.graph.values {
        if v.shape.as_deref().and_then(concrete).is_none()
            && let Some(s) = plan.value_shapes.get(&v.name)
        {
            v.shape = Some(s.iter().map(|&d| crate::ir::Dim::Fixed(d)).collect());
        }
    }
    let q = Quantizer::new(&fixed, 1)?;
    let mut l = Lower {
        q: &q,
        plan,
        program: Program {
            graph: id,
            tensors: Vec::new(),
            ops: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            constraints: Vec::new(),
        },
        ids: HashMap::new(),
        params: HashMap::new(),
        statics: HashMap::new(),
        done: vec![false; fixed.graph.nodes.len()],
        consumers: fixed.graph.consumers(),
        unsupported: Vec::new(),
        downstream: 0,
        visiting: std::collections::HashSet::new(),
        retyped: HashMap::new(),
    };
    l.run()?;
    if !l.unsupported.is_empty() {
        return Err(LegalizeError::Unsupported {
            nodes: l.unsupported,
            downstream: l.downstream,
        });
    }
    Ok(l.program)
}

/// How a convolution's (or FC's) result is finished.
#[derive(Clone, Copy)]
enum Epilogue {
    Act(Act),
    HardSwish,
    /// `clamp(α·x + β, 0, 1)`, folded into weights and bias.
    HardSigmoid(f32, f32),
    /// A Sigmoid look-up after the accumulator's requantization.
    Logistic,
    /// `x·sigmoid(x)`: a Sigmoid look-up and a multiplication by the pre-activation.
    Silu,
    /// `max(x, α·x)` for `0 < α < 1`: a MUL by α and a MAXIMUM with the pre-activation
    /// (TFLite's converter writes a LeakyRelu this way where LEAKY_RELU is not used).
    LeakyRelu(f32),
}

struct Lower<'a, 'm> {
    q: &'a Quantizer<'m>,
    plan: &'a QuantPlan,
    program: Program,
    ids: HashMap<ValueId, usize>,
    params: HashMap<ValueId, QParams>,
    /// Values known at legalization time (shape arithmetic).
    statics: HashMap<ValueId, Tensor>,
    /// Nodes lowered together with their producer.
    done: Vec<bool>,
    /// The nodes reading each value.
    consumers: Vec<Vec<NodeId>>,
    unsupported: Vec<String>,
    /// Nodes not tried because an input has no integer form.
    downstream: usize,
    /// Values whose grid is being worked out.
    visiting: std::collections::HashSet<ValueId>,
    /// Tensors requantized to the other integer width: (tensor, width) → copy.
    retyped: HashMap<(usize, IntType), usize>,
}

type R<T> = Result<T, LegalizeError>;

/// How far the program had got before a lowering was tried.
#[derive(Clone)]
struct Mark {
    ops: usize,
    tensors: usize,
    constraints: usize,
    done: Vec<bool>,
}

fn attr2(node: &Node, name: &str, default: usize) -> [usize; 2] {
    match node.attr_ints(name) {
        Some([a, b]) => [*a as usize, *b as usize],
        _ => [default; 2],
    }
}

fn pads4(node: &Node) -> [usize; 4] {
    match node.attr_ints("pads") {
        Some([t, l, b, r]) => [*t as usize, *l as usize, *b as usize, *r as usize],
        _ => [0; 4],
    }
}

/// The inverse of HardSwish on `[-1.5, ∞)`.
fn hard_swish_inverse(y: f64) -> f64 {
    if y >= 3.0 {
        y
    } else {
        f64::midpoint(-3.0, (9.0 + 24.0 * y.max(-0.375)).sqrt())
    }
}

impl<'a, 'm: 'a> Lower<'a, 'm> {
    fn g(&self) -> &'a crate::ir::Graph {
        let q: &'a Quantizer<'m> = self.q;
        &q.model.graph
    }

    fn name(&self, v: ValueId) -> String {
        self.g().values[v].name.clone()
    }

    fn shape(&self, v: ValueId) -> R<Vec<usize>> {
        let val = &self.g().values[v];
        if let Some(c) = &val.constant {
            return Ok(c.shape.clone());
        }
        if let Some(t) = self.statics.get(&v) {
            return Ok(t.shape().to_vec());
        }
        val.shape
            .as_deref()
            .and_then(concrete)
            .ok_or_else(|| LegalizeError::Shape(val.name.clone()))
    }

    fn push(&mut self, t: ITensor) -> usize {
        self.program.tensors.push(t);
        self.program.tensors.len() - 1
    }

    fn constraint(&mut self, tensor: &str, node: &str, rule: &str, detail: String) {
        self.program.constraints.push(Constraint {
            tensor: tensor.into(),
            node: node.into(),
            rule: rule.into(),
            detail,
        });
    }

    fn unsupported(&mut self, node: &Node, why: &str) {
        self.unsupported.push(format!("{} ({}): {why}", node.label(), node.op));
    }

    /// The grid the plan gives `v`: int8, or int16 symmetric (TFLite's 16×8 scheme).
    fn plan_grid(&self, v: ValueId) -> Result<QParams, String> {
        match self.q.grid(self.plan, v) {
            Some((f @ (ActFormat::Int8 | ActFormat::Int16), r)) => {
                QParams::activation(f, r).ok_or_else(|| "no grid".into())
            }
            Some((f, _)) => Err(format!("{f:?} activations have no integer form (int8 and int16 have)")),
            None => Err(format!(
                "tensor {}: the plan gives it no grid (float, or fused into its consumer)",
                self.g().values[v].name
            )),
        }
    }

    /// The legalized grid of an activation value, with the fixed grids of Logistic,
    /// Softmax and Tanh outputs carried through data movement.
    fn act_params(&mut self, v: ValueId) -> Result<QParams, String> {
        if let Some(p) = self.params.get(&v) {
            return Ok(p.clone());
        }
        // Grids derived from neighbours (through scalar steps) must not go round in a circle.
        if !self.visiting.insert(v) {
            return Err(format!(
                "tensor {}: no grid of its own and none to derive from its neighbours",
                self.name(v)
            ));
        }
        let r = self.act_params_uncached(v);
        self.visiting.remove(&v);
        r
    }

    fn act_params_uncached(&mut self, v: ValueId) -> Result<QParams, String> {
        let g = self.g();
        match g.values[v].dtype {
            Some(crate::ir::DType::I32) => return Ok(QParams::index()),
            Some(crate::ir::DType::Bool) => return Ok(QParams::boolean()),
            Some(crate::ir::DType::I64) => {
                let (name, node) = (g.values[v].name.clone(), self.producer_name(v));
                self.constraint(
                    &name,
                    &node,
                    "int64-as-int32",
                    "int64 values carried as int32 (checked at run time: a value outside the int32 range is an error)"
                        .into(),
                );
                return Ok(QParams::index());
            }
            Some(d) if !d.is_float() => {
                return Err(format!(
                    "{d} tensor {}: only int32 integer tensors have an integer form",
                    g.values[v].name
                ));
            }
            _ => {}
        }
        let producer = g.values[v].producer.map(|p| &g.nodes[p]);
        if let Some(n) = producer.filter(|n| self.is_float_layer(n)) {
            let p = self.float_layer_output(v, n)?;
            self.params.insert(v, p.clone());
            return Ok(p);
        }
        // A fused Sigmoid or Tanh ends in the same look-up as a standalone one.
        let op = producer.and_then(|n| super::bounded_output(n));
        let wide = self.format_of(v) == ActFormat::Int16;
        let fixed = match (op, wide) {
            (Some("Sigmoid" | "Softmax"), false) => Some(QParams::per_tensor(IntType::I8, 1.0 / 256.0, -128)),
            (Some("Tanh"), false) => Some(QParams::per_tensor(IntType::I8, 1.0 / 128.0, 0)),
            (Some("Sigmoid" | "Softmax" | "Tanh"), true) => Some(QParams::per_tensor(IntType::I16, 1.0 / 32768.0, 0)),
            _ => None,
        };
        let p = if let Some(f) = fixed {
            let node = producer.map(|n| n.name.clone()).unwrap_or_default();
            let chosen = self.plan_grid(v).map_or_else(
                |e| e,
                |c| {
                    if c.same_grid(&f) {
                        "the same grid".into()
                    } else {
                        format!("scale {} zero point {}", c.s(), c.zp())
                    }
                },
            );
            self.constraint(
                &self.name(v),
                &node,
                "fixed-output-grid",
                format!(
                    "output fixed at scale {} zero point {} (calibration chose {chosen})",
                    f.s(),
                    f.zp()
                ),
            );
            f
        } else if let Some(n) = producer.filter(|n| super::PASS_THROUGH.contains(&n.op.as_str())) {
            let x = n.input(0).ok_or("pass-through node without input")?;
            self.act_params(x)?
        } else if let Some(n) = producer.filter(|n| SAME_GRID.contains(&n.op.as_str())) {
            // Kernels that copy codes (pooling, nearest resize): the output is on the
            // input's grid, as the converter's SameOperandsAndResultsScale makes it.
            let x = n.input(0).ok_or("node without input")?;
            let p = self.act_params(x)?;
            if let Ok(c) = self.plan_grid(v)
                && !c.same_grid(&p)
            {
                let (name, node) = (self.name(v), n.name.clone());
                self.constraint(
                    &name,
                    &node,
                    "same-grid-as-input",
                    format!(
                        "output on its input's grid, scale {} zero point {} (calibration chose scale {} zero point {})",
                        p.s(),
                        p.zp(),
                        c.s(),
                        c.zp()
                    ),
                );
            }
            p
        } else {
            match self.plan_grid(v) {
                Ok(p) => {
                    if p.ty == IntType::I16
                        && let Some((_, (lo, hi))) = self.q.grid(self.plan, v)
                        && (lo + hi).abs() > 1e-6 * (hi - lo)
                    {
                        self.constraint(
                            &self.name(v),
                            &self.producer_name(v),
                            "int16-symmetric",
                            format!(
                                "int16 symmetric around 0 (TFLite's 16×8 scheme): scale {} for the calibrated range [{lo:.4}, {hi:.4}], whose asymmetric 16-bit grid had step {:.3e}",
                                p.s(),
                                (hi - lo) / 65535.0
                            ),
                        );
                    }
                    p
                }
                Err(e) => {
                    // Derived from a neighbour through a scalar step, else the calibrated
                    // range the plan keeps for fused tensors.
                    if let Some(Ok(p)) = self.affine_input_grid(v) {
                        p
                    } else if let Some(Ok(p)) = self.affine_output_grid(v) {
                        p
                    } else {
                        self.hidden_grid(v).ok_or(e)?
                    }
                }
            }
        };
        self.params.insert(v, p.clone());
        Ok(p)
    }

    fn is_float_layer(&self, node: &Node) -> bool {
        is_float_layer(self.plan, node)
    }

    fn read_in_float(&self, v: ValueId) -> bool {
        read_in_float(self.g(), &self.consumers, self.plan, v)
    }

    /// The output of a float layer: float32 where only float32 reads it, else the grid of
    /// the plan's range for it at the widest format of the integer layers reading it.
    fn float_layer_output(&mut self, v: ValueId, n: &Node) -> Result<QParams, String> {
        if self.read_in_float(v) {
            return Ok(QParams::float32());
        }
        let g = self.g();
        let wide = self.consumers[v]
            .iter()
            .any(|&c| self.plan.precision(&g.nodes[c]).activations == ActFormat::Int16);
        let format = if wide { ActFormat::Int16 } else { ActFormat::Int8 };
        let name = self.name(v);
        let range = self
            .plan
            .ranges
            .get(&name)
            .or_else(|| self.plan.hidden.get(&name))
            .ok_or_else(|| format!("tensor {name}: the plan keeps no calibrated range for it"))?
            .for_format(format);
        let p = QParams::activation(format, range).ok_or_else(|| format!("tensor {name}: no grid"))?;
        self.constraint(
            &name,
            &n.name,
            "float-layer-output",
            format!(
                "a float layer's output quantized (scale {} zero point {}) where an integer layer reads it",
                p.s(),
                p.zp()
            ),
        );
        Ok(p)
    }

    /// A layer the plan keeps in float, as one float32 op.
    fn lower_float(&mut self, node: &Node) -> Result<(), String> {
        if let Some(a) = node.attr_s("activation") {
            return Err(format!("a fused {a} on a float layer has no float32 form yet"));
        }
        let out = node.output(0).ok_or("no output")?;
        let x = node.input(0).ok_or("no input")?;
        let rank = self.shape(x).map_err(|e| e.to_string())?.len();
        let unary = |f| (FloatOp::Unary { f }, 1);
        let binary = |f| (FloatOp::Binary { f }, 2);
        let (op, arity) = match node.op.as_str() {
            "Exp" => unary(UnaryFn::Exp),
            "Log" => unary(UnaryFn::Log),
            "Sqrt" => unary(UnaryFn::Sqrt),
            "Tanh" => unary(UnaryFn::Tanh),
            "Sigmoid" => unary(UnaryFn::Logistic),
            "Neg" => unary(UnaryFn::Neg),
            "Abs" => unary(UnaryFn::Abs),
            "Relu" => unary(UnaryFn::Relu),
            "Reciprocal" => (FloatOp::Reciprocal, 1),
            "HardSwish" => (FloatOp::HardSwish, 1),
            "Div" => (FloatOp::Div, 2),
            "Add" => binary(BinaryFn::Add),
            "Sub" => binary(BinaryFn::Sub),
            "Mul" => binary(BinaryFn::Mul),
            "Max" => binary(BinaryFn::Maximum),
            "Min" => binary(BinaryFn::Minimum),
            "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceMean" => {
                let f = match node.op.as_str() {
                    "ReduceSum" => ReduceFn::Sum,
                    "ReduceMax" => ReduceFn::Max,
                    "ReduceMin" => ReduceFn::Min,
                    _ => ReduceFn::Mean,
                };
                let axes = self.reduce_axes(node, rank)?;
                (FloatOp::Reduce { f, axes }, 1)
            }
            "Softmax" => {
                self.softmax_over_last_axis(node, rank)?;
                (FloatOp::Softmax, 1)
            }
            other => return Err(format!("{other} has no float32 form yet")),
        };
        let reduce = matches!(op, FloatOp::Reduce { .. });
        if !reduce && node.inputs.iter().flatten().count() != arity {
            return Err(format!(
                "a float {} of {} inputs has no float32 form yet",
                node.op,
                node.inputs.len()
            ));
        }
        let ins = (0..arity)
            .map(|k| self.float_operand(node, k))
            .collect::<Result<Vec<_>, _>>()?;
        let y = self.act(out)?;
        self.op(node, OpKind::Float { op }, ins, vec![y]);
        Ok(())
    }

    /// Refuses a Softmax over an axis other than the last (opset < 13 counts from `axis` to
    /// the end as one axis).
    fn softmax_over_last_axis(&self, node: &Node, rank: usize) -> Result<(), String> {
        let rank = rank as i64;
        let axis = node
            .attr_i("axis")
            .unwrap_or(if self.q.model.opset() >= 13 { -1 } else { 1 });
        let axis = if axis < 0 { axis + rank } else { axis };
        if axis == rank - 1 {
            Ok(())
        } else {
            Err("softmax over an axis other than the last has no integer form yet".into())
        }
    }

    /// The real range a grid covers.
    fn range_of(&mut self, v: ValueId) -> Result<(f64, f64), String> {
        let q = self.act_params(v)?;
        let (lo, hi) = q.ty.range();
        Ok((f64::from(q.real(lo)), f64::from(q.real(hi))))
    }

    /// A value without a grid of its own whose one consumer is a scalar affine step
    /// (`x·a`, `x + b`, `x − b`, fused into its producer by the simulator): the grid of the
    /// consumer's output range mapped back through the step.
    fn affine_input_grid(&mut self, v: ValueId) -> Option<Result<QParams, String>> {
        let g = self.g();
        let [c] = self.consumers[v][..] else { return None };
        let c = &g.nodes[c];
        if !matches!(c.op.as_str(), "Mul" | "Add" | "Sub")
            || c.inputs.len() != 2
            || c.input(0) != Some(v) && c.op == "Sub"
        {
            return None;
        }
        let other = if c.input(0) == Some(v) {
            c.input(1)?
        } else {
            c.input(0)?
        };
        let (_, k) = self.constant_f32(other)?;
        let [k] = k[..] else { return None };
        let out = c.output(0)?;
        let (lo, hi) = match self.range_of(out) {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let k = f64::from(k);
        let (a, b) = match c.op.as_str() {
            "Mul" if k != 0.0 => (lo / k, hi / k),
            "Add" => (lo - k, hi - k),
            "Sub" => (lo + k, hi + k),
            _ => return None,
        };
        let range = (a.min(b), a.max(b));
        let format = match self.act_params(out) {
            Ok(q) => q.format(),
            Err(e) => return Some(Err(e)),
        };
        let p = QParams::activation(format, range)?;
        self.constraint(
            &self.name(v),
            &c.name,
            "affine-input-grid",
            format!(
                "grid [{:.4}, {:.4}] (scale {}) mapped back through {} {} from its consumer's output range; the simulator fuses the step and gives it none",
                range.0,
                range.1,
                p.s(),
                c.op,
                k
            ),
        );
        Some(Ok(p))
    }

    /// The integer width the plan gives `v`'s producer (its activations' format).
    fn format_of(&self, v: ValueId) -> ActFormat {
        let g = self.g();
        let f = match g.values[v].producer {
            Some(p) => self.plan.precision(&g.nodes[p]).activations,
            None => self.plan.inputs,
        };
        if f == ActFormat::Int16 {
            ActFormat::Int16
        } else {
            ActFormat::Int8
        }
    }

    fn producer_name(&self, v: ValueId) -> String {
        let g = self.g();
        g.values[v]
            .producer
            .map(|n| g.nodes[n].name.clone())
            .unwrap_or_default()
    }

    /// Program tensor `t` as an input of an op computing in `ty` (int8 or int16): itself,
    /// or a QUANTIZE to that width on the grid the plan's range of the other width gives
    /// (`<name>:int8` / `<name>:int16`) where layers of different precision meet.
    fn conform(&mut self, node: &Node, t: usize, ty: IntType) -> usize {
        let from = self.program.tensors[t].q.clone();
        if from.ty == ty
            || !matches!(from.ty, IntType::I8 | IntType::I16)
            || !matches!(ty, IntType::I8 | IntType::I16)
            || self.program.tensors[t].data.is_some()
        {
            return t;
        }
        if let Some(&r) = self.retyped.get(&(t, ty)) {
            return r;
        }
        let format = if ty == IntType::I16 {
            ActFormat::Int16
        } else {
            ActFormat::Int8
        };
        let name = self.program.tensors[t].name.clone();
        let range = self
            .g()
            .values
            .iter()
            .position(|v| v.name == name)
            .and_then(|v| self.plan.ranges.get(&self.name(v)).map(|r| r.for_format(format)))
            .unwrap_or_else(|| {
                let (lo, hi) = from.ty.range();
                (f64::from(from.real(lo)), f64::from(from.real(hi)))
            });
        let q = QParams::activation(format, range).unwrap_or_else(|| from.clone());
        let r = self.push(ITensor {
            name: format!("{name}:{}", ty.name()),
            shape: self.program.tensors[t].shape.clone(),
            q: q.clone(),
            data: None,
        });
        self.constraint(
            &self.program.tensors[r].name.clone(),
            &node.name,
            "precision-boundary",
            format!(
                "{} (scale {}) requantized to {} (scale {} zero point {}) where layers of different precision meet",
                from.ty.name(),
                from.s(),
                ty.name(),
                q.s(),
                q.zp()
            ),
        );
        self.op(node, OpKind::Requantize, vec![t], vec![r]);
        self.retyped.insert((t, ty), r);
        r
    }

    /// The program tensor of activation `v` as an input of an op computing in `ty`.
    fn input(&mut self, node: &Node, v: ValueId, ty: IntType) -> Result<usize, String> {
        let t = self.act(v)?;
        Ok(self.conform(node, t, ty))
    }

    /// The storage type of `v`'s grid.
    fn ty_of(&mut self, v: ValueId) -> Result<IntType, String> {
        Ok(self.act_params(v)?.ty)
    }

    /// The grid of a tensor the simulator fuses into its consumer, from the calibrated
    /// range the plan keeps for it.
    fn hidden_grid(&mut self, v: ValueId) -> Option<QParams> {
        let name = self.name(v);
        let format = self.format_of(v);
        let r = self.plan.hidden.get(&name)?.for_format(format);
        let p = QParams::activation(format, r)?;
        let node = self.g().values[v]
            .producer
            .map(|n| self.g().nodes[n].name.clone())
            .unwrap_or_default();
        self.constraint(
            &name,
            &node,
            "fused-tensor-grid",
            format!(
                "grid [{:.4}, {:.4}] (scale {}) from its calibrated range; the simulator fuses it into its consumer and gives it none",
                r.0,
                r.1,
                p.s()
            ),
        );
        Some(p)
    }

    /// A scalar constant operand of an element-wise node: (its input position, value).
    fn scalar_operand(&self, node: &Node) -> Option<(usize, f32)> {
        if !matches!(node.op.as_str(), "Mul" | "Add" | "Sub" | "Div") {
            return None;
        }
        self.scalar_const(node)
    }

    /// A scalar constant operand of a two-input node: (its input position, value).
    fn scalar_const(&self, node: &Node) -> Option<(usize, f32)> {
        if node.inputs.len() != 2 {
            return None;
        }
        (0..2).find_map(|k| {
            let (_, c) = self.constant_f32(node.input(k)?)?;
            match c[..] {
                [c] => Some((k, c)),
                _ => None,
            }
        })
    }

    /// A value without a grid of its own made by a scalar affine step (`x·a`, `x/a`, `x + b`,
    /// `x − b`) from a value that has one (the simulator fuses the step into the look-up
    /// table after it): the input's grid mapped forward through the step.
    fn affine_output_grid(&mut self, v: ValueId) -> Option<Result<QParams, String>> {
        let g = self.g();
        let n = &g.nodes[g.values[v].producer?];
        let (k, c) = self.scalar_operand(n)?;
        if k == 0 && matches!(n.op.as_str(), "Sub" | "Div") {
            return None;
        }
        let x = n.input(1 - k)?;
        let xq = match self.act_params(x) {
            Ok(q) => q,
            Err(e) => return Some(Err(e)),
        };
        let c = f64::from(c);
        let identity = match n.op.as_str() {
            "Mul" | "Div" => c == 1.0,
            _ => c == 0.0,
        };
        let p = if identity {
            xq
        } else {
            let (lo, hi) = match self.range_of(x) {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            };
            let (a, b) = match n.op.as_str() {
                "Mul" => (lo * c, hi * c),
                "Div" if c != 0.0 => (lo / c, hi / c),
                "Add" => (lo + c, hi + c),
                "Sub" => (lo - c, hi - c),
                _ => return None,
            };
            QParams::activation(xq.format(), (a.min(b), a.max(b)))?
        };
        self.constraint(
            &self.name(v),
            &n.name,
            "affine-output-grid",
            format!(
                "grid of {} mapped forward through {} {c} (scale {} zero point {}); the simulator fuses the step into the look-up after it and gives it none",
                self.name(x),
                n.op,
                p.s(),
                p.zp()
            ),
        );
        Some(Ok(p))
    }

    /// The program tensor of an activation value (made on first use).
    fn act(&mut self, v: ValueId) -> Result<usize, String> {
        if let Some(&t) = self.ids.get(&v) {
            return Ok(t);
        }
        let q = self.act_params(v)?;
        let shape = self.shape(v).map_err(|e| e.to_string())?;
        let t = self.push(ITensor {
            name: self.name(v),
            shape,
            q,
            data: None,
        });
        self.ids.insert(v, t);
        Ok(t)
    }

    fn constant_f32(&self, v: ValueId) -> Option<(Vec<usize>, Vec<f32>)> {
        let t = self
            .statics
            .get(&v)
            .or_else(|| self.g().values[v].constant.as_ref().map(crate::ir::Constant::tensor))?;
        let a = t.to_f32();
        Some((a.shape().to_vec(), a.iter().copied().collect()))
    }

    fn run(&mut self) -> R<()> {
        let g = self.g();
        let order = g.topo_order().map_err(|e| QuantError::Data(e.to_string()))?;
        let inputs = g.inputs.clone();
        let outputs = g.outputs.clone();
        for i in inputs {
            match self.act(i) {
                Ok(t) => self.program.inputs.push(t),
                Err(e) => self.unsupported.push(format!("input {}: {e}", self.name(i))),
            }
        }
        // A node downstream of one without an integer form is not listed on its own.
        let mut failed = vec![false; self.g().values.len()];
        let mut downstream = 0;
        for n in order {
            if self.done[n] {
                continue;
            }
            if self.try_static(n) {
                continue;
            }
            let node = self.g().nodes[n].clone();
            if node.inputs.iter().flatten().any(|&v| failed[v]) {
                downstream += 1;
                for &o in node.outputs.iter().flatten() {
                    failed[o] = true;
                }
                continue;
            }
            let mark = self.mark();
            if let Err(e) = self.lower(&node) {
                // No integer form: undo what the attempt made and run the node in float
                // on the host as the ONNX op it is.
                self.rewind(mark.clone());
                if let Err(e2) = self.lower_host(n, &node, &e) {
                    self.rewind(mark);
                    self.unsupported(&node, &format!("{e}; and in float on the host: {e2}"));
                    for &o in node.outputs.iter().flatten() {
                        failed[o] = true;
                    }
                }
            }
        }
        self.downstream = downstream;
        for o in outputs {
            match self.ids.get(&o) {
                Some(&t) => self.program.outputs.push(t),
                None if failed[o] => {}
                None => self
                    .unsupported
                    .push(format!("output {}: not computed by an integer op", self.name(o))),
            }
        }
        Ok(())
    }

    /// Where the program stands, to undo a failed lowering.
    fn mark(&self) -> Mark {
        Mark {
            ops: self.program.ops.len(),
            tensors: self.program.tensors.len(),
            constraints: self.program.constraints.len(),
            done: self.done.clone(),
        }
    }

    /// Undoes the ops, tensors and constraints made since `m`.
    fn rewind(&mut self, m: Mark) {
        self.program.ops.truncate(m.ops);
        self.program.tensors.truncate(m.tensors);
        self.program.constraints.truncate(m.constraints);
        self.done = m.done;
        let n = m.tensors;
        self.ids.retain(|_, t| *t < n);
        self.retyped.retain(|&(t, _), r| t < n && *r < n);
    }

    /// The float fallback: node `n` as a one-node ONNX model run in float32 on the host,
    /// its integer inputs dequantized and its outputs quantized onto the plan's grids (left
    /// in float32 where the plan has none); `why` is why it has no integer form.
    fn lower_host(&mut self, n: NodeId, node: &Node, why: &str) -> Result<(), String> {
        use crate::ir::{Constant, DType, Graph, Metadata, Model, Value};
        let g = self.g();
        let mut sub = Graph {
            name: node.name.clone(),
            nodes: Vec::new(),
            values: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        let mut map: HashMap<ValueId, ValueId> = HashMap::new();
        let mut ins = Vec::new();
        let captures = if node.has_subgraphs() {
            g.implicit_inputs(n)
        } else {
            Vec::new()
        };
        let reads: Vec<ValueId> = node.inputs.iter().flatten().copied().chain(captures).collect();
        for v in reads {
            if map.contains_key(&v) {
                continue;
            }
            let src = &g.values[v];
            let mut val = Value {
                name: src.name.clone(),
                dtype: src.dtype,
                shape: src.shape.clone(),
                constant: None,
                producer: None,
                outer: false,
                kind: src.kind,
            };
            if let Some(c) = self.known(v) {
                val.dtype = Some(c.dtype());
                val.constant = Some(Constant::from_tensor(c));
            } else {
                if src.kind != crate::ir::ValueKind::Tensor {
                    return Err(format!("input {} is not a tensor", src.name));
                }
                let t = self.act(v)?;
                let shape = self.program.tensors[t].shape.clone();
                val.shape = Some(shape.iter().map(|&d| crate::ir::Dim::Fixed(d)).collect());
                ins.push(t);
                sub.inputs.push(sub.values.len());
            }
            map.insert(v, sub.values.len());
            sub.values.push(val);
        }
        let mut outs = Vec::new();
        let mut out_ids = Vec::new();
        for &o in &node.outputs {
            let Some(o) = o else {
                out_ids.push(None);
                continue;
            };
            let src = &g.values[o];
            if src.kind != crate::ir::ValueKind::Tensor {
                return Err(format!("output {} is not a tensor", src.name));
            }
            let shape = self.shape(o).map_err(|e| e.to_string())?;
            let q = match src.dtype {
                Some(DType::Bool) => QParams::boolean(),
                Some(DType::I32 | DType::I64) => QParams::index(),
                Some(d) if !d.is_float() => return Err(format!("its {d} output {} has no program type", src.name)),
                _ => match self.act_params(o) {
                    Ok(q) if q.ty.is_quantized() => q,
                    _ => self.table_grid(node, o).unwrap_or_else(QParams::float32),
                },
            };
            let t = if let Some(&t) = self.ids.get(&o) {
                t
            } else {
                let t = self.push(ITensor {
                    name: src.name.clone(),
                    shape: shape.clone(),
                    q: q.clone(),
                    data: None,
                });
                self.ids.insert(o, t);
                self.params.insert(o, q);
                t
            };
            outs.push(t);
            let id = sub.values.len();
            sub.values.push(Value {
                name: src.name.clone(),
                dtype: src.dtype,
                shape: Some(shape.iter().map(|&d| crate::ir::Dim::Fixed(d)).collect()),
                constant: None,
                producer: Some(0),
                outer: false,
                kind: src.kind,
            });
            sub.outputs.push(id);
            out_ids.push(Some(id));
        }
        if outs.is_empty() {
            return Err("no output is used".into());
        }
        let mut one = node.clone();
        one.inputs = node.inputs.iter().map(|v| v.map(|v| map[&v])).collect();
        one.outputs = out_ids;
        one.origin = Vec::new();
        sub.nodes.push(one);
        sub.validate().map_err(|e| format!("as a one-node model: {e}"))?;
        let src = &self.q.model.meta;
        let model = Model {
            graph: sub,
            meta: Metadata {
                ir_version: src.ir_version.max(7),
                opsets: src.opsets.clone(),
                producer_name: "npu-studio float fallback".into(),
                ..Metadata::default()
            },
        };
        let onnx = crate::export::onnx::to_bytes(&model);
        self.constraint(
            &self.name(node.output(0).unwrap_or_default()),
            &node.name,
            FALLBACK_RULE,
            format!("no integer form ({why}): runs in float on the host"),
        );
        self.op(
            node,
            OpKind::Float {
                op: FloatOp::Node(Box::new(FloatNode {
                    op: node.op.clone(),
                    domain: node.domain.clone(),
                    onnx,
                })),
            },
            ins,
            outs,
        );
        Ok(())
    }

    /// The grid of a float-fallback Gather's output that calibration gave none (the
    /// simulator reads a constant table's rows as weights): the int8 grid of the table's
    /// range, where the rows it picks lie, recorded as a constraint.
    fn table_grid(&mut self, node: &Node, o: ValueId) -> Option<QParams> {
        if node.op != "Gather" {
            return None;
        }
        let (_, data) = self.constant_f32(node.input(0)?)?;
        let lo = data.iter().copied().fold(0f32, f32::min);
        let hi = data.iter().copied().fold(0f32, f32::max);
        let q = QParams::activation(ActFormat::Int8, (f64::from(lo), f64::from(hi)))?;
        self.constraint(
            &self.name(o),
            &node.name,
            "gather-table-grid",
            format!(
                "output on the int8 grid of its table's range [{lo:.4}, {hi:.4}] (scale {}): calibration gave it none",
                q.s()
            ),
        );
        Some(q)
    }

    /// The shape of `x` and the node's `axis` attribute (default 0, negative from the end)
    /// checked against its rank.
    fn axis_of(&self, node: &Node, x: ValueId) -> Result<(Vec<usize>, usize), String> {
        let shape = self.shape(x).map_err(|e| e.to_string())?;
        let a = node.attr_i("axis").unwrap_or(0);
        let axis = usize::try_from(if a < 0 { a + shape.len() as i64 } else { a })
            .ok()
            .filter(|&a| a < shape.len())
            .ok_or_else(|| format!("axis {a} is out of range for rank {}", shape.len()))?;
        Ok((shape, axis))
    }

    /// Gather as TFLite's GATHER: a constant table on the grid of its range (a token
    /// embedding), an activation on its own grid; constant indices checked and made
    /// non-negative here, run-time indices carried as int32.
    fn lower_gather(&mut self, node: &Node, x: ValueId, out: ValueId) -> Result<(), String> {
        let (shape, axis) = self.axis_of(node, x)?;
        let dim = shape[axis];
        let iv = node.input(1).ok_or("no indices")?;
        let table = match self.constant_f32(x) {
            Some((_, data)) => {
                let lo = data.iter().copied().fold(0f32, f32::min);
                let hi = data.iter().copied().fold(0f32, f32::max);
                let format = self.format_of(out);
                let q = QParams::activation(format, (f64::from(lo), f64::from(hi)))
                    .ok_or("its output has no integer grid")?;
                let codes = data.iter().map(|&v| i64::from(quantize_code(v, &q))).collect();
                self.push(ITensor {
                    name: self.name(x),
                    shape: shape.clone(),
                    q,
                    data: Some(codes),
                })
            }
            None => self.act(x)?,
        };
        let q = self.program.tensors[table].q.clone();
        let known = self
            .known(iv)
            .map(|t| t.as_i64_vec().ok_or("its indices are not integers"));
        let indices = if let Some(raw) = known {
            let ishape = self.shape(iv).map_err(|e| e.to_string())?;
            let codes = raw?
                .into_iter()
                .map(|i| {
                    let j = if i < 0 { i + dim as i64 } else { i };
                    if (0..dim as i64).contains(&j) {
                        Ok(j)
                    } else {
                        Err(format!("index {i} is out of range for axis {axis} of {dim}"))
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            self.push(ITensor {
                name: self.name(iv),
                shape: ishape,
                q: QParams::index(),
                data: Some(codes),
            })
        } else {
            let t = self.act(iv)?;
            if self.program.tensors[t].q.ty != IntType::Index {
                return Err(format!("its indices {} are not integers", self.name(iv)));
            }
            t
        };
        self.on_input_grid(node, out, &q);
        let y = self.act(out)?;
        self.op(node, OpKind::Gather { axis }, vec![table, indices], vec![y]);
        Ok(())
    }

    /// A tensor for `x·x`, on the grid of `[0, m²]` in x's format where `m` is the largest
    /// magnitude x's grid holds (recorded as constraint `square-grid`).
    fn square_of(&mut self, node: &Node, xi: usize) -> Result<usize, String> {
        let (q, shape) = (
            self.program.tensors[xi].q.clone(),
            self.program.tensors[xi].shape.clone(),
        );
        let (lo, hi) = q.ty.range();
        let m = f64::from(q.real(lo).abs().max(q.real(hi).abs()));
        let sq = QParams::activation(q.format(), (0.0, m * m))
            .ok_or_else(|| format!("{} has no integer grid to square", self.program.tensors[xi].name))?;
        let name = format!("{}:square", node.name);
        self.constraint(
            &name,
            &node.name,
            "square-grid",
            format!(
                "x·x on the grid of [0, {:.4}] (scale {}): calibration gave it none",
                m * m,
                sq.s()
            ),
        );
        Ok(self.push(ITensor {
            name,
            shape,
            q: sq,
            data: None,
        }))
    }

    /// Evaluates a node whose inputs are all known (shape arithmetic) at legalization time.
    fn try_static(&mut self, n: NodeId) -> bool {
        let g = self.g();
        let node = &g.nodes[n];
        let known = |v: ValueId| self.statics.contains_key(&v) || g.values[v].constant.is_some();
        let ok = if matches!(node.op.as_str(), "Shape" | "Size") {
            node.input(0)
                .is_some_and(|x| g.values[x].shape.as_deref().and_then(concrete).is_some())
        } else {
            node.op == "Constant" || node.inputs.iter().flatten().all(|&v| known(v))
        };
        if !ok {
            return false;
        }
        let shape_tensor;
        let ins: Vec<Option<&Tensor>> = if matches!(node.op.as_str(), "Shape" | "Size") {
            let x = node.input(0).unwrap_or_default();
            let dims = g.values[x].shape.as_deref().and_then(concrete).unwrap_or_default();
            // Shape and Size read only the input's shape: a zero tensor of that shape.
            shape_tensor = Tensor::F32(ndarray::ArrayD::zeros(dims));
            vec![Some(&shape_tensor)]
        } else {
            node.inputs
                .iter()
                .map(|v| {
                    v.and_then(|v| {
                        self.statics
                            .get(&v)
                            .or_else(|| g.values[v].constant.as_ref().map(crate::ir::Constant::tensor))
                    })
                })
                .collect()
        };
        let ctx = crate::sim::OpCtx {
            opset: self.q.model.opset(),
            threads: 1,
        };
        let Ok(outs) = crate::sim::ops::eval(node, &ins, &ctx) else {
            return false;
        };
        let outs: Vec<(ValueId, Tensor)> = node
            .outputs
            .iter()
            .zip(outs)
            .filter_map(|(o, t)| o.map(|o| (o, t)))
            .collect();
        for (o, t) in outs {
            self.statics.insert(o, t);
        }
        true
    }

    fn lower(&mut self, node: &Node) -> Result<(), String> {
        let g = self.g();
        if self.is_float_layer(node) && node.op != "LayerNormalization" {
            return self.lower_float(node);
        }
        let out = node.output(0).ok_or("no output")?;
        let x = node.input(0).ok_or("no input")?;
        match node.op.as_str() {
            "Conv" | "FusedConv" => {
                let epi = Self::epilogue(node)?;
                let (epi, y) = match epi {
                    Some(e) => (e, out),
                    None => self.absorb_consumer(out)?,
                };
                self.conv(node, x, y, epi)
            }
            "ConvTranspose" => {
                let (epi, y) = self.absorb_consumer(out)?;
                self.transpose_conv(node, x, y, epi)
            }
            "Resize" | "Upsample" => {
                let mode = node.attr_s("mode").unwrap_or("nearest");
                let coord = node.attr_s("coordinate_transformation_mode").unwrap_or("half_pixel");
                let nearest = node.attr_s("nearest_mode").unwrap_or("round_prefer_floor");
                if mode != "nearest" || (node.op == "Resize" && (coord != "asymmetric" || nearest != "floor")) {
                    return Err(format!(
                        "resize mode {mode} ({coord}, {nearest}) has no integer form yet (nearest, asymmetric, floor has)"
                    ));
                }
                let (xs, ys) = (
                    self.shape(x).map_err(|e| e.to_string())?,
                    self.shape(out).map_err(|e| e.to_string())?,
                );
                if xs.len() != 4 || xs[..2] != ys[..2] {
                    return Err("only spatial resizes of NCHW images".into());
                }
                for d in 2..4 {
                    let scale = xs[d] as f32 / ys[d] as f32;
                    for o in 0..ys[d] {
                        let tfl = ((o as f32 * scale).floor() as usize).min(xs[d] - 1);
                        let onnx = (o * xs[d]) / ys[d];
                        if tfl != onnx {
                            return Err(format!(
                                "output index {o} reads {onnx} in ONNX and {tfl} in TFLite's nearest resize"
                            ));
                        }
                    }
                }
                let xi = self.act(x)?;
                let y = self.act(out)?;
                self.op(node, OpKind::ResizeNearest, vec![xi], vec![y]);
                Ok(())
            }
            "MatMul" if node.input(1).is_some_and(|b| self.constant_f32(b).is_none()) => {
                let b = node.input(1).ok_or("no second input")?;
                let (sa, sb) = (
                    self.shape(x).map_err(|e| e.to_string())?,
                    self.shape(b).map_err(|e| e.to_string())?,
                );
                if sa.len() < 2 || sb.len() < 2 {
                    return Err("a MatMul of vectors has no integer form yet".into());
                }
                let ty = self.ty_of(out)?;
                let ai = self.input(node, x, ty)?;
                let bi = self.input(node, b, ty)?;
                let y = self.act(out)?;
                self.op(node, OpKind::BatchMatMul, vec![ai, bi], vec![y]);
                Ok(())
            }
            "MatMul" => {
                let (epi, y) = self.absorb_consumer(out)?;
                self.fully_connected(node, x, y, epi)
            }
            "Gemm" | "FusedGemm" => {
                let (epi, y) = match Self::epilogue(node)? {
                    Some(e) => (e, out),
                    None => self.absorb_consumer(out)?,
                };
                self.gemm(node, x, y, epi)
            }
            "LeakyRelu" => {
                let alpha = node.attr_f("alpha").unwrap_or(0.01);
                if !(alpha > 0.0 && alpha < 1.0) {
                    return Err(format!(
                        "a LeakyRelu with alpha {alpha} (outside (0, 1)) has no integer form yet"
                    ));
                }
                let xi = self.act(x)?;
                self.leaky_tail(node, xi, out, alpha)
            }
            "Slice" => {
                let shape = self.shape(x).map_err(|e| e.to_string())?;
                let ins: Vec<Option<&Tensor>> = node
                    .inputs
                    .iter()
                    .map(|v| {
                        v.and_then(|v| {
                            self.statics
                                .get(&v)
                                .or_else(|| g.values[v].constant.as_ref().map(crate::ir::Constant::tensor))
                        })
                    })
                    .collect();
                let spec = crate::sim::ops::shape::slice_spec(node, &ins, self.q.model.opset(), &shape)?;
                let axes = spec
                    .iter()
                    .map(|a| SliceAxis {
                        axis: a.axis,
                        first: a.first,
                        count: a.count,
                        step: a.step,
                    })
                    .collect();
                let xi = self.act(x)?;
                let y = self.act(out)?;
                self.op(node, OpKind::Slice { axes }, vec![xi], vec![y]);
                Ok(())
            }
            "Split" => {
                // One SLICE per output along the axis; slices copy codes, so every output
                // is on the input's grid (TFLite's SPLIT keeps the input's parameters too).
                let (shape, axis) = self.axis_of(node, x)?;
                let mut parts = Vec::new();
                for o in &node.outputs {
                    let o = o.ok_or("an omitted Split output has no integer form yet")?;
                    let os = self.shape(o).map_err(|e| e.to_string())?;
                    parts.push((o, os.get(axis).copied().ok_or("an output of another rank")?));
                }
                if parts.iter().map(|p| p.1).sum::<usize>() != shape[axis] {
                    return Err(format!(
                        "its outputs do not cover the {} elements of axis {axis}",
                        shape[axis]
                    ));
                }
                let xi = self.act(x)?;
                let q = self.program.tensors[xi].q.clone();
                let mut first = 0;
                for (o, count) in parts {
                    self.on_input_grid(node, o, &q);
                    let y = self.act(o)?;
                    let axes = vec![SliceAxis {
                        axis,
                        first,
                        count,
                        step: 1,
                    }];
                    self.op(node, OpKind::Slice { axes }, vec![xi], vec![y]);
                    first += count;
                }
                Ok(())
            }
            "BatchNormalization" => {
                // Not folded into a convolution (a Relu between them, or none before it): a
                // 1×1 depthwise convolution whose weights are the per-channel multipliers
                // γ/√(σ²+ε) and whose bias is β − μ·γ/√(σ²+ε).
                let xs = self.shape(x).map_err(|e| e.to_string())?;
                if xs.len() != 4 {
                    return Err(format!(
                        "a BatchNormalization of a rank-{} tensor has no integer form yet (rank 4 has)",
                        xs.len()
                    ));
                }
                let c = xs[1];
                let param = |k: usize| {
                    node.input(k)
                        .and_then(|v| self.constant_f32(v))
                        .map(|(_, d)| d)
                        .filter(|d| d.len() == c)
                };
                let (Some(gamma), Some(beta), Some(mean), Some(var)) = (param(1), param(2), param(3), param(4)) else {
                    return Err("a BatchNormalization whose parameters are not constant has no integer form".into());
                };
                let eps = node.attr_f("epsilon").unwrap_or(1e-5);
                let mult: Vec<f32> = (0..c).map(|i| gamma[i] / (var[i] + eps).sqrt()).collect();
                let shift: Vec<f32> = (0..c).map(|i| beta[i] - mean[i] * mult[i]).collect();
                let (epi, y) = match Self::epilogue(node)? {
                    Some(e) => (e, out),
                    None => self.absorb_consumer(out)?,
                };
                let w = super::params::int8_weight_codes(&mult, &[c, 1, 1, 1], 0, &[]);
                let (mut scales, mut bias) = (w.scales, shift);
                let ty = self.ty_of(y)?;
                let xi = self.input(node, x, ty)?;
                let s_in = self.program.tensors[xi].q.s();
                let bias_ty = if ty == IntType::I16 { IntType::I64 } else { IntType::I32 };
                let epi = self.fold_hard_sigmoid(node, y, epi, &mut scales, &mut bias);
                let wv = node.input(1).ok_or("no scale")?;
                let (wt, bt) = self.weight_and_bias(
                    node,
                    wv,
                    vec![c, 1, 1, 1],
                    (w.codes, IntType::I8),
                    &scales,
                    &bias,
                    s_in,
                    bias_ty,
                );
                let kind = |act| OpKind::Conv {
                    strides: [1, 1],
                    dilations: [1, 1],
                    pads: [0; 4],
                    groups: c,
                    act,
                };
                self.emit_with_epilogue(node, kind, vec![xi, wt, bt], y, epi)
            }
            "LayerNormalization" => {
                let rank = self.shape(x).map_err(|e| e.to_string())?.len() as i64;
                let axis = node.attr_i("axis").unwrap_or(-1);
                if axis != -1 && axis != rank - 1 {
                    return Err("a LayerNormalization over more than the last axis has no integer form yet".into());
                }
                let width = *self.shape(x).map_err(|e| e.to_string())?.last().unwrap_or(&1);
                let param = |k: usize, default: f32| -> Result<Vec<f32>, String> {
                    match node.input(k) {
                        Some(v) => {
                            let (_, d) = self.constant_f32(v).ok_or("its scale and bias must be constant")?;
                            match d.len() {
                                1 => Ok(vec![d[0]; width]),
                                n if n == width => Ok(d),
                                n => Err(format!("a scale or bias of {n} values over a last axis of {width}")),
                            }
                        }
                        None => Ok(vec![default; width]),
                    }
                };
                let (gamma, beta) = (param(1, 1.0)?, param(2, 0.0)?);
                let epsilon = node.attr_f("epsilon").unwrap_or(1e-5);
                let xi = self.act(x)?;
                let y = self.act(out)?;
                self.op(
                    node,
                    OpKind::Float {
                        op: FloatOp::LayerNorm { epsilon, gamma, beta },
                    },
                    vec![xi],
                    vec![y],
                );
                Ok(())
            }
            "Add" | "Sub" | "Mul" | "Div" => {
                let act = match node.attr_s("activation") {
                    None => Act::None,
                    Some("Relu") => Act::Relu,
                    Some(a) => return Err(format!("fused {a} on an element-wise op has no integer form yet")),
                };
                let scalar = self.scalar_operand(node);
                let data = scalar.map_or(0, |(k, _)| 1 - k);
                let identity = match (node.op.as_str(), scalar) {
                    ("Mul", Some((_, c))) | ("Div", Some((1, c))) => c == 1.0,
                    ("Add", Some((_, c))) | ("Sub", Some((1, c))) => c == 0.0,
                    _ => false,
                };
                let same_shape = node
                    .input(data)
                    .is_some_and(|v| self.shape(v).ok() == self.shape(out).ok());
                if identity && act == Act::None && same_shape {
                    // x·1, x/1, x + 0, x − 0: the output is its input's codes on its grid.
                    let xi = self.act(node.input(data).ok_or("no input")?)?;
                    let q = self.program.tensors[xi].q.clone();
                    self.params.insert(out, q);
                    let y = self.act(out)?;
                    self.op(node, OpKind::Reshape, vec![xi], vec![y]);
                    return Ok(());
                }
                if node.op == "Div" {
                    // x / c as x · (1/c); a division by a tensor in float32 (TFLite's int8
                    // DIV loses small quotients).
                    let Some((1, c)) = scalar.filter(|&(_, c)| c != 0.0) else {
                        let ins = vec![self.float_operand(node, 0)?, self.float_operand(node, 1)?];
                        let y = self.act(out)?;
                        self.op(node, OpKind::Float { op: FloatOp::Div }, ins, vec![y]);
                        return Ok(());
                    };
                    let ty = self.ty_of(out)?;
                    let a = self.input(node, x, ty)?;
                    let v = node.input(1).ok_or("no divisor")?;
                    let (codes, q) = operand_codes(&[1.0 / c], ty);
                    let b = self.push(ITensor {
                        name: format!("{}:reciprocal", self.name(v)),
                        shape: vec![1],
                        q,
                        data: Some(codes),
                    });
                    let y = self.act(out)?;
                    self.op(node, OpKind::Mul { act }, vec![a, b], vec![y]);
                    return Ok(());
                }
                // A Relu (or Relu6, ReluN1To1) after an Add, Sub or Mul whose output has no grid
                // of its own runs as the op's fused activation, as TFLite's converter fuses it.
                let clamp_after = matches!(
                    &self.consumers[out][..],
                    [c] if matches!(self.g().nodes[*c].op.as_str(), "Relu" | "Clip")
                );
                let (act, out) = match (act, self.q.grid(self.plan, out)) {
                    (Act::None, None) if clamp_after && !self.g().outputs.contains(&out) => {
                        match self.absorb_consumer(out)? {
                            (Epilogue::Act(a), y) => (a, y),
                            _ => (act, out),
                        }
                    }
                    _ => (act, out),
                };
                let ty = self.ty_of(out)?;
                let a = self.operand(node, 0, ty)?;
                let b = self.operand(node, 1, ty)?;
                let y = self.act(out)?;
                let kind = match node.op.as_str() {
                    "Add" => OpKind::Add { act },
                    "Sub" => OpKind::Sub { act },
                    _ => OpKind::Mul { act },
                };
                self.op(node, kind, vec![a, b], vec![y]);
                Ok(())
            }
            "GlobalAveragePool" | "ReduceMean" => {
                let rank = self.shape(x).map_err(|e| e.to_string())?.len();
                let axes: Vec<usize> = if node.op == "GlobalAveragePool" {
                    (2..rank).collect()
                } else {
                    let raw = node
                        .attr_ints("axes")
                        .map(<[i64]>::to_vec)
                        .or_else(|| {
                            node.input(1)
                                .and_then(|a| {
                                    self.statics
                                        .get(&a)
                                        .or(g.values[a].constant.as_ref().map(crate::ir::Constant::tensor))
                                })
                                .and_then(Tensor::as_i64_vec)
                        })
                        .unwrap_or_else(|| (0..rank as i64).collect());
                    raw.iter()
                        .map(|&a| if a < 0 { (a + rank as i64) as usize } else { a as usize })
                        .collect()
                };
                let ty = self.ty_of(out)?;
                let xi = self.input(node, x, ty)?;
                let y = self.act(out)?;
                self.op(node, OpKind::Mean { axes }, vec![xi], vec![y]);
                Ok(())
            }
            "MaxPool" | "AveragePool" => {
                if node.attr_ints("kernel_shape").is_none_or(|k| k.len() != 2) {
                    return Err("only 2-D pooling".into());
                }
                if node.attr_ints("dilations").is_some_and(|d| d.iter().any(|&v| v != 1)) {
                    return Err("dilated pooling has no integer form".into());
                }
                if node.attr_s("auto_pad").is_some_and(|a| a != "NOTSET") {
                    return Err("auto_pad pooling: optimize the model first".into());
                }
                let pads = pads4(node);
                if node.op == "AveragePool"
                    && node.attr_i("count_include_pad") == Some(1)
                    && pads.iter().any(|&p| p > 0)
                {
                    return Err("average pooling that counts padding has no integer form".into());
                }
                let kernel = attr2(node, "kernel_shape", 1);
                let strides = attr2(node, "strides", 1);
                let xi = self.act(x)?;
                let y = self.act(out)?;
                let kind = OpKind::Pool {
                    kind: if node.op == "MaxPool" {
                        PoolKind::Max
                    } else {
                        PoolKind::Avg
                    },
                    kernel,
                    strides,
                    pads,
                    act: Act::None,
                };
                self.op(node, kind, vec![xi], vec![y]);
                Ok(())
            }
            "Softmax" => {
                let xs = self.shape(x).map_err(|e| e.to_string())?;
                let rank = xs.len();
                // Over another axis (opset 13 on): that axis swapped with the last by a
                // TRANSPOSE before and after (transposes copy codes on one grid).
                let swap = match self.softmax_over_last_axis(node, rank) {
                    Ok(()) => None,
                    Err(_) if self.q.model.opset() >= 13 && rank > 1 => {
                        let a = node.attr_i("axis").unwrap_or(-1);
                        let axis = usize::try_from(if a < 0 { a + rank as i64 } else { a })
                            .ok()
                            .filter(|&a| a < rank)
                            .ok_or_else(|| format!("axis {a} is out of range for rank {rank}"))?;
                        Some(axis)
                    }
                    Err(e) => return Err(e),
                };
                let ty = self.ty_of(out)?;
                let depth = xs.get(swap.unwrap_or(rank.saturating_sub(1))).copied().unwrap_or(1);
                let floor = super::recipe::int16_softmax_floor(depth);
                if ty == IntType::I16 && floor > super::recipe::INT16_SOFTMAX_FLOOR_LIMIT {
                    let name = self.name(out);
                    self.constraint(
                        &name,
                        &node.name,
                        "int16-softmax-floor",
                        format!(
                            "int16 Softmax over {depth} values: the kernel floors every exp at e^-10, adding up to \
                             {floor:.3} to a row's denominator (int8 has no such floor)"
                        ),
                    );
                }
                let xi = self.input(node, x, ty)?;
                let y = self.act(out)?;
                let Some(axis) = swap else {
                    self.op(node, OpKind::Softmax { beta: 1.0 }, vec![xi], vec![y]);
                    return Ok(());
                };
                let mut perm: Vec<usize> = (0..rank).collect();
                perm.swap(axis, rank - 1);
                let mut shape = xs;
                shape.swap(axis, rank - 1);
                let name = self.name(out);
                let (qx, qy) = (self.program.tensors[xi].q.clone(), self.program.tensors[y].q.clone());
                let a = self.push(ITensor {
                    name: format!("{name}:softmax_input"),
                    shape: shape.clone(),
                    q: qx,
                    data: None,
                });
                self.op(node, OpKind::Transpose { perm: perm.clone() }, vec![xi], vec![a]);
                let b = self.push(ITensor {
                    name: format!("{name}:softmax_output"),
                    shape,
                    q: qy,
                    data: None,
                });
                self.op(node, OpKind::Softmax { beta: 1.0 }, vec![a], vec![b]);
                self.op(node, OpKind::Transpose { perm }, vec![b], vec![y]);
                Ok(())
            }
            "QuickGelu" if node.attr_f("alpha").unwrap_or(1.702) == 1.0 => {
                let ty = self.ty_of(out)?;
                let xi = self.input(node, x, ty)?;
                self.silu_tail(node, xi, out)
            }
            "Neg" => {
                // −x as MUL by −1: TFLite's NEG negates codes and ignores the grids.
                let ty = self.ty_of(out)?;
                let xi = self.input(node, x, ty)?;
                let (codes, q) = operand_codes(&[-1.0], ty);
                let b = self.push(ITensor {
                    name: format!("{}:minus_one", node.name),
                    shape: vec![1],
                    q,
                    data: Some(codes),
                });
                let y = self.act(out)?;
                self.op(node, OpKind::Mul { act: Act::None }, vec![xi, b], vec![y]);
                Ok(())
            }
            "Pow" => {
                // A constant exponent of 2 is x·x (TFLite's converter writes MUL, or SQUARE
                // in float), 0.5 is SQRT and 1 the input's codes.
                let e = node
                    .input(1)
                    .and_then(|v| self.constant_f32(v))
                    .filter(|(_, d)| d.len() == 1)
                    .map(|(_, d)| d[0])
                    .ok_or("Pow with an exponent that is not one constant has no integer form yet")?;
                if ![1.0, 2.0, 3.0, 0.5].contains(&e) {
                    return Err(format!(
                        "Pow with exponent {e} has no integer form yet (2, 3, 0.5 and 1 have)"
                    ));
                }
                let ty = self.ty_of(out)?;
                let xi = self.input(node, x, ty)?;
                if e == 1.0 {
                    let q = self.program.tensors[xi].q.clone();
                    self.params.insert(out, q);
                }
                let y = self.act(out)?;
                match e {
                    2.0 => self.op(node, OpKind::Mul { act: Act::None }, vec![xi, xi], vec![y]),
                    3.0 => {
                        // x³ as (x·x)·x (the tanh GELU's cube): the square on the grid of
                        // [0, m²], m the largest magnitude on x's grid.
                        let t = self.square_of(node, xi)?;
                        self.op(node, OpKind::Mul { act: Act::None }, vec![xi, xi], vec![t]);
                        self.op(node, OpKind::Mul { act: Act::None }, vec![t, xi], vec![y]);
                    }
                    0.5 => self.op(node, OpKind::Sqrt, vec![xi], vec![y]),
                    _ => self.op(node, OpKind::Reshape, vec![xi], vec![y]),
                }
                Ok(())
            }
            "Sqrt" | "Log" | "Exp" => {
                let ty = self.ty_of(out)?;
                let xi = self.input(node, x, ty)?;
                // TFLite's SQRT fails on a negative input value at run time (the integer
                // reference too, naming the node); sums of squares never are.
                let y = self.act(out)?;
                let kind = match node.op.as_str() {
                    "Sqrt" => OpKind::Sqrt,
                    "Log" => OpKind::Log,
                    _ => OpKind::Exp,
                };
                self.op(node, kind, vec![xi], vec![y]);
                Ok(())
            }
            "Pad" => {
                let rank = self.shape(x).map_err(|e| e.to_string())?.len();
                let mode = node.attr_s("mode").unwrap_or("constant");
                let raw: Vec<i64> = match node.attr_ints("pads") {
                    Some(p) => p.to_vec(),
                    None => node
                        .input(1)
                        .and_then(|v| self.known(v))
                        .and_then(Tensor::as_i64_vec)
                        .ok_or("its pads are not constant")?,
                };
                if node.input(3).is_some() || raw.len() != 2 * rank || raw.iter().any(|&v| v < 0) {
                    return Err("only non-negative pads over every axis have an integer form".into());
                }
                let pads: Vec<[usize; 2]> = (0..rank).map(|d| [raw[d] as usize, raw[d + rank] as usize]).collect();
                let xi = self.act(x)?;
                let y = self.act(out)?;
                let yq = self.program.tensors[y].q.clone();
                let mode = match mode {
                    "constant" => {
                        let value = node
                            .attr_f("value")
                            .or_else(|| {
                                node.input(2)
                                    .and_then(|v| self.constant_f32(v))
                                    .and_then(|(_, d)| d.first().copied())
                            })
                            .unwrap_or(0.0);
                        PadMode::Constant(quantize_code(value, &yq))
                    }
                    "reflect" => PadMode::Reflect,
                    m => return Err(format!("{m} padding has no integer form")),
                };
                self.op(node, OpKind::Pad { pads, mode }, vec![xi], vec![y]);
                Ok(())
            }
            "ReduceSum" | "ReduceMax" | "ReduceMin" => {
                let shape = self.shape(x).map_err(|e| e.to_string())?;
                let axes = self.reduce_axes(node, shape.len())?;
                let xi = if node.op == "ReduceSum" {
                    let ty = self.ty_of(out)?;
                    self.input(node, x, ty)?
                } else {
                    self.act(x)?
                };
                let y = self.act(out)?;
                if node.op == "ReduceSum" {
                    // SUM's reference kernel reads int8 as uint8: a MEAN on the grid of
                    // s_out/n, whose codes are the sum's on s_out, then a MUL by the
                    // constant n back onto s_out (a valid TFLite graph: NPU compilers such
                    // as Vela refuse a RESHAPE that changes the grid).
                    let n: usize = axes.iter().map(|&a| shape[a]).product();
                    let mut q = self.program.tensors[y].q.clone();
                    q.scale = q.scale.iter().map(|s| s / n.max(1) as f32).collect();
                    let ty = q.ty;
                    let mean = self.push(ITensor {
                        name: format!("{}:mean", self.name(out)),
                        shape: self.program.tensors[y].shape.clone(),
                        q,
                        data: None,
                    });
                    let (codes, cq) = operand_codes(&[n as f32], ty);
                    let count = self.push(ITensor {
                        name: format!("{}:count", node.name),
                        shape: vec![1],
                        q: cq,
                        data: Some(codes),
                    });
                    self.op(node, OpKind::Mean { axes }, vec![xi], vec![mean]);
                    self.op(node, OpKind::Mul { act: Act::None }, vec![mean, count], vec![y]);
                } else {
                    let which = if node.op == "ReduceMax" {
                        Extreme::Max
                    } else {
                        Extreme::Min
                    };
                    self.op(node, OpKind::Reduce { which, axes }, vec![xi], vec![y]);
                }
                Ok(())
            }
            "Gather" => self.lower_gather(node, x, out),
            "ArgMax" | "ArgMin" => {
                // TFLite's ARG_MAX / ARG_MIN take the first of equal codes and drop the axis;
                // `keepdims` is a RESHAPE after it.
                let (shape, axis) = self.axis_of(node, x)?;
                if node.attr_i("select_last_index").unwrap_or(0) != 0 {
                    return Err("select_last_index has no integer form (TFLite's ARG_MAX takes the first)".into());
                }
                let xi = self.act(x)?;
                match self.program.tensors[xi].q.ty {
                    IntType::I8 => {}
                    IntType::I16 => return Err("TFLite's ARG_MAX and ARG_MIN have no int16 kernel".into()),
                    _ => return Err(format!("its input {} is not quantized", self.name(x))),
                }
                let y = self.act(out)?;
                if self.program.tensors[y].q.ty != IntType::Index {
                    return Err(format!("its output {} is not an integer tensor", self.name(out)));
                }
                let which = if node.op == "ArgMax" {
                    Extreme::Max
                } else {
                    Extreme::Min
                };
                let kind = OpKind::ArgExtreme { which, axis };
                if node.attr_i("keepdims").unwrap_or(1) == 0 {
                    self.op(node, kind, vec![xi], vec![y]);
                } else {
                    let mut dropped = shape;
                    dropped.remove(axis);
                    let mid = self.push(ITensor {
                        name: format!("{}:dropped", self.name(out)),
                        shape: dropped,
                        q: QParams::index(),
                        data: None,
                    });
                    self.op(node, kind, vec![xi], vec![mid]);
                    self.op(node, OpKind::Reshape, vec![mid], vec![y]);
                }
                Ok(())
            }
            "DepthToSpace" | "SpaceToDepth" => {
                // TFLite's DEPTH_TO_SPACE / SPACE_TO_DEPTH are NHWC copies; in the graph's
                // NCHW they are a RESHAPE to rank 6, a TRANSPOSE and a RESHAPE back.
                let shape = self.shape(x).map_err(|e| e.to_string())?;
                let [n, c, h, w] = <[usize; 4]>::try_from(shape.as_slice())
                    .map_err(|_| format!("its input {} of shape {shape:?} is not rank 4", self.name(x)))?;
                let b = usize::try_from(node.attr_i("blocksize").unwrap_or(0)).unwrap_or(0);
                if b == 0 {
                    return Err("blocksize is missing or not positive".into());
                }
                let (split, perm) = if node.op == "DepthToSpace" {
                    if c % (b * b) != 0 {
                        return Err(format!("{c} channels do not split into blocks of {b}×{b}"));
                    }
                    match node.attr_s("mode").unwrap_or("DCR") {
                        "DCR" => (vec![n, b, b, c / (b * b), h, w], vec![0, 3, 4, 1, 5, 2]),
                        "CRD" => (vec![n, c / (b * b), b, b, h, w], vec![0, 1, 4, 2, 5, 3]),
                        m => return Err(format!("mode {m} is neither DCR nor CRD")),
                    }
                } else {
                    if h % b != 0 || w % b != 0 {
                        return Err(format!("{h}×{w} does not split into blocks of {b}×{b}"));
                    }
                    (vec![n, c, h / b, b, w / b, b], vec![0, 3, 5, 1, 2, 4])
                };
                let moved: Vec<usize> = perm.iter().map(|&p| split[p]).collect();
                let steps = [
                    (OpKind::Reshape, "blocks", split),
                    (OpKind::Transpose { perm }, "moved", moved),
                ];
                self.copy_chain(node, x, out, steps)
            }
            "Tile" => {
                // A RESHAPE that puts a unit axis before each repeated one, a BROADCAST_TO
                // of it to the repeat counts, and a RESHAPE to the output.
                let xs = self.shape(x).map_err(|e| e.to_string())?;
                let ys = self.shape(out).map_err(|e| e.to_string())?;
                let Some((unit, wide)) = crate::program::tile_shapes(&xs, &ys) else {
                    return Err(format!("output {ys:?} is not a tiling of input {xs:?}"));
                };
                if unit.len() == xs.len() {
                    return self.copy_chain(node, x, out, []);
                }
                let steps = [
                    (OpKind::Reshape, "unit_axes", unit),
                    (OpKind::BroadcastTo, "repeated", wide),
                ];
                self.copy_chain(node, x, out, steps)
            }
            "Expand" => {
                let xi = self.act(x)?;
                let y = self.act(out)?;
                self.op(node, OpKind::BroadcastTo, vec![xi], vec![y]);
                Ok(())
            }
            "GlobalMaxPool" => {
                let rank = self.shape(x).map_err(|e| e.to_string())?.len();
                let xi = self.act(x)?;
                let y = self.act(out)?;
                self.op(
                    node,
                    OpKind::Reduce {
                        which: Extreme::Max,
                        axes: (2..rank).collect(),
                    },
                    vec![xi],
                    vec![y],
                );
                Ok(())
            }
            "Max" | "Min" if node.inputs.len() == 2 => {
                // Raw codes compared: the output and a constant operand on the activation's
                // grid (TFLite's MAXIMUM/MINIMUM compare stored values).
                let (k, c) = match (self.scalar_const(node), node.input(0), node.input(1)) {
                    (Some((k, _)), _, _) => (1 - k, Some(k)),
                    (None, Some(a), Some(b)) if self.constant_f32(a).is_none() && self.constant_f32(b).is_none() => {
                        (0, None)
                    }
                    _ => return Err("a Max/Min with a non-scalar constant has no integer form yet".into()),
                };
                let a = self.act(node.input(k).ok_or("no input")?)?;
                let q = self.program.tensors[a].q.clone();
                let b = match c {
                    Some(k) => {
                        let v = node.input(k).ok_or("no operand")?;
                        let (_, d) = self.constant_f32(v).ok_or("operand is not constant")?;
                        self.push(ITensor {
                            name: self.name(v),
                            shape: vec![1],
                            q: q.clone(),
                            data: Some(vec![i64::from(quantize_code(d[0], &q))]),
                        })
                    }
                    None => self.act_on_grid(node, node.input(1).ok_or("no input")?, &q)?,
                };
                self.on_input_grid(node, out, &q);
                let y = self.act(out)?;
                let which = if node.op == "Max" { Extreme::Max } else { Extreme::Min };
                let kind = OpKind::Extremum { which };
                self.op(node, kind, vec![a, b], vec![y]);
                Ok(())
            }
            "Reciprocal" | "Cast" => {
                let ins = vec![self.float_operand(node, 0)?];
                let y = self.act(out)?;
                let op = if node.op == "Cast" {
                    if self.g().values[out].dtype != Some(crate::ir::DType::F32) {
                        return Err("only a Cast to float32 has an integer form".into());
                    }
                    FloatOp::Cast
                } else {
                    FloatOp::Reciprocal
                };
                self.op(node, OpKind::Float { op }, ins, vec![y]);
                Ok(())
            }
            "Equal" | "Where" => {
                let ins = (0..node.inputs.len())
                    .map(|k| self.float_operand(node, k))
                    .collect::<Result<Vec<_>, _>>()?;
                let (op, y) = if node.op == "Equal" {
                    let shape = self.shape(out).map_err(|e| e.to_string())?;
                    let y = self.push(ITensor {
                        name: self.name(out),
                        shape,
                        q: QParams::boolean(),
                        data: None,
                    });
                    self.ids.insert(out, y);
                    (FloatOp::Equal, y)
                } else {
                    (FloatOp::Where, self.act(out)?)
                };
                self.op(node, OpKind::Float { op }, ins, vec![y]);
                Ok(())
            }
            "Sigmoid" | "Tanh" | "HardSwish" => {
                let ty = self.ty_of(out)?;
                let xi = self.input(node, x, ty)?;
                let y = self.act(out)?;
                let kind = match node.op.as_str() {
                    "Sigmoid" => OpKind::Logistic,
                    "Tanh" => OpKind::Tanh,
                    // TFLite's HARD_SWISH has no int16 kernel.
                    _ if ty == IntType::I16 => OpKind::Float { op: FloatOp::HardSwish },
                    _ => OpKind::HardSwish,
                };
                self.op(node, kind, vec![xi], vec![y]);
                Ok(())
            }
            "Relu" | "Clip" => {
                // A standalone clamp with a grid of its own: TFLite's RELU family.
                let g = self.g();
                let bound = |k: usize, name: &str| {
                    node.attr_f(name).or_else(|| {
                        node.input(k)
                            .and_then(|b| g.values[b].constant.as_ref())
                            .and_then(|c| c.tensor().to_f32().iter().next().copied())
                    })
                };
                let act = if node.op == "Relu" {
                    Act::Relu
                } else {
                    match (bound(1, "min"), bound(2, "max")) {
                        (Some(lo), Some(hi)) if lo == 0.0 && hi == 6.0 => Act::Relu6,
                        (Some(lo), Some(hi)) if lo == -1.0 && hi == 1.0 => Act::ReluN1To1,
                        (Some(0.0), None) => Act::Relu,
                        (Some(lo), Some(hi)) if lo == 0.0 && hi >= f32::MAX => Act::Relu,
                        _ => return self.clip_as_max_min(node, x, out),
                    }
                };
                let ty = self.ty_of(out)?;
                let xi = self.input(node, x, ty)?;
                let y = self.act(out)?;
                self.op(node, OpKind::Relu { act }, vec![xi], vec![y]);
                Ok(())
            }
            "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Identity" => {
                let xi = self.act(x)?;
                let y = self.act(out)?;
                self.op(node, OpKind::Reshape, vec![xi], vec![y]);
                Ok(())
            }
            "Transpose" => {
                let rank = self.shape(x).map_err(|e| e.to_string())?.len();
                let perm: Vec<usize> = node.attr_ints("perm").map_or_else(
                    || (0..rank).rev().collect(),
                    |p| p.iter().map(|&v| v as usize).collect(),
                );
                let xi = self.act(x)?;
                let y = self.act(out)?;
                self.op(node, OpKind::Transpose { perm }, vec![xi], vec![y]);
                Ok(())
            }
            "Concat" => {
                let rank = self.shape(out).map_err(|e| e.to_string())?.len() as i64;
                let axis = node.attr_i("axis").unwrap_or(0);
                let axis = if axis < 0 { axis + rank } else { axis } as usize;
                let yq = self.act_params(out)?;
                let mut ins = Vec::new();
                for k in 0..node.inputs.len() {
                    let Some(v) = node.input(k) else { continue };
                    if let Some((shape, data)) = self.constant_f32(v) {
                        let codes = data.iter().map(|&f| i64::from(quantize_code(f, &yq))).collect();
                        let t = self.push(ITensor {
                            name: self.name(v),
                            shape,
                            q: yq.clone(),
                            data: Some(codes),
                        });
                        ins.push(t);
                        continue;
                    }
                    let t = self.act(v)?;
                    if self.program.tensors[t].q.same_grid(&yq) {
                        ins.push(t);
                    } else {
                        let from = self.program.tensors[t].q.clone();
                        let r = self.push(ITensor {
                            name: format!("{}:requant", self.name(v)),
                            shape: self.program.tensors[t].shape.clone(),
                            q: yq.clone(),
                            data: None,
                        });
                        self.constraint(
                            &self.program.tensors[r].name.clone(),
                            &node.name,
                            "concat-requantize",
                            format!(
                                "input moved from scale {} zero point {} to the output's scale {} zero point {}",
                                from.s(),
                                from.zp(),
                                yq.s(),
                                yq.zp()
                            ),
                        );
                        self.op(node, OpKind::Requantize, vec![t], vec![r]);
                        ins.push(r);
                    }
                }
                let y = self.act(out)?;
                self.op(node, OpKind::Concat { axis }, ins, vec![y]);
                Ok(())
            }
            op => Err(format!("op {op} has no integer form yet")),
        }
    }

    /// A Clip with other bounds, as TFLite's converter writes it: a MAXIMUM with the lower
    /// bound and a MINIMUM with the upper one (broadcast), each bound a constant or a
    /// tensor on the input's grid, the output on that grid too (`<y>:clip_min` between
    /// them when both are finite).
    fn clip_as_max_min(&mut self, node: &Node, x: ValueId, out: ValueId) -> Result<(), String> {
        // Each bound: an attribute (opset < 11), a constant, a tensor, or none (infinite).
        enum Bound {
            Value(f32),
            Tensor(ValueId),
        }
        let bound = |k: usize, name: &str| -> Option<Bound> {
            if let Some(b) = node.attr_f(name) {
                return Some(Bound::Value(b));
            }
            let v = node.input(k)?;
            match self.constant_f32(v) {
                Some((_, d)) => d.first().map(|&b| Bound::Value(b)),
                None => Some(Bound::Tensor(v)),
            }
        };
        let steps: Vec<(OpKind, Bound, &str)> = [
            (OpKind::Extremum { which: Extreme::Max }, 1, "min"),
            (OpKind::Extremum { which: Extreme::Min }, 2, "max"),
        ]
        .into_iter()
        .filter_map(|(k, i, which)| match bound(i, which)? {
            Bound::Value(b) if !b.is_finite() || b.abs() >= f32::MAX => None,
            b => Some((k, b, which)),
        })
        .collect();
        let a = self.act(x)?;
        let q = self.program.tensors[a].q.clone();
        self.on_input_grid(node, out, &q);
        let y = self.act(out)?;
        let name = self.name(out);
        if steps.is_empty() {
            self.op(node, OpKind::Reshape, vec![a], vec![y]);
            return Ok(());
        }
        let last = steps.len() - 1;
        let mut cur = a;
        for (i, (kind, bound, which)) in steps.into_iter().enumerate() {
            let c = match bound {
                Bound::Value(b) => self.push(ITensor {
                    name: format!("{name}:clip_{which}_bound"),
                    shape: vec![1],
                    q: q.clone(),
                    data: Some(vec![i64::from(quantize_code(b, &q))]),
                }),
                Bound::Tensor(v) => self.act_on_grid(node, v, &q)?,
            };
            let dst = if i == last {
                y
            } else {
                let shape = self.program.tensors[y].shape.clone();
                self.push(ITensor {
                    name: format!("{name}:clip_{which}"),
                    shape,
                    q: q.clone(),
                    data: None,
                })
            };
            self.op(node, kind, vec![cur, c], vec![dst]);
            cur = dst;
        }
        Ok(())
    }

    fn op(&mut self, node: &Node, kind: OpKind, inputs: Vec<usize>, outputs: Vec<usize>) {
        self.program.ops.push(IOp {
            node: node.name.clone(),
            kind,
            inputs,
            outputs,
        });
    }

    /// Puts `out` on its input's grid `q` (ops that copy or compare stored codes: slices,
    /// MAXIMUM, MINIMUM), recording a `same-grid-as-input` constraint where calibration
    /// chose another grid for it.
    fn on_input_grid(&mut self, node: &Node, out: ValueId, q: &QParams) {
        if let Ok(c) = self.plan_grid(out)
            && !c.same_grid(q)
        {
            let name = self.name(out);
            self.constraint(
                &name,
                &node.name,
                "same-grid-as-input",
                format!(
                    "output on its input's grid, scale {} zero point {} (calibration chose scale {} zero point {})",
                    q.s(),
                    q.zp(),
                    c.s(),
                    c.zp()
                ),
            );
        }
        self.params.insert(out, q.clone());
    }

    /// The activation `v` on grid `q`: itself, or a requantized copy (`<v>:requant`).
    fn act_on_grid(&mut self, node: &Node, v: ValueId, q: &QParams) -> Result<usize, String> {
        let t = self.act(v)?;
        if self.program.tensors[t].q.same_grid(q) {
            return Ok(t);
        }
        let from = self.program.tensors[t].q.clone();
        let r = self.push(ITensor {
            name: format!("{}:requant", self.name(v)),
            shape: self.program.tensors[t].shape.clone(),
            q: q.clone(),
            data: None,
        });
        self.constraint(
            &self.program.tensors[r].name.clone(),
            &node.name,
            "operand-requantize",
            format!(
                "input moved from scale {} zero point {} to scale {} zero point {}",
                from.s(),
                from.zp(),
                q.s(),
                q.zp()
            ),
        );
        self.op(node, OpKind::Requantize, vec![t], vec![r]);
        Ok(r)
    }

    /// A value known at legalization time (a constant or shape arithmetic).
    fn known(&self, v: ValueId) -> Option<&Tensor> {
        self.statics
            .get(&v)
            .or_else(|| self.g().values[v].constant.as_ref().map(crate::ir::Constant::tensor))
    }

    /// The reduced axes of a Reduce* node (attribute before opset 18, else input), sorted.
    fn reduce_axes(&self, node: &Node, rank: usize) -> Result<Vec<usize>, String> {
        let raw = match node.attr_ints("axes") {
            Some(a) => Some(a.to_vec()),
            None => node
                .input(1)
                .map(|v| {
                    self.known(v)
                        .and_then(Tensor::as_i64_vec)
                        .ok_or("its axes are not constant")
                })
                .transpose()?,
        };
        let mut axes: Vec<usize> = match raw {
            Some(a) if !a.is_empty() => a
                .iter()
                .map(|&a| if a < 0 { (a + rank as i64) as usize } else { a as usize })
                .collect(),
            _ if node.attr_i("noop_with_empty_axes").unwrap_or(0) != 0 => {
                return Err("a reduction over no axes is an identity: optimize the model first".into());
            }
            _ => (0..rank).collect(),
        };
        axes.sort_unstable();
        axes.dedup();
        Ok(axes)
    }

    /// An operand of a float op: an activation (dequantized by the op), a boolean made by
    /// another float op, or a constant as float32.
    fn float_operand(&mut self, node: &Node, k: usize) -> Result<usize, String> {
        let v = node.input(k).ok_or("missing operand")?;
        if let Some(&t) = self.ids.get(&v) {
            return Ok(t);
        }
        if let Some(c) = self.known(v) {
            let shape = c.shape().to_vec();
            let (q, data) = if c.dtype() == crate::ir::DType::Bool {
                let b = c.to_f32();
                (QParams::boolean(), b.iter().map(|&x| i64::from(x != 0.0)).collect())
            } else if let Some(ints) = c.to_i64().filter(|_| !c.dtype().is_float()) {
                (QParams::index(), ints.iter().copied().collect())
            } else {
                (
                    QParams::float32(),
                    c.to_f32().iter().map(|x| i64::from(x.to_bits() as i32)).collect(),
                )
            };
            return Ok(self.push(ITensor {
                name: self.name(v),
                shape,
                q,
                data: Some(data),
            }));
        }
        self.act(v)
    }

    /// An element-wise operand of an op computing in `ty`: an activation, or a constant on
    /// its own symmetric grid of that width.
    fn operand(&mut self, node: &Node, k: usize, ty: IntType) -> Result<usize, String> {
        let v = node.input(k).ok_or("missing operand")?;
        if let Some((shape, data)) = self.constant_f32(v) {
            let (codes, q) = operand_codes(&data, ty);
            return Ok(self.push(ITensor {
                name: self.name(v),
                shape,
                q,
                data: Some(codes),
            }));
        }
        self.input(node, v, ty)
    }

    /// The activation fused into a FusedConv.
    fn epilogue(node: &Node) -> Result<Option<Epilogue>, String> {
        let Some(a) = node.attr_s("activation") else {
            return Ok(None);
        };
        // FusedConv lists the parameters in `activation_params`; FusedGemm names them.
        let named: Vec<f32> = ["activation_alpha", "activation_beta"]
            .iter()
            .map_while(|k| node.attr_f(k))
            .collect();
        let params = if node.op == "FusedGemm" {
            named.as_slice()
        } else {
            node.attr_floats("activation_params").unwrap_or(&[])
        };
        activation_epilogue(a, params).map(Some)
    }

    /// When `y` has no grid of its own (its one consumer, an activation, is fused into the
    /// producer), the consumer's activation and output; else no activation and `y`.
    fn absorb_consumer(&mut self, y: ValueId) -> Result<(Epilogue, ValueId), String> {
        if self.q.grid(self.plan, y).is_some() || self.g().outputs.contains(&y) {
            return Ok((Epilogue::Act(Act::None), y));
        }
        let g = self.g();
        let [c] = self.consumers[y][..] else {
            return Err("its output has no grid and several consumers".into());
        };
        let cn = &g.nodes[c];
        let params: Vec<f32> = match cn.op.as_str() {
            "HardSigmoid" => vec![cn.attr_f("alpha").unwrap_or(0.2), cn.attr_f("beta").unwrap_or(0.5)],
            "LeakyRelu" => vec![cn.attr_f("alpha").unwrap_or(0.01)],
            "Clip" => {
                let bound = |k: usize, d: f32| {
                    cn.attr_f(if k == 1 { "min" } else { "max" })
                        .or_else(|| {
                            cn.input(k)
                                .and_then(|b| g.values[b].constant.as_ref())
                                .and_then(|c| c.tensor().to_f32().iter().next().copied())
                        })
                        .unwrap_or(d)
                };
                vec![bound(1, f32::MIN), bound(2, f32::MAX)]
            }
            _ => Vec::new(),
        };
        let out = cn.output(0).ok_or("consumer without output")?;
        let e = match activation_epilogue(&cn.op, &params) {
            Ok(e) => e,
            Err(e) => match (cn.op.as_str(), self.plan_grid(out)) {
                ("Clip", Ok(q)) => clip_as_act(params[0], params[1], &q)
                    .map(Epilogue::Act)
                    .ok_or_else(|| format!("its output has no grid and its consumer {}: {e}", cn.label()))?,
                _ => return Err(format!("its output has no grid and its consumer {}: {e}", cn.label())),
            },
        };
        self.done[c] = true;
        Ok((e, out))
    }

    /// A layer's weights as per-output-channel codes (`axis`): int8, or int4 where the plan
    /// says 4-bit weights and the TFLite kernel takes them (`int4_ok`). 4-bit weights in
    /// groups (a plan written before `int4` meant one scale per output channel) become one
    /// scale per output channel, TFLite's only int4 scheme.
    fn layer_weights(
        &mut self,
        node: &Node,
        data: &[f32],
        shape: &[usize],
        axis: usize,
        int4_ok: bool,
    ) -> (super::params::WeightCodes, IntType) {
        let clip = self.plan.clip(node);
        // GPTQ's codes (one scale per channel) where the plan has them; int8 storage holds
        // 4-bit ones on the same grid.
        let gptq = super::gptq::plan_codes(self.plan, node, data, shape, axis);
        let WeightFormat::Int4 { group } = self.plan.precision(node).weights else {
            return (
                gptq.unwrap_or_else(|| int8_weight_codes(data, shape, axis, clip)),
                IntType::I8,
            );
        };
        let per_channel = data.len() / shape.get(axis).copied().unwrap_or(1).max(1);
        let name = node.input(1).map(|v| self.name(v)).unwrap_or_default();
        if !int4_ok {
            self.constraint(
                &name,
                &node.name,
                "int4-weights-as-int8",
                format!(
                    "4-bit weights stored as int8: TFLite's {} kernel has no int4 filter here",
                    node.op
                ),
            );
            return (
                gptq.unwrap_or_else(|| int8_weight_codes(data, shape, axis, clip)),
                IntType::I8,
            );
        }
        if group != 0 && group < per_channel {
            self.constraint(
                &name,
                &node.name,
                "int4-per-channel",
                format!(
                    "int4 with one scale per output channel ({per_channel} weights each), TFLite's only int4 scheme; the plan has one per group of {group}"
                ),
            );
        }
        (
            gptq.unwrap_or_else(|| weight_codes(data, shape, axis, 7.0, clip)),
            IntType::I4,
        )
    }

    /// A layer's float bias (zeros without one) less the plan's bias correction.
    fn layer_bias(&self, node: &Node, channels: usize) -> Result<Vec<f32>, String> {
        let mut bias: Vec<f32> = match node.input(2) {
            Some(b) => self.constant_f32(b).ok_or("bias is not constant")?.1,
            None => vec![0.0; channels],
        };
        if let Some(c) = self
            .plan
            .bias_correction
            .get(&node.name)
            .filter(|c| c.len() == bias.len())
        {
            for (b, d) in bias.iter_mut().zip(c) {
                *b -= d;
            }
        }
        Ok(bias)
    }

    /// A HardSigmoid epilogue folded into the per-channel weight scales and the bias
    /// (`clamp(α·acc + β, 0, 1)`: its clamp is the output grid's saturation and a ReLU).
    fn fold_hard_sigmoid(
        &mut self,
        node: &Node,
        y: ValueId,
        epi: Epilogue,
        scales: &mut [f64],
        bias: &mut [f32],
    ) -> Epilogue {
        let Epilogue::HardSigmoid(alpha, beta) = epi else {
            return epi;
        };
        for s in scales.iter_mut() {
            *s *= f64::from(alpha);
        }
        for b in bias.iter_mut() {
            *b = alpha * *b + beta;
        }
        self.constraint(
            &self.name(y),
            &node.name,
            "folded-hardsigmoid",
            format!("HardSigmoid(α={alpha}, β={beta}) folded into the weights and bias; its clamp to [0, 1] is the output grid's saturation and a fused ReLU"),
        );
        Epilogue::Act(Act::Relu)
    }

    /// The int8 per-output-channel weight tensor (`codes` in `shape`, channels on dim 0)
    /// and the int32 bias tensor on `s_in · s_w[c]`; returns their ids.
    ///
    /// A channel whose bias does not fit int32 on that scale (a dead channel's tiny weight
    /// scale, or a folded HardSigmoid's `β` on a fine input grid) gets the smallest weight
    /// scale where it does, its codes put on it, as TFLite's converter does
    /// (`AdjustWeightsForBiasScale`); else the bias would saturate and the channel's output
    /// with it.
    #[expect(clippy::too_many_arguments, reason = "one layer's quantized parts")]
    fn weight_and_bias(
        &mut self,
        node: &Node,
        wv: ValueId,
        shape: Vec<usize>,
        (mut codes, wty): (Vec<i32>, IntType),
        scales: &[f64],
        bias: &[f32],
        s_in: f32,
        bias_ty: IntType,
    ) -> (usize, usize) {
        let channels = shape[0];
        let mut scales = scales.to_vec();
        if bias_ty == IntType::I32 && s_in > 0.0 {
            let per = codes.len() / channels.max(1);
            let limit = f64::from(i32::MAX);
            let mut widened = 0;
            for (c, s) in scales.iter_mut().enumerate() {
                let b = bias.get(c % bias.len().max(1)).map_or(0.0, |&b| f64::from(b).abs());
                let need = b / (f64::from(s_in) * limit) * (1.0 + 1e-6);
                if need > *s {
                    for q in &mut codes[c * per..(c + 1) * per] {
                        *q = (f64::from(*q) * *s / need).round_ties_even() as i32;
                    }
                    *s = need;
                    widened += 1;
                }
            }
            if widened > 0 {
                let name = self.name(wv);
                self.constraint(
                    &name,
                    &node.name,
                    "bias-fits-int32",
                    format!(
                        "{widened} of {channels} output channels' weight scales raised so that their bias fits int32 on the input scale {s_in} (TFLite's AdjustWeightsForBiasScale)"
                    ),
                );
            }
        }
        let s_w: Vec<f32> = scales.iter().map(|&s| s as f32).collect();
        let bcodes = bias_codes(bias, s_in, &s_w, bias_ty);
        let bname = node
            .input(2)
            .map_or_else(|| format!("{}:bias", node.name), |b| self.name(b));
        let wt = self.push(ITensor {
            name: self.name(wv),
            shape,
            q: QParams {
                ty: wty,
                scale: s_w.clone(),
                zero_point: vec![0; channels],
                axis: Some(0),
            },
            data: Some(codes.into_iter().map(i64::from).collect()),
        });
        let bt = self.push(ITensor {
            name: bname,
            shape: vec![channels],
            q: QParams {
                ty: bias_ty,
                scale: s_w.iter().map(|&s| (f64::from(s_in) * f64::from(s)) as f32).collect(),
                zero_point: vec![0; channels],
                axis: Some(0),
            },
            data: Some(bcodes),
        });
        (wt, bt)
    }

    /// Emits an accumulating op (`kind` with its fused clamp) writing `y`, or, for a
    /// HardSwish or Sigmoid epilogue, writing a hidden pre-activation that the look-up op
    /// then reads.
    fn emit_with_epilogue(
        &mut self,
        node: &Node,
        kind: impl Fn(Act) -> OpKind,
        inputs: Vec<usize>,
        y: ValueId,
        epi: Epilogue,
    ) -> Result<(), String> {
        let (pre, lut) = match epi {
            Epilogue::Act(act) => {
                let yi = self.act(y)?;
                self.op(node, kind(act), inputs, vec![yi]);
                return Ok(());
            }
            Epilogue::HardSwish => {
                let pre = self.hard_swish_input(node, y)?;
                let lut = if self.program.tensors[pre].q.ty == IntType::I16 {
                    // TFLite's HARD_SWISH has no int16 kernel.
                    OpKind::Float { op: FloatOp::HardSwish }
                } else {
                    OpKind::HardSwish
                };
                (pre, lut)
            }
            Epilogue::Logistic => (self.logistic_input(node, y)?, OpKind::Logistic),
            Epilogue::HardSigmoid(..) => return Err("a HardSigmoid epilogue must be folded first".into()),
            Epilogue::Silu => {
                let pre = self.silu_input(node, y)?;
                self.op(node, kind(Act::None), inputs, vec![pre]);
                return self.silu_tail(node, pre, y);
            }
            Epilogue::LeakyRelu(alpha) => {
                let pre = self.leaky_input(node, y, alpha)?;
                self.op(node, kind(Act::None), inputs, vec![pre]);
                return self.leaky_tail(node, pre, y, alpha);
            }
        };
        self.op(node, kind(Act::None), inputs, vec![pre]);
        let yi = self.act(y)?;
        self.op(node, lut, vec![pre], vec![yi]);
        Ok(())
    }

    /// `x` copied into `out` through `steps` (each op into a hidden `<out>:<suffix>` tensor
    /// of the given shape, on `x`'s grid) and a final RESHAPE.
    fn copy_chain<const N: usize>(
        &mut self,
        node: &Node,
        x: ValueId,
        out: ValueId,
        steps: [(OpKind, &str, Vec<usize>); N],
    ) -> Result<(), String> {
        let mut cur = self.act(x)?;
        let y = self.act(out)?;
        let (q, name) = (self.program.tensors[cur].q.clone(), self.name(out));
        for (kind, suffix, shape) in steps {
            let t = self.push(ITensor {
                name: format!("{name}:{suffix}"),
                shape,
                q: q.clone(),
                data: None,
            });
            self.op(node, kind, vec![cur], vec![t]);
            cur = t;
        }
        self.op(node, OpKind::Reshape, vec![cur], vec![y]);
        Ok(())
    }

    /// `y = pre·sigmoid(pre)` as TFLite runs it: LOGISTIC into `<y>:sigmoid` on (1/256, −128),
    /// then MUL of the two.
    fn silu_tail(&mut self, node: &Node, pre: usize, y: ValueId) -> Result<(), String> {
        let shape = self.program.tensors[pre].shape.clone();
        let q = if self.program.tensors[pre].q.ty == IntType::I16 {
            QParams::per_tensor(IntType::I16, 1.0 / 32768.0, 0)
        } else {
            QParams::per_tensor(IntType::I8, 1.0 / 256.0, -128)
        };
        let sig = self.push(ITensor {
            name: format!("{}:sigmoid", self.name(y)),
            shape,
            q,
            data: None,
        });
        self.op(node, OpKind::Logistic, vec![pre], vec![sig]);
        let yi = self.act(y)?;
        self.op(node, OpKind::Mul { act: Act::None }, vec![pre, sig], vec![yi]);
        Ok(())
    }

    /// `y = max(pre, α·pre)` in integers: MUL of `pre` by α (a constant whose code is the
    /// type's largest, so α is exact to float rounding) onto `y`'s grid, `pre` requantized
    /// onto `y`'s grid where its own differs, and MAXIMUM of the two (TFLite's MAXIMUM
    /// compares codes on one grid).
    fn leaky_tail(&mut self, node: &Node, pre: usize, y: ValueId, alpha: f32) -> Result<(), String> {
        let yi = self.act(y)?;
        let yq = self.program.tensors[yi].q.clone();
        let (shape, pq) = (
            self.program.tensors[pre].shape.clone(),
            self.program.tensors[pre].q.clone(),
        );
        let top = if pq.ty == IntType::I16 { 32767 } else { 127 };
        let name = self.name(y);
        let a = self.push(ITensor {
            name: format!("{name}:alpha"),
            shape: vec![1],
            q: QParams::per_tensor(pq.ty, alpha / top as f32, 0),
            data: Some(vec![top]),
        });
        let neg = self.push(ITensor {
            name: format!("{name}:leaky_scaled"),
            shape: shape.clone(),
            q: yq.clone(),
            data: None,
        });
        self.op(node, OpKind::Mul { act: Act::None }, vec![pre, a], vec![neg]);
        let pos = if pq.same_grid(&yq) {
            pre
        } else {
            let r = self.push(ITensor {
                name: format!("{name}:leaky_input"),
                shape,
                q: yq,
                data: None,
            });
            self.op(node, OpKind::Requantize, vec![pre], vec![r]);
            r
        };
        self.op(node, OpKind::Extremum { which: Extreme::Max }, vec![pos, neg], vec![yi]);
        Ok(())
    }

    /// The hidden input of a LeakyRelu fused after an accumulator: the output range with
    /// its negative end divided by α (`[lo/α, hi]`), where every output comes from.
    fn leaky_input(&mut self, node: &Node, y: ValueId, alpha: f32) -> Result<usize, String> {
        let yq = self.act_params(y)?;
        let (lo, hi) = self.range_of(y)?;
        let pre_lo = if lo < 0.0 { lo / f64::from(alpha) } else { lo };
        let pq = QParams::activation(yq.format(), (pre_lo, hi)).ok_or("no grid")?;
        let detail = format!(
            "LeakyRelu(α={alpha}) input grid [{pre_lo:.4}, {hi:.4}] (scale {}) derived from the output range [{lo:.4}, {hi:.4}] (scale {}); the fused pre-activation had none",
            pq.s(),
            yq.s()
        );
        self.preact(node, y, pq, detail)
    }

    /// The hidden input of a SiLU fused after an accumulator: from the point left of SiLU's
    /// minimum where it reaches −half an output step (below it every output rounds the
    /// same) to `silu⁻¹(hi)`.
    fn silu_input(&mut self, node: &Node, y: ValueId) -> Result<usize, String> {
        let yq = self.act_params(y)?;
        let (lo, hi) = self.range_of(y)?;
        let pre_hi = silu_inverse_right(hi.max(0.0)).max(1e-3);
        let pre_lo = silu_inverse_left(-0.5 * f64::from(yq.s()));
        let pq = QParams::activation(yq.format(), (pre_lo, pre_hi)).ok_or("no grid")?;
        let detail = format!(
            "SiLU input grid [{pre_lo:.4}, {pre_hi:.4}] (scale {}) derived from the output range [{lo:.4}, {hi:.4}] (scale {}); the fused pre-activation had none",
            pq.s(),
            yq.s()
        );
        self.preact(node, y, pq, detail)
    }

    /// The hidden input of a HardSwish fused after an accumulator: `[-3, hs⁻¹(hi)]` for
    /// the output range `[lo, hi]` (clipping there changes no output).
    fn hard_swish_input(&mut self, node: &Node, y: ValueId) -> Result<usize, String> {
        let yq = self.act_params(y)?;
        let (lo, hi) = self.range_of(y)?;
        let pre_hi = hard_swish_inverse(hi);
        let pq = QParams::activation(yq.format(), (-3.0, pre_hi)).ok_or("no grid")?;
        let detail = format!(
            "HardSwish input grid [-3, {pre_hi:.4}] (scale {}) derived from the output range [{lo:.4}, {hi:.4}] (scale {}); the fused pre-activation had none",
            pq.s(),
            yq.s()
        );
        self.preact(node, y, pq, detail)
    }

    /// The hidden pre-activation tensor `<y>:preact` on `q`, listed as a constraint.
    fn preact(&mut self, node: &Node, y: ValueId, q: QParams, detail: String) -> Result<usize, String> {
        let name = format!("{}:preact", self.name(y));
        self.constraint(&name, &node.name, "lut-input-grid", detail);
        let shape = self.shape(y).map_err(|e| e.to_string())?;
        Ok(self.push(ITensor {
            name,
            shape,
            q,
            data: None,
        }))
    }

    /// The hidden input of a Sigmoid look-up fused after an accumulator: the logit of the
    /// output's range, clamped to half a step inside the fixed output grid. Calibration gives
    /// Sigmoid outputs the fixed grid's range ([`super::fixed_output_ranges`]), so the input
    /// grid covers every output code; plans calibrated before that keep their observed range.
    fn logistic_input(&mut self, node: &Node, y: ValueId) -> Result<usize, String> {
        let (lo, hi) = match self.q.grid(self.plan, y) {
            Some((_, r)) => r,
            None => (0.0, 1.0),
        };
        let logit = |p: f64| (p / (1.0 - p)).ln();
        let format = self.format_of(y);
        let eps = if format == ActFormat::Int16 {
            0.5 / 32768.0
        } else {
            0.5 / 256.0
        };
        let range = (logit(lo.clamp(eps, 1.0 - eps)), logit(hi.clamp(eps, 1.0 - eps)));
        let pq = QParams::activation(format, range).ok_or("no grid")?;
        let detail = format!(
            "Sigmoid input grid [{:.4}, {:.4}] (scale {}) derived from the output range [{lo:.4}, {hi:.4}]; the fused pre-activation had none",
            range.0,
            range.1,
            pq.s()
        );
        self.preact(node, y, pq, detail)
    }

    fn conv(&mut self, node: &Node, x: ValueId, y: ValueId, epi: Epilogue) -> Result<(), String> {
        let wv = node.input(1).ok_or("no weights")?;
        let (wshape, wdata) = self.constant_f32(wv).ok_or("weights are not constant")?;
        // A 1-D convolution runs as a 2-D one of height 1 (TFLite's converter writes it so):
        // RESHAPEs add and drop the axis, `<x>:as_2d` and `<y>:as_2d` between them.
        let one_d = wshape.len() == 3;
        if wshape.len() != 4 && !one_d {
            return Err("only 1-D and 2-D convolution have an integer form".into());
        }
        if one_d && !matches!(epi, Epilogue::Act(_)) {
            return Err(
                "a 1-D convolution with a fused activation other than the RELUs has no integer form yet".into(),
            );
        }
        if one_d && self.shape(x).map_err(|e| e.to_string())?.len() != 3 {
            return Err("a 1-D convolution's input is not of rank 3".into());
        }
        let wshape = if one_d {
            vec![wshape[0], wshape[1], 1, wshape[2]]
        } else {
            wshape
        };
        if node.attr_s("auto_pad").is_some_and(|a| a != "NOTSET") {
            return Err("auto_pad convolution: optimize the model first".into());
        }
        let mut bias = self.layer_bias(node, wshape[0])?;
        let groups = node.attr_i("group").unwrap_or(1).max(1) as usize;
        // TFLite's depthwise kernel reads int4 filters as int8 under int16 inputs.
        let int4_ok = groups == 1 || groups != self.shape(x).map_err(|e| e.to_string())?[1];
        let (w, wty) = self.layer_weights(node, &wdata, &wshape, 0, int4_ok);
        let mut scales = w.scales;
        let ty = self.ty_of(y)?;
        let xi = self.input(node, x, ty)?;
        let s_in = self.program.tensors[xi].q.s();
        let bias_ty = if ty == IntType::I16 { IntType::I64 } else { IntType::I32 };
        let epi = self.fold_hard_sigmoid(node, y, epi, &mut scales, &mut bias);
        let (wt, bt) = self.weight_and_bias(node, wv, wshape, (w.codes, wty), &scales, &bias, s_in, bias_ty);
        let (strides, dilations, pads) = if one_d {
            // Negative strides, dilations or pads are malformed: read as 1 and 0.
            let one = |name: &str, d: i64| {
                let v = node.attr_ints(name).and_then(|v| v.first().copied()).unwrap_or(d);
                usize::try_from(v).ok().filter(|&v| v > 0).unwrap_or(1)
            };
            let p = node.attr_ints("pads").unwrap_or(&[0, 0]);
            let pad = |k: usize| p.get(k).copied().and_then(|v| usize::try_from(v).ok()).unwrap_or(0);
            let (p0, p1) = (pad(0), pad(1));
            ([1, one("strides", 1)], [1, one("dilations", 1)], [0, p0, 0, p1])
        } else {
            (attr2(node, "strides", 1), attr2(node, "dilations", 1), pads4(node))
        };
        let kind = |act| OpKind::Conv {
            strides,
            dilations,
            pads,
            groups,
            act,
        };
        if !one_d {
            return self.emit_with_epilogue(node, kind, vec![xi, wt, bt], y, epi);
        }
        let Epilogue::Act(act) = epi else {
            return Err("a fused activation on a 1-D convolution".into());
        };
        let as_2d = |t: &ITensor| {
            let s = &t.shape;
            ITensor {
                name: format!("{}:as_2d", t.name),
                shape: [&s[..2], &[1], &s[2..]].concat(),
                q: t.q.clone(),
                data: None,
            }
        };
        let yi = self.act(y)?;
        let x4 = self.push(as_2d(&self.program.tensors[xi]));
        let y4 = self.push(as_2d(&self.program.tensors[yi]));
        self.op(node, OpKind::Reshape, vec![xi], vec![x4]);
        self.op(node, kind(act), vec![x4, wt, bt], vec![y4]);
        self.op(node, OpKind::Reshape, vec![y4], vec![yi]);
        Ok(())
    }

    fn transpose_conv(&mut self, node: &Node, x: ValueId, y: ValueId, epi: Epilogue) -> Result<(), String> {
        let wv = node.input(1).ok_or("no weights")?;
        let (ws, wdata) = self.constant_f32(wv).ok_or("weights are not constant")?;
        if ws.len() != 4 || node.attr_i("group").unwrap_or(1) != 1 {
            return Err("only ungrouped 2-D transposed convolution has an integer form".into());
        }
        if pads4(node).iter().any(|&p| p > 0)
            || node
                .attr_ints("output_padding")
                .is_some_and(|p| p.iter().any(|&v| v != 0))
            || node.attr_ints("dilations").is_some_and(|d| d.iter().any(|&v| v != 1))
            || node.attr_s("auto_pad").is_some_and(|a| a != "NOTSET")
        {
            return Err(
                "transposed convolution with padding, output padding or dilation has no integer form yet".into(),
            );
        }
        let (ci, co, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
        // ONNX [C_in, C_out, kH, kW] → [C_out, C_in, kH, kW].
        let mut t = vec![0f32; wdata.len()];
        for i in 0..ci {
            for o in 0..co {
                for k in 0..kh * kw {
                    t[(o * ci + i) * kh * kw + k] = wdata[(i * co + o) * kh * kw + k];
                }
            }
        }
        let wshape = vec![co, ci, kh, kw];
        let (w, wty) = self.layer_weights(node, &t, &wshape, 0, false);
        let mut scales = w.scales;
        let mut bias = self.layer_bias(node, co)?;
        let ty = self.ty_of(y)?;
        let xi = self.input(node, x, ty)?;
        let s_in = self.program.tensors[xi].q.s();
        let bias_ty = if ty == IntType::I16 { IntType::I64 } else { IntType::I32 };
        let epi = self.fold_hard_sigmoid(node, y, epi, &mut scales, &mut bias);
        let (wt, bt) = self.weight_and_bias(node, wv, wshape, (w.codes, wty), &scales, &bias, s_in, bias_ty);
        let strides = attr2(node, "strides", 1);
        self.emit_with_epilogue(
            node,
            |act| OpKind::TransposeConv { strides, act },
            vec![xi, wt, bt],
            y,
            epi,
        )
    }

    fn fully_connected(&mut self, node: &Node, x: ValueId, y: ValueId, epi: Epilogue) -> Result<(), String> {
        let wv = node.input(1).ok_or("no weights")?;
        let Some((wshape, wdata)) = self.constant_f32(wv) else {
            return Err("MatMul of two activations has no integer form yet".into());
        };
        if wshape.len() != 2 {
            return Err("only 2-D constant MatMul weights have an integer form".into());
        }
        // MatMul has no bias input: a zero bias (what FULLY_CONNECTED adds).
        let bias = vec![0.0; wshape[1]];
        self.fully_connected_kn(node, x, y, epi, &wdata, [wshape[0], wshape[1]], bias)
    }

    /// Gemm (`alpha·A·B' + beta·C`, B constant, C a constant bias over the outputs) as
    /// FULLY_CONNECTED.
    fn gemm(&mut self, node: &Node, x: ValueId, y: ValueId, epi: Epilogue) -> Result<(), String> {
        if node.attr_i("transA").unwrap_or(0) != 0 {
            return Err("Gemm with transA has no integer form yet".into());
        }
        let wv = node.input(1).ok_or("no weights")?;
        let Some((wshape, wdata)) = self.constant_f32(wv) else {
            return Err("Gemm of two activations has no integer form yet".into());
        };
        if wshape.len() != 2 {
            return Err("only 2-D constant Gemm weights have an integer form".into());
        }
        let alpha = node.attr_f("alpha").unwrap_or(1.0);
        let beta = node.attr_f("beta").unwrap_or(1.0);
        let trans_b = node.attr_i("transB").unwrap_or(0) != 0;
        let (k, n) = if trans_b {
            (wshape[1], wshape[0])
        } else {
            (wshape[0], wshape[1])
        };
        let mut kn = vec![0.0f32; k * n];
        for i in 0..k {
            for j in 0..n {
                kn[i * n + j] = alpha * if trans_b { wdata[j * k + i] } else { wdata[i * n + j] };
            }
        }
        let c = match node.input(2) {
            Some(c) => self.constant_f32(c).ok_or("Gemm's C is not constant")?.1,
            None => vec![0.0; n],
        };
        let mut bias: Vec<f32> = match c.len() {
            1 => vec![beta * c[0]; n],
            l if l == n => c.iter().map(|v| beta * v).collect(),
            l => {
                return Err(format!(
                    "Gemm's C has {l} values for {n} outputs: only a bias over the outputs has an integer form"
                ));
            }
        };
        // The plan's bias correction, as for a convolution's bias.
        if let Some(d) = self.plan.bias_correction.get(&node.name).filter(|d| d.len() == n) {
            for (b, d) in bias.iter_mut().zip(d) {
                *b -= d;
            }
        }
        self.fully_connected_kn(node, x, y, epi, &kn, [k, n], bias)
    }

    /// FULLY_CONNECTED from float weights laid out `[K, N]` and a float bias of N.
    #[expect(clippy::too_many_arguments, reason = "the two callers' weights, bias and epilogue")]
    fn fully_connected_kn(
        &mut self,
        node: &Node,
        x: ValueId,
        y: ValueId,
        epi: Epilogue,
        wdata: &[f32],
        [k, n]: [usize; 2],
        mut bias: Vec<f32>,
    ) -> Result<(), String> {
        let wv = node.input(1).ok_or("no weights")?;
        let (w, wty) = self.layer_weights(node, wdata, &[k, n], 1, true);
        // [K, N] → [N, K].
        let mut codes = vec![0; k * n];
        for i in 0..k {
            for j in 0..n {
                codes[j * k + i] = w.codes[i * n + j];
            }
        }
        let mut scales = w.scales;
        let ty = self.ty_of(y)?;
        let xi = self.input(node, x, ty)?;
        let s_in = self.program.tensors[xi].q.s();
        let bias_ty = if ty == IntType::I16 { IntType::I64 } else { IntType::I32 };
        let epi = self.fold_hard_sigmoid(node, y, epi, &mut scales, &mut bias);
        let (wt, bt) = self.weight_and_bias(node, wv, vec![n, k], (codes, wty), &scales, &bias, s_in, bias_ty);
        self.emit_with_epilogue(node, |act| OpKind::FullyConnected { act }, vec![xi, wt, bt], y, epi)
    }
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// Where SiLU has its minimum (≈ −1.2785).
const SILU_ARGMIN: f64 = -1.278_464_542_761_074;

/// The x ≥ SILU_ARGMIN with `silu(x) = y`.
fn silu_inverse_right(y: f64) -> f64 {
    let (mut a, mut b) = (SILU_ARGMIN, y.max(1.0) + 1.0);
    for _ in 0..200 {
        let m = f64::midpoint(a, b);
        if silu(m) < y { a = m } else { b = m }
    }
    b
}

/// The x ≤ SILU_ARGMIN with `silu(x) = y` (for y between SiLU's minimum and 0), at most −40.
fn silu_inverse_left(y: f64) -> f64 {
    let (mut a, mut b) = (-40.0, SILU_ARGMIN);
    if silu(a) <= y {
        return a;
    }
    for _ in 0..200 {
        let m = f64::midpoint(a, b);
        if silu(m) > y { a = m } else { b = m }
    }
    a
}

/// An activation as a convolution's epilogue.
fn activation_epilogue(op: &str, params: &[f32]) -> Result<Epilogue, String> {
    Ok(match op {
        "Relu" => Epilogue::Act(Act::Relu),
        "HardSwish" => Epilogue::HardSwish,
        "Sigmoid" => Epilogue::Logistic,
        "Silu" => Epilogue::Silu,
        "LeakyRelu" => match params.first().copied().unwrap_or(0.01) {
            a if a > 0.0 && a < 1.0 => Epilogue::LeakyRelu(a),
            a => {
                return Err(format!(
                    "a fused LeakyRelu with alpha {a} (outside (0, 1)) has no integer form yet"
                ));
            }
        },
        "HardSigmoid" => Epilogue::HardSigmoid(
            params.first().copied().unwrap_or(0.2),
            params.get(1).copied().unwrap_or(0.5),
        ),
        "Clip" => match (params.first().copied(), params.get(1).copied()) {
            (Some(lo), Some(hi)) if lo == 0.0 && hi == 6.0 => Epilogue::Act(Act::Relu6),
            (Some(lo), Some(hi)) if lo == -1.0 && hi == 1.0 => Epilogue::Act(Act::ReluN1To1),
            (Some(lo), Some(hi)) if lo == 0.0 && hi >= f32::MAX => Epilogue::Act(Act::Relu),
            _ => return Err("Clip with bounds other than [0, 6], [-1, 1] or [0, ∞) has no integer form yet".into()),
        },
        a => return Err(format!("a fused {a} has no integer form yet")),
    })
}

/// A fused Clip whose bounds land on the output grid `q` where a fused RELU's (or no
/// activation's) do: the same codes, so that clamp (`Clip(x, 1e-10, ∞)` before a Log is a
/// RELU on any grid whose step is above 2e-10).
fn clip_as_act(lo: f32, hi: f32, q: &QParams) -> Option<Act> {
    let (qmin, qmax) = q.ty.range();
    let code = |b: f32| {
        if b <= f32::MIN {
            qmin
        } else if b >= f32::MAX {
            qmax
        } else {
            quantize_code(b, q)
        }
    };
    let (l, h) = (code(lo), code(hi));
    if h < qmax {
        return None;
    }
    if l <= qmin {
        Some(Act::None)
    } else if l == q.zp().clamp(qmin, qmax) {
        Some(Act::Relu)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Attr;
    use crate::progress::Silent;
    use crate::quant::Calibration;
    use crate::quant::LayerPrecision;
    use crate::quant::data::{Preprocess, Source};
    use crate::quant::equalize::tests::{sequential, uniform, weights};

    /// `m` calibrated `w8a8` with `method` on `n` synthetic samples.
    fn w8a8_on_synthetic(q: &Quantizer, m: &Model, n: usize, method: Calibration) -> QuantPlan {
        let src = Source::Synthetic(n);
        q.calibrate(&mut src.samples(m, &Preprocess::default()), n, "w8a8", method, &Silent)
            .expect("calibrates")
    }

    /// Ops that once ran in the float fallback have integer forms: a standalone
    /// BatchNormalization (a 1×1 depthwise conv), Pow by 2 (a MUL of the input by itself),
    /// a Clip with other bounds (MAXIMUM and MINIMUM on the input's grid), a Softmax over
    /// the channel axis (between two TRANSPOSEs) and a 1-D Conv with a Relu (a 2-D conv of
    /// height 1 between RESHAPEs). No node falls back, and the integer reference stays
    /// close to FP32 on samples it was not calibrated on.
    #[test]
    fn ops_once_in_the_float_fallback_lower_to_integers() {
        let c = |v: Vec<f32>| Tensor::from_f32(&[v.len()], v).expect("shape");
        let mut rnd = uniform(3);
        let image = sequential(
            &[1, 3, 6, 6],
            vec![
                (
                    "BatchNormalization",
                    vec![
                        c(vec![1.5, -0.5, 2.0]),
                        c(vec![0.1, 0.2, -0.3]),
                        c(vec![0.0, 0.5, -0.2]),
                        c(vec![1.0, 0.25, 4.0]),
                    ],
                    vec![("epsilon", Attr::Float(1e-3))],
                ),
                ("Pow", vec![c(vec![2.0])], vec![]),
                ("Clip", vec![c(vec![0.05]), c(vec![2.5])], vec![]),
                ("Softmax", vec![], vec![("axis", Attr::Int(1))]),
            ],
        );
        let w = weights(&mut rnd, &[6, 4, 5], &|_| 1.0);
        let signal = sequential(
            &[1, 4, 32],
            vec![
                (
                    "Conv",
                    vec![w, c(vec![0.1, -0.1, 0.2, 0.0, 0.3, -0.2])],
                    vec![("strides", Attr::Ints(vec![2])), ("pads", Attr::Ints(vec![1, 2]))],
                ),
                ("Relu", vec![], vec![]),
            ],
        );
        let cube = sequential(&[1, 16], vec![("Pow", vec![c(vec![3.0])], vec![])]);
        for (m, want) in [
            (&cube, vec!["Mul"]),
            (
                &image,
                vec!["Conv", "Mul", "Maximum", "Minimum", "Transpose", "Softmax"],
            ),
            (&signal, vec!["Reshape", "Conv"]),
        ] {
            let ops: Vec<&str> = m.graph.nodes.iter().map(|n| n.op.as_str()).collect();
            let q = Quantizer::new(m, 1).expect("quantizer");
            let plan = w8a8_on_synthetic(&q, m, 4, Calibration::MinMax);
            let p = legalize(m, &plan, &HashMap::new()).expect("legalizes");
            assert!(p.fallbacks().is_empty(), "{ops:?}: {:?}", p.fallbacks());
            let kinds: Vec<&str> = p.ops.iter().map(|o| o.kind.name()).collect();
            for k in want {
                assert!(kinds.contains(&k), "{ops:?}: no {k} in {kinds:?}");
            }
            // Held out: synthetic samples 4 to 7, not the 4 calibrated on.
            let pre = Preprocess::default();
            let mut held = Source::SyntheticFrom(4, 4).samples(m, &pre);
            let r = q.simulate(&plan, &mut held, 4, &Silent).expect("simulates");
            let db = r.outputs[0].integer_sqnr_db.expect("an integer reference");
            let sim = r.outputs[0].sqnr_db.expect("a simulated SQNR");
            // The cube's int8 output grid bounds both (values crowd near 0): there the
            // integer form must stay within 1 dB of the fake-quant simulation.
            assert!(
                db > 25.0 || (db > 20.0 && db > sim - 1.0),
                "{ops:?}: integer-reference output SQNR {db:.2} dB (simulated {sim:.2})"
            );
        }
    }

    /// Gather as TFLite's GATHER: over an activation with constant int64 indices (one
    /// negative, made non-negative at legalization), its output on the input's grid and
    /// each output code the input code it picks.
    #[test]
    fn gather_is_an_integer_gather_on_the_input_grid() {
        use crate::ir::{Constant, DType, Dim, Value};
        let build = |idx: Vec<i64>| -> Model {
            let mut m = sequential(&[1, 6, 4], vec![("Relu", vec![], vec![])]);
            let g = &mut m.graph;
            let mut c = Value::new("idx");
            c.dtype = Some(DType::I64);
            c.shape = Some(vec![Dim::Fixed(2), Dim::Fixed(2)]);
            let t = Tensor::I64(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[2, 2]), idx).expect("shape"));
            c.constant = Some(Constant::from_tensor(&t));
            g.values.push(c);
            let ci = g.values.len() - 1;
            g.values.push(Value::new("picked"));
            let y = g.values.len() - 1;
            g.values[y].producer = Some(g.nodes.len());
            let x = g.outputs[0];
            g.nodes.push(Node {
                name: "pick".into(),
                op: "Gather".into(),
                domain: String::new(),
                inputs: vec![Some(x), Some(ci)],
                outputs: vec![Some(y)],
                attrs: [("axis".to_owned(), Attr::Int(1))].into_iter().collect(),
                origin: vec![],
            });
            g.outputs = vec![y];
            crate::import::shapes::infer(&mut m);
            m
        };
        let m = build(vec![5, 0, -1, 2]);
        let q = Quantizer::new(&m, 1).expect("quantizer");
        let plan = w8a8_on_synthetic(&q, &m, 4, Calibration::MinMax);
        let p = legalize(&m, &plan, &HashMap::new()).expect("legalizes");
        assert!(p.fallbacks().is_empty(), "{:?}", p.fallbacks());
        let op = p.ops.iter().find(|o| o.node == "pick").expect("the gather");
        assert_eq!(op.kind, OpKind::Gather { axis: 1 });
        let (xt, it, yt) = (op.inputs[0], op.inputs[1], op.outputs[0]);
        assert_eq!(p.tensors[it].data.as_deref(), Some(&[5, 0, 5, 2][..]));
        assert_eq!(p.tensors[yt].shape, vec![1, 2, 2, 4]);
        assert!(p.tensors[yt].q.same_grid(&p.tensors[xt].q));
        let x: Vec<f32> = (0..24).map(|i| (i as f32 - 9.5) / 4.0).collect();
        let run = crate::sim::integer::run(&p, vec![crate::sim::integer::Input::Float(x)]).expect("runs");
        let (xc, yc) = (run.values[xt].as_ref().expect("x"), run.values[yt].as_ref().expect("y"));
        for (k, row) in [5usize, 0, 5, 2].into_iter().enumerate() {
            assert_eq!(yc[k * 4..k * 4 + 4], xc[row * 4..row * 4 + 4], "row {k}");
        }
    }

    /// ArgMax as TFLite's ARG_MAX on the input's codes (the first of equal codes), its
    /// `keepdims` a RESHAPE after it; ArgMin likewise without `keepdims`.
    #[test]
    fn arg_max_is_an_integer_arg_max_of_the_input_codes() {
        for (op, keep, which) in [("ArgMax", 1, Extreme::Max), ("ArgMin", 0, Extreme::Min)] {
            let m = sequential(
                &[1, 5, 7],
                vec![(op, vec![], vec![("axis", Attr::Int(1)), ("keepdims", Attr::Int(keep))])],
            );
            let q = Quantizer::new(&m, 1).expect("quantizer");
            let plan = w8a8_on_synthetic(&q, &m, 4, Calibration::MinMax);
            let p = legalize(&m, &plan, &HashMap::new()).expect("legalizes");
            assert!(p.fallbacks().is_empty(), "{op}: {:?}", p.fallbacks());
            let arg = p
                .ops
                .iter()
                .find(|o| matches!(o.kind, OpKind::ArgExtreme { .. }))
                .expect("an arg op");
            assert_eq!(arg.kind, OpKind::ArgExtreme { which, axis: 1 });
            let y = p.outputs[0];
            assert_eq!(p.tensors[y].shape, if keep == 1 { vec![1, 1, 7] } else { vec![1, 7] });
            assert_eq!(p.tensors[y].q.ty, IntType::Index);
            let x: Vec<f32> = (0..35).map(|i| ((i * 17 % 35) as f32 - 17.0) / 20.0).collect();
            let run = crate::sim::integer::run(&p, vec![crate::sim::integer::Input::Float(x)]).expect("runs");
            let xc = run.values[arg.inputs[0]].as_ref().expect("input codes");
            let got = run.values[y].as_ref().expect("indices");
            for col in 0..7 {
                let column: Vec<i32> = (0..5).map(|r| xc[r * 7 + col]).collect();
                let best = match which {
                    Extreme::Max => *column.iter().max().expect("rows"),
                    Extreme::Min => *column.iter().min().expect("rows"),
                };
                let first = column.iter().position(|&c| c == best).expect("found") as i32;
                assert_eq!(got[col], first, "{op}, column {col}: codes {column:?}");
            }
        }
    }

    /// A 1×1 conv whose third output channel is dead (weights of 1e-9, which the weight
    /// grid floors at 1e-5 of the largest channel's scale) but biased by 8, under a Relu:
    /// on that channel's weight scale the bias is beyond int32. The program widens the
    /// channel's weight scale (saying so) and the channel's output holds; saturated, it
    /// would read about 5 where FP32 has 8.
    #[test]
    fn a_bias_beyond_int32_widens_its_channels_weight_scale() {
        let mut rnd = uniform(7);
        let w = weights(&mut rnd, &[3, 4, 1, 1], &|o| if o == 2 { 1e-9 } else { 1.0 });
        let b = Tensor::from_f32(&[3], vec![0.1, -0.2, 8.0]).expect("shape");
        let m = sequential(
            &[1, 4, 4, 4],
            vec![("Conv", vec![w, b], vec![]), ("Relu", vec![], vec![])],
        );
        assert_eq!(m.graph.nodes.len(), 1, "one fused conv: {:?}", m.graph.nodes);
        let q = Quantizer::new(&m, 1).expect("quantizer");
        let plan = w8a8_on_synthetic(&q, &m, 3, Calibration::MinMax);
        let p = legalize(&m, &plan, &HashMap::new()).expect("legalizes");
        let c = p
            .constraints
            .iter()
            .find(|c| c.rule == "bias-fits-int32")
            .unwrap_or_else(|| panic!("no widened scale: {:?}", p.constraints));
        assert!(c.detail.starts_with("1 of 3 "), "{}", c.detail);
        let bias = p.tensors.iter().find(|t| t.q.ty == IntType::I32).expect("a bias");
        assert!(
            bias.data
                .as_ref()
                .expect("codes")
                .iter()
                .all(|&x| x.abs() < i64::from(i32::MAX))
        );
        let r = q
            .simulate(
                &plan,
                &mut Source::Synthetic(3).samples(&m, &Preprocess::default()),
                3,
                &Silent,
            )
            .expect("simulates");
        let db = r.outputs[0].integer_sqnr_db.expect("an integer reference");
        assert!(db > 30.0, "integer-reference output SQNR {db:.2} dB");
    }

    /// A 1×1 conv (weight 1, bias −8) under a Sigmoid, calibrated on standard-normal inputs,
    /// sees outputs of at most sigmoid(−5) ≈ 0.007: a detector's objectness calibrated on
    /// images without objects. Calibration still gives the output LiteRT's fixed grid
    /// (scale 1/256, zero point −128; int16 1/32768), so the simulator and the integer
    /// program share it, and the look-up's input grid covers every output code: an input
    /// of 10 (pre-activation 2; the input grid widened to reach it) reads sigmoid(2) ≈ 0.88,
    /// not the clipped 0.007.
    #[test]
    fn a_sigmoid_output_takes_the_fixed_grid_and_its_input_grid_covers_it() {
        let w = Tensor::from_f32(&[1, 1, 1, 1], vec![1.0]).expect("shape");
        let b = Tensor::from_f32(&[1], vec![-8.0]).expect("shape");
        let m = sequential(
            &[1, 1, 4, 4],
            vec![("Conv", vec![w, b], vec![]), ("Sigmoid", vec![], vec![])],
        );
        let q = Quantizer::new(&m, 1).expect("quantizer");
        let plan = w8a8_on_synthetic(&q, &m, 3, Calibration::Mse);
        let out = m.graph.outputs[0];
        let r = plan.ranges[&m.graph.values[out].name];
        let g8 = QParams::activation(ActFormat::Int8, r.int8).expect("grid");
        let g16 = QParams::activation(ActFormat::Int16, r.int16).expect("grid");
        assert_eq!((g8.s(), g8.zp()), (1.0 / 256.0, -128));
        assert_eq!((g16.s(), g16.zp()), (1.0 / 32768.0, 0));
        // The input's grid widened to reach 10 (calibration saw standard-normal values).
        let mut plan = plan;
        plan.ranges.get_mut("x").expect("input range").int8 = (-12.0, 12.0);
        let p = legalize(&m, &plan, &HashMap::new()).expect("legalizes");
        assert!(p.tensors[p.outputs[0]].q.same_grid(&g8));
        let run = crate::sim::integer::run(&p, vec![crate::sim::integer::Input::Float(vec![10.0; 16])]).expect("runs");
        let codes = run.values[p.outputs[0]].as_ref().expect("output codes");
        for &c in codes {
            let y = p.tensors[p.outputs[0]].q.real(c);
            assert!((y - 0.8808).abs() < 3.0 / 256.0, "sigmoid(2) read as {y}");
        }
    }

    /// Softmax, Exp and ReduceMean kept in float (`float` precision) between an int16 conv
    /// and an int16 Mul: float32 ops from one to the next (no grid between them), the mean
    /// quantized only where the Mul reads it. The float tensors hold the float32 functions
    /// of the dequantized conv output, and on held-out samples Exp's output is closer to FP32
    /// than the program with those layers in int8 has it.
    #[test]
    fn layers_kept_in_float_run_in_float32_between_integer_layers() {
        let mut rnd = uniform(5);
        let w = weights(&mut rnd, &[3, 4, 1, 1], &|_| 2.0);
        let b = Tensor::from_f32(&[3], vec![0.1, -0.2, 0.3]).expect("shape");
        let two = Tensor::from_f32(&[1], vec![2.0]).expect("shape");
        let m = sequential(
            &[1, 4, 4, 4],
            vec![
                ("Conv", vec![w, b], vec![]),
                ("Softmax", vec![], vec![("axis", Attr::Int(-1))]),
                ("Exp", vec![], vec![]),
                (
                    "ReduceMean",
                    vec![],
                    vec![("axes", Attr::Ints(vec![3])), ("keepdims", Attr::Int(1))],
                ),
                ("Mul", vec![two], vec![]),
            ],
        );
        let q = Quantizer::new(&m, 1).expect("quantizer");
        let mut int8 = w8a8_on_synthetic(&q, &m, 4, Calibration::MinMax);
        let node = |op: &str| m.graph.nodes.iter().find(|n| n.op == op).expect(op).name.clone();
        // The conv and the Mul in int16 in both plans, so that their grids do not hide the rest.
        for op in ["Conv", "Mul"] {
            int8.layers.insert(node(op), LayerPrecision::INT16);
        }
        let mut plan = int8.clone();
        for op in ["Softmax", "Exp", "ReduceMean"] {
            plan.layers.insert(node(op), LayerPrecision::FLOAT);
        }
        let p = legalize(&m, &plan, &HashMap::new()).expect("legalizes");
        let kinds: Vec<&OpKind> = p.ops.iter().map(|o| &o.kind).collect();
        assert!(kinds.contains(&&OpKind::Float { op: FloatOp::Softmax }), "{kinds:?}");
        assert!(kinds.contains(&&OpKind::Float {
            op: FloatOp::Unary { f: UnaryFn::Exp }
        }));
        assert!(kinds.contains(&&OpKind::Float {
            op: FloatOp::Reduce {
                f: ReduceFn::Mean,
                axes: vec![3]
            }
        }));
        let out_of = |op: &str| {
            let o = p.ops.iter().find(|o| o.node == node(op)).expect(op);
            o.outputs[0]
        };
        let (soft, exp, mean) = (out_of("Softmax"), out_of("Exp"), out_of("ReduceMean"));
        assert_eq!(p.tensors[soft].q.ty, IntType::F32);
        assert_eq!(p.tensors[exp].q.ty, IntType::F32);
        assert_eq!(p.tensors[mean].q.ty, IntType::I16, "an int16 layer reads the mean");
        assert!(p.constraints.iter().any(|c| c.rule == "float-layer-output"));

        let samples: Vec<_> = Source::Synthetic(6)
            .samples(&m, &Preprocess::default())
            .skip(4)
            .map(|s| s.expect("sample").1)
            .collect();
        // The fake-quant simulation quantizes the mean where the int16 Mul reads it, as the
        // integer program does (on the simulation's 16-bit grid of the same range).
        let mean_name = {
            let n = m.graph.nodes.iter().find(|n| n.op == "ReduceMean").expect("mean");
            m.graph.values[n.output(0).expect("output")].name.clone()
        };
        let range = plan.hidden.get(&mean_name).expect("the mean's range").int16;
        let grid = crate::quant::scheme::Affine::from_range(range.0, range.1, 65535.0);
        for s in &samples {
            let sim = q.values(Some(&plan), s).expect("simulates");
            for &v in &sim[&mean_name] {
                assert_eq!(grid.qdq(v), v, "mean {v} is off its 16-bit grid");
            }
        }
        let int8_program = legalize(&m, &int8, &HashMap::new()).expect("legalizes");
        let sqnr = |p: &Program| {
            let (mut sig, mut err) = (0f64, 0f64);
            for s in &samples {
                let fp = q.values(None, s).expect("runs");
                let x = s["x"].to_f32().iter().copied().collect();
                let run = crate::sim::integer::run(p, vec![crate::sim::integer::Input::Float(x)]).expect("runs");
                // The error at Exp's output: the conv's alone where the layers are float.
                let name = &m.graph.values[m
                    .graph
                    .nodes
                    .iter()
                    .find(|n| n.op == "Exp")
                    .and_then(|n| n.output(0))
                    .expect("exp")]
                .name;
                let k = p.tensor_id(name).expect("exp tensor");
                let t = &p.tensors[k];
                let codes = run.values[k].as_ref().expect("codes");
                for (&c, &r) in codes.iter().zip(&fp[name]) {
                    sig += f64::from(r).powi(2);
                    err += (f64::from(t.q.real(c)) - f64::from(r)).powi(2);
                }
                if p.tensors.len() > soft && p.tensors[soft].q.ty == IntType::F32 {
                    // The float tensors are the float32 functions of the conv's codes.
                    let conv = p.ops[p.ops.iter().position(|o| o.outputs[0] == soft).expect("softmax op")].inputs[0];
                    let cq = &p.tensors[conv].q;
                    let xs: Vec<f64> = run.values[conv]
                        .as_ref()
                        .expect("conv codes")
                        .iter()
                        .map(|&c| f64::from(cq.real(c)))
                        .collect();
                    let ys = run.values[exp].as_ref().expect("exp values");
                    for (row, yrow) in xs.chunks(4).zip(ys.chunks(4)) {
                        let max = row.iter().copied().fold(f64::MIN, f64::max);
                        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
                        for (v, &y) in row.iter().zip(yrow) {
                            let want = ((v - max).exp() / sum).exp();
                            let got = f64::from(f32::from_bits(y as u32));
                            assert!((got - want).abs() < 1e-6 * want, "exp(softmax) {got} for {want}");
                        }
                    }
                }
            }
            10.0 * (sig / err).log10()
        };
        let (float, int) = (sqnr(&p), sqnr(&int8_program));
        eprintln!("Exp's output against FP32 on held-out samples: float layers {float:.2} dB, int8 layers {int:.2} dB");
        assert!(float > int + 3.0, "float layers {float:.2} dB, all int8 {int:.2} dB");
    }
}
