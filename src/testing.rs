//! Not API: the library's insides that its own integration tests (`tests/`) and the proof
//! crate's benchmarks reach — a bare `Connection` (P1's floor, the suspicion and happy-path
//! tests), the locks and process identity the fork tests hold across a `fork()`, the name
//! lookups with their getaddrinfo shim. Hidden from the documentation; nothing else outside
//! the crate may use it.

#![deny(unsafe_code)]

pub use crate::failover::options::ENV_VARS;
pub use crate::failover::suspicion::SUSPICION_FLOOR;
pub use crate::ffi::cast::hold_handle_table_while;
pub use crate::process::fdident::{current_pid, identity_syscalls, outside_call, CallProcess};
pub use crate::process::fdpool::hold_lock_while;
pub use crate::process::fork_generation;
pub use crate::transport::resolve::{hold_system_lock_while, resolve};
pub use crate::transport::tls::client_config;
pub use crate::transport::{Connection, LookupFailure, ResolveError, WakeState};
