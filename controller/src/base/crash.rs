//! C21 (issue 39): a panic anywhere ends the process, and so does a Raft core that stopped
//! when this node did not stop it.
//!
//! Before, a panic on any thread but the main one ended that thread or that tokio task and
//! nothing else: a node whose Raft core had panicked went on answering clients as a standby
//! with no primary, voted in nothing, and a supervisor's `Restart=on-failure` never fired
//! (it only sees an exit). Now [`install`] sets a panic hook for `run`: the panic's message,
//! where it happened and the thread's name are logged once, through the logger (JSON when
//! asked, to `--log-file` when given), and the process ends with [`EXIT_SOFTWARE`] from inside
//! the hook — before any unwinding, so no destructor, flush or handover runs and the disk is
//! not touched again, as for a `kill -9`. The others fail over as for a crash; what was
//! acknowledged is on disk (every acknowledged write was fsynced first), and C19 (a restarted
//! node never resumes its old term) and C12 do the rest at the restart.
//!
//! A Raft core that ended by itself is the same fault ([`core_ended`]): nothing keeps serving
//! from a node whose Raft has stopped. The only stops that are not faults are the node's own
//! (a signal's shutdown, a removed or diverged node — C19's diverged node stays up to say so),
//! each announced first with [`stopping`].
//!
//! The library (`libxce`) keeps its own rule — a panic never crosses the C boundary — and has
//! nothing of this.

use std::sync::atomic::{AtomicBool, Ordering};

/// The exit status of a node ended by a panic or by a Raft core that stopped by itself
/// (sysexits' `EX_SOFTWARE`).
pub const EXIT_SOFTWARE: i32 = 70;

/// The node stops its Raft core itself (a shutdown, a removal, C19's divergence).
static STOPPING: AtomicBool = AtomicBool::new(false);
/// A panic is being reported: a second one (another thread, at the same time) only waits.
static ENDING: AtomicBool = AtomicBool::new(false);

/// Sets the panic hook of a running node: log once, then exit with [`EXIT_SOFTWARE`].
pub fn install() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed").to_string();
        let msg = payload(info.payload());
        let at = info
            .location()
            .map_or_else(|| "an unknown place".to_string(), |l| l.to_string());
        let mut text = format!(
            "panic on thread '{name}' at {at}: {msg}: this node exits with status \
             {EXIT_SOFTWARE} (C21)"
        );
        let bt = std::backtrace::Backtrace::capture();
        if bt.status() == std::backtrace::BacktraceStatus::Captured {
            text.push_str(&format!("\n{bt}"));
        }
        end(&text, &name);
    }));
}

/// Says that the node itself stops its Raft core from here on: the core's end is no fault.
pub fn stopping() {
    STOPPING.store(true, Ordering::SeqCst);
}

/// What the end of a Raft core means for the process.
#[derive(Debug, PartialEq, Eq)]
pub enum CoreEnd {
    /// The node stopped it (a shutdown, a removal, a divergence): nothing more to do.
    Ours,
    /// It failed on its storage: C21's storage fault (`fault::record`, exit 74).
    Storage(String),
    /// It ended by itself (a panic, a stop nobody asked for): the
    /// process ends with [`EXIT_SOFTWARE`].
    Software(String),
}

/// Judges a Raft core's end from its last running state (`Ok` or a `Fatal`'s text and kind)
/// and whether the node had announced a stop of its own.
pub fn judge_core_end(state: Result<(), FatalKind>, ours: bool) -> CoreEnd {
    match state {
        Err(FatalKind::Storage(e)) => CoreEnd::Storage(e),
        Err(FatalKind::Panicked) => CoreEnd::Software("raft core panicked".into()),
        Ok(()) | Err(FatalKind::Stopped) if ours => CoreEnd::Ours,
        Ok(()) | Err(FatalKind::Stopped) => {
            CoreEnd::Software("raft core stopped, and this node did not stop it".into())
        }
    }
}

/// A Raft core's fatal error, by kind (openraft's `Fatal`, without its types).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FatalKind {
    Storage(String),
    Panicked,
    Stopped,
}

/// The Raft core ended, with `state` its last: a storage fault is recorded (exit 74 follows),
/// any end the node did not ask for ends the process now.
pub fn core_ended(state: Result<(), FatalKind>, id: u64, data: &std::path::Path) {
    match judge_core_end(state, STOPPING.load(Ordering::SeqCst)) {
        CoreEnd::Ours => {}
        CoreEnd::Storage(e) => {
            crate::log_error!("node {id}: raft stopped: {e}");
            crate::base::fault::record("raft", data, &e);
        }
        CoreEnd::Software(why) => end(
            &format!("node {id}: {why}: this node exits with status {EXIT_SOFTWARE} (C21)"),
            "raft",
        ),
    }
}

/// Logs `text` once and ends the process with [`EXIT_SOFTWARE`], touching nothing else.
fn end(text: &str, thread: &str) -> ! {
    if ENDING.swap(true, Ordering::SeqCst) {
        // Another thread is saying why and ending the process: wait for it.
        loop {
            std::thread::park();
        }
    }
    crate::base::logstamp::write_last(text, thread == crate::base::logstamp::THREAD);
    // SAFETY: _exit(2) ends the process at once: no atexit handler, destructor or flush.
    unsafe { libc::_exit(EXIT_SOFTWARE) }
}

/// A panic's message (`&str` or `String` payloads; anything else is named as such).
fn payload(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a payload that is not text)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_stop_the_node_asked_for_leaves_it_running() {
        use CoreEnd::*;
        use FatalKind::*;
        let sw = |s: &str| Software(s.to_string());
        let cases: &[(Result<(), FatalKind>, bool, CoreEnd)] = &[
            (Ok(()), true, Ours),
            (Err(Stopped), true, Ours),
            (
                Ok(()),
                false,
                sw("raft core stopped, and this node did not stop it"),
            ),
            (
                Err(Stopped),
                false,
                sw("raft core stopped, and this node did not stop it"),
            ),
            (Err(Panicked), true, sw("raft core panicked")),
            (Err(Panicked), false, sw("raft core panicked")),
            (
                Err(FatalKind::Storage("eio".into())),
                false,
                CoreEnd::Storage("eio".into()),
            ),
            (
                Err(FatalKind::Storage("eio".into())),
                true,
                CoreEnd::Storage("eio".into()),
            ),
        ];
        for (state, ours, want) in cases {
            assert_eq!(
                &judge_core_end(state.clone(), *ours),
                want,
                "{state:?} {ours}"
            );
        }
    }

    #[test]
    fn a_panics_message_is_its_text() {
        assert_eq!(payload(&"index out of bounds"), "index out of bounds");
        assert_eq!(payload(&String::from("owned")), "owned");
        assert_eq!(payload(&7u32), "(a payload that is not text)");
    }
}
