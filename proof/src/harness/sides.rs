//! What the side-by-side commands (`xce-congestion`, `xce-rolling`) share: their common
//! flags, their start (usage, namespaces, build, the library's log level), and rounds run
//! row after row within each round — so that the machine's mood hits every row alike — each
//! row with `XCE_CONTROLLER` set to its controller binary.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The flags every side-by-side command takes.
#[derive(Debug, Clone)]
pub struct Common {
    pub rounds: usize,
    pub before: Option<PathBuf>,
    /// Extra `xce-controller run` flags, for every binary measured.
    pub extra: Vec<String>,
    pub build: bool,
}

/// The usage lines of [`Common`]'s flags.
pub const COMMON_USAGE: &str = "  --rounds N     rounds per row (default 3)
  --before PATH  also measure this controller binary, round for round, in the same run
  --args FLAGS   extra `xce-controller run` flags, for every binary measured
  --no-build     do not run `cargo build -p xce-controller` first (XCE_CONTROLLER set: never)";

/// A command's own flag: `own(flag, value)` returns `Ok(false)` for a flag it does not know;
/// `value(what)` takes the flag's value (an error naming `what` when there is none).
pub type OwnFlag<'a> =
    dyn FnMut(&str, &mut dyn FnMut(&str) -> Result<String, String>) -> Result<bool, String> + 'a;

/// Parses the command line: [`Common`]'s flags here, the command's own through `own`.
/// `Err("")` asks for the usage (`--help`).
pub fn parse(own: &mut OwnFlag<'_>) -> Result<Common, String> {
    let mut a = Common {
        rounds: 3,
        before: None,
        extra: Vec::new(),
        build: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |what: &str| it.next().ok_or(format!("{arg} needs {what}"));
        match arg.as_str() {
            "--rounds" => {
                a.rounds = value("a number")?
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or("--rounds: a positive number")?
            }
            "--before" => a.before = Some(PathBuf::from(value("a path")?)),
            "--args" => {
                a.extra = value("flags")?
                    .split_whitespace()
                    .map(String::from)
                    .collect()
            }
            "--no-build" => a.build = false,
            "-h" | "--help" => return Err(String::new()),
            other => {
                if !own(other, &mut value)? {
                    return Err(format!("unknown argument {other:?}"));
                }
            }
        }
    }
    Ok(a)
}

/// The start of such a command: on a bad command line prints the error and `usage` (exit
/// 2); with `netns`, fails unless network namespaces can be made; builds the controller
/// unless `--no-build`; sets the library's log to errors only unless `XCE_LOG` says else.
pub fn start(
    tool: &str,
    usage: &str,
    parsed: Result<Common, String>,
    netns: bool,
) -> Result<Common, ExitCode> {
    let args = parsed.map_err(|e| {
        if !e.is_empty() {
            eprintln!("{tool}: {e}");
        }
        eprintln!("{usage}");
        ExitCode::from(2)
    })?;
    if netns {
        if let Some(why) = crate::harness::netns::unavailable() {
            eprintln!("{tool}: network namespaces unavailable: {why}");
            return Err(ExitCode::FAILURE);
        }
    }
    if args.build {
        if let Err(e) = crate::build_controller() {
            eprintln!("{tool}: {e}");
            return Err(ExitCode::FAILURE);
        }
    }
    if std::env::var_os("XCE_LOG").is_none() {
        xce::failover::log::set_level(xce::failover::log::Level::Error);
    }
    Ok(args)
}

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
    println!(
        "{tool}: {rounds} rounds per row; {}; {} CPUs; controller logs in {}{}\n",
        rows.iter()
            .map(|r| format!("{}: {}", r.label, r.bin.display()))
            .collect::<Vec<_>>()
            .join(", "),
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
