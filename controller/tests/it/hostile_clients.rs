//! S15 extended (C9 amended, C13 amended; issue 27): hostile clients on the client port of
//! real controllers, through raw sockets and TLS streams made here.
//!
//! - strangers (idle and half-open sockets, anonymous TLS connections) never take an
//!   authenticated caller's slot, evict each other, and are logged once a second with a count;
//! - a TLS handshake has a deadline; an anonymous connection does not live for ever on `nop`;
//! - a frame has a deadline from its first byte; an anonymous connection buffers little (RSS);
//! - no identity outlives its certificate: a connection closes when its certificate expires,
//!   and a later session (resumed or not) with it is refused; a CA's path length holds;
//! - a client id is bound to the identity that uses it (exactly-once per identity);
//! - the loopback rule judges the address bound (a name in a hosts file of a namespace);
//! - data files are the node's user's alone; idle connections do not starve a scrape;
//! - the log names what happened (an oversized request, a forwarded refusal's member).
//!
//! `XCE_CONTROLLER=/path/to/an/older/xce-controller` runs them against that build (they fail
//! against the build before issue 27's fixes, each at the promise it checks).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use xce_proto::wire::{self, Op, QueueAction, ReplyData};

/// The controller's bounds, as the tests expect them (docs/security.md states them).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
const ANONYMOUS_LIFETIME: Duration = Duration::from_secs(10);
const FRAME_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_UNAUTHENTICATED: usize = 64;

fn pem_certs(p: &Path) -> Vec<CertificateDer<'static>> {
    rustls_pemfile::certs(&mut std::io::BufReader::new(
        std::fs::File::open(p).unwrap(),
    ))
    .map(|c| c.unwrap())
    .collect()
}

/// A client configuration trusting `dir/ca.pem`, presenting `chain` and its key if given. One
/// configuration keeps one session cache: connections made with it resume where they can.
fn config(
    dir: &Path,
    chain: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in pem_certs(&dir.join("ca.pem")) {
        roots.add(c).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots);
    Arc::new(match chain {
        None => b.with_no_client_auth(),
        Some((c, k)) => b.with_client_auth_cert(c, k).unwrap(),
    })
}

/// A test client over TLS made with `cfg` (the handshake completed from the client's side:
/// a refusal of its certificate arrives at its first read).
fn tls_with(addr: &str, cfg: &Arc<rustls::ClientConfig>) -> std::io::Result<WireClient> {
    let name = ServerName::try_from("127.0.0.1".to_string()).unwrap();
    let conn = rustls::ClientConnection::new(cfg.clone(), name).map_err(std::io::Error::other)?;
    let tcp = TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(2))?;
    tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    let tcp = s.sock.try_clone()?;
    Ok(WireClient::over(Box::new(s), tcp))
}

/// A request carrying `token`.
fn with_token(c: &mut WireClient, op: Op, token: &str) -> wire::Request {
    let mut r = c.request(op);
    r.auth_token = token.to_string();
    r
}

/// Open descriptors of a process.
fn fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// How long until the server closes `c` (EOF, reset, an alert), up to `limit`; `None` if it
/// is still open then. Data that arrives meanwhile is read and ignored.
fn closes_within(c: &mut WireClient, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut b = [0u8; 256];
    while start.elapsed() < limit {
        c.set_timeout((limit - start.elapsed()).max(Duration::from_millis(10)));
        match c.stream.read(&mut b) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Some(start.elapsed()),
        }
    }
    None
}

/// C9 amended: a crowd of strangers — idle sockets that never send a byte, anonymous TLS
/// connections — never keeps an authenticated caller out, even with few slots: a certificate
/// holder and a token holder are served while 400 strangers come and go. The strangers hold
/// at most their own budget of descriptors, and the node logs them once a second with a count.
#[test]
fn s15_strangers_never_take_an_authenticated_callers_slot() {
    let (certs, ctrl, _) = tls_cluster(1, 3, &["--max-connections", "8"]);
    let dir = certs.path();
    let addr = ctrl.addr(1).clone();
    let pid = ctrl.pid(1);
    let fds0 = fds(pid);
    // Anonymous TLS connections (no certificate: tokens are accepted), then idle sockets.
    let mut anonymous = Vec::new();
    for _ in 0..20 {
        anonymous.push(try_tls_client(&addr, dir, None).expect("anonymous handshake"));
    }
    let idle: Vec<TcpStream> = (0..400)
        .map(|_| TcpStream::connect(&addr).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let during = fds(pid);
    // Authenticated callers are served meanwhile: a certificate, and a token.
    let mut admin = tls_client(&addr, dir, Some("admin"));
    admin.ok(Op::ResList);
    let bob = token(dir, &["user-bob"]);
    let mut t = try_tls_client(&addr, dir, None).expect("token caller's handshake");
    let req = with_token(&mut t, Op::ResList, &bob);
    assert_eq!(t.try_send_recv(&req).unwrap().status, 0, "token caller");
    // Both stay served while more strangers arrive (they hold slots, not places).
    let more: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(&addr).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    admin.ok(Op::ResList);
    let req = with_token(&mut t, Op::WorkerList, &bob);
    assert_eq!(t.try_send_recv(&req).unwrap().status, 0);
    eprintln!(
        "descriptors of the node: {fds0} before, {during} with 420 strangers, {} with 600",
        fds(pid)
    );
    assert!(
        during <= fds0 + MAX_UNAUTHENTICATED + 8,
        "strangers hold {during} descriptors (from {fds0})"
    );
    // Once a second per kind, with a count.
    ctrl.wait_until(
        "the count of evicted strangers",
        Duration::from_secs(5),
        || {
            ctrl.log(1)
                .contains("more \"unauthenticated connection evicted\"")
                || ctrl.log(1).contains("more like it")
        },
    );
    let log = ctrl.log(1);
    let lines = log
        .lines()
        .filter(|l| l.contains("unauthenticated connections already") || l.contains("limit"))
        .count();
    assert!(lines <= 10, "{lines} lines for 600 strangers:\n{log}");
    drop((idle, more, anonymous));
}

/// C9 amended: a TLS handshake must finish within a short deadline from the accept.
#[test]
fn s15_a_handshake_has_a_deadline() {
    let (_certs, ctrl, _) = tls_cluster(1, 3, &[]);
    let connected = Instant::now();
    let silent = TcpStream::connect(ctrl.addr(1)).unwrap();
    let mut silent = WireClient::over(Box::new(silent.try_clone().unwrap()), silent);
    // The header of a handshake record (512 bytes announced, none sent) on another one.
    let mut half = TcpStream::connect(ctrl.addr(1)).unwrap();
    half.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).unwrap();
    let mut half = WireClient::over(Box::new(half.try_clone().unwrap()), half);
    let mut took = Vec::new();
    for c in [&mut silent, &mut half] {
        took.push(closes_within(c, Duration::from_secs(15)).map(|_| connected.elapsed()));
    }
    eprintln!(
        "handshakes closed {:?} (nothing sent) and {:?} (a record header) after the connect",
        took[0], took[1]
    );
    for t in took {
        let t = t.expect("a handshake that never finishes is closed");
        assert!(
            t <= HANDSHAKE_TIMEOUT + Duration::from_secs(2),
            "closed only after {t:?}"
        );
    }
    assert!(ctrl.logged(1, "TLS handshake not done within"));
}

/// C9 amended: an anonymous connection does not live for ever, whatever it sends (`nop`
/// every half second); a token caller's connection does.
#[test]
fn s15_anonymous_connections_do_not_live_for_ever() {
    let (certs, ctrl, _) = tls_cluster(1, 3, &[]);
    let dir = certs.path();
    let addr = &ctrl.addr(1);
    let bob = token(dir, &["user-bob"]);
    let mut anon = try_tls_client(addr, dir, None).unwrap();
    let mut tok = try_tls_client(addr, dir, None).unwrap();
    let start = Instant::now();
    let mut anon_closed = None;
    while start.elapsed() < ANONYMOUS_LIFETIME + Duration::from_secs(8) {
        if anon_closed.is_none() && anon.try_call(Op::Nop).is_err() {
            anon_closed = Some(start.elapsed());
        }
        let req = with_token(&mut tok, Op::Nop, &bob);
        let r = tok.try_send_recv(&req);
        assert!(
            matches!(&r, Ok(r) if r.status == 0),
            "the token caller was closed after {:?}: {r:?}",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("anonymous connection doing nop closed after {anon_closed:?}");
    // Closed while it kept sending nop, within the run (its lifetime and 8 s more; the idle
    // timeout it used to live on is 600 s): not a tighter bound, which a loaded machine's
    // late poll would decide.
    anon_closed.expect("an anonymous connection lived on nop for its lifetime and 8 s more");
}

/// C9 amended: a frame must be complete within 30 s of its first byte, however it trickles
/// (the segment table of a 1,000-word frame, then a byte every 8 s); before, each read had
/// 30 s, so such a connection lived as long as the bytes kept coming.
#[test]
fn s15_a_frame_has_a_deadline_from_its_first_byte() {
    let (certs, ctrl, _) = tls_cluster(1, 3, &[]);
    let mut c = tls_client(&ctrl.addr(1), certs.path(), Some("admin"));
    c.ok(Op::Nop);
    // One segment of 1,000 words.
    c.stream.write_all(&[0, 0, 0, 0, 0xe8, 0x03, 0, 0]).unwrap();
    c.stream.flush().unwrap();
    let start = Instant::now();
    let mut closed = None;
    while start.elapsed() < FRAME_TIMEOUT + Duration::from_secs(15) {
        if closes_within(&mut c, Duration::from_secs(8)).is_some() {
            closed = Some(start.elapsed());
            break;
        }
        if c.stream
            .write_all(&[0])
            .and_then(|()| c.stream.flush())
            .is_err()
        {
            closed = Some(start.elapsed());
            break;
        }
    }
    eprintln!("trickled frame closed after {closed:?}");
    let t = closed.expect("a trickled frame outlived its deadline");
    assert!(
        t >= FRAME_TIMEOUT - Duration::from_secs(1) && t <= FRAME_TIMEOUT + Duration::from_secs(5),
        "closed after {t:?}"
    );
    assert!(ctrl.logged(1, "frame not complete within 30s of its first byte"));
}

/// C9 amended: what an anonymous connection may buffer is far smaller than an authenticated
/// one's frame: four anonymous connections each announcing a 15 MiB frame and sending it cost
/// the node almost nothing (before: +60 MiB resident, the bytes as they arrived).
#[test]
fn s15_an_anonymous_connection_buffers_little() {
    let (certs, ctrl, _) = tls_cluster(1, 3, &[]);
    let pid = ctrl.pid(1);
    let before = status_kb(pid, "VmHWM:").unwrap();
    let words: u32 = (15 << 20) / 8;
    let senders: Vec<_> = (0..4)
        .map(|_| {
            let addr = ctrl.addr(1).clone();
            let dir = certs.path().to_path_buf();
            std::thread::spawn(move || {
                let mut c = try_tls_client(&addr, &dir, None).unwrap();
                let mut head = vec![0u8, 0, 0, 0];
                head.extend_from_slice(&words.to_le_bytes());
                let chunk = vec![0u8; 256 << 10];
                let mut sent = 0usize;
                if c.stream.write_all(&head).is_ok() {
                    while sent < (15 << 20) {
                        if c.stream.write_all(&chunk).is_err() {
                            break;
                        }
                        sent += chunk.len();
                    }
                }
                let _ = c.stream.flush();
                // Give the node the time to buffer what it was sent.
                std::thread::sleep(Duration::from_millis(500));
                sent
            })
        })
        .collect();
    let sent: Vec<usize> = senders.into_iter().map(|t| t.join().unwrap()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let after = status_kb(pid, "VmHWM:").unwrap();
    eprintln!(
        "4 anonymous 15 MiB frames: sent {:?} KiB; node peak RSS {before} -> {after} kB",
        sent.iter().map(|s| s >> 10).collect::<Vec<_>>()
    );
    assert!(
        after < before + 16 * 1024,
        "peak RSS grew {before} -> {after} kB"
    );
    assert!(ctrl.logged(1, "over the frame limit of an unauthenticated connection"));
    // Still serving.
    tls_client(&ctrl.addr(1), certs.path(), Some("admin")).ok(Op::ResList);
}

/// The CA in `dir` (its `ca.pem` and `ca.key`), to sign with.
fn ca_in(dir: &Path) -> rcgen::Issuer<'static, rcgen::KeyPair> {
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap();
    let key = rcgen::KeyPair::from_pem(&read("ca.key")).unwrap();
    rcgen::Issuer::from_ca_cert_pem(&read("ca.pem"), key).unwrap()
}

/// A certificate for `name` signed by the CA in `dir` (its `ca.pem` and `ca.key`), valid
/// from a minute ago for `secs` seconds: (chain, key).
fn short_lived(
    dir: &Path,
    name: &str,
    secs: i64,
) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let ca = ca_in(dir);
    let mut p = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    p.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::seconds(60);
    p.not_after = now + time::Duration::seconds(secs);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca).unwrap();
    (
        vec![cert.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
}

/// What an admin call to close a queue that does not exist answers on `c`: ENOENT for an
/// admin, E_XCE_AUTH for anyone else, an error when the connection is refused.
fn close_no_queue(c: &mut WireClient) -> Result<i32, xce::Error> {
    c.try_call(Op::QueueCtrl {
        queue: "no-such-queue".into(),
        action: QueueAction::Close,
    })
    .map(|r| r.status)
}

/// C13 amended: no identity outlives its certificate. With an 8-second admin certificate: a
/// connection made before it expires is closed when it does (before: it stayed admin for as
/// long as it lived), and sessions after it — resumed with the first connection's session
/// where the node offers tickets, or not — are refused: never admin (before: resumptions 3,
/// 5 and 7 s after expiry were admin).
#[test]
fn s15_no_identity_outlives_its_certificate() {
    let (certs, ctrl, _) = tls_cluster(1, 3, &[]);
    let addr = &ctrl.addr(1);
    let secs = 8;
    let cert = short_lived(certs.path(), "admin", secs);
    let born = Instant::now();
    // One configuration: its session cache holds whatever tickets the node sends.
    let cfg = config(certs.path(), Some(cert));
    let mut first = tls_with(addr, &cfg).unwrap();
    assert_eq!(
        close_no_queue(&mut first),
        Ok(-libc::ENOENT),
        "admin before expiry"
    );
    let closed = closes_within(&mut first, Duration::from_secs(secs as u64 + 6));
    eprintln!(
        "the connection of an {secs}-second certificate closed {:?} after it was made",
        closed.map(|_| born.elapsed())
    );
    let after_expiry = born.elapsed();
    assert!(
        closed.is_some() && after_expiry <= Duration::from_secs(secs as u64 + 3),
        "a connection outlived its certificate"
    );
    assert!(
        after_expiry >= Duration::from_secs(secs as u64 - 2),
        "closed early: {after_expiry:?}"
    );
    // Later sessions with the same configuration (a resumption if the node offered one).
    let mut answers = Vec::new();
    for _ in 0..3 {
        let r = tls_with(addr, &cfg)
            .map_err(|e| e.to_string())
            .and_then(|mut c| close_no_queue(&mut c).map_err(|e| e.to_string()));
        answers.push(r);
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!("sessions after expiry: {answers:?}");
    for a in &answers {
        assert!(
            a.is_err() || *a == Ok(-xce_proto::error::E_XCE_AUTH),
            "a session after expiry answered {a:?} (admin: ENOENT)"
        );
    }
    assert!(ctrl.logged(1, "certificate expired"));
}

/// A CA's path length constraint holds (issue 27): `pki init` makes a CA with pathLen 0, so
/// an intermediate CA under it issues nothing the nodes accept — neither a client identity on
/// the client port nor a member's certificate on the raft port (before: admin, and a member).
#[test]
fn s15_an_intermediate_under_a_path_length_0_ca_is_refused() {
    let (certs, ctrl, _) = tls_cluster(1, 3, &[]);
    let dir = certs.path();
    let ca = ca_in(dir);
    let mut ip = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ip.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ip.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    ip.distinguished_name
        .push(rcgen::DnType::CommonName, "an intermediate");
    let ikey = rcgen::KeyPair::generate().unwrap();
    let icert = ip.signed_by(&ikey, &ca).unwrap();
    let inter = rcgen::Issuer::new(ip, ikey);
    let leaf = |name: &str, server: bool| {
        let mut p =
            rcgen::CertificateParams::new(vec![name.to_string(), "127.0.0.1".to_string()]).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        if server {
            p.extended_key_usages
                .push(rcgen::ExtendedKeyUsagePurpose::ServerAuth);
        }
        let k = rcgen::KeyPair::generate().unwrap();
        let c = p.signed_by(&k, &inter).unwrap();
        (
            vec![c.der().clone(), icert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(k.serialize_der())),
        )
    };
    // The client port: "admin" through the intermediate.
    let r = tls_with(&ctrl.addr(1), &config(dir, Some(leaf("admin", false))))
        .map_err(|e| e.to_string())
        .and_then(|mut c| close_no_queue(&mut c).map_err(|e| e.to_string()));
    eprintln!("admin through an intermediate CA: {r:?}");
    assert!(r.is_err(), "an intermediate's admin was served: {r:?}");
    // The raft port: a member's name (node 1's own, the only member) through the intermediate.
    let name = ServerName::try_from("xce-node-1".to_string()).unwrap();
    let conn =
        rustls::ClientConnection::new(config(dir, Some(leaf("xce-node-1", true))), name).unwrap();
    let tcp = TcpStream::connect(ctrl.raft_addr(1)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut s = rustls::StreamOwned::new(conn, tcp);
    // Stamped with the cluster's own id: only the certificate can be the reason it is refused.
    let id = ctrl.cluster_id_via(|a| tls_client(a, dir, Some("admin")));
    let r = raft_wire::call(&mut s, &raft_wire::vote(0, 1), id);
    eprintln!("member 1 through an intermediate CA: {r:?}");
    assert!(r.is_err(), "an intermediate's member was answered: {r:?}");
    // The CA's own certificates still work.
    tls_client(&ctrl.addr(1), dir, Some("admin")).ok(Op::ResList);
}

/// C13 amended: a client id is bound to the identity that uses it. Bob sending a write with
/// alice's client id and request id gets his own write applied — not alice's stored reply —
/// and alice's re-send still gets her first reply (exactly once, per identity). On a
/// three-node cluster; the same through a standby (forwarded), whose refusals the primary
/// logs with the member that forwarded them.
#[test]
fn s15_a_client_id_is_bound_to_its_identity() {
    let (certs, ctrl, p) = tls_cluster(3, 3, &[]);
    let dir = certs.path();
    let standby = if p == 1 { 2 } else { 1 };
    let paddr = &ctrl.addr(p);
    let mut alice = tls_client(paddr, dir, Some("user-alice"));
    let mut bob = tls_client(paddr, dir, Some("user-bob"));
    bob.client_id = alice.client_id;
    let (a1, b1) = (rand_u64() >> 1, rand_u64() >> 1);
    let ra = alice.call(submit(a1, "alice", ""));
    assert_eq!((ra.status, &ra.data), (0, &ReplyData::JobId(a1)));
    // Bob: the same client id and request id (1), his own job.
    let rb = bob.call(submit(b1, "bob", ""));
    assert_eq!(
        (rb.status, &rb.data),
        (0, &ReplyData::JobId(b1)),
        "bob got alice's reply"
    );
    let mut admin = tls_client(paddr, dir, Some("admin"));
    assert_eq!(job(admin.ok(Op::JobInfo { job_id: b1 })).user, "bob");
    // Alice's re-send (same request id): her first reply, no second job.
    alice.next_request_id = 1;
    let again = alice.call(submit(rand_u64() >> 1, "alice", ""));
    assert_eq!((again.status, &again.data), (0, &ReplyData::JobId(a1)));
    // Through a standby: bob's next write under alice's id, forwarded.
    let mut via = tls_client(&ctrl.addr(standby), dir, Some("user-bob"));
    via.client_id = alice.client_id;
    via.next_request_id = 2;
    let (a2, b2) = (rand_u64() >> 1, rand_u64() >> 1);
    alice.next_request_id = 2;
    alice.ok(submit(a2, "alice", ""));
    let mut req = via.request(submit(b2, "bob", ""));
    req.forward_within_ms = 3000;
    let r = via.try_send_recv(&req).unwrap();
    assert_eq!((r.status, &r.data), (0, &ReplyData::JobId(b2)), "forwarded");
    // A forwarded refusal names the member that forwarded it, not 0.0.0.0:0.
    let mut req = via.request(Op::JobCtrl {
        job_id: a1,
        action: wire::JobAction::Kill,
    });
    req.forward_within_ms = 3000;
    let r = via.try_send_recv(&req).unwrap();
    assert_eq!(r.status, -xce_proto::error::E_XCE_AUTH);
    assert!(
        ctrl.logged(p, "forwarded by the member at 127.0.0.1:"),
        "{}",
        ctrl.log(p)
    );
    assert!(!ctrl.log(p).contains("0.0.0.0:0"), "{}", ctrl.log(p));
    // An oversized request is logged as a request, not as a reply.
    let mut big = tls_client(paddr, dir, Some("admin"));
    big.stream
        .write_all(&[0, 0, 0, 0, 0, 0, 0, 8])
        .and_then(|()| big.stream.flush())
        .unwrap();
    assert!(closes_within(&mut big, Duration::from_secs(5)).is_some());
    assert!(ctrl.logged(
        p,
        "bad frame: a request over the frame limit (16777216 bytes)"
    ));
    assert!(!ctrl.log(p).contains("reply too large"));
}

/// Runs `xce-controller ARGS` in a network namespace of its own whose `/etc/hosts` is `hosts`
/// (a bind mount in a mount namespace of its own: the machine's file is untouched) and which
/// has 192.0.2.2 (on its loopback interface: an address that is not 127/8) : the exit code (`None`: it was serving, and was
/// stopped) and its stderr. Needs root (the test command runs as root): fails otherwise.
fn run_with_hosts(dir: &Path, hosts: &str, args: &[&str]) -> (Option<i32>, String) {
    let n = rand_u64();
    let h = dir.join(format!("hosts-{n}"));
    std::fs::write(&h, hosts).unwrap();
    let script = format!(
        "set -e; ip link set lo up; ip addr add 192.0.2.2/24 dev lo; \
         mount --bind {} /etc/hosts; exec \"$@\"",
        h.display()
    );
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--net",
        "--mount",
        "--fork",
        "--kill-child",
        "--",
        "sh",
        "-c",
    ])
    .arg(&script)
    .arg("sh")
    .arg(bin())
    .args(args);
    let serving = |err: &str| err.contains("serving clients");
    let (code, _, text) = run_until(&mut cmd, Duration::from_secs(20), serving);
    assert!(
        code.is_some() || serving(&text),
        "neither refused nor serving in 20 s:\n{text}"
    );
    assert!(
        !text.contains("Operation not permitted") && !text.contains("unshare failed"),
        "namespaces are needed here (root): {text}"
    );
    (code, text)
}

/// C13 amended: the loopback rule judges the addresses bound, never a name. In a namespace
/// whose hosts file says `192.0.2.2 evil.localhost` (an address of the namespace), `run` on
/// evil.localhost refuses plaintext without --insecure, and TLS without a way to check
/// callers; a `localhost` entry broken the same way likewise; a name that leads to
/// 127.0.0.1 still runs in plaintext, and evil.localhost with every link secured runs.
#[test]
fn s15_the_loopback_rule_judges_the_address_bound() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("pki");
    make_pki(&certs, 1);
    let f = |n: &str| certs.join(n).display().to_string();
    let data = |n: &str| dir.path().join(n).display().to_string();
    let hosts = "127.0.0.1 localhost good.localhost\n192.0.2.2 evil.localhost\n";
    let evil = "1=evil.localhost:7001/evil.localhost:7002";
    let run = |hosts: &str, cluster: &str, d: &str, extra: &[String]| {
        let mut a: Vec<String> = ["run", "--id", "1", "--cluster", cluster, "--data", &data(d)]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(extra.iter().cloned());
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run_with_hosts(dir.path(), hosts, &a)
    };
    // Plaintext on a name that resolves off loopback.
    let (code, err) = run(hosts, evil, "d1", &[]);
    eprintln!("plaintext on evil.localhost: {code:?}\n{err}");
    assert_eq!(code, Some(1), "started in plaintext on 192.0.2.2:\n{err}");
    assert!(
        err.contains("evil.localhost:7001 (bound to 192.0.2.2) is not loopback"),
        "{err}"
    );
    // A broken localhost entry.
    let (code, err) = run(
        "192.0.2.2 localhost\n",
        "1=localhost:7001/localhost:7002",
        "d2",
        &[],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("(bound to 192.0.2.2) is not loopback"),
        "{err}"
    );
    // TLS without a way to check callers: every caller would be admin.
    let tls = vec![
        "--tls-cert".to_string(),
        f("xce-node-1.pem"),
        "--tls-key".into(),
        f("xce-node-1.key"),
        "--tls-peer-ca".into(),
        f("ca.pem"),
    ];
    let (code, err) = run(hosts, evil, "d3", &tls);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("checks no caller"), "{err}");
    // Every link secured: it runs there.
    let mut secured = tls.clone();
    secured.extend(["--tls-client-ca".to_string(), f("ca.pem")]);
    let (code, err) = run(hosts, evil, "d4", &secured);
    assert_eq!(code, None, "secured on 192.0.2.2 refused:\n{err}");
    // A name that leads to loopback stays easy.
    let (code, err) = run(
        hosts,
        "1=good.localhost:7001/good.localhost:7002",
        "d5",
        &[],
    );
    assert_eq!(code, None, "plaintext on a loopback name refused:\n{err}");
    // The metrics endpoint off loopback, plaintext and unauthenticated, needs saying so.
    let mut m = secured.clone();
    m.extend(["--metrics".to_string(), "evil.localhost:7003".into()]);
    let (code, err) = run(hosts, evil, "d6", &m);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("metrics address evil.localhost:7003 (bound to 192.0.2.2)"),
        "{err}"
    );
    m.push("--metrics-public".into());
    let (code, err) = run(hosts, evil, "d7", &m);
    assert_eq!(code, None, "{err}");
}

/// C13 amended: data files are readable by the node's user only — its directory 0700 and its
/// files 0600, whoever made the directory (here: 0755, with a file 0644 in it, as an older
/// build left it); another user cannot read the log.
#[test]
fn s15_data_files_are_the_nodes_alone() {
    use std::os::unix::fs::PermissionsExt;
    let mut ctrl = prepared(1, &[]);
    let data = ctrl.data_dir().join("data-1");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let old = data.join("left-by-an-older-build");
    std::fs::write(&old, "x").unwrap();
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
    ctrl.start_node(1);
    ctrl.expect_primary(STARTUP);
    ctrl.client(1).ok(submit(rand_u64() >> 1, "alice", ""));
    let mut seen = Vec::new();
    let mut stack = vec![data.clone()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        seen.push((p.clone(), m.permissions().mode() & 0o777));
        if m.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    eprintln!("{seen:?}");
    let open: Vec<_> = seen.iter().filter(|(_, m)| m & 0o077 != 0).collect();
    assert!(open.is_empty(), "readable by others: {open:?}");
    assert!(seen.iter().any(|(p, _)| p.ends_with("raft.meta")));
    let segment = seen
        .iter()
        .map(|(p, _)| p)
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .expect("a log segment (log/*.seg)");
    // Another user (nobody) cannot read the log.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
        .arg(segment)
        .output()
        .expect("setpriv (util-linux)");
    assert!(!out.status.success(), "nobody read {}", segment.display());
}

/// Issue 27: 16 idle connections to the metrics endpoint held every place for 5 s each, and
/// scrapes meanwhile were closed unanswered; now a newcomer evicts the oldest.
#[test]
fn s15_idle_connections_do_not_starve_a_scrape() {
    let port = free_ports(1)[0];
    let m = format!("127.0.0.1:{port}");
    let ctrl = cluster(1, &["--metrics", &m]);
    ctrl.expect_primary(STARTUP);
    let idle: Vec<TcpStream> = (0..32).map(|_| TcpStream::connect(&m).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let mut s = TcpStream::connect(&m).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    eprintln!("scrape beside 32 idle connections: {:?}", start.elapsed());
    assert!(body.starts_with("HTTP/1.1 200"), "{body:?}");
    assert!(body.contains("xce_raft_term"), "{body}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    drop(idle);
}
