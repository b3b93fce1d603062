//! The node: the shared context (`Ctx`) the ports and the node's tasks use, tenures as
//! primary, membership changes, the progress a `waitPrimary` reports, the primary's
//! consistency check (C19), online snapshots (C20) and their backup file, leader transfer (C14
//! on demand), the listings pinned for paged reads (P12), what the node can vouch for (C3,
//! C10).

pub mod backup;
pub mod backup_file;
pub mod check;
pub mod ctx;
pub mod cursors;
pub mod membership;
pub mod peers;
pub mod progress;
pub mod tenure;
pub mod transfer;
pub mod vouch;
