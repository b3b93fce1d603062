//! Test code shared between the workspace's crates (never linked into the library): a
//! dev-dependency of the library's tests (`tests/`) and of the controller's
//! (`controller/tests/`), a dependency of `proof/` (its clusters and benchmarks run here).
//!
//! - [`cluster`]: the one cluster runner — real controller processes on loopback, started,
//!   killed, paused, restarted, joined, with failpoints, logs and metrics.
//! - [`wire`]: the one wire client of the tests (blocking, plaintext or TLS) and the one-shot
//!   questions built on it (`hello` probes, an immediate `waitPrimary`, HTTP).
//! - [`fake`]: scripted fake controllers for the failover tests, fast retry settings, a test
//!   PKI made at test time.
//! - [`ports`]: loopback ports below the kernel's ephemeral range for clusters of real
//!   controller processes.
//! - [`procs`]: whether a SIGSTOP has taken effect on every thread of a process; reaping one.

pub mod cluster;
pub mod fake;
pub mod ports;
pub mod procs;
pub mod wire;
