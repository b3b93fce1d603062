//! libxce: the client library of the job-scheduler cluster, with transparent controller
//! failover. See ARCHITECTURE.md for the layers and ../shared/spec/ for the contract.
//!
//! Layers, each importing only the ones before it:
//! `wire` → `transport` → `failover` → `client` → `ffi` (the only `unsafe` boundary).

pub mod error;
pub mod wire;

pub mod transport;

pub mod failover;

pub mod client;

pub mod ffi;

pub use error::{strerror, Error};
