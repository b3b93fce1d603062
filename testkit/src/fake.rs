//! Scripted fake controllers for the failover tests, reusable by later suites.
//!
//! A [`FakeController`] listens on 127.0.0.1:0 (one thread per connection, ended when the fake
//! is dropped), records every request it decodes, and answers each reply-bearing request with
//! the next [`Step`] of its script (default: success with the payload the op expects).
//! Fire-and-forget requests are recorded and consume no step.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use xce::client::{Client, Config, Endpoint, Options, RetryConfig};
use xce_proto::error::*;
use xce_proto::wire::*;

/// How the fake answers one request.
#[derive(Debug, Clone)]
pub enum Step {
    /// Success with the payload the op expects.
    Ok,
    /// A bare status (e.g. `-E_XCE_NOT_READY`).
    Status(i32),
    /// `E_XCE_REDIRECT`, with the primary's address or none.
    Redirect(Option<Endpoint>),
    /// `E_XCE_STANDBY`, with the primary's address or none.
    Standby(Option<Endpoint>),
    /// A `waitPrimary` answer naming this primary.
    Primary(Endpoint),
    /// Half of a reply, then the connection is closed.
    CloseMidReply,
    /// The connection is closed without a reply.
    Close,
    /// No reply at all; the connection stays open.
    Silent,
    /// First a reply with a wrong seq, then the right one (success).
    WrongSeqFirst,
    /// `n` replies with wrong seqs, then nothing.
    WrongSeqs(usize),
    /// A frame whose body is not a Cap'n Proto reply.
    Garbage,
    /// A segment table announcing far more than the client's limit.
    Oversized,
    /// Waits, then performs the step.
    After(Duration, Box<Step>),
    /// Success carrying this payload, whatever the op expects.
    Payload(ReplyData),
    /// The first step for a `waitPrimary`, the second for any other op.
    Split(Box<Step>, Box<Step>),
    /// Success (this payload, or the one the op expects) stamped with this membership version
    /// (F29: `Reply::members_version`).
    Versioned(u64, Option<ReplyData>),
    /// Success with this payload written `chunk` bytes at a time, `every` apart: a slow link.
    Trickle {
        data: ReplyData,
        chunk: usize,
        every: Duration,
    },
    /// Whatever bytes the test makes of the request (hand-made frames: F22's hostile replies).
    Raw(Raw),
}

/// Makes the bytes of an answer from the request.
pub type MakeBytes = dyn Fn(&Request) -> Vec<u8> + Send + Sync;

/// The bytes of a [`Step::Raw`] answer to a request.
#[derive(Clone)]
pub struct Raw(pub Arc<MakeBytes>);

impl std::fmt::Debug for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Raw(..)")
    }
}

impl Step {
    /// Answers `waitPrimary` naming `primary`, every other op with `other`.
    pub fn wait_names(primary: Endpoint, other: Step) -> Step {
        Step::Split(Box::new(Step::Primary(primary)), Box::new(other))
    }
}

/// TLS server side of a fake.
pub type ServerTls = Arc<rustls::ServerConfig>;

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

struct Shared {
    script: Mutex<VecDeque<Step>>,
    /// The step once the script is done.
    after: Step,
    log: Mutex<Vec<Request>>,
    connections: AtomicUsize,
    stop: AtomicBool,
    sockets: Mutex<Vec<TcpStream>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// A scripted controller on loopback.
pub struct FakeController {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FakeController {
    pub fn start(script: Vec<Step>) -> FakeController {
        FakeController::start_inner(script, Step::Ok, None)
    }

    pub fn start_tls(script: Vec<Step>, tls: ServerTls) -> FakeController {
        FakeController::start_inner(script, Step::Ok, Some(tls))
    }

    /// A fake with no script that answers every request with `step`.
    pub fn answering(step: Step) -> FakeController {
        FakeController::start_inner(Vec::new(), step, None)
    }

    fn start_inner(script: Vec<Step>, after: Step, tls: Option<ServerTls>) -> FakeController {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            script: Mutex::new(script.into()),
            after,
            log: Mutex::new(vec![]),
            connections: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            sockets: Mutex::new(vec![]),
            threads: Mutex::new(vec![]),
        });
        let sh = shared.clone();
        let acceptor = std::thread::spawn(move || {
            for sock in listener.incoming() {
                if sh.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(sock) = sock else { continue };
                sh.connections.fetch_add(1, Ordering::SeqCst);
                sh.sockets.lock().push(sock.try_clone().unwrap());
                let sh2 = sh.clone();
                let tls = tls.clone();
                let t = std::thread::spawn(move || serve(sock, tls, &sh2));
                sh.threads.lock().push(t);
            }
        });
        FakeController {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::new("127.0.0.1", self.port)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.log.lock().clone()
    }

    /// Names of the ops received so far.
    pub fn ops(&self) -> Vec<&'static str> {
        self.shared.log.lock().iter().map(|r| r.op.name()).collect()
    }

    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Appends steps to the script.
    pub fn push(&self, steps: impl IntoIterator<Item = Step>) {
        self.shared.script.lock().extend(steps);
    }

    /// Waits until `n` requests were received (fire-and-forget arrive asynchronously).
    pub fn wait_requests(&self, n: usize, within: Duration) -> bool {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if self.shared.log.lock().len() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    /// Drops the fake, then waits until every client connected to it has seen its connection
    /// closed (the client's end left ESTABLISHED: the fake's FIN arrived), at most 5 s. A test
    /// that drops a controller and then calls means "the connection is dead", not "a close is
    /// on its way": it waits for that, never sleeps for it.
    pub fn shut_down(self) {
        let port = self.port;
        let clients: Vec<u16> = self
            .shared
            .sockets
            .lock()
            .iter()
            .filter_map(|s| Some(s.peer_addr().ok()?.port()))
            .collect();
        drop(self);
        let end = Instant::now() + Duration::from_secs(5);
        while let Some(c) = clients.iter().find(|&&c| established(c, port)) {
            assert!(
                Instant::now() < end,
                "the client's connection 127.0.0.1:{c} → :{port} is still open 5 s after the fake closed it"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Whether the IPv4 TCP connection from local port `from` to port `to` is ESTABLISHED
/// (`/proc/net/tcp`: ports in hex, state 01).
fn established(from: u16, to: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let port = |addr: &str| {
        addr.rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
    };
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && port(f[1]) == Some(from) && port(f[2]) == Some(to) && f[3] == "01"
    })
}

impl Drop for FakeController {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // unblocks accept
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        for s in self.shared.sockets.lock().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        let threads: Vec<_> = self.shared.threads.lock().drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
    }
}

fn serve(sock: TcpStream, tls: Option<ServerTls>, sh: &Shared) {
    let raw = sock.try_clone().unwrap();
    let mut stream: Box<dyn Stream> = match tls {
        Some(cfg) => Box::new(rustls::StreamOwned::new(
            rustls::ServerConnection::new(cfg).unwrap(),
            sock,
        )),
        None => Box::new(sock),
    };
    let limits = Limits::default();
    let mut buf = Vec::new();
    loop {
        if read_frame(&mut stream, &limits, &mut buf).is_err() {
            return;
        }
        let Ok(req) = decode_request(&buf, &limits) else {
            return;
        };
        sh.log.lock().push(req.clone());
        if req.no_reply {
            continue;
        }
        let step = sh.script.lock().pop_front();
        let step = step.unwrap_or_else(|| sh.after.clone());
        if !act(&mut stream, &raw, &req, step) {
            return;
        }
    }
}

/// Performs one step; false when the connection is to be dropped.
fn act(stream: &mut Box<dyn Stream>, raw: &TcpStream, req: &Request, step: Step) -> bool {
    let out = match step {
        Step::CloseMidReply => {
            let mut out = answer(req, Step::Ok);
            out.truncate(out.len() / 2);
            let _ = stream.write_all(&out);
            let _ = stream.flush();
            let _ = raw.shutdown(Shutdown::Both);
            return false;
        }
        Step::Close => {
            let _ = raw.shutdown(Shutdown::Both);
            return false;
        }
        Step::Silent => return true,
        Step::After(d, s) => {
            std::thread::sleep(d);
            return act(stream, raw, req, *s);
        }
        Step::Trickle { data, chunk, every } => {
            let out = answer(req, Step::Payload(data));
            for part in out.chunks(chunk.max(1)) {
                if stream.write_all(part).is_err() || stream.flush().is_err() {
                    return false;
                }
                std::thread::sleep(every);
            }
            return true;
        }
        Step::Split(wait_primary, other) => {
            let step = if matches!(req.op, Op::WaitPrimary { .. }) {
                wait_primary
            } else {
                other
            };
            return act(stream, raw, req, *step);
        }
        step => answer(req, step),
    };
    stream.write_all(&out).is_ok() && stream.flush().is_ok()
}

/// The bytes of a step that answers at once (the steps that close, wait, trickle or choose
/// are `act`'s, and have none here).
fn answer(req: &Request, step: Step) -> Vec<u8> {
    let mut out = Vec::new();
    let hint = |status: i32, e: Option<Endpoint>| {
        let mut r = Reply::status(req.seq, status);
        if let Some(e) = e {
            r.redirect_host = e.host;
            r.redirect_port = e.port;
        }
        r
    };
    match step {
        Step::Ok => encode_reply(&ok_reply(req), &mut out),
        Step::Status(s) => encode_reply(&Reply::status(req.seq, s), &mut out),
        Step::Redirect(e) => encode_reply(&hint(-E_XCE_REDIRECT, e), &mut out),
        Step::Standby(e) => encode_reply(&hint(-E_XCE_STANDBY, e), &mut out),
        Step::Primary(e) => {
            let info = ControllerInfo {
                primary_host: e.host,
                primary_port: e.port,
                ..Default::default()
            };
            encode_reply(&Reply::ok(req.seq, ReplyData::CtrlInfo(info)), &mut out)
        }
        Step::WrongSeqFirst => {
            encode_reply(
                &Reply::status(req.seq.wrapping_sub(1), -libc::EINVAL),
                &mut out,
            );
            encode_reply(&ok_reply(req), &mut out);
        }
        Step::WrongSeqs(n) => {
            for i in 0..n {
                encode_reply(&Reply::status(req.seq + 1000 + i as u64, 0), &mut out);
            }
        }
        Step::Garbage => {
            // A valid one-segment table of 2 words, then bytes no decoder accepts as a Reply.
            out.extend_from_slice(&[0, 0, 0, 0, 2, 0, 0, 0]);
            out.extend_from_slice(&[0xFF; 16]);
        }
        Step::Oversized => out.extend_from_slice(&[0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0x0F]),
        Step::Payload(data) => encode_reply(&Reply::ok(req.seq, data), &mut out),
        Step::Raw(make) => out = (make.0)(req),
        Step::Versioned(version, data) => {
            let mut r = data.map_or_else(|| ok_reply(req), |d| Reply::ok(req.seq, d));
            r.members_version = version;
            encode_reply(&r, &mut out)
        }
        Step::CloseMidReply
        | Step::Close
        | Step::Silent
        | Step::After(..)
        | Step::Trickle { .. }
        | Step::Split(..) => {}
    }
    out
}

/// Success with the payload the op expects.
pub fn ok_reply(req: &Request) -> Reply {
    let data = match &req.op {
        Op::Hello(_) | Op::WaitPrimary { .. } => ReplyData::CtrlInfo(ControllerInfo {
            role: ControllerRole::Primary,
            ..Default::default()
        }),
        Op::Join(_) => ReplyData::SessionId(7),
        Op::JobList(_) => ReplyData::Jobs(vec![Job {
            job_id: 1,
            ..Default::default()
        }]),
        Op::JobInfo { job_id } => ReplyData::Job(Job {
            job_id: *job_id,
            ..Default::default()
        }),
        Op::JobSubmit(spec) => ReplyData::JobId(spec.job_id),
        Op::RunTask { .. } => ReplyData::TaskId(9),
        Op::ResList => ReplyData::Resources(vec![]),
        Op::WorkerList => ReplyData::Hosts(vec![]),
        Op::ClusterConf => ReplyData::ClusterConf(ClusterConf::default()),
        Op::ResVal { .. } => ReplyData::ResVals(vec![]),
        _ => ReplyData::None,
    };
    Reply::ok(req.seq, data)
}

/// A port on which nothing listens (connect: ECONNREFUSED).
pub fn refused_endpoint() -> Endpoint {
    // A port bound but never listened on: a connect to it is refused, and it stays this test
    // process's for good, so no socket made later (a fake controller's port 0) can get it. (A
    // listener bound and dropped freed its port for the next bind: a fake controller started
    // after it got the same port, once.)
    // SAFETY: plain socket calls on a descriptor made here; `addr` and `len` outlive them.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let sa = &mut addr as *mut libc::sockaddr_in as *mut libc::sockaddr;
        assert_eq!(
            libc::bind(fd, sa, len),
            0,
            "bind: {}",
            std::io::Error::last_os_error()
        );
        assert_eq!(libc::getsockname(fd, sa, &mut len), 0);
        // The descriptor is kept open on purpose (the port stays reserved, never listened on).
        Endpoint::new("127.0.0.1", u16::from_be(addr.sin_port))
    }
}

/// Short timeouts for tests; waitPrimary, suspicion (F25) and learning the members (F29, one
/// `hello` per new connection the scripts do not expect) off unless a test turns them on.
pub fn fast_options() -> Options {
    Options {
        connect_timeout: Duration::from_millis(500),
        reply_timeout: Duration::from_millis(1000),
        call_deadline: None,
        hint_policy: Default::default(),
        wait_primary: false,
        suspicion: false,
        learn_masters: false,
        forward: true,
    }
}

/// A client on `masters` with these options and this retry budget.
pub fn client(masters: &[Endpoint], options: Options, retry: RetryConfig) -> Client {
    Client::start_with(Config::new(masters.to_vec()), options, retry).expect("start")
}

/// A job spec for the scripts (the fake answers with its id, whatever it is).
pub fn spec() -> JobSpec {
    JobSpec {
        name: "j".into(),
        command: "true".into(),
        ..Default::default()
    }
}

/// A small, quick budget: sleeps of 5–40 ms, `max_retries` of them.
pub fn fast_retry(max_retries: u32) -> RetryConfig {
    RetryConfig {
        max_retries,
        initial_retry_ms: 10,
        max_retry_ms: 40,
        backoff_multiplier: 2.0,
    }
}

/// CPU time (user + system) consumed by the calling thread so far.
pub fn thread_cpu_time() -> Duration {
    // SAFETY: getrusage writes one rusage into the live, zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is Linux-specific and reports the calling thread only.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    assert_eq!(rc, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// A CA, a server identity for "localhost" / 127.0.0.1 and a client identity, both signed by
/// it, as PEM files in a fresh directory, and the server's TLS config (client certificates
/// required when `mutual`).
pub struct TestPki {
    pub dir: std::path::PathBuf,
    pub server: ServerTls,
}

impl TestPki {
    pub fn new(tag: &str) -> TestPki {
        TestPki::build(tag, false)
    }

    pub fn mutual(tag: &str) -> TestPki {
        TestPki::build(tag, true)
    }

    fn build(tag: &str, mutual: bool) -> TestPki {
        let dir = std::env::temp_dir().join(format!("xce-pki-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("xce test CA {tag}"));
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let params =
            rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        // The server identity as files too, for a real controller (--tls-cert/--tls-key).
        std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
        let client_params = rcgen::CertificateParams::new(vec!["xce-client".to_string()]).unwrap();
        let client_key = rcgen::KeyPair::generate().unwrap();
        let client_cert = client_params.signed_by(&client_key, &ca).unwrap();
        std::fs::write(dir.join("client.pem"), client_cert.pem()).unwrap();
        std::fs::write(dir.join("client.key"), client_key.serialize_pem()).unwrap();

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap();
        let builder = if mutual {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.der().clone()).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let server = builder
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        TestPki {
            dir,
            server: Arc::new(server),
        }
    }

    pub fn ca_file(&self) -> std::path::PathBuf {
        self.dir.join("ca.pem")
    }

    pub fn server_cert(&self) -> std::path::PathBuf {
        self.dir.join("server.pem")
    }

    pub fn server_key(&self) -> std::path::PathBuf {
        self.dir.join("server.key")
    }

    pub fn client_cert(&self) -> std::path::PathBuf {
        self.dir.join("client.pem")
    }

    pub fn client_key(&self) -> std::path::PathBuf {
        self.dir.join("client.key")
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
