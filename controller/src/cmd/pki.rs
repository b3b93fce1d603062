//! `xce-controller pki` (C13): a cluster's CA, node certificates, client identities and
//! tokens, with rcgen. Every file lives in one directory:
//!
//! | file | what |
//! |---|---|
//! | `ca.pem`, `ca.key` | the CA (keep `ca.key` off the controllers: `--ca-key` issues from a key elsewhere) |
//! | `xce-node-<id>.pem/.key` | a member: SAN `xce-node-<id>` + its host names/addresses |
//! | `<identity>.pem/.key` | a client identity: `admin`, `scheduler`, `worker-<host>`, `user-<name>` |
//! | `token.key` | the HMAC key of tokens (`--token-key`), for callers without a certificate |
//!
//! Identities and roles are in `base/auth.rs`; docs/security.md has the steps for three machines
//! and for rotating the CA.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::base::auth;
use crate::base::config::take_flags;
use crate::base::ids::NodeId;

/// Days a CA is valid.
pub const CA_DAYS: i64 = 3650;
/// Days a node or client certificate is valid by default.
pub const LEAF_DAYS: i64 = 825;
/// Days a token is valid by default.
pub const TOKEN_DAYS: i64 = 30;
/// The identities `cluster --tls` creates.
pub const LOCAL_IDENTITIES: &[&str] = &[
    "admin",
    "scheduler",
    "worker-host1",
    "user-alice",
    "user-bob",
];

pub const USAGE: &str = "\
usage: xce-controller pki COMMAND DIR [ARGS]

Makes the certificates of a cluster (docs/security.md). Files are written to DIR; existing
files are never overwritten.

commands:
  init DIR                      a new CA (DIR/ca.pem, DIR/ca.key) and a token key (DIR/token.key)
  node DIR ID HOST[,HOST...]    member ID's certificate DIR/xce-node-ID.pem/.key, valid for
                                the name xce-node-ID (peers check it) and each HOST (clients
                                check it): host names or IP addresses
  identity DIR NAME             a client identity DIR/NAME.pem/.key; NAME says the role:
                                admin, scheduler, worker-HOST, user-NAME
  token DIR NAME [DAYS]         prints a token for identity NAME signed with DIR/token.key,
                                valid DAYS days (default 30), for callers without a certificate
  local DIR N                   init, N members on 127.0.0.1/localhost and the identities
                                admin, scheduler, worker-host1, user-alice, user-bob (what
                                `cluster --tls DIR` does)

options of node, identity and local:
  --ca-key FILE                 sign with this CA key, kept elsewhere (offline), instead of
                                DIR/ca.key; DIR gets a copy of the CA certificate (ca.pem) and
                                never the key
  --ca-cert FILE                the CA certificate of --ca-key (default: ca.pem beside it)
  --valid N[s|m|h|d]            validity of the certificate (default 825d): short-lived
                                certificates are how one is revoked (docs/security.md)";

/// From a day ago (clocks that lag) until `d` from now.
fn valid_for(d: time::Duration) -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    (now - time::Duration::days(1), now + d)
}

/// `N[s|m|h|d]` (no unit: days), more than 0.
fn duration_of(v: &str) -> Result<time::Duration, String> {
    let (n, unit) = match v.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&v[..i], c),
        _ => (v, 'd'),
    };
    let n: i64 = n
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("--valid: N[s|m|h|d], not {v:?}"))?;
    Ok(match unit {
        's' => time::Duration::seconds(n),
        'm' => time::Duration::minutes(n),
        'h' => time::Duration::hours(n),
        'd' => time::Duration::days(n),
        _ => return Err(format!("--valid: N[s|m|h|d], not {v:?}")),
    })
}

/// Why `pki` could not make what it was asked for: each names its file and cause.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A file or directory it cannot read or write (an existing file is never overwritten).
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A key or CA certificate file that does not parse.
    #[error("{}: {source}", path.display())]
    Pem {
        path: PathBuf,
        #[source]
        source: rcgen::Error,
    },
    /// Making a key or a certificate.
    #[error("{0}")]
    Make(#[from] rcgen::Error),
    #[error("no randomness")]
    NoRandomness,
    /// `DIR/ca.pem` is another CA's certificate than the one signing.
    #[error("{} holds another CA certificate than {}", copy.display(), ca.display())]
    OtherCa { copy: PathBuf, ca: PathBuf },
    /// A name that says no role.
    #[error("{0:?} says no role: admin, scheduler, worker-HOST or user-NAME")]
    NoRole(String),
    /// The token key.
    #[error("{0}")]
    TokenKey(String),
}

impl From<PkiError> for String {
    fn from(e: PkiError) -> String {
        e.to_string()
    }
}

fn file_err(path: &Path) -> impl FnOnce(std::io::Error) -> PkiError + '_ {
    move |source| PkiError::File {
        path: path.to_path_buf(),
        source,
    }
}

fn write_new(path: &Path, body: &str, secret: bool) -> Result<(), PkiError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .map_err(file_err(path))?;
    f.write_all(body.as_bytes()).map_err(file_err(path))
}

fn read(path: &Path) -> Result<String, PkiError> {
    std::fs::read_to_string(path).map_err(file_err(path))
}

/// Creates the CA and the token key in `dir`.
pub fn init(dir: &Path) -> Result<(), PkiError> {
    std::fs::create_dir_all(dir).map_err(file_err(dir))?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let stamp = time::OffsetDateTime::now_utc().unix_timestamp();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("xce cluster CA {stamp}"));
    (params.not_before, params.not_after) = valid_for(time::Duration::days(CA_DAYS));
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    write_new(&dir.join("ca.key"), &key.serialize_pem(), true)?;
    write_new(&dir.join("ca.pem"), &cert.pem(), false)?;
    let mut secret = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
        .map_err(|_| PkiError::NoRandomness)?;
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    write_new(&dir.join("token.key"), &format!("{hex}\n"), true)
}

/// Who signs a leaf, and for how long.
#[derive(Debug, Clone, Default)]
pub struct Signing {
    /// `--ca-key`: the CA's key kept elsewhere (offline); `None`: `DIR/ca.key`.
    pub ca_key: Option<PathBuf>,
    /// `--ca-cert`: its certificate; `None`: `ca.pem` beside the key.
    pub ca_cert: Option<PathBuf>,
    /// `--valid`: validity; `None`: [`LEAF_DAYS`].
    pub valid: Option<time::Duration>,
}

impl Signing {
    /// The CA's certificate and key files for a leaf written to `dir`.
    fn ca_files(&self, dir: &Path) -> (PathBuf, PathBuf) {
        match &self.ca_key {
            None => (dir.join("ca.pem"), dir.join("ca.key")),
            Some(k) => {
                let cert = self
                    .ca_cert
                    .clone()
                    .unwrap_or_else(|| k.parent().unwrap_or(Path::new(".")).join("ca.pem"));
                (cert, k.clone())
            }
        }
    }
}

/// The CA that signs leaves written to `dir`. With a CA key kept elsewhere, `dir` gets a copy
/// of the CA certificate (what controllers and clients need), never the key.
fn issuer(dir: &Path, signing: &Signing) -> Result<Issuer<'static, KeyPair>, PkiError> {
    let (cert, key) = signing.ca_files(dir);
    let pem_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PkiError::Pem { path, source }
    };
    let key = KeyPair::from_pem(&read(&key)?).map_err(pem_err(&key))?;
    let pem = read(&cert)?;
    let ca = Issuer::from_ca_cert_pem(&pem, key).map_err(pem_err(&cert))?;
    if signing.ca_key.is_some() {
        std::fs::create_dir_all(dir).map_err(file_err(dir))?;
        let copy = dir.join("ca.pem");
        match std::fs::read_to_string(&copy) {
            Ok(have) if have == pem => {}
            Ok(_) => return Err(PkiError::OtherCa { copy, ca: cert }),
            Err(_) => write_new(&copy, &pem, false)?,
        }
    }
    Ok(ca)
}

/// Signs a leaf certificate for `names` (the first is also its common name) and writes
/// `DIR/<file>.pem/.key`.
fn leaf(
    dir: &Path,
    file: &str,
    names: Vec<String>,
    server: bool,
    signing: &Signing,
) -> Result<PathBuf, PkiError> {
    let ca = issuer(dir, signing)?;
    let cn = names[0].clone();
    let mut params = CertificateParams::new(names)?;
    params.distinguished_name.push(DnType::CommonName, cn);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    if server {
        params
            .extended_key_usages
            .push(ExtendedKeyUsagePurpose::ServerAuth);
    }
    let valid = signing.valid.unwrap_or(time::Duration::days(LEAF_DAYS));
    (params.not_before, params.not_after) = valid_for(valid);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca)?;
    write_new(&dir.join(format!("{file}.key")), &key.serialize_pem(), true)?;
    let pem = dir.join(format!("{file}.pem"));
    write_new(&pem, &cert.pem(), false)?;
    Ok(pem)
}

/// Member `id`'s certificate, valid for `xce-node-<id>` and `hosts`.
pub fn node(
    dir: &Path,
    id: NodeId,
    hosts: &[String],
    signing: &Signing,
) -> Result<PathBuf, PkiError> {
    let name = crate::base::tls::node_name(id);
    let mut names = vec![name.clone()];
    names.extend(hosts.iter().filter(|h| !h.is_empty()).cloned());
    leaf(dir, &name, names, true, signing)
}

/// A client identity's certificate; `name` must say a role ([`auth::Identity::parse`]).
pub fn identity(dir: &Path, name: &str, signing: &Signing) -> Result<PathBuf, PkiError> {
    auth::Identity::parse(name).ok_or_else(|| PkiError::NoRole(name.to_string()))?;
    leaf(dir, name, vec![name.to_string()], false, signing)
}

/// What `cluster --tls DIR` needs: a CA (unless `signing` names one kept elsewhere), `n`
/// members on loopback, the local identities. Reuses whatever `dir` already holds.
pub fn local(dir: &Path, n: u16, signing: &Signing) -> Result<(), PkiError> {
    if signing.ca_key.is_none() && !dir.join("ca.pem").exists() {
        init(dir)?;
    }
    for id in 1..=n as NodeId {
        let name = crate::base::tls::node_name(id);
        if !dir.join(format!("{name}.pem")).exists() {
            node(dir, id, &["127.0.0.1".into(), "localhost".into()], signing)?;
        }
    }
    for who in LOCAL_IDENTITIES {
        if !dir.join(format!("{who}.pem")).exists() {
            identity(dir, who, signing)?;
        }
    }
    Ok(())
}

/// Splits `--ca-key FILE`, `--ca-cert FILE` and `--valid N[s|m|h|d]` off `args`.
fn signing_of(args: &[String]) -> Result<(Vec<String>, Signing), String> {
    let (rest, taken) = take_flags(args, &["--ca-key", "--ca-cert", "--valid"])?;
    let mut s = Signing::default();
    for (flag, v) in taken {
        match flag.as_str() {
            "--ca-key" => s.ca_key = Some(PathBuf::from(v)),
            "--ca-cert" => s.ca_cert = Some(PathBuf::from(v)),
            _ => s.valid = Some(duration_of(&v)?),
        }
    }
    if s.ca_cert.is_some() && s.ca_key.is_none() {
        return Err("--ca-cert goes with --ca-key".into());
    }
    Ok((rest, s))
}

/// `xce-controller pki …`.
pub fn main(args: &[String]) -> i32 {
    let (args, signing) = match signing_of(args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("xce-controller pki: {e}\n{USAGE}");
            return 2;
        }
    };
    let plain = signing.ca_key.is_none() && signing.valid.is_none();
    let res = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["init", dir] if plain => init(Path::new(dir))
            .map(|()| format!("CA and token key in {dir}"))
            .map_err(|e| e.to_string()),
        ["node", dir, id, hosts] => match id.parse::<NodeId>() {
            Ok(id) if id > 0 => {
                let hosts: Vec<String> = hosts.split(',').map(|h| h.trim().to_string()).collect();
                node(Path::new(dir), id, &hosts, &signing)
                    .map(|p| p.display().to_string())
                    .map_err(|e| e.to_string())
            }
            _ => Err(format!("bad node id {id:?}")),
        },
        ["identity", dir, name] => identity(Path::new(dir), name, &signing)
            .map(|p| p.display().to_string())
            .map_err(|e| e.to_string()),
        ["token", dir, name] if plain => {
            token(Path::new(dir), name, TOKEN_DAYS).map_err(|e| e.to_string())
        }
        ["token", dir, name, d] if plain => match d.parse() {
            Ok(d) => token(Path::new(dir), name, d).map_err(|e| e.to_string()),
            Err(_) => Err(format!("bad number of days {d:?}")),
        },
        ["local", dir, n] => match n.parse::<u16>() {
            Ok(n) if (1..=8).contains(&n) => local(Path::new(dir), n, &signing)
                .map(|()| format!("cluster certificates in {dir}"))
                .map_err(|e| e.to_string()),
            _ => Err(format!("bad number of nodes {n:?}")),
        },
        _ => {
            eprintln!("{USAGE}");
            return 2;
        }
    };
    let said = res.map(|out| println!("{out}"));
    crate::cmd::exit_status("xce-controller pki", said)
}

fn token(dir: &Path, name: &str, days: i64) -> Result<String, PkiError> {
    let key = auth::TokenKey::load(&dir.join("token.key")).map_err(PkiError::TokenKey)?;
    auth::Identity::parse(name).ok_or_else(|| PkiError::NoRole(name.to_string()))?;
    let expires = time::OffsetDateTime::now_utc().unix_timestamp() + days * 86_400;
    Ok(key.mint(name, expires))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_and_signing_options() {
        assert_eq!(duration_of("8s"), Ok(time::Duration::seconds(8)));
        assert_eq!(duration_of("90m"), Ok(time::Duration::minutes(90)));
        assert_eq!(duration_of("12h"), Ok(time::Duration::hours(12)));
        assert_eq!(duration_of("30"), Ok(time::Duration::days(30)));
        for bad in ["", "0s", "-1d", "8x", "s", "1.5h"] {
            assert!(duration_of(bad).is_err(), "{bad:?}");
        }
        let line = "node out 1 h --ca-key=/ca/ca.key --valid 8s";
        let args: Vec<String> = line.split(' ').map(String::from).collect();
        let (rest, s) = signing_of(&args).unwrap();
        assert_eq!(rest, ["node", "out", "1", "h"]);
        assert_eq!(s.ca_key, Some(PathBuf::from("/ca/ca.key")));
        assert_eq!(
            s.ca_files(Path::new("out")),
            (PathBuf::from("/ca/ca.pem"), PathBuf::from("/ca/ca.key"))
        );
        assert!(signing_of(&["--ca-cert".into(), "x".into()]).is_err());
        assert!(signing_of(&["--valid".into()]).is_err());
    }

    /// Issue 27: the CA's key stays where it is (offline); what is issued goes elsewhere,
    /// with a copy of the CA certificate and never the key; the leaves chain to the CA, and
    /// `--valid` bounds them.
    #[test]
    fn leaves_from_a_ca_key_kept_elsewhere() {
        let ca = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        init(ca.path()).unwrap();
        let signing = Signing {
            ca_key: Some(ca.path().join("ca.key")),
            ca_cert: None,
            valid: Some(time::Duration::hours(1)),
        };
        node(out.path(), 1, &["ctl1.example.org".into()], &signing).unwrap();
        identity(out.path(), "admin", &signing).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(out.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "admin.key",
                "admin.pem",
                "ca.pem",
                "xce-node-1.key",
                "xce-node-1.pem"
            ]
        );
        assert_eq!(
            read(&out.path().join("ca.pem")).unwrap(),
            read(&ca.path().join("ca.pem")).unwrap()
        );
        let der = |p: &Path| {
            let pem = read(p).unwrap();
            let first = rustls_pemfile::certs(&mut pem.as_bytes()).next();
            first.unwrap().unwrap()
        };
        let leaf = der(&out.path().join("admin.pem"));
        let (_, cert) = x509_parser::parse_x509_certificate(&leaf).unwrap();
        let left = cert.validity().not_after.timestamp()
            - time::OffsetDateTime::now_utc().unix_timestamp();
        assert!((3500..=3600).contains(&left), "{left} s");
        let ca_der = der(&ca.path().join("ca.pem"));
        let anchor = webpki::anchor_from_trusted_cert(&ca_der).unwrap();
        let now = rustls::pki_types::UnixTime::now();
        webpki::EndEntityCert::try_from(&leaf)
            .unwrap()
            .verify_for_usage(
                webpki::ALL_VERIFICATION_ALGS,
                &[anchor],
                &[],
                now,
                webpki::KeyUsage::client_auth(),
                None,
                None,
            )
            .expect("the leaf chains to the CA");
        // Another CA's certificate already in the output directory: refused.
        let other = tempfile::tempdir().unwrap();
        init(other.path()).unwrap();
        let s2 = Signing {
            ca_key: Some(other.path().join("ca.key")),
            ..Signing::default()
        };
        assert!(identity(out.path(), "scheduler", &s2).is_err());
    }
}
