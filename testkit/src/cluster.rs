//! The one cluster runner of the tests and the benchmarks: real `xce-controller` processes on
//! loopback — start N nodes (or prepare them and start each when a test wants), find the
//! primary, kill -9 / SIGSTOP / SIGCONT / SIGTERM / restart one, add a node outside the first
//! membership (C17), set failpoints through a node's metrics endpoint (C19–C22), read its log
//! and its metrics — and clean everything up when dropped, also when a test panics (then the
//! nodes' logs are printed). Every wait has a deadline. The controller's tests
//! (`controller/tests/it/`) and the proof crate (`proof/`) both run their clusters here; the
//! same in network namespaces is `proof/src/harness/netns.rs`.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use xce_proto::wire::{ControllerInfo, ControllerRole, Op, ReplyData};

use crate::ports::free_ports;
use crate::procs::{reap_within, stopped};
use crate::wire::{hello, http, immediate_wait_primary, probe, probe_info, try_http, WireClient};

/// How long a pause ([`Cluster::pause`]) waits for every thread of the node to stop.
pub const PAUSE_TAKES_EFFECT: Duration = Duration::from_secs(5);
/// Upper bound for a fresh cluster to elect and serve (and for a node to print its metrics
/// address).
pub const STARTUP: Duration = Duration::from_secs(20);

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

/// `run` flags of a node of a cluster whose certificates `pki local` made in `dir` (each
/// node's own pair, one CA for clients and peers), with the token key when `tokens`.
pub fn tls_flags(dir: &Path, tokens: bool) -> Vec<String> {
    let f = |n: &str| dir.join(n).display().to_string();
    let mut v = vec![
        "--tls-cert".into(),
        f("xce-node-{id}.pem"),
        "--tls-key".into(),
        f("xce-node-{id}.key"),
        "--tls-client-ca".into(),
        f("ca.pem"),
        "--tls-peer-ca".into(),
        f("ca.pem"),
    ];
    if tokens {
        v.extend(["--token-key".into(), f("token.key")]);
    }
    v
}

/// The `xce-controller` binary: `$XCE_CONTROLLER` (e.g. an older build, to show a test
/// failing before a fix), else next to the running executable's target directory
/// (`target/<profile>/xce-controller`), preferring the same profile.
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

/// One controller node of a [`Cluster`].
pub struct Node {
    pub id: u32,
    pub client: SocketAddr,
    pub raft: SocketAddr,
    child: Option<Child>,
    /// SIGSTOPped (set through `&Cluster`: tests pause nodes from helpers and threads).
    stopped: AtomicBool,
    /// A node started outside the first membership (C17): its own `--cluster` and flags.
    own: Option<(String, Vec<String>)>,
}

impl Node {
    /// The node's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Running and not paused: it may answer.
    fn live(&self) -> bool {
        self.child.is_some() && !self.stopped.load(Ordering::Relaxed)
    }
}

/// How every node of a cluster runs.
#[derive(Clone, Debug, Default)]
pub struct ClusterOpts {
    /// Extra `run` arguments (timing knobs, TLS files); `{id}` in one is the node's id.
    pub extra_args: Vec<String>,
    /// Where node logs go; `None`: `$XCE_CLUSTER_LOGS/<cluster>/` when set, else the
    /// cluster's own directory (removed with it).
    pub log_dir: Option<PathBuf>,
    /// Environment every node starts with (e.g. `FAILPOINTS`).
    pub env: Vec<(String, String)>,
    /// The controller binary; `None`: [`controller_bin`].
    pub bin: Option<PathBuf>,
}

impl ClusterOpts {
    /// Options with these extra `run` arguments.
    pub fn args(extra: &[&str]) -> ClusterOpts {
        ClusterOpts {
            extra_args: extra.iter().map(|s| s.to_string()).collect(),
            ..ClusterOpts::default()
        }
    }
}

/// N real controller processes on loopback, each with its own data directory
/// (`DIR/data-ID`) and log (`DIR/node-ID.log`, appended to across restarts).
pub struct Cluster {
    pub nodes: Vec<Node>,
    dir: PathBuf,
    pub opts: ClusterOpts,
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

impl Cluster {
    /// Start `n` nodes and return without waiting for an election.
    pub fn start(n: usize, opts: ClusterOpts) -> io::Result<Cluster> {
        Cluster::start_in(n, opts, &std::env::temp_dir())
    }

    /// [`Cluster::start`] with the cluster's directory under `root` (P11's budget: a
    /// memory-backed file system, where an fsync costs nothing).
    pub fn start_in(n: usize, opts: ClusterOpts, root: &Path) -> io::Result<Cluster> {
        let mut c = Cluster::prepare_in(n, opts, root)?;
        for id in 1..=n as u32 {
            c.spawn(id)?;
        }
        Ok(c)
    }

    /// A cluster of `n` nodes, none started yet ([`Cluster::start_node`] starts each).
    pub fn prepare(n: usize, opts: ClusterOpts) -> io::Result<Cluster> {
        Cluster::prepare_in(n, opts, &std::env::temp_dir())
    }

    fn prepare_in(n: usize, opts: ClusterOpts, root: &Path) -> io::Result<Cluster> {
        let k = UNIQUE.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("xce-cluster-{}-{k}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let ports = free_ports(2 * n);
        let nodes = (0..n)
            .map(|i| Node {
                id: i as u32 + 1,
                client: SocketAddr::from(([127, 0, 0, 1], ports[2 * i])),
                raft: SocketAddr::from(([127, 0, 0, 1], ports[2 * i + 1])),
                child: None,
                stopped: AtomicBool::new(false),
                own: None,
            })
            .collect();
        Ok(Cluster { nodes, dir, opts })
    }

    /// `1=client/raft,2=…` of the first membership, as `xce-controller run --cluster` takes it.
    pub fn spec(&self) -> String {
        cluster_spec(
            self.nodes
                .iter()
                .filter(|n| n.own.is_none())
                .map(|n| (n.id, n.client, n.raft)),
        )
    }

    /// Node `id`'s `ID=client/raft`, as `--cluster` and `member add` take it.
    pub fn spec_of(&self, id: u32) -> String {
        let n = self.node(id);
        format!("{id}={}/{}", n.client, n.raft)
    }

    /// `host:port,host:port,…` as the library's master list.
    pub fn masters(&self) -> String {
        master_list(self.nodes.iter().map(|n| n.client))
    }

    pub fn node(&self, id: u32) -> &Node {
        &self.nodes[self.index(id)]
    }

    fn index(&self, id: u32) -> usize {
        self.nodes
            .iter()
            .position(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// The cluster's directory (data directories, logs unless elsewhere; removed on drop).
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// Node `id`'s data directory.
    pub fn data(&self, id: u32) -> PathBuf {
        self.dir.join(format!("data-{id}"))
    }

    /// `host:port` of node `id`'s client port.
    pub fn addr(&self, id: u32) -> String {
        self.node(id).client.to_string()
    }

    /// `host:port` of node `id`'s raft port.
    pub fn raft_addr(&self, id: u32) -> String {
        self.node(id).raft.to_string()
    }

    /// Every node's id, started or not.
    pub fn ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// The nodes with a process (paused ones too).
    pub fn running(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|n| n.id)
            .collect()
    }

    fn live(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter(|n| n.live())
            .map(|n| n.id)
            .collect()
    }

    /// Starts node `id` (prepared, killed or exited) from its data directory.
    pub fn start_node(&mut self, id: u32) {
        assert!(!self.node(id).is_running(), "node {id} already running");
        self.spawn(id)
            .unwrap_or_else(|e| panic!("starting node {id}: {e}"));
    }

    /// Starts every node (see [`Cluster::start_node`]).
    pub fn start_all(&mut self) {
        for id in self.ids() {
            self.start_node(id);
        }
    }

    /// Nodes started from now on run with the failpoints `FAILPOINTS=actions` (until
    /// `opts.env` is cleared; the binary must have failpoints, controller/Cargo.toml).
    pub fn failpoints_at_start(&mut self, actions: &str) {
        self.opts.env.push(("FAILPOINTS".into(), actions.into()));
    }

    /// Starts node `id` with the first membership's command line again, no longer its own
    /// from [`Cluster::start_extra_node`]: a node added back that lost its disk, started with
    /// its first flags.
    pub fn start_node_as_first(&mut self, id: u32) {
        let i = self.index(id);
        self.nodes[i].own = None;
        self.start_node(id);
    }

    /// C17: starts node `id` outside the first membership, with `--cluster cluster` and only
    /// `flags` (e.g. `--join`; `{id}` in one is the node's id); `client` is its client address.
    pub fn start_extra_node(&mut self, id: u32, client: &str, cluster: &str, flags: &[&str]) {
        let raft = cluster
            .split(',')
            .find_map(|e| {
                let (n, addrs) = e.split_once('=')?;
                (n.parse::<u32>().ok()? == id).then(|| addrs.split_once('/')?.1.parse().ok())?
            })
            .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
        let own = Some((
            cluster.to_string(),
            flags.iter().map(|s| s.to_string()).collect(),
        ));
        match self.nodes.iter().position(|n| n.id == id) {
            Some(i) => {
                assert!(!self.nodes[i].is_running(), "node {id} already running");
                self.nodes[i].own = own;
            }
            None => self.nodes.push(Node {
                id,
                client: client.parse().expect("client address"),
                raft,
                child: None,
                stopped: AtomicBool::new(false),
                own,
            }),
        }
        self.start_node(id);
    }

    /// Runs node `id`: its data in `data-ID`, its stderr appended to its log.
    fn spawn(&mut self, id: u32) -> io::Result<()> {
        let i = self.index(id);
        let (cluster, flags) = match &self.nodes[i].own {
            Some((cluster, flags)) => (cluster.clone(), flags),
            None => (self.spec(), &self.opts.extra_args),
        };
        // `{id}` in an argument is this node's id (per-node certificate files).
        let flags: Vec<String> = flags
            .iter()
            .map(|a| a.replace("{id}", &id.to_string()))
            .collect();
        let log = self.log_path(id);
        std::fs::create_dir_all(log.parent().expect("a log directory"))?;
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let bin = self.opts.bin.clone().unwrap_or_else(controller_bin);
        let mut cmd = Command::new(bin);
        cmd.args([
            "run",
            "--id",
            &id.to_string(),
            "--cluster",
            &cluster,
            "--data",
        ])
        .arg(self.data(id))
        .args(flags)
        .envs(self.opts.env.iter().map(|(k, v)| (k, v)))
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
        let node = &mut self.nodes[i];
        node.child = Some(child);
        *node.stopped.get_mut() = false;
        Ok(())
    }

    /// Node `id`'s process id; panics when it does not run.
    pub fn pid(&self, id: u32) -> i32 {
        self.node(id)
            .pid()
            .unwrap_or_else(|| panic!("node {id} does not run")) as i32
    }

    /// `kill -9` the node and reap it.
    pub fn kill(&mut self, id: u32) {
        let i = self.index(id);
        let node = &mut self.nodes[i];
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        *node.stopped.get_mut() = false;
    }

    /// Kills node `id` and forgets it (a member removed for good): it is no longer among the
    /// masters, the ids or the logs.
    pub fn forget(&mut self, id: u32) {
        self.kill(id);
        let i = self.index(id);
        self.nodes.remove(i);
    }

    /// Sends `sig` to node `id` (SIGSTOP and SIGCONT are remembered: a paused node is not
    /// asked who is primary).
    pub fn signal(&self, id: u32, sig: libc::c_int) {
        let node = self.node(id);
        if let Some(pid) = node.pid() {
            // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
            unsafe { libc::kill(pid as libc::pid_t, sig) };
        }
        match sig {
            libc::SIGSTOP => node.stopped.store(true, Ordering::Relaxed),
            libc::SIGCONT => node.stopped.store(false, Ordering::Relaxed),
            _ => {}
        }
    }

    /// SIGSTOP: the node is alive but silent (a hung primary, F8 / S4). Returns once every
    /// thread of it is stopped (at most [`PAUSE_TAKES_EFFECT`]): until then it could still
    /// answer a message sent right after (`procs.rs`).
    pub fn pause(&self, id: u32) {
        self.signal(id, libc::SIGSTOP);
        if let Some(pid) = self.node(id).pid() {
            stopped(pid as i32, PAUSE_TAKES_EFFECT);
        }
    }

    /// SIGCONT after [`Cluster::pause`].
    pub fn resume(&self, id: u32) {
        self.signal(id, libc::SIGCONT);
    }

    /// SIGTERM the node and wait up to `grace` for it to exit (then `kill -9`); true when it
    /// exited by itself. The node can then be started again with [`Cluster::restart`].
    pub fn terminate(&mut self, id: u32, grace: Duration) -> bool {
        self.signal(id, libc::SIGTERM);
        let i = self.index(id);
        let node = &mut self.nodes[i];
        let Some(mut child) = node.child.take() else {
            return true;
        };
        *node.stopped.get_mut() = false;
        reap_within(&mut child, grace)
    }

    /// Start a node again (killed first if it runs) from its data directory.
    pub fn restart(&mut self, id: u32) -> io::Result<()> {
        self.kill(id);
        self.spawn(id)
    }

    /// Node `id`'s exit status once it has exited by itself within `timeout` (reaped then),
    /// `None` if it is still running (or never ran).
    pub fn wait_exit(&mut self, id: u32, timeout: Duration) -> Option<std::process::ExitStatus> {
        let i = self.index(id);
        let deadline = Instant::now() + timeout;
        loop {
            let st = self.nodes[i].child.as_mut()?.try_wait().unwrap();
            if let Some(st) = st {
                self.nodes[i].child = None;
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop every node cleanly: SIGTERM, then SIGKILL for any still running after `grace`.
    pub fn stop_all(&mut self, grace: Duration) {
        for id in self.running() {
            if self.node(id).stopped.load(Ordering::Relaxed) {
                self.signal(id, libc::SIGCONT);
            }
            self.signal(id, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        for n in &mut self.nodes {
            if let Some(mut child) = n.child.take() {
                reap_within(
                    &mut child,
                    deadline.saturating_duration_since(Instant::now()),
                );
            }
            *n.stopped.get_mut() = false;
        }
    }

    /// Kill every node (the data directories stay until drop).
    pub fn kill_all(&mut self) {
        for id in self.ids() {
            self.kill(id);
        }
    }

    /// A test client of node `id`'s client port (plaintext).
    pub fn client(&self, id: u32) -> WireClient {
        WireClient::connect(&self.addr(id))
    }

    /// The node answering as primary right now among `candidates` that may answer, if any
    /// (one `hello` each).
    fn primary_of(&self, candidates: &[u32]) -> Option<u32> {
        candidates.iter().copied().find(|&id| {
            self.node(id).live()
                && matches!(
                    probe(self.node(id).client, Duration::from_millis(300)),
                    Ok(Some(ControllerRole::Primary))
                )
        })
    }

    /// The node answering as primary right now, if any (one probe per running node).
    pub fn primary_now(&self) -> Option<u32> {
        self.primary_of(&self.live())
    }

    /// The id of the node that answers `hello` as primary, polling until `timeout`.
    pub fn wait_primary(&self, timeout: Duration) -> Option<u32> {
        self.poll(timeout, Duration::from_millis(5), || self.primary_now())
    }

    /// [`Cluster::wait_primary`] among `candidates`, for a test: panics with the nodes' logs
    /// when none shows by `timeout`.
    pub fn expect_primary_among(&self, candidates: &[u32], timeout: Duration) -> u32 {
        self.poll(timeout, Duration::from_millis(20), || {
            self.primary_of(candidates)
        })
        .unwrap_or_else(|| panic!("no primary within {timeout:?}\n{}", self.all_logs()))
    }

    /// [`Cluster::wait_primary`] for a test: panics with the nodes' logs.
    pub fn expect_primary(&self, timeout: Duration) -> u32 {
        self.expect_primary_among(&self.live(), timeout)
    }

    /// A primary other than `old`, polling until `timeout`.
    pub fn wait_new_primary(&self, old: u32, timeout: Duration) -> Option<u32> {
        self.poll(timeout, Duration::from_millis(2), || {
            self.primary_now().filter(|&id| id != old)
        })
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

    /// Polls `f` every `every` until it gives an answer or `timeout` passes.
    fn poll<T>(&self, timeout: Duration, every: Duration, f: impl Fn() -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = f() {
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(every);
        }
    }

    /// The answer of node `id` to an immediate `waitPrimary` (what `status` asks): the
    /// primary it knows, its log, commit and applied index; `None` when it does not answer.
    pub fn progress(&self, id: u32) -> Option<ControllerInfo> {
        immediate_wait_primary(self.node(id).client, Duration::from_millis(2000)).ok()
    }

    /// A primary, once every other node that may answer follows it — it refuses a read
    /// naming the primary's address — and knows the commit index of the primary's first
    /// entries (its barrier, of its own term): only then has a node that started without data
    /// caught up (C12) and votes, so the cluster survives losing any one node. Plaintext
    /// clusters; polls until `timeout`.
    pub fn wait_settled(&self, timeout: Duration) -> Option<u32> {
        let deadline = Instant::now() + timeout;
        let left = || deadline.saturating_duration_since(Instant::now());
        let p = self.wait_primary(timeout)?;
        let others: Vec<u32> = self.live().into_iter().filter(|&s| s != p).collect();
        let paddr = self.addr(p);
        for &s in &others {
            self.poll(left(), Duration::from_millis(20), || {
                let mut c = WireClient::try_connect(&self.addr(s), Duration::from_millis(500))?;
                let r = c.try_call(Op::ResList).ok()?;
                (r.status == -xce_proto::error::E_XCE_STANDBY
                    && format!("{}:{}", r.redirect_host, r.redirect_port) == paddr)
                    .then_some(())
            })?;
        }
        settle(p, &others, deadline, |id| self.progress(id))
    }

    /// [`Cluster::wait_settled`] for a test: panics with the nodes' logs.
    pub fn expect_settled(&self, timeout: Duration) -> u32 {
        self.wait_settled(timeout)
            .unwrap_or_else(|| panic!("not settled within {timeout:?}\n{}", self.all_logs()))
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

    /// C20: the cluster's id, once every running node reports the same one through `hello`
    /// (the first primary records it at its first consistency check, right after its
    /// election): what a raft message to a member must carry. `connect` reaches a node's client
    /// port (plaintext: [`WireClient::connect`]).
    pub fn cluster_id_via(&self, connect: impl Fn(&str) -> WireClient) -> [u8; 16] {
        let mut id = [0u8; 16];
        self.wait_until("every node reports the same cluster id", STARTUP, || {
            let ids: Vec<[u8; 16]> = self
                .running()
                .iter()
                .map(|&n| {
                    let mut c = connect(&self.addr(n));
                    c.try_call(hello()).map_or([0; 16], |r| match r.data {
                        ReplyData::CtrlInfo(i) => i.cluster_id,
                        _ => [0; 16],
                    })
                })
                .collect();
            id = ids[0];
            id != [0; 16] && ids.iter().all(|x| *x == id)
        });
        id
    }

    /// [`Cluster::cluster_id_via`] on a plaintext cluster.
    pub fn cluster_id(&self) -> [u8; 16] {
        self.cluster_id_via(WireClient::connect)
    }

    /// The cluster id node `id` reports in its hello on a plaintext cluster (`[0; 16]`: none
    /// yet); `None` when it does not answer.
    pub fn cluster_id_of(&self, id: u32) -> Option<[u8; 16]> {
        probe_info(self.node(id).client, crate::wire::IO_TIMEOUT)
            .ok()
            .flatten()
            .map(|i| i.cluster_id)
    }

    /// Waits until `f` holds, or fails the test with the nodes' logs.
    pub fn wait_until(&self, what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        while !f() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}\n{}",
                self.all_logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Where the node logs go: the options' directory, else (`XCE_CLUSTER_LOGS=DIR`, to keep
    /// them) DIR/<this cluster's directory name>/, else the cluster's directory.
    fn log_dir(&self) -> PathBuf {
        self.opts
            .log_dir
            .clone()
            .or_else(|| {
                std::env::var_os("XCE_CLUSTER_LOGS")
                    .map(|d| PathBuf::from(d).join(self.dir.file_name().unwrap_or_default()))
            })
            .unwrap_or_else(|| self.dir.clone())
    }

    pub fn log_path(&self, id: u32) -> PathBuf {
        self.log_dir().join(format!("node-{id}.log"))
    }

    pub fn log(&self, id: u32) -> String {
        std::fs::read_to_string(self.log_path(id)).unwrap_or_default()
    }

    /// Node `id`'s log from byte `from` on (a length of it taken earlier).
    pub fn log_since(&self, id: u32, from: usize) -> String {
        self.log(id).get(from..).unwrap_or_default().to_string()
    }

    /// Whether node `id`'s log from byte `from` on contains `pat` (now: no waiting).
    pub fn logged_since(&self, id: u32, from: usize, pat: &str) -> bool {
        self.log_since(id, from).contains(pat)
    }

    /// Whether node `id`'s log has (or gets within 5 s) a line containing `pat`. A node's
    /// stderr reaches its log through a stamping thread (`base/logstamp.rs`), so a line written
    /// before a reply may land in the file just after the client has the reply.
    pub fn logged(&self, id: u32, pat: &str) -> bool {
        self.poll(Duration::from_secs(5), Duration::from_millis(20), || {
            self.log(id).contains(pat).then_some(())
        })
        .is_some()
    }

    pub fn all_logs(&self) -> String {
        self.ids()
            .into_iter()
            .map(|id| format!("--- node {id}\n{}", self.log(id)))
            .collect()
    }

    /// How many times node `id` has started (its log's metrics-address lines): wait for
    /// one more after a restart before asking for its new metrics address.
    pub fn starts(&self, id: u32) -> usize {
        self.log(id).matches("metrics on http://").count()
    }

    /// The metrics address node `id` printed (`metrics on http://ADDR/metrics`; the node runs
    /// with `--metrics 127.0.0.1:0`): its latest start's.
    pub fn metrics_addr(&self, id: u32) -> String {
        let found = self.poll(STARTUP, Duration::from_millis(50), || {
            let log = self.log(id);
            let (_, rest) = log.rsplit_once("metrics on http://")?;
            Some(rest.split("/metrics").next()?.to_string())
        });
        found.unwrap_or_else(|| panic!("node {id} printed no metrics URL:\n{}", self.log(id)))
    }

    /// Sets failpoint `name` to `actions` on running node `id` (its metrics endpoint:
    /// `PUT /fail/NAME`; the binary must have failpoints, controller/Cargo.toml).
    pub fn fail_set(&self, id: u32, name: &str, actions: &str) {
        let (status, body) = http(
            &self.metrics_addr(id),
            "PUT",
            &format!("/fail/{name}"),
            actions,
        );
        assert_eq!(
            status, "HTTP/1.1 200 OK",
            "PUT /fail/{name} on node {id}: {body}"
        );
    }

    /// Clears failpoint `name` on running node `id` (`DELETE /fail/NAME`).
    pub fn fail_clear(&self, id: u32, name: &str) {
        let (status, body) = http(
            &self.metrics_addr(id),
            "DELETE",
            &format!("/fail/{name}"),
            "",
        );
        assert_eq!(
            status, "HTTP/1.1 200 OK",
            "DELETE /fail/{name} on node {id}: {body}"
        );
    }

    /// The value of the metric sample `name` (with its labels) on node `id`, 0 when absent;
    /// `None` when the node does not answer.
    pub fn metric(&self, id: u32, name: &str) -> Option<f64> {
        let (_, body) = try_http(&self.metrics_addr(id), "GET", "/metrics", "").ok()?;
        Some(sample_of(&body, name).unwrap_or(0.0))
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
                Some(Ok(None)) if *n.stopped.get_mut() => "paused (SIGSTOP)".to_string(),
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
        lines.push(format!("logs in {}", self.log_dir().display()));
        lines.join("; ")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut child) = n.child.take() {
                // A stopped process must be continued to die cleanly.
                // SAFETY: kill(2) on our own child, not yet reaped.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGCONT) };
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if std::thread::panicking() {
            eprintln!("{}", self.all_logs());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The settle rule of [`Cluster::wait_settled`] and the namespaced cluster's: primary `p`
/// knows a commit index, then every node of `others` names `p` and knows at least that index.
/// `ask` is one node's immediate `waitPrimary`; polls every 10 ms until `deadline`.
pub fn settle(
    p: u32,
    others: &[u32],
    deadline: Instant,
    ask: impl Fn(u32) -> Option<ControllerInfo>,
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

/// The value of the sample named exactly `name` (with its labels, if any) in a metrics text.
pub fn sample_of(body: &str, name: &str) -> Option<f64> {
    body.lines().find_map(|l| {
        let (n, v) = l.rsplit_once(' ')?;
        (n == name).then(|| v.parse().unwrap())
    })
}
