//! What S18 checks at the end of a run: the client history is linearizable — judged by
//! porcupine's algorithm ([`crate::check::job_table`]: job by job, and each key's set whole)
//! and by the conditions of [`crate::check::linearizable`] (key by key) —, every acknowledged
//! write is listed exactly once, one
//! primary per term (the nodes' own log lines), no node stuck (every member answers and
//! follows one primary, applied index caught up, the membership whole), and every node's
//! state equal (C19's online consistency check, [`digests_equal`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

use xce_proto::wire::{ControllerInfo, ControllerRole, Job, Op, ReplyData};

use super::clients::{user_key, Call, CallOp};
use super::fault::METRICS_PORT;
use crate::check::job_table::{self, Judgement};
use crate::check::linearizable::{self, History, Read, Violation, Write};
use crate::harness::netns::{self, NetCluster};

/// How long the end's consistency check may take to pass the last write's index.
const DIGEST_BOUND: Duration = Duration::from_secs(30);
/// Bound on one `consistencyCheck` (the primary waits up to 5 s for its members' digests).
const CHECK_CALL_BOUND: Duration = Duration::from_secs(15);
/// The node log lines of C19's check finding a difference (`node/check.rs`).
const MISMATCH_LINES: [&str; 2] = ["state digest mismatch", "state digests at index"];

/// At most this many violations are printed per check.
const SHOWN: usize = 10;

/// A check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Passed(String),
    Failed(String),
    /// It could not be made (its mechanism is not there yet): printed, never a pass.
    NotChecked(String),
}

#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub verdict: Verdict,
}

impl Check {
    pub fn failed(&self) -> bool {
        matches!(self.verdict, Verdict::Failed(_))
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (word, detail) = match &self.verdict {
            Verdict::Passed(d) => ("PASSED", d),
            Verdict::Failed(d) => ("FAILED", d),
            Verdict::NotChecked(d) => ("NOT CHECKED", d),
        };
        write!(f, "check: {} — {word} ({detail})", self.name)
    }
}

/// The run's last read: every job listed, and when.
pub struct FinalRead<'a> {
    pub jobs: &'a [Job],
    pub invoked: Duration,
    pub completed: Duration,
}

/// Each key's history: its writes, its successful listings, and the final listing's jobs of
/// that key as its last read. Jobs of a user that is no key of ours are returned apart.
pub fn histories(calls: &[Call], last: &FinalRead<'_>) -> (BTreeMap<u32, History>, Vec<u64>) {
    let mut by_key: BTreeMap<u32, History> = BTreeMap::new();
    for c in calls {
        let h = by_key.entry(c.key).or_default();
        match &c.op {
            CallOp::Write { id, result } => h.writes.push(Write {
                id: *id,
                invoked: c.invoked,
                completed: c.completed,
                acked: result.is_ok(),
            }),
            CallOp::Read { result: Ok(ids) } => h.reads.push(Read {
                invoked: c.invoked,
                completed: c.completed,
                ids: ids.clone(),
            }),
            CallOp::Read { result: Err(_) } => {}
        }
    }
    let mut listed: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut foreign = Vec::new();
    for j in last.jobs {
        match user_key(&j.user) {
            Some(k) => listed.entry(k).or_default().push(j.job_id),
            None => foreign.push(j.job_id),
        }
    }
    for k in listed.keys() {
        by_key.entry(*k).or_default();
    }
    for (k, h) in by_key.iter_mut() {
        h.reads.push(Read {
            invoked: last.invoked,
            completed: last.completed,
            ids: listed.remove(k).unwrap_or_default(),
        });
    }
    (by_key, foreign)
}

/// A time span of the run (from its origin): where a violation happened.
pub type Span = (Duration, Duration);

fn widen(a: Option<Span>, b: Span) -> Option<Span> {
    Some(a.map_or(b, |(lo, hi)| (lo.min(b.0), hi.max(b.1))))
}

/// Every key's history linearizable (the final listing included as its last read); on a
/// violation, also when the earliest one began.
pub fn linearizable(by_key: &BTreeMap<u32, History>, foreign: &[u64]) -> (Verdict, Option<Span>) {
    let mut bad: Vec<String> = foreign
        .iter()
        .map(|id| format!("job {id} listed under a user that is no key of the run"))
        .collect();
    let (mut writes, mut reads) = (0, 0);
    let mut first = None;
    for (k, h) in by_key {
        writes += h.writes.len();
        reads += h.reads.len();
        if let Err(v) = linearizable::check(h) {
            for v in &v {
                let (what, span) = explain(v, h);
                if first.is_none_or(|(lo, _): Span| span.0 < lo) {
                    first = Some(span);
                }
                bad.push(format!("key {k}: {what}"));
            }
        }
    }
    let what = format!(
        "{} keys, {writes} writes, {reads} reads with the final listing",
        by_key.len()
    );
    if bad.is_empty() {
        (Verdict::Passed(what), None)
    } else {
        (Verdict::Failed(format!("{what}; {}", shown(&bad))), first)
    }
}

/// How long porcupine's unpartitioned search may take per key (the job-by-job one always
/// ends: each partition is one job's submit and its key's listings).
pub const WHOLE_KEY_BUDGET: Duration = Duration::from_secs(20);

/// The history judged by porcupine's algorithm ([`job_table`]), key by key: job by job
/// (P-compositional, [`job_table::by_job`]) and each key's set whole ([`job_table::whole`],
/// at most `budget` a key). Two verdicts, and when the earliest violation began.
pub fn porcupine(
    by_key: &BTreeMap<u32, History>,
    budget: Duration,
) -> ((Verdict, Verdict), Option<Span>) {
    let mut first: Option<Span> = None;
    let mut note = |k: u32, j: Judgement, bad: &mut Vec<String>, undecided: &mut Vec<u32>| match j {
        Judgement::Linearizable => {}
        Judgement::Not { what, span } => {
            if first.is_none_or(|(lo, _)| span.0 < lo) {
                first = Some(span);
            }
            bad.push(format!("key {k}: {what}"));
        }
        Judgement::OutOfTime => undecided.push(k),
    };
    let (mut bad_job, mut bad_whole, mut undecided, mut none) = (vec![], vec![], vec![], vec![]);
    let t0 = Instant::now();
    for (&k, h) in by_key {
        note(k, job_table::by_job(h, None), &mut bad_job, &mut none);
    }
    let job_took = t0.elapsed();
    let t1 = Instant::now();
    let mut slowest = Duration::ZERO;
    for (&k, h) in by_key {
        let t = Instant::now();
        note(
            k,
            job_table::whole(h, Some(t + budget)),
            &mut bad_whole,
            &mut undecided,
        );
        slowest = slowest.max(t.elapsed());
    }
    let whole_took = t1.elapsed();
    let keys = by_key.len();
    let by_job = if bad_job.is_empty() {
        Verdict::Passed(format!(
            "{keys} keys, every job's submit and listings in order; {:.1} s",
            job_took.as_secs_f64()
        ))
    } else {
        Verdict::Failed(shown(&bad_job))
    };
    let whole = if !bad_whole.is_empty() {
        Verdict::Failed(shown(&bad_whole))
    } else if !undecided.is_empty() {
        Verdict::NotChecked(format!(
            "keys {undecided:?} undecided within {} s each (the conditions above decide them);              the other {} keys linearizable; {:.1} s",
            budget.as_secs(),
            keys - undecided.len(),
            whole_took.as_secs_f64()
        ))
    } else {
        Verdict::Passed(format!(
            "{keys} keys, each one set; {:.1} s (slowest key {:.2} s)",
            whole_took.as_secs_f64(),
            slowest.as_secs_f64()
        ))
    };
    ((by_job, whole), first)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Job `id` with its write's times and outcome, as `explain` names it.
fn written(h: &History, id: u64) -> String {
    match h.writes.iter().find(|w| w.id == id) {
        Some(w) => format!(
            "job {id} (written {:.3}–{:.3} s, {})",
            secs(w.invoked),
            secs(w.completed),
            if w.acked {
                "acknowledged"
            } else {
                "outcome unknown"
            }
        ),
        None => format!("job {id}"),
    }
}

/// The jobs whose writes a violation is about (their times widen its span).
fn involved(v: &Violation) -> Vec<u64> {
    match *v {
        Violation::DuplicateWrite { id }
        | Violation::FromTheFuture { id, .. }
        | Violation::LostAck { id, .. } => vec![id],
        Violation::OrderBroken {
            present, missing, ..
        } => vec![present, missing],
        _ => Vec::new(),
    }
}

/// A violation in the run's time (the checker names reads by index), and when it happened.
fn explain(v: &Violation, h: &History) -> (String, Span) {
    let mut span: Option<Span> = None;
    let mut read = |i: usize| {
        let r = &h.reads[i];
        span = widen(span, (r.invoked, r.completed));
        format!(
            "the read at {:.3}–{:.3} s ({} jobs)",
            secs(r.invoked),
            secs(r.completed),
            r.ids.len()
        )
    };
    let write = |id: u64| written(h, id);
    let text = match *v {
        Violation::DuplicateWrite { id } => format!("{} written twice", write(id)),
        Violation::DuplicateInRead { read: r, id } => format!("{} lists job {id} twice", read(r)),
        Violation::NeverWritten { read: r, id } => {
            format!(
                "{} lists job {id}, which no call wrote under this key",
                read(r)
            )
        }
        Violation::FromTheFuture { read: r, id } => {
            format!("{} lists {}, invoked after it", read(r), write(id))
        }
        Violation::NotAChain { a, b } => {
            let only = |x: usize, y: usize| {
                let other: HashSet<u64> = h.reads[y].ids.iter().copied().collect();
                h.reads[x].ids.iter().filter(|i| !other.contains(i)).count()
            };
            let (oa, ob) = (only(a, b), only(b, a));
            format!(
                "{} and {}: neither contains the other ({oa} jobs only in the first, {ob} only in the second)",
                read(a),
                read(b)
            )
        }
        Violation::WentBack { earlier, later } => format!(
            "{} began after {} completed, yet lists less",
            read(later),
            read(earlier)
        ),
        Violation::LostAck { read: r, id } => {
            format!(
                "{} misses {}, acknowledged before it began",
                read(r),
                write(id)
            )
        }
        Violation::OrderBroken {
            read: r,
            present,
            missing,
        } => format!(
            "{} lists {} but not {}, acknowledged before the first was invoked",
            read(r),
            write(present),
            write(missing)
        ),
    };
    let involved = involved(v);
    for w in h.writes.iter().filter(|w| involved.contains(&w.id)) {
        span = widen(span, (w.invoked, w.completed));
    }
    (text, span.unwrap_or_default())
}

fn shown(v: &[String]) -> String {
    let more = v.len().saturating_sub(SHOWN);
    let mut s = v.iter().take(SHOWN).cloned().collect::<Vec<_>>().join("; ");
    if more > 0 {
        s.push_str(&format!("; … {more} more"));
    }
    s
}

/// Every acknowledged write in the final listing exactly once; nothing listed that no call
/// wrote; an unacknowledged write (outcome unknown) at most once.
/// On a violation, also when the earliest write it names was made.
pub fn exactly_once(calls: &[Call], jobs: &[Job]) -> (Verdict, Option<Span>) {
    let mut written: HashMap<u64, bool> = HashMap::new();
    let mut when: HashMap<u64, Span> = HashMap::new();
    for c in calls {
        if let CallOp::Write { id, result } = &c.op {
            written.insert(*id, result.is_ok());
            when.insert(*id, (c.invoked, c.completed));
        }
    }
    let mut times: HashMap<u64, usize> = HashMap::new();
    for j in jobs {
        *times.entry(j.job_id).or_default() += 1;
    }
    let mut bad = Vec::new();
    let mut acked = 0;
    let mut first: Option<Span> = None;
    for (&id, &ok) in &written {
        let n = times.get(&id).copied().unwrap_or(0);
        let wrong = if ok {
            acked += 1;
            n != 1
        } else {
            n > 1
        };
        if wrong {
            let (inv, done) = when[&id];
            let what = if ok { "acknowledged" } else { "unacknowledged" };
            bad.push(format!(
                "{what} job {id} (written {:.3}–{:.3} s) listed {n} times",
                secs(inv),
                secs(done)
            ));
            if first.is_none_or(|(lo, _)| inv < lo) {
                first = Some((inv, done));
            }
        }
    }
    for (&id, &n) in &times {
        if !written.contains_key(&id) {
            bad.push(format!("job {id} listed {n} times, written by no call"));
        }
    }
    bad.sort();
    let unknown_present = written
        .iter()
        .filter(|(id, ok)| !**ok && times.contains_key(id))
        .count();
    let what = format!(
        "{acked} acknowledged writes; {unknown_present} of {} with an unknown outcome took effect; {} jobs listed",
        written.len() - acked,
        jobs.len()
    );
    if bad.is_empty() {
        (Verdict::Passed(what), None)
    } else {
        (Verdict::Failed(format!("{what}; {}", shown(&bad))), first)
    }
}

/// The terms in which each node logged `role=primary` (its log line on every change of role,
/// term or leader: `… node N: role=primary term=T …`).
pub fn primaries_by_term(log: &str) -> BTreeMap<u64, BTreeSet<u32>> {
    let mut out: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for line in log.lines() {
        let Some(at) = line.find(": role=primary term=") else {
            continue;
        };
        let term = line[at + ": role=primary term=".len()..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|t| t.parse().ok());
        let node = line[..at]
            .rsplit("node ")
            .next()
            .and_then(|n| n.parse().ok());
        if let (Some(term), Some(node)) = (term, node) {
            out.entry(term).or_default().insert(node);
        }
    }
    out
}

/// Raft's election safety: never two primaries in one term.
pub fn one_primary_per_term(by_term: &BTreeMap<u64, BTreeSet<u32>>) -> Verdict {
    let two: Vec<String> = by_term
        .iter()
        .filter(|(_, nodes)| nodes.len() > 1)
        .map(|(t, nodes)| format!("term {t}: nodes {nodes:?} each logged role=primary"))
        .collect();
    let what = format!("{} terms with a primary in the node logs", by_term.len());
    if two.is_empty() {
        Verdict::Passed(what)
    } else {
        Verdict::Failed(format!("{what}; {}", shown(&two)))
    }
}

/// C19: every node's state equal, by the controller's own online consistency check. At the
/// end (healed, settled: `end` is the primary and its commit index, past the last write) the
/// primary is asked `consistencyCheck` (what `xce-controller status` asks) until the index it
/// checked is at least `end`'s (bounded); then:
/// - the check's answer has no alarm, and neither has any node's own answer (a diverged node
///   names itself);
/// - every member had the checkpoint: answers, and has applied at least the checked index
///   (the primary leaves a member that does not answer out of a check and its answer does not
///   name who answered — the one thing this cannot see);
/// - no node's data directory has a `diverged` marker, now or when looked at during the run
///   (`seen`);
/// - `xce_state_digest_mismatch_total` is 0 on every node (it counts since the node's last
///   start) and no node logged a mismatch during the run (the logs span every start).
pub fn digests_equal(
    cluster: &NetCluster,
    end: Option<(u32, u64)>,
    seen: &BTreeSet<u32>,
) -> Verdict {
    let Some((primary, commit)) = end else {
        return Verdict::Failed("no settled primary at the end to ask".into());
    };
    let addr = cluster.node(primary).client;
    let deadline = Instant::now() + DIGEST_BOUND;
    let mut asked = 0;
    let check = loop {
        asked += 1;
        let answer = netns::in_ns(&cluster.client_ns, move || {
            crate::harness::cluster::raw_call(addr, Op::ConsistencyCheck, CHECK_CALL_BOUND)
        });
        let got = match answer {
            Ok(Ok(r)) => match r.data {
                ReplyData::CtrlInfo(i) => Ok(i),
                _ => Err(format!("status {} without controller info", r.status)),
            },
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(format!("client namespace: {e}")),
        };
        let done = got
            .as_ref()
            .is_ok_and(|i| i.checked_index >= commit || !i.alarms.is_empty());
        if done || Instant::now() >= deadline {
            break got;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let n = cluster.nodes.len() as u32;
    let markers = (1..=n)
        .filter(|&id| cluster.node_data(id).join("diverged").exists() || seen.contains(&id))
        .collect();
    let mismatches = (1..=n)
        .map(|id| {
            let got = cluster.node_http(
                id,
                METRICS_PORT,
                "GET",
                "/metrics",
                "",
                Duration::from_secs(5),
            );
            (
                id,
                got.map(|(_, body)| metric_value(&body, MISMATCH_METRIC))
                    .map_err(|e| e.to_string()),
            )
        })
        .collect();
    let log = cluster.log_lines(&MISMATCH_LINES);
    let logged =
        (!log.starts_with("(no node logs")).then(|| log.lines().map(String::from).collect());
    judge_digests(&DigestFacts {
        primary,
        commit,
        check,
        asked,
        answers: cluster.progress(Duration::from_secs(2)),
        markers,
        mismatches,
        logged,
    })
}

/// The metric C19's check counts a mismatch in.
const MISMATCH_METRIC: &str = "xce_state_digest_mismatch_total";

/// What the end's digest check gathered from the cluster ([`digests_equal`]).
pub struct DigestFacts {
    /// The settled primary and its commit index after the last write.
    pub primary: u32,
    pub commit: u64,
    /// The primary's last answer to `consistencyCheck` (or why there was none), after
    /// `asked` asks.
    pub check: Result<ControllerInfo, String>,
    pub asked: usize,
    /// Every node's own answer (`waitPrimary`, immediate) after the check.
    pub answers: Vec<(u32, Result<ControllerInfo, String>)>,
    /// Nodes with a `diverged` marker, now or when looked at during the run.
    pub markers: Vec<u32>,
    /// Each node's [`MISMATCH_METRIC`] (`None`: not in its metrics), or why it was not read.
    pub mismatches: Vec<(u32, Result<Option<f64>, String>)>,
    /// The node log lines naming a mismatch (`None`: no logs kept).
    pub logged: Option<Vec<String>>,
}

/// C19's verdict on what [`digests_equal`] gathered.
pub fn judge_digests(f: &DigestFacts) -> Verdict {
    let (p, commit) = (f.primary, f.commit);
    let mut bad = Vec::new();
    let checked = match &f.check {
        Ok(i) => {
            if i.checked_index < commit {
                bad.push(format!(
                    "the primary (node {p}) checked index {} < the commit index {commit} after \
                     the last write ({} asks in {} s)",
                    i.checked_index,
                    f.asked,
                    DIGEST_BOUND.as_secs()
                ));
            }
            for a in &i.alarms {
                bad.push(format!("the primary (node {p}) raised an alarm: {a}"));
            }
            i.checked_index
        }
        Err(e) => {
            bad.push(format!(
                "consistencyCheck on node {p} ({} asks): {e}",
                f.asked
            ));
            0
        }
    };
    for (id, a) in &f.answers {
        match a {
            Ok(i) => {
                for alarm in &i.alarms {
                    bad.push(format!("node {id}'s alarm: {alarm}"));
                }
                if i.applied_index < checked {
                    bad.push(format!(
                        "node {id} applied {} < the checked index {checked}",
                        i.applied_index
                    ));
                }
            }
            Err(e) => bad.push(format!("node {id} does not answer: {e}")),
        }
    }
    for id in &f.markers {
        bad.push(format!("node {id} has a diverged marker (C19)"));
    }
    for (id, m) in &f.mismatches {
        match m {
            Ok(Some(v)) if *v == 0.0 => {}
            Ok(Some(v)) => bad.push(format!("node {id}: {MISMATCH_METRIC} {v}")),
            Ok(None) => bad.push(format!("node {id}: no {MISMATCH_METRIC} in its metrics")),
            Err(e) => bad.push(format!("node {id}: GET /metrics: {e}")),
        }
    }
    match &f.logged {
        None => bad.push("no node logs kept: mismatches logged during the run unseen".into()),
        Some(l) if !l.is_empty() => bad.push(format!(
            "the node logs name a digest mismatch: {}",
            shown(l)
        )),
        Some(_) => {}
    }
    let n = f.answers.len();
    if bad.is_empty() {
        Verdict::Passed(format!(
            "the primary (node {p}) compared the members' digests at index {checked} ≥ the \
             commit index {commit} after the last write: equal, no alarm; {n} nodes applied it, \
             no diverged marker, {n} × {MISMATCH_METRIC} 0, no mismatch logged"
        ))
    } else {
        Verdict::Failed(shown(&bad))
    }
}

/// The value of an unlabelled sample `name` in Prometheus text.
fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (n, v) = l.rsplit_once(' ')?;
        (n == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// What every node answered at the end.
pub struct Settled {
    pub verdict: Verdict,
    /// One line per node: its last answer.
    pub nodes: Vec<String>,
    /// The primary and its commit index, once settled.
    pub end: Option<(u32, u64)>,
}

/// "No node stuck": within `bound` of the heal, every member answers, one is the serving primary and
/// the others name it, every applied index equals the primary's commit index (which equals
/// its last log index: nothing left uncommitted), and the primary names every node as a
/// member.
pub fn settle(cluster: &NetCluster, healed: Instant, bound: Duration) -> Settled {
    let deadline = healed + bound;
    loop {
        let answers = cluster.progress(Duration::from_millis(500));
        let nodes: Vec<String> = answers.iter().map(|(id, a)| node_line(*id, a)).collect();
        let why = unsettled(cluster, &answers);
        match why {
            None => {
                let took = healed.elapsed().as_secs_f64();
                let end = answers.iter().find_map(|(id, a)| match a {
                    Ok(i) if i.role == ControllerRole::Primary => Some((*id, i.committed_index)),
                    _ => None,
                });
                return Settled {
                    verdict: Verdict::Passed(format!("settled {took:.1} s after the heal")),
                    nodes,
                    end,
                };
            }
            Some(why) if Instant::now() >= deadline => {
                return Settled {
                    verdict: Verdict::Failed(format!(
                        "not settled {} s after the heal: {why}",
                        bound.as_secs()
                    )),
                    nodes,
                    end: None,
                }
            }
            Some(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

type Answers = [(u32, Result<ControllerInfo, String>)];

fn node_line(id: u32, a: &Result<ControllerInfo, String>) -> String {
    match a {
        Ok(i) => format!(
            "node {id}: {:?} term {} primary {} log {} commit {} applied {}",
            i.role, i.term, i.primary_id, i.last_log_index, i.committed_index, i.applied_index
        ),
        Err(e) => format!("node {id}: no answer: {e}"),
    }
}

/// Why the cluster is not settled yet (`None`: it is).
fn unsettled(cluster: &NetCluster, answers: &Answers) -> Option<String> {
    let mut infos = Vec::new();
    for (id, a) in answers {
        match a {
            Ok(i) => infos.push((*id, i)),
            Err(e) => return Some(format!("node {id} does not answer: {e}")),
        }
    }
    let primaries: Vec<u32> = infos
        .iter()
        .filter(|(_, i)| i.role == ControllerRole::Primary)
        .map(|(id, _)| *id)
        .collect();
    let [p] = primaries[..] else {
        return Some(format!("primaries {primaries:?}"));
    };
    let pi = infos.iter().find(|(id, _)| *id == p).map(|(_, i)| *i)?;
    if pi.committed_index != pi.last_log_index {
        return Some(format!(
            "the primary (node {p}) has log {} but commit {}",
            pi.last_log_index, pi.committed_index
        ));
    }
    for (id, i) in &infos {
        if i.primary_id != p && *id != p {
            return Some(format!("node {id} names primary {}, not {p}", i.primary_id));
        }
        if i.applied_index != pi.committed_index {
            return Some(format!(
                "node {id} applied {}, the primary's commit is {}",
                i.applied_index, pi.committed_index
            ));
        }
    }
    let want: HashSet<u32> = answers.iter().map(|(id, _)| *id).collect();
    match cluster.members_seen_by(p, Duration::from_millis(500)) {
        Some(m) if m.iter().copied().collect::<HashSet<u32>>() == want => None,
        Some(m) => Some(format!("the primary's members are {m:?}")),
        None => Some(format!("node {p} did not name its members")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xce::Error;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn write(key: u32, id: u64, at: u64, ok: bool) -> Call {
        Call {
            thread: 0,
            key,
            invoked: ms(at),
            completed: ms(at + 1),
            op: CallOp::Write {
                id,
                result: if ok { Ok(()) } else { Err(Error::NotReady) },
            },
        }
    }

    fn read(key: u32, at: u64, ids: &[u64]) -> Call {
        Call {
            thread: 1,
            key,
            invoked: ms(at),
            completed: ms(at + 1),
            op: CallOp::Read {
                result: Ok(ids.to_vec()),
            },
        }
    }

    fn job(id: u64, key: u32) -> Job {
        Job {
            job_id: id,
            user: super::super::clients::key_user(key),
            ..Job::default()
        }
    }

    fn end(jobs: &[Job]) -> FinalRead<'_> {
        FinalRead {
            jobs,
            invoked: ms(100),
            completed: ms(101),
        }
    }

    #[test]
    fn keys_are_checked_apart_with_the_final_listing_as_their_last_read() {
        let calls = [
            write(0, 1, 0, true),
            write(1, 2, 10, true),
            read(0, 20, &[1]),
            read(1, 20, &[2]),
        ];
        let jobs = [job(1, 0), job(2, 1)];
        let (by_key, foreign) = histories(&calls, &end(&jobs));
        assert!(foreign.is_empty());
        assert_eq!(by_key.len(), 2);
        assert_eq!(by_key[&0].reads.last().unwrap().ids, [1]);
        assert!(matches!(
            linearizable(&by_key, &foreign).0,
            Verdict::Passed(_)
        ));

        // Key 1's write lost at the end; a job of a stranger listed.
        let jobs = [
            job(1, 0),
            Job {
                job_id: 9,
                user: "x".into(),
                ..Job::default()
            },
        ];
        let (by_key, foreign) = histories(&calls, &end(&jobs));
        assert_eq!(foreign, [9]);
        let (Verdict::Failed(why), Some(span)) = linearizable(&by_key, &foreign) else {
            panic!("a lost write passed")
        };
        assert!(
            why.contains(
                "key 1: the read at 0.100–0.101 s (0 jobs) misses job 2 (written 0.010–0.011 s, \
                 acknowledged), acknowledged before it began"
            ),
            "{why}"
        );
        assert_eq!(span, (ms(10), ms(101)));
        assert!(why.contains("job 9 listed under a user"), "{why}");
    }

    #[test]
    fn exactly_once_counts_acked_unknown_and_strangers() {
        let calls = [
            write(0, 1, 0, true),
            write(0, 2, 0, false),
            write(0, 3, 0, false),
        ];
        let fine = [job(1, 0), job(2, 0)];
        assert_eq!(
            exactly_once(&calls, &fine).0,
            Verdict::Passed(
                "1 acknowledged writes; 1 of 2 with an unknown outcome took effect; 2 jobs listed"
                    .into()
            )
        );
        let twice = [job(1, 0), job(1, 0), job(2, 0), job(2, 0), job(7, 0)];
        let (Verdict::Failed(why), Some(span)) = exactly_once(&calls, &twice) else {
            panic!("duplicates passed")
        };
        for s in [
            "acknowledged job 1 (written 0.000–0.001 s) listed 2 times",
            "unacknowledged job 2 (written 0.000–0.001 s) listed 2 times",
            "job 7 listed 1 times, written by no call",
        ] {
            assert!(why.contains(s), "{why}");
        }
        assert_eq!(span, (ms(0), ms(1)));
        assert!(matches!(
            exactly_once(&calls, &[]).0,
            Verdict::Failed(w) if w.contains("job 1 (written 0.000–0.001 s) listed 0")
        ));
    }

    fn info(checked: u64, applied: u64, alarms: &[&str]) -> ControllerInfo {
        ControllerInfo {
            checked_index: checked,
            applied_index: applied,
            alarms: alarms.iter().map(|a| a.to_string()).collect(),
            ..ControllerInfo::default()
        }
    }

    fn clean() -> DigestFacts {
        DigestFacts {
            primary: 1,
            commit: 100,
            check: Ok(info(101, 101, &[])),
            asked: 1,
            answers: (1..=3).map(|id| (id, Ok(info(0, 101, &[])))).collect(),
            markers: Vec::new(),
            mismatches: (1..=3).map(|id| (id, Ok(Some(0.0)))).collect(),
            logged: Some(Vec::new()),
        }
    }

    #[test]
    fn the_digest_check_passes_only_when_every_fact_is_clean() {
        assert!(matches!(judge_digests(&clean()), Verdict::Passed(_)));
        type Spoil = fn(&mut DigestFacts);
        let table: [(Spoil, &str); 11] = [
            (
                |f| f.check = Ok(info(99, 101, &[])),
                "checked index 99 < the commit index 100",
            ),
            (
                |f| f.check = Err("timed out".into()),
                "consistencyCheck on node 1 (1 asks): timed out",
            ),
            (
                |f| f.check = Ok(info(101, 101, &["node 2: differs"])),
                "raised an alarm: node 2: differs",
            ),
            (
                |f| f.answers[1].1 = Ok(info(0, 101, &["node 2: diverged"])),
                "node 2's alarm: node 2: diverged",
            ),
            (
                |f| f.answers[2].1 = Ok(info(0, 100, &[])),
                "node 3 applied 100 < the checked index 101",
            ),
            (
                |f| f.answers[2].1 = Err("refused".into()),
                "node 3 does not answer: refused",
            ),
            (|f| f.markers = vec![2], "node 2 has a diverged marker"),
            (
                |f| f.mismatches[0].1 = Ok(Some(1.0)),
                "node 1: xce_state_digest_mismatch_total 1",
            ),
            (
                |f| f.mismatches[1].1 = Ok(None),
                "node 2: no xce_state_digest_mismatch_total",
            ),
            (|f| f.logged = None, "no node logs kept"),
            (
                |f| f.logged = Some(vec!["node 1: state digest mismatch at index 7".into()]),
                "the node logs name a digest mismatch: node 1: state digest mismatch",
            ),
        ];
        for (spoil, want) in table {
            let mut f = clean();
            spoil(&mut f);
            match judge_digests(&f) {
                Verdict::Failed(why) => assert!(why.contains(want), "{why} lacks {want:?}"),
                v => panic!("{v:?} for a run that should fail with {want:?}"),
            }
        }
    }

    #[test]
    fn metric_samples_are_read_by_exact_name() {
        let text = "# TYPE xce_state_digest_mismatch counter\n\
                    xce_state_digest_mismatch_total 3\n\
                    xce_state_digest_mismatch_total_x 9\n\
                    xce_alarms 0\n# EOF\n";
        assert_eq!(metric_value(text, MISMATCH_METRIC), Some(3.0));
        assert_eq!(metric_value(text, "xce_alarms"), Some(0.0));
        assert_eq!(metric_value(text, "xce_state_digest"), None);
    }

    #[test]
    fn primaries_are_read_from_the_role_lines() {
        let log = "\
2026-01-01T00:00:00.001Z node 1: role=candidate term=2 leader=none at=1.001
2026-01-01T00:00:00.002Z node 1: role=primary term=2 leader=1 at=1.002
2026-01-01T00:00:00.003Z node 2: role=standby term=2 leader=1 at=1.003
2026-01-01T00:00:01.000Z node 3: role=primary term=3 leader=3 at=2.000
2026-01-01T00:00:02.000Z node 1: role=primary term=2 leader=1 at=3.000";
        let by_term = primaries_by_term(log);
        assert_eq!(by_term.len(), 2);
        assert_eq!(by_term[&2], BTreeSet::from([1]));
        assert!(matches!(one_primary_per_term(&by_term), Verdict::Passed(_)));
        let split =
            format!("{log}\n2026-01-01T00:00:03.000Z node 2: role=primary term=3 leader=2 at=4.0");
        let Verdict::Failed(why) = one_primary_per_term(&primaries_by_term(&split)) else {
            panic!("two primaries in a term passed")
        };
        assert!(why.contains("term 3: nodes {2, 3}"), "{why}");
    }
}
