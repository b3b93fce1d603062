//! P15's P1 only, for profiling (BENCH.md): `p1loop <plain|tls|both> <seconds>`. Starts the
//! cluster(s) as `xce-bench --only P15` does, prints each primary's pid (for `perf record -p`),
//! then runs hellos (alternating batches of 1,000 with `both`) and prints per mode the round
//! trip's p10/p50/p90 and the CPU time per hello of the calling thread and of the primary (all
//! its threads). `P1_DELAY_MS` waits before the hellos (time to attach a profiler).
use std::path::PathBuf;
use std::time::{Duration, Instant};

use xce::client::{parse_masters, Client, Config, TlsFiles};
use xce::client::{Options, XCE_RETRY_DEFAULTS};
use xce_proof::{controller_bin, Cluster, ClusterOpts};
use xce_proto::wire::{Hello, Op};

fn cluster(pki: Option<&PathBuf>) -> Cluster {
    let mut extra = Vec::new();
    if let Some(d) = pki {
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
            ..Default::default()
        },
    )
    .unwrap()
}

fn client(c: &Cluster, pki: Option<&PathBuf>) -> Client {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let mut cfg = Config::new(parse_masters(&c.masters()).unwrap());
        cfg.auth_token = Some(String::new());
        if let Some(d) = pki {
            cfg.tls = Some(TlsFiles {
                ca_file: d.join("ca.pem"),
                cert_file: Some(d.join("admin.pem")),
                key_file: Some(d.join("admin.key")),
            });
        }
        if let Ok(cl) = Client::start_with(cfg, Options::default(), XCE_RETRY_DEFAULTS) {
            if cl.hello().is_ok() {
                return cl;
            }
        }
        assert!(Instant::now() < until);
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let mode = a.get(1).map(String::as_str).unwrap_or("both");
    let secs: u64 = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let dir = std::env::temp_dir().join(format!("xce-p1loop-{}", std::process::id()));
    let st = std::process::Command::new(controller_bin())
        .args(["pki", "local"])
        .arg(&dir)
        .arg("3")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let modes: Vec<Option<&PathBuf>> = match mode {
        "plain" => vec![None],
        "tls" => vec![Some(&dir)],
        _ => vec![None, Some(&dir)],
    };
    let mut clusters: Vec<Cluster> = modes.iter().map(|m| cluster(*m)).collect();
    let clients: Vec<Client> = clusters
        .iter()
        .zip(&modes)
        .map(|(c, m)| client(c, *m))
        .collect();
    let mut pids = Vec::new();
    for (c, cl) in clusters.iter().zip(&clients) {
        let port = cl.stats().current_master.unwrap().port;
        let n = c.nodes.iter().find(|n| n.client.port() == port).unwrap();
        eprintln!("primary pid {}", n.pid().unwrap());
        pids.push(n.pid().unwrap());
    }
    std::thread::sleep(Duration::from_millis(
        std::env::var("P1_DELAY_MS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
    ));
    let op = Op::Hello(Hello {
        client_name: "p15".into(),
        protocol_version: xce_proto::wire::PROTOCOL_VERSION,
    });
    let mut rtts: Vec<Vec<f64>> = vec![Vec::new(); clients.len()];
    let end = Instant::now() + Duration::from_secs(secs);
    let mut round = 0;
    let mut cpu = vec![(0.0f64, 0.0f64); clients.len()];
    while Instant::now() < end {
        for k in 0..clients.len() {
            let i = (k + round) % clients.len();
            let (c0, s0) = (
                thread_cpu(),
                xce_proof::harness::sys::process_cpu_us(pids[i]),
            );
            for _ in 0..1000 {
                let t = Instant::now();
                clients[i].call(op.clone()).unwrap();
                rtts[i].push(t.elapsed().as_secs_f64() * 1e6);
            }
            cpu[i].0 += thread_cpu() - c0;
            cpu[i].1 += xce_proof::harness::sys::process_cpu_us(pids[i]) - s0;
        }
        round += 1;
    }
    for (i, mut v) in rtts.into_iter().enumerate() {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "{}: n {} p50 {:.2} µs p10 {:.2} p90 {:.2}; cpu/hello client {:.2} µs server {:.2} µs",
            if modes[i].is_some() { "tls" } else { "plain" },
            v.len(),
            v[v.len() / 2],
            v[v.len() / 10],
            v[v.len() * 9 / 10],
            cpu[i].0 / v.len() as f64,
            cpu[i].1 / v.len() as f64,
        );
    }
    for c in &mut clusters {
        c.kill_all();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// This thread's CPU time, µs.
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e6 + ts.tv_nsec as f64 / 1e3
}
