//! C18: the node's metrics in the Prometheus text format (OpenMetrics), served over HTTP by
//! `run --metrics ADDR` at `/metrics`.
//!
//! One registry per process (one node per process), built on `prometheus-client`. Counters and
//! histograms are fed by small hooks where things happen (`fsync` in the log store, `op` and
//! `connection` in the client server, leader changes by a watcher of openraft's metrics);
//! gauges (term, role, indexes, sizes, cursors) are read from the node when scraped.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use openraft::ServerState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::ids::NodeId;
use crate::server::Ctx;
use crate::types::Raft;

/// Bound on reading one HTTP request head and writing its answer.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request head accepted (a scraper sends a few hundred bytes).
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// Concurrent scrapes served; more are closed at once.
pub const MAX_SCRAPERS: usize = 16;
/// The content type of the OpenMetrics text `prometheus-client` writes.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ForwardLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnswerLabels {
    answer: &'static str,
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

struct Metrics {
    registry: Registry,
    term: Gauge64,
    is_primary: Gauge64,
    leader_changes: Counter,
    commit: Histogram,
    fsync: Histogram,
    ops: Family<OpLabels, Counter>,
    forwards: Family<ForwardLabels, Counter>,
    pre_votes: Family<AnswerLabels, Counter>,
    campaigns: Family<ForwardLabels, Counter>,
    connections: Gauge64,
    cursors: Gauge64,
    last_log_index: Gauge64,
    applied_index: Gauge64,
    snapshot_index: Gauge64,
    log_entries: Gauge64,
    db_bytes: Gauge64,
    snapshot_bytes: Gauge64,
    quorum_ack_age: GaugeF,
    flush_pending: Gauge64,
    appends: Family<KindLabels, Counter>,
}

static M: LazyLock<Metrics> = LazyLock::new(Metrics::new);

impl Metrics {
    fn new() -> Metrics {
        let mut r = Registry::default();
        let m = Metrics {
            registry: Registry::default(),
            term: Gauge64::default(),
            is_primary: Gauge64::default(),
            leader_changes: Counter::default(),
            // 50 µs .. ~3.3 s: an fsync on a fast disk to a commit across a slow election.
            commit: Histogram::new(exponential_buckets(0.000_05, 2.0, 17)),
            fsync: Histogram::new(exponential_buckets(0.000_01, 2.0, 18)),
            ops: Family::default(),
            forwards: Family::default(),
            pre_votes: Family::default(),
            campaigns: Family::default(),
            connections: Gauge64::default(),
            cursors: Gauge64::default(),
            last_log_index: Gauge64::default(),
            applied_index: Gauge64::default(),
            snapshot_index: Gauge64::default(),
            log_entries: Gauge64::default(),
            db_bytes: Gauge64::default(),
            snapshot_bytes: Gauge64::default(),
            quorum_ack_age: GaugeF::default(),
            flush_pending: Gauge64::default(),
            appends: Family::default(),
        };
        r.register("xce_raft_term", "Current Raft term", m.term.clone());
        r.register(
            "xce_is_primary",
            "1 while this node is the serving primary (a leader heard by its quorum)",
            m.is_primary.clone(),
        );
        r.register(
            "xce_leader_changes",
            "Changes of the known leader seen by this node",
            m.leader_changes.clone(),
        );
        r.register(
            "xce_commit_seconds",
            "Time from a client write's arrival to its commit and apply (successful writes)",
            m.commit.clone(),
        );
        r.register(
            "xce_fsync_seconds",
            "Durable log commits: one redb commit (fsync) each; on the primary, appends that \
             queued while one ran share the next",
            m.fsync.clone(),
        );
        r.register(
            "xce_raft_appends_received",
            "AppendEntries this node received from a leader, by kind: entries (log entries to \
             store), empty (a heartbeat; it also carries the leader's commit index)",
            m.appends.clone(),
        );
        r.register(
            "xce_ops",
            "Client requests answered, by op and status",
            m.ops.clone(),
        );
        r.register(
            "xce_forwards",
            "Client requests this standby forwarded to the primary (C16), by outcome",
            m.forwards.clone(),
        );
        r.register(
            "xce_pre_votes",
            "Pre-votes (C15) this node answered for a candidate, by answer",
            m.pre_votes.clone(),
        );
        r.register(
            "xce_campaigns",
            "Elections this node considered, by outcome: campaigned after a granted pre-vote, \
             not_granted (no quorum said yes: no term raised), handover (C14, no pre-vote)",
            m.campaigns.clone(),
        );
        r.register(
            "xce_client_connections",
            "Open client connections",
            m.connections.clone(),
        );
        r.register(
            "xce_listing_cursors",
            "Paged listings pinned on this node",
            m.cursors.clone(),
        );
        r.register(
            "xce_raft_last_log_index",
            "Index of the last entry in this node's log",
            m.last_log_index.clone(),
        );
        r.register(
            "xce_raft_applied_index",
            "Index of the last entry applied to the job table",
            m.applied_index.clone(),
        );
        r.register(
            "xce_raft_snapshot_index",
            "Index the latest snapshot covers",
            m.snapshot_index.clone(),
        );
        r.register(
            "xce_log_entries",
            "Entries kept in the log (since the last purge)",
            m.log_entries.clone(),
        );
        r.register(
            "xce_log_bytes",
            "Size of the log database file (raft.redb)",
            m.db_bytes.clone(),
        );
        r.register(
            "xce_snapshot_bytes",
            "Size of the latest snapshot file",
            m.snapshot_bytes.clone(),
        );
        r.register(
            "xce_quorum_ack_age_seconds",
            "On the leader: time since a quorum last acknowledged it (-1 elsewhere)",
            m.quorum_ack_age.clone(),
        );
        r.register(
            "xce_log_flush_pending_bytes",
            "On the primary: bytes of its own log appends not yet on its disk (writes commit \
             on the standbys' disks meanwhile; at 16 MiB the primary waits)",
            m.flush_pending.clone(),
        );
        Metrics { registry: r, ..m }
    }
}

/// The primary's own appends not yet on its disk now total `bytes` (store hook).
pub fn flush_pending(bytes: usize) {
    M.flush_pending
        .set(i64::try_from(bytes).unwrap_or(i64::MAX));
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
/// `unreachable`, `refused`, `lost`.
pub fn forward(outcome: &'static str) {
    M.forwards.get_or_create(&ForwardLabels { outcome }).inc();
}

/// This node answered a candidate's pre-vote (C15) with `granted` (raft server hook).
pub fn pre_vote(granted: bool) {
    let answer = if granted { "granted" } else { "refused" };
    M.pre_votes.get_or_create(&AnswerLabels { answer }).inc();
}

/// This node's election timer or a handover led to `outcome`: `campaigned`, `not_granted`,
/// `handover` (elect.rs and handover.rs hooks).
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
    use xce::error::*;
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

/// Counts changes of the leader this node knows (C18): every time it learns of a leader other
/// than the last one it knew. (Server metrics: they change with the leader, not on every turn
/// of the Raft core as `raft.metrics()` does.)
pub async fn watch_leader(raft: Raft) {
    let mut rx = raft.server_metrics();
    let mut last: Option<NodeId> = None;
    loop {
        let leader = rx.borrow_and_update().current_leader;
        if let Some(l) = leader {
            if last.is_some_and(|p| p != l) {
                M.leader_changes.inc();
            }
            if last.is_none() {
                // The first leader a node learns of after (re)starting is a change too: an
                // election happened, or this node joined one.
                M.leader_changes.inc();
            }
            last = Some(l);
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

fn file_len(p: &std::path::Path) -> i64 {
    std::fs::metadata(p).map(|m| m.len() as i64).unwrap_or(0)
}

/// Reads the gauges from the node, then the whole registry as text.
fn render(ctx: &Ctx, data: &std::path::Path) -> String {
    let m = ctx.raft.metrics().borrow().clone();
    let idx = |i: Option<u64>| i.map_or(0, |i| i as i64);
    M.term.set(m.current_term as i64);
    M.is_primary
        .set((m.state == ServerState::Leader && !ctx.leader_cut_off()) as i64);
    M.last_log_index.set(idx(m.last_log_index));
    M.applied_index.set(idx(m.last_applied.map(|l| l.index)));
    M.snapshot_index.set(idx(m.snapshot.map(|l| l.index)));
    let first = m.purged.map_or(0, |p| p.index + 1);
    M.log_entries.set(
        m.last_log_index
            .map_or(0, |l| (l + 1).saturating_sub(first)) as i64,
    );
    M.db_bytes.set(file_len(&data.join("raft.redb")));
    M.snapshot_bytes
        .set(file_len(&crate::snapshot::current_path(data)));
    M.cursors.set(ctx.cursors.len() as i64);
    M.quorum_ack_age
        .set(match (m.state, m.millis_since_quorum_ack) {
            (ServerState::Leader, Some(ms)) => ms as f64 / 1000.0,
            _ => -1.0,
        });
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &M.registry);
    out
}

/// Serves `GET /metrics` on `listener` until the process ends.
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>, data: std::path::PathBuf) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_SCRAPERS));
    let data = Arc::new(data);
    let render_lock = Arc::new(Mutex::new(()));
    loop {
        let Ok((s, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let (ctx, data, lock) = (ctx.clone(), data.clone(), render_lock.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let work = answer(s, peer, move || {
                let _one = lock.lock().expect("render lock");
                render(&ctx, &data)
            });
            let _ = tokio::time::timeout(HTTP_TIMEOUT, work).await;
        });
    }
}

/// One HTTP/1.x exchange: the request head, then one answer and close.
async fn answer(
    mut s: TcpStream,
    _peer: SocketAddr,
    render: impl FnOnce() -> String,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_REQUEST_HEAD {
            return respond(
                &mut s,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
            )
            .await;
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => respond(&mut s, "200 OK", CONTENT_TYPE, &render()).await,
        ("HEAD", "/metrics") => respond(&mut s, "200 OK", CONTENT_TYPE, "").await,
        ("GET" | "HEAD", _) => {
            respond(&mut s, "404 Not Found", "text/plain", "see /metrics\n").await
        }
        _ => respond(&mut s, "405 Method Not Allowed", "text/plain", "").await,
    }
}

async fn respond(s: &mut TcpStream, status: &str, ctype: &str, body: &str) -> std::io::Result<()> {
    let msg = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(msg.as_bytes()).await?;
    s.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_kinds_are_prometheus_ones() {
        fsync(Duration::from_micros(70));
        op("jobsubmit", 0, Some(Duration::from_millis(1)));
        op("jobsubmit", -xce::error::E_XCE_STANDBY, None);
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
    }
}
