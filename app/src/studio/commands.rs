//! Intents sent by panels, menus, shortcuts and the canvas. The studio applies them once
//! per frame after layout (`command_handling.rs`), so no panel changes the studio's state
//! while another one is drawing it. What a panel owns for itself (the text being typed, a
//! slider's position, which overlay it paints, whether its window is open) it changes
//! directly; everything else goes through a `Command`.

use crate::graph::doc::ScopeId;
use npu_core::ir::{NodeId, ValueId};
use npu_core::quant::LayerPrecision;
use npu_core::quant::recipe::Rule;
use std::path::PathBuf;

/// What the inspector shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection {
    Node(NodeId),
    /// A tensor: a weight, a graph input or an intermediate value.
    Value(ValueId),
    Scope(ScopeId),
}

/// Formats the studio can export the current view to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    Png,
    Svg,
}

/// What the calibration uses (the quantization panel's form; saved in projects).
#[derive(Clone, Debug, PartialEq)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "the recipe's independent steps, one box each in the panel"
)]
pub struct Setup {
    /// A folder (or file) of samples: .npy/.npz/.png/.jpg, or `synthetic:N`.
    pub data: String,
    pub preprocess: String,
    pub preset: String,
    /// Cross-layer equalization of the optimized graph before calibration.
    pub equalize: bool,
    /// Per-channel constants moved from a conv's output into the next conv's bias.
    pub absorb_bias: bool,
    /// Activation ranges judged by the output SQNR, validated on held-back samples.
    pub refine_ranges: bool,
    /// Per-channel weight ranges chosen by each layer's output error (SeqMSE).
    pub seq_mse: bool,
    /// LayerNorm outlier channels migrated into the MatMul weights (SmoothQuant).
    pub smooth_quant: bool,
    /// Weight codes of linear layers chosen against their inputs (GPTQ).
    pub gptq: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            data: String::new(),
            preprocess: String::new(),
            preset: "w8a8".into(),
            equalize: false,
            absorb_bias: false,
            refine_ranges: false,
            seq_mse: false,
            smooth_quant: false,
            gptq: false,
        }
    }
}

/// The analyses a quantization session runs besides simulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    /// Each layer alone kept float: how much output SQNR it gains.
    Sensitivity,
    /// The mixed-precision search and its curve.
    Pareto,
}

/// A file or folder the user picks in a system dialog (run as a background job, so the
/// window keeps drawing while it is open).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialog {
    /// A model to open.
    OpenModel,
    OpenProject,
    /// Where to save the project.
    SaveProject,
    /// Where to write the view.
    ExportView(ExportFormat),
    /// The folder of calibration samples; then calibrate when `then_calibrate`.
    Samples {
        then_calibrate: bool,
    },
    /// The recipe file the recipe editor loads and saves.
    RecipeFile,
    /// The folder the pipeline's Export stage writes to.
    ExportFolder,
    /// Where to write the compiled binary.
    WriteBinary,
}

#[derive(Clone, Debug)]
pub enum Command {
    /// Open a model file (in the background; the current model stays until it succeeds).
    Open(PathBuf),
    /// Ask for a file or folder with the system dialog, then act on it.
    Dialog(Dialog),
    /// Select something and show it in the inspector (`None` clears).
    Select(Option<Selection>),
    /// Clear the selection and the multi-selection.
    ClearSelection,
    /// Select and bring into view: expands scopes that hide it, centres the view.
    Reveal(Selection),
    /// Collapse or expand a scope of the graph.
    ToggleScope(ScopeId),
    /// Collapse every scope, or expand every scope.
    SetAllScopes {
        collapsed: bool,
    },
    FitView,
    ZoomBy(f32),
    /// Move the view by this much (graph units).
    PanBy(egui::Vec2),
    ZoomToSelection,
    /// Put the keyboard in the search box.
    FocusSearch,
    /// Jump to the next (+1) or previous (−1) search match.
    SearchStep(i32),
    /// Write the current view to a file (asks for the path when `None`).
    Export(ExportFormat, Option<PathBuf>),
    SetDarkTheme(bool),
    ToggleHelp,
    /// Show or hide the pipeline row.
    TogglePipeline,
    /// Show or hide the graph optimizer panel.
    ToggleOptimizer,
    /// Turn one optimizer pass (by its index in `passes::all_passes()`) on or off.
    SetPass {
        index: usize,
        enabled: bool,
    },
    /// Run the enabled optimizer passes on the open model.
    RunOptimizer,
    /// Show the model after this many rewrites in the optimizer's right pane (replayed in
    /// the background).
    SetOptimizerStep(usize),
    /// Select a node of the optimizer's right pane (`None` clears).
    SelectAfter(Option<NodeId>),
    /// Collapse or expand a scope of the optimizer's right pane.
    ToggleAfterScope(ScopeId),
    /// Write the model after the current step next to the open file as `<name>.opt.onnx`.
    SaveOptimizedStep,
    /// Close the before/after comparison.
    CloseComparison,
    /// Show or hide the quantization panel.
    ToggleQuantize,
    /// Replace the calibration setup (samples, preprocessing, preset).
    SetQuantSetup(Setup),
    /// Calibrate and simulate the open model with the quantization setup.
    StartQuantization,
    /// Stop the calibration and first simulation (the session is dropped).
    CancelQuantization,
    /// Simulate every sample again from scratch with the current edits.
    Resimulate,
    CancelResimulation,
    /// Measure sensitivity, or search mixed precision to this target (dB).
    RunAnalysis(JobKind, f64),
    CancelAnalysis,
    /// Make this point of the mixed-precision curve the current plan (an undoable edit).
    ApplyParetoPoint(usize),
    /// Replace the multi-selection (Shift+click, Shift+drag, "select all of op type").
    SetMulti(Vec<NodeId>),
    /// Set the precision of nodes of the open model (an undoable edit).
    SetPrecision(Vec<NodeId>, LayerPrecision),
    /// Replace the recipe editor's rules.
    SetRules(Vec<Rule>),
    /// Make the rules the current edits (one undoable edit).
    ApplyRules,
    /// Read a recipe file: its preset and rules replace the editor's, and its rules and
    /// overrides become the edits once a plan of its preset is calibrated.
    LoadRecipe(PathBuf),
    /// Write the editor's recipe (preset, rules, overrides) to a file.
    SaveRecipe(PathBuf),
    /// Take one layer's precision edit back (an undoable edit).
    RemoveOverride(String),
    /// Undo or redo the last project edit.
    Undo,
    Redo,
    /// Save the project (to its file, or to this path; asks when neither is known).
    SaveProject(Option<PathBuf>),
    /// Open a project: its model, calibration setup and precision edits.
    OpenProject(PathBuf),
    /// Apply the edits found in the autosave file, or forget them.
    RecoverEdits,
    DiscardRecovery,
    /// Write the optimized graph, the plan and its report (the pipeline's Export stage).
    ExportPlan,
    /// Compile the current plan for the chosen target (the pipeline's Compile stage).
    RunCompile,
    CancelCompile,
    /// Emulates the compiled binary on the first sample.
    RunEmulate,
    CancelEmulate,
    /// Choose the Compile stage's target (an id of `plugins/targets`).
    SetTarget(String),
    /// Keep these nodes on the CPU in the compile (or let the partitioner place them).
    ForceCpu(Vec<NodeId>, bool),
    /// Paint the placement on the graph, or the quantization overlay.
    ShowPlacement(bool),
    /// Colour the placement overlay by each node's share of the latency.
    ShowLatency(bool),
    /// Write the compiled binary (`.npub`; asks for the path when `None`).
    WriteBinary(Option<PathBuf>),
    /// Show or hide the compile report panel.
    ShowCompileReport(bool),
    /// Where the pipeline's Export stage writes.
    SetExportDir(PathBuf),
    /// Which deployable files it writes.
    SetExportFormats(npu_core::pipeline::BundleFormats),
    /// Stop opening a model.
    CancelOpen,
    /// Stop the optimizer's run.
    CancelOptimizer,
    /// Cancel every job that can be cancelled (the status bar's Cancel).
    CancelJobs,
    DismissError,
}
