//! One real controller process: every op of protocol.md on real state, sessions and AUTH,
//! bad input (C9), durability across `kill -9`.

use std::io::Write;
use std::time::Duration;

use crate::common::*;
use xce_proto::error::{E_XCE_AUTH, E_XCE_DUP_JOB};
use xce_proto::wire::{
    self, ControllerRole, HostAction, HostState, JobAction, JobFilter, JobState, NotifyKind, Op,
    QueueAction, ReplyData, SessionRole,
};

fn hosts(c: &mut WireClient) -> Vec<wire::Host> {
    match c.ok(Op::WorkerList) {
        ReplyData::Hosts(h) => h,
        other => panic!("{other:?}"),
    }
}

/// `jobDispatch` of `job_id` to `host`: its status.
fn dispatch(c: &mut WireClient, job_id: u64, host: &str) -> i32 {
    let host = host.into();
    c.call(Op::JobDispatch { job_id, host }).status
}

/// `jobctrl` of `job_id`: its status.
fn jobctrl(c: &mut WireClient, job_id: u64, action: JobAction) -> i32 {
    c.call(Op::JobCtrl { job_id, action }).status
}

#[test]
fn every_op_on_real_state() {
    let ctrl = cluster(1, &[]);
    assert_eq!(ctrl.expect_primary(STARTUP), 1);
    let mut c = ctrl.client(1);
    hello_conf_and_wait_primary(&ctrl, &mut c);
    let (mut worker, mut sched) = sessions(&ctrl, &mut c);
    life_cycle(&mut c, &mut worker, &mut sched);
    job_control(&mut c, &mut sched);
    listings_queues_and_hosts(&mut c, &mut sched);
    tasks_nop_and_exactly_once(&mut c);
    assert!(ctrl.logged(1, "fire-and-forget notify"), "{}", ctrl.log(1));
}

/// hello / clusterconf / waitPrimary (F18's exclusion) on the only node.
fn hello_conf_and_wait_primary(ctrl: &Cluster, c: &mut WireClient) {
    let i = info(&c.call(hello()));
    assert_eq!(
        (i.id, i.role, i.primary_id),
        (1, ControllerRole::Primary, 1)
    );
    assert_eq!(
        format!("{}:{}", i.primary_host, i.primary_port),
        ctrl.addr(1)
    );
    assert!(i.term >= 1);
    match c.ok(Op::ClusterConf) {
        ReplyData::ClusterConf(cc) => {
            assert_eq!(cc.primary_id, 1);
            assert_eq!(cc.controllers.len(), 1);
            assert_eq!(cc.controllers[0].role, ControllerRole::Primary);
            let q = cc
                .queues
                .iter()
                .find(|q| q.name == "normal")
                .expect("queue normal");
            assert!(q.open && q.active);
        }
        other => panic!("{other:?}"),
    }
    let wp = info(&c.call(wait_primary_op(1000)));
    assert_eq!(wp.primary_id, 1);
    assert_eq!(
        wp.waiters, 1,
        "the waitPrimary answer counts its own waiter (herd spread)"
    );
    // F18 exclusion: asking for a primary other than the only one waits out the timeout and
    // names none (a standby that still believes a dead primary leads must not name it).
    let t = std::time::Instant::now();
    let wp = info(&c.call(Op::WaitPrimary {
        timeout_ms: 200,
        exclude_host: wp.primary_host.clone(),
        exclude_port: wp.primary_port,
    }));
    assert!(
        t.elapsed() >= std::time::Duration::from_millis(190),
        "{:?}",
        t.elapsed()
    );
    assert_eq!((wp.primary_id, wp.primary_port), (0, 0));
    assert!(hosts(c).is_empty());
}

/// Sessions: worker/scheduler ops need the matching session on their connection; a worker
/// joins (its host listed, its values and resources read back). The worker and the scheduler.
fn sessions(ctrl: &Cluster, c: &mut WireClient) -> (WireClient, WireClient) {
    let heartbeat = c.call(Op::Heartbeat { host: "h1".into() });
    assert_eq!(heartbeat.status, -E_XCE_AUTH);
    assert_eq!(dispatch(c, 1, "h1"), -E_XCE_AUTH);
    assert_eq!(c.call(Op::ClearReason { job_id: 1 }).status, -E_XCE_AUTH);
    // A fire-and-forget op without a session is dropped with a log line, and no reply.
    c.fire(Op::Notify(wire::Notify {
        kind: NotifyKind::JobStart,
        job_id: 1,
        exit_code: 0,
    }));
    c.ok(Op::ResList); // the next reply is this one's (seq checked)

    let mut worker = ctrl.client(1);
    let sid = match worker.ok(join(SessionRole::Worker, "h1")) {
        ReplyData::SessionId(s) => s,
        other => panic!("{other:?}"),
    };
    assert!(sid > 0);
    let mut sched = ctrl.client(1);
    sched.ok(join(SessionRole::Scheduler, "sched"));
    // A worker session is not a scheduler session.
    let reason = "x".into();
    let r = worker.call(Op::SetPendReason { job_id: 1, reason });
    assert_eq!(r.status, -E_XCE_AUTH);

    let h = hosts(c);
    assert_eq!(h.len(), 1);
    assert_eq!(
        (h[0].name.as_str(), h[0].state, h[0].ncpus, h[0].mem_mb),
        ("h1", HostState::Ok, 4, 8192)
    );
    assert_eq!(h[0].attrs[0].key, "arch");
    worker.fire(Op::Heartbeat { host: "h1".into() });
    let rv = |name: &str, value: &str| wire::ResVal {
        name: name.into(),
        value: value.into(),
    };
    worker.ok(Op::UpdateResvals {
        host: "h1".into(),
        resvals: vec![rv("r1m", "0.5"), rv("gpu_temp", "40")],
    });
    match c.ok(Op::ResVal { host: "h1".into() }) {
        ReplyData::ResVals(v) => {
            assert!(v.iter().any(|r| r.name == "r1m" && r.value == "0.5"));
            assert!(v.iter().any(|r| r.name == "gpu_temp"));
        }
        other => panic!("{other:?}"),
    }
    let nope = c.call(Op::ResVal {
        host: "nope".into(),
    });
    assert_eq!(nope.status, -libc::ENOENT);
    match c.ok(Op::ResList) {
        ReplyData::Resources(r) => {
            assert!(r.iter().any(|r| r.name == "ncpus"));
            assert!(r.iter().any(|r| r.name == "gpu_temp"));
        }
        other => panic!("{other:?}"),
    }
    (worker, sched)
}

/// Job life cycle: PEND → RUN → DONE (job 100), RUN → EXIT with its exit code (job 101).
fn life_cycle(c: &mut WireClient, worker: &mut WireClient, sched: &mut WireClient) {
    assert_eq!(c.ok(submit(100, "alice", "")), ReplyData::JobId(100));
    assert_eq!(c.call(submit(100, "alice", "")).status, -E_XCE_DUP_JOB);
    let j = job(c.ok(Op::JobInfo { job_id: 100 }));
    assert_eq!(
        (j.state, j.queue.as_str(), j.user.as_str()),
        (JobState::Pend, "normal", "alice")
    );
    assert!(j.submit_time > 0);
    let reason = "waiting for h1".into();
    sched.ok(Op::SetPendReason {
        job_id: 100,
        reason,
    });
    let j = job(c.ok(Op::JobInfo { job_id: 100 }));
    assert_eq!(j.pend_reason, "waiting for h1");
    sched.ok(Op::ClearReason { job_id: 100 });
    assert_eq!(job(c.ok(Op::JobInfo { job_id: 100 })).pend_reason, "");
    assert_eq!(dispatch(sched, 100, "nohost"), -libc::ENOENT);
    assert_eq!(dispatch(sched, 100, "h1"), 0);
    assert_eq!(dispatch(sched, 100, "h1"), -libc::EINVAL);
    let j = job(c.ok(Op::JobInfo { job_id: 100 }));
    assert_eq!((j.state, j.exec_host.as_str()), (JobState::Run, "h1"));
    assert_eq!(hosts(c)[0].njobs, 1);
    let notify = |kind, job_id, exit_code| {
        Op::Notify(wire::Notify {
            kind,
            job_id,
            exit_code,
        })
    };
    worker.fire(notify(NotifyKind::JobStart, 100, 0));
    let usage = wire::Usage {
        cpu_ms: 1234,
        mem_kb: 5678,
    };
    worker.ok(Op::UpdateJusage { job_id: 100, usage });
    worker.fire(notify(NotifyKind::JobFinish, 100, 0));
    worker.ok(Op::ResList); // after the fire-and-forget ops on this connection
    let j = job(c.ok(Op::JobInfo { job_id: 100 }));
    assert_eq!((j.state, j.exit_code), (JobState::Done, 0));
    assert_eq!((j.usage.cpu_ms, j.usage.mem_kb), (1234, 5678));
    assert!(j.end_time >= j.start_time && j.start_time > 0);
    assert_eq!(hosts(c)[0].njobs, 0);

    // A failing job: RUN → EXIT with its exit code.
    c.ok(submit(101, "bob", "normal"));
    assert_eq!(dispatch(sched, 101, "h1"), 0);
    worker.fire(notify(NotifyKind::JobFail, 101, 3));
    worker.ok(Op::ResList);
    let j = job(c.ok(Op::JobInfo { job_id: 101 }));
    assert_eq!((j.state, j.exit_code), (JobState::Exit, 3));
}

/// jobctrl: SUSPEND / RESUME / KILL / REQUEUE, each answer and the state after it (job 102).
fn job_control(c: &mut WireClient, sched: &mut WireClient) {
    use JobAction::{Kill, Requeue, Resume, Suspend};
    c.ok(submit(102, "bob", ""));
    let (ok, einval) = (0, -libc::EINVAL);
    let pending = [
        (Suspend, ok, JobState::Susp),
        (Suspend, einval, JobState::Susp),
        (Resume, ok, JobState::Pend),
        (Resume, einval, JobState::Pend),
        (Requeue, einval, JobState::Pend),
    ];
    let dispatched = [
        (Suspend, ok, JobState::Susp),
        (Resume, ok, JobState::Run),
        (Requeue, ok, JobState::Pend),
        (Kill, ok, JobState::Exit),
        (Kill, einval, JobState::Exit),
    ];
    for (i, steps) in [&pending, &dispatched].into_iter().enumerate() {
        if i == 1 {
            assert_eq!(dispatch(sched, 102, "h1"), 0);
        }
        for &(action, status, state) in steps {
            assert_eq!(jobctrl(c, 102, action), status, "{action:?}");
            let j = job(c.ok(Op::JobInfo { job_id: 102 }));
            assert_eq!(j.state, state, "after {action:?}");
            if matches!(action, Requeue) && status == ok {
                assert_eq!(j.exec_host, "", "a requeued job keeps no host");
            }
        }
    }
    assert_eq!(jobctrl(c, 999, Kill), -libc::ENOENT);
    assert_eq!(c.call(Op::JobInfo { job_id: 999 }).status, -libc::ENOENT);
    let usage = Default::default();
    let r = c.call(Op::UpdateJusage { job_id: 1, usage });
    assert_eq!(r.status, -E_XCE_AUTH);
}

/// joblist filters (user, queue, state mask, limit); queues closed refuse submissions,
/// inactive ones dispatch; closed hosts get no jobs.
fn listings_queues_and_hosts(c: &mut WireClient, sched: &mut WireClient) {
    let filtered: [(JobFilter, &[u64]); 5] = [
        (JobFilter::default(), &[100, 101, 102]),
        (
            JobFilter {
                user: "bob".into(),
                ..Default::default()
            },
            &[101, 102],
        ),
        (
            JobFilter {
                queue: "other".into(),
                ..Default::default()
            },
            &[],
        ),
        (
            JobFilter {
                state_mask: JobState::Done.mask_bit(),
                ..Default::default()
            },
            &[100],
        ),
        (
            JobFilter {
                limit: 2,
                ..Default::default()
            },
            &[100, 101],
        ),
    ];
    for (f, want) in filtered {
        assert_eq!(job_ids(c, f.clone()), want, "{f:?}");
    }

    let qc = |queue: &str, action| Op::QueueCtrl {
        queue: queue.into(),
        action,
    };
    assert_eq!(c.call(qc("nope", QueueAction::Close)).status, -libc::ENOENT);
    c.ok(qc("normal", QueueAction::Close));
    assert!(c.call(submit(103, "bob", "")).status < 0);
    c.ok(qc("normal", QueueAction::Open));
    c.ok(submit(103, "bob", ""));
    c.ok(qc("normal", QueueAction::Inactivate));
    assert_eq!(dispatch(sched, 103, "h1"), -libc::EINVAL);
    c.ok(qc("normal", QueueAction::Activate));

    let hc = |host: &str, action| Op::HostCtrl {
        host: host.into(),
        action,
    };
    c.ok(hc("h1", HostAction::Close));
    assert_eq!(hosts(c)[0].state, HostState::Closed);
    assert_eq!(dispatch(sched, 103, "h1"), -libc::EINVAL);
    c.ok(hc("h1", HostAction::Open));
    assert_eq!(c.call(hc("nope", HostAction::Open)).status, -libc::ENOENT);
    assert_eq!(dispatch(sched, 103, "h1"), 0);
}

/// runtask; nop fire-and-forget or answered; the same request id again returns the first
/// reply and changes nothing.
fn tasks_nop_and_exactly_once(c: &mut WireClient) {
    let task = |host: &str, command: &str| Op::RunTask {
        host: host.into(),
        command: command.into(),
    };
    let t1 = match c.ok(task("h1", "uptime")) {
        ReplyData::TaskId(t) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!(c.ok(task("h1", "id")), ReplyData::TaskId(t1 + 1));
    assert_eq!(c.call(task("nope", "id")).status, -libc::ENOENT);

    c.fire(Op::Nop);
    assert_eq!(c.call(Op::Nop).status, 0);

    let req = c.request(submit(200, "carol", ""));
    assert_eq!(c.try_send_recv(&req).unwrap().data, ReplyData::JobId(200));
    let mut again = req.clone();
    again.seq = 999;
    let r = c.try_send_recv(&again).unwrap();
    assert_eq!((r.status, r.data), (0, ReplyData::JobId(200)));
}

#[test]
fn silent_worker_becomes_unavail_and_heartbeat_revives_it() {
    let ctrl = cluster(1, &["--host-timeout-ms", "1500"]);
    ctrl.expect_primary(STARTUP);
    let mut w = ctrl.client(1);
    w.ok(join(SessionRole::Worker, "h2"));
    let mut c = ctrl.client(1);
    assert_eq!(hosts(&mut c)[0].state, HostState::Ok);
    ctrl.wait_until("h2 UNAVAIL", Duration::from_secs(10), || {
        hosts(&mut c)[0].state == HostState::Unavail
    });
    w.fire(Op::Heartbeat { host: "h2".into() });
    ctrl.wait_until("h2 OK again", Duration::from_secs(10), || {
        hosts(&mut c)[0].state == HostState::Ok
    });
}

#[test]
fn bad_input_closes_only_that_connection() {
    let ctrl = cluster(1, &["--idle-timeout-ms", "1500"]);
    ctrl.expect_primary(STARTUP);
    let mut good = ctrl.client(1);
    good.ok(Op::ResList);

    // Garbage that is a valid segment table but not a Request.
    let mut bad = ctrl.client(1);
    bad.stream
        .write_all(&[
            0, 0, 0, 0, 2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5,
            6, 7, 8,
        ])
        .unwrap();
    assert!(
        bad.closed_within(Duration::from_secs(5)),
        "malformed frame must close the connection"
    );

    // A segment table announcing ~1 GiB: refused before any allocation.
    let mut big = ctrl.client(1);
    big.stream.write_all(&[0, 0, 0, 0, 0, 0, 0, 8]).unwrap();
    assert!(
        big.closed_within(Duration::from_secs(5)),
        "oversized frame must close the connection"
    );

    // Half a frame then EOF.
    let mut half = ctrl.client(1);
    let mut out = Vec::new();
    wire::encode_request(&half.request(Op::ResList), &mut out);
    half.stream.write_all(&out[..out.len() / 2]).unwrap();
    drop(half);

    // Pipelined requests are answered in order.
    let reqs: Vec<_> = (0..3).map(|_| good.request(Op::ResList)).collect();
    let mut out = Vec::new();
    for r in &reqs {
        wire::encode_request(r, &mut out);
    }
    good.stream.write_all(&out).unwrap();
    for r in &reqs {
        assert_eq!(good.recv().unwrap().seq, r.seq);
    }

    // An idle connection is closed after the idle timeout.
    let mut idle = ctrl.client(1);
    assert!(
        idle.closed_within(Duration::from_secs(6)),
        "idle connection must be closed"
    );

    let mut fresh = ctrl.client(1);
    fresh.ok(Op::ResList);
    ctrl.wait_until("log lines", Duration::from_secs(5), || {
        let l = ctrl.log(1);
        l.contains("malformed request")
            && l.contains("bad frame")
            && l.contains("closed mid-frame")
            && l.contains("idle")
    });
}

#[test]
fn state_survives_kill9_and_restart() {
    let mut ctrl = cluster(1, &[]);
    ctrl.expect_primary(STARTUP);
    let mut c = ctrl.client(1);
    c.ok(submit(7, "dave", ""));
    c.ok(Op::QueueCtrl {
        queue: "normal".into(),
        action: QueueAction::Inactivate,
    });
    ctrl.kill(1);
    ctrl.start_node(1);
    ctrl.expect_primary(STARTUP);
    let mut c = ctrl.client(1);
    assert_eq!(job(c.ok(Op::JobInfo { job_id: 7 })).user, "dave");
    match c.ok(Op::ClusterConf) {
        ReplyData::ClusterConf(cc) => assert!(!cc.queues[0].active),
        other => panic!("{other:?}"),
    }
}
