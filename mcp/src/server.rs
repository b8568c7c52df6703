//! The MCP server: the tools, each registered with `#[tool(name = "…")]`
//! (the entry-point scan lists them: `mcp tool exec`, …), listed and called
//! per the mode of the sandbox the call acts on (SPEC H3), and two
//! read-only resources, the sandbox's handle and its recent events.
//!
//! Which sandbox a call acts on: over stdio the one `cc_server mcp` made
//! ([`AgentTools::for_session`]); over HTTP the one whose agent credential
//! the request carried — the API checks it and puts a [`CallerSandbox`]
//! into the request before rmcp sees it ([`AgentTools::per_request`]).
//! Every call is stateless: nothing but the sandbox links two calls.

use std::sync::{Arc, OnceLock};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, tool, tool_router};
use sandbox_runtime::Session;

use crate::args::*;
use crate::effects::{Effect, judge, resolve, settle};
use crate::events::Recorder;
use crate::failure::ToolError;
use crate::files::{SessionFiles, blocking, edit, patch, read, search};
use crate::{RootsOf, surface};

/// The sandbox an HTTP call acts on: the one its agent credential opens.
#[derive(Clone)]
pub struct CallerSandbox(pub Arc<Session>);

/// The agent tools of one transport.
#[derive(Clone)]
pub struct AgentTools {
    roots_of: RootsOf,
    /// Over stdio: the one sandbox of this process.
    fixed: Option<Arc<Session>>,
}

/// The tool routers, built once: every tool, and the read-only modes' set.
struct Routers {
    all: ToolRouter<AgentTools>,
    reading: ToolRouter<AgentTools>,
}

fn routers() -> &'static Routers {
    static ROUTERS: OnceLock<Routers> = OnceLock::new();
    ROUTERS.get_or_init(|| {
        let all = AgentTools::tool_router();
        let mut reading = AgentTools::tool_router();
        for tool in surface::MUTATING {
            reading.remove_route(tool);
        }
        Routers { all, reading }
    })
}

const HANDLE_URI: &str = "sandbox://handle";
const EVENTS_URI: &str = "sandbox://events";

impl AgentTools {
    /// The tools of one sandbox (stdio: `cc_server mcp`).
    pub fn for_session(session: Arc<Session>, roots_of: RootsOf) -> Self {
        Self {
            roots_of,
            fixed: Some(session),
        }
    }

    /// Tools that act on the sandbox each request names (HTTP).
    pub fn per_request(roots_of: RootsOf) -> Self {
        Self {
            roots_of,
            fixed: None,
        }
    }

    fn session(&self, context: &RequestContext<RoleServer>) -> Result<Arc<Session>, McpError> {
        let session = match &self.fixed {
            Some(session) => Arc::clone(session),
            None => context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<CallerSandbox>())
                .map(|caller| Arc::clone(&caller.0))
                .ok_or_else(|| {
                    McpError::invalid_request(
                        "no sandbox: send the sandbox's agent credential as `Authorization: \
                         Bearer …`",
                        None,
                    )
                })?,
        };
        if !session.is_live() {
            return Err(McpError::invalid_request(
                format!("the sandbox {} was destroyed", session.id),
                None,
            ));
        }
        Ok(session)
    }

    async fn files(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<(Arc<Session>, Arc<SessionFiles>), CallToolResult> {
        let session = self
            .session(context)
            .map_err(|e| CallToolResult::from(ToolError::failed(e.message.to_string())))?;
        let roots_of = Arc::clone(&self.roots_of);
        let for_files = Arc::clone(&session);
        let files = blocking(move || SessionFiles::of(&for_files, &roots_of)).await?;
        Ok((session, files))
    }
}

fn out<T>(result: Result<T, ToolError>) -> Result<Json<T>, CallToolResult> {
    result.map(Json).map_err(Into::into)
}

#[tool_router]
impl AgentTools {
    #[tool(
        name = "exec",
        description = "Run a command in the sandbox (argv, not a shell line: use [\"sh\", \"-c\", \
                       \"…\"] for one). The command policy of the sandbox's mode decides first; \
                       output streams as progress notifications; the result has the exit code, \
                       stdout, stderr and any violation the sandbox refused. Cancelling the call \
                       kills the command."
    )]
    async fn exec(
        &self,
        Parameters(args): Parameters<ExecArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<ExecOutput>, CallToolResult> {
        let session = self
            .session(&context)
            .map_err(|e| CallToolResult::from(ToolError::failed(e.message.to_string())))?;
        let recorder = Recorder::of(&session);
        out(crate::exec::exec(&session, args, &context, &recorder).await)
    }

    #[tool(
        name = "read",
        description = "Read a file: text by lines (offset: the first line, from 1; limit: lines, \
                       default 2000), or base64 by bytes for a file that is not UTF-8 text. A \
                       large file comes in pages: read again from next_offset.",
        annotations(read_only_hint = true)
    )]
    async fn read(
        &self,
        Parameters(args): Parameters<ReadArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<ReadOutput>, CallToolResult> {
        let (_, files) = self.files(&context).await?;
        out(blocking(move || read::read(&files, args)).await)
    }

    #[tool(
        name = "write",
        description = "Create a file or replace its whole content (parent directories are made). \
                       Refused, naming the rule, where the sandbox's own rules refuse it: \
                       secrets (.env, *.pem, *.key), shell rc files, git hooks, tool and agent \
                       config, protected paths."
    )]
    async fn write(
        &self,
        Parameters(args): Parameters<WriteArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<WriteOutput>, CallToolResult> {
        let (session, files) = self.files(&context).await?;
        let plan_files = Arc::clone(&files);
        let (planned, effect) = blocking(move || {
            let planned = edit::plan_write(&plan_files, &args)?;
            let effect = judge(&plan_files, &planned.located, &planned.path, false);
            Ok((planned, effect))
        })
        .await?;
        let guardrail = guard(&session, "write", vec![effect]).await?;
        let (path, bytes, created) = (
            planned.located.guest.display().to_string(),
            planned.content.len() as u64,
            !planned.exists,
        );
        blocking(move || edit::commit(&files, &planned)).await?;
        Ok(Json(WriteOutput {
            path,
            bytes,
            created,
            guardrail,
        }))
    }

    #[tool(
        name = "edit",
        description = "Replace an exact string in a text file: old_string must occur exactly once \
                       (the count is given when it does not), or every occurrence with \
                       replace_all."
    )]
    async fn edit(
        &self,
        Parameters(args): Parameters<EditArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<EditOutput>, CallToolResult> {
        let (session, files) = self.files(&context).await?;
        let plan_files = Arc::clone(&files);
        let (planned, effect) = blocking(move || {
            let planned = edit::plan_edit(&plan_files, &args)?;
            let effect = judge(&plan_files, &planned.located, &planned.path, false);
            Ok((planned, effect))
        })
        .await?;
        let guardrail = guard(&session, "edit", vec![effect]).await?;
        let (path, replacements) = (
            planned.located.guest.display().to_string(),
            planned.replacements,
        );
        blocking(move || edit::commit(&files, &planned)).await?;
        Ok(Json(EditOutput {
            path,
            replacements,
            guardrail,
        }))
    }

    #[tool(
        name = "apply_patch",
        description = "Apply a patch that adds, updates (with @@ hunks of context, - and + \
                       lines), moves or deletes files, between *** Begin Patch and *** End \
                       Patch. All or nothing: if any hunk does not fit or any file is refused, \
                       no file changes."
    )]
    async fn apply_patch(
        &self,
        Parameters(args): Parameters<ApplyPatchArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<ApplyPatchOutput>, CallToolResult> {
        let ops = patch::parse(&args.patch).map_err(|e| {
            CallToolResult::from(ToolError::failed(format!("apply_patch: {}", e.0)))
        })?;
        let (session, files) = self.files(&context).await?;
        let plan_files = Arc::clone(&files);
        let (changes, effects) = blocking(move || {
            let changes = patch::plan(&plan_files, &ops)?;
            let effects: Vec<Effect> = changes
                .iter()
                .map(|c| judge(&plan_files, &c.located, &c.path, c.after.is_none()))
                .collect();
            Ok((changes, effects))
        })
        .await?;
        let guardrail = guard(&session, "apply_patch", effects).await?;
        let report = patched(&changes);
        blocking(move || patch::commit(&files, &changes)).await?;
        Ok(Json(ApplyPatchOutput {
            files: report,
            guardrail,
        }))
    }

    #[tool(
        name = "search",
        description = "Search file contents for a regex (ripgrep's engine) beneath a directory: \
                       matching lines with path and line number. Follows .gitignore and skips \
                       hidden files unless asked.",
        annotations(read_only_hint = true)
    )]
    async fn search(
        &self,
        Parameters(args): Parameters<SearchArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<SearchOutput>, CallToolResult> {
        let (_, files) = self.files(&context).await?;
        out(blocking(move || search::search(&files, &args)).await)
    }

    #[tool(
        name = "search_files",
        description = "Which files contain a regex, and how many matching lines each — like \
                       search, without the lines (ripgrep's -c).",
        annotations(read_only_hint = true)
    )]
    async fn search_files(
        &self,
        Parameters(args): Parameters<SearchFilesArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<SearchFilesOutput>, CallToolResult> {
        let (_, files) = self.files(&context).await?;
        out(blocking(move || search::search_files(&files, &args)).await)
    }

    #[tool(
        name = "find",
        description = "Find files and directories by a glob over their path (**/*.rs, \
                       Cargo.toml); contents are not read.",
        annotations(read_only_hint = true)
    )]
    async fn find(
        &self,
        Parameters(args): Parameters<FindArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<Json<FindOutput>, CallToolResult> {
        let (_, files) = self.files(&context).await?;
        out(blocking(move || search::find(&files, &args)).await)
    }
}

/// Resolves a call's effects and asks when it must; the refusal as a result.
async fn guard(
    session: &Arc<Session>,
    tool: &str,
    effects: Vec<Effect>,
) -> Result<GuardrailOut, CallToolResult> {
    let resolution = resolve(effects, session.mode(), &session.commands().guardrails);
    let recorder = Recorder::of(session);
    match settle(session, tool, resolution).await {
        Ok(guardrail) => Ok(guardrail),
        Err(refusal) => {
            recorder.record(serde_json::json!({
                "type": "refused", "tool": tool, "rule": refusal.rule, "path": refusal.path,
            }));
            Err(refusal.into())
        }
    }
}

fn patched(changes: &[patch::Change]) -> Vec<PatchedFile> {
    changes
        .iter()
        .filter(|change| !change.move_target)
        .map(|change| {
            let action = match (&change.before, &change.after, &change.moved_to) {
                (_, _, Some(_)) => "update",
                (None, Some(_), _) => "add",
                (Some(_), Some(_), _) => "update",
                _ => "delete",
            };
            PatchedFile {
                path: change.located.guest.display().to_string(),
                action: action.into(),
                moved_to: change.moved_to.clone(),
            }
        })
        .collect()
}

impl ServerHandler for AgentTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_instructions(
            "cc_server's agent tools: every path is the sandbox's own, resolved beneath its \
             binds; commands run in the sandbox under its command policy.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let session = self.session(&context)?;
        let router = match session.mode().is_read_only() {
            true => &routers().reading,
            false => &routers().all,
        };
        Ok(ListToolsResult::with_all_items(router.list_all()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let session = self.session(&context)?;
        let router = match session.mode().is_read_only() {
            true => &routers().reading,
            false => &routers().all,
        };
        router
            .call(ToolCallContext::new(self, request, context))
            .await
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        routers().all.get(name).cloned()
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.session(&context)?;
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new(HANDLE_URI, "handle")
                .with_description("The sandbox's handle: backend, state, mode, details")
                .with_mime_type("application/json"),
            Resource::new(EVENTS_URI, "events")
                .with_description(
                    "What the tools' commands did: starts, exits, kills, violations, refusals",
                )
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let session = self.session(&context)?;
        let body = match request.uri.as_str() {
            HANDLE_URI => serde_json::to_string(&session.handle()),
            EVENTS_URI => serde_json::to_string(&Recorder::of(&session).snapshot()),
            other => {
                return Err(McpError::resource_not_found(
                    format!("no resource {other}: there are {HANDLE_URI} and {EVENTS_URI}"),
                    None,
                ));
            }
        }
        .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(ReadResourceResult::new(vec![ResourceContents::text(body, request.uri)]).into())
    }
}
