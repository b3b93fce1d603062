//! Who may call what (C13), on the client port: the op's rule from the protocol's op table
//! (`Op::rule`: the roles that may call it, what binds the caller to its parameters, the
//! session it needs) applied to the caller's identity (`base/auth.rs`).

use xce_proto::wire::{roles, Bound, Op, SessionRole};

use crate::base::auth::Identity;

/// The bit of `who`'s role in the op table's [`roles`].
pub(super) fn role_bit(who: &Identity) -> u8 {
    match who {
        Identity::Admin => roles::ADMIN,
        Identity::Scheduler => roles::SCHEDULER,
        Identity::Worker(_) => roles::WORKER,
        Identity::User(_) => roles::USER,
        Identity::Anonymous => roles::ANONYMOUS,
    }
}

/// The part of a job an authorization looks at.
pub(super) struct JobFacts {
    pub user: String,
    pub exec_host: String,
}

/// Whether `who` may call `op`: `Err(why)` if not. `job` looks a job up in the applied state
/// (only bound ops ask). The role comes from the op's rule; admin is never bound.
pub(super) fn check(
    who: &Identity,
    op: &Op,
    job: impl Fn(u64) -> Option<JobFacts>,
) -> Result<(), String> {
    let rule = op.rule();
    if rule.roles & role_bit(who) == 0 {
        return Err(format!("{} is not allowed to {}", who, rule.name));
    }
    let refuse = |why: String| Err(why);
    match (rule.bound, who) {
        (Bound::No, _) | (_, Identity::Admin) => Ok(()),
        (Bound::SubmitAsSelf, Identity::User(u)) => match op {
            // No user named: the job is the caller's (the server fills its name in).
            Op::JobSubmit(s) if s.user == *u || s.user.is_empty() => Ok(()),
            Op::JobSubmit(s) => refuse(format!("user {u} may not submit as user {:?}", s.user)),
            _ => Ok(()),
        },
        (Bound::OwnJob, Identity::User(u)) => {
            let id = job_of(op);
            match id.and_then(&job) {
                Some(j) if j.user != *u => refuse(format!(
                    "job {} belongs to user {:?}, not to {u}",
                    id.unwrap_or(0),
                    j.user
                )),
                // Its own job, or no such job (the op itself answers ENOENT).
                _ => Ok(()),
            }
        }
        (Bound::OwnHost, Identity::Worker(h)) => match host_of(op) {
            Some(oh) if oh != h => refuse(format!("worker of {h} may not report for host {oh}")),
            _ => Ok(()),
        },
        (Bound::JobOnOwnHost, Identity::Worker(h)) => {
            let id = job_of(op);
            match id.and_then(&job) {
                Some(j) if j.exec_host != *h => refuse(format!(
                    "job {} runs on {:?}, not on {h}",
                    id.unwrap_or(0),
                    j.exec_host
                )),
                _ => Ok(()),
            }
        }
        (Bound::JoinAsSelf, who) => {
            let Op::Join(j) = op else { return Ok(()) };
            let ok = match who {
                Identity::Worker(h) => j.role == SessionRole::Worker && j.host == *h,
                Identity::Scheduler => j.role == SessionRole::Scheduler,
                Identity::User(_) => {
                    matches!(j.role, SessionRole::Client | SessionRole::ApiServer)
                }
                _ => false,
            };
            if ok {
                Ok(())
            } else {
                refuse(format!(
                    "{who} may not join as {:?} of {:?}",
                    j.role, j.host
                ))
            }
        }
        _ => Ok(()),
    }
}

/// The job an op names, if any.
fn job_of(op: &Op) -> Option<u64> {
    match op {
        Op::JobCtrl { job_id, .. }
        | Op::UpdateJusage { job_id, .. }
        | Op::JobInfo { job_id }
        | Op::SetPendReason { job_id, .. }
        | Op::ClearReason { job_id }
        | Op::JobDispatch { job_id, .. } => Some(*job_id),
        Op::Notify(n) => Some(n.job_id),
        _ => None,
    }
}

/// The host an op names, if any.
fn host_of(op: &Op) -> Option<&str> {
    match op {
        Op::Heartbeat { host } | Op::UpdateResvals { host, .. } => Some(host),
        _ => None,
    }
}

/// Per-connection rule for ops outside the table's bounds: a session role mismatch (protocol.md
/// "Sessions").
pub(super) fn session_ok(op: &Op, joined: Option<SessionRole>) -> bool {
    match op.rule().session {
        None => true,
        Some(need) => joined == Some(need),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xce_proto::wire;

    /// The controller bounds a token by the protocol's bound, before any work.
    #[test]
    fn the_token_bound_is_the_protocols() {
        assert_eq!(crate::base::auth::MAX_TOKEN_LEN, wire::MAX_AUTH_TOKEN_LEN);
    }

    #[test]
    fn users_and_workers_are_bound() {
        let alice = Identity::User("alice".into());
        let w1 = Identity::Worker("h1".into());
        let job = |id: u64| {
            (id == 7).then(|| JobFacts {
                user: "bob".into(),
                exec_host: "h2".into(),
            })
        };
        let kill = Op::JobCtrl {
            job_id: 7,
            action: wire::JobAction::Kill,
        };
        assert!(check(&alice, &kill, job).is_err());
        assert!(check(&Identity::User("bob".into()), &kill, job).is_ok());
        assert!(check(&Identity::Admin, &kill, job).is_ok());
        assert!(check(&Identity::Scheduler, &kill, job).is_err());
        let hb = |h: &str| Op::Heartbeat { host: h.into() };
        assert!(check(&w1, &hb("h1"), job).is_ok());
        assert!(check(&w1, &hb("h2"), job).is_err());
        let notify = Op::Notify(wire::Notify {
            kind: wire::NotifyKind::JobFinish,
            job_id: 7,
            exit_code: 0,
        });
        assert!(check(&w1, &notify, job).is_err());
        assert!(check(&Identity::Worker("h2".into()), &notify, job).is_ok());
        let q = Op::QueueCtrl {
            queue: "normal".into(),
            action: wire::QueueAction::Close,
        };
        for who in [&alice, &w1, &Identity::Scheduler, &Identity::Anonymous] {
            assert!(check(who, &q, job).is_err());
        }
        assert!(check(&Identity::Anonymous, &Op::ResList, job).is_err());
        assert!(check(&Identity::Anonymous, &Op::Nop, job).is_ok());
    }
}
