//! F13: an interruptible wait without a thread of our own.
//!
//! Every blocking point of the library (connect, write, reply wait, backoff sleep) is a
//! `poll(2)` on the socket *and* an eventfd, so another thread can end the wait by writing to
//! it. The eventfd is not the context's own: a wait borrows one from a process-wide pool for its
//! duration (P8: an idle context holds its socket only). The wake itself is a per-context
//! flag, set before the lent eventfd (if any) is written; a wait publishes its eventfd before
//! it checks the flag (both sequentially consistent), so a wake racing with the start of a wait
//! is never lost, and a wake with no wait in progress stays pending for the next one.
//!
//! A wake may write to an eventfd that its wait has just given back and another context's
//! wait has borrowed: that wait sees a spurious readiness, drains it, finds its own flag clear
//! and waits on. Pooled eventfds are never closed, so such a late write never reaches an fd
//! number that was reused for something else.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering::SeqCst};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::Error;

/// Eventfds not lent to any wait right now. Grows to the most waits ever in progress at once
/// (about the number of threads calling into the library), never shrinks.
static POOL: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

fn lend() -> Result<RawFd, Error> {
    if let Some(fd) = POOL.lock().pop() {
        return Ok(fd);
    }
    // SAFETY: eventfd(2) takes no pointers; a non-negative return is a new fd, which the pool
    // owns from now on (it is never closed, see the module doc).
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::from_io(&std::io::Error::last_os_error()));
    }
    Ok(fd)
}

/// Empties an eventfd's counter; returns whether it was non-zero.
fn drain(fd: RawFd) -> bool {
    let mut n: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live u64 from a pooled non-blocking eventfd; EAGAIN
    // (nothing pending) is the only expected failure.
    let r = unsafe { libc::read(fd, (&mut n as *mut u64).cast(), 8) };
    r == 8 && n > 0
}

/// The eventfd a wait holds, published in its waker while it is lent; given back on drop.
struct Lent<'a> {
    fd: RawFd,
    slot: &'a AtomicI32,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        self.slot.store(-1, SeqCst);
        POOL.lock().push(self.fd);
    }
}

/// The wake channel of one client context.
#[derive(Debug)]
pub struct Waker {
    /// A wake not yet consumed by a wait.
    pending: AtomicBool,
    /// The eventfd lent to the wait in progress, -1 when none.
    lent: AtomicI32,
}

/// What ended a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The socket is ready; `revents` from poll(2).
    Ready(i16),
    /// The deadline passed.
    TimedOut,
}

impl Waker {
    /// A waker holding no file descriptor.
    pub fn new() -> Result<Waker, Error> {
        Ok(Waker {
            pending: AtomicBool::new(false),
            lent: AtomicI32::new(-1),
        })
    }

    /// Ends the current wait on this waker, or the next one if none is in progress.
    pub fn wake(&self) {
        self.pending.store(true, SeqCst);
        let fd = self.lent.load(SeqCst);
        if fd >= 0 {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to a pooled eventfd (never closed, so the
            // number is still an eventfd even if its wait just ended). It can only fail with
            // EAGAIN when the counter is near u64::MAX, when a wake is pending anyway.
            unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
        }
    }

    /// Consumes a pending wake; returns whether there was one.
    pub fn take(&self) -> bool {
        self.pending.swap(false, SeqCst)
    }

    /// Waits until `fd` reports one of `events`, the deadline passes, or a wake arrives
    /// (`Err(EINTR)`, the wake consumed). `fd = None` is an interruptible sleep.
    pub fn wait(
        &self,
        fd: Option<RawFd>,
        events: i16,
        deadline: Option<Instant>,
    ) -> Result<Wait, Error> {
        let efd = lend()?;
        self.lent.store(efd, SeqCst);
        let _lent = Lent {
            fd: efd,
            slot: &self.lent,
        };
        loop {
            // After publishing the eventfd: a wake either set the flag before this check or
            // writes the eventfd after it.
            if self.take() {
                return Err(Error::Errno(libc::EINTR));
            }
            let timeout_ms = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        // Still report a pending wake or readiness before timing out.
                        0
                    } else {
                        // Round up: a 0 ms poll for a 0.4 ms remainder would spin.
                        left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
                    }
                }
            };
            let mut fds = [
                libc::pollfd {
                    fd: efd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: fd.unwrap_or(-1),
                    events,
                    revents: 0,
                },
            ];
            // SAFETY: fds is a live array of 2 pollfd; a negative fd entry is ignored by poll(2).
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue; // a signal, not a wake: recompute the timeout and wait again
                }
                return Err(Error::from_io(&e));
            }
            if fds[0].revents != 0 {
                // Ours or a late one meant for the eventfd's previous borrower: the flag
                // decides (checked at the top of the loop).
                drain(efd);
                if self.pending.load(SeqCst) {
                    continue;
                }
            }
            if fds[1].revents != 0 {
                return Ok(Wait::Ready(fds[1].revents));
            }
            if timeout_ms == 0 {
                return Ok(Wait::TimedOut);
            }
        }
    }

    /// An interruptible sleep: `Ok` after `d`, `Err(EINTR)` on a wake.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sleep_runs_to_its_end_without_a_wake() {
        let w = Waker::new().unwrap();
        let t = Instant::now();
        w.sleep(Duration::from_millis(20)).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn wake_ends_a_sleep_from_another_thread() {
        let w = Arc::new(Waker::new().unwrap());
        let w2 = w.clone();
        let t = Instant::now();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            w2.wake();
        });
        assert_eq!(
            w.sleep(Duration::from_secs(10)),
            Err(Error::Errno(libc::EINTR))
        );
        assert!(t.elapsed() < Duration::from_secs(2));
        h.join().unwrap();
        assert!(!w.take(), "the wake was consumed");
    }

    #[test]
    fn an_idle_waker_holds_no_fd_and_waits_share_pooled_ones() {
        let count = || std::fs::read_dir("/proc/self/fd").unwrap().count();
        let before = count();
        // Other tests run in parallel and open fds too: a margin far below the 50 that one
        // eventfd per waker would add.
        let wakers: Vec<Waker> = (0..50).map(|_| Waker::new().unwrap()).collect();
        assert!(count() < before + 10, "50 idle wakers hold no fd");
        for w in &wakers {
            w.sleep(Duration::from_millis(1)).unwrap();
        }
        assert!(
            count() < before + 10,
            "sequential waits reuse pooled eventfds"
        );
    }

    #[test]
    fn a_late_wake_on_a_reused_eventfd_does_not_end_another_wait() {
        // B sleeps on a pooled eventfd. A write to that very fd with B's flag clear is what a
        // wake meant for the fd's previous borrower looks like: B must sleep on.
        let b = Arc::new(Waker::new().unwrap());
        let b2 = b.clone();
        let h = std::thread::spawn(move || {
            let t = Instant::now();
            (b2.sleep(Duration::from_millis(100)), t.elapsed())
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
        // SAFETY: writes 8 bytes from a live u64 to the pooled eventfd B holds.
        unsafe { libc::write(fd, (&1u64 as *const u64).cast(), 8) };
        let (r, took) = h.join().unwrap();
        assert_eq!(r, Ok(()), "a stray write is not a wake");
        assert!(took >= Duration::from_millis(100), "{took:?}");
        // A real wake still works on the same waker.
        b.wake();
        assert_eq!(
            b.sleep(Duration::from_secs(5)),
            Err(Error::Errno(libc::EINTR))
        );
    }

    #[test]
    fn a_wake_before_the_wait_is_kept() {
        let w = Waker::new().unwrap();
        w.wake();
        w.wake();
        assert_eq!(
            w.sleep(Duration::from_secs(10)),
            Err(Error::Errno(libc::EINTR))
        );
        w.sleep(Duration::from_millis(1)).unwrap();
    }
}
