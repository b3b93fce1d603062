//! Work beside the serving path (C24, P12): a snapshot written, or installed from the leader,
//! runs on a thread of its own at the lowest CPU priority (nice 19) and in the idle I/O class,
//! and its file goes to the disk in steps of [`STEP`] — each step's writeback started as soon as
//! it is written and waited for before the step after the next — so at most two steps of it are
//! ever queued at the disk: the node's log fsyncs (a write's commit, a heartbeat's append) wait
//! behind a few milliseconds of it, never behind the whole file. Before, the file was written
//! into the page cache whole and fsynced at the end: a 95 MB snapshot held the disk for most
//! of a second, the standbys' appends waited for it, and the primary, hearing no quorum, stepped
//! down (P12 at 10^6 jobs).
//!
//! Syscalls (documented here, the only ones): gettid, setpriority, ioprio_set,
//! sync_file_range.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;

/// Bytes of a file sent to the disk at a time.
pub const STEP: u64 = 1 << 20;

/// `ioprio_set`'s "who": one thread (`IOPRIO_WHO_PROCESS` takes a thread id).
const IOPRIO_WHO_PROCESS: libc::c_int = 1;
/// `IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0)`: served when the disk has nothing else to do
/// (schedulers that honour classes: mq-deadline, bfq), with the scheduler's aging against
/// starvation.
const IOPRIO_IDLE: libc::c_int = 3 << 13;
/// The lowest CPU priority.
const NICE_LOWEST: libc::c_int = 19;

/// Puts the calling thread at background priority: nice 19 and the idle I/O class. A refusal
/// (a seccomp filter, a kernel without I/O classes) leaves it as it was: this only orders work,
/// it is no correctness matter.
pub fn lower_this_thread() {
    // SAFETY: gettid(2) has no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    // SAFETY: setpriority(2) on this thread's own id (a thread id is a PRIO_PROCESS id on
    // Linux); no memory is passed.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, NICE_LOWEST);
    }
    // SAFETY: ioprio_set(2) on this thread's own id; no memory is passed.
    unsafe {
        libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid, IOPRIO_IDLE);
    }
}

/// `sync_file_range` of `[off, off + len)` of `f` with `flags`.
fn sync_range(f: &File, off: u64, len: u64, flags: libc::c_uint) -> io::Result<()> {
    // SAFETY: sync_file_range(2) on a descriptor we own, with byte offsets; no memory passed.
    let rc = unsafe { libc::sync_file_range(f.as_raw_fd(), off as i64, len as i64, flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Starts the writeback of `[off, off + len)` (returns at once).
fn start(f: &File, off: u64, len: u64) -> io::Result<()> {
    sync_range(f, off, len, libc::SYNC_FILE_RANGE_WRITE)
}

/// Waits until `[off, off + len)` is written back (starting what is not yet under way).
fn finish(f: &File, off: u64, len: u64) -> io::Result<()> {
    sync_range(
        f,
        off,
        len,
        libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER,
    )
}

/// A file written in steps (see the module): writes go through; each [`STEP`] written is sent
/// to the disk, and the one before it waited for. The caller still fsyncs the file at the end
/// (`sync_file_range` makes no metadata durable); by then little is left to write.
pub struct PacedFile {
    file: File,
    written: u64,
    /// Where the step being written began; where the previous one began.
    step: u64,
    previous: Option<u64>,
}

impl PacedFile {
    pub fn new(file: File) -> PacedFile {
        PacedFile {
            file,
            written: 0,
            step: 0,
            previous: None,
        }
    }

    pub fn into_inner(self) -> File {
        self.file
    }
}

impl Write for PacedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.step >= STEP {
            start(&self.file, self.step, self.written - self.step)?;
            if let Some(p) = self.previous {
                finish(&self.file, p, self.step - p)?;
            }
            self.previous = Some(self.step);
            self.step = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Writes back a file already written (a snapshot received from the leader) in steps, each
/// waited for, then fsyncs it: its pages reach the disk a step at a time instead of in one
/// burst at the fsync.
pub fn sync_paced(f: &File) -> io::Result<()> {
    let len = f.metadata()?.len();
    let mut off = 0;
    while off < len {
        let n = STEP.min(len - off);
        finish(f, off, n)?;
        off += n;
    }
    f.sync_all()
}

/// Runs `work` on a new thread at background priority (named `name`) and waits for its
/// result without holding a runtime thread.
pub async fn run<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            lower_this_thread();
            let _ = tx.send(work());
        })?;
    rx.await
        .map_err(|_| io::Error::other(format!("the {name} thread ended without a result")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a paced file writes is what was given, whatever the sizes of the writes.
    #[test]
    fn a_paced_file_writes_everything_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut w = io::BufWriter::new(PacedFile::new(File::create(&path).unwrap()));
        let mut want = Vec::new();
        for i in 0..3000u32 {
            let chunk = vec![(i % 251) as u8; (i as usize * 37) % 5000 + 1];
            w.write_all(&chunk).unwrap();
            want.extend_from_slice(&chunk);
        }
        let f = w
            .into_inner()
            .map_err(|e| e.into_error())
            .unwrap()
            .into_inner();
        sync_paced(&f).unwrap();
        assert!(want.len() as u64 > 3 * STEP);
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }

    /// The thread runs at nice 19 and returns the work's result.
    #[tokio::test]
    async fn background_work_runs_at_the_lowest_priority() {
        let nice = run("xce-test-bg", || {
            // SAFETY: getpriority(2) of this thread (errno-free for a valid id).
            let tid = unsafe { libc::syscall(libc::SYS_gettid) };
            unsafe { libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t) }
        })
        .await
        .unwrap();
        assert_eq!(nice, NICE_LOWEST);
    }
}
