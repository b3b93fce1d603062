//! F29 with real controllers (the library's half of S16): a client configured with one
//! controller only learns the other members from the primary; that controller is killed -9 and
//! stays dead; the next calls succeed through the learned controllers with no error to the
//! caller — a daemon with an old list keeps working.

mod common;

use std::time::Instant;

use common::*;
use xce::client::Client;
use xce::failover::Endpoint;

fn ep(a: std::net::SocketAddr) -> Endpoint {
    Endpoint::new(a.ip().to_string(), a.port())
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
        assert!(learned.contains(&ep(n.client)), "{} missing: {learned:?}", n.client);
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
