//! C23: the controller's consensus protocol, model-checked.
//!
//! A model of the rules the controller adds to or changes in Raft — openraft 0.9 in its "adv"
//! leader-id mode with the four changes of `controller/vendor/openraft/XCE-PATCH.md`, the
//! election timer, pre-vote and early campaign of `controller/src/raft/elect.rs`, C11's lease
//! and guard (`raft/lease.rs`), C12's blank node (`raft/amnesia.rs`), C14's handover
//! (`raft/handover.rs`) — checked exhaustively with [stateright] within a bound. Each rule
//! names, beside it, the code that implements it; each known defect is an option of
//! [`Options`] that puts the defect back, and the tests show the checker finds it.
//! `docs/model.md` says what is modelled, the bounds, the results and what is not modelled.
//!
//! - `options.rs`: the rule sets and bounds;
//! - `state.rs`: nodes, messages, the ghost history;
//! - `rules.rs`: each node's decisions, pure;
//! - `actions.rs` (+ `actions/`): the steps;
//! - `properties.rs`: what must hold in every reachable state.

pub mod actions;
pub mod options;
pub mod properties;
pub mod rules;
pub mod run;
pub mod state;

pub use actions::{Action, Raft};
pub use options::{Bounds, Options, Start, Timing, C12, FAST, SLOW};
