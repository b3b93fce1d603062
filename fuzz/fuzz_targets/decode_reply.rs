//! Fuzz target: reply decoding from arbitrary bytes (protocol.md "Transport": a malformed
//! message is E_XCE_PROTO, never a crash). See ../README.md.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xce_proto::wire::{decode_reply, encode_reply, frame_len, Limits};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    // The input as a stream, the way the transport sees it: frame after frame.
    let mut rest = data;
    while let Ok(Some(n)) = frame_len(rest, &limits) {
        if n > rest.len() {
            break;
        }
        if let Ok(reply) = decode_reply(&rest[..n], &limits) {
            // Whatever decodes must survive our own encoder unchanged.
            let mut again = Vec::new();
            encode_reply(&reply, &mut again);
            assert_eq!(decode_reply(&again, &limits), Ok(reply));
        }
        rest = &rest[n..];
    }
    // And the whole input as one frame (truncated, trailing bytes...).
    let _ = decode_reply(data, &limits);
});
