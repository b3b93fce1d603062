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
//!
//! The files: `admin.rs` (member changes, leader transfer, snapshot save: the node's answers
//! as replies), `authz.rs` (who may call what, C13), `conn.rs` (a connection: frames, deadlines, why it closes), `standing.rs` (a
//! stranger or authenticated: the crowd, the slots, the TLS handshake), `dispatch.rs`
//! (one request: who calls, what it may do, where it goes), `command.rs` (an op as the state
//! machine's command, an outcome as a reply), `reads.rs` (the read barrier, reads,
//! `clusterConf`, `waitPrimary`), `listing.rs` (pages of a listing, the frame bound),
//! `view.rs` (stored records as the wire's), `info.rs` (what a node says of itself), `forward.rs` (C16 on a standby) and
//! `forwarded.rs` (C16 on the primary).

/// The wire's bounds on what a client sends and is sent (C9): the protocol's defaults.
const LIMITS: xce_proto::wire::Limits =
    xce_proto::wire::Limits::with_max_message_bytes(xce_proto::wire::DEFAULT_MAX_MESSAGE_BYTES);

mod admin;
mod authz;
mod command;
mod conn;
mod dispatch;
mod forward;
mod forwarded;
pub mod info;
mod listing;
mod reads;
mod standing;
mod view;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use forwarded::answer_forwarded;

use crate::base::crowd::Crowd;
use crate::base::ratelog::RateLog;
use crate::node::ctx::Ctx;
use crate::sm::state::Role;
use standing::Standing;

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
pub(super) const READ_CHUNK: usize = 64 * 1024;

/// A joined session: bound to the connection it was made on, never replicated.
#[derive(Debug, Clone)]
pub(super) struct Session {
    pub(super) role: Role,
    #[allow(dead_code)]
    host: String,
    #[allow(dead_code)]
    id: u64,
}

/// Connection-level log lines a stranger can cause, rate-limited with a count.
pub(super) static REFUSALS: RateLog = RateLog::new();

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
        let standing = Standing::new(place, slots.clone());
        tokio::spawn(conn::accepted(
            ctx.clone(),
            stream,
            peer,
            tls.clone(),
            standing,
        ));
    }
}
