//! The command that runs several benchmarks in one go, `xce-bench` ([`bench`]: P1–P8, P10,
//! P15 against real controllers on loopback), and prints each table as it is measured, then a
//! summary of every target.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use super::steady::{start_steady, Steady};
use super::table::Verdict;
use super::{
    kills, p10_suspicion, p15_security, p1_roundtrip, p2_loop_cost, p3_client_added,
    p4_unavailability, p5_baseline, p6_herd, p7_codec, p8_footprint, plan, BenchOpts, Table,
};
use crate::harness::{cluster, sys};

/// The tables printed so far, for the summary.
#[derive(Default)]
struct Printed(Vec<Table>);

impl Printed {
    fn print(&mut self, t: Table) {
        println!("{t}");
        self.0.push(t);
    }

    /// A benchmark that could not be measured: a table of its own saying why.
    fn fail(&mut self, id: &'static str, e: String) {
        let mut t = Table::new(id, "could not be measured");
        t.target("see above", Verdict::NotMeasured(e));
        self.print(t);
    }

    fn print_or_fail(&mut self, id: &'static str, r: Result<Table, String>) {
        match r {
            Ok(t) => self.print(t),
            Err(e) => self.fail(id, e),
        }
    }
}

/// `xce-bench`: the benchmarks `opts` selects, in an order where nothing else runs while P8
/// counts the heap; the controllers' logs in a directory of this run.
pub fn bench(mut opts: BenchOpts) -> ExitCode {
    let logs = plan::log_dir("xce-bench");
    opts.log_dir = Some(logs.clone());
    cluster::kill_nodes_with_this_process(true);
    // P6 holds a thousand contexts plus their reconnects.
    sys::raise_fd_limit(8192);
    let started = Instant::now();
    banner(&opts, &logs);
    let mut printed = Printed::default();
    if opts.wants("P7") {
        eprintln!("P7 …");
        printed.print(p7_codec::run(&opts));
    }
    on_a_steady_cluster(&opts, &mut printed);
    kill_series(&opts, &mut printed);
    if opts.wants("P15") {
        eprintln!("P15 …");
        printed.print_or_fail("P15", p15_security::run(&opts));
    }
    if opts.wants("P10") {
        eprintln!("P10 …");
        printed.print_or_fail("P10", p10_suspicion::run(&opts));
    }
    summary(printed.0, started);
    ExitCode::SUCCESS
}

fn banner(opts: &BenchOpts, logs: &Path) {
    println!(
        "xce-bench {} mode; controller {}; {} CPUs; controller logs in {}{}\n",
        if opts.quick { "quick" } else { "full" },
        crate::controller_bin().display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        logs.display(),
        if cfg!(debug_assertions) {
            "; WARNING: debug build, numbers are not representative"
        } else {
            ""
        }
    );
}

/// P8, P1 and P2 on one steady cluster (P8 first: the allocator counts every thread, so
/// nothing else may run).
fn on_a_steady_cluster(opts: &BenchOpts, printed: &mut Printed) {
    if !(opts.wants("P1") || opts.wants("P2") || opts.wants("P8")) {
        return;
    }
    let steady = match start_steady(opts) {
        Ok(s) => s,
        Err(e) => {
            for id in ["P8", "P1", "P2"] {
                if opts.wants(id) {
                    printed.fail(id, e.clone());
                }
            }
            return;
        }
    };
    type Run = fn(&Steady, &BenchOpts) -> Result<Table, String>;
    let runs: [(&'static str, Run); 3] = [
        ("P8", p8_footprint::run),
        ("P1", p1_roundtrip::run),
        ("P2", p2_loop_cost::run),
    ];
    for (id, run) in runs {
        if opts.wants(id) {
            eprintln!("{id} …");
            printed.print_or_fail(id, run(&steady, opts));
        }
    }
}

/// P3–P6 (and `--svg`) from one series of kills.
fn kill_series(opts: &BenchOpts, printed: &mut Printed) {
    if !(["P3", "P4", "P5", "P6"].iter().any(|id| opts.wants(id)) || opts.svg.is_some()) {
        return;
    }
    eprintln!("P3–P6 (kills) …");
    let tables = kills::measure(opts).and_then(|k| {
        let mut tables = Vec::new();
        type Read = fn(&kills::Kills) -> Table;
        let reads: [(&str, Read); 4] = [
            ("P3", p3_client_added::table),
            ("P4", p4_unavailability::table),
            ("P5", p5_baseline::table),
            ("P6", p6_herd::table),
        ];
        for (id, table) in reads {
            if opts.wants(id) {
                tables.push(table(&k));
            }
        }
        k.finish(tables)
    });
    match tables {
        Ok(ts) => ts.into_iter().for_each(|t| printed.print(t)),
        Err(e) => printed.fail("P3-P6", e),
    }
}

/// One line per target of every table, in benchmark order.
fn summary(mut all: Vec<Table>, started: Instant) {
    all.sort_by_key(|t| t.id);
    println!("== summary ({:.0} s) ==", started.elapsed().as_secs_f64());
    for t in &all {
        for (what, v) in &t.targets {
            let word = match v {
                Verdict::Met(_) => "MET",
                Verdict::NotMet(_) => "NOT MET",
                Verdict::NotMeasured(_) => "NOT MEASURED",
            };
            println!("  {:<3} {word:<12} {what}", t.id);
        }
    }
}
