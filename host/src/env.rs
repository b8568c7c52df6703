//! The environment a sandboxed command starts with (SPEC H5).
//!
//! Injection vectors are removed before any process starts, on every backend:
//! each makes an interpreter or the dynamic linker run code the command did
//! not ask for. Forge, tracker and registry write credentials go too (SPEC
//! H9). This list is the one place they are named; [`prepare`] applies it
//! inside the one dispatch path, so no entry point can skip it.
//!
//! There is no "inherit the host environment" switch: the seeds'
//! NoSandboxAdapter passed the host env through, and here even the `none`
//! backend gets the sanitized one.

use std::collections::BTreeMap;

/// Exact names removed from every command's environment, with why.
pub const STRIPPED: &[(&str, &str)] = &[
    (
        "LD_PRELOAD",
        "loads a library into every dynamically linked process",
    ),
    (
        "LD_AUDIT",
        "loads an auditing library into the dynamic linker",
    ),
    (
        "LD_LIBRARY_PATH",
        "makes the linker resolve libraries from attacker-chosen paths",
    ),
    ("LD_DEBUG_OUTPUT", "makes the linker write files"),
    (
        "GCONV_PATH",
        "makes glibc load iconv modules from a chosen path",
    ),
    (
        "HOSTALIASES",
        "redirects host name lookups through a chosen file",
    ),
    (
        "NODE_OPTIONS",
        "passes --require/--import to every node process",
    ),
    ("NODE_PATH", "adds module search paths for node"),
    ("BASH_ENV", "a file every non-interactive bash sources"),
    ("ENV", "a file every POSIX sh sources"),
    ("PROMPT_COMMAND", "runs on every interactive bash prompt"),
    ("PYTHONSTARTUP", "a file the python REPL runs"),
    (
        "PYTHONPATH",
        "adds module search paths for python (sitecustomize)",
    ),
    ("PYTHONHOME", "replaces python's standard library"),
    ("PYTHONINSPECT", "drops python into a REPL after the script"),
    ("PERL5OPT", "command-line options for every perl"),
    ("PERL5LIB", "module search paths for perl"),
    ("PERLLIB", "module search paths for perl"),
    ("RUBYOPT", "command-line options (-r) for every ruby"),
    ("RUBYLIB", "module search paths for ruby"),
    (
        "JAVA_TOOL_OPTIONS",
        "JVM options (-javaagent) for every java",
    ),
    ("_JAVA_OPTIONS", "JVM options for every java"),
    ("JDK_JAVA_OPTIONS", "JVM options for the java launcher"),
    (
        "GIT_SSH_COMMAND",
        "runs a chosen command for every git-over-ssh",
    ),
    ("GIT_SSH", "runs a chosen program for every git-over-ssh"),
    ("GIT_EXEC_PATH", "replaces git's helper programs"),
    (
        "GIT_CONFIG_GLOBAL",
        "replaces git's global config (hooks, aliases, fsmonitor)",
    ),
    ("GIT_CONFIG_SYSTEM", "replaces git's system config"),
    (
        "GIT_TEMPLATE_DIR",
        "installs hooks into every new repository",
    ),
    (
        "GIT_ASKPASS",
        "runs a chosen program to ask for credentials",
    ),
    (
        "SSH_ASKPASS",
        "runs a chosen program to ask for credentials",
    ),
    ("PAGER", "runs a chosen program for paged output"),
    ("GIT_PAGER", "runs a chosen program for git's paged output"),
    ("EDITOR", "runs a chosen program as the editor"),
    ("VISUAL", "runs a chosen program as the editor"),
    ("LESSOPEN", "runs a chosen input preprocessor in less"),
    ("MANPAGER", "runs a chosen program for man pages"),
    // SPEC H9: no forge, ticketing or registry write credential is placed
    // in a sandbox. The command would act with the owner's full rights,
    // past every guardrail.
    (
        "GH_TOKEN",
        "a GitHub token: pushes, merges and issue writes as the owner",
    ),
    (
        "GITHUB_TOKEN",
        "a GitHub token: pushes, merges and issue writes as the owner",
    ),
    ("GH_ENTERPRISE_TOKEN", "a GitHub Enterprise token"),
    ("GITHUB_ENTERPRISE_TOKEN", "a GitHub Enterprise token"),
    (
        "GITLAB_TOKEN",
        "a GitLab token: pushes, merges and issue writes as the owner",
    ),
    ("GL_TOKEN", "a GitLab token (glab)"),
    ("GITEA_TOKEN", "a Gitea/Forgejo token"),
    ("BITBUCKET_TOKEN", "a Bitbucket token"),
    (
        "JIRA_API_TOKEN",
        "a Jira token: tracker writes as the owner",
    ),
    ("JIRA_TOKEN", "a Jira token: tracker writes as the owner"),
    (
        "LINEAR_API_KEY",
        "a Linear key: tracker writes as the owner",
    ),
    (
        "ASANA_ACCESS_TOKEN",
        "an Asana token: tracker writes as the owner",
    ),
    (
        "SHORTCUT_API_TOKEN",
        "a Shortcut token: tracker writes as the owner",
    ),
    (
        "YOUTRACK_TOKEN",
        "a YouTrack token: tracker writes as the owner",
    ),
    ("NPM_TOKEN", "publishes npm packages as the owner"),
    ("NODE_AUTH_TOKEN", "publishes npm packages as the owner"),
    ("CARGO_REGISTRY_TOKEN", "publishes crates as the owner"),
    ("TWINE_PASSWORD", "uploads Python packages as the owner"),
    ("TWINE_USERNAME", "pairs with TWINE_PASSWORD (`__token__`)"),
    ("PYPI_TOKEN", "uploads Python packages as the owner"),
    ("UV_PUBLISH_TOKEN", "uploads Python packages as the owner"),
    ("GEM_HOST_API_KEY", "pushes Ruby gems as the owner"),
];

/// Name prefixes removed from every command's environment, with why.
pub const STRIPPED_PREFIXES: &[(&str, &str)] = &[
    (
        "DYLD_",
        "macOS dynamic linker injection (DYLD_INSERT_LIBRARIES and the rest)",
    ),
    ("LD_PRELOAD_", "variants of LD_PRELOAD"),
    (
        "GIT_CONFIG_",
        "GIT_CONFIG_COUNT/KEY_n/VALUE_n inject git config entries",
    ),
    (
        "BASH_FUNC_",
        "exported bash functions, run in place of commands",
    ),
];

/// Whether a variable is an injection vector.
pub fn is_stripped(name: &str) -> bool {
    STRIPPED.iter().any(|(n, _)| *n == name)
        || STRIPPED_PREFIXES.iter().any(|(p, _)| name.starts_with(p))
}

/// Set in every command's environment after sanitizing, with why.
pub const SET: &[(&str, &str, &str)] = &[(
    "GIT_TEMPLATE_DIR",
    "",
    "new repositories get no template hooks, whatever init.templateDir says",
)];

/// Removes every injection vector and credential, then sets ours; returns
/// the names removed. Every command of every backend starts with this.
pub fn prepare(env: &mut BTreeMap<String, String>) -> Vec<String> {
    let removed = sanitize(env);
    for (name, value, _) in SET {
        env.insert((*name).to_owned(), (*value).to_owned());
    }
    removed
}

/// Removes every injection vector; returns the names removed.
pub fn sanitize(env: &mut BTreeMap<String, String>) -> Vec<String> {
    let removed: Vec<String> = env.keys().filter(|k| is_stripped(k)).cloned().collect();
    for name in &removed {
        env.remove(name);
    }
    removed
}

/// `PATH` of an API exec when the server has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The base environment of an API exec: enough to run ordinary tools. `PATH`
/// is the server's own (SPEC G4: the user's toolchains on it are shown in
/// the sandbox, found from the same variable), else [`DEFAULT_PATH`];
/// toolchain homes (`CARGO_HOME`, `RUSTUP_HOME`, `PYENV_ROOT`, …) pass as
/// the server has them, so the tools find what the sandbox shows.
pub fn api_base() -> BTreeMap<String, String> {
    let path = std::env::var("PATH")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_PATH.to_owned());
    let mut env = BTreeMap::from([
        ("PATH".to_owned(), path),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
    ]);
    for name in [
        "HOME",
        "USER",
        "LOGNAME",
        "TMPDIR",
        "TZ",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
        "PYENV_ROOT",
        "PYENV_VERSION",
        "NVM_DIR",
        "GOROOT",
        "GOPATH",
    ] {
        if let Ok(value) = std::env::var(name) {
            env.insert(name.to_owned(), value);
        }
    }
    env
}

/// The current process's environment (for `cc_server run`), as UTF-8 pairs.
pub fn inherited() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injection_vectors_are_removed_and_the_rest_kept() {
        let mut env: BTreeMap<String, String> = [
            ("LD_PRELOAD", "/tmp/evil.so"),
            ("DYLD_INSERT_LIBRARIES", "/tmp/evil.dylib"),
            ("NODE_OPTIONS", "--require /tmp/x.js"),
            ("BASH_FUNC_ls%%", "() { evil; }"),
            ("GIT_CONFIG_COUNT", "1"),
            ("PATH", "/usr/bin"),
            ("HOME", "/home/a"),
            ("TERM", "xterm"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let mut removed = sanitize(&mut env);
        removed.sort();
        assert_eq!(
            removed,
            [
                "BASH_FUNC_ls%%",
                "DYLD_INSERT_LIBRARIES",
                "GIT_CONFIG_COUNT",
                "LD_PRELOAD",
                "NODE_OPTIONS"
            ]
        );
        assert_eq!(env.keys().collect::<Vec<_>>(), ["HOME", "PATH", "TERM"]);
    }

    #[test]
    fn credentials_are_removed_and_ours_set() {
        let mut env: BTreeMap<String, String> = [
            ("GH_TOKEN", "ghp_x"),
            ("NPM_TOKEN", "npm_x"),
            ("GIT_TEMPLATE_DIR", "/tmp/evil-hooks"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let mut removed = prepare(&mut env);
        removed.sort();
        assert_eq!(removed, ["GH_TOKEN", "GIT_TEMPLATE_DIR", "NPM_TOKEN"]);
        assert_eq!(env.keys().collect::<Vec<_>>(), ["GIT_TEMPLATE_DIR"]);
        assert_eq!(env["GIT_TEMPLATE_DIR"], "");
    }

    /// G4: an API exec looks commands up on the server's own PATH, where
    /// the bwrap backend found the toolchains it shows.
    #[test]
    fn the_api_base_path_is_the_servers() {
        let base = api_base();
        match std::env::var("PATH") {
            Ok(path) if !path.is_empty() => assert_eq!(base["PATH"], path),
            _ => assert_eq!(base["PATH"], DEFAULT_PATH),
        }
        assert_eq!(base["LANG"], "C.UTF-8");
    }

    #[test]
    fn every_entry_has_a_reason() {
        for (name, why) in STRIPPED.iter().chain(STRIPPED_PREFIXES) {
            assert!(!name.is_empty() && why.len() > 10, "{name}");
        }
        for (name, _, why) in SET {
            assert!(
                is_stripped(name),
                "{name} is set but a caller's value is not removed first"
            );
            assert!(why.len() > 10, "{name}");
        }
    }
}
