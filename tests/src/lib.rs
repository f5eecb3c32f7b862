//! Shared helpers for the end-to-end and conformance tests.

use npu_core::ir::Tensor;
use std::path::PathBuf;

/// The workspace's data folder (filled by the scripts in `scripts/`).
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("data")
}

/// Element-wise comparison with numpy's `allclose` rule (`|a - b| <= atol + rtol * |b|`);
/// NaNs compare equal to NaNs. Returns a description of the first mismatch.
pub fn compare(got: &Tensor, want: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!("dtype {} instead of {}", got.dtype(), want.dtype()));
    }
    if got.shape() != want.shape() {
        return Err(format!("shape {:?} instead of {:?}", got.shape(), want.shape()));
    }
    if let (Tensor::Str(g), Tensor::Str(w)) = (got, want) {
        return match g.iter().zip(w.iter()).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(i) => Err(format!(
                "element {i}: got {:?}, expected {:?}",
                g.iter().nth(i),
                w.iter().nth(i)
            )),
        };
    }
    let exact = !want.dtype().is_float();
    let (g, w) = (got.to_f64(), want.to_f64());
    for (i, (&a, &b)) in g.iter().zip(w.iter()).enumerate() {
        let ok = if a.is_nan() || b.is_nan() {
            a.is_nan() && b.is_nan()
        } else if exact || a.is_infinite() || b.is_infinite() {
            a == b
        } else {
            (a - b).abs() <= atol + rtol * b.abs()
        };
        if !ok {
            return Err(format!("element {i}: got {a}, expected {b}"));
        }
    }
    Ok(())
}
