//! The raft port's messages (C13): each message a 4-byte big-endian length, then the
//! message in postcard (compact binary serde; never JSON); the limits both ends apply. The
//! outgoing side is `link.rs` (openraft's calls) and `forward.rs` (pre-votes, forwarded client
//! requests); the listener is `ports/peer.rs`.

use std::io;
use std::time::Duration;

use openraft::error::{Fatal, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::base::ids::{NodeId, SnapshotMeta, Vote};
use crate::raft::types::TypeConfig;

/// Largest raft RPC accepted by default: [`max_rpc_bytes`] of the client's frame limit.
pub const MAX_RPC_BYTES: usize = 256 << 20;
/// Upper bound on connecting to a peer, whatever openraft's TTL.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// A peer connection idle for this long is closed by the receiving side.
pub const RPC_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// A message that started arriving must be complete within this (slow-loris guard; an append
/// of 8 entries of 64 KiB takes about 4 s on a 1 Mbit/s link).
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(30);
/// A read buffer grows by at most this much per read: memory follows the bytes that came.
pub(crate) const READ_STEP: usize = 64 << 10;

/// The largest raft message a node accepts, sized from the largest client frame it accepts
/// (`client_max`): an AppendEntries carries at most [`crate::raft::propose::MAX_PAYLOAD_ENTRIES`]
/// entries, each at most one client frame (a batch of small writes is bounded by
/// [`crate::raft::propose::MAX_BATCH_BYTES`]), plus the envelope.
pub fn max_rpc_bytes(client_max: usize) -> usize {
    let per_entry = client_max.max(crate::raft::propose::MAX_BATCH_BYTES) + (64 << 10);
    (crate::raft::propose::MAX_PAYLOAD_ENTRIES as usize * per_entry + (1 << 20)).min(MAX_RPC_BYTES)
}

#[derive(Serialize, Deserialize)]
pub(crate) enum RpcRequest {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    /// Followed on the stream by `len` raw bytes: the snapshot file (see
    /// `PeerClient::send_snapshot` in `link.rs`).
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
    /// C15, P14: would the peer vote for this candidate now? (`elect.rs`: pre-vote.)
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
pub(crate) enum RpcRequestRef<'a> {
    Append(&'a AppendEntriesRequest<TypeConfig>),
    Vote(&'a VoteRequest<NodeId>),
}

#[derive(Serialize, Deserialize)]
pub(crate) enum RpcReply {
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
pub(crate) type PeerStream = Box<dyn PeerIo>;

pub(crate) fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// One message: its length (4 bytes, big-endian), then its postcard encoding.
pub(crate) async fn write_msg<W: AsyncWrite + Unpin + ?Sized, T: Serialize>(
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
pub(crate) async fn read_msg<R: AsyncRead + Unpin + ?Sized, T: DeserializeOwned>(
    r: &mut R,
    limit: usize,
) -> io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    read_rest(r, len, limit).await
}

/// The rest of a message whose length prefix `len` was read.
pub(crate) async fn read_rest<R: AsyncRead + Unpin + ?Sized, T: DeserializeOwned>(
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
