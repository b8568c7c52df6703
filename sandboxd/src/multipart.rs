//! A `PUT` body sent as `multipart/form-data` (the contract allows it
//! beside raw bytes): the content of its `file` part (pure).

/// The bytes of the part named `file`, or why there are none.
pub fn file_part(content_type: &str, body: &[u8]) -> Result<Vec<u8>, String> {
    let boundary = content_type
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("boundary="))
        .map(|b| b.trim_matches('"'))
        .next()
        .filter(|b| !b.is_empty())
        .ok_or("multipart body without a boundary in its Content-Type")?;
    let delimiter = format!("--{boundary}");
    let mut rest = body;
    // Everything up to the first delimiter is a preamble.
    let start = find(rest, delimiter.as_bytes()).ok_or("no part in the multipart body")?;
    rest = &rest[start + delimiter.len()..];
    loop {
        if rest.starts_with(b"--") {
            return Err("the multipart body has no part named `file`".into());
        }
        rest = rest
            .strip_prefix(b"\r\n")
            .ok_or("a malformed multipart delimiter")?;
        let head_end = find(rest, b"\r\n\r\n").ok_or("a multipart part without headers' end")?;
        let headers = String::from_utf8_lossy(&rest[..head_end]).to_ascii_lowercase();
        let content = &rest[head_end + 4..];
        let close = format!("\r\n{delimiter}");
        let end = find(content, close.as_bytes()).ok_or("a multipart part without its end")?;
        let named_file = headers.lines().any(|l| {
            l.starts_with("content-disposition:")
                && l.split(';').any(|p| {
                    let p = p.trim();
                    p == "name=\"file\"" || p == "name=file"
                })
        });
        if named_file {
            return Ok(content[..end].to_vec());
        }
        rest = &content[end + close.len()..];
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TYPE: &str = "multipart/form-data; boundary=XyZ";

    #[test]
    fn the_file_part_is_taken_whole() {
        let body =
            b"--XyZ\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nno\r\n--XyZ\r\n\
Content-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\
Content-Type: application/octet-stream\r\n\r\nline\r\n--XY\r\n--XyZ--\r\n";
        assert_eq!(file_part(TYPE, body).unwrap(), b"line\r\n--XY");
    }

    #[test]
    fn what_is_not_a_file_part_is_an_error() {
        assert!(file_part("multipart/form-data", b"").is_err());
        assert!(file_part(TYPE, b"--XyZ--\r\n").is_err());
        assert!(
            file_part(
                TYPE,
                b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx"
            )
            .is_err()
        );
    }
}
