//! PID 1's command line: parsed here without touching the process (so it
//! can be tested), then the control descriptor adopted.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use crate::caches::CacheOverlays;
use crate::counters::Counters;
use crate::masks::Masks;
use sandbox_paths::write_rules::GuardConfig;

/// A loopback TCP port forwarded to a unix socket bound into the sandbox:
/// how commands reach the session's egress proxies (SPEC E2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    pub port: u16,
    pub socket: String,
}

/// What PID 1 was started with: the control socket, the guard, the egress
/// forwards and the proxy's channel, where commands may exec from, the
/// writable exec grants, the cache overlays and the masks over secrets.
#[derive(Debug)]
pub struct Args {
    /// Not yet checked or owned: [`adopt_control`] does that.
    pub control: RawFd,
    pub guard: Option<GuardConfig>,
    pub forwards: Vec<Forward>,
    /// `--egress-channel FD`: a connection to the session's proxy for the
    /// forwarder (`sandbox_init::forward`). Not yet checked or owned:
    /// [`adopt_control`] does that too.
    pub channel: Option<RawFd>,
    pub exec_from: Vec<PathBuf>,
    pub exec_grants: Vec<String>,
    pub caches: CacheOverlays,
    /// `--mask-file PATH`, `--mask-dir PATH` (`crate::masks`).
    pub masks: Masks,
    /// `--counter NAME=VALUE` (`crate::counters`).
    pub counters: Counters,
    /// `--unix-datagram-sockets refused`: commands may make none
    /// (`crate::seccomp::NO_UNIX_DATAGRAMS`).
    pub no_unix_datagrams: bool,
}

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Args, String> {
    let mut control = None;
    let mut guard_config = None;
    let mut forwards = Vec::new();
    let mut channel = None;
    let mut exec_from = Vec::new();
    let mut exec_grants = Vec::new();
    let mut caches = CacheOverlays::default();
    let mut masks = Masks::default();
    let mut counters = Counters::default();
    let mut no_unix_datagrams = false;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--control-fd" => {
                control = Some(
                    value
                        .parse::<RawFd>()
                        .map_err(|_| format!("bad descriptor `{value}`"))?,
                )
            }
            "--guard" => {
                guard_config = Some(
                    serde_json::from_str::<GuardConfig>(value)
                        .map_err(|e| format!("--guard: {e}"))?,
                )
            }
            "--forward" => {
                let (port, socket) = value
                    .split_once('=')
                    .and_then(|(p, s)| Some((p.parse::<u16>().ok()?, s)))
                    .ok_or_else(|| format!("--forward {value}: use PORT=/path/to/socket"))?;
                forwards.push(Forward {
                    port,
                    socket: socket.to_owned(),
                });
            }
            "--egress-channel" => {
                channel = Some(
                    value
                        .parse::<RawFd>()
                        .map_err(|_| format!("bad descriptor `{value}`"))?,
                )
            }
            "--exec-from" => exec_from.push(PathBuf::from(value)),
            "--exec-grant" => exec_grants.push(value.clone()),
            "--mask-file" => masks.files.push(value.clone()),
            "--mask-dir" => masks.dirs.push(value.clone()),
            "--protected" => masks.protected.push(value.clone()),
            "--counter" => counters.parse_one(value)?,
            "--unix-datagram-sockets" => match value.as_str() {
                "refused" => no_unix_datagrams = true,
                "allowed" => no_unix_datagrams = false,
                other => {
                    return Err(format!(
                        "--unix-datagram-sockets {other}: use `refused` or `allowed`"
                    ));
                }
            },
            "--caches" => {
                caches = serde_json::from_str::<CacheOverlays>(value)
                    .map_err(|e| format!("--caches: {e}"))?
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let control = control
        .ok_or("usage: sandbox-init --control-fd N [--guard JSON] [--forward PORT=SOCKET]... [--egress-channel N] [--exec-from PATH]... [--exec-grant DIR]... [--caches JSON] [--mask-file PATH]... [--mask-dir PATH]... [--protected PATH]... [--counter NAME=VALUE]... [--unix-datagram-sockets refused|allowed]")?;
    if channel == Some(control) {
        return Err(format!(
            "--egress-channel {control} is the control descriptor; pass another"
        ));
    }
    Ok(Args {
        control,
        guard: guard_config,
        forwards,
        channel,
        exec_from,
        exec_grants,
        caches,
        masks,
        counters,
        no_unix_datagrams,
    })
}

/// Takes ownership of a descriptor our parent handed us (the control
/// socket, the egress channel), after checking it is open, and makes it
/// close-on-exec.
pub fn adopt_control(fd: RawFd) -> Result<OwnedFd, String> {
    // SAFETY: F_GETFD only inspects the descriptor table.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(format!("descriptor {fd} is not open"));
    }
    // SAFETY: the descriptor is open and handed to us to own by our parent.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain fcntl on a descriptor we own; commands must not inherit it.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn every_flag_is_read_and_repeats_accumulate() {
        let parsed = parse(&strings(&[
            "--control-fd",
            "7",
            "--forward",
            "8080=/run/egress.sock",
            "--forward",
            "1080=/run/socks.sock",
            "--exec-from",
            "/usr",
            "--exec-from",
            "/opt/tools",
            "--exec-grant",
            "/work/bin",
            "--mask-file",
            "/etc/shadow",
            "--mask-dir",
            "/home/u/.ssh",
            "--mask-file",
            "/etc/gshadow",
            "--protected",
            "/work/.git/hooks",
            "--counter",
            "max_inotify_instances=4",
        ]))
        .unwrap();
        assert_eq!(parsed.control, 7);
        assert!(parsed.guard.is_none());
        assert_eq!(
            parsed.forwards,
            vec![
                Forward {
                    port: 8080,
                    socket: "/run/egress.sock".into()
                },
                Forward {
                    port: 1080,
                    socket: "/run/socks.sock".into()
                },
            ]
        );
        assert_eq!(
            parsed.exec_from,
            vec![PathBuf::from("/usr"), PathBuf::from("/opt/tools")]
        );
        assert_eq!(parsed.exec_grants, vec!["/work/bin".to_owned()]);
        assert_eq!(parsed.masks.files, ["/etc/shadow", "/etc/gshadow"]);
        assert_eq!(parsed.masks.dirs, ["/home/u/.ssh"]);
        assert_eq!(parsed.masks.protected, ["/work/.git/hooks"]);
        assert_eq!(
            parsed.counters.limits,
            [("max_inotify_instances".to_owned(), 4)]
        );
    }

    #[test]
    fn the_control_descriptor_is_required() {
        let e = parse(&strings(&["--exec-from", "/usr"])).unwrap_err();
        assert!(e.starts_with("usage: sandbox-init --control-fd N"), "{e}");
        let e = parse(&[]).unwrap_err();
        assert!(e.starts_with("usage:"), "{e}");
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        for (args, expected) in [
            (&["--control-fd", "x"][..], "bad descriptor `x`"),
            (&["--control-fd"][..], "--control-fd needs a value"),
            (
                &["--control-fd", "3", "--forward", "8080"][..],
                "--forward 8080: use PORT=/path/to/socket",
            ),
            (
                &["--control-fd", "3", "--forward", "99999=/s"][..],
                "--forward 99999=/s: use PORT=/path/to/socket",
            ),
            (
                &["--control-fd", "3", "--bogus", "1"][..],
                "unknown argument `--bogus`",
            ),
        ] {
            assert_eq!(parse(&strings(args)).unwrap_err(), expected);
        }
        let e = parse(&strings(&["--control-fd", "3", "--guard", "{"])).unwrap_err();
        assert!(e.starts_with("--guard: "), "{e}");
        let e = parse(&strings(&["--control-fd", "3", "--caches", "not json"])).unwrap_err();
        assert!(e.starts_with("--caches: "), "{e}");
    }

    /// T8: the forwarder's channel is a descriptor of its own.
    #[test]
    fn the_egress_channel_is_a_descriptor_other_than_the_control() {
        let parsed = parse(&strings(&["--control-fd", "3", "--egress-channel", "5"])).unwrap();
        assert_eq!(parsed.channel, Some(5));
        assert_eq!(
            parse(&strings(&["--control-fd", "3"])).unwrap().channel,
            None
        );
        let e = parse(&strings(&["--control-fd", "3", "--egress-channel", "x"])).unwrap_err();
        assert_eq!(e, "bad descriptor `x`");
        let e = parse(&strings(&["--control-fd", "3", "--egress-channel", "3"])).unwrap_err();
        assert!(e.contains("is the control descriptor"), "{e}");
    }

    #[test]
    fn a_closed_descriptor_is_not_adopted() {
        // A number far above anything this test process has open.
        let e = adopt_control(1_000_000).unwrap_err();
        assert_eq!(e, "descriptor 1000000 is not open");
    }
}
