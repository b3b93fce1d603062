//! Issue 35's defect 1 as one schedule: "primary cut off, new primary elected and cut off, a
//! follower's disk lost, the old primary's link back" — the order of faults in which a blank
//! node's acknowledgement can count for a deposed primary (C12, fifth round). One function,
//! [`deposed_primary_meets_blank_node`], drives it on a [`NetCluster`]; the real-process test
//! (`tests/composed_faults.rs`) writes through the library at its [`Moment`]s, and the nemesis
//! draws it as the fault kind `deposed-primary` ([`super::fault::Fault::DeposedPrimary`]).
//!
//! The cuts are blackholes (both of a node's links down, packets vanish, no RST): the deposed
//! primary must not learn the newer term while it is away. SIGSTOP cannot stand in for them —
//! resumed, it reads the newer term from its socket buffers.
//!
//! 1. P leads (term T); P is blackholed. It still believes it leads.
//! 2. N is elected among the two others (term T+1) and serves: [`Moment::NewPrimary`] (a write
//!    acknowledged now is acknowledged by {N, F}).
//! 3. N is blackholed.
//! 4. F is killed (`kill -9`), its data directory emptied, and started again with the same
//!    flags: blank (no `--join`, the C12 path), not yet told anything by a leader.
//! 5. P's links come back: [`Moment::OldPrimaryBack`]. A correct cluster lets P commit nothing
//!    with F (F's acknowledgement must not count until it has heard every other voter).
//!
//! N's links stay down: the caller brings them back ([`heal`]).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{harness, Trouble};
use crate::harness::cluster::probe;
use crate::harness::netns::{self, Fault, NetCluster};

/// The three roles of the sequence, by node id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    /// The primary of term T, cut off, then back.
    pub old: u32,
    /// The primary elected while `old` was away, then cut off.
    pub new: u32,
    /// The follower whose disk is lost.
    pub blank: u32,
}

impl std::fmt::Display for Roles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "old primary node {}, new primary node {}, blank node {}",
            self.old, self.new, self.blank
        )
    }
}

/// Where the caller acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// The old primary is cut off and the new one serves (issue 35's W1 is written here).
    NewPrimary(Roles),
    /// The new primary is cut off, the blank node runs and the old primary's links are back
    /// (issue 35's W2 and the stale listing).
    OldPrimaryBack(Roles),
}

/// What the caller does at a [`Moment`]: `Err` stops the sequence (the links it cut stay cut
/// for the caller's heal, as after [`Moment::OldPrimaryBack`]).
pub type AtMoment<'a> = dyn FnMut(Moment, &mut NetCluster) -> Result<(), String> + 'a;

/// What the sequence did, step by step, for the schedule as executed.
#[derive(Debug, Clone)]
pub struct Done {
    pub roles: Roles,
    pub steps: Vec<String>,
}

/// Runs the sequence from a cluster whose primary `old` serves (its first entries committed),
/// each wait bounded by `bound`; `at` is called at each [`Moment`]. On `Err`, the faults
/// applied so far are in force: [`heal_all`] undoes them.
pub fn deposed_primary_meets_blank_node(
    c: &mut NetCluster,
    old: u32,
    bound: Duration,
    at: &mut AtMoment<'_>,
) -> Result<Done, Trouble> {
    let t0 = Instant::now();
    let mut steps = Vec::new();
    let mut step = |s: String| steps.push(format!("{:.2} s {s}", t0.elapsed().as_secs_f64()));
    c.fault(Fault::Blackhole(old), true)
        .map_err(harness("blackhole the old primary"))?;
    step(format!("node {old} (the primary) blackholed"));
    let new = c.wait_primary(Some(old), bound).ok_or_else(|| {
        Trouble::Cluster(format!(
            "no other node served as primary within {} s of the primary's (node {old}) cut",
            bound.as_secs()
        ))
    })?;
    let blank = (1..=c.nodes.len() as u32)
        .find(|&id| id != old && id != new)
        .expect("three nodes");
    let roles = Roles { old, new, blank };
    step(format!("node {new} serves as the new primary"));
    at(Moment::NewPrimary(roles), c).map_err(Trouble::Cluster)?;
    c.fault(Fault::Blackhole(new), true)
        .map_err(harness("blackhole the new primary"))?;
    step(format!("node {new} (the new primary) blackholed"));
    c.kill(blank);
    c.wipe(blank).map_err(harness("wipe"))?;
    c.restart(blank).map_err(harness("restart blank"))?;
    step(format!(
        "node {blank} killed (-9), its data directory emptied, started again blank with the \
         same flags"
    ));
    if !answers(c, blank, bound) {
        return Err(Trouble::Cluster(format!(
            "node {blank}, started blank, did not answer a client within {} s",
            bound.as_secs()
        )));
    }
    c.fault(Fault::Blackhole(old), false)
        .map_err(harness("the old primary's links up"))?;
    step(format!("node {old}'s links up (the old primary is back)"));
    at(Moment::OldPrimaryBack(roles), c).map_err(Trouble::Cluster)?;
    Ok(Done { roles, steps })
}

/// Brings the new primary's links back (the sequence's last cut).
pub fn heal(c: &NetCluster, roles: Roles) -> Result<(), Trouble> {
    c.fault(Fault::Blackhole(roles.new), false)
        .map_err(harness("the new primary's links up"))
}

/// Every link of every node up (after a sequence that stopped early).
pub fn heal_all(c: &NetCluster) -> Result<(), Trouble> {
    for id in 1..=c.nodes.len() as u32 {
        c.fault(Fault::Blackhole(id), false)
            .map_err(harness("links up"))?;
    }
    Ok(())
}

/// Whether node `id` answers `hello` from the client namespace (in any role) within `bound`.
fn answers(c: &NetCluster, id: u32, bound: Duration) -> bool {
    let addr: SocketAddr = c.node(id).client;
    netns::in_ns(&c.client_ns, move || {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if probe(addr, Duration::from_millis(300)).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    })
    .unwrap_or(false)
}
