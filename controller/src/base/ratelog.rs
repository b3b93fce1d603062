//! Log lines that a stranger can cause once per connection (a refused or timed-out
//! handshake, a connection evicted or over a limit), rate-limited with a count (issue 27): a
//! flood of 1,000 connections must not write 1,000 lines. The first line of a kind is written
//! at once; then at most one per [`INTERVAL`], saying how many like it were held back since
//! the last one written; [`RateLog::flush`] (every [`INTERVAL`], from a task of the port)
//! writes the count of those still held back, so none goes unreported.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one line per kind per this.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// Rate-limited lines, by kind.
pub struct RateLog {
    kinds: Mutex<BTreeMap<&'static str, Kind>>,
}

#[derive(Clone, Copy)]
struct Kind {
    /// When the last line of the kind was written.
    last: Instant,
    /// Lines held back since.
    held: u64,
}

impl Default for RateLog {
    fn default() -> RateLog {
        RateLog::new()
    }
}

impl RateLog {
    pub const fn new() -> RateLog {
        RateLog {
            kinds: Mutex::new(BTreeMap::new()),
        }
    }

    /// The line to write for one event of `kind` at `now` (`None`: held back and counted).
    pub fn line(
        &self,
        kind: &'static str,
        now: Instant,
        text: impl FnOnce() -> String,
    ) -> Option<String> {
        let mut kinds = self.kinds.lock().expect("ratelog");
        match kinds.get_mut(kind) {
            Some(k) if now.saturating_duration_since(k.last) < INTERVAL => {
                k.held += 1;
                None
            }
            Some(k) => {
                let held = std::mem::take(&mut k.held);
                let since = now.saturating_duration_since(k.last);
                k.last = now;
                Some(if held == 0 {
                    text()
                } else {
                    format!(
                        "{} (and {held} more like it in the last {:.1} s)",
                        text(),
                        since.as_secs_f64()
                    )
                })
            }
            None => {
                kinds.insert(kind, Kind { last: now, held: 0 });
                Some(text())
            }
        }
    }

    /// Writes (stderr) the line for one event of `kind`, or counts it.
    pub fn note(&self, kind: &'static str, text: impl FnOnce() -> String) {
        if let Some(l) = self.line(kind, Instant::now(), text) {
            eprintln!("{l}");
        }
    }

    /// The counts held back for longer than [`INTERVAL`], one line per kind, `prefix` first
    /// (the node); those kinds start afresh.
    pub fn flush_lines(&self, prefix: &str, now: Instant) -> Vec<String> {
        let mut kinds = self.kinds.lock().expect("ratelog");
        let mut out = Vec::new();
        for (kind, k) in kinds.iter_mut() {
            let since = now.saturating_duration_since(k.last);
            if k.held > 0 && since >= INTERVAL {
                out.push(format!(
                    "{prefix}{} more \"{kind}\" in the last {:.1} s",
                    k.held,
                    since.as_secs_f64()
                ));
                k.held = 0;
                k.last = now;
            }
        }
        // Kinds quiet for a while start afresh: their next line is written at once.
        kinds.retain(|_, k| k.held > 0 || now.saturating_duration_since(k.last) < INTERVAL * 10);
        out
    }

    /// Writes [`RateLog::flush_lines`] to stderr.
    pub fn flush(&self, prefix: &str) {
        for l in self.flush_lines(prefix, Instant::now()) {
            eprintln!("{l}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_kind_per_interval_with_the_count_held_back() {
        let r = RateLog::new();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let text = || "refused".to_string();
        assert_eq!(r.line("a", at(0), text).as_deref(), Some("refused"));
        // Another kind is not held back by the first.
        assert_eq!(
            r.line("b", at(1), || "other".into()).as_deref(),
            Some("other")
        );
        for ms in 1..=999 {
            assert_eq!(r.line("a", at(ms), text), None, "{ms}");
        }
        let l = r.line("a", at(1000), text).unwrap();
        assert_eq!(l, "refused (and 999 more like it in the last 1.0 s)");
        // Held back and then quiet: the flush reports the count, once.
        assert_eq!(r.line("a", at(1500), text), None);
        assert!(r.flush_lines("node 1: ", at(1999)).is_empty(), "not yet");
        assert_eq!(
            r.flush_lines("node 1: ", at(2000)),
            vec!["node 1: 1 more \"a\" in the last 1.0 s".to_string()]
        );
        assert!(r.flush_lines("node 1: ", at(3500)).is_empty());
        // Long quiet: the kind starts afresh.
        r.flush_lines("", at(60_000));
        assert_eq!(r.line("a", at(60_001), text).as_deref(), Some("refused"));
    }
}
