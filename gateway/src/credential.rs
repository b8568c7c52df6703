//! The read token reaches git through a credential helper that asks the
//! server over the session's own channel (SPEC H5): never in the
//! environment, never in a file inside. The helper is scoped to the forge's
//! URL in git's config (`credential.<url>.helper`), and the handler answers
//! only for that URL's protocol and host, so git never sends the token
//! elsewhere.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// Answers the helper's calls: the token, minted per session and owner
/// when it comes from the app, minted again before it expires, and revoked
/// when the session ends.
pub struct Broker {
    read: ReadToken,
    /// Per session and owner: the token and when to mint it again.
    minted: Mutex<HashMap<(String, String), Held>>,
}

struct Held {
    token: String,
    renew_at: Instant,
}

/// A token is minted again once less than this is left of its life (the
/// forge says when it expires: an hour for installation tokens), so that a
/// command never starts with one about to lapse.
pub const REMINT_BEFORE: Duration = Duration::from_secs(10 * 60);

/// When a token expiring at `expires_at` (RFC 3339, UTC, as the forge
/// answers) is minted again; without a readable expiry, after 50 minutes.
fn renew_at(expires_at: &str, now: SystemTime) -> Instant {
    let left = unix_seconds(expires_at)
        .and_then(|at| {
            let now = now.duration_since(UNIX_EPOCH).ok()?.as_secs();
            Some(Duration::from_secs(at.saturating_sub(now)))
        })
        .unwrap_or(Duration::from_secs(60 * 60));
    Instant::now() + left.saturating_sub(REMINT_BEFORE)
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z` as seconds since the epoch.
fn unix_seconds(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let time = time.split('.').next()?;
    let mut t = time.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    // Days from the civil date (the proleptic Gregorian calendar).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

impl Broker {
    pub fn new(read: ReadToken) -> Self {
        Self {
            read,
            minted: Mutex::new(HashMap::new()),
        }
    }

    /// The session's token for the repositories of `owner` (of the path
    /// git asks for; without one, the only owner there is).
    async fn token(&self, session: &str, owner: Option<&str>) -> Result<String, String> {
        let (app, repositories) = match &self.read.source {
            ReadSource::Fixed(token) => return Ok(token.clone()),
            ReadSource::App(app, repositories) => (app, repositories),
        };
        let owner = match owner {
            Some(owner) => owner.to_ascii_lowercase(),
            None => {
                let mut owners: Vec<String> = repositories
                    .iter()
                    .map(|r| crate::app::owner(r).to_ascii_lowercase())
                    .collect();
                owners.dedup();
                match owners.as_slice() {
                    [one] => one.clone(),
                    _ => {
                        return Err(
                            "git named no repository path, and the token is per owner".into()
                        );
                    }
                }
            }
        };
        let mine: Vec<String> = repositories
            .iter()
            .filter(|r| crate::app::owner(r).eq_ignore_ascii_case(&owner))
            .cloned()
            .collect();
        if mine.is_empty() {
            return Err(format!(
                "no repository of {owner} is in [gateway] repositories"
            ));
        }
        let key = (session.to_owned(), owner);
        let stale = {
            let minted = self.minted.lock().unwrap_or_else(|p| p.into_inner());
            match minted.get(&key) {
                Some(held) if Instant::now() < held.renew_at => return Ok(held.token.clone()),
                Some(held) => Some(held.token.clone()),
                None => None,
            }
        };
        let minted = app.mint(&mine, crate::app::READ_PERMISSIONS).await?;
        tracing::info!(%session, owner = %key.1, "minted the session's forge read token");
        let held = Held {
            token: minted.token.clone(),
            renew_at: renew_at(&minted.expires_at, SystemTime::now()),
        };
        self.minted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, held);
        if let Some(stale) = stale
            && let Err(e) = app.revoke(&stale).await
        {
            tracing::warn!(%session, "the session's previous forge read token: {e}");
        }
        Ok(minted.token)
    }

    /// The helper's answer (see [`answer`]).
    pub async fn answer(&self, call: &Call) -> Reply {
        if !wants_token(&self.read, call) {
            return Reply::default();
        }
        let input = String::from_utf8_lossy(&call.input);
        let owner = field(&input, "path").map(|p| crate::app::owner(&p).to_owned());
        match self.token(&call.caller.session, owner.as_deref()).await {
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
        let tokens: Vec<String> = {
            let mut minted = self.minted.lock().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<_> = minted
                .keys()
                .filter(|(s, _)| s == session)
                .cloned()
                .collect();
            keys.iter()
                .filter_map(|k| minted.remove(k))
                .map(|held| held.token)
                .collect()
        };
        let ReadSource::App(app, _) = &self.read.source else {
            return;
        };
        for token in tokens {
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

/// The git config entries that make git ask the channel, naming the
/// repository's path (a token is minted per owner).
pub fn helper_entries(read: &ReadToken) -> Vec<(String, String)> {
    let url = read.url.trim_end_matches('/');
    vec![
        (
            format!("credential.{url}.helper"),
            format!("!\"$CC_SERVER_CALL\" call {NAME}"),
        ),
        (format!("credential.{url}.useHttpPath"), "true".to_owned()),
    ]
}

/// A `key=value` line of a credential request.
fn field(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
        .map(str::to_owned)
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
    let Some((protocol, host)) = read.scope() else {
        return false;
    };
    field(&text, "protocol").as_deref() == Some(protocol)
        && field(&text, "host").as_deref() == Some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiries_are_read_as_the_forge_writes_them() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(unix_seconds("2026-12-06T20:30:00Z"), Some(1_796_589_000));
        assert_eq!(unix_seconds("2000-03-01T00:00:01.5Z"), Some(951_868_801));
        assert_eq!(unix_seconds("2026-12-06 20:30:00"), None);
        let now = UNIX_EPOCH + Duration::from_secs(1_796_589_000);
        let soon = renew_at("2026-12-06T20:35:00Z", now);
        assert!(soon <= Instant::now(), "five minutes left: mint again now");
        let later = renew_at("2026-12-06T21:30:00Z", now);
        assert!(later > Instant::now() + Duration::from_secs(49 * 60));
    }
}
