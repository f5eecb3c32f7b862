//! The open model as the studio holds it, and the two jobs that make it: opening (import,
//! cards, first layout) and laying out again after scopes collapse or expand. Both run off
//! the UI thread; the studio swaps their results in when they land.

use super::jobs::{JobError, JobProgress};
use crate::graph::doc::{GraphDoc, ScopeId};
use crate::graph::scene::{Scene, SceneBuilder};
use npu_core::ir::Model;
use npu_core::program::Program;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Models with more cards than this open with their scopes collapsed.
pub const COLLAPSE_ABOVE_ITEMS: usize = 1500;

/// An open model with its cards and current layout.
pub struct Loaded {
    pub path: PathBuf,
    pub model: Arc<Model>,
    pub doc: Arc<GraphDoc>,
    pub scene: Arc<Scene>,
    /// Collapsed scopes as the user set them (the scene may lag while a layout runs).
    pub collapsed: HashSet<ScopeId>,
    /// Collapsed scopes of `scene`.
    pub(super) scene_collapsed: HashSet<ScopeId>,
    /// `None` while a layout job owns it.
    pub(super) builder: Option<SceneBuilder>,
    pub warnings: Vec<String>,
    /// The file's modification time when it was opened (a later one makes the import stale).
    pub modified: Option<std::time::SystemTime>,
    /// A quantized TFLite file's own integer program: what the Compile and Emulate stages
    /// take when no plan of ours exists.
    pub program: Option<Arc<Program>>,
}

impl Loaded {
    /// The file's name without its extension (what exported files are named after).
    pub fn stem(&self) -> String {
        self.path
            .file_stem()
            .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
    }
}

/// What the open job hands back.
pub struct Opened {
    pub path: PathBuf,
    pub model: Arc<Model>,
    pub doc: Arc<GraphDoc>,
    pub builder: SceneBuilder,
    pub scene: Scene,
    pub collapsed: HashSet<ScopeId>,
    pub warnings: Vec<String>,
    pub modified: Option<std::time::SystemTime>,
    /// The file's content hash, when asked for (a project checks its model with it).
    pub hash: Option<String>,
    pub program: Option<Arc<Program>>,
}

impl Opened {
    pub fn into_loaded(self) -> Loaded {
        Loaded {
            path: self.path,
            model: self.model,
            doc: self.doc,
            scene: Arc::new(self.scene),
            scene_collapsed: self.collapsed.clone(),
            collapsed: self.collapsed,
            builder: Some(self.builder),
            warnings: self.warnings,
            modified: self.modified,
            program: self.program,
        }
    }
}

/// What a layout job hands back.
pub struct Relaid {
    pub builder: SceneBuilder,
    pub scene: Scene,
    pub collapsed: HashSet<ScopeId>,
}

/// The scopes a model opens with collapsed: all of them when it has many cards.
pub fn initial_collapsed(doc: &GraphDoc) -> HashSet<ScopeId> {
    if doc.items.len() > COLLAPSE_ABOVE_ITEMS {
        (1..doc.scopes.len()).collect()
    } else {
        HashSet::new()
    }
}

/// The open job: imports (ops the executor lacks are kept, for viewing), builds the cards
/// and lays out; with `hash`, also hashes the file's bytes.
pub fn open_model(path: &Path, hash: bool, p: &JobProgress) -> Result<Opened, JobError> {
    p.set(0.05, "reading");
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let opts = npu_core::import::LoadOptions {
        allow_unsupported: true,
    };
    let part = npu_core::progress::Part {
        inner: p,
        from: 0.05,
        to: 0.4,
    };
    let imported = npu_core::pipeline::import(path, &opts, &part)?;
    p.check()?;
    let mut warnings = imported.report.warnings;
    // A quantized file is its own integer program; one the reader cannot take still opens.
    let program = match npu_core::pipeline::file_program(path) {
        Ok(program) => program.map(Arc::new),
        Err(e) => {
            warnings.push(format!(
                "Its integer program was not read (quantize it to compile): {e}"
            ));
            None
        }
    };
    p.set(0.4, "building cards");
    let doc = Arc::new(GraphDoc::build(&imported.model));
    p.check()?;
    let collapsed = initial_collapsed(&doc);
    p.set(0.6, "laying out");
    let mut builder = SceneBuilder::new(doc.clone());
    let scene = builder.build(&collapsed);
    p.check()?;
    let hash = if hash { file_hash(path).ok() } else { None };
    p.set(1.0, "done");
    Ok(Opened {
        path: path.to_path_buf(),
        model: Arc::new(imported.model),
        doc,
        builder,
        scene,
        collapsed,
        warnings,
        modified,
        hash,
        program,
    })
}

/// The layout job: the scopes whose state changed are laid out again, the rest comes from
/// the builder's cache.
pub(super) fn relayout(
    mut builder: SceneBuilder,
    collapsed: HashSet<ScopeId>,
    changed: Vec<ScopeId>,
    p: &JobProgress,
) -> Relaid {
    p.set(0.0, "laying out");
    for s in changed {
        builder.invalidate(s);
    }
    let scene = builder.build(&collapsed);
    Relaid {
        builder,
        scene,
        collapsed,
    }
}

/// FNV-1a 64 of a file's bytes, as 16 hex digits.
pub fn file_hash(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    Ok(format!("{h:016x}"))
}
