//! `xce-rolling`: the P13 table of acceptance.md — a rolling restart of the three controllers
//! under load (64 writing and 8 listing contexts): errors callers saw, acknowledged writes
//! lost or twice, and the latency of calls during the restarts vs outside them. Rows, in the
//! same run, round for round: `--before PATH`, another controller binary restarted by SIGTERM
//! (e.g. an older build); `--crash`, this build restarted by `kill -9` (what a restart costs
//! without a handover); and this build restarted by SIGTERM (planned: C14's handover).
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-rolling -- [--rounds 3] [--crash] [--before PATH]
//! ```

use std::process::ExitCode;
use std::time::Instant;

use xce_proof::bench::args::{Command, Needs, SIDE_BY_SIDE, SIDE_BY_SIDE_USAGE};
use xce_proof::bench::p13_rolling::{self, Restart, Restarts};
use xce_proof::bench::plan::{self, Plan};
use xce_proof::harness::sides::{self, Row};

const TOOL: &str = "xce-rolling";

fn main() -> ExitCode {
    let usage = format!(
        "usage: {TOOL} [--rounds N] [--crash] [--before PATH] [--args FLAGS] [--no-build]
  --crash        also restart this build by kill -9 (a row of its own)
{SIDE_BY_SIDE_USAGE}"
    );
    let cmd = Command::new(TOOL, usage, SIDE_BY_SIDE).rounds(3);
    let mut crash = false;
    let args = match cmd.run(Needs::default(), &mut |flag, _| {
        crash |= flag == "--crash";
        Ok(flag == "--crash")
    }) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let logs = plan::log_dir(TOOL);
    let plan = Plan {
        log_dir: Some(logs.clone()),
        controller_args: args.controller_args.clone(),
        ..p13_rolling::plan()
    };
    let current = xce_proof::controller_bin();
    // The row under test last: the table's verdict is its.
    let mut rows = Vec::new();
    if let Some(b) = &args.before {
        rows.push(Row {
            label: "before, SIGTERM".into(),
            bin: b.clone(),
            with: Restart::Terminate,
        });
    }
    if crash {
        rows.push(Row {
            label: "this build, kill -9".into(),
            bin: current.clone(),
            with: Restart::Kill,
        });
    }
    rows.push(Row {
        label: "this build, SIGTERM".into(),
        bin: current,
        with: Restart::Terminate,
    });
    sides::banner(TOOL, args.rounds, &rows, &logs);
    let started = Instant::now();
    let runs = match sides::alternate(TOOL, &rows, args.rounds, &logs, |row, n| {
        let r = p13_rolling::round(&Plan {
            more: Restarts {
                restart: row.with,
                ..plan.more.clone()
            },
            ..plan.clone()
        })?;
        eprintln!(
            "  {} round {n}: {} calls, {} errors {:?}, {} acknowledged ({} lost, {} twice), handed over {}",
            row.label,
            r.outside.len() + r.during.len(),
            r.errors,
            r.error_samples.first(),
            r.acked,
            r.missing,
            r.duplicated,
            r.handed_over
        );
        Ok(r)
    }) {
        Ok(r) => r,
        Err(code) => return code,
    };
    println!("{}", p13_rolling::table(&runs, &plan));
    println!("({:.0} s)", started.elapsed().as_secs_f64());
    ExitCode::SUCCESS
}
