//! The benchmarks of acceptance.md, one module each; each runs against real `xce-controller`
//! processes (or in process, P7) and returns one [`Table`] with its verdict. The commands in
//! `src/bin/` parse their flags ([`args`]) and call [`suite`] or a benchmark's `command`.
//!
//! | benchmark | module | command |
//! |---|---|---|
//! | P1 small round trip vs raw TCP | [`p1_roundtrip`] | `xce-bench` |
//! | P2 the loop's cost on the happy path | [`p2_loop_cost`] | `xce-bench` |
//! | P3 client-added failover latency | [`p3_client_added`] | `xce-bench` |
//! | P4 kill -9 → first success | [`p4_unavailability`] | `xce-bench` |
//! | P5 against a baseline policy | [`p5_baseline`] | `xce-bench` |
//! | P6 the herd of 1,000 contexts | [`p6_herd`] | `xce-bench` |
//! | P7 codec | [`p7_codec`] | `xce-bench` |
//! | P8 footprint of an idle context | [`p8_footprint`] | `xce-bench` |
//! | P9 network faults | [`p9_netfaults`] | `xce-netfaults` |
//! | P10 no false suspicion | [`p10_suspicion`] | `xce-bench` |
//! | P11 write throughput | [`p11_throughput`] | `xce-scale` |
//! | P12 the job table at scale | [`p12_job_table`] | `xce-scale` |
//! | P13 rolling restart | [`p13_rolling`] | `xce-rolling` |
//! | P14 congested links | [`p14_congestion`] | `xce-congestion` |
//! | P15 the price of security | [`p15_security`] | `xce-bench` |
//! | P16 fast and calm at once (P14's rounds, each after quiet kills) | [`p16_adaptation`] | `xce-congestion --p16 N` |
//! | P17 cost as the work grows (P12's rows as a curve) | [`p17_growth`] | `xce-scale` |
//!
//! What they share:
//! - [`args`]: the one command-line parser and start; [`plan`]: the one [`plan::Plan`] of the
//!   round-based benchmarks and its defaults; [`suite`]: `xce-bench` and `xce-scale`.
//! - [`steady`]: a steady cluster, default-policy contexts, a bare attempt (P1, P2, P8);
//!   [`failover`]: kill rounds under armed clients and the prober (P3–P6, the SVG);
//!   [`kills`]: the kill series P3–P6 and P16's quiet kills read; [`load`]: writers, job tables, what a node holds
//!   (P11, P12, P13, P15); [`nodelog`]: what a controller's stamped log says happened (P12),
//!   and the stamp itself (P14, the nemesis).
//! - [`stats`], [`table`], [`svg`], [`alloc`]: percentiles, the printed tables, the picture,
//!   the counting allocator (P8).

pub mod alloc;
pub mod args;
pub mod failover;
pub mod kills;
pub mod load;
pub mod nodelog;
pub mod p10_suspicion;
pub mod p11_throughput;
pub mod p12_job_table;
pub mod p13_rolling;
pub mod p14_congestion;
pub mod p15_security;
pub mod p16_adaptation;
pub mod p17_growth;
pub mod p1_roundtrip;
pub mod p2_loop_cost;
pub mod p2_sides;
pub mod p3_client_added;
pub mod p4_unavailability;
pub mod p5_baseline;
pub mod p6_herd;
pub mod p7_codec;
pub mod p8_footprint;
pub mod p9_netfaults;
pub mod plan;
pub mod stats;
pub mod steady;
pub mod suite;
pub mod svg;
pub mod table;

use std::path::PathBuf;

pub use stats::Summary;
pub use table::Table;

/// What the command line asked for.
#[derive(Debug, Clone, Default)]
pub struct BenchOpts {
    /// Fewer samples and kills: the whole run in about three minutes.
    pub quick: bool,
    /// Only these benchmarks (`P1`…`P8`); empty: all.
    pub only: Vec<String>,
    /// Draw one failover (both policies) to this file.
    pub svg: Option<PathBuf>,
    /// Where the controllers write their logs.
    pub log_dir: Option<PathBuf>,
    /// `--kills N`: kills of the one-client series (P3, P4, P5).
    pub kills: Option<usize>,
}

impl BenchOpts {
    /// Whether benchmark `id` (`"P3"`) was selected.
    pub fn wants(&self, id: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o.eq_ignore_ascii_case(id))
    }

    /// `quick` or `full`, whichever applies.
    pub fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }

    /// Options for a benchmark cluster: default timing knobs, logs to `log_dir`.
    pub fn cluster_opts(&self) -> crate::ClusterOpts {
        crate::ClusterOpts {
            extra_args: Vec::new(),
            log_dir: self.log_dir.clone(),
            ..Default::default()
        }
    }

    /// A fresh 3-node cluster of [`BenchOpts::cluster_opts`] and its elected primary.
    pub fn start_cluster(&self) -> Result<(crate::Cluster, u32), String> {
        let cluster = crate::Cluster::start(3, self.cluster_opts())
            .map_err(|e| format!("start cluster: {e}"))?;
        let primary = cluster
            .wait_primary(std::time::Duration::from_secs(20))
            .ok_or("no primary elected within 20 s")?;
        Ok((cluster, primary))
    }
}

/// What `xce-scale`'s command line asked for (P11, P12).
#[derive(Debug, Clone)]
pub struct ScaleOpts {
    /// 3 s per throughput point instead of 6.
    pub quick: bool,
    /// `P11` or `P12` alone; `None`: both.
    pub only: Option<String>,
    /// P12's table sizes.
    pub jobs: Vec<u64>,
    /// Another controller binary, measured beside this branch's.
    pub baseline: Option<PathBuf>,
    /// P12's log store against the snapshot: this many small jobs one at a time through one
    /// context on each build (0: not measured).
    pub one_by_one: u64,
    /// This branch's controller (resolved once: the runs set `XCE_CONTROLLER`).
    pub ours: PathBuf,
}

impl Default for ScaleOpts {
    /// Both benchmarks, P12 at 10^4 and 10^5 jobs (and 10^6 with `XCE_SCALE_FULL=1`).
    fn default() -> ScaleOpts {
        let mut jobs = vec![10_000, 100_000];
        if std::env::var_os("XCE_SCALE_FULL").is_some_and(|v| v != "0") {
            jobs.push(1_000_000);
        }
        ScaleOpts {
            quick: false,
            only: None,
            jobs,
            baseline: None,
            one_by_one: 40_000,
            ours: PathBuf::new(),
        }
    }
}
