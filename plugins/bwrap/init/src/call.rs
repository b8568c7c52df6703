//! `sandbox-init call NAME [ARG…]`: the server channel's client (docs/design.md,
//! "The server channel"), for commands inside a sandbox — a git credential
//! helper, an agent's tool hook. It sends its arguments and standard input
//! (unless that is a terminal) as `POST http://cc-server.internal/v1/NAME`
//! through the session's HTTP proxy (`http_proxy`/`HTTP_PROXY`, with its
//! credential on `none`; else the in-sandbox `127.0.0.1:3128`), prints the
//! handler's standard output and error and exits with its status. Any
//! failure of the channel itself — no proxy, no such handler, a malformed
//! answer — is a message on standard error and exit 2 (fail closed).
//!
//! Plain `std` only: it runs in every sandbox, and on the host for `none`.

use std::io::{IsTerminal, Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::Duration;

use sandbox_plugin_api::server_call::{self, CHANNEL_FAILED};

/// The first argument that selects this mode.
pub const CALL: &str = "call";

/// How long a call may take, end to end (a handler may wait for an owner's
/// answer to a prompt).
const TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The whole of `sandbox-init call …`; `args` are those after `call`.
pub fn main(args: &[String]) -> ExitCode {
    match run(args) {
        Ok(reply) => {
            let mut out = std::io::stdout().lock();
            let mut err = std::io::stderr().lock();
            let written = out
                .write_all(&reply.stdout)
                .and_then(|()| out.flush())
                .and_then(|()| err.write_all(&reply.stderr));
            if written.is_err() {
                return ExitCode::from(CHANNEL_FAILED);
            }
            ExitCode::from(reply.exit)
        }
        Err(message) => {
            eprintln!("cc_server call: {message}");
            ExitCode::from(CHANNEL_FAILED)
        }
    }
}

fn run(args: &[String]) -> Result<server_call::ReplyBody, String> {
    let Some((name, rest)) = args.split_first() else {
        return Err("usage: sandbox-init call NAME [ARG…] (e.g. `call whoami`)".into());
    };
    if !server_call::valid_name(name) {
        return Err(format!("`{name}` is not a handler name"));
    }
    let mut input = Vec::new();
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        stdin
            .lock()
            .take(server_call::MAX_REQUEST as u64 + 1)
            .read_to_end(&mut input)
            .map_err(|e| format!("reading standard input: {e}"))?;
    }
    let body = server_call::encode_call(rest, &input);
    if body.len() > server_call::MAX_REQUEST {
        return Err(format!(
            "the call is over {} bytes",
            server_call::MAX_REQUEST
        ));
    }
    let proxy = proxy_from_env()?;
    let (status, reply) = post(&proxy, name, &body)?;
    if status != 200 {
        let text = String::from_utf8_lossy(&reply);
        return Err(format!("the server answered {status}: {}", text.trim_end()));
    }
    server_call::decode_reply(&reply).map_err(|e| format!("malformed answer: {e}"))
}

/// The session's HTTP proxy: address and, on `none`, its credential.
#[derive(Debug, PartialEq, Eq)]
struct Proxy {
    address: String,
    credential: Option<String>,
}

fn proxy_from_env() -> Result<Proxy, String> {
    let given = ["http_proxy", "HTTP_PROXY"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()));
    match given {
        Some(url) => parse_proxy(&url),
        None => Ok(Proxy {
            address: format!("127.0.0.1:{}", sandbox_plugin_api::proxy::HTTP_PORT),
            credential: None,
        }),
    }
}

/// `http://[user:password@]host:port[/]`.
fn parse_proxy(url: &str) -> Result<Proxy, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("the proxy `{url}` is not an http:// URL"))?;
    let rest = rest.trim_end_matches('/');
    let (credential, address) = match rest.rsplit_once('@') {
        Some((userinfo, address)) => (Some(userinfo.to_owned()), address),
        None => (None, rest),
    };
    if address.is_empty() || address.contains('/') {
        return Err(format!("the proxy `{url}` has no usable host:port"));
    }
    let address = if address
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        address.to_owned()
    } else {
        format!("{address}:80")
    };
    Ok(Proxy {
        address,
        credential,
    })
}

fn post(proxy: &Proxy, name: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let mut stream = TcpStream::connect(&proxy.address)
        .map_err(|e| format!("cannot reach the session's proxy at {}: {e}", proxy.address))?;
    let _ = stream.set_read_timeout(Some(TIMEOUT));
    let _ = stream.set_write_timeout(Some(TIMEOUT));
    let host = server_call::HOST;
    let mut head = format!(
        "POST http://{host}{}{name} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {}\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        server_call::PATH_PREFIX,
        server_call::CONTENT_TYPE,
        body.len()
    );
    if let Some(credential) = &proxy.credential {
        head.push_str(&format!(
            "Proxy-Authorization: Basic {}\r\n",
            base64(credential.as_bytes())
        ));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .map_err(|e| format!("sending the call: {e}"))?;
    let mut answer = Vec::new();
    stream
        .take(server_call::MAX_REPLY as u64 + 64 * 1024)
        .read_to_end(&mut answer)
        .map_err(|e| format!("reading the answer: {e}"))?;
    parse_response(&answer)
}

/// Status and body of an HTTP/1.1 answer read to its end (`Connection:
/// close`): `Content-Length` or chunked framing.
fn parse_response(answer: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the answer has no complete head")?;
    let head =
        std::str::from_utf8(&answer[..split]).map_err(|_| "the answer's head is not text")?;
    let rest = &answer[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("the answer's status line `{status_line}` is malformed"))?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(length) = length {
        rest.get(..length)
            .ok_or("the answer is shorter than its Content-Length")?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok((status, body))
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a truncated chunk size")?;
        let size_text = std::str::from_utf8(&rest[..end]).map_err(|_| "a malformed chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| "a malformed chunk size")?;
        rest = &rest[end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = rest.get(..size).ok_or("a truncated chunk")?;
        body.extend_from_slice(chunk);
        rest = rest.get(size + 2..).ok_or("a truncated chunk")?;
    }
}

fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(TABLE[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxies_parse() {
        assert_eq!(
            parse_proxy("http://127.0.0.1:3128").unwrap(),
            Proxy {
                address: "127.0.0.1:3128".into(),
                credential: None
            }
        );
        assert_eq!(
            parse_proxy("http://cc:p@ss@127.0.0.1:4000/").unwrap(),
            Proxy {
                address: "127.0.0.1:4000".into(),
                credential: Some("cc:p@ss".into())
            }
        );
        assert!(parse_proxy("socks5h://127.0.0.1:1080").is_err());
        assert!(parse_proxy("http://").is_err());
    }

    #[test]
    fn answers_parse() {
        let (status, body) =
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef").unwrap();
        assert_eq!((status, body.as_slice()), (200, &b"abc"[..]));
        let (status, body) = parse_response(
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((status, body.as_slice()), (404, &b"abcde"[..]));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab").is_err());
    }

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64(b"cc:secret"), "Y2M6c2VjcmV0");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b""), "");
    }
}
