//! S11 network faults, in network namespaces made by the test: a blackholed primary (no RST),
//! a primary cut off from its peers but reachable by clients, a standby silent to clients then
//! the primary blackholed; concurrent writers and readers through `xce::client::Client`; every
//! history checked for linearizability, every acknowledged write listed exactly once at the
//! end. One short round per fault; `XCE_LONG=1`: five 5-second rounds each. Skipped, with the
//! reason, where namespaces cannot be made (not root, no `ip`) — but a failure as root or
//! with `XCE_REQUIRE_NETNS` set. Timing is printed, never
//! asserted: the P9 table (`xce-netfaults`) is where speed is shown.

use std::time::Duration;

use xce_proof::netfaults::{self, describe, Plan, Scenario};
use xce_proof::netns::{self, NetCluster};

fn long() -> bool {
    std::env::var_os("XCE_LONG").is_some_and(|v| v != "0")
}

/// Why this test cannot run here, printed; `None`: it can. As root (the README's test command
/// runs as root) or with `XCE_REQUIRE_NETNS` set, not being able to run is a failure: a test
/// that passes by skipping shows nothing.
fn skip() -> Option<String> {
    let why = netns::unavailable()?;
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if root || std::env::var_os("XCE_REQUIRE_NETNS").is_some() {
        panic!("S11 cannot run here although it must (root or XCE_REQUIRE_NETNS): {why}");
    }
    eprintln!("S11 SKIPPED: {why}");
    Some(why)
}

fn quiet_library() {
    if std::env::var_os("XCE_LOG").is_none() {
        xce::failover::log::set_level(xce::failover::log::Level::Error);
    }
}

fn scenario(s: Scenario) {
    if skip().is_some() {
        return;
    }
    quiet_library();
    let (rounds, fault_for) = if long() {
        (5, Duration::from_secs(5))
    } else {
        (1, Duration::from_secs(2))
    };
    let log_dir = std::env::temp_dir().join(format!("xce-s11-logs-{}", std::process::id()));
    let plan = Plan {
        fault_for,
        log_dir: Some(log_dir.clone()),
        ..Plan::default()
    };
    let results = netfaults::run(&[s], rounds, &plan, |r| eprintln!("S11 {}", describe(r)))
        .unwrap_or_else(|e| {
            panic!(
                "S11 {}: {e} (controller logs in {})",
                s.name(),
                log_dir.display()
            )
        });
    eprintln!("{}", netfaults::table(&results, &plan));
    for r in &results {
        assert!(
            r.correct(),
            "S11 {}: {} (controller logs in {})",
            s.name(),
            describe(r),
            log_dir.display()
        );
        assert!(
            r.recovered(),
            "S11 {}: a client thread was not served again after the heal: {}",
            s.name(),
            describe(r)
        );
        assert!(r.writes_acked > 0 && r.reads > 0, "{}", describe(r));
    }
    let _ = std::fs::remove_dir_all(&log_dir);
}

#[test]
fn s11_blackholed_primary() {
    scenario(Scenario::BlackholedPrimary);
}

#[test]
fn s11_primary_cut_off_from_its_peers() {
    scenario(Scenario::IsolatedPrimary);
}

#[test]
fn s11_silent_standby_then_blackholed_primary() {
    scenario(Scenario::SilentStandbyThenBlackhole);
}

/// The harness leaves nothing behind: a cluster dropped by a panicking thread removes its
/// namespaces, and what a killed run left (names of a dead pid) is removed by the next lab.
#[test]
fn namespaces_are_cleaned_up_after_a_panic_and_after_a_killed_run() {
    if skip().is_some() {
        return;
    }
    let listed = |prefix: &str| {
        let out = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .expect("ip netns list");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.starts_with(prefix))
    };
    let tag = std::thread::spawn(|| {
        let c = NetCluster::start(3, &[], None).expect("cluster");
        let tag = format!("{}-", c.tag());
        assert!(std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains(&tag))
            .unwrap_or(false));
        std::panic::panic_any(tag);
    })
    .join()
    .expect_err("the thread panics")
    .downcast::<String>()
    .expect("tag");
    assert!(!listed(&tag), "namespaces {tag}* left after a panic");

    // A run that was killed: names of a pid that no longer exists.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let ns = format!("xcenf-{dead}-0-node1");
    netns::ip(&["netns", "add", &ns]).unwrap();
    let bridge = format!("xn{}0C", base36(dead));
    netns::ip(&["link", "add", &bridge, "type", "bridge"]).unwrap();
    netns::clean_stale();
    assert!(!listed(&ns), "stale namespace {ns} not removed");
    let out = std::process::Command::new("ip")
        .args(["link", "show", &bridge])
        .output()
        .unwrap();
    assert!(!out.status.success(), "stale bridge {bridge} not removed");
}

fn base36(mut n: u32) -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut s = Vec::new();
    for _ in 0..5 {
        s.push(digits[(n % 36) as usize]);
        n /= 36;
    }
    s.reverse();
    String::from_utf8(s).unwrap()
}
