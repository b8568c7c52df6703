//! The allowlists in the profile, where a profile can follow them (SPEC G5;
//! `sandbox_paths::allowlists`):
//!
//! - **A bound home** (a writable place holding any part of it): every
//!   dot-path and [`HOME_CODE_DIRS`] place denied, then the history data
//!   ([`HOME_DATA`]) allowed again. macOS has no throwaway overlays, so the
//!   caches under the home are read-only here: point a tool's cache into
//!   the workspace (`npm_config_cache`, `CARGO_HOME`, `PIP_CACHE_DIR`).
//! - **The git directory at the top of each writable root** that exists:
//!   denied, then what git writes in ordinary work ([`GIT_WRITES`], each
//!   with its lock file, and the directories those lie in) allowed, then
//!   [`GIT_WRITES_EXCEPT`] denied again. A profile cannot tell a git
//!   directory of launch from one made inside, so repositories deeper in a
//!   root are left to the mandatory denies, and a worktree made inside
//!   (`git worktree add`) is refused here.
//!
//! Within one operation the last matching rule wins: the git allowlist
//! comes before the glob denies (`**/*.pem` still wins in `.git/objects`),
//! the home's after the dependency folders' re-allows; both before the
//! mandatory denies, which win over anything they allow.

use std::path::Path;

use sandbox_paths::allowlists::git::{GIT_WRITES, GIT_WRITES_EXCEPT};
use sandbox_paths::allowlists::home::{HOME_CODE_DIRS, HOME_DATA, kept_part};
use sandbox_paths::write_deny::{Glob, Segment};

use super::{PathResolver, ProfileError, Writer, glob_fragment, spellings};

/// The glob of an allowlist entry, parsed (the lists are checked by the
/// path crate's tests).
fn segments(glob: &str) -> Vec<Segment> {
    Glob::parse(glob)
        .map(|g| g.segments().to_vec())
        .unwrap_or_default()
}

/// The home allowlist, for each spelling of the home, when a writable
/// place holds any part of it.
pub(super) fn home(w: &mut Writer<'_>, home: &[String], writable_roots: &[String]) {
    // The home or a directory above it, or a kept part of it (`~/.config`):
    // a project below the home (`~/proj`) shows none of what is kept.
    let bound = home.iter().any(|h| {
        writable_roots.iter().any(|r| {
            Path::new(h).starts_with(r)
                || Path::new(r)
                    .strip_prefix(h)
                    .is_ok_and(|rel| kept_part(rel).is_some())
        })
    });
    if !bound {
        return;
    }
    w.comment(
        "The home allowlist: its dot-paths and the places tools keep code are read-only, \
         but its history data.",
    );
    for h in home {
        let dot = w.regex(h, "/\\.[^/]*(/.*)?");
        w.deny("file-write*", &dot);
        for (dir, _) in HOME_CODE_DIRS {
            let param = w.path(&format!("{h}/{dir}"));
            w.deny("file-write*", &format!("(subpath {param})"));
        }
        for (glob, _) in HOME_DATA {
            let data = w.regex(h, &glob_fragment(&segments(glob)));
            w.allow("file-write*", &data);
        }
    }
}

/// The git allowlist in the git directory at the top of each writable root
/// that has one.
pub(super) fn git(
    w: &mut Writer<'_>,
    writable_roots: &[String],
    resolver: &dyn PathResolver,
) -> Result<(), ProfileError> {
    let mut dirs = Vec::new();
    for root in writable_roots {
        let dot_git = Path::new(root).join(".git");
        if resolver.resolve(&dot_git.join("HEAD")).is_some() {
            for p in spellings("git directory", &dot_git, resolver)? {
                if !dirs.contains(&p) {
                    dirs.push(p);
                }
            }
        }
    }
    if dirs.is_empty() {
        return Ok(());
    }
    w.comment(
        "The git metadata allowlist: in the git directory at the top of a writable root only \
         what git writes in ordinary work may change.",
    );
    for dir in &dirs {
        let param = w.path(dir);
        w.deny("file-write*", &format!("(subpath {param})"));
        let mut parents: Vec<String> = Vec::new();
        for (glob, _) in GIT_WRITES {
            let segs = segments(glob);
            let allowed = w.regex(dir, &format!("{}(\\.lock)?", glob_fragment(&segs)));
            w.allow("file-write*", &allowed);
            // The directories an allowed name lies in may be made (a glob
            // ending in `**` allows its own directory already).
            let last = if segs.last() == Some(&Segment::AnyDepth) {
                segs.len() - 1
            } else {
                segs.len()
            };
            for k in 1..last {
                let fragment = glob_fragment(&segs[..k]);
                if segs[..k].iter().all(|s| *s != Segment::AnyDepth) && !parents.contains(&fragment)
                {
                    let parent = w.regex(dir, &fragment);
                    w.allow(
                        "file-write-create",
                        &format!("(require-all {parent} (vnode-type DIRECTORY))"),
                    );
                    parents.push(fragment);
                }
            }
        }
        for (glob, _) in GIT_WRITES_EXCEPT {
            let kept = w.regex(
                dir,
                &format!("{}(\\.lock)?", glob_fragment(&segments(glob))),
            );
            w.deny("file-write*", &kept);
        }
    }
    Ok(())
}
