//! The snapshot file (P12): one file per node, `DIR/snapshot.bin`, written beside as a
//! temporary, fsynced and renamed over the old one, so a crash leaves either snapshot whole.
//!
//! ```text
//! "XCESNAP1"
//! u32 LE length, JSON of openraft's SnapshotMeta
//! u32 LE length, JSON of the state's Header (hosts, queues, tasks, exactly-once table)
//! u64 LE job count, then each job in a compact binary form (LEB128 varints, zigzag for
//!         signed numbers, texts as varint length + UTF-8)
//! "XCEEND01"
//! ```
//!
//! A typical job takes about 100 bytes here (JSON of the same job: about 300). The file is
//! written from an O(1) clone of the job table without holding the state lock, and read and
//! sent to a follower as a stream: neither side holds the whole snapshot in memory.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::base::background::PacedFile;
use crate::base::ids::SnapshotMeta;
use crate::sm::state::{Header, Interner, JobRec, JobState, State};

const MAGIC: &[u8; 8] = b"XCESNAP1";
const END: &[u8; 8] = b"XCEEND01";
/// Largest JSON part or text accepted when reading (a peer's file is checked like input).
const MAX_PART: u64 = 1 << 30;

/// The current snapshot file of a node's data directory.
pub fn current_path(dir: &Path) -> PathBuf {
    dir.join("snapshot.bin")
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("snapshot: {what}"))
}

fn put_varint(w: &mut impl Write, mut v: u64) -> io::Result<()> {
    let mut buf = [0u8; 10];
    let mut n = 0;
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf[n] = b;
            n += 1;
            break;
        }
        buf[n] = b | 0x80;
        n += 1;
    }
    w.write_all(&buf[..n])
}

fn put_signed(w: &mut impl Write, v: i64) -> io::Result<()> {
    put_varint(w, ((v << 1) ^ (v >> 63)) as u64)
}

fn put_str(w: &mut impl Write, s: &str) -> io::Result<()> {
    put_varint(w, s.len() as u64)?;
    w.write_all(s.as_bytes())
}

fn get_u8(r: &mut impl Read) -> io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}

fn get_varint(r: &mut impl Read) -> io::Result<u64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = get_u8(r)?;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(bad("varint too long"))
}

fn get_signed(r: &mut impl Read) -> io::Result<i64> {
    let v = get_varint(r)?;
    Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
}

fn get_string(r: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<()> {
    let n = get_varint(r)?;
    if n > MAX_PART {
        return Err(bad("text too long"));
    }
    buf.clear();
    r.take(n).read_to_end(buf)?;
    if buf.len() as u64 != n {
        return Err(bad("truncated text"));
    }
    std::str::from_utf8(buf).map_err(|_| bad("text is not UTF-8"))?;
    Ok(())
}

fn get_str<'a>(r: &mut impl Read, buf: &'a mut Vec<u8>) -> io::Result<&'a str> {
    get_string(r, buf)?;
    // Checked in get_string.
    std::str::from_utf8(buf).map_err(|_| bad("text is not UTF-8"))
}

fn put_json(w: &mut impl Write, v: &impl serde::Serialize) -> io::Result<()> {
    let bytes = serde_json::to_vec(v).map_err(io::Error::other)?;
    let n = u32::try_from(bytes.len()).map_err(|_| bad("part too large"))?;
    w.write_all(&n.to_le_bytes())?;
    w.write_all(&bytes)
}

fn get_json<T: for<'a> serde::Deserialize<'a>>(r: &mut impl Read) -> io::Result<T> {
    let mut n = [0u8; 4];
    r.read_exact(&mut n)?;
    let n = u64::from(u32::from_le_bytes(n));
    let mut buf = Vec::new();
    r.take(n).read_to_end(&mut buf)?;
    if buf.len() as u64 != n {
        return Err(bad("truncated part"));
    }
    serde_json::from_slice(&buf).map_err(|e| bad(&e.to_string()))
}

fn state_code(s: JobState) -> u8 {
    match s {
        JobState::Pend => 0,
        JobState::Run => 1,
        JobState::Susp => 2,
        JobState::Done => 3,
        JobState::Exit => 4,
    }
}

fn state_of(c: u8) -> io::Result<JobState> {
    Ok(match c {
        0 => JobState::Pend,
        1 => JobState::Run,
        2 => JobState::Susp,
        3 => JobState::Done,
        4 => JobState::Exit,
        _ => return Err(bad("unknown job state")),
    })
}

fn put_job(w: &mut impl Write, j: &JobRec) -> io::Result<()> {
    put_varint(w, j.job_id)?;
    put_varint(w, j.mem_mb)?;
    put_signed(w, j.submit_time)?;
    put_signed(w, j.start_time)?;
    put_signed(w, j.end_time)?;
    put_varint(w, j.cpu_ms)?;
    put_varint(w, j.mem_kb)?;
    put_varint(w, u64::from(j.ncpus))?;
    put_signed(w, i64::from(j.exit_code))?;
    w.write_all(&[state_code(j.state)])?;
    for s in [&j.user, &j.queue, &j.exec_host, &j.pend_reason] {
        put_str(w, s)?;
    }
    put_str(w, &j.name)?;
    put_str(w, &j.command)
}

fn get_job(r: &mut impl Read, strings: &mut Interner, buf: &mut Vec<u8>) -> io::Result<JobRec> {
    let job_id = get_varint(r)?;
    let mem_mb = get_varint(r)?;
    let submit_time = get_signed(r)?;
    let start_time = get_signed(r)?;
    let end_time = get_signed(r)?;
    let cpu_ms = get_varint(r)?;
    let mem_kb = get_varint(r)?;
    let ncpus = u32::try_from(get_varint(r)?).map_err(|_| bad("ncpus"))?;
    let exit_code = i32::try_from(get_signed(r)?).map_err(|_| bad("exit code"))?;
    let state = state_of(get_u8(r)?)?;
    let user = strings.get(get_str(r, buf)?);
    let queue = strings.get(get_str(r, buf)?);
    let exec_host = strings.get(get_str(r, buf)?);
    let pend_reason = strings.get(get_str(r, buf)?);
    let name = get_str(r, buf)?.into();
    let command = get_str(r, buf)?.into();
    Ok(JobRec {
        job_id,
        mem_mb,
        submit_time,
        start_time,
        end_time,
        cpu_ms,
        mem_kb,
        ncpus,
        exit_code,
        state,
        user,
        queue,
        exec_host,
        pend_reason,
        name,
        command,
    })
}

/// What a snapshot file is written from: taken under the state lock in O(size of the small
/// parts); the job table is shared, not copied.
pub struct View {
    pub meta: SnapshotMeta,
    header: Header,
    jobs: imbl::OrdMap<u64, JobRec>,
}

impl View {
    pub fn of(meta: SnapshotMeta, state: &State) -> View {
        View {
            meta,
            header: state.header(),
            jobs: state.jobs.clone(),
        }
    }

    /// Writes the snapshot to `path` (a temporary next to its final name) and fsyncs it, its
    /// bytes sent to the disk a step at a time as they are written (C24,
    /// `base/background.rs`: the node's log fsyncs never queue behind the whole file).
    /// Returns its size in bytes.
    pub fn write(&self, path: &Path) -> io::Result<u64> {
        let f = PacedFile::new(File::create(path)?);
        let mut w = BufWriter::with_capacity(1 << 20, f);
        self.write_to(&mut w)?;
        let f = w.into_inner().map_err(|e| e.into_error())?.into_inner();
        f.sync_all()?;
        f.metadata().map(|m| m.len())
    }

    /// Writes the snapshot to `w` (a file of its own, or a backup's tail: `backup.rs`).
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(MAGIC)?;
        put_json(w, &self.meta)?;
        put_json(w, &self.header)?;
        w.write_all(&(self.jobs.len() as u64).to_le_bytes())?;
        for j in self.jobs.values() {
            put_job(w, j)?;
        }
        w.write_all(END)
    }
}

/// Moves a complete, fsynced snapshot file to `DIR/snapshot.bin` (and makes the rename
/// durable).
pub fn install_file(tmp: &Path, dir: &Path) -> io::Result<()> {
    std::fs::rename(tmp, current_path(dir))?;
    File::open(dir)?.sync_all()
}

/// Reads only the meta of a snapshot file.
pub fn read_meta(path: &Path) -> io::Result<SnapshotMeta> {
    let mut r = BufReader::new(File::open(path)?);
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(bad("not a snapshot file"));
    }
    get_json(&mut r)
}

/// Reads a whole snapshot file back into a state.
pub fn read(path: &Path) -> io::Result<(SnapshotMeta, State)> {
    read_from(&mut BufReader::with_capacity(1 << 20, File::open(path)?))
}

/// Reads a snapshot from `r` (a file of its own, or a backup's tail).
pub fn read_from(r: &mut impl Read) -> io::Result<(SnapshotMeta, State)> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(bad("not a snapshot file"));
    }
    let meta: SnapshotMeta = get_json(r)?;
    let header: Header = get_json(r)?;
    let mut n = [0u8; 8];
    r.read_exact(&mut n)?;
    let n = u64::from_le_bytes(n);
    let mut strings = Interner::default();
    let mut buf = Vec::new();
    let mut jobs = imbl::OrdMap::new();
    for _ in 0..n {
        let j = get_job(r, &mut strings, &mut buf)?;
        jobs.insert(j.job_id, j);
    }
    r.read_exact(&mut magic)?;
    if &magic != END {
        return Err(bad("no end mark"));
    }
    Ok((meta, State::from_parts(header, jobs, strings)))
}

/// Raft's snapshot data: an open snapshot file (see this module). A snapshot being
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

    pub(crate) fn open(path: PathBuf) -> std::io::Result<SnapFile> {
        let file = std::fs::File::open(&path)?;
        Ok(SnapFile { path, file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sm::state::{Cmd, Proposal, SubmitSpec};

    #[test]
    fn round_trip() {
        let mut s = State::default();
        for id in 1..=500u64 {
            let spec = SubmitSpec {
                job_id: id,
                name: format!("j{id}"),
                user: format!("u{}", id % 7),
                queue: String::new(),
                command: "sleep 1 ✓".into(),
                ncpus: 2,
                mem_mb: 1 << 40,
            };
            s.apply(&Proposal {
                client_id: [1; 16],
                request_id: id,
                now_ms: -5,
                cmd: Cmd::JobSubmit(spec),
            });
        }
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("snap.tmp");
        let meta = SnapshotMeta::default();
        View::of(meta.clone(), &s).write(&tmp).unwrap();
        install_file(&tmp, dir.path()).unwrap();
        let (m2, s2) = read(&current_path(dir.path())).unwrap();
        assert_eq!(m2, meta);
        assert_eq!(read_meta(&current_path(dir.path())).unwrap(), meta);
        assert_eq!(s2.jobs, s.jobs);
        assert_eq!(s2.header(), s.header());
        // Interned: equal users share one allocation.
        let a = &s2.jobs[&1].user;
        let b = &s2.jobs[&8].user;
        assert!(std::sync::Arc::ptr_eq(a, b));
        // A truncated file is an error, not a short state.
        let bytes = std::fs::read(current_path(dir.path())).unwrap();
        std::fs::write(&tmp, &bytes[..bytes.len() - 20]).unwrap();
        assert!(read(&tmp).is_err());
    }
}
