//! The ports: the client port (the client protocol), the raft port's listener and the metrics
//! endpoint.

pub mod client;
pub mod metrics;
pub mod peer;
