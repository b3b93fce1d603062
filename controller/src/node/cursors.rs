//! The listings pinned on a node for paged reads (P12): each cursor holds a snapshot of the
//! job table, behind a lock — kept here, out of the state machine.
//!
//! The first page of a `joblistPage` pins the job table as of that moment (an O(1) clone of
//! the persistent map, taken after the read barrier) and registers it under a random cursor;
//! the next pages are cut from that same pinned table (`ports/client/listing.rs`), so the
//! whole listing is one linearizable read however many frames it takes.
//!
//! Cursors are bounded by what they cost, not by a small count (defect 8: with 32 cursors and
//! the least recently used evicted, 64 concurrent paged listers evicted each other forever).
//! A pinned table costs only the nodes that later writes copied away from it: tables pinned
//! at the same applied write share everything, and the bytes retained by all cursors are at
//! most (writes since the oldest pin) × (one root-to-leaf path), and at most one table per
//! distinct pinned version ([`retained_estimate`]). A cursor lives until its listing ends or
//! it idles for [`CURSOR_IDLE`]; only when a new listing would take the estimate over
//! [`CURSOR_MEMORY`] (or the count over [`MAX_CURSORS`]) is the cursor pinned longest ago
//! dropped — so listers that make progress are never evicted by other listers, only by a
//! write volume that would otherwise pin more memory than the budget. Nothing is logged per
//! page; a pin when it is the only open listing, else at most once a second per node (with
//! the count since the last line); an eviction always.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sm::state::{JobFilter, JobRec};

/// Most listings pinned at once per node (each costs a few hundred bytes of its own; what the
/// pinned tables retain is bounded by [`CURSOR_MEMORY`]).
pub const MAX_CURSORS: usize = 8192;
/// Budget for the job-table nodes that pinned listings keep alive (estimated).
pub const CURSOR_MEMORY: usize = 512 << 20;
/// A listing idle for this long is dropped.
pub const CURSOR_IDLE: Duration = Duration::from_secs(60);
/// Estimated bytes of one job in a table node (the record and its texts).
const JOB_BYTES: usize = 320;
/// Entries per node of the persistent map (imbl's B-tree).
const NODE_JOBS: usize = 64;

struct Pinned {
    jobs: imbl::OrdMap<u64, JobRec>,
    filter: JobFilter,
    used: Instant,
    /// The table's applied-write count when pinned (its version).
    applied: u64,
}

/// The listings pinned on this node.
pub struct Cursors {
    inner: Mutex<Inner>,
    /// [`CURSOR_MEMORY`], or less in tests.
    budget: usize,
    /// This node's id, for the log.
    node: u64,
}

#[derive(Default)]
struct Inner {
    pinned: HashMap<u64, Pinned>,
    /// Pinned versions (applied-write counts) → how many cursors pin each.
    versions: BTreeMap<u64, usize>,
    /// When idle cursors were last looked for.
    swept: Option<Instant>,
    /// When a pin was last logged, and pins since (at most one line a second).
    logged: Option<Instant>,
    unlogged: u64,
}

impl Inner {
    fn remove(&mut self, id: u64) -> Option<Pinned> {
        let p = self.pinned.remove(&id)?;
        if let Some(n) = self.versions.get_mut(&p.applied) {
            *n -= 1;
            if *n == 0 {
                self.versions.remove(&p.applied);
            }
        }
        Some(p)
    }

    fn insert(&mut self, id: u64, p: Pinned) {
        *self.versions.entry(p.applied).or_default() += 1;
        self.pinned.insert(id, p);
    }

    /// Drops cursors idle for [`CURSOR_IDLE`] (looked for at most once a second).
    fn drop_idle(&mut self) {
        if self
            .swept
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.swept = Some(Instant::now());
        let idle: Vec<u64> = self
            .pinned
            .iter()
            .filter(|(_, p)| p.used.elapsed() >= CURSOR_IDLE)
            .map(|(&k, _)| k)
            .collect();
        for k in idle {
            self.remove(k);
        }
    }
}

impl Default for Cursors {
    fn default() -> Self {
        Cursors::with_budget(CURSOR_MEMORY)
    }
}

/// The filter a cursor is bound to: the same as the request's, whatever is left of its limit.
fn unlimited(f: &JobFilter) -> JobFilter {
    JobFilter {
        limit: 0,
        ..f.clone()
    }
}

/// Estimated bytes that tables pinned at older `versions` (applied-write counts) keep alive
/// beyond the current table of `jobs` jobs at version `now`: every write since a version
/// copied at most one root-to-leaf path away from it, and no version retains more than a
/// whole table.
pub fn retained_estimate(versions: &BTreeMap<u64, usize>, now: u64, jobs: usize) -> usize {
    let old = versions.range(..now).count();
    let Some((&oldest, _)) = versions.first_key_value().filter(|_| old > 0) else {
        return 0;
    };
    let mut depth = 1;
    let mut reach = NODE_JOBS;
    while reach < jobs {
        reach = reach.saturating_mul(NODE_JOBS);
        depth += 1;
    }
    let path = depth * NODE_JOBS * JOB_BYTES;
    let writes = usize::try_from(now - oldest).unwrap_or(usize::MAX);
    writes
        .saturating_mul(path)
        .min(old.saturating_mul(jobs.max(1) * JOB_BYTES))
}

impl Cursors {
    /// How many listings are pinned right now (metrics).
    pub fn len(&self) -> usize {
        self.inner.lock().expect("cursors").pinned.len()
    }

    pub fn with_budget(budget: usize) -> Cursors {
        Cursors {
            inner: Mutex::default(),
            budget,
            node: 0,
        }
    }

    /// The cursors of node `id`, with the default budget.
    pub fn for_node(id: u64) -> Cursors {
        Cursors {
            node: id,
            ..Cursors::default()
        }
    }

    /// Pins `jobs` (at applied-write count `applied`) for a listing with `filter`: the new
    /// cursor, after dropping the oldest pins over the budget.
    pub fn pin(&self, jobs: imbl::OrdMap<u64, JobRec>, applied: u64, filter: &JobFilter) -> u64 {
        let mut inner = self.inner.lock().expect("cursors");
        inner.drop_idle();
        loop {
            let retained = retained_estimate(&inner.versions, applied, jobs.len());
            if inner.pinned.len() < MAX_CURSORS && retained <= self.budget {
                break;
            }
            // The oldest version retains the most: drop its least recently used cursor.
            let Some((&version, _)) = inner.versions.first_key_value() else {
                break;
            };
            let oldest = inner
                .pinned
                .iter()
                .filter(|(_, p)| p.applied == version)
                .min_by_key(|(_, p)| p.used)
                .map(|(&k, _)| k);
            let Some(k) = oldest else { break };
            inner.remove(k);
            crate::log_warn!(
                "listing {k:016x} dropped: {} listings pinned, about {} MiB retained (budget {} MiB)",
                inner.pinned.len() + 1,
                retained >> 20,
                self.budget >> 20
            );
        }
        let id = loop {
            let id = rand_id();
            if id != 0 && !inner.pinned.contains_key(&id) {
                break id;
            }
        };
        let total = jobs.len();
        let first = inner.pinned.is_empty();
        inner.insert(
            id,
            Pinned {
                jobs,
                filter: unlimited(filter),
                used: Instant::now(),
                applied,
            },
        );
        // The only open listing, or at most one line a second however many start.
        inner.unlogged += 1;
        if first
            || inner
                .logged
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            eprintln!(
                "node {}: listing {id:016x} pinned ({total} jobs); {} listings pinned since the last such line, {} open",
                self.node,
                inner.unlogged,
                inner.pinned.len()
            );
            inner.logged = Some(Instant::now());
            inner.unlogged = 0;
        }
        id
    }

    /// The pinned table of `id` if this node holds it for this filter.
    pub fn get(&self, id: u64, filter: &JobFilter) -> Option<imbl::OrdMap<u64, JobRec>> {
        let mut inner = self.inner.lock().expect("cursors");
        let p = inner.pinned.get_mut(&id)?;
        if p.used.elapsed() >= CURSOR_IDLE || p.filter != unlimited(filter) {
            return None;
        }
        p.used = Instant::now();
        Some(p.jobs.clone())
    }

    /// Ends listing `id`.
    pub fn drop_cursor(&self, id: u64) {
        self.inner.lock().expect("cursors").remove(id);
    }
}

/// A cursor id no other listing (on any node, in any run) is likely to have.
fn rand_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    // RandomState's keys come from the OS once per process and vary per instance.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(N.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sm::state::State;

    /// Defect 8: far more concurrent listings than the old 32 all keep their cursors when
    /// nothing is written meanwhile (they share one table), and the count is still bounded.
    #[test]
    fn concurrent_listings_keep_their_cursors() {
        let cursors = Cursors::default();
        let s = State::with_test_jobs(10, 1);
        let ids: Vec<u64> = (0..1000)
            .map(|_| cursors.pin(s.jobs_snapshot(), s.applied_count(), &JobFilter::default()))
            .collect();
        assert_eq!(cursors.len(), 1000);
        for id in &ids {
            assert!(cursors.get(*id, &JobFilter::default()).is_some());
        }
        for _ in 0..MAX_CURSORS {
            cursors.pin(s.jobs_snapshot(), s.applied_count(), &JobFilter::default());
        }
        assert_eq!(cursors.len(), MAX_CURSORS);
    }

    /// Only the write volume since the oldest pin can push cursors out, oldest pin first.
    #[test]
    fn memory_bound_drops_the_oldest_pin() {
        // A budget of one 100-job table.
        let cursors = Cursors::with_budget(100 * JOB_BYTES);
        let s = State::with_test_jobs(100, 1);
        let f = JobFilter::default();
        let a = cursors.pin(s.jobs_snapshot(), 1, &f);
        let b = cursors.pin(s.jobs_snapshot(), 1, &f);
        let c = cursors.pin(s.jobs_snapshot(), 2, &f);
        assert_eq!(cursors.len(), 3, "one older version fits");
        // Many writes later two older versions would retain two tables: the oldest goes.
        let d = cursors.pin(s.jobs_snapshot(), 1000, &f);
        assert_eq!(cursors.len(), 2);
        assert!(cursors.get(a, &f).is_none() && cursors.get(b, &f).is_none());
        assert!(cursors.get(c, &f).is_some() && cursors.get(d, &f).is_some());
    }

    #[test]
    fn retained_estimate_is_bounded_by_writes_and_tables() {
        let v: BTreeMap<u64, usize> = [(10, 2), (20, 1)].into_iter().collect();
        assert_eq!(
            retained_estimate(&v, 10, 1000),
            0,
            "pinned at the current version"
        );
        // 1000 jobs: two levels; 5 writes since the oldest pin.
        assert_eq!(
            retained_estimate(&v, 15, 1000),
            5 * 2 * NODE_JOBS * JOB_BYTES
        );
        // Many writes: at most one table per older version.
        assert_eq!(retained_estimate(&v, 1_000_000, 1000), 2 * 1000 * JOB_BYTES);
    }
}
