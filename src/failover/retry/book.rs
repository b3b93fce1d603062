//! Failover bookkeeping of one context, apart from the connection: whether a failover is in
//! progress and since when (F17), the reconnect hook's state (F10), which masters cannot wait
//! for a primary (F18), and the identity writes carry (F16).

use std::time::Instant;

use super::link::{Link, RequestIds};
use super::{cause_text, clog, CallEnv};
use crate::failover::classify::AttemptOutcome;
use crate::failover::log::Level;
use crate::failover::report::Event;
use crate::wire::{ClientId, Op, OpKind};

/// What the loop remembers between calls, besides the connection.
#[derive(Default)]
pub struct Book {
    /// True while the reconnect hook runs: nested calls are single attempts (F10).
    pub in_hook: bool,
    /// A transport failure met by a nested call during the hook: the hook's negative return
    /// then counts as transport, not as a controller status.
    pub hook_transport_error: Option<crate::error::Error>,
    /// A reconnect happened and the hook has not yet succeeded on it (F10): it runs before the
    /// next send, even when the loop comes back to the same connection after a backoff.
    pub hook_pending: bool,
    /// The writes the hook made in its runs since the reconnect, in order, with their request
    /// ids: a run that repeats them re-sends them with the same ids (F16, issue 16 #12).
    pub hook_writes: Vec<(Op, u64)>,
    /// Writes the hook made in its current run so far.
    pub hook_nth: usize,
    /// Configured masters that answered `waitPrimary` with an error, one bit each: plain
    /// sleeps there (F18).
    pub no_wait_primary: u64,
    /// Start of the failover in progress, if one is (F17).
    pub failing_since: Option<Instant>,
    /// A master has served this context: only then is losing one a failover (F17). Before
    /// that, a standby met on the way to the primary is discovery, not a failover.
    pub has_served: bool,
}

impl Book {
    /// F17: the first failure after a success starts a failover (logged, evented).
    pub fn failover_started(&mut self, env: &CallEnv<'_>, link: &Link, cause: AttemptOutcome) {
        if self.failing_since.is_some() || !self.has_served {
            return;
        }
        self.failing_since = Some(Instant::now());
        let from = link.current_endpoint();
        clog!(
            env,
            Level::Info,
            "failover started: {from} {}",
            cause_text(&cause)
        );
        env.emit(Event::FailoverStarted { from, cause });
    }

    /// F17: a master served; a failover in progress is finished (counted, logged, evented).
    pub fn served(&mut self, env: &CallEnv<'_>, link: &Link) {
        self.has_served = true;
        if let Some(since) = self.failing_since.take() {
            let ep = link.current_endpoint();
            let duration = since.elapsed();
            clog!(
                env,
                Level::Info,
                "failover finished on {ep} after {} ms",
                duration.as_millis()
            );
            env.observer.update(|s| {
                s.failovers += 1;
                s.last_failover_ms = duration.as_millis() as u64;
            });
            env.emit(Event::FailoverFinished { to: ep, duration });
        }
    }

    /// A new connection: the hook is owed before the next send (F10).
    pub fn reconnected(&mut self) {
        self.hook_pending = true;
    }

    /// The hook succeeded on the current connection.
    pub fn hook_done(&mut self) {
        self.hook_pending = false;
        self.hook_writes.clear();
    }

    /// The request id of a write made from inside the hook: the id the same write got in an
    /// earlier run of the hook for this reconnect, else a new one.
    pub fn hook_write_id(&mut self, op: &Op, ids: &mut Identity) -> u64 {
        let k = self.hook_nth;
        self.hook_nth += 1;
        match self.hook_writes.get(k) {
            Some((o, id)) if o == op => *id,
            _ => {
                let id = ids.next(OpKind::Write).request_id;
                self.hook_writes.truncate(k);
                self.hook_writes.push((op.clone(), id));
                id
            }
        }
    }
}

/// The identity a context's requests carry (F16): its client id and its request counter.
pub struct Identity {
    client_id: ClientId,
    /// Last request id handed out.
    request_id: u64,
}

impl Identity {
    pub fn new(client_id: ClientId) -> Identity {
        Identity {
            client_id,
            request_id: 0,
        }
    }

    /// F26: a forked child's own identity: a new client id. The request counter goes on: ids
    /// the parent handed out before the fork live on in the child (a write its forking thread
    /// still runs, the reconnect hook's remembered writes) and are re-sent under the new client
    /// id, so the child's own later writes must never take them again.
    pub fn rekey(&mut self, client_id: ClientId) {
        self.client_id = client_id;
    }

    /// The one place the ids of a request are produced: `Some(id)` re-sends request `id`,
    /// `None` with `fresh` takes the next request id, `None` without it is 0 (not
    /// deduplicated). Every request of the context goes through here.
    fn ids(&mut self, resend: Option<u64>, fresh: bool) -> RequestIds {
        let request_id = match resend {
            Some(id) => id,
            None if fresh => {
                self.request_id += 1;
                self.request_id
            }
            None => 0,
        };
        RequestIds {
            client_id: self.client_id,
            request_id,
        }
    }

    /// The ids of a new request of `kind`: writes (and notifies, F12) get the next request
    /// id; reads and probes 0.
    pub fn next(&mut self, kind: OpKind) -> RequestIds {
        self.ids(None, matches!(kind, OpKind::Write | OpKind::FireAndForget))
    }

    /// The ids of a request that is not deduplicated (reads, probes, `nop`).
    pub fn read(&mut self) -> RequestIds {
        self.ids(None, false)
    }

    /// The ids of a re-send of request `request_id`.
    pub fn resend(&mut self, request_id: u64) -> RequestIds {
        self.ids(Some(request_id), false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// F26: after a fork's rekey, no request id handed out before it is handed out again (a
    /// re-sent pre-fork write and a new write of the child would be one request to the
    /// controller's exactly-once table, and the second would never be applied).
    #[test]
    fn rekey_never_reissues_a_request_id() {
        let mut ids = Identity::new([1; 16]);
        let before: Vec<u64> = (0..5).map(|_| ids.next(OpKind::Write).request_id).collect();
        ids.rekey([2; 16]);
        let after = ids.next(OpKind::Write);
        assert_eq!(after.client_id, [2; 16]);
        assert!(
            !before.contains(&after.request_id),
            "{before:?} then {after:?}"
        );
    }
}
