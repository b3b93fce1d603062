//! Helpers shared by the library's integration tests (each test file that needs them says
//! `mod common;`).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use xce::client::{Config, Endpoint, TlsFiles};
use xce_proto::wire::{Notify, NotifyKind};

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
