//! `xce-records`: the library's TLS record layer (`xce_proto::records`) side by side with
//! rustls's unbuffered and buffered APIs and plain TCP, for small request/reply exchanges —
//! in memory and over TCP loopback, one run, alternating batches. See proof/BENCH.md (P15).
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-records -- [--quick] [--rounds N] [--batch N]
//!     [--req BYTES] [--rep BYTES] [--cpu N]
//! ```

use std::process::ExitCode;

use xce_proof::bench::records::{run, RecordsOpts};

const USAGE: &str =
    "usage: xce-records [--quick] [--rounds N] [--batch N] [--req BYTES] [--rep BYTES] [--cpu N]
  --quick      10 rounds instead of 40
  --rounds N   rounds of alternating batches (default 40)
  --batch N    round trips per batch (default 500)
  --req/--rep  plaintext bytes of the request and the reply (default 104 / 272, P1's hello)
  --cpu N      pin the client and every server thread to CPU N (default: not pinned)";

fn parse() -> Result<RecordsOpts, String> {
    let mut o = RecordsOpts::default();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> Result<usize, String> {
            let v = it.next().ok_or(format!("{name} needs a number"))?;
            v.parse().map_err(|_| format!("{name}: bad number {v:?}"))
        };
        match a.as_str() {
            "--quick" => o.rounds = 10,
            "--rounds" => o.rounds = num("--rounds")?.max(1),
            "--batch" => o.batch = num("--batch")?.max(1),
            "--req" => o.req = num("--req")?.max(1),
            "--rep" => o.rep = num("--rep")?.max(1),
            "--cpu" => o.cpu = Some(num("--cpu")?),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("xce-records: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
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
