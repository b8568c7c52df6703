//! pkt-lines (gitprotocol-common): four hex digits of length (itself
//! included), then the payload; `0000` flush, `0001` delim, `0002`
//! response-end. Lengths 1–3 and over 65520 are malformed.

use std::fmt;

/// The largest pkt-line, length prefix included.
pub const MAX_PKT: usize = 65520;

/// One pkt-line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pkt<'a> {
    Flush,
    Delim,
    ResponseEnd,
    Data(&'a [u8]),
}

/// A malformed stream, with the byte offset of the bad length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PktError {
    pub offset: usize,
    pub problem: String,
}

impl fmt::Display for PktError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "malformed pkt-line at byte {}: {}",
            self.offset, self.problem
        )
    }
}

impl std::error::Error for PktError {}

/// The pkt-line at `buf[at..]`: `Ok(None)` when more bytes are needed,
/// else the line and the offset after it.
pub fn read(buf: &[u8], at: usize) -> Result<Option<(Pkt<'_>, usize)>, PktError> {
    let Some(prefix) = buf.get(at..at + 4) else {
        return Ok(None);
    };
    let bad = |problem: String| PktError {
        offset: at,
        problem,
    };
    let text = std::str::from_utf8(prefix)
        .ok()
        .filter(|t| t.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            bad(format!(
                "length {:?} is not four hex digits",
                String::from_utf8_lossy(prefix)
            ))
        })?;
    let len = usize::from_str_radix(text, 16).map_err(|e| bad(e.to_string()))?;
    let pkt = match len {
        0 => return Ok(Some((Pkt::Flush, at + 4))),
        1 => return Ok(Some((Pkt::Delim, at + 4))),
        2 => return Ok(Some((Pkt::ResponseEnd, at + 4))),
        3 => return Err(bad("length 3 is reserved".into())),
        n if n > MAX_PKT => return Err(bad(format!("length {n} is over {MAX_PKT}"))),
        n => n,
    };
    match buf.get(at + 4..at + pkt) {
        Some(data) => Ok(Some((Pkt::Data(data), at + pkt))),
        None => Ok(None),
    }
}

/// `payload` as one pkt-line (payloads over the maximum are split by the
/// caller; report lines never are).
pub fn encode(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("{:04x}", payload.len() + 4).into_bytes();
    out.extend_from_slice(payload);
    out
}

pub const FLUSH: &[u8] = b"0000";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_lines_and_special_packets() {
        let buf = b"0009hello0000000100020006a";
        let (p, at) = read(buf, 0).unwrap().unwrap();
        assert_eq!(p, Pkt::Data(b"hello"));
        let (p, at) = read(buf, at).unwrap().unwrap();
        assert_eq!(p, Pkt::Flush);
        let (p, at) = read(buf, at).unwrap().unwrap();
        assert_eq!(p, Pkt::Delim);
        let (p, at) = read(buf, at).unwrap().unwrap();
        assert_eq!(p, Pkt::ResponseEnd);
        assert_eq!(read(buf, at).unwrap(), None, "needs more");
        assert_eq!(read(b"00", 0).unwrap(), None);
    }

    #[test]
    fn malformed_lengths_are_errors_with_the_offset() {
        assert_eq!(read(b"zzzz", 0).unwrap_err().offset, 0);
        assert!(read(b"0003", 0).is_err());
        assert!(read(b"fff1", 0).is_err());
        assert_eq!(read(b"0000zzzz", 4).unwrap_err().offset, 4);
    }

    #[test]
    fn encodes_with_the_length_included() {
        assert_eq!(encode(b"unpack ok\n"), b"000eunpack ok\n");
    }
}
