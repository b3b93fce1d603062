//! `xce-controller pki` (C13): a cluster's CA, node certificates, client identities and
//! tokens, with rcgen. Every file lives in one directory:
//!
//! | file | what |
//! |---|---|
//! | `ca.pem`, `ca.key` | the CA (keep `ca.key` off the controllers) |
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
                                `cluster --tls DIR` does)";

fn days(n: i64) -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    (now - time::Duration::days(1), now + time::Duration::days(n))
}

fn write_new(path: &Path, body: &str, secret: bool) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(body.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Creates the CA and the token key in `dir`.
pub fn init(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let stamp = time::OffsetDateTime::now_utc().unix_timestamp();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("xce cluster CA {stamp}"));
    (params.not_before, params.not_after) = days(CA_DAYS);
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    write_new(&dir.join("ca.key"), &key.serialize_pem(), true)?;
    write_new(&dir.join("ca.pem"), &cert.pem(), false)?;
    let mut secret = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
        .map_err(|_| "no randomness".to_string())?;
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    write_new(&dir.join("token.key"), &format!("{hex}\n"), true)
}

fn issuer(dir: &Path) -> Result<Issuer<'static, KeyPair>, String> {
    let key = KeyPair::from_pem(&read(&dir.join("ca.key"))?).map_err(|e| e.to_string())?;
    Issuer::from_ca_cert_pem(&read(&dir.join("ca.pem"))?, key)
        .map_err(|e| format!("{}: {e}", dir.join("ca.pem").display()))
}

/// Signs a leaf certificate for `names` (the first is also its common name) and writes
/// `DIR/<file>.pem/.key`.
fn leaf(dir: &Path, file: &str, names: Vec<String>, server: bool) -> Result<PathBuf, String> {
    let ca = issuer(dir)?;
    let cn = names[0].clone();
    let mut params = CertificateParams::new(names).map_err(|e| e.to_string())?;
    params.distinguished_name.push(DnType::CommonName, cn);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    if server {
        params
            .extended_key_usages
            .push(ExtendedKeyUsagePurpose::ServerAuth);
    }
    (params.not_before, params.not_after) = days(LEAF_DAYS);
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params.signed_by(&key, &ca).map_err(|e| e.to_string())?;
    write_new(&dir.join(format!("{file}.key")), &key.serialize_pem(), true)?;
    let pem = dir.join(format!("{file}.pem"));
    write_new(&pem, &cert.pem(), false)?;
    Ok(pem)
}

/// Member `id`'s certificate, valid for `xce-node-<id>` and `hosts`.
pub fn node(dir: &Path, id: NodeId, hosts: &[String]) -> Result<PathBuf, String> {
    let name = crate::base::tls::node_name(id);
    let mut names = vec![name.clone()];
    names.extend(hosts.iter().filter(|h| !h.is_empty()).cloned());
    leaf(dir, &name, names, true)
}

/// A client identity's certificate; `name` must say a role ([`auth::Identity::parse`]).
pub fn identity(dir: &Path, name: &str) -> Result<PathBuf, String> {
    auth::Identity::parse(name).ok_or_else(|| {
        format!("{name:?} says no role: admin, scheduler, worker-HOST or user-NAME")
    })?;
    leaf(dir, name, vec![name.to_string()], false)
}

/// What `cluster --tls DIR` needs: a CA, `n` members on loopback, the local identities.
/// Reuses whatever `dir` already holds.
pub fn local(dir: &Path, n: u16) -> Result<(), String> {
    if !dir.join("ca.pem").exists() {
        init(dir)?;
    }
    for id in 1..=n as NodeId {
        let name = crate::base::tls::node_name(id);
        if !dir.join(format!("{name}.pem")).exists() {
            node(dir, id, &["127.0.0.1".into(), "localhost".into()])?;
        }
    }
    for who in LOCAL_IDENTITIES {
        if !dir.join(format!("{who}.pem")).exists() {
            identity(dir, who)?;
        }
    }
    Ok(())
}

/// `xce-controller pki …`.
pub fn main(args: &[String]) -> i32 {
    let res = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["init", dir] => init(Path::new(dir)).map(|()| format!("CA and token key in {dir}")),
        ["node", dir, id, hosts] => match id.parse::<NodeId>() {
            Ok(id) if id > 0 => {
                let hosts: Vec<String> = hosts.split(',').map(|h| h.trim().to_string()).collect();
                node(Path::new(dir), id, &hosts).map(|p| p.display().to_string())
            }
            _ => Err(format!("bad node id {id:?}")),
        },
        ["identity", dir, name] => identity(Path::new(dir), name).map(|p| p.display().to_string()),
        ["token", dir, name] => token(Path::new(dir), name, TOKEN_DAYS),
        ["token", dir, name, d] => match d.parse() {
            Ok(d) => token(Path::new(dir), name, d),
            Err(_) => Err(format!("bad number of days {d:?}")),
        },
        ["local", dir, n] => match n.parse::<u16>() {
            Ok(n) if (1..=8).contains(&n) => {
                local(Path::new(dir), n).map(|()| format!("cluster certificates in {dir}"))
            }
            _ => Err(format!("bad number of nodes {n:?}")),
        },
        _ => {
            eprintln!("{USAGE}");
            return 2;
        }
    };
    match res {
        Ok(out) => {
            println!("{out}");
            0
        }
        Err(e) => {
            eprintln!("xce-controller pki: {e}");
            1
        }
    }
}

fn token(dir: &Path, name: &str, days: i64) -> Result<String, String> {
    let key = auth::TokenKey::load(&dir.join("token.key"))?;
    auth::Identity::parse(name).ok_or_else(|| {
        format!("{name:?} says no role: admin, scheduler, worker-HOST or user-NAME")
    })?;
    let expires = time::OffsetDateTime::now_utc().unix_timestamp() + days * 86_400;
    Ok(key.mint(name, expires))
}
