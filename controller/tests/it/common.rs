//! What the controller's integration tests share beyond the test kit: the binary under test
//! and its command line (`run_cli`), clusters of it (`cluster`, `prepared`: the test kit's
//! runner, `testkit/src/cluster.rs`, with this binary), the raft port's wire format
//! (`raft_wire`), TLS clusters (`make_pki`, `tls_flags`, `wait_tls_primary`), a deposed
//! primary's reads (`deposed_reads_are_fresh`), process facts. The wire client and the ops the
//! tests send are the test kit's (`testkit/src/wire.rs`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use xce_proto::wire::{ControllerRole, Op, ReplyData};
pub use xce_testkit::cluster::{sample_of, tls_flags, Cluster, ClusterOpts, STARTUP};
pub use xce_testkit::ports::free_ports;
pub use xce_testkit::wire::*;

pub const BIN: &str = env!("CARGO_BIN_EXE_xce-controller");
/// The controller under test: `$XCE_CONTROLLER` (e.g. an older build, to show a test failing
/// before a fix), else this package's binary.
pub fn bin() -> String {
    std::env::var("XCE_CONTROLLER").unwrap_or_else(|_| BIN.to_string())
}

/// Runs `xce-controller ARGS` to its end, bounded by `timeout` (then killed: exit code
/// `None`); its exit code, stdout and stderr.
pub fn run_cli<S: AsRef<std::ffi::OsStr>>(
    args: &[S],
    timeout: Duration,
) -> (Option<i32>, String, String) {
    run_bounded(Command::new(bin()).args(args), timeout)
}

/// Runs `cmd` to its end in a process group of its own, bounded by `timeout` (then killed:
/// exit code `None`); whatever it started is killed with the group when it ends. Its exit
/// code, stdout and stderr.
pub fn run_bounded(cmd: &mut Command, timeout: Duration) -> (Option<i32>, String, String) {
    run_until(cmd, timeout, |_| false)
}

/// [`run_bounded`], also ended (exit code `None`) once its stderr so far satisfies `stop`.
pub fn run_until(
    cmd: &mut Command,
    timeout: Duration,
    stop: impl Fn(&str) -> bool,
) -> (Option<i32>, String, String) {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + timeout;
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if Instant::now() > deadline || stop(&std::fs::read_to_string(&err).unwrap_or_default()) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: kill(2) on the process group of the child this function started; harmless if
    // the group is gone.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    (
        code,
        std::fs::read_to_string(out).unwrap_or_default(),
        std::fs::read_to_string(err).unwrap_or_default(),
    )
}

/// A cluster of `n` nodes of the binary under test with extra `run` flags (`{id}`: the
/// node's id), all started.
pub fn cluster(n: u32, extra: &[&str]) -> Cluster {
    let mut c = prepared(n, extra);
    c.start_all();
    c
}

/// [`cluster`] with no node started yet.
pub fn prepared(n: u32, extra: &[&str]) -> Cluster {
    let opts = ClusterOpts {
        bin: Some(bin().into()),
        ..ClusterOpts::args(extra)
    };
    Cluster::prepare(n as usize, opts).expect("a cluster directory")
}

/// C3: no stale read from a deposed primary. Primary `p` of a settled cluster takes job 5;
/// `p` is frozen (SIGSTOP) while the others elect a primary (within `elect_within`) that kills
/// the job; `p` is resumed with a read already queued, the first thing it sees. Two answered
/// reads follow — the queued one, then a fresh one (the deposed node closes the connections it
/// served as primary; one made in the moment before it learnt it was deposed is asked again,
/// bounded): each shows the job killed, or is a refusal. `what` names the case in a failure.
/// Returns a client of `p` for more questions.
pub fn deposed_reads_are_fresh(
    ctrl: &Cluster,
    p: u32,
    elect_within: Duration,
    what: &str,
) -> WireClient {
    use xce_proto::error::{E_XCE_NOMASTER, E_XCE_NOT_READY, E_XCE_REDIRECT, E_XCE_STANDBY};
    use xce_proto::wire::{JobAction, JobState};
    let mut old = ctrl.client(p);
    old.ok(submit(5, "u", ""));
    assert_eq!(job(old.ok(Op::JobInfo { job_id: 5 })).state, JobState::Pend);
    ctrl.signal(p, libc::SIGSTOP);
    let rest: Vec<u32> = ctrl.ids().into_iter().filter(|&i| i != p).collect();
    let q = ctrl.expect_primary_among(&rest, elect_within);
    let mut new = ctrl.client(q);
    new.ok(Op::JobCtrl {
        job_id: 5,
        action: JobAction::Kill,
    });
    assert_eq!(job(new.ok(Op::JobInfo { job_id: 5 })).state, JobState::Exit);
    let req = old.request(Op::JobInfo { job_id: 5 });
    old.send(&req).unwrap();
    ctrl.signal(p, libc::SIGCONT);
    let (mut answered, mut queued) = (0, true);
    for attempt in 1.. {
        assert!(
            attempt <= 10,
            "the deposed primary {p} never answered twice ({what})"
        );
        let r = if std::mem::take(&mut queued) {
            old.recv()
        } else {
            old.try_call(Op::JobInfo { job_id: 5 })
        };
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                eprintln!("deposed primary {p} closed the connection: {e}");
                old = ctrl.client(p);
                continue;
            }
        };
        eprintln!(
            "deposed primary {p}, read {answered}: status {} hint {}",
            r.status,
            hint(&r)
        );
        match r.status {
            0 => assert_eq!(
                job(r.data).state,
                JobState::Exit,
                "stale read from the deposed primary {p} ({what})"
            ),
            s => assert!(
                [
                    -E_XCE_STANDBY,
                    -E_XCE_NOT_READY,
                    -E_XCE_NOMASTER,
                    -E_XCE_REDIRECT
                ]
                .contains(&s),
                "unexpected status {s} ({what})"
            ),
        }
        answered += 1;
        if answered == 2 {
            return old;
        }
    }
    unreachable!()
}

/// C1 across restart orders: for each order every node is killed, then started in that
/// order; the primary that settles, and the one elected once it is killed too, must pass
/// `check(ctrl, primary, when)`.
pub fn across_restart_orders(
    ctrl: &mut Cluster,
    orders: &[&[u32]],
    check: impl Fn(&Cluster, u32, &str),
) {
    for order in orders {
        for id in ctrl.running() {
            ctrl.kill(id);
        }
        for &id in *order {
            ctrl.start_node(id);
        }
        let q = ctrl.expect_settled(STARTUP);
        check(ctrl, q, &format!("after restarting {order:?}"));
        ctrl.kill(q);
        let s = ctrl.expect_primary(STARTUP);
        check(ctrl, s, &format!("after primary {q} was killed"));
        ctrl.start_node(q);
    }
}

/// A submit of job `id` whose command makes its entry about `bytes` long.
pub fn big_job(id: u64, bytes: usize) -> Op {
    let mut op = submit(id, "u", "");
    if let Op::JobSubmit(spec) = &mut op {
        spec.command = "x".repeat(bytes);
    }
    op
}

/// Waits (up to `bound`) for node `id` to exit by itself, with status `code`: its log.
pub fn exits_with(ctrl: &mut Cluster, id: u32, code: i32, bound: Duration) -> String {
    let st = ctrl.wait_exit(id, bound);
    let log = ctrl.log(id);
    let st = st.unwrap_or_else(|| panic!("node {id} still runs after {bound:?}\n{log}"));
    assert_eq!(st.code(), Some(code), "node {id}'s exit\n{log}");
    log
}

/// The term node `id` answers `hello` with.
pub fn term_of(ctrl: &Cluster, id: u32) -> u64 {
    info(&ctrl.client(id).call(hello())).term
}

/// `ids` but `not`.
pub fn others(ids: &[u32], not: u32) -> Vec<u32> {
    ids.iter().copied().filter(|&i| i != not).collect()
}

/// `waitPrimary` waiting up to `timeout_ms`, nothing excluded.
pub fn wait_primary_op(timeout_ms: u32) -> Op {
    Op::WaitPrimary {
        timeout_ms,
        exclude_host: String::new(),
        exclude_port: 0,
    }
}

/// The ids of the jobs `joblist` with filter `f` answers on `c`, in its order.
pub fn job_ids(c: &mut WireClient, f: xce_proto::wire::JobFilter) -> Vec<u64> {
    match c.ok(Op::JobList(f)) {
        ReplyData::Jobs(j) => j.into_iter().map(|j| j.job_id).collect(),
        other => panic!("joblist: {other:?}"),
    }
}

/// Every job id node `id` lists, in order (it must serve).
pub fn listed_on(ctrl: &Cluster, id: u32) -> Vec<u64> {
    job_ids(&mut ctrl.client(id), Default::default())
}

/// A node outside the first membership (C17) on free ports: its client address, its raft
/// address and its `--cluster` entry `ID=CLIENT/RAFT`.
pub fn new_member(id: u32) -> (String, String, String) {
    let p = free_ports(2);
    let (c, r) = (format!("127.0.0.1:{}", p[0]), format!("127.0.0.1:{}", p[1]));
    let spec = format!("{id}={c}/{r}");
    (c, r, spec)
}

/// `xce-controller ARGS` run to its end (within 100 s): its exit code, its stdout and stderr
/// together, how long it took.
pub fn cli(args: &[&str]) -> (Option<i32>, String, Duration) {
    let t0 = Instant::now();
    let (code, out, err) = run_cli(args, Duration::from_secs(100));
    (code, out + &err, t0.elapsed())
}

/// A library context (`xce::client`) for the master list `masters`.
pub fn lib_client(masters: &str) -> xce::client::Client {
    use xce::client::{parse_masters, Client, Config};
    Client::start(Config::new(parse_masters(masters).unwrap())).unwrap()
}

/// A job for the library's `jobsubmit`: alice's `true` on one CPU, named `name`.
pub fn alice_job(name: &str) -> xce_proto::wire::JobSpec {
    xce_proto::wire::JobSpec {
        name: name.into(),
        user: "alice".into(),
        command: "true".into(),
        ncpus: 1,
        ..Default::default()
    }
}

pub fn write_file(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// The raft port's wire format, as `raft/frame.rs` frames it: a 4-byte big-endian length, then the
/// message in postcard, then the sender's cluster stamp (C20: the cluster id, 4 bytes of
/// restore epoch, the mark `XCETAG01`). The controller's own types stay inside it; the variants
/// here encode the same bytes (postcard writes an enum variant as its index, and an append
/// without entries does not depend on the entry type).
pub mod raft_wire {
    use std::io::{Read, Write};
    use std::time::Duration;

    use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest, VoteResponse};
    use serde::{Deserialize, Serialize};

    openraft::declare_raft_types!(
        /// Stand-in type configuration for appends without entries.
        pub TestConfig:
            D = String,
            R = String,
            NodeId = u64,
            Node = openraft::BasicNode,
            SnapshotData = std::io::Cursor<Vec<u8>>,
    );

    #[derive(Serialize)]
    pub enum RpcRequest {
        Append(AppendEntriesRequest<TestConfig>),
        Vote(VoteRequest<u64>),
        /// Stands in for the snapshot header (never sent by the tests): keeps the variant
        /// indexes of the controller's enum.
        Snapshot,
        /// C16: a request forwarded for `who` (controller/src/raft/frame.rs).
        Forward {
            who: String,
            within_ms: u32,
            frame: Vec<u8>,
        },
        /// C15: would the node vote for `candidate` in `term` with this last log id?
        PreVote {
            term: u64,
            candidate: u64,
            last_log_id: Option<openraft::LogId<u64>>,
        },
        /// Stand-ins for C19's digest questions and issue 26's `Identify` (never sent by these
        /// tests): keep the variant indexes.
        Digest,
        Diverged,
        Identify,
        /// C15 (amended): the leader's last message on a connection it gives up on.
        Bye,
    }

    #[derive(Deserialize, Debug)]
    #[allow(clippy::large_enum_variant)]
    pub enum RpcReply {
        Append(Result<AppendEntriesResponse<u64>, openraft::error::RaftError<u64>>),
        Vote(Result<VoteResponse<u64>, openraft::error::RaftError<u64>>),
        /// Stands in for the snapshot answer (never asked for by the tests).
        Snapshot(()),
        /// C16: the primary's reply, one framed client-protocol message; empty: not taken.
        Forward(Vec<u8>),
        /// C15: whether the pre-vote would be granted.
        PreVote(bool),
        /// C19: a digest answer (never asked for by these tests).
        Digest(DigestAnswer),
        /// C19: whether a divergence notice was taken.
        Ack(bool),
        /// C20, C19: refused before it was read, and why.
        Refused(String),
    }

    /// Mirrors `raft/frame.rs`'s `DigestAnswer`.
    #[derive(Deserialize, Debug)]
    pub enum DigestAnswer {
        Ready([u8; 32]),
        NotYet,
        Gone,
        Diverged(u64),
    }

    /// No cluster id: what a stranger (or an earlier build) sends.
    pub const NO_ID: [u8; 16] = [0; 16];

    /// A forwarded request for `who`: the frame of `req`.
    pub fn forward(who: &str, req: &xce_proto::wire::Request) -> RpcRequest {
        let mut frame = Vec::new();
        xce_proto::wire::encode_request(req, &mut frame);
        RpcRequest::Forward {
            who: who.into(),
            within_ms: 3000,
            frame,
        }
    }

    /// One framed message, stamped with cluster `id` (restore epoch 0; [`NO_ID`]: none).
    pub fn frame(req: &RpcRequest, id: [u8; 16]) -> Vec<u8> {
        let mut body = postcard::to_stdvec(req).unwrap();
        body.extend_from_slice(&id);
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(b"XCETAG01");
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&body);
        out
    }

    /// Sends `req` stamped with cluster `id` and reads one reply on `s`.
    pub fn call<S: Read + Write>(
        s: &mut S,
        req: &RpcRequest,
        id: [u8; 16],
    ) -> std::io::Result<RpcReply> {
        s.write_all(&frame(req, id))?;
        s.flush()?;
        let mut len = [0u8; 4];
        s.read_exact(&mut len)?;
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut body)?;
        postcard::from_bytes(&body).map_err(std::io::Error::other)
    }

    /// [`call`] on a new plaintext connection to `addr`.
    pub fn call_at(addr: &str, req: &RpcRequest, id: [u8; 16]) -> std::io::Result<RpcReply> {
        let addr = addr.parse().unwrap();
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        call(&mut s, req, id)
    }

    /// A vote request from `candidate` in `term` with a log far ahead of anyone's.
    pub fn vote(term: u64, candidate: u64) -> RpcRequest {
        use openraft::{CommittedLeaderId, LogId, Vote};
        RpcRequest::Vote(VoteRequest::<u64>::new(
            Vote::new(term, candidate),
            Some(LogId::new(
                CommittedLeaderId::new(term, candidate),
                1_000_000,
            )),
        ))
    }

    /// An append (no entries) from a committed leader `leader` of `term`. With `commit`, one
    /// committing up to index 1,000,000: a follower that took it would adopt the term and the
    /// leader; without, no commit index: what that leader's heartbeat carries when the
    /// follower's log matches nothing yet.
    pub fn append(term: u64, leader: u64, commit: bool) -> RpcRequest {
        use openraft::{CommittedLeaderId, LogId, Vote};
        let mut v = Vote::new(term, leader);
        v.commit();
        RpcRequest::Append(AppendEntriesRequest {
            vote: v,
            prev_log_id: None,
            leader_commit: commit
                .then(|| LogId::new(CommittedLeaderId::new(term, leader), 1_000_000)),
            entries: Vec::new(),
        })
    }
}

/// Slow elections: no spurious term change on a loaded machine while a test attacks or
/// forwards.
pub const CALM: [&str; 6] = timing("100", "1500", "3000");

/// `run` flags for a heartbeat every `hb` ms and an election timeout of `min`–`max` ms.
pub const fn timing<'a>(hb: &'a str, min: &'a str, max: &'a str) -> [&'a str; 6] {
    [
        "--heartbeat-ms",
        hb,
        "--election-min-ms",
        min,
        "--election-max-ms",
        max,
    ]
}

/// A cluster of `n` nodes whose every link has mutual TLS, with extra `run` flags: the
/// certificates (`make_pki` for `pki` nodes, in a directory of its own), the cluster, its
/// primary (asked as admin).
pub fn tls_cluster(n: u32, pki: u32, extra: &[&str]) -> (tempfile::TempDir, Cluster, u32) {
    let certs = tempfile::tempdir().unwrap();
    make_pki(certs.path(), pki);
    let mut flags = tls_flags(certs.path(), true);
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let ctrl = cluster(n, &flags);
    let p = wait_tls_primary(&ctrl, certs.path(), "admin");
    (certs, ctrl, p)
}

/// A TLS stream (`tls_stream`) to node `to`'s raft port as a peer would open it, trusting
/// `dir/ca.pem` and presenting `dir/WHO.pem` (`None`: no certificate).
pub fn as_peer(
    ctrl: &Cluster,
    to: u32,
    dir: &Path,
    who: Option<&str>,
) -> std::io::Result<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>> {
    let files = who.map(|w| (dir.join(format!("{w}.pem")), dir.join(format!("{w}.key"))));
    let id = files.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
    let (addr, name) = (ctrl.raft_addr(to), format!("xce-node-{to}"));
    tls_stream(&addr, &dir.join("ca.pem"), id, &name)
}

/// The primary of a TLS cluster, asked as `identity` (certificates in `dir`).
pub fn wait_tls_primary(ctrl: &Cluster, dir: &Path, identity: &str) -> u32 {
    let mut p = None;
    ctrl.wait_until("a primary, asked over TLS", STARTUP, || {
        p = ctrl.ids().into_iter().find_map(|id| {
            let mut c = try_tls_client(&ctrl.addr(id), dir, Some(identity)).ok()?;
            let r = c.try_call(hello()).ok()?;
            match r.data {
                ReplyData::CtrlInfo(i) if i.role == ControllerRole::Primary => Some(id),
                _ => None,
            }
        });
        p.is_some()
    });
    p.unwrap()
}

/// `xce-controller pki local DIR N`: a CA, N node certificates, the local identities.
pub fn make_pki(dir: &Path, n: u32) {
    let st = Command::new(bin())
        .args(["pki", "local"])
        .arg(dir)
        .arg(n.to_string())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "pki local {}", dir.display());
}

/// `xce-controller pki token DIR ARGS` (an identity, a validity): the token.
pub fn token(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(bin())
        .args(["pki", "token"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The admin tools' flags for identity `who` with certificates in `dir`: `--ca`, `--cert`,
/// `--key`.
pub fn identity_args(dir: &Path, who: &str) -> Vec<String> {
    let f = |n: String| dir.join(n).display().to_string();
    vec![
        "--ca".into(),
        f("ca.pem".into()),
        "--cert".into(),
        f(format!("{who}.pem")),
        "--key".into(),
        f(format!("{who}.key")),
    ]
}

/// Resident and virtual memory of a process (kB), from /proc.
pub fn mem_kb(pid: i32) -> (u64, u64) {
    let field = |name| status_kb(pid, name).unwrap_or(0);
    (field("VmRSS:"), field("VmSize:"))
}

/// The field `name` (e.g. `VmHWM:`, the peak resident memory) of a process's
/// `/proc/PID/status`, in kB.
pub fn status_kb(pid: i32, name: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Every established TCP connection on this host: its local and peer addresses and its
/// traffic class (`tos:` of `ss --tos`).
pub fn sockets_tos() -> Vec<(String, String, String)> {
    let out = std::process::Command::new("ss")
        .args(["-tnH", "--tos", "state", "established"])
        .output()
        .expect("ss (iproute2)");
    assert!(out.status.success(), "ss failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let tos = f.iter().find_map(|t| t.strip_prefix("tos:"))?;
            Some((
                f.get(2)?.to_string(),
                f.get(3)?.to_string(),
                tos.to_string(),
            ))
        })
        .collect()
}

/// A tmpfs of `size` mounted on `dir` until dropped (unmounted even when the test fails): C21's and C24's disks
/// that fill (`storage_faults`, `disk_guard`).
pub struct Tmpfs(pub std::path::PathBuf);

impl Tmpfs {
    pub fn mount(dir: &std::path::Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a {size} tmpfs on {} (the test needs root): {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir.to_path_buf())
    }

    /// Free bytes left on it.
    pub fn free(&self) -> u64 {
        let c = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: statvfs(3) fills the struct we own from a valid C string.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        st.f_bavail as u64 * st.f_frsize as u64
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}
