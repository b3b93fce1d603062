//! Test code shared between the workspace's crates (never linked into the library): a
//! dev-dependency of the library's tests (`tests/`) and of the controller's
//! (`controller/tests/`), a dependency of `proof/` (its clusters take their ports here).
//!
//! - [`fake`]: scripted fake controllers for the failover tests, fast retry settings, a test
//!   PKI made at test time.
//! - [`ports`]: loopback ports below the kernel's ephemeral range for clusters of real
//!   controller processes.
//! - [`procs`]: whether a SIGSTOP has taken effect on every thread of a process.

pub mod fake;
pub mod ports;
pub mod procs;
