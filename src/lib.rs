//! libxce: the client library of the job-scheduler cluster, with transparent controller
//! failover. See ARCHITECTURE.md for the layers and docs/ for the contract.
//!
//! Layers, each importing only the ones before it (`tests/module_order.rs` checks this order,
//! and that no files import each other in a circle):
//! `error` → `wire` → `process` (process-wide state, fork) → `transport` → `failover` →
//! `client` → `ffi` (the C surface).
//!
//! Only `ffi` is C surface: the other modules are marked `cbindgen:ignore`, so cbindgen
//! generates the same header whether it parses the crate or `src/ffi/mod.rs`.

/// cbindgen:ignore
pub mod error;
/// cbindgen:ignore
pub mod wire;

/// cbindgen:ignore
pub mod process;

/// cbindgen:ignore
pub mod transport;

/// cbindgen:ignore
pub mod failover;

/// cbindgen:ignore
pub mod client;

pub mod ffi;

pub use error::{strerror, Error, TlsCause};
