//! Allocation behaviour of the codec: on the steady path (a typical request or status reply
//! encoded into a reused buffer) the message is built on the stack; the one heap allocation
//! left is capnp's internal list of segments (a `Vec` pushed by `message::Builder`, which
//! capnp offers no way to reuse). A hostile length prefix must not make anyone allocate what
//! it claims.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::*;
use xce_proto::wire::*;

/// Counts this thread's allocations (tests run on several threads at once).
struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
    static BYTES: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        let _ = BYTES.try_with(|c| c.set(c.get() + l.size()));
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        let _ = BYTES.try_with(|c| c.set(c.get() + n));
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// (allocations, bytes) made by `f` on this thread.
fn count(f: impl FnOnce()) -> (usize, usize) {
    let (a, b) = (ALLOCS.with(Cell::get), BYTES.with(Cell::get));
    f();
    (ALLOCS.with(Cell::get) - a, BYTES.with(Cell::get) - b)
}

#[test]
fn steady_path_encoding_allocates_only_capnps_segment_list() {
    let mut out = Vec::with_capacity(64 << 10);
    let mut msgs: Vec<Request> = sample_ops()
        .into_iter()
        .enumerate()
        .map(|(i, o)| request(i as u64, o))
        .collect();
    msgs.push(request(1, Op::JobInfo { job_id: 5 }));
    for r in &msgs {
        let (allocs, bytes) = count(|| {
            out.clear();
            encode_request(r, &mut out);
        });
        assert!(
            allocs <= 1 && bytes <= 64,
            "{}: {allocs} allocations, {bytes} bytes",
            r.op.name()
        );
    }
    for rep in [
        Reply::status(9, -xce_proto::error::E_XCE_NOT_READY),
        Reply::ok(9, ReplyData::JobId(5)),
        reply(9, sample_datas().swap_remove(1)),
    ] {
        let (allocs, bytes) = count(|| {
            out.clear();
            encode_reply(&rep, &mut out);
        });
        assert!(
            allocs <= 1 && bytes <= 64,
            "{rep:?}: {allocs} allocations, {bytes} bytes"
        );
    }
}

#[test]
fn large_encoding_allocates_once_not_per_job() {
    let rep = reply(1, ReplyData::Jobs((0..1000).map(sample_job).collect()));
    let mut out = Vec::with_capacity(1 << 20);
    let (allocs, _) = count(|| encode_reply(&rep, &mut out));
    // One heap segment sized by the estimate, and capnp's segment list: not per job.
    assert_eq!(allocs, 2);
}

#[test]
fn decoding_allocates_only_what_it_returns() {
    let l = Limits::default();
    let mut f = Vec::new();
    encode_request(&request(1, Op::Nop), &mut f);
    let (allocs, _) = count(|| {
        decode_request(&f, &l).unwrap();
    });
    assert_eq!(allocs, 0);
}

#[test]
fn hostile_prefixes_cost_nothing() {
    let l = Limits::default();
    // 16 MiB claimed within the limit, nothing behind it.
    let mut t = 0u32.to_le_bytes().to_vec();
    t.extend_from_slice(&((DEFAULT_MAX_MESSAGE_BYTES / 8 - 1) as u32).to_le_bytes());
    let (_, bytes) = count(|| {
        assert_eq!(frame_len(&t, &l), Ok(Some(DEFAULT_MAX_MESSAGE_BYTES)));
        assert_eq!(decode_reply(&t, &l), Err(xce_proto::Error::Proto));
        let mut buf = Vec::new();
        let r = read_frame(&mut &t[..], &l, &mut buf);
        assert_eq!(r, Err(xce_proto::Error::Errno(libc::ECONNRESET)));
    });
    assert!(bytes < 64 << 10, "{bytes} bytes allocated");
}
