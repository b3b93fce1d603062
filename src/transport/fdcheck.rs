//! F21: the library's descriptors are its own. What a descriptor named when opened, and the
//! checks before reuse, live with the rest of the process-wide state ([`crate::process`]); the
//! transport uses them for its sockets (`conn.rs`) and its waits (`waker.rs`).

pub use crate::process::fdident::FdIdent;
