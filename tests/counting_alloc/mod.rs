//! The global allocator of a test binary that measures the heap: per thread (tests run on
//! several threads at once; a fake controller's threads count separately), the allocations
//! made and the live bytes with their peak. Only the files that measure say
//! `mod counting_alloc;`.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// Records a change of `n` live bytes, made by a new allocation if `counted`.
fn grow(n: isize, counted: bool) {
    if counted {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
    }
    let _ = LIVE.try_with(|l| {
        let v = l.get() + n;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            grow(l.size() as isize, true);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        grow(-(l.size() as isize), false);
        // SAFETY: forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        // SAFETY: forwarded.
        let q = unsafe { System.realloc(p, l, n) };
        if !q.is_null() {
            grow(n as isize - l.size() as isize, true);
        }
        q
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Allocations (and reallocations) made by this thread so far.
pub fn allocations() -> u64 {
    ALLOCS.with(Cell::get)
}

/// What `f` did to this thread's heap: (its result, peak live bytes above the start, live
/// bytes left behind).
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize, isize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let r = f();
    let peak = PEAK.with(Cell::get) - start;
    (r, peak.max(0) as usize, LIVE.with(Cell::get) - start)
}
