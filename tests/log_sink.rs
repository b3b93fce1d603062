//! F14: the replaceable log sink (its own test binary: the sink is process-wide).

use xce::client::log::{self, Level};
use xce::Error;
use xce_proto::error::*;
use xce_testkit::fake::*;

mod common;

#[test]
fn rotations_log_at_info_and_exhaustion_at_warn_through_the_installed_sink() {
    common::captured_log(Level::Info);
    // Installing again is harmless (idempotent, no global logger init): the new sink gets the
    // lines.
    let lines = common::captured_log(Level::Info);

    let a = FakeController::start(vec![Step::Standby(None), Step::Status(-E_XCE_NOT_READY)]);
    let b = FakeController::start(vec![Step::Status(-E_XCE_NOT_READY); 10]);
    let c = client(&[a.endpoint(), b.endpoint()], fast_options(), fast_retry(2));
    assert_eq!(c.hello(), Err(Error::NotReady));

    let lines = lines.lock().clone();
    let info: Vec<_> = lines
        .iter()
        .filter(|(l, s)| *l == Level::Info && s.contains("rotating from"))
        .collect();
    assert!(!info.is_empty(), "{lines:?}");
    // Every line names the context it is about: the client name and the context's serial.
    assert!(
        lines.iter().all(|(_, s)| s.starts_with("libxce#")),
        "{lines:?}"
    );
    let first = &info[0].1;
    assert!(
        first.contains(&a.endpoint().to_string()) && first.contains(&b.endpoint().to_string()),
        "{first}"
    );
    assert!(first.contains("standby"), "why: {first}");
    let warn: Vec<_> = lines.iter().filter(|(l, _)| *l == Level::Warn).collect();
    assert_eq!(warn.len(), 1, "{lines:?}");
    assert!(
        warn[0].1.contains("gave up after") && warn[0].1.contains("cluster not ready"),
        "{:?}",
        warn[0]
    );

    // Off silences; None restores the default sink.
    log::set_level(Level::Off);
    assert!(!log::enabled(Level::Error));
    log::set_sink(None);
}
