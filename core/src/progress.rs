//! Progress reporting and cancellation shared by every long stage, so the GUI and the CLI
//! show the same progress.

use std::sync::atomic::{AtomicBool, Ordering};

/// Receives progress from a long-running stage and says whether to stop.
pub trait Progress: Sync {
    /// Reports `done` of `total` units of work, with a short description.
    fn update(&self, done: usize, total: usize, what: &str);
    /// True when the user asked to cancel.
    fn cancelled(&self) -> bool;
}

/// Progress that goes nowhere and never cancels.
pub struct Silent;

impl Progress for Silent {
    fn update(&self, _done: usize, _total: usize, _what: &str) {}
    fn cancelled(&self) -> bool {
        false
    }
}

/// A cancellation flag that can be shared with a running job.
#[derive(Default)]
pub struct CancelFlag(AtomicBool);

impl CancelFlag {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Reports a stage's progress as the span `from..=to` (fractions) of a longer job's.
pub struct Part<'a> {
    pub inner: &'a dyn Progress,
    pub from: f64,
    pub to: f64,
}

impl Progress for Part<'_> {
    fn update(&self, done: usize, total: usize, what: &str) {
        let f = if total == 0 { 0.0 } else { done as f64 / total as f64 };
        let x = self.from + (self.to - self.from) * f.clamp(0.0, 1.0);
        self.inner.update((x * 1000.0).round() as usize, 1000, what);
    }
    fn cancelled(&self) -> bool {
        self.inner.cancelled()
    }
}
