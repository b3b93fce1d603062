//! F14: the library's log lines, through a sink the caller can replace.
//!
//! No global logger crate and nothing installed behind the caller's back (style.md): the state
//! is created lazily on first use, the level is read from `XCE_LOG` at that moment
//! (`error`, `warn`, `info`, `debug`, `off`; default `warn`), and the default sink writes one
//! line to stderr. `set_sink` may be called any number of times (rustls-ffi #22), and is final
//! when it returns (F20): the old sink is not running on another thread and never runs again.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use super::env::BadEnv;
use super::slot::CallbackSlot;

/// Severity of a log line; `Off` as a threshold silences everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Level {
    Off = 0,
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

/// Threshold when `XCE_LOG` is unset or unparsable.
pub const DEFAULT_LOG_LEVEL: Level = Level::Warn;

impl Level {
    /// Parses a level name (case-insensitive).
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => Level::Off,
            "error" => Level::Error,
            "warn" | "warning" => Level::Warn,
            "info" => Level::Info,
            "debug" | "trace" => Level::Debug,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Off => "OFF",
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
            Level::Debug => "DEBUG",
        }
    }

    fn from_u8(v: u8) -> Level {
        match v {
            0 => Level::Off,
            1 => Level::Error,
            2 => Level::Warn,
            3 => Level::Info,
            _ => Level::Debug,
        }
    }
}

/// What a log sink is: it receives the level and one formatted line (no trailing newline).
pub type SinkFn = dyn Fn(Level, &str) + Send + Sync;
/// A log sink.
pub type LogSink = Arc<SinkFn>;

struct LogState {
    level: AtomicU8,
    sink: CallbackSlot<SinkFn>,
}

fn state() -> &'static LogState {
    static STATE: OnceLock<LogState> = OnceLock::new();
    if let Some(s) = STATE.get() {
        return s;
    }
    let mut bad = None;
    let s = STATE.get_or_init(|| {
        let (level, b) = level_from_env(std::env::var("XCE_LOG").ok());
        bad = b;
        LogState {
            level: AtomicU8::new(level as u8),
            sink: CallbackSlot::new(),
        }
    });
    s.sink.register_for_fork();
    // The state must not be half-initialised on another thread at a fork (F26).
    crate::process::fork::before_fork(|| {
        state();
    });
    // Said once, by the thread that read it, after the state exists (logging from inside
    // `get_or_init` would re-enter it).
    if let Some(b) = bad {
        warn_bad_env(&[b]);
    }
    s
}

/// The threshold `XCE_LOG` asks for; an unknown value keeps the default and is reported.
fn level_from_env(v: Option<String>) -> (Level, Option<BadEnv>) {
    match v.filter(|v| !v.trim().is_empty()) {
        None => (DEFAULT_LOG_LEVEL, None),
        Some(v) => match Level::parse(&v) {
            Some(l) => (l, None),
            None => (
                DEFAULT_LOG_LEVEL,
                Some(BadEnv::new(
                    "XCE_LOG",
                    v,
                    "not one of off, error, warn, info, debug",
                )),
            ),
        },
    }
}

/// Replaces the sink; `None` restores the stderr sink. When it returns true, the old sink is
/// not running on another thread and is never called again (a sink may replace itself). False
/// (at once): the new sink is installed, but a thread running the old one waits, directly or
/// not, for this one, so waiting for it would never end ([`crate::process::waits`]).
pub fn set_sink(sink: Option<LogSink>) -> bool {
    state().sink.set(sink)
}

/// Sets the threshold (overrides `XCE_LOG`).
pub fn set_level(level: Level) {
    state().level.store(level as u8, Ordering::Relaxed);
}

pub fn level() -> Level {
    Level::from_u8(state().level.load(Ordering::Relaxed))
}

pub fn enabled(level: Level) -> bool {
    level != Level::Off && level <= self::level()
}

/// Emits one line at `level` if enabled. The sink runs on the calling thread.
pub fn log(level: Level, args: fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let line = fmt::format(args);
    if state().sink.call(|s| s(level, &line)).is_none() {
        eprintln!("libxce {}: {}", level.as_str(), line);
    }
}

macro_rules! xlog {
    ($lvl:expr, $($arg:tt)+) => {
        $crate::failover::log::log($lvl, format_args!($($arg)+))
    };
}
pub(crate) use xlog;

/// Logs each bad value at WARN, once per variable for the life of the process: every
/// `xcecli_start` reads the environment again, and one line says it.
pub(crate) fn warn_bad_env(bad: &[BadEnv]) {
    static WARNED: crate::process::ForkLock<Vec<&'static str>> =
        crate::process::ForkLock::new(Vec::new(), |_| {});
    for b in bad {
        let first = {
            let mut w = WARNED.lock();
            !w.contains(&b.name) && {
                w.push(b.name);
                true
            }
        };
        if first {
            xlog!(
                Level::Warn,
                "ignoring {}={:?}: {}; the default stays in force",
                b.name,
                b.value,
                b.why
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_xce_log_value_is_reported() {
        assert_eq!(level_from_env(None), (DEFAULT_LOG_LEVEL, None));
        assert_eq!(level_from_env(Some("".into())), (DEFAULT_LOG_LEVEL, None));
        assert_eq!(level_from_env(Some("INFO".into())), (Level::Info, None));
        let (l, bad) = level_from_env(Some("verbose".into()));
        assert_eq!(l, DEFAULT_LOG_LEVEL);
        assert_eq!(
            bad.map(|b| (b.name, b.value)),
            Some(("XCE_LOG", "verbose".into()))
        );
    }

    #[test]
    fn parses_levels() {
        assert_eq!(Level::parse("INFO"), Some(Level::Info));
        assert_eq!(Level::parse(" warn "), Some(Level::Warn));
        assert_eq!(Level::parse("off"), Some(Level::Off));
        assert_eq!(Level::parse("loud"), None);
        assert!(Level::Error < Level::Warn && Level::Warn < Level::Info);
    }
    // The sink itself is process-global; it is exercised by tests/log_sink.rs, which owns its
    // process.
}
