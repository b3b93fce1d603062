//! F15: reading the `XCE_*` variables — a value, how a number is spelled, a value the library
//! did not use (`log::warn_bad_env` says so, once). A leaf: the options, the retry config, the
//! log level and the client's TLS and token settings all read through it.

/// A value of an `XCE_*` variable the library did not use (the default stays in force).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadEnv {
    pub name: &'static str,
    pub value: String,
    pub why: &'static str,
}

impl BadEnv {
    pub(crate) fn new(name: &'static str, value: String, why: &'static str) -> BadEnv {
        BadEnv { name, value, why }
    }
}

/// How an `XCE_*` number is spelled.
#[derive(Debug, Clone, Copy)]
pub(crate) enum EnvKind {
    /// A whole number of milliseconds.
    Millis,
    /// A whole number (a count).
    Count,
    /// `0` or `1`.
    Flag,
}

impl EnvKind {
    pub(crate) fn parse(self, v: &str) -> Result<u32, &'static str> {
        let n = v.trim().parse::<u32>();
        match (self, n) {
            (EnvKind::Flag, Ok(n @ (0 | 1))) => Ok(n),
            (EnvKind::Flag, _) => Err("must be 0 or 1"),
            (_, Ok(n)) => Ok(n),
            (EnvKind::Millis, Err(_)) => Err("not a whole number of milliseconds"),
            (EnvKind::Count, Err(_)) => Err("not a whole number"),
        }
    }
}

/// The variable's value; unset or empty (`XCE_X=`) both mean "not set".
pub(crate) fn env_value(get: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    get(name).filter(|v| !v.trim().is_empty())
}
