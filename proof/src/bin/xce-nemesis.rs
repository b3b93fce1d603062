//! `xce-nemesis`: S18 and S20 of acceptance.md — a seeded, randomised schedule of faults (kill
//! -9, SIGSTOP/SIGCONT, the whole cluster killed and restarted in an order, partitions,
//! blackholes, slow links, a member removed and added back blank, a disk lost, a stalled disk,
//! a full disk, a wall clock stepped an hour, SIGTERM, leadership moved, issue 35's defect 1),
//! composed — a node cut off held with another node's fault — over three real controllers
//! (built with their failpoints) in network namespaces, 8 client threads through the library;
//! then every fault healed and the run checked; the summary counts the overlaps. Needs root
//! and `ip`/`tc` (iproute2).
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-nemesis -- --seed 42 --minutes 30
//! ```

use std::process::ExitCode;
use std::time::Duration;

use xce_proof::bench::args::{Command, Needs, Shared};
use xce_proof::bench::plan::log_dir;
use xce_proof::nemesis::fault::Kind;
use xce_proof::nemesis::schedule::Schedule;
use xce_proof::nemesis::{self, Options};

fn usage() -> String {
    let mut u = String::from(
        "usage: xce-nemesis [--seed N] [--minutes M] [--faults LIST] [--plan] [--args FLAGS] [--no-build]
  --seed N       the schedule's seed (default: from the clock, printed); the same seed, minutes
                 and faults replay the same schedule of faults and timings
  --minutes M    how long the faults go on (default 1; fractions allowed)
  --faults LIST  only these fault kinds (comma-separated; default: every selectable one)
  --plan         print the schedule (and the overlaps it plans) and exit (nothing is started)
  --args FLAGS   extra `xce-controller run` flags for every node
  --no-build     do not run `cargo build -p xce-controller` first (XCE_CONTROLLER set: never)
fault kinds:",
    );
    for k in Kind::ALL {
        match k.pending() {
            None => u.push_str(&format!("\n  {:<16} {}", k.name(), k.what())),
            Some(why) => u.push_str(&format!("\n  {:<16} NOT SELECTABLE YET: {why}", k.name())),
        }
    }
    u
}

fn main() -> ExitCode {
    let cmd = Command::new(
        "xce-nemesis",
        usage(),
        &[Shared::ControllerArgs, Shared::NoBuild],
    );
    let (mut seed, mut minutes, mut kinds, mut plan_only) =
        (None, 1.0_f64, Kind::selectable(), false);
    let parsed = cmd.parse(std::env::args().skip(1), &mut |flag, value| {
        match flag {
            "--seed" => {
                seed = Some(
                    value
                        .text("a number")?
                        .parse::<u64>()
                        .map_err(|_| "--seed: a number")?,
                )
            }
            "--minutes" => {
                minutes = value
                    .text("minutes")?
                    .parse::<f64>()
                    .ok()
                    .filter(|&m| m > 0.0 && m <= 24.0 * 60.0)
                    .ok_or("--minutes: > 0")?
            }
            "--faults" => {
                kinds = value
                    .text("a list")?
                    .split(',')
                    .map(|s| Kind::parse(s.trim()).ok_or(format!("--faults: unknown kind {s:?}")))
                    .collect::<Result<_, _>>()?;
                nemesis::refuse_pending(&kinds).map_err(|e| format!("--faults: {e}"))?;
            }
            "--plan" => plan_only = true,
            _ => return Ok(false),
        }
        Ok(true)
    });
    let seed = seed.unwrap_or_else(nemesis::seed_from_time);
    let length = Duration::from_secs_f64(minutes * 60.0);
    if plan_only && parsed.is_ok() {
        print!("{}", Schedule::generate(seed, length, &kinds));
        return ExitCode::SUCCESS;
    }
    let args = match cmd.start(parsed, Needs { netns: true }) {
        Ok(a) => a,
        Err(code) => return code,
    };
    nemesis::command(Options {
        seed,
        length,
        kinds,
        controller_args: args.controller_args,
        log_dir: log_dir("xce-nemesis"),
        live: true,
    })
}
