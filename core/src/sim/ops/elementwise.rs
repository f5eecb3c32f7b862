//! Element-wise ops: unary math and activations, broadcasting binary ops, comparisons,
//! logic, Where, Clip and the variadic Max/Min/Sum/Mean.

use super::{OpResult, broadcast_shapes, f32_as, input, opt_input};
use crate::ir::{Node, Tensor};
use crate::sim::OpCtx;
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn, Zip};

const PAR_MIN: usize = 1 << 15;

/// Applies `f` to `a` and `b` broadcast together.
pub fn bcast<A, B, C>(a: &ArrayD<A>, b: &ArrayD<B>, f: impl Fn(A, B) -> C + Sync + Send) -> Result<ArrayD<C>, String>
where
    A: Copy + Send + Sync,
    B: Copy + Send + Sync,
    C: Send,
{
    if a.shape() == b.shape()
        && let (Some(x), Some(y)) = (a.as_slice(), b.as_slice())
    {
        let v: Vec<C> = if x.len() >= PAR_MIN {
            use rayon::prelude::*;
            x.par_iter().zip(y.par_iter()).map(|(&p, &q)| f(p, q)).collect()
        } else {
            x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect()
        };
        return ArrayD::from_shape_vec(IxDyn(a.shape()), v).map_err(|e| e.to_string());
    }
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    if b.len() == 1 && shape.as_slice() == a.shape() {
        let q = *b.iter().next().ok_or("empty operand")?;
        return Ok(map_par(a, |p| f(p, q)));
    }
    if a.len() == 1 && shape.as_slice() == b.shape() {
        let p = *a.iter().next().ok_or("empty operand")?;
        return Ok(map_par(b, |q| f(p, q)));
    }
    // One operand repeated along leading axes only (a bias [C] against [.., C]): whole
    // runs of it against contiguous runs of the other.
    if shape.as_slice() == a.shape()
        && is_trailing(b.shape(), a.shape())
        && let (Some(x), Some(y)) = (a.as_slice(), b.as_slice())
        && !y.is_empty()
    {
        let v: Vec<C> = x
            .chunks(y.len())
            .flat_map(|c| c.iter().zip(y).map(|(&p, &q)| f(p, q)))
            .collect();
        return ArrayD::from_shape_vec(IxDyn(&shape), v).map_err(|e| e.to_string());
    }
    if shape.as_slice() == b.shape()
        && is_trailing(a.shape(), b.shape())
        && let (Some(x), Some(y)) = (a.as_slice(), b.as_slice())
        && !x.is_empty()
    {
        let v: Vec<C> = y
            .chunks(x.len())
            .flat_map(|c| x.iter().zip(c).map(|(&p, &q)| f(p, q)))
            .collect();
        return ArrayD::from_shape_vec(IxDyn(&shape), v).map_err(|e| e.to_string());
    }
    let va = a.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    let vb = b.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    let z = Zip::from(&va).and(&vb);
    Ok(if va.len() >= PAR_MIN {
        z.par_map_collect(|&p, &q| f(p, q))
    } else {
        z.map_collect(|&p, &q| f(p, q))
    })
}

/// Whether `small`, less its leading 1s, is the trailing part of `big`'s shape (so that it
/// repeats whole along `big`'s leading axes).
fn is_trailing(small: &[usize], big: &[usize]) -> bool {
    let lead = small.iter().take_while(|&&d| d == 1).count();
    let tail = &small[lead..];
    tail.len() <= big.len() && big[big.len() - tail.len()..] == *tail
}

/// Maps every element, in parallel for large arrays.
pub fn map_par<A: Copy + Send + Sync, C: Send>(a: &ArrayD<A>, f: impl Fn(A) -> C + Sync + Send) -> ArrayD<C> {
    if a.len() >= PAR_MIN {
        if let Some(x) = a.as_slice() {
            use rayon::prelude::*;
            let v: Vec<C> = x.par_iter().map(|&p| f(p)).collect();
            if let Ok(r) = ArrayD::from_shape_vec(IxDyn(a.shape()), v) {
                return r;
            }
        }
        return Zip::from(a).par_map_collect(|&p| f(p));
    }
    a.mapv(f)
}

/// Maps a float tensor with an f32 function (f64 computed in f64 through `f64_f`).
fn float_unary(t: &Tensor, f: impl Fn(f32) -> f32 + Sync + Send, f64_f: impl Fn(f64) -> f64) -> Result<Tensor, String> {
    Ok(match t {
        Tensor::F32(a) => Tensor::F32(map_par(a, f)),
        Tensor::F64(a) => Tensor::F64(a.mapv(f64_f)),
        Tensor::F16(a) => Tensor::F16(a.mapv(|x| f16::from_f32(f(x.to_f32())))),
        Tensor::BF16(a) => Tensor::BF16(a.mapv(|x| bf16::from_f32(f(x.to_f32())))),
        other => return Err(format!("expected a float tensor, got {}", other.dtype())),
    })
}

/// Same function for f32 and f64 through a generic closure.
macro_rules! unary {
    ($t:expr, |$x:ident| $body:expr) => {
        float_unary($t, |$x: f32| $body, |$x: f64| $body)
    };
}

fn erf64(x: f64) -> f64 {
    // Abramowitz-Stegun 7.1.26 is too coarse; use a series/continued-fraction split.
    if x.abs() < 2.5 {
        let mut sum = x;
        let mut term = x;
        let x2 = x * x;
        let mut n = 0.0;
        loop {
            n += 1.0;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() || n > 200.0 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc continued fraction (Lentz) for large |x|.
        let ax = x.abs();
        let mut f = ax;
        let mut c = ax;
        let mut d = 0.0;
        for i in 1..60 {
            let an = f64::from(i) / 2.0;
            d = ax + an * d;
            d = 1.0 / d;
            c = ax + an / c;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        let erfc = (-ax * ax).exp() / (f * std::f64::consts::PI.sqrt());
        (1.0 - erfc).copysign(x)
    }
}

/// erf in float32 within about 1 ulp, branch-free so that loops over it vectorize: Norbert
/// Juffa's minimax polynomials, `x·p(x²)` below |x| = 0.9277 and `1 − e^{q(|x|)}` above
/// (both computed, one selected).
#[inline(always)]
fn erf_poly<const FMA: bool>(a: f32) -> f32 {
    use crate::sim::simd::madd;
    let t = a.abs();
    // erf(4) rounds to 1 in float32; the clamp keeps the polynomial away from overflow.
    let t = if t > 4.0 { 4.0 } else { t };
    let s = t * t;
    let mut r = madd::<FMA>(3.831_971_3e-4, -1.728_534_7e-5, t);
    let u = madd::<FMA>(2.425_462_2e-2, -3.883_964_4e-3, t);
    r = madd::<FMA>(u, r, s);
    r = madd::<FMA>(-1.067_778_8e-1, r, t);
    r = madd::<FMA>(-6.348_467e-1, r, t);
    r = madd::<FMA>(-1.287_175_1e-1, r, t);
    r = madd::<FMA>(-t, r, t);
    let big = (1.0 - crate::sim::simd::exp_approx_by::<FMA>(r)).copysign(a);
    let mut p = -5.967_617e-4_f32;
    p = madd::<FMA>(4.991_194_2e-3, p, s);
    p = madd::<FMA>(-2.676_813_5e-2, p, s);
    p = madd::<FMA>(1.128_199_3e-1, p, s);
    p = madd::<FMA>(-3.761_253_4e-1, p, s);
    p = madd::<FMA>(1.283_791_7e-1, p, s);
    let small = madd::<FMA>(a, p, a);
    if t > 0.927_734_4 { big } else { small }
}

/// erf in float32 (see [`erf_poly`]).
pub fn erf(x: f32) -> f32 {
    erf_poly::<false>(x)
}

#[inline(always)]
fn gelu_poly<const FMA: bool>(x: f32) -> f32 {
    0.5 * x * (1.0 + erf_poly::<FMA>(x * std::f32::consts::FRAC_1_SQRT_2))
}

#[inline(always)]
fn erf_slice_impl<const FMA: bool>(s: &mut [f32], gelu: bool) {
    if gelu {
        for v in s.iter_mut() {
            *v = gelu_poly::<FMA>(*v);
        }
    } else {
        for v in s.iter_mut() {
            *v = erf_poly::<FMA>(*v);
        }
    }
}

crate::simd_dispatch!(fn erf_slice(s: &mut [f32], gelu: bool) => erf_slice_impl);

/// Erf (or exact GELU with `gelu`) of every element, vectorized, in parallel for large slices.
fn erf_par(data: &mut [f32], gelu: bool) {
    if data.len() >= PAR_MIN {
        use rayon::prelude::*;
        data.par_chunks_mut(1 << 14).for_each(|c| erf_slice(c, gelu));
    } else {
        erf_slice(data, gelu);
    }
}

/// [`erf_par`] into a new float32 array.
fn erf_map(a: &ArrayD<f32>, gelu: bool) -> ArrayD<f32> {
    let mut y = a.as_standard_layout().into_owned();
    if let Some(d) = y.as_slice_mut() {
        erf_par(d, gelu);
    }
    y
}

fn gelu(x: f32, tanh_approx: bool) -> f32 {
    if tanh_approx {
        let c = (2.0f32 / std::f32::consts::PI).sqrt();
        0.5 * x * (1.0 + (c * (x + 0.044_715 * x * x * x)).tanh())
    } else {
        gelu_poly::<false>(x)
    }
}

fn gelu64(x: f64, tanh_approx: bool) -> f64 {
    if tanh_approx {
        let c = (2.0f64 / std::f64::consts::PI).sqrt();
        0.5 * x * (1.0 + (c * (x + 0.044_715 * x * x * x)).tanh())
    } else {
        0.5 * x * (1.0 + erf64(x / std::f64::consts::SQRT_2))
    }
}

/// Round half to even.
fn round_even<F: num_traits::Float>(x: F) -> F {
    let r = x.round();
    let half = F::from(0.5).unwrap_or_else(F::zero);
    if (x - x.trunc()).abs() == half {
        let two = F::one() + F::one();
        two * (x / two).round()
    } else {
        r
    }
}

/// `y` clamped to [0, 1] by comparisons (NaN stays NaN, and the loop vectorizes).
#[inline(always)]
fn unit(y: f32) -> f32 {
    let y = if y < 0.0 { 0.0 } else { y };
    if y > 1.0 { 1.0 } else { y }
}

crate::simd_dispatch!(fn act_slice(a: Activation, s: &mut [f32]) => act_slice_impl);

#[inline(always)]
fn act_slice_impl<const FMA: bool>(a: Activation, s: &mut [f32]) {
    macro_rules! each {
        ($f:expr) => {{
            let f = $f;
            for v in s.iter_mut() {
                *v = f(*v);
            }
        }};
    }
    match a {
        Activation::Relu => each!(|x: f32| x.max(0.0)),
        Activation::Clip(lo, hi) => each!(|x: f32| x.max(lo).min(hi)),
        Activation::LeakyRelu(al) => each!(|x: f32| if x < 0.0 { al * x } else { x }),
        Activation::HardSigmoid(al, be) => each!(|x: f32| unit(al * x + be)),
        Activation::HardSwish => each!(|x: f32| x * unit(x / 6.0 + 0.5)),
        Activation::Sigmoid => each!(sigmoid_by::<FMA>),
        Activation::Tanh => each!(|x: f32| x.tanh()),
        Activation::Silu => each!(|x: f32| x * sigmoid_by::<FMA>(x)),
    }
}

/// A scalar activation applied by fused kernels (Conv + Relu and the like).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    Relu,
    Clip(f32, f32),
    LeakyRelu(f32),
    HardSigmoid(f32, f32),
    HardSwish,
    Sigmoid,
    Tanh,
    /// `x · sigmoid(x)` (SiLU, Swish).
    Silu,
}

impl Activation {
    #[inline]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Self::Relu => x.max(0.0),
            Self::Clip(lo, hi) => x.max(lo).min(hi),
            Self::LeakyRelu(a) => {
                if x < 0.0 {
                    a * x
                } else {
                    x
                }
            }
            Self::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
            Self::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
            Self::Sigmoid => sigmoid(x),
            Self::Tanh => x.tanh(),
            Self::Silu => x * sigmoid(x),
        }
    }

    /// Applies the activation to every element, the variant chosen once outside the loop
    /// so that the loop vectorizes.
    pub fn apply_slice(self, s: &mut [f32]) {
        act_slice(self, s);
    }

    /// The activation named by a fused node's attributes (com.microsoft `FusedConv` with
    /// `activation_params`, `FusedGemm` with `activation_alpha`/`activation_beta`; plus `Silu`).
    pub fn from_attrs(node: &Node) -> Result<Option<Self>, String> {
        let Some(name) = node.attr_s("activation") else {
            return Ok(None);
        };
        // FusedConv lists the parameters in `activation_params`; FusedGemm names them
        // `activation_alpha` and `activation_beta`.
        let gemm_params: Vec<f32> = ["activation_alpha", "activation_beta"]
            .iter()
            .map_while(|k| node.attr_f(k))
            .collect();
        let p = if node.op == "FusedGemm" {
            gemm_params.as_slice()
        } else {
            node.attr_floats("activation_params").unwrap_or(&[])
        };
        let at = |i: usize, d: f32| p.get(i).copied().unwrap_or(d);
        Ok(Some(match name {
            "Relu" => Self::Relu,
            "Clip" => Self::Clip(at(0, f32::MIN), at(1, f32::MAX)),
            "LeakyRelu" => Self::LeakyRelu(at(0, 0.01)),
            "HardSigmoid" => Self::HardSigmoid(at(0, 0.2), at(1, 0.5)),
            "HardSwish" => Self::HardSwish,
            "Sigmoid" => Self::Sigmoid,
            "Tanh" => Self::Tanh,
            "Silu" => Self::Silu,
            other => return Err(format!("activation '{other}' is not supported")),
        }))
    }
}

#[inline]
pub fn sigmoid(x: f32) -> f32 {
    sigmoid_by::<false>(x)
}

/// [`sigmoid`], its exp in fused multiply-adds under `FMA` (see
/// [`crate::sim::simd::exp_approx_by`]).
#[inline(always)]
fn sigmoid_by<const FMA: bool>(x: f32) -> f32 {
    // Branch-free so that loops over it vectorize; exp saturates instead of overflowing.
    1.0 / (1.0 + crate::sim::simd::exp_approx_by::<FMA>(-x))
}

fn unary_op(op: &str, node: &Node, x: &Tensor) -> Option<Result<Tensor, String>> {
    let alpha = |d: f32| node.attr_f("alpha").unwrap_or(d);
    let r = match op {
        "Sqrt" => unary!(x, |v| v.sqrt()),
        "Exp" => unary!(x, |v| v.exp()),
        "Log" => unary!(x, |v| v.ln()),
        "Reciprocal" => unary!(x, |v| 1.0 / v),
        "Tanh" => unary!(x, |v| v.tanh()),
        "Sin" => unary!(x, |v| v.sin()),
        "Cos" => unary!(x, |v| v.cos()),
        "Tan" => unary!(x, |v| v.tan()),
        "Asin" => unary!(x, |v| v.asin()),
        "Acos" => unary!(x, |v| v.acos()),
        "Atan" => unary!(x, |v| v.atan()),
        "Sinh" => unary!(x, |v| v.sinh()),
        "Cosh" => unary!(x, |v| v.cosh()),
        "Asinh" => unary!(x, |v| v.asinh()),
        "Acosh" => unary!(x, |v| v.acosh()),
        "Atanh" => unary!(x, |v| v.atanh()),
        "Ceil" => unary!(x, |v| v.ceil()),
        "Floor" => unary!(x, |v| v.floor()),
        "Round" => unary!(x, |v| round_even(v)),
        "Erf" => match x {
            Tensor::F32(a) => Ok(Tensor::F32(erf_map(a, false))),
            _ => float_unary(x, erf, erf64),
        },
        "Sigmoid" => float_unary(x, sigmoid, |v| 1.0 / (1.0 + (-v).exp())),
        "Softplus" => unary!(x, |v| if v > 20.0 { v } else { v.exp().ln_1p() }),
        "Softsign" => unary!(x, |v| v / (1.0 + v.abs())),
        "Mish" => unary!(x, |v| v * (if v > 20.0 { v } else { v.exp().ln_1p() }).tanh()),
        // max/min, not clamp: a NaN input gives 0 · NaN as onnxruntime's kernel does.
        #[expect(clippy::manual_clamp, reason = "clamp would propagate NaN differently")]
        "HardSwish" => unary!(x, |v| v * (v / 6.0 + 0.5).max(0.0).min(1.0)),
        "Relu" => match x {
            Tensor::F32(_) | Tensor::F64(_) | Tensor::F16(_) | Tensor::BF16(_) => unary!(x, |v| v.max(0.0)),
            _ => int_unary(x, |v| v.max(0), |v| v),
        },
        "LeakyRelu" => {
            let a = alpha(0.01);
            float_unary(
                x,
                |v| if v < 0.0 { a * v } else { v },
                |v| if v < 0.0 { f64::from(a) * v } else { v },
            )
        }
        "ThresholdedRelu" => {
            let a = alpha(1.0);
            float_unary(
                x,
                |v| if v > a { v } else { 0.0 },
                |v| if v > f64::from(a) { v } else { 0.0 },
            )
        }
        "Elu" => {
            let a = alpha(1.0);
            float_unary(
                x,
                |v| if v < 0.0 { a * (v.exp() - 1.0) } else { v },
                |v| {
                    if v < 0.0 { f64::from(a) * (v.exp() - 1.0) } else { v }
                },
            )
        }
        "Celu" => {
            let a = alpha(1.0);
            float_unary(
                x,
                |v| v.max(0.0) + (a * ((v / a).exp() - 1.0)).min(0.0),
                |v| {
                    let a = f64::from(a);
                    v.max(0.0) + (a * ((v / a).exp() - 1.0)).min(0.0)
                },
            )
        }
        "Selu" => {
            let a = alpha(1.673_263_2);
            let g = node.attr_f("gamma").unwrap_or(1.050_701);
            float_unary(
                x,
                |v| if v > 0.0 { g * v } else { g * (a * v.exp() - a) },
                |v| {
                    let (a, g) = (f64::from(a), f64::from(g));
                    if v > 0.0 { g * v } else { g * (a * v.exp() - a) }
                },
            )
        }
        "HardSigmoid" => {
            let a = alpha(0.2);
            let b = node.attr_f("beta").unwrap_or(0.5);
            float_unary(
                x,
                |v| (a * v + b).clamp(0.0, 1.0),
                |v| (f64::from(a) * v + f64::from(b)).clamp(0.0, 1.0),
            )
        }
        "Gelu" => {
            let t = node.attr_s("approximate") == Some("tanh");
            match x {
                Tensor::F32(a) if !t => Ok(Tensor::F32(erf_map(a, true))),
                _ => float_unary(x, |v| gelu(v, t), |v| gelu64(v, t)),
            }
        }
        // com.microsoft QuickGelu: x · sigmoid(alpha · x); alpha = 1 is SiLU.
        "QuickGelu" => {
            let a = node.attr_f("alpha").unwrap_or(1.702);
            let a64 = f64::from(a);
            float_unary(x, |v| v * sigmoid(a * v), |v| v / (1.0 + (-a64 * v).exp()))
        }
        "Abs" => match x {
            Tensor::F32(_) | Tensor::F64(_) | Tensor::F16(_) | Tensor::BF16(_) => unary!(x, |v| v.abs()),
            _ => int_unary(x, i64::wrapping_abs, |v| v),
        },
        "Neg" => match x {
            Tensor::F32(_) | Tensor::F64(_) | Tensor::F16(_) | Tensor::BF16(_) => unary!(x, |v| -v),
            _ => int_unary(x, i64::wrapping_neg, |v| 0u64.wrapping_sub(v)),
        },
        "Sign" => match x {
            Tensor::F32(_) | Tensor::F64(_) | Tensor::F16(_) | Tensor::BF16(_) => {
                unary!(x, |v| if v > 0.0 {
                    1.0
                } else if v < 0.0 {
                    -1.0
                } else {
                    0.0
                })
            }
            _ => int_unary(x, i64::signum, |v| u64::from(v > 0)),
        },
        "IsNaN" => Ok(Tensor::Bool(x.to_f64().mapv(f64::is_nan))),
        "IsInf" => {
            let pos = node.attr_i("detect_positive").unwrap_or(1) != 0;
            let neg = node.attr_i("detect_negative").unwrap_or(1) != 0;
            Ok(Tensor::Bool(
                x.to_f64()
                    .mapv(|v| v.is_infinite() && ((v > 0.0 && pos) || (v < 0.0 && neg))),
            ))
        }
        "BitwiseNot" => int_unary(x, |v| !v, |v| !v),
        "Shrink" => {
            let (l, b) = (node.attr_f("lambd").unwrap_or(0.5), node.attr_f("bias").unwrap_or(0.0));
            let f = |v: f64| {
                if v < -f64::from(l) {
                    v + f64::from(b)
                } else if v > f64::from(l) {
                    v - f64::from(b)
                } else {
                    0.0
                }
            };
            crate::sim::ops::quant::cast_f64(&x.to_f64().mapv(f), x.dtype())
        }
        "Not" => match x {
            Tensor::Bool(a) => Ok(Tensor::Bool(a.mapv(|v| !v))),
            _ => Err("Not needs a bool tensor".into()),
        },
        _ => return None,
    };
    Some(r)
}

/// Applies an integer function to any integer tensor through i64 (signed) or u64 (unsigned).
fn int_unary(x: &Tensor, fs: impl Fn(i64) -> i64, fu: impl Fn(u64) -> u64) -> Result<Tensor, String> {
    Ok(match x {
        Tensor::I8(a) => Tensor::I8(a.mapv(|v| fs(i64::from(v)) as i8)),
        Tensor::I16(a) => Tensor::I16(a.mapv(|v| fs(i64::from(v)) as i16)),
        Tensor::I32(a) => Tensor::I32(a.mapv(|v| fs(i64::from(v)) as i32)),
        Tensor::I64(a) => Tensor::I64(a.mapv(&fs)),
        Tensor::U8(a) => Tensor::U8(a.mapv(|v| fu(u64::from(v)) as u8)),
        Tensor::U16(a) => Tensor::U16(a.mapv(|v| fu(u64::from(v)) as u16)),
        Tensor::U32(a) => Tensor::U32(a.mapv(|v| fu(u64::from(v)) as u32)),
        Tensor::U64(a) => Tensor::U64(a.mapv(&fu)),
        other => return Err(format!("dtype {} is not supported here", other.dtype())),
    })
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    Mod,
    FMod,
    /// Bitwise and shifts: integers only.
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

/// A binary op on floats; NaN in either operand propagates through Max and Min.
fn fbin<F: num_traits::Float>(op: Bin, p: F, q: F) -> F {
    match op {
        Bin::Add => p + q,
        Bin::Sub => p - q,
        Bin::Mul => p * q,
        Bin::Div => p / q,
        Bin::Pow => p.powf(q),
        Bin::Max | Bin::Min if p.is_nan() || q.is_nan() => F::nan(),
        Bin::Max => p.max(q),
        Bin::Min => p.min(q),
        Bin::FMod => p % q,
        // Bitwise ops are refused for floats before they get here.
        Bin::BitAnd | Bin::BitOr | Bin::BitXor | Bin::Shl | Bin::Shr => F::nan(),
        Bin::Mod => {
            let r = p % q;
            if r != F::zero() && ((r < F::zero()) != (q < F::zero())) {
                r + q
            } else {
                r
            }
        }
    }
}

fn ibin(op: Bin, p: i64, q: i64) -> i64 {
    match op {
        Bin::Add => p.wrapping_add(q),
        Bin::Sub => p.wrapping_sub(q),
        Bin::Mul => p.wrapping_mul(q),
        Bin::Div => p.checked_div(q).unwrap_or(0),
        Bin::Pow => {
            if q < 0 {
                0
            } else {
                p.wrapping_pow(q.min(i64::from(u32::MAX)) as u32)
            }
        }
        Bin::Max => p.max(q),
        Bin::Min => p.min(q),
        Bin::FMod => p.checked_rem(q).unwrap_or(0),
        Bin::Mod => {
            if q == 0 {
                0
            } else {
                p.rem_euclid(q) + if q < 0 && p.rem_euclid(q) != 0 { q } else { 0 }
            }
        }
        Bin::BitAnd => p & q,
        Bin::BitOr => p | q,
        Bin::BitXor => p ^ q,
        Bin::Shl => p.checked_shl(q as u32).unwrap_or(0),
        Bin::Shr => p.checked_shr(q as u32).unwrap_or(0),
    }
}

fn ubin(op: Bin, p: u64, q: u64) -> u64 {
    match op {
        Bin::Add => p.wrapping_add(q),
        Bin::Sub => p.wrapping_sub(q),
        Bin::Mul => p.wrapping_mul(q),
        Bin::Div => p.checked_div(q).unwrap_or(0),
        Bin::Pow => p.wrapping_pow(q.min(u64::from(u32::MAX)) as u32),
        Bin::Max => p.max(q),
        Bin::Min => p.min(q),
        Bin::FMod | Bin::Mod => p.checked_rem(q).unwrap_or(0),
        Bin::BitAnd => p & q,
        Bin::BitOr => p | q,
        Bin::BitXor => p ^ q,
        Bin::Shl => u32::try_from(q).ok().and_then(|q| p.checked_shl(q)).unwrap_or(0),
        Bin::Shr => u32::try_from(q).ok().and_then(|q| p.checked_shr(q)).unwrap_or(0),
    }
}

fn binary(op: Bin, a: &Tensor, b: &Tensor) -> Result<Tensor, String> {
    use Tensor as T;
    let bitwise = matches!(op, Bin::BitAnd | Bin::BitOr | Bin::BitXor | Bin::Shl | Bin::Shr);
    if bitwise && (a.dtype().is_float() || b.dtype().is_float()) {
        return Err(format!("bitwise ops take integers, not {}", a.dtype()));
    }
    Ok(match (a, b) {
        (T::F32(x), T::F32(y)) => T::F32(match op {
            Bin::Add => bcast(x, y, |p, q| p + q)?,
            Bin::Sub => bcast(x, y, |p, q| p - q)?,
            Bin::Mul => bcast(x, y, |p, q| p * q)?,
            Bin::Div => bcast(x, y, |p, q| p / q)?,
            _ => bcast(x, y, |p, q| fbin(op, p, q))?,
        }),
        (T::F64(x), T::F64(y)) => T::F64(bcast(x, y, |p, q| fbin(op, p, q))?),
        (T::F16(x), T::F16(y)) => T::F16(bcast(x, y, |p: f16, q: f16| {
            f16::from_f32(fbin(op, p.to_f32(), q.to_f32()))
        })?),
        (T::BF16(x), T::BF16(y)) => T::BF16(bcast(x, y, |p: bf16, q: bf16| {
            bf16::from_f32(fbin(op, p.to_f32(), q.to_f32()))
        })?),
        (T::I8(x), T::I8(y)) => T::I8(bcast(x, y, |p, q| ibin(op, p.into(), q.into()) as i8)?),
        (T::I16(x), T::I16(y)) => T::I16(bcast(x, y, |p, q| ibin(op, p.into(), q.into()) as i16)?),
        (T::I32(x), T::I32(y)) => T::I32(bcast(x, y, |p, q| ibin(op, p.into(), q.into()) as i32)?),
        (T::I64(x), T::I64(y)) => T::I64(bcast(x, y, |p, q| ibin(op, p, q))?),
        (T::U8(x), T::U8(y)) => T::U8(bcast(x, y, |p, q| ubin(op, p.into(), q.into()) as u8)?),
        (T::U16(x), T::U16(y)) => T::U16(bcast(x, y, |p, q| ubin(op, p.into(), q.into()) as u16)?),
        (T::U32(x), T::U32(y)) => T::U32(bcast(x, y, |p, q| ubin(op, p.into(), q.into()) as u32)?),
        (T::U64(x), T::U64(y)) => T::U64(bcast(x, y, |p, q| ubin(op, p, q))?),
        // Pow allows a different exponent type: compute in f64 and keep the base's type.
        _ if op == Bin::Pow => {
            let r = bcast(&a.to_f64(), &b.to_f64(), f64::powf)?;
            crate::sim::ops::quant::cast_f64(&r, a.dtype())?
        }
        _ => return Err(format!("operand dtypes {} and {} do not match", a.dtype(), b.dtype())),
    })
}

fn compare(op: &str, a: &Tensor, b: &Tensor) -> Result<Tensor, String> {
    use Tensor as T;
    fn cmp<X: PartialOrd + Copy + Send + Sync>(op: &str, x: &ArrayD<X>, y: &ArrayD<X>) -> Result<ArrayD<bool>, String> {
        match op {
            "Equal" => bcast(x, y, |p, q| p == q),
            "Less" => bcast(x, y, |p, q| p < q),
            "LessOrEqual" => bcast(x, y, |p, q| p <= q),
            "Greater" => bcast(x, y, |p, q| p > q),
            _ => bcast(x, y, |p, q| p >= q),
        }
    }
    let r = match (a, b) {
        (T::F32(x), T::F32(y)) => cmp(op, x, y)?,
        (T::F64(x), T::F64(y)) => cmp(op, x, y)?,
        (T::I64(x), T::I64(y)) => cmp(op, x, y)?,
        (T::I32(x), T::I32(y)) => cmp(op, x, y)?,
        (T::Bool(x), T::Bool(y)) => cmp(op, x, y)?,
        (T::U64(x), T::U64(y)) => cmp(op, x, y)?,
        (T::Str(x), T::Str(y)) if op == "Equal" => {
            let shape = broadcast_shapes(x.shape(), y.shape())?;
            let xv = x.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
            let yv = y.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
            Zip::from(&xv).and(&yv).map_collect(|p, q| p == q)
        }
        (T::Small(_, _) | T::Str(_), _) | (_, T::Small(_, _) | T::Str(_)) => {
            return Err(format!("{op} is not supported for {} and {}", a.dtype(), b.dtype()));
        }
        _ if a.dtype() == b.dtype() => cmp(op, &a.to_f64(), &b.to_f64())?,
        _ => return Err(format!("operand dtypes {} and {} do not match", a.dtype(), b.dtype())),
    };
    Ok(T::Bool(r))
}

fn logic(op: &str, a: &Tensor, b: &Tensor) -> Result<Tensor, String> {
    match (a, b) {
        (Tensor::Bool(x), Tensor::Bool(y)) => Ok(Tensor::Bool(match op {
            "And" => bcast(x, y, |p, q| p && q)?,
            "Or" => bcast(x, y, |p, q| p || q)?,
            _ => bcast(x, y, |p, q| p ^ q)?,
        })),
        _ => Err(format!("{op} needs bool tensors")),
    }
}

/// Where(cond, x, y) with three-way broadcasting.
fn where_op(c: &Tensor, x: &Tensor, y: &Tensor) -> Result<Tensor, String> {
    let Tensor::Bool(c) = c else {
        return Err("condition must be bool".into());
    };
    if x.dtype() != y.dtype() {
        return Err(format!("X and Y dtypes differ ({} vs {})", x.dtype(), y.dtype()));
    }
    let shape = broadcast_shapes(&broadcast_shapes(c.shape(), x.shape())?, y.shape())?;
    let cv = c.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    macro_rules! pick {
        ($xa:expr, $ya:expr) => {{
            let xv = $xa.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
            let yv = $ya.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
            Zip::from(&cv)
                .and(&xv)
                .and(&yv)
                .map_collect(|&c, x, y| if c { x.clone() } else { y.clone() })
        }};
    }
    Ok(match (x, y) {
        (Tensor::F32(a), Tensor::F32(b)) => Tensor::F32(pick!(a, b)),
        (Tensor::F64(a), Tensor::F64(b)) => Tensor::F64(pick!(a, b)),
        (Tensor::F16(a), Tensor::F16(b)) => Tensor::F16(pick!(a, b)),
        (Tensor::BF16(a), Tensor::BF16(b)) => Tensor::BF16(pick!(a, b)),
        (Tensor::I8(a), Tensor::I8(b)) => Tensor::I8(pick!(a, b)),
        (Tensor::U8(a), Tensor::U8(b)) => Tensor::U8(pick!(a, b)),
        (Tensor::I16(a), Tensor::I16(b)) => Tensor::I16(pick!(a, b)),
        (Tensor::U16(a), Tensor::U16(b)) => Tensor::U16(pick!(a, b)),
        (Tensor::I32(a), Tensor::I32(b)) => Tensor::I32(pick!(a, b)),
        (Tensor::I64(a), Tensor::I64(b)) => Tensor::I64(pick!(a, b)),
        (Tensor::U32(a), Tensor::U32(b)) => Tensor::U32(pick!(a, b)),
        (Tensor::U64(a), Tensor::U64(b)) => Tensor::U64(pick!(a, b)),
        (Tensor::Bool(a), Tensor::Bool(b)) => Tensor::Bool(pick!(a, b)),
        _ => return Err("unsupported dtype for Where".into()),
    })
}

/// Clip with bounds from attributes (opset < 11) or inputs.
fn clip(node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Result<Tensor, String> {
    let x = input(inputs, 0)?;
    if ctx.opset < 11 {
        let lo = node.attr_f("min").unwrap_or(f32::MIN);
        let hi = node.attr_f("max").unwrap_or(f32::MAX);
        return float_unary(x, |v| v.max(lo).min(hi), |v| v.max(f64::from(lo)).min(f64::from(hi)));
    }
    let lo = opt_input(inputs, 1);
    let hi = opt_input(inputs, 2);
    match x {
        Tensor::F32(_) | Tensor::F64(_) | Tensor::F16(_) | Tensor::BF16(_) => {
            let lo = lo.map_or(f64::NEG_INFINITY, |t| {
                t.to_f64().iter().next().copied().unwrap_or(f64::NEG_INFINITY)
            });
            let hi = hi.map_or(f64::INFINITY, |t| {
                t.to_f64().iter().next().copied().unwrap_or(f64::INFINITY)
            });
            let (lf, hf) = (lo as f32, hi as f32);
            // min(max(x, lo), hi): when lo > hi every element becomes hi, as numpy's clip does.
            float_unary(
                x,
                |v| {
                    let v = if v < lf { lf } else { v };
                    if v > hf { hf } else { v }
                },
                |v| {
                    let v = if v < lo { lo } else { v };
                    if v > hi { hi } else { v }
                },
            )
        }
        _ => {
            let lo = lo
                .and_then(crate::ir::tensor::Tensor::as_i64_vec)
                .and_then(|v| v.first().copied())
                .unwrap_or(i64::MIN);
            let hi = hi
                .and_then(crate::ir::tensor::Tensor::as_i64_vec)
                .and_then(|v| v.first().copied())
                .unwrap_or(i64::MAX);
            int_unary(
                x,
                |v| v.max(lo).min(hi),
                |v| v.max(lo.max(0) as u64).min(hi.max(0) as u64),
            )
        }
    }
}

/// PRelu: x if x >= 0 else slope * x, slope broadcast (unidirectionally) to x.
fn prelu(x: &Tensor, slope: &Tensor) -> Result<Tensor, String> {
    let (xf, sf) = (x.to_f32(), slope.to_f32());
    let r = bcast(&xf, &sf, |v, s| if v < 0.0 { v * s } else { v })?;
    Ok(match x {
        Tensor::F32(_) | Tensor::F64(_) | Tensor::F16(_) | Tensor::BF16(_) => f32_as(x.dtype(), r),
        _ => crate::sim::ops::quant::cast_f64(&r.mapv(f64::from), x.dtype())?,
    })
}

/// Dispatches the element-wise family; `None` if `op` is not one of them.
pub fn eval(op: &str, node: &Node, inputs: &[Option<&Tensor>], ctx: &OpCtx) -> Option<OpResult> {
    let r = match op {
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Mod" => (|| {
            let a = input(inputs, 0)?;
            let b = input(inputs, 1)?;
            let bin = match op {
                "Add" => Bin::Add,
                "Sub" => Bin::Sub,
                "Mul" => Bin::Mul,
                "Div" => Bin::Div,
                "Pow" => Bin::Pow,
                _ if node.attr_i("fmod").unwrap_or(0) != 0 => Bin::FMod,
                _ => Bin::Mod,
            };
            binary(bin, a, b)
        })(),
        "Max" | "Min" | "Sum" | "Mean" => (|| {
            let bin = match op {
                "Max" => Bin::Max,
                "Min" => Bin::Min,
                _ => Bin::Add,
            };
            let mut acc = input(inputs, 0)?.clone();
            for i in 1..inputs.len() {
                acc = binary(bin, &acc, input(inputs, i)?)?;
            }
            if op == "Mean" {
                let n = inputs.len() as f32;
                acc = float_unary(&acc, |v| v / n, |v| v / f64::from(n))?;
            }
            Ok(acc)
        })(),
        "Equal" | "Less" | "LessOrEqual" | "Greater" | "GreaterOrEqual" => {
            (|| compare(op, input(inputs, 0)?, input(inputs, 1)?))()
        }
        "And" | "Or" | "Xor" => (|| logic(op, input(inputs, 0)?, input(inputs, 1)?))(),
        "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" | "BitShift" => (|| {
            let bin = match op {
                "BitwiseAnd" => Bin::BitAnd,
                "BitwiseOr" => Bin::BitOr,
                "BitwiseXor" => Bin::BitXor,
                _ => match node.attr_s("direction") {
                    Some("LEFT") => Bin::Shl,
                    Some("RIGHT") => Bin::Shr,
                    d => return Err(format!("direction {d:?} (LEFT or RIGHT)")),
                },
            };
            binary(bin, input(inputs, 0)?, input(inputs, 1)?)
        })(),
        "Where" => (|| where_op(input(inputs, 0)?, input(inputs, 1)?, input(inputs, 2)?))(),
        "Clip" => clip(node, inputs, ctx),
        "PRelu" => (|| prelu(input(inputs, 0)?, input(inputs, 1)?))(),
        _ => {
            let x = match input(inputs, 0) {
                Ok(x) => x,
                Err(e) => return unary_op(op, node, &Tensor::scalar_f32(0.0)).map(|_| Err(e)),
            };
            return unary_op(op, node, x).map(|r| r.map(|t| vec![t]));
        }
    };
    Some(r.map(|t| vec![t]))
}

/// Ops [`try_inplace`] may compute in the buffer of their first input.
pub const INPLACE_OPS: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Relu",
    "Sigmoid",
    "Tanh",
    "Erf",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "Clip",
    "LeakyRelu",
    "Exp",
    "Sqrt",
    "Neg",
    "Abs",
    "Reciprocal",
];

fn scalar_of(t: Option<&Tensor>) -> Option<f32> {
    match t {
        Some(Tensor::F32(a)) if a.len() == 1 => a.iter().next().copied(),
        _ => None,
    }
}

/// Applies `f` to every element, in parallel chunks for large slices.
fn par<F: Fn(&mut f32) + Sync + Send>(data: &mut [f32], f: F) {
    if data.len() >= PAR_MIN {
        use rayon::prelude::*;
        data.par_chunks_mut(1 << 14).for_each(|c| c.iter_mut().for_each(&f));
    } else {
        data.iter_mut().for_each(f);
    }
}

/// `a = f(a, b)` with `b` broadcast to `a`'s shape; `false` if `b` does not broadcast.
fn binary_inplace<F: Fn(f32, f32) -> f32 + Sync + Send>(a: &mut ArrayD<f32>, b: &ArrayD<f32>, f: F) -> bool {
    if b.len() == 1 {
        let q = b.iter().next().copied().unwrap_or(0.0);
        if let Some(data) = a.as_slice_mut() {
            par(data, |v| *v = f(*v, q));
            return true;
        }
        return false;
    }
    if b.shape() == a.shape()
        && let (Some(bs), Some(data)) = (b.as_slice(), a.as_slice_mut())
    {
        if data.len() >= PAR_MIN {
            use rayon::prelude::*;
            data.par_chunks_mut(1 << 14)
                .zip(bs.par_chunks(1 << 14))
                .for_each(|(d, s)| {
                    d.iter_mut().zip(s).for_each(|(v, &q)| *v = f(*v, q));
                });
        } else {
            data.iter_mut().zip(bs).for_each(|(v, &q)| *v = f(*v, q));
        }
        return true;
    }
    if !broadcast_shapes(a.shape(), b.shape()).is_ok_and(|s| s == a.shape()) {
        return false;
    }
    if is_trailing(b.shape(), a.shape())
        && let (Some(bs), Some(data)) = (b.as_slice(), a.as_slice_mut())
        && !bs.is_empty()
    {
        data.chunks_mut(bs.len())
            .for_each(|d| d.iter_mut().zip(bs).for_each(|(v, &q)| *v = f(*v, q)));
        return true;
    }
    // b covers a prefix of a's axes and is 1 on every later axis (per-channel scales
    // [1, C, 1, 1] against [N, C, H, W]): one scalar per contiguous run.
    let rank = a.ndim();
    let bshape: Vec<usize> = std::iter::repeat_n(1, rank - b.ndim())
        .chain(b.shape().iter().copied())
        .collect();
    let last_real = bshape.iter().rposition(|&d| d != 1).unwrap_or(0);
    let run: usize = a.shape()[last_real + 1..].iter().product();
    if run >= 16 {
        let prefix: Vec<usize> = a.shape()[..=last_real]
            .iter()
            .copied()
            .chain(std::iter::repeat_n(1, rank - last_real - 1))
            .collect();
        let scalars: Option<Vec<f32>> = b
            .broadcast(ndarray::IxDyn(&prefix))
            .map(|bv| bv.iter().copied().collect());
        if let (Some(data), Some(scalars)) = (a.as_slice_mut(), scalars) {
            {
                use rayon::prelude::*;
                data.par_chunks_mut(run)
                    .zip(scalars.par_iter())
                    .for_each(|(d, &q)| d.iter_mut().for_each(|v| *v = f(*v, q)));
                return true;
            }
        }
    }
    match b.broadcast(a.raw_dim()) {
        Some(bv) => {
            Zip::from(a).and(&bv).for_each(|v, &q| *v = f(*v, q));
            true
        }
        None => false,
    }
}

/// Computes an element-wise op into `x` (its first input, which nobody else needs).
/// Returns `Ok(false)` when the case is not handled in place; `x` is then unchanged.
#[expect(
    clippy::unnecessary_wraps,
    reason = "an in-place kernel fails like its out-of-place form; the caller handles both"
)]
pub fn try_inplace(node: &Node, x: &mut Tensor, rest: &[Option<&Tensor>], ctx: &OpCtx) -> Result<bool, String> {
    let Tensor::F32(a) = x else { return Ok(false) };
    if !a.is_standard_layout() {
        return Ok(false);
    }
    let op = node.op.as_str();
    if let "Add" | "Sub" | "Mul" | "Div" = op {
        let Some(Tensor::F32(b)) = rest.first().copied().flatten() else {
            return Ok(false);
        };
        return Ok(match op {
            "Add" => binary_inplace(a, b, |p, q| p + q),
            "Sub" => binary_inplace(a, b, |p, q| p - q),
            "Mul" => binary_inplace(a, b, |p, q| p * q),
            _ => binary_inplace(a, b, |p, q| p / q),
        });
    }
    let Some(data) = a.as_slice_mut() else { return Ok(false) };
    let bound = |i: usize, default: f32| -> Option<f32> {
        match rest.get(i).copied().flatten() {
            None => Some(default),
            t => scalar_of(t),
        }
    };
    match op {
        "Relu" => par(data, |v| *v = v.max(0.0)),
        "Sigmoid" => par(data, |v| *v = sigmoid(*v)),
        "HardSwish" => par(data, |v| *v *= (*v / 6.0 + 0.5).clamp(0.0, 1.0)),
        "HardSigmoid" => {
            let (al, be) = (node.attr_f("alpha").unwrap_or(0.2), node.attr_f("beta").unwrap_or(0.5));
            par(data, |v| *v = (al * *v + be).clamp(0.0, 1.0));
        }
        "LeakyRelu" => {
            let al = node.attr_f("alpha").unwrap_or(0.01);
            par(data, |v| *v = if *v < 0.0 { al * *v } else { *v });
        }
        "Clip" if ctx.opset >= 11 => {
            let (Some(lo), Some(hi)) = (bound(0, f32::MIN), bound(1, f32::MAX)) else {
                return Ok(false);
            };
            par(data, |v| {
                let w = if *v < lo { lo } else { *v };
                *v = if w > hi { hi } else { w };
            });
        }
        "Tanh" => par(data, |v| *v = v.tanh()),
        "Erf" => erf_par(data, false),
        "Gelu" if node.attr_s("approximate") != Some("tanh") => erf_par(data, true),
        "Exp" => par(data, |v| *v = v.exp()),
        "Sqrt" => par(data, |v| *v = v.sqrt()),
        "Neg" => par(data, |v| *v = -*v),
        "Abs" => par(data, |v| *v = v.abs()),
        "Reciprocal" => par(data, |v| *v = 1.0 / *v),
        _ => return Ok(false),
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    /// Not a test: activations over a 16×160×160 map (YOLOv8n's first conv output), best
    /// of 50. `cargo test --release -p npu-core activation_speed -- --ignored --nocapture`
    #[test]
    #[ignore = "benchmark, run by hand"]
    fn activation_speed() {
        let n = 16 * 160 * 160;
        let x: Vec<f32> = (0..n).map(|i| ((i * 7919) % 2000) as f32 / 200.0 - 5.0).collect();
        for act in [Activation::Silu, Activation::Sigmoid, Activation::HardSwish] {
            let mut best = f64::MAX;
            for _ in 0..50 {
                let mut y = x.clone();
                let t = std::time::Instant::now();
                act.apply_slice(&mut y);
                best = best.min(t.elapsed().as_secs_f64());
                std::hint::black_box(&y);
            }
            println!(
                "{act:?}: {:.3} ms, {:.3} ns per element",
                best * 1e3,
                best * 1e9 / n as f64
            );
        }
    }

    use super::*;

    /// The vectorized erf and GELU against the f64 series, over the range where erf moves
    /// and far past it, at the plain and the fused-multiply-add builds.
    #[test]
    fn erf_poly_is_within_about_one_ulp() {
        let mut worst = 0f64;
        for i in -600_000..=600_000 {
            let x = i as f32 * 1e-5;
            let want = erf64(f64::from(x));
            for got in [erf_poly::<false>(x), erf_poly::<true>(x)] {
                let err = (f64::from(got) - want).abs();
                worst = worst.max(err / want.abs().clamp(1e-30, 1.0));
                assert!(err <= 1.2e-7 * want.abs().max(1e-3), "erf({x}) = {got}, want {want}");
            }
        }
        assert!(worst < 2e-7, "worst relative error {worst}");
        for x in [1e-30f32, -3e-8, 1e-4, 4.5, 1e6] {
            let want = erf64(f64::from(x)) as f32;
            assert!((erf(x) - want).abs() <= want.abs() * 2e-7, "erf({x}) = {}", erf(x));
        }
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert!(erf(f32::NAN).is_nan());
        let mut g = [-3.0f32, -0.5, 0.0, 0.7, 2.5];
        erf_slice(&mut g, true);
        for (got, x) in g.iter().zip([-3.0f64, -0.5, 0.0, 0.7, 2.5]) {
            let want = 0.5 * x * (1.0 + erf64(x / std::f64::consts::SQRT_2));
            assert!(
                (f64::from(*got) - want).abs() <= 1e-7 * want.abs().max(1.0),
                "gelu({x}) = {got}"
            );
        }
    }
}
