//! C20: `xce-controller snapshot save` on the primary: an online snapshot, consistent at a
//! log index, with its digest, sent in chunks over the client port (op `snapshotSave`, admin
//! only).
//!
//! The first request runs a consistency check now (`node/check.rs`): a checkpoint entry is
//! committed after the request arrived — so the state as of it holds every write acknowledged
//! before — every member hashes its state there, and the primary compares. The state the
//! primary hashed at that entry (a clone it kept, `raft/digests.rs`) is written to a backup
//! file (`sm/backup.rs`) in the data directory, off the runtime's threads, with the digest and
//! how many members agreed; a primary whose state a majority of the voters does not confirm
//! saves nothing. The file is then sent in chunks by cursor and offset; it is removed after
//! [`crate::node::backup_file::SAVE_IDLE`] without a request (and at the node's next start).

use std::time::Instant;

use xce_proto::error::E_XCE_NOT_READY;
use xce_proto::wire::{Reply, ReplyData, SnapshotChunk, SnapshotSave};

use crate::base::ids::SnapshotMeta;
use crate::node::backup_file::{self as backup, BackupHeader, Save};
use crate::node::ctx::Ctx;
use crate::sm::digest;

/// The chunk sent when the request names no size.
pub const DEFAULT_CHUNK: usize = 1 << 20;
/// The largest chunk sent, whatever the request asks (well inside one client frame).
pub const MAX_CHUNK: usize = 8 << 20;
/// Checks tried before a save gives up (another checkpoint may replace the one kept).
const TRIES: usize = 3;

/// Answers one `snapshotSave` on the serving primary.
pub async fn answer(ctx: &Ctx, seq: u64, s: &SnapshotSave) -> Reply {
    let save = if s.cursor == 0 {
        match start(ctx).await {
            Ok(save) => save,
            Err(r) => return Reply::status(seq, r),
        }
    } else {
        match ctx.saves.get(s.cursor) {
            Some(save) => (s.cursor, save),
            None => return Reply::status(seq, -libc::ESTALE),
        }
    };
    let (cursor, save) = save;
    let offset = if s.cursor == 0 { 0 } else { s.offset };
    if offset > save.total {
        return Reply::status(seq, -libc::EINVAL);
    }
    let max = match s.max_bytes as usize {
        0 => DEFAULT_CHUNK,
        n => n.min(MAX_CHUNK),
    }
    .min(ctx.limits.max_message_bytes.saturating_sub(64 << 10))
    .max(1);
    let path = save.path.clone();
    let data = match tokio::task::spawn_blocking(move || backup::chunk(&path, offset, max)).await {
        Ok(Ok(d)) => d,
        _ => return Reply::status(seq, -libc::EIO),
    };
    let h = &save.header;
    Reply::ok(
        seq,
        ReplyData::SnapshotChunk(SnapshotChunk {
            cursor,
            offset,
            data,
            total_bytes: save.total,
            index: h.index,
            term: h.term,
            digest: backup::unhex::<32>(&h.digest)
                .map(Vec::from)
                .unwrap_or_default(),
            cluster_id: h
                .cluster
                .as_deref()
                .and_then(backup::unhex::<16>)
                .unwrap_or([0; 16]),
            agreeing: h.agreeing,
            voters: h.voters,
        }),
    )
}

/// Checks, then writes the checkpoint's state to a backup file: its cursor and save, or the
/// status to answer.
async fn start(ctx: &Ctx) -> Result<(u64, Save), i32> {
    if !ctx.saves.room() {
        return Err(-libc::EBUSY);
    }
    let mut checked = None;
    for _ in 0..TRIES {
        match crate::node::check::check_now(ctx).await {
            Some(c) if c.checkpoint.is_some() => {
                checked = Some(c);
                break;
            }
            Some(_) => continue,
            None => return Err(-E_XCE_NOT_READY),
        }
    }
    let Some(c) = checked else {
        return Err(-libc::EAGAIN);
    };
    let cp = c.checkpoint.expect("checked above");
    let majority = c.round.voters / 2 + 1;
    if c.round.agreeing.len() < majority {
        crate::log_warn!(
            "node {}: snapshot save: the state at index {} is confirmed by {} of {} voters, not \
             a majority: nothing saved (C19)",
            ctx.id,
            cp.log_id.index,
            c.round.agreeing.len(),
            c.round.voters
        );
        return Err(-libc::EIO);
    }
    let cursor = loop {
        let c = ring::rand::generate::<[u8; 8]>(&ring::rand::SystemRandom::new())
            .map(|r| u64::from_le_bytes(r.expose()))
            .map_err(|_| -libc::EIO)?;
        if c != 0 {
            break c;
        }
    };
    let backup_id = ring::rand::generate::<[u8; 16]>(&ring::rand::SystemRandom::new())
        .map_err(|_| -libc::EIO)?
        .expose();
    let cluster = cp.state.cluster();
    let header = BackupHeader {
        format: 1,
        backup_id: digest::hex(&backup_id),
        index: cp.log_id.index,
        term: cp.log_id.leader_id.term,
        leader: cp.log_id.leader_id.node_id,
        digest: digest::hex(&cp.digest),
        cluster: cluster.map(|c| digest::hex(&c.id)),
        epoch: cluster.map_or(0, |c| c.epoch),
        agreeing: c.round.agreeing.len() as u32,
        voters: c.round.voters as u32,
        jobs: cp.state.job_count() as u64,
        saved_by: ctx.id,
        saved_at_ms: crate::base::clock::now_ms(),
    };
    let path = ctx.data.join(format!("backup-{cursor:016x}.tmp"));
    let (p, h) = (path.clone(), header.clone());
    let t0 = Instant::now();
    let written = tokio::task::spawn_blocking(move || {
        let meta = SnapshotMeta {
            last_log_id: Some(cp.log_id),
            last_membership: cp.membership.clone(),
            snapshot_id: format!("backup-{}", h.backup_id),
        };
        backup::write(&p, &h, &crate::sm::snapshot::View::of(meta, &cp.state))
    })
    .await;
    let total = match written {
        Ok(Ok(n)) => n,
        other => {
            let _ = std::fs::remove_file(&path);
            crate::log_error!(
                "node {}: snapshot save: writing {}: {other:?}",
                ctx.id,
                path.display()
            );
            return Err(-libc::EIO);
        }
    };
    eprintln!(
        "node {}: snapshot save: state at index {} ({} jobs, digest {}, {} of {} voters agree) \
         written in {} ms ({total} bytes)",
        ctx.id,
        header.index,
        header.jobs,
        &header.digest[..12],
        header.agreeing,
        header.voters,
        t0.elapsed().as_millis()
    );
    let save = Save {
        path,
        total,
        header,
        last_used: Instant::now(),
    };
    ctx.saves.add(cursor, save.clone());
    Ok((cursor, save))
}
