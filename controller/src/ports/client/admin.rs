//! The admin ops the node serves (authorised already, on the serving primary), in the wire's
//! words: `memberAdd`/`memberRemove` (C17, `node/membership.rs`), `leaderTransfer` (C14 on
//! demand, `node/transfer.rs`) and `snapshotSave` (C20, `node/backup.rs`). The node decides;
//! here its answer becomes a reply, and the primary logs what it did for whom.

use std::fmt::Display;

use xce_proto::error::E_XCE_NOT_READY;
use xce_proto::wire::{Op, Reply, ReplyData, Request, SnapshotChunk, SnapshotSave};

use super::command::{not_served, refused_status, write_of};
use crate::base::ids::NodeId;
use crate::node::backup::{self, SaveError};
use crate::node::backup_file::unhex;
use crate::node::ctx::Ctx;
use crate::node::membership::{self, Fail, Failure};

/// `memberAdd` / `memberRemove`.
pub(super) async fn member(ctx: &Ctx, req: &Request, who: &(dyn Display + Sync)) -> Reply {
    // The exactly-once keys as sent: only an admin calls these (its ids are its own).
    let w = write_of(req, req.client_id);
    let (what, res) = match &req.op {
        Op::MemberAdd {
            id,
            client_addr,
            raft_addr,
        } => (
            format!("member add {id}={client_addr}/{raft_addr}"),
            membership::add(ctx, &w, *id as NodeId, client_addr, raft_addr).await,
        ),
        Op::MemberRemove { id } => (
            format!("member remove {id}"),
            membership::remove(ctx, &w, *id as NodeId).await,
        ),
        other => (
            other.name().to_string(),
            Err(Fail {
                refusal: Failure::Errno(-libc::EINVAL),
                why: "not a membership op".into(),
            }),
        ),
    };
    let Err(Fail { refusal, why }) = res else {
        eprintln!(
            "node {}: {what} for {who}: done; {}",
            ctx.id,
            membership::summary(ctx)
        );
        return Reply::status(req.seq, 0);
    };
    let status = match &refusal {
        Failure::Errno(e) => *e,
        Failure::NotReady => -E_XCE_NOT_READY,
        Failure::NotServed(n) => refused_status(n.why),
    };
    crate::log_warn!(
        "node {}: {what} for {who}: {}: {why}",
        ctx.id,
        xce_proto::error::status_text(status)
    );
    // Issue 36: the reason travels to the operator's command (a redirect's does not: the
    // client follows it).
    match refusal {
        Failure::NotServed(n) => not_served(req.seq, n),
        Failure::Errno(_) | Failure::NotReady => {
            let mut r = Reply::status(req.seq, status);
            r.detail = why;
            r
        }
    }
}

/// `leaderTransfer` to node `to` (0: the most caught-up live voter) asked of primary `from`:
/// the primary logs what it did and why; a refusal's reason travels in the reply.
pub(super) async fn transfer(
    ctx: &Ctx,
    req: &Request,
    who: &(dyn Display + Sync),
    to: u32,
    from: u32,
) -> Reply {
    let what = match to {
        0 => "leader transfer".to_string(),
        n => format!("leader transfer to node {n}"),
    };
    match crate::node::transfer::transfer(ctx, to as NodeId, from as NodeId).await {
        Ok(why) => {
            eprintln!("node {}: {what} for {who}: {why}", ctx.id);
            Reply::status(req.seq, 0)
        }
        Err((status, why)) => {
            crate::log_warn!(
                "node {}: {what} for {who}: refused ({}): {why}",
                ctx.id,
                xce_proto::error::status_text(status)
            );
            let mut r = Reply::status(req.seq, status);
            r.detail = why;
            r
        }
    }
}

/// `snapshotSave`: a new online snapshot, or the next chunk of one.
pub(super) async fn snapshot_save(ctx: &Ctx, seq: u64, s: &SnapshotSave) -> Reply {
    let frame_max = super::LIMITS.max_message_bytes;
    let c = match backup::chunk(ctx, s.cursor, s.offset, s.max_bytes, frame_max).await {
        Ok(c) => c,
        Err(SaveError::Errno(e)) => return Reply::status(seq, e),
        Err(SaveError::NotReady) => return Reply::status(seq, -E_XCE_NOT_READY),
    };
    let h = &c.save.header;
    Reply::ok(
        seq,
        ReplyData::SnapshotChunk(SnapshotChunk {
            cursor: c.cursor,
            offset: c.offset,
            data: c.data,
            total_bytes: c.save.total,
            index: h.index,
            term: h.term,
            digest: unhex::<32>(&h.digest).map(Vec::from).unwrap_or_default(),
            cluster_id: h
                .cluster
                .as_deref()
                .and_then(unhex::<16>)
                .unwrap_or([0; 16]),
            agreeing: h.agreeing,
            voters: h.voters,
        }),
    )
}
