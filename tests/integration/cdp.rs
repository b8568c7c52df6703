//! A small Chrome DevTools Protocol client for the web console's tests: a
//! real headless Chromium (Debian's `chromium`, installed by
//! `.ci/install-deps`), one page, driven over its WebSocket with
//! tungstenite and serde_json. `--no-sandbox` turns off Chromium's own
//! sandbox, which refuses to run as root; it has nothing to do with ours.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// DevTools' list of targets (`/json/list`). Its HTTP server keeps the
/// connection open, so the body is read by its length.
fn targets(addr: SocketAddr) -> Value {
    use std::io::{Read as _, Write as _};
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(stream, "GET /json/list HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    serde_json::from_slice(&body).unwrap()
}

/// Where Debian installs Chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// One headless Chromium and its one page.
pub struct Browser {
    child: Child,
    socket: WebSocket<TcpStream>,
    next_id: u64,
    /// Every event the page sent, in order.
    pub events: Vec<Value>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium on `about:blank`; `None` when it is not installed.
    pub fn launch() -> Option<Self> {
        if !Path::new(CHROMIUM).exists() {
            return None;
        }
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--window-size=1280,1400",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/…"
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("DevTools listening on ws://").nth(1) {
                    let _ = tx.send(rest.split('/').next().unwrap_or("").to_owned());
                }
            }
        });
        let Ok(addr) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            panic!("Chromium did not say where DevTools listens");
        };
        let addr: SocketAddr = addr.parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let page_url = loop {
            let list = targets(addr);
            let page = list
                .as_array()
                .and_then(|l| l.iter().find(|t| t["type"] == "page"))
                .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(str::to_owned));
            if let Some(url) = page {
                break url;
            }
            assert!(Instant::now() < deadline, "Chromium has no page: {list}");
            std::thread::sleep(Duration::from_millis(100));
        };
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let (socket, _) = tungstenite::client(page_url.as_str(), stream).unwrap();
        let mut browser = Self {
            child,
            socket,
            next_id: 0,
            events: Vec::new(),
            _profile: profile,
        };
        for domain in [
            "Page.enable",
            "Runtime.enable",
            "Network.enable",
            "Log.enable",
        ] {
            browser.call(domain, json!({}));
        }
        Some(browser)
    }

    /// Calls `method`; its result (events arriving meanwhile are kept).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({"id": id, "method": method, "params": params});
        self.socket
            .send(Message::Text(request.to_string().into()))
            .unwrap();
        loop {
            let message = match self.socket.read().unwrap() {
                Message::Text(text) => serde_json::from_str::<Value>(text.as_str()).unwrap(),
                _ => continue,
            };
            if message["id"] == id {
                if let Some(error) = message.get("error") {
                    panic!("{method}: {error}");
                }
                return message["result"].clone();
            }
            self.events.push(message);
        }
    }

    /// Evaluates `expression` in the page (a promise is awaited); its value.
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
        );
        if let Some(thrown) = result.get("exceptionDetails") {
            panic!("{expression}: {thrown}");
        }
        result["result"]["value"].clone()
    }

    /// Waits until `expression` is truthy in the page; its value.
    pub fn wait_for(&mut self, what: &str, expression: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let value = self.eval(expression);
            let truthy = !matches!(value, Value::Null | Value::Bool(false))
                && value != json!("")
                && value != json!(0);
            if truthy {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not seen in 60 s; the page says: {}",
                self.eval("document.body.innerText")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Loads `url` and waits for its `load` event.
    pub fn navigate(&mut self, url: &str) {
        self.events.clear();
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for("the page's load", "document.readyState === 'complete'");
    }

    /// Types `text` into the focused element, as a keyboard would.
    pub fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({"text": text}));
    }

    /// Presses Enter.
    pub fn press_enter(&mut self) {
        for kind in ["keyDown", "keyUp"] {
            self.call(
                "Input.dispatchKeyEvent",
                json!({"type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": if kind == "keyDown" { "\r" } else { "" }}),
            );
        }
    }

    /// Saves a PNG of the page.
    pub fn screenshot(&mut self, path: &Path) {
        use base64::Engine as _;
        let shot = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// The events of `method` seen so far.
    pub fn seen(&self, method: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["method"] == method)
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
