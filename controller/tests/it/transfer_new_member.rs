//! Issue 36 (C14 with C17): a leader transfer to a member added a moment ago either works or
//! is refused naming why. Rounds on a cluster of five voters: a new blank node is added and
//! leadership is transferred to it at once; every transfer must end with that node the
//! primary, or exit 1 with a reason (a lag, a target not heard). Then the oldest other member
//! is removed, so the cluster stays at five voters. Before: with more than three voters the
//! other standbys refused the named node's campaign while they still heard the old primary
//! (openraft's leader lease), so another node's election timer often won instead ("the
//! primary answered, but no new primary showed within 5 s").
//!
//! `XCE_TRANSFER_ROUNDS` sets the number of rounds (default 6; the report's 10 of 10 ran 10).

use crate::common::*;

#[test]
fn a_transfer_to_a_member_added_a_moment_ago_works_or_says_why() {
    let rounds: usize = std::env::var("XCE_TRANSFER_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let mut ctrl = cluster(3, &[]);
    ctrl.expect_settled(STARTUP);
    let all = |ctrl: &Cluster| ctrl.masters();
    let mut members: Vec<u32> = vec![1, 2, 3];
    let add = |ctrl: &mut Cluster, members: &mut Vec<u32>, k: usize| {
        let id = 4 + k as u32;
        let (c, _, spec) = new_member(id);
        ctrl.start_extra_node(id, &c, &spec, &["--join"]);
        let (code, out, _) = cli(&["member", "add", &spec, "--masters", &all(ctrl)]);
        assert_eq!(code, Some(0), "add {id}: {out}\n{}", ctrl.all_logs());
        members.push(id);
        id
    };
    add(&mut ctrl, &mut members, 0);
    let (mut moved, mut refused) = (0, 0);
    for k in 1..=rounds {
        let id = add(&mut ctrl, &mut members, k);
        let (code, out, took) = cli(&[
            "leader",
            "transfer",
            "--to",
            &id.to_string(),
            "--masters",
            &all(&ctrl),
        ]);
        eprintln!("round {k}: transfer to new node {id}: exit {code:?} in {took:?}: {out}");
        match code {
            Some(0) => {
                assert!(
                    out.contains(&format!("node {id} is the primary now")),
                    "{out}\n{}",
                    ctrl.all_logs()
                );
                moved += 1;
            }
            Some(1) => {
                // Refused: the reason names the lag or the silence.
                assert!(
                    out.contains("not caught up") || out.contains("has not answered"),
                    "{out}\n{}",
                    ctrl.all_logs()
                );
                refused += 1;
            }
            _ => panic!("{out}\n{}", ctrl.all_logs()),
        }
        // Back to five voters: the oldest member that is not the primary goes.
        let p = ctrl.expect_primary_among(&members, STARTUP);
        let old = *members.iter().find(|&&m| m != p).unwrap();
        let (code, out, _) = cli(&[
            "member",
            "remove",
            &old.to_string(),
            "--masters",
            &all(&ctrl),
        ]);
        assert_eq!(code, Some(0), "remove {old}: {out}\n{}", ctrl.all_logs());
        members.retain(|&m| m != old);
        ctrl.forget(old);
    }
    eprintln!("{rounds} rounds: {moved} moved, {refused} refused with a reason");
}
