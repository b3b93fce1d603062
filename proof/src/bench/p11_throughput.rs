//! P11: write throughput — `jobsubmit`/s against 1–256 concurrent contexts, side by side with
//! a baseline controller binary. Run by `xce-scale` ([`super::suite::scale`]).

use std::path::Path;
use std::time::Duration;

use super::load;
use super::table::{num, Table, Verdict};
use super::ScaleOpts;

/// The P11 table: submits/s with 1, 16, 64 and 256 contexts, the baseline binary first.
pub fn table(a: &ScaleOpts, logs: &Path) -> Result<Table, String> {
    let secs = if a.quick { 3 } else { 6 };
    let mut bins = vec![("this branch", a.ours.clone())];
    if let Some(b) = &a.baseline {
        bins.insert(0, ("baseline", b.clone()));
    }
    let mut t = Table::new(
        "P11",
        "write throughput: jobsubmit/s vs concurrent contexts",
    );
    t.note(format!(
        "3 controllers + the client threads on this machine ({} CPUs); each context one thread \
         submitting back to back for {secs} s after one warm-up call; acknowledged = committed \
         (fsynced) on a quorum; a fresh cluster per controller build",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    ));
    t.columns(&[
        "controller",
        "contexts",
        "submits/s",
        "acked",
        "failed",
        "vs 1 context",
    ]);
    let mut at64 = None;
    for (name, bin) in &bins {
        let c = load::cluster_of(bin, logs)?;
        let m = c.masters();
        let mut one = None;
        for n in [1usize, 16, 64, 256] {
            let r = load::submit_rate(&m, n, Duration::from_secs(secs))?;
            let rate = r.per_sec();
            let base = *one.get_or_insert(rate);
            t.row(vec![
                name.to_string(),
                n.to_string(),
                num(rate),
                r.acked.to_string(),
                r.failed.to_string(),
                format!("{:.1}×", rate / base),
            ]);
            if n == 64 && *name == "this branch" {
                at64 = Some(rate);
            }
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    t.result(format!("load average at the end: {}", load.trim()));
    let v = at64.unwrap_or(0.0);
    t.target(
        "≥ 10,000 submits/s with 64 contexts",
        Verdict::from(v >= 10_000.0, format!("{} /s", num(v))),
    );
    Ok(t)
}
