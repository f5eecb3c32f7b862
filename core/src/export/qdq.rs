//! QDQ ONNX export: the optimized graph with a QuantizeLinear/DequantizeLinear pair after
//! every activation the plan quantizes, with the legalized parameters (int8: the plan's
//! grid, the same steps as the simulator's unsigned grid; int16: symmetric with zero point
//! 0, TFLite's 16×8 scheme), and weights, biases and constant operands stored as integer
//! codes behind a DequantizeLinear (int8 per output channel — 4-bit layers' codes in −7..7
//! with one scale per output channel, as the TFLite export has them, in int8 storage —
//! int32 biases on input scale × weight scale, int8 per tensor).
//! Per-channel (axis) Q/DQ needs opset 13; below it, and for 16-bit codes below opset 21,
//! the pairs use onnxruntime's `com.microsoft` domain, which takes `axis` at any opset.

use crate::ir::{Attr, Constant, DType, Model, Node, Tensor, Value, ValueId};
use crate::program::{IntType, QParams};
use crate::quant::params::{bias_codes, int8_operand, weight_codes};
use crate::quant::scheme::{ActFormat, WeightFormat};
use crate::quant::{QuantPlan, Quantizer, is_bias, is_data_operand, weight_axis};
use ndarray::{ArrayD, IxDyn};

/// What the QDQ writer did, for the command's result line.
#[derive(Clone, Debug, Default)]
pub struct QdqSummary {
    pub activations: usize,
    pub weights: usize,
    /// Nodes whose constants stay float (fp16/float/int4 layers).
    pub float_weights: usize,
    pub domain: String,
}

fn push_const(g: &mut crate::ir::Graph, name: String, t: &Tensor) -> ValueId {
    let mut v = Value::new(name);
    v.dtype = Some(t.dtype());
    v.shape = Some(t.shape().iter().map(|&d| crate::ir::Dim::Fixed(d)).collect());
    v.constant = Some(Constant::from_tensor(t));
    g.values.push(v);
    g.values.len() - 1
}

fn push_value(g: &mut crate::ir::Graph, name: String, like: ValueId, dtype: DType) -> ValueId {
    let mut v = Value::new(name);
    v.dtype = Some(dtype);
    v.shape.clone_from(&g.values[like].shape);
    g.values.push(v);
    g.values.len() - 1
}

fn scales(s: &[f32]) -> Tensor {
    if s.len() == 1 {
        Tensor::F32(ArrayD::from_elem(IxDyn(&[]), s[0]))
    } else {
        Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[s.len()]), s.to_vec()).unwrap_or_default())
    }
}

struct Builder {
    domain: String,
    domain16: String,
    nodes: Vec<Node>,
}

impl Builder {
    fn node(
        &mut self,
        op: &str,
        domain: &str,
        name: String,
        inputs: Vec<ValueId>,
        output: ValueId,
        axis: Option<usize>,
    ) {
        let mut attrs = std::collections::BTreeMap::new();
        if let Some(a) = axis {
            attrs.insert("axis".to_string(), Attr::Int(a as i64));
        }
        self.nodes.push(Node {
            name,
            op: op.into(),
            domain: domain.into(),
            inputs: inputs.into_iter().map(Some).collect(),
            outputs: vec![Some(output)],
            attrs,
            origin: Vec::new(),
        });
    }

    /// A constant of integer codes behind a DequantizeLinear; returns the float value.
    fn dequantized(
        &mut self,
        g: &mut crate::ir::Graph,
        name: &str,
        codes: &Tensor,
        s: &[f32],
        zp: &Tensor,
        axis: Option<usize>,
    ) -> ValueId {
        let c = push_const(g, format!("{name}_quantized"), codes);
        let sc = push_const(g, format!("{name}_scale"), &scales(s));
        let z = push_const(g, format!("{name}_zero_point"), zp);
        let mut v = Value::new(format!("{name}_dequantized"));
        v.dtype = Some(DType::F32);
        v.shape.clone_from(&g.values[c].shape);
        g.values.push(v);
        let out = g.values.len() - 1;
        let domain = if codes.dtype() == DType::I32 || codes.dtype() == DType::I8 {
            self.domain.clone()
        } else {
            self.domain16.clone()
        };
        let axis = axis.filter(|_| s.len() > 1);
        self.node(
            "DequantizeLinear",
            &domain,
            format!("{name}_DequantizeLinear"),
            vec![c, sc, z],
            out,
            axis,
        );
        out
    }
}

/// The QDQ model of `plan` on the quantizer's (optimized) graph.
pub fn qdq_model(q: &Quantizer<'_>, plan: &QuantPlan) -> (Model, QdqSummary) {
    let mut m = q.model.clone();
    let opset = m.opset();
    let ms = crate::sim::ops::MICROSOFT.to_string();
    let mut b = Builder {
        domain: if opset >= 13 { String::new() } else { ms.clone() },
        domain16: if opset >= 21 { String::new() } else { ms.clone() },
        nodes: Vec::new(),
    };
    let mut summary = QdqSummary {
        domain: if b.domain.is_empty() {
            "ai.onnx".into()
        } else {
            ms.clone()
        },
        ..QdqSummary::default()
    };
    let original = m.graph.clone();
    let g = &mut m.graph;
    // Constants: per use, codes behind a DequantizeLinear.
    for (n, node) in original.nodes.iter().enumerate() {
        let prec = plan.precision(node);
        if !matches!(prec.weights, WeightFormat::Int8 | WeightFormat::Int4 { .. }) {
            if node
                .inputs
                .iter()
                .flatten()
                .any(|&v| original.values[v].constant.is_some())
            {
                summary.float_weights += 1;
            }
            continue;
        }
        for k in 0..node.inputs.len() {
            let Some(v) = node.input(k) else { continue };
            let Some(c) = original.values[v].constant.as_ref() else {
                continue;
            };
            let Tensor::F32(a) = c.tensor() else { continue };
            let data: Vec<f32> = a.iter().copied().collect();
            let name = format!("{}_{}", original.values[v].name, node.name);
            let new = if is_bias(node, k) {
                let x_grid = node
                    .input(0)
                    .and_then(|x| q.sim_grid(plan, x))
                    .and_then(|(f, r)| QParams::activation(f, r));
                let Some(wv) = node.input(1) else { continue };
                let (Some(xq), Some(axis), Some(wc)) = (
                    x_grid,
                    weight_axis(&original, node, 1),
                    original.values[wv].constant.as_ref(),
                ) else {
                    continue;
                };
                let top = if matches!(prec.weights, WeightFormat::Int4 { .. }) {
                    7.0
                } else {
                    127.0
                };
                let w = weight_codes(
                    &wc.tensor().to_f32().iter().copied().collect::<Vec<_>>(),
                    &wc.shape,
                    axis,
                    top,
                    plan.clip(node),
                );
                let s_w: Vec<f32> = w.scales.iter().map(|&s| s as f32).collect();
                let mut bias = data.clone();
                if let Some(corr) = plan.bias_correction.get(&node.name).filter(|c| c.len() == bias.len()) {
                    for (x, d) in bias.iter_mut().zip(corr) {
                        *x -= d;
                    }
                }
                let codes: Vec<i32> = bias_codes(&bias, xq.s(), &s_w, IntType::I32)
                    .into_iter()
                    .map(|c| c as i32)
                    .collect();
                let s: Vec<f32> = s_w.iter().map(|&w| (f64::from(xq.s()) * f64::from(w)) as f32).collect();
                let zp = Tensor::I32(ArrayD::zeros(IxDyn(&[s.len()])));
                let codes = Tensor::I32(ArrayD::from_shape_vec(IxDyn(&c.shape), codes).unwrap_or_default());
                b.dequantized(g, &name, &codes, &s, &zp, Some(0))
            } else if let Some(axis) = weight_axis(&original, node, k) {
                let top = if matches!(prec.weights, WeightFormat::Int4 { .. }) {
                    7.0
                } else {
                    127.0
                };
                let w = crate::quant::gptq::plan_codes(plan, node, &data, &c.shape, axis)
                    .unwrap_or_else(|| weight_codes(&data, &c.shape, axis, top, plan.clip(node)));
                let s: Vec<f32> = w.scales.iter().map(|&s| s as f32).collect();
                let codes = Tensor::I8(
                    ArrayD::from_shape_vec(IxDyn(&c.shape), w.codes.iter().map(|&v| v as i8).collect())
                        .unwrap_or_default(),
                );
                let zp = Tensor::I8(ArrayD::zeros(IxDyn(&[s.len()])));
                b.dequantized(g, &name, &codes, &s, &zp, Some(axis))
            } else if is_data_operand(node, k) {
                let (codes, p) = int8_operand(&data);
                let codes = Tensor::I8(
                    ArrayD::from_shape_vec(IxDyn(&c.shape), codes.iter().map(|&v| v as i8).collect())
                        .unwrap_or_default(),
                );
                b.dequantized(g, &name, &codes, &p.scale, &Tensor::I8(ArrayD::zeros(IxDyn(&[]))), None)
            } else {
                continue;
            };
            g.nodes[n].inputs[k] = Some(new);
            summary.weights += 1;
        }
    }
    // Activations: a Q/DQ pair after each quantized value; its readers read the pair.
    let mut readers: std::collections::HashMap<ValueId, Vec<(usize, usize)>> = std::collections::HashMap::new();
    for (n, node) in g.nodes.iter().enumerate() {
        for (k, i) in node.inputs.iter().enumerate() {
            if let Some(v) = i {
                readers.entry(*v).or_default().push((n, k));
            }
        }
    }
    let mut rename = Vec::new();
    for &v in &q.quant_points {
        let Some((format, range)) = q.sim_grid(plan, v) else {
            continue;
        };
        let (codes_dtype, scale, zp, domain) = match format {
            ActFormat::Int8 => {
                let Some(p) = QParams::activation(format, range) else {
                    continue;
                };
                (
                    DType::I8,
                    p.s(),
                    Tensor::I8(ArrayD::from_elem(IxDyn(&[]), p.zp() as i8)),
                    b.domain.clone(),
                )
            }
            ActFormat::Int16 => {
                let Some(p) = QParams::activation(format, range) else {
                    continue;
                };
                (
                    DType::I16,
                    p.s(),
                    Tensor::I16(ArrayD::from_elem(IxDyn(&[]), 0)),
                    b.domain16.clone(),
                )
            }
            _ => continue,
        };
        let name = original.values[v].name.clone();
        let sc = push_const(g, format!("{name}_scale"), &scales(&[scale]));
        let z = push_const(g, format!("{name}_zero_point"), &zp);
        let qv = push_value(g, format!("{name}_quantized"), v, codes_dtype);
        let dq = push_value(g, format!("{name}_dequantized"), v, DType::F32);
        for &(n, k) in readers.get(&v).map_or(&[][..], Vec::as_slice) {
            g.nodes[n].inputs[k] = Some(dq);
        }
        b.node(
            "QuantizeLinear",
            &domain,
            format!("{name}_QuantizeLinear"),
            vec![v, sc, z],
            qv,
            None,
        );
        b.node(
            "DequantizeLinear",
            &domain,
            format!("{name}_DequantizeLinear"),
            vec![qv, sc, z],
            dq,
            None,
        );
        if let Some(pos) = g.outputs.iter().position(|&o| o == v) {
            g.outputs[pos] = dq;
            rename.push((v, dq));
        }
        summary.activations += 1;
    }
    // Float constants replaced by their codes are no longer written.
    let read: std::collections::HashSet<ValueId> = g
        .nodes
        .iter()
        .chain(&b.nodes)
        .flat_map(|n| n.inputs.iter().flatten().copied())
        .collect();
    for v in 0..original.values.len() {
        if original.values[v].constant.is_some() && !read.contains(&v) && !g.outputs.contains(&v) {
            g.values[v].constant = None;
        }
    }
    // A graph output keeps its name on the dequantized value.
    for (v, dq) in rename {
        let name = g.values[v].name.clone();
        g.values[v].name = format!("{name}_float");
        g.values[dq].name = name;
    }
    // The new nodes, then every node in topological order (as ONNX files list them).
    g.nodes.extend(b.nodes);
    for n in 0..g.nodes.len() {
        for &o in g.nodes[n].outputs.clone().iter().flatten() {
            g.values[o].producer = Some(n);
        }
    }
    if let Ok(order) = g.topo_order() {
        let nodes = std::mem::take(&mut g.nodes);
        let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
        g.nodes = order.iter().filter_map(|&i| slots[i].take()).collect();
        for n in 0..g.nodes.len() {
            for &o in g.nodes[n].outputs.clone().iter().flatten() {
                g.values[o].producer = Some(n);
            }
        }
    }
    if !summary.domain.starts_with("ai.") || g.nodes.iter().any(|n| n.domain == ms) {
        m.meta.opsets.entry(ms).or_insert(1);
    }
    (m, summary)
}
