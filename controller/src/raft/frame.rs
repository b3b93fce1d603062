//! The raft port's messages (C13): each message a 4-byte big-endian length, then the
//! message in postcard (compact binary serde; never JSON), then the sender's cluster tag
//! (C20, [`append_tag`]); the limits both ends apply. The
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

use crate::base::cluster_id::{ClusterTag, Identity};
use crate::base::ids::{LogId, NodeId, SnapshotMeta, Vote};
use crate::raft::types::TypeConfig;
use crate::sm::digest::Digest;

/// Largest raft RPC accepted by default: [`max_rpc_bytes`] of the client's frame limit.
pub const MAX_RPC_BYTES: usize = 256 << 20;
/// Upper bound on connecting to a peer, whatever openraft's TTL.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// Linux's `TC_PRIO_INTERACTIVE`: the band a `pfifo_fast` or `prio` queue serves first.
const SOCKET_PRIORITY: libc::c_int = 6;
/// DSCP CS6 ("network control", RFC 4594) in the IP header's traffic-class byte: what routers
/// and a `prio`/DSCP-aware queue send ahead of bulk traffic.
const DSCP_CS6: libc::c_int = 48 << 2;

/// C15 (amended): a raft connection (either end) goes out first where the host or the network
/// has a priority queue — heartbeats and votes are small and must not wait behind bulk bytes
/// (listing replies, snapshots) leaving the same interface: no Nagle delay, socket priority 6,
/// DSCP CS6. Best effort: an option the kernel refuses (e.g. no `CAP_NET_ADMIN` for priorities
/// above 6 — 6 needs none) is left as it was. A connection that carries bulk instead (a
/// standby's forwarded requests and their replies, C16; a snapshot) is set back to
/// [`Traffic::Bulk`].
pub fn raft_socket(s: &tokio::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let _ = s.set_nodelay(true);
    let v6 = s.local_addr().is_ok_and(|a| a.is_ipv6());
    set_traffic(s.as_raw_fd(), v6, Traffic::Control);
}

/// What a raft-port connection carries, for the queues of the host and the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Traffic {
    /// Appends, heartbeats, votes, pre-votes, the consistency check's questions: priority 6
    /// and CS6.
    Control,
    /// Forwarded client requests and their replies (a listing's pages), snapshots sent to a
    /// follower: the default priority and class, so they never claim the queue that control
    /// traffic is served from.
    Bulk,
}

/// Marks the socket `fd` (IPv6 when `v6`) for `t`. The socket must stay open for the call.
pub fn set_traffic(fd: std::os::fd::RawFd, v6: bool, t: Traffic) {
    let (class, priority) = match t {
        Traffic::Control => (DSCP_CS6, SOCKET_PRIORITY),
        Traffic::Bulk => (0, 0),
    };
    let set = |level: libc::c_int, name: libc::c_int, value: libc::c_int| {
        // SAFETY: setsockopt(2) on a socket the caller keeps open, with a c_int we own and
        // its size; a failure is only an error code.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    // The class first: setting IP_TOS also sets the socket's priority from it.
    if v6 {
        set(libc::IPPROTO_IPV6, libc::IPV6_TCLASS, class);
    } else {
        set(libc::IPPROTO_IP, libc::IP_TOS, class);
    }
    set(libc::SOL_SOCKET, libc::SO_PRIORITY, priority);
}
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
    /// C19: the peer's state digest at the checkpoint entry `index` (`node/check.rs`).
    Digest {
        index: u64,
    },
    /// C19: the primary `from`, leading in `term`, found the peer's digest at `index` differs
    /// from the history's (`majority`, a name older than C19's fifth round: the digest of the
    /// members that applied the higher entry where they first differ, `node/check.rs`): the peer
    /// checks that against its own and, if so, stops voting and serving (`raft/diverged.rs`).
    Diverged {
        index: u64,
        majority: Digest,
        from: NodeId,
        term: u64,
    },
    /// Issue 26 (C17): who is there? Asked by a primary of a node it is about to add: the
    /// answer must be that node, blank (a `--join` node), of no other cluster.
    Identify,
    /// C15 (amended): the last message of a connection the leader gives up on while it lives
    /// (its peer answered none of the last requests: a slow or congested link) — unanswered.
    /// The connection's close then is not evidence that the leader died: the follower does
    /// not campaign early on it (`raft/elect.rs`). A peer of an earlier build cannot read it
    /// and closes, which is what it saw before.
    Bye,
    /// C19 (fifth round): the log ids of the entries the peer applied at indexes
    /// `from..=to` (the check's Raft order, `node/check.rs`).
    AppliedIds {
        from: u64,
        to: u64,
    },
    /// C12 (fifth round): where do you stand? Asked by a node that started without data, of
    /// every other voter, before it takes any append or grants any vote
    /// (`raft/standing.rs`). Answered even unstamped (the asker has no cluster id yet); the
    /// connection was admitted as a member's.
    Standing,
}

/// C19: a node's answer about its state digest at a checkpoint entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DigestAnswer {
    Ready(Digest),
    /// Not applied that entry yet, or still hashing.
    NotYet,
    /// Applied past it without a digest there (installed a snapshot past it, or it is older
    /// than the digests kept).
    Gone,
    /// This node diverged earlier, at this index: it answers nothing else.
    Diverged(u64),
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
    /// C19: the answer to [`RpcRequest::Digest`].
    Digest(DigestAnswer),
    /// C19: whether the peer took a [`RpcRequest::Diverged`] (its own digest differs).
    Ack(bool),
    /// C20, C19: the message was refused before it was read: of another cluster (and why),
    /// or this node diverged. The connection stays open; each message is judged alone.
    Refused(String),
    /// Issue 26: the answer to [`RpcRequest::Identify`]: this node's id, whether it holds a
    /// membership (initialised), and its cluster's id (None: none yet).
    Identity {
        id: NodeId,
        initialised: bool,
        cluster: Option<[u8; 16]>,
    },
    /// C12 (fifth round): the answer to [`RpcRequest::Standing`].
    Standing(Standing),
    /// C19 (fifth round): the answer to [`RpcRequest::AppliedIds`] (`None`: not every one of
    /// them is known any more, or not applied yet).
    AppliedIds(Option<Vec<LogId>>),
}

/// C12 (fifth round): what a node tells a node that started without data of itself — the
/// promises it holds (its vote), how far its log goes, and the membership it holds (so the
/// asker knows whom else to ask). Bounded by [`Standing::plausible`] before it is used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    /// Its current vote (openraft's; at least what it has on disk).
    pub vote: Vote,
    /// The index of its last log entry (`None`: an empty log).
    pub last_log_index: Option<u64>,
    /// The log id of the membership it holds (`None`: the initial one, or none).
    pub membership: Option<LogId>,
    /// Its voters, one set per config (two during a joint change; empty: no membership yet).
    pub configs: Vec<Vec<NodeId>>,
    /// The raft address of every node of that membership.
    pub nodes: Vec<(NodeId, String)>,
}

impl Standing {
    /// Whether the answer is within what any cluster can hold (C1: at most 8 nodes, one or two
    /// configs, short addresses): a peer's bytes are checked before they are used.
    pub fn plausible(&self) -> bool {
        const MAX_NODES: usize = 16;
        self.configs.len() <= 2
            && self.configs.iter().all(|c| c.len() <= MAX_NODES)
            && self.nodes.len() <= MAX_NODES
            && self.nodes.iter().all(|(_, a)| a.len() <= 512)
    }
}

/// C20: the last bytes of every raft message: the sender's cluster id (16 bytes, all zero:
/// none), its restore epoch (4 bytes, little-endian), then this mark. postcard ignores bytes
/// after a message, so an earlier build reads a stamped message as before; this build reads
/// a message without the mark (an earlier build's) as unstamped.
pub(crate) const TAG_MARK: &[u8; 8] = b"XCETAG01";
/// The stamp's length.
pub(crate) const TAG_BYTES: usize = 16 + 4 + 8;

/// Appends the stamp of `tag` (`None`: no id) to a message.
pub(crate) fn append_tag(buf: &mut Vec<u8>, tag: Option<ClusterTag>) {
    let t = tag.unwrap_or(ClusterTag {
        id: [0; 16],
        epoch: 0,
    });
    buf.extend_from_slice(&t.id);
    buf.extend_from_slice(&t.epoch.to_le_bytes());
    buf.extend_from_slice(TAG_MARK);
}

/// C11 (fifth round): the mark that ends a follower's refusal window on its answer to an
/// append: `[postcard reply][refusal ms, u32 LE][REFUSAL_MARK][stamp]`. An earlier build reads
/// the reply as before (postcard ignores the bytes after a message); this build reads a reply
/// without it (an earlier build's) as "refusal unknown", which counts for no lease read.
pub(crate) const REFUSAL_MARK: &[u8; 8] = b"XCEREF01";

/// A reply to an append, framed with the sender's refusal window (`refusal_ms`: how long it
/// refuses every other candidate after accepting an append — its election-max).
pub(crate) fn frame_append_reply(
    reply: &RpcReply,
    refusal_ms: u32,
    tag: Option<ClusterTag>,
) -> io::Result<Vec<u8>> {
    let mut buf = postcard::to_extend(reply, vec![0u8; 4]).map_err(io::Error::other)?;
    buf.extend_from_slice(&refusal_ms.to_le_bytes());
    buf.extend_from_slice(REFUSAL_MARK);
    append_tag(&mut buf, tag);
    let len = u32::try_from(buf.len() - 4).map_err(io::Error::other)?;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf)
}

/// C11 (fifth round): the refusal window a reply's sender stated ([`frame_append_reply`]), if
/// it stated one. `body`: the reply without its length prefix, stamp included.
pub(crate) fn refusal_of(body: &[u8]) -> Option<u32> {
    let (msg, _) = split_tag(body);
    let rest = msg.strip_suffix(REFUSAL_MARK)?;
    let at = rest.len().checked_sub(4)?;
    Some(u32::from_le_bytes(rest[at..].try_into().ok()?))
}

/// A message's body without its stamp, and the tag the stamp names (`None`: no id, or no
/// stamp at all).
pub(crate) fn split_tag(body: &[u8]) -> (&[u8], Option<ClusterTag>) {
    if body.len() < TAG_BYTES || !body.ends_with(TAG_MARK) {
        return (body, None);
    }
    let at = body.len() - TAG_BYTES;
    let (msg, stamp) = body.split_at(at);
    let id: [u8; 16] = stamp[..16].try_into().expect("16 bytes");
    let epoch = u32::from_le_bytes(stamp[16..20].try_into().expect("4 bytes"));
    let tag = (id != [0; 16]).then_some(ClusterTag { id, epoch });
    (msg, tag)
}

/// A reply as its receiver takes it (C20): refused when its stamp names another cluster than
/// this node's, or when the peer refused the request (logged, at most once per interval per
/// peer); else decoded.
pub(crate) fn open_reply(body: &[u8], me: &Identity, peer: &str) -> io::Result<RpcReply> {
    let (msg, tag) = split_tag(body);
    if let (Some(ours), Some(theirs)) = (me.tag(), tag) {
        if ours != theirs {
            let why = crate::base::cluster_id::Refusal::Another { ours, theirs };
            me.log_limited(&format!("reply {peer}"), |skipped| {
                crate::log_warn!(
                    "raft peer {peer}: its reply is {why}; dropped{}",
                    more(skipped)
                )
            });
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                why.to_string(),
            ));
        }
    }
    let reply: RpcReply =
        postcard::from_bytes(msg).map_err(|e| invalid(&format!("bad rpc reply: {e}")))?;
    if let RpcReply::Refused(why) = &reply {
        // Issue 26: a member says this node is no member (removed): the watcher decides.
        crate::raft::removed::refused(why);
        me.log_limited(&format!("refused by {peer}"), |skipped| {
            crate::log_warn!(
                "raft peer {peer} refused this node's message: {why}{}",
                more(skipped)
            )
        });
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refused: {why}"),
        ));
    }
    Ok(reply)
}

/// " (N more since the last line)" when N > 0.
pub(crate) fn more(skipped: u64) -> String {
    if skipped == 0 {
        String::new()
    } else {
        format!(" ({skipped} more since the last such line)")
    }
}

/// A peer connection: plain TCP or TLS over it.
pub trait PeerIo: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> PeerIo for T {}
pub(crate) type PeerStream = Box<dyn PeerIo>;

pub(crate) fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// One message framed: its length (4 bytes, big-endian), its postcard encoding, the stamp of
/// `tag` ([`append_tag`]).
pub(crate) fn frame<T: Serialize>(msg: &T, tag: Option<ClusterTag>) -> io::Result<Vec<u8>> {
    let mut buf = postcard::to_extend(msg, vec![0u8; 4]).map_err(io::Error::other)?;
    append_tag(&mut buf, tag);
    let len = u32::try_from(buf.len() - 4).map_err(|_| io::Error::other("rpc too large"))?;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf)
}

/// Writes one message ([`frame`]).
pub(crate) async fn write_msg<W: AsyncWrite + Unpin + ?Sized, T: Serialize>(
    w: &mut W,
    msg: &T,
    tag: Option<ClusterTag>,
) -> io::Result<()> {
    let buf = frame(msg, tag)?;
    w.write_all(&buf).await?;
    w.flush().await
}

/// Reads one reply of at most `limit` bytes and opens it ([`open_reply`]). The length is
/// checked before anything else is read, and the buffer grows by at most [`READ_STEP`] per
/// read, so memory follows the bytes that arrived, never the length claimed. Once the prefix
/// arrived the rest must come within [`FRAME_TIMEOUT`].
pub(crate) async fn read_reply<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    limit: usize,
    me: &Identity,
    peer: &str,
) -> io::Result<RpcReply> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let body = read_rest(r, len, limit).await?;
    open_reply(&body, me, peer)
}

/// The rest of a message whose length prefix `len` was read: its body, stamp included.
pub(crate) async fn read_rest<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    len: [u8; 4],
    limit: usize,
) -> io::Result<Vec<u8>> {
    tokio::time::timeout(FRAME_TIMEOUT, read_body(r, len, limit))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "rpc frame timed out"))?
}

/// A message's postcard body decoded.
pub(crate) fn decode<T: DeserializeOwned>(msg: &[u8]) -> io::Result<T> {
    postcard::from_bytes(msg).map_err(|e| invalid(&format!("bad rpc: {e}")))
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

#[cfg(test)]
mod tests {
    /// C15 (amended): both ends of a raft connection ask for the priority band and CS6.
    #[test]
    fn a_raft_socket_asks_for_priority_and_cs6() {
        use std::os::fd::AsRawFd;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let c = tokio::net::TcpStream::connect(l.local_addr().unwrap())
                .await
                .unwrap();
            let (a, _) = l.accept().await.unwrap();
            for s in [&c, &a] {
                raft_socket(s);
                let get = |level, name| {
                    let mut v: libc::c_int = -1;
                    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
                    // SAFETY: getsockopt(2) into a c_int we own, with its size.
                    let rc = unsafe {
                        libc::getsockopt(
                            s.as_raw_fd(),
                            level,
                            name,
                            (&mut v as *mut libc::c_int).cast(),
                            &mut len,
                        )
                    };
                    assert_eq!(rc, 0);
                    v
                };
                assert_eq!(get(libc::SOL_SOCKET, libc::SO_PRIORITY), SOCKET_PRIORITY);
                assert_eq!(get(libc::IPPROTO_IP, libc::IP_TOS), DSCP_CS6);
                assert!(s.nodelay().unwrap());
                // A connection that carries forwarded bulk gives the priority back, and can
                // take it again.
                set_traffic(s.as_raw_fd(), false, Traffic::Bulk);
                assert_eq!(get(libc::SOL_SOCKET, libc::SO_PRIORITY), 0);
                assert_eq!(get(libc::IPPROTO_IP, libc::IP_TOS), 0);
                set_traffic(s.as_raw_fd(), false, Traffic::Control);
                assert_eq!(get(libc::SOL_SOCKET, libc::SO_PRIORITY), SOCKET_PRIORITY);
                assert_eq!(get(libc::IPPROTO_IP, libc::IP_TOS), DSCP_CS6);
            }
        });
    }

    use super::*;

    /// C20: the stamp rides after the message. A stamped message reads back with its tag; an
    /// earlier build, which decodes the whole body with postcard, reads the same message as
    /// before (postcard ignores what follows); a message without a stamp reads as unstamped.
    #[test]
    fn the_stamp_is_invisible_to_earlier_builds() {
        let tag = ClusterTag {
            id: [7; 16],
            epoch: 2,
        };
        let msg = RpcRequest::PreVote(PreVoteRequest {
            term: 5,
            candidate: 2,
            last_log_id: None,
        });
        for t in [Some(tag), None] {
            let f = frame(&msg, t).unwrap();
            let body = &f[4..];
            assert_eq!(
                u32::from_be_bytes(f[..4].try_into().unwrap()) as usize,
                body.len()
            );
            let (m, got) = split_tag(body);
            assert_eq!(got, t);
            assert!(matches!(decode::<RpcRequest>(m), Ok(RpcRequest::PreVote(p)) if p.term == 5));
            // What an earlier build does with the whole body.
            assert!(matches!(
                postcard::from_bytes::<RpcRequest>(body),
                Ok(RpcRequest::PreVote(p)) if p.term == 5
            ));
        }
        let plain = postcard::to_stdvec(&msg).unwrap();
        assert_eq!(split_tag(&plain), (&plain[..], None));
        assert_eq!(split_tag(b"short"), (&b"short"[..], None));
    }

    /// C11 (fifth round): an answer to an append states the follower's refusal window; an
    /// earlier build reads the answer as before, and this build reads an answer without it as
    /// "not stated".
    #[test]
    fn the_refusal_window_rides_on_append_answers_unseen_by_earlier_builds() {
        let tag = Some(ClusterTag {
            id: [3; 16],
            epoch: 0,
        });
        let reply = RpcReply::Append(Ok(AppendEntriesResponse::Success));
        for t in [tag, None] {
            let f = frame_append_reply(&reply, 120, t).unwrap();
            let body = &f[4..];
            assert_eq!(
                u32::from_be_bytes(f[..4].try_into().unwrap()) as usize,
                body.len()
            );
            assert_eq!(refusal_of(body), Some(120));
            assert_eq!(split_tag(body).1, t);
            let (m, _) = split_tag(body);
            assert!(matches!(
                decode::<RpcReply>(m),
                Ok(RpcReply::Append(Ok(AppendEntriesResponse::Success)))
            ));
            // An earlier build: the whole body, its stamp and the refusal ignored.
            assert!(matches!(
                postcard::from_bytes::<RpcReply>(body),
                Ok(RpcReply::Append(Ok(AppendEntriesResponse::Success)))
            ));
            // A reply of an earlier build states nothing.
            assert_eq!(refusal_of(&frame(&reply, t).unwrap()[4..]), None);
        }
        assert_eq!(refusal_of(b"XCEREF01"), None, "a mark without its number");
    }

    /// A reply stamped with another cluster is refused; a refusal is an error that says why.
    #[test]
    fn replies_of_another_cluster_or_refusals_are_errors() {
        use crate::base::cluster_id::{Belonging, Identity};
        let ours = ClusterTag {
            id: [1; 16],
            epoch: 0,
        };
        let me = Identity::detached(Belonging::Member(ours));
        let body = |r: &RpcReply, t| frame(r, t).unwrap()[4..].to_vec();
        let ok = body(&RpcReply::PreVote(true), Some(ours));
        assert!(matches!(
            open_reply(&ok, &me, "p"),
            Ok(RpcReply::PreVote(true))
        ));
        let unstamped = body(&RpcReply::PreVote(true), None);
        assert!(
            open_reply(&unstamped, &me, "p").is_ok(),
            "a node of no cluster yet"
        );
        let other = body(
            &RpcReply::PreVote(true),
            Some(ClusterTag {
                id: [2; 16],
                epoch: 0,
            }),
        );
        let e = open_reply(&other, &me, "p").err().expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        let refused = body(&RpcReply::Refused("of another cluster".into()), None);
        let e = open_reply(&refused, &me, "p").err().expect("refused");
        assert!(e.to_string().contains("another cluster"), "{e}");
    }
}
