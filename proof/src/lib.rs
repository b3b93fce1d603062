//! The proof of libxce: a harness of real controller processes on loopback, used by the
//! failover scenarios (S1–S10, `tests/`), the benchmark command (P1–P8) and the demo.

pub mod bench;
pub mod cluster;
pub mod congestion;
pub mod linearizable;
pub mod netfaults;
pub mod netns;
pub use xce_testkit::ports;
pub mod rolling;
pub mod sides;
pub mod sys;

pub use cluster::{build_controller, controller_bin, Cluster, ClusterOpts};
