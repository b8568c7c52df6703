//! The calls that name two paths, `link` and `rename`: both names are
//! checked, each against what it becomes (the source of a link is a new
//! name of its file; a rename unlinks one name and creates another), and
//! the call is made on the held directories.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use super::{
    AsCommand, Call, Outcome, Start, Step, Target, arg_int, deny, exists, fstat, io, is_dir,
    magic_file, proc_fd_owner, protected_identity, resolve, string, unit_result,
};
use crate::guard::tracee;
use sandbox_paths::write_rules::{Refusal, Rules};

pub(super) fn link(
    rules: &Rules,
    as_command: &dyn AsCommand,
    call: &Call,
    valid: &dyn Fn() -> Step<()>,
) -> Step<Outcome> {
    let (tid, a) = (call.tid, &call.args);
    let (olddirfd, old_at, newdirfd, new_at, flags) = if call.nr == libc::SYS_link {
        (libc::AT_FDCWD, a[0], libc::AT_FDCWD, a[1], 0)
    } else {
        (arg_int(a, 0), a[1], arg_int(a, 2), a[3], arg_int(a, 4))
    };
    let old = string(tid, old_at)?;
    let new = string(tid, new_at)?;
    valid()?;
    // The file being linked, held by us: a name's file, or a descriptor's.
    let source = if old.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
        io(tracee::steal_fd(tid, olddirfd))?
    } else {
        let t = resolve(tid, as_command, Start::Tracee(olddirfd), &old)?;
        let cname = t.name_c()?;
        let follow_links = flags & libc::AT_SYMLINK_FOLLOW != 0;
        if follow_links && let Some(owner) = proc_fd_owner(&t.parent_path) {
            // `/proc/self/fd/N` with AT_SYMLINK_FOLLOW (how an O_TMPFILE file
            // gets a name): the file is the tracee's descriptor N.
            let file = magic_file(as_command, tid, owner, &t)?;
            return link_file(
                rules,
                as_command,
                file,
                tid,
                newdirfd,
                &new,
                Known::default(),
            );
        }
        let follow = if follow_links { 0 } else { libc::O_NOFOLLOW };
        let source = io(tracee::openat2(
            t.parent.as_raw_fd(),
            &cname,
            libc::O_PATH | libc::O_CLOEXEC | follow,
            0,
            libc::RESOLVE_NO_MAGICLINKS,
        ))?;
        if !follow_links {
            // The name itself was opened: its path is the one resolved.
            let known = Known {
                source_path: Some(t.path()),
                target: sibling_of(&t, &old, &new, olddirfd == newdirfd),
            };
            return link_file(rules, as_command, source, tid, newdirfd, &new, known);
        }
        source
    };
    link_file(
        rules,
        as_command,
        source,
        tid,
        newdirfd,
        &new,
        Known::default(),
    )
}

/// What a link already knows before [`link_file`]: the source's path, and
/// the new name's target when it is the source's sibling.
#[derive(Default)]
struct Known {
    source_path: Option<PathBuf>,
    target: Option<Target>,
}

/// `second`'s target when it names an entry of the directory `first` was
/// just resolved to — the same start, the same directory part (a link or
/// rename within a directory, as git makes for every object and ref): that
/// directory held again instead of walked a second time. What the checks
/// see and the call does is still one held directory and one name; the
/// kernel, looking both up, would see the same unless something moved
/// between its two walks. `None` when they differ.
fn sibling_of(
    first_target: &Target,
    first: &[u8],
    second: &[u8],
    same_start: bool,
) -> Option<Target> {
    if !same_start || first.is_empty() || second.is_empty() {
        return None;
    }
    // Compared as written: `/proc/self/x` and `/proc/<n>/x` are not
    // taken for one directory (each is resolved by itself instead).
    let (first_dir, _) = tracee::split(first);
    let (second_dir, name) = tracee::split(second);
    if first_dir != second_dir || (first[0] == b'/') != (second[0] == b'/') {
        return None;
    }
    Some(Target {
        parent: std::rc::Rc::clone(&first_target.parent),
        parent_path: first_target.parent_path.clone(),
        name,
    })
}

/// Links the file we hold under the tracee's new name, after checking both.
fn link_file(
    rules: &Rules,
    as_command: &dyn AsCommand,
    source: OwnedFd,
    tid: u32,
    newdirfd: i32,
    new: &[u8],
    known: Known,
) -> Step<Outcome> {
    let source_path = match known.source_path {
        Some(path) => path,
        None => io(tracee::fd_path(source.as_raw_fd()))?,
    };
    // A hard link to a protected file is a writable alias of it.
    if let Some(refusal) = rules.check_name(&source_path) {
        return Err(deny("file-write-data", &source_path, refusal, "link"));
    }
    if rules.protected_inodes() > 0
        && let Some((dev, ino)) = fstat(source.as_raw_fd())
        && rules.is_protected_inode(dev, ino)
    {
        let refusal = Refusal {
            rule: "another name of a protected file".into(),
        };
        return Err(deny("file-write-data", &source_path, refusal, "link"));
    }
    let t = match known.target {
        Some(t) => t,
        None => resolve(tid, as_command, Start::Tracee(newdirfd), new)?,
    };
    let target = t.path();
    if let Some(refusal) = rules.check_create(&target) {
        return Err(deny("file-write-create", &target, refusal, "link"));
    }
    let cname = t.name_c()?;
    let via = tracee::fd_name(source.as_raw_fd());
    // SAFETY: links exactly the file we hold (through our own magic link,
    // `/proc/self/fd/<n>`) under the checked name.
    let rc = unsafe {
        libc::linkat(
            io(tracee::own_fd_dir())?,
            via.as_ptr(),
            t.parent.as_raw_fd(),
            cname.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    Ok(unit_result(i64::from(rc)))
}

pub(super) fn rename(
    rules: &Rules,
    as_command: &dyn AsCommand,
    call: &Call,
    valid: &dyn Fn() -> Step<()>,
) -> Step<Outcome> {
    let (tid, a) = (call.tid, &call.args);
    let (olddirfd, old_at, newdirfd, new_at, flags) = match call.nr {
        libc::SYS_rename => (libc::AT_FDCWD, a[0], libc::AT_FDCWD, a[1], 0u32),
        libc::SYS_renameat => (arg_int(a, 0), a[1], arg_int(a, 2), a[3], 0),
        _ => (arg_int(a, 0), a[1], arg_int(a, 2), a[3], a[4] as u32),
    };
    let old = string(tid, old_at)?;
    let new = string(tid, new_at)?;
    valid()?;
    let from = resolve(tid, as_command, Start::Tracee(olddirfd), &old)?;
    let to = match sibling_of(&from, &old, &new, olddirfd == newdirfd) {
        Some(to) => to,
        None => resolve(tid, as_command, Start::Tracee(newdirfd), &new)?,
    };
    let (from_path, to_path) = (from.path(), to.path());
    // Moving a protected name (or a directory protected names live in)
    // away is a write to it; moving anything into such a place creates one.
    // RENAME_EXCHANGE does both to both.
    let from_name_c = from.name_c()?;
    if let Some(refusal) = rules
        .check_structure(&from_path)
        .or_else(|| protected_identity(rules, &from.parent, &from_name_c))
    {
        return Err(deny("file-write-unlink", &from_path, refusal, "rename"));
    }
    // Onto an existing name is a change to it; to a new name, a creation
    // (which `existing:` globs allow), or a directory taking over a place
    // protected names live in.
    let to_name_c = to.name_c()?;
    let onto_existing = || {
        rules
            .check_structure(&to_path)
            .or_else(|| protected_identity(rules, &to.parent, &to_name_c))
    };
    let to_new = || {
        rules
            .check_create(&to_path)
            .or_else(|| rules.check_structure_of_new(&to_path))
    };
    // Whether the name exists matters only when one of the two would refuse
    // (and `protected_identity` looks only when inodes are protected).
    let refusal = if rules.protected_inodes() == 0
        && rules.check_structure(&to_path).is_none()
        && to_new().is_none()
    {
        None
    } else if exists(&to.parent, &to_name_c) {
        onto_existing()
    } else {
        to_new()
    };
    if let Some(refusal) = refusal {
        return Err(deny("file-write-create", &to_path, refusal, "rename"));
    }
    // A directory moved into an existing repository from outside it (either
    // way round for RENAME_EXCHANGE) could carry a repository of its own.
    let exchange = flags & libc::RENAME_EXCHANGE != 0;
    // (The rule first: whether a name is a directory is looked up only
    // when the rule would refuse the move.)
    let moved_in = rules
        .check_move_into_repository(&from_path, &to_path)
        .filter(|_| is_dir(&from.parent, &from_name_c))
        .or_else(|| {
            exchange
                .then(|| rules.check_move_into_repository(&to_path, &from_path))
                .flatten()
                .filter(|_| is_dir(&to.parent, &to_name_c))
        });
    if let Some(refusal) = moved_in {
        return Err(deny("file-write-create", &to_path, refusal, "rename"));
    }
    let (from_name, to_name) = (from.name_c()?, to.name_c()?);
    // SAFETY: renameat2 relative to directories we hold, on the checked names.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from.parent.as_raw_fd(),
            from_name.as_ptr(),
            to.parent.as_raw_fd(),
            to_name.as_ptr(),
            flags,
        )
    };
    Ok(unit_result(rc))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second name is resolved from the first one's directory only when
    /// it names an entry of that same directory from the same start.
    #[test]
    fn only_a_sibling_shares_the_first_names_directory() {
        let dir = tempfile_dir();
        let first = Target {
            parent: std::rc::Rc::new(OwnedFd::from(std::fs::File::open(&dir).unwrap())),
            parent_path: dir.clone(),
            name: b"tmp_obj".to_vec(),
        };
        let shared = |a: &[u8], b: &[u8], same_start| {
            sibling_of(&first, a, b, same_start).map(|t| (t.parent_path, t.name))
        };
        assert_eq!(
            shared(b"objects/ab/tmp_obj", b"objects/ab/cdef", true),
            Some((dir.clone(), b"cdef".to_vec()))
        );
        assert_eq!(
            shared(b"index.lock", b"index", true),
            Some((dir.clone(), b"index".to_vec()))
        );
        assert_eq!(
            shared(b"/a/x", b"/a/y", true),
            Some((dir.clone(), b"y".to_vec()))
        );
        // Another directory, another start, absolute against relative, empty.
        assert_eq!(shared(b"objects/ab/tmp", b"objects/cd/tmp", true), None);
        assert_eq!(shared(b"a/x", b"a/x/y", true), None);
        assert_eq!(shared(b"index.lock", b"index", false), None);
        assert_eq!(shared(b"/x", b"x", true), None);
        assert_eq!(shared(b"a/x", b"/a/y", true), None);
        assert_eq!(shared(b"x", b"", true), None);
        std::fs::remove_dir(&dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sibling-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
