//! `xce-controller cluster` (C7): starts the nodes, prints them and the primary, stops them
//! all on SIGTERM.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;

/// The launcher, killed (with its nodes' process group left to its own SIGTERM handling) on drop.
struct Launcher(Child, Vec<i32>);

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        for &pid in &self.1 {
            // SAFETY: kill(2) on node processes this test saw started; harmless if gone.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A base port with `n` free client ports and their raft ports (+1000).
fn free_base(n: u16) -> u16 {
    for _ in 0..200 {
        let base = 20000 + (rand_u64() % 20000) as u16;
        let ok = (0..n).all(|i| {
            TcpListener::bind(("127.0.0.1", base + i)).is_ok()
                && TcpListener::bind(("127.0.0.1", base + i + 1000)).is_ok()
        });
        if ok {
            return base;
        }
    }
    panic!("no free port range");
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn cluster_starts_reports_primary_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let base = free_base(3);
    let mut child = Command::new(BIN)
        .args([
            "cluster",
            "--nodes",
            "3",
            "--base-port",
            &base.to_string(),
            "--data",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut launcher = Launcher(child, Vec::new());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });

    let deadline = Instant::now() + STARTUP;
    let mut pids = Vec::new();
    let primary = loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("cluster output");
        if let Some(rest) = line.strip_prefix("node ") {
            let pid: i32 = rest.split("pid=").nth(1).unwrap().parse().unwrap();
            assert!(
                rest.contains(&format!("client=127.0.0.1:{}", base + pids.len() as u16)),
                "{line}"
            );
            pids.push(pid);
            launcher.1.push(pid);
        } else if let Some(rest) = line.strip_prefix("primary ") {
            break rest
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
    };
    assert_eq!(pids.len(), 3);
    for i in 1..=3 {
        assert!(dir.path().join(format!("node-{i}.pid")).exists());
    }
    // The reported primary really is it.
    let mut c = Client::connect(&format!("127.0.0.1:{}", base + primary as u16 - 1));
    assert_eq!(c.call(hello()).status, 0);

    // SAFETY: SIGTERM to the launcher we spawned.
    unsafe { libc::kill(launcher.0.id() as i32, libc::SIGTERM) };
    let stop_deadline = Instant::now() + Duration::from_secs(15);
    while launcher.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < stop_deadline, "launcher did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(launcher.0.try_wait().unwrap().unwrap().success());
    for &pid in &pids {
        assert!(!alive(pid), "node pid {pid} still running");
    }
    for i in 1..=3 {
        assert!(!dir.path().join(format!("node-{i}.pid")).exists());
    }
}
