//! Tensors: runtime values of the executor and the decoded form of constants.

use super::{DType, small};
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

/// A dense tensor. Sub-byte integers and 8/4-bit floats are kept one code per byte
/// in `Small`; every other dtype has its own ndarray.
#[derive(Clone, Debug, PartialEq)]
pub enum Tensor {
    F32(ArrayD<f32>),
    F64(ArrayD<f64>),
    F16(ArrayD<f16>),
    BF16(ArrayD<bf16>),
    I8(ArrayD<i8>),
    U8(ArrayD<u8>),
    I16(ArrayD<i16>),
    U16(ArrayD<u16>),
    I32(ArrayD<i32>),
    I64(ArrayD<i64>),
    U32(ArrayD<u32>),
    U64(ArrayD<u64>),
    Bool(ArrayD<bool>),
    /// One code per byte of a small dtype (see [`small`]).
    Small(DType, ArrayD<u8>),
    /// UTF-8 strings (only element-wise comparisons and data movement use them).
    Str(ArrayD<String>),
}

/// Applies `$body` to the inner array of any tensor variant, binding it as `$a`.
#[macro_export]
macro_rules! for_each_tensor {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::ir::Tensor::F32($a) => $body,
            $crate::ir::Tensor::F64($a) => $body,
            $crate::ir::Tensor::F16($a) => $body,
            $crate::ir::Tensor::BF16($a) => $body,
            $crate::ir::Tensor::I8($a) => $body,
            $crate::ir::Tensor::U8($a) => $body,
            $crate::ir::Tensor::I16($a) => $body,
            $crate::ir::Tensor::U16($a) => $body,
            $crate::ir::Tensor::I32($a) => $body,
            $crate::ir::Tensor::I64($a) => $body,
            $crate::ir::Tensor::U32($a) => $body,
            $crate::ir::Tensor::U64($a) => $body,
            $crate::ir::Tensor::Bool($a) => $body,
            $crate::ir::Tensor::Small(_, $a) => $body,
            $crate::ir::Tensor::Str($a) => $body,
        }
    };
}

/// Like [`for_each_tensor`], but rebuilds a tensor of the same variant from `$body`.
#[macro_export]
macro_rules! map_tensor {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::ir::Tensor::F32($a) => $crate::ir::Tensor::F32($body),
            $crate::ir::Tensor::F64($a) => $crate::ir::Tensor::F64($body),
            $crate::ir::Tensor::F16($a) => $crate::ir::Tensor::F16($body),
            $crate::ir::Tensor::BF16($a) => $crate::ir::Tensor::BF16($body),
            $crate::ir::Tensor::I8($a) => $crate::ir::Tensor::I8($body),
            $crate::ir::Tensor::U8($a) => $crate::ir::Tensor::U8($body),
            $crate::ir::Tensor::I16($a) => $crate::ir::Tensor::I16($body),
            $crate::ir::Tensor::U16($a) => $crate::ir::Tensor::U16($body),
            $crate::ir::Tensor::I32($a) => $crate::ir::Tensor::I32($body),
            $crate::ir::Tensor::I64($a) => $crate::ir::Tensor::I64($body),
            $crate::ir::Tensor::U32($a) => $crate::ir::Tensor::U32($body),
            $crate::ir::Tensor::U64($a) => $crate::ir::Tensor::U64($body),
            $crate::ir::Tensor::Bool($a) => $crate::ir::Tensor::Bool($body),
            $crate::ir::Tensor::Small(dt, $a) => $crate::ir::Tensor::Small(*dt, $body),
            $crate::ir::Tensor::Str($a) => $crate::ir::Tensor::Str($body),
        }
    };
}

/// Why raw bytes could not become a tensor.
#[derive(Debug, thiserror::Error)]
pub enum TensorDataError {
    #[error("expected {expected} bytes for {count} elements of {dtype}, found {found}")]
    WrongSize {
        dtype: DType,
        count: usize,
        expected: usize,
        found: usize,
    },
    #[error("dtype {0} is not supported for tensor data")]
    Unsupported(DType),
    #[error("shape {0:?} is too large")]
    TooLarge(Vec<usize>),
}

fn read_le<T, const N: usize>(raw: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    raw.chunks_exact(N)
        .map(|c| {
            let mut b = [0u8; N];
            b.copy_from_slice(c);
            f(b)
        })
        .collect()
}

/// Checks that `len` bytes hold exactly `shape` elements of `dtype` packed as in ONNX
/// `raw_data`; returns the element count.
pub fn check_raw_len(dtype: DType, shape: &[usize], len: usize) -> Result<usize, TensorDataError> {
    let count = checked_numel(shape).ok_or_else(|| TensorDataError::TooLarge(shape.to_vec()))?;
    if dtype == DType::String {
        return Err(TensorDataError::Unsupported(dtype));
    }
    let expected = dtype.packed_bytes(count);
    if len != expected {
        return Err(TensorDataError::WrongSize {
            dtype,
            count,
            expected,
            found: len,
        });
    }
    Ok(count)
}

/// Element count of a shape, or `None` on overflow.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl Tensor {
    pub fn dtype(&self) -> DType {
        match self {
            Self::F32(_) => DType::F32,
            Self::F64(_) => DType::F64,
            Self::F16(_) => DType::F16,
            Self::BF16(_) => DType::BF16,
            Self::I8(_) => DType::I8,
            Self::U8(_) => DType::U8,
            Self::I16(_) => DType::I16,
            Self::U16(_) => DType::U16,
            Self::I32(_) => DType::I32,
            Self::I64(_) => DType::I64,
            Self::U32(_) => DType::U32,
            Self::U64(_) => DType::U64,
            Self::Bool(_) => DType::Bool,
            Self::Small(dt, _) => *dt,
            Self::Str(_) => DType::String,
        }
    }

    pub fn shape(&self) -> &[usize] {
        for_each_tensor!(self, a => a.shape())
    }

    pub fn len(&self) -> usize {
        for_each_tensor!(self, a => a.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decodes little-endian bytes packed as in ONNX `raw_data`.
    pub fn from_raw(dtype: DType, shape: &[usize], raw: &[u8]) -> Result<Self, TensorDataError> {
        let count = check_raw_len(dtype, shape, raw.len())?;
        let sh = IxDyn(shape);
        let mk = |v| Ok::<_, TensorDataError>(v);
        macro_rules! arr {
            ($v:expr) => {
                ArrayD::from_shape_vec(sh, $v).map_err(|_| TensorDataError::TooLarge(shape.to_vec()))?
            };
        }
        let t = match dtype {
            DType::F32 => Self::F32(arr!(read_le(raw, f32::from_le_bytes))),
            DType::F64 => Self::F64(arr!(read_le(raw, f64::from_le_bytes))),
            DType::F16 => Self::F16(arr!(read_le(raw, |b| f16::from_bits(u16::from_le_bytes(b))))),
            DType::BF16 => Self::BF16(arr!(read_le(raw, |b| bf16::from_bits(u16::from_le_bytes(b))))),
            DType::I8 => Self::I8(arr!(raw.iter().map(|&b| b as i8).collect())),
            DType::U8 => Self::U8(arr!(raw.to_vec())),
            DType::Bool => Self::Bool(arr!(raw.iter().map(|&b| b != 0).collect())),
            DType::I16 => Self::I16(arr!(read_le(raw, i16::from_le_bytes))),
            DType::U16 => Self::U16(arr!(read_le(raw, u16::from_le_bytes))),
            DType::I32 => Self::I32(arr!(read_le(raw, i32::from_le_bytes))),
            DType::U32 => Self::U32(arr!(read_le(raw, u32::from_le_bytes))),
            DType::I64 => Self::I64(arr!(read_le(raw, i64::from_le_bytes))),
            DType::U64 => Self::U64(arr!(read_le(raw, u64::from_le_bytes))),
            DType::I4 | DType::U4 | DType::F4E2M1 => {
                let v = (0..count).map(|i| (raw[i / 2] >> ((i % 2) * 4)) & 0x0F).collect();
                Self::Small(dtype, arr!(v))
            }
            DType::I2 | DType::U2 => {
                let v = (0..count).map(|i| (raw[i / 4] >> ((i % 4) * 2)) & 0x03).collect();
                Self::Small(dtype, arr!(v))
            }
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F8E8M0 => {
                Self::Small(dtype, arr!(raw.to_vec()))
            }
            DType::String => return Err(TensorDataError::Unsupported(dtype)),
        };
        mk(t)
    }

    /// Encodes into little-endian bytes packed as in ONNX `raw_data` (empty for strings,
    /// which ONNX stores in `string_data`).
    pub fn to_raw(&self) -> Vec<u8> {
        fn le<T: Copy, const N: usize>(a: &ArrayD<T>, f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
            a.iter().flat_map(|&x| f(x)).collect()
        }
        match self {
            Self::F32(a) => le(a, f32::to_le_bytes),
            Self::F64(a) => le(a, f64::to_le_bytes),
            Self::F16(a) => le(a, |x| x.to_bits().to_le_bytes()),
            Self::BF16(a) => le(a, |x| x.to_bits().to_le_bytes()),
            Self::I8(a) => a.iter().map(|&x| x as u8).collect(),
            Self::U8(a) => a.iter().copied().collect(),
            Self::Bool(a) => a.iter().map(|&x| u8::from(x)).collect(),
            Self::I16(a) => le(a, i16::to_le_bytes),
            Self::U16(a) => le(a, u16::to_le_bytes),
            Self::I32(a) => le(a, i32::to_le_bytes),
            Self::U32(a) => le(a, u32::to_le_bytes),
            Self::I64(a) => le(a, i64::to_le_bytes),
            Self::U64(a) => le(a, u64::to_le_bytes),
            Self::Str(_) => Vec::new(),
            Self::Small(dt, a) => {
                let per = 8 / dt.bits().max(1);
                if per <= 1 {
                    return a.iter().copied().collect();
                }
                let bits = dt.bits();
                let mut out = vec![0u8; dt.packed_bytes(a.len())];
                for (i, &c) in a.iter().enumerate() {
                    out[i / per] |= (c & ((1u8 << bits) - 1)) << ((i % per) * bits);
                }
                out
            }
        }
    }

    /// The elements as f32: borrowed when the tensor already is f32, converted otherwise.
    pub fn f32_cow(&self) -> ndarray::CowArray<'_, f32, IxDyn> {
        match self {
            Self::F32(a) => a.view().into(),
            other => other.to_f32().into(),
        }
    }

    /// Converts every element to f32 (small types decoded, integers converted).
    pub fn to_f32(&self) -> ArrayD<f32> {
        match self {
            Self::F32(a) => a.clone(),
            Self::F64(a) => a.mapv(|x| x as f32),
            Self::F16(a) => a.mapv(f16::to_f32),
            Self::BF16(a) => a.mapv(bf16::to_f32),
            Self::I8(a) => a.mapv(f32::from),
            Self::U8(a) => a.mapv(f32::from),
            Self::I16(a) => a.mapv(f32::from),
            Self::U16(a) => a.mapv(f32::from),
            Self::I32(a) => a.mapv(|x| x as f32),
            Self::I64(a) => a.mapv(|x| x as f32),
            Self::U32(a) => a.mapv(|x| x as f32),
            Self::U64(a) => a.mapv(|x| x as f32),
            Self::Bool(a) => a.mapv(|x| if x { 1.0 } else { 0.0 }),
            Self::Small(dt, a) => a.mapv(|c| small::decode(*dt, c)),
            Self::Str(a) => a.map(|v| v.parse().unwrap_or(f32::NAN)),
        }
    }

    /// Converts every element to f64 (exact for every integer type up to 2^53).
    pub fn to_f64(&self) -> ArrayD<f64> {
        match self {
            Self::F64(a) => a.clone(),
            Self::I64(a) => a.mapv(|x| x as f64),
            Self::U64(a) => a.mapv(|x| x as f64),
            Self::I32(a) => a.mapv(f64::from),
            Self::U32(a) => a.mapv(f64::from),
            other => other.to_f32().mapv(f64::from),
        }
    }

    /// Integer view of an integer tensor (used for shapes, indices and axes).
    pub fn to_i64(&self) -> Option<ArrayD<i64>> {
        Some(match self {
            Self::I64(a) => a.clone(),
            Self::I32(a) => a.mapv(i64::from),
            Self::I16(a) => a.mapv(i64::from),
            Self::I8(a) => a.mapv(i64::from),
            Self::U8(a) => a.mapv(i64::from),
            Self::U16(a) => a.mapv(i64::from),
            Self::U32(a) => a.mapv(i64::from),
            Self::U64(a) => a.mapv(|x| x as i64),
            Self::Bool(a) => a.mapv(i64::from),
            _ => return None,
        })
    }

    /// A one-element or one-dimensional integer tensor as a vector.
    pub fn as_i64_vec(&self) -> Option<Vec<i64>> {
        self.to_i64().map(|a| a.iter().copied().collect())
    }

    pub fn scalar_f32(v: f32) -> Self {
        Self::F32(ArrayD::from_elem(IxDyn(&[]), v))
    }

    /// An f32 tensor of the given shape filled from a vector.
    pub fn from_f32(shape: &[usize], data: Vec<f32>) -> Option<Self> {
        ArrayD::from_shape_vec(IxDyn(shape), data).ok().map(Self::F32)
    }

    /// A reshaped copy (or view made owned) with the same elements in logical order.
    #[expect(
        clippy::cloned_instead_of_copied,
        reason = "one body serves every dtype through `map_tensor!`, strings (not Copy) included"
    )]
    pub fn reshaped(&self, shape: &[usize]) -> Option<Self> {
        let ok = checked_numel(shape) == Some(self.len());
        if !ok {
            return None;
        }
        Some(map_tensor!(self, a => {
            let std = a.as_standard_layout();
            let data = match std.as_slice() {
                Some(s) => s.to_vec(),
                None => std.iter().cloned().collect(),
            };
            ArrayD::from_shape_vec(IxDyn(shape), data).ok()?
        }))
    }

    /// The same elements under another shape: without a copy when the array is in standard
    /// layout, as [`Tensor::reshaped`] otherwise; `None` if the element counts differ.
    pub fn into_reshaped(self, shape: &[usize]) -> Option<Self> {
        if checked_numel(shape) != Some(self.len()) {
            return None;
        }
        if !for_each_tensor!(&self, a => a.is_standard_layout()) {
            return self.reshaped(shape);
        }
        let dims = IxDyn(shape);
        macro_rules! mv {
            ($($v:ident),*) => {
                match self {
                    $(Self::$v(a) => Self::$v(a.into_shape_with_order(dims).ok()?),)*
                    Self::Small(dt, a) => Self::Small(dt, a.into_shape_with_order(dims).ok()?),
                }
            };
        }
        Some(mv!(
            F32, F64, F16, BF16, I8, U8, I16, U16, I32, I64, U32, U64, Bool, Str
        ))
    }

    /// Bytes the elements occupy in the executor (small types count one byte each).
    pub fn size_bytes(&self) -> usize {
        self.len() * self.dtype().bits().max(8) / 8
    }
}

/// A runtime value: a tensor, a sequence of tensors, or an optional (ONNX's non-tensor
/// types, which If branches, Identity and the Sequence*/Optional* ops pass around).
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Tensor(Tensor),
    Seq(Vec<Tensor>),
    Opt(Option<Box<Val>>),
}

impl Val {
    /// What kind of value this is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Tensor(_) => "a tensor",
            Self::Seq(_) => "a sequence",
            Self::Opt(_) => "an optional",
        }
    }
}

impl From<Tensor> for Val {
    fn from(t: Tensor) -> Self {
        Self::Tensor(t)
    }
}
