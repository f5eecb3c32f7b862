//! The displayable form of a model: cards (one per visible node, graph input and graph
//! output), the edges between them and the name-scope tree. Built once per model; the
//! scene (`scene.rs`) lays it out for a given set of collapsed scopes.
//!
//! As in Netron, constants are not cards of their own: initializers and `Constant` nodes
//! that only feed other nodes are listed inside their consumer's card.

use npu_core::ir::{Attr, Dim, Model, NodeId, ValueId};
use std::collections::HashMap;

/// What a card stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ItemKind {
    Node(NodeId),
    Input(ValueId),
    Output(ValueId),
}

/// Operator families, each with its own colour in the theme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Conv,
    Activation,
    Normalization,
    Pooling,
    Shape,
    Math,
    Quant,
    Control,
    Io,
    Other,
}

impl Family {
    pub fn of(op: &str) -> Self {
        match op {
            "Conv" | "ConvTranspose" | "ConvInteger" | "QLinearConv" | "MatMul" | "Gemm" | "MatMulInteger"
            | "QLinearMatMul" | "LSTM" | "GRU" | "RNN" | "Einsum" | "Attention" | "FusedConv" | "FusedGemm" => {
                Self::Conv
            }
            "Relu" | "LeakyRelu" | "PRelu" | "Sigmoid" | "HardSigmoid" | "HardSwish" | "Tanh" | "Elu" | "Selu"
            | "Celu" | "Softplus" | "Softsign" | "Gelu" | "Mish" | "Clip" | "Softmax" | "LogSoftmax"
            | "ThresholdedRelu" | "Erf" | "QuickGelu" => Self::Activation,
            "BatchNormalization"
            | "InstanceNormalization"
            | "LayerNormalization"
            | "GroupNormalization"
            | "LpNormalization"
            | "RMSNormalization"
            | "SimplifiedLayerNormalization"
            | "MeanVarianceNormalization"
            | "Dropout" => Self::Normalization,
            "MaxPool" | "AveragePool" | "GlobalAveragePool" | "GlobalMaxPool" | "LpPool" | "GlobalLpPool"
            | "MaxRoiPool" | "RoiAlign" | "Resize" | "Upsample" => Self::Pooling,
            "Reshape" | "Flatten" | "Transpose" | "Squeeze" | "Unsqueeze" | "Concat" | "Split" | "Slice" | "Gather"
            | "GatherElements" | "GatherND" | "ScatterND" | "ScatterElements" | "Pad" | "Expand" | "Tile" | "Shape"
            | "Size" | "ConstantOfShape" | "Constant" | "Cast" | "CastLike" | "Identity" | "DepthToSpace"
            | "SpaceToDepth" | "Range" | "NonZero" | "TopK" | "OneHot" | "SplitToSequence" | "ConcatFromSequence"
            | "SequenceAt" | "SequenceConstruct" | "SequenceEmpty" | "SequenceInsert" | "SequenceErase"
            | "SequenceLength" | "Trilu" | "Compress" => Self::Shape,
            "QuantizeLinear" | "DequantizeLinear" | "DynamicQuantizeLinear" => Self::Quant,
            "If" | "Loop" | "Scan" | "Optional" | "OptionalHasElement" | "OptionalGetElement" => Self::Control,
            "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Sqrt" | "Exp" | "Log" | "Neg" | "Abs" | "Reciprocal" | "Max"
            | "Min" | "Sum" | "Mean" | "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd"
            | "ReduceL2" | "ReduceL1" | "ReduceSumSquare" | "ReduceLogSumExp" | "ArgMax" | "ArgMin" | "Where"
            | "Equal" | "Less" | "Greater" | "GreaterOrEqual" | "LessOrEqual" | "Not" | "And" | "Or" | "Xor"
            | "Floor" | "Ceil" | "Round" | "Sign" | "Mod" | "Sin" | "Cos" | "CumSum" => Self::Math,
            _ => Self::Other,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Conv => "conv / matmul",
            Self::Activation => "activation",
            Self::Normalization => "normalization",
            Self::Pooling => "pooling / resize",
            Self::Shape => "tensor shape",
            Self::Math => "element-wise math",
            Self::Quant => "quantization",
            Self::Control => "control flow",
            Self::Io => "graph input / output",
            Self::Other => "other",
        }
    }

    pub const ALL: [Self; 10] = [
        Self::Conv,
        Self::Activation,
        Self::Normalization,
        Self::Pooling,
        Self::Shape,
        Self::Math,
        Self::Quant,
        Self::Control,
        Self::Io,
        Self::Other,
    ];
}

/// A card: what it shows and how big it is.
#[derive(Clone, Debug)]
pub struct Item {
    pub kind: ItemKind,
    /// Op type, or "input"/"output".
    pub title: String,
    /// Node or tensor name.
    pub name: String,
    pub family: Family,
    /// Key attributes (`kernel 3×3`, `stride 2`…).
    pub attrs: Vec<String>,
    /// Constant inputs (`W ⟨16×3×3×3⟩`) with the value each row stands for.
    pub weights: Vec<(String, ValueId)>,
    /// Card size in graph units.
    pub size: egui::Vec2,
    /// Scope the card sits in.
    pub scope: ScopeId,
}

pub type ItemId = usize;
pub type ScopeId = usize;

/// A name scope (`/backbone/stage2`). Scope 0 is the root.
#[derive(Clone, Debug)]
pub struct Scope {
    /// Last path segment (`stage2`); empty for the root.
    pub name: String,
    /// Full path (`backbone/stage2`).
    pub path: String,
    pub parent: Option<ScopeId>,
    pub depth: usize,
    /// Child scopes, in order of first appearance.
    pub children: Vec<ScopeId>,
    /// Cards directly in this scope.
    pub items: Vec<ItemId>,
    /// Cards in this scope and all below it.
    pub total_items: usize,
}

/// An edge between two cards, carrying one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: ItemId,
    pub to: ItemId,
    pub value: ValueId,
}

/// The displayable model.
pub struct GraphDoc {
    pub items: Vec<Item>,
    pub edges: Vec<Edge>,
    pub scopes: Vec<Scope>,
    /// The card showing each node: its own, or its consumer's for a hidden constant.
    pub node_item: Vec<Option<ItemId>>,
    /// Cards per model node (`None` for hidden constants).
    pub item_of_node: HashMap<NodeId, ItemId>,
    /// Consumers of every value (`Graph::consumers`), kept for the inspector and search.
    pub consumers: Vec<Vec<NodeId>>,
}

pub const CARD_MIN_WIDTH: f32 = 96.0;
pub const CARD_HEADER: f32 = 21.0;
pub const CARD_LINE: f32 = 15.0;
pub const CARD_PAD: f32 = 5.0;
/// Average advance of the card font, for sizing cards without a renderer.
pub const CHAR_WIDTH: f32 = 6.6;
pub const COLLAPSED_HEIGHT: f32 = 46.0;

fn text_width(s: &str) -> f32 {
    s.chars().count() as f32 * CHAR_WIDTH
}

/// Human-readable dims for cards and edges: `16×3×3×3`, `?` for unknown or long symbols.
pub fn dims_string(shape: Option<&[Dim]>) -> String {
    match shape {
        None => "?".into(),
        Some([]) => "scalar".into(),
        Some(s) => s
            .iter()
            .map(|d| match d {
                // Exporters' generated names (`p2o.DynamicDimension.0`, `unk__12`) say no more than `?`.
                Dim::Sym(name) if name.chars().count() > 8 => "?".to_owned(),
                d => d.to_string(),
            })
            .collect::<Vec<_>>()
            .join("×"),
    }
}

/// Input names of common ops, as the ONNX schema calls them.
fn input_label(op: &str, i: usize) -> String {
    let names: &[&str] = match op {
        "Conv" | "ConvTranspose" | "FusedConv" => &["X", "W", "B"],
        "Gemm" | "FusedGemm" => &["A", "B", "C"],
        "MatMul" => &["A", "B"],
        "BatchNormalization" => &["X", "scale", "B", "mean", "var"],
        "InstanceNormalization" | "LayerNormalization" => &["X", "scale", "B"],
        "PRelu" => &["X", "slope"],
        "Reshape" => &["data", "shape"],
        "Resize" => &["X", "roi", "scales", "sizes"],
        "Slice" => &["data", "starts", "ends", "axes", "steps"],
        "Pad" => &["data", "pads", "value", "axes"],
        "Clip" => &["input", "min", "max"],
        "Gather" => &["data", "indices"],
        "Unsqueeze" | "Squeeze" | "ReduceMean" | "ReduceSum" => &["data", "axes"],
        "Expand" => &["input", "shape"],
        "Split" => &["input", "split"],
        "QuantizeLinear" | "DequantizeLinear" => &["x", "scale", "zero_point"],
        "LSTM" | "GRU" | "RNN" => &["X", "W", "R", "B", "seq_lens", "h0", "c0"],
        _ => &[],
    };
    names.get(i).map_or_else(|| format!("in{i}"), |s| (*s).to_owned())
}

fn ints(v: &[i64]) -> String {
    v.iter().map(ToString::to_string).collect::<Vec<_>>().join("×")
}

/// The few attributes worth showing on a card.
fn key_attrs(node: &npu_core::ir::Node) -> Vec<String> {
    let mut out = Vec::new();
    // A fused activation (com.microsoft FusedConv/FusedGemm) first: it is what changed.
    if let Some(act) = node.attr_s("activation") {
        out.push(format!("+ {act}"));
    }
    let all_one = |v: &[i64]| v.iter().all(|&x| x == 1);
    if let Some(k) = node.attr_ints("kernel_shape") {
        out.push(format!("kernel {}", ints(k)));
    }
    if let Some(s) = node.attr_ints("strides").filter(|s| !all_one(s)) {
        out.push(format!("stride {}", ints(s)));
    }
    if let Some(d) = node.attr_ints("dilations").filter(|s| !all_one(s)) {
        out.push(format!("dilation {}", ints(d)));
    }
    if let Some(g) = node.attr_i("group").filter(|&g| g != 1) {
        out.push(format!("groups {g}"));
    }
    for name in [
        "axis",
        "perm",
        "axes",
        "mode",
        "alpha",
        "to",
        "epsilon",
        "transB",
        "direction",
        "hidden_size",
    ] {
        if out.len() >= 3 {
            break;
        }
        if let Some(a) = node.attr(name) {
            let v = match a {
                Attr::Ints(v) => format!("[{}]", v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
                other => other.summary(),
            };
            out.push(format!("{name} {v}"));
        }
    }
    let graphs = node.subgraphs().count();
    if graphs > 0 {
        out.push(format!("{graphs} subgraph{}", if graphs == 1 { "" } else { "s" }));
    }
    out
}

fn card_size(title: &str, name_line: Option<&str>, lines: usize, texts: impl Iterator<Item = f32>) -> egui::Vec2 {
    let w = texts
        .chain([
            text_width(title) + 12.0,
            name_line.map_or(0.0, |n| text_width(n).min(200.0)),
        ])
        .fold(CARD_MIN_WIDTH, f32::max)
        .min(240.0);
    egui::vec2(w + 2.0 * CARD_PAD, CARD_HEADER + lines as f32 * CARD_LINE + CARD_PAD)
}

impl GraphDoc {
    pub fn build(model: &Model) -> Self {
        let g = &model.graph;
        let consumers = g.consumers();
        let outputs: std::collections::HashSet<ValueId> = g.outputs.iter().copied().collect();
        // A Constant node is hidden when every output feeds some node and none is a graph output.
        let hidden: Vec<bool> = g
            .nodes
            .iter()
            .map(|n| {
                n.op == "Constant"
                    && n.outputs
                        .iter()
                        .flatten()
                        .all(|&v| !outputs.contains(&v) && !consumers[v].is_empty())
            })
            .collect();
        let is_weight = |v: ValueId| {
            let val = &g.values[v];
            val.producer
                .map_or(val.constant.is_some() && !g.inputs.contains(&v), |p| hidden[p])
        };
        let mut scopes = vec![Scope {
            name: String::new(),
            path: String::new(),
            parent: None,
            depth: 0,
            children: Vec::new(),
            items: Vec::new(),
            total_items: 0,
        }];
        let mut scope_ids: HashMap<String, ScopeId> = HashMap::new();
        let mut scope_for = |parts: &[&str], scopes: &mut Vec<Scope>| -> ScopeId {
            let mut cur = 0;
            let mut path = String::new();
            for p in parts {
                if !path.is_empty() {
                    path.push('/');
                }
                path.push_str(p);
                cur = if let Some(&s) = scope_ids.get(&path) {
                    s
                } else {
                    let id = scopes.len();
                    scopes.push(Scope {
                        name: (*p).to_owned(),
                        path: path.clone(),
                        parent: Some(cur),
                        depth: scopes[cur].depth + 1,
                        children: Vec::new(),
                        items: Vec::new(),
                        total_items: 0,
                    });
                    scopes[cur].children.push(id);
                    scope_ids.insert(path.clone(), id);
                    id
                };
            }
            cur
        };
        let mut items = Vec::new();
        let mut input_item = HashMap::new();
        for &v in &g.inputs {
            if g.values[v].constant.is_some() {
                continue;
            }
            let val = &g.values[v];
            let line = format!(
                "{} {}",
                val.dtype.map_or("?", |d| d.name()),
                dims_string(val.shape.as_deref())
            );
            input_item.insert(v, items.len());
            items.push(Item {
                kind: ItemKind::Input(v),
                title: "input".into(),
                name: val.name.clone(),
                family: Family::Io,
                size: card_size("input", Some(&val.name), 2, [text_width(&line)].into_iter()),
                attrs: vec![line],
                weights: Vec::new(),
                scope: 0,
            });
        }
        let mut node_item = vec![None; g.nodes.len()];
        let mut item_of_node = HashMap::new();
        for (ni, n) in g.nodes.iter().enumerate() {
            if hidden[ni] {
                continue;
            }
            let attrs = key_attrs(n);
            let weights: Vec<(String, ValueId)> = n
                .inputs
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.filter(|&v| is_weight(v)).map(|v| (i, v)))
                .map(|(i, v)| {
                    let val = &g.values[v];
                    (
                        format!("{} ⟨{}⟩", input_label(&n.op, i), dims_string(val.shape.as_deref())),
                        v,
                    )
                })
                .collect();
            let lines = 1 + attrs.len() + weights.len();
            let short = n.name.rsplit('/').next().unwrap_or(&n.name).to_owned();
            let size = card_size(
                &n.op,
                Some(&short),
                lines,
                attrs.iter().chain(weights.iter().map(|w| &w.0)).map(|s| text_width(s)),
            );
            let scope = scope_for(&n.scope(), &mut scopes);
            node_item[ni] = Some(items.len());
            item_of_node.insert(ni, items.len());
            items.push(Item {
                kind: ItemKind::Node(ni),
                title: n.op.clone(),
                name: n.name.clone(),
                family: Family::of(&n.op),
                attrs,
                weights,
                size,
                scope,
            });
        }
        for &v in &g.outputs {
            let val = &g.values[v];
            let line = format!(
                "{} {}",
                val.dtype.map_or("?", |d| d.name()),
                dims_string(val.shape.as_deref())
            );
            items.push(Item {
                kind: ItemKind::Output(v),
                title: "output".into(),
                name: val.name.clone(),
                family: Family::Io,
                size: card_size("output", Some(&val.name), 2, [text_width(&line)].into_iter()),
                attrs: vec![line],
                weights: Vec::new(),
                scope: 0,
            });
        }
        // Hidden constants show on (the first of) their consumers' cards.
        for (ni, n) in g.nodes.iter().enumerate() {
            if hidden[ni] {
                node_item[ni] = n
                    .outputs
                    .iter()
                    .flatten()
                    .flat_map(|&v| consumers[v].iter())
                    .find_map(|&c| item_of_node.get(&c).copied());
            }
        }
        let mut edges = Vec::new();
        for (ii, item) in items.iter().enumerate() {
            match item.kind {
                ItemKind::Node(ni) => {
                    let n = &g.nodes[ni];
                    let mut reads: Vec<ValueId> = n.inputs.iter().flatten().copied().collect();
                    if n.has_subgraphs() {
                        reads.extend(g.implicit_inputs(ni));
                    }
                    reads.sort_unstable();
                    reads.dedup();
                    for v in reads {
                        let from = match g.values[v].producer {
                            Some(p) if !hidden[p] => item_of_node.get(&p).copied(),
                            Some(_) => None,
                            None => input_item.get(&v).copied(),
                        };
                        if let Some(from) = from {
                            edges.push(Edge { from, to: ii, value: v });
                        }
                    }
                }
                ItemKind::Output(v) => {
                    let from = match g.values[v].producer {
                        Some(p) => node_item[p],
                        None => input_item.get(&v).copied(),
                    };
                    if let Some(from) = from {
                        edges.push(Edge { from, to: ii, value: v });
                    }
                }
                ItemKind::Input(_) => {}
            }
        }
        for (ii, item) in items.iter().enumerate() {
            scopes[item.scope].items.push(ii);
        }
        let mut doc = Self {
            items,
            edges,
            scopes,
            node_item,
            item_of_node,
            consumers,
        };
        doc.dissolve_trivial_scopes();
        doc
    }

    /// A scope holding a single card and nothing else is no group: its card moves up.
    fn dissolve_trivial_scopes(&mut self) {
        for s in (1..self.scopes.len()).rev() {
            let sc = &self.scopes[s];
            if sc.children.is_empty() && sc.items.len() == 1 {
                let item = sc.items[0];
                let parent = sc.parent.unwrap_or(0);
                self.scopes[s].items.clear();
                self.items[item].scope = parent;
                self.scopes[parent].items.push(item);
                self.scopes[parent].children.retain(|&c| c != s);
            }
        }
        // Renumber the scopes that remain, keeping the root first.
        let mut keep: Vec<ScopeId> = Vec::new();
        let mut stack = vec![0];
        while let Some(s) = stack.pop() {
            keep.push(s);
            stack.extend(self.scopes[s].children.iter().rev());
        }
        let mut new_id = vec![usize::MAX; self.scopes.len()];
        for (i, &s) in keep.iter().enumerate() {
            new_id[s] = i;
        }
        let mut scopes: Vec<Scope> = keep.iter().map(|&s| self.scopes[s].clone()).collect();
        for sc in &mut scopes {
            sc.parent = sc.parent.map(|p| new_id[p]);
            for c in &mut sc.children {
                *c = new_id[*c];
            }
            sc.items.sort_unstable();
        }
        for item in &mut self.items {
            item.scope = new_id[item.scope];
        }
        // Totals, children before parents (ids are in pre-order).
        for s in (0..scopes.len()).rev() {
            let total =
                scopes[s].items.len() + scopes[s].children.iter().map(|&c| scopes[c].total_items).sum::<usize>();
            scopes[s].total_items = total;
        }
        self.scopes = scopes;
    }

    /// Scopes from the root down to (and including) `s`.
    pub fn scope_path(&self, mut s: ScopeId) -> Vec<ScopeId> {
        let mut out = vec![s];
        while let Some(p) = self.scopes[s].parent {
            out.push(p);
            s = p;
        }
        out.reverse();
        out
    }

    /// Size of a collapsed scope's box.
    pub fn collapsed_size(&self, s: ScopeId) -> egui::Vec2 {
        let sc = &self.scopes[s];
        let label = format!("{} nodes", sc.total_items);
        let w = text_width(&sc.name).max(text_width(&label)) + 2.0 * CARD_PAD + 24.0;
        egui::vec2(w.max(CARD_MIN_WIDTH + 2.0 * CARD_PAD), COLLAPSED_HEIGHT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Model {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/models/sample_cnn.onnx");
        npu_core::import::load(std::path::Path::new(path))
            .expect("sample model loads")
            .0
    }

    #[test]
    fn sample_model_cards_scopes_and_edges() {
        let m = sample();
        let doc = GraphDoc::build(&m);
        // One card per node, plus one input and one output.
        assert_eq!(doc.items.len(), m.graph.nodes.len() + 2);
        assert!(doc.scopes.iter().any(|s| s.path == "backbone/stage4/se"));
        assert_eq!(doc.scopes[0].total_items, doc.items.len());
        let conv = doc
            .items
            .iter()
            .find(|i| i.name == "/backbone/stem/conv")
            .expect("stem conv card");
        assert!(conv.attrs.contains(&"kernel 3×3".to_owned()) && conv.attrs.contains(&"stride 2×2".to_owned()));
        assert_eq!(conv.weights[0].0, "W ⟨16×3×3×3⟩");
        // Every card but the input has an incoming edge; weights make no edges.
        for (i, item) in doc.items.iter().enumerate() {
            if !matches!(item.kind, ItemKind::Input(_)) {
                assert!(doc.edges.iter().any(|e| e.to == i), "{} has no input edge", item.name);
            }
        }
    }

    #[test]
    fn single_card_scopes_dissolve_into_their_parent() {
        let m = sample();
        let doc = GraphDoc::build(&m);
        for s in &doc.scopes[1..] {
            assert!(
                s.items.len() + s.children.len() > 1 || !s.children.is_empty(),
                "trivial scope {}",
                s.path
            );
        }
        let head = doc.scopes.iter().find(|s| s.path == "head").expect("head scope");
        assert_eq!(head.items.len(), 4);
    }
}
