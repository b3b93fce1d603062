//! `xce-congestion`: the P14 table of acceptance.md — every link limited to 1 Mbit/s (tc tbf)
//! while writers submit back to back: elections during congestion alone, elections per fault
//! (the primary blackholed) and the writers' unavailability. Needs root, `ip` and `tc`.
//! `--before PATH` measures another controller binary (e.g. an older build) in the same run,
//! round for round, so that the two rows are side by side.
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-congestion -- [--rounds 3] [--before PATH]
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use xce_proof::bench::args::{Command, Needs, SIDE_BY_SIDE, SIDE_BY_SIDE_USAGE};
use xce_proof::bench::p14_congestion::{self, Links};
use xce_proof::bench::plan::{self, Plan};
use xce_proof::harness::sides::{self, Row};

const TOOL: &str = "xce-congestion";

fn main() -> ExitCode {
    let usage = format!(
        "usage: {TOOL} [--rounds N] [--rate R] [--writers N] [--before PATH] [--args FLAGS] [--no-build]
  --rate R       tc rate of every link (default 1mbit)
  --writers N    writer threads (default 8)
{SIDE_BY_SIDE_USAGE}"
    );
    let cmd = Command::new(TOOL, usage, SIDE_BY_SIDE).rounds(3);
    let (mut rate, mut writers) = ("1mbit".to_string(), 8usize);
    let args = match cmd.run(Needs { netns: true }, &mut |flag, value| {
        match flag {
            "--rate" => rate = value.text("a rate")?,
            "--writers" => {
                writers = value
                    .text("a number")?
                    .parse()
                    .ok()
                    .filter(|&n| n > 0 && n <= 256)
                    .ok_or("--writers: 1..256")?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let logs = plan::log_dir(TOOL);
    let defaults = p14_congestion::plan();
    let plan = Plan {
        writers,
        log_dir: Some(logs.clone()),
        controller_args: args.controller_args.clone(),
        more: Links {
            rate,
            ..defaults.more.clone()
        },
        ..defaults
    };
    let mut rows = Vec::new();
    if let Some(b) = &args.before {
        rows.push(Row {
            label: "before".into(),
            bin: b.clone(),
            with: (),
        });
    }
    rows.push(Row {
        label: "this build".into(),
        bin: xce_proof::controller_bin(),
        with: (),
    });
    sides::banner(TOOL, args.rounds, &rows, &logs);
    let started = Instant::now();
    let runs = match sides::alternate(TOOL, &rows, args.rounds, &logs, |row, n| {
        let r = p14_congestion::round(&plan)?;
        eprintln!(
            "  {} round {n}: {} elections calm, {} for the fault, unavailable max {:.2} s, {} failed calls",
            row.label,
            r.calm_elections,
            r.fault_elections,
            r.unavailable.iter().max().unwrap_or(&Duration::ZERO).as_secs_f64(),
            r.errors
        );
        Ok(r)
    }) {
        Ok(r) => r,
        Err(code) => return code,
    };
    println!("{}", p14_congestion::table(&runs, &plan));
    println!("({:.0} s)", started.elapsed().as_secs_f64());
    ExitCode::SUCCESS
}
