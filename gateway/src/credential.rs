//! The read token reaches git through a credential helper that asks the
//! server over the session's own channel (SPEC H5): never in the
//! environment, never in a file inside. The helper is scoped to the forge's
//! URL in git's config (`credential.<url>.helper`), and the handler answers
//! only for that URL's protocol and host, so git never sends the token
//! elsewhere.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandbox_runtime::channel::{Call, Reply};

use crate::app::App;

/// The handler's name on the channel.
pub const NAME: &str = "git-credential";

/// The token fetches and other reads use, and the forge URL it is for.
#[derive(Clone)]
pub struct ReadToken {
    /// `https://github.com`, or a stand-in's `http://host:port`.
    pub url: String,
    pub source: ReadSource,
}

/// Where the read token comes from.
#[derive(Clone)]
pub enum ReadSource {
    /// One token from the config (`[gateway] read_token_file`).
    Fixed(String),
    /// Minted by the app per session for these repositories (contents
    /// read, pull requests write), revoked at the session's end.
    App(Arc<App>, Vec<String>),
}

/// Answers the helper's calls: the token, minted once per session when it
/// comes from the app, and revoked when the session ends.
pub struct Broker {
    read: ReadToken,
    /// Per session: the token and when it was minted.
    minted: Mutex<HashMap<String, (String, Instant)>>,
}

/// A session's read token is minted again after this long (installation
/// tokens live an hour), the old one revoked.
pub const REMINT_AFTER: Duration = Duration::from_secs(50 * 60);

impl Broker {
    pub fn new(read: ReadToken) -> Self {
        Self {
            read,
            minted: Mutex::new(HashMap::new()),
        }
    }

    async fn token(&self, session: &str) -> Result<String, String> {
        let (app, repositories) = match &self.read.source {
            ReadSource::Fixed(token) => return Ok(token.clone()),
            ReadSource::App(app, repositories) => (app, repositories),
        };
        let known = self
            .minted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .cloned();
        let stale = match known {
            Some((token, at)) if at.elapsed() < REMINT_AFTER => return Ok(token),
            Some((token, _)) => Some(token),
            None => None,
        };
        let token = app
            .mint(repositories, crate::app::READ_PERMISSIONS)
            .await?
            .token;
        tracing::info!(%session, "minted the session's forge read token");
        self.minted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session.to_owned(), (token.clone(), Instant::now()));
        if let Some(stale) = stale
            && let Err(e) = app.revoke(&stale).await
        {
            tracing::warn!(%session, "the session's previous forge read token: {e}");
        }
        Ok(token)
    }

    /// The helper's answer (see [`answer`]).
    pub async fn answer(&self, call: &Call) -> Reply {
        if !wants_token(&self.read, call) {
            return Reply::default();
        }
        match self.token(&call.caller.session).await {
            Ok(token) => Reply {
                exit: 0,
                stdout: format!("username=x-access-token\npassword={token}\n").into_bytes(),
                stderr: Vec::new(),
            },
            Err(e) => {
                sandbox_runtime::channel::failure(1, format!("cc_server: no forge token: {e}"))
            }
        }
    }

    /// Revokes what was minted for `session`.
    pub async fn session_ended(&self, session: &str) {
        let token = self
            .minted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session);
        if let (Some((token, _)), ReadSource::App(app, _)) = (token, &self.read.source) {
            match app.revoke(&token).await {
                Ok(()) => tracing::info!(%session, "revoked the session's forge read token"),
                Err(e) => tracing::warn!(%session, "the session's forge read token: {e}"),
            }
        }
    }
}

impl std::fmt::Debug for ReadToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadToken")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl ReadToken {
    /// `(protocol, host[:port])` of the URL.
    fn scope(&self) -> Option<(&str, &str)> {
        let (protocol, rest) = self.url.split_once("://")?;
        Some((protocol, rest.split('/').next().unwrap_or_default()))
    }
}

/// The git config entry that makes git ask the channel.
pub fn helper_entry(read: &ReadToken) -> (String, String) {
    let url = read.url.trim_end_matches('/');
    (
        format!("credential.{url}.helper"),
        format!("!\"$CC_SERVER_CALL\" call {NAME}"),
    )
}

/// git's credential helper protocol (`get`, `store`, `erase`; `key=value`
/// lines on standard input): `get` for the token's own protocol and host
/// answers `x-access-token` and the token; anything else answers nothing,
/// so git goes on to its next helper or fails.
fn wants_token(read: &ReadToken, call: &Call) -> bool {
    if call.args.first().map(String::as_str) != Some("get") {
        return false;
    }
    let text = String::from_utf8_lossy(&call.input);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
    };
    let Some((protocol, host)) = read.scope() else {
        return false;
    };
    field("protocol").as_deref() == Some(protocol) && field("host").as_deref() == Some(host)
}
