//! `xce-controller snapshot save|restore|show` (C20): back up a running cluster, and make a new
//! cluster of a backup.
//!
//! `save FILE --masters LIST` asks the primary (through the library, as `member` does: admin
//! identity) for an online snapshot (`node/backup.rs`): the state at a checkpoint entry committed
//! after the request, checked against the members' digests (C19), in chunks, written to
//! `FILE.tmp`, fsynced and renamed to FILE, then read back and its digest recomputed.
//!
//! `restore FILE --data DIR --id N --cluster SPEC --restore-id NAME` writes a fresh data
//! directory for member N of a new cluster made of the backup: every member of that cluster is
//! restored from the same FILE with the same NAME, and so gets the same new cluster id
//! (derived from the backup's id and NAME, restore epoch + 1, `base/cluster_id.rs`); a node
//! whose data predates the restore (another id) is refused by them, and they by it. The
//! directory holds the backup's state as a snapshot at the backup's log index, the membership
//! SPEC names, an empty log that continues after that index, and the new cluster id.
//!
//! `show FILE` prints what a backup holds and checks its digest.

use std::path::{Path, PathBuf};

use openraft::{CommittedLeaderId, Membership};
use xce_proto::error::Error;
use xce_proto::wire::{Op, ReplyData, SnapshotChunk, SnapshotSave};

use crate::base::cluster_id::{Belonging, ClusterTag};
use crate::base::config::ClusterSpec;
use crate::base::ids::{LogId, NodeId, SnapshotMeta, StoredMembership, Vote};
use crate::cmd::status::StatusArgs;
use crate::node::backup_file::{self as backup, BackupHeader};
use crate::sm::digest;
use crate::sm::state::{ClusterStamp, State};

pub const USAGE: &str = "\
usage: xce-controller snapshot save FILE --masters LIST [--ca F --cert F --key F] [--token T]
       xce-controller snapshot restore FILE --data DIR --id N --cluster SPEC --restore-id NAME
       xce-controller snapshot show FILE

Backs up a running cluster and makes a new cluster of a backup (docs/operations.md, \"Back up
and restore\").

  save FILE          an online snapshot through the primary (admin): the state at a log index
                     committed after the request (every write acknowledged before is in it),
                     checked against the members' state digests; written to FILE (through
                     FILE.tmp), then read back and its digest checked
  restore FILE       writes a fresh data directory DIR (empty or absent) for member N of a NEW
                     cluster made of the backup. Restore every member of the new cluster from
                     the same FILE with the same --restore-id NAME (a date, a ticket number: any
                     text, new for every restore): they get the same new cluster id, and refuse
                     any node with other data (an old member's directory, another restore)
  show FILE          what a backup holds: index, term, digest, cluster, jobs; checks the digest

  --data DIR         restore: the data directory to write (created; must be empty)
  --id N             restore: this node's id, a member of SPEC
  --cluster SPEC     restore: the new cluster's members, as `run --cluster` takes them
  --restore-id NAME  restore: names this restore (required; the same on every member)
  --masters LIST, --ca, --cert, --key, --token
                     save: as for `status`; the identity must be admin
exit status: 0 on success, 1 on a failure (printed), 2 on a usage error";

/// What `snapshot` was asked to do.
pub enum SnapshotArgs {
    Save {
        file: PathBuf,
        conn: StatusArgs,
    },
    Restore {
        file: PathBuf,
        data: PathBuf,
        id: NodeId,
        spec: ClusterSpec,
        restore_id: String,
    },
    Show {
        file: PathBuf,
    },
}

impl SnapshotArgs {
    pub fn parse(args: &[String]) -> Result<SnapshotArgs, String> {
        let (cmd, file) = match (args.first(), args.get(1)) {
            (Some(c), Some(f)) if !f.starts_with("--") => (c.as_str(), PathBuf::from(f)),
            (Some(c), _) if ["save", "restore", "show"].contains(&c.as_str()) => {
                return Err(format!("snapshot {c}: missing FILE"))
            }
            (Some(c), _) => return Err(format!("unknown snapshot command {c:?}")),
            (None, _) => return Err("missing snapshot command (save, restore or show)".into()),
        };
        let rest = &args[2..];
        match cmd {
            "save" => Ok(SnapshotArgs::Save {
                file,
                conn: StatusArgs::parse(rest)?,
            }),
            "show" if rest.is_empty() => Ok(SnapshotArgs::Show { file }),
            "show" => Err(format!("snapshot show: unexpected {:?}", rest[0])),
            "restore" => {
                let (mut data, mut id, mut spec, mut restore_id) = (None, None, None, None);
                for (k, v) in crate::base::config::flag_pairs(rest, &[])? {
                    match k.as_str() {
                        "--data" => data = Some(PathBuf::from(v)),
                        "--id" => {
                            id = Some(
                                v.parse::<NodeId>()
                                    .map_err(|_| format!("--id: bad id {v:?}"))?,
                            )
                        }
                        "--cluster" => spec = Some(ClusterSpec::parse(&v)?),
                        "--restore-id" if !v.trim().is_empty() => restore_id = Some(v),
                        "--restore-id" => return Err("--restore-id: an empty name".into()),
                        _ => return Err(format!("unknown option {k}")),
                    }
                }
                let id = id.ok_or("--id is required")?;
                let spec = spec.ok_or("--cluster is required")?;
                if !spec.nodes.contains_key(&id) {
                    return Err(format!("node {id} is not in --cluster"));
                }
                Ok(SnapshotArgs::Restore {
                    file,
                    data: data.ok_or("--data is required")?,
                    id,
                    spec,
                    restore_id: restore_id.ok_or(
                        "--restore-id is required: a name for this restore, the same on every \
                         member restored from this file, new for every restore",
                    )?,
                })
            }
            other => Err(format!("unknown snapshot command {other:?}")),
        }
    }
}

/// Runs the command: 0 on success, 1 on a failure (printed).
pub fn snapshot(a: SnapshotArgs) -> i32 {
    let res = match a {
        SnapshotArgs::Save { file, conn } => save(&file, &conn),
        SnapshotArgs::Restore {
            file,
            data,
            id,
            spec,
            restore_id,
        } => restore(&file, &data, id, &spec, &restore_id),
        SnapshotArgs::Show { file } => show(&file),
    };
    crate::cmd::exit_status("xce-controller snapshot", res)
}

/// The bytes asked for per chunk.
const CHUNK: u32 = 4 << 20;
/// Whole saves started again after the primary changed (its cursor is gone: ESTALE).
const SAVE_TRIES: usize = 3;

fn ask(c: &xce::client::Client, s: SnapshotSave) -> Result<SnapshotChunk, String> {
    // Every status with its name (issue 36), and the primary's reason when it gave one.
    let explain = |code: i32| {
        let named = format!("status {code} {}", xce_proto::error::status_name(code));
        if let Some(d) = c.last_error().map(|r| r.detail).filter(|d| !d.is_empty()) {
            return format!("refused by the primary: {d} ({named})");
        }
        let why = match -code.abs() {
            x if x == -libc::ESTALE => "the primary changed".to_string(),
            x if x == -libc::EIO => {
                "the primary's state is not confirmed by a majority of the voters, or it could \
                 not write the snapshot (see its log)"
                    .to_string()
            }
            x if x == -libc::EBUSY => "two saves already run on the primary".to_string(),
            _ => xce_proto::strerror(code).to_string(),
        };
        format!("{why} ({named})")
    };
    match c.call(Op::SnapshotSave(s)) {
        Ok(r) if r.status < 0 => Err(explain(r.status)),
        Ok(r) => match r.data {
            ReplyData::SnapshotChunk(ch) => Ok(ch),
            _ => Err("an answer without a snapshot chunk".into()),
        },
        Err(Error::Errno(e)) => Err(explain(-e)),
        Err(e) => Err(explain(e.code())),
    }
}

/// One whole save into `tmp`; the first chunk's description.
fn save_once(c: &xce::client::Client, tmp: &Path) -> Result<SnapshotChunk, String> {
    use std::io::Write;
    let first = ask(
        c,
        SnapshotSave {
            cursor: 0,
            offset: 0,
            max_bytes: CHUNK,
        },
    )?;
    let mut f = backup::create_private(tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let mut at = 0u64;
    let mut chunk = first.clone();
    loop {
        if chunk.offset != at || chunk.cursor != first.cursor {
            return Err(format!("a chunk at {} when {at} was asked", chunk.offset));
        }
        f.write_all(&chunk.data)
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        at += chunk.data.len() as u64;
        if at >= first.total_bytes {
            break;
        }
        if chunk.data.is_empty() {
            return Err(format!(
                "the primary sent nothing at {at} of {}",
                first.total_bytes
            ));
        }
        chunk = ask(
            c,
            SnapshotSave {
                cursor: first.cursor,
                offset: at,
                max_bytes: CHUNK,
            },
        )?;
    }
    if at != first.total_bytes {
        return Err(format!("{at} bytes received of {}", first.total_bytes));
    }
    f.sync_all()
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    Ok(first)
}

fn save(file: &Path, conn: &StatusArgs) -> Result<(), String> {
    let c = crate::cmd::member::client(conn, "xce-controller snapshot save")?;
    let tmp = file.with_extension("tmp");
    let mut res = Err(String::new());
    for _ in 0..SAVE_TRIES {
        res = save_once(&c, &tmp);
        match &res {
            Err(e) if e.contains("primary changed") => continue,
            _ => break,
        }
    }
    c.close();
    let first = match res {
        Ok(f) => f,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    std::fs::rename(&tmp, file).map_err(|e| format!("{}: {e}", file.display()))?;
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    // Read back, and the digest recomputed from what was written.
    let h = verify(file)?;
    println!(
        "saved {}: state at index {} (term {}), {} jobs, {} bytes; digest {}; cluster {}; {} of \
         {} voters had this state",
        file.display(),
        first.index,
        first.term,
        h.jobs,
        first.total_bytes,
        digest::hex(&first.digest),
        h.cluster.as_deref().unwrap_or("(none yet)"),
        first.agreeing,
        first.voters
    );
    Ok(())
}

/// Why a backup file could not be read, for an operator (issue 36: "failed to fill whole
/// buffer" and "text is not UTF-8" named nothing).
fn unreadable(file: &Path, e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    let f = file.display();
    match e.kind() {
        K::NotFound | K::PermissionDenied | K::IsADirectory => format!("{f}: {e}"),
        // The readers say "truncated" where a length ran past the end.
        _ if e.kind() == K::UnexpectedEof || e.to_string().contains("truncated") => format!(
            "{f}: truncated: the file ends before the backup does (an interrupted copy or \
             save?); use a complete copy"
        ),
        _ => format!(
            "{f}: not a backup `xce-controller snapshot save` wrote, or damaged ({e}); check \
             the file's copy"
        ),
    }
}

/// Reads a whole backup and checks its state's digest against the one recorded.
fn read_checked(file: &Path) -> Result<(BackupHeader, State), String> {
    let (h, _, state) = backup::read(file).map_err(|e| unreadable(file, &e))?;
    let got = digest::hex(&digest::of(&state));
    if got != h.digest {
        return Err(format!(
            "{}: damaged: its state's digest is {got}, the one recorded {}",
            file.display(),
            h.digest
        ));
    }
    Ok((h, state))
}

/// [`read_checked`], the header only.
fn verify(file: &Path) -> Result<BackupHeader, String> {
    read_checked(file).map(|(h, _)| h)
}

fn show(file: &Path) -> Result<(), String> {
    let h = verify(file)?;
    println!(
        "backup {}\n  state at index {} (term {}, leader {}), {} jobs\n  digest {} (checked)\n  \
         cluster {} (restore epoch {})\n  {} of {} voters had this state\n  saved by node {} at \
         {} ms (its clock)\n  backup id {}",
        file.display(),
        h.index,
        h.term,
        h.leader,
        h.jobs,
        h.digest,
        h.cluster.as_deref().unwrap_or("(none yet)"),
        h.epoch,
        h.agreeing,
        h.voters,
        h.saved_by,
        h.saved_at_ms,
        h.backup_id
    );
    Ok(())
}

fn restore(
    file: &Path,
    data: &Path,
    id: NodeId,
    spec: &ClusterSpec,
    restore_id: &str,
) -> Result<(), String> {
    let (h, mut state) = read_checked(file)?;
    // C13 amended (issue 36): what restore writes is the node's user's only, as `run` makes it
    // (before, a restored directory was 0755 and its files 0644 until the node's first start).
    // SAFETY: umask(2) cannot fail and touches no memory.
    unsafe { libc::umask(0o077) };
    let backup_id = backup::unhex::<16>(&h.backup_id)
        .ok_or_else(|| format!("{}: a backup id that is not 16 bytes", file.display()))?;
    if data.exists() {
        let mut entries =
            std::fs::read_dir(data).map_err(|e| format!("{}: {e}", data.display()))?;
        if entries.next().is_some() {
            return Err(format!(
                "{}: not empty: restore writes a fresh data directory (move the old one away)",
                data.display()
            ));
        }
    }
    std::fs::create_dir_all(data).map_err(|e| format!("{}: {e}", data.display()))?;
    {
        // An empty directory made beforehand keeps no wider mode either.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(data, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("{}: {e}", data.display()))?;
    }
    let tag = ClusterTag::restored(&backup_id, restore_id, h.epoch);
    state.set_cluster(ClusterStamp {
        id: tag.id,
        epoch: tag.epoch,
    });
    let last: LogId = LogId::new(CommittedLeaderId::new(h.term, h.leader), h.index);
    let voters: std::collections::BTreeSet<NodeId> = spec.nodes.keys().copied().collect();
    let membership = Membership::new(vec![voters], spec.nodes.clone());
    let meta = SnapshotMeta {
        last_log_id: Some(last),
        last_membership: StoredMembership::new(Some(last), membership),
        snapshot_id: format!("restore-{}-{}", h.backup_id, tag.hex()),
    };
    let tmp = data.join("snapshot.restore.tmp");
    crate::sm::snapshot::View::of(meta, &state)
        .write(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    crate::sm::snapshot::install_file(&tmp, data)
        .map_err(|e| format!("{}: {e}", data.display()))?;
    let st = crate::raft::store::open_store(data)?;
    crate::raft::store::write_restored(&st, last, Vote::new(h.term, id), Belonging::Member(tag))?;
    drop(st);
    println!(
        "restored node {id} into {}: new cluster {} (restore epoch {}), state at index {} \
         ({} jobs, from cluster {}); start it with --cluster {} (every member restored from \
         this file with --restore-id {restore_id:?})",
        data.display(),
        tag.hex(),
        tag.epoch,
        h.index,
        state.job_count(),
        h.cluster.as_deref().unwrap_or("(none)"),
        crate::base::config::spec_text(&spec.nodes)
    );
    Ok(())
}
