//! Time: the wall clock stamped into proposals and log lines, and `CLOCK_BOOTTIME` for
//! leases.
//!
//! C22: nothing that decides safety or exactly-once reads the wall clock. What does read it
//! (a job's times, a host's last heartbeat, token expiry, log stamps, snapshot names) goes
//! through [`now_ms`], which the failpoint `clock-offset-ms` moves (C22's tests step one
//! node's clock with it).

use std::time::Duration;

/// Wall-clock unix milliseconds (stamped into proposals by the leader), moved by the
/// failpoint `clock-offset-ms` in a build with failpoints.
pub fn now_ms() -> i64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    ms.saturating_add(
        crate::base::failpoints::number(crate::base::failpoints::CLOCK_OFFSET_MS).unwrap_or(0),
    )
}

/// An instant on `CLOCK_BOOTTIME`: unlike `CLOCK_MONOTONIC` (std and tokio `Instant`) it
/// keeps counting while the host is suspended, so a lease measured with it expires during a
/// suspend as it does for the rest of the cluster (C11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootInstant(pub(crate) Duration);

impl BootInstant {
    pub fn now() -> BootInstant {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime(2) writes one timespec we own; CLOCK_BOOTTIME exists on every
        // Linux since 2.6.39, so it cannot fail with valid arguments.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME)");
        BootInstant(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: BootInstant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    pub fn add(self, d: Duration) -> BootInstant {
        BootInstant(self.0 + d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_instant_is_boottime() {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: as in BootInstant::now.
        assert_eq!(
            unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) },
            0
        );
        let boot = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        let now = BootInstant::now().0;
        assert!(now >= boot && now - boot < Duration::from_secs(1));
    }
}
