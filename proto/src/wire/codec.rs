//! Conversion between the typed messages of `msg.rs` and framed Cap'n Proto bytes
//! (schema/controller.capnp; protocol.md "Transport" and "Envelope").
//!
//! Encoding builds the message with capnp's generated builders and appends the standard stream
//! framing to the caller's buffer. Messages up to 2 KiB (requests, status replies, most small
//! replies) are built in a stack scratch segment: the only heap allocation left is capnp's
//! internal segment list (one small `Vec` per `message::Builder`, which capnp cannot reuse),
//! plus any growth of the caller's `out` (tests/wire_alloc.rs). Larger messages get one heap
//! segment sized from an upper-bound estimate, so they stay single-segment.
//!
//! Decoding is strict: anything the schema does not define (unknown union member or enum
//! value), non-UTF-8 text, a `clientId` that is not exactly 16 bytes, a frame that is not
//! exactly one message, or anything over [`Limits`] is `Error::Proto`. It never panics.
//!
//! Decoding is bounded by the bytes that arrived (F22): each frame gets a traversal limit and
//! an output budget proportional to its own length ([`Limits::reader_options_for`],
//! [`Limits::output_budget`]): every list is charged against the budget before it is
//! allocated, every text against the traversal limit (by capnp) before it is copied. A
//! message that claims more (zero-size elements, a byte list read as a struct list, many
//! pointers sharing one text or list) is `Error::Proto`, found in time proportional to the
//! frame.
//!
//! Each op and each reply payload is one row of a table (`op_table!`, `data_table!`): its
//! encoding, its decoding and its size bound side by side, from which the per-op `match`es of
//! both directions are generated. Adding an op is adding a row (and its rule in msg.rs).
//!
//! Empty texts and all-zero `usage` are left as null pointers when encoding: Cap'n Proto reads
//! a null pointer as the default ("" / zeros), so this only saves space.

use std::cell::Cell;

use capnp::message::{Builder, HeapAllocator, ScratchSpaceHeapAllocator};
use capnp::traits::HasStructSize;
use capnp::Word;

use crate::error::Error;
use crate::wire::controller_capnp as cp;
use crate::wire::frame::{frame_len, Limits};
use crate::wire::msg::*;

/// Stack scratch for building small messages: 2 KiB covers every request and status reply.
const STACK_SCRATCH_WORDS: usize = 256;

/// Largest first heap segment we ask capnp for (its own per-segment bound is 2^29 words).
const MAX_FIRST_SEGMENT_WORDS: usize = 1 << 28;

// ---------------------------------------------------------------------------------------
// Public API

/// Append one framed message to `out` (caller reuses `out`; avoid per-message allocation on the steady path where capnp allows, e.g. a reusable scratch/allocator or writing segments directly into `out`).
///
/// Encoding never fails; a message larger than the peer's limit is refused by the peer (Proto).
pub fn encode_request(req: &Request, out: &mut Vec<u8>) {
    let head = RequestHead {
        seq: req.seq,
        client_id: req.client_id,
        request_id: req.request_id,
        no_reply: req.no_reply,
        auth_token: &req.auth_token,
        forward_within_ms: req.forward_within_ms,
    };
    encode_request_parts(&head, &req.op, out);
}

/// [`encode_request`] from the envelope fields and a borrowed op: the client's loop re-sends
/// one op under new `seq`s without cloning it.
pub fn encode_request_parts(head: &RequestHead, op: &Op, out: &mut Vec<u8>) {
    encode_with(est_request(head, op), out, |root| {
        put_request(head, op, root.init_as())
    });
}

/// Append one framed reply to `out`; see [`encode_request`].
pub fn encode_reply(rep: &Reply, out: &mut Vec<u8>) {
    encode_with(est_reply(rep), out, |root| put_reply(rep, root.init_as()));
}

/// `frame` is exactly one complete framed message (as delimited by frame_len). Any malformed input,
/// unknown union discriminant or enum value, non-UTF-8 text, clientId not 16 bytes (treat an empty clientId as all zeros only if you document it), trailing garbage -> Err(Error::Proto). Never panics.
///
/// An empty or absent `clientId` is Proto too: every request carries its context's id (F16),
/// and a shared all-zero id would let two clients' writes collide in the request-id table.
pub fn decode_request(frame: &[u8], limits: &Limits) -> Result<Request, Error> {
    with_root(frame, limits, |b, root| {
        get_request(b, root.get_as().proto()?)
    })
}

/// Decode one framed reply; see [`decode_request`].
pub fn decode_reply(frame: &[u8], limits: &Limits) -> Result<Reply, Error> {
    with_root(frame, limits, |b, root| {
        get_reply(b, root.get_as().proto()?)
    })
}

// ---------------------------------------------------------------------------------------
// Framing glue

/// Builds a message with `fill` and appends it, framed, to `out`.
fn encode_with(
    est_words: usize,
    out: &mut Vec<u8>,
    fill: impl FnOnce(capnp::any_pointer::Builder<'_>),
) {
    if est_words <= STACK_SCRATCH_WORDS {
        let mut scratch = [capnp::word(0, 0, 0, 0, 0, 0, 0, 0); STACK_SCRATCH_WORDS];
        let mut msg = Builder::new(ScratchSpaceHeapAllocator::new(Word::words_to_bytes_mut(
            &mut scratch,
        )));
        fill(msg.init_root());
        append_framed(&msg.get_segments_for_output(), out);
    } else {
        let first = est_words.min(MAX_FIRST_SEGMENT_WORDS) as u32;
        let mut msg = Builder::new(HeapAllocator::new().first_segment_words(first));
        fill(msg.init_root());
        append_framed(&msg.get_segments_for_output(), out);
    }
}

/// Writes the standard stream framing (frame.rs) and the segments straight into `out`.
fn append_framed(segments: &[&[u8]], out: &mut Vec<u8>) {
    let table = (4 + 4 * segments.len()).div_ceil(8) * 8;
    let body: usize = segments.iter().map(|s| s.len()).sum();
    out.reserve(table + body);
    let start = out.len();
    // capnp never produces zero segments; u32 counts: at most a few segments here.
    out.extend_from_slice(&(segments.len() as u32 - 1).to_le_bytes());
    for s in segments {
        out.extend_from_slice(&((s.len() / 8) as u32).to_le_bytes());
    }
    out.resize(start + table, 0);
    for s in segments {
        out.extend_from_slice(s);
    }
}

/// Checks that `frame` is exactly one message within `limits`, then reads its root with the
/// frame's own bounds (F22): a traversal limit and an output [`Budget`], both proportional to
/// `frame.len()`.
fn with_root<T>(
    frame: &[u8],
    limits: &Limits,
    read: impl for<'a> FnOnce(&Budget, capnp::any_pointer::Reader<'a>) -> Result<T, Error>,
) -> Result<T, Error> {
    // Exactly one whole frame: no truncation, no trailing bytes (protocol.md "Transport").
    if frame_len(frame, limits)? != Some(frame.len()) {
        return Err(Error::Proto);
    }
    let opts = limits.reader_options_for(frame.len());
    let budget = Budget(Cell::new(Limits::output_budget(frame.len())));
    if frame.as_ptr().align_offset(8) == 0 {
        let mut slice = frame;
        let msg =
            capnp::serialize::read_message_from_flat_slice_no_alloc(&mut slice, opts).proto()?;
        read(&budget, msg.get_root().proto()?)
    } else {
        // capnp (without its "unaligned" feature) reads words in place and needs 8-byte
        // alignment; a frame cut from an arbitrary offset is copied once into words.
        let mut words = Word::allocate_zeroed_vec(frame.len() / 8);
        Word::words_to_bytes_mut(&mut words).copy_from_slice(frame);
        let mut slice = Word::words_to_bytes(&words);
        let msg =
            capnp::serialize::read_message_from_flat_slice_no_alloc(&mut slice, opts).proto()?;
        read(&budget, msg.get_root().proto()?)
    }
}

/// Every decode failure is a protocol error; the cause does not matter to the caller.
trait OrProto<T> {
    fn proto(self) -> Result<T, Error>;
}

impl<T, E> OrProto<T> for Result<T, E> {
    fn proto(self) -> Result<T, Error> {
        self.map_err(|_| Error::Proto)
    }
}

/// What one frame may decode into (F22): bytes of list elements (`count * size_of`),
/// charged before each list is allocated. It starts at [`Limits::output_budget`] for the
/// frame's size, so a list of zero-size elements (or a byte list read as a struct list)
/// cannot claim more elements than the frame pays for. Texts need no charge: capnp charges
/// each text read to the frame's traversal limit before we copy it, so all texts together
/// are at most about twice the frame (even when many pointers share one text).
struct Budget(Cell<usize>);

impl Budget {
    fn charge(&self, bytes: usize) -> Result<(), Error> {
        let left = self.0.get().checked_sub(bytes).ok_or(Error::Proto)?;
        self.0.set(left);
        Ok(())
    }
}

fn text(r: capnp::Result<capnp::text::Reader<'_>>) -> Result<String, Error> {
    Ok(r.proto()?.to_str().proto()?.to_owned())
}

/// Leaves empty texts null (read back as "").
macro_rules! set_text {
    ($b:expr, $setter:ident, $s:expr) => {
        if !$s.is_empty() {
            $b.$setter($s.as_str());
        }
    };
}

fn list_len(n: usize) -> u32 {
    // Cap'n Proto lists hold at most 2^29 elements, far beyond any message under the limits.
    u32::try_from(n).expect("list too long for Cap'n Proto")
}

// ---------------------------------------------------------------------------------------
// Size estimates: an upper bound in words, so the first segment holds the whole message.

fn sw<T: HasStructSize>() -> usize {
    T::STRUCT_SIZE.data as usize + T::STRUCT_SIZE.pointers as usize
}

fn tw(s: &str) -> usize {
    // Text is NUL-terminated and padded to a word.
    (s.len() + 1).div_ceil(8)
}

fn est_list<T>(items: &[T], elem_words: usize, each: impl Fn(&T) -> usize) -> usize {
    // One tag word, the inline elements, and what each element points to.
    1 + items.len() * elem_words + items.iter().map(each).sum::<usize>()
}

fn est_kvs(v: &[KeyValue]) -> usize {
    est_list(v, sw::<cp::key_value::Builder>(), |kv| {
        tw(&kv.key) + tw(&kv.value)
    })
}

fn est_resvals(v: &[ResVal]) -> usize {
    est_list(v, sw::<cp::res_val::Builder>(), |r| {
        tw(&r.name) + tw(&r.value)
    })
}

fn est_job_ptrs(j: &Job) -> usize {
    sw::<cp::usage::Builder>()
        + tw(&j.name)
        + tw(&j.user)
        + tw(&j.queue)
        + tw(&j.command)
        + tw(&j.pend_reason)
        + tw(&j.exec_host)
}

// ---------------------------------------------------------------------------------------
// Enums: one table per enum, both directions.

trait WireEnum: Sized {
    type Wire;
    fn to_wire(self) -> Self::Wire;
    fn from_wire(w: Self::Wire) -> Self;
}

macro_rules! wire_enum {
    ($name:ident { $($ours:ident = $theirs:ident),* $(,)? }) => {
        impl WireEnum for $name {
            type Wire = cp::$name;
            fn to_wire(self) -> cp::$name {
                match self { $($name::$ours => cp::$name::$theirs),* }
            }
            fn from_wire(w: cp::$name) -> $name {
                match w { $(cp::$name::$theirs => $name::$ours),* }
            }
        }
    };
}

wire_enum!(SessionRole { Worker = Worker, Scheduler = Scheduler, ApiServer = Apiserver, Client = Client });
wire_enum!(JobAction { Kill = Kill, Suspend = Suspend, Resume = Resume, Requeue = Requeue });
wire_enum!(QueueAction { Open = Open, Close = Close, Activate = Activate, Inactivate = Inactivate });
wire_enum!(HostAction { Open = Open, Close = Close });
wire_enum!(NotifyKind {
    JobStart = JobStart, JobFinish = JobFinish, JobFail = JobFail, JobStop = JobStop,
    JobChkpt = JobChkpt,
});
wire_enum!(JobState { Pend = Pend, Run = Run, Susp = Susp, Done = Done, Exit = Exit });
wire_enum!(HostState { Ok = Ok, Closed = Closed, Unavail = Unavail });
wire_enum!(ControllerRole {
    Primary = Primary, Standby = Standby, Candidate = Candidate, Initializing = Initializing,
});

/// An enum field read from the wire: a value this schema does not define is Proto.
fn en<T: WireEnum>(r: Result<T::Wire, capnp::NotInSchema>) -> Result<T, Error> {
    Ok(T::from_wire(r.proto()?))
}

// ---------------------------------------------------------------------------------------
// Envelopes: the fields around the op / the reply data.

fn est_request(head: &RequestHead, op: &Op) -> usize {
    1 + sw::<cp::request::Builder>() + CLIENT_ID_LEN / 8 + tw(head.auth_token) + est_op(op)
}

fn put_request(head: &RequestHead, op: &Op, mut b: cp::request::Builder<'_>) {
    b.set_seq(head.seq);
    b.set_client_id(&head.client_id);
    b.set_request_id(head.request_id);
    b.set_no_reply(head.no_reply);
    if head.forward_within_ms != 0 {
        b.set_forward_within_ms(head.forward_within_ms);
    }
    if !head.auth_token.is_empty() {
        b.set_auth_token(head.auth_token);
    }
    put_op(op, b.init_op());
}

fn get_request(b: &Budget, r: cp::request::Reader<'_>) -> Result<Request, Error> {
    let client_id: ClientId = r.get_client_id().proto()?.try_into().proto()?;
    Ok(Request {
        seq: r.get_seq(),
        client_id,
        request_id: r.get_request_id(),
        no_reply: r.get_no_reply(),
        op: get_op(b, r.get_op())?,
        auth_token: text(r.get_auth_token())?,
        forward_within_ms: r.get_forward_within_ms(),
    })
}

fn est_reply(rep: &Reply) -> usize {
    1 + sw::<cp::reply::Builder>() + tw(&rep.redirect_host) + tw(&rep.detail) + est_data(&rep.data)
}

fn put_reply(rep: &Reply, mut b: cp::reply::Builder<'_>) {
    b.set_seq(rep.seq);
    b.set_status(rep.status);
    set_text!(b, set_redirect_host, rep.redirect_host);
    b.set_redirect_port(rep.redirect_port);
    b.set_members_version(rep.members_version);
    set_text!(b, set_detail, rep.detail);
    put_data(&rep.data, b.init_data());
}

fn get_reply(b: &Budget, r: cp::reply::Reader<'_>) -> Result<Reply, Error> {
    Ok(Reply {
        seq: r.get_seq(),
        status: r.get_status(),
        redirect_host: text(r.get_redirect_host())?,
        redirect_port: r.get_redirect_port(),
        data: get_data(b, r.get_data())?,
        members_version: r.get_members_version(),
        detail: text(r.get_detail())?,
    })
}

// ---------------------------------------------------------------------------------------
// Ops: one row per op, both directions together.

/// Generates `est_op`, `put_op` and `get_op` from one table, so that an op's encoding, its
/// decoding and its size bound are written once, side by side (a new op is one new row; the
/// compiler then asks for its `Op::rule` in msg.rs). A row:
///
/// `Variant fields => init_member / WhichMember, est WORDS, put { .. } get { .. }`:
/// the `Op` pattern, the schema's union member (its builder's `init_` method and its reader's
/// `Which` variant), an upper bound of the words the member takes, the statements that fill
/// its builder `x` from the pattern's fields, and the `Op` read back from its reader `x`
/// (`b`: the frame's [`Budget`], for lists). Void members are listed first, apart, by their
/// `set_` method and `Which` variant.
macro_rules! op_table {
    (
        |$x:ident, $b:ident|
        void { $( $vop:ident => $set:ident / $vwhich:ident ),* $(,)? }
        $( $op:ident $fields:tt => $init:ident / $which:ident,
            est $est:expr,
            put $put:block
            get $get:block )*
    ) => {
        /// Words the op's union member takes (an upper bound; see `est_request`).
        #[allow(unused_variables)] // most rows' sizes do not depend on every field
        fn est_op(op: &Op) -> usize {
            match op {
                $( Op::$op $fields => $est, )*
                $( Op::$vop => 0, )*
            }
        }

        fn put_op(op: &Op, mut o: cp::request::op::Builder<'_>) {
            match op {
                $( Op::$op $fields => {
                    #[allow(unused_mut)] // rows that hand the builder on by value
                    let mut $x = o.$init();
                    $put
                } )*
                $( Op::$vop => o.$set(()), )*
            }
        }

        fn get_op($b: &Budget, o: cp::request::op::Reader<'_>) -> Result<Op, Error> {
            use cp::request::op::Which as W;
            Ok(match o.which().proto()? {
                $( W::$which(r) => {
                    let $x = r.proto()?;
                    $get
                } )*
                $( W::$vwhich(()) => Op::$vop, )*
            })
        }
    };
}

// Rows in the schema's order (`Request.op`), Void members first. Text fields are written in a fixed order: capnp
// lays texts out in the order they are set, and the bytes on the wire must not change.
op_table! { |x, b|
    void {
        ResList => set_reslist / Reslist,
        WorkerList => set_workerlist / Workerlist,
        ClusterConf => set_clusterconf / Clusterconf,
        Nop => set_nop / Nop,
        ConsistencyCheck => set_consistency_check / ConsistencyCheck,
    }
    Hello(h) => init_hello / Hello,
        est sw::<cp::hello::Builder>() + tw(&h.client_name),
        put {
            set_text!(x, set_client_name, h.client_name);
            x.set_protocol_version(h.protocol_version);
        }
        get {
            Op::Hello(Hello {
                client_name: text(x.get_client_name())?,
                protocol_version: x.get_protocol_version(),
            })
        }
    Join(j) => init_join / Join,
        est sw::<cp::join::Builder>() + tw(&j.host) + est_kvs(&j.attrs),
        put {
            x.set_role(j.role.to_wire());
            set_text!(x, set_host, j.host);
            x.set_ncpus(j.ncpus);
            x.set_mem_mb(j.mem_mb);
            if !j.attrs.is_empty() {
                put_kvs(&j.attrs, x.init_attrs(list_len(j.attrs.len())));
            }
        }
        get {
            Op::Join(Join {
                role: en(x.get_role())?,
                host: text(x.get_host())?,
                ncpus: x.get_ncpus(),
                mem_mb: x.get_mem_mb(),
                attrs: get_kvs(b, x.get_attrs())?,
            })
        }
    JobList(f) => init_joblist / Joblist,
        est est_job_filter(f),
        put { put_job_filter(f, x) }
        get { Op::JobList(get_job_filter(x)?) }
    JobInfo { job_id } => init_jobinfo / Jobinfo,
        est sw::<cp::job_ref::Builder>(),
        put { x.set_job_id(*job_id) }
        get { Op::JobInfo { job_id: x.get_job_id() } }
    JobSubmit(s) => init_jobsubmit / Jobsubmit,
        est sw::<cp::job_spec::Builder>() + tw(&s.name) + tw(&s.user) + tw(&s.queue)
            + tw(&s.command),
        put {
            x.set_job_id(s.job_id);
            set_text!(x, set_name, s.name);
            set_text!(x, set_user, s.user);
            set_text!(x, set_queue, s.queue);
            set_text!(x, set_command, s.command);
            x.set_ncpus(s.ncpus);
            x.set_mem_mb(s.mem_mb);
        }
        get {
            Op::JobSubmit(JobSpec {
                job_id: x.get_job_id(),
                name: text(x.get_name())?,
                user: text(x.get_user())?,
                queue: text(x.get_queue())?,
                command: text(x.get_command())?,
                ncpus: x.get_ncpus(),
                mem_mb: x.get_mem_mb(),
            })
        }
    JobDispatch { job_id, host } => init_jobdispatch / Jobdispatch,
        est sw::<cp::job_dispatch::Builder>() + tw(host),
        put {
            x.set_job_id(*job_id);
            set_text!(x, set_host, host);
        }
        get { Op::JobDispatch { job_id: x.get_job_id(), host: text(x.get_host())? } }
    JobCtrl { job_id, action } => init_jobctrl / Jobctrl,
        est sw::<cp::job_ctrl::Builder>(),
        put {
            x.set_job_id(*job_id);
            x.set_action(action.to_wire());
        }
        get { Op::JobCtrl { job_id: x.get_job_id(), action: en(x.get_action())? } }
    QueueCtrl { queue, action } => init_queuectrl / Queuectrl,
        est sw::<cp::queue_ctrl::Builder>() + tw(queue),
        put {
            set_text!(x, set_queue, queue);
            x.set_action(action.to_wire());
        }
        get { Op::QueueCtrl { queue: text(x.get_queue())?, action: en(x.get_action())? } }
    HostCtrl { host, action } => init_hostctrl / Hostctrl,
        est sw::<cp::host_ctrl::Builder>() + tw(host),
        put {
            set_text!(x, set_host, host);
            x.set_action(action.to_wire());
        }
        get { Op::HostCtrl { host: text(x.get_host())?, action: en(x.get_action())? } }
    ResVal { host } => init_resval / Resval,
        est sw::<cp::host_ref::Builder>() + tw(host),
        put { set_text!(x, set_host, host) }
        get { Op::ResVal { host: text(x.get_host())? } }
    UpdateResvals { host, resvals } => init_update_resvals / UpdateResvals,
        est sw::<cp::update_resvals::Builder>() + tw(host) + est_resvals(resvals),
        put {
            set_text!(x, set_host, host);
            if !resvals.is_empty() {
                put_resvals(resvals, x.init_resvals(list_len(resvals.len())));
            }
        }
        get {
            Op::UpdateResvals {
                host: text(x.get_host())?,
                resvals: get_resvals(b, x.get_resvals())?,
            }
        }
    UpdateJusage { job_id, usage } => init_update_jusage / UpdateJusage,
        est sw::<cp::update_jusage::Builder>() + sw::<cp::usage::Builder>(),
        put {
            x.set_job_id(*job_id);
            put_usage(usage, || x.reborrow().init_usage());
        }
        get { Op::UpdateJusage { job_id: x.get_job_id(), usage: get_usage(x.get_usage())? } }
    RunTask { host, command } => init_runtask / Runtask,
        est sw::<cp::run_task::Builder>() + tw(host) + tw(command),
        put {
            set_text!(x, set_host, host);
            set_text!(x, set_command, command);
        }
        get { Op::RunTask { host: text(x.get_host())?, command: text(x.get_command())? } }
    SetPendReason { job_id, reason } => init_set_pend_reason / SetPendReason,
        est sw::<cp::set_pend_reason::Builder>() + tw(reason),
        put {
            x.set_job_id(*job_id);
            set_text!(x, set_reason, reason);
        }
        get { Op::SetPendReason { job_id: x.get_job_id(), reason: text(x.get_reason())? } }
    ClearReason { job_id } => init_clear_reason / ClearReason,
        est sw::<cp::job_ref::Builder>(),
        put { x.set_job_id(*job_id) }
        get { Op::ClearReason { job_id: x.get_job_id() } }
    Notify(n) => init_notify / Notify,
        est sw::<cp::notify::Builder>(),
        put {
            x.set_kind(n.kind.to_wire());
            x.set_job_id(n.job_id);
            x.set_exit_code(n.exit_code);
        }
        get {
            Op::Notify(Notify {
                kind: en(x.get_kind())?,
                job_id: x.get_job_id(),
                exit_code: x.get_exit_code(),
            })
        }
    Heartbeat { host } => init_heartbeat / Heartbeat,
        est sw::<cp::host_ref::Builder>() + tw(host),
        put { set_text!(x, set_host, host) }
        get { Op::Heartbeat { host: text(x.get_host())? } }
    WaitPrimary { timeout_ms, exclude_host, exclude_port } => init_wait_primary / WaitPrimary,
        est sw::<cp::wait_primary::Builder>() + tw(exclude_host),
        put {
            x.set_timeout_ms(*timeout_ms);
            set_text!(x, set_exclude_host, exclude_host);
            x.set_exclude_port(*exclude_port);
        }
        get {
            Op::WaitPrimary {
                timeout_ms: x.get_timeout_ms(),
                exclude_host: text(x.get_exclude_host())?,
                exclude_port: x.get_exclude_port(),
            }
        }
    JobListPage(p) => init_joblist_page / JoblistPage,
        est sw::<cp::job_list_page::Builder>() + est_job_filter(&p.filter),
        put {
            put_job_filter(&p.filter, x.reborrow().init_filter());
            x.set_cursor(p.cursor);
            x.set_after(p.after);
            x.set_max_bytes(p.max_bytes);
        }
        get {
            // An absent filter reads as the default (no filter), like the texts' null pointers.
            let filter = match x.has_filter() {
                true => get_job_filter(x.get_filter().proto()?)?,
                false => JobFilter::default(),
            };
            Op::JobListPage(JobListPage {
                filter,
                cursor: x.get_cursor(),
                after: x.get_after(),
                max_bytes: x.get_max_bytes(),
            })
        }
    MemberAdd { id, client_addr, raft_addr } => init_member_add / MemberAdd,
        est sw::<cp::member_add::Builder>() + tw(client_addr) + tw(raft_addr),
        put {
            x.set_id(*id);
            set_text!(x, set_client_addr, client_addr);
            set_text!(x, set_raft_addr, raft_addr);
        }
        get {
            Op::MemberAdd {
                id: x.get_id(),
                client_addr: text(x.get_client_addr())?,
                raft_addr: text(x.get_raft_addr())?,
            }
        }
    MemberRemove { id } => init_member_remove / MemberRemove,
        est sw::<cp::member_remove::Builder>(),
        put { x.set_id(*id) }
        get { Op::MemberRemove { id: x.get_id() } }
    SnapshotSave(s) => init_snapshot_save / SnapshotSave,
        est sw::<cp::snapshot_save::Builder>(),
        put {
            x.set_cursor(s.cursor);
            x.set_offset(s.offset);
            x.set_max_bytes(s.max_bytes);
        }
        get {
            Op::SnapshotSave(SnapshotSave {
                cursor: x.get_cursor(),
                offset: x.get_offset(),
                max_bytes: x.get_max_bytes(),
            })
        }
    LeaderTransfer { to, from } => init_leader_transfer / LeaderTransfer,
        est sw::<cp::leader_transfer::Builder>(),
        put {
            x.set_to(*to);
            x.set_from(*from);
        }
        get { Op::LeaderTransfer { to: x.get_to(), from: x.get_from() } }
}

// ---------------------------------------------------------------------------------------
// Reply data: one row per union member, both directions together.

/// Generates `est_data`, `put_data` and `get_data` from one table, as `op_table!` does for
/// ops. A row: `Variant fields => WhichMember pattern, est WORDS, put { .. } get { .. }`: the
/// `ReplyData` pattern, the reader's `Which` pattern, an upper bound of the words the member
/// takes, the expression that fills the union builder `d`, and the `ReplyData` read back
/// from the `Which` pattern's bindings (`b`: the frame's [`Budget`]).
macro_rules! data_table {
    (
        |$d:ident, $b:ident|
        $( $data:ident $fields:tt => $which:ident $wfields:tt,
            est $est:expr,
            put $put:block
            get $get:block )*
    ) => {
        /// Words the reply's data takes (an upper bound; see `est_reply`).
        #[allow(unused_variables)] // a number's size does not depend on it
        fn est_data(data: &ReplyData) -> usize {
            match data {
                $( ReplyData::$data $fields => $est, )*
            }
        }

        fn put_data(data: &ReplyData, mut $d: cp::reply::data::Builder<'_>) {
            match data {
                $( ReplyData::$data $fields => $put )*
            }
        }

        fn get_data($b: &Budget, r: cp::reply::data::Reader<'_>) -> Result<ReplyData, Error> {
            use cp::reply::data::Which as W;
            Ok(match r.which().proto()? {
                $( W::$which $wfields => $get )*
            })
        }
    };
}

// Rows in the schema's order (`Reply.data`).
data_table! { |d, b|
    None {} => None(()),
        est 0,
        put { d.set_none(()) }
        get { ReplyData::None }
    CtrlInfo(c) => CtrlInfo(x),
        est est_ctrl_info(c),
        put { put_ctrl_info(c, d.init_ctrl_info()) }
        get { ReplyData::CtrlInfo(get_ctrl_info(b, x.proto()?)?) }
    Jobs(v) => Jobs(l),
        est est_list(v, sw::<cp::job::Builder>(), est_job_ptrs),
        put { put_list(v, d.init_jobs(list_len(v.len())), put_job) }
        get { ReplyData::Jobs(get_list(b, l, get_job)?) }
    Job(j) => Job(x),
        est sw::<cp::job::Builder>() + est_job_ptrs(j),
        put { put_job(j, d.init_job()) }
        get { ReplyData::Job(get_job(x.proto()?)?) }
    JobId(id) => JobId(id),
        est 0,
        put { d.set_job_id(*id) }
        get { ReplyData::JobId(id) }
    Hosts(v) => Hosts(l),
        est est_list(v, sw::<cp::host::Builder>(), |h| tw(&h.name) + est_kvs(&h.attrs)),
        put { put_list(v, d.init_hosts(list_len(v.len())), put_host) }
        get { ReplyData::Hosts(get_list(b, l, |x| get_host(b, x))?) }
    Resources(v) => Resources(l),
        est est_list(v, sw::<cp::resource::Builder>(), |r| {
            tw(&r.name) + tw(&r.kind) + tw(&r.description)
        }),
        put { put_list(v, d.init_resources(list_len(v.len())), put_resource) }
        get { ReplyData::Resources(get_list(b, l, get_resource)?) }
    ResVals(v) => Resvals(l),
        est est_resvals(v),
        put { put_resvals(v, d.init_resvals(list_len(v.len()))) }
        get { ReplyData::ResVals(get_resvals(b, l)?) }
    ClusterConf(c) => ClusterConf(x),
        est est_cluster_conf(c),
        put { put_cluster_conf(c, d.init_cluster_conf()) }
        get { ReplyData::ClusterConf(get_cluster_conf(b, x.proto()?)?) }
    TaskId(id) => TaskId(id),
        est 0,
        put { d.set_task_id(*id) }
        get { ReplyData::TaskId(id) }
    SessionId(id) => SessionId(id),
        est 0,
        put { d.set_session_id(*id) }
        get { ReplyData::SessionId(id) }
    JobPage(p) => JobPage(x),
        est sw::<cp::job_page::Builder>()
            + est_list(&p.jobs, sw::<cp::job::Builder>(), est_job_ptrs),
        put { put_job_page(p, d.init_job_page()) }
        get { ReplyData::JobPage(get_job_page(b, x.proto()?)?) }
    SnapshotChunk(c) => SnapshotChunk(x),
        // data, digest, and the 16-byte cluster id (2 words), with room to spare.
        est sw::<cp::snapshot_chunk::Builder>() + c.data.len().div_ceil(8) + c.digest.len() / 8
            + 6,
        put { put_snapshot_chunk(c, d.init_snapshot_chunk()) }
        get { ReplyData::SnapshotChunk(get_snapshot_chunk(x.proto()?)?) }
}

// ---------------------------------------------------------------------------------------
// Structs and lists: each one's writer beside its reader.

type ListReader<'a, T> = capnp::Result<capnp::struct_list::Reader<'a, T>>;

fn put_list<T, L: capnp::traits::OwnedStruct>(
    v: &[T],
    mut l: capnp::struct_list::Builder<'_, L>,
    put: impl Fn(&T, L::Builder<'_>),
) {
    for (i, x) in v.iter().enumerate() {
        put(x, l.reborrow().get(i as u32));
    }
}

fn get_list<'a, T, U>(
    b: &Budget,
    l: ListReader<'a, T>,
    each: impl Fn(T::Reader<'a>) -> Result<U, Error>,
) -> Result<Vec<U>, Error>
where
    T: capnp::traits::OwnedStruct,
{
    let l = l.proto()?;
    // The reader only checked that the elements' *words* are inside the message: zero-size
    // elements (or a byte list read as structs) take none or one byte each. The Vec's bytes
    // are charged before it is allocated, so the count cannot exceed what the frame pays for.
    let n = l.len() as usize;
    b.charge(n.saturating_mul(std::mem::size_of::<U>()))?;
    // Even a bounded list can meet a process out of memory: that is an error, not an abort.
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| Error::Errno(libc::ENOMEM))?;
    for x in l.iter() {
        v.push(each(x)?);
    }
    Ok(v)
}

/// A list of texts, charged to the budget before it is allocated (as [`get_list`]).
fn get_texts(
    b: &Budget,
    l: capnp::Result<capnp::text_list::Reader<'_>>,
) -> Result<Vec<String>, Error> {
    let l = l.proto()?;
    let n = l.len() as usize;
    b.charge(n.saturating_mul(std::mem::size_of::<String>()))?;
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| Error::Errno(libc::ENOMEM))?;
    for t in l.iter() {
        v.push(t.proto()?.to_str().proto()?.to_owned());
    }
    Ok(v)
}

fn put_kvs(v: &[KeyValue], l: capnp::struct_list::Builder<'_, cp::key_value::Owned>) {
    put_list(v, l, |kv, mut x| {
        set_text!(x, set_key, kv.key);
        set_text!(x, set_value, kv.value);
    });
}

fn get_kvs(b: &Budget, l: ListReader<'_, cp::key_value::Owned>) -> Result<Vec<KeyValue>, Error> {
    get_list(b, l, |x| {
        Ok(KeyValue {
            key: text(x.get_key())?,
            value: text(x.get_value())?,
        })
    })
}

fn put_resvals(v: &[ResVal], l: capnp::struct_list::Builder<'_, cp::res_val::Owned>) {
    put_list(v, l, |r, mut x| {
        set_text!(x, set_name, r.name);
        set_text!(x, set_value, r.value);
    });
}

fn get_resvals(b: &Budget, l: ListReader<'_, cp::res_val::Owned>) -> Result<Vec<ResVal>, Error> {
    get_list(b, l, |x| {
        Ok(ResVal {
            name: text(x.get_name())?,
            value: text(x.get_value())?,
        })
    })
}

/// Zero usage stays a null pointer (read back as zeros).
fn put_usage<'a>(u: &Usage, init: impl FnOnce() -> cp::usage::Builder<'a>) {
    if *u != Usage::default() {
        let mut x = init();
        x.set_cpu_ms(u.cpu_ms);
        x.set_mem_kb(u.mem_kb);
    }
}

fn get_usage(u: capnp::Result<cp::usage::Reader<'_>>) -> Result<Usage, Error> {
    let u = u.proto()?;
    Ok(Usage {
        cpu_ms: u.get_cpu_ms(),
        mem_kb: u.get_mem_kb(),
    })
}

fn put_job(j: &Job, mut x: cp::job::Builder<'_>) {
    x.set_job_id(j.job_id);
    set_text!(x, set_name, j.name);
    set_text!(x, set_user, j.user);
    set_text!(x, set_queue, j.queue);
    set_text!(x, set_command, j.command);
    x.set_ncpus(j.ncpus);
    x.set_mem_mb(j.mem_mb);
    x.set_state(j.state.to_wire());
    set_text!(x, set_pend_reason, j.pend_reason);
    set_text!(x, set_exec_host, j.exec_host);
    x.set_submit_time(j.submit_time);
    x.set_start_time(j.start_time);
    x.set_end_time(j.end_time);
    x.set_exit_code(j.exit_code);
    put_usage(&j.usage, || x.init_usage());
}

fn get_job(x: cp::job::Reader<'_>) -> Result<Job, Error> {
    Ok(Job {
        job_id: x.get_job_id(),
        name: text(x.get_name())?,
        user: text(x.get_user())?,
        queue: text(x.get_queue())?,
        command: text(x.get_command())?,
        ncpus: x.get_ncpus(),
        mem_mb: x.get_mem_mb(),
        state: en(x.get_state())?,
        pend_reason: text(x.get_pend_reason())?,
        exec_host: text(x.get_exec_host())?,
        submit_time: x.get_submit_time(),
        start_time: x.get_start_time(),
        end_time: x.get_end_time(),
        exit_code: x.get_exit_code(),
        usage: get_usage(x.get_usage())?,
    })
}

fn put_host(h: &Host, mut x: cp::host::Builder<'_>) {
    set_text!(x, set_name, h.name);
    x.set_state(h.state.to_wire());
    x.set_ncpus(h.ncpus);
    x.set_mem_mb(h.mem_mb);
    if !h.attrs.is_empty() {
        put_kvs(&h.attrs, x.reborrow().init_attrs(list_len(h.attrs.len())));
    }
    x.set_njobs(h.njobs);
    x.set_last_heartbeat(h.last_heartbeat);
}

fn get_host(b: &Budget, x: cp::host::Reader<'_>) -> Result<Host, Error> {
    Ok(Host {
        name: text(x.get_name())?,
        state: en(x.get_state())?,
        ncpus: x.get_ncpus(),
        mem_mb: x.get_mem_mb(),
        attrs: get_kvs(b, x.get_attrs())?,
        njobs: x.get_njobs(),
        last_heartbeat: x.get_last_heartbeat(),
    })
}

fn put_resource(r: &Resource, mut x: cp::resource::Builder<'_>) {
    set_text!(x, set_name, r.name);
    set_text!(x, set_type, r.kind);
    set_text!(x, set_description, r.description);
}

fn get_resource(x: cp::resource::Reader<'_>) -> Result<Resource, Error> {
    Ok(Resource {
        name: text(x.get_name())?,
        kind: text(x.get_type())?,
        description: text(x.get_description())?,
    })
}

fn put_controller_entry(e: &ControllerEntry, mut y: cp::controller_entry::Builder<'_>) {
    y.set_id(e.id);
    set_text!(y, set_host, e.host);
    y.set_port(e.port);
    y.set_role(e.role.to_wire());
}

fn get_controller_entries(
    b: &Budget,
    l: ListReader<'_, cp::controller_entry::Owned>,
) -> Result<Vec<ControllerEntry>, Error> {
    get_list(b, l, |y| {
        Ok(ControllerEntry {
            id: y.get_id(),
            host: text(y.get_host())?,
            port: y.get_port(),
            role: en(y.get_role())?,
        })
    })
}

/// C20: a cluster id is 16 bytes or absent (all zero); any other length is a malformed reply.
fn cluster_id(d: capnp::Result<capnp::data::Reader<'_>>) -> Result<[u8; 16], Error> {
    let d = d.proto()?;
    match d.len() {
        0 => Ok([0; 16]),
        _ => d.try_into().proto(),
    }
}

fn est_ctrl_info(c: &ControllerInfo) -> usize {
    sw::<cp::controller_info::Builder>()
        + tw(&c.primary_host)
        + tw(&c.version)
        + est_list(&c.members, sw::<cp::controller_entry::Builder>(), |e| {
            tw(&e.host)
        })
        + 3
        + est_list(&c.alarms, 1, |a| tw(a))
}

/// Empty lists and an all-zero cluster id stay null pointers (read back as empty / zeros).
fn put_ctrl_info(c: &ControllerInfo, mut x: cp::controller_info::Builder<'_>) {
    x.set_id(c.id);
    x.set_role(c.role.to_wire());
    x.set_term(c.term);
    x.set_primary_id(c.primary_id);
    set_text!(x, set_primary_host, c.primary_host);
    x.set_primary_port(c.primary_port);
    set_text!(x, set_version, c.version);
    x.set_protocol_version(c.protocol_version);
    x.set_waiters(c.waiters);
    x.set_last_log_index(c.last_log_index);
    x.set_committed_index(c.committed_index);
    x.set_applied_index(c.applied_index);
    x.set_last_contact_ms(c.last_contact_ms);
    if !c.members.is_empty() {
        let l = x.reborrow().init_members(list_len(c.members.len()));
        put_list(&c.members, l, put_controller_entry);
    }
    if c.cluster_id != [0; 16] {
        x.set_cluster_id(&c.cluster_id);
    }
    if !c.alarms.is_empty() {
        let mut l = x.reborrow().init_alarms(list_len(c.alarms.len()));
        for (i, a) in c.alarms.iter().enumerate() {
            l.set(i as u32, a.as_str());
        }
    }
    x.set_checked_index(c.checked_index);
    x.set_uptime_ms(c.uptime_ms);
    x.set_db_size_bytes(c.db_size_bytes);
    x.set_disk_free_bytes(c.disk_free_bytes);
    x.set_quota_bytes(c.quota_bytes);
}

fn get_ctrl_info(b: &Budget, x: cp::controller_info::Reader<'_>) -> Result<ControllerInfo, Error> {
    Ok(ControllerInfo {
        id: x.get_id(),
        role: en(x.get_role())?,
        term: x.get_term(),
        primary_id: x.get_primary_id(),
        primary_host: text(x.get_primary_host())?,
        primary_port: x.get_primary_port(),
        version: text(x.get_version())?,
        protocol_version: x.get_protocol_version(),
        waiters: x.get_waiters(),
        last_log_index: x.get_last_log_index(),
        committed_index: x.get_committed_index(),
        applied_index: x.get_applied_index(),
        last_contact_ms: x.get_last_contact_ms(),
        members: get_controller_entries(b, x.get_members())?,
        cluster_id: cluster_id(x.get_cluster_id())?,
        alarms: get_texts(b, x.get_alarms())?,
        checked_index: x.get_checked_index(),
        uptime_ms: x.get_uptime_ms(),
        db_size_bytes: x.get_db_size_bytes(),
        disk_free_bytes: x.get_disk_free_bytes(),
        quota_bytes: x.get_quota_bytes(),
    })
}

fn put_snapshot_chunk(c: &SnapshotChunk, mut x: cp::snapshot_chunk::Builder<'_>) {
    x.set_cursor(c.cursor);
    x.set_offset(c.offset);
    x.set_data(&c.data);
    x.set_total_bytes(c.total_bytes);
    x.set_index(c.index);
    x.set_term(c.term);
    x.set_digest(&c.digest);
    x.set_cluster_id(&c.cluster_id);
    x.set_agreeing(c.agreeing);
    x.set_voters(c.voters);
}

fn get_snapshot_chunk(x: cp::snapshot_chunk::Reader<'_>) -> Result<SnapshotChunk, Error> {
    Ok(SnapshotChunk {
        cursor: x.get_cursor(),
        offset: x.get_offset(),
        data: x.get_data().proto()?.to_vec(),
        total_bytes: x.get_total_bytes(),
        index: x.get_index(),
        term: x.get_term(),
        digest: x.get_digest().proto()?.to_vec(),
        cluster_id: cluster_id(x.get_cluster_id())?,
        agreeing: x.get_agreeing(),
        voters: x.get_voters(),
    })
}

fn est_cluster_conf(c: &ClusterConf) -> usize {
    sw::<cp::cluster_conf::Builder>()
        + tw(&c.cluster_name)
        + est_list(&c.controllers, sw::<cp::controller_entry::Builder>(), |e| {
            tw(&e.host)
        })
        + est_list(&c.queues, sw::<cp::queue::Builder>(), |q| tw(&q.name))
}

fn put_cluster_conf(c: &ClusterConf, mut x: cp::cluster_conf::Builder<'_>) {
    set_text!(x, set_cluster_name, c.cluster_name);
    x.set_primary_id(c.primary_id);
    x.set_term(c.term);
    let l = x.reborrow().init_controllers(list_len(c.controllers.len()));
    put_list(&c.controllers, l, put_controller_entry);
    put_list(
        &c.queues,
        x.init_queues(list_len(c.queues.len())),
        |q, mut y| {
            set_text!(y, set_name, q.name);
            y.set_open(q.open);
            y.set_active(q.active);
            y.set_priority(q.priority);
        },
    );
}

fn get_cluster_conf(b: &Budget, x: cp::cluster_conf::Reader<'_>) -> Result<ClusterConf, Error> {
    Ok(ClusterConf {
        cluster_name: text(x.get_cluster_name())?,
        controllers: get_controller_entries(b, x.get_controllers())?,
        primary_id: x.get_primary_id(),
        term: x.get_term(),
        queues: get_list(b, x.get_queues(), |y| {
            Ok(Queue {
                name: text(y.get_name())?,
                open: y.get_open(),
                active: y.get_active(),
                priority: y.get_priority(),
            })
        })?,
    })
}

fn est_job_filter(f: &JobFilter) -> usize {
    sw::<cp::job_filter::Builder>() + tw(&f.user) + tw(&f.queue)
}

fn put_job_filter(f: &JobFilter, mut x: cp::job_filter::Builder<'_>) {
    set_text!(x, set_user, f.user);
    set_text!(x, set_queue, f.queue);
    x.set_state_mask(f.state_mask);
    x.set_limit(f.limit);
}

fn get_job_filter(x: cp::job_filter::Reader<'_>) -> Result<JobFilter, Error> {
    Ok(JobFilter {
        user: text(x.get_user())?,
        queue: text(x.get_queue())?,
        state_mask: x.get_state_mask(),
        limit: x.get_limit(),
    })
}

fn put_job_page(p: &JobPage, mut x: cp::job_page::Builder<'_>) {
    x.set_cursor(p.cursor);
    x.set_more(p.more);
    x.set_total(p.total);
    put_list(&p.jobs, x.init_jobs(list_len(p.jobs.len())), put_job);
}

fn get_job_page(b: &Budget, x: cp::job_page::Reader<'_>) -> Result<JobPage, Error> {
    Ok(JobPage {
        jobs: get_list(b, x.get_jobs(), get_job)?,
        cursor: x.get_cursor(),
        more: x.get_more(),
        total: x.get_total(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::frame::OUTPUT_BYTES_PER_FRAME_BYTE;

    /// F22's budget never refuses a legitimate message: each decoded list element is at most
    /// `OUTPUT_BYTES_PER_FRAME_BYTE` times the bytes its struct takes on the wire, so all the
    /// lists together are at most that many times the frame.
    #[test]
    fn every_decoded_list_element_fits_the_output_ratio() {
        fn check<T, W: HasStructSize>(name: &str) {
            let wire = sw::<W>() * 8;
            let rust = std::mem::size_of::<T>();
            assert!(
                rust <= OUTPUT_BYTES_PER_FRAME_BYTE * wire,
                "{name}: {rust} B in Rust for {wire} B on the wire"
            );
        }
        check::<Job, cp::job::Builder>("Job");
        check::<Host, cp::host::Builder>("Host");
        check::<KeyValue, cp::key_value::Builder>("KeyValue");
        check::<Resource, cp::resource::Builder>("Resource");
        check::<ResVal, cp::res_val::Builder>("ResVal");
        check::<ControllerEntry, cp::controller_entry::Builder>("ControllerEntry");
        check::<Queue, cp::queue::Builder>("Queue");
    }

    /// The densest legitimate replies (empty key/values, empty resvals) decode whole; the same
    /// claims without the bytes behind them do not.
    #[test]
    fn dense_legitimate_lists_decode_and_their_hostile_twins_do_not() {
        let l = Limits::default();
        let empty_kvs = vec![KeyValue::default(); 2000];
        let hosts = (0..50)
            .map(|_| Host {
                attrs: empty_kvs.clone(),
                ..Host::default()
            })
            .collect();
        for data in [
            ReplyData::Hosts(hosts),
            ReplyData::ResVals(vec![ResVal::default(); 100_000]),
            ReplyData::Jobs(vec![Job::default(); 10_000]),
            ReplyData::ClusterConf(ClusterConf {
                controllers: vec![ControllerEntry::default(); 10_000],
                queues: vec![Queue::default(); 10_000],
                ..ClusterConf::default()
            }),
            ReplyData::CtrlInfo(ControllerInfo {
                members: vec![ControllerEntry::default(); 10_000],
                ..ControllerInfo::default()
            }),
        ] {
            let rep = Reply::ok(1, data);
            let mut out = Vec::new();
            encode_reply(&rep, &mut out);
            assert_eq!(decode_reply(&out, &l), Ok(rep));
        }
        // A job list of 1,000 zero-size elements: one tag word, no bytes behind the claim.
        let mut out = Vec::new();
        encode_reply(&Reply::ok(1, ReplyData::Jobs(vec![])), &mut out);
        let tag_at = out.len() - 8;
        let tag = u64::from_le_bytes(out[tag_at..].try_into().unwrap());
        assert_eq!(tag & 3, 0, "the empty list's tag is the last word");
        out[tag_at..].copy_from_slice(&(1000u64 << 2).to_le_bytes());
        assert_eq!(decode_reply(&out, &l), Err(Error::Proto));
        // The same with 10 elements stays inside the slack.
        out[tag_at..].copy_from_slice(&(10u64 << 2).to_le_bytes());
        let rep = decode_reply(&out, &l).unwrap();
        assert_eq!(rep.data, ReplyData::Jobs(vec![Job::default(); 10]));
        // F29: the members of a `hello` answer, the same claim: an empty list last, its count
        // raised to 100,000 — refused before anything is allocated for it.
        let mut out = Vec::new();
        encode_with(64, &mut out, |root| {
            let mut b: cp::reply::Builder<'_> = root.init_as();
            b.set_seq(1);
            let info = b.init_data().init_ctrl_info();
            info.init_members(0);
        });
        let tag_at = out.len() - 8;
        let tag = u64::from_le_bytes(out[tag_at..].try_into().unwrap());
        assert_eq!(tag & 3, 0, "the empty members list's tag is the last word");
        out[tag_at..].copy_from_slice(&(100_000u64 << 2).to_le_bytes());
        assert_eq!(decode_reply(&out, &l), Err(Error::Proto));
        out[tag_at..].copy_from_slice(&(10u64 << 2).to_le_bytes());
        match decode_reply(&out, &l).map(|r| r.data) {
            Ok(ReplyData::CtrlInfo(i)) => assert_eq!(i.members.len(), 10),
            other => panic!("{other:?}"),
        }
    }
}
