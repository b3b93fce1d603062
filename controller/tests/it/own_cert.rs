//! Issue 26 item 7: a node started with another node's certificate says so at once and does not
//! start (before: it started without a word; the primary logged nothing; the node itself logged
//! BadCertificate ten times a second).

use std::time::{Duration, Instant};

use crate::common::*;

#[test]
fn a_node_with_another_nodes_certificate_refuses_to_start() {
    let certs = tempfile::tempdir().unwrap();
    make_pki(certs.path(), 3);
    let ctrl = prepared(3, &[]);
    let f = |n: &str| certs.path().join(n).display().to_string();
    let data = ctrl.data_dir().join("data-3").display().to_string();
    let args = [
        "run",
        "--id",
        "3",
        "--cluster",
        &ctrl.spec(),
        "--data",
        &data,
        "--tls-cert",
        &f("xce-node-2.pem"),
        "--tls-key",
        &f("xce-node-2.key"),
        "--tls-client-ca",
        &f("ca.pem"),
        "--tls-peer-ca",
        &f("ca.pem"),
    ];
    let t0 = Instant::now();
    let (code, out, err) = run_cli(&args, Duration::from_secs(20));
    let took = t0.elapsed();
    eprintln!("exit {code:?} after {took:?}: {err}");
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("not xce-node-3"), "{err}");
    assert!(err.contains("xce-node-2"), "{err}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}
