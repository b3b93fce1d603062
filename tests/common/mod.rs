//! Helpers shared by the library's integration tests (each test file that needs them says
//! `mod common;`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use xce::client::log::{self, Level};
use xce::client::{Client, Config, Endpoint, Event, Options, RetryConfig, TlsFiles};
use xce_proto::wire::{
    ControllerEntry, ControllerRole, JobSpec, Join, Notify, NotifyKind, SessionRole,
};
use xce_testkit::fake::{fast_options, spec, FakeController, Step};

/// A config on `masters` over TLS, verifying the controllers with `ca`, presenting `cert` and
/// `key` (either may be missing: half an identity is the caller's to test).
pub fn tls_config(
    masters: Vec<Endpoint>,
    ca: PathBuf,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Config {
    let tls = TlsFiles {
        ca_file: ca,
        cert_file: cert,
        key_file: key,
    };
    Config {
        tls: Some(tls),
        client_name: "t".into(),
        ..Config::new(masters)
    }
}

/// testkit's job spec with this job id.
pub fn spec_id(job_id: u64) -> JobSpec {
    JobSpec { job_id, ..spec() }
}

/// The notification that job `job_id` finished with exit code 0.
pub fn finish(job_id: u64) -> Notify {
    Notify {
        kind: NotifyKind::JobFinish,
        job_id,
        exit_code: 0,
    }
}

/// How a child run by [`run_self`] ended: its status (`None`: killed after the limit), its
/// stdout and stderr.
pub struct ChildRun {
    pub status: Option<ExitStatus>,
    pub out: String,
    pub err: String,
}

/// Runs this test binary again, selecting one test by `args`, with `env` added and `XCE_LOG`
/// removed; kills it if it has not finished within `limit`. Both pipes are drained on threads
/// so a chatty child never blocks on a full pipe.
pub fn run_self(args: &[&str], env: &[(&str, &std::ffi::OsStr)], limit: Duration) -> ChildRun {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(args)
        .env_remove("XCE_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("re-exec the test binary");
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let end = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    ChildRun {
        status,
        out: out.join().unwrap(),
        err: err.join().unwrap(),
    }
}

/// Every file under `dir` (recursively) with one of these extensions.
pub fn files(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if exts.iter().any(|x| p.extension().is_some_and(|e| e == *x)) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Log lines with their levels, as [`captured_log`] keeps them.
pub type LogLines = Arc<Mutex<Vec<(Level, String)>>>;

/// Every log line from now on at `level` and above, with its level. The sink is process-wide:
/// a test finds its own lines by their text.
pub fn captured_log(level: Level) -> LogLines {
    let lines: LogLines = Arc::default();
    let l = lines.clone();
    log::set_level(level);
    log::set_sink(Some(Arc::new(move |lvl, line: &str| {
        l.lock().push((lvl, line.to_string()))
    })));
    lines
}

/// What a daemon's reconnect hook does (F10): join again; the hook's result is the status.
pub fn rejoin(cl: &Client, role: SessionRole) -> i32 {
    let join = Join {
        role,
        host: "w1".into(),
        ncpus: 4,
        mem_mb: 1024,
        attrs: vec![],
    };
    cl.join(join).map_or_else(|e| e.status(), |_| 0)
}

/// Every event `c` reports from now on, in order.
pub fn recorded_events(c: &Client) -> Arc<Mutex<Vec<Event>>> {
    let events = Arc::new(Mutex::new(vec![]));
    let ev = events.clone();
    c.set_event_handler(Some(Arc::new(move |e: &Event| ev.lock().push(e.clone()))));
    events
}

/// `f`'s result and how long it took.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    (f(), t.elapsed())
}

/// `max_retries` retries, waits from `initial_ms` growing by `multiplier` up to `max_ms`.
pub fn retry(max_retries: u32, initial_ms: u32, max_ms: u32, multiplier: f64) -> RetryConfig {
    RetryConfig {
        max_retries,
        initial_retry_ms: initial_ms,
        max_retry_ms: max_ms,
        backoff_multiplier: multiplier,
    }
}

/// Options with waitPrimary on (F18).
pub fn waiting() -> Options {
    Options {
        wait_primary: true,
        ..fast_options()
    }
}

/// The endpoints of these fakes, in order.
pub fn eps(fakes: &[&FakeController]) -> Vec<Endpoint> {
    fakes.iter().map(|f| f.endpoint()).collect()
}

/// `step`, performed `delay` late.
pub fn late(delay: Duration, step: Step) -> Step {
    Step::After(delay, Box::new(step))
}

/// Answers `waitPrimary` naming `primary` after `delay` (an election), every other op with
/// `other`.
pub fn names_after(delay: Duration, primary: Endpoint, other: Step) -> Step {
    Step::Split(
        Box::new(late(delay, Step::Primary(primary))),
        Box::new(other),
    )
}

/// Controllers 1, 2, … at these endpoints, as a `hello` answer lists its members.
pub fn members(at: &[Endpoint]) -> Vec<ControllerEntry> {
    let entry = |(i, e): (usize, &Endpoint)| ControllerEntry {
        id: i as u32 + 1,
        host: e.host.clone(),
        port: e.port,
        role: ControllerRole::Standby,
    };
    at.iter().enumerate().map(entry).collect()
}
