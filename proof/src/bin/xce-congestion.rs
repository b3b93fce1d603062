//! `xce-congestion`: the P14 table of acceptance.md (amended by issue 29) — every link limited
//! to 1 Mbit/s (tc tbf, queue 50 ms) while 3 writers submit and 3 listers list a pre-filled
//! table of 1,000 jobs, through the library: elections during 20 s of congestion alone, the
//! writers' longest wait, the listings, then the primary killed (or blackholed, or nothing) and
//! the elections and unavailability after it. Needs root, `ip` and `tc`.
//! `--before PATH` measures another controller binary (e.g. an older build) in the same run,
//! round for round, so that the two rows are side by side. The bench before issue 29:
//! `--listers 0 --jobs 0 --writers 8 --queue 200ms --calm-s 8 --fault blackhole`.
//! `--p16 N` adds P16: N kills of each build's primary on quiet links before each of its
//! rounds, and a table of both (fast on a quiet link, calm on a congested one, same run).
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-congestion -- [--rounds 3] [--fault none] [--before PATH]
//! ```

use std::process::ExitCode;

use xce_proof::bench::args::{Command, Needs, SIDE_BY_SIDE, SIDE_BY_SIDE_USAGE};
use xce_proof::bench::p14_congestion::{self, FaultKind, TOOL};
use xce_proof::bench::p16_adaptation;

fn main() -> ExitCode {
    let usage = format!(
        "usage: {TOOL} [--rounds N] [--rate R] [--queue L] [--writers N] [--listers N] [--jobs N]
       [--page-bytes B] [--calm-s S] [--fault kill|blackhole|none] [--p16 N]
       [--before PATH]
       [--args FLAGS] [--no-build]
  --rate R        tc rate of every link (default 1mbit; off: no shaping, a control for the
                  machine's own elections)
  --queue L       tc tbf queue (latency) of every link (default 50ms)
  --writers N     writer threads, each with its own context (default 3)
  --listers N     lister threads listing the whole table back to back (default 3; 0: writers only)
  --jobs N        jobs submitted before the shaping (default 1000)
  --page-bytes B  the largest listing page asked for (default 0: the controller's choice)
  --calm-s S      seconds of congestion alone, from the clients' start (default 20)
  --fault F       after the calm stretch, still congested: kill (kill -9 of the primary, the
                  default), blackhole (both its links down 4 s) or none
  --p16 N         P16: before each round, N kills of the same build's primary on quiet
                  links (P4's method); a second table puts both side by side (default 0: off)
  the bench before issue 29: --listers 0 --jobs 0 --writers 8 --queue 200ms --calm-s 8 --fault blackhole
{SIDE_BY_SIDE_USAGE}"
    );
    let cmd = Command::new(TOOL, usage, SIDE_BY_SIDE).rounds(3);
    let mut plan = p14_congestion::plan();
    let args = match cmd.run(Needs { netns: true }, &mut |flag, value| {
        let m = &mut plan.more;
        match flag {
            "--rate" => m.rate = value.text("a rate")?,
            "--queue" => m.latency = value.text("a tc latency (50ms)")?,
            "--writers" => plan.writers = value.number_in(1, 256)?,
            "--listers" => plan.readers = value.number_in(0, 64)?,
            "--jobs" => m.jobs = value.number_in(0, 1_000_000)?,
            "--page-bytes" => m.page_bytes = value.number_in(0, 1 << 24)? as u32,
            "--calm-s" => m.calm_for = value.seconds(3600.0)?,
            "--p16" => m.quiet_kills = value.number_in(0, 1000)?,
            "--fault" => {
                m.fault = FaultKind::parse(&value.text("kill, blackhole or none")?)
                    .ok_or("--fault: kill, blackhole or none")?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if plan.more.quiet_kills > 0 {
        p16_adaptation::command(&args, plan)
    } else {
        p14_congestion::command(&args, plan)
    }
}
