//! S15 on the client port (C13), through the library, against real controllers started as
//! `cluster --tls` starts them (mutual TLS on every link, certificates from
//! `xce-controller pki local`): a table over ops × identities (each allowed op succeeds or
//! fails for a domain reason, each refused one is E_XCE_AUTH), the bindings (a user controls
//! only its own jobs, a worker reports only for its host), tokens for callers without a
//! certificate, and certificate problems that are terminal at once (E_XCE_TLS) instead of
//! retried for the whole budget. S15 extended (issue 27, C9 and C13 amended): a flood of
//! strangers on every node does not stop a certificate holder, and an expired certificate is
//! refused even to a context that connected before it expired. (The raw-socket side of S15
//! extended — deadlines, budgets, memory, the loopback rule, data files — is
//! `controller/tests/it/hostile_clients.rs`.)

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{join_as, lost_and_twice, pki, tls_flags, user_spec};
use xce::client::{parse_masters, Client, Config, TlsFiles};
use xce::{Error, TlsCause};
use xce_proof::{Cluster, ClusterOpts};
use xce_proto::wire::{
    roles, HostAction, JobAction, JobFilter, JobListPage, JobSpec, JobState, Notify, NotifyKind,
    Op, QueueAction, ResVal, SessionRole, Usage,
};

struct Tls {
    /// The `pki local` directory (in the cluster's, removed with it).
    path: PathBuf,
    cluster: Cluster,
}

fn tls_cluster(nodes: usize, tokens: bool) -> Tls {
    let mut cluster = Cluster::prepare(nodes, ClusterOpts::default()).expect("cluster");
    let path = cluster.data_dir().join("pki");
    pki(&["local", path.to_str().unwrap(), &nodes.to_string()]);
    pki(&["identity", path.to_str().unwrap(), "worker-host2"]);
    cluster.opts.extra_args = tls_flags(&path, tokens);
    for id in 1..=nodes as u32 {
        cluster.start_node(id);
    }
    assert!(cluster.wait_listening(Duration::from_secs(20)));
    Tls { path, cluster }
}

impl Tls {
    fn files(&self, who: Option<&str>) -> TlsFiles {
        TlsFiles {
            ca_file: self.path.join("ca.pem"),
            cert_file: who.map(|w| self.path.join(format!("{w}.pem"))),
            key_file: who.map(|w| self.path.join(format!("{w}.key"))),
        }
    }

    /// A library configuration over the cluster: TLS with `tls` (`None`: plaintext), `token`.
    fn config(&self, tls: Option<TlsFiles>, token: Option<&str>) -> Config {
        let mut cfg = Config::new(parse_masters(&self.cluster.masters()).unwrap());
        cfg.tls = tls;
        cfg.auth_token = token.map(str::to_string);
        cfg
    }

    /// A library client with identity `who` (a certificate; `None`: anonymous).
    fn client(&self, who: Option<&str>) -> Client {
        Client::start(self.config(Some(self.files(who)), Some("")))
            .unwrap_or_else(|e| panic!("start as {who:?}: {e}"))
    }

    /// A library client without a certificate, carrying `token`.
    fn token_client(&self, token: &str) -> Client {
        Client::start(self.config(Some(self.files(None)), Some(token))).unwrap()
    }

    /// Waits (5 s) for a line containing `pat` in the nodes' logs: a node's stderr reaches its
    /// log through a stamping thread, after the reply may have.
    fn wait_logged(&self, pat: &str) {
        let has = || self.cluster.all_logs().contains(pat);
        let what = format!("a node log line with {pat:?}");
        self.cluster.wait_until(&what, Duration::from_secs(5), has);
    }
}

fn spec(user: &str) -> JobSpec {
    user_spec(user, "s15")
}

fn join(role: SessionRole, host: &str) -> Op {
    Op::Join(join_as(role, host))
}

/// The world every case starts from: jobs of alice and bob, one running on host1 and one on
/// host2, made by admin (who may join as anything).
struct World {
    alice_pending: u64,
    alice_on_host1: u64,
    bob_on_host2: u64,
}

fn world(t: &Tls) -> World {
    let sched = t.client(Some("admin"));
    sched.call(join(SessionRole::Scheduler, "")).unwrap();
    for h in ["host1", "host2"] {
        let w = t.client(Some("admin"));
        w.call(join(SessionRole::Worker, h)).unwrap();
    }
    let admin = t.client(Some("admin"));
    let alice_pending = admin.jobsubmit(spec("alice")).unwrap();
    let alice_on_host1 = admin.jobsubmit(spec("alice")).unwrap();
    let bob_on_host2 = admin.jobsubmit(spec("bob")).unwrap();
    sched.jobdispatch(alice_on_host1, "host1").unwrap();
    sched.jobdispatch(bob_on_host2, "host2").unwrap();
    World {
        alice_pending,
        alice_on_host1,
        bob_on_host2,
    }
}

/// One sample of every reply-bearing op (fresh jobs where the op changes one).
fn sample(op: &str, t: &Tls, w: &World) -> Op {
    let admin = || t.client(Some("admin"));
    match op {
        "hello" => Op::Hello(Default::default()),
        "join" => join(SessionRole::Client, ""),
        "joblist" => Op::JobList(JobFilter::default()),
        "jobinfo" => Op::JobInfo {
            job_id: w.alice_pending,
        },
        "jobsubmit" => Op::JobSubmit(spec("alice")),
        "jobdispatch" => Op::JobDispatch {
            job_id: admin().jobsubmit(spec("alice")).unwrap(),
            host: "host1".into(),
        },
        "jobctrl" => Op::JobCtrl {
            job_id: admin().jobsubmit(spec("alice")).unwrap(),
            action: JobAction::Kill,
        },
        "queuectrl" => Op::QueueCtrl {
            queue: "normal".into(),
            action: QueueAction::Open,
        },
        "hostctrl" => Op::HostCtrl {
            host: "host1".into(),
            action: HostAction::Open,
        },
        "reslist" => Op::ResList,
        "workerlist" => Op::WorkerList,
        "clusterconf" => Op::ClusterConf,
        "resval" => Op::ResVal {
            host: "host1".into(),
        },
        "update_resvals" => Op::UpdateResvals {
            host: "host1".into(),
            resvals: vec![ResVal {
                name: "load".into(),
                value: "0.5".into(),
            }],
        },
        "update_jusage" => Op::UpdateJusage {
            job_id: w.alice_on_host1,
            usage: Usage {
                cpu_ms: 10,
                mem_kb: 10,
            },
        },
        "runtask" => Op::RunTask {
            host: "host1".into(),
            command: "true".into(),
        },
        "set_pend_reason" => Op::SetPendReason {
            job_id: w.alice_pending,
            reason: "waiting".into(),
        },
        "clear_reason" => Op::ClearReason {
            job_id: w.alice_pending,
        },
        "joblist_page" => Op::JobListPage(JobListPage::default()),
        // C17: refused before anything is checked for the others; admin: no such member.
        "member_remove" => Op::MemberRemove { id: 99 },
        other => panic!("no sample for {other}"),
    }
}

/// S15: every reply-bearing op × every identity. Allowed: success or a domain error; refused:
/// E_XCE_AUTH. The expectation is written out here, independently of the op table, and the
/// table is checked against it.
#[test]
fn s15_ops_by_identity() {
    let t = tls_cluster(3, true);
    let w = world(&t);
    let a = "admin";
    let s = "scheduler";
    let wk = "worker-host1";
    let u = "user-alice";
    let n = "anonymous";
    let all_named: &[&str] = &[a, s, wk, u];
    #[rustfmt::skip]
    let table: &[(&str, &[&str])] = &[
        ("hello",           &[a, s, wk, u, n]),
        ("join",            &[a, u]), // as a client: a user may; a worker or scheduler only as itself
        ("joblist",         all_named),
        ("jobinfo",         all_named),
        ("jobsubmit",       &[a, u]), // as user alice
        ("jobdispatch",     &[a, s]),
        ("jobctrl",         &[a, u]), // alice's own job
        ("queuectrl",       &[a]),
        ("hostctrl",        &[a]),
        ("reslist",         all_named),
        ("workerlist",      all_named),
        ("clusterconf",     all_named),
        ("resval",          all_named),
        ("update_resvals",  &[a, wk]), // host1
        ("update_jusage",   &[a, wk]), // a job on host1
        ("runtask",         &[a]),
        ("set_pend_reason", &[a, s]),
        ("clear_reason",    &[a, s]),
        ("joblist_page",    all_named),
        ("member_remove",   &[a]),
    ];
    let mut failures = Vec::new();
    let mut cases = 0;
    for &(op_name, allowed) in table {
        for who in [a, s, wk, u, n] {
            let c = t.client((who != n).then_some(who));
            let op = sample(op_name, &t, &w);
            assert_eq!(op.name(), op_name);
            // The op's session first (protocol.md "Sessions"), as the identity would join.
            if let Some(role) = op.rule().session {
                let _ = c.call(join(role, "host1"));
            }
            let r = c.call(op.clone());
            let want_ok = allowed.contains(&who);
            let got_auth = matches!(r, Err(Error::Auth));
            cases += 1;
            if want_ok == got_auth {
                failures.push(format!("{op_name} as {who}: {r:?}, want allowed={want_ok}"));
            }
            // The table of the library says the same.
            let bit = match who {
                "admin" => roles::ADMIN,
                "scheduler" => roles::SCHEDULER,
                "worker-host1" => roles::WORKER,
                "user-alice" => roles::USER,
                _ => roles::ANONYMOUS,
            };
            if want_ok && op.rule().roles & bit == 0 {
                failures.push(format!("op table refuses {op_name} to {who}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{cases} cases:\n{}",
        failures.join("\n")
    );
    eprintln!("{cases} cases of ops x identities as expected");
    t.wait_logged("refused queuectrl");
    assert!(
        t.cluster.all_logs().contains("for user-alice"),
        "refusals are logged with who and what"
    );
}

/// S15: a user controls only its own jobs; a worker reports only for its host; neither changes
/// queues or hosts. The refused ops leave the state as it was.
#[test]
fn s15_bindings() {
    let t = tls_cluster(3, true);
    let w = world(&t);
    let admin = t.client(Some("admin"));
    let alice = t.client(Some("user-alice"));
    let bob = t.client(Some("user-bob"));

    // A user cannot cancel another user's job.
    assert_eq!(
        alice.jobctrl(w.bob_on_host2, JobAction::Kill),
        Err(Error::Auth)
    );
    assert_eq!(
        admin.jobinfo(w.bob_on_host2).unwrap().state,
        JobState::Run,
        "bob's job survived alice"
    );
    // ... nor submit as another user; a job naming no user is hers; bob kills his own.
    assert_eq!(alice.jobsubmit(spec("bob")), Err(Error::Auth));
    let unnamed = alice.jobsubmit(spec("")).unwrap();
    assert_eq!(admin.jobinfo(unnamed).unwrap().user, "alice");
    alice.jobctrl(unnamed, JobAction::Kill).unwrap();
    bob.jobctrl(w.bob_on_host2, JobAction::Kill).unwrap();

    // A worker cannot report for another host.
    let w1 = t.client(Some("worker-host1"));
    w1.call(join(SessionRole::Worker, "host1")).unwrap();
    assert_eq!(
        w1.call(join(SessionRole::Worker, "host2")).err(),
        Some(Error::Auth),
        "worker-host1 joined as host2"
    );
    let other = vec![ResVal {
        name: "load".into(),
        value: "99".into(),
    }];
    assert_eq!(w1.update_resvals("host2", other), Err(Error::Auth));
    let bob2 = admin.jobsubmit(spec("bob")).unwrap();
    let sched = t.client(Some("scheduler"));
    sched.call(join(SessionRole::Scheduler, "")).unwrap();
    sched.jobdispatch(bob2, "host2").unwrap();
    let usage = Usage {
        cpu_ms: 1,
        mem_kb: 1,
    };
    assert_eq!(w1.update_jusage(bob2, usage), Err(Error::Auth));
    // Fire-and-forget: a notify for a job on host2 is dropped (logged), a notify for its own
    // job applies.
    w1.notify(Notify {
        kind: NotifyKind::JobFinish,
        job_id: bob2,
        exit_code: 0,
    })
    .unwrap();
    w1.notify(Notify {
        kind: NotifyKind::JobFinish,
        job_id: w.alice_on_host1,
        exit_code: 0,
    })
    .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while admin.jobinfo(w.alice_on_host1).unwrap().state != JobState::Done {
        assert!(
            Instant::now() < until,
            "worker-host1's own notify did not apply"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(admin.jobinfo(bob2).unwrap().state, JobState::Run);
    t.wait_logged("refused notify");
    // Heartbeats: for its own host they count, for another host they are dropped.
    let beat = |h: &str| {
        admin
            .workerlist()
            .unwrap()
            .into_iter()
            .find(|x| x.name == h)
            .map(|x| x.last_heartbeat)
            .unwrap()
    };
    let (h1, h2) = (beat("host1"), beat("host2"));
    std::thread::sleep(Duration::from_millis(5));
    w1.heartbeat("host2").unwrap();
    w1.heartbeat("host1").unwrap();
    // The connection serves in order: once this answers, both heartbeats were handled.
    w1.joblist(JobFilter::default()).unwrap();
    assert_eq!(beat("host2"), h2, "worker-host1 beat for host2");
    assert!(
        beat("host1") > h1,
        "worker-host1's own heartbeat did not count"
    );

    // Neither changes queues or hosts.
    for c in [&alice, &w1] {
        assert_eq!(c.queuectrl("normal", QueueAction::Close), Err(Error::Auth));
        assert_eq!(c.hostctrl("host1", HostAction::Close), Err(Error::Auth));
    }
    let q = admin.clusterconf().unwrap().queues;
    assert!(q.iter().all(|q| q.open), "{q:?}");
}

/// Tokens for callers without a certificate: a good one names its identity and is bound
/// like a certificate; a forged or expired one is E_XCE_AUTH, terminal.
#[test]
fn s15_tokens() {
    let t = tls_cluster(1, true);
    let dir = t.path.to_str().unwrap();
    let bob_token = pki(&["token", dir, "user-bob"]);
    let bob = t.token_client(&bob_token);
    let mine = bob.jobsubmit(spec("bob")).unwrap();
    assert_eq!(bob.jobsubmit(spec("alice")), Err(Error::Auth));
    let alice = t.client(Some("user-alice"));
    let hers = alice.jobsubmit(spec("alice")).unwrap();
    assert_eq!(bob.jobctrl(hers, JobAction::Kill), Err(Error::Auth));
    bob.jobctrl(mine, JobAction::Kill).unwrap();
    // Forged: the identity changed after signing. Expired: valid 0 days.
    let forged = bob_token.replace("user-bob", "user-alice");
    let expired = pki(&["token", dir, "user-bob", "0"]);
    for (what, tok) in [("forged", forged), ("expired", expired)] {
        let c = t.token_client(&tok);
        let start = Instant::now();
        assert_eq!(
            c.joblist(JobFilter::default()).err(),
            Some(Error::Auth),
            "{what}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{what}: E_XCE_AUTH retried"
        );
    }
    t.wait_logged("a bad token");
    // Anonymous (no certificate, no token): hello yes, anything else no.
    let anon = t.client(None);
    anon.hello().unwrap();
    assert_eq!(anon.joblist(JobFilter::default()).err(), Some(Error::Auth));
}

/// Issue 19 / C13: a certificate problem is terminal at once and says so — a plaintext client
/// meeting a TLS port, and a client without a certificate refused by a cluster that wants one —
/// with the default retry budget (≈ 50 s), not retried for all of it.
#[test]
fn certificate_problems_are_terminal() {
    let t = tls_cluster(1, false);
    // Plaintext to the TLS port.
    let start = Instant::now();
    let e = match Client::start(t.config(None, None)) {
        Err(e) => e,
        // start only connects: the first exchange meets the TLS port.
        Ok(c) => c.hello().unwrap_err(),
    };
    eprintln!("plaintext client: {e} after {:?}", start.elapsed());
    assert_eq!(e, Error::Tls(TlsCause::PeerSpeaksTls));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    // No client certificate where one is required: the controller refuses the handshake.
    let start = Instant::now();
    let e = match Client::start(t.config(Some(t.files(None)), None)) {
        Err(e) => e,
        // TLS 1.3: the client may learn of the refusal only at its first read.
        Ok(c) => c.hello().unwrap_err(),
    };
    eprintln!("no certificate: {e} after {:?}", start.elapsed());
    assert_eq!(e, Error::Tls(TlsCause::RefusedByPeer));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

/// Failover with security on: every link (clients' and peers') runs mutual TLS. The primary
/// is stopped (SIGSTOP: its raft links time out, and after SIGCONT come back through new
/// handshakes), then the next primary is killed and started again, while a writer with a
/// user's certificate submits all along. No call fails, every acknowledged job is listed once,
/// and writes go on after each fault.
#[test]
fn secured_cluster_fails_over_stop_and_kill() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    let mut t = tls_cluster(3, false);
    let admin = t.client(Some("admin"));
    let primary = |c: &Client| -> u32 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match c.hello() {
                Ok(i) if i.role == xce_proto::wire::ControllerRole::Primary => return i.id,
                _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                other => panic!("no primary: {other:?}"),
            }
        }
    };
    let p1 = primary(&admin);

    let origin = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::<(u64, Duration)>::new()));
    let failed = Arc::new(Mutex::new(Vec::<String>::new()));
    let writer = {
        let (stop, acked, failed) = (stop.clone(), acked.clone(), failed.clone());
        let c = t.client(Some("user-alice"));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let s = spec("alice");
                match c.jobsubmit(s.clone()) {
                    Ok(_) => acked.lock().unwrap().push((s.job_id, origin.elapsed())),
                    Err(e) => failed
                        .lock()
                        .unwrap()
                        .push(format!("{e}: {:?}", c.last_error())),
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let acked_since = |t0: Duration| acked.lock().unwrap().iter().filter(|a| a.1 > t0).count();
    let wait_writes_after = |t0: Duration, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while acked_since(t0) < 20 {
            assert!(Instant::now() < deadline, "no writes after {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    std::thread::sleep(Duration::from_millis(500));

    // 1. The primary stopped for longer than any election, then resumed.
    t.cluster.pause(p1);
    let t_stop = origin.elapsed();
    wait_writes_after(t_stop, "the primary was stopped");
    std::thread::sleep(Duration::from_secs(2));
    t.cluster.resume(p1);
    let p2 = primary(&admin);
    assert_ne!(p2, p1, "a new primary served while node {p1} was stopped");

    // 2. The new primary killed, then started again.
    std::thread::sleep(Duration::from_secs(1));
    t.cluster.kill(p2);
    let t_kill = origin.elapsed();
    wait_writes_after(t_kill, "the second primary was killed");
    t.cluster.restart(p2).expect("restart");
    std::thread::sleep(Duration::from_secs(1));
    let t_back = origin.elapsed();
    wait_writes_after(t_back, "the killed node was started again");
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();

    let failed = failed.lock().unwrap().clone();
    assert!(failed.is_empty(), "calls failed: {failed:?}");
    let acked = acked.lock().unwrap().clone();
    let listed = admin.joblist_all(JobFilter::default()).expect("all");
    let listed: Vec<u64> = listed.iter().map(|j| j.job_id).collect();
    let ids: Vec<u64> = acked.iter().map(|a| a.0).collect();
    let (lost, twice) = lost_and_twice(&ids, &listed);
    assert!(
        lost.is_empty() && twice.is_empty(),
        "acknowledged jobs missing {lost:?}, listed twice {twice:?}"
    );
    eprintln!(
        "{} acknowledged writes, primaries {p1} → {p2} → {}",
        acked.len(),
        primary(&admin)
    );
    let logs = t.cluster.all_logs();
    assert!(
        !logs.contains("storage write error") && !logs.contains("panicked"),
        "node logs show a failure"
    );
}

/// S15 extended (C9 amended, issue 27): every node of a TLS cluster flooded as an attacker
/// would, for as long as the test runs — 1,030 idle TCP connections each (more than
/// `--max-connections`), every one the node closes replaced at once, a top-up of 2 sockets per
/// node every 50 ms, and 32 anonymous TLS connections per node that complete their handshake
/// and send `nop`, reconnecting when closed — and a libxce context with a certificate is
/// still served: it starts, and its 3 calls succeed (before: 0 of 3, `-ECONNRESET` at start);
/// a token holder too.
#[test]
fn s15_a_flood_of_strangers_on_every_node_does_not_stop_a_certificate_holder() {
    use std::io::Read;
    use std::net::{SocketAddr, TcpStream};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    let t = tls_cluster(3, true);
    let admin = t.client(Some("admin"));
    admin.hello().unwrap();
    let addrs: Vec<SocketAddr> = t.cluster.nodes.iter().map(|n| n.client).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let held = Arc::new(AtomicUsize::new(0));
    let nops = Arc::new(AtomicUsize::new(0));
    let connect = |a: &SocketAddr| {
        let s = TcpStream::connect_timeout(a, Duration::from_secs(1)).ok()?;
        s.set_nonblocking(true).ok()?;
        Some(s)
    };
    // Per node: 1,030 idle sockets kept open (a closed one replaced), 2 more every 50 ms.
    let keepers: Vec<_> = addrs
        .iter()
        .map(|&a| {
            let (stop, opened, held) = (stop.clone(), opened.clone(), held.clone());
            std::thread::spawn(move || {
                let mut socks: Vec<TcpStream> = (0..1030).filter_map(|_| connect(&a)).collect();
                opened.fetch_add(socks.len(), Ordering::Relaxed);
                held.fetch_add(socks.len(), Ordering::Relaxed);
                while !stop.load(Ordering::Relaxed) {
                    for s in socks.iter_mut() {
                        let mut b = [0u8; 64];
                        let gone = match s.read(&mut b) {
                            Ok(0) => true,
                            Ok(_) => false,
                            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                        };
                        if gone {
                            if let Some(n) = connect(&a) {
                                *s = n;
                                opened.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    for _ in 0..2 {
                        if let Some(n) = connect(&a) {
                            socks.push(n);
                            opened.fetch_add(1, Ordering::Relaxed);
                            held.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        })
        .collect();
    // Per node: 32 anonymous TLS connections doing nop, each replaced when closed.
    let anonymous: Vec<_> = addrs
        .iter()
        .map(|&a| {
            let (stop, nops, opened) = (stop.clone(), nops.clone(), opened.clone());
            let cfg = xce::testing::client_config(&t.path.join("ca.pem"), None, None).unwrap();
            std::thread::spawn(move || {
                use xce::testing::{Connection, WakeState};
                let ws = WakeState::new();
                let host = a.ip().to_string();
                let dial = || {
                    let d = Instant::now() + Duration::from_secs(2);
                    let l = xce_proto::wire::Limits::default();
                    Connection::connect(&host, a.port(), Some(&cfg), l, d, &ws.waker_now()).ok()
                };
                let mut conns: Vec<Option<Connection>> = (0..32).map(|_| dial()).collect();
                let mut seq = 0;
                while !stop.load(Ordering::Relaxed) {
                    for c in conns.iter_mut() {
                        if c.is_none() {
                            *c = dial();
                            opened.fetch_add(1, Ordering::Relaxed);
                        }
                        let Some(conn) = c else { continue };
                        seq += 1;
                        let req = xce_proto::wire::Request {
                            seq,
                            client_id: [9; 16],
                            request_id: 0,
                            no_reply: false,
                            op: Op::Nop,
                            auth_token: String::new(),
                            forward_within_ms: 0,
                        };
                        let d = Instant::now() + Duration::from_secs(2);
                        let ok = conn.send(&req, d, &ws.waker_now()).is_ok()
                            && conn.recv(seq, d, &ws.waker_now()).is_ok();
                        if ok {
                            nops.fetch_add(1, Ordering::Relaxed);
                        } else {
                            *c = None;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
        })
        .collect();
    // Until the floods are in place on every node, and a few seconds more (beyond main's
    // 10-second handshake timeout, which the keepers outlast by replacing what closes).
    let deadline = Instant::now() + Duration::from_secs(30);
    while held.load(Ordering::Relaxed) < 3 * 1030 {
        assert!(Instant::now() < deadline, "the flood did not get in place");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(12));

    // A certificate holder: a new context, and its calls.
    let start = Instant::now();
    let mut served = 0;
    match Client::start(t.config(Some(t.files(Some("user-alice"))), Some(""))) {
        Err(e) => eprintln!("the certificate holder's start: {e}"),
        Ok(alice) => {
            eprintln!("the certificate holder started in {:?}", start.elapsed());
            for i in 0..3 {
                let t0 = Instant::now();
                let r = match i {
                    0 => alice.jobsubmit(spec("alice")).map(|_| ()),
                    1 => alice.joblist(JobFilter::default()).map(|_| ()),
                    _ => alice.hello().map(|_| ()),
                };
                match r {
                    Ok(()) => served += 1,
                    Err(e) => eprintln!("call {i}: {e} {:?}", alice.last_error()),
                }
                eprintln!("call {i}: {:?}", t0.elapsed());
            }
        }
    }
    let took = start.elapsed();
    // A token holder too.
    let bob_token = pki(&["token", t.path.to_str().unwrap(), "user-bob"]);
    let bob_ok = Client::start(t.config(Some(t.files(None)), Some(&bob_token)))
        .and_then(|b| b.jobsubmit(spec("bob")))
        .is_ok();
    stop.store(true, Ordering::Relaxed);
    for k in keepers.into_iter().chain(anonymous) {
        k.join().unwrap();
    }
    let logs = t.cluster.all_logs();
    let count = |pat: &str| logs.lines().filter(|l| l.contains(pat)).count();
    eprintln!(
        "flood: {} strangers' connections opened ({} idle sockets held at the end), {} \
         anonymous nops answered; the certificate holder's start and 3 calls: {served}/3 \
         served in {took:?}; the token holder: {bob_ok}",
        opened.load(Ordering::Relaxed),
        held.load(Ordering::Relaxed),
        nops.load(Ordering::Relaxed)
    );
    eprintln!(
        "node log lines: {} \"connection limit reached\", {} \"unauthenticated connections \
         already\" (rate-limited), {} counts of lines held back",
        count("connection limit reached"),
        count("unauthenticated connections already"),
        count(" more ")
    );
    assert_eq!(served, 3, "the certificate holder was not served");
    assert!(bob_ok, "the token holder was not served");
}

/// A certificate for identity `name` valid for `valid` (`pki identity --valid`), issued into
/// `out` with the CA key of `ca` kept where it is (`--ca-key`).
fn short_lived(ca: &Path, out: &Path, name: &str, valid: &str) {
    let key = ca.join("ca.key");
    pki(&[
        "identity",
        out.to_str().unwrap(),
        name,
        "--ca-key",
        key.to_str().unwrap(),
        "--valid",
        valid,
    ]);
}

/// S15 extended (C13 amended, issue 27): no identity outlives its certificate. A context
/// with an 8-second admin certificate is admin while it is valid (closing a queue that does
/// not exist: ENOENT); once it expired, the same context — whose connection the node closed
/// at the expiry, and whose TLS session cache holds whatever the node offered — is refused,
/// terminally (E_XCE_TLS: the node's `certificate_expired`), never admin again (before: the
/// kept connection, and resumptions after it, stayed admin for as long as the node ran).
#[test]
fn s15_an_expired_certificate_is_refused_to_a_context_made_before() {
    let t = tls_cluster(1, false);
    let secs = 8;
    let out = t.path.join("short");
    short_lived(&t.path, &out, "admin", &format!("{secs}s"));
    assert!(!out.join("ca.key").exists(), "the CA key stays where it is");
    let born = Instant::now();
    let short = TlsFiles {
        ca_file: out.join("ca.pem"),
        cert_file: Some(out.join("admin.pem")),
        key_file: Some(out.join("admin.key")),
    };
    let c = Client::start(t.config(Some(short), Some(""))).unwrap();
    assert_eq!(
        c.queuectrl("no-such-queue", QueueAction::Close),
        Err(Error::Errno(libc::ENOENT)),
        "admin before expiry"
    );
    std::thread::sleep(Duration::from_secs(secs + 1).saturating_sub(born.elapsed()));
    let mut seen = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let r = c.queuectrl("no-such-queue", QueueAction::Close);
        seen.push((r, start.elapsed()));
        assert!(
            matches!(r, Err(Error::Tls(_)) | Err(Error::Auth)),
            "after expiry: {r:?} ({:?})",
            c.last_error()
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "retried: {:?}",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!("an {secs}-second admin certificate after its expiry: {seen:?}");
    t.wait_logged("certificate expired");
}
