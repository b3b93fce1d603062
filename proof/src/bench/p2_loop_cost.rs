//! P2: an op through the failover loop vs the same single attempt on a bare transport
//! connection ([`Direct`]), against the primary of a real 3-node cluster ([`Steady`]) and, as a
//! diagnostic, against a canned-reply server in this process.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use xce::client::{Client, Config};
use xce::client::{Endpoint, Options, XCE_RETRY_DEFAULTS};
use xce_proto::wire::{self, Limits, Reply};

use super::steady::{
    direct_hello, direct_joblist, hello_op, lib_client, lib_hello, lib_joblist, reply_frame,
    request_frame, timed, Direct, Steady, CLIENT_NAME, IO_TIMEOUT, JOBLIST_JOBS,
};
use super::table::{num, Table, Verdict};
use super::{BenchOpts, Summary};

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

/// P2: the three ways side by side, against the controller and the canned server.
pub fn run(steady: &Steady, opts: &BenchOpts) -> Result<Table, String> {
    let n = opts.pick(2_000, 10_000);
    let budget = Duration::from_secs(opts.pick(20, 60));
    let (hello, jl) = against_the_controller(steady, n, budget)?;
    let canned = against_a_canned_server(steady, n, budget)?;
    Ok(table(&hello, &jl, &canned))
}

/// hello and joblist, three ways, against the steady cluster's primary.
fn against_the_controller(
    steady: &Steady,
    n: usize,
    budget: Duration,
) -> Result<(P2Op, P2Op), String> {
    let clients: Vec<Client> = (0..P2_SETS)
        .map(|_| lib_client(&steady.cluster.masters()))
        .collect::<Result<_, _>>()?;
    let hello = measure_p2(&clients, steady.primary, false, n, budget)?;
    let jl = measure_p2(&clients, steady.primary, true, n, budget)?;
    Ok((hello, jl))
}

/// Diagnostic: hello three ways against a canned-reply server in this process (the primary's
/// own hello reply), where the server's work is small and equal for all, so the loop's own
/// cost shows.
fn against_a_canned_server(steady: &Steady, n: usize, budget: Duration) -> Result<P2Op, String> {
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
    Ok(canned)
}

/// The P2 table: each op three ways, the overheads, the target.
fn table(hello: &P2Op, jl: &P2Op, canned: &P2Op) -> Table {
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
        ("hello", hello),
        (&format!("joblist({JOBLIST_JOBS})") as &str, jl),
        ("  diag: hello, in-process canned server", canned),
    ] {
        t.dist_row(format!("{name}: through the loop"), Some(m.with_loop));
        t.dist_row(format!("{name}: bare attempt, no loop"), Some(m.bare));
        t.dist_row(
            format!("{name}: control (bare, other connections)"),
            Some(m.control),
        );
    }
    for (name, m) in [("hello", hello), ("joblist", jl), ("canned", canned)] {
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
    t
}
