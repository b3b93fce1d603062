//! A client connection: accepted, its TLS handshake (C13), its standing as a stranger or an
//! authenticated caller (C9 amended), its frames read under their deadlines, each request
//! answered in order, and why it closes.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;
use xce_proto::wire;

use super::dispatch::{handle, Conn, Origin};
use super::reads::encode_reply_bounded;
use super::standing::{handshake, note_evicted, Standing};
use super::{
    Session, ANONYMOUS_LIFETIME, ANONYMOUS_MAX_FRAME, FRAME_TIMEOUT, READ_CHUNK, REFUSALS,
};
use crate::base::auth::{ConnAuth, Identity};
use crate::base::ids::NodeId;
use crate::node::ctx::Ctx;

/// Serves an accepted connection to its end: plaintext, or after its TLS handshake.
pub(super) async fn accepted(
    ctx: Arc<Ctx>,
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    mut standing: Standing,
) {
    let _counted = crate::base::counters::connection();
    match tls {
        None => {
            let io = Plain {
                tcp: stream,
                chunk: vec![0u8; READ_CHUNK],
            };
            // Nobody is checked: every caller is admin, authenticated at once.
            if !ctx.auth.on && !standing.promote(&ctx, peer) {
                return;
            }
            if ctx.auth.on {
                standing.anonymous_until = Some(Instant::now() + ANONYMOUS_LIFETIME);
            }
            serve_conn(&ctx, io, peer, None, standing).await
        }
        Some(cfg) => {
            if let Some((s, who, standing)) = handshake(&ctx, stream, peer, cfg, standing).await {
                serve_conn(&ctx, s, peer, who, standing).await
            }
        }
    }
}

/// A client connection's I/O: plain TCP or TLS ([`crate::base::tls::ServerTls`]).
trait ClientIo {
    /// Appends what arrived to `buf`: how many bytes (at least one), 0 at the end.
    async fn read_into(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize>;
    /// Sends all of `out`.
    async fn write_all(&mut self, out: &[u8]) -> std::io::Result<()>;
    /// Ends the connection with a fatal TLS alert (nothing in plaintext).
    fn fail(&mut self, _alert: rustls::AlertDescription) {}
}

/// Plain TCP, read through a chunk of [`READ_CHUNK`] bytes.
///
/// Both kinds of connection read the same way: try the socket, and wait for readiness only
/// when it has nothing (`try_read`, then `readable`). tokio's `read` instead waits for the next
/// readiness event after a short read without trying the socket; on the 2-core test machine a
/// `hello` round trip took 1.3 µs longer that way (15.2 → 13.9 µs plain, 17.0 → 15.8 µs with
/// TLS, side by side: BENCH.md P15). The pattern is the same on both paths so that P15 compares
/// TLS with plaintext, not two ways of waiting.
struct Plain {
    tcp: TcpStream,
    chunk: Vec<u8>,
}

impl ClientIo for Plain {
    async fn read_into(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        loop {
            match self.tcp.try_read(&mut self.chunk) {
                Ok(n) => {
                    buf.extend_from_slice(&self.chunk[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => self.tcp.readable().await?,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    async fn write_all(&mut self, out: &[u8]) -> std::io::Result<()> {
        self.tcp.write_all(out).await
    }
}

impl ClientIo for crate::base::tls::ServerTls {
    async fn read_into(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        crate::base::tls::ServerTls::read_into(self, buf).await
    }
    async fn write_all(&mut self, out: &[u8]) -> std::io::Result<()> {
        crate::base::tls::ServerTls::write_all(self, out).await
    }
    fn fail(&mut self, alert: rustls::AlertDescription) {
        crate::base::tls::ServerTls::fail(self, alert)
    }
}

/// Issue 36: a debug line when a client connection ends, however it ends.
struct Closed(NodeId, SocketAddr);

impl Drop for Closed {
    fn drop(&mut self) {
        crate::log_debug!("node {}: client {} closed", self.0, self.1);
    }
}

/// Serves a connection to its end: every complete frame in order, then the next read (C9
/// amended: under the frame's deadline and the connection's lifetime).
async fn serve_conn<S: ClientIo>(
    ctx: &Ctx,
    s: S,
    peer: SocketAddr,
    cert: Option<Identity>,
    standing: Standing,
) {
    crate::log_debug!("node {}: client {peer} connected", ctx.id);
    let _closed = Closed(ctx.id, peer);
    let mut c = Served {
        ctx,
        s,
        peer,
        standing,
        conn: Conn {
            peer: Origin::Client(peer),
            auth: ConnAuth::new(cert),
            shown: false,
        },
        anonymous_limits: wire::Limits {
            max_message_bytes: ANONYMOUS_MAX_FRAME.min(super::LIMITS.max_message_bytes),
            ..super::LIMITS
        },
        buf: Vec::new(),
        frame_start: None,
        last_read: Instant::now(),
        session: None,
        out: Vec::new(),
        tenure: ctx.tenure.subscribe(),
        served: None,
    };
    while c.serve_received().await && c.read_more().await {}
}

/// A connection being served: its I/O, standing and session, and the bytes received.
struct Served<'a, S> {
    ctx: &'a Ctx,
    s: S,
    peer: SocketAddr,
    standing: Standing,
    conn: Conn,
    /// The frame limits of a connection not yet authenticated (C9 amended).
    anonymous_limits: wire::Limits,
    buf: Vec<u8>,
    /// When the first byte of the frame in `buf` arrived (C9: the frame's deadline), and of
    /// the last read (the next frame's bytes in `buf` arrived with it at the latest).
    frame_start: Option<Instant>,
    last_read: Instant,
    session: Option<Session>,
    out: Vec<u8>,
    tenure: tokio::sync::watch::Receiver<u64>,
    /// The tenure (as primary) that served this connection: once over, the connection closes,
    /// with any requests not yet read (see node/tenure.rs).
    served: Option<u64>,
}

impl<S: ClientIo> Served<'_, S> {
    /// Serves every complete frame already received, in order; `false`: the connection is to
    /// close.
    async fn serve_received(&mut self) -> bool {
        let (ctx, id, peer) = (self.ctx, self.ctx.id, self.peer);
        loop {
            let limits = if self.standing.authenticated() {
                &super::LIMITS
            } else {
                &self.anonymous_limits
            };
            let n = match wire::frame_len(&self.buf, limits) {
                Ok(Some(n)) if n <= self.buf.len() => n,
                Ok(_) => return true,
                Err(e) => {
                    let why = frame_refusal(&e, limits, self.standing.authenticated());
                    REFUSALS.note("bad frame", || format!("node {id}: {peer}: {why}, closing"));
                    return false;
                }
            };
            if let Some((t, why)) = self.standing.until() {
                if Instant::now() >= t {
                    close_at_end_of_life(&mut self.s, id, peer, why);
                    return false;
                }
            }
            // Checked directly too: after a freeze the tenure task may not have run yet.
            if self
                .served
                .is_some_and(|t| t != ctx.tenure.current() || !ctx.serving_leader())
            {
                return false;
            }
            if self.served.is_none() && ctx.serving_leader() {
                self.served = Some(ctx.tenure.current());
            }
            let req = match wire::decode_request(&self.buf[..n], limits) {
                Ok(r) => r,
                Err(e) => {
                    REFUSALS.note("malformed request", || {
                        format!("node {id}: {peer}: malformed request ({e}), closing")
                    });
                    return false;
                }
            };
            self.buf.drain(..n);
            self.frame_start = (!self.buf.is_empty()).then_some(self.last_read);
            if !self.answer(req).await {
                return false;
            }
        }
    }

    /// Answers one request and sends the reply; `false`: the connection is to close.
    async fn answer(&mut self, req: wire::Request) -> bool {
        let (ctx, id, peer) = (self.ctx, self.ctx.id, self.peer);
        let fire_and_forget = req.no_reply;
        // A stranger's request is bounded by its lifetime and its place in the crowd.
        let handled = handle(ctx, &mut self.session, &mut self.conn, req);
        let reply = match (self.standing.authenticated(), self.standing.until()) {
            (false, Some((t, why))) => tokio::select! {
                r = tokio::time::timeout_at(t, handled) => match r {
                    Ok(r) => r,
                    Err(_) => {
                        close_at_end_of_life(&mut self.s, id, peer, why);
                        return false;
                    }
                },
                () = self.standing.evicted() => {
                    note_evicted(id, peer, "while anonymous");
                    return false;
                }
            },
            _ => handled.await,
        };
        if let Some(reply) = reply {
            encode_reply_bounded(ctx, &reply, &mut self.out);
            if let Err(e) = self.s.write_all(&self.out).await {
                REFUSALS.note("write failed", || {
                    format!("node {id}: {peer}: write failed: {e}")
                });
                return false;
            }
        } else if fire_and_forget && self.served.is_some() && !ctx.serving_leader() {
            // Deposed while it was on its way (this node learnt it only now): the client
            // must not take the silence for success — close, so it re-sends elsewhere.
            return false;
        }
        // C9 amended: a request that showed an identity (a valid token; everyone where
        // nobody is checked) authenticates its connection.
        !(self.conn.shown && !self.standing.authenticated() && !self.standing.promote(ctx, peer))
    }

    /// Reads what arrives next; `false`: the connection is to close. The read waits until the
    /// first of: the idle timeout, the frame's deadline, the end of the connection's life.
    async fn read_more(&mut self) -> bool {
        let (ctx, id, peer) = (self.ctx, self.ctx.id, self.peer);
        let now = Instant::now();
        let mut wait = (now + ctx.opts.idle_timeout, Closing::Idle);
        if let Some(t) = self.frame_start {
            wait = wait.min((t + FRAME_TIMEOUT, Closing::Frame));
        }
        if let Some((t, why)) = self.standing.until() {
            wait = wait.min((t, Closing::Life(why)));
        }
        let read = tokio::select! {
            r = tokio::time::timeout_at(wait.0, self.s.read_into(&mut self.buf)) => r,
            () = crate::node::tenure::over(&mut self.tenure, self.served) => return false,
            () = self.standing.evicted() => {
                note_evicted(id, peer, "while anonymous");
                return false;
            }
        };
        match read {
            Err(_) => self.note_closing(wait.1),
            Ok(Ok(0)) => {
                if !self.buf.is_empty() {
                    REFUSALS.note("closed mid-frame", || {
                        format!(
                            "node {id}: {peer}: closed mid-frame ({} bytes), dropping",
                            self.buf.len()
                        )
                    });
                }
            }
            Ok(Ok(_)) => {
                self.last_read = Instant::now();
                if self.frame_start.is_none() {
                    self.frame_start = Some(self.last_read);
                }
                return true;
            }
            Ok(Err(e)) => {
                // A client gone without TLS close_notify is a client gone.
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof
                ) {
                    REFUSALS.note("read failed", || {
                        format!("node {id}: {peer}: read failed: {e}")
                    });
                }
            }
        }
        false
    }

    /// Logs (or, at the end of its life, alerts) why a read wait ended the connection.
    fn note_closing(&mut self, why: Closing) {
        let (ctx, id, peer) = (self.ctx, self.ctx.id, self.peer);
        match why {
            Closing::Idle => REFUSALS.note("idle", || {
                format!(
                    "node {id}: {peer}: idle for {:?}, closing",
                    ctx.opts.idle_timeout
                )
            }),
            Closing::Frame => REFUSALS.note("frame deadline", || {
                format!(
                    "node {id}: {peer}: frame not complete within {FRAME_TIMEOUT:?} of its \
                     first byte ({} bytes), closing",
                    self.buf.len()
                )
            }),
            Closing::Life(why) => close_at_end_of_life(&mut self.s, id, peer, why),
        }
    }
}

/// Why a read wait ends.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Closing {
    Idle,
    Frame,
    Life(&'static str),
}

/// Closes a connection at the end of its life (anonymous lifetime, certificate expiry), with
/// the TLS alert that says so for an expired certificate.
fn close_at_end_of_life<S: ClientIo>(s: &mut S, id: NodeId, peer: SocketAddr, why: &'static str) {
    if why.contains("certificate") {
        s.fail(rustls::AlertDescription::CertificateExpired);
    }
    REFUSALS.note(why, || format!("node {id}: {peer}: {why}, closing"));
}

/// What was wrong with a frame's segment table, in the words of a request: the library's
/// `TooBig` reads "reply too large", its own side of the wire (issue 27).
fn frame_refusal(
    e: &xce_proto::Error,
    limits: &xce_proto::wire::Limits,
    authenticated: bool,
) -> String {
    let whose = if authenticated {
        ""
    } else {
        " of an unauthenticated connection"
    };
    match e {
        xce_proto::Error::TooBig => format!(
            "bad frame: a request over the frame limit{whose} ({} bytes)",
            limits.max_message_bytes
        ),
        other => format!("bad frame ({other})"),
    }
}
