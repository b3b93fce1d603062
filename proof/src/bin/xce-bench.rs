//! `xce-bench`: the benchmarks P1–P8, P10 and P15 of acceptance.md against real
//! `xce-controller` processes on loopback, one table per benchmark (`bench::suite::bench`).
//! See proof/BENCH.md.
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-bench -- [--quick] [--only P1,P3] [--svg out.svg]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use xce_proof::bench::alloc::CountingAlloc;
use xce_proof::bench::args::{Command, Needs, Shared};
use xce_proof::bench::{p2_sides, suite, BenchOpts};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const USAGE: &str =
    "usage: xce-bench [--quick] [--only P1,P3,…] [--kills N] [--svg FILE] [--no-build]
  --quick     fewer samples and kills (about 3 minutes instead of about 15)
  --kills N   kills of the one-client failover series (P3, P4, P5)
  --only      run only these benchmarks (P1 … P8, P10, P15)
  --svg FILE  also draw one failover (both policies) to FILE
  --no-build  do not run `cargo build -p xce-controller` first (XCE_CONTROLLER set: never)
  --before-bench PATH  P2 only: also run P2 in this other xce-bench binary (another build of
              the library), round for round, and set both side by side
  --rounds N  rounds of --before-bench (default 3)";

fn main() -> ExitCode {
    let cmd = Command::new(
        "xce-bench",
        USAGE,
        &[Shared::Quick, Shared::NoBuild, Shared::Rounds],
    )
    .rounds(3);
    let mut opts = BenchOpts::default();
    let mut before_bench = None::<PathBuf>;
    // The start turns the library's log down to errors (XCE_LOG wins): a thousand failing-over
    // contexts would each log, and failures are in the tables.
    let common = match cmd.run(Needs::default(), &mut |flag, value| {
        match flag {
            "--kills" => opts.kills = Some(value.positive("a number")?),
            "--only" => {
                let v = value.text("a list, e.g. P1,P3")?;
                for id in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    let ok = (id.len() == 2
                        && id[..1].eq_ignore_ascii_case("p")
                        && matches!(id.as_bytes()[1], b'1'..=b'8'))
                        || id.eq_ignore_ascii_case("p10")
                        || id.eq_ignore_ascii_case("p15");
                    if !ok {
                        return Err(format!(
                            "--only: unknown benchmark {id:?} (P1 … P8, P10, P15)"
                        ));
                    }
                    opts.only.push(id.to_ascii_uppercase());
                }
            }
            "--svg" => opts.svg = Some(PathBuf::from(value.text("a file name")?)),
            "--before-bench" => before_bench = Some(PathBuf::from(value.text("a path")?)),
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(c) => c,
        Err(code) => return code,
    };
    opts.quick = common.quick;
    if let Some(before) = before_bench {
        // P2 side by side with another build of the library (proof/src/bench/p2_sides.rs).
        return match p2_sides::run(&before, common.rounds, opts.quick) {
            Ok(t) => {
                println!("{t}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("xce-bench: P2 side by side: {e}");
                ExitCode::FAILURE
            }
        };
    }
    suite::bench(opts)
}
