//! Cast, CastLike, QuantizeLinear and DequantizeLinear, for every dtype the IR knows.

use super::{OpResult, input, norm_axis, opt_input};
use crate::ir::small::{self, E8M0Round};
use crate::ir::{DType, Node, Tensor};
use crate::sim::OpCtx;
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

/// Converts f64 values into a tensor of `to` (floats rounded, integers truncated and saturated).
pub fn cast_f64(a: &ArrayD<f64>, to: DType) -> Result<Tensor, String> {
    Ok(match to {
        DType::F32 => Tensor::F32(a.mapv(|v| v as f32)),
        DType::F64 => Tensor::F64(a.clone()),
        DType::F16 => Tensor::F16(a.mapv(f16::from_f64)),
        DType::BF16 => Tensor::BF16(a.mapv(bf16::from_f64)),
        DType::I8 => Tensor::I8(a.mapv(|v| v as i8)),
        DType::U8 => Tensor::U8(a.mapv(|v| v as u8)),
        DType::I16 => Tensor::I16(a.mapv(|v| v as i16)),
        DType::U16 => Tensor::U16(a.mapv(|v| v as u16)),
        DType::I32 => Tensor::I32(a.mapv(|v| v as i32)),
        DType::I64 => Tensor::I64(a.mapv(|v| v as i64)),
        DType::U32 => Tensor::U32(a.mapv(|v| v as u32)),
        DType::U64 => Tensor::U64(a.mapv(|v| v as u64)),
        DType::Bool => Tensor::Bool(a.mapv(|v| v != 0.0)),
        DType::String => return Err("cast to string is not supported".into()),
        small_dt => Tensor::Small(small_dt, a.mapv(|v| small::encode(small_dt, v as f32, true))),
    })
}

/// Converts i64 values into an integer (or bool/float) tensor, wrapping like a C cast.
fn cast_i64(a: &ArrayD<i64>, to: DType) -> Result<Tensor, String> {
    Ok(match to {
        DType::I8 => Tensor::I8(a.mapv(|v| v as i8)),
        DType::U8 => Tensor::U8(a.mapv(|v| v as u8)),
        DType::I16 => Tensor::I16(a.mapv(|v| v as i16)),
        DType::U16 => Tensor::U16(a.mapv(|v| v as u16)),
        DType::I32 => Tensor::I32(a.mapv(|v| v as i32)),
        DType::I64 => Tensor::I64(a.clone()),
        DType::U32 => Tensor::U32(a.mapv(|v| v as u32)),
        DType::U64 => Tensor::U64(a.mapv(|v| v as u64)),
        DType::Bool => Tensor::Bool(a.mapv(|v| v != 0)),
        DType::I4 | DType::U4 | DType::I2 | DType::U2 => Tensor::Small(to, a.mapv(|v| small::wrap_int(to, v))),
        _ => cast_f64(&a.mapv(|v| v as f64), to)?,
    })
}

/// ONNX Cast semantics.
pub fn cast(t: &Tensor, to: DType, saturate: bool, round: E8M0Round) -> Result<Tensor, String> {
    if t.dtype() == to {
        return Ok(t.clone());
    }
    if to.is_small() && to.is_float() {
        let f = t.to_f32();
        return Ok(Tensor::Small(
            to,
            f.mapv(|v| {
                if to == DType::F8E8M0 {
                    small::encode_e8m0(v, saturate, round)
                } else {
                    small::encode(to, v, saturate)
                }
            }),
        ));
    }
    match t {
        // Floats into 4- and 2-bit integers truncate and then wrap, like numpy's astype.
        _ if matches!(to, DType::I4 | DType::U4 | DType::I2 | DType::U2) && t.dtype().is_float() => {
            cast_i64(&t.to_f64().mapv(|v| v as i64), to)
        }
        Tensor::F32(a) => match to {
            DType::F16 => Ok(Tensor::F16(a.mapv(f16::from_f32))),
            DType::BF16 => Ok(Tensor::BF16(a.mapv(bf16::from_f32))),
            _ => cast_f64(&a.mapv(f64::from), to),
        },
        Tensor::F64(a) => cast_f64(a, to),
        Tensor::F16(_) | Tensor::BF16(_) => cast_f64(&t.to_f64(), to),
        Tensor::Small(dt, _) if dt.is_float() => cast_f64(&t.to_f64(), to),
        Tensor::Small(dt, codes) => {
            let vals = codes.mapv(|c| small::decode(*dt, c) as i64);
            cast_i64(&vals, to)
        }
        Tensor::U64(a) if to.is_float() => cast_f64(&a.mapv(|v| v as f64), to),
        _ => {
            if to.is_float() {
                cast_f64(&t.to_f64(), to)
            } else {
                let ints = t.to_i64().ok_or("cannot cast this dtype")?;
                cast_i64(&ints, to)
            }
        }
    }
}

fn round_mode(node: &Node) -> E8M0Round {
    match node.attr_s("round_mode") {
        Some("down") => E8M0Round::Down,
        Some("nearest") => E8M0Round::Nearest,
        _ => E8M0Round::Up,
    }
}

/// The quantization axis; only checked when the scale is not a scalar.
fn param_axis(node: &Node, x: &Tensor, scale: &Tensor) -> Result<usize, String> {
    let axis = node.attr_i("axis").unwrap_or(1);
    if scale.len() <= 1 && scale.shape().len() <= 1 {
        return Ok(0);
    }
    norm_axis(axis, x.shape().len())
}

/// Expands a scale or zero point to the shape of `x` (scalar, per-axis or blocked).
fn expand_param(p: &ArrayD<f64>, shape: &[usize], axis: usize, block: usize) -> Result<ArrayD<f64>, String> {
    if p.len() == 1 && p.ndim() <= 1 {
        let v = p.iter().next().copied().unwrap_or(0.0);
        return Ok(ArrayD::from_elem(IxDyn(shape), v));
    }
    if p.ndim() == 1 && block == 0 {
        if p.len() != shape.get(axis).copied().unwrap_or(0) {
            return Err(format!(
                "per-axis parameter has {} values, axis {axis} has {:?}",
                p.len(),
                shape.get(axis)
            ));
        }
        let mut s = vec![1; shape.len()];
        s[axis] = p.len();
        let r = p.view().into_shape_with_order(IxDyn(&s)).map_err(|e| e.to_string())?;
        return Ok(r.broadcast(IxDyn(shape)).ok_or("broadcast failed")?.to_owned());
    }
    // Blocked: same rank, the axis dimension divided into blocks.
    if p.ndim() != shape.len() {
        return Err(format!(
            "blocked parameter rank {} differs from input rank {}",
            p.ndim(),
            shape.len()
        ));
    }
    let block = block.max(1);
    Ok(ArrayD::from_shape_fn(IxDyn(shape), |idx| {
        let mut j = idx.clone();
        j[axis] /= block;
        p.get(j).copied().unwrap_or(0.0)
    }))
}

fn quantize_linear(node: &Node, inputs: &[Option<&Tensor>]) -> Result<Tensor, String> {
    let x = input(inputs, 0)?;
    let scale = input(inputs, 1)?;
    let zp = opt_input(inputs, 2);
    let axis = param_axis(node, x, scale)?;
    let block = node.attr_i("block_size").unwrap_or(0).max(0) as usize;
    let saturate = node.attr_i("saturate").unwrap_or(1) != 0;
    let out_dt = match (zp, node.attr_i("output_dtype")) {
        (Some(z), _) => z.dtype(),
        (None, Some(code)) if code != 0 => DType::from_onnx(code as i32).ok_or("bad output_dtype")?,
        _ => DType::U8,
    };
    let xs = x.to_f64();
    let s = expand_param(&scale.to_f64(), x.shape(), axis, block)?;
    let z = match zp {
        Some(z) => expand_param(&z.to_f64(), x.shape(), axis, block)?,
        None => ArrayD::zeros(IxDyn(x.shape())),
    };
    // x / scale in the scale's precision (f32 for f32 scales), as the reference does.
    let scaled = ndarray::Zip::from(&xs).and(&s).map_collect(|&v, &sc| {
        if scale.dtype() == DType::F64 {
            v / sc
        } else {
            f64::from((v as f32) / (sc as f32))
        }
    });
    if out_dt.is_float() {
        let vals = ndarray::Zip::from(&scaled)
            .and(&z)
            .map_collect(|&v, &zz| (v + zz) as f32);
        return Ok(Tensor::Small(out_dt, vals.mapv(|v| small::encode(out_dt, v, saturate))));
    }
    let (lo, hi): (f64, f64) = match out_dt {
        DType::I8 => (-128.0, 127.0),
        DType::U8 => (0.0, 255.0),
        DType::I16 => (-32768.0, 32767.0),
        DType::U16 => (0.0, 65535.0),
        DType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
        DType::I4 => (-8.0, 7.0),
        DType::U4 => (0.0, 15.0),
        DType::I2 => (-2.0, 1.0),
        DType::U2 => (0.0, 3.0),
        other => return Err(format!("quantization to {other} is not supported")),
    };
    let q = ndarray::Zip::from(&scaled)
        .and(&z)
        .map_collect(|&v, &zz| (f64::from(small::round_half_even(v as f32)) + zz).clamp(lo, hi));
    cast_f64(&q, out_dt)
}

fn dequantize_linear(node: &Node, inputs: &[Option<&Tensor>]) -> Result<Tensor, String> {
    let x = input(inputs, 0)?;
    let scale = input(inputs, 1)?;
    let zp = opt_input(inputs, 2);
    let axis = param_axis(node, x, scale)?;
    let block = node.attr_i("block_size").unwrap_or(0).max(0) as usize;
    let xs = x.to_f64();
    let s = expand_param(&scale.to_f64(), x.shape(), axis, block)?;
    let z = match zp {
        Some(z) => expand_param(&z.to_f64(), x.shape(), axis, block)?,
        None => ArrayD::zeros(IxDyn(x.shape())),
    };
    let out_dt = match node.attr_i("output_dtype") {
        Some(code) if code != 0 => DType::from_onnx(code as i32).ok_or("bad output_dtype")?,
        _ => scale.dtype(),
    };
    // Widen before subtracting the zero point; multiply in the scale's precision.
    let y = ndarray::Zip::from(&xs).and(&s).and(&z).map_collect(|&v, &sc, &zz| {
        if out_dt == DType::F64 {
            (v - zz) * sc
        } else {
            f64::from(((v - zz) as f32) * (sc as f32))
        }
    });
    cast_f64(&y, out_dt)
}

/// Dispatches the quantization family; `None` if `op` is not one of them.
pub fn eval(op: &str, node: &Node, inputs: &[Option<&Tensor>], _ctx: &OpCtx) -> Option<OpResult> {
    let r = match op {
        "Cast" => (|| {
            let to = node.attr_i("to").ok_or("attribute 'to' is missing")?;
            let to = DType::from_onnx(to as i32).ok_or_else(|| format!("unknown dtype code {to}"))?;
            let saturate = node.attr_i("saturate").unwrap_or(1) != 0;
            cast(input(inputs, 0)?, to, saturate, round_mode(node))
        })(),
        "CastLike" => (|| {
            let saturate = node.attr_i("saturate").unwrap_or(1) != 0;
            cast(input(inputs, 0)?, input(inputs, 1)?.dtype(), saturate, round_mode(node))
        })(),
        "QuantizeLinear" => quantize_linear(node, inputs),
        "DequantizeLinear" => dequantize_linear(node, inputs),
        _ => return None,
    };
    Some(r.map(|t| vec![t]))
}
