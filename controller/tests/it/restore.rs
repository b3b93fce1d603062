//! S19 (C20): `snapshot save` under writes, `snapshot restore` into a new cluster, and the
//! operator trial of issue 25's defect 5: after a restore, one node's pre-restore data
//! directory is put back. Its terms and indexes match the restored cluster's, so Raft alone
//! would take it (on the build before C20 the nodes then listed different job sets); it must
//! be refused, on both sides, and every primary must list every acknowledged job.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use xce_proto::wire::ControllerRole;

const CLI: Duration = Duration::from_secs(60);

/// `xce-controller ARGS`: its stdout, after checking it exited 0.
fn cli_ok(args: &[&str]) -> String {
    let (code, out, err) = run_cli(args, CLI);
    assert_eq!(
        code,
        Some(0),
        "xce-controller {args:?}\nstdout:\n{out}\nstderr:\n{err}"
    );
    out
}

/// The word after `what` in `text`.
fn after<'a>(text: &'a str, what: &str) -> &'a str {
    text.split(what)
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {what:?} in {text}"))
}

fn restore(file: &Path, data: &Path, id: u32, spec: &str, name: &str) -> (Option<i32>, String) {
    let (code, out, err) = run_cli(
        &[
            "snapshot".as_ref(),
            "restore".as_ref(),
            file.as_os_str(),
            "--data".as_ref(),
            data.as_os_str(),
            "--id".as_ref(),
            id.to_string().as_ref(),
            "--cluster".as_ref(),
            spec.as_ref(),
            "--restore-id".as_ref(),
            name.as_ref(),
        ],
        CLI,
    );
    (code, out + &err)
}

#[test]
fn s19_restore_keeps_every_write_acknowledged_before_the_save_and_refuses_old_data() {
    let mut ctrl = cluster(3, &["--snapshot-logs", "50"]);
    let p = ctrl.expect_settled(STARTUP);
    let masters = ctrl.masters();

    // Writes all along: (job id, when acknowledged).
    let acked: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop, addr) = (acked.clone(), stop.clone(), ctrl.addr(p).clone());
        std::thread::spawn(move || {
            let mut c = WireClient::connect(&addr);
            let mut id = 10_000u64;
            while !stop.load(Ordering::Relaxed) {
                id += 1;
                let r = c.call(submit(id, "alice", ""));
                assert_eq!(r.status, 0, "{r:?}");
                acked.lock().unwrap().push((id, Instant::now()));
            }
        })
    };
    let count = |acked: &Arc<Mutex<Vec<(u64, Instant)>>>| acked.lock().unwrap().len();
    ctrl.wait_until("writes before the save", STARTUP, || count(&acked) >= 150);
    let file = ctrl.data_dir().join("backup.xcb");
    let save_started = Instant::now();
    let saved = cli_ok(&[
        "snapshot",
        "save",
        file.to_str().unwrap(),
        "--masters",
        &masters,
    ]);
    let during = acked
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, t)| *t > save_started)
        .count();
    let n = count(&acked);
    ctrl.wait_until("writes after the save", STARTUP, || count(&acked) >= n + 50);
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    eprintln!("{saved}({during} writes acknowledged while it saved)");
    assert!(saved.contains("3 of 3 voters had this state"), "{saved}");
    let before: BTreeSet<u64> = acked
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, t)| *t < save_started)
        .map(|(id, _)| *id)
        .collect();
    let all: BTreeSet<u64> = acked.lock().unwrap().iter().map(|(id, _)| *id).collect();
    let shown = cli_ok(&["snapshot", "show", file.to_str().unwrap()]);
    assert!(shown.contains("(checked)"), "{shown}");
    let old_cluster = after(&shown, "cluster ").to_string();

    // The disaster: every node stopped; their directories kept aside (node 3's comes back).
    for id in 1..=3 {
        ctrl.kill(id);
    }
    let root = ctrl.data_dir().to_path_buf();
    let data = |id: u32| root.join(format!("data-{id}"));
    let old = |id: u32| root.join(format!("old-{id}"));
    for id in 1..=3 {
        std::fs::rename(data(id), old(id)).unwrap();
    }
    // A damaged backup, and a directory that holds data, are refused.
    let bytes = std::fs::read(&file).unwrap();
    let damaged = ctrl.data_dir().join("damaged.xcb");
    let mut bad = bytes.clone();
    let at = bad.len() - 40;
    bad[at] ^= 0x20;
    std::fs::write(&damaged, &bad).unwrap();
    let spare = ctrl.data_dir().join("spare");
    let (code, out) = restore(&damaged, &spare, 1, &ctrl.spec(), "s19");
    assert_eq!(code, Some(1), "a damaged backup restored:\n{out}");
    // Issue 36: a truncated file and a file that is no backup are named as such (before:
    // "failed to fill whole buffer", "text is not UTF-8").
    let truncated = ctrl.data_dir().join("truncated.xcb");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let (code, out) = restore(&truncated, &spare, 1, &ctrl.spec(), "s19");
    assert!(code == Some(1) && out.contains("truncated: "), "{out}");
    let other = ctrl.data_dir().join("other.xcb");
    std::fs::write(&other, vec![0xffu8; 4096]).unwrap();
    let (code, out) = restore(&other, &spare, 1, &ctrl.spec(), "s19");
    assert!(
        code == Some(1) && out.contains("not a backup `xce-controller snapshot save` wrote"),
        "{out}"
    );
    let (code, out) = restore(&file, &old(1), 1, &ctrl.spec(), "s19");
    assert!(
        code == Some(1) && out.contains("not empty"),
        "restored over data:\n{out}"
    );
    // Restore: every member from the same file and name, at the same addresses.
    let mut ids = Vec::new();
    for id in 1..=3 {
        let (code, out) = restore(&file, &data(id), id, &ctrl.spec(), "s19");
        assert_eq!(code, Some(0), "{out}");
        ids.push(after(&out, "new cluster ").to_string());
    }
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    // C13 amended (issue 36): what restore wrote is the node's user's only (it was 0755/0644
    // until the node's first start).
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&data(1)), 0o700, "{}", data(1).display());
        for e in std::fs::read_dir(data(1)).unwrap() {
            let e = e.unwrap().path();
            let want = if e.is_dir() { 0o700 } else { 0o600 };
            assert_eq!(mode(&e), want, "{}", e.display());
        }
    }
    assert_ne!(ids[0], old_cluster);
    // Another restore of the same file is another cluster.
    let (code, out) = restore(&file, &spare, 1, &ctrl.spec(), "s19-again");
    assert_eq!(code, Some(0), "{out}");
    assert_ne!(after(&out, "new cluster "), ids[0]);

    ctrl.start_all();
    let q = ctrl.expect_settled(STARTUP);
    let got = listed_on(&ctrl, q);
    let got_set: BTreeSet<u64> = got.iter().copied().collect();
    assert_eq!(got.len(), got_set.len(), "a job listed twice");
    let lost: Vec<&u64> = before.difference(&got_set).collect();
    assert!(
        lost.is_empty(),
        "acknowledged before the save, not restored: {lost:?}"
    );
    assert!(got_set.is_subset(&all), "restored a job never written");
    eprintln!(
        "restored {} jobs: all {} acknowledged before the save, {} of those after",
        got.len(),
        before.len(),
        got_set.difference(&before).count()
    );
    // Two writes in the restored cluster.
    let mut c = ctrl.client(q);
    c.ok(submit(1, "bob", ""));
    c.ok(submit(2, "bob", ""));

    // Defect 5: node 3's pre-restore directory put back.
    ctrl.kill(3);
    std::fs::remove_dir_all(data(3)).unwrap();
    std::fs::rename(old(3), data(3)).unwrap();
    ctrl.start_node(3);
    assert!(
        ctrl.logged(3, "refused a raft message") || ctrl.logged(3, "refused this node's message"),
        "the old node said nothing:\n{}",
        ctrl.log(3)
    );
    ctrl.wait_until("a restored node logs the refusal", STARTUP, || {
        [1u32, 2].iter().any(|&i| {
            let l = ctrl.log(i);
            l.contains("refused a raft message") && l.contains("of another cluster")
        })
    });
    let status = run_cli(&["status", "--masters", &masters], CLI).1;
    assert!(
        status.contains("warning: node 3") && status.contains("not this one"),
        "{status}"
    );
    // Every primary, across restarts of the restored nodes, lists both writes and every
    // job acknowledged before the save; node 3 never leads.
    for round in 0..3 {
        let q = ctrl.expect_primary_among(&[1, 2], STARTUP);
        let got: BTreeSet<u64> = listed_on(&ctrl, q).into_iter().collect();
        assert!(
            got.contains(&1) && got.contains(&2) && before.is_subset(&got),
            "round {round}: primary {q} lost a write"
        );
        let i3 = info(&ctrl.client(3).call(hello()));
        assert_ne!(i3.role, ControllerRole::Primary, "the old node leads");
        assert_ne!(
            i3.cluster_id,
            info(&ctrl.client(q).call(hello())).cluster_id
        );
        ctrl.kill(q);
        ctrl.start_node(q);
    }
}
