//! P15, the price of security (acceptance.md): P1 (a read's round trip through the library),
//! P4 (kill -9 of the primary → the first successful write) and P11 (`jobsubmit`/s with 1 and
//! 64 contexts), each on a cluster without security and on one with every link in mutual TLS
//! and every op authorized (the `admin` identity of `cluster --tls`), in the same run.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use xce::client::{parse_masters, Client, Config, TlsFiles};
use xce::client::{Options, XCE_RETRY_DEFAULTS};
use xce_proto::wire::{Hello, Op};

use super::load::{next_job_id, submit_rate_with, typical_job};
use super::{BenchOpts, Summary, Table};
use crate::{controller_bin, Cluster, ClusterOpts};

/// One side of the comparison.
struct Mode {
    name: &'static str,
    /// The `pki local` directory when secured.
    pki: Option<PathBuf>,
}

impl Mode {
    fn cluster(&self, opts: &BenchOpts) -> Result<Cluster, String> {
        let mut extra = Vec::new();
        if let Some(d) = &self.pki {
            let f = |n: &str| d.join(n).display().to_string();
            for (flag, file) in [
                ("--tls-cert", "xce-node-{id}.pem"),
                ("--tls-key", "xce-node-{id}.key"),
                ("--tls-client-ca", "ca.pem"),
                ("--tls-peer-ca", "ca.pem"),
                ("--token-key", "token.key"),
            ] {
                extra.extend([flag.to_string(), f(file)]);
            }
        }
        Cluster::start(
            3,
            ClusterOpts {
                extra_args: extra,
                log_dir: opts.log_dir.clone(),
                ..Default::default()
            },
        )
        .map_err(|e| format!("start cluster: {e}"))
    }

    fn client(&self, c: &Cluster) -> Result<Client, String> {
        let mut cfg = Config::new(parse_masters(&c.masters()).map_err(|e| e.to_string())?);
        cfg.auth_token = Some(String::new());
        if let Some(d) = &self.pki {
            cfg.tls = Some(TlsFiles {
                ca_file: d.join("ca.pem"),
                cert_file: Some(d.join("admin.pem")),
                key_file: Some(d.join("admin.key")),
            });
        }
        Client::start_with(cfg, Options::default(), XCE_RETRY_DEFAULTS)
            .map_err(|e| format!("start client ({}): {e}", self.name))
    }
}

/// What one mode measured of P4 and P11.
struct Measured {
    kills: Summary,
}

/// P11, side by side: both clusters run and the modes take turns, a slice of the time each
/// (1 context, then 64; the order swapped every round), so that the machine's drift lands on
/// both alike (measured one cluster after the other, the 64-context row moved by up to 28%
/// between runs). Returns `[rate1, rate64]` of each mode: acknowledged writes over the time of
/// all its slices.
fn rates_side_by_side(modes: [&Mode; 2], opts: &BenchOpts) -> Result<[[f64; 2]; 2], String> {
    let clusters = [modes[0].cluster(opts)?, modes[1].cluster(opts)?];
    for (m, c) in modes.iter().zip(&clusters) {
        ready_client(m, c)?;
    }
    let rounds = opts.pick(3, 5);
    let slice = Duration::from_secs(opts.pick(3, 10)) / rounds as u32;
    // [mode][1 or 64 contexts]: (acked, seconds)
    let mut sums = [[(0u64, 0f64); 2]; 2];
    for round in 0..rounds {
        for k in 0..2 {
            let i = (k + round as usize) % 2;
            for (j, n) in [1usize, 64].into_iter().enumerate() {
                let clients = (0..n)
                    .map(|_| modes[i].client(&clusters[i]))
                    .collect::<Result<Vec<_>, _>>()?;
                let r = submit_rate_with(clients, slice)?;
                sums[i][j].0 += r.acked;
                sums[i][j].1 += r.secs;
            }
        }
    }
    for mut c in clusters {
        c.kill_all();
    }
    let rate = |(a, t): (u64, f64)| a as f64 / t.max(1e-9);
    Ok([
        [rate(sums[0][0]), rate(sums[0][1])],
        [rate(sums[1][0]), rate(sums[1][1])],
    ])
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The first client that answers: waits for an elected primary that serves it.
fn ready_client(mode: &Mode, c: &Cluster) -> Result<Client, String> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match mode
            .client(c)
            .and_then(|cl| cl.hello().map(|_| cl).map_err(|e| e.to_string()))
        {
            Ok(cl) => return Ok(cl),
            Err(e) if Instant::now() > until => return Err(format!("{}: {e}", mode.name)),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// P1's round trips of both modes under one placement of the threads.
struct P1Placement {
    off: Summary,
    on: Summary,
}

/// P1, side by side: both clusters run at once and the two clients take turns, a batch of
/// hellos each (the order swapped every round), so that a neighbour's burst on the shared
/// machine lands on both modes alike. Three times: as the scheduler places the threads; with
/// the bench and both clusters on one CPU; with the bench on one CPU and both clusters on the
/// other. Returns those three.
fn p1_side_by_side(modes: [&Mode; 2], opts: &BenchOpts) -> Result<[P1Placement; 3], String> {
    let clusters = [modes[0].cluster(opts)?, modes[1].cluster(opts)?];
    let clients = [
        ready_client(modes[0], &clusters[0])?,
        ready_client(modes[1], &clusters[1])?,
    ];
    let op = Op::Hello(Hello {
        client_name: "p15".into(),
        protocol_version: xce_proto::wire::PROTOCOL_VERSION,
    });
    let rounds = opts.pick(10, 20);
    let alternate = || -> Result<[Vec<Duration>; 2], String> {
        let mut rtts: [Vec<Duration>; 2] = Default::default();
        for round in 0..=rounds {
            for k in 0..2 {
                let i = (k + round) % 2;
                for _ in 0..1_000 {
                    let t = Instant::now();
                    clients[i]
                        .call(op.clone())
                        .map_err(|e| format!("hello ({}): {e}", modes[i].name))?;
                    // Round 0 warms both up.
                    if round > 0 {
                        rtts[i].push(t.elapsed());
                    }
                }
            }
        }
        Ok(rtts)
    };
    let rtts = alternate()?;
    // The same with the threads placed: every thread of both clusters and this one on one CPU
    // (no cross-CPU wake-up), then this one on CPU 0 and the clusters on CPU 1 (every round
    // trip crosses CPUs both ways). Unplaced, on this 2-vCPU machine, a whole run of either
    // mode lands in one of the two cases or between them (p50 16 or 21 µs, the same build, run
    // to run): placement, not TLS. Both modes alike; the affinities are put back after.
    let pids: Vec<i32> = clusters
        .iter()
        .flat_map(|c| c.nodes.iter().filter_map(|n| n.pid()).map(|p| p as i32))
        .collect();
    let mut placed = Vec::new();
    for (theirs, mine) in [(0, 0), (1, 0)] {
        let saved = pin(&pids, theirs, mine)?;
        let r = alternate();
        unpin(saved);
        placed.push(r?);
    }
    for mut c in clusters {
        c.kill_all();
    }
    let s = |v: &[Duration]| Summary::of_us(v).ok_or("no round trips");
    let pair = |r: &[Vec<Duration>; 2]| -> Result<P1Placement, String> {
        Ok(P1Placement {
            off: s(&r[0])?,
            on: s(&r[1])?,
        })
    };
    Ok([pair(&rtts)?, pair(&placed[0])?, pair(&placed[1])?])
}

/// A thread's CPU affinity, to put back.
type Saved = Vec<(libc::pid_t, libc::cpu_set_t)>;

/// Puts every thread of `pids` (their `/proc/PID/task` entries) on CPU `theirs` alone and the
/// calling thread on CPU `mine`; returns their previous affinities. A thread that cannot be
/// moved (one that ended meanwhile) is skipped; a CPU this machine does not have, or a calling
/// thread that stays where it was, is an error: the row would not measure what it says.
fn pin(pids: &[i32], theirs: usize, mine: usize) -> Result<Saved, String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if theirs.max(mine) >= cpus {
        return Err(format!(
            "P1 placed on CPUs {mine} and {theirs}: this machine has {cpus}"
        ));
    }
    let mut tids: Vec<(libc::pid_t, usize)> = vec![(0, mine)]; // 0: the calling thread
    for p in pids {
        if let Ok(rd) = std::fs::read_dir(format!("/proc/{p}/task")) {
            tids.extend(rd.flatten().filter_map(|e| {
                Some((e.file_name().to_str()?.parse::<libc::pid_t>().ok()?, theirs))
            }));
        }
    }
    let mut saved = Vec::new();
    for (tid, cpu) in tids {
        // SAFETY: cpu_set_t is plain data; sched_{get,set}affinity read and write only the
        // set passed, of the size passed.
        unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut old) != 0 {
                continue;
            }
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut one);
            if libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &one) == 0 {
                saved.push((tid, old));
            } else if tid == 0 {
                unpin(saved);
                return Err(format!("P1 placement: this thread cannot run on CPU {cpu}"));
            }
        }
    }
    Ok(saved)
}

/// Puts back what [`pin`] changed.
fn unpin(saved: Saved) {
    for (tid, old) in saved {
        // SAFETY: as in `pin`.
        unsafe {
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &old);
        }
    }
}

fn measure(mode: &Mode, opts: &BenchOpts) -> Result<Measured, String> {
    let mut c = mode.cluster(opts)?;
    let client = ready_client(mode, &c)?;
    // P4: kill -9 of the primary → the first write acknowledged after it, with a writer
    // running all along.
    let kills = opts.pick(5, 20);
    let last_ok = Arc::new(Mutex::new(Instant::now()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (last_ok, stop) = (last_ok.clone(), stop.clone());
        let w = ready_client(mode, &c)?;
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if w.jobsubmit(typical_job(next_job_id())).is_ok() {
                    *last_ok.lock().expect("last_ok") = Instant::now();
                }
            }
            w
        })
    };
    let mut recoveries = Vec::new();
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(300));
        // The primary as the cluster names it (`hello`'s primary id), not the node this
        // client happens to be connected to: that may be a standby (F28 forwarding), and
        // killing a standby measured a "failover" of 0.5 ms.
        let asked = Instant::now();
        let id = loop {
            match client.hello() {
                Ok(i) if i.primary_id != 0 => break i.primary_id,
                _ if asked.elapsed() > Duration::from_secs(10) => {
                    return Err(format!("{}: no primary named within 10 s", mode.name))
                }
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        if !c.nodes.iter().any(|n| n.id == id && n.is_running()) {
            return Err(format!("{}: primary {id} is not a running node", mode.name));
        }
        let killed = Instant::now();
        c.kill(id);
        let until = killed + Duration::from_secs(20);
        loop {
            let t = *last_ok.lock().expect("last_ok");
            if t > killed {
                recoveries.push(t - killed);
                break;
            }
            if Instant::now() > until {
                return Err(format!("{}: no write within 20 s of a kill", mode.name));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        c.restart(id).map_err(|e| format!("restart: {e}"))?;
        // Let it rejoin as a standby before the next kill.
        std::thread::sleep(Duration::from_millis(1500));
    }
    stop.store(true, Ordering::Relaxed);
    let _ = writer.join();
    c.kill_all();
    Ok(Measured {
        kills: Summary::of(&recoveries.iter().map(|d| ms(*d)).collect::<Vec<_>>())
            .ok_or("no kills")?,
    })
}

fn pki(dir: &Path) -> Result<(), String> {
    let st = std::process::Command::new(controller_bin())
        .args(["pki", "local"])
        .arg(dir)
        .arg("3")
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("pki: {e}"))?;
    st.success()
        .then_some(())
        .ok_or_else(|| "pki local failed".to_string())
}

/// Runs both modes (P1 side by side, then P11, then P4 off first) and compares.
pub fn run(opts: &BenchOpts) -> Result<Table, String> {
    let m = Both::measure(opts)?;
    let mut t = Table::new(
        "P15",
        "the price of security: mTLS + authorization on vs off",
    );
    notes(&mut t, opts);
    let worst = rows(&mut t, &m);
    t.target(
        "every judged row ≤ 10% slower with security on",
        super::table::Verdict::from(worst <= 10.0, format!("worst {worst:+.1}%")),
    );
    Ok(t)
}

/// Everything P15 measured of both modes.
struct Both {
    /// P1 unplaced, on one CPU, on two CPUs.
    p1: [P1Placement; 3],
    /// P11's `[1 context, 64 contexts]` per mode.
    rates: [[f64; 2]; 2],
    /// P4's kill → first write per mode.
    kills: [Summary; 2],
}

impl Both {
    fn measure(opts: &BenchOpts) -> Result<Both, String> {
        let dir = std::env::temp_dir().join(format!("xce-p15-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        pki(&dir)?;
        let off_mode = Mode {
            name: "off",
            pki: None,
        };
        let on_mode = Mode {
            name: "mTLS + roles",
            pki: Some(dir.clone()),
        };
        let p1 = p1_side_by_side([&off_mode, &on_mode], opts)?;
        let rates = rates_side_by_side([&off_mode, &on_mode], opts)?;
        let off = measure(&off_mode, opts)?;
        let on = measure(&on_mode, opts)?;
        let _ = std::fs::remove_dir_all(&dir);
        Ok(Both {
            p1,
            rates,
            kills: [off.kills, on.kills],
        })
    }
}

fn notes(t: &mut Table, opts: &BenchOpts) {
    t.note("3 controllers on loopback; on: every link mutual TLS (raft and client port), every op authorized, the library as admin with a certificate");
    t.note(format!(
        "P1: {} hellos through the library per mode, both clusters running, in alternating batches of 1,000, three times: threads where the scheduler puts them (shown, not judged: on 2 vCPUs a whole run of either mode lands on one CPU or across both by chance, ±30% on the p50 of the same build), then the bench and both clusters on one CPU, then the bench on CPU 0 and the clusters on CPU 1; P11: jobsubmit/s over {} s per mode, both clusters running, the modes taking turns in slices; P4: {} kill -9 of the primary with a writer running",
        opts.pick(10_000, 20_000),
        opts.pick(3, 10),
        opts.pick(5, 20)
    ));
}

/// The rows `off | on | on vs off`; returns the worst slowdown (%) among the judged rows.
fn rows(t: &mut Table, m: &Both) -> f64 {
    t.columns(&["what", "off", "on", "on vs off"]);
    let mut rows = Rows { t, worst: f64::MIN };
    let [free, one_cpu, two_cpus] = &m.p1;
    rows.add(
        "P1 p50, threads unplaced",
        free.off.p50,
        free.on.p50,
        "µs",
        false,
        false,
    );
    rows.add(
        "P1 p99, threads unplaced",
        free.off.p99,
        free.on.p99,
        "µs",
        false,
        false,
    );
    for (what, p) in [
        ("one CPU", one_cpu),
        ("bench / clusters on 2 CPUs", two_cpus),
    ] {
        rows.add(
            &format!("P1 p50, {what}"),
            p.off.p50,
            p.on.p50,
            "µs",
            false,
            true,
        );
        rows.add(
            &format!("P1 p99, {what}"),
            p.off.p99,
            p.on.p99,
            "µs",
            false,
            false,
        );
    }
    let [off, on] = &m.kills;
    rows.add(
        "P4 kill → first write p50",
        off.p50,
        on.p50,
        "ms",
        false,
        true,
    );
    rows.add(
        "P4 kill → first write p99",
        off.p99,
        on.p99,
        "ms",
        false,
        true,
    );
    let [[off1, off64], [on1, on64]] = m.rates;
    rows.add("P11 jobsubmit/s, 1 context", off1, on1, "/s", true, true);
    rows.add(
        "P11 jobsubmit/s, 64 contexts",
        off64,
        on64,
        "/s",
        true,
        true,
    );
    rows.worst
}

/// The table's rows, and the worst slowdown of the judged ones.
struct Rows<'a> {
    t: &'a mut Table,
    worst: f64,
}

impl Rows<'_> {
    /// A row: `a` off, `b` on, in `unit`; judged rows count towards the verdict.
    fn add(
        &mut self,
        what: &str,
        a: f64,
        b: f64,
        unit: &str,
        higher_is_better: bool,
        judged: bool,
    ) {
        let pct = |a: f64, b: f64| (b - a) / a * 100.0;
        let slower = if higher_is_better {
            pct(b, a)
        } else {
            pct(a, b)
        };
        if judged {
            self.worst = self.worst.max(slower);
        }
        self.t.rows.push(vec![
            what.to_string(),
            format!("{a:.1} {unit}"),
            format!("{b:.1} {unit}"),
            format!(
                "{:+.1}% slower{}",
                slower,
                if judged { "" } else { " (not judged)" }
            ),
        ]);
    }
}
