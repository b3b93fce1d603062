//! What TLS session resumption saves a library reconnect (issue 27, the measurement behind
//! C13 amended's choice): the library's `Connection` connecting to one real controller node
//! and sending `nop`, N times with one client configuration (its session cache resumes the
//! node's tickets) and N times with resumption off, interleaved; the connect + `nop` time
//! (median, p90) and the node's CPU time per connection (from /proc, in clock ticks), side by
//! side in one run.
//!
//! The controller no longer issues tickets (a resumed session keeps its first handshake's
//! identity: docs/security.md), so against this build both rows are full handshakes. Run it
//! against a build that issues them to see what they saved:
//! `XCE_CONTROLLER=/path/to/older/release/xce-controller cargo test --release -p xce-proof
//! --test resumption -- --ignored --nocapture`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{pki, tls_flags};
use xce::testing::{Connection, WakeState};
use xce_proof::{Cluster, ClusterOpts};
use xce_proto::wire::{Limits, Op, Request};

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = s[s.rfind(')').unwrap() + 2..].split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
#[ignore = "a measurement: run it by name with --ignored --nocapture (release)"]
fn what_resumption_saves_a_reconnect() {
    let dir = std::env::temp_dir().join(format!("xce-resumption-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pki_dir = dir.join("pki");
    pki(&["local", pki_dir.to_str().unwrap(), "1"]);
    let c = Cluster::start(
        1,
        ClusterOpts {
            extra_args: tls_flags(&pki_dir, false),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(c.wait_listening(Duration::from_secs(20)));
    std::thread::sleep(Duration::from_secs(2));
    let pid = c.node(1).pid().unwrap();
    let port = c.node(1).client.port();
    let on = xce::testing::client_config(
        &pki_dir.join("ca.pem"),
        Some(&pki_dir.join("admin.pem")),
        Some(&pki_dir.join("admin.key")),
    )
    .unwrap();
    let mut off = (*on).clone();
    off.resumption = rustls::client::Resumption::disabled();
    let off = Arc::new(off);
    let ws = WakeState::new();
    let n = 400;
    let mut times = [Vec::new(), Vec::new()];
    let mut ticks = [0u64, 0];
    for i in 0..2 * n {
        let k = i % 2;
        let cfg = if k == 0 { &on } else { &off };
        let c0 = cpu_ticks(pid);
        let t0 = Instant::now();
        let d = Instant::now() + Duration::from_secs(5);
        let mut conn = Connection::connect(
            "127.0.0.1",
            port,
            Some(cfg),
            Limits::default(),
            d,
            &ws.waker_now(),
        )
        .unwrap();
        let req = Request {
            seq: 1,
            client_id: [1; 16],
            request_id: 0,
            no_reply: false,
            op: Op::Nop,
            auth_token: String::new(),
            forward_within_ms: 0,
        };
        conn.send(&req, d, &ws.waker_now()).unwrap();
        assert_eq!(conn.recv(1, d, &ws.waker_now()).unwrap().status, 0);
        times[k].push(t0.elapsed());
        drop(conn);
        ticks[k] += cpu_ticks(pid) - c0;
    }
    // SAFETY: sysconf(3) has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    println!("| client configuration | connect + nop p50 | p90 | node CPU per connection |");
    println!("|---|---|---|---|");
    for (k, name) in [
        (0, "session cache (resumes tickets)"),
        (1, "resumption off"),
    ] {
        let v = &mut times[k];
        v.sort();
        println!(
            "| {name} | {:?} | {:?} | {:.0} µs |",
            v[n / 2],
            v[n * 9 / 10],
            ticks[k] as f64 / hz / n as f64 * 1e6
        );
    }
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}
