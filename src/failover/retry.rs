//! THE retry loop (F1): the one place where the pure decisions meet sockets, sleeps and
//! callbacks. (Skeleton: the loop body lands in the next commit.)

use std::cell::RefCell;
use std::sync::Arc;

use super::backoff::RetryConfig;
use super::options::Options;
use super::report::Observer;
use super::rotate::Rotator;
use crate::error::Error;
use crate::transport::Waker;
use crate::wire::{ClientId, Op, Reply};

/// The state of one context that the loop mutates, kept under the context lock (F11).
pub struct Link {
    pub rotator: Rotator,
    pub client_id: ClientId,
    pub retry: RetryConfig,
    pub options: Options,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Last `seq` sent; replies must echo the awaited one (F9).
    pub seq: u64,
    /// Last write request id handed out (F16).
    pub request_id: u64,
    /// True while the reconnect hook runs: nested calls are single attempts (F10).
    pub in_hook: bool,
}

impl Link {
    pub fn new(
        rotator: Rotator,
        client_id: ClientId,
        retry: RetryConfig,
        options: Options,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Link {
        Link {
            rotator,
            client_id,
            retry,
            options,
            tls,
            seq: 0,
            request_id: 0,
            in_hook: false,
        }
    }

    /// Closes the connection, if any.
    pub fn close(&mut self) {}
}

/// What one call borrows from its client.
pub struct CallEnv<'a> {
    pub link: &'a RefCell<Link>,
    pub waker: &'a Waker,
    pub observer: &'a Observer,
    /// Runs the reconnect hook (F10); `None` when none is installed.
    pub run_hook: &'a dyn Fn() -> Option<i32>,
}

/// F2: connects to the first reachable master in list order.
pub fn connect_first(_link: &mut Link, _waker: &Waker, _observer: &Observer) -> Result<(), Error> {
    Ok(())
}

/// F1: runs `op` to success, a terminal error, or budget exhaustion.
pub fn run(_env: &CallEnv<'_>, _op: Op) -> Result<Reply, Error> {
    Err(Error::Internal)
}
