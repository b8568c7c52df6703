//! What no sandboxed command may read, and what it may not write even in a
//! writable bind: one definition for every backend that masks, protects or
//! refuses (SPEC C1, D2).

/// Secrets under `$HOME` no sandboxed command may read (SPEC C1, D2): a backend
/// masks them wherever a bind makes them visible, or refuses the bind.
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
    (".local/share/keyrings", "GNOME keyring"),
    (".pgpass", "PostgreSQL passwords"),
    (".my.cnf", "MySQL passwords"),
    (
        ".local/state/cc_server",
        "this server's API token: with it a command could drive the server",
    ),
    (".config/cc_server", "this server's configuration"),
];

/// System secrets (SPEC C1's "rest of the read-deny set"). Sandboxed commands
/// run as the server's uid, so a server run as root would let them read
/// these: a backend masks them whatever the uid, and the host refuses a bind
/// at or below one.
pub const SYSTEM_SECRETS: &[(&str, &str)] = &[
    ("/etc/shadow", "password hashes"),
    ("/etc/shadow-", "password hashes (backup)"),
    ("/etc/gshadow", "group password hashes"),
    ("/etc/gshadow-", "group password hashes (backup)"),
    ("/etc/sudoers", "sudo rules"),
    ("/etc/sudoers.d", "sudo rules"),
    ("/etc/security/opasswd", "old password hashes"),
    ("/etc/ssl/private", "TLS private keys"),
];

/// Directory whose `ssh_host_*_key` files (host private keys) are secrets.
pub const SSH_HOST_KEY_DIR: &str = "/etc/ssh";

/// Whether a file name in [`SSH_HOST_KEY_DIR`] is a host private key.
pub fn is_ssh_host_key(name: &str) -> bool {
    name.starts_with("ssh_host_") && name.ends_with("_key")
}

/// Names kept read-only in `$HOME` and at the top of every writable root
/// (SPEC C1's mandatory denies), when they exist. Writing them would run
/// code later, outside the sandbox: a shell rc file on the next login, a
/// git hook on the next commit, an agent's config on its next start.
pub const MANDATORY_WRITE_DENY: &[(&str, &str)] = &[
    (".bashrc", "runs in every interactive bash"),
    (".bash_profile", "runs at every bash login"),
    (".bash_login", "runs at every bash login"),
    (".bash_logout", "runs at every bash logout"),
    (".profile", "runs at every login shell"),
    (".zshrc", "runs in every interactive zsh"),
    (".zshenv", "runs in every zsh"),
    (".zprofile", "runs at every zsh login"),
    (".zlogin", "runs at every zsh login"),
    (".zlogout", "runs at every zsh logout"),
    (".cshrc", "runs in every csh"),
    (".tcshrc", "runs in every tcsh"),
    (".kshrc", "runs in every ksh"),
    (".config/fish", "fish configuration runs in every fish"),
    (".inputrc", "readline key bindings can run commands"),
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
        ".ripgreprc",
        "ripgrep options, including preprocessors that run commands",
    ),
    (".mcp.json", "MCP servers an agent starts"),
    (".claude", "an agent's settings, hooks and commands"),
    (".vscode", "editor tasks and settings that run commands"),
    (".idea", "IDE run configurations"),
];

#[cfg(test)]
mod tests {
    #[test]
    fn every_entry_is_relative_and_says_why() {
        for (path, why) in super::HOME_SECRETS
            .iter()
            .chain(super::MANDATORY_WRITE_DENY)
        {
            assert!(
                !path.starts_with('/') && !path.is_empty() && why.len() > 5,
                "{path}"
            );
        }
        for (path, why) in super::SYSTEM_SECRETS {
            assert!(path.starts_with('/') && why.len() > 5, "{path}");
        }
        assert!(super::is_ssh_host_key("ssh_host_ed25519_key"));
        assert!(!super::is_ssh_host_key("ssh_host_ed25519_key.pub"));
    }
}
