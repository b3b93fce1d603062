//! Transport layer: one TCP or TLS 1.3 connection to one controller, with connect and reply
//! deadlines, wire framing, and waits that another thread can interrupt (F8, F9, F13).
//!
//! Everything here is non-blocking sockets plus `poll(2)` on the socket and the context's
//! [`Waker`]; the library starts no thread (c-api.md).

pub mod waker;

pub use waker::{Wait, Waker};
pub mod tls;
