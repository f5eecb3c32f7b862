//! Heap bytes in use and their peak, counted by the `npu-studio` binary's global allocator
//! (the library's tests run without it, and then [`Heap::active`] is false).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting.
pub struct Counting;

// SAFETY: every call goes to `System` unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            grow(l.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(p, l) };
        IN_USE.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            grow(l.size());
        }
        p
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's pointer, layout and size.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            IN_USE.fetch_sub(l.size(), Ordering::Relaxed);
            grow(new);
        }
        q
    }
}

fn grow(n: usize) {
    let now = IN_USE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

/// A measurement window over the heap.
pub struct Heap {
    base: usize,
}

impl Heap {
    /// Marks the binary's allocator as counting (called once from `main`).
    pub fn activate() {
        ACTIVE.store(true, Ordering::Relaxed);
    }

    pub fn active() -> bool {
        ACTIVE.load(Ordering::Relaxed)
    }

    /// Starts a window: the peak restarts from what is in use now.
    pub fn start() -> Self {
        let base = IN_USE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        Self { base }
    }

    /// The most bytes allocated at once since [`Heap::start`], above what was in use then
    /// (`None` without the counting allocator).
    pub fn peak(&self) -> Option<usize> {
        Self::active().then(|| PEAK.load(Ordering::Relaxed).saturating_sub(self.base))
    }
}
