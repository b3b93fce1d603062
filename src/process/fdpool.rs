//! F13, F21: the process's pool of wake pipes that waits borrow (P8: an idle context holds no
//! descriptor for its waits).
//!
//! Every pooled pipe is verified before it is lent ([`WakePipe::still_ours`], by inode): a
//! caller that closed it (`closefrom`) and reused the numbers, even for eventfds of its own,
//! gets it forgotten, never read, written or closed. The pool is emptied and its pipes closed
//! when the last context goes away, so the library holds no fd once no context exists. In a
//! child of `fork` the inherited copies are closed before the child runs (F26).

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use super::fork::ForkLock;
use super::wakepipe::WakePipe;
use crate::error::Error;

/// Pipes not lent to any wait right now. Grows to the most waits ever in progress at once
/// (about the number of threads calling into the library).
static POOL: ForkLock<Vec<WakePipe>> = ForkLock::new(Vec::new(), close_inherited);

/// Live contexts: the pool is kept only while this is not zero.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// In a forked child, with the pool locked: the child's copies of the parent's pipes are the
/// child's to close (nothing in the child has touched a descriptor yet).
fn close_inherited(pool: &mut Vec<WakePipe>) {
    for p in pool.drain(..) {
        p.close();
    }
}

/// A context starts: the pool is kept from now on.
pub fn context_started() {
    LIVE.fetch_add(1, SeqCst);
}

/// A context finished (stopped or dropped): once no context is left, the pool is emptied.
pub fn context_retired() {
    if LIVE.fetch_sub(1, SeqCst) == 1 {
        let pipes = std::mem::take(&mut *POOL.lock());
        for p in pipes {
            p.close();
        }
    }
}

/// A verified wake pipe of this process: from the pool, or new.
pub fn lend() -> Result<WakePipe, Error> {
    {
        let mut pool = POOL.lock();
        while let Some(p) = pool.pop() {
            if p.still_ours() {
                // A byte a nudge left in it (the wait had ended otherwise) is a spurious
                // readiness for the next wait, which drains it and checks its flags.
                return Ok(p);
            }
            if p.inherited() {
                // A forked child's copy of its parent's pipe: ours to close, not to use.
                p.close();
            }
            // Otherwise the caller closed it and maybe reused the numbers: forget it.
        }
    }
    WakePipe::new()
}

/// Gives a pipe back once no one can write to it any more; closes it instead when no context
/// is left to use it.
pub fn give_back(p: WakePipe) {
    let mut pool = POOL.lock();
    if LIVE.load(SeqCst) == 0 {
        drop(pool);
        p.close();
    } else {
        pool.push(p);
    }
}

/// Runs `f` on the calling thread while it holds the pool's lock (tests: a fork while another
/// thread holds it, F26; `f` says when it has it and decides when to let go).
#[doc(hidden)]
pub fn hold_lock_while<F: FnOnce()>(f: F) {
    let _pool = POOL.lock();
    f();
}
