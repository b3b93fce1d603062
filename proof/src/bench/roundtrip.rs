//! P1 (a small round trip through the library vs a raw TCP ping-pong of the same byte sizes)
//! and P2 (an op through the failover loop vs the same single attempt on a bare transport
//! connection), against the primary of a real 3-node cluster.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use xce::client::{Client, Config};
use xce::failover::{Endpoint, Options, XCE_RETRY_DEFAULTS};
use xce::transport::{Connection, WakeState};
use xce::wire::{
    self, Hello, JobFilter, JobSpec, Limits, Op, Reply, ReplyData, Request, PROTOCOL_VERSION,
};

use super::table::{num, Table, Verdict};
use super::{BenchOpts, Summary};
use crate::Cluster;

/// The `client_name` every bench context sends in `hello`.
pub const CLIENT_NAME: &str = "xce-bench";
/// Jobs in the P1/P2 `joblist`.
pub const JOBLIST_JOBS: usize = 10;
/// Bound of every single socket wait in this module.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A running cluster with its primary and the jobs P1/P2 list.
pub struct Steady {
    pub cluster: Cluster,
    pub primary: SocketAddr,
}

/// Starts 3 controllers, waits for a primary, submits [`JOBLIST_JOBS`] jobs.
pub fn start_steady(opts: &BenchOpts) -> Result<Steady, String> {
    let cluster =
        Cluster::start(3, opts.cluster_opts()).map_err(|e| format!("start cluster: {e}"))?;
    let id = cluster
        .wait_primary(Duration::from_secs(20))
        .ok_or("no primary elected within 20 s")?;
    let primary = cluster.node(id).client;
    let c = lib_client(&cluster.masters())?;
    for i in 0..JOBLIST_JOBS {
        c.jobsubmit(JobSpec {
            name: format!("bench-{i}"),
            user: "bench".into(),
            command: "/bin/true".into(),
            ncpus: 1,
            mem_mb: 64,
            ..Default::default()
        })
        .map_err(|e| format!("jobsubmit: {e}"))?;
    }
    Ok(Steady { cluster, primary })
}

/// A library context with the default policy (environment overrides ignored).
pub fn lib_client(masters: &str) -> Result<Client, String> {
    let masters = xce::client::parse_masters(masters).map_err(|e| format!("masters: {e}"))?;
    let mut cfg = Config::new(masters);
    cfg.client_name = CLIENT_NAME.into();
    Client::start_with(cfg, Options::default(), XCE_RETRY_DEFAULTS)
        .map_err(|e| format!("start client: {e}"))
}

pub fn hello_op() -> Op {
    Op::Hello(Hello {
        client_name: CLIENT_NAME.into(),
        protocol_version: PROTOCOL_VERSION,
    })
}

pub fn joblist_op() -> Op {
    Op::JobList(JobFilter::default())
}

/// The framed request the library sends for `op` (a read: request id 0).
fn request_frame(op: Op) -> Vec<u8> {
    let req = Request {
        seq: 1,
        client_id: [7; 16],
        request_id: 0,
        no_reply: false,
        op,
        auth_token: String::new(),
        forward_within_ms: 0,
    };
    let mut buf = Vec::new();
    wire::encode_request(&req, &mut buf);
    buf
}

/// Sends `frame` to `addr` raw and returns the reply frame as received.
fn reply_frame(addr: SocketAddr, frame: &[u8]) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.write_all(frame).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    wire::read_frame(&mut s, &Limits::default(), &mut buf).map_err(|e| e.to_string())?;
    let r = wire::decode_reply(&buf, &Limits::default()).map_err(|e| e.to_string())?;
    if r.status < 0 {
        return Err(format!("reply status {}", r.status));
    }
    Ok(buf)
}

/// A ping-pong peer: reads `req_len` bytes, writes `rep_len` bytes, until EOF. One connection.
fn spawn_pong(req_len: usize, rep_len: usize) -> Result<(SocketAddr, JoinHandle<()>), String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    let h = std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(IO_TIMEOUT));
        let mut req = vec![0u8; req_len];
        let rep = vec![0x5au8; rep_len];
        while s.read_exact(&mut req).is_ok() {
            if s.write_all(&rep).is_err() {
                break;
            }
        }
    });
    Ok((addr, h))
}

/// The raw side of the ping-pong.
struct Ping {
    s: TcpStream,
    req: Vec<u8>,
    rep: Vec<u8>,
}

impl Ping {
    fn connect(addr: SocketAddr, req_len: usize, rep_len: usize) -> Result<Ping, String> {
        let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).map_err(|e| e.to_string())?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(IO_TIMEOUT))
            .map_err(|e| e.to_string())?;
        Ok(Ping {
            s,
            req: vec![0xa5; req_len],
            rep: vec![0; rep_len],
        })
    }

    fn round(&mut self) -> Result<Duration, String> {
        let t = Instant::now();
        self.s.write_all(&self.req).map_err(|e| e.to_string())?;
        self.s
            .read_exact(&mut self.rep)
            .map_err(|e| e.to_string())?;
        Ok(t.elapsed())
    }
}

/// One single attempt without the loop: the library's own transport connection, used directly
/// (with the descriptor check every attempt makes, F21: it is transport hygiene, not failover).
pub struct Direct {
    conn: Connection,
    wake: WakeState,
    seq: u64,
}

impl Direct {
    pub fn connect(addr: SocketAddr) -> Result<Direct, String> {
        let wake = WakeState::new();
        let conn = Connection::connect(
            &addr.ip().to_string(),
            addr.port(),
            None,
            Limits::default(),
            Instant::now() + IO_TIMEOUT,
            &wake.waker_now(),
        )
        .map_err(|e| e.to_string())?;
        Ok(Direct { conn, wake, seq: 0 })
    }

    /// send + recv of `op`; the reply must be a success.
    pub fn call(&mut self, op: Op) -> Result<Reply, String> {
        self.seq += 1;
        let req = Request {
            seq: self.seq,
            client_id: [7; 16],
            request_id: 0,
            no_reply: false,
            op,
            auth_token: String::new(),
            forward_within_ms: 0,
        };
        let until = Instant::now() + IO_TIMEOUT;
        if !self.conn.usable() {
            return Err("connection unusable".into());
        }
        let waker = self.wake.waker_now();
        self.conn
            .send(&req, until, &waker)
            .map_err(|e| e.to_string())?;
        let r = self
            .conn
            .recv(self.seq, until, &waker)
            .map_err(|e| e.to_string())?;
        if r.status < 0 {
            return Err(format!("status {}", r.status));
        }
        Ok(r)
    }
}

fn timed<T>(f: impl FnOnce() -> Result<T, String>) -> Result<Duration, String> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed())
}

fn lib_hello(c: &Client) -> Result<(), String> {
    c.hello().map(drop).map_err(|e| format!("hello: {e}"))
}

fn lib_joblist(c: &Client) -> Result<(), String> {
    match c.joblist(JobFilter::default()) {
        Ok(v) if v.len() == JOBLIST_JOBS => Ok(()),
        Ok(v) => Err(format!(
            "joblist returned {} jobs, want {JOBLIST_JOBS}",
            v.len()
        )),
        Err(e) => Err(format!("joblist: {e}")),
    }
}

fn direct_hello(d: &mut Direct) -> Result<(), String> {
    match d.call(hello_op())?.data {
        ReplyData::CtrlInfo(_) => Ok(()),
        _ => Err("hello: unexpected payload".into()),
    }
}

fn direct_joblist(d: &mut Direct) -> Result<(), String> {
    match d.call(joblist_op())?.data {
        ReplyData::Jobs(v) if v.len() == JOBLIST_JOBS => Ok(()),
        _ => Err("joblist: unexpected payload".into()),
    }
}

/// P1. Per iteration, in turn: library hello, ping-pong of hello's sizes, library joblist,
/// ping-pong of joblist's sizes, and the same two frames raw to the controller (no library).
pub fn p1(steady: &Steady, opts: &BenchOpts) -> Result<Table, String> {
    let client = lib_client(&steady.cluster.masters())?;
    let hello_req = request_frame(hello_op()).len();
    let jl_req = request_frame(joblist_op()).len();
    let hello_rep = reply_frame(steady.primary, &request_frame(hello_op()))?.len();
    let jl_rep = reply_frame(steady.primary, &request_frame(joblist_op()))?.len();
    let (pa, ha) = spawn_pong(hello_req, hello_rep)?;
    let (pb, hb) = spawn_pong(jl_req, jl_rep)?;
    let mut ping_h = Ping::connect(pa, hello_req, hello_rep)?;
    let mut ping_j = Ping::connect(pb, jl_req, jl_rep)?;
    let mut direct = Direct::connect(steady.primary)?;

    let warm = opts.pick(100, 300);
    let iters = opts.pick(400, 3000);
    let mut s: [Vec<Duration>; 6] = Default::default();
    let deadline = Instant::now() + Duration::from_secs(opts.pick(30, 120));
    for i in 0..warm + iters {
        if Instant::now() > deadline {
            break;
        }
        let sample = [
            timed(|| lib_hello(&client))?,
            ping_h.round()?,
            timed(|| lib_joblist(&client))?,
            ping_j.round()?,
            timed(|| direct_hello(&mut direct))?,
            timed(|| direct_joblist(&mut direct))?,
        ];
        if i >= warm {
            for (v, d) in s.iter_mut().zip(sample) {
                v.push(d);
            }
        }
    }
    drop((ping_h, ping_j));
    let _ = (ha.join(), hb.join());
    let sum: Vec<Option<Summary>> = s.iter().map(|v| Summary::of_us(v)).collect();
    let p50 = |i: usize| sum[i].map_or(f64::NAN, |s| s.p50);

    let mut t = Table::new(
        "P1",
        "small round trip: library vs raw TCP ping-pong of the same byte sizes",
    );
    t.note(format!(
        "3 controllers (default timing), loopback; {} interleaved iterations after {warm} warm-up; \
         each iteration runs all six rows once, in order",
        s[0].len()
    ));
    t.note(format!(
        "frames: hello {hello_req} B → {hello_rep} B; joblist ({JOBLIST_JOBS} jobs) {jl_req} B → {jl_rep} B; \
         ping-pong = blocking TcpStream (TCP_NODELAY) to a thread that reads N bytes and writes M bytes"
    ));
    t.dist_header("round trip", "µs");
    t.dist_row("hello via libxce (Client::hello)", sum[0]);
    t.dist_row(
        format!("raw ping-pong {hello_req} B → {hello_rep} B"),
        sum[1],
    );
    t.dist_row(
        format!("joblist({JOBLIST_JOBS}) via libxce (Client::joblist)"),
        sum[2],
    );
    t.dist_row(format!("raw ping-pong {jl_req} B → {jl_rep} B"), sum[3]);
    t.dist_row(
        "  diag: hello frame to the controller, no library loop",
        sum[4],
    );
    t.dist_row(
        "  diag: joblist frame to the controller, no library loop",
        sum[5],
    );
    let rh = p50(0) / p50(1);
    let rj = p50(2) / p50(3);
    t.result(format!(
        "ratio (p50 library / p50 ping-pong): hello {rh:.2}×, joblist {rj:.2}×"
    ));
    t.result(format!(
        "where the time goes (p50): controller work ≈ diag − ping-pong = hello {} µs, joblist {} µs; \
         library ≈ libxce − diag = hello {} µs, joblist {} µs",
        num(p50(4) - p50(1)),
        num(p50(5) - p50(3)),
        num(p50(0) - p50(4)),
        num(p50(2) - p50(5))
    ));
    let worst = rh.max(rj);
    t.target(
        "≤ 1.5× (aim 1.2×) for hello and joblist",
        Verdict::from(
            worst <= 1.5,
            if worst <= 1.5 {
                format!(
                    "worst {worst:.2}×, {:.0}% under the limit",
                    (1.5 - worst) / 1.5 * 100.0
                )
            } else {
                format!(
                    "worst {worst:.2}×, {:.0}% over the 1.5× limit",
                    (worst - 1.5) / 1.5 * 100.0
                )
            },
        ),
    );
    Ok(t)
}

/// A fake controller for the P2 diagnostic: one thread that accepts `conns` connections and
/// answers every request on any of them with `template` (its `seq` replaced). The same thread
/// and the same work serve every client, so a difference between two clients is theirs.
fn spawn_canned(template: Reply, conns: usize) -> Result<(SocketAddr, JoinHandle<()>), String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    let h = std::thread::spawn(move || {
        let mut socks: Vec<TcpStream> = Vec::new();
        let until = Instant::now() + IO_TIMEOUT;
        while socks.len() < conns && Instant::now() < until {
            match l.accept() {
                Ok((s, _)) => {
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_nodelay(true);
                    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
                    socks.push(s);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
        let limits = Limits::default();
        let (mut inb, mut out) = (Vec::new(), Vec::new());
        let mut idle_since = Instant::now();
        while !socks.is_empty() && idle_since.elapsed() < IO_TIMEOUT {
            let mut fds: Vec<libc::pollfd> = socks
                .iter()
                .map(|s| libc::pollfd {
                    fd: s.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // SAFETY: poll(2) on a live array of pollfd of the given length.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
            if n <= 0 {
                continue;
            }
            idle_since = Instant::now();
            let mut closed = Vec::new();
            for (i, fd) in fds.iter().enumerate() {
                if fd.revents == 0 {
                    continue;
                }
                let s = &mut socks[i];
                let ok = wire::read_frame(s, &limits, &mut inb).is_ok()
                    && match wire::decode_request(&inb, &limits) {
                        Ok(req) => {
                            let mut r = template.clone();
                            r.seq = req.seq;
                            out.clear();
                            wire::encode_reply(&r, &mut out);
                            s.write_all(&out).is_ok()
                        }
                        Err(_) => false,
                    };
                if !ok {
                    closed.push(i);
                }
            }
            for i in closed.into_iter().rev() {
                socks.remove(i);
            }
        }
    });
    Ok((addr, h))
}

/// Connection sets P2 cycles through, so that a per-connection bias of the server (which
/// worker thread a connection's task landed on) averages out.
const P2_SETS: usize = 4;

/// Triples thrown away because one of their calls failed; beyond this P2 gives up.
const P2_MAX_DISCARDS: usize = 100;

/// `n` interleaved triples — through the loop, bare, bare again on other connections (the A/A
/// control) — rotating which goes first; `k` picks the connection set. A triple in which a
/// call fails (a bare attempt has no retry: a controller answering NOT_READY under load ends
/// it) is discarded and counted, with the first error kept.
#[allow(clippy::type_complexity)]
fn triples(
    n: usize,
    budget: Duration,
    f: &mut [&mut dyn FnMut(usize) -> Result<Duration, String>; 3],
    discarded: &mut Vec<String>,
) -> Result<[Vec<Duration>; 3], String> {
    let mut out: [Vec<Duration>; 3] = Default::default();
    let until = Instant::now() + budget;
    let mut i = 0;
    while out[0].len() < n && Instant::now() < until {
        let mut got = [Duration::ZERO; 3];
        let mut failed = None;
        for j in 0..3 {
            let which = (i + j) % 3;
            match (f[which])(i % P2_SETS) {
                Ok(d) => got[which] = d,
                Err(e) => {
                    failed = Some(format!(
                        "{}: {e}",
                        ["through the loop", "bare", "control"][which]
                    ));
                    break;
                }
            }
        }
        i += 1;
        match failed {
            None => {
                for (v, d) in out.iter_mut().zip(got) {
                    v.push(d);
                }
            }
            Some(e) => {
                discarded.push(e);
                if discarded.len() > P2_MAX_DISCARDS {
                    return Err(format!(
                        "more than {P2_MAX_DISCARDS} failed calls, last: {}",
                        discarded.join("; ")
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    Ok(out)
}

/// One op measured three ways on `P2_SETS` sets of connections.
struct P2Op {
    /// Calls that failed (their triple was discarded).
    discarded: Vec<String>,
    with_loop: Summary,
    bare: Summary,
    control: Summary,
}

impl P2Op {
    fn overhead_pct(&self) -> f64 {
        (self.with_loop.p50 - self.bare.p50) / self.bare.p50 * 100.0
    }

    fn aa_pct(&self) -> f64 {
        (self.control.p50 - self.bare.p50) / self.bare.p50 * 100.0
    }
}

fn measure_p2(
    clients: &[Client],
    addr: SocketAddr,
    joblist: bool,
    n: usize,
    budget: Duration,
) -> Result<P2Op, String> {
    let mut bare: Vec<Direct> = (0..P2_SETS)
        .map(|_| Direct::connect(addr))
        .collect::<Result<_, _>>()?;
    let mut control: Vec<Direct> = (0..P2_SETS)
        .map(|_| Direct::connect(addr))
        .collect::<Result<_, _>>()?;
    let mut a = |k: usize| {
        timed(|| {
            if joblist {
                lib_joblist(&clients[k])
            } else {
                lib_hello(&clients[k])
            }
        })
    };
    let mut b = |k: usize| {
        timed(|| {
            if joblist {
                direct_joblist(&mut bare[k])
            } else {
                direct_hello(&mut bare[k])
            }
        })
    };
    let mut c = |k: usize| {
        timed(|| {
            if joblist {
                direct_joblist(&mut control[k])
            } else {
                direct_hello(&mut control[k])
            }
        })
    };
    let mut fs: [&mut dyn FnMut(usize) -> Result<Duration, String>; 3] = [&mut a, &mut b, &mut c];
    let mut discarded = Vec::new();
    triples(200, budget, &mut fs, &mut discarded)?; // warm-up
    let [x, y, z] = triples(n, budget, &mut fs, &mut discarded)?;
    let s = |v: &[Duration]| Summary::of_us(v).ok_or_else(|| "no samples".to_string());
    Ok(P2Op {
        discarded,
        with_loop: s(&x)?,
        bare: s(&y)?,
        control: s(&z)?,
    })
}

/// P2.
pub fn p2(steady: &Steady, opts: &BenchOpts) -> Result<Table, String> {
    let clients: Vec<Client> = (0..P2_SETS)
        .map(|_| lib_client(&steady.cluster.masters()))
        .collect::<Result<_, _>>()?;
    let n = opts.pick(2_000, 10_000);
    let budget = Duration::from_secs(opts.pick(20, 60));
    let hello = measure_p2(&clients, steady.primary, false, n, budget)?;
    let jl = measure_p2(&clients, steady.primary, true, n, budget)?;
    drop(clients);

    // Diagnostic: the same against a canned-reply server in this process, where the server's
    // work is small and equal for all, so the loop's own cost shows.
    let info = wire::decode_reply(
        &reply_frame(steady.primary, &request_frame(hello_op()))?,
        &Limits::default(),
    )
    .map_err(|e| e.to_string())?;
    let (faddr, fh) = spawn_canned(info, 3 * P2_SETS)?;
    let fakes: Vec<Client> = (0..P2_SETS)
        .map(|_| {
            let mut cfg = Config::new(vec![Endpoint::new("127.0.0.1", faddr.port())]);
            cfg.client_name = CLIENT_NAME.into();
            Client::start_with(cfg, Options::default(), XCE_RETRY_DEFAULTS)
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    let canned = measure_p2(&fakes, faddr, false, n, budget)?;
    drop(fakes);
    let _ = fh.join();

    let mut t = Table::new("P2", "cost of the failover loop on the happy path");
    t.note(
        "with loop = Client::hello / Client::joblist; bare = the same request on the library's own \
         transport::Connection (send + recv + decode on a kept-alive connection), no loop; \
         control = bare again on other connections (an A/A test: the resolution of this measurement)",
    );
    t.note(format!(
        "triples interleaved one by one, rotating which goes first, over {P2_SETS} sets of connections \
         (cancels a per-connection bias of the server); {} triples per op after warm-up",
        hello.with_loop.n
    ));
    t.dist_header("op", "µs");
    for (name, m) in [
        ("hello", &hello),
        (&format!("joblist({JOBLIST_JOBS})") as &str, &jl),
        ("  diag: hello, in-process canned server", &canned),
    ] {
        t.dist_row(format!("{name}: through the loop"), Some(m.with_loop));
        t.dist_row(format!("{name}: bare attempt, no loop"), Some(m.bare));
        t.dist_row(
            format!("{name}: control (bare, other connections)"),
            Some(m.control),
        );
    }
    for (name, m) in [("hello", &hello), ("joblist", &jl), ("canned", &canned)] {
        if let Some(first) = m.discarded.first() {
            t.result(format!(
                "{name}: {} triple(s) discarded because a call failed; first: {first}",
                m.discarded.len()
            ));
        }
    }
    let (oh, oj, of) = (
        hello.overhead_pct(),
        jl.overhead_pct(),
        canned.overhead_pct(),
    );
    t.result(format!(
        "loop overhead (p50 loop / p50 bare − 1): hello {oh:+.2}%, joblist {oj:+.2}% (real controller); \
         A/A control: hello {:+.2}%, joblist {:+.2}%",
        hello.aa_pct(),
        jl.aa_pct()
    ));
    t.result(format!(
        "canned server: loop {of:+.2}% = {} µs per call (A/A {:+.2}%)",
        num(canned.with_loop.p50 - canned.bare.p50),
        canned.aa_pct()
    ));
    let worst = oh.max(oj);
    t.target(
        "≤ 2% against the real controller (hello and joblist)",
        Verdict::from(
            worst <= 2.0,
            format!(
                "worst {worst:+.2}% ({} by {:.2} points)",
                if worst <= 2.0 { "under" } else { "over" },
                (worst - 2.0).abs()
            ),
        ),
    );
    Ok(t)
}
