//! Classifies one simple command from its argv: unwraps wrappers, re-parses
//! shell strings, and matches programs to classes.

use crate::Class::{self, *};
use crate::guardrails::Targets;
use crate::walk::{Arg, Stdin, Walker, cut, is_harmless_sink, shown};

/// One command being classified.
#[derive(Clone, Copy)]
struct Cmd<'a> {
    args: &'a [Arg],
    stdin: &'a Stdin,
    /// More arguments are appended at run time (`xargs`), so a missing
    /// subcommand is unknown rather than absent.
    appended: bool,
}

impl<'a> Cmd<'a> {
    fn with(self, args: &'a [Arg]) -> Self {
        Self { args, ..self }
    }
    fn text(&self, i: usize) -> Option<&'a str> {
        self.args.get(i).map(|a| a.text.as_str())
    }
    fn rest(&self, i: usize) -> &'a [Arg] {
        self.args.get(i..).unwrap_or_default()
    }
    fn has(&self, flags: &[&str]) -> bool {
        self.args
            .iter()
            .skip(1)
            .any(|a| flags.contains(&a.text.as_str()))
    }
    fn has_prefix(&self, prefixes: &[&str]) -> bool {
        self.args
            .iter()
            .skip(1)
            .any(|a| prefixes.iter().any(|p| a.text.starts_with(p)))
    }
}

/// Classify `args` (a simple command after redirects were taken off).
pub(crate) fn classify(w: &mut Walker, args: &[Arg], stdin: &Stdin, appended: bool) {
    let Some(first) = args.first() else { return };
    if !first.literal {
        w.opaque(
            format!("the command name is computed at run time: {}", shown(args)),
            None,
        );
        return;
    }
    if !w.enter() {
        return;
    }
    let c = Cmd {
        args,
        stdin,
        appended,
    };
    let name = program_name(&first.text);
    if matches!(name.as_str(), "cd" | "pushd" | "popd") {
        w.moved = true;
    }
    if w.is_function(&first.text) {
        w.found(
            ReadOnly,
            args,
            "calls a function defined in this line (its body is classified)",
        );
    } else {
        dispatch(w, &name, c);
    }
    w.leave();
}

/// `/usr/bin/python3.12` → `python`, `./mvnw` → `mvnw`, `pip3` → `pip`.
fn program_name(argv0: &str) -> String {
    let base = argv0.rsplit('/').next().unwrap_or(argv0);
    for family in ["python", "pip", "perl", "ruby", "node", "php", "lua"] {
        if let Some(rest) = base.strip_prefix(family)
            && !rest.is_empty()
            && rest.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        {
            return family.to_string();
        }
    }
    base.to_string()
}

fn dispatch(w: &mut Walker, name: &str, c: Cmd) {
    match name {
        // ----- privilege escalation (and unwrap) -----
        "sudo" => {
            w.found(
                PrivilegeEscalation,
                c.args,
                "sudo runs commands as another user",
            );
            let opts = Opts::new(
                "ugpCDhrtTUR",
                &[
                    "--user",
                    "--group",
                    "--prompt",
                    "--close-from",
                    "--chdir",
                    "--host",
                    "--role",
                    "--type",
                    "--command-timeout",
                    "--other-user",
                    "--chroot",
                ],
            );
            unwrap_after(w, c, name, 1, &opts, true, None);
        }
        "sudoedit" => w.found(PrivilegeEscalation, c.args, "edits files as another user"),
        "doas" => {
            w.found(
                PrivilegeEscalation,
                c.args,
                "doas runs commands as another user",
            );
            unwrap_after(w, c, name, 1, &Opts::new("uC", &[]), false, None);
        }
        "pkexec" => {
            w.found(
                PrivilegeEscalation,
                c.args,
                "pkexec runs commands as another user",
            );
            unwrap_after(w, c, name, 1, &Opts::new("", &["--user"]), false, None);
        }
        "run0" => {
            w.found(
                PrivilegeEscalation,
                c.args,
                "run0 runs commands as another user",
            );
            let opts = Opts::new(
                "uDg",
                &[
                    "--user", "--group", "--chdir", "--setenv", "--unit", "--nice",
                ],
            );
            unwrap_after(w, c, name, 1, &opts, false, None);
        }
        "su" | "runuser" => su(w, c, name),
        "setcap" => w.found(PrivilegeEscalation, c.args, "grants file capabilities"),
        "passwd" | "chpasswd" | "usermod" | "useradd" | "userdel" | "groupadd" | "groupmod"
        | "gpasswd" | "visudo" | "newgrp" | "sg" | "adduser" | "deluser" => w.found(
            PrivilegeEscalation,
            c.args,
            "changes accounts or privileges",
        ),
        "chmod" => chmod(w, c),
        "chown" | "chgrp" => {
            if recursive(c) && targets(c).iter().any(|t| critical_path(t)) {
                w.found(
                    SystemDestruction,
                    c.args,
                    "recursive ownership change of a system or home directory",
                );
            } else {
                w.found(Other, c.args, "changes ownership");
            }
        }

        // ----- wrappers -----
        "env" => env(w, c),
        "nice" => unwrap_after(
            w,
            c,
            name,
            1,
            &Opts::new("n", &["--adjustment"]),
            false,
            Some(ReadOnly),
        ),
        "nohup" | "setsid" | "builtin" | "unbuffer" | "catchsegv" => {
            unwrap_after(w, c, name, 1, &Opts::new("", &[]), false, Some(ReadOnly))
        }
        "timeout" => {
            let opts = Opts::new("sk", &["--signal", "--kill-after"]);
            match scan(w, c, name, 1, &opts) {
                Some(i) => classify_rest(w, c, i + 1),
                None => w.found(ReadOnly, c.args, "no command"),
            }
        }
        "time" => unwrap_after(
            w,
            c,
            name,
            1,
            &Opts::new("of", &["--output", "--format"]),
            false,
            Some(ReadOnly),
        ),
        "command" => {
            if c.text(1)
                .is_some_and(|t| t.starts_with('-') && (t.contains('v') || t.contains('V')))
            {
                w.found(ReadOnly, c.args, "looks a command up");
            } else {
                unwrap_after(w, c, name, 1, &Opts::new("", &[]), false, Some(ReadOnly));
            }
        }
        "exec" => unwrap_after(w, c, name, 1, &Opts::new("a", &[]), false, Some(ReadOnly)),
        "stdbuf" => {
            let opts = Opts::new("ioe", &["--input", "--output", "--error"]);
            unwrap_after(w, c, name, 1, &opts, false, Some(ReadOnly));
        }
        "ionice" | "chrt" | "taskset" => {
            if c.has(&["-p", "--pid", "--pgid", "-P", "-u", "--uid"]) {
                w.found(Other, c.args, "changes another process's scheduling");
                return;
            }
            let opts = match name {
                "ionice" => Opts::new("cn", &["--class", "--classdata"]),
                "chrt" => Opts::new(
                    "TPD",
                    &["--sched-runtime", "--sched-period", "--sched-deadline"],
                ),
                _ => Opts::new("", &[]),
            };
            match scan(w, c, name, 1, &opts) {
                // ionice takes the command right away; chrt and taskset a
                // priority or a mask first.
                Some(i) if name == "ionice" => classify_rest(w, c, i),
                Some(i) => classify_rest(w, c, i + 1),
                None => w.found(ReadOnly, c.args, "shows scheduling settings"),
            }
        }
        "flock" => flock(w, c),
        "watch" => watch(w, c),
        "xargs" => xargs(w, c),
        "find" => find(w, c),
        "fd" | "fdfind" => fd(w, c),
        "busybox" | "toybox" => {
            if c.args.len() > 1 {
                classify_rest(w, c, 1);
            } else {
                w.found(ReadOnly, c.args, "lists applets");
            }
        }
        "strace" | "ltrace" => {
            w.found(Other, c.args, "traces a process");
            let opts = Opts::new(
                "eopsuEPIbaXOS",
                &["--output", "--trace", "--signal", "--user"],
            );
            unwrap_after(w, c, name, 1, &opts, false, None);
        }
        "script" => script(w, c),
        "parallel" => {
            // A guess at what runs: the command with the argument lists
            // spliced in (`parallel git ::: push` runs `git push`).
            let words: Vec<&str> = c
                .args
                .iter()
                .skip(1)
                .map(|a| a.text.as_str())
                .filter(|t| !t.starts_with('-') && !t.starts_with(":::"))
                .collect();
            let template = words.join(" ");
            w.opaque(
                format!(
                    "GNU parallel runs its arguments through a shell: {}",
                    shown(c.args)
                ),
                Some(&template),
            );
        }
        "eval" => eval(w, c),
        "source" | "." => source(w, c),
        "trap" => trap(w, c),
        "alias" => alias(w, c),

        // ----- shells and interpreters -----
        "sh" | "bash" | "zsh" | "dash" | "ksh" | "mksh" | "ash" | "rbash" | "yash" | "fish"
        | "posh" | "oksh" | "pdksh" | "tcsh" | "csh" => shell(w, c, name),
        "python" | "pypy" | "pypy3" => python(w, c, name),
        "node" | "nodejs" => interpreter(
            w,
            c,
            name,
            &["-e", "--eval", "-p", "--print"],
            &Opts::new("r", &["--require", "--import", "--loader", "--input-type"]),
        ),
        "perl" => interpreter(w, c, name, &["-e", "-E"], &Opts::new("", &[])),
        "ruby" => interpreter(w, c, name, &["-e"], &Opts::new("rIC", &[])),
        "php" => interpreter(w, c, name, &["-r"], &Opts::new("dcz", &[])),
        "lua" | "luajit" => interpreter(w, c, name, &["-e"], &Opts::new("l", &[])),
        "Rscript" => interpreter(w, c, name, &["-e"], &Opts::new("", &[])),
        "osascript" => interpreter(w, c, name, &["-e"], &Opts::new("l", &[])),
        "tclsh" | "wish" | "jshell" | "irb" | "ghci" => {
            interpreter(w, c, name, &[], &Opts::new("", &[]))
        }

        // ----- forges and git -----
        "git" => git(w, c),
        "gh" => forge(w, c, "gh"),
        "glab" => forge(w, c, "glab"),

        // ----- packages -----
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
                return;
            }
            if c.args.len() == 1 {
                w.found(InstallPackage, c.args, "bare `bundle` installs the bundle");
                return;
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

        // ----- network -----
        "curl" | "wget" | "nc" | "ncat" | "netcat" | "socat" | "telnet" | "ssh" | "scp"
        | "sftp" | "ftp" | "lftp" | "tftp" | "http" | "https" | "xh" | "xhs" | "aria2c"
        | "axel" | "ping" | "ping6" | "dig" | "nslookup" | "host" | "traceroute" | "tracepath"
        | "mtr" | "mosh" | "websocat" | "nmap" | "whois" | "ssh-keyscan" | "rclone"
        | "smbclient" | "ldapsearch" | "mysql" | "psql" | "redis-cli" | "mongo" | "mongosh"
        | "grpcurl" | "aws" | "gcloud" | "gsutil" | "az" | "doctl" | "flyctl" | "vercel"
        | "netlify" | "wrangler" | "heroku" => w.found(AccessNetwork, c.args, "network tool"),
        "rsync" => {
            let remote = c.args.iter().skip(1).any(|a| {
                let t = a.text.as_str();
                !t.starts_with('-') && (t.starts_with("rsync://") || is_remote_spec(t))
            });
            if remote {
                w.found(AccessNetwork, c.args, "copies to or from a remote host");
            } else {
                w.found(Other, c.args, "copies files");
            }
        }
        "openssl" => {
            if matches!(c.text(1), Some("s_client" | "s_time")) {
                w.found(AccessNetwork, c.args, "opens a TLS connection");
            } else {
                w.found(Other, c.args, "openssl");
            }
        }

        // ----- destruction -----
        "rm" => rm(w, c),
        "dd" => {
            let dev = c.args.iter().skip(1).any(|a| {
                a.text
                    .strip_prefix("of=")
                    .is_some_and(|t| t.starts_with("/dev/") && !is_harmless_sink(t))
            });
            if dev {
                w.found(SystemDestruction, c.args, "writes to a device");
            } else {
                w.found(Other, c.args, "copies data");
            }
        }
        "shred" | "wipe" => {
            if targets(c)
                .iter()
                .any(|t| t.starts_with("/dev/") || critical_path(t))
            {
                w.found(SystemDestruction, c.args, "overwrites a device");
            } else {
                w.found(Other, c.args, "overwrites files");
            }
        }
        "wipefs" | "mke2fs" | "mkswap" | "fdisk" | "sfdisk" | "sgdisk" | "gdisk" | "cfdisk"
        | "parted" | "blkdiscard" | "mkdosfs" | "mkntfs" | "badblocks" | "cryptsetup"
        | "lvremove" | "vgremove" | "pvremove" | "zpool" | "diskutil" => w.found(
            SystemDestruction,
            c.args,
            "formats, partitions or erases disks",
        ),
        n if n.starts_with("mkfs") => w.found(SystemDestruction, c.args, "formats a file system"),
        "shutdown" | "reboot" | "halt" | "poweroff" | "killall5" => w.found(
            SystemDestruction,
            c.args,
            "stops the machine or every process",
        ),
        "init" | "telinit" => {
            if c.args.len() > 1 {
                w.found(SystemDestruction, c.args, "changes the run level");
            } else {
                w.found(Other, c.args, "init");
            }
        }
        "systemctl" => {
            if matches!(
                c.text(1),
                Some(
                    "poweroff"
                        | "reboot"
                        | "halt"
                        | "kexec"
                        | "emergency"
                        | "rescue"
                        | "soft-reboot"
                )
            ) {
                w.found(SystemDestruction, c.args, "stops the machine");
            } else if matches!(
                c.text(1),
                Some(
                    "status"
                        | "list-units"
                        | "list-unit-files"
                        | "is-active"
                        | "is-enabled"
                        | "show"
                        | "cat"
                )
            ) {
                w.found(ReadOnly, c.args, "queries systemd");
            } else {
                w.found(Other, c.args, "controls services");
            }
        }
        "kill" | "pkill" => kill(w, c),
        "mv" => {
            let t = targets(c);
            if t.len() > 1 && t[..t.len() - 1].iter().any(|t| critical_path(t)) {
                w.found(
                    SystemDestruction,
                    c.args,
                    "moves a system or home directory away",
                );
            } else {
                w.found(Other, c.args, "moves files");
            }
        }

        // ----- escape -----
        "nsenter" | "unshare" | "pivot_root" | "switch_root" | "insmod" | "rmmod" | "modprobe"
        | "kexec" | "capsh" | "systemd-nspawn" | "bwrap" | "firejail" | "setns" | "lxc-attach"
        | "lxc-execute" => w.found(
            ContainerEscape,
            c.args,
            "enters or creates namespaces, or changes the kernel",
        ),
        "chroot" => {
            w.found(ContainerEscape, c.args, "changes the root directory");
            if let Some(i) = scan(w, c, name, 1, &Opts::new("", &["--userspec", "--groups"])) {
                classify_rest(w, c, i + 1);
            }
        }
        "mount" | "umount" => {
            if c.args.len() > 1 && !c.has(&["-l", "--list", "-V", "--version", "-h", "--help"]) {
                w.found(ContainerEscape, c.args, "mounts or unmounts file systems");
            } else {
                w.found(ReadOnly, c.args, "lists mounts");
            }
        }
        "sysctl" => {
            let writes = c.args.iter().skip(1).any(|a| {
                matches!(
                    a.text.as_str(),
                    "-w" | "--write" | "-p" | "--load" | "--system"
                ) || a.text.contains('=')
            });
            if writes {
                w.found(ContainerEscape, c.args, "changes kernel settings");
            } else {
                w.found(ReadOnly, c.args, "reads kernel settings");
            }
        }
        "ip" => {
            if c.text(1) == Some("netns") && c.text(2) == Some("exec") {
                w.found(
                    ContainerEscape,
                    c.args,
                    "runs a command in another network namespace",
                );
            } else {
                w.found(Other, c.args, "network configuration");
            }
        }
        "docker" | "podman" | "nerdctl" => container(w, c, name),
        "docker-compose" | "podman-compose" => {
            w.found(Other, c.args, "runs containers from a compose file")
        }
        "kubectl" | "oc" => match c.text(
            positional_index(
                c,
                1,
                &[
                    "-n",
                    "--namespace",
                    "--context",
                    "--kubeconfig",
                    "-s",
                    "--server",
                ],
            )
            .unwrap_or(0),
        ) {
            Some("exec" | "attach" | "debug") => {
                w.found(ContainerEscape, c.args, "executes inside a pod or node")
            }
            Some(
                "port-forward" | "proxy" | "get" | "describe" | "logs" | "top" | "explain"
                | "version" | "api-resources" | "cluster-info",
            ) => w.found(AccessNetwork, c.args, "talks to a cluster"),
            _ => w.found(Other, c.args, "changes a cluster"),
        },
        "ctr" => {
            let sub = c
                .args
                .iter()
                .skip(1)
                .filter(|a| !a.text.starts_with('-'))
                .map(|a| a.text.as_str())
                .take(2)
                .collect::<Vec<_>>();
            let exec = matches!(sub.as_slice(), ["task" | "t" | "tasks", "exec", ..]);
            let run = matches!(sub.first(), Some(&"run"))
                && (c.has_prefix(&["--privileged", "--mount", "--with-ns", "--net-host"]));
            if exec || run {
                w.found(
                    ContainerEscape,
                    c.args,
                    "runs with host privileges or inside another container",
                );
            } else {
                w.found(Other, c.args, "containerd");
            }
        }
        "crictl" => {
            if matches!(c.text(1), Some("exec" | "attach")) {
                w.found(ContainerEscape, c.args, "executes inside a container");
            } else {
                w.found(Other, c.args, "CRI");
            }
        }
        "lxc" | "incus" => {
            if matches!(c.text(1), Some("exec" | "shell" | "console")) {
                w.found(ContainerEscape, c.args, "executes inside a container");
            } else {
                w.found(Other, c.args, "containers");
            }
        }

        // ----- read-only allowlist and the rest -----
        "tee" => {
            // Writing into `>(…)` is a pipe; its commands were walked.
            let files: Vec<&Arg> = c
                .args
                .iter()
                .skip(1)
                .filter(|a| !a.text.starts_with('-') && !a.procsubst)
                .collect();
            if files.is_empty() {
                w.found(ReadOnly, c.args, "copies stdin to stdout");
            }
            for f in files {
                w.write_target(f, "tee");
            }
        }
        _ if tool(name).is_some() => run_tool(w, c, name),
        _ => match read_only(name, c) {
            Some(Ok(())) => w.found(ReadOnly, c.args, ""),
            Some(Err(why)) => w.found(Other, c.args, why),
            None => w.found(Other, c.args, ""),
        },
    }
}

// ----- option scanning -----

/// Which options of a wrapper take a value.
struct Opts {
    short: &'static str,
    long: &'static [&'static str],
}

impl Opts {
    fn new(short: &'static str, long: &'static [&'static str]) -> Self {
        Self { short, long }
    }
}

/// The index of the first non-option argument from `start` (the wrapped
/// command), or `None`. Arguments computed at run time make the line opaque
/// and are skipped as if they were flags (best effort).
fn scan(w: &mut Walker, c: Cmd, name: &str, start: usize, o: &Opts) -> Option<usize> {
    let mut i = start;
    let mut dynamic = false;
    let mut found = None;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        if !a.literal {
            if t.starts_with('-') {
                dynamic = true;
                i += 1;
                continue;
            }
            // `sudo $CMD` — the command itself is computed; classify() says so.
            found = Some(i);
            break;
        }
        if t == "--" {
            found = (i + 1 < c.args.len()).then_some(i + 1);
            break;
        }
        if let Some(long) = t.strip_prefix("--") {
            let has_eq = long.contains('=');
            i += if !has_eq && o.long.contains(&t) { 2 } else { 1 };
            continue;
        }
        if t.len() > 1 && t.starts_with('-') {
            let flags = &t[1..];
            let mut skip_next = false;
            for (k, ch) in flags.char_indices() {
                if o.short.contains(ch) {
                    skip_next = k + ch.len_utf8() == flags.len();
                    break;
                }
            }
            i += if skip_next { 2 } else { 1 };
            continue;
        }
        found = Some(i);
        break;
    }
    if dynamic {
        w.opaque(
            format!(
                "options of `{name}` are computed at run time: {}",
                shown(c.args)
            ),
            None,
        );
    }
    found
}

/// Unwrap a wrapper: skip its options (and `NAME=VALUE` pairs when
/// `assignments`), then classify the wrapped command. With no wrapped
/// command, record `alone` (if given).
fn unwrap_after(
    w: &mut Walker,
    c: Cmd,
    name: &str,
    start: usize,
    o: &Opts,
    assignments: bool,
    alone: Option<Class>,
) {
    let Some(mut i) = scan(w, c, name, start, o) else {
        if let Some(class) = alone {
            w.found(class, c.args, "no command");
        }
        return;
    };
    if assignments {
        while c.args.get(i).is_some_and(|a| is_assignment(&a.text)) {
            i += 1;
        }
    }
    if i < c.args.len() {
        classify_rest(w, c, i);
    } else if let Some(class) = alone {
        w.found(class, c.args, "no command");
    }
}

fn classify_rest(w: &mut Walker, c: Cmd, i: usize) {
    let rest = c.rest(i);
    if !rest.is_empty() {
        classify(w, rest, c.stdin, c.appended);
    }
}

fn is_assignment(t: &str) -> bool {
    match t.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|ch: char| ch.is_ascii_digit())
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        }
        None => false,
    }
}

/// Index of the first positional argument from `start`, skipping options
/// and the values of `value_opts`.
fn positional_index(c: Cmd, start: usize, value_opts: &[&str]) -> Option<usize> {
    let mut i = start;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        if t == "--" {
            return (i + 1 < c.args.len()).then_some(i + 1);
        }
        if t.starts_with('-') && t.len() > 1 && c.args[i].literal {
            i += if value_opts.contains(&t) { 2 } else { 1 };
            continue;
        }
        return Some(i);
    }
    None
}

/// Positional (non-option) arguments.
fn targets<'a>(c: Cmd<'a>) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut options_done = false;
    for a in c.args.iter().skip(1) {
        let t = a.text.as_str();
        if !options_done && t == "--" {
            options_done = true;
            continue;
        }
        if !options_done && t.starts_with('-') && t.len() > 1 {
            continue;
        }
        out.push(t);
    }
    out
}

fn recursive(c: Cmd) -> bool {
    c.args.iter().skip(1).any(|a| {
        let t = a.text.as_str();
        t == "--recursive" || (t.starts_with('-') && !t.starts_with("--") && t.contains('R'))
    })
}

/// `/`, `/*`, `~`, `$HOME`, a top-level system directory, or one user's home.
pub(crate) fn critical_path(t: &str) -> bool {
    let t = t.trim();
    if t.is_empty() {
        return false;
    }
    let mut s = t.to_string();
    while s.contains("//") {
        s = s.replace("//", "/");
    }
    loop {
        let before = s.len();
        for suffix in ["/.*", "/*", "/.", "/"] {
            if let Some(stripped) = s.strip_suffix(suffix) {
                s = stripped.to_string();
            }
        }
        if s.len() == before {
            break;
        }
    }
    if s.is_empty() || s == "/.." {
        return true;
    }
    if s == "~" || s == "$HOME" || (s.starts_with('~') && !s.contains('/')) {
        return true;
    }
    const SYSTEM: [&str; 33] = [
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/usr",
        "/var",
        "/usr/bin",
        "/usr/lib",
        "/usr/local",
        "/usr/sbin",
        "/var/lib",
        "/Users",
        "/System",
        "/Library",
        "/Applications",
        "/private",
        "/nix",
        "/snap",
        "/mnt",
        "/media",
        "/Volumes",
    ];
    if SYSTEM.contains(&s.as_str()) {
        return true;
    }
    for home in ["/home/", "/Users/"] {
        if let Some(user) = s.strip_prefix(home) {
            return !user.is_empty() && !user.contains('/');
        }
    }
    false
}

/// `host:path` or `user@host:path` (but not `./a:b` or `/a:b`).
fn is_remote_spec(t: &str) -> bool {
    if t.starts_with(['/', '.', '~']) {
        return false;
    }
    match t.find(':') {
        Some(i) => !t[..i].contains('/') && i > 0,
        None => false,
    }
}

/// The command without its argument `k` (`poetry self add x` → `poetry add x`).
fn drop_arg(c: Cmd, k: usize) -> Vec<Arg> {
    c.args
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != k)
        .map(|(_, a)| a.clone())
        .collect()
}

fn dynamic(w: &mut Walker, c: Cmd, what: &str) {
    w.opaque(
        format!("the {what} is computed at run time: {}", shown(c.args)),
        None,
    );
}

// ----- privilege -----

fn su(w: &mut Walker, c: Cmd, name: &str) {
    w.found(PrivilegeEscalation, c.args, "runs commands as another user");
    for (i, a) in c.args.iter().enumerate().skip(1) {
        let t = a.text.as_str();
        if matches!(t, "-c" | "--command" | "--session-command") {
            if let Some(command) = c.args.get(i + 1) {
                run_string(w, command, name, c.stdin);
            }
            return;
        }
        for p in ["--command=", "--session-command="] {
            if let Some(v) = t.strip_prefix(p) {
                let command = Arg {
                    text: v.to_string(),
                    literal: a.literal,
                    procsubst: false,
                };
                run_string(w, &command, name, c.stdin);
                return;
            }
        }
    }
    if name == "runuser" {
        let opts = Opts::new(
            "ugGsw",
            &[
                "--user",
                "--group",
                "--supp-group",
                "--shell",
                "--whitelist-environment",
            ],
        );
        if c.has(&["-u", "--user"]) {
            unwrap_after(w, c, name, 1, &opts, false, None);
        }
    }
}

fn chmod(w: &mut Walker, c: Cmd) {
    let t = targets(c);
    let mode = t.first().copied().unwrap_or_default();
    if setuid_mode(mode) {
        w.found(PrivilegeEscalation, c.args, "sets the setuid/setgid bit");
    } else if recursive(c) && t.iter().skip(1).any(|t| critical_path(t)) {
        w.found(
            SystemDestruction,
            c.args,
            "recursive mode change of a system or home directory",
        );
    } else {
        w.found(Other, c.args, "changes file modes");
    }
}

fn setuid_mode(mode: &str) -> bool {
    if !mode.is_empty() && mode.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        let digits = mode.trim_start_matches('0');
        return digits.len() == 4 && matches!(digits.as_bytes()[0], b'2' | b'4' | b'6');
    }
    mode.split(',').any(|clause| {
        clause
            .find(['+', '='])
            .is_some_and(|i| clause[i..].contains('s'))
    })
}

// ----- wrappers -----

fn env(w: &mut Walker, c: Cmd) {
    let mut i = 1;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        if !a.literal {
            if is_assignment(t) {
                i += 1;
                continue;
            }
            if t.starts_with('-') {
                dynamic(w, c, "options of `env`");
                i += 1;
                continue;
            }
            break;
        }
        match t {
            "-i" | "-" | "--ignore-environment" | "-0" | "--null" | "-v" | "--debug" => i += 1,
            "-u" | "--unset" | "-C" | "--chdir" | "-P" => i += 2,
            "--" => {
                i += 1;
                break;
            }
            "-S" | "--split-string" => {
                let value = c.args.get(i + 1).cloned().unwrap_or_else(|| Arg::lit(""));
                env_split(w, c, &value, i + 2);
                return;
            }
            _ if t.starts_with("--split-string=") || (t.starts_with("-S") && t.len() > 2) => {
                let value = t.strip_prefix("--split-string=").unwrap_or_else(|| &t[2..]);
                let value = Arg {
                    text: value.to_string(),
                    literal: a.literal,
                    procsubst: false,
                };
                env_split(w, c, &value, i + 1);
                return;
            }
            _ if t.starts_with("--") => i += 1,
            _ if t.starts_with('-') && t.len() > 1 => {
                i += if t.ends_with(['u', 'C', 'P']) { 2 } else { 1 };
            }
            _ if is_assignment(t) => i += 1,
            _ => break,
        }
    }
    if i < c.args.len() {
        classify_rest(w, c, i);
    } else {
        w.found(ReadOnly, c.args, "prints the environment");
    }
}

/// `env -S STRING rest…`: split STRING into words and go on as `env`.
fn env_split(w: &mut Walker, c: Cmd, value: &Arg, rest: usize) {
    if !value.literal {
        dynamic(w, c, "`env -S` string");
        return;
    }
    match w.split_words(&value.text) {
        Some(words) => {
            let mut args = vec![Arg::lit("env")];
            args.extend(words);
            args.extend(c.rest(rest).iter().cloned());
            if w.enter() {
                env(w, c.with(&args));
                w.leave();
            }
        }
        None => w.opaque(
            format!("cannot split `env -S {}`", cut(&value.text)),
            Some(&value.text),
        ),
    }
}

fn flock(w: &mut Walker, c: Cmd) {
    let mut i = 1;
    let mut command: Option<&Arg> = None;
    let mut lockfile_seen = false;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        match t {
            "-c" | "--command" => {
                command = c.args.get(i + 1);
                break;
            }
            "-w" | "--wait" | "--timeout" | "-E" | "--conflict-exit-code" => i += 2,
            _ if t.starts_with('-') && t.len() > 1 => i += 1,
            _ if !lockfile_seen => {
                lockfile_seen = true;
                i += 1;
            }
            _ => {
                classify_rest(w, c, i);
                return;
            }
        }
    }
    match command {
        Some(a) => run_string(w, a, "flock", c.stdin),
        None => w.found(ReadOnly, c.args, "takes a lock"),
    }
}

fn watch(w: &mut Walker, c: Cmd) {
    let mut i = 1;
    let mut exec = false;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        match t {
            "-n" | "--interval" | "-q" | "--equexit" => i += 2,
            "-x" | "--exec" => {
                exec = true;
                i += 1;
            }
            "--" => {
                i += 1;
                break;
            }
            _ if t.starts_with('-') && t.len() > 1 => i += 1,
            _ => break,
        }
    }
    if i >= c.args.len() {
        w.found(ReadOnly, c.args, "no command");
    } else if exec {
        classify_rest(w, c, i);
    } else {
        join_and_run(w, c, i, "watch");
    }
}

/// Join `args[i..]` with spaces and run it as shell (`eval`, `watch`).
fn join_and_run(w: &mut Walker, c: Cmd, i: usize, name: &str) {
    let rest = c.rest(i);
    let text = rest
        .iter()
        .map(|a| a.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    if rest.iter().all(|a| a.literal) {
        w.program(&text, c.stdin);
    } else {
        w.opaque(
            format!("`{name}` runs text computed at run time: {}", cut(&text)),
            Some(&text),
        );
    }
}

/// Run a shell command string (`bash -c`, `su -c`, `flock -c`, …).
fn run_string(w: &mut Walker, a: &Arg, name: &str, stdin: &Stdin) {
    if a.literal {
        w.program(&a.text, stdin);
    } else {
        w.opaque(
            format!(
                "`{name}` runs a command string computed at run time: {}",
                cut(&a.text)
            ),
            Some(&a.text),
        );
    }
}

fn xargs(w: &mut Walker, c: Cmd) {
    let mut i = 1;
    let mut replace: Option<String> = None;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        if !a.literal {
            dynamic(w, c, "arguments of `xargs`");
            return;
        }
        match t {
            "-I" => {
                replace = c.args.get(i + 1).map(|a| a.text.clone());
                i += 2;
            }
            "-i" | "--replace" => {
                replace = Some("{}".to_string());
                i += 1;
            }
            "-L" | "-n" | "-P" | "-a" | "-d" | "-E" | "-s" => i += 2,
            "--" => {
                i += 1;
                break;
            }
            _ if t.starts_with("--replace=") => {
                replace = Some(t["--replace=".len()..].to_string());
                i += 1;
            }
            _ if t.starts_with("-I") => {
                replace = Some(t[2..].to_string());
                i += 1;
            }
            _ if t.starts_with("-i") => {
                replace = Some(t[2..].to_string());
                i += 1;
            }
            _ if t.starts_with('-') && t.len() > 1 => i += 1,
            _ => break,
        }
    }
    if i >= c.args.len() {
        w.found(ReadOnly, c.args, "xargs runs echo");
        return;
    }
    let inner: Vec<Arg> = c
        .rest(i)
        .iter()
        .map(|a| match &replace {
            Some(r) if !r.is_empty() && a.text.contains(r.as_str()) => Arg {
                literal: false,
                ..a.clone()
            },
            _ => a.clone(),
        })
        .collect();
    let empty = Stdin::Literal(String::new());
    classify(w, &inner, &empty, true);
}

/// `find … -exec CMD {} ;` and friends; find's own class depends on its
/// actions.
fn find(w: &mut Walker, c: Cmd) {
    let mut starts: Vec<&str> = Vec::new();
    let mut i = 1;
    // Leading -H/-L/-P/-O3/-D x options, then start paths.
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        if matches!(t, "-H" | "-L" | "-P") || t.starts_with("-O") {
            i += 1;
        } else if t == "-D" {
            i += 2;
        } else {
            break;
        }
    }
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        if t.starts_with('-') || t == "(" || t == "!" {
            break;
        }
        starts.push(t);
        i += 1;
    }
    let mut deletes = false;
    let mut writes = false;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        match t {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let end = (i + 1..c.args.len())
                    .find(|&k| matches!(c.args[k].text.as_str(), ";" | "+"))
                    .unwrap_or(c.args.len());
                per_file_command(w, &c.args[i + 1..end], "{}");
                i = end + 1;
            }
            "-delete" => {
                deletes = true;
                i += 1;
            }
            "-fprint" | "-fprint0" | "-fprintf" | "-fls" => {
                writes = true;
                i += 1;
            }
            _ => i += 1,
        }
    }
    if deletes && starts.iter().any(|s| critical_path(s)) {
        w.found(
            SystemDestruction,
            c.args,
            "deletes a system or home directory tree",
        );
    } else if deletes || writes {
        w.found(Other, c.args, "deletes or writes files");
    } else {
        w.found(ReadOnly, c.args, "");
    }
}

/// The command `find -exec` / `fd -x` runs per file: words holding the
/// file placeholder (`{}` for find; `{`, `{/}`, … for fd) are known only at
/// run time.
fn per_file_command(w: &mut Walker, args: &[Arg], placeholder: &str) {
    let inner: Vec<Arg> = args
        .iter()
        .map(|a| Arg {
            literal: a.literal && !a.text.contains(placeholder),
            ..a.clone()
        })
        .collect();
    classify(w, &inner, &Stdin::Literal(String::new()), false);
}

/// `fd … -x CMD` / `-X CMD`.
fn fd(w: &mut Walker, c: Cmd) {
    let exec = c
        .args
        .iter()
        .position(|a| matches!(a.text.as_str(), "-x" | "--exec" | "-X" | "--exec-batch"));
    match exec {
        Some(i) => {
            w.found(ReadOnly, &c.args[..i], "");
            let end = (i + 1..c.args.len())
                .find(|&k| c.args[k].text == ";")
                .unwrap_or(c.args.len());
            per_file_command(w, &c.args[i + 1..end], "{");
        }
        None => w.found(ReadOnly, c.args, ""),
    }
}

fn script(w: &mut Walker, c: Cmd) {
    w.found(Other, c.args, "records a terminal session to a file");
    let mut i = 1;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        if t == "-c" || t == "--command" {
            if let Some(a) = c.args.get(i + 1) {
                run_string(w, a, "script", c.stdin);
            }
            return;
        }
        if let Some(v) = t.strip_prefix("--command=") {
            let a = Arg {
                text: v.to_string(),
                literal: c.args[i].literal,
                procsubst: false,
            };
            run_string(w, &a, "script", c.stdin);
            return;
        }
        i += 1;
    }
}

fn eval(w: &mut Walker, c: Cmd) {
    if c.args.len() < 2 {
        w.found(ReadOnly, c.args, "evaluates nothing");
        return;
    }
    join_and_run(w, c, 1, "eval");
}

fn source(w: &mut Walker, c: Cmd) {
    let Some(file) = c.args.get(1) else {
        w.found(ReadOnly, c.args, "no file");
        return;
    };
    let t = file.text.as_str();
    if file.procsubst {
        w.opaque(
            format!("`{}` runs commands produced at run time", shown(c.args)),
            None,
        );
    } else if t == "/dev/stdin"
        || t == "-"
        || t.starts_with("/dev/fd/")
        || t.starts_with("/proc/self/fd/")
    {
        from_stdin(w, c, "source");
    } else {
        w.found(Other, c.args, "runs a shell script in this shell");
    }
}

fn trap(w: &mut Walker, c: Cmd) {
    let mut i = 1;
    if matches!(c.text(1), Some("-p" | "-l" | "-P")) || c.args.len() < 2 {
        w.found(ReadOnly, c.args, "lists traps");
        return;
    }
    if c.text(1) == Some("--") {
        i = 2;
    }
    w.found(
        ReadOnly,
        c.args,
        "sets a signal handler (its commands are classified)",
    );
    if let Some(action) = c.args.get(i)
        && !matches!(action.text.as_str(), "-" | "")
    {
        run_string(w, action, "trap", &Stdin::Inherited);
    }
}

fn alias(w: &mut Walker, c: Cmd) {
    w.found(
        ReadOnly,
        c.args,
        "defines aliases (their commands are classified)",
    );
    for a in c.args.iter().skip(1) {
        if let Some((_, value)) = a.text.split_once('=') {
            let value = Arg {
                text: value.to_string(),
                literal: a.literal,
                procsubst: false,
            };
            run_string(w, &value, "alias", &Stdin::Inherited);
        }
    }
}

// ----- shells and interpreters -----

fn shell(w: &mut Walker, c: Cmd, name: &str) {
    let mut i = 1;
    let mut has_c = false;
    let mut stdin_flag = false;
    let mut info = false;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        if !a.literal {
            if t.starts_with('-') || t.starts_with('+') {
                dynamic(w, c, &format!("options of `{name}`"));
                i += 1;
                continue;
            }
            break;
        }
        match t {
            "--" | "-" => {
                i += 1;
                break;
            }
            "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file" => i += 2,
            "--version" | "--help" => {
                info = true;
                i += 1;
            }
            _ if t.starts_with("--") => i += 1,
            _ if (t.starts_with('-') || t.starts_with('+')) && t.len() > 1 => {
                let flags = &t[1..];
                has_c |= flags.contains('c');
                stdin_flag |= flags.contains('s');
                i += if flags.ends_with(['o', 'O']) { 2 } else { 1 };
            }
            _ => break,
        }
    }
    if has_c {
        match c.args.get(i) {
            Some(a) => run_string(w, a, &format!("{name} -c"), c.stdin),
            None => w.found(Other, c.args, "shell without a command string"),
        }
        return;
    }
    if info && i >= c.args.len() {
        w.found(ReadOnly, c.args, "prints shell information");
        return;
    }
    if !stdin_flag && let Some(script) = c.args.get(i) {
        let t = script.text.as_str();
        if script.procsubst {
            w.opaque(
                format!("`{}` runs a script produced at run time", shown(c.args)),
                None,
            );
        } else if t == "/dev/stdin" || t.starts_with("/dev/fd/") || t.starts_with("/proc/self/fd/")
        {
            from_stdin(w, c, name);
        } else {
            w.found(Other, c.args, "runs a shell script");
        }
        return;
    }
    from_stdin(w, c, name);
}

/// A shell that reads its commands from standard input.
fn from_stdin(w: &mut Walker, c: Cmd, name: &str) {
    match c.stdin {
        Stdin::Literal(text) => w.program(text, &Stdin::Inherited),
        Stdin::Computed(template) => w.opaque(
            format!(
                "`{name}` runs commands produced at run time: {}",
                shown(c.args)
            ),
            template.as_deref(),
        ),
        Stdin::Pipe => w.opaque(format!("`{name}` runs commands read from a pipe"), None),
        Stdin::File => w.found(Other, c.args, "runs a shell script from a file"),
        Stdin::Inherited => w.opaque(
            format!("`{name}` runs commands read from standard input"),
            None,
        ),
    }
}

fn python(w: &mut Walker, c: Cmd, name: &str) {
    // `-m MODULE` runs a module as a program: dispatch the well-known ones.
    let mut i = 1;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        if t == "-m" || (t.starts_with("-m") && t.len() > 2) {
            let (module, rest) = if t == "-m" {
                (c.text(i + 1), i + 2)
            } else {
                (Some(&t[2..]), i + 1)
            };
            let Some(module) = module else { break };
            let module = module.split('.').next().unwrap_or(module);
            match module {
                "pip" | "twine" | "pipx" | "poetry" | "uv" | "flit" | "hatch" => {
                    let mut args = vec![Arg::lit(module)];
                    args.extend(c.rest(rest).iter().cloned());
                    dispatch(w, &program_name(module), c.with(&args));
                }
                "ensurepip" => w.found(InstallPackage, c.args, "installs pip"),
                "http" => w.found(AccessNetwork, c.args, "serves or fetches over HTTP"),
                "json" | "pydoc" | "site" | "sysconfig" | "platform" => {
                    w.found(ReadOnly, c.args, "")
                }
                _ => w.found(Other, c.args, "runs a Python module"),
            }
            return;
        }
        if t == "-W" || t == "-X" || t == "--check-hash-based-pycs" {
            i += 2;
        } else if t.starts_with('-') && t.len() > 1 && !t.starts_with("-c") {
            i += 1;
        } else {
            break;
        }
    }
    interpreter(
        w,
        c,
        name,
        &["-c"],
        &Opts::new("WX", &["--check-hash-based-pycs"]),
    );
}

/// An interpreter: inline code is visible (not shell) and runs as Other;
/// code computed at run time or read from a pipe is opaque.
fn interpreter(w: &mut Walker, c: Cmd, name: &str, code_flags: &[&str], o: &Opts) {
    let mut i = 1;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        // A code flag: alone (`-e CODE`), attached (`-eCODE`, `--eval=CODE`),
        // or ending a cluster (`perl -pe CODE`). `Some(literal)` of the code.
        let code: Option<Option<bool>> = if code_flags.contains(&t) {
            Some(c.args.get(i + 1).map(|a| a.literal))
        } else if code_flags.iter().any(|f| {
            if f.starts_with("--") {
                t.strip_prefix(f).is_some_and(|r| r.starts_with('='))
            } else {
                t.len() > f.len() && t.starts_with(f)
            }
        }) {
            Some(Some(a.literal))
        } else if t.starts_with('-')
            && !t.starts_with("--")
            && t.len() > 2
            && code_flags
                .iter()
                .any(|f| f.len() == 2 && t.ends_with(&f[1..]))
        {
            Some(c.args.get(i + 1).map(|a| a.literal))
        } else {
            None
        };
        if let Some(code) = code {
            match code {
                Some(true) => w.found(Other, c.args, &format!("runs inline {name} code")),
                Some(false) => w.opaque(
                    format!("`{name}` runs code computed at run time: {}", shown(c.args)),
                    None,
                ),
                None => w.found(Other, c.args, "no code"),
            }
            return;
        }
        if matches!(t, "--version" | "-V" | "--help" | "-h" | "-v") {
            w.found(ReadOnly, c.args, &format!("prints {name} information"));
            return;
        }
        if t == "-" {
            break;
        }
        if t.starts_with('-') && t.len() > 1 {
            let takes_value = (t.starts_with("--") && o.long.contains(&t))
                || (!t.starts_with("--")
                    && t.len() == 2
                    && t[1..].chars().all(|ch| o.short.contains(ch)));
            i += if takes_value { 2 } else { 1 };
            continue;
        }
        // A script file.
        if a.procsubst {
            w.opaque(
                format!("`{}` runs a program produced at run time", shown(c.args)),
                None,
            );
        } else if t == "/dev/stdin" || t.starts_with("/dev/fd/") {
            interp_stdin(w, c, name);
        } else {
            w.found(Other, c.args, &format!("runs a {name} program"));
        }
        return;
    }
    interp_stdin(w, c, name);
}

fn interp_stdin(w: &mut Walker, c: Cmd, name: &str) {
    match c.stdin {
        Stdin::Literal(_) => w.found(Other, c.args, &format!("runs inline {name} code")),
        Stdin::File => w.found(Other, c.args, &format!("runs a {name} program from a file")),
        Stdin::Pipe => w.opaque(format!("`{name}` runs a program read from a pipe"), None),
        Stdin::Computed(_) => w.opaque(
            format!("`{name}` runs a program produced at run time"),
            None,
        ),
        Stdin::Inherited => w.opaque(
            format!("`{name}` runs a program read from standard input"),
            None,
        ),
    }
}

// ----- git -----

#[rustfmt::skip]
const GIT_READ_ONLY: &[&str] = &[
    "status", "log", "diff", "show", "rev-parse", "ls-files", "ls-tree", "cat-file", "blame", "annotate",
    "describe", "shortlog", "grep", "show-ref", "show-branch", "merge-base", "name-rev", "for-each-ref",
    "count-objects", "rev-list", "diff-tree", "diff-files", "diff-index", "var", "version", "help",
    "whatchanged", "check-ignore", "check-attr", "check-ref-format", "cherry", "range-diff", "verify-commit",
    "verify-tag", "check-mailmap", "get-tar-commit-id", "--version", "--help", "-h", "-v",
];

#[rustfmt::skip]
const GIT_MUTATING: &[&str] = &[
    "add", "rm", "mv", "restore", "checkout", "switch", "reset", "clean", "init", "gc", "prune", "repack",
    "apply", "update-index", "update-ref", "symbolic-ref", "write-tree", "read-tree", "hash-object", "mktag",
    "mktree", "sparse-checkout", "maintenance", "format-patch", "bundle", "replace", "mergetool", "difftool",
    "citool", "gui", "pack-refs", "pack-objects", "index-pack", "unpack-objects", "prune-packed",
    "credential", "credential-cache", "credential-store", "fsck", "mailinfo", "mailsplit", "rerere",
    "checkout-index", "request-pull", "merge-file", "merge-tree", "merge-index", "upload-pack",
    "receive-pack", "upload-archive", "daemon", "instaweb", "fast-export", "multi-pack-index",
    "commit-graph", "restore", "stage", "unpack-file", "backfill", "scalar",
];

fn git(w: &mut Walker, c: Cmd) {
    let mut i = 1;
    let mut config_override = false;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        if !a.literal {
            dynamic(w, c, "git subcommand");
            return;
        }
        match t {
            "-C" | "--git-dir" | "--work-tree" | "--namespace" | "--super-prefix"
            | "--list-cmds" | "--attr-source" => i += 2,
            "-c" | "--config-env" => {
                config_override = true;
                i += 2;
            }
            _ if t.starts_with("--config-env=") || t.starts_with("--exec-path") => {
                config_override = true;
                i += 1;
            }
            _ if t.starts_with('-') && !matches!(t, "--version" | "--help" | "-h" | "-v") => i += 1,
            _ => break,
        }
    }
    let Some(sub) = c.text(i) else {
        if c.appended {
            w.opaque(
                format!("xargs supplies the git subcommand: {}", shown(c.args)),
                None,
            );
        } else {
            w.found(ReadOnly, c.args, "git without a subcommand prints help");
        }
        return;
    };
    let g = Cmd {
        args: c.args,
        stdin: c.stdin,
        appended: c.appended,
    };
    let rest = c.rest(i + 1);
    let first = |k: usize| {
        rest.iter()
            .filter(|a| !a.text.starts_with('-'))
            .nth(k)
            .map(|a| a.text.as_str())
    };
    let has = |flags: &[&str]| rest.iter().any(|a| flags.contains(&a.text.as_str()));
    let read_only = |w: &mut Walker, ok: bool, why: &str| {
        if ok && config_override {
            w.found(
                Other,
                g.args,
                "`git -c` can configure programs for git to run",
            );
        } else if ok {
            w.found(ReadOnly, g.args, why);
        } else {
            w.found(Other, g.args, why);
        }
    };
    match sub {
        "commit" | "merge" | "cherry-pick" | "revert" | "am" | "commit-tree" | "filter-branch"
        | "fast-import" | "filter-repo" => w.found(CreateCommit, c.args, ""),
        "rebase" => {
            w.found(CreateCommit, c.args, "");
            let mut k = 0;
            while k < rest.len() {
                let t = rest[k].text.as_str();
                if t == "-x" || t == "--exec" {
                    if let Some(a) = rest.get(k + 1) {
                        run_string(w, a, "git rebase --exec", &Stdin::Inherited);
                    }
                    k += 2;
                } else if let Some(v) = t.strip_prefix("--exec=") {
                    let a = Arg {
                        text: v.to_string(),
                        literal: rest[k].literal,
                        procsubst: false,
                    };
                    run_string(w, &a, "git rebase --exec", &Stdin::Inherited);
                    k += 1;
                } else {
                    k += 1;
                }
            }
        }
        "pull" => {
            w.found(AccessNetwork, c.args, "fetches from a remote");
            w.found(CreateCommit, c.args, "may create a merge commit");
        }
        "push" => w.found_targets(PushRemote, c.args, "", git_push_targets(rest)),
        "send-pack" | "http-push" => w.found(PushRemote, c.args, ""),
        "clone" | "fetch" | "ls-remote" | "fetch-pack" | "http-fetch" | "send-email"
        | "imap-send" | "svn" | "p4" => w.found(AccessNetwork, c.args, "talks to a remote"),
        "archive" => {
            if rest.iter().any(|a| a.text.starts_with("--remote")) {
                w.found(AccessNetwork, c.args, "talks to a remote");
            } else {
                w.found(Other, c.args, "writes an archive");
            }
        }
        "remote" => match first(0) {
            None | Some("get-url") => read_only(w, true, "lists remotes"),
            Some("show") if has(&["-n"]) => read_only(w, true, "shows a remote"),
            Some("show" | "update" | "prune") => {
                w.found(AccessNetwork, c.args, "talks to a remote")
            }
            Some(_) => w.found(Other, c.args, "changes remotes"),
        },
        "submodule" => match first(0) {
            None | Some("status" | "summary") => read_only(w, true, ""),
            Some("update" | "add" | "sync" | "init") => {
                w.found(AccessNetwork, c.args, "clones or fetches submodules")
            }
            Some("foreach") => {
                w.found(Other, c.args, "runs a command in every submodule");
                let pos = rest.iter().position(|a| a.text == "foreach").unwrap_or(0);
                let cmd: Vec<Arg> = rest[pos + 1..]
                    .iter()
                    .filter(|a| !a.text.starts_with("--"))
                    .cloned()
                    .collect();
                let text = cmd
                    .iter()
                    .map(|a| a.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" ");
                if cmd.iter().all(|a| a.literal) {
                    w.program(&text, &Stdin::Inherited);
                } else {
                    w.opaque(
                        format!(
                            "`git submodule foreach` runs text computed at run time: {}",
                            cut(&text)
                        ),
                        Some(&text),
                    );
                }
            }
            Some(_) => w.found(Other, c.args, "changes submodules"),
        },
        "lfs" => match first(0) {
            Some("push") => w.found(PushRemote, c.args, ""),
            Some("fetch" | "pull" | "clone") => w.found(AccessNetwork, c.args, "talks to a remote"),
            Some("ls-files" | "status" | "env" | "version") | None => read_only(w, true, ""),
            Some(_) => w.found(Other, c.args, "git lfs"),
        },
        "subtree" => match first(0) {
            Some("push") => w.found(PushRemote, c.args, ""),
            Some("pull") => {
                w.found(AccessNetwork, c.args, "fetches from a remote");
                w.found(CreateCommit, c.args, "creates a merge commit");
            }
            Some("add" | "merge") => w.found(CreateCommit, c.args, ""),
            _ => w.found(Other, c.args, "git subtree"),
        },
        "bisect" => {
            w.found(Other, c.args, "moves HEAD");
            if first(0) == Some("run") {
                let pos = rest.iter().position(|a| a.text == "run").unwrap_or(0);
                let inner = &rest[pos + 1..];
                if !inner.is_empty() {
                    classify(w, inner, &Stdin::Inherited, false);
                }
            }
        }
        "stash" => read_only(w, matches!(first(0), Some("list" | "show")), "stash"),
        "branch" => read_only(w, git_branch_lists(rest), "branch"),
        "tag" => {
            let lists = rest.is_empty()
                || (has(&[
                    "-l",
                    "--list",
                    "-v",
                    "--verify",
                    "--contains",
                    "--points-at",
                    "-n",
                ]) && !has(&[
                    "-d",
                    "--delete",
                    "-a",
                    "--annotate",
                    "-s",
                    "--sign",
                    "-u",
                    "-f",
                    "--force",
                    "-m",
                    "-F",
                    "-e",
                ]));
            read_only(w, lists, "tag");
        }
        "config" => {
            let gets = has(&[
                "--get",
                "--get-all",
                "--get-regexp",
                "--get-urlmatch",
                "--list",
                "-l",
                "get",
                "list",
            ]);
            let sets = has(&[
                "--unset",
                "--unset-all",
                "--add",
                "--replace-all",
                "--rename-section",
                "--remove-section",
                "-e",
                "--edit",
                "set",
                "unset",
                "rename-section",
                "remove-section",
                "edit",
            ]);
            read_only(w, gets && !sets, "config");
        }
        "worktree" => read_only(w, first(0) == Some("list"), "worktree"),
        "reflog" => read_only(
            w,
            matches!(first(0), None | Some("show" | "exists")),
            "reflog",
        ),
        "notes" => read_only(w, matches!(first(0), None | Some("list" | "show")), "notes"),
        _ if GIT_READ_ONLY.contains(&sub) => {
            let risky = rest.iter().find(|a| {
                let t = a.text.as_str();
                t == "--output"
                    || t.starts_with("--output=")
                    || t == "--ext-diff"
                    || t == "--textconv"
                    || t.starts_with("--exec")
                    || t.starts_with("--open-files-in-pager")
                    || (sub == "grep" && t.starts_with("-O"))
            });
            match risky {
                Some(r) => w.found(
                    Other,
                    c.args,
                    &format!("`{}` writes files or runs programs", r.text),
                ),
                None => read_only(w, true, ""),
            }
        }
        _ if GIT_MUTATING.contains(&sub) => w.found(Other, c.args, ""),
        _ => w.opaque(
            format!("`git {sub}` is an alias or an extension; what it runs is unknown"),
            None,
        ),
    }
}

/// `git branch` that only lists.
fn git_branch_lists(rest: &[Arg]) -> bool {
    const MUTATING: &[&str] = &[
        "-d",
        "-D",
        "--delete",
        "-m",
        "-M",
        "--move",
        "-c",
        "-C",
        "--copy",
        "-f",
        "--force",
        "--set-upstream-to",
        "-u",
        "--unset-upstream",
        "--edit-description",
        "-t",
        "--track",
        "--no-track",
        "--create-reflog",
    ];
    const VALUED: &[&str] = &[
        "--contains",
        "--no-contains",
        "--merged",
        "--no-merged",
        "--points-at",
        "--sort",
        "--format",
        "--color",
        "--column",
    ];
    let listing = rest
        .iter()
        .any(|a| matches!(a.text.as_str(), "-l" | "--list"));
    let mut prev_valued = false;
    for a in rest {
        let t = a.text.as_str();
        if MUTATING.contains(&t) || t.starts_with("--set-upstream-to=") {
            return false;
        }
        if t.starts_with('-') {
            prev_valued = VALUED.contains(&t);
            continue;
        }
        if !listing && !prev_valued {
            return false;
        }
        prev_valued = false;
    }
    true
}

// ----- gh / glab -----

fn forge(w: &mut Walker, c: Cmd, tool: &str) {
    // The first two positionals are the command group and action; `-R X`
    // and `--repo X` may come anywhere.
    let mut pos: Vec<usize> = Vec::new();
    let mut i = 1;
    while i < c.args.len() && pos.len() < 2 {
        let a = &c.args[i];
        let t = a.text.as_str();
        if matches!(t, "-R" | "--repo" | "--hostname") {
            i += 2;
            continue;
        }
        if t.starts_with('-') && a.literal {
            i += 1;
            continue;
        }
        if !a.literal {
            dynamic(w, c, &format!("{tool} subcommand"));
            return;
        }
        pos.push(i);
        i += 1;
    }
    let group = pos.first().and_then(|&i| c.text(i));
    let action = pos.get(1).and_then(|&i| c.text(i));
    let Some(group) = group else {
        if c.appended {
            w.opaque(
                format!("xargs supplies the {tool} subcommand: {}", shown(c.args)),
                None,
            );
        } else {
            w.found(ReadOnly, c.args, "prints help");
        }
        return;
    };
    const READS: &[&str] = &[
        "view", "list", "ls", "diff", "status", "checks", "watch", "download", "verify",
    ];
    let (class, why) = match (group, action) {
        ("pr" | "mr", None) | ("issue" | "release" | "repo" | "workflow" | "run", None) => {
            (ReadOnly, "prints help")
        }
        ("pr" | "mr", Some("create" | "new")) => (OpenPullRequest, ""),
        ("pr" | "mr", Some("checkout" | "co")) => (AccessNetwork, "fetches a pull request branch"),
        ("pr" | "mr", Some(a)) if READS.contains(&a) => (AccessNetwork, "reads from the forge"),
        ("pr" | "mr", Some(_)) => (PublishReviewOrMerge, ""),
        ("issue", Some(a)) if READS.contains(&a) => (AccessNetwork, "reads from the forge"),
        ("issue", Some(_)) => (WriteExternalTracker, ""),
        ("release", Some(a)) if READS.contains(&a) => (AccessNetwork, "reads from the forge"),
        ("release", Some(_)) => (PublishPackage, "publishes a release"),
        ("repo", Some("clone" | "view" | "list" | "ls")) => (AccessNetwork, "reads from the forge"),
        ("repo", Some("set-default")) => (Other, "local setting"),
        ("repo", Some(_)) => (PushRemote, "changes a remote repository"),
        ("api", _) => {
            forge_api(w, c, pos.first().copied().unwrap_or(1) + 1, tool);
            return;
        }
        ("search" | "browse" | "status", _) => (AccessNetwork, "reads from the forge"),
        ("auth" | "config", _) => (Other, "changes local forge settings"),
        ("help" | "version" | "completion", _) => (ReadOnly, ""),
        ("alias", Some("list" | "ls"))
        | ("extension" | "ext" | "extensions", Some("list" | "ls" | "search")) => (ReadOnly, ""),
        ("alias", _) => (Other, "changes aliases"),
        ("extension" | "ext" | "extensions", Some("install" | "upgrade")) => {
            (InstallPackage, "installs a gh extension")
        }
        ("extension" | "ext" | "extensions", _) => (Other, "manages extensions"),
        (
            "workflow" | "run" | "secret" | "variable" | "label" | "gist" | "project" | "cache"
            | "ruleset" | "codespace" | "org" | "attestation" | "snippet" | "ci" | "pipeline"
            | "schedule" | "variable-set",
            a,
        ) => match a {
            Some(a) if READS.contains(&a) => (AccessNetwork, "reads from the forge"),
            None => (ReadOnly, "prints help"),
            Some(_) => (WriteExternalTracker, "writes to the forge"),
        },
        _ => {
            w.opaque(
                format!("`{tool} {group}` is an alias or an extension; what it runs is unknown"),
                None,
            );
            return;
        }
    };
    if class == OpenPullRequest {
        let after = pos.get(1).map_or(c.args.len(), |&i| i + 1);
        let targets = pull_request_base(&c.args[after.min(c.args.len())..], tool);
        w.found_targets(class, c.args, why, targets);
    } else {
        w.found(class, c.args, why);
    }
}

/// The branch a `gh pr create` / `glab mr create` targets: `--base X`
/// (`-B`, gh) or `--target-branch X` (`-b`, glab); without one, the forge's
/// default branch, which cannot be told here.
fn pull_request_base(args: &[Arg], tool: &str) -> Targets {
    let (short, long) = if tool == "glab" {
        ("-b", "--target-branch")
    } else {
        ("-B", "--base")
    };
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        let t = args[i].text.as_str();
        let value = if t == short || t == long {
            i += 1;
            args.get(i)
        } else if t.strip_prefix(long).is_some_and(|v| v.starts_with('=')) {
            Some(&args[i])
        } else {
            None
        };
        if let Some(v) = value {
            let text = v.text.strip_prefix(&format!("{long}=")).unwrap_or(&v.text);
            found = v.literal.then(|| text.to_string());
            if found.is_none() {
                return Targets::Unknown;
            }
        }
        i += 1;
    }
    match found {
        Some(branch) if !branch.is_empty() => Targets::Known(vec![branch]),
        _ => Targets::Unknown,
    }
}

/// The branches a `git push` updates, from its refspecs (`main`,
/// `HEAD:main`, `+src:refs/heads/dst`, `:gone`). Unknown when it cannot be
/// told from the line: no refspec (push.default decides), `HEAD` or other
/// revision syntax as the destination, a pattern, `--all`/`--mirror`/
/// `--branches`/`--tags`, or any word computed at run time.
fn git_push_targets(rest: &[Arg]) -> Targets {
    const WITH_VALUE: &[&str] = &["--repo", "-o", "--push-option", "--receive-pack", "--exec"];
    let mut positional: Vec<&Arg> = Vec::new();
    let mut options_done = false;
    let mut i = 0;
    while i < rest.len() {
        let a = &rest[i];
        let t = a.text.as_str();
        i += 1;
        if !a.literal {
            return Targets::Unknown;
        }
        if !options_done && t == "--" {
            options_done = true;
        } else if !options_done && t.starts_with('-') {
            if matches!(t, "--all" | "--mirror" | "--branches" | "--tags") {
                return Targets::Unknown;
            }
            if WITH_VALUE.contains(&t) {
                i += 1;
            }
        } else {
            positional.push(a);
        }
    }
    if positional.len() < 2 {
        return Targets::Unknown;
    }
    let mut branches = Vec::new();
    for refspec in &positional[1..] {
        let spec = refspec.text.trim_start_matches('+');
        let dst = match spec.rsplit_once(':') {
            Some((_, dst)) => dst,
            None => spec,
        };
        let plain = !dst.is_empty()
            && !dst.starts_with("HEAD")
            && !dst.contains(['*', '@', '~', '^', '{'])
            && dst != "-";
        if !plain {
            return Targets::Unknown;
        }
        match dst.strip_prefix("refs/") {
            // A tag or another ref is no branch.
            Some(r) => branches.extend(r.strip_prefix("heads/").map(str::to_string)),
            None => branches.push(dst.to_string()),
        }
    }
    Targets::Known(branches)
}

/// `gh api`: a write when the method says so or when fields are sent
/// without an explicit method (gh then POSTs).
fn forge_api(w: &mut Walker, c: Cmd, start: usize, tool: &str) {
    let mut method: Option<String> = None;
    let mut fields = false;
    let mut endpoint: Option<&str> = None;
    let mut i = start;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        let value = |k: usize| {
            c.args
                .get(k)
                .map(|a| (a.text.to_ascii_uppercase(), a.literal))
        };
        match t {
            "-X" | "--method" => {
                match value(i + 1) {
                    Some((m, true)) => method = Some(m),
                    Some((_, false)) => {
                        dynamic(w, c, &format!("`{tool} api` method"));
                        return;
                    }
                    None => {}
                }
                i += 2;
            }
            "-f" | "-F" | "--field" | "--raw-field" | "--input" => {
                fields = true;
                i += 2;
            }
            "-H" | "--header" | "-q" | "--jq" | "-t" | "--template" | "--hostname" | "--cache"
            | "-p" | "--preview" => i += 2,
            _ if t.starts_with("--method=") => {
                method = Some(t["--method=".len()..].to_ascii_uppercase());
                i += 1;
            }
            _ if t.starts_with("-X") && t.len() > 2 => {
                method = Some(t[2..].to_ascii_uppercase());
                i += 1;
            }
            _ if t.starts_with("--field=")
                || t.starts_with("--raw-field=")
                || t.starts_with("--input=")
                || (t.starts_with("-f") && t.len() > 2)
                || (t.starts_with("-F") && t.len() > 2) =>
            {
                fields = true;
                i += 1;
            }
            _ if t.starts_with('-') => i += 1,
            _ => {
                if endpoint.is_none() {
                    endpoint = Some(t);
                }
                i += 1;
            }
        }
    }
    let write = match &method {
        Some(m) => !matches!(m.as_str(), "GET" | "HEAD"),
        None => fields,
    };
    if !write {
        w.found(AccessNetwork, c.args, "reads from the forge API");
        return;
    }
    let e = endpoint.unwrap_or_default();
    let (class, why) = if e.contains("/pulls")
        && (e.contains("/merge")
            || e.contains("/reviews")
            || e.contains("/comments")
            || e.contains("/requested_reviewers"))
    {
        (PublishReviewOrMerge, "writes to a pull request")
    } else if e.trim_end_matches('/').ends_with("/pulls") {
        (OpenPullRequest, "creates a pull request")
    } else if e.contains("/pulls/") {
        (PublishReviewOrMerge, "edits a pull request")
    } else if e.contains("/issues") {
        (WriteExternalTracker, "writes to issues")
    } else if e.contains("/releases") {
        (PublishPackage, "publishes a release")
    } else if e.contains("/git/")
        || e.contains("/contents/")
        || e.contains("/merges")
        || e.ends_with("/repos")
        || e.contains("/forks")
        || e.contains("/branches")
    {
        (PushRemote, "changes a remote repository")
    } else {
        (WriteExternalTracker, "writes through the forge API")
    };
    w.found(class, c.args, why);
}

// ----- package managers -----

/// A tool classified by its subcommand: the first positional argument.
struct Tool {
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

fn tool(name: &str) -> Option<&'static Tool> {
    TOOLS.iter().find(|t| t.names.contains(&name))
}

/// Classify a [`TOOLS`] entry by its subcommand. With no subcommand: help
/// or version output (read-only), unless xargs appends one.
fn run_tool(w: &mut Walker, c: Cmd, name: &str) {
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
/// and installs nothing (issue 15 item 6); with one (`npm init vite`,
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
/// already (issue 15 item 6). `--no` / `--no-install` before the operand
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

fn uv(w: &mut Walker, c: Cmd) {
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

fn go(w: &mut Walker, c: Cmd) {
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

// ----- containers -----

fn container(w: &mut Walker, c: Cmd, name: &str) {
    let Some(mut i) = positional_index(
        c,
        1,
        &[
            "-H",
            "--host",
            "--context",
            "-c",
            "--config",
            "--log-level",
            "--url",
            "--connection",
        ],
    ) else {
        w.found(Other, c.args, name);
        return;
    };
    if matches!(c.text(i), Some("container" | "image")) {
        i += 1;
    }
    match c.text(i) {
        Some("run" | "create") => match container_escape(c.rest(i + 1)) {
            Some(why) => w.found(ContainerEscape, c.args, why),
            None => w.found(Other, c.args, "runs a container"),
        },
        Some("exec" | "attach" | "debug") => {
            w.found(ContainerEscape, c.args, "executes inside another container")
        }
        Some("push") => w.found(PublishPackage, c.args, "publishes an image"),
        Some("pull" | "login" | "search") => w.found(AccessNetwork, c.args, "talks to a registry"),
        _ => w.found(Other, c.args, name),
    }
}

/// Flags of `docker run` that give the container the host.
fn container_escape(args: &[Arg]) -> Option<&'static str> {
    let mut i = 0;
    while i < args.len() {
        let t = args[i].text.as_str();
        let next = args.get(i + 1).map(|a| a.text.as_str()).unwrap_or_default();
        let (flag, value) = match t.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, v),
            _ => (t, next),
        };
        match flag {
            "--privileged" if value != "false" || !t.contains('=') => {
                return Some("privileged container");
            }
            "--pid" | "--network" | "--net" | "--ipc" | "--uts" | "--userns" | "--cgroupns"
                if value == "host" =>
            {
                return Some("shares a host namespace");
            }
            "--cap-add" | "--device" | "--device-cgroup-rule" => {
                return Some("adds capabilities or devices");
            }
            "--security-opt" if value.contains("unconfined") || value.contains("disable") => {
                return Some("disables confinement");
            }
            "--mount"
                if value.contains("type=bind")
                    || value.contains("source=/")
                    || value.contains("src=/") =>
            {
                return Some("mounts a host path");
            }
            "-v" | "--volume" if host_mount(value) => return Some("mounts a host path"),
            _ if t.starts_with("-v") && t.len() > 2 && host_mount(&t[2..]) => {
                return Some("mounts a host path");
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn host_mount(spec: &str) -> bool {
    match spec.split_once(':') {
        Some((src, _)) => src.starts_with(['/', '~', '.', '$']),
        None => false,
    }
}

// ----- destruction -----

fn rm(w: &mut Walker, c: Cmd) {
    let mut forceful = false;
    let mut no_preserve = false;
    let mut targets: Vec<&str> = Vec::new();
    let mut options_done = false;
    for a in c.args.iter().skip(1) {
        let t = a.text.as_str();
        if !options_done && t == "--" {
            options_done = true;
        } else if !options_done && t.starts_with("--") {
            no_preserve |= t == "--no-preserve-root";
            forceful |= matches!(t, "--recursive" | "--force");
        } else if !options_done && t.starts_with('-') && t.len() > 1 {
            forceful |= t.contains(['r', 'R', 'f']);
        } else {
            targets.push(t);
        }
    }
    if no_preserve {
        w.found(SystemDestruction, c.args, "--no-preserve-root");
    } else if forceful && targets.iter().any(|t| critical_path(t)) {
        w.found(
            SystemDestruction,
            c.args,
            "removes a system or home directory",
        );
    } else {
        w.found(Other, c.args, "removes files");
    }
}

fn kill(w: &mut Walker, c: Cmd) {
    // kill [-s SIG | -SIG | -n NUM] [--] PID…; a PID of -1 is every process.
    let mut i = 1;
    let mut signal_seen = false;
    let mut pids_only = false;
    let mut every = false;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        if !pids_only && (t == "-s" || t == "-n" || t == "--signal") {
            signal_seen = true;
            i += 2;
            continue;
        }
        if !pids_only && t == "--" {
            pids_only = true;
            i += 1;
            continue;
        }
        if !pids_only && !signal_seen && t.starts_with('-') && t.len() > 1 {
            signal_seen = true;
            i += 1;
            continue;
        }
        if t == "-1" {
            every = true;
        }
        i += 1;
    }
    if every {
        w.found(SystemDestruction, c.args, "kills every process");
    } else {
        w.found(Other, c.args, "signals processes");
    }
}

// ----- the read-only allowlist -----

/// `Some(Ok)`: read-only. `Some(Err(why))`: an allowlisted program used with
/// an option that writes or runs programs. `None`: not on the list.
fn read_only(name: &str, c: Cmd) -> Option<Result<(), &'static str>> {
    #[rustfmt::skip]
    const ALWAYS: &[&str] = &[
        "ls", "dir", "vdir", "cat", "tac", "head", "tail", "wc", "nl", "grep", "egrep", "fgrep", "zgrep",
        "zcat", "bzcat", "xzcat", "echo", "printf", "pwd", "true", "false", "whoami", "id", "groups",
        "uname", "arch", "nproc", "uptime", "free", "ps", "pgrep", "which", "whereis", "type", "stat",
        "file", "du", "df", "basename", "dirname", "realpath", "readlink", "cut", "tr", "paste", "join",
        "comm", "cmp", "diff", "diff3", "fold", "fmt", "column", "expand", "unexpand", "rev", "seq", "od",
        "hexdump", "strings", "md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum",
        "b2sum", "cksum", "sum", "test", "[", "printenv", "locale", "getconf", "tty", "lsb_release", "lscpu",
        "lsblk", "jq", "look", "tsort", "numfmt", "expr", "sleep", ":", "wait", "jobs", "cd", "pushd",
        "popd", "dirs", "export", "unset", "set", "shopt", "local", "declare", "typeset", "readonly", "read",
        "shift", "exit", "return", "break", "continue", "times", "umask", "hash", "getopts", "let", "help",
        "ag", "yes", "zipinfo", "bat", "batcat", "cal", "env", "logname", "users", "who", "w", "last",
        "lsof", "ss", "netstat", "ifconfig", "tput", "stty", "clear", "mapfile", "readarray", "caller",
        "ulimit", "disown", "history", "unalias", "shasum", "sha1", "md5", "difft", "delta", "tokei", "cloc",
        "scc", "compgen",
    ];
    if ALWAYS.contains(&name) {
        return Some(Ok(()));
    }
    let args: Vec<&str> = c.args.iter().skip(1).map(|a| a.text.as_str()).collect();
    let has = |f: &str| args.contains(&f);
    let starts = |p: &str| args.iter().any(|a| a.starts_with(p));
    let r = match name {
        "rg" => {
            if starts("--pre") || starts("--hostname-bin") || has("-z") || has("--search-zip") {
                Err("`rg --pre`/`-z` run programs")
            } else {
                Ok(())
            }
        }
        "sort" => {
            let output = args.iter().any(|a| {
                a.starts_with("--output")
                    || a.starts_with("--compress-program")
                    || (a.starts_with("-o") && !a.starts_with("--"))
            });
            if output {
                Err("`sort -o` writes a file")
            } else {
                Ok(())
            }
        }
        "date" => {
            if args.iter().any(|a| *a == "-s" || a.starts_with("--set")) {
                Err("sets the clock")
            } else {
                Ok(())
            }
        }
        "hostname" => {
            if args.iter().any(|a| !a.starts_with('-')) {
                Err("sets the host name")
            } else {
                Ok(())
            }
        }
        "uniq" => {
            let mut positional = 0;
            let mut skip = false;
            for a in &args {
                if skip {
                    skip = false;
                } else if matches!(*a, "-f" | "-s" | "-w") {
                    skip = true;
                } else if !a.starts_with('-') || *a == "-" {
                    positional += 1;
                }
            }
            if positional > 1 {
                Err("`uniq IN OUT` writes a file")
            } else {
                Ok(())
            }
        }
        "tree" => {
            if has("-o") {
                Err("`tree -o` writes a file")
            } else {
                Ok(())
            }
        }
        "base64" | "base32" | "basenc" => {
            if has("-o") || starts("--output") {
                Err("writes a file")
            } else {
                Ok(())
            }
        }
        "xxd" => {
            let positional = args.iter().filter(|a| !a.starts_with('-')).count();
            if has("-r")
                || has("-revert")
                || positional > 2
                || (positional == 2
                    && !args
                        .iter()
                        .any(|a| matches!(*a, "-c" | "-g" | "-l" | "-s" | "-o" | "-n")))
            {
                Err("writes a file")
            } else {
                Ok(())
            }
        }
        "sed" => {
            if sed(&args) {
                Ok(())
            } else {
                Err("sed scripts can write files; only `sed -n Np` is read-only")
            }
        }
        "tar" => {
            let first = args.first().copied().unwrap_or_default();
            let cluster = first.trim_start_matches('-');
            let lists = (has("--list") || (!first.starts_with("--") && cluster.contains('t')))
                && !cluster.contains(['x', 'c', 'r', 'u', 'A'])
                && !has("--extract")
                && !has("--create");
            if lists {
                Ok(())
            } else {
                Err("creates or extracts an archive")
            }
        }
        "unzip" => {
            if has("-l") || has("-Z") || has("-t") || has("-v") {
                Ok(())
            } else {
                Err("extracts an archive")
            }
        }
        "yq" => {
            if has("-i") || starts("--inplace") {
                Err("edits files in place")
            } else {
                Ok(())
            }
        }
        "ack" => {
            if starts("--pager") || starts("--output") {
                Err("runs a pager")
            } else {
                Ok(())
            }
        }
        "gzip" | "gunzip" | "bzip2" | "xz" | "zstd" => {
            // Only the listing, testing and to-stdout forms.
            if has("-l")
                || has("--list")
                || has("-t")
                || has("--test")
                || has("-c")
                || has("--stdout")
            {
                Ok(())
            } else {
                Err("compresses or decompresses files in place")
            }
        }
        _ => return None,
    };
    Some(r)
}

/// `sed -n 5p`, `sed -n 1,20p file`, `sed -n '$p'`: print-only scripts.
fn sed(args: &[&str]) -> bool {
    let mut quiet = false;
    let mut script: Option<&str> = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        if a == "-n" || a == "--quiet" || a == "--silent" {
            quiet = true;
        } else if a == "-e" || a == "--expression" {
            if script.is_some() {
                return false;
            }
            script = args.get(i + 1).copied();
            i += 1;
        } else if a.starts_with('-') && a.len() > 1 {
            if a.starts_with("--") || a.contains(['i', 'f', 'e']) {
                return false;
            }
            quiet |= a.contains('n');
        } else if script.is_none() {
            script = Some(a);
        }
        i += 1;
    }
    let Some(script) = script else { return false };
    quiet
        && script.ends_with('p')
        && script.len() > 1
        && script[..script.len() - 1]
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b',' || b == b'$')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn critical_paths() {
        for p in [
            "/",
            "/*",
            "//",
            "/.",
            "~",
            "~/",
            "~/*",
            "$HOME",
            "$HOME/",
            "$HOME/*",
            "/etc",
            "/usr/",
            "/home/alice",
            "~bob",
            "/..",
        ] {
            assert!(critical_path(p), "{p}");
        }
        for p in [
            "",
            ".",
            "./build",
            "/tmp/x",
            "target",
            "/home/alice/project",
            "$BUILD_DIR",
            "*",
            "~/project",
        ] {
            assert!(!critical_path(p), "{p}");
        }
    }

    #[test]
    fn setuid_modes() {
        for m in [
            "u+s", "g+s", "+s", "ug=rwxs", "4755", "2755", "6755", "04755", "a+x,u+s",
        ] {
            assert!(setuid_mode(m), "{m}");
        }
        for m in ["755", "0755", "u+x", "go-w", "1777", "a=r", ""] {
            assert!(!setuid_mode(m), "{m}");
        }
    }

    #[test]
    fn program_names() {
        assert_eq!(program_name("/usr/bin/python3.12"), "python");
        assert_eq!(program_name("pip3"), "pip");
        assert_eq!(program_name("./mvnw"), "mvnw");
        assert_eq!(program_name("python-config"), "python-config");
        assert_eq!(program_name("git"), "git");
    }

    #[test]
    fn remote_specs() {
        assert!(is_remote_spec("host:/srv"));
        assert!(is_remote_spec("user@host:dir"));
        assert!(!is_remote_spec("./a:b"));
        assert!(!is_remote_spec("/local/dir"));
        assert!(!is_remote_spec("dir/file"));
    }

    #[test]
    fn sed_scripts() {
        assert!(sed(&["-n", "5p"]));
        assert!(sed(&["-n", "1,20p", "file"]));
        assert!(sed(&["-n", "$p"]));
        assert!(!sed(&["-n", "1w out"]));
        assert!(!sed(&["-i", "s/a/b/", "f"]));
        assert!(!sed(&["s/a/b/"]));
        assert!(!sed(&["-ni", "5p", "f"]));
    }
}
