//! `xce-records`: the library's TLS record layer (`xce_proto::records`) side by side with
//! rustls's unbuffered and buffered APIs and plain TCP, for small request/reply exchanges —
//! in memory and over TCP loopback, one run, alternating batches. See proof/BENCH.md (P15).
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-records -- [--quick] [--rounds N] [--batch N]
//!     [--req BYTES] [--rep BYTES] [--cpu N]
//! ```

use std::process::ExitCode;

use xce_proof::bench::args::{Command, Needs, Shared};
use xce_proof::bench::records::{run, RecordsOpts};

const USAGE: &str =
    "usage: xce-records [--quick] [--rounds N] [--batch N] [--req BYTES] [--rep BYTES] [--cpu N]
  --quick      10 rounds instead of 40
  --rounds N   rounds of alternating batches (default 40)
  --batch N    round trips per batch (default 500)
  --req/--rep  plaintext bytes of the request and the reply (default 104 / 272, P1's hello)
  --cpu N      pin the client and every server thread to CPU N (default: not pinned)";

fn main() -> ExitCode {
    let cmd = Command::new("xce-records", USAGE, &[Shared::Quick]);
    let mut o = RecordsOpts::default();
    let mut rounds = None;
    let common = match cmd.run(Needs::default(), &mut |flag, value| {
        match flag {
            "--rounds" => rounds = Some(value.positive("a number")?),
            "--batch" => o.batch = value.positive("a number")?,
            "--req" => o.req = value.positive("a number of bytes")?,
            "--rep" => o.rep = value.positive("a number of bytes")?,
            "--cpu" => o.cpu = Some(value.number_in(0, 4095)?),
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(c) => c,
        Err(code) => return code,
    };
    o.rounds = rounds.unwrap_or(if common.quick { 10 } else { o.rounds });
    match run(&o) {
        Ok(tables) => {
            for t in tables {
                println!("{t}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xce-records: {e}");
            ExitCode::FAILURE
        }
    }
}
