//! Intents sent by panels; the studio applies them once per frame, after layout.

use crate::graph::doc::ScopeId;
use npu_core::ir::{NodeId, ValueId};
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

#[derive(Clone, Debug)]
pub enum Command {
    /// Open a model file (in the background; the current model stays until it succeeds).
    Open(PathBuf),
    /// Ask for a file with the system dialog, then open it.
    OpenDialog,
    /// Select something and show it in the inspector (`None` clears).
    Select(Option<Selection>),
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
    ZoomToSelection,
    /// Jump to the next (+1) or previous (−1) search match.
    SearchStep(i32),
    /// Write the current view to a file (asks for the path when `None`).
    Export(ExportFormat, Option<PathBuf>),
    SetDarkTheme(bool),
    ToggleHelp,
    /// Show or hide the graph optimizer panel.
    ToggleOptimizer,
    /// Run the enabled optimizer passes on the open model.
    RunOptimizer,
    /// Show or hide the quantization panel.
    ToggleQuantize,
    /// Replace the multi-selection (Shift+click, Shift+drag, "select all of op type").
    SetMulti(Vec<NodeId>),
    /// Set the precision of nodes of the open model (an undoable edit).
    SetPrecision(Vec<NodeId>, npu_core::quant::LayerPrecision),
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
    CancelJobs,
    DismissError,
}
