//! Round trips through the codec and the framing: every op, every reply payload, random
//! messages (proptest), streams of several frames, and frames at odd offsets.

mod common;

use common::*;
use proptest::prelude::*;
use xce_proto::wire::*;

/// The encoder sizes its first segment from an upper-bound estimate: a message that spills
/// into a second segment means the estimate is wrong (still valid, but slower).
fn assert_single_segment(frame: &[u8]) {
    assert_eq!(
        &frame[..4],
        &[0, 0, 0, 0],
        "encoder produced a multi-segment message"
    );
}

#[test]
fn samples_cover_every_variant() {
    let ops: Vec<usize> = sample_ops().iter().map(op_index).collect();
    assert_eq!(ops, (0..OP_VARIANTS).collect::<Vec<_>>());
    let datas: Vec<usize> = sample_datas().iter().map(data_index).collect();
    assert_eq!(datas, (0..DATA_VARIANTS).collect::<Vec<_>>());
}

#[test]
fn every_op_round_trips() {
    let l = Limits::default();
    for (i, op) in sample_ops().into_iter().enumerate() {
        for seq in [i as u64 + 1, u64::MAX - i as u64] {
            let req = request(seq, op.clone());
            let frame = enc_req(&req);
            assert_eq!(
                frame_len(&frame, &l),
                Ok(Some(frame.len())),
                "{}",
                op.name()
            );
            assert_single_segment(&frame);
            assert_eq!(decode_request(&frame, &l), Ok(req), "{}", op.name());
        }
    }
}

#[test]
fn every_reply_payload_round_trips() {
    let l = Limits::default();
    for (i, data) in sample_datas().into_iter().enumerate() {
        let rep = reply(i as u64 + 1, data);
        let frame = enc_rep(&rep);
        assert_eq!(frame_len(&frame, &l), Ok(Some(frame.len())));
        assert_single_segment(&frame);
        assert_eq!(decode_reply(&frame, &l), Ok(rep));
    }
}

#[test]
fn defaults_and_empty_values_round_trip() {
    let l = Limits::default();
    let req = Request {
        seq: 0,
        client_id: [0; 16],
        request_id: 0,
        no_reply: false,
        op: Op::Nop,
        auth_token: String::new(),
        forward_within_ms: 0,
    };
    assert_eq!(decode_request(&enc_req(&req), &l), Ok(req));
    for data in [
        ReplyData::Job(Job::default()),
        ReplyData::Jobs(vec![]),
        ReplyData::Hosts(vec![Host::default()]),
        ReplyData::ClusterConf(ClusterConf::default()),
        ReplyData::CtrlInfo(ControllerInfo::default()),
    ] {
        let rep = Reply::ok(1, data);
        assert_eq!(decode_reply(&enc_rep(&rep), &l), Ok(rep));
    }
    let rep = Reply::status(3, -xce_proto::error::E_XCE_NOT_READY);
    assert_eq!(decode_reply(&enc_rep(&rep), &l), Ok(rep));
}

#[test]
fn large_messages_stay_single_segment() {
    let l = Limits::default();
    let resvals = (0..2000)
        .map(|i| ResVal {
            name: format!("r{i}"),
            value: "x".repeat(i % 40),
        })
        .collect();
    let req = request(
        1,
        Op::UpdateResvals {
            host: "node".into(),
            resvals,
        },
    );
    let frame = enc_req(&req);
    assert_single_segment(&frame);
    assert_eq!(decode_request(&frame, &l), Ok(req));

    let rep = reply(2, ReplyData::Jobs((0..5000).map(sample_job).collect()));
    let frame = enc_rep(&rep);
    assert_single_segment(&frame);
    assert_eq!(decode_reply(&frame, &l), Ok(rep));
}

#[test]
fn encoding_appends_and_frames_split_a_stream() {
    let l = Limits::default();
    let reqs: Vec<Request> = sample_ops()
        .into_iter()
        .enumerate()
        .map(|(i, op)| request(i as u64 + 1, op))
        .collect();
    let mut stream = b"keep".to_vec();
    for r in &reqs {
        encode_request(r, &mut stream);
    }
    assert_eq!(&stream[..4], b"keep");

    // Split with frame_len, as a non-blocking transport would.
    let mut rest = &stream[4..];
    let mut got = Vec::new();
    while !rest.is_empty() {
        let n = complete_frame_len(rest, &l).unwrap().unwrap();
        got.push(decode_request(&rest[..n], &l).unwrap());
        rest = &rest[n..];
    }
    assert_eq!(got, reqs);

    // And with the blocking reader, reusing one buffer.
    let mut r = &stream[4..];
    let mut buf = Vec::new();
    for want in &reqs {
        read_frame(&mut r, &l, &mut buf).unwrap();
        assert_eq!(&decode_request(&buf, &l).unwrap(), want);
    }
    assert_eq!(
        read_frame(&mut r, &l, &mut buf),
        Err(xce_proto::Error::Errno(libc::ECONNRESET))
    );
}

#[test]
fn frames_at_unaligned_offsets_decode() {
    let l = Limits::default();
    let rep = reply(5, sample_datas().swap_remove(2));
    let frame = enc_rep(&rep);
    let mut shifted = vec![0u8; frame.len() + 8];
    for off in 1..8 {
        shifted[off..off + frame.len()].copy_from_slice(&frame);
        assert_eq!(
            decode_reply(&shifted[off..off + frame.len()], &l),
            Ok(rep.clone()),
            "{off}"
        );
    }
}

#[test]
fn multi_segment_messages_decode() {
    // Another writer may split a message into many segments: copy ours into a builder whose
    // segments hold one word each (far pointers everywhere) and read it back.
    let l = Limits::default();
    let rep = reply(9, sample_datas().swap_remove(8));
    let frame = enc_rep(&rep);
    let mut slice = &frame[..];
    let reader =
        capnp::serialize::read_message_from_flat_slice(&mut slice, Default::default()).unwrap();
    let root: xce_proto::wire::controller_capnp::reply::Reader = reader.get_root().unwrap();
    let alloc = capnp::message::HeapAllocator::new()
        .first_segment_words(1)
        .allocation_strategy(capnp::message::AllocationStrategy::FixedSize);
    let mut b = capnp::message::Builder::new(alloc);
    b.set_root(root).unwrap();
    let multi = capnp::serialize::write_message_to_words(&b);
    let segments = u32::from_le_bytes(multi[..4].try_into().unwrap()) + 1;
    assert!(segments > 4, "{segments}");
    assert_eq!(frame_len(&multi, &l), Ok(Some(multi.len())));
    assert_eq!(decode_reply(&multi, &l), Ok(rep));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_requests_round_trip(req in request_strategy()) {
        let l = Limits::default();
        let mut out = vec![1, 2, 3];
        encode_request(&req, &mut out);
        let frame = &out[3..];
        prop_assert_eq!(frame_len(frame, &l), Ok(Some(frame.len())));
        prop_assert_eq!(&frame[..4], &[0, 0, 0, 0]);
        prop_assert_eq!(decode_request(frame, &l), Ok(req));
    }

    #[test]
    fn random_replies_round_trip(rep in reply_strategy()) {
        let l = Limits::default();
        let frame = enc_rep(&rep);
        prop_assert_eq!(frame_len(&frame, &l), Ok(Some(frame.len())));
        prop_assert_eq!(&frame[..4], &[0, 0, 0, 0]);
        prop_assert_eq!(decode_reply(&frame, &l), Ok(rep));
    }
}
