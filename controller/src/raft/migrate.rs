//! Upgrade (C24): a data directory an earlier build wrote — its log, vote, purge point and
//! cluster in one `redb` database, `DIR/raft.redb` — is moved on its first start by this build
//! into the segmented log (`DIR/raft-log/`, `raft/segments.rs`) and the metadata file
//! (`DIR/raft.meta`, `raft/meta.rs`). The snapshot file is the same in both.
//!
//! Crash-safe by its order: `raft.meta` is made last, and its presence is what says the
//! directory is upgraded. Until then `raft.redb` is untouched and authoritative, so a crash at
//! any earlier step leaves the directory as the older build wrote it, and the next start does
//! the whole move again (whatever an earlier try left in `raft-log.upgrade/` or `raft-log/` is
//! removed first: nothing else writes there before `raft.meta` exists).
//!
//! 1. the database's entries after its purge point are written to `DIR/raft-log.upgrade/` (each
//!    write fsynced), which is then renamed to `DIR/raft-log/` (the directory fsynced);
//! 2. `raft.meta` is made with the database's vote, purge point, committed index and cluster
//!    (written beside, fsynced, renamed, the directory fsynced);
//! 3. `raft.redb` is replaced by a short text saying what happened ([`TOMBSTONE`]), which an
//!    older build's database refuses to open: it stops instead of starting as if its data were
//!    lost (and, all nodes at once, a new empty cluster). A fresh directory gets the same text.
//!    A crash before this step leaves a directory with both, read as upgraded: the next start
//!    replaces `raft.redb` then.

use std::path::{Path, PathBuf};

use redb::{Database, TableDefinition};

use crate::base::cluster_id::Belonging;
use crate::base::ids::{LogId, Vote};
use crate::raft::meta::{Meta, MetaFile};
use crate::raft::segments::{Segments, LOG_DIR};

/// The database file of earlier builds.
pub const DB_FILE: &str = "raft.redb";
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// Where the log is written before it is renamed into place.
const UPGRADE_DIR: &str = "raft-log.upgrade";
/// What `raft.redb` holds once the directory is upgraded (or was made by this build).
pub const TOMBSTONE: &str = "xce-controller: this data directory holds the segmented log \
(raft-log/ and raft.meta); an xce-controller build from before the segmented log cannot read it, \
and refuses to open this file.\n";
/// Bytes of entries per write while the log is moved.
const BATCH_BYTES: usize = 4 << 20;

/// Whether `raft.redb` is this build's text rather than a database.
fn is_tombstone(path: &Path) -> std::io::Result<bool> {
    let mut head = vec![0u8; 32];
    let f = std::fs::File::open(path)?;
    let n = crate::raft::meta::read_up_to(&f, &mut head)?;
    Ok(TOMBSTONE.as_bytes().starts_with(&head[..n]) && n > 0)
}

/// Writes [`TOMBSTONE`] as `DIR/raft.redb` (beside, fsynced, renamed, the directory fsynced).
pub fn write_tombstone(dir: &Path) -> std::io::Result<()> {
    let tmp = dir.join(format!("{DB_FILE}.tmp"));
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(TOMBSTONE.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(DB_FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

/// The earlier build's data, read whole.
struct Old {
    meta: Meta,
    /// (index, entry as stored) after the purge point.
    entries: Vec<(u64, Vec<u8>)>,
}

/// Why an earlier build's data directory could not be upgraded: each names its cause (the
/// node does not start; its data is left as it was).
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("open {}: {why}", path.display())]
    Open { path: PathBuf, why: String },
    /// redb could not read the earlier build's database (its text: redb's errors are large).
    #[error("{0}")]
    Db(String),
    /// A metadata value the earlier build wrote that does not parse.
    #[error("{key}: {source}")]
    Value {
        key: String,
        #[source]
        source: serde_json::Error,
    },
    /// A log entry that cannot be re-encoded.
    #[error("log entry {index}: {why}")]
    Entry { index: u64, why: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The earlier database was replaced by its tombstone, but the new metadata is missing.
    #[error(
        "{}: upgraded to the segmented log, but {} is missing",
        .0.display(),
        crate::raft::meta::META_FILE
    )]
    MetaMissing(PathBuf),
}

macro_rules! db_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for UpgradeError {
            fn from(e: $t) -> UpgradeError {
                UpgradeError::Db(e.to_string())
            }
        }
    )*};
}
db_errors!(redb::TransactionError, redb::TableError, redb::StorageError);

fn read_json<T: for<'a> serde::Deserialize<'a>>(
    t: &redb::ReadOnlyTable<&str, &[u8]>,
    key: &str,
) -> Result<Option<T>, UpgradeError> {
    match t.get(key)? {
        None => Ok(None),
        Some(v) => serde_json::from_slice(v.value())
            .map(Some)
            .map_err(|source| UpgradeError::Value {
                key: key.to_string(),
                source,
            }),
    }
}

fn read_old(path: &Path) -> Result<Old, UpgradeError> {
    let db = Database::open(path).map_err(|e| UpgradeError::Open {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let tx = db.begin_read()?;
    let meta = match tx.open_table(META) {
        Ok(t) => Meta {
            vote: read_json::<Vote>(&t, "vote")?,
            purged: read_json::<LogId>(&t, "purged")?,
            committed: read_json::<Option<LogId>>(&t, "committed")?.flatten(),
            cluster: read_json::<Belonging>(&t, "cluster")?,
        },
        Err(redb::TableError::TableDoesNotExist(_)) => Meta::default(),
        Err(e) => return Err(e.into()),
    };
    let after = meta.purged.map_or(0, |p| p.index + 1);
    let mut entries = Vec::new();
    match tx.open_table(LOG) {
        Ok(t) => {
            for item in t.range(after..)? {
                let (k, v) = item?;
                entries.push((k.value(), v.value().to_vec()));
            }
        }
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Old { meta, entries })
}

/// Moves the entries to `DIR/raft-log/` through `DIR/raft-log.upgrade/`, each re-encoded by
/// `recode`.
fn move_log(dir: &Path, old: &Old, recode: Recode) -> Result<(), UpgradeError> {
    let tmp = dir.join(UPGRADE_DIR);
    let _ = std::fs::remove_dir_all(&tmp);
    let mut segs = Segments::open(&tmp, old.meta.purged.map(|p| p.index))?;
    let mut batch: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut bytes = 0;
    for (i, (index, stored)) in old.entries.iter().enumerate() {
        let e = recode(stored).map_err(|why| UpgradeError::Entry { index: *index, why })?;
        bytes += e.len();
        batch.push((*index, e));
        if bytes >= BATCH_BYTES || i + 1 == old.entries.len() {
            segs.append(batch.iter().map(|(i, b)| (*i, b.as_slice())))?;
            batch.clear();
            bytes = 0;
        }
    }
    drop(segs);
    let log = dir.join(LOG_DIR);
    match std::fs::remove_dir_all(&log) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    std::fs::rename(&tmp, &log)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Re-encodes a stored entry of an earlier build in this build's encoding.
pub type Recode = fn(&[u8]) -> Result<Vec<u8>, String>;

/// Upgrades `dir` if an earlier build wrote it (see the module); returns what it did, for the
/// node's log. A directory already upgraded, or new, is left as it is.
pub fn upgrade(dir: &Path, recode: Recode) -> Result<Option<String>, UpgradeError> {
    let db = dir.join(DB_FILE);
    if dir.join(crate::raft::meta::META_FILE).exists() {
        // Upgraded (or made by this build): the last step, if a crash cut it short.
        if !db.exists() || !is_tombstone(&db)? {
            write_tombstone(dir)?;
        }
        return Ok(None);
    }
    if !db.exists() {
        return Ok(None);
    }
    if is_tombstone(&db)? {
        return Err(UpgradeError::MetaMissing(db));
    }
    let t0 = std::time::Instant::now();
    let old = read_old(&db)?;
    move_log(dir, &old, recode)?;
    MetaFile::create(dir, &old.meta)?;
    write_tombstone(dir)?;
    Ok(Some(format!(
        "upgraded its data directory: {} log entries moved from {DB_FILE} to {LOG_DIR}/ in {} ms",
        old.entries.len(),
        t0.elapsed().as_millis()
    )))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    /// An earlier build's `raft.redb`: `entries` in its log table (stored as given), and its
    /// metadata as that build saved it (JSON values).
    pub(crate) fn write_old(dir: &Path, entries: &[(u64, Vec<u8>)], meta: &Meta) {
        let db = Database::create(dir.join(DB_FILE)).expect("create");
        let tx = db.begin_write().expect("write");
        {
            let mut t = tx.open_table(LOG).expect("log");
            for (i, e) in entries {
                t.insert(*i, e.as_slice()).expect("insert");
            }
            let mut m = tx.open_table(META).expect("meta");
            let mut put = |k: &str, v: Vec<u8>| {
                m.insert(k, v.as_slice()).expect("meta insert");
            };
            if let Some(v) = meta.vote {
                put("vote", serde_json::to_vec(&v).unwrap());
            }
            if let Some(p) = meta.purged {
                put("purged", serde_json::to_vec(&p).unwrap());
            }
            put("committed", serde_json::to_vec(&meta.committed).unwrap());
            if let Some(c) = meta.cluster {
                put("cluster", serde_json::to_vec(&c).unwrap());
            }
        }
        tx.commit().expect("commit");
    }

    fn same_bytes(b: &[u8]) -> Result<Vec<u8>, String> {
        Ok(b.to_vec())
    }

    fn old_meta() -> Meta {
        Meta {
            vote: Some(Vote::new(3, 2)),
            purged: Some(id(2, 9)),
            committed: Some(id(3, 14)),
            cluster: Some(Belonging::Legacy),
        }
    }

    /// (index, bytes) of 10..=20: the entries after the purge point at 9.
    fn old_entries() -> Vec<(u64, Vec<u8>)> {
        (10..=20u64)
            .map(|i| (i, vec![i as u8; i as usize]))
            .collect()
    }

    /// Reads the upgraded directory back: its metadata, its log, the tombstone.
    fn check_upgraded(dir: &Path) {
        let meta = MetaFile::open(dir).unwrap().expect("raft.meta");
        assert_eq!(meta.get(), &old_meta());
        let segs = Segments::open(&dir.join(LOG_DIR), Some(9)).unwrap();
        assert_eq!(segs.read(0, None).unwrap(), old_entries());
        assert!(is_tombstone(&dir.join(DB_FILE)).unwrap());
        assert!(!dir.join(UPGRADE_DIR).exists());
        assert!(
            Database::open(dir.join(DB_FILE)).is_err(),
            "an older build's open"
        );
    }

    /// The upgrade moves the log and the metadata, and leaves a directory an older build
    /// refuses; a second start finds nothing to do.
    #[test]
    fn an_older_builds_directory_is_upgraded_once() {
        let dir = tempfile::tempdir().unwrap();
        write_old(dir.path(), &old_entries(), &old_meta());
        let said = upgrade(dir.path(), same_bytes).unwrap().expect("upgraded");
        assert!(said.contains("11 log entries"), "{said}");
        check_upgraded(dir.path());
        assert_eq!(upgrade(dir.path(), same_bytes).unwrap(), None);
        check_upgraded(dir.path());
    }

    /// A crash at any step of the upgrade — its directory as each step leaves it — and the
    /// next start completes it with the same result.
    #[test]
    fn an_upgrade_cut_short_at_any_step_is_completed_by_the_next_start() {
        // (what the crash left)
        type Step = fn(&Path);
        let steps: [(&str, Step); 4] = [
            ("a partial log.upgrade/", |d| {
                let mut s = Segments::open(&d.join(UPGRADE_DIR), Some(9)).unwrap();
                s.append([(10, &[1u8][..])]).unwrap();
            }),
            ("log.upgrade/ whole, not renamed", |d| {
                move_log(d, &read_old(&d.join(DB_FILE)).unwrap(), same_bytes).unwrap();
                std::fs::rename(d.join(LOG_DIR), d.join(UPGRADE_DIR)).unwrap();
            }),
            ("raft-log/ in place, no raft.meta", |d| {
                move_log(d, &read_old(&d.join(DB_FILE)).unwrap(), same_bytes).unwrap();
            }),
            ("raft.meta made, raft.redb still the database", |d| {
                let old = read_old(&d.join(DB_FILE)).unwrap();
                move_log(d, &old, same_bytes).unwrap();
                MetaFile::create(d, &old.meta).unwrap();
            }),
        ];
        for (what, left) in steps {
            let dir = tempfile::tempdir().unwrap();
            write_old(dir.path(), &old_entries(), &old_meta());
            left(dir.path());
            upgrade(dir.path(), same_bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
            check_upgraded(dir.path());
        }
    }

    /// `raft.meta` lost beside an upgraded directory: refused, not started blank.
    #[test]
    fn an_upgraded_directory_without_its_metadata_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_old(dir.path(), &old_entries(), &old_meta());
        upgrade(dir.path(), same_bytes).unwrap();
        std::fs::remove_file(dir.path().join(crate::raft::meta::META_FILE)).unwrap();
        let e = upgrade(dir.path(), same_bytes).unwrap_err();
        assert!(matches!(e, UpgradeError::MetaMissing(_)), "{e}");
        assert!(e.to_string().contains("is missing"), "{e}");
    }
}
