//! P6: the herd — [`HERD`] contexts connected to the primary fail over together; how many of
//! them connect to the new primary within any 10 ms. Read from the herd rounds of
//! [`super::kills`] (each round's F17 rotation events).

use std::time::{Duration, Instant};

use super::failover::Round;
use super::kills::{HerdRound, Kills, HERD};
use super::table::{num, Table, Verdict};
use super::Summary;

/// The P6 window and its limit.
const HERD_WINDOW: Duration = Duration::from_millis(10);
const HERD_MAX_SHARE: f64 = 0.20;

/// The max number of instants within any window of length `w` (sliding), and where it starts.
fn max_in_window(times: &mut [Instant], w: Duration) -> (usize, Option<Instant>) {
    times.sort();
    let (mut best, mut at, mut lo) = (0, None, 0);
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= w {
            lo += 1;
        }
        if hi - lo + 1 > best {
            best = hi - lo + 1;
            at = Some(times[lo]);
        }
    }
    (best, at)
}

/// One kill's row, with its worst window's share from the kill on and after ready.
struct Row {
    cells: Vec<String>,
    share: f64,
    share_after: f64,
}

/// The row of kill `n` (from 1).
fn row(n: usize, h: &HerdRound) -> Row {
    let r = &h.round;
    let mut connects: Vec<Instant> = h
        .rotations
        .iter()
        .filter(|&&(_, from, to)| Some(to) == r.new_primary_port && from != to)
        .map(|&(t, _, _)| t)
        .collect();
    let n_connects = connects.len();
    let (max_c, at) = max_in_window(&mut connects, HERD_WINDOW);
    let mut after_ready: Vec<Instant> = match r.ready {
        Some(rd) => connects.iter().copied().filter(|&t| t >= rd.sent).collect(),
        None => Vec::new(),
    };
    let n_after = after_ready.len();
    let (max_after, at_after) = max_in_window(&mut after_ready, HERD_WINDOW);
    let ok_ends = || {
        r.calls[0]
            .iter()
            .filter(|c| c.error.is_none())
            .map(|c| c.end)
    };
    let mut firsts: Vec<Instant> = ok_ends().collect();
    let (max_s, _) = max_in_window(&mut firsts, HERD_WINDOW);
    let share = max_c as f64 / HERD as f64;
    let share_after = max_after as f64 / HERD as f64;
    let rel = |t: Option<Instant>| match (t, r.ready) {
        (Some(t), Some(rd)) => format!("{} ms", num(Round::ms(rd.sent, t))),
        _ => "-".into(),
    };
    Row {
        cells: vec![
            format!("kill {n}"),
            format!("{}/{HERD}", firsts.len()),
            format!("{n_connects} / {n_after}"),
            format!("{max_c} ({:.1}%) at {}", share * 100.0, rel(at)),
            format!(
                "{max_after} ({:.1}%) at {}",
                share_after * 100.0,
                rel(at_after)
            ),
            format!("{max_s} ({:.1}%)", max_s as f64 / HERD as f64 * 100.0),
            ok_ends().max().map_or("-".into(), |t| rel(Some(t))),
        ],
        share,
        share_after,
    }
}

/// The P6 table.
pub fn table(k: &Kills) -> Table {
    let mut t = Table::new("P6", "herd: 1000 contexts fail over together");
    t.note(format!(
        "{HERD} contexts (default policy), one thread each, all connected to the primary, released together into \
         one hello right after the kill; {} kill(s)",
        k.herd_rounds.len()
    ));
    t.note(k.method());
    t.note(
        "connect attempts counted on the client side: every F17 Rotation event whose target is the new primary \
         (the loop connects right after rotating; a context already connected to that node when it is elected \
         re-sends on its connection and needs no connect); windows are sliding 10 ms windows; the verdict counts \
         every connect to the node that becomes primary from the kill on (stricter than after-ready only)",
    );
    t.columns(&[
        "kill",
        "succeeded",
        "connects to the new primary: from kill / after ready",
        "max in 10 ms, from kill (window start − ready)",
        "max in 10 ms, after ready",
        "max first successes in 10 ms",
        "last success (after ready)",
    ]);
    let rows: Vec<Row> = (k.herd_rounds.iter().enumerate())
        .map(|(i, h)| row(i + 1, h))
        .collect();
    for r in &rows {
        t.row(r.cells.clone());
    }
    if let Some(s) = Summary::of(&k.herd.added) {
        t.result(format!(
            "first success − ready over all contexts: p50 {} ms, p90 {} ms, p99 {} ms, max {} ms",
            num(s.p50),
            num(s.p90),
            num(s.p99),
            num(s.max)
        ));
    }
    if let Some(p) = k.herd.problems() {
        t.result(p);
    }
    targets(&mut t, k, &rows);
    t
}

/// No 10 ms window above 20% (from the kill on; after ready), and all succeed.
fn targets(t: &mut Table, k: &Kills, rows: &[Row]) {
    if rows.is_empty() {
        t.target(
            "no 10 ms window above 20%; all succeed",
            Verdict::NotMeasured("no kill measured".into()),
        );
        return;
    }
    let worst = rows.iter().map(|r| r.share).fold(0.0f64, f64::max);
    let worst_after = rows.iter().map(|r| r.share_after).fold(0.0f64, f64::max);
    t.target(
        "no 10 ms window above 20% of the contexts (connects from the kill on)",
        Verdict::from(
            worst <= HERD_MAX_SHARE,
            format!(
                "worst window {:.1}%{}",
                worst * 100.0,
                if worst > HERD_MAX_SHARE {
                    format!(", {:.1} points over", (worst - HERD_MAX_SHARE) * 100.0)
                } else {
                    String::new()
                }
            ),
        ),
    );
    t.target(
        "the same, counting only connects after the new primary was ready (the looser reading)",
        Verdict::from(
            worst_after <= HERD_MAX_SHARE,
            format!("worst window {:.1}%", worst_after * 100.0),
        ),
    );
    t.target(
        "all succeed",
        Verdict::from(
            k.herd.problems().is_none(),
            k.herd
                .problems()
                .unwrap_or_else(|| format!("{} calls", k.herd.total.len())),
        ),
    );
}
