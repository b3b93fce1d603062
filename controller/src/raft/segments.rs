//! The Raft log on disk (C1, C24): append-only segment files in `DIR/raft-log/`, so the log store
//! is the size of the unpurged log — a purge deletes whole segments — and an append is one
//! write and one `fdatasync`.
//!
//! ```text
//! DIR/raft-log/0000000000000007.seg   segment 7 (numbers grow; a number is never reused)
//!   header:  "XCESEG01", u64 LE segment number
//!   records: u32 LE length of the entry, u32 LE CRC-32 of (length, index, entry),
//!            u64 LE index, the entry (as `raft/store.rs` encodes it)
//! ```
//!
//! The records of all segments, in segment order, are the log: consecutive indexes, each
//! record after the ones before it on disk. What keeps them so through crashes:
//!
//! - **Appends** go to the end of the newest segment, are fsynced before they are reported,
//!   and a segment is started (made, its header fsynced, the directory fsynced) before any
//!   record goes into it. A crash can leave only the last records of the newest segment torn
//!   (a short or garbled record: its length or checksum does not match); opening cuts the
//!   segment there (`ftruncate`, fsynced) before anything else is written. Torn records were
//!   never reported durable, so no acknowledged entry is lost. A record that is whole but
//!   out of order, or a whole record after a torn one, is not a crash's trace: the log
//!   refuses to open (C21: a storage fault, never a silently shorter log).
//! - **Truncate** (a follower's conflicting suffix) deletes the later segments first (the
//!   directory fsynced) and then cuts the segment that holds the first removed entry
//!   (`ftruncate`, fsynced), both before it returns: after a crash between the two steps the
//!   log is the old one up to that segment's end, never old records after new ones.
//! - **Purge** records its point in `raft.meta` first (`raft/store.rs`, fsynced); records at
//!   or below it are skipped when the log is read back, so the segments they fill may be
//!   deleted at any time afterwards — in the background ([`Segments::purge`] only says which),
//!   or at the next open if a crash came first. A segment's deletion never touches a record
//!   above the purge point.
//!
//! The index of every entry (segment, offset, length) is kept in memory, 24 bytes an entry.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The log's directory in a data directory.
pub const LOG_DIR: &str = "raft-log";
const MAGIC: &[u8; 8] = b"XCESEG01";
const SEG_HEAD: u64 = 16;
/// Length, checksum, index.
const REC_HEAD: u64 = 16;
/// Largest entry accepted (a batched entry is at most a few MiB: `raft/propose.rs`); a longer
/// length read back is a torn record.
pub const MAX_ENTRY: u32 = 64 << 20;
/// Bounds of a segment's size (`Segments::set_target`).
pub const MIN_SEGMENT: u64 = 64 << 10;
pub const MAX_SEGMENT: u64 = 64 << 20;
/// A new log's segments, until the first snapshot sizes them.
const FIRST_SEGMENT: u64 = 256 << 10;

/// One segment file.
#[derive(Debug)]
struct Seg {
    no: u64,
    path: PathBuf,
    file: Arc<File>,
    /// Bytes written (the header and whole records).
    len: u64,
    /// The index of its last record (`None`: none yet).
    last: Option<u64>,
}

/// Where an entry is.
#[derive(Debug, Clone, Copy)]
struct Loc {
    no: u64,
    /// Of the record's header.
    off: u64,
    len: u32,
}

/// The log's segments and where each entry is.
#[derive(Debug)]
pub struct Segments {
    dir: PathBuf,
    segs: VecDeque<Seg>,
    /// The entries after the purge point, from `first`.
    locs: VecDeque<Loc>,
    first: u64,
    /// The last index purged (records at or below it are not part of the log).
    purged: Option<u64>,
    next_no: u64,
    target: u64,
    /// The next append starts a segment (the newest one was wholly purged).
    roll: bool,
}

fn corrupt(path: &Path, what: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}

fn seg_name(no: u64) -> String {
    format!("{no:016x}.seg")
}

fn checksum(len: u32, index: u64, entry: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len.to_le_bytes());
    h.update(&index.to_le_bytes());
    h.update(entry);
    h.finalize()
}

/// Appends the record of `entry` at `index` to `buf`.
fn put_record(buf: &mut Vec<u8>, index: u64, entry: &[u8]) -> io::Result<()> {
    let len = u32::try_from(entry.len())
        .ok()
        .filter(|&l| l <= MAX_ENTRY)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "log entry too large"))?;
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&checksum(len, index, entry).to_le_bytes());
    buf.extend_from_slice(&index.to_le_bytes());
    buf.extend_from_slice(entry);
    Ok(())
}

/// The whole record at the start of `b`: (index, entry length); `None` if it is torn.
fn whole_record(b: &[u8]) -> Option<(u64, u32)> {
    let len = u32::from_le_bytes(b.get(0..4)?.try_into().ok()?);
    let crc = u32::from_le_bytes(b.get(4..8)?.try_into().ok()?);
    let index = u64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
    if len == 0 || len > MAX_ENTRY {
        return None;
    }
    let entry = b.get(REC_HEAD as usize..REC_HEAD as usize + len as usize)?;
    (checksum(len, index, entry) == crc).then_some((index, len))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// What opening found in one segment file.
struct Scan {
    /// (index, offset, length) of its whole records, in order.
    records: Vec<(u64, u64, u32)>,
    /// Where its whole records end.
    end: u64,
    /// Bytes after them (a torn tail).
    torn: bool,
}

fn scan(path: &Path, no: u64) -> io::Result<Option<Scan>> {
    let bytes = std::fs::read(path)?;
    if bytes.len() < SEG_HEAD as usize || &bytes[..8] != MAGIC || bytes[8..16] != no.to_le_bytes() {
        // A segment whose making was cut short (only ever the newest: see `open`).
        return Ok(None);
    }
    let mut records = Vec::new();
    let mut off = SEG_HEAD as usize;
    while let Some((index, len)) = whole_record(&bytes[off..]) {
        records.push((index, off as u64, len));
        off += REC_HEAD as usize + len as usize;
    }
    // A crash tears only the tail written after the last fsync: no whole record of a later
    // index can follow the torn one in the file (it was written after it, in the same
    // unsynced batch at most, and then never reported). A whole record there means a record
    // that was synced and reported went bad (a bad sector, bit rot): cutting the file would
    // silently drop acknowledged entries, so the log refuses to open (C21).
    let after = records.last().map_or(0, |r| r.0 + 1);
    if let Some(at) = whole_record_after(&bytes, off, after) {
        return Err(corrupt(
            path,
            format!("a whole record (index {at}) after the torn one at byte {off}"),
        ));
    }
    Ok(Some(Scan {
        records,
        end: off as u64,
        torn: off < bytes.len(),
    }))
}

/// The index of a whole record of index `after` or later that starts past byte `torn` of
/// `bytes`, if any (only records whose index field is plausible are checksummed).
fn whole_record_after(bytes: &[u8], torn: usize, after: u64) -> Option<u64> {
    let most = after.saturating_add(bytes.len() as u64);
    (torn + 1..bytes.len().saturating_sub(REC_HEAD as usize - 1)).find_map(|p| {
        let index = u64::from_le_bytes(bytes.get(p + 8..p + 16)?.try_into().ok()?);
        if index < after || index > most {
            return None;
        }
        whole_record(&bytes[p..]).map(|(i, _)| i)
    })
}

impl Segments {
    /// Opens (making if needed) the log in `dir` whose purge point is `purged`: reads every
    /// segment, cuts a torn tail, deletes segments wholly purged or never finished being made.
    pub fn open(dir: &Path, purged: Option<u64>) -> io::Result<Segments> {
        std::fs::create_dir_all(dir)?;
        let mut nos = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            match name
                .strip_suffix(".seg")
                .and_then(|n| u64::from_str_radix(n, 16).ok())
            {
                Some(no) => nos.push(no),
                None => return Err(corrupt(&e.path(), "not a log segment".into())),
            }
        }
        nos.sort_unstable();
        let mut log = Segments {
            dir: dir.to_path_buf(),
            segs: VecDeque::new(),
            locs: VecDeque::new(),
            first: purged.map_or(0, |p| p + 1),
            purged,
            next_no: nos.last().map_or(1, |n| n + 1),
            target: FIRST_SEGMENT,
            roll: false,
        };
        let mut ended = None::<PathBuf>;
        for (i, &no) in nos.iter().enumerate() {
            let path = dir.join(seg_name(no));
            let newest = i + 1 == nos.len();
            let Some(s) = scan(&path, no)? else {
                if !newest {
                    return Err(corrupt(&path, "no segment header".into()));
                }
                std::fs::remove_file(&path)?;
                sync_dir(dir)?;
                continue;
            };
            if let Some(torn) = &ended {
                if !s.records.is_empty() {
                    return Err(corrupt(
                        &path,
                        format!("whole records after the torn end of {}", torn.display()),
                    ));
                }
            }
            log.take(no, &path, &s)?;
            if s.torn {
                ended = Some(path);
            }
        }
        log.delete_purged()?;
        Ok(log)
    }

    /// Adds a scanned segment: its records above the purge point must continue the log; a torn
    /// tail is cut.
    fn take(&mut self, no: u64, path: &Path, s: &Scan) -> io::Result<()> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        for &(index, off, len) in &s.records {
            if self.purged.is_some_and(|p| index <= p) {
                continue;
            }
            match self.due() {
                None => self.first = index,
                Some(want) if want == index => {}
                Some(want) => {
                    return Err(corrupt(
                        path,
                        format!("log record {index} where {want} was due"),
                    ))
                }
            }
            self.locs.push_back(Loc { no, off, len });
        }
        if s.torn {
            file.set_len(s.end)?;
            file.sync_all()?;
        }
        self.segs.push_back(Seg {
            no,
            path: path.to_path_buf(),
            file: Arc::new(file),
            len: s.end,
            last: s.records.last().map(|r| r.0),
        });
        Ok(())
    }

    /// Deletes (now) the segments every record of which is purged — at open, before anything
    /// else reads or writes the log.
    fn delete_purged(&mut self) -> io::Result<()> {
        let gone = self.wholly_purged();
        for p in &gone {
            std::fs::remove_file(p)?;
        }
        if !gone.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// The index after the last (the first kept, when the log is empty).
    pub fn next_index(&self) -> u64 {
        self.first + self.locs.len() as u64
    }

    /// The index the next entry must have: the one after the last, or after the purge point;
    /// `None` for a log that never held an entry (openraft's first is index 0, or the one
    /// after a snapshot a blank node installed: both come with a purge point or none).
    fn due(&self) -> Option<u64> {
        (!self.locs.is_empty() || self.purged.is_some()).then(|| self.next_index())
    }

    /// The last index in the log (`None`: none after the purge point).
    pub fn last_index(&self) -> Option<u64> {
        (!self.locs.is_empty()).then(|| self.next_index() - 1)
    }

    /// Sets the size beyond which appends start a new segment (within the bounds).
    pub fn set_target(&mut self, bytes: u64) {
        self.target = bytes.clamp(MIN_SEGMENT, MAX_SEGMENT);
    }

    /// Segment `no` (numbers grow along the deque, with gaps where a truncate removed some).
    fn seg(&self, no: u64) -> Option<&Seg> {
        let i = self.segs.binary_search_by_key(&no, |s| s.no).ok()?;
        self.segs.get(i)
    }

    /// Starts a new segment: made, its header written and fsynced, the directory fsynced.
    fn start_segment(&mut self) -> io::Result<()> {
        let no = self.next_no;
        let path = self.dir.join(seg_name(no));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let mut head = MAGIC.to_vec();
        head.extend_from_slice(&no.to_le_bytes());
        file.write_all_at(&head, 0)?;
        file.sync_all()?;
        sync_dir(&self.dir)?;
        self.next_no += 1;
        self.roll = false;
        self.segs.push_back(Seg {
            no,
            path,
            file: Arc::new(file),
            len: SEG_HEAD,
            last: None,
        });
        Ok(())
    }

    /// Appends `entries` (consecutive, from [`Segments::next_index`]) and fsyncs them: one
    /// write and one `fdatasync` (and, when a segment is started, its making first). On an
    /// error nothing of it is in the log's index; what reached the file is a torn tail (cut
    /// at the next open) — the caller stops writing (C21).
    pub fn append<'a>(
        &mut self,
        entries: impl IntoIterator<Item = (u64, &'a [u8])>,
    ) -> io::Result<u64> {
        let mut buf = Vec::new();
        let mut new = Vec::new();
        let mut first = None;
        let mut want = self.due();
        for (index, entry) in entries {
            if want.is_some_and(|w| w != index) {
                return Err(io::Error::other(format!(
                    "log append of index {index} where {} is next",
                    want.unwrap_or(0)
                )));
            }
            first.get_or_insert(index);
            new.push((buf.len() as u64, entry.len() as u32));
            put_record(&mut buf, index, entry)?;
            want = Some(index + 1);
        }
        let (Some(first), Some(next)) = (first, want) else {
            return Ok(0);
        };
        let full = self
            .segs
            .back()
            .is_none_or(|s| s.len > SEG_HEAD && s.len + buf.len() as u64 > self.target);
        if self.roll || full {
            self.start_segment()?;
        }
        let s = self.segs.back_mut().expect("a segment was started");
        s.file.write_all_at(&buf, s.len)?;
        s.file.sync_data()?;
        let base = s.len;
        s.len += buf.len() as u64;
        s.last = Some(next - 1);
        let no = s.no;
        if self.locs.is_empty() {
            self.first = first;
        }
        self.locs.extend(new.into_iter().map(|(off, len)| Loc {
            no,
            off: base + off,
            len,
        }));
        Ok(buf.len() as u64)
    }

    /// The entries of `[from, to)` (`to` `None`: to the end), read back and checked.
    pub fn read(&self, from: u64, to: Option<u64>) -> io::Result<Vec<(u64, Vec<u8>)>> {
        let from = from.max(self.first);
        let to = to.unwrap_or(u64::MAX).min(self.next_index());
        let mut out = Vec::with_capacity(to.saturating_sub(from) as usize);
        for index in from..to {
            let loc = self.locs[(index - self.first) as usize];
            let seg = self
                .seg(loc.no)
                .ok_or_else(|| io::Error::other(format!("log segment {} gone", loc.no)))?;
            let mut rec = vec![0u8; (REC_HEAD + u64::from(loc.len)) as usize];
            seg.file.read_exact_at(&mut rec, loc.off)?;
            match whole_record(&rec) {
                Some((i, _)) if i == index => {}
                _ => {
                    return Err(corrupt(
                        &seg.path,
                        format!("log record {index} does not read back whole"),
                    ))
                }
            }
            rec.drain(..REC_HEAD as usize);
            out.push((index, rec));
        }
        Ok(out)
    }

    /// Removes `from` and every entry after it, durably, before returning (see the module).
    pub fn truncate(&mut self, from: u64) -> io::Result<()> {
        let Some(last) = self.last_index() else {
            return Ok(());
        };
        if from > last {
            return Ok(());
        }
        let from = from.max(self.first);
        let at = self.locs[(from - self.first) as usize];
        let mut later = false;
        while self.segs.back().is_some_and(|s| s.no > at.no) {
            let s = self.segs.pop_back().expect("checked");
            std::fs::remove_file(&s.path)?;
            later = true;
        }
        if later {
            sync_dir(&self.dir)?;
        }
        let s = self.segs.back_mut().expect("the segment holding `from`");
        s.file.set_len(at.off)?;
        s.file.sync_all()?;
        s.len = at.off;
        // A record before `from` in this segment is `from - 1`'s (the log is consecutive).
        s.last = (at.off > SEG_HEAD).then(|| from - 1);
        self.locs.truncate((from - self.first) as usize);
        Ok(())
    }

    /// Moves the purge point to `upto` (already durable in `raft.meta`: the caller's first
    /// step) and forgets the entries at or below it; returns the segments now wholly purged,
    /// for the caller to delete when it likes. If the newest is among them, the next append
    /// starts a segment.
    pub fn purge(&mut self, upto: u64) -> Vec<PathBuf> {
        if self.purged.is_none_or(|p| upto > p) {
            self.purged = Some(upto);
            while self.first <= upto && !self.locs.is_empty() {
                self.locs.pop_front();
                self.first += 1;
            }
            if self.locs.is_empty() {
                self.first = self.first.max(upto + 1);
            }
        }
        self.wholly_purged()
    }

    /// Takes out the oldest segments none of whose records is above the purge point.
    fn wholly_purged(&mut self) -> Vec<PathBuf> {
        let Some(upto) = self.purged else {
            return Vec::new();
        };
        let mut gone = Vec::new();
        while let Some(s) = self.segs.front() {
            if s.last.is_some_and(|l| l > upto) {
                break;
            }
            if self.segs.len() == 1 {
                self.roll = true;
            }
            gone.push(self.segs.pop_front().expect("checked").path);
        }
        gone
    }

    /// The first index to keep when the log up to `snapshot` is in a snapshot and at most
    /// `keep_bytes` and `keep_entries` of it are kept behind the snapshot: every entry before
    /// it may be purged. `None`: nothing to purge.
    pub fn keep_from(&self, snapshot: u64, keep_bytes: u64, keep_entries: u64) -> Option<u64> {
        let top = snapshot.min(self.last_index()?);
        if top < self.first {
            return None;
        }
        let mut keep = top + 1;
        let mut bytes = 0;
        while keep > self.first && top + 1 - keep < keep_entries {
            let l = self.locs[(keep - 1 - self.first) as usize];
            bytes += REC_HEAD + u64::from(l.len);
            if bytes > keep_bytes {
                break;
            }
            keep -= 1;
        }
        (keep > self.first).then_some(keep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(i: u64) -> Vec<u8> {
        vec![(i % 251) as u8; (i % 97 + 1) as usize]
    }

    /// A log of `range` appended `per` entries at a time, segments of at least `target`.
    fn log_of(
        dir: &Path,
        range: std::ops::RangeInclusive<u64>,
        per: usize,
        target: u64,
    ) -> Segments {
        let mut s = Segments::open(dir, None).unwrap();
        s.target = target;
        let all: Vec<u64> = range.collect();
        for chunk in all.chunks(per) {
            let bs: Vec<Vec<u8>> = chunk.iter().map(|&i| bytes(i)).collect();
            s.append(chunk.iter().copied().zip(bs.iter().map(|b| b.as_slice())))
                .unwrap();
        }
        s
    }

    fn all(s: &Segments) -> Vec<u64> {
        s.read(0, None)
            .unwrap()
            .into_iter()
            .map(|(i, b)| {
                assert_eq!(b, bytes(i), "entry {i}");
                i
            })
            .collect()
    }

    fn seg_files(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v
    }

    /// Appends across many segments read back (and after a reopen) as written; appends must
    /// continue the log.
    #[test]
    fn appends_read_back_across_segments_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let s = log_of(dir.path(), 1..=300, 7, 300);
        assert!(s.segs.len() > 10, "{} segments", s.segs.len());
        assert_eq!(all(&s), (1..=300).collect::<Vec<_>>());
        assert_eq!(s.read(100, Some(103)).unwrap().len(), 3);
        drop(s);
        let mut s = Segments::open(dir.path(), None).unwrap();
        assert_eq!(all(&s), (1..=300).collect::<Vec<_>>());
        assert!(s.append([(302, &b"x"[..])]).is_err(), "a gap");
        assert!(s.append([(300, &b"x"[..])]).is_err(), "an overlap");
        s.append([(301, &bytes(301)[..])]).unwrap();
        assert_eq!(s.last_index(), Some(301));
    }

    /// A crash tears the newest segment's last record at any byte: the log opens without it,
    /// the file is cut there, and appends continue after the last whole record.
    #[test]
    fn a_torn_last_record_is_cut_at_open() {
        let dir = tempfile::tempdir().unwrap();
        drop(log_of(dir.path(), 1..=20, 1, 1 << 20));
        let path = seg_files(dir.path()).pop().unwrap();
        let whole = std::fs::read(&path).unwrap();
        let last = REC_HEAD as usize + bytes(20).len();
        for cut in 1..last {
            std::fs::write(&path, &whole[..whole.len() - cut]).unwrap();
            let mut s = Segments::open(dir.path(), None).unwrap();
            assert_eq!(s.last_index(), Some(19), "cut {cut}");
            assert_eq!(
                std::fs::metadata(&path).unwrap().len() as usize,
                whole.len() - last
            );
            s.append([(20, &bytes(20)[..])]).unwrap();
            assert_eq!(all(&s), (1..=20).collect::<Vec<_>>());
        }
        // Garbage instead of zeros after the last record: the same.
        let mut g = whole.clone();
        g.extend_from_slice(&[0xA5; 40]);
        std::fs::write(&path, &g).unwrap();
        assert_eq!(
            Segments::open(dir.path(), None).unwrap().last_index(),
            Some(20)
        );
    }

    /// What no crash leaves is refused, not read as a shorter log: a whole record after a torn
    /// one, a record out of order.
    #[test]
    fn a_log_no_crash_can_leave_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(log_of(dir.path(), 1..=60, 1, 300));
        let files = seg_files(dir.path());
        assert!(files.len() >= 3);
        // A record of the first segment garbled: later segments hold whole records.
        let mut b = std::fs::read(&files[0]).unwrap();
        let n = b.len();
        b[n - 3] ^= 0xFF;
        std::fs::write(&files[0], &b).unwrap();
        let e = Segments::open(dir.path(), None).unwrap_err();
        assert!(e.to_string().contains("after the torn end"), "{e}");
        b[n - 3] ^= 0xFF;
        std::fs::write(&files[0], &b).unwrap();
        // A segment taken out of the middle: a gap in the indexes.
        std::fs::remove_file(&files[1]).unwrap();
        let e = Segments::open(dir.path(), None).unwrap_err();
        assert!(e.to_string().contains("was due"), "{e}");
    }

    /// A record in the middle of the newest segment gone bad — a synced, reported record,
    /// with whole records after it — is no crash's trace: refused, not cut (which would drop
    /// every acknowledged record after it).
    #[test]
    fn a_bad_record_with_whole_ones_after_it_is_refused_not_cut() {
        let dir = tempfile::tempdir().unwrap();
        drop(log_of(dir.path(), 1..=20, 1, 1 << 20));
        let path = seg_files(dir.path()).pop().unwrap();
        let mut b = std::fs::read(&path).unwrap();
        // A byte of an early record's entry (the records are 17 to 113 bytes long).
        let at = SEG_HEAD as usize + 9 * (REC_HEAD as usize + bytes(1).len()) + REC_HEAD as usize;
        b[at] ^= 0xFF;
        std::fs::write(&path, &b).unwrap();
        let e = Segments::open(dir.path(), None).unwrap_err();
        assert!(e.to_string().contains("after the torn one"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b, "the file was not cut");
    }

    /// Truncate removes later segments and cuts the one holding the first removed entry, both
    /// durable; appends after it and a reopen see the new suffix only. A crash between its two
    /// steps (later segments gone, the cut not made) leaves the old log up to that segment's
    /// end: no gap, nothing out of order.
    #[test]
    fn truncate_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = log_of(dir.path(), 1..=60, 1, 300);
        let before = s.segs.len();
        s.truncate(25).unwrap();
        assert!(s.segs.len() < before);
        assert_eq!(s.last_index(), Some(24));
        let b: Vec<u8> = vec![0xEE; 9];
        s.append((25..=30).map(|i| (i, b.as_slice()))).unwrap();
        drop(s);
        let s = Segments::open(dir.path(), None).unwrap();
        let got = s.read(0, None).unwrap();
        assert_eq!(got.len(), 30);
        assert!(got[24..].iter().all(|(_, e)| e == &b));
        // The crash between the steps, as it leaves the files.
        let dir = tempfile::tempdir().unwrap();
        drop(log_of(dir.path(), 1..=60, 1, 300));
        let files = seg_files(dir.path());
        for f in &files[2..] {
            std::fs::remove_file(f).unwrap();
        }
        let s = Segments::open(dir.path(), None).unwrap();
        assert_eq!(all(&s), (1..=s.last_index().unwrap()).collect::<Vec<_>>());
        // Truncating everything, and into a segment's first record.
        let mut s = log_of(tempfile::tempdir().unwrap().path(), 1..=10, 1, 1 << 20);
        s.truncate(1).unwrap();
        assert_eq!(s.last_index(), None);
    }

    /// Purge forgets entries at or below its point and hands back the segments wholly below
    /// it; a reopen with that point skips records below it in segments not yet deleted (a crash
    /// before the deletion) and deletes those segments itself.
    #[test]
    fn purge_frees_whole_segments() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = log_of(dir.path(), 0..=99, 1, 300);
        let n = s.segs.len();
        let gone = s.purge(49);
        assert!(!gone.is_empty() && gone.len() < n);
        assert!(s.segs.front().unwrap().last.unwrap() > 49);
        assert_eq!(all(&s), (50..=99).collect::<Vec<_>>());
        // Not deleted yet (the janitor's job): a reopen with the point skips them, deletes them.
        drop(s);
        let s = Segments::open(dir.path(), Some(49)).unwrap();
        assert_eq!(all(&s), (50..=99).collect::<Vec<_>>());
        assert!(gone.iter().all(|f| !f.exists()));
        drop(s);
        // Everything purged (a snapshot installed past the end): the next append starts a
        // segment, at the index after the point.
        let mut s = Segments::open(dir.path(), Some(49)).unwrap();
        let gone = s.purge(500);
        assert_eq!(s.last_index(), None);
        for f in gone {
            std::fs::remove_file(f).unwrap();
        }
        assert!(s.append([(500, &b"x"[..])]).is_err());
        s.append([(501, &bytes(501)[..])]).unwrap();
        drop(s);
        let s = Segments::open(dir.path(), Some(500)).unwrap();
        assert_eq!(all(&s), vec![501]);
        assert_eq!(seg_files(dir.path()).len(), 1);
    }

    /// A segment whose making was cut short (only its header, or not even that) is the newest:
    /// it is deleted at open and the log goes on.
    #[test]
    fn a_segment_cut_short_while_made_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let s = log_of(dir.path(), 1..=5, 1, 1 << 20);
        let next = dir.path().join(seg_name(s.next_no));
        drop(s);
        std::fs::write(&next, b"XCESE").unwrap();
        let mut s = Segments::open(dir.path(), None).unwrap();
        assert!(!next.exists());
        assert_eq!(s.last_index(), Some(5));
        s.append([(6, &bytes(6)[..])]).unwrap();
    }

    /// What a purge may remove behind a snapshot: at most so many bytes and entries kept.
    #[test]
    fn what_is_kept_behind_a_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Segments::open(dir.path(), None).unwrap();
        let b = [0u8; 84]; // 100 bytes a record
        s.append((0..100).map(|i| (i, &b[..]))).unwrap();
        // Everything up to 79 in the snapshot; keep 1000 bytes: 70..=79 kept, 0..=69 purged.
        assert_eq!(s.keep_from(79, 1000, 10_000), Some(70));
        assert_eq!(s.keep_from(79, 1099, 10_000), Some(70));
        assert_eq!(s.keep_from(79, 100_000, 5), Some(75));
        assert_eq!(s.keep_from(79, 100_000, 10_000), None);
        assert_eq!(s.keep_from(500, 1000, 10_000), Some(90));
    }
}
