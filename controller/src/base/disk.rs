//! C24: the disk is visible and guarded.
//!
//! Visible: the bytes the data directory holds on disk — every file the node keeps there,
//! whatever the store names them, in blocks actually allocated (a sparse or preallocated file
//! counts what it uses) — and the free space of its filesystem (`statvfs`, what the node's
//! user may still write). Metrics (`xce_db_size_bytes`, `xce_disk_free_bytes`), `status`.
//!
//! Guarded, before the disk is full (etcd's `--quota-backend-bytes` and its NOSPACE alarm):
//! once the data directory holds more than the quota (`--quota-bytes`), or its filesystem has
//! less free than the floor (`--disk-floor-bytes`), the NOSPACE alarm is raised — a log line
//! when it is raised and when it clears, the metric `xce_nospace_alarm`, `status`'s alarms —
//! and the primary refuses new work (a job submission, a task) with `-E_XCE_NOSPACE`, before
//! it reaches the log. Everything else goes on: reads, kills, notifications and heartbeats (they
//! finish work already admitted), joins, queue and host control, membership, snapshots and the
//! log's purge behind them (the space comes back there). A node started with less free space
//! than the floor exits at once with status 74 (C21's), saying why: under `Restart=on-failure`
//! a crash loop on a full disk says what it is.
//!
//! Measured on demand, at most every [`FRESH`]: a few `stat`s and one `statvfs`, off the hot
//! path of reads. The quota is a guard, not a guarantee to the byte: writes admitted before a
//! measurement that crossed it still land, which is what the floor below the quota is for.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a measurement is used before the disk is measured again.
pub const FRESH: Duration = Duration::from_millis(250);
/// Default quota: the smaller of this and [`DEFAULT_QUOTA_SHARE`] of the filesystem.
pub const DEFAULT_QUOTA_MAX: u64 = 8 << 30;
/// Default quota's share of the data directory's filesystem (its size), in percent.
pub const DEFAULT_QUOTA_SHARE: u64 = 50;
/// Default floor: the larger of this and [`DEFAULT_FLOOR_SHARE`] of the filesystem, at most
/// [`DEFAULT_FLOOR_MAX`].
pub const DEFAULT_FLOOR_MIN: u64 = 32 << 20;
/// Default floor's share of the filesystem, in percent.
pub const DEFAULT_FLOOR_SHARE: u64 = 1;
/// Most the default floor asks for: room for a few snapshots of a large table and the writes
/// admitted between two measurements, without refusing to start on a big disk that is merely
/// busy.
pub const DEFAULT_FLOOR_MAX: u64 = 256 << 20;

/// The data directory and its filesystem, measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes on disk of every file in the data directory (and its subdirectories).
    pub db_bytes: u64,
    /// Free bytes of its filesystem for an unprivileged writer (`f_bavail`).
    pub free_bytes: u64,
    /// The filesystem's size.
    pub fs_bytes: u64,
}

/// Measures `dir` (or, while it does not exist yet, its nearest existing ancestor's
/// filesystem, with nothing in it).
pub fn measure(dir: &Path) -> std::io::Result<Usage> {
    let mut at = dir.to_path_buf();
    while !at.exists() {
        match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => at = p.to_path_buf(),
            _ => {
                at = PathBuf::from(".");
                break;
            }
        }
    }
    let (free_bytes, fs_bytes) = statvfs(&at)?;
    let db_bytes = if at == dir { du(dir)? } else { 0 };
    Ok(Usage {
        db_bytes,
        free_bytes,
        fs_bytes,
    })
}

/// Bytes allocated on disk under `dir` (`st_blocks` × 512; a file removed meanwhile counts 0).
fn du(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    for e in std::fs::read_dir(dir)? {
        let Ok(e) = e else { continue };
        let Ok(m) = e.metadata() else { continue };
        if m.is_dir() {
            total = total.saturating_add(du(&e.path()).unwrap_or(0));
        }
        total = total.saturating_add(m.blocks().saturating_mul(512));
    }
    Ok(total)
}

/// Free bytes (for the node's user) and size of the filesystem holding `p`.
fn statvfs(p: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: an all-zero statvfs is a valid value of the plain C struct it is.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statvfs for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let unit = st.f_frsize as u64;
    Ok((
        (st.f_bavail as u64).saturating_mul(unit),
        (st.f_blocks as u64).saturating_mul(unit),
    ))
}

/// The defaults sized from the filesystem (`fs_bytes`): the quota and the floor.
pub fn defaults(fs_bytes: u64) -> (u64, u64) {
    let quota = (fs_bytes / 100 * DEFAULT_QUOTA_SHARE).min(DEFAULT_QUOTA_MAX);
    let floor = (fs_bytes / 100 * DEFAULT_FLOOR_SHARE).clamp(DEFAULT_FLOOR_MIN, DEFAULT_FLOOR_MAX);
    (quota, floor)
}

/// Why the NOSPACE alarm is raised for `u`, if it is: past the quota, or below the floor.
/// Pure: a table test below.
pub fn judge(u: &Usage, quota: u64, floor: u64) -> Option<String> {
    if u.db_bytes > quota {
        Some(format!(
            "NOSPACE: the data directory holds {} on disk, past the quota of {} \
             (--quota-bytes): new work is refused until space is freed (C24)",
            bytes(u.db_bytes),
            bytes(quota)
        ))
    } else if u.free_bytes < floor {
        Some(format!(
            "NOSPACE: the data directory's filesystem has {} free, below the floor of {} \
             (--disk-floor-bytes): new work is refused until space is freed (C24)",
            bytes(u.free_bytes),
            bytes(floor)
        ))
    } else {
        None
    }
}

/// A byte count for a person: `170.2 MiB (178466816 bytes)`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} bytes")
    } else {
        format!("{v:.1} {} ({n} bytes)", UNITS[u])
    }
}

/// The node's guard: its data directory, quota and floor, the last measurement and alarm.
pub struct Guard {
    dir: PathBuf,
    pub quota: u64,
    pub floor: u64,
    last: Mutex<Last>,
}

struct Last {
    at: Option<Instant>,
    usage: Usage,
    alarm: Option<String>,
}

static GUARD: OnceLock<Guard> = OnceLock::new();

/// C24 at start: measures `dir`, sets the quota and the floor (`None`: sized from the
/// filesystem, [`defaults`]) and installs the node's guard. `Err`: why the node must not start
/// (its filesystem has less free than the floor, or cannot be measured).
pub fn start(dir: &Path, quota: Option<u64>, floor: Option<u64>) -> Result<&'static Guard, String> {
    let u = measure(dir).map_err(|e| format!("{}: cannot measure its disk: {e}", dir.display()))?;
    let (dq, df) = defaults(u.fs_bytes);
    let (quota, floor) = (quota.unwrap_or(dq), floor.unwrap_or(df));
    if u.free_bytes < floor {
        return Err(format!(
            "disk full: the filesystem of {} has {} free, below the floor of {} \
             (--disk-floor-bytes): free space (or move the data directory), then start again \
             (C24)",
            dir.display(),
            bytes(u.free_bytes),
            bytes(floor)
        ));
    }
    let g = GUARD.get_or_init(|| Guard {
        dir: dir.to_path_buf(),
        quota,
        floor,
        last: Mutex::new(Last {
            at: None,
            usage: u,
            alarm: None,
        }),
    });
    g.check();
    Ok(g)
}

/// The node's guard, once [`start`] installed it.
pub fn guard() -> Option<&'static Guard> {
    GUARD.get()
}

/// The NOSPACE alarm of this node, if raised (measured again when stale).
pub fn alarm() -> Option<String> {
    guard().and_then(Guard::check)
}

impl Guard {
    /// The latest measurement (measured again when older than [`FRESH`]).
    pub fn usage(&self) -> Usage {
        self.check();
        self.last.lock().expect("disk guard").usage
    }

    /// Measures now, whatever the last measurement's age: the node's stores were just made
    /// (at start the data directory may not exist yet, and measured empty).
    pub fn remeasure(&self) -> Option<String> {
        self.last.lock().expect("disk guard").at = None;
        self.check()
    }

    /// Measures again when stale; the alarm's reason if raised. A change of the alarm is a
    /// log line and the metric.
    pub fn check(&self) -> Option<String> {
        let mut l = self.last.lock().expect("disk guard");
        if l.at.is_some_and(|t| t.elapsed() < FRESH) {
            return l.alarm.clone();
        }
        l.at = Some(Instant::now());
        match measure(&self.dir) {
            Ok(u) => l.usage = u,
            // Keep the last measurement: a failed stat is no news about space.
            Err(e) => crate::log_warn!("disk: {}: {e}", self.dir.display()),
        }
        let alarm = judge(&l.usage, self.quota, self.floor);
        if alarm != l.alarm {
            match &alarm {
                Some(why) => crate::log_error!("{why}"),
                None => crate::log_warn!(
                    "NOSPACE cleared: the data directory holds {}, {} free: new work is \
                     accepted again",
                    bytes(l.usage.db_bytes),
                    bytes(l.usage.free_bytes)
                ),
            }
            crate::base::counters::nospace(alarm.is_some());
            l.alarm = alarm.clone();
        }
        alarm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alarm_is_past_the_quota_or_below_the_floor() {
        let u = |db, free| Usage {
            db_bytes: db,
            free_bytes: free,
            fs_bytes: 10 << 30,
        };
        let (q, f) = (1 << 30, 100 << 20);
        let cases = [
            ("well inside", u(10 << 20, 5 << 30), None),
            ("at the quota", u(1 << 30, 5 << 30), None),
            (
                "past the quota",
                u((1 << 30) + 1, 5 << 30),
                Some("past the quota"),
            ),
            ("at the floor", u(1 << 20, 100 << 20), None),
            (
                "below the floor",
                u(1 << 20, (100 << 20) - 1),
                Some("below the floor"),
            ),
        ];
        for (what, usage, want) in cases {
            let got = judge(&usage, q, f);
            match want {
                None => assert_eq!(got, None, "{what}"),
                Some(w) => assert!(got.as_deref().is_some_and(|g| g.contains(w)), "{what}"),
            }
        }
    }

    #[test]
    fn defaults_follow_the_filesystem() {
        // 4 GB: half of it, 1 % of it (40 MB).
        assert_eq!(defaults(4_000_000_000), (2_000_000_000, 40_000_000));
        // 1 TiB: the quota's and the floor's caps.
        assert_eq!(defaults(1 << 40), (DEFAULT_QUOTA_MAX, DEFAULT_FLOOR_MAX));
        // 1 GiB: the floor's minimum.
        assert_eq!(defaults(1 << 30).1, DEFAULT_FLOOR_MIN);
    }

    #[test]
    fn a_directory_is_measured_with_every_file_in_it() {
        let d = tempfile::tempdir().unwrap();
        let empty = measure(d.path()).unwrap();
        std::fs::write(d.path().join("a"), vec![7u8; 64 << 10]).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/b"), vec![7u8; 64 << 10]).unwrap();
        let two = measure(d.path()).unwrap();
        assert!(two.db_bytes >= empty.db_bytes + (128 << 10), "{two:?}");
        assert!(
            two.free_bytes > 0 && two.fs_bytes >= two.free_bytes,
            "{two:?}"
        );
        // Not there yet: its parent's filesystem, nothing in it.
        let absent = measure(&d.path().join("new/data")).unwrap();
        assert_eq!(absent.db_bytes, 0);
        assert!(absent.fs_bytes > 0);
        assert_eq!(bytes(512), "512 bytes");
        assert_eq!(bytes(3 << 20), "3.0 MiB (3145728 bytes)");
    }
}
