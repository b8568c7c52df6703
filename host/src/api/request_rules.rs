//! What a request must look like before its token is even read: a `Host`
//! this server answers to, and no `Origin` unless the operator listed it.
//!
//! The API listens on loopback, but a web page in the user's browser can
//! reach loopback too. Two ways in, two rules:
//!
//! - **DNS rebinding**: a page on `evil.example` re-points its name at
//!   127.0.0.1, and the browser then sends the page's requests here, with
//!   `Host: evil.example`. A `Host` that is neither a loopback name or
//!   address, nor the listen address, nor an `[api] allowed_hosts` name is
//!   refused with 421. An IP literal cannot be rebound, so with an
//!   unspecified listen address (`0.0.0.0`) any IP literal is accepted.
//! - **Cross-origin requests**: every request a browser sends on a page's
//!   behalf carries `Origin` (for POSTs and most others; a page cannot
//!   remove it). Clients that are not browsers send none. A request with an
//!   `Origin` not in `[api] allowed_origins` is refused with 403 — but for
//!   this server's own origin, `http://` and the `Host` the request passed
//!   the Host rule with: only the web console this server serves is a page
//!   of that origin (a rebinding page's `Host` is its own name, refused
//!   above).
//!
//! The checks are pure ([`check_host`], [`check_origin`]); the middleware
//! only applies them.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;

/// The operator's settings these rules read.
#[derive(Debug, Clone)]
pub struct RequestRules {
    /// The configured listen address.
    pub listen: SocketAddr,
    /// `[api] allowed_hosts`, lower-case.
    pub allowed_hosts: Vec<String>,
    /// `[api] allowed_origins`, lower-case.
    pub allowed_origins: Vec<String>,
}

/// A refused request: the status, the rule's name and the explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: StatusCode,
    pub rule: &'static str,
    pub message: String,
}

/// The name part of a `Host` value, lower-case, without port, brackets or a
/// trailing dot; `None` when it is not `host[:port]`.
pub fn host_name(value: &str) -> Option<String> {
    let value = value.trim();
    let name = if let Some(rest) = value.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        inside
    } else {
        match value.rsplit_once(':') {
            Some((name, port)) if is_port(port) => name,
            Some(_) => return None,
            None => value,
        }
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    (!name.is_empty()).then_some(name)
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

/// The `Host` rule (see the module doc). `host`: the header's value, if any.
pub fn check_host(rules: &RequestRules, host: Option<&str>) -> Result<(), Refused> {
    let refuse = |what: String| Refused {
        status: StatusCode::MISDIRECTED_REQUEST,
        rule: "host",
        message: format!(
            "{what}: this server answers only to loopback (`localhost`, `127.0.0.1`, `[::1]`) \
             and its listen address {}, so a web page cannot reach it through DNS rebinding. \
             Use one of those, or list the name in `[api] allowed_hosts` in the config",
            rules.listen
        ),
    };
    let Some(value) = host else {
        return Err(refuse("the request has no Host header".into()));
    };
    let Some(name) = host_name(value) else {
        return Err(refuse(format!(
            "the Host header `{value}` is not `host[:port]`"
        )));
    };
    let allowed = match name.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback() || ip == rules.listen.ip() || rules.listen.ip().is_unspecified(),
        Err(_) => name == "localhost" || rules.allowed_hosts.contains(&name),
    };
    match allowed {
        true => Ok(()),
        false => Err(refuse(format!(
            "the Host header `{value}` is not this server"
        ))),
    }
}

/// The `Origin` rule (see the module doc). `origin`, `host`: the headers'
/// values, if any; `host` has passed [`check_host`].
pub fn check_origin(
    rules: &RequestRules,
    origin: Option<&str>,
    host: Option<&str>,
) -> Result<(), Refused> {
    let Some(origin) = origin else {
        return Ok(());
    };
    let lower = origin.trim().to_ascii_lowercase();
    if rules.allowed_origins.contains(&lower)
        || host.is_some_and(|host| lower == sandbox_console::csrf::own_origin(host))
    {
        return Ok(());
    }
    Err(Refused {
        status: StatusCode::FORBIDDEN,
        rule: "origin",
        message: format!(
            "a request from a browser page (Origin `{origin}`) is refused: a web page must not \
             drive the server with the user's access. To allow that page, list its origin in \
             `[api] allowed_origins` in the config"
        ),
    })
}

/// Applies both rules to every request, before routing and the token.
pub async fn enforce(
    State(rules): State<std::sync::Arc<RequestRules>>,
    request: Request,
    next: Next,
) -> Response {
    let checked = {
        let headers = request.headers();
        let text = |name: header::HeaderName| {
            headers
                .get(name)
                .map(|v| v.to_str().unwrap_or("(not text)"))
        };
        check_host(&rules, text(header::HOST))
            .and_then(|()| check_origin(&rules, text(header::ORIGIN), text(header::HOST)))
    };
    match checked {
        Ok(()) => next.run(request).await,
        Err(refused) => {
            tracing::info!(
                rule = refused.rule,
                "refused a request: {}",
                refused.message
            );
            let mut error = ApiError::new(refused.status, refused.message);
            let mut extra = serde_json::json!({"rule": refused.rule});
            if refused.rule == "origin" {
                extra["configKey"] = "[api] allowed_origins".into();
            } else {
                extra["configKey"] = "[api] allowed_hosts".into();
            }
            error.extra = Some(extra);
            error.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(listen: &str) -> RequestRules {
        RequestRules {
            listen: listen.parse().unwrap(),
            allowed_hosts: vec!["box.lan".into()],
            allowed_origins: vec!["https://app.example".into()],
        }
    }

    #[test]
    fn hosts() {
        let local = rules("127.0.0.1:7878");
        let rows: &[(Option<&str>, bool)] = &[
            (Some("localhost"), true),
            (Some("LOCALHOST:1"), true),
            (Some("localhost.:7878"), true),
            (Some("127.0.0.1:7878"), true),
            (Some("127.1.2.3"), true),
            (Some("[::1]:7878"), true),
            (Some("[::1]"), true),
            (Some("box.lan:7878"), true),
            (Some("evil.example"), false),
            (Some("evil.example:7878"), false),
            (Some("localhost.evil.example"), false),
            (Some("10.0.0.5:7878"), false),
            (Some("[::1"), false),
            (Some("localhost:x"), false),
            (Some(""), false),
            (None, false),
        ];
        for (host, ok) in rows {
            assert_eq!(check_host(&local, *host).is_ok(), *ok, "{host:?}");
        }
        let refused = check_host(&local, Some("evil.example")).unwrap_err();
        assert_eq!(refused.status, StatusCode::MISDIRECTED_REQUEST);
        assert!(
            refused.message.contains("DNS rebinding"),
            "{}",
            refused.message
        );
        // Listening on an address: that address; on every address: any IP literal.
        assert!(check_host(&rules("10.0.0.5:7878"), Some("10.0.0.5:7878")).is_ok());
        assert!(check_host(&rules("0.0.0.0:7878"), Some("10.0.0.5:7878")).is_ok());
        assert!(check_host(&rules("0.0.0.0:7878"), Some("evil.example")).is_err());
    }

    #[test]
    fn origins() {
        let r = rules("127.0.0.1:7878");
        assert!(check_origin(&r, None, None).is_ok());
        assert!(check_origin(&r, Some("https://APP.example"), None).is_ok());
        // The console's own origin: this server's, as the Host names it.
        let own = Some("127.0.0.1:7878");
        assert!(check_origin(&r, Some("http://127.0.0.1:7878"), own).is_ok());
        assert!(check_origin(&r, Some("http://127.0.0.1:7879"), own).is_err());
        assert!(check_origin(&r, Some("https://127.0.0.1:7878"), own).is_err());
        assert!(check_origin(&r, Some("http://localhost:7878"), own).is_err());
        for bad in [
            "https://evil.example",
            "null",
            "https://app.example.evil",
            "http://app.example",
        ] {
            let refused = check_origin(&r, Some(bad), Some("127.0.0.1:7878")).unwrap_err();
            assert_eq!(refused.status, StatusCode::FORBIDDEN, "{bad}");
            assert!(refused.message.contains("allowed_origins"), "{bad}");
        }
    }
}
