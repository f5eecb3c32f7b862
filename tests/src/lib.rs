//! Shared helpers for the end-to-end and conformance tests.

use npu_core::import::onnx::{tensor_from_pb, value_from_pb};
use npu_core::ir::{Tensor, Val, ValueKind};
use std::path::{Path, PathBuf};

/// A small xorshift generator, so the fuzzers and random tests are reproducible.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform-ish in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// The workspace's data folder (filled by the scripts in `scripts/`).
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("data")
}

/// A model file loaded and put through the graph optimizer (what plans refer to).
pub fn optimized(path: &Path) -> npu_core::ir::Model {
    let (m, _) = npu_core::import::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    npu_core::passes::optimize(&m, &npu_core::passes::Options::default())
        .expect("optimizes")
        .model
}

/// The sub-folders of `dir`, sorted.
/// The largest difference between the first outputs of two FP32 models fed one `.npy`
/// file as input `name`.
pub fn fp32_moved(a: &npu_core::ir::Model, b: &npu_core::ir::Model, name: &str, file: &Path) -> f32 {
    let x = npu_core::ir::npy::read(file).expect("npy");
    let inputs = std::collections::HashMap::from([(name.to_owned(), x)]);
    let run = |m: &npu_core::ir::Model| {
        npu_core::sim::Executor::new(m, 2)
            .expect("exec")
            .run(&inputs)
            .expect("runs")[0]
            .1
            .to_f32()
    };
    let (a, b) = (run(a), run(b));
    a.iter().zip(b.iter()).fold(0f32, |d, (p, q)| d.max((p - q).abs()))
}

pub fn sub_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/fetch_models.py)", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// The exported real models under `data/real/` (one folder each), sorted.
pub fn real_model_dirs() -> Vec<PathBuf> {
    sub_dirs(&data_dir().join("real"))
}

/// Feeds for a model: its graph inputs, in order, named.
pub fn feeds(model: &npu_core::ir::Model, inputs: Vec<Tensor>) -> std::collections::HashMap<String, Tensor> {
    let g = &model.graph;
    g.inputs
        .iter()
        .zip(inputs)
        .map(|(&i, t)| (g.values[i].name.clone(), t))
        .collect()
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

/// [`compare`] for any runtime value: sequences element by element, optionals by presence.
pub fn compare_val(got: &Val, want: &Val, rtol: f64, atol: f64) -> Result<(), String> {
    match (got, want) {
        (Val::Tensor(g), Val::Tensor(w)) => compare(g, w, rtol, atol),
        (Val::Seq(g), Val::Seq(w)) => {
            if g.len() != w.len() {
                return Err(format!("sequence of {} instead of {}", g.len(), w.len()));
            }
            for (i, (a, b)) in g.iter().zip(w).enumerate() {
                compare(a, b, rtol, atol).map_err(|e| format!("sequence element {i}: {e}"))?;
            }
            Ok(())
        }
        (Val::Opt(None), Val::Opt(None)) => Ok(()),
        (Val::Opt(Some(g)), Val::Opt(Some(w))) => compare_val(g, w, rtol, atol),
        (Val::Opt(g), Val::Opt(w)) => Err(format!(
            "optional {} instead of {}",
            if g.is_some() { "with a value" } else { "empty" },
            if w.is_some() { "with a value" } else { "empty" }
        )),
        _ => Err(format!("{} instead of {}", got.kind(), want.kind())),
    }
}

/// Reads `DIR/<prefix>_0.pb`, `_1.pb`, … as the values `kinds` says, one per file: a file
/// missing for any of them is an error (a case with no expected outputs compares nothing),
/// and so is a file beyond them (a value the graph does not declare).
pub fn read_pb_values(dir: &Path, prefix: &str, kinds: &[ValueKind]) -> Result<Vec<Val>, String> {
    let mut out = Vec::new();
    for (i, &kind) in kinds.iter().enumerate() {
        let f = dir.join(format!("{prefix}_{i}.pb"));
        let bytes = std::fs::read(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        out.push(value_from_pb(&bytes, kind).map_err(|e| format!("{}: {e}", f.display()))?);
    }
    let extra = dir.join(format!("{prefix}_{}.pb", kinds.len()));
    if extra.exists() {
        return Err(format!(
            "{}: the graph declares {} {prefix}s, the data has more",
            extra.display(),
            kinds.len()
        ));
    }
    Ok(out)
}

/// Reads `DIR/<prefix>_0.pb`, `_1.pb`, … (ONNX TensorProto files) until one is missing.
pub fn read_pb_set(dir: &Path, prefix: &str) -> Result<Vec<Tensor>, String> {
    let mut out = Vec::new();
    for i in 0.. {
        let f = dir.join(format!("{prefix}_{i}.pb"));
        let Ok(bytes) = std::fs::read(&f) else { break };
        let (_, t) = tensor_from_pb(&bytes).map_err(|e| format!("{}: {e}", f.display()))?;
        out.push(t);
    }
    Ok(out)
}

/// max |got − want| / max |want|, in f64 (0 when both are all zeros).
pub fn max_rel_err(got: &Tensor, want: &Tensor) -> f64 {
    let (g, w) = (got.to_f64(), want.to_f64());
    let max_ref = w.iter().fold(0f64, |m, v| m.max(v.abs()));
    let max_err = g.iter().zip(w.iter()).fold(0f64, |m, (a, b)| m.max((a - b).abs()));
    if max_err == 0.0 { 0.0 } else { max_err / max_ref }
}

/// ‖got − want‖₂ / ‖want‖₂, in f64 (0 when both are all zeros).
pub fn l2_rel_err(got: &Tensor, want: &Tensor) -> f64 {
    let (g, w) = (got.to_f64(), want.to_f64());
    let norm_ref = w.iter().map(|v| v * v).sum::<f64>().sqrt();
    let norm_err = g
        .iter()
        .zip(w.iter())
        .map(|(a, b)| (a - b) * (a - b))
        .sum::<f64>()
        .sqrt();
    if norm_err == 0.0 { 0.0 } else { norm_err / norm_ref }
}
