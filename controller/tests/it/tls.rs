//! TLS on the client port (C6), with certificates made at test time by rcgen.

use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use xce_proto::wire::Op;

struct Ca {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    Ca {
        cert_pem: cert.pem(),
        cert_der: cert.der().clone(),
        issuer: Issuer::new(params, key),
    }
}

/// A leaf certificate signed by `ca`: (cert PEM, key PEM, cert DER, key DER).
fn leaf(
    ca: &Ca,
    sans: &[&str],
) -> (
    String,
    String,
    CertificateDer<'static>,
    PrivateKeyDer<'static>,
) {
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    (cert.pem(), key.serialize_pem(), cert.der().clone(), key_der)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn client_config(
    trust: &Ca,
    identity: Option<(CertificateDer<'static>, PrivateKeyDer<'static>)>,
) -> ClientConfig {
    let mut roots = RootCertStore::empty();
    roots.add(trust.cert_der.clone()).unwrap();
    let b = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    match identity {
        None => b.with_no_client_auth(),
        Some((c, k)) => b.with_client_auth_cert(vec![c], k).unwrap(),
    }
}

/// Connects with TLS and sends `hello`: the reply status, or the error text.
fn tls_hello(addr: &str, cfg: ClientConfig) -> Result<i32, String> {
    let tcp = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let conn = ClientConnection::new(Arc::new(cfg), name).map_err(|e| e.to_string())?;
    let stream = StreamOwned::new(conn, tcp.try_clone().unwrap());
    let mut c = WireClient::over(Box::new(stream), tcp);
    c.try_call(hello())
        .map(|r| r.status)
        .map_err(|e| e.to_string())
}

fn start_tls(dir: &Path, server_ca: &Ca, client_ca: Option<&Ca>) -> Cluster {
    let (cert, key, _, _) = leaf(server_ca, &["127.0.0.1", "localhost"]);
    let cert = write_file(dir, "server.pem", &cert);
    let key = write_file(dir, "server.key", &key);
    let mut args = vec![
        "--tls-cert".to_string(),
        cert.display().to_string(),
        "--tls-key".into(),
        key.display().to_string(),
    ];
    if let Some(ca) = client_ca {
        let p = write_file(dir, "client-ca.pem", &ca.cert_pem);
        args.extend(["--tls-client-ca".into(), p.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cluster(1, &args)
}

fn wait_tls_primary(ctrl: &Cluster, cfg: impl Fn() -> ClientConfig) {
    ctrl.wait_until("TLS primary", STARTUP, || {
        tls_hello(&ctrl.addr(1), cfg()) == Ok(0)
    });
}

#[test]
fn right_ca_works_wrong_ca_fails() {
    let certs = tempfile::tempdir().unwrap();
    let good = ca("xce test CA");
    let other = ca("some other CA");
    let ctrl = start_tls(certs.path(), &good, None);
    wait_tls_primary(&ctrl, || client_config(&good, None));
    assert_eq!(tls_hello(&ctrl.addr(1), client_config(&good, None)), Ok(0));
    let err = tls_hello(&ctrl.addr(1), client_config(&other, None)).unwrap_err();
    eprintln!("wrong CA: {err}");
    // TLS 1.3 only (protocol.md): a TLS 1.2 client is refused at the handshake.
    let mut roots = RootCertStore::empty();
    roots.add(good.cert_der.clone()).unwrap();
    let tls12 = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    assert!(tls_hello(&ctrl.addr(1), tls12).is_err());
    // A plain-TCP client gets no reply (the server closes after a failed handshake).
    let mut plain = ctrl.client(1);
    assert!(plain.try_call(Op::ResList).is_err());
    ctrl.wait_until("handshake failure logged", Duration::from_secs(5), || {
        ctrl.log(1).contains("TLS handshake failed")
    });
}

#[test]
fn client_certificates_are_verified_when_required() {
    let certs = tempfile::tempdir().unwrap();
    let server_ca = ca("xce server CA");
    let client_ca = ca("xce client CA");
    let rogue_ca = ca("rogue CA");
    let ctrl = start_tls(certs.path(), &server_ca, Some(&client_ca));
    let (_, _, cert, key) = leaf(&client_ca, &["worker1"]);
    let id = move || Some((cert.clone(), key.clone_key()));
    wait_tls_primary(&ctrl, || client_config(&server_ca, id()));
    assert!(
        tls_hello(&ctrl.addr(1), client_config(&server_ca, None)).is_err(),
        "no client cert"
    );
    let (_, _, rc, rk) = leaf(&rogue_ca, &["worker1"]);
    assert!(
        tls_hello(&ctrl.addr(1), client_config(&server_ca, Some((rc, rk)))).is_err(),
        "rogue client cert"
    );
}

/// After the handshake the controller drives rustls on the socket itself (P15): requests
/// split over several records or sharing one, a request and a reply each larger than a
/// record (16 KiB), a record that does not decrypt (closed, the cause logged), and the
/// client's close_notify (closed quietly).
#[test]
fn records_after_the_handshake() {
    use std::io::{Read, Write};
    use xce_proto::wire::{self, ReplyData};
    let (dir, ctrl, _) = tls_cluster(1, 1, &[]);
    let addr = ctrl.addr(1).clone();
    let (ca, cert, key) = (
        dir.path().join("ca.pem"),
        dir.path().join("admin.pem"),
        dir.path().join("admin.key"),
    );
    let stream = || tls_stream(&addr, &ca, Some((&cert, &key)), "127.0.0.1").unwrap();

    // A 40 KiB job (three records each way), then three hellos: the first in three records
    // of its own, the other two sharing one record.
    let mut s = stream();
    let mut seq = 0;
    let mut frame = |op: Op| {
        seq += 1;
        let mut out = Vec::new();
        let req = wire::Request {
            seq,
            client_id: [9; 16],
            request_id: if op.kind() == wire::OpKind::Write {
                seq
            } else {
                0
            },
            no_reply: false,
            op,
            auth_token: String::new(),
            forward_within_ms: 0,
        };
        wire::encode_request(&req, &mut out);
        out
    };
    let big = "x".repeat(40 * 1024);
    let mut job_op = submit(77, "alice", "normal");
    if let Op::JobSubmit(spec) = &mut job_op {
        spec.command = big.clone();
    }
    let submit_frame = frame(job_op);
    let info_frame = frame(Op::JobInfo { job_id: 77 });
    let hellos: Vec<Vec<u8>> = (0..3).map(|_| frame(hello())).collect();
    let limits = wire::Limits::default();
    let mut buf = Vec::new();
    let mut reply = |s: &mut rustls::StreamOwned<_, _>| {
        wire::read_frame(s, &limits, &mut buf).unwrap();
        wire::decode_reply(&buf, &limits).unwrap()
    };
    s.write_all(&submit_frame).unwrap();
    s.flush().unwrap();
    let r = reply(&mut s);
    assert_eq!((r.seq, r.status), (1, 0), "{r:?}");
    s.write_all(&info_frame).unwrap();
    s.flush().unwrap();
    let r = reply(&mut s);
    match r.data {
        ReplyData::Job(j) => assert_eq!(j.command, big),
        other => panic!("expected the job, got {other:?}"),
    }
    let h = &hellos[0];
    for part in [&h[..5], &h[5..17], &h[17..]] {
        s.write_all(part).unwrap(); // one record per write
        s.flush().unwrap();
    }
    s.write_all(&[&hellos[1][..], &hellos[2][..]].concat())
        .unwrap();
    s.flush().unwrap();
    for want in 3..=5 {
        let r = reply(&mut s);
        assert_eq!((r.seq, r.status), (want, 0), "{r:?}");
    }

    // The client's close_notify: the controller closes, and logs nothing about it.
    s.conn.send_close_notify();
    s.flush().unwrap();
    let mut rest = Vec::new();
    let _ = s.sock.read_to_end(&mut rest);
    assert!(!ctrl.log(1).contains("read failed"), "{}", ctrl.log(1));

    // A record that does not decrypt: an alert, then the connection closes; logged.
    let mut s = stream();
    s.sock
        .write_all(
            &[0x17, 3, 3, 0, 32]
                .iter()
                .chain(&[0x5a; 32])
                .copied()
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let t = std::time::Instant::now();
    let mut rest = Vec::new();
    let _ = s.sock.read_to_end(&mut rest);
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "not closed: {:?}",
        t.elapsed()
    );
    assert!(
        rest.starts_with(&[0x15, 3, 3]) || rest.starts_with(&[0x17, 3, 3]),
        "{rest:?}"
    );
    ctrl.wait_until("the bad record logged", Duration::from_secs(5), || {
        ctrl.log(1).contains("read failed")
    });
    assert!(!ctrl.log(1).contains("closed mid-frame"), "{}", ctrl.log(1));
}
