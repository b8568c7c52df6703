//! The headers every console answer carries.
//!
//! The page holds host shells and shows what agents print, so its script is
//! the only one that may run: `script-src 'self'` with no inline script and
//! no `eval`, nothing framed or framing (`frame-ancestors 'none'`), no
//! plugin, no `<base>`, connections to this origin only (`connect-src
//! 'self'` covers its own `ws:`). xterm.js inserts `<style>` elements for
//! its measurements and theme, so `style-src-elem` admits inline styles —
//! that and nothing else: a style cannot run code, and markup an agent
//! prints never reaches the DOM as markup.

/// The page's Content-Security-Policy.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; style-src-elem 'self' 'unsafe-inline'; img-src 'self'; \
     connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// Every header of a console answer, as (name, value).
pub const SECURITY: &[(&str, &str)] = &[
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
];
