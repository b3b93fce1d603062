//! One connection to one controller: non-blocking TCP (optionally TLS 1.3), wire framing, and
//! deadline- and wake-bounded waits (F8, F9, F13).

use std::io::{self, Read, Write};
use std::mem::ManuallyDrop;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::ClientConnectionData;
use rustls::kernel::KernelConnection;
use rustls::pki_types::ServerName;

use super::fdcheck::FdIdent;
use super::records::{encode_handshake, handshake_alert, Records, MAX_RECORD};
use super::resolve;
use super::tls::cause_of;
use super::waker::{Wait, Waker};
use crate::error::{Error, TlsCause};
use crate::wire::{
    decode_reply, encode_request, encode_request_parts, frame_len, Limits, Op, Reply, Request,
    RequestHead,
};

/// Bytes read from the socket per `read` call.
const READ_CHUNK: usize = 16 * 1024;

/// Capacity a connection's read or write buffer may keep between messages (F22). A buffer
/// grown past it for one large message is given back once that message is consumed (or
/// sent), so a single 16 MiB reply does not stay resident for the life of the connection.
const KEEP_BUFFER: usize = 64 * 1024;

/// Replies with a wrong `seq` tolerated on one connection before it counts as broken (F9):
/// a stale reply or two after a timeout is normal, a stream of them is not.
pub const MAX_STRAY_REPLIES: u32 = 16;
/// Issue 29: the slowest a reply that is arriving may come (bytes per second of its frame)
/// and still be waited for past the reply timeout ([`Progress`]).
pub const MIN_REPLY_RATE: u64 = 8 * 1024;

/// Issue 29 (F8 on a slow link): a reply deadline that follows progress. The reply timeout
/// detects a silent peer — no byte for `idle` — not a slow one: each byte of the reply moves
/// the deadline to `idle` from then, as long as the frame keeps coming at [`MIN_REPLY_RATE`]
/// on average (its whole time is bounded by `idle` plus its length at that rate, once its
/// length is known) and never past `hard` (the call's deadline). A large listing page over a
/// congested link then arrives instead of being abandoned and asked for again.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub idle: Duration,
    pub hard: Option<Instant>,
    /// When the wait for the reply began, if the caller has read it already (the instant it
    /// sent the request: P2, no second clock read); `None`: when the receive starts.
    pub since: Option<Instant>,
}

impl Progress {
    /// The deadline after bytes arrived at `now`, for a receive that started at `started` with
    /// `deadline`, the frame's total length `total` when known.
    pub fn extend(
        &self,
        deadline: Instant,
        started: Instant,
        total: Option<usize>,
        now: Instant,
    ) -> Instant {
        let Some(total) = total else {
            return deadline;
        };
        let budget = self.idle + Duration::from_millis(total as u64 * 1000 / MIN_REPLY_RATE);
        let mut until = (now + self.idle).min(started + budget);
        if let Some(h) = self.hard {
            until = until.min(h);
        }
        deadline.max(until)
    }
}

/// A TLS connection after its handshake (P15): rustls made it and keeps its keys up to date
/// ([`Records`]); records are decrypted in place in `inbuf` and their plaintext appended
/// straight to the connection's `rbuf`.
struct ClientTls {
    records: Records<KernelConnection<ClientConnectionData>>,
    /// Received bytes not yet a whole record: at most one record and one read
    /// ([`TLS_INBUF`], allocated once).
    inbuf: Box<[u8]>,
    inlen: usize,
    /// Records to send; reused.
    out: Vec<u8>,
}

/// What a TLS connection's receive buffer holds: an incomplete record and one read.
const TLS_INBUF: usize = MAX_RECORD + READ_CHUNK;

/// An established connection.
pub struct Connection {
    /// Closed on drop only while the number still names this socket (F21): a caller that
    /// closed it and reused the number keeps its file.
    sock: ManuallyDrop<TcpStream>,
    /// What the socket's number named when we opened it (F21).
    ident: FdIdent,
    tls: Option<Box<ClientTls>>,
    /// Received plaintext not yet consumed as replies; reused for the connection's life.
    rbuf: Vec<u8>,
    /// The encoded request being sent; reused likewise.
    wbuf: Vec<u8>,
    limits: Limits,
    dead: bool,
    /// Wrong-seq replies dropped so far.
    strays: u32,
    /// `seq`s of requests whose replies are acknowledgements to collect, not to await (F12:
    /// the outbox of notifications), in the order sent.
    pending_acks: Vec<u64>,
    /// Acknowledgements received and not yet taken: `(seq, status)`.
    acks: Vec<(u64, i32)>,
    /// F29: the membership version stamped on the last successful reply or acknowledgement
    /// received here (0: none stamped yet).
    members_version: u64,
    /// The process generation (F26) that opened the socket: a forked child shares it with
    /// its parent, and a socket option set there (the reset on close) would change the
    /// parent's close too.
    opened_in: u64,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.sock.peer_addr().ok())
            .field("tls", &self.tls.is_some())
            .field("dead", &self.dead)
            .finish()
    }
}

impl Connection {
    /// Connects to `host:port` (every resolved address in turn) and, with `tls`, completes a
    /// TLS 1.3 handshake verifying the certificate against `host`. `deadline` bounds it all,
    /// the name lookup included (F8, F23); a wake ends it with `EINTR`. A lookup failure is
    /// `Error::Lookup` (its cause is dropped here: callers that report it resolve with
    /// [`resolve::resolve`] and call [`Connection::connect_addrs`]). A failed handshake is
    /// `Error::Tls` with its cause (a handshake that outlives the deadline:
    /// `TlsCause::HandshakeTimeout`); there is no plaintext fallback.
    pub fn connect(
        host: &str,
        port: u16,
        tls: Option<&Arc<rustls::ClientConfig>>,
        limits: Limits,
        deadline: Instant,
        waker: &Waker,
    ) -> Result<Connection, Error> {
        let addrs = resolve::resolve(host, port, deadline, waker)?;
        Connection::connect_addrs(host, &addrs, tls, limits, deadline, waker)
    }

    /// [`Connection::connect`] to addresses already resolved for `host` (which TLS verifies).
    pub fn connect_addrs(
        host: &str,
        addrs: &[SocketAddr],
        tls: Option<&Arc<rustls::ClientConfig>>,
        limits: Limits,
        deadline: Instant,
        waker: &Waker,
    ) -> Result<Connection, Error> {
        let mut last = Error::Lookup; // no address at all
        let mut sock = None;
        for &addr in addrs {
            match connect_socket(addr, deadline, waker) {
                Ok(s) => {
                    sock = Some(s);
                    break;
                }
                // Woken, cancelled, stopped: the caller's decision, not the address's fault.
                Err(e) if e.stops_the_call() => return Err(e),
                Err(e) => last = e,
            }
        }
        let sock = sock.ok_or(last)?;
        Connection::established(host, sock, tls, limits, deadline, waker)
    }

    /// Races connects to several hosts (each with its addresses, in order): the first attempt
    /// runs alone for `stagger`, then the next one starts beside it, and so on (an attempt that
    /// fails at once lets the next start at once; a zero `stagger` starts them all together).
    /// The first socket to connect wins and the others are closed, so a silent host costs
    /// nothing while another answers (F25, issue 12). Returns the winner's index in `hosts`
    /// and its connection (TLS completed); else the last error, or `ETIMEDOUT` at `deadline`.
    pub fn connect_race(
        hosts: &[(&str, &[SocketAddr])],
        stagger: std::time::Duration,
        tls: Option<&Arc<rustls::ClientConfig>>,
        limits: Limits,
        deadline: Instant,
        waker: &Waker,
    ) -> Result<(usize, Connection), Error> {
        let mut race = Race {
            attempts: hosts
                .iter()
                .enumerate()
                .flat_map(|(i, (_, addrs))| addrs.iter().map(move |a| (i, *a)))
                .collect(),
            next: 0,
            next_start: Instant::now(),
            pending: Vec::new(),
            last: Error::Lookup,
        };
        loop {
            if let Some((i, fd)) = race.start_due(stagger) {
                let sock = TcpStream::from(fd);
                let conn = Connection::established(hosts[i].0, sock, tls, limits, deadline, waker)?;
                return Ok((i, conn));
            }
            if race.pending.is_empty() {
                return Err(race.last);
            }
            let more = race.next < race.attempts.len();
            let until = if more {
                race.next_start.min(deadline)
            } else {
                deadline
            };
            let mut fds: Vec<libc::pollfd> = race
                .pending
                .iter()
                .map(|(_, fd)| libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                })
                .collect();
            let ready = waker.wait_fds(&mut fds, Some(until))?;
            if !ready {
                if Instant::now() >= deadline || !more || waker.watch_fired() {
                    return Err(Error::Errno(libc::ETIMEDOUT));
                }
                continue; // time to start the next attempt
            }
            if let Some((i, fd)) = race.settle(&fds) {
                drop(race); // the losers are closed
                let sock = TcpStream::from(fd);
                let conn = Connection::established(hosts[i].0, sock, tls, limits, deadline, waker)?;
                return Ok((i, conn));
            }
        }
    }

    /// The connection over a connected socket: Nagle off, TLS handshake when configured.
    fn established(
        host: &str,
        sock: TcpStream,
        tls: Option<&Arc<rustls::ClientConfig>>,
        limits: Limits,
        deadline: Instant,
        waker: &Waker,
    ) -> Result<Connection, Error> {
        // Requests are small and latency-bound: never wait for Nagle.
        sock.set_nodelay(true).map_err(|e| Error::from_io(&e))?;
        let ident = FdIdent::of(sock.as_raw_fd()).ok_or(Error::Errno(libc::EBADF))?;
        let mut conn = Connection {
            sock: ManuallyDrop::new(sock),
            ident,
            tls: None,
            rbuf: Vec::with_capacity(READ_CHUNK),
            wbuf: Vec::new(),
            limits,
            dead: false,
            strays: 0,
            pending_acks: Vec::new(),
            opened_in: crate::process::fork_generation(),
            acks: Vec::new(),
            members_version: 0,
        };
        if let Some(cfg) = tls {
            let name = ServerName::try_from(host.to_string())
                .map_err(|_| Error::Tls(TlsCause::NameMismatch))?;
            let tls = conn
                .handshake(cfg, name, deadline, waker)
                .map_err(|e| match e {
                    Error::Errno(libc::ETIMEDOUT) => Error::Tls(TlsCause::HandshakeTimeout),
                    e => e,
                })?;
            conn.tls = Some(Box::new(tls));
        }
        Ok(conn)
    }

    /// Sends one request. An I/O failure marks the connection dead.
    pub fn send(&mut self, req: &Request, deadline: Instant, waker: &Waker) -> Result<(), Error> {
        self.wbuf.clear();
        encode_request(req, &mut self.wbuf);
        let r = self.write_wbuf(deadline, waker);
        self.trim_wbuf();
        self.note(r)
    }

    /// [`Connection::send`] from the envelope fields and a borrowed op (no clone per re-send).
    pub fn send_op(
        &mut self,
        head: &RequestHead,
        op: &Op,
        deadline: Instant,
        waker: &Waker,
    ) -> Result<(), Error> {
        self.wbuf.clear();
        encode_request_parts(head, op, &mut self.wbuf);
        let r = self.write_wbuf(deadline, waker);
        self.trim_wbuf();
        self.note(r)
    }

    /// Gives back a write buffer that one large request grew (F22).
    fn trim_wbuf(&mut self) {
        if self.wbuf.capacity() > KEEP_BUFFER {
            self.wbuf = Vec::new();
        }
    }

    /// Waits for the reply whose `seq` is `expected_seq`, dropping others (F9). The deadline
    /// is the reply timeout (F8): passing it is `ETIMEDOUT` and kills the connection, as do EOF,
    /// an undecodable reply (`E_XCE_PROTO`) and more than [`MAX_STRAY_REPLIES`] stray replies.
    /// A wake returns `EINTR` and leaves the connection usable.
    pub fn recv(
        &mut self,
        expected_seq: u64,
        deadline: Instant,
        waker: &Waker,
    ) -> Result<Reply, Error> {
        self.recv_progress(expected_seq, deadline, None, waker)
    }

    /// [`Connection::recv`] whose deadline follows the reply's progress (issue 29, [`Progress`]).
    pub fn recv_progress(
        &mut self,
        expected_seq: u64,
        deadline: Instant,
        progress: Option<Progress>,
        waker: &Waker,
    ) -> Result<Reply, Error> {
        let r = self
            .recv_frames(Some(expected_seq), deadline, progress, waker)
            .map(|r| r.expect("a reply when one is awaited"));
        self.note(r)
    }

    /// [`Connection::recv`] with a soft deadline: `Ok(None)` when it passes first, and the
    /// connection stays usable (what arrived so far stays buffered). F25: the loop waits this
    /// way up to the suspicion threshold, then asks another controller while waiting on.
    /// With `progress`, a reply that is arriving moves `deadline` as [`Connection::recv_progress`]
    /// does (issue 29: a reply that has begun to arrive is slow, not late); `deadline` is left
    /// where the wait ended, so a caller that waits again goes on from there.
    pub fn recv_by(
        &mut self,
        expected_seq: u64,
        deadline: &mut Instant,
        progress: Option<Progress>,
        waker: &Waker,
    ) -> Result<Option<Reply>, Error> {
        let r = self
            .recv_frames_by(Some(expected_seq), deadline, progress, waker)
            .map(|r| r.expect("a reply when one is awaited"));
        match r {
            Err(Error::Errno(libc::ETIMEDOUT)) => Ok(None),
            r => self.note(r).map(Some),
        }
    }

    /// F12: the reply to request `seq` is an acknowledgement: collected by any later receive
    /// on this connection (never a stray), and taken with [`Connection::take_acks`].
    pub fn expect_ack(&mut self, seq: u64) {
        self.pending_acks.push(seq);
    }

    /// Acknowledgements expected and not received yet.
    pub fn acks_pending(&self) -> usize {
        self.pending_acks.len()
    }

    /// F29: the membership version the peer stamped on its last successful reply or
    /// acknowledgement on this connection (0: none yet). The loop compares it with the version
    /// of the members it learned; the members themselves are only ever learned from a `hello`.
    pub fn members_version(&self) -> u64 {
        self.members_version
    }

    /// The acknowledgements received so far, `(seq, status)`, in arrival order.
    pub fn take_acks(&mut self) -> Vec<(u64, i32)> {
        std::mem::take(&mut self.acks)
    }

    /// F12: receives acknowledgements until none is pending (`Ok(true)`) or `deadline` passes
    /// (`Ok(false)`: the connection stays usable, what arrived so far is kept). A deadline in
    /// the past only takes what already arrived, without waiting.
    pub fn collect_acks(&mut self, deadline: Instant, waker: &Waker) -> Result<bool, Error> {
        if self.pending_acks.is_empty() {
            return Ok(true);
        }
        match self.recv_frames(None, deadline, None, waker) {
            Ok(_) => Ok(true),
            Err(Error::Errno(libc::ETIMEDOUT)) => Ok(false),
            Err(e) => self.note(Err(e)),
        }
    }

    /// The socket's descriptor, for a wait that must end when a reply arrives on it (F25).
    pub fn raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Whether the connection may be used for the next request: no past failure, and its
    /// number still names our socket in this process (F21: not closed and reused by the
    /// caller, not inherited through `fork`). One `fstat`, no I/O.
    pub fn usable(&mut self) -> bool {
        if !self.dead && !self.ident.still_ours(self.sock.as_raw_fd()) {
            self.dead = true;
        }
        !self.dead
    }

    /// F12: whether the connection is known unusable — a past failure, a number that is not
    /// ours any more, or the peer closed or reset it (checked now, without blocking).
    pub fn is_dead(&mut self) -> bool {
        if self.usable() {
            let ev = poll_now(self.sock.as_raw_fd(), libc::POLLIN | libc::POLLRDHUP);
            if ev & (libc::POLLHUP | libc::POLLERR | libc::POLLRDHUP | libc::POLLNVAL) != 0 {
                self.dead = true;
            }
        }
        self.dead
    }

    /// Declares the connection unusable (the loop is about to drop it). Its close then aborts
    /// it (see [`Drop`]).
    pub fn mark_dead(&mut self) {
        self.dead = true;
    }

    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// TLS: our send keys change every `records` records ([`Records::update_keys_after`];
    /// false without TLS). Not a setting of the library: the interoperability tests make the
    /// library start key updates with it (proof/tests/tls_interop.rs).
    #[doc(hidden)]
    pub fn tls_update_keys_after(&mut self, records: u64) -> bool {
        match self.tls.as_mut() {
            Some(t) => {
                t.records.update_keys_after(records);
                true
            }
            None => false,
        }
    }
}

impl Drop for Connection {
    /// A dead connection (abandoned with a request unanswered: a reply timeout, F25's late
    /// request re-sent elsewhere, F28's request answered through a standby) closes with a
    /// reset, not a FIN: `SO_LINGER` 0 discards what its send buffer still holds, so the
    /// kernel does not go on retransmitting that request after the loop re-sent it under the
    /// same request id — for minutes on a path that drops packets, long enough for the
    /// controller's exactly-once window (the client's last 256 request ids) to move past it
    /// once the path heals. A healthy connection closes cleanly: with TLS, a `close_notify`
    /// first (RFC 8446 6.1: the end of our data, not a truncation), best effort. One a forked
    /// child inherited closes with neither: the socket and its TLS stream are the parent's.
    fn drop(&mut self) {
        if self.ident.same_file(self.sock.as_raw_fd()) {
            let ours = self.opened_in == crate::process::fork_generation();
            if !self.dead && ours {
                if let Some(t) = self.tls.as_mut() {
                    let mut alert = Vec::new();
                    if t.records.close_notify(&mut alert).is_ok() {
                        // Non-blocking: a send buffer that cannot take 24 bytes is a peer
                        // that reads nothing any more.
                        let _ = (&*self.sock).write(&alert);
                    }
                }
            }
            if self.dead && ours {
                let abort = libc::linger {
                    l_onoff: 1,
                    l_linger: 0,
                };
                // SAFETY: the number names our socket (checked just above); `abort` is a live
                // `linger` of the size passed. A failure only leaves the default close.
                unsafe {
                    libc::setsockopt(
                        self.sock.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_LINGER,
                        (&abort as *const libc::linger).cast(),
                        std::mem::size_of::<libc::linger>() as libc::socklen_t,
                    )
                };
            }
            // SAFETY: dropped exactly once, here; the number still names our socket (in a
            // forked child, its own copy of it), so closing it closes nothing of the caller's.
            unsafe { ManuallyDrop::drop(&mut self.sock) };
        }
        // Otherwise the caller closed our socket and the number now names one of its files:
        // forget it (F21).
    }
}

impl Connection {
    /// Any error but a wake leaves the connection unusable.
    fn note<T>(&mut self, r: Result<T, Error>) -> Result<T, Error> {
        if let Err(e) = &r {
            if *e != Error::Errno(libc::EINTR) {
                self.dead = true;
            }
        }
        r
    }

    fn wait(&self, events: i16, deadline: Instant, waker: &Waker) -> Result<(), Error> {
        match waker.wait(Some(self.fd()), events, Some(deadline))? {
            Wait::Ready(_) => Ok(()),
            Wait::TimedOut => Err(Error::Errno(libc::ETIMEDOUT)),
        }
    }

    /// The TLS 1.3 handshake, driven through rustls's unbuffered client (certificates and
    /// identities checked by rustls as configured), then the connection's keys handed to the
    /// record layer. A failure is `Error::Tls` naming its cause, after rustls's alert was sent
    /// on a best-effort basis; EOF is `ECONNRESET`; `deadline` bounds it all.
    fn handshake(
        &mut self,
        cfg: &Arc<rustls::ClientConfig>,
        name: ServerName<'static>,
        deadline: Instant,
        waker: &Waker,
    ) -> Result<ClientTls, Error> {
        use rustls::unbuffered::ConnectionState;
        let mut conn = rustls::client::UnbufferedClientConnection::new(extractable(cfg), name)
            .map_err(|e| Error::Tls(cause_of(&e)))?;
        // Received bytes rustls has not consumed yet (at most a handshake message's worth).
        let mut inbuf: Vec<u8> = Vec::new();
        let mut out: Vec<u8> = Vec::new();
        loop {
            let st = conn.process_tls_records(&mut inbuf);
            let discard = st.discard;
            let mut failed = None;
            let mut read_more = false;
            let mut done = false;
            match st.state {
                Err(e) => failed = Some(e),
                Ok(ConnectionState::EncodeTlsData(mut s)) => {
                    encode_handshake(&mut s, &mut out)
                        .map_err(|_| Error::Tls(TlsCause::Unspecified))?;
                }
                Ok(ConnectionState::TransmitTlsData(t)) => {
                    let mut started = false;
                    self.write_raw(&out, deadline, waker, &mut started)?;
                    out.clear();
                    t.done();
                }
                Ok(ConnectionState::BlockedHandshake) => read_more = true,
                Ok(ConnectionState::WriteTraffic(_)) => done = true,
                Ok(ConnectionState::ReadTraffic(mut r)) => {
                    // Data the controller sent right after its half of the handshake.
                    while let Some(rec) = r.next_record() {
                        let rec = rec.map_err(|e| Error::Tls(cause_of(&e)))?;
                        self.rbuf.extend_from_slice(rec.payload);
                    }
                }
                Ok(ConnectionState::PeerClosed) | Ok(ConnectionState::Closed) => {
                    return Err(Error::Errno(libc::ECONNRESET))
                }
                Ok(_) => return Err(Error::Tls(TlsCause::Unspecified)),
            }
            inbuf.drain(..discard);
            if let Some(e) = failed {
                // rustls queued its alert: send it, best effort.
                let alert = handshake_alert(conn.process_tls_records(&mut inbuf).state);
                let _ = (&*self.sock).write(&alert);
                return Err(Error::Tls(cause_of(&e)));
            }
            if done {
                break;
            }
            if read_more {
                self.read_handshake(&mut inbuf, deadline, waker)?;
            }
        }
        into_record_layer(conn, &inbuf)
    }

    /// Appends what the socket has to `inbuf` (the handshake's next bytes), waiting for them
    /// until `deadline`. A peer that sends more than a handshake's worth is not TLS.
    fn read_handshake(
        &self,
        inbuf: &mut Vec<u8>,
        deadline: Instant,
        waker: &Waker,
    ) -> Result<(), Error> {
        if inbuf.len() >= super::records::MAX_HANDSHAKE + MAX_RECORD {
            return Err(Error::Tls(TlsCause::NotTls));
        }
        let at = inbuf.len();
        inbuf.resize(at + READ_CHUNK, 0);
        let r = (&*self.sock).read(&mut inbuf[at..]);
        inbuf.truncate(at + *r.as_ref().unwrap_or(&0));
        match r {
            Ok(0) => Err(Error::Errno(libc::ECONNRESET)),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.wait(libc::POLLIN, deadline, waker)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(Error::from_io(&e)),
        }
    }

    /// Writes all of `buf` to the socket, waiting until `deadline`; `started` once a byte left.
    fn write_raw(
        &self,
        buf: &[u8],
        deadline: Instant,
        waker: &Waker,
        started: &mut bool,
    ) -> Result<(), Error> {
        let mut off = 0;
        while off < buf.len() {
            match (&*self.sock).write(&buf[off..]) {
                Ok(0) => return Err(Error::Errno(libc::EPIPE)),
                Ok(n) => {
                    off += n;
                    *started = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wait(libc::POLLOUT, deadline, waker)?
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::from_io(&e)),
            }
        }
        Ok(())
    }

    /// Writes the request in `wbuf`. A failure once part of it left (a wake included) leaves
    /// the connection unusable: the rest must never follow later and complete a request its
    /// caller was told did not leave (F19: `maybe_applied = 0` is a promise). With TLS, once
    /// its records are sealed (their sequence numbers spent), any failure does.
    fn write_wbuf(&mut self, deadline: Instant, waker: &Waker) -> Result<(), Error> {
        let mut started = false;
        let r = self.write_wbuf_inner(deadline, waker, &mut started);
        if r.is_err() && started {
            self.dead = true;
        }
        r
    }

    fn write_wbuf_inner(
        &mut self,
        deadline: Instant,
        waker: &Waker,
        started: &mut bool,
    ) -> Result<(), Error> {
        let Some(t) = self.tls.as_mut() else {
            return self.write_raw(&self.wbuf, deadline, waker, started);
        };
        let mut out = std::mem::take(&mut t.out);
        out.clear();
        let sealed = t.records.seal(&self.wbuf, &mut out);
        *started = true;
        let r = match sealed {
            Ok(()) => self.write_raw(&out, deadline, waker, started),
            Err(e) => Err(Error::Tls(cause_of(&e))),
        };
        if out.capacity() <= KEEP_BUFFER {
            if let Some(t) = self.tls.as_mut() {
                t.out = out;
            }
        }
        r
    }

    /// Receives frames until the reply to `expected` arrives (`Ok(Some)`), or — with `None` —
    /// until no acknowledgement is pending (`Ok(None)`). Acknowledgements met on the way are
    /// kept for [`Connection::take_acks`].
    fn recv_frames(
        &mut self,
        expected: Option<u64>,
        mut deadline: Instant,
        progress: Option<Progress>,
        waker: &Waker,
    ) -> Result<Option<Reply>, Error> {
        self.recv_frames_by(expected, &mut deadline, progress, waker)
    }

    /// [`Connection::recv_frames`] that leaves `deadline` where `progress` moved it.
    fn recv_frames_by(
        &mut self,
        expected: Option<u64>,
        deadline: &mut Instant,
        progress: Option<Progress>,
        waker: &Waker,
    ) -> Result<Option<Reply>, Error> {
        let started = progress.and_then(|p| p.since).unwrap_or_else(Instant::now);
        // Whether bytes arrived since the deadline last followed them (issue 29): it moves
        // only when another read is due, so a reply that arrives whole reads no clock (P2).
        let mut arrived = false;
        loop {
            if expected.is_none() && self.pending_acks.is_empty() {
                return Ok(None);
            }
            // The first frame's length, once its segment table is in (checked against the
            // limits; the body may still be arriving).
            let total = frame_len(&self.rbuf, &self.limits).map_err(|e| {
                // A TLS record where a plaintext reply was due: the controller speaks TLS.
                if self.tls.is_none() && looks_like_tls(&self.rbuf) {
                    Error::Tls(TlsCause::PeerSpeaksTls)
                } else {
                    e
                }
            })?;
            if let Some(n) = total.filter(|&n| n <= self.rbuf.len()) {
                let reply = decode_reply(&self.rbuf[..n], &self.limits);
                self.rbuf.drain(..n);
                if self.rbuf.capacity() > KEEP_BUFFER {
                    self.rbuf.shrink_to(READ_CHUNK.max(self.rbuf.len()));
                }
                let reply = reply?;
                let stamp = |c: &mut Self, r: &Reply| {
                    if r.status >= 0 && r.members_version != 0 {
                        c.members_version = r.members_version;
                    }
                };
                if Some(reply.seq) == expected {
                    stamp(self, &reply);
                    return Ok(Some(reply));
                }
                if let Some(k) = self.pending_acks.iter().position(|&s| s == reply.seq) {
                    stamp(self, &reply);
                    self.pending_acks.remove(k);
                    self.acks.push((reply.seq, reply.status));
                    continue;
                }
                // F9: a late reply to an earlier request; never handed to this one.
                self.strays += 1;
                if self.strays > MAX_STRAY_REPLIES {
                    return Err(Error::Proto);
                }
                continue;
            }
            if let (true, Some(p)) = (arrived, progress) {
                *deadline = p.extend(*deadline, started, total, Instant::now());
            }
            self.fill(total, *deadline, waker)?;
            arrived = true;
        }
    }

    /// Appends at least one byte of plaintext to `rbuf`, waiting until `deadline`. The buffer
    /// grows geometrically as bytes arrive, but never past the frame being received
    /// (`frame_total`, when its table is in) plus one read: memory follows what arrived, not
    /// what a length prefix claims, and a 16 MiB reply is not given a 32 MiB buffer.
    fn fill(
        &mut self,
        frame_total: Option<usize>,
        deadline: Instant,
        waker: &Waker,
    ) -> Result<(), Error> {
        if self.tls.is_some() {
            return self.fill_tls(frame_total, deadline, waker);
        }
        let len = self.rbuf.len();
        if self.rbuf.capacity() < len + READ_CHUNK {
            let mut cap = (self.rbuf.capacity() * 2).max(len + READ_CHUNK);
            if let Some(total) = frame_total {
                cap = cap.min(total.max(len + READ_CHUNK));
            }
            self.rbuf.reserve_exact(cap - len);
        }
        self.rbuf.resize(len + READ_CHUNK, 0);
        let r = self.fill_into(len, deadline, waker);
        let n = *r.as_ref().unwrap_or(&0);
        self.rbuf.truncate(len + n);
        r.map(drop)
    }

    fn fill_into(&mut self, at: usize, deadline: Instant, waker: &Waker) -> Result<usize, Error> {
        loop {
            match self.sock.read(&mut self.rbuf[at..]) {
                // EOF before the awaited reply: the peer went away.
                Ok(0) => return Err(Error::Errno(libc::ECONNRESET)),
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.wait(libc::POLLIN, deadline, waker)?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::from_io(&e)),
            }
        }
    }

    /// [`Connection::fill`] over TLS: reads into the record buffer and decrypts every whole
    /// record there, until some plaintext came (appended to `rbuf`, whose growth follows the
    /// same bound as a plain read's: at most the frame being received or what arrived). A
    /// `KeyUpdate` the peer asks for is answered before returning. `close_notify` (or EOF)
    /// before the awaited reply is `ECONNRESET`; a record that does not decrypt or breaks the
    /// protocol is `Error::Tls`, after an alert sent on a best-effort basis.
    fn fill_tls(
        &mut self,
        frame_total: Option<usize>,
        deadline: Instant,
        waker: &Waker,
    ) -> Result<(), Error> {
        loop {
            let t = self.tls.as_mut().expect("TLS fill without TLS");
            if t.records.peer_closed() {
                return Err(Error::Errno(libc::ECONNRESET));
            }
            // Whole records already buffered are decrypted first (after a key update's
            // answer was written, say); else one read.
            if t.inlen < super::records::HEADER || !whole_record(&t.inbuf[..t.inlen]) {
                match (&*self.sock).read(&mut t.inbuf[t.inlen..]) {
                    Ok(0) => return Err(Error::Errno(libc::ECONNRESET)),
                    Ok(n) => t.inlen += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.wait(libc::POLLIN, deadline, waker)?;
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(Error::from_io(&e)),
                }
            }
            // The plaintext is at most the ciphertext: room for it, bounded like a plain read.
            let len = self.rbuf.len();
            let want = len + t.inlen;
            if self.rbuf.capacity() < want {
                let mut cap = (self.rbuf.capacity() * 2).max(want);
                if let Some(total) = frame_total {
                    cap = cap.min(total.max(want));
                }
                self.rbuf.reserve_exact(cap - len);
            }
            let mut out = std::mem::take(&mut t.out);
            out.clear();
            let r = t
                .records
                .open(&mut t.inbuf[..t.inlen], &mut self.rbuf, &mut out);
            let opened = match r {
                Ok(o) => o,
                Err(e) => {
                    let mut a = Vec::new();
                    if t.records
                        .alert(
                            Records::<KernelConnection<ClientConnectionData>>::alert_for(&e),
                            &mut a,
                        )
                        .is_ok()
                    {
                        let _ = (&*self.sock).write(&a);
                    }
                    return Err(Error::Tls(cause_of(&e)));
                }
            };
            t.inbuf.copy_within(opened.consumed..t.inlen, 0);
            t.inlen -= opened.consumed;
            if !out.is_empty() {
                // A key update's answer: our send keys changed already, so a connection that
                // could not send it (a wake included) is unusable.
                let mut started = false;
                if let Err(e) = self.write_raw(&out, deadline, waker, &mut started) {
                    self.dead = true;
                    return Err(e);
                }
            }
            if let Some(t) = self.tls.as_mut() {
                t.out = out;
            }
            if self.rbuf.len() > len {
                return Ok(());
            }
            if opened.closed {
                return Err(Error::Errno(libc::ECONNRESET));
            }
        }
    }
}

/// Whether `b` (at least a header) holds a whole TLS record.
fn whole_record(b: &[u8]) -> bool {
    b.len() >= super::records::HEADER + u16::from_be_bytes([b[3], b[4]]) as usize
}

/// Whether `b` starts with a TLS record header (an alert or a handshake, TLS 1.0–1.3). As a
/// Cap'n Proto frame these bytes would claim ~200,000 segments, which no frame has.
fn looks_like_tls(b: &[u8]) -> bool {
    b.len() >= 3 && matches!(b[0], 0x15 | 0x16) && b[1] == 3 && b[2] <= 4
}

/// poll(2) one fd without waiting; returns its revents (0 if nothing).
fn poll_now(fd: RawFd, events: i16) -> i16 {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: p is a live pollfd; timeout 0 never blocks.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    if n > 0 {
        p.revents
    } else {
        0
    }
}

/// `cfg`, with the keys allowed to leave rustls (ours allows it already: no copy then); the
/// record layer takes them over after the handshake.
fn extractable(cfg: &Arc<rustls::ClientConfig>) -> Arc<rustls::ClientConfig> {
    if cfg.enable_secret_extraction {
        cfg.clone()
    } else {
        let mut c = (**cfg).clone();
        c.enable_secret_extraction = true;
        Arc::new(c)
    }
}

/// The record layer over a completed handshake's keys. What followed the handshake in the
/// last read (`rest`: the controller's session tickets, say) is its first input.
fn into_record_layer(
    conn: rustls::client::UnbufferedClientConnection,
    rest: &[u8],
) -> Result<ClientTls, Error> {
    let (secrets, kernel) = conn
        .dangerous_into_kernel_connection()
        .map_err(|e| Error::Tls(cause_of(&e)))?;
    let records = Records::new(secrets, kernel).map_err(|e| Error::Tls(cause_of(&e)))?;
    if rest.len() > MAX_RECORD {
        return Err(Error::Tls(TlsCause::NotTls));
    }
    let mut buf = vec![0u8; TLS_INBUF].into_boxed_slice();
    buf[..rest.len()].copy_from_slice(rest);
    Ok(ClientTls {
        records,
        inlen: rest.len(),
        inbuf: buf,
        out: Vec::new(),
    })
}

/// The attempts of one [`Connection::connect_race`]: (host index, address) in order, the
/// next to start and when, the ones in flight, and the last failure seen.
struct Race {
    attempts: Vec<(usize, SocketAddr)>,
    next: usize,
    next_start: Instant,
    pending: Vec<(usize, OwnedFd)>,
    last: Error,
}

impl Race {
    /// Starts the attempts that are due (or all remaining ones if none is pending); one that
    /// connected at once wins there and then.
    fn start_due(&mut self, stagger: Duration) -> Option<(usize, OwnedFd)> {
        use super::waker::MAX_WAIT_FDS;
        while self.next < self.attempts.len()
            && self.pending.len() < MAX_WAIT_FDS
            && (self.pending.is_empty() || Instant::now() >= self.next_start)
        {
            let (i, addr) = self.attempts[self.next];
            self.next += 1;
            match start_connect(addr) {
                Ok((fd, true)) => return Some((i, fd)),
                Ok((fd, false)) => {
                    self.pending.push((i, fd));
                    self.next_start = Instant::now() + stagger;
                }
                Err(e) => self.last = e,
            }
        }
        None
    }

    /// After a poll of the pending attempts (`fds`, in their order): the first ready one in
    /// host order that connected wins; the ready ones that failed are dropped (closed), the
    /// last of their errors kept.
    fn settle(&mut self, fds: &[libc::pollfd]) -> Option<(usize, OwnedFd)> {
        let mut done: Vec<usize> = (0..self.pending.len())
            .filter(|&k| fds[k].revents != 0)
            .collect();
        done.sort_by_key(|&k| self.pending[k].0);
        let mut winner = None;
        for &k in &done {
            match so_error(&self.pending[k].1) {
                Ok(()) if winner.is_none() => winner = Some(k),
                Ok(()) => {}
                Err(e) => self.last = e,
            }
        }
        if let Some(k) = winner {
            return Some(self.pending.swap_remove(k));
        }
        let failed: Vec<usize> = done;
        let mut k = 0;
        self.pending.retain(|_| {
            let keep = !failed.contains(&k);
            k += 1;
            keep
        });
        None
    }
}

/// Starts a non-blocking connect; the socket and whether it is already connected.
fn start_connect(addr: SocketAddr) -> Result<(OwnedFd, bool), Error> {
    let domain = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: socket(2) takes no pointers; a non-negative return is a new fd we own.
    let fd = unsafe {
        libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(Error::from_io(&io::Error::last_os_error()));
    }
    // SAFETY: fd was just created and is owned by nothing else; OwnedFd closes it on any error.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let (storage, len) = sockaddr_of(addr);
    // SAFETY: storage is a sockaddr_storage holding a sockaddr_in/in6 of `len` bytes.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&storage as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    if rc == 0 {
        return Ok((fd, true));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EINPROGRESS) {
        return Err(Error::from_io(&e));
    }
    Ok((fd, false))
}

/// The outcome of a non-blocking connect that poll reported done.
fn so_error(fd: &OwnedFd) -> Result<(), Error> {
    let mut err: libc::c_int = 0;
    let mut err_len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: err and err_len are live and sized for SO_ERROR's c_int result.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut err_len,
        )
    };
    if rc != 0 {
        return Err(Error::from_io(&io::Error::last_os_error()));
    }
    if err != 0 {
        return Err(Error::Errno(err));
    }
    Ok(())
}

/// A non-blocking connect that a wake can interrupt and `deadline` bounds (F8, F13).
fn connect_socket(addr: SocketAddr, deadline: Instant, waker: &Waker) -> Result<TcpStream, Error> {
    let (fd, done) = start_connect(addr)?;
    if !done {
        match waker.wait(Some(fd.as_raw_fd()), libc::POLLOUT, Some(deadline))? {
            Wait::TimedOut => return Err(Error::Errno(libc::ETIMEDOUT)),
            Wait::Ready(_) => {}
        }
        so_error(&fd)?;
    }
    Ok(TcpStream::from(fd))
}

/// The C socket address of `addr`.
fn sockaddr_of(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid (AF_UNSPEC) value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    /// Issue 29: the reply deadline follows progress, within the frame's floor-rate budget and
    /// the call's deadline; before the frame's length is known it does not move.
    #[test]
    fn a_reply_deadline_follows_progress_within_its_budget() {
        let t0 = Instant::now();
        let ms = |n: u64| Duration::from_millis(n);
        let p = Progress {
            idle: ms(300),
            hard: None,
            since: None,
        };
        let d0 = t0 + ms(300);
        // The deadline after bytes at `now` ms, the frame's length known or not.
        let at = |p: &Progress, len, now| p.extend(d0, t0, len, t0 + ms(now));
        assert_eq!(at(&p, None, 200), d0, "length not known yet");
        // 16 KiB: budget 300 ms + 2 s. Bytes at 1 s: the deadline is 1.3 s.
        assert_eq!(at(&p, Some(16 * 1024), 1000), t0 + ms(1300));
        // Bytes at 2.2 s: capped by the budget, 2.3 s.
        assert_eq!(at(&p, Some(16 * 1024), 2200), t0 + ms(2300));
        // Never earlier than it was.
        let later = t0 + ms(5000);
        assert_eq!(p.extend(later, t0, Some(16), t0 + ms(10)), later);
        // Never past the call's deadline.
        let hard = Progress {
            hard: Some(t0 + ms(800)),
            ..p
        };
        assert_eq!(at(&hard, Some(16 * 1024), 1000), t0 + ms(800));
    }

    use super::*;
    use std::io::Read;
    use std::net::TcpListener;

    fn pair() -> (Connection, std::net::TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let wake = crate::transport::waker::WakeState::new();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        let c = Connection::connect(
            "127.0.0.1",
            port,
            None,
            Limits::default(),
            deadline,
            &wake.waker_now(),
        )
        .unwrap();
        let (peer, _) = l.accept().unwrap();
        peer.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        (c, peer)
    }

    /// P15: a TLS reply whose record arrives in pieces, two replies in one read, and a
    /// record that does not decrypt (`Error::Tls`, and the controller gets an alert) — against
    /// a buffered rustls server, as a controller or a proxy may write records.
    #[test]
    fn tls_records_in_pieces_together_and_refused() {
        use crate::wire::{encode_reply, Reply};
        use std::io::Write;
        use std::time::Duration;
        let (ccfg, scfg) = xce_proto::records::test_configs();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut sock, _) = l.accept().unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut tls = rustls::ServerConnection::new(scfg).unwrap();
            while tls.is_handshaking() {
                tls.complete_io(&mut sock).unwrap();
            }
            let records = |tls: &mut rustls::ServerConnection, seqs: &[u64]| {
                for &seq in seqs {
                    let mut f = Vec::new();
                    encode_reply(&Reply::status(seq, 0), &mut f);
                    tls.writer().write_all(&f).unwrap();
                }
                let mut v = Vec::new();
                while tls.wants_write() {
                    tls.write_tls(&mut v).unwrap();
                }
                v
            };
            while tls.wants_write() {
                tls.write_tls(&mut sock).unwrap(); // the session tickets
            }
            // Reply 1 in pieces: header split, body split.
            let v = records(&mut tls, &[1]);
            let n = v.len();
            for part in [&v[..3], &v[3..9], &v[9..n - 1], &v[n - 1..]] {
                sock.write_all(part).unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
            // Replies 2 and 3: two records in one write.
            let v = records(&mut tls, &[2, 3]);
            sock.write_all(&v).unwrap();
            // A record that does not decrypt; the client's alert comes back.
            std::thread::sleep(Duration::from_millis(50));
            sock.write_all(&[&[0x17u8, 3, 3, 0, 32][..], &[0x5a; 32]].concat())
                .unwrap();
            let mut got = Vec::new();
            let _ = sock.read_to_end(&mut got);
            tls.read_tls(&mut &got[..]).unwrap();
            tls.process_new_packets().map(drop).unwrap_err()
        });
        let wake = crate::transport::waker::WakeState::new();
        let w = wake.waker_now();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut c = Connection::connect(
            "localhost",
            port,
            Some(&ccfg),
            Limits::default(),
            deadline,
            &w,
        )
        .unwrap();
        assert_eq!(c.recv(1, deadline, &w).unwrap().seq, 1);
        assert_eq!(c.recv(2, deadline, &w).unwrap().seq, 2);
        // Already here: no wait at all.
        assert_eq!(c.recv(3, Instant::now(), &w).unwrap().seq, 3);
        let e = c.recv(4, deadline, &w).unwrap_err();
        assert!(matches!(e, Error::Tls(_)), "{e:?}");
        assert!(c.is_dead());
        drop(c);
        assert_eq!(
            server.join().unwrap(),
            rustls::Error::AlertReceived(rustls::AlertDescription::BadRecordMac)
        );
    }

    /// An abandoned (dead) connection is reset, so its unsent or unacknowledged request is
    /// discarded, never delivered later; a healthy one is closed cleanly.
    #[test]
    fn a_dead_connection_is_reset_a_healthy_one_closed() {
        let (mut c, mut peer) = pair();
        c.mark_dead();
        drop(c);
        let mut b = [0u8; 8];
        let e = peer
            .read(&mut b)
            .expect_err("a reset, not an end of stream");
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");

        let (c, mut peer) = pair();
        drop(c);
        assert_eq!(peer.read(&mut b).unwrap(), 0, "a clean close");
    }
}
