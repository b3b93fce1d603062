//! Where a client connection stands (C9 amended, C13 amended): a stranger in the crowd of
//! unauthenticated connections, or authenticated and holding one of the node's slots; its TLS
//! handshake, bounded in time and by eviction, and the certificate that bounds its life.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{ANONYMOUS_LIFETIME, HANDSHAKE_TIMEOUT, MAX_UNAUTHENTICATED, REFUSALS};
use crate::base::auth::Identity;
use crate::base::clock::now_ms;
use crate::base::crowd::Place;
use crate::base::ids::NodeId;
use crate::node::ctx::Ctx;

/// The TLS handshake of a stranger, raced against [`HANDSHAKE_TIMEOUT`] and eviction; then
/// the certificate's validity (C13 amended) and the connection's standing: authenticated by a
/// certificate that names a role (or on a node that checks nobody), else anonymous.
pub(super) async fn handshake(
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

pub(super) fn note_evicted(id: NodeId, peer: SocketAddr, when: &str) {
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
pub(super) struct Standing {
    pub(super) stranger: Option<Place>,
    slot: Option<OwnedSemaphorePermit>,
    slots: Arc<Semaphore>,
    pub(super) anonymous_until: Option<Instant>,
    cert_until: Option<Instant>,
}

impl Standing {
    /// A stranger that just arrived, in its place in the crowd.
    pub(super) fn new(place: Place, slots: Arc<Semaphore>) -> Standing {
        Standing {
            stranger: Some(place),
            slot: None,
            slots,
            anonymous_until: None,
            cert_until: None,
        }
    }

    /// Authenticated: leaves the crowd for a connection slot. `false` (logged): every slot is
    /// taken, and the connection is to be closed.
    pub(super) fn promote(&mut self, ctx: &Ctx, peer: SocketAddr) -> bool {
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

    pub(super) fn authenticated(&self) -> bool {
        self.slot.is_some()
    }

    /// The first of the instants the connection must close at, and why.
    pub(super) fn until(&self) -> Option<(Instant, &'static str)> {
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
    pub(super) async fn evicted(&self) {
        match &self.stranger {
            Some(p) => p.evicted().await,
            None => std::future::pending().await,
        }
    }
}
