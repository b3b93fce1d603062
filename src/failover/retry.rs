//! THE retry loop (F1): the one place where the pure decisions (classify, budget, rotate) meet
//! sockets, sleeps and callbacks.
//!
//! A call runs with the context lock held (F11). The loop's state lives in a [`Link`] inside a
//! `RefCell`; the borrow is released only around the reconnect hook, so the hook's nested calls
//! on the same thread (reentrant lock) find `in_hook` set and run as single attempts (F10).

use std::cell::{RefCell, RefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::backoff::{Backoff, RetryConfig};
use super::budget::{RetryBudget, RetryDecision};
use super::classify::{
    classify, is_interrupt, is_no_primary_status, AttemptOutcome, Classification,
};
use super::log::{xlog, Level};
use super::options::{Options, HERD_SPREAD_PER_WAITER, MAX_HERD_SPREAD, WAIT_PRIMARY_SPREAD};
use super::report::{CallReport, Event, MasterOutcome, Observer};
use super::rotate::{resolve_system, Endpoint, HintVerdict, Rotator, Target};
use crate::error::{strerror, Error};
use crate::transport::{Connection, Waker};
use crate::wire::{
    ClientId, Hello, Limits, Op, OpKind, Reply, ReplyData, RequestHead, PROTOCOL_VERSION,
};

/// Extra time granted to a `waitPrimary` reply beyond the wait itself (F18), capped by the
/// reply timeout: the controller answers at the end of the wait, one round trip later.
const WAIT_PRIMARY_SLACK: Duration = Duration::from_millis(250);

/// The state of one context that the loop mutates, kept under the context lock (F11).
pub struct Link {
    pub rotator: Rotator,
    pub conn: Option<Connection>,
    pub client_id: ClientId,
    pub retry: RetryConfig,
    pub options: Options,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub limits: Limits,
    /// Last `seq` sent; a reply must echo the awaited one (F9).
    pub seq: u64,
    /// Last write request id handed out (F16).
    pub request_id: u64,
    /// True while the reconnect hook runs: nested calls are single attempts (F10).
    pub in_hook: bool,
    /// A transport failure met by a nested call during the hook: the hook's negative return
    /// then counts as transport, not as a controller status.
    pub hook_transport_error: Option<Error>,
    /// A reconnect happened and the hook has not yet succeeded on it (F10): it runs before the
    /// next send, even when the loop comes back to the same connection after a backoff.
    pub hook_pending: bool,
    /// Configured masters that answered `waitPrimary` with an error: plain sleeps there (F18).
    pub no_wait_primary: Vec<bool>,
    /// Start of the failover in progress, if one is (F17).
    pub failing_since: Option<Instant>,
    /// A master has served this context: only then is losing one a failover (F17). Before
    /// that, a standby met on the way to the primary is discovery, not a failover.
    pub has_served: bool,
}

impl Link {
    pub fn new(
        rotator: Rotator,
        client_id: ClientId,
        retry: RetryConfig,
        options: Options,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Link {
        let n = rotator.masters().len();
        Link {
            rotator,
            conn: None,
            client_id,
            retry,
            options,
            tls,
            limits: Limits::default(),
            seq: 0,
            request_id: 0,
            in_hook: false,
            hook_transport_error: None,
            hook_pending: false,
            no_wait_primary: vec![false; n],
            failing_since: None,
            has_served: false,
        }
    }

    /// Closes the connection, if any.
    pub fn close(&mut self) {
        self.conn = None;
    }

    fn current_endpoint(&self) -> Endpoint {
        self.rotator.endpoint(self.rotator.current()).clone()
    }

    fn conn_alive(&mut self) -> bool {
        self.conn.as_mut().is_some_and(|c| !c.is_dead())
    }

    /// Connects to the current target, replacing any old connection (F5: the old one is closed
    /// first). The connect timeout is capped by the call's deadline.
    fn connect_current(&mut self, waker: &Waker, deadline: Option<Instant>) -> Result<(), Error> {
        self.conn = None;
        let ep = self.current_endpoint();
        let until = cap(Instant::now() + self.options.connect_timeout, deadline);
        let conn = Connection::connect(
            &ep.host,
            ep.port,
            self.tls.as_ref(),
            self.limits,
            until,
            waker,
        )?;
        self.conn = Some(conn);
        self.hook_pending = true;
        Ok(())
    }

    /// One request/reply on the current connection. Returns the reply or the transport error,
    /// and whether the request left (F19: a sent write without reply may have been applied).
    fn exchange(
        &mut self,
        waker: &Waker,
        op: &Op,
        request_id: u64,
        reply_timeout: Duration,
        deadline: Option<Instant>,
    ) -> (Result<Reply, Error>, bool) {
        let Some(conn) = self.conn.as_mut() else {
            return (Err(Error::Errno(libc::ENOTCONN)), false);
        };
        self.seq += 1;
        let head = RequestHead {
            seq: self.seq,
            client_id: self.client_id,
            request_id,
            no_reply: false,
        };
        let until = cap(Instant::now() + reply_timeout, deadline);
        if let Err(e) = conn.send_op(&head, op, until, waker) {
            return (Err(e), false);
        }
        (conn.recv(head.seq, until, waker), true)
    }

    /// Sends a fire-and-forget request (F12).
    fn send_no_reply(&mut self, waker: &Waker, op: &Op) -> Result<(), Error> {
        let conn = self.conn.as_mut().ok_or(Error::Errno(libc::ENOTCONN))?;
        self.seq += 1;
        let head = RequestHead {
            seq: self.seq,
            client_id: self.client_id,
            request_id: 0,
            no_reply: true,
        };
        conn.send_op(
            &head,
            op,
            Instant::now() + self.options.reply_timeout,
            waker,
        )
    }

    fn next_request_id(&mut self, kind: OpKind) -> u64 {
        if kind == OpKind::Write {
            self.request_id += 1;
            self.request_id
        } else {
            0
        }
    }
}

/// What one call borrows from its client.
pub struct CallEnv<'a> {
    pub link: &'a RefCell<Link>,
    pub waker: &'a Waker,
    pub observer: &'a Observer,
    /// Runs the reconnect hook (F10); `None` when none is installed.
    pub run_hook: &'a dyn Fn() -> Option<i32>,
    /// Whether a reconnect hook is installed (then a new connection is first confirmed to
    /// lead to the primary, so the hook runs once per failover, not once per standby tried).
    pub has_hook: bool,
}

impl CallEnv<'_> {
    /// The link, or `EDEADLK` for an op made from an event or log callback during a call.
    fn borrow(&self) -> Result<RefMut<'_, Link>, Error> {
        self.link
            .try_borrow_mut()
            .map_err(|_| Error::Errno(libc::EDEADLK))
    }
}

/// F18 jitter after `waitPrimary` names the new primary: every client the controller was
/// holding is told at once, so each spreads its reconnect at random over a window that grows
/// with that crowd (`waiters` × [`HERD_SPREAD_PER_WAITER`], within [`WAIT_PRIMARY_SPREAD`] ..=
/// [`MAX_HERD_SPREAD`]): a lone client goes within a few ms, a thousand arrive over ~100 ms.
fn herd_spread(waiters: u32) -> Duration {
    (HERD_SPREAD_PER_WAITER * waiters).clamp(WAIT_PRIMARY_SPREAD, MAX_HERD_SPREAD)
}

fn cap(t: Instant, deadline: Option<Instant>) -> Instant {
    deadline.map_or(t, |d| t.min(d))
}

/// F2: connects to the first reachable master in list order; none: the last transport error.
pub fn connect_first(link: &mut Link, waker: &Waker, observer: &Observer) -> Result<(), Error> {
    let mut last = Error::Errno(libc::ECONNREFUSED);
    for i in 0..link.rotator.masters().len() {
        link.rotator.set_current(i);
        match link.connect_current(waker, None) {
            Ok(()) => {
                // The first connection is not a reconnect: no hook for it (F10).
                link.hook_pending = false;
                let ep = link.current_endpoint();
                observer.update(|s| s.current_master = Some(ep));
                return Ok(());
            }
            Err(e) if is_interrupt(e) => return Err(e),
            Err(e) => {
                xlog!(
                    Level::Info,
                    "start: {} unreachable ({e})",
                    link.current_endpoint()
                );
                last = e;
            }
        }
    }
    link.rotator.set_current(0);
    xlog!(
        Level::Warn,
        "start: no master reachable; last error: {last}"
    );
    Err(last)
}

/// F1: runs `op` to success, a terminal error, or budget exhaustion.
pub fn run(env: &CallEnv<'_>, op: Op) -> Result<Reply, Error> {
    let mut link = env.borrow()?;
    env.observer.update(|s| s.requests += 1);
    let kind = op.kind();
    if link.in_hook || kind == OpKind::Probe {
        // F10: inside the hook, one attempt on the new connection, no nested failover.
        return single_attempt(&mut link, env, &op, kind);
    }
    if kind == OpKind::FireAndForget {
        drop(link);
        return fire_and_forget(env, &op);
    }
    drop(link);
    Call::new(env, &op)?.run()
}

/// A call in the F10 hook (or a probe): one exchange on the current connection.
fn single_attempt(
    link: &mut Link,
    env: &CallEnv<'_>,
    op: &Op,
    kind: OpKind,
) -> Result<Reply, Error> {
    let result = if kind == OpKind::FireAndForget {
        link.send_no_reply(env.waker, op)
            .map(|()| Reply::status(link.seq, 0))
    } else {
        let rid = link.next_request_id(kind);
        let timeout = link.options.reply_timeout;
        link.exchange(env.waker, op, rid, timeout, None).0
    };
    match result {
        Ok(r) if r.status >= 0 => Ok(r),
        Ok(r) => Err(Error::from_code(r.status).unwrap_or(Error::Internal)),
        Err(e) => {
            if !is_interrupt(e) {
                link.hook_transport_error = Some(e);
            }
            Err(e)
        }
    }
}

/// F12: no status to classify. A known-dead connection is replaced once (the current master,
/// then the others in rotation; no backoff, no budget), then the request is sent once.
fn fire_and_forget(env: &CallEnv<'_>, op: &Op) -> Result<Reply, Error> {
    let mut link = env.borrow()?;
    if !link.conn_alive() {
        let n = link.rotator.masters().len();
        let mut result = Err(Error::Errno(libc::ENOTCONN));
        for i in 0..n {
            if i > 0 {
                rotate(
                    &mut link,
                    env.observer,
                    AttemptOutcome::Transport(result.err().unwrap_or(Error::Internal)),
                );
            }
            result = link.connect_current(env.waker, None);
            match result {
                Ok(()) => break,
                Err(e) if is_interrupt(e) => return Err(e),
                Err(_) => {}
            }
        }
        result?;
        let ep = link.current_endpoint();
        env.observer.update(|s| s.current_master = Some(ep));
    }
    if link.hook_pending {
        drop(link);
        if let Err(outcome) = run_hook(env) {
            return Err(match outcome {
                AttemptOutcome::Transport(e) => e,
                AttemptOutcome::Status(s) => Error::from_code(s).unwrap_or(Error::Internal),
            });
        }
        link = env.borrow()?;
    }
    let seq = link.seq + 1;
    link.send_no_reply(env.waker, op)
        .map(|()| Reply::status(seq, 0))
}

/// F10: runs the hook with the link released and `in_hook` set. `Err` is the failed attempt.
fn run_hook(env: &CallEnv<'_>) -> Result<(), AttemptOutcome> {
    /// Clears `in_hook` even if the hook unwinds.
    struct InHook<'a>(&'a RefCell<Link>);
    impl Drop for InHook<'_> {
        fn drop(&mut self) {
            if let Ok(mut l) = self.0.try_borrow_mut() {
                l.in_hook = false;
            }
        }
    }
    {
        let mut l = env.link.borrow_mut();
        l.in_hook = true;
        l.hook_transport_error = None;
    }
    let guard = InHook(env.link);
    let rc = (env.run_hook)();
    drop(guard);
    let transport = env.link.borrow_mut().hook_transport_error.take();
    match rc {
        Some(rc) if rc < 0 => {
            Err(transport.map_or(AttemptOutcome::Status(rc), AttemptOutcome::Transport))
        }
        _ => {
            env.link.borrow_mut().hook_pending = false;
            Ok(())
        }
    }
}

/// Moves to the next target (hint first, F5), logs it and counts it (F14, F17). The old
/// connection is kept only when the target is unchanged and the connection still works.
fn rotate(link: &mut Link, observer: &Observer, cause: AttemptOutcome) {
    let from_target = link.rotator.current().clone();
    let from = link.current_endpoint();
    let to_target = link.rotator.advance();
    let to = link.current_endpoint();
    if to_target != from_target || !link.conn_alive() {
        link.conn = None;
    }
    if to_target == from_target {
        // F17: staying put (e.g. waitPrimary named the master we are on) is no rotation.
        return;
    }
    xlog!(
        Level::Info,
        "rotating from {from} to {to}: {}",
        cause_text(&cause)
    );
    observer.update(|s| s.rotations += 1);
    observer.emit(Event::Rotation { from, to, cause });
}

fn cause_text(o: &AttemptOutcome) -> String {
    match o {
        AttemptOutcome::Status(s) => format!("answered \"{}\"", strerror(*s)),
        AttemptOutcome::Transport(e) => format!("transport: {e}"),
    }
}

/// The state of one reply-bearing call.
struct Call<'a, 'e> {
    env: &'a CallEnv<'e>,
    op: &'a Op,
    is_write: bool,
    request_id: u64,
    started: Instant,
    deadline: Option<Instant>,
    budget: RetryBudget,
    /// Times the request left for a controller: the F4 "attempt number" (a re-send is > 0).
    sends: u32,
    attempts: u32,
    per_master: Vec<Option<AttemptOutcome>>,
    /// The master that most recently failed by transport (a dead or hung primary): excluded
    /// from `waitPrimary`, since standbys may still believe it leads (F18).
    last_unreachable: Option<usize>,
    /// The master that most recently answered with a status: a live controller to ask for
    /// the primary when the attempt before a backoff hit a dead one (F18).
    last_answered: Option<usize>,
    may_have_been_applied: bool,
}

impl<'a, 'e> Call<'a, 'e> {
    fn new(env: &'a CallEnv<'e>, op: &'a Op) -> Result<Self, Error> {
        let mut link = env.borrow()?;
        let started = Instant::now();
        let kind = op.kind();
        let request_id = link.next_request_id(kind);
        let deadline = link.options.call_deadline.map(|d| started + d);
        let n = link.rotator.masters().len();
        // A hint left over from an earlier call is stale.
        link.rotator.clear_hint();
        Ok(Call {
            env,
            op,
            is_write: kind == OpKind::Write,
            request_id,
            started,
            deadline,
            budget: RetryBudget::new(n, Backoff::new(link.retry), deadline),
            sends: 0,
            attempts: 0,
            per_master: Vec::new(),
            last_unreachable: None,
            last_answered: None,
            may_have_been_applied: false,
        })
    }

    fn run(mut self) -> Result<Reply, Error> {
        loop {
            let (outcome, reply) = match self.attempt() {
                Ok(reply) => (AttemptOutcome::Status(reply.status), Some(reply)),
                Err(outcome) => (outcome, None),
            };
            self.attempts += 1;
            let class = classify(outcome, self.sends.saturating_sub(1), self.is_write);
            match class {
                Classification::Success => return Ok(self.succeed(reply)),
                Classification::Terminal => {
                    let e = match outcome {
                        AttemptOutcome::Status(s) => Error::from_code(s).unwrap_or(Error::Internal),
                        AttemptOutcome::Transport(e) => e,
                    };
                    return Err(self.fail(e));
                }
                Classification::RetryNow | Classification::RetryBackoff => {
                    if let Err(e) = self.retry(class, outcome, reply.as_ref()) {
                        return Err(self.fail(e));
                    }
                }
            }
        }
    }

    /// One attempt: (re)connect if needed, run the hook after a reconnect (F10), send, await.
    fn attempt(&mut self) -> Result<Reply, AttemptOutcome> {
        let mut link = self.env.borrow().map_err(AttemptOutcome::Transport)?;
        // No liveness syscall on the happy path (P2): a kept connection that the peer closed
        // meanwhile fails the exchange, which is a transport failure like any other (F5).
        if !link.conn.as_ref().is_some_and(|c| !c.known_dead()) {
            link.connect_current(self.env.waker, self.deadline)
                .map_err(AttemptOutcome::Transport)?;
            let ep = link.current_endpoint();
            self.env.observer.update(|s| s.current_master = Some(ep));
        }
        if link.hook_pending && self.env.has_hook {
            // F10: the hook re-joins the primary; on a standby it could only be redirected.
            // One `hello` tells: a non-primary answer (with its redirect hint) is this
            // attempt's outcome, and the hook waits for the connection that reaches the
            // primary — so it runs once per failover, just before the re-send.
            let probe = Op::Hello(Hello {
                client_name: String::new(),
                protocol_version: PROTOCOL_VERSION,
            });
            let timeout = link.options.reply_timeout;
            let (result, _) = link.exchange(self.env.waker, &probe, 0, timeout, self.deadline);
            match result {
                Err(e) => return Err(AttemptOutcome::Transport(e)),
                Ok(reply) if reply.status < 0 => return Ok(reply),
                Ok(_) => {}
            }
        }
        if link.hook_pending {
            drop(link);
            run_hook(self.env)?;
            link = self.env.borrow().map_err(AttemptOutcome::Transport)?;
        }
        let timeout = link.options.reply_timeout;
        let (result, sent) = link.exchange(
            self.env.waker,
            self.op,
            self.request_id,
            timeout,
            self.deadline,
        );
        if sent {
            self.sends += 1;
        }
        match result {
            Ok(reply) => Ok(reply),
            Err(e) => {
                // F19: the write left and no answer came back.
                self.may_have_been_applied |= sent && self.is_write;
                Err(AttemptOutcome::Transport(e))
            }
        }
    }

    fn succeed(&mut self, reply: Option<Reply>) -> Reply {
        let mut reply = reply.unwrap_or_else(|| Reply::status(0, 0));
        // F4: a DUP on a re-sent write is the first send's success.
        reply.status = reply.status.max(0);
        let mut link = self.env.link.borrow_mut();
        link.has_served = true;
        if let Some(since) = link.failing_since.take() {
            let ep = link.current_endpoint();
            let duration = since.elapsed();
            xlog!(
                Level::Info,
                "failover finished on {ep} after {} ms",
                duration.as_millis()
            );
            self.env.observer.update(|s| {
                s.failovers += 1;
                s.last_failover_ms = duration.as_millis() as u64;
            });
            self.env
                .observer
                .emit(Event::FailoverFinished { to: ep, duration });
        }
        // The steady path clones nothing: the stats copy the endpoint only when it changed (P2).
        let ep = link.rotator.endpoint(link.rotator.current());
        self.env.observer.update(|s| {
            if s.current_master.as_ref() != Some(ep) {
                s.current_master = Some(ep.clone());
            }
        });
        reply
    }

    /// After a retriable failure: record it, offer the hint, then rotate, sleep or give up.
    fn retry(
        &mut self,
        class: Classification,
        outcome: AttemptOutcome,
        reply: Option<&Reply>,
    ) -> Result<(), Error> {
        let env = self.env;
        let mut link = env.borrow()?;
        let master = link.rotator.current_master();
        if let Some(i) = master {
            // Filled on the first failure: a call that succeeds at once allocates nothing.
            if self.per_master.is_empty() {
                self.per_master = vec![None; link.rotator.masters().len()];
            }
            self.per_master[i] = Some(outcome);
            match outcome {
                AttemptOutcome::Transport(_) => self.last_unreachable = Some(i),
                AttemptOutcome::Status(_) => self.last_answered = Some(i),
            }
        }
        if link.failing_since.is_none() && link.has_served {
            link.failing_since = Some(Instant::now());
            let from = link.current_endpoint();
            xlog!(
                Level::Info,
                "failover started: {from} {}",
                cause_text(&outcome)
            );
            env.observer.emit(Event::FailoverStarted {
                from,
                cause: outcome,
            });
        }
        if let Some((host, port)) = reply.and_then(Reply::redirect) {
            let policy = link.options.hint_policy;
            let stale = link
                .rotator
                .find_master(host, port, &resolve_system)
                .is_some_and(|m| self.just_failed(m));
            if stale {
                // F5: the hint is advisory. A standby names the dead primary until its election
                // timeout; following it again would bounce between the two and never reach the
                // masters not yet tried, so rotation goes on instead.
                xlog!(
                    Level::Debug,
                    "ignoring redirect hint {host}:{port}: it just failed"
                );
            } else if link.rotator.offer_hint(host, port, policy, &resolve_system)
                == HintVerdict::Refused
            {
                xlog!(
                    Level::Warn,
                    "ignoring redirect hint {host}:{port}: not a configured master"
                );
            }
        }
        match self
            .budget
            .on_failure(class, outcome, master, Instant::now())
        {
            RetryDecision::RotateNow => {}
            RetryDecision::Sleep(d) => {
                let t0 = Instant::now();
                let waited = self.backoff_wait(&mut link, d, reply.is_some());
                let spent = t0.elapsed().as_millis() as u64;
                env.observer.update(|s| s.backoff_ms += spent);
                waited?;
            }
            RetryDecision::Exhausted(e) => {
                let last = cause_text(&outcome);
                xlog!(
                    Level::Warn,
                    "{} gave up after {} attempts in {} ms: {e} (last: {last})",
                    self.op.name(),
                    self.attempts,
                    self.started.elapsed().as_millis()
                );
                env.observer.emit(Event::NotReady {
                    error: e,
                    attempts: self.attempts,
                    elapsed: self.started.elapsed(),
                });
                return Err(e);
            }
        }
        env.observer.update(|s| s.retries += 1);
        rotate(&mut link, env.observer, outcome);
        Ok(())
    }

    /// F6/F18: the backoff wait. With a controller that just answered and supports it, ask it
    /// for the primary (`waitPrimary`) instead of sleeping blindly; follow a configured primary
    /// it names after a small spread. Otherwise, or for what is left, an interruptible sleep.
    fn backoff_wait(
        &mut self,
        link: &mut Link,
        d: Duration,
        controller_answered: bool,
    ) -> Result<(), Error> {
        let start = Instant::now();
        let end = start + d;
        let waker = self.env.waker;
        // F18 for every client: when the attempt before this backoff hit a dead or hung master,
        // move to the controller that last answered in this call and wait there, instead of
        // sleeping blind (and waking up to a whole delay after the election).
        let mut witness_ready = false;
        if link.options.wait_primary && !controller_answered {
            if let Some(w) = self
                .last_answered
                .filter(|&w| !link.no_wait_primary[w] && Some(w) != link.rotator.current_master())
            {
                link.rotator.set_current(w);
                match link.connect_current(waker, Some(cap(end, self.deadline))) {
                    Ok(()) => witness_ready = true,
                    Err(e) if is_interrupt(e) => return Err(e),
                    Err(_) => link.conn = None,
                }
            }
        }
        let master = link.rotator.current_master();
        let usable = link.options.wait_primary
            && (controller_answered || witness_ready)
            && master.is_some_and(|i| !link.no_wait_primary[i])
            && link.conn_alive();
        if let (true, Some(i)) = (usable, master) {
            let wait_ms = d.as_millis().clamp(1, u128::from(u32::MAX)) as u32;
            let slack = WAIT_PRIMARY_SLACK.min(link.options.reply_timeout);
            let exclude = self
                .last_unreachable
                .map(|u| link.rotator.masters()[u].clone());
            let op = Op::WaitPrimary {
                timeout_ms: wait_ms,
                exclude_host: exclude.as_ref().map(|e| e.host.clone()).unwrap_or_default(),
                exclude_port: exclude.as_ref().map_or(0, |e| e.port),
            };
            let (result, _) = link.exchange(waker, &op, 0, d + slack, self.deadline);
            match result {
                Err(e) if is_interrupt(e) => return Err(e),
                Err(_) => {} // the connection is gone; sleep what is left
                Ok(r) if r.status < 0 && !is_no_primary_status(r.status) => {
                    // The controller lacks the op: plain sleeps for this master from now on.
                    xlog!(
                        Level::Info,
                        "{} does not support waitPrimary ({}); plain backoff",
                        link.current_endpoint(),
                        strerror(r.status)
                    );
                    link.no_wait_primary[i] = true;
                }
                Ok(r) => {
                    if let ReplyData::CtrlInfo(info) = &r.data {
                        let named = link.rotator.find_master(
                            &info.primary_host,
                            info.primary_port,
                            &resolve_system,
                        );
                        let unreachable = named.is_some_and(|m| self.just_failed(m));
                        if unreachable {
                            // F7: a controller without the exclusion still names the primary
                            // that just failed; that is no news, so the wait goes on as a sleep
                            // and this unit of budget costs its time.
                            xlog!(
                                Level::Debug,
                                "waitPrimary named {}:{}, which just failed; sleeping",
                                info.primary_host,
                                info.primary_port
                            );
                        } else if info.primary_port != 0 && !info.primary_host.is_empty() {
                            let verdict = link.rotator.offer_hint(
                                &info.primary_host,
                                info.primary_port,
                                super::rotate::HintPolicy::ConfiguredOnly,
                                &resolve_system,
                            );
                            if let HintVerdict::Accepted(Target::Master(_)) = verdict {
                                xlog!(
                                    Level::Info,
                                    "waitPrimary: primary is {}:{}",
                                    info.primary_host,
                                    info.primary_port
                                );
                                let spread = herd_spread(info.waiters);
                                let spread = self.budget.backoff_mut().spread(spread);
                                return waker.sleep(spread);
                            }
                            xlog!(
                                Level::Warn,
                                "waitPrimary named {}:{}: not a configured master",
                                info.primary_host,
                                info.primary_port
                            );
                        }
                    }
                }
            }
        }
        waker.sleep(end.saturating_duration_since(Instant::now()))
    }

    /// Whether master `m`'s last attempt in this call failed by transport (dead or hung): a
    /// redirect hint or `waitPrimary` answer naming it is stale news (F5, F18).
    fn just_failed(&self, m: usize) -> bool {
        matches!(
            self.per_master.get(m),
            Some(Some(AttemptOutcome::Transport(_)))
        )
    }

    /// Records the F19 report of a failed call and returns its error.
    fn fail(&mut self, e: Error) -> Error {
        let link = self.env.link.borrow();
        let masters = link
            .rotator
            .masters()
            .iter()
            .enumerate()
            .map(|(i, ep)| MasterOutcome {
                endpoint: ep.clone(),
                last: self.per_master.get(i).copied().flatten(),
            })
            .collect();
        drop(link);
        self.env.observer.set_last_error(CallReport {
            op: self.op.name(),
            error: e,
            attempts: self.attempts,
            elapsed: self.started.elapsed(),
            masters,
            is_write: self.is_write,
            may_have_been_applied: self.may_have_been_applied,
        });
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn herd_spread_grows_with_the_crowd_within_bounds() {
        let ms = |w| herd_spread(w).as_millis();
        let table = [
            (0, 5),
            (1, 5),
            (50, 5),
            (200, 20),
            (1000, 100),
            (2000, 200),
            (100_000, 200),
        ];
        for (waiters, want) in table {
            assert_eq!(ms(waiters), want, "{waiters} waiters");
        }
    }
}
