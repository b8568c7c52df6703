//! Which kernel modules go into the initramfs, and in what order the agent
//! loads them. The dependency closure comes from each `.ko`'s `.modinfo`
//! `depends=` field, so no kmod/depmod is needed on the build host.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::elf::{Elf, ElfError};

/// What a module lookup given to [`load_order`] returns when it fails.
pub type LookupError = Box<dyn std::error::Error + Send + Sync>;

/// Why the modules or their order could not be worked out.
#[derive(Debug, thiserror::Error)]
pub enum ModulesError {
    #[error(transparent)]
    Elf(#[from] ElfError),
    #[error("the module has no .modinfo section")]
    NoModinfo,
    #[error("reading {}", .dir.display())]
    ReadDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", .path.display())]
    FileType {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Relative(#[from] std::path::StripPrefixError),
    /// The caller's lookup failed.
    #[error(transparent)]
    Lookup(LookupError),
    #[error("module dependency cycle: {}", .cycle.join(" -> "))]
    Cycle { cycle: Vec<String> },
    #[error("module {module} depends on {dep}, which this kernel does not have as a module")]
    MissingDependency { module: String, dep: String },
}

/// The modules the guest needs, as roots of the closure:
/// - `virtio_mmio`: the transport of QEMU's `microvm` machine. Nothing
///   depends on it by symbol, so it must be a root or no device appears;
/// - `virtio_console`: the agent's `virtserialport`;
/// - `9pnet_virtio`, `9p`: host directory shares;
/// - `virtio_rng`: entropy for the guest at boot.
pub const DEFAULT_ROOTS: &[&str] = &[
    "virtio_mmio",
    "virtio_console",
    "9pnet_virtio",
    "9p",
    "virtio_rng",
];

/// Module names treat `-` and `_` as the same character; this is the key.
pub fn canonical(name: &str) -> String {
    name.replace('-', "_")
}

/// The `key=value` strings of a `.modinfo` section, in order. Entries are
/// NUL-separated (and may be NUL-padded); ones without `=` are skipped.
pub fn parse_modinfo(section: &[u8]) -> Vec<(String, String)> {
    section
        .split(|&b| b == 0)
        .filter_map(|s| {
            let s = std::str::from_utf8(s).ok()?;
            let (k, v) = s.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// The module names a `.ko` depends on, from its ELF bytes.
pub fn depends_of_ko(ko: &[u8]) -> Result<Vec<String>, ModulesError> {
    let modinfo = Elf::parse(ko)?
        .section(".modinfo")?
        .ok_or(ModulesError::NoModinfo)?;
    Ok(parse_modinfo(modinfo)
        .into_iter()
        .filter(|(k, _)| k == "depends")
        .flat_map(|(_, v)| {
            v.split(',')
                .filter(|d| !d.is_empty())
                .map(canonical)
                .collect::<Vec<_>>()
        })
        .collect())
}

/// Maps canonical module name → path of its `.ko` relative to `kernel_dir`
/// (`lib/modules/<ver>/kernel`), by walking that tree.
pub fn index(kernel_dir: &Path) -> Result<BTreeMap<String, PathBuf>, ModulesError> {
    let mut out = BTreeMap::new();
    let mut stack = vec![kernel_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let read_dir = |source| ModulesError::ReadDir {
            dir: dir.clone(),
            source,
        };
        for entry in std::fs::read_dir(&dir).map_err(read_dir)? {
            let entry = entry.map_err(read_dir)?;
            let path = entry.path();
            let kind = entry.file_type().map_err(|source| ModulesError::FileType {
                path: path.clone(),
                source,
            })?;
            if kind.is_dir() {
                stack.push(path);
            } else if let Some(stem) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".ko"))
            {
                let rel = path.strip_prefix(kernel_dir)?.to_path_buf();
                out.insert(canonical(stem), rel);
            }
        }
    }
    Ok(out)
}

/// The result of [`load_order`].
#[derive(Debug, PartialEq, Eq)]
pub struct Order {
    /// Canonical names, every dependency before its dependents.
    pub modules: Vec<String>,
    /// Roots that do not exist as modules (built in, or absent from this
    /// kernel); the caller logs them.
    pub missing_roots: Vec<String>,
}

/// The dependency closure of `roots`, ordered for loading (depth-first
/// post-order, roots in the given order, dependencies in `depends=` order).
///
/// `deps(name)` returns `Ok(None)` when no such module exists. A missing
/// root is skipped; a missing *dependency* is an error (the root could not
/// load). A cycle is an error naming it: the kernel could not load it either.
pub fn load_order(
    roots: &[&str],
    mut deps: impl FnMut(&str) -> Result<Option<Vec<String>>, LookupError>,
) -> Result<Order, ModulesError> {
    #[derive(PartialEq)]
    enum Mark {
        Visiting,
        Done,
    }
    let mut marks: BTreeMap<String, Mark> = BTreeMap::new();
    let mut order = Order {
        modules: Vec::new(),
        missing_roots: Vec::new(),
    };

    for root in roots {
        let root = canonical(root);
        if marks.contains_key(&root) {
            continue;
        }
        let Some(root_deps) = deps(&root).map_err(ModulesError::Lookup)? else {
            order.missing_roots.push(root);
            continue;
        };
        // An explicit stack of (module, its deps, next dep index) so deep
        // chains cannot overflow the native stack.
        let mut stack = vec![(root.clone(), root_deps, 0usize)];
        marks.insert(root, Mark::Visiting);
        while let Some(top) = stack.last_mut() {
            if let Some(dep) = top.1.get(top.2).cloned() {
                top.2 += 1;
                match marks.get(&dep) {
                    Some(Mark::Done) => {}
                    Some(Mark::Visiting) => {
                        let mut cycle: Vec<String> = stack.iter().map(|f| f.0.clone()).collect();
                        let start = cycle.iter().position(|m| *m == dep).unwrap_or(0);
                        cycle.drain(..start);
                        cycle.push(dep);
                        return Err(ModulesError::Cycle { cycle });
                    }
                    None => {
                        let Some(d) = deps(&dep).map_err(ModulesError::Lookup)? else {
                            return Err(ModulesError::MissingDependency {
                                module: top.0.clone(),
                                dep,
                            });
                        };
                        marks.insert(dep.clone(), Mark::Visiting);
                        stack.push((dep, d, 0));
                    }
                }
            } else if let Some((done, _, _)) = stack.pop() {
                marks.insert(done.clone(), Mark::Done);
                order.modules.push(done);
            }
        }
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        edges
            .iter()
            .map(|(m, d)| (m.to_string(), d.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    fn run(roots: &[&str], g: &BTreeMap<String, Vec<String>>) -> Result<Order, ModulesError> {
        load_order(roots, |m| Ok(g.get(m).cloned()))
    }

    #[test]
    fn parses_modinfo_strings() {
        let raw = b"license=GPL\0\0depends=virtio,virtio_ring\0retpoline=Y\0intree=Y\0name=virtio_console\0junk\0\0\0";
        let kv = parse_modinfo(raw);
        assert_eq!(kv[0], ("license".into(), "GPL".into()));
        assert_eq!(kv[1], ("depends".into(), "virtio,virtio_ring".into()));
        assert_eq!(kv.len(), 5);
    }

    #[test]
    fn depends_from_a_handcrafted_ko() {
        let ko = crate::elf::tests::build(
            &[
                (".text", b"\xc3"),
                (".modinfo", b"depends=9pnet,netfs,fscache\0name=9p\0"),
            ],
            &[],
        );
        assert_eq!(depends_of_ko(&ko).unwrap(), ["9pnet", "netfs", "fscache"]);
        let none = crate::elf::tests::build(&[(".modinfo", b"depends=\0name=virtio\0")], &[]);
        assert!(depends_of_ko(&none).unwrap().is_empty());
        let no_modinfo = crate::elf::tests::build(&[(".text", b"\xc3")], &[]);
        assert!(depends_of_ko(&no_modinfo).is_err());
    }

    #[test]
    fn dependencies_come_first_and_once() {
        let g = graph(&[
            ("virtio_console", &["virtio", "virtio_ring"]),
            ("virtio", &[]),
            ("virtio_ring", &["virtio"]),
            ("virtio_mmio", &["virtio", "virtio_ring"]),
            ("9p", &["9pnet", "netfs", "fscache"]),
            ("fscache", &["netfs"]),
            ("netfs", &[]),
            ("9pnet", &[]),
            ("9pnet_virtio", &["virtio_ring", "9pnet", "virtio"]),
        ]);
        let o = run(
            &[
                "virtio-mmio",
                "virtio_console",
                "9pnet_virtio",
                "9p",
                "virtio_rng",
            ],
            &g,
        )
        .unwrap();
        assert_eq!(
            o.modules,
            [
                "virtio",
                "virtio_ring",
                "virtio_mmio",
                "virtio_console",
                "9pnet",
                "9pnet_virtio",
                "netfs",
                "fscache",
                "9p"
            ]
        );
        assert_eq!(o.missing_roots, ["virtio_rng"]);
        for (i, m) in o.modules.iter().enumerate() {
            for d in &g[m] {
                let j = o.modules.iter().position(|x| x == d).unwrap();
                assert!(j < i, "{d} must load before {m}");
            }
        }
    }

    #[test]
    fn cycles_and_missing_dependencies_are_errors() {
        let g = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"])]);
        let err = run(&["a"], &g).unwrap_err().to_string();
        assert!(err.contains("a -> b -> c -> a"), "{err}");
        let self_loop = graph(&[("a", &["a"])]);
        assert!(
            run(&["a"], &self_loop)
                .unwrap_err()
                .to_string()
                .contains("cycle")
        );
        let g = graph(&[("a", &["gone"])]);
        let err = run(&["a"], &g).unwrap_err().to_string();
        assert!(err.contains("a depends on gone"), "{err}");
    }

    #[test]
    fn lookup_errors_propagate() {
        let err = load_order(&["a"], |_| Err("unreadable".into())).unwrap_err();
        assert_eq!(err.to_string(), "unreadable");
    }
}
