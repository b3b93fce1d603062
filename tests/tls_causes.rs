//! A failed TLS connection names its cause (issue 11): unknown CA, expired, not yet valid, name
//! mismatch, refused by the controller, not TLS at all, handshake timeout — each with its own
//! text in the error, in the last error of a call, and in the log. Real sockets on loopback;
//! every server is a thread of this test that ends with it.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use xce::client::log::Level;
use xce::client::Client;
use xce::client::{Endpoint, Options};
use xce::{Error, TlsCause};
use xce_proto::error::E_XCE_TLS;
use xce_testkit::fake::{fast_options, fast_retry, FakeController};

mod common;

/// A CA and, per case, a server identity it signs (or another CA signs).
struct Pki {
    dir: PathBuf,
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

/// How a server's certificate is wrong.
#[derive(Clone, Copy)]
enum Leaf {
    Good,
    Expired,
    NotYetValid,
    OtherName,
}

impl Pki {
    fn new(tag: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("xce-tlscause-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, format!("xce cause CA {tag}"));
        let ca =
            rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        Pki { dir, ca }
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A TLS 1.3 server config presenting a leaf of this CA; client certificates required when
    /// `mutual`.
    fn server(&self, leaf: Leaf, mutual: bool) -> Arc<rustls::ServerConfig> {
        let names = match leaf {
            Leaf::OtherName => vec!["controller.invalid".to_string()],
            _ => vec!["localhost".to_string(), "127.0.0.1".to_string()],
        };
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        match leaf {
            Leaf::Expired => {
                params.not_before = rcgen::date_time_ymd(2001, 1, 1);
                params.not_after = rcgen::date_time_ymd(2002, 1, 1);
            }
            Leaf::NotYetValid => {
                params.not_before = rcgen::date_time_ymd(2090, 1, 1);
                params.not_after = rcgen::date_time_ymd(2091, 1, 1);
            }
            _ => {}
        }
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap();
        let builder = if mutual {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(self.ca.der().clone()).unwrap();
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(v)
        } else {
            builder.with_no_client_auth()
        };
        Arc::new(
            builder
                .with_single_cert(
                    vec![cert.der().clone()],
                    rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
                )
                .unwrap(),
        )
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a [`BadServer`] does with each connection.
#[derive(Clone)]
enum Behaviour {
    /// A TLS handshake with this config; on failure the alert goes out, then the server reads
    /// until the client closes (so the alert is never overtaken by a reset).
    Tls(Arc<rustls::ServerConfig>),
    /// Plaintext bytes that are not TLS, then the same draining.
    Plaintext,
    /// Accepts and says nothing.
    Silent,
}

/// A loopback server that never serves a request; stopped and joined on drop.
struct BadServer {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl BadServer {
    fn start(b: Behaviour) -> BadServer {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = vec![];
            while !st.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((s, _)) => {
                        s.set_nonblocking(false).unwrap();
                        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                        held.push(serve(s, &b, &st));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(_) => break,
                }
            }
        });
        BadServer {
            port,
            stop,
            thread: Some(thread),
        }
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint::new("127.0.0.1", self.port)
    }
}

impl Drop for BadServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Handles one connection to its end (bounded by `stop` and a 20 s cap); returns the socket for
/// the silent case, which must stay open.
fn serve(mut s: TcpStream, b: &Behaviour, stop: &AtomicBool) -> Option<TcpStream> {
    match b {
        Behaviour::Silent => return Some(s),
        Behaviour::Plaintext => {
            let _ = s.write_all(b"HTTP/1.0 400 this is not TLS\r\n\r\n");
        }
        Behaviour::Tls(cfg) => {
            let mut conn = rustls::ServerConnection::new(cfg.clone()).unwrap();
            let end = Instant::now() + Duration::from_secs(20);
            while conn.is_handshaking() && Instant::now() < end && !stop.load(Ordering::SeqCst) {
                match conn.complete_io(&mut s) {
                    Ok(_) => {}
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(_) => {
                        let _ = conn.write_tls(&mut s);
                        break;
                    }
                }
            }
            // A client whose certificate was refused learns it after its own handshake
            // finished (TLS 1.3): the alert goes out with the next records.
            let mut buf = [0u8; 4096];
            if let Ok(n) = s.read(&mut buf) {
                let _ = conn.read_tls(&mut &buf[..n]);
                if conn.process_new_packets().is_err() {
                    let _ = conn.write_tls(&mut s);
                }
            }
        }
    }
    let _ = s.shutdown(Shutdown::Write);
    let mut buf = [0u8; 4096];
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end && !stop.load(Ordering::SeqCst) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    None
}

fn options() -> Options {
    Options {
        connect_timeout: Duration::from_millis(400),
        ..fast_options()
    }
}

/// Log lines of this process at WARN and above. One sink for the whole test binary (the sink
/// is process-wide and tests run in parallel); each test looks for its own text and port.
fn log_lines() -> common::LogLines {
    static LINES: OnceLock<common::LogLines> = OnceLock::new();
    LINES
        .get_or_init(|| common::captured_log(Level::Warn))
        .clone()
}

/// The distinct phrase each cause's text must carry.
fn phrase(c: TlsCause) -> &'static str {
    match c {
        TlsCause::UnknownCa => "unknown CA",
        TlsCause::Expired => "has expired",
        TlsCause::NotYetValid => "not valid yet",
        TlsCause::NameMismatch => "does not match the host name",
        TlsCause::RefusedByPeer => "refused the handshake",
        TlsCause::NotTls => "does not speak TLS",
        TlsCause::HandshakeTimeout => "handshake timed out",
        TlsCause::BadCertificate => "certificate is invalid",
        TlsCause::LocalConfig => "local CA, certificate or key",
        TlsCause::Unspecified => "TLS handshake or certificate verification failed",
        TlsCause::PeerSpeaksTls => "configured without it",
    }
}

/// Starts a client against a server that fails the handshake this way; the error, its code,
/// its text and the log must all name `cause`.
fn check(what: &str, behaviour: Behaviour, ca: PathBuf, cause: TlsCause) {
    let lines = log_lines();
    let server = BadServer::start(behaviour);
    let t = Instant::now();
    let r = Client::start_with(
        common::tls_config(vec![server.endpoint()], ca, None, None),
        options(),
        fast_retry(0),
    );
    let e = r
        .err()
        .unwrap_or_else(|| panic!("{what}: the handshake succeeded"));
    assert_eq!(e, Error::Tls(cause), "{what}");
    let text = e.to_string();
    assert!(text.contains(phrase(cause)), "{what}: {text}");
    for other in TlsCause::ALL.into_iter().filter(|c| *c != cause) {
        assert!(
            !text.contains(phrase(other)),
            "{what}: {text} also reads as {other:?}"
        );
    }
    let want_code = if cause == TlsCause::HandshakeTimeout {
        libc::ETIMEDOUT // a hung controller stays a timeout (F8); only the text says TLS
    } else {
        E_XCE_TLS
    };
    assert_eq!(e.status(), -want_code, "{what}");
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "{what}: took {:?}",
        t.elapsed()
    );
    let logged = lines.lock().clone();
    assert!(
        logged.iter().any(|(_, l)| l.contains(&text)),
        "{what}: the log does not name the cause: {logged:?}"
    );
}

/// Each way a handshake fails names its own cause; the rows run side by side.
#[test]
fn each_failed_handshake_names_its_cause() {
    let (pki, other) = (Pki::new("ca-mine"), Pki::new("ca-other"));
    let tls = |pki: &Pki, leaf| Behaviour::Tls(pki.server(leaf, false));
    use {Leaf as L, TlsCause as C};
    let cases = [
        ("unknown CA", tls(&other, L::Good), C::UnknownCa),
        ("expired", tls(&pki, L::Expired), C::Expired),
        ("not yet valid", tls(&pki, L::NotYetValid), C::NotYetValid),
        ("name mismatch", tls(&pki, L::OtherName), C::NameMismatch),
        ("plaintext", Behaviour::Plaintext, C::NotTls),
        ("silent", Behaviour::Silent, C::HandshakeTimeout),
    ];
    std::thread::scope(|s| {
        for (what, behaviour, cause) in cases {
            let ca = pki.ca_file();
            s.spawn(move || check(what, behaviour, ca, cause));
        }
    });
}

#[test]
fn a_refused_client_certificate_is_named_as_such() {
    let pki = Pki::new("mutual");
    let server = BadServer::start(Behaviour::Tls(pki.server(Leaf::Good, true)));
    // TLS 1.3: the client's side of the handshake completes before the server judges the
    // (missing) client certificate, so the refusal normally arrives with the first reply.
    let started = Client::start_with(
        common::tls_config(vec![server.endpoint()], pki.ca_file(), None, None),
        options(),
        fast_retry(0),
    );
    let c = match started {
        Err(e) => return assert_eq!(e, Error::Tls(TlsCause::RefusedByPeer)),
        Ok(c) => c,
    };
    assert_eq!(c.hello().err(), Some(Error::Tls(TlsCause::RefusedByPeer)));
    let text = c
        .last_error()
        .expect("a failed call leaves a report")
        .to_string();
    assert!(text.contains(phrase(TlsCause::RefusedByPeer)), "{text}");
}

#[test]
fn the_last_error_of_a_call_names_the_cause_at_the_master_that_failed() {
    let pki = Pki::new("lasterr");
    let good = FakeController::start_tls(vec![], pki.server(Leaf::Good, false));
    let bad = BadServer::start(Behaviour::Tls(pki.server(Leaf::Expired, false)));
    let c = Client::start_with(
        common::tls_config(
            vec![good.endpoint(), bad.endpoint()],
            pki.ca_file(),
            None,
            None,
        ),
        options(),
        fast_retry(1),
    )
    .expect("the good master serves");
    c.hello().expect("hello on the good master");
    let bad_ep = bad.endpoint();
    drop(good); // the good master goes away: the next call can only reach the expired one
    let e = c.hello().expect_err("no usable master is left");
    let report = c.last_error().expect("a failed call leaves a report");
    let text = report.to_string();
    assert!(
        text.contains(&format!("{bad_ep} transport: {}", TlsCause::Expired)),
        "{e}: {text}"
    );
}

#[test]
fn a_ca_file_without_certificates_is_a_local_problem() {
    let pki = Pki::new("local");
    let bogus = pki.dir.join("empty-ca.pem");
    std::fs::write(&bogus, "not a certificate\n").unwrap();
    let server = BadServer::start(Behaviour::Silent);
    let e = Client::start_with(
        common::tls_config(vec![server.endpoint()], bogus, None, None),
        options(),
        fast_retry(0),
    )
    .err();
    assert_eq!(e, Some(Error::Tls(TlsCause::LocalConfig)));
    assert!(e
        .unwrap()
        .to_string()
        .contains(phrase(TlsCause::LocalConfig)));
}
