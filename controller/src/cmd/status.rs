//! `xce-controller status --masters LIST` (C18, amended by issue 26): the cluster at a glance,
//! and a health check a monitor can use. Every master is asked an immediate `waitPrimary` (any
//! node answers it for itself, whatever its role; one that names no primary is asked again,
//! waiting for it to follow one: [`follow_later`]): its role, term, the primary it follows,
//! its progress (log, commit and applied index, last contact), version, uptime, alarms and
//! the membership it holds. The member set comes from the members (the primary's, else the
//! most recent a node holds), every member the list left out is asked too, and answers are
//! counted per node id (one node reached under two names counts once). Then the cluster's id
//! (C20: a member of another cluster is flagged, and two clusters behind one list), a
//! consistency check the primary runs for it (C19) and every alarm a member reports. The
//! verdict is an exit status ([`Health`]): healthy, degraded, no quorum, cannot tell.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xce_proto::wire::{self, ControllerInfo, ControllerRole, Op, ReplyData, Request};

use crate::base::cause::Cause;
use crate::base::config;
use crate::base::tls::client_connector;
use crate::sm::digest::hex;

/// Default bound on asking one master (connect + answer).
pub const DEFAULT_TIMEOUT_MS: u64 = 2000;

/// `status` arguments.
#[derive(Debug, Clone)]
pub struct StatusArgs {
    pub masters: Vec<String>,
    pub timeout: Duration,
    /// C13: `(ca, cert, key)` for a cluster whose client port has TLS (from `--ca`, `--cert`,
    /// `--key`, else `XCE_TLS_CA_FILE`, `XCE_TLS_CERT_FILE`, `XCE_TLS_KEY_FILE`).
    pub tls: Option<(PathBuf, Option<(PathBuf, PathBuf)>)>,
    /// C13: a token for a caller without a certificate (`--token`, else `XCE_AUTH_TOKEN`).
    pub token: String,
    /// `--json`: one JSON object instead of the table.
    pub json: bool,
}

/// Who `status` asks as: TLS and a token, or neither.
#[derive(Default)]
pub struct Caller {
    pub tls: Option<tokio_rustls::TlsConnector>,
    pub token: String,
}

impl Caller {
    /// The caller `a` describes (its TLS files read now).
    pub fn of(a: &StatusArgs) -> Result<Caller, String> {
        Ok(Caller {
            tls: match &a.tls {
                None => None,
                Some((ca, identity)) => Some(
                    client_connector(ca, identity.as_ref())
                        .map_err(|e| format!("TLS files: {e}"))?,
                ),
            },
            token: a.token.clone(),
        })
    }
}

impl StatusArgs {
    pub fn parse(args: &[String]) -> Result<StatusArgs, String> {
        let mut masters = None;
        let mut timeout = Duration::from_millis(DEFAULT_TIMEOUT_MS);
        let env = |k: &str| std::env::var_os(k).map(PathBuf::from);
        let (mut ca, mut cert, mut key) = (
            env("XCE_TLS_CA_FILE"),
            env("XCE_TLS_CERT_FILE"),
            env("XCE_TLS_KEY_FILE"),
        );
        let mut token = std::env::var("XCE_AUTH_TOKEN").unwrap_or_default();
        let mut json = false;
        for (k, v) in config::flag_pairs(args, &["--json"])? {
            match k.as_str() {
                "--json" => json = true,
                "--masters" => {
                    let list: Vec<String> = v
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect();
                    for a in &list {
                        config::check_addr(a).map_err(|e| format!("--masters {a:?}: {e}"))?;
                    }
                    masters = Some(list);
                }
                "--timeout-ms" => timeout = Duration::from_millis(config::num(&k, &v)?),
                "--ca" => ca = Some(v.into()),
                "--cert" => cert = Some(v.into()),
                "--key" => key = Some(v.into()),
                "--token" => token = v.trim().to_string(),
                _ => return Err(format!("unknown option {k}")),
            }
        }
        let masters = masters
            .filter(|m| !m.is_empty())
            .ok_or("--masters is required")?;
        // The CA alone (with a token as the identity), or the CA and a certificate with its key.
        let tls = match (ca, cert, key) {
            (None, None, None) => None,
            (Some(ca), None, None) => Some((ca, None)),
            (Some(ca), Some(cert), Some(key)) => Some((ca, Some((cert, key)))),
            _ => return Err("--cert and --key go together, and need --ca".into()),
        };
        Ok(StatusArgs {
            masters,
            timeout,
            tls,
            token,
            json,
        })
    }
}

/// One master's answer, or why there is none.
pub struct Row {
    pub addr: String,
    pub info: Result<ControllerInfo, String>,
}

/// Asks one master an immediate `waitPrimary` (its answer carries its progress), bounded by
/// `timeout`; if it follows no primary, once more, waiting for it to (see [`follow_later`]).
pub async fn ask(
    addr: String,
    timeout: Duration,
    caller: Arc<Caller>,
) -> Result<ControllerInfo, String> {
    let started = tokio::time::Instant::now();
    let mut info = request(addr.clone(), wait_primary(Duration::ZERO), timeout, &caller)
        .await
        .and_then(info_of)?;
    if info.primary_id == 0 {
        let left = timeout.saturating_sub(started.elapsed());
        follow_later(&mut info, addr, left, &caller).await;
    }
    Ok(info)
}

/// `waitPrimary` waiting up to `wait`, nothing excluded.
fn wait_primary(wait: Duration) -> Op {
    Op::WaitPrimary {
        timeout_ms: wait.as_millis().min(u32::MAX as u128) as u32,
        exclude_host: String::new(),
        exclude_port: 0,
    }
}

/// C18: a standby names its primary only while appends reach it within the minimum election
/// timeout (C16's vouching, 60 ms by default), and on a busy machine one comes late now and
/// then: asked at that moment, a healthy member "followed no one" and the verdict was
/// degraded. So a node that named no primary is asked again, waiting up to half of `left` (1 s
/// by default) for it to follow one; its answer then gives the row its primary, role and term
/// (the progress stays the first answer's: only an immediate answer carries it). A node that
/// still follows no one keeps its first answer, at the cost of that wait (nodes are asked at
/// once).
async fn follow_later(info: &mut ControllerInfo, addr: String, left: Duration, caller: &Caller) {
    let later = request(addr, wait_primary(left / 2), left, caller).await;
    if let Ok(later) = later.and_then(info_of) {
        if later.primary_id != 0 && later.id == info.id {
            info.primary_id = later.primary_id;
            info.primary_host = later.primary_host;
            info.primary_port = later.primary_port;
            info.role = later.role;
            info.term = later.term;
        }
    }
}

/// The controller info a reply carries.
fn info_of(d: ReplyData) -> Result<ControllerInfo, String> {
    match d {
        ReplyData::CtrlInfo(i) => Ok(i),
        _ => Err("an answer without controller info".into()),
    }
}

/// A TLS handshake's failure, named for an operator.
fn tls_error(e: &std::io::Error) -> String {
    let t = e.to_string();
    if t.contains("UnknownIssuer") || t.contains("BadSignature") {
        format!(
            "TLS: the node's certificate is not signed by the CA given (--ca): unknown CA ({t})"
        )
    } else if t.contains("NotValidForName") {
        format!("TLS: the node's certificate does not name the host asked: name mismatch ({t})")
    } else if t.contains("Expired") {
        format!("TLS: a certificate has expired: {t}")
    } else if t.contains("CertificateRequired") || t.contains("certificate required") {
        format!("TLS: the node wants a client certificate (--cert, --key): {t}")
    } else if t.contains("InvalidContentType") || t.contains("corrupt message") {
        format!("TLS: the port does not speak TLS (plaintext? drop --ca): {t}")
    } else {
        format!("TLS: handshake failed: {t}")
    }
}

/// One request on a fresh connection, bounded by `timeout`: the reply's data, or why not.
async fn request(
    addr: String,
    op: Op,
    timeout: Duration,
    caller: &Caller,
) -> Result<ReplyData, String> {
    let work = async {
        let target = config::resolve(&addr)
            .await
            .map_err(|e| format!("{}", Cause::Dns(e)))?;
        // Issue 36: the cause named (nothing listening, unreachable, a timeout).
        let tcp = TcpStream::connect(&target[..])
            .await
            .map_err(|e| format!("connect: {}", Cause::of_io(&e, &addr)))?;
        let mut s: Box<dyn crate::raft::frame::PeerIo> = match &caller.tls {
            None => Box::new(tcp),
            Some(c) => {
                let (host, _) = config::split_addr(&addr).ok_or("want HOST:PORT")?;
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| format!("{host}: {e}"))?;
                Box::new(c.connect(name, tcp).await.map_err(|e| tls_error(&e))?)
            }
        };
        let req = Request {
            seq: 1,
            client_id: [0; 16],
            request_id: 0,
            no_reply: false,
            auth_token: caller.token.clone(),
            forward_within_ms: 0,
            op,
        };
        let mut out = Vec::new();
        wire::encode_request(&req, &mut out);
        s.write_all(&out).await.map_err(|e| format!("send: {e}"))?;
        let limits = wire::Limits::default();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            // A TLS record (an alert, or a handshake) where a reply was due: the port speaks
            // TLS and this caller did not.
            if caller.tls.is_none()
                && buf.len() >= 2
                && matches!(buf[0], 0x15 | 0x16)
                && buf[1] == 3
            {
                return Err(
                    "TLS: the port speaks TLS: give --ca (and --cert/--key, or --token)".into(),
                );
            }
            match wire::frame_len(&buf, &limits) {
                Ok(Some(n)) if n <= buf.len() => {
                    let rep = wire::decode_reply(&buf[..n], &limits)
                        .map_err(|e| format!("bad reply: {e}"))?;
                    return answer_of(rep);
                }
                Err(e) => return Err(format!("bad reply: {e}")),
                _ => {}
            }
            let k = s.read(&mut chunk).await.map_err(|e| format!("recv: {e}"))?;
            if k == 0 {
                return Err(if caller.tls.is_some() {
                    "closed without an answer".into()
                } else {
                    "closed without an answer (a TLS port? give --ca, --cert and --key)".into()
                });
            }
            buf.extend_from_slice(&chunk[..k]);
        }
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} ms", timeout.as_millis())))
}

/// A reply's data, or its status with its name and the node's reason if it said one.
fn answer_of(rep: wire::Reply) -> Result<ReplyData, String> {
    match rep.data {
        ReplyData::None if rep.detail.is_empty() => Err(xce_proto::error::status_text(rep.status)),
        ReplyData::None => Err(format!(
            "{}: {}",
            xce_proto::error::status_text(rep.status),
            rep.detail
        )),
        d => Ok(d),
    }
}

fn role(r: ControllerRole) -> &'static str {
    match r {
        ControllerRole::Primary => "primary",
        ControllerRole::Standby => "standby",
        ControllerRole::Candidate => "candidate",
        ControllerRole::Initializing => "initializing",
    }
}

/// `HOST:PORT`, an IPv6 host in brackets (`[::1]:9991`).
pub fn join_addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The verdict, as the exit status a monitor reads (the Nagios convention: OK, WARNING,
/// CRITICAL, UNKNOWN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// A primary serves, every member answers and follows it, no alarm.
    Healthy = 0,
    /// A primary serves with a quorum, but a member is unreachable, not following, still a
    /// learner, or an alarm is raised (or an older primary still says it leads).
    Degraded = 1,
    /// No primary: writes and reads fail until a majority is back.
    NoQuorum = 2,
    /// Nothing answered (down, the network, TLS), or the list reaches two clusters.
    CannotTell = 3,
}

impl Health {
    pub fn word(self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Degraded => "degraded",
            Health::NoQuorum => "no quorum",
            Health::CannotTell => "cannot tell",
        }
    }
}

/// One node of the member set (or an address that named none): the names it was reached
/// under, its answer (the first), what is wrong.
#[derive(Debug, Clone, Default)]
pub struct Node {
    /// The member's id (0: an address that answered nothing and is no member's).
    pub id: u32,
    pub addrs: Vec<String>,
    pub info: Option<ControllerInfo>,
    /// Why it did not answer (when `info` is `None`).
    pub error: Option<String>,
    /// A voter of the member set (false: a learner, or not in it).
    pub voter: bool,
    /// Whether the member set names it (false: an address of the list that answered as no
    /// member, or did not answer and is no member's address).
    pub member: bool,
}

/// What `status` concluded from the answers: pure, so table-tested.
#[derive(Debug)]
pub struct View {
    pub nodes: Vec<Node>,
    pub cluster: Option<[u8; 16]>,
    /// Node id and term of the primary of the highest term.
    pub primary: Option<(u32, u64)>,
    pub health: Health,
    /// One line each: why the verdict is not healthy, and anything flagged.
    pub notes: Vec<String>,
}

impl View {
    /// How far `i` is behind the primary: the entries of the primary's log it has yet to
    /// apply (`-` without a primary that answered).
    pub fn lag(&self, i: &ControllerInfo) -> String {
        let primary = self.primary.and_then(|(id, _)| {
            self.nodes
                .iter()
                .find(|n| n.member && n.id == id)
                .and_then(|n| n.info.as_ref())
        });
        primary.map_or("-".into(), |p| {
            p.last_log_index.saturating_sub(i.applied_index).to_string()
        })
    }
}

fn is_tls(e: &str) -> bool {
    e.starts_with("TLS")
}

/// Judges the answers. `rows`: every address asked with its answer (the list's and the
/// members' the list left out); `resolved`: for each address, the socket addresses it
/// resolves to (matches an unanswered list address to a member's), may be empty.
pub fn judge(rows: &[Row], resolved: &[(String, Vec<std::net::SocketAddr>)]) -> View {
    let none = [0u8; 16];
    let answered: Vec<(&str, &ControllerInfo)> = rows
        .iter()
        .filter_map(|r| r.info.as_ref().ok().map(|i| (r.addr.as_str(), i)))
        .collect();
    let mut notes = Vec::new();
    // C20: the clusters the answers belong to.
    let mut clusters: Vec<[u8; 16]> = answered
        .iter()
        .map(|(_, i)| i.cluster_id)
        .filter(|c| *c != none)
        .collect();
    clusters.sort_unstable();
    clusters.dedup();
    // The primary: a node that says it is, in the highest term any node reports.
    let top_term = answered.iter().map(|(_, i)| i.term).max().unwrap_or(0);
    let primaries: Vec<&ControllerInfo> = answered
        .iter()
        .map(|(_, i)| *i)
        .filter(|i| i.role == ControllerRole::Primary)
        .collect();
    let primary = primaries.iter().find(|i| i.term == top_term).copied();
    let cluster = primary
        .map(|p| p.cluster_id)
        .or_else(|| clusters.first().copied())
        .filter(|c| *c != none || clusters.is_empty());
    let mut nodes = member_nodes(primary, &answered, cluster);
    place_rows(&mut nodes, rows, cluster, resolved);
    // Two clusters behind one list: primaries of two (a member with another cluster's data but
    // no primary of its own is judged below, flagged).
    let two_clusters = {
        let mut led: Vec<[u8; 16]> = primaries.iter().map(|p| p.cluster_id).collect();
        led.sort_unstable();
        led.dedup();
        clusters.len() > 1 && (led.len() > 1 || primary.is_none())
    };
    // The verdict.
    let errors: Vec<&String> = rows.iter().filter_map(|r| r.info.as_ref().err()).collect();
    let health = if answered.is_empty() {
        if !errors.is_empty() && errors.iter().all(|e| is_tls(e)) {
            notes.push(format!("TLS failure: {}", errors[0]));
        } else {
            notes.push("no node answered: down, unreachable, or the list is wrong".into());
        }
        Health::CannotTell
    } else if two_clusters {
        two_clusters_notes(&clusters, &primaries, &mut notes);
        Health::CannotTell
    } else if let Some(p) = primary {
        let degraded = degraded_notes(p, &primaries, &nodes, cluster, &answered);
        let healthy = degraded.is_empty();
        notes.extend(degraded);
        if healthy {
            Health::Healthy
        } else {
            Health::Degraded
        }
    } else {
        let voters = nodes.iter().filter(|n| n.member && n.voter).count();
        let up = nodes
            .iter()
            .filter(|n| n.member && n.voter && n.info.is_some())
            .count();
        notes.push(no_primary(&nodes, voters, up));
        Health::NoQuorum
    };
    View {
        nodes,
        cluster,
        primary: primary.map(|p| (p.id, p.term)),
        health,
        notes,
    }
}

/// The member set as nodes not yet asked: the primary's, else the one of the most advanced
/// node of `cluster` that holds one.
fn member_nodes(
    primary: Option<&ControllerInfo>,
    answered: &[(&str, &ControllerInfo)],
    cluster: Option<[u8; 16]>,
) -> Vec<Node> {
    let none = [0u8; 16];
    let holder = primary.filter(|p| !p.members.is_empty()).or_else(|| {
        answered
            .iter()
            .map(|(_, i)| *i)
            .filter(|i| !i.members.is_empty() && Some(i.cluster_id) == cluster.or(Some(none)))
            .max_by_key(|i| (i.term, i.last_log_index))
    });
    let members: Vec<wire::ControllerEntry> = holder.map(|h| h.members.clone()).unwrap_or_default();
    members
        .iter()
        .map(|m| Node {
            id: m.id,
            addrs: vec![join_addr(&m.host, m.port)],
            voter: m.role != ControllerRole::Initializing,
            member: true,
            ..Node::default()
        })
        .collect()
}

/// Every address's answer or silence placed on the nodes; a node nobody asked said so.
fn place_rows(
    nodes: &mut Vec<Node>,
    rows: &[Row],
    cluster: Option<[u8; 16]>,
    resolved: &[(String, Vec<std::net::SocketAddr>)],
) {
    for r in rows {
        match &r.info {
            Ok(i) => place_answer(nodes, &r.addr, i, cluster),
            Err(e) => place_silence(nodes, &r.addr, e, resolved),
        }
    }
    for n in nodes
        .iter_mut()
        .filter(|n| n.info.is_none() && n.error.is_none())
    {
        n.error = Some("not asked".into());
    }
}

/// An answer from `addr`: one node per id (of this cluster) — the same node under another
/// name joins it; a node the member set does not name gets a row of its own.
fn place_answer(nodes: &mut Vec<Node>, addr: &str, i: &ControllerInfo, cluster: Option<[u8; 16]>) {
    let none = [0u8; 16];
    let ours = cluster.is_none_or(|c| i.cluster_id == c || i.cluster_id == none);
    let at = nodes
        .iter()
        .position(|n| ours && n.member && n.id == i.id)
        .or_else(|| {
            nodes.iter().position(|n| {
                !n.member
                    && n.info
                        .as_ref()
                        .is_some_and(|x| x.id == i.id && x.cluster_id == i.cluster_id)
            })
        });
    let n = match at {
        Some(k) => &mut nodes[k],
        None => {
            nodes.push(Node {
                id: i.id,
                ..Node::default()
            });
            nodes.last_mut().expect("pushed")
        }
    };
    if !n.addrs.iter().any(|a| a == addr) {
        n.addrs.push(addr.to_string());
    }
    if n.info.is_none() {
        n.info = Some(i.clone());
        n.error = None;
    }
}

/// An address that did not answer: a member's (by name, or by what both resolve to), else a
/// row of its own.
fn place_silence(
    nodes: &mut Vec<Node>,
    addr: &str,
    e: &str,
    resolved: &[(String, Vec<std::net::SocketAddr>)],
) {
    let resolved_of = |a: &str| -> &[std::net::SocketAddr] {
        resolved
            .iter()
            .find(|(x, _)| x == a)
            .map_or(&[][..], |(_, v)| &v[..])
    };
    let mine = resolved_of(addr);
    let at = nodes.iter().position(|n| {
        n.member
            && n.addrs
                .iter()
                .any(|a| *a == addr || resolved_of(a).iter().any(|x| mine.contains(x)))
    });
    match at {
        Some(k) => {
            let n = &mut nodes[k];
            if !n.addrs.iter().any(|a| a == addr) {
                n.addrs.push(addr.to_string());
            }
            if n.info.is_none() && n.error.is_none() {
                n.error = Some(e.to_string());
            }
        }
        None => nodes.push(Node {
            addrs: vec![addr.to_string()],
            error: Some(e.to_string()),
            ..Node::default()
        }),
    }
}

/// TWO CLUSTERS: the notes naming them and their primaries.
fn two_clusters_notes(
    clusters: &[[u8; 16]],
    primaries: &[&ControllerInfo],
    notes: &mut Vec<String>,
) {
    notes.push(format!(
        "TWO CLUSTERS: the list reaches nodes of {} clusters ({}): each is judged on its \
         own only when asked on its own",
        clusters.len(),
        clusters
            .iter()
            .map(|c| hex(c))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    for p in primaries {
        notes.push(format!(
            "primary: node {} of cluster {}, term {}",
            p.id,
            hex(&p.cluster_id),
            p.term
        ));
    }
}

/// With primary `p`: what keeps the cluster from healthy (empty: healthy).
fn degraded_notes(
    p: &ControllerInfo,
    primaries: &[&ControllerInfo],
    nodes: &[Node],
    cluster: Option<[u8; 16]>,
    answered: &[(&str, &ControllerInfo)],
) -> Vec<String> {
    let none = [0u8; 16];
    let mut degraded = Vec::new();
    for q in primaries.iter().filter(|q| q.id != p.id) {
        degraded.push(format!(
            "TWO PRIMARIES: node {} still says it leads in term {} (node {} leads in term \
             {}): it has not heard of the new term yet",
            q.id, q.term, p.id, p.term
        ));
    }
    for n in nodes.iter().filter(|n| n.member) {
        match &n.info {
            None => degraded.push(format!(
                "node {} ({}) does not answer: {}",
                n.id,
                n.addrs.join(", "),
                n.error.as_deref().unwrap_or("-")
            )),
            Some(i) if !n.voter => degraded.push(format!(
                "node {} is a learner (catching up, or a member add that did not finish)",
                i.id
            )),
            Some(i) if i.id != p.id && i.primary_id != p.id => degraded.push(format!(
                "node {} does not follow the primary (it follows {})",
                i.id,
                match i.primary_id {
                    0 => "no one".to_string(),
                    x => format!("node {x}"),
                }
            )),
            Some(_) => {}
        }
    }
    for n in nodes.iter().filter(|n| !n.member) {
        match &n.info {
            Some(i) if Some(i.cluster_id) != cluster && i.cluster_id != none => {
                degraded.push(format!(
                    "node {} ({}) belongs to another cluster ({}): the members refuse it",
                    i.id,
                    n.addrs.join(", "),
                    hex(&i.cluster_id)
                ))
            }
            Some(i) => degraded.push(format!(
                "node {} ({}) answers but is not a member: a removed node still running?",
                i.id,
                n.addrs.join(", ")
            )),
            None => degraded.push(format!(
                "{} is no member's address and does not answer: {}",
                n.addrs.join(", "),
                n.error.as_deref().unwrap_or("-")
            )),
        }
    }
    if answered.iter().any(|(_, i)| !i.alarms.is_empty()) {
        degraded.push("alarms raised (below)".into());
    }
    degraded
}

/// Why no primary serves, in words that agree with the counts (issue 36: "5 of 6 answer, a
/// majority of 4 is needed" said of a cluster whose quorum answered and followed a primary
/// that clients could not reach).
fn no_primary(nodes: &[Node], voters: usize, up: usize) -> String {
    if voters == 0 {
        return "NO QUORUM: no primary, and no node holds a membership".to_string();
    }
    let majority = voters / 2 + 1;
    if up < majority {
        return format!(
            "NO QUORUM: no primary ({up} of {voters} members answer, a majority of {majority} \
             is needed to elect one); writes and reads fail until it is back"
        );
    }
    // A quorum answers: whom do they follow?
    let mut followed: Vec<u32> = nodes
        .iter()
        .filter_map(|n| n.info.as_ref())
        .map(|i| i.primary_id)
        .filter(|&p| p != 0)
        .collect();
    followed.sort_unstable();
    let top = followed
        .chunk_by(|a, b| a == b)
        .max_by_key(|g| g.len())
        .map(|g| (g[0], g.len()));
    match top {
        Some((p, n)) => {
            let (at, why) = nodes.iter().find(|x| x.member && x.id == p).map_or(
                ("-".to_string(), "not a member".to_string()),
                |x| {
                    (
                        x.addrs.join(", "),
                        x.error
                            .clone()
                            .unwrap_or_else(|| "does not say it leads".into()),
                    )
                },
            );
            format!(
                "NO PRIMARY ANSWERS: {up} of {voters} members answer (a quorum) and {n} of them \
                 follow node {p}, which clients cannot reach at {at}: {why}; writes and reads \
                 fail until it answers there (a wrong client address? `leader transfer --to` \
                 another member, or stop it)"
            )
        }
        None => format!(
            "NO PRIMARY: {up} of {voters} members answer (a quorum) but none leads yet (an \
             election in progress?); writes and reads fail until one does"
        ),
    }
}

/// C24: a size in a table column: `-` when not said, else 1024-based with one unit letter.
fn size_text(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    if b == 0 {
        return "-".into();
    }
    let (mut v, mut u) = (b as f64, 0);
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v < 10.0 && u > 0 {
        format!("{v:.1}{}", UNITS[u])
    } else {
        format!("{v:.0}{}", UNITS[u])
    }
}

fn ms_text(ms: u64) -> String {
    match ms {
        0 => "-".into(),
        ms if ms < 120_000 => format!("{}s", ms / 1000),
        ms if ms < 7_200_000 => format!("{}m", ms / 60_000),
        ms if ms < 172_800_000 => format!("{}h", ms / 3_600_000),
        ms => format!("{}d", ms / 86_400_000),
    }
}

/// The table, the verdict and the health lines (C20, C19: the cluster, the consistency
/// check, alarms). `check`: the primary's answer to a consistency check, if one was asked.
pub fn render(view: &View, check: Option<&Result<ControllerInfo, String>>) -> String {
    let mut out = String::new();
    out.push_str(HEAD);
    for n in &view.nodes {
        out.push_str(&row_text(n, view));
    }
    let members = view.nodes.iter().filter(|n| n.member).count();
    let up = view
        .nodes
        .iter()
        .filter(|n| n.member && n.info.is_some())
        .count();
    if let Some((id, term)) = view.primary {
        let at = view
            .nodes
            .iter()
            .find(|n| n.id == id && n.info.is_some())
            .map_or("-".to_string(), |n| n.addrs.join(","));
        out.push_str(&format!(
            "primary: node {id} ({at}), term {term}; {up} of {members} members answer\n"
        ));
    }
    for n in &view.notes {
        out.push_str(n);
        out.push('\n');
    }
    render_health(view, check, &mut out);
    out.push_str(&format!(
        "health: {} (exit {})\n",
        view.health.word(),
        view.health as i32
    ));
    out
}

/// The table's head: the columns of [`row_text`], aligned as it aligns them.
const HEAD: &str = concat!(
    "MASTER                    ID ROLE           TERM LEADER        LOG     COMMIT",
    "    APPLIED      LAG LAST-CONTACT  UPTIME     DB   FREE VERSION\n"
);

/// One node's row of `view`'s table.
fn row_text(n: &Node, view: &View) -> String {
    let addr = n.addrs.join(",");
    match &n.info {
        Some(i) => {
            let lag = view.lag(i);
            let contact = match i.last_contact_ms {
                ms if ms < 0 => "-".to_string(),
                ms => format!("{ms} ms"),
            };
            let mut r = role(i.role).to_string();
            if !n.member {
                r = format!("{r}!");
            } else if !n.voter {
                r = "learner".into();
            }
            let leader = match i.primary_id {
                0 => "-".to_string(),
                x => x.to_string(),
            };
            let up = ms_text(i.uptime_ms);
            let (db, free) = (size_text(i.db_size_bytes), size_text(i.disk_free_bytes));
            let version = if i.version.is_empty() {
                "-"
            } else {
                &i.version
            };
            format!(
                "{addr:<24} {:>3} {r:<12} {:>6} {leader:>6} {:>10} {:>10} {:>10} {lag:>8} \
                 {contact:>12} {up:>7} {db:>6} {free:>6} {version}\n",
                i.id, i.term, i.last_log_index, i.committed_index, i.applied_index
            )
        }
        None => {
            let id = if n.member {
                n.id.to_string()
            } else {
                "?".into()
            };
            format!(
                "{:<24} {:>3} unreachable: {}\n",
                addr,
                id,
                n.error.as_deref().unwrap_or("-")
            )
        }
    }
}

/// C20, C19: the cluster's id, members of another, the consistency check's result (`check`:
/// the primary's answer to `consistencyCheck`), and the alarms every member reports.
fn render_health(view: &View, check: Option<&Result<ControllerInfo, String>>, out: &mut String) {
    let none = [0u8; 16];
    match view.cluster {
        Some(c) if c != none => out.push_str(&format!("cluster: {}\n", hex(&c))),
        Some(_) => out.push_str("cluster: no id recorded yet\n"),
        None => {}
    }
    for n in &view.nodes {
        if let (Some(i), Some(c)) = (&n.info, view.cluster) {
            if i.cluster_id != c && i.cluster_id != none && c != none {
                out.push_str(&format!(
                    "warning: node {} ({}) belongs to cluster {}, not this one: its data is \
                     another cluster's or another restore's; the members refuse it (C20)\n",
                    i.id,
                    n.addrs.join(","),
                    hex(&i.cluster_id)
                ));
            }
        }
    }
    let mut alarms: Vec<String> = Vec::new();
    let mut note = |who: &ControllerInfo, a: &str| {
        let line = format!("  node {}: {a}", who.id);
        // One line per node and kind: two answers of one node (its own and the consistency
        // check's) measure a size a moment apart.
        let kind = |l: &str| {
            l.split_once(": ")
                .map(|(n, r)| (n.to_string(), r.split(':').next().map(str::to_string)))
        };
        if !alarms
            .iter()
            .any(|x| *x == line || (a.starts_with("NOSPACE") && kind(x) == kind(&line)))
        {
            alarms.push(line);
        }
    };
    match check {
        Some(Ok(c)) => {
            if c.checked_index > 0 {
                out.push_str(&format!(
                    "consistency: every member that answered had the same state at index {}\n",
                    c.checked_index
                ));
            } else {
                out.push_str("consistency: no agreement found yet (see the alarms)\n");
            }
            for a in &c.alarms {
                note(c, a);
            }
        }
        Some(Err(e)) => out.push_str(&format!("consistency: not checked: {e}\n")),
        None => {}
    }
    for i in view.nodes.iter().filter_map(|n| n.info.as_ref()) {
        for a in &i.alarms {
            note(i, a);
        }
    }
    if !alarms.is_empty() {
        out.push_str("ALARMS:\n");
        for a in alarms {
            out.push_str(&a);
            out.push('\n');
        }
    }
}

/// The view as one JSON object (`status --json`); the field names are stable
/// (docs/operations.md, "status").
pub fn render_json(view: &View, check: Option<&Result<ControllerInfo, String>>) -> String {
    let nodes: Vec<serde_json::Value> = view
        .nodes
        .iter()
        .map(|n| {
            let mut v = json!({
                "id": n.id,
                "addresses": n.addrs,
                "member": n.member,
                "voter": n.voter,
                "reachable": n.info.is_some(),
            });
            if let Some(i) = &n.info {
                v["role"] = json!(role(i.role));
                v["term"] = json!(i.term);
                v["leader"] = json!(i.primary_id);
                v["log_index"] = json!(i.last_log_index);
                v["commit_index"] = json!(i.committed_index);
                v["applied_index"] = json!(i.applied_index);
                v["last_contact_ms"] = json!(i.last_contact_ms);
                v["version"] = json!(i.version);
                v["uptime_ms"] = json!(i.uptime_ms);
                v["db_size_bytes"] = json!(i.db_size_bytes);
                v["disk_free_bytes"] = json!(i.disk_free_bytes);
                v["quota_bytes"] = json!(i.quota_bytes);
                v["cluster"] = json!(hex(&i.cluster_id));
                v["alarms"] = json!(i.alarms);
            }
            if let Some(e) = &n.error {
                v["error"] = json!(e);
            }
            v
        })
        .collect();
    let consistency = match check {
        Some(Ok(c)) => json!({"checked_index": c.checked_index, "alarms": c.alarms}),
        Some(Err(e)) => json!({"error": e}),
        None => serde_json::Value::Null,
    };
    let v = json!({
        "health": view.health.word(),
        "exit": view.health as i32,
        "cluster": view.cluster.map(|c| hex(&c)),
        "primary": view.primary.map(|(id, term)| json!({"id": id, "term": term})),
        "nodes": nodes,
        "notes": view.notes,
        "consistency": consistency,
    });
    format!("{v}\n")
}

/// Runs the command: prints the table (or `--json`); the exit status is the [`Health`].
pub fn status(args: StatusArgs) -> i32 {
    let caller = match Caller::of(&args) {
        Ok(c) => Arc::new(c),
        Err(why) => {
            if args.json {
                println!(
                    "{}",
                    json!({"health": Health::CannotTell.word(),
                           "exit": Health::CannotTell as i32, "notes": [why]})
                );
            } else {
                println!("cannot tell: {why}");
            }
            return Health::CannotTell as i32;
        }
    };
    let (view, check) = match crate::cmd::block_on(gather(&args, caller, true)) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("status: {e}");
            return Health::CannotTell as i32;
        }
    };
    if args.json {
        print!("{}", render_json(&view, check.as_ref()));
    } else {
        print!("{}", render(&view, check.as_ref()));
    }
    view.health as i32
}

/// Asks the list, then the members the list left out, then (a primary found) a consistency
/// check; resolves the addresses that did not answer, to match them to members.
pub(crate) async fn gather(
    args: &StatusArgs,
    caller: Arc<Caller>,
    consistency: bool,
) -> (View, Option<Result<ControllerInfo, String>>) {
    // Every address of `addrs` at once, each bounded by the timeout.
    let ask_all = |addrs: Vec<String>| {
        let asks = addrs
            .iter()
            .map(|a| ask(a.clone(), args.timeout, caller.clone()));
        let answers = futures_join(asks.collect());
        async move {
            let answers = answers.await;
            let rows = addrs.into_iter().zip(answers);
            rows.map(|(addr, info)| Row { addr, info })
                .collect::<Vec<_>>()
        }
    };
    let mut rows = ask_all(args.masters.clone()).await;
    // The members no answer came from yet (by id), asked at their own addresses.
    let view = judge(&rows, &[]);
    let missing: Vec<String> = view
        .nodes
        .iter()
        .filter(|n| n.member && n.info.is_none())
        .flat_map(|n| n.addrs.first().cloned())
        .filter(|a| !rows.iter().any(|r| &r.addr == a))
        .collect();
    rows.extend(ask_all(missing).await);
    let resolved = resolve_silent(&rows, &view).await;
    let view = judge(&rows, &resolved);
    let mut check = None;
    if let Some((id, _)) = view.primary.filter(|_| consistency) {
        let at = view
            .nodes
            .iter()
            .find(|n| n.id == id && n.info.is_some())
            .and_then(|n| {
                n.addrs
                    .iter()
                    .find(|a| rows.iter().any(|r| &r.addr == *a && r.info.is_ok()))
            })
            .cloned();
        if let Some(at) = at {
            // C19: the primary compares its members' state digests now.
            let asked = request(at, Op::ConsistencyCheck, args.timeout, &caller).await;
            check = Some(asked.and_then(info_of));
        }
    }
    (view, check)
}

/// The names of what did not answer, and of the members, each with what it resolves to (to
/// match an address that did not answer to a member).
async fn resolve_silent(rows: &[Row], view: &View) -> Vec<(String, Vec<std::net::SocketAddr>)> {
    let mut names: Vec<String> = rows
        .iter()
        .filter(|r| r.info.is_err())
        .map(|r| r.addr.clone())
        .collect();
    names.extend(
        view.nodes
            .iter()
            .filter(|n| n.member)
            .flat_map(|n| n.addrs.clone()),
    );
    names.sort();
    names.dedup();
    let mut resolved = Vec::new();
    for n in names {
        let r = config::resolve(&n).await.unwrap_or_default();
        resolved.push((n, r));
    }
    resolved
}

/// Awaits all `futs` concurrently (each is bounded by its own timeout).
async fn futures_join<F: std::future::Future + Send + 'static>(futs: Vec<F>) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("status task"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 16] = [1; 16];
    const B: [u8; 16] = [2; 16];

    /// Node `id` of cluster `c` in `term` following `leader`, holding members 1..=3 (ports
    /// 9001..) led by `leader`.
    fn node(id: u32, c: [u8; 16], term: u64, leader: u32) -> ControllerInfo {
        let role = |m: u32| match m == leader {
            true => ControllerRole::Primary,
            false => ControllerRole::Standby,
        };
        let entry = |m: u32| wire::ControllerEntry {
            id: m,
            host: "127.0.0.1".into(),
            port: 9000 + m as u16,
            role: role(m),
        };
        ControllerInfo {
            id,
            role: role(id),
            term,
            primary_id: leader,
            cluster_id: c,
            members: (1..=3).map(entry).collect(),
            ..Default::default()
        }
    }

    fn row(addr: &str, info: Result<ControllerInfo, &str>) -> Row {
        Row {
            addr: addr.into(),
            info: info.map_err(String::from),
        }
    }

    /// Node `id` answering at its member address (port 9000 + id), as [`node`] says.
    fn up(id: u32, c: [u8; 16], term: u64, leader: u32) -> Row {
        row(
            &format!("127.0.0.1:{}", 9000 + id),
            Ok(node(id, c, term, leader)),
        )
    }

    /// Node `id`'s member address refusing connections.
    fn down(id: u32) -> Row {
        row(&format!("127.0.0.1:{}", 9000 + id), Err("connect: refused"))
    }

    /// Judges each case: its verdict, the members that answer, and words that agree with the
    /// counts (issue 36).
    fn check_verdicts(cases: Vec<(&str, Vec<Row>, Health, usize)>) {
        for (what, rows, want, up) in cases {
            let v = judge(&rows, &[]);
            assert_eq!(v.health, want, "{what}: {v:?}");
            let got = v
                .nodes
                .iter()
                .filter(|n| n.member && n.info.is_some())
                .count();
            assert_eq!(got, up, "{what}: {v:?}");
            let text = render(&v, None);
            assert!(!text.contains("(:0)"), "{what}: {text}");
            // Issue 36: never "a majority is needed" when a majority answers.
            let majority = v.nodes.iter().filter(|n| n.member && n.voter).count() / 2 + 1;
            if up >= majority {
                assert!(!text.contains("is needed"), "{what}: {text}");
            }
        }
    }

    /// Verdicts where a primary serves: healthy or degraded.
    #[test]
    fn verdicts_with_a_primary() {
        check_verdicts(vec![
            // (what, rows, verdict, members answering)
            (
                "one standby asked, everyone answers",
                vec![up(2, A, 5, 1), up(1, A, 5, 1), up(3, A, 5, 1)],
                Health::Healthy,
                3,
            ),
            (
                "one node under two names counts once",
                vec![
                    row("localhost:9001", Ok(node(1, A, 5, 1))),
                    up(1, A, 5, 1),
                    up(2, A, 5, 1),
                    up(3, A, 5, 1),
                ],
                Health::Healthy,
                3,
            ),
            (
                "a member down",
                vec![up(1, A, 5, 1), up(2, A, 5, 1), down(3)],
                Health::Degraded,
                2,
            ),
            (
                "a standby following no one",
                vec![up(1, A, 5, 1), up(2, A, 5, 1), up(3, A, 5, 0)],
                Health::Degraded,
                3,
            ),
            (
                "an old primary of a lower term",
                vec![up(1, A, 4, 1), up(2, A, 5, 2), up(3, A, 5, 2)],
                Health::Degraded,
                3,
            ),
        ]);
    }

    /// Verdicts without a primary, or across clusters; and the words of a quorum that follows
    /// a primary clients cannot reach.
    #[test]
    fn verdicts_without_one() {
        check_verdicts(vec![
            // (what, rows, verdict, members answering)
            (
                "two clusters' primaries",
                vec![up(1, A, 5, 1), row("127.0.0.1:9101", Ok(node(1, B, 5, 1)))],
                Health::CannotTell,
                1,
            ),
            (
                "no primary",
                vec![down(1), up(2, A, 6, 0), down(3)],
                Health::NoQuorum,
                1,
            ),
            (
                "nothing answers",
                vec![down(1), down(2)],
                Health::CannotTell,
                0,
            ),
            (
                "a quorum follows a primary clients cannot reach",
                vec![down(1), up(2, A, 6, 1), up(3, A, 6, 1)],
                Health::NoQuorum,
                2,
            ),
        ]);
        let v = judge(&[down(1), up(2, A, 6, 1), up(3, A, 6, 1)], &[]);
        let text = render(&v, None);
        assert!(
            text.contains("2 of 3 members answer (a quorum) and 2 of them follow node 1"),
            "{text}"
        );
        assert!(text.contains("127.0.0.1:9001: connect: refused"), "{text}");
    }

    #[test]
    fn ipv6_in_brackets() {
        assert_eq!(join_addr("::1", 53301), "[::1]:53301");
        assert_eq!(join_addr("127.0.0.1", 1), "127.0.0.1:1");
    }

    #[test]
    fn an_unanswered_name_matches_the_member_it_resolves_to() {
        let one: std::net::SocketAddr = "127.0.0.1:9003".parse().unwrap();
        let rows = vec![
            up(1, A, 5, 1),
            row("localhost:9003", Err("connect: refused")),
        ];
        let resolved = vec![
            ("localhost:9003".to_string(), vec![one]),
            ("127.0.0.1:9003".to_string(), vec![one]),
        ];
        let v = judge(&rows, &resolved);
        assert_eq!(v.nodes.len(), 3, "{v:?}");
        assert!(v.nodes[2].addrs.contains(&"localhost:9003".to_string()));
    }
}
