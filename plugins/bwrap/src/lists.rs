//! The paths every sandbox treats specially, each with the reason.

/// Secrets under `$HOME` no sandboxed command may read (SPEC C1, D2): they
/// are masked wherever a bind makes them visible.
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
/// these; they are masked whatever the uid.
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

/// Directory whose `ssh_host_*_key` files (host private keys) are masked.
pub const SSH_HOST_KEY_DIR: &str = "/etc/ssh";

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
    (".cshrc", "runs in every csh"),
    (".tcshrc", "runs in every tcsh"),
    (".kshrc", "runs in every ksh"),
    (".config/fish", "fish configuration runs in every fish"),
    (".inputrc", "readline key bindings can run commands"),
    (
        ".gitconfig",
        "git aliases, hooks path and fsmonitor run commands",
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

/// The system directories every sandbox sees, read-only.
pub const SYSTEM_VIEW: &[&str] = &["/usr", "/etc", "/opt", "/nix/store"];

/// Top-level directories that are symlinks into `/usr` on merged-usr systems,
/// and directories of their own elsewhere.
pub const SYSTEM_LINKS: &[&str] = &["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_has_a_reason_and_a_relative_or_absolute_path() {
        for (path, why) in HOME_SECRETS.iter().chain(MANDATORY_WRITE_DENY) {
            assert!(
                !path.starts_with('/') && !path.is_empty() && why.len() > 5,
                "{path}"
            );
        }
        for (path, why) in SYSTEM_SECRETS {
            assert!(path.starts_with('/') && why.len() > 5, "{path}");
        }
    }

    #[test]
    fn the_seeds_read_deny_set_is_covered() {
        for needed in [".ssh", ".aws", ".gnupg", ".config/gh"] {
            assert!(HOME_SECRETS.iter().any(|(p, _)| *p == needed), "{needed}");
        }
    }
}
