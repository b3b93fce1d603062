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

use xce_proof::bench::args::{Command, Needs, SIDE_BY_SIDE, SIDE_BY_SIDE_USAGE};
use xce_proof::bench::p14_congestion::{self, TOOL};

fn main() -> ExitCode {
    let usage = format!(
        "usage: {TOOL} [--rounds N] [--rate R] [--writers N] [--before PATH] [--args FLAGS] [--no-build]
  --rate R       tc rate of every link (default 1mbit)
  --writers N    writer threads (default 8)
{SIDE_BY_SIDE_USAGE}"
    );
    let cmd = Command::new(TOOL, usage, SIDE_BY_SIDE).rounds(3);
    let (mut rate, mut writers) = (None, None);
    let args = match cmd.run(Needs { netns: true }, &mut |flag, value| {
        match flag {
            "--rate" => rate = Some(value.text("a rate")?),
            "--writers" => {
                writers = Some(
                    value
                        .text("a number")?
                        .parse()
                        .ok()
                        .filter(|&n| n > 0 && n <= 256)
                        .ok_or("--writers: 1..256")?,
                )
            }
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(a) => a,
        Err(code) => return code,
    };
    p14_congestion::command(&args, rate, writers)
}
