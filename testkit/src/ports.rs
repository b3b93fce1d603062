//! Loopback ports for test clusters, chosen below the kernel's ephemeral port range.
//!
//! A port found by binding port 0 comes from the ephemeral range, the one `connect(2)` draws
//! local ports from: between the release of that probe and the node's own bind, any outgoing
//! connection on the machine (the cluster's own raft links, another test's clients) may take
//! it, and the node exits with "Address already in use" (seen in a full test run). Below the
//! range only an explicit bind takes a port, so ports come from there: a random block, each
//! port checked by a bind, never handed out twice by one process.
//!
//! Used by the test kit's cluster runner (`cluster.rs`), which runs the clusters of the proof
//! crate and of the controller's integration tests.

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::sync::Mutex;
use std::time::SystemTime;

/// The lowest port handed out (well above the well-known and registered services tests meet).
const LOWEST: u32 = 10_000;

/// Ports this process has handed out (a test thread's cluster keeps its ports).
static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// The first port of the kernel's ephemeral range (`connect(2)`'s local ports).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

fn random() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let t = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(t ^ std::process::id() as u128);
    h.finish()
}

/// `n` consecutive loopback ports below the ephemeral range, free when checked.
pub fn free_ports(n: usize) -> Vec<u16> {
    let top = ephemeral_start();
    let span = top.saturating_sub(LOWEST + n as u32);
    assert!(
        span > 1000,
        "ephemeral range starts at {top}: no room below it"
    );
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let start = LOWEST + (random() % span as u64) as u32;
        let ports: Vec<u16> = (start..start + n as u32).map(|p| p as u16).collect();
        if ports
            .iter()
            .all(|&p| !given.contains(&p) && TcpListener::bind(("127.0.0.1", p)).is_ok())
        {
            given.extend(&ports);
            return ports;
        }
    }
    panic!("no {n} free loopback ports below {top}");
}
