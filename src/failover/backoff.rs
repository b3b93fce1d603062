//! F6: the jittered exponential backoff, as one small value type.
//!
//! `next_delay()` hands out the delays of one call and returns `None` once `max_retries` sleeps
//! were taken (F7: every sleep consumes one retry). Jitter is "equal jitter": half the nominal
//! delay is kept, the other half is drawn at random, so a crowd of clients spreads out while no
//! client ever retries much faster than the nominal schedule.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::env::{env_value, BadEnv, EnvKind};
use super::log::warn_bad_env;
use crate::error::Error;

/// The retry knobs of one context (`xce_retry_config_t`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryConfig {
    /// Sleeps allowed per call (F7).
    pub max_retries: u32,
    /// First nominal delay.
    pub initial_retry_ms: u32,
    /// Cap of the nominal delay.
    pub max_retry_ms: u32,
    /// Growth of the nominal delay per sleep (>= 1.0).
    pub backoff_multiplier: f64,
}

/// `XCE_RETRY_DEFAULTS` (F6).
pub const XCE_RETRY_DEFAULTS: RetryConfig = RetryConfig {
    max_retries: DEFAULT_MAX_RETRIES,
    initial_retry_ms: DEFAULT_INITIAL_RETRY_MS,
    max_retry_ms: DEFAULT_MAX_RETRY_MS,
    backoff_multiplier: DEFAULT_BACKOFF_MULTIPLIER,
};
pub const DEFAULT_MAX_RETRIES: u32 = 20;
pub const DEFAULT_INITIAL_RETRY_MS: u32 = 50;
pub const DEFAULT_MAX_RETRY_MS: u32 = 5000;
pub const DEFAULT_BACKOFF_MULTIPLIER: f64 = 2.0;

/// Largest multiplier accepted: beyond it the schedule is the cap after one step anyway.
const MAX_BACKOFF_MULTIPLIER: f64 = 1000.0;

impl Default for RetryConfig {
    fn default() -> Self {
        XCE_RETRY_DEFAULTS
    }
}

impl RetryConfig {
    /// Rejects a configuration that could spin or never grow: zero initial delay, a cap below
    /// the initial delay, a multiplier below 1 or not finite (`-EINVAL` at the C boundary).
    pub fn validate(&self) -> Result<(), Error> {
        let m = self.backoff_multiplier;
        if self.initial_retry_ms == 0
            || self.max_retry_ms < self.initial_retry_ms
            || !m.is_finite()
            || !(1.0..=MAX_BACKOFF_MULTIPLIER).contains(&m)
        {
            return Err(Error::Errno(libc::EINVAL));
        }
        Ok(())
    }

    /// The defaults overridden by `XCE_MAX_RETRIES`, `XCE_INITIAL_RETRY_MS`, `XCE_MAX_RETRY_MS`,
    /// `XCE_BACKOFF_MULTIPLIER` (F15). Read by every `xcecli_start`, so they apply to every
    /// context of the process until `xcecli_set_retry_config` replaces them. Values that
    /// cannot be used (unparsable, or together an invalid config) keep the defaults and are
    /// logged at WARN once per process.
    pub fn with_env_overrides(self) -> RetryConfig {
        let (c, bad) = self.checked_overrides_from(|k| std::env::var(k).ok());
        warn_bad_env(&bad);
        c
    }

    #[cfg(test)]
    pub(crate) fn with_overrides_from(self, get: impl Fn(&str) -> Option<String>) -> RetryConfig {
        self.checked_overrides_from(get).0
    }

    /// The overrides, and the variables whose values were not used.
    pub(crate) fn checked_overrides_from(
        self,
        get: impl Fn(&str) -> Option<String>,
    ) -> (RetryConfig, Vec<BadEnv>) {
        let mut c = self;
        let mut bad = Vec::new();
        let mut used = Vec::new();
        let mut num = |name: &'static str, kind: EnvKind| {
            let v = env_value(&get, name)?;
            match kind.parse(&v) {
                Ok(n) => {
                    used.push((name, v));
                    Some(n)
                }
                Err(why) => {
                    bad.push(BadEnv::new(name, v, why));
                    None
                }
            }
        };
        if let Some(v) = num("XCE_MAX_RETRIES", EnvKind::Count) {
            c.max_retries = v;
        }
        if let Some(v) = num("XCE_INITIAL_RETRY_MS", EnvKind::Millis) {
            c.initial_retry_ms = v;
        }
        if let Some(v) = num("XCE_MAX_RETRY_MS", EnvKind::Millis) {
            c.max_retry_ms = v;
        }
        if let Some(v) = env_value(&get, "XCE_BACKOFF_MULTIPLIER") {
            match v.trim().parse::<f64>() {
                Ok(m) => {
                    c.backoff_multiplier = m;
                    used.push(("XCE_BACKOFF_MULTIPLIER", v));
                }
                Err(_) => bad.push(BadEnv::new("XCE_BACKOFF_MULTIPLIER", v, "not a number")),
            }
        }
        if c.validate().is_ok() {
            (c, bad)
        } else {
            // Parsable, but together not a usable schedule: none of them applies.
            bad.extend(used.into_iter().map(|(name, v)| {
                BadEnv::new(
                    name,
                    v,
                    "gives an invalid retry config (need initial > 0, max >= initial, multiplier 1..=1000)",
                )
            }));
            (self, bad)
        }
    }
}

/// The backoff schedule of one call.
#[derive(Debug, Clone)]
pub struct Backoff {
    config: RetryConfig,
    /// Nominal delay of the next sleep, in ms (before jitter).
    nominal_ms: f64,
    sleeps_taken: u32,
    /// Seeded from the OS on first use: a call that succeeds at once never pays for it (P2).
    rng: Option<StdRng>,
}

impl Backoff {
    /// A schedule seeded from the OS: every client jitters differently.
    pub fn new(config: RetryConfig) -> Backoff {
        Backoff::with_rng(config, None)
    }

    /// A reproducible schedule, for tests.
    #[cfg(test)]
    pub fn seeded(config: RetryConfig, seed: u64) -> Backoff {
        Backoff::with_rng(config, Some(StdRng::seed_from_u64(seed)))
    }

    fn with_rng(config: RetryConfig, rng: Option<StdRng>) -> Backoff {
        let config = if config.validate().is_ok() {
            config
        } else {
            XCE_RETRY_DEFAULTS
        };
        Backoff {
            config,
            nominal_ms: f64::from(config.initial_retry_ms),
            sleeps_taken: 0,
            rng,
        }
    }

    /// The next sleep, or `None` when the call's `max_retries` sleeps are spent (F7).
    pub fn next_delay(&mut self) -> Option<Duration> {
        if self.sleeps_taken >= self.config.max_retries {
            return None;
        }
        self.sleeps_taken += 1;
        let nominal = self.nominal_ms.min(f64::from(self.config.max_retry_ms));
        self.nominal_ms =
            (nominal * self.config.backoff_multiplier).min(f64::from(self.config.max_retry_ms));
        // Equal jitter: [nominal/2, nominal]; at least 1 ms so a full cycle never spins.
        let half = nominal / 2.0;
        let ms = half + self.rng().gen_range(0.0..=half);
        Some(Duration::from_secs_f64(ms.max(1.0) / 1000.0))
    }

    /// A small random spread (0..=max) used before following a primary announced by
    /// `waitPrimary` (F18), so a crowd of clients does not arrive in the same millisecond.
    pub fn spread(&mut self, max: Duration) -> Duration {
        Duration::from_micros(self.rng().gen_range(0..=max.as_micros() as u64))
    }

    fn rng(&mut self) -> &mut StdRng {
        self.rng.get_or_insert_with(StdRng::from_entropy)
    }

    /// Sleeps taken so far.
    #[cfg(test)]
    pub fn sleeps_taken(&self) -> u32 {
        self.sleeps_taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1000.0
    }

    /// The defaults with one change.
    fn with(change: fn(&mut RetryConfig)) -> RetryConfig {
        let mut c = XCE_RETRY_DEFAULTS;
        change(&mut c);
        c
    }

    #[test]
    fn defaults_are_the_spec_values() {
        assert_eq!(
            (
                XCE_RETRY_DEFAULTS.max_retries,
                XCE_RETRY_DEFAULTS.initial_retry_ms,
                XCE_RETRY_DEFAULTS.max_retry_ms
            ),
            (20, 50, 5000)
        );
        assert_eq!(XCE_RETRY_DEFAULTS.backoff_multiplier, 2.0);
        assert_eq!(RetryConfig::default(), XCE_RETRY_DEFAULTS);
        assert!(XCE_RETRY_DEFAULTS.validate().is_ok());
    }

    #[test]
    fn grows_then_caps_then_stops() {
        let mut b = Backoff::seeded(XCE_RETRY_DEFAULTS, 7);
        let nominal = [
            50.0, 100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0, 5000.0, 5000.0,
        ];
        for (i, n) in nominal.iter().enumerate() {
            let d = ms(b.next_delay().unwrap());
            assert!(
                d >= n / 2.0 - 1e-6 && d <= n + 1e-6,
                "sleep {i}: {d} ms not in [{}, {n}]",
                n / 2.0
            );
        }
        for _ in nominal.len()..20 {
            let d = ms(b.next_delay().unwrap());
            assert!((2500.0..=5000.0).contains(&d), "capped sleep {d}");
        }
        assert_eq!(b.sleeps_taken(), 20);
        assert_eq!(b.next_delay(), None);
        assert_eq!(b.next_delay(), None, "stays spent");
    }

    #[test]
    fn zero_retries_means_no_sleep_at_all() {
        let mut b = Backoff::seeded(with(|c| c.max_retries = 0), 1);
        assert_eq!(b.next_delay(), None);
    }

    #[test]
    fn jitter_spreads_across_seeds() {
        // 64 clients starting together: their first sleeps must not be in lock step.
        let firsts: Vec<f64> = (0..64)
            .map(|seed| {
                ms(Backoff::seeded(XCE_RETRY_DEFAULTS, seed)
                    .next_delay()
                    .unwrap())
            })
            .collect();
        let min = firsts.iter().cloned().fold(f64::MAX, f64::min);
        let max = firsts.iter().cloned().fold(f64::MIN, f64::max);
        assert!(min >= 25.0 && max <= 50.0, "range [{min}, {max}]");
        assert!(max - min > 15.0, "spread only {} ms", max - min);
        let mut distinct: Vec<u64> = firsts.iter().map(|d| (d * 10.0) as u64).collect();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(
            distinct.len() > 48,
            "only {} distinct delays of 64",
            distinct.len()
        );
        // Same spread at the cap.
        let capped: Vec<f64> = (0..64)
            .map(|seed| {
                let mut b = Backoff::seeded(XCE_RETRY_DEFAULTS, seed);
                (0..9).map(|_| ms(b.next_delay().unwrap())).last().unwrap()
            })
            .collect();
        let spread = capped.iter().cloned().fold(f64::MIN, f64::max)
            - capped.iter().cloned().fold(f64::MAX, f64::min);
        assert!(spread > 1500.0, "capped spread {spread}");
    }

    #[test]
    fn same_seed_same_schedule() {
        let mut a = Backoff::seeded(XCE_RETRY_DEFAULTS, 42);
        let mut b = Backoff::seeded(XCE_RETRY_DEFAULTS, 42);
        for _ in 0..20 {
            assert_eq!(a.next_delay(), b.next_delay());
        }
    }

    #[test]
    fn invalid_configs_are_rejected_and_never_spin() {
        let bad = [
            with(|c| c.initial_retry_ms = 0),
            with(|c| c.max_retry_ms = 10),
            with(|c| c.backoff_multiplier = 0.5),
            with(|c| c.backoff_multiplier = f64::NAN),
            with(|c| c.backoff_multiplier = f64::INFINITY),
        ];
        for c in bad {
            assert_eq!(c.validate(), Err(Error::Errno(libc::EINVAL)), "{c:?}");
            // A schedule built from it anyway falls back to the defaults.
            assert!(ms(Backoff::seeded(c, 3).next_delay().unwrap()) >= 25.0);
        }
        let flat = RetryConfig {
            max_retries: 3,
            initial_retry_ms: 1,
            max_retry_ms: 1,
            backoff_multiplier: 1.0,
        };
        let mut b = Backoff::seeded(flat, 0);
        for _ in 0..3 {
            assert!(ms(b.next_delay().unwrap()) >= 1.0, "at least 1 ms");
        }
    }

    #[test]
    fn env_overrides() {
        let env = |k: &str| match k {
            "XCE_MAX_RETRIES" => Some("3".to_string()),
            "XCE_INITIAL_RETRY_MS" => Some(" 10 ".to_string()),
            "XCE_BACKOFF_MULTIPLIER" => Some("1.5".to_string()),
            _ => None,
        };
        let c = XCE_RETRY_DEFAULTS.with_overrides_from(env);
        assert_eq!(
            c,
            RetryConfig {
                max_retries: 3,
                initial_retry_ms: 10,
                max_retry_ms: 5000,
                backoff_multiplier: 1.5
            }
        );
        let bad = |k: &str| (k == "XCE_BACKOFF_MULTIPLIER").then(|| "0.1".to_string());
        assert_eq!(
            XCE_RETRY_DEFAULTS.with_overrides_from(bad),
            XCE_RETRY_DEFAULTS
        );
        // Every variable that was not used is named, with why.
        let env = |k: &str| match k {
            "XCE_MAX_RETRIES" => Some("three".to_string()),
            "XCE_INITIAL_RETRY_MS" => Some("100".to_string()),
            "XCE_MAX_RETRY_MS" => Some("10".to_string()), // below the initial delay
            _ => None,
        };
        let (c, bad) = XCE_RETRY_DEFAULTS.checked_overrides_from(env);
        assert_eq!(c, XCE_RETRY_DEFAULTS);
        let names: Vec<_> = bad.iter().map(|b| b.name).collect();
        assert_eq!(
            names,
            [
                "XCE_MAX_RETRIES",
                "XCE_INITIAL_RETRY_MS",
                "XCE_MAX_RETRY_MS"
            ]
        );
    }
}
