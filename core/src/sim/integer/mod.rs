//! The integer reference executor: runs a legalized [`Program`] with the arithmetic of
//! LiteRT's reference kernels (`BuiltinRefOpResolver`) — int8 operands widened before
//! zero points are subtracted, int32 accumulators, `QuantizeMultiplier` multipliers with
//! the double-rounding fixed-point multiply, saturation, float32 look-up tables — one
//! kernel per op ([`kernels`]). Tensors keep the graph's layout; the arithmetic does not
//! depend on it.

pub mod fixed;
pub mod kernels;

use crate::program::{Extreme, FloatNode, FloatOp, IOp, IntType, OpKind, PoolKind, Program, QParams, quantize_code};
use rayon::prelude::*;

/// Every tensor's codes after a run (`None`: not computed).
pub struct Run {
    pub values: Vec<Option<Vec<i32>>>,
}

/// A run that cannot start or an op that cannot run; names the tensor or node.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("input {name}: expected {expected} elements (shape {shape:?}), got {got}")]
    InputSize {
        name: String,
        shape: Vec<usize>,
        expected: usize,
        got: usize,
    },
    #[error("input {name}: code {code} is outside the range of {ty}")]
    InputCode { name: String, code: i32, ty: String },
    #[error("expected {expected} inputs, got {got}")]
    InputCount { expected: usize, got: usize },
    #[error("node {node} ({op}): {message}")]
    Op {
        node: String,
        op: &'static str,
        message: String,
    },
}

/// An input as codes on its grid or as floats quantized as TFLite's QUANTIZE does.
pub enum Input {
    Codes(Vec<i32>),
    Float(Vec<f32>),
}

/// Runs `p` on one input per program input (in order).
pub fn run(p: &Program, inputs: Vec<Input>) -> Result<Run, RunError> {
    let mut values = prepare(p, inputs)?;
    for op in &p.ops {
        let outs = eval_op_all(p, op, &values).map_err(|message| RunError::Op {
            node: op.node.clone(),
            op: op.kind.name(),
            message,
        })?;
        for (&t, out) in op.outputs.iter().zip(outs) {
            values[t] = Some(out);
        }
    }
    Ok(Run { values })
}

/// The constants as i32 codes (int64 biases are read from the program by their kernels);
/// `None` for the other tensors.
pub fn constants(p: &Program) -> Vec<Option<Vec<i32>>> {
    p.tensors
        .iter()
        .map(|t| t.data.as_ref().map(|d| d.iter().map(|&c| c as i32).collect()))
        .collect()
}

/// Every tensor's codes before the first op: the constants, and the inputs (floats
/// quantized as TFLite's QUANTIZE does); `None` for the rest.
pub fn prepare(p: &Program, inputs: Vec<Input>) -> Result<Vec<Option<Vec<i32>>>, RunError> {
    if inputs.len() != p.inputs.len() {
        return Err(RunError::InputCount {
            expected: p.inputs.len(),
            got: inputs.len(),
        });
    }
    let mut values = constants(p);
    for (&t, x) in p.inputs.iter().zip(inputs) {
        let info = &p.tensors[t];
        let codes = match x {
            Input::Codes(c) => {
                let (lo, hi) = info.q.ty.range();
                if let Some(v) = c.iter().find(|&&v| v < lo || v > hi) {
                    return Err(RunError::InputCode {
                        name: info.name.clone(),
                        code: *v,
                        ty: format!("{:?}", info.q.ty),
                    });
                }
                c
            }
            Input::Float(f) if info.q.ty == IntType::Index => {
                if let Some(v) = f.iter().find(|v| v.fract() != 0.0 || v.abs() > 2_147_483_520.0) {
                    return Err(RunError::InputCode {
                        name: info.name.clone(),
                        code: *v as i32,
                        ty: format!("int32 (an index input holds {v}, which is not an int32 value)"),
                    });
                }
                f.iter().map(|&v| v as i32).collect()
            }
            Input::Float(f) => f.iter().map(|&v| quantize_code(v, &info.q)).collect(),
        };
        let expected: usize = info.shape.iter().product();
        if codes.len() != expected {
            return Err(RunError::InputSize {
                name: info.name.clone(),
                shape: info.shape.clone(),
                expected,
                got: codes.len(),
            });
        }
        values[t] = Some(codes);
    }
    Ok(values)
}

/// Per output channel, `QuantizeMultiplier(s_in · s_w[c] / s_out)` in double, as
/// `PopulateConvolutionQuantizationParams` computes it for CONV_2D, DEPTHWISE_CONV_2D and
/// TRANSPOSE_CONV.
pub(crate) fn channel_multipliers(x: &QParams, w: &QParams, y: &QParams) -> Vec<(i32, i32)> {
    w.scale
        .iter()
        .map(|&sw| fixed::quantize_multiplier(f64::from(x.s()) * f64::from(sw) / f64::from(y.s())))
        .collect()
}

/// MUL's `QuantizeMultiplier(s_a·s_b/s_out)`, the product and quotient in float32 as
/// `mul.cc` computes them.
pub fn mul_multiplier(a: &QParams, b: &QParams, y: &QParams) -> (i32, i32) {
    fixed::quantize_multiplier(f64::from(a.s() * b.s() / y.s()))
}

/// One op on the tensors' current codes: one code vector per output (only the float
/// fallback has more than one).
pub fn eval_op_all(p: &Program, op: &IOp, values: &[Option<Vec<i32>>]) -> Result<Vec<Vec<i32>>, String> {
    match &op.kind {
        OpKind::Float { op: FloatOp::Node(n) } => float_node(p, op, n, values),
        _ => Ok(vec![eval_op(p, op, values)?]),
    }
}

/// The float fallback: the node's one-node ONNX model run by the float32 simulator on
/// the dequantized inputs; outputs quantized onto their grids (float32 kept as bits,
/// indices checked to fit int32).
fn float_node(p: &Program, op: &IOp, n: &FloatNode, values: &[Option<Vec<i32>>]) -> Result<Vec<Vec<i32>>, String> {
    use crate::ir::{DType, Tensor};
    use ndarray::{ArrayD, IxDyn};
    let (model, _) = crate::import::onnx::from_bytes(
        bytes::Bytes::from(n.onnx.clone()),
        std::path::Path::new("."),
        std::path::Path::new(&op.node),
        &crate::import::LoadOptions::default(),
    )
    .map_err(|e| format!("its float model does not load: {e}"))?;
    let g = &model.graph;
    if g.inputs.len() != op.inputs.len() || g.outputs.len() != op.outputs.len() {
        return Err(format!(
            "its float model has {} inputs and {} outputs for {} and {}",
            g.inputs.len(),
            g.outputs.len(),
            op.inputs.len(),
            op.outputs.len()
        ));
    }
    let mut feeds = std::collections::HashMap::new();
    for (&gi, &t) in g.inputs.iter().zip(&op.inputs) {
        let it = &p.tensors[t];
        let codes = values[t]
            .as_deref()
            .ok_or_else(|| format!("input {} was not computed", it.name))?;
        let dim = IxDyn(&it.shape);
        let bad = |e: ndarray::ShapeError| format!("input {}: {e}", it.name);
        let tensor = match (it.q.ty, g.values[gi].dtype) {
            (IntType::Bool, _) => {
                Tensor::Bool(ArrayD::from_shape_vec(dim, codes.iter().map(|&c| c != 0).collect()).map_err(bad)?)
            }
            (IntType::Index, Some(DType::I64)) => {
                Tensor::I64(ArrayD::from_shape_vec(dim, codes.iter().map(|&c| i64::from(c)).collect()).map_err(bad)?)
            }
            (IntType::Index, _) => Tensor::I32(ArrayD::from_shape_vec(dim, codes.to_vec()).map_err(bad)?),
            (IntType::F32, _) => Tensor::F32(
                ArrayD::from_shape_vec(dim, codes.iter().map(|&c| f32::from_bits(c as u32)).collect()).map_err(bad)?,
            ),
            _ => Tensor::F32(ArrayD::from_shape_vec(dim, codes.iter().map(|&c| it.q.real(c)).collect()).map_err(bad)?),
        };
        feeds.insert(g.values[gi].name.clone(), tensor);
    }
    let sim = crate::sim::Executor::new(&model, 1).map_err(|e| e.to_string())?;
    let outs = sim.run(&feeds).map_err(|e| e.to_string())?;
    outs.into_iter()
        .zip(&op.outputs)
        .map(|((name, x), &t)| {
            let y = &p.tensors[t];
            let want: usize = y.shape.iter().product();
            if x.len() != want {
                return Err(format!("output {name}: {} values for shape {:?}", x.len(), y.shape));
            }
            Ok(match y.q.ty {
                IntType::Bool => x.to_f32().iter().map(|&v| i32::from(v != 0.0)).collect(),
                IntType::Index => {
                    let v = x
                        .to_i64()
                        .ok_or_else(|| format!("output {name}: {} is not an integer tensor", x.dtype()))?;
                    v.iter()
                        .map(|&c| i32::try_from(c).map_err(|_| format!("output {name}: {c} does not fit int32")))
                        .collect::<Result<_, _>>()?
                }
                IntType::F32 => x.to_f32().iter().map(|v| v.to_bits() as i32).collect(),
                _ => x.to_f32().iter().map(|&v| quantize_code(v, &y.q)).collect(),
            })
        })
        .collect()
}

/// One op on the tensors' current codes (its inputs must be computed).
pub fn eval_op(p: &Program, op: &IOp, values: &[Option<Vec<i32>>]) -> Result<Vec<i32>, String> {
    let t = |k: usize| &p.tensors[op.inputs[k]];
    let v = |k: usize| -> Result<&[i32], String> {
        values[op.inputs[k]]
            .as_deref()
            .ok_or_else(|| format!("input {} was not computed", p.tensors[op.inputs[k]].name))
    };
    let y = &p.tensors[op.outputs[0]];
    let (xq, yq) = (&t(0).q, &y.q);
    // A bias as stored (int32, or int64 under 16-bit activations).
    let bias = |k: usize| -> Result<&[i64], String> {
        t(k).data
            .as_deref()
            .ok_or_else(|| format!("bias {} is not constant", t(k).name))
    };
    let wide = xq.ty == IntType::I16;
    Ok(match &op.kind {
        OpKind::Conv {
            strides,
            dilations,
            pads,
            groups,
            act,
        } => {
            let w = t(1);
            let mults = channel_multipliers(xq, &w.q, yq);
            kernels::conv2d(
                &kernels::ConvGeom {
                    x: [t(0).shape[0], t(0).shape[1], t(0).shape[2], t(0).shape[3]],
                    w: [w.shape[0], w.shape[1], w.shape[2], w.shape[3]],
                    y: [y.shape[2], y.shape[3]],
                    strides: *strides,
                    dilations: *dilations,
                    pads: [pads[0], pads[1]],
                    groups: *groups,
                },
                v(0)?,
                v(1)?,
                bias(2)?,
                wide,
                xq.zp(),
                yq.zp(),
                &mults,
                kernels::act_range(*act, yq),
            )
        }
        OpKind::TransposeConv { strides, act } => {
            let w = t(1);
            let mults = channel_multipliers(xq, &w.q, yq);
            kernels::transpose_conv(
                v(0)?,
                [t(0).shape[0], t(0).shape[1], t(0).shape[2], t(0).shape[3]],
                v(1)?,
                [w.shape[0], w.shape[1], w.shape[2], w.shape[3]],
                bias(2)?,
                wide,
                [y.shape[2], y.shape[3]],
                *strides,
                xq.zp(),
                yq.zp(),
                &mults,
                kernels::act_range(*act, yq),
            )
        }
        OpKind::ResizeNearest => kernels::resize_nearest(v(0)?, &t(0).shape, &y.shape),
        OpKind::FullyConnected { act } => {
            let w = t(1);
            let eff: Vec<f64> =
                w.q.scale
                    .iter()
                    .map(|&sw| f64::from(xq.s()) * f64::from(sw) / f64::from(yq.s()))
                    .collect();
            kernels::fully_connected(
                v(0)?,
                v(1)?,
                bias(2)?,
                wide,
                w.shape[0],
                w.shape[1],
                xq.zp(),
                yq.zp(),
                &eff,
                kernels::act_range(*act, yq),
            )
        }
        OpKind::Add { act } | OpKind::Sub { act } => {
            let sub = matches!(op.kind, OpKind::Sub { .. });
            let add = kernels::AddParams::new(xq, &t(1).q, yq, kernels::act_range(*act, yq));
            kernels::broadcast2(v(0)?, &t(0).shape, v(1)?, &t(1).shape, &y.shape, |a, b| {
                add.apply(a, b, sub)
            })?
        }
        OpKind::Mul { act } => {
            let (q, s) = mul_multiplier(xq, &t(1).q, yq);
            let (lo, hi) = kernels::act_range(*act, yq);
            let (za, zb, zy) = (xq.zp(), t(1).q.zp(), yq.zp());
            kernels::broadcast2(v(0)?, &t(0).shape, v(1)?, &t(1).shape, &y.shape, |a, b| {
                (fixed::mbqm((a - za) * (b - zb), q, s) + zy).clamp(lo, hi)
            })?
        }
        OpKind::Mean { axes } => kernels::mean(v(0)?, &t(0).shape, axes, xq, yq),
        OpKind::Pool {
            kind,
            kernel,
            strides,
            pads,
            act,
        } => kernels::pool(
            v(0)?,
            &t(0).shape,
            &y.shape,
            *kernel,
            *strides,
            [pads[0], pads[1]],
            kernels::act_range(*act, yq),
            *kind == PoolKind::Max,
        ),
        OpKind::HardSwish if wide => return Err("TFLite's HARD_SWISH has no int16 kernel".into()),
        OpKind::HardSwish => {
            let hs = kernels::HardSwish::new(xq, yq)?;
            v(0)?.par_iter().map(|&a| hs.apply(a)).collect()
        }
        OpKind::Logistic | OpKind::Tanh if wide => {
            kernels::logistic_tanh_int16(v(0)?, xq.s(), matches!(op.kind, OpKind::Tanh))
        }
        OpKind::Logistic | OpKind::Tanh => {
            let table = kernels::lut_int8(xq, yq, matches!(op.kind, OpKind::Tanh));
            v(0)?.iter().map(|&a| table[(a + 128).clamp(0, 255) as usize]).collect()
        }
        OpKind::Softmax { beta } if wide => {
            let depth = *t(0).shape.last().unwrap_or(&1);
            kernels::softmax_int16(v(0)?, depth.max(1), *beta, xq.s())
        }
        OpKind::Softmax { beta } => {
            let depth = *t(0).shape.last().unwrap_or(&1);
            kernels::softmax(v(0)?, depth.max(1), *beta, xq.s())
        }
        OpKind::Reshape => v(0)?.to_vec(),
        OpKind::Transpose { perm } => kernels::transpose(v(0)?, &t(0).shape, perm),
        OpKind::Concat { axis } => {
            let parts: Vec<(&[i32], &[usize])> = (0..op.inputs.len())
                .map(|k| Ok((v(k)?, t(k).shape.as_slice())))
                .collect::<Result<_, String>>()?;
            kernels::concat(&parts, *axis)
        }
        OpKind::Slice { axes } => kernels::slice(v(0)?, &t(0).shape, axes),
        OpKind::BatchMatMul => {
            let real = f64::from(xq.s() * t(1).q.s()) / f64::from(yq.s());
            let (out, shape) = kernels::batch_matmul(
                v(0)?,
                &t(0).shape,
                v(1)?,
                &t(1).shape,
                (xq.zp(), t(1).q.zp(), yq.zp()),
                fixed::quantize_multiplier(real),
                yq.ty.range(),
                wide,
            )?;
            if shape != y.shape {
                return Err(format!("output shape {shape:?}, expected {:?}", y.shape));
            }
            out
        }
        OpKind::Pad { pads, mode } => kernels::pad(v(0)?, &t(0).shape, pads, *mode),
        OpKind::Reduce { which, axes } => kernels::reduce_extreme(v(0)?, &t(0).shape, axes, *which == Extreme::Max),
        OpKind::Sqrt => {
            let (lo, hi) = yq.ty.range();
            v(0)?
                .iter()
                .map(|&a| {
                    let d = xq.s() * (a - xq.zp()) as f32;
                    if d < 0.0 {
                        return Err(format!("input code {a} is below 0, where TFLite's SQRT fails"));
                    }
                    Ok(((d.sqrt() / yq.s()) as i32).saturating_add(yq.zp()).clamp(lo, hi))
                })
                .collect::<Result<_, String>>()?
        }
        OpKind::Rsqrt => {
            let zp = xq.zp();
            let below = |a: i32| format!("input code {a} is below the zero point {zp}, where TFLite's RSQRT fails");
            let x = v(0)?;
            if let Some(&a) = x.iter().find(|&&a| a < zp) {
                return Err(below(a));
            }
            if wide {
                let top = 32767.0 * yq.s();
                let table = kernels::lut_int16(xq, yq, |d| if d <= 0.0 { top } else { 1.0 / d.sqrt() });
                x.iter().map(|&a| kernels::lut16_lookup(a, &table)).collect()
            } else {
                kernels::rsqrt_int8(x, xq, yq)
            }
        }
        OpKind::SquaredDifference => {
            kernels::squared_difference(v(0)?, &t(0).shape, &t(0).q, v(1)?, &t(1).shape, &t(1).q, &y.shape, yq)?
        }
        OpKind::Log | OpKind::Exp if wide => {
            let table = if matches!(op.kind, OpKind::Log) {
                let floor = -32768.0 * yq.s();
                kernels::lut_int16(xq, yq, |d| if d <= 0.0 { floor } else { d.ln() })
            } else {
                kernels::lut_int16(xq, yq, f32::exp)
            };
            v(0)?.iter().map(|&a| kernels::lut16_lookup(a, &table)).collect()
        }
        OpKind::Log | OpKind::Exp => {
            let table = if matches!(op.kind, OpKind::Log) {
                let floor = (-128 - yq.zp()) as f32 * yq.s();
                kernels::lut_int8_with(xq, yq, |d| if d <= 0.0 { floor } else { d.ln() })
            } else {
                kernels::lut_int8_with(xq, yq, f32::exp)
            };
            v(0)?.iter().map(|&a| table[(a + 128).clamp(0, 255) as usize]).collect()
        }
        OpKind::Extremum { which } => kernels::broadcast2(v(0)?, &t(0).shape, v(1)?, &t(1).shape, &y.shape, |a, b| {
            which.pick(a, b)
        })?,
        OpKind::Gather { axis } => kernels::gather(v(0)?, &t(0).shape, *axis, v(1)?)?,
        OpKind::ArgExtreme { which, axis } => kernels::arg_extreme(v(0)?, &t(0).shape, *axis, *which),
        OpKind::BroadcastTo => {
            let x = v(0)?;
            kernels::broadcast2(x, &t(0).shape, &[0], &[1], &y.shape, |a, _| a)?
        }
        OpKind::Float { op: FloatOp::Node(n) } => {
            let mut outs = float_node(p, op, n, values)?;
            if outs.len() != 1 {
                return Err(format!("{} makes {} outputs", n.op, outs.len()));
            }
            outs.remove(0)
        }
        OpKind::Float { op: fop } => {
            let ins: Vec<(Vec<f32>, &[usize])> = (0..op.inputs.len())
                .map(|k| Ok((v(k)?.iter().map(|&c| t(k).q.real(c)).collect(), t(k).shape.as_slice())))
                .collect::<Result<_, String>>()?;
            let out = kernels::float_op(fop, &ins, &y.shape)?;
            match y.q.ty {
                IntType::F32 => out.iter().map(|x| x.to_bits() as i32).collect(),
                IntType::Bool => out.iter().map(|&x| i32::from(x != 0.0)).collect(),
                IntType::Index => out.iter().map(|&x| x as i32).collect(),
                _ => out.iter().map(|&x| quantize_code(x, yq)).collect(),
            }
        }
        OpKind::Relu { act } => {
            // ReluPrepare divides in float32, then widens (unlike QUANTIZE's double quotient).
            let (q, s) = fixed::quantize_multiplier(f64::from(xq.s() / yq.s()));
            let (lo, hi) = kernels::act_range(*act, yq);
            let (zi, zo) = (xq.zp(), yq.zp());
            v(0)?
                .iter()
                .map(|&a| (fixed::mbqm(a - zi, q, s) + zo).clamp(lo, hi))
                .collect()
        }
        OpKind::Requantize => {
            let (q, s) = fixed::quantize_multiplier(f64::from(xq.s()) / f64::from(yq.s()));
            let (lo, hi) = yq.ty.range();
            let (zi, zo) = (xq.zp(), yq.zp());
            v(0)?
                .iter()
                .map(|&a| (fixed::mbqm(a - zi, q, s) + zo).clamp(lo, hi))
                .collect()
        }
    })
}
