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

use crate::clock::BootInstant;
use crate::ids::{CtrlNode, NodeId, SnapshotMeta, Vote};
use crate::tls::PeerTls;
use crate::types::{Raft, Snapshot, TypeConfig};

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
    /// C15, P14: would the peer vote for this candidate now? ([`crate::elect`]: pre-vote.)
    PreVote(PreVoteRequest),
}

/// Pre-vote (C15, Raft thesis §9.6): a node asks this before raising its term. Nothing
/// changes on the peer that answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreVoteRequest {
    /// The term the candidate would campaign in (its own term + 1).
    pub term: u64,
    pub candidate: NodeId,
    /// The candidate's last log id.
    pub last_log_id: Option<openraft::LogId<NodeId>>,
}

/// [`RpcRequest`] borrowed, for sending: the same encoding (same variants, same order).
#[derive(Serialize)]
enum RpcRequestRef<'a> {
    Append(&'a AppendEntriesRequest<TypeConfig>),
    Vote(&'a VoteRequest<NodeId>),
}

#[derive(Serialize, Deserialize)]
enum RpcReply {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<SnapshotResponse<NodeId>, Fatal<NodeId>>),
    /// C16: the primary's reply as one framed client-protocol message; empty: not taken
    /// (forwarding refused here: the standby answers the client as it would have).
    Forward(Vec<u8>),
    /// Whether the peer would grant the vote of a [`PreVoteRequest`].
    PreVote(bool),
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
    /// What each peer's link was found to carry ([`AppendBudget`]), kept across the clients
    /// openraft makes per term: a new leader does not start by flooding a slow link.
    pub budgets: Arc<Mutex<HashMap<NodeId, usize>>>,
}

impl RaftNetworkFactory<TypeConfig> for NetFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &CtrlNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.raft.clone(),
            link: None,
            connecting: None,
            budget: AppendBudget::new(self.max_rpc, target, self.budgets.clone()),
            lease: self.lease.clone(),
            tls: self.tls.clone(),
            max_rpc: self.max_rpc,
        }
    }
}

/// Requests written on a link whose replies have not come; one more resets the link (the
/// peer is not answering: blackholed, stopped).
const MAX_OUTSTANDING: usize = 8;
/// Bound on a TLS handshake with a peer, done in the background (not within openraft's TTL of
/// one heartbeat interval: a handshake's certificates take ≈ 30 ms alone on a 1 Mbit/s link).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// The smallest append budget: one entry always goes, whatever its size.
/// An append budget to a peer not measured yet: about 65 ms on a 1 Mbit/s link; doubled by
/// each fast answer, it reaches megabytes within a dozen appends on a fast one.
const INITIAL_BUDGET: usize = 8 << 10;
const MIN_BUDGET: usize = 1024;

/// C15, P14: one connection to a peer whose state outlives a cancelled call.
///
/// openraft 0.9 gives every AppendEntries one heartbeat interval and drops the call's future
/// when it expires. Before, that also dropped the connection: on a congested link every
/// append longer than 30 ms on the wire was cut off mid-frame, the follower never got it (nor
/// the heartbeats queued behind it), and the reconnect's handshake competed for the same link —
/// the election storms and seconds of unavailability of P14. Now a request is framed into the
/// link's write buffer before anything awaits, bytes leave and arrive through cancel-safe
/// reads and writes, and replies are matched to requests by their order on the connection
/// (the peer answers in order), so an expired call leaves a consistent link behind: the
/// request still reaches the follower (keeping its election timer fresh), its late reply is
/// read and dropped, and a retry of the same request waits for that reply instead of sending
/// the bytes again.
struct Link {
    conn: PeerStream,
    /// Framed requests not yet written past `wpos`.
    wbuf: Vec<u8>,
    wpos: usize,
    /// Bytes received, not yet a whole reply.
    rbuf: Vec<u8>,
    /// Where a read lands before it joins `rbuf` (a read that never completes leaves nothing).
    scratch: Vec<u8>,
    /// Requests framed on this link / replies read.
    sent: u64,
    answered: u64,
    /// The requests still waiting for a reply: (sequence number, what an append asked, when it
    /// was framed). A retry that joins one is answered as of that one's time, not its own (C3:
    /// an ack stamped with the retry's time made a paused leader's lease look fresh).
    outstanding: VecDeque<(u64, Option<AppendKey>, BootInstant)>,
}

/// What makes two appends the same request: a retry of an expired one asks exactly this.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AppendKey {
    vote: Vote,
    prev: Option<openraft::LogId<NodeId>>,
    last: Option<openraft::LogId<NodeId>>,
}

impl Link {
    fn new(conn: PeerStream) -> Link {
        Link {
            conn,
            wbuf: Vec::new(),
            wpos: 0,
            rbuf: Vec::new(),
            scratch: vec![0; READ_STEP],
            sent: 0,
            answered: 0,
            outstanding: VecDeque::new(),
        }
    }

    /// Frames `frame` as the next request; returns its sequence number and when it was framed.
    /// Never awaits, so the link is consistent whenever the caller's future is dropped.
    fn push(&mut self, frame: &[u8], key: Option<AppendKey>) -> (u64, BootInstant) {
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
        }
        self.wbuf.extend_from_slice(frame);
        let (seq, at) = (self.sent, BootInstant::now());
        self.sent += 1;
        self.outstanding.push_back((seq, key, at));
        (seq, at)
    }

    /// The outstanding request that `key` repeats, if any: its sequence number and when it was
    /// framed (before its bytes left).
    fn find(&self, key: &AppendKey) -> Option<(u64, BootInstant)> {
        self.outstanding
            .iter()
            .find(|(_, k, _)| k.as_ref() == Some(key))
            .map(|(seq, _, at)| (*seq, *at))
    }

    /// Writes what is buffered, then reads replies until the one of request `seq`. Every
    /// await is cancel-safe: a dropped future leaves the buffers and counters consistent.
    async fn reply(&mut self, seq: u64, limit: usize) -> io::Result<Vec<u8>> {
        while self.wpos < self.wbuf.len() {
            let n = self.conn.write(&self.wbuf[self.wpos..]).await?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "peer closed"));
            }
            self.wpos += n;
        }
        self.conn.flush().await?;
        loop {
            while let Some(body) = take_frame(&mut self.rbuf, limit)? {
                let n = self.answered;
                self.answered += 1;
                self.outstanding.retain(|(s, _, _)| *s > n);
                if n == seq {
                    return Ok(body);
                }
            }
            let n = self.conn.read(&mut self.scratch).await?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed the connection",
                ));
            }
            self.rbuf.extend_from_slice(&self.scratch[..n]);
        }
    }
}

/// A whole frame (4-byte length, then the body) off the front of `buf`, if it arrived. The
/// length is checked against `limit` as soon as it is known.
fn take_frame(buf: &mut Vec<u8>, limit: usize) -> io::Result<Option<Vec<u8>>> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
    if len > limit {
        return Err(invalid(&format!(
            "rpc of {len} bytes over the limit {limit}"
        )));
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    let body = buf[4..4 + len].to_vec();
    buf.drain(..4 + len);
    Ok(Some(body))
}

/// How many of `entries`, from the first, fit in `budget` bytes of an append (at least one).
fn entries_within(entries: &[crate::types::Entry], budget: usize) -> usize {
    let mut used: usize = 256; // the envelope: vote, log ids, commit
    let mut n = 0;
    for e in entries {
        let size = postcard::to_allocvec(e).map_or(usize::MAX, |v| v.len());
        used = used.saturating_add(size);
        if n > 0 && used > budget {
            break;
        }
        n += 1;
    }
    n.max(1)
}

/// One message framed: its length (4 bytes, big-endian), then its postcard encoding.
fn frame<T: Serialize>(msg: &T) -> io::Result<Vec<u8>> {
    let mut buf = postcard::to_extend(msg, vec![0u8; 4]).map_err(io::Error::other)?;
    let len = u32::try_from(buf.len() - 4).map_err(|_| io::Error::other("rpc too large"))?;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf)
}

/// C15, P14: how many bytes of entries one append may carry to a peer, so that it crosses the
/// link within openraft's one-heartbeat budget. Starts at [`INITIAL_BUDGET`] (or what the
/// peer's previous client learned); an append that expires halves it, one answered within a
/// third of the budget doubles it (between [`MIN_BUDGET`] and the largest message; one entry
/// always goes). An append cut short is answered to openraft as `PartialSuccess` up to its
/// last entry sent, as openraft's API provides for.
struct AppendBudget {
    bytes: usize,
    max: usize,
    target: NodeId,
    shared: Arc<Mutex<HashMap<NodeId, usize>>>,
}

impl AppendBudget {
    fn new(max: usize, target: NodeId, shared: Arc<Mutex<HashMap<NodeId, usize>>>) -> AppendBudget {
        let learned = shared.lock().ok().and_then(|m| m.get(&target).copied());
        AppendBudget {
            bytes: learned
                .unwrap_or(INITIAL_BUDGET)
                .clamp(MIN_BUDGET, max.max(MIN_BUDGET)),
            max: max.max(MIN_BUDGET),
            target,
            shared,
        }
    }

    fn keep(&mut self, bytes: usize) {
        self.bytes = bytes;
        if let Ok(mut m) = self.shared.lock() {
            m.insert(self.target, bytes);
        }
    }

    fn expired(&mut self, sent: usize) {
        self.keep((sent.min(self.bytes) / 2).max(MIN_BUDGET));
    }

    fn answered(&mut self, took: Duration, ttl: Duration) {
        if took < ttl / 3 {
            self.keep(self.bytes.saturating_mul(2).min(self.max));
        } else if took > ttl * 2 / 3 {
            self.keep((self.bytes / 4 * 3).max(MIN_BUDGET));
        }
    }
}

pub struct PeerClient {
    target: NodeId,
    addr: String,
    link: Option<Link>,
    /// A connect (TCP, then TLS) in progress: it goes on when a call's TTL ends, and the next
    /// call picks it up.
    connecting: Option<tokio::task::JoinHandle<Result<PeerStream, io::Error>>>,
    budget: AppendBudget,
    lease: std::sync::Arc<LeaseClock>,
    tls: Option<PeerTls>,
    max_rpc: usize,
}

/// Why a call failed: the peer could not be reached at all, or the exchange broke.
enum CallError {
    Unreachable(io::Error),
    Network(io::Error),
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_string())
}

impl PeerClient {
    /// Sends `frame` (or waits for the identical request `key` already outstanding) and
    /// returns the reply with the time the answered request was framed — an earlier one's,
    /// when this call joined it — within `ttl`. A call that expires leaves the link as it is
    /// (see [`Link`]); one that fails drops it.
    async fn call(
        &mut self,
        frame: &[u8],
        key: Option<AppendKey>,
        ttl: Duration,
    ) -> Result<(RpcReply, BootInstant), CallError> {
        let res = tokio::time::timeout(ttl, self.exchange(frame, key)).await;
        let res = match res {
            Ok(r) => r,
            Err(_) => return Err(CallError::Network(timed_out("rpc timed out"))),
        };
        if res.is_err() {
            self.link = None;
        }
        res
    }

    async fn exchange(
        &mut self,
        frame: &[u8],
        key: Option<AppendKey>,
    ) -> Result<(RpcReply, BootInstant), CallError> {
        self.connect().await?;
        let max_rpc = self.max_rpc;
        let link = self.link.as_mut().expect("connected above");
        let (seq, framed) = match key.as_ref().and_then(|k| link.find(k)) {
            Some(joined) => joined,
            None => {
                if link.outstanding.len() >= MAX_OUTSTANDING {
                    return Err(CallError::Network(timed_out(
                        "peer answers none of the last requests",
                    )));
                }
                link.push(frame, key)
            }
        };
        let body = link.reply(seq, max_rpc).await.map_err(CallError::Network)?;
        let reply = postcard::from_bytes(&body)
            .map_err(|e| CallError::Network(invalid(&format!("bad rpc reply: {e}"))))?;
        Ok((reply, framed))
    }

    /// Connects (TCP, then the TLS handshake verifying that the peer is member `target`)
    /// unless connected already. The connect runs as its own task, bounded by
    /// [`CONNECT_TIMEOUT`] and [`HANDSHAKE_TIMEOUT`], not by the call's TTL.
    async fn connect(&mut self) -> Result<(), CallError> {
        if self.link.is_some() {
            return Ok(());
        }
        if self.connecting.is_none() {
            let (addr, tls, target) = (self.addr.clone(), self.tls.clone(), self.target);
            self.connecting = Some(tokio::spawn(async move {
                let s = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr))
                    .await
                    .map_err(|_| timed_out("connect timed out"))??;
                let _ = s.set_nodelay(true);
                let stream: PeerStream = match &tls {
                    None => Box::new(s),
                    Some(t) => {
                        let name = PeerTls::server_name(target);
                        let tls =
                            tokio::time::timeout(HANDSHAKE_TIMEOUT, t.connector.connect(name, s))
                                .await
                                .map_err(|_| timed_out("TLS handshake timed out"))??;
                        Box::new(tls)
                    }
                };
                Ok(stream)
            }));
        }
        let handle = self.connecting.as_mut().expect("set above");
        let res = handle.await;
        self.connecting = None;
        match res {
            Ok(Ok(stream)) => {
                self.link = Some(Link::new(stream));
                Ok(())
            }
            Ok(Err(e)) => Err(CallError::Unreachable(e)),
            Err(e) => Err(CallError::Unreachable(io::Error::other(e.to_string()))),
        }
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
            // A snapshot goes on a connection of its own, held here: a call cut short leaves
            // nothing half-used behind.
            self.link = None;
            self.connect().await?;
            let mut link = self.link.take().expect("connected above");
            let conn = &mut link.conn;
            let header = frame(&req).map_err(CallError::Network)?;
            conn.write_all(&header).await.map_err(CallError::Network)?;
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
        res.unwrap_or_else(|_| {
            Err(CallError::Network(io::Error::new(
                io::ErrorKind::TimedOut,
                "snapshot rpc timed out",
            )))
        })
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
    let snap = crate::snapshot::SnapFile::receive_into(dir)?;
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
        snapshot: Box::new(crate::snapshot::SnapFile {
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
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, CtrlNode, RaftError<NodeId>>> {
        let ttl = option.hard_ttl();
        let vote = rpc.vote;
        // P14: no more entries than the link carries within the TTL (one always goes).
        let mut whole = frame(&RpcRequestRef::Append(&rpc))
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let mut cut = None;
        if whole.len() > self.budget.bytes && rpc.entries.len() > 1 {
            let keep = entries_within(&rpc.entries, self.budget.bytes);
            if keep < rpc.entries.len() {
                rpc.entries.truncate(keep);
                cut = rpc.entries.last().map(|e| e.log_id);
                whole = frame(&RpcRequestRef::Append(&rpc))
                    .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
            }
        }
        let key = AppendKey {
            vote,
            prev: rpc.prev_log_id,
            last: rpc.entries.last().map(|e| e.log_id).or(rpc.prev_log_id),
        };
        let carried = if rpc.entries.is_empty() {
            0
        } else {
            whole.len()
        };
        self.lease.sending(vote, BootInstant::now());
        let t0 = std::time::Instant::now();
        let (reply, sent) = match self.call(&whole, Some(key), ttl).await {
            Ok(r) => r,
            Err(e) => {
                if carried > 0 {
                    self.budget.expired(carried);
                }
                return Err(rpc_err(e));
            }
        };
        if carried > 0 {
            self.budget.answered(t0.elapsed(), ttl);
        }
        match reply {
            RpcReply::Append(Ok(r)) => {
                // Every answer but HigherVote means the follower took our vote (and its lease).
                if vote.is_committed() && !matches!(r, AppendEntriesResponse::HigherVote(_)) {
                    self.lease
                        .record(self.target, vote, sent, BootInstant::now());
                }
                Ok(match (r, cut) {
                    // The follower has every entry sent: up to the last one (openraft's API
                    // for an append the network sent only the start of).
                    (AppendEntriesResponse::Success, Some(last)) => {
                        AppendEntriesResponse::PartialSuccess(Some(last))
                    }
                    (r, _) => r,
                })
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
        let req = frame(&RpcRequestRef::Vote(&rpc))
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        match self
            .call(&req, None, option.hard_ttl())
            .await
            .map_err(rpc_err)?
            .0
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

    /// C15: asks member `target` at raft address `addr` whether it would vote for `req`
    /// (pre-vote), within `within`, on a kept connection or a new one. `None`: no answer.
    pub async fn pre_vote(
        &self,
        target: NodeId,
        addr: &str,
        req: &PreVoteRequest,
        within: Duration,
    ) -> Option<bool> {
        let until = tokio::time::Instant::now() + within;
        let key = (target, addr.to_string());
        let msg = RpcRequest::PreVote(req.clone());
        for kept in [true, false] {
            let mut conn = if kept {
                match self.take_idle(&key) {
                    Some(c) => c,
                    None => continue,
                }
            } else {
                let left = until.saturating_duration_since(tokio::time::Instant::now());
                self.dial(target, addr, left).await.ok()?
            };
            let res = tokio::time::timeout_at(until, async {
                write_msg(&mut conn, &msg).await?;
                read_msg::<_, RpcReply>(&mut conn, self.max_rpc).await
            })
            .await;
            match res {
                Ok(Ok(RpcReply::PreVote(granted))) => {
                    self.put_idle(key, conn);
                    return Some(granted);
                }
                // A kept connection the peer closed meanwhile: once more on a new one.
                Ok(Err(_)) if kept => continue,
                _ => return None,
            }
        }
        None
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
                crate::counters::append_received(!r.entries.is_empty());
                if r.vote.is_committed() {
                    *carried = Some(r.vote);
                }
                RpcReply::Append(srv.amnesia.append(&srv.raft, r).await)
            }
            RpcRequest::Vote(r) => RpcReply::Vote(answer_vote(srv, r).await),
            RpcRequest::PreVote(r) => RpcReply::PreVote(answer_pre_vote(srv, &r).await),
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

/// A pre-vote is answered with the refusals of [`answer_vote`] (C11, C12), then the leader
/// stickiness and log check of [`crate::elect::Elections::would_vote`]. The caller is a
/// member: the connection was admitted (mutual TLS), as for every other message.
async fn answer_pre_vote(srv: &PeerServer, r: &PreVoteRequest) -> bool {
    let as_vote = VoteRequest::new(Vote::new(r.term, r.candidate), r.last_log_id);
    let granted = !srv.guard.refuses()
        && !srv.amnesia.refuses_vote(&as_vote)
        && srv.elect.would_vote(r).await;
    crate::counters::pre_vote(granted);
    granted
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

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    fn raw(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    /// The peer's side: one whole frame's body.
    async fn peer_reads(s: &mut tokio::io::DuplexStream) -> Vec<u8> {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).await.unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut body).await.unwrap();
        body
    }

    fn key(last: u64) -> AppendKey {
        AppendKey {
            vote: committed(1, 1),
            prev: None,
            last: Some(openraft::LogId::new(
                openraft::CommittedLeaderId::new(1, 1),
                last,
            )),
        }
    }

    /// P14: an append whose call expired (openraft's TTL) still reaches the peer once; its
    /// retry sends nothing and gets the late reply; the next request is the next frame.
    #[test]
    fn an_expired_append_is_sent_once_and_answered_to_its_retry() {
        rt().block_on(async {
            let (a, mut peer) = tokio::io::duplex(1 << 20);
            let mut link = Link::new(Box::new(a));
            let before = BootInstant::now();
            let (seq, framed) = link.push(&raw(b"append 1..5"), Some(key(5)));
            let expired = tokio::time::timeout(ms(20), link.reply(seq, 1 << 20)).await;
            assert!(expired.is_err(), "no reply yet: the call expires");
            assert_eq!(peer_reads(&mut peer).await, b"append 1..5");
            // The retry asks the same: it waits for the same request's reply, which counts
            // (C3's lease) as of when that request was framed, not as of the retry.
            assert_eq!(link.find(&key(5)), Some((seq, framed)));
            assert!(
                before.since(framed) == Duration::ZERO
                    && BootInstant::now().since(framed) >= ms(20),
                "the joined request's time is its own, 20 ms before the retry"
            );
            assert_eq!(link.find(&key(6)), None);
            peer.write_all(&raw(b"ok 5")).await.unwrap();
            assert_eq!(link.reply(seq, 1 << 20).await.unwrap(), b"ok 5");
            assert_eq!(link.find(&key(5)), None, "answered: no longer outstanding");
            let (next, _) = link.push(&raw(b"vote"), None);
            let (reply, body) = tokio::join!(link.reply(next, 1 << 20), async {
                let body = peer_reads(&mut peer).await;
                peer.write_all(&raw(b"granted")).await.unwrap();
                body
            });
            assert_eq!(body, b"vote", "the expired append was not sent again");
            assert_eq!(reply.unwrap(), b"granted");
        });
    }

    /// Replies to requests whose calls were abandoned are read and dropped, in order.
    #[test]
    fn replies_of_abandoned_requests_are_skipped_in_order() {
        rt().block_on(async {
            let (a, mut peer) = tokio::io::duplex(1 << 20);
            let mut link = Link::new(Box::new(a));
            let (first, _) = link.push(&raw(b"one"), None);
            assert!(tokio::time::timeout(ms(10), link.reply(first, 1024))
                .await
                .is_err());
            let (second, _) = link.push(&raw(b"two"), None);
            assert_eq!(peer_reads(&mut peer).await, b"one");
            // The first reply, then the second split across two writes.
            let mut replies = raw(b"reply one");
            let mut two = raw(b"reply two");
            let tail = two.split_off(6);
            replies.extend_from_slice(&two);
            let (r, ()) = tokio::join!(link.reply(second, 1024), async {
                assert_eq!(peer_reads(&mut peer).await, b"two");
                peer.write_all(&replies).await.unwrap();
                tokio::time::sleep(ms(5)).await;
                peer.write_all(&tail).await.unwrap();
            });
            assert_eq!(r.unwrap(), b"reply two");
            assert!(link.outstanding.is_empty());
        });
    }

    /// A call cut off in the middle of writing a large frame leaves the rest to the next call:
    /// the peer receives every frame whole, in order.
    #[test]
    fn a_write_cut_off_midway_is_finished_by_the_next_call() {
        rt().block_on(async {
            let (a, mut peer) = tokio::io::duplex(64); // the "link" holds 64 bytes
            let mut link = Link::new(Box::new(a));
            let big = vec![7u8; 10_000];
            let (first, _) = link.push(&raw(&big), Some(key(1)));
            assert!(tokio::time::timeout(ms(10), link.reply(first, 1 << 20))
                .await
                .is_err());
            assert!(
                link.wpos > 0 && link.wpos < link.wbuf.len(),
                "cut off midway"
            );
            let (second, _) = link.push(&raw(b"small"), None);
            let (r, ()) = tokio::join!(link.reply(second, 1 << 20), async {
                assert_eq!(peer_reads(&mut peer).await, big);
                assert_eq!(peer_reads(&mut peer).await, b"small");
                peer.write_all(&raw(b"r1")).await.unwrap();
                peer.write_all(&raw(b"r2")).await.unwrap();
            });
            assert_eq!(r.unwrap(), b"r2");
        });
    }

    /// A reply's length is checked against the limit before its body is waited for.
    #[test]
    fn a_reply_over_the_limit_is_refused_from_its_length() {
        let mut buf = (1u32 << 30).to_be_bytes().to_vec();
        assert!(take_frame(&mut buf, 1 << 20).is_err());
        let mut partial = raw(b"abcdef");
        partial.truncate(7);
        assert_eq!(take_frame(&mut partial, 1024).unwrap(), None);
        assert_eq!(partial.len(), 7, "nothing taken from a partial frame");
    }

    #[test]
    fn append_budget_halves_on_expiry_and_grows_back_when_fast() {
        let shared = Arc::new(Mutex::new(HashMap::new()));
        let mut b = AppendBudget::new(1 << 20, 2, shared.clone());
        assert_eq!(b.bytes, INITIAL_BUDGET, "an unmeasured link starts small");
        let ttl = ms(30);
        for _ in 0..20 {
            b.answered(ms(1), ttl);
        }
        assert_eq!(
            b.bytes,
            1 << 20,
            "fast answers: up to the largest message, never above"
        );
        b.expired(100_000);
        assert_eq!(b.bytes, 50_000, "half of what did not make it");
        b.expired(100_000);
        assert_eq!(b.bytes, 25_000, "half of the budget when more was sent");
        b.answered(ms(25), ttl);
        assert_eq!(b.bytes, 18_750, "slow: three quarters");
        b.answered(ms(15), ttl);
        assert_eq!(b.bytes, 18_750, "in between: kept");
        b.answered(ms(5), ttl);
        assert_eq!(b.bytes, 37_500, "fast: doubled");
        // The next client to the same peer (a new term) starts from what was learned.
        assert_eq!(AppendBudget::new(1 << 20, 2, shared.clone()).bytes, 37_500);
        assert_eq!(AppendBudget::new(1 << 20, 3, shared).bytes, INITIAL_BUDGET);
        for _ in 0..40 {
            b.expired(10);
        }
        assert_eq!(b.bytes, MIN_BUDGET);
    }

    #[test]
    fn borrowed_requests_encode_like_owned_ones() {
        let vote = VoteRequest::new(committed(3, 2), None);
        assert_eq!(
            frame(&RpcRequestRef::Vote(&vote)).unwrap(),
            frame(&RpcRequest::Vote(vote.clone())).unwrap()
        );
        let append = AppendEntriesRequest::<TypeConfig> {
            vote: committed(3, 2),
            prev_log_id: None,
            leader_commit: None,
            entries: vec![
                <openraft::Entry<TypeConfig> as openraft::entry::RaftEntry<_, _>>::new_blank(
                    openraft::LogId::new(openraft::CommittedLeaderId::new(3, 2), 1),
                ),
            ],
        };
        assert_eq!(
            frame(&RpcRequestRef::Append(&append)).unwrap(),
            frame(&RpcRequest::Append(append.clone())).unwrap()
        );
        assert_eq!(
            entries_within(&append.entries, 0),
            1,
            "one entry always goes"
        );
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
