//! The toolchains and version managers the backends know, where they live
//! and what of them is shown how (SPEC G4): their homes are shown
//! read-only (or, for the caches tools write, as a throwaway overlay), a
//! version manager's shim directory — which it rewrites after every install
//! (`pyenv rehash`, `rbenv rehash`, `asdf reshim`) — as a throwaway overlay
//! too, and the credential files inside them masked. Backends find them on
//! the host from these lists; the lists are the rule.

/// A tool's home: where its binaries, versions and shims live.
#[derive(Debug)]
pub struct ToolHome {
    /// The tool's name, for notices.
    pub tool: &'static str,
    /// The variable that names it.
    pub var: &'static str,
    /// Where it is when the variable is not set, relative to `$HOME`.
    pub default: Option<&'static str>,
    /// Taken whenever this other tool's home is (rustup's with cargo's:
    /// cargo's `bin` holds rustup's proxies).
    pub with: Option<&'static str>,
    /// Credential files inside it (relative; `*` is any one name): masked
    /// wherever it is shown, and not held against it as "holds a secret".
    pub secrets: &'static [&'static str],
    /// `Some(dirs)`: a cache the tool writes, shown as an overlay, with
    /// these subdirectories (its binaries) read-only and exec-able on top.
    /// `None`: shown read-only.
    pub overlay: Option<&'static [&'static str]>,
    /// The directory (relative) of the shims a version manager writes
    /// beside itself after an install: shown as a throwaway overlay inside
    /// the read-only home, its programs still run.
    pub shims: Option<&'static str>,
}

/// The homes of the toolchains and version managers we know.
pub const HOMES: &[ToolHome] = &[
    ToolHome {
        tool: "cargo",
        var: "CARGO_HOME",
        default: Some(".cargo"),
        with: None,
        secrets: &["credentials.toml", "credentials"],
        overlay: Some(&["bin"]),
        shims: None,
    },
    ToolHome {
        tool: "rustup",
        var: "RUSTUP_HOME",
        default: Some(".rustup"),
        with: Some("cargo"),
        secrets: &[],
        overlay: None,
        shims: None,
    },
    ToolHome {
        tool: "pyenv",
        var: "PYENV_ROOT",
        default: Some(".pyenv"),
        with: None,
        secrets: &[],
        overlay: None,
        shims: Some("shims"),
    },
    ToolHome {
        tool: "rbenv",
        var: "RBENV_ROOT",
        default: Some(".rbenv"),
        with: None,
        secrets: &[],
        overlay: None,
        shims: Some("shims"),
    },
    ToolHome {
        tool: "nodenv",
        var: "NODENV_ROOT",
        default: Some(".nodenv"),
        with: None,
        secrets: &[],
        overlay: None,
        shims: Some("shims"),
    },
    ToolHome {
        tool: "nvm",
        var: "NVM_DIR",
        default: Some(".nvm"),
        with: None,
        // A node's global npmrc can hold registry tokens.
        secrets: &["versions/node/*/etc/npmrc"],
        overlay: None,
        shims: None,
    },
    ToolHome {
        tool: "volta",
        var: "VOLTA_HOME",
        default: Some(".volta"),
        with: None,
        secrets: &[],
        overlay: None,
        shims: None,
    },
    ToolHome {
        tool: "asdf",
        var: "ASDF_DATA_DIR",
        default: Some(".asdf"),
        with: None,
        secrets: &[],
        overlay: None,
        shims: Some("shims"),
    },
    ToolHome {
        tool: "go",
        var: "GOROOT",
        default: None,
        with: None,
        secrets: &[],
        overlay: None,
        shims: None,
    },
    ToolHome {
        tool: "gopath",
        var: "GOPATH",
        default: Some("go"),
        with: None,
        secrets: &[],
        overlay: Some(&["bin"]),
        shims: None,
    },
];

/// Caches tools write, shown as overlays when they exist: `(tool,
/// variable, default relative to $HOME)`.
pub const CACHES: &[(&str, &str, Option<&str>)] = &[
    ("npm", "npm_config_cache", Some(".npm")),
    ("pip", "PIP_CACHE_DIR", Some(".cache/pip")),
    ("yarn", "YARN_CACHE_FOLDER", Some(".cache/yarn")),
    ("go-build", "GOCACHE", Some(".cache/go-build")),
    ("go-mod", "GOMODCACHE", None),
];
