//! Egress end to end (SPEC E1–E5, C2): real `cc_server run` in real bwrap
//! sandboxes, real curl, git and ssh inside, the session's proxies on the
//! host, loopback servers as targets. Names are pointed at 127.0.0.1 with
//! `--resolve`: no test traffic leaves 127.0.0.0/8, and names that must be
//! refused are refused by name, never dialled.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

use crate::net::{
    BulkServer, Canary, GitHttpServer, Sshd, bare_repo, current_user, sshd_installed,
};
use crate::util::*;

/// `cc_server run --backend bwrap FLAGS… -- sh -c SCRIPT` from `cwd`.
fn run_sh(
    plugins: &Plugins,
    cwd: &Path,
    config: Option<&str>,
    flags: &[&str],
    script: &str,
) -> Output {
    let mut command = CcServer::new(plugins).current_dir(cwd);
    if let Some(config) = config {
        command = command.config(config);
    }
    command
        .args(["run", "--backend", "bwrap"])
        .args(flags)
        .args(["--", "sh", "-c", script])
        .output()
}

/// The `network-outbound` violations `run` printed.
fn violations(out: &Output) -> Vec<String> {
    text(&out.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("cc_server: violation: network-outbound "))
        .map(str::to_owned)
        .collect()
}

/// E1–E4: through the proxy a command reaches a name on the allowlist (and
/// opted in to a loopback address) and nothing else; every refusal names
/// its rule in the 403 and is a violation; nothing refused reaches a server.
#[test]
fn only_allowed_names_get_through_and_refusals_are_visible() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let bulk = BulkServer::start(1000);
    let canary = Canary::start();
    let (p, c) = (bulk.port(), canary.port());
    let script = format!(
        "curl -sS -o /dev/null -w 'allowed=%{{http_code}}\\n' http://mirror.test:{p}/\n\
         curl -sS -o /dev/null -w 'tunnel=%{{http_code}}\\n' --proxytunnel http://mirror.test:{p}/\n\
         curl -sS -D - -o /dev/null http://other.test:{c}/ | tr -d '\\r' | sed -n 's/^HTTP[^ ]* \\([0-9]*\\).*/other=\\1/p; s/^x-proxy-error: /other-tag=/Ip'\n\
         curl -sS -o /dev/null -w 'loopback-name=%{{http_code}}\\n' http://plain.test:{c}/\n\
         curl -sS -o /dev/null -w 'metadata=%{{http_code}}\\n' http://metadata.google.internal:{c}/\n\
         curl -sS -o /dev/null -w 'ip-literal=%{{http_code}}\\n' http://127.0.0.1:{c}/ --noproxy '' --proxy http://127.0.0.1:3128\n\
         curl -sS --max-time 5 --noproxy '*' -o /dev/null http://127.0.0.1:{c}/ && echo direct=ok || echo direct=failed\n"
    );
    let resolve = |name: &str| format!("{name}:127.0.0.1");
    let out = run_sh(
        &plugins,
        work.path(),
        None,
        &[
            "--allow-domain",
            "mirror.test",
            "--allow-private",
            "mirror.test",
            "--allow-domain",
            "plain.test",
            "--allow-private",
            "metadata.google.internal",
            "--resolve",
            &resolve("mirror.test"),
            "--resolve",
            &resolve("other.test"),
            "--resolve",
            &resolve("plain.test"),
            "--resolve",
            &resolve("metadata.google.internal"),
        ],
        &script,
    );
    let stdout = text(&out.stdout);
    for line in [
        "allowed=200",
        "tunnel=200",
        "other=403",
        "other-tag=blocked-by-allowlist",
        "loopback-name=403",
        "metadata=403",
        "ip-literal=403",
        "direct=failed",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "expected {line}\n{}",
            both(&out)
        );
    }
    assert_eq!(bulk.requests(), 2, "the two allowed requests arrived");
    assert_eq!(
        canary.connections(),
        0,
        "a refused connection arrived\n{}",
        both(&out)
    );
    let seen = violations(&out);
    for target in [
        format!("other.test:{c}"),
        format!("plain.test:{c}"),
        format!("metadata.google.internal:{c}"),
        format!("127.0.0.1:{c}"),
    ] {
        assert!(
            seen.contains(&target),
            "no violation for {target}: {seen:?}\n{}",
            both(&out)
        );
    }
}

/// E1, A5.2: every ingress path — HTTP CONNECT, absolute-form, SOCKS5 with
/// a name, SOCKS4a — decides the same way for the same targets.
#[test]
fn every_ingress_path_decides_the_same() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let bulk = BulkServer::start(10);
    let canary = Canary::start();
    let mut script = String::new();
    for (label, how) in [
        ("forward", "-x http://127.0.0.1:3128"),
        ("connect", "-x http://127.0.0.1:3128 --proxytunnel"),
        ("socks5h", "--socks5-hostname 127.0.0.1:1080"),
        ("socks4a", "--socks4a 127.0.0.1:1080"),
    ] {
        script += &format!(
            "curl -sf --noproxy '' {how} -o /dev/null http://ok.test:{}/ && echo {label}-ok=yes || echo {label}-ok=no\n\
             curl -sf --noproxy '' {how} -o /dev/null http://no.test:{}/ && echo {label}-no=yes || echo {label}-no=no\n",
            bulk.port(),
            canary.port()
        );
    }
    let out = run_sh(
        &plugins,
        work.path(),
        None,
        &[
            "--allow-domain",
            "ok.test",
            "--allow-private",
            "ok.test",
            "--resolve",
            "ok.test:127.0.0.1",
            "--resolve",
            "no.test:127.0.0.1",
        ],
        &script,
    );
    let stdout = text(&out.stdout);
    for label in ["forward", "connect", "socks5h", "socks4a"] {
        assert!(
            stdout.contains(&format!("{label}-ok=yes")),
            "{label}\n{}",
            both(&out)
        );
        assert!(
            stdout.contains(&format!("{label}-no=no")),
            "{label}\n{}",
            both(&out)
        );
    }
    assert_eq!(bulk.requests(), 4, "{}", both(&out));
    assert_eq!(canary.connections(), 0, "{}", both(&out));
    assert_eq!(violations(&out).len(), 4, "{}", both(&out));
}

/// E5: with the network off the proxies still answer — and refuse even a
/// baseline host (named, pointed at loopback, never dialled).
#[test]
fn network_off_refuses_even_the_baseline() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let canary = Canary::start();
    let c = canary.port();
    let out = run_sh(
        &plugins,
        work.path(),
        None,
        &[
            "--network",
            "off",
            "--resolve",
            "registry.npmjs.org:127.0.0.1",
        ],
        &format!(
            "curl -sS -D - -o /dev/null http://registry.npmjs.org:{c}/ | tr -d '\\r' | sed -n 's/^x-proxy-error: /tag=/Ip'"
        ),
    );
    assert!(
        text(&out.stdout).contains("tag=network-disabled"),
        "{}",
        both(&out)
    );
    assert_eq!(canary.connections(), 0);
    assert_eq!(
        violations(&out),
        [format!("registry.npmjs.org:{c}")],
        "{}",
        both(&out)
    );
}

/// E2: a real `git clone` over HTTP, through the proxy, from a local
/// `git http-backend`.
#[test]
fn git_clone_over_http_through_the_proxy() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let served = tempfile::tempdir().unwrap();
    bare_repo(served.path(), "repo.git");
    let server = GitHttpServer::start(served.path());
    let work = tempfile::tempdir().unwrap();
    let out = run_sh(
        &plugins,
        work.path(),
        None,
        &[
            "--allow-domain",
            "git.test",
            "--allow-private",
            "git.test",
            "--resolve",
            "git.test:127.0.0.1",
        ],
        &format!(
            "git clone -q http://git.test:{}/repo.git clone && cat clone/README",
            server.port()
        ),
    );
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert_eq!(text(&out.stdout), "one\ntwo\n");
    assert!(server.requests() >= 2, "{}", both(&out));
}

/// A private ssh-agent holding one key: how a sandbox with a masked
/// `~/.ssh` authenticates.
struct Agent {
    dir: tempfile::TempDir,
    child: std::process::Child,
}

impl Agent {
    fn start(key: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let child = Command::new("ssh-agent")
            .args(["-D", "-a"])
            .arg(&socket)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        assert!(eventually(std::time::Duration::from_secs(10), || socket.exists()));
        let out = Command::new("ssh-add")
            .arg(key)
            .env("SSH_AUTH_SOCK", &socket)
            .output()
            .unwrap();
        assert!(out.status.success(), "ssh-add: {}", text(&out.stderr));
        Self { dir, child }
    }

    fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("agent.sock")
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// E2: git over ssh goes through the SOCKS proxy (socat SOCKS4A in the
/// sandbox's GIT_SSH_COMMAND), trusting the host key from the server's
/// `[egress] ssh_known_hosts`, authenticating through a forwarded agent
/// whose socket the run allows (`--allow-socket`, threat model T17).
#[test]
fn git_clone_over_ssh_through_the_proxy() {
    require_bwrap!();
    if !sshd_installed() {
        return;
    }
    let plugins = Plugins::with_bwrap();
    let served = tempfile::tempdir().unwrap();
    bare_repo(served.path(), "repo.git");
    let sshd_dir = tempfile::tempdir().unwrap();
    let sshd = Sshd::start(sshd_dir.path());
    let agent = Agent::start(&sshd.client_key());
    let port = sshd.port();
    let known = sshd.known_hosts_line(&format!("[git.test]:{port}"));
    let config = format!(
        "[egress]\nallow = [\"git.test\"]\nallow_private = [\"git.test\"]\nresolve = [\"git.test:127.0.0.1\"]\nssh_known_hosts = [{}]\n",
        json!(known)
    );
    let work = tempfile::tempdir().unwrap();
    let agent_dir = agent.socket().parent().unwrap().to_path_buf();
    let mut command = CcServer::new(&plugins)
        .config(&config)
        .current_dir(work.path())
        .env("SSH_AUTH_SOCK", agent.socket());
    command = command
        .args(["run", "--backend", "bwrap", "--bind"])
        .arg(format!("{}:ro", agent_dir.display()))
        // A host socket below a bind is the sandbox's only when allowed (T17).
        .arg("--allow-socket")
        .arg(agent.socket());
    let url = format!(
        "ssh://{}@git.test:{port}{}/repo.git",
        current_user(),
        served.path().display()
    );
    let out = command
        .args([
            "--",
            "sh",
            "-c",
            &format!("git clone -q '{url}' clone && cat clone/README"),
        ])
        .output();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert_eq!(text(&out.stdout), "one\ntwo\n");
}

/// E1: two sessions at once, each with its own allowlist: neither can use
/// the other's grant; each refusal is a violation on that session's exec
/// stream.
#[test]
fn sessions_do_not_share_grants() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let a = BulkServer::start(10);
    let b = BulkServer::start(10);
    let config = "[egress]\nallow_private = [\"a.test\", \"b.test\"]\n\
                  resolve = [\"a.test:127.0.0.1\", \"b.test:127.0.0.1\"]\n";
    let server = Server::start_with(CcServer::new(&plugins).config(config));
    let work = tempfile::tempdir().unwrap();
    for (id, allowed) in [("sa", "a.test"), ("sb", "b.test")] {
        let spec = json!({"sessionId": id, "bindMounts": [{"hostPath": work.path()}], "guestWorkdir": work.path(), "egressAllowlist": [allowed]});
        let created = server.call(
            "POST",
            "/v1/sandboxes?backend=bwrap",
            Some(&spec.to_string()),
        );
        assert_eq!(created.status, 201, "{}", text(&created.body));
    }
    let fetch = |id: &str, host: &str, port: u16| -> Vec<Value> {
        let script = format!("curl -s -o /dev/null -w '%{{http_code}}' http://{host}:{port}/");
        let response = server.call(
            "POST",
            &format!("/v1/sandboxes/{id}/execs"),
            Some(&json!({"argv": ["sh", "-c", script]}).to_string()),
        );
        assert_eq!(response.status, 200, "{}", text(&response.body));
        response.lines()
    };
    assert_eq!(joined(&fetch("sa", "a.test", a.port()), "stdout"), "200");
    assert_eq!(joined(&fetch("sb", "b.test", b.port()), "stdout"), "200");
    let crossed = fetch("sa", "b.test", b.port());
    assert_eq!(joined(&crossed, "stdout"), "403");
    let violation = crossed
        .iter()
        .find(|e| e["type"] == "violation")
        .unwrap_or_else(|| panic!("{crossed:?}"));
    assert_eq!(violation["action"], "network-outbound");
    assert_eq!(violation["target"], format!("b.test:{}", b.port()));
    assert_eq!(joined(&fetch("sb", "a.test", a.port()), "stdout"), "403");
    assert_eq!(
        (a.requests(), b.requests()),
        (1, 1),
        "no crossed request arrived"
    );
}

/// E1 for a backend that shares the host's loopback (`none`): the proxies
/// listen on 127.0.0.1 ports and demand the session's credential (407
/// without it); the command's proxy variables carry it. Advisory — `none`
/// is no boundary — but the same decision applies to what goes through.
#[test]
fn none_sessions_get_credentialed_loopback_proxies() {
    let plugins = Plugins::with_none();
    let work = tempfile::tempdir().unwrap();
    let bulk = BulkServer::start(10);
    let canary = Canary::start();
    let (p, c) = (bulk.port(), canary.port());
    let script = format!(
        "curl -s -o /dev/null -w 'allowed=%{{http_code}}\\n' http://ok.test:{p}/\n\
         curl -s -o /dev/null -w 'refused=%{{http_code}}\\n' http://no.test:{c}/\n\
         bare=$(echo \"$HTTP_PROXY\" | sed 's|//[^@]*@|//|')\n\
         curl -s -o /dev/null -w 'no-credential=%{{http_code}}\\n' -x \"$bare\" http://ok.test:{p}/\n\
         case \"$ALL_PROXY\" in socks5h://cc:*@127.0.0.1:*) echo socks=credentialed;; esac\n"
    );
    let out = CcServer::new(&plugins)
        .current_dir(work.path())
        .args(["run", "--backend", "none", "--allow-domain", "ok.test"])
        .args([
            "--allow-private",
            "ok.test",
            "--resolve",
            "ok.test:127.0.0.1",
        ])
        .args(["--resolve", "no.test:127.0.0.1", "--", "sh", "-c", &script])
        .output();
    let stdout = text(&out.stdout);
    for line in [
        "allowed=200",
        "refused=403",
        "no-credential=407",
        "socks=credentialed",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "expected {line}\n{}",
            both(&out)
        );
    }
    assert_eq!(
        (bulk.requests(), canary.connections()),
        (1, 0),
        "{}",
        both(&out)
    );
    assert_eq!(violations(&out), [format!("no.test:{c}")], "{}", both(&out));
}

/// T29 (SPEC E1): the session's proxies take at most `[egress]
/// max_connections` open connections (here 2, held open by the command);
/// one more is refused in its protocol (403, `X-Proxy-Error:
/// connection-cap`) with a `network-outbound` violation naming the cap and
/// the key, and once the two close the same request goes through.
#[test]
fn past_the_session_connection_cap_a_connection_is_refused_naming_the_key() {
    let plugins = Plugins::with_none();
    let work = tempfile::tempdir().unwrap();
    let bulk = BulkServer::start(10);
    let p = bulk.port();
    let config = "[egress]\nmax_connections = 2\n";
    let script = format!(
        "hp=${{HTTP_PROXY##*@}}; hp=${{hp%/}}; host=${{hp%:*}}; port=${{hp##*:}}\n\
         exec 3<>/dev/tcp/$host/$port 4<>/dev/tcp/$host/$port\n\
         curl -sS -D - -o /dev/null http://ok.test:{p}/ | tr -d '\\r' | sed -n 's/^HTTP[^ ]* \\([0-9]*\\).*/capped=\\1/p; s/^x-proxy-error: /tag=/Ip'\n\
         exec 3>&- 4>&-\n\
         for i in $(seq 100); do\n\
           code=$(curl -s -o /dev/null -w '%{{http_code}}' http://ok.test:{p}/)\n\
           [ \"$code\" = 200 ] && break; sleep 0.1\n\
         done\n\
         echo after=$code\n"
    );
    let out = CcServer::new(&plugins)
        .config(config)
        .current_dir(work.path())
        .args(["run", "--backend", "none", "--allow-domain", "ok.test"])
        .args([
            "--allow-private",
            "ok.test",
            "--resolve",
            "ok.test:127.0.0.1",
        ])
        .args(["--", "bash", "-c", &script])
        .output();
    let stdout = text(&out.stdout);
    for line in ["capped=403", "tag=connection-cap", "after=200"] {
        assert!(
            stdout.lines().any(|l| l == line),
            "expected {line}\n{}",
            both(&out)
        );
    }
    assert_eq!(violations(&out), [format!("ok.test:{p}")], "{}", both(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("2 open egress connections")
            && stderr.contains("`[egress] max_connections`"),
        "{}",
        both(&out)
    );
    assert_eq!(bulk.requests(), 1, "the refused request reached the server");
}

/// The processes (pid and command line) holding the host's TCP socket
/// from 127.0.0.1:`local` to 127.0.0.1:`remote`, found by its inode in
/// `/proc/net/tcp` and every process's descriptors.
fn holders_of_connection(local: u16, remote: u16) -> Vec<String> {
    let want = (
        format!("0100007F:{local:04X}"),
        format!("0100007F:{remote:04X}"),
    );
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let Some(inode) = tcp.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() > 9 && f[1] == want.0 && f[2] == want.1).then(|| f[9].to_owned())
    }) else {
        return Vec::new();
    };
    let link = format!("socket:[{inode}]");
    let mut holders = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == link.as_str()));
        if holds {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            holders.push(format!(
                "{pid} {}",
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ));
        }
    }
    holders
}

/// E1, T8: a CONNECT tunnel from a bwrap sandbox is handed to the
/// sandbox's forwarder — the upstream socket is held by the forwarder and,
/// as its kept handle, by the server, and by nothing else — and destroying
/// the session still ends it: the host's server sees the connection close.
#[test]
fn destroying_a_session_ends_its_handed_off_tunnels() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (seen, events) = std::sync::mpsc::channel::<(&str, u16)>();
    std::thread::spawn(move || {
        use std::io::{BufRead, Read};
        let Ok((stream, peer)) = listener.accept() else {
            return;
        };
        let mut reader = std::io::BufReader::new(stream);
        let mut line = String::new();
        if reader.read_line(&mut line).is_ok() && line == "hello\n" {
            let _ = seen.send(("hello", peer.port()));
            let mut rest = Vec::new();
            let _ = reader.read_to_end(&mut rest);
            let _ = seen.send(("closed", peer.port()));
        }
    });
    let config = "[egress]\nallow = [\"hold.test\"]\nallow_private = [\"hold.test\"]\n\
                  resolve = [\"hold.test:127.0.0.1\"]\n";
    let server = Server::start_with(CcServer::new(&plugins).config(config));
    let work = tempfile::tempdir().unwrap();
    server.create_bwrap_over("held", work.path());
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/3128\n\
         printf 'CONNECT hold.test:{port} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' >&3\n\
         read -r status <&3; echo \"$status\"\n\
         while read -r line <&3 && [ \"${{line%$'\\r'}}\" ]; do :; done\n\
         printf 'hello\\n' >&3\n\
         cat <&3; echo ended\n"
    );
    std::thread::scope(|scope| {
        let exec = scope.spawn(|| {
            let argv = json!({ "argv": ["bash", "-c", script] }).to_string();
            server.call("POST", "/v1/sandboxes/held/execs", Some(&argv))
        });
        let (what, upstream_port) = events
            .recv_timeout(Duration::from_secs(30))
            .expect("the tunnel never reached the server");
        assert_eq!(what, "hello");
        let holders = holders_of_connection(upstream_port, port);
        assert_eq!(holders.len(), 2, "{holders:?}");
        assert!(
            holders.iter().any(|h| h.contains("--forwarder")),
            "the tunnel was not handed to the forwarder: {holders:?}"
        );
        assert!(
            holders.iter().any(|h| h.contains("cc_server")),
            "the server kept no handle on the tunnel: {holders:?}"
        );
        let started = std::time::Instant::now();
        let destroyed = server.call("DELETE", "/v1/sandboxes/held", None);
        assert_eq!(destroyed.status, 200, "{}", text(&destroyed.body));
        let (what, _) = events
            .recv_timeout(Duration::from_secs(10))
            .expect("the handed-off tunnel outlived its session");
        assert_eq!(what, "closed");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        let _ = exec.join();
    });
}

/// D2 for `run`: `--network open` lets a name on no allowlist through (here
/// pointed at a loopback server and opted in to loopback, as every test
/// target here is), while the fixed deny list and the non-public rule still
/// hold; without it the same name is refused.
#[test]
fn network_open_lets_any_name_through_but_not_the_deny_list() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let bulk = BulkServer::start(10);
    let canary = Canary::start();
    let (p, c) = (bulk.port(), canary.port());
    let script = format!(
        "curl -s -o /dev/null -w 'open=%{{http_code}}\\n' http://open.test:{p}/\n\
         curl -s -o /dev/null -w 'metadata=%{{http_code}}\\n' http://metadata.google.internal:{c}/\n\
         curl -s -o /dev/null -w 'loopback=%{{http_code}}\\n' --noproxy '' http://127.0.0.1:{c}/\n"
    );
    let flags = |network: &'static str| {
        vec![
            "--network",
            network,
            "--allow-private",
            "open.test",
            "--resolve",
            "open.test:127.0.0.1",
            "--resolve",
            "metadata.google.internal:127.0.0.1",
        ]
    };
    let open = run_sh(&plugins, work.path(), None, &flags("open"), &script);
    for line in ["open=200", "metadata=403", "loopback=403"] {
        assert!(
            text(&open.stdout).lines().any(|l| l == line),
            "expected {line}\n{}",
            both(&open)
        );
    }
    let closed = run_sh(&plugins, work.path(), None, &flags("on"), &script);
    assert!(
        text(&closed.stdout).lines().any(|l| l == "open=403"),
        "{}",
        both(&closed)
    );
    assert_eq!(bulk.requests(), 1, "only the open run's request arrived");
    assert_eq!(canary.connections(), 0, "a refused connection arrived");
}
