//! Issue 36 (F29 for every tool): admin tools and the library follow a redirect to a node the
//! members they reached vouch for. Two members are added, leadership moves to one of them, and
//! every tool is then run with the *old* `--masters` list (the first three nodes, all standbys
//! now): `member list`, `leader transfer`, `snapshot save`, `member remove` and a library
//! context's `joblist` (what `xce_test -c joblist` runs) succeed first time, each within
//! seconds (before: "ignoring redirect hint … not a configured master" for about a minute,
//! then "cluster not ready").

use std::time::{Duration, Instant};

use crate::common::*;
use xce_proto::wire::JobFilter;

/// Generous for a busy machine; the stall this test is about lasted about 60 s.
const FIRST_TIME: Duration = Duration::from_secs(5);

/// Runs a tool with the old list; it must succeed within [`FIRST_TIME`].
fn first_time(ctrl: &Cluster, what: &str, args: &[&str]) -> String {
    let (code, out, took) = cli(args);
    eprintln!("{what}: exit {code:?} in {took:?}\n{out}");
    assert_eq!(code, Some(0), "{what}: {out}\n{}", ctrl.all_logs());
    assert!(took < FIRST_TIME, "{what} took {took:?}: {out}");
    assert!(!out.contains("not a configured master"), "{what}: {out}");
    out
}

#[test]
fn every_tool_with_the_old_list_reaches_a_new_primary_first_time() {
    let mut ctrl = cluster(3, &[]);
    ctrl.expect_settled(STARTUP);
    let old = ctrl.masters();
    for id in [4u32, 5] {
        let (c, _, spec) = new_member(id);
        ctrl.start_extra_node(id, &c, &spec, &["--join"]);
        let (code, out, _) = cli(&["member", "add", &spec, "--masters", &old]);
        assert_eq!(code, Some(0), "add {id}: {out}\n{}", ctrl.all_logs());
    }
    let (code, out, _) = cli(&["leader", "transfer", "--to", "4", "--masters", &old]);
    assert_eq!(code, Some(0), "{out}\n{}", ctrl.all_logs());
    assert_eq!(ctrl.expect_primary(STARTUP), 4);

    // Every tool with the old list, whose three nodes are all standbys now.
    let out = first_time(&ctrl, "member list", &["member", "list", "--masters", &old]);
    assert!(out.contains(" primary "), "{out}");
    let file = ctrl.data_dir().join("backup.snap");
    let file = file.to_str().unwrap();
    first_time(
        &ctrl,
        "snapshot save",
        &["snapshot", "save", file, "--masters", &old],
    );
    let t0 = Instant::now();
    let c = lib_client(&old);
    let jobs = c.joblist_all(JobFilter::default());
    let took = t0.elapsed();
    eprintln!(
        "library joblist: {:?} in {took:?}",
        jobs.as_ref().map(Vec::len)
    );
    assert!(jobs.is_ok(), "{:?}", c.last_error());
    assert!(took < FIRST_TIME, "library joblist took {took:?}");
    c.close();
    let out = first_time(
        &ctrl,
        "leader transfer",
        &["leader", "transfer", "--to", "5", "--masters", &old],
    );
    assert!(out.contains("node 5 is the primary now"), "{out}");
    // Node 4, a standby now, is removed through node 5, the primary.
    first_time(
        &ctrl,
        "member remove",
        &["member", "remove", "4", "--masters", &old],
    );
}
