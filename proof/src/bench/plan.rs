//! How a benchmark runs, written once: the [`Plan`] of the round-based benchmarks (P9, P13,
//! P14: each module's `plan()` states only where it differs from [`Plan::with`]'s defaults),
//! the bound on a round's waits, and where a command's controller logs go.

use std::path::PathBuf;
use std::time::Duration;

use crate::ClusterOpts;

/// How a round runs: the controllers, the clients' load, the fault, and what the benchmark
/// adds (`more`: P13's restarts, P14's links; `()` for P9).
#[derive(Debug, Clone)]
pub struct Plan<K = ()> {
    /// Extra `xce-controller run` flags (`{id}`: the node's id).
    pub controller_args: Vec<String>,
    /// Controller logs (`node-N.log`, appended round after round); `None`: discarded (P13: a
    /// temporary directory, removed after a round that went well).
    pub log_dir: Option<PathBuf>,
    /// Client threads writing (`jobsubmit` of fresh ids), each with a context of its own.
    pub writers: usize,
    /// Client threads reading (`joblist`), each with a context of its own.
    pub readers: usize,
    /// Each client thread's pause between two calls (zero: back to back).
    pub pace: Duration,
    /// Load before the first fault or restart.
    pub warmup: Duration,
    /// How long a fault lasts.
    pub fault_for: Duration,
    /// The benchmark's own knobs.
    pub more: K,
}

impl<K> Plan<K> {
    /// The defaults every plan starts from: the controllers' own timing (no extra flags), logs
    /// discarded, one writer calling back to back, no warm-up, no fault; and `more`.
    pub fn with(more: K) -> Plan<K> {
        Plan {
            controller_args: Vec::new(),
            log_dir: None,
            writers: 1,
            readers: 0,
            pace: Duration::ZERO,
            warmup: Duration::ZERO,
            fault_for: Duration::ZERO,
            more,
        }
    }

    /// The clusters' options: the extra flags and the logs.
    pub fn cluster_opts(&self) -> ClusterOpts {
        ClusterOpts {
            extra_args: self.controller_args.clone(),
            log_dir: self.log_dir.clone(),
            ..Default::default()
        }
    }

    /// The controller timing of this plan, for a table's note.
    pub fn timing(&self) -> String {
        if self.controller_args.is_empty() {
            "the defaults".to_string()
        } else {
            self.controller_args.join(" ")
        }
    }
}

/// How long anything in a round (an election, service again after a heal) may take before
/// the round fails.
pub const ROUND_BOUND: Duration = Duration::from_secs(60);

/// Where command `tool`'s controllers write their logs: `$TMPDIR/TOOL-logs-PID`.
pub fn log_dir(tool: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{tool}-logs-{}", std::process::id()))
}
