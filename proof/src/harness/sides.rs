//! What the side-by-side commands (`xce-congestion`, `xce-rolling`) share: rounds run row
//! after row within each round — so that the machine's mood hits every row alike — each row
//! with `XCE_CONTROLLER` set to its controller binary (their flags: `bench::args`); and the
//! first line every benchmark command prints.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// One row of the table: a label, the controller binary it runs, and what else the round
/// needs to know (`with`).
#[derive(Debug, Clone)]
pub struct Row<W> {
    pub label: String,
    pub bin: PathBuf,
    pub with: W,
}

/// Prints the command's first line: rounds, each row's binary, CPUs, where the logs go.
pub fn banner<W>(tool: &str, rounds: usize, rows: &[Row<W>], logs: &Path) {
    let bins: Vec<String> = rows
        .iter()
        .map(|r| format!("{}: {}", r.label, r.bin.display()))
        .collect();
    first_line(
        tool,
        &format!("{rounds} rounds per row; {}", bins.join(", ")),
        logs,
    );
}

/// Every benchmark command's first line: `what` it runs, the CPUs, where the controllers'
/// logs go, and a warning when this is a debug build.
pub fn first_line(tool: &str, what: &str, logs: &Path) {
    println!(
        "{tool}: {what}; {} CPUs; controller logs in {}{}\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        logs.display(),
        if cfg!(debug_assertions) {
            "; WARNING: debug build, numbers are not representative"
        } else {
            ""
        }
    );
}

/// Runs `rounds` rounds of every row, row after row within a round, each with
/// `XCE_CONTROLLER` set to the row's binary; `round(row, n)` runs one (`n` from 1). The
/// first failure stops it all (printed with where the controllers' logs are).
pub fn alternate<W, R>(
    tool: &str,
    rows: &[Row<W>],
    rounds: usize,
    logs: &Path,
    mut round: impl FnMut(&Row<W>, usize) -> Result<R, String>,
) -> Result<Vec<(String, Vec<R>)>, ExitCode> {
    let mut runs: Vec<(String, Vec<R>)> =
        rows.iter().map(|r| (r.label.clone(), Vec::new())).collect();
    for n in 1..=rounds {
        for (i, row) in rows.iter().enumerate() {
            // SAFETY of set_var: these commands' only other threads are the joined client
            // threads of the previous round; nothing reads the environment concurrently.
            std::env::set_var("XCE_CONTROLLER", &row.bin);
            match round(row, n) {
                Ok(r) => runs[i].1.push(r),
                Err(e) => {
                    eprintln!(
                        "{tool}: {}: {e} (controller logs in {})",
                        row.label,
                        logs.display()
                    );
                    return Err(ExitCode::FAILURE);
                }
            }
        }
    }
    Ok(runs)
}
