//! The commands: `run` (one node), `cluster`, `pki`, `member`, `leader`, `status`, `snapshot`.

pub mod cluster;
pub mod leader;
pub mod member;
pub mod pki;
pub mod run;
pub mod snapshot;
pub mod status;
