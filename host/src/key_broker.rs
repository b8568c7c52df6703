//! The Anthropic API key, brokered (threat model T57; SPEC H5): the key
//! stays in the server. Claude Code inside the sandbox gets
//! `ANTHROPIC_BASE_URL=http://cc-server.internal/anthropic` and a
//! placeholder key; its requests reach the server channel through the
//! session's own HTTP proxy (plain HTTP, so nothing is intercepted), and
//! [`KeyBroker`] forwards them to the real API with `x-api-key` set here,
//! whatever key or `Authorization` the sandbox sent removed. Bodies stream
//! both ways frame by frame (the API answers in server-sent events).
//!
//! Only the session `cc_server agent claude` started may use it: any other
//! caller gets a refusal naming the key and where it comes from.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use http_body_util::BodyExt as _;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use sandbox_egress::http::strip_hop_by_hop;
use sandbox_egress::local::{self, LocalBody};
use sandbox_gateway::target::Target;
use sandbox_runtime::channel::{Caller, HttpHandler};
use sandbox_runtime::sessions::Sessions;
use serde::Deserialize;

/// Where the broker is mounted on the channel.
pub const PREFIX: &str = "/anthropic/";

/// `ANTHROPIC_BASE_URL` inside a brokered sandbox.
pub const BASE_URL: &str = "http://cc-server.internal/anthropic";

/// `ANTHROPIC_API_KEY` inside a brokered sandbox: Claude Code needs one to
/// start without a login; it is worth nothing outside.
pub const PLACEHOLDER: &str = "cc-server-brokered-key-not-a-secret";

/// Anthropic's API.
pub const DEFAULT_UPSTREAM: &str = "https://api.anthropic.com";

/// Where the invoker's key is named in refusals.
pub const INVOKER_KEY: &str = "the ANTHROPIC_API_KEY of `cc_server agent claude`";

/// Where the invoker's bearer token (an LLM gateway's) is named.
pub const INVOKER_TOKEN: &str = "the ANTHROPIC_AUTH_TOKEN of `cc_server agent claude`";

/// The config key of the key file.
pub const KEY_FILE: &str = "[agents.claude] api_key_file";

/// `[agents]`: what agent adapters get from the server.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsSection {
    pub claude: Option<ClaudeSection>,
}

/// `[agents.claude]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaudeSection {
    /// A file (0600) holding the Anthropic API key; relative to the config
    /// file. Read once at start, never bound, never in an environment.
    pub api_key_file: Option<PathBuf>,
    /// The API the key is for (default `https://api.anthropic.com`).
    pub api_base_url: Option<String>,
    /// A CA (PEM) trusted besides the system's roots for that API.
    pub ca_file: Option<PathBuf>,
}

/// `[agents.claude]` resolved: the key file read (0600, never shown).
#[derive(Debug, Clone, Default)]
pub struct ClaudeSettings {
    key: Option<Secret>,
    pub api_base_url: Option<String>,
    pub ca_file: Option<PathBuf>,
    /// The key file, for the secret files no bind may show.
    pub key_file: Option<PathBuf>,
}

/// A key that never shows in debug output or logs.
#[derive(Clone)]
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl ClaudeSettings {
    /// Reads the key file (relative to `config`) with `read`, the check of
    /// every credential file of the config (the owner's alone, not empty).
    pub fn resolve(
        section: Option<&AgentsSection>,
        config: Option<&Path>,
        read: impl Fn(&Path, Option<&Path>) -> Result<String, String>,
    ) -> Result<Self, String> {
        let Some(claude) = section.and_then(|s| s.claude.as_ref()) else {
            return Ok(Self::default());
        };
        let beside = |file: &PathBuf| match config.and_then(Path::parent) {
            Some(dir) if file.is_relative() => dir.join(file),
            _ => file.clone(),
        };
        let key = match &claude.api_key_file {
            Some(file) => Some(Secret(
                read(file, config).map_err(|m| format!("{KEY_FILE}: {m}"))?,
            )),
            None => None,
        };
        let settings = Self {
            key,
            api_base_url: claude.api_base_url.clone(),
            ca_file: claude.ca_file.as_ref().map(beside),
            key_file: claude.api_key_file.as_ref().map(beside),
        };
        if let Some(brokered) = settings.brokered(None, None, None) {
            KeyBroker::new(brokered)?;
        }
        Ok(settings)
    }

    /// The key file, with its config key: no bind may show it.
    pub fn secret_file(&self) -> Option<(PathBuf, &'static str)> {
        self.key_file.clone().map(|file| (file, KEY_FILE))
    }

    /// The key to broker: the config's, else the invoker's
    /// `ANTHROPIC_API_KEY`, else its `ANTHROPIC_AUTH_TOKEN` (`agent
    /// claude`); sent to `api_base_url`, else the invoker's
    /// `ANTHROPIC_BASE_URL`, else Anthropic's API.
    pub fn brokered(
        &self,
        invoker_key: Option<String>,
        invoker_token: Option<String>,
        invoker_base: Option<&str>,
    ) -> Option<Brokered> {
        let given = |v: Option<String>| v.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let (key, source, bearer) = match (&self.key, given(invoker_key), given(invoker_token)) {
            (Some(Secret(key)), _, _) => (key.clone(), KEY_FILE, false),
            (None, Some(key), _) => (key, INVOKER_KEY, false),
            (None, None, Some(token)) => (token, INVOKER_TOKEN, true),
            (None, None, None) => return None,
        };
        let upstream = self
            .api_base_url
            .as_deref()
            .or(invoker_base.filter(|b| !b.is_empty()))
            .unwrap_or(DEFAULT_UPSTREAM)
            .to_owned();
        Some(Brokered {
            key: Secret(key),
            source,
            bearer,
            upstream,
            ca_file: self.ca_file.clone(),
        })
    }
}

/// A key the server holds, and where it may be sent.
#[derive(Debug, Clone)]
pub struct Brokered {
    key: Secret,
    /// What names the key in refusals: [`KEY_FILE`], [`INVOKER_KEY`],
    /// [`INVOKER_TOKEN`].
    pub source: &'static str,
    /// Sent as `Authorization: Bearer` (a gateway's token), not `x-api-key`.
    pub bearer: bool,
    /// The API's base URL.
    pub upstream: String,
    pub ca_file: Option<PathBuf>,
}

/// Mounts the broker of `brokered` (`agent claude`'s), else of the
/// config's key, when there is one; with none, nothing is mounted and the
/// channel answers the path as unknown.
pub fn install(
    sessions: &Sessions,
    settings: &ClaudeSettings,
    brokered: Option<Brokered>,
) -> anyhow::Result<Option<Arc<KeyBroker>>> {
    let for_agent = brokered.is_some();
    let Some(brokered) = brokered.or_else(|| settings.brokered(None, None, None)) else {
        return Ok(None);
    };
    let upstream = brokered.upstream.clone();
    let broker = Arc::new(KeyBroker::new(brokered).map_err(anyhow::Error::msg)?);
    broker.mount(sessions)?;
    if for_agent {
        tracing::info!(%upstream, "Anthropic API key brokered on {BASE_URL}/");
    } else {
        tracing::info!("{BASE_URL}/ refuses every sandbox: only `agent claude` is given the key");
    }
    Ok(Some(broker))
}

/// `host[:port]` of an `http(s)://` URL, as written.
fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or_default().to_owned()
}

/// The mounted broker: the key, the upstream, the sessions allowed.
pub struct KeyBroker {
    brokered: Brokered,
    upstream: Target,
    /// The `Host` header: the URL's authority as written (no default port
    /// added).
    host: String,
    allowed: RwLock<BTreeSet<String>>,
}

/// Credentials the sandbox may have sent, never forwarded upstream (the
/// connection's own headers go as the egress proxy drops them,
/// `sandbox_egress::http::strip_hop_by_hop`).
const DROPPED_CREDENTIALS: &[&str] = &["x-api-key", "authorization"];

impl KeyBroker {
    /// The broker of `brokered`, sending to `upstream` (its URL checked and
    /// its TLS client made now: a bad one stops the start).
    pub fn new(brokered: Brokered) -> Result<Self, String> {
        let target = Target::parse(&brokered.upstream, brokered.ca_file.as_deref())
            .map_err(|e| format!("the Anthropic API ({}): {e}", brokered.source))?;
        let host = host_of(&brokered.upstream);
        Ok(Self {
            brokered,
            upstream: target,
            host,
            allowed: RwLock::new(BTreeSet::new()),
        })
    }

    /// Lets `session` (the one running the agent) use the key.
    pub fn allow(&self, session: &str) {
        self.allowed
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session.to_owned());
    }

    fn allows(&self, session: &str) -> bool {
        self.allowed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(session)
    }

    /// Mounts the broker on every session's channel of `sessions`.
    pub fn mount(self: &Arc<Self>, sessions: &Sessions) -> anyhow::Result<()> {
        let broker = Arc::clone(self);
        let handler: HttpHandler = Arc::new(move |caller, request| {
            let broker = Arc::clone(&broker);
            Box::pin(async move { broker.forward(caller, request).await })
        });
        sessions.channel().mount(PREFIX, handler)?;
        Ok(())
    }

    async fn forward(
        &self,
        caller: Caller,
        request: Request<hyper::body::Incoming>,
    ) -> Response<LocalBody> {
        if !self.allows(&caller.session) {
            return local::text(
                StatusCode::FORBIDDEN,
                &format!(
                    "the Anthropic API key ({}) is brokered only to the sandbox `cc_server agent \
                     claude` started, not to {}: run Claude Code with `cc_server agent claude`",
                    self.brokered.source, caller.session
                ),
            );
        }
        let (parts, body) = request.into_parts();
        let rest = parts.uri.path().strip_prefix(PREFIX).unwrap_or_default();
        let query = parts
            .uri
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        let path = format!("{}/{rest}{query}", self.upstream.prefix);
        let mut upstream = Request::new(body.boxed());
        *upstream.method_mut() = parts.method;
        *upstream.uri_mut() = match path.parse() {
            Ok(uri) => uri,
            Err(e) => return local::text(StatusCode::BAD_REQUEST, &format!("the path: {e}")),
        };
        let mut forwarded = parts.headers;
        strip_hop_by_hop(&mut forwarded);
        for name in DROPPED_CREDENTIALS {
            forwarded.remove(*name);
        }
        *upstream.headers_mut() = forwarded;
        let headers = upstream.headers_mut();
        let (name, value) = match self.brokered.bearer {
            true => (
                header::AUTHORIZATION,
                format!("Bearer {}", self.brokered.key.0),
            ),
            false => (
                HeaderName::from_static("x-api-key"),
                self.brokered.key.0.clone(),
            ),
        };
        match (
            HeaderValue::from_str(&self.host),
            HeaderValue::from_str(&value),
        ) {
            (Ok(host), Ok(mut key)) => {
                key.set_sensitive(true);
                headers.insert(header::HOST, host);
                headers.insert(name, key);
            }
            _ => {
                return local::text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!(
                        "the Anthropic API key ({}) or its host is not a valid header value",
                        self.brokered.source
                    ),
                );
            }
        }
        let answer = match self.upstream.connect().await {
            Ok(mut sender) => sender
                .send_request(upstream)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        match answer {
            Ok(answer) => {
                let (mut parts, body) = answer.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, body.boxed())
            }
            Err(e) => local::text(
                StatusCode::BAD_GATEWAY,
                &format!("the Anthropic API at {}: {e}", self.upstream.authority()),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_key(key: &str) -> ClaudeSettings {
        ClaudeSettings {
            key: Some(Secret(key.to_owned())),
            ..ClaudeSettings::default()
        }
    }

    #[test]
    fn the_key_never_shows_in_debug_output() {
        let settings = with_key("sk-ant-secret");
        assert!(!format!("{settings:?}").contains("sk-ant-secret"));
        let brokered = settings.brokered(None, None, None).unwrap();
        assert!(!format!("{brokered:?}").contains("sk-ant-secret"));
    }

    #[test]
    fn the_configured_key_wins_then_the_invokers() {
        let none = ClaudeSettings::default();
        assert!(none.brokered(None, None, None).is_none());
        assert!(none.brokered(Some("  ".into()), None, None).is_none());
        let invoker = none
            .brokered(
                Some("k".into()),
                Some("t".into()),
                Some("http://127.0.0.1:9"),
            )
            .unwrap();
        assert_eq!((invoker.source, invoker.bearer), (INVOKER_KEY, false));
        let token = none.brokered(None, Some("t".into()), None).unwrap();
        assert_eq!((token.source, token.bearer), (INVOKER_TOKEN, true));
        assert_eq!(invoker.upstream, "http://127.0.0.1:9");
        let mut configured = with_key("c");
        let brokered = configured.brokered(Some("k".into()), None, None).unwrap();
        assert_eq!((brokered.source, brokered.key.0.as_str()), (KEY_FILE, "c"));
        assert_eq!(brokered.upstream, DEFAULT_UPSTREAM);
        configured.api_base_url = Some("http://127.0.0.1:1".into());
        let brokered = configured
            .brokered(None, None, Some("http://other"))
            .unwrap();
        assert_eq!(brokered.upstream, "http://127.0.0.1:1");
    }

    #[test]
    fn the_host_header_is_the_urls_authority() {
        assert_eq!(
            host_of("https://api.anthropic.com/prefix"),
            "api.anthropic.com"
        );
        assert_eq!(host_of("http://127.0.0.1:9"), "127.0.0.1:9");
    }

    #[test]
    fn a_bad_upstream_is_refused_naming_the_key() {
        let mut settings = with_key("k");
        settings.api_base_url = Some("ftp://x".into());
        let err = KeyBroker::new(settings.brokered(None, None, None).unwrap())
            .err()
            .unwrap();
        assert!(err.contains(KEY_FILE), "{err}");
    }
}
