//! A local cluster of real `xce-controller` processes on loopback, for scenarios, benchmarks
//! and the demo: start N nodes, find the primary, kill -9 / SIGSTOP / SIGCONT / restart one,
//! and clean everything up when dropped (also when a test panics).

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use xce_proto::wire::{self, ControllerRole, Hello, Limits, Op, Reply, ReplyData, Request};

/// How long a pause ([`Cluster::pause`]) waits for every thread of the node to stop.
pub const PAUSE_TAKES_EFFECT: Duration = Duration::from_secs(5);

/// `1=client/raft,2=…` as `xce-controller run --cluster` takes it, from (id, client, raft).
pub fn cluster_spec(nodes: impl Iterator<Item = (u32, SocketAddr, SocketAddr)>) -> String {
    nodes
        .map(|(id, client, raft)| format!("{id}={client}/{raft}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `host:port,host:port,…` as the library's master list.
pub fn master_list(clients: impl Iterator<Item = SocketAddr>) -> String {
    clients.map(|c| c.to_string()).collect::<Vec<_>>().join(",")
}

/// One controller node of a [`Cluster`].
pub struct Node {
    pub id: u32,
    pub client: SocketAddr,
    pub raft: SocketAddr,
    child: Option<Child>,
    stopped: bool,
}

impl Node {
    /// The node's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

/// Extra arguments for every node (timing knobs, TLS files).
#[derive(Clone, Debug, Default)]
pub struct ClusterOpts {
    pub extra_args: Vec<String>,
    /// Where node logs go; `None` discards them.
    pub log_dir: Option<PathBuf>,
}

/// N real controller processes on loopback, each with its own data directory.
pub struct Cluster {
    pub nodes: Vec<Node>,
    dir: PathBuf,
    opts: ClusterOpts,
}

static UNIQUE: AtomicU64 = AtomicU64::new(0);

/// See [`kill_nodes_with_this_process`].
static DIE_WITH_PARENT: AtomicBool = AtomicBool::new(false);

/// Nodes spawned from now on get `PR_SET_PDEATHSIG = SIGKILL`: they die with the process that
/// started them even when it is killed without running destructors (a benchmark stopped by
/// `timeout` or SIGTERM). Linux ties the signal to the *thread* that spawned the node, so turn
/// this on only when every start/restart happens on a thread that outlives the cluster (the
/// bench's main thread).
pub fn kill_nodes_with_this_process(on: bool) {
    DIE_WITH_PARENT.store(on, Ordering::Relaxed);
}

/// Builds the controller in this crate's profile (unless `XCE_CONTROLLER` names one), so that
/// a command of this crate never measures a stale one. With failpoints (the controller's
/// feature `failpoints`, docs/controller.md): the scenarios and the nemesis inject faults
/// through them, and the binary is then the one the controller's own tests run (their
/// dev-dependency turns the feature on), so neither build replaces the other's with a
/// different one. A release build of the workspace (`cargo build --release`) has none.
///
/// For the commands (`xce-bench`, `xce-nemesis`, …), never from a test: a `cargo build` during
/// `cargo test` resolves features for `-p xce-controller` alone and rewrites
/// `target/debug/deps/libxce.rlib` — the library is also a cdylib, so its rlib has no hash in
/// its name — and the outer run's doctests then link crates built against the other one
/// (rustdoc: E0463 "can't find crate for xce_testkit"; reproduced by a test that only calls
/// this, followed by the doctests).
pub fn build_controller() -> Result<(), String> {
    if std::env::var_os("XCE_CONTROLLER").is_some() {
        return Ok(());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args([
            "build",
            "--quiet",
            "-p",
            "xce-controller",
            "--features",
            "xce-controller/failpoints",
        ]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    match cmd.status() {
        Ok(st) if st.success() => Ok(()),
        Ok(st) => Err(format!("cargo build -p xce-controller: {st}")),
        Err(e) => Err(format!("cargo build -p xce-controller: {e}")),
    }
}

/// The `xce-controller` binary: `$XCE_CONTROLLER`, else next to the running executable's
/// target directory (`target/<profile>/xce-controller`), preferring the same profile.
pub fn controller_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("XCE_CONTROLLER") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/test-xxxx or target/<profile>/example → target/<profile>
    let mut dirs: Vec<PathBuf> = exe
        .ancestors()
        .skip(1)
        .take(3)
        .map(Path::to_path_buf)
        .collect();
    if let Some(target) = dirs.iter().find(|d| d.ends_with("target")).cloned() {
        dirs.push(target.join("release"));
        dirs.push(target.join("debug"));
    }
    dirs.into_iter()
        .map(|d| d.join("xce-controller"))
        .find(|p| p.is_file())
        .expect("xce-controller binary not found: run `cargo build -p xce-controller` or set XCE_CONTROLLER")
}

use xce_testkit::ports::free_ports;

impl Cluster {
    /// Start `n` nodes and return without waiting for an election.
    pub fn start(n: usize, opts: ClusterOpts) -> io::Result<Cluster> {
        Cluster::start_in(n, opts, &std::env::temp_dir())
    }

    /// [`Cluster::start`] with the data directories under `root` (P11's budget: a memory-backed
    /// file system, where an fsync costs nothing).
    pub fn start_in(n: usize, opts: ClusterOpts, root: &Path) -> io::Result<Cluster> {
        let k = UNIQUE.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("xce-cluster-{}-{k}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let ports = free_ports(2 * n);
        let nodes = (0..n)
            .map(|i| Node {
                id: i as u32 + 1,
                client: SocketAddr::from(([127, 0, 0, 1], ports[i])),
                raft: SocketAddr::from(([127, 0, 0, 1], ports[n + i])),
                child: None,
                stopped: false,
            })
            .collect();
        let mut c = Cluster { nodes, dir, opts };
        for id in 1..=n as u32 {
            c.spawn(id)?;
        }
        Ok(c)
    }

    /// `1=client/raft,2=…` as `xce-controller run --cluster` takes it.
    pub fn spec(&self) -> String {
        cluster_spec(self.nodes.iter().map(|n| (n.id, n.client, n.raft)))
    }

    /// `host:port,host:port,…` as the library's master list.
    pub fn masters(&self) -> String {
        master_list(self.nodes.iter().map(|n| n.client))
    }

    pub fn node(&self, id: u32) -> &Node {
        &self.nodes[id as usize - 1]
    }

    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    fn spawn(&mut self, id: u32) -> io::Result<()> {
        let spec = self.spec();
        let data = self.dir.join(format!("node-{id}"));
        std::fs::create_dir_all(&data)?;
        let stderr = match self.log_dir() {
            Some(d) => {
                std::fs::create_dir_all(&d)?;
                Stdio::from(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(d.join(format!("node-{id}.log")))?,
                )
            }
            None => Stdio::null(),
        };
        let mut cmd = Command::new(controller_bin());
        cmd.args(["run", "--id", &id.to_string(), "--cluster", &spec, "--data"])
            .arg(&data)
            // `{id}` in an extra argument is this node's id (per-node certificate files).
            .args(
                self.opts
                    .extra_args
                    .iter()
                    .map(|a| a.replace("{id}", &id.to_string())),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        if DIE_WITH_PARENT.load(Ordering::Relaxed) {
            // SAFETY: prctl(2) is async-signal-safe and touches no memory of the parent.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.spawn()?;
        let node = &mut self.nodes[id as usize - 1];
        node.child = Some(child);
        node.stopped = false;
        Ok(())
    }

    /// The id of the node that answers `hello` as primary, polling until `timeout`.
    pub fn wait_primary(&self, timeout: Duration) -> Option<u32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(id) = self.primary_now() {
                return Some(id);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The answer of node `id` to an immediate `waitPrimary` (what `status` asks): the
    /// primary it knows, its log and commit index; `None` when it does not answer.
    pub fn progress(&self, id: u32) -> Option<wire::ControllerInfo> {
        immediate_wait_primary(self.node(id).client, Duration::from_millis(500)).ok()
    }

    /// A primary, once every other running node follows it and knows the commit index of its
    /// first entries (its barrier, of its own term): only then has a node that started without
    /// data caught up and votes (C12), so the cluster survives losing any one node. Polls
    /// until `timeout`.
    pub fn wait_settled(&self, timeout: Duration) -> Option<u32> {
        let deadline = Instant::now() + timeout;
        let p = self.wait_primary(timeout)?;
        let others: Vec<u32> = self
            .nodes
            .iter()
            .filter(|n| n.is_running() && !n.stopped && n.id != p)
            .map(|n| n.id)
            .collect();
        settle(p, &others, deadline, |id| self.progress(id))
    }

    /// Waits until every running node accepts TCP connections on its client port (for TLS
    /// clusters, where the plaintext role probe cannot be used). False at the timeout.
    pub fn wait_listening(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        self.nodes.iter().filter(|n| n.is_running()).all(|n| loop {
            if TcpStream::connect_timeout(&n.client, Duration::from_millis(200)).is_ok() {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(10));
        })
    }

    /// The node answering as primary right now, if any (one probe per running node).
    pub fn primary_now(&self) -> Option<u32> {
        self.nodes
            .iter()
            .filter(|n| n.is_running() && !n.stopped)
            .find(|n| {
                matches!(
                    probe(n.client, Duration::from_millis(300)),
                    Ok(Some(ControllerRole::Primary))
                )
            })
            .map(|n| n.id)
    }

    /// A primary other than `old`, polling until `timeout`.
    pub fn wait_new_primary(&self, old: u32, timeout: Duration) -> Option<u32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.primary_now() {
                Some(id) if id != old => return Some(id),
                _ => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        None
    }

    /// Where the node logs go: the cluster's log directory, else (XCE_CLUSTER_LOGS=DIR, to read
    /// why a test failed) DIR/<this cluster's directory name>/; None: discarded.
    fn log_dir(&self) -> Option<PathBuf> {
        self.opts.log_dir.clone().or_else(|| {
            std::env::var_os("XCE_CLUSTER_LOGS")
                .map(|d| PathBuf::from(d).join(self.dir.file_name().unwrap_or_default()))
        })
    }

    /// One line per node for a failed test's message: running (and the role it answers), exited
    /// on its own (with its status: a controller that could not start, e.g. its port taken),
    /// paused, or not started. Reaps a node that exited.
    pub fn report(&mut self) -> String {
        let mut lines = Vec::new();
        for n in &mut self.nodes {
            let state = match n.child.as_mut().map(Child::try_wait) {
                None => "not running (killed or never started)".to_string(),
                Some(Ok(Some(status))) => {
                    n.child = None;
                    format!("EXITED on its own: {status}")
                }
                Some(Err(e)) => format!("unknown: {e}"),
                Some(Ok(None)) if n.stopped => "paused (SIGSTOP)".to_string(),
                Some(Ok(None)) => match probe_info(n.client, Duration::from_millis(300)) {
                    Ok(Some(info)) => format!(
                        "running, answers {:?} in term {} (primary it names: {})",
                        info.role, info.term, info.primary_id
                    ),
                    Ok(None) => "running, hello refused".to_string(),
                    Err(e) => format!("running, no answer to hello: {e}"),
                },
            };
            lines.push(format!("node {}: {state}", n.id));
        }
        lines.push(match self.log_dir() {
            Some(d) => format!("logs in {}", d.display()),
            None => "logs discarded (XCE_CLUSTER_LOGS=DIR keeps them)".to_string(),
        });
        lines.join("; ")
    }

    /// [`Cluster::wait_new_primary`] for a test: panics with [`Cluster::report`] (which node
    /// exited, which answers what) when no new primary shows by `timeout`.
    pub fn expect_new_primary(&mut self, old: u32, timeout: Duration) -> u32 {
        match self.wait_new_primary(old, timeout) {
            Some(id) => id,
            None => panic!(
                "no primary other than node {old} within {timeout:?}: {}",
                self.report()
            ),
        }
    }

    /// `kill -9` the node and reap it.
    pub fn kill(&mut self, id: u32) {
        let node = &mut self.nodes[id as usize - 1];
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        node.stopped = false;
    }

    /// SIGSTOP: the node is alive but silent (a hung primary, F8 / S4). Returns once every
    /// thread of it is stopped (at most 5 s): until then it could still answer.
    pub fn pause(&mut self, id: u32) {
        self.signal(id, libc::SIGSTOP);
        if let Some(pid) = self.node(id).pid() {
            xce_testkit::procs::stopped(pid as i32, PAUSE_TAKES_EFFECT);
        }
        self.nodes[id as usize - 1].stopped = true;
    }

    /// SIGCONT after [`Cluster::pause`].
    pub fn resume(&mut self, id: u32) {
        self.signal(id, libc::SIGCONT);
        self.nodes[id as usize - 1].stopped = false;
    }

    fn signal(&self, id: u32, sig: libc::c_int) {
        if let Some(pid) = self.node(id).pid() {
            // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
            unsafe { libc::kill(pid as libc::pid_t, sig) };
        }
    }

    /// SIGTERM the node and wait up to `grace` for it to exit (then `kill -9`); true when it
    /// exited by itself. The node can then be started again with [`Cluster::restart`].
    pub fn terminate(&mut self, id: u32, grace: Duration) -> bool {
        self.signal(id, libc::SIGTERM);
        let node = &mut self.nodes[id as usize - 1];
        let Some(mut child) = node.child.take() else {
            return true;
        };
        let exited = crate::harness::sys::reap_within(&mut child, grace);
        node.stopped = false;
        exited
    }

    /// Start a killed node again from its data directory.
    pub fn restart(&mut self, id: u32) -> io::Result<()> {
        self.kill(id);
        self.spawn(id)
    }

    /// Stop every node cleanly: SIGTERM, then SIGKILL for any still running after `grace`.
    pub fn stop_all(&mut self, grace: Duration) {
        for n in &self.nodes {
            if let Some(pid) = n.pid() {
                let sig = if n.stopped {
                    libc::SIGCONT
                } else {
                    libc::SIGTERM
                };
                // SAFETY: kill(2) on children we spawned and have not reaped.
                unsafe { libc::kill(pid as libc::pid_t, sig) };
                if n.stopped {
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
                }
            }
        }
        let deadline = Instant::now() + grace;
        for n in &mut self.nodes {
            if let Some(mut child) = n.child.take() {
                while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
            n.stopped = false;
        }
    }

    /// Kill every node (the data directory stays until drop).
    pub fn kill_all(&mut self) {
        for id in 1..=self.nodes.len() as u32 {
            self.kill(id);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut child) = n.child.take() {
                if n.stopped {
                    // SAFETY: as in `signal`; a stopped process must be continued to die cleanly.
                    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGCONT) };
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static PROBE_SEQ: AtomicU64 = AtomicU64::new(1);

/// One raw `hello` to one controller, without the library's loop: the role it answers with
/// (`Primary` when it serves, the role from its info otherwise), or `None` for a status
/// without info. Transport failures are `Err`.
pub fn probe(addr: SocketAddr, timeout: Duration) -> io::Result<Option<ControllerRole>> {
    let reply = hello_reply(addr, timeout)?;
    Ok(match reply.data {
        ReplyData::CtrlInfo(info) if reply.status >= 0 => Some(info.role),
        _ if reply.status >= 0 => Some(ControllerRole::Primary),
        _ => None,
    })
}

fn hello_reply(addr: SocketAddr, timeout: Duration) -> io::Result<Reply> {
    raw_call(
        addr,
        Op::Hello(Hello {
            client_name: "probe".into(),
            protocol_version: wire::PROTOCOL_VERSION,
        }),
        timeout,
    )
}

/// An immediate `waitPrimary` to `addr` (the progress question `status` asks every node):
/// the node's own answer — role, term, the primary it names, its log, commit and applied index.
pub fn immediate_wait_primary(
    addr: SocketAddr,
    timeout: Duration,
) -> Result<wire::ControllerInfo, String> {
    let op = Op::WaitPrimary {
        timeout_ms: 0,
        exclude_host: String::new(),
        exclude_port: 0,
    };
    let reply = raw_call(addr, op, timeout).map_err(|e| e.to_string())?;
    match reply.data {
        ReplyData::CtrlInfo(i) => Ok(i),
        _ => Err(format!("status {} without controller info", reply.status)),
    }
}

/// The settle rule of [`Cluster::wait_settled`] and `NetCluster::wait_settled`: primary `p`
/// knows a commit index, then every node of `others` names `p` and knows at least that index.
/// `ask` is one node's immediate `waitPrimary`; polls every 10 ms until `deadline`.
pub(crate) fn settle(
    p: u32,
    others: &[u32],
    deadline: Instant,
    ask: impl Fn(u32) -> Option<wire::ControllerInfo>,
) -> Option<u32> {
    let until = |ok: &dyn Fn() -> Option<u64>| -> Option<u64> {
        loop {
            if let Some(v) = ok() {
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let committed = until(&|| ask(p).map(|i| i.committed_index).filter(|&c| c > 0))?;
    for &s in others {
        until(&|| {
            ask(s)
                .filter(|i| i.primary_id == p && i.committed_index >= committed)
                .map(|i| i.committed_index)
        })?;
    }
    Some(p)
}

/// `hello` to `addr` on a fresh connection: the node's answer, if it gave one.
pub fn probe_info(addr: SocketAddr, timeout: Duration) -> io::Result<Option<wire::ControllerInfo>> {
    let reply = hello_reply(addr, timeout)?;
    Ok(match reply.data {
        ReplyData::CtrlInfo(info) => Some(info),
        _ => None,
    })
}

/// The framed request for `op` as a raw client sends it: no request id (a read, or a write sent
/// once), no token, no forwarding mark.
pub fn request_frame(seq: u64, client_id: [u8; 16], op: Op) -> Vec<u8> {
    let req = Request {
        seq,
        client_id,
        request_id: 0,
        no_reply: false,
        op,
        auth_token: String::new(),
        forward_within_ms: 0,
    };
    let mut buf = Vec::new();
    wire::encode_request(&req, &mut buf);
    buf
}

/// Send one request on a fresh connection and read its reply (no retry, no failover).
pub fn raw_call(addr: SocketAddr, op: Op, timeout: Duration) -> io::Result<Reply> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let mut buf = request_frame(PROBE_SEQ.fetch_add(1, Ordering::Relaxed), [0; 16], op);
    s.write_all(&buf)?;
    let limits = Limits::default();
    wire::read_frame(&mut s, &limits, &mut buf).map_err(to_io)?;
    wire::decode_reply(&buf, &limits).map_err(to_io)
}

fn to_io(e: xce::Error) -> io::Error {
    match e {
        xce::Error::Errno(n) => io::Error::from_raw_os_error(n),
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}
