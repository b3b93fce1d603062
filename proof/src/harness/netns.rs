//! Network namespaces for the network-fault scenarios (S11, P9, S18): each controller in its own
//! namespace, clients in another, joined by two bridges in the root namespace — a *client*
//! network and a *peer* (raft) network — so that every fault is a bridge port going down:
//!
//! ```text
//!   ns client ──eth0── [bridge C] ──eth0── ns node1 ──eth1── [bridge R] ──eth1── ns node2 …
//! ```
//! - blackholed node (no RST, packets vanish): both its ports down;
//! - node cut off from its peers but reachable by clients: its peer port down;
//! - node silent to clients (SYNs vanish): its client port down.
//!
//! A [`NetCluster`] also breaks its processes (S18): `kill -9` of one or all, SIGSTOP/SIGCONT,
//! SIGTERM, a restart (with `--join`, after its data directory was emptied), and runs
//! `xce-controller` commands (`member add`, …) and `status`'s progress question from the
//! client namespace; links are shaped (`tc tbf`) all together or one node's.
//!
//! Needs root and `ip` (iproute2). Everything made is named `xcenf-<pid>-<n>-…` (namespaces)
//! or `xn<pid base36><n>…` (links), removed when the [`Lab`] is dropped (also on panic), and
//! removed at the next [`Lab::new`] when the process that made it is gone.

use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use xce_proto::wire::{ControllerInfo, ControllerRole};

use crate::harness::cluster::{controller_bin, immediate_wait_primary, probe};

const NS_PREFIX: &str = "xcenf-";
const LINK_PREFIX: &str = "xn";
/// The client network (`10.201.1.0/24`) and the peer network (`10.201.2.0/24`). Every lab has
/// its own bridges and namespaces, so labs running at once may use the same addresses.
const CLIENT_NET: [u8; 3] = [10, 201, 1];
const PEER_NET: [u8; 3] = [10, 201, 2];
const CLIENT_PORT: u16 = 7000;
const RAFT_PORT: u16 = 7100;

static LABS: AtomicU32 = AtomicU32::new(0);

/// For a test that needs namespaces: `Some(why)` (printed as SKIPPED) where they cannot be made
/// and the test may skip; a panic where it must run — as root (where the README's test
/// command runs) or with `XCE_REQUIRE_NETNS` set — so that it never passes by skipping there.
pub fn skip_test(what: &str) -> Option<String> {
    let why = unavailable()?;
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if root || std::env::var_os("XCE_REQUIRE_NETNS").is_some() {
        panic!("{what} cannot run here although it must (root or XCE_REQUIRE_NETNS): {why}");
    }
    eprintln!("{what} SKIPPED: {why}");
    Some(why)
}

/// Why namespaces cannot be used here, if they cannot (not root, no `ip`, no kernel support).
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (network namespaces need CAP_NET_ADMIN)".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => {}
        _ => return Some("`ip` (iproute2) not found".into()),
    }
    // A name of its own per probe: tests of one process probe concurrently.
    static PROBES: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "{NS_PREFIX}{}-probe{}",
        std::process::id(),
        PROBES.fetch_add(1, Ordering::SeqCst)
    );
    match ip(&["netns", "add", &name]) {
        Ok(()) => {
            let _ = ip(&["netns", "del", &name]);
            None
        }
        Err(e) => Some(format!("cannot create a network namespace: {e}")),
    }
}

/// The bucket's burst on every shaped link (tc's `burst`).
const BURST: &str = "16kb";
/// Runs `ip ARGS`; an error carries its stderr.
pub fn ip(args: &[&str]) -> io::Result<()> {
    tool("ip", args)
}

/// Runs `tc ARGS`; an error carries its stderr.
pub fn tc(args: &[&str]) -> io::Result<()> {
    tool("tc", args)
}

/// Runs `cmd ARGS` (iproute2's `ip` or `tc`); an error carries its stderr.
fn tool(cmd: &str, args: &[&str]) -> io::Result<()> {
    let out = Command::new(cmd).args(args).stdin(Stdio::null()).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn ip_output(args: &[&str]) -> io::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn base36(mut n: u32, width: usize) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut s = Vec::new();
    loop {
        s.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    while s.len() < width {
        s.push(b'0');
    }
    s.reverse();
    String::from_utf8(s).expect("ascii")
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes namespaces and bridges left by labs of processes that no longer exist (a run
/// killed before its destructors ran). Processes still inside such a namespace are killed.
pub fn clean_stale() {
    let Ok(list) = ip_output(&["netns", "list"]) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(rest) = name.strip_prefix(NS_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid_alive(pid) {
            continue;
        }
        if let Ok(pids) = ip_output(&["netns", "pids", name]) {
            for p in pids
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                // SAFETY: kill(2); the process is inside a namespace only our labs create.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
        }
        let _ = ip(&["netns", "del", name]);
    }
    let Ok(links) = ip_output(&["-o", "link", "show", "type", "bridge"]) else {
        return;
    };
    for l in links.lines() {
        // "12: xn0abcd1C: <BROADCAST,…"
        let Some(name) = l.split(':').nth(1).map(str::trim) else {
            continue;
        };
        let Some(rest) = name.strip_prefix(LINK_PREFIX) else {
            continue;
        };
        let pid = rest.get(..5).and_then(|p| u32::from_str_radix(p, 36).ok());
        if pid.is_some_and(|p| !pid_alive(p)) {
            let _ = ip(&["link", "del", name]);
        }
    }
}

/// A set of namespaces and bridges owned by this process, removed on drop.
pub struct Lab {
    /// `xcenf-<pid>-<n>`
    tag: String,
    /// `xn<pid base36, 5><n base36>` (interface names are at most 15 bytes)
    short: String,
    namespaces: Vec<String>,
    bridges: Vec<String>,
    /// Every veth pair: (bridge port, namespace, device inside it).
    links: Vec<(String, String, String)>,
}

impl Lab {
    /// A new, empty lab; first removes what dead processes left behind.
    pub fn new() -> io::Result<Lab> {
        clean_stale();
        let pid = std::process::id();
        let n = LABS.fetch_add(1, Ordering::Relaxed);
        Ok(Lab {
            tag: format!("{NS_PREFIX}{pid}-{n}"),
            short: format!("{LINK_PREFIX}{}{}", base36(pid, 5), base36(n, 1)),
            namespaces: Vec::new(),
            bridges: Vec::new(),
            links: Vec::new(),
        })
    }

    /// A namespace `…-<role>` with its loopback up.
    pub fn add_ns(&mut self, role: &str) -> io::Result<String> {
        let name = format!("{}-{role}", self.tag);
        ip(&["netns", "add", &name])?;
        self.namespaces.push(name.clone());
        ip(&["-n", &name, "link", "set", "lo", "up"])?;
        Ok(name)
    }

    /// A bridge `<short><suffix>` in the root namespace, up, with no address.
    pub fn add_bridge(&mut self, suffix: &str) -> io::Result<String> {
        let name = format!("{}{suffix}", self.short);
        ip(&["link", "add", &name, "type", "bridge"])?;
        self.bridges.push(name.clone());
        ip(&["link", "set", &name, "up"])?;
        Ok(name)
    }

    /// A veth pair: `dev` with address `addr/24` inside `ns`, its peer `<short><suffix>` a port
    /// of `bridge`. Returns the port's name (the handle for faults).
    pub fn plug(
        &mut self,
        ns: &str,
        dev: &str,
        addr: Ipv4Addr,
        bridge: &str,
        suffix: &str,
    ) -> io::Result<String> {
        let port = format!("{}{suffix}", self.short);
        ip(&[
            "link", "add", &port, "type", "veth", "peer", "name", dev, "netns", ns,
        ])?;
        ip(&["link", "set", &port, "master", bridge])?;
        ip(&["link", "set", &port, "up"])?;
        ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
        ip(&["-n", ns, "link", "set", dev, "up"])?;
        self.links
            .push((port.clone(), ns.to_string(), dev.to_string()));
        Ok(port)
    }

    /// P14: limits every link of the lab to `rate` (tc's syntax, e.g. `1mbit`) in both
    /// directions, with a token bucket (`tbf`) on each end of every veth pair: what leaves a
    /// namespace, and what the bridge sends into it. The queue holds `latency` of traffic.
    pub fn shape(&self, rate: &str, latency: &str) -> io::Result<()> {
        self.shape_where(rate, latency, |_| true)
    }

    /// [`Lab::shape`] for the links of the namespaces `only` accepts (S18: one node's links).
    pub fn shape_where(
        &self,
        rate: &str,
        latency: &str,
        only: impl Fn(&str) -> bool,
    ) -> io::Result<()> {
        for (port, ns, dev) in self.links.iter().filter(|(_, ns, _)| only(ns)) {
            let bucket = [
                "root", "tbf", "rate", rate, "burst", BURST, "latency", latency,
            ];
            let mut outer = vec!["qdisc", "replace", "dev", port.as_str()];
            outer.extend(bucket);
            tc(&outer)?;
            let mut inner = vec!["-n", ns.as_str(), "qdisc", "replace", "dev", dev.as_str()];
            inner.extend(bucket);
            tc(&inner)?;
        }
        Ok(())
    }

    /// Removes what [`Lab::shape`] or [`Lab::shape_where`] set, on every link (a link without
    /// it is left as it is).
    pub fn unshape(&self) -> io::Result<()> {
        for (port, ns, dev) in &self.links {
            for (netns, d) in [(None, port), (Some(ns), dev)] {
                let mut args: Vec<&str> = Vec::new();
                if let Some(ns) = netns {
                    args.extend(["-n", ns.as_str()]);
                }
                args.extend(["qdisc", "del", "dev", d.as_str(), "root"]);
                // "No such file or directory" (or "Cannot delete qdisc with handle of zero")
                // on a link that was not shaped: nothing to remove.
                if let Err(e) = tc(&args) {
                    let m = e.to_string();
                    if !(m.contains("No such file") || m.contains("handle of zero")) {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// The prefix of every namespace this lab makes (`xcenf-<pid>-<n>`).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Sets a bridge port (from [`Lab::plug`]) up or down.
    pub fn set_port(&self, port: &str, up: bool) -> io::Result<()> {
        ip(&["link", "set", port, if up { "up" } else { "down" }])
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in self.namespaces.drain(..) {
            if let Ok(pids) = ip_output(&["netns", "pids", &ns]) {
                for p in pids
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                {
                    // SAFETY: kill(2) on a process inside our own namespace.
                    unsafe { libc::kill(p, libc::SIGKILL) };
                }
            }
            if let Err(e) = ip(&["netns", "del", &ns]) {
                eprintln!("netns: {e}");
            }
        }
        for b in self.bridges.drain(..) {
            if let Err(e) = ip(&["link", "del", &b]) {
                eprintln!("netns: {e}");
            }
        }
    }
}

/// Moves the calling thread into namespace `ns` (only this thread: network namespaces are
/// per thread). Sockets it creates from now on live there.
pub fn enter(ns: &str) -> io::Result<()> {
    let f = File::open(Path::new("/var/run/netns").join(ns))?;
    // SAFETY: setns(2) with a namespace fd we hold open; CLONE_NEWNET affects only the calling
    // thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `f` on a new thread inside namespace `ns` and returns its result.
pub fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> io::Result<T> {
        enter(&ns)?;
        Ok(f())
    })
    .join()
    .map_err(|_| io::Error::other("thread in namespace panicked"))?
}

/// A command whose process runs in namespace `ns` and dies with the thread that starts it
/// (`PR_SET_PDEATHSIG`: start it from a thread that outlives it).
fn in_namespace(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> io::Result<Command> {
    let nsf = File::open(Path::new("/var/run/netns").join(ns))?;
    let mut cmd = Command::new(program);
    // SAFETY: between fork and exec only async-signal-safe syscalls: setns(2) into the
    // namespace (the fd is moved into the closure, so it stays open until the command is
    // dropped) and prctl(2) so that the process dies with this one.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(nsf.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(cmd)
}

/// What an `xce-controller` command run by [`NetCluster::controller_cmd`] said.
#[derive(Debug, Clone)]
pub struct CmdOutput {
    /// Its exit code; `None`: killed at the deadline (or by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// One controller of a [`NetCluster`].
pub struct NetNode {
    pub id: u32,
    pub ns: String,
    /// Reached from the client namespace.
    pub client: SocketAddr,
    /// Reached from the other controllers.
    pub raft: SocketAddr,
    /// Bridge ports: the client network's and the peer network's.
    pub client_port: String,
    pub peer_port: String,
    child: Option<Child>,
    /// Stopped with SIGSTOP ([`NetCluster::pause`]) and not continued since.
    paused: bool,
}

impl NetNode {
    /// The node's process id while it runs (paused or not).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }
}

/// A fault, set and cleared by [`NetCluster::fault`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Both ports down: nothing reaches the node, nothing leaves it, no RST.
    Blackhole(u32),
    /// Peer port down: the node is cut off from the other controllers; clients still reach it.
    CutFromPeers(u32),
    /// Client port down: clients' packets vanish; the node still talks to its peers.
    SilentToClients(u32),
}

/// `n` controllers, each in its own namespace, and a client namespace.
pub struct NetCluster {
    pub nodes: Vec<NetNode>,
    /// Where clients must run ([`enter`], [`in_ns`]).
    pub client_ns: String,
    dir: PathBuf,
    log_dir: Option<PathBuf>,
    extra_args: Vec<String>,
    // Dropped last: the processes are killed first (in `Drop`).
    lab: Lab,
}

impl NetCluster {
    /// Creates the namespaces and starts `n` controllers (default timing unless `extra_args`).
    /// Node logs go to `log_dir/node-N.log` when given.
    pub fn start(
        n: usize,
        extra_args: &[String],
        log_dir: Option<PathBuf>,
    ) -> io::Result<NetCluster> {
        let mut lab = Lab::new()?;
        let cbr = lab.add_bridge("C")?;
        let rbr = lab.add_bridge("R")?;
        let client_ns = lab.add_ns("client")?;
        lab.plug(
            &client_ns,
            "eth0",
            Ipv4Addr::from([CLIENT_NET[0], CLIENT_NET[1], CLIENT_NET[2], 100]),
            &cbr,
            "k",
        )?;
        let mut nodes = Vec::new();
        for i in 1..=n as u8 {
            let ns = lab.add_ns(&format!("node{i}"))?;
            let caddr = Ipv4Addr::from([CLIENT_NET[0], CLIENT_NET[1], CLIENT_NET[2], 10 + i]);
            let raddr = Ipv4Addr::from([PEER_NET[0], PEER_NET[1], PEER_NET[2], 10 + i]);
            let client_port = lab.plug(&ns, "eth0", caddr, &cbr, &format!("c{i}"))?;
            let peer_port = lab.plug(&ns, "eth1", raddr, &rbr, &format!("r{i}"))?;
            nodes.push(NetNode {
                id: i as u32,
                ns,
                client: SocketAddr::from((caddr, CLIENT_PORT)),
                raft: SocketAddr::from((raddr, RAFT_PORT)),
                client_port,
                peer_port,
                child: None,
                paused: false,
            });
        }
        let dir = std::env::temp_dir().join(&lab.tag);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let mut c = NetCluster {
            nodes,
            client_ns,
            dir,
            log_dir,
            extra_args: extra_args.to_vec(),
            lab,
        };
        for id in 1..=n as u32 {
            c.spawn(id)?;
        }
        Ok(c)
    }

    /// The nodes' log lines (when started with a log directory) that contain any of `pats`,
    /// merged in time order (each line starts with its timestamp) — for a failing assertion
    /// to show what the cluster did, where the log directory itself is not kept (CI).
    pub fn log_lines(&self, pats: &[&str]) -> String {
        let Some(d) = &self.log_dir else {
            return "(no node logs kept)".to_string();
        };
        let mut lines: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|n| std::fs::read_to_string(d.join(format!("node-{}.log", n.id))).ok())
            .flat_map(|t| t.lines().map(str::to_string).collect::<Vec<_>>())
            .filter(|l| pats.iter().any(|p| l.contains(p)))
            .collect();
        lines.sort();
        lines.join("\n")
    }

    /// `1=client/raft,…` for `xce-controller run --cluster`.
    pub fn spec(&self) -> String {
        crate::harness::cluster::cluster_spec(self.nodes.iter().map(|n| (n.id, n.client, n.raft)))
    }

    /// The library's master list, in node order.
    pub fn masters(&self) -> String {
        crate::harness::cluster::master_list(self.nodes.iter().map(|n| n.client))
    }

    pub fn node(&self, id: u32) -> &NetNode {
        &self.nodes[id as usize - 1]
    }

    fn spawn(&mut self, id: u32) -> io::Result<()> {
        self.spawn_with(id, &[])
    }

    /// Starts node `id` from its data directory with `more` flags after the cluster's own.
    /// `{id}` in an extra argument is the node's id, `{dir}` the cluster's directory (per-node
    /// files).
    fn spawn_with(&mut self, id: u32, more: &[&str]) -> io::Result<()> {
        let spec = self.spec();
        let data = self.dir.join(format!("node-{id}"));
        std::fs::create_dir_all(&data)?;
        let stderr = match &self.log_dir {
            Some(d) => {
                std::fs::create_dir_all(d)?;
                Stdio::from(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(d.join(format!("node-{id}.log")))?,
                )
            }
            None => Stdio::null(),
        };
        let (id_s, dir_s) = (id.to_string(), self.dir.display().to_string());
        let mut cmd = in_namespace(&self.nodes[id as usize - 1].ns, controller_bin())?;
        cmd.args(["run", "--id", &id_s, "--cluster", &spec, "--data"])
            .arg(&data)
            // The lab's addresses are not loopback; its links are plaintext on purpose (C13).
            .arg("--insecure")
            .args(
                self.extra_args
                    .iter()
                    .map(|a| a.replace("{id}", &id_s).replace("{dir}", &dir_s)),
            )
            .args(more)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = cmd.spawn()?;
        let node = &mut self.nodes[id as usize - 1];
        node.child = Some(child);
        node.paused = false;
        Ok(())
    }

    /// The node answering `hello` as primary, probing from the client namespace; `except`
    /// is not probed. Polls until `timeout`.
    pub fn wait_primary(&self, except: Option<u32>, timeout: Duration) -> Option<u32> {
        let targets: Vec<(u32, SocketAddr)> = self
            .nodes
            .iter()
            .filter(|n| Some(n.id) != except)
            .map(|n| (n.id, n.client))
            .collect();
        in_ns(&self.client_ns, move || {
            let deadline = Instant::now() + timeout;
            loop {
                for &(id, addr) in &targets {
                    if matches!(
                        probe(addr, Duration::from_millis(300)),
                        Ok(Some(ControllerRole::Primary))
                    ) {
                        return Some(id);
                    }
                }
                if Instant::now() >= deadline {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
        .ok()
        .flatten()
    }

    /// A primary, once every other node follows it and knows the commit index of its first
    /// entries (probed from the client namespace): only then has a node that started without
    /// data caught up and votes (C12), so the cluster survives losing any one node — a test
    /// that breaks a node right after [`Self::wait_primary`] may find no quorum left (as
    /// [`crate::Cluster::wait_settled`]). Polls until `timeout`.
    pub fn wait_settled(&self, timeout: Duration) -> Option<u32> {
        let deadline = Instant::now() + timeout;
        let p = self.wait_primary(None, timeout)?;
        let nodes: Vec<(u32, SocketAddr)> = self.nodes.iter().map(|n| (n.id, n.client)).collect();
        let others: Vec<u32> = nodes.iter().map(|n| n.0).filter(|&id| id != p).collect();
        in_ns(&self.client_ns, move || {
            let ask = |id: u32| {
                let addr = nodes.iter().find(|n| n.0 == id)?.1;
                immediate_wait_primary(addr, Duration::from_millis(500)).ok()
            };
            crate::harness::cluster::settle(p, &others, deadline, ask)
        })
        .ok()
        .flatten()
    }

    /// Sets (`on`) or clears a fault.
    pub fn fault(&self, f: Fault, on: bool) -> io::Result<()> {
        let up = !on;
        match f {
            Fault::Blackhole(id) => {
                self.lab.set_port(&self.node(id).client_port, up)?;
                self.lab.set_port(&self.node(id).peer_port, up)
            }
            Fault::CutFromPeers(id) => self.lab.set_port(&self.node(id).peer_port, up),
            Fault::SilentToClients(id) => self.lab.set_port(&self.node(id).client_port, up),
        }
    }

    /// The prefix of this cluster's namespaces.
    pub fn tag(&self) -> &str {
        self.lab.tag()
    }

    /// Limits every link (clients' and peers') to `rate` both ways (P14, [`Lab::shape`]).
    pub fn shape(&self, rate: &str, latency: &str) -> io::Result<()> {
        self.lab.shape(rate, latency)
    }

    /// The highest raft term any node reports in `hello` (probed from the client namespace;
    /// a node that does not answer within `timeout` is left out). Every election, won or
    /// not, raises some node's term by one.
    pub fn max_term(&self, timeout: Duration) -> Option<u64> {
        let targets: Vec<SocketAddr> = self.nodes.iter().map(|n| n.client).collect();
        in_ns(&self.client_ns, move || {
            targets
                .iter()
                .filter_map(|&a| {
                    crate::harness::cluster::probe_info(a, timeout)
                        .ok()
                        .flatten()
                })
                .map(|i| i.term)
                .max()
        })
        .ok()
        .flatten()
    }

    /// Where the nodes keep their data.
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// Node `id`'s data directory.
    pub fn node_data(&self, id: u32) -> PathBuf {
        self.dir.join(format!("node-{id}"))
    }

    /// `ID=client/raft` of node `id`, as `member add` takes it.
    pub fn node_spec(&self, id: u32) -> String {
        let n = self.node(id);
        crate::harness::cluster::cluster_spec(std::iter::once((n.id, n.client, n.raft)))
    }

    /// Sends `sig` to node `id` if it runs (a child of ours, not reaped yet).
    fn signal(&self, id: u32, sig: libc::c_int) {
        if let Some(pid) = self.node(id).pid() {
            // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
            unsafe { libc::kill(pid as libc::pid_t, sig) };
        }
    }

    /// `kill -9` node `id` and reap it; false if it was not running.
    pub fn kill(&mut self, id: u32) -> bool {
        let node = &mut self.nodes[id as usize - 1];
        node.paused = false;
        match node.child.take() {
            Some(mut child) => {
                let _ = child.kill();
                let _ = child.wait();
                true
            }
            None => false,
        }
    }

    /// `kill -9` every node that runs.
    pub fn kill_all(&mut self) {
        for id in 1..=self.nodes.len() as u32 {
            self.kill(id);
        }
    }

    /// SIGSTOP: node `id` is alive but silent. Returns once every thread of it is stopped (at
    /// most 5 s): until then it could still answer.
    pub fn pause(&mut self, id: u32) {
        self.signal(id, libc::SIGSTOP);
        if let Some(pid) = self.node(id).pid() {
            xce_testkit::procs::stopped(pid as i32, crate::harness::cluster::PAUSE_TAKES_EFFECT);
        }
        let node = &mut self.nodes[id as usize - 1];
        node.paused = node.child.is_some();
    }

    /// SIGCONT after [`NetCluster::pause`].
    pub fn resume(&mut self, id: u32) {
        self.signal(id, libc::SIGCONT);
        self.nodes[id as usize - 1].paused = false;
    }

    /// SIGTERM node `id` (the primary hands over, C14) and wait up to `grace` for it to exit,
    /// then `kill -9`: true when it exited by itself.
    pub fn terminate(&mut self, id: u32, grace: Duration) -> bool {
        self.resume(id);
        self.signal(id, libc::SIGTERM);
        let Some(mut child) = self.nodes[id as usize - 1].child.take() else {
            return true;
        };
        crate::harness::sys::reap_within(&mut child, grace)
    }

    /// Starts node `id` again from its data directory (`kill -9` first if it runs).
    pub fn restart(&mut self, id: u32) -> io::Result<()> {
        self.kill(id);
        self.spawn(id)
    }

    /// Starts the nodes `ids` again from their data directories (`kill -9` first of any that
    /// runs), in that order, `gaps[i]` between the `i`-th and the next (missing gaps: none).
    pub fn start_in_order(&mut self, ids: &[u32], gaps: &[Duration]) -> io::Result<()> {
        for (i, &id) in ids.iter().enumerate() {
            if i > 0 {
                std::thread::sleep(gaps.get(i - 1).copied().unwrap_or_default());
            }
            self.restart(id)?;
        }
        Ok(())
    }

    /// Starts node `id` with `--join` (C17: a blank node waits, uninitialised, to be added),
    /// `kill -9` first if it runs.
    pub fn restart_joining(&mut self, id: u32) -> io::Result<()> {
        self.kill(id);
        self.spawn_with(id, &["--join"])
    }

    /// Empties node `id`'s data directory (a lost or replaced disk). The node must be down.
    pub fn wipe(&mut self, id: u32) -> io::Result<()> {
        if self.node(id).is_running() {
            return Err(io::Error::other(format!("node {id} runs: not wiped")));
        }
        let data = self.node_data(id);
        match std::fs::remove_dir_all(&data) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        std::fs::create_dir_all(&data)
    }

    /// The nodes that exited on their own since the last call (a crash, a panic, an exit the
    /// controller chose), with how; each is reaped and counts as not running from then on.
    pub fn reap_exited(&mut self) -> Vec<(u32, std::process::ExitStatus)> {
        let mut out = Vec::new();
        for n in &mut self.nodes {
            if let Some(Ok(Some(status))) = n.child.as_mut().map(Child::try_wait) {
                n.child = None;
                n.paused = false;
                out.push((n.id, status));
            }
        }
        out
    }

    /// Waits up to `timeout` for node `id` to exit on its own and reaps it (S18's disk full:
    /// the node must exit 74); `None` if it still runs then, or was not running.
    pub fn wait_exit(&mut self, id: u32, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        let node = &mut self.nodes[id as usize - 1];
        loop {
            match node.child.as_mut().map(Child::try_wait) {
                Some(Ok(Some(status))) => {
                    node.child = None;
                    node.paused = false;
                    return Some(status);
                }
                Some(Ok(None)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => return None,
            }
        }
    }

    /// One HTTP request to `127.0.0.1:port` inside node `id`'s namespace (its `--metrics`
    /// endpoint bound there: reachable whatever the faults on its links), bounded by
    /// `timeout`: the status line and the body.
    pub fn node_http(
        &self,
        id: u32,
        port: u16,
        method: &str,
        path: &str,
        body: &str,
        timeout: Duration,
    ) -> io::Result<(String, String)> {
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        in_ns(
            &self.node(id).ns,
            move || -> io::Result<(String, String)> {
                use std::io::{Read, Write};
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                s.write_all(req.as_bytes())?;
                let mut out = Vec::new();
                // The reply is small and the server closes: bounded by the timeout and 1 MiB.
                s.take(1 << 20).read_to_end(&mut out)?;
                let out = String::from_utf8_lossy(&out).into_owned();
                let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
                Ok((
                    head.lines().next().unwrap_or("").to_string(),
                    body.to_string(),
                ))
            },
        )?
    }

    /// Runs `xce-controller ARGS` in the client namespace (`member add`, `status`, …), killed
    /// at `timeout`. Its output goes through files in the cluster's directory (no pipe to
    /// drain while waiting).
    pub fn controller_cmd(&self, args: &[&str], timeout: Duration) -> io::Result<CmdOutput> {
        static CMDS: AtomicU32 = AtomicU32::new(0);
        let k = CMDS.fetch_add(1, Ordering::Relaxed);
        let (out_path, err_path) = (
            self.dir.join(format!("cmd-{k}.out")),
            self.dir.join(format!("cmd-{k}.err")),
        );
        let mut child = in_namespace(&self.client_ns, controller_bin())?
            .args(args)
            .stdin(Stdio::null())
            .stdout(File::create(&out_path)?)
            .stderr(File::create(&err_path)?)
            .spawn()?;
        let deadline = Instant::now() + timeout;
        let status = loop {
            match child.try_wait()? {
                Some(st) => break Some(st),
                None if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let out = CmdOutput {
            code: status.and_then(|s| s.code()),
            stdout: read(&out_path),
            stderr: read(&err_path),
        };
        let _ = std::fs::remove_file(&out_path);
        let _ = std::fs::remove_file(&err_path);
        Ok(out)
    }

    /// An immediate `waitPrimary` to every node from the client namespace (what `status`
    /// asks): each node's answer — role, term, the primary it names, its log, commit and
    /// applied index — or why there is none.
    pub fn progress(&self, timeout: Duration) -> Vec<(u32, Result<ControllerInfo, String>)> {
        let targets: Vec<(u32, SocketAddr)> = self.nodes.iter().map(|n| (n.id, n.client)).collect();
        in_ns(&self.client_ns, move || {
            let asks: Vec<_> = targets
                .into_iter()
                .map(|(id, addr)| {
                    std::thread::spawn(move || (id, immediate_wait_primary(addr, timeout)))
                })
                .collect();
            asks.into_iter()
                .map(|h| h.join().expect("a progress probe panicked"))
                .collect()
        })
        .unwrap_or_else(|e| {
            self.nodes
                .iter()
                .map(|n| (n.id, Err(format!("client namespace: {e}"))))
                .collect()
        })
    }

    /// The members the serving primary at node `id` names in `hello` (F29), from the client
    /// namespace; `None` when it does not answer as a serving primary.
    pub fn members_seen_by(&self, id: u32, timeout: Duration) -> Option<Vec<u32>> {
        let addr = self.node(id).client;
        in_ns(&self.client_ns, move || {
            crate::harness::cluster::probe_info(addr, timeout)
                .ok()
                .flatten()
                .filter(|i| !i.members.is_empty())
                .map(|i| i.members.iter().map(|m| m.id).collect())
        })
        .ok()
        .flatten()
    }

    /// Limits node `id`'s links (client and peer) to `rate` both ways ([`Lab::shape_where`]).
    pub fn shape_node(&self, id: u32, rate: &str, latency: &str) -> io::Result<()> {
        let ns = self.node(id).ns.clone();
        self.lab.shape_where(rate, latency, |n| n == ns)
    }

    /// Takes every link's shaping off ([`Lab::unshape`]).
    pub fn unshape(&self) -> io::Result<()> {
        self.lab.unshape()
    }
}

impl Drop for NetCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        // `self.lab` drops next: namespaces, then bridges.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_interface_limits() {
        assert_eq!(base36(0, 5), "00000");
        assert_eq!(base36(4_194_304, 5), "2hwcg"); // pid_max on 64-bit
        assert_eq!(u32::from_str_radix("2hwcg", 36).unwrap(), 4_194_304);
        assert_eq!(base36(35, 1), "z");
        assert_eq!(base36(36, 1), "10");
        // xn + 5 + lab number + the longest suffix ("c8", "r8") stays within IFNAMSIZ - 1.
        let longest = format!("{LINK_PREFIX}{}{}r8", base36(4_194_304, 5), base36(1295, 1));
        assert!(longest.len() <= 15, "{longest}");
    }
}
