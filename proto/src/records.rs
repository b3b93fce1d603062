//! TLS 1.3 application records after the handshake (P15): rustls does the handshake
//! (certificates, identities, keys) and, through its kernel-connection API, key updates and
//! session tickets; this module only frames records around rustls's own record protection
//! (its `MessageEncrypter`/`MessageDecrypter` for the negotiated suite: nonce, additional data,
//! padding, content type, tag). What it saves against a buffered rustls connection is the
//! per-record state machine, one buffer copy and two allocations each way: a record is
//! decrypted in place in the caller's buffer and its plaintext appended straight to the
//! caller's plaintext buffer.
//!
//! Used by the library's `transport/conn.rs` (`Connection`) and by the controller's client
//! port (`base/tls.rs`, `ServerTls`). Sans I/O: the caller reads and writes the socket.
//!
//! What arrives after the handshake, and what happens to it:
//! - application data: appended to the plaintext;
//! - a `close_notify` alert: the end of the peer's data (later bytes are ignored);
//!   `user_canceled`: ignored; any other alert: `Error::AlertReceived`;
//! - handshake messages (possibly split across records, at most [`MAX_HANDSHAKE`] bytes
//!   buffered): `NewSessionTicket` (to a client: stored by rustls for resumption), `KeyUpdate`
//!   (the receive keys change; when the peer asks, ours change too after telling it); any
//!   other: an error;
//! - a record that does not decrypt, is too long, or carries anything else: an error, and the
//!   caller sends [`Records::alert_for`] before closing.
//!
//! Sequence numbers: before the suite's confidentiality limit our send keys are updated
//! (a `KeyUpdate`, as rustls does); a receive sequence that would wrap is an error.
//!
//! Closing: the callers send [`Records::close_notify`] when they close a healthy connection
//! (RFC 8446 6.1), and nothing after a fatal alert.
//!
//! Why by hand, and not rustls's unbuffered API doing the records too (issue 28, decided with
//! these, all in the repository):
//! - what it saves, measured side by side in one run (`xce-records`, whose code is at
//!   `git show e3211f0:proof/src/bench/records.rs`; proof/BENCH.md: P1's 104-byte request
//!   and 272-byte reply, alternating batches): about 0.5 µs per round trip, both ends
//!   together — 0.35–0.55 µs of CPU in memory (records.rs 0.8–1.0 µs, the unbuffered API
//!   1.1–1.5 µs, faster in every round of 40), 0.43–0.68 µs over TCP loopback (9.8 against
//!   10.5 µs at the median on one CPU; faster in 25–39 rounds of 40).
//!   That is about a third of what TLS costs a round trip at all (plain TCP is 1.1 µs faster
//!   than records.rs); P15 allows TLS 10% of a 14–15 µs `hello`, and it takes about 5% with
//!   this layer (proof/BENCH.md). rustls 0.23's unbuffered API still copies each record's
//!   plaintext into a buffer of its own and runs its state machine per record; the buffered
//!   connection costs about as much again;
//! - interoperability with an independent implementation (proof/tests/tls_interop.rs, in the
//!   test command): OpenSSL 3's `s_server` against the library and `s_client` against the
//!   controller's client port — data both ways, key updates OpenSSL starts (asking for ours or
//!   not) and key updates we start, session tickets taken and resumption, `close_notify` both
//!   ways, a record cut short by the peer's close (a clean error at once). It found that
//!   neither end sent `close_notify`; both do now;
//! - a fuzz target for [`Records::open`] (fuzz/, `records_open`; its harness,
//!   `records/fuzzing.rs`, is also a proptest in `cargo test`): records sealed under the right
//!   keys and mangled, split across reads anywhere; no panic, memory bounded by what arrived,
//!   the same outcome however the bytes are split. About 900,000 cases under libFuzzer found
//!   nothing.
//!
//! To look at again when rustls's unbuffered API decrypts in place and hands out borrowed
//! plaintext (its `ReadTraffic` says it means to): then the saving may go, and this file with
//! it — `xce-records` (above) answers in one run.

use rustls::crypto::cipher::{
    InboundOpaqueMessage, MessageDecrypter, MessageEncrypter, OutboundPlainMessage,
};
use rustls::kernel::KernelConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncodeTlsData};
use rustls::{
    AlertDescription, ConnectionTrafficSecrets, ContentType, Error, ExtractedSecrets,
    HandshakeType, ProtocolVersion, SupportedCipherSuite,
};

/// Plaintext bytes per record (TLS: 2^14).
pub const MAX_FRAGMENT: usize = 16 * 1024;
/// Ciphertext bytes a TLS 1.3 record may carry (2^14 + 256).
pub const MAX_CIPHERTEXT: usize = MAX_FRAGMENT + 256;
/// Record header bytes.
pub const HEADER: usize = 5;
/// A whole record at its largest.
pub const MAX_RECORD: usize = HEADER + MAX_CIPHERTEXT;
/// Post-handshake handshake bytes buffered while a message is incomplete (as rustls: 64 KiB).
pub const MAX_HANDSHAKE: usize = 0xffff;

/// Appends what rustls has to send in a handshake state ([`EncodeTlsData`]) to `out`, growing
/// it as rustls asks. Shared by the library's and the controller's handshakes.
pub fn encode_handshake<Data>(
    s: &mut EncodeTlsData<'_, Data>,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let at = out.len();
    out.resize(at + 4096, 0);
    let n = match s.encode(&mut out[at..]) {
        Ok(n) => n,
        Err(EncodeError::InsufficientSize(e)) => {
            out.resize(at + e.required_size, 0);
            s.encode(&mut out[at..])
                .map_err(|e| Error::General(e.to_string()))?
        }
        Err(e) => return Err(Error::General(e.to_string())),
    };
    out.truncate(at + n);
    Ok(())
}

/// The alert rustls queued after a handshake error, encoded (empty if there is none): pass the
/// state of one more `process_tls_records` call; the caller sends it, best effort, and closes.
pub fn handshake_alert<Data>(state: Result<ConnectionState<'_, '_, Data>, Error>) -> Vec<u8> {
    let mut out = Vec::new();
    if let Ok(ConnectionState::EncodeTlsData(mut s)) = state {
        if encode_handshake(&mut s, &mut out).is_err() {
            out.clear();
        }
    }
    out
}

/// What a record layer needs of its kernel connection: key updates for both ends, session
/// tickets for a client.
pub trait Kernel {
    fn update_tx(&mut self) -> Result<ConnectionTrafficSecrets, Error>;
    fn update_rx(&mut self) -> Result<ConnectionTrafficSecrets, Error>;
    /// A `NewSessionTicket` body (a server refuses it).
    fn session_ticket(&mut self, body: &[u8]) -> Result<(), Error>;
    fn suite(&self) -> SupportedCipherSuite;
}

impl Kernel for KernelConnection<rustls::client::ClientConnectionData> {
    fn update_tx(&mut self) -> Result<ConnectionTrafficSecrets, Error> {
        self.update_tx_secret().map(|(_, s)| s)
    }
    fn update_rx(&mut self) -> Result<ConnectionTrafficSecrets, Error> {
        self.update_rx_secret().map(|(_, s)| s)
    }
    fn session_ticket(&mut self, body: &[u8]) -> Result<(), Error> {
        self.handle_new_session_ticket(body)
    }
    fn suite(&self) -> SupportedCipherSuite {
        self.negotiated_cipher_suite()
    }
}

impl Kernel for KernelConnection<rustls::server::ServerConnectionData> {
    fn update_tx(&mut self) -> Result<ConnectionTrafficSecrets, Error> {
        self.update_tx_secret().map(|(_, s)| s)
    }
    fn update_rx(&mut self) -> Result<ConnectionTrafficSecrets, Error> {
        self.update_rx_secret().map(|(_, s)| s)
    }
    fn session_ticket(&mut self, _: &[u8]) -> Result<(), Error> {
        Err(unexpected())
    }
    fn suite(&self) -> SupportedCipherSuite {
        self.negotiated_cipher_suite()
    }
}

/// The body length a record header `h` announces, once its type and version are checked:
/// before waiting for the body, so a bogus length is refused at once.
fn record_len(h: &[u8]) -> Result<usize, Error> {
    let len = u16::from_be_bytes([h[3], h[4]]) as usize;
    if h[0] != u8::from(ContentType::ApplicationData) {
        return Err(Error::InappropriateMessage {
            expect_types: vec![ContentType::ApplicationData],
            got_type: ContentType::from(h[0]),
        });
    }
    if h[1] != 3 || len > MAX_CIPHERTEXT {
        return Err(if len > MAX_CIPHERTEXT {
            Error::PeerSentOversizedRecord
        } else {
            Error::InvalidMessage(rustls::InvalidMessage::UnknownProtocolVersion)
        });
    }
    Ok(len)
}

fn unexpected() -> Error {
    Error::InappropriateMessage {
        expect_types: vec![ContentType::ApplicationData],
        got_type: ContentType::Handshake,
    }
}

/// What [`Records::open`] did with the bytes it was given.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Opened {
    /// Bytes of whole records consumed from the front of the input (the rest is an
    /// incomplete record: keep it and append what arrives next).
    pub consumed: usize,
    /// The peer sent `close_notify`: no more data will come.
    pub closed: bool,
}

/// One direction's protection: rustls's encrypter or decrypter and the next sequence number.
pub struct Records<K: Kernel> {
    kernel: K,
    enc: Box<dyn MessageEncrypter>,
    dec: Box<dyn MessageDecrypter>,
    tx_seq: u64,
    rx_seq: u64,
    /// Records sent under one key before it is updated.
    tx_limit: u64,
    /// An incomplete post-handshake message.
    hs: Vec<u8>,
    closed: bool,
    /// rustls's (and BoringSSL's) guards against a peer that keeps us busy: key updates
    /// without data in between, and `user_canceled` warnings over the connection's life.
    key_updates_left: u8,
    warnings_left: u8,
}

/// Key updates allowed in a row without application data (as rustls).
const KEY_UPDATES_IN_A_ROW: u8 = 32;
/// Warning alerts allowed over a connection (as rustls).
const WARNING_ALERTS: u8 = 4;

fn keys(
    s: ConnectionTrafficSecrets,
) -> (rustls::crypto::cipher::AeadKey, rustls::crypto::cipher::Iv) {
    match s {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
        | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (key, iv),
        #[allow(unreachable_patterns)]
        _ => unreachable!("a TLS 1.3 suite's traffic secrets"),
    }
}

impl<K: Kernel> Records<K> {
    /// The record layer of a connection whose handshake is complete (TLS 1.3 only: else
    /// `Error::General`).
    pub fn new(secrets: ExtractedSecrets, kernel: K) -> Result<Records<K>, Error> {
        let suite = kernel
            .suite()
            .tls13()
            .ok_or_else(|| Error::General("not TLS 1.3".into()))?;
        let (tx_seq, tx) = secrets.tx;
        let (rx_seq, rx) = secrets.rx;
        let (tk, ti) = keys(tx);
        let (rk, ri) = keys(rx);
        Ok(Records {
            enc: suite.aead_alg.encrypter(tk, ti),
            dec: suite.aead_alg.decrypter(rk, ri),
            kernel,
            tx_seq,
            rx_seq,
            // rustls refreshes at the suite's limit and refuses past it; this is well before.
            tx_limit: suite.common.confidentiality_limit.min(1 << 48) / 2,
            hs: Vec::new(),
            closed: false,
            key_updates_left: KEY_UPDATES_IN_A_ROW,
            warnings_left: WARNING_ALERTS,
        })
    }

    /// Whether the peer sent `close_notify`.
    pub fn peer_closed(&self) -> bool {
        self.closed
    }

    fn seal_one(&mut self, typ: ContentType, plain: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        let m = OutboundPlainMessage {
            typ,
            version: ProtocolVersion::TLSv1_2,
            payload: plain.into(),
        };
        let rec = self.enc.encrypt(m, self.tx_seq)?;
        self.tx_seq += 1;
        out.extend_from_slice(&rec.encode());
        Ok(())
    }

    /// Appends `plain` to `out` as application-data records of at most [`MAX_FRAGMENT`]
    /// bytes (none for an empty `plain`). Before the send keys reach their limit, a
    /// `KeyUpdate` goes first and the keys change.
    pub fn seal(&mut self, plain: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        for chunk in plain.chunks(MAX_FRAGMENT) {
            if self.tx_seq >= self.tx_limit {
                self.update_tx(false, out)?;
            }
            self.seal_one(ContentType::ApplicationData, chunk, out)?;
        }
        Ok(())
    }

    /// Updates the send keys (a `KeyUpdate` first) once `records` records went out under
    /// them, instead of at half the suite's confidentiality limit (at least 1). Only ever
    /// lowers how long a key lives; the interoperability tests use it to make us update.
    pub fn update_keys_after(&mut self, records: u64) {
        self.tx_limit = records.clamp(1, self.tx_limit);
    }

    /// Test hook: a key update asking the peer for one.
    #[cfg(test)]
    fn request_key_update(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        self.update_tx(true, out)
    }

    /// Sends a `KeyUpdate` (asking the peer to update too if `request`) and changes the send
    /// keys.
    fn update_tx(&mut self, request: bool, out: &mut Vec<u8>) -> Result<(), Error> {
        let msg = [
            u8::from(HandshakeType::KeyUpdate),
            0,
            0,
            1,
            u8::from(request),
        ];
        self.seal_one(ContentType::Handshake, &msg, out)?;
        self.rekey_tx()
    }

    /// The send keys' next generation (after our `KeyUpdate` went out).
    fn rekey_tx(&mut self) -> Result<(), Error> {
        let suite = self.kernel.suite().tls13().expect("TLS 1.3");
        let (k, iv) = keys(self.kernel.update_tx()?);
        self.enc = suite.aead_alg.encrypter(k, iv);
        self.tx_seq = 0;
        Ok(())
    }

    /// A `close_notify` alert, appended to `out`.
    pub fn close_notify(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        self.alert(AlertDescription::CloseNotify, out)
    }

    /// A fatal alert (or `close_notify`), appended to `out`.
    pub fn alert(&mut self, desc: AlertDescription, out: &mut Vec<u8>) -> Result<(), Error> {
        let level = if desc == AlertDescription::CloseNotify {
            1
        } else {
            2
        };
        self.seal_one(ContentType::Alert, &[level, u8::from(desc)], out)
    }

    /// The alert to send for an error [`Records::open`] returned.
    pub fn alert_for(e: &Error) -> AlertDescription {
        match e {
            Error::DecryptError => AlertDescription::BadRecordMac,
            Error::PeerSentOversizedRecord => AlertDescription::RecordOverflow,
            Error::InvalidMessage(_) => AlertDescription::DecodeError,
            _ => AlertDescription::UnexpectedMessage,
        }
    }

    /// Decrypts the whole records at the front of `input` (in place), appending their
    /// application data to `plain`; an answer the peer asked for (a `KeyUpdate`) is appended
    /// to `out`, to be sent. Stops at an incomplete record, and after `close_notify`.
    pub fn open(
        &mut self,
        input: &mut [u8],
        plain: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<Opened, Error> {
        let mut at = 0;
        while !self.closed && input.len() - at >= HEADER {
            let len = record_len(&input[at..at + HEADER])?;
            if input.len() - at < HEADER + len {
                break;
            }
            if self.rx_seq == u64::MAX {
                return Err(Error::DecryptError);
            }
            let body = &mut input[at + HEADER..at + HEADER + len];
            let m = InboundOpaqueMessage::new(
                ContentType::ApplicationData,
                ProtocolVersion::TLSv1_2,
                body,
            );
            let p = self.dec.decrypt(m, self.rx_seq)?;
            self.rx_seq += 1;
            at += HEADER + len;
            self.opened(p.typ, p.payload, plain, out)?;
        }
        Ok(Opened {
            consumed: at,
            closed: self.closed,
        })
    }

    /// What one decrypted record of type `typ` carried: data to `plain`, an alert, or
    /// handshake bytes (a `KeyUpdate`'s answer to `out`).
    fn opened(
        &mut self,
        typ: ContentType,
        payload: &[u8],
        plain: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        match typ {
            ContentType::ApplicationData => {
                if !self.hs.is_empty() {
                    // A handshake message may not be interleaved with data.
                    return Err(unexpected());
                }
                plain.extend_from_slice(payload);
                self.key_updates_left = KEY_UPDATES_IN_A_ROW;
            }
            ContentType::Alert => match payload {
                [_, d] if AlertDescription::from(*d) == AlertDescription::CloseNotify => {
                    self.closed = true;
                }
                [_, d] if AlertDescription::from(*d) == AlertDescription::UserCanceled => {
                    self.warnings_left =
                        self.warnings_left
                            .checked_sub(1)
                            .ok_or(Error::PeerMisbehaved(
                                rustls::PeerMisbehaved::TooManyWarningAlertsReceived,
                            ))?;
                }
                [_, d] => return Err(Error::AlertReceived(AlertDescription::from(*d))),
                _ => {
                    return Err(Error::InvalidMessage(
                        rustls::InvalidMessage::MessageTooShort,
                    ))
                }
            },
            ContentType::Handshake => {
                if self.hs.len() + payload.len() > MAX_HANDSHAKE {
                    return Err(Error::InvalidMessage(
                        rustls::InvalidMessage::HandshakePayloadTooLarge,
                    ));
                }
                self.hs.extend_from_slice(payload);
                self.handshake_messages(out)?;
            }
            other => {
                return Err(Error::InappropriateMessage {
                    expect_types: vec![ContentType::ApplicationData],
                    got_type: other,
                })
            }
        }
        Ok(())
    }

    /// Handles the complete messages buffered in `hs`.
    fn handshake_messages(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        let mut at = 0;
        while self.hs.len() - at >= 4 {
            let h = &self.hs[at..at + 4];
            let len = u32::from_be_bytes([0, h[1], h[2], h[3]]) as usize;
            if self.hs.len() - at - 4 < len {
                break;
            }
            let typ = HandshakeType::from(h[0]);
            let body = at + 4..at + 4 + len;
            at += 4 + len;
            match typ {
                HandshakeType::NewSessionTicket => {
                    let b = self.hs[body].to_vec();
                    self.kernel.session_ticket(&b)?;
                }
                HandshakeType::KeyUpdate => {
                    // RFC 8446 5.1: a key change must end a record.
                    if at != self.hs.len() || len != 1 {
                        return Err(unexpected());
                    }
                    let requested = match self.hs[body.start] {
                        0 => false,
                        1 => true,
                        _ => {
                            return Err(Error::InvalidMessage(
                                rustls::InvalidMessage::InvalidKeyUpdate,
                            ))
                        }
                    };
                    self.key_updates_left =
                        self.key_updates_left
                            .checked_sub(1)
                            .ok_or(Error::PeerMisbehaved(
                                rustls::PeerMisbehaved::TooManyKeyUpdateRequests,
                            ))?;
                    let suite = self.kernel.suite().tls13().expect("TLS 1.3");
                    let (k, iv) = keys(self.kernel.update_rx()?);
                    self.dec = suite.aead_alg.decrypter(k, iv);
                    self.rx_seq = 0;
                    if requested {
                        self.update_tx(false, out)?;
                    }
                }
                _ => return Err(unexpected()),
            }
        }
        self.hs.drain(..at);
        Ok(())
    }
}

/// The decoder under hostile input: the harness of the `records_open` fuzz target and of
/// its stable property test (tests and fuzzing builds only).
#[cfg(any(test, fuzzing))]
pub mod fuzzing;

/// A client and a server configuration for `localhost` (self-signed, keys extractable): for
/// the tests of this layer and of its users (feature `testing`).
#[cfg(any(test, feature = "testing"))]
pub fn test_configs() -> (
    std::sync::Arc<rustls::ClientConfig>,
    std::sync::Arc<rustls::ServerConfig>,
) {
    use std::sync::Arc;
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ck.cert.der().clone()).unwrap();
    let mut client = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.enable_secret_extraction = true;
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![ck.cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into()),
        )
        .unwrap();
    server.enable_secret_extraction = true;
    (Arc::new(client), Arc::new(server))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
    use rustls::server::{ServerConnectionData, UnbufferedServerConnection};

    type Client = Records<KernelConnection<ClientConnectionData>>;
    type Server = Records<KernelConnection<ServerConnectionData>>;

    /// One step of an unbuffered connection: bytes to send (appended to `out`), whether it
    /// reached `WriteTraffic`.
    macro_rules! step {
        ($conn:expr, $inb:expr, $out:expr) => {{
            let st = $conn.process_tls_records(&mut $inb[..]);
            let discard = st.discard;
            let mut ready = false;
            let mut blocked = false;
            match st.state.unwrap() {
                ConnectionState::EncodeTlsData(mut e) => {
                    let mut b = vec![0u8; 16 * 1024];
                    let n = e.encode(&mut b).unwrap();
                    $out.extend_from_slice(&b[..n]);
                }
                ConnectionState::TransmitTlsData(t) => t.done(),
                ConnectionState::BlockedHandshake => blocked = true,
                ConnectionState::WriteTraffic(_) => ready = true,
                other => panic!("unexpected {other:?}"),
            }
            $inb.drain(..discard);
            (ready, blocked)
        }};
    }

    /// A handshake in memory; the record layers of both ends, and what the server sent after
    /// its handshake (its session tickets) not yet given to the client.
    fn pair() -> (Client, Server, Vec<u8>) {
        let (cc, sc) = test_configs();
        let mut c = UnbufferedClientConnection::new(cc, "localhost".try_into().unwrap()).unwrap();
        let mut s = UnbufferedServerConnection::new(sc).unwrap();
        let (mut to_s, mut to_c) = (Vec::new(), Vec::new());
        let (mut c_ready, mut s_ready) = (false, false);
        for _ in 0..200 {
            while !c_ready {
                let (r, blocked) = step!(c, to_c, to_s);
                c_ready = r;
                if blocked {
                    break;
                }
            }
            while !s_ready {
                let (r, blocked) = step!(s, to_s, to_c);
                s_ready = r;
                if blocked {
                    break;
                }
            }
            if c_ready && s_ready {
                break;
            }
        }
        assert!(c_ready && s_ready, "no handshake");
        assert!(to_s.is_empty());
        let (cs, ck) = c.dangerous_into_kernel_connection().unwrap();
        let (ss, sk) = s.dangerous_into_kernel_connection().unwrap();
        (
            Records::new(cs, ck).unwrap(),
            Records::new(ss, sk).unwrap(),
            to_c,
        )
    }

    /// `r.open(wire)`, its plaintext and answers dropped.
    fn open<K: Kernel>(r: &mut Records<K>, wire: &mut [u8]) -> Result<Opened, Error> {
        r.open(wire, &mut Vec::new(), &mut Vec::new())
    }

    /// Feeds `wire` to `r` in pieces of `piece` bytes, as reads would: what was decrypted,
    /// and what it had to send back.
    fn feed<K: Kernel>(r: &mut Records<K>, wire: &[u8], piece: usize) -> (Vec<u8>, Vec<u8>) {
        let (mut plain, mut out, mut buf) = (Vec::new(), Vec::new(), Vec::new());
        for part in wire.chunks(piece.max(1)) {
            buf.extend_from_slice(part);
            let o = r.open(&mut buf, &mut plain, &mut out).unwrap();
            buf.drain(..o.consumed);
        }
        assert!(buf.is_empty(), "{} bytes left", buf.len());
        (plain, out)
    }

    #[test]
    fn records_split_across_reads_and_several_in_one_read() {
        let (mut c, mut s, tickets) = pair();
        // The session tickets: taken by the client, no plaintext.
        assert!(!tickets.is_empty());
        assert_eq!(feed(&mut c, &tickets, 7), (Vec::new(), Vec::new()));
        let big: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        for piece in [1, 5, 6, 100, 16 * 1024 + 300, 1 << 20] {
            let mut wire = Vec::new();
            c.seal(b"hello", &mut wire).unwrap();
            c.seal(&big, &mut wire).unwrap(); // three records
            c.seal(b"", &mut wire).unwrap(); // none
            c.seal(b"bye", &mut wire).unwrap();
            let (plain, out) = feed(&mut s, &wire, piece);
            assert_eq!(
                plain,
                [&b"hello"[..], &big, b"bye"].concat(),
                "piece {piece}"
            );
            assert!(out.is_empty());
            let mut back = Vec::new();
            s.seal(&plain, &mut back).unwrap();
            assert_eq!(feed(&mut c, &back, piece).0, plain);
        }
    }

    #[test]
    fn a_record_that_does_not_decrypt_is_refused() {
        let (mut c, mut s, _) = pair();
        let mut wire = Vec::new();
        c.seal(b"request", &mut wire).unwrap();
        let last = wire.len() - 1;
        wire[last] ^= 1;
        let e = open(&mut s, &mut wire).unwrap_err();
        assert_eq!(e, Error::DecryptError);
        assert_eq!(Server::alert_for(&e), AlertDescription::BadRecordMac);
        // A record sealed for another position does not decrypt either (sequence numbers).
        let (mut c, mut s, _) = pair();
        let (mut one, mut two) = (Vec::new(), Vec::new());
        c.seal(b"one", &mut one).unwrap();
        c.seal(b"two", &mut two).unwrap();
        let e = open(&mut s, &mut two);
        assert_eq!(e.unwrap_err(), Error::DecryptError);
        // The alert the server sends decrypts at the client as that alert (after the
        // session tickets that came first).
        let (mut c2, mut s2, tickets) = pair();
        feed(&mut c2, &tickets, 1 << 20);
        let mut a2 = Vec::new();
        s2.alert(AlertDescription::BadRecordMac, &mut a2).unwrap();
        let e = open(&mut c2, &mut a2);
        assert_eq!(
            e.unwrap_err(),
            Error::AlertReceived(AlertDescription::BadRecordMac)
        );
    }

    #[test]
    fn bad_headers_are_refused_before_the_body() {
        let (_, mut s, _) = pair();
        let mut long = vec![0x17, 3, 3, 0x41, 0x01]; // 16,641 > 2^14 + 256
        assert_eq!(
            open(&mut s, &mut long).unwrap_err(),
            Error::PeerSentOversizedRecord
        );
        let (_, mut s, _) = pair();
        let mut plain_alert = vec![0x15, 3, 3, 0, 2, 2, 40];
        assert!(matches!(
            open(&mut s, &mut plain_alert),
            Err(Error::InappropriateMessage { .. })
        ));
        // An incomplete header or body waits.
        let (mut c, mut s, _) = pair();
        let mut wire = Vec::new();
        c.seal(b"x", &mut wire).unwrap();
        for cut in [0, 3, 5, wire.len() - 1] {
            let o = open(&mut s, &mut wire[..cut]);
            assert_eq!(o.unwrap(), Opened::default(), "cut {cut}");
        }
    }

    #[test]
    fn close_notify_ends_the_data() {
        let (mut c, mut s, _) = pair();
        let mut wire = Vec::new();
        c.seal(b"last", &mut wire).unwrap();
        c.close_notify(&mut wire).unwrap();
        c.seal(b"ignored", &mut wire).unwrap();
        let mut plain = Vec::new();
        let o = s.open(&mut wire, &mut plain, &mut Vec::new()).unwrap();
        assert!(o.closed && s.peer_closed());
        assert_eq!(plain, b"last");
        let o = s.open(&mut wire[o.consumed..], &mut plain, &mut Vec::new());
        assert_eq!(
            o.unwrap(),
            Opened {
                consumed: 0,
                closed: true
            }
        );
    }

    #[test]
    fn key_updates_both_ways() {
        let (mut c, mut s, tickets) = pair();
        feed(&mut c, &tickets, 1 << 20);
        // The server asks for an update: the client answers with its own, and both go on.
        let mut wire = Vec::new();
        s.request_key_update(&mut wire).unwrap();
        s.seal(b"after", &mut wire).unwrap();
        let (plain, answer) = feed(&mut c, &wire, 3);
        assert_eq!(plain, b"after");
        assert!(!answer.is_empty(), "no answer to the request");
        let mut wire = answer;
        c.seal(b"from the client", &mut wire).unwrap();
        assert_eq!(feed(&mut s, &wire, 2).0, b"from the client");
        // Our own update before the limit: the peer follows.
        c.update_keys_after(3);
        let mut wire = Vec::new();
        for i in 0..10u8 {
            c.seal(&[i], &mut wire).unwrap();
        }
        let (plain, out) = feed(&mut s, &wire, 11);
        assert_eq!(plain, (0..10).collect::<Vec<u8>>());
        assert!(
            out.is_empty(),
            "an update that was not requested needs no answer"
        );
        // Key updates without data in between: 32 pass, the 33rd is refused (as rustls).
        let mut wire = Vec::new();
        for _ in 0..32 {
            c.update_tx(false, &mut wire).unwrap();
        }
        assert!(feed(&mut s, &wire, 1 << 20).0.is_empty());
        let mut wire = Vec::new();
        c.update_tx(false, &mut wire).unwrap();
        let e = open(&mut s, &mut wire);
        assert_eq!(
            e.unwrap_err(),
            Error::PeerMisbehaved(rustls::PeerMisbehaved::TooManyKeyUpdateRequests)
        );
    }

    #[test]
    fn user_canceled_warnings_are_ignored_four_times() {
        let (mut c, mut s, _) = pair();
        let mut wire = Vec::new();
        for _ in 0..4 {
            c.alert(AlertDescription::UserCanceled, &mut wire).unwrap();
        }
        c.seal(b"still here", &mut wire).unwrap();
        assert_eq!(feed(&mut s, &wire, 9).0, b"still here");
        let mut wire = Vec::new();
        c.alert(AlertDescription::UserCanceled, &mut wire).unwrap();
        assert!(open(&mut s, &mut wire).is_err());
    }

    #[test]
    fn a_key_update_must_end_its_record_and_a_server_takes_no_ticket() {
        // A key update and data in one record: refused.
        let (mut c, mut s, _) = pair();
        let mut rec = Vec::new();
        let msg = [u8::from(HandshakeType::KeyUpdate), 0, 0, 1, 0, 0xaa];
        c.seal_one(ContentType::Handshake, &msg, &mut rec).unwrap();
        assert!(open(&mut s, &mut rec).is_err());
        // A session ticket sent to a server: refused.
        let (mut c, mut s, _) = pair();
        let mut rec = Vec::new();
        let msg = [u8::from(HandshakeType::NewSessionTicket), 0, 0, 0];
        c.seal_one(ContentType::Handshake, &msg, &mut rec).unwrap();
        assert!(open(&mut s, &mut rec).is_err());
        // A handshake message split across records is reassembled (here: refused as a
        // ticket, once whole); data between its parts is refused.
        let (mut c, mut s, _) = pair();
        let mut wire = Vec::new();
        c.seal_one(
            ContentType::Handshake,
            &[u8::from(HandshakeType::KeyUpdate), 0],
            &mut wire,
        )
        .unwrap();
        c.seal(b"data", &mut wire).unwrap();
        assert!(open(&mut s, &mut wire).is_err());
    }
}
