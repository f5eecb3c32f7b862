//! Background jobs: named threads with progress and cancel; the UI polls them each frame.
//! A job ends with its value, [`JobError::Cancelled`], or [`JobError::Failed`] with the
//! message to show.

use npu_core::progress::{CancelFlag, Progress};
use std::fmt;
use std::sync::mpsc::{Receiver, TryRecvError, channel};
use std::sync::{Arc, Mutex};

/// Why a job ended without a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobError {
    /// The user cancelled it.
    Cancelled,
    /// It failed: what to tell the user.
    Failed(String),
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cancelled => f.write_str("cancelled"),
            Self::Failed(m) => f.write_str(m),
        }
    }
}

impl From<String> for JobError {
    fn from(m: String) -> Self {
        Self::Failed(m)
    }
}

impl From<&str> for JobError {
    fn from(m: &str) -> Self {
        Self::Failed(m.to_owned())
    }
}

/// Maps a stage error whose `Cancelled` variant `is_cancelled` recognises.
macro_rules! from_stage_error {
    ($($t:ty => $cancelled:pat),* $(,)?) => {
        $(impl From<$t> for JobError {
            fn from(e: $t) -> Self {
                match e {
                    $cancelled => Self::Cancelled,
                    e => Self::Failed(e.to_string()),
                }
            }
        })*
    };
}

from_stage_error!(
    npu_core::import::ImportError => npu_core::import::ImportError::Cancelled,
    npu_core::passes::OptimizeError => npu_core::passes::OptimizeError::Cancelled,
    npu_core::pipeline::CalibrateError => npu_core::pipeline::CalibrateError::Cancelled,
    npu_core::pipeline::PlanError => npu_core::pipeline::PlanError::Cancelled,
    npu_core::pipeline::SimulateError => npu_core::pipeline::SimulateError::Cancelled,
    npu_core::quant::QuantError => npu_core::quant::QuantError::Cancelled,
    npu_core::export::ExportError => npu_core::export::ExportError::Cancelled,
);

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
        self.repaint();
    }

    /// The context to wake when progress changes.
    pub fn set_ctx(&self, ctx: Option<egui::Context>) {
        if let Ok(mut c) = self.ctx.lock() {
            *c = ctx;
        }
    }

    /// Wakes the UI (a result or new progress is there).
    pub fn repaint(&self) {
        if let Ok(ctx) = self.ctx.lock()
            && let Some(ctx) = ctx.as_ref()
        {
            ctx.request_repaint();
        }
    }

    /// `Err(Cancelled)` once the user cancelled.
    pub fn check(&self) -> Result<(), JobError> {
        if self.cancel.is_cancelled() {
            Err(JobError::Cancelled)
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
    rx: Receiver<Result<T, JobError>>,
}

impl<T: Send + 'static> Job<T> {
    /// Starts `work` on a thread named after the job.
    pub fn spawn(
        name: &'static str,
        ctx: Option<&egui::Context>,
        work: impl FnOnce(&JobProgress) -> Result<T, JobError> + Send + 'static,
    ) -> Self {
        let progress = Arc::new(JobProgress::default());
        progress.set_ctx(ctx.cloned());
        let (tx, rx) = channel();
        let p = progress.clone();
        let spawned = std::thread::Builder::new().name(name.to_owned()).spawn(move || {
            let r = work(&p);
            // The receiver is gone when the job was replaced; nothing to do then.
            let _ = tx.send(r);
            p.repaint();
        });
        if let Err(e) = spawned {
            let (tx, rx2) = channel();
            let _ = tx.send(Err(JobError::Failed(format!("could not start the {name} job: {e}"))));
            return Self {
                name,
                progress,
                rx: rx2,
            };
        }
        Self { name, progress, rx }
    }

    /// The result, once the job has finished.
    pub fn poll(&self) -> Option<Result<T, JobError>> {
        match self.rx.try_recv() {
            Ok(r) => Some(r),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(JobError::Failed(format!(
                "the {} job stopped unexpectedly",
                self.name
            )))),
        }
    }

    pub fn cancel(&self) {
        self.progress.cancel.cancel();
    }
}

/// Several named jobs of one kind at once (the studio's file writes): each is polled, and
/// one can ask whether a job of some name is still running.
pub struct Jobs<T> {
    running: Vec<Job<T>>,
}

impl<T> Default for Jobs<T> {
    fn default() -> Self {
        Self { running: Vec::new() }
    }
}

impl<T: Send + 'static> Jobs<T> {
    pub fn spawn(
        &mut self,
        name: &'static str,
        ctx: Option<&egui::Context>,
        work: impl FnOnce(&JobProgress) -> Result<T, JobError> + Send + 'static,
    ) {
        self.running.push(Job::spawn(name, ctx, work));
    }

    pub fn busy(&self) -> bool {
        !self.running.is_empty()
    }

    /// The progress of the running job of this name, if one runs.
    pub fn running(&self, name: &str) -> Option<&JobProgress> {
        self.running.iter().find(|j| j.name == name).map(|j| &*j.progress)
    }

    /// The results of the jobs that finished since the last call, in start order.
    pub fn finished(&mut self) -> Vec<Result<T, JobError>> {
        let mut done = Vec::new();
        self.running.retain(|j| match j.poll() {
            Some(r) => {
                done.push(r);
                false
            }
            None => true,
        });
        done
    }
}

/// Takes a job's result out of its slot once it has finished.
pub fn take_finished<T: Send + 'static>(slot: &mut Option<Job<T>>) -> Option<Result<T, JobError>> {
    let r = slot.as_ref()?.poll()?;
    *slot = None;
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait<T: Send + 'static>(mut j: Option<Job<T>>) -> Result<T, JobError> {
        loop {
            if let Some(r) = take_finished(&mut j) {
                return r;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn a_job_ends_with_its_value_or_a_typed_error() {
        assert_eq!(wait(Some(Job::spawn("ok", None, |_| Ok(7)))), Ok(7));
        let failed: Result<(), _> = wait(Some(Job::spawn("fails", None, |_| Err("no".into()))));
        assert_eq!(failed, Err(JobError::Failed("no".into())));
        // Cancelled before it looks: the job sees it and says so.
        let (go, wait_go) = std::sync::mpsc::channel::<()>();
        let j = Job::spawn("cancelled", None, move |p| {
            let _ = wait_go.recv();
            p.check()?;
            Ok(1)
        });
        j.cancel();
        let _ = go.send(());
        assert_eq!(wait(Some(j)), Err(JobError::Cancelled));
        // A stage's own Cancelled variant maps onto the typed one.
        assert_eq!(
            JobError::from(npu_core::pipeline::CalibrateError::Cancelled),
            JobError::Cancelled
        );
    }
}
