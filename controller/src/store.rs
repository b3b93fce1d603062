//! Durable Raft storage (C1): log, vote, committed index and the latest snapshot live in one
//! `redb` database per node (`DIR/raft.redb`); every write is a committed (fsynced)
//! transaction, so `kill -9` and a restart with the same data directory bring the node back.
//!
//! The state machine itself lives in memory: on start it is restored from the stored
//! snapshot and openraft re-applies the committed log after it.

// openraft's StorageError is large and imposed by its traits; boxing it here would only move
// the conversion elsewhere.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, RwLock};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine};
use openraft::{AnyError, EntryPayload, RaftLogReader, RaftSnapshotBuilder, StorageIOError};
use redb::{Database, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::state::{Outcome, State};
use crate::types::{
    Entry, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig, Vote,
};

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

const K_VOTE: &str = "vote";
const K_COMMITTED: &str = "committed";
const K_PURGED: &str = "purged";
const K_SNAPSHOT: &str = "snapshot";

fn read_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageError::IO {
        source: StorageIOError::read(AnyError::new(&e)),
    }
}

fn write_err(e: impl std::error::Error + 'static) -> StorageError {
    StorageError::IO {
        source: StorageIOError::write(AnyError::new(&e)),
    }
}

/// Opens (creating if needed) the node's database with both tables present.
pub fn open_db(dir: &Path) -> Result<Arc<Database>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let path = dir.join("raft.redb");
    let db = Database::create(&path).map_err(|e| format!("open {}: {e}", path.display()))?;
    let tx = db.begin_write().map_err(|e| e.to_string())?;
    {
        tx.open_table(LOG).map_err(|e| e.to_string())?;
        tx.open_table(META).map_err(|e| e.to_string())?;
    }
    tx.commit().map_err(|e| e.to_string())?;
    Ok(Arc::new(db))
}

/// Runs a blocking database write without stalling the other tasks of this worker thread.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn meta_get<T: for<'a> Deserialize<'a>>(
    db: &Database,
    key: &str,
) -> Result<Option<T>, StorageError> {
    let tx = db.begin_read().map_err(read_err)?;
    let t = tx.open_table(META).map_err(read_err)?;
    match t.get(key).map_err(read_err)? {
        None => Ok(None),
        Some(v) => serde_json::from_slice(v.value())
            .map(Some)
            .map_err(read_err),
    }
}

fn meta_put<T: Serialize>(db: &Database, key: &str, value: &T) -> Result<(), StorageError> {
    let bytes = serde_json::to_vec(value).map_err(write_err)?;
    blocking(|| {
        let tx = db.begin_write().map_err(write_err)?;
        {
            let mut t = tx.open_table(META).map_err(write_err)?;
            t.insert(key, bytes.as_slice()).map_err(write_err)?;
        }
        tx.commit().map_err(write_err)
    })
}

// ---------------------------------------------------------------------------------------
// Log

/// The Raft log, vote and committed index. Cheap to clone (readers share the database).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
}

impl LogStore {
    pub fn new(db: Arc<Database>) -> LogStore {
        LogStore { db }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let tx = self.db.begin_read().map_err(read_err)?;
        let t = tx.open_table(LOG).map_err(read_err)?;
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s + 1,
            Bound::Unbounded => 0,
        };
        let mut out = Vec::new();
        for item in t.range(start..).map_err(read_err)? {
            let (k, v) = item.map_err(read_err)?;
            if !range.contains(&k.value()) {
                break;
            }
            out.push(serde_json::from_slice(v.value()).map_err(read_err)?);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId> = meta_get(&self.db, K_PURGED)?;
        let tx = self.db.begin_read().map_err(read_err)?;
        let t = tx.open_table(LOG).map_err(read_err)?;
        let last = match t.last().map_err(read_err)? {
            Some((_, v)) => {
                let e: Entry = serde_json::from_slice(v.value()).map_err(read_err)?;
                Some(e.log_id)
            }
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        meta_put(&self.db, K_VOTE, vote)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        meta_get(&self.db, K_VOTE)
    }

    /// The committed index only saves re-applying after a restart (openraft learns it again
    /// from the leader), so it is written without an fsync of its own: it becomes durable with
    /// the next log append. One fsync per commit on every node was half the cost of a write.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(&committed).map_err(write_err)?;
        blocking(|| {
            let mut tx = self.db.begin_write().map_err(write_err)?;
            tx.set_durability(redb::Durability::None);
            {
                let mut t = tx.open_table(META).map_err(write_err)?;
                t.insert(K_COMMITTED, bytes.as_slice()).map_err(write_err)?;
            }
            tx.commit().map_err(write_err)
        })
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(meta_get::<Option<LogId>>(&self.db, K_COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut encoded = Vec::new();
        for e in entries {
            encoded.push((e.log_id.index, serde_json::to_vec(&e).map_err(write_err)?));
        }
        let res = blocking(|| {
            let tx = self.db.begin_write().map_err(write_err)?;
            {
                let mut t = tx.open_table(LOG).map_err(write_err)?;
                for (idx, bytes) in &encoded {
                    t.insert(*idx, bytes.as_slice()).map_err(write_err)?;
                }
            }
            tx.commit().map_err(write_err)
        });
        // The commit is durable (fsynced) when it returns: only then report the flush.
        match &res {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        res
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        blocking(|| {
            let tx = self.db.begin_write().map_err(write_err)?;
            {
                let mut t = tx.open_table(LOG).map_err(write_err)?;
                t.retain_in(log_id.index.., |_, _| false)
                    .map_err(write_err)?;
            }
            tx.commit().map_err(write_err)
        })
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(&log_id).map_err(write_err)?;
        blocking(|| {
            let tx = self.db.begin_write().map_err(write_err)?;
            {
                let mut m = tx.open_table(META).map_err(write_err)?;
                m.insert(K_PURGED, bytes.as_slice()).map_err(write_err)?;
                let mut t = tx.open_table(LOG).map_err(write_err)?;
                t.retain_in(..=log_id.index, |_, _| false)
                    .map_err(write_err)?;
            }
            tx.commit().map_err(write_err)
        })
    }
}

// ---------------------------------------------------------------------------------------
// State machine

/// What has been applied: readers take the read lock, `apply` the write lock (never held
/// across an await).
#[derive(Debug, Default)]
pub struct Applied {
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
    pub state: State,
}

pub type SharedApplied = Arc<RwLock<Applied>>;

/// A snapshot as stored in the database.
#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    /// The JSON of [`State`].
    data: String,
}

/// The state machine: the in-memory [`Applied`] state plus its persisted snapshot.
pub struct StateMachineStore {
    id: u64,
    db: Arc<Database>,
    pub applied: SharedApplied,
}

impl StateMachineStore {
    /// Restores the state from the stored snapshot, if any.
    pub fn open(id: u64, db: Arc<Database>) -> Result<StateMachineStore, StorageError> {
        let mut applied = Applied::default();
        if let Some(snap) = meta_get::<StoredSnapshot>(&db, K_SNAPSHOT)? {
            applied.state = serde_json::from_str(&snap.data).map_err(read_err)?;
            applied.last_applied = snap.meta.last_log_id;
            applied.membership = snap.meta.last_membership.clone();
        }
        Ok(StateMachineStore {
            id,
            db,
            applied: Arc::new(RwLock::new(applied)),
        })
    }
}

/// Builds snapshots from the shared state.
pub struct SnapshotBuilder {
    db: Arc<Database>,
    applied: SharedApplied,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let (meta, data) = {
            let a = self.applied.read().expect("state lock");
            let data = serde_json::to_string(&a.state).map_err(write_err)?;
            let id = match a.last_applied {
                Some(l) => format!("{}-{}-{}", l.leader_id, l.index, crate::now_ms()),
                None => format!("none-{}", crate::now_ms()),
            };
            let meta = SnapshotMeta {
                last_log_id: a.last_applied,
                last_membership: a.membership.clone(),
                snapshot_id: id,
            };
            (meta, data)
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        meta_put(&self.db, K_SNAPSHOT, &stored)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(stored.data.into_bytes())),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let a = self.applied.read().expect("state lock");
        Ok((a.last_applied, a.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Vec<Outcome>>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut a = self.applied.write().expect("state lock");
        let mut out = Vec::new();
        for e in entries {
            a.last_applied = Some(e.log_id);
            out.push(match e.payload {
                EntryPayload::Blank => Vec::new(),
                EntryPayload::Normal(batch) => batch.0.iter().map(|p| a.state.apply(p)).collect(),
                EntryPayload::Membership(m) => {
                    a.membership = StoredMembership::new(Some(e.log_id), m);
                    Vec::new()
                }
            });
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            db: self.db.clone(),
            applied: self.applied.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = String::from_utf8(snapshot.into_inner()).map_err(read_err)?;
        let state: State = serde_json::from_str(&data).map_err(read_err)?;
        meta_put(
            &self.db,
            K_SNAPSHOT,
            &StoredSnapshot {
                meta: meta.clone(),
                data,
            },
        )?;
        let mut a = self.applied.write().expect("state lock");
        a.state = state;
        a.last_applied = meta.last_log_id;
        a.membership = meta.last_membership.clone();
        eprintln!("node {}: installed snapshot {}", self.id, meta.snapshot_id);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        Ok(
            meta_get::<StoredSnapshot>(&self.db, K_SNAPSHOT)?.map(|s| Snapshot {
                meta: s.meta,
                snapshot: Box::new(Cursor::new(s.data.into_bytes())),
            }),
        )
    }
}
