//! The SOCKS proxy: SOCKS5 CONNECT (RFC 1928, with RFC 1929 username and
//! password on TCP listeners) and SOCKS4/4a CONNECT (SPEC E1). Written by
//! hand because the popular SOCKS server crates are GPL
//! (docs/research/egress-policy.md A1); SOCKS4a is here because Debian 12's
//! socat speaks nothing newer (docs/research/egress-policy.md A7:
//! `socat - SOCKS4A:…` for git-over-ssh).
//!
//! The handshake parsers are pure functions over the bytes received so far
//! ([`Step`]): every message has a hard size bound, so a client can make us
//! buffer at most [`MAX_HANDSHAKE`] bytes, and the whole handshake must
//! arrive within [`HANDSHAKE_TIMEOUT`]. Every target, however it was
//! spelled, goes to the session's one [`crate::Policy::decide`].

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::Ingress;
use crate::conn::{Admission, Ctx, dial};
use crate::handoff::{Handoff, carry};

/// A silent or slow client loses its connection after this long.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most handshake bytes we ever buffer: the longest message is a
/// SOCKS4a request (8 + 255-byte user id + NUL + 255-byte name + NUL).
pub const MAX_HANDSHAKE: usize = 1024;

/// Longest SOCKS4 user id or SOCKS4a host name we accept.
const MAX_SOCKS4_FIELD: usize = 255;

/// The outcome of parsing the bytes received so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<T> {
    /// Incomplete: read more (the message's bound is not yet reached).
    More,
    /// A whole message, and how many bytes of the input it used.
    Done(T, usize),
    /// Not a valid message: reply with an error (if the protocol has one) and close.
    Bad(Malformed),
}

/// Why a handshake message was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Neither SOCKS4 nor SOCKS5, or the wrong version for this step.
    Version(u8),
    /// SOCKS5 reserved byte not zero.
    Reserved(u8),
    /// SOCKS5 ATYP other than 1, 3, 4.
    AddressType(u8),
    /// A zero-length SOCKS5 domain.
    EmptyName,
    /// A SOCKS4 user id or SOCKS4a name longer than 255 bytes.
    TooLong,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Version(v) => write!(f, "unexpected version byte {v:#04x}"),
            Self::Reserved(v) => write!(f, "reserved byte is {v:#04x}"),
            Self::AddressType(v) => write!(f, "unsupported address type {v:#04x}"),
            Self::EmptyName => f.write_str("empty domain name"),
            Self::TooLong => f.write_str("field longer than 255 bytes"),
        }
    }
}

/// The SOCKS5 authentication methods we know.
pub const METHOD_NO_AUTH: u8 = 0x00;
pub const METHOD_USER_PASS: u8 = 0x02;
pub const METHOD_NONE_ACCEPTABLE: u8 = 0xFF;

/// SOCKS5 commands.
pub const CMD_CONNECT: u8 = 0x01;

/// SOCKS5 replies (RFC 1928 §6).
pub const REP_SUCCEEDED: u8 = 0x00;
pub const REP_GENERAL_FAILURE: u8 = 0x01;
pub const REP_NOT_ALLOWED: u8 = 0x02;
pub const REP_NETWORK_UNREACHABLE: u8 = 0x03;
pub const REP_HOST_UNREACHABLE: u8 = 0x04;
pub const REP_CONNECTION_REFUSED: u8 = 0x05;
pub const REP_COMMAND_NOT_SUPPORTED: u8 = 0x07;
pub const REP_ADDRESS_TYPE_NOT_SUPPORTED: u8 = 0x08;

/// SOCKS4 replies.
pub const SOCKS4_GRANTED: u8 = 0x5A;
pub const SOCKS4_REJECTED: u8 = 0x5B;

/// A SOCKS5 method-selection message: which of the methods we know were offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Greeting {
    pub no_auth: bool,
    pub user_pass: bool,
}

/// `VER=5 NMETHODS METHODS…` (at most 257 bytes).
pub fn parse_greeting(buf: &[u8]) -> Step<Greeting> {
    let Some(&ver) = buf.first() else {
        return Step::More;
    };
    if ver != 5 {
        return Step::Bad(Malformed::Version(ver));
    }
    let Some(&n) = buf.get(1) else {
        return Step::More;
    };
    let len = 2 + usize::from(n);
    let Some(methods) = buf.get(2..len) else {
        return Step::More;
    };
    let g = Greeting {
        no_auth: methods.contains(&METHOD_NO_AUTH),
        user_pass: methods.contains(&METHOD_USER_PASS),
    };
    Step::Done(g, len)
}

/// An RFC 1929 username/password request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserPass {
    pub user: Vec<u8>,
    pub password: Vec<u8>,
}

/// `VER=1 ULEN UNAME PLEN PASSWD` (at most 513 bytes).
pub fn parse_user_pass(buf: &[u8]) -> Step<UserPass> {
    let Some(&ver) = buf.first() else {
        return Step::More;
    };
    if ver != 1 {
        return Step::Bad(Malformed::Version(ver));
    }
    let Some(&ulen) = buf.get(1) else {
        return Step::More;
    };
    let user_end = 2 + usize::from(ulen);
    let Some(user) = buf.get(2..user_end) else {
        return Step::More;
    };
    let Some(&plen) = buf.get(user_end) else {
        return Step::More;
    };
    let end = user_end + 1 + usize::from(plen);
    let Some(password) = buf.get(user_end + 1..end) else {
        return Step::More;
    };
    Step::Done(
        UserPass {
            user: user.to_vec(),
            password: password.to_vec(),
        },
        end,
    )
}

/// Where a SOCKS client wants to go, as it spelled it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Ipv4(Ipv4Addr),
    Ipv6(Ipv6Addr),
    /// A name, raw bytes (not necessarily UTF-8: the policy judges it).
    Domain(Vec<u8>),
}

impl Target {
    /// The host string handed to the policy: dotted IPv4, `[v6]`, or the
    /// name (invalid UTF-8 replaced, which the policy refuses as malformed).
    pub fn host(&self) -> String {
        match self {
            Self::Ipv4(ip) => ip.to_string(),
            Self::Ipv6(ip) => format!("[{ip}]"),
            Self::Domain(name) => String::from_utf8_lossy(name).into_owned(),
        }
    }
}

/// A SOCKS5 request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Socks5Request {
    pub cmd: u8,
    pub target: Target,
    pub port: u16,
}

impl Socks5Request {
    pub fn ingress(&self) -> Ingress {
        match self.target {
            Target::Ipv4(_) => Ingress::Socks5Ipv4,
            Target::Ipv6(_) => Ingress::Socks5Ipv6,
            Target::Domain(_) => Ingress::Socks5Domain,
        }
    }
}

/// `VER=5 CMD RSV=0 ATYP DST.ADDR DST.PORT` (at most 262 bytes).
pub fn parse_socks5_request(buf: &[u8]) -> Step<Socks5Request> {
    let Some(head) = buf.get(..4) else {
        // Report a wrong version as early as possible.
        return match buf.first() {
            Some(&v) if v != 5 => Step::Bad(Malformed::Version(v)),
            _ => Step::More,
        };
    };
    let [ver, cmd, rsv, atyp] = [head[0], head[1], head[2], head[3]];
    if ver != 5 {
        return Step::Bad(Malformed::Version(ver));
    }
    if rsv != 0 {
        return Step::Bad(Malformed::Reserved(rsv));
    }
    let (target, addr_end) = match atyp {
        1 => {
            let Some(a) = buf.get(4..8) else {
                return Step::More;
            };
            (Target::Ipv4(Ipv4Addr::new(a[0], a[1], a[2], a[3])), 8)
        }
        3 => {
            let Some(&n) = buf.get(4) else {
                return Step::More;
            };
            if n == 0 {
                return Step::Bad(Malformed::EmptyName);
            }
            let end = 5 + usize::from(n);
            let Some(name) = buf.get(5..end) else {
                return Step::More;
            };
            (Target::Domain(name.to_vec()), end)
        }
        4 => {
            let Some(a) = buf.get(4..20) else {
                return Step::More;
            };
            let mut octets = [0u8; 16];
            octets.copy_from_slice(a);
            (Target::Ipv6(Ipv6Addr::from(octets)), 20)
        }
        other => return Step::Bad(Malformed::AddressType(other)),
    };
    let Some(p) = buf.get(addr_end..addr_end + 2) else {
        return Step::More;
    };
    let port = u16::from_be_bytes([p[0], p[1]]);
    Step::Done(Socks5Request { cmd, target, port }, addr_end + 2)
}

/// A SOCKS4 or SOCKS4a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Socks4Request {
    pub cmd: u8,
    pub port: u16,
    /// `Ipv4` for SOCKS4, `Domain` for SOCKS4a (never `Ipv6`).
    pub target: Target,
    pub user_id: Vec<u8>,
}

impl Socks4Request {
    pub fn ingress(&self) -> Ingress {
        match self.target {
            Target::Domain(_) => Ingress::Socks4a,
            _ => Ingress::Socks4,
        }
    }
}

/// `VN=4 CD DSTPORT DSTIP USERID NUL [NAME NUL]`; the name is present
/// (SOCKS4a) when DSTIP is `0.0.0.x` with `x != 0` (at most 520 bytes).
pub fn parse_socks4_request(buf: &[u8]) -> Step<Socks4Request> {
    let Some(&ver) = buf.first() else {
        return Step::More;
    };
    if ver != 4 {
        return Step::Bad(Malformed::Version(ver));
    }
    let Some(head) = buf.get(..8) else {
        return Step::More;
    };
    let cmd = head[1];
    let port = u16::from_be_bytes([head[2], head[3]]);
    let ip = Ipv4Addr::new(head[4], head[5], head[6], head[7]);
    let (user_id, after_user) = match nul_terminated(&buf[8..]) {
        Ok(Some((field, used))) => (field, 8 + used),
        Ok(None) => return Step::More,
        Err(bad) => return Step::Bad(bad),
    };
    let [a, b, c, d] = ip.octets();
    if a == 0 && b == 0 && c == 0 && d != 0 {
        match nul_terminated(&buf[after_user..]) {
            Ok(Some((name, used))) => Step::Done(
                Socks4Request {
                    cmd,
                    port,
                    target: Target::Domain(name.to_vec()),
                    user_id: user_id.to_vec(),
                },
                after_user + used,
            ),
            Ok(None) => Step::More,
            Err(bad) => Step::Bad(bad),
        }
    } else {
        Step::Done(
            Socks4Request {
                cmd,
                port,
                target: Target::Ipv4(ip),
                user_id: user_id.to_vec(),
            },
            after_user,
        )
    }
}

/// A NUL-terminated field of at most [`MAX_SOCKS4_FIELD`] bytes: the field
/// and the bytes used including the NUL; `None` if the NUL has not arrived.
fn nul_terminated(buf: &[u8]) -> Result<Option<(&[u8], usize)>, Malformed> {
    let window = &buf[..buf.len().min(MAX_SOCKS4_FIELD + 1)];
    match window.iter().position(|&b| b == 0) {
        Some(i) => Ok(Some((&buf[..i], i + 1))),
        None if window.len() > MAX_SOCKS4_FIELD => Err(Malformed::TooLong),
        None => Ok(None),
    }
}

/// A SOCKS5 reply with the bound address (`0.0.0.0:0` on errors).
pub fn socks5_reply(rep: u8, bound: Option<SocketAddr>) -> Vec<u8> {
    let mut out = vec![5, rep, 0];
    match bound {
        Some(SocketAddr::V6(a)) => {
            out.push(4);
            out.extend_from_slice(&a.ip().octets());
            out.extend_from_slice(&a.port().to_be_bytes());
        }
        Some(SocketAddr::V4(a)) => {
            out.push(1);
            out.extend_from_slice(&a.ip().octets());
            out.extend_from_slice(&a.port().to_be_bytes());
        }
        None => out.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0]),
    }
    out
}

/// A SOCKS4 reply (`VN=0 CD DSTPORT DSTIP`, the address fields ignored by clients).
pub fn socks4_reply(cd: u8) -> [u8; 8] {
    [0, cd, 0, 0, 0, 0, 0, 0]
}

/// SOCKS5 reply code for a failed dial.
fn dial_error_reply(e: &io::Error) -> u8 {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => REP_CONNECTION_REFUSED,
        io::ErrorKind::NetworkUnreachable => REP_NETWORK_UNREACHABLE,
        io::ErrorKind::TimedOut
        | io::ErrorKind::HostUnreachable
        | io::ErrorKind::AddrNotAvailable => REP_HOST_UNREACHABLE,
        _ => REP_GENERAL_FAILURE,
    }
}

/// Buffered handshake reads: bytes left over after one message are the
/// start of the next (or, after the request, early tunnel data).
struct Reader {
    buf: Vec<u8>,
}

impl Reader {
    /// Reads until `parse` yields a message or rejects the bytes.
    async fn next<S, T>(
        &mut self,
        io: &mut S,
        parse: fn(&[u8]) -> Step<T>,
    ) -> io::Result<Result<T, Malformed>>
    where
        S: AsyncRead + Unpin,
    {
        loop {
            match parse(&self.buf) {
                Step::Done(msg, used) => {
                    self.buf.drain(..used);
                    return Ok(Ok(msg));
                }
                Step::Bad(bad) => return Ok(Err(bad)),
                Step::More => {}
            }
            let room = MAX_HANDSHAKE.saturating_sub(self.buf.len());
            if room == 0 {
                // Unreachable with the parsers' bounds; refuse rather than grow.
                return Ok(Err(Malformed::TooLong));
            }
            let mut chunk = [0u8; MAX_HANDSHAKE];
            let n = io.read(&mut chunk[..room]).await?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// What the handshake produced: a CONNECT to decide, and how to answer it.
struct Request {
    host: String,
    port: u16,
    ingress: Ingress,
    /// Bytes the client sent after its request, for the upstream.
    early: Vec<u8>,
}

/// Serves one SOCKS client connection to its end.
/// `admission`: whether it came in under the session's connection cap;
/// `handoff`: whether its tunnel goes to the forwarder.
pub(crate) async fn serve<S>(ctx: Arc<Ctx>, mut client: S, admission: Admission, handoff: Handoff)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let req = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&ctx, &mut client)).await {
        Ok(Ok(Some(req))) => req,
        Ok(Ok(None)) => return,
        Ok(Err(e)) => {
            tracing::debug!("socks handshake: {e}");
            return;
        }
        Err(_) => {
            tracing::debug!("socks handshake timed out");
            return;
        }
    };
    let socks5 = req.ingress != Ingress::Socks4 && req.ingress != Ingress::Socks4a;
    let reply = |rep5: u8, rep4: u8, bound: Option<SocketAddr>| {
        if socks5 {
            socks5_reply(rep5, bound)
        } else {
            socks4_reply(rep4).to_vec()
        }
    };
    let addrs = match ctx
        .decide_for(&admission, &req.host, req.port, req.ingress)
        .await
    {
        Ok(addrs) => addrs,
        Err(_) => {
            let _ = write_reply(&mut client, &reply(REP_NOT_ALLOWED, SOCKS4_REJECTED, None)).await;
            return;
        }
    };
    let mut upstream = match dial(&addrs).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("socks {}:{}: {e}", req.host, req.port);
            let _ = write_reply(
                &mut client,
                &reply(dial_error_reply(&e), SOCKS4_REJECTED, None),
            )
            .await;
            return;
        }
    };
    let bound = upstream.local_addr().ok();
    if write_reply(&mut client, &reply(REP_SUCCEEDED, SOCKS4_GRANTED, bound))
        .await
        .is_err()
    {
        return;
    }
    if !req.early.is_empty() && upstream.write_all(&req.early).await.is_err() {
        return;
    }
    carry(&mut client, upstream, handoff).await;
}

async fn write_reply<S: AsyncWrite + Unpin>(client: &mut S, bytes: &[u8]) -> io::Result<()> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, client.write_all(bytes)).await {
        Ok(r) => r,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

/// Reads and answers everything up to the request. `None`: the client was
/// answered (or is beyond answering) and the connection ends here.
async fn handshake<S>(ctx: &Ctx, client: &mut S) -> io::Result<Option<Request>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut reader = Reader {
        buf: Vec::with_capacity(MAX_HANDSHAKE),
    };
    let mut first = [0u8; 1];
    if client.read(&mut first).await? == 0 {
        return Ok(None);
    }
    reader.buf.push(first[0]);
    match first[0] {
        5 => socks5_handshake(ctx, client, reader).await,
        4 => socks4_handshake(ctx, client, reader).await,
        other => {
            tracing::debug!("socks: {}", Malformed::Version(other));
            Ok(None)
        }
    }
}

async fn socks5_handshake<S>(
    ctx: &Ctx,
    client: &mut S,
    mut reader: Reader,
) -> io::Result<Option<Request>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let greeting = match reader.next(client, parse_greeting).await? {
        Ok(g) => g,
        Err(bad) => {
            tracing::debug!("socks5 greeting: {bad}");
            return Ok(None);
        }
    };
    // TCP listeners are reachable by any local process: the credential is
    // mandatory. On unix listeners reaching the socket is the capability;
    // a client configured with a user/password is let in with any.
    let method = match (&ctx.credential, greeting) {
        (
            Some(_),
            Greeting {
                user_pass: true, ..
            },
        ) => METHOD_USER_PASS,
        (Some(_), _) => METHOD_NONE_ACCEPTABLE,
        (None, Greeting { no_auth: true, .. }) => METHOD_NO_AUTH,
        (
            None,
            Greeting {
                user_pass: true, ..
            },
        ) => METHOD_USER_PASS,
        (None, _) => METHOD_NONE_ACCEPTABLE,
    };
    client.write_all(&[5, method]).await?;
    if method == METHOD_NONE_ACCEPTABLE {
        return Ok(None);
    }
    if method == METHOD_USER_PASS {
        let up = match reader.next(client, parse_user_pass).await? {
            Ok(up) => up,
            Err(bad) => {
                tracing::debug!("socks5 auth: {bad}");
                client.write_all(&[1, 1]).await?;
                return Ok(None);
            }
        };
        let ok = ctx
            .credential
            .as_ref()
            .is_none_or(|c| c.matches(&up.user, &up.password));
        client.write_all(&[1, if ok { 0 } else { 1 }]).await?;
        if !ok {
            tracing::debug!("socks5: wrong proxy credential");
            return Ok(None);
        }
    }
    let req = match reader.next(client, parse_socks5_request).await? {
        Ok(req) => req,
        Err(bad) => {
            tracing::debug!("socks5 request: {bad}");
            let rep = match bad {
                Malformed::AddressType(_) => REP_ADDRESS_TYPE_NOT_SUPPORTED,
                _ => REP_GENERAL_FAILURE,
            };
            client.write_all(&socks5_reply(rep, None)).await?;
            return Ok(None);
        }
    };
    if req.cmd != CMD_CONNECT {
        // BIND and UDP ASSOCIATE would open inbound or UDP paths the policy does not cover.
        client
            .write_all(&socks5_reply(REP_COMMAND_NOT_SUPPORTED, None))
            .await?;
        return Ok(None);
    }
    Ok(Some(Request {
        host: req.target.host(),
        port: req.port,
        ingress: req.ingress(),
        early: reader.buf,
    }))
}

async fn socks4_handshake<S>(
    ctx: &Ctx,
    client: &mut S,
    mut reader: Reader,
) -> io::Result<Option<Request>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let req = match reader.next(client, parse_socks4_request).await? {
        Ok(req) => req,
        Err(bad) => {
            tracing::debug!("socks4 request: {bad}");
            client.write_all(&socks4_reply(SOCKS4_REJECTED)).await?;
            return Ok(None);
        }
    };
    if ctx.credential.is_some() {
        // SOCKS4 has no password: it cannot meet a TCP listener's credential.
        tracing::debug!("socks4 refused on a TCP listener: no credential possible");
        client.write_all(&socks4_reply(SOCKS4_REJECTED)).await?;
        return Ok(None);
    }
    if req.cmd != CMD_CONNECT {
        client.write_all(&socks4_reply(SOCKS4_REJECTED)).await?;
        return Ok(None);
    }
    Ok(Some(Request {
        host: req.target.host(),
        port: req.port,
        ingress: req.ingress(),
        early: reader.buf,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greeting() {
        assert_eq!(parse_greeting(&[]), Step::More);
        assert_eq!(parse_greeting(&[5]), Step::More);
        assert_eq!(parse_greeting(&[5, 2, 0]), Step::More);
        assert_eq!(
            parse_greeting(&[5, 2, 0, 2, 9]),
            Step::Done(
                Greeting {
                    no_auth: true,
                    user_pass: true
                },
                4
            )
        );
        assert_eq!(
            parse_greeting(&[5, 0]),
            Step::Done(
                Greeting {
                    no_auth: false,
                    user_pass: false
                },
                2
            )
        );
        assert_eq!(parse_greeting(&[4, 1]), Step::Bad(Malformed::Version(4)));
    }

    #[test]
    fn user_pass() {
        let msg = [1, 1, b'u', 2, b'p', b'w'];
        for i in 0..msg.len() {
            assert_eq!(parse_user_pass(&msg[..i]), Step::More, "{i}");
        }
        assert_eq!(
            parse_user_pass(&msg),
            Step::Done(
                UserPass {
                    user: b"u".to_vec(),
                    password: b"pw".to_vec()
                },
                6
            )
        );
        assert_eq!(parse_user_pass(&[5, 1]), Step::Bad(Malformed::Version(5)));
    }

    #[test]
    fn socks5_requests() {
        let v4 = [5, 1, 0, 1, 127, 0, 0, 1, 0, 80, 0xAA];
        assert_eq!(
            parse_socks5_request(&v4),
            Step::Done(
                Socks5Request {
                    cmd: 1,
                    target: Target::Ipv4(Ipv4Addr::LOCALHOST),
                    port: 80
                },
                10
            )
        );
        for i in 0..10 {
            assert_eq!(parse_socks5_request(&v4[..i]), Step::More, "{i}");
        }
        let mut name = vec![5, 1, 0, 3, 8];
        name.extend_from_slice(b"svc.test");
        name.extend_from_slice(&[1, 187]);
        let r = parse_socks5_request(&name);
        assert_eq!(
            r,
            Step::Done(
                Socks5Request {
                    cmd: 1,
                    target: Target::Domain(b"svc.test".to_vec()),
                    port: 443
                },
                15
            )
        );
        let mut v6 = vec![5, 2, 0, 4];
        v6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        v6.extend_from_slice(&[0, 22]);
        let Step::Done(r, 22) = parse_socks5_request(&v6) else {
            panic!()
        };
        assert_eq!(r.target.host(), "[::1]");
        assert_eq!(r.ingress(), Ingress::Socks5Ipv6);
        assert_eq!(
            parse_socks5_request(&[5, 1, 0, 9, 0]),
            Step::Bad(Malformed::AddressType(9))
        );
        assert_eq!(
            parse_socks5_request(&[5, 1, 1, 1]),
            Step::Bad(Malformed::Reserved(1))
        );
        assert_eq!(
            parse_socks5_request(&[5, 1, 0, 3, 0, 0, 80]),
            Step::Bad(Malformed::EmptyName)
        );
        assert_eq!(parse_socks5_request(&[4]), Step::Bad(Malformed::Version(4)));
    }

    #[test]
    fn socks4_requests() {
        let plain = [4, 1, 0, 22, 10, 0, 0, 1, b'u', 0, 0xAA];
        assert_eq!(
            parse_socks4_request(&plain),
            Step::Done(
                Socks4Request {
                    cmd: 1,
                    port: 22,
                    target: Target::Ipv4(Ipv4Addr::new(10, 0, 0, 1)),
                    user_id: b"u".to_vec()
                },
                10
            )
        );
        let mut a = vec![4, 1, 0, 22, 0, 0, 0, 1, 0];
        a.extend_from_slice(b"github.com\0");
        for i in 0..a.len() {
            assert_eq!(parse_socks4_request(&a[..i]), Step::More, "{i}");
        }
        let Step::Done(r, n) = parse_socks4_request(&a) else {
            panic!()
        };
        assert_eq!(
            (r.target.host().as_str(), r.ingress(), n),
            ("github.com", Ingress::Socks4a, a.len())
        );
        // 0.0.0.0 is plain SOCKS4 (no name follows).
        let Step::Done(r, 9) = parse_socks4_request(&[4, 1, 0, 22, 0, 0, 0, 0, 0]) else {
            panic!()
        };
        assert_eq!(r.ingress(), Ingress::Socks4);
        // Bounds: a 255-byte user id is fine, 256 is not.
        let mut long = vec![4, 1, 0, 22, 1, 2, 3, 4];
        long.extend(std::iter::repeat_n(b'x', 255));
        assert_eq!(parse_socks4_request(&long), Step::More);
        long.push(b'x');
        assert_eq!(parse_socks4_request(&long), Step::Bad(Malformed::TooLong));
        let mut long_name = vec![4, 1, 0, 22, 0, 0, 0, 9, 0];
        long_name.extend(std::iter::repeat_n(b'x', 256));
        assert_eq!(
            parse_socks4_request(&long_name),
            Step::Bad(Malformed::TooLong)
        );
    }

    #[test]
    fn replies() {
        assert_eq!(
            socks5_reply(REP_NOT_ALLOWED, None),
            vec![5, 2, 0, 1, 0, 0, 0, 0, 0, 0]
        );
        let r = socks5_reply(0, Some("127.0.0.1:258".parse().unwrap()));
        assert_eq!(r, vec![5, 0, 0, 1, 127, 0, 0, 1, 1, 2]);
        assert_eq!(socks5_reply(0, Some("[::1]:1".parse().unwrap())).len(), 22);
        assert_eq!(socks4_reply(SOCKS4_REJECTED)[1], 0x5B);
    }
}
