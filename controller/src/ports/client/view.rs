//! The state machine's records in the wire's words: the one place a stored job, host, queue
//! or resource becomes what a reply carries, and a listing's filter becomes the state
//! machine's (`sm/state.rs` knows nothing of the wire).

use std::collections::BTreeMap;

use xce_proto::wire;

use crate::sm::state::{self, Availability, HostRec, JobRec, JobState, QueueRec};

/// The wire's job state of a stored one.
fn state_to_wire(s: JobState) -> wire::JobState {
    match s {
        JobState::Pend => wire::JobState::Pend,
        JobState::Run => wire::JobState::Run,
        JobState::Susp => wire::JobState::Susp,
        JobState::Done => wire::JobState::Done,
        JobState::Exit => wire::JobState::Exit,
    }
}

/// A listing's filter in the state machine's words: each state the wire's mask names, by the
/// state machine's bit; a mask of states this build does not know matches no job, as before.
pub(super) fn filter_from_wire(f: &wire::JobFilter) -> state::JobFilter {
    const ALL: [JobState; 5] = [
        JobState::Pend,
        JobState::Run,
        JobState::Susp,
        JobState::Done,
        JobState::Exit,
    ];
    let mut states = ALL
        .iter()
        .filter(|&&s| f.state_mask & state_to_wire(s).mask_bit() != 0)
        .fold(0, |m, s| m | s.bit());
    if f.state_mask != 0 && states == 0 {
        states = state::JobFilter::NO_STATE;
    }
    state::JobFilter {
        user: f.user.clone(),
        queue: f.queue.clone(),
        states,
        limit: f.limit,
    }
}

pub(super) fn job_to_wire(j: &JobRec) -> wire::Job {
    wire::Job {
        job_id: j.job_id,
        name: j.name.to_string(),
        user: j.user.to_string(),
        queue: j.queue.to_string(),
        command: j.command.to_string(),
        ncpus: j.ncpus,
        mem_mb: j.mem_mb,
        state: state_to_wire(j.state),
        pend_reason: j.pend_reason.to_string(),
        exec_host: j.exec_host.to_string(),
        submit_time: j.submit_time,
        start_time: j.start_time,
        end_time: j.end_time,
        exit_code: j.exit_code,
        usage: wire::Usage {
            cpu_ms: j.cpu_ms,
            mem_kb: j.mem_kb,
        },
    }
}

/// A host with its effective state (C5: `sm/state.rs::State::hosts`).
pub(super) fn host_to_wire(h: &HostRec, a: Availability) -> wire::Host {
    wire::Host {
        name: h.name.clone(),
        state: match a {
            Availability::Closed => wire::HostState::Closed,
            Availability::Unavail => wire::HostState::Unavail,
            Availability::Ok => wire::HostState::Ok,
        },
        ncpus: h.ncpus,
        mem_mb: h.mem_mb,
        attrs: h
            .attrs
            .iter()
            .map(|(k, v)| wire::KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        njobs: h.njobs,
        last_heartbeat: h.last_heartbeat,
    }
}

pub(super) fn resvals_to_wire(r: &BTreeMap<String, String>) -> Vec<wire::ResVal> {
    r.iter()
        .map(|(k, v)| wire::ResVal {
            name: k.clone(),
            value: v.clone(),
        })
        .collect()
}

pub(super) fn resources_to_wire(r: Vec<(String, String, String)>) -> Vec<wire::Resource> {
    r.into_iter()
        .map(|(name, kind, description)| wire::Resource {
            name,
            kind,
            description,
        })
        .collect()
}

pub(super) fn queues_to_wire(q: &BTreeMap<String, QueueRec>) -> Vec<wire::Queue> {
    q.iter()
        .map(|(n, q)| wire::Queue {
            name: n.clone(),
            open: q.open,
            active: q.active,
            priority: q.priority,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire's state bits and the state machine's name the same states, and a mask of
    /// states unknown here still matches nothing (it did when the state machine read the
    /// wire's mask itself).
    #[test]
    fn a_filter_names_the_same_states() {
        for (w, s) in [
            (wire::JobState::Pend, JobState::Pend),
            (wire::JobState::Run, JobState::Run),
            (wire::JobState::Susp, JobState::Susp),
            (wire::JobState::Done, JobState::Done),
            (wire::JobState::Exit, JobState::Exit),
        ] {
            let f = wire::JobFilter {
                state_mask: w.mask_bit(),
                ..Default::default()
            };
            assert_eq!(filter_from_wire(&f).states, s.bit());
        }
        let any = filter_from_wire(&wire::JobFilter::default());
        assert_eq!(any.states, 0);
        let unknown = filter_from_wire(&wire::JobFilter {
            state_mask: 1 << 20,
            ..Default::default()
        });
        assert_eq!(unknown.states & 0x1f, 0);
        assert_ne!(unknown.states, 0);
    }
}
