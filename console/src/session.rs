//! The console's sign-in sessions. The page asks for the owner's token once
//! and posts it (never in a URL); the server answers with a cookie holding a
//! fresh random session id — never the token — which then authenticates the
//! page's requests as the owner until it expires (`[api]
//! console_session_secs`) or the owner signs out. Ids are kept hashed
//! (SHA-256): a lookup's timing says nothing about a stored id, and the
//! table is no list of live cookies.
//!
//! The cookie is `HttpOnly` (the page's script never reads it, so a script
//! injected into it could not either), `SameSite=Strict` (a request another
//! site starts carries no cookie) and `Path=/`. It has no `Secure` flag:
//! the API serves plain HTTP on loopback, where a browser would then drop it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// The cookie's name.
pub const COOKIE: &str = "cc_console";

/// The default lifetime of a session (`[api] console_session_secs`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(8 * 3600);

/// At most this many sessions live at once; a sign-in past it ends the one
/// that expires first. Signing in takes the token, so this bounds only a
/// holder of the token's own browser tabs.
pub const LIMIT: usize = 64;

type Key = [u8; 32];

fn key(id: &str) -> Key {
    Sha256::digest(id.as_bytes()).into()
}

/// The live sessions.
#[derive(Debug)]
pub struct Sessions {
    ttl: Duration,
    live: Mutex<HashMap<Key, Instant>>,
}

impl Sessions {
    /// Sessions that last `ttl` from their sign-in.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            live: Mutex::new(HashMap::new()),
        }
    }

    /// How long a session lasts.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Opens a session; its id (256 random bits, hex) goes into the cookie.
    pub fn open(&self) -> std::io::Result<String> {
        let id = sandbox_runtime::random::hex(32)?;
        self.insert_at(&id, Instant::now());
        Ok(id)
    }

    fn insert_at(&self, id: &str, now: Instant) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|_, expires| *expires > now);
        if live.len() >= LIMIT
            && let Some(first) = live.iter().min_by_key(|(_, e)| **e).map(|(k, _)| *k)
        {
            live.remove(&first);
        }
        live.insert(key(id), now + self.ttl);
    }

    /// Whether `id` is a live session.
    pub fn check(&self, id: &str) -> bool {
        self.check_at(id, Instant::now())
    }

    fn check_at(&self, id: &str, now: Instant) -> bool {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let k = key(id);
        match live.get(&k) {
            Some(expires) if *expires > now => true,
            Some(_) => {
                live.remove(&k);
                false
            }
            None => false,
        }
    }

    /// Ends a session (sign-out).
    pub fn close(&self, id: &str) {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key(id));
    }

    /// The `Set-Cookie` value that hands `id` to the browser.
    pub fn set_cookie(&self, id: &str) -> String {
        format!(
            "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
            self.ttl.as_secs()
        )
    }
}

/// The `Set-Cookie` value that removes the cookie (sign-out).
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

/// The session id in a `Cookie` header's value, if it has the console's.
pub fn from_cookie_header(value: &str) -> Option<&str> {
    value
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, id)| id.trim())
        .filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_lives_its_ttl_and_ends_at_sign_out() {
        let sessions = Sessions::new(Duration::from_secs(10));
        let id = sessions.open().unwrap();
        assert_eq!(id.len(), 64);
        let now = Instant::now();
        assert!(sessions.check_at(&id, now));
        assert!(!sessions.check_at(&id, now + Duration::from_secs(11)));
        assert!(!sessions.check(&id), "an expired session is gone");
        let other = sessions.open().unwrap();
        assert_ne!(id, other);
        assert!(!sessions.check("not-a-session"));
        sessions.close(&other);
        assert!(!sessions.check(&other));
    }

    #[test]
    fn the_table_is_bounded_and_keeps_no_id() {
        let sessions = Sessions::new(Duration::from_secs(10));
        let first = sessions.open().unwrap();
        for _ in 0..LIMIT {
            sessions.open().unwrap();
        }
        assert!(!sessions.check(&first), "the oldest made room");
        let live = sessions.live.lock().unwrap();
        assert_eq!(live.len(), LIMIT);
        assert!(!live.contains_key(first.as_bytes()));
    }

    #[test]
    fn cookies_carry_their_flags_and_are_found_among_others() {
        let sessions = Sessions::new(Duration::from_secs(90));
        let set = sessions.set_cookie("abc");
        for flag in [
            "cc_console=abc",
            "HttpOnly",
            "SameSite=Strict",
            "Path=/",
            "Max-Age=90",
        ] {
            assert!(set.contains(flag), "{set}");
        }
        assert!(clear_cookie().contains("Max-Age=0"));
        assert_eq!(from_cookie_header("a=1; cc_console=xyz; b=2"), Some("xyz"));
        assert_eq!(from_cookie_header("cc_console="), None);
        assert_eq!(from_cookie_header("xcc_console=1"), None);
        assert_eq!(from_cookie_header("a=1"), None);
    }
}
