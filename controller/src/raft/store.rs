//! Durable Raft storage (C1, C24): the log in segment files (`DIR/raft-log/`, `raft/segments.rs`),
//! the vote, the purge point and the cluster in a metadata file (`DIR/raft.meta`, `raft/meta.rs`).
//! Every write is fsynced before it is reported, so `kill -9` and a restart with the same data
//! directory bring the node back; the log store's size follows the unpurged log (a purge deletes
//! whole segments, in the background). A directory an earlier build wrote (`raft.redb`) is moved
//! into this form on the first start (`raft/migrate.rs`).
//!
//! The state machine itself lives in memory: on start it is restored from the snapshot file
//! (`DIR/snapshot.bin`, see `sm/snapshot.rs`) and openraft re-applies the committed log after it.

// openraft's StorageError is large and imposed by its traits; boxing it here would only move
// the conversion elsewhere.
#![allow(clippy::result_large_err)]

use std::collections::VecDeque;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine};
use openraft::{AnyError, EntryPayload, RaftLogReader, RaftSnapshotBuilder, StorageIOError};

use crate::base::clock::now_ms;
use crate::base::cluster_id::Belonging;
use crate::base::ids::{LogId, SnapshotMeta, StorageError, StoredMembership, Vote};
use crate::raft::digests::Digests;
use crate::raft::meta::{Meta, MetaFile, META_FILE};
use crate::raft::segments::{Segments, LOG_DIR};
use crate::raft::types::{Entry, Snapshot, TypeConfig};
use crate::sm::entry::Batch;
use crate::sm::snapshot::{self, SnapFile};
use crate::sm::state::{ClusterStamp, Outcome, State};

/// Bound on sending and installing one snapshot (openraft's default, 200 ms, is far too
/// short for a table of 10^6 jobs: a follower would never catch up).
pub const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 120_000;

/// A storage error stops this node's Raft (openraft treats it as fatal); where it is returned
/// to openraft it is also the node's storage fault (C21, [`noted`]), which names the file.
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

/// C21: a failed storage operation `op` on `file` is this node's storage fault
/// (`base/fault.rs`: the node stops serving and voting and exits); returns `res` as it was.
fn noted<T>(
    op: &'static str,
    file: &Path,
    res: Result<T, StorageError>,
) -> Result<T, StorageError> {
    if let Err(e) = &res {
        crate::base::fault::record(op, file, e);
    }
    res
}

/// A storage failpoint (`base/failpoints.rs`) as a write error.
fn failpoint(name: &str) -> Result<(), StorageError> {
    crate::base::failpoints::storage(name).map_err(write_err)
}

/// The node's durable store, opened: the metadata file and the log's segments, shared by the
/// [`LogStore`]'s clones and what the node records beside them (C20's cluster).
#[derive(Clone)]
pub struct Store {
    dir: PathBuf,
    meta: Arc<Mutex<MetaFile>>,
    segs: Arc<Mutex<Segments>>,
}

/// What a data directory's store takes on disk (C24): the log's segments, the metadata file,
/// and what an older build's `raft.redb` still holds — everything but the snapshot and the
/// small markers. Bytes allocated (st_blocks).
pub fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.blocks() * 512);
    let segs: u64 = std::fs::read_dir(dir.join(LOG_DIR))
        .map(|rd| rd.flatten().map(|e| size(&e.path())).sum())
        .unwrap_or(0);
    segs + size(&dir.join(META_FILE)) + size(&dir.join(crate::raft::migrate::DB_FILE))
}

/// Why the node's store could not be opened: each names its directory and cause.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The log's segments or metadata cannot be read or made.
    #[error("{}: {source}", path.display())]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An earlier build's directory that cannot be upgraded.
    #[error("{0}")]
    Upgrade(#[from] crate::raft::migrate::UpgradeError),
}

impl From<OpenError> for String {
    fn from(e: OpenError) -> String {
        e.to_string()
    }
}

/// Opens (making if needed) the node's store in `dir`, upgrading a directory an earlier build
/// wrote (`raft/migrate.rs`, said in the node's log).
pub fn open_store(dir: &Path) -> Result<Store, OpenError> {
    std::fs::create_dir_all(dir).map_err(|source| OpenError::Create {
        path: dir.to_path_buf(),
        source,
    })?;
    let shown = |source: std::io::Error| OpenError::Dir {
        path: dir.to_path_buf(),
        source,
    };
    if let Some(done) = crate::raft::migrate::upgrade(dir, recode)? {
        eprintln!("{done}");
    }
    let meta = match MetaFile::open(dir).map_err(shown)? {
        Some(m) => m,
        None => {
            // A new directory: the metadata first, then the text that refuses older builds
            // (a crash between the two: `migrate::upgrade` writes it at the next start).
            let m = MetaFile::create(dir, &Meta::default()).map_err(shown)?;
            crate::raft::migrate::write_tombstone(dir).map_err(shown)?;
            m
        }
    };
    let purged = meta.get().purged.map(|p| p.index);
    let segs = Segments::open(&dir.join(LOG_DIR), purged).map_err(shown)?;
    Ok(Store {
        dir: dir.to_path_buf(),
        meta: Arc::new(Mutex::new(meta)),
        segs: Arc::new(Mutex::new(segs)),
    })
}

/// An earlier build's stored entry in this build's encoding (the upgrade's re-encoding).
fn recode(stored: &[u8]) -> Result<Vec<u8>, String> {
    let e = decode_entry(stored).map_err(|e| e.to_string())?;
    encode_entry(&e).map_err(|e| e.to_string())
}

impl Store {
    fn meta(&self) -> std::sync::MutexGuard<'_, MetaFile> {
        self.meta.lock().expect("raft metadata lock")
    }

    fn segs(&self) -> std::sync::MutexGuard<'_, Segments> {
        self.segs.lock().expect("log segments lock")
    }

    fn meta_path(&self) -> PathBuf {
        self.dir.join(META_FILE)
    }

    /// Saves the metadata changed by `f` (fsynced; off the runtime's queue).
    fn update_meta(&self, f: impl FnOnce(&mut Meta)) -> Result<(), StorageError> {
        blocking(|| self.meta().update(f)).map_err(write_err)
    }
}

/// Whether the data directory holds nothing of a Raft node: no log entry, no purge point, no
/// vote, no snapshot (C12: a brand-new node, or one whose data was lost).
pub fn is_blank(store: &Store, dir: &Path) -> Result<bool, String> {
    let no_log = store.segs().last_index().is_none();
    let m = store.meta().get().clone();
    Ok(no_log && m.vote.is_none() && m.purged.is_none() && !snapshot::current_path(dir).exists())
}

/// C1 with C12: whether the log was purged past the state the node can rebuild — its purge
/// point beyond its snapshot's last entry (or no snapshot at all). openraft purges the log
/// beside the state machine's install of a snapshot it received, so a crash between the two
/// leaves a purge point the snapshot file never caught up with: the entries in between are
/// gone, the state cannot be rebuilt, and openraft refuses the store at every start. `Some`:
/// why, for the log line.
pub fn torn_install(store: &Store, dir: &Path) -> Result<Option<String>, String> {
    let Some(purged) = store.meta().get().purged else {
        return Ok(None);
    };
    let path = snapshot::current_path(dir);
    let snap = if path.exists() {
        snapshot::read_meta(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .last_log_id
    } else {
        None
    };
    if snap.is_some_and(|s| s.index >= purged.index) {
        return Ok(None);
    }
    Ok(Some(format!(
        "its log is purged up to {purged} but its snapshot holds {}",
        snap.map_or("nothing".to_string(), |s| s.to_string())
    )))
}

/// Sets aside what [`torn_install`] found unusable: the log, the metadata and the snapshot
/// files go (each fsynced away with the directory), as a lost disk would take them, so the
/// node starts without data and C12 (fifth round) makes that safe — it votes for no one and
/// counts for no quorum until it caught up from a leader every other voter confirms. Whatever
/// it acknowledged before the crash is held by the quorum that committed it, exactly as when a
/// disk is lost. Other files in the directory (an operator's log file) stay.
pub fn set_aside(dir: &Path) -> Result<(), String> {
    let shown = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let log = dir.join(LOG_DIR);
    if log.exists() {
        std::fs::remove_dir_all(&log).map_err(|e| shown(&log, e))?;
    }
    for f in [
        dir.join(crate::raft::meta::META_FILE),
        dir.join(crate::raft::migrate::DB_FILE),
        snapshot::current_path(dir),
    ] {
        if f.exists() {
            std::fs::remove_file(&f).map_err(|e| shown(&f, e))?;
        }
    }
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| shown(dir, e))
}

/// C20: what the data directory says of the node's cluster. Absent in a blank directory: it
/// becomes [`Belonging::Pending`] (saved, so a node that crashes before it learnt its
/// cluster's id still takes it); absent beside data: written by an earlier build
/// ([`Belonging::Legacy`]).
pub fn open_belonging(store: &Store, blank: bool) -> Result<Belonging, String> {
    let recorded = store.meta().get().cluster;
    match recorded {
        Some(b) => Ok(b),
        None if blank => {
            save_belonging(store, Belonging::Pending)?;
            Ok(Belonging::Pending)
        }
        None => Ok(Belonging::Legacy),
    }
}

/// C20: saves the node's [`Belonging`] (fsynced).
pub fn save_belonging(store: &Store, b: Belonging) -> Result<(), String> {
    store
        .update_meta(|m| m.cluster = Some(b))
        .map_err(|e| e.to_string())
}

/// C20, `snapshot restore`: a fresh data directory's store for a node restored from a
/// snapshot at `last`: the log is empty and purged up to `last` (so it continues after the
/// snapshot), the vote is this node's own in `last`'s term (not committed: the restored
/// cluster's first leader is elected in a higher term, and its entries follow `last`'s), and
/// the cluster is the restored one.
pub fn write_restored(
    store: &Store,
    last: LogId,
    vote: Vote,
    cluster: Belonging,
) -> Result<(), String> {
    store
        .update_meta(|m| {
            m.purged = Some(last);
            m.vote = Some(vote);
            m.cluster = Some(cluster);
        })
        .map_err(|e| e.to_string())
}

/// Runs a blocking disk write without stalling the other tasks of this worker thread
/// (on the controller's multi-threaded runtime; elsewhere, directly).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Bytes of the leader's appends handed to the [`Flusher`] and not yet on disk beyond which
/// the next append waits (it always may when none is pending). A primary whose disk stalls
/// goes on leading on its followers' disks — Raft-safe, see the flusher — but not with an
/// unbounded queue in memory: once this much waits, its Raft core waits too, its heartbeats
/// stop, and the standbys elect another primary. 16 MiB is ≈ 250 of the largest batched entries
/// ([`crate::raft::propose::MAX_BATCH_BYTES`]), about a second of writes at full speed here.
const MAX_PENDING_FLUSH_BYTES: usize = 16 << 20;

/// Appends entries (index, stored bytes) to the log: one write, one `fdatasync`
/// (`raft/segments.rs`). Returns the bytes it added to the log.
///
/// A follower's append runs it on the Raft core's own thread, not through [`blocking`] (P11):
/// openraft's core waits for a follower's flush before it does anything else, so moving the
/// commit elsewhere frees nothing on the write path, while `block_in_place` hands the worker's
/// queue to another thread and back on every append — measured ≈ 100 µs of a ≈ 300 µs commit
/// here. The leader's appends go to the [`Flusher`]'s thread instead: nothing waits for them.
fn commit_entries<'a>(
    segs: &Mutex<Segments>,
    entries: impl IntoIterator<Item = (u64, &'a [u8])>,
) -> Result<u64, StorageError> {
    let started = std::time::Instant::now();
    let res = segs
        .lock()
        .expect("log segments lock")
        .append(entries)
        .map_err(write_err);
    crate::base::counters::fsync(started.elapsed());
    res
}

/// Reports one flush: the leader's [`LogFlushed`] callback, or a test's.
type Done = Box<dyn FnOnce(std::io::Result<()>) + Send>;

/// One append handed to the [`Flusher`]: its entries as stored, by index, and their bytes.
struct Flush {
    entries: Vec<(u64, Vec<u8>)>,
    bytes: usize,
    done: Done,
}

fn flush_failed() -> StorageError {
    write_err(std::io::Error::other("an earlier log commit failed"))
}

/// The leader's appends, flushed by a thread of their own (P11). openraft (patched, see
/// `vendor/openraft/XCE-PATCH.md`) does not wait for the leader's own flush: it replicates the
/// entries at once — they are readable from [`Recent`] as soon as `append` returns — and counts
/// the leader towards a quorum only when this thread reports them on disk. So the leader's
/// fsync runs beside the followers' instead of before them, and appends that arrive while one
/// commit runs go to disk together in the next (one fsync).
///
/// Ordering: appends are committed in the order they were handed over, and every other write
/// to the database (a follower's append, truncate, purge, the vote) and every read of the log
/// from the database first waits until none is pending ([`Flusher::wait_idle`]). Nothing can
/// be handed over between that wait and the write: every writer is the Raft core, through
/// `RaftLogStorage`'s `&mut self`, one call at a time (the clones are readers). A failed
/// commit fails it and every later append (openraft stops the node on the first).
struct Flusher {
    /// `None` only while dropping.
    tx: Option<std::sync::mpsc::Sender<Flush>>,
    shared: Arc<FlushState>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Appends handed to the flusher and not yet committed (or failed), and their bytes.
#[derive(Default)]
struct Pending {
    appends: usize,
    bytes: usize,
}

/// What the flusher thread and the stores share.
struct FlushState {
    pending: Mutex<Pending>,
    idle: std::sync::Condvar,
    failed: std::sync::atomic::AtomicBool,
}

impl FlushState {
    /// Counts `appends` of `bytes` handed over (`add`) or done with; wakes the waiters.
    fn count(&self, add: bool, appends: usize, bytes: usize) {
        {
            let mut p = self.pending.lock().expect("flush count lock");
            if add {
                p.appends += appends;
                p.bytes += bytes;
            } else {
                p.appends -= appends;
                p.bytes -= bytes;
            }
            crate::base::counters::flush_pending(p.bytes);
        }
        self.idle.notify_all();
    }
}

impl Drop for Flusher {
    /// The last store is gone: the thread commits what is pending and ends, and the database
    /// is closed when this returns (a node reopened in the same process finds it free).
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Flusher {
    fn start(
        segs: Arc<Mutex<Segments>>,
        recent: Arc<Mutex<Recent>>,
        file: Arc<PathBuf>,
        appended: Arc<AtomicU64>,
    ) -> Flusher {
        let (tx, rx) = std::sync::mpsc::channel::<Flush>();
        let shared = Arc::new(FlushState {
            pending: Mutex::new(Pending::default()),
            idle: std::sync::Condvar::new(),
            failed: std::sync::atomic::AtomicBool::new(false),
        });
        let f = shared.clone();
        let thread = std::thread::Builder::new()
            .name("xce-log-flush".into())
            .spawn(move || {
                // Ends when the sender is dropped (`Drop`).
                while let Ok(first) = rx.recv() {
                    // `log-flush`: `pause` stalls this disk here (appends queue behind it).
                    let point = failpoint(crate::base::failpoints::LOG_FLUSH);
                    let mut group = vec![first];
                    group.extend(rx.try_iter());
                    let res = if f.failed.load(Ordering::Acquire) {
                        Err("an earlier commit failed".to_string())
                    } else {
                        let res = point.and_then(|()| {
                            commit_entries(
                                &segs,
                                group.iter().flat_map(|g| {
                                    g.entries.iter().map(|(i, b)| (*i, b.as_slice()))
                                }),
                            )
                        });
                        noted("log_flush", &file, res)
                            .map(|n| {
                                appended.fetch_add(n, Ordering::Relaxed);
                            })
                            .map_err(|e| e.to_string())
                    };
                    if res.is_err() {
                        // What the failed commit left is unknown: read the database from now on
                        // (never retried: C21, `base/fault.rs`).
                        f.failed.store(true, Ordering::Release);
                        recent.lock().expect("log cache lock").clear();
                    }
                    let (n, bytes) = (group.len(), group.iter().map(|g| g.bytes).sum());
                    for g in group {
                        (g.done)(res.clone().map_err(std::io::Error::other));
                    }
                    f.count(false, n, bytes);
                }
            })
            .expect("spawn the log flusher thread");
        Flusher {
            tx: Some(tx),
            shared,
            thread: Some(thread),
        }
    }

    /// Returns once `ready` holds for what is pending; blocks (off the runtime's queue,
    /// [`blocking`]) only if it does not hold already.
    fn wait_until(&self, ready: impl Fn(&Pending) -> bool) {
        let f = &self.shared;
        if ready(&f.pending.lock().expect("flush count lock")) {
            return;
        }
        blocking(|| {
            let mut p = f.pending.lock().expect("flush count lock");
            while !ready(&p) {
                p = f.idle.wait(p).expect("flush count lock");
            }
        })
    }

    /// Hands an append to the thread; `done` is called once it is on disk (or failed).
    fn submit(&self, entries: Vec<(u64, Vec<u8>)>, done: Done) -> Result<(), StorageError> {
        let f = &self.shared;
        if f.failed.load(Ordering::Acquire) {
            return Err(flush_failed());
        }
        let bytes = entries.iter().map(|(_, b)| b.len()).sum();
        // Back-pressure: a stalled disk holds the Raft core here (see the constant).
        self.wait_until(|p| p.appends == 0 || p.bytes + bytes <= MAX_PENDING_FLUSH_BYTES);
        f.count(true, 1, bytes);
        let flush = Flush {
            entries,
            bytes,
            done,
        };
        if self.tx.as_ref().is_none_or(|tx| tx.send(flush).is_err()) {
            f.count(false, 1, bytes);
            return Err(write_err(std::io::Error::other(
                "the log flusher thread is gone",
            )));
        }
        Ok(())
    }

    /// Returns once no handed-over append is pending: everything appended is on disk (or the
    /// flusher failed, which `failed` says). Blocks only when one is pending, and then off the
    /// runtime's queue ([`blocking`]).
    fn wait_idle(&self) -> Result<(), StorageError> {
        let f = &self.shared;
        self.wait_until(|p| p.appends == 0);
        if f.failed.load(Ordering::Acquire) {
            return Err(flush_failed());
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Log

/// First byte of a log entry stored by this version: the entry in postcard (compact binary
/// serde, the encoding the raft RPCs already use) follows. Earlier versions stored JSON, whose
/// first byte is `{`; such entries are still read (a data directory written by an older build
/// opens as it was). An older build cannot read entries written by this one.
const ENTRY_POSTCARD: u8 = 1;

/// One log entry as stored: [`ENTRY_POSTCARD`], then the entry in postcard.
fn encode_entry(e: &Entry) -> Result<Vec<u8>, StorageError> {
    postcard::to_extend(e, vec![ENTRY_POSTCARD]).map_err(write_err)
}

/// A stored log entry, in this version's encoding or an older one's (JSON).
fn decode_entry(bytes: &[u8]) -> Result<Entry, StorageError> {
    match bytes.first() {
        Some(&ENTRY_POSTCARD) => postcard::from_bytes(&bytes[1..]).map_err(read_err),
        _ => serde_json::from_slice(bytes).map_err(read_err),
    }
}

/// Bytes (as stored) of recent entries kept in memory: 16 of the largest batched entries
/// ([`crate::raft::propose::MAX_BATCH_BYTES`]), two appends of [`crate::raft::propose::MAX_PAYLOAD_ENTRIES`]
/// each — what replication and apply read right after the append. A follower further behind
/// is sent older entries from the database, as before. (In memory an entry takes about two to
/// three times its stored size: a few MB at most.)
const RECENT_BYTES: usize = 1 << 20;

/// The latest entries of the log, in memory (P11): replication reads every entry right after
/// it was appended and the state machine right after it committed; both used to read it back
/// from redb and decode it, once per follower and once more to apply. Always a contiguous
/// suffix of the log as appended: appends add to it before they return (the leader's may still
/// be on their way to disk, see [`Flusher`]; a follower's are on disk by then), truncate and
/// purge remove from both it and the disk. A read that starts inside it is answered from it
/// entirely; any other read waits for pending flushes and goes to the database.
#[derive(Default)]
struct Recent {
    /// (entry, its stored size), indexes consecutive.
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
}

impl Recent {
    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|(e, _)| e.log_id.index)
    }

    fn next_index(&self) -> Option<u64> {
        self.entries.back().map(|(e, _)| e.log_id.index + 1)
    }

    /// Entries appended after what the cache holds.
    fn appended(&mut self, entries: Vec<(Entry, usize)>) {
        let Some(first) = entries.first().map(|(e, _)| e.log_id.index) else {
            return;
        };
        if self.next_index() != Some(first) {
            // Not right after what we hold (the first append since the start, or after a
            // truncation that went below the cache): start again from these.
            self.remove_from(first);
            if self.next_index() != Some(first) {
                self.clear();
            }
        }
        for (e, n) in entries {
            self.bytes += n;
            self.entries.push_back((e, n));
        }
        while self.bytes > RECENT_BYTES && self.entries.len() > 1 {
            self.pop(true);
        }
    }

    /// Drops the first (`front`) or last entry, keeping `bytes` right.
    fn pop(&mut self, front: bool) {
        let popped = if front {
            self.entries.pop_front()
        } else {
            self.entries.pop_back()
        };
        if let Some((_, n)) = popped {
            self.bytes -= n;
        }
    }

    /// Forgets `index` and everything after it (truncate).
    fn remove_from(&mut self, index: u64) {
        while self.next_index().is_some_and(|next| next > index) {
            self.pop(false);
        }
    }

    /// Forgets everything up to `index` (purge).
    fn remove_upto(&mut self, index: u64) {
        while self.first_index().is_some_and(|first| first <= index) {
            self.pop(true);
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// The entries of `[start, end)` if the cache holds `start` (the log has none past what
    /// the cache holds); `None`: read them from the database.
    fn range(&self, start: u64, end: Option<u64>) -> Option<Vec<Entry>> {
        let first = self.first_index()?;
        if start < first {
            return None;
        }
        let skip = (start - first) as usize;
        let take = match end {
            Some(end) => end.saturating_sub(start) as usize,
            None => usize::MAX,
        };
        Some(
            self.entries
                .iter()
                .skip(skip)
                .take(take)
                .map(|(e, _)| e.clone())
                .collect(),
        )
    }
}

/// The Raft log, vote and committed index. Cheap to clone (readers share the store and the
/// cache of recent entries).
#[derive(Clone)]
pub struct LogStore {
    store: Store,
    /// The log's directory, named by a storage fault (C21).
    file: Arc<PathBuf>,
    recent: Arc<Mutex<Recent>>,
    flusher: Arc<Flusher>,
    /// Deletes purged segments off the Raft core (C24).
    janitor: Arc<Janitor>,
    /// Bytes appended to the log since the start (the snapshot trigger reads it).
    appended: Arc<AtomicU64>,
    /// C12: told of every vote saved, once it is on disk (`raft/amnesia.rs`).
    on_vote: Arc<std::sync::OnceLock<OnVote>>,
}

/// A hook the log store calls with every vote it saved (the node passes C12's).
pub type OnVote = Box<dyn Fn(&Vote) + Send + Sync>;

impl LogStore {
    /// The log of the store `store`.
    pub fn new(store: &Store) -> LogStore {
        let recent: Arc<Mutex<Recent>> = Arc::default();
        let file = Arc::new(store.dir.join(LOG_DIR));
        let appended = Arc::new(AtomicU64::new(0));
        LogStore {
            flusher: Arc::new(Flusher::start(
                store.segs.clone(),
                recent.clone(),
                file.clone(),
                appended.clone(),
            )),
            janitor: Arc::new(Janitor::start()),
            store: store.clone(),
            file,
            recent,
            appended,
            on_vote: Arc::default(),
        }
    }

    /// Sets the hook told of every vote saved (once; later calls are ignored).
    pub fn on_vote(&self, hook: OnVote) {
        let _ = self.on_vote.set(hook);
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().expect("log cache lock")
    }

    /// Bytes appended to this node's log since it started (C24: snapshots are sized by it).
    pub fn appended_bytes(&self) -> u64 {
        self.appended.load(Ordering::Relaxed)
    }

    /// Where the log should be purged to once a snapshot holds everything up to `snapshot`:
    /// at most `keep_bytes` and `keep_entries` of the log stay behind the snapshot (P14: a
    /// follower that fell that far behind catches up from the log; further behind, the
    /// snapshot costs it no more). `None`: nothing to purge.
    pub fn purge_point(&self, snapshot: u64, keep_bytes: u64, keep_entries: u64) -> Option<u64> {
        let keep = self
            .store
            .segs()
            .keep_from(snapshot, keep_bytes, keep_entries)?;
        keep.checked_sub(1)
    }

    /// Sizes the log's segments to a snapshot of `bytes` (C24: a purge frees whole segments,
    /// so a segment is an eighth of what the log keeps at most).
    pub fn size_segments(&self, snapshot_bytes: u64) {
        self.store.segs().set_target(snapshot_bytes / 8);
    }

    /// Reads `[start, end)` from the segments (after any pending flush).
    fn read_disk(&self, start: u64, end: Option<u64>) -> Result<Vec<Entry>, StorageError> {
        self.flusher.wait_idle()?;
        let read = || {
            let raw = self.store.segs().read(start, end).map_err(read_err)?;
            raw.iter().map(|(_, b)| decode_entry(b)).collect()
        };
        noted("read", &self.file, read())
    }
}

/// Deletes the segments a purge freed, on a thread of its own: a purge records its point in
/// the metadata file (one fsync) and returns; the files, whose records are all at or below
/// that point and skipped by every reader, go afterwards (`raft/segments.rs`). A deletion that
/// fails is the node's storage fault (C21), like any other write.
struct Janitor {
    tx: Option<std::sync::mpsc::Sender<Vec<PathBuf>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Janitor {
    fn start() -> Janitor {
        let (tx, rx) = std::sync::mpsc::channel::<Vec<PathBuf>>();
        let thread = std::thread::Builder::new()
            .name("xce-log-purge".into())
            .spawn(move || {
                while let Ok(files) = rx.recv() {
                    for f in files {
                        // `log-purge`: `pause` holds the deletion here (the crash test).
                        let res = failpoint(crate::base::failpoints::LOG_PURGE)
                            .and_then(|()| std::fs::remove_file(&f).map_err(write_err));
                        if noted("log_purge", &f, res).is_err() {
                            return;
                        }
                    }
                }
            })
            .expect("spawn the log purge thread");
        Janitor {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    fn delete(&self, files: Vec<PathBuf>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(files);
        }
    }
}

impl Drop for Janitor {
    /// The last store is gone: what is queued is deleted first.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => Some(e + 1),
            Bound::Excluded(&e) => Some(e),
            Bound::Unbounded => None,
        };
        if let Some(hit) = self.recent().range(start, end) {
            return Ok(hit);
        }
        self.read_disk(start, end)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        self.flusher.wait_idle()?;
        let last_purged_log_id = self.store.meta().get().purged;
        let last = self.store.segs().last_index();
        let last_log_id = match last {
            Some(i) => self.read_disk(i, Some(i + 1))?.pop().map(|e| e.log_id),
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.flusher.wait_idle()?;
        let res = failpoint(crate::base::failpoints::VOTE_SAVE)
            .and_then(|()| self.store.update_meta(|m| m.vote = Some(*vote)));
        noted("vote", &self.store.meta_path(), res)?;
        if let Some(hook) = self.on_vote.get() {
            hook(vote);
        }
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.store.meta().get().vote)
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
        Ok(self.store.meta().get().committed)
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
        let mut kept = Vec::new();
        for e in entries {
            let bytes = noted("log_append", &self.file, encode_entry(&e))?;
            encoded.push((e.log_id.index, bytes));
            kept.push((e, encoded.last().map_or(0, |(_, b)| b.len())));
        }
        if callback.is_pipelined() {
            // The leader's own: readable now (replication reads them next), on disk when the
            // flusher says so.
            self.recent().appended(kept);
            let done: Done = Box::new(move |res| callback.log_io_completed(res));
            return self.flusher.submit(encoded, done);
        }
        // A follower's (openraft waits for it): after anything still pending, then inline.
        self.flusher.wait_idle()?;
        let res = failpoint(crate::base::failpoints::LOG_APPEND).and_then(|()| {
            commit_entries(
                &self.store.segs,
                encoded.iter().map(|(i, b)| (*i, b.as_slice())),
            )
        });
        let res = noted("log_append", &self.file, res);
        // The commit is durable (fsynced) when it returns: only then are the entries readable
        // from the cache and the flush reported.
        match &res {
            Ok(n) => {
                self.appended.fetch_add(*n, Ordering::Relaxed);
                self.recent().appended(kept);
                callback.log_io_completed(Ok(()))
            }
            Err(e) => {
                // What the failed commit left is unknown: read the disk from now on.
                self.recent().clear();
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())))
            }
        }
        res.map(drop)
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.flusher.wait_idle()?;
        self.recent().remove_from(log_id.index);
        let res = blocking(|| {
            failpoint(crate::base::failpoints::LOG_TRUNCATE)?;
            self.store.segs().truncate(log_id.index).map_err(write_err)
        });
        noted("log_truncate", &self.file, res)
    }

    /// The purge point is saved first (fsynced); the segments it frees are deleted by the
    /// [`Janitor`] afterwards, off the Raft core (C24: removing a large prefix no longer holds
    /// the core, and with it the node's appends and heartbeats, for its length).
    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.flusher.wait_idle()?;
        self.recent().remove_upto(log_id.index);
        let res = self.store.update_meta(|m| m.purged = Some(log_id));
        noted("log_purge", &self.store.meta_path(), res)?;
        let freed = self.store.segs().purge(log_id.index);
        eprintln!(
            "log purged up to {}: {} segment file(s) to delete",
            log_id.index,
            freed.len()
        );
        if !freed.is_empty() {
            self.janitor.delete(freed);
        }
        Ok(())
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

/// The applied state, shared by the state machine (the writer) and every reader: one guard
/// per thread at a time (`raft/state_lock.rs`).
pub type SharedApplied = Arc<crate::raft::state_lock::StateLock<Applied>>;

/// The state machine: the in-memory [`Applied`] state plus its snapshot file.
pub struct StateMachineStore {
    id: u64,
    dir: PathBuf,
    pub applied: SharedApplied,
    /// C14: told of every batch applied, with its log id (the node passes the handover's
    /// `note`, which picks out the handover entries: to whom, its log id, the leader's time).
    pub handovers: Option<OnApply>,
    /// C19: hashes the state at every checkpoint entry (an empty batch).
    pub digests: Option<Arc<Digests>>,
    /// C20: told when the applied state records a cluster id (at open, after an apply or a
    /// snapshot that changed it): the node takes it as its own.
    pub on_cluster: Option<OnCluster>,
    /// The cluster id last told to `on_cluster`.
    told_cluster: Option<ClusterStamp>,
}

/// C20: the hook told of the cluster id the applied state records.
pub type OnCluster = Box<dyn Fn(ClusterStamp) + Send + Sync>;

/// A hook the state machine calls for every batch it applies (this module owns the type, so
/// the store needs nothing of those it tells).
pub type OnApply = Box<dyn Fn(LogId, &Batch) + Send + Sync>;

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
            applied: Arc::new(crate::raft::state_lock::StateLock::new(applied)),
            handovers: None,
            digests: None,
            on_cluster: None,
            told_cluster: None,
        })
    }

    /// C20: tells `on_cluster` of the cluster id the applied state records, if it is new.
    pub fn note_cluster(&mut self) {
        let now = self.applied.read().expect("state lock").state.cluster();
        if now.is_some() && now != self.told_cluster {
            self.told_cluster = now;
            if let (Some(hook), Some(c)) = (&self.on_cluster, now) {
                hook(c);
            }
        }
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
                Some(l) => format!("{}-{}-{}", l.leader_id, l.index, now_ms()),
                None => format!("none-{}", now_ms()),
            };
            let meta = SnapshotMeta {
                last_log_id: a.last_applied,
                last_membership: a.membership.clone(),
                snapshot_id: id,
            };
            snapshot::View::of(meta, &a.state)
        };
        let (dir, id) = (self.dir.clone(), self.id);
        // C24: written and fsynced by a thread of its own at background priority, its bytes
        // paced to the disk (`base/background.rs`); nothing of the Raft core waits for it.
        let res = crate::base::background::run("xce-snapshot", move || {
            crate::base::failpoints::storage(crate::base::failpoints::SNAPSHOT_SAVE)?;
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
        .and_then(|r: std::io::Result<SnapshotMeta>| r)
        .map_err(write_err);
        let current = snapshot::current_path(&self.dir);
        let meta = noted("snapshot", &current, res)?;
        let file = noted(
            "read",
            &current,
            SnapFile::open(current.clone()).map_err(read_err),
        )?;
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
        crate::base::failpoints::crash_point(crate::base::failpoints::SM_APPLY);
        let mut out = Vec::new();
        let mut ids = Vec::new();
        {
            let mut a = self.applied.write().expect("state lock");
            for e in entries {
                a.last_applied = Some(e.log_id);
                ids.push(e.log_id);
                out.push(match e.payload {
                    EntryPayload::Blank => Vec::new(),
                    EntryPayload::Normal(batch) if batch.0.is_empty() => {
                        // C19: a checkpoint entry (a barrier, or the consistency check's):
                        // every replica hashes its state as of here.
                        if let Some(d) = &self.digests {
                            d.begin(e.log_id, a.membership.clone(), a.state.without_caches());
                        }
                        Vec::new()
                    }
                    EntryPayload::Normal(batch) => {
                        if let Some(note) = &self.handovers {
                            note(e.log_id, &batch);
                        }
                        batch.0.iter().map(|p| a.state.apply(p)).collect()
                    }
                    EntryPayload::Membership(m) => {
                        a.membership = StoredMembership::new(Some(e.log_id), m);
                        Vec::new()
                    }
                });
            }
        }
        // C19 (fifth round): what was applied at each index, for the check's Raft order.
        if let Some(d) = &self.digests {
            d.applied(ids);
        }
        self.note_cluster();
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
        let file = SnapFile::receive_into(&self.dir).map_err(write_err);
        Ok(Box::new(noted(
            "snapshot",
            &snapshot::current_path(&self.dir),
            file,
        )?))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<SnapFile>,
    ) -> Result<(), StorageError> {
        let (dir, id) = (self.dir.clone(), self.id);
        let t0 = std::time::Instant::now();
        // C24: fsynced a step at a time and read back by a thread at background priority:
        // the standby's appends go on meanwhile.
        let res =
            crate::base::background::run("xce-snapshot", move || -> std::io::Result<State> {
                let SnapFile { path, file } = *snapshot;
                crate::base::failpoints::storage(crate::base::failpoints::SNAPSHOT_SAVE)?;
                crate::base::background::sync_paced(&file)?;
                drop(file);
                let (_, state) = snapshot::read(&path)?;
                snapshot::install_file(&path, &dir)?;
                Ok(state)
            })
            .await
            .and_then(|r| r)
            .map_err(write_err);
        let state = noted("snapshot", &snapshot::current_path(&self.dir), res)?;
        let jobs = state.job_count();
        let old = {
            let mut a = self.applied.write().expect("state lock");
            a.last_applied = meta.last_log_id;
            a.membership = meta.last_membership.clone();
            std::mem::replace(&mut a.state, state)
        };
        // The state it replaces is freed off the lock and off the runtime (10^6 jobs take a
        // while to free).
        std::thread::spawn(move || drop(old));
        self.note_cluster();
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
        let meta = noted("read", &path, snapshot::read_meta(&path).map_err(read_err))?;
        let file = noted(
            "read",
            &path,
            SnapFile::open(path.clone()).map_err(read_err),
        )?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(file),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sm::entry::Batch;
    use crate::sm::state::{Cmd, Proposal};
    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, Membership};

    fn rt() -> tokio::runtime::Runtime {
        // `blocking` (block_in_place) needs the multi-threaded runtime the controller runs.
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
    }

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    /// Entries of every payload kind: a blank, a membership, writes.
    fn entry(term: u64, index: u64) -> Entry {
        let payload = match index % 3 {
            0 => EntryPayload::Blank,
            1 => {
                EntryPayload::Membership(Membership::new(vec![[1, 2, 3].into_iter().collect()], ()))
            }
            _ => EntryPayload::Normal(Batch(Arc::new(vec![
                Proposal {
                    client_id: [index as u8; 16],
                    request_id: index,
                    now_ms: 1_700_000_000_000 + index as i64,
                    cmd: Cmd::HostCtrl {
                        host: format!("host-{index}"),
                        open: true,
                    },
                },
                Proposal {
                    client_id: [7; 16],
                    request_id: 0,
                    now_ms: -1,
                    cmd: Cmd::JobDispatch {
                        job_id: index * 10,
                        host: "ünïcode \"quoted\"".into(),
                    },
                },
            ]))),
        };
        Entry {
            log_id: log_id(term, index),
            payload,
        }
    }

    /// Entries compared by their JSON (the payload types have no `PartialEq`).
    fn same(a: &[Entry], b: &[Entry]) -> bool {
        serde_json::to_value(a).expect("json") == serde_json::to_value(b).expect("json")
    }

    /// A data directory an earlier build wrote — its log in `raft.redb`, the oldest entries as
    /// JSON, later ones binary — opens: upgraded on the first start (`raft/migrate.rs`), its
    /// entries read back as written, its last log id, vote and purge point found; new entries
    /// go after them, and after a reopen everything reads back.
    #[test]
    fn an_older_builds_log_is_upgraded_and_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let old: Vec<Entry> = (1..=5).map(|i| entry(1, i)).collect();
        // What earlier builds' `append` stored: JSON, then [`ENTRY_POSTCARD`] and postcard.
        let stored: Vec<(u64, Vec<u8>)> = old
            .iter()
            .map(|e| {
                let bytes = if e.log_id.index <= 3 {
                    serde_json::to_vec(e).expect("json")
                } else {
                    encode_entry(e).expect("postcard")
                };
                (e.log_id.index, bytes)
            })
            .collect();
        let meta = Meta {
            vote: Some(Vote::new(1, 1)),
            ..Meta::default()
        };
        crate::raft::migrate::tests::write_old(dir.path(), &stored, &meta);
        let new: Vec<Entry> = (6..=9).map(|i| entry(2, i)).collect();
        rt().block_on(async {
            let st = open_store(dir.path()).expect("open");
            assert!(!is_blank(&st, dir.path()).expect("blank?"));
            let mut store = LogStore::new(&st);
            let state = store.get_log_state().await.expect("state");
            assert_eq!(state.last_log_id, Some(log_id(1, 5)));
            assert_eq!(store.read_vote().await.expect("vote"), meta.vote);
            let read = store.try_get_log_entries(1..=5).await.expect("read old");
            assert!(same(&read, &old), "old entries read back as written");
            store.blocking_append(new.clone()).await.expect("append");
        });
        rt().block_on(async {
            let st = open_store(dir.path()).expect("reopen");
            let mut store = LogStore::new(&st);
            let state = store.get_log_state().await.expect("state");
            assert_eq!(state.last_log_id, Some(log_id(2, 9)));
            let all = store.try_get_log_entries(..).await.expect("read all");
            let want: Vec<Entry> = old.iter().chain(&new).cloned().collect();
            assert!(same(&all, &want), "everything reads back after a reopen");
        });
    }

    /// Reads answered from the cache of recent entries are what the disk holds, through
    /// appends, a truncation (a follower's conflicting suffix replaced) and a purge.
    #[test]
    fn the_cache_of_recent_entries_matches_the_disk() {
        let dir = tempfile::tempdir().expect("tempdir");
        rt().block_on(async {
            let st = open_store(dir.path()).expect("open");
            let mut store = LogStore::new(&st);
            // Checks every range of 0..=12 against a store with an empty cache (the disk).
            let check = |mut store: LogStore, st: Store| async move {
                for a in 0..=12u64 {
                    for b in a..=13u64 {
                        let cached = store.try_get_log_entries(a..b).await.expect("cached");
                        let disk = LogStore::new(&st)
                            .try_get_log_entries(a..b)
                            .await
                            .expect("disk");
                        assert!(same(&cached, &disk), "range {a}..{b}");
                    }
                    let cached = store.try_get_log_entries(a..).await.expect("cached");
                    let disk = LogStore::new(&st)
                        .try_get_log_entries(a..)
                        .await
                        .expect("disk");
                    assert!(same(&cached, &disk), "range {a}..");
                }
            };
            store
                .blocking_append((1..=4).map(|i| entry(1, i)))
                .await
                .expect("append");
            store
                .blocking_append((5..=10).map(|i| entry(1, i)))
                .await
                .expect("append");
            assert_eq!(store.recent().first_index(), Some(1));
            check(store.clone(), st.clone()).await;
            store.truncate(log_id(1, 7)).await.expect("truncate");
            assert_eq!(store.recent().next_index(), Some(7));
            check(store.clone(), st.clone()).await;
            store
                .blocking_append((7..=11).map(|i| entry(2, i)))
                .await
                .expect("append");
            check(store.clone(), st.clone()).await;
            store.purge(log_id(1, 4)).await.expect("purge");
            assert_eq!(store.recent().first_index(), Some(5));
            check(store.clone(), st.clone()).await;
            let state = store.get_log_state().await.expect("state");
            assert_eq!(state.last_purged_log_id, Some(log_id(1, 4)));
            assert_eq!(state.last_log_id, Some(log_id(2, 11)));
        });
    }

    /// The `log-flush` failpoint is process-wide: the tests that pause it run one at a time.
    static FLUSH_POINT: Mutex<()> = Mutex::new(());

    /// Stalls every flusher of this process (`log-flush=pause`) until the guard is dropped.
    struct Stall(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

    impl Stall {
        fn start() -> Stall {
            let one = FLUSH_POINT.lock().unwrap_or_else(|e| e.into_inner());
            crate::base::failpoints::set(crate::base::failpoints::LOG_FLUSH, "pause")
                .expect("failpoints are compiled into the tests");
            Stall(one)
        }
    }

    impl Drop for Stall {
        fn drop(&mut self) {
            let _ = crate::base::failpoints::clear(crate::base::failpoints::LOG_FLUSH);
        }
    }

    /// The leader's appends, handed to the flusher thread: reported on disk in the order
    /// handed over, none while the `log-flush` failpoint stalls them; every other write to the
    /// log and every read of it from the database waits until none is pending.
    #[test]
    fn the_leaders_flushes_report_in_order_and_other_writes_wait_for_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stall = Stall::start();
        rt().block_on(async {
            let st = open_store(dir.path()).expect("open");
            let mut store = LogStore::new(&st);
            let reported = Arc::new(Mutex::new(Vec::new()));
            for (first, last) in [(1, 3), (4, 6), (7, 9)] {
                let entries: Vec<Entry> = (first..=last).map(|i| entry(1, i)).collect();
                let encoded = entries
                    .iter()
                    .map(|e| (e.log_id.index, encode_entry(e).expect("encode")))
                    .collect();
                let r = reported.clone();
                let done: Done = Box::new(move |res| r.lock().unwrap().push((last, res.is_ok())));
                store.flusher.submit(encoded, done).expect("submit");
            }
            // Stalled: nothing reported, nothing on disk, and a truncate waits.
            let waiter = {
                let mut s = store.clone();
                tokio::spawn(async move { s.truncate(log_id(1, 7)).await })
            };
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let (none_reported, truncate_waited) =
                (reported.lock().unwrap().is_empty(), !waiter.is_finished());
            // Unstalled before any assertion: a stalled flusher would hold the test's end.
            drop(stall);
            assert!(
                none_reported,
                "a flush was reported while the disk was stalled"
            );
            assert!(
                truncate_waited,
                "a truncate did not wait for pending flushes"
            );
            waiter.await.expect("join").expect("truncate");
            assert_eq!(
                *reported.lock().unwrap(),
                vec![(3, true), (6, true), (9, true)]
            );
            // Truncated after they landed: 1..=6 on disk, 7.. gone.
            let disk = LogStore::new(&st)
                .try_get_log_entries(0..)
                .await
                .expect("read");
            let indexes: Vec<u64> = disk.iter().map(|e| e.log_id.index).collect();
            assert_eq!(indexes, (1..=6).collect::<Vec<_>>());
            let _ = store.get_log_state().await.expect("state");
        });
    }

    /// A stalled disk holds the leader's appends back once enough wait: the next one blocks
    /// (and with it, in the controller, the Raft core) until the disk takes what is pending.
    #[test]
    fn the_leaders_flushes_are_bounded_in_memory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stall = Stall::start();
        let st = open_store(dir.path()).expect("open");
        let store = LogStore::new(&st);
        let half = MAX_PENDING_FLUSH_BYTES / 2 + 1;
        let submit = move |store: &LogStore, index: u64| {
            let done: Done = Box::new(|res| res.expect("flushed"));
            store
                .flusher
                .submit(vec![(index, vec![7u8; half])], done)
                .expect("submit");
        };
        // The first always goes (nothing pending), however large.
        submit(&store, 1);
        let second = {
            let store = store.clone();
            std::thread::spawn(move || submit(&store, 2))
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        let waited = !second.is_finished();
        // Unstalled before any assertion: a stalled flusher would hold the test's end.
        drop(stall);
        second.join().expect("second append");
        store.flusher.wait_idle().expect("idle");
        assert!(waited, "a second half-bound append did not wait");
    }

    /// The cache keeps the newest entries within its byte budget (at least one), consecutive;
    /// an append after a gap starts it again.
    #[test]
    fn the_cache_is_bounded_and_consecutive() {
        let mut r = Recent::default();
        let big = RECENT_BYTES / 3 + 1;
        r.appended((1..=2).map(|i| (entry(1, i), big)).collect());
        r.appended(vec![(entry(1, 3), big)]);
        assert_eq!(
            (r.first_index(), r.next_index(), r.bytes),
            (Some(2), Some(4), 2 * big)
        );
        r.appended(vec![(entry(1, 4), RECENT_BYTES * 2)]);
        assert_eq!((r.first_index(), r.next_index()), (Some(4), Some(5)));
        r.appended(vec![(entry(1, 9), 10)]);
        assert_eq!(
            (r.first_index(), r.next_index(), r.bytes),
            (Some(9), Some(10), 10)
        );
        assert!(r.range(8, None).is_none(), "before the cache: the database");
        assert_eq!(r.range(9, Some(20)).map(|v| v.len()), Some(1));
        assert_eq!(r.range(12, None).map(|v| v.len()), Some(0));
        // An append overlapping the cache (no truncate first) replaces its suffix.
        r.appended((5..=7).map(|i| (entry(1, i), 1)).collect());
        assert_eq!((r.first_index(), r.next_index()), (Some(5), Some(8)));
        r.appended((6..=6).map(|i| (entry(2, i), 1)).collect());
        assert_eq!(
            (r.first_index(), r.next_index(), r.bytes),
            (Some(5), Some(7), 2)
        );
    }
}
