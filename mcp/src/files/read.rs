//! `read`: a file through the jail, whole or a page at a time. Text pages
//! count lines; a file that is not UTF-8 (or holds a NUL byte) comes as
//! base64 pages counted in bytes, so no byte is lost or changed.

// The type of a file the jail opened (no path is opened here).
use std::fs;

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

use base64::Engine as _;

use super::{SessionFiles, jail_failure};
use crate::args::{Encoding, ReadArgs, ReadOutput};
use crate::failure::ToolError;

/// Lines a text page holds unless told otherwise.
pub const DEFAULT_LINES: u64 = 2000;
/// Bytes of text a page holds at most, whatever `limit` says.
pub const MAX_TEXT_PAGE: usize = 256 << 10;
/// Bytes a base64 page holds, by default and at most.
pub const MAX_BINARY_PAGE: u64 = 1 << 20;
/// How much of a file `auto` looks at to choose.
const SNIFF: usize = 8 << 10;

/// Whether `head` (the start of a file) reads as text: no NUL, valid UTF-8
/// but for a sequence cut at its end.
pub fn looks_like_text(head: &[u8]) -> bool {
    if head.contains(&0) {
        return false;
    }
    match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    }
}

pub fn read(files: &SessionFiles, args: ReadArgs) -> Result<ReadOutput, ToolError> {
    let (located, path) = files.locate(&args.path)?;
    let guest = located.guest.display().to_string();
    let mut file = files
        .jail
        .open_read(&path)
        .map_err(|e| jail_failure(&guest, &e))?;
    let io = |e: std::io::Error| ToolError::failed(format!("read {guest}: {e}")).at(&guest);
    let size = file.metadata().map_err(io)?.len();
    let text = match args.encoding {
        Encoding::Utf8 => true,
        Encoding::Base64 => false,
        Encoding::Auto => {
            let mut head = Vec::with_capacity(SNIFF);
            (&mut file)
                .take(SNIFF as u64)
                .read_to_end(&mut head)
                .map_err(io)?;
            file.seek(SeekFrom::Start(0)).map_err(io)?;
            looks_like_text(&head)
        }
    };
    if text {
        read_text(file, &guest, size, &args)
    } else {
        read_bytes(file, &guest, size, &args)
    }
}

fn read_bytes(
    mut file: fs::File,
    guest: &str,
    size: u64,
    args: &ReadArgs,
) -> Result<ReadOutput, ToolError> {
    let io = |e: std::io::Error| ToolError::failed(format!("read {guest}: {e}")).at(guest);
    let offset = args.offset.unwrap_or(0);
    let limit = args.limit.unwrap_or(MAX_BINARY_PAGE).min(MAX_BINARY_PAGE);
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut data = Vec::new();
    file.take(limit).read_to_end(&mut data).map_err(io)?;
    let count = data.len() as u64;
    let end = offset + count;
    Ok(ReadOutput {
        path: guest.to_owned(),
        encoding: "base64".into(),
        content: base64::engine::general_purpose::STANDARD.encode(&data),
        offset,
        count,
        next_offset: (end < size).then_some(end),
        size,
    })
}

fn read_text(
    file: fs::File,
    guest: &str,
    size: u64,
    args: &ReadArgs,
) -> Result<ReadOutput, ToolError> {
    let io = |e: std::io::Error| ToolError::failed(format!("read {guest}: {e}")).at(guest);
    let first = args.offset.unwrap_or(1);
    if first == 0 {
        return Err(ToolError::failed(
            "offset counts lines from 1 in text; give 1 for the start",
        ));
    }
    let limit = args.limit.unwrap_or(DEFAULT_LINES);
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut number = 0u64;
    let mut content = Vec::new();
    let mut count = 0u64;
    let mut more = false;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(io)? == 0 {
            break;
        }
        number += 1;
        if number < first {
            continue;
        }
        if count == limit || (count > 0 && content.len() + line.len() > MAX_TEXT_PAGE) {
            more = true;
            break;
        }
        if line.len() > MAX_TEXT_PAGE {
            return Err(ToolError::failed(format!(
                "read {guest}: line {number} is longer than a page ({MAX_TEXT_PAGE} bytes); read \
                 it with \"encoding\": \"base64\""
            ))
            .at(guest));
        }
        if std::str::from_utf8(&line).is_err() || line.contains(&0) {
            return Err(ToolError::failed(format!(
                "read {guest}: line {number} is not UTF-8 text; read the file with \
                 \"encoding\": \"base64\" to get its bytes unchanged"
            ))
            .at(guest));
        }
        content.extend_from_slice(&line);
        count += 1;
    }
    Ok(ReadOutput {
        path: guest.to_owned(),
        encoding: "utf-8".into(),
        content: String::from_utf8(content).unwrap_or_default(),
        offset: first,
        count,
        next_offset: more.then_some(first + count),
        size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_utf8_without_nul_even_when_cut_mid_character() {
        assert!(looks_like_text(b"fn main() {}\n"));
        assert!(looks_like_text("héllo".as_bytes()));
        // "é" cut after its first byte by the sniff window.
        assert!(looks_like_text(&"hé".as_bytes()[..2]));
        assert!(!looks_like_text(b"a\0b"));
        assert!(!looks_like_text(b"\xff\xfe\x00"));
        assert!(!looks_like_text(b"\xc3\x28 invalid"));
    }
}
