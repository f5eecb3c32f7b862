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

fn main() -> ExitCode {
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
