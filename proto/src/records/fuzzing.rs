//! The record decoder under hostile input (issue 28), shared by the `cargo fuzz` target
//! `records_open` (fuzz/) and the stable property test below (`cargo test`). Compiled only for
//! tests and fuzzing builds (`--cfg fuzzing`, which cargo-fuzz sets), never into the library.
//!
//! An input is a script that builds what a peer sends: records sealed under the right keys
//! (application data, handshake fragments, alerts, any content type, session tickets, key
//! updates — the sealing side follows its own key updates, so later records still decrypt),
//! raw bytes, record headers with any length, bit flips and truncations of what was built, and
//! the points where reads end. That wire is given to [`Records::open`] as `conn.rs` and
//! `ServerTls` give it (a buffer that keeps an incomplete record and appends the next read),
//! once in the script's reads and once in a single read. Checked:
//! - no panic, no endless loop (everything is bounded by the input);
//! - memory follows the bytes that arrived: the plaintext never outgrows the records consumed,
//!   the post-handshake buffer stays within [`MAX_HANDSHAKE`], answers (key updates) stay
//!   within one small record per record consumed;
//! - nothing is consumed past `close_notify` or an error;
//! - how the bytes were split into reads changes nothing: the same plaintext, the same
//!   answers, the same end (error or not, and which);
//! - a script of application data only, unmangled, decrypts to exactly its data.

use rustls::crypto::cipher::{AeadKey, Iv};
use rustls::{
    ConnectionTrafficSecrets, ContentType, Error, ExtractedSecrets, HandshakeType,
    SupportedCipherSuite,
};

use super::{Kernel, Records, HEADER, MAX_FRAGMENT, MAX_HANDSHAKE};

/// A kernel with a known key schedule: generation `g` of direction `d` is a fixed key, so a
/// sealing side and an opening side agree without a handshake (and a run is reproducible).
pub struct FakeKernel {
    /// The directions this end sends and receives in (0 or 1).
    tx_dir: u8,
    rx_dir: u8,
    tx_gen: u8,
    rx_gen: u8,
    /// A client takes session tickets; a server refuses them, as rustls's kernel does.
    client: bool,
    pub tickets: usize,
}

fn secrets(dir: u8, generation: u8) -> ConnectionTrafficSecrets {
    let mut key = [0x5a ^ dir; 32];
    key[0] = generation;
    let mut iv = [0xa5 ^ dir; 12];
    iv[0] = generation;
    ConnectionTrafficSecrets::Aes256Gcm {
        key: AeadKey::from(key),
        iv: Iv::from(iv),
    }
}

impl Kernel for FakeKernel {
    fn update_tx(&mut self) -> Result<ConnectionTrafficSecrets, Error> {
        self.tx_gen = self.tx_gen.wrapping_add(1);
        Ok(secrets(self.tx_dir, self.tx_gen))
    }
    fn update_rx(&mut self) -> Result<ConnectionTrafficSecrets, Error> {
        self.rx_gen = self.rx_gen.wrapping_add(1);
        Ok(secrets(self.rx_dir, self.rx_gen))
    }
    fn session_ticket(&mut self, body: &[u8]) -> Result<(), Error> {
        if !self.client {
            return Err(super::unexpected());
        }
        // rustls parses the ticket; a body too short for its fixed fields is refused there.
        if body.len() < 13 {
            return Err(Error::InvalidMessage(
                rustls::InvalidMessage::MessageTooShort,
            ));
        }
        self.tickets += 1;
        Ok(())
    }
    fn suite(&self) -> SupportedCipherSuite {
        rustls::crypto::ring::cipher_suite::TLS13_AES_256_GCM_SHA384
    }
}

/// The receiving end (a client when `client`) and the peer that seals what it receives.
pub fn pair(client: bool) -> (Records<FakeKernel>, Records<FakeKernel>) {
    let end = |tx: u8, rx: u8, client: bool| {
        Records::new(
            ExtractedSecrets {
                tx: (0, secrets(tx, 0)),
                rx: (0, secrets(rx, 0)),
            },
            FakeKernel {
                tx_dir: tx,
                rx_dir: rx,
                tx_gen: 0,
                rx_gen: 0,
                client,
                tickets: 0,
            },
        )
        .expect("a TLS 1.3 suite")
    };
    (end(0, 1, client), end(1, 0, !client))
}

/// Reads the script.
struct Script<'a> {
    data: &'a [u8],
}

impl Script<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes([self.byte()?, self.byte()?]))
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.data.len());
        let (b, rest) = self.data.split_at(n);
        self.data = rest;
        b
    }
}

/// What a peer sent, built from a script, and where its reads end.
pub struct Wire {
    pub bytes: Vec<u8>,
    pub reads: Vec<usize>,
    /// `Some(data)` while the script sealed only application data and mangled nothing.
    pub clean_data: Option<Vec<u8>>,
}

/// Builds the wire of `data` (see the module's documentation) with `peer` sealing.
pub fn build(data: &[u8], peer: &mut Records<FakeKernel>) -> Wire {
    let mut s = Script { data };
    let mut w = Wire {
        bytes: Vec::new(),
        reads: Vec::new(),
        clean_data: Some(Vec::new()),
    };
    while let Some(op) = s.byte() {
        match op % 12 {
            op @ 0..=1 => data_records(op, &mut s, peer, &mut w),
            op @ 2..=6 => other_records(op, &mut s, peer, &mut w),
            op @ 7..=10 => mangle(op, &mut s, &mut w),
            // A read ends here.
            _ => w.reads.push(w.bytes.len()),
        }
    }
    w
}

impl Wire {
    /// The script did more than seal application data: no exact plaintext to expect.
    fn mangled(&mut self) {
        self.clean_data = None;
    }
}

/// Script ops 0–1: application data records.
fn data_records(op: u8, s: &mut Script<'_>, peer: &mut Records<FakeKernel>, w: &mut Wire) {
    match op {
        // Application data (up to 255 bytes).
        0 => {
            let n = s.byte().unwrap_or(0) as usize;
            let b = s.bytes(n).to_vec();
            let _ = peer.seal_one(ContentType::ApplicationData, &b, &mut w.bytes);
            if let Some(d) = w.clean_data.as_mut() {
                d.extend_from_slice(&b);
            }
        }
        // One record of any size up to a little past the limit: application data, or
        // a handshake fragment that starts a message longer than anything buffered.
        1 => {
            let handshake = s.byte().unwrap_or(0) & 1 == 1;
            let n = s.u16().unwrap_or(0) as usize % (MAX_FRAGMENT + 64);
            let mut b: Vec<u8> = (0..n).map(|i| i as u8).collect();
            if handshake {
                b.iter_mut()
                    .zip([4, 0xff, 0xff, 0xff])
                    .for_each(|(x, h)| *x = h);
                let _ = peer.seal_one(ContentType::Handshake, &b, &mut w.bytes);
                w.mangled();
                return;
            }
            let _ = peer.seal_one(ContentType::ApplicationData, &b, &mut w.bytes);
            match w.clean_data.as_mut() {
                Some(d) if n <= MAX_FRAGMENT => d.extend_from_slice(&b),
                _ => w.mangled(),
            }
        }
        _ => unreachable!("{op}: not one of data_records's"),
    }
}

/// Script ops 2–6: handshake messages, alerts and records of any type.
fn other_records(op: u8, s: &mut Script<'_>, peer: &mut Records<FakeKernel>, w: &mut Wire) {
    match op {
        // A handshake fragment: whatever bytes follow.
        2 => {
            let n = s.byte().unwrap_or(0) as usize;
            let b = s.bytes(n).to_vec();
            let _ = peer.seal_one(ContentType::Handshake, &b, &mut w.bytes);
            w.mangled();
        }
        // A well-formed NewSessionTicket, whole or split over two records.
        3 => {
            let n = s.byte().unwrap_or(0) as usize;
            let split = s.byte().unwrap_or(0) as usize;
            let mut m = vec![4, 0, 0, n as u8];
            m.extend(s.bytes(n));
            m.resize(4 + n, 0);
            let at = split % (m.len() + 1);
            for part in [&m[..at], &m[at..]] {
                if !part.is_empty() {
                    let _ = peer.seal_one(ContentType::Handshake, part, &mut w.bytes);
                }
            }
            w.mangled();
        }
        // A key update from the peer (asking for ours or not), in one record or split
        // over two: its own keys change after it.
        4 => {
            let b = s.byte().unwrap_or(0);
            let request = b & 1 == 1;
            if b & 2 == 0 {
                let _ = peer.update_tx(request, &mut w.bytes);
            } else {
                let m = [
                    u8::from(HandshakeType::KeyUpdate),
                    0,
                    0,
                    1,
                    u8::from(request),
                ];
                let at = 1 + (b >> 2) as usize % 4;
                for part in [&m[..at], &m[at..]] {
                    let _ = peer.seal_one(ContentType::Handshake, part, &mut w.bytes);
                }
                let _ = peer.rekey_tx();
            }
            w.mangled();
        }
        // An alert: level and description from the script.
        5 => {
            let b = s.bytes(2).to_vec();
            let _ = peer.seal_one(ContentType::Alert, &b, &mut w.bytes);
            w.mangled();
        }
        // Any inner content type, any bytes.
        6 => {
            let typ = ContentType::from(s.byte().unwrap_or(0));
            let n = s.byte().unwrap_or(0) as usize;
            let b = s.bytes(n).to_vec();
            let _ = peer.seal_one(typ, &b, &mut w.bytes);
            w.mangled();
        }
        _ => unreachable!("{op}: not one of other_records's"),
    }
}

/// Script ops 7–10: raw bytes, bare headers, bit flips and truncations.
fn mangle(op: u8, s: &mut Script<'_>, w: &mut Wire) {
    match op {
        // Raw bytes.
        7 => {
            let n = s.byte().unwrap_or(0) as usize;
            w.bytes.extend_from_slice(s.bytes(n));
            w.mangled();
        }
        // A record header: type, version and length from the script.
        8 => {
            let h = s.bytes(HEADER).to_vec();
            w.bytes.extend_from_slice(&h);
            w.mangled();
        }
        // A bit flipped in what was built.
        9 => {
            let at = s.u16().unwrap_or(0) as usize;
            let bit = s.byte().unwrap_or(0) % 8;
            if !w.bytes.is_empty() {
                let at = at % w.bytes.len();
                w.bytes[at] ^= 1 << bit;
                w.mangled();
            }
        }
        // What was built cut short.
        10 => {
            let n = s.u16().unwrap_or(0) as usize % (w.bytes.len() + 1);
            if n < w.bytes.len() {
                w.bytes.truncate(n);
                w.reads.retain(|&r| r <= n);
                w.mangled();
            }
        }
        _ => unreachable!("{op}: not one of mangle's"),
    }
}

/// What the decoder did with a wire.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    pub plain: Vec<u8>,
    pub answers: Vec<u8>,
    pub end: Option<Error>,
    pub closed: bool,
    /// Bytes of whole records consumed (0 after an error).
    pub consumed: usize,
}

/// Gives `wire` to `r` in reads ending at `reads` (then the rest), as the callers do: a buffer
/// keeping what `open` did not consume, the next read appended. Stops at the first error.
pub fn feed(r: &mut Records<FakeKernel>, wire: &[u8], reads: &[usize]) -> Outcome {
    let mut o = Outcome {
        plain: Vec::new(),
        answers: Vec::new(),
        end: None,
        closed: false,
        consumed: 0,
    };
    let mut buf: Vec<u8> = Vec::new();
    let mut from = 0;
    let ends = reads
        .iter()
        .copied()
        .filter(|&e| e <= wire.len())
        .chain(std::iter::once(wire.len()));
    for end in ends {
        if end < from {
            continue;
        }
        buf.extend_from_slice(&wire[from..end]);
        from = end;
        let (plain_before, answers_before) = (o.plain.len(), o.answers.len());
        let res = r.open(&mut buf, &mut o.plain, &mut o.answers);
        // Memory follows what arrived: no more plaintext than the bytes given, the handshake
        // buffer bounded, at most one key update's answer (27 bytes) per record.
        assert!(o.plain.len() - plain_before <= buf.len());
        assert!(r.hs.len() <= MAX_HANDSHAKE);
        assert!(o.answers.len() - answers_before <= 27 * (buf.len() / (HEADER + 17) + 1));
        match res {
            Ok(opened) => {
                assert!(opened.consumed <= buf.len());
                assert_eq!(opened.closed, r.peer_closed());
                if o.closed {
                    assert_eq!(opened.consumed, 0, "consumed past close_notify");
                }
                o.consumed += opened.consumed;
                o.closed = opened.closed;
                buf.drain(..opened.consumed);
                // What is left is one incomplete record at most (or the rest after the close).
                if !o.closed && buf.len() >= HEADER {
                    let len = u16::from_be_bytes([buf[3], buf[4]]) as usize;
                    assert!(buf.len() < HEADER + len, "a whole record left unread");
                }
            }
            Err(e) => {
                o.end = Some(e);
                // The caller stops here: what was consumed before the error does not matter
                // (and one call that fails does not say how much it consumed).
                o.consumed = 0;
                break;
            }
        }
    }
    o
}

/// One fuzz case: `data[0]` chooses the receiving end's role; the rest is the script.
pub fn records_open(data: &[u8]) {
    let Some((&role, script)) = data.split_first() else {
        return;
    };
    let client = role & 1 == 1;
    let (mut a, mut peer) = pair(client);
    let wire = build(script, &mut peer);
    let split = feed(&mut a, &wire.bytes, &wire.reads);
    let (mut b, _) = pair(client);
    let whole = feed(&mut b, &wire.bytes, &[]);
    assert_eq!(split, whole, "the reads' boundaries changed the outcome");
    if let Some(d) = wire.clean_data {
        assert_eq!(split.end, None);
        assert_eq!(split.plain, d);
        assert_eq!(split.consumed, wire.bytes.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use rustls::PeerMisbehaved;

    /// Scripts of the shapes that matter, each op given its operands' bytes.
    fn script() -> impl Strategy<Value = Vec<u8>> {
        let op = prop_oneof![
            (Just(0u8), any::<u8>(), vec(any::<u8>(), 0..64)).prop_map(|(o, n, b)| {
                let mut v = vec![o, n % 64];
                v.extend(b);
                v
            }),
            (Just(1u8), any::<u8>(), any::<u16>()).prop_map(|(o, k, n)| [
                vec![o, k],
                n.to_be_bytes().to_vec()
            ]
            .concat()),
            (Just(2u8), vec(any::<u8>(), 0..40)).prop_map(|(o, b)| {
                let mut v = vec![o, b.len() as u8];
                v.extend(b);
                v
            }),
            (Just(3u8), any::<u8>(), any::<u8>()).prop_map(|(o, n, s)| vec![o, n % 64, s]),
            (Just(4u8), any::<u8>()).prop_map(|(o, r)| vec![o, r]),
            (Just(5u8), any::<[u8; 2]>()).prop_map(|(o, b)| vec![o, b[0], b[1]]),
            (Just(6u8), any::<u8>(), vec(any::<u8>(), 0..16)).prop_map(|(o, t, b)| {
                let mut v = vec![o, t, b.len() as u8];
                v.extend(b);
                v
            }),
            (Just(7u8), vec(any::<u8>(), 0..16)).prop_map(|(o, b)| {
                let mut v = vec![o, b.len() as u8];
                v.extend(b);
                v
            }),
            (Just(8u8), any::<[u8; 5]>()).prop_map(|(o, h)| [vec![o], h.to_vec()].concat()),
            (Just(9u8), any::<u16>(), any::<u8>()).prop_map(|(o, at, bit)| [
                vec![o],
                at.to_be_bytes().to_vec(),
                vec![bit]
            ]
            .concat()),
            (Just(10u8), any::<u16>())
                .prop_map(|(o, n)| [vec![o], n.to_be_bytes().to_vec()].concat()),
            Just(vec![11u8]),
        ];
        (any::<u8>(), vec(op, 0..24)).prop_map(|(role, ops)| {
            let mut v = vec![role];
            for o in ops {
                v.extend(o);
            }
            v
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Structured scripts: sealed records of every kind, mangled and split.
        #[test]
        fn hostile_records_are_refused_cleanly(data in script()) {
            records_open(&data);
        }

        /// Plain random bytes as scripts (and so as wires).
        #[test]
        fn random_bytes_are_refused_cleanly(data in vec(any::<u8>(), 0..1024)) {
            records_open(&data);
        }
    }

    /// Scripts that reach the decoder's rarer refusals, and what each must end with.
    #[test]
    fn the_rarer_refusals() {
        let big = |k: u8| [1u8, k, 0x40, 0x00]; // one 16,384-byte record
        let cases: Vec<(&str, Vec<u8>, Option<Error>)> = vec![
            (
                "handshake bytes past 64 KiB, never a whole message",
                big(1).repeat(5),
                Some(Error::InvalidMessage(
                    rustls::InvalidMessage::HandshakePayloadTooLarge,
                )),
            ),
            (
                "a record's plaintext one byte past 16 KiB",
                vec![1, 0, 0x40, 0x01],
                Some(Error::PeerSentOversizedRecord),
            ),
            (
                "a KeyUpdate neither requested nor not",
                vec![2, 5, 24, 0, 0, 1, 2],
                Some(Error::InvalidMessage(
                    rustls::InvalidMessage::InvalidKeyUpdate,
                )),
            ),
            (
                "a KeyUpdate split over two records (at byte 2), data after it",
                vec![4, 2 | 1 << 2, 0, 2, b'o', b'k'],
                None,
            ),
            (
                "a change_cipher_spec inside a record",
                vec![6, 20, 1, 1],
                Some(PeerMisbehaved::IllegalMiddleboxChangeCipherSpec.into()),
            ),
            (
                "a record of padding only (no content type)",
                vec![6, 0, 3, 0, 0, 0],
                Some(PeerMisbehaved::IllegalTlsInnerPlaintext.into()),
            ),
        ];
        for (what, script, end) in cases {
            let (mut a, mut peer) = pair(true);
            let w = build(&script, &mut peer);
            let o = feed(&mut a, &w.bytes, &w.reads);
            assert_eq!(o.end, end, "{what}");
            records_open(&[[1].as_slice(), &script].concat());
        }
    }

    /// The harness itself can fail: a clean script decrypts to its data, and a flipped bit is
    /// caught.
    #[test]
    fn the_harness_sees_data_and_damage() {
        let (mut a, mut peer) = pair(true);
        let w = build(&[0, 3, b'a', b'b', b'c', 11, 0, 2, b'd', b'e'], &mut peer);
        assert_eq!(w.clean_data.as_deref(), Some(&b"abcde"[..]));
        let o = feed(&mut a, &w.bytes, &w.reads);
        assert_eq!((o.plain.as_slice(), o.end), (&b"abcde"[..], None));
        let (mut a, mut peer) = pair(true);
        let w = build(&[0, 3, b'a', b'b', b'c', 9, 0, 7, 0], &mut peer);
        assert_eq!(
            feed(&mut a, &w.bytes, &w.reads).end,
            Some(Error::DecryptError)
        );
    }
}
