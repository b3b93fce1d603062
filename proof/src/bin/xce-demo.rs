//! `xce-demo`: the failover demo (the README's main command, `scripts/demo.sh`): see
//! `xce_proof::demo`.
//!
//! `xce-demo [--kills N]` (default 1).

use std::process::ExitCode;

use xce_proof::bench::args::{Command, Needs};
use xce_proof::demo;

const USAGE: &str = "usage: xce-demo [--kills N]
  --kills N  kill -9 the primary N times (default 1)
XCE_LOG=warn|info|debug: the library's own log lines on stderr beside the timeline";

fn main() -> ExitCode {
    let cmd = Command::new("xce-demo", USAGE, &[]);
    let mut kills = 1;
    // The start turns the library's log down to errors: the timeline shows what the library
    // did, its own WARN lines only with XCE_LOG set.
    if let Err(code) = cmd.run(Needs::default(), &mut |flag, value| {
        if flag != "--kills" {
            return Ok(false);
        }
        kills = value.positive("a number")?;
        Ok(true)
    }) {
        return code;
    }
    match demo::run(kills) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xce-demo: {e}");
            ExitCode::FAILURE
        }
    }
}
