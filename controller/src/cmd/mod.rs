//! The commands: `run` (one node), `cluster`, `pki`, `member`, `status`, `snapshot`.

pub mod cluster;
pub mod member;
pub mod pki;
pub mod run;
pub mod snapshot;
pub mod status;
