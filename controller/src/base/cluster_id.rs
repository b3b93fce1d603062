//! C20: which cluster a node belongs to, and which raft messages it takes.
//!
//! A cluster's id is 16 random bytes with a restore epoch: 0 for a cluster made by
//! initialisation, n + 1 for one restored (`snapshot restore`) from a backup of a cluster of
//! epoch n, whose id is derived from the backup and the operator's name for that restore, so
//! that every member restored from one file for one restore agrees and no other does. The id
//! is part of the replicated state (`sm/state.rs`: recorded once by the first primary that
//! finds none, or written by `snapshot restore`); a node keeps the one it applied in its data
//! directory and stamps it on every raft message it sends (`raft/frame.rs`). A message is
//! checked before anything else in it is read ([`admits`]): a node of another cluster, or of
//! another restore of the same backup, is refused, and both sides log it (at most once per
//! [`REFUSAL_LOG_EVERY`] per peer).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// A refusal is logged at most this often for one peer (each side).
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);
/// How many peers' refusal lines are remembered at once ([`Identity::log_limited`]).
pub const REFUSAL_KEYS_MAX: usize = 1024;

/// A cluster's id and restore epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClusterTag {
    pub id: [u8; 16],
    pub epoch: u32,
}

impl ClusterTag {
    /// A new cluster's id: 16 random bytes, epoch 0.
    pub fn new_random() -> Result<ClusterTag, String> {
        let id = ring::rand::generate::<[u8; 16]>(&ring::rand::SystemRandom::new())
            .map_err(|_| "no random bytes for a cluster id".to_string())?
            .expose();
        Ok(ClusterTag { id, epoch: 0 })
    }

    /// The id of the cluster restored from the backup `backup_id` (a random id the backup
    /// was saved with) taken from a cluster of epoch `from_epoch`, in the restore the
    /// operator names `restore_id`: the same for every member of that restore, another for
    /// any other restore (of this backup or another).
    pub fn restored(backup_id: &[u8; 16], restore_id: &str, from_epoch: u32) -> ClusterTag {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(b"xce-controller restore v1\0");
        ctx.update(backup_id);
        ctx.update(&from_epoch.to_le_bytes());
        ctx.update(restore_id.as_bytes());
        let d = ctx.finish();
        let mut id = [0u8; 16];
        id.copy_from_slice(&d.as_ref()[..16]);
        ClusterTag {
            id,
            epoch: from_epoch.saturating_add(1),
        }
    }

    /// The id as 32 lowercase hex digits.
    pub fn hex(&self) -> String {
        hex(&self.id)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl std::fmt::Display for ClusterTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.epoch == 0 {
            write!(f, "{}", self.hex())
        } else {
            write!(f, "{} (restore epoch {})", self.hex(), self.epoch)
        }
    }
}

/// What a node's data directory says of its cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Belonging {
    /// Data an earlier build wrote (no id recorded): it takes the id its cluster's log records
    /// (a cluster that was never restored: epoch 0), as every member then does.
    Legacy,
    /// Started without data: takes the id of the first cluster whose state it applies
    /// (a new cluster's members, a node added with `--join`, a replaced disk).
    Pending,
    /// A member of this cluster.
    Member(ClusterTag),
}

/// Why a raft message was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Both have ids, and they differ.
    Another {
        ours: ClusterTag,
        theirs: ClusterTag,
    },
    /// The sender has no id (an earlier build, or a node of no cluster yet) and this node has.
    Unnamed { ours: ClusterTag },
    /// This node's data predates cluster ids and the sender's cluster was restored from a
    /// backup: the data cannot be that cluster's.
    Restored { theirs: ClusterTag },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Another { ours, theirs } => write!(
                f,
                "of another cluster ({theirs}; this node's is {ours}): data of another cluster, or of \
                 another restore, never joins this one (C20)"
            ),
            Refusal::Unnamed { ours } => write!(
                f,
                "from a node without a cluster id (an earlier build, or data from before cluster \
                 {ours} recorded its id) (C20)"
            ),
            Refusal::Restored { theirs } => write!(
                f,
                "of cluster {theirs}, restored from a backup, while this node's data predates \
                 cluster ids: it is not that cluster's (C20)"
            ),
        }
    }
}

/// C20: whether a node that `ours` takes a raft message stamped `theirs` (`None`: no id).
pub fn admits(ours: Belonging, theirs: Option<ClusterTag>) -> Result<(), Refusal> {
    match (ours, theirs) {
        (Belonging::Member(o), Some(t)) if o == t => Ok(()),
        (Belonging::Member(o), Some(t)) => Err(Refusal::Another { ours: o, theirs: t }),
        (Belonging::Member(o), None) => Err(Refusal::Unnamed { ours: o }),
        (Belonging::Pending, _) | (Belonging::Legacy, None) => Ok(()),
        (Belonging::Legacy, Some(t)) if t.epoch == 0 => Ok(()),
        (Belonging::Legacy, Some(t)) => Err(Refusal::Restored { theirs: t }),
    }
}

/// What persists a node's [`Belonging`] in its data directory.
pub type Persist = Box<dyn Fn(Belonging) -> Result<(), String> + Send + Sync>;

/// This node's belonging, shared by everything that sends or receives raft messages, and
/// what persists a change of it.
pub struct Identity {
    now: Mutex<Belonging>,
    persist: Persist,
    logged: Mutex<HashMap<String, (Instant, u64)>>,
    /// Woken when this node takes its cluster's id ([`Identity::tagged`]).
    adopted: tokio::sync::Notify,
}

impl Identity {
    pub fn new(now: Belonging, persist: Persist) -> Arc<Identity> {
        Arc::new(Identity {
            now: Mutex::new(now),
            persist,
            logged: Mutex::new(HashMap::new()),
            adopted: tokio::sync::Notify::new(),
        })
    }

    /// An identity that persists nothing (tests, tools).
    pub fn detached(now: Belonging) -> Arc<Identity> {
        Identity::new(now, Box::new(|_| Ok(())))
    }

    pub fn belonging(&self) -> Belonging {
        *self.now.lock().expect("identity lock")
    }

    /// The tag this node stamps on its messages (`None`: it has none yet).
    pub fn tag(&self) -> Option<ClusterTag> {
        match self.belonging() {
            Belonging::Member(t) => Some(t),
            _ => None,
        }
    }

    /// The tag, once this node has one: at once if it has, else when [`Identity::adopt`]
    /// takes it (callers bound the wait).
    pub async fn tagged(&self) -> ClusterTag {
        loop {
            let adopted = self.adopted.notified();
            tokio::pin!(adopted);
            // Registered before the check: an adoption between the two still wakes it.
            adopted.as_mut().enable();
            if let Some(t) = self.tag() {
                return t;
            }
            adopted.await;
        }
    }

    /// Whether a message stamped `theirs` is taken.
    pub fn check(&self, theirs: Option<ClusterTag>) -> Result<(), Refusal> {
        admits(self.belonging(), theirs)
    }

    /// The replicated state says the cluster is `tag`: a node without an id takes it (persisted
    /// first). `Ok(true)`: taken now; `Ok(false)`: it already was this node's. A node of
    /// another cluster never changes (an error: its state and its data disagree).
    pub fn adopt(&self, tag: ClusterTag) -> Result<bool, String> {
        let mut now = self.now.lock().expect("identity lock");
        match *now {
            Belonging::Member(t) if t == tag => Ok(false),
            Belonging::Member(t) => Err(format!(
                "the applied state names cluster {tag}, the data directory {t}: kept {t}"
            )),
            Belonging::Legacy | Belonging::Pending => {
                (self.persist)(Belonging::Member(tag))?;
                *now = Belonging::Member(tag);
                drop(now);
                self.adopted.notify_waiters();
                Ok(true)
            }
        }
    }

    /// Calls `log` unless a line for `key` was logged within [`REFUSAL_LOG_EVERY`]; the line
    /// says how many were left out meanwhile.
    ///
    /// Keys come from peers' addresses, so the table is bounded: past [`REFUSAL_KEYS_MAX`]
    /// keys, those quiet for an interval are forgotten (their next line is written at once);
    /// if all are recent, the table starts afresh (lines stay bounded by the connection rate).
    pub fn log_limited(&self, key: &str, log: impl FnOnce(u64)) {
        let mut m = self.logged.lock().expect("refusal log lock");
        let now = Instant::now();
        if m.len() >= REFUSAL_KEYS_MAX && !m.contains_key(key) {
            m.retain(|_, (at, _)| now.duration_since(*at) < REFUSAL_LOG_EVERY);
            if m.len() >= REFUSAL_KEYS_MAX {
                m.clear();
            }
        }
        let e = m
            .entry(key.to_string())
            .or_insert((now - REFUSAL_LOG_EVERY * 2, 0));
        if now.duration_since(e.0) >= REFUSAL_LOG_EVERY {
            let skipped = e.1;
            *e = (now, 0);
            drop(m);
            log(skipped);
        } else {
            e.1 += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(b: u8, epoch: u32) -> ClusterTag {
        ClusterTag { id: [b; 16], epoch }
    }

    /// The admission table: a member takes only its own cluster's messages; a node that
    /// started blank takes any (it has nothing to lose); data of an earlier build takes an
    /// unnamed message or one of a never-restored cluster, never a restored one.
    #[test]
    fn who_takes_what() {
        use Belonging::*;
        let (a, a2, b) = (tag(1, 0), tag(1, 1), tag(2, 0));
        let restored = ClusterTag::restored(&[5; 16], "r1", 0);
        let rows: [(Belonging, Option<ClusterTag>, bool); 14] = [
            (Member(a), Some(a), true),
            (Member(a), Some(b), false),
            (Member(a), Some(a2), false),
            (Member(a), None, false),
            (Member(restored), Some(restored), true),
            (Member(restored), Some(a), false),
            (Pending, None, true),
            (Pending, Some(a), true),
            (Pending, Some(restored), true),
            (Legacy, None, true),
            (Legacy, Some(a), true),
            (Legacy, Some(b), true),
            (Legacy, Some(a2), false),
            (Legacy, Some(restored), false),
        ];
        for (ours, theirs, taken) in rows {
            assert_eq!(
                admits(ours, theirs).is_ok(),
                taken,
                "{ours:?} receiving {theirs:?}"
            );
        }
    }

    /// Every member restored from one backup in one restore agrees on the id; another restore
    /// of the same backup, or of another backup, gets another; the epoch counts restores.
    #[test]
    fn a_restore_names_a_new_cluster_its_members_agree_on() {
        let one = ClusterTag::restored(&[5; 16], "2026-06-01", 0);
        assert_eq!(one, ClusterTag::restored(&[5; 16], "2026-06-01", 0));
        assert_eq!(one.epoch, 1);
        assert_ne!(one.id, ClusterTag::restored(&[5; 16], "2026-06-02", 0).id);
        assert_ne!(one.id, ClusterTag::restored(&[6; 16], "2026-06-01", 0).id);
        assert_ne!(one, ClusterTag::restored(&[5; 16], "2026-06-01", 1));
        let fresh = ClusterTag::new_random().unwrap();
        assert_eq!(fresh.epoch, 0);
        assert_ne!(fresh.id, ClusterTag::new_random().unwrap().id);
        assert_eq!(tag(0xab, 0).hex(), "ab".repeat(16));
    }

    /// A node without an id takes its cluster's (persisted first); a member never changes.
    #[test]
    fn adopting_persists_once_and_never_switches() {
        let saved = Arc::new(Mutex::new(Vec::new()));
        let s = saved.clone();
        let id = Identity::new(
            Belonging::Pending,
            Box::new(move |b| {
                s.lock().unwrap().push(b);
                Ok(())
            }),
        );
        assert_eq!(id.tag(), None);
        assert_eq!(id.adopt(tag(1, 0)), Ok(true));
        assert_eq!(id.adopt(tag(1, 0)), Ok(false));
        assert!(id.adopt(tag(2, 0)).is_err());
        assert_eq!(id.tag(), Some(tag(1, 0)));
        assert_eq!(*saved.lock().unwrap(), vec![Belonging::Member(tag(1, 0))]);
        // A failed persist takes nothing.
        let id = Identity::new(Belonging::Legacy, Box::new(|_| Err("disk".into())));
        assert!(id.adopt(tag(1, 0)).is_err());
        assert_eq!(id.belonging(), Belonging::Legacy);
    }

    /// A wait for the tag ends when another task adopts it, and at once for a member.
    #[tokio::test]
    async fn a_wait_for_the_tag_ends_when_it_is_adopted() {
        let id = Identity::detached(Belonging::Pending);
        let waiting = tokio::spawn({
            let id = id.clone();
            async move { id.tagged().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        assert_eq!(id.adopt(tag(3, 0)), Ok(true));
        let got = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert_eq!(got.unwrap().unwrap(), tag(3, 0));
        assert_eq!(id.tagged().await, tag(3, 0));
    }

    #[test]
    fn refusals_are_logged_once_per_interval() {
        let id = Identity::detached(Belonging::Pending);
        let mut lines = Vec::new();
        for _ in 0..5 {
            id.log_limited("peer a", |skipped| lines.push(("a", skipped)));
            id.log_limited("peer b", |skipped| lines.push(("b", skipped)));
        }
        assert_eq!(lines, vec![("a", 0), ("b", 0)]);
    }

    /// Keys a peer chooses (its addresses) do not grow the table without bound.
    #[test]
    fn the_refusal_table_is_bounded() {
        let id = Identity::detached(Belonging::Pending);
        for k in 0..REFUSAL_KEYS_MAX * 3 {
            id.log_limited(&format!("peer {k}"), |_| {});
            assert!(id.logged.lock().unwrap().len() <= REFUSAL_KEYS_MAX);
        }
    }
}
