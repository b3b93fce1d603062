//! The proof of libxce, in three roles:
//!
//! - [`harness`]: real controller processes on loopback or in network namespaces, started,
//!   killed, paused, cut off — used by the failover scenarios (`tests/`), the benchmarks and
//!   the demo;
//! - [`bench`](mod@bench): the benchmarks P1–P17 (acceptance.md), one module each, behind
//!   the commands in `src/bin/`;
//! - [`check`]: the linearizability checkers of the histories the scenarios, P9 and the
//!   nemesis record (porcupine's algorithm, ported, and the conditions of a grow-only set);
//! - [`nemesis`]: S18 and S20, a seeded schedule of faults, composed, over a cluster in
//!   network namespaces under client load, checked at the end (`xce-nemesis`,
//!   `tests/nemesis.rs`; issue 35's defect 1 in `tests/composed_faults.rs`);
//!
//! and [`demo`], the failover demo (`xce-demo`) on the harness; [`rng`], the seeded numbers
//! of the nemesis's schedules and of the checkers' own tests.
//!
//! Layers, each importing only the ones before it (`tests/module_order.rs` checks this order,
//! and that no files import each other in a circle; the commands in `src/bin/` are crates of
//! their own, on top): `rng` → `harness` → `check` → `bench` → `nemesis` → `demo`.

pub mod bench;
pub mod check;
pub mod demo;
pub mod harness;
pub mod nemesis;
pub mod rng;

pub use harness::{build_controller, controller_bin, Cluster, ClusterOpts};
