//! F20: a replaceable callback whose replacement is final.
//!
//! The reconnect hook, the event handler and the log sink each live in a [`CallbackSlot`].
//! An invocation takes a reference to the callback installed at that moment and registers the
//! calling thread as running it; [`CallbackSlot::set`] swaps in the new callback and then waits
//! until no *other* thread is still running the old one. So once a setter returns, the old
//! callback is not running on another thread and is never called again — the caller may free
//! whatever its `arg` points to. A callback that replaces or removes itself (on its own thread)
//! does not wait for itself, and stays replaced: nothing is put back after it returns.

use std::sync::{Arc, Condvar, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};

use crate::process::{fdident, waits, ForkLock};

struct SlotState<T: ?Sized> {
    callback: Option<Arc<T>>,
    /// Threads running a callback taken from this slot, once per invocation in progress.
    running: Vec<ThreadId>,
}

/// One replaceable callback (see the module doc).
pub struct CallbackSlot<T: ?Sized + 'static> {
    state: ForkLock<SlotState<T>>,
    idle: Condvar,
}

impl<T: ?Sized + Send + Sync + 'static> Default for CallbackSlot<T> {
    fn default() -> Self {
        CallbackSlot::new()
    }
}

impl<T: ?Sized + Send + Sync + 'static> std::fmt::Debug for CallbackSlot<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackSlot")
            .field("set", &self.is_set())
            .finish()
    }
}

/// Unregisters one invocation, even if the callback unwinds.
struct Running<'a, T: ?Sized + Send + Sync + 'static> {
    slot: &'a CallbackSlot<T>,
    me: ThreadId,
}

impl<T: ?Sized + Send + Sync + 'static> Drop for Running<'_, T> {
    fn drop(&mut self) {
        let mut st = self.slot.lock();
        if let Some(i) = st.running.iter().position(|t| *t == self.me) {
            st.running.swap_remove(i);
        }
        drop(st);
        self.slot.idle.notify_all();
    }
}

/// In a child of `fork`: the threads that were running the callback are gone.
fn forget_runners<T: ?Sized>(st: &mut SlotState<T>) {
    st.running.clear();
}

impl<T: ?Sized + Send + Sync + 'static> CallbackSlot<T> {
    pub const fn new() -> CallbackSlot<T> {
        CallbackSlot {
            state: ForkLock::new(
                SlotState {
                    callback: None,
                    running: Vec::new(),
                },
                forget_runners::<T>,
            ),
            idle: Condvar::new(),
        }
    }

    /// Makes a process-wide slot (the log sink) safe across `fork` (F26): its lock is never
    /// found held in a child, and a child never waits for an invocation of a thread it does
    /// not have.
    pub fn register_for_fork(&'static self) {
        self.state.register();
    }

    /// In a child of `fork` (single-threaded, never blocks): forgets the invocations of threads
    /// the child does not have, so a setter in the child never waits for them. False when the
    /// slot's lock was held by such a thread (the slot is unusable; its context is too).
    pub fn forget_runners_after_fork(&self) -> bool {
        let me = thread::current().id();
        match self.state.try_lock_local() {
            Some(mut st) => {
                st.running.retain(|t| *t == me);
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> MutexGuard<'_, SlotState<T>> {
        self.state.lock_local()
    }

    /// Whether a callback is installed.
    pub fn is_set(&self) -> bool {
        self.lock().callback.is_some()
    }

    /// Installs `callback` (or, with `None`, removes the current one) and returns once no
    /// other thread is running the previous one; returns true then. The previous callback is
    /// dropped before this returns unless a thread is still running it (then when it returns).
    ///
    /// Returns false, at once, when waiting would never end: a thread running the previous
    /// callback waits itself, directly or through others, for this thread (e.g. the log sink
    /// on another thread stops the context whose callback called this; `process::waits`).
    /// The new callback is installed all the same; the old one may still be running there.
    pub fn set(&self, callback: Option<Arc<T>>) -> bool {
        let me = thread::current().id();
        let mut st = self.lock();
        let old = std::mem::replace(&mut st.callback, callback);
        let mut waiting = None;
        loop {
            let others: Vec<ThreadId> = st.running.iter().copied().filter(|t| *t != me).collect();
            if others.is_empty() {
                break;
            }
            // Registered outside the slot's lock (no lock is held while taking another).
            drop(st);
            match waits::wait_for(&others, waiting.take()) {
                Ok(w) => waiting = Some(w),
                Err(waits::Cycle) => return false,
            }
            st = self.lock();
            if st.running.iter().any(|t| *t != me) {
                st = self.idle.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
        }
        drop(st);
        drop(waiting);
        drop(old);
        true
    }

    /// Runs `f` with the installed callback, on this thread; `None` when there is none.
    pub fn call<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        let me = thread::current().id();
        let callback = {
            let mut st = self.lock();
            let cb = st.callback.clone()?;
            st.running.push(me);
            cb
        };
        let _running = Running { slot: self, me };
        // The caller's code: a fork in it is seen by the rest of the call (P2, F26).
        Some(fdident::outside_call(|| f(&callback)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use std::time::{Duration, Instant};

    type Cb = dyn Fn() -> usize + Send + Sync;

    #[test]
    fn set_waits_for_the_old_callback_on_other_threads() {
        let slot: Arc<CallbackSlot<Cb>> = Arc::new(CallbackSlot::new());
        let inside = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let (i2, d2) = (inside.clone(), done.clone());
        slot.set(Some(Arc::new(move || {
            i2.store(true, SeqCst);
            std::thread::sleep(Duration::from_millis(150));
            d2.store(true, SeqCst);
            1
        })));
        let s2 = slot.clone();
        let t = std::thread::spawn(move || s2.call(|cb| cb()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !inside.load(SeqCst) {
            assert!(Instant::now() < deadline);
            std::thread::yield_now();
        }
        slot.set(None);
        assert!(
            done.load(SeqCst),
            "the setter returned while the old callback ran"
        );
        assert_eq!(slot.call(|cb| cb()), None, "never called again");
        assert_eq!(t.join().unwrap(), Some(1));
    }

    #[test]
    fn a_callback_that_removes_itself_stays_removed() {
        let slot: Arc<CallbackSlot<Cb>> = Arc::new(CallbackSlot::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let (s2, c2) = (Arc::downgrade(&slot), calls.clone());
        slot.set(Some(Arc::new(move || {
            c2.fetch_add(1, SeqCst);
            if let Some(s) = s2.upgrade() {
                s.set(None); // on its own thread: does not wait for itself
            }
            7
        })));
        assert_eq!(slot.call(|cb| cb()), Some(7));
        assert_eq!(slot.call(|cb| cb()), None);
        assert_eq!(calls.load(SeqCst), 1);
        assert!(!slot.is_set());
    }

    #[test]
    fn an_unwinding_callback_is_unregistered() {
        let slot: CallbackSlot<Cb> = CallbackSlot::new();
        slot.set(Some(Arc::new(|| panic!("boom"))));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| slot.call(|cb| cb())));
        assert!(r.is_err());
        slot.set(None); // would wait forever if the panicking invocation were still counted
    }
}
