//! The model graph: nodes, values, attributes and metadata.

use super::{DType, Tensor, tensor::TensorDataError};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, OnceLock};

/// Index of a node in [`Graph::nodes`].
pub type NodeId = usize;
/// Index of a value in [`Graph::values`].
pub type ValueId = usize;

/// One dimension of a shape: a known size or a named symbol (`batch`, `N`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Dim {
    Fixed(usize),
    Sym(String),
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fixed(n) => write!(f, "{n}"),
            Self::Sym(s) if s.is_empty() => f.write_str("?"),
            Self::Sym(s) => f.write_str(s),
        }
    }
}

/// A shape whose dimensions may be symbolic.
pub type Shape = Vec<Dim>;

/// Formats a shape as `1x3x?x640`.
pub fn shape_string(shape: &[Dim]) -> String {
    if shape.is_empty() {
        return "scalar".to_owned();
    }
    shape.iter().map(ToString::to_string).collect::<Vec<_>>().join("x")
}

/// The concrete dims of a shape, if every dim is fixed.
pub fn concrete(shape: &[Dim]) -> Option<Vec<usize>> {
    shape
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => Some(*n),
            Dim::Sym(_) => None,
        })
        .collect()
}

/// Constant tensor data as stored in the file: packed little-endian bytes, which borrow
/// from the memory-mapped model where the file allows it. Decoded on first use.
#[derive(Clone)]
pub struct Constant {
    pub dtype: DType,
    pub shape: Vec<usize>,
    raw: Bytes,
    decoded: Arc<OnceLock<Tensor>>,
}

impl fmt::Debug for Constant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Constant({} {:?}, {} bytes)", self.dtype, self.shape, self.raw.len())
    }
}

impl Constant {
    /// Wraps packed bytes; checks that the byte count matches dtype and shape.
    pub fn from_raw(dtype: DType, shape: Vec<usize>, raw: Bytes) -> Result<Self, TensorDataError> {
        super::tensor::check_raw_len(dtype, &shape, raw.len())?;
        Ok(Self {
            dtype,
            shape,
            raw,
            decoded: Arc::default(),
        })
    }

    pub fn from_tensor(t: &Tensor) -> Self {
        let c = Self {
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            raw: Bytes::from(t.to_raw()),
            decoded: Arc::default(),
        };
        let _ = c.decoded.set(t.clone());
        c
    }

    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The decoded tensor (decoded once and cached).
    pub fn tensor(&self) -> &Tensor {
        self.decoded.get_or_init(|| {
            // Sizes were checked when the constant was made, so decoding cannot fail.
            Tensor::from_raw(self.dtype, &self.shape, &self.raw)
                .unwrap_or_else(|_| Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[0]))))
        })
    }
}

/// A node attribute.
#[derive(Clone, Debug)]
pub enum Attr {
    Float(f32),
    Int(i64),
    String(String),
    Tensor(Constant),
    Graph(Box<Graph>),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<String>),
    Graphs(Vec<Graph>),
}

impl Attr {
    /// A short human-readable rendering for inspectors and reports.
    pub fn summary(&self) -> String {
        fn list<T: fmt::Display>(v: &[T]) -> String {
            let items: Vec<String> = v.iter().take(16).map(ToString::to_string).collect();
            let more = if v.len() > 16 { ", …" } else { "" };
            format!("[{}{more}]", items.join(", "))
        }
        match self {
            Self::Float(v) => v.to_string(),
            Self::Int(v) => v.to_string(),
            Self::String(s) => format!("\"{s}\""),
            Self::Tensor(c) => format!("tensor {} {:?}", c.dtype, c.shape),
            Self::Graph(g) => format!("graph {} ({} nodes)", g.name, g.nodes.len()),
            Self::Floats(v) => list(v),
            Self::Ints(v) => list(v),
            Self::Strings(v) => list(v),
            Self::Graphs(v) => format!("{} graphs", v.len()),
        }
    }
}

/// An operator application.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub op: String,
    /// Operator domain; empty for the default ONNX domain.
    pub domain: String,
    /// Input values; `None` for an omitted optional input.
    pub inputs: Vec<Option<ValueId>>,
    /// Output values; `None` for an omitted optional output.
    pub outputs: Vec<Option<ValueId>>,
    pub attrs: BTreeMap<String, Attr>,
    /// Ids of the source nodes this node was made from (itself after import).
    pub origin: Vec<NodeId>,
}

impl Node {
    /// The name scope of the node (`/backbone/stage2/conv1` → `["backbone", "stage2"]`).
    pub fn scope(&self) -> Vec<&str> {
        let mut parts: Vec<&str> = self.name.split('/').filter(|s| !s.is_empty()).collect();
        parts.pop();
        parts
    }

    pub fn input(&self, i: usize) -> Option<ValueId> {
        self.inputs.get(i).copied().flatten()
    }

    pub fn output(&self, i: usize) -> Option<ValueId> {
        self.outputs.get(i).copied().flatten()
    }

    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs.get(name)
    }

    pub fn attr_i(&self, name: &str) -> Option<i64> {
        match self.attrs.get(name) {
            Some(Attr::Int(v)) => Some(*v),
            _ => None,
        }
    }

    pub fn attr_f(&self, name: &str) -> Option<f32> {
        match self.attrs.get(name) {
            Some(Attr::Float(v)) => Some(*v),
            Some(Attr::Int(v)) => Some(*v as f32),
            _ => None,
        }
    }

    pub fn attr_ints(&self, name: &str) -> Option<&[i64]> {
        match self.attrs.get(name) {
            Some(Attr::Ints(v)) => Some(v),
            _ => None,
        }
    }

    pub fn attr_floats(&self, name: &str) -> Option<&[f32]> {
        match self.attrs.get(name) {
            Some(Attr::Floats(v)) => Some(v),
            _ => None,
        }
    }

    pub fn attr_s(&self, name: &str) -> Option<&str> {
        match self.attrs.get(name) {
            Some(Attr::String(v)) => Some(v),
            _ => None,
        }
    }

    /// The subgraphs held in the node's attributes (If branches, Loop/Scan bodies).
    pub fn subgraphs(&self) -> impl Iterator<Item = &Graph> {
        self.attrs.values().flat_map(|a| match a {
            Attr::Graph(g) => std::slice::from_ref(g.as_ref()),
            Attr::Graphs(gs) => gs.as_slice(),
            _ => &[],
        })
    }

    pub fn has_subgraphs(&self) -> bool {
        self.attrs
            .values()
            .any(|a| matches!(a, Attr::Graph(_) | Attr::Graphs(_)))
    }

    pub fn attr_graph(&self, name: &str) -> Option<&Graph> {
        match self.attrs.get(name) {
            Some(Attr::Graph(g)) => Some(g),
            _ => None,
        }
    }

    /// A label for error messages: the name, or the op type with its index.
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            format!("<unnamed {}>", self.op)
        } else {
            self.name.clone()
        }
    }
}

/// A tensor flowing between nodes (graph input, node output or constant).
#[derive(Clone, Debug)]
pub struct Value {
    pub name: String,
    pub dtype: Option<DType>,
    pub shape: Option<Shape>,
    pub constant: Option<Constant>,
    pub producer: Option<NodeId>,
    /// Defined in an enclosing graph (only in subgraphs: If/Loop/Scan bodies).
    pub outer: bool,
    /// Tensor, or one of ONNX's container types.
    pub kind: ValueKind,
}

/// The type family of a value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ValueKind {
    #[default]
    Tensor,
    Sequence,
    Optional,
    /// Maps and sparse tensors: kept in the IR, not executed.
    Other,
}

impl Value {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            dtype: None,
            shape: None,
            constant: None,
            producer: None,
            outer: false,
            kind: ValueKind::Tensor,
        }
    }
}

/// A computation graph. Subgraphs of control-flow nodes are graphs too.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub name: String,
    pub nodes: Vec<Node>,
    pub values: Vec<Value>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
}

/// Where a model came from and what it claims to need.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    pub ir_version: i64,
    /// Opset version per domain (`""` is the default ONNX domain).
    pub opsets: BTreeMap<String, i64>,
    pub producer_name: String,
    pub producer_version: String,
    pub doc: String,
    pub props: BTreeMap<String, String>,
}

/// A model: the main graph plus metadata.
#[derive(Clone, Debug, Default)]
pub struct Model {
    pub graph: Graph,
    pub meta: Metadata,
}

/// An inconsistency found by [`Graph::validate`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ValidationError {
    #[error("node '{node}' refers to value #{value}, which does not exist")]
    DanglingValue { node: String, value: ValueId },
    #[error("value '{value}' is produced by node #{node}, which does not list it as an output")]
    WrongProducer { value: String, node: NodeId },
    #[error("value '{value}' is used by node '{node}' but has no producer, constant or input")]
    Undefined { value: String, node: String },
    #[error("graph output '{0}' is never defined")]
    UndefinedOutput(String),
    #[error("the graph has a cycle through node '{0}'")]
    Cycle(String),
    #[error("value '{0}' is defined more than once")]
    Redefined(String),
}

impl Graph {
    /// Finds a value by name.
    pub fn value_id(&self, name: &str) -> Option<ValueId> {
        self.values.iter().position(|v| v.name == name)
    }

    /// A map from value name to id.
    pub fn value_ids(&self) -> HashMap<&str, ValueId> {
        self.values
            .iter()
            .enumerate()
            .map(|(i, v)| (v.name.as_str(), i))
            .collect()
    }

    /// Consumers (node ids) of every value, implicit reads by subgraphs included.
    pub fn consumers(&self) -> Vec<Vec<NodeId>> {
        let mut c = vec![Vec::new(); self.values.len()];
        for (n, reads) in self.reads().iter().enumerate() {
            for &v in reads {
                if let Some(list) = c.get_mut(v)
                    && list.last() != Some(&n)
                {
                    list.push(n);
                }
            }
        }
        c
    }

    /// Names this graph reads from enclosing graphs: its own outer values and those its
    /// subgraphs read that it does not define itself.
    pub fn free_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.values.iter().filter(|v| v.outer).map(|v| v.name.clone()).collect();
        for node in &self.nodes {
            for sub in node.subgraphs() {
                for name in sub.free_names() {
                    let defined_here = self.value_id(&name).is_some_and(|id| !self.values[id].outer);
                    if !defined_here && !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
        }
        names
    }

    /// The values a node's subgraphs read from this graph (If/Loop/Scan bodies use names of
    /// the enclosing scope without listing them as inputs). Names this graph does not have
    /// are left out; `validate` reports them.
    pub fn implicit_inputs(&self, n: NodeId) -> Vec<ValueId> {
        let mut out = Vec::new();
        for sub in self.nodes[n].subgraphs() {
            for name in sub.free_names() {
                if let Some(id) = self.value_id(&name)
                    && !out.contains(&id)
                {
                    out.push(id);
                }
            }
        }
        out
    }

    /// For every node, the values it reads: its inputs (once each) and its implicit inputs.
    pub fn reads(&self) -> Vec<Vec<ValueId>> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(n, node)| {
                let mut r: Vec<ValueId> = Vec::with_capacity(node.inputs.len());
                for &v in node.inputs.iter().flatten() {
                    if !r.contains(&v) {
                        r.push(v);
                    }
                }
                if node.has_subgraphs() {
                    for v in self.implicit_inputs(n) {
                        if !r.contains(&v) {
                            r.push(v);
                        }
                    }
                }
                r
            })
            .collect()
    }

    /// Nodes in an order where every producer comes before its consumers.
    pub fn topo_order(&self) -> Result<Vec<NodeId>, ValidationError> {
        let consumers = self.consumers();
        let reads = self.reads();
        let mut indeg = vec![0usize; self.nodes.len()];
        for (n, r) in reads.iter().enumerate() {
            for v in r {
                if self.values.get(*v).and_then(|x| x.producer).is_some() {
                    indeg[n] += 1;
                }
            }
        }
        let mut ready: Vec<NodeId> = (0..self.nodes.len()).filter(|&n| indeg[n] == 0).rev().collect();
        let mut order = Vec::with_capacity(self.nodes.len());
        while let Some(n) = ready.pop() {
            order.push(n);
            for v in self.nodes[n].outputs.iter().flatten() {
                for &c in &consumers[*v] {
                    indeg[c] -= 1;
                    if indeg[c] == 0 {
                        ready.push(c);
                    }
                }
            }
        }
        if order.len() != self.nodes.len() {
            let stuck = (0..self.nodes.len()).find(|&n| indeg[n] > 0).unwrap_or(0);
            return Err(ValidationError::Cycle(self.nodes[stuck].label()));
        }
        Ok(order)
    }

    /// Checks that ids are in range, producers agree with node outputs, every used value
    /// is defined exactly once, and the graph is acyclic.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let mut defined = vec![false; self.values.len()];
        for &i in &self.inputs {
            if i >= self.values.len() {
                return Err(ValidationError::DanglingValue {
                    node: "<graph inputs>".into(),
                    value: i,
                });
            }
            defined[i] = true;
        }
        for (i, v) in self.values.iter().enumerate() {
            if v.constant.is_some() || v.outer {
                defined[i] = true;
            }
        }
        for (n, node) in self.nodes.iter().enumerate() {
            for v in node.inputs.iter().chain(node.outputs.iter()).flatten() {
                if *v >= self.values.len() {
                    return Err(ValidationError::DanglingValue {
                        node: node.label(),
                        value: *v,
                    });
                }
            }
            for v in node.outputs.iter().flatten() {
                if self.values[*v].producer != Some(n) {
                    return Err(ValidationError::Redefined(self.values[*v].name.clone()));
                }
                if defined[*v] {
                    return Err(ValidationError::Redefined(self.values[*v].name.clone()));
                }
                defined[*v] = true;
            }
        }
        for (i, v) in self.values.iter().enumerate() {
            if let Some(p) = v.producer {
                let ok = self.nodes.get(p).is_some_and(|n| n.outputs.contains(&Some(i)));
                if !ok {
                    return Err(ValidationError::WrongProducer {
                        value: v.name.clone(),
                        node: p,
                    });
                }
            }
        }
        for node in &self.nodes {
            for v in node.inputs.iter().flatten() {
                if !defined[*v] {
                    return Err(ValidationError::Undefined {
                        value: self.values[*v].name.clone(),
                        node: node.label(),
                    });
                }
            }
        }
        for &o in &self.outputs {
            if o >= self.values.len() || !defined[o] {
                let name = self.values.get(o).map_or_else(|| format!("#{o}"), |v| v.name.clone());
                return Err(ValidationError::UndefinedOutput(name));
            }
        }
        self.topo_order()?;
        Ok(())
    }
}

impl Model {
    /// Validates the main graph.
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.graph.validate()?;
        for (n, node) in self.graph.nodes.iter().enumerate() {
            if !node.has_subgraphs() {
                continue;
            }
            let known = self.graph.implicit_inputs(n);
            for sub in node.subgraphs() {
                if let Some(name) = sub
                    .free_names()
                    .into_iter()
                    .find(|name| self.graph.value_id(name).is_none_or(|id| !known.contains(&id)))
                {
                    return Err(ValidationError::Undefined {
                        value: name,
                        node: node.label(),
                    });
                }
            }
        }
        Ok(())
    }

    /// The opset of the default ONNX domain (`ai.onnx`).
    pub fn opset(&self) -> i64 {
        self.meta
            .opsets
            .get("")
            .or_else(|| self.meta.opsets.get("ai.onnx"))
            .copied()
            .unwrap_or(1)
    }

    /// Number of parameters (elements of constants that feed a node) and their bytes.
    pub fn parameter_count(&self) -> (usize, usize) {
        let mut count = 0;
        let mut bytes = 0;
        for v in &self.graph.values {
            if let Some(c) = &v.constant {
                count += c.len();
                bytes += c.raw().len();
            }
        }
        // Weights exported as Constant nodes (PaddlePaddle, older PyTorch) count too.
        for n in &self.graph.nodes {
            if n.op == "Constant"
                && let Some(Attr::Tensor(c)) = n.attr("value")
            {
                count += c.len();
                bytes += c.raw().len();
            }
        }
        (count, bytes)
    }

    /// Op type histogram, sorted by count (descending) then name.
    pub fn op_histogram(&self) -> Vec<(String, usize)> {
        let mut h: BTreeMap<&str, usize> = BTreeMap::new();
        for n in &self.graph.nodes {
            *h.entry(n.op.as_str()).or_default() += 1;
        }
        let mut v: Vec<(String, usize)> = h.into_iter().map(|(k, c)| (k.to_owned(), c)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(op: &str, inputs: &[ValueId], outputs: &[ValueId]) -> Node {
        Node {
            name: op.to_lowercase(),
            op: op.into(),
            domain: String::new(),
            inputs: inputs.iter().map(|&v| Some(v)).collect(),
            outputs: outputs.iter().map(|&v| Some(v)).collect(),
            attrs: BTreeMap::new(),
            origin: Vec::new(),
        }
    }

    /// `cond → If(then: Neg(x_outer))` where `x` is made by a node listed after the If:
    /// the If must run after that node, and `x` lives until the If has run.
    fn if_reading_outer_value() -> Graph {
        let mut body = Graph {
            name: "then".into(),
            ..Graph::default()
        };
        let mut outer = Value::new("x");
        outer.outer = true;
        body.values = vec![outer, Value::new("y")];
        body.nodes.push(node("Neg", &[0], &[1]));
        body.values[1].producer = Some(0);
        body.outputs = vec![1];
        let mut g = Graph {
            values: vec![Value::new("cond"), Value::new("out"), Value::new("a"), Value::new("x")],
            inputs: vec![0, 2],
            ..Graph::default()
        };
        let mut iff = node("If", &[0], &[1]);
        iff.attrs
            .insert("then_branch".into(), Attr::Graph(Box::new(body.clone())));
        iff.attrs.insert("else_branch".into(), Attr::Graph(Box::new(body)));
        g.nodes.push(iff);
        g.nodes.push(node("Relu", &[2], &[3]));
        g.values[1].producer = Some(0);
        g.values[3].producer = Some(1);
        g.outputs = vec![1];
        g
    }

    #[test]
    fn subgraph_reads_order_the_graph() {
        let g = if_reading_outer_value();
        assert_eq!(g.implicit_inputs(0), vec![3]);
        assert_eq!(g.reads()[0], vec![0, 3]);
        assert_eq!(g.consumers()[3], vec![0]);
        assert_eq!(g.topo_order(), Ok(vec![1, 0]));
        assert_eq!(g.free_names(), Vec::<String>::new());
    }

    #[test]
    fn unknown_outer_name_is_an_error() {
        let mut g = if_reading_outer_value();
        g.values[3].name = "renamed".into();
        let model = Model {
            graph: g,
            ..Model::default()
        };
        let err = model.validate().expect_err("x is not defined");
        assert_eq!(
            err,
            ValidationError::Undefined {
                value: "x".into(),
                node: model.graph.nodes[0].label()
            }
        );
    }
}
