//! The replicated job store: a pure, deterministic state machine (C4, C5).
//!
//! Every change is a [`Proposal`] that went through the Raft log; the leader stamps the time
//! into it before proposing, so every node computes the same state from the same log.
//! Reads ([`State`] queries) are answered from the applied state after a read-index check.
//!
//! Memory (P12): the job table is a persistent B-tree ([`imbl::OrdMap`]), so a snapshot of it
//! — for a paged listing or a Raft snapshot — is an O(1) clone that later writes copy on
//! write, never a copy of the table. A stored job is compact: numbers inline, the texts that
//! repeat across jobs (user, queue, host, pending reason) interned and shared, the others
//! (name, command) one exact-size allocation each.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use xce_proto::error::{E_XCE_CORRUPT, E_XCE_DUP_JOB};

/// Request ids remembered per client for exactly-once writes (C4).
pub const DEDUP_PER_CLIENT: usize = 256;
/// How long a client's exactly-once window is kept after its last write (C4, defect 12; C22):
/// until this many more writes have been applied — a log position, the same on every replica
/// and blind to every clock. (It was an hour by the leader's clock stamped in each proposal: a
/// clock stepping forward, or a new primary whose clock ran ahead, forgot every window at the
/// next sweep, and a re-send of a write whose outcome was unknown applied twice.) A call
/// re-sends only within its retry budget (about 53 s by default, F7), and a re-send after an
/// unknown outcome or from the notify outbox (F12) comes on the next reconnect; 2^24 writes
/// last 7.5 minutes at the highest rate measured (P11, ~37,000 writes/s at 256 contexts), 8
/// times the longest budget, and days at ordinary rates. A count of clients does not decide
/// below [`DEDUP_CLIENTS_MAX`]: 4,096 clients were forgotten within seconds under a few
/// thousand short-lived contexts, and a slow re-send applied twice.
pub const DEDUP_RETAIN_WRITES: u64 = 1 << 24;
/// Expired windows are swept every this many applied writes (deterministic on every replica).
pub const DEDUP_SWEEP_EVERY: u64 = 4096;
/// Memory guard: most clients remembered however recent; beyond it the least recently used
/// go first (logged: a re-send from one of them could apply twice). At ~100 bytes per idle
/// client this is ~100 MB.
pub const DEDUP_CLIENTS_MAX: usize = 1 << 20;
/// Tasks started by `runtask` kept for inspection.
pub const TASKS_KEPT: usize = 1024;
/// Name of the queue a fresh cluster has.
pub const DEFAULT_QUEUE: &str = "normal";
/// Exit code of a killed job (128 + SIGKILL), as a shell reports it.
pub const KILLED_EXIT_CODE: i32 = 137;

/// One replicated write: who sent it (for exactly-once), when the leader took it, what it does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Proposal {
    pub client_id: [u8; 16],
    /// 0: not deduplicated.
    pub request_id: u64,
    /// Unix ms on the leader when proposed.
    pub now_ms: i64,
    pub cmd: Cmd,
}

impl Proposal {
    /// Rough size of the proposal in a log entry (its texts plus a fixed part).
    pub fn size_hint(&self) -> usize {
        let texts = match &self.cmd {
            Cmd::JobSubmit(s) => s.name.len() + s.user.len() + s.queue.len() + s.command.len(),
            Cmd::Join { host, attrs, .. } => {
                host.len() + attrs.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
            }
            Cmd::UpdateResvals { host, resvals } => {
                host.len()
                    + resvals
                        .iter()
                        .map(|(k, v)| k.len() + v.len())
                        .sum::<usize>()
            }
            Cmd::RunTask { host, command } => host.len() + command.len(),
            Cmd::SetPendReason { reason, .. } => reason.len(),
            Cmd::JobDispatch { host, .. } | Cmd::HostCtrl { host, .. } => host.len(),
            Cmd::Heartbeat { host } => host.len(),
            Cmd::QueueCtrl { queue, .. } => queue.len(),
            _ => 0,
        };
        160 + texts
    }
}

/// Session roles as stored (the client port maps the wire's session roles onto them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    Worker,
    Scheduler,
    ApiServer,
    Client,
}

/// A state change. Parameters mirror the ops of protocol.md.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Cmd {
    Join {
        role: Role,
        host: String,
        ncpus: u32,
        mem_mb: u64,
        attrs: Vec<(String, String)>,
    },
    JobSubmit(SubmitSpec),
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
        open: bool,
    },
    UpdateResvals {
        host: String,
        resvals: Vec<(String, String)>,
    },
    UpdateJusage {
        job_id: u64,
        cpu_ms: u64,
        mem_kb: u64,
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
    Notify {
        kind: NotifyKind,
        job_id: u64,
        exit_code: i32,
    },
    Heartbeat {
        host: String,
    },
    /// C14: the leader hands leadership to node `to` (no change of state; the node that
    /// applies it live and is `to` campaigns, see `raft/handover.rs`).
    Handover {
        to: u64,
    },
    /// C17: a membership removal about to be proposed to Raft. No change of state: recorded
    /// in the exactly-once table under the request's ids, so a re-send of a removal that did
    /// commit is told apart from a removal of a node that never was a member.
    MemberRemoval {
        id: u64,
    },
    /// C20: the cluster's id, proposed by a primary that finds none in the state (a new
    /// cluster, or one whose data an earlier build wrote). The first one applied is the
    /// cluster's for good; later ones change nothing.
    ClusterId {
        id: [u8; 16],
        epoch: u32,
    },
    /// C19 (fifth round): the primary's check found members' states differing where no log
    /// id can tell which is the history: the CORRUPT alarm, on every member; client writes are
    /// refused ([`E_XCE_CORRUPT`]) until a check finds every member agreeing again.
    Corrupt {
        index: u64,
        why: String,
    },
    /// C19 (fifth round): a check after the repair found every member agreeing at `index`.
    Repaired {
        index: u64,
    },
}

impl Cmd {
    /// Whether this is a client's change of the job table (refused under the CORRUPT alarm),
    /// rather than the cluster's own bookkeeping (handover, removal, id, alarm).
    fn is_clients(&self) -> bool {
        !matches!(
            self,
            Cmd::Handover { .. }
                | Cmd::MemberRemoval { .. }
                | Cmd::ClusterId { .. }
                | Cmd::Corrupt { .. }
                | Cmd::Repaired { .. }
        )
    }
}

/// C19 (fifth round): the CORRUPT alarm, part of the replicated state: raised at a checkpoint
/// `index`, with the check's words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorruptAlarm {
    pub index: u64,
    pub why: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobAction {
    Kill,
    Suspend,
    Resume,
    Requeue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueueAction {
    Open,
    Close,
    Activate,
    Inactivate,
}

/// Names as in protocol.md (JOBSTART, …).
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NotifyKind {
    JobStart,
    JobFinish,
    JobFail,
    JobStop,
    JobChkpt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    Pend,
    Run,
    Susp,
    Done,
    Exit,
}

impl JobState {
    /// This state's bit in [`JobFilter::states`].
    pub fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// What a listing asks for (the client port maps the wire's filter onto it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobFilter {
    /// Empty: any user.
    pub user: String,
    /// Empty: any queue.
    pub queue: String,
    /// The states listed, by [`JobState::bit`]; 0: any state ([`JobFilter::NO_STATE`]: a
    /// filter that named only states this build does not know, which match no job).
    pub states: u32,
    /// 0: no limit.
    pub limit: u32,
}

impl JobFilter {
    /// A bit no [`JobState`] has.
    pub const NO_STATE: u32 = 1 << 31;
}

/// A host as a listing shows it (C5): a host that is open but silent is unavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Ok,
    Closed,
    Unavail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostState {
    Ok,
    Closed,
}

/// C20: the id of the cluster a state belongs to, and its restore epoch (0: made when the
/// cluster was initialised; n: restored n times from a backup). Part of the replicated state
/// (and so of its digest), which is how every member, and a new member through the log or a
/// snapshot, learns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClusterStamp {
    pub id: [u8; 16],
    pub epoch: u32,
}

/// The result of one write, as remembered for re-sends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub status: i32,
    pub data: OutData,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutData {
    #[default]
    None,
    JobId(u64),
    TaskId(u64),
    SessionId(u64),
}

impl Outcome {
    fn ok() -> Outcome {
        Outcome::default()
    }
    fn err(errno: i32) -> Outcome {
        Outcome {
            status: -errno,
            data: OutData::None,
        }
    }
    fn data(data: OutData) -> Outcome {
        Outcome { status: 0, data }
    }
}

/// A `jobsubmit` as it travels through the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitSpec {
    pub job_id: u64,
    pub name: String,
    pub user: String,
    pub queue: String,
    pub command: String,
    pub ncpus: u32,
    pub mem_mb: u64,
}

/// Text shared by every stored job that has the same value (see [`Interner`]).
pub type Sym = Arc<str>;

/// A stored job: about 170 bytes inline plus its name and command.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRec {
    pub job_id: u64,
    pub mem_mb: u64,
    pub submit_time: i64,
    pub start_time: i64,
    pub end_time: i64,
    pub cpu_ms: u64,
    pub mem_kb: u64,
    pub ncpus: u32,
    pub exit_code: i32,
    pub state: JobState,
    pub user: Sym,
    pub queue: Sym,
    pub exec_host: Sym,
    pub pend_reason: Sym,
    pub name: Box<str>,
    pub command: Box<str>,
}

/// One copy of each distinct user, queue, host and reason text. Entries no stored job uses
/// any more are dropped whenever the set has doubled since the last sweep, so the set stays
/// within twice the live distinct texts.
#[derive(Debug, Clone, Default)]
pub struct Interner {
    set: HashSet<Sym>,
    sweep_at: usize,
}

impl Interner {
    /// Least size before a sweep is considered.
    const MIN_SWEEP: usize = 1024;

    pub fn get(&mut self, s: &str) -> Sym {
        if let Some(x) = self.set.get(s) {
            return x.clone();
        }
        if self.set.len() >= self.sweep_at.max(Self::MIN_SWEEP) {
            // Only this set holds an unused text.
            self.set.retain(|x| Arc::strong_count(x) > 1);
            self.sweep_at = 2 * self.set.len();
        }
        let x: Sym = Arc::from(s);
        self.set.insert(x.clone());
        x
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostRec {
    pub name: String,
    pub state: HostState,
    pub ncpus: u32,
    pub mem_mb: u64,
    pub attrs: Vec<(String, String)>,
    pub njobs: u32,
    pub last_heartbeat: i64,
    pub resvals: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueRec {
    pub open: bool,
    pub active: bool,
    pub priority: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRec {
    pub task_id: u64,
    pub host: String,
    pub command: String,
    pub start_time: i64,
}

/// Exactly-once memory of one client: its recent request ids and their outcomes. (Snapshots of
/// earlier builds also hold a `last_ms`, the leader's clock at the last use: read and ignored.)
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct ClientWindow {
    /// Apply counter at the last use: expiry ([`DEDUP_RETAIN_WRITES`]) and least-recently-used
    /// eviction.
    last_used: u64,
    replies: BTreeMap<u64, Outcome>,
}

/// The whole replicated state. Snapshots write it with `snapshot.rs`: the job table in a
/// compact binary form, everything else (small) as JSON.
#[derive(Debug, Clone)]
pub struct State {
    pub(crate) jobs: imbl::OrdMap<u64, JobRec>,
    pub(crate) strings: Interner,
    hosts: BTreeMap<String, HostRec>,
    queues: BTreeMap<String, QueueRec>,
    tasks: BTreeMap<u64, TaskRec>,
    next_task_id: u64,
    next_session_id: u64,
    /// Counts applied proposals; drives the exactly-once table's eviction order.
    applied: u64,
    /// Keyed by the hex client id (JSON maps need string keys).
    dedup: HashMap<String, ClientWindow>,
    /// C20: the cluster's id (`None`: not recorded yet).
    cluster: Option<ClusterStamp>,
    /// C19 (fifth round): the CORRUPT alarm, while raised.
    corrupt: Option<CorruptAlarm>,
}

/// Everything in [`State`] but the job table: what a snapshot stores as JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Header {
    hosts: BTreeMap<String, HostRec>,
    queues: BTreeMap<String, QueueRec>,
    tasks: BTreeMap<u64, TaskRec>,
    next_task_id: u64,
    next_session_id: u64,
    applied: u64,
    dedup: HashMap<String, ClientWindow>,
    /// Absent in snapshots of earlier builds.
    #[serde(default)]
    cluster: Option<ClusterStamp>,
    /// Absent in snapshots of earlier builds (and when not raised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    corrupt: Option<CorruptAlarm>,
}

impl Default for State {
    fn default() -> State {
        let mut queues = BTreeMap::new();
        queues.insert(
            DEFAULT_QUEUE.to_string(),
            QueueRec {
                open: true,
                active: true,
                priority: 20,
            },
        );
        State {
            jobs: imbl::OrdMap::new(),
            strings: Interner::default(),
            hosts: BTreeMap::new(),
            queues,
            tasks: BTreeMap::new(),
            next_task_id: 1,
            next_session_id: 1,
            applied: 0,
            dedup: HashMap::new(),
            cluster: None,
            corrupt: None,
        }
    }
}

/// The client id as the exactly-once table's key: 32 lowercase hex digits. (On every node's
/// apply path, once per write: no `format!` per byte.)
fn hex(id: &[u8; 16]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(32);
    for b in id {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Resources every controller reports, before the names learnt from workers' resvals.
pub const RESOURCE_CATALOGUE: [(&str, &str, &str); 8] = [
    ("ncpus", "numeric", "number of CPUs"),
    ("maxmem", "numeric", "total memory (MB)"),
    ("mem", "numeric", "free memory (MB)"),
    ("swp", "numeric", "free swap (MB)"),
    ("tmp", "numeric", "free /tmp space (MB)"),
    ("r1m", "numeric", "1-minute run queue length"),
    ("ut", "numeric", "CPU utilisation"),
    ("type", "string", "host type"),
];

impl State {
    /// Everything but the job table (cloned: it is small).
    pub fn header(&self) -> Header {
        Header {
            hosts: self.hosts.clone(),
            queues: self.queues.clone(),
            tasks: self.tasks.clone(),
            next_task_id: self.next_task_id,
            next_session_id: self.next_session_id,
            applied: self.applied,
            dedup: self.dedup.clone(),
            cluster: self.cluster,
            corrupt: self.corrupt.clone(),
        }
    }

    /// A state read back from a snapshot.
    pub fn from_parts(h: Header, jobs: imbl::OrdMap<u64, JobRec>, strings: Interner) -> State {
        State {
            jobs,
            strings,
            hosts: h.hosts,
            queues: h.queues,
            tasks: h.tasks,
            next_task_id: h.next_task_id,
            next_session_id: h.next_session_id,
            applied: h.applied,
            dedup: h.dedup,
            cluster: h.cluster,
            corrupt: h.corrupt,
        }
    }

    /// A copy of this state without its caches (the interner): what a checkpoint keeps to
    /// hash and to save (C19, C20). The job table is shared, the small parts are copied.
    pub fn without_caches(&self) -> State {
        State::from_parts(self.header(), self.jobs.clone(), Interner::default())
    }

    /// C20: the cluster this state belongs to, if recorded.
    pub fn cluster(&self) -> Option<ClusterStamp> {
        self.cluster
    }

    /// C19 (fifth round): the CORRUPT alarm, if raised.
    pub fn corrupt(&self) -> Option<&CorruptAlarm> {
        self.corrupt.as_ref()
    }

    /// C20: `snapshot restore` makes a new cluster of a backup's state.
    pub fn set_cluster(&mut self, c: ClusterStamp) {
        self.cluster = Some(c);
    }

    /// Proposals applied so far (the snapshot trigger's clock).
    pub fn applied_count(&self) -> u64 {
        self.applied
    }

    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// The job table as of now, in O(1): a paged listing reads it while writes go on.
    pub fn jobs_snapshot(&self) -> imbl::OrdMap<u64, JobRec> {
        self.jobs.clone()
    }

    /// Whether request `request_id` of client `client_id` was applied (and is still
    /// remembered by the exactly-once table).
    pub fn seen(&self, client_id: &[u8; 16], request_id: u64) -> bool {
        request_id != 0
            && self
                .dedup
                .get(&hex(client_id))
                .is_some_and(|w| w.replies.contains_key(&request_id))
    }

    /// Apply one committed proposal (C4: a re-sent write returns its first outcome).
    pub fn apply(&mut self, p: &Proposal) -> Outcome {
        self.applied += 1;
        let key = (p.request_id != 0).then(|| hex(&p.client_id));
        if let Some(key) = &key {
            if let Some(w) = self.dedup.get_mut(key) {
                w.last_used = self.applied;
                if let Some(first) = w.replies.get(&p.request_id) {
                    return first.clone();
                }
            }
        }
        // C19 (fifth round): under the CORRUPT alarm a client's write changes nothing, and
        // the refusal is not remembered (a re-send after the repair is a new attempt). A
        // re-send of a write applied before the alarm was answered above, as always.
        if self.corrupt.is_some() && p.cmd.is_clients() {
            return Outcome::err(E_XCE_CORRUPT);
        }
        let out = self.exec(&p.cmd, p.now_ms);
        if let Some(key) = key {
            self.remember(key, p.request_id, out.clone());
        }
        if self.applied.is_multiple_of(DEDUP_SWEEP_EVERY) {
            self.sweep_dedup(DEDUP_RETAIN_WRITES);
        }
        out
    }

    /// Forgets clients whose last write is more than `retain` applied writes back (a log
    /// position: the same on every replica, whatever any clock says).
    fn sweep_dedup(&mut self, retain: u64) {
        let now = self.applied;
        self.dedup
            .retain(|_, w| now.saturating_sub(w.last_used) <= retain);
    }

    fn remember(&mut self, key: String, request_id: u64, out: Outcome) {
        if !self.dedup.contains_key(&key) && self.dedup.len() >= DEDUP_CLIENTS_MAX {
            self.sweep_dedup(DEDUP_RETAIN_WRITES);
        }
        if !self.dedup.contains_key(&key) && self.dedup.len() >= DEDUP_CLIENTS_MAX {
            // Deterministic: the smallest last_used, ties broken by key.
            let victim = self
                .dedup
                .iter()
                .min_by(|a, b| a.1.last_used.cmp(&b.1.last_used).then(a.0.cmp(b.0)))
                .map(|(k, _)| k.clone());
            if let Some(v) = victim {
                // A warning (base/logstamp.rs reads "warning:"): this file imports nothing
                // of the crate.
                eprintln!(
                    "warning: exactly-once table full ({DEDUP_CLIENTS_MAX} clients within the last {DEDUP_RETAIN_WRITES} writes): forgetting client {v}"
                );
                self.dedup.remove(&v);
            }
        }
        let w = self.dedup.entry(key).or_default();
        w.last_used = self.applied;
        w.replies.insert(request_id, out);
        while w.replies.len() > DEDUP_PER_CLIENT {
            w.replies.pop_first();
        }
    }

    /// One command applied: one call per kind (each below, in the order of `Cmd`).
    fn exec(&mut self, cmd: &Cmd, now: i64) -> Outcome {
        match cmd {
            Cmd::Join {
                role,
                host,
                ncpus,
                mem_mb,
                attrs,
            } => self.join(*role, host, *ncpus, *mem_mb, attrs, now),
            Cmd::JobSubmit(spec) => self.job_submit(spec, now),
            Cmd::JobDispatch { job_id, host } => self.job_dispatch(*job_id, host, now),
            Cmd::JobCtrl { job_id, action } => self.job_ctrl(*job_id, *action, now),
            Cmd::QueueCtrl { queue, action } => self.queue_ctrl(queue, *action),
            Cmd::HostCtrl { host, open } => self.host_ctrl(host, *open),
            Cmd::UpdateResvals { host, resvals } => self.update_resvals(host, resvals),
            Cmd::UpdateJusage {
                job_id,
                cpu_ms,
                mem_kb,
            } => self.update_jusage(*job_id, *cpu_ms, *mem_kb),
            Cmd::RunTask { host, command } => self.run_task(host, command, now),
            Cmd::SetPendReason { job_id, reason } => self.set_pend_reason(*job_id, reason),
            Cmd::ClearReason { job_id } => self.set_pend_reason_any(*job_id, ""),
            Cmd::Notify {
                kind,
                job_id,
                exit_code,
            } => self.notify(*kind, *job_id, *exit_code, now),
            Cmd::Heartbeat { host } => self.heartbeat(host, now),
            Cmd::Handover { .. } | Cmd::MemberRemoval { .. } => Outcome::ok(),
            Cmd::ClusterId { id, epoch } => self.cluster_id(*id, *epoch),
            Cmd::Corrupt { index, why } => {
                if self.corrupt.is_none() {
                    self.corrupt = Some(CorruptAlarm {
                        index: *index,
                        why: why.clone(),
                    });
                }
                Outcome::ok()
            }
            Cmd::Repaired { .. } => {
                self.corrupt = None;
                Outcome::ok()
            }
        }
    }

    /// A session opens; a worker's host is registered or its resources refreshed.
    fn join(
        &mut self,
        role: Role,
        host: &str,
        ncpus: u32,
        mem_mb: u64,
        attrs: &[(String, String)],
        now: i64,
    ) -> Outcome {
        if role == Role::Worker {
            if host.is_empty() {
                return Outcome::err(libc::EINVAL);
            }
            let h = self
                .hosts
                .entry(host.to_string())
                .or_insert_with(|| HostRec {
                    name: host.to_string(),
                    state: HostState::Ok,
                    ncpus: 0,
                    mem_mb: 0,
                    attrs: Vec::new(),
                    njobs: 0,
                    last_heartbeat: now,
                    resvals: BTreeMap::new(),
                });
            h.ncpus = ncpus;
            h.mem_mb = mem_mb;
            h.attrs = attrs.to_vec();
            h.last_heartbeat = now;
        }
        let sid = self.next_session_id;
        self.next_session_id += 1;
        Outcome::data(OutData::SessionId(sid))
    }

    /// A new job, pending in its queue (the default queue when none is named).
    fn job_submit(&mut self, spec: &SubmitSpec, now: i64) -> Outcome {
        if spec.job_id == 0 {
            return Outcome::err(libc::EINVAL);
        }
        if self.jobs.contains_key(&spec.job_id) {
            return Outcome {
                status: -E_XCE_DUP_JOB,
                data: OutData::None,
            };
        }
        let queue = if spec.queue.is_empty() {
            DEFAULT_QUEUE
        } else {
            spec.queue.as_str()
        };
        match self.queues.get(queue) {
            None => return Outcome::err(libc::ENOENT),
            // A closed queue refuses submissions.
            Some(q) if !q.open => return Outcome::err(libc::EACCES),
            Some(_) => {}
        }
        let job = JobRec {
            job_id: spec.job_id,
            mem_mb: spec.mem_mb,
            submit_time: now,
            start_time: 0,
            end_time: 0,
            cpu_ms: 0,
            mem_kb: 0,
            ncpus: spec.ncpus,
            exit_code: 0,
            state: JobState::Pend,
            user: self.strings.get(&spec.user),
            queue: self.strings.get(queue),
            exec_host: self.strings.get(""),
            pend_reason: self.strings.get(""),
            name: spec.name.as_str().into(),
            command: spec.command.as_str().into(),
        };
        self.jobs.insert(job.job_id, job);
        Outcome::data(OutData::JobId(spec.job_id))
    }

    /// A pending job starts on an open host, from an active queue.
    fn job_dispatch(&mut self, job_id: u64, host: &str, now: i64) -> Outcome {
        let Some(job) = self.jobs.get(&job_id) else {
            return Outcome::err(libc::ENOENT);
        };
        let Some(h) = self.hosts.get(host) else {
            return Outcome::err(libc::ENOENT);
        };
        if job.state != JobState::Pend || h.state != HostState::Ok {
            return Outcome::err(libc::EINVAL);
        }
        if !self
            .queues
            .get(job.queue.as_ref())
            .is_some_and(|q| q.active)
        {
            return Outcome::err(libc::EINVAL);
        }
        let (host_sym, empty) = (self.strings.get(host), self.strings.get(""));
        let job = self.jobs.get_mut(&job_id).expect("checked");
        job.state = JobState::Run;
        job.exec_host = host_sym;
        job.start_time = now;
        job.pend_reason = empty;
        self.hosts.get_mut(host).expect("checked").njobs += 1;
        Outcome::ok()
    }

    fn queue_ctrl(&mut self, queue: &str, action: QueueAction) -> Outcome {
        let Some(q) = self.queues.get_mut(queue) else {
            return Outcome::err(libc::ENOENT);
        };
        match action {
            QueueAction::Open => q.open = true,
            QueueAction::Close => q.open = false,
            QueueAction::Activate => q.active = true,
            QueueAction::Inactivate => q.active = false,
        }
        Outcome::ok()
    }

    fn host_ctrl(&mut self, host: &str, open: bool) -> Outcome {
        let Some(h) = self.hosts.get_mut(host) else {
            return Outcome::err(libc::ENOENT);
        };
        h.state = if open {
            HostState::Ok
        } else {
            HostState::Closed
        };
        Outcome::ok()
    }

    fn update_resvals(&mut self, host: &str, resvals: &[(String, String)]) -> Outcome {
        let Some(h) = self.hosts.get_mut(host) else {
            return Outcome::err(libc::ENOENT);
        };
        for (k, v) in resvals {
            h.resvals.insert(k.clone(), v.clone());
        }
        Outcome::ok()
    }

    fn update_jusage(&mut self, job_id: u64, cpu_ms: u64, mem_kb: u64) -> Outcome {
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Outcome::err(libc::ENOENT);
        };
        job.cpu_ms = cpu_ms;
        job.mem_kb = mem_kb;
        Outcome::ok()
    }

    /// A task on a known host; the newest `TASKS_KEPT` are kept.
    fn run_task(&mut self, host: &str, command: &str, now: i64) -> Outcome {
        if !self.hosts.contains_key(host) {
            return Outcome::err(libc::ENOENT);
        }
        let id = self.next_task_id;
        self.next_task_id += 1;
        self.tasks.insert(
            id,
            TaskRec {
                task_id: id,
                host: host.to_string(),
                command: command.to_string(),
                start_time: now,
            },
        );
        while self.tasks.len() > TASKS_KEPT {
            self.tasks.pop_first();
        }
        Outcome::data(OutData::TaskId(id))
    }

    /// A pending job's reason (only while it pends).
    fn set_pend_reason(&mut self, job_id: u64, reason: &str) -> Outcome {
        let reason = self.strings.get(reason);
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Outcome::err(libc::ENOENT);
        };
        if job.state != JobState::Pend {
            return Outcome::err(libc::EINVAL);
        }
        job.pend_reason = reason;
        Outcome::ok()
    }

    /// A job's reason set whatever its state (`ClearReason`: the empty one).
    fn set_pend_reason_any(&mut self, job_id: u64, reason: &str) -> Outcome {
        let reason = self.strings.get(reason);
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Outcome::err(libc::ENOENT);
        };
        job.pend_reason = reason;
        Outcome::ok()
    }

    fn heartbeat(&mut self, host: &str, now: i64) -> Outcome {
        let Some(h) = self.hosts.get_mut(host) else {
            return Outcome::err(libc::ENOENT);
        };
        h.last_heartbeat = now;
        Outcome::ok()
    }

    /// C20: the cluster's id; the first one applied wins.
    fn cluster_id(&mut self, id: [u8; 16], epoch: u32) -> Outcome {
        if self.cluster.is_none() {
            self.cluster = Some(ClusterStamp { id, epoch });
        }
        Outcome::ok()
    }

    /// The job leaves its host (finished, killed, requeued).
    fn release_host(&mut self, host: &str) {
        if let Some(h) = self.hosts.get_mut(host) {
            h.njobs = h.njobs.saturating_sub(1);
        }
    }

    fn job_ctrl(&mut self, job_id: u64, action: JobAction, now: i64) -> Outcome {
        let empty = self.strings.get("");
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Outcome::err(libc::ENOENT);
        };
        let on_host =
            matches!(job.state, JobState::Run | JobState::Susp) && !job.exec_host.is_empty();
        let host = job.exec_host.clone();
        match (action, job.state) {
            (JobAction::Kill, JobState::Pend | JobState::Run | JobState::Susp) => {
                job.state = JobState::Exit;
                job.exit_code = KILLED_EXIT_CODE;
                job.end_time = now;
                if on_host {
                    self.release_host(&host);
                }
            }
            (JobAction::Suspend, JobState::Pend | JobState::Run) => job.state = JobState::Susp,
            // A suspended job goes back to where it was: running if it has a host.
            (JobAction::Resume, JobState::Susp) => {
                job.state = if job.exec_host.is_empty() {
                    JobState::Pend
                } else {
                    JobState::Run
                };
            }
            (
                JobAction::Requeue,
                JobState::Run | JobState::Susp | JobState::Done | JobState::Exit,
            ) => {
                job.state = JobState::Pend;
                job.exec_host = empty;
                job.start_time = 0;
                job.end_time = 0;
                job.exit_code = 0;
                if on_host {
                    self.release_host(&host);
                }
            }
            _ => return Outcome::err(libc::EINVAL),
        }
        Outcome::ok()
    }

    fn notify(&mut self, kind: NotifyKind, job_id: u64, exit_code: i32, now: i64) -> Outcome {
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Outcome::err(libc::ENOENT);
        };
        let host = job.exec_host.clone();
        match kind {
            NotifyKind::JobStart => {
                if job.state != JobState::Run {
                    return Outcome::err(libc::EINVAL);
                }
                job.start_time = now;
            }
            NotifyKind::JobFinish | NotifyKind::JobFail => {
                if !matches!(job.state, JobState::Run | JobState::Susp) {
                    return Outcome::err(libc::EINVAL);
                }
                job.state = if kind == NotifyKind::JobFinish {
                    JobState::Done
                } else {
                    JobState::Exit
                };
                job.exit_code = exit_code;
                job.end_time = now;
                self.release_host(&host);
            }
            NotifyKind::JobStop => {
                if job.state != JobState::Run {
                    return Outcome::err(libc::EINVAL);
                }
                job.state = JobState::Susp;
            }
            NotifyKind::JobChkpt => {
                if !matches!(job.state, JobState::Run | JobState::Susp) {
                    return Outcome::err(libc::EINVAL);
                }
            }
        }
        Outcome::ok()
    }

    // ----------------------------------------------------------------------------------
    // Reads

    pub fn job(&self, job_id: u64) -> Option<&JobRec> {
        self.jobs.get(&job_id)
    }

    /// Every job matching `f` (up to its limit), or `None` as soon as their encoded size would
    /// pass `max_bytes` (the reply would not fit one frame).
    pub fn jobs(&self, f: &JobFilter, max_bytes: usize) -> Option<Vec<&JobRec>> {
        let limit = if f.limit == 0 {
            usize::MAX
        } else {
            f.limit as usize
        };
        let page = page(&self.jobs, f, None, limit, max_bytes, max_bytes);
        (!page.more || page.jobs.len() == limit).then_some(page.jobs)
    }

    /// Hosts with their effective state: an OK host silent for longer than `host_timeout_ms`
    /// is reported UNAVAIL (C5).
    pub fn hosts(&self, now: i64, host_timeout_ms: i64) -> Vec<(&HostRec, Availability)> {
        self.hosts
            .values()
            .map(|h| {
                let a = match h.state {
                    HostState::Closed => Availability::Closed,
                    HostState::Ok if now - h.last_heartbeat > host_timeout_ms => {
                        Availability::Unavail
                    }
                    HostState::Ok => Availability::Ok,
                };
                (h, a)
            })
            .collect()
    }

    /// The resource values `host` reported, by name.
    pub fn resvals(&self, host: &str) -> Option<&BTreeMap<String, String>> {
        self.hosts.get(host).map(|h| &h.resvals)
    }

    /// The fixed catalogue, then every other resval name a worker has reported: (name, kind,
    /// description).
    pub fn resources(&self) -> Vec<(String, String, String)> {
        let mut out: Vec<(String, String, String)> = RESOURCE_CATALOGUE
            .iter()
            .map(|(n, k, d)| (n.to_string(), k.to_string(), d.to_string()))
            .collect();
        let mut extra: Vec<&String> = self.hosts.values().flat_map(|h| h.resvals.keys()).collect();
        extra.sort();
        extra.dedup();
        for name in extra {
            if !out.iter().any(|r| &r.0 == name) {
                out.push((name.clone(), "string".into(), "reported by workers".into()));
            }
        }
        out
    }

    /// The queues by name.
    pub fn queues(&self) -> &BTreeMap<String, QueueRec> {
        &self.queues
    }
}

/// C19: a state's canonical bytes, for its digest ([`State::canonical`]): fixed-width
/// little-endian numbers, texts as their length then their bytes, collections as their count
/// then their elements in key order. Written in chunks to a sink (the hasher).
struct Canon<'a, F: FnMut(&[u8])> {
    out: &'a mut F,
    buf: Vec<u8>,
}

impl<F: FnMut(&[u8])> Canon<'_, F> {
    /// The hosts, in name order (C19: [`State::canonical`]).
    fn hosts(&mut self, hosts: &BTreeMap<String, HostRec>) {
        self.len(hosts.len());
        for (name, h) in hosts {
            self.text(name);
            self.text(&h.name);
            self.u8(match h.state {
                HostState::Ok => 0,
                HostState::Closed => 1,
            });
            self.u64(u64::from(h.ncpus));
            self.u64(h.mem_mb);
            self.pairs(&h.attrs);
            self.u64(u64::from(h.njobs));
            self.i64(h.last_heartbeat);
            self.len(h.resvals.len());
            for (k, v) in &h.resvals {
                self.text(k);
                self.text(v);
            }
        }
    }

    /// The exactly-once table, clients in key order.
    fn clients(&mut self, dedup: &HashMap<String, ClientWindow>) {
        let mut clients: Vec<(&String, &ClientWindow)> = dedup.iter().collect();
        clients.sort_unstable_by(|a, b| a.0.cmp(b.0));
        self.len(clients.len());
        for (key, w) in clients {
            self.text(key);
            self.u64(w.last_used);
            self.len(w.replies.len());
            for (req, o) in &w.replies {
                self.u64(*req);
                self.i64(i64::from(o.status));
                match o.data {
                    OutData::None => self.u8(0),
                    OutData::JobId(v) => {
                        self.u8(1);
                        self.u64(v)
                    }
                    OutData::TaskId(v) => {
                        self.u8(2);
                        self.u64(v)
                    }
                    OutData::SessionId(v) => {
                        self.u8(3);
                        self.u64(v)
                    }
                }
            }
        }
    }

    /// The job table, in id order.
    fn jobs(&mut self, jobs: &imbl::OrdMap<u64, JobRec>) {
        self.len(jobs.len());
        for j in jobs.values() {
            self.u64(j.job_id);
            self.u64(j.mem_mb);
            self.i64(j.submit_time);
            self.i64(j.start_time);
            self.i64(j.end_time);
            self.u64(j.cpu_ms);
            self.u64(j.mem_kb);
            self.u64(u64::from(j.ncpus));
            self.i64(i64::from(j.exit_code));
            self.u8(match j.state {
                JobState::Pend => 0,
                JobState::Run => 1,
                JobState::Susp => 2,
                JobState::Done => 3,
                JobState::Exit => 4,
            });
            for t in [&j.user, &j.queue, &j.exec_host, &j.pend_reason] {
                self.text(t);
            }
            self.text(&j.name);
            self.text(&j.command);
        }
    }

    const CHUNK: usize = 64 << 10;

    fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= Self::CHUNK {
            (self.out)(&self.buf);
            self.buf.clear();
        }
    }
    fn u64(&mut self, v: u64) {
        self.raw(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.raw(&v.to_le_bytes());
    }
    fn u8(&mut self, v: u8) {
        self.raw(&[v]);
    }
    fn len(&mut self, n: usize) {
        self.u64(n as u64);
    }
    fn text(&mut self, s: &str) {
        self.len(s.len());
        self.raw(s.as_bytes());
    }
    fn pairs(&mut self, kv: &[(String, String)]) {
        self.len(kv.len());
        for (k, v) in kv {
            self.text(k);
            self.text(v);
        }
    }
    fn finish(self) {
        if !self.buf.is_empty() {
            (self.out)(&self.buf);
        }
    }
}

impl State {
    /// C19: feeds `out` this state's canonical bytes: everything the log determines (the
    /// cluster id, the counters, queues, hosts, tasks, the exactly-once table sorted by client,
    /// every job with every field), in a fixed order, and nothing else (not the interner, not
    /// a cache): two replicas that applied the same entries feed the same bytes, and two
    /// states that differ in anything a client can read, or in what a later entry would do,
    /// feed different ones. Meant for a clone taken at an entry (the job table is shared, so
    /// the clone is cheap), hashed off the apply path.
    pub fn canonical(&self, out: &mut impl FnMut(&[u8])) {
        let mut c = Canon {
            out,
            buf: Vec::with_capacity(Canon::<fn(&[u8])>::CHUNK + 1024),
        };
        c.raw(b"xce-state-v1");
        match self.cluster {
            None => c.u8(0),
            Some(k) => {
                c.u8(1);
                c.raw(&k.id);
                c.u64(u64::from(k.epoch));
            }
        }
        // Only while raised: a state without the alarm feeds what an earlier build fed.
        if let Some(a) = &self.corrupt {
            c.raw(b"corrupt");
            c.u64(a.index);
            c.text(&a.why);
        }
        c.u64(self.applied);
        c.u64(self.next_task_id);
        c.u64(self.next_session_id);
        c.len(self.queues.len());
        for (name, q) in &self.queues {
            c.text(name);
            c.u8(u8::from(q.open) | u8::from(q.active) << 1);
            c.i64(i64::from(q.priority));
        }
        c.hosts(&self.hosts);
        c.len(self.tasks.len());
        for t in self.tasks.values() {
            c.u64(t.task_id);
            c.text(&t.host);
            c.text(&t.command);
            c.i64(t.start_time);
        }
        c.clients(&self.dedup);
        c.jobs(&self.jobs);
        c.finish();
    }
}

/// Whether a stored job passes a listing filter (its limit aside).
pub fn matches(j: &JobRec, f: &JobFilter) -> bool {
    (f.user.is_empty() || *j.user == *f.user)
        && (f.queue.is_empty() || *j.queue == *f.queue)
        && (f.states == 0 || f.states & j.state.bit() != 0)
}

/// Upper bound of one job's size in an encoded reply: its struct, its usage, and each text
/// with its NUL and padding (codec.rs lays a job out so).
pub fn job_wire_bytes(j: &JobRec) -> usize {
    const FIXED: usize = 8 * (16 + 2);
    let t = |s: &str| (s.len() + 1).div_ceil(8) * 8;
    FIXED
        + t(&j.name)
        + t(&j.user)
        + t(&j.queue)
        + t(&j.command)
        + t(&j.pend_reason)
        + t(&j.exec_host)
}

/// One page of a listing: the jobs of the table it was cut from.
#[derive(Debug, Default)]
pub struct Page<'a> {
    pub jobs: Vec<&'a JobRec>,
    /// More matching jobs follow the last one returned.
    pub more: bool,
    /// One matching job alone is larger than the budget: it can never be sent.
    pub too_big: bool,
}

/// The matching jobs of `table` with ids above `after`, in id order, until `max_jobs` jobs or
/// `soft` bytes of encoded jobs — or `hard` bytes for the first job, so that a job larger
/// than a preferred page still goes alone in one frame.
pub fn page<'a>(
    table: &'a imbl::OrdMap<u64, JobRec>,
    f: &JobFilter,
    after: Option<u64>,
    max_jobs: usize,
    soft: usize,
    hard: usize,
) -> Page<'a> {
    use std::ops::Bound::{Excluded, Unbounded};
    let lower = after.map_or(Unbounded, Excluded);
    let mut out = Page::default();
    let mut bytes = 0usize;
    for (_, j) in table.range((lower, Unbounded)) {
        if !matches(j, f) {
            continue;
        }
        let size = job_wire_bytes(j);
        let budget = if out.jobs.is_empty() { hard } else { soft };
        if out.jobs.len() >= max_jobs || bytes + size > budget {
            out.too_big = out.jobs.is_empty() && max_jobs > 0;
            out.more = true;
            return out;
        }
        bytes += size;
        out.jobs.push(j);
    }
    out
}

#[cfg(test)]
impl State {
    /// Tests: a table of `n` jobs (ids 10, 20, …; users `even`/`odd`), each command
    /// `command_len` bytes long.
    pub(crate) fn with_test_jobs(n: u64, command_len: usize) -> State {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(req: u64, cmd: Cmd) -> Proposal {
        Proposal {
            client_id: [7; 16],
            request_id: req,
            now_ms: 1000,
            cmd,
        }
    }

    /// Request `req` of client number `client` at leader time `ms`.
    fn from(client: u32, req: u64, ms: i64, cmd: Cmd) -> Proposal {
        let mut id = [0u8; 16];
        id[..4].copy_from_slice(&client.to_be_bytes());
        Proposal {
            client_id: id,
            request_id: req,
            now_ms: ms,
            cmd,
        }
    }

    fn spec(id: u64) -> SubmitSpec {
        SubmitSpec {
            job_id: id,
            name: String::new(),
            user: "u".into(),
            queue: String::new(),
            command: String::new(),
            ncpus: 0,
            mem_mb: 0,
        }
    }

    #[test]
    fn resent_write_returns_first_outcome_and_changes_nothing() {
        let mut s = State::default();
        let first = s.apply(&p(1, Cmd::JobSubmit(spec(42))));
        assert_eq!(first, Outcome::data(OutData::JobId(42)));
        let before = s.jobs.clone();
        assert_eq!(s.apply(&p(1, Cmd::JobSubmit(spec(42)))), first);
        assert_eq!(s.jobs, before);
        // A new request id with the same job id is a genuine duplicate.
        assert_eq!(
            s.apply(&p(2, Cmd::JobSubmit(spec(42)))).status,
            -E_XCE_DUP_JOB
        );
    }

    #[test]
    fn job_life_cycle() {
        let mut s = State::default();
        let join = Cmd::Join {
            role: Role::Worker,
            host: "h1".into(),
            ncpus: 4,
            mem_mb: 1,
            attrs: vec![],
        };
        assert_eq!(s.apply(&p(1, join)).data, OutData::SessionId(1));
        s.apply(&p(2, Cmd::JobSubmit(spec(5))));
        let d = Cmd::JobDispatch {
            job_id: 5,
            host: "h1".into(),
        };
        assert_eq!(s.apply(&p(3, d.clone())).status, 0);
        assert_eq!(s.apply(&p(4, d)).status, -libc::EINVAL);
        assert_eq!(s.hosts["h1"].njobs, 1);
        let fin = Cmd::Notify {
            kind: NotifyKind::JobFinish,
            job_id: 5,
            exit_code: 0,
        };
        assert_eq!(s.apply(&p(5, fin)).status, 0);
        assert_eq!(s.jobs[&5].state, JobState::Done);
        assert_eq!(s.hosts["h1"].njobs, 0);
        let kill = Cmd::JobCtrl {
            job_id: 5,
            action: JobAction::Kill,
        };
        assert_eq!(s.apply(&p(6, kill)).status, -libc::EINVAL);
        let close = Cmd::QueueCtrl {
            queue: "normal".into(),
            action: QueueAction::Close,
        };
        assert_eq!(s.apply(&p(7, close)).status, 0);
        assert_eq!(
            s.apply(&p(8, Cmd::JobSubmit(spec(6)))).status,
            -libc::EACCES
        );
    }

    /// The exactly-once table's key is what earlier builds stored in snapshots (`{:02x}` per
    /// byte): a re-send across an upgrade must find its first reply.
    #[test]
    fn client_keys_are_the_hex_earlier_builds_stored() {
        for b in 0..=255u8 {
            let id = [b; 16];
            let old: String = id.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex(&id), old);
        }
        let id: [u8; 16] = std::array::from_fn(|i| (i * 17) as u8);
        assert_eq!(hex(&id), "00112233445566778899aabbccddeeff");
    }

    #[test]
    fn dedup_table_is_bounded() {
        let mut s = State::default();
        for i in 1..=(DEDUP_PER_CLIENT as u64 + 10) {
            s.apply(&p(i, Cmd::Heartbeat { host: "x".into() }));
        }
        assert_eq!(s.dedup.len(), 1);
        assert_eq!(
            s.dedup.values().next().unwrap().replies.len(),
            DEDUP_PER_CLIENT
        );
    }

    /// Defect 12: a slow re-send still finds its first reply while thousands of other clients
    /// write meanwhile (the table was 4,096 clients, least recently used forgotten), and a
    /// window is forgotten only once enough writes were applied after its last use (C22: by
    /// log position; the sweep is checked with a small retention, the real one is 2^24).
    #[test]
    fn slow_resend_within_retention_applies_once() {
        let mut s = State::default();
        let at = |client, req, cmd| from(client, req, 1_000_000, cmd);
        let first = s.apply(&at(1, 1, Cmd::JobSubmit(spec(42))));
        assert_eq!(first, Outcome::data(OutData::JobId(42)));
        // 10,000 other clients write meanwhile.
        for c in 0..10_000u32 {
            s.apply(&at(1000 + c, 1, Cmd::Heartbeat { host: "h".into() }));
        }
        // The re-send of client 1's write: its first reply, not a second execution (which
        // would be E_XCE_DUP_JOB).
        assert_eq!(s.apply(&at(1, 1, Cmd::JobSubmit(spec(42)))), first);
        let key1 = hex(&at(1, 0, Cmd::ClearReason { job_id: 0 }).client_id);
        // Within the retention (counted from that re-send: a use), the sweep keeps it.
        for i in 0..100 {
            s.apply(&at(2, 1 + i, Cmd::Heartbeat { host: "h".into() }));
        }
        s.sweep_dedup(100);
        assert!(s.dedup.contains_key(&key1), "100 writes after its last use");
        // One write more and it is past the retention: forgotten, as are the 10,000 clients;
        // client 2, active lately, stays.
        s.apply(&at(2, 101, Cmd::Heartbeat { host: "h".into() }));
        s.sweep_dedup(100);
        assert!(
            !s.dedup.contains_key(&key1),
            "101 writes after its last use"
        );
        assert_eq!(s.dedup.len(), 1, "only the client active lately");
    }

    /// C22 (issue 25, defect 3): a window never expires by a clock. The leader's clock stepping
    /// forward by hours, or a new primary whose clock is a day ahead, forgets no client: a
    /// re-send of a write whose outcome was unknown still returns its first reply.
    #[test]
    fn a_clock_step_forgets_no_window() {
        let mut s = State::default();
        let at = from;
        let t0 = 1_000_000;
        let first = s.apply(&at(1, 1, t0, Cmd::JobSubmit(spec(42))));
        assert_eq!(first, Outcome::data(OutData::JobId(42)));
        // The clock steps forward (an hour, a day, a year) across several sweeps.
        let steps = [3_600_000, 86_400_000, 365 * 86_400_000];
        for (n, step) in steps.into_iter().enumerate() {
            for i in 0..DEDUP_SWEEP_EVERY {
                let req = n as u64 * DEDUP_SWEEP_EVERY + i + 1;
                s.apply(&at(2, req, t0 + step, Cmd::Heartbeat { host: "h".into() }));
            }
            assert_eq!(
                s.apply(&at(1, 1, t0 + step, Cmd::JobSubmit(spec(42)))),
                first,
                "the re-send after a clock step of {step} ms"
            );
        }
        // And a clock stepping back changes nothing either.
        assert_eq!(s.apply(&at(1, 1, 0, Cmd::JobSubmit(spec(42)))), first);
    }

    #[test]
    fn silent_host_is_unavail() {
        let mut s = State::default();
        let join = Cmd::Join {
            role: Role::Worker,
            host: "h".into(),
            ncpus: 1,
            mem_mb: 1,
            attrs: vec![],
        };
        s.apply(&p(1, join));
        assert_eq!(s.hosts(1000 + 5_000, 30_000)[0].1, Availability::Ok);
        assert_eq!(s.hosts(1000 + 31_000, 30_000)[0].1, Availability::Unavail);
    }
}
