//! F4: the one mapping from an attempt's outcome to what the retry loop does next.
//!
//! Pure: no I/O, no clock. The table test below is the contract of failover.md's status table.

use crate::error::{
    Error, E_XCE_DUP_JOB, E_XCE_NOMASTER, E_XCE_NOT_READY, E_XCE_REDIRECT, E_XCE_STANDBY,
};

/// What one attempt produced, before any decision is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// A controller answered (or the reconnect hook returned, F10) with this status:
    /// `>= 0` success, `< 0` a negative errno or `-E_XCE_*`.
    Status(i32),
    /// The exchange itself failed: connect, send, receive, reply timeout, or a reply the client
    /// could not decode (failover.md counts the latter as transport).
    Transport(Error),
}

/// The loop's next move (failover.md, status table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Classification {
    /// Done: hand the reply to the caller.
    Success,
    /// Rotate at once (redirect hint first, F5), within the F7 cycle budget.
    RetryNow,
    /// Sleep (or wait for a primary, F18), then rotate; each sleep costs one retry (F6, F7).
    RetryBackoff,
    /// Surface the error unchanged.
    Terminal,
}

/// Classifies one attempt. `attempt` is 0 for the first send of a call and > 0 for a re-send;
/// `is_write` says whether the op mutates (failover.md, "Op categories").
pub fn classify(outcome: AttemptOutcome, attempt: u32, is_write: bool) -> Classification {
    match outcome {
        AttemptOutcome::Status(s) => classify_status(s, attempt, is_write),
        AttemptOutcome::Transport(e) => classify_transport(e),
    }
}

fn classify_status(status: i32, attempt: u32, is_write: bool) -> Classification {
    if status >= 0 {
        return Classification::Success;
    }
    // i32::MIN has no positive counterpart; it falls through to Terminal.
    match status.checked_neg().unwrap_or(0) {
        E_XCE_REDIRECT | E_XCE_STANDBY => Classification::RetryNow,
        E_XCE_NOMASTER | E_XCE_NOT_READY => Classification::RetryBackoff,
        // F16: a re-sent write that finds its own effect was applied by the first send.
        E_XCE_DUP_JOB | libc::EEXIST if is_write && attempt > 0 => Classification::Success,
        _ => Classification::Terminal,
    }
}

fn classify_transport(e: Error) -> Classification {
    if is_interrupt(e) {
        // F13: the caller asked the op to stop; never retried.
        return Classification::Terminal;
    }
    Classification::RetryNow
}

/// F13: the error a woken call returns.
pub fn is_interrupt(e: Error) -> bool {
    e == Error::Errno(libc::EINTR)
}

/// Statuses by which a controller says "I am not the primary" (redirect, standby, no master,
/// not ready). Seeing any of them during a call makes budget exhaustion report
/// `E_XCE_NOT_READY` rather than a transport error (F7).
pub fn is_no_primary_status(status: i32) -> bool {
    matches!(
        status.checked_neg().unwrap_or(0),
        E_XCE_REDIRECT | E_XCE_STANDBY | E_XCE_NOMASTER | E_XCE_NOT_READY
    )
}

#[cfg(test)]
mod tests {
    use super::Classification::*;
    use super::*;
    use crate::error::{E_XCE_AUTH, E_XCE_INTERNAL, E_XCE_PROTO, E_XCE_TLS};

    fn s(code: i32) -> AttemptOutcome {
        AttemptOutcome::Status(code)
    }
    fn t(e: Error) -> AttemptOutcome {
        AttemptOutcome::Transport(e)
    }

    /// failover.md's table, row by row: (outcome, attempt, is_write, expected).
    #[test]
    fn status_table() {
        let table: &[(AttemptOutcome, u32, bool, Classification)] = &[
            // done
            (s(0), 0, false, Success),
            (s(0), 3, true, Success),
            (s(17), 0, false, Success), // a positive count
            // standby answers
            (s(-E_XCE_REDIRECT), 0, false, RetryNow),
            (s(-E_XCE_REDIRECT), 2, true, RetryNow),
            (s(-E_XCE_STANDBY), 0, true, RetryNow),
            (s(-E_XCE_NOMASTER), 0, false, RetryBackoff),
            (s(-E_XCE_NOMASTER), 5, true, RetryBackoff),
            (s(-E_XCE_NOT_READY), 0, false, RetryBackoff),
            (s(-E_XCE_NOT_READY), 1, true, RetryBackoff),
            // both DUP cases, and EEXIST alike
            (s(-E_XCE_DUP_JOB), 1, true, Success),
            (s(-E_XCE_DUP_JOB), 0, true, Terminal),
            (s(-libc::EEXIST), 2, true, Success),
            (s(-libc::EEXIST), 0, true, Terminal),
            (s(-E_XCE_DUP_JOB), 1, false, Terminal), // a read never "was applied"
            // transport failures
            (t(Error::Errno(libc::ECONNREFUSED)), 0, false, RetryNow),
            (t(Error::Errno(libc::ECONNRESET)), 1, true, RetryNow),
            (t(Error::Errno(libc::EPIPE)), 0, true, RetryNow),
            (t(Error::Errno(libc::ETIMEDOUT)), 0, false, RetryNow),
            (t(Error::Errno(libc::EHOSTUNREACH)), 0, false, RetryNow),
            (t(Error::Errno(libc::ENETUNREACH)), 0, false, RetryNow),
            (
                t(Error::Tls(crate::error::TlsCause::UnknownCa)),
                0,
                false,
                RetryNow,
            ),
            // undecodable replies count as transport
            (t(Error::Proto), 0, false, RetryNow),
            (t(Error::Proto), 4, true, RetryNow),
            // a wakeup ends the call
            (t(Error::Errno(libc::EINTR)), 0, false, Terminal),
            // anything else a controller says is final
            (s(-libc::EINVAL), 0, false, Terminal),
            (s(-libc::ENOENT), 1, false, Terminal),
            (s(-libc::EPERM), 0, true, Terminal),
            (s(-libc::EACCES), 0, true, Terminal),
            (s(-E_XCE_AUTH), 2, true, Terminal),
            (s(-E_XCE_PROTO), 0, false, Terminal), // PROTO sent as a status
            (s(-E_XCE_TLS), 0, false, Terminal),
            (s(-E_XCE_INTERNAL), 0, false, Terminal),
            (s(-libc::ECONNREFUSED), 0, false, Terminal), // an errno *status* is not transport
            (s(i32::MIN), 0, false, Terminal),
        ];
        for (i, &(outcome, attempt, is_write, want)) in table.iter().enumerate() {
            assert_eq!(
                classify(outcome, attempt, is_write),
                want,
                "row {i}: {outcome:?} attempt={attempt} write={is_write}"
            );
        }
    }

    #[test]
    fn no_primary_statuses_are_never_success() {
        for code in [
            E_XCE_REDIRECT,
            E_XCE_STANDBY,
            E_XCE_NOMASTER,
            E_XCE_NOT_READY,
        ] {
            assert!(is_no_primary_status(-code));
            for attempt in 0..3 {
                for w in [false, true] {
                    assert_ne!(classify(s(-code), attempt, w), Success);
                }
            }
        }
        assert!(!is_no_primary_status(0));
        assert!(!is_no_primary_status(-libc::EINVAL));
        assert!(!is_no_primary_status(-E_XCE_DUP_JOB));
    }
}
