//! `sandbox-bench gateway [COMMITS]`: a push of COMMITS commits from a bwrap
//! sandbox through the push gateway (the session's proxy → the channel →
//! the gateway's judging → the stand-in forge) against the same push from
//! the same sandbox straight to the stand-in through the egress proxy, in
//! the same run, into fresh repositories each round: a new branch, an update
//! by commits the forge has already (the gateway asks its mirror), an update
//! by new commits (the gateway reads the pushed pack). The stand-in is `git
//! http-backend` as a CGI behind a loopback server in this process.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "init.templateDir="])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Reads a request body: Content-Length, or chunked (git's large pushes).
fn read_body(reader: &mut impl BufRead, chunked: bool, length: usize) -> Vec<u8> {
    let mut body = Vec::new();
    if !chunked {
        reader.take(length as u64).read_to_end(&mut body).unwrap();
        return body;
    }
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap(), 16).unwrap();
        if size == 0 {
            let mut end = String::new();
            reader.read_line(&mut end).unwrap();
            return body;
        }
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).unwrap();
        body.extend_from_slice(&chunk[..size]);
    }
}

fn serve_one(root: &Path, stream: TcpStream) {
    let mut out = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap().to_owned(),
        parts.next().unwrap().to_owned(),
    );
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let header = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    if header("expect").is_some() {
        out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap();
    }
    let chunked = header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let length = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let body = read_body(&mut reader, chunked, length);
    let mut child = Command::new("git")
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", path)
        .env("REQUEST_METHOD", &method)
        .env("QUERY_STRING", query)
        .env("CONTENT_TYPE", header("content-type").unwrap_or_default())
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_USER", "bench")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let mut cgi = BufReader::new(child.stdout.take().unwrap());
    let mut status = "200 OK".to_owned();
    let mut head = String::new();
    loop {
        let mut l = String::new();
        if cgi.read_line(&mut l).unwrap() == 0 || l.trim_end().is_empty() {
            break;
        }
        match l.trim_end().split_once(':') {
            Some((k, v)) if k.eq_ignore_ascii_case("status") => status = v.trim().to_owned(),
            _ => head.push_str(&format!("{}\r\n", l.trim_end())),
        }
    }
    let _ =
        out.write_all(format!("HTTP/1.1 {status}\r\n{head}Connection: close\r\n\r\n").as_bytes());
    let _ = std::io::copy(&mut cgi, &mut out);
    let _ = feeder.join();
    let _ = child.wait();
}

fn serve(root: PathBuf) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let root = root.clone();
            std::thread::spawn(move || serve_one(&root, stream));
        }
    });
    port
}

fn cc_server() -> PathBuf {
    std::env::current_exe().unwrap().with_file_name("cc_server")
}

pub fn run(commits: usize) {
    let rounds = 7;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("forge");
    std::fs::create_dir_all(root.join("o")).unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    // COMMITS commits, each changing one file, made fast with fast-import.
    let mut stream = String::new();
    for i in 0..commits {
        let content = format!("commit {i}\n");
        stream.push_str(&format!(
            "commit refs/heads/main\ncommitter bench <bench@example.com> {} +0000\ndata 9\ncommit {:>2}\nM 644 inline f{}\ndata {}\n{content}\n",
            1_700_000_000 + i,
            i % 100,
            i % 50,
            content.len()
        ));
    }
    let mut fi = Command::new("git")
        .args(["fast-import", "--quiet"])
        .current_dir(&work)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    fi.stdin
        .take()
        .unwrap()
        .write_all(stream.as_bytes())
        .unwrap();
    assert!(fi.wait().unwrap().success());
    git(&work, &["reset", "-q", "--hard", "main"]);
    let mut repos = Vec::new();
    for i in 0..rounds {
        for kind in ["gw", "direct"] {
            // `-new`: a repository where an update brings new commits.
            for name in [format!("o/{kind}{i}.git"), format!("o/{kind}{i}-new.git")] {
                git(&root, &["init", "-q", "--bare", &name]);
                git(&root.join(&name), &["config", "http.receivepack", "true"]);
                repos.push(format!("\"{name}\""));
            }
        }
    }
    let port = serve(root.clone());
    let rules = tmp.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nclass = \"push_remote\"\nbranches = [\"agent/*\"]\ndecision = \"allow\"\n",
    )
    .unwrap();
    let config = tmp.path().join("cc_server.toml");
    std::fs::write(
        &config,
        format!(
            "[workspaces]\nstate_dir = \"{}\"\n[policy]\nguardrails = \"{}\"\n[gateway]\nupstream = \"http://127.0.0.1:{port}\"\nrepositories = [{}]\n",
            tmp.path().join("state").display(),
            rules.display(),
            repos.join(", ")
        ),
    )
    .unwrap();
    let now = "$(date +%s%N)";
    let mut script = String::from("set -e\n");
    for i in 0..rounds {
        // Alternate which goes first.
        let pair = [
            ("gw", format!("http://cc-server.internal/git/o/gw{i}.git")),
            (
                "direct",
                format!("http://forge.test:{port}/o/direct{i}.git"),
            ),
        ];
        let order: Vec<_> = if i % 2 == 0 {
            pair.iter().collect()
        } else {
            pair.iter().rev().collect()
        };
        for (kind, url) in order {
            script.push_str(&format!(
                "t0={now}; git push -q {url} HEAD:refs/heads/agent/b; t1={now}; echo {kind} $(( (t1 - t0) / 1000 ))\n"
            ));
            // An update of an existing branch by the last half, to commits
            // the forge has already (`agent/b`): the pack is empty, and the
            // gateway asks its mirror, fetched from the forge.
            let half = commits / 2;
            script.push_str(&format!(
                "git push -q {url} HEAD~{half}:refs/heads/agent/u\n\
                 t0={now}; git push -q {url} HEAD:refs/heads/agent/u; t1={now}; echo {kind}-update $(( (t1 - t0) / 1000 ))\n"
            ));
            // An update by the last half of new commits: the gateway reads
            // the fast-forward from the pushed pack itself.
            let new = url.replace(".git", "-new.git");
            script.push_str(&format!(
                "git push -q {new} HEAD~{half}:refs/heads/agent/n\n\
                 t0={now}; git push -q {new} HEAD:refs/heads/agent/n; t1={now}; echo {kind}-new $(( (t1 - t0) / 1000 ))\n"
            ));
        }
    }
    let out = Command::new(cc_server())
        .current_dir(&work)
        .arg("--config")
        .arg(&config)
        .args(["run", "--backend", "bwrap", "--allow-domain", "forge.test"])
        .args([
            "--allow-private",
            "forge.test",
            "--resolve",
            "forge.test:127.0.0.1",
        ])
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the sandboxed run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let times = |kind: &str| -> Vec<f64> {
        stdout
            .lines()
            .filter_map(|l| l.strip_prefix(kind)?.trim().parse::<f64>().ok())
            .map(|us| us / 1000.0)
            .collect()
    };
    for i in 0..rounds {
        for kind in ["gw", "direct"] {
            let out = Command::new("git")
                .args(["rev-list", "--count", "agent/b"])
                .current_dir(root.join(format!("o/{kind}{i}.git")))
                .output()
                .unwrap();
            let count = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            assert_eq!(
                count,
                commits.to_string(),
                "{kind}{i}: the push did not arrive whole"
            );
        }
    }
    let (gw, direct) = (times("gw "), times("direct "));
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (g, d) = (median(gw.clone()), median(direct.clone()));
    println!(
        "a push of {commits} commits from a bwrap sandbox, median of {rounds} (ms each: gateway {gw:?}, direct {direct:?})"
    );
    println!("  straight to the stand-in through the egress proxy (baseline)  {d:>8.1} ms");
    println!(
        "  through the push gateway                                       {g:>8.1} ms  {:.2}×",
        g / d
    );
    let (gu, du) = (times("gw-update "), times("direct-update "));
    let (gu_m, du_m) = (median(gu.clone()), median(du.clone()));
    println!(
        "an update of an existing branch by {} commits the forge has (ms each: gateway {gu:?}, direct {du:?})",
        commits / 2
    );
    println!("  straight to the stand-in through the egress proxy (baseline)  {du_m:>8.1} ms");
    println!(
        "  through the push gateway (mirror fetch + index-pack)           {gu_m:>8.1} ms  {:.2}×",
        gu_m / du_m
    );
    let (gn, dn) = (times("gw-new "), times("direct-new "));
    let (gn_m, dn_m) = (median(gn.clone()), median(dn.clone()));
    println!(
        "an update of an existing branch by {} new commits (ms each: gateway {gn:?}, direct {dn:?})",
        commits / 2
    );
    println!("  straight to the stand-in through the egress proxy (baseline)  {dn_m:>8.1} ms");
    println!(
        "  through the push gateway (spooled, ancestry from the pack)     {gn_m:>8.1} ms  {:.2}×",
        gn_m / dn_m
    );
}
