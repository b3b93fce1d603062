//! Failover layer: classify, backoff, rotate, and the one retry loop (F1-F19). Filled in by issue #4.
