//! The proof of libxce, in three roles:
//!
//! - [`harness`]: real controller processes on loopback or in network namespaces, started,
//!   killed, paused, cut off — used by the failover scenarios (`tests/`), the benchmarks and
//!   the demo;
//! - [`bench`](mod@bench): the benchmarks P1–P15 (acceptance.md), one module each, behind
//!   the commands in `src/bin/`;
//! - [`check`]: the linearizability checker of the histories the scenarios and P9 record;
//! - [`nemesis`]: S18, a seeded schedule of faults over a cluster in network namespaces under
//!   client load, checked at the end (`xce-nemesis`, `tests/nemesis.rs`);
//!
//! and [`demo`], the failover demo (`xce-demo`) on the harness.

pub mod bench;
pub mod check;
pub mod demo;
pub mod harness;
pub mod nemesis;

pub use harness::{build_controller, controller_bin, Cluster, ClusterOpts};
