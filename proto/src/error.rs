//! Status codes of the protocol (protocol.md) and the library's error type.
//!
//! On the wire and at the C boundary a status is an `i32`: `>= 0` success, `< 0` a negative
//! Linux errno or a negative `E_XCE_*` value. Inside Rust the same information is an [`Error`].

use std::sync::OnceLock;

/// Declares every `E_XCE_*` code once, as a row `CONST = code => Variant, text;`: its
/// constant, its [`Error`] variant (a row `Variant(Field = default)` is a variant with a
/// field, made with `default` from a bare code) and its text. From the rows come the
/// constants, [`XCE_CODES`], the `E_XCE_*` variants of [`Error`], [`Error::code`],
/// [`Error::from_code`] and the texts of [`strerror`]: a new code is a new row, and the
/// compiler keeps the mappings exhaustive.
macro_rules! xce_codes {
    ($( $(#[$doc:meta])* $name:ident = $code:literal
        => $variant:ident $(($field:ty = $default:expr))?, $text:expr; )*) => {
        $( $(#[$doc])* pub const $name: i32 = $code; )*

        /// Every `E_XCE_*` code with its name, for tables and tests.
        pub const XCE_CODES: [(i32, &str); 17] = [$(($name, stringify!($name))),*];

        /// A failed status, typed. `Errno` holds a positive Linux errno value.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Error {
            $( #[doc = concat!("[`", stringify!($name), "`]")] $variant $(($field))?, )*
            /// A Linux errno value (positive).
            Errno(i32),
        }

        impl Error {
            /// The positive code: an errno value or an `E_XCE_*` value.
            pub fn code(self) -> i32 {
                match self {
                    // A handshake that outlived the connect timeout is a timeout like any
                    // other (F8: a hung controller is a transport failure); only its text
                    // says it was TLS.
                    Error::Tls(TlsCause::HandshakeTimeout) => libc::ETIMEDOUT,
                    $( Error::$variant { .. } => $name, )*
                    Error::Errno(e) => e,
                }
            }

            /// The error a code stands for, taking either sign. `0` (success) has none.
            pub fn from_code(code: i32) -> Option<Error> {
                let c = code.checked_abs().unwrap_or(i32::MAX);
                Some(match c {
                    0 => return None,
                    $( $name => Error::$variant $(($default))?, )*
                    e => Error::Errno(e),
                })
            }
        }

        /// The text of an `E_XCE_*` code; `None` for any other.
        fn xce_text(c: i32) -> Option<&'static str> {
            match c {
                $( $name => Some($text), )*
                _ => None,
            }
        }
    };
}

xce_codes! {
    /// Standby; the primary's address is attached.
    E_XCE_REDIRECT = 2001 => Redirect, "standby: primary is elsewhere";
    /// Standby; no primary known.
    E_XCE_NOMASTER = 2002 => NoMaster, "standby: no primary known";
    /// Initialising or electing; also the client's "cluster not ready".
    E_XCE_NOT_READY = 2003 => NotReady, "cluster not ready";
    /// Primary-only op sent to a standby (address attached when known).
    E_XCE_STANDBY = 2004 => Standby, "standby: operation needs the primary";
    /// Job id already exists.
    E_XCE_DUP_JOB = 2005 => DupJob, "job id already exists";
    /// Malformed, oversized or unexpected message; version mismatch.
    E_XCE_PROTO = 2006 => Proto, "protocol error: malformed, oversized or unexpected message";
    /// Authentication failed, or the op needs a joined session.
    E_XCE_AUTH = 2007 => Auth, "not authorised: authentication failed or no joined session";
    /// TLS handshake or certificate verification failed. [`Error::Tls`] carries what went
    /// wrong; its text names the cause (last error, log lines).
    E_XCE_TLS = 2008 => Tls(TlsCause = TlsCause::Unspecified), TlsCause::Unspecified.text();
    /// A library bug caught at the C boundary (a panic).
    E_XCE_INTERNAL = 2009 => Internal, "internal library error";
    /// The context is stopped (or being stopped): the call was not made (F20).
    E_XCE_CLOSED = 2010 => Closed, "context is stopped";
    /// A controller's host name could not be resolved (F23): getaddrinfo failed for a master's
    /// or a hint's name (its own cause is in `transport::resolve::LookupFailure`); a lookup that
    /// runs out of time is `ETIMEDOUT`. Client-side only: never on the wire.
    E_XCE_LOOKUP = 2011 => Lookup, "name lookup failed";
    /// A reply too large for one frame that the controller cannot split (e.g. one job bigger
    /// than the frame limit), or a listing too large for the old unpaged op. Deterministic: the
    /// same on every master, so never a reason to fail over.
    E_XCE_TOOBIG = 2012 => TooBig, "reply too large";
    /// A controller placed the write in its log but could not confirm it (commit timeout,
    /// leadership lost): the outcome is unknown (F19 amended). The library re-sends it with the
    /// same request id; when the budget ends first, the call fails with `maybe_applied = 1`.
    E_XCE_UNKNOWN = 2013 => Unknown, "outcome unknown: placed in the log, not confirmed";
    /// The context's outbox of job notifications and heartbeats is full (F12 amended): the
    /// notification was not accepted. Client-side only.
    E_XCE_OUTBOX_FULL = 2014 => OutboxFull, "notification outbox full";
    /// A stop was requested on the context (`xcecli_request_stop`, F27, e.g. from a signal
    /// handler): the call was ended, or not made. Client-side only: never on the wire.
    E_XCE_STOP_REQUESTED = 2015 => StopRequested, "stop requested";
    /// C24: the primary refused new work because its data directory passed its quota (or its
    /// disk's free space its floor): the NOSPACE alarm is raised. Reads, kills, notifications and
    /// heartbeats go on; an operator frees space or raises the quota. The same on every master,
    /// so never a reason to fail over (terminal for the call).
    E_XCE_NOSPACE = 2016 => NoSpace,
        "no space: the controller's storage quota is reached (new work refused)";
    /// C19: the cluster's CORRUPT alarm is raised — its members' states differ where no log id can
    /// tell which is the history — and it refuses writes until an operator repairs it (reads go
    /// on). The same on every master: terminal for the call, never a reason to fail over.
    E_XCE_CORRUPT = 2017 => Corrupt,
        "the cluster's replicas disagree (CORRUPT alarm): writes refused until repaired";
}

/// `[(libc::EPERM, "EPERM"), …]`: each errno with its name, from the names.
macro_rules! errno_names {
    ($($e:ident)*) => {
        [$((libc::$e, stringify!($e))),*]
    };
}

/// The errno names a controller or the library sends or returns, for [`status_name`].
const ERRNO_NAMES: [(i32, &str); 31] = errno_names! {
    EPERM ENOENT EINTR EIO EBADF EAGAIN ENOMEM EACCES EBUSY EEXIST EINVAL ENOSPC EPIPE ERANGE
    ENOSYS ESTALE EPROTO EMSGSIZE EADDRINUSE EADDRNOTAVAIL ENETUNREACH ECONNABORTED ECONNRESET
    ENOTCONN ETIMEDOUT ECONNREFUSED EHOSTDOWN EHOSTUNREACH EALREADY ECANCELED EOVERFLOW
};

/// The name of a status or code, either sign: `E_XCE_AUTH` for -2007, `EINVAL` for -22, `E22`
/// for an errno without a name here. What a tool prints beside every number it shows.
pub fn status_name(code: i32) -> String {
    let c = code.checked_abs().unwrap_or(i32::MAX);
    if c == 0 {
        return "OK".into();
    }
    XCE_CODES
        .iter()
        .chain(ERRNO_NAMES.iter())
        .find(|(n, _)| *n == c)
        .map_or_else(|| format!("E{c}"), |(_, name)| (*name).to_string())
}

/// `status -2007 (E_XCE_AUTH: not authorised: ...)`: a status as tools print it, its number
/// with its name and text.
pub fn status_text(status: i32) -> String {
    format!(
        "status {status} ({}: {})",
        status_name(status),
        strerror(status)
    )
}

/// Why a TLS connection failed. The status stays `E_XCE_TLS` (the handshake timeout excepted,
/// see [`Error::code`]); the cause travels in the text of the last error and of the log, as
/// rustls-ffi names its certificate errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlsCause {
    /// The controller's chain does not lead to the configured CA.
    UnknownCa,
    /// The controller's certificate is past its end of validity.
    Expired,
    /// The controller's certificate is not valid yet (a clock, or a certificate from the future).
    NotYetValid,
    /// The certificate is valid but not for the host name or address the client dialled.
    NameMismatch,
    /// Any other certificate defect: bad signature or encoding, wrong purpose, revoked.
    BadCertificate,
    /// The controller aborted the handshake with an alert: typically it wants a client
    /// certificate, or does not trust the one it got.
    RefusedByPeer,
    /// The peer does not speak TLS 1.3 (plaintext, another protocol, an older TLS).
    NotTls,
    /// The handshake did not finish within the connect timeout.
    HandshakeTimeout,
    /// The local TLS files: a CA file without certificates, an unusable certificate or key.
    LocalConfig,
    /// The code alone (`E_XCE_TLS` from a status), with no cause known.
    Unspecified,
    /// The controller answered a plaintext client with TLS: the client has no TLS configured.
    PeerSpeaksTls,
}

impl TlsCause {
    /// Every cause, for tables and tests.
    pub const ALL: [TlsCause; 11] = [
        TlsCause::UnknownCa,
        TlsCause::Expired,
        TlsCause::NotYetValid,
        TlsCause::NameMismatch,
        TlsCause::BadCertificate,
        TlsCause::RefusedByPeer,
        TlsCause::NotTls,
        TlsCause::HandshakeTimeout,
        TlsCause::LocalConfig,
        TlsCause::Unspecified,
        TlsCause::PeerSpeaksTls,
    ];

    /// The text of the cause: what a user reads in the last error and the log.
    pub fn text(self) -> &'static str {
        match self {
            TlsCause::UnknownCa => {
                "TLS: the controller's certificate is not signed by the configured CA (unknown CA)"
            }
            TlsCause::Expired => "TLS: the controller's certificate has expired",
            TlsCause::NotYetValid => {
                "TLS: the controller's certificate is not valid yet (check the clocks)"
            }
            TlsCause::NameMismatch => {
                "TLS: the controller's certificate does not match the host name dialled"
            }
            TlsCause::BadCertificate => "TLS: the controller's certificate is invalid",
            TlsCause::RefusedByPeer => {
                "TLS: the controller refused the handshake (client certificate missing or not trusted?)"
            }
            TlsCause::NotTls => "TLS: the peer does not speak TLS 1.3",
            TlsCause::HandshakeTimeout => "TLS: handshake timed out",
            TlsCause::LocalConfig => {
                "TLS: unusable local CA, certificate or key file"
            }
            TlsCause::Unspecified => "TLS handshake or certificate verification failed",
            TlsCause::PeerSpeaksTls => {
                "TLS: the controller speaks TLS and this client is configured without it (set the CA file)"
            }
        }
    }
}

impl TlsCause {
    /// Whether the failure is the same on every attempt and every master: a certificate or
    /// configuration problem, not a network one. The failover loop stops on these at once
    /// (E_XCE_TLS) instead of retrying for its whole budget.
    pub fn is_deterministic(self) -> bool {
        !matches!(self, TlsCause::HandshakeTimeout | TlsCause::Unspecified)
    }
}

impl std::fmt::Display for TlsCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

impl Error {
    /// F13, F20: whether this error ends a call because its caller asked — woken (`EINTR`),
    /// cancelled through its call handle (`ECANCELED`), its context stopped (`E_XCE_CLOSED`) —
    /// rather than describing a peer. Such an error is never retried, never blamed on a master.
    pub fn stops_the_call(self) -> bool {
        matches!(
            self,
            Error::Closed
                | Error::StopRequested
                | Error::Errno(libc::EINTR)
                | Error::Errno(libc::ECANCELED)
        )
    }

    /// The negative status as sent on the wire and returned through the C API.
    pub fn status(self) -> i32 {
        -self.code()
    }

    /// A status from the wire: `>= 0` is success, `< 0` an error.
    pub fn from_status(status: i32) -> Result<i32, Error> {
        if status >= 0 {
            Ok(status)
        } else {
            Err(Error::from_code(status).unwrap_or(Error::Internal))
        }
    }

    /// The typed error of an I/O failure (its errno when it has one).
    pub fn from_io(e: &std::io::Error) -> Error {
        use std::io::ErrorKind as K;
        if let Some(code) = e.raw_os_error() {
            return Error::Errno(code);
        }
        Error::Errno(match e.kind() {
            K::ConnectionRefused => libc::ECONNREFUSED,
            K::ConnectionReset => libc::ECONNRESET,
            K::ConnectionAborted => libc::ECONNABORTED,
            K::BrokenPipe => libc::EPIPE,
            K::TimedOut | K::WouldBlock => libc::ETIMEDOUT,
            K::UnexpectedEof => libc::ECONNRESET,
            K::Interrupted => libc::EINTR,
            K::AddrNotAvailable => libc::EADDRNOTAVAIL,
            K::InvalidInput => libc::EINVAL,
            K::InvalidData => return Error::Proto,
            _ => libc::EIO,
        })
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::from_io(&e)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match *self {
            Error::Tls(cause) => cause.text(),
            Error::Errno(e) => errno_text(e),
            e => strerror(e.code()),
        })
    }
}

impl std::error::Error for Error {}

/// Text of any status or code, either sign, as a static string: `E_XCE_*` texts for ours,
/// the C library's text for errno values (`E_XCE_NOT_READY` → "cluster not ready").
pub fn strerror(code: i32) -> &'static str {
    let c = code.checked_abs().unwrap_or(i32::MAX);
    match c {
        0 => "success",
        c => xce_text(c).unwrap_or_else(|| errno_text(c)),
    }
}

/// Highest errno we keep a text for (Linux's are all below this).
const ERRNO_TABLE_LEN: usize = 134;

/// Errno texts, read once from the C library (`strerror_r` is thread-safe, `strerror` is not)
/// and kept for the life of the process so callers get `&'static str`.
fn errno_text(e: i32) -> &'static str {
    static TABLE: OnceLock<Vec<String>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        (0..ERRNO_TABLE_LEN as i32)
            .map(|n| {
                let mut buf = [0 as libc::c_char; 128];
                // SAFETY: buf is writable for its full length; the XSI strerror_r that libc
                // exports writes a NUL-terminated string into it (truncated if needed).
                let rc = unsafe { libc::strerror_r(n, buf.as_mut_ptr(), buf.len()) };
                if rc != 0 {
                    return format!("unknown error {n}");
                }
                // SAFETY: strerror_r succeeded, so buf holds a NUL-terminated string.
                unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    });
    usize::try_from(e)
        .ok()
        .and_then(|i| table.get(i))
        .map(String::as_str)
        .unwrap_or("unknown error")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_the_values_of_protocol_md() {
        let expected = [
            2001, 2002, 2003, 2004, 2005, 2006, 2007, 2008, 2009, 2010, 2011, 2012, 2013, 2014,
            2015, 2016,
        ];
        for ((code, _), want) in XCE_CODES.iter().zip(expected) {
            assert_eq!(*code, want);
        }
    }

    #[test]
    fn every_code_round_trips_through_status() {
        for (code, name) in XCE_CODES {
            let e = Error::from_code(code).unwrap();
            assert_eq!(e.code(), code, "{name}");
            assert_eq!(Error::from_code(-code), Some(e), "{name}");
            assert_eq!(Error::from_status(e.status()), Err(e), "{name}");
            assert_eq!(strerror(code), strerror(-code));
            assert_eq!(e.to_string(), strerror(code), "{name}");
        }
        // A TLS error keeps its code whatever the cause (a handshake timeout is a timeout).
        for cause in TlsCause::ALL {
            let want = if cause == TlsCause::HandshakeTimeout {
                libc::ETIMEDOUT
            } else {
                E_XCE_TLS
            };
            assert_eq!(Error::Tls(cause).code(), want, "{cause:?}");
        }
        assert_eq!(Error::from_status(0), Ok(0));
        assert_eq!(Error::from_status(7), Ok(7));
        assert_eq!(Error::from_code(0), None);
        assert_eq!(Error::from_code(i32::MIN), Some(Error::Errno(i32::MAX)));
    }

    #[test]
    fn texts() {
        assert_eq!(strerror(-E_XCE_NOT_READY), "cluster not ready");
        assert_eq!(Error::NotReady.to_string(), "cluster not ready");
        assert_eq!(strerror(-libc::ECONNREFUSED), "Connection refused");
        assert_eq!(strerror(libc::EINVAL), "Invalid argument");
        assert_eq!(
            Error::Errno(libc::EINTR).to_string(),
            "Interrupted system call"
        );
        assert_eq!(strerror(-E_XCE_LOOKUP), "name lookup failed");
        assert_eq!(Error::Lookup.status(), -2011);
        assert_eq!(strerror(0), "success");
        assert_eq!(strerror(99_999), "unknown error");
        assert_eq!(strerror(i32::MIN), "unknown error");
    }

    #[test]
    fn every_status_has_a_name() {
        assert_eq!(status_name(-E_XCE_AUTH), "E_XCE_AUTH");
        assert_eq!(status_name(E_XCE_NOSPACE), "E_XCE_NOSPACE");
        assert_eq!(status_name(-libc::EHOSTUNREACH), "EHOSTUNREACH");
        assert_eq!(status_name(-999), "E999");
        assert_eq!(status_name(i32::MIN), format!("E{}", i32::MAX));
        assert_eq!(
            status_text(-2007),
            "status -2007 (E_XCE_AUTH: not authorised: authentication failed or no joined session)"
        );
        for (code, name) in XCE_CODES.iter().chain(ERRNO_NAMES.iter()) {
            assert_eq!(status_name(-code), *name);
        }
    }

    #[test]
    fn every_tls_cause_has_its_own_text() {
        let texts: std::collections::HashSet<_> = TlsCause::ALL
            .iter()
            .map(|c| Error::Tls(*c).to_string())
            .collect();
        assert_eq!(texts.len(), TlsCause::ALL.len());
        assert_eq!(
            Error::Tls(TlsCause::Unspecified).to_string(),
            strerror(E_XCE_TLS)
        );
    }

    #[test]
    fn io_errors_map_to_errno() {
        let e = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(Error::from(e), Error::Errno(libc::ECONNREFUSED));
        let e = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "eof");
        assert_eq!(Error::from(e), Error::Errno(libc::ECONNRESET));
    }
}
