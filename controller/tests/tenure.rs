//! Defect 5 (controller part): a node that stops being primary closes the client connections it
//! served as primary, so nothing waits on — or is silently dropped by — a node that will never
//! apply it. A worker's connection to the primary; the primary is frozen (SIGSTOP), a new one
//! is elected, a fire-and-forget heartbeat goes into the frozen node's socket; after SIGCONT
//! the old primary closes that connection (before: the connection stayed open and the node
//! logged "fire-and-forget heartbeat … dropped", so the worker never learnt of the loss).
//! A connection that only asked a standby stays open.

mod common;

use std::time::Duration;

use common::*;
use xce::wire::{Op, SessionRole};

#[test]
fn deposed_primary_closes_the_connections_it_served() {
    let mut ctrl = Ctrl::start(3, &[]);
    let p = ctrl.wait_settled(STARTUP);
    let standby = (1..=3).find(|&i| i != p).unwrap();

    let mut worker = ctrl.client(p);
    worker.ok(join(SessionRole::Worker, "w1"));
    worker.ok(Op::Heartbeat { host: "w1".into() });
    let mut asker = ctrl.client(standby);
    assert_ne!(
        asker.call(hello()).status,
        0,
        "a standby answers hello as a standby"
    );

    ctrl.signal(p, libc::SIGSTOP);
    let rest: Vec<u64> = (1..=3).filter(|&i| i != p).collect();
    let p2 = ctrl.wait_primary_among(&rest, STARTUP);
    worker.fire(Op::Heartbeat { host: "w1".into() });
    std::thread::sleep(Duration::from_millis(100));
    ctrl.signal(p, libc::SIGCONT);

    assert!(
        worker.closed_within(Duration::from_secs(5)),
        "node {p}, deposed by {p2}, kept the worker's connection open\n{}",
        ctrl.all_logs()
    );
    // The deposed node either closed the connection before reading the heartbeat or, when
    // it read it before learning of its deposition, dropped it and closed the connection:
    // never silence on an open connection.
    ctrl.wait_until("the tenure's end logged", Duration::from_secs(5), || {
        ctrl.log(p)
            .contains("closing the client connections it served")
    });
    // The standby's client was never served as primary by the deposed node: still open.
    assert!(!asker.closed_within(Duration::from_millis(300)));
    assert!(asker.try_call(hello()).is_ok());
    let _ = &mut ctrl;
}
