//! The gateway's HTTP side: discovery and pushes for the repositories a
//! session may push to, each push judged per ref before a pack byte moves,
//! then refused with git's own report or forwarded to the upstream with a
//! credential the sandbox never sees.

use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine as _;
use bytes::Bytes;
use futures_util::future::BoxFuture;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use crate::pack::{self, Ancestry};
use crate::pktline::{self, Pkt};
use crate::receive::{self, PushHead};
use crate::report::{self, Decision};
use crate::spool::Spool;
use crate::target::Target;

/// A gateway answer's body (streamed: a forwarded push's report).
pub type GatewayBody = BoxBody<Bytes, hyper::Error>;

/// The largest discovery answer read (it is rewritten whole).
const MAX_ADVERTISEMENT: usize = 64 << 20;

const RECEIVE_PACK: &str = "git-receive-pack";
const ADVERTISEMENT: &str = "application/x-git-receive-pack-advertisement";
const RESULT: &str = "application/x-git-receive-pack-result";

/// Where pushes go and with what.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// `http://host:port[/prefix]`: the forge's git base URL.
    pub upstream: String,
    /// Repository paths (`owner/repo.git`) this session may push to.
    pub repositories: Vec<String>,
    /// The `Authorization` value forwarded requests carry (without an app).
    pub authorization: Option<String>,
    /// Where the server keeps its mirrors, to tell force pushes apart.
    pub mirrors: Option<crate::mirror::Mirrors>,
    /// A CA file (PEM) trusted besides the system's roots for https.
    pub ca_file: Option<std::path::PathBuf>,
    /// With a GitHub App, each forwarded request gets a write token minted
    /// for it (no `workflows`), revoked once its answer has been streamed.
    pub app: Option<std::sync::Arc<crate::app::App>>,
    /// The repositories linked to a conversation's workspace, pushed to
    /// besides `repositories`.
    pub links: Option<std::sync::Arc<dyn Links>>,
}

/// The forge repositories (`owner/repo.git`) linked to a conversation's
/// workspace. Blocking (a database, files): called off the async threads.
pub trait Links: Send + Sync + std::fmt::Debug {
    fn linked(&self, conversation: &str) -> Vec<String>;
}

/// A minted write token, revoked when dropped (the forwarded answer done).
struct Minted {
    app: std::sync::Arc<crate::app::App>,
    token: String,
}

impl Drop for Minted {
    fn drop(&mut self) {
        let (app, token) = (
            std::sync::Arc::clone(&self.app),
            std::mem::take(&mut self.token),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = app.revoke(&token).await {
                    tracing::warn!("the push's write token: {e}");
                }
            });
        }
    }
}

/// A body that holds a minted token until it is done.
struct Holding {
    body: Incoming,
    _minted: Option<Minted>,
}

impl Body for Holding {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// One command's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Refuse(String),
}

/// Asks the server's policy about each command of a push, in order.
pub trait Judge: Send + Sync {
    /// `forced[i]`: command `i` is a non-fast-forward (found in the mirror).
    fn judge<'a>(
        &'a self,
        repository: &'a str,
        head: &'a PushHead,
        forced: &'a [bool],
    ) -> BoxFuture<'a, Vec<Verdict>>;

    /// Told of every ref refused, for the session's violation events.
    fn refused(&self, _repository: &str, _name: &str, _why: &str) {}

    /// The calling session's conversation, whose workspace's repositories
    /// are linked.
    fn conversation(&self) -> Option<&str> {
        None
    }
}

/// A configured gateway.
#[derive(Debug, Clone)]
pub struct Gateway {
    config: GatewayConfig,
    target: Target,
}

fn full(bytes: impl Into<Bytes>) -> GatewayBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

fn text(status: StatusCode, message: &str) -> Response<GatewayBody> {
    let mut resp = Response::new(full(format!("cc_server gateway: {message}\n")));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn typed(content_type: &'static str, body: Vec<u8>) -> Response<GatewayBody> {
    let mut resp = Response::new(full(body));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

impl Gateway {
    /// Checks the upstream URL (`http(s)://host[:port][/prefix]`) and
    /// makes its TLS client.
    pub fn new(config: GatewayConfig) -> Result<Self, String> {
        let target = Target::parse(&config.upstream, config.ca_file.as_deref())
            .map_err(|e| format!("upstream {e}"))?;
        Ok(Self { target, config })
    }

    fn listed(&self, repository: &str) -> bool {
        let bare = |r: &str| r.trim_matches('/').trim_end_matches(".git").to_owned();
        self.config
            .repositories
            .iter()
            .any(|r| bare(r) == bare(repository))
    }

    /// Whether pushes to `repository` may be forwarded: listed in the
    /// config, or linked to the calling conversation's workspace.
    async fn linked(&self, repository: &str, conversation: Option<&str>) -> bool {
        if self.listed(repository) {
            return true;
        }
        let (Some(links), Some(conversation)) = (&self.config.links, conversation) else {
            return false;
        };
        let (links, conversation) = (std::sync::Arc::clone(links), conversation.to_owned());
        let linked = tokio::task::spawn_blocking(move || links.linked(&conversation))
            .await
            .unwrap_or_default();
        let bare = |r: &str| r.trim_matches('/').trim_end_matches(".git").to_owned();
        linked.iter().any(|r| bare(r) == bare(repository))
    }

    /// Answers one request; `path` is what follows the gateway's mount
    /// (`owner/repo.git/info/refs`), the query the request's.
    pub async fn handle(
        &self,
        path: &str,
        request: Request<Incoming>,
        judge: &dyn Judge,
    ) -> Response<GatewayBody> {
        let query = request.uri().query().unwrap_or_default().to_owned();
        if let Some(repository) = path.strip_suffix("/info/refs") {
            if !query.split('&').any(|p| p == "service=git-receive-pack") {
                return text(
                    StatusCode::FORBIDDEN,
                    "the push gateway carries pushes only; fetches go to the forge directly",
                );
            }
            let linked = self.linked(repository, judge.conversation()).await;
            return self.discovery(repository, linked).await;
        }
        if let Some(repository) = path.strip_suffix("/git-receive-pack") {
            if request.method() != Method::POST {
                return text(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "git-receive-pack takes POST",
                );
            }
            return self.push(repository, request, judge).await;
        }
        text(
            StatusCode::FORBIDDEN,
            "the push gateway carries pushes only (info/refs?service=git-receive-pack, git-receive-pack)",
        )
    }

    /// The upstream's advertisement without `push-cert`; for a repository
    /// this session may not push to, an empty one of our own, so that the
    /// push arrives and is refused ref by ref in git's own words.
    async fn discovery(&self, repository: &str, linked: bool) -> Response<GatewayBody> {
        if !linked {
            return typed(ADVERTISEMENT, own_advertisement());
        }
        let url = format!(
            "{}/{repository}/info/refs?service={RECEIVE_PACK}",
            self.target.prefix
        );
        let mut request = Request::get(url);
        let (auth, _minted) = match self.credential(repository).await {
            Ok(pair) => pair,
            // The push comes and is refused per ref, naming why.
            Err(e) => {
                tracing::info!(%repository, "discovery without the upstream: {e}");
                return typed(ADVERTISEMENT, own_advertisement());
            }
        };
        if let Some(auth) = auth {
            request = request.header(header::AUTHORIZATION, auth);
        }
        let request = match request.body(full(Bytes::new())) {
            Ok(r) => r,
            Err(e) => return text(StatusCode::BAD_GATEWAY, &e.to_string()),
        };
        let response = match self.send(request).await {
            Ok(r) => r,
            Err(e) => return text(StatusCode::BAD_GATEWAY, &e),
        };
        if !response.status().is_success() {
            let status = response.status();
            return text(
                status,
                &format!("the upstream answered {status} to discovery"),
            );
        }
        let body = match Limited::new(response.into_body(), MAX_ADVERTISEMENT)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) => return text(StatusCode::BAD_GATEWAY, &format!("reading discovery: {e}")),
        };
        match without_push_cert(&body) {
            Ok(body) => typed(ADVERTISEMENT, body),
            Err(e) => text(
                StatusCode::BAD_GATEWAY,
                &format!("the upstream's advertisement: {e}"),
            ),
        }
    }

    async fn push(
        &self,
        repository: &str,
        request: Request<Incoming>,
        judge: &dyn Judge,
    ) -> Response<GatewayBody> {
        if request.headers().get(header::CONTENT_ENCODING).is_some() {
            return text(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "encoded push requests are not supported",
            );
        }
        let (parts, mut body) = request.into_parts();
        let mut buf = Vec::new();
        let head = loop {
            let frame = body.frame().await;
            let ended = frame.is_none();
            match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => {
                    return text(StatusCode::BAD_REQUEST, &format!("reading the push: {e}"));
                }
                None => {}
            }
            match receive::parse(&buf, ended) {
                Ok(Some(head)) => break head,
                Ok(None) => continue,
                Err(receive::HeadError::Empty) if ended && buf == pktline::FLUSH => {
                    return probe();
                }
                Err(receive::HeadError::Empty) if !ended && buf.len() <= pktline::FLUSH.len() => {
                    continue;
                }
                Err(e) => {
                    tracing::info!(%repository, "push refused: {e}");
                    return text(StatusCode::BAD_REQUEST, &e.to_string());
                }
            }
        };
        let linked = self.linked(repository, judge.conversation()).await;
        let mut spooled = None;
        let forced = match linked {
            true => {
                self.forced(repository, &head, &buf, &mut body, &mut spooled)
                    .await
            }
            false => Ok(vec![false; head.commands.len()]),
        };
        let verdicts = if let Err(e) = &forced {
            let why = format!("cc_server gateway: cannot tell a force push from an update: {e}");
            vec![Verdict::Refuse(why); head.commands.len()]
        } else if linked {
            let forced = forced.unwrap_or_default();
            judge.judge(repository, &head, &forced).await
        } else {
            let why = format!(
                "cc_server gateway: {repository} is not this session's repository nor linked to its workspace (register its checkout in the conversation's workspace, or add it to [gateway] repositories)"
            );
            vec![Verdict::Refuse(why); head.commands.len()]
        };
        if verdicts.iter().any(|v| *v != Verdict::Allow) || verdicts.len() != head.commands.len() {
            let decisions: Vec<Decision> = head
                .commands
                .iter()
                .enumerate()
                .map(|(i, _)| match verdicts.get(i) {
                    Some(Verdict::Allow) => Decision::NotForwarded,
                    Some(Verdict::Refuse(why)) => Decision::Refused(why.clone()),
                    None => Decision::Refused("cc_server gateway: no verdict".into()),
                })
                .collect();
            for (command, decision) in head.commands.iter().zip(&decisions) {
                if let Decision::Refused(why) = decision {
                    judge.refused(repository, &command.name, why);
                }
            }
            // The rest of the request is read and dropped before answering.
            while let Some(Ok(_)) = body.frame().await {}
            return match report::refusal(&head, &decisions) {
                Some(report) => typed(RESULT, report),
                None => text(
                    StatusCode::FORBIDDEN,
                    "push refused (the client asked for no report)",
                ),
            };
        }
        let url = format!("{}/{repository}/{RECEIVE_PACK}", self.target.prefix);
        let mut forward = Request::post(url);
        for name in [
            header::CONTENT_TYPE,
            header::ACCEPT,
            header::USER_AGENT,
            header::CONTENT_LENGTH,
        ] {
            if let Some(value) = parts.headers.get(&name) {
                forward = forward.header(name, value);
            }
        }
        if let Some(value) = parts.headers.get("git-protocol") {
            forward = forward.header("git-protocol", value);
        }
        let (auth, minted) = match self.credential(repository).await {
            Ok(pair) => pair,
            Err(e) => {
                let decisions =
                    vec![Decision::Refused(format!("cc_server gateway: {e}")); head.commands.len()];
                while let Some(Ok(_)) = body.frame().await {}
                return match report::refusal(&head, &decisions) {
                    Some(report) => typed(RESULT, report),
                    None => text(StatusCode::BAD_GATEWAY, &e),
                };
            }
        };
        if let Some(auth) = auth {
            forward = forward.header(header::AUTHORIZATION, auth);
        }
        let request_body = match spooled {
            Some(spool) => match spool.into_body() {
                Ok(b) => b,
                Err(e) => return text(StatusCode::BAD_GATEWAY, &e),
            },
            None => Prefixed {
                prefix: Some(Bytes::from(buf)),
                rest: body,
            }
            .boxed(),
        };
        let forward = match forward.body(request_body) {
            Ok(r) => r,
            Err(e) => return text(StatusCode::BAD_GATEWAY, &e.to_string()),
        };
        match self.send(forward).await {
            Ok(response) => response.map(|body| {
                Holding {
                    body,
                    _minted: minted,
                }
                .boxed()
            }),
            Err(e) => text(StatusCode::BAD_GATEWAY, &e),
        }
    }

    /// Which commands are non-fast-forwards. Only updates of existing refs
    /// can be, and only with mirrors: then the whole request is spooled
    /// (`spooled`; the verdict needs the pack), each update's ancestry read
    /// from the pack's commits, and the mirror fetched only for those the
    /// pack cannot tell.
    async fn forced(
        &self,
        repository: &str,
        head: &PushHead,
        read: &[u8],
        body: &mut Incoming,
        spooled: &mut Option<Spool>,
    ) -> Result<Vec<bool>, String> {
        let mut forced = vec![false; head.commands.len()];
        let updates: Vec<usize> = head
            .commands
            .iter()
            .enumerate()
            .filter(|(_, c)| c.kind() == crate::receive::UpdateKind::Update)
            .map(|(i, _)| i)
            .collect();
        let Some(mirrors) = self.config.mirrors.clone() else {
            return Ok(forced);
        };
        if updates.is_empty() {
            return Ok(forced);
        }
        let mut spool = Spool::new(&mirrors.dir.join("spool"))?;
        spool.take(read, body).await?;
        let has_pack = spool.len() > head.len as u64;
        let format = match head.has("object-format=sha256") {
            true => pack::Format::Sha256,
            false => pack::Format::Sha1,
        };
        let commits = match has_pack {
            true => {
                let reader = spool.reader_at(head.len as u64)?;
                let pairs: Vec<(String, String)> = updates
                    .iter()
                    .map(|&i| (head.commands[i].old.clone(), head.commands[i].new.clone()))
                    .collect();
                let enough = move |c: &pack::Commits| {
                    walkable(pairs.len(), c.len())
                        && pairs
                            .iter()
                            .all(|(old, new)| c.ancestry(old, new) == Ancestry::FastForward)
                };
                tokio::task::spawn_blocking(move || pack::commits(reader, format, enough))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?
            }
            false => pack::Commits::default(),
        };
        let mut unknown = Vec::new();
        for &i in &updates {
            let command = &head.commands[i];
            if !walkable(updates.len(), commits.len()) {
                unknown.push(i);
                continue;
            }
            match commits.ancestry(&command.old, &command.new) {
                Ancestry::FastForward => {}
                Ancestry::Forced => forced[i] = true,
                Ancestry::Unknown => unknown.push(i),
            }
        }
        tracing::debug!(%repository, commits = commits.len(), undecided = unknown.len(), "the pushed pack's ancestry");
        if !unknown.is_empty() {
            let pairs: Vec<(String, String)> = unknown
                .iter()
                .map(|&i| (head.commands[i].old.clone(), head.commands[i].new.clone()))
                .collect();
            let (mirror, repo) = (mirrors.clone(), repository.to_owned());
            let proven = tokio::task::spawn_blocking(move || mirror.proven(&repo, &pairs))
                .await
                .unwrap_or_default();
            let mut k = 0;
            unknown.retain(|_| {
                k += 1;
                proven.get(k - 1) != Some(&true)
            });
        }
        if !unknown.is_empty() {
            let (auth, minted) = self.credential(repository).await?;
            let url = format!(
                "{}/{repository}",
                self.config.upstream.trim_end_matches('/')
            );
            let pack = match has_pack {
                true => Some(std::process::Stdio::from(spool.reader_at(head.len as u64)?)),
                false => None,
            };
            let pairs: Vec<(String, String)> = unknown
                .iter()
                .map(|&i| (head.commands[i].old.clone(), head.commands[i].new.clone()))
                .collect();
            let ca = self.config.ca_file.clone();
            let repo = repository.to_owned();
            let found = tokio::task::spawn_blocking(move || {
                mirrors.forced(&repo, (&url, auth.as_deref(), ca.as_deref()), pack, &pairs)
            })
            .await
            .map_err(|e| e.to_string())??;
            drop(minted);
            for (&i, is_forced) in unknown.iter().zip(found) {
                forced[i] = is_forced;
            }
        }
        *spooled = Some(spool);
        Ok(forced)
    }

    /// The `Authorization` for a forwarded request: a write token minted
    /// for it (held until dropped), or the configured one.
    async fn credential(
        &self,
        repository: &str,
    ) -> Result<(Option<String>, Option<Minted>), String> {
        let Some(app) = &self.config.app else {
            return Ok((self.config.authorization.clone(), None));
        };
        let token = app
            .mint(&[repository.to_owned()], crate::app::WRITE_PERMISSIONS)
            .await
            .map_err(|e| format!("no write token for {repository}: {e}"))?;
        let basic = base64::engine::general_purpose::STANDARD
            .encode(format!("x-access-token:{}", token.token));
        let minted = Minted {
            app: std::sync::Arc::clone(app),
            token: token.token,
        };
        Ok((Some(format!("Basic {basic}")), Some(minted)))
    }

    async fn send(&self, mut request: Request<GatewayBody>) -> Result<Response<Incoming>, String> {
        let mut sender = self.target.connect().await?;
        let address = self.target.authority();
        let host = HeaderValue::from_str(&self.target.host).map_err(|e| e.to_string())?;
        request.headers_mut().insert(header::HOST, host);
        sender
            .send_request(request)
            .await
            .map_err(|e| format!("the upstream {address}: {e}"))
    }
}

/// Whether walking the pack's commits once per update stays cheap (each
/// walk may visit every commit): past this, the mirror decides.
fn walkable(updates: usize, commits: usize) -> bool {
    updates.saturating_mul(commits) <= 16 << 20
}

/// The answer to git's probe (a body of one flush, sent before a push
/// larger than `http.postBuffer` to see that the request is accepted), as
/// `git http-backend` gives it: an empty result. Nothing is forwarded and
/// nothing asked; the push itself follows.
fn probe() -> Response<GatewayBody> {
    typed(RESULT, Vec::new())
}

/// An advertisement with no refs and the capabilities the gateway answers
/// a refusal in.
fn own_advertisement() -> Vec<u8> {
    let mut out = pktline::encode(b"# service=git-receive-pack\n");
    out.extend_from_slice(pktline::FLUSH);
    let zero = "0".repeat(40);
    let line = format!(
        "{zero} capabilities^{{}}\0report-status report-status-v2 delete-refs side-band-64k quiet atomic ofs-delta agent=cc_server-gateway\n"
    );
    out.extend(pktline::encode(line.as_bytes()));
    out.extend_from_slice(pktline::FLUSH);
    out
}

/// The advertisement with `push-cert=…` left out of the capabilities.
pub fn without_push_cert(body: &[u8]) -> Result<Vec<u8>, pktline::PktError> {
    let mut out = Vec::with_capacity(body.len());
    let mut at = 0;
    let mut seen_caps = false;
    while let Some((pkt, next)) = pktline::read(body, at)? {
        match pkt {
            Pkt::Data(line) if !seen_caps && line.contains(&0) => {
                seen_caps = true;
                let nul = line.iter().position(|&b| b == 0).unwrap_or(line.len());
                let caps = String::from_utf8_lossy(&line[nul + 1..]);
                let kept: Vec<&str> = caps
                    .trim_end_matches('\n')
                    .split(' ')
                    .filter(|c| !c.starts_with("push-cert"))
                    .collect();
                let mut rewritten = line[..=nul].to_vec();
                rewritten.extend_from_slice(kept.join(" ").as_bytes());
                rewritten.push(b'\n');
                out.extend(pktline::encode(&rewritten));
            }
            _ => out.extend_from_slice(&body[at..next]),
        }
        at = next;
    }
    out.extend_from_slice(&body[at..]);
    Ok(out)
}

/// The bytes already read (the head), then the rest of the request.
struct Prefixed {
    prefix: Option<Bytes>,
    rest: Incoming,
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(prefix) = self.prefix.take()
            && !prefix.is_empty()
        {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.as_ref().is_none_or(Bytes::is_empty) && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let extra = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        let rest = self.rest.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + extra);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + extra);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_parse() {
        let g = |u: &str| {
            Gateway::new(GatewayConfig {
                upstream: u.into(),
                repositories: vec!["o/r.git".into()],
                authorization: None,
                ca_file: None,
                mirrors: None,
                app: None,
                links: None,
            })
        };
        let gw = g("http://127.0.0.1:8080/git/").unwrap();
        assert_eq!(
            (
                gw.target.host.as_str(),
                gw.target.port,
                gw.target.prefix.as_str()
            ),
            ("127.0.0.1", 8080, "/git")
        );
        assert!(gw.listed("o/r") && gw.listed("/o/r.git") && !gw.listed("o/other.git"));
        assert!(g("ftp://x").is_err());
        assert!(g("http://:80").is_err());
    }

    #[test]
    fn push_cert_is_dropped_from_the_advertisement() {
        let mut body = pktline::encode(b"# service=git-receive-pack\n");
        body.extend_from_slice(b"0000");
        let first = format!(
            "{} refs/heads/main\0report-status push-cert=abc atomic\n",
            "1".repeat(40)
        );
        body.extend(pktline::encode(first.as_bytes()));
        body.extend_from_slice(b"0000");
        let out = without_push_cert(&body).unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("\0report-status atomic\n"), "{text}");
        assert!(!text.contains("push-cert"));
    }
}
