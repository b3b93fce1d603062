//! F21: the library's descriptors are its own. A daemon may close every fd above 2
//! (`closefrom`, `close_range`, daemonizing code) and open its own files, which then get the
//! numbers the library held; or it may `fork`, and the child shares the parent's sockets and
//! eventfds. So before the library uses a descriptor it kept across calls, it checks that the
//! number still names the very file it opened in this process ([`FdIdent::still_ours`]); a
//! number that does not is forgotten, never read, written or closed.

use std::os::fd::RawFd;

/// What a descriptor named when the library opened it: the process and the file's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdIdent {
    pid: libc::pid_t,
    dev: libc::dev_t,
    ino: libc::ino_t,
}

/// The calling process's id (a syscall: glibc has not cached it since 2.25, so a fork is
/// always seen).
pub fn current_pid() -> libc::pid_t {
    // SAFETY: getpid(2) takes no arguments and cannot fail.
    unsafe { libc::getpid() }
}

fn stat(fd: RawFd) -> Option<(libc::dev_t, libc::ino_t)> {
    // SAFETY: fstat writes into a live, properly sized stat buffer; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; an fd that is not open is EBADF, not undefined behaviour.
    let rc = unsafe { libc::fstat(fd, &mut st) };
    (rc == 0).then_some((st.st_dev, st.st_ino))
}

impl FdIdent {
    /// Records what `fd` names now, in this process. `None` if it is not open.
    pub fn of(fd: RawFd) -> Option<FdIdent> {
        let (dev, ino) = stat(fd)?;
        Some(FdIdent {
            pid: current_pid(),
            dev,
            ino,
        })
    }

    /// Whether `fd` still names the recorded file and we are still the process that opened it
    /// (a forked child shares the file with its parent: using it would cross their streams).
    pub fn still_ours(&self, fd: RawFd) -> bool {
        self.pid == current_pid() && self.same_file(fd)
    }

    /// Whether `fd` still names the recorded file, in whichever process (a forked child may
    /// close its own copy of a descriptor it inherited, but must not use it).
    pub fn same_file(&self, fd: RawFd) -> bool {
        stat(fd) == Some((self.dev, self.ino))
    }

    /// Whether the descriptor was opened by another process (we are a forked child).
    pub fn inherited(&self) -> bool {
        self.pid != current_pid()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_reused_number_is_not_ours() {
        let a = std::fs::File::open("/dev/null").unwrap();
        let fd = a.as_raw_fd();
        let id = FdIdent::of(fd).unwrap();
        assert!(id.still_ours(fd));
        drop(a);
        assert!(!id.still_ours(fd), "closed");
        // Whatever now gets that number is another file (a fresh pipe here).
        let mut p = [0; 2];
        // SAFETY: pipe2 writes two fds into a live array of two.
        assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        assert!(!id.still_ours(p[0]) && !id.still_ours(p[1]));
        // SAFETY: closing the pipe we just made.
        unsafe {
            libc::close(p[0]);
            libc::close(p[1]);
        }
    }
}
