//! C18: the node's metrics in the Prometheus text format (OpenMetrics), served over HTTP by
//! `run --metrics ADDR` at `/metrics` (the endpoint, which reads the gauges:
//! `ports/metrics.rs`).
//!
//! One registry per process (one node per process), built on `prometheus-client`. Counters and
//! histograms are fed by small hooks where things happen (`fsync` in the log store, `op` and
//! `connection` in the client server, leader changes by a watcher of openraft's metrics);
//! gauges (term, role, indexes, sizes, cursors) are read from the node when scraped.

use std::sync::atomic::AtomicU64;
use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ForwardLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnswerLabels {
    answer: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WhyLabels {
    why: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StorageLabels {
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: &'static str,
    status: &'static str,
}

type Gauge64 = Gauge<i64, std::sync::atomic::AtomicI64>;
type GaugeF = Gauge<f64, AtomicU64>;

pub(crate) struct Metrics {
    pub(crate) registry: Registry,
    pub(crate) term: Gauge64,
    pub(crate) is_primary: Gauge64,
    pub(crate) leader_changes: Counter,
    commit: Histogram,
    fsync: Histogram,
    ops: Family<OpLabels, Counter>,
    forwards: Family<ForwardLabels, Counter>,
    pre_votes: Family<AnswerLabels, Counter>,
    campaigns: Family<ForwardLabels, Counter>,
    connections: Gauge64,
    pub(crate) cursors: Gauge64,
    pub(crate) last_log_index: Gauge64,
    pub(crate) applied_index: Gauge64,
    pub(crate) snapshot_index: Gauge64,
    pub(crate) log_entries: Gauge64,
    pub(crate) db_bytes: Gauge64,
    pub(crate) snapshot_bytes: Gauge64,
    pub(crate) quorum_ack_age: GaugeF,
    pub(crate) adaptive_lease: GaugeF,
    pub(crate) link_silence: GaugeF,
    flush_pending: Gauge64,
    appends: Family<KindLabels, Counter>,
    digest: Histogram,
    digest_mismatch: Counter,
    pub(crate) alarms: Gauge64,
    pub(crate) checked_index: Gauge64,
    refused: Family<WhyLabels, Counter>,
    storage_faults: Family<StorageLabels, Counter>,
    storage_fault: Gauge64,
    pub(crate) db_size: Gauge64,
    pub(crate) disk_free: Gauge64,
    pub(crate) quota: Gauge64,
    nospace: Gauge64,
    pub(crate) peer_match: Family<PeerLabels, Gauge64>,
    pub(crate) peer_contact: Family<PeerLabels, GaugeF>,
    pub(crate) peer_round_trip: Family<PeerLabels, GaugeF>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PeerLabels {
    pub(crate) peer: String,
}

pub(crate) static M: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// Every metric's name and help text, in the order they are exported (`Metrics::new` takes
/// each one's help from here by name).
const HELP: &[(&str, &str)] = &[
    ("xce_raft_term", "Current Raft term"),
    (
        "xce_is_primary",
        "1 while this node is the serving primary (a leader heard by its quorum)",
    ),
    (
        "xce_leader_changes",
        "Changes of the known leader seen by this node",
    ),
    (
        "xce_commit_seconds",
        "Time from a client write's arrival to its commit and apply (successful writes)",
    ),
    (
        "xce_fsync_seconds",
        "Durable log commits: one redb commit (fsync) each; on the primary, appends that \
             queued while one ran share the next",
    ),
    (
        "xce_raft_appends_received",
        "AppendEntries this node received from a leader, by kind: entries (log entries to \
             store), empty (a heartbeat; it also carries the leader's commit index)",
    ),
    ("xce_ops", "Client requests answered, by op and status"),
    (
        "xce_forwards",
        "Client requests this standby forwarded to the primary (C16), by outcome",
    ),
    (
        "xce_pre_votes",
        "Pre-votes (C15) this node answered for a candidate, by answer",
    ),
    (
        "xce_campaigns",
        "Elections this node considered, by outcome: campaigned after a granted pre-vote, \
             not_granted (no quorum said yes: no term raised), called_off (an append accepted \
             after the decision: no term raised), handover (C14, no pre-vote)",
    ),
    ("xce_client_connections", "Open client connections"),
    ("xce_listing_cursors", "Paged listings pinned on this node"),
    (
        "xce_raft_last_log_index",
        "Index of the last entry in this node's log",
    ),
    (
        "xce_raft_applied_index",
        "Index of the last entry applied to the job table",
    ),
    (
        "xce_raft_snapshot_index",
        "Index the latest snapshot covers",
    ),
    (
        "xce_log_entries",
        "Entries kept in the log (since the last purge)",
    ),
    (
        "xce_log_bytes",
        "Size of the log store on disk: the log's segments (log/) and raft.meta",
    ),
    ("xce_snapshot_bytes", "Size of the latest snapshot file"),
    (
        "xce_quorum_ack_age_seconds",
        "On the leader: time since a quorum last acknowledged it (-1 elsewhere)",
    ),
    (
        "xce_adaptive_lease_seconds",
        "C15: how long this node waits without an append before it campaigns, as a leader \
             without answers before it calls itself cut off: election-max on a quiet link, \
             stretched up to the ceiling on a slow one",
    ),
    (
        "xce_link_silence_seconds",
        "C15: the worst recent silence of a live peer (the third-longest gap between its \
             messages in the last 10 s) that the adaptive lease follows",
    ),
    (
        "xce_log_flush_pending_bytes",
        "On the primary: bytes of its own log appends not yet on its disk (writes commit \
             on the standbys' disks meanwhile; at 16 MiB the primary waits)",
    ),
    (
        "xce_state_digest_seconds",
        "C19: hashing this node's state at a checkpoint entry (off the apply path)",
    ),
    (
        "xce_state_digest_mismatch",
        "C19: on the primary, members found with a state digest other than the majority's \
             (or digests without a majority), counted once per check that finds them",
    ),
    (
        "xce_alarms",
        "Alarms this node reports (status shows their texts): a diverged member, its own \
             divergence",
    ),
    (
        "xce_state_digest_checked_index",
        "C19: on the primary, the last log index at which every member that answered had \
             the same state digest (0 elsewhere)",
    ),
    (
        "xce_raft_refused",
        "Raft messages this node refused before reading them, by why: cluster (another \
             cluster or restore, C20), diverged (this node diverged, C19), catching_up (an \
             append or snapshot refused by a node that lost its data, below its floor, C12)",
    ),
    (
        "xce_storage_faults",
        "C21: failed writes, fsyncs or reads of this node's data directory, by what was \
             written (log_append, log_flush, log_truncate, log_purge, vote, snapshot, marker, \
             cluster_id, read, raft): the first one stops the node, which exits with status 74",
    ),
    (
        "xce_storage_fault",
        "C21: 1 once this node's storage failed (it serves and votes no more and exits)",
    ),
    (
        "xce_db_size_bytes",
        "C24: bytes on disk of every file in this node's data directory (log, state, \
             snapshots, markers)",
    ),
    (
        "xce_disk_free_bytes",
        "C24: free bytes of the data directory's filesystem (what the node's user may \
             still write)",
    ),
    (
        "xce_quota_bytes",
        "C24: the quota (--quota-bytes): past it, or below the disk floor, the NOSPACE \
             alarm is raised and the primary refuses new work",
    ),
    (
        "xce_nospace_alarm",
        "C24: 1 while the NOSPACE alarm is raised on this node (past the quota, or below \
             the disk floor): a primary refuses job submissions and tasks",
    ),
    (
        "xce_peer_match_index",
        "On the primary: the last log index each member is known to hold",
    ),
    (
        "xce_peer_last_contact_seconds",
        "On the primary: time since each member last answered an append or heartbeat \
             (-1: never in this term)",
    ),
    (
        "xce_peer_round_trip_seconds",
        "On the primary: the worst recent gap between a member's answers (the third-longest \
             of the last 10 s, what the adaptive lease follows): its round trip on a busy link, \
             the heartbeat interval on a quiet one",
    ),
];

impl Metrics {
    fn new() -> Metrics {
        let mut r = Registry::default();
        let r = &mut r;
        let m = Metrics {
            term: reg(r, "xce_raft_term", Gauge64::default()),
            is_primary: reg(r, "xce_is_primary", Gauge64::default()),
            leader_changes: reg(r, "xce_leader_changes", Counter::default()),
            // 50 µs .. ~3.3 s: an fsync on a fast disk to a commit across a slow election.
            commit: reg(
                r,
                "xce_commit_seconds",
                Histogram::new(exponential_buckets(0.000_05, 2.0, 17)),
            ),
            fsync: reg(
                r,
                "xce_fsync_seconds",
                Histogram::new(exponential_buckets(0.000_01, 2.0, 18)),
            ),
            appends: reg(r, "xce_raft_appends_received", Family::default()),
            ops: reg(r, "xce_ops", Family::default()),
            forwards: reg(r, "xce_forwards", Family::default()),
            pre_votes: reg(r, "xce_pre_votes", Family::default()),
            campaigns: reg(r, "xce_campaigns", Family::default()),
            connections: reg(r, "xce_client_connections", Gauge64::default()),
            cursors: reg(r, "xce_listing_cursors", Gauge64::default()),
            last_log_index: reg(r, "xce_raft_last_log_index", Gauge64::default()),
            applied_index: reg(r, "xce_raft_applied_index", Gauge64::default()),
            snapshot_index: reg(r, "xce_raft_snapshot_index", Gauge64::default()),
            log_entries: reg(r, "xce_log_entries", Gauge64::default()),
            db_bytes: reg(r, "xce_log_bytes", Gauge64::default()),
            snapshot_bytes: reg(r, "xce_snapshot_bytes", Gauge64::default()),
            quorum_ack_age: reg(r, "xce_quorum_ack_age_seconds", GaugeF::default()),
            adaptive_lease: reg(r, "xce_adaptive_lease_seconds", GaugeF::default()),
            link_silence: reg(r, "xce_link_silence_seconds", GaugeF::default()),
            flush_pending: reg(r, "xce_log_flush_pending_bytes", Gauge64::default()),
            // 100 µs .. ~52 s: a small table to 10^7 jobs.
            digest: reg(
                r,
                "xce_state_digest_seconds",
                Histogram::new(exponential_buckets(0.000_1, 2.0, 20)),
            ),
            digest_mismatch: reg(r, "xce_state_digest_mismatch", Counter::default()),
            alarms: reg(r, "xce_alarms", Gauge64::default()),
            checked_index: reg(r, "xce_state_digest_checked_index", Gauge64::default()),
            refused: reg(r, "xce_raft_refused", Family::default()),
            storage_faults: reg(r, "xce_storage_faults", Family::default()),
            storage_fault: reg(r, "xce_storage_fault", Gauge64::default()),
            db_size: reg(r, "xce_db_size_bytes", Gauge64::default()),
            disk_free: reg(r, "xce_disk_free_bytes", Gauge64::default()),
            quota: reg(r, "xce_quota_bytes", Gauge64::default()),
            nospace: reg(r, "xce_nospace_alarm", Gauge64::default()),
            peer_match: reg(r, "xce_peer_match_index", Family::default()),
            peer_contact: reg(r, "xce_peer_last_contact_seconds", Family::default()),
            peer_round_trip: reg(r, "xce_peer_round_trip_seconds", Family::default()),
            registry: Registry::default(),
        };
        // Issue 26: what runs, for a rolling upgrade (`xce_build_info{version,commit} 1`).
        r.register(
            "xce_build",
            "What this node runs: the version and the commit it was built from",
            prometheus_client::metrics::info::Info::new(vec![
                ("version", crate::base::build::VERSION.to_string()),
                ("commit", crate::base::build::COMMIT.to_string()),
            ]),
        );
        export_at_zero(&m);
        Metrics {
            registry: std::mem::take(r),
            ..m
        }
    }
}

/// Issue 36: a labelled counter is exported at 0 from the start, for every label it can take
/// (before: it appeared only after its first event, and a query over it found nothing
/// instead of 0).
fn export_at_zero(m: &Metrics) {
    for outcome in ["replied", "unreachable", "refused", "lost", "unstamped"] {
        let _ = m.forwards.get_or_create(&ForwardLabels { outcome });
    }
    for answer in ["granted", "refused"] {
        let _ = m.pre_votes.get_or_create(&AnswerLabels { answer });
    }
    for outcome in ["campaigned", "not_granted", "called_off", "handover"] {
        let _ = m.campaigns.get_or_create(&ForwardLabels { outcome });
    }
    for kind in ["entries", "empty"] {
        let _ = m.appends.get_or_create(&KindLabels { kind });
    }
    for why in ["cluster", "diverged"] {
        let _ = m.refused.get_or_create(&WhyLabels { why });
    }
    for op in STORAGE_OPS {
        let _ = m.storage_faults.get_or_create(&StorageLabels { op });
    }
}

/// Registers `metric` under `name` with its help text from [`HELP`]; the metric back.
fn reg<T>(r: &mut Registry, name: &'static str, metric: T) -> T
where
    T: prometheus_client::registry::Metric + Clone,
{
    let help = HELP.iter().find(|(n, _)| *n == name).map_or("", |(_, h)| h);
    r.register(name, help, metric.clone());
    metric
}

/// What `xce_storage_faults_total{op}` counts (`base/fault.rs`'s callers).
pub const STORAGE_OPS: [&str; 9] = [
    "log_append",
    "log_flush",
    "log_truncate",
    "log_purge",
    "vote",
    "snapshot",
    "marker",
    "read",
    "raft",
];

/// C24: the NOSPACE alarm is raised (`true`) or cleared (`base/disk.rs`).
pub fn nospace(on: bool) {
    M.nospace.set(on as i64);
}

/// C19: hashing the state at a checkpoint took `d` (digests hook).
pub fn digest_took(d: Duration) {
    M.digest.observe(d.as_secs_f64());
}

/// C19: the check found `n` members whose digest is not the majority's (check hook).
pub fn digest_mismatch(n: u64) {
    M.digest_mismatch.inc_by(n);
}

/// A raft message was refused: `cluster` (C20), `diverged` (C19) or `catching_up` (C12) (raft
/// server hook).
pub fn raft_refused(why: &'static str) {
    M.refused.get_or_create(&WhyLabels { why }).inc();
}

/// The primary's own appends not yet on its disk now total `bytes` (store hook).
pub fn flush_pending(bytes: usize) {
    M.flush_pending
        .set(i64::try_from(bytes).unwrap_or(i64::MAX));
}

/// C21: a write, fsync or read of the data directory failed (`base/fault.rs`).
pub fn storage_fault(op: &'static str) {
    M.storage_faults.get_or_create(&StorageLabels { op }).inc();
    M.storage_fault.set(1);
}

/// This node received an AppendEntries, with log entries or without (raft server hook).
pub fn append_received(with_entries: bool) {
    let kind = if with_entries { "entries" } else { "empty" };
    M.appends.get_or_create(&KindLabels { kind }).inc();
}

/// A durable log append took `d` (store hook).
pub fn fsync(d: Duration) {
    M.fsync.observe(d.as_secs_f64());
}

/// A client request `op` was answered with `status`; `write_took` is the time a successful
/// write took to commit (server hook).
pub fn op(op: &'static str, status: i32, write_took: Option<Duration>) {
    M.ops
        .get_or_create(&OpLabels {
            op,
            status: status_name(status),
        })
        .inc();
    if let (0, Some(d)) = (status, write_took) {
        M.commit.observe(d.as_secs_f64());
    }
}

/// A client request was forwarded to the primary (C16) with this `outcome`: `replied`,
/// `unreachable`, `refused`, `lost`; `unstamped`: refused while this node had no cluster id
/// yet (C20), sent again once it has (counted besides the final outcome).
pub fn forward(outcome: &'static str) {
    M.forwards.get_or_create(&ForwardLabels { outcome }).inc();
}

/// This node answered a candidate's pre-vote (C15) with `granted` (raft server hook).
pub fn pre_vote(granted: bool) {
    let answer = if granted { "granted" } else { "refused" };
    M.pre_votes.get_or_create(&AnswerLabels { answer }).inc();
}

/// This node's election timer or a handover led to `outcome`: `campaigned`, `not_granted`,
/// `called_off`, `handover` (raft/elect.rs and raft/handover.rs hooks).
pub fn campaign(outcome: &'static str) {
    M.campaigns.get_or_create(&ForwardLabels { outcome }).inc();
}

/// Counts an open client connection until dropped (server hook).
pub struct Connection(());

pub fn connection() -> Connection {
    M.connections.inc();
    Connection(())
}

impl Drop for Connection {
    fn drop(&mut self) {
        M.connections.dec();
    }
}

/// A bounded label for a reply status.
fn status_name(status: i32) -> &'static str {
    use xce_proto::error::*;
    match -status {
        0 => "ok",
        E_XCE_REDIRECT => "redirect",
        E_XCE_NOMASTER => "nomaster",
        E_XCE_NOT_READY => "not_ready",
        E_XCE_STANDBY => "standby",
        E_XCE_DUP_JOB => "dup",
        E_XCE_PROTO => "proto",
        E_XCE_AUTH => "auth",
        E_XCE_TOOBIG => "toobig",
        E_XCE_NOSPACE => "nospace",
        libc::ENOENT => "enoent",
        libc::EINVAL => "einval",
        libc::EEXIST => "eexist",
        libc::EPERM => "eperm",
        libc::ESTALE => "estale",
        libc::EBUSY => "ebusy",
        _ if status > 0 => "ok",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_kinds_are_prometheus_ones() {
        fsync(Duration::from_micros(70));
        op("jobsubmit", 0, Some(Duration::from_millis(1)));
        op("jobsubmit", -xce_proto::error::E_XCE_STANDBY, None);
        let _c = connection();
        pre_vote(true);
        campaign("not_granted");
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &M.registry).unwrap();
        for want in [
            "# TYPE xce_raft_term gauge",
            "# TYPE xce_leader_changes counter",
            "xce_leader_changes_total 0",
            "# TYPE xce_commit_seconds histogram",
            "xce_commit_seconds_count 1",
            "xce_fsync_seconds_bucket{le=\"0.00008\"} 1",
            "xce_ops_total{op=\"jobsubmit\",status=\"ok\"} 1",
            "xce_ops_total{op=\"jobsubmit\",status=\"standby\"} 1",
            "xce_client_connections 1",
            "xce_pre_votes_total{answer=\"granted\"} 1",
            "xce_campaigns_total{outcome=\"not_granted\"} 1",
            "# EOF",
        ] {
            assert!(out.contains(want), "{want:?} not in\n{out}");
        }
        // Every metric is exported with its help text (a family without a member yet, such
        // as the per-peer ones, prints nothing), each name once in the table.
        for (name, help) in HELP {
            assert!(!help.is_empty(), "{name}");
            assert_eq!(HELP.iter().filter(|(n, _)| n == name).count(), 1, "{name}");
            let line = format!("# HELP {name} {help}.");
            let family = name.starts_with("xce_peer_");
            assert!(family || out.contains(&line), "{line:?} not in\n{out}");
        }
    }
}
