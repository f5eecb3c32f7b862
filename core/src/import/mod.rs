//! Model importers. Each format lives in its own folder and produces an [`ir::Model`](crate::ir::Model)
//! plus an [`ImportReport`].

pub mod onnx;
pub mod shapes;

use std::fmt;
use std::path::{Path, PathBuf};

/// Warnings collected while importing (the model still loaded).
#[derive(Clone, Debug, Default)]
pub struct ImportReport {
    pub warnings: Vec<String>,
}

/// A node whose operator the executor cannot run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedOp {
    pub node: String,
    pub op: String,
}

/// Why a model could not be imported. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{file}: {source}")]
    Io { file: PathBuf, source: std::io::Error },
    #[error("{file}: {message}")]
    Format { file: PathBuf, message: String },
    #[error("{file}: invalid graph: {error}")]
    Invalid {
        file: PathBuf,
        error: crate::ir::ValidationError,
    },
    #[error("{file}: tensor '{tensor}' points to external data '{location}' outside the model's folder")]
    ExternalOutside {
        file: PathBuf,
        tensor: String,
        location: String,
    },
    #[error("{file}: {} unsupported op(s):\n{}", ops.len(), UnsupportedList(ops))]
    Unsupported { file: PathBuf, ops: Vec<UnsupportedOp> },
}

struct UnsupportedList<'a>(&'a [UnsupportedOp]);

impl fmt::Display for UnsupportedList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, u) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "  {} in node '{}'", u.op, u.node)?;
        }
        Ok(())
    }
}

impl ImportError {
    pub(crate) fn io(file: &Path, source: std::io::Error) -> Self {
        Self::Io {
            file: file.to_path_buf(),
            source,
        }
    }
}

/// Loads a model file, choosing the importer by extension.
pub fn load(path: &Path) -> Result<(crate::ir::Model, ImportReport), ImportError> {
    onnx::load(path)
}
