//! C24: the log is purged behind snapshots without holding any node back, and a crash while
//! purged segments are being deleted loses nothing. Three real controllers; the failpoint
//! `log-purge` stands for a slow disk (`sleep`) or holds the deletion (`pause`) where it
//! happens — since issue 38 on a thread of its own (`raft/store.rs`'s janitor), before it on
//! the Raft core inside the purge.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;

/// Snapshots every 100 writes (and half a snapshot of log), little kept behind them.
const FLAGS: &[&str] = &[
    "--metrics",
    "127.0.0.1:0",
    "--snapshot-logs",
    "100",
    "--log-keep",
    "20",
];

fn listed(ctrl: &Cluster, p: u32) -> BTreeSet<u64> {
    let mut c = ctrl.client(p);
    c.set_timeout(Duration::from_secs(30));
    job_ids(&mut c, Default::default()).into_iter().collect()
}

/// Writes `ids` one at a time through primary `p`; every one must be acknowledged.
fn write_all(ctrl: &Cluster, p: u32, ids: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut c = ctrl.client(p);
    c.set_timeout(Duration::from_secs(10));
    ids.inspect(|&id| {
        // An entry of about 2 KB, so a few hundred writes fill and free log segments.
        let r = c.call(big_job(id, 2000));
        assert_eq!(r.status, 0, "job {id}: {r:?}\n{}", ctrl.all_logs());
    })
    .collect()
}

/// Purges a node logged that freed segments.
fn purges(ctrl: &Cluster, id: u32) -> usize {
    ctrl.log(id)
        .lines()
        .filter(|l| l.contains("segment file(s) to delete") && !l.contains(": 0 segment"))
        .count()
}

/// A disk that takes 3 s to delete each purged segment holds nothing back: no primary steps
/// down, no node campaigns, every write is acknowledged. Before issue 38 the purge ran on the
/// Raft core: each one stopped the node's appends and heartbeats for its length (at 10^6 jobs,
/// P12 measured three step-downs, each right after the nodes wrote their snapshots).
#[test]
fn a_slow_purge_holds_no_node_back() {
    let mut ctrl = prepared(3, FLAGS);
    ctrl.failpoints_at_start("log-purge=sleep(3000)");
    ctrl.start_all();
    let p = ctrl.expect_settled(STARTUP);
    let campaigns = |ctrl: &Cluster| -> usize {
        (1..=3)
            .map(|id| ctrl.log(id).matches("role=candidate").count())
            .sum()
    };
    let before = campaigns(&ctrl);
    // About 1.6 MB of log: several snapshots and purges on every node.
    let acked = write_all(&ctrl, p, 1..=800);
    let logs = ctrl.all_logs();
    assert!(
        !logs.contains("not serving as primary"),
        "a primary stepped down\n{logs}"
    );
    assert_eq!(campaigns(&ctrl), before, "a node campaigned\n{logs}");
    for id in 1..=3 {
        ctrl.wait_until(&format!("node {id} purged its log"), STARTUP, || {
            purges(&ctrl, id) >= 2
        });
    }
    assert_eq!(listed(&ctrl, p).len(), acked.len());
}

/// `kill -9` of every node while their purged segments wait to be deleted (the deletion held
/// by `log-purge=pause`: the purge point is on disk, the files are not gone), then restarts in
/// several orders, the old primary first: every acknowledged job is listed exactly once by
/// every primary, and the segments left behind are deleted when the nodes open their logs.
#[test]
fn a_crash_while_purged_segments_are_deleted_loses_nothing() {
    let mut ctrl = prepared(3, FLAGS);
    ctrl.failpoints_at_start("log-purge=pause");
    ctrl.start_all();
    let p = ctrl.expect_settled(STARTUP);
    let acked = write_all(&ctrl, p, 1..=800);
    for id in 1..=3 {
        ctrl.wait_until(&format!("node {id} purged its log"), STARTUP, || {
            purges(&ctrl, id) >= 1
        });
    }
    let segments = |ctrl: &Cluster, id: u32| {
        std::fs::read_dir(ctrl.data(id).join("raft-log"))
            .map(|rd| rd.count())
            .unwrap_or(0)
    };
    let held: Vec<usize> = (1..=3).map(|id| segments(&ctrl, id)).collect();
    for id in ctrl.running() {
        ctrl.kill(id);
    }
    // The old primary alone first, then the others.
    ctrl.opts.env.clear();
    ctrl.start_node(p);
    for id in (1..=3).filter(|&id| id != p) {
        ctrl.start_node(id);
    }
    let want: BTreeSet<u64> = acked.iter().copied().collect();
    let q = ctrl.expect_settled(STARTUP);
    assert_eq!(listed(&ctrl, q), want, "after the old primary {p} first");
    for id in 1..=3u32 {
        assert!(
            segments(&ctrl, id) < held[id as usize - 1],
            "node {id}: {} segments before the crash, {} after its open\n{}",
            held[id as usize - 1],
            segments(&ctrl, id),
            ctrl.all_logs()
        );
    }
    across_restart_orders(&mut ctrl, &[&[3, 2, 1], &[2, 3, 1]], |ctrl, q, when| {
        assert_eq!(listed(ctrl, q), want, "{when}");
    });
}

/// A standby that crashes while it installs the primary's snapshot — its log already purged up
/// to the snapshot's index (openraft purges the log beside the state machine's install), the
/// snapshot file not yet in place — found at its next start a log that does not reach back to
/// its state, and exited 74 at every start ("try to get log at index 0 but got Some(N)";
/// found by the 30-minute nemesis, S20). It now comes back as a node that lost its disk (C12:
/// the data it holds is set aside, it catches up before it votes or counts) and every
/// acknowledged job is listed.
///
/// C1 with C12 across restart orders, slow disks and a second crash: the standby restarted
/// alone, the whole cluster killed and restarted with the standby first or last, the standby
/// killed again in the install it takes after its data was set aside, and that install on a
/// slow disk.
#[derive(Clone, Copy, Debug)]
enum After {
    /// The standby alone is restarted.
    Alone,
    /// Every node is killed; the standby starts first, then the others.
    AllStandbyFirst,
    /// Every node is killed; the others start first, the standby last.
    AllStandbyLast,
    /// The standby, restarted, is killed again in the install it then takes (a second torn
    /// install, on a node that started without data), and restarted.
    TornTwice,
    /// The standby's install after the restart writes its snapshot on a slow disk (1.5 s).
    SlowInstall,
}

#[test]
fn a_crash_while_a_snapshot_is_installed_comes_back() {
    torn_install(After::Alone);
}

#[test]
fn a_torn_install_then_the_whole_cluster_restarted_standby_first() {
    torn_install(After::AllStandbyFirst);
}

#[test]
fn a_torn_install_then_the_whole_cluster_restarted_standby_last() {
    torn_install(After::AllStandbyLast);
}

#[test]
fn a_torn_install_torn_again_after_the_data_was_set_aside() {
    torn_install(After::TornTwice);
}

#[test]
fn a_torn_install_then_a_slow_install() {
    torn_install(After::SlowInstall);
}

/// What node `f` logged since its latest start.
fn since_start(ctrl: &Cluster, f: u32) -> String {
    let log = ctrl.log(f);
    let at = log.rfind("disk: quota").unwrap_or(0);
    log[at..].to_string()
}

/// Starts node `f` and waits until its install of the snapshot the primary sends is held
/// where it writes the file (`snapshot-save=pause`), after its log's purge when it had a log
/// (`purge`).
fn start_held_in_install(ctrl: &mut Cluster, f: u32, purge: bool) {
    let starts = ctrl.starts(f);
    ctrl.failpoints_at_start("snapshot-save=pause");
    ctrl.start_node(f);
    ctrl.opts.env.clear();
    ctrl.wait_until("the install held", STARTUP, || {
        let tail = since_start(ctrl, f);
        ctrl.starts(f) > starts
            && tail.contains("failpoint snapshot-save reached")
            && (!purge || tail.contains("log purged up to"))
    });
}

fn torn_install(after: After) {
    let mut ctrl = cluster(3, FLAGS);
    let p = ctrl.expect_settled(STARTUP);
    let f = ctrl.ids().into_iter().find(|&id| id != p).unwrap();
    let g = ctrl
        .ids()
        .into_iter()
        .find(|&id| id != p && id != f)
        .unwrap();
    let mut acked = write_all(&ctrl, p, 1..=50);
    ctrl.kill(f);
    acked.extend(write_all(&ctrl, p, 51..=600));
    ctrl.wait_until("the primary purged its log", STARTUP, || {
        purges(&ctrl, p) >= 1
    });
    // Back, with the install of the snapshot the primary sends held where it writes the file.
    start_held_in_install(&mut ctrl, f, true);
    ctrl.kill(f);
    match after {
        After::Alone => ctrl.start_node(f),
        After::AllStandbyFirst | After::AllStandbyLast => {
            ctrl.kill(p);
            ctrl.kill(g);
            let order = match after {
                After::AllStandbyFirst => [f, g, p],
                _ => [p, g, f],
            };
            for id in order {
                ctrl.start_node(id);
            }
        }
        After::TornTwice => {
            start_held_in_install(&mut ctrl, f, false);
            assert!(
                since_start(&ctrl, f).contains("its data is set aside"),
                "{}",
                ctrl.log(f)
            );
            ctrl.kill(f);
            ctrl.start_node(f);
        }
        After::SlowInstall => {
            ctrl.failpoints_at_start("snapshot-save=sleep(1500)");
            ctrl.start_node(f);
            ctrl.opts.env.clear();
        }
    }
    let q = ctrl.expect_settled(STARTUP);
    acked.extend(write_all(&ctrl, q, 601..=620));
    ctrl.wait_until("the standby back and caught up", STARTUP, || {
        let tail = since_start(&ctrl, f);
        assert!(
            !tail.contains("storage fault"),
            "node {f} stopped after its restart ({after:?})\n{tail}"
        );
        tail.contains("votes and campaigns again")
    });
    let all = ctrl.log(f);
    let set_aside = all.matches("its data is set aside").count();
    let want_set_aside = if matches!(after, After::TornTwice) {
        2
    } else {
        1
    };
    assert_eq!(set_aside, want_set_aside, "{after:?}\n{all}");
    // Every acknowledged job, on the primary and on the standby that came back.
    let want: BTreeSet<u64> = acked.iter().copied().collect();
    assert_eq!(listed(&ctrl, q), want, "{after:?}");
    let at = ctrl.progress(q).map_or(u64::MAX, |i| i.applied_index);
    ctrl.wait_until("the standby applied what the primary had", STARTUP, || {
        ctrl.progress(f).is_some_and(|i| i.applied_index >= at)
    });
}
