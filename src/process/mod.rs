//! Process-wide state, in one room that knows about `fork` (F20, F21, F26).
//!
//! Everything the library keeps for the whole process lives here, below the transport: the
//! pool of wake pipes that waits borrow ([`fdpool`], [`wakepipe`]), what a descriptor named when the library
//! opened it ([`fdident`], F21), the table of C handles ([`handles`], F20), the identity of the
//! process (client ids and job ids, [`identity`], F26), and the locks that make the rest
//! (the resolver's cache, the log sink, interned texts) safe across `fork` ([`fork`]), and the
//! registry of waits between threads that refuses a wait closing a cycle ([`waits`]).
//!
//! Fork rules (docs/c-api.md, "Fork"): a `pthread_atfork` handler, installed lazily and once
//! when the first process-wide lock is registered, takes every registered lock before the
//! fork (so no other thread is inside one at that instant) and releases them in the parent;
//! in the child it resets what belonged to the parent's threads (pooled wake pipes are closed,
//! the resolver's cache and lookups in flight are forgotten, log-sink invocations of threads
//! that do not exist in the child are forgotten) and bumps the fork generation, so that every
//! context re-keys its client identity before its next request. The pid is checked as well:
//! a child made without the handler (a raw `clone`) is recognised on its first call.
//!
//! The only `unsafe` here are documented syscalls (`pthread_atfork`, `getpid`, `getrandom`,
//! `fstat`, `pipe2`, `close`, `read`, `write`).

pub mod fdident;
pub mod fdpool;
pub mod fork;
pub mod handles;
pub mod identity;
pub mod waits;
pub mod wakepipe;

pub use fdident::current_pid;
pub use fork::{generation as fork_generation, ForkLock};
