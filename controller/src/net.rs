//! Raft RPC between controllers (C13): on the raft address, mutual TLS between members (or
//! plaintext on loopback / with `--insecure`), each message a 4-byte big-endian length then
//! the message in postcard (compact binary serde; never JSON). One connection per (peer,
//! openraft client), requests answered in order. Every call is bounded by openraft's TTL (and
//! a short connect timeout), so a dead or SIGSTOPped peer never stalls the leader: the call
//! fails, the connection is dropped and the next call reconnects.
//!
//! What a stranger costs (C13, S15): a connection is *admitted* once its TLS handshake has
//! completed with a certificate naming a configured member (plaintext: once the length prefix
//! of its first message has arrived, within the limit). At most [`MAX_UNADMITTED`]
//! connections wait for admission, for at most [`ADMISSION_TIMEOUT`]; a new one evicts the
//! oldest, so a slow-loris crowd cannot keep a member out. Every length is checked against the limit before anything is read, and a
//! message's buffer grows with the bytes that actually arrived — a 4-byte prefix claiming
//! 256 MiB costs nothing until 256 MiB are sent — and a frame that started must be complete
//! within [`FRAME_TIMEOUT`]. At most [`MAX_PEER_CONNECTIONS`] admitted connections.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{
    Fatal, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError,
    Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Semaphore};

use crate::tls::PeerTls;
use crate::types::{CtrlNode, NodeId, Raft, Snapshot, SnapshotMeta, TypeConfig, Vote};

/// Largest raft RPC accepted by default: [`max_rpc_bytes`] of the client's frame limit.
pub const MAX_RPC_BYTES: usize = 256 << 20;
/// Upper bound on connecting to a peer, whatever openraft's TTL.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Pause before retrying an unreachable peer (openraft's default is 500 ms): short, so that a
/// restarted node gets the log, and can vote sensibly, soon after it is back.
pub const UNREACHABLE_BACKOFF: Duration = Duration::from_millis(100);
/// A peer connection idle for this long is closed by the receiving side.
pub const RPC_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// A message that started arriving must be complete within this (slow-loris guard; an append
/// of 8 entries of 64 KiB takes about 4 s on a 1 Mbit/s link).
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(30);
/// A connection must be admitted (TLS handshake + member check, or in plaintext the length
/// prefix of its first message, checked against the limit) within this.
pub const ADMISSION_TIMEOUT: Duration = Duration::from_secs(3);
/// Connections waiting for admission at once; a new one evicts the oldest.
pub const MAX_UNADMITTED: usize = 32;
/// Admitted connections at once (members open a few each); more are closed at once.
pub const MAX_PEER_CONNECTIONS: usize = 256;
/// A read buffer grows by at most this much per read: memory follows the bytes that came.
const READ_STEP: usize = 64 << 10;

/// The largest raft message a node accepts, sized from the largest client frame it accepts
/// (`client_max`): an AppendEntries carries at most [`crate::batch::MAX_PAYLOAD_ENTRIES`]
/// entries, each at most one client frame (a batch of small writes is bounded by
/// [`crate::batch::MAX_BATCH_BYTES`]), plus the envelope.
pub fn max_rpc_bytes(client_max: usize) -> usize {
    let per_entry = client_max.max(crate::batch::MAX_BATCH_BYTES) + (64 << 10);
    (crate::batch::MAX_PAYLOAD_ENTRIES as usize * per_entry + (1 << 20)).min(MAX_RPC_BYTES)
}

#[derive(Serialize, Deserialize)]
enum RpcRequest {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    /// Followed on the stream by `len` raw bytes: the snapshot file (see [`send_snapshot`]).
    Snapshot {
        vote: Vote,
        meta: SnapshotMeta,
        len: u64,
    },
    /// C16: a client's request a standby forwards to the primary (F28): the identity the
    /// standby authenticated (`admin`, `scheduler`, `worker-<host>`, `user-<name>`,
    /// `anonymous`), how long the standby waits for the answer, and the request as one
    /// framed client-protocol message (its client id and request id untouched).
    Forward {
        who: String,
        within_ms: u32,
        frame: Vec<u8>,
    },
}

#[derive(Serialize, Deserialize)]
enum RpcReply {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<SnapshotResponse<NodeId>, Fatal<NodeId>>),
    /// C16: the primary's reply as one framed client-protocol message; empty: not taken
    /// (forwarding refused here: the standby answers the client as it would have).
    Forward(Vec<u8>),
}

/// A peer connection: plain TCP or TLS over it.
pub trait PeerIo: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> PeerIo for T {}
type PeerStream = Box<dyn PeerIo>;

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// One message: its length (4 bytes, big-endian), then its postcard encoding.
async fn write_msg<W: AsyncWrite + Unpin + ?Sized, T: Serialize>(
    w: &mut W,
    msg: &T,
) -> io::Result<()> {
    let mut buf = vec![0u8; 4];
    let mut buf = postcard::to_extend(msg, std::mem::take(&mut buf)).map_err(io::Error::other)?;
    let len = u32::try_from(buf.len() - 4).map_err(|_| io::Error::other("rpc too large"))?;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    w.write_all(&buf).await?;
    w.flush().await
}

/// Reads one message of at most `limit` bytes. The length is checked before anything else is
/// read, and the buffer grows by at most [`READ_STEP`] per read, so memory follows the bytes
/// that arrived, never the length claimed. Once the prefix arrived the rest must come within
/// [`FRAME_TIMEOUT`].
async fn read_msg<R: AsyncRead + Unpin + ?Sized, T: DeserializeOwned>(
    r: &mut R,
    limit: usize,
) -> io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    read_rest(r, len, limit).await
}

/// The rest of a message whose length prefix `len` was read.
async fn read_rest<R: AsyncRead + Unpin + ?Sized, T: DeserializeOwned>(
    r: &mut R,
    len: [u8; 4],
    limit: usize,
) -> io::Result<T> {
    let body = tokio::time::timeout(FRAME_TIMEOUT, read_body(r, len, limit))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "rpc frame timed out"))??;
    postcard::from_bytes(&body).map_err(|e| invalid(&format!("bad rpc: {e}")))
}

async fn read_body<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    len: [u8; 4],
    limit: usize,
) -> io::Result<Vec<u8>> {
    let len = u32::from_be_bytes(len) as usize;
    if len > limit {
        return Err(invalid(&format!(
            "rpc of {len} bytes over the limit {limit}"
        )));
    }
    let mut body = Vec::new();
    while body.len() < len {
        let at = body.len();
        let step = (len - at).min(READ_STEP);
        body.resize(at + step, 0);
        let n = r.read(&mut body[at..]).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "rpc cut short",
            ));
        }
        body.truncate(at + n);
    }
    Ok(body)
}

// ---------------------------------------------------------------------------------------
// Client side

/// An instant on `CLOCK_BOOTTIME`: unlike `CLOCK_MONOTONIC` (std and tokio `Instant`) it
/// keeps counting while the host is suspended, so a lease measured with it expires during a
/// suspend as it does for the rest of the cluster (C11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct BootInstant(Duration);

impl BootInstant {
    pub fn now() -> BootInstant {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime(2) writes one timespec we own; CLOCK_BOOTTIME exists on every
        // Linux since 2.6.39, so it cannot fail with valid arguments.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME)");
        BootInstant(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: BootInstant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    pub fn add(self, d: Duration) -> BootInstant {
        BootInstant(self.0 + d)
    }
}

/// Whether `ok` holds for a majority of every config of a (possibly joint) membership — the
/// quorum rule openraft applies to its `get_joint_config()` (its `QuorumSet` is not public).
/// Counting over the union of voter ids instead would accept, during a joint change, a
/// majority of the union that is a minority of one config.
pub fn joint_quorum(configs: &[BTreeSet<NodeId>], ok: impl Fn(NodeId) -> bool) -> bool {
    !configs.is_empty()
        && configs
            .iter()
            .all(|c| 2 * c.iter().filter(|&&id| ok(id)).count() > c.len())
}

/// One follower's acceptance of this node's appends.
#[derive(Debug, Clone, Copy)]
struct Ack {
    vote: Vote,
    /// When the newest accepted append was sent.
    sent: BootInstant,
    /// When an answer last came.
    heard: BootInstant,
}

#[derive(Default)]
struct LeaseState {
    acks: HashMap<NodeId, Ack>,
    /// The committed vote this node last sent appends with, and when it first did.
    leading: Option<(Vote, BootInstant)>,
}

/// The leader's record of which followers accepted its appends, on `CLOCK_BOOTTIME`.
///
/// Lease reads (C3, C11): an append is stamped with the instant it was SENT. A follower that
/// accepts an append from a committed vote refuses to vote for anyone else for openraft's
/// leader lease (= election-max) after it received it (and, restarted, for election-max after
/// boot: [`VoteGuard`]); so while a quorum of the membership has accepted appends sent within a
/// window well inside that lease, no other primary can exist and the leader may answer reads
/// from its applied state without a read-index round.
///
/// Liveness (C10): a leader that has led for longer than the election timeout and has heard
/// from no quorum within it is cut off — the rest of the cluster may be electing another.
#[derive(Default)]
pub struct LeaseClock {
    state: std::sync::Mutex<LeaseState>,
}

impl LeaseClock {
    fn lock(&self) -> std::sync::MutexGuard<'_, LeaseState> {
        self.state.lock().expect("lease clock")
    }

    /// An append of `vote` is about to be sent at `now`.
    fn sending(&self, vote: Vote, now: BootInstant) {
        if !vote.is_committed() {
            return;
        }
        let mut st = self.lock();
        if st.leading.map(|(v, _)| v) != Some(vote) {
            st.leading = Some((vote, now));
        }
    }

    /// `target` accepted an append of `vote` sent at `sent`; its answer came at `heard`.
    fn record(&self, target: NodeId, vote: Vote, sent: BootInstant, heard: BootInstant) {
        let mut st = self.lock();
        let e = st.acks.entry(target).or_insert(Ack { vote, sent, heard });
        if e.vote != vote {
            *e = Ack { vote, sent, heard };
        } else {
            e.sent = e.sent.max(sent);
            e.heard = e.heard.max(heard);
        }
    }

    /// C3: whether a quorum of `configs` (counting `me`) accepted appends of `vote` sent less
    /// than `window` before `now`.
    pub fn lease_holds(
        &self,
        vote: &Vote,
        configs: &[BTreeSet<NodeId>],
        me: NodeId,
        window: Duration,
        now: BootInstant,
    ) -> bool {
        let st = self.lock();
        joint_quorum(configs, |id| {
            id == me
                || st
                    .acks
                    .get(&id)
                    .is_some_and(|a| a.vote == *vote && now.since(a.sent) < window)
        })
    }

    /// Whether a quorum of `configs` (counting `me`) answered appends of `vote` less than
    /// `window` before `now`.
    pub fn quorum_heard(
        &self,
        vote: &Vote,
        configs: &[BTreeSet<NodeId>],
        me: NodeId,
        window: Duration,
        now: BootInstant,
    ) -> bool {
        let st = self.lock();
        Self::heard_in(&st, vote, configs, me, window, now)
    }

    fn heard_in(
        st: &LeaseState,
        vote: &Vote,
        configs: &[BTreeSet<NodeId>],
        me: NodeId,
        window: Duration,
        now: BootInstant,
    ) -> bool {
        joint_quorum(configs, |id| {
            id == me
                || st
                    .acks
                    .get(&id)
                    .is_some_and(|a| a.vote == *vote && now.since(a.heard) < window)
        })
    }

    /// C10: whether this node, leading with `vote` for longer than `window`, has heard from
    /// no quorum of `configs` (counting `me`) within `window` before `now`. A leader that has
    /// not sent anything yet for `vote` is not cut off (it was just elected).
    pub fn cut_off(
        &self,
        vote: &Vote,
        configs: &[BTreeSet<NodeId>],
        me: NodeId,
        window: Duration,
        now: BootInstant,
    ) -> bool {
        let st = self.lock();
        match st.leading {
            Some((v, since)) if v == *vote && now.since(since) >= window => {}
            _ => return false,
        }
        !Self::heard_in(&st, vote, configs, me, window, now)
    }
}

/// C11: a restarted node refuses every vote for election-max after it booted, whatever vote it
/// had stored, so that a leader's lease resting on this node's ack from just before a crash
/// cannot overlap a leader elected with this node's vote. (openraft 0.9 also stamps a stored
/// committed vote with the boot time; this guard does not depend on that detail.)
#[derive(Debug, Clone, Copy)]
pub struct VoteGuard {
    until: BootInstant,
}

impl VoteGuard {
    pub fn from_boot(lease: Duration) -> VoteGuard {
        VoteGuard {
            until: BootInstant::now().add(lease),
        }
    }

    pub fn refuses(&self) -> bool {
        BootInstant::now() < self.until
    }
}

/// Creates one [`PeerClient`] per target for openraft.
pub struct NetFactory {
    pub lease: std::sync::Arc<LeaseClock>,
    /// Mutual TLS to peers; `None`: plaintext (loopback, or `--insecure`).
    pub tls: Option<PeerTls>,
    /// Largest reply accepted from a peer ([`max_rpc_bytes`]).
    pub max_rpc: usize,
}

impl RaftNetworkFactory<TypeConfig> for NetFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &CtrlNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.raft.clone(),
            conn: None,
            lease: self.lease.clone(),
            tls: self.tls.clone(),
            max_rpc: self.max_rpc,
        }
    }
}

pub struct PeerClient {
    target: NodeId,
    addr: String,
    conn: Option<PeerStream>,
    lease: std::sync::Arc<LeaseClock>,
    tls: Option<PeerTls>,
    max_rpc: usize,
}

/// Why a call failed: the peer could not be reached at all, or the exchange broke.
enum CallError {
    Unreachable(io::Error),
    Network(io::Error),
}

impl PeerClient {
    async fn call(&mut self, req: &RpcRequest, ttl: Duration) -> Result<RpcReply, CallError> {
        let res = tokio::time::timeout(ttl, self.exchange(req, ttl)).await;
        let res = match res {
            Ok(r) => r,
            Err(_) => Err(CallError::Network(io::Error::new(
                io::ErrorKind::TimedOut,
                "rpc timed out",
            ))),
        };
        if res.is_err() {
            // The stream may hold half a reply: never reuse it.
            self.conn = None;
        }
        res
    }

    async fn exchange(&mut self, req: &RpcRequest, ttl: Duration) -> Result<RpcReply, CallError> {
        self.exchange_send_only(req, ttl).await?;
        let conn = self.conn.as_mut().expect("connected by exchange_send_only");
        read_msg(conn, self.max_rpc)
            .await
            .map_err(CallError::Network)
    }

    /// Connects (TCP, then the TLS handshake verifying that the peer is member `target`)
    /// unless connected already.
    async fn connect(&mut self, ttl: Duration) -> Result<(), CallError> {
        if self.conn.is_some() {
            return Ok(());
        }
        let unreachable = |what: &str| {
            CallError::Unreachable(io::Error::new(io::ErrorKind::TimedOut, what.to_string()))
        };
        let bound = ttl.min(CONNECT_TIMEOUT);
        let s = match tokio::time::timeout(bound, TcpStream::connect(&self.addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(CallError::Unreachable(e)),
            Err(_) => return Err(unreachable("connect timed out")),
        };
        let _ = s.set_nodelay(true);
        let stream: PeerStream = match &self.tls {
            None => Box::new(s),
            Some(t) => {
                let name = PeerTls::server_name(self.target);
                match tokio::time::timeout(bound, t.connector.connect(name, s)).await {
                    Ok(Ok(s)) => Box::new(s),
                    Ok(Err(e)) => return Err(CallError::Unreachable(e)),
                    Err(_) => return Err(unreachable("TLS handshake timed out")),
                }
            }
        };
        self.conn = Some(stream);
        Ok(())
    }
}

impl PeerClient {
    /// A snapshot RPC: the header message, then the file's bytes as they are read, then the
    /// reply. Neither side holds the snapshot in memory (P12: 10^6 jobs are ~100 MB).
    async fn send_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        ttl: Duration,
    ) -> Result<RpcReply, CallError> {
        let meta = snapshot.meta.clone();
        let file = snapshot.snapshot.file;
        let max_rpc = self.max_rpc;
        let res = tokio::time::timeout(ttl, async {
            let len = file.metadata().map_err(CallError::Network)?.len();
            let req = RpcRequest::Snapshot { vote, meta, len };
            // Connects if needed; the header goes first, alone.
            self.exchange_send_only(&req, ttl).await?;
            let conn = self.conn.as_mut().expect("connected by exchange_send_only");
            let mut file = tokio::fs::File::from_std(file);
            let copied = tokio::io::copy(&mut (&mut file).take(len), conn)
                .await
                .map_err(CallError::Network)?;
            if copied != len {
                return Err(CallError::Network(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "snapshot file shrank while sent",
                )));
            }
            conn.flush().await.map_err(CallError::Network)?;
            read_msg(conn, max_rpc).await.map_err(CallError::Network)
        })
        .await;
        let res = res.unwrap_or_else(|_| {
            Err(CallError::Network(io::Error::new(
                io::ErrorKind::TimedOut,
                "snapshot rpc timed out",
            )))
        });
        if res.is_err() {
            self.conn = None;
        }
        res
    }

    /// Connects if needed and writes `req`, without reading a reply.
    async fn exchange_send_only(
        &mut self,
        req: &RpcRequest,
        ttl: Duration,
    ) -> Result<(), CallError> {
        self.connect(ttl).await?;
        let conn = self.conn.as_mut().expect("connected above");
        write_msg(conn, req).await.map_err(CallError::Network)
    }
}

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
    let snap = crate::store::SnapFile::receive_into(dir)?;
    let path = snap.path.clone();
    let mut file = tokio::fs::File::from_std(snap.file);
    let copied = tokio::io::copy(&mut (&mut *stream).take(len), &mut file).await;
    let ok = matches!(copied, Ok(n) if n == len);
    if !ok {
        let _ = std::fs::remove_file(&path);
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "snapshot cut short",
        ));
    }
    file.flush().await?;
    let snapshot = Snapshot {
        meta,
        snapshot: Box::new(crate::store::SnapFile {
            path,
            file: file.into_std().await,
        }),
    };
    Ok(RpcReply::Snapshot(
        raft.install_full_snapshot(vote, snapshot).await,
    ))
}

fn rpc_err<E: std::error::Error>(e: CallError) -> RPCError<NodeId, CtrlNode, E> {
    match e {
        CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
        CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
    }
}

fn unexpected() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "unexpected rpc reply")
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, CtrlNode, RaftError<NodeId>>> {
        let (vote, sent) = (rpc.vote, BootInstant::now());
        self.lease.sending(vote, sent);
        match self
            .call(&RpcRequest::Append(rpc), option.hard_ttl())
            .await
            .map_err(rpc_err)?
        {
            RpcReply::Append(Ok(r)) => {
                // Every answer but HigherVote means the follower took our vote (and its lease).
                if vote.is_committed() && !matches!(r, AppendEntriesResponse::HigherVote(_)) {
                    self.lease
                        .record(self.target, vote, sent, BootInstant::now());
                }
                Ok(r)
            }
            RpcReply::Append(Err(e)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            _ => Err(RPCError::Network(NetworkError::new(&unexpected()))),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, CtrlNode, RaftError<NodeId>>> {
        match self
            .call(&RpcRequest::Vote(rpc), option.hard_ttl())
            .await
            .map_err(rpc_err)?
        {
            RpcReply::Vote(Ok(r)) => Ok(r),
            RpcReply::Vote(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            _ => Err(RPCError::Network(NetworkError::new(&unexpected()))),
        }
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(UNREACHABLE_BACKOFF))
    }

    /// The whole snapshot file in one RPC (`generic-snapshot-data`), streamed: see
    /// [`PeerClient::send_snapshot`].
    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>> {
        let reply = tokio::select! {
            closed = cancel => return Err(StreamingError::Closed(closed)),
            r = self.send_snapshot(vote, snapshot, option.hard_ttl()) => r,
        };
        match reply {
            Ok(RpcReply::Snapshot(Ok(r))) => Ok(r),
            Ok(RpcReply::Snapshot(Err(e))) => Err(StreamingError::RemoteError(RemoteError::new(
                self.target,
                e,
            ))),
            Ok(_) => Err(StreamingError::Network(NetworkError::new(&unexpected()))),
            Err(CallError::Unreachable(e)) => {
                Err(StreamingError::Unreachable(Unreachable::new(&e)))
            }
            Err(CallError::Network(e)) => Err(StreamingError::Network(NetworkError::new(&e))),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Forwarding (C16): a standby's connections to the primary's raft port for client requests

/// Forwarded requests in flight at once from one standby; more are answered as before (not
/// primary + hint), so a crowd cannot take the primary's peer connections.
pub const MAX_FORWARDS: usize = 32;
/// Idle forwarding connections kept per primary.
const MAX_IDLE_FORWARD_CONNS: usize = 8;
/// An idle forwarding connection older than this is not reused (the primary closes idle peer
/// connections after [`RPC_IDLE_TIMEOUT`]).
const FORWARD_CONN_IDLE: Duration = Duration::from_secs(20);

/// What became of a forwarded request.
pub enum Forwarded {
    /// The primary's reply, one framed client-protocol message.
    Reply(Vec<u8>),
    /// Nothing left for the primary (unreachable, or too many forwards): not applied.
    NotSent,
    /// The primary did not take it (its answer was empty): not applied.
    Refused,
    /// Sent, and no answer in time: a write may have been applied.
    Lost,
}

/// A kept forwarding connection and when it was last used.
type IdleConn = (std::time::Instant, PeerStream);

/// A standby's forwarding client: dials the primary's raft port (mutual TLS, verifying that
/// the peer is the member it dials), keeps a few idle connections per primary.
pub struct Forwarder {
    tls: Option<PeerTls>,
    max_rpc: usize,
    idle: Mutex<HashMap<(NodeId, String), Vec<IdleConn>>>,
    slots: Semaphore,
}

impl Forwarder {
    pub fn new(tls: Option<PeerTls>, max_rpc: usize) -> Forwarder {
        Forwarder {
            tls,
            max_rpc,
            idle: Mutex::new(HashMap::new()),
            slots: Semaphore::new(MAX_FORWARDS),
        }
    }

    /// Whether the raft port authenticates members (mutual TLS).
    pub fn authenticated(&self) -> bool {
        self.tls.is_some()
    }

    fn take_idle(&self, key: &(NodeId, String)) -> Option<PeerStream> {
        let mut idle = self.idle.lock().expect("forward pool");
        let v = idle.get_mut(key)?;
        while let Some((at, s)) = v.pop() {
            if at.elapsed() < FORWARD_CONN_IDLE {
                return Some(s);
            }
        }
        None
    }

    fn put_idle(&self, key: (NodeId, String), s: PeerStream) {
        let mut idle = self.idle.lock().expect("forward pool");
        let v = idle.entry(key).or_default();
        if v.len() < MAX_IDLE_FORWARD_CONNS {
            v.push((std::time::Instant::now(), s));
        }
    }

    async fn dial(&self, target: NodeId, addr: &str, bound: Duration) -> io::Result<PeerStream> {
        let timed_out = |what: &str| io::Error::new(io::ErrorKind::TimedOut, what.to_string());
        let bound = bound.min(CONNECT_TIMEOUT);
        let s = tokio::time::timeout(bound, TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out("connect timed out"))??;
        let _ = s.set_nodelay(true);
        Ok(match &self.tls {
            None => Box::new(s),
            Some(t) => {
                let name = PeerTls::server_name(target);
                Box::new(
                    tokio::time::timeout(bound, t.connector.connect(name, s))
                        .await
                        .map_err(|_| timed_out("TLS handshake timed out"))??,
                )
            }
        })
    }

    /// Forwards `frame` for `who` to member `target` at raft address `addr`, waiting at most
    /// `within` in all. A kept connection that fails before any answer is retried once on a
    /// new one (the primary's exactly-once table makes a second send of a write harmless).
    pub async fn forward(
        &self,
        target: NodeId,
        addr: &str,
        who: String,
        within: Duration,
        frame: Vec<u8>,
    ) -> Forwarded {
        let Ok(_slot) = self.slots.try_acquire() else {
            return Forwarded::NotSent;
        };
        let until = tokio::time::Instant::now() + within;
        let key = (target, addr.to_string());
        let mut req = RpcRequest::Forward {
            who,
            within_ms: 0,
            frame,
        };
        let mut sent = false;
        for kept in [true, false] {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break;
            }
            let conn = if kept {
                match self.take_idle(&key) {
                    Some(c) => c,
                    None => continue,
                }
            } else {
                match self.dial(target, addr, left).await {
                    Ok(c) => c,
                    Err(_) => break,
                }
            };
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if let RpcRequest::Forward { within_ms, .. } = &mut req {
                *within_ms = left.as_millis().clamp(1, u32::MAX as u128) as u32;
            }
            let mut conn = conn;
            let res = tokio::time::timeout_at(until, async {
                write_msg(&mut conn, &req).await.map_err(|e| (false, e))?;
                read_msg::<_, RpcReply>(&mut conn, self.max_rpc)
                    .await
                    .map_err(|e| (true, e))
            })
            .await;
            match res {
                Ok(Ok(RpcReply::Forward(reply))) => {
                    self.put_idle(key, conn);
                    return if reply.is_empty() {
                        Forwarded::Refused
                    } else {
                        Forwarded::Reply(reply)
                    };
                }
                Ok(Ok(_)) => return Forwarded::Lost,
                Ok(Err((_, _))) => sent = true,
                Err(_) => return Forwarded::Lost,
            }
        }
        if sent {
            Forwarded::Lost
        } else {
            Forwarded::NotSent
        }
    }
}

// ---------------------------------------------------------------------------------------
// Server side

/// What the raft listener needs, shared by every peer connection.
pub struct PeerServer {
    pub raft: Raft,
    pub node_id: NodeId,
    pub guard: VoteGuard,
    /// C12: a node that lost its data votes and appends carefully until caught up.
    pub amnesia: Arc<crate::amnesia::Amnesia>,
    /// C15: told when a connection that carried a leader's appends breaks.
    pub elect: Arc<crate::elect::Elections>,
    pub dir: std::path::PathBuf,
    /// Mutual TLS; `None`: plaintext.
    pub tls: Option<PeerTls>,
    /// The configured members (`--cluster`); the current membership counts too.
    pub spec_members: Vec<NodeId>,
    /// Largest message accepted ([`max_rpc_bytes`]).
    pub max_rpc: usize,
    /// C16: the client protocol's context, once it exists: forwarded requests are served
    /// through it.
    pub forwarded: Arc<std::sync::OnceLock<Arc<crate::server::Ctx>>>,
}

impl PeerServer {
    /// Every node a peer certificate may name: the current membership's nodes (voters and
    /// learners); the configured members (`--cluster`) only while this node stores no
    /// membership yet (a new cluster, or `run --join` waiting to be added). A node removed
    /// online is no longer admitted, whatever `--cluster` said at start.
    fn members(&self) -> Vec<NodeId> {
        let m = self
            .raft
            .server_metrics()
            .borrow()
            .membership_config
            .clone();
        let mut ids: Vec<NodeId> = m.membership().nodes().map(|(id, _)| *id).collect();
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
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("node {node_id}: raft accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (srv, waiting, admitted) = (srv.clone(), waiting.clone(), admitted.clone());
        tokio::spawn(async move {
            let (ticket, evicted) = waiting.lock().expect("waiting").enter();
            let res = serve_peer(stream, &srv, evicted, || {
                waiting.lock().expect("waiting").leave(ticket);
                admitted.clone().try_acquire_owned().ok()
            })
            .await;
            waiting.lock().expect("waiting").leave(ticket);
            if let Err(e) = res {
                if e.kind() != io::ErrorKind::UnexpectedEof {
                    eprintln!("node {node_id}: raft peer {peer}: {e}");
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
    srv: &PeerServer,
    evicted: oneshot::Receiver<()>,
    admit: impl FnOnce() -> Option<tokio::sync::OwnedSemaphorePermit>,
) -> io::Result<()> {
    let refused = |why: String| io::Error::new(io::ErrorKind::PermissionDenied, why);
    let admission = async {
        let mut stream: PeerStream = match &srv.tls {
            None => Box::new(tcp),
            Some(t) => {
                let s = t.acceptor.accept(tcp).await?;
                let cert = s.get_ref().1.peer_certificates().and_then(|c| c.first());
                let members = srv.members();
                match cert.and_then(|c| crate::tls::member_of(c, &members)) {
                    Some(_) => Box::new(s),
                    None => {
                        let names = cert.map(|c| crate::tls::cert_names(c)).unwrap_or_default();
                        return Err(refused(format!(
                            "refused: certificate {names:?} names no member of {members:?}"
                        )));
                    }
                }
            }
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
    // breaks, the leader may be gone (see `crate::elect`).
    let mut carried: Option<Vote> = None;
    let res = serve_rpcs(&mut stream, first, srv, &mut carried).await;
    if let (Err(_), Some(v)) = (&res, carried) {
        srv.elect.leader_link_closed(v);
    }
    res
}

/// The RPCs of an admitted connection, in order; `first`: the length prefix of the first
/// message if it was read during admission. Notes in `carried` the committed vote of the
/// appends it carries.
async fn serve_rpcs(
    stream: &mut PeerStream,
    mut first: Option<[u8; 4]>,
    srv: &PeerServer,
    carried: &mut Option<Vote>,
) -> io::Result<()> {
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
        let req: RpcRequest = read_rest(stream, len, srv.max_rpc).await?;
        let reply = match req {
            RpcRequest::Forward {
                who,
                within_ms,
                frame,
            } => RpcReply::Forward(match srv.forwarded.get() {
                // C16: the peer is authenticated as a member (mutual TLS, checked at
                // admission); over plaintext only a cluster that checks nobody takes it.
                Some(ctx) => {
                    crate::server::answer_forwarded(ctx, srv.tls.is_some(), &who, within_ms, &frame)
                        .await
                }
                None => Vec::new(),
            }),
            RpcRequest::Append(r) => {
                if r.vote.is_committed() {
                    *carried = Some(r.vote);
                }
                RpcReply::Append(srv.amnesia.append(&srv.raft, r).await)
            }
            RpcRequest::Vote(r) => RpcReply::Vote(answer_vote(srv, r).await),
            RpcRequest::Snapshot { vote, meta, len } => {
                receive_snapshot(stream, &srv.raft, &srv.dir, vote, meta, len).await?
            }
        };
        write_msg(stream, &reply).await?;
    }
}

/// Every vote request a peer sends is answered here, and only here: the guards that may
/// refuse it (C11's [`VoteGuard`]) come first, then openraft.
async fn answer_vote(
    srv: &PeerServer,
    r: VoteRequest<NodeId>,
) -> Result<VoteResponse<NodeId>, RaftError<NodeId>> {
    if srv.guard.refuses() || srv.amnesia.refuses_vote(&r) {
        return Ok(refuse_vote(&srv.raft));
    }
    srv.raft.vote(r).await
}

/// A refusal carrying this node's vote, as openraft refuses during a lease. (No last log id:
/// openraft's log-state reader is not public, and a candidate only uses it to delay its next
/// campaign behind a longer log.)
fn refuse_vote(raft: &Raft) -> VoteResponse<NodeId> {
    let vote = raft.metrics().borrow().vote;
    VoteResponse::new(vote, None, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(term: u64, leader: NodeId) -> Vote {
        let mut v = Vote::new(term, leader);
        v.commit();
        v
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn set(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn lease_counts_only_fresh_acks_of_the_same_vote() {
        let clock = LeaseClock::default();
        let v = committed(3, 1);
        let members = [set(&[1, 2, 3])];
        let t0 = BootInstant(Duration::from_secs(100));
        let now = t0.add(ms(200));
        let holds = |c: &LeaseClock, v: &Vote| c.lease_holds(v, &members, 1, ms(75), now);
        clock.record(3, v, t0, t0); // sent 200 ms ago: too old
        assert!(!holds(&clock, &v));
        clock.record(2, v, now, now);
        assert!(holds(&clock, &v), "me + node 2 of 3");
        // An ack of another (older) vote does not count for this one.
        let mut c2 = LeaseClock::default();
        c2.record(2, committed(2, 1), now, now);
        assert!(!holds(&c2, &v));
        // The newest send wins; a late reply to an older send does not move the clock back.
        c2 = LeaseClock::default();
        c2.record(2, v, now, now);
        c2.record(2, v, t0, now);
        assert!(holds(&c2, &v));
        assert!(!holds(&c2, &committed(4, 2)));
    }

    /// C11: acks stamped before a suspend of the leader's host are as old as the suspend
    /// (CLOCK_BOOTTIME keeps counting), so the lease is gone when the host wakes up.
    #[test]
    fn lease_is_gone_after_a_suspend() {
        let clock = LeaseClock::default();
        let v = committed(3, 1);
        let members = [set(&[1, 2, 3])];
        let sent = BootInstant::now();
        clock.record(2, v, sent, sent);
        assert!(clock.lease_holds(&v, &members, 1, ms(75), sent.add(ms(10))));
        let after_suspend = sent.add(Duration::from_secs(10));
        assert!(!clock.lease_holds(&v, &members, 1, ms(75), after_suspend));
    }

    #[test]
    fn boot_instant_is_boottime() {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: as in BootInstant::now.
        assert_eq!(
            unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) },
            0
        );
        let boot = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        let now = BootInstant::now().0;
        assert!(now >= boot && now - boot < Duration::from_secs(1));
    }

    /// C11: joint membership needs a majority of EACH config; the union would be wrong.
    #[test]
    fn joint_quorum_needs_a_majority_of_every_config() {
        let uniform = [set(&[1, 2, 3])];
        assert!(joint_quorum(&uniform, |id| id == 1 || id == 2));
        assert!(!joint_quorum(&uniform, |id| id == 1));
        // {1,2,3} -> {3,4,5}: 1, 2 and 4 are a majority of the union of 5, but only one of
        // {3,4,5}.
        let joint = [set(&[1, 2, 3]), set(&[3, 4, 5])];
        assert!(!joint_quorum(&joint, |id| [1, 2, 4].contains(&id)));
        assert!(joint_quorum(&joint, |id| [1, 3, 4].contains(&id)));
        assert!(!joint_quorum(&[], |_| true));
        // Through the lease clock: me = 1, acks from 2 and 4.
        let clock = LeaseClock::default();
        let v = committed(7, 1);
        let now = BootInstant(Duration::from_secs(50));
        clock.record(2, v, now, now);
        clock.record(4, v, now, now);
        assert!(!clock.lease_holds(&v, &joint, 1, ms(75), now));
        clock.record(3, v, now, now);
        assert!(clock.lease_holds(&v, &joint, 1, ms(75), now));
        // A single-node cluster leads alone.
        assert!(clock.lease_holds(&v, &[set(&[1])], 1, ms(75), now));
    }

    /// C10: cut off once no quorum has answered for the window, after leading that long.
    #[test]
    fn cut_off_after_a_window_without_a_quorum() {
        let clock = LeaseClock::default();
        let v = committed(5, 1);
        let members = [set(&[1, 2, 3])];
        let w = ms(300);
        let t0 = BootInstant(Duration::from_secs(1000));
        let cut = |now: BootInstant| clock.cut_off(&v, &members, 1, w, now);
        // Nothing sent yet for this vote: just elected, not cut off.
        assert!(!cut(t0.add(ms(5000))));
        clock.sending(v, t0);
        assert!(!cut(t0.add(ms(100))), "leading for less than the window");
        assert!(cut(t0.add(ms(300))), "led 300 ms, nobody answered");
        clock.record(3, v, t0.add(ms(250)), t0.add(ms(290)));
        assert!(!cut(t0.add(ms(500))), "node 3 answered 210 ms ago");
        assert!(cut(t0.add(ms(590))));
        // Answers to another vote do not count; a new vote restarts the grace period.
        let v2 = committed(6, 1);
        clock.record(2, committed(4, 1), t0.add(ms(580)), t0.add(ms(585)));
        assert!(cut(t0.add(ms(600))));
        clock.sending(v2, t0.add(ms(600)));
        assert!(!clock.cut_off(&v2, &members, 1, w, t0.add(ms(700))));
        assert!(clock.cut_off(&v2, &members, 1, w, t0.add(ms(900))));
        // Uncommitted votes are never "leading".
        clock.sending(Vote::new(9, 1), t0.add(ms(900)));
        assert!(clock.cut_off(&v2, &members, 1, w, t0.add(ms(950))));
        // quorum_heard: the same answers, any window.
        assert!(clock.quorum_heard(&v, &members, 1, ms(100), t0.add(ms(350))));
        assert!(!clock.quorum_heard(&v, &members, 1, ms(50), t0.add(ms(350))));
        // A single-node cluster is never cut off.
        assert!(!clock.cut_off(&v2, &[set(&[1])], 1, w, t0.add(ms(5000))));
    }
}
