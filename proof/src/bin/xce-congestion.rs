//! `xce-congestion`: the P14 table of acceptance.md — every link limited to 1 Mbit/s (tc tbf)
//! while writers submit back to back: elections during congestion alone, elections per fault
//! (the primary blackholed) and the writers' unavailability. Needs root, `ip` and `tc`.
//! `--before PATH` measures another controller binary (e.g. an older build) in the same run,
//! round for round, so that the two rows are side by side.
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-congestion -- [--rounds 3] [--before PATH]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use xce_proof::congestion::{self, Plan};

const USAGE: &str =
    "usage: xce-congestion [--rounds N] [--rate R] [--writers N] [--before PATH] [--no-build]
  --rounds N     rounds per controller (default 3)
  --rate R       tc rate of every link (default 1mbit)
  --writers N    writer threads (default 8)
  --before PATH  also measure this controller binary, round for round, in the same run
  --args FLAGS   extra `xce-controller run` flags, for every binary measured
  --no-build     do not run `cargo build -p xce-controller` first (XCE_CONTROLLER set: never)";

struct Args {
    rounds: usize,
    rate: String,
    writers: usize,
    before: Option<PathBuf>,
    extra: Vec<String>,
    build: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        rounds: 3,
        rate: "1mbit".into(),
        writers: 8,
        before: None,
        extra: Vec::new(),
        build: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |what: &str| it.next().ok_or(format!("{arg} needs {what}"));
        match arg.as_str() {
            "--rounds" => {
                a.rounds = value("a number")?
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or("--rounds: a positive number")?
            }
            "--writers" => {
                a.writers = value("a number")?
                    .parse()
                    .ok()
                    .filter(|&n| n > 0 && n <= 256)
                    .ok_or("--writers: 1..256")?
            }
            "--rate" => a.rate = value("a rate")?,
            "--before" => a.before = Some(PathBuf::from(value("a path")?)),
            "--args" => {
                a.extra = value("flags")?
                    .split_whitespace()
                    .map(String::from)
                    .collect()
            }
            "--no-build" => a.build = false,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("xce-congestion: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Some(why) = xce_proof::netns::unavailable() {
        eprintln!("xce-congestion: network namespaces unavailable: {why}");
        return ExitCode::FAILURE;
    }
    if args.build {
        if let Err(e) = xce_proof::build_controller() {
            eprintln!("xce-congestion: {e}");
            return ExitCode::FAILURE;
        }
    }
    if std::env::var_os("XCE_LOG").is_none() {
        xce::failover::log::set_level(xce::failover::log::Level::Error);
    }
    let logs = std::env::temp_dir().join(format!("xce-congestion-logs-{}", std::process::id()));
    let plan = Plan {
        rate: args.rate.clone(),
        writers: args.writers,
        log_dir: Some(logs.clone()),
        controller_args: args.extra.clone(),
        ..Plan::default()
    };
    let current = xce_proof::controller_bin();
    let mut bins: Vec<(String, PathBuf)> = Vec::new();
    if let Some(b) = &args.before {
        bins.push(("before".into(), b.clone()));
    }
    bins.push(("this build".into(), current.clone()));
    println!(
        "xce-congestion: {} rounds per controller; {}; {} CPUs; controller logs in {}{}\n",
        args.rounds,
        bins.iter()
            .map(|(l, p)| format!("{l}: {}", p.display()))
            .collect::<Vec<_>>()
            .join(", "),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        logs.display(),
        if cfg!(debug_assertions) {
            "; WARNING: debug build, numbers are not representative"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let mut runs: Vec<(String, Vec<congestion::RoundResult>)> =
        bins.iter().map(|(l, _)| (l.clone(), Vec::new())).collect();
    // Round for round, alternating binaries: the machine's mood hits both alike.
    for round in 0..args.rounds {
        for (i, (label, bin)) in bins.iter().enumerate() {
            // SAFETY of set_var: this program's only other threads are joined writers of the
            // previous round; nothing reads the environment concurrently.
            std::env::set_var("XCE_CONTROLLER", bin);
            match congestion::round(&plan) {
                Ok(r) => {
                    eprintln!(
                        "  {label} round {}: {} elections calm, {} for the fault, unavailable max {:.2} s, {} failed calls",
                        round + 1,
                        r.calm_elections,
                        r.fault_elections,
                        r.unavailable.iter().max().unwrap_or(&Duration::ZERO).as_secs_f64(),
                        r.errors
                    );
                    runs[i].1.push(r);
                }
                Err(e) => {
                    eprintln!(
                        "xce-congestion: {label}: {e} (controller logs in {})",
                        logs.display()
                    );
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    println!("{}", congestion::table(&runs, &plan));
    println!("({:.0} s)", started.elapsed().as_secs_f64());
    ExitCode::SUCCESS
}
