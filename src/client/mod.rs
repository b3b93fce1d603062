//! The typed Rust client: one [`Client`] is one context (`xcecli_ctx_t`).
//!
//! Every op is a one-liner that builds an [`Op`] and hands it to the one retry loop
//! (`failover::retry`, F1); the op's category comes from [`Op::kind`]. A `Client` is
//! `Send + Sync`: the C layer keeps it in an `Arc` and calls it from many threads, and calls on
//! one context are serialized for the whole loop (F11). Different clients share no lock.

mod listing;
pub use listing::{JobPager, ENV_PAGE_BYTES, MAX_LISTING_RESTARTS};

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, ReentrantMutex};
use rand::RngCore;

use crate::error::Error;
use crate::failover::options::{ClientOption, Options};
use crate::failover::report::{CallReport, EventHandler, Observer, Stats};
use crate::failover::retry::{self, CallEnv, Link};
use crate::failover::{Endpoint, RetryConfig, Rotator, XCE_RETRY_DEFAULTS};
use crate::transport::{tls, Waker};
use crate::wire::*;

/// Takes the expected payload out of a successful reply; any other payload is `E_XCE_PROTO`.
macro_rules! reply_data {
    ($reply:expr, $pat:pat => $v:expr) => {
        match $reply.data {
            $pat => Ok($v),
            _ => Err(Error::Proto),
        }
    };
}
/// Like `reply_data!`, with an absent payload read as an empty list.
macro_rules! reply_list {
    ($reply:expr, $pat:pat => $v:expr) => {
        match $reply.data {
            $pat => Ok($v),
            ReplyData::None => Ok(Vec::new()),
            _ => Err(Error::Proto),
        }
    };
}

/// Most masters a configuration may list (`N_MAX_MASTERS`).
pub const N_MAX_MASTERS: usize = 8;
/// Size of a master host name buffer in the C struct (`XCE_MAXHOSTNAME_LEN`, NUL included):
/// host names are at most `XCE_MAXHOSTNAME_LEN - 1` bytes.
pub const XCE_MAXHOSTNAME_LEN: usize = 256;

/// TLS files of a configuration; without them the client speaks plain TCP.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsFiles {
    /// PEM file of the CA(s) that signed the controllers' certificates.
    pub ca_file: PathBuf,
    /// PEM client certificate chain and key, for mutual TLS (both or neither).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// What `start` needs (`xce_client_config_t`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// The controllers, in the order `start` tries them (F2).
    pub masters: Vec<Endpoint>,
    pub tls: Option<TlsFiles>,
    /// Sent in `hello`.
    pub client_name: String,
}

impl Config {
    /// A plain-TCP configuration over `masters`.
    pub fn new(masters: Vec<Endpoint>) -> Config {
        Config {
            masters,
            tls: None,
            client_name: String::new(),
        }
    }

    /// `EINVAL` unless there are 1..=N_MAX_MASTERS masters with non-empty host names shorter
    /// than XCE_MAXHOSTNAME_LEN bytes (they fit the C struct with their NUL) and non-zero ports.
    pub fn validate(&self) -> Result<(), Error> {
        let ok = (1..=N_MAX_MASTERS).contains(&self.masters.len())
            && self
                .masters
                .iter()
                .all(|m| !m.host.is_empty() && m.host.len() < XCE_MAXHOSTNAME_LEN && m.port != 0);
        if ok {
            Ok(())
        } else {
            Err(Error::Errno(libc::EINVAL))
        }
    }
}

/// Parses the `set masters` syntax: `host:port,host:port,…` — the one parser, used by the C
/// layer too. Spaces around elements are ignored; an IPv6 address is written in brackets
/// (`[::1]:7000`). `EINVAL` for: an empty list or element, a missing or empty host, a host with
/// whitespace or control bytes, an unbracketed `:` in the host (`a:1:2`), a missing,
/// non-numeric, zero or too large port, a host of `XCE_MAXHOSTNAME_LEN` bytes or more (it
/// must fit the C struct with its NUL), more than `N_MAX_MASTERS` elements.
pub fn parse_masters(s: &str) -> Result<Vec<Endpoint>, Error> {
    let einval = Error::Errno(libc::EINVAL);
    let masters = s
        .split(',')
        .map(|elem| {
            let elem = elem.trim();
            let (host, port) = if let Some(rest) = elem.strip_prefix('[') {
                let (host, after) = rest.split_once(']').ok_or(einval)?;
                (host, after.strip_prefix(':').ok_or(einval)?)
            } else {
                let (host, port) = elem.rsplit_once(':').ok_or(einval)?;
                if host.contains(':') {
                    return Err(einval); // an unbracketed IPv6 address is ambiguous
                }
                (host, port)
            };
            let bad_host = host
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control());
            if bad_host || port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
                return Err(einval);
            }
            let port: u16 = port.parse().map_err(|_| einval)?;
            Ok(Endpoint::new(host, port))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Config::new(masters.clone()).validate()?;
    Ok(masters)
}

/// A job id for `jobsubmit` (F16), unique across clients and restarts and never 0: the low
/// 24 bits of the unix time in ms on top, 40 random bits below. The time part keeps a restarted
/// client's ids apart from its earlier ones; the random part separates clients submitting in the
/// same millisecond.
pub fn new_job_id() -> u64 {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    loop {
        // 24 bits of ms wrap every ~4.6 h; a collision needs the same 40 random bits drawn in
        // the same millisecond of that window.
        let id = ((now_ms & 0xFF_FFFF) << 40) | (rand::thread_rng().next_u64() & 0xFF_FFFF_FFFF);
        if id != 0 {
            return id;
        }
    }
}

/// F10: called after every successful reconnect, before the interrupted op is re-sent, on the
/// calling thread. Ops it makes on the same client run as single attempts on the new
/// connection. A negative return is a failed attempt, classified like a status. The hook runs
/// while the client is reserved for the calling thread: it must not wait for another thread
/// that uses the same client.
pub type ReconnectHook = Box<dyn FnMut(&Client) -> i32 + Send>;

/// One client context.
pub struct Client {
    /// Everything the loop mutates. Reentrant so the reconnect hook's nested calls on the same
    /// thread get in (F10); the RefCell is never borrowed across the hook.
    link: ReentrantMutex<RefCell<Link>>,
    waker: Waker,
    /// Calls inside the loop right now, for `try_wakeup`.
    active_calls: AtomicUsize,
    observer: Observer,
    hook: Mutex<Option<ReconnectHook>>,
    client_name: String,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("client_name", &self.client_name)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// F2: validates `config`, applies the environment overrides (`XCE_*`, F15), and connects
    /// to the first reachable master in list order. None reachable: the last transport error.
    pub fn start(config: Config) -> Result<Client, Error> {
        Client::start_with(
            config,
            Options::default().with_env_overrides(),
            XCE_RETRY_DEFAULTS.with_env_overrides(),
        )
    }

    /// `start` with explicit options and retry config, ignoring the environment.
    pub fn start_with(
        config: Config,
        options: Options,
        retry: RetryConfig,
    ) -> Result<Client, Error> {
        config.validate()?;
        retry.validate()?;
        let tls = match &config.tls {
            Some(t) => Some(tls::client_config(
                &t.ca_file,
                t.cert_file.as_deref(),
                t.key_file.as_deref(),
            )?),
            None => None,
        };
        let mut client_id = [0u8; CLIENT_ID_LEN];
        rand::thread_rng().fill_bytes(&mut client_id);
        let client = Client {
            link: ReentrantMutex::new(RefCell::new(Link::new(
                Rotator::new(config.masters),
                client_id,
                retry,
                options,
                tls,
            ))),
            waker: Waker::new()?,
            active_calls: AtomicUsize::new(0),
            observer: Observer::default(),
            hook: Mutex::new(None),
            client_name: config.client_name,
        };
        {
            let guard = client.link.lock();
            let mut link = guard.borrow_mut();
            retry::connect_first(&mut link, &client.waker, &client.observer)?;
        }
        Ok(client)
    }

    /// Closes the connection (the next call reconnects). Dropping the client does the same.
    pub fn close(&self) {
        let guard = self.link.lock();
        if let Ok(mut link) = guard.try_borrow_mut() {
            link.close();
        };
    }

    /// F13: makes the call blocked on this client (in backoff, connecting or awaiting a reply)
    /// return `EINTR` promptly. A wake is never lost: with no call in progress (or one that
    /// finishes without blocking again) it is kept, and the next call returns `EINTR` at once —
    /// what a daemon shutting down wants when its wake races with the start of a call.
    pub fn wakeup(&self) {
        self.waker.wake();
    }

    /// F13, non-blocking and without a kept wake: wakes the call in progress, if any, and says
    /// whether there was one.
    pub fn try_wakeup(&self) -> bool {
        if self.active_calls.load(Ordering::SeqCst) > 0 {
            self.waker.wake();
            true
        } else {
            false
        }
    }

    /// F15: `None` restores `XCE_RETRY_DEFAULTS`; an invalid config is `EINVAL`. Waits for the
    /// call in progress, if any.
    pub fn set_retry_config(&self, cfg: Option<RetryConfig>) -> Result<(), Error> {
        let cfg = cfg.unwrap_or(XCE_RETRY_DEFAULTS);
        cfg.validate()?;
        self.with_link(|l| l.retry = cfg)
    }

    pub fn retry_config(&self) -> RetryConfig {
        self.with_link(|l| l.retry).unwrap_or(XCE_RETRY_DEFAULTS)
    }

    /// F15: sets one knob (timeouts, deadline, hint policy, waitPrimary).
    pub fn set_option(&self, opt: ClientOption) -> Result<(), Error> {
        self.with_link(|l| l.options.apply(opt))?
    }

    pub fn options(&self) -> Options {
        self.with_link(|l| l.options).unwrap_or_default()
    }

    /// F10: installs (or with `None` removes) the reconnect hook. It runs on the calling thread
    /// after a reconnect, once the new connection is confirmed to reach the primary (one
    /// `hello`; a standby's answer just rotates on), and before the interrupted op is re-sent:
    /// once per failover. Ops it makes on this client are single attempts on that connection; a
    /// negative return is a failed attempt, classified like a status.
    pub fn set_reconnect_handler(&self, hook: Option<ReconnectHook>) {
        *self.hook.lock() = hook;
    }

    /// F17: installs (or removes) the event callback.
    pub fn set_event_handler(&self, handler: Option<EventHandler>) {
        self.observer.set_handler(handler);
    }

    /// F17 counters; never waits for a call in progress.
    pub fn stats(&self) -> Stats {
        self.observer.stats()
    }

    /// F19: the report of the last failed call on this client; never waits.
    pub fn last_error(&self) -> Option<CallReport> {
        self.observer.last_error()
    }

    /// The random id carried by this client's writes (F16).
    pub fn client_id(&self) -> ClientId {
        self.with_link(|l| l.client_id).unwrap_or_default()
    }

    /// Runs `f` on the link under the context lock; `EDEADLK` from inside an event or log
    /// callback that fired during a call on this client.
    fn with_link<T>(&self, f: impl FnOnce(&mut Link) -> T) -> Result<T, Error> {
        let guard = self.link.lock();
        let mut link = guard
            .try_borrow_mut()
            .map_err(|_| Error::Errno(libc::EDEADLK))?;
        Ok(f(&mut link))
    }

    /// Runs the reconnect hook, if one is installed; `None` otherwise. The hook is taken out of
    /// its slot while it runs, so it may replace itself (a hook that panics is dropped).
    fn run_reconnect_hook(&self) -> Option<i32> {
        let mut hook = self.hook.lock().take()?;
        let rc = hook(self);
        let mut slot = self.hook.lock();
        if slot.is_none() {
            *slot = Some(hook);
        }
        Some(rc)
    }

    /// F1: the one entry every op goes through. Returns the successful reply.
    pub fn call(&self, op: Op) -> Result<Reply, Error> {
        let guard = self.link.lock();
        if self.waker.take() {
            // F13: a wake kept from before this call.
            return Err(Error::Errno(libc::EINTR));
        }
        /// Counts the call as active until it returns or unwinds (a panicking callback).
        struct Active<'a>(&'a AtomicUsize);
        impl Drop for Active<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.active_calls.fetch_add(1, Ordering::SeqCst);
        let _active = Active(&self.active_calls);
        let run_hook = || self.run_reconnect_hook();
        let env = CallEnv {
            link: &guard,
            waker: &self.waker,
            observer: &self.observer,
            run_hook: &run_hook,
            has_hook: self.hook.lock().is_some(),
        };
        retry::run(&env, op)
    }

    // ---------------------------------------------------------------------------------------
    // Reply-bearing reads

    pub fn hello(&self) -> Result<ControllerInfo, Error> {
        let op = Op::Hello(Hello {
            client_name: self.client_name.clone(),
            protocol_version: PROTOCOL_VERSION,
        });
        reply_data!(self.call(op)?, ReplyData::CtrlInfo(i) => i)
    }

    /// Every job matching `filter`, paged through one snapshot (listing.rs): any size.
    pub fn joblist(&self, filter: JobFilter) -> Result<Vec<Job>, Error> {
        self.joblist_all(filter)
    }

    pub fn jobinfo(&self, job_id: u64) -> Result<Job, Error> {
        reply_data!(self.call(Op::JobInfo { job_id })?, ReplyData::Job(j) => j)
    }

    pub fn reslist(&self) -> Result<Vec<Resource>, Error> {
        reply_list!(self.call(Op::ResList)?, ReplyData::Resources(v) => v)
    }

    pub fn workerlist(&self) -> Result<Vec<Host>, Error> {
        reply_list!(self.call(Op::WorkerList)?, ReplyData::Hosts(v) => v)
    }

    pub fn clusterconf(&self) -> Result<ClusterConf, Error> {
        reply_data!(self.call(Op::ClusterConf)?, ReplyData::ClusterConf(c) => c)
    }

    pub fn resval(&self, host: &str) -> Result<Vec<ResVal>, Error> {
        reply_list!(self.call(Op::ResVal { host: host.into() })?, ReplyData::ResVals(v) => v)
    }

    // ---------------------------------------------------------------------------------------
    // Reply-bearing writes (F16: each carries this client's id and a request id that stays the
    // same across the re-sends of one call)

    /// Returns the session id.
    pub fn join(&self, join: Join) -> Result<u64, Error> {
        reply_data!(self.call(Op::Join(join))?, ReplyData::SessionId(id) => id)
    }

    /// Submits a job; a `job_id` of 0 is replaced by [`new_job_id`]. Returns the job id.
    pub fn jobsubmit(&self, mut spec: JobSpec) -> Result<u64, Error> {
        if spec.job_id == 0 {
            spec.job_id = new_job_id();
        }
        let job_id = spec.job_id;
        // A DUP on a re-send (F4) carries no data: the id we sent is the answer.
        match self.call(Op::JobSubmit(spec))?.data {
            ReplyData::JobId(id) => Ok(id),
            _ => Ok(job_id),
        }
    }

    pub fn jobdispatch(&self, job_id: u64, host: &str) -> Result<(), Error> {
        self.call(Op::JobDispatch {
            job_id,
            host: host.into(),
        })
        .map(drop)
    }

    pub fn jobctrl(&self, job_id: u64, action: JobAction) -> Result<(), Error> {
        self.call(Op::JobCtrl { job_id, action }).map(drop)
    }

    pub fn queuectrl(&self, queue: &str, action: QueueAction) -> Result<(), Error> {
        self.call(Op::QueueCtrl {
            queue: queue.into(),
            action,
        })
        .map(drop)
    }

    pub fn hostctrl(&self, host: &str, action: HostAction) -> Result<(), Error> {
        self.call(Op::HostCtrl {
            host: host.into(),
            action,
        })
        .map(drop)
    }

    pub fn update_resvals(&self, host: &str, resvals: Vec<ResVal>) -> Result<(), Error> {
        self.call(Op::UpdateResvals {
            host: host.into(),
            resvals,
        })
        .map(drop)
    }

    pub fn update_jusage(&self, job_id: u64, usage: Usage) -> Result<(), Error> {
        self.call(Op::UpdateJusage { job_id, usage }).map(drop)
    }

    /// Returns the task id.
    pub fn runtask(&self, host: &str, command: &str) -> Result<u64, Error> {
        reply_data!(self.call(Op::RunTask { host: host.into(), command: command.into() })?, ReplyData::TaskId(t) => t)
    }

    pub fn set_pend_reason(&self, job_id: u64, reason: &str) -> Result<(), Error> {
        self.call(Op::SetPendReason {
            job_id,
            reason: reason.into(),
        })
        .map(drop)
    }

    pub fn clear_reason(&self, job_id: u64) -> Result<(), Error> {
        self.call(Op::ClearReason { job_id }).map(drop)
    }

    // ---------------------------------------------------------------------------------------
    // Fire-and-forget (F12): the send result only

    pub fn notify(&self, notify: Notify) -> Result<(), Error> {
        self.call(Op::Notify(notify)).map(drop)
    }

    pub fn heartbeat(&self, host: &str) -> Result<(), Error> {
        self.call(Op::Heartbeat { host: host.into() }).map(drop)
    }

    pub fn nop(&self) -> Result<(), Error> {
        self.call(Op::Nop).map(drop)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.link.get_mut().get_mut().close();
    }
}

/// Keeps `Arc<Client>` usable from many threads (c-api.md, F11).
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Client>();
    assert_send_sync::<Arc<Client>>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_masters() {
        let m = parse_masters("a:1, b.example:2 ,[::1]:3").unwrap();
        assert_eq!(
            m,
            vec![
                Endpoint::new("a", 1),
                Endpoint::new("b.example", 2),
                Endpoint::new("::1", 3)
            ]
        );
        for bad in [
            "",
            "a",
            "a:",
            "a:0",
            "a:70000",
            "a:1,,b:2",
            ":5",
            "a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8,i:9",
        ] {
            assert_eq!(
                parse_masters(bad),
                Err(Error::Errno(libc::EINVAL)),
                "{bad:?}"
            );
        }
        let long = format!("{}:1", "h".repeat(XCE_MAXHOSTNAME_LEN + 1));
        assert!(parse_masters(&long).is_err());
    }

    #[test]
    fn job_ids_are_unique_and_never_zero() {
        let mut ids: Vec<u64> = (0..10_000).map(|_| new_job_id()).collect();
        assert!(ids.iter().all(|&i| i != 0));
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 10_000);
    }
}
