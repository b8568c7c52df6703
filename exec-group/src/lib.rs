//! An exec's processes as a cgroup v2 group of their own, so that its
//! timeout, a kill or a destroy ends every process it started (SPEC G6,
//! threat model T31).
//!
//! A command can leave its process group and its session (`setsid`), and
//! its children are reparented out of any tree when it dies (a double
//! fork); what it cannot leave without write access to the cgroup
//! filesystem is its cgroup. So each exec is made to join a group of its
//! own before it runs, and `cgroup.kill` (Linux 5.14) ends that group,
//! and everything below it, in one write — no process can fork its way out
//! of a kill that is in progress.
//!
//! Where: the server's own group in the unified hierarchy (a pure v2 host,
//! or the cgroup2 mount a hybrid v1 host has beside its v1 hierarchies,
//! usually `/sys/fs/cgroup/unified`), or, when the bwrap backend moved the
//! server into its `cc_server` leaf, that leaf's parent. No controller is
//! needed: process tracking and `cgroup.kill` are core v2 files. Layout:
//! `<base>/cc_server-<pid>-<sandbox>/e<exec>`, so a killed server's groups
//! are known by the pid in their name and removed by the next start
//! ([`sweep`]).
//!
//! [`plan_base`] is pure; the rest executes what it found.
//!
//! What holds where:
//! - v2 writable by the server (root; a systemd-delegated user service):
//!   every process of an exec ends at its timeout or kill, `setsid`,
//!   double fork or not;
//! - no writable v2 hierarchy (v1 only, or an unprivileged server without
//!   delegation): [`Hierarchy::find`] says why, and the backends fall
//!   back to process groups, which `setsid` escapes; they say so in the
//!   handle's details.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The prefix of every group this server family makes (the bwrap
/// backend's per-sandbox limit groups share it: `cc_server-<pid>-<n>`).
pub const GROUP_PREFIX: &str = "cc_server-";

/// The leaf the bwrap backend moves the server into on v2.
const SERVER_LEAF: &str = "cc_server";

/// How long [`Group::remove`] waits for killed processes to leave.
const REMOVE_PATIENCE: Duration = Duration::from_secs(5);

/// The two ways into an exec's group: its `cgroup.procs` open for writing
/// (a process writes `0` to join) and its directory, for a process made
/// straight in the group (`clone3(CLONE_INTO_CGROUP)`, which spares the
/// join's wait for an RCU grace period).
pub struct Join {
    pub procs: File,
    pub dir: File,
}

/// The directory exec groups are made in, from `/proc/self/cgroup` and
/// `/proc/self/mountinfo`: the server's v2 group (the `0::` line) under the
/// cgroup2 mount that shows it, or the parent of the `cc_server` leaf.
/// `None` without a cgroup2 mount or a v2 group.
pub fn plan_base(self_cgroup: &str, mountinfo: &str) -> Option<PathBuf> {
    let own = self_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))?;
    let own = Path::new(own.trim());
    let (root, point) = mountinfo.lines().find_map(|line| {
        let (head, tail) = line.split_once(" - ")?;
        if tail.split(' ').next()? != "cgroup2" {
            return None;
        }
        let head: Vec<&str> = head.split(' ').collect();
        Some((
            unescape_mountinfo(head.get(3)?),
            unescape_mountinfo(head.get(4)?),
        ))
    })?;
    let inside = own.strip_prefix(&root).ok()?;
    let dir = Path::new(&point).join(inside);
    if dir.file_name().is_some_and(|n| n == SERVER_LEAF) {
        return dir.parent().map(Path::to_path_buf);
    }
    Some(dir)
}

/// mountinfo escapes space, tab, newline and backslash as octal (the
/// bwrap backend's cgroup finder reads the same file).
pub fn unescape_mountinfo(field: &str) -> String {
    let mut out = String::new();
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        match rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok())
        {
            Some(b) => {
                out.push(char::from(b));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The name of the group of this server's sandbox `sandbox` (bwrap: its
/// number, the same name as its limit groups; none: `none-<n>`).
pub fn owner_name(pid: u32, sandbox: &str) -> String {
    format!("{GROUP_PREFIX}{pid}-{sandbox}")
}

/// The server pid in a group's name, if it is one of ours.
pub fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(GROUP_PREFIX)?;
    let (pid, tail) = rest.split_once('-')?;
    if tail.is_empty() {
        return None;
    }
    pid.parse().ok()
}

/// A v2 hierarchy the server may make groups in.
#[derive(Debug, Clone)]
pub struct Hierarchy {
    base: PathBuf,
}

impl Hierarchy {
    /// The server's, or why there is none it may use.
    pub fn find() -> Result<Hierarchy, String> {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let Some(base) = plan_base(&read("/proc/self/cgroup"), &read("/proc/self/mountinfo"))
        else {
            return Err("no cgroup v2 hierarchy is mounted".into());
        };
        if !writable(&base) {
            return Err(format!(
                "the server may not create groups in its cgroup v2 group {}",
                base.display()
            ));
        }
        Ok(Hierarchy { base })
    }

    /// Where groups are made.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The group `name` in the base, made if it is not there (the bwrap
    /// backend's v2 limit group of a sandbox may be). Refused where the
    /// kernel has no `cgroup.kill` (before Linux 5.14).
    pub fn owner(&self, name: &str) -> io::Result<Group> {
        let group = Group {
            dir: self.base.join(name),
        };
        match std::fs::create_dir(&group.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        if !group.dir.join("cgroup.kill").exists() {
            let _ = std::fs::remove_dir(&group.dir);
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this kernel's cgroup v2 has no cgroup.kill (Linux 5.14)",
            ));
        }
        Ok(group)
    }
}

fn writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access reads a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// One cgroup v2 group (a sandbox's or an exec's).
#[derive(Debug)]
pub struct Group {
    dir: PathBuf,
}

impl Group {
    /// The group's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A new group below this one.
    pub fn child(&self, name: &str) -> io::Result<Group> {
        let dir = self.dir.join(name);
        std::fs::create_dir(&dir)?;
        Ok(Group { dir })
    }

    /// An exec's group `name` below this sandbox's, with its join file: what
    /// both backends need before they start an exec whose timeout must end
    /// every process it starts (fail closed: an error means no exec).
    pub fn exec_child(&self, name: &str) -> Result<(Group, Join), String> {
        let group = self.child(name).map_err(|e| {
            format!(
                "creating the exec cgroup {name} below {} (so the exec's timeout ends every process it starts): {e}",
                self.dir.display()
            )
        })?;
        let procs = group
            .join_file()
            .map_err(|e| format!("opening {}/cgroup.procs: {e}", group.dir.display()))?;
        let dir = group
            .dir_file()
            .map_err(|e| format!("opening {}: {e}", group.dir.display()))?;
        Ok((group, Join { procs, dir }))
    }

    /// The group's directory as an `O_PATH` descriptor (close-on-exec):
    /// what `clone3(CLONE_INTO_CGROUP)` takes to make a process in it.
    pub fn dir_file(&self) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&self.dir)
    }

    /// `cgroup.procs`, open for writing (close-on-exec): a process writes
    /// `0` into it to join the group. The kernel checks the permission of
    /// whoever opened it, so a command in a user namespace can join with
    /// the server's descriptor.
    pub fn join_file(&self) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(self.dir.join("cgroup.procs"))
    }

    /// `cgroup.kill`, open for writing: writing `1` kills every process of
    /// the group and its descendants.
    pub fn kill_file(&self) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(self.dir.join("cgroup.kill"))
    }

    /// SIGKILLs every process in the group and below it, at once.
    pub fn kill(&self) -> io::Result<()> {
        self.kill_file()?.write_all(b"1")
    }

    /// Sends `signal` to every process in the group (not below it). Each
    /// pid is pinned with a pidfd and checked to still be a member before
    /// it is signalled, so a reused pid is never hit.
    pub fn signal(&self, signal: i32) -> io::Result<()> {
        for pid in self.members()? {
            // SAFETY: plain syscall; the result is checked.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            if fd < 0 {
                continue; // gone already
            }
            // SAFETY: pidfd_open returned a fresh descriptor we own.
            let fd =
                unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
            if self.members()?.contains(&pid) {
                // SAFETY: plain syscall on a pidfd we hold.
                unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        std::os::fd::AsRawFd::as_raw_fd(&fd),
                        signal,
                        std::ptr::null::<libc::siginfo_t>(),
                        0u32,
                    );
                }
            }
        }
        Ok(())
    }

    /// The pids in the group's `cgroup.procs`.
    pub fn members(&self) -> io::Result<Vec<i32>> {
        let mut text = String::new();
        File::open(self.dir.join("cgroup.procs"))?.read_to_string(&mut text)?;
        Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    /// Whether a live process is in the group or below it.
    pub fn populated(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.events"))
            .map(|t| t.lines().any(|l| l.trim() == "populated 1"))
            .unwrap_or(false)
    }

    /// Removes the group and every group below it once they are empty,
    /// waiting a little for processes just killed.
    pub fn remove(&self) -> io::Result<()> {
        remove_tree(&self.dir, Instant::now() + REMOVE_PATIENCE)
    }

    /// Removes the group now if no process is in it; `false` if it stays.
    /// One `rmdir`, which the kernel refuses (EBUSY) while a process is in
    /// the group or a group is below it — the check and the removal in one
    /// step, on every exec's exit path (a read of `cgroup.events` and a
    /// directory listing before it cost as much again).
    pub fn remove_if_empty(&self) -> bool {
        match std::fs::remove_dir(&self.dir) {
            Ok(()) => true,
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        }
    }

    /// Kills everything in the group, then removes it.
    pub fn kill_and_remove(&self) -> io::Result<()> {
        match self.kill() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
        self.remove()
    }
}

fn remove_tree(dir: &Path, deadline: Instant) -> io::Result<()> {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path(), deadline)?;
            }
        }
    }
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Kills and removes the groups in `base` that servers which are gone
/// left there (a server killed with SIGKILL cannot remove its own): a
/// group whose name holds the pid of no live process. A live pid's groups
/// are never touched, even if that pid now names another program — what is
/// kept is never a live server's.
pub fn sweep(base: &Path) {
    let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = owner_pid(&name.to_string_lossy()) else {
            continue;
        };
        if alive(pid) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let group = Group { dir: entry.path() };
        match group.kill_and_remove() {
            Ok(()) => {
                tracing::info!(group = %group.dir.display(), "removed a cgroup a gone server left")
            }
            Err(e) => {
                tracing::debug!(group = %group.dir.display(), "a gone server's cgroup stays: {e}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
35 25 0:30 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
36 25 0:31 / /sys/fs/cgroup/memory rw,relatime shared:11 - cgroup cgroup rw,memory";

    #[test]
    fn the_base_is_the_servers_v2_group_on_a_hybrid_host() {
        let cgroup = "4:memory:/x\n0::/\n";
        assert_eq!(
            plan_base(cgroup, HYBRID),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
    }

    #[test]
    fn the_base_is_the_parent_of_the_bwrap_leaf() {
        let mounts = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate";
        let cgroup = "0::/user.slice/app.service/cc_server\n";
        assert_eq!(
            plan_base(cgroup, mounts),
            Some(PathBuf::from("/sys/fs/cgroup/user.slice/app.service"))
        );
        let cgroup = "0::/user.slice/app.service\n";
        assert_eq!(
            plan_base(cgroup, mounts),
            Some(PathBuf::from("/sys/fs/cgroup/user.slice/app.service"))
        );
    }

    #[test]
    fn a_mount_of_part_of_the_hierarchy_is_followed() {
        let mounts = "30 1 0:26 /outer /sys/fs/cgroup rw - cgroup2 cgroup2 rw";
        assert_eq!(
            plan_base("0::/outer/inner\n", mounts),
            Some(PathBuf::from("/sys/fs/cgroup/inner"))
        );
        assert_eq!(plan_base("0::/elsewhere\n", mounts), None);
    }

    #[test]
    fn no_v2_mount_or_group_means_no_base() {
        let v1 = "36 25 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory";
        assert_eq!(plan_base("0::/\n", v1), None);
        assert_eq!(plan_base("4:memory:/x\n", HYBRID), None);
    }

    #[test]
    fn owner_names_carry_the_server_pid() {
        assert_eq!(owner_name(42, "3"), "cc_server-42-3");
        assert_eq!(owner_pid("cc_server-42-3"), Some(42));
        assert_eq!(owner_pid("cc_server-42-none-1"), Some(42));
        assert_eq!(owner_pid("cc_server"), None);
        assert_eq!(owner_pid("cc_server-42"), None);
        assert_eq!(owner_pid("cc_server-x-1"), None);
        assert_eq!(owner_pid("other-42-1"), None);
    }

    /// A real group on this host: a forked child joins, `signal` and `kill`
    /// reach it after it has left its session, and the group is removed.
    #[test]
    fn a_setsid_child_is_killed_with_its_group() {
        let hierarchy = match Hierarchy::find() {
            Ok(h) => h,
            Err(why) => {
                sandbox_test_support::skip_or_fail(format!(
                    "no writable cgroup v2 group for this process ({why}): CI must run the tests as root on a host with a cgroup2 mount (pure v2, or the hybrid `/sys/fs/cgroup/unified`)"
                ));
                return;
            }
        };
        let name = owner_name(std::process::id(), "unit-test");
        let owner = hierarchy.owner(&name).unwrap();
        let exec = owner.child("e1").unwrap();
        let join = exec.join_file().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&join);
        let mut command = std::process::Command::new("sh");
        command.args(["-c", "setsid sleep 30.4242 & wait"]);
        // SAFETY: write is async-signal-safe; the descriptor is open.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().unwrap();
        drop(join);
        let deadline = Instant::now() + Duration::from_secs(10);
        while exec.members().unwrap().len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(exec.members().unwrap().len(), 2, "sh and its setsid sleep");
        assert!(exec.populated());
        assert!(!exec.remove_if_empty(), "a group with processes stays");
        assert!(exec.path().exists());
        exec.signal(libc::SIGCONT).unwrap();
        exec.kill().unwrap();
        child.wait().unwrap();
        owner.remove().unwrap();
        assert!(!owner.path().exists());
    }
}
