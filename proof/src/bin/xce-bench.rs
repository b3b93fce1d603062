//! `xce-bench`: the benchmarks P1–P8 of acceptance.md against real `xce-controller` processes
//! on loopback, one table per benchmark. See proof/BENCH.md.
//!
//! ```text
//! cargo run --release -p xce-proof --bin xce-bench -- [--quick] [--only P1,P3] [--svg out.svg]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use xce_proof::bench::alloc::CountingAlloc;
use xce_proof::bench::args::{Command, Needs, Shared};
use xce_proof::bench::{
    kills, p10_suspicion, p1_roundtrip, p2_loop_cost, p7_codec, p8_footprint, steady, BenchOpts,
    Table,
};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const USAGE: &str =
    "usage: xce-bench [--quick] [--only P1,P3,…] [--kills N] [--svg FILE] [--no-build]
  --quick     fewer samples and kills (about 3 minutes instead of about 15)
  --kills N   kills of the one-client failover series (P3, P4, P5; and P4's earlier timing)
  --only      run only these benchmarks (P1 … P8, P10, P15)
  --svg FILE  also draw one failover (both policies) to FILE
  --no-build  do not run `cargo build -p xce-controller` first (XCE_CONTROLLER set: never)";

fn print(t: &Table, all: &mut Vec<Table>) {
    println!("{t}");
    all.push(t.clone());
}

fn fail(id: &'static str, e: String, all: &mut Vec<Table>) {
    let mut t = Table::new(id, "could not be measured");
    t.target(
        "see above",
        xce_proof::bench::table::Verdict::NotMeasured(e),
    );
    print(&t, all);
}

fn main() -> ExitCode {
    let cmd = Command::new("xce-bench", USAGE, &[Shared::Quick, Shared::NoBuild]);
    let mut opts = BenchOpts::default();
    // The start turns the library's log down to errors (XCE_LOG wins): a thousand failing-over
    // contexts would each log, and failures are in the tables.
    let common = match cmd.run(Needs::default(), &mut |flag, value| {
        match flag {
            "--kills" => {
                let v = value.text("a number")?;
                let n: usize = v
                    .parse()
                    .map_err(|_| format!("--kills: bad number {v:?}"))?;
                if n == 0 {
                    return Err("--kills: at least 1".into());
                }
                opts.kills = Some(n);
            }
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
            _ => return Ok(false),
        }
        Ok(true)
    }) {
        Ok(c) => c,
        Err(code) => return code,
    };
    opts.quick = common.quick;
    let logs = xce_proof::bench::plan::log_dir("xce-bench");
    opts.log_dir = Some(logs.clone());
    xce_proof::harness::cluster::kill_nodes_with_this_process(true);
    // P6 holds a thousand contexts plus their reconnects.
    xce_proof::harness::sys::raise_fd_limit(8192);
    let started = Instant::now();
    println!(
        "xce-bench {} mode; controller {}; {} CPUs; controller logs in {}{}\n",
        if opts.quick { "quick" } else { "full" },
        xce_proof::controller_bin().display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        logs.display(),
        if cfg!(debug_assertions) {
            "; WARNING: debug build, numbers are not representative"
        } else {
            ""
        }
    );
    let mut all = Vec::new();

    if opts.wants("P7") {
        eprintln!("P7 …");
        print(&p7_codec::run(&opts), &mut all);
    }
    if opts.wants("P1") || opts.wants("P2") || opts.wants("P8") {
        match steady::start_steady(&opts) {
            Ok(steady) => {
                // P8 first: the allocator counts every thread, so nothing else may run.
                if opts.wants("P8") {
                    eprintln!("P8 …");
                    match p8_footprint::run(&steady, &opts) {
                        Ok(t) => print(&t, &mut all),
                        Err(e) => fail("P8", e, &mut all),
                    }
                }
                if opts.wants("P1") {
                    eprintln!("P1 …");
                    match p1_roundtrip::run(&steady, &opts) {
                        Ok(t) => print(&t, &mut all),
                        Err(e) => fail("P1", e, &mut all),
                    }
                }
                if opts.wants("P2") {
                    eprintln!("P2 …");
                    match p2_loop_cost::run(&steady, &opts) {
                        Ok(t) => print(&t, &mut all),
                        Err(e) => fail("P2", e, &mut all),
                    }
                }
            }
            Err(e) => {
                for id in ["P8", "P1", "P2"] {
                    if opts.wants(id) {
                        fail(id, e.clone(), &mut all);
                    }
                }
            }
        }
    }
    if ["P3", "P4", "P5", "P6"].iter().any(|id| opts.wants(id)) || opts.svg.is_some() {
        eprintln!("P3–P6 (kills) …");
        match kills::run(&opts) {
            Ok(ts) => {
                for t in &ts {
                    print(t, &mut all);
                }
            }
            Err(e) => fail("P3-P6", e, &mut all),
        }
    }

    if opts.wants("P15") {
        eprintln!("P15 …");
        match xce_proof::bench::p15_security::run(&opts) {
            Ok(t) => print(&t, &mut all),
            Err(e) => fail("P15", e, &mut all),
        }
    }

    if opts.wants("P10") {
        eprintln!("P10 …");
        match p10_suspicion::run(&opts) {
            Ok(t) => print(&t, &mut all),
            Err(e) => fail("P10", e, &mut all),
        }
    }

    all.sort_by_key(|t| t.id);
    println!("== summary ({:.0} s) ==", started.elapsed().as_secs_f64());
    for t in &all {
        for (what, v) in &t.targets {
            let word = match v {
                xce_proof::bench::table::Verdict::Met(_) => "MET",
                xce_proof::bench::table::Verdict::NotMet(_) => "NOT MET",
                xce_proof::bench::table::Verdict::NotMeasured(_) => "NOT MEASURED",
            };
            println!("  {:<3} {word:<12} {what}", t.id);
        }
    }
    ExitCode::SUCCESS
}
