//! P8: heap bytes and file descriptors per idle, connected context, and threads started by the
//! library. Run while no other bench thread is alive: the allocator counts every thread.

use super::alloc::live_bytes;
use super::steady::{lib_client, Steady};
use super::table::{Table, Verdict};
use super::BenchOpts;

/// Targets (acceptance.md P8).
const MAX_HEAP_PER_CTX: f64 = 64.0 * 1024.0;
const MAX_FDS_PER_CTX: f64 = 1.0;

fn count_dir(path: &str) -> Result<usize, String> {
    Ok(std::fs::read_dir(path)
        .map_err(|e| format!("{path}: {e}"))?
        .count())
}

/// P8 on the steady cluster: `n` contexts over the masters' addresses, then `m` over a host
/// name. Run while no other bench thread is alive.
pub fn run(steady: &Steady, opts: &BenchOpts) -> Result<Table, String> {
    let masters = steady.cluster.masters();
    let by_address = Idle::measure(&masters, opts.pick(100, 200))?;
    let named = masters.replace("127.0.0.1:", "localhost:");
    let by_name = Named::measure(&named, opts.pick(20, 50))?;
    let mut t = Table::new("P8", "footprint of an idle, connected context");
    by_address.report(&mut t);
    by_name.report(&mut t, &named)?;
    Ok(t)
}

/// `n` idle, connected contexts: heap, descriptors and threads before, with them, and after
/// they are dropped.
struct Idle {
    n: usize,
    heap: [Option<isize>; 3],
    fds: [usize; 3],
    threads: [usize; 2],
}

impl Idle {
    fn measure(masters: &str, n: usize) -> Result<Idle, String> {
        // A first context pays one-time costs (lazy statics, resolver) outside the count.
        let warm = lib_client(masters)?;
        warm.hello().map_err(|e| format!("hello: {e}"))?;
        let mut ctxs = Vec::with_capacity(n);
        let (heap0, fds0, thr0) = (
            live_bytes(),
            count_dir("/proc/self/fd")?,
            count_dir("/proc/self/task")?,
        );
        for _ in 0..n {
            let c = lib_client(masters)?;
            // Connected to the primary and used once, then idle.
            c.hello().map_err(|e| format!("hello: {e}"))?;
            ctxs.push(c);
        }
        let (heap1, fds1, thr1) = (
            live_bytes(),
            count_dir("/proc/self/fd")?,
            count_dir("/proc/self/task")?,
        );
        drop(ctxs);
        let (heap2, fds2) = (live_bytes(), count_dir("/proc/self/fd")?);
        drop(warm);
        Ok(Idle {
            n,
            heap: [heap0, heap1, heap2],
            fds: [fds0, fds1, fds2],
            threads: [thr0, thr1],
        })
    }

    fn report(&self, t: &mut Table) {
        let n = self.n;
        let ([heap0, heap1, heap2], [fds0, fds1, fds2], [thr0, thr1]) =
            (self.heap, self.fds, self.threads);
        t.note(format!(
            "{n} contexts created with Client::start (3 masters), one hello each, then idle; \
             heap = live bytes of a counting #[global_allocator]; fds = /proc/self/fd; threads = /proc/self/task"
        ));
        t.columns(&["quantity", "before", "after", "per context", "after drop"]);
        let per = |a: f64, b: f64| (b - a) / n as f64;
        let heap_per = match (heap0, heap1) {
            (Some(a), Some(b)) => Some(per(a as f64, b as f64)),
            _ => None,
        };
        let show = |v: Option<isize>| v.map_or("n/a".to_string(), |v| v.to_string());
        t.row(vec![
            "heap bytes".into(),
            show(heap0),
            show(heap1),
            heap_per.map_or("n/a (counting allocator not installed)".into(), |h| {
                format!("{h:.0} B = {:.1} KiB", h / 1024.0)
            }),
            show(heap2),
        ]);
        let fds_per = per(fds0 as f64, fds1 as f64);
        t.row(vec![
            "open fds".into(),
            fds0.to_string(),
            fds1.to_string(),
            format!("{fds_per:.2}"),
            fds2.to_string(),
        ]);
        let thr = thr1 as i64 - thr0 as i64;
        t.row(vec![
            "threads".into(),
            thr0.to_string(),
            thr1.to_string(),
            format!("{thr} started in total"),
            "-".into(),
        ]);
        if fds_per > MAX_FDS_PER_CTX {
            t.result(format!(
                "fds: each context holds its socket; waits borrow wake pipes from a process-wide pool (process::fdpool, F13): {fds_per:.0} per context"
            ));
        }
        Idle::targets(t, heap_per, fds_per, thr);
    }

    /// Heap ≤ 64 KiB, 1 fd per idle context, no thread started by the library.
    fn targets(t: &mut Table, heap_per: Option<f64>, fds_per: f64, thr: i64) {
        match heap_per {
            Some(h) => t.target(
                "heap ≤ 64 KiB per idle context",
                Verdict::from(
                    h <= MAX_HEAP_PER_CTX,
                    format!(
                        "{:.1} KiB, {:.0}% of the limit",
                        h / 1024.0,
                        h / MAX_HEAP_PER_CTX * 100.0
                    ),
                ),
            ),
            None => t.target(
                "heap ≤ 64 KiB per idle context",
                Verdict::NotMeasured(
                    "run through xce-bench: the counting allocator is installed there".into(),
                ),
            ),
        }
        t.target(
            "1 fd per idle context",
            Verdict::from(
                fds_per <= MAX_FDS_PER_CTX,
                if fds_per <= MAX_FDS_PER_CTX {
                    format!("{fds_per:.2}")
                } else {
                    format!("{fds_per:.2} fds, {:.2} over", fds_per - MAX_FDS_PER_CTX)
                },
            ),
        );
        t.target(
            "0 threads started by the library",
            Verdict::from(thr <= 0, format!("{thr}")),
        );
    }
}

/// The same with the masters given by host name (`localhost`): name lookups run on
/// short-lived helper threads (F23), which must be gone once the contexts are idle, and must
/// not cost descriptors either.
struct Named {
    m: usize,
    fds: [usize; 2],
    threads: [usize; 2],
    /// From the last hello until the helper threads were gone (at most 1 s).
    settled: std::time::Duration,
}

impl Named {
    fn measure(named: &str, m: usize) -> Result<Named, String> {
        // Threads before any lookup of the name: the first context below looks `localhost` up
        // on a helper thread (the others are answered from the resolver's cache, fresh for 30 s).
        let thr0 = count_dir("/proc/self/task")?;
        // As above, a first context pays the one-time costs (the lookup, the wake-pipe pool's two
        // fds that lookups wait on) outside the fd count.
        let warm = lib_client(named)?;
        warm.hello()
            .map_err(|e| format!("hello (host names): {e}"))?;
        let fds0 = count_dir("/proc/self/fd")?;
        let mut ctxs = Vec::with_capacity(m);
        for _ in 0..m {
            let c = lib_client(named)?;
            c.hello().map_err(|e| format!("hello (host names): {e}"))?;
            ctxs.push(c);
        }
        let fds1 = count_dir("/proc/self/fd")?;
        // The helper thread exits once its lookup is answered: wait for that (bounded), and say
        // how long it took.
        let idle = std::time::Instant::now();
        let mut thr1 = count_dir("/proc/self/task")?;
        while thr1 > thr0 && idle.elapsed() < std::time::Duration::from_secs(1) {
            std::thread::sleep(std::time::Duration::from_millis(5));
            thr1 = count_dir("/proc/self/task")?;
        }
        let settled = idle.elapsed();
        drop(ctxs);
        drop(warm);
        Ok(Named {
            m,
            fds: [fds0, fds1],
            threads: [thr0, thr1],
            settled,
        })
    }

    fn report(&self, t: &mut Table, named: &str) -> Result<(), String> {
        let (m, [fds0, fds1], [thr0, thr1]) = (self.m, self.fds, self.threads);
        let named_fds = (fds1 as f64 - fds0 as f64) / m as f64;
        let named_thr = thr1 as i64 - thr0 as i64;
        t.note(format!(
            "then 1 + {m} contexts with the masters given by host name ({named}), one hello each: \
             the first looks the name up on a helper thread, the rest use the resolver's cache; \
             threads counted from before the first lookup until they are back (at most 1 s)"
        ));
        t.row(vec![
            "open fds, host-name masters".into(),
            fds0.to_string(),
            fds1.to_string(),
            format!("{named_fds:.2}"),
            count_dir("/proc/self/fd")?.to_string(),
        ]);
        t.row(vec![
            "threads, host-name masters".into(),
            thr0.to_string(),
            thr1.to_string(),
            format!(
                "{named_thr} left {:.0} ms after the last hello",
                self.settled.as_secs_f64() * 1e3
            ),
            "-".into(),
        ]);
        t.target(
            "host-name masters: 1 fd per idle context, 0 library threads once idle",
            Verdict::from(
                named_fds <= MAX_FDS_PER_CTX && named_thr <= 0,
                format!("{named_fds:.2} fds, {named_thr} threads"),
            ),
        );
        Ok(())
    }
}
