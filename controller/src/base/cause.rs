//! Issue 36: why a connection failed, named for an operator. One classification of an I/O
//! error — of a TCP connect, a name lookup, a TLS handshake on either side — that `member add`
//! (the primary dialling a new node's raft port), `status` and the commands print, with the
//! fix where there is one, instead of one errno for every cause ("No route to host" for an
//! unknown CA, a wrong id, nothing listening and a bad name alike).

use std::io;

/// Why dialling a node failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Cause {
    /// ECONNREFUSED: the host answered, nothing listens on that port.
    #[error(
        "nothing listens there (connection refused): a wrong port, or the node is not started"
    )]
    NoListener,
    /// The name did not resolve.
    #[error("the host name does not resolve ({0}): check the name (DNS, /etc/hosts)")]
    Dns(String),
    /// No answer in time: a host that drops packets, a firewall, a wrong address.
    #[error("no answer within the timeout: a wrong host, a firewall, or the node is stopped")]
    Timeout,
    /// The host or network is unreachable.
    #[error("unreachable ({0}): a wrong address, or no route to it")]
    Unreachable(String),
    /// Its certificate is not signed by the CA this side trusts.
    #[error("TLS: its certificate is not signed by the CA this side trusts (unknown CA): a certificate from another CA?")]
    UnknownCa,
    /// Its certificate does not name what was dialled.
    #[error("TLS: its certificate does not name {0} (name mismatch): another node's certificate, or the wrong id or host?")]
    NameMismatch(String),
    /// Its certificate has expired (or is not valid yet).
    #[error("TLS: its certificate has expired or is not valid yet (check the clocks)")]
    Expired,
    /// The other side refused this side's certificate (a TLS alert).
    #[error("TLS: it refused this side's certificate ({0}): it trusts another CA, or wants a certificate")]
    RefusedUs(String),
    /// It does not speak TLS (or speaks it where plaintext was expected).
    #[error("TLS: it does not speak TLS as this side does ({0})")]
    NotTls(String),
    /// Anything else, in the system's words.
    #[error("{0}")]
    Other(String),
}

impl Cause {
    /// The cause of an I/O error from a connect, a lookup or a TLS handshake. `name`: what was
    /// dialled, for a name mismatch.
    pub fn of_io(e: &io::Error, name: &str) -> Cause {
        if let Some(t) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            return Cause::of_tls(t, name);
        }
        match e.kind() {
            io::ErrorKind::ConnectionRefused => return Cause::NoListener,
            io::ErrorKind::TimedOut => return Cause::Timeout,
            _ => {}
        }
        match e.raw_os_error() {
            Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EADDRNOTAVAIL) => {
                return Cause::Unreachable(e.to_string())
            }
            Some(libc::ECONNREFUSED) => return Cause::NoListener,
            Some(libc::ETIMEDOUT) => return Cause::Timeout,
            _ => {}
        }
        let t = e.to_string();
        if t.contains("lookup address") || t.contains("Name or service not known") {
            Cause::Dns(t)
        } else {
            Cause::Other(t)
        }
    }

    fn of_tls(t: &rustls::Error, name: &str) -> Cause {
        use rustls::{AlertDescription as A, CertificateError as C, Error as E};
        match t {
            E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => Cause::UnknownCa,
            E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
                Cause::NameMismatch(name.to_string())
            }
            E::InvalidCertificate(
                C::Expired
                | C::ExpiredContext { .. }
                | C::NotValidYet
                | C::NotValidYetContext { .. },
            ) => Cause::Expired,
            E::AlertReceived(
                a @ (A::UnknownCA
                | A::BadCertificate
                | A::CertificateRequired
                | A::CertificateUnknown
                | A::AccessDenied
                | A::HandshakeFailure),
            ) => Cause::RefusedUs(format!("{a:?}")),
            E::InvalidMessage(_) | E::InappropriateMessage { .. } => Cause::NotTls(t.to_string()),
            other => Cause::Other(format!("TLS: {other}")),
        }
    }

    /// The status a refusal for this cause carries (the reason travels in the reply's detail).
    pub fn status(&self) -> i32 {
        -match self {
            Cause::NoListener => libc::ECONNREFUSED,
            Cause::Dns(_) => xce_proto::error::E_XCE_LOOKUP,
            Cause::Timeout => libc::ETIMEDOUT,
            Cause::Unreachable(_) => libc::EHOSTUNREACH,
            Cause::UnknownCa
            | Cause::NameMismatch(_)
            | Cause::Expired
            | Cause::RefusedUs(_)
            | Cause::NotTls(_) => xce_proto::error::E_XCE_TLS,
            Cause::Other(_) => libc::EHOSTUNREACH,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_is_named() {
        let tls = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
        use rustls::CertificateError as C;
        let cases: [(io::Error, Cause); 6] = [
            (
                io::Error::from_raw_os_error(libc::ECONNREFUSED),
                Cause::NoListener,
            ),
            (
                io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
                Cause::Timeout,
            ),
            (
                tls(rustls::Error::InvalidCertificate(C::UnknownIssuer)),
                Cause::UnknownCa,
            ),
            (
                tls(rustls::Error::InvalidCertificate(C::NotValidForName)),
                Cause::NameMismatch("xce-node-4".into()),
            ),
            (
                tls(rustls::Error::AlertReceived(
                    rustls::AlertDescription::UnknownCA,
                )),
                Cause::RefusedUs("UnknownCA".into()),
            ),
            (
                io::Error::other("failed to lookup address information: Name or service not known"),
                Cause::Dns(
                    "failed to lookup address information: Name or service not known".into(),
                ),
            ),
        ];
        for (e, want) in cases {
            assert_eq!(Cause::of_io(&e, "xce-node-4"), want, "{e}");
        }
        assert_eq!(Cause::UnknownCa.status(), -xce_proto::error::E_XCE_TLS);
        assert!(Cause::NoListener.to_string().contains("connection refused"));
    }
}
