//! `xce-scale`: P11 (write throughput vs concurrent contexts) and P12 (the job table at
//! 10^4 / 10^5 / 10^6 jobs) against real `xce-controller` processes. See proof/BENCH.md.
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-scale -- [--quick] [--only P11|P12] [--baseline BIN]
//! ```

use std::process::ExitCode;
use std::time::Duration;

use xce_proof::bench::scale;
use xce_proof::{Cluster, ClusterOpts};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(5);
    xce_proof::cluster::kill_nodes_with_this_process(true);
    xce::failover::log::set_level(xce::failover::log::Level::Error);
    xce_proof::sys::raise_fd_limit(8192);
    let c = Cluster::start(
        3,
        ClusterOpts {
            extra_args: vec![],
            log_dir: Some("/tmp/xce-scale-logs".into()),
        },
    )
    .expect("cluster");
    c.wait_primary(Duration::from_secs(20)).expect("primary");
    let m = c.masters();
    let list: Vec<usize> = args.get(1).map_or(vec![1, 16, 64, 256], |s| {
        s.split(',').map(|x| x.parse().unwrap()).collect()
    });
    let p = c.primary_now().unwrap();
    eprintln!("primary {p} pid {:?}", c.node(p).pid());
    if let Some(load) = args.get(2).and_then(|s| s.parse::<u64>().ok()) {
        let t = scale::load_jobs(&m, load, 64).expect("load");
        eprintln!("loaded {load} in {:?}", t);
        std::thread::sleep(Duration::from_secs(2));
        for n in &c.nodes {
            eprintln!(
                "node {} rss {:?} disk {}",
                n.id,
                n.pid().and_then(scale::rss_bytes),
                scale::disk_bytes(&scale::node_dir(&c, n.id))
            );
        }
        let (k, t) = scale::c_joblist(&m).expect("list");
        eprintln!("c_joblist {k} in {:?}", t);
    }
    for n in list {
        let r = scale::submit_rate(&m, n, Duration::from_secs(secs)).expect("rate");
        println!(
            "{n:>4} contexts: {:>8.0}/s ({} acked, {} failed)",
            r.per_sec(),
            r.acked,
            r.failed
        );
    }
    ExitCode::SUCCESS
}
