//! TLS 1.3 client configuration (rustls, ring provider), built once per context.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::Error;

/// Builds the client side: trust only `ca_file`, TLS 1.3 only, and present `cert_file` +
/// `key_file` when both are given (mutual TLS). Any unreadable or invalid file is `Error::Tls`.
pub fn client_config(
    ca_file: &Path,
    cert_file: Option<&Path>,
    key_file: Option<&Path>,
) -> Result<Arc<rustls::ClientConfig>, Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(ca_file)? {
        roots.add(cert).map_err(|_| Error::Tls)?;
    }
    if roots.is_empty() {
        return Err(Error::Tls);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|_| Error::Tls)?
        .with_root_certificates(roots);
    let config = match (cert_file, key_file) {
        (Some(c), Some(k)) => builder
            .with_client_auth_cert(read_certs(c)?, read_key(k)?)
            .map_err(|_| Error::Tls)?,
        (None, None) => builder.with_no_client_auth(),
        // Half a client identity is a configuration error, not something to ignore.
        _ => return Err(Error::Errno(libc::EINVAL)),
    };
    Ok(Arc::new(config))
}

fn open(path: &Path) -> Result<BufReader<File>, Error> {
    File::open(path)
        .map(BufReader::new)
        .map_err(|e| Error::from_io(&e))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs: Result<Vec<_>, _> = rustls_pemfile::certs(&mut open(path)?).collect();
    let certs = certs.map_err(|_| Error::Tls)?;
    if certs.is_empty() {
        return Err(Error::Tls);
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    rustls_pemfile::private_key(&mut open(path)?)
        .map_err(|_| Error::Tls)?
        .ok_or(Error::Tls)
}
