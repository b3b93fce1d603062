//! `xce-controller`: the reference HA controller of libxce (controller.md C1–C9).
//!
//! A real 3-node (1..8) controller on openraft: the Raft leader is the primary; the job store
//! is the replicated state machine.
//!
//! ```text
//! xce-controller run --id N --cluster SPEC --data DIR [--tls-cert F --tls-key F [--tls-client-ca F]]
//!                    [--heartbeat-ms H --election-min-ms A --election-max-ms B]
//!                    [--host-timeout-ms T --idle-timeout-ms T --max-connections N --snapshot-logs N]
//! xce-controller cluster [--nodes 3] [--base-port 9991] --data DIR [node knobs…]
//! ```
//! SPEC is `1=127.0.0.1:9991/127.0.0.1:10991,2=…` (client address / raft address).

mod batch;
mod cluster;
mod config;
mod listing;
mod net;
mod node;
mod server;
mod snapshot;
mod state;
mod store;
mod tls;
mod types;

/// Wall-clock unix milliseconds (stamped into proposals by the leader).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

const USAGE: &str = "usage:
  xce-controller run --id N --cluster ID=CLIENT/RAFT,... --data DIR [--tls-cert F --tls-key F [--tls-client-ca F]]
                     [--heartbeat-ms H] [--election-min-ms A] [--election-max-ms B] [--host-timeout-ms T]
                     [--idle-timeout-ms T] [--max-connections N] [--snapshot-logs N] [--cluster-name NAME]
  xce-controller cluster [--nodes 3] [--base-port 9991] --data DIR [node knobs as for run]";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("run") => match config::RunArgs::parse(&args[1..]) {
            Ok(a) => node::run(a),
            Err(e) => usage_error(&e),
        },
        Some("cluster") => match config::ClusterArgs::parse(&args[1..]) {
            Ok(a) => cluster::cluster(a),
            Err(e) => usage_error(&e),
        },
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            0
        }
        _ => usage_error("missing command"),
    };
    std::process::exit(code);
}

fn usage_error(e: &str) -> i32 {
    eprintln!("xce-controller: {e}\n{USAGE}");
    2
}
