//! Sessions: one sandbox each, from selection to teardown. The CLI's `run`
//! and the HTTP API both go through here, so every dispatch path gets the
//! same selection, the same checks and the same wrapping (SPEC B10).

mod binds;
pub mod budget;
mod plan;
pub(crate) mod router;

use std::any::{Any, TypeId};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sandbox_egress::server::ViolationSink;
use sandbox_plugin_api::host::{BackendObject, SandboxObject};
use sandbox_plugin_api::{
    ErrorCode, Event, ExecRequest, PluginError, PtySize, ResizeRequest, SandboxBackend,
    SandboxHandle, SandboxMode, SandboxSpec, SandboxState, SandboxViolation, calls, capability,
};
use sandbox_registry::Registry;
use sandbox_registry::select::{SelectError, Selection};

use self::budget::Charge;
use self::plan::new_session_id;
pub use self::plan::{EgressPlan, LaunchPlan, LaunchSettings, plan_launch};
use self::router::{Delivery, Router};
use crate::channel::{self, Channel};
use crate::command_policy::{CommandPolicy, Refusal, workdir};
use crate::egress::{EgressError, Reach, SessionEgress};
use crate::env;
use crate::layout::{self, LayoutRequest, Lease};

/// A conversation's lease and what the handle shows of its layout.
struct Held {
    lease: Box<dyn Lease>,
    details: serde_json::Map<String, serde_json::Value>,
}

/// Why a session operation failed. The API maps each to a status code;
/// the text a user sees is the message with its sources
/// ([`sandbox_plugin_api::error_chain`]).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Select(#[from] SelectError),
    #[error("internal error: selected backend `{0}` is not loaded")]
    NotLoaded(String),
    #[error("backend `{backend}` refused the sandbox")]
    Launch {
        backend: String,
        #[source]
        error: PluginError,
    },
    #[error("backend `{backend}` cannot {what}; it does not list the `{capability}` capability")]
    Unsupported {
        backend: String,
        what: &'static str,
        capability: &'static str,
    },
    #[error("{0}")]
    PolicyUnenforceable(String),
    #[error("{0}")]
    Refused(Box<Refusal>),
    #[error("the sandbox spec: {message}")]
    InvalidSpec {
        /// The spec field to blame.
        field: &'static str,
        message: String,
    },
    #[error("invalid session id `{0}`: use 1 to 128 letters, digits, `.`, `_` or `-`")]
    BadId(String),
    #[error(transparent)]
    Env(#[from] env::EnvError),
    #[error("a session `{0}` already exists")]
    Conflict(String),
    #[error("no session `{0}`")]
    NotFound(String),
    #[error("session `{0}` was destroyed")]
    Destroyed(String),
    #[error("the command could not be started")]
    Exec(#[source] PluginError),
    #[error(transparent)]
    Backend(PluginError),
    #[error("internal error")]
    Egress(#[source] EgressError),
    #[error("internal error: cannot read /dev/urandom")]
    Random(#[source] std::io::Error),
    #[error("internal error: a backend call did not complete")]
    Join(#[source] tokio::task::JoinError),
    #[error("internal error: {0}")]
    Internal(String),
    /// The workspaces layer could not resolve a conversation's binds or
    /// the registered checkouts (SPEC H1, H10, H11).
    #[error(transparent)]
    Layout(crate::layout::LayoutError),
}

impl From<layout::FormError> for SessionError {
    fn from(e: layout::FormError) -> Self {
        Self::InvalidSpec {
            field: e.field,
            message: e.message,
        }
    }
}

impl From<EgressError> for SessionError {
    fn from(e: EgressError) -> Self {
        Self::Egress(e)
    }
}

/// Holds a session id from the plan's run until the session is live; if the
/// launch fails on the way, dropping it frees the id and stops the proxies
/// started for it (no failure path undoes by hand).
struct Reservation<'a> {
    sessions: &'a Sessions,
    id: String,
    egress: Option<SessionEgress>,
    filled: bool,
}

impl Reservation<'_> {
    /// The launch succeeded: the id now names the live session.
    fn fill(mut self, session: Arc<Session>) {
        self.filled = true;
        self.sessions
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.id.clone(), Slot::Live(session));
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.filled {
            return;
        }
        self.sessions
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
        // Dropping the proxies ends their tasks and removes their sockets.
        drop(self.egress.take());
    }
}

/// Violations the session's proxies report, onto its running execs' streams.
fn violation_sink(router: Arc<Router>) -> ViolationSink {
    Arc::new(move |v: sandbox_egress::Violation| {
        router.broadcast(SandboxViolation {
            action: sandbox_plugin_api::violation::NETWORK_OUTBOUND.into(),
            target: v.refusal.target.clone(),
            raw: Some(format!(
                "{} ({}): {}",
                v.refusal.tag, v.ingress, v.refusal.rule
            )),
        });
    })
}

enum Slot {
    Launching,
    Live(Arc<Session>),
}

/// Every live session of this server.
pub struct Sessions {
    registry: Arc<Registry>,
    settings: LaunchSettings,
    channel: Arc<Channel>,
    slots: Mutex<HashMap<String, Slot>>,
}

impl Sessions {
    pub fn new(registry: Arc<Registry>, settings: LaunchSettings) -> Self {
        Self {
            registry,
            settings,
            channel: Arc::new(Channel::new()),
            slots: Mutex::new(HashMap::new()),
        }
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The command policy every exec of these sessions passes.
    pub fn commands(&self) -> &Arc<CommandPolicy> {
        &self.settings.commands
    }

    /// The server channel's handlers: what commands inside every session
    /// can call (see [`crate::channel`]).
    pub fn channel(&self) -> &Arc<Channel> {
        &self.channel
    }

    /// The backend a session would get (SPEC B5–B9).
    pub fn select(&self, explicit: Option<&str>) -> Result<Selection, SelectError> {
        self.settings.select(explicit, &self.registry.offers())
    }

    /// Selects a backend and launches a sandbox in it: the plan first
    /// (every decision, no I/O), then the run, whose [`Reservation`] undoes
    /// whatever was started if any step fails.
    pub async fn create(
        &self,
        mut spec: SandboxSpec,
        explicit: Option<&str>,
    ) -> Result<Arc<Session>, SessionError> {
        let held = self.resolve_layout(&mut spec).await?;
        let offers = self.registry.offers();
        let facts = binds::gather(&spec, &self.settings.paths);
        let plan = plan_launch(
            spec,
            explicit,
            &self.settings,
            &offers,
            &facts,
            new_session_id,
        )?;
        self.run_plan(plan, held).await
    }

    /// The workspaces layer's part of a launch, resolved now (SPEC H1,
    /// H10, H11): every registered checkout joins `protectedPaths`; a spec
    /// for a conversation gets its agent's binds and holds the
    /// conversation until the session is destroyed.
    async fn resolve_layout(&self, spec: &mut SandboxSpec) -> Result<Option<Held>, SessionError> {
        if spec.conversation_id.is_some() {
            layout::check_dispatch_form(spec).map_err(SessionError::from)?;
        }
        let Some(layer) = self.settings.workspaces.clone() else {
            if spec.conversation_id.is_some() {
                return Err(SessionError::InvalidSpec {
                    field: "conversationId",
                    message: "this server keeps no workspaces (no state directory: set \
                              `[workspaces] state_dir` or HOME)"
                        .into(),
                });
            }
            return Ok(None);
        };
        let asked = Arc::clone(&layer.0);
        let checkouts = blocking(move || asked.registered_checkouts())
            .await?
            .map_err(SessionError::Layout)?;
        for checkout in checkouts {
            if !spec.protected_paths.contains(&checkout) {
                spec.protected_paths.push(checkout);
            }
        }
        let Some(conversation) = spec.conversation_id.clone() else {
            return Ok(None);
        };
        if spec.session_id.is_empty() {
            spec.session_id = new_session_id()?;
        }
        let request = LayoutRequest {
            conversation,
            agent: spec.agent_id.clone().unwrap_or_default(),
            session: spec.session_id.clone(),
        };
        let leased = blocking(move || layer.0.lease(&request))
            .await?
            .map_err(SessionError::Layout)?;
        let details = leased.layout.details.clone();
        let resolved = layout::apply_layout(std::mem::take(spec), leased.layout);
        *spec = resolved.map_err(SessionError::from)?;
        Ok(Some(Held {
            lease: leased.lease,
            details,
        }))
    }

    async fn run_plan(
        &self,
        plan: LaunchPlan,
        held: Option<Held>,
    ) -> Result<Arc<Session>, SessionError> {
        let LaunchPlan {
            selection,
            mut spec,
            network_rule,
            network_turned_off,
            egress: egress_plan,
            bind_notices,
        } = plan;
        let entry = self
            .registry
            .get(&selection.backend)
            .ok_or_else(|| SessionError::NotLoaded(selection.backend.clone()))?;
        if let (Some(rule), true) = (&network_rule, network_turned_off) {
            tracing::info!("network off for this sandbox: {rule}");
        }
        for notice in &bind_notices {
            tracing::info!("{notice}");
        }
        let id = spec.session_id.clone();
        let (mode, network_enabled) = (spec.mode, spec.network_enabled);
        // What the sandbox was launched with, for the in-server file tools
        // (the same binds, globs and protected paths; SPEC H2).
        let launched = spec.clone();
        let agent_credential = crate::random::hex(32).map_err(SessionError::Random)?;
        let (binds, workdir) = (spec.bind_mounts.clone(), spec.guest_workdir.clone());
        let mut reservation = self.reserve(&id)?;
        let router = Arc::new(self.router_for(&id));
        // SPEC E1: this session's own proxies, before the sandbox exists.
        let mut proxy_env = Vec::new();
        let (service, live) = self.channel.service(&id, &selection.backend, &spec);
        let local = sandbox_egress::local::Local {
            service: Some(service),
            refused: self.channel.refused_egress(),
        };
        if let Some(program) = channel::client_program(&selection.backend) {
            let program = program.to_string_lossy().into_owned();
            proxy_env.push((channel::CALL_VARIABLE.to_owned(), program));
        }
        if egress_plan.is_some() {
            proxy_env.extend(self.channel.command_env());
        }
        if let Some(egress_plan) = egress_plan {
            let (policy, unix) = match egress_plan {
                EgressPlan::Unix(policy) => (policy, true),
                EgressPlan::Tcp(policy) => (policy, false),
            };
            for warning in policy.warnings() {
                tracing::warn!(session = %id, "egress: {warning}");
            }
            let sink = violation_sink(Arc::clone(&router));
            let cap = self.settings.egress.max_connections;
            let (proxies, reach) = if unix {
                let known_hosts = &self.settings.egress.ssh_known_hosts;
                SessionEgress::start(policy, known_hosts, cap, sink, local).await?
            } else {
                SessionEgress::start_tcp(policy, cap, sink, local).await?
            };
            match reach {
                Reach::Endpoints(endpoints) => spec.egress = Some(endpoints),
                Reach::Env(env) => proxy_env.extend(env),
            }
            reservation.egress = Some(proxies);
        }
        let backend = entry.backend.clone();
        let launch_router = Arc::clone(&router);
        let sandbox = blocking(move || backend.launch(&spec, launch_router))
            .await?
            .map_err(|error| SessionError::Launch {
                backend: selection.backend.clone(),
                error,
            })?;
        let session = Arc::new(Session {
            id: id.clone(),
            backend: entry.backend.clone(),
            kind: entry.report.kind,
            note: entry.report.note.clone(),
            kernel_boundary: entry.report.kernel_boundary,
            capabilities: entry.report.capabilities.clone(),
            selection,
            sandbox,
            router,
            mode,
            binds,
            workdir,
            network_enabled,
            network_rule,
            egress: tokio::sync::Mutex::new(reservation.egress.take()),
            proxy_env,
            commands: Arc::clone(&self.settings.commands),
            after_destroy: self.settings.after_destroy,
            running: AtomicUsize::new(0),
            fate: Mutex::new(Fate::Live),
            layout_details: held.as_ref().map(|h| h.details.clone()).unwrap_or_default(),
            lease: Mutex::new(held.map(|h| h.lease)),
            launched,
            agent_credential,
            channel: Arc::clone(&self.channel),
            front_end_state: Mutex::new(HashMap::new()),
        });
        // The channel's calls from now on know their session.
        let _ = live.set(Arc::downgrade(&session));
        reservation.fill(Arc::clone(&session));
        tracing::info!(session = %session.id, backend = session.backend_name(), "sandbox launched");
        Ok(session)
    }

    /// Holds `id` while the session launches.
    fn reserve(&self, id: &str) -> Result<Reservation<'_>, SessionError> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.contains_key(id) {
            return Err(SessionError::Conflict(id.to_owned()));
        }
        slots.insert(id.to_owned(), Slot::Launching);
        Ok(Reservation {
            sessions: self,
            id: id.to_owned(),
            egress: None,
            filled: false,
        })
    }

    pub fn get(&self, id: &str) -> Result<Arc<Session>, SessionError> {
        match self.slots.lock().unwrap_or_else(|p| p.into_inner()).get(id) {
            Some(Slot::Live(session)) => Ok(Arc::clone(session)),
            _ => Err(SessionError::NotFound(id.to_owned())),
        }
    }

    /// The live session whose agent credential is `given` (SPEC H4, H12).
    /// Compared in constant time; a destroyed session's credential opens
    /// nothing, since it is no longer among the live ones.
    pub fn by_agent_credential(&self, given: &str) -> Option<Arc<Session>> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let mut found = None;
        for slot in slots.values() {
            if let Slot::Live(session) = slot
                && same_secret(&session.agent_credential, given)
            {
                found = Some(Arc::clone(session));
            }
        }
        found
    }

    pub fn list(&self) -> Vec<Arc<Session>> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let mut sessions: Vec<Arc<Session>> = slots
            .values()
            .filter_map(|slot| match slot {
                Slot::Live(s) => Some(Arc::clone(s)),
                Slot::Launching => None,
            })
            .collect();
        sessions.sort_by(|a, b| a.id.cmp(&b.id));
        sessions
    }

    /// Destroys a session and forgets it.
    pub async fn destroy(&self, id: &str) -> Result<SandboxHandle, SessionError> {
        let session = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            match slots.remove(id) {
                Some(Slot::Live(session)) => session,
                Some(Slot::Launching) => {
                    slots.insert(id.to_owned(), Slot::Launching);
                    return Err(SessionError::NotFound(id.to_owned()));
                }
                None => return Err(SessionError::NotFound(id.to_owned())),
            }
        };
        session.destroy().await;
        Ok(session.handle())
    }

    /// Destroys every session (server shutdown).
    pub async fn destroy_all(&self) {
        let ids: Vec<String> = self.list().iter().map(|s| s.id.clone()).collect();
        for id in ids {
            let _ = self.destroy(&id).await;
        }
    }
}

#[derive(Debug, Clone)]
enum Fate {
    Live,
    Destroyed,
    Failed(String),
}

/// One sandbox and what the host knows about it.
pub struct Session {
    pub id: String,
    backend: BackendObject,
    kind: SandboxBackend,
    note: String,
    kernel_boundary: bool,
    capabilities: Vec<String>,
    /// Why this backend (for notices).
    pub selection: Selection,
    sandbox: SandboxObject,
    router: Arc<Router>,
    /// The spec's mode: which command policy applies (SPEC H3).
    mode: SandboxMode,
    /// The spec's binds and working directory: where a command runs on the
    /// host, for the classifier's [`sandbox_policy::Workdir`].
    binds: Vec<sandbox_plugin_api::SandboxBindMount>,
    workdir: Option<std::path::PathBuf>,
    /// The network setting the backend was given (SPEC E5).
    network_enabled: bool,
    /// The rule that turned the network off, if one did (SPEC E5).
    network_rule: Option<String>,
    /// The session's egress proxies.
    egress: tokio::sync::Mutex<Option<SessionEgress>>,
    /// Variables every command gets: the proxy's (backends without
    /// `net.proxy-only`; those set their own), and the server channel's
    /// client program (`CC_SERVER_CALL`).
    proxy_env: Vec<(String, String)>,
    commands: Arc<CommandPolicy>,
    /// The front-end's hook after a destroy ([`LaunchSettings::after_destroy`]).
    after_destroy: Option<fn()>,
    running: AtomicUsize,
    fate: Mutex<Fate>,
    /// What the handle shows of a conversation's layout (SPEC H10).
    layout_details: serde_json::Map<String, serde_json::Value>,
    /// The conversation this session holds, let go at destroy.
    lease: Mutex<Option<Box<dyn Lease>>>,
    /// The spec the backend was given (binds checked, the dispatch
    /// policy's globs and the protected paths added).
    launched: SandboxSpec,
    /// Opens this sandbox's exec, stdin and file tools and nothing else:
    /// minted at launch, gone with the session (SPEC H4, H12).
    agent_credential: String,
    /// The server channel, whose end hooks run at destroy.
    channel: Arc<Channel>,
    /// What front-ends keep per sandbox (the file tools' jail), dropped
    /// with the session: one value per type.
    front_end_state: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl Session {
    /// The spec the sandbox was launched with, as the backend got it: the
    /// in-server file tools judge by the same binds, globs and protected
    /// paths (SPEC H2).
    pub fn launched_spec(&self) -> &SandboxSpec {
        &self.launched
    }

    /// The command policy this sandbox's commands pass, whose approver
    /// also answers the file tools' prompts (SPEC H4).
    pub fn commands(&self) -> &Arc<CommandPolicy> {
        &self.commands
    }

    /// The sandbox's mode (SPEC H3).
    pub fn mode(&self) -> SandboxMode {
        self.mode
    }

    /// The credential an agent holds for this sandbox alone: its exec,
    /// stdin and file tools, never the owner's routes (SPEC H4, H12).
    pub fn agent_credential(&self) -> &str {
        &self.agent_credential
    }

    /// The value of type `T` a front-end keeps for this sandbox, made by
    /// `make` the first time (and again after `make` failed). Dropped with
    /// the session.
    pub fn front_end_state<T, E>(&self, make: impl FnOnce() -> Result<T, E>) -> Result<Arc<T>, E>
    where
        T: Any + Send + Sync,
    {
        let mut state = self
            .front_end_state
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(value) = state.get(&TypeId::of::<T>())
            && let Ok(value) = Arc::clone(value).downcast::<T>()
        {
            return Ok(value);
        }
        let value = Arc::new(make()?);
        state.insert(
            TypeId::of::<T>(),
            Arc::clone(&value) as Arc<dyn Any + Send + Sync>,
        );
        Ok(value)
    }

    /// Reports a refusal a layer in the server made for this sandbox (the
    /// push gateway's) on its running commands' streams, as the proxies'
    /// refusals are.
    pub fn report_violation(&self, violation: SandboxViolation) {
        self.router.broadcast(violation);
    }

    /// Whether the sandbox is still live (not destroyed, not failed).
    pub fn is_live(&self) -> bool {
        self.check_live().is_ok()
    }

    pub fn backend_name(&self) -> &str {
        self.backend.name()
    }

    /// Whether the backend listed this capability in its probe.
    pub fn supports(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }

    /// What the client is told (SPEC F8): the backend really running (B8).
    pub fn handle(&self) -> SandboxHandle {
        let fate = self.fate.lock().map(|f| f.clone()).unwrap_or(Fate::Live);
        let (state, error, details) = match fate {
            Fate::Destroyed => (SandboxState::Destroyed, None, serde_json::Map::new()),
            Fate::Failed(e) => (SandboxState::Error, Some(e), serde_json::Map::new()),
            Fate::Live => {
                let mut info = self.sandbox.info();
                info.details
                    .insert("runningExecs".into(), self.running().into());
                info.details
                    .insert("mode".into(), self.mode.as_str().into());
                info.details
                    .insert("networkEnabled".into(), self.network_enabled.into());
                info.details
                    .insert("network".into(), self.network_mode().into());
                info.details.insert(
                    "commandPolicy".into(),
                    if self.commands.enforce { "on" } else { "off" }.into(),
                );
                if let Some(rule) = &self.network_rule {
                    info.details
                        .insert("networkOffBy".into(), rule.clone().into());
                }
                for (key, value) in &self.layout_details {
                    info.details.insert(key.clone(), value.clone());
                }
                info.details.extend(self.channel.handle_details());
                (info.state, info.error, info.details)
            }
        };
        SandboxHandle {
            session_id: self.id.clone(),
            backend: self.kind,
            backend_name: self.backend.name().to_owned(),
            note: self.note.clone(),
            kernel_boundary: self.kernel_boundary,
            state,
            error,
            details,
        }
    }

    /// Its egress: `open` (SPEC D2), `allowlist` or `off`.
    pub fn network_mode(&self) -> &'static str {
        plan::network_mode(&self.launched)
    }

    fn check_capabilities(&self, request: &ExecRequest) -> Result<(), SessionError> {
        let needs = [
            (request.stdin, capability::STDIN, "feed stdin"),
            (
                request.pty.is_some(),
                capability::PTY,
                "give a command a terminal",
            ),
            (
                request.timeout_ms.is_some(),
                capability::EXEC_TIMEOUT,
                "enforce a timeout",
            ),
            (
                request.host_fds.is_some(),
                capability::HOST_FDS,
                "copy a command's stdin and stdout from and to the host's descriptors",
            ),
        ];
        for (needed, capability, what) in needs {
            if needed && !self.supports(capability) {
                return Err(SessionError::Unsupported {
                    backend: self.backend.name().to_owned(),
                    what,
                    capability,
                });
            }
        }
        Ok(())
    }

    fn check_live(&self) -> Result<(), SessionError> {
        match *self.fate.lock().unwrap_or_else(|p| p.into_inner()) {
            Fate::Live => Ok(()),
            _ => Err(SessionError::Destroyed(self.id.clone())),
        }
    }

    /// Starts a command; its events arrive on the returned stream. Dropping
    /// the stream before the command ends kills the command.
    ///
    /// This is the one dispatch path (SPEC B10): every entry point that runs
    /// a command calls it, and it applies the command policy (H3, H4, H6)
    /// and the environment sanitization (H5) before the backend sees
    /// anything. The backend's own `exec` is reachable from nowhere else.
    pub async fn exec(self: &Arc<Self>, request: ExecRequest) -> Result<ExecStream, SessionError> {
        self.exec_as(request, false).await
    }

    /// [`Session::exec`] of a shell the owner asked for in an authenticated
    /// request of their own (a terminal, `cc_server shell`): the same
    /// policy and sanitization, with that request as the answer to a
    /// prompt on the shell's start (a deny stays a deny). What is typed
    /// into it is the person's own.
    pub async fn exec_interactive(
        self: &Arc<Self>,
        request: ExecRequest,
    ) -> Result<ExecStream, SessionError> {
        self.exec_as(request, true).await
    }

    async fn exec_as(
        self: &Arc<Self>,
        mut request: ExecRequest,
        owner_asked: bool,
    ) -> Result<ExecStream, SessionError> {
        self.check_live()?;
        self.check_capabilities(&request)?;
        // Before the policy asks anyone: a name that would be misread is
        // refused, never passed on (SPEC H5, T11).
        env::check(&request.env)?;
        let place = request
            .cwd
            .as_ref()
            .or(self.workdir.as_ref())
            .and_then(|cwd| workdir::plan_host_dir(&self.binds, cwd));
        // On `none` the policy is the only barrier (docs/threat-model.md T12).
        let barrier = match self.kind {
            SandboxBackend::None => sandbox_policy::Barrier::PolicyOnly,
            SandboxBackend::Native | SandboxBackend::Microvm => sandbox_policy::Barrier::Sandbox,
        };
        let verdict = self
            .commands
            .admit_as(
                &self.id,
                self.mode,
                &request.argv,
                place,
                barrier,
                owner_asked,
            )
            .await
            .map_err(|refusal| {
                tracing::info!(session = %self.id, "{refusal}");
                SessionError::Refused(Box::new(refusal))
            })?;
        let removed = env::prepare(&mut request.env);
        for (name, value) in &self.proxy_env {
            match name.strip_prefix(channel::STRIP) {
                Some(strip) => drop(request.env.remove(strip)),
                None => drop(request.env.insert(name.clone(), value.clone())),
            }
        }
        if !removed.is_empty() {
            tracing::info!(session = %self.id, "removed from the command's environment: {}", removed.join(", "));
        }
        // An owner's answer may have taken a while.
        self.check_live()?;
        let sandbox = self.sandbox.clone();
        let asked = std::time::Instant::now();
        let exec_id = blocking(move || sandbox.exec(&request))
            .await?
            .map_err(|e| match e.code {
                ErrorCode::DESTROYED => SessionError::Destroyed(self.id.clone()),
                _ => SessionError::Exec(e),
            })?;
        let subscription = self.router.subscribe(exec_id, asked);
        self.running.fetch_add(1, Ordering::SeqCst);
        Ok(ExecStream {
            exec_id,
            verdict,
            early: subscription.early.into(),
            live: subscription.live,
            guard: ExecGuard {
                session: Arc::clone(self),
                exec_id,
                state: Progress::Running,
            },
        })
    }

    /// Writes to a running command's stdin.
    pub async fn write_stdin(&self, exec_id: u64, data: Vec<u8>) -> Result<(), SessionError> {
        let sandbox = self.sandbox.clone();
        blocking(move || sandbox.write_stdin(exec_id, &data))
            .await?
            .map_err(SessionError::Backend)
    }

    /// Closes a running command's stdin.
    pub async fn close_stdin(&self, exec_id: u64) -> Result<(), SessionError> {
        let sandbox = self.sandbox.clone();
        blocking(move || sandbox.close_stdin(exec_id))
            .await?
            .map_err(SessionError::Backend)
    }

    /// Gives a running command's terminal a new size.
    pub async fn resize(&self, exec_id: u64, size: PtySize) -> Result<(), SessionError> {
        if !self.supports(capability::PTY) {
            return Err(SessionError::Unsupported {
                backend: self.backend.name().to_owned(),
                what: "resize a command's terminal",
                capability: capability::PTY,
            });
        }
        let request = ResizeRequest {
            exec_id,
            cols: size.cols,
            rows: size.rows,
        };
        let json = serde_json::to_string(&request).unwrap_or_default();
        let sandbox = self.sandbox.clone();
        blocking(move || sandbox.call(calls::RESIZE, &json))
            .await?
            .map(drop)
            .map_err(SessionError::Backend)
    }

    /// Signals a running command.
    pub async fn kill(&self, exec_id: u64, signal: i32) -> Result<(), SessionError> {
        let sandbox = self.sandbox.clone();
        blocking(move || sandbox.kill(exec_id, signal))
            .await?
            .map_err(SessionError::Backend)
    }

    /// Pauses every process of the sandbox (SPEC G3).
    pub async fn suspend(&self) -> Result<(), SessionError> {
        if !self.supports(capability::SUSPEND) {
            return Err(SessionError::Unsupported {
                backend: self.backend.name().to_owned(),
                what: "suspend a sandbox",
                capability: capability::SUSPEND,
            });
        }
        let sandbox = self.sandbox.clone();
        blocking(move || sandbox.suspend())
            .await?
            .map_err(SessionError::Backend)
    }

    /// Continues a suspended sandbox.
    pub async fn resume(&self) -> Result<(), SessionError> {
        let sandbox = self.sandbox.clone();
        blocking(move || sandbox.resume())
            .await?
            .map_err(SessionError::Backend)
    }

    /// Ends the sandbox; idempotent. The session is destroyed afterwards
    /// even if the backend reported a failure (then with that error).
    pub async fn destroy(&self) {
        // Output still arriving no longer waits for the server-wide budget:
        // the backend's destroy waits for deliveries under way.
        self.router.ending();
        let sandbox = self.sandbox.clone();
        let destroyed = blocking(move || sandbox.destroy());
        // No tunnel outlives the sandbox: the proxies stop while its
        // processes are killed, and both are done before we go on (one
        // after the other made every `run` slower; docs/measurements.md).
        let proxies_stopped = async {
            if let Some(mut egress) = self.egress.lock().await.take() {
                egress.shutdown().await;
            }
        };
        let (result, ()) = tokio::join!(destroyed, proxies_stopped);
        self.router.close();
        // What front-ends kept (a jail's open roots) goes with the sandbox.
        self.front_end_state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        let fate = match result {
            Ok(Ok(())) => Fate::Destroyed,
            Ok(Err(e)) => Fate::Failed(format!("destroy failed: {e}")),
            Err(e) => Fate::Failed(sandbox_plugin_api::error_chain(&e)),
        };
        if let Fate::Failed(e) = &fate {
            tracing::error!(session = %self.id, "{e}");
        }
        *self.fate.lock().unwrap_or_else(|p| p.into_inner()) = fate;
        tracing::info!(session = %self.id, "sandbox destroyed");
        // The conversation is free to be removed once nothing runs in it.
        let lease = self.lease.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(lease) = lease {
            let _ = blocking(move || drop(lease)).await;
        }
        // What the channel's handlers minted for it (forge tokens) is revoked.
        self.channel.session_ended(&self.id).await;
        // The binary gives what the streams and threads used back to the
        // system here, not only to malloc's free lists.
        if let Some(after) = self.after_destroy {
            let _ = blocking(after).await;
        }
    }

    /// How many commands are running.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }
}

/// A command's events, in order, ending with `exit` or `killed`.
pub struct ExecStream {
    pub exec_id: u64,
    /// The policy's verdict that let the command run (`None`: policy off).
    pub verdict: Option<sandbox_policy::Verdict>,
    early: VecDeque<Delivery>,
    live: tokio::sync::mpsc::Receiver<Delivery>,
    guard: ExecGuard,
}

impl ExecStream {
    /// The next event; `None` after the last one, or if the sandbox went away
    /// without ending the command (then [`ExecStream::ended`] is false).
    pub async fn next(&mut self) -> Option<Event> {
        self.next_charged().await.map(|(event, _)| event)
    }

    /// [`ExecStream::next`], with the share of the server's output budget
    /// the event's bytes hold: keep it until they are written out (the
    /// API's body does), so the budget counts what waits for a slow client.
    pub async fn next_charged(&mut self) -> Option<(Event, Option<Charge>)> {
        if self.guard.state != Progress::Running {
            return None;
        }
        let delivery = match self.early.pop_front() {
            Some(delivery) => Some(delivery),
            None => self.live.recv().await,
        };
        match &delivery {
            Some(d) if d.event.body.is_terminal() => self.guard.settle(Progress::Ended),
            None => self.guard.settle(Progress::Lost),
            Some(_) => {}
        }
        delivery.map(|d| (d.event, d.charge))
    }

    /// Whether the command's last event arrived.
    pub fn ended(&self) -> bool {
        self.guard.state == Progress::Ended
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    Running,
    /// The last event arrived.
    Ended,
    /// The sandbox stopped sending without ending the command (destroyed).
    Lost,
}

/// Kills the command if its stream is dropped before the command ended: a
/// client that goes away leaves nothing running.
struct ExecGuard {
    session: Arc<Session>,
    exec_id: u64,
    state: Progress,
}

impl ExecGuard {
    fn settle(&mut self, state: Progress) {
        if self.state == Progress::Running {
            self.session.running.fetch_sub(1, Ordering::SeqCst);
            self.state = state;
        }
    }
}

impl Drop for ExecGuard {
    fn drop(&mut self) {
        if self.state != Progress::Running {
            return;
        }
        self.settle(Progress::Lost);
        self.session.router.unsubscribe(self.exec_id);
        let (session, exec_id) = (Arc::clone(&self.session), self.exec_id);
        let kill = move || {
            if session.sandbox.kill(exec_id, libc::SIGKILL).is_ok() {
                tracing::info!(session = %session.id, exec = exec_id, "killed a command whose stream was dropped");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(kill)),
            Err(_) => kill(),
        }
    }
}

/// Runs plugin code on a blocking thread (it may block, and may emit events
/// synchronously into channels that must not be fed from async tasks).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SessionError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(SessionError::Join)
}

/// Whether two secrets are equal, in time independent of where they differ.
fn same_secret(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::plan::valid_id;
    use super::*;

    #[test]
    fn session_ids_are_path_and_url_safe() {
        for good in ["s-1", "abc", "A.b_c-9", &"x".repeat(128)] {
            assert!(valid_id(good), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "ü", &"x".repeat(129), "a%2f"] {
            assert!(!valid_id(bad), "{bad}");
        }
        assert!(valid_id(&new_session_id().unwrap()));
        assert_ne!(new_session_id().unwrap(), new_session_id().unwrap());
    }
}
