//! Transport layer: one TCP or TLS 1.3 connection to one controller, with connect and reply
//! deadlines, wire framing, and waits that another thread can interrupt (F8, F9, F13).
//!
//! Everything here is non-blocking sockets plus `poll(2)` on the socket and the context's
//! [`Waker`]; the library starts no thread (c-api.md). The only `unsafe` are the documented
//! syscalls (eventfd, poll, socket, connect, getsockopt).

pub mod conn;
pub mod tls;
pub mod waker;

pub use conn::{Connection, MAX_STRAY_REPLIES};
pub use waker::{Wait, Waker};
