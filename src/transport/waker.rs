//! F13, F20, F21: interruptible waits without a thread of our own.
//!
//! Every blocking point of the library (connect, write, reply wait, backoff sleep, name lookup)
//! is a `poll(2)` on the socket *and* a wake pipe, so another thread can end the wait by writing
//! to it. The wake pipe is not the context's own: a wait borrows one from a process-wide pool for
//! its duration (P8: an idle context holds its socket only).
//!
//! What ends a wait is decided by flags, never by the wake pipe alone:
//! - the context's **wake generation** ([`WakeState::interrupt`], `xcecli_wakeup`): every wait
//!   of a call that started before the bump ends with `EINTR` — all of them, not just one (F13);
//! - the context being **closed** ([`WakeState::close`], `xcecli_stop`): `E_XCE_CLOSED` (F20);
//! - the call's own **cancel token** ([`CancelToken`], per-call handles): `ECANCELED`.
//!
//! The waker publishes its wake pipe before it checks the flags (both sequentially consistent),
//! so a wake racing with the start of a wait is never lost. A write that reaches a wake pipe
//! after its wait ended (and another context's wait borrowed it) is a spurious readiness there:
//! that wait drains it, finds its flags clear and waits on.
//!
//! F21: a pooled wake pipe is verified before every use ([`FdIdent`]): a caller that closed it
//! (`closefrom`) or forked gets it rebuilt, never read or written. The pool is emptied and its
//! wake pipes closed when the last context goes away, so the library holds no fd once no context
//! exists.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use crate::error::Error;

use crate::process::fdpool::{self, give_back, lend};
use crate::process::wakepipe::{notify_unchecked, WakePipe};

/// Most descriptors one wait polls (besides the wake pipe and a watched one).
pub const MAX_WAIT_FDS: usize = 16;

/// Bits of [`WakeState`]'s word that count the calls in progress.
const ACTIVE_BITS: u32 = 24;
const ACTIVE_MASK: u64 = (1 << ACTIVE_BITS) - 1;

/// The settling of one call's outcome against wakes (F27): done once, by the call itself —
/// when it leaves, or earlier at the point after which its outcome stands whatever happens
/// (a notification accepted into the outbox).
#[derive(Debug)]
pub struct CallSettle<'a> {
    wake: &'a WakeState,
    since: u64,
    /// 0: not yet; 1: settled, not woken; 2: settled, woken.
    state: std::sync::atomic::AtomicU8,
}

impl<'a> CallSettle<'a> {
    pub fn new(wake: &'a WakeState, since: u64) -> CallSettle<'a> {
        CallSettle {
            wake,
            since,
            state: std::sync::atomic::AtomicU8::new(0),
        }
    }

    /// Settles the call (the first time) and returns whether it was woken before that.
    pub fn settle(&self) -> bool {
        match self.state.load(SeqCst) {
            0 => {
                let woken = self.wake.settle_call(self.since);
                self.state.store(if woken { 2 } else { 1 }, SeqCst);
                woken
            }
            st => st == 2,
        }
    }
}

/// The wake state of one context: its wake generation, whether it is closed, and the wake pipe
/// lent to the wait in progress (only the thread that owns the context waits on I/O).
#[derive(Debug)]
pub struct WakeState {
    /// The wake generation (high bits) and the calls in progress that a wake still ends (low
    /// [`ACTIVE_BITS`] bits), in one word so that a wake counts and ends them in one atomic
    /// step (F27: `try_wake`'s answer is exactly what happens).
    word: AtomicU64,
    closed: AtomicBool,
    /// The wake pipe lent to the wait in progress, -1 when none.
    lent: AtomicI32,
    /// Nudges between reading `lent` and their write: the wake pipe is not given back (and so
    /// never closed or lent to another context) while one is in progress.
    nudging: AtomicU32,
    /// F27: a stop was requested (`xcecli_request_stop`): calls in progress end and later ones
    /// fail at once with `E_XCE_STOP_REQUESTED`, until cleared.
    stop_requested: AtomicBool,
    /// No longer counted among the live contexts (retired when its context finished
    /// stopping: a stopped context that is still referenced keeps no pooled wake pipe alive).
    retired: AtomicBool,
}

impl Default for WakeState {
    fn default() -> Self {
        WakeState::new()
    }
}

impl WakeState {
    /// A wake state holding no file descriptor.
    pub fn new() -> WakeState {
        fdpool::context_started();
        WakeState {
            word: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            lent: AtomicI32::new(-1),
            nudging: AtomicU32::new(0),
            stop_requested: AtomicBool::new(false),
            retired: AtomicBool::new(false),
        }
    }

    /// Stops counting this context among the live ones (F21): once the last live one is
    /// retired or dropped, the pooled wake pipes are closed. For a context that is stopped and
    /// makes no more waits; idempotent.
    pub fn retire(&self) {
        if !self.retired.swap(true, SeqCst) {
            fdpool::context_retired();
        }
    }

    /// The current wake generation: a call records it when it starts, and any later
    /// [`interrupt`](Self::interrupt) ends its waits.
    pub fn generation(&self) -> u64 {
        self.word.load(SeqCst) >> ACTIVE_BITS
    }

    /// A call enters the context: returns its wake generation, read in the same atomic step
    /// that counts it, so a [`try_wake`](Self::try_wake) that counts it also ends it.
    pub fn enter_call(&self) -> u64 {
        self.word.fetch_add(1, SeqCst) >> ACTIVE_BITS
    }

    /// In a child of `fork` (single-threaded): the nudges other threads were making at the fork
    /// are gone with those threads (see [`Lent`]'s drop, which waits for them).
    pub fn nudges_gone_after_fork(&self) {
        self.nudging.store(0, SeqCst);
    }

    /// In a child of `fork` (single-threaded): only `n` calls — the forking thread's own —
    /// remain in progress; those of threads the child does not have are forgotten, so a wake
    /// in the child reports exactly its own calls.
    pub fn forget_calls_after_fork(&self, n: u32) {
        let w = self.word.load(SeqCst);
        self.word
            .store((w & !ACTIVE_MASK) | (u64::from(n) & ACTIVE_MASK), SeqCst);
    }

    /// The call that entered at generation `since` settles its outcome (F27): it is no longer
    /// counted by [`try_wake`](Self::try_wake). Returns whether it was woken (or interrupted
    /// otherwise) since it entered: then it must end with the waker's error, whatever it had
    /// achieved, because a `try_wake` that returned true counted it.
    pub fn settle_call(&self, since: u64) -> bool {
        (self.word.fetch_sub(1, SeqCst) >> ACTIVE_BITS) != since
    }

    /// F27, async-signal-safe (atomics and at most one write(2); no lock, no allocation, no
    /// log): if a call is in progress on the context (queued, running or nested) and has not
    /// settled its outcome, ends every wait of every such call from now on and makes each of
    /// them return `EINTR` (in one atomic step with the count: exactly), and returns true;
    /// otherwise does nothing (nothing is kept for a later call) and returns false.
    pub fn try_wake(&self) -> bool {
        let mut w = self.word.load(SeqCst);
        loop {
            if w & ACTIVE_MASK == 0 {
                return false;
            }
            match self
                .word
                .compare_exchange(w, w + (1 << ACTIVE_BITS), SeqCst, SeqCst)
            {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        self.nudge();
        true
    }

    /// F27, async-signal-safe: sets the "stop requested" state. Every call in progress ends
    /// (its waits end with `E_XCE_STOP_REQUESTED`) and every later call fails with it at once,
    /// until [`clear_stop`](Self::clear_stop).
    pub fn request_stop(&self) {
        self.stop_requested.store(true, SeqCst);
        // The flag ends the waits ([`Waker::check`] reads it after publishing its pipe; the
        // nudge wakes the wait in progress): the wake generation stays the count of wakes, so a
        // stop requested and cleared during a call does not turn its result into `EINTR`.
        self.nudge();
    }

    /// Clears the "stop requested" state (later calls run again).
    pub fn clear_stop(&self) {
        self.stop_requested.store(false, SeqCst);
    }

    pub fn stop_requested(&self) -> bool {
        self.stop_requested.load(SeqCst)
    }

    /// Ends every wait of every call that started before now (F13), with `EINTR`.
    /// Async-signal-safe.
    pub fn interrupt(&self) {
        self.word.fetch_add(1 << ACTIVE_BITS, SeqCst);
        self.nudge();
    }

    /// Closes the context (F20): every wait ends with `E_XCE_CLOSED`, now and from now on.
    pub fn close(&self) {
        self.closed.store(true, SeqCst);
        // As for a stop request: the flag ends the waits, the generation counts wakes only.
        self.nudge();
    }

    /// Marks the context closed without writing to any descriptor (a forked child's copy of a
    /// context whose wait belongs to a thread the child does not have).
    pub fn close_quietly(&self) {
        self.closed.store(true, SeqCst);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(SeqCst)
    }

    /// Makes the wait in progress (if any) re-check its flags; returns whether a wait was in
    /// progress (its wake pipe was written). Async-signal-safe (F27): atomics and one write(2),
    /// no lock, no allocation.
    pub fn nudge(&self) -> bool {
        self.nudging.fetch_add(1, SeqCst);
        let fd = self.lent.load(SeqCst);
        // The wait gives its pipe back only once `nudging` is zero again (`Lent::drop`), so
        // until the decrement below the number still names the pipe lent to this context.
        let wrote = fd >= 0 && notify_unchecked(fd);
        self.nudging.fetch_sub(1, SeqCst);
        wrote
    }

    /// The waker of a call that started at wake generation `since`, cancelled by `token`.
    pub fn waker<'a>(&'a self, since: u64, token: Option<&'a CancelToken>) -> Waker<'a> {
        Waker {
            state: self,
            since,
            token,
            watch: None,
        }
    }

    /// A waker ended only by wakes from now on (no token): for tools and benchmarks that drive
    /// a [`Connection`](super::Connection) directly.
    pub fn waker_now(&self) -> Waker<'_> {
        self.waker(self.generation(), None)
    }
}

impl Drop for WakeState {
    fn drop(&mut self) {
        self.retire();
    }
}

/// The cancellation of one call handle (per-call handles of the C API, Go's `context`): once
/// cancelled, every wait of a call made through it ends with `ECANCELED`.
#[derive(Debug, Default)]
pub struct CancelToken {
    cancelled: AtomicBool,
}

impl CancelToken {
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Marks the token cancelled. The owner of the context must also
    /// [`nudge`](WakeState::nudge) the wait in progress (the client layer does).
    pub fn cancel(&self) {
        self.cancelled.store(true, SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(SeqCst)
    }
}

/// What ends the waits of one call: its context's wake generation and closing, and its cancel
/// token. Cheap to copy; every blocking point of the transport takes one.
#[derive(Debug, Clone, Copy)]
pub struct Waker<'a> {
    state: &'a WakeState,
    since: u64,
    token: Option<&'a CancelToken>,
    /// A descriptor whose readiness ends every wait as if its deadline had passed (F25: a
    /// probe of another controller gives way to the late reply it was started for).
    watch: Option<RawFd>,
}

/// What ended a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The socket is ready; `revents` from poll(2).
    Ready(i16),
    /// The deadline passed.
    TimedOut,
}

/// Gives the lent wake pipe back when the wait ends, however it ends.
struct Lent<'a> {
    pipe: WakePipe,
    state: &'a WakeState,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        self.state.lent.store(-1, SeqCst);
        // A nudge that read the number before the store above is one write(2) away from done
        // (a nudge never blocks; one from a signal handler on this very thread has finished
        // before this code resumes).
        while self.state.nudging.load(SeqCst) != 0 {
            std::thread::yield_now();
        }
        give_back(self.pipe);
    }
}

impl<'a> Waker<'a> {
    /// `Err` when the call must stop: the context is closed (`E_XCE_CLOSED`), the call was
    /// cancelled (`ECANCELED`), or woken (`EINTR`).
    pub fn check(&self) -> Result<(), Error> {
        if self.state.is_closed() {
            Err(Error::Closed)
        } else if self.state.stop_requested() {
            Err(Error::StopRequested)
        } else if self.token.is_some_and(CancelToken::is_cancelled) {
            Err(Error::Errno(libc::ECANCELED))
        } else if self.state.generation() != self.since {
            Err(Error::Errno(libc::EINTR))
        } else {
            Ok(())
        }
    }

    /// This waker, whose waits also end (as timed out) when `fd` becomes readable or fails.
    pub fn watching(self, fd: RawFd) -> Waker<'a> {
        Waker {
            watch: Some(fd),
            ..self
        }
    }

    /// Whether the watched descriptor (if any) is readable or failed right now.
    pub fn watch_fired(&self) -> bool {
        let Some(fd) = self.watch else {
            return false;
        };
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: p is a live pollfd; timeout 0 never blocks.
        unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents != 0 }
    }

    /// Waits until `fd` reports one of `events`, the deadline passes, or the call is woken,
    /// cancelled or its context closed (the `Err` of [`check`](Self::check)). `fd = None` is an
    /// interruptible sleep.
    pub fn wait(
        &self,
        fd: Option<RawFd>,
        events: i16,
        deadline: Option<Instant>,
    ) -> Result<Wait, Error> {
        let mut fds = [libc::pollfd {
            fd: fd.unwrap_or(-1),
            events,
            revents: 0,
        }];
        if self.wait_fds(&mut fds, deadline)? {
            Ok(Wait::Ready(fds[0].revents))
        } else {
            Ok(Wait::TimedOut)
        }
    }

    /// Waits until one of `fds` (at most [`MAX_WAIT_FDS`]) reports one of its events (their
    /// `revents` are set; `Ok(true)`), the deadline passes or the watched descriptor is ready
    /// (`Ok(false)`), or the call must stop (the `Err` of [`check`](Self::check)). A negative
    /// fd entry is ignored.
    pub fn wait_fds(
        &self,
        fds: &mut [libc::pollfd],
        deadline: Option<Instant>,
    ) -> Result<bool, Error> {
        if fds.len() > MAX_WAIT_FDS {
            return Err(Error::Errno(libc::EINVAL));
        }
        self.check()?;
        let pipe = lend()?;
        let efd = pipe.read_fd();
        self.state.lent.store(pipe.write_fd(), SeqCst);
        let _lent = Lent {
            pipe,
            state: self.state,
        };
        let none = libc::pollfd {
            fd: -1,
            events: 0,
            revents: 0,
        };
        let mut all = [none; MAX_WAIT_FDS + 2];
        all[0] = libc::pollfd {
            fd: efd,
            events: libc::POLLIN,
            revents: 0,
        };
        all[1] = libc::pollfd {
            fd: self.watch.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        };
        let n = fds.len() + 2;
        loop {
            // After publishing the wake pipe: a wake either changed the flags before this check
            // or writes the wake pipe after it.
            self.check()?;
            let timeout_ms = poll_timeout_ms(deadline);
            for (slot, f) in all[2..n].iter_mut().zip(fds.iter()) {
                *slot = libc::pollfd { revents: 0, ..*f };
            }
            all[0].revents = 0;
            all[1].revents = 0;
            // SAFETY: `all` is a live array of at least n pollfd; negative fds are ignored.
            let rc = unsafe { libc::poll(all.as_mut_ptr(), n as libc::nfds_t, timeout_ms) };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue; // a signal, not a wake: recompute the timeout and wait again
                }
                return Err(Error::from_io(&e));
            }
            if all[0].revents != 0 {
                // Ours or a late one meant for the wake pipe's previous borrower: the flags
                // decide (checked at the top of the loop).
                pipe.drain();
                continue;
            }
            if all[2..n].iter().any(|p| p.revents != 0) {
                for (f, p) in fds.iter_mut().zip(&all[2..n]) {
                    f.revents = p.revents;
                }
                return Ok(true);
            }
            if all[1].revents != 0 || timeout_ms == 0 {
                return Ok(false);
            }
        }
    }

    /// An interruptible sleep: `Ok` after `d`, the `Err` of [`check`](Self::check) otherwise.
    pub fn sleep(&self, d: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + d;
        loop {
            match self.wait(None, 0, Some(deadline))? {
                Wait::TimedOut => return Ok(()),
                // Cannot happen without an fd; keep waiting for the deadline.
                Wait::Ready(_) => {}
            }
        }
    }
}

/// `poll`'s timeout for `deadline` (-1: none), recomputed before each poll.
fn poll_timeout_ms(deadline: Option<Instant>) -> i32 {
    match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // Still report a wake or readiness before timing out.
                0
            } else {
                // Round up: a 0 ms poll for a 0.4 ms remainder would spin.
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sleep_runs_to_its_end_without_a_wake() {
        let s = WakeState::new();
        let t = Instant::now();
        s.waker_now().sleep(Duration::from_millis(20)).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(20));
    }

    /// F27: the wake generation counts wakes only. A stop requested and cleared, or a close,
    /// while a call is in progress does not make the call "woken" (before: its successful
    /// result became `EINTR`); a counted wake does.
    #[test]
    fn only_a_wake_settles_a_call_as_woken() {
        let s = WakeState::new();
        let since = s.enter_call();
        s.request_stop();
        s.clear_stop();
        assert!(
            !s.settle_call(since),
            "a stop requested and cleared counted as a wake"
        );
        let since = s.enter_call();
        assert!(s.try_wake());
        assert!(s.settle_call(since));
        assert!(
            !s.try_wake(),
            "no call in progress: nothing counted, nothing kept"
        );
    }

    #[test]
    fn interrupt_ends_a_sleep_from_another_thread() {
        let s = Arc::new(WakeState::new());
        let s2 = s.clone();
        let t = Instant::now();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            s2.interrupt();
        });
        let w = s.waker_now();
        assert_eq!(
            w.sleep(Duration::from_secs(10)),
            Err(Error::Errno(libc::EINTR))
        );
        assert!(t.elapsed() < Duration::from_secs(5));
        h.join().unwrap();
        // A waker made after the interrupt is not affected by it.
        s.waker_now().sleep(Duration::from_millis(1)).unwrap();
    }

    #[test]
    fn close_and_cancel_have_their_own_errors() {
        let s = WakeState::new();
        let token = CancelToken::new();
        let w = s.waker(s.generation(), Some(&token));
        assert_eq!(w.check(), Ok(()));
        token.cancel();
        assert_eq!(
            w.sleep(Duration::from_secs(5)),
            Err(Error::Errno(libc::ECANCELED))
        );
        s.close();
        assert_eq!(w.check(), Err(Error::Closed), "closing wins over the rest");
        assert_eq!(s.waker_now().check(), Err(Error::Closed));
    }

    #[test]
    fn an_idle_wake_state_holds_no_fd_and_waits_share_pooled_ones() {
        let count = || std::fs::read_dir("/proc/self/fd").unwrap().count();
        let before = count();
        // Other tests run in parallel and open fds too: a margin far below the 50 that one
        // wake pipe per context would add.
        let states: Vec<WakeState> = (0..50).map(|_| WakeState::new()).collect();
        assert!(count() < before + 10, "50 idle contexts hold no fd");
        for s in &states {
            s.waker_now().sleep(Duration::from_millis(1)).unwrap();
        }
        assert!(
            count() < before + 10,
            "sequential waits reuse pooled eventfds"
        );
    }

    #[test]
    fn a_late_wake_on_a_reused_wake_pipe_does_not_end_another_wait() {
        // B sleeps on a pooled wake pipe. A write to that very fd with B's flags clear is what a
        // wake meant for the fd's previous borrower looks like: B must sleep on.
        let b = Arc::new(WakeState::new());
        let b2 = b.clone();
        let h = std::thread::spawn(move || {
            let t = Instant::now();
            (
                b2.waker_now().sleep(Duration::from_millis(100)),
                t.elapsed(),
            )
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let fd = loop {
            let fd = b.lent.load(SeqCst);
            if fd >= 0 {
                break fd;
            }
            assert!(Instant::now() < deadline, "B never started waiting");
            std::thread::yield_now();
        };
        // SAFETY: writes 8 bytes from a live u64 to the pooled wake pipe B holds.
        unsafe { libc::write(fd, (&1u64 as *const u64).cast(), 8) };
        let (r, took) = h.join().unwrap();
        assert_eq!(r, Ok(()), "a stray write is not a wake");
        assert!(took >= Duration::from_millis(100), "{took:?}");
    }
}
