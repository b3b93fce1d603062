//! Shared fixtures of the wire tests: one sample of every op and reply payload (with
//! non-default values everywhere), and proptest strategies over whole messages.
#![allow(dead_code)] // each test binary uses a different subset

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use xce_proto::wire::*;

pub const CLIENT: ClientId = *b"0123456789abcdef";

/// Index of an op variant. No wildcard arm: a new variant in msg.rs fails to compile here
/// until the samples and strategies cover it.
pub fn op_index(op: &Op) -> usize {
    match op {
        Op::Hello(_) => 0,
        Op::Join(_) => 1,
        Op::JobList(_) => 2,
        Op::JobInfo { .. } => 3,
        Op::JobSubmit(_) => 4,
        Op::JobDispatch { .. } => 5,
        Op::JobCtrl { .. } => 6,
        Op::QueueCtrl { .. } => 7,
        Op::HostCtrl { .. } => 8,
        Op::ResList => 9,
        Op::WorkerList => 10,
        Op::ClusterConf => 11,
        Op::ResVal { .. } => 12,
        Op::UpdateResvals { .. } => 13,
        Op::UpdateJusage { .. } => 14,
        Op::RunTask { .. } => 15,
        Op::SetPendReason { .. } => 16,
        Op::ClearReason { .. } => 17,
        Op::Notify(_) => 18,
        Op::Heartbeat { .. } => 19,
        Op::Nop => 20,
        Op::WaitPrimary { .. } => 21,
        Op::JobListPage(_) => 22,
        Op::MemberAdd { .. } => 23,
        Op::MemberRemove { .. } => 24,
        Op::ConsistencyCheck => 25,
        Op::SnapshotSave(_) => 26,
        Op::LeaderTransfer { .. } => 27,
    }
}
pub const OP_VARIANTS: usize = 28;

/// Index of a reply payload variant (no wildcard, as for `op_index`).
pub fn data_index(d: &ReplyData) -> usize {
    match d {
        ReplyData::None => 0,
        ReplyData::CtrlInfo(_) => 1,
        ReplyData::Jobs(_) => 2,
        ReplyData::Job(_) => 3,
        ReplyData::JobId(_) => 4,
        ReplyData::Hosts(_) => 5,
        ReplyData::Resources(_) => 6,
        ReplyData::ResVals(_) => 7,
        ReplyData::ClusterConf(_) => 8,
        ReplyData::TaskId(_) => 9,
        ReplyData::SessionId(_) => 10,
        ReplyData::JobPage(_) => 11,
        ReplyData::SnapshotChunk(_) => 12,
    }
}
pub const DATA_VARIANTS: usize = 13;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: v.into(),
    }
}

fn rv(n: &str, v: &str) -> ResVal {
    ResVal {
        name: n.into(),
        value: v.into(),
    }
}

pub fn sample_job(i: u64) -> Job {
    Job {
        job_id: 0x1000_0000_0000 + i,
        name: format!("sim-{i}"),
        user: "alice".into(),
        queue: "normal".into(),
        command: format!("/usr/bin/simulate --case {i} --steps 1000"),
        ncpus: 4,
        mem_mb: 8192,
        state: JobState::Exit,
        pend_reason: "héllo: not enough slots".into(),
        exec_host: "node017".into(),
        submit_time: 1_700_000_000_000 + i as i64,
        start_time: 1_700_000_001_000,
        end_time: -1,
        exit_code: -9,
        usage: Usage {
            cpu_ms: 123_456,
            mem_kb: 7_654_321,
        },
    }
}

/// One sample of every op, in `op_index` order, with non-default values.
pub fn sample_ops() -> Vec<Op> {
    vec![
        Op::Hello(Hello {
            client_name: "xce-test ✓".into(),
            protocol_version: PROTOCOL_VERSION,
        }),
        Op::Join(Join {
            role: SessionRole::ApiServer,
            host: "node001".into(),
            ncpus: 64,
            mem_mb: 256_000,
            attrs: vec![kv("arch", "x86_64"), kv("gpu", "")],
        }),
        Op::JobList(JobFilter {
            user: "bob".into(),
            queue: "long".into(),
            state_mask: JobState::Run.mask_bit() | JobState::Susp.mask_bit(),
            limit: 50,
        }),
        Op::JobInfo { job_id: u64::MAX },
        Op::JobSubmit(JobSpec {
            job_id: 0xdead_beef_0000_0001,
            name: "train".into(),
            user: "carol".into(),
            queue: "gpu".into(),
            command: "python train.py --epochs 3".into(),
            ncpus: 16,
            mem_mb: 65_536,
        }),
        Op::JobDispatch {
            job_id: 42,
            host: "node002".into(),
        },
        Op::JobCtrl {
            job_id: 43,
            action: JobAction::Requeue,
        },
        Op::QueueCtrl {
            queue: "normal".into(),
            action: QueueAction::Inactivate,
        },
        Op::HostCtrl {
            host: "node003".into(),
            action: HostAction::Close,
        },
        Op::ResList,
        Op::WorkerList,
        Op::ClusterConf,
        Op::ResVal {
            host: "node004".into(),
        },
        Op::UpdateResvals {
            host: "node005".into(),
            resvals: vec![rv("load", "0.75"), rv("freemem", "12345")],
        },
        Op::UpdateJusage {
            job_id: 44,
            usage: Usage {
                cpu_ms: 9_999,
                mem_kb: 1,
            },
        },
        Op::RunTask {
            host: "node006".into(),
            command: "hostname -f".into(),
        },
        Op::SetPendReason {
            job_id: 45,
            reason: "waiting for licence".into(),
        },
        Op::ClearReason { job_id: 46 },
        Op::Notify(Notify {
            kind: NotifyKind::JobChkpt,
            job_id: 47,
            exit_code: -1,
        }),
        Op::Heartbeat {
            host: "node007".into(),
        },
        Op::Nop,
        Op::WaitPrimary {
            timeout_ms: 30_000,
            exclude_host: "ctl1.example".into(),
            exclude_port: 9991,
        },
        Op::JobListPage(JobListPage {
            filter: JobFilter {
                user: "dave".into(),
                queue: "short".into(),
                state_mask: JobState::Pend.mask_bit(),
                limit: 1000,
            },
            cursor: 0x0123_4567_89ab_cdef,
            after: 0x1000_0000_0042,
            max_bytes: 1 << 20,
        }),
        Op::MemberAdd {
            id: 4,
            client_addr: "ctl4.example:9991".into(),
            raft_addr: "[fd00::4]:10991".into(),
        },
        Op::MemberRemove { id: 1 },
        Op::ConsistencyCheck,
        Op::SnapshotSave(SnapshotSave {
            cursor: 0x0123_4567_89ab_cdef,
            offset: 1 << 33,
            max_bytes: 4 << 20,
        }),
        Op::LeaderTransfer { to: 3, from: 1 },
    ]
}

/// One sample of every reply payload, in `data_index` order.
pub fn sample_datas() -> Vec<ReplyData> {
    vec![
        ReplyData::None,
        ReplyData::CtrlInfo(ControllerInfo {
            id: 2,
            role: ControllerRole::Standby,
            term: 17,
            primary_id: 3,
            primary_host: "ctl3.example".into(),
            primary_port: 7070,
            version: "xce-controller 0.1.0".into(),
            protocol_version: PROTOCOL_VERSION,
            waiters: 12,
            last_log_index: 41,
            committed_index: 40,
            applied_index: 39,
            last_contact_ms: -1,
            members: vec![
                ControllerEntry {
                    id: 1,
                    host: "ctl1.example".into(),
                    port: 7070,
                    role: ControllerRole::Primary,
                },
                ControllerEntry {
                    id: 4,
                    host: "::1".into(),
                    port: 7074,
                    role: ControllerRole::Standby,
                },
            ],
            cluster_id: *b"cluster-id-16-by",
            alarms: vec![
                "node 3: state digest differs at index 1234".into(),
                "ünïcode".into(),
            ],
            checked_index: 1230,
            uptime_ms: 86_400_123,
            db_size_bytes: 170 << 20,
            disk_free_bytes: 3 << 30,
            quota_bytes: 8 << 30,
        }),
        ReplyData::Jobs(vec![sample_job(1), sample_job(2), Job::default()]),
        ReplyData::Job(sample_job(3)),
        ReplyData::JobId(0xdead_beef_0000_0001),
        ReplyData::Hosts(vec![
            Host {
                name: "node001".into(),
                state: HostState::Unavail,
                ncpus: 32,
                mem_mb: 128_000,
                attrs: vec![kv("arch", "aarch64"), kv("rack", "r12")],
                njobs: 5,
                last_heartbeat: 1_700_000_000_123,
            },
            Host {
                name: "node002".into(),
                state: HostState::Closed,
                ..Host::default()
            },
        ]),
        ReplyData::Resources(vec![Resource {
            name: "load".into(),
            kind: "numeric".into(),
            description: "1-minute load average".into(),
        }]),
        ReplyData::ResVals(vec![rv("load", "1.5"), rv("freemem", "2048")]),
        ReplyData::ClusterConf(ClusterConf {
            cluster_name: "prod".into(),
            controllers: vec![
                ControllerEntry {
                    id: 1,
                    host: "ctl1".into(),
                    port: 7001,
                    role: ControllerRole::Primary,
                },
                ControllerEntry {
                    id: 2,
                    host: "ctl2".into(),
                    port: 7002,
                    role: ControllerRole::Candidate,
                },
            ],
            primary_id: 1,
            term: 9,
            queues: vec![
                Queue {
                    name: "normal".into(),
                    open: true,
                    active: true,
                    priority: 10,
                },
                Queue {
                    name: "night".into(),
                    open: false,
                    active: true,
                    priority: -5,
                },
            ],
        }),
        ReplyData::TaskId(77),
        ReplyData::SessionId(88),
        ReplyData::JobPage(JobPage {
            jobs: vec![sample_job(1), sample_job(2)],
            cursor: 0xfeed_f00d,
            more: true,
            total: 1_000_000,
        }),
        ReplyData::SnapshotChunk(SnapshotChunk {
            cursor: 9,
            offset: 1 << 32,
            data: (0..=255u8).collect(),
            total_bytes: (1 << 32) + 256,
            index: 123_456,
            term: 7,
            digest: vec![0xab; 32],
            cluster_id: *b"another-cluster!",
            agreeing: 2,
            voters: 3,
        }),
    ]
}

pub fn request(seq: u64, op: Op) -> Request {
    Request {
        seq,
        client_id: CLIENT,
        request_id: seq.wrapping_mul(10),
        no_reply: seq % 2 == 0,
        op,
        auth_token: String::new(),
        forward_within_ms: 0,
    }
}

pub fn reply(seq: u64, data: ReplyData) -> Reply {
    Reply {
        seq,
        status: (seq as i32).wrapping_neg(),
        redirect_host: format!("ctl{seq}.example"),
        redirect_port: 7000u16.wrapping_add(seq as u16),
        data,
        members_version: seq.wrapping_mul(3),
        detail: String::new(),
    }
}

/// A request as one frame.
pub fn enc_req(r: &Request) -> Vec<u8> {
    let mut out = Vec::new();
    encode_request(r, &mut out);
    out
}

/// A reply as one frame.
pub fn enc_rep(r: &Reply) -> Vec<u8> {
    let mut out = Vec::new();
    encode_reply(r, &mut out);
    out
}

// ---------------------------------------------------------------------------------------
// Strategies

pub fn text() -> impl Strategy<Value = String> {
    // Any Unicode scalar, NUL included: Cap'n Proto text is length-delimited.
    vec(any::<char>(), 0..12).prop_map(String::from_iter)
}

/// Strategies nested in pairs: proptest's tuples stop at 12, some records have 21 fields.
macro_rules! nest {
    ($s:expr) => { $s };
    ($s:expr, $($rest:expr),+) => { ($s, nest!($($rest),+)) };
}

/// The pattern that takes apart what `nest!` draws.
macro_rules! unnest {
    ($f:ident) => { $f };
    ($f:ident, $($rest:ident),+) => { ($f, unnest!($($rest),+)) };
}

/// A strategy for the struct (or struct variant) `$ty`, each field drawn from its strategy.
macro_rules! record {
    ($($ty:ident)::+ { $($f:ident: $s:expr),+ $(,)? }) => {
        nest!($($s),+).prop_map(|unnest!($($f),+)| $($ty)::+ { $($f),+ })
    };
}

fn kvs() -> impl Strategy<Value = Vec<KeyValue>> {
    vec(
        record!(KeyValue {
            key: text(),
            value: text()
        }),
        0..4,
    )
}

fn resvals() -> impl Strategy<Value = Vec<ResVal>> {
    vec(
        record!(ResVal {
            name: text(),
            value: text()
        }),
        0..4,
    )
}

fn usage() -> impl Strategy<Value = Usage> {
    record!(Usage {
        cpu_ms: any::<u64>(),
        mem_kb: any::<u64>()
    })
}

// Each enum: one of its values, any (`select` of every variant).

fn session_role() -> impl Strategy<Value = SessionRole> {
    use SessionRole::*;
    select(&[Worker, Scheduler, ApiServer, Client][..])
}

fn job_action() -> impl Strategy<Value = JobAction> {
    use JobAction::*;
    select(&[Kill, Suspend, Resume, Requeue][..])
}

fn queue_action() -> impl Strategy<Value = QueueAction> {
    use QueueAction::*;
    select(&[Open, Close, Activate, Inactivate][..])
}

fn host_action() -> impl Strategy<Value = HostAction> {
    select(&[HostAction::Open, HostAction::Close][..])
}

fn notify_kind() -> impl Strategy<Value = NotifyKind> {
    use NotifyKind::*;
    select(&[JobStart, JobFinish, JobFail, JobStop, JobChkpt][..])
}

fn job_state() -> impl Strategy<Value = JobState> {
    use JobState::*;
    select(&[Pend, Run, Susp, Done, Exit][..])
}

fn host_state() -> impl Strategy<Value = HostState> {
    select(&[HostState::Ok, HostState::Closed, HostState::Unavail][..])
}

fn controller_role() -> impl Strategy<Value = ControllerRole> {
    use ControllerRole::*;
    select(&[Primary, Standby, Candidate, Initializing][..])
}

fn job_filter() -> impl Strategy<Value = JobFilter> {
    record!(JobFilter {
        user: text(),
        queue: text(),
        state_mask: any::<u32>(),
        limit: any::<u32>()
    })
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        record!(Hello {
            client_name: text(),
            protocol_version: any::<u32>()
        })
        .prop_map(Op::Hello),
        record!(Join {
            role: session_role(),
            host: text(),
            ncpus: any::<u32>(),
            mem_mb: any::<u64>(),
            attrs: kvs()
        })
        .prop_map(Op::Join),
        job_filter().prop_map(Op::JobList),
        any::<u64>().prop_map(|job_id| Op::JobInfo { job_id }),
        record!(JobSpec {
            job_id: any::<u64>(),
            name: text(),
            user: text(),
            queue: text(),
            command: text(),
            ncpus: any::<u32>(),
            mem_mb: any::<u64>()
        })
        .prop_map(Op::JobSubmit),
        (any::<u64>(), text()).prop_map(|(job_id, host)| Op::JobDispatch { job_id, host }),
        (any::<u64>(), job_action()).prop_map(|(job_id, action)| Op::JobCtrl { job_id, action }),
        (text(), queue_action()).prop_map(|(queue, action)| Op::QueueCtrl { queue, action }),
        (text(), host_action()).prop_map(|(host, action)| Op::HostCtrl { host, action }),
        Just(Op::ResList),
        Just(Op::WorkerList),
        Just(Op::ClusterConf),
        text().prop_map(|host| Op::ResVal { host }),
        (text(), resvals()).prop_map(|(host, resvals)| Op::UpdateResvals { host, resvals }),
        (any::<u64>(), usage()).prop_map(|(job_id, usage)| Op::UpdateJusage { job_id, usage }),
        (text(), text()).prop_map(|(host, command)| Op::RunTask { host, command }),
        (any::<u64>(), text()).prop_map(|(job_id, reason)| Op::SetPendReason { job_id, reason }),
        any::<u64>().prop_map(|job_id| Op::ClearReason { job_id }),
        record!(Notify {
            kind: notify_kind(),
            job_id: any::<u64>(),
            exit_code: any::<i32>()
        })
        .prop_map(Op::Notify),
        text().prop_map(|host| Op::Heartbeat { host }),
        Just(Op::Nop),
        record!(Op::WaitPrimary {
            timeout_ms: any::<u32>(),
            exclude_host: ".{0,16}",
            exclude_port: any::<u16>()
        }),
        record!(JobListPage {
            filter: job_filter(),
            cursor: any::<u64>(),
            after: any::<u64>(),
            max_bytes: any::<u32>()
        })
        .prop_map(Op::JobListPage),
        Just(Op::ConsistencyCheck),
        record!(SnapshotSave {
            cursor: any::<u64>(),
            offset: any::<u64>(),
            max_bytes: any::<u32>()
        })
        .prop_map(Op::SnapshotSave),
        (any::<u32>(), any::<u32>()).prop_map(|(to, from)| Op::LeaderTransfer { to, from }),
    ]
}

pub fn request_strategy() -> impl Strategy<Value = Request> {
    record!(Request {
        seq: any::<u64>(),
        client_id: any::<[u8; 16]>(),
        request_id: any::<u64>(),
        no_reply: any::<bool>(),
        op: op(),
        auth_token: Just(String::new()),
        forward_within_ms: Just(0)
    })
}

pub fn job() -> impl Strategy<Value = Job> {
    record!(Job {
        job_id: any::<u64>(),
        name: text(),
        user: text(),
        queue: text(),
        command: text(),
        ncpus: any::<u32>(),
        mem_mb: any::<u64>(),
        state: job_state(),
        pend_reason: text(),
        exec_host: text(),
        submit_time: any::<i64>(),
        start_time: any::<i64>(),
        end_time: any::<i64>(),
        exit_code: any::<i32>(),
        usage: usage()
    })
}

fn host() -> impl Strategy<Value = Host> {
    record!(Host {
        name: text(),
        state: host_state(),
        ncpus: any::<u32>(),
        mem_mb: any::<u64>(),
        attrs: kvs(),
        njobs: any::<u32>(),
        last_heartbeat: any::<i64>()
    })
}

fn controller_entry() -> impl Strategy<Value = ControllerEntry> {
    record!(ControllerEntry {
        id: any::<u32>(),
        host: text(),
        port: any::<u16>(),
        role: controller_role()
    })
}

fn cluster_conf() -> impl Strategy<Value = ClusterConf> {
    let queue = record!(Queue {
        name: text(),
        open: any::<bool>(),
        active: any::<bool>(),
        priority: any::<i32>()
    });
    record!(ClusterConf {
        cluster_name: text(),
        controllers: vec(controller_entry(), 0..4),
        primary_id: any::<u32>(),
        term: any::<u64>(),
        queues: vec(queue, 0..4)
    })
}

fn controller_info() -> impl Strategy<Value = ControllerInfo> {
    record!(ControllerInfo {
        id: any::<u32>(),
        role: controller_role(),
        term: any::<u64>(),
        primary_id: any::<u32>(),
        primary_host: text(),
        primary_port: any::<u16>(),
        version: text(),
        protocol_version: any::<u32>(),
        waiters: any::<u32>(),
        last_log_index: any::<u64>(),
        committed_index: any::<u64>(),
        applied_index: any::<u64>(),
        last_contact_ms: any::<i64>(),
        members: vec(controller_entry(), 0..4),
        cluster_id: any::<[u8; 16]>(),
        alarms: vec(text(), 0..3),
        checked_index: any::<u64>(),
        uptime_ms: any::<u64>(),
        db_size_bytes: any::<u64>(),
        disk_free_bytes: any::<u64>(),
        quota_bytes: any::<u64>()
    })
}

pub fn reply_data() -> impl Strategy<Value = ReplyData> {
    let resource = record!(Resource {
        name: text(),
        kind: text(),
        description: text()
    });
    prop_oneof![
        Just(ReplyData::None),
        controller_info().prop_map(ReplyData::CtrlInfo),
        vec(job(), 0..5).prop_map(ReplyData::Jobs),
        job().prop_map(ReplyData::Job),
        any::<u64>().prop_map(ReplyData::JobId),
        vec(host(), 0..4).prop_map(ReplyData::Hosts),
        vec(resource, 0..4).prop_map(ReplyData::Resources),
        resvals().prop_map(ReplyData::ResVals),
        cluster_conf().prop_map(ReplyData::ClusterConf),
        any::<u64>().prop_map(ReplyData::TaskId),
        any::<u64>().prop_map(ReplyData::SessionId),
        record!(JobPage {
            jobs: vec(job(), 0..4),
            cursor: any::<u64>(),
            more: any::<bool>(),
            total: any::<u64>()
        })
        .prop_map(ReplyData::JobPage),
        record!(SnapshotChunk {
            cursor: any::<u64>(),
            offset: any::<u64>(),
            data: vec(any::<u8>(), 0..64),
            total_bytes: any::<u64>(),
            index: any::<u64>(),
            term: any::<u64>(),
            digest: vec(any::<u8>(), 0..33),
            cluster_id: any::<[u8; 16]>(),
            agreeing: any::<u32>(),
            voters: any::<u32>()
        })
        .prop_map(ReplyData::SnapshotChunk),
    ]
}

pub fn reply_strategy() -> impl Strategy<Value = Reply> {
    record!(Reply {
        seq: any::<u64>(),
        status: any::<i32>(),
        redirect_host: text(),
        redirect_port: any::<u16>(),
        data: reply_data(),
        members_version: any::<u64>(),
        detail: text()
    })
}
