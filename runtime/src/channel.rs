//! The server channel (docs/design.md, "The server channel"): how a command
//! inside a sandbox asks the server something — a git credential helper for
//! the run's read token, an agent's tool hook for the policy's verdict.
//!
//! Front-ends register named [`Handler`]s once, on [`Sessions::channel`];
//! every session's HTTP proxy answers `POST http://cc-server.internal/v1/NAME`
//! itself by calling the handler with the [`Caller`] — the session whose
//! proxy the request came through, which no command can choose. Inside,
//! `sandbox-init call NAME [ARG…]` (its path in [`client_program`], and in
//! each command's `CC_SERVER_CALL`) sends its arguments and standard input,
//! prints the handler's standard output and error and exits with its
//! status; any failure of the channel itself exits 2.
//!
//! [`Sessions::channel`]: crate::Sessions::channel

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, RwLock, Weak};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use sandbox_egress::local::{self, LocalBody, LocalService};
use sandbox_plugin_api::server_call::{self, ReplyBody};

use crate::Session;

/// The variable naming the client program in every command's environment.
pub const CALL_VARIABLE: &str = "CC_SERVER_CALL";

/// Marks a variable to remove in [`Channel::command_env`] (no variable
/// name holds `=`).
pub const STRIP: &str = "=strip=";

/// The channel's reserved host name.
pub const HOST: &str = sandbox_plugin_api::server_call::HOST;

/// Who is calling: the session whose proxy carried the call.
#[derive(Clone)]
pub struct Caller {
    /// The session's id.
    pub session: String,
    /// The session's backend (`bwrap`, `none`, …).
    pub backend: String,
    /// The spec's `conversationId` and `agentId`, if it had them.
    pub conversation: Option<String>,
    pub agent: Option<String>,
    live: Arc<OnceLock<Weak<Session>>>,
}

impl Caller {
    /// The calling session, while it is live (calls made during its launch,
    /// before the session exists, get `None`).
    pub fn session(&self) -> Option<Arc<Session>> {
        self.live.get().and_then(Weak::upgrade)
    }
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("session", &self.session)
            .field("backend", &self.backend)
            .field("conversation", &self.conversation)
            .field("agent", &self.agent)
            .finish()
    }
}

/// One call: its caller, the handler's name, the client's arguments and
/// standard input.
#[derive(Debug, Clone)]
pub struct Call {
    pub caller: Caller,
    pub name: String,
    pub args: Vec<String>,
    pub input: Vec<u8>,
}

/// What the client prints and exits with.
pub type Reply = ReplyBody;

/// A front-end's answer to calls of one name.
pub type Handler = Arc<dyn Fn(Call) -> Pin<Box<dyn Future<Output = Reply> + Send>> + Send + Sync>;

/// A reply that fails the client with a message on its standard error.
pub fn failure(exit: u8, message: impl std::fmt::Display) -> Reply {
    Reply {
        exit,
        stdout: Vec::new(),
        stderr: format!("{message}\n").into_bytes(),
    }
}

/// A mounted HTTP handler: the caller and the request, body unread.
pub type HttpHandler = Arc<
    dyn Fn(Caller, Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<LocalBody>> + Send>>
        + Send
        + Sync,
>;

/// Why a handler could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("`{0}` is not a handler name (1–64 of a-z, 0-9, `-`, `_`, `.`)")]
    BadName(String),
    #[error("a handler named `{0}` is already registered")]
    Taken(String),
}

/// The handlers of every session's channel.
pub struct Channel {
    handlers: RwLock<BTreeMap<String, Handler>>,
    mounts: RwLock<BTreeMap<String, HttpHandler>>,
    env: RwLock<Vec<(String, String)>>,
    ends: RwLock<Vec<EndHook>>,
    refused: RwLock<Vec<sandbox_egress::local::Refused>>,
    details: RwLock<serde_json::Map<String, serde_json::Value>>,
}

/// Told a session's id when it has been torn down (what a handler minted
/// for it is revoked there).
pub type EndHook = Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

impl Default for Channel {
    fn default() -> Self {
        Self::new()
    }
}

impl Channel {
    /// A channel with the built-in `whoami` (the caller, as JSON).
    pub fn new() -> Self {
        let channel = Self {
            handlers: RwLock::new(BTreeMap::new()),
            mounts: RwLock::new(BTreeMap::new()),
            env: RwLock::new(Vec::new()),
            ends: RwLock::new(Vec::new()),
            refused: RwLock::new(Vec::new()),
            details: RwLock::new(serde_json::Map::new()),
        };
        let whoami: Handler = Arc::new(|call: Call| {
            Box::pin(async move {
                let who = serde_json::json!({
                    "session": call.caller.session,
                    "backend": call.caller.backend,
                    "conversation": call.caller.conversation,
                    "agent": call.caller.agent,
                });
                Reply {
                    exit: 0,
                    stdout: format!("{who}\n").into_bytes(),
                    stderr: Vec::new(),
                }
            })
        });
        // The name is valid and the map empty.
        let _ = channel.register("whoami", whoami);
        channel
    }

    /// Makes `handler` answer calls named `name` in every session, from now on.
    pub fn register(&self, name: &str, handler: Handler) -> Result<(), RegisterError> {
        if !server_call::valid_name(name) {
            return Err(RegisterError::BadName(name.to_owned()));
        }
        let mut handlers = self.handlers.write().unwrap_or_else(|p| p.into_inner());
        if handlers.contains_key(name) {
            return Err(RegisterError::Taken(name.to_owned()));
        }
        handlers.insert(name.to_owned(), handler);
        Ok(())
    }

    fn handler(&self, name: &str) -> Option<Handler> {
        let handlers = self.handlers.read().unwrap_or_else(|p| p.into_inner());
        handlers.get(name).cloned()
    }

    /// The registered names, for the refusal of an unknown one.
    fn names(&self) -> Vec<String> {
        let handlers = self.handlers.read().unwrap_or_else(|p| p.into_inner());
        handlers.keys().cloned().collect()
    }

    /// Makes `handler` answer every request whose path starts with
    /// `prefix` (e.g. `/git/`), as plain HTTP, body streamed: for what
    /// speaks a protocol of its own through the channel (git's smart HTTP).
    pub fn mount(&self, prefix: &str, handler: HttpHandler) -> Result<(), RegisterError> {
        let valid = prefix.starts_with('/')
            && prefix.ends_with('/')
            && prefix.len() > 2
            && !prefix.starts_with(server_call::PATH_PREFIX);
        if !valid {
            return Err(RegisterError::BadName(prefix.to_owned()));
        }
        let mut mounts = self.mounts.write().unwrap_or_else(|p| p.into_inner());
        if mounts.contains_key(prefix) {
            return Err(RegisterError::Taken(prefix.to_owned()));
        }
        mounts.insert(prefix.to_owned(), handler);
        Ok(())
    }

    /// Adds variables every command of sessions launched from now on gets:
    /// how a mounted service tells clients inside where it is (the push
    /// gateway's `pushInsteadOf`, as `GIT_CONFIG_*`).
    pub fn add_command_env(&self, vars: impl IntoIterator<Item = (String, String)>) {
        let mut env = self.env.write().unwrap_or_else(|p| p.into_inner());
        env.extend(vars);
    }

    /// Has the proxies of sessions launched from now on refuse these
    /// targets on every way in (a mounted service's: the push gateway
    /// refuses ssh to the forge while it brokers the forge's tokens).
    pub fn refuse_egress(&self, refused: impl IntoIterator<Item = sandbox_egress::local::Refused>) {
        self.refused
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .extend(refused);
    }

    /// The targets of [`Channel::refuse_egress`].
    pub fn refused_egress(&self) -> Vec<sandbox_egress::local::Refused> {
        self.refused
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Shows `value` under `key` in every live session's handle: what a
    /// mounted service does for it (the push gateway's brokering).
    pub fn set_handle_detail(&self, key: &str, value: serde_json::Value) {
        self.details
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_owned(), value);
    }

    /// The details of [`Channel::set_handle_detail`].
    pub fn handle_details(&self) -> serde_json::Map<String, serde_json::Value> {
        self.details
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Runs `hook` after every session's teardown, with its id.
    pub fn on_session_end(&self, hook: EndHook) {
        self.ends
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(hook);
    }

    /// Runs the end hooks for `session` (at its destroy).
    pub(crate) async fn session_ended(&self, session: &str) {
        let hooks = self.ends.read().unwrap_or_else(|p| p.into_inner()).clone();
        for hook in hooks {
            hook(session.to_owned()).await;
        }
    }

    /// Removes this variable from every command's environment, whatever
    /// the client sent (the push gateway: `SSH_AUTH_SOCK`, no agent for a
    /// push around it).
    pub fn strip_command_env(&self, name: &str) {
        self.env
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push((format!("{STRIP}{name}"), String::new()));
    }

    /// The variables of [`Channel::add_command_env`]; a name removed by
    /// [`Channel::strip_command_env`] comes as `(STRIP + name, "")`.
    pub fn command_env(&self) -> Vec<(String, String)> {
        self.env.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn mounted(&self, path: &str) -> Option<HttpHandler> {
        let mounts = self.mounts.read().unwrap_or_else(|p| p.into_inner());
        mounts
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix.as_str()))
            .map(|(_, handler)| Arc::clone(handler))
    }

    /// The service one session's proxy answers the channel with, and the
    /// cell to fill with the session once it is live.
    pub(crate) fn service(
        self: &Arc<Self>,
        session: &str,
        backend: &str,
        spec: &sandbox_plugin_api::SandboxSpec,
    ) -> (LocalService, Arc<OnceLock<Weak<Session>>>) {
        let live = Arc::new(OnceLock::new());
        let caller = Caller {
            session: session.to_owned(),
            backend: backend.to_owned(),
            conversation: spec.conversation_id.clone(),
            agent: spec.agent_id.clone(),
            live: Arc::clone(&live),
        };
        let channel = Arc::clone(self);
        let service: LocalService = Arc::new(move |request: Request<Incoming>| {
            let channel = Arc::clone(&channel);
            let caller = caller.clone();
            Box::pin(async move { channel.answer(caller, request).await })
        });
        (service, live)
    }

    async fn answer(&self, caller: Caller, request: Request<Incoming>) -> Response<LocalBody> {
        let path = request.uri().path().to_owned();
        if let Some(handler) = self.mounted(&path) {
            return handler(caller, request).await;
        }
        let (parts, body) = request.into_parts();
        let limited = http_body_util::Limited::new(body, server_call::MAX_REQUEST);
        let body = match limited.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => {
                let status = if e.is::<http_body_util::LengthLimitError>() {
                    StatusCode::PAYLOAD_TOO_LARGE
                } else {
                    StatusCode::BAD_REQUEST
                };
                return local::text(status, &format!("reading the call: {e}"));
            }
        };
        self.answer_call(caller, &parts.method, &path, &body).await
    }

    /// A `/v1/NAME` call, its body read.
    async fn answer_call(
        &self,
        caller: Caller,
        method: &Method,
        path: &str,
        body: &[u8],
    ) -> Response<LocalBody> {
        let call = match parse(caller, method, path, body) {
            Ok(call) => call,
            Err(response) => return *response,
        };
        let Some(handler) = self.handler(&call.name) else {
            let message = format!(
                "no handler named `{}` (registered: {})",
                call.name,
                self.names().join(", ")
            );
            return local::text(StatusCode::NOT_FOUND, &message);
        };
        let (session, name) = (call.caller.session.clone(), call.name.clone());
        let reply = handler(call).await;
        tracing::debug!(%session, %name, exit = reply.exit, "server channel call");
        let mut response = Response::new(local::full(server_call::encode_reply(&reply)));
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(server_call::CONTENT_TYPE),
        );
        response
    }
}

fn parse(
    caller: Caller,
    method: &Method,
    path: &str,
    body: &[u8],
) -> Result<Call, Box<Response<LocalBody>>> {
    let bad = |status, message: &str| Err(Box::new(local::text(status, message)));
    let Some(name) = path.strip_prefix(server_call::PATH_PREFIX) else {
        return bad(
            StatusCode::NOT_FOUND,
            "calls are POST /v1/NAME (use `sandbox-init call NAME`)",
        );
    };
    if method != Method::POST {
        return bad(StatusCode::METHOD_NOT_ALLOWED, "calls are POST /v1/NAME");
    }
    if !server_call::valid_name(name) {
        return bad(StatusCode::NOT_FOUND, "not a handler name");
    }
    let body = match server_call::decode_call(body) {
        Ok(body) => body,
        Err(why) => return bad(StatusCode::BAD_REQUEST, &format!("malformed call: {why}")),
    };
    Ok(Call {
        caller,
        name: name.to_owned(),
        args: body.args,
        input: body.input,
    })
}

/// The in-sandbox path of the client program (run as `PROGRAM call NAME
/// [ARG…]`) for a session of `backend`, if that backend has one: bwrap binds
/// `sandbox-init` at `/.sandbox-init`; `none` runs on the host, where it is
/// the `sandbox-init` beside the server's executable. The microvm guest
/// has no client yet (its proxy answers the channel all the same).
pub fn client_program(backend: &str) -> Option<PathBuf> {
    match backend {
        "bwrap" => Some(PathBuf::from("/.sandbox-init")),
        "none" => {
            let exe = std::env::current_exe().ok()?;
            let dir = exe.parent()?;
            [Some(dir), dir.parent()]
                .into_iter()
                .flatten()
                .map(|d| d.join("sandbox-init"))
                .find(|p| p.is_file())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller() -> Caller {
        Caller {
            session: "s1".into(),
            backend: "bwrap".into(),
            conversation: None,
            agent: None,
            live: Arc::new(OnceLock::new()),
        }
    }

    async fn call(
        channel: &Channel,
        method: Method,
        path: &str,
        body: &[u8],
    ) -> (StatusCode, Vec<u8>) {
        let resp = channel.answer_call(caller(), &method, path, body).await;
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, body.to_vec())
    }

    #[tokio::test]
    async fn a_registered_handler_gets_the_session_args_and_input() {
        let channel = Channel::new();
        let echo: Handler = Arc::new(|call: Call| {
            Box::pin(async move {
                Reply {
                    exit: 7,
                    stdout: format!("{} {}", call.caller.session, call.args.join(",")).into_bytes(),
                    stderr: call.input,
                }
            })
        });
        channel.register("echo", echo.clone()).unwrap();
        assert!(matches!(
            channel.register("echo", echo.clone()),
            Err(RegisterError::Taken(_))
        ));
        assert!(matches!(
            channel.register("Bad/Name", echo),
            Err(RegisterError::BadName(_))
        ));
        let body = server_call::encode_call(&["a".into(), "b".into()], b"in");
        let (status, answer) = call(&channel, Method::POST, "/v1/echo", &body).await;
        assert_eq!(status, StatusCode::OK);
        let reply = server_call::decode_reply(&answer).unwrap();
        assert_eq!(reply.exit, 7);
        assert_eq!(reply.stdout, b"s1 a,b");
        assert_eq!(reply.stderr, b"in");
    }

    #[tokio::test]
    async fn unknown_names_and_malformed_calls_are_refused_with_a_reason() {
        let channel = Channel::new();
        let empty = server_call::encode_call(&[], b"");
        let (status, body) = call(&channel, Method::POST, "/v1/nope", &empty).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(String::from_utf8_lossy(&body).contains("whoami"));
        let (status, _) = call(&channel, Method::POST, "/v1/whoami", &[0, 0]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let (status, _) = call(&channel, Method::POST, "/other", &empty).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _) = call(&channel, Method::GET, "/v1/whoami", &empty).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        let (status, body) = call(&channel, Method::POST, "/v1/whoami", &empty).await;
        assert_eq!(status, StatusCode::OK);
        let reply = server_call::decode_reply(&body).unwrap();
        assert!(String::from_utf8_lossy(&reply.stdout).contains("\"session\":\"s1\""));
    }

    #[test]
    fn mounts_take_a_path_prefix_outside_the_calls() {
        let channel = Channel::new();
        let handler: HttpHandler =
            Arc::new(|_, _| Box::pin(async { local::text(StatusCode::OK, "ok") }));
        channel.mount("/git/", handler.clone()).unwrap();
        assert!(channel.mount("/git/", handler.clone()).is_err());
        assert!(channel.mount("/v1/x/", handler.clone()).is_err());
        assert!(channel.mount("git", handler).is_err());
        assert!(channel.mounted("/git/o/r.git/info/refs").is_some());
        assert!(channel.mounted("/v1/whoami").is_none());
    }
}
