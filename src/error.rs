//! Status codes of the protocol (protocol.md) and the library's error type: the protocol
//! crate's (`xce-proto`, `proto/src/error.rs`), named here for the library's own code.

#![deny(unsafe_code)]

pub use xce_proto::error::*;
