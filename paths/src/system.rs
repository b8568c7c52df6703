//! The host's system view: what every sandbox sees of the host, read-only.

/// Where git and libgit2 find their default template (sample hooks).
pub const SYSTEM_GIT_TEMPLATE: &str = "/usr/share/git-core/templates";

/// The system directories every sandbox sees, read-only.
pub const SYSTEM_VIEW: &[&str] = &["/usr", "/etc", "/opt", "/nix/store"];

/// Top-level directories that are symlinks into `/usr` on merged-usr systems,
/// and directories of their own elsewhere.
pub const SYSTEM_LINKS: &[&str] = &["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

/// Why a file of the server's credentials may not lie where it is: every
/// sandbox reads the system view, so a secret there is no secret.
pub fn credential_in_system_view(file: &std::path::Path) -> Option<String> {
    let top = SYSTEM_VIEW
        .iter()
        .chain(SYSTEM_LINKS)
        .find(|dir| file.starts_with(dir))?;
    Some(format!(
        "{} lies in `{top}`, which every sandbox reads: keep it outside the system view \
         (`/usr`, `/etc`, `/opt`), e.g. beside the server's state, mode 0600",
        file.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::credential_in_system_view;
    use std::path::Path;

    #[test]
    fn a_credential_in_the_system_view_is_named_and_one_beside_the_state_is_not() {
        let problem = credential_in_system_view(Path::new("/etc/cc_server/app.pem")).unwrap();
        assert!(
            problem.contains("`/etc`") && problem.contains("0600"),
            "{problem}"
        );
        assert!(credential_in_system_view(Path::new("/opt/forge/token")).is_some());
        assert!(credential_in_system_view(Path::new("/root/.config/cc_server/app.pem")).is_none());
        assert!(credential_in_system_view(Path::new("/etcetera/app.pem")).is_none());
    }
}
