//! The paths and programs the macOS profile treats specially, each with the
//! reason.
//!
//! The path lists are the shared ones (`sandbox_paths::secrets`, which the
//! Linux backends and the host use) with the macOS entries added here, each
//! marked "macOS"; the programs, services and devices are macOS's alone.

use sandbox_paths::secrets;

/// Secrets under `$HOME` only macOS has (SPEC C1: `~/Library/Keychains`).
pub const MACOS_HOME_SECRETS: &[(&str, &str)] = &[
    (
        "Library/Keychains",
        "macOS: the login and local-items keychains",
    ),
    (
        "Library/Cookies",
        "macOS: Safari and system HTTP cookies (logged-in web sessions)",
    ),
];

/// Secrets under `$HOME` no sandboxed command may read or write (SPEC C1):
/// the shared list, then macOS's.
pub fn home_secrets() -> Vec<(&'static str, &'static str)> {
    secrets::HOME_SECRETS
        .iter()
        .chain(MACOS_HOME_SECRETS)
        .copied()
        .collect()
}

/// The terminal's read-deny set (SPEC D2): the shared one, then the login
/// keychain.
pub fn terminal_secrets() -> Vec<(&'static str, &'static str)> {
    secrets::TERMINAL_SECRETS
        .iter()
        .chain(&MACOS_HOME_SECRETS[..1])
        .copied()
        .collect()
}

/// System secrets only macOS has. Written as the user would (`/etc/…`);
/// the profile also carries the resolved spelling (`/private/etc/…`).
pub const MACOS_SYSTEM_SECRETS: &[(&str, &str)] = &[
    (
        "/etc/master.passwd",
        "macOS: password hashes (the BSD shadow file)",
    ),
    (
        "/var/db/dslocal/nodes/Default/users",
        "macOS: local accounts, with their password hashes",
    ),
    (
        "/Library/Keychains/System.keychain",
        "macOS: the system keychain (Wi-Fi passwords, certificates)",
    ),
];

/// System secrets (SPEC C1's "rest of the read-deny set"): the shared list,
/// then macOS's.
pub fn system_secrets() -> Vec<(&'static str, &'static str)> {
    secrets::SYSTEM_SECRETS
        .iter()
        .chain(MACOS_SYSTEM_SECRETS)
        .copied()
        .collect()
}

/// System secrets named by a pattern: regexes written as constants (no
/// input reaches them), covering both spellings.
pub const SYSTEM_SECRET_PATTERNS: &[(&str, &str)] = &[(
    "^/(private/)?etc/ssh/ssh_host_[^/]*_key$",
    "SSH host private keys",
)];

/// Names kept read-only at the top of every writable root and of `$HOME`
/// only macOS has.
pub const MACOS_MANDATORY_WRITE_DENY: &[(&str, &str)] = &[(
    "Library/LaunchAgents",
    "macOS: launchd starts these at login, outside any sandbox",
)];

/// Names kept read-only at the top of every writable root and of `$HOME`
/// (SPEC C1's mandatory denies): the shared list, then macOS's. The profile
/// denies them whether they exist or not.
pub fn mandatory_write_deny() -> Vec<(&'static str, &'static str)> {
    secrets::MANDATORY_WRITE_DENY
        .iter()
        .chain(MACOS_MANDATORY_WRITE_DENY)
        .copied()
        .collect()
}

/// Names denied in `$HOME` only (`PATH` directories, units, editor startup
/// files): the shared list as it is, since every entry means the same on
/// macOS or is harmless there.
pub use sandbox_paths::secrets::HOME_WRITE_DENY;

/// Programs no sandboxed command may start, whatever its grants. Most of
/// them ask a system service to act *outside* the sandbox; the profile also
/// denies those services directly (Apple Events, LaunchServices), so these
/// are defence in depth against the common spelling of an escape.
pub const DANGEROUS_BINARIES: &[(&str, &str)] = &[
    (
        "/usr/bin/osascript",
        "sends Apple Events: scripts Terminal or Finder, which run unsandboxed",
    ),
    (
        "/usr/bin/osacompile",
        "builds AppleScript applets that run unsandboxed when opened",
    ),
    (
        "/usr/bin/open",
        "asks LaunchServices to start an app outside the sandbox (`open -a Terminal`)",
    ),
    (
        "/usr/bin/automator",
        "runs Automator workflows, which send Apple Events",
    ),
    (
        "/usr/bin/shortcuts",
        "runs Shortcuts, which act outside the sandbox",
    ),
    (
        "/bin/launchctl",
        "loads and starts launchd jobs, which run outside the sandbox",
    ),
    (
        "/usr/bin/crontab",
        "schedules commands that cron runs outside the sandbox",
    ),
    (
        "/usr/bin/at",
        "schedules a command that atrun runs outside the sandbox",
    ),
    (
        "/usr/bin/batch",
        "schedules a command that atrun runs outside the sandbox",
    ),
    ("/usr/bin/sudo", "privilege escalation"),
    ("/usr/bin/su", "privilege escalation"),
    ("/usr/bin/login", "starts a session as another user"),
    ("/usr/sbin/installer", "installs packages system-wide"),
    (
        "/usr/bin/security",
        "reads keychain items through securityd, around the file read denies",
    ),
    ("/usr/bin/tccutil", "resets privacy (TCC) permissions"),
    ("/usr/sbin/systemsetup", "changes system settings"),
    ("/usr/sbin/spctl", "changes Gatekeeper policy"),
    ("/usr/sbin/diskutil", "erases and repartitions disks"),
    ("/usr/bin/dscl", "edits local users and groups"),
];

/// Mach services behind LaunchServices and Apple Events. With them a
/// sandboxed process can have an app started (`open -a Terminal`), or
/// scripted, outside the sandbox — a complete escape (docs/research/srt.md).
pub const LAUNCH_SERVICES: &[(&str, &str)] = &[
    (
        "com.apple.coreservices.launchservicesd",
        "LaunchServices: opens apps and documents",
    ),
    (
        "com.apple.coreservices.appleevents",
        "the Apple Event server: scripts other apps",
    ),
    (
        "com.apple.CoreServices.coreservicesd",
        "core services daemon behind LaunchServices",
    ),
];

/// The same, by pattern (the `com.apple.lsd.*` family: `mapdb`, `modifydb`,
/// `open`, …).
pub const LAUNCH_SERVICES_PATTERN: &str = "^com\\.apple\\.lsd\\.";

/// Device files every command may write even though writes are reset to
/// deny: shells redirect to them all the time.
pub const DEVICE_WRITES: &[(&str, &str)] = &[
    ("/dev/null", "the bit bucket"),
    ("/dev/zero", "dd and friends"),
    ("/dev/tty", "the controlling terminal (prompts, less, ssh)"),
    ("/dev/stdout", "a name for fd 1"),
    ("/dev/stderr", "a name for fd 2"),
    (
        "/dev/dtracehelper",
        "dyld registers DTrace probes at every start",
    ),
];

/// Device files by pattern (constants).
pub const DEVICE_WRITE_PATTERNS: &[(&str, &str)] = &[
    ("^/dev/fd/[0-9]+$", "inherited descriptors by name"),
    ("^/dev/ttys[0-9]+$", "pseudo-terminals"),
];

/// The system resolver's socket: the one unix socket a command may reach,
/// for DNS, when the network is on.
pub const DNS_SOCKET: &str = "/var/run/mDNSResponder";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_has_a_reason() {
        for (path, why) in home_secrets()
            .iter()
            .chain(&terminal_secrets())
            .chain(&mandatory_write_deny())
        {
            assert!(
                !path.starts_with('/') && !path.is_empty() && why.len() > 5,
                "{path}"
            );
        }
        for (path, why) in system_secrets()
            .iter()
            .chain(DANGEROUS_BINARIES)
            .chain(DEVICE_WRITES)
        {
            assert!(path.starts_with('/') && why.len() > 5, "{path}");
        }
        for (path, why) in MACOS_HOME_SECRETS
            .iter()
            .chain(MACOS_SYSTEM_SECRETS)
            .chain(MACOS_MANDATORY_WRITE_DENY)
        {
            assert!(why.starts_with("macOS: "), "{path}: mark it macOS");
        }
        for (name, why) in LAUNCH_SERVICES {
            assert!(name.starts_with("com.apple.") && why.len() > 5, "{name}");
        }
    }

    #[test]
    fn the_seeds_sets_are_covered() {
        for needed in [".ssh", ".aws", ".gnupg", ".config/gh", "Library/Keychains"] {
            assert!(
                home_secrets().iter().any(|(p, _)| *p == needed),
                "C1 {needed}"
            );
            assert!(
                terminal_secrets().iter().any(|(p, _)| *p == needed),
                "D2 {needed}"
            );
        }
        for needed in [".bashrc", ".zshrc", ".git/hooks", ".git/config", ".claude"] {
            assert!(
                mandatory_write_deny().iter().any(|(p, _)| *p == needed),
                "{needed}"
            );
        }
        for needed in [
            "/usr/bin/osascript",
            "/usr/bin/open",
            "/usr/sbin/installer",
            "/usr/bin/sudo",
            "/bin/launchctl",
        ] {
            assert!(
                DANGEROUS_BINARIES.iter().any(|(p, _)| *p == needed),
                "{needed}"
            );
        }
    }
}
