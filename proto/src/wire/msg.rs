//! Typed Rust messages: one type per op and per reply payload of protocol.md.
//!
//! These are plain owned values. `codec.rs` converts them to and from the Cap'n Proto
//! builders/readers generated from `schema/controller.capnp`; `frame.rs` puts them on a stream.

/// Protocol version sent in `hello` (mirrors the schema's `protocolVersion` constant).
pub const PROTOCOL_VERSION: u32 = 1;

/// Length of the per-context client id carried by every request (F16).
pub const CLIENT_ID_LEN: usize = 16;

/// Longest `authToken` (C13) either end accepts (a token is a few hundred bytes).
pub const MAX_AUTH_TOKEN_LEN: usize = 4096;

/// A client context's identity for exactly-once writes.
pub type ClientId = [u8; CLIENT_ID_LEN];

/// The request envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Echoed by the reply; the client drops any reply whose seq is not the awaited one (F9).
    pub seq: u64,
    pub client_id: ClientId,
    /// Per-context write counter, the same on every re-send of one call; 0 for reads (F16).
    pub request_id: u64,
    /// Fire-and-forget: the controller sends no reply.
    pub no_reply: bool,
    pub op: Op,
    /// C13: a token naming the caller (empty: none), for callers without a client certificate.
    pub auth_token: String,
    /// F28/C16: 0: no forwarding asked. > 0: the client failed to reach the primary itself; a
    /// standby may forward the request to the primary and wait at most this many ms for it.
    pub forward_within_ms: u32,
}

/// The envelope fields of a [`Request`] without its op (see `codec::encode_request_parts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead<'a> {
    pub seq: u64,
    pub client_id: ClientId,
    pub request_id: u64,
    pub no_reply: bool,
    /// C13: the context's token (empty: none).
    pub auth_token: &'a str,
    /// F28: see [`Request::forward_within_ms`].
    pub forward_within_ms: u32,
}

/// How the client's failover loop treats an op (failover.md, "Op categories").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Reply-bearing read: full failover, `is_write = false`.
    Read,
    /// Reply-bearing write: full failover with a stable request id, `is_write = true`.
    Write,
    /// No reply: F12 (reconnect once if known dead, send once).
    FireAndForget,
    /// `waitPrimary`: any node answers; used by the loop itself while in backoff (F18).
    Probe,
}

/// One operation of protocol.md with its parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Hello(Hello),
    Join(Join),
    JobList(JobFilter),
    JobInfo {
        job_id: u64,
    },
    JobSubmit(JobSpec),
    JobDispatch {
        job_id: u64,
        host: String,
    },
    JobCtrl {
        job_id: u64,
        action: JobAction,
    },
    QueueCtrl {
        queue: String,
        action: QueueAction,
    },
    HostCtrl {
        host: String,
        action: HostAction,
    },
    ResList,
    WorkerList,
    ClusterConf,
    ResVal {
        host: String,
    },
    UpdateResvals {
        host: String,
        resvals: Vec<ResVal>,
    },
    UpdateJusage {
        job_id: u64,
        usage: Usage,
    },
    RunTask {
        host: String,
        command: String,
    },
    SetPendReason {
        job_id: u64,
        reason: String,
    },
    ClearReason {
        job_id: u64,
    },
    Notify(Notify),
    Heartbeat {
        host: String,
    },
    Nop,
    /// Answer as soon as a primary other than `exclude_host:exclude_port` is known (F18).
    WaitPrimary {
        timeout_ms: u32,
        /// The primary the client just failed to reach; empty / 0: none excluded.
        exclude_host: String,
        exclude_port: u16,
    },
    /// One page of a listing bound to one snapshot (schema: JobListPage).
    JobListPage(JobListPage),
    /// C17: add controller `id` at these addresses (`HOST:PORT` each): a learner until it
    /// has caught up, then a voter.
    MemberAdd {
        id: u32,
        client_addr: String,
        raft_addr: String,
    },
    /// C17: remove controller `id` from the membership.
    MemberRemove {
        id: u32,
    },
    /// C19: the primary compares its members' state digests now and answers with its
    /// [`ControllerInfo`] (alarms, `checked_index`) afterwards.
    ConsistencyCheck,
    /// C20: one chunk of an online snapshot (schema: SnapshotSave).
    SnapshotSave(SnapshotSave),
    /// C14 on demand (issue 26): hand leadership over to voter `to` (0: the primary's choice);
    /// `from`: the primary the caller saw (0: any).
    LeaderTransfer {
        to: u32,
        from: u32,
    },
}

/// Who may call an op (C13): a set of the identities' roles, one bit each.
pub mod roles {
    /// `admin`: everything.
    pub const ADMIN: u8 = 1;
    /// `scheduler`: dispatch, pending reasons, reads.
    pub const SCHEDULER: u8 = 2;
    /// `worker-<host>`: reports for its own host.
    pub const WORKER: u8 = 4;
    /// `user-<name>`: submits as itself, controls its own jobs, reads.
    pub const USER: u8 = 8;
    /// A connection with no identity (no certificate, no token) on a cluster that checks.
    pub const ANONYMOUS: u8 = 16;
    /// Every identity.
    pub const IDENTIFIED: u8 = ADMIN | SCHEDULER | WORKER | USER;
    /// Everyone, identified or not.
    pub const ANYONE: u8 = IDENTIFIED | ANONYMOUS;
}

/// What ties an identity to the op's parameters, beyond its role (C13). Admin is never bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bound {
    /// The role is enough.
    No,
    /// A user submits only as itself (`JobSpec.user` is its name).
    SubmitAsSelf,
    /// A user controls only its own jobs.
    OwnJob,
    /// A worker reports only for its own host (the op names it).
    OwnHost,
    /// A worker reports only for jobs on its own host.
    JobOnOwnHost,
    /// `join`: a worker joins only as the worker of its host, a scheduler only as a scheduler,
    /// a user only as a client or API server.
    JoinAsSelf,
}

/// The one declaration of an op (C13): its name, its category for the failover loop, who may
/// call it, what binds the caller to its parameters, and the session it needs. The library's
/// loop ([`Op::kind`]) and the controller's dispatch and authorization all read this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpRule {
    /// As in protocol.md (logs, error reports).
    pub name: &'static str,
    pub kind: OpKind,
    /// Bits of [`roles`].
    pub roles: u8,
    pub bound: Bound,
    /// The session role the connection must have joined as (protocol.md "Sessions").
    pub session: Option<SessionRole>,
}

impl Op {
    /// The op's rule: each op is declared exactly once, here.
    pub fn rule(&self) -> &'static OpRule {
        use roles::*;
        use Bound::*;
        use Op::*;
        use OpKind::{FireAndForget as Ff, Probe, Read as R, Write as W};
        use SessionRole as S;
        macro_rules! rule {
            ($name:literal, $kind:expr, $roles:expr, $bound:expr, $session:expr) => {
                &OpRule {
                    name: $name,
                    kind: $kind,
                    roles: $roles,
                    bound: $bound,
                    session: $session,
                }
            };
        }
        #[rustfmt::skip]
        let r = match self {
            //                             name            kind   who may call it           bound         session
            Hello(_) =>             rule!("hello",           R,  ANYONE,                    No,           None),
            Join(_) =>              rule!("join",            W,  IDENTIFIED,                JoinAsSelf,   None),
            JobList(_) =>           rule!("joblist",         R,  IDENTIFIED,                No,           None),
            JobInfo { .. } =>       rule!("jobinfo",         R,  IDENTIFIED,                No,           None),
            JobSubmit(_) =>         rule!("jobsubmit",       W,  ADMIN | USER,              SubmitAsSelf, None),
            JobDispatch { .. } =>   rule!("jobdispatch",     W,  ADMIN | SCHEDULER,         No,           Some(S::Scheduler)),
            JobCtrl { .. } =>       rule!("jobctrl",         W,  ADMIN | USER,              OwnJob,       None),
            QueueCtrl { .. } =>     rule!("queuectrl",       W,  ADMIN,                     No,           None),
            HostCtrl { .. } =>      rule!("hostctrl",        W,  ADMIN,                     No,           None),
            ResList =>              rule!("reslist",         R,  IDENTIFIED,                No,           None),
            WorkerList =>           rule!("workerlist",      R,  IDENTIFIED,                No,           None),
            ClusterConf =>          rule!("clusterconf",     R,  IDENTIFIED,                No,           None),
            ResVal { .. } =>        rule!("resval",          R,  IDENTIFIED,                No,           None),
            UpdateResvals { .. } => rule!("update_resvals",  W,  ADMIN | WORKER,            OwnHost,      Some(S::Worker)),
            UpdateJusage { .. } =>  rule!("update_jusage",   W,  ADMIN | WORKER,            JobOnOwnHost, Some(S::Worker)),
            RunTask { .. } =>       rule!("runtask",         W,  ADMIN,                     No,           None),
            SetPendReason { .. } => rule!("set_pend_reason", W,  ADMIN | SCHEDULER,         No,           Some(S::Scheduler)),
            ClearReason { .. } =>   rule!("clear_reason",    W,  ADMIN | SCHEDULER,         No,           Some(S::Scheduler)),
            Notify(_) =>            rule!("notify",          Ff, ADMIN | WORKER,            JobOnOwnHost, Some(S::Worker)),
            Heartbeat { .. } =>     rule!("heartbeat",       Ff, ADMIN | WORKER,            OwnHost,      Some(S::Worker)),
            Nop =>                  rule!("nop",             Ff, ANYONE,                    No,           None),
            WaitPrimary { .. } =>   rule!("waitPrimary",     Probe, ANYONE,                 No,           None),
            JobListPage(_) =>       rule!("joblist_page",    R,  IDENTIFIED,                No,           None),
            MemberAdd { .. } =>     rule!("member_add",      W,  ADMIN,                     No,           None),
            MemberRemove { .. } =>  rule!("member_remove",   W,  ADMIN,                     No,           None),
            ConsistencyCheck =>     rule!("consistency_check", R, IDENTIFIED,               No,           None),
            SnapshotSave(_) =>      rule!("snapshot_save",   R,  ADMIN,                     No,           None),
            LeaderTransfer { .. } => rule!("leader_transfer", W,  ADMIN,                     No,           None),
        };
        r
    }

    /// F22 (amended): whether the op's reply can legitimately outgrow a frame — a listing,
    /// which the caller then narrows or pages. For any other op an oversized frame is a
    /// protocol error on that connection.
    pub fn reply_can_grow(&self) -> bool {
        use Op::*;
        matches!(self, JobList(_) | JobListPage(_) | WorkerList | ResList)
    }

    /// The op's category (read, write, fire-and-forget, probe), from [`Op::rule`].
    pub fn kind(&self) -> OpKind {
        self.rule().kind
    }

    /// The op's name as in protocol.md (for logs and error reports), from [`Op::rule`].
    pub fn name(&self) -> &'static str {
        self.rule().name
    }
}

/// The reply envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub seq: u64,
    /// 0 (or a positive count) on success; a negative errno or `-E_XCE_*` otherwise.
    pub status: i32,
    /// REDIRECT / STANDBY: the primary's client address when known (empty host / port 0: none).
    pub redirect_host: String,
    pub redirect_port: u16,
    pub data: ReplyData,
    /// F29: the membership version of the serving primary that sent a successful reply (0: not
    /// stamped). A change tells a client connected to that primary to ask for the members again.
    pub members_version: u64,
    /// Why, in words, for an operator (a refused admin op, a quota refusal); empty otherwise.
    pub detail: String,
}

impl Reply {
    /// A reply carrying only a status.
    pub fn status(seq: u64, status: i32) -> Reply {
        Reply {
            seq,
            status,
            redirect_host: String::new(),
            redirect_port: 0,
            data: ReplyData::None,
            members_version: 0,
            detail: String::new(),
        }
    }

    /// A successful reply with data.
    pub fn ok(seq: u64, data: ReplyData) -> Reply {
        Reply {
            data,
            ..Reply::status(seq, 0)
        }
    }

    /// The redirect hint, if the reply names a usable address (non-empty host, port > 0).
    pub fn redirect(&self) -> Option<(&str, u16)> {
        (!self.redirect_host.is_empty() && self.redirect_port != 0)
            .then_some((self.redirect_host.as_str(), self.redirect_port))
    }
}

/// The reply payload.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum ReplyData {
    #[default]
    None,
    CtrlInfo(ControllerInfo),
    Jobs(Vec<Job>),
    Job(Job),
    JobId(u64),
    Hosts(Vec<Host>),
    Resources(Vec<Resource>),
    ResVals(Vec<ResVal>),
    ClusterConf(ClusterConf),
    TaskId(u64),
    SessionId(u64),
    JobPage(JobPage),
    SnapshotChunk(SnapshotChunk),
}

// ---------------------------------------------------------------------------------------
// Op parameters

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hello {
    pub client_name: String,
    pub protocol_version: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionRole {
    Worker,
    Scheduler,
    ApiServer,
    Client,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Join {
    pub role: SessionRole,
    pub host: String,
    pub ncpus: u32,
    pub mem_mb: u64,
    pub attrs: Vec<KeyValue>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobFilter {
    /// Empty: any user.
    pub user: String,
    /// Empty: any queue.
    pub queue: String,
    /// Bit `1 << (JobState as u32)`; 0: any state.
    pub state_mask: u32,
    /// 0: no limit.
    pub limit: u32,
}

/// A request for one page of a snapshot-bound listing (schema: JobListPage).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobListPage {
    /// Its `limit`: how many more jobs are wanted (0: all).
    pub filter: JobFilter,
    /// 0: pin a new snapshot; else the cursor a previous page returned.
    pub cursor: u64,
    /// With a cursor: resume after this job id.
    pub after: u64,
    /// Largest frame the client accepts (0: the protocol default).
    pub max_bytes: u32,
}

/// One page of a snapshot-bound listing (schema: JobPage).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobPage {
    pub jobs: Vec<Job>,
    /// Send back for the next page; 0 on the last page.
    pub cursor: u64,
    pub more: bool,
    /// Jobs in the pinned snapshot, before filtering.
    pub total: u64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobSpec {
    /// Generated by the submitting client, never reused.
    pub job_id: u64,
    pub name: String,
    pub user: String,
    /// Empty: "normal".
    pub queue: String,
    pub command: String,
    pub ncpus: u32,
    pub mem_mb: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobAction {
    Kill,
    Suspend,
    Resume,
    Requeue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueAction {
    Open,
    Close,
    Activate,
    Inactivate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostAction {
    Open,
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotifyKind {
    JobStart,
    JobFinish,
    JobFail,
    JobStop,
    JobChkpt,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Notify {
    pub kind: NotifyKind,
    pub job_id: u64,
    pub exit_code: i32,
}

// ---------------------------------------------------------------------------------------
// Domain model

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyValue {
    pub key: String,
    pub value: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum JobState {
    #[default]
    Pend,
    Run,
    Susp,
    Done,
    Exit,
}

impl JobState {
    /// The bit of this state in `JobFilter::state_mask`.
    pub fn mask_bit(self) -> u32 {
        1 << (self as u32)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub cpu_ms: u64,
    pub mem_kb: u64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Job {
    pub job_id: u64,
    pub name: String,
    pub user: String,
    pub queue: String,
    pub command: String,
    pub ncpus: u32,
    pub mem_mb: u64,
    pub state: JobState,
    pub pend_reason: String,
    pub exec_host: String,
    /// Unix ms; 0 = not yet.
    pub submit_time: i64,
    pub start_time: i64,
    pub end_time: i64,
    pub exit_code: i32,
    pub usage: Usage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HostState {
    #[default]
    Ok,
    Closed,
    Unavail,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Host {
    pub name: String,
    pub state: HostState,
    pub ncpus: u32,
    pub mem_mb: u64,
    pub attrs: Vec<KeyValue>,
    pub njobs: u32,
    /// Unix ms.
    pub last_heartbeat: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Queue {
    pub name: String,
    /// OPEN / CLOSED: accepts submissions.
    pub open: bool,
    /// ACTIVE / INACTIVE: jobs may be dispatched.
    pub active: bool,
    pub priority: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resource {
    pub name: String,
    /// "numeric", "string", "boolean".
    pub kind: String,
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResVal {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ControllerRole {
    Primary,
    Standby,
    Candidate,
    #[default]
    Initializing,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ControllerInfo {
    pub id: u32,
    pub role: ControllerRole,
    pub term: u64,
    /// 0: none known.
    pub primary_id: u32,
    pub primary_host: String,
    pub primary_port: u16,
    pub version: String,
    pub protocol_version: u32,
    /// `waitPrimary` answers: how many clients were waiting on this node (herd spread, F18).
    pub waiters: u32,
    /// Progress, in an immediate `waitPrimary` answer (timeout 0) only: last log index,
    /// committed and applied index, ms since the last contact with the leader or a quorum
    /// (-1: none known). Read by `xce-controller status`.
    pub last_log_index: u64,
    pub committed_index: u64,
    pub applied_index: u64,
    pub last_contact_ms: i64,
    /// F29: the cluster's current members, filled only by the serving primary about itself;
    /// empty from a standby, a candidate or an older controller.
    pub members: Vec<ControllerEntry>,
    /// C20: the id of the cluster the node belongs to (all zero: none yet, or an older
    /// controller). Members of one cluster report the same.
    pub cluster_id: [u8; 16],
    /// C19/C21: what is wrong on (or, from the primary, with) the cluster, one short text
    /// each; empty: nothing known.
    pub alarms: Vec<String>,
    /// C19: the last log index at which the primary found its members' state digests equal
    /// (0: none yet, or not from the primary).
    pub checked_index: u64,
    /// C18 (amended): ms since the node's process started, in an immediate `waitPrimary`
    /// answer (0: not said).
    pub uptime_ms: u64,
    /// C24: bytes on disk of every file in the node's data directory, in an immediate
    /// `waitPrimary` answer (0: not said).
    pub db_size_bytes: u64,
    /// C24: free bytes of the data directory's filesystem (for the node's user), as above.
    pub disk_free_bytes: u64,
    /// C24: the node's quota (`--quota-bytes`), as above.
    pub quota_bytes: u64,
}

/// C20: a request for one chunk of an online snapshot (`cursor` 0: start one).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotSave {
    pub cursor: u64,
    /// With a cursor: the next byte wanted.
    pub offset: u64,
    /// Most bytes of data wanted (0: the controller's choice).
    pub max_bytes: u32,
}

/// C20: one chunk of an online snapshot's file, with what it is a snapshot of.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotChunk {
    pub cursor: u64,
    /// Where `data` starts in the file.
    pub offset: u64,
    pub data: Vec<u8>,
    pub total_bytes: u64,
    /// The log index (and its term) the state is as of.
    pub index: u64,
    pub term: u64,
    /// SHA-256 of the state at `index` (32 bytes; C19).
    pub digest: Vec<u8>,
    pub cluster_id: [u8; 16],
    /// Members whose state digest at `index` equals `digest` (the primary included), of
    /// `voters`.
    pub agreeing: u32,
    pub voters: u32,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ControllerEntry {
    pub id: u32,
    pub host: String,
    pub port: u16,
    pub role: ControllerRole,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterConf {
    pub cluster_name: String,
    pub controllers: Vec<ControllerEntry>,
    pub primary_id: u32,
    pub term: u64,
    pub queues: Vec<Queue>,
}
