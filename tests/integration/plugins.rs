//! Discovery and loading of backend libraries (SPEC A1, A2, A4, A5, B1):
//! a third-party backend built out of tree loads and runs; every bad file is
//! reported in one line and skipped while the server keeps running.

use std::os::unix::fs::PermissionsExt;

use crate::util::*;

fn probe_json(plugins: &Plugins) -> serde_json::Value {
    let out = CcServer::new(plugins).args(["probe", "--json"]).output();
    assert!(out.status.success(), "probe failed: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn backend<'a>(report: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    report["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
}

/// The lines `cc_server` printed about skipped plugin files.
fn skipped_lines(stderr: &[u8]) -> Vec<String> {
    text(stderr)
        .lines()
        .filter(|l| l.contains("skipped plugin"))
        .map(str::to_owned)
        .collect()
}

/// A4: a backend built outside the workspace, against plugin-api alone, is
/// found, probed, reported with its file, and runs commands.
#[test]
fn a_third_party_backend_built_out_of_tree_loads_and_runs() {
    let plugins = Plugins::with_none();
    let lib = plugins.add(&fixtures().third_party);
    let report = probe_json(&plugins);
    let fixture = backend(&report, "fixture").expect("fixture backend listed");
    assert_eq!(fixture["probe"]["available"], true);
    assert_eq!(fixture["source"]["kind"], "file");
    assert_eq!(fixture["source"]["path"], lib.display().to_string());
    assert_eq!(fixture["source"]["plugin"], "sandbox-backend-fixture");
    assert_eq!(fixture["source"]["apiVersion"], "1.0.0");
    assert!(
        report["problems"].as_array().unwrap().is_empty(),
        "{report}"
    );

    let out = CcServer::new(&plugins)
        .args([
            "run",
            "--backend",
            "fixture",
            "--",
            "sh",
            "-c",
            "echo third-party",
        ])
        .output();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "third-party\n");
}

/// A5: each kind of bad file produces exactly one line naming the file and
/// the reason; the good backends still load and the server still serves.
#[test]
fn every_bad_plugin_file_is_one_line_and_the_server_keeps_running() {
    let plugins = Plugins::with_none();
    let f = fixtures();
    plugins.add(&f.third_party);
    let text_file = plugins.write("libsandbox_backend_text.so", b"this is not a library\n");
    let zlib = [
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
    ]
    .iter()
    .map(std::path::Path::new)
    .find(|p| p.exists())
    .expect("zlib is part of every Debian system");
    let not_plugin = plugins.add_as(zlib, "libsandbox_backend_zlib.so");
    let writable = plugins.add_as(&none_plugin(), "libsandbox_backend_open.so");
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o666)).unwrap();
    let duplicate = plugins.add_as(&f.third_party, "libsandbox_backend_fixture_copy.so");
    plugins.add(&f.faulty);
    let other_major = plugins.add_as(&fixture_against_api("2.0.0"), "libsandbox_backend_v2.so");

    let out = CcServer::new(&plugins).args(["probe", "--json"]).output();
    assert!(
        out.status.success(),
        "probe must survive bad plugins: {}",
        text(&out.stderr)
    );
    let lines = skipped_lines(&out.stderr);
    let expected = [
        (&text_file, "not a loadable library"),
        (&not_plugin, "not a sandbox backend"),
        (&writable, "writable by group or others"),
        (&duplicate, "duplicate backend `fixture`"),
        (
            &other_major,
            "built for plugin-api 2.0.0; this host (1.0.0) accepts ^1",
        ),
    ];
    for (file, reason) in expected {
        let mine: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains(&file.display().to_string()))
            .collect();
        assert_eq!(
            mine.len(),
            1,
            "want one line for {}, got {mine:?}\nall: {lines:#?}",
            file.display()
        );
        assert!(
            mine[0].contains(reason),
            "{} should say `{reason}`: {}",
            file.display(),
            mine[0]
        );
    }
    assert_eq!(lines.len(), expected.len(), "{lines:#?}");
    assert!(
        text(&out.stderr)
            .lines()
            .all(|l| l.starts_with("cc_server: ")),
        "nothing but cc_server lines on stderr (no panic dumps, no layout dumps):\n{}",
        text(&out.stderr)
    );

    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["problems"].as_array().unwrap().len(), expected.len());
    let faulty = backend(&report, "faulty").expect("a panicking probe still lists its backend");
    assert_eq!(faulty["probe"]["available"], false);
    assert!(
        faulty["probe"]["hint"]
            .as_str()
            .unwrap()
            .contains("panics on purpose"),
        "{faulty}"
    );
    assert_eq!(
        backend(&report, "fixture").unwrap()["probe"]["available"],
        true
    );
    assert_eq!(backend(&report, "none").unwrap()["source"]["kind"], "file");

    // The server starts on the same directory and serves.
    let server = Server::start(&plugins);
    assert_eq!(server.call("GET", "/healthz", None).status, 200);
    let created = server.call("POST", "/v1/sandboxes?backend=fixture", Some("{}"));
    assert_eq!(created.status, 201, "{}", text(&created.body));
    // An explicit request for the backend whose probe panicked fails loudly.
    let refused = server.call("POST", "/v1/sandboxes?backend=faulty", Some("{}"));
    assert_eq!(refused.status, 422, "{}", text(&refused.body));
    assert!(text(&refused.body).contains("faulty"));
}

/// A2: a plugin built against another minor of the same plugin-api major
/// loads, because every ABI type is frozen within a major.
#[test]
fn a_plugin_built_against_another_minor_loads() {
    let plugins = Plugins::empty();
    let lib = plugins.add_as(
        &fixture_against_api("1.7.0"),
        "libsandbox_backend_fixture.so",
    );
    let report = probe_json(&plugins);
    let fixture = backend(&report, "fixture").unwrap_or_else(|| panic!("not loaded: {report}"));
    assert_eq!(fixture["source"]["apiVersion"], "1.7.0");
    assert_eq!(fixture["source"]["path"], lib.display().to_string());
    let out = CcServer::new(&plugins)
        .args(["run", "--backend", "fixture", "--", "echo", "minor"])
        .output();
    assert_eq!(text(&out.stdout), "minor\n", "{}", text(&out.stderr));
}

/// B1, A5: a probe that never answers makes its backend unavailable after
/// the probe timeout; start-up does not hang.
#[test]
fn a_hanging_probe_does_not_hang_startup() {
    let plugins = Plugins::with_none();
    plugins.add(&fixtures().faulty);
    let config = tempfile::tempdir().unwrap();
    let config_file = config.path().join("cc.toml");
    std::fs::write(&config_file, "probe_timeout_secs = 1\n").unwrap();
    let out = CcServer::new(&plugins)
        .env("FAULTY_PROBE", "hang")
        .arg("--config")
        .arg(&config_file)
        .args(["probe", "--json"])
        .output();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let faulty = backend(&report, "faulty").unwrap();
    assert_eq!(faulty["probe"]["available"], false);
    assert!(
        faulty["probe"]["hint"]
            .as_str()
            .unwrap()
            .contains("did not answer"),
        "{faulty}"
    );
    assert_eq!(
        backend(&report, "none").unwrap()["probe"]["available"],
        true
    );
}

/// A1: only `libsandbox_backend_*.so` files directly in the directory count.
#[test]
fn only_platform_named_files_directly_in_the_directory_load() {
    let plugins = Plugins::empty();
    plugins.add_as(&fixtures().third_party, "libother_fixture.so");
    plugins.add_as(&fixtures().third_party, "sandbox_backend_fixture.so");
    let nested = plugins.path().join("nested");
    std::fs::create_dir(&nested).unwrap();
    std::fs::copy(
        &fixtures().third_party,
        nested.join("libsandbox_backend_fixture.so"),
    )
    .unwrap();
    let report = probe_json(&plugins);
    assert!(backend(&report, "fixture").is_none(), "{report}");
    assert!(
        report["problems"].as_array().unwrap().is_empty(),
        "{report}"
    );
}

/// C4: `none` is built in: with an empty plugins directory it is still
/// there, and commands still run (reported honestly as `none`).
#[test]
fn none_is_built_in() {
    let plugins = Plugins::empty();
    let report = probe_json(&plugins);
    let none = backend(&report, "none").unwrap();
    assert_eq!(none["source"]["kind"], "builtin");
    assert_eq!(none["probe"]["kind"], "none");
    assert_eq!(report["default"]["backend"], "none");
    let out = CcServer::new(&plugins)
        .args(["run", "--", "echo", "built-in"])
        .output();
    assert_eq!(text(&out.stdout), "built-in\n");
}

/// A5: a plugins directory others can write is refused as a whole — loading
/// from it would let anyone run code in the server.
#[test]
fn a_writable_plugins_directory_is_refused() {
    let plugins = Plugins::empty();
    plugins.add(&fixtures().third_party);
    std::fs::set_permissions(plugins.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = CcServer::new(&plugins).args(["probe", "--json"]).output();
    let lines = skipped_lines(&out.stderr);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(&plugins.path().display().to_string()) && lines[0].contains("writable"),
        "{lines:?}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(backend(&report, "fixture").is_none());
    std::fs::set_permissions(plugins.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A5: a plugin owned by another user is refused before it is opened.
#[test]
fn a_plugin_owned_by_someone_else_is_refused() {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        skip_or_fail("only root can give a file away: CI runs the tests as root");
        return;
    }
    let plugins = Plugins::empty();
    let lib = plugins.add(&fixtures().third_party);
    std::os::unix::fs::chown(&lib, Some(65534), Some(65534)).unwrap();
    let out = CcServer::new(&plugins).args(["probe", "--json"]).output();
    let lines = skipped_lines(&out.stderr);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("owned by uid 65534"), "{lines:?}");
}

/// A1: `CC_SERVER_PLUGIN_PATH` adds directories, searched after the
/// configured one; the first file providing a name wins.
#[test]
fn the_plugin_path_variable_adds_directories_in_order() {
    let first = Plugins::empty();
    let second = Plugins::empty();
    second.add(&fixtures().third_party);
    let first_none = first.add(&none_plugin());
    second.add(&none_plugin());
    let out = CcServer::new(&first)
        .env("CC_SERVER_PLUGIN_PATH", second.path())
        .args(["probe", "--json"])
        .output();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(backend(&report, "fixture").is_some(), "{report}");
    assert_eq!(
        backend(&report, "none").unwrap()["source"]["path"],
        first_none.display().to_string()
    );
    let lines = skipped_lines(&out.stderr);
    assert_eq!(
        lines.len(),
        1,
        "the second `none` is a duplicate: {lines:?}"
    );
    assert!(lines[0].contains(&second.path().display().to_string()));
}
