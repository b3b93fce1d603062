//! Probes: whether a connection reaches the primary (a `hello`, F10, F12), and — while a reply
//! is late — whether another controller knows of a new primary (F25).

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::call::Call;
use super::link::Spare;
use super::resolver::bounded_resolver;
use super::{clog, LoopState};
use crate::failover::log::Level;
use crate::failover::rotate::Endpoint;
use crate::failover::wait_primary;
use crate::transport::{Connection, Waker};
use crate::wire::{Hello, Op, ReplyData, RequestHead, PROTOCOL_VERSION};

/// The `hello` that tells whether a new connection reaches the primary (F10, F12).
pub fn primary_probe() -> Op {
    Op::Hello(Hello {
        client_name: String::new(),
        protocol_version: PROTOCOL_VERSION,
    })
}

/// What a probe learned (F25).
pub enum Probed {
    /// Nothing: the loop waits on for the late reply.
    Nothing,
    /// Another configured master is the primary now.
    NewPrimary(Spare),
    /// F28: the witness vouches for the late primary itself (its appends reach the witness
    /// now), so this client's way to it is what fails: the request may go through the witness.
    Vouched { witness: usize, conn: Connection },
}

impl Call<'_, '_> {
    /// F25: asks another controller whether the primary changed, while the reply on `late_fd`
    /// may still arrive (its arrival ends the probe). The other configured masters are raced
    /// (a silent one costs nothing); the first to connect is asked, with forwarding on (F28),
    /// whom it follows right now (`waitPrimary` with no wait), then, unless that told, for a
    /// primary other than the current one until the reply's own deadline. The witness's
    /// connection comes back with what it said, for the next attempt or a re-send through it.
    pub fn probe(&mut self, state: &mut LoopState, late_fd: RawFd, until: Instant) -> Probed {
        let env = self.env;
        let ids = state.ids.read();
        let link = &mut state.link;
        let Some(current) = link.rotator.current_master() else {
            return Probed::Nothing;
        };
        let waker = env.waker.watching(late_fd);
        let Some((witness, mut conn)) = self.connect_another(link, &waker, until) else {
            return Probed::Nothing;
        };
        let p = link.rotator.masters()[current].clone();
        let resolve = bounded_resolver(env, self.spec.deadline);
        let mut ask = |seq: u64, timeout_ms: u32, exclude: Option<&Endpoint>| -> Option<usize> {
            let op = Op::WaitPrimary {
                timeout_ms,
                exclude_host: exclude.map(|e| e.host.clone()).unwrap_or_default(),
                exclude_port: exclude.map_or(0, |e| e.port),
            };
            let head = RequestHead {
                seq,
                client_id: ids.client_id,
                request_id: 0,
                no_reply: false,
                auth_token: &link.auth_token,
                forward_within_ms: 0,
            };
            conn.send_op(&head, &op, until, &waker).ok()?;
            let reply = conn.recv(seq, until, &waker).ok()?;
            let ReplyData::CtrlInfo(info) = &reply.data else {
                return None;
            };
            if reply.status < 0 || !wait_primary::names_someone(info) {
                return None;
            }
            link.rotator
                .find_master(&info.primary_host, info.primary_port, &resolve)
        };
        // F28: whom the witness follows now (a fresh leader only, C16).
        let now = if env.options().forward {
            ask(1, 0, None)
        } else {
            None
        };
        let named = match now {
            Some(m) => Some(m),
            None => {
                let wait_ms = until
                    .saturating_duration_since(Instant::now())
                    .as_millis()
                    .clamp(1, u128::from(u32::MAX)) as u32;
                ask(2, wait_ms, Some(&p))
            }
        };
        let Some(named) = named else {
            return Probed::Nothing;
        };
        clog!(
            env,
            Level::Debug,
            "asked {} about the primary: {}",
            link.rotator.masters()[witness],
            link.rotator.masters()[named]
        );
        if named == current {
            Probed::Vouched { witness, conn }
        } else {
            Probed::NewPrimary(Spare {
                witness,
                named,
                conn,
            })
        }
    }

    /// Races connects to the configured masters other than the current one (a silent one
    /// costs nothing); the first to connect (its index among the masters) and its connection.
    fn connect_another(
        &self,
        link: &super::Link,
        waker: &Waker,
        until: Instant,
    ) -> Option<(usize, Connection)> {
        let others = link.others_resolved(0);
        if others.is_empty() {
            return None;
        }
        let masters = link.rotator.masters();
        let hosts: Vec<(&str, &[SocketAddr])> = others
            .iter()
            .map(|(i, a)| (masters[*i].host.as_str(), a.as_slice()))
            .collect();
        let connect_until = (Instant::now() + self.env.options().connect_timeout).min(until);
        let (k, conn) = Connection::connect_race(
            &hosts,
            Duration::ZERO,
            link.tls.as_ref(),
            link.limits,
            connect_until,
            waker,
        )
        .ok()?;
        Some((others[k].0, conn))
    }
}
