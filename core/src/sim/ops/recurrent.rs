//! Recurrent layers (LSTM).

use super::elementwise::sigmoid;
use super::linalg::{Mat, sgemm};
use super::{OpResult, input, opt_input};
use crate::ir::{Node, Tensor};
use crate::sim::OpCtx;
use ndarray::{ArrayD, IxDyn};

#[derive(Clone, Copy)]
enum Act {
    Sigmoid,
    Tanh,
    Relu,
    HardSigmoid(f32, f32),
}

impl Act {
    fn parse(name: &str, alpha: Option<f32>, beta: Option<f32>) -> Result<Self, String> {
        Ok(match name {
            "Sigmoid" => Self::Sigmoid,
            "Tanh" => Self::Tanh,
            "Relu" => Self::Relu,
            "HardSigmoid" => Self::HardSigmoid(alpha.unwrap_or(0.2), beta.unwrap_or(0.5)),
            other => return Err(format!("LSTM activation {other} is not supported")),
        })
    }
    fn apply(self, x: f32) -> f32 {
        match self {
            Self::Sigmoid => sigmoid(x),
            Self::Tanh => x.tanh(),
            Self::Relu => x.max(0.0),
            Self::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
        }
    }
}

fn lstm(node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> OpResult {
    let x = input(inputs, 0)?.to_f32();
    let w = input(inputs, 1)?.to_f32();
    let r = input(inputs, 2)?.to_f32();
    let bias = opt_input(inputs, 3).map(Tensor::to_f32);
    let seq_lens = opt_input(inputs, 4).and_then(Tensor::as_i64_vec);
    let h0 = opt_input(inputs, 5).map(Tensor::to_f32);
    let c0 = opt_input(inputs, 6).map(Tensor::to_f32);
    let peep = opt_input(inputs, 7).map(Tensor::to_f32);
    let hidden = node
        .attr_i("hidden_size")
        .map_or_else(|| r.shape().last().copied().unwrap_or(0), |v| v as usize);
    let layout = node.attr_i("layout").unwrap_or(0);
    let direction = node.attr_s("direction").unwrap_or("forward");
    let dirs = if direction == "bidirectional" { 2 } else { 1 };
    let clip = node.attr_f("clip");
    let input_forget = node.attr_i("input_forget").unwrap_or(0) != 0;
    let x = if layout == 1 {
        x.permuted_axes(IxDyn(&[1, 0, 2])).as_standard_layout().into_owned()
    } else {
        x
    };
    if x.ndim() != 3 || w.ndim() != 3 || r.ndim() != 3 {
        return Err("X, W and R must be 3-D".into());
    }
    let (seq, batch, isz) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let h = hidden;
    if w.shape() != [dirs, 4 * h, isz] || r.shape() != [dirs, 4 * h, h] {
        return Err(format!(
            "W {:?} / R {:?} do not fit hidden size {h}",
            w.shape(),
            r.shape()
        ));
    }
    let names: Vec<String> = match node.attr("activations") {
        Some(crate::ir::Attr::Strings(v)) => v.clone(),
        _ => ["Sigmoid", "Tanh", "Tanh"].iter().map(ToString::to_string).collect(),
    };
    let alphas = node.attr_floats("activation_alpha").unwrap_or(&[]);
    let betas = node.attr_floats("activation_beta").unwrap_or(&[]);
    let acts: Vec<Act> = names
        .iter()
        .enumerate()
        .map(|(i, n)| Act::parse(n, alphas.get(i).copied(), betas.get(i).copied()))
        .collect::<Result<_, _>>()?;
    let xs = x.as_standard_layout();
    let xd = xs.as_slice().ok_or("layout")?;
    let mut y = vec![0f32; seq * dirs * batch * h];
    let mut yh = vec![0f32; dirs * batch * h];
    let mut yc = vec![0f32; dirs * batch * h];
    for d in 0..dirs {
        let (fa, ga, ha) = (
            acts[(3 * d) % acts.len()],
            acts[(3 * d + 1) % acts.len()],
            acts[(3 * d + 2) % acts.len()],
        );
        let wd: Vec<f32> = w.index_axis(ndarray::Axis(0), d).iter().copied().collect();
        let rd: Vec<f32> = r.index_axis(ndarray::Axis(0), d).iter().copied().collect();
        let b: Vec<f32> = match &bias {
            Some(bb) => {
                let row: Vec<f32> = bb.index_axis(ndarray::Axis(0), d).iter().copied().collect();
                (0..4 * h).map(|i| row[i] + row[i + 4 * h]).collect()
            }
            None => vec![0.0; 4 * h],
        };
        let p: Vec<f32> = match &peep {
            Some(pp) => pp.index_axis(ndarray::Axis(0), d).iter().copied().collect(),
            None => vec![0.0; 3 * h],
        };
        let mut hs: Vec<f32> = match &h0 {
            Some(t) => t.index_axis(ndarray::Axis(0), d).iter().copied().collect(),
            None => vec![0.0; batch * h],
        };
        let mut cs: Vec<f32> = match &c0 {
            Some(t) => t.index_axis(ndarray::Axis(0), d).iter().copied().collect(),
            None => vec![0.0; batch * h],
        };
        let mut gates = vec![0f32; batch * 4 * h];
        for step in 0..seq {
            let t = if d == 1 || direction == "reverse" {
                seq - 1 - step
            } else {
                step
            };
            let xt = &xd[t * batch * isz..(t + 1) * batch * isz];
            gates.iter_mut().enumerate().for_each(|(i, g)| *g = b[i % (4 * h)]);
            sgemm(
                batch,
                4 * h,
                isz,
                Mat::rows(xt, isz),
                Mat::transposed(&wd, isz),
                &mut gates,
                true,
                ctx.threads,
            );
            sgemm(
                batch,
                4 * h,
                h,
                Mat::rows(&hs, h),
                Mat::transposed(&rd, h),
                &mut gates,
                true,
                ctx.threads,
            );
            for bi in 0..batch {
                if let Some(sl) = &seq_lens
                    && (t as i64) >= sl.get(bi).copied().unwrap_or(seq as i64)
                {
                    continue;
                }
                let g = &mut gates[bi * 4 * h..(bi + 1) * 4 * h];
                if let Some(cl) = clip {
                    for v in g.iter_mut() {
                        *v = v.clamp(-cl, cl);
                    }
                }
                for j in 0..h {
                    let cprev = cs[bi * h + j];
                    let f = fa.apply(g[2 * h + j] + p[2 * h + j] * cprev);
                    let i = if input_forget {
                        1.0 - f
                    } else {
                        fa.apply(g[j] + p[j] * cprev)
                    };
                    let cc = ga.apply(g[3 * h + j]);
                    let c = f * cprev + i * cc;
                    let o = fa.apply(g[h + j] + p[h + j] * c);
                    let hv = o * ha.apply(c);
                    cs[bi * h + j] = c;
                    hs[bi * h + j] = hv;
                }
            }
            for bi in 0..batch {
                let valid = seq_lens
                    .as_ref()
                    .is_none_or(|sl| (t as i64) < sl.get(bi).copied().unwrap_or(seq as i64));
                for j in 0..h {
                    y[((t * dirs + d) * batch + bi) * h + j] = if valid { hs[bi * h + j] } else { 0.0 };
                }
            }
        }
        yh[d * batch * h..(d + 1) * batch * h].copy_from_slice(&hs);
        yc[d * batch * h..(d + 1) * batch * h].copy_from_slice(&cs);
    }
    let mk = |shape: &[usize], v: Vec<f32>| ArrayD::from_shape_vec(IxDyn(shape), v).map_err(|e| e.to_string());
    let mut y = mk(&[seq, dirs, batch, h], y)?;
    let mut yh = mk(&[dirs, batch, h], yh)?;
    let mut yc = mk(&[dirs, batch, h], yc)?;
    if layout == 1 {
        y = y.permuted_axes(IxDyn(&[2, 0, 1, 3])).as_standard_layout().into_owned();
        yh = yh.permuted_axes(IxDyn(&[1, 0, 2])).as_standard_layout().into_owned();
        yc = yc.permuted_axes(IxDyn(&[1, 0, 2])).as_standard_layout().into_owned();
    }
    Ok(vec![Tensor::F32(y), Tensor::F32(yh), Tensor::F32(yc)])
}

/// Dispatches recurrent ops; `None` if `op` is not one of them.
pub fn eval(op: &str, node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Option<OpResult> {
    Some(match op {
        "LSTM" => lstm(node, inputs, ctx),
        _ => return None,
    })
}
