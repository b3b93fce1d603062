//! Identities and roles on the client port (C13).
//!
//! A caller's identity comes from its client certificate (the name in its subject alternative
//! name or common name) or from a token in the request (`authToken`), signed with the
//! cluster's token key. The name says the role: `admin`, `scheduler`, `worker-<host>`,
//! `user-<name>`. Who may call which op, and what binds them to its parameters, is declared
//! once per op in the protocol's op table; the client port applies it
//! (`ports/client/authz.rs`).
//!
//! With neither client certificates nor a token key configured, nobody is checked: every
//! caller is admin (a loopback test cluster, as before C13).

use std::path::Path;

use ring::hmac;

/// Longest token accepted, checked before any work: the protocol's bound on `authToken`
/// (both ends; `ports/client/authz.rs` checks the two agree).
pub const MAX_TOKEN_LEN: usize = 4096;

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    Admin,
    Scheduler,
    /// Bound to its host.
    Worker(String),
    /// Bound to its user name.
    User(String),
    /// No certificate and no token, on a cluster that checks.
    Anonymous,
}

/// Characters of a host or user name in an identity.
fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
}

impl Identity {
    /// The identity a name says: `admin`, `scheduler`, `worker-<host>`, `user-<name>`.
    pub fn parse(name: &str) -> Option<Identity> {
        match name {
            "admin" => Some(Identity::Admin),
            "scheduler" => Some(Identity::Scheduler),
            _ => {
                if let Some(h) = name.strip_prefix("worker-").filter(|h| name_ok(h)) {
                    Some(Identity::Worker(h.to_string()))
                } else {
                    name.strip_prefix("user-")
                        .filter(|u| name_ok(u))
                        .map(|u| Identity::User(u.to_string()))
                }
            }
        }
    }

    /// The identity a client certificate names (the first of its names that says a role).
    pub fn of_cert(der: &[u8]) -> Option<Identity> {
        crate::base::tls::cert_names(der)
            .iter()
            .find_map(|n| Identity::parse(n))
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Identity::Admin => f.write_str("admin"),
            Identity::Scheduler => f.write_str("scheduler"),
            Identity::Worker(h) => write!(f, "worker-{h}"),
            Identity::User(u) => write!(f, "user-{u}"),
            Identity::Anonymous => f.write_str("anonymous"),
        }
    }
}

/// The HMAC-SHA256 key tokens are signed with (`pki init` writes it as hex in `token.key`).
pub struct TokenKey(hmac::Key);

/// Token format version prefix.
const TOKEN_PREFIX: &str = "xce1";

/// Bytes of hex text (`None`: not hex, or an odd length).
fn unhex(hex: &str) -> Option<Vec<u8>> {
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect()
}

/// Hex digits of a token's signature (HMAC-SHA256).
const MAC_HEX_LEN: usize = 64;

impl TokenKey {
    pub fn load(path: &Path) -> Result<TokenKey, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        match unhex(text.trim()) {
            Some(b) if b.len() >= 16 => Ok(TokenKey(hmac::Key::new(hmac::HMAC_SHA256, &b))),
            _ => Err(format!(
                "{}: want at least 32 hex digits (pki init writes one)",
                path.display()
            )),
        }
    }

    fn mac(&self, payload: &str) -> String {
        hmac::sign(&self.0, payload.as_bytes())
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// `xce1:<identity>:<expires unix s>:<hex HMAC of the rest>`.
    pub fn mint(&self, name: &str, expires: i64) -> String {
        let payload = format!("{TOKEN_PREFIX}:{name}:{expires}");
        let mac = self.mac(&payload);
        format!("{payload}:{mac}")
    }

    /// The identity a token names, if its signature is good and it has not expired at `now`
    /// (unix s); else why not.
    pub fn verify(&self, token: &str, now: i64) -> Result<Identity, &'static str> {
        // Bounded before any work: a caller's token is at most what the library sends.
        if token.len() > MAX_TOKEN_LEN {
            return Err("token too long");
        }
        let (payload, mac) = token.rsplit_once(':').ok_or("not a token")?;
        if mac.len() != MAC_HEX_LEN {
            return Err("bad token signature");
        }
        let mut parts = payload.splitn(3, ':');
        let (Some(TOKEN_PREFIX), Some(name), Some(expires)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return Err("not a token");
        };
        let mac_bytes = unhex(mac).ok_or("bad token signature")?;
        hmac::verify(&self.0, payload.as_bytes(), &mac_bytes).map_err(|_| "bad token signature")?;
        let expires: i64 = expires.parse().map_err(|_| "not a token")?;
        if now >= expires {
            return Err("token expired");
        }
        Identity::parse(name).ok_or("the token names no role")
    }
}

/// How a node authorizes: off (everyone is admin), or from certificates and tokens.
pub struct Auth {
    /// Whether callers are checked at all.
    pub on: bool,
    pub token_key: Option<TokenKey>,
}

/// A connection's identity from its client certificate. A token is verified on every request
/// that carries one (one HMAC-SHA256 of a few dozen bytes).
pub struct ConnAuth {
    pub cert: Option<Identity>,
}

impl ConnAuth {
    pub fn new(cert: Option<Identity>) -> ConnAuth {
        ConnAuth { cert }
    }

    /// Who sends a request carrying `token`: the token's identity if it carries one, else the
    /// certificate's, else anonymous; everyone is admin when `auth` is off. `Err(why)` for a
    /// bad token.
    pub fn who(&self, auth: &Auth, token: &str) -> Result<Identity, String> {
        if !auth.on {
            return Ok(Identity::Admin);
        }
        if token.is_empty() {
            return Ok(self.cert.clone().unwrap_or(Identity::Anonymous));
        }
        let Some(key) = &auth.token_key else {
            return Err("this cluster takes no tokens".into());
        };
        key.verify(token, crate::base::clock::now_ms() / 1000)
            .map_err(String::from)
    }
}

/// The client id a write of `who` is remembered under in the exactly-once table (C4, C13
/// amended): a client id is bound to the identity that uses it, so that a caller who reuses
/// another's ids (learnt from a log, say) is a different client — it gets its own write
/// applied, never the other's stored reply (issue 27: bob reusing alice's ids got alice's
/// reply, and his write was dropped).
///
/// `admin` (and every caller of a cluster that checks nobody, where everyone is admin) keeps
/// the id it sent, so the table's keys are the ones earlier builds stored (their snapshots and
/// logs, and a write re-sent across an upgrade, find their first reply). Every other identity's
/// id is the first 16 bytes of SHA-256 over a label, the identity's name and the id: the same
/// on every node and in every term (an identity and a client id make one key, whichever node
/// proposes it), and no identity can name another's key — not even admin's, which would need
/// a SHA-256 preimage. The log entry and the state machine are unchanged: the leader proposes
/// the bound id in the entry's `client_id`, as it proposed the sent one before.
pub fn bound_client_id(who: &Identity, client_id: [u8; 16]) -> [u8; 16] {
    if *who == Identity::Admin {
        return client_id;
    }
    let mut d = ring::digest::Context::new(&ring::digest::SHA256);
    d.update(b"xce client id bound to an identity, v1\0");
    d.update(who.to_string().as_bytes());
    d.update(b"\0");
    d.update(&client_id);
    let mut out = [0u8; 16];
    out.copy_from_slice(&d.finish().as_ref()[..16]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bound_client_id(user-alice, [7; 16])`, as this build derives it.
    const PINNED_ALICE_7: &str = "d416ea16ecfac5b73012c3f3b1395afd";

    #[test]
    fn names_say_roles() {
        assert_eq!(Identity::parse("admin"), Some(Identity::Admin));
        assert_eq!(
            Identity::parse("worker-host1.example.com"),
            Some(Identity::Worker("host1.example.com".into()))
        );
        assert_eq!(
            Identity::parse("user-alice"),
            Some(Identity::User("alice".into()))
        );
        for bad in [
            "",
            "user-",
            "worker-",
            "root",
            "user-a:b",
            "xce-node-1",
            "Admin",
        ] {
            assert_eq!(Identity::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn tokens_verify_expire_and_resist_forgery() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        std::fs::write(
            &p,
            "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n",
        )
        .unwrap();
        let k = TokenKey::load(&p).unwrap();
        let t = k.mint("user-alice", 1000);
        assert_eq!(k.verify(&t, 999), Ok(Identity::User("alice".into())));
        assert_eq!(k.verify(&t, 1000), Err("token expired"));
        let forged = t.replace("user-alice", "user-bob");
        assert_eq!(k.verify(&forged, 1), Err("bad token signature"));
        let later = t.replace(":1000:", ":9999:");
        assert_eq!(k.verify(&later, 1), Err("bad token signature"));
        assert_eq!(k.verify("garbage", 1), Err("not a token"));
        // Bounded before any decoding: a huge token, a signature of the wrong length.
        let huge = format!("{t}{}", "0".repeat(1 << 20));
        assert_eq!(k.verify(&huge, 1), Err("token too long"));
        assert_eq!(k.verify(&format!("{t}00"), 1), Err("bad token signature"));
        std::fs::write(&p, "abcd").unwrap();
        assert!(TokenKey::load(&p).is_err());
    }

    /// C13 amended: a client id is bound to its identity. Admin keeps the id as sent (the keys
    /// earlier builds stored); any other identity gets its own key, stable, different for
    /// every identity and every id, and never equal to the id as sent.
    #[test]
    fn client_ids_are_bound_to_identities() {
        let alice = Identity::User("alice".into());
        let bob = Identity::User("bob".into());
        let ids = [[0u8; 16], [7u8; 16], std::array::from_fn(|i| i as u8)];
        for id in ids {
            assert_eq!(bound_client_id(&Identity::Admin, id), id);
            let mut keys = vec![id];
            for who in [
                &alice,
                &bob,
                &Identity::Scheduler,
                &Identity::Worker("h1".into()),
                &Identity::Worker("h2".into()),
                &Identity::User("h1".into()),
            ] {
                let k = bound_client_id(who, id);
                assert_eq!(k, bound_client_id(who, id), "stable");
                assert!(!keys.contains(&k), "{who}: {k:?} collides");
                keys.push(k);
            }
        }
        assert_ne!(
            bound_client_id(&alice, ids[0]),
            bound_client_id(&alice, ids[1])
        );
        // Pinned: every node and every later build derive the same key.
        let k = bound_client_id(&alice, [7u8; 16]);
        let hex: String = k.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, PINNED_ALICE_7);
    }
}
