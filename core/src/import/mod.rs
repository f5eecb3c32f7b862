//! Model importers. Each format lives in its own folder and produces an [`ir::Model`](crate::ir::Model)
//! plus an [`ImportReport`].

pub mod onnx;
pub mod shapes;
pub mod tflite;

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
    /// The content is a model format (or another kind of file) no importer reads yet.
    #[error("{file}: {what}: this build imports ONNX and TFLite models only")]
    UnsupportedFormat { file: PathBuf, what: &'static str },
    #[error("cancelled")]
    Cancelled,
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

pub use onnx::LoadOptions;

/// What a file's first bytes say it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Content {
    /// No other format's signature: read as an ONNX protobuf (which has no magic number).
    Onnx,
    /// A TFLite flatbuffer (file identifier `TFL3`).
    TfLite,
    /// Something we recognise but cannot import: what it is.
    Other(&'static str),
}

/// Recognises a model file by its first bytes (16 are enough).
pub fn detect(head: &[u8]) -> Content {
    if head.get(4..8) == Some(b"TFL3") {
        return Content::TfLite;
    }
    let signatures: [(&[u8], &'static str); 4] = [
        (b"PK\x03\x04", "a zip archive (a PyTorch checkpoint or a Keras file?)"),
        (b"\x89HDF\r\n\x1a\n", "an HDF5 file (a Keras model?)"),
        (b"GGUF", "a GGUF file"),
        (b"\x80\x02", "a Python pickle (a PyTorch checkpoint?)"),
    ];
    for (magic, what) in signatures {
        if head.starts_with(magic) {
            return Content::Other(what);
        }
    }
    // safetensors: an 8-byte little-endian header length, then a JSON object.
    if head.len() >= 9 && head[8] == b'{' && head[..8].iter().rev().take(4).all(|&b| b == 0) {
        return Content::Other("a safetensors file");
    }
    Content::Onnx
}

/// Loads a model file with the importer its content calls for; fails listing every
/// unsupported op at once.
pub fn load(path: &Path) -> Result<(crate::ir::Model, ImportReport), ImportError> {
    load_with(path, &LoadOptions::default())
}

/// [`load`] with options (the studio keeps ops the executor lacks, for viewing).
pub fn load_with(path: &Path, opts: &LoadOptions) -> Result<(crate::ir::Model, ImportReport), ImportError> {
    let mut head = [0u8; 16];
    let n = {
        use std::io::Read;
        let mut f = std::fs::File::open(path).map_err(|e| ImportError::io(path, e))?;
        let mut n = 0;
        while n < head.len() {
            match f.read(&mut head[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ImportError::io(path, e)),
            }
        }
        n
    };
    match detect(&head[..n]) {
        Content::Onnx => onnx::load_with(path, opts),
        Content::TfLite => tflite::load_with(path, opts),
        Content::Other(what) => Err(ImportError::UnsupportedFormat {
            file: path.to_path_buf(),
            what,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::{Content, detect};

    #[test]
    fn content_decides_the_importer() {
        // An ONNX ModelProto starts with field 1 (ir_version), a varint.
        assert_eq!(detect(&[0x08, 0x07, 0x12, 0x05]), Content::Onnx);
        assert_eq!(detect(b"\x1c\0\0\0TFL3\0\0\0\0"), Content::TfLite);
        assert!(matches!(detect(b"PK\x03\x04rest"), Content::Other(w) if w.contains("zip")));
        assert!(matches!(
            detect(b"\x10\0\0\0\0\0\0\0{\"__metadata__\""),
            Content::Other(w) if w.contains("safetensors")
        ));
        assert_eq!(detect(b""), Content::Onnx);
    }
}
