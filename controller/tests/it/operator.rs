//! Found when run as an operator would (issue 19): host names in `--cluster`, a restart with a
//! changed address, a restarted ex-primary's role line, a node started from a config file.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use xce_proto::wire::{ControllerRole, ReplyData};

/// Runs `xce-controller run ARGS` until it exits (bounded): (exit code, stderr).
fn run_to_exit(args: &[String], bound: Duration) -> (Option<i32>, String) {
    let all: Vec<&str> = std::iter::once("run")
        .chain(args.iter().map(String::as_str))
        .collect();
    match run_cli(&all, bound) {
        (None, _, err) => panic!("run {args:?} still running after {bound:?}:\n{err}"),
        (code, _, err) => (code, err),
    }
}

/// Waits until `addr` answers `hello` as primary.
fn wait_primary_at(addr: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(mut c) = WireClient::try_connect(addr, Duration::from_millis(500)) {
            c.set_timeout(Duration::from_secs(2));
            if let Ok(r) = c.try_call(hello()) {
                if matches!(&r.data, ReplyData::CtrlInfo(i) if i.role == ControllerRole::Primary)
                    && r.status == 0
                {
                    return;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "{addr}: no primary in {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `xce-controller run ARGS` (its stderr in `dir/log`) while `check` runs, then kills it:
/// its log. A failed `check` fails the test with that log.
fn while_running(
    dir: &Path,
    args: &[&str],
    check: impl FnOnce() + std::panic::UnwindSafe,
) -> String {
    let mut child = Command::new(BIN)
        .arg("run")
        .args(args)
        .stderr(std::fs::File::create(dir.join("log")).unwrap())
        .spawn()
        .unwrap();
    let ok = std::panic::catch_unwind(check);
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    assert!(ok.is_ok(), "{log}");
    log
}

/// A single node whose `--cluster` names `localhost`, not an IP address, starts and serves.
#[test]
fn cluster_accepts_host_names() {
    let p = free_ports(2);
    let dir = tempfile::tempdir().unwrap();
    let spec = format!("1=localhost:{}/localhost:{}", p[0], p[1]);
    let data = dir.path().join("d").display().to_string();
    let args = ["--id", "1", "--cluster", &spec, "--data", &data];
    while_running(dir.path(), &args, || {
        wait_primary_at(&format!("127.0.0.1:{}", p[0]), STARTUP);
    });

    // Not a name, not an address: refused at once, saying which.
    let (code, err) = run_to_exit(
        &[
            "--id".into(),
            "1".into(),
            "--cluster".into(),
            "1=bad_name!:1/localhost:0".into(),
            "--data".into(),
            "/nonexistent".into(),
        ],
        Duration::from_secs(10),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("bad address \"bad_name!:1\""), "{err}");
}

/// Restarting a member with another address in `--cluster` than the cluster stored is refused
/// with a clear message, and a restarted ex-primary logs no `role=primary` from its old state.
#[test]
fn restart_with_changed_address_is_refused_and_no_stale_primary_line() {
    let mut ctrl = cluster(3, &[]);
    let p = ctrl.expect_settled(STARTUP);
    ctrl.kill(p);
    let others: Vec<u32> = [1, 2, 3].into_iter().filter(|&i| i != p).collect();
    ctrl.expect_primary_among(&others, Duration::from_secs(10));

    // The same node, its client port moved.
    let moved = free_ports(1)[0];
    let old = ctrl.addr(p).clone();
    let spec = ctrl.spec().replace(&old, &format!("127.0.0.1:{moved}"));
    assert_ne!(spec, ctrl.spec());
    let (code, err) = run_to_exit(
        &[
            "--id".into(),
            p.to_string(),
            "--cluster".into(),
            spec,
            "--data".into(),
            ctrl.data_dir()
                .join(format!("data-{p}"))
                .display()
                .to_string(),
        ],
        Duration::from_secs(15),
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("does not match the membership stored in the data directory")
            && err.contains(&old)
            && err.contains(&format!("127.0.0.1:{moved}")),
        "{err}"
    );

    // Restarted as it was: it follows, and never claims to be primary on the way.
    let before = ctrl.log(p).len();
    ctrl.start_node(p);
    ctrl.expect_settled(Duration::from_secs(15));
    ctrl.wait_until(
        "the restarted node's role line",
        Duration::from_secs(10),
        || ctrl.log(p)[before..].contains("role=standby"),
    );
    let after = ctrl.log(p)[before..].to_string();
    assert!(!after.contains("role=primary"), "{after}");
}

/// `run --config FILE` starts a node from the file alone; flags override it.
#[test]
fn node_starts_from_a_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = free_ports(3);
    let cfg = write_file(
        dir.path(),
        "xce.toml",
        &format!(
            r#"
id = 1
data = "{data}"
cluster_name = "from-file"
metrics = "127.0.0.1:1"
heartbeat_ms = 40
election_min_ms = 200
election_max_ms = 400

[[member]]
id = 1
client = "127.0.0.1:{c}"
raft = "127.0.0.1:{r}"
"#,
            data = dir.path().join("d").display(),
            c = p[0],
            r = p[1],
        ),
    );
    // The file's metrics address (port 1, not ours to bind) is overridden on the command line.
    let cfg = cfg.display().to_string();
    let metrics = format!("127.0.0.1:{}", p[2]);
    let args = ["--config", &cfg, "--metrics", &metrics];
    let log = while_running(dir.path(), &args, || {
        let addr = format!("127.0.0.1:{}", p[0]);
        wait_primary_at(&addr, STARTUP);
        let mut c = WireClient::connect(&addr);
        match c.ok(xce_proto::wire::Op::ClusterConf) {
            ReplyData::ClusterConf(cc) => assert_eq!(cc.cluster_name, "from-file"),
            other => panic!("{other:?}"),
        }
    });
    assert!(
        log.contains(&format!("metrics on http://127.0.0.1:{}/metrics", p[2])),
        "{log}"
    );

    // A key that is no option is refused, naming it.
    let bad = write_file(dir.path(), "bad.toml", "id = 1\nheartbeat = 40\n");
    let (code, err) = run_to_exit(
        &["--config".into(), bad.display().to_string()],
        Duration::from_secs(10),
    );
    assert_eq!(code, Some(2), "{err}");
    // Issue 26: the file's key and line, without ~50 lines of usage.
    assert!(
        err.contains("bad.toml: line 2: unknown option heartbeat"),
        "{err}"
    );
    assert!(err.lines().count() <= 2, "{err}");
}
