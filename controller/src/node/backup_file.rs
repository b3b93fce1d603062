//! C20: the backup file of `xce-controller snapshot save`, read by `snapshot restore`, and the
//! primary's table of saves in progress.
//!
//! ```text
//! "XCEBACK1"
//! u32 LE length, JSON of the BackupHeader (what the state is, where from, its digest)
//! the state as `sm/snapshot.rs` writes a snapshot ("XCESNAP1" … "XCEEND01")
//! ```
//!
//! The state is the one the primary's consistency check hashed at a checkpoint entry
//! (`raft/digests.rs`), so the file is consistent at that index (everything committed before
//! it, nothing after) and its digest is the one the members compared. `restore` recomputes the
//! digest from what it read and refuses a file whose state does not match it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::base::ids::SnapshotMeta;
use crate::sm::snapshot::{self, View};
use crate::sm::state::State;

const MAGIC: &[u8; 8] = b"XCEBACK1";
/// Largest header accepted when reading.
const MAX_HEADER: u32 = 1 << 20;
/// Saves in progress on one primary at once; more are refused (EBUSY).
pub const MAX_SAVES: usize = 2;
/// A save not asked for its next chunk for this long is dropped (its file removed).
pub const SAVE_IDLE: Duration = Duration::from_secs(60);

/// What a backup holds, in its first bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupHeader {
    /// 1: this layout.
    pub format: u32,
    /// 16 random bytes (hex) made when it was saved: a restore's new cluster id is derived
    /// from it and the operator's restore name.
    pub backup_id: String,
    /// The log entry the state is as of: its index, term and leader.
    pub index: u64,
    pub term: u64,
    pub leader: u64,
    /// SHA-256 of the state's canonical bytes (hex, `sm/digest.rs`).
    pub digest: String,
    /// The cluster it was saved from (hex; `None`: it had no id yet) and its restore epoch.
    pub cluster: Option<String>,
    pub epoch: u32,
    /// Members whose digest at `index` was this one (the primary included), of `voters`.
    pub agreeing: u32,
    pub voters: u32,
    pub jobs: u64,
    /// The primary that saved it, and its clock then (unix ms; for the operator only).
    pub saved_by: u64,
    pub saved_at_ms: i64,
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("backup: {what}"))
}

/// Writes a backup of `view` (the state at `header.index`) to `path` and fsyncs it; its size.
pub fn write(path: &Path, header: &BackupHeader, view: &View) -> io::Result<u64> {
    let f = create_private(path)?;
    let mut w = BufWriter::with_capacity(1 << 20, f);
    w.write_all(MAGIC)?;
    let h = serde_json::to_vec(header).map_err(io::Error::other)?;
    w.write_all(&(h.len() as u32).to_le_bytes())?;
    w.write_all(&h)?;
    view.write_to(&mut w)?;
    let f = w.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()?;
    f.metadata().map(|m| m.len())
}

/// Creates (truncating) a file only its owner may read: a backup holds the whole state.
pub fn create_private(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // A file left by an earlier try keeps its mode when truncated: start afresh.
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

fn header_from(r: &mut impl Read) -> io::Result<BackupHeader> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(bad("not a backup of xce-controller (snapshot save)"));
    }
    let mut n = [0u8; 4];
    r.read_exact(&mut n)?;
    let n = u32::from_le_bytes(n);
    if n > MAX_HEADER {
        return Err(bad("header too long"));
    }
    let mut h = vec![0u8; n as usize];
    r.read_exact(&mut h)?;
    let h: BackupHeader = serde_json::from_slice(&h).map_err(|e| bad(&e.to_string()))?;
    if h.format != 1 {
        return Err(bad(&format!("format {} (this build reads 1)", h.format)));
    }
    Ok(h)
}

/// Reads a whole backup: its header, the snapshot's meta and the state.
pub fn read(path: &Path) -> io::Result<(BackupHeader, SnapshotMeta, State)> {
    let mut r = BufReader::with_capacity(1 << 20, File::open(path)?);
    let h = header_from(&mut r)?;
    let (meta, state) = snapshot::read_from(&mut r)?;
    let mut rest = [0u8; 1];
    if r.read(&mut rest)? != 0 {
        return Err(bad("bytes after the end"));
    }
    Ok((h, meta, state))
}

/// Bytes from hex (`None`: not hex, or not `N` bytes).
pub fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A save in progress on the primary: its file (in the data directory, a `.tmp` the node
/// removes at its next start) and what it is.
#[derive(Debug, Clone)]
pub struct Save {
    pub path: PathBuf,
    pub total: u64,
    pub header: BackupHeader,
    pub last_used: Instant,
}

/// The primary's saves in progress, by cursor.
#[derive(Default)]
pub struct Saves {
    inner: Mutex<HashMap<u64, Save>>,
}

impl Saves {
    fn inner(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Save>> {
        self.inner.lock().expect("saves lock")
    }

    /// Drops saves idle for [`SAVE_IDLE`] (their files removed); whether one more may start.
    pub fn room(&self) -> bool {
        let mut m = self.inner();
        m.retain(|_, s| {
            let keep = s.last_used.elapsed() < SAVE_IDLE;
            if !keep {
                let _ = std::fs::remove_file(&s.path);
            }
            keep
        });
        m.len() < MAX_SAVES
    }

    pub fn add(&self, cursor: u64, save: Save) {
        self.inner().insert(cursor, save);
    }

    /// The save of `cursor`, marked used now.
    pub fn get(&self, cursor: u64) -> Option<Save> {
        let mut m = self.inner();
        let s = m.get_mut(&cursor)?;
        s.last_used = Instant::now();
        Some(s.clone())
    }
}

/// Reads up to `max` bytes of `path` from `offset`.
pub fn chunk(path: &Path, offset: u64, max: usize) -> io::Result<Vec<u8>> {
    use std::io::Seek;
    let mut f = File::open(path)?;
    f.seek(io::SeekFrom::Start(offset))?;
    let mut buf = Vec::with_capacity(max);
    f.take(max as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sm::state::{Cmd, Proposal, SubmitSpec};

    #[test]
    fn a_backup_reads_back_whole_and_refuses_damage() {
        let mut s = State::default();
        for id in 1..=50u64 {
            s.apply(&Proposal {
                client_id: [1; 16],
                request_id: id,
                now_ms: 5,
                cmd: Cmd::JobSubmit(SubmitSpec {
                    job_id: id,
                    name: format!("j{id}"),
                    user: "u".into(),
                    queue: String::new(),
                    command: "true".into(),
                    ncpus: 1,
                    mem_mb: 1,
                }),
            });
        }
        let h = BackupHeader {
            format: 1,
            backup_id: "ab".repeat(16),
            index: 77,
            term: 3,
            leader: 2,
            digest: crate::sm::digest::hex(&crate::sm::digest::of(&s)),
            cluster: None,
            epoch: 0,
            agreeing: 3,
            voters: 3,
            jobs: 50,
            saved_by: 2,
            saved_at_ms: 1,
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b");
        let n = write(&p, &h, &View::of(SnapshotMeta::default(), &s)).unwrap();
        assert_eq!(n, std::fs::metadata(&p).unwrap().len());
        let (h2, _, s2) = read(&p).unwrap();
        assert_eq!(h2, h);
        assert_eq!(crate::sm::digest::of(&s2), crate::sm::digest::of(&s));
        assert_eq!(chunk(&p, 3, 5).unwrap(), std::fs::read(&p).unwrap()[3..8]);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        assert!(read(&p).is_err(), "cut short");
        std::fs::write(&p, [&bytes[..], b"x"].concat()).unwrap();
        assert!(read(&p).is_err(), "trailing bytes");
        std::fs::write(&p, b"XCESNAP1").unwrap();
        assert!(read(&p).is_err(), "a snapshot is not a backup");
        assert_eq!(unhex::<2>("0aFf"), Some([10, 255]));
        assert_eq!(unhex::<2>("0aF"), None);
        assert_eq!(unhex::<1>("zz"), None);
    }
}
