//! `xce-scale`: P11 (write throughput vs concurrent contexts), P12 (the job table at
//! 10^4 / 10^5 / 10^6 jobs, and any size `--jobs` names) and P17 (P12's figures as a curve)
//! against real `xce-controller` processes. See proof/BENCH.md.
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-scale -- [--quick] [--only P11|P12]
//!     [--jobs 10000,100000,1000000] [--baseline PATH-TO-OLD-xce-controller] [--one-by-one N]
//! ```
//! `XCE_SCALE_FULL=1` adds 10^6 jobs to P12 (several minutes).

use std::path::PathBuf;
use std::process::ExitCode;

use xce_proof::bench::args::{Command, Needs, Shared};
use xce_proof::bench::{suite, ScaleOpts};

const USAGE: &str =
    "usage: xce-scale [--quick] [--only P11|P12] [--jobs N,N,…] [--baseline BIN] [--one-by-one N] [--no-build]
  --quick          3 s per throughput point, P12 at 10^4 and 10^5 jobs
  --only P11|P12   run one of them
  --jobs N,…       table sizes for P12 (default 10000,100000; XCE_SCALE_FULL=1 adds 1000000)
  --baseline BIN   also run P11 and P12 (every size, round for round) against this controller
                   binary, side by side
  --one-by-one N   P12's log store against the snapshot: N small jobs one at a time through one
                   context, on each build (default 40000; 0: skip)
  --no-build       do not run `cargo build -p xce-controller` first (XCE_CONTROLLER set: never)";

/// The command and the shared flags it takes.
fn command() -> Command {
    Command::new("xce-scale", USAGE, &[Shared::Quick, Shared::NoBuild])
}

fn main() -> ExitCode {
    let cmd = command();
    let mut a = ScaleOpts::default();
    let common = match cmd.run(Needs::default(), &mut |flag, value| {
        match flag {
            "--only" => a.only = Some(value.text("P11 or P12")?.to_uppercase()),
            "--jobs" => {
                a.jobs = value
                    .text("a list")?
                    .split(',')
                    .map(|s| s.trim().parse::<u64>().map_err(|e| format!("--jobs: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--baseline" => a.baseline = Some(PathBuf::from(value.text("a path")?)),
            "--one-by-one" => a.one_by_one = value.number_in(0, 100_000_000)? as u64,
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(c) => c,
        Err(code) => return code,
    };
    a.quick = common.quick;
    suite::scale(a)
}

#[cfg(test)]
mod tests {
    /// proof/BENCH.md: every command builds the controller first unless `--no-build`.
    #[test]
    fn builds_first_unless_no_build() {
        let parse = |a: &[&str]| {
            super::command()
                .parse(a.iter().map(|s| s.to_string()), &mut |_, _| Ok(false))
                .map(|c| c.build)
        };
        assert_eq!(parse(&[]), Ok(true));
        assert_eq!(parse(&["--quick", "--no-build"]), Ok(false));
    }
}
