//! Runs a [`Schedule`] against the cluster: each episode at its planned time (at once when
//! the one before ran late), its faults applied and healed, every step written down with
//! the time it happened — the schedule as executed, which a failure prints.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::fault::{Applied, Fault, Kind, Stage, METRICS_PORT, STORAGE_FAULT_EXIT};
use super::schedule::{Episode, Schedule};
use super::Trouble;
use crate::harness::netns::{self, NetCluster};

/// One step as it happened, from the run's origin.
#[derive(Debug, Clone)]
pub struct Line {
    pub at: Duration,
    pub text: String,
}

/// What running the schedule did.
#[derive(Debug, Default)]
pub struct Executed {
    pub lines: Vec<Line>,
    /// What the cluster did that it must not (a membership change refused, a node that
    /// exited on its own).
    pub findings: Vec<String>,
    /// Faults applied, by kind.
    pub applied: BTreeMap<Kind, usize>,
    /// Nodes that exited 74 as they must (a full disk injected), and how long it took.
    pub expected_exits: Vec<(u32, Duration)>,
    /// Nodes whose data directory held a `diverged` marker (C19) when looked at.
    pub diverged: BTreeSet<u32>,
    /// Per episode, the kinds of the faults applied in it (held together: S20's overlaps).
    pub episodes: Vec<Vec<Kind>>,
}

pub struct Executor<'c> {
    stage: Stage<'c>,
    origin: Instant,
    /// Print each step as it happens (stderr).
    live: bool,
    pub done: Executed,
}

impl<'c> Executor<'c> {
    pub fn new(cluster: &'c mut NetCluster, origin: Instant, live: bool) -> Executor<'c> {
        Executor {
            stage: Stage {
                cluster,
                busy: Vec::new(),
            },
            origin,
            live,
            done: Executed::default(),
        }
    }

    pub fn note(&mut self, text: String) {
        let at = self.origin.elapsed();
        if self.live {
            eprintln!("S18 {:>8.3} s  {text}", at.as_secs_f64());
        }
        self.done.lines.push(Line { at, text });
    }

    fn finding(&mut self, what: String) {
        self.note(format!("FINDING: {what}"));
        self.done.findings.push(what);
    }

    /// Nodes that exited without being killed: a crash, a panic, an exit of its own (an
    /// exit 74 — a storage fault — with no disk fault injected included); and nodes that
    /// found themselves diverged (C19: a `diverged` marker in the data directory).
    fn watch_exits(&mut self) {
        for (id, status) in self.stage.cluster.reap_exited() {
            if status.code() == Some(STORAGE_FAULT_EXIT) {
                self.finding(format!(
                    "node {id} exited {STORAGE_FAULT_EXIT} (a storage fault, C21) with no disk \
                     fault injected"
                ));
            } else {
                self.finding(format!("node {id} exited on its own: {status}"));
            }
        }
        for id in 1..=self.stage.cluster.nodes.len() as u32 {
            let marker = self.stage.cluster.node_data(id).join("diverged");
            if marker.exists() && self.done.diverged.insert(id) {
                let what = std::fs::read_to_string(&marker).unwrap_or_default();
                self.finding(format!(
                    "node {id} diverged (C19): {} holds {:?}",
                    marker.display(),
                    what.trim()
                ));
            }
        }
    }

    /// Every episode of `schedule` in turn. `Err`: the harness failed (the run proves nothing).
    pub fn run(&mut self, schedule: &Schedule) -> Result<(), String> {
        for (i, ep) in schedule.episodes.iter().enumerate() {
            let due = self.origin + ep.at;
            let now = Instant::now();
            if now < due {
                std::thread::sleep(due - now);
            } else if now - due > Duration::from_millis(100) {
                let late = (now - due).as_secs_f64();
                self.note(format!(
                    "#{i} starts {late:.1} s late (the one before ran long)"
                ));
            }
            self.episode(i, ep)?;
        }
        self.watch_exits();
        Ok(())
    }

    fn episode(&mut self, i: usize, ep: &Episode) -> Result<(), String> {
        let mut applied: Vec<(&Fault, Applied)> = Vec::new();
        let mut harness_error = None;
        for (j, f) in ep.faults.iter().enumerate() {
            if j > 0 {
                std::thread::sleep(ep.stagger);
            }
            self.watch_exits();
            match f.apply(&mut self.stage) {
                Ok(a) if a.skipped => {
                    self.note(format!("#{i} skip {}: {}", f.kind().name(), a.note));
                }
                Ok(mut a) => {
                    self.note(format!("#{i} apply {}: {}", f.kind().name(), a.note));
                    *self.done.applied.entry(f.kind()).or_default() += 1;
                    if let Some(why) = a.finding.take() {
                        self.finding(format!("#{i} {}: {why}", f.kind().name()));
                    }
                    if let Some(exit) = a.expected_exit {
                        self.done.expected_exits.push(exit);
                    }
                    self.stage.busy.extend(&a.nodes);
                    applied.push((f, a));
                }
                Err(Trouble::Cluster(why)) => {
                    self.finding(format!("#{i} {}: {why}", f.kind().name()));
                    break;
                }
                Err(Trouble::Harness(why)) => {
                    harness_error = Some(format!("#{i} {}: {why}", f.kind().name()));
                    break;
                }
            }
        }
        if harness_error.is_none() && !applied.is_empty() {
            std::thread::sleep(ep.hold);
        }
        self.stage.busy.clear();
        self.done
            .episodes
            .push(applied.iter().map(|(f, _)| f.kind()).collect());
        self.watch_exits();
        for (f, a) in applied.iter().rev() {
            match f.heal(a, &mut self.stage) {
                Ok(t) => self.note(format!("#{i} heal {}: {t}", f.kind().name())),
                Err(Trouble::Cluster(why)) => {
                    self.finding(format!("#{i} heal {}: {why}", f.kind().name()))
                }
                Err(Trouble::Harness(why)) => {
                    harness_error.get_or_insert(format!("#{i} heal {}: {why}", f.kind().name()));
                }
            }
        }
        harness_error.map_or(Ok(()), Err)
    }

    /// The end of the run: every link up and unshaped, every node continued, every
    /// failpoint cleared (each fault cleared its own: one still set is named), every node
    /// that is down started again (from its data directory).
    pub fn heal_everything(&mut self) -> Result<(), String> {
        self.watch_exits();
        let mut left = Vec::new();
        let c = &mut *self.stage.cluster;
        c.unshape().map_err(|e| format!("unshape: {e}"))?;
        let mut started = Vec::new();
        for id in 1..=c.nodes.len() as u32 {
            c.fault(netns::Fault::Blackhole(id), false)
                .map_err(|e| format!("links of node {id} up: {e}"))?;
            if c.node(id).is_paused() {
                c.resume(id);
            }
            if c.node(id).is_running() {
                let bound = Duration::from_secs(5);
                let (status, set) = failpoints_set(c, id)?;
                if !status.contains(" 200 ") {
                    return Err(format!("GET /fail on node {id}: {status}"));
                }
                for name in set
                    .lines()
                    .filter_map(|l| l.split_once('='))
                    .map(|(n, _)| n)
                {
                    let path = format!("/fail/{name}");
                    c.node_http(id, METRICS_PORT, "DELETE", &path, "", bound)
                        .map_err(|e| format!("DELETE {path} on node {id}: {e}"))?;
                    left.push(format!("{name} on node {id}"));
                }
            }
            if !c.node(id).is_running() {
                c.restart(id)
                    .map_err(|e| format!("restart node {id}: {e}"))?;
                started.push(id);
            }
        }
        if !left.is_empty() {
            self.note(format!(
                "end: failpoints still set, cleared now: {}",
                left.join(", ")
            ));
        }
        self.note(format!(
            "end: every fault healed; nodes started again: {started:?}"
        ));
        Ok(())
    }

    pub fn cluster(&self) -> &NetCluster {
        self.stage.cluster
    }
}

/// `GET /fail` on node `id`: its status line and the failpoints set. A node started again a
/// moment ago (the last episode's heal) may not listen yet: asked again for up to 10 s while
/// it runs.
fn failpoints_set(c: &NetCluster, id: u32) -> Result<(String, String), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.node_http(id, METRICS_PORT, "GET", "/fail", "", Duration::from_secs(5)) {
            Ok(got) => return Ok(got),
            Err(e) if Instant::now() >= deadline || !c.node(id).is_running() => {
                return Err(format!("GET /fail on node {id}: {e}"))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}
