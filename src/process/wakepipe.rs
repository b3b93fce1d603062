//! F13, F21: the descriptor a wait polls so that another thread (or a signal handler) can end
//! it: a non-blocking pipe. Unlike an eventfd (an anonymous inode that every eventfd, epoll,
//! timerfd and signalfd shares), a pipe has an inode of its own, numbered from a counter the
//! kernel does not rewind, so [`FdIdent`] recognises it — and nothing else — for as long as it
//! lives: after a caller's `closefrom()` and its own new descriptors, the library never reads,
//! writes or closes a number that is no longer its pipe.

use std::os::fd::RawFd;

use super::fdident::FdIdent;
use crate::error::Error;

/// A pipe used as a wake-up signal: a byte written to `write` makes `read` readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakePipe {
    read: RawFd,
    write: RawFd,
    id: FdIdent,
}

impl WakePipe {
    /// A new pipe, both ends non-blocking and close-on-exec.
    pub fn new() -> Result<WakePipe, Error> {
        let mut p = [-1; 2];
        // SAFETY: pipe2(2) writes two descriptors into a live array of two.
        if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(Error::from_io(&std::io::Error::last_os_error()));
        }
        match FdIdent::of(p[0]) {
            Some(id) => Ok(WakePipe {
                read: p[0],
                write: p[1],
                id,
            }),
            None => Err(Error::Errno(libc::EBADF)),
        }
    }

    /// The end to poll for `POLLIN`.
    pub fn read_fd(&self) -> RawFd {
        self.read
    }

    /// The end [`notify`](Self::notify) writes.
    pub fn write_fd(&self) -> RawFd {
        self.write
    }

    /// Whether both numbers still name this pipe, in the process that made it.
    pub fn still_ours(&self) -> bool {
        self.id.still_ours(self.read) && self.id.still_ours(self.write)
    }

    /// Whether the pipe was made by another process (we are a forked child).
    pub fn inherited(&self) -> bool {
        self.id.inherited()
    }

    /// Writes one byte, if the write end is still this pipe. Returns whether it was written.
    pub fn notify(&self) -> bool {
        self.id.still_ours(self.write) && notify_unchecked(self.write)
    }

    /// Empties the pipe; returns whether anything was in it.
    pub fn drain(&self) -> bool {
        let mut any = false;
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reads at most 64 bytes into a live buffer from the non-blocking read end
            // (verified when the pipe was lent); EAGAIN ends the loop.
            let n = unsafe { libc::read(self.read, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return any;
            }
            any = true;
        }
    }

    /// Closes each end that still names this pipe (in whichever process: a forked child closes
    /// its own copies); a number the caller reused is left alone.
    pub fn close(self) {
        for fd in [self.read, self.write] {
            if self.id.same_file(fd) {
                // SAFETY: fd names our pipe (checked just now); nothing of ours uses it after.
                unsafe { libc::close(fd) };
            }
        }
    }
}

/// Writes one byte to `fd`, the write end of a [`WakePipe`] the caller knows to be alive.
/// Async-signal-safe: one write(2). A full pipe (EAGAIN) already has a wake pending.
pub fn notify_unchecked(fd: RawFd) -> bool {
    let one = [1u8];
    // SAFETY: writes one byte from a live buffer; the caller guarantees fd is our pipe.
    let n = unsafe { libc::write(fd, one.as_ptr().cast(), 1) };
    n == 1 || (n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_then_drain() {
        let p = WakePipe::new().unwrap();
        assert!(p.still_ours());
        assert!(!p.drain());
        assert!(p.notify() && p.notify());
        assert!(p.drain());
        assert!(!p.drain());
        p.close();
        assert!(!p.still_ours());
    }
}
