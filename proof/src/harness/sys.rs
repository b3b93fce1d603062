//! Small process facts the scenarios and the bench both need.

use std::time::Duration;

/// Raises the soft limit on open files to `want` (capped by the hard limit): a crowd of
/// contexts holds one socket each, plus their reconnects.
pub fn raise_fd_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a pointer to a live, properly typed struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// CPU time (user + system) consumed by the calling thread so far: "no spin" checks.
pub fn thread_cpu_time() -> Duration {
    // SAFETY: getrusage writes one rusage into the live, zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD reports the calling thread only (Linux).
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    assert_eq!(rc, 0, "getrusage");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Waits up to `grace` for `child` to exit by itself, else `kill -9` (the test kit's).
pub use xce_testkit::procs::reap_within;
