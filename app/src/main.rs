//! `npu-studio`: the studio window and the command line over `npu-core`.

use npu_studio::cli;

use std::process::ExitCode;

/// Counts heap bytes so `compile --json` can report the compiler's peak memory.
#[global_allocator]
static ALLOC: npu_studio::heap::Counting = npu_studio::heap::Counting;

/// Keeps freed tensor buffers in the process instead of returning them to the OS after
/// every op: glibc's defaults (`mmap` for blocks over 128 KiB, trimmed on free) make each
/// large activation page-fault afresh, which cost a third of the FP32 run time.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator thresholds; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// A command whose output is piped into `head` ends quietly when the pipe closes, as
/// command-line tools do (the window keeps Rust's default: a write error, not a signal).
fn quiet_broken_pipe() {
    let first = std::env::args_os().nth(1);
    let command = first.is_some_and(|a| !std::path::Path::new(&a).exists() && !a.to_string_lossy().starts_with('-'));
    #[cfg(unix)]
    if command {
        // SAFETY: restores the default disposition of one signal before other threads exist.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}

fn main() -> ExitCode {
    quiet_broken_pipe();
    tune_allocator();
    npu_studio::heap::Heap::activate();
    match cli::main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
