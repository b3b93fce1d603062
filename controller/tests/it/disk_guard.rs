//! C24 (issue 36): the disk is visible and guarded. Every node's data directory is a 64 MiB
//! tmpfs (the test command runs as root; a test that cannot mount fails), so the defaults sized
//! from the filesystem are small: a quota of half of it (32 MiB) and a floor of 32 MiB free.
//! Big jobs are submitted through the library until the primary refuses: the refusal is
//! `E_XCE_NOSPACE` at once (not retried), with the primary's reason, *before* the disk is full
//! (no storage fault, no node exits, free space left); reads and kills go on; the alarm shows
//! in the metrics, in `status` and in the log. Then a standby's disk is filled below the floor
//! while it is down: started again, it exits 74 at once saying why (before: it came back
//! healthy and faulted again under load).

use std::time::{Duration, Instant};

use crate::common::*;
use xce_proto::wire::{JobAction, JobFilter, JobSpec};

/// A job of about `bytes` (its command).
fn big(bytes: usize) -> JobSpec {
    JobSpec {
        name: "big".into(),
        user: "alice".into(),
        command: "x".repeat(bytes),
        ncpus: 1,
        ..Default::default()
    }
}

#[test]
fn past_the_quota_new_work_is_refused_before_the_disk_fills_and_a_full_disk_stops_a_start() {
    let mut ctrl = prepared(3, &["--metrics", "127.0.0.1:0"]);
    let disks: Vec<Tmpfs> = (1..=3)
        .map(|i| Tmpfs::mount(&ctrl.data_dir().join(format!("data-{i}")), "64m"))
        .collect();
    ctrl.start_all();
    let p = ctrl.expect_settled(STARTUP);
    let masters = ctrl.masters();
    let c = lib_client(&masters);

    // Submit 256 KiB jobs until refused.
    let t0 = Instant::now();
    let mut acked = Vec::new();
    let refusal = loop {
        let t = Instant::now();
        match c.jobsubmit(big(256 << 10)) {
            Ok(id) => acked.push(id),
            Err(e) => break (e, t.elapsed()),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120) && acked.len() < 1000,
            "never refused: {} jobs\n{}",
            acked.len(),
            ctrl.all_logs()
        );
    };
    let (err, took) = refusal;
    eprintln!(
        "{} jobs acknowledged, then {err:?} in {took:?}; free on the primary's disk: {} bytes",
        acked.len(),
        disks[(p - 1) as usize].free()
    );
    assert_eq!(err, xce::Error::NoSpace, "{:?}", c.last_error());
    // Terminal for the call: not retried through a budget.
    assert!(took < Duration::from_secs(2), "{took:?}");
    let report = c.last_error().unwrap();
    assert!(report.detail.contains("NOSPACE"), "{report}");
    // Before ENOSPC: nobody faulted, everybody runs, the primary's disk has room left.
    assert!(
        !ctrl.all_logs().contains("storage fault"),
        "{}",
        ctrl.all_logs()
    );
    assert_eq!(ctrl.running(), vec![1, 2, 3]);
    assert!(disks[(p - 1) as usize].free() > 8 << 20);

    // Reads go on, and so do kills.
    let listed = c.joblist_all(JobFilter::default()).unwrap();
    assert_eq!(listed.len(), acked.len());
    c.jobctrl(acked[0], JobAction::Kill).unwrap();

    // The alarm: metric, status, log.
    let p_now = ctrl.expect_primary(STARTUP);
    assert_eq!(ctrl.metric(p_now, "xce_nospace_alarm"), Some(1.0));
    assert!(ctrl.metric(p_now, "xce_db_size_bytes").unwrap() > (16 << 20) as f64);
    let (code, out, _) = run_cli(&["status", "--masters", &masters], Duration::from_secs(30));
    eprintln!("{out}");
    assert_eq!(code, Some(1), "degraded: {out}");
    assert!(out.contains("ALARMS:") && out.contains("NOSPACE"), "{out}");
    assert!(ctrl.logged(p_now, "NOSPACE: "), "{}", ctrl.log(p_now));
    c.close();

    // A standby stopped, its disk filled below the floor, started again: exit 74 at once.
    let s = (1..=3).find(|&i| i != p_now).unwrap();
    ctrl.kill(s);
    let disk = &disks[(s - 1) as usize];
    let fill = disk.free().saturating_sub(8 << 20);
    std::fs::write(disk.0.join("filler"), vec![0u8; fill as usize]).unwrap();
    let before = ctrl.log(s).len();
    let t = Instant::now();
    ctrl.start_node(s);
    let st = ctrl.wait_exit(s, Duration::from_secs(10));
    let took = t.elapsed();
    let log = ctrl.log(s)[before..].to_string();
    eprintln!("restart on a full disk: {st:?} in {took:?}: {log}");
    assert_eq!(st.and_then(|s| s.code()), Some(74), "{log}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(
        log.contains("disk full") && log.contains("below the floor"),
        "{log}"
    );
}
