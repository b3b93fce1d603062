//! TLS on the client port (C6), with certificates made at test time by rcgen.

mod common;

use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use xce::wire::Op;

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
    let mut c = Client::over(Box::new(stream), tcp);
    c.try_call(hello())
        .map(|r| r.status)
        .map_err(|e| e.to_string())
}

fn start_tls(dir: &Path, server_ca: &Ca, client_ca: Option<&Ca>) -> Ctrl {
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
    Ctrl::start(1, &args)
}

fn wait_tls_primary(ctrl: &Ctrl, cfg: impl Fn() -> ClientConfig) {
    ctrl.wait_until("TLS primary", STARTUP, || {
        tls_hello(&ctrl.clients[&1], cfg()) == Ok(0)
    });
}

#[test]
fn right_ca_works_wrong_ca_fails() {
    let certs = tempfile::tempdir().unwrap();
    let good = ca("xce test CA");
    let other = ca("some other CA");
    let ctrl = start_tls(certs.path(), &good, None);
    wait_tls_primary(&ctrl, || client_config(&good, None));
    assert_eq!(
        tls_hello(&ctrl.clients[&1], client_config(&good, None)),
        Ok(0)
    );
    let err = tls_hello(&ctrl.clients[&1], client_config(&other, None)).unwrap_err();
    eprintln!("wrong CA: {err}");
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
        tls_hello(&ctrl.clients[&1], client_config(&server_ca, None)).is_err(),
        "no client cert"
    );
    let (_, _, rc, rk) = leaf(&rogue_ca, &["worker1"]);
    assert!(
        tls_hello(&ctrl.clients[&1], client_config(&server_ca, Some((rc, rk)))).is_err(),
        "rogue client cert"
    );
}
