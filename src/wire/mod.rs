//! Wire layer: the protocol crate's schema, typed messages, codec and framing (`xce-proto`,
//! `proto/src/wire/`), named here for the library's own code.

#![deny(unsafe_code)]

pub use xce_proto::wire::*;
