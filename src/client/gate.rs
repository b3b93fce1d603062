//! F11, F13, F20: who may run a call on a context, and when calls must stop.
//!
//! Calls on one context run one at a time for their whole loop (F11), in arrival order. The
//! owner's thread may enter again (the reconnect hook's nested calls, F10). A queued call waits
//! parked, and leaves the queue at once when it is woken (`xcecli_wakeup`: every call in
//! progress or queued, F13), cancelled (its call handle), or the context is closing
//! (`xcecli_stop`, F20). Closing also waits for every call to leave, unless the closing thread
//! is itself inside a call: then the last call to leave finishes the stop.
//!
//! The gate's mutex guards only this bookkeeping and is never held across I/O or callbacks.

use std::collections::VecDeque;
use std::thread::{self, Thread, ThreadId};

use parking_lot::Mutex;

use crate::error::Error;
use crate::transport::{CancelToken, WakeState};

struct Queued {
    ticket: u64,
    thread: Thread,
}

#[derive(Default)]
struct State {
    owner: Option<ThreadId>,
    /// Nesting of the owner's calls (the hook's calls run inside the outer one).
    depth: u32,
    queue: VecDeque<Queued>,
    next_ticket: u64,
    /// Calls between `enter` and `leave`: queued, running, nested.
    entered: u32,
    closing: bool,
    /// The thread waiting in `close` for the calls to leave.
    closer: Option<Thread>,
    /// `close` was called from inside a call: the last call to leave finishes the stop.
    finish_on_leave: bool,
}

/// The admission of calls to one context (see the module doc).
pub(crate) struct Gate {
    state: Mutex<State>,
}

/// A call that entered the gate. It must be given back with [`Gate::leave`].
pub(crate) struct Entry {
    /// The wake generation when the call entered: a later wake ends it.
    pub since: u64,
}

/// What the last call to leave must do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Leave {
    Done,
    /// The context was closed from inside a call and this was the last one: release the
    /// context's resources now (F20).
    FinishClose,
}

/// How `close` went.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Close {
    /// Every call has left: the caller releases the context's resources.
    Drained,
    /// Called from inside a call of this context, or waiting would close a cycle of waits
    /// between threads: the last call to leave will finish.
    Deferred,
    /// Already closing.
    AlreadyClosing,
}

impl Gate {
    pub fn new() -> Gate {
        Gate {
            state: Mutex::new(State::default()),
        }
    }

    /// F26, in a child of `fork` (single-threaded, never blocks): whether a call of a thread the
    /// child does not have was inside the gate at the fork. The forking thread's own call (a
    /// callback that forked) goes on in the child; calls of other threads are forgotten.
    pub fn busy_at_fork(&self, wake: &WakeState) -> bool {
        let me = thread::current().id();
        let Some(mut st) = self.state.try_lock() else {
            return true; // held by a thread that is gone: nothing can fix it
        };
        if st.owner.is_some() && st.owner != Some(me) {
            return true;
        }
        // Only this thread's own nesting remains.
        st.queue.clear();
        st.entered = if st.owner == Some(me) { st.depth } else { 0 };
        wake.forget_calls_after_fork(st.entered);
        false
    }

    /// Registers a call. `Err(Closed)` when the context is closing, `Err(StopRequested)` while
    /// a stop is requested (F27). A wake is never kept for a later call (F27): only a call in
    /// progress can be woken. When this thread may run the call at once (the context is its
    /// own or nobody's, no call queued, the call not stopped), it also takes the context, under
    /// the same lock (P2): `(entry, true)`. `(entry, false)`: the call is registered and
    /// [`Gate::acquire`] waits for its turn (or returns why it must not run).
    pub fn enter_and_try_acquire(
        &self,
        wake: &WakeState,
        token: Option<&CancelToken>,
    ) -> Result<(Entry, bool), Error> {
        let me = thread::current().id();
        let mut st = self.state.lock();
        if st.closing {
            return Err(Error::Closed);
        }
        if wake.stop_requested() {
            return Err(Error::StopRequested);
        }
        st.entered += 1;
        let entry = Entry {
            since: wake.enter_call(),
        };
        let free = st.owner == Some(me) || (st.owner.is_none() && st.queue.is_empty());
        if free && wake.waker(entry.since, token).check().is_ok() {
            st.owner = Some(me);
            st.depth += 1;
            return Ok((entry, true));
        }
        Ok((entry, false))
    }

    /// Gives back what `enter_and_try_acquire` or `acquire` took (handing the context to the
    /// next queued call) and unregisters the call, under one lock (P2).
    pub fn release_and_leave(&self) -> Leave {
        let mut st = self.state.lock();
        st.depth -= 1;
        if st.depth == 0 {
            st.owner = None;
            if let Some(front) = st.queue.front() {
                front.thread.unpark();
            }
        }
        Self::left(&mut st)
    }

    /// Unregisters a call that did not acquire the context.
    pub fn leave(&self) -> Leave {
        let mut st = self.state.lock();
        Self::left(&mut st)
    }

    fn left(st: &mut State) -> Leave {
        st.entered -= 1;
        if st.entered > 0 {
            return Leave::Done;
        }
        if let Some(t) = st.closer.take() {
            t.unpark();
        }
        if std::mem::take(&mut st.finish_on_leave) {
            Leave::FinishClose
        } else {
            Leave::Done
        }
    }

    /// Waits for the turn of the call `entry`: returns when this thread owns the context, or
    /// with the error that stopped the call (closing, its token cancelled, a wake).
    pub fn acquire(
        &self,
        entry: &Entry,
        wake: &WakeState,
        token: Option<&CancelToken>,
    ) -> Result<(), Error> {
        let me = thread::current().id();
        let check = || wake.waker(entry.since, token).check();
        let mut st = self.state.lock();
        check()?;
        if st.owner == Some(me) || (st.owner.is_none() && st.queue.is_empty()) {
            st.owner = Some(me);
            st.depth += 1;
            return Ok(());
        }
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.queue.push_back(Queued {
            ticket,
            thread: thread::current(),
        });
        loop {
            drop(st);
            thread::park();
            st = self.state.lock();
            if let Err(e) = check() {
                st.queue.retain(|q| q.ticket != ticket);
                // The call behind may be next now.
                if st.owner.is_none() {
                    if let Some(front) = st.queue.front() {
                        front.thread.unpark();
                    }
                }
                return Err(e);
            }
            if st.owner.is_none() && st.queue.front().is_some_and(|q| q.ticket == ticket) {
                st.queue.pop_front();
                st.owner = Some(me);
                st.depth = 1;
                return Ok(());
            }
        }
    }

    /// F13: wakes every call in progress or queued (queued ones leave the queue at once).
    /// Returns whether any call was in progress. Nothing is kept for a later call (F27). Takes
    /// the gate's lock: not for signal handlers (they use `WakeState::try_wake`, lock-free).
    pub fn wake_all(&self, wake: &WakeState) -> bool {
        let st = self.state.lock();
        // Counts and ends, in one step, exactly the calls whose outcome is not settled (F27).
        let busy = wake.try_wake();
        if busy {
            unpark_all(&st);
        }
        busy
    }

    /// Makes a queued call re-check its cancel token (the token is already set).
    pub fn cancelled(&self, wake: &WakeState) {
        let st = self.state.lock();
        wake.nudge();
        unpark_all(&st);
    }

    /// F20: marks the context closing (later calls fail with `E_XCE_CLOSED`), wakes every call,
    /// and waits until all have left — unless this thread is inside one of them.
    pub fn close(&self, wake: &WakeState) -> Close {
        let me = thread::current().id();
        let mut st = self.state.lock();
        if st.closing {
            return Close::AlreadyClosing;
        }
        st.closing = true;
        wake.close();
        unpark_all(&st);
        if st.owner == Some(me) {
            st.finish_on_leave = true;
            return Close::Deferred;
        }
        let mut waiting = None;
        while st.entered > 0 {
            // The threads of the calls in flight; a wait for them that would close a cycle
            // (one of them waits for this thread, e.g. in a callback setter) is not made: the
            // last call to leave finishes the stop instead (process::waits).
            let mut on: Vec<ThreadId> = st.queue.iter().map(|q| q.thread.id()).collect();
            on.extend(st.owner);
            drop(st);
            match crate::process::waits::wait_for(&on, waiting.take()) {
                Ok(w) => waiting = Some(w),
                Err(_) => {
                    st = self.state.lock();
                    if st.entered > 0 {
                        st.finish_on_leave = true;
                        return Close::Deferred;
                    }
                    break;
                }
            }
            st = self.state.lock();
            if st.entered == 0 {
                break;
            }
            st.closer = Some(thread::current());
            drop(st);
            thread::park();
            st = self.state.lock();
        }
        Close::Drained
    }
}

fn unpark_all(st: &State) {
    for q in &st.queue {
        q.thread.unpark();
    }
}
