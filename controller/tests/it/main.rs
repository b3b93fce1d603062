//! The controller's integration tests, one binary (as openraft's `tests/`): real
//! `xce-controller` processes on loopback (`common.rs` and the test kit's cluster runner and
//! wire client), one module per subject. Run one with
//! `cargo test -p xce-controller --test it MODULE::`.

mod common;

mod adaptive;
mod amnesia;
mod anonymous;
mod cluster_cmd;
mod compaction;
mod consistency;
mod disk_guard;
mod docs_drift;
mod early_campaign;
mod failover;
mod forwarding;
mod handover;
mod hostile_clients;
mod hostile_raft;
mod leader_flush;
mod leader_transfer;
mod liveness;
mod logs;
mod member_checks;
mod membership;
mod metrics;
mod old_list;
mod operator;
mod outcomes;
mod own_cert;
mod panics;
mod prevote;
mod removed;
mod restore;
mod single_node;
mod status;
mod storage_faults;
mod tenure;
mod tls;
mod transfer_new_member;
