//! C19: the state digests this node computed, and what the primary's consistency check found.
//!
//! **Where digests are taken.** Every replica must hash its state at exactly the same point of
//! the log, or two healthy nodes would disagree. The point is a *checkpoint entry*: a log entry
//! whose batch is empty — the readiness barrier every new leader commits (`ready.rs`) and the
//! entry the primary's check commits (`node/check.rs`). An empty batch changes nothing, and an
//! earlier build applies it as nothing too, so checkpoints need no new entry type. When the
//! state machine applies one (`store.rs`) it hands [`Digests::begin`] a clone of its state as
//! of that entry — O(1) for the job table (a persistent map shared with the live state), a
//! copy of the small parts — and the hash (SHA-256 over the canonical bytes, `sm/digest.rs`)
//! runs on a thread of its own while writes go on. The last [`KEEP`] digests are kept, and the
//! latest checkpoint's state itself (for `snapshot save`, which saves the state the check
//! compared). The hash runs at background priority (`base/background.rs`), like a snapshot.
//!
//! **What the check found** ([`Findings`]): the alarms the primary raised (a node whose digest
//! applied a lower entry than the history; the CORRUPT alarm's words), the last index at which every
//! member that answered agreed, and the lock that runs one check at a time.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::base::ids::{LogId, NodeId, StoredMembership};
use crate::raft::frame::DigestAnswer;
use crate::sm::digest::{self, Digest};
use crate::sm::state::State;

/// Digests kept (the newest).
pub const KEEP: usize = 16;
/// C19 (fifth round): the log ids of the newest applied entries kept, for the check to find
/// the first index at which members applied different entries (24 bytes each: 1.5 MiB).
pub const IDS_KEEP: usize = 1 << 16;

/// The state as of a checkpoint entry, and its digest.
pub struct Checkpoint {
    pub log_id: LogId,
    pub membership: StoredMembership,
    pub state: State,
    pub digest: Digest,
    /// How long hashing it took.
    pub took: Duration,
}

#[derive(Default)]
struct Kept {
    /// (index, digest), newest last.
    done: VecDeque<(u64, Digest)>,
    /// Checkpoints being hashed.
    pending: BTreeSet<u64>,
    /// The newest checkpoint hashed.
    latest: Option<Arc<Checkpoint>>,
}

/// The log ids of the newest applied entries, consecutive, newest last.
#[derive(Default)]
struct Ids {
    ids: VecDeque<LogId>,
}

impl Ids {
    fn push(&mut self, id: LogId) {
        // Not the next index (a snapshot installed, a restart that replays): start afresh.
        if self.ids.back().is_some_and(|l| l.index + 1 != id.index) {
            self.ids.clear();
        }
        self.ids.push_back(id);
        while self.ids.len() > IDS_KEEP {
            self.ids.pop_front();
        }
    }

    /// The ids of indexes `from..=to`, if every one of them is kept.
    fn range(&self, from: u64, to: u64) -> Option<Vec<LogId>> {
        let first = self.ids.front()?.index;
        let last = self.ids.back()?.index;
        if from > to || from < first || to > last {
            return None;
        }
        let at = usize::try_from(from - first).ok()?;
        let n = usize::try_from(to - from + 1).ok()?;
        Some(self.ids.iter().skip(at).take(n).copied().collect())
    }
}

/// This node's digests at its checkpoint entries.
pub struct Digests {
    kept: Mutex<Kept>,
    /// C19 (fifth round): the log ids it applied, newest last.
    ids: Mutex<Ids>,
    /// Bumped whenever a digest is done: waiters wake on it.
    changed: watch::Sender<u64>,
}

impl Digests {
    pub fn new() -> Arc<Digests> {
        Arc::new(Digests {
            kept: Mutex::new(Kept::default()),
            ids: Mutex::new(Ids::default()),
            changed: watch::channel(0).0,
        })
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().expect("digests lock")
    }

    /// The state machine applied the checkpoint entry `log_id`; `state` is a clone of its
    /// state as of that entry. Hashes it on a blocking thread (inline without a runtime).
    pub fn begin(self: &Arc<Self>, log_id: LogId, membership: StoredMembership, state: State) {
        self.kept().pending.insert(log_id.index);
        let me = self.clone();
        let work = move || {
            let t0 = Instant::now();
            let d = digest::of(&state);
            me.finish(Checkpoint {
                log_id,
                membership,
                state,
                digest: d,
                took: t0.elapsed(),
            });
        };
        match tokio::runtime::Handle::try_current() {
            // C24: on a thread of its own at the lowest CPU and I/O priority, as snapshots are
            // written: at 10^7 jobs a digest is seconds of a core on every node, and every node
            // takes one at each new leader's barrier, right when it should serve.
            Ok(_) => {
                std::thread::Builder::new()
                    .name("xce-digest".into())
                    .spawn(move || {
                        crate::base::background::lower_this_thread();
                        work()
                    })
                    .expect("spawn a digest thread");
            }
            Err(_) => work(),
        }
    }

    fn finish(&self, c: Checkpoint) {
        crate::base::counters::digest_took(c.took);
        {
            let mut k = self.kept();
            let index = c.log_id.index;
            k.pending.remove(&index);
            k.done.retain(|(i, _)| *i != index);
            k.done.push_back((index, c.digest));
            k.done.make_contiguous().sort_unstable_by_key(|(i, _)| *i);
            while k.done.len() > KEEP {
                k.done.pop_front();
            }
            if k.latest.as_ref().is_none_or(|l| l.log_id.index <= index) {
                k.latest = Some(Arc::new(c));
            }
        }
        self.changed.send_modify(|v| *v += 1);
    }

    /// The digest at `index`, if done.
    pub fn get(&self, index: u64) -> Option<Digest> {
        let k = self.kept();
        k.done.iter().find(|(i, _)| *i == index).map(|(_, d)| *d)
    }

    /// The answer to a peer asking for the digest at `index`, this node having applied up to
    /// `applied`.
    pub fn answer(&self, index: u64, applied: Option<u64>) -> DigestAnswer {
        let k = self.kept();
        if let Some((_, d)) = k.done.iter().find(|(i, _)| *i == index) {
            return DigestAnswer::Ready(*d);
        }
        if k.pending.contains(&index) || applied.is_none_or(|a| a < index) {
            return DigestAnswer::NotYet;
        }
        DigestAnswer::Gone
    }

    /// Waits up to `within` for the digest at `index` (this node applies it).
    pub async fn wait(&self, index: u64, within: Duration) -> Option<Digest> {
        let mut rx = self.changed.subscribe();
        let until = tokio::time::Instant::now() + within;
        loop {
            rx.borrow_and_update();
            if let Some(d) = self.get(index) {
                return Some(d);
            }
            match tokio::time::timeout_at(until, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return self.get(index),
            }
        }
    }

    /// The newest checkpoint hashed, with its state.
    pub fn latest(&self) -> Option<Arc<Checkpoint>> {
        self.kept().latest.clone()
    }

    /// The state machine applied `ids`, in order (one call per batch it applies).
    pub fn applied(&self, ids: impl IntoIterator<Item = LogId>) {
        let mut k = self.ids.lock().expect("applied ids lock");
        for id in ids {
            k.push(id);
        }
    }

    /// C19 (fifth round): the log ids this node applied at indexes `from..=to`, if it still
    /// knows every one (`None`: some are older than the newest [`IDS_KEEP`], or came in a
    /// snapshot, or it has not applied `to` yet).
    pub fn applied_ids(&self, from: u64, to: u64) -> Option<Vec<LogId>> {
        if to.saturating_sub(from) >= IDS_KEEP as u64 {
            return None;
        }
        self.ids.lock().expect("applied ids lock").range(from, to)
    }
}

/// One finished consistency check (on the primary).
#[derive(Debug, Clone, Default)]
pub struct Round {
    /// Counts checks since this node started.
    pub number: u64,
    /// The checkpoint compared.
    pub index: u64,
    /// Members whose digest equals this node's (itself included), and the voters.
    pub agreeing: Vec<NodeId>,
    pub voters: usize,
    /// When it finished, and how long hashing this node's state took.
    pub at: Option<Instant>,
    pub took: Duration,
}

/// What the primary's consistency check found, for `status`, the metrics and the client port.
pub struct Findings {
    inner: Mutex<FindingsInner>,
    done: watch::Sender<Round>,
    /// Held by the check running (`node/check.rs`): one at a time.
    pub running: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct FindingsInner {
    /// Per node: why it is flagged.
    alarms: BTreeMap<NodeId, String>,
    /// The CORRUPT alarm's words (digests no log id can tell apart), as this primary found.
    no_majority: Option<String>,
    /// The last index at which every member that answered agreed.
    checked: u64,
}

impl Findings {
    pub fn new() -> Arc<Findings> {
        Arc::new(Findings {
            inner: Mutex::default(),
            done: watch::channel(Round::default()).0,
            running: tokio::sync::Mutex::new(()),
        })
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, FindingsInner> {
        self.inner.lock().expect("findings lock")
    }

    /// The last check finished.
    #[cfg(test)]
    fn last(&self) -> Round {
        self.done.borrow().clone()
    }

    /// A check finished: the alarms it raised or cleared, and whether every member that
    /// answered agreed. Returns the round, numbered.
    pub fn finished(
        &self,
        mut round: Round,
        raised: BTreeMap<NodeId, String>,
        cleared: &[NodeId],
        no_majority: Option<String>,
        agreed: bool,
    ) -> Round {
        {
            let mut f = self.inner();
            for n in cleared {
                f.alarms.remove(n);
            }
            f.alarms.extend(raised);
            f.no_majority = no_majority;
            if agreed {
                f.checked = round.index;
            }
        }
        round.number = self.done.borrow().number + 1;
        round.at = Some(Instant::now());
        self.done.send_replace(round.clone());
        round
    }

    /// Whether a check finished within `max(floor, factor × its hashing time)`: one asked for
    /// now (`consistencyCheck`) is answered from it rather than run again, so callers cannot
    /// keep every node hashing.
    pub fn fresh(&self, floor: Duration, factor: u32) -> bool {
        let r = self.done.borrow();
        r.at.is_some_and(|at| at.elapsed() < floor.max(r.took * factor))
    }

    /// This node no longer leads: what it found as primary no longer holds.
    pub fn forget(&self) {
        let mut f = self.inner();
        f.alarms.clear();
        f.no_majority = None;
        f.checked = 0;
    }

    /// The alarms raised, one text each.
    pub fn alarms(&self) -> Vec<String> {
        let f = self.inner();
        f.alarms
            .values()
            .cloned()
            .chain(f.no_majority.clone())
            .collect()
    }

    /// The last index at which every member that answered agreed (0: none).
    pub fn checked(&self) -> u64 {
        self.inner().checked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn log_id(index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    /// Digests are answered once hashed; an entry not applied yet is NotYet, one applied
    /// without a checkpoint (or forgotten) is Gone; only the newest are kept.
    #[test]
    fn answers_follow_what_was_applied_and_kept() {
        let d = Digests::new();
        assert_eq!(d.answer(5, Some(4)), DigestAnswer::NotYet);
        assert_eq!(d.answer(5, None), DigestAnswer::NotYet);
        d.begin(log_id(5), Default::default(), State::default());
        let want = digest::of(&State::default());
        assert_eq!(d.answer(5, Some(5)), DigestAnswer::Ready(want));
        assert_eq!(d.answer(4, Some(5)), DigestAnswer::Gone);
        assert_eq!(d.latest().map(|c| c.log_id.index), Some(5));
        for i in 10..10 + KEEP as u64 {
            d.begin(log_id(i), Default::default(), State::default());
        }
        assert_eq!(d.answer(5, Some(100)), DigestAnswer::Gone, "forgotten");
        assert_eq!(d.latest().map(|c| c.log_id.index), Some(9 + KEEP as u64));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        assert_eq!(
            rt.block_on(d.wait(10, Duration::from_millis(10))),
            Some(want)
        );
        assert_eq!(rt.block_on(d.wait(99, Duration::from_millis(10))), None);
    }

    /// C19 (fifth round): the applied log ids are kept consecutive and bounded; a range is
    /// answered only whole.
    #[test]
    fn applied_ids_are_answered_only_whole() {
        let d = Digests::new();
        assert_eq!(d.applied_ids(1, 1), None);
        d.applied((1..=10).map(log_id));
        assert_eq!(d.applied_ids(3, 5), Some((3..=5).map(log_id).collect()));
        assert_eq!(d.applied_ids(0, 5), None, "before the first kept");
        assert_eq!(d.applied_ids(5, 11), None, "not applied yet");
        // A gap (a snapshot installed): only what follows it is known.
        d.applied([log_id(20), log_id(21)]);
        assert_eq!(d.applied_ids(10, 20), None);
        assert_eq!(d.applied_ids(20, 21), Some(vec![log_id(20), log_id(21)]));
        d.applied((22..22 + IDS_KEEP as u64).map(log_id));
        assert_eq!(d.applied_ids(21, 21), None, "older than the newest kept");
        assert!(
            d.applied_ids(30, 30 + IDS_KEEP as u64).is_none(),
            "too long a range"
        );
    }

    /// Alarms stay until a later check clears them; a node that stops leading forgets them.
    #[test]
    fn findings_keep_alarms_until_cleared() {
        let f = Findings::new();
        let round = |index| Round {
            index,
            ..Default::default()
        };
        f.finished(
            round(10),
            [(3, "node 3 differs".to_string())].into(),
            &[],
            None,
            false,
        );
        assert_eq!(f.alarms(), vec!["node 3 differs".to_string()]);
        assert_eq!((f.checked(), f.last().number), (0, 1));
        f.finished(
            round(20),
            BTreeMap::new(),
            &[1, 2],
            Some("no majority".into()),
            false,
        );
        assert_eq!(f.alarms().len(), 2);
        f.finished(round(30), BTreeMap::new(), &[1, 2, 3], None, true);
        assert!(f.alarms().is_empty());
        assert_eq!((f.checked(), f.last().number), (30, 3));
        f.forget();
        assert_eq!(f.checked(), 0);
    }
}
