//! P17: cost as the work grows — P12's figures for one build against the table size, each
//! with how it grows (the exponent k of `figure ∝ jobs^k` between the smallest and the largest
//! table measured: flat, sub-linear, linear or worse) and what it should be, and why.

use super::p12_job_table::Row;
use super::table::{Table, Verdict};
use super::Summary;

/// How a figure grows with the table: `k` of `f ∝ n^k` between two sizes.
pub fn exponent(n0: u64, f0: f64, n1: u64, f1: f64) -> Option<f64> {
    if n0 == n1 || f0 <= 0.0 || f1 <= 0.0 || !f0.is_finite() || !f1.is_finite() {
        return None;
    }
    Some((f1 / f0).ln() / (n1 as f64 / n0 as f64).ln())
}

/// The word for an exponent.
pub fn shape(k: f64) -> &'static str {
    if k < 0.25 {
        "flat"
    } else if k < 0.75 {
        "sub-linear"
    } else if k < 1.25 {
        "linear"
    } else {
        "worse than linear"
    }
}

/// One figure of a row, its unit, what it should be, and why.
struct Figure {
    name: &'static str,
    read: fn(&Row) -> Option<f64>,
    /// The largest exponent that is as it should be.
    expect_k: f64,
    why: &'static str,
}

fn p99(s: &Option<Summary>) -> Option<f64> {
    s.map(|s| s.p99)
}

fn ms(d: Option<std::time::Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1000.0)
}

const FIGURES: &[Figure] = &[
    Figure {
        name: "load rate (jobs/s)",
        read: |r| Some(r.load_rate),
        expect_k: 0.25,
        why: "flat: a write touches one job and the log's tail",
    },
    Figure {
        name: "RSS per job (B, worst node)",
        read: |r| Some(r.worst_rss()),
        expect_k: 0.25,
        why: "flat per job (the table itself is linear: every job is in memory)",
    },
    Figure {
        name: "disk per job (B, worst node)",
        read: |r| Some(r.worst_disk()),
        expect_k: 0.25,
        why: "flat per job: the snapshot holds each job once, the log store follows it",
    },
    Figure {
        name: "p99 of writes outside a snapshot (ms)",
        read: |r| p99(&r.during.outside),
        expect_k: 0.25,
        why: "flat: nothing on the write path reads the whole table",
    },
    Figure {
        name: "p99 of writes during a snapshot (ms)",
        read: |r| p99(&r.during.in_snapshot),
        expect_k: 0.25,
        why: "flat: the snapshot is written beside the write path, not on it",
    },
    Figure {
        name: "longest snapshot written (ms)",
        read: |r| Some(r.during.longest_ms as f64),
        expect_k: 1.25,
        why: "linear: a snapshot is the whole table",
    },
    Figure {
        name: "joblist of all (ms)",
        read: |r| r.joblist_ms(),
        expect_k: 1.25,
        why: "linear: every job is sent",
    },
    Figure {
        name: "restart (ms)",
        read: |r| ms(r.restart),
        expect_k: 1.25,
        why: "linear: the snapshot is read back",
    },
    Figure {
        name: "blank catch-up (ms)",
        read: |r| ms(r.catch_up),
        expect_k: 1.25,
        why: "linear: the whole table is sent and read",
    },
    Figure {
        name: "failover (ms)",
        read: |r| ms(r.failover),
        expect_k: 0.25,
        why: "flat: an election needs no part of the table",
    },
];

/// The P17 table from P12's rows of one build (ascending table sizes).
pub fn table(rows: &[&Row]) -> Table {
    let mut t = Table::new("P17", "cost as the work grows");
    t.note("P12's figures for this branch against the table size; k = the exponent of figure ∝ jobs^k between the smallest and the largest table (flat < 0.25 ≤ sub-linear < 0.75 ≤ linear < 1.25 ≤ worse); a figure is as expected when its k is no larger than what it should be; step-downs and elections without a fault are in P12's second table (0 at every size is flat)");
    let mut header = vec!["figure".to_string()];
    header.extend(rows.iter().map(|r| format!("{} jobs", r.jobs)));
    header.extend(["k", "grows", "should be"].map(String::from));
    t.header = header;
    let mut off = Vec::new();
    for f in FIGURES {
        let vals: Vec<Option<f64>> = rows.iter().map(|r| (f.read)(r)).collect();
        let mut cells = vec![f.name.to_string()];
        cells.extend(
            vals.iter()
                .map(|v| v.map_or("—".into(), |v| format!("{v:.1}"))),
        );
        let k = match (rows.first(), rows.last(), vals.first(), vals.last()) {
            (Some(a), Some(b), Some(Some(fa)), Some(Some(fb))) => {
                exponent(a.jobs, *fa, b.jobs, *fb)
            }
            _ => None,
        };
        cells.push(k.map_or("—".into(), |k| format!("{k:.2}")));
        cells.push(k.map_or("—".into(), |k| shape(k).to_string()));
        cells.push(f.why.to_string());
        if k.is_some_and(|k| k >= f.expect_k) {
            off.push(f.name);
        }
        t.row(cells);
    }
    t.target(
        "flat where nothing needs the whole table, linear where it must",
        if rows.len() < 2 {
            Verdict::NotMeasured("one table size: no curve".into())
        } else {
            Verdict::from(
                off.is_empty(),
                if off.is_empty() {
                    "every figure as expected".into()
                } else {
                    format!("grows faster than it should: {}", off.join(", "))
                },
            )
        },
    );
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponents_name_the_shape() {
        let k = exponent(10_000, 5.0, 1_000_000, 5.2).unwrap();
        assert_eq!(shape(k), "flat");
        let k = exponent(10_000, 10.0, 1_000_000, 1000.0).unwrap();
        assert!((k - 1.0).abs() < 1e-9);
        assert_eq!(shape(k), "linear");
        assert_eq!(
            shape(exponent(10, 1.0, 100, 100.0).unwrap()),
            "worse than linear"
        );
        assert_eq!(shape(exponent(10, 1.0, 100, 3.0).unwrap()), "sub-linear");
        assert!(exponent(10, 0.0, 100, 3.0).is_none());
        assert!(exponent(10, 1.0, 10, 3.0).is_none());
    }
}
