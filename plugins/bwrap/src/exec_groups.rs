//! Where each exec's processes are tracked (issue 16 item 6): one cgroup
//! v2 group per exec below the sandbox's, the next one made ahead.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sandbox_exec_group::{Group, Join};

/// Where each exec's processes are tracked: a cgroup v2 group per exec
/// below the sandbox's (`sandbox_exec_group`), which a command cannot
/// leave — so an exec's timeout and kill end every process it started,
/// `setsid`, double fork or not (issue 16 item 6). Without a writable v2
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
    spare: Mutex<Option<(Group, Join)>>,
    /// Numbers the spares (`s<n>`; a group made at its exec is `e<id>`).
    spares: AtomicU64,
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
                spare: Mutex::new(None),
                spares: AtomicU64::new(0),
            },
            Err(why) => {
                tracing::warn!(
                    "bwrap: an exec's timeout and kill reach its process group only; `setsid` escapes them until destroy: {why}"
                );
                Self {
                    sandbox: None,
                    spare: Mutex::new(None),
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
        if let Some(spare) = self.spare.lock().ok().and_then(|mut s| s.take()) {
            return Ok(Some(spare));
        }
        sandbox.exec_child(&format!("e{id}")).map(Some)
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
        if spare.is_some() {
            return;
        }
        let n = self.spares.fetch_add(1, Ordering::Relaxed);
        match sandbox.exec_child(&format!("s{n}")) {
            Ok(made) => *spare = Some(made),
            Err(e) => tracing::debug!("making the next exec's cgroup ahead: {e}"),
        }
    }

    /// Removes every exec's group and the sandbox's (once bwrap, and so
    /// every process, is gone; an exec's group that outlived its exec, a
    /// background process in it, is removed here).
    pub(crate) fn remove(&self) {
        if let Some(group) = &self.sandbox
            && let Err(e) = group.kill_and_remove()
        {
            tracing::warn!(group = %group.path().display(), "removing the sandbox's exec cgroups: {e}");
        }
    }
}
