//! `xce-netfaults`: the P9 table of acceptance.md — network faults in network namespaces
//! (a blackholed primary, a primary cut off from its peers, a standby silent to clients then
//! the primary blackholed), concurrent writers and readers through the library, each round's
//! history checked for linearizability. Needs root and `ip` (iproute2).
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-netfaults -- [--rounds 5] [--fault-secs 5]
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use xce_proof::bench::args::{Command, Needs, Shared};
use xce_proof::bench::p9_netfaults::{self, describe, Scenario};
use xce_proof::bench::plan::{self, Plan};

const USAGE: &str = "usage: xce-netfaults [--rounds N] [--fault-secs S] [--only blackhole,isolate,silent] [--no-build]
  --rounds N      rounds per fault (default 5; the silent-standby fault runs until N rounds
                  of each outcome — the other standby elected, the silent one elected — or 4N)
  --fault-secs S  how long each fault lasts (default 5)
  --only LIST     only these faults
  --before-c15    first the same rounds with the controller timing before C15, then the defaults
  --no-build      do not run `cargo build -p xce-controller` first (XCE_CONTROLLER set: never)
XCE_LOG=info|debug: the library's log lines on stderr, each stamped (wall-clock seconds, ms),
  with the instant each round's fault is set and healed on the same clock: a round's timeline";

fn main() -> ExitCode {
    let cmd = Command::new("xce-netfaults", USAGE, &[Shared::Rounds, Shared::NoBuild]).rounds(5);
    let mut fault_for = Duration::from_secs(5);
    let mut scenarios = Scenario::ALL.to_vec();
    let mut before_c15 = false;
    let args = match cmd.run(Needs { netns: true }, &mut |flag, value| {
        match flag {
            "--fault-secs" => {
                let s: f64 = value
                    .text("seconds")?
                    .parse()
                    .ok()
                    .filter(|&s: &f64| s > 0.0 && s < 3600.0)
                    .ok_or("--fault-secs: seconds, > 0")?;
                fault_for = Duration::from_secs_f64(s);
            }
            "--only" => {
                scenarios = value
                    .text("a list")?
                    .split(',')
                    .map(|s| match s.trim() {
                        "blackhole" => Ok(Scenario::BlackholedPrimary),
                        "isolate" => Ok(Scenario::IsolatedPrimary),
                        "silent" => Ok(Scenario::SilentStandbyThenBlackhole),
                        other => Err(format!("--only: unknown fault {other:?}")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--before-c15" => before_c15 = true,
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if std::env::var_os("XCE_LOG").is_some() {
        // A timeline: stamped on the clock of the fault lines.
        xce::failover::log::set_sink(Some(std::sync::Arc::new(|l, line: &str| {
            eprintln!("{} libxce {}: {line}", p9_netfaults::wall(), l.as_str())
        })));
    }
    let logs = plan::log_dir("xce-netfaults");
    let plan = Plan {
        fault_for,
        log_dir: Some(logs.clone()),
        ..p9_netfaults::plan()
    };
    println!(
        "xce-netfaults: {} rounds per fault; controller {}; {} CPUs; controller logs in {}{}\n",
        args.rounds,
        xce_proof::controller_bin().display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        logs.display(),
        if cfg!(debug_assertions) {
            "; WARNING: debug build, numbers are not representative"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let mut plans = Vec::new();
    if before_c15 {
        plans.push(Plan {
            controller_args: plan::BEFORE_C15.map(String::from).to_vec(),
            ..plan.clone()
        });
    }
    plans.push(plan);
    let mut all = Vec::new();
    for plan in &plans {
        let results = match p9_netfaults::run(&scenarios, args.rounds, plan, |r| {
            eprintln!("  {}", describe(r))
        }) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("xce-netfaults: {e} (controller logs in {})", logs.display());
                return ExitCode::FAILURE;
            }
        };
        println!("{}", p9_netfaults::table(&results, plan));
        all.extend(results);
    }
    let results = all;
    println!("({:.0} s)", started.elapsed().as_secs_f64());
    if results.iter().all(|r| r.correct() && r.recovered()) {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "xce-netfaults: a history was not linearizable or a client was never served again"
        );
        ExitCode::FAILURE
    }
}
