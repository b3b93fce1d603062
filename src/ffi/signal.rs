//! F27: the exports a signal handler may call (`xcecli_try_wakeup`, `xcecli_request_stop`)
//! find the context behind a handle without a lock, an allocation or a log line.
//!
//! The handle table (`cast.rs`) is guarded by a mutex, which a signal handler must never take
//! (the thread it interrupted may hold it). So each slot of the table also has a *cell* here,
//! at a fixed address for the life of the process: the handle value it currently serves and
//! a pointer to the context's wake state, published when the handle is made and withdrawn when
//! it is released. A reader (the handler) announces itself in the cell's `readers`, checks the
//! handle value, uses the wake state (atomics and one write(2)), and leaves; a release first
//! withdraws the handle value and then waits for the cell's readers to leave before the context
//! may be dropped. The wait is bounded by one write(2) of a reader on another thread; a reader
//! interrupting the releasing thread itself has finished before that thread resumes.
//!
//! Cells live in chunks of [`CHUNK`] allocated on first use (outside any signal handler: when a
//! handle is made) and never freed; the directory of chunks is a static array of atomic
//! pointers, so a reader only loads atomics.

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering::SeqCst};

use crate::process::handles::MAX_HANDLES;
use crate::transport::WakeState;

/// Cells per chunk.
const CHUNK: usize = 1024;
/// Chunks at most (every slot of the handle table has a cell).
const CHUNKS: usize = MAX_HANDLES / CHUNK;

struct Cell {
    /// The handle this cell serves now; 0 when none.
    handle: AtomicU64,
    /// The wake state of that handle's context (valid while `handle` is set, and while any
    /// reader that saw it set is inside).
    wake: AtomicPtr<WakeState>,
    readers: AtomicU32,
}

type Chunk = [Cell; CHUNK];

static DIRECTORY: [AtomicPtr<Chunk>; CHUNKS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];

fn index_of(h: u64) -> Option<(usize, usize)> {
    let index = (h & 0xFFFF_FFFF) as usize;
    let i = index.checked_sub(1)?;
    (i < MAX_HANDLES).then_some((i / CHUNK, i % CHUNK))
}

/// The cell of handle `h`, allocating its chunk if `create` (never in a signal handler).
fn cell(h: u64, create: bool) -> Option<&'static Cell> {
    let (c, i) = index_of(h)?;
    let mut chunk = DIRECTORY[c].load(SeqCst);
    if chunk.is_null() {
        if !create {
            return None;
        }
        let fresh: Box<Chunk> = Box::new(std::array::from_fn(|_| Cell {
            handle: AtomicU64::new(0),
            wake: AtomicPtr::new(std::ptr::null_mut()),
            readers: AtomicU32::new(0),
        }));
        let fresh = Box::into_raw(fresh);
        chunk = match DIRECTORY[c].compare_exchange(std::ptr::null_mut(), fresh, SeqCst, SeqCst) {
            Ok(_) => fresh,
            Err(existing) => {
                // SAFETY: `fresh` came from Box::into_raw above and was never published.
                drop(unsafe { Box::from_raw(fresh) });
                existing
            }
        };
    }
    // SAFETY: a published chunk is never freed or moved (leaked for the life of the process).
    Some(unsafe { &(*chunk)[i] })
}

/// Publishes `wake` for handle `h` (just made). The wake state must stay alive until
/// [`withdraw`] for `h` has returned.
pub(crate) fn publish(h: u64, wake: &WakeState) {
    if let Some(cell) = cell(h, true) {
        cell.wake
            .store(wake as *const WakeState as *mut WakeState, SeqCst);
        cell.handle.store(h, SeqCst);
    }
}

/// In a child of `fork` (single-threaded, from the handle table's fork hook): readers that
/// were inside [`with_wake`] on other threads at the fork are gone with them, so a later
/// [`withdraw`] must not wait for them (it would spin forever with the table locked).
pub(crate) fn readers_gone_after_fork() {
    for chunk in &DIRECTORY {
        let p = chunk.load(SeqCst);
        if p.is_null() {
            continue;
        }
        // SAFETY: a published chunk is never freed (the directory only grows).
        for cell in unsafe { &*p }.iter() {
            cell.readers.store(0, SeqCst);
        }
    }
}

/// Withdraws handle `h` (being released): once this returns, no reader uses its wake state.
pub(crate) fn withdraw(h: u64) {
    if let Some(cell) = cell(h, false) {
        let _ = cell.handle.compare_exchange(h, 0, SeqCst, SeqCst);
        while cell.readers.load(SeqCst) != 0 {
            std::thread::yield_now();
        }
    }
}

/// Runs `f` on the wake state of live handle `h`; `None` when `h` is not a live handle (NULL,
/// released, foreign). Async-signal-safe: atomics only, plus what `f` does.
pub(crate) fn with_wake<R>(h: u64, f: impl FnOnce(&WakeState) -> R) -> Option<R> {
    let cell = cell(h, false)?;
    cell.readers.fetch_add(1, SeqCst);
    let r = if h != 0 && cell.handle.load(SeqCst) == h {
        let wake = cell.wake.load(SeqCst);
        // Still `h` after reading the pointer: the pointer is `h`'s (a later handle of this
        // slot stores its pointer before its value).
        if cell.handle.load(SeqCst) == h {
            // SAFETY: the handle is published, so its wake state is alive, and `withdraw`
            // waits for this reader (counted above, before the check) before it can be dropped.
            unsafe { wake.as_ref() }.map(f)
        } else {
            None
        }
    } else {
        None
    };
    cell.readers.fetch_sub(1, SeqCst);
    r
}
