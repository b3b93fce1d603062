//! Malformed, truncated, oversized and hostile input: always `Error::Proto` (or "need more
//! bytes" from the framing), never a panic, never an allocation taken on trust.
//! protocol.md "Transport": "an oversized or malformed message is E_XCE_PROTO, never a crash".

mod common;

use common::*;
use proptest::prelude::*;
use xce_proto::wire::controller_capnp as cp;
use xce_proto::wire::*;
use xce_proto::Error;

const L: Limits = Limits::with_max_message_bytes(DEFAULT_MAX_MESSAGE_BYTES);

fn table(sizes: &[u32]) -> Vec<u8> {
    let mut v = (sizes.len() as u32).wrapping_sub(1).to_le_bytes().to_vec();
    for s in sizes {
        v.extend_from_slice(&s.to_le_bytes());
    }
    v.resize(v.len().div_ceil(8) * 8, 0);
    v
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("marker not in frame")
}

/// Offsets in a frame from our encoder: 8 bytes of table, the root pointer, then the root
/// struct's data section (single segment, root struct first: capnp's builder layout).
const ROOT_DATA: usize = 16;

#[test]
fn every_truncation_needs_more_bytes_and_does_not_decode() {
    let frames = [
        enc_rep(&reply(1, sample_datas().swap_remove(2))),
        enc_req(&request(2, sample_ops().swap_remove(1))),
        // Multi-segment (table of 2 words).
        {
            let mut f = table(&[1, 0, 2]);
            f.extend_from_slice(&[0; 24]);
            f
        },
    ];
    for frame in &frames {
        let n = frame.len();
        for cut in 0..n {
            let p = &frame[..cut];
            // Until the whole table is there: None; after: the full length, beyond `cut`.
            match frame_len(p, &L) {
                Ok(None) => {}
                Ok(Some(len)) => assert_eq!(len, n, "cut {cut}"),
                Err(e) => panic!("cut {cut}: {e:?}"),
            }
            assert_eq!(complete_frame_len(p, &L), Ok(None), "cut {cut}");
            assert_eq!(decode_reply(p, &L), Err(Error::Proto), "cut {cut}");
            assert_eq!(decode_request(p, &L), Err(Error::Proto), "cut {cut}");
            let mut buf = Vec::new();
            assert_eq!(
                read_frame(&mut &p[..], &L, &mut buf),
                Err(Error::Errno(libc::ECONNRESET)),
                "cut {cut}"
            );
        }
    }
}

#[test]
fn gigabyte_claims_are_refused_before_anything_is_read() {
    for t in [
        table(&[0x4000_0000]),          // 8 GiB in one segment
        table(&[u32::MAX; 2]),          // 2 x 32 GiB
        table(&[0x0020_0000]),          // 16 MiB + table: just over the default limit
        table(&[0x0010_0000; 3]),       // 24 MiB spread over segments
        table(&vec![0x0000_8000; 511]), // 511 x 256 KiB
    ] {
        // A size claim over the limits: "too big", the same from any peer (issue 13).
        assert_eq!(frame_len(&t, &L), Err(Error::TooBig));
        assert_eq!(decode_reply(&t, &L), Err(Error::TooBig));
        let mut buf = Vec::new();
        assert_eq!(read_frame(&mut &t[..], &L, &mut buf), Err(Error::TooBig));
        assert!(buf.capacity() <= t.len().max(64), "{}", buf.capacity());
    }
}

#[test]
fn zero_or_too_many_segments_are_proto() {
    // The count field holds count - 1: 0xFFFFFFFF wraps to zero segments.
    for first in [0xFFFF_FFFFu32, 512, 1000, 0x7FFF_FFFF] {
        let mut t = first.to_le_bytes().to_vec();
        t.extend_from_slice(&[0; 4]);
        assert_eq!(frame_len(&t, &L), Err(Error::Proto), "{first:#x}");
        assert_eq!(frame_len(&t[..4], &L), Err(Error::Proto), "{first:#x}");
        assert_eq!(decode_reply(&t, &L), Err(Error::Proto));
        let mut buf = Vec::new();
        assert_eq!(read_frame(&mut &t[..], &L, &mut buf), Err(Error::Proto));
    }
}

#[test]
fn garbage_is_proto() {
    let mut cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![0; 7],
        vec![0xFF; 64],
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        // A valid table whose segment is a far pointer into a segment that does not exist.
        [table(&[1]), vec![0x02, 0, 0, 0, 0x05, 0, 0, 0]].concat(),
        // A root struct pointer far outside its segment.
        [table(&[1]), vec![0xFC, 0xFF, 0xFF, 0x7F, 1, 0, 1, 0]].concat(),
        // A root that is a list, not a struct.
        [table(&[2]), vec![0x01, 0, 0, 0, 0x0A, 0, 0, 0], vec![0; 8]].concat(),
    ];
    cases.push([table(&[0]), vec![]].concat()); // empty segment: no root pointer at all
    for (i, c) in cases.iter().enumerate() {
        assert_eq!(decode_reply(c, &L), Err(Error::Proto), "case {i}");
        assert_eq!(decode_request(c, &L), Err(Error::Proto), "case {i}");
    }
}

#[test]
fn trailing_bytes_are_proto() {
    let frame = enc_rep(&reply(1, ReplyData::TaskId(5)));
    for extra in [&[0u8][..], &[0; 8], &frame[..]] {
        let f = [&frame[..], extra].concat();
        assert_eq!(
            decode_reply(&f, &L),
            Err(Error::Proto),
            "{} extra",
            extra.len()
        );
    }
}

#[test]
fn unknown_union_members_are_proto() {
    // Reply.data's discriminant is the 8th u16 of Reply's data section (controller_capnp.rs:
    // `get_data_field::<u16>(7)`); Request.op's is the 10th.
    let mut frame = enc_rep(&reply(1, ReplyData::TaskId(5)));
    let at = ROOT_DATA + 2 * 7;
    assert_eq!(
        u16::from_le_bytes([frame[at], frame[at + 1]]),
        9,
        "taskId is member 9"
    );
    assert!(decode_reply(&frame, &L).is_ok());
    // Members 0..=12 exist (11: jobPage, the paged listing; 12: snapshotChunk).
    for bad in [13u16, 14, 0x7FFF, 0xFFFF] {
        frame[at..at + 2].copy_from_slice(&bad.to_le_bytes());
        assert_eq!(decode_reply(&frame, &L), Err(Error::Proto), "{bad}");
    }

    let mut frame = enc_req(&request(1, Op::Nop));
    let at = ROOT_DATA + 2 * 9;
    assert_eq!(
        u16::from_le_bytes([frame[at], frame[at + 1]]),
        20,
        "nop is member 20"
    );
    assert!(decode_request(&frame, &L).is_ok());
    // Members 0..=27 exist (22: joblistPage; 23, 24: memberAdd, memberRemove; 25, 26:
    // consistencyCheck, snapshotSave; 27: leaderTransfer).
    for bad in [28u16, 0xFFFF] {
        frame[at..at + 2].copy_from_slice(&bad.to_le_bytes());
        assert_eq!(decode_request(&frame, &L), Err(Error::Proto), "{bad}");
    }
}

#[test]
fn unknown_enum_values_are_proto() {
    // JobCtrl { jobId @0 :UInt64, action @1 :JobAction }: action follows the id in the data
    // section; find it through a marker id.
    let marker = 0x1122_3344_5566_7788u64;
    let mut frame = enc_req(&request(
        1,
        Op::JobCtrl {
            job_id: marker,
            action: JobAction::Requeue,
        },
    ));
    let at = find(&frame, &marker.to_le_bytes()) + 8;
    assert_eq!(u16::from_le_bytes([frame[at], frame[at + 1]]), 3);
    frame[at..at + 2].copy_from_slice(&4u16.to_le_bytes());
    assert_eq!(decode_request(&frame, &L), Err(Error::Proto));

    // Job.state, inside a list of jobs in a reply: the 7th u16 of the job's data section.
    let mut job = sample_job(1);
    job.job_id = marker;
    let mut frame = enc_rep(&reply(1, ReplyData::Jobs(vec![sample_job(0), job])));
    let at = find(&frame, &marker.to_le_bytes()) + 2 * 6;
    assert_eq!(
        u16::from_le_bytes([frame[at], frame[at + 1]]),
        JobState::Exit as u16
    );
    frame[at..at + 2].copy_from_slice(&5u16.to_le_bytes());
    assert_eq!(decode_reply(&frame, &L), Err(Error::Proto));
}

#[test]
fn non_utf8_text_is_proto() {
    for (i, bad) in [
        &[0xFFu8][..],
        &[0xC3],
        &[0xED, 0xA0, 0x80], /* surrogate */
    ]
    .iter()
    .enumerate()
    {
        let mut r = reply(1, ReplyData::None);
        r.redirect_host = "zzzzzzzz".into();
        let mut frame = enc_rep(&r);
        let at = find(&frame, b"zzzzzzzz");
        frame[at..at + bad.len()].copy_from_slice(bad);
        assert_eq!(decode_reply(&frame, &L), Err(Error::Proto), "case {i}");

        let mut job = sample_job(1);
        job.exec_host = "qqqqqqqq".into();
        let mut frame = enc_rep(&reply(1, ReplyData::Jobs(vec![job])));
        let at = find(&frame, b"qqqqqqqq");
        frame[at + 3..at + 3 + bad.len()].copy_from_slice(bad);
        assert_eq!(decode_reply(&frame, &L), Err(Error::Proto), "case {i}");

        let mut frame = enc_req(&request(
            1,
            Op::Heartbeat {
                host: "wwwwwwww".into(),
            },
        ));
        let at = find(&frame, b"wwwwwwww");
        frame[at + 7..at + 7 + bad.len().min(1)].copy_from_slice(&bad[..1]);
        assert_eq!(decode_request(&frame, &L), Err(Error::Proto), "case {i}");
    }
}

/// A request built straight with the generated code, to put in what our encoder never would.
fn raw_request(client_id: Option<&[u8]>) -> Vec<u8> {
    let mut msg = capnp::message::Builder::new_default();
    let mut r = msg.init_root::<cp::request::Builder>();
    r.set_seq(1);
    if let Some(id) = client_id {
        r.set_client_id(id);
    }
    r.init_op().set_nop(());
    capnp::serialize::write_message_to_words(&msg)
}

#[test]
fn client_id_must_be_16_bytes() {
    assert!(decode_request(&raw_request(Some(&[7; 16])), &L).is_ok());
    for id in [
        None,
        Some(&[][..]),
        Some(&[7; 15][..]),
        Some(&[7; 17][..]),
        Some(&[7; 64][..]),
    ] {
        assert_eq!(
            decode_request(&raw_request(id), &L),
            Err(Error::Proto),
            "{id:?}"
        );
    }
}

#[test]
fn limits_are_enforced_on_valid_messages() {
    let rep = reply(1, ReplyData::Jobs((0..100).map(sample_job).collect()));
    let frame = enc_rep(&rep);
    assert!(decode_reply(&frame, &L).is_ok());
    let small = Limits::with_max_message_bytes(frame.len() - 8);
    assert_eq!(frame_len(&frame, &small), Err(Error::TooBig));
    assert_eq!(decode_reply(&frame, &small), Err(Error::TooBig));
    let exact = Limits::with_max_message_bytes(frame.len());
    assert_eq!(decode_reply(&frame, &exact), Ok(rep));
    let shallow = Limits {
        traversal_limit_words: 100,
        ..L
    };
    assert_eq!(decode_reply(&frame, &shallow), Err(Error::TooBig));
}

#[test]
fn wrong_pointer_kinds_are_proto() {
    // Reply.data.jobs is a list; a struct pointer there must not decode. (A byte list would:
    // Cap'n Proto lets a list of primitives be read as a list of structs, for evolution.)
    let mut msg = capnp::message::Builder::new_default();
    let mut r = msg.init_root::<cp::reply::Builder>();
    r.set_seq(1);
    r.reborrow().init_data().init_jobs(1).get(0).set_name("n");
    let mut frame = capnp::serialize::write_message_to_words(&msg);
    assert!(decode_reply(&frame, &L).is_ok());
    // The data union's pointer is Reply's 2nd pointer, after the 4-word data section
    // (controller_capnp.rs: `StructSize { data: 4, pointers: 2 }`).
    let at = ROOT_DATA + 32 + 8;
    let ptr = u64::from_le_bytes(frame[at..at + 8].try_into().unwrap());
    assert_eq!(ptr & 3, 1, "a list pointer");
    // Same offset, kind 0 (struct) with one data word and no pointers.
    let as_struct = (ptr & 0xFFFF_FFFC) | (1 << 32);
    frame[at..at + 8].copy_from_slice(&as_struct.to_le_bytes());
    assert_eq!(decode_reply(&frame, &L), Err(Error::Proto));
    // Kind 3 (capability) is meaningless in our schema.
    let as_cap = ptr | 3;
    frame[at..at + 8].copy_from_slice(&as_cap.to_le_bytes());
    assert_eq!(decode_reply(&frame, &L), Err(Error::Proto));
}

/// Deterministic byte flips over valid frames of every kind.
#[test]
fn byte_flips_never_panic() {
    let mut frames: Vec<Vec<u8>> = sample_datas()
        .into_iter()
        .map(|d| enc_rep(&reply(3, d)))
        .collect();
    frames.extend(sample_ops().into_iter().map(|o| enc_req(&request(3, o))));
    for frame in &frames {
        for i in 0..frame.len() {
            for v in [0x00, 0xFF, frame[i] ^ 0x01, frame[i] ^ 0x80] {
                let mut f = frame.clone();
                f[i] = v;
                let _ = frame_len(&f, &L);
                let _ = decode_reply(&f, &L);
                let _ = decode_request(&f, &L);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = frame_len(&bytes, &L);
        let _ = complete_frame_len(&bytes, &L);
        prop_assert!(decode_reply(&bytes, &L).is_err() || frame_len(&bytes, &L).is_ok());
        let _ = decode_request(&bytes, &L);
        let mut buf = Vec::new();
        let _ = read_frame(&mut &bytes[..], &L, &mut buf);
    }

    /// Random bodies behind a valid single-segment table: exercises the pointer checks
    /// rather than the framing.
    #[test]
    fn random_bodies_never_panic(body in proptest::collection::vec(any::<u64>(), 1..48)) {
        let mut f = table(&[body.len() as u32]);
        for w in &body {
            f.extend_from_slice(&w.to_le_bytes());
        }
        prop_assert_eq!(frame_len(&f, &L), Ok(Some(f.len())));
        let _ = decode_reply(&f, &L);
        let _ = decode_request(&f, &L);
    }

    #[test]
    fn random_mutations_never_panic(
        rep in reply_strategy(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut f = enc_rep(&rep);
        for (i, v) in flips {
            let i = i.index(f.len());
            f[i] = v;
        }
        let _ = decode_reply(&f, &L);
        let _ = decode_request(&f, &L);
    }
}
