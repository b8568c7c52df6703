//! The web console, black-box: its rules over raw HTTP (the cookie is the
//! owner's only on the owner's routes, only from the console's own page),
//! and the page itself in a real headless Chromium driven over the DevTools
//! protocol (`cdp`): sign in, the backends and a bwrap sandbox with their
//! badges, live events with a violation, a prompt answered with its
//! button, a terminal, hostile output shown as text, the cookie's flags, no
//! token in a URL or storage, a cross-origin POST refused. Screenshots of
//! each step go to a directory the test prints; with
//! `CC_UPDATE_CONSOLE_PNG=1` the terminal's is copied to `docs/console.png`.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cdp::Browser;
use crate::util::*;

/// The console's sign-in with `token`, as the page posts it.
fn sign_in(server: &Server, token: &str, headers: &[(&str, &str)]) -> Response {
    let body = json!({ "token": token }).to_string();
    http_with(
        server.addr,
        "POST",
        "/v1/console/session",
        Some(&body),
        None,
        headers,
    )
}

/// The session id a sign-in's `Set-Cookie` carries.
fn session_of(response: &Response) -> String {
    let cookie = response.header("set-cookie").unwrap_or_default();
    cookie
        .strip_prefix("cc_console=")
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("no console cookie in {cookie:?}"))
        .to_owned()
}

#[test]
fn the_console_cookie_is_the_owners_only_from_its_own_page() {
    let plugins = Plugins::with_none();
    let server = Server::start(&plugins);
    let own = format!("http://{}", server.addr);
    let page_headers = [("Origin", own.as_str()), ("X-CC-Console", "1")];

    // The page and its files, with their security headers; no other file.
    let page = http(server.addr, "GET", "/", None, None);
    assert_eq!(page.status, 200);
    let csp = page.header("content-security-policy").unwrap();
    for part in [
        "default-src 'self'",
        "script-src 'self';",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert!(!csp.contains("unsafe-eval"), "{csp}");
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    let xterm = http(server.addr, "GET", "/console/xterm.js", None, None);
    assert_eq!(xterm.status, 200);
    assert!(xterm.body.len() > 100_000);
    let none = http(server.addr, "GET", "/console/..%2FCargo.toml", None, None);
    assert_eq!(none.status, 404, "{}", text(&none.body));

    // Signing in takes the token, from the console's own page only.
    assert_eq!(sign_in(&server, "wrong", &page_headers).status, 401);
    let foreign = sign_in(
        &server,
        &server.token,
        &[("Origin", "http://evil.example"), ("X-CC-Console", "1")],
    );
    assert_eq!(foreign.status, 403, "{}", text(&foreign.body));
    let headerless = sign_in(&server, &server.token, &[("Origin", own.as_str())]);
    assert_eq!(headerless.status, 403, "{}", text(&headerless.body));
    assert!(text(&headerless.body).contains("x-cc-console"));
    let signed = sign_in(&server, &server.token, &page_headers);
    assert_eq!(signed.status, 204, "{}", text(&signed.body));
    let set = signed.header("set-cookie").unwrap().to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=28800"] {
        assert!(set.contains(flag), "{set}");
    }
    let id = session_of(&signed);
    assert!(!set.contains(&server.token), "the cookie holds the token");
    let cookie = format!("cc_console={id}");

    // A read with the cookie is the owner's.
    let listed = http_with(
        server.addr,
        "GET",
        "/v1/sandboxes",
        None,
        None,
        &[("Cookie", &cookie)],
    );
    assert_eq!(listed.status, 200, "{}", text(&listed.body));
    // A change with the cookie needs the page's Origin and header.
    let spec = json!({"sessionId": "by-cookie"}).to_string();
    let post = |headers: &[(&str, &str)]| {
        http_with(
            server.addr,
            "POST",
            "/v1/sandboxes",
            Some(&spec),
            None,
            headers,
        )
    };
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[
                ("Cookie", &cookie),
                ("X-CC-Console", "1"),
                ("Origin", "http://evil.example"),
            ],
            "origin",
        ),
        (
            &[("Cookie", &cookie), ("X-CC-Console", "1")],
            "console origin",
        ),
        (&[("Cookie", &cookie), ("Origin", &own)], "console header"),
        (
            &[
                ("Cookie", &cookie),
                ("Origin", &own),
                ("X-CC-Console", "1"),
                ("Sec-Fetch-Site", "cross-site"),
            ],
            "console same-origin",
        ),
    ];
    for (headers, rule) in cases {
        let refused = post(headers);
        assert_eq!(refused.status, 403, "{headers:?}: {}", text(&refused.body));
        assert_eq!(refused.json()["rule"], *rule, "{}", text(&refused.body));
    }
    assert_eq!(
        server.call("GET", "/v1/sandboxes/by-cookie", None).status,
        404
    );
    let made = post(&[("Cookie", &cookie), ("Origin", &own), ("X-CC-Console", "1")]);
    assert_eq!(made.status, 201, "{}", text(&made.body));
    // Never an agent's route.
    let mcp = http_with(
        server.addr,
        "POST",
        "/mcp",
        Some("{}"),
        None,
        &[("Cookie", &cookie), ("Origin", &own), ("X-CC-Console", "1")],
    );
    assert_eq!(mcp.status, 403, "{}", text(&mcp.body));

    // Signed out, the cookie opens nothing.
    let out = http_with(
        server.addr,
        "DELETE",
        "/v1/console/session",
        None,
        None,
        &[("Cookie", &cookie), ("Origin", &own), ("X-CC-Console", "1")],
    );
    assert_eq!(out.status, 204, "{}", text(&out.body));
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    let after = http_with(
        server.addr,
        "GET",
        "/v1/sandboxes",
        None,
        None,
        &[("Cookie", &cookie)],
    );
    assert_eq!(after.status, 401, "{}", text(&after.body));
    assert!(text(&after.body).contains("console_session_secs"));
}

/// The page's text of the element `selector` (empty when absent).
fn text_of(browser: &mut Browser, selector: &str) -> String {
    let expression = format!(
        "(document.querySelector({}) || {{}}).textContent || ''",
        json!(selector)
    );
    browser.eval(&expression).as_str().unwrap_or("").to_owned()
}

fn shot(browser: &mut Browser, dir: &Path, name: &str) {
    browser.screenshot(&dir.join(format!("{name}.png")));
}

const HOSTILE: &str = "<img src=x onerror=\"document.title='pwned'\">";

#[test]
fn the_console_in_a_real_browser() {
    require_bwrap!();
    let Some(mut browser) = Browser::launch() else {
        sandbox_test_support::skip_or_fail(
            "chromium is not installed (.ci/install-deps installs Debian's `chromium`)",
        );
        return;
    };
    let plugins = Plugins::with_bwrap();
    let command = CcServer::new(&plugins).config("[policy]\nguardrails = \"rules.toml\"\n");
    std::fs::write(
        command.home().path().join("rules.toml"),
        "[[rule]]\nclass = \"access_network\"\ndecision = \"prompt\"\n",
    )
    .unwrap();
    let server = Server::start_with(command);
    let shots = tempfile::Builder::new()
        .prefix("console-shots-")
        .tempdir()
        .unwrap()
        .keep();
    eprintln!("screenshots of each step: {}", shots.display());
    let base = format!("http://{}", server.addr);

    // The page loads and asks for the token; how long and how heavy,
    // against the same server's `/healthz` in the same browser (printed,
    // never asserted: docs/measurements.md).
    let load = |browser: &mut Browser, path: &str| {
        let started = Instant::now();
        browser.navigate(&format!("{base}{path}"));
        let seen = started.elapsed().as_secs_f64() * 1000.0;
        let event = browser.eval("performance.getEntriesByType('navigation')[0].loadEventEnd");
        let bytes = browser.eval(
            "performance.getEntriesByType('resource').concat(performance.getEntriesByType('navigation')).reduce((n, e) => n + e.encodedBodySize, 0)",
        );
        (
            event.as_f64().unwrap_or(0.0),
            seen,
            bytes.as_u64().unwrap_or(0),
        )
    };
    let (plain, plain_seen, plain_bytes) = load(&mut browser, "/healthz");
    let (page, page_seen, page_bytes) = load(&mut browser, "/");
    browser.wait_for(
        "the sign-in form",
        "!document.getElementById('signin').hidden",
    );
    eprintln!(
        "console page: load event at {page:.1} ms against /healthz {plain:.1} ms ({:.1}x); navigate to load seen by the client {page_seen:.1} against {plain_seen:.1} ms; {page_bytes} bytes against {plain_bytes}",
        page / plain.max(0.1)
    );
    shot(&mut browser, &shots, "1-sign-in");

    // Sign in: the token typed once.
    browser.eval("document.getElementById('token').focus()");
    browser.type_text(&server.token);
    browser.eval("document.getElementById('signin-button').click()");
    browser.wait_for("signed in", "!document.getElementById('main').hidden");
    browser.wait_for("the event feed", "document.body.dataset.events === 'live'");
    browser.wait_for(
        "the approvals feed",
        "document.body.dataset.approvals === 'live'",
    );
    let backends = text_of(&mut browser, "#backends");
    assert!(
        backends.contains("bwrap") && backends.contains("native sandbox"),
        "{backends}"
    );
    assert!(
        backends.contains("NOT SANDBOXED"),
        "`none` must never look protected: {backends}"
    );
    shot(&mut browser, &shots, "2-signed-in");

    // The cookie: HttpOnly, SameSite=Strict, not the token; the token in no
    // URL and no storage.
    let cookies = browser.call("Network.getCookies", json!({"urls": [base]}));
    let cookie = cookies["cookies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "cc_console")
        .unwrap_or_else(|| panic!("no console cookie: {cookies}"))
        .clone();
    assert_eq!(cookie["httpOnly"], true, "{cookie}");
    assert_eq!(cookie["sameSite"], "Strict", "{cookie}");
    assert_eq!(cookie["path"], "/", "{cookie}");
    assert_ne!(cookie["value"], server.token.as_str());
    let script_sees = browser.eval("document.cookie + JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + location.href + document.getElementById('token').value");
    assert!(
        !script_sees.as_str().unwrap().contains(&server.token),
        "{script_sees}"
    );
    assert!(
        !script_sees.as_str().unwrap().contains("cc_console"),
        "{script_sees}"
    );

    // A bwrap sandbox appears with its badge, its limits and use; its
    // starting and ready arrive live.
    let work = tempfile::tempdir().unwrap();
    let created = server.call(
        "POST",
        "/v1/sandboxes?backend=bwrap",
        Some(&json!({"sessionId": "shown", "networkEnabled": true, "bindMounts": [{"hostPath": work.path()}], "guestWorkdir": work.path()}).to_string()),
    );
    assert_eq!(
        created.status,
        201,
        "{}\n{}",
        text(&created.body),
        server.log()
    );
    browser.wait_for(
        "the sandbox's row",
        "(document.querySelector('tr[data-sandbox=\"shown\"]') || {}).textContent",
    );
    let row = browser.wait_for(
        "its use read from its cgroup",
        "((document.querySelector('tr[data-sandbox=\"shown\"]') || {}).textContent || '').includes('memory') && document.querySelector('tr[data-sandbox=\"shown\"]').textContent",
    );
    assert!(row.as_str().unwrap().contains("native sandbox"), "{row}");
    browser.wait_for(
        "its ready event",
        "[...document.querySelectorAll('#events li')].some(li => li.textContent.includes('shown') && li.dataset.type === 'ready')",
    );

    // A command that needs the network asks; the button answers.
    let (addr, token) = (server.addr, server.token.clone());
    let asking = std::thread::spawn(move || {
        let body =
            json!({"argv": ["curl", "-s", "-m", "10", "http://blocked.example/"]}).to_string();
        http(
            addr,
            "POST",
            "/v1/sandboxes/shown/execs",
            Some(&body),
            Some(&token),
        )
    });
    browser.wait_for(
        "the prompt",
        "document.querySelector('#approvals li button.allow')",
    );
    let prompt = text_of(&mut browser, "#approvals li");
    assert!(
        prompt.contains("curl") && prompt.contains("shown"),
        "{prompt}"
    );
    shot(&mut browser, &shots, "3-prompt");
    browser.eval("document.querySelector('#approvals li button.allow').click()");
    let ran = asking.join().unwrap();
    assert_eq!(
        ran.status,
        200,
        "the allowed command was refused: {}",
        text(&ran.body)
    );
    browser.wait_for(
        "the prompt gone",
        "!document.querySelector('#approvals li')",
    );
    // Its refused connection is a violation that stands out.
    browser.wait_for(
        "the violation",
        "[...document.querySelectorAll('#events li.violation')].some(li => li.textContent.includes('blocked.example'))",
    );

    // What a command prints is text: markup and OSC 52 change nothing.
    let printed = server.call(
        "POST",
        "/v1/sandboxes/shown/execs",
        Some(&json!({"argv": ["printf", "%s\\033]52;c;aGVsbG8=\\007\\n", HOSTILE]}).to_string()),
    );
    assert_eq!(exit_code(&printed.lines()), 0, "{}", text(&printed.body));
    browser.wait_for(
        "the hostile output as text",
        &format!(
            "[...document.querySelectorAll('#events li')].some(li => li.textContent.includes({}))",
            json!(HOSTILE)
        ),
    );
    shot(&mut browser, &shots, "4-events");

    // A terminal: a host shell, badged as such; typed into, it answers.
    browser.eval("document.getElementById('terminal-backend').value = 'none'");
    browser.eval("document.getElementById('terminal-open').click()");
    browser.wait_for(
        "the terminal",
        "document.getElementById('terminal-status').textContent.startsWith('terminal ')",
    );
    assert!(text_of(&mut browser, "#terminal-badge").contains("NOT SANDBOXED"));
    browser.eval("terminal.term.focus()");
    browser.type_text("echo console-$((40+2)); printf '\\033]52;c;aGVsbG8=\\007%s\\n' \"$(printf '<b>bold</b>')\"");
    browser.press_enter();
    let screen = "(() => { const b = terminal.term.buffer.active; let s = ''; \
                  for (let i = 0; i < b.length; i++) s += b.getLine(i).translateToString(true) + '\\n'; return s; })()";
    browser.wait_for(
        "the shell's answer",
        &format!("{screen}.includes('console-42')"),
    );
    browser.wait_for(
        "the markup as text",
        // A line of its own: the typed command holds the same text.
        &format!("{screen}.split('\\n').includes('<b>bold</b>')"),
    );
    // The OSC 52 sequence was taken as one and swallowed: its output line
    // is the markup alone.
    let shown = browser.eval(screen);
    assert!(
        shown.as_str().unwrap().lines().any(|l| l == "<b>bold</b>"),
        "{shown}"
    );
    shot(&mut browser, &shots, "5-terminal");

    // Nothing ran: no element from the output, the title unchanged, no
    // exception in the page, no clipboard write.
    assert_eq!(
        browser.eval("document.querySelectorAll('#events img, #terminal img, #terminal b').length"),
        json!(0)
    );
    assert_eq!(browser.eval("document.title"), json!("cc_server console"));
    let thrown = browser.seen("Runtime.exceptionThrown");
    assert!(thrown.is_empty(), "exceptions in the page: {thrown:?}");
    let csp_reports: Vec<_> = browser
        .seen("Log.entryAdded")
        .into_iter()
        .filter(|e| e.to_string().contains("Content Security Policy"))
        .collect();
    assert!(
        csp_reports.is_empty(),
        "the page broke its own CSP: {csp_reports:?}"
    );

    // No request the page made carried the token in its URL.
    for request in browser.seen("Network.requestWillBeSent") {
        let url = request["params"]["request"]["url"].as_str().unwrap_or("");
        assert!(!url.contains(&server.token), "the token in a URL: {url}");
    }
    // The README's screenshot, when asked for: a test run leaves the
    // checkout as it found it.
    if std::env::var_os("CC_UPDATE_CONSOLE_PNG").is_some() {
        std::fs::copy(
            shots.join("5-terminal.png"),
            repo_root().join("docs/console.png"),
        )
        .unwrap();
    }

    // A sandboxed terminal: badged as the sandbox it is, and it answers.
    browser.eval("document.getElementById('terminal-backend').value = 'native'");
    browser.eval("document.getElementById('terminal-open').click()");
    browser.wait_for(
        "the sandboxed terminal",
        "document.getElementById('terminal-status').textContent.startsWith('terminal ') \
         && document.getElementById('terminal-badge').textContent.includes('native sandbox')",
    );
    browser.eval("terminal.term.focus()");
    browser.type_text("echo inside-$((6*7))");
    browser.press_enter();
    browser.wait_for(
        "the sandboxed shell's answer",
        &format!("{screen}.split('\\n').includes('inside-42')"),
    );
    shot(&mut browser, &shots, "6-sandboxed-terminal");

    // Another origin's page (`localhost` is not `127.0.0.1`) posting with
    // the browser's credentials changes nothing.
    let other = format!("http://localhost:{}/console/app.css", server.addr.port());
    browser.navigate(&other);
    browser.eval(&format!(
        "fetch({}, {{method: 'POST', mode: 'no-cors', credentials: 'include', body: JSON.stringify({{sessionId: 'cross'}})}}).then(() => 1, () => 0)",
        json!(format!("{base}/v1/sandboxes"))
    ));
    std::thread::sleep(Duration::from_millis(500));
    let cross = server.call("GET", "/v1/sandboxes/cross", None);
    assert_eq!(cross.status, 404, "a cross-origin POST made a sandbox");
    let value: Value = cookie["value"].clone();
    let refused = http_with(
        server.addr,
        "POST",
        "/v1/sandboxes",
        Some("{}"),
        None,
        &[
            ("Cookie", &format!("cc_console={}", value.as_str().unwrap())),
            (
                "Origin",
                &format!("http://localhost:{}", server.addr.port()),
            ),
            ("X-CC-Console", "1"),
        ],
    );
    assert_eq!(refused.status, 403, "{}", text(&refused.body));

    // Signing out ends the session.
    browser.navigate(&format!("{base}/"));
    browser.wait_for(
        "signed in again by the cookie",
        "!document.getElementById('main').hidden",
    );
    browser.eval("document.getElementById('signout').click()");
    browser.wait_for("signed out", "!document.getElementById('signin').hidden");
    let after = http_with(
        server.addr,
        "GET",
        "/v1/sandboxes",
        None,
        None,
        &[("Cookie", &format!("cc_console={}", value.as_str().unwrap()))],
    );
    assert_eq!(after.status, 401, "{}", text(&after.body));
}
