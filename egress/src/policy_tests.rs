//! Unit tests for the decision. Nothing here touches the network: every
//! policy is built with the failing test resolver, allowed names get
//! resolver overrides, and nothing is dialled. Addresses used as "public"
//! are documentation ranges (192.0.2.0/24, 2001:db8::/32).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};

use super::*;
use crate::Ingress;

const ALL_INGRESS: [Ingress; 7] = [
    Ingress::Connect,
    Ingress::HttpForward,
    Ingress::Socks5Domain,
    Ingress::Socks5Ipv4,
    Ingress::Socks5Ipv6,
    Ingress::Socks4a,
    Ingress::Socks4,
];

fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// A policy that can never reach the system resolver.
fn policy(config: PolicyConfig) -> Policy {
    let mut policy = Policy::new(config).unwrap();
    policy.resolver = Resolver::Fail;
    policy
}

fn on() -> PolicyConfig {
    PolicyConfig {
        network_enabled: true,
        ..PolicyConfig::default()
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn overrides(items: &[(&str, &str)]) -> Vec<(String, IpAddr)> {
    items
        .iter()
        .map(|(name, ip)| ((*name).to_owned(), ip.parse().unwrap()))
        .collect()
}

fn decide(policy: &Policy, host: &str, port: u16) -> Result<Vec<SocketAddr>, Refusal> {
    block_on(policy.decide(host, port, Ingress::Connect))
}

fn refused(policy: &Policy, host: &str, port: u16) -> Refusal {
    match decide(policy, host, port) {
        Err(refusal) => refusal,
        Ok(addrs) => panic!("{host}:{port} was allowed: {addrs:?}"),
    }
}

fn addrs(items: &[&str]) -> Vec<SocketAddr> {
    items.iter().map(|a| a.parse().unwrap()).collect()
}

fn name_pattern(text: &str) -> NamePattern {
    match compile(text, &mut Vec::new()).unwrap() {
        Pattern::Name(p) => p,
        Pattern::Net(net) => panic!("{text} compiled to a range {net}"),
    }
}

fn canonical_name(raw: &str) -> String {
    match canonicalize(raw).unwrap() {
        CanonicalHost::Name(name) => name,
        CanonicalHost::Ip(ip) => panic!("{raw} is an address {ip}"),
    }
}

fn compile_error(text: &str) -> String {
    match Policy::new(PolicyConfig {
        allow: strings(&[text]),
        ..on()
    }) {
        Err(e) => {
            assert_eq!(e.pattern, text);
            e.reason
        }
        Ok(_) => panic!("pattern {text:?} was accepted"),
    }
}

fn warnings_for(allow: &[&str], allow_private: &[&str]) -> Vec<String> {
    policy(PolicyConfig {
        allow: strings(allow),
        allow_private: strings(allow_private),
        ..on()
    })
    .warnings()
    .to_vec()
}

// --- Research A4 test vectors, verbatim -------------------------------------

#[test]
fn a4_leading_wildcard_vectors() {
    let p = name_pattern("*.example.com");
    for host in ["a.example.com", "a.b.example.com", "A.EXAMPLE.COM."] {
        assert!(p.matches(&canonical_name(host)), "{host} should match");
    }
    for host in ["example.com", "badexample.com", "example.com.evil.net"] {
        assert!(!p.matches(&canonical_name(host)), "{host} must not match");
    }
}

#[test]
fn a4_middle_wildcard_vectors() {
    let p = name_pattern("bedrock.*.amazonaws.com");
    assert!(p.matches("bedrock.us-east-1.amazonaws.com"));
    for host in [
        "bedrock.evil.attacker.amazonaws.com",
        "bedrock.amazonaws.com",
        "bedrock-runtime.us-east-1.amazonaws.com",
    ] {
        assert!(!p.matches(host), "{host} must not match");
    }
    // The surprise: `*` also matches `s3`, and bedrock.s3.amazonaws.com is
    // the S3 virtual-host endpoint of a bucket named `bedrock` that anyone
    // can own. This is why lists.toml names Bedrock regions explicitly.
    assert!(p.matches("bedrock.s3.amazonaws.com"));
}

#[test]
fn a4_ip_literals_never_match_a_name_entry() {
    // github.com is on the shipped GitHub list.
    let p = policy(on());
    for host in ["140.82.112.3", "[::ffff:8c52:7003]"] {
        let r = refused(&p, host, 443);
        assert_eq!(r.tag, tag::ALLOWLIST, "{host}: {r:?}");
        assert_eq!(r.target, "140.82.112.3:443");
    }
}

#[test]
fn a4_any_pattern_denies_metadata_and_non_public_literals() {
    let p = policy(PolicyConfig {
        allow: strings(&["*.example.com", "api.*.example.net", "github.com"]),
        ..on()
    });
    for host in ["0x7f.1", "2130706433"] {
        let r = refused(&p, host, 80);
        assert_eq!(r.tag, tag::NON_PUBLIC, "{host}: {r:?}");
        assert_eq!(r.target, "127.0.0.1:80");
    }
    for host in ["169.254.169.254", "[fd00:ec2::254]"] {
        assert_eq!(refused(&p, host, 80).tag, tag::DENYLIST, "{host}");
    }
}

// --- Canonicalisation (docs/research/egress-policy.md A4 step 2) ----------------

#[test]
fn a4_canonicalisation_examples() {
    let cases = [
        ("GitHub.COM", "github.com"),
        ("ＧＩＴＨＵＢ.com", "github.com"),
        ("git\u{AD}hub.com", "github.com"),
        ("github.com\u{3002}evil.com", "github.com.evil.com"),
        ("github.com%2eevil.com", "github.com.evil.com"),
        ("gıthub.com", "xn--gthub-n4a.com"),
        ("github.com.", "github.com"),
    ];
    for (raw, want) in cases {
        assert_eq!(canonical_name(raw), want, "{raw:?}");
    }
    let ips = [
        ("0x7f.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("[::ffff:127.0.0.1]", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
    ];
    for (raw, want) in ips {
        assert_eq!(
            canonicalize(raw).unwrap(),
            CanonicalHost::Ip(want.parse().unwrap()),
            "{raw:?}"
        );
    }
}

#[test]
fn canonical_forms_are_matched_not_the_raw_string() {
    let p = policy(PolicyConfig {
        allow: strings(&["example.com"]),
        resolve: overrides(&[("example.com", "192.0.2.10")]),
        ..on()
    });
    for host in [
        "EXAMPLE.com.",
        "ＥＸＡＭＰＬＥ.com",
        "exa\u{AD}mple.com",
        "exam%70le.com",
    ] {
        assert_eq!(
            decide(&p, host, 443),
            Ok(addrs(&["192.0.2.10:443"])),
            "{host:?}"
        );
    }
    // Look-alikes canonicalise to other names, which are not allowed.
    let r = refused(&p, "github.com%2eevil.com", 443);
    assert_eq!(
        (r.tag, r.target.as_str()),
        (tag::ALLOWLIST, "github.com.evil.com:443")
    );
    let r = refused(&p, "exаmple.com", 443); // Cyrillic а
    assert_eq!(r.tag, tag::ALLOWLIST);
    assert!(r.target.starts_with("xn--"), "{}", r.target);
}

#[test]
fn numeric_ipv4_forms_of_loopback_and_metadata_are_refused() {
    let p = policy(on());
    for host in [
        "0x7f.1",
        "2130706433",
        "127.1",
        "0177.0.0.1",
        "0x7f000001",
        "127.0.0.1",
    ] {
        let r = refused(&p, host, 443);
        assert_eq!(
            (r.tag, r.target.as_str()),
            (tag::NON_PUBLIC, "127.0.0.1:443"),
            "{host}"
        );
        assert_eq!(
            r.rule,
            "non-public address 127.0.0.1; allow it with --allow-private"
        );
    }
    for host in [
        "0251.0376.0251.0376",
        "169.254.169.254",
        "0xa9fea9fe",
        "2852039166",
        "169.254.43518",
    ] {
        let r = refused(&p, host, 80);
        assert_eq!(
            (r.tag, r.target.as_str()),
            (tag::DENYLIST, "169.254.169.254:80"),
            "{host}"
        );
        assert!(
            r.rule.starts_with("fixed deny list: 169.254.0.0/16 ("),
            "{}",
            r.rule
        );
    }
}

#[test]
fn ipv6_literal_forms() {
    let p = policy(on());
    let cases = [
        ("[::1]", tag::NON_PUBLIC, "[::1]:443"),
        ("::1", tag::NON_PUBLIC, "[::1]:443"),
        ("[::]", tag::NON_PUBLIC, "[::]:443"),
        ("[::ffff:127.0.0.1]", tag::NON_PUBLIC, "127.0.0.1:443"),
        ("[::ffff:7f00:1]", tag::NON_PUBLIC, "127.0.0.1:443"),
        ("::ffff:7f00:1", tag::NON_PUBLIC, "127.0.0.1:443"),
        ("[::127.0.0.1]", tag::NON_PUBLIC, "127.0.0.1:443"),
        (
            "[::ffff:0:7f00:1]",
            tag::NON_PUBLIC,
            "[::ffff:0:7f00:1]:443",
        ),
        (
            "[64:ff9b::7f00:1]",
            tag::NON_PUBLIC,
            "[64:ff9b::7f00:1]:443",
        ),
        ("[fe80::1]", tag::NON_PUBLIC, "[fe80::1]:443"),
        ("[fc00::1]", tag::NON_PUBLIC, "[fc00::1]:443"),
        ("[fd12:3456::1]", tag::NON_PUBLIC, "[fd12:3456::1]:443"),
        ("[ff02::1]", tag::NON_PUBLIC, "[ff02::1]:443"),
        ("[FD00:EC2::254]", tag::DENYLIST, "[fd00:ec2::254]:443"),
        ("[fd00:ec2::23]", tag::DENYLIST, "[fd00:ec2::23]:443"),
        ("[fd20:ce::254]", tag::DENYLIST, "[fd20:ce::254]:443"),
        ("[::ffff:a9fe:a9fe]", tag::DENYLIST, "169.254.169.254:443"),
        (
            "[::ffff:169.254.169.254]",
            tag::DENYLIST,
            "169.254.169.254:443",
        ),
        (
            "[64:ff9b::a9fe:a9fe]",
            tag::DENYLIST,
            "[64:ff9b::a9fe:a9fe]:443",
        ),
        ("[2001:db8::1]", tag::ALLOWLIST, "[2001:db8::1]:443"),
        (
            "[64:ff9b::c000:20a]",
            tag::ALLOWLIST,
            "[64:ff9b::c000:20a]:443",
        ),
    ];
    for (host, want_tag, want_target) in cases {
        let r = refused(&p, host, 443);
        assert_eq!(
            (r.tag, r.target.as_str()),
            (want_tag, want_target),
            "{host}: {r:?}"
        );
    }
    for host in [
        "[fe80::1%eth0]",
        "[fe80::1%25eth0]",
        "fe80::1%eth0",
        "[::1",
        "::1]",
    ] {
        assert_eq!(refused(&p, host, 443).tag, tag::BAD_TARGET, "{host}");
    }
}

#[test]
fn malformed_hosts_are_bad_targets() {
    let p = policy(on());
    for host in [
        "",
        "user@github.com",
        "github.com/x",
        "github.com\\x",
        "git hub.com",
        "github.com\n",
        "github.com\u{0}",
        "github.com:443",
        "a..b.com",
        ".github.com",
        "github.com..",
        "xn--zz.com",
        "ex*mple.com",
        "github.com%00",
        "999.1.1.1",
        "1.2.3.4.5",
        "[10.0.0.1]",
    ] {
        let r = refused(&p, host, 443);
        assert_eq!(r.tag, tag::BAD_TARGET, "{host:?}: {r:?}");
        assert!(r.rule.starts_with("malformed host: "), "{}", r.rule);
        assert!(
            r.target.is_ascii() && !r.target.contains('\n'),
            "{:?}",
            r.target
        );
    }
    let long = format!("{}.com", "a".repeat(64));
    assert_eq!(refused(&p, &long, 443).tag, tag::BAD_TARGET);
    let huge = "a.".repeat(2000);
    let r = refused(&p, &huge, 443);
    assert_eq!(r.tag, tag::BAD_TARGET);
    assert!(r.target.len() < 1000, "quoted target is bounded");
    assert_eq!(refused(&p, "github.com\n", 443).target, "github.com\\n:443");
}

#[test]
fn port_zero_is_refused() {
    let p = policy(PolicyConfig {
        resolve: overrides(&[("github.com", "192.0.2.10")]),
        ..on()
    });
    let r = refused(&p, "github.com", 0);
    assert_eq!(
        (r.tag, r.target.as_str()),
        (tag::BAD_TARGET, "github.com:0")
    );
}

// --- Deny list ------------------------------------------------------------

#[test]
fn metadata_names_are_refused_even_with_override_and_allow_private() {
    let names = [
        "metadata.google.internal",
        "METADATA.GOOGLE.INTERNAL.",
        "metadata.goog",
        "metadata",
        "instance-data.ec2.internal",
        "instance-data",
    ];
    let p = policy(PolicyConfig {
        allow: strings(&names),
        allow_private: strings(&names),
        resolve: names
            .iter()
            .map(|n| ((*n).to_owned(), "127.0.0.1".parse().unwrap()))
            .collect(),
        ..on()
    });
    for name in names {
        let r = refused(&p, name, 80);
        assert_eq!(r.tag, tag::DENYLIST, "{name}: {r:?}");
        assert!(r.rule.starts_with("fixed deny list: "), "{}", r.rule);
    }
    let r = refused(&p, "metadata.google.internal", 80);
    assert_eq!(r.target, "metadata.google.internal:80");
    assert_eq!(
        r.rule,
        "fixed deny list: metadata.google.internal (cloud metadata: GCP metadata server)"
    );
}

#[test]
fn telemetry_sinks_are_refused_even_when_allowed() {
    let p = policy(PolicyConfig {
        allow: strings(&["*.sentry.io", "sentry.io", "*.posthog.com"]),
        resolve: overrides(&[("o1.ingest.sentry.io", "192.0.2.10")]),
        ..on()
    });
    for host in [
        "sentry.io",
        "o1.ingest.sentry.io",
        "us.i.posthog.com",
        "api.segment.io",
    ] {
        assert_eq!(refused(&p, host, 443).tag, tag::DENYLIST, "{host}");
    }
}

#[test]
fn fixed_deny_ranges_win_over_allow_private() {
    let listed = [
        "mirror.corp.example",
        "169.254.0.0/16",
        "100.100.100.200",
        "fd00:ec2::254",
    ];
    let p = policy(PolicyConfig {
        allow: strings(&listed),
        allow_private: strings(&listed),
        resolve: overrides(&[("mirror.corp.example", "::ffff:169.254.169.254")]),
        ..on()
    });
    for host in [
        "169.254.169.254",
        "169.254.170.2",
        "100.100.100.200",
        "[fd00:ec2::254]",
    ] {
        assert_eq!(refused(&p, host, 80).tag, tag::DENYLIST, "{host}");
    }
    let r = refused(&p, "mirror.corp.example", 80);
    assert_eq!(r.tag, tag::DENYLIST);
    assert!(
        r.rule
            .starts_with("resolves to 169.254.169.254, on the fixed deny list: 169.254.0.0/16"),
        "{}",
        r.rule
    );
    // 168.63.129.16 looks public; the deny list still names it.
    assert_eq!(refused(&p, "168.63.129.16", 80).tag, tag::DENYLIST);
}

// --- Resolution and non-public addresses -------------------------------------

#[test]
fn allowed_name_resolving_to_loopback_needs_allow_private() {
    let resolve = overrides(&[("mirror.corp.example", "127.0.0.1")]);
    let plain = policy(PolicyConfig {
        allow: strings(&["mirror.corp.example"]),
        resolve: resolve.clone(),
        ..on()
    });
    let r = refused(&plain, "mirror.corp.example", 443);
    assert_eq!(r.tag, tag::NON_PUBLIC);
    assert_eq!(r.target, "mirror.corp.example:443");
    assert_eq!(
        r.rule,
        "resolves to a non-public address 127.0.0.1; allow it with --allow-private"
    );

    // The opt-in alone allows nothing: the name must be allowed too.
    let opt_in_only = policy(PolicyConfig {
        allow_private: strings(&["mirror.corp.example"]),
        resolve: resolve.clone(),
        ..on()
    });
    assert_eq!(
        refused(&opt_in_only, "mirror.corp.example", 443).tag,
        tag::ALLOWLIST
    );
    let opted_in = policy(PolicyConfig {
        allow: strings(&["mirror.corp.example"]),
        allow_private: strings(&["*.corp.example", "mirror.corp.example"]),
        resolve,
        ..on()
    });
    assert_eq!(
        decide(&opted_in, "mirror.corp.example", 443),
        Ok(addrs(&["127.0.0.1:443"]))
    );
}

#[test]
fn allow_private_applies_to_wildcards_and_merges_with_allow() {
    let p = policy(PolicyConfig {
        allow: strings(&["*.corp.example"]),
        allow_private: strings(&["*.corp.example"]),
        resolve: overrides(&[("git.corp.example", "10.1.2.3")]),
        ..on()
    });
    assert_eq!(
        decide(&p, "git.corp.example", 22),
        Ok(addrs(&["10.1.2.3:22"]))
    );
    // The apex is not covered by the wildcard.
    assert_eq!(refused(&p, "corp.example", 22).tag, tag::ALLOWLIST);
}

#[test]
fn one_private_address_among_several_refuses() {
    let p = policy(PolicyConfig {
        allow: strings(&["example.com"]),
        resolve: overrides(&[
            ("example.com", "192.0.2.10"),
            ("example.com", "2001:db8::10"),
            ("example.com", "10.0.0.1"),
        ]),
        ..on()
    });
    let r = refused(&p, "example.com", 443);
    assert_eq!(r.tag, tag::NON_PUBLIC);
    assert!(r.rule.contains("10.0.0.1"), "{}", r.rule);
}

#[test]
fn every_checked_address_is_returned_once_in_order() {
    let p = policy(PolicyConfig {
        allow: strings(&["example.com"]),
        resolve: overrides(&[
            ("Example.COM.", "192.0.2.10"),
            ("example.com", "2001:db8::10"),
            ("example.com", "::ffff:192.0.2.10"),
            ("example.com", "192.0.2.11"),
        ]),
        ..on()
    });
    assert_eq!(
        decide(&p, "example.com", 8443),
        Ok(addrs(&[
            "192.0.2.10:8443",
            "[2001:db8::10]:8443",
            "192.0.2.11:8443"
        ]))
    );
}

#[test]
fn baseline_hosts_are_allowed_and_resolved_in_the_proxy() {
    let p = policy(PolicyConfig {
        resolve: overrides(&[
            ("api.anthropic.com", "192.0.2.1"),
            ("github.com", "192.0.2.2"),
            ("raw.githubusercontent.com", "192.0.2.3"),
            ("bedrock-runtime.us-east-1.amazonaws.com", "192.0.2.4"),
        ]),
        ..on()
    });
    assert_eq!(
        decide(&p, "API.Anthropic.COM.", 443),
        Ok(addrs(&["192.0.2.1:443"]))
    );
    assert_eq!(decide(&p, "github.com", 22), Ok(addrs(&["192.0.2.2:22"])));
    assert_eq!(
        decide(&p, "raw.githubusercontent.com", 443),
        Ok(addrs(&["192.0.2.3:443"]))
    );
    assert_eq!(
        decide(&p, "bedrock-runtime.us-east-1.amazonaws.com", 443),
        Ok(addrs(&["192.0.2.4:443"]))
    );
}

#[test]
fn resolution_failure_is_refused() {
    let p = policy(on());
    let r = refused(&p, "api.anthropic.com", 443);
    assert_eq!(
        (r.tag, r.target.as_str()),
        (tag::RESOLVE_FAILED, "api.anthropic.com:443")
    );
    assert!(
        r.rule.starts_with("could not resolve api.anthropic.com"),
        "{}",
        r.rule
    );
}

#[test]
fn not_on_the_allowlist() {
    let p = policy(PolicyConfig {
        resolve: overrides(&[("evil.example", "192.0.2.66")]),
        ..on()
    });
    for host in [
        "evil.example",
        "uploads.github.com",
        "upload.pypi.org",
        "storage.googleapis.com",
        "gist.githubusercontent.com",
        "bedrock.s3.amazonaws.com",
        "s3.amazonaws.com",
        "github.com.evil.example",
        "evilgithub.com",
        "localhost",
    ] {
        let r = refused(&p, host, 443);
        assert_eq!(
            (r.tag, r.rule.as_str()),
            (tag::ALLOWLIST, "not on the allowlist"),
            "{host}"
        );
    }
}

#[test]
fn explicit_ip_entries() {
    let p = policy(PolicyConfig {
        allow: strings(&[
            "192.0.2.10",
            "198.51.100.0/24",
            "[2001:db8::1]",
            "10.0.0.0/8",
            "127.1",
            "192.168.1.0/24",
        ]),
        allow_private: strings(&["127.1", "192.168.1.0/24"]),
        ..on()
    });
    assert_eq!(
        decide(&p, "192.0.2.10", 443),
        Ok(addrs(&["192.0.2.10:443"]))
    );
    assert_eq!(
        decide(&p, "3221225994", 443),
        Ok(addrs(&["192.0.2.10:443"]))
    );
    assert_eq!(
        decide(&p, "198.51.100.77", 443),
        Ok(addrs(&["198.51.100.77:443"]))
    );
    assert_eq!(
        decide(&p, "[2001:db8::1]", 443),
        Ok(addrs(&["[2001:db8::1]:443"]))
    );
    assert_eq!(
        decide(&p, "2001:db8::1", 443),
        Ok(addrs(&["[2001:db8::1]:443"]))
    );
    assert_eq!(decide(&p, "0x7f.1", 8080), Ok(addrs(&["127.0.0.1:8080"])));
    assert_eq!(
        decide(&p, "192.168.1.5", 80),
        Ok(addrs(&["192.168.1.5:80"]))
    );
    // Listed with plain allow, a private range still needs the opt-in.
    assert_eq!(refused(&p, "10.1.2.3", 443).tag, tag::NON_PUBLIC);
    assert_eq!(refused(&p, "127.0.0.2", 443).tag, tag::NON_PUBLIC);
    assert_eq!(refused(&p, "192.0.2.11", 443).tag, tag::ALLOWLIST);
}

#[test]
fn network_off_refuses_everything() {
    let p = policy(PolicyConfig {
        network_enabled: false,
        allow: strings(&["example.com", "192.0.2.10"]),
        resolve: overrides(&[("api.anthropic.com", "192.0.2.1")]),
        ..PolicyConfig::default()
    });
    assert!(!p.network_enabled());
    for (host, target) in [
        ("api.anthropic.com", "api.anthropic.com:443"),
        ("GitHub.com", "github.com:443"),
        ("example.com", "example.com:443"),
        ("192.0.2.10", "192.0.2.10:443"),
        ("metadata.google.internal", "metadata.google.internal:443"),
        ("bad\thost", "bad\\thost:443"),
    ] {
        let r = refused(&p, host, 443);
        assert_eq!(
            (r.tag, r.target.as_str()),
            (tag::NETWORK_DISABLED, target),
            "{host}"
        );
        assert_eq!(
            r.rule,
            "network off for this sandbox (networkEnabled: false)"
        );
    }
}

#[test]
fn every_ingress_gets_the_same_decision() {
    let p = policy(PolicyConfig {
        allow: strings(&["example.com"]),
        allow_private: strings(&["mirror.corp.example"]),
        resolve: overrides(&[
            ("example.com", "192.0.2.10"),
            ("mirror.corp.example", "10.0.0.5"),
            ("github.com", "127.0.0.1"),
        ]),
        ..on()
    });
    let targets = [
        "example.com",
        "mirror.corp.example",
        "github.com",
        "evil.example",
        "metadata.google.internal",
        "169.254.169.254",
        "0x7f.1",
        "[::ffff:127.0.0.1]",
        "::1",
        "140.82.112.3",
        "user@example.com",
        "api.anthropic.com",
    ];
    for host in targets {
        let first = block_on(p.decide(host, 443, ALL_INGRESS[0]));
        for ingress in ALL_INGRESS {
            assert_eq!(
                block_on(p.decide(host, 443, ingress)),
                first,
                "{host} via {ingress}"
            );
        }
    }
}

// --- Matching ---------------------------------------------------------------

#[test]
fn label_wise_matching() {
    let exact = name_pattern("Example.COM.");
    assert_eq!(&*exact.text, "example.com");
    assert!(exact.matches("example.com"));
    assert!(!exact.matches("a.example.com"));
    assert!(!exact.matches("xexample.com"));

    let deep = name_pattern("*.a.b.example.com");
    assert!(deep.matches("x.a.b.example.com"));
    assert!(deep.matches("y.x.a.b.example.com"));
    assert!(!deep.matches("a.b.example.com"));
    assert!(!deep.matches("xa.b.example.com"));

    let middle = name_pattern("api.*.example.com");
    assert!(middle.matches("api.eu.example.com"));
    assert!(!middle.matches("api.example.com"));
    assert!(!middle.matches("api.a.b.example.com"));
    assert!(!middle.matches("x.api.eu.example.com"));
    assert!(!middle.matches("api.eu.example.com.evil"));

    let idn = name_pattern("*.BÜCHER.example");
    assert_eq!(&*idn.text, "*.xn--bcher-kva.example");
    assert!(idn.matches(&canonical_name("shop.bücher.example")));
}

// --- Pattern validation -----------------------------------------------------

#[test]
fn pattern_validation_rejections() {
    let cases: &[(&str, &str)] = &[
        ("", "empty pattern"),
        ("*", "`*` alone would allow every host"),
        ("*.", "`*` alone would allow every host"),
        (
            "*.*.example.com",
            "has more than one `*`; a pattern has at most one wildcard",
        ),
        (
            "**.example.com",
            "has more than one `*`; a pattern has at most one wildcard",
        ),
        (
            "a*.example.com",
            "has `*` inside a label; `*` must be a whole label (`*.example.com`, `api.*.example.com`)",
        ),
        (
            "example.*",
            "has `*` as the last label; it may lead (`*.example.com`) or sit in the middle (`api.*.example.com`)",
        ),
        (
            "*.com",
            "puts `*` directly over the public suffix `com`: it would allow every domain anyone can register there",
        ),
        (
            "*.co.uk",
            "puts `*` directly over the public suffix `co.uk`: it would allow every domain anyone can register there",
        ),
        (
            "www.*.com",
            "puts `*` directly over the public suffix `com`: it would allow every domain anyone can register there",
        ),
        (
            "*.kawasaki.jp",
            "puts `*` directly over the public suffix `kawasaki.jp`: it would allow every domain anyone can register there",
        ),
        (
            "https://example.com",
            "is a URL; give the host alone, without scheme or path",
        ),
        (
            "example.com/path",
            "contains `/`, which only an address range may (`10.0.0.0/8`): not an IP address",
        ),
        (
            "example.com:443",
            "contains `:`, which only an IPv6 address may (ports are not part of a pattern)",
        ),
        (
            "127.0.0.1:80",
            "contains `:`, which only an IPv6 address may (ports are not part of a pattern)",
        ),
        ("a..example.com", "has an empty label"),
        (".example.com", "has an empty label"),
        ("example.com..", "has an empty label"),
        ("exa mple.com", "contains whitespace or a control character"),
        (
            "example.com\t",
            "contains whitespace or a control character",
        ),
        (
            "user@example.com",
            "contains `@` (userinfo); give the host alone",
        ),
        ("exa\\mple.com", "contains `\\`"),
        (
            "exa%2emple.com",
            "contains `%`; write the host name decoded",
        ),
        ("*.1.2.3", "is not a valid host name"),
        ("xn--zz.com", "is not a valid host name"),
        (
            "10.0.0.0/33",
            "contains `/`, which only an address range may (`10.0.0.0/8`): the prefix length is not a number within the address size",
        ),
        (
            "10.0.0.1/8",
            "contains `/`, which only an address range may (`10.0.0.0/8`): the range has host bits set (write the network address)",
        ),
    ];
    for (pattern, reason) in cases {
        assert_eq!(compile_error(pattern), *reason, "{pattern:?}");
    }
    let long_label = format!("{}.example.com", "a".repeat(64));
    assert!(compile_error(&long_label).starts_with("label `aaaa"));
    let e = Policy::new(PolicyConfig {
        allow_private: strings(&["*"]),
        ..on()
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "egress pattern `*`: `*` alone would allow every host"
    );
}

#[test]
fn resolver_override_validation() {
    let e = Policy::new(PolicyConfig {
        resolve: overrides(&[("127.0.0.1", "127.0.0.1")]),
        ..on()
    })
    .unwrap_err();
    assert_eq!(e.reason, "resolver override: an address needs no override");
    let e = Policy::new(PolicyConfig {
        resolve: overrides(&[("bad host", "127.0.0.1")]),
        ..on()
    })
    .unwrap_err();
    assert!(e.reason.starts_with("resolver override: "), "{}", e.reason);
}

#[test]
fn pattern_warnings() {
    let w = warnings_for(&["*.githubusercontent.com"], &[]);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with("egress pattern `*.githubusercontent.com`: `githubusercontent.com` is a public suffix run by a third party"), "{w:?}");
    for private_suffix in [
        "*.s3.amazonaws.com",
        "*.vercel.app",
        "*.pages.dev",
        "*.blob.core.windows.net",
    ] {
        assert_eq!(
            warnings_for(&[private_suffix], &[]).len(),
            1,
            "{private_suffix}"
        );
    }
    let w = warnings_for(&["*.internal"], &[]);
    assert_eq!(
        w,
        ["egress pattern `*.internal`: `*` over the whole top-level domain `internal`"]
    );
    let w = warnings_for(&["metadata.google.internal"], &[]);
    assert_eq!(w.len(), 1);
    assert!(
        w[0].contains("stays refused, fixed deny list: metadata.google.internal"),
        "{w:?}"
    );
    let w = warnings_for(&["10.0.0.5"], &[]);
    assert_eq!(
        w,
        [
            "egress pattern `10.0.0.5`: a non-public address; it stays refused unless given with --allow-private"
        ]
    );
    assert!(warnings_for(&[], &["10.0.0.5"]).is_empty());
    let w = warnings_for(&[], &["169.254.0.0/16"]);
    assert_eq!(w.len(), 1);
    assert!(
        w[0].contains("overlaps the fixed deny list 169.254.0.0/16"),
        "{w:?}"
    );
    // No warning for ordinary entries, nor for the shipped lists.
    assert!(
        warnings_for(
            &["*.example.com", "bedrock.*.amazonaws.com", "example.org"],
            &[]
        )
        .is_empty()
    );
    assert!(policy(on()).warnings().is_empty());
}

#[test]
fn nets() {
    let net = Net::parse("10.0.0.0/8").unwrap();
    assert!(net.contains("10.255.0.1".parse().unwrap()));
    assert!(!net.contains("11.0.0.1".parse().unwrap()));
    assert!(
        !net.contains("::ffff:10.0.0.1".parse().unwrap()),
        "callers canonicalise first"
    );
    assert_eq!(net.to_string(), "10.0.0.0/8");
    assert_eq!(
        Net::parse("[fd00:ec2::254]").unwrap().to_string(),
        "fd00:ec2::254"
    );
    assert_eq!(
        Net::parse("::ffff:10.0.0.0/104").unwrap().to_string(),
        "10.0.0.0/8"
    );
    assert!(
        Net::parse("0.0.0.0/0")
            .unwrap()
            .contains("192.0.2.1".parse().unwrap())
    );
    assert!(
        Net::parse("::/0")
            .unwrap()
            .contains("2001:db8::1".parse().unwrap())
    );
    assert!(Net::parse("10.0.0.0/x").is_err());
}

#[test]
fn non_public_ranges() {
    for ip in [
        "0.1.2.3",
        "10.0.0.1",
        "100.64.0.1",
        "100.127.255.255",
        "127.0.0.1",
        "169.254.1.1",
        "172.16.0.1",
        "172.31.255.255",
        "192.0.0.8",
        "192.168.0.1",
        "198.18.0.1",
        "198.19.255.255",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "::",
        "::1",
        "fc00::1",
        "fdff::1",
        "fe80::1",
        "febf::1",
        "ff02::1",
        "::ffff:10.0.0.1",
        "::10.0.0.1",
        "64:ff9b::a00:1",
    ] {
        assert!(is_non_public(ip.parse().unwrap()), "{ip}");
    }
    for ip in [
        "1.1.1.1",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.0.1.1",
        "192.0.2.1",
        "198.17.255.255",
        "198.20.0.0",
        "223.255.255.255",
        "2001:db8::1",
        "2606:4700::1111",
        "64:ff9b::808:808",
    ] {
        assert!(!is_non_public(ip.parse().unwrap()), "{ip}");
    }
}

// --- The shipped lists -----------------------------------------------------------

#[test]
fn shipped_lists_parse_and_every_entry_validates() {
    let lists = lists::shipped().unwrap();
    assert!(!lists.baseline.is_empty() && !lists.github.is_empty());
    assert!(!lists.deny_names.is_empty() && !lists.deny_ranges.is_empty());
    let mut seen = std::collections::HashSet::new();
    let mut warnings = Vec::new();
    for entry in lists
        .baseline
        .iter()
        .chain(&lists.github)
        .chain(&lists.deny_names)
    {
        assert!(
            seen.insert(entry.pattern.as_str()),
            "{} listed twice",
            entry.pattern
        );
        let compiled = compile(&entry.pattern, &mut warnings).unwrap();
        let Pattern::Name(p) = compiled else {
            panic!("{} is an address outside deny_ranges", entry.pattern);
        };
        assert_eq!(&*p.text, entry.pattern, "entries are written canonically");
    }
    for entry in &lists.deny_ranges {
        Net::parse(&entry.pattern).unwrap();
    }
    assert!(warnings.is_empty(), "{warnings:?}");
    for entry in lists
        .baseline
        .iter()
        .chain(&lists.github)
        .chain(&lists.deny_names)
        .chain(&lists.deny_ranges)
    {
        let why = entry.why.trim();
        assert!(!why.is_empty(), "{} has no why", entry.pattern);
        // Quoted in refusals, which go into HTTP headers.
        assert!(
            why.bytes().all(|b| (0x20..0x7f).contains(&b)),
            "{}: why is not printable ASCII",
            entry.pattern
        );
    }
}

#[test]
fn shipped_allow_lists_are_exact_and_not_denied() {
    let lists = lists::shipped().unwrap();
    let p = policy(on());
    for entry in lists.baseline.iter().chain(&lists.github) {
        assert!(
            !entry.pattern.contains('*'),
            "{}: baseline entries are exact",
            entry.pattern
        );
        assert!(
            p.shipped.deny.name(&entry.pattern).is_none(),
            "{} is allowed and denied",
            entry.pattern
        );
        assert_eq!(p.shipped.allow.name(&entry.pattern), Some(false));
    }
    for left_out in ["uploads.github.com", "upload.pypi.org"] {
        assert_eq!(p.shipped.allow.name(left_out), None, "{left_out}");
    }
}

#[test]
fn shipped_deny_ranges_cover_the_metadata_addresses() {
    let p = policy(on());
    for ip in [
        "169.254.169.254",
        "169.254.170.2",
        "169.254.170.23",
        "fd00:ec2::254",
        "fd00:ec2::23",
        "100.100.100.200",
        "168.63.129.16",
    ] {
        assert!(p.shipped.deny.ip(ip.parse().unwrap()).is_some(), "{ip}");
    }
    assert!(p.shipped.deny.ip("192.0.2.1".parse().unwrap()).is_none());
}

#[test]
fn shipped_lists_parse_from_text() {
    let parsed = lists::parse(lists::LISTS_TOML).unwrap();
    assert_eq!(&parsed, lists::shipped().unwrap());
    assert!(
        lists::parse("baseline = []\ngithub = []\ndeny_names = []\ndeny_ranges = []\nextra = 1")
            .is_err()
    );
}

/// D2: network open lets any name and public address through, and keeps
/// the fixed deny list and the non-public rule; a closed policy refuses
/// the same name as not on the allowlist.
#[test]
fn network_open_allows_anything_but_the_deny_list_and_non_public_addresses() {
    let resolve = overrides(&[
        ("anywhere.example", "93.184.216.34"),
        ("inside.example", "10.1.2.3"),
        ("opted.example", "127.0.0.1"),
        ("metadata.google.internal", "93.184.216.34"),
    ]);
    let open = policy(PolicyConfig {
        open: true,
        allow_private: strings(&["opted.example"]),
        resolve: resolve.clone(),
        ..on()
    });
    assert_eq!(
        decide(&open, "anywhere.example", 443).unwrap(),
        addrs(&["93.184.216.34:443"])
    );
    assert_eq!(
        decide(&open, "93.184.216.34", 80).unwrap(),
        addrs(&["93.184.216.34:80"])
    );
    assert_eq!(
        decide(&open, "opted.example", 80).unwrap(),
        addrs(&["127.0.0.1:80"])
    );
    assert_eq!(
        refused(&open, "metadata.google.internal", 80).tag,
        tag::DENYLIST
    );
    assert_eq!(refused(&open, "169.254.169.254", 80).tag, tag::DENYLIST);
    assert_eq!(refused(&open, "inside.example", 80).tag, tag::NON_PUBLIC);
    assert_eq!(refused(&open, "127.0.0.1", 80).tag, tag::NON_PUBLIC);
    assert_eq!(refused(&open, "192.168.1.1", 80).tag, tag::NON_PUBLIC);
    let closed = policy(PolicyConfig {
        allow_private: strings(&["opted.example"]),
        resolve,
        ..on()
    });
    assert_eq!(
        refused(&closed, "anywhere.example", 443).tag,
        tag::ALLOWLIST
    );
    assert_eq!(refused(&closed, "opted.example", 80).tag, tag::ALLOWLIST);
    let off = policy(PolicyConfig {
        network_enabled: false,
        open: true,
        ..PolicyConfig::default()
    });
    assert_eq!(
        refused(&off, "anywhere.example", 443).tag,
        tag::NETWORK_DISABLED
    );
}
