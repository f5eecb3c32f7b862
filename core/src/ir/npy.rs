//! `.npy` files of every numeric dtype and bool, read into a [`Tensor`].

use super::Tensor;
use ndarray::ArrayD;
use std::path::Path;

/// Why an `.npy` file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("cannot open it: {0}")]
    Open(std::io::Error),
    #[error("not an .npy file of a supported dtype (float32, float64, int8/16/32/64, uint8/16/32/64, bool)")]
    Dtype,
}

/// Reads an `.npy` file of float32/64, int8/16/32/64, uint8/16/32/64 or bool.
pub fn read(path: &Path) -> Result<Tensor, NpyError> {
    use ndarray_npy::ReadNpyExt;
    let open = || {
        std::fs::File::open(path)
            .map(std::io::BufReader::new)
            .map_err(NpyError::Open)
    };
    macro_rules! try_type {
        ($t:ty, $v:ident) => {
            if let Ok(a) = ArrayD::<$t>::read_npy(open()?) {
                return Ok(Tensor::$v(a));
            }
        };
    }
    try_type!(f32, F32);
    try_type!(f64, F64);
    try_type!(i64, I64);
    try_type!(i32, I32);
    try_type!(u8, U8);
    try_type!(i8, I8);
    try_type!(i16, I16);
    try_type!(u16, U16);
    try_type!(u32, U32);
    try_type!(u64, U64);
    try_type!(bool, Bool);
    Err(NpyError::Dtype)
}
