//! The fault kinds of S18, one variant each of [`Fault`], with `apply` and `heal` on a
//! [`Stage`] (the cluster in its namespaces). A fault names its nodes by role ([`Target`]),
//! resolved when it is applied; what it resolved to is in the [`Applied`] its heal takes.
//!
//! The faults inside a node (a stalled or full disk, a clock step) are the controller's
//! failpoints (its cargo feature `failpoints`, docs/controller.md "Failpoints"), set and
//! cleared through each node's metrics endpoint, bound to the loopback of the node's own
//! namespace ([`METRICS_PORT`]): reachable whatever is done to its links.
//!
//! A kind whose mechanism is not on main yet exists here so that the schedule's shape is
//! settled, but cannot be selected: [`Kind::pending`] says why, the command refuses it at
//! start, [`Kind::selectable`] leaves it out, and its `apply` fails loudly rather than
//! pretend it ran. Enabling one is: write its `apply`/`heal` and drop its `pending` line.

use std::time::{Duration, Instant};

use super::{harness, Trouble};
use crate::harness::netns::{self, NetCluster};

/// How long a role is looked for before a fallback node stands in (no primary answers: an
/// election in progress, the whole cluster down).
const RESOLVE_WAIT: Duration = Duration::from_secs(2);
/// Bound on one `xce-controller member …` command (its own deadline is 90 s).
const MEMBER_CMD_BOUND: Duration = Duration::from_secs(100);
/// How long a SIGTERMed primary gets to hand over and exit before `kill -9`.
const TERM_GRACE: Duration = Duration::from_secs(10);
/// The queue of a shaped link (`tc tbf latency`).
const SHAPED_QUEUE: &str = "50ms";
/// Every node's `--metrics` port, on 127.0.0.1 inside its own namespace (failpoints, metrics).
pub const METRICS_PORT: u16 = 9100;
/// Bound on one request to a node's metrics endpoint.
const HTTP_BOUND: Duration = Duration::from_secs(2);
/// How long a node's metrics endpoint is tried (a node just started may not listen yet).
const HTTP_RETRY: Duration = Duration::from_secs(10);
/// C21: a node whose disk fails exits with this status ("within seconds").
pub const STORAGE_FAULT_EXIT: i32 = 74;
/// How long a node whose disk is full has to exit [`STORAGE_FAULT_EXIT`].
pub const DISK_FULL_EXIT_BOUND: Duration = Duration::from_secs(10);
/// The failpoints a full disk fails: a follower's append, the leader's own flush, the vote.
const DISK_FULL_POINTS: [&str; 3] = ["log-append", "log-flush", "vote-save"];
/// The failpoint that stalls a leader's own log flushes.
const DISK_STALL_POINT: &str = "log-flush";
/// The failpoint that moves a node's wall clock (milliseconds).
const CLOCK_POINT: &str = "clock-offset-ms";
/// How long a disk loss waits for the nodes still catching up (C12) to catch up.
const CATCH_UP_WAIT: Duration = Duration::from_secs(20);
/// A node's log line when it starts without data, and when it has caught up (C12).
const STARTED_BLANK: &str = "started without data";
const CAUGHT_UP: &str = "votes and campaigns again (C12)";

/// The kinds of fault, as `--faults` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Kill,
    Pause,
    KillAll,
    Partition,
    Blackhole,
    SlowLinks,
    MemberReplace,
    DiskStall,
    Terminate,
    DiskFull,
    ClockStep,
    LeaderTransfer,
    DiskLoss,
    DeposedPrimary,
}

impl Kind {
    pub const ALL: [Kind; 14] = [
        Kind::Kill,
        Kind::Pause,
        Kind::KillAll,
        Kind::Partition,
        Kind::Blackhole,
        Kind::SlowLinks,
        Kind::MemberReplace,
        Kind::DiskStall,
        Kind::Terminate,
        Kind::DiskFull,
        Kind::ClockStep,
        Kind::LeaderTransfer,
        Kind::DiskLoss,
        Kind::DeposedPrimary,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Kill => "kill",
            Kind::Pause => "pause",
            Kind::KillAll => "kill-all",
            Kind::Partition => "partition",
            Kind::Blackhole => "blackhole",
            Kind::SlowLinks => "slow-links",
            Kind::MemberReplace => "member-replace",
            Kind::DiskStall => "disk-stall",
            Kind::Terminate => "sigterm",
            Kind::DiskFull => "disk-full",
            Kind::ClockStep => "clock-step",
            Kind::LeaderTransfer => "leader-transfer",
            Kind::DiskLoss => "disk-loss",
            Kind::DeposedPrimary => "deposed-primary",
        }
    }

    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// What the kind does, for `--help` and the summary.
    pub fn what(self) -> &'static str {
        match self {
            Kind::Kill => "kill -9 of one node (the primary more often), started again at the heal",
            Kind::Pause => "SIGSTOP of one node, SIGCONT at the heal",
            Kind::KillAll => {
                "kill -9 of every node, restarted old primary first, all at once, or one by one \
                 with gaps"
            }
            Kind::Partition => "one node cut off from its peers (clients still reach it)",
            Kind::Blackhole => "one node's links down both ways (no RST)",
            Kind::SlowLinks => "every link, or one node's, limited by tc tbf (1–16 Mbit/s)",
            Kind::MemberReplace => {
                "a standby removed (member remove), its data wiped, started with --join and \
                 added again (member add): the replacement procedure of docs/operations.md"
            }
            Kind::DiskStall => {
                "one node's own log flushes held while it leads (failpoint log-flush=pause), \
                 sometimes with every node killed on top"
            }
            Kind::Terminate => {
                "SIGTERM of the primary (it hands over, C14), started again at the heal"
            }
            Kind::DiskFull => {
                "one node's disk full (failpoints log-append, log-flush, vote-save = \
                 return(ENOSPC)): it must exit 74 within 10 s (C21); started again from its data"
            }
            Kind::ClockStep => {
                "one node's wall clock stepped by an hour, forward or back (failpoint \
                 clock-offset-ms), cleared at the heal (C22)"
            }
            Kind::LeaderTransfer => {
                "leadership moved to a named standby (`xce-controller leader transfer --to N`, \
                 C14 on demand); a refusal with its reason is an answer, a hang is a finding"
            }
            Kind::DiskLoss => {
                "kill -9 of one node, its data directory emptied, started again at once with \
                 the same flags: blank, no `--join` (C12's path; S20)"
            }
            Kind::DeposedPrimary => {
                "issue 35's defect 1 as one schedule: the primary blackholed, the new primary \
                 elected and blackholed, a follower's disk lost (kill -9, wiped, started blank), \
                 the old primary's links back; the new primary's back at the heal (S20)"
            }
        }
    }

    /// Why the kind cannot be selected yet: its mechanism is not on main. `None`: it can.
    pub fn pending(self) -> Option<&'static str> {
        None
    }

    /// Every kind that can be selected today.
    pub fn selectable() -> Vec<Kind> {
        Kind::ALL
            .into_iter()
            .filter(|k| k.pending().is_none())
            .collect()
    }

    /// Whether the kind works through the controller's failpoints.
    pub fn uses_failpoints(self) -> bool {
        matches!(self, Kind::DiskStall | Kind::DiskFull | Kind::ClockStep)
    }

    /// How often the schedule draws it, relative to the others: node cuts and lost disks
    /// more than before S20, as most composed episodes begin with one.
    pub fn weight(self) -> u64 {
        match self {
            Kind::Kill => 4,
            Kind::Partition => 3,
            Kind::Pause | Kind::KillAll | Kind::Blackhole | Kind::DiskLoss => 2,
            _ => 1,
        }
    }

    /// What the kind does to the nodes it names, one entry per node it breaks (the overlaps'
    /// table, S20): a fault of several nodes (`deposed-primary`) overlaps with itself.
    pub fn effects(self) -> &'static [&'static [Effect]] {
        use Effect::*;
        match self {
            Kind::Kill | Kind::KillAll | Kind::Terminate => &[&[Down]],
            Kind::Pause => &[&[Paused]],
            Kind::Partition | Kind::Blackhole => &[&[Cut]],
            Kind::SlowLinks => &[&[Slow]],
            Kind::MemberReplace | Kind::DiskLoss => &[&[Down, DiskLost]],
            Kind::DiskStall => &[&[DiskStalled]],
            Kind::DiskFull => &[&[DiskFull]],
            Kind::ClockStep => &[&[ClockStepped]],
            Kind::LeaderTransfer => &[&[LeaderMoved]],
            Kind::DeposedPrimary => &[&[Cut], &[Cut], &[Down, DiskLost]],
        }
    }
}

/// What a fault does to a node, as the table of overlaps counts it (S20).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effect {
    /// Cut off: a partition from its peers, a blackhole.
    Cut,
    /// Down: kill -9 (one, all), SIGTERM, a replacement or a lost disk's kill.
    Down,
    /// Its data directory emptied, started blank.
    DiskLost,
    DiskStalled,
    DiskFull,
    ClockStepped,
    LeaderMoved,
    Paused,
    Slow,
}

impl Effect {
    pub fn label(self) -> &'static str {
        match self {
            Effect::Cut => "a node cut off",
            Effect::Down => "a node killed",
            Effect::DiskLost => "a disk lost",
            Effect::DiskStalled => "a disk stalled",
            Effect::DiskFull => "a disk full",
            Effect::ClockStepped => "a clock stepped",
            Effect::LeaderMoved => "leadership moved",
            Effect::Paused => "a node paused",
            Effect::Slow => "slow links",
        }
    }
}

/// The `xce-controller run` flags every node of a run gets: its metrics endpoint on the
/// loopback of its own namespace (failpoints and the end's metrics go through it).
pub fn controller_args() -> Vec<String> {
    vec!["--metrics".into(), format!("127.0.0.1:{METRICS_PORT}")]
}

/// A node named by its role when the fault is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The node answering as primary (a fallback node when none answers).
    Primary,
    /// The `k`-th of the other nodes (by id, modulo their number).
    Standby(u8),
}

/// The order in which a cluster killed whole comes back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartOrder {
    /// The old primary first, the others `gap` later (issue 25's defect 1).
    OldPrimaryFirst {
        gap: Duration,
    },
    AllAtOnce,
    /// One at a time: `ranks` (0 the old primary, 1.. the others by id), `gaps` between.
    OneByOne {
        ranks: Vec<u8>,
        gaps: Vec<Duration>,
    },
}

impl std::fmt::Display for RestartOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: &Duration| d.as_millis();
        match self {
            RestartOrder::OldPrimaryFirst { gap } => {
                write!(f, "the old primary first, the others {} ms later", ms(gap))
            }
            RestartOrder::AllAtOnce => f.write_str("all at once"),
            RestartOrder::OneByOne { ranks, gaps } => {
                let ranks: Vec<String> = ranks
                    .iter()
                    .map(|&r| {
                        if r == 0 {
                            "old primary".into()
                        } else {
                            format!("#{r}")
                        }
                    })
                    .collect();
                let gaps: Vec<String> = gaps.iter().map(|g| ms(g).to_string()).collect();
                write!(
                    f,
                    "one by one ({}), {} ms apart",
                    ranks.join(", "),
                    gaps.join(", ")
                )
            }
        }
    }
}

/// Which links a slow-link fault shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    All,
    Of(Target),
}

/// One fault, planned: what, on which role, with which parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Kill(Target),
    Pause(Target),
    KillAll(RestartOrder),
    Partition(Target),
    Blackhole(Target),
    SlowLinks {
        links: Links,
        rate: &'static str,
    },
    MemberReplace(Target),
    DiskStall(Target),
    /// SIGTERM of the primary.
    Terminate,
    DiskFull(Target),
    ClockStep {
        target: Target,
        secs: i64,
    },
    LeaderTransfer {
        to: Target,
    },
    /// kill -9, data directory emptied, started again with the same flags (blank).
    DiskLoss(Target),
    /// Issue 35's defect 1 ([`super::sequence`]), from the primary of the moment.
    DeposedPrimary,
}

/// What applying a fault did: the nodes it resolved to (in the fault's own order) and a line
/// for the executed schedule. (A fault that could not be applied has no heal: a `member
/// remove` the cluster refused leaves the node as it was.)
#[derive(Debug, Clone, Default)]
pub struct Applied {
    pub nodes: Vec<u32>,
    pub note: String,
    /// What the cluster did that it must not, while the fault was applied (a node with a
    /// full disk that did not exit 74): a finding; the fault is still healed.
    pub finding: Option<String>,
    /// A node that exited [`STORAGE_FAULT_EXIT`] as it must (disk full), and how long after
    /// the fault.
    pub expected_exit: Option<(u32, Duration)>,
    /// The fault could not begin (`deposed-primary` with no primary answering): noted, not
    /// counted as applied, nothing to heal.
    pub skipped: bool,
}

/// The cluster a schedule runs against, and how roles are resolved on it.
pub struct Stage<'c> {
    pub cluster: &'c mut NetCluster,
    /// The nodes the episode's faults so far hold (S20): a later fault of the episode names
    /// another node, so that the faults overlap on different nodes.
    pub busy: Vec<u32>,
}

impl Stage<'_> {
    /// The node answering as primary now, not a busy one (looked for up to [`RESOLVE_WAIT`]:
    /// a busy primary, cut off, is soon replaced).
    fn primary(&self) -> Option<u32> {
        match self.busy.len() {
            0 => self.cluster.wait_primary(None, RESOLVE_WAIT),
            _ => {
                let deadline = Instant::now() + RESOLVE_WAIT;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match self.cluster.wait_primary(None, left) {
                        Some(p) if !self.busy.contains(&p) => return Some(p),
                        _ if left.is_zero() => return None,
                        _ => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
            }
        }
    }

    /// The node `t` names now, and how it was found (never a busy node while another exists).
    pub fn resolve(&self, t: Target) -> (u32, String) {
        let primary = self.primary();
        let n = self.cluster.nodes.len() as u32;
        // Free: not held by this episode, and running if any such runs (a node that stopped
        // on its own and will not start again — a finding already — is no target).
        let free: Vec<u32> = (1..=n).filter(|i| !self.busy.contains(i)).collect();
        let free = if free.is_empty() {
            (1..=n).collect()
        } else {
            free
        };
        let running: Vec<u32> = free
            .iter()
            .copied()
            .filter(|&i| self.cluster.node(i).is_running())
            .collect();
        let free = if running.is_empty() { free } else { running };
        match (t, primary) {
            (Target::Primary, Some(p)) => (p, format!("node {p} (primary)")),
            (Target::Primary, None) => {
                // No primary: the lowest free node that runs stands in (or the lowest free).
                let id = free
                    .iter()
                    .copied()
                    .find(|&i| self.cluster.node(i).is_running())
                    .unwrap_or(free[0]);
                (id, format!("node {id} (no primary answered: fallback)"))
            }
            (Target::Standby(k), p) => {
                let others: Vec<u32> = free.iter().copied().filter(|&i| Some(i) != p).collect();
                let others = if others.is_empty() { free } else { others };
                let id = others[k as usize % others.len()];
                let how = if p.is_some() {
                    "standby"
                } else {
                    "no primary answered"
                };
                (id, format!("node {id} ({how})"))
            }
        }
    }

    /// The nodes that started without data and have not caught up since (C12), from their
    /// own log lines (the last of [`STARTED_BLANK`] and [`CAUGHT_UP`] of each node).
    fn catching_up(&self) -> Vec<u32> {
        catching_up_in(&self.cluster.log_lines(&[STARTED_BLANK, CAUGHT_UP]))
    }

    /// Waits up to [`CATCH_UP_WAIT`] until no node but `except` is catching up (C12); the
    /// ones still catching up then. A disk lost while another node is still catching up
    /// would leave a majority without data: a 3-node cluster then cannot elect anyone until
    /// an operator repairs it (the price C12 asks, by design), which ends what a run can show.
    fn wait_caught_up(&self, except: u32) -> Vec<u32> {
        let deadline = Instant::now() + CATCH_UP_WAIT;
        loop {
            let behind: Vec<u32> = self
                .catching_up()
                .into_iter()
                .filter(|&id| id != except)
                .collect();
            if behind.is_empty() || Instant::now() >= deadline {
                return behind;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The old primary and the other nodes by id: ranks 0, 1, … of a [`RestartOrder`]. The
    /// primary busy or not: every node is killed, the one that led first (issue 25's defect 1
    /// is the primary whose disk the episode stalled).
    fn ranked(&self) -> (Vec<u32>, String) {
        let (p, how) = match self.cluster.wait_primary(None, RESOLVE_WAIT) {
            Some(p) => (p, format!("node {p} (primary)")),
            None => self.resolve(Target::Primary),
        };
        let n = self.cluster.nodes.len() as u32;
        let ranks = std::iter::once(p)
            .chain((1..=n).filter(|&i| i != p))
            .collect();
        (ranks, how)
    }

    /// `METHOD /fail/NAME` on node `id`'s metrics endpoint (retried while it does not
    /// answer, up to [`HTTP_RETRY`]). A node without failpoints (a build without the feature)
    /// answers other than 200: the harness's fault, the run proves nothing. A running node
    /// whose endpoint never answers: the cluster's.
    fn failpoint(&self, id: u32, method: &str, name: &str, actions: &str) -> Result<(), Trouble> {
        let what = format!("{method} /fail/{name} {actions} on node {id}");
        if method == "PUT" && !self.cluster.node(id).is_running() {
            // Only a node that stopped on its own and did not start again (a finding
            // already, see the executor) is down when a fault begins.
            return Err(Trouble::Cluster(format!(
                "{what}: the node is down (it stopped on its own and did not start again)"
            )));
        }
        let deadline = Instant::now() + HTTP_RETRY;
        loop {
            let path = format!("/fail/{name}");
            match self
                .cluster
                .node_http(id, METRICS_PORT, method, &path, actions, HTTP_BOUND)
            {
                Ok((status, _)) if status.contains(" 200 ") => return Ok(()),
                Ok((status, body)) => {
                    return Err(Trouble::Harness(format!(
                        "{what}: {status} {} (is the controller built with the `failpoints` \
                         feature?)",
                        body.trim()
                    )))
                }
                Err(e) if !self.cluster.node(id).is_running() => {
                    return Err(Trouble::Harness(format!("{what}: the node is down: {e}")))
                }
                Err(e) if exited(self.cluster, id) => {
                    return Err(Trouble::Cluster(format!(
                        "{what}: the node exited on its own: {e}"
                    )))
                }
                Err(e) if Instant::now() >= deadline => {
                    return Err(Trouble::Cluster(format!(
                        "{what}: its metrics endpoint did not answer in {} s: {e}",
                        HTTP_RETRY.as_secs()
                    )))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn member_cmd(&self, args: &[&str]) -> Result<(), Trouble> {
        let masters = self.cluster.masters();
        let mut all = vec!["member"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--masters", &masters]);
        let out = self
            .cluster
            .controller_cmd(&all, MEMBER_CMD_BOUND)
            .map_err(harness("xce-controller member"))?;
        match out.code {
            Some(0) => Ok(()),
            code => Err(Trouble::Cluster(format!(
                "`xce-controller {}`: {} — {}",
                all.join(" "),
                code.map_or("killed at its deadline".to_string(), |c| format!(
                    "exit {c}"
                )),
                out.stderr.trim()
            ))),
        }
    }
}

impl Fault {
    pub fn kind(&self) -> Kind {
        match self {
            Fault::Kill(_) => Kind::Kill,
            Fault::Pause(_) => Kind::Pause,
            Fault::KillAll(_) => Kind::KillAll,
            Fault::Partition(_) => Kind::Partition,
            Fault::Blackhole(_) => Kind::Blackhole,
            Fault::SlowLinks { .. } => Kind::SlowLinks,
            Fault::MemberReplace(_) => Kind::MemberReplace,
            Fault::DiskStall(_) => Kind::DiskStall,
            Fault::Terminate => Kind::Terminate,
            Fault::DiskFull(_) => Kind::DiskFull,
            Fault::ClockStep { .. } => Kind::ClockStep,
            Fault::LeaderTransfer { .. } => Kind::LeaderTransfer,
            Fault::DiskLoss(_) => Kind::DiskLoss,
            Fault::DeposedPrimary => Kind::DeposedPrimary,
        }
    }

    /// Breaks the cluster as planned.
    pub fn apply(&self, st: &mut Stage<'_>) -> Result<Applied, Trouble> {
        let one = |nodes: Vec<u32>, note: String| {
            Ok(Applied {
                nodes,
                note,
                ..Applied::default()
            })
        };
        match self {
            Fault::Kill(t) => {
                let (n, how) = st.resolve(*t);
                st.cluster.kill(n);
                one(vec![n], format!("kill -9 {how}"))
            }
            Fault::Pause(t) => {
                let (n, how) = st.resolve(*t);
                st.cluster.pause(n);
                one(vec![n], format!("SIGSTOP {how}"))
            }
            Fault::KillAll(order) => {
                let (ranks, how) = st.ranked();
                // The primary first: the others cannot elect one in between.
                st.cluster.kill(ranks[0]);
                st.cluster.kill_all();
                one(
                    ranks,
                    format!("kill -9 of all, old primary {how}; restart: {order}"),
                )
            }
            Fault::Partition(t) => {
                let (n, how) = st.resolve(*t);
                let f = netns::Fault::CutFromPeers(n);
                st.cluster.fault(f, true).map_err(harness("partition"))?;
                one(vec![n], format!("{how} cut off from its peers"))
            }
            Fault::Blackhole(t) => {
                let (n, how) = st.resolve(*t);
                let f = netns::Fault::Blackhole(n);
                st.cluster.fault(f, true).map_err(harness("blackhole"))?;
                one(vec![n], format!("{how} blackholed"))
            }
            Fault::SlowLinks { links, rate } => slow_links(st, *links, rate),
            Fault::MemberReplace(t) => remove_member(st, *t),
            Fault::DiskStall(t) => {
                let (n, how) = st.resolve(*t);
                st.failpoint(n, "PUT", DISK_STALL_POINT, "pause")?;
                one(
                    vec![n],
                    format!("disk stall on {how} ({DISK_STALL_POINT}=pause)"),
                )
            }
            Fault::Terminate => {
                let (p, how) = st.resolve(Target::Primary);
                let clean = st.cluster.terminate(p, TERM_GRACE);
                let end = if clean {
                    "it exited by itself"
                } else {
                    "no exit within 10 s: kill -9"
                };
                one(vec![p], format!("SIGTERM {how}: {end}"))
            }
            Fault::DiskFull(t) => disk_full(st, *t),
            Fault::ClockStep { target, secs } => {
                let (n, how) = st.resolve(*target);
                let ms = secs * 1000;
                st.failpoint(n, "PUT", CLOCK_POINT, &format!("return({ms})"))?;
                one(
                    vec![n],
                    format!("wall clock of {how} stepped by {secs} s ({CLOCK_POINT}={ms})"),
                )
            }
            Fault::LeaderTransfer { to } => leader_transfer(st, *to),
            Fault::DiskLoss(t) => disk_loss(st, *t),
            Fault::DeposedPrimary => deposed_primary(st),
        }
    }

    /// Undoes what [`Fault::apply`] did (`a`: what it resolved to); a line for the schedule.
    pub fn heal(&self, a: &Applied, st: &mut Stage<'_>) -> Result<String, Trouble> {
        let node = a.nodes.first().copied().unwrap_or(0);
        match self {
            Fault::Kill(_) | Fault::Terminate => {
                st.cluster.restart(node).map_err(harness("restart"))?;
                Ok(format!("node {node} started again"))
            }
            Fault::Pause(_) => {
                st.cluster.resume(node);
                Ok(format!("SIGCONT node {node}"))
            }
            Fault::KillAll(order) => restart_in_order(st, &a.nodes, order),
            Fault::Partition(_) => {
                let f = netns::Fault::CutFromPeers(node);
                st.cluster
                    .fault(f, false)
                    .map_err(harness("partition heal"))?;
                Ok(format!("node {node} reconnected to its peers"))
            }
            Fault::Blackhole(_) => {
                let f = netns::Fault::Blackhole(node);
                st.cluster
                    .fault(f, false)
                    .map_err(harness("blackhole heal"))?;
                Ok(format!("node {node}'s links up"))
            }
            Fault::SlowLinks { .. } => {
                st.cluster.unshape().map_err(harness("unshape"))?;
                Ok("links unshaped".into())
            }
            Fault::MemberReplace(_) => add_member(st, a),
            Fault::DiskStall(_) => {
                // A node killed and started again meanwhile (kill of all on top) has no
                // failpoint set: clearing it is harmless.
                st.failpoint(node, "DELETE", DISK_STALL_POINT, "")?;
                Ok(format!(
                    "node {node}'s disk flushes again (DELETE {DISK_STALL_POINT})"
                ))
            }
            Fault::DiskFull(_) => {
                // The node exited 74 (or, a finding already recorded, still runs: killed).
                st.cluster.restart(node).map_err(harness("restart"))?;
                Ok(format!("node {node} started again from its data directory"))
            }
            Fault::ClockStep { .. } => {
                st.failpoint(node, "DELETE", CLOCK_POINT, "")?;
                Ok(format!(
                    "node {node}'s wall clock back (DELETE {CLOCK_POINT})"
                ))
            }
            // Nothing to undo: the cluster has a primary either way.
            Fault::LeaderTransfer { .. } => Ok("nothing to undo".into()),
            // The node runs, blank: catching up is the cluster's part.
            Fault::DiskLoss(_) => Ok(format!("node {node} runs blank: nothing to undo")),
            Fault::DeposedPrimary => {
                let [old, new, blank] = a.nodes[..] else {
                    return Err(Trouble::Harness(format!(
                        "deposed-primary: nodes {:?}",
                        a.nodes
                    )));
                };
                super::sequence::heal(st.cluster, super::sequence::Roles { old, new, blank })?;
                Ok(format!("node {new}'s links up (the new primary is back)"))
            }
        }
    }
}

/// How long, at the new primary's moment of [`Fault::DeposedPrimary`], its commit index is
/// waited for to pass where it was when it began to serve: the clients' writes acknowledged by
/// the new primary and the follower whose disk is then lost (issue 35's W1).
const NEW_PRIMARY_COMMITS: Duration = Duration::from_secs(5);

/// Issue 35's defect 1 ([`super::sequence`]) from the primary of the moment; the clients'
/// writes stand in for J0, W1 and W2. No primary answering: nothing is done (noted). A wait the
/// cluster did not meet is a finding, and what the sequence had cut is healed then.
fn deposed_primary(st: &mut Stage<'_>) -> Result<Applied, Trouble> {
    let Some(old) = st.primary() else {
        return Ok(Applied {
            note: "no primary answered: the sequence not begun".into(),
            skipped: true,
            ..Applied::default()
        });
    };
    // Its blank node is one of the other two: none may be catching up still.
    if let Some(skip) = still_catching_up(st, 0) {
        return Ok(skip);
    }
    let mut at = |m: super::sequence::Moment, c: &mut NetCluster| -> Result<(), String> {
        if let super::sequence::Moment::NewPrimary(r) = m {
            let addr = c.node(r.new).client;
            let commit = || {
                netns::in_ns(&c.client_ns, move || {
                    crate::harness::cluster::immediate_wait_primary(addr, HTTP_BOUND)
                        .map(|i| i.committed_index)
                        .ok()
                })
                .ok()
                .flatten()
            };
            let from = commit();
            let deadline = Instant::now() + NEW_PRIMARY_COMMITS;
            while Instant::now() < deadline && commit() <= from {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    };
    let bound = Duration::from_secs(20);
    match super::sequence::deposed_primary_meets_blank_node(st.cluster, old, bound, &mut at) {
        Ok(done) => {
            let r = done.roles;
            Ok(Applied {
                nodes: vec![r.old, r.new, r.blank],
                note: format!("{r}: {}", done.steps.join(", ")),
                ..Applied::default()
            })
        }
        Err(e) => {
            super::sequence::heal_all(st.cluster)?;
            Err(e)
        }
    }
}

/// S20: node `t` killed, its data directory emptied, started again blank with the same flags
/// (C12's path) — once no other node is still catching up.
fn disk_loss(st: &mut Stage<'_>, t: Target) -> Result<Applied, Trouble> {
    let (n, how) = st.resolve(t);
    if let Some(skip) = still_catching_up(st, n) {
        return Ok(skip);
    }
    st.cluster.kill(n);
    st.cluster.wipe(n).map_err(harness("wipe"))?;
    st.cluster.restart(n).map_err(harness("restart blank"))?;
    Ok(Applied {
        nodes: vec![n],
        note: format!("{how} killed (-9), data directory emptied, started again blank"),
        ..Applied::default()
    })
}

/// A disk loss of node `n` skipped because another node is still catching up (C12) after
/// [`Stage::wait_caught_up`]; `None`: it may go ahead.
fn still_catching_up(st: &Stage<'_>, n: u32) -> Option<Applied> {
    let behind = st.wait_caught_up(n);
    (!behind.is_empty()).then(|| Applied {
        note: format!(
            "nodes {behind:?} still catching up (C12) after {} s: a disk lost now would leave a \
             majority without data",
            CATCH_UP_WAIT.as_secs()
        ),
        skipped: true,
        ..Applied::default()
    })
}

/// The nodes whose last line of `log` (node log lines, `… node N: …`) is [`STARTED_BLANK`]
/// rather than [`CAUGHT_UP`].
fn catching_up_in(log: &str) -> Vec<u32> {
    let mut last: std::collections::BTreeMap<u32, bool> = Default::default();
    for line in log.lines() {
        let Some((_, rest)) = line.split_once(" node ") else {
            continue;
        };
        let Some((id, text)) = rest.split_once(": ") else {
            continue;
        };
        let Ok(id) = id.parse::<u32>() else {
            continue;
        };
        if text.contains(CAUGHT_UP) {
            last.insert(id, false);
        } else if text.starts_with(STARTED_BLANK) {
            last.insert(id, true);
        }
    }
    last.into_iter()
        .filter(|&(_, b)| b)
        .map(|(id, _)| id)
        .collect()
}

/// Whether node `id`'s process has ended (a zombie not reaped yet, or gone): `/proc`.
fn exited(c: &NetCluster, id: u32) -> bool {
    let Some(pid) = c.node(id).pid() else {
        return true;
    };
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S …`: the state after the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

/// Sets [`DISK_FULL_POINTS`] on node `n` (ENOSPC), the first one waited for; the ones set
/// (the first can stop the node before the others are set).
fn fill_disk(st: &mut Stage<'_>, n: u32) -> Result<Vec<&'static str>, Trouble> {
    let mut set = Vec::new();
    for p in DISK_FULL_POINTS {
        if set.is_empty() {
            st.failpoint(n, "PUT", p, "return(ENOSPC)")?;
            set.push(p);
            continue;
        }
        // The first point set can stop the node before the next is set: once its process
        // is gone, the rest are moot.
        let path = format!("/fail/{p}");
        let deadline = Instant::now() + HTTP_RETRY;
        loop {
            let r =
                st.cluster
                    .node_http(n, METRICS_PORT, "PUT", &path, "return(ENOSPC)", HTTP_BOUND);
            match r {
                Ok((status, _)) if status.contains(" 200 ") => {
                    set.push(p);
                    break;
                }
                _ if exited(st.cluster, n) || Instant::now() >= deadline => break,
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        if exited(st.cluster, n) {
            break;
        }
    }
    Ok(set)
}

/// C21: node `t`'s disk fills (ENOSPC on a follower's append, the leader's flush, the vote):
/// it must exit [`STORAGE_FAULT_EXIT`] within [`DISK_FULL_EXIT_BOUND`]. That exit is expected
/// (recorded as such); any other exit, or none, is a finding. The node is left down for the
/// heal to start again with its data as it was.
fn disk_full(st: &mut Stage<'_>, t: Target) -> Result<Applied, Trouble> {
    let (n, how) = st.resolve(t);
    let log_before = last_log_index(st.cluster, n);
    let t0 = Instant::now();
    let set = fill_disk(st, n)?;
    let status = st.cluster.wait_exit(n, DISK_FULL_EXIT_BOUND);
    let took = t0.elapsed();
    let note = format!("disk full on {how} ({}=return(ENOSPC))", set.join(", "));
    Ok(match status.and_then(|s| s.code()) {
        Some(STORAGE_FAULT_EXIT) => Applied {
            nodes: vec![n],
            note: format!(
                "{note}: it exited {STORAGE_FAULT_EXIT} after {:.2} s, as it must (C21)",
                took.as_secs_f64()
            ),
            expected_exit: Some((n, took)),
            ..Applied::default()
        },
        None if wrote_nothing(st.cluster, n, log_before) => {
            // S20: held with another fault (no primary, or itself catching up: C12, it takes
            // no append) the node may have nothing to write: nothing failed, nothing to say.
            st.cluster.kill(n);
            Applied {
                nodes: vec![n],
                note: format!(
                    "{note}: still running {} s later, having written nothing (its log as it was, \
                     no storage fault counted): killed",
                    DISK_FULL_EXIT_BOUND.as_secs()
                ),
                ..Applied::default()
            }
        }
        _ => {
            let what = match status {
                None => format!(
                    "still running {} s after its disk filled",
                    DISK_FULL_EXIT_BOUND.as_secs()
                ),
                Some(s) => format!("it exited {s}, not {STORAGE_FAULT_EXIT}"),
            };
            // Killed: no failpoint outlives the fault.
            st.cluster.kill(n);
            Applied {
                nodes: vec![n],
                note: format!("{note}: {what}"),
                finding: Some(format!(
                    "node {n}'s disk full (ENOSPC injected): {what} (C21: exit \
                     {STORAGE_FAULT_EXIT} within seconds)"
                )),
                ..Applied::default()
            }
        }
    })
}

/// Node `id`'s last log index (its own answer to an immediate `waitPrimary`), if it answers.
fn last_log_index(c: &NetCluster, id: u32) -> Option<u64> {
    let addr = c.node(id).client;
    netns::in_ns(&c.client_ns, move || {
        crate::harness::cluster::immediate_wait_primary(addr, HTTP_BOUND)
            .ok()
            .map(|i| i.last_log_index)
    })
    .ok()
    .flatten()
}

/// Whether node `id`, its disk full, wrote nothing since its log index was `before`: its log
/// is where it was and its metrics count no storage fault (`xce_storage_faults_total`, C21).
/// Anything it cannot tell (no answer) is "it may have written".
fn wrote_nothing(c: &NetCluster, id: u32, before: Option<u64>) -> bool {
    let Some(before) = before else {
        return false;
    };
    let Ok((_, metrics)) = c.node_http(id, METRICS_PORT, "GET", "/metrics", "", HTTP_BOUND) else {
        return false;
    };
    last_log_index(c, id) == Some(before) && storage_faults(&metrics) == Some(0.0)
}

/// The sum of `xce_storage_faults_total`'s samples in Prometheus text (`Some(0.0)` when it has
/// none yet: the gauge `xce_storage_fault` shows that C21's metrics are there; `None` when
/// neither is).
fn storage_faults(metrics: &str) -> Option<f64> {
    const NAME: &str = "xce_storage_faults_total";
    // A family with no sample yet is not shown at all; the gauge beside it always is.
    let mut seen = metrics.lines().any(|l| {
        l.starts_with("# TYPE xce_storage_faults ") || l.starts_with("# TYPE xce_storage_fault ")
    });
    let mut sum = 0.0;
    for l in metrics.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = l.strip_prefix(NAME) else {
            continue;
        };
        if rest.starts_with(['{', ' ']) {
            seen = true;
            sum += rest.rsplit(' ').next()?.trim().parse::<f64>().ok()?;
        }
    }
    seen.then_some(sum)
}

fn slow_links(st: &mut Stage<'_>, links: Links, rate: &str) -> Result<Applied, Trouble> {
    let (nodes, note) = match links {
        Links::All => {
            st.cluster
                .shape(rate, SHAPED_QUEUE)
                .map_err(harness("shape"))?;
            (Vec::new(), format!("every link at {rate}"))
        }
        Links::Of(t) => {
            let (n, how) = st.resolve(t);
            st.cluster
                .shape_node(n, rate, SHAPED_QUEUE)
                .map_err(harness("shape"))?;
            (vec![n], format!("the links of {how} at {rate}"))
        }
    };
    Ok(Applied {
        nodes,
        note,
        ..Applied::default()
    })
}

/// The first half of a replacement: `member remove` of a standby, then its process killed
/// and its data directory emptied (docs/operations.md: a removed node is stopped and never
/// started again with its old data).
fn remove_member(st: &mut Stage<'_>, t: Target) -> Result<Applied, Trouble> {
    let (n, how) = st.resolve(t);
    st.member_cmd(&["remove", &n.to_string()])?;
    st.cluster.kill(n);
    st.cluster.wipe(n).map_err(harness("wipe"))?;
    Ok(Applied {
        nodes: vec![n],
        note: format!("member remove {how}; killed, data directory emptied"),
        ..Applied::default()
    })
}

/// Leadership handed to node `t` on demand (C14 through `leader transfer --to N`). The primary
/// may refuse, with its reason, a target that is down, cut off or behind (another fault may
/// hold it): exit 1 is an answer, noted. A command still running at its deadline is a finding
/// (issue 26: it answers within seconds).
fn leader_transfer(st: &mut Stage<'_>, t: Target) -> Result<Applied, Trouble> {
    let (n, how) = st.resolve(t);
    let masters = st.cluster.masters();
    let to = n.to_string();
    let args = ["leader", "transfer", "--to", &to, "--masters", &masters];
    let out = st
        .cluster
        .controller_cmd(&args, MEMBER_CMD_BOUND)
        .map_err(harness("xce-controller leader transfer"))?;
    let note = match out.code {
        Some(0) => format!("leader transfer to {how}: {}", out.stdout.trim()),
        Some(1) => format!("leader transfer to {how} refused: {}", out.stderr.trim()),
        code => {
            return Err(Trouble::Cluster(format!(
                "`xce-controller {}`: {} — {}",
                args.join(" "),
                code.map_or("still running at its deadline".to_string(), |c| format!(
                    "exit {c}"
                )),
                out.stderr.trim()
            )))
        }
    };
    Ok(Applied {
        nodes: vec![n],
        note,
        ..Applied::default()
    })
}

/// The second half: the blank node started with `--join`, then `member add` (returns once
/// it caught up and votes).
fn add_member(st: &mut Stage<'_>, a: &Applied) -> Result<String, Trouble> {
    let n = a.nodes[0];
    st.cluster
        .restart_joining(n)
        .map_err(harness("start --join"))?;
    let spec = st.cluster.node_spec(n);
    st.member_cmd(&["add", &spec])?;
    Ok(format!(
        "node {n} started blank with --join; member add {spec}: done"
    ))
}

/// Starts `ranks` (0: the old primary) again in `order`.
fn restart_in_order(
    st: &mut Stage<'_>,
    ranks: &[u32],
    order: &RestartOrder,
) -> Result<String, Trouble> {
    let (seq, gaps): (Vec<u32>, Vec<Duration>) = match order {
        RestartOrder::OldPrimaryFirst { gap } => {
            let mut gaps = vec![*gap];
            gaps.resize(ranks.len() - 1, Duration::ZERO);
            (ranks.to_vec(), gaps)
        }
        RestartOrder::AllAtOnce => (ranks.to_vec(), vec![Duration::ZERO; ranks.len() - 1]),
        RestartOrder::OneByOne { ranks: order, gaps } => (
            order.iter().map(|&r| ranks[r as usize]).collect(),
            gaps.clone(),
        ),
    };
    st.cluster
        .start_in_order(&seq, &gaps)
        .map_err(harness("restart"))?;
    let ids: Vec<String> = seq.iter().map(u32::to_string).collect();
    let gaps: Vec<String> = gaps.iter().map(|g| g.as_millis().to_string()).collect();
    Ok(format!(
        "nodes {} started in this order, {} ms apart",
        ids.join(", "),
        gaps.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_is_catching_up_is_read_from_the_last_c12_line_of_each_node() {
        let log = "\
2026-01-01T00:00:00.001Z node 1: started without data (new, or its data was lost): …
2026-01-01T00:00:00.002Z node 2: started without data (new, or its data was lost): …
2026-01-01T00:00:00.003Z node 3: started without data (new, or its data was lost): …
2026-01-01T00:00:01.000Z node 1: elected leader in term 2 since it started blank: votes and campaigns again (C12)
2026-01-01T00:00:01.001Z node 2: its log matches the leader's …: votes and campaigns again (C12)
2026-01-01T00:00:01.002Z node 3: its log matches the leader's …: votes and campaigns again (C12)
2026-01-01T00:00:09.000Z node 2: started without data (new, or its data was lost): …";
        assert_eq!(catching_up_in(log), vec![2]);
        let caught = format!(
            "{log}\n2026-01-01T00:00:10.000Z node 2: its log matches …: votes and campaigns \
             again (C12)"
        );
        assert!(catching_up_in(&caught).is_empty());
        assert!(catching_up_in("").is_empty());
    }

    #[test]
    fn storage_faults_are_summed_over_their_labels() {
        // As a node renders them before any fault: the counter family absent, the gauge there.
        let none = "# HELP xce_storage_fault 1 once …\n# TYPE xce_storage_fault gauge\n\
                    xce_storage_fault 0\n# EOF\n";
        assert_eq!(storage_faults(none), Some(0.0));
        let two = "# TYPE xce_storage_faults counter\n\
                   xce_storage_faults_total{op=\"append\"} 1\n\
                   xce_storage_faults_total{op=\"vote\"} 1\n\
                   xce_storage_faults_total_x 7\n";
        assert_eq!(storage_faults(two), Some(2.0));
        assert_eq!(storage_faults("xce_other 1\n"), None);
    }
}
