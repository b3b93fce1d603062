//! C16, on the primary: a request a member forwarded over the raft port, answered for the
//! identity it carries, bounded by the time the standby passed on, never forwarded again.

use std::net::SocketAddr;
use std::time::Duration;

use xce_proto::error::E_XCE_NOT_READY;
use xce_proto::wire::{self, OpKind, Reply};

use super::command::outcome_unknown;
use super::dispatch::{answer_as, Conn, Origin};
use super::forward::{forwardable, MAX_FORWARD_WAIT};
use super::reads::encode_reply_bounded;
use crate::base::auth::{ConnAuth, Identity};
use crate::node::ctx::Ctx;

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
    if frame.len() > super::LIMITS.max_message_bytes || who.len() > 300 {
        return Vec::new();
    }
    let Ok(req) = wire::decode_request(frame, &super::LIMITS) else {
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
            Err(_) if req.op.kind() == OpKind::Write => outcome_unknown(ctx, &req),
            Err(_) => Reply::status(req.seq, -E_XCE_NOT_READY),
        }
    };
    let mut out = Vec::new();
    encode_reply_bounded(ctx, &reply, &mut out);
    out
}
