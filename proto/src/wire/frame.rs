//! The standard Cap'n Proto stream framing, with the size limits of protocol.md ("Transport").
//!
//! A framed message is a segment table followed by the segments:
//! `u32 LE segment_count - 1`, then one `u32 LE` size in words per segment, zero-padded to a
//! multiple of 8 bytes, then the segments themselves. This is what `capnp::serialize` and every
//! other implementation write, so any Cap'n Proto library can read our stream.
//!
//! Nothing here trusts a length prefix: the table is checked against [`Limits`] before anyone
//! acts on it, and [`read_frame`] grows its buffer only as bytes actually arrive.

use std::io::Read;

use crate::error::Error;

/// Default maximum size of one framed message (protocol.md: 16 MiB, configurable).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Most segments a frame may declare. The same bound as `capnp::serialize`, so a table that
/// `frame_len` accepts is never refused by the decoder for its segment count.
pub const MAX_SEGMENTS: usize = 512;

/// Bytes per Cap'n Proto word.
const WORD: usize = 8;

/// Bytes of decoded list elements allowed per frame byte (F22; see [`Limits::output_budget`]).
pub const OUTPUT_BYTES_PER_FRAME_BYTE: usize = 4;

/// Bytes of decoded list elements every frame may produce beyond the proportional part.
pub const OUTPUT_SLACK_BYTES: usize = 4096;

/// Traversal words every frame gets beyond twice its own words.
const TRAVERSAL_SLACK_WORDS: usize = 64;

/// Size limits every reader enforces (protocol.md "Transport").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest framed message accepted, segment table included.
    pub max_message_bytes: usize,
    /// Cap'n Proto traversal limit, in 8-byte words: bounds the work a decoder does on one
    /// message even when pointers alias the same data (the amplification attack). Each frame
    /// gets the smaller of this and [`Limits::traversal_for`] its length.
    pub traversal_limit_words: usize,
}

impl Limits {
    /// Limits for a given maximum message size, with the matching traversal limit.
    pub const fn with_max_message_bytes(max_message_bytes: usize) -> Limits {
        // Twice the message's words: a legitimate maximal message always decodes (our decoder
        // reads every object once), while aliasing pointers still cannot multiply the work.
        Limits {
            max_message_bytes,
            traversal_limit_words: max_message_bytes / WORD * 2,
        }
    }

    /// Traversal limit for one frame of `frame_bytes` (F22): twice its words, plus a little,
    /// and never above `traversal_limit_words`. Our decoder reads each object of a legitimate
    /// message once, so it always fits; what it bounds is the work on claims that cost no
    /// bytes (zero-size list elements, pointers sharing one text or list).
    pub fn traversal_for(&self, frame_bytes: usize) -> usize {
        (frame_bytes / WORD)
            .saturating_mul(2)
            .saturating_add(TRAVERSAL_SLACK_WORDS)
            .min(self.traversal_limit_words)
    }

    /// Bytes of decoded list elements (`count * size_of`) one frame of `frame_bytes` may
    /// produce (F22): [`OUTPUT_BYTES_PER_FRAME_BYTE`] per byte, plus [`OUTPUT_SLACK_BYTES`].
    /// Every decoded element type is at most that many times its own Cap'n Proto size (a test
    /// in codec.rs checks each), so a legitimate message always fits. Texts are bounded by
    /// the traversal limit instead: together at most about twice the frame.
    pub const fn output_budget(frame_bytes: usize) -> usize {
        frame_bytes
            .saturating_mul(OUTPUT_BYTES_PER_FRAME_BYTE)
            .saturating_add(OUTPUT_SLACK_BYTES)
    }

    /// The `capnp` reader options for one frame of `frame_bytes`.
    pub(crate) fn reader_options_for(&self, frame_bytes: usize) -> capnp::message::ReaderOptions {
        let mut o = capnp::message::ReaderOptions::new();
        o.traversal_limit_in_words(Some(self.traversal_for(frame_bytes)));
        // Our schema nests at most 5 deep (Reply > data > List(Host) > Host > attrs); leave room
        // for evolution but stop hostile recursion early.
        o.nesting_limit(32);
        o
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::with_max_message_bytes(DEFAULT_MAX_MESSAGE_BYTES)
    }
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Length of the segment table (with padding) declared by the first 4 bytes of `buf`;
/// `Ok(None)` until those 4 bytes are there.
fn table_len(buf: &[u8]) -> Result<Option<usize>, Error> {
    if buf.len() < 4 {
        return Ok(None);
    }
    // The field is count - 1, so 0xFFFF_FFFF wraps to a count of zero: invalid.
    let count = le32(buf, 0).wrapping_add(1) as usize;
    if count == 0 || count > MAX_SEGMENTS {
        return Err(Error::Proto);
    }
    // 4 bytes for the count, 4 per size, rounded up to a whole word.
    Ok(Some((4 + 4 * count).div_ceil(WORD) * WORD))
}

/// Given the bytes received so far on a stream, the total length in bytes of the first framed
/// Cap'n Proto message once its segment table is complete; Ok(None) while more bytes are needed;
/// Err(Error::Proto) when the table is invalid (0 segments, absurd segment count);
/// Err(Error::TooBig) when a valid table declares more than the limits allow — the same message
/// would be as big from any controller, so it is no reason to fail over (issue 13). Never
/// allocates per the claimed size.
///
/// The returned length may exceed `buf.len()`: the table is complete but the body is still
/// arriving. The frame is `buf[..n]` once `buf.len() >= n` (see [`complete_frame_len`]).
pub fn frame_len(buf: &[u8], limits: &Limits) -> Result<Option<usize>, Error> {
    let Some(table) = table_len(buf)? else {
        return Ok(None);
    };
    if buf.len() < table {
        return Ok(None);
    }
    let count = le32(buf, 0) as usize + 1;
    let mut words: usize = 0;
    for i in 0..count {
        // u32 sizes summed in usize: at most 512 * 2^32 words, no overflow on 64-bit; checked
        // anyway so a 32-bit target cannot wrap.
        words = words
            .checked_add(le32(buf, 4 + 4 * i) as usize)
            .ok_or(Error::Proto)?;
    }
    if words > limits.traversal_limit_words {
        return Err(Error::TooBig);
    }
    let total = words
        .checked_mul(WORD)
        .and_then(|b| b.checked_add(table))
        .ok_or(Error::TooBig)?;
    if total > limits.max_message_bytes {
        return Err(Error::TooBig);
    }
    Ok(Some(total))
}

/// Like [`frame_len`], but `Some(n)` only once the whole first frame is in `buf`
/// (`n <= buf.len()`), so `&buf[..n]` is always safe to take.
pub fn complete_frame_len(buf: &[u8], limits: &Limits) -> Result<Option<usize>, Error> {
    Ok(frame_len(buf, limits)?.filter(|&n| n <= buf.len()))
}

/// `read_exact` into `buf[from..to]` (already sized); EOF anywhere is a reset connection.
fn fill<R: Read>(r: &mut R, buf: &mut [u8]) -> Result<(), Error> {
    // read_exact retries EINTR and reports EOF as UnexpectedEof, which from_io maps to
    // ECONNRESET: the peer went away in the middle of (or before) a message.
    r.read_exact(buf).map_err(|e| Error::from_io(&e))
}

/// Blocking helper: read exactly one framed message from `r` into `buf` (cleared first, reused).
/// EOF before the first byte -> Err(Error::Errno(libc::ECONNRESET)); EOF mid-frame -> same; io errors via Error::from_io; bad table -> Error::Proto.
pub fn read_frame<R: std::io::Read>(
    r: &mut R,
    limits: &Limits,
    buf: &mut Vec<u8>,
) -> Result<(), Error> {
    buf.clear();
    buf.resize(WORD, 0);
    fill(r, &mut buf[..])?;
    let table = table_len(buf)?.ok_or(Error::Proto)?;
    if table > WORD {
        buf.resize(table, 0);
        fill(r, &mut buf[WORD..])?;
    }
    let total = frame_len(buf, limits)?.ok_or(Error::Proto)?;
    // Grow only as bytes arrive: a peer that announces 16 MiB and sends nothing costs nothing.
    let body = (total - table) as u64;
    let got = r
        .take(body)
        .read_to_end(buf)
        .map_err(|e| Error::from_io(&e))?;
    if got as u64 != body {
        return Err(Error::Errno(libc::ECONNRESET));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(sizes: &[u32]) -> Vec<u8> {
        let mut v = ((sizes.len() as u32).wrapping_sub(1))
            .to_le_bytes()
            .to_vec();
        for s in sizes {
            v.extend_from_slice(&s.to_le_bytes());
        }
        while v.len() % 8 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn lengths_of_valid_tables() {
        let l = Limits::default();
        assert_eq!(frame_len(&table(&[0]), &l), Ok(Some(8)));
        assert_eq!(frame_len(&table(&[3]), &l), Ok(Some(8 + 24)));
        // Two segments: 12 bytes of table padded to 16.
        assert_eq!(frame_len(&table(&[1, 2]), &l), Ok(Some(16 + 24)));
        assert_eq!(frame_len(&table(&[1, 2, 3]), &l), Ok(Some(16 + 48)));
        assert_eq!(frame_len(&table(&[1; 4]), &l), Ok(Some(24 + 32)));
        assert_eq!(
            frame_len(&table(&[0; MAX_SEGMENTS]), &l),
            Ok(Some(4 + 4 * 512 + 4))
        );
    }

    #[test]
    fn incomplete_tables_need_more() {
        let l = Limits::default();
        let t = table(&[1, 2, 3, 4, 5]);
        for n in 0..t.len() {
            assert_eq!(frame_len(&t[..n], &l), Ok(None), "prefix {n}");
        }
        assert_eq!(frame_len(&t, &l), Ok(Some(24 + 15 * 8)));
        assert_eq!(complete_frame_len(&t, &l), Ok(None));
    }

    #[test]
    fn invalid_tables_are_proto() {
        let l = Limits::default();
        // Count field 0xFFFFFFFF: count - 1 wraps to zero segments.
        assert_eq!(frame_len(&[0xff, 0xff, 0xff, 0xff], &l), Err(Error::Proto));
        assert_eq!(
            frame_len(&(MAX_SEGMENTS as u32).to_le_bytes(), &l),
            Err(Error::Proto)
        );
        assert_eq!(frame_len(&table(&[u32::MAX]), &l), Err(Error::TooBig));
        assert_eq!(frame_len(&table(&[u32::MAX; 8]), &l), Err(Error::TooBig));
        let max = (DEFAULT_MAX_MESSAGE_BYTES / 8) as u32;
        assert_eq!(
            frame_len(&table(&[max - 1]), &l),
            Ok(Some(DEFAULT_MAX_MESSAGE_BYTES))
        );
        assert_eq!(frame_len(&table(&[max]), &l), Err(Error::TooBig));
        let small = Limits::with_max_message_bytes(64);
        assert_eq!(frame_len(&table(&[7]), &small), Ok(Some(64)));
        assert_eq!(frame_len(&table(&[8]), &small), Err(Error::TooBig));
        let tight = Limits {
            max_message_bytes: 1 << 20,
            traversal_limit_words: 4,
        };
        assert_eq!(frame_len(&table(&[5]), &tight), Err(Error::TooBig));
    }

    #[test]
    fn read_frame_reads_one_message_at_a_time() {
        let l = Limits::default();
        let mut stream = table(&[1, 1]);
        stream.extend_from_slice(&[7; 16]);
        let first = stream.clone();
        stream.extend_from_slice(&table(&[0]));
        let mut r = &stream[..];
        let mut buf = Vec::new();
        read_frame(&mut r, &l, &mut buf).unwrap();
        assert_eq!(buf, first);
        read_frame(&mut r, &l, &mut buf).unwrap();
        assert_eq!(buf, table(&[0]));
        assert_eq!(
            read_frame(&mut r, &l, &mut buf),
            Err(Error::Errno(libc::ECONNRESET))
        );
    }

    #[test]
    fn read_frame_maps_io_errors() {
        struct Failing;
        impl Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::from_raw_os_error(libc::ETIMEDOUT))
            }
        }
        let mut buf = Vec::new();
        assert_eq!(
            read_frame(&mut Failing, &Limits::default(), &mut buf),
            Err(Error::Errno(libc::ETIMEDOUT))
        );
    }
}
