//! Listings of any size (P12), as the client port answers them: a page of a snapshot-bound
//! listing cut from the table its cursor pins (`node/cursors.rs`), and the frame bound every
//! reply obeys. A cursor this node does not hold is -ESTALE (the client starts the listing
//! over).

use xce_proto::error::E_XCE_TOOBIG;
use xce_proto::wire::{self, JobListPage, JobPage, Reply, ReplyData};

use super::view::{filter_from_wire, job_to_wire};
use crate::node::cursors::Cursors;
use crate::sm::state::{self, JobRec};

/// Preferred size of one page: large enough that the round trips cost little next to the
/// data (on a LAN a page of 64 KiB takes about as long to send as a round trip), small enough
/// that one listing does not hold a slow link for long — 0.5 s at 1 Mbit/s, between its pages
/// other clients' replies go out (issue 29) — and that client and server hold little per frame.
pub const PAGE_BYTES: usize = 64 << 10;
/// Room kept in every frame for the envelope (seq, status, redirect, page fields).
pub const ENVELOPE_BYTES: usize = 4096;

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

/// Answers one `joblistPage`. `current` gives the job table as of now and its applied-write
/// count (called only for a new listing, after the read barrier).
pub fn answer_page(
    cursors: &Cursors,
    seq: u64,
    req: &JobListPage,
    server_max: usize,
    current: impl FnOnce() -> (imbl::OrdMap<u64, JobRec>, u64),
) -> Reply {
    let filter = filter_from_wire(&req.filter);
    let (table, applied, after) = if req.cursor == 0 {
        let (t, applied) = current();
        (t, applied, None)
    } else {
        match cursors.get(req.cursor, &filter) {
            Some(t) => (t, 0, (req.after != 0).then_some(req.after)),
            None => return Reply::status(seq, -libc::ESTALE),
        }
    };
    let max_jobs = match req.filter.limit {
        0 => usize::MAX,
        n => n as usize,
    };
    let hard = hard_budget(req.max_bytes, server_max);
    let page = state::page(&table, &filter, after, max_jobs, PAGE_BYTES.min(hard), hard);
    if page.too_big {
        return Reply::status(seq, -E_XCE_TOOBIG);
    }
    let more = page.more && page.jobs.len() < max_jobs;
    let jobs: Vec<wire::Job> = page.jobs.into_iter().map(job_to_wire).collect();
    let total = table.len() as u64;
    let cursor = match (more, req.cursor) {
        (false, 0) => 0,
        (false, c) => {
            cursors.drop_cursor(c);
            0
        }
        (true, 0) => cursors.pin(table, applied, &filter),
        (true, c) => c,
    };
    Reply::ok(
        seq,
        ReplyData::JobPage(JobPage {
            jobs,
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
    use crate::sm::state::{Cmd, Proposal, State, SubmitSpec};
    use xce_proto::wire::JobFilter;

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
            let r = answer_page(cursors, 1, &req, frame, || {
                (s.jobs_snapshot(), s.applied_count())
            });
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
        let mut s = State::with_test_jobs(3000, 500);
        let frame = 64 << 10;
        let ids = list_all(&cursors, &mut s, JobListPage::default(), frame);
        let want: Vec<u64> = (1..=3000).map(|i| i * 10).collect();
        assert_eq!(ids, want);
        // The finished listing dropped its cursor.
        assert_eq!(cursors.len(), 0);
    }

    #[test]
    fn filter_and_limit_hold_across_pages() {
        let cursors = Cursors::default();
        let mut s = State::with_test_jobs(3000, 500);
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
        let s = State::with_test_jobs(3, 100_000);
        let req = JobListPage {
            cursor: 42,
            after: 10,
            ..Default::default()
        };
        let r = answer_page(&cursors, 7, &req, 1 << 20, || {
            (s.jobs_snapshot(), s.applied_count())
        });
        assert_eq!((r.seq, r.status), (7, -libc::ESTALE));
        // One job bigger than any frame this client accepts.
        let req = JobListPage {
            max_bytes: 50_000,
            ..Default::default()
        };
        let r = answer_page(&cursors, 8, &req, 1 << 20, || {
            (s.jobs_snapshot(), s.applied_count())
        });
        assert_eq!(r.status, -E_XCE_TOOBIG);
        // A job larger than a preferred page but within the frame goes alone.
        let r = answer_page(&cursors, 9, &JobListPage::default(), 150_000, || {
            (s.jobs_snapshot(), s.applied_count())
        });
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
}
