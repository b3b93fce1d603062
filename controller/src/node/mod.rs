//! The node: the shared context (`Ctx`) the ports and the node's tasks use, tenures as
//! primary, membership changes, the progress a `waitPrimary` reports.

pub mod ctx;
pub mod membership;
pub mod progress;
pub mod tenure;
