//! Progress on a terminal: one line on stderr, rewritten in place (nothing when stderr is
//! not a terminal, so logs stay clean).

use npu_core::progress::Progress;
use std::io::{IsTerminal, Write};

/// Progress on stderr, one line rewritten in place.
pub struct Stderr;

impl Progress for Stderr {
    fn update(&self, done: usize, total: usize, what: &str) {
        if !std::io::stderr().is_terminal() {
            return;
        }
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[2K[{done}/{total}] {what}");
        let _ = e.flush();
    }
    fn cancelled(&self) -> bool {
        false
    }
}

/// Clears the progress line.
pub fn end_progress() {
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
}
