//! Escape: namespaces, mounts, kernel settings and modules, and the
//! container runtimes (`docker run` with a host bind or privileges,
//! `docker exec`, `kubectl exec`, …).

use super::Cmd;
use super::options::{Opts, classify_rest, positional_index, scan};
use crate::Class::*;
use crate::walk::Walker;
use crate::words::Arg;

/// Classifies `c` when `name` is one of this family's; `false` when it is not.
pub(super) fn dispatch(w: &mut Walker, name: &str, c: Cmd) -> bool {
    match name {
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
        _ => return false,
    }
    true
}

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
