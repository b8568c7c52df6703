//! The paths every sandbox treats specially, each with the reason.

/// Secrets under `$HOME`: one list for every backend (`sandbox_plugin_api::secrets`).
pub use sandbox_plugin_api::secrets::HOME_SECRETS;

/// System secrets and the host-key directory: one list for the backends and
/// the host's bind checks (`sandbox_plugin_api::secrets`).
pub use sandbox_plugin_api::secrets::{SSH_HOST_KEY_DIR, SYSTEM_SECRETS};

/// Names kept read-only in `$HOME` and every writable root (`sandbox_plugin_api::secrets`).
pub use sandbox_plugin_api::secrets::MANDATORY_WRITE_DENY;

/// Names kept read-only in `$HOME` only (`sandbox_plugin_api::secrets`).
pub use sandbox_plugin_api::secrets::HOME_WRITE_DENY;

/// Where git and libgit2 find their default template (sample hooks).
pub const SYSTEM_GIT_TEMPLATE: &str = "/usr/share/git-core/templates";

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
