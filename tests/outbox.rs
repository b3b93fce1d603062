//! F12 (amended), with scripted controllers: a notification keeps its request id until a
//! primary acknowledges it, whatever the connections in between; the outbox is bounded.

use std::time::Duration;

use xce::client::{Client, Config};
use xce::client::{Endpoint, Options};
use xce::Error;
use xce_proto::error::*;
use xce_testkit::fake::*;

mod common;
use common::finish;

fn client(masters: &[Endpoint], options: Options) -> Client {
    Client::start_with(Config::new(masters.to_vec()), options, fast_retry(3)).expect("start")
}

/// A primary that goes silent (frozen) never acknowledges: once the acknowledgement is a reply
/// timeout late, the next call leaves it, and the new primary gets the notification again
/// with the same request id; a standby's refusal keeps it queued too.
#[test]
fn a_notification_keeps_its_request_id_until_a_primary_acknowledges_it() {
    // Acknowledges the first notification, then freezes.
    let frozen = FakeController::start(vec![Step::Ok]);
    frozen.push(vec![Step::Silent; 10]);
    let standby = FakeController::start(vec![]);
    let primary = FakeController::start(vec![]);
    let opts = Options {
        reply_timeout: Duration::from_millis(300),
        ..fast_options()
    };
    let c = client(
        &[frozen.endpoint(), standby.endpoint(), primary.endpoint()],
        opts,
    );
    c.notify(finish(6)).unwrap();
    c.flush(Duration::from_secs(2)).expect("acknowledged");
    c.notify(finish(7)).unwrap();
    assert!(frozen.wait_requests(2, Duration::from_secs(2)));
    assert_eq!(c.outbox_depth(), 1);
    // The standby answers the hello "standby" and names the primary.
    standby.push(vec![Step::Standby(Some(primary.endpoint())); 4]);
    std::thread::sleep(Duration::from_millis(350));
    c.flush(Duration::from_secs(3))
        .expect("acknowledged by the primary");
    assert_eq!(c.outbox_depth(), 0);
    let first = frozen.requests()[1].request_id;
    assert_ne!(first, 0);
    let sent: Vec<_> = primary
        .requests()
        .into_iter()
        .filter(|r| r.op.name() == "notify")
        .collect();
    assert_eq!(sent.len(), 1, "{:?}", primary.ops());
    assert_eq!(
        sent[0].request_id, first,
        "a re-send, not a new notification"
    );
    assert!(!sent[0].no_reply);
    // F17 (amended): that reconnect was a failover, counted.
    let st = c.stats();
    assert!(st.rotations >= 1 && st.failovers >= 1, "{st:?}");
}

/// No primary at all: notifications are accepted (0) until the outbox is full, then refused
/// with `E_XCE_OUTBOX_FULL`; a flush ends at its timeout. (Heartbeats of 128 hosts: those of
/// one host would replace each other.)
#[test]
fn a_full_outbox_refuses_and_flush_is_bounded() {
    let a = FakeController::start(vec![]);
    let c = client(&[a.endpoint()], fast_options());
    a.push(vec![Step::Status(-E_XCE_NOT_READY); 2000]);
    let mut accepted = 0;
    let refused = loop {
        // One host each: a heartbeat replaces the waiting one of its own host.
        match c.heartbeat(&format!("w{accepted}")) {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted <= 1000, "never full");
    };
    assert_eq!(refused, Error::OutboxFull);
    assert_eq!(accepted, 128);
    assert_eq!(c.outbox_depth(), 128);
    let t = std::time::Instant::now();
    assert_eq!(
        c.flush(Duration::from_millis(300)),
        Err(Error::Errno(libc::ETIMEDOUT))
    );
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(c.outbox_depth(), 128, "kept for later");
}
