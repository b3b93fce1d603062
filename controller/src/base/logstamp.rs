//! Every line a node writes to stderr carries the wall-clock time (UTC, milliseconds) and the
//! node's label (`2026-12-01T05:12:33.123Z node 2: …`), wherever in the controller it was
//! written: stderr is a pipe read by one thread that stamps each line when it arrives and
//! writes it to the original stderr. Lines that do not start with the label (a storage error, a
//! panic) get it, so interleaved nodes of `cluster` stay apart.
//!
//! Limit: a line still in the pipe when the process is killed with SIGKILL is lost (the
//! forwarding thread takes each line as soon as it is written; a normal stop drains the pipe,
//! and a panic's report is out before the process ends).
//!
//! Levels and formats (issue 26): a line may start with a level mark ([`mark`], written by
//! [`crate::log_warn!`] and its siblings); a line without one is `info`. Lines below
//! `--log-level` are dropped here; `--log-format json` writes each line as one JSON object with
//! stable field names — `ts` (the UTC stamp), `level` (`error`, `warn`, `info`, `debug`),
//! `source` (the label without its colon, e.g. `node 2`), `msg` (the text after the label);
//! `--log-file PATH` appends to a file instead of stderr (under systemd, stderr is the journal:
//! `journalctl -u xce-controller`, `-o json` for its own fields).
//!
//! A panic's report (C21, `base/crash.rs`) goes through the stamper too, behind the lines
//! before it, and the process ends once it is out ([`write_last`]).
//!
//! Syscalls (documented here, the only ones): pipe2, fcntl(F_DUPFD_CLOEXEC), dup2, close,
//! and poll and write for last words.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The original stderr, for the forwarder and the panic hook.
static ORIG: OnceLock<RawFd> = OnceLock::new();

/// Issue 36: SIGHUP asked for the log file to be opened again (a rotation moved it away).
static REOPEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// SIGHUP (daemons' convention, what logrotate's `postrotate` sends): the `--log-file` is
/// opened again by path before the next line, so a rotated file is let go and a new one made.
/// The line that says so is the new file's first.
pub fn reopen() {
    REOPEN.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Opens `--log-file` for appending (`None`, said once on stderr, when it cannot be).
fn open_log(label: &str, p: &std::path::Path) -> Option<File> {
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
    {
        Ok(f) => Some(f),
        Err(e) => {
            write_orig(&stamped(
                label,
                &format!("--log-file {}: {e}: logging to stderr", p.display()),
            ));
            None
        }
    }
}

/// The stamping thread's name.
pub const THREAD: &str = "log-stamp";

/// The stamper's label and options, for last words written past it (see [`write_last`]).
static SINK: OnceLock<(String, LogOpts)> = OnceLock::new();
/// The stamping thread runs and fd 2 is its pipe.
static STAMPING: AtomicBool = AtomicBool::new(false);
/// The mark of a line of last words (an error), and the line that follows them.
const LAST_MARK: &str = "\u{1}X";
const LAST_END: &str = "\u{1}.";
/// Last words: the stamper took their first line (`.0`), and wrote them all out (`.1`).
static LAST: (Mutex<(bool, bool)>, Condvar) = (Mutex::new((false, false)), Condvar::new());
/// How long last words wait for the stamper before they are written past it.
const LAST_WAIT: Duration = Duration::from_millis(500);

/// In the stamper: notes last words going by; true for the line that ends them (not written).
fn last_words(line: &str) -> bool {
    let end = line == LAST_END;
    if end || line.starts_with(LAST_MARK) {
        let mut st = LAST.0.lock().unwrap_or_else(|p| p.into_inner());
        st.0 = true;
        st.1 |= end;
        LAST.1.notify_all();
    }
    end
}

/// C21 (issue 39): a node's last words (a panic's report), written so that they and every
/// line before them are out when this returns (within [`LAST_WAIT`]): through the stamper,
/// behind the lines already in its pipe, in the log's format and place; written straight to
/// that place instead when the stamper cannot take them (`on_stamper`: it is the thread that
/// ends, or it is not running, or it did not start on them in time).
pub fn write_last(text: &str, on_stamper: bool) {
    let deadline = Instant::now() + LAST_WAIT;
    if !on_stamper && STAMPING.load(std::sync::atomic::Ordering::SeqCst) {
        let mut marked: String = text.lines().map(|l| format!("{LAST_MARK}{l}\n")).collect();
        marked.push_str(LAST_END);
        marked.push('\n');
        let sent = write_fd_until(2, marked.as_bytes(), deadline);
        let mut st = LAST.0.lock().unwrap_or_else(|p| p.into_inner());
        while sent && !st.1 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = LAST
                .1
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        if st.0 {
            // Out, or on their way (never written twice).
            return;
        }
    }
    let out: String = match SINK.get() {
        Some((label, opts)) => text
            .lines()
            .filter_map(|l| render(label, &format!("{LAST_MARK}{l}"), opts))
            .collect(),
        None => format!("{text}\n"),
    };
    match SINK
        .get()
        .and_then(|(l, o)| o.file.as_ref().map(|p| (l, p)))
    {
        Some((label, path)) => {
            if let Some(mut f) = open_log(label, path) {
                let _ = f.write_all(out.as_bytes());
            }
        }
        None if ORIG.get().is_some() => write_orig(&out),
        None => {
            write_fd_until(2, out.as_bytes(), deadline);
        }
    }
}

/// Writes all of `bytes` to `fd` unless `deadline` passes first (a pipe nobody reads).
fn write_fd_until(fd: RawFd, mut bytes: &[u8], deadline: Instant) -> bool {
    while !bytes.is_empty() {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_millis();
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: poll(2) on one pollfd we own.
        if left == 0 || unsafe { libc::poll(&mut p, 1, left.min(1000) as libc::c_int) } <= 0 {
            return false;
        }
        // SAFETY: write(2) from a live slice of `bytes.len()` bytes.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

/// Longest line forwarded as one; a longer one is split (each part stamped).
const MAX_LINE: usize = 64 * 1024;

/// A log line's level, most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Level {
    Error,
    Warn,
    #[default]
    Info,
    Debug,
}

impl Level {
    pub fn parse(v: &str) -> Result<Level, String> {
        Ok(match v {
            "error" => Level::Error,
            "warn" | "warning" => Level::Warn,
            "info" => Level::Info,
            "debug" => Level::Debug,
            _ => {
                return Err(format!(
                    "--log-level: error, warn, info or debug, not {v:?}"
                ))
            }
        })
    }

    pub fn word(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

/// The mark a line of `level` starts with (stripped by the stamper): a control character and
/// the level's initial, which no text of ours starts with.
pub fn mark(level: Level) -> &'static str {
    match level {
        Level::Error => "\u{1}E",
        Level::Warn => "\u{1}W",
        Level::Info => "\u{1}I",
        Level::Debug => "\u{1}D",
    }
}

/// A line's level and its text without the mark (no mark: `info`, or `warn` for a text that
/// says `warning:`).
pub fn level_of(line: &str) -> (Level, &str) {
    if let Some(rest) = line.strip_prefix('\u{1}') {
        let lvl = match rest.as_bytes().first() {
            Some(b'E') => Level::Error,
            Some(b'W') => Level::Warn,
            Some(b'D') => Level::Debug,
            Some(b'X') => Level::Error,
            _ => Level::Info,
        };
        return (lvl, rest.get(1..).unwrap_or(""));
    }
    let lvl = if line.contains(": warning: ") || line.starts_with("warning: ") {
        Level::Warn
    } else {
        Level::Info
    };
    (lvl, line)
}

/// How a node writes its lines (`--log-level`, `--log-format`, `--log-file`).
#[derive(Debug, Clone, Default)]
pub struct LogOpts {
    pub level: Level,
    pub json: bool,
    pub file: Option<std::path::PathBuf>,
}

/// Writes a line at a level through the stamper (`log_warn!("node {id}: …")`).
#[macro_export]
macro_rules! log_at {
    ($lvl:expr, $($arg:tt)*) => {
        eprintln!("{}{}", $crate::base::logstamp::mark($lvl), format_args!($($arg)*))
    };
}
#[macro_export]
macro_rules! log_error { ($($arg:tt)*) => { $crate::log_at!($crate::base::logstamp::Level::Error, $($arg)*) }; }
#[macro_export]
macro_rules! log_warn { ($($arg:tt)*) => { $crate::log_at!($crate::base::logstamp::Level::Warn, $($arg)*) }; }
#[macro_export]
macro_rules! log_info { ($($arg:tt)*) => { $crate::log_at!($crate::base::logstamp::Level::Info, $($arg)*) }; }
#[macro_export]
macro_rules! log_debug { ($($arg:tt)*) => { $crate::log_at!($crate::base::logstamp::Level::Debug, $($arg)*) }; }

/// The line as written out: `None` when below `opts.level`; text (`TIME node 2: text`, the
/// level's word before the label unless `info`: `TIME WARN node 2: text`) or one JSON object.
pub fn render(label: &str, line: &str, opts: &LogOpts) -> Option<String> {
    let (lvl, text) = level_of(line);
    if lvl > opts.level {
        return None;
    }
    let text = text.strip_prefix(label).map_or(text, str::trim_start);
    let now = utc(crate::base::clock::now_ms());
    if opts.json {
        let v = serde_json::json!({
            "ts": now,
            "level": lvl.word(),
            "source": label.trim_end_matches(':'),
            "msg": text,
        });
        return Some(format!("{v}\n"));
    }
    Some(match lvl {
        Level::Info => format!("{now} {label} {text}\n"),
        // The level before the label: `node N: text` reads the same at every level.
        l => format!("{now} {} {label} {text}\n", l.word().to_uppercase()),
    })
}

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

/// Routes stderr through the stamping thread with a level, a format and maybe a file
/// (`--log-file`, appended to; stderr if it cannot be opened, said once).
pub fn install_with(label: &str, opts: LogOpts) -> Option<Stamper> {
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
    let _ = SINK.set((label.clone(), opts.clone()));
    let thread = std::thread::Builder::new()
        .name(THREAD.into())
        .spawn(move || {
            STAMPING.store(true, std::sync::atomic::Ordering::SeqCst);
            let mut file = opts.file.as_ref().and_then(|p| open_log(&label, p));
            // SAFETY: `r` is the pipe's read end, owned by this thread from here on.
            let mut rd = BufReader::new(unsafe { File::from_raw_fd(r) });
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match std::io::Read::take(&mut rd, MAX_LINE as u64).read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if REOPEN.swap(false, std::sync::atomic::Ordering::SeqCst) {
                            if let Some(p) = &opts.file {
                                file = open_log(&label, p);
                            }
                        }
                        let line = String::from_utf8_lossy(&buf);
                        if last_words(line.trim_end_matches('\n')) {
                            continue;
                        }
                        if let Some(out) = render(&label, line.trim_end_matches('\n'), &opts) {
                            match &mut file {
                                Some(f) => {
                                    let _ = f.write_all(out.as_bytes());
                                }
                                None => write_orig(&out),
                            }
                        }
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
        STAMPING.store(false, std::sync::atomic::Ordering::SeqCst);
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

    /// Issue 26: levels filter, the text format keeps info lines as before, JSON lines parse
    /// with their stable fields.
    #[test]
    fn levels_and_formats() {
        let text = LogOpts::default();
        let warn = format!("{}node 2: disk slow", mark(Level::Warn));
        let debug = format!("{}node 2: detail", mark(Level::Debug));
        assert!(render("node 2:", "node 2: role=primary", &text)
            .unwrap()
            .ends_with("Z node 2: role=primary\n"));
        assert!(render("node 2:", &warn, &text)
            .unwrap()
            .ends_with("Z WARN node 2: disk slow\n"));
        assert_eq!(render("node 2:", &debug, &text), None);
        let errors_only = LogOpts {
            level: Level::Error,
            ..LogOpts::default()
        };
        assert_eq!(render("node 2:", &warn, &errors_only), None);
        assert_eq!(level_of("node 2: warning: the raft port").0, Level::Warn);
        let json = LogOpts {
            json: true,
            level: Level::Debug,
            ..LogOpts::default()
        };
        let line = render("node 2:", &debug, &json).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["level"], "debug");
        assert_eq!(v["source"], "node 2");
        assert_eq!(v["msg"], "detail");
        assert!(v["ts"].as_str().unwrap().ends_with('Z'));
        assert_eq!(Level::parse("warn"), Ok(Level::Warn));
        assert!(Level::parse("loud").is_err());
    }
}
