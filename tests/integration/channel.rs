//! The server channel (docs/design.md, "The server channel"): a command
//! inside a real sandbox calls a handler of the server through its
//! session's own HTTP proxy (`sandbox-init call NAME`), the session being
//! the caller's identity; the reserved name is answered by no other way in,
//! and every failure of the channel exits 2.

use std::process::Output;

use crate::util::*;

fn run(plugins: &Plugins, backend: &str, script: &str) -> Output {
    let work = tempfile::tempdir().unwrap();
    CcServer::new(plugins)
        .current_dir(work.path())
        .args(["run", "--backend", backend, "--", "sh", "-c", script])
        .output()
}

/// The `whoami` answer's JSON line.
fn whoami(out: &Output) -> serde_json::Value {
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no whoami line\n{}", both(out)));
    serde_json::from_str(line).unwrap()
}

const SCRIPT: &str = "\"$CC_SERVER_CALL\" call whoami </dev/null; echo rc=$?\n\
     \"$CC_SERVER_CALL\" call no-such-handler </dev/null; echo rc=$?\n";

#[test]
fn a_bwrap_command_calls_the_server_as_its_own_session() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let script = format!(
        "{SCRIPT}\
         test \"$CC_SERVER_CALL\" = /.sandbox-init && echo program=bound\n\
         curl -s -o /dev/null -w 'tunnel=%{{http_connect}}\\n' --proxytunnel http://cc-server.internal/v1/whoami\n\
         curl -s -o /dev/null -w 'socks=%{{exitcode}}\\n' --socks5-hostname 127.0.0.1:1080 http://cc-server.internal/v1/whoami\n"
    );
    let first = run(&plugins, "bwrap", &script);
    let stdout = text(&first.stdout);
    let who = whoami(&first);
    assert_eq!(who["backend"], "bwrap", "{}", both(&first));
    let lines: Vec<&str> = stdout.lines().collect();
    for want in ["rc=0", "rc=2", "program=bound", "tunnel=403"] {
        assert!(lines.contains(&want), "expected {want}\n{}", both(&first));
    }
    assert!(
        !lines.contains(&"socks=0"),
        "SOCKS reached the channel\n{}",
        both(&first)
    );
    assert!(
        text(&first.stderr).contains("no handler named `no-such-handler`"),
        "{}",
        both(&first)
    );
    // Another session is another caller.
    let second = run(&plugins, "bwrap", "\"$CC_SERVER_CALL\" call whoami");
    let other = whoami(&second);
    assert!(!who["session"].as_str().unwrap().is_empty());
    assert_ne!(who["session"], other["session"]);
}

#[test]
fn a_none_command_calls_through_its_credentialed_proxy() {
    let plugins = Plugins::with_none();
    // Named literally: on `none` the policy is the only barrier, and it asks
    // about a command name computed at run time.
    let program = artifact("sandbox-init");
    let program = program.display();
    let script = format!(
        "test \"$CC_SERVER_CALL\" = {program} && echo program=beside\n\
         {program} call whoami </dev/null; echo rc=$?\n\
         {program} call no-such-handler </dev/null; echo rc=$?\n\
         http_proxy=$(echo \"$http_proxy\" | sed 's|//[^@]*@|//|') {program} call whoami </dev/null; echo bare=$?\n"
    );
    let out = run(&plugins, "none", &script);
    assert_eq!(whoami(&out)["backend"], "none", "{}", both(&out));
    let stdout = text(&out.stdout);
    for want in ["program=beside", "rc=0", "rc=2", "bare=2"] {
        assert!(
            stdout.lines().any(|l| l == want),
            "expected {want}\n{}",
            both(&out)
        );
    }
    assert!(text(&out.stderr).contains("407"), "{}", both(&out));
}
