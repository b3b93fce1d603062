//! P5: the library's policy against a baseline policy (the seeds' primitive expressed with the
//! same knobs), one client of each released together at every kill of the one-client series of
//! [`super::kills`].

use super::failover::PROBE_INTERVAL;
use super::kills::Kills;
use super::table::{Table, Verdict};
use super::Summary;

/// The P5 table.
pub fn table(k: &Kills) -> Table {
    let mut t = Table::new(
        "P5",
        "baseline policy in the same run (same kills, side by side)",
    );
    t.note(
        "baseline = XCE_RETRY_DEFAULTS (50 ms × 2 up to 5 s, 20 sleeps) with waitPrimary off, through the same loop: \
         it still rotates through all masters without sleeping on refused/redirect and jitters its sleeps, which \
         the seeds' single-endpoint primitive did not (that one could not leave a killed primary at all)",
    );
    t.note(format!(
        "{} kill(s); one client of each policy released together at each kill",
        k.rounds_done
    ));
    t.dist_header("policy / interval", "ms");
    t.dist_row("ours: first success − ready", Summary::of(&k.ours.added));
    t.dist_row(
        "baseline: first success − ready",
        Summary::of(&k.base.added),
    );
    t.dist_row("ours: kill → first success", Summary::of(&k.ours.total));
    t.dist_row("baseline: kill → first success", Summary::of(&k.base.total));
    for (name, g) in [("ours", &k.ours), ("baseline", &k.base)] {
        t.result(format!("{name}: {}", g.effort()));
        if let Some(p) = g.problems() {
            t.result(format!("{name}: {p}"));
        }
    }
    ratio_target(&mut t, k);
    t
}

/// Ours ≥ 10× better than the baseline at the p50 of first success − ready.
fn ratio_target(t: &mut Table, k: &Kills) {
    let floor = PROBE_INTERVAL.as_secs_f64() * 1e3;
    match (Summary::of(&k.ours.added), Summary::of(&k.base.added)) {
        (Some(o), Some(b)) => {
            let r50 = b.p50 / o.p50.max(floor);
            let r90 = b.p90 / o.p90.max(floor);
            t.result(format!(
                "ratio baseline / ours of the client-added latency: p50 {r50:.1}×, p90 {r90:.1}× \
                 (ours floored at the {floor} ms probe resolution, which can only lower the ratio)"
            ));
            let what = "ours ≥ 10× better (p50 of first success − ready)";
            match k.ours.problems() {
                None => t.target(what, Verdict::from(r50 >= 10.0, format!("{r50:.1}×"))),
                Some(p) => t.target(
                    what,
                    Verdict::NotMet(format!(
                        "{r50:.1}× over the calls that succeeded, but ours: {p}"
                    )),
                ),
            }
        }
        (None, _) if k.ours.problems().is_some() => t.target(
            "ours ≥ 10× better",
            Verdict::NotMet(format!(
                "ours never succeeded: {}",
                k.ours.problems().unwrap_or_default()
            )),
        ),
        _ => t.target(
            "ours ≥ 10× better",
            Verdict::NotMeasured("no kill measured".into()),
        ),
    }
}
