//! Connection state: the socket a context talks through, where it points, and how requests go
//! out on it. Nothing here knows about failovers, budgets or callbacks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cap;
use crate::error::Error;
use crate::failover::log::{xlog, Level};
use crate::failover::rotate::{Endpoint, Rotator};
use crate::failover::suspicion::RoundTrips;
use crate::transport::resolve;
use crate::transport::{Connection, LookupFailure, Progress, Waker};
use crate::wire::{ClientId, Limits, Op, Reply, RequestHead};

/// How long a connect runs alone before the next master is tried beside it (F2, F25): far
/// above a connect's time on a working network, far below the connect timeout.
pub const RACE_STAGGER: Duration = Duration::from_millis(200);

/// One context's connection: the masters and the cursor over them, the socket, its `seq`.
pub struct Link {
    pub rotator: Rotator,
    pub conn: Option<Connection>,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// C13: sent in every request (empty: none).
    pub auth_token: String,
    pub limits: Limits,
    /// Last `seq` sent; a reply must echo the awaited one (F9).
    pub seq: u64,
    /// Connections opened so far: a request sent on an earlier one is no longer in flight.
    pub epoch: u64,
    /// F29: the `epoch` of the last connection that was asked for the members (a `hello`);
    /// a new connection is asked once, before its first call.
    pub members_epoch: Option<u64>,
    /// F29: the membership version stamped on the `hello` answer the members were last
    /// learned from (0: none). A successful reply stamped with another version makes the
    /// connection due for a `hello` again: a context that stays on one primary learns of
    /// members added later before that primary goes away.
    pub members_version: u64,
    /// F29, P2: the connection (`epoch`) and stamped version of the last `hello` answer whose
    /// members were all known or added: a later answer on that connection stamped with that
    /// version teaches nothing (the primary's list is never older than its stamp), so a
    /// caller's `hello` on the happy path does not walk the list again.
    pub members_learned: Option<(u64, u64)>,
    /// P2: the connection (`epoch`) for which the context's stats were last confirmed to name
    /// the current master. Every writer of `Stats::current_master` writes the current
    /// endpoint, and the current target changes only with a new connection, so a success on
    /// that connection leaves the stats as they are without looking.
    pub stats_epoch: Option<u64>,
    /// F29 for redirects: the `epoch` of the last connection asked for the members it holds
    /// because its hint named no master in rotation (once per connection).
    pub vouch_epoch: Option<u64>,
    /// Why the last connect found no address (F23), for the report of the attempt.
    pub lookup_failure: Option<LookupFailure>,
    /// Recent round trips per op: when a reply is late (F25).
    pub round_trips: RoundTrips,
    /// Names the context in log lines.
    pub tag: String,
    /// F28: requests sent on this link ask a standby to forward them to the primary (set by
    /// the call for each attempt, see `call.rs::Call::forward_due`).
    pub forward: bool,
    /// F25/F28: the last connect raced past a silent current master to another one.
    pub passed_over: bool,
    /// F25/F28: the connection a probe made to the controller that named a new primary, for
    /// the next attempt ([`Link::adopt_spare`]).
    pub spare: Option<Spare>,
    /// F28: the primary to connect to directly beside the first request forwarded through the
    /// standby that named it (once), and the connection that made it ([`Link::adopt_direct`]).
    pub direct_wanted: Option<usize>,
    pub direct: Option<(usize, Connection)>,
    /// Issue 29: the reply deadline of the call in progress follows its reply's progress
    /// (set by each attempt; `None`: a fixed reply timeout).
    pub progress: Option<Progress>,
}

/// F25/F28: a probe's connection to `witness`, which named configured master `named` the
/// primary.
pub struct Spare {
    pub witness: usize,
    pub named: usize,
    pub conn: Connection,
}

impl Link {
    pub fn new(rotator: Rotator, tls: Option<Arc<rustls::ClientConfig>>, tag: String) -> Link {
        Link {
            rotator,
            conn: None,
            tls,
            auth_token: String::new(),
            limits: Limits::default(),
            seq: 0,
            epoch: 0,
            members_epoch: None,
            members_version: 0,
            members_learned: None,
            stats_epoch: None,
            vouch_epoch: None,
            lookup_failure: None,
            round_trips: RoundTrips::default(),
            tag,
            forward: false,
            passed_over: false,
            spare: None,
            direct_wanted: None,
            direct: None,
            progress: None,
        }
    }

    /// F25/F28: the attempt after a probe named a new primary, aimed at it, goes through the
    /// probe's connection at once: to the primary itself when the witness is the primary;
    /// else, with forwarding on, through the witness, which has just vouched for it — so a
    /// primary silent to this client costs no connect given up at [`RACE_STAGGER`] — while a
    /// direct connection to it is tried beside the first request (`direct_wanted`). `true`:
    /// the link is connected (a new connection: the caller notes the reconnect).
    pub fn adopt_spare(&mut self, forward: bool) -> bool {
        let Some(spare) = self.spare.take() else {
            return false;
        };
        if self.rotator.current_master() != Some(spare.named) {
            return false;
        }
        if spare.witness != spare.named {
            if !forward {
                return false;
            }
            xlog!(
                Level::Info,
                "{}: {} names {} the primary: forwarding through it at once",
                self.tag,
                self.rotator.masters()[spare.witness],
                self.rotator.masters()[spare.named]
            );
            self.rotator.set_current(spare.witness);
            self.direct_wanted = Some(spare.named);
        }
        self.take_connection(spare.conn);
        self.passed_over = spare.witness != spare.named;
        true
    }

    /// F28: a direct connection to the primary, made beside a forwarded request, replaces the
    /// forwarding one (still kept) before the next attempt. `true`: it did (a new connection).
    pub fn adopt_direct(&mut self) -> bool {
        let Some((primary, conn)) = self.direct.take() else {
            return false;
        };
        if !self.passed_over || self.conn.is_none() {
            return false;
        }
        xlog!(
            Level::Info,
            "{}: connected to the primary {} directly; no longer forwarding through {}",
            self.tag,
            self.rotator.masters()[primary],
            self.current_endpoint()
        );
        self.rotator.set_current(primary);
        self.take_connection(conn);
        true
    }

    /// F28: `conn`, to the current target (a standby that forwards), becomes the link's
    /// connection, its requests marked for forwarding. The connection it replaces still owes
    /// the reply to the request answered through `conn`: it is abandoned (reset on close, so
    /// that request is never delivered late).
    pub fn adopt_forwarding(&mut self, conn: Connection) {
        if let Some(old) = self.conn.as_mut() {
            old.mark_dead();
        }
        self.take_connection(conn);
        self.passed_over = true;
        self.forward = true;
    }

    /// `conn` (to the current target) becomes the link's connection, a new one.
    fn take_connection(&mut self, conn: Connection) {
        self.conn = Some(conn);
        self.epoch += 1;
        self.lookup_failure = None;
        self.forward = false;
        self.passed_over = false;
        self.spare = None;
        self.direct = None;
    }

    /// F28: beside a request forwarded through a standby that named the primary, a direct
    /// connection to that primary, tried once until the forwarded reply arrives (on
    /// `reply_fd`) or `until`: a reachable primary is used directly from the next attempt on.
    pub fn try_direct(&mut self, waker: &Waker, reply_fd: std::os::fd::RawFd, until: Instant) {
        let Some(primary) = self.direct_wanted.take() else {
            return;
        };
        let ep = &self.rotator.masters()[primary];
        let Some(addrs) = resolve::cached(&ep.host, ep.port) else {
            return;
        };
        let waker = waker.watching(reply_fd);
        let hosts: [(&str, &[SocketAddr]); 1] = [(&ep.host, &addrs)];
        if let Ok((_, conn)) = Connection::connect_race(
            &hosts,
            Duration::ZERO,
            self.tls.as_ref(),
            self.limits,
            until,
            &waker,
        ) {
            self.direct = Some((primary, conn));
        }
    }

    /// Closes the connection, if any.
    pub fn close(&mut self) {
        self.conn = None;
        self.spare = None;
        self.direct = None;
    }

    pub fn current_endpoint(&self) -> Endpoint {
        self.rotator.endpoint(self.rotator.current()).clone()
    }

    /// Whether the kept connection can carry the next request (F21: still our socket).
    pub fn conn_usable(&mut self) -> bool {
        self.conn.as_mut().is_some_and(Connection::usable)
    }

    /// F12: whether the kept connection is alive, asking the socket.
    pub fn conn_alive(&mut self) -> bool {
        self.conn.as_mut().is_some_and(|c| !c.is_dead())
    }

    /// Connects to the current target, replacing any old connection (F5: the old one is closed
    /// first). The connect timeout, name lookup included (F23), is capped by `deadline`.
    ///
    /// With `race`, a target that does not answer within [`RACE_STAGGER`] gets company: the
    /// other configured masters not in `avoid` (those already tried; in rotation order, names
    /// already resolved) are tried beside it, and the first to connect becomes the current one
    /// — a silent master costs the stagger, not the connect timeout (F25, issue 12).
    pub fn connect_current(
        &mut self,
        waker: &Waker,
        connect_timeout: Duration,
        deadline: Option<Instant>,
        race: Option<u64>,
    ) -> Result<(), Error> {
        self.conn = None;
        self.lookup_failure = None;
        self.forward = false;
        self.passed_over = false;
        self.spare = None;
        self.direct_wanted = None;
        self.direct = None;
        let ep = self.current_endpoint();
        let until = cap(Instant::now() + connect_timeout, deadline);
        let addrs = resolve::resolve(&ep.host, ep.port, until, waker).map_err(|e| {
            if let Some(f) = e.lookup_failure() {
                xlog!(Level::Warn, "{}: {}", self.tag, f.describe(&ep.host));
                self.lookup_failure = Some(f);
            }
            e.error()
        })?;
        let others = race.map_or_else(Vec::new, |avoid| self.others_resolved(avoid));
        let conn = if others.is_empty() {
            Connection::connect_addrs(
                &ep.host,
                &addrs,
                self.tls.as_ref(),
                self.limits,
                until,
                waker,
            )?
        } else {
            let masters = self.rotator.masters();
            let mut hosts: Vec<(&str, &[SocketAddr])> = vec![(&ep.host, &addrs)];
            hosts.extend(
                others
                    .iter()
                    .map(|(i, a)| (masters[*i].host.as_str(), a.as_slice())),
            );
            let (k, conn) = Connection::connect_race(
                &hosts,
                RACE_STAGGER,
                self.tls.as_ref(),
                self.limits,
                until,
                waker,
            )?;
            if k > 0 {
                self.passed_over = true;
                let winner = others[k - 1].0;
                xlog!(
                    Level::Info,
                    "{}: {} did not answer; connected to {} instead",
                    self.tag,
                    ep,
                    self.rotator.masters()[winner]
                );
                self.rotator.set_current(winner);
            }
            conn
        };
        self.conn = Some(conn);
        self.epoch += 1;
        Ok(())
    }

    /// One request/reply on the current connection. Returns the reply or the transport error,
    /// and whether the request left (F19: a sent write without reply may have been applied).
    pub fn exchange(
        &mut self,
        waker: &Waker,
        op: &Op,
        head: RequestIds,
        until: Instant,
    ) -> (Result<Reply, Error>, bool) {
        match self.send(waker, op, head, until) {
            Err(e) => (Err(e), false),
            Ok(seq) => match self.conn.as_mut() {
                Some(conn) => (
                    conn.recv_progress(seq, until, self.progress, waker)
                        .map_err(|e| frame_error(op, e)),
                    true,
                ),
                None => (Err(Error::Errno(libc::ENOTCONN)), true),
            },
        }
    }

    /// Sends `op` with the next `seq` on the current connection, expecting a reply; that `seq`,
    /// or why it did not leave.
    pub fn send(
        &mut self,
        waker: &Waker,
        op: &Op,
        ids: RequestIds,
        until: Instant,
    ) -> Result<u64, Error> {
        self.send_head(waker, op, ids, false, until)
    }

    /// Sends a request that gets no reply (F12: `nop`).
    pub fn send_no_reply(
        &mut self,
        waker: &Waker,
        op: &Op,
        ids: RequestIds,
        until: Instant,
    ) -> Result<u64, Error> {
        self.send_head(waker, op, ids, true, until)
    }

    fn send_head(
        &mut self,
        waker: &Waker,
        op: &Op,
        ids: RequestIds,
        no_reply: bool,
        until: Instant,
    ) -> Result<u64, Error> {
        let conn = self.conn.as_mut().ok_or(Error::Errno(libc::ENOTCONN))?;
        self.seq += 1;
        let head = RequestHead {
            seq: self.seq,
            client_id: ids.client_id,
            request_id: ids.request_id,
            no_reply,
            auth_token: &self.auth_token,
            forward_within_ms: if self.forward {
                forward_within_ms(until)
            } else {
                0
            },
        };
        conn.send_op(&head, op, until, waker)?;
        Ok(head.seq)
    }

    /// The configured masters after the current one in rotation order, without those in
    /// `avoid`, whose addresses are known without a lookup (cached or numeric): the hosts a
    /// connect race or a probe can use at once (F25).
    pub fn others_resolved(&self, avoid: u64) -> Vec<(usize, Vec<SocketAddr>)> {
        let Some(c) = self.rotator.current_master() else {
            return Vec::new();
        };
        let masters = self.rotator.masters();
        let n = masters.len();
        (1..n)
            .map(|k| (c + k) % n)
            .filter(|&i| i >= 64 || avoid & (1 << i) == 0)
            .filter_map(|i| resolve::cached(&masters[i].host, masters[i].port).map(|a| (i, a)))
            .collect()
    }
}

/// F28: how long a standby may wait for the primary's answer to a forwarded request: what is
/// left until the client stops waiting for the reply (at least 1 ms: 0 means "do not forward").
pub fn forward_within_ms(until: Instant) -> u32 {
    let left = until.saturating_duration_since(Instant::now()).as_millis();
    left.clamp(1, u128::from(u32::MAX)) as u32
}

/// The identity fields a request carries (F16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestIds {
    pub client_id: ClientId,
    /// 0 for reads and probes; stable across the re-sends of one write.
    pub request_id: u64,
}

/// F22 (amended): a frame over this client's limit is "too big" — terminal, the same on every
/// master — only for an op whose reply can legitimately grow (a listing, which then pages).
/// For any other op it is a protocol error on that connection (already dropped), and the call
/// rotates.
pub fn frame_error(op: &Op, e: Error) -> Error {
    if e == Error::TooBig && !op.reply_can_grow() {
        Error::Proto
    } else {
        e
    }
}
