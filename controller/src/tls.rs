//! TLS (C6, C13): rustls with the `ring` provider.
//!
//! - The client port: a server certificate, optionally client certificates verified against
//!   a CA bundle (the identity a client certificate names is read by [`cert_names`]).
//! - The raft port: mutual TLS between members ([`PeerTls`]). Each node's certificate names
//!   it `xce-node-<id>` ([`node_name`]) in its subject alternative names; a node dialling
//!   member N verifies the server certificate for that name, and a node accepting a peer
//!   checks that the client certificate names a configured member ([`member_of`]). A client
//!   identity signed by the same CA (`admin`, `user-alice`, …) is not a member.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::types::NodeId;

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let certs: Result<Vec<_>, _> = rustls_pemfile::certs(&mut BufReader::new(f)).collect();
    let certs = certs.map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate found", path.display()));
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    rustls_pemfile::private_key(&mut BufReader::new(f))
        .map_err(|e| format!("{}: {e}", path.display()))?
        .ok_or_else(|| format!("{}: no private key found", path.display()))
}

/// Every certificate of a CA bundle (PEM, one or more: old and new CA while rotating).
fn roots(ca: &Path) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    for c in certs(ca)? {
        roots.add(c).map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    Ok(Arc::new(roots))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The acceptor for `--tls-cert/--tls-key [--tls-client-ca]` (the client port). With a CA,
/// clients must present a certificate it signed, unless `allow_anonymous` (callers that
/// authenticate with a token instead, C13).
pub fn acceptor(
    cert: &Path,
    key_path: &Path,
    client_ca: Option<&Path>,
    allow_anonymous: bool,
) -> Result<TlsAcceptor, String> {
    let provider = provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut v = WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider);
            if allow_anonymous {
                v = v.allow_unauthenticated();
            }
            builder.with_client_cert_verifier(v.build().map_err(|e| e.to_string())?)
        }
    };
    let config = builder
        .with_single_cert(certs(cert)?, key(key_path)?)
        .map_err(|e| e.to_string())?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The name a member's certificate carries (DNS subject alternative name).
pub fn node_name(id: NodeId) -> String {
    format!("xce-node-{id}")
}

/// The DNS subject alternative names and the common name of a DER certificate (empty if it
/// does not parse: such a certificate names nobody).
pub fn cert_names(der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(d) = n {
                names.push(d.to_string());
            }
        }
    }
    for cn in cert.subject().iter_common_name() {
        if let Ok(s) = cn.as_str() {
            names.push(s.to_string());
        }
    }
    names
}

/// The member a peer's certificate names, if it names one of `members` (SAN `xce-node-<id>`).
pub fn member_of(der: &[u8], members: &[NodeId]) -> Option<NodeId> {
    cert_names(der)
        .iter()
        .filter_map(|n| n.strip_prefix("xce-node-")?.parse::<NodeId>().ok())
        .find(|id| members.contains(id))
}

/// Mutual TLS on the raft port: this node's certificate and the cluster's CA bundle.
#[derive(Clone)]
pub struct PeerTls {
    pub acceptor: TlsAcceptor,
    pub connector: TlsConnector,
}

impl PeerTls {
    /// Peers must present a certificate `ca` signed (the member check follows the handshake);
    /// this node presents `cert` both as server and as client.
    pub fn new(cert: &Path, key_path: &Path, ca: &Path) -> Result<PeerTls, String> {
        let provider = provider();
        let roots = roots(ca)?;
        let chain = certs(cert)?;
        let k = key(key_path)?;
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| e.to_string())?;
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), k.clone_key())
            .map_err(|e| e.to_string())?;
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, k)
            .map_err(|e| e.to_string())?;
        Ok(PeerTls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        })
    }

    /// The server name member `id` must present when dialled.
    pub fn server_name(id: NodeId) -> ServerName<'static> {
        ServerName::try_from(node_name(id)).expect("xce-node-N is a valid DNS name")
    }
}

/// A client of the client port trusting `ca`, presenting `identity` (certificate, key) if
/// given — else none (a caller identified by a token): the `cluster` launcher's probe,
/// `status`, `member`.
pub fn client_connector(
    ca: &Path,
    identity: Option<&(std::path::PathBuf, std::path::PathBuf)>,
) -> Result<TlsConnector, String> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots(ca)?);
    let config = match identity {
        Some((cert, key_path)) => builder
            .with_client_auth_cert(certs(cert)?, key(key_path)?)
            .map_err(|e| e.to_string())?,
        None => builder.with_no_client_auth(),
    };
    Ok(TlsConnector::from(Arc::new(config)))
}

/// A client-port connection after its TLS handshake (done by tokio-rustls, under the
/// handshake deadline), driven here directly on the socket: TLS records are read straight
/// into rustls's buffer and written straight from it, plaintext is appended to the caller's
/// buffer — no poll adapters and no intermediate plaintext copy on the way in (P15: the
/// secured `hello` round trip). One reply is one `write_all`: its records leave in one
/// `writev` when the socket takes them.
pub struct ServerTls {
    tcp: tokio::net::TcpStream,
    tls: rustls::ServerConnection,
}

/// `std::io` over the non-blocking tokio socket: `WouldBlock` when it has nothing (the
/// caller then awaits readiness; `try_read`/`try_write` clear it).
struct TryIo<'a>(&'a tokio::net::TcpStream);

impl std::io::Read for TryIo<'_> {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.0.try_read(b)
    }
}

impl std::io::Write for TryIo<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.try_write(b)
    }
    fn write_vectored(&mut self, b: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        self.0.try_write_vectored(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl ServerTls {
    /// Takes over a connection whose handshake is complete.
    pub fn new(s: tokio_rustls::server::TlsStream<tokio::net::TcpStream>) -> ServerTls {
        let (tcp, tls) = s.into_inner();
        ServerTls { tcp, tls }
    }

    /// The client's certificate chain, if it presented one (C13).
    pub fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.tls.peer_certificates()
    }

    /// Appends received plaintext to `buf`: the number of bytes (at least one), or 0 once
    /// the client sent close_notify. A TCP close without close_notify is `UnexpectedEof`; a
    /// record rustls refuses is `InvalidData` (its alert sent first, best effort). Cancel-safe:
    /// the only wait is for readiness, and what was read stays in rustls's buffers.
    pub async fn read_into(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        use std::io::{BufRead, ErrorKind};
        loop {
            match self.tls.reader().fill_buf() {
                Ok(p) => {
                    let n = p.len();
                    buf.extend_from_slice(p);
                    self.tls.reader().consume(n);
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            match self.tls.read_tls(&mut TryIo(&self.tcp)) {
                Ok(_) => {
                    // Ok(0): EOF, which the reader reports next (0 after a close_notify,
                    // UnexpectedEof without).
                    if let Err(e) = self.tls.process_new_packets() {
                        let _ = self.tls.write_tls(&mut TryIo(&self.tcp));
                        return Err(std::io::Error::new(ErrorKind::InvalidData, e));
                    }
                    // Whatever rustls has to say (a key update's answer) leaves now.
                    self.flush().await?;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.tcp.readable().await?,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Encrypts and sends all of `out` (records of at most 16 KiB, rustls's outgoing buffer
    /// written out as it fills).
    pub async fn write_all(&mut self, out: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let mut off = 0;
        while off < out.len() {
            off += self.tls.writer().write(&out[off..])?;
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes every TLS record rustls has queued, waiting for the socket as needed.
    async fn flush(&mut self) -> std::io::Result<()> {
        use std::io::ErrorKind;
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut TryIo(&self.tcp)) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.tcp.writable().await?,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
