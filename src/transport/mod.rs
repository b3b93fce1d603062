//! Transport layer: one TCP or TLS 1.3 connection to one controller, with connect and reply
//! deadlines, wire framing, and waits that another thread can interrupt (F8, F9, F13, F21).
//!
//! Everything here is non-blocking sockets plus `poll(2)` on the socket and an eventfd lent by
//! [`waker`]. The one thread the library ever starts is `resolve`'s short-lived lookup helper
//! (F23: getaddrinfo cannot be bounded otherwise), which runs no callback and takes no signal.
//! The only `unsafe` are the documented syscalls (eventfd, poll, socket, connect, getsockopt,
//! fstat, close, pthread_sigmask) and getaddrinfo.

pub mod conn;
pub mod fdcheck;
pub mod resolve;
pub mod tls;
pub mod waker;

/// P15's TLS record layer, shared with the controller: `xce-proto`'s `proto/src/records.rs`.
pub use xce_proto::records;

pub use conn::{Connection, Progress};
pub use resolve::{LookupFailure, ResolveError};
pub use waker::{CallSettle, CancelToken, WakeState, Waker};
