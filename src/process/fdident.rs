//! F21 (amended): what a descriptor named when the library opened it, precisely enough to
//! tell it apart from any descriptor that later takes its number.
//!
//! A daemon may close every fd above 2 (`closefrom`, `close_range`, daemonizing code) and open
//! its own, which then get the numbers the library held; or it may `fork`, and the child
//! shares the parent's descriptors. (device, inode) tells a socket, a pipe or a file apart —
//! the kernel numbers the inodes of sockets and pipes from a counter, so a new one does not
//! take the number of one just closed — but every eventfd, epoll, timerfd and signalfd is the
//! same anonymous inode, and even an eventfd's `eventfd-id` (fdinfo) is handed to the next
//! eventfd once freed. So the library keeps no anonymous-inode descriptor across calls: what it
//! keeps is a socket or a pipe ([`super::wakepipe`]), and an anonymous inode is never taken to
//! be ours ([`FdIdent::verifiable`] is false for it).

use std::cell::Cell;
use std::os::fd::RawFd;

/// What a descriptor named when the library opened it: the process and the file's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdIdent {
    pid: libc::pid_t,
    dev: libc::dev_t,
    ino: libc::ino_t,
    /// An anonymous inode (eventfd and friends): shared by all of its kind, never verifiable.
    anon: bool,
}

thread_local! {
    /// The process id read when the library call in progress on this thread began
    /// ([`CallProcess`]); 0: no call in progress, or the caller's code is running
    /// ([`outside_call`]).
    static CALL_PID: Cell<libc::pid_t> = const { Cell::new(0) };
    /// Identity syscalls made by this thread: `getpid`, `fstat` (see [`identity_syscalls`]).
    static SYSCALLS: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// The calling process's id. Inside a library call ([`CallProcess`]) the id read when the call
/// began; else a syscall (glibc has not cached it since 2.25, so a fork is always seen).
///
/// Why the call's id is the process's id for as long as the call runs (P2: one `getpid` per
/// call instead of one per descriptor check — the socket, each end of every wait's pipe, the
/// fork generation): a process id changes only in the child of a fork, and a thread is in a
/// child only if it forked itself (the child has no other thread). The library never forks;
/// the caller's code runs inside a call only through its callbacks (log sink, event handler,
/// reconnect hook: [`outside_call`]), which run with no call id and read it again after
/// they return — so a child made by a callback, which goes on with the rest of the call,
/// checks its descriptors as the child. The `pthread_atfork` child handler forgets the id too
/// (`fork.rs`). Left out, as before: a child made from a signal handler by a raw `clone` (no
/// atfork handler) while this thread was inside the library; it may only call async-signal-safe
/// functions until it execs, which the library's calls are not.
pub fn current_pid() -> libc::pid_t {
    match CALL_PID.try_with(Cell::get) {
        Ok(pid) if pid != 0 => pid,
        _ => getpid(),
    }
}

/// getpid(2), counted.
fn getpid() -> libc::pid_t {
    count(|c| c.0 += 1);
    // SAFETY: getpid(2) takes no arguments and cannot fail.
    unsafe { libc::getpid() }
}

fn count(f: impl FnOnce(&mut (u64, u64))) {
    let _ = SYSCALLS.try_with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    });
}

/// The identity syscalls this thread made so far, `(getpid, fstat)`: what the happy path pays
/// for F21 and F26 (tests/happy_path.rs, P2).
#[doc(hidden)]
pub fn identity_syscalls() -> (u64, u64) {
    SYSCALLS.try_with(Cell::get).unwrap_or((0, 0))
}

/// A library call in progress on this thread: [`current_pid`] answers the id read when it
/// began (or, nested in another call, that call's). Dropped when the call returns.
#[must_use]
pub struct CallProcess {
    outer: libc::pid_t,
}

impl CallProcess {
    pub fn enter() -> CallProcess {
        let outer = CALL_PID.try_with(Cell::get).unwrap_or(0);
        if outer == 0 {
            let pid = getpid();
            let _ = CALL_PID.try_with(|c| c.set(pid));
        }
        CallProcess { outer }
    }
}

impl Drop for CallProcess {
    fn drop(&mut self) {
        let _ = CALL_PID.try_with(|c| c.set(self.outer));
    }
}

/// Runs the caller's code (a callback) from inside a library call: with no call id while it
/// runs (it may fork, or call the library), and the id read again when it returns or unwinds
/// — in a child it forked, the rest of the call checks its descriptors as the child.
pub fn outside_call<R>(f: impl FnOnce() -> R) -> R {
    struct Again(libc::pid_t);
    impl Drop for Again {
        fn drop(&mut self) {
            if self.0 != 0 {
                let pid = getpid();
                let _ = CALL_PID.try_with(|c| c.set(pid));
            }
        }
    }
    let _again = Again(CALL_PID.try_with(|c| c.replace(0)).unwrap_or(0));
    f()
}

/// In a child of `fork`, from the atfork handler: this thread's call id (if the fork was made
/// from inside the library, by a signal handler) was the parent's.
pub(crate) fn forget_call_pid() {
    let _ = CALL_PID.try_with(|c| c.set(0));
}

/// (device, inode, anonymous) of an open descriptor.
fn stat(fd: RawFd) -> Option<(libc::dev_t, libc::ino_t, bool)> {
    count(|c| c.1 += 1);
    // SAFETY: fstat writes into a live, properly sized stat buffer; all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; an fd that is not open is EBADF, not undefined behaviour.
    let rc = unsafe { libc::fstat(fd, &mut st) };
    // An anonymous inode has no file type bits (eventfd, epoll, timerfd, signalfd, …).
    (rc == 0).then_some((st.st_dev, st.st_ino, st.st_mode & libc::S_IFMT == 0))
}

impl FdIdent {
    /// Records what `fd` names now, in this process. `None` if it is not open.
    pub fn of(fd: RawFd) -> Option<FdIdent> {
        let (dev, ino, anon) = stat(fd)?;
        Some(FdIdent {
            pid: current_pid(),
            dev,
            ino,
            anon,
        })
    }

    /// Whether the identity is precise enough to recognise the descriptor later (false for an
    /// anonymous inode: such a descriptor is not kept across calls).
    #[cfg(test)]
    pub fn verifiable(&self) -> bool {
        !self.anon
    }

    /// Whether `fd` still names the recorded file and we are still the process that opened it
    /// (a forked child shares the file with its parent: using it would cross their streams).
    pub fn still_ours(&self, fd: RawFd) -> bool {
        self.pid == current_pid() && self.same_file(fd)
    }

    /// Whether `fd` still names the recorded file, in whichever process (a forked child may
    /// close its own copy of a descriptor it inherited, but must not use it).
    pub fn same_file(&self, fd: RawFd) -> bool {
        let Some((dev, ino, anon)) = stat(fd) else {
            return false;
        };
        !self.anon && !anon && (dev, ino) == (self.dev, self.ino)
    }

    /// Whether `fd` names a file with the recorded device and inode, in this process (for a
    /// descriptor held only for the span of one wait, whose kernel id cannot be read).
    #[cfg(test)]
    pub fn same_inode(&self, fd: RawFd) -> bool {
        self.pid == current_pid()
            && stat(fd).is_some_and(|(d, i, _)| (d, i) == (self.dev, self.ino))
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

    fn eventfd() -> RawFd {
        // SAFETY: eventfd(2) takes no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(fd >= 0);
        fd
    }

    fn close(fd: RawFd) {
        // SAFETY: closes a descriptor this test made.
        unsafe { libc::close(fd) };
    }

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
        close(p[0]);
        close(p[1]);
    }

    #[test]
    fn an_eventfd_is_never_verifiable() {
        let fd = eventfd();
        let id = FdIdent::of(fd).unwrap();
        assert!(!id.verifiable());
        assert!(
            !id.still_ours(fd),
            "an anonymous inode is shared by every eventfd"
        );
        assert!(id.same_inode(fd));
        close(fd);
    }

    #[test]
    fn a_pipe_that_takes_the_number_of_ours_is_not_ours() {
        let mut p = [0; 2];
        // SAFETY: pipe2 writes two fds into a live array of two.
        assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let id = FdIdent::of(p[0]).unwrap();
        assert!(id.verifiable() && id.still_ours(p[0]) && id.still_ours(p[1]));
        close(p[0]);
        close(p[1]);
        let mut q = [0; 2];
        // SAFETY: as above.
        assert_eq!(unsafe { libc::pipe2(q.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        assert!(
            !id.still_ours(q[0]) && !id.still_ours(q[1]),
            "a new pipe, a new inode"
        );
        close(q[0]);
        close(q[1]);
    }
}
