//! Egress for sandboxes (SPEC E1–E5, docs/design.md §6): per-session HTTP and
//! SOCKS proxies, and the one decision every connection of every ingress path
//! goes through.
//!
//! - [`policy`]: the lists ([`lists`]), host canonicalisation, label-wise
//!   pattern matching, the fixed deny list, resolution inside the proxy and
//!   the non-public-address check — [`Policy::decide`] returns the exact
//!   addresses to dial, or a [`Refusal`] naming the rule.
//! - [`http`], [`socks`]: the two proxies (HTTP CONNECT and absolute-form;
//!   SOCKS5 and SOCKS4a), each handing every target to [`Policy::decide`].
//! - [`local`]: the server channel's reserved name, answered in-process by
//!   the session's own service instead of being forwarded.
//! - [`server`]: one session's pair of listeners (unix sockets, or loopback
//!   TCP ports with a per-session credential), its live tunnels, teardown;
//!   and the bwrap forwarder's channel, whose connections are handed their
//!   upstream once decided (`handoff`) instead of being relayed here.

#![forbid(unsafe_code)]

mod conn;
mod handoff;
pub mod http;
pub mod lists;
pub mod local;
pub mod policy;
pub mod server;
pub mod socks;

pub use policy::{Policy, PolicyConfig};

use std::fmt;

/// How a connection reached the proxy: every one is decided the same way,
/// and the ingress is recorded with each refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ingress {
    /// HTTP `CONNECT host:port`.
    Connect,
    /// HTTP absolute-form request (`GET http://host/…`).
    HttpForward,
    /// SOCKS5 CONNECT with a domain name (ATYP 3).
    Socks5Domain,
    /// SOCKS5 CONNECT with an IPv4 address (ATYP 1).
    Socks5Ipv4,
    /// SOCKS5 CONNECT with an IPv6 address (ATYP 4).
    Socks5Ipv6,
    /// SOCKS4a CONNECT with a domain name.
    Socks4a,
    /// SOCKS4 CONNECT with an IPv4 address.
    Socks4,
}

impl Ingress {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "http-connect",
            Self::HttpForward => "http-forward",
            Self::Socks5Domain => "socks5-domain",
            Self::Socks5Ipv4 => "socks5-ipv4",
            Self::Socks5Ipv6 => "socks5-ipv6",
            Self::Socks4a => "socks4a",
            Self::Socks4 => "socks4",
        }
    }
}

impl fmt::Display for Ingress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a connection was refused: shown to the client (HTTP 403 body and
/// header) and sent as a violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `host:port` as the client asked for it (canonical when it parsed).
    pub target: String,
    /// The rule that refused, in words: `not on the allowlist`, `fixed deny
    /// list: metadata.google.internal`, `resolves to a non-public address
    /// (127.0.0.1)`, `network off for this sandbox`, `malformed host`, ….
    pub rule: String,
    /// A short machine tag for the header: `blocked-by-allowlist`,
    /// `blocked-by-denylist`, `non-public-address`, `network-disabled`,
    /// `bad-target`, `resolve-failed`.
    pub tag: &'static str,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} refused: {}", self.target, self.rule)
    }
}

/// A refused connection, for the session's event stream (SPEC F11, H14):
/// `action` `network-outbound`, `target` `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub refusal: Refusal,
    pub ingress: Ingress,
}
