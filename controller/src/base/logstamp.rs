//! Every line a node writes to stderr carries the wall-clock time (UTC, milliseconds) and the
//! node's label (`2026-12-01T05:12:33.123Z node 2: …`), wherever in the controller it was
//! written: stderr is a pipe read by one thread that stamps each line when it arrives and
//! writes it to the original stderr. Lines that do not start with the label (a storage error, a
//! panic) get it, so interleaved nodes of `cluster` stay apart.
//!
//! Limit: a line still in the pipe when the process is killed with SIGKILL is lost (the
//! forwarding thread takes each line as soon as it is written; a normal stop drains the pipe,
//! and a panic is written straight to the original stderr).
//!
//! Syscalls (documented here, the only ones): pipe2, fcntl(F_DUPFD_CLOEXEC), dup2, close.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::sync::OnceLock;
use std::thread::JoinHandle;

/// The original stderr, for the forwarder and the panic hook.
static ORIG: OnceLock<RawFd> = OnceLock::new();

/// Longest line forwarded as one; a longer one is split (each part stamped).
const MAX_LINE: usize = 64 * 1024;

/// Stamps stderr until [`Stamper::finish`].
pub struct Stamper {
    orig: RawFd,
    thread: Option<JoinHandle<()>>,
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` of unix milliseconds (proleptic Gregorian, UTC).
pub fn utc(ms: i64) -> String {
    let (secs, milli) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// `line` as written: stamped, labelled unless it already starts with `label`.
fn stamped(label: &str, line: &str) -> String {
    let now = utc(crate::base::clock::now_ms());
    if line.starts_with(label) {
        format!("{now} {line}\n")
    } else {
        format!("{now} {label} {line}\n")
    }
}

fn write_orig(text: &str) {
    if let Some(&fd) = ORIG.get() {
        // SAFETY: `fd` stays open for the life of the process (never closed by us); the File
        // is not dropped (ManuallyDrop), so it does not close it either.
        let mut f = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(fd) });
        let _ = f.write_all(text.as_bytes());
    }
}

/// Routes stderr through the stamping thread; `label` is e.g. `node 2:`. `None` (stderr left
/// as it is, said once) if a syscall fails.
pub fn install(label: &str) -> Option<Stamper> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 with a valid 2-int array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        eprintln!("{label} log lines unstamped: pipe2 failed");
        return None;
    }
    let (r, w) = (fds[0], fds[1]);
    // SAFETY: plain fd syscalls on descriptors we own (2 is stderr).
    let orig = unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) };
    // SAFETY: as above.
    if orig < 0 || unsafe { libc::dup2(w, 2) } < 0 {
        // SAFETY: closing the pipe we just made (and the dup, if made).
        unsafe {
            libc::close(r);
            libc::close(w);
            if orig >= 0 {
                libc::close(orig);
            }
        }
        eprintln!("{label} log lines unstamped: dup failed");
        return None;
    }
    // SAFETY: fd 2 now holds the write end; our own copy goes.
    unsafe { libc::close(w) };
    let _ = ORIG.set(orig);
    let label = label.to_string();
    let hook_label = label.clone();
    std::panic::set_hook(Box::new(move |info| {
        let bt = std::backtrace::Backtrace::capture();
        let mut text = stamped(&hook_label, &format!("panic: {info}"));
        if bt.status() == std::backtrace::BacktraceStatus::Captured {
            text.push_str(&format!("{bt}\n"));
        }
        write_orig(&text);
    }));
    let thread = std::thread::Builder::new()
        .name("log-stamp".into())
        .spawn(move || {
            // SAFETY: `r` is the pipe's read end, owned by this thread from here on.
            let mut rd = BufReader::new(unsafe { File::from_raw_fd(r) });
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match std::io::Read::take(&mut rd, MAX_LINE as u64).read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf);
                        write_orig(&stamped(&label, line.trim_end_matches('\n')));
                    }
                }
            }
        })
        .ok()?;
    Some(Stamper {
        orig,
        thread: Some(thread),
    })
}

impl Stamper {
    /// Puts the original stderr back and waits until every line written so far is out.
    pub fn finish(mut self) {
        // SAFETY: dup2 of our saved copy onto 2 closes the pipe's last write end.
        unsafe { libc::dup2(self.orig, 2) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(utc(1_796_101_423_730), "2026-12-01T05:03:43.730Z");
        assert_eq!(stamped("node 2:", "node 2: x").len(), 24 + 1 + 9 + 1);
        assert!(stamped("node 2:", "storage error").ends_with(" node 2: storage error\n"));
    }
}
