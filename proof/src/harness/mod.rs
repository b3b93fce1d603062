//! The harness: the code that starts real `xce-controller` processes and breaks them — used
//! by the scenarios (`tests/`), the benchmarks ([`crate::bench`]) and the demo.
//!
//! - [`cluster`]: N controllers on loopback; kill -9, SIGSTOP/SIGCONT, SIGTERM, restart; raw
//!   `hello` probes; cleaned up when dropped (also when a test panics) — the test kit's runner
//!   and wire client, shared with the controller's tests, and the build of the controller.
//! - [`netns`]: the same in network namespaces (root and `ip`), where a fault is a link going
//!   down (blackholed, cut from its peers, silent to clients) or shaped by `tc`; and, for the
//!   nemesis, a node's data wiped and `xce-controller` commands run beside the clients.
//! - [`ports`]: loopback ports below the ephemeral range (from the test kit, shared with the
//!   controller's tests).
//! - [`sys`]: process facts (descriptor limit, CPU time of a thread or a process).
//! - [`sides`]: rounds of several controller binaries, row after row, for side-by-side tables.

pub mod cluster;
pub mod netns;
pub mod sides;
pub mod sys;

pub use xce_testkit::ports;

pub use cluster::{build_controller, controller_bin, Cluster, ClusterOpts};
