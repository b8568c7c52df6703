//! The one decision (SPEC E3, E4, E5; docs/research/egress-policy.md A4, A5).
//!
//! Every ingress path hands its target to [`Policy::decide`], which
//! canonicalises the host once ([`canonicalize`]), refuses the fixed deny
//! list, matches the allowlist label by label, resolves inside the proxy and
//! checks every address. The caller dials exactly the addresses returned, so
//! what was checked is what is dialled (no second resolution to rebind).

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::OnceLock;
use std::time::Duration;

use crate::lists::{self, Entry};
use crate::{Ingress, Refusal};

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;

/// What a session's policy is built from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyConfig {
    /// `false`: every connection is refused (SPEC E5); the lists are empty.
    pub network_enabled: bool,
    /// Patterns allowed on top of the baseline and GitHub lists
    /// (`spec.egressAllowlist`, `--allow-domain`).
    pub allow: Vec<String>,
    /// Patterns allowed even when their names resolve to non-public
    /// addresses (`--allow-private`). An opt-in, not an allow: a name must
    /// also be on the allowlist, so one server-wide opt-in for a mirror
    /// domain grants nothing a session's own allowlist does not.
    pub allow_private: Vec<String>,
    /// Resolver overrides, name → address (`--resolve HOST:ADDR`): used
    /// instead of the system resolver for those names (tests, mirrors).
    pub resolve: Vec<(String, IpAddr)>,
    /// Network open (SPEC D2, a terminal's): every name and public address
    /// counts as allowed. The fixed deny list and the non-public rule still
    /// hold (with `allow_private`'s opt-ins as ever): what the deny list
    /// guards — metadata, the host's own and private networks — stays shut.
    pub open: bool,
}

/// A pattern the policy cannot accept, naming it and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("egress pattern `{pattern}`: {reason}")]
pub struct PatternError {
    pub pattern: String,
    pub reason: String,
}

/// The machine tags of [`Refusal::tag`], so callers match on constants.
pub mod tag {
    /// The host is not on the allowlist (or an IP literal has no IP entry).
    pub const ALLOWLIST: &str = "blocked-by-allowlist";
    /// The fixed deny list: metadata names and ranges, telemetry sinks.
    pub const DENYLIST: &str = "blocked-by-denylist";
    /// The target is, or resolves to, a non-public address.
    pub const NON_PUBLIC: &str = "non-public-address";
    /// The session runs with `networkEnabled: false`.
    pub const NETWORK_DISABLED: &str = "network-disabled";
    /// The host or port does not parse.
    pub const BAD_TARGET: &str = "bad-target";
    /// Resolution inside the proxy failed or found nothing.
    pub const RESOLVE_FAILED: &str = "resolve-failed";
}

/// The system resolver gets this long before the connection is refused;
/// getaddrinfo's own retries can otherwise hold a client for minutes.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Longer client strings are refused before IDNA runs (a cheap bound; a
/// 253-byte name is at most 759 bytes even fully percent-encoded).
const MAX_HOST_INPUT: usize = 1024;

/// How much of an unparseable host a refusal quotes.
const MAX_SHOWN: usize = 200;

/// Stands in for `*` while a pattern goes through the same WHATWG parse as
/// targets; it is a plain LDH label, so IDNA leaves it alone.
const STAR: &str = "wildcard0label0placeholder";

/// A target host after canonicalisation: what is matched, resolved, dialled
/// and logged.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CanonicalHost {
    /// Lower-case ASCII (IDNA applied), no trailing dot, LDH labels.
    Name(String),
    /// IPv4-mapped and -compatible IPv6 already unwrapped to IPv4.
    Ip(IpAddr),
}

impl fmt::Display for CanonicalHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::Ip(IpAddr::V4(v4)) => write!(f, "{v4}"),
            Self::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
        }
    }
}

/// Canonicalises a client's host string once (docs/research/egress-policy.md A4
/// steps 1–3): the WHATWG host parser (IDNA, case, full-width dots,
/// percent-decoding, inet_aton numeric IPv4), one trailing dot dropped, LDH
/// labels. Accepts a bracketed or bare IPv6 address. The error is the reason,
/// in words.
pub fn canonicalize(raw: &str) -> Result<CanonicalHost, &'static str> {
    if raw.is_empty() {
        return Err("empty host");
    }
    if raw.len() > MAX_HOST_INPUT {
        return Err("host too long");
    }
    for c in raw.chars() {
        if c.is_control() || c.is_whitespace() {
            return Err("whitespace or a control character in the host");
        }
        match c {
            '@' => return Err("userinfo (`@`) in the host"),
            '/' | '\\' => return Err("a path separator in the host"),
            _ => {}
        }
    }
    if !raw.starts_with('[') && raw.contains(':') {
        // A bare IPv6 address (SOCKS5 ATYP 4 callers); `host:port` here is a
        // caller bug and must not reach the resolver.
        return match raw.parse::<Ipv6Addr>() {
            Ok(v6) => Ok(CanonicalHost::Ip(canonical_ip(IpAddr::V6(v6)))),
            Err(_) => Err("`:` in the host (the port is passed separately)"),
        };
    }
    match url::Host::parse(raw) {
        Ok(url::Host::Domain(mut name)) => {
            if name.ends_with('.') {
                name.pop();
            }
            check_name(&name)?;
            Ok(CanonicalHost::Name(name))
        }
        Ok(url::Host::Ipv4(v4)) => Ok(CanonicalHost::Ip(IpAddr::V4(v4))),
        Ok(url::Host::Ipv6(v6)) => Ok(CanonicalHost::Ip(canonical_ip(IpAddr::V6(v6)))),
        Err(_) => Err("not a valid host name or address"),
    }
}

/// Names we resolve and match are plain DNS names: the resolver never sees
/// anything the matcher did not.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty host");
    }
    if name.len() > 253 {
        return Err("host name longer than 253 characters");
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("empty label in the host name");
        }
        if !is_dns_label(label) {
            return Err("a label that is not a DNS label (letters, digits, `-`, `_`, at most 63)");
        }
    }
    Ok(())
}

/// Canonical labels: lower-case LDH, `_` allowed (some service hosts use it).
fn is_dns_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Unwraps IPv4-mapped (`::ffff:a.b.c.d`) and IPv4-compatible (`::a.b.c.d`)
/// IPv6 to the IPv4 they reach; `::` and `::1` stay IPv6.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return IpAddr::V4(v4);
            }
            let s = v6.segments();
            if s[..6] == [0; 6] && !v6.is_unspecified() && !v6.is_loopback() {
                return IpAddr::V4(embedded_v4(s));
            }
            ip
        }
        IpAddr::V4(_) => ip,
    }
}

/// The address an IP is judged by: itself, or for NAT64 (`64:ff9b::/96`)
/// and IPv4-translated (`::ffff:0:a.b.c.d`) forms the IPv4 they reach.
fn judged_ip(ip: IpAddr) -> IpAddr {
    match canonical_ip(ip) {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || s[..6] == [0, 0, 0, 0, 0xffff, 0] {
                IpAddr::V4(embedded_v4(s))
            } else {
                IpAddr::V6(v6)
            }
        }
        v4 => v4,
    }
}

fn embedded_v4(s: [u16; 8]) -> Ipv4Addr {
    let [a, b] = s[6].to_be_bytes();
    let [c, d] = s[7].to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

/// True for addresses that are not on the public internet
/// (docs/research/egress-policy.md A5 item 6): reaching them from a sandbox
/// means reaching the host's networks.
pub fn is_non_public(ip: IpAddr) -> bool {
    match judged_ip(ip) {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            a == 0 // 0.0.0.0/8 "this network"
                || a == 10 // 10/8 private
                || (a == 100 && (64..128).contains(&b)) // 100.64/10 CGNAT
                || a == 127 // loopback
                || (a == 169 && b == 254) // link-local, cloud metadata
                || (a == 172 && (16..32).contains(&b)) // 172.16/12 private
                || (a == 192 && b == 0 && c == 0) // 192.0.0/24 IETF protocol assignments
                || (a == 192 && b == 168) // 192.168/16 private
                || (a == 198 && (b == 18 || b == 19)) // 198.18/15 benchmarking
                || a >= 224 // 224/4 multicast, 240/4 reserved, 255.255.255.255
        }
        IpAddr::V6(v6) => {
            let s0 = v6.segments()[0];
            v6.is_unspecified()
                || v6.is_loopback()
                || (s0 & 0xfe00) == 0xfc00 // fc00::/7 unique local (fd00:ec2::254 …)
                || (s0 & 0xffc0) == 0xfe80 // fe80::/10 link-local
                || (s0 & 0xffc0) == 0xfec0 // fec0::/10 deprecated site-local
                || (s0 & 0xff00) == 0xff00 // ff00::/8 multicast
        }
    }
}

/// An address range (`10.0.0.0/8`) or one address (a full-length prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl Net {
    /// Parses `addr`, `[v6]`, `addr/len`; mapped IPv6 becomes IPv4 so it
    /// matches the canonical addresses it is compared with.
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        let (addr_text, prefix_text) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr_text = addr_text
            .strip_prefix('[')
            .and_then(|a| a.strip_suffix(']'))
            .unwrap_or(addr_text);
        let addr: IpAddr = addr_text.parse().map_err(|_| "not an IP address")?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix_text {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or("the prefix length is not a number within the address size")?,
        };
        let (addr, prefix) = match (addr, canonical_ip(addr)) {
            (IpAddr::V6(_), IpAddr::V4(v4)) if prefix >= 96 => (IpAddr::V4(v4), prefix - 96),
            _ => (addr, prefix),
        };
        let net = Self { addr, prefix };
        if net.network() != addr {
            return Err("the range has host bits set (write the network address)");
        }
        Ok(net)
    }

    /// Whether `ip` lies in the range (same family only).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                (u32::from(net) ^ u32::from(ip)) & mask_v4(self.prefix) == 0
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                (u128::from(net) ^ u128::from(ip)) & mask_v6(self.prefix) == 0
            }
            _ => false,
        }
    }

    fn network(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask_v4(self.prefix))),
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask_v6(self.prefix))),
        }
    }

    fn is_single(&self) -> bool {
        self.prefix == if self.addr.is_ipv4() { 32 } else { 128 }
    }
}

/// The network mask of a prefix length (a shift by 32 would overflow).
fn mask_v4(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask_v6(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl fmt::Display for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_single() {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.prefix)
        }
    }
}

/// A compiled host-name pattern, matched label by label.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NamePattern {
    /// Canonical text, `*` included: shown in rules and warnings.
    text: Box<str>,
    /// Canonical labels, left to right; the `*` label is kept as `*`.
    labels: Box<[Box<str>]>,
    /// Where the one `*` sits: `Some(0)` leading, `Some(i)` middle.
    star: Option<usize>,
}

impl NamePattern {
    /// `host` is canonical, so it has no empty labels.
    fn matches(&self, host: &str) -> bool {
        match self.star {
            None => host == &*self.text,
            // `*.rest`: at least one more label, then exactly `rest`.
            Some(0) => {
                let mut got = host.rsplit('.');
                for want in self.labels[1..].iter().rev() {
                    if got.next() != Some(&**want) {
                        return false;
                    }
                }
                got.next().is_some()
            }
            // `a.*.rest`: same label count, one non-empty label at the `*`.
            Some(star) => {
                let mut got = host.split('.');
                for (i, want) in self.labels.iter().enumerate() {
                    match got.next() {
                        Some(label) if i == star => {
                            if label.is_empty() {
                                return false;
                            }
                        }
                        Some(label) if label == &**want => {}
                        _ => return false,
                    }
                }
                got.next().is_none()
            }
        }
    }
}

/// What one allowlist or deny-list text compiles to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Name(NamePattern),
    Net(Net),
}

/// Validates and compiles one pattern (docs/research/egress-policy.md A4,
/// step 6), appending load-time warnings. The error is the reason, in words.
fn compile(raw: &str, warnings: &mut Vec<String>) -> Result<Pattern, String> {
    if raw.is_empty() {
        return Err("empty pattern".into());
    }
    for c in raw.chars() {
        if c.is_control() || c.is_whitespace() {
            return Err("contains whitespace or a control character".into());
        }
        match c {
            '@' => return Err("contains `@` (userinfo); give the host alone".into()),
            '\\' => return Err("contains `\\`".into()),
            '%' => return Err("contains `%`; write the host name decoded".into()),
            _ => {}
        }
    }
    if raw.contains("://") {
        return Err("is a URL; give the host alone, without scheme or path".into());
    }
    if raw.contains('/') {
        return Net::parse(raw).map(Pattern::Net).map_err(|why| {
            format!("contains `/`, which only an address range may (`10.0.0.0/8`): {why}")
        });
    }
    if raw.contains(':') {
        return Net::parse(raw).map(Pattern::Net).map_err(|_| {
            "contains `:`, which only an IPv6 address may (ports are not part of a pattern)".into()
        });
    }
    let stars = raw.matches('*').count();
    if stars > 1 {
        return Err("has more than one `*`; a pattern has at most one wildcard".into());
    }
    if raw.len() > 253 {
        return Err("is longer than 253 characters".into());
    }
    let parsed = if stars == 1 {
        url::Host::parse(&raw.replace('*', STAR))
    } else {
        url::Host::parse(raw)
    };
    let mut name = match parsed {
        Ok(url::Host::Domain(name)) => name,
        // Numeric forms (`127.1`) compile to the address they mean.
        Ok(url::Host::Ipv4(v4)) => return Ok(Pattern::Net(single(IpAddr::V4(v4)))),
        Ok(url::Host::Ipv6(v6)) => return Ok(Pattern::Net(single(IpAddr::V6(v6)))),
        Err(_) => return Err("is not a valid host name".into()),
    };
    if name.ends_with('.') {
        name.pop();
    }
    let mut star = None;
    let mut labels = Vec::new();
    for (i, label) in name.split('.').enumerate() {
        if stars == 1 && label.contains(STAR) {
            if label != STAR {
                return Err(
                    "has `*` inside a label; `*` must be a whole label (`*.example.com`, `api.*.example.com`)"
                        .into(),
                );
            }
            star = Some(i);
            labels.push(Box::from("*"));
        } else if label.is_empty() {
            return Err("has an empty label".into());
        } else if !is_dns_label(label) {
            return Err(format!(
                "label `{label}` is not a DNS label (letters, digits, `-`, `_`, at most 63)"
            ));
        } else {
            labels.push(Box::from(label));
        }
    }
    let text = labels.join(".");
    if let Some(star) = star {
        if labels.len() == 1 {
            return Err("`*` alone would allow every host".into());
        }
        if star == labels.len() - 1 {
            return Err("has `*` as the last label; it may lead (`*.example.com`) or sit in the middle (`api.*.example.com`)".into());
        }
        let rest = labels[star + 1..].join(".");
        check_wildcard_suffix(&text, &rest, warnings)?;
    }
    Ok(Pattern::Name(NamePattern {
        text: text.into(),
        labels: labels.into(),
        star,
    }))
}

fn single(ip: IpAddr) -> Net {
    let ip = canonical_ip(ip);
    Net {
        addr: ip,
        prefix: if ip.is_ipv4() { 32 } else { 128 },
    }
}

/// A `*` directly over an ICANN public suffix allows every domain anyone can
/// register there (`*.com`, `*.co.uk`, `www.*.com`): refused. Over a PSL
/// *private* suffix (`*.githubusercontent.com`) third parties create the
/// hosts: warned. The `psl` crate costs only a few seconds of clean build,
/// so the real list is used rather than a hand-kept table.
fn check_wildcard_suffix(
    pattern: &str,
    rest: &str,
    warnings: &mut Vec<String>,
) -> Result<(), String> {
    // `rest` itself a suffix (`com`), or every label under it one (PSL
    // wildcard rules such as `*.kawasaki.jp`): try a probe label under it.
    let probe = format!("{STAR}.{rest}");
    for candidate in [rest, probe.as_str()] {
        let Some(suffix) = psl::suffix(candidate.as_bytes()) else {
            continue;
        };
        if suffix.as_bytes() != candidate.as_bytes() || !suffix.is_known() {
            continue;
        }
        match suffix.typ() {
            Some(psl::Type::Icann) => {
                return Err(format!(
                    "puts `*` directly over the public suffix `{rest}`: it would allow every domain anyone can register there"
                ));
            }
            Some(psl::Type::Private) => {
                warnings.push(format!(
                    "egress pattern `{pattern}`: `{rest}` is a public suffix run by a third party (PSL private section); anyone can get a host under it, so this wildcard allows hosts nobody here controls"
                ));
                return Ok(());
            }
            None => {}
        }
    }
    if !rest.contains('.') {
        warnings.push(format!(
            "egress pattern `{pattern}`: `*` over the whole top-level domain `{rest}`"
        ));
    }
    Ok(())
}

/// Allow entries. `bool` = opted in to non-public addresses.
#[derive(Debug, Default)]
struct AllowSet {
    exact: HashMap<Box<str>, bool>,
    wildcards: Vec<(NamePattern, bool)>,
    nets: Vec<(Net, bool)>,
}

impl AllowSet {
    fn insert(&mut self, pattern: Pattern, private: bool) {
        match pattern {
            Pattern::Name(p) if p.star.is_none() => {
                *self.exact.entry(p.text).or_insert(false) |= private;
            }
            Pattern::Name(p) => self.wildcards.push((p, private)),
            Pattern::Net(net) => self.nets.push((net, private)),
        }
    }

    /// `Some(private)` when some entry matches; private if any matching one is.
    fn name(&self, host: &str) -> Option<bool> {
        let mut found = self.exact.get(host).copied();
        for (pattern, private) in &self.wildcards {
            if found == Some(true) {
                break;
            }
            if pattern.matches(host) {
                found = Some(*private || found == Some(true));
            }
        }
        found
    }

    fn ip(&self, ip: IpAddr) -> Option<bool> {
        self.nets
            .iter()
            .filter(|(net, _)| net.contains(ip))
            .map(|(_, private)| *private)
            .reduce(|a, b| a || b)
    }
}

fn either(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a || b),
        (a, None) => a,
        (None, b) => b,
    }
}

/// The fixed deny list, each entry with its reason.
#[derive(Debug, Default)]
struct DenySet {
    exact: HashMap<Box<str>, Box<str>>,
    wildcards: Vec<(NamePattern, Box<str>)>,
    nets: Vec<(Net, Box<str>)>,
}

impl DenySet {
    /// The matching pattern and its reason.
    fn name(&self, host: &str) -> Option<(&str, &str)> {
        if let Some((pattern, why)) = self.exact.get_key_value(host) {
            return Some((pattern, why));
        }
        self.wildcards
            .iter()
            .find(|(pattern, _)| pattern.matches(host))
            .map(|(pattern, why)| (&*pattern.text, &**why))
    }

    /// The matching range and its reason; NAT64 and translated forms are
    /// judged by the IPv4 they reach.
    fn ip(&self, ip: IpAddr) -> Option<(Net, &str)> {
        let judged = judged_ip(ip);
        self.nets
            .iter()
            .find(|(net, _)| net.contains(ip) || net.contains(judged))
            .map(|(net, why)| (*net, &**why))
    }
}

/// The shipped lists, compiled once per process and shared by sessions.
#[derive(Debug)]
struct Shipped {
    allow: AllowSet,
    deny: DenySet,
    warnings: Vec<String>,
}

fn shipped() -> Result<&'static Shipped, PatternError> {
    static SHIPPED: OnceLock<Result<Shipped, PatternError>> = OnceLock::new();
    SHIPPED
        .get_or_init(compile_shipped)
        .as_ref()
        .map_err(Clone::clone)
}

fn compile_shipped() -> Result<Shipped, PatternError> {
    let lists = lists::shipped().map_err(|e| PatternError {
        pattern: "egress/lists.toml".into(),
        reason: e.to_string(),
    })?;
    let mut warnings = Vec::new();
    let mut allow = AllowSet::default();
    for entry in lists.baseline.iter().chain(&lists.github) {
        allow.insert(compile_entry(entry, &mut warnings)?, false);
    }
    let mut deny = DenySet::default();
    for entry in &lists.deny_names {
        match compile_entry(entry, &mut warnings)? {
            Pattern::Name(p) if p.star.is_none() => {
                deny.exact.insert(p.text, entry.why.as_str().into());
            }
            Pattern::Name(p) => deny.wildcards.push((p, entry.why.as_str().into())),
            Pattern::Net(_) => return Err(entry_error(entry, "an address belongs in deny_ranges")),
        }
    }
    for entry in &lists.deny_ranges {
        let net = Net::parse(&entry.pattern).map_err(|why| entry_error(entry, why))?;
        deny.nets.push((net, entry.why.as_str().into()));
    }
    Ok(Shipped {
        allow,
        deny,
        warnings,
    })
}

fn compile_entry(entry: &Entry, warnings: &mut Vec<String>) -> Result<Pattern, PatternError> {
    if entry.why.trim().is_empty() {
        return Err(entry_error(entry, "lists.toml entry without a `why`"));
    }
    compile(&entry.pattern, warnings).map_err(|reason| entry_error(entry, &reason))
}

fn entry_error(entry: &Entry, reason: &str) -> PatternError {
    PatternError {
        pattern: entry.pattern.clone(),
        reason: reason.into(),
    }
}

/// Where addresses come from after an allow. Tests use `Fail` so nothing
/// ever reaches the system resolver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolver {
    System,
    #[cfg(test)]
    Fail,
}

/// A session's compiled egress policy.
#[derive(Debug)]
pub struct Policy {
    network_enabled: bool,
    shipped: &'static Shipped,
    /// `config.allow`.
    extra: AllowSet,
    /// `config.allow_private`: which allowed names and addresses may be
    /// non-public.
    private_ok: AllowSet,
    /// Canonical name → addresses, in the order given.
    overrides: HashMap<Box<str>, Vec<IpAddr>>,
    /// `config.open`.
    open: bool,
    warnings: Vec<String>,
    resolver: Resolver,
}

impl Policy {
    /// Compiles and validates the lists: the shipped ones once per process,
    /// the session's own patterns and resolver overrides here.
    pub fn new(config: PolicyConfig) -> Result<Self, PatternError> {
        let shipped = shipped()?;
        let mut warnings = shipped.warnings.clone();
        let mut extra = AllowSet::default();
        let mut private_ok = AllowSet::default();
        for (list, private) in [(&config.allow, false), (&config.allow_private, true)] {
            for raw in list {
                let pattern = compile(raw, &mut warnings).map_err(|reason| PatternError {
                    pattern: raw.clone(),
                    reason,
                })?;
                if private {
                    warn_shadowed(&pattern, true, &shipped.deny, &mut warnings);
                    private_ok.insert(pattern, true);
                } else {
                    let opted_in = config.allow_private.iter().any(|p| p == raw);
                    warn_shadowed(&pattern, opted_in, &shipped.deny, &mut warnings);
                    extra.insert(pattern, false);
                }
            }
        }
        let mut overrides: HashMap<Box<str>, Vec<IpAddr>> = HashMap::new();
        for (name, ip) in &config.resolve {
            let error = |reason: &str| PatternError {
                pattern: name.clone(),
                reason: format!("resolver override: {reason}"),
            };
            match canonicalize(name).map_err(error)? {
                CanonicalHost::Name(name) => overrides
                    .entry(name.into())
                    .or_default()
                    .push(canonical_ip(*ip)),
                CanonicalHost::Ip(_) => return Err(error("an address needs no override")),
            }
        }
        let mut seen = std::collections::HashSet::new();
        warnings.retain(|w| seen.insert(w.clone()));
        Ok(Self {
            network_enabled: config.network_enabled,
            shipped,
            extra,
            private_ok,
            overrides,
            open: config.open,
            warnings,
            resolver: Resolver::System,
        })
    }

    /// Whether any connection can pass (SPEC E5).
    pub fn network_enabled(&self) -> bool {
        self.network_enabled
    }

    /// Decides one connection: the checked addresses to dial (and nothing
    /// else), or why not. The decision does not depend on `ingress`; it is only
    /// logged, so every path gets the same answer
    /// (docs/research/egress-policy.md A5 item 2).
    pub async fn decide(
        &self,
        host: &str,
        port: u16,
        ingress: Ingress,
    ) -> Result<Vec<SocketAddr>, Refusal> {
        let decision = self.decide_any(host, port).await;
        if let Err(refusal) = &decision {
            tracing::debug!(
                dest = %refusal.target,
                rule = %refusal.rule,
                tag = refusal.tag,
                %ingress,
                "egress refused"
            );
        }
        decision
    }

    async fn decide_any(&self, raw: &str, port: u16) -> Result<Vec<SocketAddr>, Refusal> {
        let host = canonicalize(raw);
        if !self.network_enabled {
            let target = match &host {
                Ok(host) => target(host, port),
                Err(_) => raw_target(raw, port),
            };
            return Err(refuse(
                target,
                "network off for this sandbox (networkEnabled: false)".into(),
                tag::NETWORK_DISABLED,
            ));
        }
        let host = host.map_err(|reason| {
            refuse(
                raw_target(raw, port),
                format!("malformed host: {reason}"),
                tag::BAD_TARGET,
            )
        })?;
        if port == 0 {
            return Err(refuse(
                target(&host, port),
                "port 0 is not a destination".into(),
                tag::BAD_TARGET,
            ));
        }
        match host {
            CanonicalHost::Ip(ip) => self.decide_ip(ip, port),
            CanonicalHost::Name(name) => self.decide_name(&name, port).await,
        }
    }

    /// IP literals: the deny ranges, then only explicit address entries,
    /// and non-public ones only with `--allow-private`.
    fn decide_ip(&self, ip: IpAddr, port: u16) -> Result<Vec<SocketAddr>, Refusal> {
        let addr = SocketAddr::new(ip, port);
        if let Some((net, why)) = self.shipped.deny.ip(ip) {
            return Err(refuse(
                addr.to_string(),
                format!("fixed deny list: {net} ({why})"),
                tag::DENYLIST,
            ));
        }
        let grant = either(self.shipped.allow.ip(ip), self.extra.ip(ip));
        let private = grant == Some(true) || self.private_ok.ip(ip).is_some();
        let grant = grant.or(self.open.then_some(false));
        if is_non_public(ip) && !private {
            return Err(refuse(
                addr.to_string(),
                format!("non-public address {ip}; allow it with --allow-private"),
                tag::NON_PUBLIC,
            ));
        }
        if grant.is_none() {
            return Err(refuse(
                addr.to_string(),
                "not on the allowlist (an IP address matches only an explicit address entry; use the host name)".into(),
                tag::ALLOWLIST,
            ));
        }
        Ok(vec![addr])
    }

    /// Names: the deny names, the allowlist, then every resolved address.
    async fn decide_name(&self, name: &str, port: u16) -> Result<Vec<SocketAddr>, Refusal> {
        let shown = || format!("{name}:{port}");
        if let Some((pattern, why)) = self.shipped.deny.name(name) {
            return Err(refuse(
                shown(),
                format!("fixed deny list: {pattern} ({why})"),
                tag::DENYLIST,
            ));
        }
        let listed = either(self.shipped.allow.name(name), self.extra.name(name));
        let Some(shipped_private) = listed.or(self.open.then_some(false)) else {
            return Err(refuse(
                shown(),
                "not on the allowlist".into(),
                tag::ALLOWLIST,
            ));
        };
        let private = shipped_private || self.private_ok.name(name).is_some();
        let resolved = self
            .resolve(name, port)
            .await
            .map_err(|rule| refuse(shown(), rule, tag::RESOLVE_FAILED))?;
        let mut checked: Vec<SocketAddr> = Vec::with_capacity(resolved.len());
        for ip in resolved {
            let ip = canonical_ip(ip);
            if let Some((net, why)) = self.shipped.deny.ip(ip) {
                return Err(refuse(
                    shown(),
                    format!("resolves to {ip}, on the fixed deny list: {net} ({why})"),
                    tag::DENYLIST,
                ));
            }
            if !private && is_non_public(ip) {
                return Err(refuse(
                    shown(),
                    format!("resolves to a non-public address {ip}; allow it with --allow-private"),
                    tag::NON_PUBLIC,
                ));
            }
            let addr = SocketAddr::new(ip, port);
            if !checked.contains(&addr) {
                checked.push(addr);
            }
        }
        if checked.is_empty() {
            return Err(refuse(
                shown(),
                format!("{name} resolved to no addresses"),
                tag::RESOLVE_FAILED,
            ));
        }
        Ok(checked)
    }

    /// Overrides first, else the system resolver, fed only the canonical
    /// name. The error is the refusal rule.
    async fn resolve(&self, name: &str, port: u16) -> Result<Vec<IpAddr>, String> {
        if let Some(ips) = self.overrides.get(name) {
            return Ok(ips.clone());
        }
        match self.resolver {
            Resolver::System => {
                // Multi-label names are asked as absolute (`github.com.`), so
                // resolv.conf search domains (ndots) cannot turn the checked
                // name into another one. A single-label name was allowed
                // explicitly by the operator, search domain intended.
                let query = if name.contains('.') {
                    format!("{name}.")
                } else {
                    name.to_owned()
                };
                let lookup = tokio::net::lookup_host((query.as_str(), port));
                match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                    Ok(Ok(addrs)) => Ok(addrs.map(|a| a.ip()).collect()),
                    Ok(Err(e)) => Err(format!("could not resolve {name}: {e}")),
                    Err(_) => Err(format!(
                        "resolving {name} took longer than {} s",
                        RESOLVE_TIMEOUT.as_secs()
                    )),
                }
            }
            #[cfg(test)]
            Resolver::Fail => Err(format!(
                "could not resolve {name}: resolver disabled in tests"
            )),
        }
    }

    /// Load-time warnings (a wildcard over a private public suffix, an
    /// entry the deny list overrides, a private address without opt-in).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// Tells the operator at load time about entries that cannot work as
/// written, instead of leaving them to fail per connection.
fn warn_shadowed(pattern: &Pattern, private: bool, deny: &DenySet, warnings: &mut Vec<String>) {
    match pattern {
        Pattern::Name(p) if p.star.is_none() => {
            if let Some((denied, why)) = deny.name(&p.text) {
                warnings.push(format!(
                    "egress pattern `{}`: stays refused, fixed deny list: {denied} ({why})",
                    p.text
                ));
            }
        }
        Pattern::Name(_) => {}
        Pattern::Net(net) => {
            let addr = net.network();
            if let Some((denied, why)) = deny
                .nets
                .iter()
                .find(|(d, _)| d.contains(addr) || net.contains(d.addr))
            {
                warnings.push(format!(
                    "egress pattern `{net}`: overlaps the fixed deny list {denied} ({why}); those addresses stay refused"
                ));
            }
            if !private && is_non_public(addr) {
                warnings.push(format!(
                    "egress pattern `{net}`: a non-public address; it stays refused unless given with --allow-private"
                ));
            }
        }
    }
}

fn refuse(target: String, rule: String, tag: &'static str) -> Refusal {
    Refusal { target, rule, tag }
}

fn target(host: &CanonicalHost, port: u16) -> String {
    format!("{host}:{port}")
}

/// An unparseable host, quoted header-safe: ASCII escapes, bounded length.
fn raw_target(raw: &str, port: u16) -> String {
    let mut shown: String = raw
        .chars()
        .take(MAX_SHOWN)
        .flat_map(char::escape_default)
        .collect();
    if raw.chars().nth(MAX_SHOWN).is_some() {
        shown.push_str("...");
    }
    format!("{shown}:{port}")
}
