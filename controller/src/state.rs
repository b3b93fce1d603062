//! The replicated job store: a pure, deterministic state machine (C4, C5).
//!
//! Every change is a [`Proposal`] that went through the Raft log; the leader stamps the time
//! into it before proposing, so every node computes the same state from the same log.
//! Reads ([`State`] queries) are answered from the applied state after a read-index check.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use xce::error::E_XCE_DUP_JOB;
use xce::wire;

/// Request ids remembered per client for exactly-once writes (C4).
pub const DEDUP_PER_CLIENT: usize = 256;
/// Clients remembered in the exactly-once table; the least recently used one is forgotten.
pub const DEDUP_CLIENTS: usize = 4096;
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

/// Session roles as stored (mirror of `wire::SessionRole`).
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
    JobSubmit(JobRec),
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostState {
    Ok,
    Closed,
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRec {
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
    pub submit_time: i64,
    pub start_time: i64,
    pub end_time: i64,
    pub exit_code: i32,
    pub cpu_ms: u64,
    pub mem_kb: u64,
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

/// Exactly-once memory of one client: its recent request ids and their outcomes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct ClientWindow {
    /// Apply counter at the last use, for least-recently-used eviction.
    last_used: u64,
    replies: BTreeMap<u64, Outcome>,
}

/// The whole replicated state. Serialised as is into snapshots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    jobs: BTreeMap<u64, JobRec>,
    hosts: BTreeMap<String, HostRec>,
    queues: BTreeMap<String, QueueRec>,
    tasks: BTreeMap<u64, TaskRec>,
    next_task_id: u64,
    next_session_id: u64,
    /// Counts applied proposals; drives the exactly-once table's eviction order.
    applied: u64,
    /// Keyed by the hex client id (JSON maps need string keys).
    dedup: HashMap<String, ClientWindow>,
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
            jobs: BTreeMap::new(),
            hosts: BTreeMap::new(),
            queues,
            tasks: BTreeMap::new(),
            next_task_id: 1,
            next_session_id: 1,
            applied: 0,
            dedup: HashMap::new(),
        }
    }
}

fn hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
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
    /// Apply one committed proposal (C4: a re-sent write returns its first outcome).
    pub fn apply(&mut self, p: &Proposal) -> Outcome {
        self.applied += 1;
        if p.request_id != 0 {
            let key = hex(&p.client_id);
            if let Some(w) = self.dedup.get_mut(&key) {
                w.last_used = self.applied;
                if let Some(first) = w.replies.get(&p.request_id) {
                    return first.clone();
                }
            }
        }
        let out = self.exec(&p.cmd, p.now_ms);
        if p.request_id != 0 {
            self.remember(hex(&p.client_id), p.request_id, out.clone());
        }
        out
    }

    fn remember(&mut self, key: String, request_id: u64, out: Outcome) {
        if !self.dedup.contains_key(&key) && self.dedup.len() >= DEDUP_CLIENTS {
            // Deterministic: the smallest last_used, ties broken by key.
            let victim = self
                .dedup
                .iter()
                .min_by(|a, b| a.1.last_used.cmp(&b.1.last_used).then(a.0.cmp(b.0)))
                .map(|(k, _)| k.clone());
            if let Some(v) = victim {
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

    fn exec(&mut self, cmd: &Cmd, now: i64) -> Outcome {
        match cmd {
            Cmd::Join {
                role,
                host,
                ncpus,
                mem_mb,
                attrs,
            } => {
                if *role == Role::Worker {
                    if host.is_empty() {
                        return Outcome::err(libc::EINVAL);
                    }
                    let h = self.hosts.entry(host.clone()).or_insert_with(|| HostRec {
                        name: host.clone(),
                        state: HostState::Ok,
                        ncpus: 0,
                        mem_mb: 0,
                        attrs: Vec::new(),
                        njobs: 0,
                        last_heartbeat: now,
                        resvals: BTreeMap::new(),
                    });
                    h.ncpus = *ncpus;
                    h.mem_mb = *mem_mb;
                    h.attrs = attrs.clone();
                    h.last_heartbeat = now;
                }
                let sid = self.next_session_id;
                self.next_session_id += 1;
                Outcome::data(OutData::SessionId(sid))
            }
            Cmd::JobSubmit(spec) => {
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
                let mut job = spec.clone();
                job.queue = queue.to_string();
                job.state = JobState::Pend;
                job.pend_reason.clear();
                job.exec_host.clear();
                job.submit_time = now;
                job.start_time = 0;
                job.end_time = 0;
                job.exit_code = 0;
                self.jobs.insert(job.job_id, job);
                Outcome::data(OutData::JobId(spec.job_id))
            }
            Cmd::JobDispatch { job_id, host } => {
                let Some(job) = self.jobs.get(job_id) else {
                    return Outcome::err(libc::ENOENT);
                };
                let Some(h) = self.hosts.get(host) else {
                    return Outcome::err(libc::ENOENT);
                };
                if job.state != JobState::Pend || h.state != HostState::Ok {
                    return Outcome::err(libc::EINVAL);
                }
                if !self.queues.get(&job.queue).is_some_and(|q| q.active) {
                    return Outcome::err(libc::EINVAL);
                }
                let job = self.jobs.get_mut(job_id).expect("checked");
                job.state = JobState::Run;
                job.exec_host = host.clone();
                job.start_time = now;
                job.pend_reason.clear();
                self.hosts.get_mut(host).expect("checked").njobs += 1;
                Outcome::ok()
            }
            Cmd::JobCtrl { job_id, action } => self.job_ctrl(*job_id, *action, now),
            Cmd::QueueCtrl { queue, action } => {
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
            Cmd::HostCtrl { host, open } => {
                let Some(h) = self.hosts.get_mut(host) else {
                    return Outcome::err(libc::ENOENT);
                };
                h.state = if *open {
                    HostState::Ok
                } else {
                    HostState::Closed
                };
                Outcome::ok()
            }
            Cmd::UpdateResvals { host, resvals } => {
                let Some(h) = self.hosts.get_mut(host) else {
                    return Outcome::err(libc::ENOENT);
                };
                for (k, v) in resvals {
                    h.resvals.insert(k.clone(), v.clone());
                }
                Outcome::ok()
            }
            Cmd::UpdateJusage {
                job_id,
                cpu_ms,
                mem_kb,
            } => {
                let Some(job) = self.jobs.get_mut(job_id) else {
                    return Outcome::err(libc::ENOENT);
                };
                job.cpu_ms = *cpu_ms;
                job.mem_kb = *mem_kb;
                Outcome::ok()
            }
            Cmd::RunTask { host, command } => {
                if !self.hosts.contains_key(host) {
                    return Outcome::err(libc::ENOENT);
                }
                let id = self.next_task_id;
                self.next_task_id += 1;
                self.tasks.insert(
                    id,
                    TaskRec {
                        task_id: id,
                        host: host.clone(),
                        command: command.clone(),
                        start_time: now,
                    },
                );
                while self.tasks.len() > TASKS_KEPT {
                    self.tasks.pop_first();
                }
                Outcome::data(OutData::TaskId(id))
            }
            Cmd::SetPendReason { job_id, reason } => {
                let Some(job) = self.jobs.get_mut(job_id) else {
                    return Outcome::err(libc::ENOENT);
                };
                if job.state != JobState::Pend {
                    return Outcome::err(libc::EINVAL);
                }
                job.pend_reason = reason.clone();
                Outcome::ok()
            }
            Cmd::ClearReason { job_id } => {
                let Some(job) = self.jobs.get_mut(job_id) else {
                    return Outcome::err(libc::ENOENT);
                };
                job.pend_reason.clear();
                Outcome::ok()
            }
            Cmd::Notify {
                kind,
                job_id,
                exit_code,
            } => self.notify(*kind, *job_id, *exit_code, now),
            Cmd::Heartbeat { host } => {
                let Some(h) = self.hosts.get_mut(host) else {
                    return Outcome::err(libc::ENOENT);
                };
                h.last_heartbeat = now;
                Outcome::ok()
            }
        }
    }

    /// The job leaves its host (finished, killed, requeued).
    fn release_host(&mut self, host: &str) {
        if let Some(h) = self.hosts.get_mut(host) {
            h.njobs = h.njobs.saturating_sub(1);
        }
    }

    fn job_ctrl(&mut self, job_id: u64, action: JobAction, now: i64) -> Outcome {
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
                job.exec_host.clear();
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

    pub fn job(&self, job_id: u64) -> Option<wire::Job> {
        self.jobs.get(&job_id).map(job_to_wire)
    }

    pub fn jobs(&self, f: &wire::JobFilter) -> Vec<wire::Job> {
        let limit = if f.limit == 0 {
            usize::MAX
        } else {
            f.limit as usize
        };
        self.jobs
            .values()
            .filter(|j| f.user.is_empty() || j.user == f.user)
            .filter(|j| f.queue.is_empty() || j.queue == f.queue)
            .map(job_to_wire)
            .filter(|j| f.state_mask == 0 || f.state_mask & j.state.mask_bit() != 0)
            .take(limit)
            .collect()
    }

    /// Hosts with their effective state: an OK host silent for longer than `host_timeout_ms`
    /// is reported UNAVAIL (C5).
    pub fn hosts(&self, now: i64, host_timeout_ms: i64) -> Vec<wire::Host> {
        self.hosts
            .values()
            .map(|h| wire::Host {
                name: h.name.clone(),
                state: match h.state {
                    HostState::Closed => wire::HostState::Closed,
                    HostState::Ok if now - h.last_heartbeat > host_timeout_ms => {
                        wire::HostState::Unavail
                    }
                    HostState::Ok => wire::HostState::Ok,
                },
                ncpus: h.ncpus,
                mem_mb: h.mem_mb,
                attrs: h
                    .attrs
                    .iter()
                    .map(|(k, v)| wire::KeyValue {
                        key: k.clone(),
                        value: v.clone(),
                    })
                    .collect(),
                njobs: h.njobs,
                last_heartbeat: h.last_heartbeat,
            })
            .collect()
    }

    pub fn resvals(&self, host: &str) -> Option<Vec<wire::ResVal>> {
        self.hosts.get(host).map(|h| {
            h.resvals
                .iter()
                .map(|(k, v)| wire::ResVal {
                    name: k.clone(),
                    value: v.clone(),
                })
                .collect()
        })
    }

    /// The fixed catalogue, then every other resval name a worker has reported.
    pub fn resources(&self) -> Vec<wire::Resource> {
        let mut out: Vec<wire::Resource> = RESOURCE_CATALOGUE
            .iter()
            .map(|(n, k, d)| wire::Resource {
                name: n.to_string(),
                kind: k.to_string(),
                description: d.to_string(),
            })
            .collect();
        let mut extra: Vec<&String> = self.hosts.values().flat_map(|h| h.resvals.keys()).collect();
        extra.sort();
        extra.dedup();
        for name in extra {
            if !out.iter().any(|r| &r.name == name) {
                out.push(wire::Resource {
                    name: name.clone(),
                    kind: "string".into(),
                    description: "reported by workers".into(),
                });
            }
        }
        out
    }

    pub fn queues(&self) -> Vec<wire::Queue> {
        self.queues
            .iter()
            .map(|(n, q)| wire::Queue {
                name: n.clone(),
                open: q.open,
                active: q.active,
                priority: q.priority,
            })
            .collect()
    }
}

fn job_to_wire(j: &JobRec) -> wire::Job {
    wire::Job {
        job_id: j.job_id,
        name: j.name.clone(),
        user: j.user.clone(),
        queue: j.queue.clone(),
        command: j.command.clone(),
        ncpus: j.ncpus,
        mem_mb: j.mem_mb,
        state: match j.state {
            JobState::Pend => wire::JobState::Pend,
            JobState::Run => wire::JobState::Run,
            JobState::Susp => wire::JobState::Susp,
            JobState::Done => wire::JobState::Done,
            JobState::Exit => wire::JobState::Exit,
        },
        pend_reason: j.pend_reason.clone(),
        exec_host: j.exec_host.clone(),
        submit_time: j.submit_time,
        start_time: j.start_time,
        end_time: j.end_time,
        exit_code: j.exit_code,
        usage: wire::Usage {
            cpu_ms: j.cpu_ms,
            mem_kb: j.mem_kb,
        },
    }
}

/// The stored form of a submitted job spec.
pub fn job_from_spec(s: &wire::JobSpec) -> JobRec {
    JobRec {
        job_id: s.job_id,
        name: s.name.clone(),
        user: s.user.clone(),
        queue: s.queue.clone(),
        command: s.command.clone(),
        ncpus: s.ncpus,
        mem_mb: s.mem_mb,
        state: JobState::Pend,
        pend_reason: String::new(),
        exec_host: String::new(),
        submit_time: 0,
        start_time: 0,
        end_time: 0,
        exit_code: 0,
        cpu_ms: 0,
        mem_kb: 0,
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

    fn spec(id: u64) -> JobRec {
        job_from_spec(&wire::JobSpec {
            job_id: id,
            user: "u".into(),
            ..Default::default()
        })
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
        assert_eq!(s.hosts(1000 + 5_000, 30_000)[0].state, wire::HostState::Ok);
        assert_eq!(
            s.hosts(1000 + 31_000, 30_000)[0].state,
            wire::HostState::Unavail
        );
    }
}
