//! F21: the library's descriptors are its own. Each scenario runs in a child process (this test
//! binary, re-executed for one test) so that it can close every fd or fork without harming the
//! test harness; the fake controller stays in the parent.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::time::Duration;

use xce::client::Endpoint;
use xce::client::{Client, Config};
use xce::Error;
use xce_proto::error::*;
use xce_testkit::fake::*;

mod common;

const CHILD: &str = "XCE_FD_TEST_CHILD";
const PORT: &str = "XCE_FD_TEST_PORT";
/// A child that has not finished by then is killed and its case fails.
const CHILD_LIMIT: Duration = Duration::from_secs(120);

/// Runs test `name` of this binary in a child process with the fake's port; it must pass.
fn in_child(name: &str, fake: &FakeController) {
    let port = fake.endpoint().port.to_string();
    let env = [(CHILD, "1".as_ref()), (PORT, port.as_ref())];
    let args = ["--exact", name, "--nocapture", "--test-threads=1"];
    let run = common::run_self(&args, &env, CHILD_LIMIT);
    let text = run.out + &run.err;
    println!("--- child {name}:\n{text}");
    assert!(run.status.is_some_and(|s| s.success()) && text.contains("CHILD OK"));
}

/// Closes every fd from 3 up, as daemonizing code does; the highest that was open.
fn close_from_3() -> i32 {
    let highest = *open_fds().iter().max().unwrap();
    // SAFETY: closes every fd from 3 up; this process is the child of one test only.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    highest
}

/// A stop request (F27), then calls that wait and reconnect on descriptors made anew.
fn stop_then_calls(c: &Client) {
    c.request_stop();
    assert_eq!(c.hello(), Err(Error::StopRequested));
    c.clear_stop_request();
    for _ in 0..3 {
        assert!(c.hello().is_ok(), "the library rebuilt its descriptors");
    }
}

fn is_child() -> Option<u16> {
    std::env::var(CHILD).ok()?;
    std::env::var(PORT).ok()?.parse().ok()
}

fn open_fds() -> Vec<i32> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

fn child_client(port: u16) -> Client {
    let masters = vec![Endpoint::new("127.0.0.1", port)];
    Client::start_with(Config::new(masters), fast_options(), fast_retry(3)).expect("start")
}

/// The library holds no fd once no context exists: the socket and the pooled eventfds (a wait
/// borrowed one during the backoff) are closed with the last context.
#[test]
fn no_fd_is_held_once_no_context_exists() {
    if let Some(port) = is_child() {
        let before = open_fds();
        let c = child_client(port);
        c.hello().unwrap(); // NOT_READY, a backoff (a pooled eventfd is lent), then success
        drop(c);
        let after = open_fds();
        assert_eq!(before, after, "fds left behind");
        println!("CHILD OK");
        return;
    }
    let fake = FakeController::start(vec![Step::Status(-E_XCE_NOT_READY)]);
    in_child("no_fd_is_held_once_no_context_exists", &fake);
}

/// A daemon closes every fd above 2 after using the library (as daemonizing code does) and
/// opens its own files, which get the library's old numbers. The library must never read or
/// write those files (not a byte, not the file offset), and its next calls work on fresh fds.
#[test]
fn closefrom_then_the_daemons_own_files() {
    if let Some(port) = is_child() {
        let c = child_client(port);
        // A call that waits (backoff: a pooled eventfd is lent) and one that succeeds.
        assert!(c.hello().is_ok());
        assert!(c.hello().is_ok());
        let highest = close_from_3();
        // The daemon's log files take the freed numbers (the lowest first).
        let dir = std::env::temp_dir().join(format!("xce-fd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut logs = vec![];
        for i in 0..(highest - 2) {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .read(true)
                .write(true)
                .truncate(true)
                .open(dir.join(format!("log{i}")))
                .unwrap();
            f.write_all(b"daemon log line\n").unwrap();
            logs.push(f);
        }
        assert!(logs.iter().any(|f| f.as_raw_fd() == highest));
        stop_then_calls(&c);
        c.wakeup();
        for f in &mut logs {
            let pos = f.stream_position().unwrap();
            assert_eq!(pos, 16, "file offset moved: the library read or wrote it");
            f.seek(SeekFrom::Start(0)).unwrap();
            let mut s = String::new();
            f.read_to_string(&mut s).unwrap();
            assert_eq!(s, "daemon log line\n");
        }
        drop(c);
        std::fs::remove_dir_all(&dir).unwrap();
        println!("CHILD OK");
        return;
    }
    let fake = FakeController::start(vec![Step::Status(-E_XCE_NOT_READY)]);
    in_child("closefrom_then_the_daemons_own_files", &fake);
    // The child's calls after closefrom came on new connections.
    assert!(fake.connections() >= 2, "{}", fake.connections());
}

/// F21 (amended): the same with a daemon whose event loop opens eventfds after `closefrom`:
/// every eventfd shares one anonymous inode, so (device, inode) cannot tell them from the
/// library's own. The daemon's eventfds take every freed number; calls (with backoffs, so waits
/// that borrow a wake descriptor), wakes and the context's end must never read, write or close
/// one of them: each keeps its own counter value and stays open.
#[test]
fn closefrom_then_the_daemons_own_eventfds() {
    if let Some(port) = is_child() {
        let c = child_client(port);
        assert!(c.hello().is_ok()); // NOT_READY, a backoff (a pooled descriptor is lent), OK
        assert!(c.hello().is_ok());
        let highest = close_from_3();
        let mut daemon = vec![];
        for i in 0..(highest - 2) {
            let value = 1000 + i as u32;
            // SAFETY: eventfd(2) takes no pointers.
            let fd = unsafe { libc::eventfd(value, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            assert!(fd >= 0);
            daemon.push((fd, u64::from(value)));
        }
        assert!(daemon.iter().any(|&(fd, _)| fd == highest));
        stop_then_calls(&c);
        assert!(!c.try_wakeup());
        c.close();
        drop(c);
        for &(fd, value) in &daemon {
            let mut n: u64 = 0;
            // SAFETY: reads 8 bytes into a live u64 from the daemon's non-blocking eventfd.
            let r = unsafe { libc::read(fd, (&mut n as *mut u64).cast(), 8) };
            assert_eq!(
                (r, n),
                (8, value),
                "eventfd {fd}: closed, drained or written by the library"
            );
        }
        println!("CHILD OK");
        return;
    }
    let fake = FakeController::start(vec![
        Step::Status(-E_XCE_NOT_READY),
        Step::Ok,
        Step::Ok,
        Step::Status(-E_XCE_NOT_READY),
        Step::Ok,
        Step::Status(-E_XCE_NOT_READY),
    ]);
    in_child("closefrom_then_the_daemons_own_eventfds", &fake);
}

/// After fork, a child that uses a context it inherited gets its own connection: it never
/// talks on (or reads from) its parent's socket, and the parent's connection keeps working.
#[test]
fn a_forked_child_gets_its_own_connection() {
    if let Some(port) = is_child() {
        let c = child_client(port);
        c.hello().unwrap();
        // SAFETY: the child of fork only runs the library's calls and _exit (the harness runs
        // this test alone, --test-threads=1; the fake is in another process).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = c.hello().is_ok() && c.jobinfo(7).is_ok();
            // SAFETY: leaves the forked child without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        c.hello().unwrap();
        println!("CHILD OK");
        return;
    }
    let fake = FakeController::start(vec![]);
    in_child("a_forked_child_gets_its_own_connection", &fake);
    assert_eq!(
        fake.connections(),
        2,
        "the grandchild reconnected on its own"
    );
}
