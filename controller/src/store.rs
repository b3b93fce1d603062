//! Durable Raft storage (C1): log, vote, committed index and the latest snapshot live in one
//! `redb` database per node (`DIR/raft.redb`); every write is a committed (fsynced)
//! transaction, so `kill -9` and a restart with the same data directory bring the node back.
//!
//! The state machine itself lives in memory: on start it is restored from the snapshot file
//! (`DIR/snapshot.bin`, see `snapshot.rs`) and openraft re-applies the committed log after it.

// openraft's StorageError is large and imposed by its traits; boxing it here would only move
// the conversion elsewhere.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine};
use openraft::{AnyError, EntryPayload, RaftLogReader, RaftSnapshotBuilder, StorageIOError};
use redb::{Database, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::snapshot;
use crate::state::{Outcome, State};
use crate::types::{
    Entry, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig, Vote,
};

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

const K_VOTE: &str = "vote";
const K_COMMITTED: &str = "committed";
const K_PURGED: &str = "purged";
/// redb's page cache: the database holds only the log since the last snapshot, vote and
/// committed index (the snapshot is a file of its own), so a small cache is enough. redb's
/// default (1 GiB) let the log's pages fill the controller's memory.
const DB_CACHE_BYTES: usize = 32 << 20;
/// Bound on sending and installing one snapshot (openraft's default, 200 ms, is far too
/// short for a table of 10^6 jobs: a follower would never catch up).
pub const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 120_000;

/// A storage error stops this node's Raft (openraft treats it as fatal): say why first.
fn read_err(e: impl std::error::Error + 'static) -> StorageError {
    eprintln!("storage read error: {e}");
    StorageError::IO {
        source: StorageIOError::read(AnyError::new(&e)),
    }
}

fn write_err(e: impl std::error::Error + 'static) -> StorageError {
    eprintln!("storage write error: {e}");
    StorageError::IO {
        source: StorageIOError::write(AnyError::new(&e)),
    }
}

/// Opens (creating if needed) the node's database with both tables present.
pub fn open_db(dir: &Path) -> Result<Arc<Database>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let path = dir.join("raft.redb");
    let db = Database::builder()
        .set_cache_size(DB_CACHE_BYTES)
        .create(&path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    let tx = db.begin_write().map_err(|e| e.to_string())?;
    {
        tx.open_table(LOG).map_err(|e| e.to_string())?;
        tx.open_table(META).map_err(|e| e.to_string())?;
    }
    tx.commit().map_err(|e| e.to_string())?;
    Ok(Arc::new(db))
}

/// Whether the data directory holds nothing of a Raft node: no log entry, no purge point, no
/// vote, no snapshot (C12: a brand-new node, or one whose data was lost).
pub fn is_blank(db: &Database, dir: &Path) -> Result<bool, String> {
    let tx = db.begin_read().map_err(|e| e.to_string())?;
    let log = tx.open_table(LOG).map_err(|e| e.to_string())?;
    let meta = tx.open_table(META).map_err(|e| e.to_string())?;
    let no_log = log.first().map_err(|e| e.to_string())?.is_none();
    let no_vote = meta.get(K_VOTE).map_err(|e| e.to_string())?.is_none();
    let no_purge = meta.get(K_PURGED).map_err(|e| e.to_string())?.is_none();
    Ok(no_log && no_vote && no_purge && !snapshot::current_path(dir).exists())
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

    /// Not saved (openraft's default): the committed index only spares re-applying after a
    /// restart, and the leader tells it again within a heartbeat. Saving it cost every node
    /// one fsync per commit, half the cost of a write. (Saving it without an fsync — redb
    /// `Durability::None` — lost an acknowledged job when the whole cluster was killed and
    /// restarted: scenario S5.) A value an older version saved is still read.
    async fn save_committed(&mut self, _committed: Option<LogId>) -> Result<(), StorageError> {
        Ok(())
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
        let started = std::time::Instant::now();
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
        crate::metrics::fsync(started.elapsed());
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

/// Raft's snapshot data: an open snapshot file (see [`crate::snapshot`]). A snapshot being
/// sent is read from the current file; one being received is written to a temporary file in
/// the data directory and becomes the current one when installed.
#[derive(Debug)]
pub struct SnapFile {
    pub path: PathBuf,
    pub file: std::fs::File,
}

impl SnapFile {
    /// A new, empty temporary file in `dir` to receive a snapshot into.
    pub fn receive_into(dir: &Path) -> std::io::Result<SnapFile> {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = dir.join(format!(
            "snapshot.recv-{}-{}.tmp",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        Ok(SnapFile { path, file })
    }

    fn open(path: PathBuf) -> std::io::Result<SnapFile> {
        let file = std::fs::File::open(&path)?;
        Ok(SnapFile { path, file })
    }
}

/// The state machine: the in-memory [`Applied`] state plus its snapshot file.
pub struct StateMachineStore {
    id: u64,
    dir: PathBuf,
    pub applied: SharedApplied,
    /// C14: every handover entry applied (to whom, its log id, the leader's time).
    pub handovers: Option<tokio::sync::mpsc::UnboundedSender<crate::handover::Applied>>,
}

impl StateMachineStore {
    /// Restores the state from the snapshot file, if any; removes leftover temporaries.
    pub fn open(id: u64, dir: &Path) -> Result<StateMachineStore, StorageError> {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().ends_with(".tmp") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let mut applied = Applied::default();
        let path = snapshot::current_path(dir);
        if path.exists() {
            let t0 = std::time::Instant::now();
            let (meta, state) = snapshot::read(&path).map_err(read_err)?;
            eprintln!(
                "node {id}: loaded snapshot {} ({} jobs) in {} ms",
                meta.snapshot_id,
                state.job_count(),
                t0.elapsed().as_millis()
            );
            applied.state = state;
            applied.last_applied = meta.last_log_id;
            applied.membership = meta.last_membership.clone();
        }
        Ok(StateMachineStore {
            id,
            dir: dir.to_path_buf(),
            applied: Arc::new(RwLock::new(applied)),
            handovers: None,
        })
    }
}

/// Builds snapshots from the shared state.
pub struct SnapshotBuilder {
    id: u64,
    dir: PathBuf,
    applied: SharedApplied,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        // Under the lock only the O(1) part: the job table is shared, not copied.
        let view = {
            let a = self.applied.read().expect("state lock");
            let id = match a.last_applied {
                Some(l) => format!("{}-{}-{}", l.leader_id, l.index, crate::now_ms()),
                None => format!("none-{}", crate::now_ms()),
            };
            let meta = SnapshotMeta {
                last_log_id: a.last_applied,
                last_membership: a.membership.clone(),
                snapshot_id: id,
            };
            snapshot::View::of(meta, &a.state)
        };
        let (dir, id) = (self.dir.clone(), self.id);
        // Writing (and fsyncing) a large table takes a while: off the runtime's threads.
        let meta = tokio::task::spawn_blocking(move || -> std::io::Result<SnapshotMeta> {
            let t0 = std::time::Instant::now();
            static BUILDS: AtomicU64 = AtomicU64::new(0);
            let tmp = dir.join(format!(
                "snapshot.build-{}-{}.tmp",
                std::process::id(),
                BUILDS.fetch_add(1, Ordering::Relaxed)
            ));
            let bytes = view.write(&tmp)?;
            snapshot::install_file(&tmp, &dir)?;
            eprintln!(
                "node {id}: wrote snapshot {} ({bytes} bytes) in {} ms",
                view.meta.snapshot_id,
                t0.elapsed().as_millis()
            );
            Ok(view.meta.clone())
        })
        .await
        .map_err(|e| write_err(std::io::Error::other(e.to_string())))?
        .map_err(write_err)?;
        let file = SnapFile::open(snapshot::current_path(&self.dir)).map_err(read_err)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(file),
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
                EntryPayload::Normal(batch) => {
                    if let Some(tx) = &self.handovers {
                        crate::handover::note(tx, e.log_id, &batch);
                    }
                    batch.0.iter().map(|p| a.state.apply(p)).collect()
                }
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
            id: self.id,
            dir: self.dir.clone(),
            applied: self.applied.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapFile>, StorageError> {
        Ok(Box::new(
            SnapFile::receive_into(&self.dir).map_err(write_err)?,
        ))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<SnapFile>,
    ) -> Result<(), StorageError> {
        let (dir, id) = (self.dir.clone(), self.id);
        let t0 = std::time::Instant::now();
        let state = tokio::task::spawn_blocking(move || -> std::io::Result<State> {
            let SnapFile { path, file } = *snapshot;
            file.sync_all()?;
            drop(file);
            let (_, state) = snapshot::read(&path)?;
            snapshot::install_file(&path, &dir)?;
            Ok(state)
        })
        .await
        .map_err(|e| read_err(std::io::Error::other(e.to_string())))?
        .map_err(read_err)?;
        let jobs = state.job_count();
        let mut a = self.applied.write().expect("state lock");
        a.state = state;
        a.last_applied = meta.last_log_id;
        a.membership = meta.last_membership.clone();
        eprintln!(
            "node {id}: installed snapshot {} ({jobs} jobs) in {} ms",
            meta.snapshot_id,
            t0.elapsed().as_millis()
        );
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        let path = snapshot::current_path(&self.dir);
        if !path.exists() {
            return Ok(None);
        }
        let meta = snapshot::read_meta(&path).map_err(read_err)?;
        let file = SnapFile::open(path).map_err(read_err)?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(file),
        }))
    }
}

/// Proposals since the last snapshot that trigger the next one: at least `min_writes`, and at
/// least a quarter of the table, so the log on disk stays within about a quarter of the
/// snapshot's size and writing a snapshot costs O(1) per write on average.
pub fn snapshot_due(since_last: u64, jobs: usize, min_writes: u64) -> bool {
    since_last >= min_writes.max(jobs as u64 / 4)
}

/// Triggers snapshots by [`snapshot_due`] (openraft's own policy counts entries, and one
/// entry may hold hundreds of writes).
pub async fn snapshot_trigger(raft: crate::types::Raft, applied: SharedApplied, min_writes: u64) {
    let mut last = applied.read().expect("state lock").state.applied_count();
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    loop {
        tick.tick().await;
        let (now, jobs) = {
            let a = applied.read().expect("state lock");
            (a.state.applied_count(), a.state.job_count())
        };
        if now < last {
            // A snapshot from the leader replaced the state.
            last = now;
        }
        if snapshot_due(now - last, jobs, min_writes) {
            if raft.trigger().snapshot().await.is_err() {
                return;
            }
            last = now;
        }
    }
}
