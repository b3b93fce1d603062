//! P4: total unavailability — kill -9 of the primary → a client's first success — with the
//! controller's defaults. Read from the kill series of [`super::kills`].

use super::kills::{Kills, P4_MIN_KILLS};
use super::table::Table;
use super::Summary;

/// P4 (raised, C15): kill → first success, median and p99 (ms).
pub const P4_P50_MS: f64 = 150.0;
const P4_P99_MS: f64 = 300.0;

/// The P4 table.
pub fn table(k: &Kills) -> Table {
    let mut t = Table::new(
        "P4",
        "total unavailability: kill -9 of the primary → first success",
    );
    t.note(k.method());
    t.dist_header("interval", "ms");
    t.dist_row(
        "kill → first success (1 client)",
        Summary::of(&k.ours.total),
    );
    t.dist_row(
        "  of which kill → new primary ready (the cluster's election)",
        Summary::of(&k.election),
    );
    t.dist_row(
        "  of which kill → killed process reaped",
        Summary::of(&k.reap),
    );
    if let Some(p) = k.ours.problems() {
        t.result(p);
    }
    t.note(format!(
        "{} kill(s), {} successful first calls",
        k.rounds_done,
        k.ours.total.len()
    ));
    targets(&mut t, k);
    t
}

/// Median ≤ 150 ms over ≥ 20 kills, p99 ≤ 300 ms.
fn targets(t: &mut Table, k: &Kills) {
    let note = k.quick_note(k.rounds_done, P4_MIN_KILLS);
    match Summary::of(&k.ours.total) {
        Some(s) => {
            t.target(
                format!("median ≤ {P4_P50_MS} ms over ≥ {P4_MIN_KILLS} kills{note}"),
                k.ours.verdict_le(s.p50, P4_P50_MS, " ms"),
            );
            t.target(
                format!(
                    "p99 ≤ {P4_P99_MS} ms{}{note}",
                    if s.n < 100 {
                        " [p99 of fewer than 100 samples = max]"
                    } else {
                        ""
                    }
                ),
                k.ours.verdict_le(s.p99, P4_P99_MS, " ms"),
            );
        }
        None => t.target(
            format!("median ≤ {P4_P50_MS} ms, p99 ≤ {P4_P99_MS} ms{note}"),
            k.ours.no_success(),
        ),
    }
}
