//! F4: the one mapping from an attempt's outcome to what the retry loop does next.
//!
//! Pure: no I/O, no clock. The table test below is the contract of failover.md's status table.

use crate::error::{
    Error, E_XCE_DUP_JOB, E_XCE_NOMASTER, E_XCE_NOSPACE, E_XCE_NOT_READY, E_XCE_REDIRECT,
    E_XCE_STANDBY, E_XCE_UNKNOWN,
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

/// Classifies one attempt. `may_have_been_applied`: an earlier send of the same call left and
/// its outcome is unknown (no reply came back), so the controller may have applied it (F16);
/// a send that was answered with any status was not applied. `is_write` says whether the op
/// mutates (failover.md, "Op categories").
pub fn classify(
    outcome: AttemptOutcome,
    may_have_been_applied: bool,
    is_write: bool,
) -> Classification {
    match outcome {
        AttemptOutcome::Status(s) => classify_status(s, may_have_been_applied, is_write),
        AttemptOutcome::Transport(e) => classify_transport(e),
    }
}

// Not inlined: inlined into the loop, the optimiser tested the status bits of an outcome before
// its variant, a branch on the (unset) payload of a `Transport` outcome that valgrind reports
// as a use of uninitialised memory (harmless, but it would hide a real report).
#[inline(never)]
fn classify_status(status: i32, may_have_been_applied: bool, is_write: bool) -> Classification {
    if status >= 0 {
        return Classification::Success;
    }
    // i32::MIN has no positive counterpart; it falls through to Terminal.
    match status.checked_neg().unwrap_or(0) {
        E_XCE_REDIRECT | E_XCE_STANDBY => Classification::RetryNow,
        E_XCE_NOMASTER | E_XCE_NOT_READY => Classification::RetryBackoff,
        // F19 (amended): placed in a log, not confirmed — an election is likely on. The write
        // is re-sent with its request id after a backoff; its outcome is unknown meanwhile.
        E_XCE_UNKNOWN => Classification::RetryBackoff,
        // F16: a re-sent write that finds the effect of an earlier send whose outcome was
        // unknown. After sends that were answered (a redirect, say) it is a genuine duplicate.
        E_XCE_DUP_JOB | libc::EEXIST if is_write && may_have_been_applied => {
            Classification::Success
        }
        // C24: the primary's quota is reached; every master would say the same.
        E_XCE_NOSPACE => Classification::Terminal,
        _ => Classification::Terminal,
    }
}

fn classify_transport(e: Error) -> Classification {
    if is_interrupt(e) || is_deterministic(e) {
        // F13, F20: the caller asked the op to stop; never retried.
        return Classification::Terminal;
    }
    Classification::RetryNow
}

/// Failures that would recur on every master (issue 13): a reply larger than this client
/// accepts is as large from any controller. Never a failover, never "cluster not ready".
///
/// A certificate or TLS configuration problem too (C13, issue 19): a refused mutual-TLS
/// handshake, an unknown CA, a plaintext client meeting a TLS port are the same on every
/// retry; retrying them for the whole budget only hides the cause.
pub fn is_deterministic(e: Error) -> bool {
    match e {
        Error::TooBig => true,
        Error::Tls(cause) => cause.is_deterministic(),
        _ => false,
    }
}

/// F13, F20: the errors of a call that must stop now ([`Error::stops_the_call`]).
pub fn is_interrupt(e: Error) -> bool {
    e.stops_the_call()
}

/// Statuses by which a controller says "I am not the primary" (redirect, standby, no master,
/// not ready), or "I could not confirm it as primary" (unknown outcome). Seeing any of them
/// during a call makes budget exhaustion report `E_XCE_NOT_READY` rather than a transport
/// error (F7).
pub fn is_no_primary_status(status: i32) -> bool {
    matches!(
        status.checked_neg().unwrap_or(0),
        E_XCE_REDIRECT | E_XCE_STANDBY | E_XCE_NOMASTER | E_XCE_NOT_READY | E_XCE_UNKNOWN
    )
}

/// F19 (amended): an answer that leaves the outcome of the send it answers unknown: the
/// controller placed it in its log and could not confirm it. Every other status says the send
/// was not applied (or was: success).
pub fn leaves_outcome_unknown(status: i32) -> bool {
    status == -E_XCE_UNKNOWN
}

#[cfg(test)]
mod tests {
    use super::Classification::*;
    use super::*;
    use crate::error::{TlsCause, E_XCE_AUTH, E_XCE_INTERNAL, E_XCE_PROTO, E_XCE_TLS};

    const fn s(code: i32) -> AttemptOutcome {
        AttemptOutcome::Status(code)
    }
    const fn t(e: Error) -> AttemptOutcome {
        AttemptOutcome::Transport(e)
    }
    const fn tls(c: TlsCause) -> AttemptOutcome {
        t(Error::Tls(c))
    }

    /// failover.md's status table, row by row, as data: (outcome, an earlier send may have
    /// been applied, is_write, expected). [`status_table`] checks [`classify`] against it.
    const STATUS_TABLE: &[(AttemptOutcome, bool, bool, Classification)] = &[
        // done
        (s(0), false, false, Success),
        (s(0), true, true, Success),
        (s(17), false, false, Success), // a positive count
        // standby answers
        (s(-E_XCE_REDIRECT), false, false, RetryNow),
        (s(-E_XCE_REDIRECT), true, true, RetryNow),
        (s(-E_XCE_STANDBY), false, true, RetryNow),
        (s(-E_XCE_NOMASTER), false, false, RetryBackoff),
        (s(-E_XCE_NOMASTER), true, true, RetryBackoff),
        (s(-E_XCE_NOT_READY), false, false, RetryBackoff),
        (s(-E_XCE_NOT_READY), true, true, RetryBackoff),
        // F19 (amended): placed in the log, not confirmed: backoff, re-send the same id
        (s(-E_XCE_UNKNOWN), false, true, RetryBackoff),
        (s(-E_XCE_UNKNOWN), true, true, RetryBackoff),
        (s(-E_XCE_UNKNOWN), false, false, RetryBackoff),
        // F16: DUP is the earlier send's success only when that send's outcome is unknown;
        // after answered sends (e.g. a redirect) it is a genuine duplicate. EEXIST alike.
        (s(-E_XCE_DUP_JOB), true, true, Success),
        (s(-E_XCE_DUP_JOB), false, true, Terminal),
        (s(-libc::EEXIST), true, true, Success),
        (s(-libc::EEXIST), false, true, Terminal),
        (s(-E_XCE_DUP_JOB), true, false, Terminal), // a read never "was applied"
        // transport failures
        (t(Error::Errno(libc::ECONNREFUSED)), false, false, RetryNow),
        (t(Error::Errno(libc::ECONNRESET)), true, true, RetryNow),
        (t(Error::Errno(libc::EPIPE)), false, true, RetryNow),
        (t(Error::Errno(libc::ETIMEDOUT)), false, false, RetryNow),
        (t(Error::Errno(libc::EHOSTUNREACH)), false, false, RetryNow),
        (t(Error::Errno(libc::ENETUNREACH)), false, false, RetryNow),
        // a certificate problem is the same on every master: terminal, E_XCE_TLS (C13)
        (tls(TlsCause::UnknownCa), false, false, Terminal),
        (tls(TlsCause::RefusedByPeer), true, true, Terminal),
        (tls(TlsCause::PeerSpeaksTls), false, false, Terminal),
        (tls(TlsCause::Unspecified), false, false, RetryNow),
        // undecodable replies count as transport
        (t(Error::Proto), false, false, RetryNow),
        (t(Error::Proto), true, true, RetryNow),
        // the caller stops the call: woken, cancelled, context stopped
        (t(Error::Errno(libc::EINTR)), false, false, Terminal),
        (t(Error::Errno(libc::ECANCELED)), true, true, Terminal),
        (t(Error::Closed), false, true, Terminal),
        // a reply too large for this client (or one the controller cannot split, sent as a
        // status): the same on every master, never a failover
        (t(Error::TooBig), false, false, Terminal),
        (s(-crate::error::E_XCE_TOOBIG), false, false, Terminal),
        // C24: a primary past its storage quota refuses new work: final, on a re-send too
        (s(-E_XCE_NOSPACE), false, true, Terminal),
        (s(-E_XCE_NOSPACE), true, true, Terminal),
        // C19: the CORRUPT alarm is the same on every controller: never a failover.
        (s(-crate::error::E_XCE_CORRUPT), true, true, Terminal),
        // a paged listing's cursor unknown to this controller: the listing starts over
        (s(-libc::ESTALE), false, false, Terminal),
        // anything else a controller says is final
        (s(-libc::EINVAL), false, false, Terminal),
        (s(-libc::ENOENT), true, false, Terminal),
        (s(-libc::EPERM), false, true, Terminal),
        (s(-libc::EACCES), false, true, Terminal),
        (s(-E_XCE_AUTH), true, true, Terminal),
        (s(-E_XCE_PROTO), false, false, Terminal), // PROTO sent as a status
        (s(-E_XCE_TLS), false, false, Terminal),
        (s(-E_XCE_INTERNAL), false, false, Terminal),
        (s(-libc::ECONNREFUSED), false, false, Terminal), // an errno *status* is not transport
        (s(i32::MIN), false, false, Terminal),
    ];

    /// F4: the classification of every row of failover.md's table ([`STATUS_TABLE`]).
    #[test]
    fn status_table() {
        for (i, &(outcome, applied, is_write, want)) in STATUS_TABLE.iter().enumerate() {
            assert_eq!(
                classify(outcome, applied, is_write),
                want,
                "row {i}: {outcome:?} may_have_been_applied={applied} write={is_write}"
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
            E_XCE_UNKNOWN,
        ] {
            assert!(is_no_primary_status(-code));
            for applied in [false, true] {
                for w in [false, true] {
                    assert_ne!(classify(s(-code), applied, w), Success);
                }
            }
        }
        assert!(!is_no_primary_status(0));
        assert!(!is_no_primary_status(-libc::EINVAL));
        assert!(!is_no_primary_status(-E_XCE_DUP_JOB));
    }

    /// F19 (amended): only the unknown-outcome status leaves a send's outcome unknown.
    #[test]
    fn only_unknown_leaves_the_outcome_unknown() {
        assert!(leaves_outcome_unknown(-E_XCE_UNKNOWN));
        for code in [
            0,
            -E_XCE_NOT_READY,
            -E_XCE_NOMASTER,
            -E_XCE_STANDBY,
            -E_XCE_DUP_JOB,
        ] {
            assert!(!leaves_outcome_unknown(code), "{code}");
        }
    }
}
