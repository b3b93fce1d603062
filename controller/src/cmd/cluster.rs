//! `xce-controller cluster` (C7): starts N nodes on loopback (this binary with `run`), prints
//! their addresses and every change of primary, stops them all on SIGINT/SIGTERM.

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::{Child, Command};
use xce_proto::wire::ControllerRole;

use crate::base::config::{ClusterArgs, ClusterSpec};
use crate::base::tls::client_connector;
use crate::cmd::status::{ask, Caller};

/// How often the nodes are asked who is primary.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Bound on one poll of one node.
pub const POLL_TIMEOUT: Duration = Duration::from_millis(300);
/// Grace given to nodes after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

struct NodeProc {
    id: u16,
    client: String,
    child: Child,
    pid_file: PathBuf,
    alive: bool,
}

pub fn cluster(args: ClusterArgs) -> i32 {
    let res = crate::cmd::block_on(run_cluster(args)).and_then(|r| r);
    crate::cmd::exit_status("cluster", res)
}

async fn run_cluster(args: ClusterArgs) -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&args.data).map_err(|e| format!("{}: {e}", args.data.display()))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let spec = ClusterSpec::loopback(args.nodes, args.base_port);
    // C13: every link with mutual TLS, certificates made (or reused) in the --tls directory.
    let caller = Arc::new(caller_of(&args)?);

    let mut nodes = Vec::new();
    for i in 1..=args.nodes {
        nodes.push(spawn_node(&args, &exe, &spec, i)?);
    }
    let _ = std::io::stdout().flush();

    let mut primary: Option<(u32, u64)> = None;
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    let majority = nodes.len() / 2 + 1;
    let mut quorum = Quorum::default();
    let mut failed = None;
    loop {
        tokio::select! {
            _ = int.recv() => break,
            _ = term.recv() => break,
            _ = tick.tick() => {}
        }
        for n in nodes.iter_mut().filter(|n| n.alive) {
            if let Ok(Some(status)) = n.child.try_wait() {
                println!("node {} exited: {status}", n.id);
                n.alive = false;
            }
        }
        let running = nodes.iter().filter(|n| n.alive).count();
        if running == 0 {
            failed = Some("every node has exited".to_string());
            break;
        }
        let mut best: Option<(u32, u64)> = None;
        for n in nodes.iter().filter(|n| n.alive) {
            // Asks the node `waitPrimary{0}`: its role and term, without waiting.
            if let Ok(info) = ask(n.client.clone(), POLL_TIMEOUT, caller.clone()).await {
                if info.role == ControllerRole::Primary && best.is_none_or(|(_, t)| info.term > t) {
                    best = Some((info.id, info.term));
                }
            }
        }
        if let Some(b) = best {
            if primary != Some(b) {
                println!("primary {} term {}", b.0, b.1);
                primary = Some(b);
            }
        }
        if let Some(say) = quorum.update(running, majority, nodes.len(), best.is_some()) {
            println!("{say}");
            if best.is_none() {
                primary = None; // the next primary is printed, even the same one
            }
        }
        let _ = std::io::stdout().flush();
    }

    stop_all(&mut nodes).await;
    failed.map_or(Ok(()), Err)
}

/// C13: with `--tls DIR`, the certificates made (or reused) there, and the admin identity
/// the launcher asks its nodes as.
fn caller_of(args: &ClusterArgs) -> Result<Caller, String> {
    let Some(dir) = &args.tls else {
        return Ok(Caller::default());
    };
    crate::cmd::pki::local(dir, args.nodes, &Default::default())?;
    println!("certificates in {}: ca.pem, admin, scheduler, worker-host1, user-alice, user-bob (.pem/.key), token.key", dir.display());
    let admin = (dir.join("admin.pem"), dir.join("admin.key"));
    Ok(Caller {
        tls: Some(client_connector(&dir.join("ca.pem"), Some(&admin))?),
        token: String::new(),
    })
}

/// Starts node `i` (this binary with `run`), its pid in `DATA/node-I.pid`; says where it
/// serves.
fn spawn_node(
    args: &ClusterArgs,
    exe: &std::path::Path,
    spec: &str,
    i: u16,
) -> Result<NodeProc, String> {
    let client = format!("127.0.0.1:{}", args.base_port + i - 1);
    let metrics = format!(
        "127.0.0.1:{}",
        args.base_port + i - 1 + crate::base::config::METRICS_PORT_OFFSET
    );
    let child = Command::new(exe)
        .arg("run")
        .args(["--id", &i.to_string(), "--cluster", spec])
        .arg("--data")
        .arg(args.data.join(format!("node-{i}")))
        .args(["--metrics", &metrics])
        .args(&args.node_flags)
        .args(args.tls.iter().flat_map(|dir| tls_flags(dir, i)))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("spawn node {i}: {e}"))?;
    let pid = child.id().unwrap_or(0);
    let pid_file = args.data.join(format!("node-{i}.pid"));
    std::fs::write(&pid_file, format!("{pid}\n"))
        .map_err(|e| format!("{}: {e}", pid_file.display()))?;
    println!("node {i} client={client} pid={pid}");
    println!("metrics {i} http://{metrics}/metrics");
    Ok(NodeProc {
        id: i,
        client,
        child,
        pid_file,
        alive: true,
    })
}

/// SIGTERM to every node, SIGKILL to any still running after [`STOP_GRACE`].
async fn stop_all(nodes: &mut [NodeProc]) {
    eprintln!("cluster: stopping {} nodes", nodes.len());
    for n in nodes.iter() {
        if let Some(pid) = n.child.id() {
            // SAFETY: plain kill(2) on a child we spawned and have not reaped yet.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
    }
    for n in nodes.iter_mut() {
        if tokio::time::timeout(STOP_GRACE, n.child.wait())
            .await
            .is_err()
        {
            eprintln!("cluster: node {} did not stop, killing it", n.id);
            let _ = n.child.kill().await;
        }
        let _ = std::fs::remove_file(&n.pid_file);
    }
}

/// A cluster with no primary for this long is reported as having no quorum.
pub const NO_PRIMARY_REPORT: Duration = Duration::from_secs(2);

/// What the launcher last said about the quorum, so each change is said once.
#[derive(Default)]
struct Quorum {
    lost: bool,
    /// No report of a missing primary before the first election.
    seen_primary: bool,
    no_primary_since: Option<std::time::Instant>,
}

impl Quorum {
    /// One line when the quorum is lost (too few nodes running, or no primary for
    /// [`NO_PRIMARY_REPORT`]) and one when a primary serves again.
    fn update(
        &mut self,
        running: usize,
        majority: usize,
        n: usize,
        has_primary: bool,
    ) -> Option<String> {
        if has_primary {
            self.seen_primary = true;
            self.no_primary_since = None;
            if self.lost && running >= majority {
                self.lost = false;
                return Some(format!("quorum back: {running} of {n} nodes running"));
            }
            return None;
        }
        let since = *self
            .no_primary_since
            .get_or_insert_with(std::time::Instant::now);
        if self.lost {
            return None;
        }
        if running < majority {
            self.lost = true;
            return Some(format!(
                "quorum lost: {running} of {n} nodes running, {majority} needed: no primary"
            ));
        }
        if self.seen_primary && since.elapsed() >= NO_PRIMARY_REPORT {
            self.lost = true;
            return Some(format!(
                "quorum lost: no primary for {} ms ({running} of {n} nodes running)",
                since.elapsed().as_millis()
            ));
        }
        None
    }
}

/// The `run` flags of node `i` of a `cluster --tls DIR`.
fn tls_flags(dir: &std::path::Path, i: u16) -> Vec<std::ffi::OsString> {
    let node = crate::base::tls::node_name(i as crate::base::ids::NodeId);
    let files = [
        ("--tls-cert", format!("{node}.pem")),
        ("--tls-key", format!("{node}.key")),
        ("--tls-client-ca", "ca.pem".into()),
        ("--tls-peer-ca", "ca.pem".into()),
        ("--token-key", "token.key".into()),
    ];
    let flag_and_file = |(flag, name): (&str, String)| [flag.into(), dir.join(name).into()];
    files.into_iter().flat_map(flag_and_file).collect()
}
