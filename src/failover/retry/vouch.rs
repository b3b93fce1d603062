//! F29 for redirects (every tool, issue 36): a master that is not the primary names the primary
//! in its hint; when that node is in no master's place (it was added, and the context was
//! started with the old list), the master is asked which members it holds (an immediate
//! `waitPrimary`, a standby's membership too), and the hint is followed once if they name it
//! ([`vouch`]). The node joins the rotation only when it answers as the primary itself
//! (`retry/members.rs`): clients still learn the cluster from its primary.

use super::{clog, CallEnv, LoopState};
use crate::failover::log::Level;
use crate::failover::rotate::Endpoint;
use crate::wire::{Op, Reply, ReplyData};
use std::time::Instant;

/// F29 for redirects: asks the master on the current connection (once per connection) which
/// members it holds, and records them in the rotator as vouched for, so that a hint naming one
/// of them is followed.
pub fn vouch(state: &mut LoopState, env: &CallEnv<'_>, until: Instant) {
    let link = &mut state.link;
    if link.conn.is_none() || link.vouch_epoch == Some(link.epoch) {
        return;
    }
    link.vouch_epoch = Some(link.epoch);
    let ids = state.ids.read();
    let ask = Op::WaitPrimary {
        timeout_ms: 0,
        exclude_host: String::new(),
        exclude_port: 0,
    };
    let (result, _) = state.link.exchange(&env.waker, &ask, ids, until);
    let members = match result {
        Ok(Reply {
            status: 0,
            data: ReplyData::CtrlInfo(info),
            ..
        }) => info.members,
        _ => return,
    };
    let held: Vec<Endpoint> = members
        .iter()
        .filter(|m| !m.host.is_empty() && m.port != 0)
        .map(|m| Endpoint::new(m.host.clone(), m.port))
        .collect();
    clog!(
        env,
        Level::Debug,
        "masters: {} holds the members {}",
        state.link.current_endpoint(),
        held.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    state.link.rotator.vouch(held);
}
