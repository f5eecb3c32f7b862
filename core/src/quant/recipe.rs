//! Recipes: which precision each layer gets. A preset gives every layer one precision;
//! ordered rules, matched by node-name regex and/or op type, change it (a later rule wins
//! over an earlier one); per-node overrides win over every rule. Saved as RON:
//!
//! ```ron
//! Recipe(
//!     preset: "w8a8",
//!     rules: [
//!         (op: Some("Sigmoid"), precision: "int16"),
//!         (name: Some("^backbone\\.stage1\\."), precision: "fp16"),
//!         (name: Some("head"), op: Some("Conv"), precision: "float"),
//!     ],
//!     overrides: {"p2o.Conv.3": "int16"},
//!     equalize: true,
//! )
//! ```

use super::observer::Calibration;
use super::scheme::ActFormat;
use super::{LayerPrecision, SpecError, preset};
use crate::ir::{Graph, Node};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One rule: every node whose name matches `name` (a regex searched anywhere in the name;
/// anchor it with `^…$`) and whose op is `op` gets `precision`. A rule without `name` or
/// `op` matches on the other alone. `op: "Conv"` also matches the fused `FusedConv` (and
/// `Gemm` matches `FusedGemm`), which the graph optimizer makes of a Conv and its activation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub op: Option<String>,
    /// `int8`, `int16`, `fp16`, `int4` (4-bit weights, 16-bit activations) or `float`.
    pub precision: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent steps of the recipe, each a `name: true` field of the RON format"
)]
pub struct Recipe {
    /// The precision of every layer no rule matches, and the default calibration method.
    #[serde(default = "default_preset")]
    pub preset: String,
    /// Overrides the preset's calibration method.
    #[serde(default)]
    pub calibration: Option<Calibration>,
    /// Format of the graph inputs (default: the preset's activations).
    #[serde(default)]
    pub inputs: Option<ActFormat>,
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Node name → precision; wins over every rule.
    #[serde(default)]
    pub overrides: BTreeMap<String, String>,
    /// Cross-layer equalization of the optimized graph's conv pairs before calibration
    /// ([`super::equalize`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub equalize: bool,
    /// Bias absorption: per-channel constants moved from a conv's output into the next
    /// conv's bias, validated on held-back calibration samples ([`super::absorb`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub absorb_bias: bool,
    /// Activation ranges judged by their consumers' error (not lowering the output SQNR),
    /// validated on held-back calibration samples ([`super::refine`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refine_ranges: bool,
    /// Per-channel weight ranges chosen by each layer's output error, validated on
    /// held-back calibration samples ([`super::seqmse`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seq_mse: bool,
    /// SmoothQuant: LayerNorm outlier channels migrated into the MatMul weights that read
    /// them, validated on held-back calibration samples ([`super::smooth`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub smooth_quant: bool,
    /// GPTQ: the int4 or int8 weight codes of linear layers (MatMul, Gemm, 1×1 conv) chosen
    /// against their calibration inputs, validated on held-back calibration samples
    /// ([`super::gptq`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gptq: bool,
}

fn default_preset() -> String {
    "w8a8".into()
}

impl Default for Recipe {
    fn default() -> Self {
        Self {
            preset: default_preset(),
            calibration: None,
            inputs: None,
            rules: Vec::new(),
            overrides: BTreeMap::new(),
            equalize: false,
            absorb_bias: false,
            refine_ranges: false,
            seq_mse: false,
            smooth_quant: false,
            gptq: false,
        }
    }
}

/// What a recipe resolves to on one graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub default: LayerPrecision,
    pub calibration: Calibration,
    pub inputs: ActFormat,
    /// Nodes whose precision differs from `default`, by name.
    pub layers: BTreeMap<String, LayerPrecision>,
    /// How many nodes each rule matched (in rule order).
    pub matched: Vec<usize>,
    /// Layers the preset would give a precision whose integer kernel is known to fail
    /// them, set to another precision (they are in `layers` too); no rule or override
    /// named them.
    pub adjusted: Vec<Adjustment>,
}

/// A layer the preset's precision is changed for, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Adjustment {
    pub node: String,
    pub precision: LayerPrecision,
    pub reason: String,
}

/// LiteRT's int16 SOFTMAX looks exp up over [−10, 0] and clamps below it: every value more
/// than 10 under its row's maximum still adds e^−10 (of the maximum's 1) to the
/// denominator. Above this share of added mass the int8 kernel, whose exp has no such
/// floor, is the better choice.
pub const INT16_SOFTMAX_FLOOR_LIMIT: f64 = 0.01;

/// The mass LiteRT's int16 SOFTMAX can add to a row's denominator over `depth` values:
/// `(depth − 1)·e^−10`.
pub fn int16_softmax_floor(depth: usize) -> f64 {
    depth.saturating_sub(1) as f64 * (-10f64).exp()
}

/// The length of the axis a Softmax node normalizes over, where its input shape fixes it
/// (the `axis` attribute, else the last axis).
pub fn softmax_depth(graph: &Graph, node: &Node) -> Option<usize> {
    let x = node.input(0)?;
    let shape = graph.values.get(x)?.shape.as_ref()?;
    let rank = shape.len() as i64;
    let axis = node.attr_i("axis").unwrap_or(-1);
    let axis = if axis < 0 { axis + rank } else { axis };
    match shape.get(usize::try_from(axis).ok()?)? {
        crate::ir::Dim::Fixed(n) => Some(*n),
        crate::ir::Dim::Sym(_) => None,
    }
}

fn op_matches(rule_op: &str, node: &Node) -> bool {
    let op = node.op.as_str();
    op == rule_op || op.strip_prefix("Fused").is_some_and(|base| base == rule_op)
}

impl Recipe {
    /// A recipe that is just a preset.
    pub fn from_preset(name: &str) -> Self {
        Self {
            preset: name.into(),
            ..Self::default()
        }
    }

    pub fn parse_ron(text: &str) -> Result<Self, RecipeError> {
        ron::from_str(text).map_err(|e| RecipeError::Syntax(e.to_string()))
    }

    pub fn to_ron(&self) -> String {
        ron::ser::to_string_pretty(self, ron::ser::PrettyConfig::default()).unwrap_or_default()
    }

    /// Applies the recipe to `graph`. Errors name the rule (by its position, from 1) or the
    /// override that is wrong; an override naming a node the graph lacks is an error too.
    pub fn resolve(&self, graph: &Graph) -> Result<Resolved, RecipeError> {
        let (default, method) = preset(&self.preset).map_err(RecipeError::Preset)?;
        let mut rules = Vec::with_capacity(self.rules.len());
        for (k, r) in self.rules.iter().enumerate() {
            let at = |problem: RuleProblem| RecipeError::Rule {
                index: k + 1,
                rule: describe(r),
                problem,
            };
            let re = match &r.name {
                Some(p) => Some(regex_lite::Regex::new(p).map_err(|e| at(RuleProblem::Regex(e.to_string())))?),
                None => None,
            };
            if re.is_none() && r.op.is_none() {
                return Err(at(RuleProblem::Empty));
            }
            let p = LayerPrecision::parse(&r.precision).map_err(|e| at(RuleProblem::Precision(e)))?;
            rules.push((re, r.op.as_deref(), p));
        }
        let mut matched = vec![0; rules.len()];
        let mut layers = BTreeMap::new();
        let mut named = std::collections::HashSet::new();
        for node in &graph.nodes {
            let mut chosen = None;
            for (k, (re, op, p)) in rules.iter().enumerate() {
                let hit =
                    re.as_ref().is_none_or(|re| re.is_match(&node.name)) && op.is_none_or(|o| op_matches(o, node));
                if hit {
                    matched[k] += 1;
                    chosen = Some(*p);
                }
            }
            if chosen.is_some() {
                named.insert(node.name.as_str());
            }
            if let Some(p) = chosen.filter(|p| *p != default) {
                layers.insert(node.name.clone(), p);
            }
        }
        for (name, prec) in &self.overrides {
            named.insert(name.as_str());
            if !graph.nodes.iter().any(|n| &n.name == name) {
                return Err(RecipeError::NoSuchNode { node: name.clone() });
            }
            let p = LayerPrecision::parse(prec).map_err(|error| RecipeError::Override {
                node: name.clone(),
                error,
            })?;
            if p == default {
                layers.remove(name);
            } else {
                layers.insert(name.clone(), p);
            }
        }
        let mut adjusted = Vec::new();
        if default.activations == ActFormat::Int16 {
            for node in graph
                .nodes
                .iter()
                .filter(|n| n.op == "Softmax" && !named.contains(n.name.as_str()))
            {
                let Some(depth) = softmax_depth(graph, node) else {
                    continue;
                };
                let floor = int16_softmax_floor(depth);
                if floor > INT16_SOFTMAX_FLOOR_LIMIT {
                    layers.insert(node.name.clone(), LayerPrecision::INT8);
                    adjusted.push(Adjustment {
                        node: node.name.clone(),
                        precision: LayerPrecision::INT8,
                        reason: format!(
                            "Softmax over {depth} values: LiteRT's int16 kernel floors every exp at e^-10, \
                             adding up to {floor:.3} to a row's denominator; its int8 kernel has no such floor"
                        ),
                    });
                }
            }
        }
        Ok(Resolved {
            default,
            calibration: self.calibration.unwrap_or(method),
            inputs: self.inputs.unwrap_or(default.activations),
            layers,
            matched,
            adjusted,
        })
    }
}

/// Why a recipe cannot be read or applied: each names the rule (from 1) or override.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecipeError {
    /// The text is not a recipe (RON syntax or a field of the wrong type).
    #[error("{0}")]
    Syntax(String),
    #[error("preset: {0}")]
    Preset(SpecError),
    #[error("rule {index} ({rule}): {problem}")]
    Rule {
        index: usize,
        rule: String,
        problem: RuleProblem,
    },
    #[error("override `{node}`: no node of that name in the optimized graph")]
    NoSuchNode { node: String },
    #[error("override `{node}`: {error}")]
    Override { node: String, error: SpecError },
}

/// What is wrong with one rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleProblem {
    #[error("bad name regex: {0}")]
    Regex(String),
    #[error("needs `name` or `op`")]
    Empty,
    #[error(transparent)]
    Precision(SpecError),
}

fn describe(r: &Rule) -> String {
    match (&r.name, &r.op) {
        (Some(n), Some(o)) => format!("name /{n}/, op {o}"),
        (Some(n), None) => format!("name /{n}/"),
        (None, Some(o)) => format!("op {o}"),
        (None, None) => "empty".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Graph, Node};

    fn graph(nodes: &[(&str, &str)]) -> Graph {
        let mut g = Graph::default();
        for (name, op) in nodes {
            g.nodes.push(Node {
                name: (*name).into(),
                op: (*op).into(),
                domain: String::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                attrs: std::collections::BTreeMap::new(),
                origin: Vec::new(),
            });
        }
        g
    }

    #[test]
    fn later_rules_win_and_overrides_win_over_rules() {
        let g = graph(&[
            ("stem.conv", "FusedConv"),
            ("stage1.conv", "Conv"),
            ("stage1.add", "Add"),
            ("head.sigmoid", "Sigmoid"),
        ]);
        let r = Recipe::parse_ron(
            r#"Recipe(
                preset: "w8a8",
                rules: [
                    (op: Some("Conv"), precision: "fp16"),
                    (name: Some("^stage1\\."), precision: "int16"),
                    (name: Some("sigmoid$"), op: Some("Sigmoid"), precision: "float"),
                    (name: Some("head"), op: Some("Conv"), precision: "int4"),
                ],
                overrides: {"stage1.add": "int8"},
            )"#,
        )
        .expect("parses");
        let res = r.resolve(&g).expect("resolves");
        assert_eq!(res.default, LayerPrecision::INT8);
        assert_eq!(
            res.layers.get("stem.conv"),
            Some(&LayerPrecision::FP16),
            "Conv matches FusedConv"
        );
        assert_eq!(
            res.layers.get("stage1.conv"),
            Some(&LayerPrecision::INT16),
            "the later rule wins"
        );
        assert_eq!(
            res.layers.get("stage1.add"),
            None,
            "the override back to the default wins"
        );
        assert_eq!(res.layers.get("head.sigmoid"), Some(&LayerPrecision::FLOAT));
        assert_eq!(res.matched, vec![2, 2, 1, 0]);
        // A round trip through RON keeps the recipe.
        assert_eq!(Recipe::parse_ron(&r.to_ron()).expect("round trip"), r);
    }

    #[test]
    fn a_wide_int16_softmax_runs_int8_unless_a_rule_names_it() {
        use crate::ir::{Dim, Value, ValueKind};
        let mut g = graph(&[("attn.softmax", "Softmax"), ("head.softmax", "Softmax")]);
        for (k, depth) in [80, 6625].into_iter().enumerate() {
            g.values.push(Value {
                name: format!("x{k}"),
                dtype: None,
                shape: Some(vec![Dim::Fixed(1), Dim::Sym("T".into()), Dim::Fixed(depth)]),
                constant: None,
                producer: None,
                outer: false,
                kind: ValueKind::default(),
            });
            g.nodes[k].inputs = vec![Some(k)];
        }
        let res = Recipe::from_preset("w8a16").resolve(&g).expect("resolves");
        assert_eq!(res.layers.get("head.softmax"), Some(&LayerPrecision::INT8));
        assert_eq!(res.layers.get("attn.softmax"), None, "80 values stay int16");
        assert_eq!(res.adjusted.len(), 1);
        assert!(res.adjusted[0].reason.contains("6625"), "{}", res.adjusted[0].reason);
        // 8-bit presets are left alone, and a rule that names the layer wins.
        assert!(
            Recipe::from_preset("w8a8")
                .resolve(&g)
                .expect("resolves")
                .adjusted
                .is_empty()
        );
        let named = Recipe::parse_ron(r#"Recipe(preset: "w8a16", rules: [(name: Some("^head"), precision: "int16")])"#)
            .expect("parses")
            .resolve(&g)
            .expect("resolves");
        assert!(named.adjusted.is_empty() && named.layers.is_empty());
        assert!(int16_softmax_floor(222) > INT16_SOFTMAX_FLOOR_LIMIT);
        assert!(int16_softmax_floor(221) < INT16_SOFTMAX_FLOOR_LIMIT);
    }

    #[test]
    fn errors_name_the_rule_or_override() {
        let g = graph(&[("a", "Conv")]);
        let typed = |text: &str| {
            Recipe::parse_ron(text)
                .expect("parses")
                .resolve(&g)
                .expect_err("must fail")
        };
        let bad = |text: &str| typed(text).to_string();
        let text =
            r#"Recipe(rules: [(op: Some("Conv"), precision: "int8"), (name: Some("(unclosed"), precision: "int8")])"#;
        assert!(
            matches!(
                typed(text),
                RecipeError::Rule {
                    index: 2,
                    problem: RuleProblem::Regex(_),
                    ..
                }
            ),
            "{}",
            bad(text)
        );
        let e = bad(text);
        assert!(e.starts_with("rule 2 (name /(unclosed/)"), "{e}");
        let e = bad(r#"Recipe(rules: [(op: Some("Conv"), precision: "int9")])"#);
        assert!(e.contains("rule 1") && e.contains("int9"), "{e}");
        let e = bad(r#"Recipe(rules: [(precision: "int8")])"#);
        assert!(e.contains("needs `name` or `op`"), "{e}");
        let e = bad(r#"Recipe(overrides: {"b": "int16"})"#);
        assert!(e.contains("override `b`") && e.contains("no node"), "{e}");
        let e = bad(r#"Recipe(preset: "w3a3")"#);
        assert!(e.contains("preset") && e.contains("w3a3"), "{e}");
    }
}
