//! F13: an interruptible wait without a thread of our own.
//!
//! A [`Waker`] is an eventfd. Every blocking point of the library (connect, write, reply wait,
//! backoff sleep) is a `poll(2)` on the socket *and* this eventfd, so another thread can end the
//! wait by writing to it. A wake stays pending (the eventfd counter stays non-zero) until a wait
//! consumes it, so a wake racing with the start of a wait is never lost.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::error::Error;

/// The wake channel of one client context.
#[derive(Debug)]
pub struct Waker {
    efd: OwnedFd,
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
    pub fn new() -> Result<Waker, Error> {
        // SAFETY: eventfd(2) takes no pointers; a non-negative return is a new fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::from_io(&std::io::Error::last_os_error()));
        }
        // SAFETY: fd is a freshly created, valid descriptor owned by nobody else.
        Ok(Waker {
            efd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Ends the current wait on this waker, or the next one if none is in progress.
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd. It can only fail with EAGAIN
        // when the counter is near u64::MAX, in which case a wake is pending anyway.
        unsafe { libc::write(self.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Consumes pending wakes; returns whether there was one.
    pub fn take(&self) -> bool {
        let mut n: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64 from our non-blocking eventfd; EAGAIN
        // (nothing pending) is the only expected failure.
        let r = unsafe { libc::read(self.efd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
        r == 8 && n > 0
    }

    /// Waits until `fd` reports one of `events`, the deadline passes, or a wake arrives
    /// (`Err(EINTR)`, the wake consumed). `fd = None` is an interruptible sleep.
    pub fn wait(
        &self,
        fd: Option<RawFd>,
        events: i16,
        deadline: Option<Instant>,
    ) -> Result<Wait, Error> {
        loop {
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
                    fd: self.efd.as_raw_fd(),
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
            if fds[0].revents != 0 && self.take() {
                return Err(Error::Errno(libc::EINTR));
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
