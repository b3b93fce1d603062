//! F17 and F19: per-context counters, the event callback, and the report of the last failed
//! call. Kept outside the context lock so they can be read while a call is failing over.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::classify::AttemptOutcome;
use super::rotate::Endpoint;
use crate::error::{strerror, Error};

/// F17 counters of one context.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls made (every op, fire-and-forget included).
    pub requests: u64,
    /// Attempts beyond the first of a call.
    pub retries: u64,
    /// Moves from one controller to another (or the same one, reconnecting).
    pub rotations: u64,
    /// Failovers finished: a success after a run of failed attempts.
    pub failovers: u64,
    /// Total time spent sleeping or waiting for a primary in backoff, in ms.
    pub backoff_ms: u64,
    /// Duration of the last finished failover (first failure → success), in ms.
    pub last_failover_ms: u64,
    /// The controller in use, if connected.
    pub current_master: Option<Endpoint>,
    /// Late replies that made the loop ask another controller about the primary (F25).
    pub suspicions: u64,
    /// Of those, the ones where another primary was named and the request re-sent there.
    pub suspicion_failovers: u64,
    /// Notifications and heartbeats accepted and not yet acknowledged by a primary (F12).
    pub outbox_depth: u64,
    /// F29: the masters in rotation — the configured ones, in order, then those learned from
    /// a primary, in the order they were learned. Shared, so reading the stats copies no list.
    pub masters: Arc<Vec<Endpoint>>,
    /// F29: masters learned from a primary so far (`masters` minus the configured ones).
    pub learned_masters: u64,
}

/// An F17 event, delivered on the calling thread.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The loop leaves `from` for `to` because of `cause`.
    Rotation {
        from: Endpoint,
        to: Endpoint,
        cause: AttemptOutcome,
    },
    /// The first failure after a success: a failover begins.
    FailoverStarted {
        from: Endpoint,
        cause: AttemptOutcome,
    },
    /// A success ends the failover.
    FailoverFinished { to: Endpoint, duration: Duration },
    /// A call gave up (F7) with this error.
    NotReady {
        error: Error,
        attempts: u32,
        elapsed: Duration,
    },
}

/// The event callback. It runs on the thread of the call that caused the event, while that call
/// owns the context: it may read `stats()` and `last_error()`, but an op on the same context
/// from inside it fails with `EDEADLK`.
pub type EventHandler = Arc<dyn Fn(&Event) + Send + Sync>;

/// A master's last outcome during one call.
#[derive(Debug, Clone, PartialEq)]
pub struct MasterOutcome {
    pub endpoint: Endpoint,
    /// `None`: not tried during the call.
    pub last: Option<AttemptOutcome>,
    /// What the outcome alone does not say: a name lookup's failure (F23), or what was wrong
    /// with an answer found after the loop (F24).
    pub note: Option<String>,
}

/// F19: what happened during the last failed call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallReport {
    /// The op's name (protocol.md).
    pub op: &'static str,
    pub error: Error,
    /// Attempts made (sends, connects and reconnect-hook runs that failed count alike).
    pub attempts: u32,
    pub elapsed: Duration,
    /// Every configured master and its last outcome in the call.
    pub masters: Vec<MasterOutcome>,
    pub is_write: bool,
    /// For a write: it was sent at least once and no reply came back, so the controller may have
    /// applied it.
    pub may_have_been_applied: bool,
    /// Why, in the controller's words, when its final answer said (`Reply.detail`: a refused
    /// admin op, a quota refusal); empty otherwise.
    pub detail: String,
}

fn outcome_text(o: &AttemptOutcome) -> String {
    match o {
        AttemptOutcome::Status(s) => format!("answered \"{}\"", strerror(*s)),
        AttemptOutcome::Transport(e) => format!("transport: {e}"),
    }
}

impl fmt::Display for CallReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {} after {} attempt{} in {:.3} s",
            self.op,
            self.error,
            self.attempts,
            if self.attempts == 1 { "" } else { "s" },
            self.elapsed.as_secs_f64()
        )?;
        for m in &self.masters {
            match (&m.note, &m.last) {
                (Some(note), _) => write!(f, "; {} {note}", m.endpoint)?,
                (None, Some(o)) => write!(f, "; {} {}", m.endpoint, outcome_text(o))?,
                (None, None) => write!(f, "; {} not tried", m.endpoint)?,
            }
        }
        if !self.detail.is_empty() {
            write!(f, "; the controller says: {}", self.detail)?;
        }
        if self.is_write {
            if self.may_have_been_applied {
                write!(
                    f,
                    "; the write was sent without reply and may have been applied"
                )?;
            } else {
                write!(f, "; the write was not applied")?;
            }
        }
        Ok(())
    }
}

/// The observable side of a context: counters and last error. Each field has its own small
/// lock, never held across I/O; readers never wait for a call in progress.
#[derive(Default)]
pub struct Observer {
    stats: Mutex<Stats>,
    /// `Stats::requests`, counted apart: every call counts one, without the lock (P2).
    requests: AtomicU64,
    last_error: Mutex<Option<CallReport>>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Observer {
    pub fn stats(&self) -> Stats {
        let mut s = self.stats.lock().clone();
        s.requests = self.requests.load(Ordering::Relaxed);
        s
    }

    /// F17: one more request (a call of the loop).
    pub fn count_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub fn update(&self, f: impl FnOnce(&mut Stats)) {
        f(&mut self.stats.lock())
    }

    pub fn last_error(&self) -> Option<CallReport> {
        self.last_error.lock().clone()
    }

    pub fn set_last_error(&self, r: CallReport) {
        *self.last_error.lock() = Some(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::E_XCE_NOT_READY;

    #[test]
    fn report_names_the_cluster_state_and_each_master() {
        use AttemptOutcome::{Status, Transport};
        let at = |host: &str, port, last, note: Option<&str>| MasterOutcome {
            endpoint: Endpoint::new(host, port),
            last,
            note: note.map(String::from),
        };
        let lookup = "name lookup of db7.example failed: Name or service not known";
        let (refused, unresolved) = (
            Error::Errno(libc::ECONNREFUSED),
            Some(Transport(Error::Lookup)),
        );
        let r = CallReport {
            op: "jobsubmit",
            error: Error::NotReady,
            attempts: 5,
            elapsed: Duration::from_millis(1500),
            masters: vec![
                at("a", 1, Some(Status(-E_XCE_NOT_READY)), None),
                at("b", 2, Some(Transport(refused)), None),
                at("c", 3, None, None),
                at("db7.example", 4, unresolved, Some(lookup)),
            ],
            is_write: true,
            may_have_been_applied: true,
            detail: String::new(),
        };
        let s = r.to_string();
        assert!(!s.contains("the controller says"), "{s}");
        let with = CallReport {
            detail: "node 4 at h:2: it is node 5".into(),
            ..r.clone()
        };
        assert!(
            with.to_string()
                .contains("; the controller says: node 4 at h:2: it is node 5"),
            "{with}"
        );
        assert!(
            s.starts_with("jobsubmit failed: cluster not ready after 5 attempts in 1.500 s"),
            "{s}"
        );
        assert!(s.contains("a:1 answered \"cluster not ready\""), "{s}");
        assert!(s.contains("b:2 transport: Connection refused"), "{s}");
        assert!(s.contains("c:3 not tried"), "{s}");
        assert!(s.contains(&format!("db7.example:4 {lookup}")), "{s}");
        assert!(s.contains("may have been applied"), "{s}");
    }
}
