//! Force pushes told apart by ancestry (SPEC H8) when the pushed pack
//! alone cannot tell ([`crate::pack`]): a bare mirror of each upstream
//! repository that the server owns, fetched from the upstream then; the
//! push's pack is indexed into it (`index-pack --fix-thin`, its bases from
//! the mirror) and `old` must be an ancestor of `new`. git runs only on the mirror, never on the
//! agent's clone, with no system or global config and no hooks.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The server's mirrors, one bare repository per upstream repository.
#[derive(Debug, Clone)]
pub struct Mirrors {
    pub dir: PathBuf,
}

fn git(dir: &Path) -> Command {
    let mut command = Command::new("git");
    command
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
        ]);
    command
}

fn run(command: &mut Command, what: &str) -> Result<std::process::Output, String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    Ok(out)
}

impl Mirrors {
    /// The mirror of `repository` (`owner/repo.git`), made when absent.
    fn mirror(&self, repository: &str) -> Result<PathBuf, String> {
        let name: String = repository
            .trim_matches('/')
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = self.dir.join(name);
        if !path.join("HEAD").exists() {
            let out = run(
                git(Path::new("/"))
                    .args(["init", "-q", "--bare"])
                    .arg(&path),
                "making the mirror",
            )?;
            if !out.status.success() {
                return Err(format!(
                    "making the mirror {}: {}",
                    path.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        Ok(path)
    }

    /// Which of `updates` (old, new) the mirror proves fast-forwards as it
    /// is, without a fetch (both commits there from an earlier fetch, `old`
    /// an ancestor of `new`: ancestry never changes). Anything else — a
    /// commit missing, not an ancestor — is asked again after a fetch.
    /// Blocking.
    pub fn proven(&self, repository: &str, updates: &[(String, String)]) -> Vec<bool> {
        let Ok(mirror) = self.mirror(repository) else {
            return vec![false; updates.len()];
        };
        updates
            .iter()
            .map(|(old, new)| {
                run(
                    git(&mirror).args(["merge-base", "--is-ancestor", old, new]),
                    "the ancestry check",
                )
                .is_ok_and(|out| out.status.code() == Some(0))
            })
            .collect()
    }

    /// Which of `updates` (old, new) are not fast-forwards: the mirror is
    /// fetched from `url` (with `authorization`, trusting `ca_file`), the
    /// `pack` (read from its position) indexed into it, and each `old` asked to be an ancestor of
    /// its `new`. Blocking: run it off the async threads.
    pub fn forced(
        &self,
        repository: &str,
        fetch: (&str, Option<&str>, Option<&Path>),
        pack: Option<Stdio>,
        updates: &[(String, String)],
    ) -> Result<Vec<bool>, String> {
        let (url, authorization, ca_file) = fetch;
        let mirror = self.mirror(repository)?;
        let mut fetching = git(&mirror);
        if let Some(auth) = authorization {
            fetching.args(["-c", &format!("http.extraHeader=Authorization: {auth}")]);
        }
        if let Some(ca) = ca_file {
            fetching.env("GIT_SSL_CAINFO", ca);
        }
        fetching.args([
            "fetch",
            "-q",
            "--no-tags",
            url,
            "+refs/heads/*:refs/heads/*",
            "+refs/tags/*:refs/tags/*",
        ]);
        let out = run(&mut fetching, "fetching the mirror")?;
        if !out.status.success() {
            return Err(format!(
                "fetching the mirror of {repository}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        if let Some(pack) = pack {
            let out = git(&mirror)
                .args(["index-pack", "--stdin", "--fix-thin"])
                .stdin(pack)
                .stdout(Stdio::null())
                .output()
                .map_err(|e| format!("indexing the push: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "indexing the push: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        let mut forced = Vec::with_capacity(updates.len());
        for (old, new) in updates {
            let out = run(
                git(&mirror).args(["merge-base", "--is-ancestor", old, new]),
                "the ancestry check",
            )?;
            forced.push(match out.status.code() {
                Some(0) => false,
                Some(1) => true,
                _ => {
                    return Err(format!(
                        "the ancestry check of {old}..{new}: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
            });
        }
        Ok(forced)
    }
}
