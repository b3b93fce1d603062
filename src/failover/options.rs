//! F8, F15: the per-context knobs besides the retry config, with their documented defaults.

use std::time::Duration;

use super::env::{env_value, BadEnv, EnvKind};
use super::log::warn_bad_env;
use super::rotate::HintPolicy;

/// Connect timeout of one attempt (F8).
pub const DEFAULT_CONNECT_TIMEOUT_MS: u32 = 1000;
/// Reply timeout of one attempt: a silent primary is a transport failure after this (F8).
pub const DEFAULT_REPLY_TIMEOUT_MS: u32 = 2000;
/// Ask a reachable standby to announce the new primary while backing off (F18).
pub const DEFAULT_WAIT_PRIMARY: bool = true;
/// Ask another controller whether the primary changed when a reply is late (F25).
pub const DEFAULT_SUSPICION: bool = true;
/// Learn the cluster's members from the primary and add them to the rotation (F29).
pub const DEFAULT_LEARN_MASTERS: bool = true;
/// Ask a reachable standby to forward a request when the primary itself is unreachable (F28).
pub const DEFAULT_FORWARD: bool = true;
/// Least spread applied before following a primary announced by `waitPrimary` (F18).
pub const WAIT_PRIMARY_SPREAD: Duration = Duration::from_millis(5);
/// Spread per client the announcing controller was holding: 1000 waiters spread over 100 ms,
/// so no 10 ms window sees more than about a tenth of them (P6).
pub const HERD_SPREAD_PER_WAITER: Duration = Duration::from_micros(100);
/// Most spread, whatever the crowd.
pub const MAX_HERD_SPREAD: Duration = Duration::from_millis(200);

/// One knob, as set through `xcecli_set_option` (F15).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientOption {
    /// ms, > 0.
    ConnectTimeoutMs(u32),
    /// ms, > 0.
    ReplyTimeoutMs(u32),
    /// ms; 0 = no overall deadline.
    CallDeadlineMs(u32),
    /// Follow redirect hints to hosts outside the master list.
    RedirectAnyHost(bool),
    /// Use `waitPrimary` while backing off (F18).
    WaitPrimary(bool),
    /// Suspect a late reply: ask another controller whether the primary changed (F25).
    Suspicion(bool),
    /// Learn the cluster's members from the primary (F29).
    LearnMasters(bool),
    /// Ask a reachable standby to forward requests the primary could not be reached for (F28).
    Forward(bool),
}

/// The knobs of one context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub connect_timeout: Duration,
    pub reply_timeout: Duration,
    /// `None`: no overall deadline per call.
    pub call_deadline: Option<Duration>,
    pub hint_policy: HintPolicy,
    pub wait_primary: bool,
    pub suspicion: bool,
    /// F29: after each new connection, one `hello` asks whether it reaches the primary and
    /// which members the cluster has; members it reports are added to the rotation, and a
    /// standby's hint to a member it holds is followed (`retry/vouch.rs`). Off, no `hello` is
    /// sent for it and no hint to an unconfigured node is vouched for: the configured masters
    /// only (the scripted fakes of the tests turn it off).
    /// `XCE_OPT_LEARN_MASTERS`, `XCE_LEARN_MASTERS`.
    pub learn_masters: bool,
    /// F28: once a call failed to reach a master directly (connect refused or timed out, a
    /// connect raced past a silent master, a reply timed out or suspected late), its next
    /// requests ask a standby to forward them to the primary (`forwardWithinMs`), and so do
    /// later calls on that connection. Off: today's behaviour (hint, rotation, backoff).
    /// `XCE_OPT_FORWARD`, `XCE_FORWARD`.
    pub forward: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            connect_timeout: ms(DEFAULT_CONNECT_TIMEOUT_MS),
            reply_timeout: ms(DEFAULT_REPLY_TIMEOUT_MS),
            call_deadline: None,
            hint_policy: HintPolicy::ConfiguredOnly,
            wait_primary: DEFAULT_WAIT_PRIMARY,
            suspicion: DEFAULT_SUSPICION,
            learn_masters: DEFAULT_LEARN_MASTERS,
            forward: DEFAULT_FORWARD,
        }
    }
}

fn ms(v: u32) -> Duration {
    Duration::from_millis(u64::from(v))
}

impl Options {
    /// Applies one knob; a zero timeout is invalid (`EINVAL`).
    pub fn apply(&mut self, opt: ClientOption) -> Result<(), crate::Error> {
        let einval = Err(crate::Error::Errno(libc::EINVAL));
        match opt {
            ClientOption::ConnectTimeoutMs(0) | ClientOption::ReplyTimeoutMs(0) => return einval,
            ClientOption::ConnectTimeoutMs(v) => self.connect_timeout = ms(v),
            ClientOption::ReplyTimeoutMs(v) => self.reply_timeout = ms(v),
            ClientOption::CallDeadlineMs(0) => self.call_deadline = None,
            ClientOption::CallDeadlineMs(v) => self.call_deadline = Some(ms(v)),
            ClientOption::RedirectAnyHost(any) => {
                self.hint_policy = if any {
                    HintPolicy::AnyHost
                } else {
                    HintPolicy::ConfiguredOnly
                }
            }
            ClientOption::WaitPrimary(on) => self.wait_primary = on,
            ClientOption::Suspicion(on) => self.suspicion = on,
            ClientOption::LearnMasters(on) => self.learn_masters = on,
            ClientOption::Forward(on) => self.forward = on,
        }
        Ok(())
    }

    /// These options overridden by `XCE_CONNECT_TIMEOUT_MS`, `XCE_REPLY_TIMEOUT_MS`,
    /// `XCE_CALL_DEADLINE_MS`, `XCE_REDIRECT_ANY_HOST` (0/1), `XCE_WAIT_PRIMARY` (0/1) — F15.
    /// Read by every `xcecli_start`, so they apply to every context of the process until
    /// `xcecli_set_option` changes one. A value that cannot be used keeps the default and is
    /// logged at WARN once per process (`warn_bad_env`).
    pub fn with_env_overrides(self) -> Options {
        let (o, bad) = self.checked_overrides_from(|k| std::env::var(k).ok());
        warn_bad_env(&bad);
        o
    }

    #[cfg(test)]
    pub(crate) fn with_overrides_from(self, get: impl Fn(&str) -> Option<String>) -> Options {
        self.checked_overrides_from(get).0
    }

    /// The overrides, and the variables whose values were not used.
    pub(crate) fn checked_overrides_from(
        self,
        get: impl Fn(&str) -> Option<String>,
    ) -> (Options, Vec<BadEnv>) {
        let mut o = self;
        let mut bad = Vec::new();
        let mut set = |name: &'static str, kind: EnvKind, make: fn(u32) -> ClientOption| {
            let Some(v) = env_value(&get, name) else {
                return;
            };
            match kind.parse(&v) {
                Ok(n) if o.apply(make(n)).is_ok() => {}
                Ok(_) => bad.push(BadEnv::new(name, v, "must be greater than 0")),
                Err(why) => bad.push(BadEnv::new(name, v, why)),
            }
        };
        set(
            "XCE_CONNECT_TIMEOUT_MS",
            EnvKind::Millis,
            ClientOption::ConnectTimeoutMs,
        );
        set(
            "XCE_REPLY_TIMEOUT_MS",
            EnvKind::Millis,
            ClientOption::ReplyTimeoutMs,
        );
        set(
            "XCE_CALL_DEADLINE_MS",
            EnvKind::Millis,
            ClientOption::CallDeadlineMs,
        );
        set("XCE_REDIRECT_ANY_HOST", EnvKind::Flag, |v| {
            ClientOption::RedirectAnyHost(v != 0)
        });
        set("XCE_WAIT_PRIMARY", EnvKind::Flag, |v| {
            ClientOption::WaitPrimary(v != 0)
        });
        set("XCE_SUSPICION", EnvKind::Flag, |v| {
            ClientOption::Suspicion(v != 0)
        });
        set("XCE_LEARN_MASTERS", EnvKind::Flag, |v| {
            ClientOption::LearnMasters(v != 0)
        });
        set("XCE_FORWARD", EnvKind::Flag, |v| {
            ClientOption::Forward(v != 0)
        });
        (o, bad)
    }
}

/// Every environment variable the library reads (F15, F14). docs/c-api.md has the table of
/// their defaults and precedence; a test keeps the two in step.
pub const ENV_VARS: [&str; 19] = [
    "XCE_LOG",
    "XCE_CONNECT_TIMEOUT_MS",
    "XCE_REPLY_TIMEOUT_MS",
    "XCE_CALL_DEADLINE_MS",
    "XCE_REDIRECT_ANY_HOST",
    "XCE_WAIT_PRIMARY",
    "XCE_SUSPICION",
    "XCE_LEARN_MASTERS",
    "XCE_FORWARD",
    "XCE_LIST_PAGE_BYTES",
    "XCE_MAX_RETRIES",
    "XCE_INITIAL_RETRY_MS",
    "XCE_MAX_RETRY_MS",
    "XCE_BACKOFF_MULTIPLIER",
    "XCE_AUTH_TOKEN",
    "XCE_AUTH_TOKEN_FILE",
    "XCE_TLS_CA_FILE",
    "XCE_TLS_CERT_FILE",
    "XCE_TLS_KEY_FILE",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_setters() {
        let mut o = Options::default();
        assert_eq!(o.connect_timeout, Duration::from_secs(1));
        assert_eq!(o.reply_timeout, Duration::from_secs(2));
        assert_eq!(o.call_deadline, None);
        assert!(o.wait_primary);
        assert_eq!(
            o.apply(ClientOption::ReplyTimeoutMs(0)),
            Err(crate::Error::Errno(libc::EINVAL))
        );
        o.apply(ClientOption::CallDeadlineMs(300)).unwrap();
        assert_eq!(o.call_deadline, Some(Duration::from_millis(300)));
        o.apply(ClientOption::CallDeadlineMs(0)).unwrap();
        assert_eq!(o.call_deadline, None);
        o.apply(ClientOption::RedirectAnyHost(true)).unwrap();
        assert_eq!(o.hint_policy, HintPolicy::AnyHost);
    }

    #[test]
    fn env_overrides() {
        let env = |k: &str| match k {
            "XCE_CONNECT_TIMEOUT_MS" => Some("250".to_string()),
            "XCE_REPLY_TIMEOUT_MS" => Some("0".to_string()), // invalid: ignored
            "XCE_WAIT_PRIMARY" => Some("0".to_string()),
            "XCE_LEARN_MASTERS" => Some("0".to_string()),
            _ => None,
        };
        assert!(Options::default().learn_masters);
        let o = Options::default().with_overrides_from(env);
        assert_eq!(o.connect_timeout, Duration::from_millis(250));
        assert_eq!(o.reply_timeout, Duration::from_secs(2));
        assert!(!o.wait_primary);
        assert!(!o.learn_masters);
    }

    #[test]
    fn bad_env_values_are_named_and_keep_the_default() {
        let env = |k: &str| match k {
            "XCE_CONNECT_TIMEOUT_MS" => Some("1s".to_string()),
            "XCE_REPLY_TIMEOUT_MS" => Some("0".to_string()),
            "XCE_CALL_DEADLINE_MS" => Some("".to_string()), // empty: unset, no complaint
            "XCE_REDIRECT_ANY_HOST" => Some("yes".to_string()),
            "XCE_WAIT_PRIMARY" => Some(" 0 ".to_string()),
            _ => None,
        };
        let (o, bad) = Options::default().checked_overrides_from(env);
        assert_eq!(o.connect_timeout, Duration::from_secs(1));
        assert_eq!(o.reply_timeout, Duration::from_secs(2));
        assert_eq!(o.hint_policy, HintPolicy::ConfiguredOnly);
        assert!(!o.wait_primary);
        let names: Vec<_> = bad.iter().map(|b| (b.name, b.value.as_str())).collect();
        assert_eq!(
            names,
            [
                ("XCE_CONNECT_TIMEOUT_MS", "1s"),
                ("XCE_REPLY_TIMEOUT_MS", "0"),
                ("XCE_REDIRECT_ANY_HOST", "yes")
            ]
        );
        assert_eq!(EnvKind::Flag.parse("2"), Err("must be 0 or 1"));
    }
}
