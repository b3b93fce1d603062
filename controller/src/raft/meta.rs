//! The node's Raft metadata (C1, C20): its vote, the point its log is purged to, the committed
//! index an older build saved, and the cluster it belongs to — a few hundred bytes, in
//! `DIR/raft.meta`.
//!
//! The file is two fixed slots of [`SLOT`] bytes, written in turn: a save writes the slot the
//! current version is *not* in, with the next sequence number and a checksum, and fsyncs it
//! (`fdatasync`: the file's size and blocks never change after it is made, so nothing else
//! needs the journal). A crash during a save tears at most the slot being written; the other
//! still holds the previous version, whole. Reading takes the valid slot with the higher
//! sequence number. So every save is one write and one fsync, durable when it returns, and the
//! file is never seen half-written.
//!
//! ```text
//! slot (4096 bytes): "XCEMETA1", u64 LE sequence, u32 LE length, u32 LE CRC-32 of the
//!                    sequence, length and body, body = JSON of Meta, zeros to the slot's end
//! ```

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::base::cluster_id::Belonging;
use crate::base::ids::{LogId, Vote};

/// The metadata file of a data directory.
pub const META_FILE: &str = "raft.meta";
/// One slot; the file is two.
const SLOT: usize = 4096;
const MAGIC: &[u8; 8] = b"XCEMETA1";
/// Magic, sequence, length, checksum.
const HEAD: usize = 24;

/// What the file holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub vote: Option<Vote>,
    /// The last log id purged (the log continues after it).
    pub purged: Option<LogId>,
    /// Saved by builds before the committed index stopped being saved (`store.rs`); read.
    pub committed: Option<LogId>,
    /// C20: absent in data an earlier build wrote.
    pub cluster: Option<Belonging>,
}

/// The open metadata file and the version it holds.
#[derive(Debug)]
pub struct MetaFile {
    file: File,
    seq: u64,
    meta: Meta,
}

fn bad(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}

/// A slot holding `meta` as version `seq`.
fn slot(seq: u64, meta: &Meta) -> io::Result<Vec<u8>> {
    let body = serde_json::to_vec(meta).map_err(io::Error::other)?;
    if body.len() > SLOT - HEAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "raft metadata larger than its slot",
        ));
    }
    let mut s = Vec::with_capacity(SLOT);
    s.extend_from_slice(MAGIC);
    s.extend_from_slice(&seq.to_le_bytes());
    s.extend_from_slice(&(body.len() as u32).to_le_bytes());
    s.extend_from_slice(&checksum(seq, &body).to_le_bytes());
    s.extend_from_slice(&body);
    s.resize(SLOT, 0);
    Ok(s)
}

fn checksum(seq: u64, body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(&(body.len() as u32).to_le_bytes());
    h.update(body);
    h.finalize()
}

/// The version a slot holds, if it is whole (a torn or never written slot: `None`).
fn read_slot(s: &[u8]) -> Option<(u64, Meta)> {
    if s.len() < HEAD || &s[..8] != MAGIC {
        return None;
    }
    let seq = u64::from_le_bytes(s[8..16].try_into().ok()?);
    let len = u32::from_le_bytes(s[16..20].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(s[20..24].try_into().ok()?);
    let body = s.get(HEAD..HEAD + len)?;
    if checksum(seq, body) != crc {
        return None;
    }
    Some((seq, serde_json::from_slice(body).ok()?))
}

impl MetaFile {
    /// Opens `DIR/raft.meta`; `None` if there is none.
    pub fn open(dir: &Path) -> io::Result<Option<MetaFile>> {
        let path = dir.join(META_FILE);
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut buf = vec![0u8; 2 * SLOT];
        let n = read_up_to(&file, &mut buf)?;
        if n != 2 * SLOT {
            return Err(bad(&path, "not two whole slots"));
        }
        let best = [read_slot(&buf[..SLOT]), read_slot(&buf[SLOT..])]
            .into_iter()
            .flatten()
            .max_by_key(|(seq, _)| *seq)
            .ok_or_else(|| bad(&path, "neither slot is whole"))?;
        Ok(Some(MetaFile {
            file,
            seq: best.0,
            meta: best.1,
        }))
    }

    /// Makes `DIR/raft.meta` holding `meta` — written beside it, fsynced and renamed into
    /// place, the rename made durable — so the file, once there, is always whole.
    pub fn create(dir: &Path, meta: &Meta) -> io::Result<MetaFile> {
        let path = dir.join(META_FILE);
        let tmp = dir.join(format!("{META_FILE}.tmp"));
        let mut bytes = vec![0u8; SLOT];
        bytes.extend(slot(1, meta)?);
        {
            let f = File::create(&tmp)?;
            f.write_all_at(&bytes, 0)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        File::open(dir)?.sync_all()?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)?;
        Ok(MetaFile {
            file,
            seq: 1,
            meta: meta.clone(),
        })
    }

    pub fn get(&self) -> &Meta {
        &self.meta
    }

    /// Saves `meta` as the next version: one slot written and fsynced. On an error the version
    /// held in memory stays the previous one (what a reader of the file finds).
    pub fn save(&mut self, meta: Meta) -> io::Result<()> {
        let seq = self.seq + 1;
        let s = slot(seq, &meta)?;
        self.file
            .write_all_at(&s, (seq % 2) * SLOT as u64)
            .and_then(|()| self.file.sync_data())?;
        self.seq = seq;
        self.meta = meta;
        Ok(())
    }

    /// [`MetaFile::save`] of the current version changed by `f`.
    pub fn update(&mut self, f: impl FnOnce(&mut Meta)) -> io::Result<()> {
        let mut m = self.meta.clone();
        f(&mut m);
        self.save(m)
    }
}

/// Reads from the start of `f` until `buf` is full or the file ends; returns the bytes read.
pub fn read_up_to(f: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn meta(term: u64) -> Meta {
        Meta {
            vote: Some(Vote::new(term, 2)),
            purged: Some(LogId::new(CommittedLeaderId::new(term, 1), 40 + term)),
            committed: None,
            cluster: Some(Belonging::Pending),
        }
    }

    /// Saves alternate slots and every reopen reads the latest; a torn slot (any prefix of a
    /// save, or garbage) leaves the previous version, and a file with no whole slot is refused.
    #[test]
    fn every_save_is_whole_or_not_there() {
        let dir = tempfile::tempdir().unwrap();
        assert!(MetaFile::open(dir.path()).unwrap().is_none());
        let mut f = MetaFile::create(dir.path(), &meta(1)).unwrap();
        for term in 2..=5 {
            f.save(meta(term)).unwrap();
            let again = MetaFile::open(dir.path()).unwrap().unwrap();
            assert_eq!(again.get(), &meta(term));
        }
        // A save of version 6 torn at every length: the file still reads version 5.
        let path = dir.path().join(META_FILE);
        let whole = std::fs::read(&path).unwrap();
        let s6 = slot(6, &meta(6)).unwrap();
        let at = 0; // 6 % 2
                    // Up to its body's end (the zeros after it are the same in both versions).
        let end = HEAD + serde_json::to_vec(&meta(6)).unwrap().len();
        for cut in [0, 1, 8, 23, 24, 60, end - 1] {
            let mut bytes = whole.clone();
            bytes[at..at + cut].copy_from_slice(&s6[..cut]);
            // The rest of the slot as a crash may leave it: the older version's bytes.
            std::fs::write(&path, &bytes).unwrap();
            let got = MetaFile::open(dir.path()).unwrap().unwrap();
            if cut <= 60 {
                assert_eq!(got.get(), &meta(5), "torn at {cut}");
            } else {
                // The body's last bytes may be the same in both versions: whole, then.
                assert!([meta(5), meta(6)].contains(got.get()), "torn at {cut}");
            }
        }
        let mut bytes = whole.clone();
        bytes[at..at + SLOT].copy_from_slice(&s6);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(MetaFile::open(dir.path()).unwrap().unwrap().get(), &meta(6));
        // Both slots broken: refused, not read as empty.
        std::fs::write(&path, vec![7u8; 2 * SLOT]).unwrap();
        assert!(MetaFile::open(dir.path()).is_err());
        std::fs::write(&path, &whole[..SLOT]).unwrap();
        assert!(MetaFile::open(dir.path()).is_err());
    }
}
