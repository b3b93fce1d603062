//! P15, the price of security (acceptance.md): P1 (a read's round trip through the library),
//! P4 (kill -9 of the primary → the first successful write) and P11 (`jobsubmit`/s with 1 and
//! 64 contexts), each on a cluster without security and on one with every link in mutual TLS
//! and every op authorized (the `admin` identity of `cluster --tls`), in the same run.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use xce::client::{parse_masters, Client, Config, TlsFiles};
use xce::failover::{Options, XCE_RETRY_DEFAULTS};
use xce::wire::{Hello, Op};

use super::scale::{next_job_id, submit_rate_with, typical_job};
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

/// What one mode measured.
struct Measured {
    rtt: Summary,
    kills: Summary,
    rate1: f64,
    rate64: f64,
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

fn measure(mode: &Mode, opts: &BenchOpts) -> Result<Measured, String> {
    let mut c = mode.cluster(opts)?;
    let client = ready_client(mode, &c)?;
    // P1: a read's round trip through the library (hello, through the read path).
    let n = opts.pick(2_000, 20_000);
    let op = Op::Hello(Hello {
        client_name: "p15".into(),
        protocol_version: xce::wire::PROTOCOL_VERSION,
    });
    for _ in 0..100 {
        client.call(op.clone()).map_err(|e| format!("hello: {e}"))?;
    }
    let mut rtts = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        client.call(op.clone()).map_err(|e| format!("hello: {e}"))?;
        rtts.push(t.elapsed());
    }
    // P11: writes per second with 1 and 64 contexts.
    let dur = Duration::from_secs(opts.pick(3, 10));
    let mk = |k: usize| {
        (0..k)
            .map(|_| mode.client(&c))
            .collect::<Result<Vec<_>, _>>()
    };
    let rate1 = submit_rate_with(mk(1)?, dur)?.per_sec();
    let rate64 = submit_rate_with(mk(64)?, dur)?.per_sec();
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
        let port = client
            .hello()
            .ok()
            .and(client.stats().current_master)
            .map(|m| m.port)
            .ok_or("no current master")?;
        let id = c
            .nodes
            .iter()
            .find(|n| n.client.port() == port)
            .map(|n| n.id)
            .ok_or("primary not a node")?;
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
        rtt: Summary::of_us(&rtts).ok_or("no round trips")?,
        kills: Summary::of(&recoveries.iter().map(|d| ms(*d)).collect::<Vec<_>>())
            .ok_or("no kills")?,
        rate1,
        rate64,
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

/// Runs both modes, off first, and compares.
pub fn run(opts: &BenchOpts) -> Result<Table, String> {
    let dir = std::env::temp_dir().join(format!("xce-p15-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    pki(&dir)?;
    let off = measure(
        &Mode {
            name: "off",
            pki: None,
        },
        opts,
    )?;
    let on = measure(
        &Mode {
            name: "mTLS + roles",
            pki: Some(dir.clone()),
        },
        opts,
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    let mut t = Table::new(
        "P15",
        "the price of security: mTLS + authorization on vs off",
    );
    t.note("3 controllers on loopback; on: every link mutual TLS (raft and client port), every op authorized, the library as admin with a certificate");
    t.note(format!(
        "P1: {} hellos through the library; P11: jobsubmit/s over {} s; P4: {} kill -9 of the primary with a writer running",
        opts.pick(2_000, 20_000),
        opts.pick(3, 10),
        opts.pick(5, 20)
    ));
    t.header = ["what", "off", "on", "on vs off"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let pct = |a: f64, b: f64| (b - a) / a * 100.0;
    let mut worst: f64 = f64::MIN;
    let mut row = |what: &str, a: f64, b: f64, unit: &str, higher_is_better: bool| {
        let slower = if higher_is_better {
            pct(b, a)
        } else {
            pct(a, b)
        };
        worst = worst.max(slower);
        t.rows.push(vec![
            what.to_string(),
            format!("{a:.1} {unit}"),
            format!("{b:.1} {unit}"),
            format!("{:+.1}% slower", slower),
        ]);
    };
    row("P1 round trip p50", off.rtt.p50, on.rtt.p50, "µs", false);
    row("P1 round trip p99", off.rtt.p99, on.rtt.p99, "µs", false);
    row(
        "P4 kill → first write p50",
        off.kills.p50,
        on.kills.p50,
        "ms",
        false,
    );
    row(
        "P4 kill → first write p99",
        off.kills.p99,
        on.kills.p99,
        "ms",
        false,
    );
    row(
        "P11 jobsubmit/s, 1 context",
        off.rate1,
        on.rate1,
        "/s",
        true,
    );
    row(
        "P11 jobsubmit/s, 64 contexts",
        off.rate64,
        on.rate64,
        "/s",
        true,
    );
    t.target(
        "every row ≤ 10% slower with security on",
        super::table::Verdict::from(worst <= 10.0, format!("worst {worst:+.1}%")),
    );
    Ok(t)
}
