//! Command-line configuration: the cluster spec and the node's knobs, with named defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::types::{CtrlNode, NodeId};

/// Leader heartbeat interval (ms). See README for how the timing defaults were measured.
pub const DEFAULT_HEARTBEAT_MS: u64 = 30;
/// Election timeout range (ms): a follower that hears no leader for a random time in this
/// range starts an election.
pub const DEFAULT_ELECTION_MIN_MS: u64 = 150;
pub const DEFAULT_ELECTION_MAX_MS: u64 = 300;
/// A worker silent for longer than this is reported UNAVAIL (C5).
pub const DEFAULT_HOST_TIMEOUT_MS: u64 = 30_000;
/// A client connection silent for longer than this is closed (C9).
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 10 * 60 * 1000;
/// Concurrent client connections per node (C9).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Build a snapshot after this many applied entries since the last one.
pub const DEFAULT_SNAPSHOT_LOGS: u64 = 1000;
/// Cluster name reported by `clusterconf`.
pub const DEFAULT_CLUSTER_NAME: &str = "xce";

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
                a.parse::<std::net::SocketAddr>()
                    .map_err(|_| format!("bad address {a:?} in {part:?}"))?;
            }
            if nodes
                .insert(
                    id,
                    CtrlNode {
                        client: client.to_string(),
                        raft: raft.to_string(),
                    },
                )
                .is_some()
            {
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
        (0..n)
            .map(|i| {
                let c = base_port + i;
                format!("{}=127.0.0.1:{}/127.0.0.1:{}", i + 1, c, c + 1000)
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Knobs of one node.
#[derive(Debug, Clone)]
pub struct NodeOpts {
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    pub host_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub snapshot_logs: u64,
    pub cluster_name: String,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
    /// `--metrics ADDR`: serve `/metrics` (C18) on this address.
    pub metrics: Option<String>,
}

impl Default for NodeOpts {
    fn default() -> NodeOpts {
        NodeOpts {
            heartbeat_ms: DEFAULT_HEARTBEAT_MS,
            election_min_ms: DEFAULT_ELECTION_MIN_MS,
            election_max_ms: DEFAULT_ELECTION_MAX_MS,
            host_timeout: Duration::from_millis(DEFAULT_HOST_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            snapshot_logs: DEFAULT_SNAPSHOT_LOGS,
            cluster_name: DEFAULT_CLUSTER_NAME.to_string(),
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            metrics: None,
        }
    }
}

/// `run` arguments.
#[derive(Debug, Clone)]
pub struct RunArgs {
    pub id: NodeId,
    pub spec: ClusterSpec,
    pub data: PathBuf,
    pub opts: NodeOpts,
}

/// `cluster` arguments; `node_flags` are passed on to every `run`.
#[derive(Debug, Clone)]
pub struct ClusterArgs {
    pub nodes: u16,
    pub base_port: u16,
    pub data: PathBuf,
    pub node_flags: Vec<String>,
}

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{flag}: bad number {v:?}"))
}

/// Applies one node knob; `Ok(false)` if `flag` is not a node knob.
fn node_flag(o: &mut NodeOpts, flag: &str, v: &str) -> Result<bool, String> {
    match flag {
        "--heartbeat-ms" => o.heartbeat_ms = num(flag, v)?,
        "--election-min-ms" => o.election_min_ms = num(flag, v)?,
        "--election-max-ms" => o.election_max_ms = num(flag, v)?,
        "--host-timeout-ms" => o.host_timeout = Duration::from_millis(num(flag, v)?),
        "--idle-timeout-ms" => o.idle_timeout = Duration::from_millis(num(flag, v)?),
        "--max-connections" => o.max_connections = num(flag, v)?,
        "--snapshot-logs" => o.snapshot_logs = num(flag, v)?,
        "--cluster-name" => o.cluster_name = v.to_string(),
        "--tls-cert" => o.tls_cert = Some(v.into()),
        "--tls-key" => o.tls_key = Some(v.into()),
        "--tls-client-ca" => o.tls_client_ca = Some(v.into()),
        "--metrics" => o.metrics = Some(v.to_string()),
        _ => return Ok(false),
    }
    Ok(true)
}

/// Splits `--flag value` pairs.
fn pairs(args: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(f) = it.next() {
        if let Some((k, v)) = f.split_once('=').filter(|_| f.starts_with("--")) {
            out.push((k.to_string(), v.to_string()));
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{f}: missing value"))?;
        out.push((f.clone(), v.clone()));
    }
    Ok(out)
}

impl RunArgs {
    pub fn parse(args: &[String]) -> Result<RunArgs, String> {
        let (mut id, mut spec, mut data) = (None, None, None);
        let mut opts = NodeOpts::default();
        for (f, v) in pairs(args)? {
            match f.as_str() {
                "--id" => id = Some(num::<NodeId>(&f, &v)?),
                "--cluster" => spec = Some(ClusterSpec::parse(&v)?),
                "--data" => data = Some(PathBuf::from(v)),
                _ if node_flag(&mut opts, &f, &v)? => {}
                _ => return Err(format!("unknown option {f}")),
            }
        }
        let id = id.ok_or("--id is required")?;
        let spec = spec.ok_or("--cluster is required")?;
        let data = data.ok_or("--data is required")?;
        if !spec.nodes.contains_key(&id) {
            return Err(format!("node {id} is not in --cluster"));
        }
        if opts.election_min_ms <= opts.heartbeat_ms || opts.election_max_ms <= opts.election_min_ms
        {
            return Err("need heartbeat < election-min < election-max".into());
        }
        if opts.tls_cert.is_some() != opts.tls_key.is_some() {
            return Err("--tls-cert and --tls-key go together".into());
        }
        if opts.tls_client_ca.is_some() && opts.tls_cert.is_none() {
            return Err("--tls-client-ca needs --tls-cert/--tls-key".into());
        }
        Ok(RunArgs {
            id,
            spec,
            data,
            opts,
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
        };
        let mut data = None;
        let mut probe = NodeOpts::default();
        for (f, v) in pairs(args)? {
            match f.as_str() {
                "--nodes" => a.nodes = num(&f, &v)?,
                "--base-port" => a.base_port = num(&f, &v)?,
                "--data" => data = Some(PathBuf::from(v)),
                _ if f.starts_with("--tls") => {
                    return Err("cluster runs without TLS; use run".into())
                }
                _ if node_flag(&mut probe, &f, &v)? => a.node_flags.extend([f, v]),
                _ => return Err(format!("unknown option {f}")),
            }
        }
        a.data = data.ok_or("--data is required")?;
        if !(1..=8).contains(&a.nodes) {
            return Err("--nodes: 1..8".into());
        }
        if a.base_port as u32 + a.nodes as u32 + 1000 > u16::MAX as u32 {
            return Err("--base-port too high".into());
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let args: Vec<String> = [
            "--id",
            "2",
            "--cluster",
            "1=127.0.0.1:1/127.0.0.1:2,2=127.0.0.1:3/127.0.0.1:4",
            "--data",
            "/tmp/x",
            "--heartbeat-ms=20",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let r = RunArgs::parse(&args).unwrap();
        assert_eq!(r.id, 2);
        assert_eq!(r.opts.heartbeat_ms, 20);
    }
}
