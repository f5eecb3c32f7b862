//! Element types of tensors, including the sub-byte and 8-bit float formats that
//! quantized models carry.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I8,
    U8,
    I16,
    U16,
    I32,
    I64,
    U32,
    U64,
    Bool,
    /// Signed 4-bit integer (two's complement), two per byte in files.
    I4,
    /// Unsigned 4-bit integer, two per byte in files.
    U4,
    /// Signed 2-bit integer, four per byte in files.
    I2,
    /// Unsigned 2-bit integer, four per byte in files.
    U2,
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    F4E2M1,
    F8E8M0,
    String,
}

impl DType {
    /// The dtype of an ONNX `TensorProto.DataType` code.
    pub fn from_onnx(code: i32) -> Option<Self> {
        Some(match code {
            1 => Self::F32,
            2 => Self::U8,
            3 => Self::I8,
            4 => Self::U16,
            5 => Self::I16,
            6 => Self::I32,
            7 => Self::I64,
            8 => Self::String,
            9 => Self::Bool,
            10 => Self::F16,
            11 => Self::F64,
            12 => Self::U32,
            13 => Self::U64,
            16 => Self::BF16,
            17 => Self::F8E4M3FN,
            18 => Self::F8E4M3FNUZ,
            19 => Self::F8E5M2,
            20 => Self::F8E5M2FNUZ,
            21 => Self::U4,
            22 => Self::I4,
            23 => Self::F4E2M1,
            24 => Self::F8E8M0,
            25 => Self::U2,
            26 => Self::I2,
            _ => return None,
        })
    }

    /// The ONNX `TensorProto.DataType` code of this dtype.
    pub fn onnx_code(self) -> i32 {
        match self {
            Self::F32 => 1,
            Self::U8 => 2,
            Self::I8 => 3,
            Self::U16 => 4,
            Self::I16 => 5,
            Self::I32 => 6,
            Self::I64 => 7,
            Self::String => 8,
            Self::Bool => 9,
            Self::F16 => 10,
            Self::F64 => 11,
            Self::U32 => 12,
            Self::U64 => 13,
            Self::BF16 => 16,
            Self::F8E4M3FN => 17,
            Self::F8E4M3FNUZ => 18,
            Self::F8E5M2 => 19,
            Self::F8E5M2FNUZ => 20,
            Self::U4 => 21,
            Self::I4 => 22,
            Self::F4E2M1 => 23,
            Self::F8E8M0 => 24,
            Self::U2 => 25,
            Self::I2 => 26,
        }
    }

    /// Bits one element occupies in packed storage (0 for strings).
    pub fn bits(self) -> usize {
        match self {
            Self::F64 | Self::I64 | Self::U64 => 64,
            Self::F32 | Self::I32 | Self::U32 => 32,
            Self::F16 | Self::BF16 | Self::I16 | Self::U16 => 16,
            Self::I8
            | Self::U8
            | Self::Bool
            | Self::F8E4M3FN
            | Self::F8E4M3FNUZ
            | Self::F8E5M2
            | Self::F8E5M2FNUZ
            | Self::F8E8M0 => 8,
            Self::I4 | Self::U4 | Self::F4E2M1 => 4,
            Self::I2 | Self::U2 => 2,
            Self::String => 0,
        }
    }

    /// Bytes needed to store `count` elements packed as in ONNX `raw_data`.
    pub fn packed_bytes(self, count: usize) -> usize {
        (count * self.bits()).div_ceil(8)
    }

    /// True for the "small" types that the executor keeps as one code per byte.
    pub fn is_small(self) -> bool {
        matches!(
            self,
            Self::I4
                | Self::U4
                | Self::I2
                | Self::U2
                | Self::F8E4M3FN
                | Self::F8E4M3FNUZ
                | Self::F8E5M2
                | Self::F8E5M2FNUZ
                | Self::F4E2M1
                | Self::F8E8M0
        )
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            Self::F32
                | Self::F64
                | Self::F16
                | Self::BF16
                | Self::F8E4M3FN
                | Self::F8E4M3FNUZ
                | Self::F8E5M2
                | Self::F8E5M2FNUZ
                | Self::F4E2M1
                | Self::F8E8M0
        )
    }

    /// The lower-case name used in reports and the CLI (`f32`, `i8`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F64 => "f64",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
            Self::I8 => "i8",
            Self::U8 => "u8",
            Self::I16 => "i16",
            Self::U16 => "u16",
            Self::I32 => "i32",
            Self::I64 => "i64",
            Self::U32 => "u32",
            Self::U64 => "u64",
            Self::Bool => "bool",
            Self::I4 => "i4",
            Self::U4 => "u4",
            Self::I2 => "i2",
            Self::U2 => "u2",
            Self::F8E4M3FN => "f8e4m3fn",
            Self::F8E4M3FNUZ => "f8e4m3fnuz",
            Self::F8E5M2 => "f8e5m2",
            Self::F8E5M2FNUZ => "f8e5m2fnuz",
            Self::F4E2M1 => "f4e2m1",
            Self::F8E8M0 => "f8e8m0",
            Self::String => "string",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
