//! Transport layer: one TCP or TLS 1.3 connection to one controller, with connect and reply
//! deadlines, wire framing, and waits that another thread can interrupt (F8, F9, F13, F21).
//!
//! Everything here is non-blocking sockets plus `poll(2)` on the socket and an eventfd lent by
//! [`waker`]; the library starts no thread (c-api.md). The only `unsafe` are the documented
//! syscalls (eventfd, poll, socket, connect, getsockopt, fstat, close).

pub mod conn;
pub mod fdcheck;
pub mod tls;
pub mod waker;

pub use conn::{Connection, MAX_STRAY_REPLIES};
pub use waker::{CancelToken, Wait, WakeState, Waker};
