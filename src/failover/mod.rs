//! Failover layer (failover.md F1–F19): pure decisions, and the one retry loop that applies them.
//!
//! - [`classify`]: an attempt's outcome → success / retry now / retry after backoff / terminal (F4).
//! - [`backoff`]: the jittered exponential schedule and `XCE_RETRY_DEFAULTS` (F6).
//! - [`budget`]: when a call rotates, sleeps or gives up, and with which error (F7).
//! - [`rotate`]: redirect hint first, else the next master; sticky current master (F3, F5).
//! - [`env`]: reading the `XCE_*` variables (F15); [`log`]: the replaceable log sink (F14),
//!   which also says once which `XCE_*` values were not used.
//! - [`options`], [`report`]: the knobs (F8, F15), counters, events and last-error report (F17, F19).
//! - [`wait_primary`]: where to ask for the primary while backing off, and whether to follow
//!   the answer (F18, F25).
//! - [`slot`]: callbacks whose replacement is final (F20).
//! - [`suspicion`]: when a reply is late (F25).
//! - [`retry`]: the loop — the one place with sockets, sleeps and callbacks.

// No `unsafe` in this layer (ARCHITECTURE.md: only ffi, the documented syscalls of transport
// and process, and error.rs have any); the compiler holds it to that.
#![deny(unsafe_code)]

pub mod backoff;
pub mod budget;
pub mod classify;
pub mod env;
pub mod log;
pub mod rotate;

pub use backoff::{RetryConfig, XCE_RETRY_DEFAULTS};
pub use classify::AttemptOutcome;
pub use rotate::{Endpoint, HintPolicy, Rotator, MAX_LEARNED_MASTERS};
pub mod options;
pub mod report;
pub mod retry;
pub mod slot;
pub mod suspicion;
pub mod wait_primary;

pub use options::{ClientOption, Options};
pub use report::{CallReport, Event, EventHandler, Stats};
