//! P16 (issue 29): fast and calm at once. The adaptive failure detection (C15 amended) must
//! keep a quiet link's failover speed (P4: `kill -9` of the primary → first success, median
//! ≤ 150 ms) and stop electing on a congested one (P14) — with the same build, in the same
//! run, side by side with another build. `xce-congestion --p16 N` runs, before each P14 round
//! of a build, N kills of that build's primary on quiet (loopback) links ([`Quiet`], P4's
//! measurement), then prints P14's table and this one.
use std::process::ExitCode;

use crate::bench::args::Common;
use crate::bench::kills::Quiet;
use crate::bench::p14_congestion::{self, judge, listing_counts, Links, RoundResult};
use crate::bench::p4_unavailability::P4_P50_MS as QUIET_MEDIAN_MS;
use crate::bench::plan::Plan;
use crate::bench::stats::Summary;
use crate::bench::table::{num, Table, Verdict};

/// The quiet kills of every round of one build, together.
fn pooled(rs: &[RoundResult]) -> Quiet {
    let mut q = Quiet::default();
    for r in rs.iter().filter_map(|r| r.quiet.as_ref()) {
        q.first_success_ms.extend(&r.first_success_ms);
        q.failed += r.failed;
        if q.error.is_none() {
            q.error.clone_from(&r.error);
        }
    }
    q
}

/// Whether the quiet kills meet P4, and the detail.
fn judge_quiet(q: &Quiet) -> (bool, String) {
    match Summary::of(&q.first_success_ms) {
        None => (false, format!("no kill measured ({:?})", q.error)),
        Some(s) => {
            let ok = s.p50 <= QUIET_MEDIAN_MS && q.failed == 0 && q.error.is_none();
            let mut d = format!("quiet median {} ms", num(s.p50));
            if q.failed > 0 {
                d.push_str(&format!(", {} call(s) failed", q.failed));
            }
            if let Some(e) = &q.error {
                d.push_str(&format!(", stopped early: {e}"));
            }
            (ok, d)
        }
    }
}

/// The P16 table: per build, its quiet kills and its congested rounds; the verdict is the last
/// row's (the build under test): both met.
pub fn table(runs: &[(String, Vec<RoundResult>)], plan: &Plan<Links>) -> Table {
    let mut t = Table::new(
        "P16",
        "fast and calm at once: kills on quiet links and congestion, same build, same run",
    );
    t.note(format!(
        "per round of a build: {} kill(s) -9 of the primary of a fresh 3-node cluster on \
         loopback with the controller's default timing, one client released into one call at \
         each (P4's method), then one P14 round (the table above) — the builds alternate round \
         by round",
        plan.more.quiet_kills
    ));
    t.columns(&[
        "controller",
        "quiet kills",
        "quiet: kill → first success ms: median",
        "p99",
        "congested: elections, congestion alone",
        "primary step-downs",
        "writers' longest wait s (max)",
        "listings ok / failed / cut",
        "fast and calm",
    ]);
    let mut verdict = None;
    for (label, rs) in runs.iter().filter(|(_, rs)| !rs.is_empty()) {
        let q = pooled(rs);
        let s = Summary::of(&q.first_success_ms);
        let (quiet_ok, quiet_detail) = judge_quiet(&q);
        let (calm_ok, calm_detail) = judge(label, rs, plan);
        let wait = rs
            .iter()
            .map(|r| r.calm_wait.as_secs_f64())
            .fold(0.0, f64::max);
        let (ok, failed, cut, _) = listing_counts(rs.iter().flat_map(|r| &r.listings));
        t.row(vec![
            label.clone(),
            q.first_success_ms.len().to_string(),
            s.map_or("-".into(), |s| num(s.p50)),
            s.map_or("-".into(), |s| num(s.p99)),
            rs.iter().map(|r| r.calm_elections).sum::<u64>().to_string(),
            rs.iter()
                .map(|r| r.calm_step_downs)
                .sum::<usize>()
                .to_string(),
            num(wait),
            format!("{ok} / {failed} / {cut}"),
            if quiet_ok && calm_ok { "yes" } else { "no" }.into(),
        ]);
        verdict = Some((
            quiet_ok && calm_ok,
            format!("{quiet_detail}; {calm_detail}"),
        ));
    }
    if let Some((ok, detail)) = verdict {
        t.target(
            format!(
                "quiet: median kill → first success ≤ {QUIET_MEDIAN_MS} ms, no failed call; \
                 congested: P14's target — both by the same build in the same run"
            ),
            Verdict::from(ok, detail),
        );
    }
    t
}

/// `xce-congestion --p16 N`: P14's rounds, each after N quiet kills of the same build; P14's
/// table, then P16's.
pub fn command(args: &Common, plan: Plan<Links>) -> ExitCode {
    match p14_congestion::run(args, plan) {
        Ok((plan, runs)) => {
            println!("{}", table(&runs, &plan));
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_kills_are_judged_by_their_median_and_any_failure() {
        let q = |ms: &[f64], failed| Quiet {
            first_success_ms: ms.to_vec(),
            failed,
            error: None,
        };
        assert!(judge_quiet(&q(&[120.0, 130.0, 400.0], 0)).0);
        assert!(!judge_quiet(&q(&[120.0, 160.0, 170.0], 0)).0);
        assert!(!judge_quiet(&q(&[120.0, 130.0], 1)).0, "a failed call");
        assert!(!judge_quiet(&q(&[], 0)).0, "nothing measured");
    }
}
