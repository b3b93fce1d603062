//! Fuzz target: the TLS record decoder (`xce_proto::records`, issue 28) under hostile
//! input — records sealed under the right keys and mangled, raw bytes, any header, split
//! across reads at any point. A panic, a hang, memory beyond what arrived, or a result that
//! depends on how the bytes were split is a bug. The harness is
//! `proto/src/records/fuzzing.rs` (compiled with `--cfg fuzzing`, which cargo-fuzz sets;
//! its property test runs the same harness in `cargo test`). See ../README.md.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xce_proto::records::fuzzing::records_open;

fuzz_target!(|data: &[u8]| records_open(data));
