//! The paths every sandbox treats specially, each with the reason.

/// Secrets under `$HOME`: one list for every backend (`sandbox_plugin_api::secrets`).
pub use sandbox_plugin_api::secrets::HOME_SECRETS;

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

/// Names kept read-only in `$HOME` and every writable root (`sandbox_plugin_api::secrets`).
pub use sandbox_plugin_api::secrets::MANDATORY_WRITE_DENY;

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
