//! TLS 1.3 application records after the handshake (P15): rustls does the handshake
//! (certificates, identities, keys) and, through its kernel-connection API, key updates and
//! session tickets; this module only frames records around rustls's own record protection
//! (its `MessageEncrypter`/`MessageDecrypter` for the negotiated suite: nonce, additional data,
//! padding, content type, tag). What it saves against a buffered rustls connection is the
//! per-record state machine, one buffer copy and two allocations each way: a record is
//! decrypted in place in the caller's buffer and its plaintext appended straight to the
//! caller's plaintext buffer.
//!
//! Used by the library's [`super::conn::Connection`] and by the controller's client port. Sans
//! I/O: the caller reads and writes the socket.
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

use rustls::crypto::cipher::{
    InboundOpaqueMessage, MessageDecrypter, MessageEncrypter, OutboundPlainMessage,
};
use rustls::kernel::KernelConnection;
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
}

fn keys(s: ConnectionTrafficSecrets) -> (rustls::crypto::cipher::AeadKey, rustls::crypto::cipher::Iv) {
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

    /// Sends a `KeyUpdate` (asking the peer to update too if `request`) and changes the send
    /// keys.
    fn update_tx(&mut self, request: bool, out: &mut Vec<u8>) -> Result<(), Error> {
        let msg = [u8::from(HandshakeType::KeyUpdate), 0, 0, 1, u8::from(request)];
        self.seal_one(ContentType::Handshake, &msg, out)?;
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
        let level = if desc == AlertDescription::CloseNotify { 1 } else { 2 };
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
            let h = &input[at..at + HEADER];
            let len = u16::from_be_bytes([h[3], h[4]]) as usize;
            // Checked before waiting for the body: a bogus length is refused at once.
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
            match p.typ {
                ContentType::ApplicationData => {
                    if !self.hs.is_empty() {
                        // A handshake message may not be interleaved with data.
                        return Err(unexpected());
                    }
                    plain.extend_from_slice(p.payload);
                }
                ContentType::Alert => match p.payload {
                    [_, d] if AlertDescription::from(*d) == AlertDescription::CloseNotify => {
                        self.closed = true;
                    }
                    [_, d] if AlertDescription::from(*d) == AlertDescription::UserCanceled => {}
                    [_, d] => return Err(Error::AlertReceived(AlertDescription::from(*d))),
                    _ => {
                        return Err(Error::InvalidMessage(
                            rustls::InvalidMessage::MessageTooShort,
                        ))
                    }
                },
                ContentType::Handshake => {
                    if self.hs.len() + p.payload.len() > MAX_HANDSHAKE {
                        return Err(Error::InvalidMessage(
                            rustls::InvalidMessage::HandshakePayloadTooLarge,
                        ));
                    }
                    self.hs.extend_from_slice(p.payload);
                    self.handshake_messages(out)?;
                }
                other => {
                    return Err(Error::InappropriateMessage {
                        expect_types: vec![ContentType::ApplicationData],
                        got_type: other,
                    })
                }
            }
        }
        Ok(Opened {
            consumed: at,
            closed: self.closed,
        })
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
