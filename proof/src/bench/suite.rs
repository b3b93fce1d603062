//! The commands that run several benchmarks in one go and print each table as it is
//! measured: `xce-bench` ([`bench`](fn@bench): P1–P8, P10, P15 against real controllers on loopback,
//! then a summary of every target) and `xce-scale` ([`scale`]: P11, P12, the long run).

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use super::steady::{start_steady, Steady};
use super::table::Verdict;
use super::{
    kills, p10_suspicion, p11_throughput, p12_job_table, p15_security, p17_growth, p1_roundtrip,
    p2_loop_cost, p3_client_added, p4_unavailability, p5_baseline, p6_herd, p7_codec, p8_footprint,
    plan, BenchOpts, ScaleOpts, Table,
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
    let mode = if opts.quick { "quick" } else { "full" };
    let bin = crate::controller_bin();
    let what = format!("{mode} mode; controller {}", bin.display());
    crate::harness::sides::first_line("xce-bench", &what, logs);
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

/// `xce-scale`: P11, P12 and P17,
/// each table printed as measured (or why it could not be).
pub fn scale(mut opts: ScaleOpts) -> ExitCode {
    opts.ours = crate::controller_bin();
    cluster::kill_nodes_with_this_process(true);
    sys::raise_fd_limit(8192);
    let logs = plan::log_dir("xce-scale");
    println!(
        "xce-scale: controller {}{}; logs in {}; load average {}",
        opts.ours.display(),
        opts.baseline
            .as_ref()
            .map_or(String::new(), |b| format!(", baseline {}", b.display())),
        logs.display(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let t0 = Instant::now();
    let wants = |id: &str| opts.only.as_deref().is_none_or(|o| o == id);
    let show = |what: &str, r: Result<Table, String>| match r {
        Ok(t) => println!("{t}"),
        Err(e) => println!("{what} could not be measured: {e}"),
    };
    if wants("P11") {
        show("P11", p11_throughput::table(&opts, &logs));
    }
    if wants("P12") {
        p12_and_p17(&opts, &logs);
    }
    std::env::set_var("XCE_CONTROLLER", &opts.ours);
    println!("xce-scale: {:.0} s", t0.elapsed().as_secs_f64());
    ExitCode::SUCCESS
}

/// P12's tables (round for round with the baseline build when given), P17 from this branch's
/// rows, and P12's log store against the snapshot with writes one at a time.
fn p12_and_p17(opts: &ScaleOpts, logs: &Path) {
    match p12_job_table::tables(opts, logs) {
        Ok((tables, rows)) => {
            for t in tables {
                println!("{t}");
            }
            let ours: Vec<_> = rows.iter().filter(|r| r.controller != "baseline").collect();
            println!("{}", p17_growth::table(&ours));
        }
        Err(e) => println!("P12 could not be measured: {e}"),
    }
    if opts.one_by_one > 0 {
        match p12_job_table::one_by_one_table(opts, opts.one_by_one, logs) {
            Ok(t) => println!("{t}"),
            Err(e) => println!("P12 (one write per entry) could not be measured: {e}"),
        }
    }
}
