//! The node: the shared context (`Ctx`) the ports and the node's tasks use, tenures as
//! primary, membership changes, the progress a `waitPrimary` reports, the primary's
//! consistency check (C19), online snapshots (C20) and leader transfer (C14 on demand).

pub mod backup;
pub mod check;
pub mod ctx;
pub mod membership;
pub mod peers;
pub mod progress;
pub mod tenure;
pub mod transfer;
pub mod vouch;
