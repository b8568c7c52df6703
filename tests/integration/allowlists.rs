//! Code the host runs later is never planted (SPEC G5; docs/threat-model.md
//! §4): where the host keeps code, an allowlist says what may change.
//! Black-box, as the account running the tests and as the unprivileged
//! `cc-test` (`.ci/install-deps` makes it): the real `cc_server run
//! --backend bwrap`, the sandbox layer alone, against a home and
//! repositories made here in temp dirs; each attempt would run a payload on
//! the host if it worked, so afterwards the host's own programs are run as
//! that account — `bash -i`, `python3`, `git status`, `git commit` — and
//! must run nothing (the payloads touch a marker in a directory no sandbox
//! sees). Generated cases try names no list could hold.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::util::*;

/// The first line of every script: unless PID 1 is `sandbox-init`, stop.
const ONLY_IN_A_SANDBOX: &str = "grep -q sandbox-init /proc/1/cmdline 2>/dev/null \
    || { echo 'cc-test: not in a bwrap sandbox; refusing to run the script' >&2; exit 99; }\n";

/// The unprivileged test account.
const TEST_USER: &str = "cc-test";

/// Who runs a case.
#[derive(Clone, Debug)]
pub(crate) struct Account {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) invoking: bool,
}

/// The account running the tests, and `cc-test` when the tests run as
/// root; without root its part is skipped, saying so (a failure under CI).
pub(crate) fn accounts() -> Vec<Account> {
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut out = vec![Account {
        uid,
        gid,
        invoking: true,
    }];
    if uid != 0 {
        skip_or_fail(format!(
            "the unprivileged case runs as `{TEST_USER}`, which needs the tests to run as \
             root (CI does, after `.ci/install-deps` made `{TEST_USER}`)"
        ));
        return out;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let entry = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f[0] == TEST_USER)
        .unwrap_or_else(|| {
            panic!("no account `{TEST_USER}`: run `bash .ci/install-deps` as root (it makes it)")
        });
    out.push(Account {
        uid: entry[2].parse().unwrap(),
        gid: entry[3].parse().unwrap(),
        invoking: false,
    });
    out
}

/// A temp dir owned by `account`, that anyone may enter.
pub(crate) fn owned_dir(account: &Account) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(dir.path(), Some(account.uid), Some(account.gid)).unwrap();
    dir
}

/// Gives `account` everything below `dir`.
pub(crate) fn chown_tree(account: &Account, dir: &Path) {
    let out = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", account.uid, account.gid))
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "chown: {}", text(&out.stderr));
}

/// A copy of `cc_server` another account can run (the checkout may sit in
/// a directory it cannot enter), made once: a copy made while another
/// test forks could be busy (ETXTBSY) when it runs.
pub(crate) fn program_for(account: &Account) -> PathBuf {
    static COPY: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    if account.invoking {
        return cc_server_bin();
    }
    let (_, program) = COPY.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let program = dir.path().join("cc_server");
        std::fs::copy(cc_server_bin(), &program).unwrap();
        (dir, program)
    });
    program.clone()
}

/// `cc_server run --backend bwrap -- sh -c SCRIPT` as `account`, from
/// `cwd`, with `HOME` = `home` and `PATH` = `path`, the sandbox layer alone.
fn sandbox_sh(
    plugins: &Plugins,
    account: &Account,
    cwd: &Path,
    home: &Path,
    path: &str,
    script: &str,
) -> Output {
    let program = program_for(account);
    let mut server = CcServer::with_program(plugins, &program).config(SANDBOX_LAYER_ONLY);
    if !account.invoking {
        server = server.run_as(account.uid, account.gid);
    }
    let out = server
        .env("HOME", home)
        .env("PATH", path)
        .env_remove("XDG_CONFIG_HOME")
        .current_dir(cwd)
        .args(["run", "--backend", "bwrap", "--", "sh", "-c"])
        .arg(format!("{ONLY_IN_A_SANDBOX}{script}"))
        .output();
    assert_ne!(code(&out), 125, "cc_server itself failed\n{}", both(&out));
    out
}

/// A host program as `account` would run it, with `HOME` = `home`, the
/// system's git config left out.
fn host(account: &Account, home: &Path, cwd: &Path, path: &str, argv: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(argv[0]);
    command
        .args(&argv[1..])
        .current_dir(cwd)
        .env_clear()
        .env("HOME", home)
        .env("PATH", path)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null());
    if !account.invoking {
        command.uid(account.uid).gid(account.gid);
    }
    command.output().unwrap()
}
/// Asserts no payload ran: the marker directory is empty.
fn assert_nothing_ran(markers: &Path, after: &str, out: &Output) {
    let ran: Vec<String> = std::fs::read_dir(markers)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        ran.is_empty(),
        "{after} on the host ran the sandbox's payloads {ran:?}\n{}",
        both(out)
    );
}

/// A marker directory no sandbox sees, writable by `account`'s payloads.
fn markers(account: &Account) -> tempfile::TempDir {
    owned_dir(account)
}

/// A host repository at `dir` with one commit (the caller gives it to the
/// account when all is made).
fn repo(account: &Account, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("README"), "readme\n").unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "README"],
        &["commit", "-q", "-m", "one"],
    ] {
        git(dir, args);
    }
    let _ = account;
}

const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The user site directory of the system's Python for a home.
fn user_site(home: &Path) -> PathBuf {
    let out = Command::new("/usr/bin/python3")
        .args(["-c", "import site; print(site.getusersitepackages())"])
        .env("HOME", home)
        .output()
        .unwrap();
    PathBuf::from(text(&out.stdout).trim())
}

/// A home as a user keeps it: an rc file that sources what version
/// managers leave (`~/.cargo/env`, `~/.bashrc.d/*`, `~/.nvm/nvm.sh`,
/// `~/.sdkman/…`), a git config that includes other files, a repository,
/// a cache, a `PATH` directory of its own.
fn a_users_home(account: &Account, h: &Path) {
    std::fs::write(
        h.join(".bashrc"),
        "[ -f ~/.cargo/env ] && . ~/.cargo/env\n\
         for f in ~/.bashrc.d/*.sh; do [ -r \"$f\" ] && . \"$f\"; done\n\
         [ -s ~/.nvm/nvm.sh ] && . ~/.nvm/nvm.sh\n\
         [ -f ~/.sdkman/bin/sdkman-init.sh ] && . ~/.sdkman/bin/sdkman-init.sh\n",
    )
    .unwrap();
    std::fs::write(
        h.join(".gitconfig"),
        format!(
            "[user]\n\tname = me\n\temail = me@example.com\n[include]\n\tpath = ~/.gitconfig.local\n\
             [includeIf \"gitdir:{}/proj/\"]\n\tpath = ~/.config/git/work.inc\n",
            h.display()
        ),
    )
    .unwrap();
    for dir in [".config", ".cache", "tools/bin"] {
        std::fs::create_dir_all(h.join(dir)).unwrap();
    }
    repo(account, &h.join("proj"));
    chown_tree(account, h);
}

/// The home families (SPEC G5): each attempt plants a payload where a host
/// program would run it, under a name no list of names held.
fn home_plants(h: &Path, m: &Path) -> Vec<(&'static str, String, String)> {
    let site = user_site(h);
    let site_rel = site.strip_prefix(h).unwrap().display().to_string();
    let touch = |label: &str| format!("touch {}/{label}", m.display());
    let sh = |label: &str| format!("#!/bin/sh\\n{}\\n", touch(label));
    let file = |label: &'static str, rel: &str, body: String| {
        let dir = Path::new(rel)
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let mkdir = if dir.is_empty() {
            String::new()
        } else {
            format!("mkdir -p '{dir}' && ")
        };
        (
            label,
            rel.to_owned(),
            format!("{mkdir}printf '{body}' > '{rel}'"),
        )
    };
    let git_cfg = |label: &str| format!("[core]\\n\\tfsmonitor = {}; false\\n", touch(label));
    vec![
        // A language runtime's user site directory: python3 runs these.
        file(
            "site-customize",
            &format!("{site_rel}/usercustomize.py"),
            format!("import os; os.system(\"{}\")\\n", touch("site-customize")),
        ),
        file(
            "site-pth",
            &format!("{site_rel}/zz.pth"),
            format!("import os; os.system(\"{}\")\\n", touch("site-pth")),
        ),
        // What a version manager's rc file sources.
        file(
            "cargo-env",
            ".cargo/env",
            format!("{}\\n", touch("cargo-env")),
        ),
        file(
            "bashrc-d",
            ".bashrc.d/x.sh",
            format!("{}\\n", touch("bashrc-d")),
        ),
        file("nvm", ".nvm/nvm.sh", format!("{}\\n", touch("nvm"))),
        file(
            "sdkman",
            ".sdkman/bin/sdkman-init.sh",
            format!("{}\\n", touch("sdkman")),
        ),
        // A file a protected config includes.
        file("git-include", ".gitconfig.local", git_cfg("git-include")),
        file(
            "git-include-if",
            ".config/git/work.inc",
            git_cfg("git-include-if"),
        ),
        // Multiplexer, build tool, desktop session, editors (XDG).
        file(
            "tmux",
            ".tmux.conf",
            format!("run-shell \"{}\"\\n", touch("tmux")),
        ),
        file(
            "gradle",
            ".gradle/init.d/x.gradle",
            format!("\"{}\".execute()\\n", touch("gradle")),
        ),
        file("xsession", ".xsession", sh("xsession")),
        file("plasma", ".config/plasma-workspace/env/x.sh", sh("plasma")),
        file(
            "helix",
            ".config/helix/config.toml",
            format!(
                "[editor]\\nshell = [\"sh\", \"-c\", \"{}\"]\\n",
                touch("helix")
            ),
        ),
        file(
            "nvim-site",
            ".local/share/nvim/site/plugin/x.lua",
            format!("os.execute(\"{}\")\\n", touch("nvim-site")),
        ),
        // Other agents' configs that start programs.
        file(
            "codex",
            ".codex/config.toml",
            format!("notify = [\"sh\", \"-c\", \"{}\"]\\n", touch("codex")),
        ),
        file(
            "gemini",
            ".gemini/settings.json",
            format!(
                "{{\"mcpServers\":{{\"x\":{{\"command\":\"{}\"}}}}}}\\n",
                touch("gemini")
            ),
        ),
        file(
            "cursor",
            ".cursor/mcp.json",
            format!(
                "{{\"mcpServers\":{{\"x\":{{\"command\":\"{}\"}}}}}}\\n",
                touch("cursor")
            ),
        ),
        // Secret directories that do not exist yet.
        file(
            "aws",
            ".aws/config",
            format!("[default]\\ncredential_process = {}\\n", touch("aws")),
        ),
        file(
            "gnupg",
            ".gnupg/gpg-agent.conf",
            format!("pinentry-program {}\\n", m.join("gnupg").display()),
        ),
        file(
            "gh",
            ".config/gh/hosts.yml",
            "github.com:\\n  oauth_token: x\\n".into(),
        ),
        file(
            "netrc",
            ".netrc",
            "machine example.com login x password y\\n".into(),
        ),
        // PATH directories: a command that shadows git.
        file("cargo-bin", ".cargo/bin/git", sh("cargo-bin")),
        file("go-bin", "go/bin/git", sh("go-bin")),
        file("home-bin", "bin/git", sh("home-bin")),
        file("local-bin", ".local/bin/git", sh("local-bin")),
        file("npm-prefix", ".npm-global/bin/git", sh("npm-prefix")),
        file("path-dir", "tools/bin/git", sh("path-dir")),
    ]
}

/// G5, item 1 of the allowlists: with the home bound writable (the
/// sandbox started in it), every family of code the host runs later that a
/// list of names missed — a runtime's user site directory, what version
/// managers' rc files source, a file the git config includes, a
/// multiplexer's, a build tool's, a desktop session's, an editor's (XDG)
/// and other agents' configs, secret directories not there yet, `PATH`
/// directories (`~/.cargo/bin`, `~/go/bin`, npm's prefix, one on `PATH`) —
/// is refused, naming the rule and the remedy; the history, a cache (an
/// overlay: its writes stay inside) and the home's own work keep working.
/// Host, as that account: every planted file absent, and `bash -i`,
/// `python3`, `git status` in the repository and `git` through the `PATH`
/// directories run nothing.
#[test]
fn a_bound_home_plants_nothing_the_host_runs_later() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    for account in accounts() {
        let home = owned_dir(&account);
        let h = home.path();
        a_users_home(&account, h);
        let marks = markers(&account);
        let m = marks.path();
        let path = format!(
            "{}:{}:{}:{}:{}:{}:{SYSTEM_PATH}",
            h.join("tools/bin").display(),
            h.join("bin").display(),
            h.join(".local/bin").display(),
            h.join(".cargo/bin").display(),
            h.join("go/bin").display(),
            h.join(".npm-global/bin").display(),
        );
        let plants = home_plants(h, m);
        let mut script = String::new();
        for (label, _, cmd) in &plants {
            script += &attempt(label, cmd);
        }
        script += &attempt("history", "echo 'ls -la' >> .bash_history");
        script += &attempt("cache", "echo cached > .cache/x && cat .cache/x >/dev/null");
        script += &attempt("work", "echo mine > proj/new.txt && echo notes > notes.txt");
        script += &attempt(
            "commit",
            "git -C proj add new.txt && git -C proj commit -q -m two",
        );
        let out = sandbox_sh(&plugins, &account, h, h, &path, &script);
        for (label, rel, _) in &plants {
            assert_line(&out, &format!("{label}=failed"));
            assert_absent(&h.join(rel), &out);
        }
        for ok in ["history", "cache", "work", "commit"] {
            assert_line(&out, &format!("{ok}=ok"));
        }
        let stderr = text(&out.stderr);
        for why in [
            "a dot-path of the home",
            "is a PATH directory",
            "cargo install --root",
        ] {
            assert!(
                stderr.contains(why),
                "no refusal says {why:?}\n{}",
                both(&out)
            );
        }
        assert_eq!(
            std::fs::read_to_string(h.join(".bash_history")).unwrap(),
            "ls -la\n"
        );
        assert_absent(&h.join(".cache/x"), &out);
        assert_eq!(
            std::fs::read_to_string(h.join("proj/new.txt")).unwrap(),
            "mine\n"
        );
        // The host's own programs, as the account whose home it is.
        let status = host(
            &account,
            h,
            &h.join("proj"),
            SYSTEM_PATH,
            &["git", "status", "--short"],
        );
        assert!(status.status.success(), "{}", text(&status.stderr));
        host(&account, h, h, SYSTEM_PATH, &["bash", "-i", "-c", "true"]);
        host(
            &account,
            h,
            h,
            SYSTEM_PATH,
            &["/usr/bin/python3", "-c", "pass"],
        );
        let which = host(&account, h, h, &path, &["sh", "-c", "git --version"]);
        assert!(
            text(&which.stdout).starts_with("git version"),
            "{}",
            both(&which)
        );
        assert_nothing_ran(m, "bash -i, python3, git", &out);
    }
}

/// A small generator of names (a linear congruential one: the seed is
/// printed, so a failure can be replayed).
struct Names(u64);

impl Names {
    fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        eprintln!("generated names: seed {seed}");
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// A name of letters, digits, `-`, `_` and `.` (not starting with `.`).
    fn name(&mut self) -> String {
        const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789-_.";
        let len = 1 + self.next() as usize % 10;
        let mut out = String::new();
        for i in 0..len {
            let c = CHARS[self.next() as usize % CHARS.len()];
            out.push(if i == 0 && c == b'.' { 'x' } else { c as char });
        }
        out
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.next() as usize % from.len()]
    }
}

/// G5 (generated): random new names at random depths under random
/// dot-paths of a bound home — new ones and existing ones, `~/.config` and
/// `~/.local/share` — are all refused; random names in the home's own
/// work are made. Host: none of the refused ones exists.
#[test]
fn random_names_under_a_bound_homes_dot_paths_are_refused() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let mut names = Names::new();
    for account in accounts() {
        let home = owned_dir(&account);
        let h = home.path();
        for dir in [".config", ".local/share", ".local/state", ".existing"] {
            std::fs::create_dir_all(h.join(dir)).unwrap();
        }
        chown_tree(&account, h);
        let mut refused = Vec::new();
        for _ in 0..40 {
            let top = match names.pick(&["new", ".config", ".local/share", ".local", ".existing"]) {
                "new" => format!(".{}", names.name()),
                top => top.to_owned(),
            };
            let mut rel = PathBuf::from(top);
            for _ in 0..names.next() % 3 {
                rel.push(names.name());
            }
            rel.push(names.name());
            refused.push(rel);
        }
        let allowed: Vec<PathBuf> = (0..10)
            .map(|_| PathBuf::from(format!("work-{}", names.name())).join(names.name()))
            .collect();
        let mut script = String::new();
        for (i, rel) in refused.iter().chain(&allowed).enumerate() {
            let parent = rel.parent().unwrap().display().to_string();
            script += &attempt(
                &format!("n{i}"),
                &format!(
                    "mkdir -p '{parent}' 2>/dev/null && echo x > '{}'",
                    rel.display()
                ),
            );
        }
        let out = sandbox_sh(&plugins, &account, h, h, SYSTEM_PATH, &script);
        for (i, rel) in refused.iter().enumerate() {
            assert_line(&out, &format!("n{i}=failed"));
            assert_absent(&h.join(rel), &out);
        }
        for (i, rel) in allowed.iter().enumerate() {
            assert_line(&out, &format!("n{}=ok", refused.len() + i));
            assert!(h.join(rel).is_file(), "{}", rel.display());
        }
    }
}

/// `proj` (a repository made on the host, with a disabled hook and a
/// worktree `wt` beside it, and a bare fixture repository inside it) in
/// `w`, all `account`'s.
fn host_repositories(account: &Account, w: &Path) {
    let proj = w.join("proj");
    repo(account, &proj);
    std::fs::write(
        proj.join(".git/hooks/pre-commit"),
        "#!/bin/sh\ntouch \"$MARKERS/hook\"\n",
    )
    .unwrap();
    std::fs::set_permissions(
        proj.join(".git/hooks/pre-commit"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    git(&proj, &["worktree", "add", "-q", "../wt"]);
    git(&proj, &["clone", "-q", "--bare", ".", "fixtures/bare.git"]);
    chown_tree(account, w);
}

/// The git families (SPEC G5): each attempt would make the host's next
/// `git status` or `git commit` run a payload, or point git elsewhere. The
/// script finds the repository at `$P` and makes its evil twin at `$E`.
fn git_attempts(m: &Path) -> (String, Vec<&'static str>) {
    let m = m.display();
    let mut script = format!(
        "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@example.com \
         GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@example.com\n\
         git init -q \"$E\" && git -C \"$E\" config core.fsmonitor 'touch {m}/fsmonitor; false' && \
         git -C \"$E\" commit -q --allow-empty -m e\n"
    );
    let attempts: [(&str, String); 13] = [
        (
            "commondir",
            "echo \"$E/.git\" > \"$P/.git/worktrees/wt/commondir\"".into(),
        ),
        (
            "main-commondir",
            "echo \"$E/.git\" > \"$P/.git/commondir\"".into(),
        ),
        (
            "wt-gitdir",
            "echo /elsewhere > \"$P/.git/worktrees/wt/gitdir\"".into(),
        ),
        (
            "alternates",
            "echo \"$E/.git/objects\" > \"$P/.git/objects/info/alternates\"".into(),
        ),
        ("grafts", "echo 0000 > \"$P/.git/info/grafts\"".into()),
        (
            "shallow",
            "git -C \"$P\" rev-parse HEAD > \"$P/.git/shallow\"".into(),
        ),
        ("hook-chmod", "chmod +x \"$P/.git/hooks/pre-commit\"".into()),
        (
            "hook-acl",
            "/usr/bin/python3 -c \"import os, struct, sys; os.setxattr(sys.argv[1], \
             'system.posix_acl_access', struct.pack('<I', 2) + struct.pack('<HHI', 1, 7, \
             0xffffffff) + struct.pack('<HHI', 4, 4, 0xffffffff) + struct.pack('<HHI', 0x20, 4, \
             0xffffffff))\" \"$P/.git/hooks/pre-commit\""
                .into(),
        ),
        (
            "config",
            format!("git -C \"$P\" config core.fsmonitor 'touch {m}/config; false'"),
        ),
        (
            "new-module",
            "mkdir -p \"$P/.git/modules/x\" && cp \"$E/.git/config\" \"$P/.git/modules/x/config\""
                .into(),
        ),
        (
            "fixture-config",
            format!("git -C \"$P/fixtures/bare.git\" config core.fsmonitor 'touch {m}/fixture'"),
        ),
        (
            "bare-shape",
            format!(
                "mkdir -p \"$P/sub\" && cp -r \"$E/.git/objects\" \"$E/.git/refs\" \"$P/sub/\" && \
                 printf '[core]\\n\\tbare = false\\n\\tworktree = ..\\n\\tfsmonitor = touch {m}/bare; false\\n' > \"$P/sub/config\" && \
                 echo 'ref: refs/heads/master' > \"$P/sub/HEAD\""
            ),
        ),
        (
            "nested-git",
            "mkdir -p \"$P/nest\" && cp -r \"$E/.git\" \"$P/nest/.git\"".into(),
        ),
    ];
    let mut labels = Vec::new();
    for (label, cmd) in &attempts {
        script += &attempt(label, cmd);
        labels.push(*label);
    }
    (script, labels)
}

/// Ordinary git work in a repository of launch (SPEC G4), at `$P`: it must
/// keep working beside the refusals.
const ORDINARY_GIT: &str = "cd \"$P\" && echo two >> README && git commit -q -am two && \
    git switch -q -c topic && echo three >> README && git commit -q -am three && \
    git switch -q main && git merge -q --no-edit topic && git tag v1 && \
    echo four >> README && git stash -q && git stash pop -q && git commit -q -am four && \
    git switch -q -c side HEAD~1 && echo s > s.txt && git add s.txt && git commit -q -m s && \
    git rebase -q main && git switch -q main && git merge -q --no-edit side && \
    git revert --no-edit HEAD >/dev/null && git gc -q && \
    git worktree add -q /tmp/wt2 -b wt2 && git -C /tmp/wt2 commit -q --allow-empty -m in-wt2";

/// G5, item 2 of the allowlists: in repositories that existed at launch —
/// nested in the work dir (the guard's start-up scan alone finds them) and
/// at its top (the plan's mounts too) — what tells git where to look or
/// what to borrow (a worktree's and the repository's `commondir`, a
/// worktree's `gitdir`, alternates, grafts, `shallow`), a disabled hook's
/// mode (chmod and a POSIX ACL), the config, a new submodule git
/// directory, a bare fixture repository's config, a bare repository's
/// shape and a nested `.git` inside the worktree are all refused, while
/// ordinary git work (commit, branch, merge, tag, stash, rebase, gc, a
/// commit in the worktree, a new worktree) works. Host, as that account:
/// `git status` in the repository, its worktree, the bare shape's
/// directory and the fixture, and `git commit` (which would run the
/// hook), run nothing.
#[test]
fn a_git_directory_of_launch_takes_only_ordinary_work() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    for account in accounts() {
        for nested in [true, false] {
            let work = owned_dir(&account);
            let w = work.path();
            host_repositories(&account, w);
            let marks = markers(&account);
            let m = marks.path();
            let (script, labels) = git_attempts(m);
            let script = format!("{script}({ORDINARY_GIT}) && echo ordinary=ok\n");
            // Nested in the work dir, or at its top (the work dir is the
            // repository, and only /tmp is writable beside it).
            let (cwd, vars) = if nested {
                (w.to_path_buf(), "P=proj E=evil")
            } else {
                (w.join("proj"), "P=. E=/tmp/evil")
            };
            let script = format!("{vars}\n{script}");
            let home = owned_dir(&account);
            let out = sandbox_sh(&plugins, &account, &cwd, home.path(), SYSTEM_PATH, &script);
            for label in &labels {
                assert_line(&out, &format!("{label}=failed"));
            }
            assert_line(&out, "ordinary=ok");
            for gone in [
                "proj/.git/commondir",
                "proj/.git/objects/info/alternates",
                "proj/.git/info/grafts",
                "proj/.git/shallow",
                "proj/.git/modules",
                "proj/sub/HEAD",
                "proj/nest/.git",
            ] {
                assert_absent(&w.join(gone), &out);
            }
            assert_eq!(
                std::fs::metadata(w.join("proj/.git/hooks/pre-commit"))
                    .unwrap()
                    .permissions()
                    .mode()
                    & 0o111,
                0,
                "the hook became executable\n{}",
                both(&out)
            );
            let stderr = text(&out.stderr);
            assert!(
                stderr.contains("git metadata allowlist") && stderr.contains("git -c"),
                "{}",
                both(&out)
            );
            for dir in ["proj", "wt", "proj/sub", "proj/fixtures/bare.git"] {
                let at = w.join(dir);
                if at.is_dir() {
                    host(&account, home.path(), &at, SYSTEM_PATH, &["git", "status"]);
                }
            }
            let commit = host(
                &account,
                home.path(),
                &w.join("proj"),
                SYSTEM_PATH,
                &[
                    "sh",
                    "-c",
                    &format!(
                        "MARKERS={} git -c user.name=h -c user.email=h@x commit -q --allow-empty -m host",
                        m.display()
                    ),
                ],
            );
            assert!(commit.status.success(), "{}", both(&commit));
            assert_nothing_ran(m, "git status, git commit", &out);
        }
    }
}

/// G5 (generated): random new names in an existing repository's git
/// directory — at its top and in `info/`, `objects/`, `objects/info/`,
/// `hooks/`, `modules/`, `worktrees/<existing>/` — are all refused; random branch
/// and tag names (refs, logs) are made by git. Host: none of the refused
/// ones exists.
#[test]
fn random_names_in_a_git_directory_of_launch_are_refused() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let mut names = Names::new();
    for account in accounts() {
        let work = owned_dir(&account);
        let w = work.path();
        host_repositories(&account, w);
        let mut refused = Vec::new();
        for _ in 0..40 {
            let dir = names.pick(&[
                "",
                "info",
                "objects",
                "objects/info",
                "hooks",
                "modules",
                "worktrees/wt",
            ]);
            // Never a name git writes in ordinary work (`*_HEAD`, `index.*`,
            // `BISECT_*`, `refs`, …): `z` first, a digit last.
            let name = format!("z{}0", names.name());
            refused.push(Path::new("proj/.git").join(dir).join(name));
        }
        let branches: Vec<String> = (0..5).map(|i| format!("b{i}-{}", names.next())).collect();
        let mut script = String::new();
        for (i, rel) in refused.iter().enumerate() {
            let parent = rel.parent().unwrap().display().to_string();
            script += &attempt(
                &format!("n{i}"),
                &format!(
                    "mkdir -p '{parent}' 2>/dev/null; echo x > '{}'",
                    rel.display()
                ),
            );
        }
        for (i, b) in branches.iter().enumerate() {
            script += &attempt(
                &format!("b{i}"),
                &format!("git -C proj branch '{b}' && git -C proj tag 't{i}'"),
            );
        }
        let home = owned_dir(&account);
        let out = sandbox_sh(&plugins, &account, w, home.path(), SYSTEM_PATH, &script);
        for (i, rel) in refused.iter().enumerate() {
            assert_line(&out, &format!("n{i}=failed"));
            assert_absent(&w.join(rel), &out);
        }
        for (i, b) in branches.iter().enumerate() {
            assert_line(&out, &format!("b{i}=ok"));
            assert!(w.join("proj/.git/refs/heads").join(b).is_file(), "{b}");
        }
    }
}

/// G5, G4 (everyday git that writes config): in a repository of launch,
/// `git remote add`, setting a branch's upstream (`git branch -u`, `git
/// switch --track`), the upstream `git push -u` records and `git submodule
/// init` are refused naming the rule and the
/// remedy (the config is what tells git what to run); a push reaches the
/// remote,
/// and in a clone made inside each of them works. Host: the repository's
/// config is byte-for-byte unchanged.
#[test]
fn everyday_git_that_writes_config_is_refused_in_a_repository_of_launch_and_works_in_a_clone() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    for account in accounts() {
        let work = owned_dir(&account);
        let w = work.path();
        // A superproject with a submodule, cloned without it: `git
        // submodule init` has something to write.
        repo(&account, &w.join("lib"));
        repo(&account, &w.join("super"));
        git(
            &w.join("super"),
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                "../lib",
                "sub",
            ],
        );
        git(&w.join("super"), &["commit", "-q", "-m", "sub"]);
        git(w, &["clone", "-q", "super", "proj"]);
        git(w, &["init", "-q", "--bare", "-b", "main", "remote.git"]);
        chown_tree(&account, w);
        let config = std::fs::read(w.join("proj/.git/config")).unwrap();
        let mut script = String::from(
            "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@example.com \
             GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@example.com\ncd proj\n",
        );
        for (label, cmd) in [
            ("remote-add", "git remote add upstream ../remote.git"),
            ("upstream", "git branch topic && git branch -u topic main"),
            ("switch-track", "git switch -q -c tracked --track main"),
            ("push-u", "git push -q -u ../remote.git main"),
            ("submodule-init", "git submodule init"),
        ] {
            script += &attempt(label, cmd);
        }
        script += &attempt("push", "git push -q ../remote.git main");
        script += "cd .. && git clone -q proj clone && cd clone\n";
        script += &attempt(
            "clone-config",
            "git remote add other ../remote.git && git fetch -q other && \
             git branch -u other/main main && git push -q -u other main && \
             git -c protocol.file.allow=always submodule init -q",
        );
        let home = owned_dir(&account);
        let out = sandbox_sh(&plugins, &account, w, home.path(), SYSTEM_PATH, &script);
        for label in ["remote-add", "upstream", "switch-track", "submodule-init"] {
            assert_line(&out, &format!("{label}=failed"));
        }
        // `push -u` pushes, then fails to record the upstream: git says so
        // and still exits 0.
        assert!(
            lines(&out).iter().any(|l| l.starts_with("push-u=")),
            "{}",
            both(&out)
        );
        assert_line(&out, "push=ok");
        assert_line(&out, "clone-config=ok");
        assert_eq!(
            std::fs::read(w.join("proj/.git/config")).unwrap(),
            config,
            "{}",
            both(&out)
        );
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("git metadata allowlist") && stderr.contains("remote add"),
            "{}",
            both(&out)
        );
    }
}

/// G5, item 2's last part: the configs of other agents at a workdir's top
/// that start programs — MCP server lists, hooks, notify, lint and test
/// commands, tasks — are refused like `.claude/` and `.mcp.json` (names,
/// since a project's tree is the agent's work); below the top they are a
/// project's files. Host: none exists.
#[test]
fn other_agents_configs_at_a_workdirs_top_are_refused() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let configs = [
        ".codex/config.toml",
        ".gemini/settings.json",
        ".cursor/mcp.json",
        ".continue/config.json",
        ".roo/mcp.json",
        ".kilocode/mcp.json",
        ".amazonq/mcp.json",
        ".zed/tasks.json",
        ".aider.conf.yml",
        "opencode.json",
        ".opencode/plugin/x.ts",
    ];
    for account in accounts() {
        let work = owned_dir(&account);
        let w = work.path();
        let mut script = String::new();
        for (i, rel) in configs.iter().enumerate() {
            let dir = Path::new(rel).parent().unwrap().display().to_string();
            let mkdir = if dir.is_empty() {
                String::new()
            } else {
                format!("mkdir -p '{dir}' && ")
            };
            script += &attempt(&format!("c{i}"), &format!("{mkdir}echo '{{}}' > '{rel}'"));
        }
        script += &attempt(
            "below-top",
            "mkdir -p sub/.cursor && echo x > sub/.cursor/notes",
        );
        let home = owned_dir(&account);
        let out = sandbox_sh(&plugins, &account, w, home.path(), SYSTEM_PATH, &script);
        for (i, rel) in configs.iter().enumerate() {
            assert_line(&out, &format!("c{i}=failed"));
            let top = Path::new(rel).components().next().unwrap();
            assert_absent(&w.join(top), &out);
        }
        assert_line(&out, "below-top=ok");
    }
}
