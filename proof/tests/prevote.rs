//! C15, P14: pre-vote. A controller cut off from its peers (network namespaces: its peer port
//! down, no RST; clients still reach it, so its term can be read) must not raise its term while
//! away, and when it comes back the primary and the term must stay as they were:
//! - a standby cut off: no election at all, before or after the heal;
//! - the primary cut off: the others elect a new primary, and the old one, back, neither
//!   raises the term nor deposes the new primary.
//!
//! Before pre-vote the cut-off standby campaigned every election timeout (its term rose by
//! one each time) and, back, its term deposed the primary. Skipped, with the reason, where
//! namespaces cannot be made (not root, no `ip`) — but a failure as root or with
//! `XCE_REQUIRE_NETNS` set, as S11.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{wait_all_vote, SLOW_TIMING};
use xce_proof::harness::netns::{self, Fault, NetCluster};
use xce_proto::wire::{ControllerInfo, ControllerRole};

/// How long a node stays cut off: several election timeouts.
const CUT_FOR: Duration = Duration::from_secs(4);
/// After the heal: time for a rejoining node to catch up, or to disrupt.
const AFTER_HEAL: Duration = Duration::from_secs(2);
const BOUND: Duration = Duration::from_secs(30);

fn skip() -> Option<String> {
    netns::skip_test("the pre-vote test")
}

/// Every node's `hello` (`None`: no answer), probed from the client namespace.
fn infos(c: &NetCluster) -> Vec<(u32, Option<ControllerInfo>)> {
    let targets: Vec<(u32, SocketAddr)> = c.nodes.iter().map(|n| (n.id, n.client)).collect();
    netns::in_ns(&c.client_ns, move || {
        targets
            .iter()
            .map(|&(id, a)| {
                let info = xce_proof::harness::cluster::probe_info(a, Duration::from_millis(500))
                    .ok()
                    .flatten();
                (id, info)
            })
            .collect()
    })
    .expect("probe from the client namespace")
}

fn term_of(infos: &[(u32, Option<ControllerInfo>)], id: u32) -> Option<u64> {
    infos
        .iter()
        .find(|(i, _)| *i == id)
        .and_then(|(_, i)| i.as_ref().map(|i| i.term))
}

fn max_term(infos: &[(u32, Option<ControllerInfo>)], except: Option<u32>) -> u64 {
    infos
        .iter()
        .filter(|(i, _)| Some(*i) != except)
        .filter_map(|(_, i)| i.as_ref().map(|i| i.term))
        .max()
        .unwrap_or(0)
}

fn primaries(infos: &[(u32, Option<ControllerInfo>)]) -> Vec<u32> {
    infos
        .iter()
        .filter(|(_, i)| {
            i.as_ref()
                .is_some_and(|i| i.role == ControllerRole::Primary)
        })
        .map(|(id, _)| *id)
        .collect()
}

fn log_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("xce-prevote-{name}-{}", std::process::id()))
}

/// A 3-node cluster with a settled primary: (cluster, primary, term).
fn settled(name: &str) -> (NetCluster, u32, u64) {
    let timing: Vec<String> = SLOW_TIMING.iter().map(|s| s.to_string()).collect();
    let c = NetCluster::start(3, &timing, Some(log_dir(name))).expect("namespaces/cluster");
    let p = c.wait_primary(None, BOUND).expect("a primary");
    // Every node started blank: an election among the others needs both to vote.
    wait_all_vote(&c, BOUND, || history(&c));
    std::thread::sleep(Duration::from_secs(1));
    let now = infos(&c);
    assert_eq!(primaries(&now), vec![p], "settled: {now:?}");
    (c, p, max_term(&now, None))
}

/// Keeps `id` cut off from its peers for [`CUT_FOR`] — and, with `until_elected`, until the
/// others' term has risen too (at most [`BOUND`]: what is tested is that the cut-off node
/// neither campaigns nor disrupts, not how fast the others elect; P9 and P14 measure that).
/// Returns the highest term `id` reported meanwhile and the highest term the others reported.
fn cut_off(c: &NetCluster, id: u32, term0: u64, until_elected: bool) -> (u64, u64) {
    c.fault(Fault::CutFromPeers(id), true).expect("fault");
    let t0 = Instant::now();
    let mut own = 0;
    let mut others = 0;
    while t0.elapsed() < CUT_FOR || (until_elected && others <= term0 && t0.elapsed() < BOUND) {
        std::thread::sleep(Duration::from_millis(250));
        let now = infos(c);
        own = own.max(term_of(&now, id).unwrap_or(0));
        // The highest seen: a node whose `hello` times out in the last probe (a loaded
        // machine) must not hide an election seen before.
        others = others.max(max_term(&now, Some(id)));
    }
    if until_elected && t0.elapsed() > CUT_FOR + Duration::from_millis(500) {
        eprintln!(
            "pre-vote: the others' term rose only after {:?}:\n{}",
            t0.elapsed(),
            history(c)
        );
    }
    c.fault(Fault::CutFromPeers(id), false).expect("heal");
    (own, others)
}

#[test]
fn a_standby_cut_off_from_its_peers_raises_no_term_and_disrupts_nothing() {
    if skip().is_some() {
        return;
    }
    let logs = log_dir("standby");
    let (c, p, term0) = settled("standby");
    let f = c.nodes.iter().map(|n| n.id).find(|&i| i != p).unwrap();
    let (own, others) = cut_off(&c, f, term0, false);
    eprintln!(
        "pre-vote: standby {f} cut off: its term {own}, the others' {others} (before: {term0})"
    );
    assert_eq!(
        own,
        term0,
        "the cut-off standby raised its term (it campaigned) — logs in {}:\n{}",
        logs.display(),
        history(&c)
    );
    assert_eq!(
        others,
        term0,
        "an election while a standby was away:\n{}",
        history(&c)
    );
    std::thread::sleep(AFTER_HEAL);
    let after = infos(&c);
    eprintln!("pre-vote: after the heal: {:?}", summary(&after));
    assert_eq!(
        primaries(&after),
        vec![p],
        "the primary changed after the standby came back — logs in {}:\n{}",
        logs.display(),
        history(&c)
    );
    assert_eq!(
        max_term(&after, None),
        term0,
        "the term rose after the heal:\n{}",
        history(&c)
    );
}

#[test]
fn a_primary_cut_off_from_its_peers_comes_back_without_disrupting_the_new_one() {
    if skip().is_some() {
        return;
    }
    let logs = log_dir("primary");
    let (c, p, term0) = settled("primary");
    let (own, others) = cut_off(&c, p, term0, true);
    eprintln!(
        "pre-vote: primary {p} cut off: its term {own}, the others' {others} (before: {term0})"
    );
    // The cut-off primary never campaigns; the others elect (once, or twice on a split vote).
    assert_eq!(
        own,
        term0,
        "the cut-off primary raised its term:\n{}",
        history(&c)
    );
    assert!(
        others > term0 && others <= term0 + 2,
        "the others' term {others} (before {term0}) — logs in {}:\n{}",
        logs.display(),
        history(&c)
    );
    let new = c
        .wait_primary(Some(p), BOUND)
        .unwrap_or_else(|| panic!("no new primary among the others:\n{}", history(&c)));
    std::thread::sleep(AFTER_HEAL);
    let after = infos(&c);
    eprintln!("pre-vote: after the heal: {:?}", summary(&after));
    assert_eq!(
        primaries(&after),
        vec![new],
        "the old primary disrupted the new one — logs in {}:\n{}",
        logs.display(),
        history(&c)
    );
    assert_eq!(
        max_term(&after, None),
        others,
        "the term rose after the heal:\n{}",
        history(&c)
    );
}

/// What the nodes logged about elections, for a failing assertion (CI keeps no log files).
fn history(c: &NetCluster) -> String {
    c.log_lines(&[
        "campaign", "pre-vote", "role=", "C11", "C12", "refusing", "serving", "quorum",
    ])
}

fn summary(infos: &[(u32, Option<ControllerInfo>)]) -> Vec<(u32, Option<(ControllerRole, u64)>)> {
    infos
        .iter()
        .map(|(id, i)| (*id, i.as_ref().map(|i| (i.role, i.term))))
        .collect()
}
