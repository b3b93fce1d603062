//! TLS (C6, C13): rustls with the `ring` provider.
//!
//! - The client port: a server certificate, optionally client certificates verified against
//!   a CA bundle (the identity a client certificate names is read by [`cert_names`]).
//! - The raft port: mutual TLS between members ([`PeerTls`]). Each node's certificate names
//!   it `xce-node-<id>` ([`node_name`]) in its subject alternative names; a node dialling
//!   member N verifies the server certificate for that name, and a node accepting a peer
//!   checks that the client certificate names a configured member ([`member_of`]). A client
//!   identity signed by the same CA (`admin`, `user-alice`, …) is not a member.
//! - Both: a CA's path length constraint binds its own certificate too ([`Anchors`]: rustls
//!   checks it only for intermediates), and the client port issues no session tickets and
//!   bounds a connection by its certificate's validity ([`chain_not_after`], issue 27).

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::kernel::KernelConnection;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, TrustAnchor, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConnectionData, WebPkiClientVerifier};
use rustls::{AlertDescription, DigitallySignedStruct, DistinguishedName, RootCertStore};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use xce_proto::records::{self, Records, HEADER, MAX_RECORD};

use crate::base::ids::NodeId;

/// Why TLS material could not be loaded, or a configuration built from it: each names its
/// file and its cause, up to the command line (issue 37: typed, not strings).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate, key or CA file that cannot be read, or is not PEM.
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: no certificate found", .0.display())]
    NoCertificate(PathBuf),
    #[error("{}: no private key found", .0.display())]
    NoKey(PathBuf),
    /// A CA bundle whose certificate cannot be a trust anchor.
    #[error("{}: {why}", path.display())]
    BadCa { path: PathBuf, why: String },
    /// rustls refused the configuration (e.g. a key that does not match its certificate).
    #[error("{0}")]
    Config(#[from] rustls::Error),
    #[error("{0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// Issue 26: this node's certificate names another node; its peers would refuse it.
    #[error(
        "{}: the certificate names {names:?}, not {}: this is node {id}, and its peers \
         would refuse it (make one with `xce-controller pki node DIR {id} HOSTS`)",
        path.display(),
        node_name(*id)
    )]
    NotThisNode {
        path: PathBuf,
        names: Vec<String>,
        id: NodeId,
    },
}

impl From<TlsError> for String {
    fn from(e: TlsError) -> String {
        e.to_string()
    }
}

fn file_err(path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + '_ {
    move |source| TlsError::File {
        path: path.to_path_buf(),
        source,
    }
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let f = File::open(path).map_err(file_err(path))?;
    let certs: Result<Vec<_>, _> = rustls_pemfile::certs(&mut BufReader::new(f)).collect();
    let certs = certs.map_err(file_err(path))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_path_buf()));
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let f = File::open(path).map_err(file_err(path))?;
    rustls_pemfile::private_key(&mut BufReader::new(f))
        .map_err(file_err(path))?
        .ok_or_else(|| TlsError::NoKey(path.to_path_buf()))
}

/// Every certificate of a CA bundle (PEM, one or more: old and new CA while rotating), and
/// their path length constraints.
fn roots(ca: &Path) -> Result<(Arc<RootCertStore>, Arc<Anchors>), TlsError> {
    let bad = |why: String| TlsError::BadCa {
        path: ca.to_path_buf(),
        why,
    };
    let mut roots = RootCertStore::empty();
    let all = certs(ca)?;
    for c in &all {
        roots.add(c.clone()).map_err(|e| bad(e.to_string()))?;
    }
    let anchors = Anchors::of(&all).map_err(bad)?;
    Ok((Arc::new(roots), Arc::new(anchors)))
}

/// The trust anchors of a CA bundle with the path length constraint each CA certificate
/// states (RFC 5280 4.2.1.9: how many intermediate CAs may follow it in a path). rustls's
/// verifiers (webpki) check the constraint of intermediates only — a trust anchor keeps no
/// basic constraints — so an intermediate CA issued under a CA that says `pathLen 0` (as
/// `pki init` makes it) was accepted (issue 27). [`Anchors::check`] honours it: a chain
/// with intermediates must have a path to a trust anchor whose constraint allows them.
#[derive(Debug)]
pub struct Anchors(Vec<(TrustAnchor<'static>, Option<usize>)>);

impl Anchors {
    /// From the DER certificates of a CA bundle.
    pub fn of(roots: &[CertificateDer<'_>]) -> Result<Anchors, String> {
        roots
            .iter()
            .map(|der| {
                let anchor = webpki::anchor_from_trusted_cert(der)
                    .map_err(|e| format!("a CA certificate: {e}"))?
                    .to_owned();
                let (_, cert) = x509_parser::parse_x509_certificate(der)
                    .map_err(|e| format!("a CA certificate: {e}"))?;
                let limit = match cert.basic_constraints() {
                    Ok(Some(bc)) => bc.value.path_len_constraint.map(|n| n as usize),
                    _ => None,
                };
                Ok((anchor, limit))
            })
            .collect::<Result<_, String>>()
            .map(Anchors)
    }

    /// The path length constraint of the CA `anchor` is (`None`: unconstrained).
    fn limit_of(&self, anchor: &TrustAnchor<'_>) -> Option<usize> {
        self.0
            .iter()
            .find(|(a, _)| {
                a.subject == anchor.subject
                    && a.subject_public_key_info == anchor.subject_public_key_info
            })
            .and_then(|(_, l)| *l)
    }

    /// After rustls verified `end_entity` (signatures, validity, usage): a chain that brings
    /// intermediates must also have a path whose trust anchor's constraint allows them. A
    /// chain of the leaf alone (what `pki` issues) costs nothing here.
    pub fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
        usage: webpki::KeyUsage,
    ) -> Result<(), rustls::Error> {
        if intermediates.is_empty() || self.0.iter().all(|(_, l)| l.is_none()) {
            return Ok(());
        }
        let refused = |e: webpki::Error| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
                Arc::new(e),
            )))
        };
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(refused)?;
        let anchors: Vec<TrustAnchor<'_>> = self.0.iter().map(|(a, _)| a.clone()).collect();
        let within = |path: &webpki::VerifiedPath<'_>| {
            let n = path.intermediate_certificates().count();
            match self.limit_of(path.anchor()) {
                Some(limit) if n > limit => Err(webpki::Error::PathLenConstraintViolated),
                _ => Ok(()),
            }
        };
        cert.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            intermediates,
            now,
            usage,
            None,
            Some(&within),
        )
        .map(|_| ())
        .map_err(refused)
    }
}

/// A client certificate verifier (rustls's) followed by [`Anchors::check`].
#[derive(Debug)]
struct ClientCheck {
    inner: Arc<dyn ClientCertVerifier>,
    anchors: Arc<Anchors>,
}

impl ClientCertVerifier for ClientCheck {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }
    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let ok = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        self.anchors.check(
            end_entity,
            intermediates,
            now,
            webpki::KeyUsage::client_auth(),
        )?;
        Ok(ok)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A server certificate verifier (rustls's) followed by [`Anchors::check`]: a member dialled
/// on the raft port.
#[derive(Debug)]
struct ServerCheck {
    inner: Arc<WebPkiServerVerifier>,
    anchors: Arc<Anchors>,
}

impl ServerCertVerifier for ServerCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ok = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        self.anchors.check(
            end_entity,
            intermediates,
            now,
            webpki::KeyUsage::server_auth(),
        )?;
        Ok(ok)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A client certificate verifier for `ca` ([`ClientCheck`]); `allow_anonymous`: a client may
/// present none.
fn client_verifier(
    ca: &Path,
    provider: Arc<rustls::crypto::CryptoProvider>,
    allow_anonymous: bool,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let (roots, anchors) = roots(ca)?;
    let mut v = WebPkiClientVerifier::builder_with_provider(roots, provider);
    if allow_anonymous {
        v = v.allow_unauthenticated();
    }
    let inner = v.build()?;
    Ok(Arc::new(ClientCheck { inner, anchors }))
}

/// Why a certificate chain is not valid now (C13 amended).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("a certificate that does not parse")]
    Unparsable,
    #[error("certificate not valid before {0}")]
    NotYet(String),
    #[error("certificate expired at {0}")]
    Expired(String),
}

/// The last instant (unix s) at which every certificate of `chain` is valid: the earliest
/// `notAfter`; `Err(why)` when one of them is not valid at `now` (unix s) or does not parse.
/// rustls checks a full handshake's certificates; a *resumed* session would carry the first
/// handshake's identity unchecked (issue 27: an expired admin certificate stayed admin), and
/// a connection outlives the moment its certificate expires — the client port checks every
/// connection here after its handshake and closes it at the instant returned (C13 amended).
pub fn chain_not_after(chain: &[CertificateDer<'_>], now: i64) -> Result<i64, Invalid> {
    let mut until = i64::MAX;
    for der in chain {
        let (_, cert) =
            x509_parser::parse_x509_certificate(der).map_err(|_| Invalid::Unparsable)?;
        let v = cert.validity();
        let (from, to) = (v.not_before.timestamp(), v.not_after.timestamp());
        if now < from {
            return Err(Invalid::NotYet(v.not_before.to_string()));
        }
        if now >= to {
            return Err(Invalid::Expired(v.not_after.to_string()));
        }
        until = until.min(to);
    }
    Ok(until)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The configuration for `--tls-cert/--tls-key [--tls-client-ca]` (the client port). With a CA,
/// clients must present a certificate it signed, unless `allow_anonymous` (callers that
/// authenticate with a token instead, C13).
pub fn acceptor(
    cert: &Path,
    key_path: &Path,
    client_ca: Option<&Path>,
    allow_anonymous: bool,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = provider();
    // TLS 1.3 only, as the protocol says (protocol.md) and every client of the port speaks:
    // its records after the handshake are `ServerTls`'s TLS 1.3 record layer.
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            builder.with_client_cert_verifier(client_verifier(ca, provider, allow_anonymous)?)
        }
    };
    let mut config = builder.with_single_cert(certs(cert)?, key(key_path)?)?;
    // C13 amended (issue 27): no session tickets, so no resumption — a resumed session
    // carries its first handshake's certificate identity without checking it again, past
    // the certificate's expiry; and what resumption would save is small (docs/security.md:
    // measured, and a failover's reconnect goes to another node, which holds no ticket of
    // it anyway). Every connection is a full handshake whose certificate is checked.
    config.send_tls13_tickets = 0;
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    // P15: after the handshake the connection's keys go to the record layer (`ServerTls`);
    // nothing of the handshake changes.
    config.enable_secret_extraction = true;
    Ok(Arc::new(config))
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
/// Issue 26: refuses a certificate file `cert` that does not name `xce-node-ID` for this
/// node's `id` — its peers would refuse it (mutual TLS on the raft port checks that name), and
/// the refusals would show on the wrong side. The names it has, in the error.
pub fn check_own_cert(cert: &Path, id: NodeId) -> Result<(), TlsError> {
    let chain = certs(cert)?;
    let leaf = chain
        .first()
        .ok_or_else(|| TlsError::NoCertificate(cert.to_path_buf()))?;
    let names = cert_names(leaf);
    if names.contains(&node_name(id)) {
        return Ok(());
    }
    Err(TlsError::NotThisNode {
        path: cert.to_path_buf(),
        names,
        id,
    })
}

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
    pub fn new(cert: &Path, key_path: &Path, ca: &Path) -> Result<PeerTls, TlsError> {
        let provider = provider();
        let (roots, anchors) = roots(ca)?;
        let chain = certs(cert)?;
        let k = key(key_path)?;
        let verifier = client_verifier(ca, provider.clone(), false)?;
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), k.clone_key())?;
        let inner = WebPkiServerVerifier::builder_with_provider(roots, provider.clone()).build()?;
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ServerCheck { inner, anchors }))
            .with_client_auth_cert(chain, k)?;
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
) -> Result<TlsConnector, TlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots(ca)?.0);
    let config = match identity {
        Some((cert, key_path)) => builder.with_client_auth_cert(certs(cert)?, key(key_path)?)?,
        None => builder.with_no_client_auth(),
    };
    Ok(TlsConnector::from(Arc::new(config)))
}

/// A client-port TLS connection: the handshake through rustls's unbuffered server (under the
/// caller's deadline), then the connection's keys handed to the library's record layer
/// (`xce_proto::records`, P15: the secured `hello` round trip): records are read
/// straight into one buffer, decrypted there in place, and their plaintext appended to the
/// caller's buffer; a reply is sealed into one buffer and sent with one write — no rustls
/// state machine, copies or allocations per record beyond the seal's. Key updates and alerts
/// are handled there; rustls keeps the keys.
pub struct ServerTls {
    tcp: tokio::net::TcpStream,
    records: Records<KernelConnection<ServerConnectionData>>,
    /// Received bytes not yet a whole record: at most one record and one read.
    inbuf: Box<[u8]>,
    inlen: usize,
    /// Records to send; reused.
    out: Vec<u8>,
    /// Plaintext that arrived with the handshake's last flight.
    early: Vec<u8>,
    peer: Option<Vec<CertificateDer<'static>>>,
    /// A fatal alert went out: no close_notify after it.
    failed: bool,
}

/// Bytes read from the socket at most at once.
const READ_CHUNK: usize = 64 * 1024;
/// A reply buffer bigger than this is given back once sent.
const KEEP_OUT: usize = 64 * 1024;

fn invalid(e: rustls::Error) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e)
}

/// Whether `b` (at least a header) holds a whole TLS record.
fn whole_record(b: &[u8]) -> bool {
    b.len() >= HEADER && b.len() >= HEADER + u16::from_be_bytes([b[3], b[4]]) as usize
}

/// Reads more of a TLS handshake into `inbuf`, bounded: a handshake larger than the
/// largest message and a record is refused; EOF is `UnexpectedEof`.
async fn read_handshake(
    tcp: &mut tokio::net::TcpStream,
    inbuf: &mut Vec<u8>,
) -> std::io::Result<()> {
    use std::io::ErrorKind;
    use tokio::io::AsyncReadExt;
    if inbuf.len() >= xce_proto::records::MAX_HANDSHAKE + MAX_RECORD {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            "TLS handshake message too large",
        ));
    }
    let at = inbuf.len();
    inbuf.resize(at + 16 * 1024, 0);
    let r = tcp.read(&mut inbuf[at..]).await;
    inbuf.truncate(at + *r.as_ref().unwrap_or(&0));
    match r {
        Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::Interrupted => {}
        Err(e) => return Err(e),
    }
    Ok(())
}

impl ServerTls {
    /// The TLS handshake on an accepted connection, as `config` says (certificates verified
    /// by rustls). Not bounded in time here: the caller's deadline is. A failure is
    /// `InvalidData` wrapping rustls's error, after its alert was sent on a best-effort
    /// basis; EOF is `UnexpectedEof`.
    pub async fn accept(
        tcp: tokio::net::TcpStream,
        config: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<ServerTls> {
        use rustls::unbuffered::ConnectionState;
        use std::io::ErrorKind;
        use tokio::io::AsyncWriteExt;
        let mut tcp = tcp;
        let mut conn = rustls::server::UnbufferedServerConnection::new(config).map_err(invalid)?;
        let mut inbuf: Vec<u8> = Vec::new();
        let mut out: Vec<u8> = Vec::new();
        let mut early: Vec<u8> = Vec::new();
        loop {
            let st = conn.process_tls_records(&mut inbuf);
            let discard = st.discard;
            let mut failed = None;
            let mut read_more = false;
            let mut done = false;
            match st.state {
                Err(e) => failed = Some(e),
                Ok(ConnectionState::EncodeTlsData(mut s)) => {
                    records::encode_handshake(&mut s, &mut out).map_err(invalid)?;
                }
                Ok(ConnectionState::TransmitTlsData(t)) => {
                    tcp.write_all(&out).await?;
                    out.clear();
                    t.done();
                }
                Ok(ConnectionState::BlockedHandshake) => read_more = true,
                Ok(ConnectionState::WriteTraffic(_)) => done = true,
                Ok(ConnectionState::ReadTraffic(mut r)) => {
                    // The client's first request, in the same read as its last handshake
                    // message.
                    while let Some(rec) = r.next_record() {
                        early.extend_from_slice(rec.map_err(invalid)?.payload);
                    }
                }
                Ok(ConnectionState::PeerClosed) | Ok(ConnectionState::Closed) => {
                    return Err(ErrorKind::UnexpectedEof.into())
                }
                Ok(other) => {
                    return Err(std::io::Error::new(
                        ErrorKind::InvalidData,
                        format!("unexpected TLS state {other:?}"),
                    ))
                }
            }
            inbuf.drain(..discard);
            if let Some(e) = failed {
                // rustls queued its alert: send it, best effort.
                let alert = records::handshake_alert(conn.process_tls_records(&mut inbuf).state);
                let _ = tcp.try_write(&alert);
                return Err(invalid(e));
            }
            if done {
                break;
            }
            if read_more {
                read_handshake(&mut tcp, &mut inbuf).await?;
            }
        }
        ServerTls::established(conn, tcp, inbuf, early)
    }

    /// The connection once its handshake is done: its records' keys, what the client sent
    /// beyond the handshake (at most a record), its certificates.
    fn established(
        conn: rustls::server::UnbufferedServerConnection,
        tcp: tokio::net::TcpStream,
        inbuf: Vec<u8>,
        early: Vec<u8>,
    ) -> std::io::Result<ServerTls> {
        use std::io::ErrorKind;
        let peer = conn.peer_certificates().map(|c| c.to_vec());
        let (secrets, kernel) = conn.dangerous_into_kernel_connection().map_err(invalid)?;
        let records = Records::new(secrets, kernel).map_err(invalid)?;
        if inbuf.len() > MAX_RECORD {
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                "TLS record too large",
            ));
        }
        let mut buf = vec![0u8; MAX_RECORD + READ_CHUNK].into_boxed_slice();
        buf[..inbuf.len()].copy_from_slice(&inbuf);
        Ok(ServerTls {
            tcp,
            records,
            inlen: inbuf.len(),
            inbuf: buf,
            out: Vec::new(),
            early,
            peer,
            failed: false,
        })
    }

    /// The client's certificate chain, if it presented one (C13).
    pub fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.peer.as_deref()
    }

    /// Ends the connection with the fatal alert `desc` (e.g. `certificate_expired`), best
    /// effort, and no `close_notify` after it.
    pub fn fail(&mut self, desc: AlertDescription) {
        let mut a = Vec::new();
        if !self.failed && self.records.alert(desc, &mut a).is_ok() {
            let _ = self.tcp.try_write(&a);
        }
        self.failed = true;
    }

    /// Appends received plaintext to `buf`: the number of bytes (at least one), or 0 once
    /// the client sent close_notify. A TCP close without close_notify is `UnexpectedEof`; a
    /// record that does not decrypt or breaks the protocol is `InvalidData` (an alert sent
    /// first, best effort). Cancel-safe while it waits for the socket: what was read stays in
    /// the record buffer.
    pub async fn read_into(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        use std::io::ErrorKind;
        use tokio::io::AsyncWriteExt;
        if !self.early.is_empty() {
            let n = self.early.len();
            buf.append(&mut self.early);
            return Ok(n);
        }
        loop {
            if self.records.peer_closed() {
                return Ok(0);
            }
            if !whole_record(&self.inbuf[..self.inlen]) {
                match self.tcp.try_read(&mut self.inbuf[self.inlen..]) {
                    Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
                    Ok(n) => self.inlen += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        self.tcp.readable().await?;
                        continue;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            let before = buf.len();
            self.out.clear();
            let opened = match self
                .records
                .open(&mut self.inbuf[..self.inlen], buf, &mut self.out)
            {
                Ok(o) => o,
                Err(e) => {
                    let mut a = Vec::new();
                    let alert = Records::<KernelConnection<ServerConnectionData>>::alert_for(&e);
                    self.failed = true;
                    if self.records.alert(alert, &mut a).is_ok() {
                        let _ = self.tcp.try_write(&a);
                    }
                    return Err(invalid(e));
                }
            };
            self.inbuf.copy_within(opened.consumed..self.inlen, 0);
            self.inlen -= opened.consumed;
            if !self.out.is_empty() {
                // A key update's answer, before any reply under the new keys.
                self.tcp.write_all(&self.out).await?;
            }
            if buf.len() > before {
                return Ok(buf.len() - before);
            }
            if opened.closed {
                return Ok(0);
            }
        }
    }

    /// Encrypts and sends all of `data` (records of at most 16 KiB) with one write when the
    /// socket takes it.
    pub async fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        self.out.clear();
        self.records.seal(data, &mut self.out).map_err(invalid)?;
        let r = self.tcp.write_all(&self.out).await;
        if self.out.capacity() > KEEP_OUT {
            self.out = Vec::new();
        }
        r
    }
}

impl Drop for ServerTls {
    /// Closing: a `close_notify` first (RFC 8446 6.1: the end of our data, not a truncation;
    /// none after a fatal alert), best effort — a client whose receive buffer cannot take 24
    /// bytes reads nothing any more.
    fn drop(&mut self) {
        if self.failed {
            return;
        }
        let mut a = Vec::new();
        if self.records.close_notify(&mut a).is_ok() {
            let _ = self.tcp.try_write(&a);
        }
    }
}
