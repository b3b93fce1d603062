//! The schedule: from a seed, the run's length and the kinds selected, the same list of
//! episodes every time — when each starts, which faults (one, or up to three held together:
//! S20's composed faults, see [`compose`]), on which roles, with which parameters, how long
//! they hold. Pure: what the cluster does in between is not part of it (targets are roles,
//! resolved when applied, a later fault of an episode on another node than the earlier
//! ones), so a seed replays the same schedule of operations and timings.

use std::fmt;
use std::time::Duration;

use std::collections::{BTreeMap, BTreeSet};

use super::fault::{Effect, Fault, Kind, Links, RestartOrder, Target};
use crate::rng::Rng;

/// The cluster serves alone this long before the first fault.
pub const WARMUP: Duration = Duration::from_secs(2);
/// The time an episode's heal is allowed in the plan (restarts, re-elections), before the
/// quiet gap that follows it.
const HEAL_ALLOWANCE: Duration = Duration::from_secs(1);
/// Nodes in the cluster the schedule is made for.
pub const NODES: usize = 3;

/// One episode: `faults` applied `stagger` apart from `at` (from the run's start), held
/// `hold` after the last, then healed in reverse order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Episode {
    pub at: Duration,
    pub faults: Vec<Fault>,
    pub stagger: Duration,
    pub hold: Duration,
}

impl Episode {
    /// From its start to its planned end (heal allowance included).
    pub fn span(&self) -> Duration {
        self.stagger * (self.faults.len() as u32 - 1) + self.hold + HEAL_ALLOWANCE
    }
}

/// Every episode of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub seed: u64,
    pub length: Duration,
    pub episodes: Vec<Episode>,
}

impl Schedule {
    /// The schedule of `seed` for a run of `length` drawing from `kinds` (pending kinds are
    /// the caller's to refuse: see [`Kind::pending`]). Every episode ends (heal allowance
    /// included) within `length`.
    pub fn generate(seed: u64, length: Duration, kinds: &[Kind]) -> Schedule {
        let mut rng = Rng::new(seed);
        let weights: Vec<(Kind, u64)> = kinds.iter().map(|&k| (k, k.weight())).collect();
        let mut episodes = Vec::new();
        let mut at = WARMUP;
        while !weights.is_empty() {
            let first = draw(rng.weighted(&weights), &mut rng);
            let mut faults = vec![first.clone()];
            for k in compose(&first, kinds, &mut rng) {
                faults.push(draw(k, &mut rng));
            }
            let ep = Episode {
                at,
                faults,
                stagger: rng.ms(200, 1500),
                hold: rng.ms(500, 4000),
            };
            if at + ep.span() > length {
                break;
            }
            at += ep.span() + rng.ms(500, 3000);
            episodes.push(ep);
        }
        Schedule {
            seed,
            length,
            episodes,
        }
    }

    /// Per episode, the kinds of its faults (as [`overlaps`] takes them).
    pub fn kinds(&self) -> Vec<Vec<Kind>> {
        self.episodes
            .iter()
            .map(|e| e.faults.iter().map(Fault::kind).collect())
            .collect()
    }

    /// How many faults of each kind the schedule applies.
    pub fn count(&self, kind: Kind) -> usize {
        self.episodes
            .iter()
            .flat_map(|e| &e.faults)
            .filter(|f| f.kind() == kind)
            .count()
    }
}

/// How many episodes overlapped each pair of effects (S20): an episode counts once for a
/// pair when two of its faults, or two nodes of one fault, had them at once.
pub fn overlaps(episodes: &[Vec<Kind>]) -> BTreeMap<(Effect, Effect), usize> {
    let mut out = BTreeMap::new();
    for ep in episodes {
        let per_node: Vec<&[Effect]> = ep
            .iter()
            .flat_map(|k| k.effects().iter().copied())
            .collect();
        let mut pairs = BTreeSet::new();
        for (i, a) in per_node.iter().enumerate() {
            for b in &per_node[i + 1..] {
                for &x in *a {
                    for &y in *b {
                        pairs.insert((x.min(y), x.max(y)));
                    }
                }
            }
        }
        for p in pairs {
            *out.entry(p).or_default() += 1;
        }
    }
    out
}

/// Episodes in which faults overlapped (two faults, or one fault of several nodes).
pub fn composed(episodes: &[Vec<Kind>]) -> usize {
    episodes
        .iter()
        .filter(|e| !overlaps(std::slice::from_ref(e)).is_empty())
        .count()
}

/// The pairs of effects the overlaps' table always shows (S20 names them).
pub const NAMED_OVERLAPS: [(Effect, Effect); 2] =
    [(Effect::Cut, Effect::DiskLost), (Effect::Cut, Effect::Down)];

/// A role: the primary `percent` % of the time, else one of the standbys.
fn target(rng: &mut Rng, percent: u64) -> Target {
    if rng.percent(percent) {
        Target::Primary
    } else {
        Target::Standby(rng.below(NODES as u64 - 1) as u8)
    }
}

/// A fault of `kind` with its parameters drawn.
fn draw(kind: Kind, rng: &mut Rng) -> Fault {
    match kind {
        Kind::Kill => Fault::Kill(target(rng, 60)),
        Kind::Pause => Fault::Pause(target(rng, 50)),
        Kind::KillAll => Fault::KillAll(match rng.below(3) {
            0 => RestartOrder::OldPrimaryFirst {
                gap: rng.ms(200, 2000),
            },
            1 => RestartOrder::AllAtOnce,
            _ => RestartOrder::OneByOne {
                ranks: rng
                    .permutation(NODES)
                    .into_iter()
                    .map(|r| r as u8)
                    .collect(),
                gaps: (1..NODES).map(|_| rng.ms(300, 2000)).collect(),
            },
        }),
        Kind::Partition => Fault::Partition(target(rng, 50)),
        Kind::Blackhole => Fault::Blackhole(target(rng, 50)),
        Kind::SlowLinks => Fault::SlowLinks {
            links: if rng.percent(60) {
                Links::All
            } else {
                Links::Of(target(rng, 50))
            },
            rate: ["1mbit", "4mbit", "16mbit"][rng.below(3) as usize],
        },
        Kind::MemberReplace => Fault::MemberReplace(target(rng, 0)),
        Kind::DiskStall => Fault::DiskStall(target(rng, 80)),
        Kind::Terminate => Fault::Terminate,
        Kind::DiskFull => Fault::DiskFull(target(rng, 50)),
        // C22: an hour either way, the primary more often (its clock once decided dedup
        // windows and handovers).
        Kind::ClockStep => Fault::ClockStep {
            target: target(rng, 70),
            secs: if rng.percent(50) { 3600 } else { -3600 },
        },
        Kind::LeaderTransfer => Fault::LeaderTransfer { to: target(rng, 0) },
        Kind::DiskLoss => Fault::DiskLoss(target(rng, 30)),
        Kind::DeposedPrimary => Fault::DeposedPrimary,
    }
}

/// What a node cut off is held with (S20): another node killed, its disk lost, stalled or
/// full, a clock stepped, leadership moved, a node paused.
const HELD_WITH_A_CUT: [Kind; 7] = [
    Kind::DiskLoss,
    Kind::Kill,
    Kind::DiskStall,
    Kind::DiskFull,
    Kind::ClockStep,
    Kind::LeaderTransfer,
    Kind::Pause,
];
/// A third fault on top of a cut and another node's fault.
const THIRD: [Kind; 3] = [Kind::ClockStep, Kind::LeaderTransfer, Kind::SlowLinks];

/// The faults held together with `first` (S20's composed faults), from the kinds selected:
/// - a node cut off (partition, blackhole): most often another node's fault on top
///   ([`HELD_WITH_A_CUT`]), and sometimes a third ([`THIRD`]);
/// - a node fault (killed, disk lost, stalled, full, clock stepped, paused, SIGTERM):
///   sometimes another node cut off while it holds;
/// - the primary's disk stalled: sometimes every node killed on top (issue 25's defect 1);
/// - otherwise sometimes slow links.
///
/// The whole cluster killed, a replacement, slow links and `deposed-primary` (itself three
/// nodes' faults) take nothing on top.
pub fn compose(first: &Fault, kinds: &[Kind], rng: &mut Rng) -> Vec<Kind> {
    let pick = |from: &[Kind], rng: &mut Rng| -> Option<Kind> {
        let can: Vec<Kind> = from.iter().copied().filter(|k| kinds.contains(k)).collect();
        (!can.is_empty()).then(|| can[rng.below(can.len() as u64) as usize])
    };
    let cuts = [Kind::Partition, Kind::Blackhole];
    let mut out = Vec::new();
    match first.kind() {
        Kind::KillAll | Kind::MemberReplace | Kind::SlowLinks | Kind::DeposedPrimary => {}
        Kind::Partition | Kind::Blackhole if rng.percent(80) => {
            out.extend(pick(&HELD_WITH_A_CUT, rng));
            if !out.is_empty() && rng.percent(30) {
                out.extend(pick(&THIRD, rng));
            }
        }
        Kind::Partition | Kind::Blackhole => {}
        Kind::DiskStall if rng.percent(50) => out.extend(pick(&[Kind::KillAll], rng)),
        Kind::Kill
        | Kind::DiskLoss
        | Kind::DiskStall
        | Kind::DiskFull
        | Kind::ClockStep
        | Kind::Pause
        | Kind::Terminate
            if rng.percent(35) =>
        {
            out.extend(pick(&cuts, rng))
        }
        _ if rng.percent(20) => out.extend(pick(&[Kind::SlowLinks], rng)),
        _ => {}
    }
    out
}

fn role(t: &Target) -> String {
    match t {
        Target::Primary => "the primary".into(),
        Target::Standby(k) => format!("standby #{k}"),
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.kind().name();
        match self {
            Fault::Kill(t)
            | Fault::Pause(t)
            | Fault::Partition(t)
            | Fault::Blackhole(t)
            | Fault::MemberReplace(t)
            | Fault::DiskStall(t)
            | Fault::DiskFull(t)
            | Fault::DiskLoss(t) => write!(f, "{name} {}", role(t)),
            Fault::KillAll(o) => write!(f, "{name}, restarted {o}"),
            Fault::SlowLinks { links, rate } => match links {
                Links::All => write!(f, "{name} every link at {rate}"),
                Links::Of(t) => write!(f, "{name} of {} at {rate}", role(t)),
            },
            Fault::Terminate => write!(f, "{name} the primary"),
            Fault::ClockStep { target, secs } => write!(f, "{name} {} by {secs} s", role(target)),
            Fault::LeaderTransfer { to } => write!(f, "{name} to {}", role(to)),
            Fault::DeposedPrimary => write!(
                f,
                "{name} (the primary cut off, the new one elected and cut off, a follower's \
                 disk lost, the old primary back)"
            ),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "schedule of seed {} for {:.0} s: {} episodes",
            self.seed,
            self.length.as_secs_f64(),
            self.episodes.len()
        )?;
        for (i, e) in self.episodes.iter().enumerate() {
            let faults: Vec<String> = e.faults.iter().map(ToString::to_string).collect();
            let stagger = if e.faults.len() > 1 {
                format!("{} ms apart, ", e.stagger.as_millis())
            } else {
                String::new()
            };
            writeln!(
                f,
                "  {:>7.3} s  #{i}: {} ({stagger}held {} ms)",
                e.at.as_secs_f64(),
                faults.join(" + "),
                e.hold.as_millis()
            )?;
        }
        let kinds = self.kinds();
        let table = overlaps(&kinds);
        let mut pairs: Vec<String> = NAMED_OVERLAPS
            .iter()
            .chain(table.keys().filter(|p| !NAMED_OVERLAPS.contains(p)))
            .map(|&(a, b)| {
                let n = table.get(&(a, b)).copied().unwrap_or(0);
                format!("{} + {}: {n}", a.label(), b.label())
            })
            .collect();
        pairs.dedup();
        writeln!(
            f,
            "episodes whose faults overlap: {} of {} — {}",
            composed(&kinds),
            kinds.len(),
            pairs.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn a_seed_names_one_schedule() {
        let kinds = Kind::selectable();
        let a = Schedule::generate(99, MINUTE, &kinds);
        assert_eq!(a, Schedule::generate(99, MINUTE, &kinds));
        assert_ne!(a.episodes, Schedule::generate(100, MINUTE, &kinds).episodes);
        assert!(a.episodes.len() >= 5, "{a}");
    }

    #[test]
    fn episodes_fit_the_run_in_order_and_never_overlap() {
        for seed in 0..200 {
            let s = Schedule::generate(seed, MINUTE, &Kind::selectable());
            let mut free_from = WARMUP;
            for e in &s.episodes {
                assert!(e.at >= free_from, "seed {seed}: {s}");
                assert!(e.at + e.span() <= MINUTE, "seed {seed}: {s}");
                assert!(!e.faults.is_empty() && e.faults.len() <= 3);
                free_from = e.at + e.span();
            }
        }
    }

    #[test]
    fn only_the_kinds_given_are_drawn_and_pending_ones_are_not_selectable() {
        let only = [Kind::Pause, Kind::Partition];
        for seed in 0..50 {
            let s = Schedule::generate(seed, MINUTE, &only);
            assert!(s
                .episodes
                .iter()
                .flat_map(|e| &e.faults)
                .all(|f| only.contains(&f.kind())));
        }
        let selectable = Kind::selectable();
        for k in [
            Kind::DiskFull,
            Kind::ClockStep,
            Kind::DiskStall,
            Kind::LeaderTransfer,
        ] {
            assert!(k.pending().is_none() && selectable.contains(&k));
        }
        assert!(Schedule::generate(1, MINUTE, &[]).episodes.is_empty());
    }

    #[test]
    fn every_selectable_kind_runs_and_the_primary_is_killed_most() {
        let s = Schedule::generate(7, 30 * MINUTE, &Kind::selectable());
        for k in Kind::selectable() {
            assert!(s.count(k) > 0, "{} never drawn in 30 minutes", k.name());
        }
        let kills: Vec<&Target> = s
            .episodes
            .iter()
            .flat_map(|e| &e.faults)
            .filter_map(|f| match f {
                Fault::Kill(t) => Some(t),
                _ => None,
            })
            .collect();
        let primary = kills.iter().filter(|t| ***t == Target::Primary).count();
        assert!(primary * 2 > kills.len(), "{primary} of {}", kills.len());
        // The defect-1 sequence (a stalled primary disk, then kill -9 of all) is drawn.
        assert!(s
            .episodes
            .iter()
            .any(|e| e.faults.len() == 2 && e.faults[1].kind() == Kind::KillAll));
    }

    #[test]
    fn faults_are_composed_as_s20_asks() {
        // A minute most often holds a cut with another node's fault; every seed of a minute
        // composes some episode.
        let (mut with_loss, mut with_kill) = (0, 0);
        for seed in 0..100 {
            let s = Schedule::generate(seed, MINUTE, &Kind::selectable());
            let o = overlaps(&s.kinds());
            assert!(
                composed(&s.kinds()) > 0,
                "seed {seed}: nothing composed: {s}"
            );
            with_loss += usize::from(o.contains_key(&(Effect::Cut, Effect::DiskLost)));
            with_kill += usize::from(o.contains_key(&(Effect::Cut, Effect::Down)));
        }
        assert!(
            with_loss >= 50 && with_kill >= 70,
            "{with_loss} {with_kill}"
        );
        // Over 30 minutes: the defect-1 sequence, a cut with each kind it is held with, and a
        // third fault on top.
        let s = Schedule::generate(7, 30 * MINUTE, &Kind::selectable());
        assert!(s.count(Kind::DeposedPrimary) > 0);
        let cut = |f: &Fault| matches!(f.kind(), Kind::Partition | Kind::Blackhole);
        for k in HELD_WITH_A_CUT {
            assert!(
                s.episodes
                    .iter()
                    .any(|e| cut(&e.faults[0]) && e.faults.get(1).is_some_and(|f| f.kind() == k)),
                "a cut never held with {}",
                k.name()
            );
        }
        assert!(s.episodes.iter().any(|e| e.faults.len() == 3));
        // Only the kinds selected are composed.
        let only = [Kind::Partition, Kind::Kill];
        let s = Schedule::generate(7, 30 * MINUTE, &only);
        assert!(s
            .episodes
            .iter()
            .flat_map(|e| &e.faults)
            .all(|f| only.contains(&f.kind())));
        assert!(overlaps(&s.kinds()).contains_key(&(Effect::Cut, Effect::Down)));
    }

    #[test]
    fn overlaps_count_pairs_across_nodes_once_per_episode() {
        let eps = vec![
            vec![Kind::DiskLoss],
            vec![Kind::Partition, Kind::DiskLoss],
            vec![Kind::DeposedPrimary],
            vec![Kind::Partition, Kind::Kill, Kind::Kill],
        ];
        let o = overlaps(&eps);
        // A lost disk alone overlaps nothing (its kill is the same node's).
        assert_eq!(composed(&eps), 3);
        assert_eq!(o[&(Effect::Cut, Effect::DiskLost)], 2);
        assert_eq!(o[&(Effect::Cut, Effect::Down)], 3);
        assert_eq!(o[&(Effect::Cut, Effect::Cut)], 1);
        assert_eq!(o[&(Effect::Down, Effect::Down)], 1);
        assert_eq!(o.get(&(Effect::Down, Effect::DiskLost)), None);
    }

    #[test]
    fn kinds_parse_by_name() {
        for k in Kind::ALL {
            assert_eq!(Kind::parse(k.name()), Some(k));
        }
        assert_eq!(Kind::parse("nope"), None);
    }
}
