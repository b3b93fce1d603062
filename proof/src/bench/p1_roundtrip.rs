//! P1: a small round trip through the library vs a raw TCP ping-pong of the same byte sizes,
//! against the primary of a real 3-node cluster ([`Steady`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::steady::{
    direct_hello, direct_joblist, hello_op, joblist_op, lib_client, lib_hello, lib_joblist,
    reply_frame, request_frame, timed, Direct, Steady, IO_TIMEOUT, JOBLIST_JOBS,
};
use super::table::{num, Table, Verdict};
use super::{BenchOpts, Summary};

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

/// P1. Per iteration, in turn: library hello, ping-pong of hello's sizes, library joblist,
/// ping-pong of joblist's sizes, and the same two frames raw to the controller (no library).
pub fn run(steady: &Steady, opts: &BenchOpts) -> Result<Table, String> {
    let sizes = Sizes::of(steady)?;
    let warm = opts.pick(100, 300);
    let samples = measure(steady, &sizes, opts, warm)?;
    let sum: Vec<Option<Summary>> = samples.iter().map(|v| Summary::of_us(v)).collect();
    let mut t = Table::new(
        "P1",
        "small round trip: library vs raw TCP ping-pong of the same byte sizes",
    );
    t.note(format!(
        "3 controllers (default timing), loopback; {} interleaved iterations after {warm} warm-up; \
         each iteration runs all six rows once, in order",
        samples[0].len()
    ));
    let Sizes {
        hello_req,
        hello_rep,
        jl_req,
        jl_rep,
    } = sizes;
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
    ratios(&mut t, &sum);
    Ok(t)
}

/// The framed sizes of hello and joblist, request and reply, as the primary answers them.
#[derive(Clone, Copy)]
struct Sizes {
    hello_req: usize,
    hello_rep: usize,
    jl_req: usize,
    jl_rep: usize,
}

impl Sizes {
    fn of(steady: &Steady) -> Result<Sizes, String> {
        Ok(Sizes {
            hello_req: request_frame(hello_op()).len(),
            jl_req: request_frame(joblist_op()).len(),
            hello_rep: reply_frame(steady.primary, &request_frame(hello_op()))?.len(),
            jl_rep: reply_frame(steady.primary, &request_frame(joblist_op()))?.len(),
        })
    }
}

/// The six rows' round trips, interleaved: `warm` iterations thrown away, then up to 400
/// (3,000 in full mode) within 30 s (120 s).
fn measure(
    steady: &Steady,
    z: &Sizes,
    opts: &BenchOpts,
    warm: usize,
) -> Result<[Vec<Duration>; 6], String> {
    let client = lib_client(&steady.cluster.masters())?;
    let (pa, ha) = spawn_pong(z.hello_req, z.hello_rep)?;
    let (pb, hb) = spawn_pong(z.jl_req, z.jl_rep)?;
    let mut ping_h = Ping::connect(pa, z.hello_req, z.hello_rep)?;
    let mut ping_j = Ping::connect(pb, z.jl_req, z.jl_rep)?;
    let mut direct = Direct::connect(steady.primary)?;
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
    Ok(s)
}

/// The ratios library / ping-pong, where the time goes, and the ≤ 1.5× target.
fn ratios(t: &mut Table, sum: &[Option<Summary>]) {
    let p50 = |i: usize| sum[i].map_or(f64::NAN, |s| s.p50);
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
}
