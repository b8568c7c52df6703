//! Where plugin libraries are looked for, and which files count (SPEC A1).

use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::path::{Path, PathBuf};

/// Only files whose stem starts with this are considered, so helper libraries
/// in the same directory are never dlopened by accident.
pub const STEM_PREFIX: &str = "sandbox_backend_";

/// The environment variable holding extra plugin directories, `PATH`-style.
pub const PLUGIN_PATH_ENV: &str = "CC_SERVER_PLUGIN_PATH";

/// The directories to search, in order: the configured directory, then the
/// entries of `CC_SERVER_PLUGIN_PATH`. When neither is given, the directory of
/// the executable and its `plugins/` subdirectory.
///
/// The executable's directory is a fallback rather than a third source so
/// that a configured directory is exactly what gets loaded: an operator who
/// points the server at a directory should not also get whatever lies next
/// to the binary.
pub fn search_path(
    configured: Option<&Path>,
    env_value: Option<&std::ffi::OsStr>,
    exe_dir: Option<&Path>,
) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = configured.map(Path::to_path_buf).into_iter().collect();
    if let Some(value) = env_value {
        dirs.extend(std::env::split_paths(value).filter(|p| !p.as_os_str().is_empty()));
    }
    if dirs.is_empty()
        && let Some(exe_dir) = exe_dir
    {
        dirs.push(exe_dir.to_path_buf());
        dirs.push(exe_dir.join("plugins"));
    }
    let mut unique = Vec::new();
    for dir in dirs {
        if !unique.contains(&dir) {
            unique.push(dir);
        }
    }
    unique
}

/// Whether a file name is a backend library on this platform
/// (`libsandbox_backend_<name>.so`, `.dylib`, or `sandbox_backend_<name>.dll`).
pub fn is_plugin_file_name(name: &str) -> bool {
    name.strip_prefix(DLL_PREFIX)
        .and_then(|rest| rest.strip_suffix(DLL_SUFFIX))
        .is_some_and(|stem| stem.len() > STEM_PREFIX.len() && stem.starts_with(STEM_PREFIX))
}

/// The plugin files directly in `dir` (no recursion), sorted by name.
pub fn plugin_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_str().is_some_and(is_plugin_file_name))
        .map(|entry| entry.path())
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_platform_named_backend_files_count() {
        let good = format!("{DLL_PREFIX}sandbox_backend_bwrap{DLL_SUFFIX}");
        assert!(is_plugin_file_name(&good));
        for bad in [
            format!("{DLL_PREFIX}sandbox_backend_{DLL_SUFFIX}"),
            format!("{DLL_PREFIX}other{DLL_SUFFIX}"),
            format!("{DLL_PREFIX}sandbox_backend_bwrap.rlib"),
            format!("{DLL_PREFIX}sandbox_backend_bwrap.d"),
            "sandbox_backend_bwrap".to_owned(),
        ] {
            assert!(!is_plugin_file_name(&bad), "{bad}");
        }
    }

    #[test]
    fn configured_then_env_and_exe_dir_only_as_fallback() {
        let env = std::env::join_paths(["/b", "", "/c"]).unwrap();
        assert_eq!(
            search_path(Some(Path::new("/a")), Some(&env), Some(Path::new("/exe"))),
            vec![PathBuf::from("/a"), "/b".into(), "/c".into()]
        );
        assert_eq!(
            search_path(None, None, Some(Path::new("/exe"))),
            vec![PathBuf::from("/exe"), "/exe/plugins".into()]
        );
        assert_eq!(
            search_path(
                Some(Path::new("/a")),
                Some(std::ffi::OsStr::new("/a")),
                None
            ),
            vec![PathBuf::from("/a")],
            "a directory named twice is searched once"
        );
    }

    #[test]
    fn listing_is_sorted_and_flat() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["zeta", "alpha", "mid"] {
            std::fs::write(
                dir.path()
                    .join(format!("{DLL_PREFIX}sandbox_backend_{name}{DLL_SUFFIX}")),
                "",
            )
            .unwrap();
        }
        std::fs::write(dir.path().join("README"), "").unwrap();
        let nested = dir.path().join("nested");
        std::fs::create_dir(&nested).unwrap();
        std::fs::write(
            nested.join(format!("{DLL_PREFIX}sandbox_backend_deep{DLL_SUFFIX}")),
            "",
        )
        .unwrap();
        let names: Vec<String> = plugin_files(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        let want: Vec<String> = ["alpha", "mid", "zeta"]
            .iter()
            .map(|n| format!("{DLL_PREFIX}sandbox_backend_{n}{DLL_SUFFIX}"))
            .collect();
        assert_eq!(names, want);
    }
}
