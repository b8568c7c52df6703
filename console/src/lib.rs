//! The web console: a page at `/` on the API's own listener from which the
//! owner watches and answers (SPEC B8, D1, H4) — backends and their probes,
//! sandboxes with their real badge, live events, pending approvals,
//! terminals. This crate holds what is not wiring: the page and xterm.js
//! ([`assets`], embedded at build time), the cookie sessions a sign-in opens
//! ([`session`]), the rule a cookie's request must pass ([`csrf`]) and the
//! headers every console answer carries ([`headers`]). The host mounts the
//! routes and calls these.
//!
//! ```
//! use sandbox_console::session::Sessions;
//! use std::time::Duration;
//!
//! let sessions = Sessions::new(Duration::from_secs(60));
//! let id = sessions.open().unwrap();
//! assert!(sessions.check(&id));
//! let cookie = sessions.set_cookie(&id);
//! assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
//! sessions.close(&id);
//! assert!(!sessions.check(&id));
//! ```

pub mod assets;
pub mod csrf;
pub mod headers;
pub mod session;
