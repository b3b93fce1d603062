//! The command line of every benchmark command (`src/bin/`): one parser, one start.
//!
//! A command names the [`Shared`] flags it takes (their meaning is the same everywhere) and
//! parses its own through a closure; `-h`/`--help` prints its usage (exit 0), anything else it
//! does not know is an error (the usage on stderr, exit 2). [`Command::start`] then does what
//! every command does before measuring: checks that network namespaces can be made (when it
//! needs them), builds the controller (unless `--no-build`, for the commands that take it), and
//! turns the library's log down to errors unless `XCE_LOG` says otherwise.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// A flag several commands take, with the same meaning in each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shared {
    /// `--quick`: fewer samples.
    Quick,
    /// `--no-build`: do not build the controller first. A command without it never builds.
    NoBuild,
    /// `--rounds N`: rounds per row or per fault (N > 0).
    Rounds,
    /// `--before PATH`: also measure this controller binary, round for round.
    Before,
    /// `--args FLAGS`: extra `xce-controller run` flags, for every binary measured.
    ControllerArgs,
}

/// What the [`Shared`] flags said (each at its default when the command does not take it).
#[derive(Debug, Clone)]
pub struct Common {
    pub quick: bool,
    /// Build the controller before measuring (the commands that take `--no-build`).
    pub build: bool,
    pub rounds: usize,
    pub before: Option<PathBuf>,
    /// Extra `xce-controller run` flags.
    pub controller_args: Vec<String>,
}

/// The flags of the side-by-side commands (`xce-congestion`, `xce-rolling`).
pub const SIDE_BY_SIDE: &[Shared] = &[
    Shared::Rounds,
    Shared::Before,
    Shared::ControllerArgs,
    Shared::NoBuild,
];

/// The usage lines of [`SIDE_BY_SIDE`] (`--rounds` defaults to 3 there).
pub const SIDE_BY_SIDE_USAGE: &str = "  --rounds N     rounds per row (default 3)
  --before PATH  also measure this controller binary, round for round, in the same run
  --args FLAGS   extra `xce-controller run` flags, for every binary measured
  --no-build     do not run `cargo build -p xce-controller` first (XCE_CONTROLLER set: never)";

/// Why parsing stopped without a [`Common`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// `-h` or `--help`.
    Help,
    /// A flag unknown, without its value, or with a bad one.
    Bad(String),
}

impl From<String> for Stop {
    fn from(e: String) -> Stop {
        Stop::Bad(e)
    }
}

/// The value of the flag being parsed: the next argument.
pub struct Value<'a> {
    flag: &'a str,
    rest: &'a mut dyn Iterator<Item = String>,
}

impl Value<'_> {
    /// The next argument; without one, "`FLAG needs WHAT`".
    pub fn text(&mut self, what: &str) -> Result<String, String> {
        self.rest
            .next()
            .ok_or_else(|| format!("{} needs {what}", self.flag))
    }

    /// A number > 0; "`FLAG: a positive number`" when it is not one.
    pub fn positive(&mut self, what: &str) -> Result<usize, String> {
        let flag = self.flag;
        self.text(what)?
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{flag}: a positive number"))
    }

    /// A whole number in `lo..=hi`; "`FLAG: lo..hi`" when it is not one.
    pub fn number_in(&mut self, lo: usize, hi: usize) -> Result<usize, String> {
        let flag = self.flag;
        self.text("a number")?
            .parse()
            .ok()
            .filter(|n| (lo..=hi).contains(n))
            .ok_or_else(|| format!("{flag}: {lo}..{hi}"))
    }

    /// Seconds, more than 0 and at most `hi`; "`FLAG: seconds in (0, hi]`" when not.
    pub fn seconds(&mut self, hi: f64) -> Result<std::time::Duration, String> {
        let flag = self.flag;
        self.text("seconds")?
            .parse()
            .ok()
            .filter(|&s: &f64| s > 0.0 && s <= hi)
            .map(std::time::Duration::from_secs_f64)
            .ok_or_else(|| format!("{flag}: seconds in (0, {hi}]"))
    }
}

/// A command's own flag: `own(flag, value)` returns `Ok(false)` for a flag it does not know.
pub type OwnFlag<'a> = dyn FnMut(&str, &mut Value<'_>) -> Result<bool, String> + 'a;

/// What a command needs before it measures.
#[derive(Debug, Clone, Copy, Default)]
pub struct Needs {
    /// Network namespaces (root, `ip`): the command fails at once without them.
    pub netns: bool,
}

/// One benchmark command: its name, its usage text, the shared flags it takes.
#[derive(Debug, Clone)]
pub struct Command {
    pub tool: &'static str,
    pub usage: String,
    pub shared: &'static [Shared],
    /// `--rounds`' default.
    pub rounds: usize,
}

impl Command {
    pub fn new(tool: &'static str, usage: impl Into<String>, shared: &'static [Shared]) -> Self {
        Command {
            tool,
            usage: usage.into(),
            shared,
            rounds: 1,
        }
    }

    /// The same with `--rounds`' default.
    pub fn rounds(self, rounds: usize) -> Self {
        Command { rounds, ..self }
    }

    fn takes(&self, s: Shared) -> bool {
        self.shared.contains(&s)
    }

    /// Parses `args` (without the program name): the shared flags here, the command's own
    /// through `own`.
    pub fn parse(
        &self,
        args: impl IntoIterator<Item = String>,
        own: &mut OwnFlag<'_>,
    ) -> Result<Common, Stop> {
        let mut c = Common {
            quick: false,
            build: self.takes(Shared::NoBuild),
            rounds: self.rounds,
            before: None,
            controller_args: Vec::new(),
        };
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            if arg == "-h" || arg == "--help" {
                return Err(Stop::Help);
            }
            let mut value = Value {
                flag: &arg,
                rest: &mut it,
            };
            let shared = match arg.as_str() {
                "--quick" => Some(Shared::Quick),
                "--no-build" => Some(Shared::NoBuild),
                "--rounds" => Some(Shared::Rounds),
                "--before" => Some(Shared::Before),
                "--args" => Some(Shared::ControllerArgs),
                _ => None,
            }
            .filter(|&s| self.takes(s));
            match shared {
                Some(Shared::Quick) => c.quick = true,
                Some(Shared::NoBuild) => c.build = false,
                Some(Shared::Rounds) => c.rounds = value.positive("a number")?,
                Some(Shared::Before) => c.before = Some(PathBuf::from(value.text("a path")?)),
                Some(Shared::ControllerArgs) => {
                    c.controller_args = value
                        .text("flags")?
                        .split_whitespace()
                        .map(String::from)
                        .collect()
                }
                None => {
                    if !own(&arg, &mut value)? {
                        return Err(Stop::Bad(format!("unknown argument {arg:?}")));
                    }
                }
            }
        }
        Ok(c)
    }

    /// The start of the command: on `--help` prints the usage (exit 0), on a bad command line
    /// the error and the usage (exit 2); with `needs.netns`, fails unless network namespaces
    /// can be made; builds the controller unless `--no-build` (commands that take it); sets the
    /// library's log to errors only unless `XCE_LOG` is set.
    pub fn start(&self, parsed: Result<Common, Stop>, needs: Needs) -> Result<Common, ExitCode> {
        let args = match parsed {
            Ok(a) => a,
            Err(Stop::Help) => {
                // `--help | head -1`: a reader that stopped reading is no error (println!
                // would panic on the broken pipe).
                let _ = writeln!(std::io::stdout(), "{}", self.usage);
                return Err(ExitCode::SUCCESS);
            }
            Err(Stop::Bad(e)) => {
                eprintln!("{}: {e}", self.tool);
                eprintln!("{}", self.usage);
                return Err(ExitCode::from(2));
            }
        };
        if needs.netns {
            if let Some(why) = crate::harness::netns::unavailable() {
                eprintln!("{}: network namespaces unavailable: {why}", self.tool);
                return Err(ExitCode::FAILURE);
            }
        }
        if args.build {
            if let Err(e) = crate::build_controller() {
                eprintln!("{}: {e}", self.tool);
                return Err(ExitCode::FAILURE);
            }
        }
        if std::env::var_os("XCE_LOG").is_none() {
            xce::client::log::set_level(xce::client::log::Level::Error);
        }
        Ok(args)
    }

    /// [`Command::parse`] of the process's arguments, then [`Command::start`].
    pub fn run(&self, needs: Needs, own: &mut OwnFlag<'_>) -> Result<Common, ExitCode> {
        self.start(self.parse(std::env::args().skip(1), own), needs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn none(_: &str, _: &mut Value<'_>) -> Result<bool, String> {
        Ok(false)
    }

    #[test]
    fn shared_flags_only_where_taken() {
        let cmd = Command::new("t", "", &[Shared::Rounds, Shared::NoBuild]).rounds(3);
        let c = cmd.parse(args(""), &mut none).unwrap();
        assert_eq!((c.rounds, c.build, c.quick), (3, true, false));
        let c = cmd.parse(args("--rounds 7 --no-build"), &mut none).unwrap();
        assert_eq!((c.rounds, c.build), (7, false));
        assert_eq!(
            cmd.parse(args("--quick"), &mut none).unwrap_err(),
            Stop::Bad("unknown argument \"--quick\"".into())
        );
        // A command without --no-build never builds.
        let c = Command::new("t", "", &[Shared::Quick])
            .parse(args("--quick"), &mut none)
            .unwrap();
        assert_eq!((c.quick, c.build), (true, false));
    }

    #[test]
    fn values_and_help() {
        let cmd = Command::new("t", "", &[Shared::Rounds, Shared::ControllerArgs]);
        assert_eq!(
            cmd.parse(args("--rounds"), &mut none).unwrap_err(),
            Stop::Bad("--rounds needs a number".into())
        );
        assert_eq!(
            cmd.parse(args("--rounds 0"), &mut none).unwrap_err(),
            Stop::Bad("--rounds: a positive number".into())
        );
        let c = cmd.parse(["--args".to_string(), "--a 1  --b".to_string()], &mut none);
        assert_eq!(c.unwrap().controller_args, args("--a 1 --b"));
        assert_eq!(
            cmd.parse(args("--rounds 2 --help --bogus"), &mut none)
                .unwrap_err(),
            Stop::Help
        );
    }

    #[test]
    fn own_flags() {
        let cmd = Command::new("t", "", &[]);
        let mut seen = Vec::new();
        let mut own = |flag: &str, v: &mut Value<'_>| -> Result<bool, String> {
            match flag {
                "--x" => seen.push(v.text("an x")?),
                "--y" => seen.push("y".into()),
                _ => return Ok(false),
            }
            Ok(true)
        };
        cmd.parse(args("--y --x 5"), &mut own).unwrap();
        assert_eq!(
            cmd.parse(args("--x"), &mut own).unwrap_err(),
            Stop::Bad("--x needs an x".into())
        );
        assert_eq!(
            cmd.parse(args("--z"), &mut own).unwrap_err(),
            Stop::Bad("unknown argument \"--z\"".into())
        );
        assert_eq!(seen, ["y", "5"]);
    }

    /// The child of [`help_into_a_closed_pipe_exits_quietly`]: says it is ready, waits until
    /// its stdin closes (its parent has closed the read end of its stdout by then), prints the
    /// usage, and exits 0 if that returned as `--help` should.
    #[test]
    #[ignore = "run by help_into_a_closed_pipe_exits_quietly"]
    fn help_child() {
        use std::io::Read;
        println!("XCE-HELP-CHILD-READY");
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        let cmd = Command::new("t", "usage: t [--x]\n  --x  an x", &[]);
        let quiet = cmd.start(Err(Stop::Help), Needs::default()).err() == Some(ExitCode::SUCCESS);
        std::process::exit(if quiet { 0 } else { 3 });
    }

    /// `xce-bench --help | head -1`: the usage into a pipe whose reader has gone ends the
    /// command quietly (exit 0), not in a panic.
    #[test]
    fn help_into_a_closed_pipe_exits_quietly() {
        use std::io::{BufRead, BufReader, Read};
        use std::process::{Command as Process, Stdio};
        let mut child = Process::new(std::env::current_exe().unwrap())
            .args(["--exact", "bench::args::tests::help_child"])
            .args(["--ignored", "--nocapture", "--test-threads=1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("XCE-HELP-CHILD-READY") {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "child ended early");
        }
        drop(out);
        drop(child.stdin.take());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("the child did not exit within 60 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        assert!(status.success(), "{status}: {err}");
    }

    #[test]
    fn numbers_and_seconds_in_range() {
        let cmd = Command::new("t", "", &[]);
        let mut got = Vec::new();
        let mut own = |flag: &str, v: &mut Value<'_>| -> Result<bool, String> {
            match flag {
                "--n" => got.push(v.number_in(2, 9)? as f64),
                "--s" => got.push(v.seconds(60.0)?.as_secs_f64()),
                _ => return Ok(false),
            }
            Ok(true)
        };
        cmd.parse(args("--n 2 --n 9 --s 0.5 --s 60"), &mut own)
            .unwrap();
        for (bad, why) in [
            ("--n 1", "--n: 2..9"),
            ("--n 10", "--n: 2..9"),
            ("--n x", "--n: 2..9"),
            ("--s 0", "--s: seconds in (0, 60]"),
            ("--s 61", "--s: seconds in (0, 60]"),
            ("--s -1", "--s: seconds in (0, 60]"),
        ] {
            assert_eq!(
                cmd.parse(args(bad), &mut own).unwrap_err(),
                Stop::Bad(why.into())
            );
        }
        assert_eq!(got, [2.0, 9.0, 0.5, 60.0]);
    }
}
