//! xce-proto: the protocol between libxce and its controllers, shared by both ends — the
//! Cap'n Proto schema (`schema/controller.capnp`, compiled by `build.rs`), the typed messages
//! with the one table of ops (`Op::rule`), the codec and the stream framing with its limits
//! (F22), the status codes the wire carries, and the TLS 1.3 record layer (P15).
//!
//! Layers, each importing only the ones before it (`tests/module_order.rs` checks this order,
//! and that no files import each other in a circle):
//! `error` (status codes, the error type, their texts) → `wire` (schema, messages, codec,
//! framing) → `records` (TLS records after the handshake).

pub mod error;
pub mod records;
pub mod wire;

pub use error::{status_name, status_text, strerror, Error, TlsCause};
