//! Raft RPC between controllers: TCP on the raft address, each message a 4-byte big-endian
//! length then JSON. One connection per (peer, openraft client), requests answered in order.
//! Every call is bounded by openraft's TTL (and a short connect timeout), so a dead or
//! SIGSTOPped peer never stalls the leader: the call fails, the connection is dropped and the
//! next call reconnects.

use std::future::Future;
use std::io;
use std::time::Duration;

use openraft::error::{
    Fatal, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError,
    Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::types::{CtrlNode, NodeId, Raft, Snapshot, SnapshotMeta, TypeConfig, Vote};

/// Largest raft RPC accepted (a snapshot of a big job table fits easily).
pub const MAX_RPC_BYTES: usize = 256 << 20;
/// Upper bound on connecting to a peer, whatever openraft's TTL.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Pause before retrying an unreachable peer (openraft's default is 500 ms): short, so that a
/// restarted node gets the log, and can vote sensibly, soon after it is back.
pub const UNREACHABLE_BACKOFF: Duration = Duration::from_millis(100);
/// A peer connection idle for this long is closed by the receiving side.
pub const RPC_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

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
}

#[derive(Serialize, Deserialize)]
enum RpcReply {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<SnapshotResponse<NodeId>, Fatal<NodeId>>),
}

async fn write_msg<W: AsyncWrite + Unpin, T: Serialize>(w: &mut W, msg: &T) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(|_| io::Error::other("rpc too large"))?;
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf).await?;
    w.flush().await
}

async fn read_msg<R: AsyncRead + Unpin, T: for<'a> Deserialize<'a>>(r: &mut R) -> io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_RPC_BYTES {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "rpc too large"));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

// ---------------------------------------------------------------------------------------
// Client side

/// The leader's record of which followers accepted its appends, stamped with the instant the
/// append was SENT (C3 lease reads). A follower that accepts an append from a committed vote
/// refuses to vote for anyone else for openraft's leader lease (= election-max) after it
/// received it, and campaigns itself only later still; so while a quorum has accepted appends
/// sent within a window well inside that lease, no other primary can exist and the leader may
/// answer reads from its applied state without a read-index round.
#[derive(Default)]
pub struct LeaseClock {
    acks: std::sync::Mutex<std::collections::HashMap<NodeId, (Vote, std::time::Instant)>>,
}

impl LeaseClock {
    fn record(&self, target: NodeId, vote: Vote, sent: std::time::Instant) {
        let mut acks = self.acks.lock().expect("lease clock");
        let e = acks.entry(target).or_insert((vote, sent));
        if e.0 != vote || e.1 < sent {
            *e = (vote, sent);
        }
    }

    /// How many of `peers` accepted an append of `vote` sent less than `window` ago.
    pub fn fresh_acks(
        &self,
        vote: &Vote,
        peers: impl Iterator<Item = NodeId>,
        window: Duration,
    ) -> usize {
        let acks = self.acks.lock().expect("lease clock");
        peers
            .filter(|p| {
                acks.get(p)
                    .is_some_and(|(v, t)| v == vote && t.elapsed() < window)
            })
            .count()
    }
}

/// Creates one [`PeerClient`] per target for openraft.
pub struct NetFactory {
    pub lease: std::sync::Arc<LeaseClock>,
}

impl RaftNetworkFactory<TypeConfig> for NetFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &CtrlNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.raft.clone(),
            conn: None,
            lease: self.lease.clone(),
        }
    }
}

pub struct PeerClient {
    target: NodeId,
    addr: String,
    conn: Option<TcpStream>,
    lease: std::sync::Arc<LeaseClock>,
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
        if self.conn.is_none() {
            let connect = TcpStream::connect(&self.addr);
            let s = match tokio::time::timeout(ttl.min(CONNECT_TIMEOUT), connect).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return Err(CallError::Unreachable(e)),
                Err(_) => {
                    return Err(CallError::Unreachable(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "connect timed out",
                    )))
                }
            };
            let _ = s.set_nodelay(true);
            self.conn = Some(s);
        }
        let conn = self.conn.as_mut().expect("connected above");
        write_msg(conn, req).await.map_err(CallError::Network)?;
        read_msg(conn).await.map_err(CallError::Network)
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
            read_msg(conn).await.map_err(CallError::Network)
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
        if self.conn.is_none() {
            let connect = TcpStream::connect(&self.addr);
            let s = match tokio::time::timeout(ttl.min(CONNECT_TIMEOUT), connect).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return Err(CallError::Unreachable(e)),
                Err(_) => {
                    return Err(CallError::Unreachable(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "connect timed out",
                    )))
                }
            };
            let _ = s.set_nodelay(true);
            self.conn = Some(s);
        }
        let conn = self.conn.as_mut().expect("connected above");
        write_msg(conn, req).await.map_err(CallError::Network)
    }
}

/// Largest snapshot file accepted from a peer.
pub const MAX_SNAPSHOT_BYTES: u64 = 64 << 30;

/// Receives the `len` bytes of a snapshot file that follow its header into a temporary file
/// in `dir`, then hands it to Raft to install.
async fn receive_snapshot(
    stream: &mut TcpStream,
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
        let (vote, sent) = (rpc.vote, std::time::Instant::now());
        match self
            .call(&RpcRequest::Append(rpc), option.hard_ttl())
            .await
            .map_err(rpc_err)?
        {
            RpcReply::Append(Ok(r)) => {
                // Every answer but HigherVote means the follower took our vote (and its lease).
                if vote.is_committed() && !matches!(r, AppendEntriesResponse::HigherVote(_)) {
                    self.lease.record(self.target, vote, sent);
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
// Server side

/// Accepts peer connections on the raft address and hands each RPC to the local Raft.
pub async fn serve(listener: TcpListener, raft: Raft, node_id: NodeId, dir: std::path::PathBuf) {
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
        let raft = raft.clone();
        let dir = dir.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_peer(stream, raft, &dir).await {
                if e.kind() != io::ErrorKind::UnexpectedEof {
                    eprintln!("node {node_id}: raft peer {peer}: {e}");
                }
            }
        });
    }
}

async fn serve_peer(mut stream: TcpStream, raft: Raft, dir: &std::path::Path) -> io::Result<()> {
    loop {
        let req: RpcRequest =
            match tokio::time::timeout(RPC_IDLE_TIMEOUT, read_msg(&mut stream)).await {
                Ok(r) => r?,
                Err(_) => return Ok(()),
            };
        let reply = match req {
            RpcRequest::Append(r) => RpcReply::Append(raft.append_entries(r).await),
            RpcRequest::Vote(r) => RpcReply::Vote(raft.vote(r).await),
            RpcRequest::Snapshot { vote, meta, len } => {
                receive_snapshot(&mut stream, &raft, dir, vote, meta, len).await?
            }
        };
        write_msg(&mut stream, &reply).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn committed(term: u64, leader: NodeId) -> Vote {
        let mut v = Vote::new(term, leader);
        v.commit();
        v
    }

    #[test]
    fn lease_counts_only_fresh_acks_of_the_same_vote() {
        let clock = LeaseClock::default();
        let v = committed(3, 1);
        let window = Duration::from_millis(75);
        let now = Instant::now();
        clock.record(2, v, now);
        clock.record(3, v, now - Duration::from_millis(200)); // too old
        assert_eq!(clock.fresh_acks(&v, [2, 3].into_iter(), window), 1);
        // An ack of another (older) vote does not count for this one.
        clock.record(3, committed(2, 1), now);
        assert_eq!(clock.fresh_acks(&v, [2, 3].into_iter(), window), 1);
        // The newest send wins; a late reply to an older send does not move the clock back.
        clock.record(3, v, now);
        clock.record(3, v, now - Duration::from_millis(500));
        assert_eq!(clock.fresh_acks(&v, [2, 3].into_iter(), window), 2);
        assert_eq!(
            clock.fresh_acks(&committed(4, 2), [2, 3].into_iter(), window),
            0
        );
    }
}
