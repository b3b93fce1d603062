//! P3: the latency a client adds to a failover — its first success after kill -9 of the
//! primary, minus the moment the new primary was ready — for one client and for [`CROWD`]
//! clients sharing the failover. Read from the kill series of [`super::kills`].

use super::kills::{Kills, CROWD, P4_MIN_KILLS};
use super::table::Table;
use super::Summary;

/// The P3 table.
pub fn table(k: &Kills) -> Table {
    let mut t = Table::new(
        "P3",
        "client-added failover latency: first success − new primary ready",
    );
    notes(&mut t, k);
    t.dist_header("clients", "ms");
    t.dist_row("1 client (ours)", Summary::of(&k.ours.added));
    t.dist_row(
        format!("{CROWD} clients (ours), all calls"),
        Summary::of(&k.crowd.added),
    );
    results(&mut t, k);
    targets(&mut t, k);
    t
}

fn notes(t: &mut Table, k: &Kills) {
    t.note(k.method());
    t.note(format!(
        "1 client: {} kill(s){}, a baseline client failing over beside it (P5); {CROWD} clients: {} kill(s), \
     one context per thread; negative = served within the probe resolution",
        k.rounds_done,
        k.quick_note(k.rounds_done, P4_MIN_KILLS),
        k.crowd_kills
    ));
}

fn results(t: &mut Table, k: &Kills) {
    for (name, g) in [("1 client", &k.ours), ("200 clients", &k.crowd)] {
        if let Some(p) = g.problems() {
            t.result(format!("{name}: {p}"));
        }
    }
    t.result(format!("1 client: {}", k.ours.effort()));
    t.result(format!("{CROWD} clients: {}", k.crowd.effort()));
}

/// p50 ≤ 5 ms and p99 ≤ 50 ms for one client, p99 ≤ 250 ms for the crowd.
fn targets(t: &mut Table, k: &Kills) {
    match Summary::of(&k.ours.added) {
        Some(s) => {
            t.target(
                "p50 ≤ 5 ms (1 client)",
                k.ours.verdict_le(s.p50, 5.0, " ms"),
            );
            t.target(
                format!(
                    "p99 ≤ 50 ms (1 client){}",
                    if s.n < 100 {
                        " [p99 of fewer than 100 samples = max]"
                    } else {
                        ""
                    }
                ),
                k.ours.verdict_le(s.p99, 50.0, " ms"),
            );
        }
        None => t.target("p50 ≤ 5 ms, p99 ≤ 50 ms (1 client)", k.ours.no_success()),
    }
    let crowd = format!("p99 ≤ 250 ms ({CROWD} clients)");
    match Summary::of(&k.crowd.added) {
        Some(s) => t.target(crowd, k.crowd.verdict_le(s.p99, 250.0, " ms")),
        None => t.target(crowd, k.crowd.no_success()),
    }
}
