//! C21: a failed or full disk stops the node — it serves and votes no more, says why, and
//! exits with status 74 within seconds, so a supervisor (`Restart=on-failure`) sees it — and
//! nothing acknowledged is lost: the others fail over as for a crash. Before, the node logged
//! "raft stopped: … No space left on device" and kept running, answering "initializing" for
//! ever (issue 25, defect 6).
//!
//! The full disk is a real one: a small tmpfs the test mounts over the primary's data
//! directory (the test command runs as root; a test that cannot mount fails). The failing
//! fsyncs are failpoints (`log-append`, `vote-save`: `return(EIO)`).

use std::time::{Duration, Instant};

use crate::common::*;

/// The exit status of a node stopped by a storage fault (`base/fault.rs`).
const EXIT_STORAGE_FAULT: i32 = 74;
/// Bound from the fault to the node's exit.
const EXIT_BOUND: Duration = Duration::from_secs(10);

/// Every job in `acked` is listed by primary `p` exactly once.
fn all_listed_once(ctrl: &Cluster, p: u32, acked: &[u64]) {
    let list = listed_on(ctrl, p);
    for id in acked {
        let n = list.iter().filter(|&&j| j == *id).count();
        assert_eq!(
            n,
            1,
            "acknowledged job {id} listed {n} times by primary {p}\n{}",
            ctrl.all_logs()
        );
    }
}

/// Waits for node `id` to exit by itself; asserts status 74 and the log line naming `what`.
fn exits_for_its_storage(ctrl: &mut Cluster, id: u32, what: &str) {
    let log = exits_with(ctrl, id, EXIT_STORAGE_FAULT, EXIT_BOUND);
    assert!(
        log.contains("storage fault: ") && log.contains(what),
        "node {id} did not say why ({what})\n{log}"
    );
}

#[test]
fn a_primary_whose_disk_fills_exits_and_nothing_acknowledged_is_lost() {
    // C21's own path, past C24's guard (a quota and a floor would refuse the writes first,
    // `disk_guard.rs`): what a node does once the disk is full after all.
    let mut ctrl = prepared(
        3,
        &[
            "--metrics",
            "127.0.0.1:0",
            "--quota-bytes",
            "1T",
            "--disk-floor-bytes",
            "0",
        ],
    );
    let small = Tmpfs::mount(&ctrl.data_dir().join("data-1"), "16m");
    ctrl.start_all();
    // Node 1 (the small disk) must lead: a killed primary's successor is the lowest id that
    // campaigns first (C15's rank), so a few rounds make it node 1.
    let mut p = ctrl.expect_settled(STARTUP);
    for _ in 0..6 {
        if p == 1 {
            break;
        }
        ctrl.kill(p);
        ctrl.expect_primary(STARTUP);
        ctrl.start_node(p);
        p = ctrl.expect_settled(STARTUP);
    }
    assert_eq!(p, 1, "node 1 never led\n{}", ctrl.all_logs());

    // Fill the disk but for a little, then write until it is full.
    let filler = small.0.join("filler");
    let leave = 512 << 10;
    let fill = small.free().saturating_sub(leave);
    std::fs::write(&filler, vec![0u8; fill as usize]).unwrap();
    let mut c = ctrl.client(1);
    c.set_timeout(Duration::from_secs(5));
    let mut acked = Vec::new();
    let t0 = Instant::now();
    for id in 1.. {
        match c.try_call(big_job(id, 4096)) {
            Ok(r) if r.status == 0 => acked.push(id),
            _ => break,
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the disk never filled: {} jobs\n{}",
            acked.len(),
            ctrl.all_logs()
        );
    }
    assert!(!acked.is_empty(), "no write before the disk filled");
    exits_for_its_storage(&mut ctrl, 1, "No space left on device");
    // The others fail over as for a crash, with every acknowledged job.
    let q = ctrl.expect_primary_among(&[2, 3], STARTUP);
    all_listed_once(&ctrl, q, &acked);
    eprintln!("{} jobs acknowledged before the disk filled", acked.len());
}

#[test]
fn a_standby_whose_log_append_fails_exits_and_nothing_acknowledged_is_lost() {
    let mut ctrl = cluster(3, &["--metrics", "127.0.0.1:0"]);
    let p = ctrl.expect_settled(STARTUP);
    let f = (1..=3).find(|&i| i != p).unwrap();
    let mut c = ctrl.client(p);
    c.ok(submit(1, "u", ""));
    ctrl.fail_set(f, "log-append", "return(EIO)");
    let mut acked = vec![1];
    for id in 2..=20 {
        c.ok(submit(id, "u", ""));
        acked.push(id);
    }
    exits_for_its_storage(&mut ctrl, f, "log_append");
    all_listed_once(&ctrl, p, &acked);
    // Restarted on its disk, it catches up with what it never acknowledged.
    ctrl.start_node(f);
    c.ok(submit(21, "u", ""));
    acked.push(21);
    ctrl.kill(p);
    let q = ctrl.expect_primary(STARTUP);
    all_listed_once(&ctrl, q, &acked);
}

#[test]
fn a_node_whose_vote_cannot_be_saved_exits_and_nothing_acknowledged_is_lost() {
    let mut ctrl = cluster(3, &["--metrics", "127.0.0.1:0"]);
    let p = ctrl.expect_settled(STARTUP);
    let f = (1..=3).find(|&i| i != p).unwrap();
    let mut c = ctrl.client(p);
    let acked: Vec<u64> = (1..=10).collect();
    for &id in &acked {
        c.ok(submit(id, "u", ""));
    }
    drop(c);
    ctrl.fail_set(f, "vote-save", "return(EIO)");
    // An election: F grants or asks for a vote, and cannot save it.
    ctrl.kill(p);
    exits_for_its_storage(&mut ctrl, f, "vote");
    ctrl.start_node(p);
    let q = ctrl.expect_primary(STARTUP);
    all_listed_once(&ctrl, q, &acked);
}

/// Issue 35, defect 5: a failed save of the cluster id (C20) is a storage fault like any
/// other write's (C21). Before, it was only logged: the node went on without its id on disk.
/// Node 3 starts with the failpoint `cluster-save=return(EIO)`; the cluster records its id
/// once every member answers; node 3 takes it, cannot save it, and exits with status 74.
#[test]
fn a_node_that_cannot_save_its_cluster_id_exits() {
    let mut ctrl = prepared(3, &[]);
    ctrl.start_node(1);
    ctrl.start_node(2);
    ctrl.failpoints_at_start("cluster-save=return(EIO)");
    ctrl.start_node(3);
    exits_for_its_storage(&mut ctrl, 3, "cluster_id");
    let p = ctrl.expect_primary_among(&[1, 2], STARTUP);
    ctrl.client(p).ok(submit(1, "u", ""));
}
