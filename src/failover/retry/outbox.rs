//! F12 (amended): the outbox of one context — job notifications and heartbeats accepted by the
//! caller and not yet acknowledged by a primary. Each keeps its request id until a primary
//! acknowledges it (the controller's exactly-once table applies a re-send once), is sent
//! pipelined (the caller never waits for the acknowledgement), and is sent again on every new
//! connection. Pure bookkeeping: the loop does the sending ([`super::fire`]).

use std::collections::VecDeque;
use std::time::Instant;

use crate::error::Error;
use crate::failover::classify::{is_no_primary_status, leaves_outcome_unknown};
use crate::wire::Op;

/// Most notifications an outbox holds (`XCE_OUTBOX_MAX`). Kept below the number of request
/// ids a controller remembers per client (256), so a re-send of the oldest entry is always
/// still recognised as one.
pub const OUTBOX_MAX: usize = 128;

/// Where a sent entry went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sent {
    /// The connection ([`super::Link::epoch`]) and the `seq` it was sent with.
    epoch: u64,
    seq: u64,
    at: Instant,
}

/// One notification waiting for its acknowledgement.
#[derive(Debug, Clone)]
pub struct Entry {
    pub op: Op,
    pub request_id: u64,
    sent: Option<Sent>,
}

/// What an acknowledgement did to its entry.
#[derive(Debug, Clone, PartialEq)]
pub enum Acked {
    /// Applied (or applied earlier: the exactly-once table's answer): removed.
    Delivered,
    /// The node is not (or no longer) a primary that can confirm it: kept, to be sent again
    /// with the same request id — on another connection.
    NotPrimary,
    /// The primary refused it for good (e.g. the job is not running, no joined session):
    /// removed; the op is returned for the log.
    Refused(Op, i32),
    /// Not an entry of this outbox in flight on that connection.
    Unknown,
}

/// The outbox of one context.
#[derive(Debug, Default)]
pub struct Outbox {
    entries: VecDeque<Entry>,
}

impl Outbox {
    /// Entries waiting for an acknowledgement.
    /// F26: in a forked child, forgets the parent's notifications (the parent delivers them;
    /// the child re-sending them under its own client id would apply them twice).
    pub fn forget(&mut self) {
        *self = Outbox::default();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry a new `op` replaces: an earlier heartbeat of the same host. A heartbeat
    /// says "alive now"; only the newest counts, so a worker heartbeating through an outage
    /// keeps one per host waiting instead of filling the outbox and crowding out its job
    /// notifications. (The replaced one, if already sent, may still be applied: a heartbeat
    /// applied twice changes nothing but the time it records.)
    fn replaced_by(&self, op: &Op) -> Option<usize> {
        let Op::Heartbeat { host } = op else {
            return None;
        };
        self.entries
            .iter()
            .position(|e| matches!(&e.op, Op::Heartbeat { host: h } if h == host))
    }

    /// Whether `op` would find no room (the outbox full, nothing it replaces).
    pub fn full_for(&self, op: &Op) -> bool {
        self.entries.len() >= OUTBOX_MAX && self.replaced_by(op).is_none()
    }

    /// Accepts a notification with its request id; `E_XCE_OUTBOX_FULL` when full. A heartbeat
    /// replaces an earlier one of the same host still waiting (it goes last, as the newest).
    pub fn push(&mut self, op: Op, request_id: u64) -> Result<(), Error> {
        if let Some(k) = self.replaced_by(&op) {
            self.entries.remove(k);
        } else if self.entries.len() >= OUTBOX_MAX {
            return Err(Error::OutboxFull);
        }
        self.entries.push_back(Entry {
            op,
            request_id,
            sent: None,
        });
        Ok(())
    }

    /// Indexes of the entries not in flight on connection `epoch`, oldest first: to be sent
    /// (again) on it.
    pub fn unsent(&self, epoch: u64) -> Vec<usize> {
        (0..self.entries.len())
            .filter(|&i| !matches!(self.entries[i].sent, Some(s) if s.epoch == epoch))
            .collect()
    }

    pub fn entry(&self, i: usize) -> &Entry {
        &self.entries[i]
    }

    /// Entry `i` left on connection `epoch` with `seq`.
    pub fn mark_sent(&mut self, i: usize, epoch: u64, seq: u64, at: Instant) {
        self.entries[i].sent = Some(Sent { epoch, seq, at });
    }

    /// When the oldest entry in flight on connection `epoch` was sent.
    pub fn oldest_in_flight(&self, epoch: u64) -> Option<Instant> {
        self.entries
            .iter()
            .filter_map(|e| e.sent.filter(|s| s.epoch == epoch).map(|s| s.at))
            .min()
    }

    /// The acknowledgement `(seq, status)` received on connection `epoch`.
    pub fn acked(&mut self, epoch: u64, seq: u64, status: i32) -> Acked {
        let Some(k) = self
            .entries
            .iter()
            .position(|e| matches!(e.sent, Some(s) if s.epoch == epoch && s.seq == seq))
        else {
            return Acked::Unknown;
        };
        if status >= 0 {
            self.entries.remove(k);
            Acked::Delivered
        } else if is_no_primary_status(status) || leaves_outcome_unknown(status) {
            self.entries[k].sent = None;
            Acked::NotPrimary
        } else {
            let e = self.entries.remove(k).expect("present");
            Acked::Refused(e.op, status)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{E_XCE_NOT_READY, E_XCE_STANDBY, E_XCE_UNKNOWN};

    fn hb(n: u64) -> Op {
        Op::Heartbeat {
            host: format!("h{n}"),
        }
    }

    /// A worker heartbeating through a long outage keeps one heartbeat per host waiting: its
    /// job notifications still find room (before: the 129th call of any kind was refused).
    #[test]
    fn a_heartbeat_replaces_the_waiting_one_of_its_host() {
        let mut o = Outbox::default();
        let finish = |id: u64| {
            Op::Notify(crate::wire::Notify {
                kind: crate::wire::NotifyKind::JobFinish,
                job_id: id,
                exit_code: 0,
            })
        };
        o.push(finish(1), 1).unwrap();
        let now = Instant::now();
        for i in 0..1000u64 {
            let hb = Op::Heartbeat { host: "w1".into() };
            assert!(!o.full_for(&hb));
            o.push(hb, 10 + i).unwrap();
            if i == 0 {
                let k = o.unsent(1)[1];
                o.mark_sent(k, 1, 7, now);
            }
        }
        o.push(Op::Heartbeat { host: "w2".into() }, 2000).unwrap();
        assert_eq!(o.len(), 3, "the notification and one heartbeat per host");
        assert_eq!(o.entry(1).request_id, 1009, "the newest heartbeat of w1");
        assert_eq!(
            o.acked(1, 7, 0),
            Acked::Unknown,
            "the acknowledgement of a replaced heartbeat matches nothing"
        );
        for i in 2..OUTBOX_MAX as u64 - 1 {
            o.push(finish(i), 3000 + i).unwrap();
        }
        assert_eq!(o.len(), OUTBOX_MAX);
        let hb = Op::Heartbeat { host: "w1".into() };
        assert!(
            !o.full_for(&hb),
            "full, but a heartbeat of w1 still replaces"
        );
        o.push(hb, 5000).unwrap();
        assert!(o.full_for(&finish(999)));
        assert_eq!(o.push(finish(999), 5001), Err(Error::OutboxFull));
    }

    #[test]
    fn bounded_and_acknowledged_by_seq_on_its_connection() {
        let mut o = Outbox::default();
        for i in 0..OUTBOX_MAX as u64 {
            o.push(hb(i), i + 1).unwrap();
        }
        assert_eq!(o.push(hb(999), 999), Err(Error::OutboxFull));
        let now = Instant::now();
        for (k, i) in o.unsent(1).into_iter().enumerate() {
            o.mark_sent(i, 1, 100 + k as u64, now);
        }
        assert!(o.unsent(1).is_empty());
        assert_eq!(
            o.unsent(2).len(),
            OUTBOX_MAX,
            "a new connection sends all again"
        );
        assert_eq!(
            o.acked(2, 100, 0),
            Acked::Unknown,
            "another connection's seq"
        );
        assert_eq!(o.acked(1, 100, 0), Acked::Delivered);
        assert_eq!(o.len(), OUTBOX_MAX - 1);
        for (seq, s) in [
            (101, -E_XCE_NOT_READY),
            (102, -E_XCE_STANDBY),
            (103, -E_XCE_UNKNOWN),
        ] {
            assert_eq!(o.acked(1, seq, s), Acked::NotPrimary);
            assert_eq!(o.unsent(1).len(), 1, "to be sent again");
            let i = o.unsent(1)[0];
            assert_eq!(o.entry(i).request_id, seq - 100 + 1, "keeps its request id");
            o.mark_sent(i, 1, seq, now);
        }
        match o.acked(1, 110, -libc::EINVAL) {
            Acked::Refused(op, s) => assert_eq!((op, s), (hb(10), -libc::EINVAL)),
            other => panic!("{other:?}"),
        }
        assert_eq!(o.len(), OUTBOX_MAX - 2);
        assert_eq!(o.oldest_in_flight(1), Some(now));
        assert_eq!(o.oldest_in_flight(3), None);
    }
}
