//! The one wire client of the tests: a blocking client of a controller's client port made of a
//! std `TcpStream` (or a TLS stream) and `xce-proto`'s codec — one request in flight, replies
//! matched by `seq`, a deadline on every read — without the library's failover loop, so a
//! test sees exactly what one node answers. Also the one-shot questions built on it (`hello`
//! probes, an immediate `waitPrimary`), HTTP for the metrics endpoint, and the ops tests send
//! most.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use xce_proto::wire::{self, ControllerInfo, ControllerRole, Op, Reply, ReplyData, Request};
use xce_proto::Error;

/// Per-request socket timeout of a [`WireClient`].
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// What a [`WireClient`] reads and writes: a TCP stream or a TLS stream over one.
pub trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// A blocking client: one request in flight, replies matched by `seq`.
pub struct WireClient {
    pub stream: Box<dyn Stream>,
    tcp: TcpStream,
    pub seq: u64,
    pub client_id: [u8; 16],
    pub next_request_id: u64,
    buf: Vec<u8>,
}

impl WireClient {
    /// Connects to `addr` (`host:port`) or panics.
    pub fn connect(addr: &str) -> WireClient {
        WireClient::try_connect(addr, IO_TIMEOUT).unwrap_or_else(|| panic!("connect {addr}"))
    }

    pub fn try_connect(addr: &str, timeout: Duration) -> Option<WireClient> {
        let tcp = TcpStream::connect_timeout(&addr.parse().ok()?, timeout).ok()?;
        Some(WireClient::over(Box::new(tcp.try_clone().ok()?), tcp))
    }

    /// A client on `stream`, whose socket is `tcp` (timeouts are set there).
    pub fn over(stream: Box<dyn Stream>, tcp: TcpStream) -> WireClient {
        tcp.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        tcp.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        tcp.set_nodelay(true).unwrap();
        let mut client_id = [0u8; 16];
        client_id[..8].copy_from_slice(&rand_u64().to_le_bytes());
        client_id[8..].copy_from_slice(&rand_u64().to_le_bytes());
        WireClient {
            stream,
            tcp,
            seq: 0,
            client_id,
            next_request_id: 1,
            buf: Vec::new(),
        }
    }

    pub fn set_timeout(&mut self, t: Duration) {
        self.tcp.set_read_timeout(Some(t)).unwrap();
    }

    /// The request for `op`: writes get the next request id.
    pub fn request(&mut self, op: Op) -> Request {
        self.seq += 1;
        let request_id = if op.kind() == wire::OpKind::Write {
            self.next_request_id += 1;
            self.next_request_id - 1
        } else {
            0
        };
        Request {
            seq: self.seq,
            client_id: self.client_id,
            request_id,
            no_reply: false,
            op,
            auth_token: String::new(),
            forward_within_ms: 0,
        }
    }

    pub fn send(&mut self, req: &Request) -> io::Result<()> {
        let mut out = Vec::new();
        wire::encode_request(req, &mut out);
        self.stream.write_all(&out)?;
        self.stream.flush()
    }

    pub fn recv(&mut self) -> Result<Reply, Error> {
        wire::read_frame(&mut self.stream, &wire::Limits::default(), &mut self.buf)?;
        wire::decode_reply(&self.buf, &wire::Limits::default())
    }

    /// Sends `req` and returns its reply (checking the echoed seq).
    pub fn try_send_recv(&mut self, req: &Request) -> Result<Reply, Error> {
        self.send(req).map_err(|e| Error::from_io(&e))?;
        let r = self.recv()?;
        assert_eq!(r.seq, req.seq, "reply seq");
        Ok(r)
    }

    pub fn try_call(&mut self, op: Op) -> Result<Reply, Error> {
        let req = self.request(op);
        self.try_send_recv(&req)
    }

    pub fn call(&mut self, op: Op) -> Reply {
        let name = op.name();
        self.try_call(op).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// Calls and asserts success.
    pub fn ok(&mut self, op: Op) -> ReplyData {
        let name = op.name();
        let r = self.call(op);
        assert_eq!(r.status, 0, "{name} failed: {r:?}");
        r.data
    }

    /// Fire-and-forget: `noReply` set, nothing read.
    pub fn fire(&mut self, op: Op) {
        let mut req = self.request(op);
        req.no_reply = true;
        self.send(&req).unwrap();
    }

    /// True once the server has closed this connection (EOF or reset within `timeout`).
    pub fn closed_within(&mut self, timeout: Duration) -> bool {
        self.set_timeout(timeout);
        let mut b = [0u8; 64];
        match self.stream.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
        }
    }
}

/// Send one request on a fresh connection and read its reply (no retry, no failover): the
/// request carries no request id (a read, or a write sent once), no token, no forwarding mark.
pub fn raw_call(addr: SocketAddr, op: Op, timeout: Duration) -> io::Result<Reply> {
    static SEQ: AtomicU64 = AtomicU64::new(1);
    let tcp = TcpStream::connect_timeout(&addr, timeout)?;
    let mut c = WireClient::over(Box::new(tcp.try_clone()?), tcp);
    c.tcp.set_read_timeout(Some(timeout))?;
    c.tcp.set_write_timeout(Some(timeout))?;
    c.stream.write_all(&request_frame(
        SEQ.fetch_add(1, Ordering::Relaxed),
        [0; 16],
        op,
    ))?;
    c.recv().map_err(to_io)
}

/// The framed request for `op` as a raw client sends it: no request id, no token, no
/// forwarding mark.
pub fn request_frame(seq: u64, client_id: [u8; 16], op: Op) -> Vec<u8> {
    let req = Request {
        seq,
        client_id,
        request_id: 0,
        no_reply: false,
        op,
        auth_token: String::new(),
        forward_within_ms: 0,
    };
    let mut buf = Vec::new();
    wire::encode_request(&req, &mut buf);
    buf
}

fn to_io(e: Error) -> io::Error {
    match e {
        Error::Errno(n) => io::Error::from_raw_os_error(n),
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}

/// One raw `hello` to one controller: the role it answers with (`Primary` when it serves, the
/// role from its info otherwise), or `None` for a refusal without info. Transport failures are
/// `Err`.
pub fn probe(addr: SocketAddr, timeout: Duration) -> io::Result<Option<ControllerRole>> {
    let reply = raw_call(addr, hello_as("probe"), timeout)?;
    Ok(match reply.data {
        ReplyData::CtrlInfo(info) if reply.status >= 0 => Some(info.role),
        _ if reply.status >= 0 => Some(ControllerRole::Primary),
        _ => None,
    })
}

/// `hello` to `addr` on a fresh connection: the node's answer, if it gave one.
pub fn probe_info(addr: SocketAddr, timeout: Duration) -> io::Result<Option<ControllerInfo>> {
    let reply = raw_call(addr, hello_as("probe"), timeout)?;
    Ok(match reply.data {
        ReplyData::CtrlInfo(info) => Some(info),
        _ => None,
    })
}

/// An immediate `waitPrimary` to `addr` (the progress question `status` asks every node):
/// the node's own answer — role, term, the primary it names, its log, commit and applied index.
pub fn immediate_wait_primary(
    addr: SocketAddr,
    timeout: Duration,
) -> Result<ControllerInfo, String> {
    let reply = raw_call(addr, immediate_wait(), timeout).map_err(|e| e.to_string())?;
    match reply.data {
        ReplyData::CtrlInfo(i) => Ok(i),
        _ => Err(format!("status {} without controller info", reply.status)),
    }
}

/// `waitPrimary` answered at once (`timeoutMs` 0, nothing excluded).
pub fn immediate_wait() -> Op {
    Op::WaitPrimary {
        timeout_ms: 0,
        exclude_host: String::new(),
        exclude_port: 0,
    }
}

/// One HTTP/1.1 request with `body`: (status line, body).
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> (String, String) {
    try_http(addr, method, path, body)
        .unwrap_or_else(|e| panic!("{method} http://{addr}{path}: {e}"))
}

/// [`http`], or why not.
pub fn try_http(addr: &str, method: &str, path: &str, body: &str) -> io::Result<(String, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    Ok((
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    ))
}

/// A blocking TLS 1.3 client stream to `addr`, trusting `ca` (PEM), presenting `cert`/`key`
/// when given, verifying the server as `server_name`. The handshake is completed (from the
/// client's side: a server that refuses the client certificate says so on the first read).
pub fn tls_stream(
    addr: &str,
    ca: &Path,
    identity: Option<(&Path, &Path)>,
    server_name: &str,
) -> io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    use std::sync::Arc;
    let pem = |p: &Path| std::io::BufReader::new(std::fs::File::open(p).unwrap());
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut pem(ca)) {
        roots.add(c.unwrap()).unwrap();
    }
    let b = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots);
    let cfg = match identity {
        None => b.with_no_client_auth(),
        Some((c, k)) => {
            let certs: Vec<_> = rustls_pemfile::certs(&mut pem(c))
                .map(|c| c.unwrap())
                .collect();
            let key = rustls_pemfile::private_key(&mut pem(k)).unwrap().unwrap();
            b.with_client_auth_cert(certs, key).unwrap()
        }
    };
    let name = rustls::pki_types::ServerName::try_from(server_name.to_string()).unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(cfg), name).map_err(io::Error::other)?;
    let tcp = TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(2))?;
    tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
    tcp.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

/// A client of the client port over TLS with an identity (`DIR/NAME.pem/.key`, as
/// `xce-controller pki local` writes them), trusting `DIR/ca.pem`.
pub fn tls_client(addr: &str, dir: &Path, identity: Option<&str>) -> WireClient {
    try_tls_client(addr, dir, identity).unwrap_or_else(|e| panic!("TLS to {addr}: {e}"))
}

/// [`tls_client`], or why not.
pub fn try_tls_client(addr: &str, dir: &Path, identity: Option<&str>) -> io::Result<WireClient> {
    let id = identity.map(|n| (dir.join(format!("{n}.pem")), dir.join(format!("{n}.key"))));
    let s = tls_stream(
        addr,
        &dir.join("ca.pem"),
        id.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
        "127.0.0.1",
    )?;
    let tcp = s.sock.try_clone()?;
    Ok(WireClient::over(Box::new(s), tcp))
}

pub fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos() ^ std::process::id() as u128);
    h.finish()
}

/// `hello` as a client named `test`.
pub fn hello() -> Op {
    hello_as("test")
}

/// `hello` as a client named `name`.
pub fn hello_as(name: &str) -> Op {
    Op::Hello(wire::Hello {
        client_name: name.into(),
        protocol_version: wire::PROTOCOL_VERSION,
    })
}

/// The controller info of a reply, or a panic naming what came instead.
pub fn info(r: &Reply) -> ControllerInfo {
    match &r.data {
        ReplyData::CtrlInfo(i) => i.clone(),
        other => panic!("expected ctrlInfo, got {other:?}"),
    }
}

/// `jobSubmit` of job `job_id` (`sleep 1`, one CPU, 64 MB) as `user` to `queue`.
pub fn submit(job_id: u64, user: &str, queue: &str) -> Op {
    Op::JobSubmit(wire::JobSpec {
        job_id,
        name: format!("job{job_id}"),
        user: user.into(),
        queue: queue.into(),
        command: "sleep 1".into(),
        ncpus: 1,
        mem_mb: 64,
    })
}

/// The job of a reply, or a panic naming what came instead.
pub fn job(r: ReplyData) -> wire::Job {
    match r {
        ReplyData::Job(j) => j,
        other => panic!("expected job, got {other:?}"),
    }
}

/// `join` as `role` for `host` (4 CPUs, 8 GiB, `arch=x86_64`).
pub fn join(role: wire::SessionRole, host: &str) -> Op {
    Op::Join(wire::Join {
        role,
        host: host.into(),
        ncpus: 4,
        mem_mb: 8192,
        attrs: vec![wire::KeyValue {
            key: "arch".into(),
            value: "x86_64".into(),
        }],
    })
}

/// `host:port` of a redirect hint.
pub fn hint(r: &Reply) -> String {
    format!("{}:{}", r.redirect_host, r.redirect_port)
}
