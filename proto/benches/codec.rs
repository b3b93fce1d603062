//! Codec throughput: encode and decode of a `joblist` reply (`ReplyData::Jobs`) with 10,
//! 1,000 and 10,000 realistic jobs. Throughput is the framed size, so criterion reports MB/s.
//!
//! Quick run: `cargo bench -p xce-proto --bench codec -- --warm-up-time 1 --measurement-time 3`

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use xce_proto::wire::*;

const USERS: [&str; 5] = ["alice", "bob", "carol", "dmitri", "svc-nightly"];
const QUEUES: [&str; 3] = ["normal", "long", "gpu"];

/// A job as a busy cluster would list it: mixed states, most with a host and usage.
fn job(i: u64) -> Job {
    let state = [
        JobState::Run,
        JobState::Pend,
        JobState::Done,
        JobState::Run,
        JobState::Exit,
    ][i as usize % 5];
    let started = state != JobState::Pend;
    let t0 = 1_700_000_000_000 + i as i64 * 1_000;
    Job {
        job_id: 0x5eed_0000_0000_0000 | i,
        name: format!("sim-{:05}-run{}", i, i % 7),
        user: USERS[i as usize % USERS.len()].into(),
        queue: QUEUES[i as usize % QUEUES.len()].into(),
        command: format!(
            "/opt/sim/bin/solve --mesh /data/mesh{}.h5 --steps {}",
            i % 97,
            100 * i
        ),
        ncpus: 1 << (i % 6),
        mem_mb: 1024 * (1 + i % 64),
        state,
        pend_reason: if started {
            String::new()
        } else {
            "not enough free slots".into()
        },
        exec_host: if started {
            format!("node{:04}", i % 1500)
        } else {
            String::new()
        },
        submit_time: t0,
        start_time: if started { t0 + 5_000 } else { 0 },
        end_time: if matches!(state, JobState::Done | JobState::Exit) {
            t0 + 60_000
        } else {
            0
        },
        exit_code: if state == JobState::Exit { 137 } else { 0 },
        usage: if started {
            Usage {
                cpu_ms: 1_000 * i,
                mem_kb: 512 * 1024,
            }
        } else {
            Usage::default()
        },
    }
}

fn codec(c: &mut Criterion) {
    let limits = Limits::default();
    let mut group = c.benchmark_group("jobs_reply");
    group.sample_size(30);
    for n in [10u64, 1_000, 10_000] {
        let reply = Reply::ok(42, ReplyData::Jobs((0..n).map(job).collect()));
        let mut frame = Vec::new();
        encode_reply(&reply, &mut frame);
        assert_eq!(decode_reply(&frame, &limits).as_ref(), Ok(&reply));
        group.throughput(Throughput::Bytes(frame.len() as u64));

        let mut out = Vec::with_capacity(frame.len());
        group.bench_with_input(BenchmarkId::new("encode", n), &reply, |b, r| {
            b.iter(|| {
                out.clear();
                encode_reply(black_box(r), &mut out);
                black_box(out.len())
            })
        });
        group.bench_with_input(BenchmarkId::new("decode", n), &frame, |b, f| {
            b.iter(|| decode_reply(black_box(f), &limits).unwrap())
        });
        group.bench_with_input(BenchmarkId::new("encode+decode", n), &reply, |b, r| {
            b.iter(|| {
                out.clear();
                encode_reply(black_box(r), &mut out);
                decode_reply(&out, &limits).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
