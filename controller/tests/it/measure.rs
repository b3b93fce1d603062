//! Measurements of the timing defaults (ignored by default; run them on a release build):
//!
//! ```text
//! cargo test --release -p xce-controller --test measure -- --ignored --nocapture --test-threads 1
//! ```
//! - `failover_kill9`: time from `kill -9` of the primary to a new primary serving a write,
//!   over `XCE_MEASURE_KILLS` kills (default 20): median, p90, max.
//! - `idle_elections_under_cpu_load`: term changes in an idle 3-node cluster while two busy
//!   processes (`yes > /dev/null`) keep both cores full, for `XCE_MEASURE_SECS` (default 180).
//!
//! `XCE_MEASURE_ARGS` passes other timing knobs to every node, e.g.
//! `--heartbeat-ms 50 --election-min-ms 300 --election-max-ms 600`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use xce_proto::error::E_XCE_STANDBY;
use xce_proto::wire::Op;

fn xce_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn knobs() -> Vec<String> {
    std::env::var("XCE_MEASURE_ARGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// Writes through whichever of `ids` is primary; returns when one write succeeded.
fn write_somewhere(ctrl: &Cluster, ids: &[u32], job_id: u64, deadline: Instant) -> u32 {
    loop {
        for &id in ids {
            let Some(mut c) = WireClient::try_connect(&ctrl.addr(id), Duration::from_millis(200))
            else {
                continue;
            };
            c.set_timeout(Duration::from_secs(2));
            if let Ok(r) = c.try_call(submit(job_id, "bench", "")) {
                if r.status == 0 {
                    return id;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no primary accepted a write\n{}",
            ctrl.all_logs()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
#[ignore = "measurement; run on a release build"]
fn failover_kill9() {
    let kills = env_num("XCE_MEASURE_KILLS", 20);
    let extra = knobs();
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut ctrl = cluster(3, &extra);
    let mut samples = Vec::new();
    let mut job_id = 1;
    for round in 0..kills {
        let p = ctrl.expect_settled(STARTUP);
        // Steady state: the node restarted last round has caught up before the next kill.
        std::thread::sleep(Duration::from_millis(1500));
        let rest: Vec<u32> = [1, 2, 3].into_iter().filter(|&i| i != p).collect();
        let t0 = Instant::now();
        ctrl.kill(p);
        let q = write_somewhere(&ctrl, &rest, job_id, t0 + Duration::from_secs(30));
        let took = t0.elapsed();
        job_id += 1;
        let ms = xce_now_ms();
        eprintln!(
            "kill {round}: primary {p} killed at {}.{:03}, node {q} served a write after {took:?}",
            (ms - took.as_millis() as i64) / 1000,
            (ms - took.as_millis() as i64) % 1000
        );
        samples.push(took);
        ctrl.start_node(p);
    }
    if std::env::var("XCE_MEASURE_LOGS").is_ok() {
        eprintln!("{}", ctrl.all_logs());
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = ms(samples[samples.len() / 2]);
    let p90 = ms(samples[samples.len() * 9 / 10]);
    let max = ms(*samples.last().unwrap());
    let min = ms(samples[0]);
    println!(
        "MEASURE failover_kill9 knobs={:?} kills={kills} min={min:.0}ms median={median:.0}ms p90={p90:.0}ms max={max:.0}ms",
        knobs()
    );
    // Every acknowledged write is still there.
    let p = ctrl.expect_settled(STARTUP);
    assert_eq!(listed_on(&ctrl, p).len() as u64, job_id - 1);
}

/// Busy processes, killed on drop.
struct Load(Vec<Child>);

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
#[ignore = "measurement; run on a release build"]
fn idle_elections_under_cpu_load() {
    let secs = env_num("XCE_MEASURE_SECS", 180);
    let extra = knobs();
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let ctrl = cluster(3, &extra);
    let p = ctrl.expect_settled(STARTUP);
    let term0 = info(&ctrl.client(p).call(hello())).term;
    let candidates0: usize = [1, 2, 3]
        .iter()
        .map(|&i| ctrl.log(i).matches("role=candidate").count())
        .sum();

    let load = Load(
        (0..2)
            .map(|_| {
                Command::new("yes")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    let start = Instant::now();
    // Idle cluster: only a hello now and then to watch it, like a monitoring tool.
    while start.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs(5));
    }
    drop(load);

    let p2 = ctrl.expect_settled(STARTUP);
    let term1 = info(&ctrl.client(p2).call(hello())).term;
    let candidates1: usize = [1, 2, 3]
        .iter()
        .map(|&i| ctrl.log(i).matches("role=candidate").count())
        .sum();
    let r = ctrl.client(p2 % 3 + 1).call(Op::ResList);
    assert_eq!(r.status, -E_XCE_STANDBY);
    println!(
        "MEASURE idle_elections knobs={:?} secs={secs} load=2x yes term {term0}->{term1} ({} term changes), \
         candidate transitions {}, primary {p}->{p2}",
        knobs(),
        term1 - term0,
        candidates1 - candidates0
    );
}
