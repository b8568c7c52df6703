//! Opening one directory's plugin files: trust, version gate, load, names.

use std::path::Path;
use std::sync::Arc;

use sandbox_plugin_api::API_VERSION;
use sandbox_plugin_api::host::{self, BackendObject, PluginLogger};

use crate::trust::{self, Distrust};
use crate::{Problem, Source, discovery};

/// Why a file or directory was skipped. One line; the path is printed by [`Problem`].
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The directory could not be listed.
    #[error("cannot list the plugins directory: {0}")]
    ListDir(String),
    /// The file or its directory could be written by someone else.
    #[error("refused before loading: {0}")]
    Untrusted(#[from] Distrust),
    /// The plugin was built for another plugin-api major (SPEC A2).
    #[error(
        "built for plugin-api {found}; this host ({ours}) accepts {accepted}: rebuild the plugin against plugin-api {accepted}"
    )]
    ApiVersion {
        /// The plugin's plugin-api version.
        found: String,
        /// Ours.
        ours: &'static str,
        /// What we accept.
        accepted: String,
    },
    /// The library could not become a plugin.
    #[error("{0}")]
    Load(host::LoadError),
    /// Another file already provides a backend of this name.
    #[error("duplicate backend `{name}`: already provided by {first}; this file is skipped")]
    Duplicate {
        /// The backend name.
        name: String,
        /// Where the first one came from.
        first: String,
    },
}

/// The plugin-api versions this host loads: the same major as ours (`^1`).
/// Build metadata (`1.2.0+dev`) is accepted; a pre-release (`1.2.0-dev`) is not.
pub fn accepted_api_versions() -> semver::VersionReq {
    let major = API_VERSION.split('.').next().unwrap_or("1");
    semver::VersionReq::parse(&format!("^{major}")).unwrap_or(semver::VersionReq::STAR)
}

fn check_api_version(found: &str) -> Result<(), LoadError> {
    let accepted = accepted_api_versions();
    let ok = semver::Version::parse(found).is_ok_and(|v| accepted.matches(&v));
    if ok {
        Ok(())
    } else {
        Err(LoadError::ApiVersion {
            found: found.to_owned(),
            ours: API_VERSION,
            accepted: accepted.to_string(),
        })
    }
}

pub(crate) fn load_dir(
    dir: &Path,
    logger: &Arc<dyn PluginLogger>,
    found: &mut Vec<(BackendObject, Source)>,
    problems: &mut Vec<Problem>,
    on_found: &mut dyn FnMut(&BackendObject),
) {
    if !dir.exists() {
        tracing::debug!(dir = %dir.display(), "plugins directory does not exist");
        return;
    }
    if let Err(e) = trust::check_dir(dir) {
        problems.push(Problem {
            path: dir.to_path_buf(),
            error: e.into(),
        });
        return;
    }
    let files = match discovery::plugin_files(dir) {
        Ok(files) => files,
        Err(e) => {
            problems.push(Problem {
                path: dir.to_path_buf(),
                error: LoadError::ListDir(e.to_string()),
            });
            return;
        }
    };
    for path in files {
        if let Err(error) = load_file(&path, logger, found, on_found) {
            if let LoadError::Load(host::LoadError::Layout { detail, .. }) = &error {
                tracing::trace!(file = %path.display(), "abi_stable layout report:\n{detail}");
            }
            problems.push(Problem { path, error });
        }
    }
}

fn load_file(
    path: &Path,
    logger: &Arc<dyn PluginLogger>,
    found: &mut Vec<(BackendObject, Source)>,
    on_found: &mut dyn FnMut(&BackendObject),
) -> Result<(), LoadError> {
    trust::check_file(path)?;
    let opened = host::open(path).map_err(LoadError::Load)?;
    check_api_version(&opened.api_version())?;
    let plugin = opened.load(Arc::clone(logger)).map_err(LoadError::Load)?;
    let mut duplicates = Vec::new();
    for backend in plugin.backends {
        if let Some((_, first)) = found.iter().find(|(b, _)| b.name() == backend.name()) {
            duplicates.push(LoadError::Duplicate {
                name: backend.name().to_owned(),
                first: first.to_string(),
            });
            continue;
        }
        tracing::debug!(backend = backend.name(), file = %path.display(), "loaded backend");
        on_found(&backend);
        found.push((
            backend,
            Source::File {
                path: path.to_path_buf(),
                plugin: plugin.name.clone(),
                version: plugin.version.clone(),
                api_version: plugin.api_version.clone(),
            },
        ));
    }
    match duplicates.into_iter().next() {
        Some(duplicate) => Err(duplicate),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_gate_accepts_our_major_only() {
        assert!(check_api_version(API_VERSION).is_ok());
        assert!(check_api_version("1.0.0").is_ok());
        assert!(
            check_api_version("1.7.3").is_ok(),
            "a newer minor of the same major loads"
        );
        assert!(
            check_api_version("1.2.0+dev").is_ok(),
            "build metadata is fine"
        );
        let err = check_api_version("2.0.0").unwrap_err().to_string();
        assert!(
            err.contains("plugin-api 2.0.0") && err.contains("^1"),
            "{err}"
        );
        assert!(check_api_version("0.9.0").is_err());
        assert!(
            check_api_version("1.2.0-dev").is_err(),
            "pre-releases are refused by ^1"
        );
        assert!(check_api_version("garbage").is_err());
    }

    #[test]
    fn non_libraries_are_one_line_problems() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(format!(
            "{}sandbox_backend_text{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ));
        std::fs::write(&file, "this is not a library\n").unwrap();
        let logger: Arc<dyn PluginLogger> = Arc::new(crate::TracingLogger);
        let (mut found, mut problems) = (Vec::new(), Vec::new());
        load_dir(dir.path(), &logger, &mut found, &mut problems, &mut |_| {});
        assert!(found.is_empty());
        assert_eq!(problems.len(), 1);
        let line = problems[0].to_string();
        assert!(line.starts_with(&file.display().to_string()), "{line}");
        assert!(line.contains("not a loadable library"), "{line}");
        assert_eq!(line.lines().count(), 1, "{line}");
    }
}
