//! P3, P4, P5, P6 and the SVG data: kill -9 the primary of a real 3-node cluster under
//! clients whose call is in flight, and time each client's first success against two marks:
//! the kill, and the moment the new primary was ready (seen by a separate prober).
//!
//! A round: every client makes one call so that it is connected to the primary and idle
//! ("armed"); the prober threads start; the primary is killed (`t_kill`, then reaped); every
//! client is released at once and makes one `hello`, which has to go through the failover;
//! its completion is its first success. Then the killed node is restarted and has to rejoin
//! before the next round.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use xce::client::{Client, Config};
use xce::client::{ClientOption, Event, Options, XCE_RETRY_DEFAULTS};
use xce_proto::wire::{self, Limits, ReplyData, Request};

use super::steady::{hello_op, CLIENT_NAME};
use crate::Cluster;

/// Interval between two probes of one node (the resolution of "ready").
pub const PROBE_INTERVAL: Duration = Duration::from_millis(1);
/// Safety bound of every client call in these benchmarks (`CallDeadlineMs`); it never shapes a
/// healthy failover, which ends long before.
pub const CALL_SAFETY_DEADLINE_MS: u32 = 30_000;
/// Bounds of the waits of one round.
const ARM_TIMEOUT: Duration = Duration::from_secs(60);
const READY_TIMEOUT: Duration = Duration::from_secs(20);
const DONE_TIMEOUT: Duration = Duration::from_secs(45);
const REJOIN_TIMEOUT: Duration = Duration::from_secs(20);
/// Pause after a restarted node rejoined, before the next kill: the controller's README
/// measured that a node killed before the last victim caught up makes the next election
/// slow (1.8–3.6 s instead of ~1.1 s), which would measure the cluster, not the client.
pub const STEADY_PAUSE: Duration = Duration::from_millis(1500);
/// Stack of a client thread: the library needs little, and P6 runs a thousand of them.
const CLIENT_STACK: usize = 256 * 1024;

/// A retry policy under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The library's defaults: `XCE_RETRY_DEFAULTS`, waitPrimary on (F18).
    Ours,
    /// The seeds' primitive expressed with the same knobs: 50 ms × 2 up to 5 s, waitPrimary off.
    Baseline,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Ours => "ours (default policy)",
            Policy::Baseline => "baseline (50 ms × 2 … 5 s, waitPrimary off)",
        }
    }

    pub fn options(self) -> Options {
        let mut o = Options::default();
        o.apply(ClientOption::CallDeadlineMs(CALL_SAFETY_DEADLINE_MS))
            .expect("valid option");
        if self == Policy::Baseline {
            o.apply(ClientOption::WaitPrimary(false))
                .expect("valid option");
        }
        o
    }

    /// A context over `masters` (`host:port,…`), environment overrides ignored.
    pub fn client(self, masters: &str) -> Result<Client, String> {
        let m = xce::client::parse_masters(masters).map_err(|e| format!("masters: {e}"))?;
        let mut cfg = Config::new(m);
        cfg.client_name = CLIENT_NAME.into();
        Client::start_with(cfg, self.options(), XCE_RETRY_DEFAULTS)
            .map_err(|e| format!("start client: {e}"))
    }
}

// ---------------------------------------------------------------------------------------------
// The prober

/// The first `hello` that a surviving node served after the kill.
#[derive(Debug, Clone, Copy)]
pub struct Ready {
    pub node: u32,
    /// When that probe was sent: the new primary was ready at the latest when it answered,
    /// and at the earliest just after the previous probe (≤ [`PROBE_INTERVAL`] + one round trip).
    pub sent: Instant,
    pub answered: Instant,
}

/// One thread per node, each polling its node with a raw `hello` every [`PROBE_INTERVAL`]
/// on a kept-alive connection, until one of them is served.
pub struct Prober {
    stop: Arc<AtomicBool>,
    found: Arc<(Mutex<Option<Ready>>, Condvar)>,
    threads: Vec<JoinHandle<()>>,
}

impl Prober {
    pub fn start(nodes: &[(u32, SocketAddr)]) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let found = Arc::new((Mutex::new(None), Condvar::new()));
        let threads = nodes
            .iter()
            .map(|&(id, addr)| {
                let (stop, found) = (stop.clone(), found.clone());
                std::thread::spawn(move || probe_loop(id, addr, &stop, &found))
            })
            .collect();
        Prober {
            stop,
            found,
            threads,
        }
    }

    /// Waits for the first served probe, at most `timeout`.
    pub fn wait(&self, timeout: Duration) -> Option<Ready> {
        let (m, cv) = &*self.found;
        let g = m.lock().expect("prober lock");
        let (g, _) = cv
            .wait_timeout_while(g, timeout, |r| r.is_none())
            .expect("prober lock");
        *g
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn probe_loop(
    id: u32,
    addr: SocketAddr,
    stop: &AtomicBool,
    found: &(Mutex<Option<Ready>>, Condvar),
) {
    let limits = Limits::default();
    let until = Instant::now() + READY_TIMEOUT + Duration::from_secs(5);
    let mut conn: Option<TcpStream> = None;
    let (mut out, mut inb) = (Vec::new(), Vec::new());
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        if found.0.lock().expect("prober lock").is_some() {
            return;
        }
        if conn.is_none() {
            conn = TcpStream::connect_timeout(&addr, Duration::from_millis(50))
                .and_then(|s| {
                    s.set_nodelay(true)?;
                    s.set_read_timeout(Some(Duration::from_millis(100)))?;
                    Ok(s)
                })
                .ok();
        }
        if let Some(s) = conn.as_mut() {
            seq += 1;
            out.clear();
            let req = Request {
                seq,
                client_id: [9; 16],
                request_id: 0,
                no_reply: false,
                op: hello_op(),
                auth_token: String::new(),
                forward_within_ms: 0,
            };
            wire::encode_request(&req, &mut out);
            let sent = Instant::now();
            let served = s
                .write_all(&out)
                .map_err(|e| e.to_string())
                .and_then(|()| wire::read_frame(s, &limits, &mut inb).map_err(|e| e.to_string()))
                .and_then(|()| wire::decode_reply(&inb, &limits).map_err(|e| e.to_string()));
            match served {
                Ok(r)
                    if r.seq == seq
                        && r.status >= 0
                        && matches!(r.data, ReplyData::CtrlInfo(_)) =>
                {
                    let answered = Instant::now();
                    let (m, cv) = found;
                    let mut g = m.lock().expect("prober lock");
                    if g.is_none() {
                        *g = Some(Ready {
                            node: id,
                            sent,
                            answered,
                        });
                    }
                    cv.notify_all();
                    return;
                }
                Ok(r) if r.seq == seq => {} // a standby or candidate: not yet
                _ => conn = None,           // failed or out of step: start afresh
            }
        }
        std::thread::sleep(PROBE_INTERVAL);
    }
}

// ---------------------------------------------------------------------------------------------
// Armed clients

/// The one call a client made through a failover.
#[derive(Debug, Clone)]
pub struct CallRecord {
    pub policy: Policy,
    pub start: Instant,
    pub end: Instant,
    pub error: Option<String>,
    /// F17 counters of the context during this call: attempts beyond the first, rotations,
    /// time spent sleeping or in waitPrimary (ms).
    pub retries: u64,
    pub rotations: u64,
    pub backoff_ms: u64,
}

/// `(when, from port, to port)` of every rotation of a group of contexts (F17 events).
pub type RotationLog = Arc<Mutex<Vec<(Instant, u16, u16)>>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmd {
    Arm,
    Go,
    Quit,
}

#[derive(Debug)]
struct RigState {
    cmd: Cmd,
    gen: u64,
    armed: usize,
    arm_errors: Vec<String>,
    done: Vec<CallRecord>,
}

struct RigShared {
    st: Mutex<RigState>,
    /// Clients wait here for a command.
    cmd_cv: Condvar,
    /// The coordinator waits here for reports.
    report_cv: Condvar,
}

/// `n` contexts, one thread each, kept across rounds.
pub struct Rig {
    shared: Arc<RigShared>,
    threads: Vec<JoinHandle<()>>,
    pub n: usize,
    pub rotations: Option<RotationLog>,
}

impl Rig {
    /// Creates `n` contexts of `policy` (connected by `start`) and their threads.
    pub fn new(
        n: usize,
        policy: Policy,
        masters: &str,
        record_rotations: bool,
    ) -> Result<Rig, String> {
        let shared = Arc::new(RigShared {
            st: Mutex::new(RigState {
                cmd: Cmd::Quit,
                gen: 0,
                armed: 0,
                arm_errors: Vec::new(),
                done: Vec::new(),
            }),
            cmd_cv: Condvar::new(),
            report_cv: Condvar::new(),
        });
        let rotations: Option<RotationLog> =
            record_rotations.then(|| Arc::new(Mutex::new(Vec::new())));
        let mut rig = Rig {
            shared: shared.clone(),
            threads: Vec::with_capacity(n),
            n,
            rotations: rotations.clone(),
        };
        for i in 0..n {
            let ctx = policy.client(masters)?;
            if let Some(log) = &rotations {
                let log = log.clone();
                ctx.set_event_handler(Some(Arc::new(move |e: &Event| {
                    if let Event::Rotation { from, to, .. } = e {
                        log.lock().expect("rotation log").push((
                            Instant::now(),
                            from.port,
                            to.port,
                        ));
                    }
                })));
            }
            let sh = shared.clone();
            let t = std::thread::Builder::new()
                .name(format!("bench-client-{i}"))
                .stack_size(CLIENT_STACK)
                .spawn(move || client_loop(&ctx, policy, &sh))
                .map_err(|e| format!("spawn client thread {i}: {e}"))?;
            rig.threads.push(t);
        }
        Ok(rig)
    }

    fn command(&self, cmd: Cmd) {
        let mut st = self.shared.st.lock().expect("rig lock");
        st.cmd = cmd;
        st.gen += 1;
        if cmd == Cmd::Arm {
            st.armed = 0;
            st.arm_errors.clear();
            st.done.clear();
        }
        self.shared.cmd_cv.notify_all();
    }

    /// Every context makes one call (connecting to the primary); errors if any fails.
    pub fn arm(&self) -> Result<(), String> {
        self.command(Cmd::Arm);
        let st = self.shared.st.lock().expect("rig lock");
        let (st, to) = self
            .shared
            .report_cv
            .wait_timeout_while(st, ARM_TIMEOUT, |s| s.armed + s.arm_errors.len() < self.n)
            .expect("rig lock");
        if to.timed_out() {
            return Err(format!(
                "arming: only {} of {} clients ready after {ARM_TIMEOUT:?}",
                st.armed, self.n
            ));
        }
        match st.arm_errors.first() {
            Some(e) => Err(format!(
                "arming: {} of {} clients failed, e.g. {e}",
                st.arm_errors.len(),
                self.n
            )),
            None => Ok(()),
        }
    }

    /// Releases every context into its one call.
    pub fn go(&self) {
        if let Some(l) = &self.rotations {
            l.lock().expect("rotation log").clear();
        }
        self.command(Cmd::Go);
    }

    /// The calls of this round; a client still blocked after `timeout` is missing from it.
    pub fn wait_done(&self, timeout: Duration) -> Vec<CallRecord> {
        let st = self.shared.st.lock().expect("rig lock");
        let (st, _) = self
            .shared
            .report_cv
            .wait_timeout_while(st, timeout, |s| s.done.len() < self.n)
            .expect("rig lock");
        st.done.clone()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.command(Cmd::Quit);
        for t in self.threads.drain(..) {
            // Bounded: a call in progress ends by CALL_SAFETY_DEADLINE_MS at the latest.
            let _ = t.join();
        }
    }
}

fn client_loop(ctx: &Client, policy: Policy, sh: &RigShared) {
    let mut seen = 0u64;
    loop {
        let cmd = {
            let st = sh.st.lock().expect("rig lock");
            let st = sh
                .cmd_cv
                .wait_while(st, |s| s.gen == seen)
                .expect("rig lock");
            seen = st.gen;
            st.cmd
        };
        match cmd {
            Cmd::Quit => return,
            Cmd::Arm => {
                let r = ctx.hello();
                let mut st = sh.st.lock().expect("rig lock");
                match r {
                    Ok(_) => st.armed += 1,
                    Err(e) => st.arm_errors.push(e.to_string()),
                }
                sh.report_cv.notify_one();
            }
            Cmd::Go => {
                let before = ctx.stats();
                let start = Instant::now();
                let r = ctx.hello();
                let end = Instant::now();
                let after = ctx.stats();
                let error = r.err().map(|e| match ctx.last_error() {
                    Some(rep) => rep.to_string(),
                    None => e.to_string(),
                });
                let mut st = sh.st.lock().expect("rig lock");
                st.done.push(CallRecord {
                    policy,
                    start,
                    end,
                    error,
                    retries: after.retries - before.retries,
                    rotations: after.rotations - before.rotations,
                    backoff_ms: after.backoff_ms - before.backoff_ms,
                });
                sh.report_cv.notify_one();
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A round

/// What one kill produced.
pub struct Round {
    pub killed: u32,
    pub t_kill: Instant,
    /// The killed process was reaped (its sockets are closed).
    pub t_dead: Instant,
    pub ready: Option<Ready>,
    /// The new primary's client port (from the prober), for counting connects to it.
    pub new_primary_port: Option<u16>,
    /// Per rig, in the order given.
    pub calls: Vec<Vec<CallRecord>>,
}

impl Round {
    /// ms from `a` to `b` (negative if `b` is earlier).
    pub fn ms(a: Instant, b: Instant) -> f64 {
        if b >= a {
            (b - a).as_secs_f64() * 1e3
        } else {
            -((a - b).as_secs_f64() * 1e3)
        }
    }
}

/// Raw `hello` to `addr`: Ok(true) when the node answers as a standby that knows a primary
/// (or serves as primary), Ok(false) when it answers otherwise.
fn knows_primary(addr: SocketAddr) -> bool {
    match crate::harness::cluster::raw_call(addr, hello_op(), Duration::from_millis(300)) {
        Ok(r) if r.status >= 0 => true,
        Ok(r) => matches!(r.data, ReplyData::CtrlInfo(ref i) if i.primary_id != 0),
        Err(_) => false,
    }
}

/// Restarts `id` and waits until it answers knowing the primary.
pub fn restart_and_rejoin(cluster: &mut Cluster, id: u32) -> Result<(), String> {
    cluster
        .restart(id)
        .map_err(|e| format!("restart node {id}: {e}"))?;
    let addr = cluster.node(id).client;
    let until = Instant::now() + REJOIN_TIMEOUT;
    while Instant::now() < until {
        if knows_primary(addr) {
            std::thread::sleep(STEADY_PAUSE);
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!(
        "node {id} did not rejoin within {REJOIN_TIMEOUT:?}"
    ))
}

/// One kill of the primary under `rigs` (armed, then released at the kill).
pub fn kill_round(cluster: &mut Cluster, rigs: &[&Rig]) -> Result<Round, String> {
    let old = cluster
        .wait_primary(READY_TIMEOUT)
        .ok_or("no primary before the kill")?;
    for r in rigs {
        r.arm()?;
    }
    let survivors: Vec<(u32, SocketAddr)> = cluster
        .nodes
        .iter()
        .filter(|n| n.id != old && n.is_running())
        .map(|n| (n.id, n.client))
        .collect();
    let prober = Prober::start(&survivors);
    // Let the probers connect before the kill.
    std::thread::sleep(Duration::from_millis(20));
    let t_kill = Instant::now();
    cluster.kill(old);
    let t_dead = Instant::now();
    for r in rigs {
        r.go();
    }
    let ready = prober.wait(READY_TIMEOUT);
    let calls: Vec<Vec<CallRecord>> = rigs.iter().map(|r| r.wait_done(DONE_TIMEOUT)).collect();
    prober.stop();
    let new_primary_port = ready.map(|r| cluster.node(r.node).client.port());
    restart_and_rejoin(cluster, old)?;
    Ok(Round {
        killed: old,
        t_kill,
        t_dead,
        ready,
        new_primary_port,
        calls,
    })
}

// ---------------------------------------------------------------------------------------------
// The SVG round: clients calling continuously through one failover

/// One request of a continuously calling client.
#[derive(Debug, Clone)]
pub struct Sample {
    pub policy: Policy,
    /// Index of the client among all of the round's clients.
    pub client: usize,
    pub start: Instant,
    pub end: Instant,
    pub ok: bool,
}

/// A timeline of one failover with both policies side by side.
pub struct Timeline {
    pub t_kill: Instant,
    pub ready: Option<Ready>,
    pub samples: Vec<Sample>,
    pub clients_per_policy: usize,
    pub pace: Duration,
}

/// `per_policy` clients of each policy call `hello` every `pace` from 400 ms before the kill
/// until 400 ms after every one of them succeeded after the election (bounded).
pub fn timeline_round(
    cluster: &mut Cluster,
    per_policy: usize,
    pace: Duration,
) -> Result<Timeline, String> {
    let old = cluster
        .wait_primary(READY_TIMEOUT)
        .ok_or("no primary before the kill")?;
    let masters = cluster.masters();
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let mut threads = Vec::new();
    for (pi, policy) in [Policy::Ours, Policy::Baseline].into_iter().enumerate() {
        for k in 0..per_policy {
            let client = pi * per_policy + k;
            let ctx = policy.client(&masters)?;
            let (stop, samples) = (stop.clone(), samples.clone());
            threads.push(std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    let start = Instant::now();
                    let ok = ctx.hello().is_ok();
                    let end = Instant::now();
                    samples.lock().expect("samples").push(Sample {
                        policy,
                        client,
                        start,
                        end,
                        ok,
                    });
                    std::thread::sleep(pace);
                }
            }));
        }
    }
    let finish = |threads: Vec<JoinHandle<()>>| {
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            let _ = t.join();
        }
    };
    std::thread::sleep(Duration::from_millis(400));
    let survivors: Vec<(u32, SocketAddr)> = cluster
        .nodes
        .iter()
        .filter(|n| n.id != old)
        .map(|n| (n.id, n.client))
        .collect();
    let prober = Prober::start(&survivors);
    std::thread::sleep(Duration::from_millis(20));
    let t_kill = Instant::now();
    cluster.kill(old);
    let ready = prober.wait(READY_TIMEOUT);
    prober.stop();
    // Until every client has succeeded after the election (bounded), then a little more.
    let after = ready.map_or(t_kill, |r| r.sent);
    let until = Instant::now() + DONE_TIMEOUT;
    while Instant::now() < until {
        let s = samples.lock().expect("samples");
        let recovered =
            (0..2 * per_policy).all(|c| s.iter().any(|x| x.client == c && x.ok && x.end > after));
        drop(s);
        if recovered {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(400));
    finish(threads);
    restart_and_rejoin(cluster, old)?;
    let samples = std::mem::take(&mut *samples.lock().expect("samples"));
    Ok(Timeline {
        t_kill,
        ready,
        samples,
        clients_per_policy: per_policy,
        pace,
    })
}
