//! Raft RPC between controllers (C13), the outgoing side: on the raft address, mutual TLS
//! between members (or plaintext on loopback / with `--insecure`), each message framed as
//! `frame.rs` says. One connection per (peer, openraft client), requests answered in order.
//! Every call is bounded by openraft's TTL (and a short connect timeout), so a dead or
//! SIGSTOPped peer never stalls the leader: the call fails, the connection is dropped and the
//! next call reconnects.

use std::collections::{HashMap, VecDeque};
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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::base::clock::BootInstant;
use crate::base::cluster_id::Identity;
use crate::base::ids::{CtrlNode, NodeId, Vote};
use crate::base::tls::PeerTls;
use crate::raft::frame::{
    frame, invalid, open_reply, read_reply, PeerStream, RpcReply, RpcRequest, RpcRequestRef,
    Traffic, CONNECT_TIMEOUT, READ_STEP,
};
use crate::raft::lease::LeaseClock;
use crate::raft::pace::Pace;
use crate::raft::types::{Snapshot, TypeConfig};

/// Issue 26: TLS refusals of outgoing raft connections, rate-limited with a count.
static LINK_REFUSALS: crate::base::ratelog::RateLog = crate::base::ratelog::RateLog::new();
/// C15 (amended): links given up on while their peer may be alive, rate-limited with a count.
static GIVEN_UP: crate::base::ratelog::RateLog = crate::base::ratelog::RateLog::new();

/// Pause before retrying an unreachable peer (openraft's default is 500 ms): short, so that a
/// restarted node gets the log, and can vote sensibly, soon after it is back.
pub const UNREACHABLE_BACKOFF: Duration = Duration::from_millis(100);

/// Writes the counts of this side's rate-limited lines held back (called every
/// [`crate::base::ratelog::INTERVAL`] by the raft port's task), so none goes unreported.
pub fn flush_logs(prefix: &str) {
    LINK_REFUSALS.flush(prefix);
    GIVEN_UP.flush(prefix);
}

/// Creates one [`PeerClient`] per target for openraft.
pub struct NetFactory {
    pub lease: std::sync::Arc<LeaseClock>,
    /// C15 (amended): answers' silences are measured here; a slow link carries more requests
    /// unanswered before it is reset.
    pub pace: Arc<Pace>,
    /// openraft's heartbeat interval (one request per interval when idle).
    pub heartbeat: Duration,
    /// Mutual TLS to peers; `None`: plaintext (loopback, or `--insecure`).
    pub tls: Option<PeerTls>,
    /// Largest reply accepted from a peer ([`crate::raft::frame::max_rpc_bytes`]).
    pub max_rpc: usize,
    /// What each peer's link was found to carry ([`AppendBudget`]), kept across the clients
    /// openraft makes per term: a new leader does not start by flooding a slow link.
    pub budgets: Arc<Mutex<HashMap<NodeId, usize>>>,
    /// C20: this node's cluster, stamped on every request and checked on every reply.
    pub identity: Arc<Identity>,
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
            pace: self.pace.clone(),
            heartbeat: self.heartbeat,
            tls: self.tls.clone(),
            max_rpc: self.max_rpc,
            identity: self.identity.clone(),
            refusal: None,
        }
    }
}

/// Requests written on a link whose replies have not come; one more resets the link (the
/// peer is not answering: blackholed, stopped). On a slow link, as many as go out in one
/// adaptive lease ([`PeerClient::max_outstanding`]).
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

    /// C15 (amended): gives up on this link while its peer may be alive (it answered none of
    /// the last requests): what is buffered goes out, then [`RpcRequest::Bye`] — after which
    /// the peer closes without taking the close for this leader's death — and the replies are
    /// read and dropped until the peer's close, all within `within`, in a task of its own.
    fn farewell(mut self, tag: Option<crate::base::cluster_id::ClusterTag>, within: Duration) {
        let Ok(bye) = frame(&RpcRequest::Bye, tag) else {
            return;
        };
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
        }
        self.wbuf.extend_from_slice(&bye);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(within, async {
                self.conn.write_all(&self.wbuf[self.wpos..]).await?;
                self.conn.flush().await?;
                while self.conn.read(&mut self.scratch).await? > 0 {}
                io::Result::Ok(())
            })
            .await;
        });
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
fn entries_within(entries: &[crate::raft::types::Entry], budget: usize) -> usize {
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
    pace: Arc<Pace>,
    heartbeat: Duration,
    tls: Option<PeerTls>,
    max_rpc: usize,
    identity: Arc<Identity>,
    /// C11 (fifth round): the refusal window the peer stated on its last reply
    /// (`frame::refusal_of`; `None`: it stated none — an earlier build).
    refusal: Option<u32>,
}

/// C15 (amended): openraft drops a client when it rebuilds a replication stream or this node
/// stops leading; the process lives on, so the link ends with a goodbye ([`Link::farewell`]).
/// A killed process drops nothing: its peers see a bare close, the evidence of a crash.
impl Drop for PeerClient {
    fn drop(&mut self) {
        if let (Some(link), Ok(_)) = (self.link.take(), tokio::runtime::Handle::try_current()) {
            let within = (self.pace.lease() * 2).max(Duration::from_secs(1));
            link.farewell(self.identity.tag(), within);
        }
    }
}

/// Why a call failed: the peer could not be reached at all, the exchange broke, or the peer
/// (or this node) refused the message for its cluster (C20) or because it diverged (C19).
enum CallError {
    Unreachable(io::Error),
    Network(io::Error),
    /// Openraft backs off as from an unreachable peer; the link stays (the peer keeps it
    /// open and judges each message alone), so the next try costs no new handshake.
    Refused(io::Error),
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_string())
}

impl PeerClient {
    /// [`MAX_OUTSTANDING`], or on a slow link the requests of one adaptive lease: a link is
    /// reset when its peer has answered nothing for longer than the lease (C15 amended).
    fn max_outstanding(&self) -> usize {
        let per_lease = self.pace.lease().as_micros() / self.heartbeat.as_micros().max(1);
        MAX_OUTSTANDING.max(usize::try_from(per_lease).unwrap_or(usize::MAX))
    }

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
        if matches!(res, Err(CallError::Unreachable(_) | CallError::Network(_))) {
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
        let max_outstanding = self.max_outstanding();
        let link = self.link.as_mut().expect("connected above");
        let (seq, framed) = match key.as_ref().and_then(|k| link.find(k)) {
            Some(joined) => joined,
            None => {
                if link.outstanding.len() >= max_outstanding {
                    // Given up while the peer may be alive: said, so that it does not
                    // campaign on the close (C15 amended).
                    if let Some(old) = self.link.take() {
                        let within = (self.pace.lease() * 2).max(Duration::from_secs(1));
                        old.farewell(self.identity.tag(), within);
                        GIVEN_UP.note("raft link given up", || {
                            format!(
                                "raft link to node {}: no answer to the last {max_outstanding} \
                                 requests: given up (said to the peer) and reconnecting",
                                self.target
                            )
                        });
                    }
                    return Err(CallError::Network(timed_out(
                        "peer answers none of the last requests",
                    )));
                }
                link.push(frame, key)
            }
        };
        let body = link.reply(seq, max_rpc).await.map_err(CallError::Network)?;
        self.refusal = crate::raft::frame::refusal_of(&body);
        let reply = open_reply(&body, &self.identity, &self.addr).map_err(|e| {
            if e.kind() == io::ErrorKind::PermissionDenied {
                CallError::Refused(e)
            } else {
                CallError::Network(e)
            }
        })?;
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
                dial(&addr, tls.as_ref(), target, Traffic::Control).await
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
            Ok(Err(e)) => Err(self.unreachable(e)),
            Err(e) => Err(CallError::Unreachable(io::Error::other(e.to_string()))),
        }
    }

    /// A failed dial: unreachable, and a TLS refusal said (who and why), at most once a
    /// second (issue 26: a member whose certificate does not name it is refused here, at the
    /// dialling side).
    fn unreachable(&self, e: io::Error) -> CallError {
        let text = e.to_string();
        if self.tls.is_some() && (text.contains("certificate") || text.contains("alert")) {
            LINK_REFUSALS.note("raft link TLS", || {
                format!(
                    "raft link to node {} at {}: TLS refused: {text} (its certificate must name \
                     xce-node-{} and be signed by --tls-peer-ca)",
                    self.target, self.addr, self.target
                )
            });
        }
        CallError::Unreachable(e)
    }
}

/// Connects to member `target` at `addr` (TCP, then the TLS handshake verifying that the peer
/// is that member), bounded by [`CONNECT_TIMEOUT`] and [`HANDSHAKE_TIMEOUT`]; the socket marked
/// for `traffic` before the first byte.
async fn dial(
    addr: &str,
    tls: Option<&PeerTls>,
    target: NodeId,
    traffic: Traffic,
) -> io::Result<PeerStream> {
    let s = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| timed_out("connect timed out"))??;
    crate::raft::frame::raft_socket(&s);
    if traffic != Traffic::Control {
        use std::os::fd::AsRawFd;
        let v6 = s.local_addr().is_ok_and(|a| a.is_ipv6());
        crate::raft::frame::set_traffic(s.as_raw_fd(), v6, traffic);
    }
    Ok(match tls {
        None => Box::new(s),
        Some(t) => {
            let name = PeerTls::server_name(target);
            let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, t.connector.connect(name, s))
                .await
                .map_err(|_| timed_out("TLS handshake timed out"))??;
            Box::new(tls)
        }
    })
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
            // nothing half-used behind. It is bulk (C15 amended): its megabytes never claim
            // the queue the raft links' appends and heartbeats are served from.
            let mut conn = dial(&self.addr, self.tls.as_ref(), self.target, Traffic::Bulk)
                .await
                .map_err(|e| self.unreachable(e))?;
            let conn = &mut conn;
            let header = frame(&req, self.identity.tag()).map_err(CallError::Network)?;
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
            read_reply(conn, max_rpc, &self.identity, &self.addr)
                .await
                .map_err(CallError::Network)
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

fn rpc_err<E: std::error::Error>(e: CallError) -> RPCError<NodeId, CtrlNode, E> {
    match e {
        CallError::Unreachable(e) | CallError::Refused(e) => {
            RPCError::Unreachable(Unreachable::new(&e))
        }
        CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
    }
}

fn unexpected() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "unexpected rpc reply")
}

/// An append's last log id, when a link sends only the start of it.
type Cut = Option<Option<crate::base::ids::LogId>>;

impl PeerClient {
    /// The append as framed for the wire, cut to what the link carries within its TTL (P14:
    /// one entry always goes) and, in tests, to `repl-max-index`; where it was cut, and
    /// whether nothing but a heartbeat is left to send (`repl-max-index`).
    // openraft's own error type, as `append_entries` (the trait's) returns it.
    #[allow(clippy::type_complexity, clippy::result_large_err)]
    fn shaped(
        &mut self,
        rpc: &mut AppendEntriesRequest<TypeConfig>,
    ) -> Result<(Vec<u8>, Cut, bool), RPCError<NodeId, CtrlNode, RaftError<NodeId>>> {
        // P14: no more entries than the link carries within the TTL (one always goes).
        let tag = self.identity.tag();
        let mut idle = false;
        let mut whole = frame(&RpcRequestRef::Append(rpc), tag)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        // `Some(last)`: the append was cut short after `last` (`None`: before its first entry).
        let mut cut = None;
        if whole.len() > self.budget.bytes && rpc.entries.len() > 1 {
            let keep = entries_within(&rpc.entries, self.budget.bytes);
            if keep < rpc.entries.len() {
                rpc.entries.truncate(keep);
                cut = Some(rpc.entries.last().map(|e| e.log_id));
                whole = frame(&RpcRequestRef::Append(rpc), tag)
                    .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
            }
        }
        // Failpoint `repl-max-index` (C12's test): no entry past N leaves this leader.
        if let Some(max) = crate::base::failpoints::number(crate::base::failpoints::REPL_MAX_INDEX)
        {
            let max = u64::try_from(max).unwrap_or(0);
            let keep = rpc
                .entries
                .iter()
                .take_while(|e| e.log_id.index <= max)
                .count();
            if keep < rpc.entries.len() {
                rpc.entries.truncate(keep);
                cut = Some(rpc.entries.last().map(|e| e.log_id).or(rpc.prev_log_id));
                whole = frame(&RpcRequestRef::Append(rpc), tag)
                    .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
                idle = keep == 0;
            }
        }
        Ok((whole, cut, idle))
    }

    /// What a follower's answer to an append means: its lease and pace heard (C10, C15), a
    /// cut append's success as openraft's partial success.
    #[allow(clippy::result_large_err)] // openraft's own error type, as `append_entries`'s
    fn append_answered(
        &mut self,
        reply: RpcReply,
        vote: Vote,
        sent: BootInstant,
        cut: Cut,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, CtrlNode, RaftError<NodeId>>> {
        match reply {
            RpcReply::Append(Ok(r)) => {
                // Every answer but HigherVote means the follower took our vote (and its lease).
                if vote.is_committed() && !matches!(r, AppendEntriesResponse::HigherVote(_)) {
                    let heard = BootInstant::now();
                    if !crate::base::failpoints::returns(crate::base::failpoints::LEASE_DEAF) {
                        let refusal = self.refusal.map(|ms| Duration::from_millis(ms.into()));
                        self.lease.record(self.target, vote, sent, heard, refusal);
                    }
                    self.pace.heard(self.target, vote, heard);
                }
                Ok(match (r, cut) {
                    // The follower has every entry sent: up to the last one (openraft's API
                    // for an append the network sent only the start of).
                    (AppendEntriesResponse::Success, Some(last)) => {
                        AppendEntriesResponse::PartialSuccess(last)
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
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, CtrlNode, RaftError<NodeId>>> {
        let ttl = option.hard_ttl();
        let vote = rpc.vote;
        // Failpoint `repl-drop` (tests): this follower's link is cut, as far as appends go.
        if crate::base::failpoints::number(crate::base::failpoints::REPL_DROP)
            .is_some_and(|n| u64::try_from(n) == Ok(self.target))
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
            return Err(RPCError::Network(NetworkError::new(&timed_out(
                "repl-drop",
            ))));
        }
        let (whole, cut, idle) = self.shaped(&mut rpc)?;
        if idle {
            // Nothing to send but the heartbeat (`repl-max-index`): not at once again.
            tokio::time::sleep(Duration::from_millis(10)).await;
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
        self.append_answered(reply, vote, sent, cut)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, CtrlNode, RaftError<NodeId>>> {
        let req = frame(&RpcRequestRef::Vote(&rpc), self.identity.tag())
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
            Err(CallError::Unreachable(e) | CallError::Refused(e)) => {
                Err(StreamingError::Unreachable(Unreachable::new(&e)))
            }
            Err(CallError::Network(e)) => Err(StreamingError::Network(NetworkError::new(&e))),
        }
    }
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
            frame(&RpcRequestRef::Vote(&vote), None).unwrap(),
            frame(&RpcRequest::Vote(vote.clone()), None).unwrap()
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
            frame(&RpcRequestRef::Append(&append), None).unwrap(),
            frame(&RpcRequest::Append(append.clone()), None).unwrap()
        );
        assert_eq!(
            entries_within(&append.entries, 0),
            1,
            "one entry always goes"
        );
    }
}
