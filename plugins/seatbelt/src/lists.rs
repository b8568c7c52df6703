//! The paths and programs the macOS profile treats specially, each with the
//! reason.
//!
//! These mirror the shared lists (`sandbox_plugin_api::secrets`, which the
//! Linux backends use), with macOS additions marked "macOS"; they are kept
//! here because the golden profiles fix their order and wording. A test
//! below fails when a shared entry is missing here.

/// Secrets under `$HOME` no sandboxed command may read or write (SPEC C1).
pub const HOME_SECRETS: &[(&str, &str)] = &[
    (".ssh", "SSH private keys and known hosts"),
    (".aws", "AWS credentials and profiles"),
    (".gnupg", "GnuPG private keys"),
    (".config/gh", "the GitHub CLI's OAuth token"),
    (".config/hub", "the hub CLI's GitHub token"),
    (".netrc", "passwords for curl, git and ftp"),
    (".git-credentials", "git's stored HTTPS credentials"),
    (
        ".config/git/credentials",
        "git's stored HTTPS credentials (XDG location)",
    ),
    (".docker/config.json", "registry auth tokens"),
    (".kube", "Kubernetes cluster credentials"),
    (".npmrc", "npm registry tokens"),
    (".yarnrc.yml", "yarn registry tokens"),
    (".pypirc", "PyPI upload tokens"),
    (".cargo/credentials.toml", "crates.io publish token"),
    (".cargo/credentials", "crates.io publish token (old name)"),
    (".gem/credentials", "RubyGems API key"),
    (".m2/settings.xml", "Maven repository passwords"),
    (".m2/settings-security.xml", "Maven's master password"),
    (
        ".gradle/gradle.properties",
        "Gradle publishing and signing credentials",
    ),
    (".ivy2/.credentials", "sbt and Ivy repository credentials"),
    (
        ".config/composer/auth.json",
        "Composer (PHP) registry tokens",
    ),
    (
        ".composer/auth.json",
        "Composer registry tokens (old location)",
    ),
    (
        ".nuget/NuGet/NuGet.Config",
        "NuGet API keys and feed passwords",
    ),
    (
        ".config/pypoetry/auth.toml",
        "Poetry repository credentials (without a keyring)",
    ),
    (
        ".config/containers/auth.json",
        "Podman and Buildah registry auth",
    ),
    (".config/gcloud", "Google Cloud credentials"),
    (".azure", "Azure CLI tokens"),
    (".oci", "Oracle Cloud keys"),
    (".config/doctl", "DigitalOcean token"),
    (
        ".terraform.d/credentials.tfrc.json",
        "Terraform Cloud token",
    ),
    (".vault-token", "HashiCorp Vault token"),
    (".config/op", "1Password CLI session"),
    (".password-store", "pass password store"),
    (".pgpass", "PostgreSQL passwords"),
    (".my.cnf", "MySQL passwords"),
    (
        ".local/state/cc_server",
        "this server's API token: with it a command could drive the server",
    ),
    (".config/cc_server", "this server's configuration"),
    (
        "Library/Keychains",
        "macOS: the login and local-items keychains",
    ),
    (
        "Library/Cookies",
        "macOS: Safari and system HTTP cookies (logged-in web sessions)",
    ),
];

/// The terminal's read-deny set (SPEC D2): the five the spec names, plus the
/// server's own token and configuration — with those a terminal could drive
/// the server that sandboxes it.
pub const TERMINAL_SECRETS: &[(&str, &str)] = &[
    (".ssh", "SSH private keys and known hosts"),
    (".aws", "AWS credentials and profiles"),
    (".gnupg", "GnuPG private keys"),
    (".config/gh", "the GitHub CLI's OAuth token"),
    (
        "Library/Keychains",
        "macOS: the login and local-items keychains",
    ),
    (
        ".local/state/cc_server",
        "this server's API token: with it a command could drive the server",
    ),
    (".config/cc_server", "this server's configuration"),
];

/// System secrets (SPEC C1's "rest of the read-deny set"). Written as the
/// user would (`/etc/…`); the profile also carries the resolved spelling
/// (`/private/etc/…`).
pub const SYSTEM_SECRETS: &[(&str, &str)] = &[
    (
        "/etc/master.passwd",
        "macOS: password hashes (the BSD shadow file)",
    ),
    ("/etc/sudoers", "sudo rules"),
    ("/etc/sudoers.d", "sudo rules"),
    (
        "/var/db/dslocal/nodes/Default/users",
        "macOS: local accounts, with their password hashes",
    ),
    (
        "/Library/Keychains/System.keychain",
        "macOS: the system keychain (Wi-Fi passwords, certificates)",
    ),
];

/// System secrets named by a pattern: regexes written as constants (no
/// input reaches them), covering both spellings.
pub const SYSTEM_SECRET_PATTERNS: &[(&str, &str)] = &[(
    "^/(private/)?etc/ssh/ssh_host_[^/]*_key$",
    "SSH host private keys",
)];

/// Names kept read-only at the top of every writable root and of `$HOME`
/// (SPEC C1's mandatory denies). Writing them would run code later, outside
/// the sandbox: a shell rc file on the next login, a git hook on the next
/// commit, an agent's config on its next start, a launch agent at the next
/// login. The profile denies them whether they exist or not.
pub const MANDATORY_WRITE_DENY: &[(&str, &str)] = &[
    (".bashrc", "runs in every interactive bash"),
    (".bash_profile", "runs at every bash login"),
    (".bash_login", "runs at every bash login"),
    (".bash_logout", "runs at every bash logout"),
    (".profile", "runs at every login shell"),
    (
        ".zshrc",
        "runs in every interactive zsh (the macOS default shell)",
    ),
    (".zshenv", "runs in every zsh"),
    (".zprofile", "runs at every zsh login"),
    (".zlogin", "runs at every zsh login"),
    (".zlogout", "runs at every zsh logout"),
    (".cshrc", "runs in every csh"),
    (".tcshrc", "runs in every tcsh"),
    (".kshrc", "runs in every ksh"),
    (".mkshrc", "runs in every interactive mksh"),
    (".login", "runs at every csh and tcsh login"),
    (".logout", "runs at every csh and tcsh logout"),
    (".config/fish", "fish configuration runs in every fish"),
    (".inputrc", "readline key bindings can run commands"),
    (".xprofile", "runs at every graphical login (XQuartz)"),
    (".xsessionrc", "runs at every X session start"),
    (".xinitrc", "runs at every startx (XQuartz)"),
    (
        ".pam_environment",
        "sets the environment (PATH, LD_PRELOAD) of every login",
    ),
    (
        ".gitconfig",
        "git aliases, hooks path and fsmonitor run commands",
    ),
    (
        ".config/git/config",
        "git's XDG config: aliases, hooks path and fsmonitor run commands",
    ),
    (".gitmodules", "points git at other repositories"),
    (".git/hooks", "git runs these on commit, merge, checkout"),
    (
        ".git/config",
        "git aliases, hooks path, fsmonitor and filters run commands",
    ),
    (
        ".git/config.worktree",
        "per-worktree git config: hooks path and fsmonitor run commands",
    ),
    (".envrc", "direnv runs it on entering the directory"),
    (
        ".cargo/config.toml",
        "cargo runs its runner, rustc-wrapper and linker keys",
    ),
    (
        ".cargo/config",
        "cargo's config (old name): runners and wrappers",
    ),
    (".npmrc", "npm's script-shell and node-options run programs"),
    (".yarnrc", "yarn's yarn-path runs a program"),
    (".yarnrc.yml", "yarn's yarnPath runs a program"),
    (".exrc", "vim and neovim run it with 'exrc' set"),
    (".nvimrc", "neovim runs it with 'exrc' set"),
    (".nvim.lua", "neovim runs it with 'exrc' set"),
    (
        ".ripgreprc",
        "ripgrep options, including preprocessors that run commands",
    ),
    (".mcp.json", "MCP servers an agent starts"),
    (".claude", "an agent's settings, hooks and commands"),
    (".vscode", "editor tasks and settings that run commands"),
    (".idea", "IDE run configurations"),
    (
        "Library/LaunchAgents",
        "macOS: launchd starts these at login, outside any sandbox",
    ),
];

/// Names denied in `$HOME` only (`PATH` directories, units, editor startup
/// files): the shared list as it is, since every entry means the same on
/// macOS or is harmless there (`sandbox_plugin_api::secrets`).
pub use sandbox_plugin_api::secrets::HOME_WRITE_DENY;

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
    /// Every shared entry is here too (the GNOME keyring is Linux-only).
    #[test]
    fn the_shared_lists_are_all_here() {
        use sandbox_plugin_api::secrets;
        let has = |list: &[(&str, &str)], name: &str| list.iter().any(|(n, _)| *n == name);
        for (name, _) in secrets::HOME_SECRETS {
            if *name != ".local/share/keyrings" {
                assert!(has(super::HOME_SECRETS, name), "{name}");
            }
        }
        for (name, _) in secrets::MANDATORY_WRITE_DENY {
            assert!(has(super::MANDATORY_WRITE_DENY, name), "{name}");
        }
    }

    use super::*;

    #[test]
    fn every_entry_has_a_reason() {
        for (path, why) in HOME_SECRETS
            .iter()
            .chain(TERMINAL_SECRETS)
            .chain(MANDATORY_WRITE_DENY)
        {
            assert!(
                !path.starts_with('/') && !path.is_empty() && why.len() > 5,
                "{path}"
            );
        }
        for (path, why) in SYSTEM_SECRETS
            .iter()
            .chain(DANGEROUS_BINARIES)
            .chain(DEVICE_WRITES)
        {
            assert!(path.starts_with('/') && why.len() > 5, "{path}");
        }
        for (name, why) in LAUNCH_SERVICES {
            assert!(name.starts_with("com.apple.") && why.len() > 5, "{name}");
        }
    }

    #[test]
    fn the_seeds_sets_are_covered() {
        for needed in [".ssh", ".aws", ".gnupg", ".config/gh", "Library/Keychains"] {
            assert!(
                HOME_SECRETS.iter().any(|(p, _)| *p == needed),
                "C1 {needed}"
            );
            assert!(
                TERMINAL_SECRETS.iter().any(|(p, _)| *p == needed),
                "D2 {needed}"
            );
        }
        for needed in [".bashrc", ".zshrc", ".git/hooks", ".git/config", ".claude"] {
            assert!(
                MANDATORY_WRITE_DENY.iter().any(|(p, _)| *p == needed),
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
