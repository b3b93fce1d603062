//! F29: the masters list follows the cluster. The primary reports its members in its `hello`
//! answer; members the context does not know yet are appended to its rotation, for the life of
//! the context. Learned only from a node that answered, on the connection the context talks
//! through (TLS-verified when TLS is on), that it is itself the serving primary — never from a
//! standby's answer, a redirect hint, or a `waitPrimary` witness speaking of another node.
//!
//! Redirects to a node in no master's place: `retry/vouch.rs`.

use super::probe::primary_probe;
use super::resolver::bounded_resolver;
use super::{clog, CallEnv, LoopState};
use crate::error::Error;
use crate::failover::log::Level;
use crate::failover::rotate::{Endpoint, Learned, MAX_LEARNED_MASTERS};
use crate::wire::{ControllerRole, Reply, ReplyData};
use std::sync::Arc;
use std::time::Instant;

/// Whether the current connection has to be asked for the members: learning is on, and this
/// connection was not asked yet, or the primary stamped a reply on it with a membership version
/// other than the one of the members learned (a member was added or removed since). One
/// `hello` per connection and per membership change, none per call (P2).
pub fn due(state: &LoopState, env: &CallEnv<'_>) -> bool {
    let link = &state.link;
    let Some(conn) = link.conn.as_ref() else {
        return false;
    };
    let stamped = conn.members_version();
    env.options().learn_masters
        && (link.members_epoch != Some(link.epoch)
            || (stamped != 0 && stamped != link.members_version))
}

/// Sends the `hello` that asks the current connection whether it reaches the primary and which
/// members the cluster has; learns from the answer. Returns the answer (a non-primary's status
/// with its hint is for the caller to act on) or the transport error.
pub fn ask(state: &mut LoopState, env: &CallEnv<'_>, until: Instant) -> Result<Reply, Error> {
    let ids = state.ids.read();
    let (result, _) = state
        .link
        .exchange(&env.waker, &primary_probe(), ids, until);
    let reply = result?;
    learn(state, env, &reply);
    Ok(reply)
}

/// Learns from a `hello` answer received on the current connection (the caller guarantees
/// where it came from: the node this context talks to, not a witness or a hint). Anything but
/// a successful answer of a node that calls itself the primary is ignored, and so is an empty
/// member list (an older controller).
pub fn learn(state: &mut LoopState, env: &CallEnv<'_>, reply: &Reply) {
    if reply.status < 0 {
        // Not the primary: the loop moves on; a connection kept after all is asked again.
        return;
    }
    state.link.members_epoch = Some(state.link.epoch);
    // The version this answer speaks for, even when it teaches nothing new: asked again only
    // when a later reply says the membership changed.
    state.link.members_version = reply.members_version;
    if !env.options().learn_masters {
        return;
    }
    let stamp = (state.link.epoch, reply.members_version);
    if reply.members_version != 0 && state.link.members_learned == Some(stamp) {
        // P2: this connection's primary answered with this version's members before.
        return;
    }
    let ReplyData::CtrlInfo(info) = &reply.data else {
        return;
    };
    // A standby (or a primary cut off from its quorum, which answers as a standby) reports no
    // members; its view may be stale. The answering node must name itself the primary.
    if info.role != ControllerRole::Primary
        || info.id == 0
        || info.primary_id != info.id
        || info.members.is_empty()
    {
        return;
    }
    let from = state.link.current_endpoint();
    let resolve = bounded_resolver(env, None);
    let mut added = 0u64;
    let mut settled = true;
    for m in &info.members {
        if m.host.is_empty() || m.port == 0 {
            continue;
        }
        let e = Endpoint::new(m.host.clone(), m.port);
        let learned = state.link.rotator.learn(&e, &resolve);
        log_learned(env, &e, &from, &learned);
        match learned {
            Learned::Known(_) => {}
            Learned::Added(_) => added += 1,
            // Taken again from the next answer (a name that resolves later, room made).
            Learned::Unresolved | Learned::Full => settled = false,
        }
    }
    if settled {
        state.link.members_learned = Some(stamp);
    }
    if added > 0 {
        let masters = Arc::new(state.link.rotator.masters().to_vec());
        clog!(
            env,
            Level::Info,
            "masters: now {}",
            masters
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        env.observer.update(|s| {
            s.masters = masters;
            s.learned_masters += added;
        });
    }
}

/// The log line of a member `e` reported by the primary `from`, by what became of it.
fn log_learned(env: &CallEnv<'_>, e: &Endpoint, from: &Endpoint, learned: &Learned) {
    match learned {
        Learned::Known(_) => {}
        Learned::Added(_) => clog!(
            env,
            Level::Info,
            "masters: learned {e} from the primary {from}"
        ),
        Learned::Unresolved => clog!(
            env,
            Level::Info,
            "masters: {e}, reported by the primary {from}, does not resolve now: not added"
        ),
        Learned::Full => clog!(
            env,
            Level::Warn,
            "masters: {e}, reported by the primary {from}, not added: {} learned already",
            MAX_LEARNED_MASTERS
        ),
    }
}
