//! A sandbox's resource limits (SPEC G6): the configured defaults, the
//! spec's overrides, and how each is held, as the handle shows it.
//!
//! Defaults come from `[backends.bwrap.limits]` (`memory_bytes`, `tasks`,
//! `cpu_millis`, `tmpfs_bytes`; `0` switches a default off, except for
//! tmpfs, which is always sized); what the config leaves out has a
//! built-in default. A spec's own `limits` override them and are
//! requirements: unenforceable ones refuse the launch ([`crate::cgroup`]).

use serde::Deserialize;
use serde_json::{Value, json};

use sandbox_plugin_api::SandboxLimits;

use crate::cgroup::{CgroupPlan, Enforcement, Limit};

/// Tasks when the config says nothing: room for parallel builds, not for a
/// fork bomb.
pub const DEFAULT_TASKS: u64 = 4096;

/// Each writable tmpfs when the config says nothing.
pub const DEFAULT_TMPFS_BYTES: u64 = 1 << 30;

/// `[backends.bwrap.limits]`, as written in the config.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Configured {
    memory_bytes: Option<u64>,
    tasks: Option<u64>,
    cpu_millis: Option<u64>,
    tmpfs_bytes: Option<u64>,
}

/// The defaults from the backend's options (`limits` under
/// `[backends.bwrap]`) over the built-in ones; `mem_total` is the host's
/// memory (the built-in memory default is half of it).
pub fn defaults(options: Option<&Value>, mem_total: Option<u64>) -> Result<SandboxLimits, String> {
    let configured: Configured = match options {
        None => Configured::default(),
        Some(value) => {
            Configured::deserialize(value).map_err(|e| format!("[backends.bwrap.limits]: {e}"))?
        }
    };
    let off = |n: Option<u64>, default: Option<u64>| match n {
        Some(0) => None,
        Some(n) => Some(n),
        None => default,
    };
    let tmpfs = configured.tmpfs_bytes.unwrap_or(DEFAULT_TMPFS_BYTES);
    if tmpfs < 4096 {
        return Err(format!(
            "[backends.bwrap.limits] tmpfs_bytes = {tmpfs}: every tmpfs is sized, at least 4096"
        ));
    }
    Ok(SandboxLimits {
        memory_bytes: off(configured.memory_bytes, mem_total.map(|m| m / 2)),
        tasks: off(configured.tasks, Some(DEFAULT_TASKS)),
        cpu_millis: off(configured.cpu_millis, None),
        tmpfs_bytes: Some(tmpfs),
    })
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The handle's `limits` detail: each limit, its value, and whether (and
/// by what) it is enforced.
pub fn details(limits: &SandboxLimits, plan: &CgroupPlan) -> Value {
    let mut out = serde_json::Map::new();
    for (limit, value) in [
        (Limit::Memory, limits.memory_bytes),
        (Limit::Tasks, limits.tasks),
        (Limit::Cpu, limits.cpu_millis),
    ] {
        let entry = match plan.enforcement(limit) {
            Enforcement::Unset => json!({"value": null, "enforced": false, "by": "no limit set"}),
            Enforcement::By(by) => {
                json!({"value": value, "enforced": true, "by": format!("cgroup {by}")})
            }
            Enforcement::NotEnforced(why) => {
                json!({"value": value, "enforced": false, "by": format!("not enforced: {why}")})
            }
        };
        out.insert(limit.field().into(), entry);
    }
    out.insert(
        "tmpfsBytes".into(),
        json!({"value": limits.tmpfs_bytes, "enforced": true, "by": "the size of each writable tmpfs"}),
    );
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_defaults_and_the_config_over_them() {
        let d = defaults(None, Some(8 << 30)).unwrap();
        assert_eq!(d.memory_bytes, Some(4 << 30));
        assert_eq!(d.tasks, Some(DEFAULT_TASKS));
        assert_eq!(d.cpu_millis, None);
        assert_eq!(d.tmpfs_bytes, Some(DEFAULT_TMPFS_BYTES));
        let cfg = json!({"memory_bytes": 0, "tasks": 50, "cpu_millis": 1500, "tmpfs_bytes": 65536});
        let d = defaults(Some(&cfg), Some(8 << 30)).unwrap();
        assert_eq!(
            d,
            SandboxLimits {
                memory_bytes: None,
                tasks: Some(50),
                cpu_millis: Some(1500),
                tmpfs_bytes: Some(65536)
            }
        );
    }

    #[test]
    fn a_misspelt_or_unsized_config_is_refused() {
        let err = defaults(Some(&json!({"memory": 1})), None).unwrap_err();
        assert!(err.contains("unknown field `memory`"), "{err}");
        let err = defaults(Some(&json!({"tmpfs_bytes": 0})), None).unwrap_err();
        assert!(err.contains("every tmpfs is sized"), "{err}");
    }

    #[test]
    fn mem_total_is_read_in_bytes() {
        assert_eq!(
            mem_total("MemTotal:       24731000 kB\nMemFree: 1 kB\n"),
            Some(24731000 * 1024)
        );
    }
}
