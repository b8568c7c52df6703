//! Package managers and build tools: installs, publishes, `npx`-style
//! download-and-run, and the table of tools whose subcommands decide.

use super::Cmd;
use super::options::{classify_rest, drop_arg, dynamic, positional_index};
use crate::Class::{self, *};
use crate::walk::Walker;
use crate::words::shown;

/// Classifies `c` when `name` is one of this family's; `false` when it is not.
pub(super) fn dispatch(w: &mut Walker, name: &str, c: Cmd) -> bool {
    match name {
        "yarn" => yarn(w, c),
        "npx" => npx(w, c, 1, Npx::Npx),
        "npm" => npm(w, c),
        "pnpx" | "bunx" | "uvx" => w.found(InstallPackage, c.args, "downloads and runs a package"),
        "uv" => uv(w, c),
        "cargo" => cargo(w, c),
        "rustup" => rustup(w, c),
        "go" => go(w, c),
        "bundle" | "bundler" => {
            if c.text(1) == Some("exec") {
                classify_rest(w, c, 2);
                return true;
            }
            if c.args.len() == 1 {
                w.found(InstallPackage, c.args, "bare `bundle` installs the bundle");
                return true;
            }
            run_tool(w, c, name);
        }
        "apt-cache" | "dpkg-query" | "apt-file" => {
            w.found(ReadOnly, c.args, "queries the package database")
        }
        "dpkg" => {
            if c.has(&["-i", "--install", "--unpack", "-R", "--recursive"]) {
                w.found(InstallPackage, c.args, "installs a package file");
            } else if c.has(&[
                "-l",
                "-L",
                "-s",
                "-S",
                "-p",
                "--list",
                "--listfiles",
                "--status",
                "--search",
                "--print-architecture",
                "--version",
            ]) {
                w.found(ReadOnly, c.args, "queries the package database");
            } else {
                w.found(Other, c.args, "changes installed packages");
            }
        }
        "rpm" => {
            let install = c.args.iter().skip(1).any(|a| {
                let t = a.text.as_str();
                matches!(t, "--install" | "--upgrade" | "--freshen" | "--reinstall")
                    || (t.starts_with('-')
                        && !t.starts_with("--")
                        && t[1..].starts_with(['i', 'U', 'F']))
            });
            if install {
                w.found(InstallPackage, c.args, "installs a package file");
            } else if c
                .args
                .iter()
                .skip(1)
                .any(|a| a.text.starts_with("-q") || a.text == "--query")
            {
                w.found(ReadOnly, c.args, "queries the package database");
            } else {
                w.found(Other, c.args, "changes installed packages");
            }
        }
        "pacman" | "yay" | "paru" | "pamac" => pacman(w, c, name),
        "nix-env" => {
            let install = c.args.iter().skip(1).any(|a| {
                let t = a.text.as_str();
                matches!(t, "--install" | "--upgrade")
                    || (t.starts_with('-')
                        && !t.starts_with("--")
                        && t[1..].starts_with(['i', 'u']))
            });
            if install {
                w.found(InstallPackage, c.args, "installs into a nix profile");
            } else {
                w.found(Other, c.args, "changes a nix profile");
            }
        }
        "nix" => match (c.text(1), c.text(2)) {
            (Some("run" | "shell"), _) => {
                w.found(InstallPackage, c.args, "fetches and runs a package")
            }
            (Some("profile"), Some("install" | "add" | "upgrade")) => {
                w.found(InstallPackage, c.args, "installs into a nix profile")
            }
            _ => w.found(Other, c.args, "nix"),
        },
        "deno" => deno(w, c),
        "dotnet" => match (c.text(1), c.text(2)) {
            (Some("add"), _) if c.text(3) == Some("package") || c.text(2) == Some("package") => {
                w.found(InstallPackage, c.args, "adds a NuGet package")
            }
            (Some("tool" | "workload"), Some("install" | "update" | "restore"))
            | (Some("restore"), _) => {
                w.found(InstallPackage, c.args, "installs .NET packages or tools")
            }
            (Some("nuget"), Some("push")) => {
                w.found(PublishPackage, c.args, "publishes a NuGet package")
            }
            (Some("--version" | "--info" | "--list-sdks" | "--list-runtimes"), _) => {
                w.found(ReadOnly, c.args, "prints .NET information")
            }
            _ => w.found(Other, c.args, "dotnet"),
        },
        "mvn" | "mvnw" => {
            if c.args.iter().skip(1).any(|a| {
                a.text == "deploy" || a.text.starts_with("deploy:") || a.text == "release:perform"
            }) {
                w.found(PublishPackage, c.args, "deploys artifacts to a repository");
            } else {
                w.found(Other, c.args, "runs a Maven build");
            }
        }
        "gradle" | "gradlew" => {
            if c.args.iter().skip(1).any(|a| {
                !a.text.starts_with('-')
                    && a.text
                        .rsplit(':')
                        .next()
                        .is_some_and(|t| t.starts_with("publish"))
            }) {
                w.found(PublishPackage, c.args, "publishes artifacts");
            } else {
                w.found(Other, c.args, "runs a Gradle build");
            }
        }
        "cpanm" | "cpan" => {
            if c.args.len() > 1 {
                w.found(InstallPackage, c.args, "installs Perl modules");
            } else {
                w.found(Other, c.args, "opens the CPAN shell");
            }
        }
        _ => return false,
    }
    true
}

/// A tool classified by its subcommand: the first positional argument.
pub(super) struct Tool {
    names: &'static [&'static str],
    /// Options before the subcommand that take a value.
    value_opts: &'static [&'static str],
    /// Words skipped when they come first (`poetry self add` is classified
    /// as `poetry add`, `conda env create` as `conda create`).
    skip: &'static [&'static str],
    subs: &'static [(&'static [&'static str], Class)],
    /// Any other subcommand.
    default: Class,
}

const NO: &[&str] = &[];

#[rustfmt::skip]
const TOOLS: &[Tool] = &[
    Tool { names: &["npm"], value_opts: &["--prefix", "-w", "--workspace", "--userconfig", "--registry", "--cache", "-C"], skip: NO, default: Other, subs: &[
        (&["install", "i", "in", "ins", "inst", "insta", "instal", "isnt", "isnta", "isntal", "isntall", "add", "ci", "clean-install",
           "ic", "install-clean", "isntall-clean", "install-test", "it", "install-ci-test", "cit", "update", "up", "upgrade", "udpate",
           "link", "ln"], InstallPackage),
        (&["publish", "unpublish", "deprecate", "dist-tag", "owner", "access", "star", "unstar"], PublishPackage),
        (&["view", "v", "info", "show", "outdated", "search", "s", "se", "find", "audit", "ping", "doctor", "whoami", "repo", "docs", "bugs", "fund"], AccessNetwork),
        (&["ls", "list", "ll", "la", "help", "version", "-v", "--version", "prefix", "root", "bin", "explain", "why", "query"], ReadOnly),
    ] },
    Tool { names: &["pnpm"], value_opts: &["-C", "--dir", "--filter", "-F"], skip: NO, default: Other, subs: &[
        (&["install", "i", "add", "update", "up", "upgrade", "install-test", "it", "link", "ln", "fetch", "import", "create", "dlx"], InstallPackage),
        (&["publish"], PublishPackage),
        (&["outdated", "audit", "view", "info"], AccessNetwork),
        (&["ls", "list", "ll", "la", "why", "help", "--version", "-v", "root", "bin"], ReadOnly),
    ] },
    Tool { names: &["yarn"], value_opts: &["--cwd"], skip: &["global"], default: Other, subs: &[
        (&["install", "add", "up", "upgrade", "upgrade-interactive", "dlx", "link", "create"], InstallPackage),
        (&["publish"], PublishPackage),
        (&["info", "outdated", "audit"], AccessNetwork),
        (&["list", "ls", "help", "--version", "-v", "why", "bin", "dir"], ReadOnly),
    ] },
    Tool { names: &["bun"], value_opts: &["--cwd"], skip: NO, default: Other, subs: &[
        (&["install", "i", "add", "a", "update", "upgrade", "link", "x", "create", "c"], InstallPackage),
        (&["publish"], PublishPackage),
        (&["outdated", "info"], AccessNetwork),
        (&["--version", "-v", "--help", "pm"], ReadOnly),
    ] },
    Tool { names: &["pip"], value_opts: &["--proxy", "--python", "--cache-dir", "--log"], skip: NO, default: Other, subs: &[
        (&["install", "download", "wheel"], InstallPackage),
        (&["search", "index"], AccessNetwork),
        (&["list", "show", "freeze", "check", "help", "inspect", "debug", "--version", "-V"], ReadOnly),
    ] },
    Tool { names: &["pipx"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["install", "inject", "upgrade", "upgrade-all", "reinstall", "reinstall-all", "run", "runpip"], InstallPackage),
        (&["list", "environment", "--version"], ReadOnly),
    ] },
    Tool { names: &["poetry"], value_opts: NO, skip: &["self"], default: Other, subs: &[
        (&["add", "install", "update", "sync"], InstallPackage),
        (&["publish"], PublishPackage),
        (&["show", "check", "--version"], ReadOnly),
    ] },
    Tool { names: &["pipenv"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["install", "update", "sync", "upgrade"], InstallPackage),
        (&["graph", "--version", "--venv", "--where"], ReadOnly),
    ] },
    Tool { names: &["conda", "mamba", "micromamba"], value_opts: NO, skip: &["env"], default: Other, subs: &[
        (&["install", "create", "update", "upgrade"], InstallPackage),
        (&["search"], AccessNetwork),
        (&["list", "info", "--version"], ReadOnly),
    ] },
    Tool { names: &["cargo"], value_opts: &["-Z", "--config", "-C", "--color"], skip: NO, default: Other, subs: &[
        (&["install", "binstall", "add"], InstallPackage),
        (&["publish", "yank", "owner"], PublishPackage),
        (&["search", "info", "fetch"], AccessNetwork),
        (&["tree", "metadata", "--version", "-V", "version", "help", "locate-project", "pkgid", "read-manifest", "verify-project", "--list"], ReadOnly),
    ] },
    Tool { names: &["gem"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["install", "i", "update"], InstallPackage),
        (&["push", "yank", "owner"], PublishPackage),
        (&["search", "fetch"], AccessNetwork),
        (&["list", "info", "query", "specification", "contents", "env", "help", "--version", "which"], ReadOnly),
    ] },
    Tool { names: &["bundle", "bundler"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["install", "i", "add", "update"], InstallPackage),
        (&["list", "show", "info", "--version", "version", "check"], ReadOnly),
    ] },
    Tool { names: &["brew"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["install", "reinstall", "upgrade", "tap", "bundle", "link"], InstallPackage),
        (&["list", "ls", "info", "search", "--version", "config", "doctor", "outdated", "deps", "leaves", "desc", "home", "--prefix", "uses"], ReadOnly),
    ] },
    Tool { names: &["apt", "apt-get", "aptitude"], value_opts: &["-o", "-t", "-c", "--target-release", "--option", "--config-file"], skip: NO, default: Other, subs: &[
        (&["install", "reinstall", "upgrade", "dist-upgrade", "full-upgrade", "update", "build-dep", "source", "download", "satisfy"], InstallPackage),
        (&["search", "show", "list", "policy", "showpkg", "depends", "rdepends", "changelog", "--version", "madison"], ReadOnly),
    ] },
    Tool { names: &["dnf", "yum", "microdnf", "tdnf", "zypper"], value_opts: &["-c", "--config", "--releasever", "--installroot", "--repo", "--enablerepo", "--disablerepo"], skip: NO, default: Other, subs: &[
        (&["install", "in", "reinstall", "update", "upgrade", "up", "groupinstall", "localinstall", "makecache", "distro-sync", "dup",
           "dist-upgrade", "install-new-recommends", "group"], InstallPackage),
        (&["list", "info", "search", "se", "if", "repolist", "provides", "whatprovides", "repoquery", "check-update", "--version"], ReadOnly),
    ] },
    Tool { names: &["apk"], value_opts: &["-X", "--repository", "-p", "--root"], skip: NO, default: Other, subs: &[
        (&["add", "upgrade", "update", "fix"], InstallPackage),
        (&["info", "search", "list", "policy", "version", "--version"], ReadOnly),
    ] },
    Tool { names: &["snap", "flatpak"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["install", "refresh", "update", "upgrade"], InstallPackage),
        (&["list", "info", "search", "find", "--version"], ReadOnly),
    ] },
    Tool { names: &["port"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["install", "upgrade", "selfupdate", "sync"], InstallPackage),
        (&["installed", "info", "search", "list", "version"], ReadOnly),
    ] },
    Tool { names: &["composer"], value_opts: &["-d", "--working-dir"], skip: &["global"], default: Other, subs: &[
        (&["install", "i", "require", "update", "upgrade", "create-project"], InstallPackage),
        (&["show", "info", "outdated", "validate", "--version", "diagnose", "licenses", "depends", "why", "why-not"], ReadOnly),
    ] },
    Tool { names: &["twine"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["upload", "register"], PublishPackage),
        (&["check", "--version"], ReadOnly),
    ] },
    Tool { names: &["flit", "hatch", "maturin"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["publish", "upload"], PublishPackage),
        (&["--version", "version"], ReadOnly),
    ] },
    Tool { names: &["luarocks"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["install"], InstallPackage),
        (&["upload"], PublishPackage),
        (&["list", "show", "search"], ReadOnly),
    ] },
    Tool { names: &["cabal", "stack", "opam"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["install"], InstallPackage),
        (&["upload", "publish"], PublishPackage),
        (&["--version", "list"], ReadOnly),
    ] },
    Tool { names: &["mix"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["deps.get", "archive.install", "local.hex", "local.rebar", "escript.install"], InstallPackage),
        (&["hex.publish"], PublishPackage),
    ] },
    Tool { names: &["asdf", "mise", "rtx", "volta", "nvm", "pyenv", "rbenv", "nodenv", "sdk", "fnm", "proto"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["install", "use", "plugin-add", "global"], InstallPackage),
        (&["list", "ls", "current", "which", "version", "--version", "ls-remote"], ReadOnly),
    ] },
    Tool { names: &["helm"], value_opts: NO, skip: NO, default: Other, subs: &[
        (&["push"], PublishPackage),
        (&["repo", "list", "ls", "version", "template", "lint", "show", "get", "status", "history"], AccessNetwork),
    ] },
];

pub(super) fn tool(name: &str) -> Option<&'static Tool> {
    TOOLS.iter().find(|t| t.names.contains(&name))
}

/// Classify a [`TOOLS`] entry by its subcommand. With no subcommand: help
/// or version output (read-only), unless xargs appends one.
pub(super) fn run_tool(w: &mut Walker, c: Cmd, name: &str) {
    let Some(t) = tool(name) else {
        w.found(Other, c.args, "");
        return;
    };
    let Some(mut i) = positional_index(c, 1, t.value_opts) else {
        if c.appended {
            w.opaque(
                format!("xargs supplies the subcommand: {}", shown(c.args)),
                None,
            );
        } else if let Some((_, class)) = t.subs.iter().find(|(subs, _)| c.has(subs)) {
            // `--version` and friends listed in the table.
            w.found(*class, c.args, "");
        } else {
            w.found(ReadOnly, c.args, "prints help or version");
        }
        return;
    };
    if t.skip.contains(&c.args[i].text.as_str()) && i + 1 < c.args.len() {
        i += 1;
    }
    let a = &c.args[i];
    if !a.literal {
        dynamic(w, c, "subcommand");
        return;
    }
    let class = t
        .subs
        .iter()
        .find(|(subs, _)| subs.contains(&a.text.as_str()))
        .map_or(t.default, |(_, class)| *class);
    w.found(class, c.args, "");
}

/// `npm`: by the [`TOOLS`] table, except `init`/`create` and `exec`/`x`,
/// whose effect depends on their operands.
fn npm(w: &mut Walker, c: Cmd) {
    let sub = tool("npm")
        .and_then(|t| positional_index(c, 1, t.value_opts))
        .filter(|&i| c.args[i].literal);
    match sub.map(|i| (i, c.args[i].text.as_str())) {
        Some((i, "init" | "create")) => npm_init(w, c, i + 1),
        Some((i, "exec" | "x")) => {
            // npm's own options before the subcommand can move the lookup.
            let moved = c.args[1..i].iter().any(|a| {
                let name = a.text.split_once('=').map_or(a.text.as_str(), |(n, _)| n);
                !a.literal
                    || [
                        "--prefix",
                        "-C",
                        "-w",
                        "--workspace",
                        "--workspaces",
                        "--ws",
                    ]
                    .contains(&name)
            });
            npx(w, c, i + 1, Npx::NpmExec { moved });
        }
        _ => run_tool(w, c, "npm"),
    }
}

/// `npm init` / `npm create` with no initializer writes a `package.json`
/// and installs nothing (SPEC H7); with one (`npm init vite`,
/// `npm init @scope`) it is `npm exec create-vite`, which downloads it.
/// An option whose value is not listed here is taken for an initializer:
/// the stricter reading.
fn npm_init(w: &mut Walker, c: Cmd, start: usize) {
    const VALUE_OPTS: &[&str] = &[
        "-w",
        "--workspace",
        "--scope",
        "--init-author-name",
        "--init-author-email",
        "--init-author-url",
        "--init-license",
        "--init-module",
        "--init-version",
    ];
    if positional_index(c, start, VALUE_OPTS).is_some() || c.appended {
        w.found(
            InstallPackage,
            c.args,
            "an initializer is `npm exec create-<name>`, which downloads it",
        );
    } else {
        w.found(
            Other,
            c.args,
            "writes package.json; without an initializer it installs nothing",
        );
    }
}

/// Which of the two spellings of the same tool.
#[derive(Clone, Copy)]
enum Npx {
    /// `npx`: its options end at the first operand (the rest is the bin's).
    Npx,
    /// `npm exec`: npm reads options anywhere before `--`; `moved` when
    /// npm's own options before `exec` already moved the lookup.
    NpmExec { moved: bool },
}

/// `npx …` and `npm exec …` (their options start at `start`): download a
/// package and run it — unless it certainly runs something installed
/// already (SPEC H7). `--no` / `--no-install` before the operand
/// forbid the download (npm cancels instead); a plain bin name the host
/// found in `node_modules/.bin` ([`crate::Workdir`]) runs that local file,
/// as long as nothing moves the lookup (`--prefix`, `--workspace`, a `cd`
/// earlier in the line) or names packages to fetch (`--package`). `--call`
/// runs a shell string this classifier does not read, so with it the
/// command stays an install whatever else it says.
fn npx(w: &mut Walker, c: Cmd, start: usize, spelling: Npx) {
    let mut no_download = false;
    let mut call = false;
    let mut elsewhere = matches!(spelling, Npx::NpmExec { moved: true });
    let mut operand = None;
    let mut i = start;
    while let Some(a) = c.args.get(i) {
        let t = a.text.as_str();
        if !a.literal {
            // Computed options or operand: nothing certain, so an install.
            elsewhere = true;
            break;
        }
        if t == "--" {
            operand = operand.or(c.args.get(i + 1));
            break;
        }
        if !t.starts_with('-') || t == "-" {
            operand = operand.or(Some(a));
            match spelling {
                Npx::Npx => break,
                Npx::NpmExec { .. } => {
                    i += 1;
                    continue;
                }
            }
        }
        let (name, inline_value) = match t.split_once('=') {
            Some((name, _)) => (name, true),
            None => (t, false),
        };
        let takes_value = match name {
            "--no" | "--no-install" => {
                no_download = true;
                false
            }
            "-c" | "--call" => {
                call = true;
                true
            }
            "-p" | "--package" | "--prefix" | "-w" | "--workspace" => {
                elsewhere = true;
                true
            }
            "--workspaces" | "--ws" | "--include-workspace-root" => {
                elsewhere = true;
                false
            }
            // A cluster of short flags (`-yc`): the strict reading.
            cluster if !cluster.starts_with("--") && cluster.len() > 2 => {
                call |= cluster.contains('c');
                elsewhere |= cluster.contains(['p', 'w']);
                false
            }
            _ => false,
        };
        i += if takes_value && !inline_value { 2 } else { 1 };
    }
    if call {
        w.found(
            InstallPackage,
            c.args,
            "downloads packages and runs a shell string (`--call`)",
        );
    } else if no_download {
        w.found(
            Other,
            c.args,
            "`--no` forbids downloading: runs a package already installed",
        );
    } else if let Some(bin) = operand
        .filter(|a| !elsewhere && !w.moved && !c.appended && w.workdir.npm_bins.contains(&a.text))
    {
        let why = format!(
            "node_modules/.bin/{} exists in the working directory: runs local code, downloads nothing",
            bin.text
        );
        w.found(Other, c.args, &why);
    } else {
        w.found(InstallPackage, c.args, "downloads and runs a package");
    }
}

fn yarn(w: &mut Walker, c: Cmd) {
    let bare = positional_index(c, 1, &["--cwd"]).is_none();
    if bare && !c.has(&["--version", "-v", "--help", "-h"]) && !c.appended {
        w.found(InstallPackage, c.args, "bare `yarn` installs dependencies");
    } else if c.text(1) == Some("npm") && c.has(&["publish"]) {
        w.found(PublishPackage, c.args, "");
    } else {
        run_tool(w, c, "yarn");
    }
}

fn cargo(w: &mut Walker, c: Cmd) {
    // `cargo +nightly install …`
    if c.text(1).is_some_and(|t| t.starts_with('+')) {
        run_tool(w, c.with(&drop_arg(c, 1)), "cargo");
    } else {
        run_tool(w, c, "cargo");
    }
}

pub(super) fn uv(w: &mut Walker, c: Cmd) {
    let i = positional_index(c, 1, &["--directory", "--project", "--python", "-p"]);
    let sub = i.and_then(|i| c.text(i));
    let next = i.and_then(|i| c.text(i + 1));
    let (class, why) = match (sub, next) {
        (Some("add" | "sync"), _) => (InstallPackage, ""),
        (Some("pip"), Some("install" | "sync")) => (InstallPackage, ""),
        (Some("pip"), Some("list" | "show" | "freeze" | "tree" | "check")) => (ReadOnly, ""),
        (Some("tool"), Some("install" | "upgrade" | "run")) => (InstallPackage, ""),
        (Some("tool"), Some("list" | "dir")) => (ReadOnly, ""),
        (Some("python"), Some("install")) => (InstallPackage, "installs a Python"),
        (Some("python"), Some("list" | "find" | "dir")) => (ReadOnly, ""),
        (Some("self"), Some("update")) => (InstallPackage, "updates uv"),
        (Some("run"), _) if c.has_prefix(&["--with"]) => {
            (InstallPackage, "installs packages for the run")
        }
        (Some("publish"), _) => (PublishPackage, ""),
        (Some("tree" | "version" | "help" | "--version"), _) => (ReadOnly, ""),
        (None, _) => (ReadOnly, "prints help"),
        _ => (Other, ""),
    };
    w.found(class, c.args, why);
}

fn rustup(w: &mut Walker, c: Cmd) {
    match (c.text(1), c.text(2)) {
        (Some("toolchain" | "component" | "target"), Some("install" | "add"))
        | (Some("install" | "update"), _) => w.found(
            InstallPackage,
            c.args,
            "installs Rust toolchains or components",
        ),
        (Some("self"), Some("update")) => w.found(InstallPackage, c.args, "updates rustup"),
        (Some("run"), Some(_)) => classify_rest(w, c, 3),
        (Some("show" | "which" | "--version" | "-V" | "help"), _)
        | (Some("toolchain" | "component" | "target"), Some("list")) => {
            w.found(ReadOnly, c.args, "")
        }
        _ => w.found(Other, c.args, ""),
    }
}

pub(super) fn go(w: &mut Walker, c: Cmd) {
    match (c.text(1), c.text(2)) {
        (Some("install" | "get"), _) => w.found(InstallPackage, c.args, ""),
        (Some("run"), _)
            if c.rest(2)
                .iter()
                .any(|a| !a.text.starts_with('-') && a.text.contains('@')) =>
        {
            w.found(InstallPackage, c.args, "downloads and runs a module")
        }
        (Some("mod"), Some("download")) => w.found(AccessNetwork, c.args, "downloads modules"),
        (Some("env"), _) if c.has(&["-w", "-u"]) => w.found(Other, c.args, "changes go settings"),
        (Some("version" | "env" | "list" | "doc" | "help"), _) | (None, _) => {
            w.found(ReadOnly, c.args, "")
        }
        _ => w.found(Other, c.args, ""),
    }
}

fn deno(w: &mut Walker, c: Cmd) {
    match c.text(1) {
        Some("install" | "add" | "cache" | "upgrade") => w.found(InstallPackage, c.args, ""),
        Some("publish") => w.found(PublishPackage, c.args, ""),
        Some("run")
            if c.rest(2).iter().any(|a| {
                ["http:", "https:", "npm:", "jsr:"]
                    .iter()
                    .any(|p| a.text.starts_with(p))
            }) =>
        {
            w.found(InstallPackage, c.args, "downloads and runs a module")
        }
        Some("--version" | "-V" | "info" | "help") => w.found(ReadOnly, c.args, ""),
        _ => w.found(Other, c.args, ""),
    }
}

fn pacman(w: &mut Walker, c: Cmd, name: &str) {
    let mut class = None;
    for a in c.args.iter().skip(1) {
        let t = a.text.as_str();
        if t == "--sync" || t == "--upgrade" || t.starts_with("-U") {
            class = Some(InstallPackage);
        } else if let Some(flags) = t.strip_prefix("-S") {
            let query = flags.contains(['s', 'i', 'l', 'g', 'p']) && !flags.contains(['y', 'u']);
            class = Some(if query { ReadOnly } else { InstallPackage });
        } else if t.starts_with("-Q") || t.starts_with("-F") || t == "--version" || t == "-V" {
            class.get_or_insert(ReadOnly);
        }
    }
    let class = class.unwrap_or(if name == "pacman" {
        Other
    } else {
        InstallPackage
    });
    w.found(class, c.args, "");
}
