//! The `#[repr(C)]` structs C passes in and gets back, their conversions, and one free
//! function per returned type.
//!
//! Ownership rule for everything returned: every `const char *` inside a returned struct and
//! every returned array belongs to the library until the matching `xce_free_*` call; C reads
//! it, never writes or `free()`s it. Strings in returned structs are never NULL (an absent
//! value is `""`). An empty list is returned as `(NULL, 0)` (except `xcecli_joblist`'s
//! NULL-terminated array, which is never NULL). What one call returns is one allocation
//! (F22): the matching free function releases all of it; parts cannot be freed separately.
//!
//! Enumerated values are plain integers (`XCE_JOB_*`, `XCE_ROLE_*`…): a value C passes in is
//! checked and an unknown one is `-EINVAL`, never transmuted into a Rust enum.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

use super::cast::c_enums;
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

c_enums! {
    in session_role -> msg::SessionRole { XCE_ROLE_WORKER => Worker,
        XCE_ROLE_SCHEDULER => Scheduler, XCE_ROLE_APISERVER => ApiServer,
        XCE_ROLE_CLIENT => Client }
    in job_action -> msg::JobAction { XCE_JOBCTRL_KILL => Kill, XCE_JOBCTRL_SUSPEND => Suspend,
        XCE_JOBCTRL_RESUME => Resume, XCE_JOBCTRL_REQUEUE => Requeue }
    in queue_action -> msg::QueueAction { XCE_QUEUE_OPEN => Open, XCE_QUEUE_CLOSE => Close,
        XCE_QUEUE_ACTIVATE => Activate, XCE_QUEUE_INACTIVATE => Inactivate }
    in host_action -> msg::HostAction { XCE_HOSTCTRL_OPEN => Open, XCE_HOSTCTRL_CLOSE => Close }
    in notify_kind -> msg::NotifyKind { XCE_NOTIFY_JOBSTART => JobStart,
        XCE_NOTIFY_JOBFINISH => JobFinish, XCE_NOTIFY_JOBFAIL => JobFail,
        XCE_NOTIFY_JOBSTOP => JobStop, XCE_NOTIFY_JOBCHKPT => JobChkpt }
    out job_state <- msg::JobState { Pend => XCE_JOB_PEND, Run => XCE_JOB_RUN,
        Susp => XCE_JOB_SUSP, Done => XCE_JOB_DONE, Exit => XCE_JOB_EXIT }
    out host_state <- msg::HostState { Ok => XCE_HOST_OK, Closed => XCE_HOST_CLOSED,
        Unavail => XCE_HOST_UNAVAIL }
    out ctrl_role <- msg::ControllerRole { Primary => XCE_CTRL_PRIMARY,
        Standby => XCE_CTRL_STANDBY, Candidate => XCE_CTRL_CANDIDATE,
        Initializing => XCE_CTRL_INITIALIZING }
}

/// All job states; a filter mask with other bits set is `-EINVAL`.
pub(crate) const JOB_STATE_MASK_ALL: u32 = (1 << (XCE_JOB_EXIT + 1)) - 1;

// ---------------------------------------------------------------------------------------
// Memory handed to C (F22): one block per returned object.
//
// Everything one call returns — a list with its elements, their nested arrays (host
// attributes, controllers, queues) and all their strings, or one struct with its strings — is
// a single allocation laid out as `[header][the object][nested arrays][strings]`. Its size is
// summed first, by a dry run of the very conversion that fills it, so the memory is
// proportional to the Rust values (themselves bounded by the frame, see wire::codec), nothing
// is allocated per string (an empty string is a static ""), and an allocation failure is
// `-ENOMEM` instead of an abort. The matching free function releases the whole block; the
// header holds its size.

/// Bytes before the object: the block's total size, then the number of objects (what a free
/// function's count must equal), padded to the block's alignment.
const HEADER: usize = 16;
/// Alignment of every block (>= that of every returned struct and of the header).
const BLOCK_ALIGN: usize = 16;
const _: () = assert!(HEADER >= 2 * std::mem::size_of::<usize>() && HEADER % BLOCK_ALIGN == 0);

/// The block could not be sized or allocated: the export returns -ENOMEM.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct NoMem;

/// A bump cursor over a block being filled, or (`base` NULL) over nothing while sizing it.
pub(crate) struct Bump {
    base: *mut u8,
    len: usize,
    cap: usize,
}

impl Bump {
    fn writing(&self) -> bool {
        !self.base.is_null()
    }

    /// Room for `n` `T`s, aligned. While sizing: a dangling pointer, never written through.
    fn array<T>(&mut self, n: usize) -> Result<*mut T, NoMem> {
        debug_assert!(std::mem::align_of::<T>() <= BLOCK_ALIGN);
        let start = self
            .len
            .checked_next_multiple_of(std::mem::align_of::<T>())
            .ok_or(NoMem)?;
        let end = n
            .checked_mul(std::mem::size_of::<T>())
            .and_then(|b| b.checked_add(start))
            .ok_or(NoMem)?;
        if end > self.cap {
            return Err(NoMem);
        }
        self.len = end;
        if !self.writing() {
            return Ok(std::ptr::NonNull::dangling().as_ptr());
        }
        // SAFETY: start <= end <= cap: inside the block's allocation, aligned for T (the block
        // is BLOCK_ALIGN-aligned and start is a multiple of align_of::<T>()).
        Ok(unsafe { self.base.add(start) }.cast())
    }

    /// Writes `v` as element `i` of `arr` (from `array`, with `i` in range); no-op while sizing.
    fn put<T>(&self, arr: *mut T, i: usize, v: T) {
        if self.writing() {
            // SAFETY: arr came from self.array(n) on this block with i < n.
            unsafe { arr.add(i).write(v) }
        }
    }

    /// A library-owned C string (never NULL). Text after an interior NUL cannot be represented
    /// in C and is dropped; an empty string is a static "" and takes no room.
    fn str(&mut self, s: &str) -> Result<*const c_char, NoMem> {
        let bytes = s.as_bytes();
        let bytes = &bytes[..bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len())];
        if bytes.is_empty() {
            return Ok(c"".as_ptr());
        }
        let p = self.array::<u8>(bytes.len() + 1)?;
        if self.writing() {
            // SAFETY: p has room for bytes.len() + 1 bytes inside the block.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
                p.add(bytes.len()).write(0);
            }
        }
        Ok(p.cast_const().cast())
    }
}

/// One block whose object is `n` `T`s (n >= 1), filled by `fill`; returns the object.
/// `fill` runs twice: once to size the block, once to fill it, so it must do the same both
/// times (it only reads the values it converts).
fn build<T>(
    n: usize,
    fill: impl Fn(&mut Bump, *mut T) -> Result<(), NoMem>,
) -> Result<*mut T, NoMem> {
    let mut sizing = Bump {
        base: std::ptr::null_mut(),
        len: 0,
        cap: usize::MAX,
    };
    let first = sizing.array::<T>(n)?;
    fill(&mut sizing, first)?;
    let total = sizing.len.checked_add(HEADER).ok_or(NoMem)?;
    let layout = std::alloc::Layout::from_size_align(total, BLOCK_ALIGN).map_err(|_| NoMem)?;
    // SAFETY: total >= HEADER > 0.
    let base = unsafe { std::alloc::alloc(layout) };
    if base.is_null() {
        return Err(NoMem);
    }
    // SAFETY: the block is at least HEADER bytes (two usize), aligned for usize.
    unsafe {
        base.cast::<usize>().write(total);
        base.cast::<usize>().add(1).write(n);
    }
    let mut bump = Bump {
        // SAFETY: HEADER <= total.
        base: unsafe { base.add(HEADER) },
        len: 0,
        cap: sizing.len,
    };
    let filled = bump
        .array::<T>(n)
        .and_then(|obj| fill(&mut bump, obj).map(|()| obj));
    if filled.is_err() {
        // Cannot happen (same conversion, same values); never leak or return a partial block.
        // SAFETY: allocated just above with this layout.
        unsafe { std::alloc::dealloc(base, layout) };
    }
    filled
}

/// Frees a block made by `build`, given its object. NULL is a no-op.
///
/// # Safety
/// `obj` is NULL or the object of a live block from `build`, freed once.
unsafe fn free_block<T>(obj: *mut T) {
    if obj.is_null() {
        return;
    }
    #[cfg(test)]
    tests::FREED.with(|n| n.set(n.get() + 1));
    // SAFETY: by contract obj is HEADER bytes into a block whose first word is its size, and
    // the block was allocated with exactly that size and BLOCK_ALIGN.
    unsafe {
        let base = obj.cast::<u8>().sub(HEADER);
        let total = base.cast::<usize>().read();
        std::alloc::dealloc(
            base,
            std::alloc::Layout::from_size_align_unchecked(total, BLOCK_ALIGN),
        );
    }
}

/// Frees a list block given its object and the count the caller says it holds: a count other
/// than the block's is a caller bug (the pointer may not be what the caller thinks): logged,
/// and nothing is freed. NULL is a no-op.
///
/// # Safety
/// As [`free_block`].
unsafe fn free_counted<T>(what: &str, obj: *mut T, count: usize) {
    if obj.is_null() {
        return;
    }
    // SAFETY: by contract obj is HEADER bytes into a live block; its second word is the count.
    let n = unsafe { obj.cast::<u8>().sub(HEADER).cast::<usize>().add(1).read() };
    if n != count {
        super::log::error(&format!(
            "{what}: count {count} is not the {n} the library returned: not freed"
        ));
        return;
    }
    // SAFETY: as the caller's contract.
    unsafe { free_block(obj) }
}

/// Hands a list to C as one block: writes `*out` (NULL when empty) and returns the count;
/// `-EOVERFLOW` when the count does not fit the `int` return, `-ENOMEM` when the block
/// cannot be allocated (nothing written then).
pub(crate) fn out_list<T, C>(
    items: &[T],
    fill: impl Fn(&mut Bump, &T) -> Result<C, NoMem>,
    out: &mut *mut C,
) -> c_int {
    let Ok(n) = c_int::try_from(items.len()) else {
        return -libc::EOVERFLOW;
    };
    if items.is_empty() {
        *out = std::ptr::null_mut();
        return 0;
    }
    let block = build::<C>(items.len(), |b, arr| {
        for (i, x) in items.iter().enumerate() {
            let c = fill(b, x)?;
            b.put(arr, i, c);
        }
        Ok(())
    });
    match block {
        Ok(p) => {
            *out = p;
            n
        }
        Err(NoMem) => -libc::ENOMEM,
    }
}

/// Hands one struct to C as one block: writes `*out` and returns 0, or `-ENOMEM`.
pub(crate) fn out_one<T, C>(
    x: &T,
    fill: impl Fn(&mut Bump, &T) -> Result<C, NoMem>,
    out: &mut *mut C,
) -> c_int {
    match build::<C>(1, |b, obj| {
        let c = fill(b, x)?;
        b.put(obj, 0, c);
        Ok(())
    }) {
        Ok(p) => {
            *out = p;
            0
        }
        Err(NoMem) => -libc::ENOMEM,
    }
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

/// Filter of `xcecli_joblist_filter`. NULL strings and zero values mean "any".
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

/// A job as the controller reports it. Freed with its list (`xce_free_joblist`,
/// `xce_free_jobs`) or, from `xcecli_jobinfo`, with `xce_free_job`.
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

// Conversions into a block (see `build`): each writes the strings and nested arrays of one
// value and returns its struct.

fn kv_fill(b: &mut Bump, kv: &msg::KeyValue) -> Result<xce_kv_t, NoMem> {
    Ok(xce_kv_t {
        key: b.str(&kv.key)?,
        value: b.str(&kv.value)?,
    })
}

pub(crate) fn job_fill(b: &mut Bump, j: &msg::Job) -> Result<xce_job_t, NoMem> {
    Ok(xce_job_t {
        jobid: j.job_id,
        name: b.str(&j.name)?,
        user: b.str(&j.user)?,
        queue: b.str(&j.queue)?,
        command: b.str(&j.command)?,
        ncpus: j.ncpus,
        mem_mb: j.mem_mb,
        state: job_state(j.state),
        pend_reason: b.str(&j.pend_reason)?,
        exec_host: b.str(&j.exec_host)?,
        submit_time: j.submit_time,
        start_time: j.start_time,
        end_time: j.end_time,
        exit_code: j.exit_code,
        usage: xce_usage_t {
            cpu_ms: j.usage.cpu_ms,
            mem_kb: j.usage.mem_kb,
        },
    })
}

/// A nested array inside a block: `(NULL, 0)` when empty.
fn nested<T, C>(
    b: &mut Bump,
    items: &[T],
    fill: impl Fn(&mut Bump, &T) -> Result<C, NoMem>,
) -> Result<(*const C, usize), NoMem> {
    if items.is_empty() {
        return Ok((std::ptr::null(), 0));
    }
    let arr = b.array::<C>(items.len())?;
    for (i, x) in items.iter().enumerate() {
        let c = fill(b, x)?;
        b.put(arr, i, c);
    }
    Ok((arr.cast_const(), items.len()))
}

pub(crate) fn host_fill(b: &mut Bump, h: &msg::Host) -> Result<xce_host_t, NoMem> {
    let (attrs, nattrs) = nested(b, &h.attrs, kv_fill)?;
    Ok(xce_host_t {
        name: b.str(&h.name)?,
        state: host_state(h.state),
        ncpus: h.ncpus,
        mem_mb: h.mem_mb,
        attrs,
        nattrs,
        njobs: h.njobs,
        last_heartbeat: h.last_heartbeat,
    })
}

pub(crate) fn resource_fill(b: &mut Bump, r: &msg::Resource) -> Result<xce_resource_t, NoMem> {
    Ok(xce_resource_t {
        name: b.str(&r.name)?,
        kind: b.str(&r.kind)?,
        description: b.str(&r.description)?,
    })
}

pub(crate) fn resval_fill(b: &mut Bump, r: &msg::ResVal) -> Result<xce_resval_t, NoMem> {
    Ok(xce_resval_t {
        name: b.str(&r.name)?,
        value: b.str(&r.value)?,
    })
}

pub(crate) fn ctrl_info_fill(
    b: &mut Bump,
    c: &msg::ControllerInfo,
) -> Result<xce_controller_info_t, NoMem> {
    Ok(xce_controller_info_t {
        id: c.id,
        role: ctrl_role(c.role),
        term: c.term,
        primary_id: c.primary_id,
        primary_host: b.str(&c.primary_host)?,
        primary_port: c.primary_port,
        version: b.str(&c.version)?,
        protocol_version: c.protocol_version,
    })
}

pub(crate) fn cluster_conf_fill(
    b: &mut Bump,
    c: &msg::ClusterConf,
) -> Result<xce_cluster_conf_t, NoMem> {
    let (controllers, ncontrollers) = nested(b, &c.controllers, |b, e| {
        Ok(xce_controller_entry_t {
            id: e.id,
            host: b.str(&e.host)?,
            port: e.port,
            role: ctrl_role(e.role),
        })
    })?;
    let (queues, nqueues) = nested(b, &c.queues, |b, q| {
        Ok(xce_queue_t {
            name: b.str(&q.name)?,
            open: i32::from(q.open),
            active: i32::from(q.active),
            priority: q.priority,
        })
    })?;
    Ok(xce_cluster_conf_t {
        cluster_name: b.str(&c.cluster_name)?,
        controllers,
        ncontrollers,
        primary_id: c.primary_id,
        term: c.term,
        queues,
        nqueues,
    })
}

/// The seeds' joblist shape (`xce_job_t ***out`): one block holding `n + 1` pointers (the
/// last NULL), the `n` jobs they point to and all their strings. Writes `*out` (never NULL,
/// also for 0 jobs) and returns the count, or `-EOVERFLOW` / `-ENOMEM` (nothing written).
/// Independent of how the list arrived: any slice of jobs.
pub(crate) fn out_job_ptrs(jobs: &[msg::Job], out: &mut *mut *mut xce_job_t) -> c_int {
    let Ok(n) = c_int::try_from(jobs.len()) else {
        return -libc::EOVERFLOW;
    };
    let block = build::<*mut xce_job_t>(jobs.len() + 1, |b, ptrs| {
        let arr = b.array::<xce_job_t>(jobs.len())?;
        for (i, j) in jobs.iter().enumerate() {
            let c = job_fill(b, j)?;
            b.put(arr, i, c);
            b.put(ptrs, i, arr.wrapping_add(i));
        }
        b.put(ptrs, jobs.len(), std::ptr::null_mut());
        Ok(())
    });
    match block {
        Ok(p) => {
            *out = p;
            n
        }
        Err(NoMem) => -libc::ENOMEM,
    }
}

// ---------------------------------------------------------------------------------------
// Free functions (one per returned type). Each releases the whole block of one call: the
// object, its nested arrays and its strings.

/// Frees the array `xcecli_joblist` returned: the pointer array and every job in it, with
/// their strings. The jobs were allocated together with the array: they cannot be freed one
/// by one (never pass an element to `xce_free_job`), nor outlive this call. NULL is a no-op.
/// Thread-safe for distinct arrays.
#[no_mangle]
pub extern "C" fn xce_free_joblist(jobs: *mut *mut xce_job_t) {
    ffi_panic_boundary! { "xce_free_joblist",
        // SAFETY: jobs is NULL or came from xcecli_joblist, freed once (documented contract).
        unsafe { free_block(jobs) }
    }
}

/// Frees the array `xcecli_joblist_filter` returned. `njobs` must be the count it returned:
/// another count is refused (logged at ERROR, nothing freed). `(NULL, any)` is a no-op.
/// Thread-safe for distinct arrays.
#[no_mangle]
pub extern "C" fn xce_free_jobs(jobs: *mut xce_job_t, njobs: usize) {
    ffi_panic_boundary! { "xce_free_jobs",
        // SAFETY: jobs is NULL or came from xcecli_joblist_filter (documented contract).
        unsafe { free_counted("xce_free_jobs", jobs, njobs) }
    }
}

/// Frees the job `xcecli_jobinfo` returned. NULL is a no-op. Only for `xcecli_jobinfo`'s
/// job, never for an element of a list.
#[no_mangle]
pub extern "C" fn xce_free_job(job: *mut xce_job_t) {
    ffi_panic_boundary! { "xce_free_job",
        // SAFETY: job is NULL or came from xcecli_jobinfo, freed once (documented contract).
        unsafe { free_block(job) }
    }
}

/// Frees the array `xcecli_workerlist` returned (with each host's attributes).
/// `nhosts` must be the count it returned: another count is refused (logged, nothing freed).
/// `(NULL, any)` is a no-op.
#[no_mangle]
pub extern "C" fn xce_free_hosts(hosts: *mut xce_host_t, nhosts: usize) {
    ffi_panic_boundary! { "xce_free_hosts",
        // SAFETY: hosts is NULL or came from xcecli_workerlist (documented contract).
        unsafe { free_counted("xce_free_hosts", hosts, nhosts) }
    }
}

/// Frees the array `xcecli_reslist` returned. `nres` must be the count it returned: another
/// count is refused (logged, nothing freed). `(NULL, any)` is a no-op.
#[no_mangle]
pub extern "C" fn xce_free_resources(res: *mut xce_resource_t, nres: usize) {
    ffi_panic_boundary! { "xce_free_resources",
        // SAFETY: res is NULL or came from xcecli_reslist (documented contract).
        unsafe { free_counted("xce_free_resources", res, nres) }
    }
}

/// Frees the array `xcecli_resval` returned. Only for arrays the library returned, never for
/// the caller's own `xcecli_update_resvals` input. `nresvals` must be the count it returned:
/// another count is refused (logged, nothing freed). `(NULL, any)` is a no-op.
#[no_mangle]
pub extern "C" fn xce_free_resvals(resvals: *mut xce_resval_t, nresvals: usize) {
    ffi_panic_boundary! { "xce_free_resvals",
        // SAFETY: resvals is NULL or came from xcecli_resval (documented contract).
        unsafe { free_counted("xce_free_resvals", resvals, nresvals) }
    }
}

/// Frees what `xcecli_hello` returned. NULL is a no-op.
#[no_mangle]
pub extern "C" fn xce_free_controller_info(info: *mut xce_controller_info_t) {
    ffi_panic_boundary! { "xce_free_controller_info",
        // SAFETY: info is NULL or came from xcecli_hello, freed once (documented contract).
        unsafe { free_block(info) }
    }
}

/// Frees what `xcecli_clusterconf` returned (with its controllers and queues). NULL is a
/// no-op.
#[no_mangle]
pub extern "C" fn xce_free_cluster_conf(conf: *mut xce_cluster_conf_t) {
    ffi_panic_boundary! { "xce_free_cluster_conf",
        // SAFETY: conf is NULL or came from xcecli_clusterconf, freed once (documented).
        unsafe { free_block(conf) }
    }
}

#[cfg(test)]
mod tests {
    thread_local! {
        /// Blocks freed by this thread (per thread: the other tests free blocks concurrently).
        pub(super) static FREED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[test]
    fn a_list_is_freed_only_with_its_own_count() {
        let freed = || FREED.with(|n| n.get());
        let jobs = vec![msg::Job::default(); 3];
        let mut out: *mut xce_job_t = std::ptr::null_mut();
        assert_eq!(super::out_list(&jobs, super::job_fill, &mut out), 3);
        let before = freed();
        super::xce_free_jobs(out, 2);
        super::xce_free_jobs(out, 4);
        assert_eq!(freed(), before, "a wrong count freed the array");
        // SAFETY: the array is still ours (nothing was freed).
        assert_eq!(unsafe { (*out.add(2)).jobid }, 0);
        super::xce_free_jobs(out, 3);
        assert_eq!(freed(), before + 1);
    }

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

    fn cstr<'a>(p: *const c_char) -> &'a str {
        assert!(!p.is_null());
        // SAFETY: library strings are NUL-terminated and live until their block is freed.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn jobs_round_trip_and_free() {
        let jobs = vec![sample_job(), sample_job()];
        let mut out = std::ptr::null_mut();
        assert_eq!(out_list(&jobs, job_fill, &mut out), 2);
        // SAFETY: out holds 2 jobs made just above.
        let (first, second) = unsafe { (&*out, &*out.add(1)) };
        assert_eq!(first.jobid, 42);
        assert_eq!(first.state, XCE_JOB_RUN);
        assert_eq!(first.usage.mem_kb, 6);
        assert_eq!(cstr(first.command), "sleep 1");
        assert_eq!(cstr(first.pend_reason), "a");
        assert_eq!(cstr(first.user), "");
        assert_eq!(cstr(second.name), "n");
        // Distinct strings, each inside the one block.
        assert_ne!(first.command, second.command);
        xce_free_jobs(out, 2);
        let mut out = std::ptr::null_mut::<xce_job_t>();
        assert_eq!(out_list(&[], job_fill, &mut out), 0);
        assert!(out.is_null());
        xce_free_jobs(out, 0);
    }

    #[test]
    fn the_seeds_joblist_is_null_terminated_and_never_null() {
        let jobs: Vec<msg::Job> = (0..5)
            .map(|i| msg::Job {
                job_id: i,
                name: format!("job{i}"),
                ..Default::default()
            })
            .collect();
        let mut out = std::ptr::null_mut();
        assert_eq!(out_job_ptrs(&jobs, &mut out), 5);
        for i in 0..5 {
            // SAFETY: out holds 6 pointers, the first 5 to live jobs.
            let j = unsafe { &**out.add(i) };
            assert_eq!(j.jobid, i as u64);
            assert_eq!(cstr(j.name), format!("job{i}"));
        }
        // SAFETY: as above.
        assert!(unsafe { *out.add(5) }.is_null());
        xce_free_joblist(out);
        let mut out = std::ptr::null_mut();
        assert_eq!(out_job_ptrs(&[], &mut out), 0);
        assert!(!out.is_null());
        // SAFETY: a one-entry array.
        assert!(unsafe { *out }.is_null());
        xce_free_joblist(out);
        xce_free_joblist(std::ptr::null_mut());
    }

    /// One block per call whatever the shape: sized exactly by the dry run, with empty
    /// strings costing nothing.
    #[test]
    fn one_block_sized_by_the_dry_run() {
        let empty = vec![msg::Job::default(); 1000];
        let mut out = std::ptr::null_mut();
        assert_eq!(out_list(&empty, job_fill, &mut out), 1000);
        // SAFETY: out is the object of a live block; its header holds the total size.
        let total = unsafe { out.cast::<u8>().sub(HEADER).cast::<usize>().read() };
        assert_eq!(total, HEADER + 1000 * std::mem::size_of::<xce_job_t>());
        // SAFETY: as above.
        assert_eq!(cstr(unsafe { (*out.add(999)).queue }), "");
        xce_free_jobs(out, 1000);
    }

    #[test]
    fn hosts_and_conf_free_everything() {
        let kv = |key: &str, value: &str| msg::KeyValue {
            key: key.into(),
            value: value.into(),
        };
        let h = msg::Host {
            name: "w1".into(),
            attrs: vec![kv("k", "v"), kv("gpu", "")],
            ..Default::default()
        };
        let mut out = std::ptr::null_mut();
        let hosts = [h.clone(), msg::Host::default()];
        assert_eq!(out_list(&hosts, host_fill, &mut out), 2);
        // SAFETY: out holds 2 hosts; the first has 2 attributes.
        unsafe {
            let first = &*out;
            assert_eq!(cstr(first.name), "w1");
            assert_eq!(first.nattrs, 2);
            assert_eq!(cstr((*first.attrs.add(1)).key), "gpu");
            assert_eq!(cstr((*first.attrs.add(1)).value), "");
            let second = &*out.add(1);
            assert!(second.attrs.is_null() && second.nattrs == 0);
        }
        xce_free_hosts(out, 2);
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
        let mut c = std::ptr::null_mut();
        assert_eq!(out_one(&conf, cluster_conf_fill, &mut c), 0);
        // SAFETY: c is live.
        unsafe {
            assert_eq!((*c).ncontrollers, 3);
            assert_eq!((*(*c).queues).open, 1);
            assert_eq!(cstr((*(*c).queues).name), "normal");
            assert_eq!(cstr((*c).cluster_name), "c");
        }
        xce_free_cluster_conf(c);
        xce_free_cluster_conf(std::ptr::null_mut());
        let mut info = std::ptr::null_mut();
        let ci = msg::ControllerInfo {
            version: "0.1.0".into(),
            ..Default::default()
        };
        assert_eq!(out_one(&ci, ctrl_info_fill, &mut info), 0);
        // SAFETY: info is live.
        assert_eq!(cstr(unsafe { (*info).version }), "0.1.0");
        xce_free_controller_info(info);
        let mut j = std::ptr::null_mut();
        assert_eq!(out_one(&sample_job(), job_fill, &mut j), 0);
        xce_free_job(j);
        let mut r = std::ptr::null_mut();
        let rs = [msg::Resource {
            name: "mem".into(),
            ..Default::default()
        }];
        assert_eq!(out_list(&rs, resource_fill, &mut r), 1);
        xce_free_resources(r, 1);
        let mut v = std::ptr::null_mut();
        let vs = [msg::ResVal {
            name: "load".into(),
            value: "0.5".into(),
        }];
        assert_eq!(out_list(&vs, resval_fill, &mut v), 1);
        xce_free_resvals(v, 1);
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
