//! F29 with real controllers (the library's half of S16): a client configured with one
//! controller only learns the other members from the primary; that controller is killed -9 and
//! stays dead; the next calls succeed through the learned controllers with no error to the
//! caller — a daemon with an old list keeps working.

mod common;

use std::time::{Duration, Instant};

use common::*;
use xce::client::Client;
use xce::client::Endpoint;
use xce_proof::harness::cluster::raw_call;
use xce_proto::wire::{Hello, Op, ReplyData, PROTOCOL_VERSION};

/// The members of a `hello` or `waitPrimary` answer of node `id` (None: not a CtrlInfo).
fn members_of(c: &xce_proof::Cluster, id: u32, op: Op) -> Option<Vec<Endpoint>> {
    let r = raw_call(c.node(id).client, op, Duration::from_secs(5)).expect("raw call");
    match r.data {
        ReplyData::CtrlInfo(i) => Some(
            i.members
                .into_iter()
                .map(|m| Endpoint::new(m.host, m.port))
                .collect(),
        ),
        _ => None,
    }
}

/// Only the serving primary reports the members in `hello` (a standby's, refused with STANDBY,
/// has none). An immediate `waitPrimary` (the progress question `status` asks every node) names
/// the membership the answering node holds, a standby's too (issue 26: one member is enough for
/// `status`), with the answering node's own role and id: the library learns members only from
/// an answer whose node names itself the primary (`failover/retry/members.rs::learn`).
#[test]
fn only_the_primary_reports_the_members() {
    let (c, p) = cluster(3);
    let hello = || {
        Op::Hello(Hello {
            client_name: "f29".into(),
            protocol_version: PROTOCOL_VERSION,
        })
    };
    let wait = || Op::WaitPrimary {
        timeout_ms: 0,
        exclude_host: String::new(),
        exclude_port: 0,
    };
    let all: Vec<Endpoint> = c.nodes.iter().map(|n| ep(n.client)).collect();
    assert_eq!(members_of(&c, p, hello()), Some(all.clone()));
    assert_eq!(members_of(&c, p, wait()), Some(all));
    for n in c.nodes.iter().filter(|n| n.id != p) {
        assert_eq!(
            members_of(&c, n.id, hello()),
            Some(vec![]),
            "standby {}",
            n.id
        );
        let r = raw_call(c.node(n.id).client, wait(), Duration::from_secs(5)).expect("raw call");
        match r.data {
            ReplyData::CtrlInfo(i) => {
                assert!(
                    i.id == n.id && i.primary_id == p && i.id != i.primary_id,
                    "standby {}: answers as itself, naming the primary: {i:?}",
                    n.id
                );
                let mut held: Vec<Endpoint> = i
                    .members
                    .into_iter()
                    .map(|m| Endpoint::new(m.host, m.port))
                    .collect();
                held.sort_by_key(|e| e.port);
                let mut all = c.nodes.iter().map(|n| ep(n.client)).collect::<Vec<_>>();
                all.sort_by_key(|e| e.port);
                assert_eq!(held, all, "standby {}: the membership it holds", n.id);
            }
            other => panic!("standby {}: {other:?}", n.id),
        }
    }
}

#[test]
fn a_client_configured_with_one_controller_follows_the_cluster_after_it_dies() {
    let (mut c, p) = cluster(3);
    // Only the primary's address, as a daemon configured before the others existed.
    let only = c.node(p).client.to_string();
    let cl: Client = client_for(&only);
    assert_eq!(cl.masters(), vec![ep(c.node(p).client)]);
    let first = spec("follow");
    cl.jobsubmit(first.clone()).expect("first submit");
    // The primary reported the three members: the two others were learned.
    let learned = cl.masters();
    assert_eq!(learned.len(), 3, "{learned:?}");
    assert_eq!(learned[0], ep(c.node(p).client), "configured master first");
    for n in &c.nodes {
        assert!(
            learned.contains(&ep(n.client)),
            "{} missing: {learned:?}",
            n.client
        );
    }
    assert_eq!(cl.stats().learned_masters, 2);

    // The configured controller dies for good.
    c.kill(p);
    let t0 = Instant::now();
    let mut ids = vec![first.job_id];
    for i in 0..5 {
        let s = spec(&format!("after-{i}"));
        cl.jobsubmit(s.clone())
            .unwrap_or_else(|e| panic!("submit {i} after the kill: {e}"));
        ids.push(s.job_id);
    }
    let took = t0.elapsed();
    println!("F29: first calls after kill -9 of the only configured controller: {took:?}");
    let now = cl.stats().current_master.expect("connected");
    assert_ne!(now, ep(c.node(p).client));
    let listed = all_job_ids(&cl);
    for id in ids {
        assert_eq!(listed.iter().filter(|&&x| x == id).count(), 1, "job {id}");
    }
    // Still three masters, the dead configured one included.
    assert_eq!(cl.masters(), learned);
    assert!(took < ELECTION_WAIT, "{took:?}");
}

/// The happy path pays nothing for F29: calls on a kept connection send no `hello`. Printed,
/// not asserted (timings on 2 loaded cores): the mean of a read with three masters learned
/// (configured: the primary alone), the same three configured with learning off, and the
/// primary alone with learning off (one master: F25's watch is off, which is cheaper).
#[test]
fn happy_path_cost_is_printed() {
    use xce::client::Options;
    use xce::client::{parse_masters, Config};
    let (c, p) = cluster(3);
    const N: u32 = 2000;
    let alone = c.node(p).client.to_string();
    let all = c.masters();
    for _round in 0..2 {
        for (what, masters, learn) in [
            ("primary alone, learned 2", &alone, true),
            ("three configured, learning off", &all, false),
            ("primary alone, learning off", &alone, false),
        ] {
            let cfg = Config::new(parse_masters(masters).unwrap());
            let opts = Options {
                learn_masters: learn,
                ..Options::default()
            };
            let cl = Client::start_with(cfg, opts, Default::default()).expect("start");
            cl.clusterconf().expect("warm-up");
            let t0 = Instant::now();
            for _ in 0..N {
                cl.clusterconf().expect("clusterconf");
            }
            let mean = t0.elapsed() / N;
            println!(
                "F29 happy path: {what} ({} masters): {mean:?} per clusterconf",
                cl.masters().len()
            );
        }
    }
}

/// Configured with a standby only (issue 36, F29 for every tool): the standby teaches nothing
/// itself, but its hint to the primary names a member it holds, so it is followed with either
/// hint policy and the primary teaches the whole list. With learning off, the configured
/// standby is all the context talks to: the call fails, nothing learned.
#[test]
fn a_standby_alone_teaches_nothing_but_its_hint_leads_to_the_primary() {
    use xce::client::{parse_masters, Config};
    use xce::client::{HintPolicy, Options};
    let (c, p) = cluster(3);
    let s = c
        .nodes
        .iter()
        .find(|n| n.id != p)
        .expect("a standby")
        .client;
    let start = |policy, learn_masters| {
        let opts = Options {
            hint_policy: policy,
            learn_masters,
            ..Options::default()
        };
        let cfg = Config::new(parse_masters(&s.to_string()).unwrap());
        Client::start_with(cfg, opts, short_budget()).expect("start")
    };
    let closed = start(HintPolicy::ConfiguredOnly, false);
    assert!(closed.clusterconf().is_err());
    assert_eq!(closed.masters(), vec![ep(s)]);
    for policy in [HintPolicy::ConfiguredOnly, HintPolicy::AnyHost] {
        let open = start(policy, true);
        open.clusterconf().expect("through the hint");
        let m = open.masters();
        assert_eq!(m.len(), 3, "{policy:?}: {m:?}");
        assert_eq!(m[0], ep(s));
    }
}
