//! P7: encode + decode of a `joblist` reply of 10, 1,000 and 10,000 jobs, in process.

use std::hint::black_box;
use std::time::{Duration, Instant};

use xce_proto::wire::{self, Job, JobState, Limits, Reply, ReplyData, Usage};

use super::table::{num, Table, Verdict};
use super::{BenchOpts, Summary};

/// Job counts measured; the verdict compares the per-job cost of the last two.
const SIZES: [usize; 3] = [10, 1_000, 10_000];
/// Per-job cost at 10,000 jobs may exceed the cost at 1,000 by this factor and still count
/// as linear (caches: 10,000 jobs no longer fit in L2).
const LINEAR_TOLERANCE: f64 = 1.25;

/// A job as the controller reports it, with strings of typical length.
pub fn sample_job(i: usize) -> Job {
    // One job in three runs; the others pend.
    let phase = i % 3;
    let running = phase == 0;
    Job {
        job_id: 0x0001_0000_0000 + i as u64,
        name: format!("job-{i:06}"),
        user: format!("user{:02}", i % 50),
        queue: "normal".into(),
        command: format!("/usr/bin/simulate --input /data/in/{i:06}.dat --steps 1000"),
        ncpus: 1 + (i % 8) as u32,
        mem_mb: 512 * (1 + (i % 4) as u64),
        state: if running {
            JobState::Run
        } else {
            JobState::Pend
        },
        pend_reason: if running {
            String::new()
        } else {
            "no free slot".into()
        },
        exec_host: if running {
            format!("node{:03}", i % 200)
        } else {
            String::new()
        },
        submit_time: 1_700_000_000_000 + i as i64,
        start_time: if running { 1_700_000_100_000 } else { 0 },
        end_time: 0,
        exit_code: 0,
        usage: Usage {
            cpu_ms: i as u64 * 10,
            mem_kb: 4096,
        },
    }
}

/// The reply of a `joblist` returning `n` jobs.
pub fn joblist_reply(n: usize) -> Reply {
    Reply::ok(7, ReplyData::Jobs((0..n).map(sample_job).collect()))
}

struct Row {
    jobs: usize,
    bytes: usize,
    per_iter: Summary,
}

/// One size under measurement: its reply, a reusable buffer, and the batch length.
struct Case {
    reply: Reply,
    buf: Vec<u8>,
    batch: u32,
    per_iter: Vec<f64>,
}

impl Case {
    fn new(n: usize) -> Case {
        let reply = joblist_reply(n);
        let mut c = Case {
            reply,
            buf: Vec::new(),
            batch: 1,
            per_iter: Vec::new(),
        };
        // Batches of about 2 ms so that the clock's cost is negligible even for 10 jobs.
        let t = Instant::now();
        let mut k = 0u32;
        while t.elapsed() < Duration::from_millis(2) || k == 0 {
            c.once();
            k += 1;
        }
        c.batch = k.max(1);
        c
    }

    fn once(&mut self) {
        let limits = Limits::default();
        self.buf.clear();
        wire::encode_reply(black_box(&self.reply), &mut self.buf);
        black_box(wire::decode_reply(&self.buf, &limits).expect("decode"));
    }

    fn batch(&mut self) {
        let t = Instant::now();
        for _ in 0..self.batch {
            self.once();
        }
        self.per_iter
            .push(t.elapsed().as_secs_f64() * 1e6 / f64::from(self.batch));
    }
}

/// Times `encode_reply` + `decode_reply` of each size in batches, one batch of each size in
/// turn (so that load from other processes hits every size alike), for about `budget` per size.
fn measure(budget: Duration, min_batches: usize) -> Vec<Row> {
    let mut cases: Vec<Case> = SIZES.iter().map(|&n| Case::new(n)).collect();
    let start = Instant::now();
    let total = budget * SIZES.len() as u32;
    let mut rounds = 0;
    while (start.elapsed() < total || rounds < min_batches) && rounds < 100_000 {
        for c in &mut cases {
            c.batch();
        }
        rounds += 1;
    }
    cases
        .into_iter()
        .zip(SIZES)
        .map(|(c, jobs)| Row {
            jobs,
            bytes: c.buf.len(),
            per_iter: Summary::of(&c.per_iter).expect("non-empty"),
        })
        .collect()
}

pub fn run(opts: &BenchOpts) -> Table {
    let budget = Duration::from_millis(opts.pick(300, 1500));
    let rows = measure(budget, 20);
    let mut t = Table::new(
        "P7",
        "codec: encode + decode of a joblist reply (in process)",
    );
    t.note(format!(
        "method: wire::encode_reply + wire::decode_reply of the same reply, in batches of ~2 ms, \
         the sizes taking turns batch by batch for ~{} ms each; time per encode+decode from the batch means",
        budget.as_millis()
    ));
    t.columns(&[
        "jobs",
        "frame bytes",
        "p50 µs",
        "p90 µs",
        "max µs",
        "MB/s (p50)",
        "ns/job (p50)",
        "batches",
    ]);
    for r in &rows {
        let mbps = r.bytes as f64 / r.per_iter.p50; // bytes per µs == MB/s
        t.row(vec![
            r.jobs.to_string(),
            r.bytes.to_string(),
            num(r.per_iter.p50),
            num(r.per_iter.p90),
            num(r.per_iter.max),
            num(mbps),
            num(r.per_iter.p50 * 1e3 / r.jobs as f64),
            r.per_iter.n.to_string(),
        ]);
    }
    let per_job = |r: &Row| r.per_iter.p50 / r.jobs as f64;
    let (mid, big) = (&rows[1], &rows[2]);
    let growth = per_job(big) / per_job(mid);
    t.result(format!(
        "per-job cost 10,000 vs 1,000 jobs: {growth:.2}× (1.00× = perfectly linear); \
         10,000 jobs: {:.0} MB/s, {:.2} ms per encode+decode",
        big.bytes as f64 / big.per_iter.p50,
        big.per_iter.p50 / 1e3
    ));
    t.target(
        format!("MB/s reported, linear in job count (per-job cost at 10,000 ≤ {LINEAR_TOLERANCE}× that at 1,000)"),
        Verdict::from(
            growth <= LINEAR_TOLERANCE,
            format!("{growth:.2}× per-job cost; {:.0} MB/s at 10,000 jobs", big.bytes as f64 / big.per_iter.p50),
        ),
    );
    t
}
