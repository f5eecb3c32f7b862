//! Projects: the model (path and content hash), the calibration setup, the preset and the
//! per-layer precision edits, saved as RON. Every edit is also written at once (atomically)
//! to a sidecar file next to the project, or next to the model before the project has been
//! saved; when a model is opened and its sidecar holds edits newer than the project, the
//! studio offers to recover them.

pub use super::document::file_hash;
use super::quantize::{Edits, Setup};
use npu_core::quant::recipe::Rule;
use npu_core::quant::{LayerPrecision, QuantPlan};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "the recipe's independent steps, each a `name: true` field of the project file"
)]
pub struct Project {
    pub version: u32,
    /// The model file, relative to the project's folder when it lies under it.
    pub model: PathBuf,
    /// FNV-1a 64 of the model file's bytes (hex): reopening warns when the file changed.
    pub model_hash: String,
    pub data: String,
    pub preprocess: String,
    pub preset: String,
    /// Cross-layer equalization before calibration.
    #[serde(default)]
    pub equalize: bool,
    /// Per-channel constants moved from a conv's output into the next conv's bias.
    #[serde(default)]
    pub absorb_bias: bool,
    /// Activation ranges refined against the output SQNR.
    #[serde(default)]
    pub refine_ranges: bool,
    /// Weight ranges chosen by each layer's output error (SeqMSE).
    #[serde(default)]
    pub seq_mse: bool,
    /// LayerNorm outlier channels migrated into the MatMul weights (SmoothQuant).
    #[serde(default)]
    pub smooth_quant: bool,
    /// Weight codes of linear layers chosen against their inputs (GPTQ).
    #[serde(default)]
    pub gptq: bool,
    /// Precision edits by node name of the optimized graph.
    pub layers: BTreeMap<String, LayerPrecision>,
    /// The recipe editor's rules.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// The plan of an applied mixed-precision point (its input format and bias corrections),
    /// which `layers` edit; absent: the calibrated plan.
    #[serde(default)]
    pub plan: Option<QuantPlan>,
    /// The Compile stage's target and the nodes kept on the CPU.
    #[serde(default)]
    pub compile: CompileChoice,
}

/// The Compile stage's choices: the target id, and the nodes the user keeps on the CPU
/// (names of the open model's nodes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompileChoice {
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub force_cpu: BTreeSet<String>,
}

impl Project {
    pub fn new(model: &Path, setup: &Setup, edits: &Edits, rules: &[Rule]) -> Result<Self, String> {
        Ok(Self {
            version: 1,
            model: model.to_path_buf(),
            model_hash: file_hash(model)?,
            data: setup.data.clone(),
            preprocess: setup.preprocess.clone(),
            preset: setup.preset.clone(),
            equalize: setup.equalize,
            absorb_bias: setup.absorb_bias,
            refine_ranges: setup.refine_ranges,
            seq_mse: setup.seq_mse,
            smooth_quant: setup.smooth_quant,
            gptq: setup.gptq,
            layers: edits.layers.clone(),
            rules: rules.to_vec(),
            plan: edits.base.as_deref().cloned(),
            compile: CompileChoice::default(),
        })
    }

    /// The same with the Compile stage's choices.
    #[must_use]
    pub fn with_compile(mut self, compile: CompileChoice) -> Self {
        self.compile = compile;
        self
    }

    /// The precision state the project holds.
    pub fn edits(&self) -> Edits {
        Edits {
            layers: self.layers.clone(),
            base: self.plan.clone().map(std::sync::Arc::new),
        }
    }

    pub fn setup(&self) -> Setup {
        Setup {
            data: self.data.clone(),
            preprocess: self.preprocess.clone(),
            preset: self.preset.clone(),
            equalize: self.equalize,
            absorb_bias: self.absorb_bias,
            refine_ranges: self.refine_ranges,
            seq_mse: self.seq_mse,
            smooth_quant: self.smooth_quant,
            gptq: self.gptq,
        }
    }

    /// Writes the project atomically; the model path is stored relative to the project's
    /// folder when it lies under it.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let mut p = self.clone();
        if let Some(dir) = path.parent()
            && let Ok(rel) = self.model.strip_prefix(dir)
        {
            p.model = rel.to_path_buf();
        }
        let text = ron::ser::to_string_pretty(&p, ron::ser::PrettyConfig::default()).map_err(|e| e.to_string())?;
        npu_core::export::write_atomic(path, text.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Reads a project; a relative model path is resolved against the project's folder.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut p: Self = ron::from_str(&text).map_err(|e| format!("{}: not a project: {e}", path.display()))?;
        if p.model.is_relative()
            && let Some(dir) = path.parent()
        {
            p.model = dir.join(&p.model);
        }
        Ok(p)
    }
}

/// The sidecar autosave file of a project file, or of a model without a project: next to it,
/// or in `dir` when given.
pub fn autosave_path(project: Option<&Path>, model: &Path, dir: Option<&Path>) -> PathBuf {
    let base = project.unwrap_or(model);
    let mut name = base.file_name().map(std::ffi::OsStr::to_os_string).unwrap_or_default();
    name.push(".autosave.ron");
    match dir {
        Some(d) => d.join(name),
        None => base.with_file_name(name),
    }
}

/// Edits in an autosave file that the project (or, without one, the plain model) lacks.
pub fn recoverable(autosave: &Path, saved: Option<&Project>) -> Option<Project> {
    let p = Project::load(autosave).ok()?;
    let differs = match saved {
        Some(s) => {
            s.layers != p.layers
                || s.data != p.data
                || s.preset != p.preset
                || s.equalize != p.equalize
                || s.absorb_bias != p.absorb_bias
                || s.refine_ranges != p.refine_ranges
                || s.seq_mse != p.seq_mse
                || s.smooth_quant != p.smooth_quant
                || s.gptq != p.gptq
                || s.rules != p.rules
                || s.plan != p.plan
        }
        None => !p.layers.is_empty() || p.plan.is_some(),
    };
    differs.then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_load_round_trip_with_relative_model() {
        let dir = std::env::temp_dir().join(format!("npu_project_{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let model = dir.join("m.onnx");
        std::fs::write(&model, b"model bytes").expect("write");
        let mut layers = BTreeMap::new();
        layers.insert("conv".to_string(), LayerPrecision::INT16);
        let setup = Setup {
            data: "photos".into(),
            preprocess: "size=8x8".into(),
            preset: "w8a8".into(),
            equalize: true,
            absorb_bias: true,
            refine_ranges: true,
            seq_mse: true,
            smooth_quant: true,
            gptq: true,
        };
        let rules = vec![Rule {
            name: Some("^conv".into()),
            op: None,
            precision: "fp16".into(),
        }];
        let edits = Edits { layers, base: None };
        let p = Project::new(&model, &setup, &edits, &rules)
            .expect("project")
            .with_compile(CompileChoice {
                target: Some("phone-npu".into()),
                force_cpu: ["conv_1".to_string()].into_iter().collect(),
            });
        let path = dir.join("p.npuproj.ron");
        p.save(&path).expect("save");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.contains("model: \"m.onnx\""), "{text}");
        let back = Project::load(&path).expect("load");
        assert_eq!(back, p);
        assert_eq!(back.model_hash, file_hash(&model).expect("hash"));
        // A changed model changes the hash.
        std::fs::write(&model, b"other bytes").expect("write");
        assert_ne!(back.model_hash, file_hash(&model).expect("hash"));
        assert_eq!(
            autosave_path(Some(&path), &model, None),
            dir.join("p.npuproj.ron.autosave.ron")
        );
        assert!(recoverable(&path, Some(&back)).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
