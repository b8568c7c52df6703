//! GitHub App installation tokens (SPEC H5; docs/design.md §18): the app's
//! JWT (RS256 over `iat`, `exp`, `iss`), `POST
//! /app/installations/{id}/access_tokens` with the repository and the
//! permissions, `DELETE /installation/token` with the token itself to
//! revoke. Tokens are opaque strings of any length (GitHub's stateless ones
//! are 520 bytes and more). The private key is read once at start from a
//! 0600 file; it never leaves the server's memory.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request};
use ring::rand::SystemRandom;

use crate::target::Target;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};

/// What the run's read token may do: read contents, work with pull
/// requests — never push.
pub const READ_PERMISSIONS: &str = r#"{"contents":"read","pull_requests":"write"}"#;

/// What a push's write token may do: write contents, and no `workflows`
/// (a pushed `.github/workflows/*` would run with the repository's secrets:
/// the forge refuses it for this token).
pub const WRITE_PERMISSIONS: &str = r#"{"contents":"write"}"#;

/// Where minted tokens are written down until revoked, so that a start
/// after a kill revokes what was left (the workspaces database).
pub trait Ledger: Send + Sync {
    fn minted(&self, token: &str, expires_at: &str);
    fn revoked(&self, token: &str);
}

/// Which installation of the app mints a repository owner's tokens
/// (`[gateway.app] installations`, owner → id), and the one for owners
/// not listed (`installation_id`), if any.
#[derive(Debug, Clone, Default)]
pub struct Installations {
    pub by_owner: std::collections::BTreeMap<String, String>,
    pub default: Option<String>,
}

impl Installations {
    /// The installation for `owner` (matched as GitHub does, without case).
    pub fn of(&self, owner: &str) -> Result<&str, String> {
        self.by_owner
            .iter()
            .find(|(o, _)| o.eq_ignore_ascii_case(owner))
            .map(|(_, id)| id.as_str())
            .or(self.default.as_deref())
            .ok_or_else(|| {
                format!(
                    "the app has no installation for the owner {owner:?}: add `{owner} = \"<installation id>\"` to [gateway.app] installations (or set [gateway.app] installation_id for every owner)"
                )
            })
    }
}

/// The owner of `owner/name[.git]`.
pub fn owner(repository: &str) -> &str {
    repository
        .trim_matches('/')
        .split('/')
        .next()
        .unwrap_or_default()
}

/// A configured app.
pub struct App {
    app_id: String,
    installations: Installations,
    /// The REST API's base URL.
    api: Target,
    key: RsaKeyPair,
    ledger: std::sync::OnceLock<std::sync::Arc<dyn Ledger>>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("app_id", &self.app_id)
            .field("installations", &self.installations)
            .finish_non_exhaustive()
    }
}

/// A minted token.
#[derive(Clone)]
pub struct Token {
    pub token: String,
    pub expires_at: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// The DER inside a PEM `RSA PRIVATE KEY` (PKCS#1, as GitHub hands them
/// out) or `PRIVATE KEY` (PKCS#8).
fn pem_key(pem: &str) -> Result<RsaKeyPair, String> {
    let body: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .map(str::trim)
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| format!("the key is not PEM: {e}"))?;
    if pem.contains("BEGIN RSA PRIVATE KEY") {
        RsaKeyPair::from_der(&der).map_err(|e| format!("not an RSA key: {e}"))
    } else {
        RsaKeyPair::from_pkcs8(&der).map_err(|e| format!("not an RSA key: {e}"))
    }
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl App {
    pub fn new(
        app_id: &str,
        installations: Installations,
        api_url: &str,
        key_pem: &str,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Self, String> {
        Ok(Self {
            app_id: app_id.to_owned(),
            installations,
            api: Target::parse(api_url, ca_file).map_err(|e| format!("api_url {e}"))?,
            key: pem_key(key_pem)?,
            ledger: std::sync::OnceLock::new(),
        })
    }

    /// Writes every token minted from now on into `ledger` until revoked.
    pub fn keep_ledger(&self, ledger: std::sync::Arc<dyn Ledger>) {
        let _ = self.ledger.set(ledger);
    }

    /// The app's JWT: issued a minute ago (clock drift), valid nine minutes.
    pub fn jwt(&self, now: u64) -> Result<String, String> {
        let header = b64url(br#"{"alg":"RS256","typ":"JWT"}"#);
        let claims = serde_json::json!({
            "iat": now.saturating_sub(60),
            "exp": now + 540,
            "iss": self.app_id,
        });
        let claims = b64url(claims.to_string().as_bytes());
        let signing_input = format!("{header}.{claims}");
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                signing_input.as_bytes(),
                &mut signature,
            )
            .map_err(|_| "signing the app's JWT failed".to_owned())?;
        Ok(format!("{signing_input}.{}", b64url(&signature)))
    }

    /// An installation token for `repositories` (`owner/name`, one owner:
    /// a token is its owner's installation's) with these permissions (JSON).
    pub async fn mint(&self, repositories: &[String], permissions: &str) -> Result<Token, String> {
        let repository = repositories.join(", ");
        let first = repositories.first().map_or("", |r| owner(r));
        if let Some(other) = repositories
            .iter()
            .find(|r| !owner(r).eq_ignore_ascii_case(first))
        {
            return Err(format!(
                "one token covers one owner's repositories: {other} is not {first}'s"
            ));
        }
        let installation = self.installations.of(first)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let jwt = self.jwt(now)?;
        let names: Vec<&str> = repositories
            .iter()
            .map(|r| {
                r.trim_end_matches(".git")
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
            })
            .collect();
        let permissions: serde_json::Value =
            serde_json::from_str(permissions).map_err(|e| e.to_string())?;
        let body = serde_json::json!({ "repositories": names, "permissions": permissions });
        let path = format!("/app/installations/{installation}/access_tokens");
        let (status, answer) = self
            .call(
                Method::POST,
                &path,
                &format!("Bearer {jwt}"),
                body.to_string(),
            )
            .await?;
        if status != 201 && status != 200 {
            return Err(format!(
                "minting a token for {repository}: the forge answered {status}: {}",
                String::from_utf8_lossy(&answer).trim()
            ));
        }
        let value: serde_json::Value = serde_json::from_slice(&answer)
            .map_err(|e| format!("the forge's token answer: {e}"))?;
        let token = value["token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or("the forge's answer has no token")?;
        if let Some(ledger) = self.ledger.get() {
            ledger.minted(token, value["expires_at"].as_str().unwrap_or_default());
        }
        Ok(Token {
            token: token.to_owned(),
            expires_at: value["expires_at"].as_str().unwrap_or_default().to_owned(),
        })
    }

    /// Revokes `token` (it authenticates its own revocation).
    pub async fn revoke(&self, token: &str) -> Result<(), String> {
        let (status, answer) = self
            .call(
                Method::DELETE,
                "/installation/token",
                &format!("token {token}"),
                String::new(),
            )
            .await?;
        match status {
            // 401: already revoked or expired.
            204 | 200 | 401 => {
                if let Some(ledger) = self.ledger.get() {
                    ledger.revoked(token);
                }
                Ok(())
            }
            _ => Err(format!(
                "revoking a token: the forge answered {status}: {}",
                String::from_utf8_lossy(&answer).trim()
            )),
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        authorization: &str,
        body: String,
    ) -> Result<(u16, Bytes), String> {
        let mut sender = self.api.connect().await?;
        let address = self.api.authority();
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.api.prefix))
            .header(
                header::HOST,
                HeaderValue::from_str(&self.api.host).map_err(|e| e.to_string())?,
            )
            .header(header::AUTHORIZATION, authorization)
            .header(header::ACCEPT, "application/vnd.github+json")
            .header(header::USER_AGENT, "cc_server")
            .header(header::CONTENT_TYPE, "application/json")
            .body(
                Full::new(Bytes::from(body))
                    .map_err(|never| match never {})
                    .boxed(),
            )
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("the forge's API {address}: {e}"))?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), 1 << 20)
            .collect()
            .await
            .map_err(|e| format!("the forge's API answer: {e}"))?
            .to_bytes();
        Ok((status, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_owner_has_its_installation_and_an_unknown_one_none() {
        let mut installations = Installations::default();
        installations.by_owner.insert("Octo".into(), "1".into());
        assert_eq!(installations.of("octo"), Ok("1"));
        let error = installations.of("other").unwrap_err();
        assert!(error.contains("[gateway.app] installations"), "{error}");
        installations.default = Some("9".into());
        assert_eq!(installations.of("other"), Ok("9"));
        assert_eq!(owner("/o/r.git"), "o");
    }

    #[test]
    fn a_key_that_is_not_one_is_refused() {
        assert!(
            pem_key("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n")
                .is_err()
        );
        assert!(pem_key("not pem at all").is_err());
    }
}
