//! `xce-rolling`: the P13 table of acceptance.md — a rolling restart of the three controllers
//! under load (64 writing and 8 listing contexts): errors callers saw, acknowledged writes
//! lost or twice, and the p99 latency of calls during the restarts vs outside them. Rows, in
//! the same run, round for round: this build restarted by SIGTERM (planned: C14's handover),
//! the same build restarted by `kill -9` (`--crash`: what a restart cost without a handover),
//! and `--before PATH`, another controller binary restarted by SIGTERM (e.g. an older build).
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-rolling -- [--rounds 3] [--crash] [--before PATH]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use xce_proof::rolling::{self, Plan, Restart};

const USAGE: &str = "usage: xce-rolling [--rounds N] [--crash] [--before PATH] [--no-build]
  --rounds N     rounds per row (default 3)
  --crash        also restart this build by kill -9 (a row of its own)
  --before PATH  also measure this controller binary (SIGTERM), round for round
  --args FLAGS   extra `xce-controller run` flags, for every binary measured
  --no-build     do not run `cargo build -p xce-controller` first (XCE_CONTROLLER set: never)";

struct Args {
    rounds: usize,
    crash: bool,
    before: Option<PathBuf>,
    extra: Vec<String>,
    build: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        rounds: 3,
        crash: false,
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
            "--crash" => a.crash = true,
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
                eprintln!("xce-rolling: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.build {
        if let Err(e) = xce_proof::build_controller() {
            eprintln!("xce-rolling: {e}");
            return ExitCode::FAILURE;
        }
    }
    if std::env::var_os("XCE_LOG").is_none() {
        xce::failover::log::set_level(xce::failover::log::Level::Error);
    }
    let logs = std::env::temp_dir().join(format!("xce-rolling-logs-{}", std::process::id()));
    let plan = Plan {
        log_dir: Some(logs.clone()),
        controller_args: args.extra.clone(),
        ..Plan::default()
    };
    let current = xce_proof::controller_bin();
    // (label, binary, restart kind); the row under test last.
    let mut rows: Vec<(String, PathBuf, Restart)> = Vec::new();
    if let Some(b) = &args.before {
        rows.push(("before, SIGTERM".into(), b.clone(), Restart::Terminate));
    }
    if args.crash {
        rows.push(("this build, kill -9".into(), current.clone(), Restart::Kill));
    }
    rows.push((
        "this build, SIGTERM".into(),
        current.clone(),
        Restart::Terminate,
    ));
    println!(
        "xce-rolling: {} rounds per row; {}; {} CPUs; controller logs in {}{}\n",
        args.rounds,
        rows.iter()
            .map(|(l, p, _)| format!("{l}: {}", p.display()))
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
    let mut runs: Vec<(String, Vec<rolling::RoundResult>)> = rows
        .iter()
        .map(|(l, _, _)| (l.clone(), Vec::new()))
        .collect();
    // Round for round, alternating rows: the machine's mood hits all alike.
    for round in 0..args.rounds {
        for (i, (label, bin, restart)) in rows.iter().enumerate() {
            // SAFETY of set_var: this program's only other threads are the joined client
            // threads of the previous round; nothing reads the environment concurrently.
            std::env::set_var("XCE_CONTROLLER", bin);
            let plan = Plan {
                restart: *restart,
                ..plan.clone()
            };
            match rolling::round(&plan) {
                Ok(r) => {
                    eprintln!(
                        "  {label} round {}: {} calls, {} errors {:?}, {} acknowledged ({} lost, {} twice), handed over {}",
                        round + 1,
                        r.outside.len() + r.during.len(),
                        r.errors,
                        r.error_samples.first(),
                        r.acked,
                        r.missing,
                        r.duplicated,
                        r.handed_over
                    );
                    runs[i].1.push(r);
                }
                Err(e) => {
                    eprintln!(
                        "xce-rolling: {label}: {e} (controller logs in {})",
                        logs.display()
                    );
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    println!("{}", rolling::table(&runs, &plan));
    println!("({:.0} s)", started.elapsed().as_secs_f64());
    ExitCode::SUCCESS
}
