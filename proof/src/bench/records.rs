//! P15's record layer, side by side (issue 28): what `xce_proto::records` — rustls makes
//! the connection and keeps its keys (its kernel-connection API), the records are framed,
//! sealed and opened by our code around rustls's own record protection — saves against
//! rustls's unbuffered API doing the records itself (`UnbufferedClientConnection` /
//! `UnbufferedServerConnection`, no kernel connection), for small request/reply exchanges.
//!
//! Four ways to carry the same exchange, all in one run, in alternating batches (the order
//! rotated every round, so the machine's drift lands on all alike):
//! - `records.rs`: the library's record layer on both ends, with the buffers the library's
//!   `conn.rs` and the controller's `ServerTls` use (records decrypted in place in one input
//!   buffer, plaintext appended to the caller's, records sealed into one reused buffer);
//! - `rustls unbuffered`: the same handshake, then `WriteTraffic::encrypt` and `ReadTraffic`;
//! - `rustls buffered`: `ClientConnection`/`ServerConnection` (what the record layer replaced);
//! - `plain`: no TLS (what TLS costs at all).
//!
//! Two settings: both ends in memory in one thread (the CPU cost of a round trip, nothing
//! else), and over TCP loopback with the server end on its own thread (the round trip a
//! caller sees: system calls and wake-ups included). Every round trip is timed on its own.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Instant;

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::kernel::KernelConnection;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use xce_proto::records::{Kernel, Records, HEADER, MAX_RECORD};

use super::{Summary, Table};

/// What to run.
#[derive(Debug, Clone)]
pub struct RecordsOpts {
    /// Round trips per batch.
    pub batch: usize,
    /// Rounds: each implementation runs one batch per round.
    pub rounds: usize,
    /// Plaintext bytes of the request and of the reply (P1's `hello`: 104 and 272).
    pub req: usize,
    pub rep: usize,
    /// Pin every thread of the socket setting to this CPU (no cross-CPU wake-up, no
    /// placement luck), as P15's one-CPU row does.
    pub cpu: Option<usize>,
}

impl Default for RecordsOpts {
    fn default() -> Self {
        RecordsOpts {
            batch: 500,
            rounds: 40,
            req: 104,
            rep: 272,
            cpu: None,
        }
    }
}

/// Bytes read from a socket at once (the library's and the controller's chunk).
const READ_CHUNK: usize = 64 * 1024;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// One end of a connection after its handshake: sends a message, receives one of known size.
pub trait End: Send {
    /// Seals `msg` and writes it.
    fn send(&mut self, w: &mut dyn Write, msg: &[u8]) -> Result<(), String>;
    /// Reads until exactly `n` bytes of plaintext arrived; `plain` holds them.
    fn recv(&mut self, r: &mut dyn Read, n: usize, plain: &mut Vec<u8>) -> Result<(), String>;
}

/// Plain TCP: read through a chunk, as the controller's `Plain` does.
struct Plain {
    chunk: Vec<u8>,
}

impl End for Plain {
    fn send(&mut self, w: &mut dyn Write, msg: &[u8]) -> Result<(), String> {
        w.write_all(msg).map_err(err)
    }
    fn recv(&mut self, r: &mut dyn Read, n: usize, plain: &mut Vec<u8>) -> Result<(), String> {
        plain.clear();
        while plain.len() < n {
            let k = read_some(r, &mut self.chunk)?;
            plain.extend_from_slice(&self.chunk[..k]);
        }
        Ok(())
    }
}

fn read_some(r: &mut dyn Read, buf: &mut [u8]) -> Result<usize, String> {
    loop {
        match r.read(buf) {
            Ok(0) => return Err("end of stream".into()),
            Ok(k) => return Ok(k),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(err(e)),
        }
    }
}

/// The library's record layer with the library's buffers (`conn.rs`'s `fill_tls` and
/// `write_wbuf`, the controller's `ServerTls::read_into` and `write_all`).
struct OurRecords<K: Kernel> {
    records: Records<K>,
    inbuf: Box<[u8]>,
    inlen: usize,
    out: Vec<u8>,
    answer: Vec<u8>,
}

impl<K: Kernel> OurRecords<K> {
    fn new(records: Records<K>) -> Self {
        OurRecords {
            records,
            inbuf: vec![0u8; MAX_RECORD + READ_CHUNK].into_boxed_slice(),
            inlen: 0,
            out: Vec::new(),
            answer: Vec::new(),
        }
    }
}

fn whole_record(b: &[u8]) -> bool {
    b.len() >= HEADER && b.len() >= HEADER + u16::from_be_bytes([b[3], b[4]]) as usize
}

impl<K: Kernel + Send> End for OurRecords<K> {
    fn send(&mut self, w: &mut dyn Write, msg: &[u8]) -> Result<(), String> {
        self.out.clear();
        self.records.seal(msg, &mut self.out).map_err(err)?;
        w.write_all(&self.out).map_err(err)
    }
    fn recv(&mut self, r: &mut dyn Read, n: usize, plain: &mut Vec<u8>) -> Result<(), String> {
        plain.clear();
        while plain.len() < n {
            if !whole_record(&self.inbuf[..self.inlen]) {
                self.inlen += read_some(r, &mut self.inbuf[self.inlen..])?;
            }
            self.answer.clear();
            let o = self
                .records
                .open(&mut self.inbuf[..self.inlen], plain, &mut self.answer)
                .map_err(err)?;
            self.inbuf.copy_within(o.consumed..self.inlen, 0);
            self.inlen -= o.consumed;
            if o.closed {
                return Err("close_notify".into());
            }
        }
        Ok(())
    }
}

/// rustls's unbuffered client and server behind one face.
pub trait Unbuffered: Send {
    type Data;
    fn process<'c, 'i>(&'c mut self, input: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data>;
}

impl Unbuffered for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    fn process<'c, 'i>(&'c mut self, input: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(input)
    }
}

impl Unbuffered for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    fn process<'c, 'i>(&'c mut self, input: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(input)
    }
}

/// rustls's unbuffered API after the handshake, with the same buffers as [`OurRecords`].
struct RustlsUnbuffered<C: Unbuffered> {
    conn: C,
    inbuf: Box<[u8]>,
    inlen: usize,
    out: Vec<u8>,
}

impl<C: Unbuffered> RustlsUnbuffered<C> {
    fn new(conn: C) -> Self {
        RustlsUnbuffered {
            conn,
            inbuf: vec![0u8; MAX_RECORD + READ_CHUNK].into_boxed_slice(),
            inlen: 0,
            out: vec![0u8; 4096],
        }
    }
}

/// Encodes a handshake-state message (a key update's answer) into `out` from `at`.
fn encode_into<D>(
    s: &mut rustls::unbuffered::EncodeTlsData<'_, D>,
    out: &mut Vec<u8>,
    at: usize,
) -> Result<usize, String> {
    match s.encode(&mut out[at..]) {
        Ok(k) => Ok(k),
        Err(EncodeError::InsufficientSize(e)) => {
            out.resize(at + e.required_size, 0);
            s.encode(&mut out[at..]).map_err(err)
        }
        Err(e) => Err(err(e)),
    }
}

impl<C: Unbuffered> End for RustlsUnbuffered<C> {
    fn send(&mut self, w: &mut dyn Write, msg: &[u8]) -> Result<(), String> {
        let mut pending = 0;
        loop {
            let UnbufferedStatus { discard, state } =
                self.conn.process(&mut self.inbuf[..self.inlen]);
            let mut sent = false;
            match state.map_err(err)? {
                ConnectionState::WriteTraffic(mut t) => {
                    let n = match t.encrypt(msg, &mut self.out[pending..]) {
                        Ok(n) => n,
                        Err(EncryptError::InsufficientSize(e)) => {
                            self.out.resize(pending + e.required_size, 0);
                            t.encrypt(msg, &mut self.out[pending..]).map_err(err)?
                        }
                        Err(e) => return Err(err(e)),
                    };
                    w.write_all(&self.out[..pending + n]).map_err(err)?;
                    sent = true;
                }
                ConnectionState::EncodeTlsData(mut s) => {
                    pending += encode_into(&mut s, &mut self.out, pending)?;
                }
                ConnectionState::TransmitTlsData(t) => {
                    w.write_all(&self.out[..pending]).map_err(err)?;
                    pending = 0;
                    t.done();
                }
                other => return Err(format!("send: unexpected state {other:?}")),
            }
            self.inbuf.copy_within(discard..self.inlen, 0);
            self.inlen -= discard;
            if sent {
                return Ok(());
            }
        }
    }

    fn recv(&mut self, r: &mut dyn Read, n: usize, plain: &mut Vec<u8>) -> Result<(), String> {
        plain.clear();
        loop {
            let UnbufferedStatus { mut discard, state } =
                self.conn.process(&mut self.inbuf[..self.inlen]);
            let mut read_more = false;
            match state.map_err(err)? {
                ConnectionState::ReadTraffic(mut t) => {
                    while let Some(rec) = t.next_record() {
                        let rec = rec.map_err(err)?;
                        discard += rec.discard;
                        plain.extend_from_slice(rec.payload);
                    }
                }
                // Nothing more to read in what arrived.
                ConnectionState::WriteTraffic(_) => read_more = true,
                // A key update's answer to send, say: not in this exchange.
                other => return Err(format!("recv: unexpected state {other:?}")),
            }
            self.inbuf.copy_within(discard..self.inlen, 0);
            self.inlen -= discard;
            if plain.len() >= n {
                return Ok(());
            }
            if read_more {
                self.inlen += read_some(r, &mut self.inbuf[self.inlen..])?;
            }
        }
    }
}

/// rustls's buffered connection (`ClientConnection` / `ServerConnection`).
struct Buffered<C> {
    conn: C,
}

impl<C, D> End for Buffered<C>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<D>> + Send,
    D: rustls::SideData,
{
    fn send(&mut self, w: &mut dyn Write, msg: &[u8]) -> Result<(), String> {
        self.conn.writer().write_all(msg).map_err(err)?;
        while self.conn.wants_write() {
            self.conn.write_tls(w).map_err(err)?;
        }
        Ok(())
    }
    fn recv(&mut self, r: &mut dyn Read, n: usize, plain: &mut Vec<u8>) -> Result<(), String> {
        plain.clear();
        plain.resize(n, 0);
        let mut got = 0;
        while got < n {
            match self.conn.reader().read(&mut plain[got..]) {
                Ok(0) => return Err("end of stream".into()),
                Ok(k) => {
                    got += k;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(err(e)),
            }
            if self.conn.read_tls(r).map_err(err)? == 0 {
                return Err("end of stream".into());
            }
            self.conn.process_new_packets().map_err(err)?;
        }
        Ok(())
    }
}

/// A one-way in-memory pipe.
#[derive(Default)]
struct Pipe {
    buf: Vec<u8>,
    at: usize,
}

impl Write for Pipe {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for Pipe {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        let k = b.len().min(self.buf.len() - self.at);
        if k == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        b[..k].copy_from_slice(&self.buf[self.at..self.at + k]);
        self.at += k;
        Ok(k)
    }
}

/// The configurations of the library (TLS 1.3, ring, keys extractable) and of the
/// controller's client port, for `localhost` with a fresh self-signed certificate.
fn configs() -> Result<(Arc<rustls::ClientConfig>, Arc<rustls::ServerConfig>), String> {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).map_err(err)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ck.cert.der().clone()).map_err(err)?;
    let mut client = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(err)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.enable_secret_extraction = true;
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(err)?
        .with_no_client_auth()
        .with_single_cert(
            vec![ck.cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into()),
        )
        .map_err(err)?;
    server.enable_secret_extraction = true;
    Ok((Arc::new(client), Arc::new(server)))
}

/// Drives one unbuffered end until it blocks or is ready: what it sends goes to `out`.
fn step<C: Unbuffered>(c: &mut C, inb: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<bool, String> {
    loop {
        let UnbufferedStatus { discard, state } = c.process(inb);
        let mut stop = false;
        let mut ready = false;
        match state.map_err(err)? {
            ConnectionState::EncodeTlsData(mut s) => {
                let at = out.len();
                out.resize(at + 16 * 1024, 0);
                let k = encode_into(&mut s, out, at)?;
                out.truncate(at + k);
            }
            ConnectionState::TransmitTlsData(t) => t.done(),
            ConnectionState::BlockedHandshake => stop = true,
            ConnectionState::WriteTraffic(_) => {
                stop = true;
                ready = true;
            }
            other => return Err(format!("handshake: unexpected state {other:?}")),
        }
        inb.drain(..discard);
        if stop {
            return Ok(ready);
        }
    }
}

/// A handshake in memory between rustls's unbuffered client and server; what the server sent
/// after it (its session tickets) is given to the client by the caller.
fn handshake() -> Result<
    (
        UnbufferedClientConnection,
        UnbufferedServerConnection,
        Vec<u8>,
    ),
    String,
> {
    let (cc, sc) = configs()?;
    let name = rustls::pki_types::ServerName::try_from("localhost").map_err(err)?;
    let mut c = UnbufferedClientConnection::new(cc, name).map_err(err)?;
    let mut s = UnbufferedServerConnection::new(sc).map_err(err)?;
    let (mut to_s, mut to_c) = (Vec::new(), Vec::new());
    let (mut c_ready, mut s_ready) = (false, false);
    for _ in 0..20 {
        c_ready = step(&mut c, &mut to_c, &mut to_s)?;
        s_ready = step(&mut s, &mut to_s, &mut to_c)?;
        if c_ready && s_ready && to_s.is_empty() {
            break;
        }
    }
    if !(c_ready && s_ready) {
        return Err("no handshake".into());
    }
    Ok((c, s, to_c))
}

type Pair = (Box<dyn End>, Box<dyn End>);

/// The record layer on both ends, the server's tickets taken by the client.
fn our_pair() -> Result<Pair, String> {
    let (c, s, tickets) = handshake()?;
    let (cs, ck): (_, KernelConnection<ClientConnectionData>) =
        c.dangerous_into_kernel_connection().map_err(err)?;
    let (ss, sk): (_, KernelConnection<ServerConnectionData>) =
        s.dangerous_into_kernel_connection().map_err(err)?;
    let mut client = OurRecords::new(Records::new(cs, ck).map_err(err)?);
    let server = OurRecords::new(Records::new(ss, sk).map_err(err)?);
    let mut plain = Vec::new();
    // The tickets carry no plaintext: one `open` takes them all.
    client.inbuf[..tickets.len()].copy_from_slice(&tickets);
    client.inlen = tickets.len();
    let o = client
        .records
        .open(
            &mut client.inbuf[..client.inlen],
            &mut plain,
            &mut Vec::new(),
        )
        .map_err(err)?;
    if o.consumed != tickets.len() || !plain.is_empty() {
        return Err("tickets not taken".into());
    }
    client.inlen = 0;
    Ok((Box::new(client), Box::new(server)))
}

/// rustls's unbuffered API on both ends, the server's tickets taken by the client.
fn unbuffered_pair() -> Result<Pair, String> {
    let (c, s, tickets) = handshake()?;
    let mut client = RustlsUnbuffered::new(c);
    client.inbuf[..tickets.len()].copy_from_slice(&tickets);
    client.inlen = tickets.len();
    // Until the tickets are consumed: `WriteTraffic` with nothing left.
    loop {
        let UnbufferedStatus { discard, state } =
            client.conn.process(&mut client.inbuf[..client.inlen]);
        let done = matches!(state.map_err(err)?, ConnectionState::WriteTraffic(_));
        client.inbuf.copy_within(discard..client.inlen, 0);
        client.inlen -= discard;
        if done {
            break;
        }
    }
    if client.inlen != 0 {
        return Err("tickets not taken".into());
    }
    Ok((Box::new(client), Box::new(RustlsUnbuffered::new(s))))
}

/// rustls's buffered connections on both ends, handshake in memory.
fn buffered_pair() -> Result<Pair, String> {
    let (cc, sc) = configs()?;
    let name = rustls::pki_types::ServerName::try_from("localhost").map_err(err)?;
    let mut c = rustls::ClientConnection::new(cc, name).map_err(err)?;
    let mut s = rustls::ServerConnection::new(sc).map_err(err)?;
    let mut pipe = Vec::new();
    for _ in 0..10 {
        if !(c.is_handshaking() || s.is_handshaking() || c.wants_write() || s.wants_write()) {
            break;
        }
        c.write_tls(&mut pipe).map_err(err)?;
        s.read_tls(&mut &pipe[..]).map_err(err)?;
        pipe.clear();
        s.process_new_packets().map_err(err)?;
        s.write_tls(&mut pipe).map_err(err)?;
        c.read_tls(&mut &pipe[..]).map_err(err)?;
        pipe.clear();
        c.process_new_packets().map_err(err)?;
    }
    if c.is_handshaking() || s.is_handshaking() {
        return Err("no handshake".into());
    }
    Ok((
        Box::new(Buffered { conn: c }),
        Box::new(Buffered { conn: s }),
    ))
}

fn plain_pair() -> Result<Pair, String> {
    let p = || Plain {
        chunk: vec![0u8; READ_CHUNK],
    };
    Ok((Box::new(p()), Box::new(p())))
}

/// The implementations compared, in the table's order; the first is the reference.
const NAMES: [&str; 4] = [
    "records.rs (hand-written record layer)",
    "rustls unbuffered API",
    "rustls buffered connection",
    "plain TCP (no TLS)",
];

fn pairs() -> Result<Vec<Pair>, String> {
    Ok(vec![
        our_pair()?,
        unbuffered_pair()?,
        buffered_pair()?,
        plain_pair()?,
    ])
}

/// One request/reply round trip in memory: both ends in this thread.
fn round_in_memory(
    p: &mut Pair,
    pipes: &mut (Pipe, Pipe),
    req: &[u8],
    rep: &[u8],
    got: &mut Vec<u8>,
) -> Result<(), String> {
    p.0.send(&mut pipes.0, req)?;
    p.1.recv(&mut pipes.0, req.len(), got)?;
    p.1.send(&mut pipes.1, rep)?;
    p.0.recv(&mut pipes.1, rep.len(), got)?;
    if got.len() != rep.len() {
        return Err("reply lost bytes".into());
    }
    Ok(())
}

/// The samples of each implementation, µs per round trip, per round: `[impl][round][i]`.
type Samples = Vec<Vec<Vec<f64>>>;

fn message(n: usize, fill: u8) -> Vec<u8> {
    (0..n).map(|i| fill ^ i as u8).collect()
}

/// One warm-up batch of each implementation (not kept), then `o.rounds` rounds of one batch
/// each, the order rotated round by round; `round_trip(i)` times one of implementation `i`.
fn rotated(
    n: usize,
    o: &RecordsOpts,
    mut round_trip: impl FnMut(usize) -> Result<f64, String>,
) -> Result<Samples, String> {
    let mut samples: Samples = vec![Vec::with_capacity(o.rounds); n];
    for i in 0..n {
        for _ in 0..o.batch {
            round_trip(i)?;
        }
    }
    for round in 0..o.rounds {
        for k in 0..n {
            let i = (k + round) % n;
            let batch = (0..o.batch)
                .map(|_| round_trip(i))
                .collect::<Result<_, _>>()?;
            samples[i].push(batch);
        }
    }
    Ok(samples)
}

fn in_memory(o: &RecordsOpts) -> Result<Samples, String> {
    let mut ps = pairs()?;
    let mut pipes: Vec<(Pipe, Pipe)> = ps.iter().map(|_| Default::default()).collect();
    let (req, rep) = (message(o.req, 0xa5), message(o.rep, 0x5a));
    let mut got = Vec::new();
    rotated(ps.len(), o, |i| {
        let t = Instant::now();
        round_in_memory(&mut ps[i], &mut pipes[i], &req, &rep, &mut got)?;
        Ok(t.elapsed().as_secs_f64() * 1e6)
    })
}

fn pin_to(cpu: usize) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and sched_setaffinity read
    // and write only the set passed, for the calling thread (pid 0).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(format!(
            "cannot pin to CPU {cpu}: {}",
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Back to every CPU for whatever runs next in this process.
fn unpin() {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    // SAFETY: as in `pin_to`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in 0..n {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The server end of one implementation on a thread of its own (pinned to `cpu`), answering
/// every request of `req_len` bytes with `rep` until the client closes.
fn serve(
    mut server: Box<dyn End>,
    mut s: TcpStream,
    req_len: usize,
    rep: Vec<u8>,
    cpu: Option<usize>,
) -> std::thread::JoinHandle<Result<(), String>> {
    std::thread::spawn(move || {
        if let Some(c) = cpu {
            pin_to(c)?;
        }
        let mut got = Vec::new();
        loop {
            match server.recv(&mut s, req_len, &mut got) {
                Ok(()) => {}
                // The client closed: the run is over.
                Err(e) if e.contains("end of stream") => return Ok(()),
                Err(e) => return Err(e),
            }
            server.send(&mut s, &rep)?;
        }
    })
}

/// Over TCP loopback: one connection per implementation, its server end on a thread of its
/// own answering every request; this thread is the client.
fn over_sockets(o: &RecordsOpts) -> Result<Samples, String> {
    let (req, rep) = (message(o.req, 0xa5), message(o.rep, 0x5a));
    let mut clients = Vec::new();
    let mut servers = Vec::new();
    for (client, server) in pairs()? {
        let l = TcpListener::bind("127.0.0.1:0").map_err(err)?;
        let c = TcpStream::connect(l.local_addr().map_err(err)?).map_err(err)?;
        let (s, _) = l.accept().map_err(err)?;
        c.set_nodelay(true).map_err(err)?;
        s.set_nodelay(true).map_err(err)?;
        servers.push(serve(server, s, req.len(), rep.clone(), o.cpu));
        clients.push((client, c));
    }
    if let Some(c) = o.cpu {
        pin_to(c)?;
    }
    let mut got = Vec::new();
    let r = rotated(clients.len(), o, |i| {
        let (end, sock) = &mut clients[i];
        let t = Instant::now();
        end.send(sock, &req)?;
        end.recv(sock, rep.len(), &mut got)?;
        Ok(t.elapsed().as_secs_f64() * 1e6)
    });
    drop(clients);
    let mut server_err = None;
    for s in servers {
        match s.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => server_err = Some(e),
            Err(_) => server_err = Some("a server thread panicked".into()),
        }
    }
    if o.cpu.is_some() {
        unpin();
    }
    let samples = r?;
    match server_err {
        Some(e) => Err(format!("server end: {e}")),
        None => Ok(samples),
    }
}

/// The median of a batch.
fn median(v: &[f64]) -> f64 {
    Summary::of(v).map_or(f64::NAN, |s| s.p50)
}

/// Each implementation's distribution over all its round trips, and against `records.rs`:
/// the ratio of the p50s, and — paired by round, the batches of one round having run one
/// right after the other — the median over rounds of (its batch median − `records.rs`'s batch
/// median) and the rounds in which `records.rs`'s batch was the faster.
fn table(id: &'static str, title: &str, samples: &Samples) -> Table {
    let mut t = Table::new(id, title);
    t.header = [
        "implementation",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p50 vs records.rs",
        "paired Δ p50 (median of rounds)",
        "rounds records.rs faster",
        "n",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let all: Vec<Vec<f64>> = samples.iter().map(|r| r.concat()).collect();
    let sums: Vec<Option<Summary>> = all.iter().map(|s| Summary::of(s)).collect();
    let base = sums[0].map(|s| s.p50);
    let base_rounds: Vec<f64> = samples[0].iter().map(|b| median(b)).collect();
    for ((name, s), rounds) in NAMES.iter().zip(&sums).zip(samples) {
        let Some(s) = s else {
            t.row(vec![name.to_string(), "-".into()]);
            continue;
        };
        let diffs: Vec<f64> = rounds
            .iter()
            .zip(&base_rounds)
            .map(|(b, base)| median(b) - base)
            .collect();
        let faster = diffs.iter().filter(|d| **d > 0.0).count();
        let ratio = base.map_or("-".into(), |b| format!("{:.2}×", s.p50 / b));
        t.row(vec![
            name.to_string(),
            format!("{:.2}", s.p50),
            format!("{:.2}", s.p90),
            format!("{:.2}", s.p99),
            ratio,
            format!("{:+.2} µs", median(&diffs)),
            format!("{faster} of {}", diffs.len()),
            s.n.to_string(),
        ]);
    }
    t
}

/// Both settings; a table each.
pub fn run(o: &RecordsOpts) -> Result<Vec<Table>, String> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if let Some(c) = o.cpu {
        if c >= n {
            return Err(format!("--cpu {c}: this machine has CPUs 0..{n}"));
        }
    }
    let (c, _, _) = handshake()?;
    let suite = c
        .negotiated_cipher_suite()
        .map_or("?".to_string(), |s| format!("{:?}", s.suite()));
    let how = format!(
        "request {} B, reply {} B of plaintext; {} rounds of alternating batches of {} round trips per implementation (order rotated each round, one warm-up batch each not counted); TLS 1.3 as the library and the controller configure it (ring, {suite})",
        o.req, o.rep, o.rounds, o.batch
    );
    let mut mem = table(
        "P15-records",
        "in memory: both ends in one thread, no socket (CPU per round trip)",
        &in_memory(o)?,
    );
    mem.note(how.clone());
    let mut sock = table(
        "P15-records",
        &format!(
            "TCP loopback: client here, server end on its own thread{}",
            o.cpu
                .map(|c| format!(", every thread pinned to CPU {c}"))
                .unwrap_or_else(|| ", threads where the scheduler puts them".into())
        ),
        &over_sockets(o)?,
    );
    sock.note(how);
    Ok(vec![mem, sock])
}
