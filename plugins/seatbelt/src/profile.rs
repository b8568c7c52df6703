//! The Seatbelt profile for a spec (SPEC C1, D2, F2–F6): a pure function of
//! the spec, the home directory, the proxy ports and what the filesystem's
//! symlinks resolve to (asked through [`PathResolver`], faked in tests).
//!
//! # What the profile says
//!
//! It starts from `(allow default)` and carves out, in this order (within
//! one operation the last matching rule wins):
//!
//! 1. **Apple Events and LaunchServices** denied (`appleevent-send`,
//!    `lsopen`, and the Mach services behind them): an app started through
//!    them runs outside the sandbox (`open -a Terminal`).
//! 2. **Network** (dispatch only): everything denied, then `localhost:<port>`
//!    for the session's proxy ports, and the resolver socket for DNS when the
//!    network is on. No other loopback, no other unix socket. The terminal's
//!    network is open (D2).
//! 3. **Reads**: the secret set denied (`~/.ssh`, …, `~/Library/Keychains`,
//!    `/etc/master.passwd`, SSH host keys).
//! 4. **Writes**: reset to deny; then the writable places, shallow before deep
//!    so a read-only bind inside a writable one stays read-only: binds in
//!    chat mode (F2) and `runnerStateDirs` in every mode (F4); the device
//!    files shells write to. Then the filename-glob denies of
//!    `spec.write_deny_globs`, anchored at every writable root and at
//!    `$HOME`, after the git metadata allowlist in the git directory at the
//!    top of each writable root (only what git writes in ordinary work;
//!    `profile_allowlists`); the dependency-folder re-allows of "name
//!    anywhere" globs; the other globs (`~/` ones at `$HOME` only); the home
//!    allowlist (a bound home's dot-paths read-only but its history data);
//!    the mandatory denies (shell
//!    rc files, `.git/hooks`, `.git/config`, agent config, tool configs,
//!    launch agents) at the top of every writable root and of `$HOME`, and
//!    the home's own ([`HOME_WRITE_DENY`]: `PATH` directories, editor
//!    startup files) at `$HOME`; `protectedPaths` (F3); the secrets.
//! 5. **Unlink** (rename and remove) denied on every denied path, each of its
//!    ancestors, each glob root and every directory a glob could match
//!    inside (the structural-prefix rule of
//!    [`sandbox_paths::write_deny::GlobSet::guards_inside`]), so a rename
//!    cannot move a protected name out from under its rule.
//! 6. **Exec**: denied in every writable directory, re-opened under
//!    `execGrantRoots` (F5), and denied for [`DANGEROUS_BINARIES`] whatever
//!    the grants.
//!
//! Every deny carries `(with message "<session tag>")` so violations can be
//! told apart per session ([`crate::logparse`]).
//!
//! # Paths are parameters
//!
//! No path is spliced into the profile text. Every `literal`, `subpath` and
//! `path-literal` argument is `(param "Pn")`, and the value travels as
//! `sandbox-exec -D Pn=<path>` ([`Profile::sandbox_exec_args`]): an argv
//! element, which needs no quoting and cannot change the profile's syntax.
//!
//! Regexes cannot be parameters as a whole, so they are assembled inside the
//! profile: `(regex (string-append "^" (param "Pn") "<fragment>$"))`. The
//! root goes in as a parameter whose value is the root path with every ERE
//! metacharacter backslash-escaped by us ([`regex_escape`]), so it matches
//! exactly that path and nothing else (when escaping changes nothing, that
//! is the path's own parameter). The fragment in the text is
//! built only from the parsed [`Glob`] segments: `**` → `(/[^/]+)*`, `*` →
//! `[^/]*`, `?` → `[^/]`, a letter → `[xX]` (names ignore case), every other
//! character regex-escaped, then the whole
//! written as an SBPL string with `\` and `"` escaped ([`sb_string`]). Globs
//! with control characters are refused. So no input can end a string, open a
//! list or add a rule, and no input character acts as a regex operator —
//! the sexpr checker proves the first on every profile before it is
//! returned, the tests prove the second.
//!
//! The only other text that varies is the session tag (fixed alphabet, see
//! [`SessionTag`]) and the proxy ports (numbers).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::{Component, Path, PathBuf};

use sandbox_paths::write_deny::{DEPENDENCY_DIRS, Glob, GlobError, Segment};
use sandbox_plugin_api::SandboxSpec;

use crate::lists::{
    DANGEROUS_BINARIES, DEVICE_WRITE_PATTERNS, DEVICE_WRITES, DNS_SOCKET, HOME_WRITE_DENY,
    LAUNCH_SERVICES, LAUNCH_SERVICES_PATTERN, SYSTEM_SECRET_PATTERNS, home_secrets,
    mandatory_write_deny, system_secrets, terminal_secrets,
};
use crate::logparse::SessionTag;
use crate::sexpr::{CheckError, CheckedProfile};

/// What the profile needs to know about the filesystem: where symlinks lead.
pub trait PathResolver {
    /// `path` with every symlink resolved, if it exists.
    fn resolve(&self, path: &Path) -> Option<PathBuf>;
}

/// The real filesystem.
pub struct RealResolver;

impl PathResolver for RealResolver {
    fn resolve(&self, path: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(path).ok()
    }
}

/// A resolver from a fixed table: existing paths and absolute symlinks (on
/// any prefix). For tests and dry runs.
#[derive(Debug, Clone, Default)]
pub struct StaticResolver {
    exists: BTreeSet<PathBuf>,
    links: Vec<(PathBuf, PathBuf)>,
}

impl StaticResolver {
    /// The usual macOS system links: `/tmp`, `/var`, `/etc` → `/private/…`.
    pub fn macos() -> Self {
        let mut r = Self::default();
        for dir in [
            "/",
            "/private",
            "/private/tmp",
            "/private/var",
            "/private/etc",
        ] {
            r.add(dir);
        }
        r.link("/tmp", "/private/tmp")
            .link("/var", "/private/var")
            .link("/etc", "/private/etc");
        r
    }

    /// `path` exists (and so do its ancestors).
    pub fn add(&mut self, path: &str) -> &mut Self {
        for a in Path::new(path).ancestors() {
            self.exists.insert(a.to_path_buf());
        }
        self
    }

    /// `from` is a symlink to the absolute `to`.
    pub fn link(&mut self, from: &str, to: &str) -> &mut Self {
        self.links.push((from.into(), to.into()));
        self
    }
}

impl PathResolver for StaticResolver {
    fn resolve(&self, path: &Path) -> Option<PathBuf> {
        for (from, to) in &self.links {
            if let Ok(rest) = path.strip_prefix(from) {
                let target = if rest.as_os_str().is_empty() {
                    to.clone()
                } else {
                    to.join(rest)
                };
                return self.resolve(&target);
            }
        }
        self.exists.contains(path).then(|| path.to_path_buf())
    }
}

/// The session's proxies on the host loopback (SPEC E1, E2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyPorts {
    /// The HTTP/HTTPS (CONNECT) proxy.
    pub http: Option<u16>,
    /// The SOCKS5 proxy.
    pub socks: Option<u16>,
}

/// Which profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// A dispatched agent command (chat, review, plan, orchestrate).
    Dispatch,
    /// The server-hosted terminal (SPEC D2): `$HOME` and the session workdir
    /// (`guestWorkdir`) writable, network open, the terminal's read-deny set.
    /// Binds are not used; `protectedPaths`, `runnerStateDirs` and the
    /// glob denies apply as in dispatch. No mandatory denies and no exec deny
    /// in writable directories: it is a person's shell, whose `$HOME` holds
    /// their tools.
    Terminal,
}

/// What to generate a profile for.
#[derive(Debug, Clone, Copy)]
pub struct ProfileInput<'a> {
    /// The spec.
    pub spec: &'a SandboxSpec,
    /// The home directory of the user the sandbox runs as.
    pub home: &'a Path,
    /// The session's proxy ports.
    pub proxy: ProxyPorts,
    /// The session's tag, carried by every deny rule.
    pub tag: &'a SessionTag,
    /// Dispatch or terminal.
    pub variant: Variant,
}

/// A generated profile: its text and the `-D` parameters it refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The SBPL text.
    pub text: String,
    /// `(name, value)` for every `(param "name")` in the text.
    pub params: Vec<(String, String)>,
}

impl Profile {
    /// The arguments of `sandbox-exec` before the command: `-p <text>` and
    /// one `-D name=value` per parameter.
    pub fn sandbox_exec_args(&self) -> Vec<String> {
        let mut args = vec!["-p".to_owned(), self.text.clone()];
        for (name, value) in &self.params {
            args.push("-D".to_owned());
            args.push(format!("{name}={value}"));
        }
        args
    }

    /// The profile, parsed and checked.
    pub fn check(&self) -> Result<CheckedProfile, CheckError> {
        CheckedProfile::check(&self.text, &self.params)
    }
}

/// A spec the profile cannot express as written (fail closed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileError {
    /// A path is not absolute.
    NotAbsolute(&'static str, PathBuf),
    /// A path has a `..` component: Seatbelt matches resolved paths, so the
    /// rule would never match.
    DotDot(&'static str, PathBuf),
    /// A path is not UTF-8 or holds a control character.
    Unrepresentable(&'static str, PathBuf),
    /// A bind shows a host path elsewhere: a native sandbox cannot.
    GuestPathDiffers {
        /// The host path.
        host: PathBuf,
        /// The requested guest path.
        guest: PathBuf,
    },
    /// A write-deny glob that does not parse, or holds a control character.
    Glob(GlobError),
    /// The terminal profile needs the session workdir.
    NoTerminalWorkdir,
    /// The generated profile failed its own check (a bug; never launched).
    Malformed(String),
}

impl std::error::Error for ProfileError {}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAbsolute(what, p) => {
                write!(f, "{what} {} is not an absolute path", p.display())
            }
            Self::DotDot(what, p) => write!(
                f,
                "{what} {} has a `..` component; give the path without it",
                p.display()
            ),
            Self::Unrepresentable(what, p) => write!(
                f,
                "{what} {} is not UTF-8 or holds a control character; the seatbelt profile cannot name it",
                p.display()
            ),
            Self::GuestPathDiffers { host, guest } => write!(
                f,
                "bind mount {} asks for guestPath {}; the seatbelt backend shows every path at its own place \
                 — drop guestPath or make it equal to hostPath",
                host.display(),
                guest.display()
            ),
            Self::Glob(e) => write!(f, "{e}"),
            Self::NoTerminalWorkdir => {
                f.write_str("the terminal profile needs the session workdir in guestWorkdir")
            }
            Self::Malformed(why) => write!(f, "generated profile failed its check: {why}"),
        }
    }
}

/// Backslash-escapes every POSIX ERE metacharacter, so the result matches
/// exactly `text`.
pub fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(
            c,
            '.' | '^' | '$' | '|' | '(' | ')' | '[' | ']' | '{' | '}' | '*' | '+' | '?' | '\\'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// An SBPL string literal: `"` … `"` with `\` and `"` escaped. Callers
/// refuse control characters first.
pub fn sb_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The regex fragment of a glob, to follow a root: every segment adds `/name`,
/// `**` adds any number of segments. Written here, not taken from globset's
/// `Glob::regex()`: that is Rust-regex syntax (`(?-u)(?i)` flags, `(?:…)`
/// groups, `\xNN` escapes, anchored at both ends), while SBPL takes the POSIX
/// ERE subset `sexpr::Regex` checks, after a root parameter.
pub fn glob_fragment(segments: &[Segment]) -> String {
    let mut out = String::new();
    for seg in segments {
        match seg {
            Segment::AnyDepth => out.push_str("(/[^/]+)*"),
            Segment::Name(pattern) => {
                out.push('/');
                out.push_str(&name_regex(pattern));
            }
        }
    }
    out
}

/// A name pattern as a regex: letters in either case (the glob language
/// ignores ASCII case, as macOS's usual filesystems do), so `*.pem` also
/// denies `X.PEM`.
fn name_regex(pattern: &str) -> String {
    let mut out = String::new();
    for c in pattern.chars() {
        match c {
            '*' => out.push_str("[^/]*"),
            '?' => out.push_str("[^/]"),
            c if c.is_ascii_alphabetic() => {
                out.push('[');
                out.push(c.to_ascii_lowercase());
                out.push(c.to_ascii_uppercase());
                out.push(']');
            }
            c => out.push_str(&regex_escape(&c.to_string())),
        }
    }
    out
}

/// The fragment of "one of these names, at any depth": the union of the
/// globs `**/<name>`.
pub fn names_fragment(names: &[&str]) -> String {
    let alts: Vec<String> = names.iter().map(|n| name_regex(n)).collect();
    format!("(/[^/]+)*/({})", alts.join("|"))
}

/// The fragment of paths "name anywhere" globs (`**/<name>`) do not apply
/// to: one of the names below a dependency folder.
pub fn dependency_fragment(names: &[&str]) -> String {
    let dirs: Vec<String> = DEPENDENCY_DIRS.iter().map(|d| regex_escape(d)).collect();
    let alts: Vec<String> = names.iter().map(|n| name_regex(n)).collect();
    format!(
        "(/[^/]+)*/({})(/[^/]+)*/({})",
        dirs.join("|"),
        alts.join("|")
    )
}

/// A checked absolute path, as text.
fn path_text(what: &'static str, path: &Path) -> Result<String, ProfileError> {
    if !path.is_absolute() {
        return Err(ProfileError::NotAbsolute(what, path.to_path_buf()));
    }
    let mut out = String::new();
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => return Err(ProfileError::DotDot(what, path.to_path_buf())),
            Component::Normal(name) => {
                let name = name
                    .to_str()
                    .filter(|n| !n.chars().any(char::is_control))
                    .ok_or_else(|| ProfileError::Unrepresentable(what, path.to_path_buf()))?;
                out.push('/');
                out.push_str(name);
            }
            Component::Prefix(_) => {
                return Err(ProfileError::NotAbsolute(what, path.to_path_buf()));
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// The ancestors of a path, nearest first, without `/`.
fn ancestors(path: &str) -> Vec<String> {
    Path::new(path)
        .ancestors()
        .skip(1)
        .filter_map(Path::to_str)
        .filter(|a| *a != "/" && !a.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Every spelling of a path (F6): as written, and with symlinks resolved —
/// of the path, or, when it does not exist yet, of its deepest existing
/// ancestor with the rest appended. A path nothing of which resolves stays
/// as written.
fn spellings(
    what: &'static str,
    path: &Path,
    resolver: &dyn PathResolver,
) -> Result<Vec<String>, ProfileError> {
    let literal = path_text(what, path)?;
    let mut out = vec![literal.clone()];
    let lit = Path::new(&literal);
    let resolved = lit.ancestors().find_map(|a| {
        let r = resolver.resolve(a)?;
        let rest = lit.strip_prefix(a).ok()?;
        Some(if rest.as_os_str().is_empty() {
            r
        } else {
            r.join(rest)
        })
    });
    if let Some(resolved) = resolved {
        let resolved = path_text(what, &resolved)?;
        if resolved != literal {
            out.push(resolved);
        }
    }
    Ok(out)
}

/// One place whose writability the spec decides.
#[derive(Debug, Clone)]
struct Place {
    path: String,
    writable: bool,
}

fn depth(path: &str) -> usize {
    path.split('/').filter(|s| !s.is_empty()).count()
}

fn is_under(path: &str, root: &str) -> bool {
    path == root
        || root == "/"
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

struct Writer<'a> {
    text: String,
    params: Vec<(String, String)>,
    by_value: HashMap<String, String>,
    tag: &'a str,
}

impl Writer<'_> {
    fn line(&mut self, s: &str) {
        self.text.push_str(s);
        self.text.push('\n');
    }

    fn comment(&mut self, s: &str) {
        self.text.push_str("\n;; ");
        self.text.push_str(s);
        self.text.push('\n');
    }

    /// `(param "Pn")` holding `value`; one parameter per distinct value.
    fn named(&mut self, value: String) -> String {
        if let Some(name) = self.by_value.get(&value) {
            return format!("(param {})", sb_string(name));
        }
        let name = format!("P{}", self.by_value.len());
        self.params.push((name.clone(), value.clone()));
        self.by_value.insert(value, name.clone());
        format!("(param {})", sb_string(&name))
    }

    /// `(param "Pn")` holding a path.
    fn path(&mut self, path: &str) -> String {
        self.named(path.to_owned())
    }

    /// `(regex (string-append "^" (param "Pn") "<fragment>$"))`, the
    /// parameter holding the root regex-escaped (the same parameter as the
    /// path when escaping changes nothing).
    fn regex(&mut self, root: &str, fragment: &str) -> String {
        if root == "/" {
            // Every fragment starts with `/`: the root `/` adds nothing.
            return format!("(regex {})", sb_string(&format!("^{fragment}$")));
        }
        let root = self.named(regex_escape(root));
        format!(
            "(regex (string-append \"^\" {root} {}))",
            sb_string(&format!("{fragment}$"))
        )
    }

    fn deny(&mut self, ops: &str, filter: &str) {
        let line = if filter.is_empty() {
            format!("(deny {ops} (with message {}))", sb_string(self.tag))
        } else {
            format!(
                "(deny {ops} {filter} (with message {}))",
                sb_string(self.tag)
            )
        };
        self.line(&line);
    }

    fn allow(&mut self, ops: &str, filter: &str) {
        self.line(&format!("(allow {ops} {filter})"));
    }
}

/// Generates the profile for a spec.
pub fn generate(
    input: &ProfileInput<'_>,
    resolver: &dyn PathResolver,
) -> Result<Profile, ProfileError> {
    let spec = input.spec;
    let terminal = input.variant == Variant::Terminal;
    let home = spellings("home directory", input.home, resolver)?;
    let home_literal = path_text("home directory", input.home)?;

    // Writable and read-only places (F2, F4), both spellings.
    let mut places: Vec<Place> = Vec::new();
    let mut add_place = |path: String, writable: bool| {
        match places.iter_mut().find(|p| p.path == path) {
            // The same place named twice: the stricter wins.
            Some(existing) => existing.writable &= writable,
            None => places.push(Place { path, writable }),
        }
    };
    if terminal {
        let workdir = spec
            .guest_workdir
            .as_deref()
            .ok_or(ProfileError::NoTerminalWorkdir)?;
        for p in &home {
            add_place(p.clone(), true);
        }
        for p in spellings("guestWorkdir", workdir, resolver)? {
            add_place(p, true);
        }
    } else {
        for bind in &spec.bind_mounts {
            if let Some(guest) = &bind.guest_path
                && guest != &bind.host_path
            {
                return Err(ProfileError::GuestPathDiffers {
                    host: bind.host_path.clone(),
                    guest: guest.clone(),
                });
            }
            let writable = spec.binds_writable() && !bind.read_only;
            for p in spellings("bind mount hostPath", &bind.host_path, resolver)? {
                add_place(p, writable);
            }
        }
    }
    for dir in &spec.runner_state_dirs {
        for p in spellings("runnerStateDirs entry", dir, resolver)? {
            add_place(p, true);
        }
    }
    places.sort_by_key(|p| depth(&p.path));
    let writable_roots: Vec<String> = places
        .iter()
        .filter(|p| p.writable)
        .map(|p| p.path.clone())
        .collect();
    // Globs are anchored at every writable root and at $HOME.
    let mut glob_roots: Vec<String> = writable_roots.clone();
    for h in &home {
        if !glob_roots.contains(h) {
            glob_roots.push(h.clone());
        }
    }

    let mut globs = Vec::new();
    for text in &spec.write_deny_globs {
        let glob = Glob::parse(text).map_err(ProfileError::Glob)?;
        if glob.existing_only() {
            // Seatbelt cannot tell a file that was there at launch from one the
            // command made; `existing:` globs (`.git/config`) are carried by
            // the mandatory denies of the files that exist (the top of every
            // writable root), as on Linux's mount plan.
            continue;
        }
        if text.chars().any(char::is_control) {
            return Err(ProfileError::Glob(GlobError {
                glob: text.clone(),
                reason: "it holds a control character",
            }));
        }
        globs.push(glob);
    }

    let mut w = Writer {
        text: String::new(),
        params: Vec::new(),
        by_value: HashMap::new(),
        tag: input.tag.as_str(),
    };
    w.line("(version 1)");
    w.line(";; cc_server seatbelt profile (SPEC C1). Every path is a -D parameter.");
    w.line(&format!(
        ";; variant: {}, mode: {}, network: {}",
        if terminal { "terminal" } else { "dispatch" },
        spec.mode,
        if terminal {
            "open"
        } else if spec.network_enabled {
            "proxies only"
        } else {
            "off"
        }
    ));
    w.line("(allow default)");

    // 1. Apple Events and LaunchServices.
    w.comment("Apple Events and LaunchServices: an app they start runs outside the sandbox.");
    w.deny("appleevent-send", "");
    w.deny("lsopen", "");
    let mut services: Vec<String> = LAUNCH_SERVICES
        .iter()
        .map(|(name, _)| format!("(global-name {})", sb_string(name)))
        .collect();
    services.push(format!(
        "(global-name-regex {})",
        sb_string(LAUNCH_SERVICES_PATTERN)
    ));
    w.deny("mach-lookup", &services.join(" "));

    // 2. Network.
    if !terminal {
        w.comment(
            "Network: only the session's proxies on localhost, and DNS when the network is on.",
        );
        w.deny("network*", "");
        for port in [input.proxy.http, input.proxy.socks].into_iter().flatten() {
            w.allow(
                "network-outbound",
                &format!("(remote ip {})", sb_string(&format!("localhost:{port}"))),
            );
        }
        if spec.network_enabled {
            for p in spellings("DNS socket", Path::new(DNS_SOCKET), resolver)? {
                let param = w.path(&p);
                w.allow(
                    "network-outbound",
                    &format!("(remote unix-socket (path-literal {param}))"),
                );
            }
        }
    }

    // 3. Reads: secrets.
    let secret_list = if terminal {
        terminal_secrets()
    } else {
        home_secrets()
    };
    let mut secrets: Vec<String> = Vec::new();
    for (rel, _) in secret_list {
        for p in spellings("secret", &Path::new(&home_literal).join(rel), resolver)? {
            if !secrets.contains(&p) {
                secrets.push(p);
            }
        }
    }
    if !terminal {
        for (path, _) in system_secrets() {
            for p in spellings("secret", Path::new(path), resolver)? {
                if !secrets.contains(&p) {
                    secrets.push(p);
                }
            }
        }
    }
    w.comment("Reads: the secret set.");
    for s in &secrets {
        let param = w.path(s);
        w.deny("file-read*", &format!("(subpath {param})"));
    }
    if !terminal {
        for (re, _) in SYSTEM_SECRET_PATTERNS {
            w.deny("file-read*", &format!("(regex {})", sb_string(re)));
        }
    }

    // 4. Writes.
    w.comment("Writes: reset to deny, then the writable places, shallow before deep.");
    w.deny("file-write*", "");
    for place in &places {
        let param = w.path(&place.path);
        if place.writable {
            w.allow("file-write*", &format!("(subpath {param})"));
        } else {
            w.deny("file-write*", &format!("(subpath {param})"));
        }
    }
    w.comment("Device files shells write to.");
    let mut devices = Vec::new();
    for (dev, _) in DEVICE_WRITES {
        for p in spellings("device", Path::new(dev), resolver)? {
            if !devices.contains(&p) {
                devices.push(p);
            }
        }
    }
    for dev in &devices {
        let param = w.path(dev);
        w.allow("file-write*", &format!("(literal {param})"));
    }
    for (re, _) in DEVICE_WRITE_PATTERNS {
        w.allow("file-write*", &format!("(regex {})", sb_string(re)));
    }

    // The git metadata allowlist, before the globs, which win over what it
    // allows (`**/*.pem` in `.git/objects`).
    if !terminal {
        allowlists::git(&mut w, &writable_roots, resolver)?;
    }

    // `~/` globs apply at $HOME alone; one that names a name anywhere is
    // denied there without the dependency-folder exemption (stricter).
    let (anywhere, anchored): (Vec<&Glob>, Vec<&Glob>) = globs
        .iter()
        .partition(|g| g.is_name_anywhere() && !g.home_only());
    let roots_of = |g: &Glob| -> Vec<String> {
        if g.home_only() {
            home.clone()
        } else {
            glob_roots.clone()
        }
    };
    if !anywhere.is_empty() {
        w.comment("Filename globs that match a name anywhere, at every writable root and $HOME.");
        for g in &anywhere {
            let fragment = glob_fragment(g.segments());
            for root in &glob_roots {
                let re = w.regex(root, &fragment);
                w.deny("file-write*", &re);
            }
        }
        w.comment(
            "Dependency folders: those globs do not apply below node_modules, site-packages, \
             dist-packages, .venv — unless another root's view of the path still denies it, \
             or a read-only place lies in between.",
        );
        // All "name anywhere" globs share one exemption, so one alternation
        // of their names says "denied by one of them, relative to S".
        let names: Vec<&str> = anywhere
            .iter()
            .filter_map(|g| match g.segments() {
                [Segment::AnyDepth, Segment::Name(name)] => Some(name.as_str()),
                _ => None,
            })
            .collect();
        let any_name = names_fragment(&names);
        let exempt = dependency_fragment(&names);
        // Denied somewhere: a name glob matches relative to some root, and
        // the path is not below a dependency folder relative to that root.
        let mut denied_somewhere = Vec::new();
        for root in &glob_roots {
            let d = w.regex(root, &any_name);
            let e = w.regex(root, &exempt);
            denied_somewhere.push(format!("(require-all {d} (require-not {e}))"));
        }
        for root in &writable_roots {
            let mut blockers = denied_somewhere.clone();
            for inner in places
                .iter()
                .filter(|p| !p.writable && p.path != *root && is_under(&p.path, root))
            {
                let param = w.path(&inner.path);
                blockers.push(format!("(subpath {param})"));
            }
            let e = w.regex(root, &exempt);
            w.allow(
                "file-write*",
                &format!(
                    "(require-all {e} (require-not (require-any {})))",
                    blockers.join(" ")
                ),
            );
        }
    }
    if !anchored.is_empty() {
        w.comment(
            "Other filename globs, at every writable root and $HOME (`~/` ones at $HOME only).",
        );
        for g in &anchored {
            let fragment = glob_fragment(g.segments());
            for root in &roots_of(g) {
                let re = w.regex(root, &fragment);
                w.deny("file-write*", &re);
            }
        }
    }

    // The home allowlist (dispatch only: the terminal's home is writable
    // by SPEC D2), after the dependency folders' re-allows, which it wins.
    if !terminal {
        allowlists::home(&mut w, &home, &writable_roots);
    }

    // Mandatory denies at the top of every writable root and of $HOME.
    let mut denied: Vec<String> = Vec::new();
    if !terminal {
        w.comment(
            "Mandatory denies: rc files, git hooks and config, agent config, launch agents \
             — at the top of every writable root and of $HOME.",
        );
        let mut anchors: Vec<String> = writable_roots.clone();
        if !anchors.contains(&home_literal) {
            anchors.push(home_literal.clone());
        }
        let mut mandatory = Vec::new();
        for root in &anchors {
            for (name, _) in mandatory_write_deny() {
                for p in spellings("mandatory deny", &Path::new(root).join(name), resolver)? {
                    if !mandatory.contains(&p) {
                        mandatory.push(p);
                    }
                }
            }
        }
        for (name, _) in HOME_WRITE_DENY {
            for p in spellings(
                "mandatory deny",
                &Path::new(&home_literal).join(name),
                resolver,
            )? {
                if !mandatory.contains(&p) {
                    mandatory.push(p);
                }
            }
        }
        for m in &mandatory {
            let param = w.path(m);
            w.deny("file-write*", &format!("(subpath {param})"));
        }
        denied.extend(mandatory);
    }
    if !spec.protected_paths.is_empty() {
        w.comment("Protected paths: never writable, in any mode (F3).");
        let mut protected = Vec::new();
        for path in &spec.protected_paths {
            for p in spellings("protectedPaths entry", path, resolver)? {
                if !protected.contains(&p) {
                    protected.push(p);
                }
            }
        }
        for p in &protected {
            let param = w.path(p);
            w.deny("file-write*", &format!("(subpath {param})"));
        }
        denied.extend(protected);
    }
    w.comment("Secrets are not writable either.");
    for s in &secrets {
        let param = w.path(s);
        w.deny("file-write*", &format!("(subpath {param})"));
    }
    denied.extend(secrets.iter().cloned());

    // 5. Unlink.
    w.comment(
        "Rename and remove: never of a denied path, nor of any of its ancestors, nor of a \
         directory a glob could match inside.",
    );
    let mut unlink_subpaths: Vec<String> = Vec::new();
    let mut unlink_literals: Vec<String> = Vec::new();
    for d in &denied {
        if !unlink_subpaths.contains(d) {
            unlink_subpaths.push(d.clone());
        }
    }
    if !globs.is_empty() {
        for root in &glob_roots {
            if !unlink_literals.contains(root) {
                unlink_literals.push(root.clone());
            }
        }
    }
    let mut with_ancestors = Vec::new();
    for p in unlink_subpaths.iter().chain(unlink_literals.iter()) {
        for a in ancestors(p) {
            if !with_ancestors.contains(&a) && !unlink_literals.contains(&a) {
                with_ancestors.push(a);
            }
        }
    }
    unlink_literals.extend(with_ancestors);
    for p in &unlink_subpaths {
        let param = w.path(p);
        w.deny("file-write-unlink", &format!("(subpath {param})"));
    }
    for p in &unlink_literals {
        let param = w.path(p);
        w.deny("file-write-unlink", &format!("(literal {param})"));
    }
    let mut prefixes: Vec<(String, Vec<String>)> = Vec::new();
    for g in &anchored {
        let segs = g.segments();
        for k in 1..segs.len() {
            let prefix = &segs[..k];
            if prefix.iter().all(|s| *s == Segment::AnyDepth) {
                continue;
            }
            let fragment = glob_fragment(prefix);
            match prefixes.iter_mut().find(|(f, _)| *f == fragment) {
                Some((_, roots)) => {
                    for root in roots_of(g) {
                        if !roots.contains(&root) {
                            roots.push(root);
                        }
                    }
                }
                None => prefixes.push((fragment, roots_of(g))),
            }
        }
    }
    for (fragment, roots) in &prefixes {
        for root in roots {
            let re = w.regex(root, fragment);
            w.deny(
                "file-write-unlink",
                &format!("(require-all {re} (vnode-type DIRECTORY))"),
            );
        }
    }

    // 6. Exec.
    w.comment("Exec: not from writable directories (re-opened by execGrantRoots), never the dangerous binaries.");
    if !terminal {
        for root in &writable_roots {
            let param = w.path(root);
            w.deny("process-exec", &format!("(subpath {param})"));
        }
        let mut grants = Vec::new();
        for g in &spec.exec_grant_roots {
            for p in spellings("execGrantRoots entry", g, resolver)? {
                if !grants.contains(&p) {
                    grants.push(p);
                }
            }
        }
        for g in &grants {
            let param = w.path(g);
            w.allow("process-exec", &format!("(subpath {param})"));
        }
    }
    let mut binaries = Vec::new();
    for (bin, _) in DANGEROUS_BINARIES {
        for p in spellings("dangerous binary", Path::new(bin), resolver)? {
            if !binaries.contains(&p) {
                binaries.push(p);
            }
        }
    }
    for b in &binaries {
        let param = w.path(b);
        w.deny("process-exec", &format!("(literal {param})"));
    }

    let profile = Profile {
        text: w.text,
        params: w.params,
    };
    // Fail closed: a profile that does not check is never returned.
    profile
        .check()
        .map_err(|e| ProfileError::Malformed(e.to_string()))?;
    Ok(profile)
}

#[path = "profile_allowlists.rs"]
mod allowlists;

#[cfg(test)]
#[path = "profile_tests.rs"]
mod tests;
