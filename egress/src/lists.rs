//! The baseline allowlist, the GitHub domains and the fixed deny list
//! (SPEC E4), read from the reviewed file `egress/lists.toml`.
//!
//! The file is data, not code, so a reviewer reads one entry per line with
//! its reason; it is compiled into the binary so a deployment cannot drop the
//! deny list by losing a file. [`crate::Policy::new`] compiles the entries.

use std::sync::OnceLock;

use serde::Deserialize;

/// The reviewed lists, as shipped.
pub const LISTS_TOML: &str = include_str!("../lists.toml");

/// One reviewed entry: a host pattern (or an address or range, in
/// `deny_ranges`) and why it is listed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub pattern: String,
    /// What the host is and why it is here; quoted in deny refusals.
    pub why: String,
}

/// The four lists of `lists.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lists {
    /// LLM providers, git hosting, package registries, the model catalog.
    pub baseline: Vec<Entry>,
    /// kGithubDomains.
    pub github: Vec<Entry>,
    /// Names refused before any allow (metadata, telemetry sinks).
    pub deny_names: Vec<Entry>,
    /// Addresses and CIDR ranges refused as literals and after resolution,
    /// even with `--allow-private`.
    pub deny_ranges: Vec<Entry>,
}

/// Parses a lists file (the shipped one is [`LISTS_TOML`]).
pub fn parse(text: &str) -> Result<Lists, toml::de::Error> {
    toml::from_str(text)
}

/// The shipped lists, parsed once per process.
pub fn shipped() -> Result<&'static Lists, &'static toml::de::Error> {
    static LISTS: OnceLock<Result<Lists, toml::de::Error>> = OnceLock::new();
    LISTS.get_or_init(|| parse(LISTS_TOML)).as_ref()
}
