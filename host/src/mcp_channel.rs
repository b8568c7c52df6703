//! cc_server's agent tools for a command inside a sandbox, over the
//! sandbox's own server channel (SPEC H2, B10): `http://cc-server.internal/mcp/`
//! through the session's HTTP proxy, which answers it in-process. The
//! caller is the session whose proxy carried the request — the same
//! identity an agent credential gives on the API's `/mcp`, but one no
//! command can present for another sandbox — so the tools act on that
//! sandbox alone, with its roots and its approver.

use std::sync::Arc;

use http_body_util::BodyExt as _;
use hyper::StatusCode;
use sandbox_egress::local;
use sandbox_mcp::CallerSandbox;
use sandbox_runtime::channel::HttpHandler;
use sandbox_runtime::sessions::Sessions;

/// Where the tools are mounted on the channel.
pub const PREFIX: &str = "/mcp/";

/// The URL a command inside uses (through its `http_proxy`).
pub const URL: &str = "http://cc-server.internal/mcp/";

/// Mounts the agent tools on every session's channel of `sessions`.
pub fn mount(sessions: &Sessions) -> anyhow::Result<()> {
    let service = Arc::new(sandbox_mcp::http::http_service(sandbox_mcp::plain_roots()));
    let handler: HttpHandler = Arc::new(move |caller, mut request| {
        let service = Arc::clone(&service);
        Box::pin(async move {
            let Some(session) = caller.session() else {
                return local::text(StatusCode::GONE, "the sandbox is not live");
            };
            request.extensions_mut().insert(CallerSandbox(session));
            service
                .handle(request)
                .await
                .map(|body| body.map_err(|never| match never {}).boxed())
        })
    });
    sessions.channel().mount(PREFIX, handler)?;
    Ok(())
}
