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

use xce_proof::bench::args::{Command, Needs, SIDE_BY_SIDE, SIDE_BY_SIDE_USAGE};
use xce_proof::bench::p13_rolling::{self, TOOL};

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
    p13_rolling::command(&args, crash)
}
