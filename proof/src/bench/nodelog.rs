//! What a controller's own log says happened, read back by the benchmarks (P12): its lines are
//! stamped with the wall clock in UTC (`2026-12-05T06:14:04.403Z node 3: …`, the controller's
//! `base/logstamp.rs`), so they can be set beside the bench's own wall-clock times.
//!
//! Only lines every controller build since issue 13 writes are read here — snapshots written
//! and installed, C10's step-downs, campaigns, C12's "caught up" — so a baseline binary is
//! measured by the same reading as this branch's.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, read from a line's stamp (`None`: no stamp).
pub fn stamp_ms(line: &str) -> Option<i64> {
    let s = line.get(..24)?;
    let b = s.as_bytes();
    if b[4] != b'-' || b[10] != b'T' || b[23] != b'Z' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let days = days_from_civil(n(0..4)?, n(5..7)?, n(8..10)?);
    let secs = days * 86_400 + n(11..13)? * 3600 + n(14..16)? * 60 + n(17..19)?;
    Some(secs * 1000 + n(20..23)?)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Node `id`'s log lines, in order (an absent log: none).
pub fn lines(logs: &Path, id: u32) -> Vec<String> {
    std::fs::read_to_string(logs.join(format!("node-{id}.log")))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// Node `id`'s lines stamped within `[from_ms, to_ms]` that contain `what`.
pub fn count_between(logs: &Path, id: u32, what: &str, from_ms: i64, to_ms: i64) -> usize {
    lines(logs, id)
        .iter()
        .filter(|l| l.contains(what))
        .filter_map(|l| stamp_ms(l))
        .filter(|t| (from_ms..=to_ms).contains(t))
        .count()
}

/// A snapshot a node wrote (`built`) or installed from its leader, as its log tells it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SnapshotSpan {
    pub node: u32,
    pub built: bool,
    pub start_ms: i64,
    pub end_ms: i64,
}

/// The `… in N ms` at the end of a line.
fn took_ms(line: &str) -> Option<i64> {
    let rest = line.rsplit_once(" in ")?.1;
    rest.strip_suffix(" ms")?.trim().parse().ok()
}

/// Every snapshot written or installed by node `id` that ended within `[from_ms, to_ms]`.
pub fn snapshots(logs: &Path, id: u32, from_ms: i64, to_ms: i64) -> Vec<SnapshotSpan> {
    lines(logs, id)
        .iter()
        .filter_map(|l| {
            let built = l.contains(": wrote snapshot ");
            if !built && !l.contains(": installed snapshot ") {
                return None;
            }
            let end_ms = stamp_ms(l)?;
            let start_ms = end_ms - took_ms(l)?;
            Some(SnapshotSpan {
                node: id,
                built,
                start_ms,
                end_ms,
            })
        })
        .filter(|s| (from_ms..=to_ms).contains(&s.end_ms))
        .collect()
}

/// Whether `[a0, a1]` meets any span widened by `after_ms` past its end (sorted by start).
pub fn meets_any(spans: &[SnapshotSpan], a0: i64, a1: i64, after_ms: i64) -> bool {
    spans
        .iter()
        .any(|s| a0 <= s.end_ms + after_ms && s.start_ms <= a1)
}

/// `t` as the node logs stamp their lines: `2026-12-03T11:55:18.303Z` (UTC).
pub fn utc(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (days, rem) = (d.as_secs() / 86_400, d.as_secs() % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's `civil_from_days`).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_and_spans_are_read() {
        let l = "2026-12-05T06:14:04.403Z node 3: wrote snapshot T2-N1-24972-1796451243852 (50933613 bytes) in 547 ms";
        let t = stamp_ms(l).unwrap();
        // 2026-12-05T06:14:04.403Z, from `date -u -d … +%s%3N`.
        assert_eq!(t, 1_796_451_244_403);
        assert_eq!(took_ms(l), Some(547));
        assert_eq!(stamp_ms("node 1: no stamp"), None);
        assert_eq!(stamp_ms("1970-01-01T00:00:00.001Z x"), Some(1));
        assert_eq!(
            stamp_ms("2000-03-01T00:00:00.000Z x"),
            Some(951_868_800_000)
        );
        let s = SnapshotSpan {
            node: 1,
            built: true,
            start_ms: 100,
            end_ms: 200,
        };
        assert!(meets_any(&[s], 50, 100, 0));
        assert!(meets_any(&[s], 250, 300, 50));
        assert!(!meets_any(&[s], 251, 300, 50));
        assert!(!meets_any(&[s], 10, 99, 1000));
    }

    #[test]
    fn utc_stamps_as_the_node_logs_do() {
        let at = |s: u64, ms: u64| UNIX_EPOCH + std::time::Duration::from_millis(s * 1000 + ms);
        assert_eq!(utc(at(0, 0)), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century leap year) 23:59:59.999.
        assert_eq!(utc(at(951_868_799, 999)), "2000-02-29T23:59:59.999Z");
        assert_eq!(utc(at(1_796_298_918, 303)), "2026-12-03T11:55:18.303Z");
        // What the bench writes, it reads back.
        assert_eq!(
            stamp_ms(&utc(at(1_796_298_918, 303))),
            Some(1_796_298_918_303)
        );
    }
}
