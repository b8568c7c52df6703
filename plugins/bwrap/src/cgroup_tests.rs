//! The cgroup plan against fake cgroupfs trees (SPEC G6): this machine has
//! v1 memory and pids, and the v2 path can only be tested as a plan.

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// A cgroupfs tree: files with contents, and the paths this process may write.
#[derive(Default)]
struct FakeFs {
    files: BTreeMap<PathBuf, String>,
    dirs: BTreeSet<PathBuf>,
    writable: BTreeSet<PathBuf>,
}

impl FakeFs {
    fn dir(mut self, path: &str, writable: bool) -> Self {
        self.dirs.insert(path.into());
        if writable {
            self.writable.insert(path.into());
        }
        self
    }
    fn file(mut self, path: &str, text: &str, writable: bool) -> Self {
        self.files.insert(path.into(), text.into());
        if writable {
            self.writable.insert(path.into());
        }
        self
    }
}

impl CgroupFs for FakeFs {
    fn read(&self, path: &Path) -> Option<String> {
        self.files.get(path).cloned()
    }
    fn exists(&self, path: &Path) -> bool {
        self.files.contains_key(path) || self.dirs.contains(path)
    }
    fn writable(&self, path: &Path) -> bool {
        self.writable.contains(path)
    }
}

/// This machine: v1 hierarchies, the server nested in `memory`, an empty
/// cgroup2 mount.
fn hybrid_facts() -> Facts {
    Facts {
        self_cgroup: "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n"
            .into(),
        mountinfo: "\
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"
        .into(),
    }
}

fn hybrid_fs(writable: bool) -> FakeFs {
    FakeFs::default()
        .dir("/sys/fs/cgroup/memory/process_api/abc", writable)
        .file(
            "/sys/fs/cgroup/memory/process_api/abc/memory.memsw.limit_in_bytes",
            "9223372036854771712",
            writable,
        )
        .dir("/sys/fs/cgroup/pids", writable)
        .dir("/sys/fs/cgroup/cpu", writable)
        .file("/sys/fs/cgroup/unified/cgroup.controllers", "", writable)
        .file(
            "/sys/fs/cgroup/unified/cgroup.subtree_control",
            "",
            writable,
        )
        .file("/sys/fs/cgroup/unified/cgroup.procs", "", writable)
        .dir("/sys/fs/cgroup/unified", writable)
}

/// A pure v2 host: the server in a delegated user service.
fn v2_facts() -> Facts {
    Facts {
        self_cgroup: "0::/user.slice/user-1000.slice/app.service\n".into(),
        mountinfo: "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n".into(),
    }
}

const V2: &str = "/sys/fs/cgroup/user.slice/user-1000.slice/app.service";

fn v2_fs(controllers: &str, writable: bool) -> FakeFs {
    FakeFs::default()
        .dir(V2, writable)
        .file(&format!("{V2}/cgroup.controllers"), controllers, false)
        .file(&format!("{V2}/cgroup.subtree_control"), "", writable)
        .file(&format!("{V2}/cgroup.procs"), "4242\n", writable)
}

fn all() -> SandboxLimits {
    SandboxLimits {
        memory_bytes: Some(64 << 20),
        tasks: Some(100),
        cpu_millis: Some(500),
        tmpfs_bytes: Some(1 << 20),
    }
}

fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

fn w(path: &str, value: &str) -> Step {
    Step::Write(p(path), value.into())
}

/// G6: on v1 each limit gets a group below the server's own group in its
/// controller's hierarchy; swap is capped with memory; bwrap joins all
/// (through `tasks`, a single thread's cheap move).
#[test]
fn v1_memory_pids_and_cpu_below_the_servers_groups() {
    let plan = plan_cgroup(&hybrid_facts(), &hybrid_fs(true), "sb1", &all(), &all()).unwrap();
    let mem = "/sys/fs/cgroup/memory/process_api/abc/sb1";
    assert_eq!(
        plan.steps,
        vec![
            Step::Mkdir(p(mem)),
            w(&format!("{mem}/memory.limit_in_bytes"), "67108864"),
            w(&format!("{mem}/memory.memsw.limit_in_bytes"), "67108864"),
            Step::Mkdir(p("/sys/fs/cgroup/pids/sb1")),
            w(
                "/sys/fs/cgroup/pids/sb1/pids.max",
                &(100 + OWN_TASKS).to_string()
            ),
            Step::Mkdir(p("/sys/fs/cgroup/cpu/sb1")),
            w("/sys/fs/cgroup/cpu/sb1/cpu.cfs_period_us", "100000"),
            w("/sys/fs/cgroup/cpu/sb1/cpu.cfs_quota_us", "50000"),
        ]
    );
    assert_eq!(
        plan.join,
        vec![
            p(&format!("{mem}/tasks")),
            p("/sys/fs/cgroup/pids/sb1/tasks"),
            p("/sys/fs/cgroup/cpu/sb1/tasks"),
        ]
    );
    assert_eq!(plan.remove.len(), 3);
    assert_eq!(
        plan.oom,
        Some(OomCounter {
            file: p(&format!("{mem}/memory.oom_control"))
        })
    );
    assert_eq!(plan.memory, Enforcement::By("v1 memory".into()));
    assert_eq!(plan.tasks, Enforcement::By("v1 pids".into()));
    assert_eq!(plan.cpu, Enforcement::By("v1 cpu".into()));
}

/// G6: a host without a cpu hierarchy: a default CPU limit is shown as not
/// enforced; the same limit asked for by the spec is refused, naming the
/// controller (fail closed).
#[test]
fn a_missing_controller_is_not_enforced_or_refused_when_asked() {
    let mut facts = hybrid_facts();
    facts.mountinfo = facts
        .mountinfo
        .lines()
        .filter(|l| !l.ends_with(",cpu"))
        .map(|l| format!("{l}\n"))
        .collect();
    let defaults = plan_cgroup(
        &facts,
        &hybrid_fs(true),
        "sb",
        &SandboxLimits::default(),
        &all(),
    )
    .unwrap();
    assert!(
        matches!(&defaults.cpu, Enforcement::NotEnforced(why) if why.contains("`cpu`")),
        "{:?}",
        defaults.cpu
    );
    assert_eq!(defaults.memory, Enforcement::By("v1 memory".into()));
    let asked = SandboxLimits {
        cpu_millis: Some(500),
        ..SandboxLimits::default()
    };
    let err = plan_cgroup(&facts, &hybrid_fs(true), "sb", &asked, &all()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("limits.cpuMillis") && text.contains("`cpu` cgroup controller"),
        "{text}"
    );
}

/// G6: an unprivileged server without delegation can create no group:
/// nothing is enforced by cgroups, and no step is planned.
#[test]
fn without_write_access_nothing_is_enforced() {
    let plan = plan_cgroup(
        &hybrid_facts(),
        &hybrid_fs(false),
        "sb",
        &SandboxLimits::default(),
        &all(),
    )
    .unwrap();
    assert!(plan.steps.is_empty() && plan.join.is_empty() && plan.remove.is_empty());
    for limit in Limit::ALL {
        assert!(
            matches!(plan.enforcement(limit), Enforcement::NotEnforced(why) if why.contains("may not create")),
            "{limit:?}: {:?}",
            plan.enforcement(limit)
        );
    }
    let asked = SandboxLimits {
        memory_bytes: Some(64 << 20),
        ..SandboxLimits::default()
    };
    let err = plan_cgroup(&hybrid_facts(), &hybrid_fs(false), "sb", &asked, &all()).unwrap_err();
    assert!(err.to_string().contains("limits.memoryBytes"), "{err}");
}

/// G6: v2 with the controllers delegated: the server moves into its leaf,
/// enables them for its children, and the sandbox is the leaf's sibling.
#[test]
fn v2_moves_the_server_into_a_leaf_and_enables_controllers() {
    let fs = v2_fs("cpuset cpu io memory pids", true);
    let plan = plan_cgroup(&v2_facts(), &fs, "sb1", &all(), &all()).unwrap();
    let sb = format!("{V2}/sb1");
    assert_eq!(
        plan.steps,
        vec![
            Step::Mkdir(p(&format!("{V2}/cc_server"))),
            w(&format!("{V2}/cc_server/cgroup.procs"), "0"),
            w(
                &format!("{V2}/cgroup.subtree_control"),
                "+memory +pids +cpu"
            ),
            Step::Mkdir(p(&sb)),
            w(&format!("{sb}/memory.max"), "67108864"),
            w(&format!("{sb}/pids.max"), &(100 + OWN_TASKS).to_string()),
            w(&format!("{sb}/cpu.max"), "50000 100000"),
        ]
    );
    assert_eq!(plan.join, vec![p(&format!("{sb}/cgroup.procs"))]);
    assert_eq!(plan.remove, vec![p(&sb)]);
    assert_eq!(
        plan.oom,
        Some(OomCounter {
            file: p(&format!("{sb}/memory.events"))
        })
    );
    assert_eq!(plan.cpu, Enforcement::By("v2 cpu".into()));
}

/// G6: once in its leaf (a later launch), the server neither moves again
/// nor re-enables what is enabled; groups still go below its parent group.
#[test]
fn v2_in_the_leaf_already() {
    let facts = Facts {
        self_cgroup: format!("0::{}/cc_server\n", V2.trim_start_matches("/sys/fs/cgroup")),
        ..v2_facts()
    };
    let fs = v2_fs("memory pids", true).file(
        &format!("{V2}/cgroup.subtree_control"),
        "memory pids",
        true,
    );
    let limits = SandboxLimits {
        cpu_millis: None,
        ..all()
    };
    let plan = plan_cgroup(&facts, &fs, "sb2", &limits, &limits).unwrap();
    assert_eq!(plan.steps[0], Step::Mkdir(p(&format!("{V2}/sb2"))));
    assert!(
        !plan
            .steps
            .iter()
            .any(|s| matches!(s, Step::Write(f, _) if f.ends_with("cgroup.subtree_control")))
    );
}

/// G6: v2 where only some controllers reach the server's group: those are
/// enforced, the rest not (and refused when asked); v2 without write
/// access is not delegated.
#[test]
fn v2_without_the_controllers_or_delegation() {
    let fs = v2_fs("memory", true);
    let plan = plan_cgroup(&v2_facts(), &fs, "sb", &SandboxLimits::default(), &all()).unwrap();
    assert_eq!(plan.memory, Enforcement::By("v2 memory".into()));
    assert!(matches!(&plan.tasks, Enforcement::NotEnforced(why) if why.contains("`pids`")));
    assert!(
        plan.steps
            .contains(&w(&format!("{V2}/cgroup.subtree_control"), "+memory"))
    );

    let asked = SandboxLimits {
        tasks: Some(10),
        ..SandboxLimits::default()
    };
    let err = plan_cgroup(&v2_facts(), &fs, "sb", &asked, &all()).unwrap_err();
    assert!(
        err.to_string().contains("`pids` cgroup controller"),
        "{err}"
    );

    let locked = v2_fs("memory pids cpu", false);
    let plan = plan_cgroup(
        &v2_facts(),
        &locked,
        "sb",
        &SandboxLimits::default(),
        &all(),
    )
    .unwrap();
    assert!(plan.steps.is_empty());
    assert!(matches!(&plan.memory, Enforcement::NotEnforced(why) if why.contains("may not write")));
}

/// G6: no limit at all plans nothing; nonsense values are refused.
#[test]
fn nothing_asked_plans_nothing_and_ranges_are_checked() {
    let none = SandboxLimits::default();
    let plan = plan_cgroup(&hybrid_facts(), &hybrid_fs(true), "sb", &none, &none).unwrap();
    assert_eq!(plan.steps, vec![]);
    assert_eq!(plan.memory, Enforcement::Unset);
    for bad in [
        SandboxLimits {
            memory_bytes: Some(1000),
            ..none
        },
        SandboxLimits {
            tasks: Some(0),
            ..none
        },
        SandboxLimits {
            tmpfs_bytes: Some(1),
            ..none
        },
    ] {
        let err = plan_cgroup(&hybrid_facts(), &hybrid_fs(true), "sb", &bad, &bad).unwrap_err();
        assert!(matches!(err, LimitError::OutOfRange { .. }), "{err}");
    }
}

#[test]
fn oom_counters_parse_in_both_versions() {
    let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
    let v2 = "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n";
    assert_eq!(OomCounter::parse(v1), Some(3));
    assert_eq!(OomCounter::parse(v2), Some(2));
    assert_eq!(OomCounter::parse(""), None);
}

#[test]
fn mountinfo_escapes_are_read() {
    let mounts = parse_mounts("1 2 0:3 / /sys/fs/cgroup/a\\040b rw - cgroup cgroup rw,memory\n");
    assert_eq!(mounts[0].point, p("/sys/fs/cgroup/a b"));
}

/// G6: groups a killed server left are found by name and pid; a live
/// server's (or a foreign) group never is.
#[test]
fn stale_groups_are_told_by_the_servers_pid() {
    let alive = |pid: u32| pid == 7;
    assert!(is_stale(&group_name(8, 0), &alive));
    assert!(!is_stale(&group_name(7, 3), &alive));
    for foreign in ["cc_server", "cc_server-x-1", "other-8-0", "cc_server-8"] {
        assert!(!is_stale(foreign, &alive), "{foreign}");
    }
    let parents = group_parents(&hybrid_facts(), &hybrid_fs(true));
    assert_eq!(
        parents,
        vec![
            p("/sys/fs/cgroup/unified"),
            p("/sys/fs/cgroup/memory/process_api/abc"),
            p("/sys/fs/cgroup/pids"),
            p("/sys/fs/cgroup/cpu"),
        ]
    );
}
