//! Forwarding (C16): a standby's connections to the primary's raft port for client requests,
//! and, on kept connections of their own, a candidate's pre-vote asking (C15) and the
//! primary's questions of the consistency check (C19). The two kinds never share a connection:
//! forwarded requests and their replies (a listing's pages) are bulk, the questions are control
//! traffic with the raft link's priority (`raft/frame.rs::Traffic`), so a pre-vote never waits
//! behind a page in one stream, nor a page take the priority queue.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use crate::base::cluster_id::Identity;
use crate::base::ids::NodeId;
use crate::base::tls::PeerTls;
use crate::raft::frame::{
    read_reply, write_msg, PeerStream, PreVoteRequest, RpcReply, RpcRequest, Traffic,
    CONNECT_TIMEOUT,
};

/// Forwarded requests in flight at once from one standby; more are answered as before (not
/// primary + hint), so a crowd cannot take the primary's peer connections.
pub const MAX_FORWARDS: usize = 32;
/// Idle forwarding connections kept per primary.
const MAX_IDLE_FORWARD_CONNS: usize = 8;
/// An idle forwarding connection older than this is not reused (the primary closes idle peer
/// connections after [`crate::raft::frame::RPC_IDLE_TIMEOUT`]).
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
/// Kept connections per member, address and kind of traffic.
type PoolKey = (NodeId, String, Traffic);

/// A standby's forwarding client: dials the primary's raft port (mutual TLS, verifying that
/// the peer is the member it dials), keeps a few idle connections per primary.
pub struct Forwarder {
    tls: Option<PeerTls>,
    max_rpc: usize,
    /// C20: this node's cluster, stamped on every request and checked on every reply.
    identity: Arc<Identity>,
    idle: Mutex<HashMap<PoolKey, Vec<IdleConn>>>,
    slots: Semaphore,
}

impl Forwarder {
    pub fn new(tls: Option<PeerTls>, max_rpc: usize, identity: Arc<Identity>) -> Forwarder {
        Forwarder {
            tls,
            max_rpc,
            identity,
            idle: Mutex::new(HashMap::new()),
            slots: Semaphore::new(MAX_FORWARDS),
        }
    }

    /// Whether the raft port authenticates members (mutual TLS).
    pub fn authenticated(&self) -> bool {
        self.tls.is_some()
    }

    fn take_idle(&self, key: &PoolKey) -> Option<PeerStream> {
        let mut idle = self.idle.lock().expect("forward pool");
        let v = idle.get_mut(key)?;
        while let Some((at, s)) = v.pop() {
            if at.elapsed() < FORWARD_CONN_IDLE {
                return Some(s);
            }
        }
        None
    }

    fn put_idle(&self, key: PoolKey, s: PeerStream) {
        let mut idle = self.idle.lock().expect("forward pool");
        let v = idle.entry(key).or_default();
        if v.len() < MAX_IDLE_FORWARD_CONNS {
            v.push((std::time::Instant::now(), s));
        }
    }

    async fn dial(
        &self,
        target: NodeId,
        addr: &str,
        bound: Duration,
        traffic: Traffic,
    ) -> io::Result<PeerStream> {
        use std::os::fd::AsRawFd;
        let timed_out = |what: &str| io::Error::new(io::ErrorKind::TimedOut, what.to_string());
        let bound = bound.min(CONNECT_TIMEOUT);
        let s = tokio::time::timeout(bound, TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out("connect timed out"))??;
        crate::raft::frame::raft_socket(&s);
        if traffic == Traffic::Bulk {
            let v6 = s.local_addr().is_ok_and(|a| a.is_ipv6());
            crate::raft::frame::set_traffic(s.as_raw_fd(), v6, Traffic::Bulk);
        }
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
        match self
            .ask(target, addr, &RpcRequest::PreVote(req.clone()), within)
            .await
        {
            Some(RpcReply::PreVote(granted)) => Some(granted),
            _ => None,
        }
    }

    /// Sends `msg` (a question that changes nothing if asked twice: a pre-vote, a digest) to
    /// member `target` at raft address `addr` and returns its answer, within `within`, on a
    /// kept connection or a new one. `None`: no answer (unreachable, refused, an earlier build
    /// that does not know the question and closed the connection).
    pub async fn ask(
        &self,
        target: NodeId,
        addr: &str,
        msg: &RpcRequest,
        within: Duration,
    ) -> Option<RpcReply> {
        let until = tokio::time::Instant::now() + within;
        let key = (target, addr.to_string(), Traffic::Control);
        for kept in [true, false] {
            let mut conn = if kept {
                match self.take_idle(&key) {
                    Some(c) => c,
                    None => continue,
                }
            } else {
                let left = until.saturating_duration_since(tokio::time::Instant::now());
                self.dial(target, addr, left, Traffic::Control).await.ok()?
            };
            let res = tokio::time::timeout_at(until, async {
                write_msg(&mut conn, msg, self.identity.tag()).await?;
                read_reply(&mut conn, self.max_rpc, &self.identity, addr).await
            })
            .await;
            match res {
                Ok(Ok(reply)) => {
                    self.put_idle(key, conn);
                    return Some(reply);
                }
                // Refused (C19, C20): asking again changes nothing. The peer keeps the
                // connection open (it judges each message alone): keep it too.
                Ok(Err(e)) if e.kind() == io::ErrorKind::PermissionDenied => {
                    self.put_idle(key, conn);
                    return None;
                }
                // A kept connection the peer closed meanwhile: once more on a new one.
                Ok(Err(_)) if kept => continue,
                _ => return None,
            }
        }
        None
    }

    /// Issue 26 (C17): asks the node at raft address `addr`, expected to be node `target`, who
    /// it is, on a new connection within `within`: its answer, or why there is none, in words.
    pub async fn identify(
        &self,
        target: NodeId,
        addr: &str,
        within: Duration,
    ) -> Result<RpcReply, crate::base::cause::Cause> {
        use crate::base::cause::Cause;
        let until = tokio::time::Instant::now() + within;
        let name = crate::base::tls::node_name(target);
        // A node started a moment ago may not listen yet: dialled again until `within`. Any
        // other failure (a name, TLS, a timeout) is the answer at once (issue 36).
        let mut conn = loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            match self.dial(target, addr, left, Traffic::Control).await {
                Ok(c) => break c,
                Err(e) => match Cause::of_io(&e, &name) {
                    Cause::NoListener if left > Duration::from_millis(200) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    cause => return Err(cause),
                },
            }
        };
        let res = tokio::time::timeout_at(until, async {
            write_msg(&mut conn, &RpcRequest::Identify, self.identity.tag()).await?;
            read_reply(&mut conn, self.max_rpc, &self.identity, addr).await
        })
        .await;
        match res {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) if e.kind() == io::ErrorKind::PermissionDenied => {
                Err(Cause::Other(e.to_string()))
            }
            // A TLS alert sent by the peer at its first read (it refused this side's
            // certificate) is named as such.
            Ok(Err(e)) if e.get_ref().is_some_and(|i| i.is::<rustls::Error>()) => {
                Err(Cause::of_io(&e, &name))
            }
            Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Err(Cause::Other(
                "it closed the connection without answering who it is: with mutual TLS a \
                 --join node admits only the members its --cluster names (name the current \
                 members there too), or it is not an xce-controller of this build"
                    .into(),
            )),
            Ok(Err(e)) => Err(Cause::Other(format!(
                "no answer to who it is ({e}): not an xce-controller of this build?"
            ))),
            Err(_) => Err(Cause::Timeout),
        }
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
        let key = (target, addr.to_string(), Traffic::Bulk);
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
                match self.dial(target, addr, left, Traffic::Bulk).await {
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
                write_msg(&mut conn, &req, self.identity.tag())
                    .await
                    .map_err(|e| (false, e))?;
                read_reply(&mut conn, self.max_rpc, &self.identity, addr)
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
                // Refused before it was read (C19, C20): not applied.
                Ok(Err((_, e))) if e.kind() == io::ErrorKind::PermissionDenied => {
                    return Forwarded::Refused
                }
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
