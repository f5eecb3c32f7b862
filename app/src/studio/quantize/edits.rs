//! The project's precision state and its undo/redo history: per-layer edits on top of the
//! calibrated plan (or on top of an applied mixed-precision point's plan). Pure data, no UI.

use npu_core::quant::{LayerPrecision, QuantPlan};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The project's precision state: per-layer edits on top of the calibrated plan, or on top
/// of the plan of an applied mixed-precision point.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Edits {
    /// Optimized node name → precision, where it differs from the plan's default.
    pub layers: BTreeMap<String, LayerPrecision>,
    /// An applied mixed-precision point's plan (its input format and re-measured bias
    /// corrections); `None`: the calibrated plan.
    pub base: Option<Arc<QuantPlan>>,
}

/// The current edits, what undo and redo step through, and a generation that counts every
/// change (the worker's replies say which generation they simulate).
#[derive(Debug, Default)]
pub struct History {
    current: Edits,
    undo: Vec<Edits>,
    redo: Vec<Edits>,
    generation: u64,
}

impl History {
    pub fn current(&self) -> &Edits {
        &self.current
    }

    /// The generation of the current state (0 right after a calibration).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Makes `next` the state as one undoable edit; false (and nothing recorded) when it
    /// equals the current state.
    pub fn edit(&mut self, next: Edits) -> bool {
        if next == self.current {
            return false;
        }
        self.undo.push(std::mem::replace(&mut self.current, next));
        self.redo.clear();
        self.generation += 1;
        true
    }

    /// Makes `next` the state without an undo step (edits restored from a project).
    pub fn restore(&mut self, next: Edits) {
        self.current = next;
        self.generation += 1;
    }

    /// A new generation of the same state (a full re-simulation was asked for).
    pub fn bump(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }

    pub fn can_undo(&self) -> bool {
        !self.undo.is_empty()
    }

    pub fn can_redo(&self) -> bool {
        !self.redo.is_empty()
    }

    /// Steps back; false when there is nothing to undo.
    pub fn undo(&mut self) -> bool {
        let Some(prev) = self.undo.pop() else { return false };
        self.redo.push(std::mem::replace(&mut self.current, prev));
        self.generation += 1;
        true
    }

    /// Steps forward again; false when there is nothing to redo.
    pub fn redo(&mut self) -> bool {
        let Some(next) = self.redo.pop() else { return false };
        self.undo.push(std::mem::replace(&mut self.current, next));
        self.generation += 1;
        true
    }

    /// Forgets the state and the history (a new calibration, another model).
    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &str, p: LayerPrecision) -> Edits {
        let mut e = Edits::default();
        e.layers.insert(name.into(), p);
        e
    }

    #[test]
    fn edits_undo_and_redo_in_order() {
        let mut h = History::default();
        assert!(!h.can_undo() && !h.can_redo());
        assert!(h.edit(with("a", LayerPrecision::INT16)));
        assert!(!h.edit(with("a", LayerPrecision::INT16)), "the same state is no edit");
        assert!(h.edit(with("b", LayerPrecision::FP16)));
        assert_eq!(h.generation(), 2);
        assert!(h.undo());
        assert_eq!(h.current(), &with("a", LayerPrecision::INT16));
        assert!(h.undo());
        assert_eq!(h.current(), &Edits::default());
        assert!(!h.undo(), "nothing left to undo");
        assert!(h.redo());
        assert_eq!(h.current(), &with("a", LayerPrecision::INT16));
        // A new edit drops what could be redone.
        assert!(h.edit(with("c", LayerPrecision::FLOAT)));
        assert!(!h.can_redo());
        assert!(!h.redo());
        assert_eq!(h.generation(), 6, "every change is a generation");
    }

    #[test]
    fn restore_and_bump_leave_the_history_alone() {
        let mut h = History::default();
        h.restore(with("a", LayerPrecision::INT4));
        assert!(!h.can_undo(), "a restored project is not an edit to undo");
        assert_eq!(h.generation(), 1);
        assert_eq!(h.bump(), 2);
        assert_eq!(h.current(), &with("a", LayerPrecision::INT4));
        h.clear();
        assert_eq!((h.generation(), h.current()), (0, &Edits::default()));
    }
}
