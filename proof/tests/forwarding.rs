//! F28 / C16 with real controllers: a client that can reach the standbys but not the primary
//! is served through a standby that forwards its requests, every write exactly once.
//!
//! The client reaches each controller through a small TCP relay of this test; the primary's
//! relay then turns hostile for this client only (the cluster itself is untouched: no
//! election happens): `silent` drops every byte both ways (a blackhole, no RST), `replies
//! lost` lets requests through and drops the answers (a write is applied and the client
//! cannot know: its re-send through the standby must be recognised by the request id),
//! `reset` resets every connection. Learning the members (F29) is off, or the client would
//! learn the primary's real address from a forwarded `hello`. The time from losing the
//! primary to the first call served through a standby is printed (a table), not asserted.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use parking_lot::Mutex;
use xce::client::Options;
use xce::client::{parse_masters, Client, Config};

/// What a relay does to its traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pass,
    /// Every byte dropped, both ways; connections stay open.
    Silent,
    /// Requests reach the controller; its answers are dropped.
    RepliesLost,
    /// Every connection reset (open ones at their next byte, new ones at once).
    Reset,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Pass => "pass",
            Mode::Silent => "silent",
            Mode::RepliesLost => "replies lost",
            Mode::Reset => "reset",
        }
    }
}

/// A TCP relay on loopback to one controller's client port.
struct Relay {
    addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

const TICK: Duration = Duration::from_millis(20);

fn reset(s: &TcpStream) {
    // SO_LINGER 0: close sends RST.
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt on a socket we own, with a linger struct of the right size.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    let _ = s.shutdown(Shutdown::Both);
}

/// Copies `from` → `to` while the mode lets this direction through (`up`: client → controller).
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    up: bool,
    mode: Arc<Mutex<Mode>>,
    stop: Arc<AtomicBool>,
) {
    let _ = from.set_read_timeout(Some(TICK));
    let mut buf = vec![0u8; 64 << 10];
    while !stop.load(Ordering::SeqCst) {
        let m = *mode.lock();
        if m == Mode::Reset {
            reset(&from);
            reset(&to);
            return;
        }
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                let drop_it = match *mode.lock() {
                    Mode::Pass => false,
                    Mode::Silent | Mode::Reset => true,
                    Mode::RepliesLost => !up,
                };
                if !drop_it && to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => {
                let _ = to.shutdown(Shutdown::Both);
                return;
            }
        }
    }
}

impl Relay {
    fn start(target: SocketAddr) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").expect("relay bind");
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let mode = Arc::new(Mutex::new(Mode::Pass));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, st) = (mode.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new(); // connections accepted while silent: never answered
            while !st.load(Ordering::SeqCst) {
                let (c, _) = match l.accept() {
                    Ok(x) => x,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                    Err(_) => continue,
                };
                let _ = c.set_nonblocking(false);
                let _ = c.set_nodelay(true);
                match *m.lock() {
                    Mode::Silent => held.push(c),
                    Mode::Reset => reset(&c),
                    Mode::Pass | Mode::RepliesLost => {
                        let Ok(u) = TcpStream::connect_timeout(&target, Duration::from_secs(1))
                        else {
                            continue;
                        };
                        let _ = u.set_nodelay(true);
                        let (c2, u2) = (c.try_clone().unwrap(), u.try_clone().unwrap());
                        let (m1, s1, m2, s2) = (m.clone(), st.clone(), m.clone(), st.clone());
                        std::thread::spawn(move || pump(c, u, true, m1, s1));
                        std::thread::spawn(move || pump(u2, c2, false, m2, s2));
                    }
                }
            }
        });
        Relay {
            addr,
            mode,
            stop,
            thread: Some(thread),
        }
    }

    fn set(&self, m: Mode) {
        *self.mode.lock() = m;
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A cluster of 3, a relay per node, and a client over the relays (the primary's first).
fn setup(forward: bool) -> (xce_proof::Cluster, u32, Vec<(u32, Relay)>, Client) {
    let (c, p) = cluster(3);
    let mut relays: Vec<(u32, Relay)> = c
        .nodes
        .iter()
        .map(|n| (n.id, Relay::start(n.client)))
        .collect();
    relays.sort_by_key(|(id, _)| *id != p);
    let masters = relays
        .iter()
        .map(|(_, r)| r.addr.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut cfg = Config::new(parse_masters(&masters).unwrap());
    cfg.client_name = "f28".into();
    let opts = Options {
        learn_masters: false,
        forward,
        reply_timeout: Duration::from_millis(1000),
        connect_timeout: Duration::from_millis(500),
        ..Options::default()
    };
    let retry = if forward {
        Default::default()
    } else {
        short_budget()
    };
    let cl = Client::start_with(cfg, opts, retry).expect("start");
    (c, p, relays, cl)
}

/// Every job id the cluster lists, asked directly of the cluster (not through the relays).
fn listed(c: &xce_proof::Cluster) -> Vec<u64> {
    all_job_ids(&client(c))
}

struct Row {
    mode: Mode,
    first_ms: u128,
    next_mean_ms: f64,
    calls: usize,
}

fn served_through_a_standby(mode: Mode) -> Row {
    let (c, p, relays, cl) = setup(true);
    let primary_relay = &relays[0].1;
    let mut ids = Vec::new();
    let s = spec("before");
    cl.jobsubmit(s.clone()).expect("submit before the fault");
    ids.push(s.job_id);
    assert_eq!(cl.stats().current_master, Some(ep(primary_relay.addr)));

    primary_relay.set(mode);
    let t0 = Instant::now();
    let s = spec("first-after");
    cl.jobsubmit(s.clone())
        .unwrap_or_else(|e| panic!("{}: first submit after the fault: {e}", mode.name()));
    let first = t0.elapsed();
    ids.push(s.job_id);
    const N: usize = 20;
    let t1 = Instant::now();
    for i in 0..N {
        let s = spec(&format!("after-{i}"));
        cl.jobsubmit(s.clone())
            .unwrap_or_else(|e| panic!("{}: submit {i} through the standby: {e}", mode.name()));
        ids.push(s.job_id);
    }
    let next = t1.elapsed();
    // Reads are served too, through the same standby.
    let through = cl
        .joblist(Default::default())
        .expect("joblist through the standby");
    let now = cl.stats().current_master.expect("connected");
    assert_ne!(now, ep(primary_relay.addr), "still on the primary's relay");
    // The cluster never changed its primary: the standby served nothing itself.
    assert_eq!(
        c.wait_primary(Duration::from_secs(5)),
        Some(p),
        "the primary changed"
    );
    // Exactly once: each acknowledged job listed once, and nothing else.
    let all = listed(&c);
    for id in &ids {
        assert_eq!(
            all.iter().filter(|&&x| x == *id).count(),
            1,
            "{}: job {id} in {all:?}",
            mode.name()
        );
        assert!(through.iter().any(|j| j.job_id == *id));
    }
    assert_eq!(all.len(), ids.len(), "{}: {all:?} vs {ids:?}", mode.name());
    drop(cl);
    drop(relays);
    Row {
        mode,
        first_ms: first.as_millis(),
        next_mean_ms: next.as_secs_f64() * 1000.0 / N as f64,
        calls: N + 1,
    }
}

/// The three hostile modes; the F28 table printed at the end.
#[test]
fn a_client_that_reaches_only_the_standbys_is_served_exactly_once() {
    let rows: Vec<Row> = [Mode::Silent, Mode::RepliesLost, Mode::Reset]
        .into_iter()
        .map(served_through_a_standby)
        .collect();
    println!("F28: primary unreachable for one client (reply timeout 1000 ms, connect 500 ms)");
    println!("| primary's relay | first call served via a standby | next calls (mean) | writes, each listed once |");
    println!("|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} ms | {:.2} ms | {} |",
            r.mode.name(),
            r.first_ms,
            r.next_mean_ms,
            r.calls
        );
    }
}

/// Forwarding off by option: today's behaviour — the standbys only point at the primary the
/// client cannot reach, and the call fails (nothing applied).
#[test]
fn forwarding_off_gives_todays_behaviour() {
    let (c, p, relays, cl) = setup(false);
    cl.jobsubmit(spec("before"))
        .expect("submit before the fault");
    relays[0].1.set(Mode::Silent);
    let s = spec("refused");
    let t0 = Instant::now();
    let r = cl.jobsubmit(s.clone());
    assert!(r.is_err(), "served without forwarding: {r:?}");
    println!(
        "F28 off: the call failed after {} ms: {:?}",
        t0.elapsed().as_millis(),
        r
    );
    assert_eq!(c.wait_primary(Duration::from_secs(5)), Some(p));
    assert!(
        !listed(&c).contains(&s.job_id),
        "a refused write was applied"
    );
    // Turned on for the same context, the next call is served through a standby.
    cl.set_option(xce::client::ClientOption::Forward(true))
        .unwrap();
    let s2 = spec("on-again");
    cl.jobsubmit(s2.clone())
        .expect("served once forwarding is on");
    assert_eq!(listed(&c).iter().filter(|&&x| x == s2.job_id).count(), 1);
}
