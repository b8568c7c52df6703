//! Random bytes from the kernel, for session ids and the API token.

use std::io::Read;

/// `n` random bytes from `/dev/urandom`, as lowercase hex.
pub fn hex(n: usize) -> std::io::Result<String> {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
