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

fn jobs(c: &mut WireClient, f: JobFilter) -> Vec<u64> {
    match c.ok(Op::JobList(f)) {
        ReplyData::Jobs(j) => j.into_iter().map(|j| j.job_id).collect(),
        other => panic!("{other:?}"),
    }
}

fn state_of(c: &mut WireClient, id: u64) -> JobState {
    job(c.ok(Op::JobInfo { job_id: id })).state
}

#[test]
fn every_op_on_real_state() {
    let ctrl = cluster(1, &[]);
    assert_eq!(ctrl.expect_primary(STARTUP), 1);
    let mut c = ctrl.client(1);

    // hello / clusterconf / reslist / waitPrimary
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
    let wp = info(&c.call(Op::WaitPrimary {
        timeout_ms: 1000,
        exclude_host: String::new(),
        exclude_port: 0,
    }));
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
    assert!(hosts(&mut c).is_empty());

    // Sessions: worker/scheduler ops need the matching session on this connection.
    assert_eq!(
        c.call(Op::Heartbeat { host: "h1".into() }).status,
        -E_XCE_AUTH
    );
    assert_eq!(
        c.call(Op::JobDispatch {
            job_id: 1,
            host: "h1".into()
        })
        .status,
        -E_XCE_AUTH
    );
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
    assert_eq!(
        worker
            .call(Op::SetPendReason {
                job_id: 1,
                reason: "x".into()
            })
            .status,
        -E_XCE_AUTH
    );

    let h = hosts(&mut c);
    assert_eq!(h.len(), 1);
    assert_eq!(
        (h[0].name.as_str(), h[0].state, h[0].ncpus, h[0].mem_mb),
        ("h1", HostState::Ok, 4, 8192)
    );
    assert_eq!(h[0].attrs[0].key, "arch");
    worker.fire(Op::Heartbeat { host: "h1".into() });
    worker.ok(Op::UpdateResvals {
        host: "h1".into(),
        resvals: vec![
            wire::ResVal {
                name: "r1m".into(),
                value: "0.5".into(),
            },
            wire::ResVal {
                name: "gpu_temp".into(),
                value: "40".into(),
            },
        ],
    });
    match c.ok(Op::ResVal { host: "h1".into() }) {
        ReplyData::ResVals(v) => {
            assert!(v.iter().any(|r| r.name == "r1m" && r.value == "0.5"));
            assert!(v.iter().any(|r| r.name == "gpu_temp"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        c.call(Op::ResVal {
            host: "nope".into()
        })
        .status,
        -libc::ENOENT
    );
    match c.ok(Op::ResList) {
        ReplyData::Resources(r) => {
            assert!(r.iter().any(|r| r.name == "ncpus"));
            assert!(r.iter().any(|r| r.name == "gpu_temp"));
        }
        other => panic!("{other:?}"),
    }

    // Job life cycle: PEND → RUN → DONE.
    assert_eq!(c.ok(submit(100, "alice", "")), ReplyData::JobId(100));
    assert_eq!(c.call(submit(100, "alice", "")).status, -E_XCE_DUP_JOB);
    let j = job(c.ok(Op::JobInfo { job_id: 100 }));
    assert_eq!(
        (j.state, j.queue.as_str(), j.user.as_str()),
        (JobState::Pend, "normal", "alice")
    );
    assert!(j.submit_time > 0);
    sched.ok(Op::SetPendReason {
        job_id: 100,
        reason: "waiting for h1".into(),
    });
    assert_eq!(
        job(c.ok(Op::JobInfo { job_id: 100 })).pend_reason,
        "waiting for h1"
    );
    sched.ok(Op::ClearReason { job_id: 100 });
    assert_eq!(job(c.ok(Op::JobInfo { job_id: 100 })).pend_reason, "");
    assert_eq!(
        sched
            .call(Op::JobDispatch {
                job_id: 100,
                host: "nohost".into()
            })
            .status,
        -libc::ENOENT
    );
    sched.ok(Op::JobDispatch {
        job_id: 100,
        host: "h1".into(),
    });
    assert_eq!(
        sched
            .call(Op::JobDispatch {
                job_id: 100,
                host: "h1".into()
            })
            .status,
        -libc::EINVAL
    );
    let j = job(c.ok(Op::JobInfo { job_id: 100 }));
    assert_eq!((j.state, j.exec_host.as_str()), (JobState::Run, "h1"));
    assert_eq!(hosts(&mut c)[0].njobs, 1);
    worker.fire(Op::Notify(wire::Notify {
        kind: NotifyKind::JobStart,
        job_id: 100,
        exit_code: 0,
    }));
    worker.ok(Op::UpdateJusage {
        job_id: 100,
        usage: wire::Usage {
            cpu_ms: 1234,
            mem_kb: 5678,
        },
    });
    worker.fire(Op::Notify(wire::Notify {
        kind: NotifyKind::JobFinish,
        job_id: 100,
        exit_code: 0,
    }));
    worker.ok(Op::ResList); // after the fire-and-forget ops on this connection
    let j = job(c.ok(Op::JobInfo { job_id: 100 }));
    assert_eq!((j.state, j.exit_code), (JobState::Done, 0));
    assert_eq!((j.usage.cpu_ms, j.usage.mem_kb), (1234, 5678));
    assert!(j.end_time >= j.start_time && j.start_time > 0);
    assert_eq!(hosts(&mut c)[0].njobs, 0);

    // A failing job: RUN → EXIT with its exit code.
    c.ok(submit(101, "bob", "normal"));
    sched.ok(Op::JobDispatch {
        job_id: 101,
        host: "h1".into(),
    });
    worker.fire(Op::Notify(wire::Notify {
        kind: NotifyKind::JobFail,
        job_id: 101,
        exit_code: 3,
    }));
    worker.ok(Op::ResList);
    let j = job(c.ok(Op::JobInfo { job_id: 101 }));
    assert_eq!((j.state, j.exit_code), (JobState::Exit, 3));

    // jobctrl: SUSPEND / RESUME / KILL / REQUEUE with state checks.
    c.ok(submit(102, "bob", ""));
    c.ok(Op::JobCtrl {
        job_id: 102,
        action: JobAction::Suspend,
    });
    assert_eq!(state_of(&mut c, 102), JobState::Susp);
    assert_eq!(
        c.call(Op::JobCtrl {
            job_id: 102,
            action: JobAction::Suspend
        })
        .status,
        -libc::EINVAL
    );
    c.ok(Op::JobCtrl {
        job_id: 102,
        action: JobAction::Resume,
    });
    assert_eq!(state_of(&mut c, 102), JobState::Pend);
    assert_eq!(
        c.call(Op::JobCtrl {
            job_id: 102,
            action: JobAction::Resume
        })
        .status,
        -libc::EINVAL
    );
    assert_eq!(
        c.call(Op::JobCtrl {
            job_id: 102,
            action: JobAction::Requeue
        })
        .status,
        -libc::EINVAL
    );
    sched.ok(Op::JobDispatch {
        job_id: 102,
        host: "h1".into(),
    });
    c.ok(Op::JobCtrl {
        job_id: 102,
        action: JobAction::Suspend,
    });
    c.ok(Op::JobCtrl {
        job_id: 102,
        action: JobAction::Resume,
    });
    assert_eq!(state_of(&mut c, 102), JobState::Run);
    c.ok(Op::JobCtrl {
        job_id: 102,
        action: JobAction::Requeue,
    });
    let j = job(c.ok(Op::JobInfo { job_id: 102 }));
    assert_eq!((j.state, j.exec_host.as_str()), (JobState::Pend, ""));
    c.ok(Op::JobCtrl {
        job_id: 102,
        action: JobAction::Kill,
    });
    assert_eq!(state_of(&mut c, 102), JobState::Exit);
    assert_eq!(
        c.call(Op::JobCtrl {
            job_id: 102,
            action: JobAction::Kill
        })
        .status,
        -libc::EINVAL
    );
    assert_eq!(
        c.call(Op::JobCtrl {
            job_id: 999,
            action: JobAction::Kill
        })
        .status,
        -libc::ENOENT
    );
    assert_eq!(c.call(Op::JobInfo { job_id: 999 }).status, -libc::ENOENT);
    assert_eq!(
        c.call(Op::UpdateJusage {
            job_id: 1,
            usage: Default::default()
        })
        .status,
        -E_XCE_AUTH
    );

    // joblist filters: user, queue, state mask, limit.
    assert_eq!(jobs(&mut c, JobFilter::default()), vec![100, 101, 102]);
    assert_eq!(
        jobs(
            &mut c,
            JobFilter {
                user: "bob".into(),
                ..Default::default()
            }
        ),
        vec![101, 102]
    );
    assert_eq!(
        jobs(
            &mut c,
            JobFilter {
                queue: "other".into(),
                ..Default::default()
            }
        ),
        Vec::<u64>::new()
    );
    let mask = JobState::Done.mask_bit();
    assert_eq!(
        jobs(
            &mut c,
            JobFilter {
                state_mask: mask,
                ..Default::default()
            }
        ),
        vec![100]
    );
    assert_eq!(
        jobs(
            &mut c,
            JobFilter {
                limit: 2,
                ..Default::default()
            }
        ),
        vec![100, 101]
    );

    // Queues: closed refuses submissions, inactive refuses dispatch.
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
    assert_eq!(
        sched
            .call(Op::JobDispatch {
                job_id: 103,
                host: "h1".into()
            })
            .status,
        -libc::EINVAL
    );
    c.ok(qc("normal", QueueAction::Activate));

    // Hosts: closed hosts get no jobs.
    c.ok(Op::HostCtrl {
        host: "h1".into(),
        action: HostAction::Close,
    });
    assert_eq!(hosts(&mut c)[0].state, HostState::Closed);
    assert_eq!(
        sched
            .call(Op::JobDispatch {
                job_id: 103,
                host: "h1".into()
            })
            .status,
        -libc::EINVAL
    );
    c.ok(Op::HostCtrl {
        host: "h1".into(),
        action: HostAction::Open,
    });
    assert_eq!(
        c.call(Op::HostCtrl {
            host: "nope".into(),
            action: HostAction::Open
        })
        .status,
        -libc::ENOENT
    );
    sched.ok(Op::JobDispatch {
        job_id: 103,
        host: "h1".into(),
    });

    // runtask
    let t1 = match c.ok(Op::RunTask {
        host: "h1".into(),
        command: "uptime".into(),
    }) {
        ReplyData::TaskId(t) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        c.ok(Op::RunTask {
            host: "h1".into(),
            command: "id".into()
        }),
        ReplyData::TaskId(t1 + 1)
    );
    assert_eq!(
        c.call(Op::RunTask {
            host: "nope".into(),
            command: "id".into()
        })
        .status,
        -libc::ENOENT
    );

    // nop: fire-and-forget, or answered when a reply is asked for.
    c.fire(Op::Nop);
    assert_eq!(c.call(Op::Nop).status, 0);

    // Exactly-once: the same request id again returns the first reply, changes nothing.
    let req = c.request(submit(200, "carol", ""));
    assert_eq!(c.try_send_recv(&req).unwrap().data, ReplyData::JobId(200));
    let mut again = req.clone();
    again.seq = 999;
    let r = c.try_send_recv(&again).unwrap();
    assert_eq!((r.status, r.data), (0, ReplyData::JobId(200)));

    assert!(ctrl.logged(1, "fire-and-forget notify"), "{}", ctrl.log(1));
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
