//! The checks a history must pass: [`linearizable`], the linearizability of concurrent
//! writes and listings (used by the network-fault rounds, S11 and P9, and the scenarios).

pub mod linearizable;
