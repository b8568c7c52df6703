//! The actions a [`SandboxViolation`](crate::SandboxViolation) names, one
//! vocabulary for every backend, and what each means to the person who
//! meets it: the rule that refused and what would allow it (every refusal
//! explains itself). Backends fill `action`; hosts show [`explain`]'s words.

/// A file of a name the dispatch policy forbids was not created (the
/// create-time guard, exactly).
pub const FILE_WRITE_CREATE: &str = "file-write-create";
/// A kept file was not written, truncated or linked (the guard).
pub const FILE_WRITE_DATA: &str = "file-write-data";
/// A kept name was not renamed or removed (the guard).
pub const FILE_WRITE_UNLINK: &str = "file-write-unlink";
/// A kept file's mode was not changed (the guard).
pub const FILE_WRITE_MODE: &str = "file-write-mode";
/// A kept file's extended attributes were not changed (the guard).
pub const FILE_WRITE_XATTR: &str = "file-write-xattr";
/// A write met a read-only mount (from the command's stderr).
pub const FILE_WRITE: &str = "file-write";
/// A file access was refused (from the command's stderr).
pub const FILE_ACCESS: &str = "file-access";
/// An operation was not permitted (from the command's stderr).
pub const OPERATION: &str = "operation";
/// A program was not allowed to execute.
pub const PROCESS_EXEC: &str = "process-exec";
/// An outbound connection was refused by the session's egress proxy.
pub const NETWORK_OUTBOUND: &str = "network-outbound";
/// A connect to a unix socket not made inside the sandbox (a host
/// service's, below a bind) was refused (the guard).
pub const NETWORK_UNIX_SOCKET: &str = "network-unix-socket";
/// A ref of a push was refused by the push gateway (`target`: the
/// repository and the ref).
pub const GIT_PUSH: &str = "git-push";
/// The sandbox held more than its share of the host's open-file table
/// while the table was filling up: its commands were killed.
pub const RESOURCE_OPEN_FILES: &str = "resource-open-files";

/// What a refusal means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Explanation {
    /// The rule that refused, in words.
    pub rule: &'static str,
    /// The flag or config key that changes it, or why nothing does.
    pub remedy: &'static str,
    /// Guessed from what the command printed (SPEC F12), not reported by
    /// the kernel, the guard or the proxy.
    pub inferred: bool,
}

/// The explanation of an action; `None` for one this version does not know.
pub fn explain(action: &str) -> Option<Explanation> {
    let (rule, remedy, inferred) = match action {
        FILE_WRITE_CREATE | FILE_WRITE_DATA | FILE_WRITE_UNLINK | FILE_WRITE_MODE
        | FILE_WRITE_XATTR => (
            "the create-time guard refuses this name here: a glob of the dispatch policy (secrets, rc files, git hooks, agent config), or an allowlist where the host keeps code (a bound home's dot-paths, a git directory that existed at launch, PATH directories)",
            "the globs are `[dispatch_policy] write_deny_globs` in the config; the allowlists are not configurable: make the change on the host, or run without binding the home",
            false,
        ),
        FILE_WRITE => (
            "read-only here: outside the writable binds, a read-only mode, a protected path, or one of your toolchains (shown read-only; their caches and shims are throwaway overlays)",
            "bind the directory writable (`--bind PATH`, `bindMounts`) in chat mode; for a toolchain, install into a venv or with `--user` instead; protected paths and the mandatory denies stay read-only",
            true,
        ),
        FILE_ACCESS => (
            "outside what the sandbox may read or write (writes only beneath writable binds, secrets masked)",
            "bind the directory (`--bind PATH[:ro]`, `bindMounts`); secrets stay masked",
            true,
        ),
        OPERATION => (
            "not permitted inside a sandbox (no capabilities, no new namespaces, a seccomp filter)",
            "none: run it on the host",
            true,
        ),
        PROCESS_EXEC => (
            "commands execute only from the system view and exec grants",
            "grant its directory: `--exec-grant DIR` (cc_server run), `execGrantRoots` (the spec); host tools: `[backends.bwrap] system_paths`",
            true,
        ),
        NETWORK_OUTBOUND => (
            "the host is not on the session's egress allowlist, or is denied",
            "`--allow-domain PATTERN` (cc_server run), `[egress] allow` (config), `egressAllowlist` (the spec)",
            false,
        ),
        NETWORK_UNIX_SOCKET => (
            "a unix socket below a bind that was not made inside the sandbox is a host service's (Docker, D-Bus, X11, an agent): connecting to it is refused",
            "allow that socket by its host path: `--allow-socket PATH` (cc_server run), `unixSockets` (the spec)",
            false,
        ),
        GIT_PUSH => (
            "the push gateway refused this ref by the guardrails' `push_remote` rule (or the repository is not linked to the run)",
            "a `push_remote` rule in the guardrails file (`[policy] guardrails`), `branches` for the branch; repositories: `[gateway] repositories`",
            false,
        ),
        RESOURCE_OPEN_FILES => (
            "the host's open-file table (`fs.file-max`) was past its watermark and this sandbox held more than its share of the sandboxes' half: every command of the sandbox was killed so the host's own programs can still open files",
            "fewer shares, so each is larger: `[backends.bwrap] counter_slots`; the watermark: `[backends.bwrap] open_files_watermark`",
            false,
        ),
        _ => return None,
    };
    Some(Explanation {
        rule,
        remedy,
        inferred,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_has_a_rule_and_a_remedy() {
        for action in [
            FILE_WRITE_CREATE,
            FILE_WRITE_DATA,
            FILE_WRITE_UNLINK,
            FILE_WRITE_MODE,
            FILE_WRITE_XATTR,
            FILE_WRITE,
            FILE_ACCESS,
            OPERATION,
            PROCESS_EXEC,
            NETWORK_OUTBOUND,
            NETWORK_UNIX_SOCKET,
            GIT_PUSH,
            RESOURCE_OPEN_FILES,
        ] {
            let e = explain(action).unwrap();
            assert!(e.rule.len() > 20 && e.remedy.len() > 4, "{action}");
        }
        assert_eq!(explain("file-read*"), None);
    }
}
