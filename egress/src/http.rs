//! The HTTP proxy: CONNECT and absolute-form requests (SPEC E1).
//!
//! hyper parses the request head (strictly: conflicting framing headers are
//! rejected, which matters against smuggling), with a bounded head size and
//! read time. Both request kinds take their target from the request-target
//! only — the `Host` header is ignored on CONNECT and overwritten on
//! forwarded requests — hand it to the session's one
//! [`crate::Policy::decide`], and dial exactly the addresses it returned.
//! Plain-HTTP requests are sent over that one connection with hyper's
//! connection-level client: a pooled client would resolve the name again.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::uri::{Authority, Scheme};
use hyper::{Method, Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::conn::{Admission, Credential, Ctx, dial};
use crate::handoff::{Handoff, carry_upgraded};
use crate::{Ingress, Refusal};

/// Largest request head (request line and headers) we accept; larger gets 431.
pub const MAX_HEAD: usize = 32 * 1024;

/// hyper's connection buffer bound (also caps what a client can make us hold).
const MAX_BUF: usize = 64 * 1024;

/// A client must send a whole request head within this time.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The header naming a refusal's machine tag on 403 responses.
pub const ERROR_HEADER: &str = "x-proxy-error";

/// `Proxy-Authenticate` on 407 responses.
pub const PROXY_AUTHENTICATE: &str = "Basic realm=\"cc_server\"";

type Body = BoxBody<Bytes, hyper::Error>;

/// Serves one HTTP proxy client connection (keep-alive included) to its end.
/// `admission`: whether it came in under the session's connection cap;
/// `handoff`: whether its CONNECT tunnels go to the forwarder.
pub(crate) async fn serve<S>(ctx: Arc<Ctx>, io: S, admission: Admission, handoff: Handoff)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| {
        let ctx = ctx.clone();
        let admission = admission.clone();
        async move { Ok::<_, Infallible>(handle(&ctx, &admission, handoff, req).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // `handle` dates every answer but a tunnel's 200, which curl reads
        // a byte per call (it must not read past it): 37 bytes fewer there.
        .auto_date_header(false)
        // A client may shut its write side once the request is sent (`nc -N`,
        // scripts); it still wants the answer.
        .half_close(true)
        .header_read_timeout(HEAD_TIMEOUT)
        .max_header_size(MAX_HEAD)
        .max_buf_size(MAX_BUF);
    if let Err(e) = builder
        .serve_connection(TokioIo::new(io), svc)
        .with_upgrades()
        .await
    {
        tracing::debug!("http proxy connection: {e}");
    }
}

async fn handle(
    ctx: &Arc<Ctx>,
    admission: &Admission,
    handoff: Handoff,
    req: Request<Incoming>,
) -> Response<Body> {
    let tunnel = req.method() == Method::CONNECT;
    let mut resp = if let Some(credential) = &ctx.credential
        && !authorized(credential, req.headers())
    {
        proxy_auth_required()
    } else if tunnel {
        connect(ctx, admission, handoff, req).await
    } else {
        forward(ctx, admission, req).await
    };
    // RFC 9110 §6.6.1: our own answers, and a forwarded one that came
    // without, get a Date. A tunnel's 200 goes without, as most proxies
    // send it (it carries nothing but the status).
    let established = tunnel && resp.status().is_success();
    if !established && !resp.headers().contains_key(header::DATE) {
        let now = httpdate::fmt_http_date(std::time::SystemTime::now());
        if let Ok(value) = HeaderValue::from_str(&now) {
            resp.headers_mut().insert(header::DATE, value);
        }
    }
    resp
}

/// `Proxy-Authorization: Basic base64(user:password)` matching the session's credential.
fn authorized(credential: &Credential, headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::PROXY_AUTHORIZATION) else {
        return false;
    };
    let Some((scheme, token)) = value.to_str().ok().and_then(|v| v.trim().split_once(' ')) else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return false;
    }
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(token.trim()) else {
        return false;
    };
    let Some(colon) = decoded.iter().position(|&b| b == b':') else {
        return false;
    };
    credential.matches(&decoded[..colon], &decoded[colon + 1..])
}

/// `CONNECT host:port`: decide, dial, answer 200, then tunnel the upgraded
/// connection (or hand the upstream to the forwarder).
async fn connect(
    ctx: &Arc<Ctx>,
    admission: &Admission,
    handoff: Handoff,
    req: Request<Incoming>,
) -> Response<Body> {
    let uri = req.uri();
    let authority = match (uri.scheme(), uri.authority()) {
        (None, Some(a)) if uri.path_and_query().is_none() => a.clone(),
        _ => return bad_request("CONNECT needs an authority-form target (host:port)"),
    };
    let (host, port) = match host_port(&authority, None) {
        Ok(hp) => hp,
        Err(why) => return bad_request(why),
    };
    let addrs = match ctx
        .decide_for(admission, host, port, Ingress::Connect)
        .await
    {
        Ok(addrs) => addrs,
        Err(refusal) => return refused(&refusal),
    };
    let upstream = match dial(&addrs).await {
        Ok(s) => s,
        Err(e) => return bad_gateway(&authority, &e),
    };
    let on_upgrade = hyper::upgrade::on(req);
    // The tunnel outlives the connection's task: it counts now.
    let slot = admission.clone();
    let started = ctx.tasks.spawn(async move {
        let _slot = slot;
        match on_upgrade.await {
            Ok(upgraded) => carry_upgraded(upgraded, upstream, handoff).await,
            Err(e) => tracing::debug!("CONNECT upgrade: {e}"),
        }
    });
    if !started {
        return text(StatusCode::SERVICE_UNAVAILABLE, "session is shutting down");
    }
    Response::new(empty())
}

/// An absolute-form `http://` request: decide on the URI authority, send the
/// rebuilt request over a connection we dialled, stream the answer back.
async fn forward(ctx: &Arc<Ctx>, admission: &Admission, req: Request<Incoming>) -> Response<Body> {
    let uri = req.uri();
    let authority = match (uri.scheme(), uri.authority()) {
        (Some(s), Some(a)) if *s == Scheme::HTTP => a.clone(),
        (None, _) => {
            return bad_request(
                "this is a proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port",
            );
        }
        (Some(s), _) => {
            let msg =
                format!("only http:// URLs are forwarded (got {s}://); use CONNECT for https");
            return bad_request(&msg);
        }
    };
    let (host, port) = match host_port(&authority, Some(80)) {
        Ok(hp) => hp,
        Err(why) => return bad_request(why),
    };
    if crate::local::is_channel_host(host) {
        return answer_locally(ctx, req).await;
    }
    let addrs = match ctx
        .decide_for(admission, host, port, Ingress::HttpForward)
        .await
    {
        Ok(addrs) => addrs,
        Err(refusal) => return refused(&refusal),
    };
    let stream = match dial(&addrs).await {
        Ok(s) => s,
        Err(e) => return bad_gateway(&authority, &e),
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    {
        Ok(pair) => pair,
        Err(e) => return bad_gateway(&authority, &e),
    };
    if !ctx.tasks.spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("forwarded http connection: {e}");
        }
    }) {
        return text(StatusCode::SERVICE_UNAVAILABLE, "session is shutting down");
    }

    // Rebuild from parsed parts: origin-form target, our Host, no hop-by-hop.
    let (parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut headers = parts.headers;
    strip_hop_by_hop(&mut headers);
    let host_value = match authority.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    };
    match HeaderValue::from_str(&host_value) {
        Ok(v) => headers.insert(header::HOST, v),
        Err(_) => return bad_request("unusable host"),
    };
    let mut out = Request::new(body);
    *out.method_mut() = parts.method;
    *out.version_mut() = Version::HTTP_11;
    *out.headers_mut() = headers;
    match path.parse() {
        Ok(p) => *out.uri_mut() = p,
        Err(_) => return bad_request("unusable path"),
    }

    match sender.send_request(out).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, body.boxed())
        }
        Err(e) => bad_gateway(&authority, &e),
    }
}

/// A request for the server channel: handed to the session's service with
/// this proxy's own headers removed; never forwarded.
async fn answer_locally(ctx: &Arc<Ctx>, mut req: Request<Incoming>) -> Response<Body> {
    let Some(service) = ctx.local.clone() else {
        return text(
            StatusCode::NOT_FOUND,
            "this session has no server channel (cc-server.internal)",
        );
    };
    let proxy: Vec<HeaderName> = req
        .headers()
        .keys()
        .filter(|name| name.as_str().starts_with("proxy-"))
        .cloned()
        .collect();
    for name in proxy {
        req.headers_mut().remove(name);
    }
    service(req).await
}

/// Host and port of a request-target authority; `default_port` for
/// absolute-form, `None` for CONNECT (where the port is mandatory).
fn host_port(
    authority: &Authority,
    default_port: Option<u16>,
) -> Result<(&str, u16), &'static str> {
    if authority.as_str().contains('@') {
        // RFC 9110 §4.2.4: userinfo is deprecated; it only invites parser differentials.
        return Err("userinfo (user@host) in the target is not allowed");
    }
    let port = match (authority.port(), default_port) {
        (Some(p), _) => p.as_u16(),
        (None, Some(d)) if !authority.as_str().ends_with(':') => d,
        _ => return Err("the target needs a port (host:port)"),
    };
    Ok((authority.host(), port))
}

/// Hop-by-hop headers (RFC 9110 §7.6.1) and every `Proxy-*` header
/// (credentials for this proxy must never reach the origin). The framing
/// headers are left to hyper, which re-encodes the body, even when
/// `Connection` names them.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .filter(|name| {
            *name != header::CONTENT_LENGTH
                && *name != header::TRANSFER_ENCODING
                && *name != header::HOST
        })
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    let proxy: Vec<HeaderName> = headers
        .keys()
        .filter(|name| name.as_str().starts_with("proxy-"))
        .cloned()
        .collect();
    for name in proxy {
        headers.remove(name);
    }
}

fn empty() -> Body {
    Full::new(Bytes::new())
        .map_err(|never| match never {})
        .boxed()
}

fn text(status: StatusCode, msg: &str) -> Response<Body> {
    let body = Full::new(Bytes::from(format!("cc_server egress: {msg}\n")))
        .map_err(|never| match never {})
        .boxed();
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn bad_request(why: &str) -> Response<Body> {
    text(StatusCode::BAD_REQUEST, why)
}

/// 403 naming the rule: `X-Proxy-Error: <tag>` and `cc_server egress: <target> refused: <rule>`.
fn refused(refusal: &Refusal) -> Response<Body> {
    let mut resp = text(StatusCode::FORBIDDEN, &refusal.to_string());
    resp.headers_mut()
        .insert(ERROR_HEADER, HeaderValue::from_static(refusal.tag));
    resp
}

fn bad_gateway(authority: &Authority, e: &dyn std::fmt::Display) -> Response<Body> {
    text(
        StatusCode::BAD_GATEWAY,
        &format!("cannot reach {authority}: {e}"),
    )
}

fn proxy_auth_required() -> Response<Body> {
    let mut resp = text(
        StatusCode::PROXY_AUTHENTICATION_REQUIRED,
        "this proxy needs the session's credential",
    );
    resp.headers_mut().insert(
        header::PROXY_AUTHENTICATE,
        HeaderValue::from_static(PROXY_AUTHENTICATE),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, X-Secret, content-length"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("trailer", "x-t"),
            ("upgrade", "websocket"),
            ("proxy-connection", "keep-alive"),
            ("proxy-authorization", "Basic eDp5"),
            ("proxy-whatever", "1"),
            ("content-length", "3"),
            ("x-kept", "1"),
        ] {
            h.append(k, HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["content-length", "x-kept"]);
    }

    #[test]
    fn basic_auth() {
        let c = Credential {
            user: "u".into(),
            password: "p:w".into(),
        };
        let mut h = HeaderMap::new();
        assert!(!authorized(&c, &h));
        let good = base64::engine::general_purpose::STANDARD.encode("u:p:w");
        h.insert(
            header::PROXY_AUTHORIZATION,
            HeaderValue::from_str(&format!("basic {good}")).unwrap(),
        );
        assert!(authorized(&c, &h));
        let bad = base64::engine::general_purpose::STANDARD.encode("u:p");
        h.insert(
            header::PROXY_AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {bad}")).unwrap(),
        );
        assert!(!authorized(&c, &h));
        h.insert(
            header::PROXY_AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert!(!authorized(&c, &h));
        h.insert(
            header::PROXY_AUTHORIZATION,
            HeaderValue::from_static("Basic !!!"),
        );
        assert!(!authorized(&c, &h));
    }

    #[test]
    fn targets() {
        let a: Authority = "svc.test:8080".parse().unwrap();
        assert_eq!(host_port(&a, None), Ok(("svc.test", 8080)));
        let a: Authority = "[::1]:22".parse().unwrap();
        assert_eq!(host_port(&a, None), Ok(("[::1]", 22)));
        let a: Authority = "svc.test".parse().unwrap();
        assert!(host_port(&a, None).is_err());
        assert_eq!(host_port(&a, Some(80)), Ok(("svc.test", 80)));
        let a: Authority = "u@svc.test:80".parse().unwrap();
        assert!(host_port(&a, Some(80)).is_err());
    }
}
