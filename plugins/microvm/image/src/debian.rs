//! The only code that talks to the host's package tools: `apt-cache` to
//! resolve names and versions, `apt-get download` to fetch a `.deb` (apt
//! checks it against the signed archive index), `dpkg-deb -x` to unpack.
//! Nothing here installs anything; everything lands in the cache dir.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::manifest::{ManifestError, sha256_file, sha256_hex};

/// Why a package could not be resolved, fetched or unpacked. The host tools'
/// failures carry the last lines of their stderr.
#[derive(Debug, thiserror::Error)]
pub enum DebianError {
    /// The tool is not installed (the OS error adds nothing to that).
    #[error(
        "{tool} not found: this builder needs a Debian/Ubuntu host with apt, dpkg and xz-utils"
    )]
    ToolMissing { tool: String },
    #[error("running {tool}")]
    Run {
        tool: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "apt-cache depends {meta} found no dependency ({stderr}): the package lists are missing or stale; \
         run `apt-get update`"
    )]
    NoDependency { meta: String, stderr: String },
    #[error(
        "apt-cache show {package} found no candidate ({stderr}): the package lists are missing or stale; \
         run `apt-get update`"
    )]
    NoCandidate { package: String, stderr: String },
    #[error(transparent)]
    Hash(#[from] ManifestError),
    #[error("{}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "apt-get download {spec} failed: {stderr}; if the package lists are missing or stale, \
         run `apt-get update`"
    )]
    Download { spec: String, stderr: String },
    #[error("apt-get download {spec} succeeded but left no .deb")]
    NoDeb { spec: String },
    #[error("{}: sha256 differs from apt's index; run `apt-get update` and retry", .deb.display())]
    Checksum { deb: PathBuf },
    #[error("dpkg-deb -x {} failed: {stderr}", .deb.display())]
    Extract { deb: PathBuf, stderr: String },
    #[error("xz not found: install xz-utils (this builder needs a Debian/Ubuntu host)")]
    XzMissing,
    #[error("xz: no stdin")]
    XzNoStdin,
    #[error("xz")]
    XzWait(#[source] std::io::Error),
    #[error("xz --decompress failed: {stderr}")]
    Xz { stderr: String },
}

/// An I/O error on `path`.
fn io_at(path: &Path) -> impl Fn(std::io::Error) -> DebianError + '_ {
    move |source| DebianError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A package as apt's index describes its candidate version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Package name.
    pub package: String,
    /// Debian version (may carry an epoch, `1:…`).
    pub version: String,
    /// sha256 of the `.deb` as the signed index states it.
    pub sha256: String,
    /// Basename of the archive's file name (no epoch), used in the cache.
    pub file: String,
}

/// Runs a host tool, turning "not installed" into an error that says what
/// the builder needs.
fn run(cmd: &mut Command) -> Result<Output, DebianError> {
    let tool = cmd.get_program().to_string_lossy().into_owned();
    cmd.output().map_err(|source| {
        if source.kind() == ErrorKind::NotFound {
            DebianError::ToolMissing { tool }
        } else {
            DebianError::Run { tool, source }
        }
    })
}

fn stderr_tail(out: &Output) -> String {
    let s = String::from_utf8_lossy(&out.stderr);
    let s = s.trim();
    let tail: Vec<&str> = s.lines().rev().take(4).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// The package a metapackage depends on first, e.g. `linux-image-amd64`
/// → `linux-image-6.1.0-57-amd64`.
pub fn resolve_meta(meta: &str) -> Result<String, DebianError> {
    let out = run(Command::new("apt-cache").args(["depends", meta]))?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_first_depends(&text).ok_or_else(|| DebianError::NoDependency {
        meta: meta.to_string(),
        stderr: stderr_tail(&out),
    })
}

/// The first `Depends:` target of `apt-cache depends` output.
pub fn parse_first_depends(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| {
            l.trim_start()
                .trim_start_matches('|')
                .strip_prefix("Depends:")
        })
        .map(|p| p.trim().to_string())
        .find(|p| !p.is_empty() && !p.starts_with('<'))
}

/// The candidate version of `package` from apt's index.
pub fn candidate(package: &str) -> Result<Candidate, DebianError> {
    let out = run(Command::new("apt-cache").args(["show", "--no-all-versions", package]))?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_show(&text).ok_or_else(|| DebianError::NoCandidate {
        package: package.to_string(),
        stderr: stderr_tail(&out),
    })
}

/// The first stanza of `apt-cache show` output.
pub fn parse_show(text: &str) -> Option<Candidate> {
    let stanza = text.split("\n\n").next()?;
    let field = |name: &str| {
        stanza
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    };
    let filename = field("Filename")?;
    Some(Candidate {
        package: field("Package")?,
        version: field("Version")?,
        sha256: field("SHA256")?.to_ascii_lowercase(),
        file: filename.rsplit('/').next()?.to_string(),
    })
}

/// `cache/<file>.deb`, downloaded unless already there with the index's
/// sha256. Downloads into a private temp dir first, so a failed or
/// concurrent download never leaves a partial `.deb` under the final name.
pub fn fetch(c: &Candidate, cache: &Path, log: &dyn Fn(&str)) -> Result<PathBuf, DebianError> {
    let dest = cache.join(&c.file);
    if dest.is_file() && sha256_file(&dest)?.0 == c.sha256 {
        log(&format!("using cached {}", dest.display()));
        return Ok(dest);
    }
    let tmp = cache.join(format!(".download-{}-{}", c.package, std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(io_at(&tmp))?;
    let spec = format!("{}={}", c.package, c.version);
    log(&format!("apt-get download {spec}"));
    let out = run(Command::new("apt-get")
        .arg("download")
        .arg(&spec)
        .current_dir(&tmp))?;
    let result = (|| {
        if !out.status.success() {
            return Err(DebianError::Download {
                spec: spec.clone(),
                stderr: stderr_tail(&out),
            });
        }
        let deb = std::fs::read_dir(&tmp)
            .map_err(io_at(&tmp))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "deb"))
            .ok_or_else(|| DebianError::NoDeb { spec: spec.clone() })?;
        let bytes = std::fs::read(&deb).map_err(io_at(&deb))?;
        if sha256_hex(&bytes) != c.sha256 {
            return Err(DebianError::Checksum { deb });
        }
        std::fs::rename(&deb, &dest).map_err(io_at(&dest))
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result.map(|()| dest)
}

/// `dpkg-deb -x deb dir`.
pub fn extract(deb: &Path, dir: &Path) -> Result<(), DebianError> {
    std::fs::create_dir_all(dir).map_err(io_at(dir))?;
    let out = run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(dir))?;
    if !out.status.success() {
        return Err(DebianError::Extract {
            deb: deb.to_path_buf(),
            stderr: stderr_tail(&out),
        });
    }
    Ok(())
}

/// Decompresses the first XZ stream of `data` with the `xz` tool; bytes
/// after the stream (a bzImage's trailer) are ignored. The tool rather than
/// a decoder crate, like the rest of this module (apt, dpkg-deb): one call
/// per image build, `xz-utils` is in `.ci/install-deps`, and a missing tool
/// is a named error ([`DebianError::XzMissing`]).
pub fn xz_decompress(data: &[u8]) -> Result<Vec<u8>, DebianError> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new("xz")
        .args(["--decompress", "--stdout", "--single-stream", "--no-warn"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| {
            if source.kind() == ErrorKind::NotFound {
                DebianError::XzMissing
            } else {
                DebianError::Run {
                    tool: "xz".to_string(),
                    source,
                }
            }
        })?;
    let mut stdin = child.stdin.take().ok_or(DebianError::XzNoStdin)?;
    // Feed from a thread: xz writes output while we write input.
    let input = data.to_vec();
    let feeder = std::thread::spawn(move || {
        // xz closing its input early (it stops after the stream) is fine.
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().map_err(DebianError::XzWait)?;
    let _ = feeder.join();
    if !out.status.success() {
        return Err(DebianError::Xz {
            stderr: stderr_tail(&out),
        });
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_apt_cache_depends() {
        let text = "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n";
        assert_eq!(
            parse_first_depends(text).as_deref(),
            Some("linux-image-6.1.0-57-amd64")
        );
        let alt = "x\n |Depends: <virtual>\n  Depends: real-pkg\n";
        assert_eq!(parse_first_depends(alt).as_deref(), Some("real-pkg"));
        assert_eq!(parse_first_depends("x\n"), None);
    }

    #[test]
    fn parses_apt_cache_show() {
        let text = "Package: busybox-static\nVersion: 1:1.35.0-4+deb12u1+b1\nArchitecture: amd64\n\
                    Filename: pool/main/b/busybox/busybox-static_1.35.0-4+deb12u1+b1_amd64.deb\n\
                    Size: 1\nSHA256: ABCDEF\nDescription: x\n\nPackage: other\n";
        let c = parse_show(text).unwrap();
        assert_eq!(c.package, "busybox-static");
        assert_eq!(c.version, "1:1.35.0-4+deb12u1+b1");
        assert_eq!(c.sha256, "abcdef");
        assert_eq!(c.file, "busybox-static_1.35.0-4+deb12u1+b1_amd64.deb");
        assert_eq!(parse_show("N: Unable to locate package x\n"), None);
    }
}
