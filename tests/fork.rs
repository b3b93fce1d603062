//! F26: fork. Everything here runs in one #[test] (no other test thread of this binary is in
//! the library while it forks), each case forking a child that checks one thing and leaves
//! with `_exit`; a child that does not finish in time is killed and the case fails.
//!
//! - a child forked while another thread holds the resolver's lock resolves a name within its
//!   deadline (before: the child waited forever for a lock its parent's thread held);
//! - the same with the wake-pipe pool's lock and the handle table's lock;
//! - a child forked while another thread runs the log sink replaces the sink at once (before:
//!   it waited forever for an invocation of a thread the child does not have);
//! - a child using an inherited context writes with its own client id, so the parent's next
//!   write is not answered from the controller's dedup table with the child's reply;
//! - a context that another thread was using at the fork fails at once in the child (its
//!   lock and connection belong to a thread the child does not have), never hangs;
//! - a notification the parent queued stays the parent's: the child neither keeps nor sends it;
//! - `new_job_id` never repeats across a fork;
//! - a child forked inside a library call — by a callback, or by the thread itself (a signal
//!   handler) — checks its descriptors as the child for the rest of that call, although the call
//!   read the process id only once (P2).

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xce::client::log;
use xce::client::{new_job_id, Client, Config};
use xce::testing::WakeState;
use xce::testing::{hold_system_lock_while, resolve};
use xce_proto::wire::{JobAction, Op};
use xce_testkit::fake::*;

mod common;

/// How long a child may take before the case fails.
const CHILD_LIMIT: Duration = Duration::from_secs(20);

/// Forks; the child runs `child` and leaves with its result (0: passed). Returns the child's
/// exit code, or `None` when it had to be killed after `CHILD_LIMIT`.
fn fork_and_wait(child: impl FnOnce() -> bool) -> Option<i32> {
    reap(fork_child(child))
}

/// Forks; the child runs `child` and leaves with its result (0: passed). The child's pid.
fn fork_child(child: impl FnOnce() -> bool) -> libc::pid_t {
    // SAFETY: fork(2); the child runs `child` and leaves with _exit (no destructor, no atexit).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(false);
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    pid
}

/// A hook of `xce::testing` that runs a function while it holds one of the library's locks.
type Hold = fn(Box<dyn FnOnce()>);

/// [`fork_and_wait`] while another thread holds a library lock (`hold`), by construction, not
/// by a sleep: the holder says when it has the lock, and this thread forks only then. The fork
/// handler (F26) waits for the lock in its `prepare`; the holder lets go once this thread,
/// having said it forks, is seen blocked in a futex wait (`/proc/self/task/<tid>/syscall`) —
/// or once the fork returned (no handler waited: the child got the lock held, and hangs).
fn fork_while_held(hold: Hold, child: impl FnOnce() -> bool) -> Option<i32> {
    // SAFETY: gettid(2) takes no arguments and cannot fail.
    let forker = unsafe { libc::gettid() };
    let forking = Arc::new(AtomicBool::new(false));
    let forked = Arc::new(AtomicBool::new(false));
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (forking2, forked2) = (forking.clone(), forked.clone());
    let holder = std::thread::spawn(move || {
        hold(Box::new(move || {
            held_tx.send(()).unwrap();
            let end = Instant::now() + CHILD_LIMIT;
            // The forking thread waits for this lock in the fork handler.
            let forker_waits = || forking2.load(SeqCst) && in_futex_wait(forker);
            while !forker_waits() && !forked2.load(SeqCst) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(1));
            }
        }))
    });
    held_rx
        .recv_timeout(CHILD_LIMIT)
        .expect("the holder has the lock");
    forking.store(true, SeqCst);
    let pid = fork_child(child);
    forked.store(true, SeqCst);
    let r = reap(pid);
    holder.join().unwrap();
    r
}

/// Whether thread `tid` of this process is blocked in futex(2) (a lock's wait).
fn in_futex_wait(tid: libc::pid_t) -> bool {
    let path = format!("/proc/self/task/{tid}/syscall");
    let call = std::fs::read_to_string(path).unwrap_or_default();
    call.split_whitespace().next() == Some(&libc::SYS_futex.to_string())
}

/// Asserts that a child of [`fork_and_wait`] passed.
fn passed(r: Option<i32>, what: &str) {
    assert_eq!(r, Some(0), "{what}");
}

/// A pipe for a child's report: (read end, write end).
fn pipe() -> (std::fs::File, std::fs::File) {
    let mut p = [0; 2];
    // SAFETY: pipe2 writes two fds into a live array of two.
    assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds were just created and are owned by nothing else.
    unsafe {
        (
            std::fs::File::from(OwnedFd::from_raw_fd(p[0])),
            std::fs::File::from(OwnedFd::from_raw_fd(p[1])),
        )
    }
}

fn resolver_lock_held_at_fork() {
    let r = fork_while_held(hold_system_lock_while::<Box<dyn FnOnce()>>, || {
        let ws = WakeState::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        resolve("localhost", 7, deadline, &ws.waker_now()).is_ok()
    });
    passed(
        r,
        "the child's first lookup did not return within its deadline (None: hung)",
    );
}

fn pool_and_handle_table_held_at_fork() {
    // The wake-pipe pool's lock: the child's first wait borrows from the pool.
    let r = fork_while_held(xce::testing::hold_lock_while::<Box<dyn FnOnce()>>, || {
        let ws = WakeState::new();
        ws.waker_now().sleep(Duration::from_millis(1)).is_ok()
    });
    passed(r, "the child's first wait (None: hung on the pool's lock)");
    // The handle table's lock: every export looks its handle up there.
    let r = fork_while_held(
        xce::testing::hold_handle_table_while::<Box<dyn FnOnce()>>,
        || {
            let mut stats = std::mem::MaybeUninit::<xce::ffi::hooks::xce_stats_t>::zeroed();
            let bogus = 1usize as xce::ffi::xcecli_ctx_t;
            xce::ffi::hooks::xcecli_get_stats(bogus, stats.as_mut_ptr()) == -libc::EINVAL
        },
    );
    passed(
        r,
        "the child's first export (None: hung on the handle table)",
    );
}

fn log_sink_running_at_fork() {
    let inside = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let (i2, r2) = (inside.clone(), release.clone());
    log::set_level(log::Level::Debug);
    log::set_sink(Some(Arc::new(move |_, _| {
        i2.store(true, SeqCst);
        while !r2.load(SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
    })));
    let logger = std::thread::spawn(|| {
        log::log(
            log::Level::Error,
            format_args!("held in the sink across a fork"),
        )
    });
    while !inside.load(SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let r = fork_and_wait(|| {
        log::set_sink(None); // waits for invocations on other threads: none in the child
        true
    });
    release.store(true, SeqCst);
    logger.join().unwrap();
    log::set_sink(None);
    log::set_level(log::Level::Warn);
    passed(r, "the child could not replace the log sink (None: hung)");
}

fn inherited_context_writes_with_its_own_identity() {
    let fake = FakeController::start(vec![]);
    let c = client(&[fake.endpoint()], fast_options(), fast_retry(3));
    c.jobctrl(1, JobAction::Kill)
        .expect("a write before the fork");
    let parent_id = c.client_id();
    let r = fork_and_wait(|| c.jobctrl(2, JobAction::Kill).is_ok() && c.client_id() != parent_id);
    passed(r, "the child's write through the inherited context failed");
    c.jobctrl(3, JobAction::Kill)
        .expect("the parent's write after the fork");
    assert_eq!(c.client_id(), parent_id, "the parent keeps its identity");
    let writes: Vec<_> = fake
        .requests()
        .into_iter()
        .filter_map(|r| match r.op {
            Op::JobCtrl { job_id, .. } => Some((job_id, r.client_id, r.request_id)),
            _ => None,
        })
        .collect();
    assert_eq!(writes.len(), 3, "{writes:?}");
    let key = |job: u64| {
        writes
            .iter()
            .find(|w| w.0 == job)
            .map(|w| (w.1, w.2))
            .unwrap()
    };
    assert_ne!(
        key(2),
        key(3),
        "the child's and the parent's writes carry the same (client id, request id): the \
         controller answers one from the other's dedup entry"
    );
    assert_ne!(
        key(2).0,
        key(1).0,
        "the child writes with a client id of its own"
    );
}

/// A notification the parent queued and no primary acknowledged yet is the parent's to
/// deliver: the child's first call forgets it (re-sent by both, it would be applied twice).
fn queued_notification_stays_with_the_parent() {
    let fake = FakeController::start((0..50).map(|_| Step::Silent).collect());
    let c = client(&[fake.endpoint()], fast_options(), fast_retry(3));
    c.notify(common::finish(42)).expect("accepted");
    assert_eq!(
        c.outbox_depth(),
        1,
        "unacknowledged by the silent controller"
    );
    let parent_id = c.client_id();
    let r = fork_and_wait(|| {
        // Its own heartbeat only: the parent's notification is not in the child's outbox.
        c.heartbeat("child-host").is_ok() && c.outbox_depth() == 1 && c.client_id() != parent_id
    });
    assert_eq!(r, Some(0), "the child kept the parent's notification");
    assert_eq!(
        c.outbox_depth(),
        1,
        "the parent still owes its notification"
    );
    let resent_by_child = fake
        .requests()
        .into_iter()
        .filter(|r| r.client_id != parent_id && matches!(r.op, Op::Notify(_)))
        .count();
    assert_eq!(
        resent_by_child, 0,
        "the child sent the parent's notification"
    );
}

fn context_busy_on_another_thread_at_fork() {
    let fake = FakeController::start(vec![Step::Silent]);
    let mut opts = fast_options();
    opts.reply_timeout = Duration::from_secs(3);
    let c =
        Client::start_with(Config::new(vec![fake.endpoint()]), opts, fast_retry(0)).expect("start");
    let c2 = c.clone();
    let caller = std::thread::spawn(move || c2.hello());
    assert!(
        fake.wait_requests(1, Duration::from_secs(5)),
        "the call is waiting"
    );
    let other = FakeController::start(vec![]);
    let r = fork_and_wait(|| {
        // The call in progress belongs to a thread the child does not have: the child's calls
        // on that context end at once, its stop returns, and a new context works.
        let t = Instant::now();
        let closed = c.hello().err() == Some(xce::Error::Closed);
        c.close();
        let fresh = Client::start_with(
            Config::new(vec![other.endpoint()]),
            fast_options(),
            fast_retry(0),
        )
        .and_then(|n| n.hello().map(drop))
        .is_ok();
        closed && fresh && t.elapsed() < Duration::from_secs(2)
    });
    let _ = caller.join();
    passed(
        r,
        "the child's call on a context busy at the fork (None: hung)",
    );
}

fn job_ids_do_not_repeat_across_fork() {
    const N: usize = 20_000;
    let (mut rd, mut wr) = pipe();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        rd.read_to_end(&mut buf).map(|_| buf)
    });
    let r = fork_and_wait(move || {
        let ids: Vec<u8> = (0..N).flat_map(|_| new_job_id().to_le_bytes()).collect();
        wr.write_all(&ids).is_ok()
    });
    let buf = reader.join().unwrap().unwrap();
    assert_eq!(r, Some(0));
    let child: std::collections::HashSet<u64> = buf
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(child.len(), N);
    let repeats = (0..N).filter(|_| child.contains(&new_job_id())).count();
    assert_eq!(
        repeats, 0,
        "job ids drawn by the parent after the fork repeat the child's"
    );
}

#[test]
fn fork() {
    resolver_lock_held_at_fork();
    pool_and_handle_table_held_at_fork();
    log_sink_running_at_fork();
    inherited_context_writes_with_its_own_identity();
    queued_notification_stays_with_the_parent();
    context_busy_on_another_thread_at_fork();
    job_ids_do_not_repeat_across_fork();
    a_child_abandoning_an_inherited_connection_leaves_the_parents_close_clean();
    a_child_forked_inside_a_call_is_itself();
}

/// Waits for child `pid`: its exit code, or `None` when it had to be killed after `CHILD_LIMIT`.
fn reap(pid: libc::pid_t) -> Option<i32> {
    let end = Instant::now() + CHILD_LIMIT;
    loop {
        let mut status = 0;
        // SAFETY: polls the child made by the caller; status is a live c_int.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == pid {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if Instant::now() > end {
            // SAFETY: kills and reaps that child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// P2: a call reads the process id once (`CallProcess`). A child forked by the caller's code
/// inside the call (a callback, run through `outside_call`) goes on with the rest of the call
/// as the child — its id read again when the callback returns —, and so does a child forked by
/// the thread itself while inside the library (a signal handler: the atfork handler forgets
/// the call's id). Before the id is read again, the child would take its parent's descriptors
/// for its own.
fn a_child_forked_inside_a_call_is_itself() {
    use xce::testing::{current_pid, outside_call, CallProcess};
    xce::testing::fork_generation(); // the atfork handler is installed
    let is_itself = || {
        // SAFETY: getpid(2) takes no arguments.
        current_pid() == unsafe { libc::getpid() }
    };
    for through_callback in [true, false] {
        let call = CallProcess::enter();
        // SAFETY: fork(2); the child checks one thing and leaves with _exit.
        let fork = || unsafe { libc::fork() };
        let pid = if through_callback {
            outside_call(fork)
        } else {
            fork()
        };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = is_itself();
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        assert!(is_itself(), "the parent's call keeps its id");
        drop(call);
        assert_eq!(
            reap(pid),
            Some(0),
            "a child forked inside a call ({}) took its parent's id",
            if through_callback {
                "by a callback"
            } else {
                "by the thread itself"
            }
        );
    }
}

/// A forked child that abandons an inherited connection (dead: it timed out there) must not
/// turn the parent's later close of that shared socket into a reset: the reset on close
/// (SO_LINGER 0) is an option of the socket, which parent and child share.
fn a_child_abandoning_an_inherited_connection_leaves_the_parents_close_clean() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let wake = WakeState::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut conn = Some(
        xce::testing::Connection::connect(
            "127.0.0.1",
            port,
            None,
            Default::default(),
            deadline,
            &wake.waker_now(),
        )
        .expect("connect"),
    );
    let (mut peer, _) = l.accept().unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let r = fork_and_wait(|| {
        let mut c = conn.take().expect("inherited");
        c.mark_dead();
        drop(c);
        true
    });
    assert_eq!(r, Some(0));
    drop(conn.take());
    let mut b = [0u8; 8];
    assert_eq!(
        peer.read(&mut b).expect("a clean close, not a reset"),
        0,
        "end of stream"
    );
}
