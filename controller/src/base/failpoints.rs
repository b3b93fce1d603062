//! Failpoints: faults a test or a harness injects into a running node (the `fail` crate, as
//! TiKV uses it). Compiled in only with the cargo feature `failpoints` (the controller's own,
//! `fail/failpoints` underneath; the controller's tests and benches turn it on, a release build
//! has none: every point below is then an empty function). docs/controller.md, "Failpoints",
//! is the user's side of this list.
//!
//! Set at start with the crate's own variable, `FAILPOINTS="NAME=ACTIONS;…"`, or on a running
//! node through its metrics endpoint (`run --metrics ADDR`): `PUT /fail/NAME` with the actions
//! as the body, `DELETE /fail/NAME`, `GET /fail` lists what is set (`ports/metrics.rs`).
//! ACTIONS is the `fail` crate's syntax: `pause`, `return(ARG)`, `sleep(MS)`, `off`, with
//! `N*` (at most N times) and `P%` prefixes and `->` between alternatives.
//!
//! The names are here and nowhere else ([`NAMES`]); a name not in it is refused.

use std::io;

/// The leader's own log flush (`raft/store.rs`, the flusher thread, before the commit):
/// `pause` stalls the primary's disk (its followers' go on); `return(EIO|ENOSPC)` fails it.
pub const LOG_FLUSH: &str = "log-flush";
/// A follower's log append, its commit and fsync (`raft/store.rs`): `return(EIO|ENOSPC)`.
pub const LOG_APPEND: &str = "log-append";
/// Removing a log suffix (a follower's conflicting entries): `return(EIO|ENOSPC)`.
pub const LOG_TRUNCATE: &str = "log-truncate";
/// Deleting a log segment freed by a purge behind a snapshot (`raft/store.rs`, the purge
/// thread, per file): `return(EIO|ENOSPC)` fails it; `pause` holds it, `sleep(MS)` slows it (a
/// slow disk; C24's tests).
pub const LOG_PURGE: &str = "log-purge";
/// Saving the vote: `return(EIO|ENOSPC)`.
pub const VOTE_SAVE: &str = "vote-save";
/// Writing a snapshot file (built here, or received from the leader): `return(EIO|ENOSPC)`.
pub const SNAPSHOT_SAVE: &str = "snapshot-save";
/// Saving the cluster id this node took (C20, `cmd/run.rs`): `return(EIO|ENOSPC)`.
pub const CLUSTER_SAVE: &str = "cluster-save";
/// Writing or removing C12's marker file (`raft/amnesia.rs`): `return(EIO|ENOSPC)`.
pub const MARKER_SAVE: &str = "marker-save";
/// This node's wall clock, moved by `return(MS)` milliseconds (negative: back). C22's tests:
/// every reading of the wall clock goes through `base/clock.rs::now_ms`, which adds it.
pub const CLOCK_OFFSET_MS: &str = "clock-offset-ms";
/// C15: between a campaign's decision (pre-vote granted, no append since) and the election:
/// `pause` holds it there (defect 4's window).
pub const ELECT_CAMPAIGN: &str = "elect-campaign";
/// C15 (fifth round): between a campaign's decision (timer or early campaign) and the
/// campaign's own reading of the Raft state: `pause` holds it there (issue 35 defect 2's
/// window: an append accepted there must call the campaign off).
pub const ELECT_DECIDED: &str = "elect-decided";
/// On a leader: its appends to node `return(N)` are dropped, unsent, as if the link to it
/// were cut (`raft/link.rs`). Tests: one follower that stops hearing a live leader.
pub const REPL_DROP: &str = "repl-drop";
/// On a leader: no append carries an entry past index `return(N)` (`raft/link.rs`); the
/// followers' logs stop there until it is cleared. C12's test: a follower's partial log.
pub const REPL_MAX_INDEX: &str = "repl-max-index";
/// C15 (amended): the adaptive lease set to `return(MS)` (within election-max and the
/// ceiling, `raft/pace.rs`): tests drive the adaptive timings to their bounds with it.
pub const PACE_LEASE_MS: &str = "pace-lease-ms";
/// C10: on a leader, `return` makes the followers' answers to appends count for nothing in its
/// lease bookkeeping (`raft/link.rs`): it hears no quorum, as on a congested link, while
/// replication and commits go on. Tests hold a quorum's silence for as long as they choose.
pub const LEASE_DEAF: &str = "lease-deaf";
/// C20: `pause` holds this node's taking of its cluster's id (applied from the log) until
/// the failpoint is cleared (`cmd/run.rs`); the node goes on unstamped meanwhile, as a fresh
/// standby does for a few appends. C16's test: a standby that forwards before it has the id.
pub const CLUSTER_ADOPT: &str = "cluster-adopt";
/// C21 (issue 39): the state machine's apply of committed entries (openraft's apply path,
/// `raft/store.rs`): `panic(MSG)` panics there.
pub const SM_APPLY: &str = "sm-apply";
/// C21 (issue 39): a tokio task of the node's own, reached every 25 ms (`cmd/run.rs`, the
/// cut-off watcher): `panic(MSG)` panics there.
pub const TASK_TICK: &str = "task-tick";

/// Every failpoint: its name and what it does.
pub const NAMES: &[(&str, &str)] = &[
    (
        LOG_FLUSH,
        "the leader's own log flush (its thread): pause, return(EIO|ENOSPC), panic(MSG)",
    ),
    (
        LOG_APPEND,
        "a follower's log append (commit, fsync): return(EIO|ENOSPC)",
    ),
    (LOG_TRUNCATE, "removing a log suffix: return(EIO|ENOSPC)"),
    (
        LOG_PURGE,
        "deleting a purged log segment: return(EIO|ENOSPC), pause, sleep(MS)",
    ),
    (VOTE_SAVE, "saving the vote: return(EIO|ENOSPC)"),
    (SNAPSHOT_SAVE, "writing a snapshot file: return(EIO|ENOSPC)"),
    (
        CLUSTER_SAVE,
        "saving the cluster id taken from the log: return(EIO|ENOSPC)",
    ),
    (
        MARKER_SAVE,
        "writing or removing the C12 marker: return(EIO|ENOSPC)",
    ),
    (CLOCK_OFFSET_MS, "the wall clock moved by return(MS)"),
    (
        ELECT_CAMPAIGN,
        "between a campaign's decision and the election: pause",
    ),
    (
        ELECT_DECIDED,
        "between a campaign's decision and its own reading of the state: pause",
    ),
    (
        REPL_DROP,
        "a leader's appends to node return(N) are dropped, unsent",
    ),
    (
        REPL_MAX_INDEX,
        "a leader's appends carry no entry past return(N)",
    ),
    (
        PACE_LEASE_MS,
        "the adaptive lease set to return(MS), within its bounds",
    ),
    (
        CLUSTER_ADOPT,
        "taking the cluster's id from the log: pause (held until cleared)",
    ),
    (
        LEASE_DEAF,
        "a leader counts no answer to its appends as heard: return",
    ),
    (SM_APPLY, "the state machine's apply of entries: panic(MSG)"),
    (
        TASK_TICK,
        "a tokio task of the node, every 25 ms: panic(MSG)",
    ),
];

/// Whether this build has failpoints (the `failpoints` feature).
pub const fn enabled() -> bool {
    fail::has_failpoints()
}

/// Whether `name` is one of [`NAMES`].
pub fn known(name: &str) -> bool {
    NAMES.iter().any(|(n, _)| *n == name)
}

/// Sets `name` to `actions` (the `fail` crate's syntax); refuses unknown names, bad actions
/// and builds without failpoints.
pub fn set(name: &str, actions: &str) -> Result<(), String> {
    if !enabled() {
        return Err("this build has no failpoints (cargo feature `failpoints`)".into());
    }
    if !known(name) {
        return Err(format!("no failpoint {name:?}"));
    }
    fail::cfg(name, actions.trim())?;
    eprintln!("failpoint {name} set: {}", actions.trim());
    Ok(())
}

/// Clears `name` (a paused point goes on).
pub fn clear(name: &str) -> Result<(), String> {
    if !known(name) {
        return Err(format!("no failpoint {name:?}"));
    }
    fail::remove(name);
    eprintln!("failpoint {name} cleared");
    Ok(())
}

/// What is set: `NAME=ACTIONS` lines.
pub fn list() -> String {
    let mut set: Vec<String> = fail::list()
        .into_iter()
        .map(|(n, a)| format!("{n}={a}\n"))
        .collect();
    set.sort();
    set.concat()
}

/// `FAILPOINTS="NAME=ACTIONS;…"` (the `fail` crate's variable), read once at start. Without
/// the feature a set variable is refused, so a harness never believes a fault was injected.
pub fn from_env() -> Result<(), String> {
    let Ok(spec) = std::env::var("FAILPOINTS") else {
        return Ok(());
    };
    for item in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, actions) = item
            .split_once('=')
            .ok_or_else(|| format!("FAILPOINTS: {item:?} is not NAME=ACTIONS"))?;
        set(name.trim(), actions).map_err(|e| format!("FAILPOINTS: {e}"))?;
    }
    Ok(())
}

/// Whether `name` is set to anything (a pause is about to be taken: said in the log, so a
/// test waits for that line instead of guessing).
pub fn armed(name: &str) -> bool {
    enabled() && fail::list().iter().any(|(n, a)| n == name && !a.is_empty())
}

#[allow(dead_code)] // used only where failpoints are compiled in
/// The I/O error a storage failpoint returns: `return(ENOSPC)`, `return(EIO)` (the default)
/// or any errno number.
fn io_error(arg: Option<String>) -> io::Error {
    let code = match arg.as_deref().map(str::trim) {
        Some("ENOSPC") => libc::ENOSPC,
        Some("EDQUOT") => libc::EDQUOT,
        Some(n) => n.parse().unwrap_or(libc::EIO),
        None => libc::EIO,
    };
    io::Error::from_raw_os_error(code)
}

/// A storage failpoint: `Err` when `name` returns (its errno), after a pause or sleep if
/// asked. Blocks the calling thread while paused.
#[allow(unused_variables)]
pub fn storage(name: &str) -> io::Result<()> {
    if armed(name) {
        eprintln!("failpoint {name} reached");
    }
    fail::fail_point!(name, |arg| Err(io_error(arg)));
    Ok(())
}

/// A pause point on the runtime: the paused task's worker hands its other tasks on first
/// (`block_in_place`), so the node goes on answering while this task waits.
#[allow(unused_variables)]
pub fn pause_in_task(name: &str) {
    if !armed(name) {
        return;
    }
    eprintln!("failpoint {name} reached");
    let pause = || fail::fail_point!(name);
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(pause)
        }
        _ => pause(),
    }
}

/// Blocks the calling thread while `name` is paused (`pause`); at once otherwise. For a plain
/// thread (not a runtime task).
#[allow(unused_variables)]
pub fn hold(name: &str) {
    if armed(name) {
        eprintln!("failpoint {name} reached");
    }
    fail::fail_point!(name);
}

/// A point where `panic(MSG)` panics (C21's tests: a panic anywhere ends the process).
#[allow(unused_variables)]
pub fn crash_point(name: &str) {
    fail::fail_point!(name);
}

/// A number a failpoint returns (`return(N)`), if set.
#[allow(unused_variables)]
pub fn number(name: &str) -> Option<i64> {
    let read = || -> Option<i64> {
        fail::fail_point!(name, |arg: Option<String>| arg
            .and_then(|a| a.trim().parse().ok()));
        None
    };
    if enabled() {
        read()
    } else {
        None
    }
}

/// Whether `name` is set to `return` (with or without an argument).
#[allow(unused_variables)]
pub fn returns(name: &str) -> bool {
    let read = || -> bool {
        fail::fail_point!(name, |_| true);
        false
    };
    enabled() && read()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_io_errors_are_the_asked_errno() {
        let mut names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NAMES.len());
        assert_eq!(
            io_error(Some("ENOSPC".into())).raw_os_error(),
            Some(libc::ENOSPC)
        );
        assert_eq!(io_error(None).raw_os_error(), Some(libc::EIO));
        assert_eq!(io_error(Some("5".into())).raw_os_error(), Some(5));
        assert!(set("no-such-point", "off").is_err());
    }
}
