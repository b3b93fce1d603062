//! TLS 1.3 client configuration (rustls, ring provider), built once per context.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use rustls::{AlertDescription, CertificateError};

use crate::error::{Error, TlsCause};

/// A local file that cannot serve as CA, certificate or key.
const LOCAL: Error = Error::Tls(TlsCause::LocalConfig);

/// Builds the client side: trust only `ca_file`, TLS 1.3 only, and present `cert_file` +
/// `key_file` when both are given (mutual TLS). A missing file is its errno (`ENOENT`); a file
/// that holds no usable certificate or key is `Error::Tls(TlsCause::LocalConfig)`.
pub fn client_config(
    ca_file: &Path,
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
) -> Result<Arc<rustls::ClientConfig>, Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(ca_file)? {
        roots.add(cert).map_err(|_| LOCAL)?;
    }
    if roots.is_empty() {
        return Err(LOCAL);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|_| LOCAL)?
        .with_root_certificates(roots);
    let config = match (cert_file, key_file) {
        (Some(c), Some(k)) => builder
            .with_client_auth_cert(read_certs(c)?, read_key(k)?)
            .map_err(|_| LOCAL)?,
        (None, None) => builder.with_no_client_auth(),
        // Half a client identity is a configuration error, not something to ignore.
        _ => return Err(Error::Errno(libc::EINVAL)),
    };
    let mut config = config;
    // P15: after the handshake the connection's keys go to the library's record layer
    // (`records.rs`); nothing of the handshake changes.
    config.enable_secret_extraction = true;
    Ok(Arc::new(config))
}

fn open(path: &Path) -> Result<BufReader<File>, Error> {
    File::open(path)
        .map(BufReader::new)
        .map_err(|e| Error::from_io(&e))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs: Result<Vec<_>, _> = rustls_pemfile::certs(&mut open(path)?).collect();
    let certs = certs.map_err(|_| LOCAL)?;
    if certs.is_empty() {
        return Err(LOCAL);
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    rustls_pemfile::private_key(&mut open(path)?)
        .map_err(|_| LOCAL)?
        .ok_or(LOCAL)
}

/// The cause of a failed handshake or record, as the user should read it (rustls-ffi names
/// the same certificate errors). Verification failures are the client's own; an alert is the
/// controller's refusal.
pub fn cause_of(e: &rustls::Error) -> TlsCause {
    use rustls::Error as E;
    use CertificateError as C;
    match e {
        E::InvalidCertificate(c) => match c {
            C::UnknownIssuer => TlsCause::UnknownCa,
            C::Expired | C::ExpiredContext { .. } => TlsCause::Expired,
            C::NotValidYet | C::NotValidYetContext { .. } => TlsCause::NotYetValid,
            C::NotValidForName | C::NotValidForNameContext { .. } => TlsCause::NameMismatch,
            _ => TlsCause::BadCertificate,
        },
        E::NoCertificatesPresented => TlsCause::BadCertificate,
        E::AlertReceived(a) => match *a {
            // The peer's answer to a ClientHello it cannot read as TLS 1.3.
            AlertDescription::ProtocolVersion => TlsCause::NotTls,
            _ => TlsCause::RefusedByPeer,
        },
        E::InvalidMessage(_)
        | E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. }
        | E::PeerIncompatible(_)
        | E::PeerSentOversizedRecord => TlsCause::NotTls,
        _ => TlsCause::Unspecified,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_errors_name_their_cause() {
        use rustls::Error as E;
        use AlertDescription as A;
        use CertificateError as C;
        use TlsCause as T;
        let cases = [
            (E::InvalidCertificate(C::UnknownIssuer), T::UnknownCa),
            (E::InvalidCertificate(C::Expired), T::Expired),
            (E::InvalidCertificate(C::NotValidYet), T::NotYetValid),
            (E::InvalidCertificate(C::NotValidForName), T::NameMismatch),
            (E::InvalidCertificate(C::BadSignature), T::BadCertificate),
            (E::AlertReceived(A::CertificateRequired), T::RefusedByPeer),
            (E::AlertReceived(A::ProtocolVersion), T::NotTls),
            (E::PeerSentOversizedRecord, T::NotTls),
            (E::General("x".into()), T::Unspecified),
        ];
        for (e, want) in cases {
            assert_eq!(cause_of(&e), want, "{e:?}");
        }
    }
}
