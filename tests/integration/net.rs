//! Loopback network fixtures for the egress tests: a git smart-HTTP server,
//! an sshd, a bulk HTTP server and a canary listener. Everything binds and
//! dials 127.0.0.1 only, and everything stops on drop (threads joined,
//! children killed and reaped), so a test can assert that a request did or
//! did not reach its target without leaving anything behind.

use crate::util::{descendants, eventually, skip_or_fail, text};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a connection may sit idle before its handler gives up: no
/// handler thread can be blocked forever by a silent client.
const IDLE: Duration = Duration::from_secs(60);

// ------------------------------------------------------------ the listener

type Handler = Arc<dyn Fn(TcpStream) + Send + Sync>;
type Live = Arc<Mutex<Vec<(TcpStream, JoinHandle<()>)>>>;

/// A loopback accept loop with one thread per connection. Drop stops the
/// loop (stop flag plus a self-connect), shuts every live connection down
/// and joins the handlers.
struct Listener {
    port: u16,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    live: Live,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    fn start(handler: Handler) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let live: Live = Arc::default();
        let thread = {
            let (stop, accepted, live) = (stop.clone(), accepted.clone(), live.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let _ = stream.set_read_timeout(Some(IDLE));
                    let _ = stream.set_write_timeout(Some(IDLE));
                    let Ok(kept) = stream.try_clone() else {
                        continue;
                    };
                    let handler = handler.clone();
                    let thread = std::thread::spawn(move || handler(stream));
                    let mut live = live.lock().unwrap();
                    live.retain(|(_, t)| !t.is_finished());
                    live.push((kept, thread));
                }
            })
        };
        Self {
            port,
            stop,
            accepted,
            live,
            thread: Some(thread),
        }
    }

    fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let live = std::mem::take(&mut *self.live.lock().unwrap());
        for (stream, _) in &live {
            let _ = stream.shutdown(Shutdown::Both);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for (_, thread) in live {
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if thread.is_finished() {
                let _ = thread.join();
            } else {
                eprintln!("net fixture: a connection handler did not stop within 10 s");
            }
        }
    }
}

// ------------------------------------------------------------ HTTP parsing

/// One parsed request head: `GET /a?b HTTP/1.1` and its headers.
struct Request {
    method: String,
    path: String,
    query: String,
    protocol: String,
    headers: Vec<(String, String)>,
}

impl Request {
    /// Reads a request head; `None` on EOF, timeout or garbage.
    fn read(reader: &mut impl BufRead) -> Option<Self> {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let mut parts = line.split_whitespace();
        let (method, target, protocol) = (parts.next()?, parts.next()?, parts.next()?);
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(':')?;
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
        Some(Self {
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            protocol: protocol.to_owned(),
            headers,
        })
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The whole body, by `Content-Length` or `Transfer-Encoding: chunked`.
    fn read_body(&self, reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
        let mut body = Vec::new();
        if self
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
        {
            loop {
                let mut size = String::new();
                reader.read_line(&mut size)?;
                let size = size.trim().split(';').next().unwrap_or("");
                let size = usize::from_str_radix(size, 16)
                    .map_err(|_| std::io::Error::other(format!("bad chunk size {size:?}")))?;
                if size == 0 {
                    // Trailers, up to the blank line.
                    let mut line = String::new();
                    while reader.read_line(&mut line)? > 0 && !line.trim().is_empty() {
                        line.clear();
                    }
                    return Ok(body);
                }
                let start = body.len();
                body.resize(start + size, 0);
                reader.read_exact(&mut body[start..])?;
                let mut crlf = [0; 2];
                reader.read_exact(&mut crlf)?;
            }
        }
        let len: u64 = self
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        reader.take(len).read_to_end(&mut body)?;
        Ok(body)
    }
}

// ------------------------------------------------------------ git over HTTP

/// git's smart HTTP on loopback: each request runs `git http-backend` as a
/// CGI over the repositories under a project root (all exported; pushes
/// need `http.receivepack true` in the bare repository).
pub struct GitHttpServer {
    requests: Arc<AtomicUsize>,
    listener: Listener,
    pushes: Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

/// The credentials the stand-in forge takes (`Authorization`, exactly):
/// `write` for receive-pack (and reads), `read` for upload-pack only.
#[derive(Clone, Default)]
pub struct Scopes {
    pub write: Option<String>,
    pub read: Option<String>,
    /// The GitHub App token endpoints, and the tokens they minted.
    pub app: Option<Arc<std::sync::Mutex<AppForge>>>,
    /// Served over TLS with this config (see [`test_ca`]).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Every request's method, path and query, in order.
    pub log: Option<Arc<std::sync::Mutex<Vec<String>>>>,
}

/// A test CA and a server certificate it signed for `forge.test` and
/// `127.0.0.1`, made with openssl in `dir`: the CA's PEM file, and the
/// stand-in's TLS config.
pub fn test_ca(dir: &Path) -> (PathBuf, Arc<rustls::ServerConfig>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            text(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=cc-server test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=forge.test",
    ]);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:forge.test,IP:127.0.0.1
basicConstraints=CA:FALSE
         extendedKeyUsage=serverAuth
",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "server.ext",
    ]);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.pem"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    (dir.join("ca.pem"), Arc::new(config))
}

/// The stand-in's GitHub App side: every token minted and revoked, the
/// JWT issuers seen. A minted token with `contents: write` may push; with
/// `contents: read` only fetch; a revoked one nothing.
#[derive(Default)]
pub struct AppForge {
    pub minted: Vec<MintedToken>,
    pub issuers: Vec<String>,
    /// The installation id of every mint's path, in order.
    pub installations: Vec<String>,
    /// The `expires_at` answered (default far in the future).
    pub expires_at: Option<String>,
}

pub struct MintedToken {
    pub token: String,
    pub permissions: serde_json::Value,
    pub repositories: serde_json::Value,
    pub revoked: bool,
}

impl AppForge {
    /// The `contents` permission of a live minted token given as Basic.
    fn contents(&self, authorization: Option<&str>) -> Option<String> {
        self.permission(authorization, "contents")
    }

    /// A permission of a live minted token given as Basic.
    fn permission(&self, authorization: Option<&str>, name: &str) -> Option<String> {
        use base64::Engine as _;
        let basic = authorization?.strip_prefix("Basic ")?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(basic)
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let token = decoded.strip_prefix("x-access-token:")?;
        let minted = self
            .minted
            .iter()
            .find(|m| m.token == token && !m.revoked)?;
        minted.permissions[name].as_str().map(str::to_owned)
    }
}

/// `POST /app/installations/{id}/access_tokens` (a JWT as Bearer) and
/// `DELETE /installation/token` (the token itself); `None` for other paths.
fn app_endpoint(
    forge: &std::sync::Mutex<AppForge>,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &[u8],
) -> Option<(u16, String)> {
    use base64::Engine as _;
    let mut forge = forge.lock().unwrap();
    if method == "POST"
        && path.starts_with("/app/installations/")
        && path.ends_with("/access_tokens")
    {
        let jwt = authorization.and_then(|a| a.strip_prefix("Bearer "))?;
        let parts: Vec<&str> = jwt.split('.').collect();
        let claims = parts
            .get(1)
            .and_then(|c| {
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(c)
                    .ok()
            })
            .and_then(|c| serde_json::from_slice::<serde_json::Value>(&c).ok());
        let (Some(claims), 3) = (claims, parts.len()) else {
            return Some((
                401,
                "{\"message\":\"A JSON web token could not be decoded\"}".into(),
            ));
        };
        forge
            .issuers
            .push(claims["iss"].as_str().unwrap_or_default().to_owned());
        let installation = path
            .trim_start_matches("/app/installations/")
            .trim_end_matches("/access_tokens");
        forge.installations.push(installation.to_owned());
        let asked: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        // Opaque and long, as GitHub's stateless tokens are.
        let token = format!("ghs_{}_{}", forge.minted.len(), "t".repeat(600));
        forge.minted.push(MintedToken {
            token: token.clone(),
            permissions: asked["permissions"].clone(),
            repositories: asked["repositories"].clone(),
            revoked: false,
        });
        let expires_at = forge
            .expires_at
            .as_deref()
            .unwrap_or("2099-01-01T00:00:00Z");
        let answer = serde_json::json!({"token": token, "expires_at": expires_at});
        return Some((201, answer.to_string()));
    }
    if method == "DELETE" && path == "/installation/token" {
        let token = authorization.and_then(|a| a.strip_prefix("token "))?;
        return match forge.minted.iter_mut().find(|m| m.token == token) {
            Some(minted) => {
                minted.revoked = true;
                Some((204, String::new()))
            }
            None => Some((401, "{\"message\":\"Bad credentials\"}".into())),
        };
    }
    None
}

impl GitHttpServer {
    pub fn start(project_root: &Path) -> Self {
        Self::start_requiring(project_root, None)
    }

    /// A stand-in forge whose receive-pack (discovery and push) answers 401
    /// unless the request carries `authorization` exactly: the write scope.
    /// Every receive-pack request's `Authorization` is recorded.
    pub fn start_requiring(project_root: &Path, authorization: Option<String>) -> Self {
        let scopes = Scopes {
            write: authorization,
            ..Scopes::default()
        };
        Self::start_with_scopes(project_root, scopes)
    }

    /// [`GitHttpServer::start_requiring`], and with `scopes.read` every
    /// upload-pack request (fetch, clone) needs the read or write credential.
    pub fn start_with_scopes(project_root: &Path, scopes: Scopes) -> Self {
        let requests = Arc::new(AtomicUsize::new(0));
        let pushes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let root = project_root.to_path_buf();
        let counter = requests.clone();
        let seen = pushes.clone();
        let listener = Listener::start(Arc::new(move |stream| {
            let mut stream = stream;
            let result = match &scopes.tls {
                None => {
                    let result = serve_git(&root, &mut stream, &counter, (&scopes, &seen));
                    let _ = stream.shutdown(Shutdown::Write);
                    result
                }
                Some(config) => match rustls::ServerConnection::new(Arc::clone(config)) {
                    Ok(connection) => {
                        let mut tls = rustls::StreamOwned::new(connection, stream);
                        let result = serve_git(&root, &mut tls, &counter, (&scopes, &seen));
                        tls.conn.send_close_notify();
                        let _ = tls.flush();
                        let _ = tls.sock.shutdown(Shutdown::Write);
                        result
                    }
                    Err(e) => Err(std::io::Error::other(e)),
                },
            };
            if let Err(e) = result {
                eprintln!("git http fixture: {e}");
            }
        }));
        Self {
            requests,
            listener,
            pushes,
        }
    }

    /// The `Authorization` of every receive-pack request, in order.
    pub fn push_authorizations(&self) -> Vec<Option<String>> {
        self.pushes.lock().unwrap().clone()
    }

    pub fn port(&self) -> u16 {
        self.listener.port
    }

    /// Requests that arrived (a parsed request line each).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// TCP connections accepted, request or not.
    pub fn connections(&self) -> usize {
        self.listener.connections()
    }
}

type PushCheck<'a> = (&'a Scopes, &'a std::sync::Mutex<Vec<Option<String>>>);

fn serve_git<S: Read + Write>(
    root: &Path,
    stream: &mut S,
    requests: &AtomicUsize,
    (scopes, seen): PushCheck<'_>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let Some(req) = Request::read(&mut reader) else {
        return Ok(());
    };
    requests.fetch_add(1, Ordering::SeqCst);
    if let Some(log) = &scopes.log {
        let line = format!("{} {}?{}", req.method, req.path, req.query);
        log.lock().unwrap().push(line);
    }
    let receive_pack =
        req.path.ends_with("/git-receive-pack") || req.query.contains("service=git-receive-pack");
    let given = req.header("authorization").map(str::to_owned);
    if let Some(app) = &scopes.app
        && (req.path.starts_with("/app/") || req.path.starts_with("/installation/"))
    {
        let body = req.read_body(&mut reader)?;
        let (status, answer) = app_endpoint(app, &req.method, &req.path, given.as_deref(), &body)
            .unwrap_or((404, String::new()));
        let head = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            answer.len()
        );
        reader.get_mut().write_all(head.as_bytes())?;
        reader.get_mut().write_all(answer.as_bytes())?;
        return Ok(());
    }
    let is = |scope: &Option<String>| scope.is_some() && *scope == given;
    let minted = scopes
        .app
        .as_ref()
        .and_then(|app| app.lock().unwrap().contents(given.as_deref()));
    let guarded = scopes.write.is_some() || scopes.app.is_some();
    let refused = if receive_pack {
        seen.lock().unwrap().push(given.clone());
        guarded && !is(&scopes.write) && minted.as_deref() != Some("write")
    } else {
        (scopes.read.is_some() || scopes.app.is_some())
            && !is(&scopes.read)
            && !is(&scopes.write)
            && minted.is_none()
    };
    {
        if refused {
            reader.get_mut().write_all(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"forge\"\r\n\
                  Content-Length: 0\r\nConnection: close\r\n\r\n",
            )?;
            return Ok(());
        }
    }
    if req
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        reader
            .get_mut()
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let body = req.read_body(&mut reader)?;
    // As GitHub does, a minted token without the `workflows` permission may
    // not change `.github/workflows/`: the repository's pre-receive hook
    // (see `refuse_workflows_without_permission`) reads this.
    let workflows = match &scopes.app {
        Some(app) => {
            let app = app.lock().unwrap();
            app.permission(given.as_deref(), "contents").is_none()
                || app.permission(given.as_deref(), "workflows").as_deref() == Some("write")
        }
        None => true,
    };
    let mut cgi = Command::new("git");
    cgi.env("STANDIN_WORKFLOWS", if workflows { "1" } else { "0" });
    cgi.arg("http-backend")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", &req.path)
        .env("REQUEST_METHOD", &req.method)
        .env("QUERY_STRING", &req.query)
        .env("CONTENT_TYPE", req.header("content-type").unwrap_or(""))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("SERVER_PROTOCOL", &req.protocol)
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null");
    // Every other header as HTTP_*: Git-Protocol (v2), Content-Encoding (gzip).
    for (k, v) in &req.headers {
        let name = k.to_ascii_uppercase().replace('-', "_");
        if name != "CONTENT_TYPE" && name != "CONTENT_LENGTH" {
            cgi.env(format!("HTTP_{name}"), v);
        }
    }
    let mut child = cgi
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let result = relay_cgi(&mut child, body, reader.get_mut());
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// Feeds the body to the CGI (from a thread: it may answer before reading
/// it all) and turns its output into an HTTP response.
fn relay_cgi(child: &mut Child, body: Vec<u8>, out: &mut impl Write) -> std::io::Result<()> {
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let mut cgi = BufReader::new(child.stdout.take().unwrap());
    let mut status = "200 OK".to_owned();
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if cgi.read_line(&mut line)? == 0 {
            break;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        match line.split_once(':') {
            Some((k, v)) if k.eq_ignore_ascii_case("status") => status = v.trim().to_owned(),
            _ => head.push_str(&format!("{line}\r\n")),
        }
    }
    out.write_all(format!("HTTP/1.1 {status}\r\n{head}Connection: close\r\n\r\n").as_bytes())?;
    std::io::copy(&mut cgi, out)?;
    out.flush()?;
    let _ = feeder.join();
    Ok(())
}

/// Installs the stand-in forge's rule in `bare`: a push changing
/// `.github/workflows/` is refused unless its token has the `workflows`
/// permission, in the forge's words.
pub fn refuse_workflows_without_permission(bare: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let hook = bare.join("hooks/pre-receive");
    std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
    let script = r#"#!/bin/sh
[ "$STANDIN_WORKFLOWS" = 1 ] && exit 0
while read old new ref; do
  case $old in
    0000000000000000000000000000000000000000) files=$(git ls-tree -r --name-only $new) ;;
    *) files=$(git diff --name-only $old $new) ;;
  esac
  if echo "$files" | grep -q '^.github/workflows/'; then
    echo "refusing to allow a GitHub App to create or update workflow without workflows permission" >&2
    exit 1
  fi
done
"#;
    std::fs::write(&hook, script).unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
}

// ------------------------------------------------------------ bulk HTTP

/// Byte `i` of every [`BulkServer`] body: a fixed pattern a reader can check.
pub fn bulk_byte(i: u64) -> u8 {
    (i % 256) as u8
}

/// An HTTP server answering every GET with exactly `bytes` bytes of
/// [`bulk_byte`], written in 1 MiB chunks: a throughput target.
pub struct BulkServer {
    requests: Arc<AtomicUsize>,
    listener: Listener,
}

impl BulkServer {
    pub fn start(bytes: u64) -> Self {
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        // 1 MiB, a multiple of the pattern's period: every chunk is the same.
        let chunk: Arc<Vec<u8>> = Arc::new((0..1 << 20).map(bulk_byte).collect());
        let listener = Listener::start(Arc::new(move |stream| {
            let _ = serve_bulk(stream, bytes, &chunk, &counter);
        }));
        Self { requests, listener }
    }

    pub fn port(&self) -> u16 {
        self.listener.port
    }

    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    pub fn connections(&self) -> usize {
        self.listener.connections()
    }
}

fn serve_bulk(
    stream: TcpStream,
    bytes: u64,
    chunk: &[u8],
    requests: &AtomicUsize,
) -> std::io::Result<()> {
    let mut out = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let Some(req) = Request::read(&mut reader) else {
        return Ok(());
    };
    requests.fetch_add(1, Ordering::SeqCst);
    if req.method != "GET" {
        out.write_all(
            b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )?;
        return Ok(());
    }
    out.write_all(
        format!("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {bytes}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        out.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    out.flush()?;
    let _ = out.shutdown(Shutdown::Write);
    // Let the client read to the end before the socket closes.
    let _ = reader.read_to_end(&mut Vec::new());
    Ok(())
}

// ------------------------------------------------------------ canary

/// A loopback listener that only counts connections: proof that nothing
/// reached it.
pub struct Canary {
    listener: Listener,
}

impl Canary {
    pub fn start() -> Self {
        Self {
            listener: Listener::start(Arc::new(|_| {})),
        }
    }

    pub fn port(&self) -> u16 {
        self.listener.port
    }

    pub fn connections(&self) -> usize {
        self.listener.connections()
    }
}

// ------------------------------------------------------------ sshd

/// The user the tests run as (root in CI): the user an ssh URL names.
pub fn current_user() -> String {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } == 0 {
        return "root".to_owned();
    }
    let out = Command::new("id").arg("-un").output().unwrap();
    text(&out.stdout).trim().to_owned()
}

/// Whether sshd is installed. When it is not, the test is skipped, saying
/// so, or fails under CI.
pub fn sshd_installed() -> bool {
    if Path::new("/usr/sbin/sshd").exists() {
        return true;
    }
    skip_or_fail("/usr/sbin/sshd is not installed: `.ci/install-deps` installs openssh-server");
    false
}

/// A private sshd on loopback: its own host key, one authorized client key,
/// public-key login only (root allowed: CI runs as root).
pub struct Sshd {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Sshd {
    pub fn start(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let host_key = dir.join("host_ed25519");
        let client_key = dir.join("client_ed25519");
        for (key, comment) in [(&host_key, "host"), (&client_key, "client")] {
            let _ = std::fs::remove_file(key);
            let out = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
                .arg(key)
                .output()
                .unwrap();
            assert!(out.status.success(), "ssh-keygen: {}", text(&out.stderr));
        }
        std::fs::copy(dir.join("client_ed25519.pub"), dir.join("authorized_keys")).unwrap();
        // Privilege separation wants this directory (a tmpfs, absent at boot).
        let _ = std::fs::create_dir_all("/run/sshd");
        // A free port can be taken between our probe and sshd's bind: retry.
        let mut last_log = String::new();
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let config = dir.join("sshd_config");
            std::fs::write(
                &config,
                format!(
                    "ListenAddress 127.0.0.1\nPort {port}\nHostKey {host}\n\
                     AuthorizedKeysFile {auth}\nPubkeyAuthentication yes\n\
                     PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                     UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n\
                     PidFile {pid}\nLogLevel INFO\n",
                    host = host_key.display(),
                    auth = dir.join("authorized_keys").display(),
                    pid = dir.join("sshd.pid").display(),
                ),
            )
            .unwrap();
            let log = dir.join("sshd.log");
            let mut child = Command::new("/usr/sbin/sshd")
                .args(["-D", "-e", "-f"])
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap();
            let mut exited = false;
            let up = eventually(Duration::from_secs(15), || {
                exited = child.try_wait().unwrap().is_some();
                exited || TcpStream::connect(("127.0.0.1", port)).is_ok()
            });
            if up && !exited {
                let sshd = Self {
                    dir: dir.to_path_buf(),
                    port,
                    child: Some(child),
                };
                let line = sshd.known_hosts_line(&format!("[127.0.0.1]:{port}"));
                std::fs::write(dir.join("known_hosts"), line + "\n").unwrap();
                return sshd;
            }
            let _ = child.kill();
            let _ = child.wait();
            last_log = std::fs::read_to_string(&log).unwrap_or_default();
        }
        panic!("sshd did not start; its log:\n{last_log}");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The private key sshd accepts.
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client_ed25519")
    }

    /// A known_hosts line for this server's host key under `host_alias`
    /// (`[127.0.0.1]:PORT` for a direct connection, or a `HostKeyAlias`).
    pub fn known_hosts_line(&self, host_alias: &str) -> String {
        let key = std::fs::read_to_string(self.dir.join("host_ed25519.pub")).unwrap();
        let mut fields = key.split_whitespace();
        let (kind, blob) = (fields.next().unwrap(), fields.next().unwrap());
        format!("{host_alias} {kind} {blob}")
    }

    /// A `GIT_SSH_COMMAND` that reaches this sshd directly: its client key,
    /// its host key pinned, no user config, never a prompt.
    pub fn git_ssh_command_direct(&self) -> String {
        format!(
            "ssh -F /dev/null -i '{key}' -p {port} -o BatchMode=yes -o IdentitiesOnly=yes \
             -o StrictHostKeyChecking=yes -o UserKnownHostsFile='{known}' \
             -o GlobalKnownHostsFile=/dev/null -o LogLevel=ERROR",
            key = self.client_key().display(),
            port = self.port,
            known = self.dir.join("known_hosts").display(),
        )
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // Per-connection sshd children call setsid(): find them before the
        // listener dies and they are reparented away.
        let pids = descendants(child.id() as i32);
        let _ = child.kill();
        let _ = child.wait();
        for pid in pids {
            // SAFETY: plain syscall on a process we started (or its child).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

// ------------------------------------------------------------ git

/// git with no user or system config, no template hooks, a fixed identity
/// and no proxy from the environment; panics unless it succeeds.
pub(crate) fn git(dir: &Path, args: &[&str]) -> Output {
    git_env(dir, args, &[])
}

/// [`git`] with extra environment (`GIT_SSH_COMMAND`, a proxy, …).
pub(crate) fn git_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let out = git_command(dir, args, env).output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        text(&out.stderr)
    );
    out
}

/// The command [`git_env`] runs, for a test that expects git to fail.
pub(crate) fn git_command(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-c").arg("init.templateDir=").args(args);
    cmd.current_dir(dir);
    for var in [
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_DIR",
        "GIT_WORK_TREE",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "fixture")
        .env("GIT_AUTHOR_EMAIL", "fixture@example.com")
        .env("GIT_COMMITTER_NAME", "fixture")
        .env("GIT_COMMITTER_EMAIL", "fixture@example.com")
        .envs(env.iter().copied());
    cmd
}

/// A bare repository `<root>/<name>` with two commits (README, then a
/// second line), pushes over HTTP allowed.
pub(crate) fn bare_repo(root: &Path, name: &str) -> PathBuf {
    let work = root.join(format!("{name}.work"));
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("README"), "one\n").unwrap();
    git(&work, &["add", "README"]);
    git(&work, &["commit", "-q", "-m", "first"]);
    std::fs::write(work.join("README"), "one\ntwo\n").unwrap();
    git(&work, &["commit", "-q", "-am", "second"]);
    let bare = root.join(name);
    git(
        root,
        &["clone", "-q", "--bare", work.to_str().unwrap(), name],
    );
    git(&bare, &["config", "http.receivepack", "true"]);
    std::fs::remove_dir_all(&work).unwrap();
    bare
}

// ------------------------------------------------------------ the fixtures' own tests

#[test]
fn git_http_server_serves_clone_and_push() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("srv");
    std::fs::create_dir_all(&root).unwrap();
    let bare = bare_repo(&root, "repo.git");
    let server = GitHttpServer::start(&root);
    assert_eq!(server.requests(), 0);
    let url = format!("http://127.0.0.1:{}/repo.git", server.port());
    git(tmp.path(), &["clone", "-q", &url, "clone"]);
    let clone = tmp.path().join("clone");
    let log = git(&clone, &["log", "--format=%s"]);
    assert_eq!(text(&log.stdout), "second\nfirst\n");
    assert!(server.requests() >= 2, "{}", server.requests());

    std::fs::write(clone.join("pushed"), "three\n").unwrap();
    git(&clone, &["add", "pushed"]);
    git(&clone, &["commit", "-q", "-m", "third"]);
    // Over postBuffer: git sends the pack with chunked encoding.
    git(
        &clone,
        &["-c", "http.postBuffer=1024", "push", "-q", "origin", "main"],
    );
    let log = git(&bare, &["log", "--format=%s", "main"]);
    assert_eq!(text(&log.stdout), "third\nsecond\nfirst\n");
    // A missing repository is the CGI's 404, not a hang.
    let nope = format!("http://127.0.0.1:{}/nope.git", server.port());
    let out = git_command(tmp.path(), &["ls-remote", &nope], &[])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not found"),
        "{}",
        text(&out.stderr)
    );
    assert!(server.connections() >= server.requests());
}

#[test]
fn sshd_serves_git_clone() {
    if !sshd_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let bare = bare_repo(tmp.path(), "repo.git");
    let sshd = Sshd::start(&tmp.path().join("sshd"));
    assert!(sshd.client_key().exists());
    let line = sshd.known_hosts_line("alias");
    assert!(line.starts_with("alias ssh-ed25519 "), "{line}");
    let url = format!(
        "ssh://{}@127.0.0.1:{}{}",
        current_user(),
        sshd.port(),
        bare.display()
    );
    let ssh = sshd.git_ssh_command_direct();
    git_env(
        tmp.path(),
        &["clone", "-q", &url, "clone"],
        &[("GIT_SSH_COMMAND", &ssh)],
    );
    let log = git(&tmp.path().join("clone"), &["log", "--format=%s"]);
    assert_eq!(text(&log.stdout), "second\nfirst\n");
    let pid = sshd.child.as_ref().unwrap().id() as i32;
    drop(sshd);
    assert!(crate::util::process_is_gone(pid));
}

#[test]
fn bulk_server_sends_exactly_n_bytes() {
    const N: u64 = 3 * (1 << 20) + 12_345;
    let server = BulkServer::start(N);
    let url = format!("http://127.0.0.1:{}/", server.port());
    let body = if Path::new("/usr/bin/curl").exists() {
        let out = Command::new("curl")
            .args(["-s", "--noproxy", "*", &url])
            .output()
            .unwrap();
        assert!(out.status.success(), "curl: {}", text(&out.stderr));
        out.stdout
    } else {
        let raw = crate::util::http(
            format!("127.0.0.1:{}", server.port()).parse().unwrap(),
            "GET",
            "/",
            None,
            None,
        );
        assert_eq!(raw.status, 200);
        raw.body
    };
    assert_eq!(body.len() as u64, N);
    assert!(
        body.iter()
            .enumerate()
            .all(|(i, b)| *b == bulk_byte(i as u64))
    );
    assert_eq!(server.requests(), 1);
    assert_eq!(server.connections(), 1);
}

#[test]
fn canary_counts_connections() {
    let canary = Canary::start();
    assert_eq!(canary.connections(), 0);
    drop(TcpStream::connect(("127.0.0.1", canary.port())).unwrap());
    assert!(eventually(Duration::from_secs(5), || canary.connections() == 1));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(canary.connections(), 1);
}

#[test]
fn fixtures_stop_promptly_with_idle_clients() {
    let tmp = tempfile::tempdir().unwrap();
    let (git_srv, bulk) = (GitHttpServer::start(tmp.path()), BulkServer::start(1 << 30));
    let _idle = TcpStream::connect(("127.0.0.1", git_srv.port())).unwrap();
    // A client that asks for 1 GiB and never reads.
    let mut stalled = TcpStream::connect(("127.0.0.1", bulk.port())).unwrap();
    stalled
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || bulk.requests() == 1
        && git_srv.connections() == 1));
    let started = Instant::now();
    drop((git_srv, bulk));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
