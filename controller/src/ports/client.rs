//! The client protocol server (protocol.md): framed Cap'n Proto requests over TCP or TLS,
//! answered in order on each connection, with sessions bound to the connection.
//!
//! Role → status (C2), reads through a read index and writes through the log (C3), sessions
//! and AUTH (protocol.md "Sessions"), bad input and resource limits (C9).
//!
//! What a stranger costs (C9 amended, issue 27). A connection is *authenticated* once it
//! shows an identity: a client certificate at its TLS handshake, or the first request that
//! carries a valid token (on a node that checks nobody, every caller is admin: at its TLS
//! handshake, or at once in plaintext). Until then it is a stranger, in a crowd of its own
//! ([`MAX_UNAUTHENTICATED`] places, `base/crowd.rs`) where a newcomer evicts the oldest; it
//! takes one of the node's `--max-connections` slots only once authenticated, so strangers
//! never keep an authenticated caller out. A handshake must finish within
//! [`HANDSHAKE_TIMEOUT`]; an anonymous connection (a completed handshake without a
//! certificate, where tokens are accepted) lives at most [`ANONYMOUS_LIFETIME`] whatever it
//! sends, and its frames are at most [`ANONYMOUS_MAX_FRAME`] bytes; every frame must be
//! complete within [`FRAME_TIMEOUT`] of its first byte. A connection closes when its
//! certificate expires (C13 amended). Refused and closed connections are logged at most once
//! a second per kind, with a count (`base/ratelog.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{CheckIsLeaderError, ForwardToLeader, RaftError};
use openraft::{RaftMetrics, ServerState};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use xce_proto::error::{E_XCE_AUTH, E_XCE_NOT_READY, E_XCE_REDIRECT, E_XCE_STANDBY};
use xce_proto::wire::{
    self, ControllerInfo, ControllerRole, Op, OpKind, Reply, ReplyData, Request,
};

use crate::base::auth::{self, ConnAuth, Identity, JobFacts};

use crate::base::clock::{now_ms, BootInstant};
use crate::base::config::split_addr;
use crate::base::crowd::{Crowd, Place};
use crate::base::ids::{CtrlNode, NodeId};
use crate::base::ratelog::RateLog;
use crate::node::ctx::{Ctx, COMMIT_TIMEOUT, STALE_LEADER_RECHECK};
use crate::raft::forward::Forwarded;
use crate::sm::state::{self, Cmd, OutData, Outcome, Role};

/// How long the crowd of a failover episode is remembered after its last arrival.
const CROWD_MEMORY: Duration = Duration::from_secs(1);

/// Longest a `waitPrimary` is held, whatever the client asks.
pub const MAX_WAIT_PRIMARY: Duration = Duration::from_secs(60);
/// A frame must be complete within this time of its first byte (slow-loris guard, C9): a
/// deadline of the frame, not of each read.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(30);
/// A `consistencyCheck` is answered from a check that finished within this (or 20 times its
/// hashing time) instead of running another.
pub const CHECK_REUSE: Duration = Duration::from_secs(1);
/// Longest a `consistencyCheck` waits for the check before it answers with what it has.
pub const CHECK_ANSWER_WAIT: Duration = Duration::from_millis(1500);
/// Longest a request waits for a new leader's barrier entry (C11) before NOT_READY.
pub const READY_WAIT: Duration = Duration::from_secs(1);
/// Bound on the TLS handshake (C9 amended), from the TCP accept.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// Unauthenticated connections at once — waiting for their handshake, or anonymous after it
/// (C9 amended): a newcomer evicts the oldest. Apart from `--max-connections`, which only
/// authenticated connections take.
pub const MAX_UNAUTHENTICATED: usize = 64;
/// Longest an anonymous connection lives, whatever it sends (C9 amended): `nop` does not keep
/// it for ever.
pub const ANONYMOUS_LIFETIME: Duration = Duration::from_secs(10);
/// Largest frame an unauthenticated connection may send: room for `hello`, `waitPrimary`,
/// `nop`, or a token caller's first request (a job's spec with its command) — not the
/// 16 MiB of an authenticated one.
pub const ANONYMOUS_MAX_FRAME: usize = 64 * 1024;
/// Read chunk size.
const READ_CHUNK: usize = 64 * 1024;

/// A joined session: bound to the connection it was made on, never replicated.
#[derive(Debug, Clone)]
struct Session {
    role: Role,
    #[allow(dead_code)]
    host: String,
    #[allow(dead_code)]
    id: u64,
}

/// Connection-level log lines a stranger can cause, rate-limited with a count.
static REFUSALS: RateLog = RateLog::new();

/// Accepts client connections; each is served by its own task. A new connection enters the
/// crowd of strangers (evicting the oldest one when full) and takes one of the node's
/// connection slots once authenticated (see the module doc).
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>, tls: Option<Arc<rustls::ServerConfig>>) {
    let slots = Arc::new(Semaphore::new(ctx.opts.max_connections));
    let strangers = Crowd::new(MAX_UNAUTHENTICATED);
    let prefix = format!("node {}: ", ctx.id);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(crate::base::ratelog::INTERVAL).await;
            REFUSALS.flush(&prefix);
        }
    });
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                REFUSALS.note("accept failed", || format!("node {}: accept: {e}", ctx.id));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (place, _) = strangers.enter();
        let _ = stream.set_nodelay(true);
        let ctx = ctx.clone();
        let tls = tls.clone();
        let standing = Standing {
            stranger: Some(place),
            slot: None,
            slots: slots.clone(),
            anonymous_until: None,
            cert_until: None,
        };
        tokio::spawn(async move {
            let _counted = crate::base::counters::connection();
            match tls {
                None => {
                    let io = Plain {
                        tcp: stream,
                        chunk: vec![0u8; READ_CHUNK],
                    };
                    let mut standing = standing;
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
                    if let Some((s, who, standing)) =
                        handshake(&ctx, stream, peer, cfg, standing).await
                    {
                        serve_conn(&ctx, s, peer, who, standing).await
                    }
                }
            }
        });
    }
}

/// The TLS handshake of a stranger, raced against [`HANDSHAKE_TIMEOUT`] and eviction; then
/// the certificate's validity (C13 amended) and the connection's standing: authenticated by a
/// certificate that names a role (or on a node that checks nobody), else anonymous.
async fn handshake(
    ctx: &Ctx,
    stream: TcpStream,
    peer: SocketAddr,
    cfg: Arc<rustls::ServerConfig>,
    mut standing: Standing,
) -> Option<(crate::base::tls::ServerTls, Option<Identity>, Standing)> {
    let accept = crate::base::tls::ServerTls::accept(stream, cfg);
    let evicted = async {
        match &standing.stranger {
            Some(p) => p.evicted().await,
            None => std::future::pending().await,
        }
    };
    let id = ctx.id;
    let mut s = tokio::select! {
        r = tokio::time::timeout(HANDSHAKE_TIMEOUT, accept) => match r {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                REFUSALS.note("TLS handshake failed", || {
                    format!("node {id}: {peer}: TLS handshake failed: {e}")
                });
                return None;
            }
            Err(_) => {
                REFUSALS.note("TLS handshake timed out", || {
                    format!("node {id}: {peer}: TLS handshake not done within {HANDSHAKE_TIMEOUT:?}, closing")
                });
                return None;
            }
        },
        () = evicted => {
            note_evicted(id, peer, "during its TLS handshake");
            return None;
        }
    };
    // C13: the identity the client certificate names, if any.
    let chain = s.peer_certificates().map(<[_]>::to_vec);
    let cert = chain.as_ref().and_then(|c| c.first());
    let who = cert.and_then(|c| Identity::of_cert(c));
    if let (Some(c), None) = (cert, &who) {
        REFUSALS.note("certificate names no role", || {
            format!(
                "node {id}: {peer}: client certificate {:?} names no role",
                crate::base::tls::cert_names(c)
            )
        });
    }
    // C13 amended: no identity outlives its certificate — checked after every handshake, and
    // the connection closes when the certificate expires.
    if let Some(chain) = &chain {
        match crate::base::tls::chain_not_after(chain, now_ms() / 1000) {
            Ok(until) => {
                let left = Duration::from_secs(until.saturating_sub(now_ms() / 1000).max(0) as u64);
                standing.cert_until = Some(Instant::now() + left);
            }
            Err(why) => {
                REFUSALS.note("certificate refused", || {
                    format!("node {id}: {peer}: refused: {why}")
                });
                s.fail(rustls::AlertDescription::CertificateExpired);
                return None;
            }
        }
    }
    if who.is_some() || !ctx.auth.on {
        if !standing.promote(ctx, peer) {
            return None;
        }
    } else {
        standing.anonymous_until = Some(Instant::now() + ANONYMOUS_LIFETIME);
    }
    Some((s, who, standing))
}

fn note_evicted(id: NodeId, peer: SocketAddr, when: &str) {
    REFUSALS.note("unauthenticated connection evicted", || {
        format!(
            "node {id}: {peer}: closed {when}: {MAX_UNAUTHENTICATED} unauthenticated connections \
             already, the oldest go first"
        )
    });
}

/// Where a connection stands (C9 amended): a stranger in the crowd of unauthenticated
/// connections, or authenticated and holding one of the node's connection slots; and until
/// when it may live (anonymous: [`ANONYMOUS_LIFETIME`]; with a certificate: its expiry).
struct Standing {
    stranger: Option<Place>,
    slot: Option<OwnedSemaphorePermit>,
    slots: Arc<Semaphore>,
    anonymous_until: Option<Instant>,
    cert_until: Option<Instant>,
}

impl Standing {
    /// Authenticated: leaves the crowd for a connection slot. `false` (logged): every slot is
    /// taken, and the connection is to be closed.
    fn promote(&mut self, ctx: &Ctx, peer: SocketAddr) -> bool {
        if self.slot.is_some() {
            return true;
        }
        match self.slots.clone().try_acquire_owned() {
            Ok(permit) => {
                self.slot = Some(permit);
                self.stranger = None;
                self.anonymous_until = None;
                true
            }
            Err(_) => {
                REFUSALS.note("connection limit reached", || {
                    format!(
                        "node {}: connection limit reached ({} authenticated), closing {peer}",
                        ctx.id, ctx.opts.max_connections
                    )
                });
                false
            }
        }
    }

    fn authenticated(&self) -> bool {
        self.slot.is_some()
    }

    /// The first of the instants the connection must close at, and why.
    fn until(&self) -> Option<(Instant, &'static str)> {
        let a = self
            .anonymous_until
            .map(|t| (t, "anonymous for its whole lifetime"));
        let c = self.cert_until.map(|t| (t, "its certificate expired"));
        match (a, c) {
            (Some(a), Some(c)) => Some(if a.0 <= c.0 { a } else { c }),
            (x, None) | (None, x) => x,
        }
    }

    /// Resolves when the connection is evicted from the crowd (never once authenticated).
    async fn evicted(&self) {
        match &self.stranger {
            Some(p) => p.evicted().await,
            None => std::future::pending().await,
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

async fn serve_conn<S: ClientIo>(
    ctx: &Ctx,
    mut s: S,
    peer: SocketAddr,
    cert: Option<Identity>,
    mut standing: Standing,
) {
    let id = ctx.id;
    crate::log_debug!("node {id}: client {peer} connected");
    let _closed = Closed(id, peer);
    let mut conn = Conn {
        peer: Origin::Client(peer),
        auth: ConnAuth::new(cert),
        shown: false,
    };
    let anonymous_limits = xce_proto::wire::Limits {
        max_message_bytes: ANONYMOUS_MAX_FRAME.min(ctx.limits.max_message_bytes),
        ..ctx.limits
    };
    let mut buf: Vec<u8> = Vec::new();
    // When the first byte of the frame in `buf` arrived (C9: the frame's deadline), and of
    // the last read (the next frame's bytes in `buf` arrived with it at the latest).
    let mut frame_start: Option<Instant> = None;
    let mut last_read = Instant::now();
    let mut session: Option<Session> = None;
    let mut out = Vec::new();
    let mut tenure = ctx.tenure.subscribe();
    // The tenure (as primary) that served this connection: once over, the connection closes,
    // with any requests not yet read (see node/tenure.rs).
    let mut served: Option<u64> = None;
    loop {
        // Serve every complete frame already received, in order.
        loop {
            let limits = if standing.authenticated() {
                &ctx.limits
            } else {
                &anonymous_limits
            };
            let n = match wire::frame_len(&buf, limits) {
                Ok(Some(n)) if n <= buf.len() => n,
                Ok(_) => break,
                Err(e) => {
                    let why = frame_refusal(&e, limits, standing.authenticated());
                    REFUSALS.note("bad frame", || format!("node {id}: {peer}: {why}, closing"));
                    return;
                }
            };
            if let Some((t, why)) = standing.until() {
                if Instant::now() >= t {
                    close_at_end_of_life(&mut s, id, peer, why);
                    return;
                }
            }
            // Checked directly too: after a freeze the tenure task may not have run yet.
            if served.is_some_and(|t| t != ctx.tenure.current() || !ctx.serving_leader()) {
                return;
            }
            if served.is_none() && ctx.serving_leader() {
                served = Some(ctx.tenure.current());
            }
            let req = match wire::decode_request(&buf[..n], limits) {
                Ok(r) => r,
                Err(e) => {
                    REFUSALS.note("malformed request", || {
                        format!("node {id}: {peer}: malformed request ({e}), closing")
                    });
                    return;
                }
            };
            buf.drain(..n);
            frame_start = (!buf.is_empty()).then_some(last_read);
            let fire_and_forget = req.no_reply;
            // A stranger's request is bounded by its lifetime and its place in the crowd.
            let handled = handle(ctx, &mut session, &mut conn, req);
            let reply = match (standing.authenticated(), standing.until()) {
                (false, Some((t, why))) => tokio::select! {
                    r = tokio::time::timeout_at(t, handled) => match r {
                        Ok(r) => r,
                        Err(_) => {
                            close_at_end_of_life(&mut s, id, peer, why);
                            return;
                        }
                    },
                    () = standing.evicted() => {
                        note_evicted(id, peer, "while anonymous");
                        return;
                    }
                },
                _ => handled.await,
            };
            if let Some(reply) = reply {
                encode_reply_bounded(ctx, &reply, &mut out);
                if let Err(e) = s.write_all(&out).await {
                    REFUSALS.note("write failed", || {
                        format!("node {id}: {peer}: write failed: {e}")
                    });
                    return;
                }
            } else if fire_and_forget && served.is_some() && !ctx.serving_leader() {
                // Deposed while it was on its way (this node learnt it only now): the client
                // must not take the silence for success — close, so it re-sends elsewhere.
                return;
            }
            // C9 amended: a request that showed an identity (a valid token; everyone where
            // nobody is checked) authenticates its connection.
            if conn.shown && !standing.authenticated() && !standing.promote(ctx, peer) {
                return;
            }
        }
        // The read waits until the first of: the idle timeout, the frame's deadline, the end
        // of the connection's life.
        let now = Instant::now();
        let mut wait = (now + ctx.opts.idle_timeout, Closing::Idle);
        if let Some(t) = frame_start {
            wait = wait.min((t + FRAME_TIMEOUT, Closing::Frame));
        }
        if let Some((t, why)) = standing.until() {
            wait = wait.min((t, Closing::Life(why)));
        }
        let read = tokio::select! {
            r = tokio::time::timeout_at(wait.0, s.read_into(&mut buf)) => r,
            () = crate::node::tenure::over(&mut tenure, served) => return,
            () = standing.evicted() => {
                note_evicted(id, peer, "while anonymous");
                return;
            }
        };
        match read {
            Err(_) => {
                match wait.1 {
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
                            buf.len()
                        )
                    }),
                    Closing::Life(why) => close_at_end_of_life(&mut s, id, peer, why),
                }
                return;
            }
            Ok(Ok(0)) => {
                if !buf.is_empty() {
                    REFUSALS.note("closed mid-frame", || {
                        format!(
                            "node {id}: {peer}: closed mid-frame ({} bytes), dropping",
                            buf.len()
                        )
                    });
                }
                return;
            }
            Ok(Ok(_)) => {
                last_read = Instant::now();
                if frame_start.is_none() {
                    frame_start = Some(last_read);
                }
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
                return;
            }
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

/// Never a frame the client is bound to refuse: a reply over the frame limit goes out as
/// -E_XCE_TOOBIG (deterministic: every master would say the same, so no failover).
fn encode_reply_bounded(ctx: &Ctx, reply: &Reply, out: &mut Vec<u8>) {
    if crate::sm::listing::encode_bounded(reply, ctx.limits.max_message_bytes, out) {
        crate::log_warn!(
            "node {}: reply to seq {} over {} bytes: sent as E_XCE_TOOBIG",
            ctx.id,
            reply.seq,
            ctx.limits.max_message_bytes
        );
    }
}

/// A page of a snapshot-bound listing (after the read barrier).
fn job_list_page(ctx: &Ctx, seq: u64, p: &wire::JobListPage) -> Reply {
    crate::sm::listing::answer_page(&ctx.cursors, seq, p, ctx.limits.max_message_bytes, || {
        let st = &ctx.applied.read().expect("state lock").state;
        (st.jobs_snapshot(), st.applied_count())
    })
}

fn role_of(state: ServerState, initialized: bool) -> ControllerRole {
    match state {
        _ if !initialized => ControllerRole::Initializing,
        ServerState::Leader => ControllerRole::Primary,
        ServerState::Follower => ControllerRole::Standby,
        ServerState::Candidate => ControllerRole::Candidate,
        ServerState::Learner | ServerState::Shutdown => ControllerRole::Initializing,
    }
}

impl Ctx {
    /// F29: the version of this node's current membership — the log index of its entry, plus
    /// one (the initial membership sits at index 0). Every member sees the same entry at the
    /// same index, so a new primary of an unchanged membership stamps the same version.
    pub fn members_version(&self) -> u64 {
        let m = self.raft.metrics();
        let v = m
            .borrow()
            .membership_config
            .log_id()
            .map_or(0, |l| l.index + 1);
        v
    }

    /// This controller's view of the cluster (C8): its role, the term, the primary.
    pub fn info(&self) -> ControllerInfo {
        let leader = self.raft.metrics().borrow().current_leader;
        let cut_off = leader == Some(self.id) && self.leader_cut_off();
        self.info_with_primary(leader.filter(|_| !cut_off))
    }

    /// [`Ctx::info`] naming `primary` (None: no primary known).
    fn info_with_primary(&self, primary: Option<NodeId>) -> ControllerInfo {
        let m = self.raft.metrics().borrow().clone();
        let initialized = m.membership_config.membership().nodes().next().is_some();
        let mut role = role_of(m.state, initialized);
        if role == ControllerRole::Primary && self.leader_cut_off() {
            role = ControllerRole::Standby; // C10: a standby that knows no primary
        }
        let mut info = ControllerInfo {
            id: self.id as u32,
            role,
            term: m.current_term,
            version: crate::base::build::version(),
            protocol_version: wire::PROTOCOL_VERSION,
            ..Default::default()
        };
        if let Some(l) = primary {
            info.primary_id = l as u32;
            if let Some((h, p)) = self.node(l).and_then(|n| split_addr(&n.client)) {
                info.primary_host = h;
                info.primary_port = p;
            }
        }
        // F29: the members, only from the serving primary about itself — never a standby's
        // (possibly stale) view, so clients learn the cluster only from its primary.
        if primary == Some(self.id) && role == ControllerRole::Primary && self.serving_leader() {
            info.members = members_of(&m, self.id);
            info.checked_index = self.findings.checked();
        }
        // C20, C19: the cluster, what is wrong.
        info.cluster_id = self.identity.tag().map_or([0; 16], |t| t.id);
        info.alarms = self.alarms();
        if self.diverged.is() {
            info.role = ControllerRole::Initializing;
        }
        info
    }

    /// C3 read barrier: returns `None` when this node may answer from its applied state.
    async fn read_barrier(&self, seq: u64, op: &Op) -> Option<Reply> {
        if self.lease_valid() {
            return None;
        }
        let res = tokio::select! {
            r = tokio::time::timeout(COMMIT_TIMEOUT, self.raft.ensure_linearizable()) => r,
            () = self.until_cut_off() => return Some(self.not_primary(seq, op, None)),
        };
        match res {
            Ok(Ok(_)) => None,
            Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)))) => {
                Some(self.forward_reply(seq, op, &f))
            }
            Ok(Err(_)) | Err(_) => Some(self.not_primary_busy(seq, op)),
        }
    }

    /// C3 without a round trip: this node leads, has applied an entry of its own term (so
    /// everything earlier leaders committed is in its state), and a quorum accepted appends it
    /// sent within [`crate::raft::elect::lease_read_window`] (a third of election-max) — far inside
    /// the leader lease (election-max) during which those followers vote for no one else, nor
    /// campaign (C15). A paused or deposed leader's acks are old, so it falls back to the read
    /// index, which fails over to STANDBY/NOT_READY.
    fn lease_valid(&self) -> bool {
        let rx = self.raft.metrics();
        let m = rx.borrow();
        if m.state != ServerState::Leader
            || m.last_applied.map(|l| l.leader_id.term) != Some(m.current_term)
            || !self.ready.is_ready(&m.vote)
        {
            return false;
        }
        let configs = m.membership_config.membership().get_joint_config();
        let window = crate::raft::elect::lease_read_window(self.opts.election_max_ms);
        self.lease
            .lease_holds(&m.vote, configs, self.id, window, BootInstant::now())
    }

    fn forward_reply(&self, seq: u64, op: &Op, f: &ForwardToLeader<NodeId, CtrlNode>) -> Reply {
        self.not_primary(seq, op, f.leader_id)
    }

    /// A leader that could not confirm its leadership or commit in time: NOT_READY, unless it
    /// has meanwhile learnt of another leader.
    fn not_primary_busy(&self, seq: u64, op: &Op) -> Reply {
        let r = self.not_primary(seq, op, None);
        if r.status == -E_XCE_STANDBY || r.status == -E_XCE_REDIRECT {
            r
        } else {
            Reply::status(seq, -E_XCE_NOT_READY)
        }
    }

    /// The leader this node can vouch for right now: itself when it leads and has heard from a
    /// quorum within the lease-read window (C10), or — on a standby —
    /// the leader of its committed vote if that leader's appends refreshed the vote within
    /// the minimum election timeout. Read in one step from openraft's state, so the leader
    /// and its freshness always belong together.
    pub(crate) async fn fresh_leader(&self) -> Option<NodeId> {
        // Stretched on a slow link (C15 amended): appends come further apart there.
        let window = self
            .elect
            .pace()
            .stretch(Duration::from_millis(self.opts.election_min_ms));
        let me = self.id;
        let found = self.raft.with_raft_state(move |st| {
            let v = st.vote_ref();
            let l = v.leader_id().voted_for().filter(|_| v.is_committed())?;
            if l == me {
                return Some(l);
            }
            let t = st.vote_last_modified()?;
            (tokio::time::Instant::now().saturating_duration_since(t) < window).then_some(l)
        });
        let found = found.await.ok().flatten();
        found.filter(|&l| l != me || self.vouches_for_itself())
    }

    /// A leader names itself in `waitPrimary` only while a quorum answers it, as a standby
    /// names its leader only while appends arrive: once the lease has lapsed (reads fail over
    /// to a read index that cannot complete), a leader cut off from its peers must not send
    /// clients back to itself in the time before it knows it is cut off (C10). A healthy
    /// leader hears from its quorum every heartbeat; a lapse only delays the answer until the
    /// next re-check.
    fn vouches_for_itself(&self) -> bool {
        let rx = self.raft.metrics();
        let m = rx.borrow();
        m.state == ServerState::Leader && self.ready.is_ready(&m.vote) && {
            let configs = m.membership_config.membership().get_joint_config();
            // Liveness, not safety: stretched on a slow link (C15 amended), where answers come
            // further apart. A lease read (`lease_valid`) never is.
            let window = self
                .elect
                .pace()
                .stretch(crate::raft::elect::lease_read_window(
                    self.opts.election_max_ms,
                ));
            self.lease
                .quorum_heard(&m.vote, configs, self.id, window, BootInstant::now())
        }
    }

    fn host_timeout_ms(&self) -> i64 {
        self.opts.host_timeout.as_millis() as i64
    }
}

/// F29: every node of the current membership (voters and learners) with its client address
/// (an IPv6 host without its brackets), in id order; `me` is marked the primary, the others
/// standbys.
fn members_of(m: &RaftMetrics<NodeId, CtrlNode>, me: NodeId) -> Vec<wire::ControllerEntry> {
    let mut v: Vec<wire::ControllerEntry> = m
        .membership_config
        .membership()
        .nodes()
        .filter_map(|(&id, n)| {
            let (host, port) = split_addr(&n.client)?;
            Some(wire::ControllerEntry {
                id: id as u32,
                host,
                port,
                role: if id == me {
                    ControllerRole::Primary
                } else {
                    ControllerRole::Standby
                },
            })
        })
        .collect();
    v.sort_by_key(|e| e.id);
    v
}

fn outcome_reply(seq: u64, o: Outcome) -> Reply {
    let data = match o.data {
        OutData::None => ReplyData::None,
        OutData::JobId(id) => ReplyData::JobId(id),
        OutData::TaskId(id) => ReplyData::TaskId(id),
        OutData::SessionId(id) => ReplyData::SessionId(id),
    };
    Reply {
        seq,
        status: o.status,
        redirect_host: String::new(),
        redirect_port: 0,
        data,
        members_version: 0,
        detail: String::new(),
    }
}

fn role_to_wire(r: Role) -> wire::SessionRole {
    match r {
        Role::Worker => wire::SessionRole::Worker,
        Role::Scheduler => wire::SessionRole::Scheduler,
        Role::ApiServer => wire::SessionRole::ApiServer,
        Role::Client => wire::SessionRole::Client,
    }
}

fn role_from_wire(r: wire::SessionRole) -> Role {
    match r {
        wire::SessionRole::Worker => Role::Worker,
        wire::SessionRole::Scheduler => Role::Scheduler,
        wire::SessionRole::ApiServer => Role::ApiServer,
        wire::SessionRole::Client => Role::Client,
    }
}

/// A client connection: where it comes from and who it is (C13); `shown`: a request of
/// it showed an identity (C9 amended: the connection is authenticated).
struct Conn {
    peer: Origin,
    auth: ConnAuth,
    shown: bool,
}

/// Where a request comes from, as refusals name it.
enum Origin {
    /// A client's connection to this node.
    Client(SocketAddr),
    /// Forwarded by a member (C16), over its raft connection from this address.
    Forwarded(SocketAddr),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Client(a) => write!(f, "{a}"),
            Origin::Forwarded(a) => write!(f, "forwarded by the member at {a}"),
        }
    }
}

/// C13: refuses an op its caller may not call, with a log line naming who, what and why.
fn refuse(ctx: &Ctx, conn: &Conn, req: &Request, who: &dyn std::fmt::Display, why: &str) -> Reply {
    crate::log_warn!(
        "node {}: {}: refused {} (seq {}) for {who}: {why}",
        ctx.id,
        conn.peer,
        req.op.name(),
        req.seq
    );
    Reply::status(req.seq, -E_XCE_AUTH)
}

/// What the authorization of `op` needs to know of job `id`, from the applied state.
fn job_facts(ctx: &Ctx, id: u64) -> Option<JobFacts> {
    let a = ctx.applied.read().expect("state lock");
    a.state.job(id).map(|j| JobFacts {
        user: j.user,
        exec_host: j.exec_host,
    })
}

/// The replicated command of a write op (`None` for reads and local ops).
fn command_of(op: &Op) -> Option<Cmd> {
    Some(match op {
        Op::Join(j) => Cmd::Join {
            role: role_from_wire(j.role),
            host: j.host.clone(),
            ncpus: j.ncpus,
            mem_mb: j.mem_mb,
            attrs: j
                .attrs
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.clone()))
                .collect(),
        },
        Op::JobSubmit(spec) => Cmd::JobSubmit(state::job_from_spec(spec)),
        Op::JobDispatch { job_id, host } => Cmd::JobDispatch {
            job_id: *job_id,
            host: host.clone(),
        },
        Op::JobCtrl { job_id, action } => Cmd::JobCtrl {
            job_id: *job_id,
            action: match action {
                wire::JobAction::Kill => state::JobAction::Kill,
                wire::JobAction::Suspend => state::JobAction::Suspend,
                wire::JobAction::Resume => state::JobAction::Resume,
                wire::JobAction::Requeue => state::JobAction::Requeue,
            },
        },
        Op::QueueCtrl { queue, action } => Cmd::QueueCtrl {
            queue: queue.clone(),
            action: match action {
                wire::QueueAction::Open => state::QueueAction::Open,
                wire::QueueAction::Close => state::QueueAction::Close,
                wire::QueueAction::Activate => state::QueueAction::Activate,
                wire::QueueAction::Inactivate => state::QueueAction::Inactivate,
            },
        },
        Op::HostCtrl { host, action } => Cmd::HostCtrl {
            host: host.clone(),
            open: *action == wire::HostAction::Open,
        },
        Op::UpdateResvals { host, resvals } => Cmd::UpdateResvals {
            host: host.clone(),
            resvals: resvals
                .iter()
                .map(|r| (r.name.clone(), r.value.clone()))
                .collect(),
        },
        Op::UpdateJusage { job_id, usage } => Cmd::UpdateJusage {
            job_id: *job_id,
            cpu_ms: usage.cpu_ms,
            mem_kb: usage.mem_kb,
        },
        Op::RunTask { host, command } => Cmd::RunTask {
            host: host.clone(),
            command: command.clone(),
        },
        Op::SetPendReason { job_id, reason } => Cmd::SetPendReason {
            job_id: *job_id,
            reason: reason.clone(),
        },
        Op::ClearReason { job_id } => Cmd::ClearReason { job_id: *job_id },
        Op::Notify(n) => Cmd::Notify {
            kind: match n.kind {
                wire::NotifyKind::JobStart => state::NotifyKind::JobStart,
                wire::NotifyKind::JobFinish => state::NotifyKind::JobFinish,
                wire::NotifyKind::JobFail => state::NotifyKind::JobFail,
                wire::NotifyKind::JobStop => state::NotifyKind::JobStop,
                wire::NotifyKind::JobChkpt => state::NotifyKind::JobChkpt,
            },
            job_id: n.job_id,
            exit_code: n.exit_code,
        },
        Op::Heartbeat { host } => Cmd::Heartbeat { host: host.clone() },
        _ => return None,
    })
}

/// Serves one request; `None` when no reply is to be sent (`noReply`).
async fn handle(
    ctx: &Ctx,
    session: &mut Option<Session>,
    conn: &mut Conn,
    req: Request,
) -> Option<Reply> {
    let started = std::time::Instant::now();
    // F29: read before answering, so a hello's member list is never older than the version
    // it is stamped with (a change in between costs the client one more hello, never a miss).
    let members_version = ctx.members_version();
    let mut reply = answer(ctx, session, conn, &req).await;
    // F29: a successful answer to anything but waitPrimary comes from the serving primary
    // (C2); it carries the membership version, so a client that stays connected learns of a
    // member added or removed on its next reply, not only on its next connection.
    if reply.status >= 0 && !matches!(req.op, Op::WaitPrimary { .. }) {
        reply.members_version = members_version;
    }
    let write = matches!(
        req.op.kind(),
        wire::OpKind::Write | wire::OpKind::FireAndForget
    ) && !matches!(req.op, Op::Nop);
    crate::base::counters::op(
        req.op.name(),
        reply.status,
        write.then(|| started.elapsed()),
    );
    // Issue 36: `--log-level debug` shows every request (it added nothing before).
    crate::log_debug!(
        "node {}: {}: {} (seq {}) -> {} in {} us",
        ctx.id,
        conn.peer,
        req.op.name(),
        req.seq,
        xce_proto::error::status_name(reply.status),
        started.elapsed().as_micros()
    );
    if req.no_reply {
        if reply.status < 0 {
            crate::log_warn!(
                "node {}: fire-and-forget {} (seq {}) dropped: {}",
                ctx.id,
                req.op.name(),
                req.seq,
                xce_proto::error::status_text(reply.status)
            );
        }
        None
    } else {
        Some(reply)
    }
}

async fn answer(ctx: &Ctx, session: &mut Option<Session>, conn: &mut Conn, req: &Request) -> Reply {
    // C13: who is calling.
    let who = match conn.auth.who(&ctx.auth, &req.auth_token) {
        Ok(w) => w,
        Err(why) => return refuse(ctx, conn, req, &"a bad token", &why),
    };
    conn.shown |= who != Identity::Anonymous;
    let stranger = who == Identity::Anonymous;
    let mut reply = answer_as(ctx, session, conn, req, who, true).await;
    if stranger {
        for_a_stranger(&mut reply);
    }
    reply
}

/// Issue 36 (C13): what a caller without identity — no certificate, no token, on a cluster
/// that checks — learns of a node: what `hello` needs, to find the primary, and no more: the
/// node's id, role and term, the primary it follows (id and client address), its version. Not
/// the members' addresses, the indexes and lag, uptime, disk, alarms or the cluster's id: those
/// are `status`'s, for an identity (any role). Before, an anonymous immediate `waitPrimary`
/// answered everything `status` shows.
fn for_a_stranger(reply: &mut Reply) {
    if let ReplyData::CtrlInfo(i) = &mut reply.data {
        *i = ControllerInfo {
            id: i.id,
            role: i.role,
            term: i.term,
            primary_id: i.primary_id,
            primary_host: std::mem::take(&mut i.primary_host),
            primary_port: i.primary_port,
            version: std::mem::take(&mut i.version),
            protocol_version: i.protocol_version,
            waiters: i.waiters,
            ..Default::default()
        };
    }
}

/// Longest a standby waits for a forwarded request, whatever the client allows (C16): a
/// write's commit wait on the primary, and a little for the way.
pub const MAX_FORWARD_WAIT: Duration =
    Duration::from_millis(COMMIT_TIMEOUT.as_millis() as u64 + 1000);

/// C16: whether a standby forwards `req` when its client asks (F28): reply-bearing reads and
/// writes that need no session (a session is bound to the connection it was joined on, which
/// the primary does not hold), not `join` itself; never a probe or a fire-and-forget op.
pub fn forwardable(req: &Request) -> bool {
    let rule = req.op.rule();
    !req.no_reply
        && matches!(rule.kind, OpKind::Read | OpKind::Write)
        && rule.session.is_none()
        && !matches!(req.op, Op::Join(_))
}

impl Ctx {
    /// C16: forwards `req` for `who` to the primary this standby follows, when the client
    /// asked and forwarding may carry the caller's identity here; `None`: not forwarded (no
    /// primary known, this node leads, the primary unreachable from here, or refused by it):
    /// the caller answers as it would have. A sent write with no answer in time is
    /// E_XCE_UNKNOWN (the client re-sends it with the same request id).
    async fn forward(&self, req: &Request, who: &Identity) -> Option<Reply> {
        if req.forward_within_ms == 0 || !forwardable(req) {
            return None;
        }
        // Identities cross the raft port only where members are authenticated.
        if self.auth.on && !self.forwarder.authenticated() {
            return None;
        }
        if self.raft.metrics().borrow().state == ServerState::Leader {
            return None;
        }
        // Only to a leader whose appends arrive here (as `waitPrimary` vouches): a dead or
        // silent primary costs no connect attempt once the election timeout has passed.
        let leader = self.fresh_leader().await.filter(|&l| l != self.id)?;
        let node = self.node(leader)?;
        let within = Duration::from_millis(req.forward_within_ms as u64).min(MAX_FORWARD_WAIT);
        let mut frame = Vec::new();
        let fwd = Request {
            // Never forwarded again; the identity travels beside it, not as a token.
            forward_within_ms: 0,
            auth_token: String::new(),
            ..req.clone()
        };
        wire::encode_request(&fwd, &mut frame);
        // Only while this node still vouches for that leader: a primary that stops appending
        // (paused, cut off, deposed) ends the wait within the minimum election timeout, not
        // at the client's deadline (a sent write is then unknown, a read answered as before).
        let vouched = async {
            loop {
                tokio::time::sleep(STALE_LEADER_RECHECK).await;
                if self.fresh_leader().await != Some(leader) {
                    return;
                }
            }
        };
        let until = tokio::time::Instant::now() + within;
        let send = async {
            // C20: a primary that has recorded the cluster's id refuses a member without one,
            // and that id is in the log it replicates here: a fresh standby takes it within a
            // few appends. Sent unstamped and refused: once more when the id arrives, within
            // the client's budget (before, a brand-new cluster's standby answered STANDBY).
            // Only an unstamped node keeps a copy of the request for that.
            let again = self.identity.tag().is_none().then(|| frame.clone());
            let r = self
                .forwarder
                .forward(leader, &node.raft, who.to_string(), within, frame)
                .await;
            let Some(frame) = again.filter(|_| matches!(r, Forwarded::Refused)) else {
                return r;
            };
            crate::base::counters::forward("unstamped");
            if tokio::time::timeout_at(until, self.identity.tagged())
                .await
                .is_err()
            {
                return r;
            }
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return r;
            }
            self.forwarder
                .forward(leader, &node.raft, who.to_string(), left, frame)
                .await
        };
        let res = tokio::select! {
            r = send => r,
            () = vouched => Forwarded::Lost,
        };
        crate::base::counters::forward(match &res {
            Forwarded::Reply(_) => "replied",
            Forwarded::NotSent => "unreachable",
            Forwarded::Refused => "refused",
            Forwarded::Lost => "lost",
        });
        match res {
            Forwarded::Reply(bytes) => match wire::decode_reply(&bytes, &self.limits) {
                Ok(r) if r.seq == req.seq => Some(r),
                _ => {
                    crate::log_warn!(
                        "node {}: forwarded {} (seq {}): the primary's reply is unusable",
                        self.id,
                        req.op.name(),
                        req.seq
                    );
                    self.forward_lost(req)
                }
            },
            Forwarded::NotSent | Forwarded::Refused => None,
            Forwarded::Lost => self.forward_lost(req),
        }
    }

    /// A forwarded request that left without an answer: a write's outcome is unknown.
    fn forward_lost(&self, req: &Request) -> Option<Reply> {
        (req.op.kind() == OpKind::Write).then(|| self.outcome_unknown(req.seq, &req.op))
    }
}

/// C16, on the primary: serves a request a member forwarded for `who` (its raft connection
/// authenticated as a member when `member_tls`), bounded by `within_ms`; the reply as one
/// framed message, or empty when not taken. Never forwarded again.
pub async fn answer_forwarded(
    ctx: &Ctx,
    member_tls: bool,
    from: SocketAddr,
    who: &str,
    within_ms: u32,
    frame: &[u8],
) -> Vec<u8> {
    // A cluster that checks callers trusts an asserted identity only from an authenticated
    // member.
    if ctx.auth.on && !member_tls {
        return Vec::new();
    }
    if frame.len() > ctx.limits.max_message_bytes || who.len() > 300 {
        return Vec::new();
    }
    let Ok(req) = wire::decode_request(frame, &ctx.limits) else {
        return Vec::new();
    };
    let who = if !ctx.auth.on {
        Identity::Admin
    } else if who == "anonymous" {
        Identity::Anonymous
    } else {
        match Identity::parse(who) {
            Some(w) => w,
            None => return Vec::new(),
        }
    };
    let reply = if !forwardable(&req) {
        Reply::status(req.seq, -libc::EINVAL)
    } else {
        let mut conn = Conn {
            peer: Origin::Forwarded(from),
            auth: ConnAuth::new(None),
            shown: false,
        };
        let within = Duration::from_millis(within_ms.max(1) as u64).min(MAX_FORWARD_WAIT);
        let mut session = None;
        let served = answer_as(ctx, &mut session, &mut conn, &req, who, false);
        match tokio::time::timeout(within, served).await {
            Ok(r) => r,
            Err(_) if req.op.kind() == OpKind::Write => ctx.outcome_unknown(req.seq, &req.op),
            Err(_) => Reply::status(req.seq, -E_XCE_NOT_READY),
        }
    };
    let mut out = Vec::new();
    encode_reply_bounded(ctx, &reply, &mut out);
    out
}

/// [`answer`] for a caller known as `who`; `may_forward`: a standby may forward it (F28; a
/// request that was forwarded to this node is never forwarded again).
async fn answer_as(
    ctx: &Ctx,
    session: &mut Option<Session>,
    conn: &mut Conn,
    req: &Request,
    who: Identity,
    may_forward: bool,
) -> Reply {
    let seq = req.seq;
    // C13: whether that role may call this op at all (the op's rule).
    let rule = req.op.rule();
    if rule.roles & who.role() == 0 {
        let why = format!("{who} may not call {}", rule.name);
        return refuse(ctx, conn, req, &who, &why);
    }
    // Answered by any node, whatever its role.
    if let Op::WaitPrimary {
        timeout_ms,
        exclude_host,
        exclude_port,
    } = &req.op
    {
        let exclude = (!exclude_host.is_empty() && *exclude_port != 0)
            .then_some((exclude_host.as_str(), *exclude_port));
        let mut info = wait_primary(ctx, *timeout_ms, exclude).await;
        if *timeout_ms == 0 {
            crate::node::progress::progress(ctx, &mut info).await;
        }
        return Reply::ok(seq, ReplyData::CtrlInfo(info));
    }
    // C11: a leader that has not yet applied everything committed before it took office
    // (just restarted, just elected) serves once it has, after a short wait.
    if !ctx.serving_leader() {
        ctx.ready.wait(&ctx.raft, READY_WAIT).await;
    }
    // C2: only the primary serves anything else (C10: not a leader cut off from its quorum).
    if !ctx.serving_leader() {
        // C16: unless the client could not reach the primary and asks this node to forward.
        if may_forward {
            if let Some(r) = ctx.forward(req, &who).await {
                return r;
            }
        }
        let mut r = ctx.not_primary(seq, &req.op, None);
        if matches!(req.op, Op::Hello(_)) {
            r.data = ReplyData::CtrlInfo(ctx.info());
        }
        return r;
    }
    // C13: what binds this caller to the op's parameters, on the primary's applied state.
    if let Err(why) = auth::check(&who, &req.op, |id| job_facts(ctx, id)) {
        return refuse(ctx, conn, req, &who, &why);
    }
    if !auth::session_ok(&req.op, session.as_ref().map(|s| role_to_wire(s.role))) {
        return Reply::status(seq, -E_XCE_AUTH);
    }
    // C17: membership changes go through openraft's membership change, not a command.
    if matches!(req.op, Op::MemberAdd { .. } | Op::MemberRemove { .. }) {
        return crate::node::membership::answer(ctx, req, &who).await;
    }
    // C14 on demand (issue 26): a handover to a live, caught-up voter.
    if let Op::LeaderTransfer { to, from } = req.op {
        return crate::node::transfer::answer(ctx, req, &who, to, from).await;
    }
    // C19: a consistency check now, then this primary's view (its alarms, the index checked).
    // One that finished within a second (or 20 times its hashing time) answers instead: a
    // caller cannot keep every node hashing.
    if matches!(req.op, Op::ConsistencyCheck) {
        let recent = ctx
            .findings
            .fresh(CHECK_REUSE, crate::node::check::COST_FACTOR);
        if !recent {
            let check = crate::node::check::check_now(ctx);
            let _ = tokio::time::timeout(CHECK_ANSWER_WAIT, check).await;
        }
        return Reply::ok(seq, ReplyData::CtrlInfo(ctx.info()));
    }
    // C20: an online snapshot, in chunks.
    if let Op::SnapshotSave(s) = &req.op {
        return crate::node::backup::answer(ctx, seq, s).await;
    }
    // The op's category (its rule) decides the path: writes and fire-and-forget ops through
    // the log, reads through the read barrier.
    let mut cmd = match rule.kind {
        OpKind::Write | OpKind::FireAndForget => command_of(&req.op),
        OpKind::Read | OpKind::Probe => None,
    };
    // A user's job that names no user is the user's own (C13).
    if let (Some(Cmd::JobSubmit(spec)), Identity::User(u)) = (&mut cmd, &who) {
        if spec.user.is_empty() {
            spec.user = u.clone();
        }
    }
    if let Some(cmd) = cmd {
        // C24: past the quota (or below the disk floor) new work is refused before it reaches
        // the log; what finishes or stops work already admitted goes on.
        if matches!(cmd, Cmd::JobSubmit(_) | Cmd::RunTask { .. }) {
            if let Some(why) = crate::base::disk::alarm() {
                let mut r = Reply::status(seq, -xce_proto::error::E_XCE_NOSPACE);
                r.detail = why;
                return r;
            }
        }
        // C13 amended: the exactly-once table knows this caller's ids as its own.
        let client_id = auth::bound_client_id(&who, req.client_id);
        return match ctx.write_as(req, client_id, cmd).await {
            Ok(o) => {
                if let (Op::Join(j), OutData::SessionId(id)) = (&req.op, &o.data) {
                    if o.status == 0 {
                        *session = Some(Session {
                            role: role_from_wire(j.role),
                            host: j.host.clone(),
                            id: *id,
                        });
                    }
                }
                outcome_reply(seq, o)
            }
            Err(r) => r,
        };
    }
    if matches!(req.op, Op::Nop) {
        return Reply::status(seq, 0);
    }
    // Reads: confirm leadership and wait for the read index to be applied (C3).
    if let Some(r) = ctx.read_barrier(seq, &req.op).await {
        return r;
    }
    if let Op::JobListPage(p) = &req.op {
        return job_list_page(ctx, seq, p);
    }
    read(ctx, req)
}

fn read(ctx: &Ctx, req: &Request) -> Reply {
    let seq = req.seq;
    // The node's own view reads the state itself (its alarms: C19's CORRUPT): taken before the
    // state's guard, never under it (`raft/state_lock.rs`: one guard per thread).
    match &req.op {
        Op::Hello(_) => return Reply::ok(seq, ReplyData::CtrlInfo(ctx.info())),
        Op::ClusterConf => return cluster_conf(ctx, seq),
        _ => {}
    }
    let a = ctx.applied.read().expect("state lock");
    let st = &a.state;
    let enoent = || Reply::status(seq, -libc::ENOENT);
    match &req.op {
        // The unpaged op answers only what fits one frame (older clients; ours page).
        Op::JobList(f) => {
            let budget = crate::sm::listing::hard_budget(0, ctx.limits.max_message_bytes);
            st.jobs(f, budget).map_or_else(
                || Reply::status(seq, -xce_proto::error::E_XCE_TOOBIG),
                |jobs| Reply::ok(seq, ReplyData::Jobs(jobs)),
            )
        }
        Op::JobInfo { job_id } => st
            .job(*job_id)
            .map_or_else(enoent, |j| Reply::ok(seq, ReplyData::Job(j))),
        Op::ResList => Reply::ok(seq, ReplyData::Resources(st.resources())),
        Op::WorkerList => Reply::ok(
            seq,
            ReplyData::Hosts(st.hosts(now_ms(), ctx.host_timeout_ms())),
        ),
        Op::ResVal { host } => st
            .resvals(host)
            .map_or_else(enoent, |r| Reply::ok(seq, ReplyData::ResVals(r))),
        other => {
            crate::log_error!(
                "node {}: unexpected op {} in read path",
                ctx.id,
                other.name()
            );
            Reply::status(seq, -libc::EINVAL)
        }
    }
}

/// `clusterConf`: the membership with the primary this node knows, and the queues.
fn cluster_conf(ctx: &Ctx, seq: u64) -> Reply {
    let info = ctx.info();
    // C17: the current membership; a learner (still catching up) is initializing.
    let m = ctx.raft.metrics().borrow().membership_config.clone();
    let controllers = m
        .membership()
        .nodes()
        .map(|(&id, n)| {
            let (host, port) = split_addr(&n.client).unwrap_or_default();
            wire::ControllerEntry {
                id: id as u32,
                host,
                port,
                role: if id as u32 == info.primary_id {
                    ControllerRole::Primary
                } else if m.membership().voter_ids().any(|v| v == id) {
                    ControllerRole::Standby
                } else {
                    ControllerRole::Initializing
                },
            }
        })
        .collect();
    let queues = ctx.applied.read().expect("state lock").state.queues();
    Reply::ok(
        seq,
        ReplyData::ClusterConf(wire::ClusterConf {
            cluster_name: ctx.opts.cluster_name.clone(),
            controllers,
            primary_id: info.primary_id,
            term: info.term,
            queues,
        }),
    )
}

/// `waitPrimary`: answers as soon as a primary is known, or at the timeout with
/// `primary_id = 0`. Wakes on this node's metrics watch channel (no polling). Two guards keep
/// F18 clients away from a dead primary: a standby whose leader has gone silent (no append
/// for an election timeout, e.g. it was just killed) does not report it — it re-checks every
/// [`STALE_LEADER_RECHECK`] until a fresh or a new leader appears — and a leader whose client
/// address is `exclude` (the one the client just failed to reach) is not reported either.
async fn wait_primary(ctx: &Ctx, timeout_ms: u32, exclude: Option<(&str, u16)>) -> ControllerInfo {
    use std::sync::atomic::Ordering::Relaxed;
    /// Counts this waiter in `ctx.primary_waiters` until it answers (or is dropped).
    struct Waiting<'a>(&'a std::sync::atomic::AtomicU32);
    impl Drop for Waiting<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Relaxed);
        }
    }
    let now_waiting = ctx.primary_waiters.fetch_add(1, Relaxed) + 1;
    let _waiting = Waiting(&ctx.primary_waiters);
    {
        let mut crowd = ctx.crowd.lock().expect("crowd");
        // An episode ends when no waiter has arrived for CROWD_MEMORY.
        let peak = if crowd.0.elapsed() > CROWD_MEMORY {
            0
        } else {
            crowd.1
        };
        *crowd = (std::time::Instant::now(), peak.max(now_waiting));
    }
    let answer = |primary| {
        let mut info = ctx.info_with_primary(primary);
        let crowd = *ctx.crowd.lock().expect("crowd");
        info.waiters = crowd.1.max(ctx.primary_waiters.load(Relaxed));
        info
    };
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(timeout_ms as u64).min(MAX_WAIT_PRIMARY);
    // The server metrics change only with the vote, the role, the leader or the membership
    // (the full metrics are re-sent on every turn of the raft loop, which this waiter's own
    // `fresh_leader` query causes: watching those made every wait end ready at once).
    let mut rx = ctx.raft.server_metrics();
    // A new leader vouches for itself once its barrier is applied (C11), which no server
    // metric shows: wake on that too (C15), not only on the next re-check.
    let mut proven = ctx.ready.subscribe();
    loop {
        proven.borrow_and_update();
        let leader = rx.borrow_and_update().current_leader;
        if leader.is_some() {
            if let Some(l) = ctx.fresh_leader().await {
                let addr = ctx.node(l).and_then(|n| split_addr(&n.client));
                let excluded = matches!((&addr, exclude),
                    (Some((h, p)), Some((xh, xp))) if h == xh && *p == xp);
                if !excluded {
                    return answer(Some(l));
                }
            }
        }
        // Metrics that change on every look (a leader's own quorum-ack clock) must not hold
        // the answer past its timeout: the deadline is checked on every turn.
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        let until = match leader {
            Some(_) => (tokio::time::Instant::now() + STALE_LEADER_RECHECK).min(deadline),
            None => deadline,
        };
        let woke = tokio::select! {
            r = tokio::time::timeout_at(until, rx.changed()) => r,
            Ok(()) = proven.changed() => Ok(Ok(())),
        };
        match woke {
            Ok(Ok(())) => continue,
            Ok(Err(_)) => break,
            Err(_) if tokio::time::Instant::now() >= deadline => break,
            Err(_) => continue,
        }
    }
    answer(None)
}
