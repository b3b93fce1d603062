//! Transport layer: one TCP/TLS connection to one controller (deadlines, wakeup). Filled in by issue #4.
