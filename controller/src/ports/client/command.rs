//! The wire's words for the state machine's (C3): the replicated command of a write op, the
//! reply of its outcome, the session roles — the one place a client's op becomes a `Cmd`.

use xce_proto::error::{
    E_XCE_NOMASTER, E_XCE_NOT_READY, E_XCE_REDIRECT, E_XCE_STANDBY, E_XCE_UNKNOWN,
};
use xce_proto::wire::{self, Op, Reply, ReplyData, Request};

use crate::base::ids::NodeId;
use crate::node::ctx::{Ctx, NotServed, Refused, Write};
use crate::sm::state::{self, Cmd, OutData, Outcome, Role};

/// The status of a node's refusal (C2; F19 amended).
pub(super) fn refused_status(why: Refused) -> i32 {
    -match why {
        Refused::NotReady => E_XCE_NOT_READY,
        Refused::Redirect => E_XCE_REDIRECT,
        Refused::Standby => E_XCE_STANDBY,
        Refused::NoMaster => E_XCE_NOMASTER,
        Refused::Unknown => E_XCE_UNKNOWN,
    }
}

/// A node's refusal as the wire says it: its status, and where the primary is.
pub(super) fn not_served(seq: u64, n: NotServed) -> Reply {
    let mut r = Reply::status(seq, refused_status(n.why));
    if let Some((h, p)) = n.primary {
        r.redirect_host = h;
        r.redirect_port = p;
    }
    r
}

/// The reply of a node that cannot serve `op` itself (C2); `leader_hint`: a leader named by a
/// failed read or write.
pub(super) fn not_primary(ctx: &Ctx, seq: u64, op: &Op, leader_hint: Option<NodeId>) -> Reply {
    not_served(seq, ctx.not_primary(matches!(op, Op::Join(_)), leader_hint))
}

/// F19 (amended): a write's outcome unknown, as the wire says it.
pub(super) fn outcome_unknown(ctx: &Ctx, req: &Request) -> Reply {
    not_served(req.seq, ctx.outcome_unknown(req.seq, req.op.name()))
}

/// The node's view of a write request, remembered under `client_id` (C13 amended).
pub(super) fn write_of(req: &Request, client_id: [u8; 16]) -> Write<'_> {
    Write {
        client_id,
        request_id: req.request_id,
        seq: req.seq,
        name: req.op.name(),
        join: matches!(req.op, Op::Join(_)),
    }
}

/// The replicated command of a write op (`None` for reads and local ops).
pub(super) fn command_of(op: &Op) -> Option<Cmd> {
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
        Op::JobSubmit(spec) => Cmd::JobSubmit(job_from_spec(spec)),
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

pub(super) fn outcome_reply(seq: u64, o: Outcome) -> Reply {
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

pub(super) fn role_to_wire(r: Role) -> wire::SessionRole {
    match r {
        Role::Worker => wire::SessionRole::Worker,
        Role::Scheduler => wire::SessionRole::Scheduler,
        Role::ApiServer => wire::SessionRole::ApiServer,
        Role::Client => wire::SessionRole::Client,
    }
}

pub(super) fn role_from_wire(r: wire::SessionRole) -> Role {
    match r {
        wire::SessionRole::Worker => Role::Worker,
        wire::SessionRole::Scheduler => Role::Scheduler,
        wire::SessionRole::ApiServer => Role::ApiServer,
        wire::SessionRole::Client => Role::Client,
    }
}

/// The logged form of a submitted job spec.
fn job_from_spec(s: &wire::JobSpec) -> state::SubmitSpec {
    state::SubmitSpec {
        job_id: s.job_id,
        name: s.name.clone(),
        user: s.user.clone(),
        queue: s.queue.clone(),
        command: s.command.clone(),
        ncpus: s.ncpus,
        mem_mb: s.mem_mb,
    }
}
