//! The server channel's wire form (docs/design.md, "The server channel"):
//! how a command inside a sandbox calls a handler of the server, and what
//! it gets back. A call is a plain-HTTP `POST http://cc-server.internal/v1/NAME`
//! sent through the session's own HTTP proxy, which answers it itself
//! (never forwards it): the proxy a call came through is the caller's
//! identity. Both ends — the in-sandbox client (`sandbox-init call`) and
//! the runtime's dispatcher — encode and decode with these functions.
//!
//! Request body: `u32` count of arguments, each a `u32` length and its
//! bytes, then the caller's standard input to the end. Reply body (status
//! 200): one byte of exit status, a `u32` length and that much standard
//! output, then standard error to the end. Integers are big-endian. Any
//! other HTTP status is a failure of the channel itself (no such handler,
//! malformed call), its body a one-line reason.

/// The reserved host name the session's HTTP proxy serves itself. `.internal`
/// is reserved for private use (ICANN, 2024): it never resolves publicly,
/// and the proxies refuse it on every other way in (CONNECT, SOCKS).
pub const HOST: &str = "cc-server.internal";

/// The path prefix of calls: `/v1/NAME`.
pub const PATH_PREFIX: &str = "/v1/";

/// `Content-Type` of both bodies.
pub const CONTENT_TYPE: &str = "application/x-cc-server-call";

/// The largest request body the proxy reads (arguments and standard input).
pub const MAX_REQUEST: usize = 4 << 20;

/// The largest reply body the client accepts.
pub const MAX_REPLY: usize = 16 << 20;

/// The exit status of the client when the channel itself failed (no proxy,
/// no such handler, a malformed reply): 2, which Claude Code's command
/// hooks take as "block", and which git takes as a failed helper.
pub const CHANNEL_FAILED: u8 = 2;

/// Whether `name` is a handler name: 1–64 of `a-z`, `0-9`, `-`, `_`, `.`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
}

/// Whether an HTTP host (as a request-target authority names it, any case,
/// an optional trailing dot) is the channel's.
pub fn is_channel_host(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    host.eq_ignore_ascii_case(HOST)
}

/// A decoded call body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallBody {
    /// The client's arguments after the handler's name.
    pub args: Vec<String>,
    /// The client's standard input.
    pub input: Vec<u8>,
}

/// A decoded reply body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplyBody {
    /// The client's exit status.
    pub exit: u8,
    /// What the client prints on standard output.
    pub stdout: Vec<u8>,
    /// What the client prints on standard error.
    pub stderr: Vec<u8>,
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    out.extend_from_slice(&n.to_be_bytes());
}

fn take_u32(bytes: &[u8], at: &mut usize) -> Result<usize, String> {
    let end = at.checked_add(4).ok_or("length overflow")?;
    let raw = bytes.get(*at..end).ok_or("truncated length")?;
    *at = end;
    let mut buf = [0u8; 4];
    buf.copy_from_slice(raw);
    usize::try_from(u32::from_be_bytes(buf)).map_err(|_| "length too large".to_owned())
}

fn take_bytes<'a>(bytes: &'a [u8], at: &mut usize, len: usize) -> Result<&'a [u8], String> {
    let end = at.checked_add(len).ok_or("length overflow")?;
    let raw = bytes
        .get(*at..end)
        .ok_or_else(|| format!("truncated: {len} bytes announced"))?;
    *at = end;
    Ok(raw)
}

/// A call's body: the arguments, then standard input.
pub fn encode_call(args: &[String], input: &[u8]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(4 + input.len() + args.iter().map(|a| a.len() + 4).sum::<usize>());
    put_u32(&mut out, args.len());
    for arg in args {
        put_u32(&mut out, arg.len());
        out.extend_from_slice(arg.as_bytes());
    }
    out.extend_from_slice(input);
    out
}

/// The arguments and standard input of a call's body.
pub fn decode_call(bytes: &[u8]) -> Result<CallBody, String> {
    let mut at = 0;
    let count = take_u32(bytes, &mut at)?;
    if count > 4096 {
        return Err(format!("{count} arguments: at most 4096"));
    }
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let len = take_u32(bytes, &mut at)?;
        let raw = take_bytes(bytes, &mut at, len)?;
        let arg = std::str::from_utf8(raw).map_err(|_| "an argument is not UTF-8".to_owned())?;
        args.push(arg.to_owned());
    }
    Ok(CallBody {
        args,
        input: bytes.get(at..).unwrap_or_default().to_vec(),
    })
}

/// A reply's body: exit status, standard output, standard error.
pub fn encode_reply(reply: &ReplyBody) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + reply.stdout.len() + reply.stderr.len());
    out.push(reply.exit);
    put_u32(&mut out, reply.stdout.len());
    out.extend_from_slice(&reply.stdout);
    out.extend_from_slice(&reply.stderr);
    out
}

/// The parts of a reply's body.
pub fn decode_reply(bytes: &[u8]) -> Result<ReplyBody, String> {
    let (&exit, _) = bytes.split_first().ok_or("empty reply")?;
    let mut at = 1;
    let len = take_u32(bytes, &mut at)?;
    let stdout = take_bytes(bytes, &mut at, len)?.to_vec();
    Ok(ReplyBody {
        exit,
        stdout,
        stderr: bytes.get(at..).unwrap_or_default().to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_and_reply_round_trip() {
        let args = vec!["get".to_owned(), "é x".to_owned(), String::new()];
        let body = encode_call(&args, b"protocol=https\n");
        let back = decode_call(&body).unwrap();
        assert_eq!(back.args, args);
        assert_eq!(back.input, b"protocol=https\n");
        let reply = ReplyBody {
            exit: 3,
            stdout: b"out".to_vec(),
            stderr: b"err\n".to_vec(),
        };
        assert_eq!(decode_reply(&encode_reply(&reply)).unwrap(), reply);
    }

    #[test]
    fn malformed_bodies_are_errors() {
        assert!(decode_call(b"").is_err());
        assert!(decode_call(&[0, 0, 0, 1, 0, 0, 0, 9, b'a']).is_err());
        assert!(decode_call(&[0, 0, 0, 1, 0, 0, 0, 1, 0xff]).is_err());
        assert!(decode_call(&[0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(decode_reply(b"").is_err());
        assert!(decode_reply(&[0, 0, 0, 0, 5, b'x']).is_err());
    }

    #[test]
    fn names_and_hosts() {
        assert!(valid_name("git-credential"));
        assert!(valid_name("policy.hook"));
        for bad in ["", "A", "a/b", "a b", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert!(is_channel_host("cc-server.internal"));
        assert!(is_channel_host("CC-Server.Internal."));
        assert!(!is_channel_host("cc-server.internal.evil.test"));
    }
}
