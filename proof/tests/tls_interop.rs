//! TLS interoperability of the record layer (`xce_proto::records`, issue 28) against an
//! independent TLS 1.3 implementation: OpenSSL's `s_server` and `s_client` (Debian's
//! `openssl`, installed by scripts/deps.sh; these tests fail, never skip, without it).
//!
//! Both ends that use the record layer, as real processes on loopback:
//! - the library's `Connection` as TLS client against `openssl s_server`: application data
//!   both ways, the server's session tickets taken (and a second connection resumed with
//!   them), key updates the server starts with and without asking for ours and key updates
//!   the library starts, the library's `close_notify` when it closes, the server's
//!   `close_notify` honoured on its own (the TCP close held back by a relay), and a record
//!   cut short by the peer's close at several points (a clean error, no hang);
//! - the controller's client port (`ServerTls`) as TLS server against `openssl s_client`:
//!   `hello` round trips, key updates the client starts with and without asking for ours,
//!   no session tickets (nothing to resume, issue 27), the client's `close_notify`, the controller's
//!   `close_notify` when it closes an idle connection, and a request record cut short (the
//!   controller closes that connection at once and goes on serving).
//!
//! What OpenSSL saw is read from its `-msg` trace (`>>>` sent, `<<<` received, one line per
//! message, inner content types of encrypted records included), written as it goes. Key
//! updates are OpenSSL 3's stdin commands `K` (update, and ask the peer to) and `k` (update
//! only), in `s_server` and in `s_client` (which takes commands with `-quiet` only when
//! `-no_ign_eof` follows it). Not covered here: the controller starting a key update itself —
//! it does so only after 2^23 records under one key, through the same `Records::seal` that the
//! library end runs here with a lowered limit.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use xce::testing::{Connection, WakeState};
use xce::Error;
use xce_proof::{Cluster, ClusterOpts};
use xce_proto::wire::{self, Limits, Op, Reply, Request};
use xce_testkit::fake::TestPki;

/// The bound of every wait in these tests (nothing here takes more than a fraction of it).
const WAIT: Duration = Duration::from_secs(20);

/// Bytes a process wrote, as they arrive, and a way to wait for what they must contain.
#[derive(Default)]
struct Output {
    bytes: Mutex<Vec<u8>>,
    more: Condvar,
}

impl Output {
    /// Copies `r` into a new [`Output`] on a thread of its own until EOF.
    fn collect(mut r: impl Read + Send + 'static) -> Arc<Output> {
        let out = Arc::new(Output::default());
        let o = out.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        o.bytes.lock().unwrap().extend_from_slice(&buf[..n]);
                        o.more.notify_all();
                    }
                }
            }
        });
        out
    }

    fn snapshot(&self) -> Vec<u8> {
        self.bytes.lock().unwrap().clone()
    }

    /// Waits until `f` holds for what arrived so far; false at the deadline.
    fn wait(&self, within: Duration, mut f: impl FnMut(&[u8]) -> bool) -> bool {
        let deadline = Instant::now() + within;
        let mut b = self.bytes.lock().unwrap();
        loop {
            if f(&b) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            b = self.more.wait_timeout(b, deadline - now).unwrap().0;
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// The `openssl` command, or a failure saying how to get it.
fn openssl() -> Command {
    match Command::new("openssl").arg("version").output() {
        Ok(o) if o.status.success() => Command::new("openssl"),
        Ok(o) => panic!("`openssl version` failed: {o:?}"),
        Err(e) => panic!(
            "the openssl command is missing ({e}): these interoperability tests need Debian's \
             openssl (scripts/deps.sh installs it)"
        ),
    }
}

/// An `openssl s_server` or `s_client` process: its stdin, its stdout and stderr as they
/// arrive, and its `-msg` trace. Killed when dropped.
struct Openssl {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Arc<Output>,
    err: Arc<Output>,
    trace: PathBuf,
}

impl Openssl {
    fn spawn(args: &[&str], trace: PathBuf) -> Openssl {
        let mut child = openssl()
            .args(args)
            .arg("-msg")
            .arg("-msgfile")
            .arg(&trace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn openssl");
        let out = Output::collect(child.stdout.take().unwrap());
        let err = Output::collect(child.stderr.take().unwrap());
        Openssl {
            stdin: child.stdin.take(),
            child,
            out,
            err,
            trace,
        }
    }

    /// Writes `b` to its stdin in one write (a pipe delivers up to 4 KiB in one read: a
    /// command letter and the bytes after it never share a read).
    fn input(&mut self, b: &[u8]) {
        assert!(b.len() <= 4096, "one stdin write of at most PIPE_BUF bytes");
        let w = self.stdin.as_mut().expect("stdin open");
        w.write_all(b).expect("write to openssl's stdin");
        w.flush().unwrap();
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    fn trace(&self) -> String {
        std::fs::read_to_string(&self.trace).unwrap_or_default()
    }

    /// Trace lines of messages OpenSSL sent (`>>>`) or received (`<<<`) ending with `what`.
    fn traced(&self, dir: &str, what: &str) -> usize {
        self.trace()
            .lines()
            .filter(|l| l.starts_with(dir) && l.ends_with(what))
            .count()
    }

    /// Waits until at least `n` such lines are in the trace (it is written as OpenSSL goes).
    fn wait_traced(&self, dir: &str, what: &str, n: usize) {
        let deadline = Instant::now() + WAIT;
        while self.traced(dir, what) < n {
            assert!(
                Instant::now() < deadline,
                "openssl never traced {n} × {dir} …{what}\n{}",
                self.report()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn wait_out(&self, what: &str, f: impl FnMut(&[u8]) -> bool) {
        assert!(self.out.wait(WAIT, f), "{what}\n{}", self.report());
    }

    fn wait_err(&self, what: &str, f: impl FnMut(&[u8]) -> bool) {
        assert!(self.err.wait(WAIT, f), "{what}\n{}", self.report());
    }

    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "openssl did not exit\n{}",
                self.report()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// What it printed, for a failure's message.
    fn report(&self) -> String {
        format!(
            "--- openssl stdout:\n{}\n--- stderr:\n{}\n--- trace (message lines):\n{}",
            String::from_utf8_lossy(&self.out.snapshot()),
            String::from_utf8_lossy(&self.err.snapshot()),
            self.trace()
                .lines()
                .filter(|l| l.starts_with("<<<") || l.starts_with(">>>"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    }
}

impl Drop for Openssl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `openssl s_server` on an ephemeral loopback port with the PKI's server identity (TLS 1.3
/// only), `extra` arguments after; its port.
fn s_server(pki: &TestPki, name: &str, extra: &[&str]) -> (Openssl, u16) {
    let (cert, key) = (pki.server_cert(), pki.server_key());
    let mut args = vec![
        "s_server",
        "-accept",
        "127.0.0.1:0",
        "-tls1_3",
        "-cert",
        cert.to_str().unwrap(),
        "-key",
        key.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let s = Openssl::spawn(&args, pki.dir.join(format!("{name}.trace")));
    let mut port = None;
    s.wait_out("s_server never said where it listens", |b| {
        let t = String::from_utf8_lossy(b);
        port = t
            .split("ACCEPT 127.0.0.1:")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|p| p.parse().ok());
        port.is_some()
    });
    (s, port.unwrap())
}

fn hello_op() -> Op {
    Op::Hello(wire::Hello {
        client_name: "tls-interop".into(),
        protocol_version: wire::PROTOCOL_VERSION,
    })
}

fn request(seq: u64, auth_token: &str) -> Request {
    Request {
        seq,
        client_id: [7; 16],
        request_id: 0,
        no_reply: false,
        op: hello_op(),
        auth_token: auth_token.into(),
        forward_within_ms: 0,
    }
}

fn encoded_request(seq: u64) -> Vec<u8> {
    let mut b = Vec::new();
    wire::encode_request(&request(seq, ""), &mut b);
    b
}

/// A reply to `seq` as the library decodes it, big enough for a record of its own.
fn reply(seq: u64) -> Reply {
    let mut r = Reply::status(seq, 0);
    r.redirect_host = format!("reply-{seq}-{}", "x".repeat(200));
    r
}

fn encoded_reply(seq: u64) -> Vec<u8> {
    let mut b = Vec::new();
    wire::encode_reply(&reply(seq), &mut b);
    b
}

/// The library's client configuration for the PKI's CA.
fn client_config(pki: &TestPki) -> Arc<rustls::ClientConfig> {
    xce::testing::client_config(&pki.ca_file(), None, None).unwrap()
}

fn connect(port: u16, cfg: &Arc<rustls::ClientConfig>, ws: &WakeState) -> Connection {
    Connection::connect(
        "localhost",
        port,
        Some(cfg),
        Limits::default(),
        Instant::now() + WAIT,
        &ws.waker_now(),
    )
    .expect("TLS connection to openssl s_server")
}

/// One request from the library, arrived at s_server as sent, and s_server's reply written
/// after `between` (commands to s_server) ran.
fn ask(c: &mut Connection, s: &mut Openssl, ws: &WakeState, seq: u64, between: fn(&mut Openssl)) {
    c.send(&request(seq, ""), Instant::now() + WAIT, &ws.waker_now())
        .unwrap_or_else(|e| panic!("send {seq}: {e}\n{}", s.report()));
    let sent = encoded_request(seq);
    s.wait_out(&format!("request {seq} never reached s_server"), |b| {
        contains(b, &sent)
    });
    between(s);
    s.input(&encoded_reply(seq));
}

/// [`ask`], and the reply arrives as written.
fn round_trip_with(
    c: &mut Connection,
    s: &mut Openssl,
    ws: &WakeState,
    seq: u64,
    between: fn(&mut Openssl),
) {
    ask(c, s, ws, seq, between);
    let r = c
        .recv(seq, Instant::now() + WAIT, &ws.waker_now())
        .unwrap_or_else(|e| panic!("reply {seq}: {e}\n{}", s.report()));
    assert_eq!(r, reply(seq));
}

fn round_trip(c: &mut Connection, s: &mut Openssl, ws: &WakeState, seq: u64) {
    round_trip_with(c, s, ws, seq, |_| {});
}

/// The library against `openssl s_server`: data both ways, tickets, key updates from both
/// sides, the library's `close_notify`, resumption.
#[test]
fn library_client_against_openssl_s_server() {
    let pki = TestPki::new("interop-lib");
    let (mut s, port) = s_server(&pki, "lib", &["-naccept", "2"]);
    let cfg = client_config(&pki);
    let ws = WakeState::new();
    let mut c = connect(port, &cfg, &ws);
    round_trip(&mut c, &mut s, &ws, 1);
    // The server's session tickets came before its reply, and the library took them.
    assert_eq!(s.traced(">>>", "NewSessionTicket"), 2, "{}", s.report());

    // The server updates its keys and asks for ours (`K`): the library follows and answers
    // with a KeyUpdate of its own; both directions go on under the new keys.
    round_trip_with(&mut c, &mut s, &ws, 2, |s| {
        s.input(b"K\n");
        s.wait_traced(">>>", "KeyUpdate", 1);
    });
    round_trip(&mut c, &mut s, &ws, 3);
    assert_eq!(s.traced("<<<", "KeyUpdate"), 1, "{}", s.report());

    // An update the server does not ask us to follow (`k`): no answer.
    round_trip_with(&mut c, &mut s, &ws, 4, |s| {
        s.input(b"k\n");
        s.wait_traced(">>>", "KeyUpdate", 2);
    });
    // Request 5 reaches the server after anything the library sent before it.
    round_trip(&mut c, &mut s, &ws, 5);
    assert_eq!(s.traced("<<<", "KeyUpdate"), 1, "{}", s.report());

    // The library updates its own keys, every 2 records: OpenSSL follows each update.
    assert!(c.tls_update_keys_after(2));
    for seq in 6..12 {
        round_trip(&mut c, &mut s, &ws, seq);
    }
    let ours = s.traced("<<<", "KeyUpdate") - 1;
    assert!(
        ours >= 2,
        "{ours} key updates from the library\n{}",
        s.report()
    );

    // Closing a healthy connection sends close_notify.
    drop(c);
    s.wait_traced("<<<", "close_notify", 1);

    // A second connection resumes the session from a ticket: no certificate this time.
    let mut c = connect(port, &cfg, &ws);
    round_trip(&mut c, &mut s, &ws, 1);
    s.wait_out("s_server never reported the resumption", |b| {
        contains(b, b"Reused session-id")
    });
    assert_eq!(s.traced(">>>", "], Certificate"), 1, "{}", s.report());
}

/// A TCP relay between a TLS client and a TLS server that forwards whole records, and on
/// request holds back the end of the stream (a FIN) or cuts the next record short.
struct Relay {
    addr: SocketAddr,
    shared: Arc<RelayShared>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Forward,
    /// Forward records; at the sender's end, keep this side open.
    HoldEnd,
    /// Forward this many bytes of the next record, then end this side.
    Cut(usize),
}

#[derive(Default)]
struct RelayState {
    /// Towards the client, towards the server.
    modes: [Option<Mode>; 2],
    /// When each direction's sender ended its stream (or failed).
    ended: [Option<Instant>; 2],
    /// When each direction cut a record.
    cut: [Option<Instant>; 2],
}

#[derive(Default)]
struct RelayShared {
    state: Mutex<RelayState>,
    changed: Condvar,
}

const TO_CLIENT: usize = 0;
const TO_SERVER: usize = 1;

impl Relay {
    fn start(server: SocketAddr) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let shared = Arc::new(RelayShared::default());
        let sh = shared.clone();
        std::thread::spawn(move || {
            let Ok((client, _)) = l.accept() else { return };
            let Ok(upstream) = TcpStream::connect(server) else {
                return;
            };
            for (dir, from, to) in [
                (
                    TO_CLIENT,
                    upstream.try_clone().unwrap(),
                    client.try_clone().unwrap(),
                ),
                (TO_SERVER, client, upstream),
            ] {
                let sh = sh.clone();
                std::thread::spawn(move || pump(dir, from, to, &sh));
            }
        });
        Relay { addr, shared }
    }

    fn set(&self, dir: usize, m: Mode) {
        self.shared.state.lock().unwrap().modes[dir] = Some(m);
    }

    /// Waits until the sender towards `dir` ended its stream: when it did.
    fn wait_ended(&self, dir: usize, within: Duration) -> Option<Instant> {
        let deadline = Instant::now() + within;
        let mut st = self.shared.state.lock().unwrap();
        loop {
            if let Some(t) = st.ended[dir] {
                return Some(t);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap()
                .0;
        }
    }

    fn cut_at(&self, dir: usize) -> Option<Instant> {
        self.shared.state.lock().unwrap().cut[dir]
    }
}

/// Copies `from` to `to` record by record, as the direction's mode says.
fn pump(dir: usize, mut from: TcpStream, mut to: TcpStream, sh: &RelayShared) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let mode = || sh.state.lock().unwrap().modes[dir].unwrap_or(Mode::Forward);
    let mark = |f: &dyn Fn(&mut RelayState)| {
        f(&mut sh.state.lock().unwrap());
        sh.changed.notify_all();
    };
    loop {
        let n = match from.read(&mut chunk) {
            Ok(0) | Err(_) => {
                mark(&|s| s.ended[dir] = Some(Instant::now()));
                if mode() != Mode::HoldEnd {
                    let _ = to.write_all(&buf);
                    let _ = to.shutdown(Shutdown::Write);
                }
                return;
            }
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while buf.len() >= 5 {
            let len = 5 + u16::from_be_bytes([buf[3], buf[4]]) as usize;
            if buf.len() < len {
                break;
            }
            if let Mode::Cut(k) = mode() {
                // Marked first: whoever waits for the cut's effect may look right after it.
                mark(&|s| s.cut[dir] = Some(Instant::now()));
                let _ = to.write_all(&buf[..k.min(len)]);
                let _ = to.shutdown(Shutdown::Write);
                // Keep reading (and dropping) what comes, until its end.
                while matches!(from.read(&mut chunk), Ok(n) if n > 0) {}
                mark(&|s| s.ended[dir] = Some(Instant::now()));
                return;
            }
            if to.write_all(&buf[..len]).is_err() {
                return;
            }
            buf.drain(..len);
        }
    }
}

/// OpenSSL's `close_notify` ends the library's wait by itself: the server's TCP close is held
/// back by a relay, so only the alert can end it (else the reply deadline would, with
/// ETIMEDOUT). `s_server -rev` is used because it is the only way `s_server` sends
/// close_notify while its socket is still open: it echoes each line reversed and shuts the
/// connection down cleanly on a line `CLOSE`. The request carries that line in its token,
/// placed so that the echo of what precedes it reads as the start of a frame still
/// incomplete: the library waits for the rest, and the alert comes instead.
#[test]
fn library_client_honours_openssl_close_notify() {
    let pki = TestPki::new("interop-close");
    let (s, port) = s_server(&pki, "close", &["-naccept", "1", "-rev"]);
    let relay = Relay::start(SocketAddr::from(([127, 0, 0, 1], port)));
    relay.set(TO_CLIENT, Mode::HoldEnd);
    let cfg = client_config(&pki);
    let ws = WakeState::new();
    let mut c = connect(relay.addr.port(), &cfg, &ws);
    // The 8 bytes before the first newline, reversed by s_server, are the head of a frame
    // of one segment of 32 words (264 bytes), longer than the echo.
    let token = "\0\0\0\x20\0\0\0\0\nCLOSE\n";
    let req = request(1, token);
    let mut frame = Vec::new();
    wire::encode_request(&req, &mut frame);
    let nl = frame.iter().position(|&b| b == b'\n').unwrap();
    assert_eq!(
        &frame[nl - 8..nl + 7],
        token.as_bytes(),
        "the token's newline must be the frame's first: {frame:?}"
    );
    assert!(
        nl + 1 < 8 + 32 * 8,
        "the echo must be shorter than the frame it starts"
    );
    c.send(&req, Instant::now() + WAIT, &ws.waker_now())
        .unwrap();
    let t0 = Instant::now();
    let r = c.recv(1, t0 + WAIT, &ws.waker_now());
    assert_eq!(
        r.unwrap_err(),
        Error::Errno(libc::ECONNRESET),
        "{}",
        s.report()
    );
    assert!(s.traced(">>>", "close_notify") >= 1, "{}", s.report());
}

/// A record from OpenSSL cut short by the end of the stream, at several points (inside the
/// header, after it, inside the body): a clean `ECONNRESET`, at once (the reply deadline is
/// far), no panic.
#[test]
fn library_client_truncated_record_from_openssl() {
    let pki = TestPki::new("interop-cut");
    let cuts = [1usize, 4, 5, 5 + 10];
    let (mut s, port) = s_server(&pki, "cut", &["-naccept", &cuts.len().to_string()]);
    let cfg = client_config(&pki);
    let ws = WakeState::new();
    for (i, &cut) in cuts.iter().enumerate() {
        let relay = Relay::start(SocketAddr::from(([127, 0, 0, 1], port)));
        let mut c = connect(relay.addr.port(), &cfg, &ws);
        let seq = 10 * i as u64;
        round_trip(&mut c, &mut s, &ws, seq + 1);
        relay.set(TO_CLIENT, Mode::Cut(cut));
        ask(&mut c, &mut s, &ws, seq + 2, |_| {});
        let r = c.recv(seq + 2, Instant::now() + WAIT, &ws.waker_now());
        assert!(
            relay.cut_at(TO_CLIENT).is_some(),
            "cut {cut}: nothing cut ({r:?})\n{}",
            s.report()
        );
        assert_eq!(
            r.unwrap_err(),
            Error::Errno(libc::ECONNRESET),
            "cut after {cut} bytes of the record"
        );
        drop(c);
    }
}

/// One single-node controller with TLS on its client port (the PKI's server identity) and
/// `extra` flags, serving.
fn controller(pki: &TestPki, extra: &[&str]) -> Cluster {
    let mut args: Vec<String> = vec![
        "--tls-cert".into(),
        pki.server_cert().display().to_string(),
        "--tls-key".into(),
        pki.server_key().display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let c = Cluster::start(
        1,
        ClusterOpts {
            extra_args: args,
            ..Default::default()
        },
    )
    .expect("start the controller");
    // Serving: a hello through the library answers 0 (primary).
    let cfg = client_config(pki);
    let ws = WakeState::new();
    let deadline = Instant::now() + WAIT;
    loop {
        let ok = Connection::connect(
            "localhost",
            c.node(1).client.port(),
            Some(&cfg),
            Limits::default(),
            Instant::now() + Duration::from_secs(2),
            &ws.waker_now(),
        )
        .and_then(|mut conn| {
            let d = Instant::now() + Duration::from_secs(2);
            conn.send(&request(1, ""), d, &ws.waker_now())?;
            conn.recv(1, d, &ws.waker_now())
        });
        if matches!(&ok, Ok(r) if r.status == 0) {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "the controller never served: {ok:?}\n{}",
            c.log(1)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `openssl s_client` to `port` trusting the PKI's CA, TLS 1.3 only, quiet (stdout is the
/// data received) but taking commands and ending at stdin's end.
fn s_client(pki: &TestPki, name: &str, port: u16, extra: &[&str]) -> Openssl {
    let ca = pki.ca_file();
    let connect = format!("127.0.0.1:{port}");
    let mut args = vec![
        "s_client",
        "-connect",
        &connect,
        "-servername",
        "localhost",
        "-tls1_3",
        "-CAfile",
        ca.to_str().unwrap(),
        "-verify_return_error",
        "-quiet",
        "-no_ign_eof",
    ];
    args.extend_from_slice(extra);
    Openssl::spawn(&args, pki.dir.join(format!("{name}.trace")))
}

/// Sends a `hello` through s_client and waits for the controller's reply among what it
/// printed (`replies` so far): the reply decoded.
fn hello_via(c: &mut Openssl, seq: u64, replies: &mut usize) -> Reply {
    c.input(&encoded_request(seq));
    let limits = Limits::default();
    let mut got = None;
    let want = *replies + 1;
    c.wait_out(&format!("no reply to hello {seq}"), |b| {
        let mut rest = b;
        let mut n = 0;
        while let Ok(Some(len)) = wire::frame_len(rest, &limits) {
            if len > rest.len() {
                break;
            }
            n += 1;
            if n == want {
                got = Some(wire::decode_reply(&rest[..len], &limits).unwrap());
                return true;
            }
            rest = &rest[len..];
        }
        false
    });
    *replies = want;
    let r = got.unwrap();
    assert_eq!((r.seq, r.status), (seq, 0), "{r:?}");
    r
}

/// The controller's client port against `openssl s_client`: data both ways, key updates the
/// client starts (asking for ours, then not), no session tickets (C13 amended: nothing to
/// resume, every connection a full handshake), the client's close_notify.
#[test]
fn controller_client_port_against_openssl_s_client() {
    let pki = TestPki::new("interop-ctl");
    let ctl = controller(&pki, &[]);
    let port = ctl.node(1).client.port();
    let mut c = s_client(&pki, "ctl", port, &[]);
    let mut replies = 0;
    hello_via(&mut c, 1, &mut replies);

    // `K`: the client updates its keys and asks for ours; the controller answers with a
    // KeyUpdate and both directions go on.
    c.input(b"K\n");
    c.wait_err("s_client did not take K", |b| count(b, b"KEYUPDATE") == 1);
    hello_via(&mut c, 2, &mut replies);
    assert_eq!(c.traced(">>>", "KeyUpdate"), 1, "{}", c.report());
    assert_eq!(c.traced("<<<", "KeyUpdate"), 1, "{}", c.report());
    hello_via(&mut c, 3, &mut replies);
    // `k`: an update without asking for ours: none comes.
    c.input(b"k\n");
    c.wait_err("s_client did not take k", |b| count(b, b"KEYUPDATE") == 2);
    hello_via(&mut c, 4, &mut replies);
    hello_via(&mut c, 5, &mut replies);
    assert_eq!(c.traced(">>>", "KeyUpdate"), 2, "{}", c.report());
    assert_eq!(c.traced("<<<", "KeyUpdate"), 1, "{}", c.report());
    // C13 amended (issue 27): the controller issues no session tickets — a resumed session
    // would keep its first handshake's identity past the certificate's expiry.
    assert_eq!(c.traced("<<<", "NewSessionTicket"), 0, "{}", c.report());

    // The client's close_notify at its stdin's end: the controller closes quietly.
    c.close_stdin();
    let st = c.wait_exit();
    assert!(st.success(), "s_client: {st}\n{}", c.report());
    assert_eq!(c.traced(">>>", "close_notify"), 1, "{}", c.report());

    // So a second connection is a full handshake again: the certificate comes again.
    let mut r = s_client(&pki, "ctl-again", port, &[]);
    let mut replies = 0;
    hello_via(&mut r, 1, &mut replies);
    assert_eq!(r.traced("<<<", "], Certificate"), 1, "{}", r.report());
    assert_eq!(c.traced("<<<", "], Certificate"), 1, "{}", c.report());
    r.close_stdin();
    assert!(r.wait_exit().success(), "{}", r.report());

    let l = ctl.log(1);
    assert!(!l.contains("panicked"), "{l}");
    assert!(
        !l.contains("read failed") && !l.contains("handshake failed"),
        "the controller logged a TLS problem:\n{l}"
    );
}

/// The controller closes an idle connection with close_notify: OpenSSL sees the alert, not
/// an unexpected end of the stream.
#[test]
fn controller_closes_with_close_notify() {
    let pki = TestPki::new("interop-idle");
    let ctl = controller(&pki, &["--idle-timeout-ms", "500"]);
    let mut c = s_client(&pki, "idle", ctl.node(1).client.port(), &[]);
    let mut replies = 0;
    hello_via(&mut c, 1, &mut replies);
    // Idle: the controller closes; s_client ends when it sees the close.
    let st = c.wait_exit();
    assert_eq!(c.traced("<<<", "close_notify"), 1, "{}", c.report());
    let err = String::from_utf8_lossy(&c.err.snapshot()).to_string();
    assert!(!err.contains("unexpected eof"), "{err}");
    assert!(st.success(), "s_client: {st}\n{}", c.report());
}

/// A request record from OpenSSL cut short by the end of the stream, at several points: the
/// controller closes that connection at once (its idle timeout is ten minutes), logs no
/// panic, and goes on serving.
#[test]
fn controller_truncated_record_from_openssl() {
    let pki = TestPki::new("interop-ctl-cut");
    let ctl = controller(&pki, &[]);
    for cut in [1usize, 4, 5, 5 + 10] {
        let relay = Relay::start(ctl.node(1).client);
        let mut c = s_client(&pki, &format!("ctl-cut-{cut}"), relay.addr.port(), &[]);
        let mut replies = 0;
        hello_via(&mut c, 1, &mut replies);
        relay.set(TO_SERVER, Mode::Cut(cut));
        c.input(&encoded_request(2));
        let closed = relay.wait_ended(TO_CLIENT, WAIT);
        let cut_at = relay.cut_at(TO_SERVER).expect("the request was cut");
        let closed = closed.unwrap_or_else(|| {
            panic!(
                "cut after {cut} bytes: the controller kept the connection open\n{}",
                ctl.log(1)
            )
        });
        eprintln!(
            "cut after {cut} bytes: closed {:?} later",
            closed.saturating_duration_since(cut_at)
        );
        drop(c);
    }
    // Still serving, nothing panicked.
    assert!(ctl.nodes[0].is_running(), "{}", ctl.log(1));
    let mut c = s_client(&pki, "ctl-after", ctl.node(1).client.port(), &[]);
    let mut replies = 0;
    hello_via(&mut c, 1, &mut replies);
    let l = ctl.log(1);
    assert!(!l.contains("panicked"), "{l}");
}
