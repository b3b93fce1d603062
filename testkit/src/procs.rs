//! Real processes under test: knowing that a SIGSTOP has taken effect; reaping one in time.
//!
//! `kill(pid, SIGSTOP)` only queues the stop: a process whose threads run on other cores goes
//! on until each thread next enters the kernel, and on a loaded machine a node can still read a
//! message sent right after and answer it (a follower acknowledging an append the test meant it
//! never to see). A test that means "this node is silent now" waits for [`stopped`].

use std::time::{Duration, Instant};

/// Whether every thread of process `pid` is stopped (state `T` or `t` in
/// `/proc/PID/task/TID/stat`). `false` when the process is gone or not readable.
pub fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut any = false;
    for t in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            // A thread that exited between the listing and the read is not running either.
            continue;
        };
        any = true;
        // "TID (NAME) S ...": the state follows the last ')' (a name may hold one).
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.trim_start().chars().next());
        if !matches!(state, Some('T' | 't')) {
            return false;
        }
    }
    any
}

/// Waits until every thread of `pid` is stopped, at most `within`; whether it is.
pub fn stopped(pid: i32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if all_threads_stopped(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits up to `grace` for `child` to exit by itself, else `kill -9` and reaps it; true when
/// it exited by itself (a node sent SIGTERM: did it hand over and leave in time?).
pub fn reap_within(child: &mut std::process::Child, grace: Duration) -> bool {
    let deadline = Instant::now() + grace;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that is stopped reads as stopped once SIGSTOP took effect, and not before nor
    /// after SIGCONT.
    #[test]
    fn a_stopped_child_reads_stopped_and_a_running_one_does_not() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep(1)");
        let pid = child.id() as i32;
        assert!(!all_threads_stopped(pid));
        // SAFETY: kill(2) on our own, not yet reaped child.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        assert!(stopped(pid, Duration::from_secs(5)));
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while all_threads_stopped(pid) {
            assert!(Instant::now() < deadline, "still stopped after SIGCONT");
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(!all_threads_stopped(pid), "a reaped process is not stopped");
    }
}
