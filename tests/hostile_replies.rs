//! F22 (failover.md): hostile replies are bounded. A fake controller on loopback answers each
//! op with a hand-made Cap'n Proto reply that claims far more than it carries — lists of
//! zero-size (or one-byte) elements, many text pointers aliasing one large text, absurd
//! element counts, hosts whose attribute lists alias one list — and, as the legitimate
//! extreme, a 16 MiB frame of real jobs. Each case goes through the Rust `Client` and through
//! the C surface (the exports called from Rust, their results released with the documented
//! free functions), and a counting global allocator measures the **peak live bytes** of the
//! calling thread during the call: it must stay within a small multiple of the frame's size.
//! One case runs in a child process under `RLIMIT_AS` = 1 GiB, where an unbounded decode
//! used to abort the process ("memory allocation of … bytes failed").

use std::os::raw::c_char;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capnp::traits::HasStructSize;
use xce::client::Client;
use xce::client::{Endpoint, Options};
use xce::ffi::config::*;
use xce::ffi::ops::*;
use xce::ffi::types::*;
use xce::Error;
use xce_proto::wire::controller_capnp as cp;
use xce_proto::wire::*;
use xce_testkit::fake::{client, fast_options, fast_retry, ok_reply, FakeController, Raw, Step};

mod common;
mod counting_alloc;
use counting_alloc::measure;

/// The bound F22 asks for: a small constant factor of the frame, plus a constant for the
/// call's own bookkeeping (request encoding, a reconnect's socket and read buffer).
fn bound(frame: usize) -> usize {
    16 * frame + (512 << 10)
}

// ---------------------------------------------------------------------------------------
// Hand-made Cap'n Proto (encoding spec: struct and list pointers, inline-composite tags).

/// Element size codes: 0 void, 2 byte, 7 inline composite (count = words then).
fn lptr(off: isize, size: u64, count: u64) -> u64 {
    (((off as i64 as u64) << 2) & 0xFFFF_FFFC) | 1 | size << 32 | count << 35
}

fn tag(count: u64, data: u16, ptrs: u16) -> u64 {
    count << 2 | u64::from(data) << 32 | u64::from(ptrs) << 48
}

fn size_of_struct<T: HasStructSize>() -> (u16, u16) {
    (T::STRUCT_SIZE.data, T::STRUCT_SIZE.pointers)
}

/// One single-segment message as words, starting from a real reply (our encoder) and then
/// rewired by hand.
#[derive(Clone)]
struct Msg {
    w: Vec<u64>,
}

impl Msg {
    fn from_data(data: ReplyData) -> Msg {
        let mut out = Vec::new();
        encode_reply(&Reply::ok(0, data), &mut out);
        assert_eq!(&out[..4], &[0, 0, 0, 0], "one segment");
        let w: Vec<u64> = out[8..]
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        Msg { w }
    }

    /// (first word, data words, pointer count) of the struct the pointer at `at` points to.
    fn deref(&self, at: usize) -> (usize, usize, usize) {
        let p = self.w[at];
        assert_eq!(p & 3, 0, "struct pointer");
        let off = ((p as u32 as i32) >> 2) as isize;
        let start = (at as isize + 1 + off) as usize;
        (start, (p >> 32 & 0xFFFF) as usize, (p >> 48) as usize)
    }

    /// Index of the reply's `data` union pointer (the only non-null pointer of the templates).
    fn union_ptr(&self) -> usize {
        let (s, d, p) = self.deref(0);
        let slots: Vec<usize> = (s + d..s + d + p).filter(|&i| self.w[i] != 0).collect();
        assert_eq!(slots.len(), 1, "template has one non-null pointer");
        slots[0]
    }

    fn push(&mut self, words: impl IntoIterator<Item = u64>) -> usize {
        let at = self.w.len();
        self.w.extend(words);
        at
    }

    /// Appends `n` zero words.
    fn zeros(&mut self, n: usize) -> usize {
        self.push(std::iter::repeat(0).take(n))
    }

    /// Appends a NUL-terminated text of `len` bytes 'x'; returns (first word, byte count).
    fn text(&mut self, len: usize) -> (usize, u64) {
        let mut bytes = vec![b'x'; len];
        bytes.push(0);
        bytes.resize(bytes.len().div_ceil(8) * 8, 0);
        let at = self.push(
            bytes
                .chunks(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap())),
        );
        (at, len as u64 + 1)
    }

    fn point_list(&mut self, at: usize, target: usize, size: u64, count: u64) {
        self.w[at] = lptr(target as isize - at as isize - 1, size, count);
    }

    /// The framed reply to `seq`.
    fn frame(&self, seq: u64) -> Vec<u8> {
        let mut w = self.w.clone();
        let (root, _, _) = self.deref(0);
        w[root] = seq; // Reply.seq is the first data word.
        let mut out = Vec::with_capacity(8 + w.len() * 8);
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(w.len() as u32).to_le_bytes());
        for x in w {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out
    }
}

/// The list fields a reply can carry.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Jobs,
    Hosts,
    Resources,
    ResVals,
    Controllers,
    Queues,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::Jobs,
        Kind::Hosts,
        Kind::Resources,
        Kind::ResVals,
        Kind::Controllers,
        Kind::Queues,
    ];

    /// A template reply of this kind, and the pointer that holds the list.
    fn template(self) -> (Msg, usize) {
        let data = match self {
            Kind::Jobs => ReplyData::Jobs(vec![]),
            Kind::Hosts => ReplyData::Hosts(vec![]),
            Kind::Resources => ReplyData::Resources(vec![]),
            Kind::ResVals => ReplyData::ResVals(vec![]),
            Kind::Controllers | Kind::Queues => ReplyData::ClusterConf(ClusterConf::default()),
        };
        let m = Msg::from_data(data);
        let u = m.union_ptr();
        let at = match self {
            // ClusterConf pointers: clusterName, controllers, queues.
            Kind::Controllers | Kind::Queues => {
                let (s, d, _) = m.deref(u);
                s + d + if self == Kind::Controllers { 1 } else { 2 }
            }
            _ => u,
        };
        (m, at)
    }
}

/// A reply whose list claims `n` elements of zero size (an inline-composite tag and nothing).
fn zero_size(kind: Kind, n: u64) -> Msg {
    let (mut m, at) = kind.template();
    let t = m.push([tag(n, 0, 0)]);
    m.point_list(at, t, 7, 0);
    m
}

/// A job list sent as `List(Void)` of `n` elements: no bytes at all behind the claim.
fn void_jobs(n: u64) -> Msg {
    let (mut m, at) = Kind::Jobs.template();
    m.point_list(at, at + 1, 0, n);
    m
}

/// A job list sent as `List(UInt8)`: each byte reads as one (mostly default) job.
fn byte_jobs(n: usize) -> Msg {
    let (mut m, at) = Kind::Jobs.template();
    let t = m.zeros(n.div_ceil(8));
    m.point_list(at, t, 2, n as u64);
    m
}

/// `n` full-size jobs whose six text pointers all alias one text of `len` bytes.
fn shared_text_jobs(n: usize, len: usize) -> Msg {
    let (mut m, at) = Kind::Jobs.template();
    let (d, p) = size_of_struct::<cp::job::Builder<'_>>();
    let words = usize::from(d) + usize::from(p);
    let t = m.push([tag(n as u64, d, p)]);
    m.zeros(n * words);
    m.point_list(at, t, 7, (n * words) as u64);
    let (txt, count) = m.text(len);
    for i in 0..n {
        let ptrs = t + 1 + i * words + usize::from(d);
        for k in 0..6 {
            m.point_list(ptrs + k, txt, 2, count);
        }
    }
    m
}

/// A job list claiming 2^29 - 1 full-size elements with nothing behind them.
fn huge_count_jobs() -> Msg {
    let (mut m, at) = Kind::Jobs.template();
    let (d, p) = size_of_struct::<cp::job::Builder<'_>>();
    let n = (1u64 << 29) - 1;
    let t = m.push([tag(n, d, p)]);
    m.point_list(at, t, 7, n);
    m
}

/// A job list whose tag claims 2^28 full-size elements in a list of 0 words.
fn tag_overrun_jobs() -> Msg {
    let (mut m, at) = Kind::Jobs.template();
    let (d, p) = size_of_struct::<cp::job::Builder<'_>>();
    let t = m.push([tag(1 << 28, d, p)]);
    m.point_list(at, t, 7, 0);
    m
}

/// `n` full-size hosts whose `attrs` all point to one list of `m` key/values: zero-size ones,
/// or full-size ones whose keys all alias one text of `len` bytes (`len` = 0: zero-size).
fn nested_hosts(n: usize, m_kv: usize, len: usize) -> Msg {
    let (mut m, at) = Kind::Hosts.template();
    let (d, p) = size_of_struct::<cp::host::Builder<'_>>();
    let words = usize::from(d) + usize::from(p);
    let t = m.push([tag(n as u64, d, p)]);
    m.zeros(n * words);
    m.point_list(at, t, 7, (n * words) as u64);
    let (kd, kp) = if len == 0 {
        (0, 0)
    } else {
        size_of_struct::<cp::key_value::Builder<'_>>()
    };
    let kw = usize::from(kd) + usize::from(kp);
    let kvs = m.push([tag(m_kv as u64, kd, kp)]);
    m.zeros(m_kv * kw);
    if len > 0 {
        let (txt, count) = m.text(len);
        for i in 0..m_kv {
            m.point_list(kvs + 1 + i * kw + usize::from(kd), txt, 2, count);
        }
    }
    for i in 0..n {
        // Host pointers: name, attrs.
        let attrs = t + 1 + i * words + usize::from(d) + 1;
        m.point_list(attrs, kvs, 7, (m_kv * kw) as u64);
    }
    m
}

/// A legitimate reply of real jobs as close to 16 MiB as fits under the limit.
fn legit_jobs_16mib() -> (Msg, usize) {
    let job = |i: usize| Job {
        job_id: i as u64 + 1,
        name: format!("job-{i:07}"),
        user: format!("user{:02}", i % 50),
        queue: "normal".into(),
        command: format!("/usr/bin/simulate --input /data/in/{i:07}.dat --steps 1000"),
        pend_reason: if i % 3 == 0 {
            String::new()
        } else {
            "no free slot".into()
        },
        exec_host: format!("node{:03}", i % 200),
        ncpus: 4,
        mem_mb: 1024,
        submit_time: 1_700_000_000_000 + i as i64,
        ..Default::default()
    };
    let probe = Msg::from_data(ReplyData::Jobs((0..1000).map(job).collect()));
    let per_job = probe.w.len() * 8 / 1000;
    let n = (DEFAULT_MAX_MESSAGE_BYTES - (64 << 10)) / per_job;
    let m = Msg::from_data(ReplyData::Jobs((0..n).map(job).collect()));
    assert!(m.w.len() * 8 + 8 <= DEFAULT_MAX_MESSAGE_BYTES);
    assert!(m.w.len() * 8 > DEFAULT_MAX_MESSAGE_BYTES - (256 << 10));
    (m, n)
}

// ---------------------------------------------------------------------------------------
// The fake controller: `hello` / `waitPrimary` get a primary's answer, every other op the
// crafted reply (with the request's seq).

fn hostile(msg: Msg) -> FakeController {
    let msg = Arc::new(msg);
    FakeController::answering(Step::Raw(Raw(Arc::new(move |req: &Request| {
        match req.op {
            Op::Hello(_) | Op::WaitPrimary { .. } => {
                let mut out = Vec::new();
                encode_reply(&ok_reply(req), &mut out);
                out
            }
            _ => msg.frame(req.seq),
        }
    }))))
}

// ---------------------------------------------------------------------------------------
// Clients.

/// Generous timeouts (a 16 MiB reply on a loaded machine), one sleep at most: a rejected
/// reply ends the call quickly with `E_XCE_PROTO`.
fn options() -> Options {
    Options {
        connect_timeout: Duration::from_secs(5),
        reply_timeout: Duration::from_secs(30),
        ..fast_options()
    }
}

fn rust_client(ep: Endpoint) -> Client {
    client(&[ep], options(), fast_retry(1))
}

/// A C context on `ep` with the same knobs.
fn c_ctx(ep: &Endpoint) -> xce::ffi::xcecli_ctx_t {
    // SAFETY: all-zero is a valid config; it is initialised right after.
    let mut conf: xce_client_config_t = unsafe { std::mem::zeroed() };
    assert_eq!(xce_client_config_init(&mut conf), 0);
    let list = std::ffi::CString::new(format!("{}:{}", ep.host, ep.port)).unwrap();
    assert_eq!(xce_client_config_parse_masters(&mut conf, list.as_ptr()), 1);
    let mut ctx = std::ptr::null_mut();
    assert_eq!(xcecli_start(&conf, &mut ctx), 0);
    let retry = xce_retry_config_t {
        max_retries: 1,
        initial_retry_ms: 10,
        max_retry_ms: 40,
        backoff_multiplier: 2.0,
    };
    assert_eq!(xcecli_set_retry_config(ctx, &retry), 0);
    assert_eq!(xcecli_set_option(ctx, XCE_OPT_REPLY_TIMEOUT_MS, 30_000), 0);
    assert_eq!(xcecli_set_option(ctx, XCE_OPT_WAIT_PRIMARY, 0), 0);
    ctx
}

/// The Rust op for a kind; Ok(element count).
fn rust_op(c: &Client, kind: Kind) -> Result<usize, Error> {
    match kind {
        Kind::Jobs => c.joblist(JobFilter::default()).map(|v| v.len()),
        Kind::Hosts => c
            .workerlist()
            .map(|v| v.len() + v.iter().map(|h| h.attrs.len()).sum::<usize>()),
        Kind::Resources => c.reslist().map(|v| v.len()),
        Kind::ResVals => c.resval("h").map(|v| v.len()),
        Kind::Controllers => c.clusterconf().map(|x| x.controllers.len()),
        Kind::Queues => c.clusterconf().map(|x| x.queues.len()),
    }
}

/// A list the C surface fills through `get`, released with `free` when it was; its status.
fn listed<T>(get: impl FnOnce(*mut *mut T) -> i32, free: extern "C" fn(*mut T, usize)) -> i32 {
    let mut out = std::ptr::null_mut();
    let n = get(&mut out);
    if n >= 0 {
        free(out, n as usize);
    }
    n
}

/// The C op for a kind, its result released with the documented free function; its status.
fn c_op(ctx: xce::ffi::xcecli_ctx_t, kind: Kind) -> i32 {
    match kind {
        Kind::Jobs => {
            // Both shapes: the seeds' NULL-terminated array and the filtered flat array.
            let mut all = std::ptr::null_mut();
            let n = xcecli_joblist(ctx, &mut all);
            if n >= 0 {
                xce_free_joblist(all);
            }
            let m = listed(
                |o| xcecli_joblist_filter(ctx, std::ptr::null(), o),
                xce_free_jobs,
            );
            assert_eq!(n.signum(), m.signum(), "both shapes agree");
            n
        }
        Kind::Hosts => listed(|o| xcecli_workerlist(ctx, o), xce_free_hosts),
        Kind::Resources => listed(|o| xcecli_reslist(ctx, o), xce_free_resources),
        Kind::ResVals => listed(
            |o| xcecli_resval(ctx, c"h".as_ptr() as *const c_char, o),
            xce_free_resvals,
        ),
        Kind::Controllers | Kind::Queues => {
            let mut out = std::ptr::null_mut();
            let rc = xcecli_clusterconf(ctx, &mut out);
            if rc >= 0 {
                // SAFETY: out is the live conf just returned.
                let n = unsafe {
                    if kind == Kind::Controllers {
                        (*out).ncontrollers
                    } else {
                        (*out).nqueues
                    }
                };
                xce_free_cluster_conf(out);
                return n as i32;
            }
            rc
        }
    }
}

/// The hostile cases: (name, op kind, reply).
fn hostile_cases() -> Vec<(String, Kind, Msg)> {
    let case = |kind: Kind, what: &str, msg| (format!("{kind:?}: {what}"), kind, msg);
    let mut v: Vec<_> = Kind::ALL
        .iter()
        .map(|&k| case(k, "100,000 zero-size elements", zero_size(k, 100_000)))
        .collect();
    use Kind::{Hosts, Jobs};
    v.extend([
        case(Jobs, "List(Void) of 100,000", void_jobs(100_000)),
        case(
            Jobs,
            "List(UInt8) of 65,536 one-byte jobs",
            byte_jobs(1 << 16),
        ),
        case(
            Jobs,
            "64 jobs x 6 texts aliasing one 64 KiB text",
            shared_text_jobs(64, 64 << 10),
        ),
        case(
            Jobs,
            "64 jobs x 6 texts aliasing one 15-byte text (fits)",
            shared_text_jobs(64, 15),
        ),
        case(Jobs, "2^29-1 declared, none sent", huge_count_jobs()),
        case(Jobs, "tag claims 2^28 in 0 words", tag_overrun_jobs()),
        case(
            Hosts,
            "300 hosts sharing 1,000 zero-size attrs",
            nested_hosts(300, 1000, 0),
        ),
        case(
            Hosts,
            "20 hosts sharing 50 attrs aliasing one 16 KiB key",
            nested_hosts(20, 50, 16 << 10),
        ),
    ]);
    v
}

fn frame_bytes(m: &Msg) -> usize {
    8 + m.w.len() * 8
}

#[test]
fn hostile_replies_through_the_rust_client_cost_memory_proportional_to_the_frame() {
    let mut failures = vec![];
    for (name, kind, msg) in hostile_cases() {
        let f = frame_bytes(&msg);
        let server = hostile(msg);
        let c = rust_client(server.endpoint());
        let t = Instant::now();
        let (r, peak, _) = measure(|| rust_op(&c, kind));
        let took = t.elapsed();
        eprintln!(
            "F22 rust | {name:<58} | frame {f:>8} B | peak {peak:>10} B ({:>7.1}x) | {took:>9.1?} | {r:?}",
            peak as f64 / f as f64
        );
        if peak > bound(f) {
            failures.push(format!("{name}: peak {peak} B > bound {} B", bound(f)));
        }
        // Whatever is decoded is at most what the bytes can legitimately carry; the rest is
        // a protocol error, and the context stays usable.
        if let Ok(n) = r {
            if n > f {
                failures.push(format!("{name}: {n} elements from {f} bytes"));
            }
        }
        c.hello()
            .unwrap_or_else(|e| panic!("{name}: unusable after: {e}"));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn hostile_replies_through_the_c_surface_cost_memory_proportional_to_the_frame() {
    let mut failures = vec![];
    for (name, kind, msg) in hostile_cases() {
        let f = frame_bytes(&msg);
        let server = hostile(msg);
        let ctx = c_ctx(&server.endpoint());
        let t = Instant::now();
        let (rc, peak, _) = measure(|| c_op(ctx, kind));
        let took = t.elapsed();
        eprintln!(
            "F22 C    | {name:<58} | frame {f:>8} B | peak {peak:>10} B ({:>7.1}x) | {took:>9.1?} | rc {rc}",
            peak as f64 / f as f64
        );
        if peak > bound(f) {
            failures.push(format!("{name}: peak {peak} B > bound {} B", bound(f)));
        }
        if rc >= 0 && rc as usize > f {
            failures.push(format!("{name}: {rc} elements from {f} bytes"));
        }
        let mut info = std::ptr::null_mut();
        assert_eq!(xcecli_hello(ctx, &mut info), 0, "{name}: unusable after");
        xce_free_controller_info(info);
        xcecli_stop(ctx);
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The legitimate extreme: a 16 MiB frame of real jobs decodes whole (Rust and C), within
/// the same bound, and the connection keeps no large buffer once the call is over.
#[test]
fn a_16mib_frame_of_real_jobs_decodes_within_the_bound_and_leaves_no_large_buffer() {
    let (msg, n) = legit_jobs_16mib();
    let f = frame_bytes(&msg);
    let server = hostile(msg);

    let c = rust_client(server.endpoint());
    c.hello().unwrap();
    let (r, peak, left) = measure(|| c.joblist(JobFilter::default()).map(|v| v.len()));
    eprintln!("F22 rust | 16 MiB of real jobs ({n}) | frame {f} B | peak {peak} B | left {left} B");
    assert_eq!(r, Ok(n));
    assert!(peak <= bound(f), "peak {peak} B > bound {} B", bound(f));
    // The connection is still open (and reused below): its buffers must be small again.
    assert!(left < 256 << 10, "{left} B kept after the call");
    assert_eq!(c.joblist(JobFilter::default()).map(|v| v.len()), Ok(n));

    let ctx = c_ctx(&server.endpoint());
    let check_last = |last: &xce_job_t| {
        assert_eq!(last.jobid, n as u64);
        // SAFETY: a library string, NUL-terminated.
        let name = unsafe { std::ffi::CStr::from_ptr(last.name) };
        assert_eq!(name.to_str().unwrap(), format!("job-{:07}", n - 1));
    };
    let (rc, peak, _) = measure(|| {
        let mut out = std::ptr::null_mut();
        let rc = xcecli_joblist(ctx, &mut out);
        if rc > 0 {
            // SAFETY: out holds rc + 1 pointers, the last NULL.
            unsafe {
                assert!((*out.add(rc as usize)).is_null());
                check_last(&**out.add(rc as usize - 1));
            }
            xce_free_joblist(out);
        }
        rc
    });
    eprintln!("F22 C    | 16 MiB of real jobs ({n}), xcecli_joblist | frame {f} B | peak {peak} B");
    assert_eq!(rc, n as i32);
    assert!(peak <= bound(f), "peak {peak} B > bound {} B", bound(f));
    let (rc, peak, _) = measure(|| {
        let mut out = std::ptr::null_mut();
        let rc = xcecli_joblist_filter(ctx, std::ptr::null(), &mut out);
        if rc > 0 {
            // SAFETY: out holds rc jobs.
            check_last(unsafe { &*out.add(rc as usize - 1) });
            xce_free_jobs(out, rc as usize);
        }
        rc
    });
    eprintln!(
        "F22 C    | 16 MiB of real jobs ({n}), xcecli_joblist_filter | frame {f} B | peak {peak} B"
    );
    assert_eq!(rc, n as i32);
    assert!(peak <= bound(f), "peak {peak} B > bound {} B", bound(f));
    let (_, _, left) = measure(|| {
        let mut info = std::ptr::null_mut();
        assert_eq!(xcecli_hello(ctx, &mut info), 0);
        xce_free_controller_info(info);
    });
    assert!(left < 256 << 10, "{left} B kept after the next call");
    xcecli_stop(ctx);
}

// ---------------------------------------------------------------------------------------
// The reported defect in its original size, in a child process with 1 GiB of address space.

const CHILD_ENV: &str = "XCE_F22_RLIMIT_CHILD";
const CHILD_OK: &str = "F22 child: no abort";

#[test]
fn four_million_zero_size_jobs_under_a_1gib_address_space_do_not_abort() {
    let args = [
        "--exact",
        "child_four_million_zero_size_jobs_under_rlimit_as",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ];
    let env = [(CHILD_ENV, std::ffi::OsStr::new("1"))];
    let run = common::run_self(&args, &env, Duration::from_secs(120));
    let text = run.out + &run.err;
    eprintln!("{text}");
    let status = run.status.expect("child did not finish within 120 s");
    assert!(status.success(), "child failed ({status}):\n{text}");
    assert!(text.contains(CHILD_OK), "child did not report:\n{text}");
}

/// Run only by the test above, in its own process.
#[test]
#[ignore = "child process of four_million_zero_size_jobs_under_a_1gib_address_space_do_not_abort"]
fn child_four_million_zero_size_jobs_under_rlimit_as() {
    assert!(std::env::var_os(CHILD_ENV).is_some(), "run by the parent");
    let lim = libc::rlimit {
        rlim_cur: 1 << 30,
        rlim_max: 1 << 30,
    };
    // SAFETY: setrlimit reads the live struct.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
    // Just under the old traversal limit (2 x 16 MiB in words), so the old decoder accepted it.
    let msg = zero_size(Kind::Jobs, 4_000_000);
    println!("frame {} bytes", frame_bytes(&msg));
    let server = hostile(msg);
    let ctx = c_ctx(&server.endpoint());
    let t = Instant::now();
    let mut out = std::ptr::null_mut();
    let rc = xcecli_joblist(ctx, &mut out);
    println!("C joblist: rc {rc} after {:?}", t.elapsed());
    if rc >= 0 {
        xce_free_joblist(out);
    }
    xcecli_stop(ctx);
    let c = rust_client(server.endpoint());
    let t = Instant::now();
    let r = c.joblist(JobFilter::default()).map(|v| v.len());
    println!("Rust joblist: {r:?} after {:?}", t.elapsed());
    assert_eq!(rc, -xce_proto::error::E_XCE_PROTO);
    assert_eq!(r, Err(Error::Proto));
    println!("{CHILD_OK}");
}
