//! Graph optimization: passes propose [`Patch`]es, the manager applies them to a fixed point.
//!
//! A pass reads the graph and returns patches; it never edits the graph itself. A patch is
//! data (nodes removed and added, values rewired or made constant), so the same patches can
//! be logged, counted and replayed: [`replay`] rebuilds the model after any step, which is
//! what the studio's step slider shows.
//!
//! Node and value ids stay stable while the passes run: a removed node becomes an empty
//! tombstone and new nodes and values are appended. [`compact`] drops the tombstones and
//! the values nothing uses at the end. Every node keeps in `origin` the ids of the nodes of
//! the imported model it was made from, so the studio can link the graph before and after.
//!
//! Passes work on the main graph; If/Loop/Scan bodies are left as they are, and a value a
//! body reads by name is never rewired.

mod fold;
mod fuse;
mod patterns;
mod simplify;

use crate::ir::{Constant, DType, Dim, Graph, Model, Node, NodeId, Tensor, Value, ValueId};
use crate::progress::Progress;
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};

/// Ids at and above this refer to a patch's own new values (`NEW + i` is `Patch::values[i]`).
const NEW: ValueId = 1 << 48;

/// One rewrite, described against the graph it was made from.
#[derive(Clone, Debug)]
pub struct Patch {
    pub pass: &'static str,
    pub rule: &'static str,
    /// Nodes removed.
    pub remove: Vec<NodeId>,
    /// Values created; nodes and rewires refer to them as `NEW + i`.
    pub values: Vec<Value>,
    /// Nodes added (appended to the graph).
    pub nodes: Vec<Node>,
    /// Every read of `.0` (node inputs and graph outputs) becomes a read of `.1`.
    pub replace: Vec<(ValueId, ValueId)>,
    /// Values that become constants (their producer is removed by the same patch).
    pub set_const: Vec<(ValueId, Constant)>,
    /// Constants that are no longer needed.
    pub drop: Vec<ValueId>,
}

impl Patch {
    pub fn new(pass: &'static str, rule: &'static str) -> Self {
        Self {
            pass,
            rule,
            remove: Vec::new(),
            values: Vec::new(),
            nodes: Vec::new(),
            replace: Vec::new(),
            set_const: Vec::new(),
            drop: Vec::new(),
        }
    }

    /// Adds a value; returns the id nodes of this patch use for it.
    pub fn value(&mut self, v: Value) -> ValueId {
        self.values.push(v);
        NEW + self.values.len() - 1
    }

    /// Adds a constant value.
    pub fn constant(&mut self, name: String, t: &Tensor) -> ValueId {
        let mut v = Value::new(name);
        v.dtype = Some(t.dtype());
        v.shape = Some(t.shape().iter().map(|&d| Dim::Fixed(d)).collect());
        v.constant = Some(Constant::from_tensor(t));
        self.value(v)
    }

    /// Adds an intermediate value shaped like `like`.
    pub fn value_like(&mut self, name: String, like: &Value) -> ValueId {
        let mut v = Value::new(name);
        v.dtype = like.dtype;
        v.shape.clone_from(&like.shape);
        self.value(v)
    }
}

/// What the log says about one applied patch.
#[derive(Clone, Debug, Serialize)]
pub struct LogEntry {
    /// 1-based: the model after step N is `replay(model, &patches[..N])`.
    pub step: usize,
    pub pass: String,
    pub rule: String,
    pub removed: Vec<NodeRef>,
    pub added: Vec<NodeRef>,
    /// Constants removed or made by folding.
    pub constants_removed: Vec<String>,
    pub constants_added: Vec<String>,
    /// Ids of the imported model's nodes the added nodes come from.
    pub origin: Vec<NodeId>,
}

/// A node named in the log.
#[derive(Clone, Debug, Serialize)]
pub struct NodeRef {
    pub name: String,
    pub op: String,
}

/// A pass: reads the graph, proposes patches through [`Cx::emit`].
pub trait Pass: Sync {
    /// The name used by `--passes` and in the log.
    fn name(&self) -> &'static str;
    /// One line for the studio's pass list and `optimize --help`.
    fn about(&self) -> &'static str;
    fn run(&self, cx: &mut Cx<'_>);
}

/// Every pass, in the order they run in each round.
pub fn all_passes() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(fold::FoldConstants),
        Box::new(fold::DeadCode),
        Box::new(fold::Cse),
        Box::new(simplify::RemoveNoops),
        Box::new(simplify::MergeReshapeTranspose),
        Box::new(fuse::FoldBatchNorm),
        Box::new(fuse::FoldBias),
        Box::new(simplify::NormalizeGemm),
        Box::new(patterns::RecognizePatterns),
        Box::new(fuse::FuseActivation),
        Box::new(simplify::PoolRewrite),
    ]
}

/// A pass name that is not one of [`all_passes`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown pass '{name}'; passes are: {}", known.join(", "))]
pub struct UnknownPass {
    pub name: String,
    pub known: Vec<&'static str>,
}

/// The passes named in `names` (comma-separated list items), in the standard order.
pub fn select(names: &[String]) -> Result<Vec<Box<dyn Pass>>, UnknownPass> {
    let all = all_passes();
    let known: Vec<&'static str> = all.iter().map(|p| p.name()).collect();
    if let Some(bad) = names.iter().find(|n| !known.contains(&n.as_str())) {
        return Err(UnknownPass {
            name: bad.clone(),
            known,
        });
    }
    Ok(all
        .into_iter()
        .filter(|p| names.iter().any(|n| n == p.name()))
        .collect())
}

/// What a pass sees: the graph plus cached facts, and the patches it has proposed so far.
pub struct Cx<'g> {
    pub g: &'g Graph,
    /// Default-domain opset.
    pub opset: i64,
    pub consumers: Vec<Vec<NodeId>>,
    is_output: Vec<bool>,
    is_input: Vec<bool>,
    /// Names read by If/Loop/Scan bodies: such values are never rewired.
    subgraph_names: HashSet<String>,
    pass: &'static str,
    patches: Vec<Patch>,
    nodes_claimed: HashSet<NodeId>,
    reads: HashSet<ValueId>,
    writes: HashSet<ValueId>,
}

impl<'g> Cx<'g> {
    pub fn new(g: &'g Graph, opset: i64, pass: &'static str) -> Self {
        let mut is_output = vec![false; g.values.len()];
        for &o in &g.outputs {
            is_output[o] = true;
        }
        let mut is_input = vec![false; g.values.len()];
        for &i in &g.inputs {
            is_input[i] = true;
        }
        let mut subgraph_names = HashSet::new();
        for n in &g.nodes {
            for sub in n.subgraphs() {
                subgraph_names.extend(sub.free_names());
            }
        }
        Self {
            g,
            opset,
            consumers: g.consumers(),
            is_output,
            is_input,
            subgraph_names,
            pass,
            patches: Vec::new(),
            nodes_claimed: HashSet::new(),
            reads: HashSet::new(),
            writes: HashSet::new(),
        }
    }

    /// A new patch of the running pass.
    pub fn patch(&self, rule: &'static str) -> Patch {
        Patch::new(self.pass, rule)
    }

    /// Live nodes (tombstones skipped) with their ids.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &'g Node)> + 'g {
        self.g.nodes.iter().enumerate().filter(|(_, n)| !n.op.is_empty())
    }

    pub fn is_output(&self, v: ValueId) -> bool {
        self.is_output[v]
    }

    /// Whether `v` is a graph input (an initializer listed as an input can be overridden).
    pub fn is_input(&self, v: ValueId) -> bool {
        self.is_input[v]
    }

    /// The constant tensor of `v`: an initializer or the output of a `Constant` node.
    pub fn constant(&self, v: ValueId) -> Option<&'g Tensor> {
        if self.is_input[v] {
            return None;
        }
        let val = &self.g.values[v];
        if let Some(c) = &val.constant {
            return Some(c.tensor());
        }
        let p = &self.g.nodes[val.producer?];
        match (p.op.as_str(), p.domain.as_str(), p.attr("value")) {
            ("Constant", "", Some(crate::ir::Attr::Tensor(c))) => Some(c.tensor()),
            _ => None,
        }
    }

    /// The single value of a one-element constant, widened to f64.
    pub fn scalar(&self, v: Option<ValueId>) -> Option<f64> {
        let t = self.constant(v?)?;
        (t.len() == 1).then(|| t.to_f64().iter().next().copied()).flatten()
    }

    /// The node producing `v`, if it is a live node.
    pub fn producer(&self, v: Option<ValueId>) -> Option<(NodeId, &'g Node)> {
        let p = self.g.values.get(v?)?.producer?;
        let n = &self.g.nodes[p];
        (!n.op.is_empty()).then_some((p, n))
    }

    /// The producer of `v` if it has op `op` in the default domain.
    pub fn producer_op(&self, v: Option<ValueId>, op: &str) -> Option<(NodeId, &'g Node)> {
        self.producer(v).filter(|(_, n)| n.op == op && n.domain.is_empty())
    }

    /// The one node that reads `v`, when `v` is not also a graph output.
    pub fn sole_consumer(&self, v: ValueId) -> Option<(NodeId, &'g Node)> {
        match self.consumers[v].as_slice() {
            [c] if !self.is_output[v] => Some((*c, &self.g.nodes[*c])),
            _ => None,
        }
    }

    /// Whether every reader of `v` is one of `nodes` and `v` is not a graph output.
    pub fn used_only_by(&self, v: ValueId, nodes: &[NodeId]) -> bool {
        !self.is_output[v] && self.consumers[v].iter().all(|c| nodes.contains(c))
    }

    /// The concrete shape of `v`, when known.
    pub fn shape(&self, v: Option<ValueId>) -> Option<Vec<usize>> {
        crate::ir::concrete(self.g.values.get(v?)?.shape.as_ref()?)
    }

    /// Whether `a` and `b` are known to have the same shape: the same rank, and each dim
    /// the same size or the same named symbol (anonymous symbols never match).
    pub fn same_shape(&self, a: ValueId, b: ValueId) -> bool {
        match (&self.g.values[a].shape, &self.g.values[b].shape) {
            (Some(x), Some(y)) => same_dims(x, y),
            _ => false,
        }
    }

    /// The only output of a node, if it has exactly one.
    pub fn out(&self, n: &Node) -> Option<ValueId> {
        match n.outputs.as_slice() {
            [Some(v)] => Some(*v),
            [Some(v), rest @ ..]
                if rest
                    .iter()
                    .flatten()
                    .all(|r| self.consumers[*r].is_empty() && !self.is_output[*r]) =>
            {
                Some(*v)
            }
            _ => None,
        }
    }

    /// Whether reads of `from` may be moved to `to`. A graph output keeps its name, so
    /// `to` takes that name: it must then be a plain node output of its own.
    pub fn can_replace(&self, from: ValueId, to: ValueId) -> bool {
        let g = self.g;
        if from == to || self.subgraph_names.contains(&g.values[from].name) {
            return false;
        }
        if !self.is_output[from] {
            return true;
        }
        !self.is_output[to]
            && !self.is_input[to]
            && g.values[to].producer.is_some()
            && g.values[to].constant.is_none()
            && !self.subgraph_names.contains(&g.values[to].name)
    }

    /// The union of the origins of `nodes`.
    pub fn origin(&self, nodes: &[NodeId]) -> Vec<NodeId> {
        let mut o: Vec<NodeId> = nodes
            .iter()
            .flat_map(|&n| self.g.nodes[n].origin.iter().copied())
            .collect();
        o.sort_unstable();
        o.dedup();
        o
    }

    /// A new node built from `src`'s name, scope and origin.
    pub fn node(
        &self,
        name: String,
        op: &str,
        inputs: Vec<Option<ValueId>>,
        outputs: Vec<Option<ValueId>>,
        from: &[NodeId],
    ) -> Node {
        Node {
            name,
            op: op.to_owned(),
            domain: String::new(),
            inputs,
            outputs,
            attrs: BTreeMap::new(),
            origin: self.origin(from),
        }
    }

    /// Proposes a patch. It is kept unless it touches a node or value that an earlier patch
    /// of this run touches (then a later round retries it); returns whether it was kept.
    pub fn emit(&mut self, p: Patch) -> bool {
        let mut nodes: HashSet<NodeId> = p.remove.iter().copied().collect();
        let mut reads = HashSet::new();
        let mut writes = HashSet::new();
        for n in &p.nodes {
            for &v in n.inputs.iter().flatten().filter(|&&v| v < NEW) {
                reads.insert(v);
                if let Some((pn, _)) = self.producer(Some(v)) {
                    nodes.insert(pn);
                }
            }
            writes.extend(n.outputs.iter().flatten().copied().filter(|&v| v < NEW));
        }
        for &(from, to) in &p.replace {
            writes.insert(from);
            // `to` only gains readers, unless it takes over a graph output's name.
            if to < NEW {
                if self.is_output[from] {
                    writes.insert(to);
                } else {
                    reads.insert(to);
                }
            }
            nodes.extend(self.consumers[from].iter().copied());
        }
        writes.extend(p.set_const.iter().map(|(v, _)| *v));
        writes.extend(p.drop.iter().copied());
        let clash = nodes.iter().any(|n| self.nodes_claimed.contains(n))
            || writes.iter().any(|v| self.writes.contains(v) || self.reads.contains(v))
            || reads.iter().any(|v| self.writes.contains(v));
        if clash {
            return false;
        }
        self.nodes_claimed.extend(nodes);
        self.reads.extend(reads);
        self.writes.extend(writes);
        self.patches.push(p);
        true
    }
}

/// Why a patch could not be applied (a pass bug; tests turn it into a failure).
#[derive(Debug, thiserror::Error)]
#[error("pass '{pass}', rule '{rule}': {message}")]
pub struct PatchError {
    pub pass: String,
    pub rule: String,
    pub message: String,
}

fn tombstone(n: &Node) -> Node {
    Node {
        name: n.name.clone(),
        op: String::new(),
        domain: String::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        attrs: BTreeMap::new(),
        origin: n.origin.clone(),
    }
}

/// Applies one patch to a graph with stable ids (see the module docs).
pub fn apply(g: &mut Graph, p: &Patch) -> Result<(), PatchError> {
    let err = |message: String| PatchError {
        pass: p.pass.into(),
        rule: p.rule.into(),
        message,
    };
    let base = g.values.len();
    let map = |v: ValueId| if v >= NEW { base + (v - NEW) } else { v };
    let in_range = |v: ValueId, len: usize| v < len;
    // New values get names no value has yet (a node rewritten twice makes `conv:W` twice).
    let mut names: HashSet<String> = g.values.iter().map(|v| v.name.clone()).collect();
    for v in &p.values {
        let mut v = v.clone();
        let mut k = 1;
        let stem = v.name.clone();
        while names.contains(&v.name) {
            v.name = format!("{stem}_{k}");
            k += 1;
        }
        names.insert(v.name.clone());
        g.values.push(v);
    }
    let nv = g.values.len();
    for &n in &p.remove {
        let node = g.nodes.get(n).ok_or_else(|| err(format!("node #{n} does not exist")))?;
        if node.op.is_empty() {
            return Err(err(format!("node '{}' was already removed", node.name)));
        }
        for &o in node.outputs.iter().flatten() {
            if g.values[o].producer == Some(n) {
                g.values[o].producer = None;
            }
        }
        g.nodes[n] = tombstone(&g.nodes[n]);
    }
    for (v, c) in &p.set_const {
        let val = g
            .values
            .get_mut(*v)
            .ok_or_else(|| err(format!("value #{v} does not exist")))?;
        if val.producer.is_some() {
            return Err(err(format!("'{}' becomes constant but its producer stays", val.name)));
        }
        val.dtype = Some(c.dtype);
        val.shape = Some(c.shape.iter().map(|&d| Dim::Fixed(d)).collect());
        val.constant = Some(c.clone());
    }
    for &v in &p.drop {
        if let Some(val) = g.values.get_mut(v) {
            val.constant = None;
        }
    }
    for &(from, to) in &p.replace {
        let (from, to) = (map(from), map(to));
        if !in_range(from, nv) || !in_range(to, nv) {
            return Err(err(format!("rewire #{from} → #{to} is out of range")));
        }
        for node in &mut g.nodes {
            for i in node.inputs.iter_mut().flatten() {
                if *i == from {
                    *i = to;
                }
            }
        }
        if g.outputs.contains(&from) {
            // The graph output keeps its name: the value that replaces it takes the name.
            let name = std::mem::take(&mut g.values[from].name);
            g.values[from].name = format!("{name}:replaced");
            g.values[to].name = name;
            for o in &mut g.outputs {
                if *o == from {
                    *o = to;
                }
            }
        }
    }
    for node in &p.nodes {
        let mut node = node.clone();
        for v in node.inputs.iter_mut().chain(node.outputs.iter_mut()).flatten() {
            *v = map(*v);
            if *v >= nv {
                return Err(err(format!(
                    "node '{}' refers to value #{v}, which does not exist",
                    node.name
                )));
            }
        }
        let id = g.nodes.len();
        for &o in node.outputs.iter().flatten() {
            if let Some(p) = g.values[o].producer {
                return Err(err(format!(
                    "'{}' of new node '{}' is still made by '{}'",
                    g.values[o].name, node.name, g.nodes[p].name
                )));
            }
            g.values[o].producer = Some(id);
        }
        g.nodes.push(node);
    }
    Ok(())
}

/// Drops tombstones and values nothing uses (no reader, producer, constant, graph input or
/// output); remaps every id.
pub fn compact(g: &mut Graph) {
    let mut node_map = vec![usize::MAX; g.nodes.len()];
    let mut kept = Vec::with_capacity(g.nodes.len());
    for (i, n) in std::mem::take(&mut g.nodes).into_iter().enumerate() {
        if !n.op.is_empty() {
            node_map[i] = kept.len();
            kept.push(n);
        }
    }
    g.nodes = kept;
    let mut used = vec![false; g.values.len()];
    for &v in g.inputs.iter().chain(&g.outputs) {
        used[v] = true;
    }
    for n in &g.nodes {
        for &v in n.inputs.iter().chain(&n.outputs).flatten() {
            used[v] = true;
        }
    }
    let mut names: HashSet<String> = HashSet::new();
    for n in &g.nodes {
        for sub in n.subgraphs() {
            names.extend(sub.free_names());
        }
    }
    let mut value_map = vec![usize::MAX; g.values.len()];
    let mut values = Vec::with_capacity(g.values.len());
    for (i, mut v) in std::mem::take(&mut g.values).into_iter().enumerate() {
        if used[i] || v.constant.is_some() || v.outer || names.contains(&v.name) {
            v.producer = v.producer.map(|p| node_map[p]).filter(|&p| p != usize::MAX);
            value_map[i] = values.len();
            values.push(v);
        }
    }
    g.values = values;
    for n in &mut g.nodes {
        for v in n.inputs.iter_mut().chain(n.outputs.iter_mut()).flatten() {
            *v = value_map[*v];
        }
    }
    for v in g.inputs.iter_mut().chain(g.outputs.iter_mut()) {
        *v = value_map[*v];
    }
}

/// Settings of one optimization run.
pub struct Options<'p> {
    pub passes: Vec<Box<dyn Pass>>,
    /// Rounds over all passes before giving up on reaching a fixed point.
    pub max_rounds: usize,
    /// Check `validate()` after every patch (tests turn this on).
    pub validate_each: bool,
    pub progress: &'p dyn Progress,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Self {
            passes: all_passes(),
            max_rounds: 64,
            validate_each: false,
            progress: &crate::progress::Silent,
        }
    }
}

/// The result of [`optimize`].
pub struct Optimized {
    pub model: Model,
    /// Every applied patch, in order: `replay(original, &patches[..n])` is step n.
    pub patches: Vec<Patch>,
    pub log: Vec<LogEntry>,
    pub rounds: usize,
    /// False when `max_rounds` ran out before a round changed nothing.
    pub converged: bool,
}

/// Why an optimization run stopped without a result.
#[derive(Debug, thiserror::Error)]
pub enum OptimizeError {
    #[error(transparent)]
    UnknownPass(#[from] UnknownPass),
    #[error(transparent)]
    Patch(#[from] PatchError),
    #[error("after pass '{pass}', rule '{rule}' (step {step}): {message}")]
    Invalid {
        pass: String,
        rule: String,
        step: usize,
        message: String,
    },
    #[error("cancelled")]
    Cancelled,
}

fn log_entry(step: usize, g: &Graph, p: &Patch) -> LogEntry {
    let node_ref = |n: &Node| NodeRef {
        name: n.name.clone(),
        op: n.op.clone(),
    };
    let mut origin: Vec<NodeId> = p.nodes.iter().flat_map(|n| n.origin.iter().copied()).collect();
    origin.sort_unstable();
    origin.dedup();
    LogEntry {
        step,
        pass: p.pass.into(),
        rule: p.rule.into(),
        removed: p.remove.iter().map(|&n| node_ref(&g.nodes[n])).collect(),
        added: p.nodes.iter().map(node_ref).collect(),
        constants_removed: p.drop.iter().map(|&v| g.values[v].name.clone()).collect(),
        constants_added: p
            .set_const
            .iter()
            .map(|(v, _)| g.values[*v].name.clone())
            .chain(p.values.iter().filter(|v| v.constant.is_some()).map(|v| v.name.clone()))
            .collect(),
        origin,
    }
}

/// Runs the passes round after round until a round changes nothing (or `max_rounds`).
pub fn optimize(model: &Model, opts: &Options<'_>) -> Result<Optimized, OptimizeError> {
    let mut work = model.clone();
    let opset = model.opset();
    let mut patches = Vec::new();
    let mut log = Vec::new();
    let mut rounds = 0;
    let mut converged = false;
    while rounds < opts.max_rounds {
        rounds += 1;
        let mut changed = false;
        for (k, pass) in opts.passes.iter().enumerate() {
            if opts.progress.cancelled() {
                return Err(OptimizeError::Cancelled);
            }
            opts.progress
                .update(k, opts.passes.len(), &format!("round {rounds}: {}", pass.name()));
            let mut cx = Cx::new(&work.graph, opset, pass.name());
            pass.run(&mut cx);
            let found = std::mem::take(&mut cx.patches);
            drop(cx);
            for p in found {
                log.push(log_entry(patches.len() + 1, &work.graph, &p));
                apply(&mut work.graph, &p)?;
                if opts.validate_each
                    && let Err(e) = work.validate()
                {
                    return Err(OptimizeError::Invalid {
                        pass: p.pass.into(),
                        rule: p.rule.into(),
                        step: patches.len() + 1,
                        message: e.to_string(),
                    });
                }
                patches.push(p);
                changed = true;
            }
        }
        if !changed {
            converged = true;
            break;
        }
    }
    compact(&mut work.graph);
    add_opsets(&mut work);
    Ok(Optimized {
        model: work,
        patches,
        log,
        rounds,
        converged,
    })
}

/// Declares the domains of ops the passes introduced.
fn add_opsets(m: &mut Model) {
    for n in &m.graph.nodes {
        if n.domain == crate::sim::ops::MICROSOFT {
            m.meta.opsets.entry(n.domain.clone()).or_insert(1);
        }
    }
}

/// The model after the first `patches.len()` steps of an [`optimize`] run on `model`.
pub fn replay(model: &Model, patches: &[Patch]) -> Result<Model, PatchError> {
    let mut m = model.clone();
    for p in patches {
        apply(&mut m.graph, p)?;
    }
    compact(&mut m.graph);
    add_opsets(&mut m);
    Ok(m)
}

/// Node count per op, for before/after summaries.
pub fn op_counts(m: &Model) -> BTreeMap<String, usize> {
    let mut h = BTreeMap::new();
    for n in &m.graph.nodes {
        *h.entry(n.op.clone()).or_default() += 1;
    }
    h
}

/// Shorthand used by the passes: an f32 tensor of `shape` from f64 values.
/// Whether two shapes are known to be equal: the same rank, and each dim the same size or
/// the same named symbol (anonymous symbols never match).
pub(crate) fn same_dims(x: &[Dim], y: &[Dim]) -> bool {
    x.len() == y.len()
        && x.iter().zip(y).all(|(p, q)| match (p, q) {
            (Dim::Fixed(m), Dim::Fixed(n)) => m == n,
            (Dim::Sym(m), Dim::Sym(n)) => !m.is_empty() && m == n,
            _ => false,
        })
}

pub(crate) fn f32_tensor(shape: &[usize], data: Vec<f64>) -> Tensor {
    let v: Vec<f32> = data.into_iter().map(|x| x as f32).collect();
    Tensor::F32(
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), v)
            .unwrap_or_else(|_| ndarray::ArrayD::zeros(ndarray::IxDyn(&[0]))),
    )
}

/// Whether a tensor is f32 (the passes only rewrite float32 weights).
pub(crate) fn is_f32(t: &Tensor) -> bool {
    t.dtype() == DType::F32
}

#[cfg(test)]
mod tests;
