//! What the model checks: which rule set (the fixed rules, or one known defect with its fix
//! taken out), the timings of each node, and the bounds that keep the state space finite.

/// C12: how a node that started blank (the `catching-up` marker) is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum C12 {
    /// Issue 25 defect 2 (an old rule): caught up once the last entry it holds was written by
    /// itself as leader; until then it refuses votes for a log beyond the bootstrap entry and
    /// accepts (and counts) every append.
    Issue25,
    /// Today's main (issue 35 defect 1): refuses votes for a log beyond the bootstrap entry,
    /// accepts and counts every append, caught up by `raft/amnesia.rs::caught_up_by`.
    Today,
    /// The fix (C12 fifth round, `raft/amnesia.rs` + `raft/standing.rs`): the floor of the
    /// other voters' standing, appends below it refused, no vote until caught up except a
    /// brand-new cluster's first election.
    Fifth,
}

/// A node's configured timing, in ticks of the model's clock: `refusal` is how long it refuses
/// other candidates after accepting an append of a committed vote (openraft's leader lease,
/// `--election-max-ms`; also C11's guard after a boot, `raft/lease.rs::VoteGuard`); `window`
/// is the lease-read window it derives from it (`raft/elect.rs::lease_read_window`).
///
/// Discrete time: a follower refuses while `age <= refusal`, a leader counts an ack while
/// `age < window`, so `window <= refusal + 1` is exactly what safety needs without clock
/// drift (the real rule, `window = refusal / 3`, leaves room for drift).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub refusal: u8,
    pub window: u8,
}

/// `--election-max-ms` small: refuses for one tick, reads within one tick of the send.
pub const FAST: Timing = Timing {
    refusal: 1,
    window: 1,
};
/// `--election-max-ms` large: refuses for three ticks, reads within three.
pub const SLOW: Timing = Timing {
    refusal: 3,
    window: 3,
};

/// Bounds on everything that would otherwise grow without end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Highest term an election may start.
    pub max_term: u8,
    /// Longest log (the bootstrap entry included).
    pub max_log: u8,
    /// Client writes submitted, in all.
    pub max_writes: u8,
    /// Crashes (`kill -9` and restart, volatile state lost), in all.
    pub max_crashes: u8,
    /// Disk losses (log, vote and everything wiped; restart blank), in all.
    pub max_wipes: u8,
    /// Messages delivered and kept for another delivery (duplication), in all.
    pub max_dups: u8,
    /// Leader transfers (C14), in all.
    pub max_handovers: u8,
    /// Membership changes begun (C17: a learner added, a voter added or removed), in all.
    pub max_changes: u8,
    /// Appends in flight at once, in all (a leader sends no more until one is delivered or
    /// lost): the network's bound. Every order of delivery among them is explored.
    pub max_appends: u8,
    /// A leader may send a follower only the first of the entries it would send (a batch
    /// limit), so a follower's log can stop short of the leader's.
    pub partial_appends: bool,
}

/// Where the check starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// A brand-new cluster: every node blank with the marker; `initialize` is a step (the
    /// first election is checked too).
    BrandNew,
    /// A running cluster: node 1 leads in term 1, every node holds the bootstrap entry and the
    /// leader's blank entry, committed and applied, no marker (a state `BrandNew` reaches).
    Running,
    /// Later in that run: node 2 leads in term 2 (node 3's vote), its write W0 acknowledged by
    /// {2, 1}; node 3 holds only the bootstrap and term-1 entries (a state `Running` reaches in
    /// eleven steps). Where issue 25's defect 2 starts.
    Behind,
}

/// The model's configuration: the rule set and the bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Voters at start (node ids 1..=3).
    pub nodes: u8,
    /// Node 4 exists: blank (with the marker), a member of nothing at start; a leader may add
    /// it (C17).
    pub spare: bool,
    pub timings: [Timing; 4],
    pub start: Start,
    pub c12: C12,
    /// Issue 35 defect 2: the election re-reads the Raft state after the pre-vote instead of
    /// checking the decision's (vote, utime), and the candidate counts its own pre-vote
    /// without its own "hearing a leader" check.
    pub today_campaign_rereads: bool,
    /// Issue 25 defect 1: openraft change 3 taken out — a restarted node whose stored vote is
    /// a committed vote for itself resumes leading in that leader id.
    pub today_resume_old_term: bool,
    /// Issue 35 defect 4: the leader counts every ack for lease reads within its own window,
    /// whatever the follower's refusal.
    pub today_own_window: bool,
    pub bounds: Bounds,
}

impl Options {
    /// The fixed rules, all nodes fast, a running cluster, one more term, a log of four, one
    /// write, one append in flight, no fault: each configuration of the tests adds its own.
    pub fn fixed() -> Options {
        Options {
            nodes: 3,
            spare: false,
            timings: [FAST; 4],
            start: Start::Running,
            c12: C12::Fifth,
            today_campaign_rereads: false,
            today_resume_old_term: false,
            today_own_window: false,
            bounds: Bounds {
                max_term: 2,
                max_log: 4,
                max_writes: 1,
                max_crashes: 0,
                max_wipes: 0,
                max_dups: 0,
                max_handovers: 0,
                max_changes: 0,
                max_appends: 1,
                partial_appends: false,
            },
        }
    }

    pub fn timing(&self, id: u8) -> Timing {
        self.timings[usize::from(id - 1)]
    }

    /// The largest age of a vote's modification that still means anything (a follower
    /// refuses while `age <= refusal`): older is "long ago".
    pub fn utime_cap(&self) -> u8 {
        self.timings
            .iter()
            .map(|t| t.refusal + 1)
            .max()
            .unwrap_or(1)
    }

    /// The same for a boot (C11's guard refuses while `age < refusal`).
    pub fn boot_cap(&self) -> u8 {
        self.timings.iter().map(|t| t.refusal).max().unwrap_or(1)
    }

    /// The same for an append's send (an ack counts for a read while `age < window`).
    pub fn send_cap(&self) -> u8 {
        self.timings.iter().map(|t| t.window).max().unwrap_or(1)
    }

    /// The node ids that exist in this configuration.
    pub fn ids(&self) -> impl Iterator<Item = u8> {
        1..=self.nodes + u8::from(self.spare)
    }

    /// The initial voters: 1..=nodes, as a bit set (bit `id`).
    pub fn initial_voters(&self) -> u8 {
        (1..=self.nodes).fold(0, |s, id| s | 1 << id)
    }
}
