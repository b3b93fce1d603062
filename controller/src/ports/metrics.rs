//! C18: the metrics endpoint of `run --metrics ADDR`: `GET /metrics` answers the registry
//! of [`crate::base::counters`] as text, after reading the gauges (term, role, indexes, sizes,
//! cursors) from the node; and the watcher that counts leader changes.
//!
//! In a build with failpoints (`base/failpoints.rs`) only, it also lets another process set
//! them, as TiKV's status server does: `PUT /fail/NAME` (the body: the `fail` crate's actions,
//! e.g. `pause`, `return(EIO)`), `DELETE /fail/NAME`, `GET /fail` (what is set). A release
//! build answers 404 there.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::ServerState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::base::counters::M;
use crate::base::failpoints;
use crate::base::ids::NodeId;
use crate::node::ctx::Ctx;
use crate::raft::types::Raft;

/// Bound on reading one HTTP request head and writing its answer.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request head accepted (a scraper sends a few hundred bytes).
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// Longest request body accepted (a failpoint's actions).
pub const MAX_REQUEST_BODY: usize = 1024;
/// Connections served at once; a newcomer evicts the oldest (issue 27: 16 idle connections
/// held every slot for [`HTTP_TIMEOUT`] and each scrape meanwhile was closed unanswered).
pub const MAX_SCRAPERS: usize = 16;
/// The content type of the OpenMetrics text `prometheus-client` writes.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The Prometheus text format's (issue 36: served unless OpenMetrics is asked for).
const PROMETHEUS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Issue 36: content negotiation. OpenMetrics when the request's `Accept` names it (as
/// Prometheus's scraper does, preferring it); else the Prometheus text format, the default of
/// scrapers that ask for `text/plain` or for anything.
fn wants_openmetrics(head: &str) -> bool {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case("accept"))
        .any(|(_, v)| {
            v.split(',').any(|t| {
                let mut parts = t.split(';');
                let ty = parts.next().unwrap_or("").trim();
                let q_zero = parts.any(|p| {
                    p.trim()
                        .strip_prefix("q=")
                        .and_then(|q| q.trim().parse::<f64>().ok())
                        .is_some_and(|q| q <= 0.0)
                });
                ty.eq_ignore_ascii_case("application/openmetrics-text") && !q_zero
            })
        })
}

/// The content type and body for a request with `head`, of the OpenMetrics text `om`.
fn negotiated(head: &str, om: String) -> (&'static str, String) {
    if wants_openmetrics(head) {
        (CONTENT_TYPE, om)
    } else {
        (PROMETHEUS_TYPE, to_prometheus_text(&om))
    }
}

/// The OpenMetrics text `prometheus-client` writes, in the Prometheus text format (0.0.4): a
/// counter family's `HELP`/`TYPE` name its samples' `_total` name, an info family is a gauge
/// named `_info`, and `# UNIT` and `# EOF` go.
pub fn to_prometheus_text(om: &str) -> String {
    let mut kinds: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for l in om.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            if let Some((name, kind)) = rest.split_once(' ') {
                kinds.insert(name, kind);
            }
        }
    }
    let mut out = String::with_capacity(om.len());
    for l in om.lines() {
        if l == "# EOF" || l.starts_with("# UNIT ") {
            continue;
        }
        let meta = l
            .strip_prefix("# TYPE ")
            .map(|r| ("TYPE", r))
            .or_else(|| l.strip_prefix("# HELP ").map(|r| ("HELP", r)));
        if let Some((what, rest)) = meta {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            let (name, tail) = match kinds.get(name).copied() {
                Some("counter") => (format!("{name}_total"), tail.to_string()),
                Some("info") if what == "TYPE" => (format!("{name}_info"), "gauge".to_string()),
                Some("info") => (format!("{name}_info"), tail.to_string()),
                _ => (name.to_string(), tail.to_string()),
            };
            out.push_str(&format!("# {what} {name} {tail}\n"));
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    out
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

/// Issue 36: per member, on the primary: the index it holds, its last answer and round trip.
/// Elsewhere (and for members no longer there) the series go.
fn peer_gauges(ctx: &Ctx) {
    use crate::base::counters::PeerLabels;
    M.peer_match.clear();
    M.peer_contact.clear();
    M.peer_round_trip.clear();
    for p in crate::node::peers::peers(ctx) {
        let l = PeerLabels {
            peer: p.id.to_string(),
        };
        M.peer_match
            .get_or_create(&l)
            .set(p.matched.map_or(-1, |i| i as i64));
        let (contact, rtt) = p
            .contact
            .map_or((-1.0, -1.0), |(c, r)| (c.as_secs_f64(), r.as_secs_f64()));
        M.peer_contact.get_or_create(&l).set(contact);
        M.peer_round_trip.get_or_create(&l).set(rtt);
    }
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
    // C24: the log store — the log's segments and the metadata file.
    M.db_bytes
        .set(i64::try_from(crate::raft::store::disk_bytes(data)).unwrap_or(i64::MAX));
    // C24: the whole data directory and its filesystem.
    if let Some(g) = crate::base::disk::guard() {
        let u = g.usage();
        M.db_size.set(i64::try_from(u.db_bytes).unwrap_or(i64::MAX));
        M.disk_free
            .set(i64::try_from(u.free_bytes).unwrap_or(i64::MAX));
        M.quota.set(i64::try_from(g.quota).unwrap_or(i64::MAX));
    }
    peer_gauges(ctx);
    M.snapshot_bytes
        .set(file_len(&crate::sm::snapshot::current_path(data)));
    M.cursors.set(ctx.cursors.len() as i64);
    M.alarms.set(ctx.alarms().len() as i64);
    M.checked_index.set(ctx.findings.checked() as i64);
    M.quorum_ack_age
        .set(match (m.state, m.millis_since_quorum_ack) {
            (ServerState::Leader, Some(ms)) => ms as f64 / 1000.0,
            _ => -1.0,
        });
    let pace = ctx.elect.pace();
    let now = crate::base::clock::BootInstant::now();
    M.adaptive_lease.set(pace.lease_at(now).as_secs_f64());
    M.link_silence.set(pace.worst(now).as_secs_f64());
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &M.registry);
    out
}

/// Serves `GET /metrics` on `listener` until the process ends. Connections are a crowd of
/// [`MAX_SCRAPERS`] (`base/crowd.rs`): a new one evicts the oldest, so connections that send
/// nothing cannot starve a scraper — an answer takes milliseconds, an idle connection is the
/// oldest long before its [`HTTP_TIMEOUT`].
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>, data: std::path::PathBuf) {
    let crowd = crate::base::crowd::Crowd::new(MAX_SCRAPERS);
    let data = Arc::new(data);
    let render_lock = Arc::new(Mutex::new(()));
    loop {
        let Ok((s, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (place, _) = crowd.enter();
        let (ctx, data, lock) = (ctx.clone(), data.clone(), render_lock.clone());
        tokio::spawn(async move {
            let hctx = ctx.clone();
            let work = answer(
                s,
                peer,
                move || {
                    let _one = lock.lock().expect("render lock");
                    render(&ctx, &data)
                },
                move || async move { health_of(&hctx).await },
            );
            tokio::select! {
                _ = tokio::time::timeout(HTTP_TIMEOUT, work) => {}
                () = place.evicted() => {}
            }
        });
    }
}

/// Issue 26: `GET /health` for a load balancer or a supervisor: 200 while this node is part
/// of a working cluster — the serving primary, or a standby following a primary it heard from
/// within the election timeout — else 503 (no primary known, a candidate, not initialised,
/// diverged, a storage fault). The body says why, one JSON object: `status` ("ok" or
/// "unavailable"), `id`, `role`, `term`, `leader` (0: none), `version`, `uptime_ms`.
pub async fn health_of(ctx: &Ctx) -> (bool, String) {
    let info = crate::ports::client::info::info(ctx);
    let leader = ctx.fresh_leader().await;
    let ok = !crate::base::fault::faulted()
        && !ctx.diverged.is()
        && match info.role {
            xce_proto::wire::ControllerRole::Primary => ctx.serving_leader(),
            xce_proto::wire::ControllerRole::Standby => leader.is_some_and(|l| l != ctx.id),
            _ => false,
        };
    let role = match info.role {
        xce_proto::wire::ControllerRole::Primary => "primary",
        xce_proto::wire::ControllerRole::Standby => "standby",
        xce_proto::wire::ControllerRole::Candidate => "candidate",
        xce_proto::wire::ControllerRole::Initializing => "initializing",
    };
    let body = serde_json::json!({
        "status": if ok { "ok" } else { "unavailable" },
        "id": ctx.id,
        "role": role,
        "term": info.term,
        "leader": leader.unwrap_or(0),
        "version": crate::base::build::version(),
        "uptime_ms": crate::base::build::uptime_ms(),
    });
    (ok, format!("{body}\n"))
}

/// One HTTP/1.x exchange: the request head, then one answer and close.
async fn answer<H: std::future::Future<Output = (bool, String)>>(
    mut s: TcpStream,
    _peer: SocketAddr,
    render: impl FnOnce() -> String,
    health: impl FnOnce() -> H,
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
    if failpoints::enabled() && (path == "/fail" || path.starts_with("/fail/")) {
        let end = head
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(head.len(), |p| p + 4);
        let (status, body) = match read_body(&mut s, &head[..end], head[end..].to_vec()).await? {
            Some(b) => control(method, path, &b),
            None => (
                "413 Content Too Large",
                format!("at most {MAX_REQUEST_BODY} bytes\n"),
            ),
        };
        return respond(&mut s, status, "text/plain", &body).await;
    }
    match (method, path) {
        ("GET" | "HEAD", "/health") => {
            let (ok, body) = health().await;
            let status = if ok {
                "200 OK"
            } else {
                "503 Service Unavailable"
            };
            let body = if method == "HEAD" {
                String::new()
            } else {
                body
            };
            respond(&mut s, status, "application/json", &body).await
        }
        ("GET" | "HEAD", "/metrics") => {
            let text = if method == "GET" {
                render()
            } else {
                String::new()
            };
            let (ctype, text) = negotiated(&String::from_utf8_lossy(&head), text);
            respond(&mut s, "200 OK", ctype, &text).await
        }
        ("GET" | "HEAD", _) => {
            respond(
                &mut s,
                "404 Not Found",
                "text/plain",
                "see /metrics or /health\n",
            )
            .await
        }
        _ => respond(&mut s, "405 Method Not Allowed", "text/plain", "").await,
    }
}

/// The request body after `head` (`Content-Length`, at most [`MAX_REQUEST_BODY`]; `None`
/// when larger), starting with the bytes already read past the head.
async fn read_body(
    s: &mut TcpStream,
    head: &[u8],
    mut body: Vec<u8>,
) -> std::io::Result<Option<String>> {
    let head = String::from_utf8_lossy(head);
    let len = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    if len > MAX_REQUEST_BODY || body.len() > MAX_REQUEST_BODY {
        return Ok(None);
    }
    let mut chunk = [0u8; 256];
    while body.len() < len {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    Ok(Some(String::from_utf8_lossy(&body).into_owned()))
}

/// The failpoint control (builds with failpoints only): `PUT /fail/NAME` sets NAME to the
/// body, `DELETE /fail/NAME` clears it, `GET /fail` lists what is set.
fn control(method: &str, path: &str, body: &str) -> (&'static str, String) {
    let name = path.strip_prefix("/fail/").unwrap_or("");
    let done = |r: Result<(), String>| match r {
        Ok(()) => ("200 OK", String::new()),
        Err(e) => ("400 Bad Request", format!("{e}\n")),
    };
    match (method, name) {
        ("GET", "") => ("200 OK", failpoints::list()),
        ("PUT", n) if !n.is_empty() => done(failpoints::set(n, body)),
        ("DELETE", n) if !n.is_empty() => done(failpoints::clear(n)),
        _ => ("405 Method Not Allowed", String::new()),
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
    fn accept_chooses_the_format() {
        let prom = "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;version=1.0.0,\
                    application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;\
                    q=0.5,*/*;q=0.1\r\n\r\n";
        assert!(wants_openmetrics(prom));
        for head in [
            "GET /metrics HTTP/1.1\r\n\r\n",
            "GET /metrics HTTP/1.1\r\nAccept: */*\r\n\r\n",
            "GET /metrics HTTP/1.1\r\naccept: text/plain;version=0.0.4\r\n\r\n",
            "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;q=0\r\n\r\n",
        ] {
            assert!(!wants_openmetrics(head), "{head}");
        }
    }

    #[test]
    fn openmetrics_becomes_prometheus_text() {
        let om = "# HELP xce_ops Client requests.\n# TYPE xce_ops counter\n\
                  xce_ops_total{op=\"hello\",status=\"ok\"} 3\n# HELP xce_raft_term Term.\n\
                  # TYPE xce_raft_term gauge\nxce_raft_term 2\n# HELP xce_build What runs.\n\
                  # TYPE xce_build info\nxce_build_info{version=\"0.1.0\"} 1\n# EOF\n";
        let p = to_prometheus_text(om);
        assert_eq!(
            p,
            "# HELP xce_ops_total Client requests.\n# TYPE xce_ops_total counter\n\
             xce_ops_total{op=\"hello\",status=\"ok\"} 3\n# HELP xce_raft_term Term.\n\
             # TYPE xce_raft_term gauge\nxce_raft_term 2\n# HELP xce_build_info What runs.\n\
             # TYPE xce_build_info gauge\nxce_build_info{version=\"0.1.0\"} 1\n"
        );
    }
}
