//! Scale of the job table (issue 13, acceptance P11/P12) against real controllers:
//! - a table larger than the 16 MiB frame limit lists whole through the old caller's C
//!   signature, with the primary killed in the middle of the listing, and the result is
//!   exactly the acknowledged writes (one snapshot: no duplicate, no gap);
//! - a deterministic error (a reply that cannot fit any frame) returns at once with its own
//!   code, without rotating or failing over;
//! - P12 (amended): the bench's row at 10^4 jobs (10^6 with `XCE_SCALE_FULL=1`), and the log
//!   store against the snapshot with writes one at a time (C24).
//!
//! `XCE_LONG=1` uses a larger table (about 100 MiB of listing).

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{client, client_with, cluster, cluster_with, long};
use xce_proof::bench::load::c_joblist_ids;
use xce_proof::bench::p12_job_table;
use xce_proof::{Cluster, ClusterOpts};
use xce_proto::error::{Error, E_XCE_TOOBIG};
use xce_proto::wire::{JobFilter, JobSpec, Op};

/// A job of about 1.2 KB on the wire (a long command line), so that a table over 16 MiB
/// takes tens of thousands of jobs, not hundreds of thousands.
fn wide_job(job_id: u64) -> JobSpec {
    JobSpec {
        job_id,
        name: format!("wide-{job_id}"),
        user: "scale".into(),
        queue: String::new(),
        command: format!("/opt/app/run --id {job_id} {}", "--flag value ".repeat(90)),
        ncpus: 1,
        mem_mb: 64,
    }
}

/// Submits `n` jobs from 32 contexts; returns the acknowledged ids.
fn load(c: &Cluster, n: u64) -> BTreeSet<u64> {
    let next = Arc::new(AtomicU64::new(0));
    let acked = std::sync::Mutex::new(BTreeSet::new());
    std::thread::scope(|s| {
        for _ in 0..32 {
            let next = next.clone();
            let acked = &acked;
            let cl = client(c);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return;
                }
                let id = xce::client::new_job_id();
                cl.jobsubmit(wide_job(id)).expect("jobsubmit");
                acked.lock().unwrap().insert(id);
            });
        }
    });
    acked.into_inner().unwrap()
}

fn log_dir(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("xce-scale-test-{tag}-{}", std::process::id()))
}

/// Listings pinned so far by each node (from its log), by node id - 1.
fn pins(c: &Cluster) -> Vec<usize> {
    (1..=3)
        .map(|id| c.log(id).matches("pinned").count())
        .collect()
}

#[test]
fn a_table_over_16_mib_lists_whole_through_a_primary_kill() {
    // Small pages (256 KiB) make the listing many round trips long, so the kill lands inside it.
    std::env::set_var(xce::client::ENV_PAGE_BYTES, "262144");
    let (mut c, _) = cluster(3);
    let n = if long() { 80_000 } else { 16_000 };
    let acked = load(&c, n);
    assert_eq!(acked.len() as u64, n);

    // Without a kill: the whole table, over the frame limit, in one call of the old signature.
    let t_whole = Instant::now();
    let whole = c_joblist_ids(&c.masters()).expect("list");
    let whole_took = t_whole.elapsed();
    assert_eq!(whole.rc, n as i64, "{}", xce::strerror(whole.rc as i32));
    let bytes = n * 1200;
    assert!(bytes > 16 << 20, "the table must not fit one frame");
    assert_eq!(whole.ids.iter().copied().collect::<BTreeSet<_>>(), acked);

    // With the primary killed half-way through the listing (by the time the whole listing
    // took above: not by waiting for the node's "pinned" log line, which is rate-limited and
    // reaches the file through the log-stamping thread, so it came too late on a loaded
    // machine). A trial in which the listing ended before the kill proves nothing: try again
    // (bounded), a little earlier each time.
    let mut proven = false;
    for trial in 0..5u32 {
        let p = c.wait_primary(common::ELECTION_WAIT).expect("primary");
        let pins_before = pins(&c);
        let masters = c.masters();
        let t0 = Instant::now();
        let lister = std::thread::spawn(move || {
            let r = c_joblist_ids(&masters);
            (r, t0.elapsed())
        });
        std::thread::sleep((whole_took / (2 + trial)).max(Duration::from_millis(2)));
        c.kill(p);
        let killed_at = t0.elapsed();
        let (r, took) = lister.join().expect("lister thread");
        let r = r.expect("list");
        // Exactly the acknowledged jobs, each once, whatever happened.
        assert_eq!(r.rc, n as i64, "{}", xce::strerror(r.rc as i32));
        let ids: BTreeSet<u64> = r.ids.iter().copied().collect();
        assert_eq!(ids.len(), r.ids.len(), "duplicates in the listing");
        assert_eq!(ids, acked, "listing differs from the acknowledged writes");
        c.restart(p).expect("restart");
        if took > killed_at && r.failovers > 0 {
            // The call outlived the kill and failed over: the new primary served the listing
            // from a snapshot of its own.
            // (Its log line may reach the file a little after the reply: waited for.)
            let what = "a listing pinned on the new primary";
            c.wait_until(what, Duration::from_secs(5), || {
                let now = pins(&c);
                (1..=3u32)
                    .filter(|&id| id != p)
                    .any(|id| now[id as usize - 1] > pins_before[id as usize - 1])
            });
            proven = true;
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    assert!(proven, "the kill never landed inside a listing in 5 trials");
}

#[test]
fn a_reply_too_large_for_a_frame_is_toobig_at_once_without_failover() {
    let (c, _) = cluster_with(3, ClusterOpts::default());
    let n = 16_000;
    load(&c, n);
    // F25's suspicion off: on a loaded machine the primary can take longer than the suspicion
    // threshold to find that the answer does not fit, and a late reply is rightly asked about
    // at another controller (a rotation through it that says nothing about this error). Off,
    // a rotation here can only be the error taken for a broken primary.
    let cl = client_with(
        &c,
        xce::client::Options {
            suspicion: false,
            ..Default::default()
        },
    );
    cl.hello().expect("hello");
    let before = cl.stats();
    let t0 = Instant::now();
    // The unpaged op, as an old client sends it: its answer (about 19 MiB) cannot fit one
    // frame. The controller must not send it (the client would refuse it, take the primary
    // for broken and fail over, and end with a false "cluster not ready").
    let r = cl.call(Op::JobList(JobFilter::default()));
    let took = t0.elapsed();
    let after = cl.stats();
    assert_eq!(r.unwrap_err(), Error::TooBig);
    assert_eq!(Error::TooBig.code(), E_XCE_TOOBIG);
    assert_eq!(xce::strerror(-E_XCE_TOOBIG), "reply too large");
    // No rotation, no retry, no failover: every master would give the same answer.
    assert_eq!(
        after.rotations, before.rotations,
        "rotated on a deterministic error"
    );
    assert_eq!(
        after.retries, before.retries,
        "retried a deterministic error"
    );
    assert_eq!(
        after.failovers, before.failovers,
        "failed over on a deterministic error"
    );
    eprintln!("TOOBIG answered in {took:?}");
    // The same context then lists everything (paged) and stays usable.
    assert_eq!(
        cl.joblist(JobFilter::default()).expect("joblist").len() as u64,
        n
    );
    cl.hello().expect("hello after TOOBIG");
}

#[test]
fn a_standby_on_an_empty_data_directory_catches_up_from_a_snapshot() {
    let (mut c, p) = cluster_with(
        3,
        ClusterOpts {
            // Purge the log down to 1000 entries behind a snapshot (the default keeps 20000,
            // more than this test writes), so that the empty standby needs the snapshot.
            extra_args: vec!["--log-keep".into(), "1000".into()],
            ..Default::default()
        },
    );
    let s = (1..=3u32).rev().find(|&i| i != p).unwrap();
    let cl = client(&c);
    // Concurrent writers: entries hold batches, as in production.
    let acked = load(&c, if long() { 100_000 } else { 20_000 });
    // The other standby restarts on its data first (as in xce-scale's P12).
    let other = (1..=3u32).find(|&i| i != p && i != s).unwrap();
    c.restart(other).expect("restart other");
    std::thread::sleep(Duration::from_secs(2));
    // The standby loses everything and comes back empty: the primary's log no longer reaches
    // back to the start, so it must send its snapshot.
    c.kill(s);
    // The node's log file goes on across restarts: only lines written after this one count
    // (an earlier "votes and campaigns again" let the primary be killed before the restarted
    // node had caught up — then it rightly refused every vote, C12, and no primary came).
    let mark = c.log(s).len();
    let since = |c: &Cluster| c.log(s).get(mark..).unwrap_or("").to_string();
    std::fs::remove_dir_all(c.data(s)).expect("wipe");
    c.restart(s).expect("restart");
    let deadline = Instant::now() + Duration::from_secs(60);
    c.wait_until("a snapshot installed", Duration::from_secs(60), || {
        let stopped = c.log(s).contains("raft stopped");
        assert!(!stopped, "the empty standby stopped:\n{}", c.log(s));
        since(&c).contains("installed snapshot")
    });
    // C12: a node that lost its data votes again only once it has caught up to the leader's
    // commit index (the snapshot and the log after it). Both within the one minute.
    let left = deadline.saturating_duration_since(Instant::now());
    c.wait_until("the standby caught up", left, || {
        since(&c).contains("votes and campaigns again")
    });
    // It holds everything: make it serve by killing the primary.
    std::thread::sleep(Duration::from_secs(1));
    assert!(!c.log(s).contains("raft stopped"), "{}", c.log(s));
    c.kill(p);
    c.expect_new_primary(p, common::ELECTION_WAIT);
    let ids: BTreeSet<u64> = cl
        .joblist(JobFilter::default())
        .expect("joblist")
        .iter()
        .map(|j| j.job_id)
        .collect();
    assert_eq!(ids, acked);
}

/// The table sizes P12's test runs: 10^4 jobs, and 10^6 with `XCE_SCALE_FULL=1`.
fn p12_sizes() -> Vec<u64> {
    let mut v = vec![10_000];
    if std::env::var_os("XCE_SCALE_FULL").is_some_and(|v| v != "0") {
        v.push(1_000_000);
    }
    v
}

/// P12 (amended) at 10^4 jobs (and 10^6 with `XCE_SCALE_FULL=1`), the bench's own row: every
/// job listed, a restarted standby answers, a standby on an empty data directory catches up
/// (before issue 38 the bench waited for a snapshot the standby never needed and measured
/// nothing), a kill of the primary fails over, and every node's log store is at most twice its
/// snapshot. Timings are the bench's to report, not this test's to judge.
#[test]
fn p12_the_job_table_at_scale() {
    for n in p12_sizes() {
        let logs = log_dir(&format!("p12-{n}"));
        let _ = std::fs::remove_dir_all(&logs);
        let row = p12_job_table::p12_row("test", &xce_proof::controller_bin(), n, &logs)
            .expect("P12 row");
        assert!(row.joblist.is_ok(), "{n} jobs: joblist {:?}", row.joblist);
        assert!(
            row.restart.is_some(),
            "{n} jobs: the restarted standby never answered"
        );
        assert!(
            row.catch_up.is_some(),
            "{n} jobs: the blank standby never caught up"
        );
        assert!(row.failover.is_some(), "{n} jobs: no failover");
        for (i, s) in row.split.iter().enumerate() {
            assert!(
                s.snapshot > 0 && s.log_store <= 2 * s.snapshot,
                "{n} jobs, node {}: log store {} B, snapshot {} B (logs in {})",
                i + 1,
                s.log_store,
                s.snapshot,
                logs.display()
            );
        }
        eprintln!("{row:?}");
        let _ = std::fs::remove_dir_all(&logs);
    }
}

/// C24: with writes one at a time (one Raft entry each, the common case of a scheduler that
/// submits as jobs come), every node's log store stays within twice its snapshot once the log
/// is purged behind it. Before issue 38: 66× at 40,000 jobs (a redb file that kept the space
/// of every entry ever written).
#[test]
fn the_log_store_follows_the_snapshot_with_writes_one_at_a_time() {
    let logs = log_dir("one-by-one");
    let _ = std::fs::remove_dir_all(&logs);
    let a = xce_proof::bench::ScaleOpts {
        ours: xce_proof::controller_bin(),
        ..Default::default()
    };
    let t = p12_job_table::one_by_one_table(&a, 5000, &logs).expect("measured");
    eprintln!("{t}");
    assert!(t.all_met(), "{t}");
    let _ = std::fs::remove_dir_all(&logs);
}
