//! End-to-end tests of one session's proxies over real sockets: unix and
//! loopback TCP listeners, echo and HTTP origins on 127.0.0.1, the policy
//! from `policy.rs`. Nothing here resolves a public name or dials outside
//! 127.0.0.0/8: the only allowed names are `*.test` names pinned with
//! `resolve`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

use crate::server::{Credential, Endpoints, Listen, SessionProxies, ViolationSink};
use crate::{Ingress, Policy, PolicyConfig, Violation};

/// Every network step of a test is bounded by this.
pub(crate) const STEP: Duration = Duration::from_secs(10);

pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
pub(crate) type BoxIo = Box<dyn Io>;

pub(crate) async fn within<F: std::future::Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(STEP, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: timed out after {STEP:?}"),
    }
}

/// A policy allowing the given `*.test` names, each pinned to 127.0.0.1
/// (and allowed to be private, since loopback is); IP entries (`127.0.0.1`)
/// are allowed as they are.
pub(crate) fn policy_for(entries: &[&str]) -> Arc<Policy> {
    let config = PolicyConfig {
        network_enabled: true,
        allow: entries.iter().map(|n| n.to_string()).collect(),
        allow_private: entries.iter().map(|n| n.to_string()).collect(),
        resolve: entries
            .iter()
            .filter(|n| n.parse::<IpAddr>().is_err())
            .map(|n| (n.to_string(), IpAddr::V4(Ipv4Addr::LOCALHOST)))
            .collect(),
        open: false,
    };
    Arc::new(Policy::new(config).unwrap())
}

pub(crate) fn policy_off() -> Arc<Policy> {
    Arc::new(Policy::new(PolicyConfig::default()).unwrap())
}

/// One running session plus what its violation sink received.
pub(crate) struct Harness {
    pub(crate) proxies: Option<SessionProxies>,
    pub(crate) violations: Arc<Mutex<Vec<Violation>>>,
    pub(crate) _dir: Option<tempfile::TempDir>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Unix,
    Tcp,
}

pub(crate) fn test_credential() -> Credential {
    Credential {
        user: "sess-1".into(),
        password: "s3cret:with:colons".into(),
    }
}

impl Harness {
    pub(crate) async fn start(policy: Arc<Policy>, kind: Kind) -> Self {
        Self::start_capped(policy, kind, crate::server::DEFAULT_MAX_CONNECTIONS).await
    }

    /// [`Harness::start`] with this many open connections at most.
    pub(crate) async fn start_capped(policy: Arc<Policy>, kind: Kind, cap: usize) -> Self {
        let violations = Arc::new(Mutex::new(Vec::new()));
        let sink_store = violations.clone();
        let sink: ViolationSink = Arc::new(move |v| sink_store.lock().unwrap().push(v));
        let (listen, dir) = match kind {
            Kind::Unix => {
                let dir = tempfile::tempdir().unwrap();
                (
                    Listen::Unix {
                        dir: dir.path().to_path_buf(),
                    },
                    Some(dir),
                )
            }
            Kind::Tcp => (
                Listen::Tcp {
                    credential: test_credential(),
                },
                None,
            ),
        };
        let proxies = SessionProxies::start(policy, listen, sink, cap)
            .await
            .unwrap();
        Self {
            proxies: Some(proxies),
            violations,
            _dir: dir,
        }
    }

    pub(crate) fn proxies(&self) -> &SessionProxies {
        self.proxies.as_ref().unwrap()
    }

    pub(crate) async fn http(&self) -> BoxIo {
        match self.proxies().endpoints() {
            Endpoints::Unix { http, .. } => {
                Box::new(within("connect", UnixStream::connect(http)).await.unwrap())
            }
            Endpoints::Tcp { http, .. } => {
                Box::new(within("connect", TcpStream::connect(http)).await.unwrap())
            }
        }
    }

    pub(crate) async fn socks(&self) -> BoxIo {
        match self.proxies().endpoints() {
            Endpoints::Unix { socks, .. } => {
                Box::new(within("connect", UnixStream::connect(socks)).await.unwrap())
            }
            Endpoints::Tcp { socks, .. } => {
                Box::new(within("connect", TcpStream::connect(socks)).await.unwrap())
            }
        }
    }

    /// The `Proxy-Authorization` line this session needs (empty on unix).
    pub(crate) fn auth_line(&self) -> String {
        match self.proxies().endpoints() {
            Endpoints::Unix { .. } => String::new(),
            Endpoints::Tcp { credential, .. } => basic_line(&credential.user, &credential.password),
        }
    }

    pub(crate) fn take_violations(&self) -> Vec<Violation> {
        std::mem::take(&mut *self.violations.lock().unwrap())
    }
}

pub(crate) fn basic_line(user: &str, password: &str) -> String {
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Proxy-Authorization: Basic {token}\r\n")
}

// ---------------------------------------------------------------- origins

/// An echo server on 127.0.0.1 (passes half-close on: EOF in, shutdown out).
pub(crate) async fn echo_server() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    port
}

/// What the HTTP origin saw.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) method: String,
    pub(crate) uri: String,
    pub(crate) headers: HashMap<String, String>,
    pub(crate) body: Vec<u8>,
}

/// An HTTP origin on 127.0.0.1: records each request, answers `origin-ok`
/// with some hop-by-hop headers the proxy must strip.
pub(crate) async fn http_origin() -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let store = seen.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let store = store.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let store = store.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes().to_vec())
                            .unwrap_or_default();
                        let mut headers = HashMap::new();
                        for (k, v) in &parts.headers {
                            headers.insert(
                                k.as_str().to_owned(),
                                String::from_utf8_lossy(v.as_bytes()).into_owned(),
                            );
                        }
                        let len = body.len();
                        store.lock().unwrap().push(Seen {
                            method: parts.method.to_string(),
                            uri: parts.uri.to_string(),
                            headers,
                            body,
                        });
                        let resp = Response::builder()
                            .header("x-origin", "1")
                            .header("x-body-len", len.to_string())
                            .header("connection", "x-hop-resp")
                            .header("x-hop-resp", "1")
                            .header("keep-alive", "timeout=5")
                            .header("proxy-authenticate", "Basic realm=\"origin\"")
                            .body(Full::new(Bytes::from_static(b"origin-ok")))
                            .unwrap();
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    (port, seen)
}

// ---------------------------------------------------------------- clients

/// A parsed HTTP response (status, lower-cased headers, body).
#[derive(Debug)]
pub(crate) struct Resp {
    pub(crate) status: u16,
    pub(crate) headers: HashMap<String, String>,
    pub(crate) body: Vec<u8>,
}

/// Reads a response head; returns it and any bytes read past it.
pub(crate) async fn read_head(
    io: &mut BoxIo,
) -> std::io::Result<(u16, HashMap<String, String>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return Err(std::io::Error::other("head too long"));
        }
        let n = io.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
    let mut headers = HashMap::new();
    for line in lines.filter(|l| !l.is_empty()) {
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    Ok((status, headers, buf[end..].to_vec()))
}

/// Reads a whole response (Content-Length, chunked, or until EOF).
pub(crate) async fn read_response(io: &mut BoxIo) -> std::io::Result<Resp> {
    let (status, headers, mut rest) = read_head(io).await?;
    let body = if let Some(len) = headers
        .get("content-length")
        .and_then(|l| l.parse::<usize>().ok())
    {
        while rest.len() < len {
            let mut chunk = vec![0u8; len - rest.len()];
            let n = io.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            rest.extend_from_slice(&chunk[..n]);
        }
        rest.truncate(len);
        rest
    } else if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.contains("chunked"))
    {
        // Good enough for tests: read to the terminating chunk and decode.
        while !rest.windows(5).any(|w| w == b"0\r\n\r\n") {
            let mut chunk = [0u8; 4096];
            let n = io.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            rest.extend_from_slice(&chunk[..n]);
        }
        decode_chunked(&rest)
    } else {
        io.read_to_end(&mut rest).await?;
        rest
    };
    Ok(Resp {
        status,
        headers,
        body,
    })
}

fn decode_chunked(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = data.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&data[..i]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[i + 2..i + 2 + size]);
        data = &data[i + 2 + size + 2..];
    }
    out
}

/// `CONNECT target` through the session's HTTP proxy: the tunnel, or the refusal response.
pub(crate) async fn http_connect(h: &Harness, target: &str) -> Result<BoxIo, Resp> {
    let mut io = h.http().await;
    let req = format!(
        "CONNECT {target} HTTP/1.1\r\nHost: ignored.invalid:1\r\n{}\r\n",
        h.auth_line()
    );
    io.write_all(req.as_bytes()).await.unwrap();
    let (status, headers, rest) = within("CONNECT reply", read_head(&mut io)).await.unwrap();
    if status == 200 {
        assert!(
            rest.is_empty(),
            "no bytes may follow a CONNECT 200 before the tunnel"
        );
        Ok(io)
    } else {
        let len = headers
            .get("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let mut body = rest;
        while body.len() < len {
            let mut chunk = vec![0u8; len - body.len()];
            let n = within("CONNECT body", io.read(&mut chunk)).await.unwrap();
            assert!(n > 0, "EOF in error body");
            body.extend_from_slice(&chunk[..n]);
        }
        Err(Resp {
            status,
            headers,
            body,
        })
    }
}

/// An absolute-form GET through the session's HTTP proxy.
pub(crate) async fn http_get(h: &Harness, url: &str) -> Resp {
    let mut io = h.http().await;
    let req = format!(
        "GET {url} HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n{}\r\n",
        h.auth_line()
    );
    io.write_all(req.as_bytes()).await.unwrap();
    within("GET reply", read_response(&mut io)).await.unwrap()
}

/// How the SOCKS5 client names its target.
#[derive(Clone, Debug)]
pub(crate) enum Addr5 {
    V4(Ipv4Addr),
    V6(Ipv6Addr),
    Name(Vec<u8>),
}

/// SOCKS5 methods a test client offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Auth5 {
    NoAuth,
    /// With this session's credential (on unix: any).
    UserPass,
    /// With a wrong password.
    WrongPass,
}

/// A SOCKS5 CONNECT (or another command): the tunnel, or the failing reply
/// code (`0xFF` method refusal, `0x100 + status` for a failed RFC 1929 auth).
/// A SOCKS5 CONNECT, without credentials, to `svc.test:port`.
pub(crate) async fn socks5_svc(h: &Harness, port: u16) -> Result<BoxIo, u16> {
    socks5(
        h,
        Auth5::NoAuth,
        1,
        &Addr5::Name(b"svc.test".to_vec()),
        port,
    )
    .await
}

pub(crate) async fn socks5(
    h: &Harness,
    auth: Auth5,
    cmd: u8,
    addr: &Addr5,
    port: u16,
) -> Result<BoxIo, u16> {
    let mut io = h.socks().await;
    let method = if auth == Auth5::NoAuth { 0 } else { 2 };
    io.write_all(&[5, 1, method]).await.unwrap();
    let mut sel = [0u8; 2];
    within("socks5 method", io.read_exact(&mut sel))
        .await
        .unwrap();
    assert_eq!(sel[0], 5);
    if sel[1] == 0xFF {
        return Err(0xFF);
    }
    assert_eq!(sel[1], method);
    if method == 2 {
        let c = test_credential();
        let pass = if auth == Auth5::WrongPass {
            "wrong".to_owned()
        } else {
            c.password
        };
        let mut msg = vec![1, c.user.len() as u8];
        msg.extend_from_slice(c.user.as_bytes());
        msg.push(pass.len() as u8);
        msg.extend_from_slice(pass.as_bytes());
        io.write_all(&msg).await.unwrap();
        let mut st = [0u8; 2];
        within("socks5 auth", io.read_exact(&mut st)).await.unwrap();
        assert_eq!(st[0], 1);
        if st[1] != 0 {
            return Err(0x100 + u16::from(st[1]));
        }
    }
    let mut req = vec![5, cmd, 0];
    match addr {
        Addr5::V4(ip) => {
            req.push(1);
            req.extend_from_slice(&ip.octets());
        }
        Addr5::V6(ip) => {
            req.push(4);
            req.extend_from_slice(&ip.octets());
        }
        Addr5::Name(n) => {
            req.push(3);
            req.push(n.len() as u8);
            req.extend_from_slice(n);
        }
    }
    req.extend_from_slice(&port.to_be_bytes());
    io.write_all(&req).await.unwrap();
    let mut head = [0u8; 4];
    within("socks5 reply", io.read_exact(&mut head))
        .await
        .unwrap();
    assert_eq!(head[0], 5);
    let rest = match head[3] {
        1 => 6,
        4 => 18,
        other => panic!("reply ATYP {other}"),
    };
    let mut bound = vec![0u8; rest];
    within("socks5 reply addr", io.read_exact(&mut bound))
        .await
        .unwrap();
    if head[1] == 0 {
        Ok(io)
    } else {
        Err(u16::from(head[1]))
    }
}

/// SOCKS4 (an IPv4 address) or SOCKS4a (a name) CONNECT: the tunnel or the reply code.
pub(crate) async fn socks4(
    h: &Harness,
    cmd: u8,
    ip: Option<Ipv4Addr>,
    name: Option<&[u8]>,
    port: u16,
) -> Result<BoxIo, u8> {
    let mut io = h.socks().await;
    let mut req = vec![4, cmd];
    req.extend_from_slice(&port.to_be_bytes());
    match (ip, name) {
        (Some(ip), None) => req.extend_from_slice(&ip.octets()),
        (None, Some(_)) => req.extend_from_slice(&[0, 0, 0, 1]),
        _ => unreachable!(),
    }
    req.extend_from_slice(b"user\0");
    if let Some(n) = name {
        req.extend_from_slice(n);
        req.push(0);
    }
    io.write_all(&req).await.unwrap();
    let mut reply = [0u8; 8];
    within("socks4 reply", io.read_exact(&mut reply))
        .await
        .unwrap();
    assert_eq!(reply[0], 0);
    if reply[1] == 0x5A {
        Ok(io)
    } else {
        Err(reply[1])
    }
}

/// Sends `msg` through a tunnel to the echo server and expects it back.
pub(crate) async fn echo_round_trip(io: &mut BoxIo, msg: &[u8]) {
    io.write_all(msg).await.unwrap();
    let mut back = vec![0u8; msg.len()];
    within("echo", io.read_exact(&mut back)).await.unwrap();
    assert_eq!(back, msg);
}

/// A GET through a tunnel to the HTTP origin: whether the origin answered.
pub(crate) async fn origin_through(mut io: BoxIo) -> bool {
    io.write_all(b"GET /through HTTP/1.1\r\nHost: svc.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let resp = within("origin through tunnel", read_response(&mut io))
        .await
        .unwrap();
    resp.status == 200 && resp.body == b"origin-ok"
}

fn assert_refused_resp(resp: &Resp, target: &str) {
    assert_eq!(resp.status, 403, "{resp:?}");
    assert!(resp.headers.contains_key("x-proxy-error"), "{resp:?}");
    let body = String::from_utf8_lossy(&resp.body);
    assert!(
        body.starts_with(&format!("cc_server egress: {target}")),
        "{body}"
    );
    assert!(body.contains(" refused: "), "{body}");
}

fn assert_one_violation(h: &Harness, ingress: Ingress) {
    let v = h.take_violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].ingress, ingress, "{v:?}");
}

// ---------------------------------------------------------------- refusals (work with any policy)

#[tokio::test]
async fn refusals_on_every_ingress_network_off() {
    for kind in [Kind::Unix, Kind::Tcp] {
        let h = Harness::start(policy_off(), kind).await;
        let port = echo_server().await;

        let resp = http_connect(&h, &format!("svc.test:{port}"))
            .await
            .err()
            .unwrap();
        assert_refused_resp(&resp, "svc.test");
        assert_one_violation(&h, Ingress::Connect);

        let resp = http_get(&h, &format!("http://svc.test:{port}/x")).await;
        assert_refused_resp(&resp, "svc.test");
        assert_one_violation(&h, Ingress::HttpForward);

        let auth = if kind == Kind::Tcp {
            Auth5::UserPass
        } else {
            Auth5::NoAuth
        };
        let cases = [
            (Addr5::Name(b"svc.test".to_vec()), Ingress::Socks5Domain),
            (Addr5::V4(Ipv4Addr::LOCALHOST), Ingress::Socks5Ipv4),
            (Addr5::V6(Ipv6Addr::LOCALHOST), Ingress::Socks5Ipv6),
        ];
        for (addr, ingress) in cases {
            let rep = socks5(&h, auth, 1, &addr, port).await.err().unwrap();
            assert_eq!(rep, 0x02, "{addr:?}");
            assert_one_violation(&h, ingress);
        }
        if kind == Kind::Unix {
            assert_eq!(
                socks4(&h, 1, None, Some(b"svc.test"), port)
                    .await
                    .err()
                    .unwrap(),
                0x5B
            );
            assert_one_violation(&h, Ingress::Socks4a);
            assert_eq!(
                socks4(&h, 1, Some(Ipv4Addr::LOCALHOST), None, port)
                    .await
                    .err()
                    .unwrap(),
                0x5B
            );
            assert_one_violation(&h, Ingress::Socks4);
        }
    }
}

#[tokio::test]
async fn bad_requests_and_unsupported_commands() {
    let h = Harness::start(policy_off(), Kind::Unix).await;
    // Origin-form: not a proxy request.
    let mut io = h.http().await;
    io.write_all(b"GET /index.html HTTP/1.1\r\nHost: svc.test\r\n\r\n")
        .await
        .unwrap();
    let resp = within("400", read_response(&mut io)).await.unwrap();
    assert_eq!(resp.status, 400);
    assert!(
        String::from_utf8_lossy(&resp.body).contains("absolute-form"),
        "{resp:?}"
    );
    // The connection stays usable for a proper request.
    io.write_all(b"GET http://svc.test/ HTTP/1.1\r\nHost: svc.test\r\n\r\n")
        .await
        .unwrap();
    let resp = within("403", read_response(&mut io)).await.unwrap();
    assert_eq!(resp.status, 403);
    assert_one_violation(&h, Ingress::HttpForward);

    for url in [
        "https://svc.test/",
        "ftp://svc.test/x",
        "http://user@svc.test/",
    ] {
        let resp = http_get(&h, url).await;
        assert_eq!(resp.status, 400, "{url}: {resp:?}");
    }
    for target in ["svc.test", "http://svc.test:80/", "u@svc.test:443"] {
        let resp = http_connect(&h, target).await.err().unwrap();
        assert_eq!(resp.status, 400, "{target}: {resp:?}");
    }
    assert!(h.take_violations().is_empty());

    // SOCKS5 BIND and UDP ASSOCIATE → 0x07; bad ATYP → 0x08; no violations.
    for cmd in [2, 3] {
        let rep = socks5(
            &h,
            Auth5::NoAuth,
            cmd,
            &Addr5::Name(b"svc.test".to_vec()),
            22,
        )
        .await
        .err()
        .unwrap();
        assert_eq!(rep, 0x07);
    }
    let mut io = h.socks().await;
    io.write_all(&[5, 1, 0, 5, 1, 0, 9, 1, 2, 3, 4, 0, 80])
        .await
        .unwrap();
    let mut reply = [0u8; 12];
    within("atyp", io.read_exact(&mut reply)).await.unwrap();
    assert_eq!(reply[..2], [5, 0]);
    assert_eq!(reply[2..4], [5, 0x08]);
    // SOCKS4 BIND → 0x5B.
    assert_eq!(
        socks4(&h, 2, Some(Ipv4Addr::LOCALHOST), None, 22)
            .await
            .err()
            .unwrap(),
        0x5B
    );
    assert!(h.take_violations().is_empty());
    // Oversized request head → 431, not a hang.
    let mut io = h.http().await;
    let big = format!(
        "GET http://svc.test/ HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100_000)
    );
    let _ = io.write_all(big.as_bytes()).await;
    let resp = within("431", read_response(&mut io)).await.unwrap();
    assert_eq!(resp.status, 431);
}

#[tokio::test]
async fn credential_required_on_tcp() {
    let h = Harness::start(policy_off(), Kind::Tcp).await;
    // HTTP: none, wrong, and a wrong scheme → 407 with the challenge; no violation.
    for auth in [
        String::new(),
        basic_line("sess-1", "nope"),
        basic_line("other", "s3cret:with:colons"),
    ] {
        for req in [
            format!("CONNECT svc.test:443 HTTP/1.1\r\nHost: svc.test:443\r\n{auth}\r\n"),
            format!("GET http://svc.test/ HTTP/1.1\r\nHost: svc.test\r\n{auth}\r\n"),
        ] {
            let mut io = h.http().await;
            io.write_all(req.as_bytes()).await.unwrap();
            let resp = within("407", read_response(&mut io)).await.unwrap();
            assert_eq!(resp.status, 407, "{req}");
            assert_eq!(
                resp.headers.get("proxy-authenticate").map(String::as_str),
                Some("Basic realm=\"cc_server\"")
            );
        }
    }
    assert!(h.take_violations().is_empty());
    // With the credential the request reaches the policy (here: refused).
    let resp = http_connect(&h, "svc.test:443").await.err().unwrap();
    assert_eq!(resp.status, 403);
    assert_one_violation(&h, Ingress::Connect);

    // SOCKS5: no-auth alone → 0xFF; wrong password → auth failure.
    let addr = Addr5::Name(b"svc.test".to_vec());
    assert_eq!(
        socks5(&h, Auth5::NoAuth, 1, &addr, 443).await.err(),
        Some(0xFF)
    );
    assert_eq!(
        socks5(&h, Auth5::WrongPass, 1, &addr, 443).await.err(),
        Some(0x101)
    );
    // SOCKS4/4a carry no password: refused on TCP before the policy.
    assert_eq!(
        socks4(&h, 1, None, Some(b"svc.test"), 443).await.err(),
        Some(0x5B)
    );
    assert_eq!(
        socks4(&h, 1, Some(Ipv4Addr::LOCALHOST), None, 443)
            .await
            .err(),
        Some(0x5B)
    );
    assert!(h.take_violations().is_empty());
    // The right credential reaches the policy.
    assert_eq!(
        socks5(&h, Auth5::UserPass, 1, &addr, 443).await.err(),
        Some(0x02)
    );
    assert_one_violation(&h, Ingress::Socks5Domain);
}

#[tokio::test]
async fn unix_sockets_are_private_and_removed() {
    let h = Harness::start(policy_off(), Kind::Unix).await;
    let Endpoints::Unix { http, socks } = h.proxies().endpoints().clone() else {
        panic!()
    };
    use std::os::unix::fs::PermissionsExt;
    for p in [&http, &socks] {
        let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", p.display());
    }
    assert_eq!(http.file_name().unwrap(), "http.sock");
    assert_eq!(socks.file_name().unwrap(), "socks.sock");
    let mut h = h;
    within("shutdown", h.proxies.take().unwrap().shutdown()).await;
    assert!(!Path::new(&http).exists() && !Path::new(&socks).exists());
    assert!(UnixStream::connect(&http).await.is_err());
}

#[tokio::test]
async fn drop_removes_files_and_closes_tcp() {
    let h = Harness::start(policy_off(), Kind::Unix).await;
    let Endpoints::Unix { http, .. } = h.proxies().endpoints().clone() else {
        panic!()
    };
    let mut h = h;
    drop(h.proxies.take());
    assert!(!http.exists());

    let t = Harness::start(policy_off(), Kind::Tcp).await;
    let Endpoints::Tcp { http, .. } = t.proxies().endpoints().clone() else {
        panic!()
    };
    let mut t = t;
    drop(t.proxies.take());
    // The accept loop is cancelled on the runtime's next turn.
    let deadline = Instant::now() + STEP;
    while TcpStream::connect(http).await.is_ok() {
        assert!(Instant::now() < deadline, "listener still open after drop");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A client that stops mid-handshake loses its connection after the
/// handshake timeout (SOCKS) or head timeout (HTTP), both 10 s.
#[tokio::test]
async fn silent_clients_are_dropped() {
    let h = Harness::start(policy_off(), Kind::Unix).await;
    let mut socks = h.socks().await;
    socks.write_all(&[5, 1]).await.unwrap(); // then nothing
    let mut http = h.http().await;
    http.write_all(b"GET http://svc.test/ HTTP/1.1\r\n")
        .await
        .unwrap(); // then nothing
    let started = Instant::now();
    for io in [&mut socks, &mut http] {
        let mut buf = [0u8; 512];
        let r = tokio::time::timeout(Duration::from_secs(30), io.read(&mut buf)).await;
        assert!(r.is_ok(), "still open after 30 s");
    }
    assert!(
        started.elapsed() >= Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(h.proxies().live_tasks(), 2, "only the accept loops remain");
}

// ---------------------------------------------------------------- success paths (need the real policy)

#[tokio::test]
async fn connect_tunnel_echo_both_listeners() {
    let port = echo_server().await;
    for kind in [Kind::Unix, Kind::Tcp] {
        let h = Harness::start(policy_for(&["svc.test"]), kind).await;
        let mut io = http_connect(&h, &format!("svc.test:{port}")).await.unwrap();
        echo_round_trip(&mut io, b"hello through CONNECT").await;
        // Half-close: our EOF reaches the echo server, whose EOF comes back.
        io.shutdown().await.unwrap();
        let mut rest = Vec::new();
        within("half-close", io.read_to_end(&mut rest))
            .await
            .unwrap();
        assert!(rest.is_empty());
        // Bigger than one tunnel buffer, both ways at once.
        let io = http_connect(&h, &format!("svc.test:{port}")).await.unwrap();
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        let (mut r, mut w) = tokio::io::split(io);
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            w.write_all(&sent).await.unwrap();
            w.shutdown().await.unwrap();
        });
        let mut back = Vec::new();
        within("bulk echo", r.read_to_end(&mut back)).await.unwrap();
        writer.await.unwrap();
        assert!(back == data, "bulk echo mismatch");
        assert!(h.take_violations().is_empty());
    }
}

/// A tunnel's 200 is the status line alone — curl reads it a byte per
/// call, so every byte of it is a new CONNECT's latency — and the proxy's own
/// answers still carry a Date (RFC 9110 §6.6.1).
#[tokio::test]
async fn a_tunnels_200_is_bare_and_a_refusal_is_dated() {
    let port = echo_server().await;
    let h = Harness::start(policy_for(&["svc.test"]), Kind::Tcp).await;
    let mut io = h.http().await;
    let req = format!(
        "CONNECT svc.test:{port} HTTP/1.1\r\nHost: svc.test:{port}\r\n{}\r\n",
        h.auth_line()
    );
    io.write_all(req.as_bytes()).await.unwrap();
    let mut head = [0u8; 19];
    within("CONNECT reply", io.read_exact(&mut head))
        .await
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 200 OK\r\n\r\n");
    echo_round_trip(&mut io, b"after a bare 200").await;
    let refused = http_connect(&h, "other.test:443")
        .await
        .err()
        .expect("other.test is not allowed");
    assert_eq!(refused.status, 403);
    assert!(
        refused.headers.contains_key("date"),
        "{:?}",
        refused.headers
    );
}

#[tokio::test]
async fn absolute_form_forwarding() {
    let (port, seen) = http_origin().await;
    for kind in [Kind::Unix, Kind::Tcp] {
        let h = Harness::start(policy_for(&["svc.test"]), kind).await;
        let mut io = h.http().await;
        // A chunked POST with every kind of header the proxy must not pass on.
        let head = format!(
            "POST http://svc.test:{port}/path?q=1 HTTP/1.1\r\n\
             Host: evil.test\r\n\
             {auth}\
             Proxy-Connection: keep-alive\r\n\
             Connection: keep-alive, X-Hop\r\n\
             X-Hop: secret\r\n\
             Keep-Alive: timeout=5\r\n\
             TE: trailers\r\n\
             Upgrade: websocket\r\n\
             X-Keep: yes\r\n\
             Transfer-Encoding: chunked\r\n\r\n",
            auth = h.auth_line()
        );
        io.write_all(head.as_bytes()).await.unwrap();
        // Stream the body in pieces, with pauses, so it cannot all be one read.
        let mut sent = Vec::new();
        for i in 0..20u8 {
            let piece = vec![b'a' + i; 10_000];
            io.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                .await
                .unwrap();
            io.write_all(&piece).await.unwrap();
            io.write_all(b"\r\n").await.unwrap();
            sent.extend_from_slice(&piece);
            if i % 5 == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        io.write_all(b"0\r\n\r\n").await.unwrap();
        let resp = within("forwarded POST", read_response(&mut io))
            .await
            .unwrap();
        assert_eq!(resp.status, 200, "{resp:?}");
        assert_eq!(resp.body, b"origin-ok");
        assert_eq!(resp.headers.get("x-origin").map(String::as_str), Some("1"));
        assert_eq!(
            resp.headers.get("x-body-len").map(String::as_str),
            Some("200000")
        );
        for hop in ["x-hop-resp", "keep-alive", "proxy-authenticate"] {
            assert!(
                !resp.headers.contains_key(hop),
                "response kept {hop}: {resp:?}"
            );
        }
        let req = seen.lock().unwrap().pop().unwrap();
        assert_eq!(req.method, "POST");
        assert_eq!(req.uri, "/path?q=1");
        assert_eq!(
            req.headers.get("host").map(String::as_str),
            Some(format!("svc.test:{port}").as_str())
        );
        assert_eq!(req.headers.get("x-keep").map(String::as_str), Some("yes"));
        for hop in [
            "proxy-authorization",
            "proxy-connection",
            "x-hop",
            "keep-alive",
            "te",
            "upgrade",
        ] {
            assert!(!req.headers.contains_key(hop), "origin saw {hop}: {req:?}");
        }
        assert!(req.body == sent, "body mismatch ({} bytes)", req.body.len());

        // Keep-alive to the proxy: a second request (GET with a
        // Content-Length body) on the same client connection.
        let second = format!(
            "GET http://svc.test:{port}/second HTTP/1.1\r\nHost: svc.test\r\n{}Content-Length: 4\r\n\r\nbody",
            h.auth_line()
        );
        io.write_all(second.as_bytes()).await.unwrap();
        let resp = within("second", read_response(&mut io)).await.unwrap();
        assert_eq!(resp.status, 200);
        let req = seen.lock().unwrap().pop().unwrap();
        assert_eq!(
            (req.method.as_str(), req.uri.as_str(), req.body.as_slice()),
            ("GET", "/second", &b"body"[..])
        );

        // A GET with a chunked body is a body, not a second request.
        let third = format!(
            "GET http://svc.test:{port}/third HTTP/1.1\r\nHost: svc.test\r\n{}Transfer-Encoding: chunked\r\n\r\n\
             1a\r\nGET /smuggled HTTP/1.1\r\n\r\n\r\n0\r\n\r\n",
            h.auth_line()
        );
        io.write_all(third.as_bytes()).await.unwrap();
        let resp = within("third", read_response(&mut io)).await.unwrap();
        assert_eq!(resp.status, 200, "{resp:?}");
        let all: Vec<Seen> = std::mem::take(&mut *seen.lock().unwrap());
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all[0].uri, "/third");
        assert_eq!(all[0].body, b"GET /smuggled HTTP/1.1\r\n\r\n");

        // Default port 80 goes to the policy as port 80 (nothing listens
        // there on 127.0.0.1 in tests, or something does: either way not 403).
        assert!(h.take_violations().is_empty());
    }
}

#[tokio::test]
async fn socks_success_paths() {
    let port = echo_server().await;
    for kind in [Kind::Unix, Kind::Tcp] {
        let h = Harness::start(policy_for(&["svc.test"]), kind).await;
        let addr = Addr5::Name(b"svc.test".to_vec());
        let auths: &[Auth5] = match kind {
            // Unix: no-auth, and a client configured with a user/password is let in too.
            Kind::Unix => &[Auth5::NoAuth, Auth5::UserPass],
            Kind::Tcp => &[Auth5::UserPass],
        };
        for &auth in auths {
            let mut io = socks5(&h, auth, 1, &addr, port).await.unwrap();
            echo_round_trip(&mut io, b"socks5 says hi").await;
            io.shutdown().await.unwrap();
            let mut rest = Vec::new();
            within("half-close", io.read_to_end(&mut rest))
                .await
                .unwrap();
        }
        if kind == Kind::Unix {
            let mut io = socks4(&h, 1, None, Some(b"svc.test"), port).await.unwrap();
            echo_round_trip(&mut io, b"socks4a").await;
        }
        assert!(h.take_violations().is_empty());
    }
    // IP literals need an IP entry: SOCKS4 and SOCKS5 ATYP 1 with one.
    let h = Harness::start(policy_for(&["127.0.0.1"]), Kind::Unix).await;
    let mut io = socks4(&h, 1, Some(Ipv4Addr::LOCALHOST), None, port)
        .await
        .unwrap();
    echo_round_trip(&mut io, b"socks4").await;
    let mut io = socks5(&h, Auth5::NoAuth, 1, &Addr5::V4(Ipv4Addr::LOCALHOST), port)
        .await
        .unwrap();
    echo_round_trip(&mut io, b"socks5 ipv4").await;
    assert!(h.take_violations().is_empty());
}

#[tokio::test]
async fn socks_early_data_is_forwarded() {
    // Greeting, request and the first payload bytes in one write.
    let port = echo_server().await;
    let h = Harness::start(policy_for(&["svc.test"]), Kind::Unix).await;
    let mut io = h.socks().await;
    let mut msg = vec![5, 1, 0, 5, 1, 0, 3, 8];
    msg.extend_from_slice(b"svc.test");
    msg.extend_from_slice(&port.to_be_bytes());
    msg.extend_from_slice(b"early!");
    io.write_all(&msg).await.unwrap();
    let mut reply = [0u8; 2 + 10 + 6];
    within("early", io.read_exact(&mut reply)).await.unwrap();
    assert_eq!(reply[..2], [5, 0]);
    assert_eq!(reply[2..4], [5, 0]);
    assert_eq!(&reply[12..], b"early!");
}

#[tokio::test]
async fn dial_failure_is_not_a_violation() {
    // svc.test is allowed, but nothing listens on the port.
    let closed = {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        l.local_addr().unwrap().port()
    };
    let h = Harness::start(policy_for(&["svc.test"]), Kind::Unix).await;
    let resp = http_connect(&h, &format!("svc.test:{closed}"))
        .await
        .err()
        .unwrap();
    assert_eq!(resp.status, 502, "{resp:?}");
    let resp = http_get(&h, &format!("http://svc.test:{closed}/")).await;
    assert_eq!(resp.status, 502, "{resp:?}");
    let rep = socks5_svc(&h, closed).await.err();
    assert_eq!(rep, Some(0x05));
    assert_eq!(
        socks4(&h, 1, None, Some(b"svc.test"), closed).await.err(),
        Some(0x5B)
    );
    assert!(h.take_violations().is_empty());
}

/// The outcome of one target through one ingress path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Reached the origin.
    Allowed,
    /// Refused by the policy (with the refusal's tag for HTTP).
    Refused,
    /// Anything else (400, dial failure): reported, fails the test.
    Other(String),
}

/// The anti-#87381 matrix: every target through every ingress that can
/// express it gives the same outcome, and exactly one violation per refusal.
#[tokio::test]
async fn same_outcome_on_every_ingress() {
    let (port, _seen) = http_origin().await;
    // (host as written in a URL or CONNECT; allowed with names only; allowed
    // with the IP entry 127.0.0.1 too)
    let vectors: &[(&str, bool, bool)] = &[
        ("svc.test", true, true),
        ("SVC.Test", true, true),
        ("svc.test.", true, true),
        ("evil.test", false, false),
        ("xsvc.test", false, false),
        ("svc.test.evil.test", false, false),
        ("a.svc.test", false, false),
        ("svc.test..", false, false),
        ("127.0.0.1", false, true),
        ("0x7f.0.0.1", false, true),
        ("2130706433", false, true),
        ("127.1", false, true),
        ("[::ffff:127.0.0.1]", false, true),
        ("127.0.0.2", false, false),
        ("169.254.169.254", false, false),
        ("[::1]", false, false),
        ("[fd00:ec2::254]", false, false),
        ("localhost", false, false),
    ];
    let cases = [
        (Kind::Unix, false),
        (Kind::Tcp, false),
        (Kind::Unix, true),
        (Kind::Tcp, true),
    ];
    for (kind, with_ip) in cases {
        let entries: &[&str] = if with_ip {
            &["svc.test", "127.0.0.1"]
        } else {
            &["svc.test"]
        };
        let h = Harness::start(policy_for(entries), kind).await;
        let auth = if kind == Kind::Tcp {
            Auth5::UserPass
        } else {
            Auth5::NoAuth
        };
        for &(host, names_only, with_ip_entry) in vectors {
            let allowed = if with_ip { with_ip_entry } else { names_only };
            let mut results: Vec<(Ingress, Outcome)> = Vec::new();
            let http_outcome = |r: Result<BoxIo, Resp>| async move {
                match r {
                    Ok(io) => {
                        if origin_through(io).await {
                            Outcome::Allowed
                        } else {
                            Outcome::Other("tunnel".into())
                        }
                    }
                    Err(resp) if resp.status == 403 => Outcome::Refused,
                    Err(resp) => Outcome::Other(format!(
                        "{} {}",
                        resp.status,
                        String::from_utf8_lossy(&resp.body)
                    )),
                }
            };
            let socks_outcome = |r: Result<BoxIo, u16>| async move {
                match r {
                    Ok(io) => {
                        if origin_through(io).await {
                            Outcome::Allowed
                        } else {
                            Outcome::Other("tunnel".into())
                        }
                    }
                    Err(0x02) | Err(0x5B) => Outcome::Refused,
                    Err(code) => Outcome::Other(format!("socks reply {code:#x}")),
                }
            };
            results.push((
                Ingress::Connect,
                http_outcome(http_connect(&h, &format!("{host}:{port}")).await).await,
            ));
            let resp = http_get(&h, &format!("http://{host}:{port}/")).await;
            let forward = match resp.status {
                200 if resp.body == b"origin-ok" => Outcome::Allowed,
                403 => Outcome::Refused,
                s => Outcome::Other(format!("{s} {}", String::from_utf8_lossy(&resp.body))),
            };
            results.push((Ingress::HttpForward, forward));
            let name = host.as_bytes().to_vec();
            results.push((
                Ingress::Socks5Domain,
                socks_outcome(socks5(&h, auth, 1, &Addr5::Name(name.clone()), port).await).await,
            ));
            if let Ok(ip) = host.parse::<Ipv4Addr>() {
                results.push((
                    Ingress::Socks5Ipv4,
                    socks_outcome(socks5(&h, auth, 1, &Addr5::V4(ip), port).await).await,
                ));
                if kind == Kind::Unix {
                    let r = socks4(&h, 1, Some(ip), None, port).await.map_err(u16::from);
                    results.push((Ingress::Socks4, socks_outcome(r).await));
                }
            }
            if let Some(ip) = host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .and_then(|h| h.parse::<Ipv6Addr>().ok())
            {
                results.push((
                    Ingress::Socks5Ipv6,
                    socks_outcome(socks5(&h, auth, 1, &Addr5::V6(ip), port).await).await,
                ));
            }
            if kind == Kind::Unix {
                let r = socks4(&h, 1, None, Some(&name), port)
                    .await
                    .map_err(u16::from);
                results.push((Ingress::Socks4a, socks_outcome(r).await));
            }
            let want = if allowed {
                Outcome::Allowed
            } else {
                Outcome::Refused
            };
            for (ingress, got) in &results {
                assert_eq!(
                    *got, want,
                    "{kind:?} {entries:?} {host} via {ingress}: {results:?}"
                );
            }
            let violations = h.take_violations();
            let refused: Vec<Ingress> = results
                .iter()
                .filter(|(_, o)| *o == Outcome::Refused)
                .map(|(i, _)| *i)
                .collect();
            let reported: Vec<Ingress> = violations.iter().map(|v| v.ingress).collect();
            assert_eq!(
                reported, refused,
                "{kind:?} {host}: one violation per refusal"
            );
        }
    }
}

#[tokio::test]
async fn sessions_do_not_share_grants() {
    let (port, _seen) = http_origin().await;
    let a = Harness::start(policy_for(&["a.test"]), Kind::Unix).await;
    let b = Harness::start(policy_for(&["b.test"]), Kind::Unix).await;
    let c = Harness::start(policy_for(&["b.test"]), Kind::Tcp).await;
    assert!(origin_through(http_connect(&a, &format!("a.test:{port}")).await.unwrap()).await);
    assert!(origin_through(http_connect(&b, &format!("b.test:{port}")).await.unwrap()).await);
    assert_eq!(
        http_connect(&a, &format!("b.test:{port}"))
            .await
            .err()
            .unwrap()
            .status,
        403
    );
    assert_eq!(
        http_connect(&b, &format!("a.test:{port}"))
            .await
            .err()
            .unwrap()
            .status,
        403
    );
    let name = Addr5::Name(b"a.test".to_vec());
    assert_eq!(
        socks5(&b, Auth5::NoAuth, 1, &name, port).await.err(),
        Some(0x02)
    );
    assert_eq!(
        socks5(&c, Auth5::UserPass, 1, &name, port).await.err(),
        Some(0x02)
    );
    assert!(socks5(&a, Auth5::NoAuth, 1, &name, port).await.is_ok());
    // Each refusal went to its own session's sink.
    assert_eq!(a.take_violations().len(), 1);
    assert_eq!(b.take_violations().len(), 2);
    assert_eq!(c.take_violations().len(), 1);
    // Distinct listeners, distinct TCP credential requirement.
    let (Endpoints::Unix { http: ha, .. }, Endpoints::Unix { http: hb, .. }) =
        (a.proxies().endpoints(), b.proxies().endpoints())
    else {
        panic!()
    };
    assert_ne!(ha, hb);
}

#[tokio::test]
async fn shutdown_aborts_live_tunnels() {
    let port = echo_server().await;
    for via_drop in [false, true] {
        let mut h = Harness::start(policy_for(&["svc.test"]), Kind::Unix).await;
        let Endpoints::Unix { http, socks } = h.proxies().endpoints().clone() else {
            panic!()
        };
        let mut t1 = http_connect(&h, &format!("svc.test:{port}")).await.unwrap();
        echo_round_trip(&mut t1, b"before").await;
        let mut t2 = socks5_svc(&h, port).await.unwrap();
        echo_round_trip(&mut t2, b"before").await;
        // An idle keep-alive HTTP client and a half-finished SOCKS handshake.
        let mut idle = h.http().await;
        let mut half = h.socks().await;
        half.write_all(&[5]).await.unwrap();
        // Two accept loops, two tunnels, the idle client, the half handshake.
        let deadline = Instant::now() + STEP;
        while h.proxies().live_tasks() < 6 {
            assert!(Instant::now() < deadline, "{}", h.proxies().live_tasks());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let started = Instant::now();
        let proxies = h.proxies.take().unwrap();
        if via_drop {
            drop(proxies);
        } else {
            within("shutdown", proxies.shutdown()).await;
        }
        for io in [&mut t1, &mut t2, &mut idle, &mut half] {
            let mut buf = [0u8; 16];
            // EOF or reset, promptly.
            let r = within("tunnel end", io.read(&mut buf)).await;
            assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(!http.exists() && !socks.exists());
        assert!(UnixStream::connect(&socks).await.is_err());
    }
}

// ---------------------------------------------------------------- measurements

/// Throughput of one CONNECT tunnel over the unix listener vs direct
/// loopback TCP, and the added latency of a new CONNECT. Run with
/// `cargo test -p sandbox-egress --release -- --ignored --nocapture measure_overhead`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; prints figures"]
async fn measure_overhead() {
    const TOTAL: usize = 512 * 1024 * 1024;
    const CONNS: usize = 500;
    // A sink that counts bytes and answers each connection's first byte
    // with one byte (for the latency probe) before draining.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 256 * 1024];
                let mut total = 0u64;
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if total == 0 {
                                let _ = s.write_all(&[1]).await;
                            }
                            total += n as u64;
                        }
                    }
                }
                let _ = s.write_all(&total.to_be_bytes()).await;
            });
        }
    });
    let h = Harness::start(policy_for(&["svc.test"]), Kind::Unix).await;
    let target = SocketAddr::from((Ipv4Addr::LOCALHOST, port));

    async fn push(mut io: BoxIo) -> f64 {
        let chunk = vec![0x5Au8; 256 * 1024];
        io.write_all(&chunk[..1]).await.unwrap();
        let mut one = [0u8; 1];
        io.read_exact(&mut one).await.unwrap();
        let start = Instant::now();
        let mut sent = 1;
        while sent < TOTAL {
            io.write_all(&chunk).await.unwrap();
            sent += chunk.len();
        }
        io.shutdown().await.unwrap();
        let mut total = [0u8; 8];
        io.read_exact(&mut total).await.unwrap();
        assert_eq!(u64::from_be_bytes(total) as usize, sent);
        let secs = start.elapsed().as_secs_f64();
        (sent as f64 * 8.0) / secs / 1e9
    }

    async fn latencies<F, Fut>(mut open: F) -> (Duration, Duration)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = BoxIo>,
    {
        let mut v = Vec::with_capacity(CONNS);
        for _ in 0..CONNS {
            let start = Instant::now();
            let mut io = open().await;
            io.write_all(&[1]).await.unwrap();
            let mut one = [0u8; 1];
            io.read_exact(&mut one).await.unwrap();
            v.push(start.elapsed());
        }
        v.sort();
        (v[CONNS / 2], v[CONNS * 99 / 100])
    }

    for round in 1..=3 {
        let direct: BoxIo = Box::new(TcpStream::connect(target).await.unwrap());
        let direct_gbps = push(direct).await;
        let tunnel = http_connect(&h, &format!("svc.test:{port}")).await.unwrap();
        let tunnel_gbps = push(tunnel).await;
        let socks = socks5_svc(&h, port).await.unwrap();
        let socks_gbps = push(socks).await;
        let (d50, d99) = latencies(|| async {
            let s = TcpStream::connect(target).await.unwrap();
            s.set_nodelay(true).unwrap();
            Box::new(s) as BoxIo
        })
        .await;
        let (c50, c99) =
            latencies(|| async { http_connect(&h, &format!("svc.test:{port}")).await.unwrap() })
                .await;
        let (s50, s99) = latencies(|| async { socks5_svc(&h, port).await.unwrap() }).await;
        println!(
            "round {round}: {} MiB each; throughput Gbit/s: direct {direct_gbps:.2}, CONNECT/unix {tunnel_gbps:.2}, \
             SOCKS5/unix {socks_gbps:.2}; connect+first byte p50/p99: direct {d50:?}/{d99:?}, \
             CONNECT/unix {c50:?}/{c99:?}, SOCKS5/unix {s50:?}/{s99:?}",
            TOTAL >> 20
        );
    }
}

#[tokio::test]
async fn session_task_limit_holds_accepting() {
    let violations: ViolationSink = Arc::new(|_| {});
    let dir = tempfile::tempdir().unwrap();
    let listen = Listen::Unix {
        dir: dir.path().to_path_buf(),
    };
    let proxies =
        SessionProxies::start_limited(policy_off(), listen, violations, (5, 5), Default::default())
            .await
            .unwrap();
    let Endpoints::Unix { http, .. } = proxies.endpoints().clone() else {
        panic!()
    };
    // Two accept loops and three idle clients fill the session.
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(UnixStream::connect(&http).await.unwrap());
    }
    let deadline = Instant::now() + STEP;
    while proxies.live_tasks() < 5 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A fourth client is queued, not served...
    let mut waiting = UnixStream::connect(&http).await.unwrap();
    waiting
        .write_all(b"CONNECT svc.test:443 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 12];
    let early = tokio::time::timeout(Duration::from_millis(300), waiting.read(&mut buf)).await;
    assert!(early.is_err(), "served beyond the limit");
    // ...until one of the others goes away.
    drop(idle.pop());
    within("served after room", waiting.read_exact(&mut buf))
        .await
        .unwrap();
    assert_eq!(&buf, b"HTTP/1.1 403");
}

/// T29 (SPEC E1, F11): with a cap of 2, a CONNECT tunnel and a SOCKS5 tunnel
/// fill the session (the tunnel counts after the upgrade, when the HTTP
/// connection's own task is done); a third connection is refused in its
/// protocol — 403 with `X-Proxy-Error: connection-cap`, SOCKS "not allowed
/// by ruleset" — each with a violation naming the cap and the key; once a
/// tunnel closes, a connection gets through again.
#[tokio::test]
async fn past_the_connection_cap_connections_are_refused_naming_it() {
    let port = echo_server().await;
    for kind in [Kind::Unix, Kind::Tcp] {
        let h = Harness::start_capped(policy_for(&["svc.test"]), kind, 2).await;
        let svc = Addr5::Name(b"svc.test".to_vec());
        let mut tunnel = http_connect(&h, &format!("svc.test:{port}")).await.unwrap();
        echo_round_trip(&mut tunnel, b"first").await;
        let mut socks = socks5(&h, Auth5::UserPass, 1, &svc, port).await.unwrap();
        echo_round_trip(&mut socks, b"second").await;

        let refused = http_connect(&h, &format!("svc.test:{port}"))
            .await
            .err()
            .unwrap();
        assert_eq!(refused.status, 403, "{kind:?}");
        assert_eq!(
            refused
                .headers
                .get(crate::http::ERROR_HEADER)
                .map(String::as_str),
            Some(crate::server::CAP_TAG)
        );
        let body = String::from_utf8_lossy(&refused.body);
        assert!(body.contains("[egress] max_connections"), "{body}");
        assert_eq!(
            socks5(&h, Auth5::UserPass, 1, &svc, port).await.err(),
            Some(2),
            "{kind:?}"
        );
        let violations = h.take_violations();
        assert_eq!(violations.len(), 2, "{violations:?}");
        for v in &violations {
            assert_eq!(v.refusal.tag, crate::server::CAP_TAG);
            assert_eq!(v.refusal.target, format!("svc.test:{port}"));
            assert!(
                v.refusal.rule.contains("2 open egress connections"),
                "{v:?}"
            );
        }

        drop(tunnel);
        let deadline = Instant::now() + STEP;
        let mut again = loop {
            match http_connect(&h, &format!("svc.test:{port}")).await {
                Ok(io) => break io,
                Err(resp) => {
                    assert_eq!(resp.status, 403);
                    assert!(Instant::now() < deadline, "the cap was not given back");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        echo_round_trip(&mut again, b"third").await;
        echo_round_trip(&mut socks, b"still").await;
    }
}

/// Runs a client program (curl, socat) off the runtime; `None` if it is not installed.
async fn run_client(
    program: &'static str,
    args: Vec<String>,
    stdin: &'static [u8],
) -> Option<(bool, String)> {
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let mut child = match Command::new(program)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => panic!("{program}: {e}"),
        };
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin).unwrap();
        drop(input);
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Some((out.status.success(), text))
    })
    .await
    .unwrap()
}

/// A loopback TCP port forwarding to a unix socket, as the in-sandbox socat
/// does (docs/research/egress-policy.md A7).
async fn tcp_to_unix_bridge(path: std::path::PathBuf) -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let path = path.clone();
            tokio::spawn(async move {
                if let Ok(mut unix) = UnixStream::connect(&path).await {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
            });
        }
    });
    port
}

/// Real clients against the proxies: curl (HTTP proxy with credentials,
/// CONNECT, SOCKS5h with RFC 1929, SOCKS4a) and Debian's socat 1.7 SOCKS4A
/// (the git-over-ssh path). Skipped, or failed under CI, when the programs
/// are not installed (`.ci/install-deps` installs both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clients_interoperate() {
    let echo = echo_server().await;
    let (origin, _seen) = http_origin().await;
    let url = format!("http://svc.test:{origin}/curl");
    let c = test_credential();
    let userinfo = format!("{}:{}", c.user, c.password);

    let tcp = Harness::start(policy_for(&["svc.test"]), Kind::Tcp).await;
    let Endpoints::Tcp { http, socks, .. } = tcp.proxies().endpoints().clone() else {
        panic!()
    };
    let curl = |extra: Vec<String>| {
        let mut args: Vec<String> = ["-sS", "--max-time", "10", "--noproxy", ""]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(extra);
        run_client("curl", args, b"")
    };
    let cases: Vec<Vec<String>> = vec![
        // Absolute-form through the HTTP proxy, credential in the proxy URL.
        vec![
            "-x".into(),
            format!("http://{userinfo}@{http}"),
            url.clone(),
        ],
        // CONNECT (curl's --proxytunnel) with the same credential.
        vec![
            "-p".into(),
            "-x".into(),
            format!("http://{userinfo}@{http}"),
            url.clone(),
        ],
        // SOCKS5 with remote resolution and RFC 1929.
        vec![
            "-x".into(),
            format!("socks5h://{userinfo}@{socks}"),
            url.clone(),
        ],
    ];
    for args in cases {
        let Some((ok, out)) = curl(args.clone()).await else {
            sandbox_test_support::skip_or_fail(
                "curl is not installed: `.ci/install-deps` installs curl",
            );
            return;
        };
        assert!(ok && out == "origin-ok", "curl {args:?}: {out}");
    }
    // Without the credential: 407 / SOCKS auth failure.
    let (ok, out) = curl(vec![
        "-f".into(),
        "-x".into(),
        format!("http://{http}"),
        url.clone(),
    ])
    .await
    .unwrap();
    assert!(!ok && out.contains("407"), "{out}");
    let (ok, _) = curl(vec!["-x".into(), format!("socks5h://{socks}"), url.clone()])
        .await
        .unwrap();
    assert!(!ok);
    // A refused name: curl shows the 403 and our body.
    let (_, out) = curl(vec![
        "-x".into(),
        format!("http://{userinfo}@{http}"),
        format!("http://evil.test:{origin}/"),
    ])
    .await
    .unwrap();
    assert!(out.starts_with("cc_server egress: evil.test"), "{out}");

    // Unix listeners behind a TCP bridge, as inside the sandbox.
    let unix = Harness::start(policy_for(&["svc.test"]), Kind::Unix).await;
    let Endpoints::Unix { http, socks } = unix.proxies().endpoints().clone() else {
        panic!()
    };
    let http_port = tcp_to_unix_bridge(http).await;
    let socks_port = tcp_to_unix_bridge(socks).await;
    for args in [
        vec![
            "-x".into(),
            format!("http://127.0.0.1:{http_port}"),
            url.clone(),
        ],
        vec![
            "-x".into(),
            format!("socks5h://127.0.0.1:{socks_port}"),
            url.clone(),
        ],
        vec![
            "-x".into(),
            format!("socks4a://127.0.0.1:{socks_port}"),
            url.clone(),
        ],
    ] {
        let (ok, out) = curl(args.clone()).await.unwrap();
        assert!(ok && out == "origin-ok", "curl {args:?}: {out}");
    }
    // socat 1.7's SOCKS4A, the GIT_SSH_COMMAND proxy on Debian 12.
    let args = vec![
        "-t5".into(),
        "-".into(),
        format!("SOCKS4A:127.0.0.1:svc.test:{echo},socksport={socks_port}"),
    ];
    let Some((ok, out)) = run_client("socat", args, b"ssh-like bytes\n").await else {
        sandbox_test_support::skip_or_fail(
            "socat is not installed: `.ci/install-deps` installs socat",
        );
        return;
    };
    assert!(ok && out == "ssh-like bytes\n", "socat: {out}");
    let args = vec![
        "-t5".into(),
        "-".into(),
        format!("SOCKS4A:127.0.0.1:evil.test:{echo},socksport={socks_port}"),
    ];
    let (ok, _) = run_client("socat", args, b"x").await.unwrap();
    assert!(!ok, "socat reached a refused name");
    assert_eq!(unix.take_violations().len(), 1);
}
