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
    (".local/share/keyrings", "GNOME keyring"),
    (".pgpass", "PostgreSQL passwords"),
    (".my.cnf", "MySQL passwords"),
    (
        ".local/state/cc_server",
        "this server's API token: with it a command could drive the server",
    ),
    (".config/cc_server", "this server's configuration"),
];

/// The terminal's read-deny set (SPEC D2): the four the spec names that
/// exist off macOS (a macOS backend adds `~/Library/Keychains`), plus the
/// server's own token and configuration — with those a terminal could drive
/// the server that sandboxes it.
pub const TERMINAL_SECRETS: &[(&str, &str)] = &[
    (".ssh", "SSH private keys and known hosts"),
    (".aws", "AWS credentials and profiles"),
    (".gnupg", "GnuPG private keys"),
    (".config/gh", "the GitHub CLI's OAuth token"),
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
/// git hook on the next commit, an agent's config on its next start, a
/// tool's config that names a program to run (SPEC G5; code the host runs
/// later, docs/threat-model.md §4).
/// Git's other config files (a submodule's, a worktree's, a `.git` file)
/// sit deeper; backends find them in each repository (bwrap's plan) or
/// refuse what they cannot keep (microvm).
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
    (".mkshrc", "runs in every interactive mksh"),
    (".login", "runs at every csh and tcsh login"),
    (".logout", "runs at every csh and tcsh logout"),
    (".config/fish", "fish configuration runs in every fish"),
    (".inputrc", "readline key bindings can run commands"),
    (".xprofile", "runs at every graphical login"),
    (".xsessionrc", "runs at every X session start"),
    (".xinitrc", "runs at every startx"),
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
    (".codex", "Codex's config: MCP servers and notify commands"),
    (
        ".gemini",
        "Gemini CLI's settings: MCP servers and tool commands",
    ),
    (".cursor", "Cursor's MCP servers"),
    (".continue", "Continue's config: MCP servers"),
    (".roo", "Roo Code's MCP servers"),
    (".kilocode", "Kilo Code's MCP servers"),
    (".amazonq", "Amazon Q's MCP servers"),
    (
        ".zed",
        "Zed's project settings and tasks: context servers, commands",
    ),
    (
        ".aider.conf.yml",
        "aider's config: lint and test commands it runs",
    ),
    (
        "opencode.json",
        "opencode's config: MCP servers and commands",
    ),
    (".opencode", "opencode's agents, commands and plugins"),
    (".vscode", "editor tasks and settings that run commands"),
    (".idea", "IDE run configurations"),
];

/// Names kept read-only in `$HOME` only, when they exist: they run code
/// from the home (a `PATH` directory, the session's units, an editor's
/// startup), while a project's own `bin/` or `.vim/` is its business.
/// Their creation is refused by the `~/` globs of
/// [`crate::write_deny::DEFAULT_GLOBS`].
pub const HOME_WRITE_DENY: &[(&str, &str)] = &[
    (
        "bin",
        "on PATH at login (Debian's ~/.profile): shadows any command",
    ),
    (
        ".local/bin",
        "on PATH (systemd, ~/.profile): shadows any command",
    ),
    (".config/systemd/user", "systemd user units start at login"),
    (
        ".config/autostart",
        "XDG autostart entries run at graphical login",
    ),
    (
        ".config/environment.d",
        "systemd sets the session environment from it",
    ),
    (".config/direnv", "direnv's library runs with every .envrc"),
    (
        ".config/git/attributes",
        "names git filters and diff drivers",
    ),
    (
        ".docker",
        "docker runs its credential helpers and CLI plugins",
    ),
    (".vimrc", "vim runs it at start"),
    (".gvimrc", "gvim runs it at start"),
    (".vim", "vim's plugins run at start"),
    (".config/nvim", "neovim's init and plugins run at start"),
    (".emacs", "emacs runs it at start"),
    (".emacs.el", "emacs runs it at start"),
    (".emacs.d", "emacs's init and packages run at start"),
    (".config/emacs", "emacs's init (XDG) runs at start"),
    (".claude.json", "an agent's MCP servers and settings"),
];

#[cfg(test)]
mod tests {
    #[test]
    fn every_entry_is_relative_and_says_why() {
        for (path, why) in super::HOME_SECRETS
            .iter()
            .chain(super::MANDATORY_WRITE_DENY)
            .chain(super::HOME_WRITE_DENY)
            .chain(super::TERMINAL_SECRETS)
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

    /// SPEC C1's and D2's read-deny sets.
    #[test]
    fn the_seeds_read_deny_sets_are_covered() {
        for needed in [".ssh", ".aws", ".gnupg", ".config/gh"] {
            assert!(
                super::HOME_SECRETS.iter().any(|(p, _)| *p == needed),
                "{needed}"
            );
            assert!(
                super::TERMINAL_SECRETS.iter().any(|(p, _)| *p == needed),
                "{needed}"
            );
        }
        for (terminal, _) in super::TERMINAL_SECRETS {
            assert!(
                super::HOME_SECRETS.iter().any(|(p, _)| p == terminal),
                "{terminal}"
            );
        }
    }
}
