//! F8, F15: the per-context knobs besides the retry config, with their documented defaults.

use std::time::Duration;

use super::rotate::HintPolicy;

/// Connect timeout of one attempt (F8).
pub const DEFAULT_CONNECT_TIMEOUT_MS: u32 = 1000;
/// Reply timeout of one attempt: a silent primary is a transport failure after this (F8).
pub const DEFAULT_REPLY_TIMEOUT_MS: u32 = 2000;
/// Overall deadline per call; 0 = none (the retry budget alone bounds the call, F7).
pub const DEFAULT_CALL_DEADLINE_MS: u32 = 0;
/// Ask a reachable standby to announce the new primary while backing off (F18).
pub const DEFAULT_WAIT_PRIMARY: bool = true;
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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            connect_timeout: ms(DEFAULT_CONNECT_TIMEOUT_MS),
            reply_timeout: ms(DEFAULT_REPLY_TIMEOUT_MS),
            call_deadline: None,
            hint_policy: HintPolicy::ConfiguredOnly,
            wait_primary: DEFAULT_WAIT_PRIMARY,
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
        }
        Ok(())
    }

    /// These options overridden by `XCE_CONNECT_TIMEOUT_MS`, `XCE_REPLY_TIMEOUT_MS`,
    /// `XCE_CALL_DEADLINE_MS`, `XCE_REDIRECT_ANY_HOST` (0/1), `XCE_WAIT_PRIMARY` (0/1) — F15, for
    /// tools. Unparsable or invalid values are ignored.
    pub fn with_env_overrides(self) -> Options {
        self.with_overrides_from(|k| std::env::var(k).ok())
    }

    pub(crate) fn with_overrides_from(self, get: impl Fn(&str) -> Option<String>) -> Options {
        let mut o = self;
        let num = |k: &str| get(k).and_then(|v| v.trim().parse::<u32>().ok());
        let flag = |k: &str| num(k).map(|v| v != 0);
        let knobs = [
            num("XCE_CONNECT_TIMEOUT_MS").map(ClientOption::ConnectTimeoutMs),
            num("XCE_REPLY_TIMEOUT_MS").map(ClientOption::ReplyTimeoutMs),
            num("XCE_CALL_DEADLINE_MS").map(ClientOption::CallDeadlineMs),
            flag("XCE_REDIRECT_ANY_HOST").map(ClientOption::RedirectAnyHost),
            flag("XCE_WAIT_PRIMARY").map(ClientOption::WaitPrimary),
        ];
        for k in knobs.into_iter().flatten() {
            let _ = o.apply(k);
        }
        o
    }
}

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
            _ => None,
        };
        let o = Options::default().with_overrides_from(env);
        assert_eq!(o.connect_timeout, Duration::from_millis(250));
        assert_eq!(o.reply_timeout, Duration::from_secs(2));
        assert!(!o.wait_primary);
    }
}
