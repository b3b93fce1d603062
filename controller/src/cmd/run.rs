//! `xce-controller run`: one controller node — Raft, its RPC listener, the client server,
//! self-initialisation of a brand-new cluster and the role-change log.

use std::sync::Arc;
use std::time::Duration;

use openraft::{Config, ServerState, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::base::auth::Auth;
use crate::base::cluster_id::{ClusterTag, Identity};
use crate::base::config::{exposure, resolve, NodeOpts, Port, RunArgs};
use crate::base::fault::{self, EXIT_STORAGE_FAULT};
use crate::base::ids::{CtrlNode, NodeId};
use crate::base::tls;
use crate::node::ctx::{Ctx, COMMIT_TIMEOUT, STALE_LEADER_RECHECK};
use crate::ports::client;
use crate::ports::peer;
use crate::raft::amnesia::Amnesia;
use crate::raft::digests::{Digests, Findings};
use crate::raft::diverged::Diverged;
use crate::raft::elect::Elections;
use crate::raft::lease::{LeaseClock, VoteGuard};
use crate::raft::link::NetFactory;
use crate::raft::pace::Pace;
use crate::raft::ready::Readiness;
use crate::raft::store::{self, LogStore, SharedApplied, StateMachineStore};
use crate::raft::types::Raft;
use crate::raft::{forward, frame};

/// Delay between members trying to initialise a brand-new cluster, by rank of id: the lowest
/// id tries at once, the next one only if the cluster is still uninitialised after this, …
pub const INIT_STAGGER: Duration = Duration::from_millis(500);

pub fn run(args: RunArgs) -> i32 {
    // C13 amended (issue 27): what the node writes is readable by its user only — its data
    // (the job table, commands, identities), whoever made the directory. Every file and
    // directory it creates from here on is 0600/0700 whatever the caller's umask.
    // SAFETY: umask(2) cannot fail and touches no memory.
    unsafe { libc::umask(0o077) };
    // Failpoints set at start (a build with failpoints; refused without).
    if let Err(e) = crate::base::failpoints::from_env() {
        crate::log_error!("node {}: {e}", args.id);
        return 2;
    }
    // C24: a node whose disk has less free than its floor does not start: it would fault
    // again under load (C21), and a supervisor restarting it would loop without a word.
    let (quota, floor) = (args.opts.quota_bytes, args.opts.disk_floor_bytes);
    match crate::base::disk::start(&args.data, quota, floor) {
        Ok(g) => crate::log_info!(
            "node {}: disk: quota {}, floor {} (C24)",
            args.id,
            crate::base::disk::bytes(g.quota),
            crate::base::disk::bytes(g.floor)
        ),
        Err(why) => {
            crate::log_error!("node {}: {why}: exit status {EXIT_STORAGE_FAULT}", args.id);
            return EXIT_STORAGE_FAULT;
        }
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            crate::log_error!("node {}: runtime: {e}", args.id);
            return 1;
        }
    };
    let id = args.id;
    // Issue 36: SIGHUP reopens the log file and never ends the node (its default action).
    // Registered before anything else runs, so no window is left where it would.
    let hup = {
        let _in = rt.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
    };
    match hup {
        Ok(hup) => {
            rt.spawn(reopen_on_hangup(hup, id));
        }
        Err(e) => crate::log_warn!("node {id}: no SIGHUP handler ({e}): SIGHUP would end it"),
    }
    let res = rt.block_on(run_node(args));
    if let Some(why) = fault::storage_fault() {
        // C21: exit as a crash would, touching the disk no more: nothing is flushed, handed
        // over or shut down (a store stuck on the failed disk must not hold the exit).
        crate::log_error!(
            "node {id}: stopped by a storage fault ({why}): exit status {EXIT_STORAGE_FAULT}"
        );
        rt.shutdown_background();
        return EXIT_STORAGE_FAULT;
    }
    if let Some(why) = crate::raft::removed::removal() {
        crate::log_error!("node {id}: {why}");
        rt.shutdown_timeout(Duration::from_secs(1));
        return crate::raft::removed::EXIT_REMOVED;
    }
    match res {
        Ok(()) => {
            rt.shutdown_timeout(Duration::from_secs(1));
            0
        }
        Err(e) => {
            crate::log_error!("node {id}: {e}");
            1
        }
    }
}

/// Why a node stopped, or could not start: each names its cause, up to `run`'s last line
/// (issue 37: typed, not strings). `run` turns C21's storage fault into exit status 74 and a
/// removal into 78 (each also told apart by its own module), anything else into 1.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Its TLS files (or its own certificate naming another node).
    #[error(transparent)]
    Tls(#[from] crate::base::tls::TlsError),
    /// Its data directory's store.
    #[error(transparent)]
    Store(#[from] crate::raft::store::OpenError),
    /// A port it cannot listen on.
    #[error("bind {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The Raft core would not start or answer.
    #[error("raft: {0}")]
    Raft(String),
    /// C21: its disk failed.
    #[error("storage fault: {0}")]
    StorageFault(String),
    /// Issue 26: it learnt it was removed from the cluster.
    #[error("{0}")]
    Removed(String),
    /// Its configuration, authorization files, data directory, membership (each says which).
    #[error("{0}")]
    Setup(String),
}

impl From<String> for RunError {
    fn from(why: String) -> RunError {
        RunError::Setup(why)
    }
}

async fn run_node(args: RunArgs) -> Result<(), RunError> {
    let (links, auth, stores) = prepare(&args)?;
    let blank = stores.amnesia.unsure();
    let port_state = stores.raft_port_state();
    // C22: the last index of the log as this process found it (handover entries at or below it
    // are history replayed from disk).
    let start_last = last_index(&stores.log_reader).await?;
    let ports = bind(&args).await?;
    let lease = Arc::new(LeaseClock::default());
    let pace = pace_of(&args.opts);
    let raft = start_raft(&args, &links, &lease, &pace, stores.log, stores.sm).await?;
    check_membership(&raft, &args, &ports.me).await?;
    if stores.diverged.is() {
        // C19: a node that diverged votes, leads and stores nothing until repaired; it stays
        // up to say so (status, NOT_READY, refusals on the raft port).
        crate::raft::stop(&raft).await;
    }
    // C11: no vote for election-max after boot (a lease may still rest on our last ack).
    let guard = VoteGuard::from_boot(Duration::from_millis(args.opts.election_max_ms));
    let compacting = stores.log_reader.clone();
    let elect = start_elections(
        &raft,
        &args,
        guard,
        &links,
        stores.log_reader,
        pace,
        &stores.amnesia,
    );
    let amnesia = stores.amnesia.clone();
    let forwarded = serve_raft_port(ports.raft, &raft, &args, guard, port_state, &elect, &links);
    let ready = start_tasks(
        &raft,
        &args,
        &stores.applied,
        Handed {
            log: compacting,
            handovers: stores.handovers,
            start_last,
        },
        &elect,
        amnesia,
    );
    let ctx = Arc::new(node_ctx(
        &args,
        &raft,
        &links,
        &elect,
        &ready,
        CtxParts {
            applied: stores.applied,
            lease,
            auth,
            identity: stores.identity,
            digests: stores.digests,
            diverged: stores.diverged,
        },
    ));
    let serving = ctx.clone();
    serve_clients(
        ctx,
        ports.client,
        ports.metrics,
        &args,
        &ports.me,
        &links,
        &forwarded,
    )?;
    until_stopped(&raft, &serving, &ready, &elect, args.join || blank).await
}

impl Stores {
    /// What the raft port reads of the stores.
    fn raft_port_state(&self) -> RaftPortState {
        RaftPortState {
            amnesia: self.amnesia.clone(),
            identity: self.identity.clone(),
            digests: self.digests.clone(),
            diverged: self.diverged.clone(),
        }
    }
}

/// What the node's context takes over from the stores and the start.
struct CtxParts {
    applied: SharedApplied,
    lease: Arc<LeaseClock>,
    auth: Auth,
    identity: Arc<Identity>,
    digests: Arc<Digests>,
    diverged: Arc<Diverged>,
}

/// The node's context: what every client connection and task of the node shares.
fn node_ctx(
    args: &RunArgs,
    raft: &Raft,
    links: &Links,
    elect: &Arc<Elections>,
    ready: &Arc<Readiness>,
    p: CtxParts,
) -> Ctx {
    let id = args.id;
    Ctx {
        id,
        raft: raft.clone(),
        applied: p.applied,
        spec: args.spec.clone(),
        opts: args.opts.clone(),
        primary_waiters: Default::default(),
        crowd: std::sync::Mutex::new((std::time::Instant::now(), 0)),
        lease: p.lease,
        elect: elect.clone(),
        proposer: crate::raft::propose::Proposer::start(raft.clone(), COMMIT_TIMEOUT),
        cursors: crate::node::cursors::Cursors::for_node(id),
        auth: p.auth,
        ready: ready.clone(),
        tenure: Default::default(),
        forwarder: links.forwarder(),
        identity: p.identity,
        digests: p.digests,
        findings: Findings::new(),
        diverged: p.diverged,
        saves: Default::default(),
        data: args.data.clone(),
    }
}

/// Serves until a signal stops the node (`Ok`), a storage fault (C21) or the node learns it
/// was removed (issue 26); `run` ends the process with the status of each.
async fn until_stopped(
    raft: &Raft,
    serving: &Ctx,
    ready: &Readiness,
    elect: &Elections,
    replays_history: bool,
) -> Result<(), RunError> {
    let id = serving.id;
    tokio::select! {
        () = stop_on_signal(raft, serving, ready, elect, id) => Ok(()),
        why = fault::wait() => Err(RunError::StorageFault(why)),
        // A node that started blank replays the cluster's history like a `--join` node, in
        // which its id may have been removed and added again (found by the nemesis: a node
        // re-added, then its disk lost and restarted with its first flags, exited 78).
        why = crate::raft::removed::watch(raft.clone(), id, replays_history) => {
            crate::raft::stop(raft).await;
            Err(RunError::Removed(why))
        }
    }
}

/// What a node needs before its ports open: its own certificate checked, its links' TLS and
/// bounds, its callers' authorization, its stores opened.
fn prepare(args: &RunArgs) -> Result<(Links, Auth, Stores), RunError> {
    let id = args.id;
    let limits = xce_proto::wire::Limits::default();
    // Issue 26: a node started with another node's certificate says so at once (before, it
    // started without a word and its peers' refusals were all there was).
    if let (Some(cert), Some(_)) = (&args.opts.tls_cert, &args.opts.tls_peer_ca) {
        tls::check_own_cert(cert, id)?;
    }
    let links = Links::of(&args.opts, &limits)?;
    let auth = auth_of(&args.opts)?;
    let stores = open_stores(args)?;
    // C24: measured again now that the data directory holds the stores.
    if let Some(g) = crate::base::disk::guard() {
        g.remeasure();
    }
    let links = Links {
        identity: stores.identity.clone(),
        ..links
    };
    Ok((links, auth, stores))
}

/// C15 (amended): the silences of live peers, measured by the raft ports of both ends.
fn pace_of(o: &NodeOpts) -> Arc<Pace> {
    Arc::new(Pace::new(crate::raft::pace::Bounds {
        lease: Duration::from_millis(o.election_max_ms),
        ceiling: Duration::from_millis(o.election_ceiling_ms),
    }))
}

/// The last index of the log as this process found it.
async fn last_index(log: &LogStore) -> Result<Option<u64>, RunError> {
    use openraft::storage::RaftLogStorage;
    let mut log = log.clone();
    Ok(log
        .get_log_state()
        .await
        .map_err(|e| RunError::Raft(format!("log: {e}")))?
        .last_log_id
        .map(|l| l.index))
}

/// How this node's ports are secured and bounded: the client port's TLS, mutual TLS between
/// members, and the largest raft message (sized from the client's frame limit).
struct Links {
    client_tls: Option<Arc<rustls::ServerConfig>>,
    peer_tls: Option<tls::PeerTls>,
    max_rpc: usize,
    /// C20: this node's cluster, stamped on and checked against every raft message.
    identity: Arc<Identity>,
}

impl Links {
    /// The links of `o`; their identity is a placeholder until the stores are open.
    fn of(o: &NodeOpts, limits: &xce_proto::wire::Limits) -> Result<Links, String> {
        let tls = match (&o.tls_cert, &o.tls_key) {
            (Some(c), Some(k)) => Some(tls::acceptor(
                c,
                k,
                o.tls_client_ca.as_deref(),
                o.token_key.is_some(),
            )?),
            _ => None,
        };
        let peer_tls = match (&o.tls_cert, &o.tls_key, &o.tls_peer_ca) {
            (Some(c), Some(k), Some(ca)) => Some(tls::PeerTls::new(c, k, ca)?),
            _ => None,
        };
        Ok(Links {
            client_tls: tls,
            peer_tls,
            max_rpc: frame::max_rpc_bytes(limits.max_message_bytes),
            identity: Identity::detached(crate::base::cluster_id::Belonging::Pending),
        })
    }

    /// Requests to the members over these links (C16's forwarding, C15's pre-votes, C12's
    /// questions), stamped with this node's cluster (C20).
    fn forwarder(&self) -> forward::Forwarder {
        forward::Forwarder::new(self.peer_tls.clone(), self.max_rpc, self.identity.clone())
    }
}

/// C13: callers are checked once client certificates or tokens identify them.
fn auth_of(o: &NodeOpts) -> Result<Auth, String> {
    Ok(Auth {
        on: o.tls_client_ca.is_some() || o.token_key.is_some(),
        token_key: match &o.token_key {
            Some(p) => Some(crate::base::auth::TokenKey::load(p)?),
            None => None,
        },
    })
}

/// The node's stores, opened from its data directory.
struct Stores {
    amnesia: Arc<Amnesia>,
    log: LogStore,
    log_reader: LogStore,
    sm: StateMachineStore,
    /// C14: the handover entries the state machine applies.
    handovers: UnboundedReceiver<crate::raft::handover::Applied>,
    applied: SharedApplied,
    /// C20: the cluster this node belongs to (from its data directory).
    identity: Arc<Identity>,
    /// C19: its state digests, and whether it diverged.
    digests: Arc<Digests>,
    diverged: Arc<Diverged>,
}

fn open_stores(args: &RunArgs) -> Result<Stores, RunError> {
    let id = args.id;
    private_dir(&args.data)?;
    let mut st = store::open_store(&args.data)?;
    // C1 with C12: a crash while a received snapshot was installed left a log purged past the
    // state; the node comes back as one that lost its disk instead of failing every start.
    if let Some(why) = store::torn_install(&st, &args.data)? {
        crate::log_error!(
            "node {id}: {why} (a crash while it installed a snapshot): its data is set aside \
             and it starts as a node that lost its disk (C12)"
        );
        drop(st);
        store::set_aside(&args.data)?;
        st = store::open_store(&args.data)?;
    }
    let blank = store::is_blank(&st, &args.data)?;
    let amnesia = Amnesia::open(
        id,
        &args.data,
        blank,
        args.spec.nodes.keys().copied().collect(),
    )
    .map_err(|e| format!("{}: {e}", args.data.display()))?;
    let identity = identity_of(&st, args, blank)?;
    let diverged = Diverged::open(id, &args.data);
    let digests = Digests::new();
    let log = LogStore::new(&st);
    // C12: the node's own election, told by the store once its vote is on disk.
    let told = amnesia.clone();
    log.on_vote(Box::new(move |vote| told.vote_saved(vote)));
    let log_reader = log.clone();
    let mut sm =
        StateMachineStore::open(id, &args.data).map_err(|e| format!("state machine: {e}"))?;
    let (handover_tx, handover_rx) = tokio::sync::mpsc::unbounded_channel();
    sm.handovers = Some(Box::new(move |log_id, batch| {
        crate::raft::handover::note(&handover_tx, log_id, batch)
    }));
    sm.digests = Some(digests.clone());
    sm.on_cluster = Some(adopt_on_apply(identity.clone(), id));
    sm.note_cluster();
    let applied = sm.applied.clone();
    Ok(Stores {
        amnesia,
        log,
        log_reader,
        sm,
        handovers: handover_rx,
        applied,
        identity,
        digests,
        diverged,
    })
}

/// C20: the cluster this node belongs to, as its data records it, and how a cluster id it
/// takes is saved.
fn identity_of(st: &store::Store, args: &RunArgs, blank: bool) -> Result<Arc<Identity>, String> {
    let id = args.id;
    let belonging = store::open_belonging(st, blank)?;
    let persist = st.clone();
    let meta_file = args.data.join(crate::raft::meta::META_FILE);
    // C21 (issue 35, defect 5): a failed save of the cluster id is a storage fault like any
    // other write's (it was only logged: the node went on, and restarted without its id).
    let identity = Identity::new(
        belonging,
        Box::new(move |b| {
            let saved = crate::base::failpoints::storage(crate::base::failpoints::CLUSTER_SAVE)
                .map_err(|e| e.to_string())
                .and_then(|()| store::save_belonging(&persist, b));
            if let Err(e) = &saved {
                fault::record("cluster_id", &meta_file, e);
            }
            saved
        }),
    );
    match belonging {
        crate::base::cluster_id::Belonging::Member(t) => {
            eprintln!("node {id}: member of cluster {t}")
        }
        crate::base::cluster_id::Belonging::Legacy => eprintln!(
            "node {id}: its data records no cluster id (an earlier build wrote it): it takes the \
             one its cluster records (C20)"
        ),
        crate::base::cluster_id::Belonging::Pending => {}
    }
    Ok(identity)
}

/// C20: what the state machine calls when it applies the cluster's id: the node takes it.
fn adopt_on_apply(adopting: Arc<Identity>, id: NodeId) -> crate::raft::store::OnCluster {
    Box::new(move |c| {
        let tag = ClusterTag {
            id: c.id,
            epoch: c.epoch,
        };
        let adopting = adopting.clone();
        let adopt = move || adopt_logged(&adopting, id, tag);
        // Tests only: the id taken later, off the applying thread (failpoint `cluster-adopt`).
        use crate::base::failpoints;
        if failpoints::armed(failpoints::CLUSTER_ADOPT) {
            std::thread::spawn(move || {
                failpoints::hold(failpoints::CLUSTER_ADOPT);
                adopt();
            });
        } else {
            adopt();
        }
    })
}

/// C20: takes the cluster id the applied log records, and says so once.
fn adopt_logged(identity: &Identity, id: NodeId, tag: ClusterTag) {
    match identity.adopt(tag) {
        Ok(true) => eprintln!(
            "node {id}: member of cluster {tag} (its log records it; kept in the data directory)"
        ),
        Ok(false) => {}
        Err(e) => crate::log_warn!("node {id}: cluster id: {e}"),
    }
}

/// C13 amended: the data directory (created if missing) and everything in it readable by the
/// node's user only: 0700 directories, 0600 files. A directory made by someone else (a
/// launcher, an older build: 0755 with `raft.redb` 0644) is tightened; one the node cannot
/// tighten refuses the start.
fn private_dir(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let shown = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(shown)?;
    fn tighten(p: &std::path::Path, depth: u32) -> std::io::Result<()> {
        let meta = std::fs::symlink_metadata(p)?;
        let want = if meta.is_dir() { 0o700 } else { 0o600 };
        if meta.file_type().is_symlink() {
            return Ok(());
        }
        if meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(
                p,
                std::fs::Permissions::from_mode(meta.permissions().mode() & want),
            )?;
        }
        if meta.is_dir() && depth < 4 {
            for e in std::fs::read_dir(p)? {
                tighten(&e?.path(), depth + 1)?;
            }
        }
        Ok(())
    }
    tighten(dir, 0).map_err(|e| {
        format!(
            "{}: cannot make the data directory readable by this user only: {e}",
            dir.display()
        )
    })
}

/// This node's addresses and its listeners, bound before Raft starts.
struct Listeners {
    me: CtrlNode,
    client: TcpListener,
    raft: TcpListener,
    metrics: Option<TcpListener>,
}

async fn bind(args: &RunArgs) -> Result<Listeners, RunError> {
    let id = args.id;
    let me = args.spec.nodes[&id].clone();
    // Names in --cluster: ours must resolve (bounded) to bind; a peer's that does not yet is
    // only reported (the raft port resolves it again on every connect, bounded too).
    crate::base::config::warn_unresolved_peers(id, &args.spec).await;
    let o = &args.opts;
    let client = listen(Port::Client, &me.client, me.client.clone(), o).await?;
    let raft = listen(Port::Raft, &me.raft, me.raft.clone(), o).await?;
    let metrics = match &o.metrics {
        Some(a) => Some(listen(Port::Metrics, a, format!("metrics {a}"), o).await?),
        None => None,
    };
    Ok(Listeners {
        me,
        client,
        raft,
        metrics,
    })
}

/// Listens on `addr` (`shown` so in a failure to bind) if the loopback rule lets `port` serve
/// where it is bound.
async fn listen(
    port: Port,
    addr: &str,
    shown: String,
    o: &NodeOpts,
) -> Result<TcpListener, RunError> {
    let l = TcpListener::bind(&resolve(addr).await?[..])
        .await
        .map_err(|source| RunError::Bind {
            addr: shown,
            source,
        })?;
    // C13 amended (issue 27): the loopback rule judges each address as bound — a name leads
    // wherever the resolver says (a hosts file, a DNS search domain), `localhost` included.
    let at = l.local_addr().map_err(|e| format!("{addr}: {e}"))?;
    exposure(port, addr, at.ip(), o)?;
    Ok(l)
}

async fn start_raft(
    args: &RunArgs,
    links: &Links,
    lease: &Arc<LeaseClock>,
    pace: &Arc<Pace>,
    log: LogStore,
    sm: StateMachineStore,
) -> Result<Raft, RunError> {
    let o = &args.opts;
    let config = Config {
        cluster_name: o.cluster_name.clone(),
        heartbeat_interval: o.heartbeat_ms,
        election_timeout_min: o.election_min_ms,
        election_timeout_max: o.election_max_ms,
        // C15: openraft's timer never campaigns; `raft/elect.rs` does, after a pre-vote.
        enable_elect: false,
        ..store_config()
    }
    .validate()
    .map_err(|e| RunError::Raft(format!("config: {e}")))?;
    let net = NetFactory {
        lease: lease.clone(),
        pace: pace.clone(),
        heartbeat: Duration::from_millis(o.heartbeat_ms),
        tls: links.peer_tls.clone(),
        max_rpc: links.max_rpc,
        budgets: Default::default(),
        identity: links.identity.clone(),
    };
    Raft::new(args.id, Arc::new(config), net, log, sm)
        .await
        .map_err(|e| RunError::Raft(e.to_string()))
}

/// C17: the stored membership wins over `--cluster` (a moved address is refused); a node
/// started with `--join` says it waits to be added.
async fn check_membership(raft: &Raft, args: &RunArgs, me: &CtrlNode) -> Result<(), String> {
    let id = args.id;
    let stored = raft
        .with_raft_state(|st| {
            let m = st.membership_state.effective().membership();
            m.nodes().map(|(i, n)| (*i, n.clone())).collect()
        })
        .await
        .map_err(|e| format!("raft: {e}"))?;
    match crate::base::config::check_stored_membership(id, &stored, &args.spec) {
        Ok(Some(note)) => eprintln!("node {id}: {note}"),
        Ok(None) => {}
        Err(e) => {
            crate::raft::stop(raft).await;
            return Err(e);
        }
    }
    if args.join && stored.is_empty() {
        eprintln!(
            "node {id}: --join: waiting, uninitialised, to be added (xce-controller member add {id}={}/{})",
            me.client, me.raft
        );
    }
    Ok(())
}

/// C15: one owner of the elect switch; the early campaign after a leader's close. C12: no
/// campaign from a node that has not caught up since it started without data.
fn start_elections(
    raft: &Raft,
    args: &RunArgs,
    guard: VoteGuard,
    links: &Links,
    log_reader: LogStore,
    pace: Arc<Pace>,
    amnesia: &Arc<Amnesia>,
) -> Arc<Elections> {
    let o = &args.opts;
    let early = o.early_campaign.then(|| crate::raft::elect::EarlyTiming {
        step: Duration::from_millis(o.heartbeat_ms.div_ceil(2)),
    });
    let timing = crate::raft::elect::Timing {
        min: Duration::from_millis(o.election_min_ms),
        max: Duration::from_millis(o.election_max_ms),
        pace,
    };
    let elect = Elections::start(
        raft.clone(),
        args.id,
        early,
        timing,
        guard,
        links.forwarder(),
        log_reader.clone(),
    );
    amnesia.sync_elect(&elect, &raft.metrics().borrow().vote);
    tokio::spawn(crate::raft::amnesia::watch(
        raft.clone(),
        amnesia.clone(),
        elect.clone(),
    ));
    // C12 (fifth round): a node that started without data asks the others where they stand.
    if amnesia.unsure() {
        let addrs = args
            .spec
            .nodes
            .iter()
            .map(|(id, n)| (*id, n.raft.clone()))
            .collect();
        tokio::spawn(crate::raft::standing::gather(
            amnesia.clone(),
            Arc::new(links.forwarder()),
            addrs,
        ));
    }
    elect
}

/// What the raft port's listener shares with the node: C12's amnesia, C20's identity, C19's
/// digests and divergence.
struct RaftPortState {
    amnesia: Arc<Amnesia>,
    identity: Arc<Identity>,
    digests: Arc<Digests>,
    diverged: Arc<Diverged>,
}

/// The raft port's listener; returns where the client port's context goes once it exists
/// (C16: forwarded requests are served through it).
fn serve_raft_port(
    raft_l: TcpListener,
    raft: &Raft,
    args: &RunArgs,
    guard: VoteGuard,
    st: RaftPortState,
    elect: &Arc<Elections>,
    links: &Links,
) -> Forwarded {
    let forwarded = Arc::new(std::sync::OnceLock::new());
    tokio::spawn(peer::serve(
        raft_l,
        peer::PeerServer {
            raft: raft.clone(),
            node_id: args.id,
            guard,
            amnesia: st.amnesia,
            elect: elect.clone(),
            dir: args.data.clone(),
            tls: links.peer_tls.clone(),
            spec_members: args.spec.nodes.keys().copied().collect(),
            refusal_ms: u32::try_from(args.opts.election_max_ms).unwrap_or(u32::MAX),
            max_rpc: links.max_rpc,
            forwarded: forwarded.clone(),
            identity: st.identity,
            digests: st.digests,
            diverged: st.diverged,
        },
    ));
    forwarded
}

/// Where the raft port finds the client port's context (set once it exists).
type Forwarded = Arc<std::sync::OnceLock<Arc<Ctx>>>;

/// What the stores hand to the node's own tasks: the log compaction owns, the applied
/// handovers C14's follower reads, and the last log index at start.
struct Handed {
    log: LogStore,
    handovers: UnboundedReceiver<crate::raft::handover::Applied>,
    start_last: Option<u64>,
}

/// The node's own tasks: snapshots and purges, the role log, C14's handover follower, C11's
/// barrier and (C17: never with --join; the leader's appends do) a new cluster's
/// initialisation.
fn start_tasks(
    raft: &Raft,
    args: &RunArgs,
    applied: &SharedApplied,
    handed: Handed,
    elect: &Arc<Elections>,
    amnesia: Arc<Amnesia>,
) -> Arc<Readiness> {
    let id = args.id;
    let Handed {
        log,
        handovers,
        start_last,
    } = handed;
    tokio::spawn(crate::raft::compaction::run(
        raft.clone(),
        applied.clone(),
        log,
        args.data.clone(),
        crate::raft::compaction::Policy::new(id, args.opts.snapshot_logs, args.opts.log_keep),
    ));
    tokio::spawn(log_roles(raft.clone(), id, args.data.clone()));
    tokio::spawn(crate::raft::handover::follow(
        raft.clone(),
        elect.clone(),
        id,
        start_last,
        handovers,
    ));
    let ready = Arc::new(Readiness::default());
    tokio::spawn(crate::raft::ready::run(
        raft.clone(),
        ready.clone(),
        id,
        COMMIT_TIMEOUT,
    ));
    if !args.join {
        tokio::spawn(initialize(raft.clone(), args.clone(), amnesia));
    }
    ready
}

/// The context's tasks, the metrics endpoint and the client port.
fn serve_clients(
    ctx: Arc<Ctx>,
    client_l: TcpListener,
    metrics_l: Option<TcpListener>,
    args: &RunArgs,
    me: &CtrlNode,
    links: &Links,
    forwarded: &Forwarded,
) -> Result<(), String> {
    let id = args.id;
    let _ = forwarded.set(ctx.clone());
    tokio::spawn(crate::node::tenure::run(ctx.clone()));
    tokio::spawn(crate::node::check::run(ctx.clone()));
    tokio::spawn(log_cut_off(ctx.clone()));
    tokio::spawn(crate::ports::metrics::watch_leader(ctx.raft.clone()));
    tokio::spawn(crate::node::peers::watch(ctx.clone()));
    if let Some(l) = metrics_l {
        let at = l.local_addr().map_err(|e| e.to_string())?;
        eprintln!("node {id}: metrics on http://{at}/metrics");
        tokio::spawn(crate::ports::metrics::serve(
            l,
            ctx.clone(),
            args.data.clone(),
        ));
    }
    // Issue 26: ports in the kernel's ephemeral range collide with outgoing connections.
    let mut ports = vec![("client", port_of(&me.client)), ("raft", port_of(&me.raft))];
    if let Some(m) = &args.opts.metrics {
        ports.push(("metrics", port_of(m)));
    }
    if let Some(range) = ephemeral_range() {
        for (what, port) in ports {
            if let Some(why) = port.and_then(|p| in_ephemeral(what, p, range)) {
                crate::log_warn!("node {id}: {why}");
            }
        }
    }
    tokio::spawn(client::serve(client_l, ctx, links.client_tls.clone()));
    let tls = args.opts.tls_cert.as_ref().map_or("", |_| " with TLS");
    let mutual = links.peer_tls.as_ref().map_or("", |_| " with mutual TLS");
    let (client, raft) = (&me.client, &me.raft);
    eprintln!("node {id}: serving clients on {client}{tls} (raft {raft}{mutual})");
    Ok(())
}

/// Runs until SIGTERM or SIGINT; C14: a primary hands leadership over to an up-to-date
/// standby first.
async fn stop_on_signal(
    raft: &Raft,
    serving: &Ctx,
    ready: &Readiness,
    elect: &Elections,
    id: NodeId,
) {
    wait_for_signal().await;
    eprintln!("node {id}: shutting down");
    if raft.metrics().borrow().state == openraft::ServerState::Leader {
        serving.proposer.close();
    }
    crate::raft::handover::hand_over(raft, ready, elect, id, &serving.liveness()).await;
    crate::raft::stop(raft).await;
}

/// The storage side of the Raft config (P12, C24): snapshots are triggered and the log purged
/// behind them by `raft/compaction.rs` (by bytes, not entries: openraft's own policies are
/// off); a snapshot of a big table is streamed as a file and may take seconds to send and
/// install.
fn store_config() -> Config {
    Config {
        snapshot_policy: SnapshotPolicy::Never,
        // Nothing kept by count: openraft purges only where `raft/compaction.rs` asks.
        max_in_snapshot_log_to_keep: u64::MAX,
        install_snapshot_timeout: store::INSTALL_SNAPSHOT_TIMEOUT_MS,
        max_payload_entries: crate::raft::propose::MAX_PAYLOAD_ENTRIES,
        ..Default::default()
    }
}

/// Issue 36: on every SIGHUP, the log file is opened again (`base/logstamp.rs`), said in the
/// new file's first line.
async fn reopen_on_hangup(mut hup: tokio::signal::unix::Signal, id: NodeId) {
    while hup.recv().await.is_some() {
        crate::base::logstamp::reopen();
        crate::log_info!("node {id}: SIGHUP: log file reopened");
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        // Without signal handlers the node runs until killed.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}

/// C1: a brand-new cluster initialises itself once. Every member whose store is empty tries,
/// staggered by rank so the lowest id normally wins; a later try finds the cluster initialised
/// (it has a vote or a log by then) and openraft refuses it harmlessly. Identical membership
/// in every try keeps even a simultaneous double initialisation consistent.
///
/// C12 (fifth round): openraft's `initialize` campaigns at once, past every hold; a store is
/// empty in a brand-new cluster and on a node that lost its data alike. So a node tries only
/// once it may campaign ([`Amnesia::may_campaign`]: every other voter answered, none holds a
/// log beyond the bootstrap entry, and its own term is at or above theirs); a node that lost
/// its data in a running cluster never does — the leader's appends initialise it.
async fn initialize(raft: Raft, args: RunArgs, amnesia: Arc<Amnesia>) {
    let rank = args
        .spec
        .nodes
        .keys()
        .position(|&n| n == args.id)
        .unwrap_or(0) as u32;
    tokio::time::sleep(INIT_STAGGER * rank).await;
    let mut floor = amnesia.floor_changes();
    loop {
        match raft.is_initialized().await {
            Ok(false) => {}
            _ => return,
        }
        if amnesia.may_campaign(&raft.metrics().borrow().vote) {
            break;
        }
        // Until the floor is known, or (a running cluster) the leader's appends arrive.
        let _ = tokio::time::timeout(crate::raft::standing::ROUND, floor.changed()).await;
    }
    match raft.initialize(args.spec.nodes.clone()).await {
        Ok(()) => eprintln!(
            "node {}: initialised a new cluster of {} nodes",
            args.id,
            args.spec.nodes.len()
        ),
        Err(e) => eprintln!("node {}: initialise skipped: {e}", args.id),
    }
}

fn role_name(s: ServerState) -> &'static str {
    match s {
        ServerState::Leader => "primary",
        ServerState::Follower => "standby",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

/// C8: one stderr line per change of role, term or leader.
///
/// Waits on the server metrics (role, vote, leader, membership), which change only with them:
/// `raft.metrics()` changes on every turn of the Raft core, several times per write, and each
/// change woke this task (P11). Only while this node leads unconfirmed does it follow every
/// turn, to see the first quorum answer.
async fn log_roles(raft: Raft, id: NodeId, data: std::path::PathBuf) {
    let mut rx = raft.server_metrics();
    let mut every_turn = raft.metrics();
    let mut last = None;
    loop {
        let now = {
            let m = rx.borrow_and_update();
            (m.state, m.vote.leader_id().get_term(), m.current_leader)
        };
        // A node restarted from a leader's state is a leader only in its own eyes until a
        // quorum answers it (it usually learns of a newer term first).
        let unconfirmed = now.0 == ServerState::Leader
            && every_turn
                .borrow_and_update()
                .millis_since_quorum_ack
                .is_none();
        if last != Some(now) && !unconfirmed {
            let leader = now.2.map_or_else(|| "none".to_string(), |l| l.to_string());
            let (role, term, at) = (role_name(now.0), now.1, at_now());
            eprintln!("node {id}: role={role} term={term} leader={leader} {at}");
            last = Some(now);
        }
        let stopped = if unconfirmed {
            tokio::select! {
                r = rx.changed() => r.is_err(),
                r = every_turn.changed() => r.is_err(),
            }
        } else {
            rx.changed().await.is_err()
        };
        if stopped {
            // C21 (issue 39): the Raft core ended; its last metrics say why. A storage
            // error is this node's storage fault (exit 74); any end the node did not ask
            // for ends the process (exit 70): nothing serves from a node without its Raft.
            use crate::base::crash::FatalKind;
            use openraft::error::Fatal;
            let state = match raft.metrics().borrow().running_state.clone() {
                Ok(()) => Ok(()),
                Err(Fatal::Stopped) => Err(FatalKind::Stopped),
                Err(Fatal::Panicked) => Err(FatalKind::Panicked),
                Err(e @ Fatal::StorageError(_)) => Err(FatalKind::Storage(e.to_string())),
            };
            crate::base::crash::core_ended(state, id, &data);
            return;
        }
    }
}

/// C8/C10: one stderr line when this leader loses touch with its quorum and stops presenting
/// itself as primary, and one when a quorum answers again.
async fn log_cut_off(ctx: Arc<Ctx>) {
    let mut was = false;
    loop {
        tokio::time::sleep(STALE_LEADER_RECHECK).await;
        crate::base::failpoints::crash_point(crate::base::failpoints::TASK_TICK);
        let now = ctx.leader_cut_off();
        if now != was {
            let (id, at) = (ctx.id, at_now());
            if now {
                let window = ctx.cut_off_window().as_millis();
                crate::log_warn!(
                    "node {id}: no answer from a quorum for {window} ms: not serving as primary {at}"
                );
            } else {
                eprintln!("node {id}: a quorum answers again (or another leader took over) {at}");
            }
            was = now;
        }
    }
}

/// `at=SECONDS.MILLIS` of the wall clock, as the role lines end (C8).
fn at_now() -> String {
    let ms = crate::base::clock::now_ms();
    format!("at={}.{:03}", ms / 1000, ms % 1000)
}

/// The port of `HOST:PORT` (None: 0 or unparsable).
fn port_of(addr: &str) -> Option<u16> {
    crate::base::config::split_addr(addr)
        .map(|(_, p)| p)
        .filter(|&p| p != 0)
}

/// The kernel's ephemeral port range (`/proc/sys/net/ipv4/ip_local_port_range`).
fn ephemeral_range() -> Option<(u16, u16)> {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = s.split_whitespace().map(|x| x.parse::<u16>().ok());
    Some((it.next()??, it.next()??))
}

/// Issue 26: why `port` (the `what` port) is a bad choice when it lies in the ephemeral
/// `range`: outgoing connections of this machine take ports from it, so a restart can find
/// it taken ("Address already in use").
fn in_ephemeral(what: &str, port: u16, range: (u16, u16)) -> Option<String> {
    (range.0..=range.1).contains(&port).then(|| {
        format!(
            "the {what} port {port} is in the kernel's ephemeral range {}-{} \
             (ip_local_port_range): an outgoing connection may hold it when this node restarts \
             (\"Address already in use\"); use a port below {} (docs/operations.md)",
            range.0, range.1, range.0
        )
    })
}

#[cfg(test)]
mod ephemeral_tests {
    use super::*;

    #[test]
    fn ports_in_the_ephemeral_range_are_named() {
        let r = (32768, 60999);
        assert!(in_ephemeral("client", 9991, r).is_none());
        assert!(in_ephemeral("raft", 32767, r).is_none());
        assert!(in_ephemeral("raft", 32768, r)
            .unwrap()
            .contains("raft port 32768"));
        assert!(in_ephemeral("metrics", 60999, r).is_some());
        assert!(in_ephemeral("metrics", 61000, r).is_none());
        assert_eq!(port_of("[::1]:9100"), Some(9100));
        assert_eq!(port_of("127.0.0.1:0"), None);
    }
}
