//! C23: each known defect, with its fix taken out of the model, is found — the checker stops at
//! the first state that breaks the named property (breadth first: the shortest such path) and
//! prints it step by step.

use xce_model::properties::{
    LEADER_COMPLETENESS, LEASE_READS_LINEARIZABLE, NO_ACKED_WRITE_LOST, ONE_LEADER_PER_LEADER_ID,
    STATE_MACHINE_SAFETY,
};
use xce_model::{run, Options, Start, C12, SLOW};

/// Runs the check until `property` breaks; fails if it never does within the bound.
fn finds(what: &str, o: Options, property: &'static str) {
    let out = run::check(o, Some(property));
    let path = out.explain(property).unwrap_or_else(|| {
        panic!(
            "{what}: \"{property}\" holds within the bound ({}): not found",
            out.summary()
        )
    });
    // One print: the tests run in parallel.
    println!("{what}: {}\n\"{property}\" broken:\n{path}", out.summary());
}

/// The defects' bound: a running cluster, one more term, one write, no faults unless the
/// defect needs one.
fn small() -> Options {
    let mut o = Options::fixed();
    o.bounds.max_crashes = 0;
    o.bounds.max_wipes = 0;
    o.bounds.max_dups = 0;
    o.bounds.max_appends = 1;
    o
}

/// Issue 35 defect 1 (`c12_today`): a blank node's ack counts for a deposed leader. n3 is
/// elected with n2's vote, n2 loses its disk, accepts the old leader's appends (it has no vote
/// to compare), and its ack lets n1 serve a lease read without the write n3 acknowledged.
#[test]
fn issue35_defect1_a_blank_nodes_ack_counts_for_a_deposed_leader() {
    let mut o = small();
    o.c12 = C12::Today;
    o.bounds.max_wipes = 1;
    finds("issue 35 defect 1", o, LEASE_READS_LINEARIZABLE);
}

/// The same, as two histories: the deposed leader commits an entry at an index where the new
/// leader committed another (the panic of issue 35's run), or a leader lacks an entry
/// committed after it was elected.
#[test]
fn issue35_defect1_two_histories() {
    let mut o = small();
    o.c12 = C12::Today;
    o.bounds.max_wipes = 1;
    finds("issue 35 defect 1", o.clone(), STATE_MACHINE_SAFETY);
    finds("issue 35 defect 1", o, LEADER_COMPLETENESS);
}

/// Issue 35 defect 2 (`today_campaign_rereads`): an append accepted between the campaign's
/// decision and its election does not call it off; the old leader serves a lease read on that
/// ack while the new leader acknowledges a write.
#[test]
fn issue35_defect2_an_append_after_the_decision_does_not_call_the_campaign_off() {
    let mut o = small();
    o.today_campaign_rereads = true;
    finds("issue 35 defect 2", o, LEASE_READS_LINEARIZABLE);
}

/// Issue 35 defect 4 (`today_own_window`): the leader's read window is its own (slow: three
/// ticks) while a follower refuses other candidates for one tick only.
#[test]
fn issue35_defect4_the_leaders_window_against_a_shorter_refusal() {
    let mut o = small();
    o.today_own_window = true;
    o.timings[0] = SLOW;
    finds("issue 35 defect 4", o, LEASE_READS_LINEARIZABLE);
}

/// Issue 25 defect 1 (`today_resume_old_term`, openraft change 3 out): a leader killed with
/// its own flush behind restarts leading in its old leader id, and its next entry takes an
/// index a follower (or an append in flight) holds under the same log id.
#[test]
fn issue25_defect1_a_restarted_leader_resumes_its_old_leader_id() {
    let mut o = small();
    o.today_resume_old_term = true;
    o.bounds.max_crashes = 1;
    finds("issue 25 defect 1", o, ONE_LEADER_PER_LEADER_ID);
}

/// Issue 25 defect 2 (`c12_issue25`): a blank node counts as caught up once its log ends in an
/// entry it wrote itself as leader — its own old entry replicated back to it — votes again,
/// and a leader is elected without a write the node had acknowledged before its disk loss.
#[test]
fn issue25_defect2_an_old_entry_of_its_own_is_not_caught_up() {
    let mut o = small();
    o.start = Start::Behind;
    o.c12 = C12::Issue25;
    o.bounds.max_term = 3;
    o.bounds.max_wipes = 1;
    o.bounds.partial_appends = true;
    finds("issue 25 defect 2", o, NO_ACKED_WRITE_LOST);
}
