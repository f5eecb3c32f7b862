//! Background jobs: named threads with progress and cancel; the UI polls them each frame.

use npu_core::progress::{CancelFlag, Progress};
use std::sync::mpsc::{Receiver, TryRecvError, channel};
use std::sync::{Arc, Mutex};

/// Progress of a running job, shared with its thread.
#[derive(Default)]
pub struct JobProgress {
    state: Mutex<(f32, String)>,
    pub cancel: CancelFlag,
    ctx: Mutex<Option<egui::Context>>,
}

impl JobProgress {
    pub fn fraction(&self) -> (f32, String) {
        self.state.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn set(&self, fraction: f32, what: &str) {
        if let Ok(mut s) = self.state.lock() {
            *s = (fraction, what.to_owned());
        }
        if let Ok(ctx) = self.ctx.lock()
            && let Some(ctx) = ctx.as_ref()
        {
            ctx.request_repaint();
        }
    }

    /// The context to wake when progress changes.
    pub fn set_ctx(&self, ctx: Option<egui::Context>) {
        if let Ok(mut c) = self.ctx.lock() {
            *c = ctx;
        }
    }

    /// Returns an error when the user cancelled.
    pub fn check(&self) -> Result<(), String> {
        if self.cancel.is_cancelled() {
            Err("cancelled".into())
        } else {
            Ok(())
        }
    }
}

impl Progress for JobProgress {
    fn update(&self, done: usize, total: usize, what: &str) {
        self.set(if total == 0 { 0.0 } else { done as f32 / total as f32 }, what);
    }
    fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

/// A running job producing a `T`.
pub struct Job<T> {
    pub name: &'static str,
    pub progress: Arc<JobProgress>,
    rx: Receiver<Result<T, String>>,
}

impl<T: Send + 'static> Job<T> {
    /// Starts `work` on a thread named after the job.
    pub fn spawn(
        name: &'static str,
        ctx: Option<&egui::Context>,
        work: impl FnOnce(&JobProgress) -> Result<T, String> + Send + 'static,
    ) -> Self {
        let progress = Arc::new(JobProgress::default());
        if let Ok(mut c) = progress.ctx.lock() {
            *c = ctx.cloned();
        }
        let (tx, rx) = channel();
        let p = progress.clone();
        let spawned = std::thread::Builder::new().name(name.to_owned()).spawn(move || {
            let r = work(&p);
            // The receiver is gone when the job was replaced; nothing to do then.
            let _ = tx.send(r);
            if let Ok(ctx) = p.ctx.lock()
                && let Some(ctx) = ctx.as_ref()
            {
                ctx.request_repaint();
            }
        });
        if let Err(e) = spawned {
            let (tx, rx2) = channel();
            let _ = tx.send(Err(format!("could not start the {name} job: {e}")));
            return Self {
                name,
                progress,
                rx: rx2,
            };
        }
        Self { name, progress, rx }
    }

    /// The result, once the job has finished.
    pub fn poll(&self) -> Option<Result<T, String>> {
        match self.rx.try_recv() {
            Ok(r) => Some(r),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(format!("the {} job stopped unexpectedly", self.name))),
        }
    }
}
