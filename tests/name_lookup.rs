//! F23: name lookups obey the clock, through a real `Client` and the system's getaddrinfo.
//!
//! Each test body runs in a child process (this test binary again, one test selected) with
//! `LD_PRELOAD` set to a tiny shim compiled here with `cc`. The shim interposes getaddrinfo for
//! names ending in `.test` (everything else goes to the C library through `dlsym(RTLD_NEXT)`):
//! - `*.gate.test`: blocks until the file `$XCE_SHIM_DIR/open` exists (at most 30 s), then
//!   answers 127.0.0.1 — a lookup the test ends exactly when it wants;
//! - `*.slow.test`: sleeps `$XCE_SHIM_DELAY_MS` (default 2000), then answers 127.0.0.1;
//! - `*.flaky.test`: `EAI_AGAIN` while `$XCE_SHIM_DIR/fault` exists, else 127.0.0.1;
//! - `*.bad.test`: `EAI_NONAME`.
//!
//! Every interposed lookup appends its name to `$XCE_SHIM_DIR/calls`, so a test can count
//! them. The child also sees the library's helper threads (`/proc/self/task/*/comm`) and its
//! wake pipes (`/proc/self/fd`) without other tests running beside it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use xce::client::{Client, Config};
use xce::client::{Endpoint, Event, Options};
use xce::Error;
use xce_testkit::fake::*;

mod common;

/// Set in the child: run the test body instead of spawning.
const CHILD_ENV: &str = "XCE_NAME_LOOKUP_CHILD";
/// A child that has not finished by then is killed and the test fails.
const CHILD_LIMIT: Duration = Duration::from_secs(180);

const SHIM_C: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void path_of(char *buf, size_t len, const char *file) {
    const char *dir = getenv("XCE_SHIM_DIR");
    snprintf(buf, len, "%s/%s", dir ? dir : "/nonexistent", file);
}

static int exists(const char *file) {
    char p[4096];
    path_of(p, sizeof p, file);
    return access(p, F_OK) == 0;
}

static void sleep_ms(long ms) {
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&t, &t) != 0) {}
}

static void note(const char *node) {
    char p[4096];
    path_of(p, sizeof p, "calls");
    int fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        dprintf(fd, "%s\n", node);
        close(fd);
    }
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res) {
    gai_fn real = (gai_fn)dlsym(RTLD_NEXT, "getaddrinfo");
    int numeric = hints && (hints->ai_flags & AI_NUMERICHOST);
    if (node && !numeric && ends_with(node, ".test")) {
        note(node);
        if (ends_with(node, ".gate.test")) {
            for (int i = 0; i < 30 * 200 && !exists("open"); i++) sleep_ms(5);
        } else if (ends_with(node, ".slow.test")) {
            const char *d = getenv("XCE_SHIM_DELAY_MS");
            sleep_ms(d ? atol(d) : 2000);
        } else if (ends_with(node, ".flaky.test")) {
            if (exists("fault")) return EAI_AGAIN;
        } else if (ends_with(node, ".bad.test")) {
            return EAI_NONAME;
        }
        return real("127.0.0.1", service, hints, res);
    }
    return real(node, service, hints, res);
}
"#;

/// Compiles the shim once per test process (atomically replacing an older copy).
fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let pid = std::process::id();
        let src = dir.join(format!("gai_shim.{pid}.c"));
        let tmp = dir.join(format!("gai_shim.{pid}.so"));
        let so = dir.join("gai_shim.so");
        std::fs::write(&src, SHIM_C).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = Command::new(&cc)
            .args([
                "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-o",
            ])
            .arg(&tmp)
            .arg(&src)
            .arg("-ldl")
            .output()
            .unwrap_or_else(|e| panic!("running {cc}: {e}"));
        let _ = std::fs::remove_file(&src);
        assert!(
            out.status.success(),
            "compiling the getaddrinfo shim failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&tmp, &so).unwrap();
        so
    })
}

/// A directory removed when dropped (also when the test fails).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the calling test's `body` in a child process under the shim (in the child: runs `body`
/// itself). The test is the one running on this thread: libtest names each test's thread after
/// it.
fn in_child(env: &[(&str, &str)], body: impl FnOnce()) {
    if std::env::var_os(CHILD_ENV).is_some() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(maps.contains("gai_shim"), "the shim is not loaded");
        body();
        return;
    }
    let test = std::thread::current()
        .name()
        .expect("a test's thread")
        .to_string();
    let dir = TempDir(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("name_lookup.{}.{test}", std::process::id())),
    );
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let mut vars = vec![
        (CHILD_ENV, std::ffi::OsStr::new("1")),
        ("LD_PRELOAD", shim().as_os_str()),
        ("XCE_SHIM_DIR", dir.0.as_os_str()),
    ];
    vars.extend(env.iter().map(|(k, v)| (*k, std::ffi::OsStr::new(v))));
    let args = [test.as_str(), "--exact", "--nocapture", "--test-threads=1"];
    let common::ChildRun { status, out, err } = common::run_self(&args, &vars, CHILD_LIMIT);
    match status {
        Some(s) if s.success() && out.contains("1 passed") => {}
        Some(s) => panic!("child {test} failed ({s}):\n{out}\n{err}"),
        None => panic!("child {test} still running after {CHILD_LIMIT:?}:\n{out}\n{err}"),
    }
}

fn shim_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("XCE_SHIM_DIR").expect("XCE_SHIM_DIR"))
}

/// Interposed lookups of `name` so far.
fn shim_calls(name: &str) -> usize {
    std::fs::read_to_string(shim_dir().join("calls"))
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == name)
        .count()
}

fn open_gate() {
    std::fs::write(shim_dir().join("open"), b"").unwrap();
}

/// Threads of this process named like the library's lookup helper.
fn lookup_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim_end() == "xce-resolve")
        .count()
}

/// The blocked-signal masks (`SigBlk` of /proc) of this process's threads named `name`.
fn blocked_signals(name: &str) -> Vec<u64> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            if comm.trim_end() != name {
                return None;
            }
            let status = std::fs::read_to_string(dir.join("status")).ok()?;
            let line = status.lines().find(|l| l.starts_with("SigBlk:"))?;
            u64::from_str_radix(line["SigBlk:".len()..].trim(), 16).ok()
        })
        .collect()
}

/// The calling thread's own blocked-signal mask. (Not found by its name: a thread being started
/// carries its creator's name until it renames itself, and the library's helpers block every
/// signal before that — a third "main" thread with a full mask, there for a moment.)
fn own_blocked_signals() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("SigBlk:")).unwrap();
    u64::from_str_radix(line["SigBlk:".len()..].trim(), 16).unwrap()
}

/// Every classic signal that can be blocked (all of 1..=31 but SIGKILL and SIGSTOP).
fn all_blockable() -> u64 {
    (1..=31)
        .filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP)
        .fold(0, |m, s| m | 1 << (s - 1))
}

/// Open wake descriptors of this process (the wake pool's and any lookup's): wake pipes (two
/// fds each), and eventfds (none are the library's any more, F21 amended).
fn eventfds() -> usize {
    let links: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|f| std::fs::read_link(f.ok()?.path()).ok())
        .map(|l| l.to_string_lossy().into_owned())
        .collect();
    let pipes = links.iter().filter(|l| l.starts_with("pipe:")).count();
    let eventfds = links
        .iter()
        .filter(|l| *l == "anon_inode:[eventfd]")
        .count();
    pipes / 2 + eventfds
}

fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < end, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn options(connect_timeout: Duration, call_deadline: Option<Duration>) -> Options {
    Options {
        connect_timeout,
        call_deadline,
        ..fast_options()
    }
}

/// A client on `[a, name:b's port]`, connected to `a` (numeric, no lookup), with `a` then
/// stopped: the next call must go to the named master.
fn client_failing_over_to(
    name: &str,
    options: Options,
    max_retries: u32,
) -> (Client, FakeController) {
    let a = FakeController::start(vec![]);
    let b = FakeController::start(vec![]);
    let masters = vec![a.endpoint(), Endpoint::new(name, b.endpoint().port)];
    let c = Client::start_with(Config::new(masters), options, fast_retry(max_retries))
        .expect("start (on the numeric master)");
    c.hello().expect("hello through the numeric master");
    drop(a);
    (c, b)
}

#[test]
fn a_hung_master_lookup_obeys_the_call_deadline_and_its_late_answer_is_cached() {
    in_child(&[], || {
        let name = "b.gate.test";
        let opts = options(Duration::from_secs(20), Some(Duration::from_secs(1)));
        let (c, _b) = client_failing_over_to(name, opts, 3);
        // `start` began looking up every master name (F23 prefetch): one lookup hangs
        // already, with its helper thread and its completion eventfd.
        let fds = eventfds() - 1;
        // The helper names itself once it runs (a loaded machine may not have run it yet).
        wait_until(
            "the prefetch's lookup thread",
            Duration::from_secs(5),
            || lookup_threads() == 1,
        );
        let main_mask = own_blocked_signals();

        let (r, took) = common::timed(|| c.hello());
        // The lookup hangs until the gate opens (30 s); the call's deadline is 1 s.
        assert!(r.is_err(), "{r:?}");
        assert!(took < Duration::from_secs(6), "the call took {took:?}");
        eprintln!("call with a hung lookup: {r:?} after {took:?}");

        // The lookup goes on alone: one helper thread, one eventfd for its completion.
        assert_eq!(lookup_threads(), 1);
        assert_eq!(eventfds(), fds + 1);
        // The helper takes no signal; the caller's own mask is what it was.
        let helper = blocked_signals("xce-resolve");
        assert_eq!(helper.len(), 1);
        assert_eq!(
            helper[0] & all_blockable(),
            all_blockable(),
            "{:x}",
            helper[0]
        );
        assert_eq!(own_blocked_signals(), main_mask);
        // A second call joins it instead of starting another lookup of the same name.
        let r = c.hello();
        assert!(r.is_err(), "{r:?}");
        assert_eq!(shim_calls(name), 1);
        assert_eq!(lookup_threads(), 1);

        open_gate();
        wait_until(
            "the lookup's thread and eventfd are gone",
            Duration::from_secs(20),
            || lookup_threads() == 0 && eventfds() == fds,
        );
        // The abandoned lookup filled the cache: no new lookup for the next connect.
        c.hello().expect("hello through the named master");
        assert_eq!(shim_calls(name), 1);
        assert_eq!(lookup_threads(), 0);
    });
}

#[test]
fn a_slow_master_lookup_of_2s_ends_a_1s_call_in_time() {
    // The reproduction of issue 9: a 2 s lookup, a 1 s deadline (on main: 2 s or more).
    in_child(&[("XCE_SHIM_DELAY_MS", "2000")], || {
        let opts = options(Duration::from_secs(20), Some(Duration::from_secs(1)));
        let (c, _b) = client_failing_over_to("b.slow.test", opts, 3);
        let (r, took) = common::timed(|| c.hello());
        assert!(r.is_err(), "{r:?}");
        // Below the lookup's own 2 s: the deadline ended the wait, not the lookup.
        assert!(took < Duration::from_millis(1900), "the call took {took:?}");
    });
}

#[test]
fn a_wake_ends_a_hung_master_lookup() {
    in_child(&[], || {
        let opts = options(Duration::from_secs(60), None);
        let (c, _b) = client_failing_over_to("w.gate.test", opts, 3);
        let c = Arc::new(c);
        // The call leaves the stopped numeric master for the named one (its Rotation event,
        // on the call's thread); its next wait is the lookup's, which a wake from then on ends
        // (F13). The prefetch's lookup thread is there before the call: no sign of the call.
        let (rotated, to_named) = std::sync::mpsc::channel();
        let rotated = parking_lot::Mutex::new(rotated);
        c.set_event_handler(Some(Arc::new(move |e: &Event| {
            if matches!(e, Event::Rotation { to, .. } if to.host == "w.gate.test") {
                let _ = rotated.lock().send(());
            }
        })));
        let c2 = c.clone();
        let waker = std::thread::spawn(move || {
            to_named
                .recv_timeout(Duration::from_secs(20))
                .expect("the call goes to the named master");
            assert!(c2.wakeup(), "a call is in progress");
        });
        let (r, took) = common::timed(|| c.hello());
        waker.join().unwrap();
        assert_eq!(r.err(), Some(Error::Errno(libc::EINTR)));
        assert!(took < Duration::from_secs(10), "the call took {took:?}");
        assert_eq!(lookup_threads(), 1, "the lookup itself goes on");
        open_gate();
        wait_until(
            "the lookup's thread is gone",
            Duration::from_secs(20),
            || lookup_threads() == 0,
        );
        c.hello().expect("hello through the named master");
    });
}

#[test]
fn a_failed_lookup_is_reported_as_such_and_the_context_heals() {
    in_child(&[], || {
        let name = "f.flaky.test";
        std::fs::write(shim_dir().join("fault"), b"").unwrap();
        let (c, _b) = client_failing_over_to(name, fast_options(), 2);
        let r = c.hello();
        assert!(r.is_err(), "{r:?}");
        let report = c.last_error().expect("a report").to_string();
        eprintln!("{report}");
        assert!(report.contains("name lookup failed"), "{report}");
        assert!(!report.contains("No route to host"), "{report}");
        // The master's entry says which name and why (getaddrinfo's own text).
        assert!(
            report.contains("name lookup of f.flaky.test failed: Temporary failure"),
            "{report}"
        );
        assert!(shim_calls(name) >= 1);

        // The fault is gone: the same context works at once (failures are not cached).
        std::fs::remove_file(shim_dir().join("fault")).unwrap();
        c.hello().expect("hello once the name resolves again");
    });
}

#[test]
fn a_bad_master_name_is_a_lookup_failure_not_an_unreachable_host() {
    in_child(&[], || {
        let masters = vec![Endpoint::new("x.bad.test", 7000)];
        let r = Client::start_with(Config::new(masters), fast_options(), fast_retry(1));
        let e = r.expect_err("start must fail");
        assert_eq!(e, Error::Lookup, "{e}");
        assert_eq!(e.status(), -xce_proto::error::E_XCE_LOOKUP);
        assert_eq!(e.to_string(), "name lookup failed");
    });
}

#[test]
fn numeric_masters_start_no_lookup_thread() {
    in_child(&[], || {
        let a = FakeController::start(vec![]);
        let c = client(
            &[a.endpoint(), Endpoint::new("::1", 1)],
            fast_options(),
            fast_retry(1),
        );
        let fds = eventfds();
        for _ in 0..20 {
            c.hello().unwrap();
            c.disconnect();
        }
        assert_eq!(lookup_threads(), 0);
        assert_eq!(eventfds(), fds);
        assert_eq!(std::fs::read(shim_dir().join("calls")).ok(), None);
    });
}

#[test]
fn a_forked_child_does_not_wait_for_its_parents_lookups() {
    in_child(&[], || {
        use xce::testing::{resolve, ResolveError};
        use xce::testing::{LookupFailure, WakeState};
        let ws = WakeState::new();
        let w = ws.waker_now();
        let soon = |ms| Instant::now() + Duration::from_millis(ms);
        // A lookup hangs in this process's helper thread.
        assert_eq!(
            resolve("k.gate.test", 1, soon(100), &w),
            Err(ResolveError::Lookup(LookupFailure::TimedOut))
        );
        wait_until("the hung lookup's thread", Duration::from_secs(5), || {
            lookup_threads() == 1
        });
        // SAFETY: fork(2); the child only resolves a name and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // The child has no copy of the parent's helper thread: it must look the name
            // up itself rather than wait for a lookup that will never end here.
            open_gate();
            let r = resolve("k.gate.test", 7, soon(10_000), &w);
            let ok = matches!(&r, Ok(a) if a.iter().all(|a| a.port() == 7));
            // SAFETY: ends the forked child without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above; status is a live c_int.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(rc, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the forked child could not resolve (status {status:#x})"
        );
        // The gate is open for the parent's lookup too.
        wait_until("the parent's lookup ends", Duration::from_secs(20), || {
            lookup_threads() == 0
        });
        assert!(resolve("k.gate.test", 1, soon(0), &w).is_ok());
    });
}

/// A redirect hint naming a host whose lookup takes 2 s: the hint's lookup is bounded by the
/// connect timeout and the call's deadline, done once per reply, and the call reaches the
/// configured primary by rotation instead (the hint cannot be matched to a master in time).
#[test]
fn a_slow_hint_lookup_obeys_the_clock() {
    in_child(&[], || {
        let name = "h.slow.test";
        let primary = FakeController::start(vec![]);
        let standby = FakeController::start(vec![Step::Standby(Some(Endpoint::new(
            name,
            primary.endpoint().port,
        )))]);
        let opts = options(Duration::from_millis(300), Some(Duration::from_secs(1)));
        let c = client(
            &[standby.endpoint(), primary.endpoint()],
            opts,
            fast_retry(3),
        );
        let (_, took) = common::timed(|| c.hello().expect("the primary, by rotation"));
        eprintln!("hint with a 2 s lookup: {took:?}");
        assert!(took < Duration::from_millis(1500), "{took:?}");
        assert_eq!(shim_calls(name), 1, "resolved once");
    });
}
