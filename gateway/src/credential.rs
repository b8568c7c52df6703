//! The read token reaches git through a credential helper that asks the
//! server over the session's own channel (SPEC H5): never in the
//! environment, never in a file inside. The helper is scoped to the forge's
//! URL in git's config (`credential.<url>.helper`), and the handler answers
//! only for that URL's protocol and host, so git never sends the token
//! elsewhere.

use sandbox_runtime::channel::{Call, Reply};

/// The handler's name on the channel.
pub const NAME: &str = "git-credential";

/// The token fetches and other reads use, and the forge URL it is for.
#[derive(Clone)]
pub struct ReadToken {
    /// `https://github.com`, or a stand-in's `http://host:port`.
    pub url: String,
    pub token: String,
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
pub fn answer(read: &ReadToken, call: &Call) -> Reply {
    let done = Reply::default();
    if call.args.first().map(String::as_str) != Some("get") {
        return done;
    }
    let text = String::from_utf8_lossy(&call.input);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
    };
    let Some((protocol, host)) = read.scope() else {
        return done;
    };
    if field("protocol").as_deref() != Some(protocol) || field("host").as_deref() != Some(host) {
        return done;
    }
    Reply {
        exit: 0,
        stdout: format!("username=x-access-token\npassword={}\n", read.token).into_bytes(),
        stderr: Vec::new(),
    }
}
