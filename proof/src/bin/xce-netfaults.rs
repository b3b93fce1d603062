//! `xce-netfaults`: the P9 table of acceptance.md — network faults in network namespaces
//! (a blackholed primary, a primary cut off from its peers, a standby silent to clients then
//! the primary blackholed), concurrent writers and readers through the library, each round's
//! history checked for linearizability. Needs root and `ip` (iproute2).
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-netfaults -- [--rounds 5] [--fault-secs 5]
//! ```

use std::process::ExitCode;

use xce_proof::bench::args::{Command, Needs, Shared};
use xce_proof::bench::p9_netfaults::{self, Scenario};

const USAGE: &str = "usage: xce-netfaults [--rounds N] [--fault-secs S] [--only blackhole,isolate,silent] [--no-build]
  --rounds N      rounds per fault (default 5; the silent-standby fault runs until N rounds
                  of each outcome — the other standby elected, the silent one elected — or 4N)
  --fault-secs S  how long each fault lasts (default 5)
  --only LIST     only these faults
  --no-build      do not run `cargo build -p xce-controller` first (XCE_CONTROLLER set: never)
XCE_LOG=info|debug: the library's log lines on stderr, each stamped (wall-clock seconds, ms),
  with the instant each round's fault is set and healed on the same clock: a round's timeline";

fn main() -> ExitCode {
    let cmd = Command::new("xce-netfaults", USAGE, &[Shared::Rounds, Shared::NoBuild]).rounds(5);
    let mut fault_for = None;
    let mut scenarios = Scenario::ALL.to_vec();
    let args = match cmd.run(Needs { netns: true }, &mut |flag, value| {
        match flag {
            "--fault-secs" => fault_for = Some(value.seconds(3600.0)?),
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
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(a) => a,
        Err(code) => return code,
    };
    p9_netfaults::command(args.rounds, &scenarios, fault_for)
}
