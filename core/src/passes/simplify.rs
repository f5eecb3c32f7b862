//! Local simplifications: no-op removal, Reshape/Transpose chains, Gemm/MatMul
//! normalisation, pooling rewrites.

use super::{Cx, Pass, f32_tensor, is_f32};
use crate::ir::{Attr, DType, Tensor};

pub struct RemoveNoops;

impl Pass for RemoveNoops {
    fn name(&self) -> &'static str {
        "remove-noops"
    }
    fn about(&self) -> &'static str {
        "Removes Identity, inference Dropout, and Reshape/Transpose/Cast that change nothing"
    }
    fn run(&self, cx: &mut Cx<'_>) {
        let g = cx.g;
        for (id, n) in cx.nodes() {
            if !n.domain.is_empty() {
                continue;
            }
            let (Some(x), Some(y)) = (n.input(0), n.outputs.first().copied().flatten()) else {
                continue;
            };
            let rule = match n.op.as_str() {
                "Identity" => "identity",
                // Inference Dropout passes its input through; its mask must be unused.
                "Dropout"
                    if cx.out(n) == Some(y) && n.attr_i("training_mode").unwrap_or(0) == 0 && n.input(2).is_none() =>
                {
                    "dropout"
                }
                "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "Expand" => {
                    if cx.same_shape(x, y) {
                        "noop-reshape"
                    } else {
                        continue;
                    }
                }
                "Transpose" => {
                    let Some(perm) = n.attr_ints("perm") else { continue };
                    if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
                        "noop-transpose"
                    } else {
                        continue;
                    }
                }
                "Cast" if g.values[x].dtype.is_some() && g.values[x].dtype == g.values[y].dtype => "noop-cast",
                _ => continue,
            };
            if cx.out(n) != Some(y) || !cx.can_replace(y, x) {
                continue;
            }
            let mut p = cx.patch(rule);
            p.remove.push(id);
            p.replace.push((y, x));
            cx.emit(p);
        }
    }
}

pub struct MergeReshapeTranspose;

impl Pass for MergeReshapeTranspose {
    fn name(&self) -> &'static str {
        "merge-reshape-transpose"
    }
    fn about(&self) -> &'static str {
        "Merges consecutive Reshapes into one and consecutive Transposes into one (or none)"
    }
    fn run(&self, cx: &mut Cx<'_>) {
        for (id, n) in cx.nodes() {
            if !n.domain.is_empty() {
                continue;
            }
            let Some(y) = cx.out(n) else { continue };
            match n.op.as_str() {
                "Reshape" => {
                    let Some((first_id, first)) = cx.producer_op(n.input(0), "Reshape") else {
                        continue;
                    };
                    let (Some(x), Some(out_shape)) = (first.input(0), cx.shape(Some(y))) else {
                        continue;
                    };
                    // A 0 in the new shape would mean "copy the input's dim" (empty tensors).
                    if out_shape.contains(&0) {
                        continue;
                    }
                    let mut p = cx.patch("reshape-reshape");
                    let dims: Vec<i64> = out_shape.iter().map(|&d| d as i64).collect();
                    let t = Tensor::I64(
                        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[dims.len()]), dims).unwrap_or_default(),
                    );
                    let shape = p.constant(format!("{}:shape", n.name), &t);
                    p.remove.push(id);
                    p.nodes.push(cx.node(
                        n.name.clone(),
                        "Reshape",
                        vec![Some(x), Some(shape)],
                        vec![Some(y)],
                        &[id, first_id],
                    ));
                    cx.emit(p);
                }
                "Transpose" => {
                    let Some((first_id, first)) = cx.producer_op(n.input(0), "Transpose") else {
                        continue;
                    };
                    let (Some(p1), Some(p2), Some(x)) = (first.attr_ints("perm"), n.attr_ints("perm"), first.input(0))
                    else {
                        continue;
                    };
                    if p1.len() != p2.len() {
                        continue;
                    }
                    // out[i] = mid[p2[i]] = in[p1[p2[i]]].
                    let Some(q) = p2
                        .iter()
                        .map(|&i| p1.get(i as usize).copied())
                        .collect::<Option<Vec<i64>>>()
                    else {
                        continue;
                    };
                    let mut p = cx.patch("transpose-transpose");
                    p.remove.push(id);
                    if q.iter().enumerate().all(|(i, &v)| v == i as i64) {
                        if !cx.can_replace(y, x) {
                            continue;
                        }
                        p.replace.push((y, x));
                    } else {
                        let mut node = cx.node(
                            n.name.clone(),
                            "Transpose",
                            vec![Some(x)],
                            vec![Some(y)],
                            &[id, first_id],
                        );
                        node.attrs.insert("perm".into(), Attr::Ints(q));
                        p.nodes.push(node);
                    }
                    cx.emit(p);
                }
                _ => {}
            }
        }
    }
}

pub struct NormalizeGemm;

impl Pass for NormalizeGemm {
    fn name(&self) -> &'static str {
        "normalize-gemm"
    }
    fn about(&self) -> &'static str {
        "MatMul of a 2-D input by constant weights becomes Gemm; Gemm's alpha and beta are folded into constant B and C"
    }
    fn run(&self, cx: &mut Cx<'_>) {
        for (id, n) in cx.nodes() {
            if !n.domain.is_empty() {
                continue;
            }
            let Some(y) = cx.out(n) else { continue };
            match n.op.as_str() {
                "MatMul" => {
                    let (Some(a), Some(b)) = (n.input(0), n.input(1)) else {
                        continue;
                    };
                    let Some(w) = cx.constant(b).filter(|w| is_f32(w) && w.shape().len() == 2) else {
                        continue;
                    };
                    if cx.shape(Some(a)).is_none_or(|s| s.len() != 2) || cx.g.values[a].dtype != Some(DType::F32) {
                        continue;
                    }
                    let _ = w;
                    let mut p = cx.patch("matmul-to-gemm");
                    p.remove.push(id);
                    p.nodes
                        .push(cx.node(n.name.clone(), "Gemm", vec![Some(a), Some(b)], vec![Some(y)], &[id]));
                    cx.emit(p);
                }
                "Gemm" => {
                    let alpha = f64::from(n.attr_f("alpha").unwrap_or(1.0));
                    let beta = f64::from(n.attr_f("beta").unwrap_or(1.0));
                    let b = n.input(1).and_then(|b| cx.constant(b)).filter(|t| is_f32(t));
                    let c = n.input(2).and_then(|c| cx.constant(c)).filter(|t| is_f32(t));
                    let fold_alpha = alpha != 1.0 && b.is_some();
                    let fold_beta = beta != 1.0 && (c.is_some() || n.input(2).is_none());
                    if !fold_alpha && !fold_beta {
                        continue;
                    }
                    let mut p = cx.patch("gemm-alpha-beta");
                    let mut node = n.clone();
                    node.origin = cx.origin(&[id]);
                    if fold_alpha && let Some(b) = b {
                        let v: Vec<f64> = b.to_f64().iter().map(|x| x * alpha).collect();
                        node.inputs[1] = Some(p.constant(format!("{}:B", n.name), &f32_tensor(b.shape(), v)));
                        node.attrs.remove("alpha");
                    }
                    if fold_beta {
                        if let Some(c) = c {
                            let v: Vec<f64> = c.to_f64().iter().map(|x| x * beta).collect();
                            node.inputs[2] = Some(p.constant(format!("{}:C", n.name), &f32_tensor(c.shape(), v)));
                        }
                        node.attrs.remove("beta");
                    }
                    p.remove.push(id);
                    p.nodes.push(node);
                    cx.emit(p);
                }
                _ => {}
            }
        }
    }
}

pub struct PoolRewrite;

impl Pass for PoolRewrite {
    fn name(&self) -> &'static str {
        "pool-rewrite"
    }
    fn about(&self) -> &'static str {
        "AveragePool becomes a depthwise Conv; ReduceMean over H and W becomes GlobalAveragePool"
    }
    fn run(&self, cx: &mut Cx<'_>) {
        for (id, n) in cx.nodes() {
            if !n.domain.is_empty() {
                continue;
            }
            let (Some(x), Some(y)) = (n.input(0), cx.out(n)) else {
                continue;
            };
            // Rank 4 with a known channel count; batch and spatial dims may be symbolic.
            let channels = match cx.g.values[x].shape.as_deref() {
                Some([_, crate::ir::Dim::Fixed(c), _, _]) => *c,
                _ => continue,
            };
            if cx.g.values[x].dtype != Some(DType::F32) {
                continue;
            }
            match n.op.as_str() {
                "AveragePool" => {
                    let Some(k) = n
                        .attr_ints("kernel_shape")
                        .filter(|k| k.len() == 2 && k.iter().all(|&d| (1..=64).contains(&d)))
                    else {
                        continue;
                    };
                    let pads = n.attr_ints("pads").unwrap_or(&[0, 0, 0, 0]);
                    let auto = n.attr_s("auto_pad").unwrap_or("NOTSET");
                    // Equivalent only when every window divides by the full kernel size.
                    let counts_pads = n.attr_i("count_include_pad").unwrap_or(0) != 0 || pads.iter().all(|&p| p == 0);
                    if n.attr_i("ceil_mode").unwrap_or(0) != 0 || auto != "NOTSET" || !counts_pads {
                        continue;
                    }
                    let c = channels;
                    let (kh, kw) = (k[0] as usize, k[1] as usize);
                    let w = f32_tensor(&[c, 1, kh, kw], vec![1.0 / (kh * kw) as f64; c * kh * kw]);
                    let mut p = cx.patch("avgpool-to-dwconv");
                    let wv = p.constant(format!("{}:W", n.name), &w);
                    let mut node = cx.node(n.name.clone(), "Conv", vec![Some(x), Some(wv)], vec![Some(y)], &[id]);
                    node.attrs.insert("group".into(), Attr::Int(c as i64));
                    node.attrs.insert("kernel_shape".into(), Attr::Ints(k.to_vec()));
                    for a in ["strides", "pads", "dilations"] {
                        if let Some(v) = n.attr_ints(a) {
                            node.attrs.insert(a.into(), Attr::Ints(v.to_vec()));
                        }
                    }
                    p.remove.push(id);
                    p.nodes.push(node);
                    cx.emit(p);
                }
                "ReduceMean" => {
                    let axes = match n.attr_ints("axes") {
                        Some(a) => a.to_vec(),
                        None => match n.input(1).and_then(|a| cx.constant(a)).and_then(Tensor::as_i64_vec) {
                            Some(a) => a,
                            None => continue,
                        },
                    };
                    let mut axes: Vec<i64> = axes.iter().map(|&a| if a < 0 { a + 4 } else { a }).collect();
                    axes.sort_unstable();
                    if axes != [2, 3] || n.attr_i("keepdims").unwrap_or(1) == 0 {
                        continue;
                    }
                    let mut p = cx.patch("reducemean-to-gap");
                    p.remove.push(id);
                    p.nodes
                        .push(cx.node(n.name.clone(), "GlobalAveragePool", vec![Some(x)], vec![Some(y)], &[id]));
                    cx.emit(p);
                }
                _ => {}
            }
        }
    }
}
