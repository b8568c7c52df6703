//! Where each exec's processes are tracked (threat model T31): one cgroup
//! v2 group per exec below the sandbox's, the next one made ahead.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sandbox_exec_group::{Group, Join};

/// Where each exec's processes are tracked: a cgroup v2 group per exec
/// below the sandbox's (`sandbox_exec_group`), which a command cannot
/// leave — so an exec's timeout and kill end every process it started,
/// `setsid`, double fork or not (SPEC G6, T31). Without a writable v2
/// hierarchy, only the exec's process group is signalled; `setsid` escapes
/// that until the sandbox is destroyed (PID 1 then kills everything), and
/// the handle's `processTracking` says so.
pub(crate) struct ExecGroups {
    sandbox: Option<Group>,
    /// The handle's `processTracking`.
    pub(crate) tracking: String,

    /// The next exec's group, made ahead of it once the last exec's end is
    /// out ([`ExecGroups::make_spare`]): the `mkdir` in the cgroup
    /// filesystem and the two opens are then not on an exec's way in.
    /// Every group is made under this lock, which [`ExecGroups::remove`]
    /// holds too: no group is made while the tree is removed, or after.
    spare: Mutex<Spare>,
    /// Numbers the spares (`s<n>`; a group made at its exec is `e<id>`).
    spares: AtomicU64,
}

#[derive(Default)]
struct Spare {
    next: Option<(Group, Join)>,
    /// The tree is removed (destroy): no group is made any more.
    removed: bool,
}

impl ExecGroups {
    pub(crate) fn new(name: &str) -> Self {
        let found = sandbox_exec_group::Hierarchy::find().and_then(|h| {
            h.owner(name).map_err(|e| {
                format!(
                    "cannot create the cgroup {}: {e}",
                    h.base().join(name).display()
                )
            })
        });
        match found {
            Ok(group) => Self {
                tracking: format!("cgroup v2 {}", group.path().display()),
                sandbox: Some(group),
                spare: Mutex::default(),
                spares: AtomicU64::new(0),
            },
            Err(why) => {
                tracing::warn!(
                    "bwrap: an exec's timeout and kill reach its process group only; `setsid` escapes them until destroy: {why}"
                );
                Self {
                    sandbox: None,
                    spare: Mutex::default(),
                    spares: AtomicU64::new(0),
                    tracking: format!(
                        "process groups only (`setsid` escapes an exec's timeout and kill until the sandbox is destroyed): {why}"
                    ),
                }
            }
        }
    }

    /// The group for exec `id`: the spare if there is one, else made now.
    /// `None` where execs are not tracked by cgroup; an error fails the
    /// exec (closed).
    pub(crate) fn for_exec(&self, id: u64) -> Result<Option<(Group, Join)>, String> {
        let Some(sandbox) = &self.sandbox else {
            return Ok(None);
        };
        let mut spare = self
            .spare
            .lock()
            .map_err(|_| "the exec groups' lock is poisoned".to_owned())?;
        if spare.removed {
            return Err("the sandbox's cgroups are being removed (it is destroyed)".into());
        }
        match spare.next.take() {
            Some(made) => Ok(Some(made)),
            None => sandbox.exec_child(&format!("e{id}")).map(Some),
        }
    }

    /// Makes the next exec's group, unless there is one. A failure is only
    /// logged: that exec makes its own group, and fails if it cannot.
    pub(crate) fn make_spare(&self) {
        let Some(sandbox) = &self.sandbox else {
            return;
        };
        let Ok(mut spare) = self.spare.lock() else {
            return;
        };
        if spare.removed || spare.next.is_some() {
            return;
        }
        let n = self.spares.fetch_add(1, Ordering::Relaxed);
        match sandbox.exec_child(&format!("s{n}")) {
            Ok(made) => spare.next = Some(made),
            Err(e) => tracing::debug!("making the next exec's cgroup ahead: {e}"),
        }
    }

    /// Removes every exec's group and the sandbox's (once bwrap, and so
    /// every process, is gone; an exec's group that outlived its exec, a
    /// background process in it, is removed here).
    /// A group made meanwhile — the spare, made by the control thread
    /// after the last exec's end, while destroy runs — waits for the lock
    /// and is removed with the tree; none is made after.
    pub(crate) fn remove(&self) {
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        spare.removed = true;
        spare.next = None;
        if let Some(group) = &self.sandbox
            && let Err(e) = group.kill_and_remove()
        {
            tracing::warn!(group = %group.path().display(), "removing the sandbox's exec cgroups: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Destroy racing the control thread's spare: a group made ahead is
    /// removed with the tree, and none is made, nor handed to an exec, once
    /// the tree is removed — no empty group is left behind.
    #[test]
    fn no_group_is_made_once_the_tree_is_removed() {
        let name = sandbox_exec_group::owner_name(std::process::id(), "spare-test");
        let groups = ExecGroups::new(&name);
        let Some(sandbox) = groups.sandbox.as_ref().map(|g| g.path().to_path_buf()) else {
            sandbox_test_support::skip_or_fail(format!(
                "no writable cgroup v2 group for this process ({why}): CI must run the tests as root on a host with a cgroup2 mount (pure v2, or the hybrid `/sys/fs/cgroup/unified`)",
                why = groups.tracking
            ));
            return;
        };
        groups.make_spare();
        assert!(sandbox.join("s0").is_dir(), "no spare was made ahead");
        let (first, _) = groups.for_exec(1).unwrap().unwrap();
        assert_eq!(
            first.path(),
            sandbox.join("s0"),
            "the exec did not get the spare"
        );
        groups.make_spare();
        assert!(sandbox.join("s1").is_dir());
        groups.remove();
        assert!(!sandbox.exists(), "the tree outlived its removal");
        groups.make_spare();
        assert!(!sandbox.exists(), "a spare was made after the removal");
        match groups.for_exec(2) {
            Err(refused) => assert!(refused.contains("destroyed"), "{refused}"),
            Ok(_) => panic!("an exec got a group after the removal"),
        }
    }
}
