//! C19's cost: what the online consistency check (a checkpoint entry, a digest of the whole
//! state on every node, the digests compared) takes from write throughput. Run by
//! `xce-scale --only C19` ([`super::suite::scale`]).

use std::path::Path;
use std::time::Duration;

use super::load;
use super::table::{num, Table};
use super::ScaleOpts;

/// C19: what the online consistency check costs. A 10^4-job table; then the same submits with
/// the check off, at its default interval and at ten times that rate, side by side, each on a
/// fresh cluster of this branch (the rows alternate the settings twice, so a drift of the
/// machine's load shows as a difference between the two rows of one setting).
pub fn table(a: &ScaleOpts, logs: &Path) -> Result<Table, String> {
    let secs = if a.quick { 3 } else { 6 };
    let rounds = if a.quick { 2 } else { 4 };
    let jobs = 10_000u64;
    let settings = [
        ("0", "off"),
        ("2000", "2000 ms (default)"),
        ("200", "200 ms"),
    ];
    let mut t = Table::new(
        "C19",
        "what the consistency check costs: jobsubmit/s, check on vs off",
    );
    t.note(format!(
        "3 controllers of this branch ({} CPUs, shared); each row a fresh cluster with {jobs} \
         typical jobs loaded first, then {secs} s of back-to-back submits with 1 and with 64 \
         contexts; --consistency-check-ms 0 (off: checks only when asked), 2000 (the default: \
         a checkpoint entry, a digest of the whole state on every node, the digests compared), \
         200 (ten times as often; the spacing floor of 20 times the digest's time still \
         applies); {rounds} rounds, each round every setting once, so a drift of the machine's \
         load spreads over all of them",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    ));
    t.header = [
        "round",
        "check every",
        "1 context /s",
        "64 contexts /s",
        "failed",
    ]
    .map(String::from)
    .to_vec();
    let mut per: std::collections::BTreeMap<&str, Vec<(f64, f64)>> = Default::default();
    for round in 1..=rounds {
        for (setting, label) in settings {
            let c = load::cluster_with(&a.ours, logs, &["--consistency-check-ms", setting])?;
            let m = c.masters();
            load::load_jobs(&m, jobs, 64)?;
            let one = load::submit_rate(&m, 1, Duration::from_secs(secs))?;
            let many = load::submit_rate(&m, 64, Duration::from_secs(secs))?;
            t.row(vec![
                round.to_string(),
                label.to_string(),
                num(one.per_sec()),
                num(many.per_sec()),
                (one.failed + many.failed).to_string(),
            ]);
            per.entry(label)
                .or_default()
                .push((one.per_sec(), many.per_sec()));
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let off = per.get("off").map(|v| {
        (
            mean(&v.iter().map(|x| x.0).collect::<Vec<_>>()),
            mean(&v.iter().map(|x| x.1).collect::<Vec<_>>()),
        )
    });
    for (_, label) in settings {
        let v = &per[label];
        let (m1, m64) = (
            mean(&v.iter().map(|x| x.0).collect::<Vec<_>>()),
            mean(&v.iter().map(|x| x.1).collect::<Vec<_>>()),
        );
        let vs = off.map_or(String::new(), |(o1, o64)| {
            format!(
                " ({:+.1}% / {:+.1}% against off)",
                (m1 / o1 - 1.0) * 100.0,
                (m64 / o64 - 1.0) * 100.0
            )
        });
        t.result(format!(
            "check {label}: mean {} / {} submits/s with 1 / 64 contexts over {} clusters{vs}",
            num(m1),
            num(m64),
            v.len()
        ));
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    t.result(format!("load average at the end: {}", load.trim()));
    Ok(t)
}
