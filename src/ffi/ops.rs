//! One export per op of docs/protocol.md. Reply-bearing ops run the full failover loop of the
//! client (F1); fire-and-forget ops follow F12; wakeups are local (F13).
//!
//! Common contract (not repeated on each function): `ctx` comes from `xcecli_start`; a NULL
//! ctx or required pointer, an unknown `XCE_*` integer or a string that is not UTF-8 is
//! -EINVAL with nothing sent; out-parameters are written only on success; any number of
//! threads may call ops on one ctx (they are serialised, F11); the call blocks at most for
//! the retry budget / deadline of the ctx and returns -EINTR after `xcecli_wakeup`. Failures
//! after the budget: -E_XCE_NOT_READY ("cluster not ready") when no primary was found, else
//! the last transport error. An op that returns memory returns -ENOMEM (nothing written)
//! when it cannot be allocated; what it returns is one allocation per call, released whole by
//! the documented free function (F22).

use std::os::raw::{c_char, c_int};

use super::cast::{try_arg, try_ctx, try_mut, try_ref, try_slice, try_str};
use super::panic::ffi_panic_boundary;
use super::types::*;
use super::xcecli_ctx_t;
use crate::wire::msg;

/// `Ok(())` → 0, `Err(e)` → its negative status.
fn done(r: Result<(), crate::Error>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => e.status(),
    }
}

/// Returns the negative status from the export when the op failed.
macro_rules! try_op {
    ($res:expr) => {
        match $res {
            Ok(v) => v,
            Err(e) => return crate::Error::status(e),
        }
    };
}

// ---------------------------------------------------------------------------------------
// Reply-bearing reads.

/// `hello`: identifies the client and learns who answered. On success writes a new
/// `xce_controller_info_t` to `*info_out` (free it with `xce_free_controller_info`); returns 0.
#[no_mangle]
pub extern "C" fn xcecli_hello(
    ctx: xcecli_ctx_t,
    info_out: *mut *mut xce_controller_info_t,
) -> c_int {
    ffi_panic_boundary! { "xcecli_hello",
        let c = try_ctx!(ctx);
        let out = try_mut!(info_out);
        let info = try_op!(c.hello());
        out_one(&info, ctrl_info_fill, out)
    }
}

/// `joblist`: all jobs, in the seeds' shape (fixed ABI, c-api.md). On success writes to
/// `*out` an array of `count + 1` job pointers, the last one NULL (the array is never NULL,
/// also for 0 jobs), and returns `count`. Free it with `xce_free_joblist(*out)`, also when
/// `count` is 0: that frees the jobs and their strings too — they were allocated with the
/// array, so they cannot be freed one by one (never with `xce_free_job`) nor outlive it.
/// For a filtered listing see `xcecli_joblist_filter`.
#[no_mangle]
pub extern "C" fn xcecli_joblist(ctx: xcecli_ctx_t, out: *mut *mut *mut xce_job_t) -> c_int {
    ffi_panic_boundary! { "xcecli_joblist",
        let c = try_ctx!(ctx);
        let out = try_mut!(out);
        let jobs = try_op!(c.joblist(msg::JobFilter::default()));
        out_job_ptrs(&jobs, out)
    }
}

/// `joblist` with a filter: jobs matching `filter` (NULL: all jobs). On success writes a flat
/// array to `*jobs_out` (NULL when empty) and returns its count; free it with
/// `xce_free_jobs(jobs, count)`. A `state_mask` with bits other than `1 << XCE_JOB_*` is
/// -EINVAL.
#[no_mangle]
pub extern "C" fn xcecli_joblist_filter(
    ctx: xcecli_ctx_t,
    filter: *const xce_job_filter_t,
    jobs_out: *mut *mut xce_job_t,
) -> c_int {
    ffi_panic_boundary! { "xcecli_joblist_filter",
        let c = try_ctx!(ctx);
        let out = try_mut!(jobs_out);
        // SAFETY: filter is NULL or valid for the call (documented).
        let filter = try_arg!(filter_from_c(unsafe { filter.as_ref() }));
        let jobs = try_op!(c.joblist(filter));
        out_list(&jobs, job_fill, out)
    }
}

/// A listing in progress, page by page (`xcecli_joblist_open`). Opaque to C.
pub struct xce_joblist_pager {
    _private: [u8; 0],
}

/// Starts a listing of the jobs matching `filter` (NULL: all jobs; its `limit` counts over the
/// whole listing) that comes back in pages, all of them from one snapshot of the job table on
/// the primary: one consistent view, whatever the table's size. `max_page_bytes` bounds each
/// page's reply (0: the protocol's 16 MiB limit; the controller sends pages of about 64 KiB).
/// Nothing is sent yet. On success writes a new pager to `*pager_out` (release it with
/// `xcecli_joblist_close`) and returns 0; -EINVAL for a NULL argument or a bad `state_mask`.
/// The pager holds its own reference to the context (after `xcecli_stop`, its pages are
/// -E_XCE_CLOSED). Like every handle it is a checked value, not memory: after
/// `xcecli_joblist_close` it is -E_XCE_CLOSED to `xcecli_joblist_next` and a no-op to a second
/// close (F20). `filter` is borrowed for the call.
#[no_mangle]
pub extern "C" fn xcecli_joblist_open(
    ctx: xcecli_ctx_t,
    filter: *const xce_job_filter_t,
    max_page_bytes: u32,
    pager_out: *mut *mut xce_joblist_pager,
) -> c_int {
    ffi_panic_boundary! { "xcecli_joblist_open",
        let c = try_ctx!(ctx);
        let out = try_mut!(pager_out);
        // SAFETY: filter is NULL or valid for the call (documented).
        let filter = try_arg!(filter_from_c(unsafe { filter.as_ref() }));
        match super::cast::new_pager(c.joblist_pager(filter, max_page_bytes)) {
            Some(h) => {
                *out = h as usize as *mut xce_joblist_pager;
                0
            }
            None => -libc::ENOMEM,
        }
    }
}

/// The next page of a listing: writes a flat array to `*jobs_out` (free it with
/// `xce_free_jobs(jobs, count)`) and returns its count (> 0); returns 0 at the end of the
/// listing (nothing written). -ESTALE: the snapshot was lost between pages (a failover; a
/// pager left idle for a minute): the listing has started over on the primary, so drop the
/// pages received so far and keep calling. Other negative statuses as for every op (F7:
/// -E_XCE_NOT_READY, …); -EINVAL for a NULL argument or a value that is not a pager,
/// -E_XCE_CLOSED for a closed pager. Calls on one pager from several threads are serialised.
#[no_mangle]
pub extern "C" fn xcecli_joblist_next(
    pager: *mut xce_joblist_pager,
    jobs_out: *mut *mut xce_job_t,
) -> c_int {
    ffi_panic_boundary! { "xcecli_joblist_next",
        let pager = match super::cast::pager_of(pager as usize) {
            Ok(p) => p,
            Err(code) => return code,
        };
        let out = try_mut!(jobs_out);
        let mut pager = pager.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            match pager.next_page() {
                Ok(None) => return 0,
                Ok(Some(page)) if page.is_empty() => continue,
                Ok(Some(page)) => return out_list(&page, job_fill, out),
                Err(e) => return e.status(),
            }
        }
    }
}

/// Releases a pager (the controller drops its snapshot when it idles). NULL, or a pager
/// closed already, is a no-op; a page being fetched on another thread finishes first.
#[no_mangle]
pub extern "C" fn xcecli_joblist_close(pager: *mut xce_joblist_pager) {
    ffi_panic_boundary! { "xcecli_joblist_close",
        if !pager.is_null() {
            drop(super::cast::close_pager(pager as usize));
        }
    }
}

/// `jobinfo`: one job. On success writes a new `xce_job_t` to `*job_out` (free it with
/// `xce_free_job`); returns 0. An unknown job is -ENOENT.
#[no_mangle]
pub extern "C" fn xcecli_jobinfo(
    ctx: xcecli_ctx_t,
    jobid: u64,
    job_out: *mut *mut xce_job_t,
) -> c_int {
    ffi_panic_boundary! { "xcecli_jobinfo",
        let c = try_ctx!(ctx);
        let out = try_mut!(job_out);
        let job = try_op!(c.jobinfo(jobid));
        out_one(&job, job_fill, out)
    }
}

/// `reslist`: resource definitions. On success writes an array to `*res_out` (NULL when
/// empty) and returns its count; free it with `xce_free_resources(res, count)`.
#[no_mangle]
pub extern "C" fn xcecli_reslist(ctx: xcecli_ctx_t, res_out: *mut *mut xce_resource_t) -> c_int {
    ffi_panic_boundary! { "xcecli_reslist",
        let c = try_ctx!(ctx);
        let out = try_mut!(res_out);
        let res = try_op!(c.reslist());
        out_list(&res, resource_fill, out)
    }
}

/// `workerlist`: worker hosts. On success writes an array to `*hosts_out` (NULL when empty)
/// and returns its count; free it with `xce_free_hosts(hosts, count)`.
#[no_mangle]
pub extern "C" fn xcecli_workerlist(ctx: xcecli_ctx_t, hosts_out: *mut *mut xce_host_t) -> c_int {
    ffi_panic_boundary! { "xcecli_workerlist",
        let c = try_ctx!(ctx);
        let out = try_mut!(hosts_out);
        let hosts = try_op!(c.workerlist());
        out_list(&hosts, host_fill, out)
    }
}

/// `clusterconf`: the cluster's controllers, primary, term and queues. On success writes a
/// new `xce_cluster_conf_t` to `*conf_out` (free it with `xce_free_cluster_conf`); returns 0.
#[no_mangle]
pub extern "C" fn xcecli_clusterconf(
    ctx: xcecli_ctx_t,
    conf_out: *mut *mut xce_cluster_conf_t,
) -> c_int {
    ffi_panic_boundary! { "xcecli_clusterconf",
        let c = try_ctx!(ctx);
        let out = try_mut!(conf_out);
        let conf = try_op!(c.clusterconf());
        out_one(&conf, cluster_conf_fill, out)
    }
}

/// `resval`: resource values of `host`. On success writes an array to `*resvals_out` (NULL
/// when empty) and returns its count; free it with `xce_free_resvals(resvals, count)`.
#[no_mangle]
pub extern "C" fn xcecli_resval(
    ctx: xcecli_ctx_t,
    host: *const c_char,
    resvals_out: *mut *mut xce_resval_t,
) -> c_int {
    ffi_panic_boundary! { "xcecli_resval",
        let c = try_ctx!(ctx);
        let host = try_str!(host);
        let out = try_mut!(resvals_out);
        let rv = try_op!(c.resval(host));
        out_list(&rv, resval_fill, out)
    }
}

// ---------------------------------------------------------------------------------------
// Reply-bearing writes (exactly-once across re-sends, F16).

/// `join`: binds a session (role, host) to this ctx's connection. Sessions do not survive a
/// failover: re-join from the reconnect handler (F10). `join` is borrowed for the call. On
/// success returns 0 and, when `session_out` is not NULL, writes the session id there.
#[no_mangle]
pub extern "C" fn xcecli_join(
    ctx: xcecli_ctx_t,
    join: *const xce_join_t,
    session_out: *mut u64,
) -> c_int {
    ffi_panic_boundary! { "xcecli_join",
        let c = try_ctx!(ctx);
        let join = try_arg!(join_from_c(try_ref!(join)));
        let session = try_op!(c.join(join));
        // SAFETY: session_out is NULL or writable (documented).
        if let Some(out) = unsafe { session_out.as_mut() } {
            *out = session;
        }
        0
    }
}

/// `jobsubmit`: submits `spec` (borrowed for the call; `name` and `command` required). A
/// `spec->jobid` of 0 makes the library generate one (`xce_new_jobid`). On success returns 0
/// and, when `jobid_out` is not NULL, writes the job's id there. A re-send after a failover
/// that finds the job already applied is success (F4); a genuine duplicate id is
/// -E_XCE_DUP_JOB.
#[no_mangle]
pub extern "C" fn xcecli_jobsubmit(
    ctx: xcecli_ctx_t,
    spec: *const xce_job_spec_t,
    jobid_out: *mut u64,
) -> c_int {
    ffi_panic_boundary! { "xcecli_jobsubmit",
        let c = try_ctx!(ctx);
        let spec = try_arg!(spec_from_c(try_ref!(spec)));
        // A jobid of 0 gets a generated one in Client::jobsubmit.
        let id = try_op!(c.jobsubmit(spec));
        // SAFETY: jobid_out is NULL or writable (documented).
        if let Some(out) = unsafe { jobid_out.as_mut() } {
            *out = id;
        }
        0
    }
}

/// `jobdispatch`: starts job `jobid` on `host` (needs a SCHEDULER session). Returns 0.
#[no_mangle]
pub extern "C" fn xcecli_jobdispatch(ctx: xcecli_ctx_t, jobid: u64, host: *const c_char) -> c_int {
    ffi_panic_boundary! { "xcecli_jobdispatch",
        let c = try_ctx!(ctx);
        let host = try_str!(host);
        done(c.jobdispatch(jobid, host))
    }
}

/// `jobctrl`: `action` is `XCE_JOBCTRL_KILL`, `_SUSPEND`, `_RESUME` or `_REQUEUE`. Returns 0.
#[no_mangle]
pub extern "C" fn xcecli_jobctrl(ctx: xcecli_ctx_t, jobid: u64, action: c_int) -> c_int {
    ffi_panic_boundary! { "xcecli_jobctrl",
        let c = try_ctx!(ctx);
        let action = try_arg!(job_action(action));
        done(c.jobctrl(jobid, action))
    }
}

/// `queuectrl`: `action` is `XCE_QUEUE_OPEN`, `_CLOSE`, `_ACTIVATE` or `_INACTIVATE`.
/// Returns 0.
#[no_mangle]
pub extern "C" fn xcecli_queuectrl(
    ctx: xcecli_ctx_t,
    queue: *const c_char,
    action: c_int,
) -> c_int {
    ffi_panic_boundary! { "xcecli_queuectrl",
        let c = try_ctx!(ctx);
        let queue = try_str!(queue);
        let action = try_arg!(queue_action(action));
        done(c.queuectrl(queue, action))
    }
}

/// `hostctrl`: `action` is `XCE_HOSTCTRL_OPEN` or `XCE_HOSTCTRL_CLOSE`. Returns 0.
#[no_mangle]
pub extern "C" fn xcecli_hostctrl(ctx: xcecli_ctx_t, host: *const c_char, action: c_int) -> c_int {
    ffi_panic_boundary! { "xcecli_hostctrl",
        let c = try_ctx!(ctx);
        let host = try_str!(host);
        let action = try_arg!(host_action(action));
        done(c.hostctrl(host, action))
    }
}

/// `update_resvals`: stores `nresvals` values for `host` (needs a WORKER session). The array
/// is borrowed for the call; `(NULL, 0)` sends an empty list. Returns 0.
#[no_mangle]
pub extern "C" fn xcecli_update_resvals(
    ctx: xcecli_ctx_t,
    host: *const c_char,
    resvals: *const xce_resval_t,
    nresvals: usize,
) -> c_int {
    ffi_panic_boundary! { "xcecli_update_resvals",
        let c = try_ctx!(ctx);
        let host = try_str!(host);
        let rv = try_arg!(resvals_from_c(try_slice!(resvals, nresvals)));
        done(c.update_resvals(host, rv))
    }
}

/// `update_jusage`: stores the usage of job `jobid` (needs a WORKER session). `usage` is
/// borrowed for the call. Returns 0.
#[no_mangle]
pub extern "C" fn xcecli_update_jusage(
    ctx: xcecli_ctx_t,
    jobid: u64,
    usage: *const xce_usage_t,
) -> c_int {
    ffi_panic_boundary! { "xcecli_update_jusage",
        let c = try_ctx!(ctx);
        let u = try_ref!(usage);
        done(c.update_jusage(jobid, msg::Usage { cpu_ms: u.cpu_ms, mem_kb: u.mem_kb }))
    }
}

/// `runtask`: runs `command` on `host`. On success returns 0 and, when `taskid_out` is not
/// NULL, writes the task id there.
#[no_mangle]
pub extern "C" fn xcecli_runtask(
    ctx: xcecli_ctx_t,
    host: *const c_char,
    command: *const c_char,
    taskid_out: *mut u64,
) -> c_int {
    ffi_panic_boundary! { "xcecli_runtask",
        let c = try_ctx!(ctx);
        let host = try_str!(host);
        let command = try_str!(command);
        let id = try_op!(c.runtask(host, command));
        // SAFETY: taskid_out is NULL or writable (documented).
        if let Some(out) = unsafe { taskid_out.as_mut() } {
            *out = id;
        }
        0
    }
}

/// `set_pend_reason`: sets the pending reason text of job `jobid` (needs a SCHEDULER
/// session). Returns 0.
#[no_mangle]
pub extern "C" fn xcecli_set_pend_reason(
    ctx: xcecli_ctx_t,
    jobid: u64,
    reason: *const c_char,
) -> c_int {
    ffi_panic_boundary! { "xcecli_set_pend_reason",
        let c = try_ctx!(ctx);
        let reason = try_str!(reason);
        done(c.set_pend_reason(jobid, reason))
    }
}

/// `clear_reason`: clears the pending reason of job `jobid` (needs a SCHEDULER session).
/// Returns 0.
#[no_mangle]
pub extern "C" fn xcecli_clear_reason(ctx: xcecli_ctx_t, jobid: u64) -> c_int {
    ffi_panic_boundary! { "xcecli_clear_reason",
        let c = try_ctx!(ctx);
        done(c.clear_reason(jobid))
    }
}

// ---------------------------------------------------------------------------------------
// Fire-and-forget (F12 amended): notifications and heartbeats go through the context's
// outbox and are delivered exactly once; `nop`: the send's result. Never block on the budget.

fn notify(ctx: xcecli_ctx_t, kind: msg::NotifyKind, jobid: u64, exit_code: c_int) -> c_int {
    let c = try_ctx!(ctx);
    done(c.notify(msg::Notify {
        kind,
        job_id: jobid,
        exit_code,
    }))
}

/// `notify`: tells the controller about job `jobid`. `kind` is `XCE_NOTIFY_*`; `exit_code` is
/// meaningful for FINISH/FAIL. The job must be one the primary dispatched (RUN; SUSP too for
/// FINISH/FAIL/CHKPT), and the context must have joined as WORKER (`xcecli_join`, again from
/// the reconnect handler after every failover): a primary refuses it otherwise (logged at
/// WARN, then dropped). Returns 0 when accepted into the context's outbox: it is then sent
/// (now, or once a primary is reachable) and re-sent with the same request id after every
/// reconnect until a primary acknowledges it, so it takes effect exactly once while the
/// context lives; `xcecli_flush` waits for that. Never waits for the acknowledgement nor on
/// the no-primary budget (at most one round over the masters; with XCE_OUTBOX_MAX already
/// waiting on a live primary, at most a reply timeout for its acknowledgements).
/// -E_XCE_OUTBOX_FULL when XCE_OUTBOX_MAX notifications are still waiting after that (not
/// accepted); -E_XCE_CLOSED when the context is stopped.
#[no_mangle]
pub extern "C" fn xcecli_notify(
    ctx: xcecli_ctx_t,
    kind: c_int,
    jobid: u64,
    exit_code: c_int,
) -> c_int {
    ffi_panic_boundary! { "xcecli_notify",
        let kind = try_arg!(notify_kind(kind));
        notify(ctx, kind, jobid, exit_code)
    }
}

/// `notify` JOBSTART for `jobid`. As `xcecli_notify`.
#[no_mangle]
pub extern "C" fn xcecli_notify_jobstart(ctx: xcecli_ctx_t, jobid: u64) -> c_int {
    ffi_panic_boundary! { "xcecli_notify_jobstart",
        notify(ctx, msg::NotifyKind::JobStart, jobid, 0)
    }
}

/// `notify` JOBFINISH for `jobid` with its `exit_code`. As `xcecli_notify`.
#[no_mangle]
pub extern "C" fn xcecli_notify_jobfinish(
    ctx: xcecli_ctx_t,
    jobid: u64,
    exit_code: c_int,
) -> c_int {
    ffi_panic_boundary! { "xcecli_notify_jobfinish",
        notify(ctx, msg::NotifyKind::JobFinish, jobid, exit_code)
    }
}

/// `notify` JOBFAIL for `jobid` with its `exit_code`. As `xcecli_notify`.
#[no_mangle]
pub extern "C" fn xcecli_notify_jobfail(ctx: xcecli_ctx_t, jobid: u64, exit_code: c_int) -> c_int {
    ffi_panic_boundary! { "xcecli_notify_jobfail",
        notify(ctx, msg::NotifyKind::JobFail, jobid, exit_code)
    }
}

/// `notify` JOBSTOP for `jobid`. As `xcecli_notify`.
#[no_mangle]
pub extern "C" fn xcecli_notify_jobstop(ctx: xcecli_ctx_t, jobid: u64) -> c_int {
    ffi_panic_boundary! { "xcecli_notify_jobstop",
        notify(ctx, msg::NotifyKind::JobStop, jobid, 0)
    }
}

/// `notify` JOBCHKPT for `jobid`. As `xcecli_notify`.
#[no_mangle]
pub extern "C" fn xcecli_notify_jobchkpt(ctx: xcecli_ctx_t, jobid: u64) -> c_int {
    ffi_panic_boundary! { "xcecli_notify_jobchkpt",
        notify(ctx, msg::NotifyKind::JobChkpt, jobid, 0)
    }
}

/// `heartbeat` of worker `host` (needs a WORKER session, joined as for `xcecli_notify`).
/// Returns 0 when accepted into the outbox; delivered like a notification. It replaces a
/// heartbeat of the same host still waiting there (only the newest counts), so heartbeats
/// sent through an outage never fill the outbox.
#[no_mangle]
pub extern "C" fn xcecli_heartbeat(ctx: xcecli_ctx_t, host: *const c_char) -> c_int {
    ffi_panic_boundary! { "xcecli_heartbeat",
        let c = try_ctx!(ctx);
        let host = try_str!(host);
        done(c.heartbeat(host))
    }
}

/// `nop`: sends a no-op (keeps the connection warm). Returns 0 when sent.
#[no_mangle]
pub extern "C" fn xcecli_nop(ctx: xcecli_ctx_t) -> c_int {
    ffi_panic_boundary! { "xcecli_nop",
        let c = try_ctx!(ctx);
        done(c.nop())
    }
}

// ---------------------------------------------------------------------------------------
// Local (F13).

/// Makes every op in progress on the context of `ctx` — blocked in backoff, connecting,
/// waiting for a reply, or queued behind another op — return -EINTR promptly (even one that
/// had already made its last wait; a notification already accepted into the outbox keeps its
/// 0). With no op in progress nothing happens:
/// a wake is never kept to end a later, unrelated op (F27; a daemon whose stop may race with
/// its next call uses `xcecli_request_stop`). Returns 0 (whether or not ops were in progress:
/// `xcecli_try_wakeup` says which), -EINVAL (NULL or not a handle), -E_XCE_CLOSED (released
/// handle). Safe from any thread, never blocks; not async-signal-safe (use
/// `xcecli_try_wakeup` or `xcecli_request_stop` in a handler).
#[no_mangle]
pub extern "C" fn xcecli_wakeup(ctx: xcecli_ctx_t) -> c_int {
    ffi_panic_boundary! { "xcecli_wakeup",
        let c = try_ctx!(ctx);
        c.wakeup();
        0
    }
}

/// Async-signal-safe wakeup (F27): a signal handler may call it while any thread is inside
/// the library. It takes no lock, allocates nothing and logs nothing (atomics and at most one
/// write(2) to the wake pipe of the op in progress).
///
/// Returns 1 when an op was in progress on the context (queued, running, or nested in a
/// callback) whose outcome was not settled: every such op returns -EINTR, promptly (every wait
/// it makes from now on ends at once) — even one that had already made its last wait: a
/// submit that had been answered returns -EINTR with `maybe_applied = 1` in its last error.
/// The count and the wake are one atomic step, so 1 is exact. A notification settles when the
/// outbox accepts it (its 0 stands). Returns 0 when no such op was in progress: nothing
/// happens and nothing is kept for a later op. Returns -EINVAL for NULL or a value that is not a live
/// handle (released handles included: no lookup can tell them apart without a lock). To end
/// the *next* op too, whenever it starts, use `xcecli_request_stop`.
#[no_mangle]
pub extern "C" fn xcecli_try_wakeup(ctx: xcecli_ctx_t) -> c_int {
    ffi_panic_boundary! { "xcecli_try_wakeup",
        match super::signal::with_wake(ctx as usize as u64, |w| w.try_wake()) {
            Some(woke) => c_int::from(woke),
            None => -libc::EINVAL,
        }
    }
}

/// Sets the context's "stop requested" state (F27): the race-free way for a daemon to stop
/// from a signal handler. Async-signal-safe (atomics and at most one write(2)).
///
/// Every op in progress on the context ends promptly with -E_XCE_STOP_REQUESTED (at its next
/// wait; one that had already made its last wait returns its own result), and every op that
/// begins afterwards — on any thread, through any handle of the context, however soon —
/// returns -E_XCE_STOP_REQUESTED at once without sending anything, until
/// `xcecli_clear_stop_request`. So a SIGTERM that arrives between the daemon's flag check and
/// its next op still ends that op at once. `xcecli_stop` works as always. Returns 0, or
/// -EINVAL for NULL or a value that is not a live handle.
#[no_mangle]
pub extern "C" fn xcecli_request_stop(ctx: xcecli_ctx_t) -> c_int {
    ffi_panic_boundary! { "xcecli_request_stop",
        match super::signal::with_wake(ctx as usize as u64, |w| w.request_stop()) {
            Some(()) => 0,
            None => -libc::EINVAL,
        }
    }
}

/// Clears the "stop requested" state of the context (F27): ops run again. Returns 1 when a
/// stop was requested, 0 when none was, -EINVAL for NULL or a value that is not a live handle.
/// Async-signal-safe.
#[no_mangle]
pub extern "C" fn xcecli_clear_stop_request(ctx: xcecli_ctx_t) -> c_int {
    ffi_panic_boundary! { "xcecli_clear_stop_request",
        match super::signal::with_wake(ctx as usize as u64, |w| {
            let was = w.stop_requested();
            w.clear_stop();
            was
        }) {
            Some(was) => c_int::from(was),
            None => -libc::EINVAL,
        }
    }
}
