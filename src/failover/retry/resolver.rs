//! F23: name resolution inside a call — for redirect hints, `waitPrimary` answers and members
//! learned from the primary — bounded by the connect timeout and the call's deadline, ended by
//! the call's waker. Used by the call, its probe and backoff, the fire-and-forget path and the
//! members' `hello`.

use std::net::SocketAddr;
use std::time::Instant;

use super::{cap, CallEnv};
use crate::transport::resolve;

/// Name resolution for hints and `waitPrimary` answers (F23): bounded by the connect timeout
/// and the call's deadline, ended by a wake (then no address: the hint is not followed, and the
/// wait that follows reports the wake).
pub fn bounded_resolver<'a>(
    env: &'a CallEnv<'_>,
    deadline: Option<Instant>,
) -> impl Fn(&str, u16) -> Vec<SocketAddr> + 'a {
    let until = cap(Instant::now() + env.options().connect_timeout, deadline);
    move |host: &str, port: u16| resolve::resolve(host, port, until, &env.waker).unwrap_or_default()
}
