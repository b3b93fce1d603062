//! The base: what every other folder may use, and which uses nothing of theirs — node ids
//! and addresses, the clocks, configuration and its parsing, TLS material, identities and
//! authorization, the metric counters, the log line stamper; the crowd of connections that
//! have not shown who they are, and log lines rate-limited with a count.

pub mod auth;
pub mod background;
pub mod build;
pub mod cause;
pub mod clock;
pub mod cluster_id;
pub mod config;
pub mod counters;
pub mod crash;
pub mod crowd;
pub mod disk;
pub mod failpoints;
pub mod fault;
pub mod ids;
pub mod logstamp;
pub mod ratelog;
pub mod tls;
