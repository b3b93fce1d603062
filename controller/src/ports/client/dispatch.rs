//! One request, from its caller to its answer: who is calling (C13), what that caller may do,
//! where the op goes — `waitPrimary` anywhere, a standby's refusal or forward (C2, C16), the
//! admin ops to `node/`, writes through the log, reads through the barrier (C3).

use std::net::SocketAddr;

use xce_proto::error::E_XCE_AUTH;
use xce_proto::wire::{ControllerInfo, Op, OpKind, Reply, ReplyData, Request};

use super::authz::{check, role_bit, session_ok, JobFacts};
use super::command::{
    command_of, not_primary, not_served, outcome_reply, role_from_wire, role_to_wire, write_of,
};
use super::info::info;
use super::reads::{job_list_page, read, read_barrier, wait_primary};
use super::{Session, CHECK_ANSWER_WAIT, CHECK_REUSE, READY_WAIT};
use crate::base::auth::{self, ConnAuth, Identity};
use crate::node::ctx::Ctx;
use crate::sm::state::{Cmd, OutData};

/// A client connection: where it comes from and who it is (C13); `shown`: a request of
/// it showed an identity (C9 amended: the connection is authenticated).
pub(super) struct Conn {
    pub(super) peer: Origin,
    pub(super) auth: ConnAuth,
    pub(super) shown: bool,
}

/// Where a request comes from, as refusals name it.
pub(super) enum Origin {
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
        user: j.user.to_string(),
        exec_host: j.exec_host.to_string(),
    })
}

/// Serves one request; `None` when no reply is to be sent (`noReply`).
pub(super) async fn handle(
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
    let write = matches!(req.op.kind(), OpKind::Write | OpKind::FireAndForget)
        && !matches!(req.op, Op::Nop);
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

/// [`answer`] for a caller known as `who`; `may_forward`: a standby may forward it (F28; a
/// request that was forwarded to this node is never forwarded again).
pub(super) async fn answer_as(
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
    if rule.roles & role_bit(&who) == 0 {
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
        return answer_wait_primary(ctx, seq, *timeout_ms, exclude_host, *exclude_port).await;
    }
    // C11: a leader that has not yet applied everything committed before it took office
    // (just restarted, just elected) serves once it has, after a short wait.
    if !ctx.serving_leader() {
        ctx.ready.wait(&ctx.raft, READY_WAIT).await;
    }
    // C2: only the primary serves anything else (C10: not a leader cut off from its quorum).
    if !ctx.serving_leader() {
        return not_serving(ctx, req, &who, may_forward).await;
    }
    // C13: what binds this caller to the op's parameters, on the primary's applied state.
    if let Err(why) = check(&who, &req.op, |id| job_facts(ctx, id)) {
        return refuse(ctx, conn, req, &who, &why);
    }
    if !session_ok(&req.op, session.as_ref().map(|s| role_to_wire(s.role))) {
        return Reply::status(seq, -E_XCE_AUTH);
    }
    if let Some(r) = answer_admin(ctx, req, &who).await {
        return r;
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
        return answer_write(ctx, session, req, &who, cmd).await;
    }
    if matches!(req.op, Op::Nop) {
        return Reply::status(seq, 0);
    }
    // Reads: confirm leadership and wait for the read index to be applied (C3).
    if let Some(r) = read_barrier(ctx, seq, &req.op).await {
        return r;
    }
    if let Op::JobListPage(p) = &req.op {
        return job_list_page(ctx, seq, p);
    }
    read(ctx, req)
}

/// The ops that are neither a command nor a read of the state (C14, C17, C19, C20), on the
/// serving primary, authorised already; `None`: not one of them.
async fn answer_admin(ctx: &Ctx, req: &Request, who: &Identity) -> Option<Reply> {
    let seq = req.seq;
    // C17: membership changes go through openraft's membership change, not a command.
    if matches!(req.op, Op::MemberAdd { .. } | Op::MemberRemove { .. }) {
        return Some(super::admin::member(ctx, req, who).await);
    }
    // C14 on demand (issue 26): a handover to a live, caught-up voter.
    if let Op::LeaderTransfer { to, from } = req.op {
        return Some(super::admin::transfer(ctx, req, who, to, from).await);
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
        return Some(Reply::ok(seq, ReplyData::CtrlInfo(info(ctx))));
    }
    // C20: an online snapshot, in chunks.
    if let Op::SnapshotSave(s) = &req.op {
        return Some(super::admin::snapshot_save(ctx, seq, s).await);
    }
    None
}

/// A write through the log (C3) for `who`, its outcome as the reply; a `join` that succeeds
/// makes the connection's session.
async fn answer_write(
    ctx: &Ctx,
    session: &mut Option<Session>,
    req: &Request,
    who: &Identity,
    cmd: Cmd,
) -> Reply {
    let seq = req.seq;
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
    let client_id = auth::bound_client_id(who, req.client_id);
    match ctx.write(&write_of(req, client_id), cmd).await {
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
        Err(n) => not_served(seq, n),
    }
}

/// `waitPrimary` (F18), answered by any node whatever its role; an immediate one (timeout 0)
/// with the node's progress (C18).
async fn answer_wait_primary(
    ctx: &Ctx,
    seq: u64,
    timeout_ms: u32,
    exclude_host: &str,
    exclude_port: u16,
) -> Reply {
    let exclude =
        (!exclude_host.is_empty() && exclude_port != 0).then_some((exclude_host, exclude_port));
    let mut info = wait_primary(ctx, timeout_ms, exclude).await;
    if timeout_ms == 0 {
        super::info::with_progress(ctx, &mut info).await;
    }
    Reply::ok(seq, ReplyData::CtrlInfo(info))
}

/// C2: the answer of a node that does not serve as primary — forwarded when the client asked
/// and this node may (C16), else where the primary is (a `hello` with this node's view).
async fn not_serving(ctx: &Ctx, req: &Request, who: &Identity, may_forward: bool) -> Reply {
    if may_forward {
        if let Some(r) = super::forward::forward(ctx, req, who).await {
            return r;
        }
    }
    let mut r = not_primary(ctx, req.seq, &req.op, None);
    if matches!(req.op, Op::Hello(_)) {
        r.data = ReplyData::CtrlInfo(info(ctx));
    }
    r
}
