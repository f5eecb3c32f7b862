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
