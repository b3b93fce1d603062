//! `xce-controller run`: one controller node — Raft, its RPC listener, the client server,
//! self-initialisation of a brand-new cluster and the role-change log.

use std::sync::Arc;
use std::time::Duration;

use openraft::{Config, ServerState, SnapshotPolicy};
use tokio::net::TcpListener;

use crate::base::config::RunArgs;
use crate::base::ids::NodeId;
use crate::base::tls;
use crate::node::ctx::{Ctx, COMMIT_TIMEOUT, STALE_LEADER_RECHECK};
use crate::ports::client;
use crate::ports::peer;
use crate::raft::lease::{LeaseClock, VoteGuard};
use crate::raft::link::NetFactory;
use crate::raft::store::{self, LogStore, StateMachineStore};
use crate::raft::types::Raft;
use crate::raft::{forward, frame};

/// Delay between members trying to initialise a brand-new cluster, by rank of id: the lowest
/// id tries at once, the next one only if the cluster is still uninitialised after this, …
pub const INIT_STAGGER: Duration = Duration::from_millis(500);

pub fn run(args: RunArgs) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("node {}: runtime: {e}", args.id);
            return 1;
        }
    };
    let id = args.id;
    match rt.block_on(run_node(args)) {
        Ok(()) => {
            rt.shutdown_timeout(Duration::from_secs(1));
            0
        }
        Err(e) => {
            eprintln!("node {id}: {e}");
            1
        }
    }
}

async fn run_node(args: RunArgs) -> Result<(), String> {
    let id = args.id;

    let tls = match (&args.opts.tls_cert, &args.opts.tls_key) {
        (Some(c), Some(k)) => Some(tls::acceptor(
            c,
            k,
            args.opts.tls_client_ca.as_deref(),
            args.opts.token_key.is_some(),
        )?),
        _ => None,
    };
    let peer_tls = match (
        &args.opts.tls_cert,
        &args.opts.tls_key,
        &args.opts.tls_peer_ca,
    ) {
        (Some(c), Some(k), Some(ca)) => Some(tls::PeerTls::new(c, k, ca)?),
        _ => None,
    };
    let limits = xce::wire::Limits::default();
    // C13: callers are checked once client certificates or tokens identify them.
    let auth = crate::base::auth::Auth {
        on: args.opts.tls_client_ca.is_some() || args.opts.token_key.is_some(),
        token_key: match &args.opts.token_key {
            Some(p) => Some(crate::base::auth::TokenKey::load(p)?),
            None => None,
        },
    };
    let max_rpc = frame::max_rpc_bytes(limits.max_message_bytes);
    let db = store::open_db(&args.data)?;
    let blank = store::is_blank(&db, &args.data)?;
    let amnesia = crate::raft::amnesia::Amnesia::open(id, &args.data, blank)
        .map_err(|e| format!("{}: {e}", args.data.display()))?;
    let log = LogStore::new(db.clone(), args.opts.test_leader_flush_stall.clone());
    let log_reader = log.clone();
    let mut sm =
        StateMachineStore::open(id, &args.data).map_err(|e| format!("state machine: {e}"))?;
    let (handover_tx, handover_rx) = tokio::sync::mpsc::unbounded_channel();
    sm.handovers = Some(Box::new(move |log_id, batch| {
        crate::raft::handover::note(&handover_tx, log_id, batch)
    }));
    let applied = sm.applied.clone();

    let me = args.spec.nodes[&id].clone();
    // Names in --cluster: ours must resolve (bounded) to bind; a peer's that does not yet is
    // only reported (the raft port resolves it again on every connect, bounded too).
    crate::base::config::warn_unresolved_peers(id, &args.spec).await;
    let client_l = TcpListener::bind(&crate::base::config::resolve(&me.client).await?[..])
        .await
        .map_err(|e| format!("bind {}: {e}", me.client))?;
    let raft_l = TcpListener::bind(&crate::base::config::resolve(&me.raft).await?[..])
        .await
        .map_err(|e| format!("bind {}: {e}", me.raft))?;
    let metrics_l = match &args.opts.metrics {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .map_err(|e| format!("bind metrics {a}: {e}"))?,
        ),
        None => None,
    };

    let o = &args.opts;
    let config = Config {
        cluster_name: o.cluster_name.clone(),
        heartbeat_interval: o.heartbeat_ms,
        election_timeout_min: o.election_min_ms,
        election_timeout_max: o.election_max_ms,
        // C15: openraft's timer never campaigns; `raft/elect.rs` does, after a pre-vote.
        enable_elect: false,
        ..store_config(o)
    }
    .validate()
    .map_err(|e| format!("raft config: {e}"))?;
    let lease = Arc::new(LeaseClock::default());
    let net = NetFactory {
        lease: lease.clone(),
        tls: peer_tls.clone(),
        max_rpc,
        budgets: Default::default(),
    };
    let raft = Raft::new(id, Arc::new(config), net, log, sm)
        .await
        .map_err(|e| format!("raft: {e}"))?;
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
            let _ = tokio::time::timeout(Duration::from_secs(3), raft.shutdown()).await;
            return Err(e);
        }
    }
    if args.join && stored.is_empty() {
        eprintln!(
            "node {id}: --join: waiting, uninitialised, to be added (xce-controller member add {id}={}/{})",
            me.client, me.raft
        );
    }

    // C11: no vote for election-max after boot (a lease may still rest on our last ack).
    let guard = VoteGuard::from_boot(Duration::from_millis(o.election_max_ms));
    // C15: one owner of the elect switch; the early campaign after a leader's close.
    let early = o.early_campaign.then(|| crate::raft::elect::EarlyTiming {
        lease: Duration::from_millis(o.election_max_ms),
        step: Duration::from_millis(o.heartbeat_ms.div_ceil(2)),
    });
    let timing = crate::raft::elect::Timing {
        min: Duration::from_millis(o.election_min_ms),
        max: Duration::from_millis(o.election_max_ms),
    };
    let elect = crate::raft::elect::Elections::start(
        raft.clone(),
        id,
        early,
        timing,
        guard,
        forward::Forwarder::new(peer_tls.clone(), max_rpc),
        log_reader.clone(),
    );
    // C12: no campaign from a node that has not caught up since it started without data.
    amnesia.sync_elect(&elect, raft.metrics().borrow().last_log_index);
    tokio::spawn(crate::raft::amnesia::watch(
        raft.clone(),
        amnesia.clone(),
        elect.clone(),
        log_reader,
    ));
    let forwarded = Arc::new(std::sync::OnceLock::new());
    tokio::spawn(peer::serve(
        raft_l,
        peer::PeerServer {
            raft: raft.clone(),
            node_id: id,
            guard,
            amnesia,
            elect: elect.clone(),
            dir: args.data.clone(),
            tls: peer_tls.clone(),
            spec_members: args.spec.nodes.keys().copied().collect(),
            max_rpc,
            forwarded: forwarded.clone(),
        },
    ));
    tokio::spawn(store::snapshot_trigger(
        raft.clone(),
        applied.clone(),
        o.snapshot_logs,
    ));
    tokio::spawn(log_roles(raft.clone(), id));
    tokio::spawn(crate::raft::handover::follow(raft.clone(), id, handover_rx));
    let ready = Arc::new(crate::raft::ready::Readiness::default());
    tokio::spawn(crate::raft::ready::run(
        raft.clone(),
        ready.clone(),
        id,
        COMMIT_TIMEOUT,
    ));
    // C17: a node started with --join never initialises a cluster; the leader's appends do.
    if !args.join {
        tokio::spawn(initialize(raft.clone(), args.clone()));
    }
    let ctx = Arc::new(Ctx {
        id,
        raft: raft.clone(),
        applied,
        spec: args.spec.clone(),
        opts: args.opts.clone(),
        limits,
        primary_waiters: Default::default(),
        crowd: std::sync::Mutex::new((std::time::Instant::now(), 0)),
        lease,
        elect: elect.clone(),
        proposer: crate::raft::propose::Proposer::start(raft.clone(), COMMIT_TIMEOUT),
        cursors: crate::sm::listing::Cursors::for_node(id),
        auth,
        ready: ready.clone(),
        tenure: Default::default(),
        forwarder: forward::Forwarder::new(peer_tls.clone(), max_rpc),
    });
    let _ = forwarded.set(ctx.clone());
    tokio::spawn(crate::node::tenure::run(ctx.clone()));
    tokio::spawn(log_cut_off(ctx.clone()));
    let serving = ctx.clone();
    tokio::spawn(crate::ports::metrics::watch_leader(raft.clone()));
    if let Some(l) = metrics_l {
        let at = l.local_addr().map_err(|e| e.to_string())?;
        eprintln!("node {id}: metrics on http://{at}/metrics");
        tokio::spawn(crate::ports::metrics::serve(
            l,
            ctx.clone(),
            args.data.clone(),
        ));
    }
    tokio::spawn(client::serve(client_l, ctx, tls));
    eprintln!(
        "node {id}: serving clients on {}{} (raft {}{})",
        me.client,
        if args.opts.tls_cert.is_some() {
            " with TLS"
        } else {
            ""
        },
        me.raft,
        if peer_tls.is_some() {
            " with mutual TLS"
        } else {
            ""
        },
    );

    wait_for_signal().await;
    eprintln!("node {id}: shutting down");
    // C14: a primary hands leadership over to an up-to-date standby first.
    if raft.metrics().borrow().state == openraft::ServerState::Leader {
        serving.proposer.close();
    }
    crate::raft::handover::hand_over(&raft, &ready, &elect, id).await;
    let _ = tokio::time::timeout(Duration::from_secs(3), raft.shutdown()).await;
    Ok(())
}

/// The storage side of the Raft config (P12): snapshots are triggered by
/// [`store::snapshot_trigger`] (by writes and table size, not entries); a snapshot of a big
/// table is streamed as a file and may take seconds to send and install.
fn store_config(o: &crate::base::config::NodeOpts) -> Config {
    Config {
        snapshot_policy: SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: o.log_keep,
        install_snapshot_timeout: store::INSTALL_SNAPSHOT_TIMEOUT_MS,
        max_payload_entries: crate::raft::propose::MAX_PAYLOAD_ENTRIES,
        ..Default::default()
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
async fn initialize(raft: Raft, args: RunArgs) {
    let rank = args
        .spec
        .nodes
        .keys()
        .position(|&n| n == args.id)
        .unwrap_or(0) as u32;
    tokio::time::sleep(INIT_STAGGER * rank).await;
    match raft.is_initialized().await {
        Ok(false) => {}
        _ => return,
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
async fn log_roles(raft: Raft, id: NodeId) {
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
            let ms = crate::base::clock::now_ms();
            eprintln!(
                "node {id}: role={} term={} leader={leader} at={}.{:03}",
                role_name(now.0),
                now.1,
                ms / 1000,
                ms % 1000
            );
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
            // The Raft core ended; its last metrics say why.
            if let Err(e) = &raft.metrics().borrow().running_state {
                eprintln!("node {id}: raft stopped: {e}");
            }
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
        let now = ctx.leader_cut_off();
        if now != was {
            let ms = crate::base::clock::now_ms();
            if now {
                eprintln!(
                    "node {}: no answer from a quorum for {} ms: not serving as primary at={}.{:03}",
                    ctx.id,
                    ctx.opts.election_max_ms,
                    ms / 1000,
                    ms % 1000
                );
            } else {
                eprintln!(
                    "node {}: a quorum answers again (or another leader took over) at={}.{:03}",
                    ctx.id,
                    ms / 1000,
                    ms % 1000
                );
            }
            was = now;
        }
    }
}
