//! Quantization: calibration statistics, quantization plans (per-layer precision), fake-quant
//! simulation on the FP32 executor's kernels, and the per-tensor error report.
//!
//! The plan is made on the optimized graph (BatchNorm folded, activations fused into their
//! producer), so a Conv+Relu is one layer with one output quantizer and its error is
//! attributed to the op that runs.

pub mod absorb;
pub mod amp;
pub mod analysis;
pub mod data;
pub mod equalize;
pub mod gptq;
pub mod integer_check;
pub mod legalize;
pub mod live;
pub mod observer;
pub mod params;
pub mod recipe;
pub mod refine;
pub mod scheme;
pub mod seqmse;
pub mod smooth;

use crate::ir::{DType, Graph, Model, Node, NodeId, Tensor, Val, ValueId};
use crate::progress::Progress;
use crate::sim::OpCtx;
use observer::{Calibration, Observer};
use scheme::{ActFormat, Affine, ErrorStats, WeightFormat, qdq_activation, qdq_weight};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Ops whose output keeps its input's quantization (they move or select values, never
/// make new ones): no quantizer of their own.
const PASS_THROUGH: &[&str] = &[
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Identity",
    "Slice",
    "Gather",
    "Split",
    "MaxPool",
    "GlobalMaxPool",
    "DepthToSpace",
    "SpaceToDepth",
    "Dropout",
    "Expand",
    "Tile",
];

/// Activations a target runs fused into the op before them (clamps and look-up tables).
const FUSED_ACTIVATIONS: &[&str] = &[
    "Relu",
    "Clip",
    "Sigmoid",
    "Tanh",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
];

/// The data input of a node that a target runs as an epilogue of its producer: an
/// activation, or Add/Sub/Mul/Div with a scalar constant.
fn epilogue_input(g: &Graph, node: &Node) -> Option<usize> {
    if FUSED_ACTIVATIONS.contains(&node.op.as_str()) {
        return Some(0);
    }
    if !matches!(node.op.as_str(), "Add" | "Sub" | "Mul" | "Div") || node.inputs.len() != 2 {
        return None;
    }
    let scalar = |k: usize| {
        node.input(k)
            .and_then(|v| g.values[v].constant.as_ref())
            .is_some_and(|c| c.shape.iter().product::<usize>() == 1)
    };
    match (scalar(0), scalar(1)) {
        (false, true) => Some(0),
        // c / x is not affine in x.
        (true, false) if node.op != "Div" => Some(1),
        _ => None,
    }
}

/// A layer's precision as the user picks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LayerPrecision {
    pub weights: WeightFormat,
    pub activations: ActFormat,
}

impl LayerPrecision {
    pub const INT8: Self = Self {
        weights: WeightFormat::Int8,
        activations: ActFormat::Int8,
    };
    /// 8-bit weights, 16-bit activations.
    pub const INT16: Self = Self {
        weights: WeightFormat::Int8,
        activations: ActFormat::Int16,
    };
    pub const FP16: Self = Self {
        weights: WeightFormat::Fp16,
        activations: ActFormat::Fp16,
    };
    pub const INT4: Self = Self {
        weights: WeightFormat::Int4 { group: 0 },
        activations: ActFormat::Int16,
    };
    pub const FLOAT: Self = Self {
        weights: WeightFormat::Float,
        activations: ActFormat::Float,
    };

    /// The word `parse` reads back (`None` for a combination no word names).
    pub fn keyword(self) -> Option<&'static str> {
        ["int8", "int16", "fp16", "int4", "float"]
            .into_iter()
            .find(|k| Self::parse(k).is_ok_and(|p| p == self))
    }

    /// `int8`, `int16`, `fp16`, `int4`, `float`.
    pub fn parse(s: &str) -> Result<Self, SpecError> {
        Ok(match s {
            "int8" => Self::INT8,
            "int16" => Self::INT16,
            "fp16" => Self::FP16,
            "int4" => Self::INT4,
            "float" => Self::FLOAT,
            _ => return Err(SpecError::Precision(s.to_owned())),
        })
    }
}

/// A precision, preset or calibration method named by the user that is not one of ours.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("unknown precision `{0}` (int8, int16, fp16, int4, float)")]
    Precision(String),
    #[error("unknown preset `{0}` (w8a8, w8a16, w4a16, fp16)")]
    Preset(String),
    #[error("unknown calibration method `{0}` (minmax, moving-average, percentile[-P], mse, entropy)")]
    Calibration(String),
}

/// The built-in presets, in the order the studio offers them.
pub const PRESETS: [&str; 4] = ["w8a8", "w8a16", "w4a16", "fp16"];

/// Built-in recipes: the precision of every layer and the calibration method.
pub fn preset(name: &str) -> Result<(LayerPrecision, Calibration), SpecError> {
    Ok(match name {
        "w8a8" => (LayerPrecision::INT8, Calibration::Mse),
        "w8a16" => (LayerPrecision::INT16, Calibration::Mse),
        "w4a16" => (LayerPrecision::INT4, Calibration::Mse),
        "fp16" => (LayerPrecision::FP16, Calibration::MinMax),
        _ => return Err(SpecError::Preset(name.to_owned())),
    })
}

/// Clipping ranges of one activation for each integer width.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ranges {
    pub int8: (f64, f64),
    pub int16: (f64, f64),
}

impl Ranges {
    pub fn for_format(&self, f: ActFormat) -> (f64, f64) {
        if f == ActFormat::Int16 { self.int16 } else { self.int8 }
    }
}

/// The bounded function a node's output ends in (`Sigmoid`, `Softmax` or `Tanh`, alone or
/// fused after a convolution or Gemm), whose output grid the integer scheme fixes.
pub fn bounded_output(node: &Node) -> Option<&str> {
    let op = match (node.op.as_str(), node.attr_s("activation")) {
        ("FusedConv" | "FusedGemm", Some(a)) => a,
        (op, _) => op,
    };
    matches!(op, "Sigmoid" | "Softmax" | "Tanh").then_some(op)
}

/// The ranges of the grids LiteRT fixes for a bounded function's output (`LOGISTIC` and
/// `SOFTMAX`: scale 1/256, zero point −128; `TANH`: 1/128, 0; int16: 1/32768, 0), as
/// calibration ranges that give exactly those grids. Calibration takes them instead of the
/// observed range: the integer program has no other grid for these outputs, and a range
/// observed on samples that never reach the function's upper end (a detector's objectness
/// calibrated on photos without objects) would derive a clipped input grid for its look-up.
pub fn fixed_output_ranges(op: &str) -> Option<Ranges> {
    let top16 = 32767.0 / 32768.0;
    match op {
        "Sigmoid" | "Softmax" => Some(Ranges {
            int8: (0.0, 255.0 / 256.0),
            int16: (0.0, top16),
        }),
        "Tanh" => Some(Ranges {
            int8: (-1.0, 127.0 / 128.0),
            int16: (-top16, top16),
        }),
        _ => None,
    }
}

/// A quantization plan: what `npu-studio quantize` writes (RON) and `analyze` reads.
/// Names refer to the optimized graph, which the passes rebuild identically from the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QuantPlan {
    pub version: u32,
    pub preset: String,
    pub calibration: Calibration,
    pub calibration_samples: usize,
    /// Graph inputs' format.
    pub inputs: ActFormat,
    /// The preset's precision, for layers not listed in `layers`.
    pub default: LayerPrecision,
    /// Per-node precision (by node name), where it differs from `default`.
    pub layers: BTreeMap<String, LayerPrecision>,
    /// Clipping range of every quantized activation, by value name.
    pub ranges: BTreeMap<String, Ranges>,
    /// Per-channel shift subtracted from a layer's bias (by node name): the mean error its
    /// quantized form makes on the calibration data (empirical bias correction).
    #[serde(default)]
    pub bias_correction: BTreeMap<String, Vec<f32>>,
    /// The optimized graph's identity ([`params::graph_id`]); a plan used on another graph
    /// is an error. Absent in plans written before it was recorded.
    #[serde(default)]
    pub graph: Option<String>,
    /// The input shapes of the first calibration sample (what an export fixes dynamic
    /// dims to unless told otherwise).
    #[serde(default)]
    pub input_shapes: BTreeMap<String, Vec<usize>>,
    /// The first calibration sample's shapes of the values shape inference cannot work
    /// out from the input shapes (the outputs of control flow and what they feed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub value_shapes: BTreeMap<String, Vec<usize>>,
    /// Calibrated ranges of the tensors the simulator fuses into their consumer (an
    /// element-wise chain before a look-up table): no quantizer in the simulation, but an
    /// integer device needs a grid there, and legalization takes it from here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hidden: BTreeMap<String, Ranges>,
    /// Cross-layer equalization scales by the first layer of each pair
    /// ([`equalize::apply`] makes the weights the ranges were calibrated on).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub equalization: equalize::Scales,
    /// Bias-absorption shifts by the first layer of each conv pair ([`absorb::apply`]
    /// makes the biases the ranges were calibrated on, after the equalization).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub absorption: absorb::Shifts,
    /// Per-output-channel factors on the weight ranges (by node name; 1: the channel's
    /// max-abs), chosen by [`seqmse`] to minimize each layer's output error. Every weight
    /// grid (simulated, integer, exported) is derived from the clipped ranges.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weight_clip: BTreeMap<String, Vec<f32>>,
    /// SmoothQuant scales by LayerNorm name ([`smooth::apply`] makes the weights the ranges
    /// were calibrated on, after the equalization).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub smoothing: smooth::Scales,
    /// Weight codes chosen by [`gptq`] (by node name; one hex digit per 4-bit weight, two per
    /// 8-bit one, in the weight tensor's order), on the layer's per-channel grid. Every
    /// weight grid (simulated, integer, exported) takes them where the layer's weights have
    /// that width.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gptq: BTreeMap<String, String>,
    /// For the analysis' what-if plans only (never written): a `float` layer's output stays
    /// unquantized even where an integer layer reads it, which the integer program cannot do
    /// ([`Quantizer::sim_grid`]), so that a sweep measures one tensor's quantization alone.
    #[serde(skip)]
    pub exact_float: bool,
}

impl QuantPlan {
    pub fn precision(&self, node: &Node) -> LayerPrecision {
        self.layers.get(&node.name).copied().unwrap_or(self.default)
    }

    /// The layer's per-channel weight-range factors (empty: none).
    pub fn clip(&self, node: &Node) -> &[f32] {
        self.weight_clip.get(&node.name).map_or(&[], Vec::as_slice)
    }
}

/// The median of the layer gains (`after − before`, dB) of `layers`, 0 without any.
pub(crate) fn median_gain(layers: impl Iterator<Item = (Option<f64>, Option<f64>)>) -> f64 {
    let mut gains: Vec<f64> = layers.filter_map(|(b, a)| Some(a? - b?)).collect();
    gains.sort_by(f64::total_cmp);
    gains.get(gains.len() / 2).copied().unwrap_or(0.0)
}

/// A data-driven step's held-back verdict in words: `held back (N): A → B; kept`.
pub(crate) fn held_verdict(held_back: usize, before: Option<f64>, after: Option<f64>, kept: bool) -> String {
    let db = |x: Option<f64>| x.map_or("exact".to_owned(), |v| format!("{v:.2} dB"));
    format!(
        "held back ({held_back}): {} → {}; {}",
        db(before),
        db(after),
        if kept { "kept" } else { "dropped" }
    )
}

/// Whether an output SQNR `after` a data-driven choice is at least the one `before` it
/// (`None`: exact, the best there is): the held-back test every such choice must pass.
pub fn no_worse(after: Option<f64>, before: Option<f64>) -> bool {
    after.unwrap_or(f64::INFINITY) >= before.unwrap_or(f64::INFINITY)
}

/// What the empirical bias correction did to the calibration-set output SQNR.
#[derive(Clone, Copy, Debug)]
pub struct BiasCorrectionNote {
    pub without: Option<f64>,
    pub with: Option<f64>,
    pub kept: bool,
    /// Calibration samples held back to judge it (the shifts are fitted on the others);
    /// 0 when the set is too small to split and it is judged on the samples it was fitted to.
    pub held_back: usize,
}

/// Errors of the quantizer, each naming what it concerns.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    #[error("{0}")]
    Data(String),
    /// A calibration or evaluation set that cannot be read.
    #[error(transparent)]
    Samples(#[from] data::DataError),
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("node {node} ({op}): {message}")]
    Node { node: String, op: String, message: String },
    #[error("tensor {name}: {message}")]
    Tensor { name: String, message: String },
    #[error("cancelled")]
    Cancelled,
}

/// Calibration statistics: every quantized activation's observer after one pass over the
/// calibration set (what [`Quantizer::plan_from_stats`] chooses ranges from).
#[derive(Clone, Debug)]
pub struct Stats {
    /// By value id of the optimized graph.
    pub observers: HashMap<ValueId, Observer>,
    /// Samples seen.
    pub samples: usize,
    /// The first sample's input shapes, by input name.
    pub input_shapes: BTreeMap<String, Vec<usize>>,
    /// The first sample's shapes of the values downstream of control flow.
    pub value_shapes: BTreeMap<String, Vec<usize>>,
}

/// A model prepared for calibration and fake-quant simulation: node order, last uses,
/// which values get a quantizer and where every value's grid comes from.
pub struct Quantizer<'m> {
    pub model: &'m Model,
    order: Vec<NodeId>,
    /// Step after which a value is no longer needed (`usize::MAX`: graph output).
    last_use: Vec<usize>,
    /// Values with a quantizer of their own: graph inputs and outputs of compute nodes.
    pub quant_points: Vec<ValueId>,
    /// For every float value, the quantizer whose grid it lies on (itself, or the input of
    /// a pass-through chain).
    source: Vec<Option<ValueId>>,
    /// The nodes reading each value.
    consumers: Vec<Vec<NodeId>>,
    /// For each node with subgraphs (If, Loop, Scan), the values of this graph its
    /// branches read by name.
    outer: HashMap<String, Vec<ValueId>>,
    ctx: OpCtx,
    pool: rayon::ThreadPool,
}

fn is_float(g: &Graph, v: ValueId) -> bool {
    g.values[v].dtype.is_none_or(|d| d == DType::F32)
}

/// The weight input of a node and its output-channel axis.
pub(crate) fn weight_axis(g: &Graph, node: &Node, input: usize) -> Option<usize> {
    let v = node.input(input)?;
    let rank = g.values[v].constant.as_ref()?.shape.len();
    match (node.op.as_str(), input) {
        ("Conv" | "FusedConv", 1) => Some(0),
        ("ConvTranspose", 1) => Some(1.min(rank.saturating_sub(1))),
        ("Gemm" | "FusedGemm", 1) => Some(usize::from(node.attr_i("transB").unwrap_or(0) == 0)),
        ("MatMul", 1) if rank >= 2 => Some(rank - 1),
        _ => None,
    }
}

/// A layer without its fused activation (what its weights' error is measured before).
pub(crate) fn strip_activation(node: &Node) -> Node {
    let mut node = node.clone();
    for a in ["activation", "activation_params", "activation_alpha", "activation_beta"] {
        node.attrs.remove(a);
    }
    node
}

/// A layer output's channels (axis 1 of a convolution's, the last axis of a Gemm's or
/// MatMul's): the elements per channel run and the channel count, for an output of `shape`
/// in standard layout (element `i` lies in channel `(i / inner) % channels`).
pub(crate) fn out_channels(node: &Node, shape: &[usize]) -> (usize, usize) {
    let (axis, channels) = if node.op.contains("Conv") {
        (1, shape.get(1).copied().unwrap_or(1))
    } else {
        (shape.len().saturating_sub(1), shape.last().copied().unwrap_or(1))
    };
    let inner: usize = shape.get(axis + 1..).map_or(1, |d| d.iter().product());
    (inner.max(1), channels.max(1))
}

/// A constant that is data to the op (quantized like a weight, per tensor), not a parameter
/// such as Resize's scales, Clip's bounds or a shape.
pub(crate) fn is_data_operand(node: &Node, input: usize) -> bool {
    match node.op.as_str() {
        // Max/Min constants are bounds compared on the activation's own grid (a −∞ bound
        // has no grid of its own).
        "Add" | "Sub" | "Mul" | "Div" | "PRelu" | "Concat" => true,
        "MatMul" => input == 0,
        "LayerNormalization" | "InstanceNormalization" => input >= 1,
        _ => false,
    }
}

pub(crate) fn is_bias(node: &Node, input: usize) -> bool {
    input == 2
        && matches!(
            node.op.as_str(),
            "Conv" | "FusedConv" | "ConvTranspose" | "Gemm" | "FusedGemm"
        )
}

impl<'m> Quantizer<'m> {
    pub fn new(model: &'m Model, threads: usize) -> Result<Self, QuantError> {
        let g = &model.graph;
        let order = g.topo_order().map_err(|e| QuantError::Data(e.to_string()))?;
        let mut last_use = vec![0usize; g.values.len()];
        let reads = g.reads();
        let mut outer = HashMap::new();
        for (step, &n) in order.iter().enumerate() {
            let node = &g.nodes[n];
            if node.has_subgraphs() {
                // Control flow runs in float; the values its branches read from this
                // graph are kept until it has run.
                outer.insert(node.name.clone(), g.implicit_inputs(n));
            }
            for v in &reads[n] {
                last_use[*v] = step;
            }
        }
        for &o in &g.outputs {
            last_use[o] = usize::MAX;
        }
        let mut quant_points = Vec::new();
        let mut source = vec![None; g.values.len()];
        for &i in &g.inputs {
            if is_float(g, i) {
                quant_points.push(i);
                source[i] = Some(i);
            }
        }
        for &n in &order {
            let node = &g.nodes[n];
            let pass = PASS_THROUGH.contains(&node.op.as_str());
            for o in node.outputs.iter().flatten() {
                if !is_float(g, *o) || node.op == "Constant" {
                    continue;
                }
                if pass {
                    source[*o] = node.input(0).and_then(|v| source[v]);
                } else {
                    quant_points.push(*o);
                    source[*o] = Some(*o);
                }
            }
        }
        // An epilogue fused into its producer: an activation (as a target fuses Conv+Relu)
        // or a scalar affine step, alone or chained (a chain of one-input element-wise
        // functions runs as one requantization or look-up table). The producer's output
        // stays in the accumulator; only the end of the chain is quantized.
        let consumers = g.consumers();
        for &n in &order {
            let node = &g.nodes[n];
            let Some(pos) = epilogue_input(g, node) else { continue };
            let Some(x) = node.input(pos) else { continue };
            let Some(p) = g.values[x].producer else { continue };
            let producer = &g.nodes[p];
            if source[x] == Some(x)
                && !PASS_THROUGH.contains(&producer.op.as_str())
                && consumers[x].len() == 1
                && !g.outputs.contains(&x)
            {
                source[x] = None;
                quant_points.retain(|&v| v != x);
            }
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .build()
            .map_err(|e| QuantError::Data(e.to_string()))?;
        Ok(Self {
            model,
            order,
            last_use,
            quant_points,
            source,
            consumers,
            outer,
            ctx: OpCtx {
                opset: model.opset(),
                threads: threads.max(1),
            },
            pool,
        })
    }

    fn graph(&self) -> &Graph {
        &self.model.graph
    }

    /// Float values a node makes that the simulation does not quantize because they are
    /// fused into their consumer (see [`QuantPlan::hidden`]).
    pub fn hidden_points(&self) -> Vec<ValueId> {
        let g = self.graph();
        self.order
            .iter()
            .flat_map(|&n| g.nodes[n].outputs.iter().flatten().copied())
            .filter(|&v| self.source[v].is_none() && is_float(g, v) && g.values[v].constant.is_none())
            .collect()
    }

    /// Binds a sample's named inputs to graph input ids.
    fn bind(&self, sample: &HashMap<String, Tensor>) -> Result<Vec<(ValueId, Tensor)>, QuantError> {
        let g = self.graph();
        g.inputs
            .iter()
            .map(|&i| {
                let name = &g.values[i].name;
                sample
                    .get(name)
                    .cloned()
                    .map(|t| (i, t))
                    .ok_or_else(|| QuantError::Data(format!("the sample has no tensor for input `{name}`")))
            })
            .collect()
    }

    /// Runs one node on the values `lookup` gives (constants of the graph otherwise).
    fn run_node<'t>(
        &'t self,
        node: &Node,
        lookup: impl Fn(ValueId) -> Option<&'t Tensor>,
    ) -> Result<Vec<Tensor>, QuantError> {
        let g = self.graph();
        let get = |v: ValueId| lookup(v).or_else(|| g.values[v].constant.as_ref().map(crate::ir::Constant::tensor));
        let ins: Vec<Option<&Tensor>> = node.inputs.iter().map(|v| v.and_then(get)).collect();
        let outer = self.outer_values(node, |v| get(v).cloned());
        self.eval_node_in(node, &ins, &outer)
    }

    /// The values of this graph a node's subgraphs read by name (none for other nodes).
    fn outer_values(&self, node: &Node, get: impl Fn(ValueId) -> Option<Tensor>) -> HashMap<String, Tensor> {
        let g = self.graph();
        self.outer
            .get(&node.name)
            .into_iter()
            .flatten()
            .filter_map(|&v| Some((g.values[v].name.clone(), get(v)?)))
            .collect()
    }

    /// One op on its inputs, a container op's branches reading `outer` by name; an error
    /// names the node.
    fn eval_node_in(
        &self,
        node: &Node,
        ins: &[Option<&Tensor>],
        outer: &HashMap<String, Tensor>,
    ) -> Result<Vec<Tensor>, QuantError> {
        let err = |message| QuantError::Node {
            node: node.label(),
            op: node.op.clone(),
            message,
        };
        if !crate::sim::ops::containers::CONTAINER_OPS.contains(&node.op.as_str()) {
            return crate::sim::ops::eval(node, ins, &self.ctx).map_err(err);
        }
        let vals: Vec<Option<Val>> = ins.iter().map(|t| t.map(|t| Val::Tensor(t.clone()))).collect();
        let lookup = |name: &str| outer.get(name).map(|t| Val::Tensor(t.clone()));
        crate::sim::ops::containers::eval(node, &vals, &self.ctx, &lookup)
            .map_err(err)?
            .into_iter()
            .map(|v| match v {
                Val::Tensor(t) => Ok(t),
                other => Err(err(format!("an output is {}, which is not quantized", other.kind()))),
            })
            .collect()
    }

    /// Runs the graph node by node. `weights` replaces constants; `on_value` sees (and may
    /// change) every value as it is made; with `keep`, every value is returned, else only
    /// the outputs.
    fn forward(
        &self,
        sample: &HashMap<String, Tensor>,
        weights: &HashMap<ValueId, Tensor>,
        on_value: &mut (dyn FnMut(ValueId, &mut Tensor) -> Result<(), QuantError> + Send),
        keep: bool,
    ) -> Result<HashMap<ValueId, Tensor>, QuantError> {
        let g = self.graph();
        let mut env: HashMap<ValueId, Tensor> = HashMap::new();
        for (i, mut t) in self.bind(sample)? {
            on_value(i, &mut t)?;
            env.insert(i, t);
        }
        self.pool.install(|| -> Result<(), QuantError> {
            for (step, &n) in self.order.iter().enumerate() {
                let node = &g.nodes[n];
                let outs = self.run_node(node, |v| weights.get(&v).or_else(|| env.get(&v)))?;
                for (o, mut t) in node.outputs.iter().zip(outs) {
                    if let Some(o) = o {
                        on_value(*o, &mut t)?;
                        env.insert(*o, t);
                    }
                }
                if !keep {
                    let outer = self.outer.get(&node.name).into_iter().flatten();
                    for v in node.inputs.iter().flatten().chain(outer) {
                        if self.last_use[*v] == step {
                            env.remove(v);
                        }
                    }
                }
            }
            Ok(())
        })?;
        if !keep {
            env.retain(|v, _| g.outputs.contains(v));
        }
        Ok(env)
    }

    /// The values shape inference may not work out from the input shapes: the ones made by
    /// control flow (If, Loop, Scan) or downstream of it, and every value whose shape the
    /// graph does not fix (a recurrent op's outputs, symbolic dims).
    fn after_control_flow(&self) -> std::collections::HashSet<ValueId> {
        let g = self.graph();
        let mut out = std::collections::HashSet::new();
        for &n in &self.order {
            let node = &g.nodes[n];
            if node.has_subgraphs() || node.inputs.iter().flatten().any(|v| out.contains(v)) {
                out.extend(node.outputs.iter().flatten().copied());
            } else {
                out.extend(node.outputs.iter().flatten().copied().filter(|&v| {
                    g.values[v]
                        .shape
                        .as_ref()
                        .is_none_or(|s| s.iter().any(|d| !matches!(d, crate::ir::Dim::Fixed(_))))
                }));
            }
        }
        out
    }

    /// Gathers statistics of every quantized activation over the samples in one streaming
    /// pass; returns the plan with the chosen ranges.
    pub fn calibrate(
        &self,
        samples: &mut dyn Iterator<Item = Result<(String, HashMap<String, Tensor>), QuantError>>,
        total: usize,
        preset_name: &str,
        method: Calibration,
        progress: &dyn Progress,
    ) -> Result<QuantPlan, QuantError> {
        let stats = self.observe(samples, total, progress)?;
        progress.update(stats.samples, total, "choosing ranges");
        self.plan_from_stats(&stats, preset_name, method)
    }

    /// One streaming pass over the samples: every quantized activation's statistics.
    pub fn observe(
        &self,
        samples: &mut dyn Iterator<Item = Result<(String, HashMap<String, Tensor>), QuantError>>,
        total: usize,
        progress: &dyn Progress,
    ) -> Result<Stats, QuantError> {
        let g = self.graph();
        let mut obs: HashMap<ValueId, Observer> = self
            .quant_points
            .iter()
            .chain(&self.hidden_points())
            .map(|&v| (v, Observer::new()))
            .collect();
        let mut n = 0;
        let mut input_shapes = BTreeMap::new();
        let mut value_shapes = BTreeMap::new();
        let downstream = self.after_control_flow();
        for s in samples {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            let (label, sample) = s?;
            progress.update(n, total, &format!("calibrating on {label}"));
            if n == 0 {
                input_shapes = sample.iter().map(|(k, t)| (k.clone(), t.shape().to_vec())).collect();
            }
            let first = n == 0;
            let mut see = |v: ValueId, t: &mut Tensor| -> Result<(), QuantError> {
                if first && downstream.contains(&v) {
                    value_shapes.insert(g.values[v].name.clone(), t.shape().to_vec());
                }
                if let (Some(o), Tensor::F32(a)) = (obs.get_mut(&v), &*t) {
                    let data = a.as_slice_memory_order().unwrap_or(&[]);
                    o.observe(data)
                        .map_err(|m| QuantError::Data(format!("{label}: tensor {} {m}", g.values[v].name)))?;
                }
                Ok(())
            };
            self.forward(&sample, &HashMap::new(), &mut see, false)
                .map_err(|e| match e {
                    QuantError::Data(m) => QuantError::Data(m),
                    e => QuantError::Data(format!("{label}: {e}")),
                })?;
            n += 1;
        }
        if n == 0 {
            return Err(QuantError::Data("the calibration set is empty".into()));
        }
        Ok(Stats {
            observers: obs,
            samples: n,
            input_shapes,
            value_shapes,
        })
    }

    /// The plan of a preset with every activation's clipping range chosen by `method` from
    /// the statistics (no per-layer edits, no bias correction).
    pub fn plan_from_stats(
        &self,
        stats: &Stats,
        preset_name: &str,
        method: Calibration,
    ) -> Result<QuantPlan, QuantError> {
        let (default, _) = preset(preset_name)?;
        let g = self.graph();
        let ranges = self
            .quant_points
            .iter()
            .map(|v| {
                let o = stats.observers.get(v).ok_or_else(|| QuantError::Tensor {
                    name: g.values[*v].name.clone(),
                    message: "no calibration statistics (the statistics belong to another graph)".into(),
                })?;
                let fixed = g.values[*v]
                    .producer
                    .and_then(|p| bounded_output(&g.nodes[p]))
                    .and_then(fixed_output_ranges);
                let r = fixed.unwrap_or_else(|| Ranges {
                    int8: o.range(method, 255.0, false),
                    int16: o.range(method, 65535.0, false),
                });
                Ok((g.values[*v].name.clone(), r))
            })
            .collect::<Result<_, QuantError>>()?;
        let hidden = self
            .hidden_points()
            .iter()
            .filter_map(|v| {
                let o = stats.observers.get(v)?;
                let r = Ranges {
                    int8: o.range(method, 255.0, false),
                    int16: o.range(method, 65535.0, false),
                };
                Some((g.values[*v].name.clone(), r))
            })
            .collect();
        Ok(QuantPlan {
            hidden,
            version: 1,
            preset: preset_name.into(),
            calibration: method,
            calibration_samples: stats.samples,
            inputs: default.activations,
            default,
            layers: BTreeMap::new(),
            ranges,
            bias_correction: BTreeMap::new(),
            graph: Some(params::graph_id(self.model)),
            input_shapes: stats.input_shapes.clone(),
            value_shapes: stats.value_shapes.clone(),
            equalization: BTreeMap::new(),
            absorption: BTreeMap::new(),
            weight_clip: BTreeMap::new(),
            gptq: BTreeMap::new(),
            smoothing: BTreeMap::new(),
            exact_float: false,
        })
    }

    /// Measures the empirical bias correction of `plan` and keeps it only where it raises
    /// the output SQNR on samples it was not fitted to: with three samples or more, the last
    /// third is held back, the shifts are fitted on the rest and judged on it, and when they
    /// win they are fitted again on every sample. Each layer's shift is measured alone, and
    /// on some models the shifts interact, hence the judgement on the whole output.
    pub fn correct_bias(
        &self,
        plan: QuantPlan,
        src: &data::Source,
        pre: &data::Preprocess,
        progress: &dyn Progress,
    ) -> Result<(QuantPlan, BiasCorrectionNote), QuantError> {
        let (fit, judge, held_back) = src.fit_and_judge();
        let corr = self.bias_corrections(&plan, &mut fit.samples(self.model, pre), progress)?;
        let cached = self.cache(&mut judge.samples(self.model, pre))?;
        let without = self.output_sqnr(&plan, &cached)?.sqnr_db;
        let mut with_plan = plan.clone();
        with_plan.bias_correction = corr;
        let with = self.output_sqnr(&with_plan, &cached)?.sqnr_db;
        let kept = no_worse(with, without);
        if kept && held_back > 0 {
            with_plan.bias_correction = self.bias_corrections(&plan, &mut src.samples(self.model, pre), progress)?;
        }
        let note = BiasCorrectionNote {
            without,
            with,
            kept,
            held_back,
        };
        Ok((if kept { with_plan } else { plan }, note))
    }

    /// The format and range of the grid `v` lies on under `plan` (None: float).
    pub fn grid(&self, plan: &QuantPlan, v: ValueId) -> Option<(ActFormat, (f64, f64))> {
        let g = self.graph();
        let src = self.source.get(v).copied().flatten()?;
        let format = match g.values[src].producer {
            Some(p) => plan.precision(&g.nodes[p]).activations,
            None => plan.inputs,
        };
        let range = plan.ranges.get(&g.values[src].name)?.for_format(format);
        Some((format, range))
    }

    /// Quantize-dequantized constants under `plan`: weights per channel (or group), biases
    /// on the int32 grid of input scale × weight scale, other float constants per tensor.
    pub fn quantized_weights(&self, plan: &QuantPlan) -> HashMap<ValueId, Tensor> {
        let g = self.graph();
        let mut out = HashMap::new();
        for &n in &self.order {
            let node = &g.nodes[n];
            let prec = plan.precision(node);
            if prec.weights == WeightFormat::Float {
                continue;
            }
            for (k, v) in node.inputs.iter().enumerate() {
                let Some(v) = *v else { continue };
                let Some(c) = g.values[v].constant.as_ref() else {
                    continue;
                };
                let Tensor::F32(a) = c.tensor() else { continue };
                let data = a.as_standard_layout();
                let data = data.as_slice().unwrap_or(&[]);
                let q = if is_bias(node, k) {
                    match plan.bias_correction.get(&node.name).filter(|c| c.len() == data.len()) {
                        Some(c) => {
                            let b: Vec<f32> = data.iter().zip(c).map(|(b, d)| b - d).collect();
                            bias_qdq(self, plan, node, &b, prec)
                        }
                        None => bias_qdq(self, plan, node, data, prec),
                    }
                } else if let Some(axis) = weight_axis(g, node, k) {
                    match gptq::plan_codes(plan, node, data, &c.shape, axis) {
                        Some(w) => gptq::dequantize(&w, &c.shape, axis),
                        None => qdq_weight(data, &c.shape, axis, prec.weights, plan.clip(node)),
                    }
                } else if is_data_operand(node, k) {
                    let f = match prec.weights {
                        WeightFormat::Int4 { .. } => WeightFormat::Int8,
                        f => f,
                    };
                    qdq_weight(data, &[data.len()], 1, f, &[])
                } else {
                    continue;
                };
                if let Some(t) = Tensor::from_f32(&c.shape, q) {
                    out.insert(v, t);
                }
            }
        }
        out
    }

    /// Puts a freshly made value on its grid when it has a quantizer of its own.
    /// Every value of one sample by name, in float32: the FP32 model's (`plan` `None`) or
    /// the fake-quant simulation's of `plan`.
    pub fn values(
        &self,
        plan: Option<&QuantPlan>,
        sample: &HashMap<String, Tensor>,
    ) -> Result<HashMap<String, Vec<f32>>, QuantError> {
        let g = self.graph();
        let env = match plan {
            None => self.forward(sample, &HashMap::new(), &mut |_, _| Ok(()), true)?,
            Some(plan) => {
                let weights = self.quantized_weights(plan);
                let mut fq = |v: ValueId, t: &mut Tensor| -> Result<(), QuantError> {
                    self.fake_quant(plan, v, t);
                    Ok(())
                };
                self.forward(sample, &weights, &mut fq, true)?
            }
        };
        Ok(env
            .into_iter()
            .filter(|(_, t)| t.dtype().is_float())
            .map(|(v, t)| (g.values[v].name.clone(), t.to_f32().iter().copied().collect()))
            .collect())
    }

    /// The grid the simulation puts `v` on: [`Self::grid`], except that the output of a layer
    /// the plan keeps in float is quantized where an integer layer reads it, as the integer
    /// program quantizes it (`float-layer-output`): on the plan's range at the widest format
    /// of the integer layers reading it, also when an epilogue is fused behind it (not in
    /// the analysis' what-if plans, [`QuantPlan::exact_float`]).
    pub fn sim_grid(&self, plan: &QuantPlan, v: ValueId) -> Option<(ActFormat, (f64, f64))> {
        let grid = self.grid(plan, v);
        if plan.exact_float || grid.is_some_and(|x| x.0 != ActFormat::Float) {
            return grid;
        }
        let g = self.graph();
        let src = self.source[v].unwrap_or(v);
        let producer = &g.nodes[g.values[src].producer?];
        if !legalize::is_float_layer(plan, producer) || legalize::read_in_float(g, &self.consumers, plan, src) {
            return grid;
        }
        let readers: Vec<ActFormat> = self.consumers[src]
            .iter()
            .map(|&c| plan.precision(&g.nodes[c]).activations)
            .collect();
        let format = if readers.contains(&ActFormat::Int16) {
            ActFormat::Int16
        } else if readers.contains(&ActFormat::Int8) {
            ActFormat::Int8
        } else {
            return grid;
        };
        let name = &g.values[src].name;
        let range = plan.ranges.get(name).or_else(|| plan.hidden.get(name))?;
        Some((format, range.for_format(format)))
    }

    fn fake_quant(&self, plan: &QuantPlan, v: ValueId, t: &mut Tensor) {
        if self.source[v].is_none_or(|s| s == v)
            && let Some((f, r)) = self.sim_grid(plan, v)
        {
            qdq_tensor(t, f, r);
        }
    }

    /// An input of a node run alone: a quantized constant, or the FP32 value put on its grid
    /// (`quant` false: the FP32 value or constant as it is).
    fn local_input(
        &self,
        plan: &QuantPlan,
        v: ValueId,
        reference: &HashMap<ValueId, Tensor>,
        weights: &HashMap<ValueId, Tensor>,
        quant: bool,
    ) -> Option<Tensor> {
        if quant && let Some(w) = weights.get(&v) {
            return Some(w.clone());
        }
        if let Some(t) = reference.get(&v) {
            let mut t = t.clone();
            if quant && let Some((f, r)) = self.sim_grid(plan, v) {
                qdq_tensor(&mut t, f, r);
            }
            return Some(t);
        }
        self.graph().values[v].constant.as_ref().map(|c| c.tensor().clone())
    }

    /// Empirical bias correction: for every Conv/Gemm/MatMul with a bias, the mean
    /// per-channel error (before its fused activation) of the layer run quantized on FP32
    /// inputs put on their grids, over the samples. Returns the shifts by node name.
    pub fn bias_corrections(
        &self,
        plan: &QuantPlan,
        samples: &mut dyn Iterator<Item = Result<(String, HashMap<String, Tensor>), QuantError>>,
        progress: &dyn Progress,
    ) -> Result<BTreeMap<String, Vec<f32>>, QuantError> {
        let weights = self.quantized_weights(plan);
        let targets = self.bias_targets(plan);
        let mut sums: HashMap<NodeId, (Vec<f64>, f64)> = HashMap::new();
        for s in samples {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            let (label, sample) = s?;
            progress.update(0, 1, &format!("bias correction on {label}"));
            let reference = self.forward(&sample, &HashMap::new(), &mut |_, _| Ok(()), true)?;
            self.add_bias_errors(plan, &weights, &targets, &reference, &mut sums)?;
        }
        Ok(self.mean_bias_errors(sums))
    }

    /// Layers that get an empirical bias correction under `plan`.
    fn bias_targets(&self, plan: &QuantPlan) -> Vec<NodeId> {
        let g = self.graph();
        self.order
            .iter()
            .copied()
            .filter(|&n| {
                let node = &g.nodes[n];
                matches!(node.op.as_str(), "Conv" | "FusedConv" | "Gemm" | "FusedGemm")
                    && weight_axis(g, node, 1).is_some()
                    && node.input(2).is_some_and(|b| g.values[b].constant.is_some())
                    && plan.precision(node).weights != WeightFormat::Float
            })
            .collect()
    }

    fn mean_bias_errors(&self, sums: HashMap<NodeId, (Vec<f64>, f64)>) -> BTreeMap<String, Vec<f32>> {
        let g = self.graph();
        sums.into_iter()
            .filter(|(_, (_, c))| *c > 0.0)
            .map(|(n, (s, c))| (g.nodes[n].name.clone(), s.iter().map(|v| (v / c) as f32).collect()))
            .collect()
    }

    /// Adds one sample's per-channel error (quantized minus FP32, before the fused
    /// activation) of each target layer run alone to `sums`.
    fn add_bias_errors(
        &self,
        plan: &QuantPlan,
        weights: &HashMap<ValueId, Tensor>,
        targets: &[NodeId],
        reference: &HashMap<ValueId, Tensor>,
        sums: &mut HashMap<NodeId, (Vec<f64>, f64)>,
    ) -> Result<(), QuantError> {
        let g = self.graph();
        for &n in targets {
            let node = strip_activation(&g.nodes[n]);
            let run = |quant: bool| -> Result<Tensor, QuantError> {
                Ok(self.run_alone(plan, &node, reference, weights, quant)?.swap_remove(0))
            };
            let (Tensor::F32(yq), Tensor::F32(yf)) = (run(true)?, run(false)?) else {
                continue;
            };
            let (inner, channels) = out_channels(&node, yf.shape());
            let e = sums.entry(n).or_insert_with(|| (vec![0.0; channels], 0.0));
            if e.0.len() != channels {
                continue;
            }
            let (yq, yf) = (yq.as_standard_layout(), yf.as_standard_layout());
            for (i, (a, b)) in yq.iter().zip(yf.iter()).enumerate() {
                e.0[(i / inner) % channels] += f64::from(*a) - f64::from(*b);
            }
            e.1 += (yf.len() / channels.max(1)) as f64;
        }
        Ok(())
    }

    /// Fake-quant simulation on the evaluation samples: every tensor's local and cumulative
    /// error against FP32, and every output's.
    pub fn simulate(
        &self,
        plan: &QuantPlan,
        samples: &mut dyn Iterator<Item = Result<(String, HashMap<String, Tensor>), QuantError>>,
        total: usize,
        progress: &dyn Progress,
    ) -> Result<Report, QuantError> {
        let g = self.graph();
        let t0 = std::time::Instant::now();
        let weights = self.quantized_weights(plan);
        let mut local: HashMap<ValueId, ErrorStats> = HashMap::new();
        let mut cumulative: HashMap<ValueId, ErrorStats> = HashMap::new();
        let mut integer = integer_check::IntegerCheck::default();
        let mut n = 0;
        for s in samples {
            if progress.cancelled() {
                return Err(QuantError::Cancelled);
            }
            let (label, sample) = s?;
            progress.update(n, total, &format!("simulating {label}"));
            let reference = self.forward(&sample, &HashMap::new(), &mut |_, _| Ok(()), true)?;
            let mut fq = |v: ValueId, t: &mut Tensor| -> Result<(), QuantError> {
                self.fake_quant(plan, v, t);
                Ok(())
            };
            let quant = self.forward(&sample, &weights, &mut fq, true)?;
            integer.add(self, plan, &sample, &reference);
            for &step_node in &self.order {
                let node = &g.nodes[step_node];
                let float_outs = self.float_outputs(node);
                if float_outs.is_empty() {
                    continue;
                }
                for &o in &float_outs {
                    if let (Some(Tensor::F32(r)), Some(Tensor::F32(q))) = (reference.get(&o), quant.get(&o)) {
                        let (r, q) = (r.as_standard_layout(), q.as_standard_layout());
                        cumulative
                            .entry(o)
                            .or_default()
                            .add(r.as_slice().unwrap_or(&[]), q.as_slice().unwrap_or(&[]));
                    }
                }
                for (o, st) in self.local_error(plan, node, &reference, &weights)? {
                    local.entry(o).or_default().merge(&st);
                }
            }
            n += 1;
        }
        if n == 0 {
            return Err(QuantError::Data("the evaluation set is empty".into()));
        }
        let mut report = self.report(plan, &weights, &local, &cumulative, n, t0.elapsed().as_secs_f64());
        for t in &mut report.tensors {
            t.integer_sqnr_db = integer.local.get(&t.name).and_then(ErrorStats::sqnr_db);
            t.integer_sqnr_cumulative_db = integer.cumulative.get(&t.name).and_then(ErrorStats::sqnr_db);
        }
        for o in &mut report.outputs {
            o.integer_sqnr_db = integer.cumulative.get(&o.name).and_then(ErrorStats::sqnr_db);
        }
        let fake_local: HashMap<String, Option<f64>> = report
            .tensors
            .iter()
            .map(|t| (t.name.clone(), t.sqnr_local_db))
            .collect();
        report.constraints = integer.constraint_reports(&fake_local);
        report.integer_note = integer.note;
        Ok(report)
    }

    /// A node run alone on its FP32 inputs, put on their grids and with quantized constants
    /// (`quant`), or as they are.
    fn run_alone(
        &self,
        plan: &QuantPlan,
        node: &Node,
        reference: &HashMap<ValueId, Tensor>,
        weights: &HashMap<ValueId, Tensor>,
        quant: bool,
    ) -> Result<Vec<Tensor>, QuantError> {
        let ins: Vec<Option<Tensor>> = node
            .inputs
            .iter()
            .map(|v| v.and_then(|v| self.local_input(plan, v, reference, weights, quant)))
            .collect();
        let refs: Vec<Option<&Tensor>> = ins.iter().map(Option::as_ref).collect();
        let outer = self.outer_values(node, |v| self.local_input(plan, v, reference, weights, quant));
        self.pool.install(|| self.eval_node_in(node, &refs, &outer))
    }

    /// The float outputs a node's errors are measured on (none for a `Constant`).
    fn float_outputs(&self, node: &Node) -> Vec<ValueId> {
        if node.op == "Constant" {
            return Vec::new();
        }
        let g = self.graph();
        node.outputs
            .iter()
            .flatten()
            .copied()
            .filter(|&o| is_float(g, o))
            .collect()
    }

    /// The local error of a node run alone on its FP32 inputs put on their grids, per
    /// float output.
    fn local_error(
        &self,
        plan: &QuantPlan,
        node: &Node,
        reference: &HashMap<ValueId, Tensor>,
        weights: &HashMap<ValueId, Tensor>,
    ) -> Result<Vec<(ValueId, ErrorStats)>, QuantError> {
        let float_outs = self.float_outputs(node);
        if float_outs.is_empty() {
            return Ok(Vec::new());
        }
        let outs = self.run_alone(plan, node, reference, weights, true)?;
        let mut res = Vec::new();
        for (o, mut t) in node.outputs.iter().zip(outs) {
            let Some(o) = *o else { continue };
            if !float_outs.contains(&o) {
                continue;
            }
            self.fake_quant(plan, o, &mut t);
            if let (Some(Tensor::F32(r)), Tensor::F32(q)) = (reference.get(&o), &t) {
                let (r, q) = (r.as_standard_layout(), q.as_standard_layout());
                let mut st = ErrorStats::default();
                st.add(r.as_slice().unwrap_or(&[]), q.as_slice().unwrap_or(&[]));
                res.push((o, st));
            }
        }
        Ok(res)
    }

    /// The report of a plan from its error sums.
    fn report(
        &self,
        plan: &QuantPlan,
        weights: &HashMap<ValueId, Tensor>,
        local: &HashMap<ValueId, ErrorStats>,
        cumulative: &HashMap<ValueId, ErrorStats>,
        n: usize,
        seconds: f64,
    ) -> Report {
        let g = self.graph();
        let mut tensors = Vec::new();
        for &step_node in &self.order {
            let node = &g.nodes[step_node];
            for o in node.outputs.iter().flatten() {
                let (Some(l), Some(c)) = (local.get(o), cumulative.get(o)) else {
                    continue;
                };
                let prec = plan.precision(node);
                tensors.push(TensorReport {
                    name: g.values[*o].name.clone(),
                    node: node.name.clone(),
                    op: node.op.clone(),
                    activations: self.grid(plan, *o).map_or(ActFormat::Float, |x| x.0),
                    weights: prec.weights,
                    sqnr_local_db: l.sqnr_db(),
                    sqnr_cumulative_db: c.sqnr_db(),
                    cosine: c.cosine(),
                    max_abs_err: c.max_abs_err,
                    integer_sqnr_db: None,
                    integer_sqnr_cumulative_db: None,
                });
            }
        }
        let outputs = g
            .outputs
            .iter()
            .filter_map(|o| {
                cumulative.get(o).map(|c| OutputReport {
                    name: g.values[*o].name.clone(),
                    sqnr_db: c.sqnr_db(),
                    cosine: c.cosine(),
                    max_abs_err: c.max_abs_err,
                    integer_sqnr_db: None,
                })
            })
            .collect();
        let mut weight_reports = Vec::new();
        let consumers = g.consumers();
        let mut wids: Vec<&ValueId> = weights.keys().collect();
        wids.sort();
        for &v in wids {
            let (Some(c), Tensor::F32(q)) = (g.values[v].constant.as_ref(), &weights[&v]) else {
                continue;
            };
            let r = c.tensor().to_f32();
            let mut st = ErrorStats::default();
            let (r, q) = (r.as_standard_layout(), q.as_standard_layout());
            st.add(r.as_slice().unwrap_or(&[]), q.as_slice().unwrap_or(&[]));
            let node = consumers[v].first().map(|&n| &g.nodes[n]);
            let kind = consumers[v]
                .iter()
                .find_map(|&n| {
                    let node = &g.nodes[n];
                    node.inputs.iter().position(|x| *x == Some(v)).map(|k| {
                        if is_bias(node, k) {
                            "bias"
                        } else if weight_axis(g, node, k).is_some() {
                            "weight"
                        } else {
                            "operand"
                        }
                    })
                })
                .unwrap_or("operand");
            weight_reports.push(WeightReport {
                kind: kind.into(),
                name: g.values[v].name.clone(),
                node: node.map(|n| n.name.clone()).unwrap_or_default(),
                format: node.map_or(plan.default.weights, |n| plan.precision(n).weights),
                elements: r.len(),
                sqnr_db: st.sqnr_db(),
                max_abs_err: st.max_abs_err,
            });
        }
        Report {
            weights: weight_reports,
            preset: plan.preset.clone(),
            calibration: plan.calibration.name(),
            calibration_samples: plan.calibration_samples,
            eval_samples: n,
            seconds,
            outputs,
            tensors,
            integer_note: None,
            constraints: Vec::new(),
        }
    }
}

fn qdq_tensor(t: &mut Tensor, f: ActFormat, r: (f64, f64)) {
    if let Tensor::F32(a) = t
        && let Some(s) = a.as_slice_memory_order_mut()
    {
        qdq_activation(s, f, r);
    }
}

/// A bias on the int32 (int64 under 16-bit inputs) grid of (input scale × weight scale of
/// its channel).
fn bias_qdq(q: &Quantizer<'_>, plan: &QuantPlan, node: &Node, bias: &[f32], prec: LayerPrecision) -> Vec<f32> {
    let g = q.graph();
    let x_grid = node.input(0).and_then(|x| q.sim_grid(plan, x));
    let x_scale = x_grid.and_then(|(f, r)| f.levels().map(|l| Affine::from_range(r.0, r.1, l).scale));
    // Under 16-bit inputs the bias is int64, as in TFLite's 16x8 scheme: on the 256× finer
    // grid, int32 would clip the bias of channels with small weights.
    let code_max = if x_grid.is_some_and(|(f, _)| f == ActFormat::Int16) {
        9.2e18
    } else {
        2_147_483_647.0
    };
    let (Some(xs), WeightFormat::Int8 | WeightFormat::Uint8) = (x_scale, prec.weights) else {
        return match prec.weights {
            WeightFormat::Fp16 => bias.iter().map(|&b| half::f16::from_f32(b).to_f32()).collect(),
            _ => bias.to_vec(),
        };
    };
    let Some((w, axis)) = node
        .input(1)
        .and_then(|w| g.values[w].constant.as_ref().zip(weight_axis(g, node, 1)))
    else {
        return bias.to_vec();
    };
    let wt = w.tensor().to_f32();
    let channels = w.shape.get(axis).copied().unwrap_or(1);
    let inner: usize = w.shape[axis + 1..].iter().product();
    let mut amax = vec![0f64; channels];
    for (i, &v) in wt.iter().enumerate() {
        let c = (i / inner.max(1)) % channels.max(1);
        amax[c] = amax[c].max(f64::from(v).abs());
    }
    scheme::clip_ranges(&mut amax, 1, plan.clip(node));
    if prec.weights == WeightFormat::Uint8 {
        // One asymmetric grid for the whole tensor: scale (max − min) / 255 (as 127ths
        // below, the same expression then holds for both formats).
        let (lo, hi) = wt
            .iter()
            .fold((0f64, 0f64), |(a, b), &v| (a.min(f64::from(v)), b.max(f64::from(v))));
        let s = (hi - lo) / 255.0 * 127.0;
        amax.fill(s);
    }
    bias.iter()
        .enumerate()
        .map(|(c, &b)| {
            let s = xs * amax.get(c % channels.max(1)).copied().unwrap_or(0.0) / 127.0;
            if s > 0.0 {
                let code = (f64::from(b) / s).round_ties_even().clamp(-code_max - 1.0, code_max);
                (code * s) as f32
            } else {
                b
            }
        })
        .collect()
}

/// Error of one model output.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OutputReport {
    pub name: String,
    /// `null` when the output is exact.
    pub sqnr_db: Option<f64>,
    pub cosine: f64,
    pub max_abs_err: f64,
    /// The integer reference execution of the legalized plan against FP32 (`null` when
    /// exact or not legalized; see `Report::integer_note`).
    #[serde(default)]
    pub integer_sqnr_db: Option<f64>,
}

/// Error of one tensor: local (its op alone, on FP32 inputs put on their grids) and
/// cumulative (the whole quantized model so far against FP32).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TensorReport {
    pub name: String,
    pub node: String,
    pub op: String,
    pub activations: ActFormat,
    pub weights: WeightFormat,
    pub sqnr_local_db: Option<f64>,
    pub sqnr_cumulative_db: Option<f64>,
    pub cosine: f64,
    pub max_abs_err: f64,
    /// The node's integer ops alone on FP32 inputs put on their grids, against FP32.
    #[serde(default)]
    pub integer_sqnr_db: Option<f64>,
    /// The integer reference execution so far against FP32.
    #[serde(default)]
    pub integer_sqnr_cumulative_db: Option<f64>,
}

/// Error of one quantized constant (weights, biases, other constant operands).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WeightReport {
    pub name: String,
    /// `weight` (per channel or group), `bias` (int32 grid) or `operand` (another constant
    /// input, per tensor).
    pub kind: String,
    /// The first node that reads it.
    pub node: String,
    pub format: WeightFormat,
    pub elements: usize,
    pub sqnr_db: Option<f64>,
    pub max_abs_err: f64,
}

/// The error report (`--report FILE.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub preset: String,
    pub calibration: String,
    pub calibration_samples: usize,
    pub eval_samples: usize,
    pub seconds: f64,
    pub outputs: Vec<OutputReport>,
    pub tensors: Vec<TensorReport>,
    pub weights: Vec<WeightReport>,
    /// Why the integer columns are empty (the plan has no integer form yet), if they are.
    #[serde(default)]
    pub integer_note: Option<String>,
    /// Where the integer scheme overrides calibration, with the local SQNR of the tensor
    /// under fake quantization and under integer arithmetic.
    #[serde(default)]
    pub constraints: Vec<integer_check::ConstraintReport>,
}

impl Report {
    /// CSV with one row per tensor.
    pub fn to_csv(&self) -> String {
        use std::fmt::Write as _;
        let f = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.4}"));
        let mut s = String::from(
            "name,node,op,activations,weights,sqnr_local_db,sqnr_cumulative_db,cosine,max_abs_err,integer_sqnr_db,integer_sqnr_cumulative_db\n",
        );
        for t in &self.tensors {
            let _ = writeln!(
                s,
                "{},{},{},{:?},{:?},{},{},{:.6},{:.6e},{},{}",
                csv_field(&t.name),
                csv_field(&t.node),
                t.op,
                t.activations,
                t.weights,
                f(t.sqnr_local_db),
                f(t.sqnr_cumulative_db),
                t.cosine,
                t.max_abs_err,
                f(t.integer_sqnr_db),
                f(t.integer_sqnr_cumulative_db)
            );
        }
        s
    }
}

pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
