//! The streamable HTTP transport, for the API to mount at `/mcp`: every
//! call stateless (SPEC 2026-07-28 has no sessions; older protocol versions
//! are served the same way), answered as JSON unless the tool streams
//! progress (then as server-sent events). rmcp's own Host check is off:
//! the API's Host and Origin rules run before any route, `/mcp` included,
//! with the operator's `[api] allowed_hosts` and `allowed_origins`.

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::{AgentTools, RootsOf};

/// The service the API hands `/mcp` requests to.
pub type HttpService = StreamableHttpService<AgentTools, LocalSessionManager>;

pub fn http_service(roots_of: RootsOf) -> HttpService {
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    StreamableHttpService::new(
        move || Ok(AgentTools::per_request(Arc::clone(&roots_of))),
        Arc::default(),
        config,
    )
}
