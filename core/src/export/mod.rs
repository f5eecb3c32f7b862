//! Files a user ships or reads: ONNX models written back from the IR (after graph
//! optimization, later with Q/DQ), and atomic writes shared by every writer.

pub mod onnx;
pub mod qdq;
pub mod tflite;

use std::io::Write as _;
use std::path::Path;

/// Why a file could not be written. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{file}: {source}")]
    Io { file: String, source: std::io::Error },
    #[error("{file}: {message}")]
    Model { file: String, message: String },
    #[error("cancelled")]
    Cancelled,
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename, so a
/// crash or a full disk never leaves a half-written file in place of a good one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    // Unique per call: background jobs of one process may write the same file at once.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let io = |source| ExportError::Io {
        file: path.display().to_string(),
        source,
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{k}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}
