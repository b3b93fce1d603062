//! S10: the S1 reproduction over TLS with verified certificates (real controllers with
//! `--tls-cert/--tls-key`, certificates made at test time); a client trusting the wrong CA gets
//! `E_XCE_TLS` and never falls back to plaintext.

mod common;

use std::time::{Duration, Instant};

use common::{all_job_ids, short_budget, spec};
use xce::client::{parse_masters, Client, Config, TlsFiles};
use xce::{Error, TlsCause};
use xce_proof::{Cluster, ClusterOpts};
use xce_proto::wire::JobFilter;
use xce_testkit::fake::TestPki;

/// A client of `masters` over TLS, trusting `ca`.
fn tls_client(masters: &str, ca: std::path::PathBuf) -> Result<Client, Error> {
    let mut cfg = Config::new(parse_masters(masters).unwrap());
    cfg.tls = Some(TlsFiles {
        ca_file: ca,
        cert_file: None,
        key_file: None,
    });
    Client::start(cfg)
}

/// The node a client is talking to, by port.
fn node_of(c: &Cluster, cl: &Client) -> u32 {
    let port = cl.stats().current_master.expect("a current master").port;
    c.nodes
        .iter()
        .find(|n| n.client.port() == port)
        .expect("a configured node")
        .id
}

#[test]
fn s10_failover_over_tls_and_wrong_ca_is_refused() {
    let pki = TestPki::new("s10");
    let opts = ClusterOpts {
        extra_args: vec![
            "--tls-cert".into(),
            pki.server_cert().display().to_string(),
            "--tls-key".into(),
            pki.server_key().display().to_string(),
        ],
        ..Default::default()
    };
    let mut c = Cluster::start(3, opts).expect("cluster");
    assert!(
        c.wait_listening(Duration::from_secs(15)),
        "controllers did not start"
    );
    // The plaintext probe cannot see roles here: a TLS client's first success finds the primary.
    let patient = tls_client(&c.masters(), pki.ca_file()).expect("TLS client");
    let ids: Vec<u64> = (0..3)
        .map(|i| patient.jobsubmit(spec(&format!("s10-{i}"))).unwrap())
        .collect();
    let primary = node_of(&c, &patient);
    // F29 over TLS: a client given only the primary learns the other two from it, on its
    // verified connection.
    let only = c.node(primary).client.to_string();
    let one = tls_client(&only, pki.ca_file()).expect("TLS client of the primary alone");
    one.hello().expect("hello over TLS");
    assert_eq!(one.masters().len(), 3, "{:?}", one.masters());
    drop(one);
    let hasty = tls_client(&c.masters(), pki.ca_file()).unwrap();
    hasty.hello().unwrap();
    hasty.set_retry_config(Some(short_budget())).unwrap();

    c.kill(primary);
    assert_eq!(
        hasty.joblist(JobFilter::default()).err(),
        Some(Error::NotReady)
    );
    let t = Instant::now();
    let mut listed = all_job_ids(&patient);
    eprintln!("S10: TLS client recovered {:?} after the kill", t.elapsed());
    listed.sort_unstable();
    let mut want = ids.clone();
    want.sort_unstable();
    assert_eq!(listed, want);
    assert_ne!(node_of(&c, &patient), primary);

    // A client that trusts another CA: E_XCE_TLS, nothing sent in clear.
    let other = TestPki::new("s10-other");
    let t = Instant::now();
    let r = tls_client(&c.masters(), other.ca_file());
    assert_eq!(
        r.err(),
        Some(Error::Tls(TlsCause::UnknownCa)),
        "wrong CA must fail the handshake"
    );
    assert!(t.elapsed() < Duration::from_secs(10));
}
