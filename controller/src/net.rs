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
    Snapshot {
        vote: Vote,
        meta: SnapshotMeta,
        data: Vec<u8>,
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

/// Creates one [`PeerClient`] per target for openraft.
pub struct NetFactory;

impl RaftNetworkFactory<TypeConfig> for NetFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &CtrlNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.raft.clone(),
            conn: None,
        }
    }
}

pub struct PeerClient {
    target: NodeId,
    addr: String,
    conn: Option<TcpStream>,
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
        match self
            .call(&RpcRequest::Append(rpc), option.hard_ttl())
            .await
            .map_err(rpc_err)?
        {
            RpcReply::Append(Ok(r)) => Ok(r),
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

    /// The whole snapshot in one message (`generic-snapshot-data`): the job store is small.
    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>> {
        let req = RpcRequest::Snapshot {
            vote,
            meta: snapshot.meta.clone(),
            data: snapshot.snapshot.into_inner(),
        };
        let reply = tokio::select! {
            closed = cancel => return Err(StreamingError::Closed(closed)),
            r = self.call(&req, option.hard_ttl()) => r,
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
pub async fn serve(listener: TcpListener, raft: Raft, node_id: NodeId) {
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
        tokio::spawn(async move {
            if let Err(e) = serve_peer(stream, raft).await {
                if e.kind() != io::ErrorKind::UnexpectedEof {
                    eprintln!("node {node_id}: raft peer {peer}: {e}");
                }
            }
        });
    }
}

async fn serve_peer(mut stream: TcpStream, raft: Raft) -> io::Result<()> {
    loop {
        let req: RpcRequest =
            match tokio::time::timeout(RPC_IDLE_TIMEOUT, read_msg(&mut stream)).await {
                Ok(r) => r?,
                Err(_) => return Ok(()),
            };
        let reply = match req {
            RpcRequest::Append(r) => RpcReply::Append(raft.append_entries(r).await),
            RpcRequest::Vote(r) => RpcReply::Vote(raft.vote(r).await),
            RpcRequest::Snapshot { vote, meta, data } => {
                let snapshot = Snapshot {
                    meta,
                    snapshot: Box::new(std::io::Cursor::new(data)),
                };
                RpcReply::Snapshot(raft.install_full_snapshot(vote, snapshot).await)
            }
        };
        write_msg(&mut stream, &reply).await?;
    }
}
