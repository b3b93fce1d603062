//! The checks a history must pass: [`linearizable`], the linearizability of concurrent
//! writes and listings (used by the network-fault rounds, S11 and P9, and the scenarios);
//! [`porcupine`], porcupine's checker (Wing & Gong / Lowe with memoisation, P-compositionality),
//! and [`job_table`], the job table as its models (S18, S20).

pub mod job_table;
pub mod linearizable;
pub mod porcupine;
