//! libxce: the client library of the job-scheduler cluster, with transparent controller
//! failover. See ARCHITECTURE.md for the layers and docs/ for the contract.
//!
//! Layers, each importing only the ones before it (`tests/module_order.rs` checks this order,
//! and that no files import each other in a circle):
//! `error` → `wire` → `process` (process-wide state, fork) → `transport` → `failover` →
//! `client` → `ffi` (the C surface) → `testing` (what the repository's own tests reach).
//!
//! The public surface is the C exports (`ffi`) and the Rust client (`client`: `Client` and
//! the types its methods take and return); the protocol's types are `xce-proto`'s. Every
//! other layer is the crate's own (`pub(crate)`), so nothing outside can come to depend on it.
//!
//! Only `ffi` is C surface: the other modules are marked `cbindgen:ignore`, so cbindgen
//! generates the same header whether it parses the crate or `src/ffi/mod.rs`.

/// cbindgen:ignore
pub(crate) mod error;
/// cbindgen:ignore
pub(crate) mod wire;

/// cbindgen:ignore
pub(crate) mod process;

/// cbindgen:ignore
pub(crate) mod transport;

/// cbindgen:ignore
pub(crate) mod failover;

/// cbindgen:ignore
pub mod client;

pub mod ffi;

/// cbindgen:ignore
#[doc(hidden)]
pub mod testing;

pub use error::{strerror, Error, TlsCause};
