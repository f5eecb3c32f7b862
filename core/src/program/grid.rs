//! The storage of a program tensor: its integer type, float32 scale(s), zero point(s)
//! and axis, as a device stores them.

use serde::{Deserialize, Serialize};

/// Storage type of a program tensor: integer codes, or (between a DEQUANTIZE and a
/// QUANTIZE, where an op has no integer form) float32 values and booleans. A run keeps
/// every tensor as `i32`s: float32 values as their bits, booleans as 0 and 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IntType {
    I8,
    I16,
    I32,
    /// Biases under 16-bit activations (TFLite's 16×8 scheme).
    I64,
    /// 4-bit weights (−7..7), stored two per byte, low nibble first.
    I4,
    F32,
    Bool,
    /// int32 values that are integers by construction (token ids, byte values, indices):
    /// never quantized.
    Index,
}

impl IntType {
    /// The type's code range.
    pub fn range(self) -> (i32, i32) {
        match self {
            Self::I4 => (-8, 7),
            Self::I8 => (-128, 127),
            Self::I16 => (-32768, 32767),
            Self::I32 | Self::I64 | Self::F32 | Self::Index => (i32::MIN, i32::MAX),
            Self::Bool => (0, 1),
        }
    }

    /// Codes on a grid (not float32 values or booleans).
    pub fn is_quantized(self) -> bool {
        matches!(self, Self::I4 | Self::I8 | Self::I16 | Self::I32 | Self::I64)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::I4 => "int4",
            Self::I8 => "int8",
            Self::I16 => "int16",
            Self::I32 | Self::Index => "int32",
            Self::I64 => "int64",
            Self::F32 => "float32",
            Self::Bool => "bool",
        }
    }
}

/// `real = (code − zero_point) · scale`, one scale and zero point per tensor or per slice
/// along `axis`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QParams {
    pub ty: IntType,
    pub scale: Vec<f32>,
    pub zero_point: Vec<i32>,
    pub axis: Option<usize>,
}

impl QParams {
    pub fn per_tensor(ty: IntType, scale: f32, zero_point: i32) -> Self {
        Self {
            ty,
            scale: vec![scale],
            zero_point: vec![zero_point],
            axis: None,
        }
    }

    /// The (first) scale.
    pub fn s(&self) -> f32 {
        self.scale.first().copied().unwrap_or(1.0)
    }

    /// The (first) zero point.
    pub fn zp(&self) -> i32 {
        self.zero_point.first().copied().unwrap_or(0)
    }

    /// Same grid (scale compared exactly, as TFLite's kernels compare them).
    pub fn same_grid(&self, o: &Self) -> bool {
        self.ty == o.ty && self.scale == o.scale && self.zero_point == o.zero_point
    }

    /// Dequantizes one code as TFLite's DEQUANTIZE does (`(float)((double)s·(q − zp))`); a
    /// float32 tensor's value from its bits, a boolean as 0 or 1.
    pub fn real(&self, code: i32) -> f32 {
        match self.ty {
            IntType::F32 => f32::from_bits(code as u32),
            IntType::Bool | IntType::Index => code as f32,
            _ => ((f64::from(self.s())) * f64::from(code - self.zp())) as f32,
        }
    }

    /// A float32 tensor's grid-less parameters.
    pub fn float32() -> Self {
        Self::per_tensor(IntType::F32, 1.0, 0)
    }

    /// An index tensor's parameters (raw int32 values).
    pub fn index() -> Self {
        Self::per_tensor(IntType::Index, 1.0, 0)
    }

    /// A boolean tensor's parameters.
    pub fn boolean() -> Self {
        Self::per_tensor(IntType::Bool, 1.0, 0)
    }
}
