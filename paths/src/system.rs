//! The host's system view: what every sandbox sees of the host, read-only.

/// Where git and libgit2 find their default template (sample hooks).
pub const SYSTEM_GIT_TEMPLATE: &str = "/usr/share/git-core/templates";

/// The system directories every sandbox sees, read-only.
pub const SYSTEM_VIEW: &[&str] = &["/usr", "/etc", "/opt", "/nix/store"];

/// Top-level directories that are symlinks into `/usr` on merged-usr systems,
/// and directories of their own elsewhere.
pub const SYSTEM_LINKS: &[&str] = &["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];
