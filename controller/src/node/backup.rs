//! C20: `xce-controller snapshot save` on the primary: an online snapshot, consistent at a
//! log index, with its digest, sent in chunks over the client port (op `snapshotSave`, admin
//! only).
//!
//! The first request runs a consistency check now (`node/check.rs`): a checkpoint entry is
//! committed after the request arrived — so the state as of it holds every write acknowledged
//! before — every member hashes its state there, and the primary compares. The state the
//! primary hashed at that entry (a clone it kept, `raft/digests.rs`) is written to a backup
//! file (`node/backup_file.rs`) in the data directory, off the runtime's threads, with the digest and
//! how many members agreed; a primary whose state a majority of the voters does not confirm
//! saves nothing. The file is then sent in chunks by cursor and offset; it is removed after
//! [`crate::node::backup_file::SAVE_IDLE`] without a request (and at the node's next start).

use std::sync::Arc;
use std::time::Instant;

use crate::base::ids::SnapshotMeta;
use crate::node::backup_file::{self as backup, BackupHeader, Save};
use crate::node::ctx::Ctx;
use crate::raft::digests::Checkpoint;
use crate::sm::digest;

/// The chunk sent when the request names no size.
pub const DEFAULT_CHUNK: usize = 1 << 20;
/// The largest chunk sent, whatever the request asks (well inside one client frame).
pub const MAX_CHUNK: usize = 8 << 20;
/// Checks tried before a save gives up (another checkpoint may replace the one kept).
const TRIES: usize = 3;

/// One chunk of a save's file, and the save it belongs to (its header says what it is).
#[derive(Debug)]
pub struct Chunk {
    pub cursor: u64,
    pub offset: u64,
    pub data: Vec<u8>,
    pub save: Save,
}

/// Why a `snapshotSave` answered no chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveError {
    /// A negative errno: ESTALE (a cursor this node does not hold), EINVAL, EBUSY, EAGAIN, EIO.
    Errno(i32),
    /// The consistency check could not run (this node leads no more): try again.
    NotReady,
}

/// One `snapshotSave` on the serving primary: a new save (`cursor` 0), or the next chunk of
/// one, at most `max_bytes` (0: [`DEFAULT_CHUNK`]) and within a frame of `frame_max`.
pub async fn chunk(
    ctx: &Ctx,
    cursor: u64,
    offset: u64,
    max_bytes: u32,
    frame_max: usize,
) -> Result<Chunk, SaveError> {
    let (asked, offset) = (cursor, if cursor == 0 { 0 } else { offset });
    let (cursor, save) = if asked == 0 {
        start(ctx).await?
    } else {
        match ctx.saves.get(asked) {
            Some(save) => (asked, save),
            None => return Err(SaveError::Errno(-libc::ESTALE)),
        }
    };
    if offset > save.total {
        return Err(SaveError::Errno(-libc::EINVAL));
    }
    let max = match max_bytes as usize {
        0 => DEFAULT_CHUNK,
        n => n.min(MAX_CHUNK),
    }
    .min(frame_max.saturating_sub(64 << 10))
    .max(1);
    let path = save.path.clone();
    match tokio::task::spawn_blocking(move || backup::chunk(&path, offset, max)).await {
        Ok(Ok(data)) => Ok(Chunk {
            cursor,
            offset,
            data,
            save,
        }),
        _ => Err(SaveError::Errno(-libc::EIO)),
    }
}

/// Checks, then writes the checkpoint's state to a backup file: its cursor and save.
async fn start(ctx: &Ctx) -> Result<(u64, Save), SaveError> {
    if !ctx.saves.room() {
        return Err(SaveError::Errno(-libc::EBUSY));
    }
    let (cp, agreeing, voters) = confirmed(ctx).await?;
    let io = |_| SaveError::Errno(-libc::EIO);
    let cursor = loop {
        let c = ring::rand::generate::<[u8; 8]>(&ring::rand::SystemRandom::new())
            .map(|r| u64::from_le_bytes(r.expose()))
            .map_err(io)?;
        if c != 0 {
            break c;
        }
    };
    let backup_id = ring::rand::generate::<[u8; 16]>(&ring::rand::SystemRandom::new())
        .map_err(io)?
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
        agreeing,
        voters,
        jobs: cp.state.job_count() as u64,
        saved_by: ctx.id,
        saved_at_ms: crate::base::clock::now_ms(),
    };
    let path = ctx.data.join(format!("backup-{cursor:016x}.tmp"));
    let total = write(ctx, &path, &header, cp)
        .await
        .map_err(SaveError::Errno)?;
    let save = Save {
        path,
        total,
        header,
        last_used: Instant::now(),
    };
    ctx.saves.add(cursor, save.clone());
    Ok((cursor, save))
}

/// A checkpoint whose state a majority of the voters confirmed (C19), from a check run now
/// (another checkpoint may replace the one kept: [`TRIES`] checks), with how many agreed of
/// how many voters.
async fn confirmed(ctx: &Ctx) -> Result<(Arc<Checkpoint>, u32, u32), SaveError> {
    let mut checked = None;
    for _ in 0..TRIES {
        match crate::node::check::check_now(ctx).await {
            Some(c) if c.checkpoint.is_some() => {
                checked = Some(c);
                break;
            }
            Some(_) => continue,
            None => return Err(SaveError::NotReady),
        }
    }
    let Some(c) = checked else {
        return Err(SaveError::Errno(-libc::EAGAIN));
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
        return Err(SaveError::Errno(-libc::EIO));
    }
    Ok((cp, c.round.agreeing.len() as u32, c.round.voters as u32))
}

/// Writes the checkpoint's state with `header` to the backup file at `path`, off the
/// runtime's threads: its size, or -EIO (the file removed).
async fn write(
    ctx: &Ctx,
    path: &std::path::Path,
    header: &BackupHeader,
    cp: Arc<Checkpoint>,
) -> Result<u64, i32> {
    let (p, h) = (path.to_path_buf(), header.clone());
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
            let _ = std::fs::remove_file(path);
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
    Ok(total)
}
