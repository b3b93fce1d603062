//! The raft port's listener (C13): admits members' connections and hands each RPC to the
//! local Raft (appends through C12's amnesia check, votes behind C11's guard, pre-votes,
//! snapshots streamed to a file, forwarded client requests to the client port's context,
//! the consistency check's questions, C19). Every message is judged by its cluster stamp
//! before anything else in it is read (C20): one of another cluster or restore is refused,
//! and logged; a node that diverged (C19) refuses everything but the check's questions.
//!
//! What a stranger costs (C13, S15): a connection is *admitted* once its TLS handshake has
//! completed with a certificate naming a configured member (plaintext: once the length prefix
//! of its first message has arrived, within the limit). At most [`MAX_UNADMITTED`]
//! connections wait for admission, for at most [`ADMISSION_TIMEOUT`]; a new one evicts the
//! oldest, so a slow-loris crowd cannot keep a member out. Every length is checked against the limit before anything is read, and a
//! message's buffer grows with the bytes that actually arrived — a 4-byte prefix claiming
//! 256 MiB costs nothing until 256 MiB are sent — and a frame that started must be complete
//! within [`crate::raft::frame::FRAME_TIMEOUT`]. At most [`MAX_PEER_CONNECTIONS`] admitted
//! connections.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::RaftError;
use openraft::raft::{AppendEntriesResponse, VoteRequest, VoteResponse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Semaphore};

use crate::base::clock::BootInstant;
use crate::base::cluster_id::Identity;
use crate::base::ids::{NodeId, SnapshotMeta, Vote};
use crate::base::tls::{cert_names, member_of, PeerTls};
use crate::ports::client::answer_forwarded;
use crate::raft::digests::Digests;
use crate::raft::diverged::Diverged;
use crate::raft::frame::{
    decode, frame_append_reply, invalid, more, read_rest, split_tag, write_msg, DigestAnswer,
    PeerStream, PreVoteRequest, RpcReply, RpcRequest, Traffic, RPC_IDLE_TIMEOUT,
};
use crate::raft::lease::VoteGuard;
use crate::raft::types::{Raft, Snapshot};

/// A connection must be admitted (TLS handshake + member check, or in plaintext the length
/// prefix of its first message, checked against the limit) within this.
pub const ADMISSION_TIMEOUT: Duration = Duration::from_secs(3);
/// Connections waiting for admission at once; a new one evicts the oldest.
pub const MAX_UNADMITTED: usize = 32;
/// Admitted connections at once (members open a few each); more are closed at once.
pub const MAX_PEER_CONNECTIONS: usize = 256;

/// Connection-level log lines a stranger can cause, rate-limited with a count (issue 27).
static REFUSALS: crate::base::ratelog::RateLog = crate::base::ratelog::RateLog::new();

/// Largest snapshot file accepted from a peer.
pub const MAX_SNAPSHOT_BYTES: u64 = 64 << 30;

/// Receives the `len` bytes of a snapshot file that follow its header into a temporary file
/// in `dir`, then hands it to Raft to install.
async fn receive_snapshot(
    stream: &mut PeerStream,
    raft: &Raft,
    dir: &std::path::Path,
    vote: Vote,
    meta: SnapshotMeta,
    len: u64,
) -> io::Result<RpcReply> {
    if len > MAX_SNAPSHOT_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "snapshot too large",
        ));
    }
    // C21: a failure to write the file is this node's storage fault; the peer's stream ending
    // early is not.
    let disk = |e: io::Error, path: &std::path::Path| {
        crate::base::fault::record("snapshot", path, &e);
        e
    };
    let snap = crate::sm::snapshot::SnapFile::receive_into(dir).map_err(|e| disk(e, dir))?;
    let path = snap.path.clone();
    let mut file = tokio::fs::File::from_std(snap.file);
    let copied = tokio::io::copy(&mut (&mut *stream).take(len), &mut file).await;
    if let Err(e) = &copied {
        if is_disk_error(e) {
            return Err(disk(io::Error::new(e.kind(), e.to_string()), &path));
        }
    }
    let ok = matches!(copied, Ok(n) if n == len);
    if !ok {
        let _ = std::fs::remove_file(&path);
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "snapshot cut short",
        ));
    }
    file.flush().await.map_err(|e| disk(e, &path))?;
    let snapshot = Snapshot {
        meta,
        snapshot: Box::new(crate::sm::snapshot::SnapFile {
            path,
            file: file.into_std().await,
        }),
    };
    Ok(RpcReply::Snapshot(
        raft.install_full_snapshot(vote, snapshot).await,
    ))
}

/// Whether a copy from a peer into a file failed on the file's side (a full or failing disk),
/// not on the network's.
fn is_disk_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSPC | libc::EDQUOT | libc::EIO | libc::EROFS | libc::EFBIG)
    )
}

/// What the raft listener needs, shared by every peer connection.
pub struct PeerServer {
    pub raft: Raft,
    pub node_id: NodeId,
    pub guard: VoteGuard,
    /// C12: a node that lost its data votes and appends carefully until caught up.
    pub amnesia: Arc<crate::raft::amnesia::Amnesia>,
    /// C15: told when a connection that carried a leader's appends breaks.
    pub elect: Arc<crate::raft::elect::Elections>,
    pub dir: std::path::PathBuf,
    /// Mutual TLS; `None`: plaintext.
    pub tls: Option<PeerTls>,
    /// The configured members (`--cluster`); the current membership counts too.
    pub spec_members: Vec<NodeId>,
    /// Largest message accepted ([`crate::raft::frame::max_rpc_bytes`]).
    pub max_rpc: usize,
    /// C16: the client protocol's context, once it exists: forwarded requests are served
    /// through it.
    pub forwarded: Arc<std::sync::OnceLock<Arc<crate::node::ctx::Ctx>>>,
    /// C20: this node's cluster: every message's stamp is checked against it.
    pub identity: Arc<Identity>,
    /// C19: this node's state digests, for the primary's check.
    pub digests: Arc<Digests>,
    /// C19: whether this node diverged (then it refuses all but the check's questions).
    pub diverged: Arc<Diverged>,
    /// C11 (fifth round): how long this node refuses other candidates after accepting an
    /// append (its election-max, openraft's leader lease), stated on every answer to one.
    pub refusal_ms: u32,
}

impl PeerServer {
    /// The membership this node holds: its node ids (voters and learners, sorted) and the log
    /// index of its entry (0 for the initial one).
    fn held_membership(&self) -> (Vec<NodeId>, u64) {
        let m = self
            .raft
            .server_metrics()
            .borrow()
            .membership_config
            .clone();
        let mut ids: Vec<NodeId> = m.membership().nodes().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        (ids, m.log_id().map_or(0, |l| l.index))
    }

    /// Issue 26: the refusal for `who` when this node's membership (initialised, at a known
    /// log index) leaves it out; None when it names `who`, or this node has none yet.
    fn removal_of(&self, who: NodeId) -> Option<String> {
        let (ids, index) = self.held_membership();
        if ids.is_empty() || ids.contains(&who) {
            return None;
        }
        Some(crate::raft::removed::refusal(who, index, &ids))
    }

    /// Every node a peer certificate may name: the current membership's nodes (voters and
    /// learners); the configured members (`--cluster`) only while this node stores no
    /// membership yet (a new cluster, or `run --join` waiting to be added). A node removed
    /// online is no longer admitted, whatever `--cluster` said at start.
    fn members(&self) -> Vec<NodeId> {
        let (mut ids, _) = self.held_membership();
        if ids.is_empty() {
            ids = self.spec_members.clone();
        }
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

/// The connections waiting for admission, oldest first; evicting one drops its sender.
#[derive(Default)]
struct Waiting {
    next: u64,
    queue: VecDeque<(u64, oneshot::Sender<()>)>,
}

impl Waiting {
    /// Registers a connection; evicts the oldest when [`MAX_UNADMITTED`] are waiting.
    fn enter(&mut self) -> (u64, oneshot::Receiver<()>) {
        if self.queue.len() >= MAX_UNADMITTED {
            self.queue.pop_front();
        }
        let (tx, rx) = oneshot::channel();
        self.next += 1;
        self.queue.push_back((self.next, tx));
        (self.next, rx)
    }

    fn leave(&mut self, id: u64) {
        self.queue.retain(|(k, _)| *k != id);
    }
}

/// Accepts peer connections on the raft address and hands each RPC to the local Raft.
pub async fn serve(listener: TcpListener, srv: PeerServer) {
    let srv = Arc::new(srv);
    let waiting = Arc::new(Mutex::new(Waiting::default()));
    let admitted = Arc::new(Semaphore::new(MAX_PEER_CONNECTIONS));
    let node_id = srv.node_id;
    tokio::spawn(async move {
        let prefix = format!("node {node_id}: ");
        loop {
            tokio::time::sleep(crate::base::ratelog::INTERVAL).await;
            REFUSALS.flush(&prefix);
            crate::raft::link::flush_logs(&prefix);
        }
    });
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                crate::log_warn!("node {node_id}: raft accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        crate::raft::frame::raft_socket(&stream);
        let (srv, waiting, admitted) = (srv.clone(), waiting.clone(), admitted.clone());
        tokio::spawn(async move {
            let (ticket, evicted) = waiting.lock().expect("waiting").enter();
            let res = serve_peer(stream, peer, &srv, evicted, || {
                waiting.lock().expect("waiting").leave(ticket);
                admitted.clone().try_acquire_owned().ok()
            })
            .await;
            waiting.lock().expect("waiting").leave(ticket);
            if let Err(e) = res {
                if e.kind() != io::ErrorKind::UnexpectedEof {
                    // Issue 27: a stranger causes one line per connection: rate-limited.
                    let text = e.to_string();
                    let kind = match e.kind() {
                        io::ErrorKind::PermissionDenied if text.starts_with("removed") => {
                            "raft peer removed"
                        }
                        io::ErrorKind::PermissionDenied if text.contains("names no member") => {
                            "raft peer names no member"
                        }
                        io::ErrorKind::PermissionDenied if text.contains("evicted") => {
                            "raft peer evicted"
                        }
                        io::ErrorKind::PermissionDenied => "raft peer refused",
                        _ => "raft peer connection failed",
                    };
                    REFUSALS.note(kind, || format!("node {node_id}: raft peer {peer}: {e}"));
                }
            }
        });
    }
}

/// Admission (the TLS handshake and the member check, or the first message in plaintext),
/// raced against eviction and [`ADMISSION_TIMEOUT`]; then the connection's RPCs in order.
/// `admit` leaves the waiting queue and takes an admitted slot (`None`: all taken).
async fn serve_peer(
    tcp: TcpStream,
    peer: std::net::SocketAddr,
    srv: &PeerServer,
    evicted: oneshot::Receiver<()>,
    admit: impl FnOnce() -> Option<tokio::sync::OwnedSemaphorePermit>,
) -> io::Result<()> {
    let refused = |why: String| io::Error::new(io::ErrorKind::PermissionDenied, why);
    // The socket under the stream (kept open by it for the whole connection): a connection
    // that carries forwarded requests is marked as bulk (C15 amended, `raft/frame.rs`).
    let sock = {
        use std::os::fd::AsRawFd;
        (tcp.as_raw_fd(), tcp.local_addr().is_ok_and(|a| a.is_ipv6()))
    };
    let admission = async {
        let mut stream: PeerStream = match &srv.tls {
            None => Box::new(tcp),
            Some(t) => admit_tls(srv, t, tcp).await?,
        };
        // Plaintext has no handshake: the first message's length prefix must arrive (its
        // body then has FRAME_TIMEOUT, as every message's).
        let first = match srv.tls {
            None => {
                let mut len = [0u8; 4];
                stream.read_exact(&mut len).await?;
                if u32::from_be_bytes(len) as usize > srv.max_rpc {
                    return Err(invalid("first rpc over the limit"));
                }
                Some(len)
            }
            Some(_) => None,
        };
        Ok::<_, io::Error>((stream, first))
    };
    let (mut stream, first) = tokio::select! {
        r = tokio::time::timeout(ADMISSION_TIMEOUT, admission) => match r {
            Ok(r) => r?,
            Err(_) => return Err(refused("not admitted in time".into())),
        },
        _ = evicted => return Err(refused("evicted while waiting for admission".into())),
    };
    let Some(_slot) = admit() else {
        return Err(refused(format!(
            "{MAX_PEER_CONNECTIONS} peer connections already: closed"
        )));
    };
    // C15: the committed vote of the last append this connection carried; if the connection
    // breaks, the leader may be gone (see `crate::raft::elect`).
    let mut carried: Option<Vote> = None;
    let res = serve_rpcs(&mut stream, sock, peer, first, srv, &mut carried).await;
    if let (Err(_), Some(v)) = (&res, carried) {
        srv.elect.leader_link_closed(v);
    }
    res
}

/// C13: the TLS handshake of a raft connection and the member check: a stream, or refused —
/// a node this membership left out is told so first (issue 26: it exits).
async fn admit_tls(srv: &PeerServer, t: &PeerTls, tcp: TcpStream) -> io::Result<PeerStream> {
    let refused = |why: String| io::Error::new(io::ErrorKind::PermissionDenied, why);
    let s = t.acceptor.accept(tcp).await?;
    let cert = s.get_ref().1.peer_certificates().and_then(|c| c.first());
    let members = srv.members();
    match cert.and_then(|c| member_of(c, &members)) {
        Some(_) => Ok(Box::new(s)),
        None => {
            let names = cert.map(|c| cert_names(c)).unwrap_or_default();
            // Issue 26: a node this membership left out is told so (it exits).
            let who = names
                .iter()
                .find_map(|n| n.strip_prefix("xce-node-")?.parse::<NodeId>().ok());
            if let Some(why) = who.and_then(|w| srv.removal_of(w)) {
                let mut s: PeerStream = Box::new(s);
                let _ =
                    write_msg(&mut s, &RpcReply::Refused(why.clone()), srv.identity.tag()).await;
                // Read until the node closes (it has its answer), briefly: a
                // close with its request unread would reset the connection, and
                // the answer with it.
                let drain = async {
                    let mut buf = [0u8; 4096];
                    while s.read(&mut buf).await.is_ok_and(|n| n > 0) {}
                };
                let _ = tokio::time::timeout(Duration::from_millis(500), drain).await;
                return Err(refused(format!("removed: {why}")));
            }
            Err(refused(format!(
                "refused: certificate {names:?} names no member of {members:?}"
            )))
        }
    }
}

/// What becomes of a message, and of its connection.
enum Next {
    /// Answer it.
    Serve,
    /// It was answered (a refusal): read the next message.
    Skip,
    /// Close the connection: cleanly, or with why.
    Close(io::Result<()>),
}

/// The RPCs of an admitted connection, in order; `first`: the length prefix of the first
/// message if it was read during admission. Notes in `carried` the committed vote of the
/// appends it carries.
async fn serve_rpcs(
    stream: &mut PeerStream,
    sock: (std::os::fd::RawFd, bool),
    peer: std::net::SocketAddr,
    mut first: Option<[u8; 4]>,
    srv: &PeerServer,
    carried: &mut Option<Vote>,
) -> io::Result<()> {
    let mut bulk = false;
    loop {
        // Idle up to RPC_IDLE_TIMEOUT between messages; a message has FRAME_TIMEOUT.
        let len = match first.take() {
            Some(len) => len,
            None => {
                let mut len = [0u8; 4];
                match tokio::time::timeout(RPC_IDLE_TIMEOUT, stream.read_exact(&mut len)).await {
                    Ok(r) => r?,
                    Err(_) => return Ok(()),
                };
                len
            }
        };
        let body = read_rest(stream, len, srv.max_rpc).await?;
        // C20: the stamp first; nothing else of a refused message is read.
        let (msg, tag) = split_tag(&body);
        if let Err(why) = srv.identity.check(tag) {
            match refuse_stamp(stream, peer, srv, msg, tag, why).await? {
                Next::Close(r) => return r,
                Next::Serve | Next::Skip => continue,
            }
        }
        let req: RpcRequest = decode(msg)?;
        match refuse_diverged(stream, srv, &req).await? {
            Next::Serve => {}
            Next::Skip => continue,
            Next::Close(r) => return r,
        }
        // The standby keeps forwarding connections apart from its pre-votes, and the leader
        // sends a snapshot on a connection of its own: this one is bulk (a listing's pages, a
        // snapshot's megabytes), and goes without the priority.
        if matches!(
            req,
            RpcRequest::Forward { .. } | RpcRequest::Snapshot { .. }
        ) && !bulk
        {
            bulk = true;
            crate::raft::frame::set_traffic(sock.0, sock.1, Traffic::Bulk);
        }
        let reply = match answer(stream, peer, srv, req, carried).await? {
            Ok(reply) => reply,
            Err(close) => return close,
        };
        if matches!(reply, RpcReply::Append(_)) {
            // C11 (fifth round): every answer to an append states how long this node now
            // refuses other candidates; the leader's lease reads go by it.
            let buf = frame_append_reply(&reply, srv.refusal_ms, srv.identity.tag())?;
            stream.write_all(&buf).await?;
            stream.flush().await?;
        } else {
            write_msg(stream, &reply, srv.identity.tag()).await?;
        }
    }
}

/// C20: a message whose stamp this node does not take — of another cluster or restore, or
/// unstamped while this node has an id — is refused before anything in it is acted on, and
/// logged (one line per interval per sending host: a peer may reconnect often; the stamp is
/// the sender's choice, so it is not part of the key). C12 (fifth round): the one exception is
/// a blank node's question of where this node stands (it has no id yet; the question changes
/// nothing here, and the connection was admitted as a member's).
async fn refuse_stamp(
    stream: &mut PeerStream,
    peer: std::net::SocketAddr,
    srv: &PeerServer,
    msg: &[u8],
    tag: Option<crate::base::cluster_id::ClusterTag>,
    why: crate::base::cluster_id::Refusal,
) -> io::Result<Next> {
    // Decoded only to know how to answer or close: nothing else in it is acted on.
    let decoded = decode::<RpcRequest>(msg);
    if tag.is_none() && matches!(decoded, Ok(RpcRequest::Standing)) {
        let answer = RpcReply::Standing(crate::raft::standing::standing_of(&srv.raft));
        write_msg(stream, &answer, srv.identity.tag()).await?;
        return Ok(Next::Skip);
    }
    crate::base::counters::raft_refused("cluster");
    let host = peer.ip();
    srv.identity
        .log_limited(&format!("request {host}"), |skipped| {
            crate::log_warn!(
                "node {}: refused a raft message from {peer}: {why}{}",
                srv.node_id,
                more(skipped)
            )
        });
    let refused = io::Error::new(io::ErrorKind::PermissionDenied, why.to_string());
    if tag.is_none() && decoded.is_err() {
        // Not a raft message at all: closed unanswered, as any unreadable message.
        return Ok(Next::Close(Err(refused)));
    }
    // Issue 26: a node this membership left out (removed before the cluster recorded its id,
    // so its messages are unstamped) is told that instead, which it acts on.
    let who = match &decoded {
        Ok(RpcRequest::PreVote(r)) => Some(r.candidate),
        Ok(RpcRequest::Vote(r)) => r.vote.leader_id().voted_for(),
        _ => None,
    };
    let why = who
        .and_then(|w| srv.removal_of(w))
        .unwrap_or_else(|| why.to_string());
    write_msg(stream, &RpcReply::Refused(why), srv.identity.tag()).await?;
    // Unstamped (an earlier build, or a node of no cluster yet): told, then closed; so is a
    // snapshot (its bytes follow on the stream). A stamped message of another cluster leaves
    // the connection open: its sender retries it cheaply.
    let snapshot = matches!(decoded, Ok(RpcRequest::Snapshot { .. }));
    if tag.is_none() || decoded.is_err() || snapshot {
        return Ok(Next::Close(Err(refused)));
    }
    Ok(Next::Skip)
}

/// C19: a node that diverged answers only the check's questions (and a blank node's
/// question of where it stands); everything else is refused, saying why.
async fn refuse_diverged(
    stream: &mut PeerStream,
    srv: &PeerServer,
    req: &RpcRequest,
) -> io::Result<Next> {
    let allowed = matches!(
        req,
        RpcRequest::Digest { .. }
            | RpcRequest::Diverged { .. }
            | RpcRequest::AppliedIds { .. }
            | RpcRequest::Standing
    );
    if !srv.diverged.is() || allowed {
        return Ok(Next::Serve);
    }
    crate::base::counters::raft_refused("diverged");
    let why = "this node's state diverged from its cluster's: it votes, stores and serves \
               nothing until repaired (C19)";
    write_msg(stream, &RpcReply::Refused(why.into()), srv.identity.tag()).await?;
    if matches!(req, RpcRequest::Snapshot { .. }) {
        // The snapshot's bytes follow on the stream: close rather than read them.
        return Ok(Next::Close(Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "diverged",
        ))));
    }
    Ok(Next::Skip)
}

/// The answer to one admitted request (`Err`: close the connection, cleanly or with why).
async fn answer(
    stream: &mut PeerStream,
    peer: std::net::SocketAddr,
    srv: &PeerServer,
    req: RpcRequest,
    carried: &mut Option<Vote>,
) -> io::Result<Result<RpcReply, io::Result<()>>> {
    Ok(Ok(match req {
        RpcRequest::Forward {
            who,
            within_ms,
            frame,
        } => RpcReply::Forward(match srv.forwarded.get() {
            // C16: the peer is authenticated as a member (mutual TLS, checked at admission);
            // over plaintext only a cluster that checks nobody takes it.
            Some(ctx) => {
                answer_forwarded(ctx, srv.tls.is_some(), peer, &who, within_ms, &frame).await
            }
            None => Vec::new(),
        }),
        // C12 (fifth round): a node that lost its data takes no append below its floor (nor
        // before it knows it): not stored, not acknowledged, counted by no quorum.
        RpcRequest::Append(r) => match refuse_append(srv, peer, &r.vote) {
            Some(why) => RpcReply::Refused(why),
            None => RpcReply::Append(append(srv, r, carried).await),
        },
        // Issue 26: a node this membership left out asks in vain, and is told so.
        RpcRequest::Vote(r) if refuse_removed(srv, peer, r.vote.leader_id().voted_for()) => {
            RpcReply::Refused(
                srv.removal_of(r.vote.leader_id().voted_for().unwrap_or(0))
                    .unwrap_or_default(),
            )
        }
        RpcRequest::PreVote(r) if refuse_removed(srv, peer, Some(r.candidate)) => {
            RpcReply::Refused(srv.removal_of(r.candidate).unwrap_or_default())
        }
        RpcRequest::Vote(r) => RpcReply::Vote(answer_vote(srv, r).await),
        RpcRequest::PreVote(r) => RpcReply::PreVote(answer_pre_vote(srv, &r).await),
        RpcRequest::Snapshot { vote, meta, len } => match refuse_append(srv, peer, &vote) {
            Some(why) => {
                write_msg(stream, &RpcReply::Refused(why), srv.identity.tag()).await?;
                // The snapshot's bytes follow on the stream: close rather than read them.
                let e = io::Error::new(io::ErrorKind::PermissionDenied, "catching up");
                return Ok(Err(Err(e)));
            }
            None => receive_snapshot(stream, &srv.raft, &srv.dir, vote, meta, len).await?,
        },
        RpcRequest::Standing => RpcReply::Standing(crate::raft::standing::standing_of(&srv.raft)),
        RpcRequest::Digest { index } => RpcReply::Digest(answer_digest(srv, index)),
        RpcRequest::AppliedIds { from, to } => {
            RpcReply::AppliedIds(srv.digests.applied_ids(from, to))
        }
        // C15 (amended): the leader closes this connection on purpose; not a death.
        RpcRequest::Bye => return Ok(Err(Ok(()))),
        RpcRequest::Identify => RpcReply::Identity {
            id: srv.node_id,
            initialised: srv
                .raft
                .server_metrics()
                .borrow()
                .membership_config
                .membership()
                .nodes()
                .next()
                .is_some(),
            cluster: srv.identity.tag().map(|t| t.id),
        },
        RpcRequest::Diverged {
            index,
            majority,
            from,
            term,
        } => RpcReply::Ack(told_diverged(srv, index, &majority, from, term).await),
    }))
}

/// An append this node takes: through C12's check into Raft; notes the leader's vote the
/// connection carries (C15's early campaign) and the silences between a live leader's
/// accepted appends (C15 amended).
async fn append(
    srv: &PeerServer,
    r: openraft::raft::AppendEntriesRequest<crate::raft::types::TypeConfig>,
    carried: &mut Option<Vote>,
) -> Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
    crate::base::counters::append_received(!r.entries.is_empty());
    if r.vote.is_committed() {
        *carried = Some(r.vote);
    }
    let vote = r.vote;
    let answer = srv.amnesia.append(&srv.raft, r).await;
    if let (Ok(a), Some(leader)) = (&answer, vote.leader_id().voted_for()) {
        if vote.is_committed() && !matches!(a, AppendEntriesResponse::HigherVote(_)) {
            srv.elect.pace().heard(leader, vote, BootInstant::now());
        }
    }
    answer
}

/// C12 (fifth round): why an append or snapshot of `vote` is refused by this node, which
/// lost its data and has not caught up (`raft/amnesia.rs`); logged at most once a second.
fn refuse_append(srv: &PeerServer, peer: std::net::SocketAddr, vote: &Vote) -> Option<String> {
    let why = srv.amnesia.refuses_append(vote)?;
    crate::base::counters::raft_refused("catching_up");
    REFUSALS.note("raft append refused while catching up", || {
        format!(
            "node {}: raft peer {peer}: append refused: {why}",
            srv.node_id
        )
    });
    Some(why)
}

/// Issue 26: whether a vote or pre-vote of `who` is refused as from a removed node (this
/// membership leaves it out); logged once, then at most once a second with a count.
fn refuse_removed(srv: &PeerServer, peer: std::net::SocketAddr, who: Option<NodeId>) -> bool {
    let Some(why) = who.and_then(|w| srv.removal_of(w)) else {
        return false;
    };
    crate::base::counters::raft_refused("removed");
    REFUSALS.note("raft peer removed", || {
        format!("node {}: raft peer {peer}: refused, {why}", srv.node_id)
    });
    true
}

/// C19: this node's digest at the checkpoint `index`, for the primary's check.
fn answer_digest(srv: &PeerServer, index: u64) -> DigestAnswer {
    if let Some(d) = srv.diverged.what() {
        return DigestAnswer::Diverged(d.index);
    }
    let applied = srv.raft.metrics().borrow().last_applied.map(|l| l.index);
    srv.digests.answer(index, applied)
}

/// C19: the primary `from` (of `term`) says this node's digest at `index` is not the
/// history's `majority` (the field's name is older than Raft's order: C19, fifth round — the
/// history is the members that applied the higher entry where they first differ, `node/check.rs`). Taken only from the leader this node follows in that term, and only
/// when its own digest there indeed differs; then this node marks itself and stops its Raft
/// core (`raft/diverged.rs`).
async fn told_diverged(
    srv: &PeerServer,
    index: u64,
    majority: &crate::sm::digest::Digest,
    from: NodeId,
    term: u64,
) -> bool {
    if srv.diverged.is() {
        return true;
    }
    let m = srv.raft.metrics().borrow().clone();
    if m.current_leader != Some(from) || m.current_term != term {
        crate::log_warn!(
            "node {}: node {from} (term {term}) says this node diverged at index {index}, but it \
             is not the leader this node follows (node {:?}, term {}): ignored",
            srv.node_id,
            m.current_leader,
            m.current_term
        );
        return false;
    }
    match srv.digests.get(index) {
        Some(ours) if ours != *majority => {
            crate::raft::diverged::stop(&srv.diverged, &srv.raft, index, &ours, majority, from)
                .await
        }
        Some(_) => {
            crate::log_warn!(
                "node {}: node {from} says this node diverged at index {index}, but its digest \
                 there is the history's: ignored",
                srv.node_id
            );
            false
        }
        None => false,
    }
}

/// Every vote request a peer sends is answered here, and only here: the guards that may
/// refuse it (C11's [`VoteGuard`]) come first, then openraft.
async fn answer_vote(
    srv: &PeerServer,
    r: VoteRequest<NodeId>,
) -> Result<VoteResponse<NodeId>, RaftError<NodeId>> {
    // C21: a node whose disk failed promises nothing more.
    if crate::base::fault::faulted() || srv.guard.refuses() || srv.amnesia.refuses_vote(&r) {
        return Ok(refuse_vote(&srv.raft));
    }
    srv.raft.vote(r).await
}

/// A pre-vote is answered with the refusals of [`answer_vote`] (C11, C12), then the leader
/// stickiness and log check of [`crate::raft::elect::Elections::would_vote`]. The caller is a
/// member: the connection was admitted (mutual TLS), as for every other message.
async fn answer_pre_vote(srv: &PeerServer, r: &PreVoteRequest) -> bool {
    let as_vote = VoteRequest::new(Vote::new(r.term, r.candidate), r.last_log_id);
    let granted = !crate::base::fault::faulted()
        && !srv.guard.refuses()
        && !srv.amnesia.refuses_vote(&as_vote)
        && srv.elect.would_vote(r).await;
    crate::base::counters::pre_vote(granted);
    granted
}

/// A refusal carrying this node's vote, as openraft refuses during a lease. (No last log id:
/// openraft's log-state reader is not public, and a candidate only uses it to delay its next
/// campaign behind a longer log.)
fn refuse_vote(raft: &Raft) -> VoteResponse<NodeId> {
    let vote = raft.metrics().borrow().vote;
    VoteResponse::new(vote, None, false)
}
