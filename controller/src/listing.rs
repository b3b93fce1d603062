//! Listings of any size (P12): a snapshot-bound cursor over the job table, and the frame
//! bound every reply obeys.
//!
//! The first page of a `joblistPage` pins the job table as of that moment (an O(1) clone of
//! the persistent map, taken after the read barrier) and registers it under a random cursor;
//! the next pages are cut from that same pinned table, so the whole listing is one
//! linearizable read however many frames it takes. Pinned tables cost only the copies that
//! later writes make of the nodes they change, and they are bounded: at most
//! [`MAX_CURSORS`] per node, each dropped after [`CURSOR_IDLE`] without a request. A cursor
//! this node does not hold is -ESTALE (the client starts the listing over).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use xce::error::E_XCE_TOOBIG;
use xce::wire::{self, JobFilter, JobListPage, JobPage, Reply, ReplyData};

use crate::state::{self, JobRec};

/// Pinned listings per node; the least recently used goes first.
pub const MAX_CURSORS: usize = 32;
/// A listing idle for this long is dropped.
pub const CURSOR_IDLE: Duration = Duration::from_secs(60);
/// Preferred size of one page: large enough that the round trips cost little next to the
/// data, small enough that client and server hold little per frame.
pub const PAGE_BYTES: usize = 4 << 20;
/// Room kept in every frame for the envelope (seq, status, redirect, page fields).
pub const ENVELOPE_BYTES: usize = 4096;

struct Pinned {
    jobs: imbl::OrdMap<u64, JobRec>,
    filter: JobFilter,
    used: Instant,
}

/// The listings pinned on this node.
#[derive(Default)]
pub struct Cursors {
    pinned: Mutex<HashMap<u64, Pinned>>,
}

/// The filter a cursor is bound to: the same as the request's, whatever is left of its limit.
fn unlimited(f: &JobFilter) -> JobFilter {
    JobFilter {
        limit: 0,
        ..f.clone()
    }
}

impl Cursors {
    /// How many listings are pinned right now (metrics).
    pub fn len(&self) -> usize {
        self.pinned.lock().expect("cursors").len()
    }

    fn pin(&self, jobs: imbl::OrdMap<u64, JobRec>, filter: &JobFilter) -> u64 {
        let mut pinned = self.pinned.lock().expect("cursors");
        pinned.retain(|_, p| p.used.elapsed() < CURSOR_IDLE);
        while pinned.len() >= MAX_CURSORS {
            let oldest = pinned.iter().min_by_key(|(_, p)| p.used).map(|(&k, _)| k);
            match oldest {
                Some(k) => pinned.remove(&k),
                None => break,
            };
        }
        let id = loop {
            let id = rand_id();
            if id != 0 && !pinned.contains_key(&id) {
                break id;
            }
        };
        pinned.insert(
            id,
            Pinned {
                jobs,
                filter: unlimited(filter),
                used: Instant::now(),
            },
        );
        id
    }

    /// The pinned table of `id` if this node holds it for this filter.
    fn get(&self, id: u64, filter: &JobFilter) -> Option<imbl::OrdMap<u64, JobRec>> {
        let mut pinned = self.pinned.lock().expect("cursors");
        let p = pinned.get_mut(&id)?;
        if p.used.elapsed() >= CURSOR_IDLE || p.filter != unlimited(filter) {
            return None;
        }
        p.used = Instant::now();
        Some(p.jobs.clone())
    }

    fn drop_cursor(&self, id: u64) {
        self.pinned.lock().expect("cursors").remove(&id);
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

/// The bytes of jobs a reply may carry when the client accepts frames of `client_max`
/// (0: the protocol default) and this node sends at most `server_max`.
pub fn hard_budget(client_max: u32, server_max: usize) -> usize {
    let client = if client_max == 0 {
        wire::DEFAULT_MAX_MESSAGE_BYTES
    } else {
        client_max as usize
    };
    client.min(server_max).saturating_sub(ENVELOPE_BYTES)
}

/// Answers one `joblistPage`. `current` gives the job table as of now (called only for a
/// new listing, after the read barrier).
pub fn answer_page(
    cursors: &Cursors,
    seq: u64,
    req: &JobListPage,
    server_max: usize,
    current: impl FnOnce() -> imbl::OrdMap<u64, JobRec>,
    node_id: u64,
) -> Reply {
    let (table, after) = if req.cursor == 0 {
        (current(), None)
    } else {
        match cursors.get(req.cursor, &req.filter) {
            Some(t) => (t, (req.after != 0).then_some(req.after)),
            None => return Reply::status(seq, -libc::ESTALE),
        }
    };
    let max_jobs = match req.filter.limit {
        0 => usize::MAX,
        n => n as usize,
    };
    let hard = hard_budget(req.max_bytes, server_max);
    let page = state::page(
        &table,
        &req.filter,
        after,
        max_jobs,
        PAGE_BYTES.min(hard),
        hard,
    );
    if page.too_big {
        return Reply::status(seq, -E_XCE_TOOBIG);
    }
    let more = page.more && page.jobs.len() < max_jobs;
    let total = table.len() as u64;
    let cursor = match (more, req.cursor) {
        (false, 0) => 0,
        (false, c) => {
            cursors.drop_cursor(c);
            0
        }
        (true, 0) => {
            let c = cursors.pin(table, &req.filter);
            eprintln!("node {node_id}: listing {c:016x} pinned ({total} jobs)");
            c
        }
        (true, c) => c,
    };
    Reply::ok(
        seq,
        ReplyData::JobPage(JobPage {
            jobs: page.jobs,
            cursor,
            more,
            total,
        }),
    )
}

/// Encodes `reply` into `out`, or — when its frame would be larger than `max_bytes`, which
/// the peer is bound to refuse — a -E_XCE_TOOBIG status reply with the same seq instead.
/// Returns whether the reply had to be replaced.
pub fn encode_bounded(reply: &Reply, max_bytes: usize, out: &mut Vec<u8>) -> bool {
    out.clear();
    wire::encode_reply(reply, out);
    if out.len() <= max_bytes {
        return false;
    }
    out.clear();
    wire::encode_reply(&Reply::status(reply.seq, -E_XCE_TOOBIG), out);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Cmd, Proposal, State, SubmitSpec};

    fn table(n: u64, command_len: usize) -> State {
        let mut s = State::default();
        for id in 1..=n {
            s.apply(&Proposal {
                client_id: [2; 16],
                request_id: 0,
                now_ms: 1,
                cmd: Cmd::JobSubmit(SubmitSpec {
                    job_id: id * 10,
                    name: format!("j{id}"),
                    user: if id % 2 == 0 { "even" } else { "odd" }.into(),
                    queue: String::new(),
                    command: "c".repeat(command_len),
                    ncpus: 1,
                    mem_mb: 1,
                }),
            });
        }
        s
    }

    fn page_of(r: &Reply) -> &JobPage {
        match &r.data {
            ReplyData::JobPage(p) => p,
            other => panic!("status {} data {other:?}", r.status),
        }
    }

    /// Pages through a listing, with writes between the pages; returns the ids listed.
    fn list_all(cursors: &Cursors, s: &mut State, req: JobListPage, frame: usize) -> Vec<u64> {
        let mut req = req;
        let mut ids = Vec::new();
        let mut extra = 1_000_000;
        loop {
            let r = answer_page(cursors, 1, &req, frame, || s.jobs_snapshot(), 1);
            let mut out = Vec::new();
            assert!(
                !encode_bounded(&r, frame, &mut out),
                "a page over the frame"
            );
            let p = page_of(&r).clone();
            ids.extend(p.jobs.iter().map(|j| j.job_id));
            if !p.more {
                return ids;
            }
            // A write between pages must not show up in this listing.
            extra += 1;
            s.apply(&Proposal {
                client_id: [3; 16],
                request_id: 0,
                now_ms: 2,
                cmd: Cmd::JobSubmit(SubmitSpec {
                    job_id: extra,
                    name: "late".into(),
                    user: "even".into(),
                    queue: String::new(),
                    command: String::new(),
                    ncpus: 1,
                    mem_mb: 1,
                }),
            });
            req.cursor = p.cursor;
            req.after = *ids.last().unwrap();
            if req.filter.limit != 0 {
                req.filter.limit -= p.jobs.len() as u32;
            }
        }
    }

    #[test]
    fn pages_come_from_one_snapshot_within_the_frame() {
        let cursors = Cursors::default();
        let mut s = table(3000, 500);
        let frame = 64 << 10;
        let ids = list_all(&cursors, &mut s, JobListPage::default(), frame);
        let want: Vec<u64> = (1..=3000).map(|i| i * 10).collect();
        assert_eq!(ids, want);
        // The finished listing dropped its cursor.
        assert!(cursors.pinned.lock().unwrap().is_empty());
    }

    #[test]
    fn filter_and_limit_hold_across_pages() {
        let cursors = Cursors::default();
        let mut s = table(3000, 500);
        let req = JobListPage {
            filter: JobFilter {
                user: "even".into(),
                limit: 700,
                ..Default::default()
            },
            ..Default::default()
        };
        let ids = list_all(&cursors, &mut s, req, 64 << 10);
        let want: Vec<u64> = (1..=3000)
            .filter(|i| i % 2 == 0)
            .map(|i| i * 10)
            .take(700)
            .collect();
        assert_eq!(ids, want);
    }

    #[test]
    fn unknown_cursor_is_estale_and_a_job_too_large_is_toobig() {
        let cursors = Cursors::default();
        let s = table(3, 100_000);
        let req = JobListPage {
            cursor: 42,
            after: 10,
            ..Default::default()
        };
        let r = answer_page(&cursors, 7, &req, 1 << 20, || s.jobs_snapshot(), 1);
        assert_eq!((r.seq, r.status), (7, -libc::ESTALE));
        // One job bigger than any frame this client accepts.
        let req = JobListPage {
            max_bytes: 50_000,
            ..Default::default()
        };
        let r = answer_page(&cursors, 8, &req, 1 << 20, || s.jobs_snapshot(), 1);
        assert_eq!(r.status, -E_XCE_TOOBIG);
        // A job larger than a preferred page but within the frame goes alone.
        let r = answer_page(
            &cursors,
            9,
            &JobListPage::default(),
            150_000,
            || s.jobs_snapshot(),
            1,
        );
        assert_eq!(page_of(&r).jobs.len(), 1);
    }

    #[test]
    fn a_reply_over_the_frame_goes_out_as_toobig() {
        let big = Reply::ok(
            5,
            ReplyData::Jobs(vec![wire::Job {
                command: "x".repeat(10_000),
                ..Default::default()
            }]),
        );
        let mut out = Vec::new();
        assert!(encode_bounded(&big, 4096, &mut out));
        let r = wire::decode_reply(&out, &wire::Limits::default()).unwrap();
        assert_eq!((r.seq, r.status), (5, -E_XCE_TOOBIG));
        assert!(!encode_bounded(&big, 1 << 20, &mut out));
    }

    #[test]
    fn cursors_are_bounded() {
        let cursors = Cursors::default();
        let s = table(10, 1);
        for _ in 0..MAX_CURSORS + 5 {
            cursors.pin(s.jobs_snapshot(), &JobFilter::default());
        }
        assert_eq!(cursors.pinned.lock().unwrap().len(), MAX_CURSORS);
    }
}
