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
//!
//! Stripping holds whatever the spelling (SPEC H5; threat model T11). A
//! command gets its environment as `NAME=value` strings, so a name is what the
//! command reads up to the first `=` and a string ends at NUL: the name
//! `LD_PRELOAD=/x.so:y` arrives as `LD_PRELOAD`, and `LD_PRELOAD\0x` too. Each
//! spelling is either refused or stripped:
//!
//! - **refused** ([`check`], before the command policy or a backend sees
//!   the exec): an empty name, a name with `=`, NUL or another control
//!   character, a value with NUL. Nothing sensible is lost: no program can
//!   set such a name itself, and a line break in a name makes one entry
//!   read as two in `env` output;
//! - **refused** by the API ([`unique_names`]): a name given twice in one
//!   JSON object, which parsers resolve differently (first or last wins);
//! - **stripped**: the names below in any ASCII case (`ld_preload`,
//!   `Gh_Token`). Linux reads them case-sensitively, but a lower-case twin is
//!   never needed and other platforms and tools fold case;
//! - **kept**: a value with a line break (certificates, JSON). It is one
//!   variable: `FOO=a\nLD_PRELOAD=/x.so` sets `FOO` only, as the loader and
//!   `/proc/<pid>/environ` see it.

use std::collections::BTreeMap;
use std::fmt;

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

/// Whether a variable is an injection vector, in any ASCII case.
pub fn is_stripped(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    STRIPPED.iter().any(|(n, _)| *n == name)
        || STRIPPED_PREFIXES.iter().any(|(p, _)| name.starts_with(p))
}

/// An environment entry no command may get, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment variable {key:?}: {problem}; remove it or fix its spelling")]
pub struct EnvError {
    /// The name as given.
    pub key: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Refuses the entries a command would read differently than written (see
/// the module doc). Pure; the one dispatch path calls it for every exec.
pub fn check(env: &BTreeMap<String, String>) -> Result<(), EnvError> {
    for (key, value) in env {
        let problem = if key.is_empty() {
            Some("a variable needs a name".to_owned())
        } else if let Some((name, _)) = key.split_once('=') {
            Some(format!(
                "a name cannot hold `=`: the command would read the name `{name}` and the rest \
                 as its value"
            ))
        } else if let Some((name, _)) = key.split_once('\0') {
            Some(format!(
                "a name cannot hold a NUL byte: the command would read only `{name}`"
            ))
        } else if key.chars().any(char::is_control) {
            Some("a name cannot hold a control character (a line break, a tab, …)".to_owned())
        } else if value.contains('\0') {
            Some(
                "a value cannot hold a NUL byte: the command would read only what comes before it"
                    .to_owned(),
            )
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(EnvError {
                key: key.clone(),
                problem,
            });
        }
    }
    Ok(())
}

/// Reads a JSON object of names to values, refusing a name given twice: one
/// parser would take the first value and another the last, so what a
/// client's own check read need not be what runs.
pub fn unique_names<'de, D>(deserializer: D) -> Result<BTreeMap<String, String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    deserializer.deserialize_map(UniqueNames)
}

struct UniqueNames;

impl<'de> serde::de::Visitor<'de> for UniqueNames {
    type Value = BTreeMap<String, String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of variable names and string values")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut env = BTreeMap::new();
        while let Some(name) = map.next_key::<String>()? {
            if env.contains_key(&name) {
                // Failing inside the value names it: `env.NAME`.
                let never = map.next_value_seed(Twice)?;
                match never {}
            }
            let value = map.next_value::<String>()?;
            env.insert(name, value);
        }
        Ok(env)
    }
}

/// The value of a name seen before: always an error.
struct Twice;

impl<'de> serde::de::DeserializeSeed<'de> for Twice {
    type Value = std::convert::Infallible;

    fn deserialize<D: serde::Deserializer<'de>>(self, _: D) -> Result<Self::Value, D::Error> {
        Err(serde::de::Error::custom(
            "this name is given twice; give each variable once",
        ))
    }
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

    /// H5, T11: what a command would read as another name is refused.
    #[test]
    fn names_a_command_would_misread_are_refused() {
        let one = |k: &str, v: &str| BTreeMap::from([(k.to_owned(), v.to_owned())]);
        for (key, value, says) in [
            ("", "x", "needs a name"),
            ("LD_PRELOAD=/x.so:y", "", "the name `LD_PRELOAD`"),
            ("=LD_PRELOAD", "/x.so", "the name ``"),
            ("LD_PRELOAD\0x", "/x.so", "only `LD_PRELOAD`"),
            ("FOO\nLD_PRELOAD", "/x.so", "control character"),
            ("FOO", "a\0b", "a value cannot hold a NUL"),
        ] {
            let err = check(&one(key, value)).unwrap_err();
            assert_eq!(err.key, key);
            assert!(err.to_string().contains(says), "{key:?}: {err}");
        }
        for (key, value) in [
            ("FOO", "a\nLD_PRELOAD=/x.so"),
            ("BASH_FUNC_ls%%", "() { :; }"),
            ("MY VAR", "x"),
        ] {
            assert_eq!(check(&one(key, value)), Ok(()), "{key:?}");
        }
    }

    /// H5, T11: stripping does not depend on the case of a name.
    #[test]
    fn stripping_ignores_case() {
        for name in [
            "ld_preload",
            "Ld_Preload",
            "gh_token",
            "dyld_insert_libraries",
            "bash_func_x%%",
        ] {
            assert!(is_stripped(name), "{name}");
        }
        assert!(!is_stripped("LD_PRELOADX") && !is_stripped("PATH"));
    }

    #[test]
    fn a_name_given_twice_is_refused_naming_it() {
        #[derive(Debug, serde::Deserialize)]
        struct Call {
            #[serde(deserialize_with = "unique_names")]
            #[allow(dead_code)]
            env: BTreeMap<String, String>,
        }
        let err = crate::input::parse_strict::<Call>(
            br#"{"env":{"A":"1","LD_PRELOAD":"","LD_PRELOAD":"/x.so"}}"#,
            "the exec request",
        )
        .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("env.LD_PRELOAD"), "{err}");
        assert!(err.message.contains("twice"), "{err}");
        assert!(crate::input::parse_strict::<Call>(br#"{"env":{"A":"1","B":"1"}}"#, "x").is_ok());
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
