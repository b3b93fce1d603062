//! P4: total unavailability — kill -9 of the primary → a client's first success — with the
//! controller's defaults and, on a second cluster in the same run, the timing before C15. Read
//! from the kill series of [`super::kills`].

use super::kills::{Kills, Series, P4_MIN_KILLS};
use super::plan::BEFORE_C15;
use super::table::Table;
use super::Summary;

/// P4 (raised, C15): kill → first success, median and p99 (ms).
pub const P4_P50_MS: f64 = 150.0;
const P4_P99_MS: f64 = 300.0;

/// The P4 table.
pub fn table(k: &Kills) -> Table {
    let empty = Series::default();
    let before = k.before.as_ref().unwrap_or(&empty);
    let mut t = Table::new(
        "P4",
        "total unavailability: kill -9 of the primary → first success",
    );
    t.note(k.method());
    t.note(format!(
        "side by side in one run: the controller's defaults (C15: see its --help) and, on a second cluster, \
         the timing before C15 ({})",
        BEFORE_C15.join(" ")
    ));
    rows(&mut t, k, before);
    results(&mut t, k, before);
    targets(&mut t, k);
    t
}

fn rows(t: &mut Table, k: &Kills, before: &Series) {
    t.dist_header("timing / interval", "ms");
    t.dist_row(
        "defaults: kill → first success (1 client)",
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
    t.dist_row(
        "before C15: kill → first success (1 client)",
        Summary::of(&before.ours.total),
    );
    t.dist_row(
        "  of which kill → new primary ready",
        Summary::of(&before.election),
    );
}

fn results(t: &mut Table, k: &Kills, before: &Series) {
    if let Some(p) = k.ours.problems() {
        t.result(format!("defaults: {p}"));
    }
    if let Some(p) = before.ours.problems() {
        t.result(format!("before C15: {p}"));
    }
    if let Some(e) = &before.error {
        t.result(format!("before C15: series aborted: {e}"));
    }
    t.note(format!(
        "defaults: {} kill(s), {} successful first calls; before C15: {} kill(s), {} successful first calls",
        k.rounds_done,
        k.ours.total.len(),
        before.rounds,
        before.ours.total.len()
    ));
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
