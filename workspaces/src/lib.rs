//! Conversation workspaces (SPEC H1, H10, H11): the layer that keeps an
//! agent away from *your* working checkout.
//!
//! A **workspace** names registered repositories (your checkouts), an
//! optional attachments directory, and which secret files its clones may
//! carry. A **conversation** of a workspace gets its own copy-on-write
//! clone of every registered repository in `<data>/conversations/<id>/repos/`
//! — working tree and `.git`, by reflink, never a byte copy
//! ([`provision`]). Each **agent** of a conversation gets a workdir of its
//! own and a config dir; the agents of one conversation share its
//! `repos/`, and no conversation sees another's. A sandbox for a
//! conversation and an agent is bound exactly those directories, resolved
//! at launch ([`Workspaces::lease`] behind the runtime's
//! [`WorkspaceLayer`]); every registered checkout is a protected path of
//! every sandbox. `conversation export` brings a conversation's commits
//! back as a branch of the registered checkout ([`export`]), with a git
//! that reads nothing the agent wrote but objects and refs.
//!
//! State survives a restart in SQLite ([`store`]). Every file operation on
//! a checkout or a clone goes through `sandbox_paths::jail`.

pub mod dirs;
pub mod error;
pub mod export;
pub mod fsinfo;
pub mod git;
pub mod owner;
pub mod provision;
pub mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandbox_paths::jail::{CloneSource, Jail, JailConfig, JailPath, RootConfig};
use sandbox_paths::write_deny::{GlobSet, SECRET_GLOBS};
use sandbox_plugin_api::SandboxBindMount;
use sandbox_runtime::layout::{Layout, LayoutError, LayoutRequest, Lease, Leased, WorkspaceLayer};

pub use crate::dirs::DataDir;
pub use crate::error::WorkspaceError;
use crate::provision::{Chooser, Progress, REPO};
pub use crate::store::{Conversation, ConversationRepo, Repository, Store, Workspace};

/// The label of the data directory's root in the server's jail.
pub(crate) const DATA: &str = "data";

/// What the layer is opened with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub state_dir: PathBuf,
    pub data_dir: PathBuf,
    /// `$HOME`: its secrets are never read.
    pub home: Option<PathBuf>,
    /// The dispatch policy's globs; those naming secrets keep files out of
    /// clones unless a workspace lists them.
    pub write_deny_globs: Vec<String>,
}

/// A new workspace, as a front-end asks for it.
#[derive(Debug, Clone, Default)]
pub struct NewWorkspace {
    pub name: String,
    /// `(name, path)`: a name of `None` is the checkout's directory name.
    pub repositories: Vec<(Option<String>, PathBuf)>,
    pub attachments: Option<PathBuf>,
    pub include_secrets: Vec<String>,
}

/// The workspaces layer, open.
pub struct Workspaces {
    store: Store,
    pub(crate) settings: Settings,
    data: DataDir,
}

impl std::fmt::Debug for Workspaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspaces")
            .field("store", &self.store)
            .field("data", &self.data)
            .finish()
    }
}

impl Workspaces {
    /// Opens the database (making it when `create`; else `Ok(None)` when it
    /// was never made) and the data directory (made 0700), then removes
    /// what a killed process left half made or half removed.
    pub fn open(settings: Settings, create: bool) -> Result<Option<Self>, WorkspaceError> {
        let Some(store) = Store::open(&settings.state_dir, create)? else {
            return Ok(None);
        };
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(settings.data_dir.join("conversations"))
            .map_err(|source| WorkspaceError::Io {
                what: format!(
                    "making the data directory {} (`{}`)",
                    settings.data_dir.display(),
                    dirs::DATA_DIR_KEY
                ),
                source,
            })?;
        let data = DataDir {
            root: std::fs::canonicalize(&settings.data_dir)
                .unwrap_or_else(|_| settings.data_dir.clone()),
        };
        let layer = Self {
            store,
            settings,
            data,
        };
        layer.sweep()?;
        Ok(Some(layer))
    }

    /// The database.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The data directory (canonical).
    pub fn data_dir(&self) -> &Path {
        &self.data.root
    }

    /// A jail over the data directory with no create-time globs: the
    /// server's own tree, which no sandbox sees whole. Registered checkouts
    /// are protected in it all the same.
    pub(crate) fn data_jail(&self) -> Result<Jail, WorkspaceError> {
        let protected = self.store.registered_paths()?;
        let config = JailConfig {
            roots: vec![RootConfig::writable(DATA, &self.data.root)],
            globs: Vec::new(),
            home: self.settings.home.clone(),
            protected,
        };
        Jail::new(config).map_err(|e| {
            WorkspaceError::jail(
                format!("opening the data directory {}", self.data.root.display()),
                e,
            )
        })
    }

    /// Under the database's write lock, takes over what gone processes
    /// left being made or removed, and removes those directories and any
    /// conversation directory no row names.
    fn sweep(&self) -> Result<(), WorkspaceError> {
        let (claimed, all) = self.store.claim_leftovers(&owner::me(), &owner::is_gone)?;
        let on_disk: Vec<String> = std::fs::read_dir(self.data.conversations())
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let orphans: Vec<&String> = on_disk
            .iter()
            .filter(|name| dirs::valid_name(name) && !all.contains(name))
            .collect();
        if claimed.is_empty() && orphans.is_empty() {
            return Ok(());
        }
        let jail = self.data_jail()?;
        for id in claimed.iter().chain(orphans) {
            tracing::info!(conversation = %id, "removing what a killed process left half made");
            let rel = DataDir::conversation_rel(id);
            match jail.remove_all(&JailPath::in_root(DATA, &rel)) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => {
                    return Err(WorkspaceError::jail(
                        format!("removing the leftover conversation {id}"),
                        e,
                    ));
                }
            }
        }
        for id in &claimed {
            self.store.forget_conversation(id)?;
        }
        Ok(())
    }

    /// Registers a workspace. Each repository must be a git checkout,
    /// outside the data and state directories and not holding them.
    pub fn add_workspace(&self, new: &NewWorkspace) -> Result<Workspace, WorkspaceError> {
        if !dirs::valid_name(&new.name) {
            return Err(WorkspaceError::invalid(
                "name",
                format!(
                    "the workspace name {:?} is not 1 to 64 letters, digits, `.`, `_` or `-` (not starting with `.`)",
                    new.name
                ),
            ));
        }
        let mut repositories: Vec<Repository> = Vec::new();
        for (name, path) in &new.repositories {
            let path = self.own_dir(path, "repositories")?;
            if !path.join(".git").is_dir() {
                return Err(WorkspaceError::invalid(
                    "repositories",
                    format!(
                        "{} is not a git checkout (no .git directory)",
                        path.display()
                    ),
                ));
            }
            let name = match name {
                Some(n) => n.clone(),
                None => path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("repo")
                    .to_owned(),
            };
            if !dirs::valid_name(&name) || repositories.iter().any(|r| r.name == name) {
                return Err(WorkspaceError::invalid(
                    "repositories",
                    format!(
                        "the repository name {name:?} is not a valid name, or given twice; name it (`NAME=PATH`)"
                    ),
                ));
            }
            repositories.push(Repository { name, path });
        }
        let attachments = match &new.attachments {
            Some(dir) => Some(self.own_dir(dir, "attachments")?),
            None => None,
        };
        GlobSet::parse(&new.include_secrets)
            .map_err(|e| WorkspaceError::invalid("includeSecrets", e.to_string()))?;
        let ws = Workspace {
            name: new.name.clone(),
            repositories,
            attachments,
            include_secrets: new.include_secrets.clone(),
            created_at: 0,
        };
        if !self.store.add_workspace(&ws)? {
            return Err(WorkspaceError::Conflict(format!(
                "a workspace `{}` exists already",
                ws.name
            )));
        }
        self.store
            .workspace(&ws.name)?
            .ok_or_else(|| WorkspaceError::NotFound(format!("no workspace `{}`", ws.name)))
    }

    /// A directory a workspace names: absolute, existing, canonical, and
    /// clear of the server's own directories.
    fn own_dir(&self, path: &Path, field: &'static str) -> Result<PathBuf, WorkspaceError> {
        let canonical = std::fs::canonicalize(path)
            .map_err(|e| WorkspaceError::invalid(field, format!("{}: {e}", path.display())))?;
        if !canonical.is_dir() || canonical.parent().is_none() {
            return Err(WorkspaceError::invalid(
                field,
                format!("{} is not a directory below /", canonical.display()),
            ));
        }
        let state = std::fs::canonicalize(&self.settings.state_dir)
            .unwrap_or_else(|_| self.settings.state_dir.clone());
        for (dir, what, key) in [
            (&self.data.root, "data directory", dirs::DATA_DIR_KEY),
            (&state, "state directory", dirs::STATE_DIR_KEY),
        ] {
            if canonical.starts_with(dir) || dir.starts_with(&canonical) {
                return Err(WorkspaceError::invalid(
                    field,
                    format!(
                        "{} is, holds or lies in the server's {what} {} (`{key}`): choose a directory apart from it",
                        canonical.display(),
                        dir.display()
                    ),
                ));
            }
        }
        Ok(canonical)
    }

    /// Removes a workspace with no conversations.
    pub fn remove_workspace(&self, name: &str) -> Result<(), WorkspaceError> {
        match self.store.remove_workspace(name)? {
            Ok(true) => Ok(()),
            Ok(false) => Err(WorkspaceError::NotFound(format!("no workspace `{name}`"))),
            Err(users) => Err(WorkspaceError::Conflict(format!(
                "the workspace `{name}` has conversations ({}): remove them first (`cc_server conversation remove ID`)",
                users.join(", ")
            ))),
        }
    }

    /// Makes a conversation of a workspace: a reflink clone of each
    /// registered repository, and the agents named. Everything is checked
    /// before anything is made; a half-made conversation is removed.
    pub fn new_conversation(
        &self,
        workspace: &str,
        agents: &[String],
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Conversation, WorkspaceError> {
        let ws = self
            .store
            .workspace(workspace)?
            .ok_or_else(|| WorkspaceError::NotFound(format!("no workspace `{workspace}`")))?;
        for agent in agents {
            check_agent_name(agent)?;
        }
        let id = format!(
            "c-{}",
            sandbox_runtime::random::hex(6).map_err(|source| WorkspaceError::Io {
                what: "reading /dev/urandom".into(),
                source
            })?
        );
        let data = self.data_jail()?;
        let conversations = JailPath::in_root(DATA, "conversations");
        let mut sources = Vec::new();
        let mut entries = 0;
        for repo in &ws.repositories {
            let jail = provision::source_jail(&repo.path, self.settings.home.clone())?;
            let survey = provision::survey(&jail, &repo.path)?;
            provision::check_reflink(
                &data,
                &conversations,
                &jail,
                &survey,
                &repo.path,
                &self.data.root,
            )?;
            entries += survey.entries;
            sources.push((repo, jail, survey));
        }
        provision::check_space(&self.data.root, entries)?;
        let secrets = self.secret_globs()?;
        let included = GlobSet::parse(&ws.include_secrets)
            .map_err(|e| WorkspaceError::invalid("includeSecrets", e.to_string()))?;
        self.store.begin_conversation(&id, &ws.name, &owner::me())?;
        let mut half = HalfMade {
            layer: self,
            jail: &data,
            id: id.clone(),
            done: false,
        };
        let conversation = JailPath::in_root(DATA, DataDir::conversation_rel(&id));
        mkdir(&data, &conversation)?;
        mkdir(
            &data,
            &JailPath::in_root(DATA, DataDir::conversation_rel(&id).join("agents")),
        )?;
        let mut made = Vec::new();
        if !sources.is_empty() {
            mkdir(&data, &JailPath::in_root(DATA, DataDir::repos_rel(&id)))?;
        }
        for (repo, jail, survey) in &sources {
            let chooser = Chooser {
                secrets: &secrets,
                included: &included,
                drop: &survey.drop,
            };
            let root = JailPath::in_root(REPO, ".");
            let source = CloneSource {
                jail,
                path: &root,
                several_names: true,
            };
            let to = JailPath::in_root(DATA, DataDir::repos_rel(&id).join(&repo.name));
            let total = survey.files;
            let mut tell = |r: &sandbox_paths::jail::CloneReport| {
                if r.files.is_multiple_of(256) || r.files == total {
                    progress(&Progress {
                        repository: repo.name.clone(),
                        files_done: r.files,
                        files_total: total,
                        bytes_done: r.bytes,
                    });
                }
            };
            let report = data
                .clone_tree(&source, &to, &mut |e| chooser.choose(e), &mut tell)
                .map_err(|e| {
                    WorkspaceError::jail(
                        format!("cloning {} into the conversation {id}", repo.path.display()),
                        e,
                    )
                })?;
            progress(&Progress {
                repository: repo.name.clone(),
                files_done: report.files,
                files_total: total,
                bytes_done: report.bytes,
            });
            made.push(ConversationRepo {
                name: repo.name.clone(),
                source: repo.path.clone(),
                skipped: report
                    .skipped
                    .iter()
                    .map(|(p, why)| format!("{}: {why}", p.display()))
                    .collect(),
            });
        }
        self.store.finish_conversation(&id, &made)?;
        half.done = true;
        for agent in agents {
            self.add_agent(&id, agent)?;
        }
        self.store
            .conversation(&id)?
            .ok_or_else(|| WorkspaceError::NotFound(format!("no conversation `{id}`")))
    }

    /// The dispatch policy's globs that name secrets.
    fn secret_globs(&self) -> Result<GlobSet, WorkspaceError> {
        let globs: Vec<&String> = self
            .settings
            .write_deny_globs
            .iter()
            .filter(|g| SECRET_GLOBS.contains(&g.as_str()))
            .collect();
        GlobSet::parse(&globs).map_err(|e| WorkspaceError::invalid("writeDenyGlobs", e.to_string()))
    }

    /// Adds an agent: its workdir (empty; the commands' default working
    /// directory) and its config dir, which holds `agent.json` — written by
    /// the server, here, once: who the agent is and where its directories
    /// are; the owner may add files on the host; inside it is read-only.
    pub fn add_agent(&self, conversation: &str, agent: &str) -> Result<(), WorkspaceError> {
        check_agent_name(agent)?;
        let conv = self.conversation(conversation)?;
        if conv.agents.iter().any(|a| a == agent) {
            return Err(WorkspaceError::Conflict(format!(
                "the conversation `{conversation}` has an agent `{agent}` already"
            )));
        }
        let data = self.data_jail()?;
        let rel = DataDir::agent_rel(conversation, agent);
        let dir = JailPath::in_root(DATA, &rel);
        match data.mkdir(&dir) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => {
                return Err(WorkspaceError::jail(
                    format!("making the agent {agent}'s directory"),
                    e,
                ));
            }
        }
        for sub in ["work", "config"] {
            let p = JailPath::in_root(DATA, rel.join(sub));
            match data.mkdir(&p) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => {
                    return Err(WorkspaceError::jail(
                        format!("making the agent {agent}'s {sub} directory"),
                        e,
                    ));
                }
            }
        }
        let about = serde_json::json!({
            "conversation": conversation,
            "agent": agent,
            "workspace": conv.workspace,
            "workdir": self.data.abs(&rel.join("work")),
            "repos": self.data.abs(&DataDir::repos_rel(conversation)),
        });
        data.write(
            &JailPath::in_root(DATA, rel.join("config/agent.json")),
            format!("{about:#}\n").as_bytes(),
        )
        .map_err(|e| WorkspaceError::jail(format!("writing the agent {agent}'s agent.json"), e))?;
        match self.store.add_agent(conversation, agent)? {
            Ok(_) => Ok(()),
            Err(None) => Err(WorkspaceError::NotFound(format!(
                "no conversation `{conversation}`"
            ))),
            Err(Some(state)) => Err(WorkspaceError::Conflict(format!(
                "the conversation `{conversation}` is {state}"
            ))),
        }
    }

    /// Removes an agent and its directories, unless a sandbox uses it.
    pub fn remove_agent(&self, conversation: &str, agent: &str) -> Result<(), WorkspaceError> {
        match self
            .store
            .remove_agent(conversation, agent, &owner::is_gone)?
        {
            Ok(true) => {}
            Ok(false) => {
                return Err(WorkspaceError::NotFound(format!(
                    "no agent `{agent}` in `{conversation}`"
                )));
            }
            Err(sessions) => {
                return Err(WorkspaceError::Conflict(format!(
                    "the agent `{agent}` is in use by sandbox {}: destroy it first",
                    sessions.join(", ")
                )));
            }
        }
        let data = self.data_jail()?;
        match data.remove_all(&JailPath::in_root(
            DATA,
            DataDir::agent_rel(conversation, agent),
        )) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(WorkspaceError::jail(
                format!("removing the agent {agent}'s directories"),
                e,
            )),
        }
    }

    /// One conversation.
    pub fn conversation(&self, id: &str) -> Result<Conversation, WorkspaceError> {
        self.store
            .conversation(id)?
            .ok_or_else(|| WorkspaceError::NotFound(format!("no conversation `{id}`")))
    }

    /// Removes a conversation: refused while a sandbox uses it, and while
    /// a clone has commits the registered checkout lacks, unless `force`.
    pub fn remove_conversation(&self, id: &str, force: bool) -> Result<(), WorkspaceError> {
        let conv = self.conversation(id)?;
        if !force {
            let unexported = export::unexported(self, &conv)?;
            if !unexported.is_empty() {
                return Err(WorkspaceError::Conflict(format!(
                    "the conversation `{id}` has commits not exported ({}): export them \
                     (`cc_server conversation export {id} --branch NAME`), or remove with --force",
                    unexported.join(", ")
                )));
            }
        }
        match self
            .store
            .begin_removal(id, &owner::me(), &owner::is_gone)?
        {
            Ok(true) => {}
            Ok(false) => return Err(WorkspaceError::NotFound(format!("no conversation `{id}`"))),
            Err(sessions) => {
                return Err(WorkspaceError::Conflict(format!(
                    "the conversation `{id}` is in use by sandbox {}: destroy it first",
                    sessions.join(", ")
                )));
            }
        }
        let data = self.data_jail()?;
        match data.remove_all(&JailPath::in_root(DATA, DataDir::conversation_rel(id))) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => {
                return Err(WorkspaceError::jail(
                    format!("removing the conversation {id}"),
                    e,
                ));
            }
        }
        self.store.forget_conversation(id)?;
        Ok(())
    }

    /// The binds of one agent of one conversation, resolved now, and a
    /// lease on the conversation for `session` (SPEC H10).
    pub fn lease_layout(
        self: &Arc<Self>,
        request: &LayoutRequest,
    ) -> Result<Leased, WorkspaceError> {
        let conv = self.conversation(&request.conversation)?;
        let id = &conv.id;
        let ws = self.store.workspace(&conv.workspace)?;
        match self
            .store
            .take_lease(id, &request.agent, &request.session, &owner::me())?
        {
            Ok(lease) => {
                let layout = self.layout(&conv, &request.agent, ws.as_ref())?;
                Ok(Leased {
                    layout,
                    lease: Box::new(HeldLease {
                        layer: Arc::clone(self),
                        id: lease,
                    }),
                })
            }
            Err(None) => Err(WorkspaceError::NotFound(format!("no conversation `{id}`"))),
            Err(Some(state)) if state == "agent" => Err(WorkspaceError::Invalid {
                field: Some("agentId"),
                message: format!(
                    "the conversation `{id}` has no agent `{}` (it has: {}); add it first",
                    request.agent,
                    conv.agents.join(", ")
                ),
            }),
            Err(Some(state)) => Err(WorkspaceError::Conflict(format!(
                "the conversation `{id}` is {state}"
            ))),
        }
    }

    fn layout(
        &self,
        conv: &Conversation,
        agent: &str,
        ws: Option<&Workspace>,
    ) -> Result<Layout, WorkspaceError> {
        let agent_dir = self.data.abs(&DataDir::agent_rel(&conv.id, agent));
        let workdir = agent_dir.join("work");
        let config = agent_dir.join("config");
        for dir in [&workdir, &config] {
            if !dir.is_dir() {
                return Err(WorkspaceError::Conflict(format!(
                    "the agent `{agent}`'s directory {} is missing: remove the agent and add it again",
                    dir.display()
                )));
            }
        }
        let bind = |path: &Path, read_only| SandboxBindMount {
            host_path: path.to_path_buf(),
            guest_path: None,
            read_only,
        };
        let mut binds = vec![bind(&workdir, false), bind(&config, true)];
        let mut exec_grants = vec![workdir.clone()];
        let repos = self.data.abs(&DataDir::repos_rel(&conv.id));
        if repos.is_dir() {
            binds.push(bind(&repos, false));
            exec_grants.push(repos);
        }
        if let Some(attachments) = ws
            .and_then(|w| w.attachments.as_ref())
            .filter(|a| a.is_dir())
        {
            binds.push(bind(attachments, true));
        }
        let mut details = serde_json::Map::new();
        details.insert("conversation".into(), conv.id.clone().into());
        details.insert("agent".into(), agent.into());
        details.insert(
            "binds".into(),
            serde_json::to_value(&binds).unwrap_or_default(),
        );
        Ok(Layout {
            workspace: conv.workspace.clone(),
            binds,
            workdir,
            exec_grants,
            details,
        })
    }

    /// Every registered checkout that exists now; a vanished one is
    /// logged and left out (SPEC H11).
    pub fn existing_checkouts(&self) -> Result<Vec<PathBuf>, WorkspaceError> {
        let mut out = Vec::new();
        for path in self.store.registered_paths()? {
            if path.is_dir() {
                out.push(path);
            } else {
                tracing::warn!(
                    "the registered checkout {} has vanished; it is no protected path until it is back",
                    path.display()
                );
            }
        }
        Ok(out)
    }

    /// The registered checkout at or above `dir`, if any.
    pub fn checkout_holding(&self, dir: &Path) -> Result<Option<PathBuf>, WorkspaceError> {
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        Ok(self
            .store
            .registered_paths()?
            .into_iter()
            .find(|p| dir.starts_with(p)))
    }
}

fn check_agent_name(agent: &str) -> Result<(), WorkspaceError> {
    if dirs::valid_name(agent) {
        Ok(())
    } else {
        Err(WorkspaceError::invalid(
            "agentId",
            format!("the agent name {agent:?} is not 1 to 64 letters, digits, `.`, `_` or `-`"),
        ))
    }
}

fn mkdir(jail: &Jail, p: &JailPath) -> Result<(), WorkspaceError> {
    jail.mkdir(p)
        .map_err(|e| WorkspaceError::jail("making a conversation's directory", e))
}

/// A conversation being made: removed, row and directory, unless done.
struct HalfMade<'a> {
    layer: &'a Workspaces,
    jail: &'a Jail,
    id: String,
    done: bool,
}

impl Drop for HalfMade<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let rel = DataDir::conversation_rel(&self.id);
        match self.jail.remove_all(&JailPath::in_root(DATA, &rel)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => {
                tracing::error!(conversation = %self.id, "removing the half-made conversation: {e}");
                return;
            }
        }
        if let Err(e) = self.layer.store.forget_conversation(&self.id) {
            tracing::error!(conversation = %self.id, "forgetting the half-made conversation: {e}");
        }
    }
}

/// A sandbox's hold on a conversation.
struct HeldLease {
    layer: Arc<Workspaces>,
    id: i64,
}

impl Lease for HeldLease {}

impl Drop for HeldLease {
    fn drop(&mut self) {
        if let Err(e) = self.layer.store.drop_lease(self.id) {
            tracing::warn!("letting a conversation go: {e}");
        }
    }
}

/// The layer as the runtime sees it.
pub struct Layer(pub Arc<Workspaces>);

impl WorkspaceLayer for Layer {
    fn lease(&self, request: &LayoutRequest) -> Result<Leased, LayoutError> {
        self.0.lease_layout(request).map_err(|e| e.to_layout())
    }

    fn registered_checkouts(&self) -> Result<Vec<PathBuf>, LayoutError> {
        self.0.existing_checkouts().map_err(|e| e.to_layout())
    }
}
