//! The `#[repr(C)]` structs C passes in and gets back, their conversions, and one free
//! function per returned type.
//!
//! Ownership rule for everything returned: every `const char *` inside a returned struct and
//! every returned array belongs to the library until the matching `xce_free_*` call; C reads
//! it, never writes or `free()`s it. Strings in returned structs are never NULL (an absent
//! value is `""`). An empty list is returned as `(NULL, 0)`.
//!
//! Enumerated values are plain integers (`XCE_JOB_*`, `XCE_ROLE_*`…): a value C passes in is
//! checked and an unknown one is `-EINVAL`, never transmuted into a Rust enum.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};

use super::panic::ffi_panic_boundary;
use crate::wire::msg;

// ---------------------------------------------------------------------------------------
// Integer constants for enumerated values (the header's #defines).

/// Job state `PEND` (`xce_job_t.state`; `1 << state` in `xce_job_filter_t.state_mask`).
pub const XCE_JOB_PEND: i32 = 0;
/// Job state `RUN`.
pub const XCE_JOB_RUN: i32 = 1;
/// Job state `SUSP`.
pub const XCE_JOB_SUSP: i32 = 2;
/// Job state `DONE`.
pub const XCE_JOB_DONE: i32 = 3;
/// Job state `EXIT`.
pub const XCE_JOB_EXIT: i32 = 4;

/// Host state `OK` (`xce_host_t.state`).
pub const XCE_HOST_OK: i32 = 0;
/// Host state `CLOSED`.
pub const XCE_HOST_CLOSED: i32 = 1;
/// Host state `UNAVAIL`.
pub const XCE_HOST_UNAVAIL: i32 = 2;

/// Controller role `PRIMARY` (`xce_controller_info_t.role`, `xce_controller_entry_t.role`).
pub const XCE_CTRL_PRIMARY: i32 = 0;
/// Controller role `STANDBY`.
pub const XCE_CTRL_STANDBY: i32 = 1;
/// Controller role `CANDIDATE` (election running).
pub const XCE_CTRL_CANDIDATE: i32 = 2;
/// Controller role `INITIALIZING`.
pub const XCE_CTRL_INITIALIZING: i32 = 3;

/// Session role for `xcecli_join`: a worker daemon.
pub const XCE_ROLE_WORKER: i32 = 0;
/// Session role: the scheduler.
pub const XCE_ROLE_SCHEDULER: i32 = 1;
/// Session role: the API server.
pub const XCE_ROLE_APISERVER: i32 = 2;
/// Session role: a plain client / CLI tool.
pub const XCE_ROLE_CLIENT: i32 = 3;

/// `xcecli_jobctrl` action: kill the job.
pub const XCE_JOBCTRL_KILL: i32 = 0;
/// `xcecli_jobctrl` action: suspend.
pub const XCE_JOBCTRL_SUSPEND: i32 = 1;
/// `xcecli_jobctrl` action: resume.
pub const XCE_JOBCTRL_RESUME: i32 = 2;
/// `xcecli_jobctrl` action: requeue.
pub const XCE_JOBCTRL_REQUEUE: i32 = 3;

/// `xcecli_queuectrl` action: open (accept submissions).
pub const XCE_QUEUE_OPEN: i32 = 0;
/// `xcecli_queuectrl` action: close.
pub const XCE_QUEUE_CLOSE: i32 = 1;
/// `xcecli_queuectrl` action: activate (dispatch).
pub const XCE_QUEUE_ACTIVATE: i32 = 2;
/// `xcecli_queuectrl` action: inactivate.
pub const XCE_QUEUE_INACTIVATE: i32 = 3;

/// `xcecli_hostctrl` action: open the host.
pub const XCE_HOSTCTRL_OPEN: i32 = 0;
/// `xcecli_hostctrl` action: close the host.
pub const XCE_HOSTCTRL_CLOSE: i32 = 1;

/// `xcecli_notify` kind: job started.
pub const XCE_NOTIFY_JOBSTART: i32 = 0;
/// `xcecli_notify` kind: job finished.
pub const XCE_NOTIFY_JOBFINISH: i32 = 1;
/// `xcecli_notify` kind: job failed.
pub const XCE_NOTIFY_JOBFAIL: i32 = 2;
/// `xcecli_notify` kind: job stopped.
pub const XCE_NOTIFY_JOBSTOP: i32 = 3;
/// `xcecli_notify` kind: job checkpointed.
pub const XCE_NOTIFY_JOBCHKPT: i32 = 4;

// Checked conversions from C integers. `None` → the export returns -EINVAL.

pub(crate) fn session_role(v: i32) -> Option<msg::SessionRole> {
    use msg::SessionRole::*;
    Some(match v {
        XCE_ROLE_WORKER => Worker,
        XCE_ROLE_SCHEDULER => Scheduler,
        XCE_ROLE_APISERVER => ApiServer,
        XCE_ROLE_CLIENT => Client,
        _ => return None,
    })
}

pub(crate) fn job_action(v: i32) -> Option<msg::JobAction> {
    use msg::JobAction::*;
    Some(match v {
        XCE_JOBCTRL_KILL => Kill,
        XCE_JOBCTRL_SUSPEND => Suspend,
        XCE_JOBCTRL_RESUME => Resume,
        XCE_JOBCTRL_REQUEUE => Requeue,
        _ => return None,
    })
}

pub(crate) fn queue_action(v: i32) -> Option<msg::QueueAction> {
    use msg::QueueAction::*;
    Some(match v {
        XCE_QUEUE_OPEN => Open,
        XCE_QUEUE_CLOSE => Close,
        XCE_QUEUE_ACTIVATE => Activate,
        XCE_QUEUE_INACTIVATE => Inactivate,
        _ => return None,
    })
}

pub(crate) fn host_action(v: i32) -> Option<msg::HostAction> {
    match v {
        XCE_HOSTCTRL_OPEN => Some(msg::HostAction::Open),
        XCE_HOSTCTRL_CLOSE => Some(msg::HostAction::Close),
        _ => None,
    }
}

pub(crate) fn notify_kind(v: i32) -> Option<msg::NotifyKind> {
    use msg::NotifyKind::*;
    Some(match v {
        XCE_NOTIFY_JOBSTART => JobStart,
        XCE_NOTIFY_JOBFINISH => JobFinish,
        XCE_NOTIFY_JOBFAIL => JobFail,
        XCE_NOTIFY_JOBSTOP => JobStop,
        XCE_NOTIFY_JOBCHKPT => JobChkpt,
        _ => return None,
    })
}

/// All job states; a filter mask with other bits set is `-EINVAL`.
pub(crate) const JOB_STATE_MASK_ALL: u32 = (1 << (XCE_JOB_EXIT + 1)) - 1;

fn job_state(s: msg::JobState) -> i32 {
    match s {
        msg::JobState::Pend => XCE_JOB_PEND,
        msg::JobState::Run => XCE_JOB_RUN,
        msg::JobState::Susp => XCE_JOB_SUSP,
        msg::JobState::Done => XCE_JOB_DONE,
        msg::JobState::Exit => XCE_JOB_EXIT,
    }
}

fn host_state(s: msg::HostState) -> i32 {
    match s {
        msg::HostState::Ok => XCE_HOST_OK,
        msg::HostState::Closed => XCE_HOST_CLOSED,
        msg::HostState::Unavail => XCE_HOST_UNAVAIL,
    }
}

fn ctrl_role(r: msg::ControllerRole) -> i32 {
    match r {
        msg::ControllerRole::Primary => XCE_CTRL_PRIMARY,
        msg::ControllerRole::Standby => XCE_CTRL_STANDBY,
        msg::ControllerRole::Candidate => XCE_CTRL_CANDIDATE,
        msg::ControllerRole::Initializing => XCE_CTRL_INITIALIZING,
    }
}

// ---------------------------------------------------------------------------------------
// Owned strings and arrays handed to C.

/// A library-owned C string (never NULL). Text after an interior NUL cannot be represented
/// in C and is dropped.
fn out_str(s: &str) -> *const c_char {
    let bytes = s.as_bytes();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    CString::new(&bytes[..end])
        .map(CString::into_raw)
        .unwrap_or(std::ptr::null_mut())
}

/// Frees a string made by `out_str`. NULL is a no-op.
fn free_str(p: *const c_char) {
    if !p.is_null() {
        // SAFETY: p came from CString::into_raw in out_str and is freed once (free contract).
        drop(unsafe { CString::from_raw(p.cast_mut()) });
    }
}

/// A library-owned array: `(NULL, 0)` when empty.
pub(crate) fn out_array<T>(items: Vec<T>) -> (*mut T, usize) {
    if items.is_empty() {
        return (std::ptr::null_mut(), 0);
    }
    let len = items.len();
    (Box::into_raw(items.into_boxed_slice()).cast::<T>(), len)
}

/// Takes back an array made by `out_array`, running `drop_fields` on each element.
///
/// # Safety
/// `(ptr, len)` is exactly what `out_array` returned (or NULL), freed once.
unsafe fn free_array<T>(ptr: *mut T, len: usize, drop_fields: impl Fn(&T)) {
    if ptr.is_null() || len == 0 {
        return;
    }
    // SAFETY: by contract this is the Box<[T]> out_array leaked, with its original length.
    let items = unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) };
    items.iter().for_each(drop_fields);
}

/// Reads a C string field of an input struct: NULL or invalid UTF-8 → None.
///
/// # Safety
/// `p` is NULL or NUL-terminated.
pub(crate) unsafe fn in_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: forwarded.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .ok()
        .map(str::to_owned)
}

/// As `in_str`, NULL meaning "".
///
/// # Safety
/// `p` is NULL or NUL-terminated.
pub(crate) unsafe fn in_opt_str(p: *const c_char) -> Option<String> {
    if p.is_null() {
        Some(String::new())
    } else {
        // SAFETY: forwarded.
        unsafe { in_str(p) }
    }
}

// ---------------------------------------------------------------------------------------
// Input structs.

/// A `key=value` pair (join attributes in, host attributes out).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xce_kv_t {
    pub key: *const c_char,
    pub value: *const c_char,
}

/// A per-host resource value `name=value` (`xcecli_resval` out, `xcecli_update_resvals` in).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xce_resval_t {
    pub name: *const c_char,
    pub value: *const c_char,
}

/// Filter of `xcecli_joblist`. NULL strings and zero values mean "any".
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xce_job_filter_t {
    /// NULL or "": any user.
    pub user: *const c_char,
    /// NULL or "": any queue.
    pub queue: *const c_char,
    /// Bits `1 << XCE_JOB_*`; 0: any state. Other bits → -EINVAL.
    pub state_mask: u32,
    /// 0: no limit.
    pub limit: u32,
}

/// A job to submit (`xcecli_jobsubmit`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xce_job_spec_t {
    /// 0: the library generates one (`xce_new_jobid`); otherwise a never-reused id.
    pub jobid: u64,
    /// Required.
    pub name: *const c_char,
    /// NULL: "".
    pub user: *const c_char,
    /// NULL or "": the "normal" queue.
    pub queue: *const c_char,
    /// Required.
    pub command: *const c_char,
    pub ncpus: u32,
    pub mem_mb: u64,
}

/// Session registration of `xcecli_join`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct xce_join_t {
    /// `XCE_ROLE_*`.
    pub role: i32,
    /// Required: this daemon's host name.
    pub host: *const c_char,
    pub ncpus: u32,
    pub mem_mb: u64,
    /// `nattrs` pairs; `(NULL, 0)` for none.
    pub attrs: *const xce_kv_t,
    pub nattrs: usize,
}

/// Resource usage of a job (`xce_job_t.usage`, `xcecli_update_jusage`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct xce_usage_t {
    pub cpu_ms: u64,
    pub mem_kb: u64,
}

pub(crate) fn filter_from_c(f: Option<&xce_job_filter_t>) -> Option<msg::JobFilter> {
    let Some(f) = f else {
        return Some(msg::JobFilter::default());
    };
    if f.state_mask & !JOB_STATE_MASK_ALL != 0 {
        return None;
    }
    // SAFETY: the filter's strings are NULL or NUL-terminated (header contract).
    unsafe {
        Some(msg::JobFilter {
            user: in_opt_str(f.user)?,
            queue: in_opt_str(f.queue)?,
            state_mask: f.state_mask,
            limit: f.limit,
        })
    }
}

pub(crate) fn spec_from_c(s: &xce_job_spec_t) -> Option<msg::JobSpec> {
    // SAFETY: the spec's strings are NULL or NUL-terminated (header contract).
    unsafe {
        Some(msg::JobSpec {
            job_id: s.jobid,
            name: in_str(s.name)?,
            user: in_opt_str(s.user)?,
            queue: in_opt_str(s.queue)?,
            command: in_str(s.command)?,
            ncpus: s.ncpus,
            mem_mb: s.mem_mb,
        })
    }
}

pub(crate) fn join_from_c(j: &xce_join_t) -> Option<msg::Join> {
    // SAFETY: attrs holds nattrs pairs or is NULL (then nattrs must be 0).
    let attrs = unsafe { super::cast::slice_from_c(j.attrs, j.nattrs) }?;
    // SAFETY: the strings are NULL or NUL-terminated (header contract).
    unsafe {
        Some(msg::Join {
            role: session_role(j.role)?,
            host: in_str(j.host)?,
            ncpus: j.ncpus,
            mem_mb: j.mem_mb,
            attrs: attrs
                .iter()
                .map(|kv| {
                    Some(msg::KeyValue {
                        key: in_str(kv.key)?,
                        value: in_opt_str(kv.value)?,
                    })
                })
                .collect::<Option<Vec<_>>>()?,
        })
    }
}

pub(crate) fn resvals_from_c(rv: &[xce_resval_t]) -> Option<Vec<msg::ResVal>> {
    rv.iter()
        .map(|r| {
            // SAFETY: NULL or NUL-terminated (header contract).
            unsafe {
                Some(msg::ResVal {
                    name: in_str(r.name)?,
                    value: in_opt_str(r.value)?,
                })
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Output structs.

/// A job as the controller reports it. Freed with `xce_free_job` (single) or
/// `xce_free_jobs` (array).
#[repr(C)]
#[derive(Debug)]
pub struct xce_job_t {
    pub jobid: u64,
    pub name: *const c_char,
    pub user: *const c_char,
    pub queue: *const c_char,
    pub command: *const c_char,
    pub ncpus: u32,
    pub mem_mb: u64,
    /// `XCE_JOB_*`.
    pub state: i32,
    pub pend_reason: *const c_char,
    pub exec_host: *const c_char,
    /// Unix milliseconds; 0: not yet.
    pub submit_time: i64,
    pub start_time: i64,
    pub end_time: i64,
    pub exit_code: i32,
    pub usage: xce_usage_t,
}

/// A worker host. Freed with `xce_free_hosts`.
#[repr(C)]
#[derive(Debug)]
pub struct xce_host_t {
    pub name: *const c_char,
    /// `XCE_HOST_*`.
    pub state: i32,
    pub ncpus: u32,
    pub mem_mb: u64,
    pub attrs: *const xce_kv_t,
    pub nattrs: usize,
    pub njobs: u32,
    /// Unix milliseconds.
    pub last_heartbeat: i64,
}

/// A resource definition. Freed with `xce_free_resources`.
#[repr(C)]
#[derive(Debug)]
pub struct xce_resource_t {
    pub name: *const c_char,
    /// "numeric", "string" or "boolean".
    pub kind: *const c_char,
    pub description: *const c_char,
}

/// What `xcecli_hello` learns about the controller it reached. Freed with
/// `xce_free_controller_info`.
#[repr(C)]
#[derive(Debug)]
pub struct xce_controller_info_t {
    pub id: u32,
    /// `XCE_CTRL_*`.
    pub role: i32,
    pub term: u64,
    /// 0: no primary known.
    pub primary_id: u32,
    pub primary_host: *const c_char,
    pub primary_port: u16,
    pub version: *const c_char,
    pub protocol_version: u32,
}

/// One controller of the cluster (inside `xce_cluster_conf_t`).
#[repr(C)]
#[derive(Debug)]
pub struct xce_controller_entry_t {
    pub id: u32,
    pub host: *const c_char,
    pub port: u16,
    /// `XCE_CTRL_*`.
    pub role: i32,
}

/// A queue (inside `xce_cluster_conf_t`).
#[repr(C)]
#[derive(Debug)]
pub struct xce_queue_t {
    pub name: *const c_char,
    /// 1: OPEN (accepts submissions), 0: CLOSED.
    pub open: i32,
    /// 1: ACTIVE (dispatches), 0: INACTIVE.
    pub active: i32,
    pub priority: i32,
}

/// The cluster configuration (`xcecli_clusterconf`). Freed with `xce_free_cluster_conf`.
#[repr(C)]
#[derive(Debug)]
pub struct xce_cluster_conf_t {
    pub cluster_name: *const c_char,
    pub controllers: *const xce_controller_entry_t,
    pub ncontrollers: usize,
    pub primary_id: u32,
    pub term: u64,
    pub queues: *const xce_queue_t,
    pub nqueues: usize,
}

fn kv_to_c(kv: &msg::KeyValue) -> xce_kv_t {
    xce_kv_t {
        key: out_str(&kv.key),
        value: out_str(&kv.value),
    }
}

fn kv_free(kv: &xce_kv_t) {
    free_str(kv.key);
    free_str(kv.value);
}

pub(crate) fn job_to_c(j: &msg::Job) -> xce_job_t {
    xce_job_t {
        jobid: j.job_id,
        name: out_str(&j.name),
        user: out_str(&j.user),
        queue: out_str(&j.queue),
        command: out_str(&j.command),
        ncpus: j.ncpus,
        mem_mb: j.mem_mb,
        state: job_state(j.state),
        pend_reason: out_str(&j.pend_reason),
        exec_host: out_str(&j.exec_host),
        submit_time: j.submit_time,
        start_time: j.start_time,
        end_time: j.end_time,
        exit_code: j.exit_code,
        usage: xce_usage_t {
            cpu_ms: j.usage.cpu_ms,
            mem_kb: j.usage.mem_kb,
        },
    }
}

fn job_free_fields(j: &xce_job_t) {
    for s in [
        j.name,
        j.user,
        j.queue,
        j.command,
        j.pend_reason,
        j.exec_host,
    ] {
        free_str(s);
    }
}

pub(crate) fn host_to_c(h: &msg::Host) -> xce_host_t {
    let (attrs, nattrs) = out_array(h.attrs.iter().map(kv_to_c).collect());
    xce_host_t {
        name: out_str(&h.name),
        state: host_state(h.state),
        ncpus: h.ncpus,
        mem_mb: h.mem_mb,
        attrs,
        nattrs,
        njobs: h.njobs,
        last_heartbeat: h.last_heartbeat,
    }
}

fn host_free_fields(h: &xce_host_t) {
    free_str(h.name);
    // SAFETY: attrs/nattrs were made by out_array in host_out.
    unsafe { free_array(h.attrs.cast_mut(), h.nattrs, kv_free) };
}

pub(crate) fn resource_to_c(r: &msg::Resource) -> xce_resource_t {
    xce_resource_t {
        name: out_str(&r.name),
        kind: out_str(&r.kind),
        description: out_str(&r.description),
    }
}

fn resource_free_fields(r: &xce_resource_t) {
    for s in [r.name, r.kind, r.description] {
        free_str(s);
    }
}

pub(crate) fn resval_to_c(r: &msg::ResVal) -> xce_resval_t {
    xce_resval_t {
        name: out_str(&r.name),
        value: out_str(&r.value),
    }
}

fn resval_free_fields(r: &xce_resval_t) {
    free_str(r.name);
    free_str(r.value);
}

pub(crate) fn ctrl_info_to_c(c: &msg::ControllerInfo) -> xce_controller_info_t {
    xce_controller_info_t {
        id: c.id,
        role: ctrl_role(c.role),
        term: c.term,
        primary_id: c.primary_id,
        primary_host: out_str(&c.primary_host),
        primary_port: c.primary_port,
        version: out_str(&c.version),
        protocol_version: c.protocol_version,
    }
}

pub(crate) fn cluster_conf_to_c(c: &msg::ClusterConf) -> xce_cluster_conf_t {
    let (controllers, ncontrollers) = out_array(
        c.controllers
            .iter()
            .map(|e| xce_controller_entry_t {
                id: e.id,
                host: out_str(&e.host),
                port: e.port,
                role: ctrl_role(e.role),
            })
            .collect(),
    );
    let (queues, nqueues) = out_array(
        c.queues
            .iter()
            .map(|q| xce_queue_t {
                name: out_str(&q.name),
                open: i32::from(q.open),
                active: i32::from(q.active),
                priority: q.priority,
            })
            .collect(),
    );
    xce_cluster_conf_t {
        cluster_name: out_str(&c.cluster_name),
        controllers,
        ncontrollers,
        primary_id: c.primary_id,
        term: c.term,
        queues,
        nqueues,
    }
}

/// Hands a list to C: writes `*out` and returns the count, or `-EOVERFLOW` when the count
/// does not fit the `int` return (nothing written then).
pub(crate) fn out_list<T, U>(items: &[T], conv: impl Fn(&T) -> U, out: &mut *mut U) -> c_int {
    let Ok(n) = c_int::try_from(items.len()) else {
        return -libc::EOVERFLOW;
    };
    let (ptr, _) = out_array(items.iter().map(conv).collect());
    *out = ptr;
    n
}

// ---------------------------------------------------------------------------------------
// Free functions (one per returned type).

/// Frees the array `xcecli_joblist` returned. `njobs` must be the count it returned.
/// `(NULL, any)` is a no-op. Thread-safe for distinct arrays.
#[no_mangle]
pub extern "C" fn xce_free_jobs(jobs: *mut xce_job_t, njobs: usize) {
    ffi_panic_boundary! { "xce_free_jobs",
        // SAFETY: (jobs, njobs) came from xcecli_joblist (documented contract).
        unsafe { free_array(jobs, njobs, job_free_fields) }
    }
}

/// Frees the job `xcecli_jobinfo` returned. NULL is a no-op.
#[no_mangle]
pub extern "C" fn xce_free_job(job: *mut xce_job_t) {
    ffi_panic_boundary! { "xce_free_job",
        if !job.is_null() {
            // SAFETY: job came from Box::into_raw in xcecli_jobinfo, freed once.
            let job = unsafe { Box::from_raw(job) };
            job_free_fields(&job);
        }
    }
}

/// Frees the array `xcecli_workerlist` returned (with each host's attributes).
/// `nhosts` must be the count it returned. `(NULL, any)` is a no-op.
#[no_mangle]
pub extern "C" fn xce_free_hosts(hosts: *mut xce_host_t, nhosts: usize) {
    ffi_panic_boundary! { "xce_free_hosts",
        // SAFETY: (hosts, nhosts) came from xcecli_workerlist (documented contract).
        unsafe { free_array(hosts, nhosts, host_free_fields) }
    }
}

/// Frees the array `xcecli_reslist` returned. `(NULL, any)` is a no-op.
#[no_mangle]
pub extern "C" fn xce_free_resources(res: *mut xce_resource_t, nres: usize) {
    ffi_panic_boundary! { "xce_free_resources",
        // SAFETY: (res, nres) came from xcecli_reslist (documented contract).
        unsafe { free_array(res, nres, resource_free_fields) }
    }
}

/// Frees the array `xcecli_resval` returned. Only for arrays the library returned, never for
/// the caller's own `xcecli_update_resvals` input. `(NULL, any)` is a no-op.
#[no_mangle]
pub extern "C" fn xce_free_resvals(resvals: *mut xce_resval_t, nresvals: usize) {
    ffi_panic_boundary! { "xce_free_resvals",
        // SAFETY: (resvals, nresvals) came from xcecli_resval (documented contract).
        unsafe { free_array(resvals, nresvals, resval_free_fields) }
    }
}

/// Frees what `xcecli_hello` returned. NULL is a no-op.
#[no_mangle]
pub extern "C" fn xce_free_controller_info(info: *mut xce_controller_info_t) {
    ffi_panic_boundary! { "xce_free_controller_info",
        if !info.is_null() {
            // SAFETY: info came from Box::into_raw in xcecli_hello, freed once.
            let info = unsafe { Box::from_raw(info) };
            free_str(info.primary_host);
            free_str(info.version);
        }
    }
}

/// Frees what `xcecli_clusterconf` returned (with its controllers and queues). NULL is a
/// no-op.
#[no_mangle]
pub extern "C" fn xce_free_cluster_conf(conf: *mut xce_cluster_conf_t) {
    ffi_panic_boundary! { "xce_free_cluster_conf",
        if conf.is_null() {
            return;
        }
        // SAFETY: conf came from Box::into_raw in xcecli_clusterconf, freed once; its arrays
        // were made by out_array in cluster_conf_out.
        unsafe {
            let conf = Box::from_raw(conf);
            free_str(conf.cluster_name);
            free_array(conf.controllers.cast_mut(), conf.ncontrollers, |e| free_str(e.host));
            free_array(conf.queues.cast_mut(), conf.nqueues, |q| free_str(q.name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_job() -> msg::Job {
        msg::Job {
            job_id: 42,
            name: "n".into(),
            command: "sleep 1".into(),
            pend_reason: "a\0b".into(),
            state: msg::JobState::Run,
            usage: msg::Usage {
                cpu_ms: 5,
                mem_kb: 6,
            },
            ..Default::default()
        }
    }

    #[test]
    fn jobs_round_trip_and_free() {
        let jobs = vec![sample_job(), sample_job()];
        let mut out = std::ptr::null_mut();
        assert_eq!(out_list(&jobs, job_to_c, &mut out), 2);
        // SAFETY: out holds 2 jobs made just above.
        let first = unsafe { &*out };
        assert_eq!(first.jobid, 42);
        assert_eq!(first.state, XCE_JOB_RUN);
        assert_eq!(first.usage.mem_kb, 6);
        // SAFETY: strings are NUL-terminated library strings.
        unsafe {
            assert_eq!(CStr::from_ptr(first.command).to_str(), Ok("sleep 1"));
            assert_eq!(CStr::from_ptr(first.pend_reason).to_str(), Ok("a"));
            assert_eq!(CStr::from_ptr(first.user).to_str(), Ok(""));
        }
        xce_free_jobs(out, 2);
        let mut out = std::ptr::null_mut::<xce_job_t>();
        assert_eq!(out_list(&[], job_to_c, &mut out), 0);
        assert!(out.is_null());
        xce_free_jobs(out, 0);
    }

    #[test]
    fn hosts_and_conf_free_everything() {
        let h = msg::Host {
            name: "w1".into(),
            attrs: vec![msg::KeyValue {
                key: "k".into(),
                value: "v".into(),
            }],
            ..Default::default()
        };
        let mut out = std::ptr::null_mut();
        assert_eq!(out_list(&[h], host_to_c, &mut out), 1);
        xce_free_hosts(out, 1);
        let conf = msg::ClusterConf {
            cluster_name: "c".into(),
            controllers: vec![msg::ControllerEntry::default(); 3],
            queues: vec![msg::Queue {
                name: "normal".into(),
                open: true,
                ..Default::default()
            }],
            ..Default::default()
        };
        let c = Box::into_raw(Box::new(cluster_conf_to_c(&conf)));
        // SAFETY: c is live.
        unsafe {
            assert_eq!((*c).ncontrollers, 3);
            assert_eq!((*(*c).queues).open, 1);
        }
        xce_free_cluster_conf(c);
        xce_free_cluster_conf(std::ptr::null_mut());
    }

    #[test]
    fn unknown_integers_are_rejected() {
        assert!(session_role(4).is_none() && session_role(-1).is_none());
        assert!(job_action(4).is_none() && queue_action(9).is_none());
        assert!(host_action(2).is_none() && notify_kind(5).is_none());
        let bad = xce_job_filter_t {
            user: std::ptr::null(),
            queue: std::ptr::null(),
            state_mask: 1 << 5,
            limit: 0,
        };
        assert!(filter_from_c(Some(&bad)).is_none());
        assert_eq!(filter_from_c(None), Some(msg::JobFilter::default()));
    }
}
