//! The supported-op rules of a target: each is data in the target file, checks one op
//! and, when the op fails it, says why in the sentence the user reads.

use super::Precision;
use crate::program::{Act, IOp, IntType, OpKind, PadMode, Program};
use serde::{Deserialize, Serialize};

/// The op names a target's table may list: the TFLite builtins of the op table's integer
/// ops, as the TFLite export writes them.
pub fn op_classes() -> Vec<&'static str> {
    crate::program::integer_builtins()
}

/// What the rules look at in one integer op.
#[derive(Clone, Debug, PartialEq)]
pub struct OpView {
    /// The TFLite builtin name, or `float32 <op>` for an op with no integer form.
    pub class: String,
    /// The activation precision (the wider of inputs and output); `None` when the op's
    /// tensors are not quantized activations (float32, booleans, int32 indices).
    pub precision: Option<Precision>,
    /// Shapes of the activation inputs (constants left out).
    pub inputs: Vec<Vec<usize>>,
    pub output: Vec<usize>,
    /// Kernel height and width (convolutions, pooling).
    pub kernel: Option<[usize; 2]>,
    pub strides: Option<[usize; 2]>,
    pub dilations: Option<[usize; 2]>,
    /// The op pads its input (SAME or explicit padding).
    pub padded: bool,
    /// Depthwise convolutions: output channels per input channel.
    pub depth_multiplier: Option<usize>,
    /// Grouped (not depthwise) convolutions: the group count.
    pub groups: usize,
    /// The largest sum of absolute weight codes over one output channel.
    pub max_weight_sum: Option<i64>,
    /// Weight storage bits (8 or 4).
    pub weight_bits: Option<u32>,
    /// Elements reduced into one output (MEAN, REDUCE_*).
    pub reduced: Option<usize>,
    /// Integer output/input size ratio of a resize, per spatial axis.
    pub resize_scale: Option<[usize; 2]>,
}

fn is_const(p: &Program, t: usize) -> bool {
    p.tensors[t].data.is_some()
}

fn precision_of(ty: IntType) -> Option<Precision> {
    match ty {
        IntType::I8 => Some(Precision::Int8),
        IntType::I16 => Some(Precision::Int16),
        _ => None,
    }
}

/// The TFLite builtin an integer op is written as: its op table row's, or of the row's
/// builtins the one its parameters pick.
pub fn op_class(p: &Program, op: &IOp) -> String {
    let c = match &op.kind {
        OpKind::Conv { groups, .. } => {
            let cin = p.tensors[op.inputs[0]].shape.get(1).copied().unwrap_or(0);
            if *groups > 1 && *groups == cin {
                "DEPTHWISE_CONV_2D"
            } else {
                "CONV_2D"
            }
        }
        OpKind::Relu { act } => match act {
            Act::Relu6 => "RELU6",
            Act::ReluN1To1 => "RELU_N1_TO_1",
            _ => "RELU",
        },
        OpKind::Pad { mode, .. } => match mode {
            PadMode::Constant(_) => "PAD",
            PadMode::Reflect => "MIRROR_PAD",
        },
        OpKind::Float { op } => return format!("float32 {}", op.display_name()),
        k => k.spec().builtins.first().copied().unwrap_or("unknown"),
    };
    c.to_string()
}

/// The facts the rules check, read from the program.
pub fn op_view(p: &Program, op: &IOp) -> OpView {
    let class = op_class(p, op);
    let out = op.outputs.first().map(|&o| &p.tensors[o]);
    let acts: Vec<usize> = op.inputs.iter().copied().filter(|&t| !is_const(p, t)).collect();
    let mut precision = out.and_then(|t| precision_of(t.q.ty));
    for &t in &acts {
        match (precision, precision_of(p.tensors[t].q.ty)) {
            (_, None) => precision = None,
            (Some(Precision::Int8), Some(Precision::Int16)) => precision = Some(Precision::Int16),
            _ => {}
        }
    }
    if op.kind.is_float() {
        precision = None;
    }
    let mut v = OpView {
        class,
        precision,
        inputs: acts.iter().map(|&t| p.tensors[t].shape.clone()).collect(),
        output: out.map(|t| t.shape.clone()).unwrap_or_default(),
        kernel: None,
        strides: None,
        dilations: None,
        padded: false,
        depth_multiplier: None,
        groups: 1,
        max_weight_sum: None,
        weight_bits: None,
        reduced: None,
        resize_scale: None,
    };
    let weights = |v: &mut OpView| {
        if let Some(&w) = op.inputs.get(1) {
            let t = &p.tensors[w];
            if let Some(d) = &t.data {
                let rows = t.shape.first().copied().unwrap_or(1).max(1);
                let per = d.len() / rows;
                v.max_weight_sum = (0..rows)
                    .map(|r| d[r * per..(r + 1) * per].iter().map(|c| c.abs()).sum::<i64>())
                    .max();
                v.weight_bits = Some(if t.q.ty == IntType::I4 { 4 } else { 8 });
                if t.shape.len() == 4 {
                    v.kernel = Some([t.shape[2], t.shape[3]]);
                }
            }
        }
    };
    match &op.kind {
        OpKind::Conv {
            strides,
            dilations,
            pads,
            groups,
            ..
        } => {
            weights(&mut v);
            v.strides = Some(*strides);
            v.dilations = Some(*dilations);
            v.padded = pads.iter().any(|&x| x > 0);
            let cin = v.inputs.first().and_then(|s| s.get(1)).copied().unwrap_or(1);
            let cout = v.output.get(1).copied().unwrap_or(1);
            if v.class == "DEPTHWISE_CONV_2D" {
                v.depth_multiplier = Some(cout / cin.max(1));
            } else {
                v.groups = *groups;
            }
        }
        OpKind::TransposeConv { strides, .. } => {
            weights(&mut v);
            v.strides = Some(*strides);
        }
        OpKind::FullyConnected { .. } => weights(&mut v),
        OpKind::Pool {
            kernel, strides, pads, ..
        } => {
            v.kernel = Some(*kernel);
            v.strides = Some(*strides);
            v.padded = pads.iter().any(|&x| x > 0);
        }
        OpKind::Mean { axes } | OpKind::Reduce { axes, .. } => {
            let shape = v.inputs.first().cloned().unwrap_or_default();
            v.reduced = Some(axes.iter().map(|&a| shape.get(a).copied().unwrap_or(1)).product());
        }
        OpKind::ResizeNearest => {
            if let (Some(i), o) = (v.inputs.first(), &v.output)
                && i.len() == 4
                && o.len() == 4
            {
                let r = |a: usize| if i[a] > 0 && o[a] % i[a] == 0 { o[a] / i[a] } else { 0 };
                v.resize_scale = Some([r(2), r(3)]);
            }
        }
        _ => {}
    }
    v
}

/// One constraint of a target's op table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Rule {
    /// The first dimension of every rank-4 tensor is 1.
    BatchOne,
    MaxRank(usize),
    MaxDim(usize),
    /// Stride in height and width within `min..=max`.
    Stride {
        min: usize,
        max: usize,
    },
    /// Strides up to `max` run natively; a larger one only with dilation 1 and no padding,
    /// where the compiler splits the convolution into one stride-1 convolution per output
    /// position along that axis (as Vela does).
    StrideOrSplit {
        max: usize,
    },
    /// Only these (height, width) strides.
    Strides(Vec<[usize; 2]>),
    MaxDilation(usize),
    MaxDilatedKernelHeight(usize),
    MaxDilatedKernelArea(usize),
    MaxKernelHeight(usize),
    MaxKernelArea(usize),
    /// With padding, kernel height and width at most this.
    MaxPaddedKernel(usize),
    DepthMultiplierOne,
    /// No grouped convolutions (other than depthwise).
    NoGroups,
    /// The sum of absolute weight codes of one output channel.
    MaxWeightSum(i64),
    /// 4-bit weights are not read by this op.
    NoInt4Weights,
    MaxInputs(usize),
    /// Elements reduced into one output.
    MaxReduced(usize),
    /// The product of all dimensions but the last (rows of a softmax).
    MaxRows(usize),
    /// The last dimension.
    MaxDepth(usize),
    /// Integer resize factors allowed (same in both axes or 1).
    ResizeScales(Vec<usize>),
}

impl Rule {
    /// The sentence a user reads (in the supported-ops document and, with the measured
    /// value, when an op falls back).
    pub fn doc(&self) -> String {
        match self {
            Self::BatchOne => "The batch size must be 1".into(),
            Self::MaxRank(n) => format!("Tensors must have at most {n} dimensions"),
            Self::MaxDim(n) => format!("Every tensor dimension must be at most {n}"),
            Self::Stride { min, max } => format!("Stride height and width must be in the range [{min}, {max}]"),
            Self::StrideOrSplit { max } => {
                format!(
                    "Stride > {max} is only supported with dilation 1 and VALID padding (then split per output position)"
                )
            }
            Self::Strides(s) => format!(
                "Stride (height, width) must be one of {}",
                s.iter().map(|[h, w]| format!("{h}x{w}")).collect::<Vec<_>>().join(", ")
            ),
            Self::MaxDilation(n) => format!("Dilation must be at most {n}"),
            Self::MaxDilatedKernelHeight(n) => format!("The dilated kernel height must be at most {n}"),
            Self::MaxDilatedKernelArea(n) => format!("The dilated kernel's width times height must be at most {n}"),
            Self::MaxKernelHeight(n) => format!("The kernel height must be at most {n}"),
            Self::MaxKernelArea(n) => format!("The kernel's width times height must be at most {n}"),
            Self::MaxPaddedKernel(n) => format!("With padding, the kernel height and width must be at most {n}"),
            Self::DepthMultiplierOne => "The depth multiplier must be 1".into(),
            Self::NoGroups => "Grouped convolutions (other than depthwise) are not supported".into(),
            Self::MaxWeightSum(n) => format!("The sum of absolute weights of an output channel must be at most {n}"),
            Self::NoInt4Weights => "Weights must be 8-bit (4-bit weights are not supported by this op)".into(),
            Self::MaxInputs(n) => format!("At most {n} inputs"),
            Self::MaxReduced(n) => format!("At most {n} elements may be reduced into one output"),
            Self::MaxRows(n) => format!("The product of all dimensions but the last must be at most {n}"),
            Self::MaxDepth(n) => format!("The last dimension must be at most {n}"),
            Self::ResizeScales(s) => format!(
                "The resize factor must be one of {} in each spatial axis",
                s.iter().map(|x| format!("{x}x")).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// `Some(what the op has)` when the op breaks the rule.
    pub fn check(&self, v: &OpView) -> Option<String> {
        let all = || v.inputs.iter().chain(std::iter::once(&v.output));
        match self {
            Self::BatchOne => all()
                .find(|s| s.len() == 4 && s[0] != 1)
                .map(|s| format!("batch size {}", s[0])),
            Self::MaxRank(n) => all()
                .find(|s| s.len() > *n)
                .map(|s| format!("a tensor of rank {}", s.len())),
            Self::MaxDim(n) => all()
                .flat_map(|s| s.iter())
                .find(|&&d| d > *n)
                .map(|d| format!("a dimension of {d}")),
            Self::Stride { min, max } => v
                .strides
                .filter(|s| s.iter().any(|x| x < min || x > max))
                .map(|[h, w]| format!("stride {h}x{w}")),
            Self::StrideOrSplit { max } => v
                .strides
                .filter(|s| s.iter().any(|x| x > max) && (v.padded || v.dilations.is_some_and(|d| d != [1, 1])))
                .map(|[h, w]| format!("stride {h}x{w} with {}", if v.padded { "padding" } else { "dilation" })),
            Self::Strides(ok) => v
                .strides
                .filter(|s| !ok.contains(s))
                .map(|[h, w]| format!("stride {h}x{w}")),
            Self::MaxDilation(n) => v
                .dilations
                .filter(|d| d.iter().any(|x| x > n))
                .map(|[h, w]| format!("dilation {h}x{w}")),
            Self::MaxDilatedKernelHeight(n) => {
                let (k, d) = (v.kernel?, v.dilations.unwrap_or([1, 1]));
                let h = (k[0] - 1) * d[0] + 1;
                (h > *n).then(|| format!("dilated kernel height {h}"))
            }
            Self::MaxDilatedKernelArea(n) => {
                let (k, d) = (v.kernel?, v.dilations.unwrap_or([1, 1]));
                let a = ((k[0] - 1) * d[0] + 1) * ((k[1] - 1) * d[1] + 1);
                (a > *n).then(|| format!("dilated kernel area {a}"))
            }
            Self::MaxKernelHeight(n) => v
                .kernel
                .filter(|k| k[0] > *n)
                .map(|k| format!("kernel {}x{}", k[0], k[1])),
            Self::MaxKernelArea(n) => v
                .kernel
                .filter(|k| k[0] * k[1] > *n)
                .map(|k| format!("kernel {}x{}", k[0], k[1])),
            Self::MaxPaddedKernel(n) => v
                .kernel
                .filter(|k| v.padded && (k[0] > *n || k[1] > *n))
                .map(|k| format!("padded kernel {}x{}", k[0], k[1])),
            Self::DepthMultiplierOne => v
                .depth_multiplier
                .filter(|&m| m != 1)
                .map(|m| format!("depth multiplier {m}")),
            Self::NoGroups => (v.groups > 1).then(|| format!("{} groups", v.groups)),
            Self::MaxWeightSum(n) => v
                .max_weight_sum
                .filter(|s| s > n)
                .map(|s| format!("an output channel's weights sum to {s}")),
            Self::NoInt4Weights => (v.weight_bits == Some(4)).then(|| "4-bit weights".to_string()),
            Self::MaxInputs(n) => (v.inputs.len() > *n).then(|| format!("{} inputs", v.inputs.len())),
            Self::MaxReduced(n) => v.reduced.filter(|r| r > n).map(|r| format!("{r} elements reduced")),
            Self::MaxRows(n) => {
                let s = v.inputs.first()?;
                let rows: usize = s[..s.len().saturating_sub(1)].iter().product();
                (rows > *n).then(|| format!("{rows} rows"))
            }
            Self::MaxDepth(n) => {
                let d = *v.inputs.first()?.last()?;
                (d > *n).then(|| format!("last dimension {d}"))
            }
            Self::ResizeScales(ok) => v
                .resize_scale
                .filter(|s| s.iter().any(|x| *x != 1 && !ok.contains(x)) || s.contains(&0))
                .map(|[h, w]| {
                    if h == 0 || w == 0 {
                        "a non-integer resize factor".to_string()
                    } else {
                        format!("resize factor {h}x{w}")
                    }
                }),
        }
    }

    /// A rule's numbers make sense.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Self::Stride { min, max } if *min == 0 || min > max => {
                Err(format!("Stride {{ min: {min}, max: {max} }} needs 1 <= min <= max"))
            }
            Self::StrideOrSplit { max: 0 } => Err("StrideOrSplit needs max >= 1".into()),
            Self::Strides(s) if s.is_empty() || s.iter().flatten().any(|&x| x == 0) => {
                Err("Strides needs at least one stride, none of them 0".into())
            }
            Self::ResizeScales(s) if s.is_empty() || s.contains(&0) => {
                Err("ResizeScales needs at least one factor, none of them 0".into())
            }
            Self::MaxRank(0)
            | Self::MaxDim(0)
            | Self::MaxDilation(0)
            | Self::MaxDilatedKernelHeight(0)
            | Self::MaxDilatedKernelArea(0)
            | Self::MaxKernelHeight(0)
            | Self::MaxKernelArea(0)
            | Self::MaxPaddedKernel(0)
            | Self::MaxInputs(0)
            | Self::MaxReduced(0)
            | Self::MaxRows(0)
            | Self::MaxDepth(0) => Err(format!("{self:?}: a limit of 0 admits nothing")),
            Self::MaxWeightSum(n) if *n <= 0 => Err(format!("MaxWeightSum({n}) must be positive")),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(strides: [usize; 2], kernel: [usize; 2]) -> OpView {
        OpView {
            class: "CONV_2D".into(),
            precision: Some(Precision::Int8),
            inputs: vec![vec![1, 8, 32, 32]],
            output: vec![1, 16, 32, 32],
            kernel: Some(kernel),
            strides: Some(strides),
            dilations: Some([1, 1]),
            padded: true,
            depth_multiplier: None,
            groups: 1,
            max_weight_sum: Some(1000),
            weight_bits: Some(8),
            reduced: None,
            resize_scale: None,
        }
    }

    #[test]
    fn rules_say_what_the_op_has() {
        let r = Rule::Stride { min: 1, max: 3 };
        assert_eq!(r.check(&conv([1, 1], [3, 3])), None);
        assert_eq!(r.check(&conv([4, 4], [3, 3])).as_deref(), Some("stride 4x4"));
        assert_eq!(r.doc(), "Stride height and width must be in the range [1, 3]");
        let split = Rule::StrideOrSplit { max: 3 };
        let mut valid = conv([1, 4], [1, 9]);
        valid.padded = false;
        assert_eq!(split.check(&valid), None);
        assert_eq!(
            split.check(&conv([1, 4], [1, 9])).as_deref(),
            Some("stride 1x4 with padding")
        );
        valid.dilations = Some([1, 2]);
        assert_eq!(split.check(&valid).as_deref(), Some("stride 1x4 with dilation"));
        assert_eq!(split.check(&conv([3, 3], [3, 3])), None);
        assert_eq!(
            Rule::MaxPaddedKernel(8).check(&conv([1, 1], [9, 3])).as_deref(),
            Some("padded kernel 9x3")
        );
        assert_eq!(
            Rule::MaxWeightSum(999).check(&conv([1, 1], [3, 3])).as_deref(),
            Some("an output channel's weights sum to 1000")
        );
        let mut v = conv([1, 1], [3, 3]);
        v.inputs[0][0] = 2;
        assert_eq!(Rule::BatchOne.check(&v).as_deref(), Some("batch size 2"));
        assert_eq!(Rule::MaxDim(16).check(&v).as_deref(), Some("a dimension of 32"));
        v.dilations = Some([2, 2]);
        assert_eq!(
            Rule::MaxDilatedKernelArea(16).check(&v).as_deref(),
            Some("dilated kernel area 25")
        );
        assert!(Rule::Stride { min: 2, max: 1 }.validate().is_err());
        assert!(Rule::MaxDim(0).validate().is_err());
    }
}
