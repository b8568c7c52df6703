//! The server channel's end in the HTTP proxy (docs/design.md, "The server
//! channel"): a plain-HTTP request for `cc-server.internal` is answered by
//! the session's [`LocalService`] in-process, never forwarded; the same
//! name asked for any other way (CONNECT, SOCKS) is refused by name. The
//! proxy a request came through is the caller's identity, so the service
//! is made per session and knows whose it is.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};

use crate::{Ingress, Refusal};

pub use sandbox_plugin_api::server_call::{HOST, MAX_REQUEST, is_channel_host};

/// The body of a channel answer (streamed: a forwarded push's report).
pub type LocalBody = BoxBody<Bytes, hyper::Error>;

/// A session's answerer of channel requests: the request as the proxy got
/// it (absolute-form target, the proxy's own `Proxy-*` headers removed),
/// its body not yet read.
pub type LocalService = Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<LocalBody>> + Send>>
        + Send
        + Sync,
>;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> LocalBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A one-line plain-text answer (errors), `cc_server channel: …`.
pub fn text(status: StatusCode, message: &str) -> Response<LocalBody> {
    let mut resp = Response::new(full(format!("cc_server channel: {message}\n")));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// A target a server-side service has the session's proxies refuse on
/// every way in (the push gateway: ssh to the forge while it brokers the
/// forge's tokens), by name and port, before the allowlist is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub host: String,
    pub port: u16,
    /// Why, and what to do instead.
    pub rule: String,
}

impl Refused {
    pub(crate) fn matches(&self, host: &str, port: u16) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        port == self.port && host.eq_ignore_ascii_case(&self.host)
    }

    pub(crate) fn refusal(&self, host: &str, port: u16) -> Refusal {
        Refusal {
            target: format!("{host}:{port}"),
            rule: self.rule.clone(),
            tag: "refused-by-server",
        }
    }
}

/// What a session's proxies serve or refuse on the server's behalf.
#[derive(Clone, Default)]
pub struct Local {
    /// The channel's answerer.
    pub service: Option<LocalService>,
    /// Targets refused on every way in.
    pub refused: Vec<Refused>,
}

/// The refusal of the channel's name on a way in that cannot reach it:
/// it is never dialled, whatever a resolver override says.
pub fn refusal(host: &str, port: u16, ingress: Ingress) -> Refusal {
    Refusal {
        target: format!("{host}:{port}"),
        rule: format!(
            "{HOST} is the server's own channel, answered only to plain http:// requests \
             through the session's HTTP proxy (not over {ingress})"
        ),
        tag: "server-channel",
    }
}
