//! Listings of any size: paging through one snapshot of the job table (protocol:
//! `joblistPage`, schema/controller.capnp).
//!
//! The first page pins a snapshot on the primary; every next page sends its cursor back with
//! the last job id received, so all pages come from that one snapshot and the listing is one
//! linearizable read. Each page is one [`Client::call`] (F1): a failover between pages sends
//! the next request to the new primary, which does not hold the cursor and answers -ESTALE;
//! the listing then starts over there from a new snapshot, dropping what it had, so the
//! result never mixes snapshots (no duplicates, no gaps). Every reply fits one frame; a job
//! too large for any frame is `Error::TooBig` at once, on every master alike.

use crate::error::Error;
use crate::wire::{Job, JobFilter, JobListPage, JobPage, Op, ReplyData};

// Old controllers do not know `joblistPage`; `joblist_all` asks with `joblist` first.

use super::Client;

/// How many times one listing starts over (each time its snapshot was lost: a failover, or a
/// cursor dropped after idling) before it gives up with -ESTALE.
pub const MAX_LISTING_RESTARTS: u32 = 16;

/// Environment knob: largest page frame to ask for, in bytes (0 or unset: the protocol's
/// frame limit; the controller prefers pages of about 64 KiB within it).
pub const ENV_PAGE_BYTES: &str = "XCE_LIST_PAGE_BYTES";

/// A listing in progress: yields the pages of one snapshot, in job id order.
///
/// [`JobPager::next_page`] returns `Ok(None)` at the end. When the snapshot is lost between
/// pages it returns `Err(Error::Errno(ESTALE))` once and starts over: the caller drops the
/// pages it got and continues with `next_page` (or gives up). [`Client::joblist_all`] does
/// this for callers that want the whole list.
#[derive(Debug)]
pub struct JobPager {
    /// A handle of the context (clones share it; the pager may outlive the borrow it came from).
    client: Client,
    filter: JobFilter,
    /// Largest frame to ask for (0: the protocol default).
    max_bytes: u32,
    cursor: u64,
    after: u64,
    /// Jobs returned so far from the current snapshot (for the filter's limit).
    returned: u64,
    done: bool,
}

impl JobPager {
    /// Jobs returned from the current snapshot so far.
    pub fn returned(&self) -> u64 {
        self.returned
    }

    fn restart(&mut self) {
        self.cursor = 0;
        self.after = 0;
        self.returned = 0;
        self.done = false;
    }

    /// The next page; `Ok(None)` when the listing is complete.
    pub fn next_page(&mut self) -> Result<Option<Vec<Job>>, Error> {
        if self.done {
            return Ok(None);
        }
        let mut filter = self.filter.clone();
        if filter.limit != 0 {
            let left = u64::from(filter.limit).saturating_sub(self.returned);
            if left == 0 {
                self.done = true;
                return Ok(None);
            }
            filter.limit = left as u32;
        }
        let op = Op::JobListPage(JobListPage {
            filter,
            cursor: self.cursor,
            after: self.after,
            max_bytes: self.max_bytes,
        });
        let page = match self.client.call_for(op, |d| match d {
            ReplyData::JobPage(p) => Some(p),
            _ => None,
        }) {
            Ok(p) => p,
            Err(Error::Errno(libc::ESTALE)) if self.cursor != 0 => {
                self.restart();
                return Err(Error::Errno(libc::ESTALE));
            }
            Err(e) => return Err(e),
        };
        self.accept(page)
    }

    /// Checks a page against the listing so far (ids strictly increasing, a cursor that stays
    /// the same, no more jobs than asked) and advances.
    fn accept(&mut self, page: JobPage) -> Result<Option<Vec<Job>>, Error> {
        let mut last = self.after;
        for j in &page.jobs {
            // Job ids are never 0 and a page continues after `after`, in id order.
            if j.job_id <= last {
                return Err(Error::Proto);
            }
            last = j.job_id;
        }
        if self.cursor != 0 && page.more && page.cursor != self.cursor {
            return Err(Error::Proto);
        }
        if page.more && (page.cursor == 0 || page.jobs.is_empty()) {
            // More to come needs a cursor and progress; anything else would loop forever.
            return Err(Error::Proto);
        }
        self.returned += page.jobs.len() as u64;
        if self.filter.limit != 0 && self.returned > u64::from(self.filter.limit) {
            return Err(Error::Proto);
        }
        self.after = last;
        self.cursor = page.cursor;
        self.done = !page.more;
        Ok(Some(page.jobs))
    }
}

/// The page size asked for by `XCE_LIST_PAGE_BYTES` (0: the default).
fn env_page_bytes() -> u32 {
    std::env::var(ENV_PAGE_BYTES)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

impl Client {
    /// A listing of the jobs matching `filter` (its `limit` over the whole listing, 0: all),
    /// paged through one snapshot. `max_page_bytes` bounds each reply frame (0: the protocol
    /// default, 16 MiB).
    pub fn joblist_pager(&self, filter: JobFilter, max_page_bytes: u32) -> JobPager {
        JobPager {
            client: self.clone(),
            filter,
            max_bytes: max_page_bytes,
            cursor: 0,
            after: 0,
            returned: 0,
            done: false,
        }
    }

    /// Every job matching `filter`, however many, as one consistent snapshot: one `joblist`
    /// round trip when the answer fits a frame (as before, and what older controllers
    /// speak); when the controller answers -E_XCE_TOOBIG, paged through one snapshot in
    /// frames within the limit, started over on a new primary after a failover.
    pub fn joblist_all(&self, filter: JobFilter) -> Result<Vec<Job>, Error> {
        let whole = self.call_for(Op::JobList(filter.clone()), |d| match d {
            ReplyData::Jobs(v) => Some(v),
            ReplyData::None => Some(Vec::new()),
            _ => None,
        });
        match whole {
            Ok(v) => return Ok(v),
            // Too large for one frame (the controller says so, or the frame was over this
            // client's limit): the same table, in pages.
            Err(Error::TooBig) => {}
            Err(e) => return Err(e),
        }
        self.joblist_paged(filter)
    }

    /// [`Client::joblist_all`] without the single-frame attempt: always pages.
    pub fn joblist_paged(&self, filter: JobFilter) -> Result<Vec<Job>, Error> {
        let mut pager = self.joblist_pager(filter, env_page_bytes());
        let mut jobs = Vec::new();
        let mut restarts = 0;
        loop {
            match pager.next_page() {
                Ok(Some(page)) => {
                    if jobs.is_empty() {
                        jobs = page;
                    } else {
                        jobs.extend(page);
                    }
                }
                Ok(None) => return Ok(jobs),
                Err(Error::Errno(libc::ESTALE)) if restarts < MAX_LISTING_RESTARTS => {
                    restarts += 1;
                    jobs.clear();
                }
                Err(e) => return Err(e),
            }
        }
    }
}
