//! The typed Rust client (the context). Filled in by issue #4.
