//! What a sandbox uses now, read from its own cgroups when the handle is
//! asked for: memory (v2 `memory.current`; v1 `memory.usage_in_bytes`,
//! which counts the page cache the sandbox's files hold too) and tasks
//! (`pids.current`). A group the host did not give is simply not read: the
//! handle then says what it could read and nothing more.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// The files that hold memory use, with the hierarchy each belongs to.
const MEMORY: &[(&str, &str)] = &[
    ("memory.current", "cgroup v2"),
    ("memory.usage_in_bytes", "cgroup v1"),
];

fn number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The `usage` detail of a sandbox whose groups are `groups`; `None` when
/// none of them has a counter.
pub fn read(groups: &[PathBuf]) -> Option<Value> {
    let mut usage = Map::new();
    let mut sources = Vec::new();
    for dir in groups {
        if !usage.contains_key("memoryBytes") {
            for (file, source) in MEMORY {
                if let Some(bytes) = number(&dir.join(file)) {
                    usage.insert("memoryBytes".into(), bytes.into());
                    sources.push(*source);
                    break;
                }
            }
        }
        if !usage.contains_key("tasks")
            && let Some(tasks) = number(&dir.join("pids.current"))
        {
            usage.insert("tasks".into(), tasks.into());
        }
    }
    if usage.is_empty() {
        return None;
    }
    sources.dedup();
    let source = sources.first().copied().unwrap_or("cgroup");
    usage.insert("source".into(), source.into());
    Some(Value::Object(usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_v1_and_v2_groups_and_nothing_from_none() {
        let root = tempfile::tempdir().unwrap();
        let (memory, pids, v2) = (
            root.path().join("memory"),
            root.path().join("pids"),
            root.path().join("v2"),
        );
        for dir in [&memory, &pids, &v2] {
            std::fs::create_dir(dir).unwrap();
        }
        std::fs::write(memory.join("memory.usage_in_bytes"), "4096\n").unwrap();
        std::fs::write(pids.join("pids.current"), "3\n").unwrap();
        let v1 = read(&[memory, pids]).unwrap();
        assert_eq!(
            v1,
            serde_json::json!({"memoryBytes": 4096, "tasks": 3, "source": "cgroup v1"})
        );
        std::fs::write(v2.join("memory.current"), "8192\n").unwrap();
        std::fs::write(v2.join("pids.current"), "1\n").unwrap();
        let two = read(std::slice::from_ref(&v2)).unwrap();
        assert_eq!(
            two,
            serde_json::json!({"memoryBytes": 8192, "tasks": 1, "source": "cgroup v2"})
        );
        assert_eq!(read(&[root.path().join("gone")]), None);
    }
}
