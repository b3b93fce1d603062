//! P2 side by side with another build of the library (`xce-bench --only P2 --before-bench
//! PATH`): P2's cost is the library's, which is linked into the bench binary, so the other
//! build is another `xce-bench` binary. Each round runs P2 once in each binary, as a child
//! process (`--no-build --only P2`, the same controller binary for both through
//! `XCE_CONTROLLER`), the order alternating round by round so that the machine's drift
//! reaches both alike; the children's P2 tables are read back and set side by side, with each
//! side's median over the rounds.

use std::path::Path;
use std::process::Command;

use super::table::{num, Table, Verdict};
use crate::harness::cluster::controller_bin;

/// The p50s (µs) one P2 table reports: through the loop, bare, control — for `hello`,
/// `joblist` (against the controller) and `hello` against the canned server.
#[derive(Debug, Clone, Copy, Default)]
pub struct P2Round {
    pub hello: [f64; 3],
    pub joblist: [f64; 3],
    pub canned: [f64; 3],
}

impl P2Round {
    /// p50 through the loop / p50 bare − 1, in %.
    fn overhead(p: &[f64; 3]) -> f64 {
        (p[0] / p[1] - 1.0) * 100.0
    }

    /// The A/A control: p50 bare on other connections / p50 bare − 1, in %.
    fn aa(p: &[f64; 3]) -> f64 {
        (p[2] / p[1] - 1.0) * 100.0
    }

    /// The loop's own cost against the canned server, µs per call.
    fn own_us(&self) -> f64 {
        self.canned[0] - self.canned[1]
    }

    /// Reads the p50 column of P2's table in `out` (a whole `xce-bench` output).
    pub fn parse(out: &str) -> Result<P2Round, String> {
        let table = out
            .split("== P2 ")
            .nth(1)
            .ok_or("no P2 table in the output")?;
        let mut r = P2Round::default();
        let mut found = 0;
        for line in table.lines().take_while(|l| !l.starts_with("== ")) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if cells.len() < 4 || !line.trim_start().starts_with('|') {
                continue;
            }
            let (what, p50) = (cells[1], cells[2]);
            let Ok(v) = p50.parse::<f64>() else {
                continue;
            };
            let op = if what.starts_with("hello:") {
                &mut r.hello
            } else if what.starts_with("joblist(") {
                &mut r.joblist
            } else if what.starts_with("diag: hello, in-process canned server:") {
                &mut r.canned
            } else {
                continue;
            };
            let way = if what.ends_with("through the loop") {
                0
            } else if what.ends_with("bare attempt, no loop") {
                1
            } else if what.ends_with("control (bare, other connections)") {
                2
            } else {
                continue;
            };
            op[way] = v;
            found += 1;
        }
        if found != 9 {
            return Err(format!("P2 table: {found} of 9 p50s found"));
        }
        Ok(r)
    }
}

/// One P2 run of the bench binary `bin` (a child process); its table read back.
fn run_side(bin: &Path, quick: bool) -> Result<P2Round, String> {
    let mut cmd = Command::new(bin);
    cmd.args(["--no-build", "--only", "P2"]);
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd
        .env("XCE_CONTROLLER", controller_bin())
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    P2Round::parse(&text).map_err(|e| format!("{}: {e}", bin.display()))
}

/// The machine's load average over the last minute (`/proc/loadavg`).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `rounds` rounds of P2 in this binary and in `before`, alternating which goes first.
pub fn run(before: &Path, rounds: usize, quick: bool) -> Result<Table, String> {
    let this = std::env::current_exe().map_err(|e| e.to_string())?;
    let load_before = load_average();
    let mut sides: [Vec<P2Round>; 2] = Default::default();
    for i in 0..rounds {
        for k in 0..2 {
            let side = (i + k) % 2; // 0: this build, 1: before
            let bin = if side == 0 { &this } else { before };
            eprintln!("P2 round {} of {rounds}: {} …", i + 1, bin.display());
            sides[side].push(run_side(bin, quick)?);
        }
    }
    Ok(table(before, &sides, &load_before, &load_average()))
}

fn table(before: &Path, sides: &[Vec<P2Round>; 2], load_before: &str, load_after: &str) -> Table {
    let mut t = Table::new("P2", "side by side with another build of the library");
    t.note(format!(
        "this build vs {} (--before-bench), one P2 run of each per round, the order \
         alternating; the same controller ({}); load average {load_before} before, \
         {load_after} after",
        before.display(),
        controller_bin().display()
    ));
    t.note(
        "overhead = p50 through the loop / p50 bare − 1 against the real controller; A/A = the \
         control's p50 / bare p50 − 1; own µs = loop p50 − bare p50 against the canned server",
    );
    t.columns(&[
        "build, round",
        "hello loop µs",
        "hello bare µs",
        "hello overhead %",
        "hello A/A %",
        "joblist loop µs",
        "joblist bare µs",
        "joblist overhead %",
        "joblist A/A %",
        "canned own µs",
    ]);
    let names = ["this build", "before"];
    for (name, rounds) in names.iter().zip(sides) {
        for (i, r) in rounds.iter().enumerate() {
            t.row(cells(format!("{name}, {}", i + 1), &[*r]));
        }
    }
    for (name, rounds) in names.iter().zip(sides) {
        t.row(cells(format!("{name}, median"), rounds));
    }
    let med = |rounds: &[P2Round], f: fn(&P2Round) -> f64| median(rounds.iter().map(f).collect());
    let now = &sides[0];
    let (oh, oj, own) = (
        med(now, |r| P2Round::overhead(&r.hello)),
        med(now, |r| P2Round::overhead(&r.joblist)),
        med(now, P2Round::own_us),
    );
    let worst = oh.max(oj);
    t.target(
        "≤ 2% against the real controller (hello and joblist, this build, median of rounds)",
        Verdict::from(worst <= 2.0, format!("worst {worst:+.2}%")),
    );
    t.target(
        "the loop's own cost ≤ 1 µs per call (canned server, this build, median of rounds)",
        Verdict::from(own <= 1.0, format!("{} µs", num(own))),
    );
    t
}

/// One row: the medians of `rounds` (one round: its own figures).
fn cells(what: String, rounds: &[P2Round]) -> Vec<String> {
    let med = |f: &dyn Fn(&P2Round) -> f64| median(rounds.iter().map(f).collect());
    vec![
        what,
        num(med(&|r| r.hello[0])),
        num(med(&|r| r.hello[1])),
        format!("{:+.2}", med(&|r| P2Round::overhead(&r.hello))),
        format!("{:+.2}", med(&|r| P2Round::aa(&r.hello))),
        num(med(&|r| r.joblist[0])),
        num(med(&|r| r.joblist[1])),
        format!("{:+.2}", med(&|r| P2Round::overhead(&r.joblist))),
        format!("{:+.2}", med(&|r| P2Round::aa(&r.joblist))),
        num(med(&|r| r.own_us())),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_p50s_of_a_p2_table() {
        let out = "\
== P1 round trip ==
  | hello: through the loop | 99 | 1 | 1 | 1 | 5 |
== P2 cost of the failover loop on the happy path ==
   notes
  | op | p50 µs | p90 µs | p99 µs | max µs | n |
  |----|-------:|
  | hello: through the loop | 15.20 | 20 | 30 | 40 | 2000 |
  | hello: bare attempt, no loop | 15.00 | 20 | 30 | 40 | 2000 |
  | hello: control (bare, other connections) | 15.10 | 20 | 30 | 40 | 2000 |
  | joblist(10): through the loop | 40.0 | 1 | 1 | 1 | 2000 |
  | joblist(10): bare attempt, no loop | 39.0 | 1 | 1 | 1 | 2000 |
  | joblist(10): control (bare, other connections) | 39.5 | 1 | 1 | 1 | 2000 |
  |   diag: hello, in-process canned server: through the loop | 8.500 | 1 | 1 | 1 | 2000 |
  |   diag: hello, in-process canned server: bare attempt, no loop | 8.000 | 1 | 1 | 1 | 2000 |
  |   diag: hello, in-process canned server: control (bare, other connections) | 8.100 | 1 | 1 | 1 | 2000 |
   loop overhead …
== P3 x ==
  | hello: through the loop | 77 | 1 | 1 | 1 | 5 |
";
        let r = P2Round::parse(out).expect("parsed");
        assert_eq!(r.hello, [15.2, 15.0, 15.1]);
        assert_eq!(r.joblist, [40.0, 39.0, 39.5]);
        assert_eq!(r.canned, [8.5, 8.0, 8.1]);
        assert!((r.own_us() - 0.5).abs() < 1e-9);
        assert!(P2Round::parse("== P2 x ==\n  | hello: through the loop | 1 |").is_err());
    }
}
