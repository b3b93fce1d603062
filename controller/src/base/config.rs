//! Command-line configuration: the cluster spec and the node's knobs, with named defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::base::ids::{CtrlNode, NodeId};

/// Leader heartbeat interval (ms). See README for how the timing defaults were measured
/// (C15: `proof/BENCH.md` P4 compares them with the earlier 30 / 150–300).
pub const DEFAULT_HEARTBEAT_MS: u64 = 20;
/// Election timeout range (ms). openraft 0.9: a follower refuses other candidates for the
/// leader lease (= election-max) after the last append it accepted, and campaigns after the
/// lease plus a random time in this range without one; after its leader's connection closed
/// it campaigns when the lease lapses (C15, `raft/elect.rs`).
pub const DEFAULT_ELECTION_MIN_MS: u64 = 60;
pub const DEFAULT_ELECTION_MAX_MS: u64 = 120;
/// C15 (amended): the most the adaptive timings stretch the lease to on a congested link (ms):
/// a follower then campaigns at most this long plus its stretched timeout after the last append
/// it accepted (`raft/pace.rs`).
pub const DEFAULT_ELECTION_CEILING_MS: u64 = 2000;
/// A worker silent for longer than this is reported UNAVAIL (C5).
pub const DEFAULT_HOST_TIMEOUT_MS: u64 = 30_000;
/// A client connection silent for longer than this is closed (C9).
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 10 * 60 * 1000;
/// Concurrent client connections per node (C9).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Build a snapshot after this many applied entries since the last one.
pub const DEFAULT_SNAPSHOT_LOGS: u64 = 1000;
/// Log entries kept behind a snapshot (C15, P14): a follower that fell this far behind — a
/// node back from a partition, a slow link — catches up from the log, in appends sized to its
/// link, instead of by a whole snapshot that would fill a slow link for seconds (and starve
/// the other follower's heartbeats behind it).
pub const DEFAULT_LOG_KEEP: u64 = 20_000;
/// C19: how often the primary compares its members' state digests (ms).
pub const DEFAULT_CONSISTENCY_CHECK_MS: u64 = 2000;
/// Cluster name reported by `clusterconf`.
pub const DEFAULT_CLUSTER_NAME: &str = "xce";

/// `cluster`: node i's raft port is its client port + this.
pub const RAFT_PORT_OFFSET: u16 = 1000;
/// `cluster`: node i's metrics port is its client port + this.
pub const METRICS_PORT_OFFSET: u16 = 2000;

/// The members of the cluster: id → addresses.
#[derive(Debug, Clone, Default)]
pub struct ClusterSpec {
    pub nodes: BTreeMap<NodeId, CtrlNode>,
}

impl ClusterSpec {
    /// Parses `1=127.0.0.1:9991/127.0.0.1:10991,2=...` (client address / raft address).
    pub fn parse(s: &str) -> Result<ClusterSpec, String> {
        let mut nodes = BTreeMap::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (id, addrs) = part
                .split_once('=')
                .ok_or_else(|| format!("bad member {part:?}: want ID=CLIENT/RAFT"))?;
            let id: NodeId = id
                .trim()
                .parse()
                .map_err(|_| format!("bad node id in {part:?}"))?;
            if id == 0 {
                return Err("node ids start at 1".into());
            }
            let (client, raft) = addrs
                .split_once('/')
                .ok_or_else(|| format!("bad member {part:?}: want ID=CLIENT/RAFT"))?;
            for a in [client, raft] {
                check_addr(a).map_err(|e| format!("bad address {a:?} in {part:?}: {e}"))?;
            }
            let (client, raft) = (client.to_string(), raft.to_string());
            if nodes.insert(id, CtrlNode { client, raft }).is_some() {
                return Err(format!("node {id} listed twice"));
            }
        }
        if nodes.is_empty() || nodes.len() > 8 {
            return Err("a cluster has 1..8 nodes".into());
        }
        Ok(ClusterSpec { nodes })
    }

    /// The spec string of a loopback cluster as `cluster` starts it.
    pub fn loopback(n: u16, base_port: u16) -> String {
        let member = |i: u16| {
            let c = base_port + i;
            format!("{}=127.0.0.1:{c}/127.0.0.1:{}", i + 1, c + RAFT_PORT_OFFSET)
        };
        (0..n).map(member).collect::<Vec<_>>().join(",")
    }
}

/// Members as `--cluster` takes them: `ID=CLIENT/RAFT,...`.
pub fn spec_text(members: &BTreeMap<NodeId, CtrlNode>) -> String {
    let each: Vec<String> = members.iter().map(|(i, n)| format!("{i}={n}")).collect();
    each.join(",")
}

/// `HOST:PORT` with HOST an IP address (IPv6 in brackets) or a host name, PORT 1..65535.
/// Names are resolved when used (bounded: [`RESOLVE_TIMEOUT`] at start, the connect timeout
/// on the raft port; clients resolve the names they are told themselves).
pub fn check_addr(a: &str) -> Result<(), String> {
    if a.parse::<std::net::SocketAddr>().is_ok() {
        return Ok(());
    }
    let (host, port) = a.rsplit_once(':').ok_or("want HOST:PORT")?;
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(format!("port {port:?} is not in 1..65535")),
    }
    let name_ok = !host.is_empty()
        && host.len() <= 253
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && !l.starts_with('-') && !l.ends_with('-'))
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if !name_ok {
        return Err(format!("{host:?} is neither an IP address nor a host name"));
    }
    Ok(())
}

/// `host:port` → (host, port).
/// `HOST:PORT` or `[IPv6]:PORT` as (host, port), the host without brackets — as the library
/// writes a master's host, so hints, exclusions and member lists compare equal.
pub fn split_addr(a: &str) -> Option<(String, u16)> {
    let (h, p) = a.rsplit_once(':')?;
    let h = h
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(h);
    Some((h.to_string(), p.parse().ok()?))
}

/// Bound on resolving the members' names when a node starts.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Resolves `addr` (an IP literal at once, a name through the system resolver), bounded by
/// [`RESOLVE_TIMEOUT`].
pub async fn resolve(addr: &str) -> Result<Vec<std::net::SocketAddr>, String> {
    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host(addr)).await {
        Ok(Ok(a)) => {
            let a: Vec<_> = a.collect();
            if a.is_empty() {
                Err(format!("{addr}: the name has no address"))
            } else {
                Ok(a)
            }
        }
        Ok(Err(e)) => Err(format!("{addr}: {e}")),
        Err(_) => Err(format!(
            "{addr}: no answer from the resolver within {RESOLVE_TIMEOUT:?}"
        )),
    }
}

/// Says which peers' names do not resolve now (they are looked up again when used).
pub async fn warn_unresolved_peers(id: NodeId, spec: &ClusterSpec) {
    for (&peer, n) in spec.nodes.iter().filter(|(&p, _)| p != id) {
        for a in [&n.client, &n.raft] {
            if a.parse::<std::net::SocketAddr>().is_err() {
                if let Err(e) = resolve(a).await {
                    crate::log_warn!("node {id}: member {peer}: {e} (looked up again when used)");
                }
            }
        }
    }
}

/// C1/C17: the membership stored in the data directory wins over `--cluster` — members added
/// or removed online (and a node started with `--join`, whose `--cluster` names only itself or
/// the members it was started with) differ from it legitimately. Refused: a node that `--cluster`
/// and the stored membership both know under different addresses, or the node would advertise
/// addresses the cluster does not have (addresses cannot change in place). `stored` is empty
/// for a brand-new node. `Ok(Some(note))` names a difference that is not refused.
pub fn check_stored_membership(
    id: NodeId,
    stored: &BTreeMap<NodeId, CtrlNode>,
    spec: &ClusterSpec,
) -> Result<Option<String>, String> {
    if stored.is_empty() || stored == &spec.nodes {
        return Ok(None);
    }
    let moved: Vec<String> = spec
        .nodes
        .iter()
        .filter_map(|(i, b)| match stored.get(i) {
            Some(a) if a != b && *i == id => Some(format!(
                "this node (id {id}) is {a} in its data, {b} in --cluster"
            )),
            Some(a) if a != b => Some(format!("node {i} is {a} in the data, {b} in --cluster")),
            _ => None,
        })
        .collect();
    if !moved.is_empty() {
        return Err(format!(
            "--cluster does not match the membership stored in the data directory: {}.\n  \
             stored:    {}\n  --cluster: {}\n\
             Restart with the stored addresses (addresses cannot change in place), or change the \
             membership online (docs/operations.md).",
            moved.join("; "),
            spec_text(stored),
            spec_text(&spec.nodes)
        ));
    }
    let why = if stored.contains_key(&id) {
        "members were added or removed online"
    } else {
        "this node was removed from the membership"
    };
    Ok(Some(format!(
        "the membership stored in the data directory differs from --cluster ({why}): \
         the stored one is used.\n  stored:    {}\n  --cluster: {}",
        spec_text(stored),
        spec_text(&spec.nodes)
    )))
}

/// Knobs of one node.
#[derive(Debug, Clone)]
pub struct NodeOpts {
    /// Issue 26: the node's log lines — the least level written, the format, a file instead
    /// of stderr (`base/logstamp.rs`).
    pub log: crate::base::logstamp::LogOpts,
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// C15 (amended): the adaptive lease's ceiling (`raft/pace.rs`); election-max is its floor
    /// (a ceiling below it is election-max: no adaptation).
    pub election_ceiling_ms: u64,
    /// C15: campaign as soon as the lease lapses after the leader's connection closed.
    pub early_campaign: bool,
    pub host_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub snapshot_logs: u64,
    pub log_keep: u64,
    pub cluster_name: String,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
    /// Mutual TLS on the raft port against this CA bundle (C13).
    pub tls_peer_ca: Option<PathBuf>,
    /// Allow plaintext on a non-loopback address (C13).
    pub insecure: bool,
    /// The HMAC key of client tokens (C13); with it (or `--tls-client-ca`) callers are checked.
    pub token_key: Option<PathBuf>,
    /// `--metrics ADDR`: serve `/metrics` (C18) on this address.
    pub metrics: Option<String>,
    /// C19: how often the primary compares its members' state digests; `None`
    /// (`--consistency-check-ms 0`): only when asked (`status`, `snapshot save`).
    pub consistency_check: Option<Duration>,
    /// `--metrics-public`: the metrics endpoint (plaintext, no authentication) may be bound
    /// off loopback (issue 27: refused otherwise, unless `--insecure`).
    pub metrics_public: bool,
    /// C24: `--quota-bytes` (`None`: sized from the filesystem, `base/disk.rs`).
    pub quota_bytes: Option<u64>,
    /// C24: `--disk-floor-bytes` (`None`: sized from the filesystem).
    pub disk_floor_bytes: Option<u64>,
}

impl Default for NodeOpts {
    fn default() -> NodeOpts {
        NodeOpts {
            log: Default::default(),
            heartbeat_ms: DEFAULT_HEARTBEAT_MS,
            election_min_ms: DEFAULT_ELECTION_MIN_MS,
            election_max_ms: DEFAULT_ELECTION_MAX_MS,
            election_ceiling_ms: DEFAULT_ELECTION_CEILING_MS,
            early_campaign: true,
            host_timeout: Duration::from_millis(DEFAULT_HOST_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            snapshot_logs: DEFAULT_SNAPSHOT_LOGS,
            log_keep: DEFAULT_LOG_KEEP,
            cluster_name: DEFAULT_CLUSTER_NAME.to_string(),
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls_peer_ca: None,
            insecure: false,
            token_key: None,
            metrics: None,
            consistency_check: Some(Duration::from_millis(DEFAULT_CONSISTENCY_CHECK_MS)),
            metrics_public: false,
            quota_bytes: None,
            disk_floor_bytes: None,
        }
    }
}

impl NodeOpts {
    /// The combinations a node refuses to start with (checked by `run` and, for every node
    /// at once, by `cluster`).
    pub fn check(&self) -> Result<(), String> {
        if self.heartbeat_ms == 0
            || self.election_min_ms <= self.heartbeat_ms
            || self.election_max_ms <= self.election_min_ms
        {
            return Err(format!(
                "need 0 < heartbeat-ms < election-min-ms < election-max-ms (got {} < {} < {})",
                self.heartbeat_ms, self.election_min_ms, self.election_max_ms
            ));
        }
        if self.max_connections == 0 {
            return Err("--max-connections: at least 1".into());
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err("--tls-cert and --tls-key go together".into());
        }
        if self.tls_client_ca.is_some() && self.tls_cert.is_none() {
            return Err("--tls-client-ca needs --tls-cert/--tls-key".into());
        }
        if let Some(m) = &self.metrics {
            check_addr(m).map_err(|e| format!("--metrics {m:?}: {e}"))?;
        }
        Ok(())
    }
}

/// `run` arguments.
#[derive(Debug, Clone)]
pub struct RunArgs {
    pub id: NodeId,
    pub spec: ClusterSpec,
    pub data: PathBuf,
    pub opts: NodeOpts,
    /// C17 `--join`: never initialise a cluster; wait, uninitialised, to be added online.
    pub join: bool,
}

/// `cluster` arguments; `node_flags` are passed on to every `run`.
#[derive(Debug, Clone)]
pub struct ClusterArgs {
    pub nodes: u16,
    pub base_port: u16,
    pub data: PathBuf,
    pub node_flags: Vec<String>,
    /// `--tls DIR`: certificates made in DIR, every link with mutual TLS (C13).
    pub tls: Option<PathBuf>,
}

/// The IP address of `addr` if it is an IP literal (`ip:port`, `[ipv6]:port`); `None` for a
/// host name, which says nothing about where it leads.
pub fn ip_literal(addr: &str) -> Option<std::net::IpAddr> {
    addr.parse::<std::net::SocketAddr>().ok().map(|a| a.ip())
}

/// The node's listening ports, for [`exposure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    Client,
    Raft,
    Metrics,
}

/// The loopback rule (C13, amended by issue 27): whether port `port`, given as `name` and
/// bound to `bound`, may serve there with these options. It judges the address bound — never
/// a name: `localhost` or `*.localhost` lead wherever the resolver (a hosts file, a DNS
/// search domain) says. Off loopback, without `--insecure`:
/// - the client port needs TLS **and** a way to authenticate callers (`--tls-client-ca` or
///   `--token-key`): TLS alone encrypts, but makes every caller admin;
/// - the raft port needs mutual TLS (`--tls-peer-ca`);
/// - the metrics endpoint (plaintext HTTP, no authentication) needs `--metrics-public`.
pub fn exposure(
    port: Port,
    name: &str,
    bound: std::net::IpAddr,
    o: &NodeOpts,
) -> Result<(), String> {
    // Loopback: an IPv4-mapped IPv6 loopback address too.
    if o.insecure || bound.to_canonical().is_loopback() {
        return Ok(());
    }
    let at = if ip_literal(name) == Some(bound) {
        name.to_string()
    } else {
        format!("{name} (bound to {bound})")
    };
    match port {
        Port::Client if o.tls_cert.is_none() => Err(format!(
            "the client address {at} is not loopback and has no TLS (--tls-cert/--tls-key); \
             --insecure runs it in plaintext anyway"
        )),
        Port::Client if o.tls_client_ca.is_none() && o.token_key.is_none() => Err(format!(
            "the client address {at} is not loopback and checks no caller: with TLS but \
             neither --tls-client-ca nor --token-key every caller is admin; give one of them \
             (--insecure runs it so anyway)"
        )),
        Port::Raft if o.tls_peer_ca.is_none() => Err(format!(
            "the raft address {at} is not loopback and has no mutual TLS (--tls-peer-ca); \
             --insecure runs it in plaintext anyway"
        )),
        Port::Metrics if !o.metrics_public => Err(format!(
            "the metrics address {at} is not loopback and the endpoint is plaintext HTTP \
             without authentication: --metrics-public serves it there anyway (firewall it), \
             or bind it to loopback"
        )),
        _ => Ok(()),
    }
}

/// A number given to `flag`.
pub fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{flag}: bad number {v:?}"))
}

/// A size in bytes: a number, or a number with K, M, G or T (powers of 1024: `8G`).
pub fn size(flag: &str, v: &str) -> Result<u64, String> {
    let t = v.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => {
                    return Err(format!(
                        "{flag}: bad size {v:?} (a number, or with K, M, G, T)"
                    ))
                }
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = num(flag, digits)?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{flag}: {v:?} is too large"))
}

/// Applies one node knob; `Ok(false)` if `flag` is not a node knob.
fn node_flag(o: &mut NodeOpts, flag: &str, v: &str) -> Result<bool, String> {
    match flag {
        "--log-level" => o.log.level = crate::base::logstamp::Level::parse(v)?,
        "--log-format" => {
            o.log.json = match v {
                "text" => false,
                "json" => true,
                _ => return Err(format!("{flag}: text or json, not {v:?}")),
            }
        }
        "--log-file" => o.log.file = Some(PathBuf::from(v)),
        "--heartbeat-ms" => o.heartbeat_ms = num(flag, v)?,
        "--election-min-ms" => o.election_min_ms = num(flag, v)?,
        "--election-max-ms" => o.election_max_ms = num(flag, v)?,
        "--election-ceiling-ms" => o.election_ceiling_ms = num(flag, v)?,
        "--early-campaign" => {
            o.early_campaign = match v {
                "on" | "true" => true,
                "off" | "false" => false,
                _ => return Err(format!("{flag}: on or off, not {v:?}")),
            }
        }
        "--host-timeout-ms" => o.host_timeout = Duration::from_millis(num(flag, v)?),
        "--idle-timeout-ms" => o.idle_timeout = Duration::from_millis(num(flag, v)?),
        "--max-connections" => o.max_connections = num(flag, v)?,
        "--snapshot-logs" => o.snapshot_logs = num(flag, v)?,
        "--log-keep" => o.log_keep = num(flag, v)?,
        "--cluster-name" => o.cluster_name = v.to_string(),
        "--tls-cert" => o.tls_cert = Some(v.into()),
        "--tls-key" => o.tls_key = Some(v.into()),
        "--tls-client-ca" => o.tls_client_ca = Some(v.into()),
        "--tls-peer-ca" => o.tls_peer_ca = Some(v.into()),
        "--token-key" => o.token_key = Some(v.into()),
        "--insecure" => o.insecure = v == "true",
        "--metrics" => o.metrics = Some(v.to_string()),
        "--consistency-check-ms" => {
            let ms: u64 = num(flag, v)?;
            o.consistency_check = (ms > 0).then(|| Duration::from_millis(ms));
        }
        "--metrics-public" => o.metrics_public = v == "true",
        "--quota-bytes" => o.quota_bytes = Some(size(flag, v)?),
        "--disk-floor-bytes" => o.disk_floor_bytes = Some(size(flag, v)?),
        _ => return Ok(false),
    }
    Ok(true)
}

/// Options and their values, in their order.
pub type Flags = Vec<(String, String)>;

/// Splits `--flag value` pairs.
fn pairs(args: &[String]) -> Result<Flags, String> {
    // The options without a value.
    flag_pairs(args, &["--insecure", "--join", "--metrics-public"])
}

/// Command-line flags as (flag, value) pairs: `--flag value` or `--flag=value`; a flag of
/// `switches` takes no value and reads as "true". Every command's parser starts here.
pub fn flag_pairs(args: &[String], switches: &[&str]) -> Result<Flags, String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(f) = it.next() {
        if switches.contains(&f.as_str()) {
            out.push((f.clone(), "true".to_string()));
            continue;
        }
        if let Some((k, v)) = f.split_once('=').filter(|_| f.starts_with("--")) {
            out.push((k.to_string(), v.to_string()));
            continue;
        }
        let v = it.next().ok_or_else(|| {
            // Issue 36: an option no command has is named as such, not as one missing a value.
            if takes_value(f) {
                format!("{f}: missing value")
            } else {
                format!("unknown option {f}")
            }
        })?;
        out.push((f.clone(), v.clone()));
    }
    Ok(out)
}

/// Takes the options `flags` (each with a value: `--flag V` or `--flag=V`) out of `args`: the
/// other words in their order, and the options taken in theirs.
pub fn take_flags(args: &[String], flags: &[&str]) -> Result<(Vec<String>, Flags), String> {
    let (mut rest, mut taken) = (Vec::new(), Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        if !flags.contains(&flag) {
            rest.push(a.clone());
            continue;
        }
        let v = match inline {
            Some(v) => v,
            None => it.next().ok_or(format!("{flag}: missing value"))?.clone(),
        };
        taken.push((flag.to_string(), v));
    }
    Ok((rest, taken))
}

/// The options other than the node knobs that some command takes a value for.
const VALUED: [&str; 18] = [
    "--base-port",
    "--ca",
    "--ca-cert",
    "--ca-key",
    "--cert",
    "--cluster",
    "--config",
    "--data",
    "--id",
    "--key",
    "--masters",
    "--nodes",
    "--restore-id",
    "--timeout-ms",
    "--tls",
    "--to",
    "--token",
    "--valid",
];

/// Whether some command takes a value for option `f` (a node knob, or one of [`VALUED`]).
fn takes_value(f: &str) -> bool {
    VALUED.contains(&f) || !matches!(node_flag(&mut NodeOpts::default(), f, "1"), Ok(false))
}

/// A member as the config file lists it (`[[member]]`).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMember {
    id: NodeId,
    client: String,
    raft: String,
}

/// Reads a `run --config FILE` (TOML) into the `run` flags it stands for, so a file and the
/// command line mean exactly the same and flags given after it override it: every top-level
/// key is a flag (`heartbeat_ms = 30` is `--heartbeat-ms 30`), a table prefixes its keys
/// (`[tls] client_ca = "ca.pem"` is `--tls-client-ca ca.pem`), and `[[member]]` entries
/// (`id`, `client`, `raft`) make `--cluster`. Also the text read, so that an error's line
/// number is found in the same text the flags came from (the file is read once).
fn file_flags(path: &std::path::Path) -> Result<(Flags, String), String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--config {}: {e}", path.display()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| format!("--config {}: {e}", path.display()))?;
    let mut out = Vec::new();
    let scalar = |key: &str, v: &toml::Value| -> Result<String, String> {
        match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Integer(i) => Ok(i.to_string()),
            toml::Value::Boolean(b) => Ok(b.to_string()),
            other => Err(format!(
                "--config {}: {key}: want a string, number or boolean, not {}",
                path.display(),
                other.type_str()
            )),
        }
    };
    for (k, v) in &table {
        match (k.as_str(), v) {
            ("member", v) => {
                let members: Vec<FileMember> = v
                    .clone()
                    .try_into()
                    .map_err(|e| format!("--config {}: [[member]]: {e}", path.display()))?;
                let spec = members
                    .iter()
                    .map(|m| format!("{}={}/{}", m.id, m.client, m.raft))
                    .collect::<Vec<_>>()
                    .join(",");
                out.push(("--cluster".to_string(), spec));
            }
            (section, toml::Value::Table(t)) => {
                for (k2, v2) in t {
                    let key = format!("{section}_{k2}");
                    out.push((flag_of(&key), scalar(&key, v2)?));
                }
            }
            (key, v) => out.push((flag_of(key), scalar(key, v)?)),
        }
    }
    Ok((out, text))
}

/// The key a flag stands for in a config file (`--heartbeat-ms` → `heartbeat_ms`).
fn key_of(flag: &str) -> String {
    flag.trim_start_matches("--").replace('-', "_")
}

/// Issue 26: `FILE: line N: KEY` for the flag `flag` read from the config file `file` (text
/// `text`): the first line that sets its key (a table's key by its own name), else the file.
fn where_in(file: &str, text: &str, flag: &str) -> String {
    let key = key_of(flag);
    let keys: Vec<String> = if flag == "--cluster" {
        vec!["[[member]]".into()]
    } else {
        // `tls_cert` is `cert` under `[tls]`: try the whole key, then its last part.
        let mut k = vec![key.clone()];
        if let Some((_, last)) = key.split_once('_') {
            k.push(last.to_string());
        }
        k
    };
    for k in &keys {
        for (n, line) in text.lines().enumerate() {
            let l = line.trim_start();
            let sets = l
                .strip_prefix(k.as_str())
                .is_some_and(|r| r.trim_start().starts_with('=') || k.starts_with('['));
            if sets {
                return format!("{file}: line {}", n + 1);
            }
        }
    }
    file.to_string()
}

fn flag_of(key: &str) -> String {
    format!("--{}", key.replace('_', "-"))
}

impl RunArgs {
    pub fn parse(args: &[String]) -> Result<RunArgs, String> {
        let (mut id, mut spec, mut data) = (None, None, None);
        let mut opts = NodeOpts::default();
        let mut join = false;
        let cli = pairs(args)?;
        let mut all = Vec::new();
        // Issue 26: where each flag of a file came from, so an error names the file's key and
        // line, not the flag it stands for.
        let mut origin: Vec<Option<String>> = Vec::new();
        let mut file: Option<String> = None;
        for (f, v) in &cli {
            if f == "--config" {
                let (from_file, text) = file_flags(std::path::Path::new(v))?;
                if let Some((f, _)) = from_file.iter().find(|(f, _)| f == "--config") {
                    return Err(format!("{v}: {f} inside a config file"));
                }
                for (f, _) in &from_file {
                    origin.push(Some(where_in(v, &text, f)));
                }
                all.extend(from_file);
                file = Some(v.clone());
            }
        }
        // Flags after the file's: the command line overrides it.
        all.extend(cli.into_iter().filter(|(f, _)| f != "--config"));
        for (k, (f, v)) in all.into_iter().enumerate() {
            let named = |e: String| match origin.get(k).cloned().flatten() {
                Some(at) => format!("{at}: {}", e.replace(&f, &key_of(&f))),
                None => e,
            };
            match f.as_str() {
                "--id" => id = Some(num::<NodeId>(&f, &v).map_err(named)?),
                "--cluster" => spec = Some(ClusterSpec::parse(&v).map_err(named)?),
                "--data" => data = Some(PathBuf::from(v)),
                "--join" => join = v == "true",
                _ if node_flag(&mut opts, &f, &v).map_err(named)? => {}
                _ => return Err(named(format!("unknown option {f}"))),
            }
        }
        let in_file = |e: String| match &file {
            Some(p) => format!("{p}: {}", e.replace("--", "").replace('-', "_")),
            None => e,
        };
        let id = id.ok_or("--id is required")?;
        let spec = spec.ok_or("--cluster is required")?;
        let data = data.ok_or("--data is required")?;
        if !spec.nodes.contains_key(&id) {
            return Err(format!("node {id} is not in --cluster"));
        }
        opts.check().map_err(in_file)?;
        if opts.tls_peer_ca.is_some() && opts.tls_cert.is_none() {
            return Err("--tls-peer-ca needs --tls-cert/--tls-key".into());
        }
        // The loopback rule at once for IP literals; a host name is judged by the address it is
        // bound to, when the node binds it (cmd/run.rs).
        let me = &spec.nodes[&id];
        let metrics = opts.metrics.iter().map(|m| (Port::Metrics, m));
        let ports = [(Port::Client, &me.client), (Port::Raft, &me.raft)];
        for (port, addr) in ports.into_iter().chain(metrics) {
            if let Some(ip) = ip_literal(addr) {
                exposure(port, addr, ip, &opts)?;
            }
        }
        Ok(RunArgs {
            id,
            spec,
            data,
            opts,
            join,
        })
    }
}

impl ClusterArgs {
    pub fn parse(args: &[String]) -> Result<ClusterArgs, String> {
        let mut a = ClusterArgs {
            nodes: 3,
            base_port: 9991,
            data: PathBuf::new(),
            node_flags: Vec::new(),
            tls: None,
        };
        let mut data = None;
        let mut probe = NodeOpts::default();
        for (f, v) in pairs(args)? {
            match f.as_str() {
                "--nodes" => a.nodes = num(&f, &v)?,
                "--base-port" => a.base_port = num(&f, &v)?,
                "--data" => data = Some(PathBuf::from(v)),
                "--tls" => a.tls = Some(PathBuf::from(v)),
                _ if f.starts_with("--tls") || f == "--token-key" => {
                    return Err(format!(
                        "{f}: cluster makes its own certificates with --tls DIR"
                    ))
                }
                "--insecure" | "--metrics-public" => a.node_flags.push(f),
                "--metrics" => {
                    return Err("cluster gives node i its metrics on P+i-1+2000 itself".into())
                }
                _ if node_flag(&mut probe, &f, &v)? => a.node_flags.extend([f, v]),
                _ => return Err(format!("unknown option {f}")),
            }
        }
        a.data = data.ok_or("--data is required")?;
        if !(1..=8).contains(&a.nodes) {
            return Err("--nodes: 1..8".into());
        }
        let top = a.base_port as u32 + a.nodes as u32 - 1 + METRICS_PORT_OFFSET as u32;
        if a.base_port == 0 || top > u16::MAX as u32 {
            return Err(format!(
                "--base-port {}: node i uses P+i-1 (clients), +{RAFT_PORT_OFFSET} (raft) and \
                 +{METRICS_PORT_OFFSET} (metrics), so P must be in 1..={}",
                a.base_port,
                u16::MAX as u32 + 1 - a.nodes as u32 - METRICS_PORT_OFFSET as u32
            ));
        }
        // Refused here once, not by every node after the launch.
        probe.check()?;
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Command-line words as a parser takes them, from one line (no word has a space).
    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    /// Issue 36: an option no command has is named unknown, not "missing value"; a known one
    /// at the end without its value is; sizes take K, M, G, T.
    #[test]
    fn unknown_options_and_sizes() {
        assert_eq!(
            flag_pairs(&words("--check"), &["--json"]),
            Err("unknown option --check".into())
        );
        assert_eq!(
            flag_pairs(&words("--masters"), &["--json"]),
            Err("--masters: missing value".into())
        );
        assert_eq!(
            flag_pairs(&words("--quota-bytes"), &[]),
            Err("--quota-bytes: missing value".into())
        );
        assert_eq!(size("--q", "8G"), Ok(8 << 30));
        assert_eq!(size("--q", "512m"), Ok(512 << 20));
        assert_eq!(size("--q", "1000"), Ok(1000));
        assert!(size("--q", "8X").is_err());
        assert!(size("--q", "99999999999T").is_err());
    }

    #[test]
    fn parses_spec() {
        let s = ClusterSpec::parse(&ClusterSpec::loopback(3, 9991)).unwrap();
        assert_eq!(s.nodes.len(), 3);
        assert_eq!(s.nodes[&2].client, "127.0.0.1:9992");
        assert_eq!(s.nodes[&3].raft, "127.0.0.1:10993");
        assert!(ClusterSpec::parse("1=127.0.0.1:1").is_err());
        assert!(ClusterSpec::parse("0=127.0.0.1:1/127.0.0.1:2").is_err());
    }

    #[test]
    fn parses_run() {
        let two = "1=127.0.0.1:1/127.0.0.1:2,2=127.0.0.1:3/127.0.0.1:4";
        let args = words(&format!(
            "--id 2 --cluster {two} --data /tmp/x --heartbeat-ms=20"
        ));
        let r = RunArgs::parse(&args).unwrap();
        assert_eq!(r.id, 2);
        assert_eq!(r.opts.heartbeat_ms, 20);
    }

    /// C17: the stored membership wins over --cluster (members added or removed, a joined
    /// node); a member at another address than stored is refused. `--join` parses.
    #[test]
    fn stored_membership_wins_but_not_a_moved_address() {
        let spec = |s: &str| ClusterSpec::parse(s).unwrap();
        let a = "1=127.0.0.1:1/127.0.0.1:2,2=127.0.0.1:3/127.0.0.1:4,3=127.0.0.1:5/127.0.0.1:6";
        let stored =
            spec("2=127.0.0.1:3/127.0.0.1:4,3=127.0.0.1:5/127.0.0.1:6,4=127.0.0.1:7/127.0.0.1:8")
                .nodes;
        // Node `id` restarting with `--cluster cluster` over the `stored` membership.
        let check = |id, cluster: &str| check_stored_membership(id, &stored, &spec(cluster));
        assert_eq!(
            check_stored_membership(2, &BTreeMap::new(), &spec(a)),
            Ok(None)
        );
        assert_eq!(
            check_stored_membership(2, &spec(a).nodes, &spec(a)),
            Ok(None)
        );
        let note = check(2, a).unwrap().unwrap();
        assert!(note.contains("added or removed online"), "{note}");
        // A joined node whose --cluster names only itself.
        assert!(check(4, "4=127.0.0.1:7/127.0.0.1:8").is_ok());
        // A removed node.
        let note = check(1, a).unwrap().unwrap();
        assert!(note.contains("removed"), "{note}");
        // Node 3 moved in --cluster: refused, whoever restarts.
        let moved = "2=127.0.0.1:3/127.0.0.1:4,3=127.0.0.1:9/127.0.0.1:6";
        let e = check(2, moved).unwrap_err();
        assert!(e.contains("node 3 is") && e.contains("127.0.0.1:9"), "{e}");
        let e = check(3, moved).unwrap_err();
        assert!(e.contains("this node (id 3)"), "{e}");
        let args = words("--id 4 --cluster 4=127.0.0.1:7/127.0.0.1:8 --data /tmp/x --join");
        assert!(RunArgs::parse(&args).unwrap().join);
        assert!(!RunArgs::parse(&args[..6]).unwrap().join);
    }

    /// C13: plaintext off loopback only with --insecure; raft needs mutual TLS there; the
    /// client port needs a way to authenticate (issue 27). IP literals are judged when the
    /// options are read; names only where they are bound.
    #[test]
    fn refuses_plaintext_off_loopback() {
        let run = |cluster: &str, extra: &str| {
            RunArgs::parse(&words(&format!(
                "--id 1 --cluster {cluster} --data /tmp/x {extra}"
            )))
        };
        let off = "1=10.1.2.3:9991/10.1.2.3:10991";
        let e = run(off, "").unwrap_err();
        assert!(e.contains("--insecure"), "{e}");
        let tls = "--tls-cert c --tls-key k";
        let e = run(off, tls).unwrap_err();
        assert!(e.contains("checks no caller"), "{e}");
        let e = run(off, &format!("{tls} --token-key t")).unwrap_err();
        assert!(e.contains("raft address"), "{e}");
        let secured = format!("{tls} --tls-client-ca ca --tls-peer-ca ca");
        assert!(run(off, &secured).is_ok());
        assert!(run(off, "--insecure").unwrap().opts.insecure);
        let e = run(off, &format!("{secured} --metrics 0.0.0.0:9100")).unwrap_err();
        assert!(e.contains("metrics address 0.0.0.0:9100"), "{e}");
        let public = format!("{secured} --metrics 0.0.0.0:9100 --metrics-public");
        assert!(run(off, &public).unwrap().opts.metrics_public);
        assert!(
            run("1=127.0.0.1:1/127.0.0.1:2", "").is_ok(),
            "loopback stays easy"
        );
        assert!(run("1=[::1]:1/[::ffff:127.0.0.1]:2", "").is_ok());
        // A name is not trusted for what it says: judged once bound (cmd/run.rs).
        assert!(run("1=evil.localhost:1/localhost:2", "").is_ok());
        assert!(run("1=ctl1.example.org:1/ctl1.example.org:2", "").is_ok());
    }

    /// The loopback rule on the address bound, for every port and option (issue 27).
    #[test]
    fn exposure_judges_the_bound_address() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let opts = |f: &[&str]| {
            let mut o = NodeOpts::default();
            for &flag in f {
                let v = if matches!(flag, "--insecure" | "--metrics-public") {
                    "true"
                } else {
                    "x"
                };
                assert!(node_flag(&mut o, flag, v).unwrap(), "{flag}");
            }
            o
        };
        let tls = ["--tls-cert", "--tls-key"];
        let checked = ["--tls-cert", "--tls-key", "--tls-client-ca"];
        let tokens = ["--tls-cert", "--tls-key", "--token-key"];
        let peers = ["--tls-cert", "--tls-key", "--tls-peer-ca"];
        use Port::*;
        #[rustfmt::skip]
        let table: &[(Port, &str, &[&str], bool)] = &[
            (Client,  "127.0.0.1",        &[],                 true),
            (Client,  "127.9.9.9",        &[],                 true),
            (Client,  "::1",              &[],                 true),
            (Client,  "::ffff:127.0.0.1", &[],                 true),
            (Client,  "192.0.2.2",        &[],                 false),
            (Client,  "0.0.0.0",          &[],                 false),
            (Client,  "::",               &[],                 false),
            (Client,  "192.0.2.2",        &tls,                false), // every caller admin
            (Client,  "192.0.2.2",        &checked,            true),
            (Client,  "192.0.2.2",        &tokens,             true),
            (Client,  "192.0.2.2",        &["--insecure"],     true),
            (Raft,    "192.0.2.2",        &checked,            false),
            (Raft,    "192.0.2.2",        &peers,              true),
            (Raft,    "192.0.2.2",        &["--insecure"],     true),
            (Metrics, "127.0.0.1",        &[],                 true),
            (Metrics, "0.0.0.0",          &peers,              false),
            (Metrics, "0.0.0.0",          &["--metrics-public"], true),
            (Metrics, "192.0.2.2",        &["--insecure"],     true),
        ];
        for (port, addr, flags, ok) in table {
            let r = exposure(*port, "evil.localhost:9", ip(addr), &opts(flags));
            assert_eq!(r.is_ok(), *ok, "{port:?} on {addr} with {flags:?}: {r:?}");
            if let Err(e) = r {
                assert!(
                    e.contains(&format!("evil.localhost:9 (bound to {addr})")),
                    "{e}"
                );
            }
        }
    }

    #[test]
    fn config_file_then_flags_override_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(
            &f,
            r#"
id = 2
data = "/var/lib/xce"
heartbeat_ms = 50
election_min_ms = 400
election_max_ms = 800
metrics = "ctrl2.example:9100"
[tls]
cert = "/etc/xce/c.pem"
key = "/etc/xce/k.pem"
peer_ca = "/etc/xce/ca.pem"
[[member]]
id = 1
client = "ctrl1.example:9991"
raft = "ctrl1.example:10991"
[[member]]
id = 2
client = "ctrl2.example:9991"
raft = "ctrl2.example:10991"
"#,
        )
        .unwrap();
        let config = |rest: &str| {
            [
                vec!["--config".into(), f.display().to_string()],
                words(rest),
            ]
        };
        let r = RunArgs::parse(&config("--heartbeat-ms 60").concat()).unwrap();
        assert_eq!(r.id, 2);
        assert_eq!(r.data, PathBuf::from("/var/lib/xce"));
        assert_eq!(r.opts.heartbeat_ms, 60, "the flag overrides the file");
        assert_eq!(r.opts.election_min_ms, 400);
        assert_eq!(r.opts.metrics.as_deref(), Some("ctrl2.example:9100"));
        assert_eq!(r.opts.tls_key, Some(PathBuf::from("/etc/xce/k.pem")));
        assert_eq!(r.spec.nodes[&1].raft, "ctrl1.example:10991");
        // The command line's --cluster replaces the file's members.
        let args = config("--cluster 2=127.0.0.1:1/127.0.0.1:2").concat();
        assert_eq!(RunArgs::parse(&args).unwrap().spec.nodes.len(), 1);
        std::fs::write(&f, "id = 1\n[[member]]\nid = 1\nclient = \"a:1\"\n").unwrap();
        let e = RunArgs::parse(&args[..2]).unwrap_err();
        assert!(e.contains("raft"), "{e}");
        std::fs::write(&f, "id = [1]\n").unwrap();
        let e = RunArgs::parse(&args[..2]).unwrap_err();
        assert!(e.contains("id: want a string, number or boolean"), "{e}");
    }

    #[test]
    fn addresses_are_ips_or_host_names() {
        for ok in [
            "127.0.0.1:1",
            "[::1]:9991",
            "localhost:9991",
            "ctrl-1.example.org:1",
        ] {
            check_addr(ok).unwrap();
        }
        for bad in [
            "localhost",
            "localhost:0",
            ":1",
            "a..b:1",
            "-a:1",
            "a_b:1",
            "h:99999",
        ] {
            assert!(check_addr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_documented_example_parses() {
        let f = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/deploy/controller-1.toml"
        );
        let args: Vec<String> = vec!["--config".into(), f.into()];
        let r = RunArgs::parse(&args).unwrap();
        assert_eq!((r.id, r.spec.nodes.len()), (1, 3));
        assert_eq!(r.spec.nodes[&3].client, "ctrl3.example.org:9991");
        assert_eq!(r.opts.metrics.as_deref(), Some("ctrl1.example.org:9100"));
        assert!(r.opts.metrics_public);
        assert_eq!(r.data, PathBuf::from("/var/lib/xce-controller"));
        assert_eq!(r.opts.tls_peer_ca, Some(PathBuf::from("/etc/xce/ca.pem")));
        assert_eq!(r.opts.token_key, Some(PathBuf::from("/etc/xce/token.key")));
    }

    #[test]
    fn split_addr_strips_brackets() {
        assert_eq!(split_addr("[::1]:9991"), Some(("::1".into(), 9991)));
        assert_eq!(split_addr("h.example:1"), Some(("h.example".into(), 1)));
        assert_eq!(split_addr("h"), None);
    }

    /// Issue 26: an error in a config file names the file, the line and the key, not the
    /// command-line flag it stands for.
    #[test]
    fn config_errors_name_the_files_key_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.toml");
        std::fs::write(
            &f,
            "id = 1\ndata = \"/tmp/x\"\nheartbeat_ms = \"x\"\n[[member]]\nid = 1\n\
             client = \"127.0.0.1:9991\"\nraft = \"127.0.0.1:10991\"\n",
        )
        .unwrap();
        let args: Vec<String> = vec!["--config".into(), f.display().to_string()];
        let e = RunArgs::parse(&args).err().unwrap();
        assert!(
            e.contains("c.toml: line 3: heartbeat_ms: bad number"),
            "{e}"
        );
        assert!(!e.contains("--heartbeat-ms"), "{e}");
        std::fs::write(
            &f,
            "id = 1\ndata = \"/tmp/x\"\nheartbeat_ms = 500\n[[member]]\nid = 1\n\
             client = \"127.0.0.1:9991\"\nraft = \"127.0.0.1:10991\"\n",
        )
        .unwrap();
        let e = RunArgs::parse(&args).err().unwrap();
        assert!(
            e.contains("c.toml: need 0 < heartbeat_ms < election_min_ms"),
            "{e}"
        );
    }
}
