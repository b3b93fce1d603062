//! One attempt of a call: connect if needed, confirm the primary and rejoin after a reconnect
//! (F10), send, and await the reply while watching for a changed primary (F25).

use std::time::Instant;

use super::call::{Applied, Call};
use super::hook::run_hook;
use super::link::{forward_within_ms, frame_error};
use super::members;
use super::probe::Probed;
use super::{cap, clog, CallEnv, LoopState};
use crate::error::Error;
use crate::failover::classify::{is_interrupt, is_no_primary_status, AttemptOutcome};
use crate::failover::log::Level;
use crate::transport::{Connection, Progress};
use crate::wire::{Op, OpKind, Reply, RequestHead};

impl Call<'_, '_> {
    /// One attempt: (re)connect if needed, run the hook after a reconnect (F10), send, await.
    /// An answer is left in the call's `reply` (P2: moved once), its status returned.
    pub fn attempt(&mut self) -> Result<i32, AttemptOutcome> {
        let env = self.env;
        let mut state = env.borrow().map_err(AttemptOutcome::Transport)?;
        // Whether this attempt waits for anything before its request (P2: if not, the request
        // leaves at the call's start as far as its deadlines can tell — within the attempt's
        // few microseconds of bookkeeping — and the clock read when the call began serves).
        let mut waited = self.connected(&mut state)? || self.attempts > 0;
        let deadline = self.spec.deadline;
        let until_from = |now: Instant| cap(now + env.options().reply_timeout, deadline);
        let reply_until = || until_from(Instant::now());
        // Issue 29: a reply that is arriving is waited for (F8 detects silence, not slowness).
        state.link.progress = Some(Progress {
            idle: env.options().reply_timeout,
            hard: deadline,
            since: None,
        });
        let hook_hello = state.book.hook_pending && env.callbacks.has_reconnect_hook();
        // A call that is itself a `hello` asks for the members with its own request.
        let op_is_hello = matches!(self.spec.op, Op::Hello(_));
        if hook_hello || (members::due(&state, env) && !op_is_hello) {
            // F10: the hook re-joins the primary; on a standby it could only be redirected.
            // One `hello` tells: a non-primary answer (with its redirect hint) is this
            // attempt's outcome, and the hook waits for the connection that reaches the
            // primary — so it runs once per failover, just before the re-send. The same
            // `hello`, once per new connection, tells the members of the cluster (F29).
            waited = true;
            match members::ask(&mut state, env, reply_until()) {
                Err(e) => return Err(AttemptOutcome::Transport(e)),
                Ok(reply) if reply.status < 0 => {
                    let status = reply.status;
                    self.reply = Some(reply);
                    return Ok(status);
                }
                Ok(_) => {}
            }
        }
        if state.book.hook_pending {
            drop(state);
            waited = true;
            run_hook(env)?;
            state = env.borrow().map_err(AttemptOutcome::Transport)?;
        }
        // F12: notifications not yet acknowledged go first on this connection, pipelined;
        // their acknowledgements are collected while the reply is awaited.
        if !state.outbox.is_empty() {
            waited = true;
            state
                .send_outbox(env, reply_until())
                .map_err(AttemptOutcome::Transport)?;
        }
        // One clock read for the request's reply deadline and its round trip's start (P2).
        let now = if waited {
            Instant::now()
        } else {
            self.spec.started
        };
        let (result, sent) = self.exchange_watchful(&mut state, now, until_from(now));
        state.settle_acks(env);
        if let (true, Some(reply)) = (op_is_hello, &self.reply) {
            members::learn(&mut state, env, reply); // F29: answered on the current connection
        }
        match result {
            Ok(status) => Ok(status),
            Err(e) => {
                // F16, F19: the write left and no answer came back.
                if sent && self.spec.is_write {
                    self.applied = Applied::Unknown;
                }
                Err(AttemptOutcome::Transport(e))
            }
        }
    }

    /// The attempt's connection: the kept one, one made beside the last call, or a new one;
    /// and whether its requests ask a standby to forward (F28). `true`: a connect was waited
    /// for.
    fn connected(&mut self, state: &mut LoopState) -> Result<bool, AttemptOutcome> {
        let env = self.env;
        // F25/F28: a connection made beside the last call replaces the kept one: a direct one
        // to the primary (instead of forwarding), or the probe's to the controller that just
        // named the primary this attempt is aimed at.
        // The kept connection is checked once per attempt (F21: one `fstat`, P2).
        let mut usable = false;
        let adopted = state.link.adopt_direct() || {
            usable = state.link.conn_usable();
            !usable && state.link.adopt_spare(env.options().forward)
        };
        if adopted {
            state.book.reconnected();
            let ep = state.link.current_endpoint();
            env.observer.update(|s| s.current_master = Some(ep));
        }
        // No liveness syscall on the happy path (P2): a kept connection that the peer closed
        // meanwhile fails the exchange, which is a transport failure like any other (F5).
        let connect = !adopted && !usable;
        if connect {
            let avoid = self.avoid_mask();
            state
                .connect(&env.waker, env, self.spec.deadline, Some(avoid))
                .map_err(AttemptOutcome::Transport)?;
            let ep = state.link.current_endpoint();
            env.observer.update(|s| s.current_master = Some(ep));
        }
        // F28: after this call failed to reach a master directly, the requests on this
        // connection (its `hello`, the hook's calls, this call, and the calls after it on the
        // same connection) ask a standby to forward them to the primary; a new connection
        // starts without (`Link::connect_current`), so a reachable primary is used directly.
        if !env.options().forward {
            state.link.forward = false;
        } else if self.missed_directly || state.link.passed_over {
            state.link.forward = true;
        }
        Ok(connect)
    }

    /// The call's request on the current connection (F25): a reply later than the op's
    /// threshold makes the loop ask another controller, while it waits on, whether the primary
    /// changed; when one names another primary, the late request is abandoned (the connection
    /// dropped) and the loop goes there next. Returns the reply's status (the reply itself
    /// left in the call's `reply`) or the transport error, and whether the request left.
    /// `sent_at`: now, as read for `until`.
    fn exchange_watchful(
        &mut self,
        state: &mut LoopState,
        sent_at: Instant,
        until: Instant,
    ) -> (Result<i32, Error>, bool) {
        let env = self.env;
        let op = self.spec.op;
        let ids = state.ids.resend(self.spec.request_id);
        let link = &mut state.link;
        let watch = env.options().suspicion
            && link.rotator.masters().len() > 1
            && link.rotator.current_master().is_some();
        if !watch {
            let (result, sent) = link.exchange(&env.waker, op, ids, until);
            return (result.map(|r| self.keep(r)), sent);
        }
        let seq = match link.send(&env.waker, op, ids, until) {
            Ok(seq) => seq,
            Err(e) => return (Err(e), false),
        };
        let progress = beside_the_request(link, env, sent_at, until);
        // Issue 29: a reply that begins to arrive before the threshold is slow, not late — its
        // progress moves the wait past `until` and nobody is asked; a silent one is suspected.
        let mut suspect_at = (sent_at + link.round_trips.threshold(op)).min(until);
        let Some(conn) = link.conn.as_mut() else {
            return (Err(Error::Errno(libc::ENOTCONN)), true);
        };
        let early = match conn.recv_by(seq, &mut suspect_at, progress, &env.waker) {
            Ok(None) if Instant::now() < until => None,
            Ok(None) => Some(Err(Error::Errno(libc::ETIMEDOUT))),
            Ok(Some(reply)) => {
                // Answered before the threshold (the happy path).
                link.round_trips.observe(op, sent_at.elapsed());
                return (Ok(self.keep(reply)), true);
            }
            Err(e) => Some(Err(e)),
        };
        let result = match early {
            Some(r) => r,
            None => {
                let late_fd = conn.raw_fd();
                env.observer.update(|s| s.suspicions += 1);
                match self.probe(state, late_fd, until) {
                    Probed::Vouched { witness, conn } => {
                        match self.hedge(state, seq, witness, conn, until) {
                            // Through the witness: the link goes on on its connection.
                            Hedged::Through(reply) => return (Ok(self.keep(reply)), true),
                            Hedged::Direct(r) => r,
                        }
                    }
                    Probed::NewPrimary(spare) => {
                        self.abandon_for(&mut state.link, spare, sent_at);
                        return (Err(Error::Errno(libc::ETIMEDOUT)), true);
                    }
                    Probed::Nothing => match state.link.conn.as_mut() {
                        Some(c) => c.recv_progress(seq, until, state.link.progress, &env.waker),
                        None => Err(Error::Errno(libc::ENOTCONN)),
                    },
                }
            }
        };
        let link = &mut state.link;
        if result.is_ok() {
            link.round_trips.observe(op, sent_at.elapsed());
        } else if let Err(Error::Errno(libc::ETIMEDOUT)) = result {
            if let Some(c) = link.conn.as_mut() {
                c.mark_dead();
            }
        }
        let result = result.map(|r| self.keep(r));
        (result.map_err(|e| frame_error(op, e)), true)
    }

    /// F25: another controller names a new primary (`spare.named`): the late request is
    /// abandoned (its connection dropped: a reply to it would now be a stray) and the loop
    /// re-sends it there next, on the probe's connection when it is to that primary.
    fn abandon_for(&self, link: &mut super::Link, spare: super::link::Spare, sent_at: Instant) {
        let env = self.env;
        let m = spare.named;
        clog!(
            env,
            Level::Info,
            "{} late on {} after {} ms; the primary is now {}: re-sending there",
            self.spec.op.name(),
            link.current_endpoint(),
            sent_at.elapsed().as_millis(),
            link.rotator.masters()[m]
        );
        env.observer.update(|s| s.suspicion_failovers += 1);
        link.rotator.aim_at(m);
        if let Some(c) = link.conn.as_mut() {
            c.mark_dead();
        }
        link.spare = Some(spare);
    }

    /// Keeps `reply` as the call's answer; its status.
    fn keep(&mut self, reply: Reply) -> i32 {
        let status = reply.status;
        self.reply = Some(reply);
        status
    }
}

/// What happens beside a request just sent, before its reply is awaited: with forwarding
/// through a standby that named the primary, a direct connection to that primary is tried
/// (F28). The reply's progress deadline (issue 29), which otherwise starts at the send.
fn beside_the_request(
    link: &mut super::Link,
    env: &CallEnv<'_>,
    sent_at: Instant,
    until: Instant,
) -> Option<Progress> {
    let mut progress = link.progress;
    if link.forward && link.direct_wanted.is_some() {
        if let Some(fd) = link.conn.as_ref().map(|c| c.raw_fd()) {
            let connect_until = (Instant::now() + env.options().connect_timeout).min(until);
            link.try_direct(&env.waker, fd, connect_until);
        }
    } else if let Some(p) = progress.as_mut() {
        // The wait for the reply begins as the request leaves (P2: no second clock read).
        p.since = Some(sent_at);
    }
    progress
}

/// How a hedged request (F28) was answered.
enum Hedged {
    /// By the primary through the witness: the link is now on the witness's connection.
    Through(Reply),
    /// On the direct connection (or not at all): its outcome.
    Direct(Result<Reply, Error>),
}

impl Call<'_, '_> {
    /// F28: the witness vouches for the primary whose reply is late, so the way between this
    /// client and the primary is what fails (or the primary is slow for this request): the
    /// same request — the same request id (F16): the primary applies a write once — goes
    /// through the witness, marked for forwarding, while the direct one stays outstanding.
    /// The first answer wins. The witness's own answer (it could not forward: STANDBY,
    /// NOMASTER, NOT_READY, a lost forward) is no answer: the direct reply is then awaited
    /// alone, as without the hedge.
    fn hedge(
        &mut self,
        state: &mut LoopState,
        seq: u64,
        witness: usize,
        through: Connection,
        until: Instant,
    ) -> Hedged {
        let env = self.env;
        let (wseq, mut other) = self.send_through(state, through, until);
        let link = &mut state.link;
        // The direct reply's deadline, moved by its progress (issue 29) as it arrives.
        let progress = link.progress;
        let mut direct_until = until;
        let direct_outcome = loop {
            if Instant::now() >= until {
                // The witness had until the reply timeout; the direct reply, still arriving,
                // is waited for alone (the witness's request abandoned as below).
                if let Some(mut w) = other.take() {
                    w.mark_dead();
                }
            }
            let Some(direct) = link.conn.as_mut() else {
                break Hedged::Direct(Err(Error::Errno(libc::ENOTCONN)));
            };
            let Some(w) = other.as_mut() else {
                break Hedged::Direct(direct.recv_progress(
                    seq,
                    direct_until,
                    progress,
                    &env.waker,
                ));
            };
            let watch_w = env.waker.watching(w.raw_fd());
            match direct.recv_by(seq, &mut direct_until, progress, &watch_w) {
                Ok(Some(r)) => break Hedged::Direct(Ok(r)),
                Err(e) => break Hedged::Direct(Err(e)),
                Ok(None) if Instant::now() >= direct_until => {
                    break Hedged::Direct(Err(Error::Errno(libc::ETIMEDOUT)))
                }
                Ok(None) => {}
            }
            let direct_fd = direct.raw_fd();
            let mut w_until = until;
            match w.recv_by(wseq, &mut w_until, None, &env.waker.watching(direct_fd)) {
                Ok(Some(r)) if !is_no_primary_status(r.status) => {
                    let Some(w) = other.take() else {
                        break Hedged::Direct(Err(Error::Errno(libc::ENOTCONN)));
                    };
                    self.go_through(state, witness, w);
                    return Hedged::Through(r);
                }
                Ok(Some(_)) | Err(_) => other = None,
                Ok(None) => {}
            }
        };
        // The witness's connection still owes the forwarded request's reply: abandoned (reset
        // on close, so it is not delivered late).
        if let Some(w) = other.as_mut() {
            w.mark_dead();
        }
        direct_outcome
    }

    /// The hedge's request through the witness's connection `through`, marked for forwarding
    /// (F28): its seq, and the connection if the request left.
    fn send_through(
        &self,
        state: &mut LoopState,
        mut through: Connection,
        until: Instant,
    ) -> (u64, Option<Connection>) {
        let ids = state.ids.resend(self.spec.request_id);
        let link = &mut state.link;
        // Above the probe's own seqs on that connection (1, 2), and never reused on the link.
        link.seq = (link.seq + 1).max(3);
        let wseq = link.seq;
        let head = RequestHead {
            seq: wseq,
            client_id: ids.client_id,
            request_id: ids.request_id,
            no_reply: false,
            auth_token: &link.auth_token,
            forward_within_ms: forward_within_ms(until),
        };
        let sent = through.send_op(&head, self.spec.op, until, &self.env.waker);
        (wseq, sent.ok().map(|()| through))
    }

    /// F28: the primary answered through `witness` (on `w`): the link goes on on that
    /// connection, forwarding, until a direct connection to the primary comes back.
    fn go_through(&self, state: &mut LoopState, witness: usize, w: Connection) {
        let env = self.env;
        let link = &mut state.link;
        clog!(
            env,
            Level::Info,
            "{} late on {}, which {} vouches for: answered through it",
            self.spec.op.name(),
            link.current_endpoint(),
            link.rotator.masters()[witness]
        );
        let primary = link.rotator.current_master();
        link.rotator.set_current(witness);
        link.adopt_forwarding(w);
        // A primary that was only slow is used directly again from the next call: a connection
        // to it is tried beside the next forwarded request (a way that drops this client's
        // packets never connects).
        link.direct_wanted = primary;
        state.book.reconnected();
        let ep = state.link.current_endpoint();
        env.observer.update(|s| s.current_master = Some(ep));
    }
}

/// A call in the F10 hook (or a probe): one exchange on the current connection. A write the
/// hook repeats in a later run for the same reconnect keeps its request id (F16).
pub fn single_attempt(
    state: &mut LoopState,
    env: &CallEnv<'_>,
    op: &Op,
    kind: OpKind,
) -> Result<Reply, Error> {
    let until = Instant::now() + env.options().reply_timeout;
    if kind == OpKind::FireAndForget && super::fire::acknowledged(op) {
        // F12: from the hook (a daemon re-syncing), a notification joins the outbox, which
        // goes out right after the hook.
        state.enqueue(env, op)?;
        return Ok(Reply::status(0, 0));
    }
    let result = if kind == OpKind::FireAndForget {
        let ids = state.ids.read();
        state
            .link
            .send_no_reply(&env.waker, op, ids, until)
            .map(|seq| Reply::status(seq, 0))
    } else {
        let ids = if state.book.in_hook && kind == OpKind::Write {
            let LoopState { book, ids, .. } = state;
            let id = book.hook_write_id(op, ids);
            ids.resend(id)
        } else {
            state.ids.next(kind)
        };
        state.link.exchange(&env.waker, op, ids, until).0
    };
    if let (Op::Hello(_), Ok(r)) = (op, &result) {
        // F29: a `hello` of the caller (or of the hook) on the current connection.
        members::learn(state, env, r);
    }
    match result {
        Ok(r) if r.status >= 0 => Ok(r),
        Ok(r) => Err(Error::from_code(r.status).unwrap_or(Error::Internal)),
        Err(e) => {
            if !is_interrupt(e) {
                state.book.hook_transport_error = Some(e);
            }
            Err(e)
        }
    }
}
