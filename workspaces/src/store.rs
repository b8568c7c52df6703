//! The state that survives a restart (SPEC H1): workspaces and their
//! registered repositories, conversations, agents, and the leases of the
//! sandboxes using a conversation, in one SQLite database in the server's
//! state directory.
//!
//! - **Private.** The state directory is made 0700 and refused when group
//!   or others may enter it or another user owns it; the database file is
//!   made 0600 before SQLite opens it (its `-wal` and `-shm` files take its
//!   mode).
//! - **Versioned.** `PRAGMA user_version` counts the [`MIGRATIONS`] applied,
//!   in one transaction; `PRAGMA application_id` marks the file as ours. A
//!   file that is not a database, fails `quick_check`, carries another
//!   application's id or a version newer than this build is an error naming
//!   the file — never a silent reset.
//! - **Shared.** WAL, a busy timeout and `BEGIN IMMEDIATE` for every change,
//!   so a server's API calls and a CLI beside it take turns; one
//!   [`Connection`] per process behind a mutex. SQLite's write lock is also
//!   the lock of the start-up sweep ([`Store::claim_leftovers`]).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;

/// The database's file name in the state directory.
pub const DATABASE: &str = "workspaces.db";

/// `PRAGMA application_id` of this database: "ccWS".
const APPLICATION_ID: i64 = 0x6363_5753;

/// How long a change waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The schema, one step per entry; `user_version` says how many ran.
/// Never edit a step: add one.
pub const MIGRATIONS: &[&str] = &[
    // 1: workspaces, repositories, conversations, agents, leases.
    "CREATE TABLE workspaces (
        name TEXT PRIMARY KEY,
        attachments TEXT,
        include_secrets TEXT NOT NULL DEFAULT '[]',
        created_at INTEGER NOT NULL
    );
    CREATE TABLE repositories (
        workspace TEXT NOT NULL REFERENCES workspaces(name) ON DELETE CASCADE,
        name TEXT NOT NULL,
        path TEXT NOT NULL,
        PRIMARY KEY (workspace, name)
    );
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        state TEXT NOT NULL,
        owner TEXT,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE conversation_repos (
        conversation TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        source TEXT NOT NULL,
        skipped TEXT NOT NULL DEFAULT '[]',
        PRIMARY KEY (conversation, name)
    );
    CREATE TABLE agents (
        conversation TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (conversation, name)
    );
    CREATE TABLE leases (
        id INTEGER PRIMARY KEY,
        conversation TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        agent TEXT NOT NULL,
        session TEXT NOT NULL,
        owner TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );",
    // 2: the forge tokens a server minted and has not revoked yet, with the
    // owning process, so a start revokes what a killed server left.
    "CREATE TABLE forge_tokens (
        token TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );",
];

/// Why the store failed. Each names the database file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "the workspaces database {path} is damaged or not a database ({detail}); it was left as \
         it is: move it aside to start with no workspaces, or restore a copy"
    )]
    Corrupt { path: PathBuf, detail: String },
    #[error(
        "the workspaces database {path} was written by a newer cc_server (schema version {found}; \
         this one knows {known}): use the newer cc_server, or move the file aside"
    )]
    Newer {
        path: PathBuf,
        found: i64,
        known: usize,
    },
    #[error(
        "{path} is not a cc_server workspaces database (application id {found:#x}); move it aside"
    )]
    Foreign { path: PathBuf, found: i64 },
    #[error("the state directory {path} {problem}: it holds which checkouts are registered; {fix}")]
    Unsafe {
        path: PathBuf,
        problem: String,
        fix: String,
    },
    #[error("the workspaces database {path}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("the state directory {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A workspace: its repositories, attachments, and the secret files its
/// clones may carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Workspace {
    pub name: String,
    pub repositories: Vec<Repository>,
    pub attachments: Option<PathBuf>,
    /// Globs of secret files (`.env`, `*.pem`, …) cloned all the same.
    pub include_secrets: Vec<String>,
    pub created_at: i64,
}

/// One registered checkout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Repository {
    pub name: String,
    pub path: PathBuf,
}

/// A conversation and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Conversation {
    pub id: String,
    pub workspace: String,
    /// `provisioning`, `ready` or `removing`.
    pub state: String,
    pub created_at: i64,
    pub repositories: Vec<ConversationRepo>,
    pub agents: Vec<String>,
}

/// One clone of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversationRepo {
    pub name: String,
    /// The registered checkout it was cloned from.
    pub source: PathBuf,
    /// What was left out, each with why.
    pub skipped: Vec<String>,
}

/// A conversation's states.
pub mod state {
    pub const PROVISIONING: &str = "provisioning";
    pub const READY: &str = "ready";
    pub const REMOVING: &str = "removing";
}

/// A sandbox using a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRow {
    pub id: i64,
    pub agent: String,
    pub session: String,
    pub owner: String,
}

/// The database, open.
pub struct Store {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl Store {
    /// Opens the database in `state_dir`. `create`: make the directory and
    /// the file when absent; else an absent file is `Ok(None)` (nothing was
    /// ever registered).
    pub fn open(state_dir: &Path, create: bool) -> Result<Option<Self>, StoreError> {
        let path = state_dir.join(DATABASE);
        let io = |source| StoreError::Io {
            path: state_dir.to_path_buf(),
            source,
        };
        if !path.exists() {
            if !create {
                return Ok(None);
            }
            use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(state_dir)
                .map_err(io)?;
            check_private(state_dir)?;
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
            {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(e)),
            }
        }
        check_private(state_dir)?;
        let sqlite = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let conn = Connection::open(&path).map_err(sqlite)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sqlite)?;
        let store = Self {
            conn: Mutex::new(conn),
            path,
        };
        store.prepare()?;
        Ok(Some(store))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sqlite(&self, source: rusqlite::Error) -> StoreError {
        let corrupt = matches!(
            source.sqlite_error_code(),
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
        );
        if corrupt {
            return StoreError::Corrupt {
                path: self.path.clone(),
                detail: source.to_string(),
            };
        }
        StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Checks the file, turns WAL on, and migrates it to this build's schema.
    fn prepare(&self) -> Result<(), StoreError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(|e| self.sqlite(e))?;
        if check != "ok" {
            return Err(StoreError::Corrupt {
                path: self.path.clone(),
                detail: check,
            });
        }
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;",
        )
        .map_err(|e| self.sqlite(e))?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.sqlite(e))?;
        let app: i64 = tx
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(|e| self.sqlite(e))?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.sqlite(e))?;
        if app != 0 && app != APPLICATION_ID {
            return Err(StoreError::Foreign {
                path: self.path.clone(),
                found: app,
            });
        }
        if app == 0 && version == 0 {
            let tables: i64 = tx
                .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
                .map_err(|e| self.sqlite(e))?;
            if tables > 0 {
                return Err(StoreError::Foreign {
                    path: self.path.clone(),
                    found: 0,
                });
            }
        }
        let known = MIGRATIONS.len();
        if version < 0 || version as usize > known {
            return Err(StoreError::Newer {
                path: self.path.clone(),
                found: version,
                known,
            });
        }
        for step in &MIGRATIONS[version as usize..] {
            tx.execute_batch(step).map_err(|e| self.sqlite(e))?;
        }
        tx.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {known};"
        ))
        .map_err(|e| self.sqlite(e))?;
        tx.commit().map_err(|e| self.sqlite(e))
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction: the write lock first,
    /// so two processes never interleave a read and a write.
    fn write<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, rusqlite::Error>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.sqlite(e))?;
        let value = f(&tx).map_err(|e| self.sqlite(e))?;
        tx.commit().map_err(|e| self.sqlite(e))?;
        Ok(value)
    }

    fn read<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, rusqlite::Error>,
    ) -> Result<T, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        f(&conn).map_err(|e| self.sqlite(e))
    }

    /// Adds a workspace; `false` when the name is taken.
    pub fn add_workspace(&self, ws: &Workspace) -> Result<bool, StoreError> {
        let secrets = serde_json::to_string(&ws.include_secrets).unwrap_or_else(|_| "[]".into());
        self.write(|tx| {
            let taken: bool = tx
                .query_row("SELECT 1 FROM workspaces WHERE name = ?1", [&ws.name], |_| Ok(true))
                .optional()?
                .unwrap_or(false);
            if taken {
                return Ok(false);
            }
            tx.execute(
                "INSERT INTO workspaces (name, attachments, include_secrets, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![ws.name, ws.attachments.as_ref().map(|p| p.to_string_lossy().into_owned()), secrets, now()],
            )?;
            for repo in &ws.repositories {
                tx.execute(
                    "INSERT INTO repositories (workspace, name, path) VALUES (?1, ?2, ?3)",
                    params![ws.name, repo.name, repo.path.to_string_lossy()],
                )?;
            }
            Ok(true)
        })
    }

    /// Every workspace, by name.
    pub fn workspaces(&self) -> Result<Vec<Workspace>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare(
                "SELECT name, attachments, include_secrets, created_at FROM workspaces ORDER BY name",
            )?;
            let rows = stmt.query_map([], |r| {
                let secrets: String = r.get(2)?;
                Ok(Workspace {
                    name: r.get(0)?,
                    attachments: r.get::<_, Option<String>>(1)?.map(PathBuf::from),
                    include_secrets: serde_json::from_str(&secrets).unwrap_or_default(),
                    created_at: r.get(3)?,
                    repositories: Vec::new(),
                })
            })?;
            let mut out = rows.collect::<Result<Vec<_>, _>>()?;
            let mut repos = conn.prepare(
                "SELECT name, path FROM repositories WHERE workspace = ?1 ORDER BY name",
            )?;
            for ws in &mut out {
                ws.repositories = repos
                    .query_map([&ws.name], |r| {
                        Ok(Repository {
                            name: r.get(0)?,
                            path: PathBuf::from(r.get::<_, String>(1)?),
                        })
                    })?
                    .collect::<Result<_, _>>()?;
            }
            Ok(out)
        })
    }

    /// One workspace.
    pub fn workspace(&self, name: &str) -> Result<Option<Workspace>, StoreError> {
        Ok(self.workspaces()?.into_iter().find(|w| w.name == name))
    }

    /// Removes a workspace. `Err` with the conversations that still use it.
    pub fn remove_workspace(&self, name: &str) -> Result<Result<bool, Vec<String>>, StoreError> {
        self.write(|tx| {
            let mut stmt =
                tx.prepare("SELECT id FROM conversations WHERE workspace = ?1 ORDER BY id")?;
            let users = stmt
                .query_map([name], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            if !users.is_empty() {
                return Ok(Err(users));
            }
            let n = tx.execute("DELETE FROM workspaces WHERE name = ?1", [name])?;
            Ok(Ok(n > 0))
        })
    }

    /// Every registered checkout, of every workspace.
    pub fn registered_paths(&self) -> Result<Vec<PathBuf>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare("SELECT DISTINCT path FROM repositories ORDER BY path")?;
            stmt.query_map([], |r| Ok(PathBuf::from(r.get::<_, String>(0)?)))?
                .collect()
        })
    }

    /// Records a conversation being made, by `owner`, before its
    /// directory exists (the sweep removes what a dead owner left).
    pub fn begin_conversation(
        &self,
        id: &str,
        workspace: &str,
        owner: &str,
    ) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO conversations (id, workspace, state, owner, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, workspace, state::PROVISIONING, owner, now()],
            )?;
            Ok(())
        })
    }

    /// Marks a conversation made, with its clones.
    pub fn finish_conversation(
        &self,
        id: &str,
        repos: &[ConversationRepo],
    ) -> Result<(), StoreError> {
        self.write(|tx| {
            for repo in repos {
                let skipped = serde_json::to_string(&repo.skipped).unwrap_or_else(|_| "[]".into());
                tx.execute(
                    "INSERT INTO conversation_repos (conversation, name, source, skipped) VALUES (?1, ?2, ?3, ?4)",
                    params![id, repo.name, repo.source.to_string_lossy(), skipped],
                )?;
            }
            tx.execute(
                "UPDATE conversations SET state = ?2, owner = NULL WHERE id = ?1",
                params![id, state::READY],
            )?;
            Ok(())
        })
    }

    /// Every conversation, by id.
    pub fn conversations(&self) -> Result<Vec<Conversation>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare(
                "SELECT id, workspace, state, created_at FROM conversations ORDER BY id",
            )?;
            let mut out = stmt
                .query_map([], |r| {
                    Ok(Conversation {
                        id: r.get(0)?,
                        workspace: r.get(1)?,
                        state: r.get(2)?,
                        created_at: r.get(3)?,
                        repositories: Vec::new(),
                        agents: Vec::new(),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            let mut repos = conn.prepare(
                "SELECT name, source, skipped FROM conversation_repos WHERE conversation = ?1 ORDER BY name",
            )?;
            let mut agents =
                conn.prepare("SELECT name FROM agents WHERE conversation = ?1 ORDER BY name")?;
            for c in &mut out {
                c.repositories = repos
                    .query_map([&c.id], |r| {
                        let skipped: String = r.get(2)?;
                        Ok(ConversationRepo {
                            name: r.get(0)?,
                            source: PathBuf::from(r.get::<_, String>(1)?),
                            skipped: serde_json::from_str(&skipped).unwrap_or_default(),
                        })
                    })?
                    .collect::<Result<_, _>>()?;
                c.agents = agents
                    .query_map([&c.id], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
            }
            Ok(out)
        })
    }

    /// One conversation.
    pub fn conversation(&self, id: &str) -> Result<Option<Conversation>, StoreError> {
        Ok(self.conversations()?.into_iter().find(|c| c.id == id))
    }

    /// Adds an agent to a ready conversation; `Ok(false)` when it exists.
    /// `Err(state)` when the conversation is missing (`None`) or not ready.
    pub fn add_agent(
        &self,
        conversation: &str,
        name: &str,
    ) -> Result<Result<bool, Option<String>>, StoreError> {
        self.write(|tx| {
            let st: Option<String> = tx
                .query_row(
                    "SELECT state FROM conversations WHERE id = ?1",
                    [conversation],
                    |r| r.get(0),
                )
                .optional()?;
            match st.as_deref() {
                Some(state::READY) => {}
                other => return Ok(Err(other.map(str::to_owned))),
            }
            let n = tx.execute(
                "INSERT OR IGNORE INTO agents (conversation, name, created_at) VALUES (?1, ?2, ?3)",
                params![conversation, name, now()],
            )?;
            Ok(Ok(n > 0))
        })
    }

    /// Removes an agent's row; `Err` with its live leases' sessions.
    pub fn remove_agent(
        &self,
        conversation: &str,
        name: &str,
        is_gone: &dyn Fn(&str) -> bool,
    ) -> Result<Result<bool, Vec<String>>, StoreError> {
        self.write(|tx| {
            let live = live_leases(tx, conversation, is_gone)?;
            let busy: Vec<String> = live
                .into_iter()
                .filter(|l| l.agent == name)
                .map(|l| l.session)
                .collect();
            if !busy.is_empty() {
                return Ok(Err(busy));
            }
            let n = tx.execute(
                "DELETE FROM agents WHERE conversation = ?1 AND name = ?2",
                params![conversation, name],
            )?;
            Ok(Ok(n > 0))
        })
    }

    /// Takes a lease for a session on a ready conversation's existing
    /// agent. `Err` says why not: `None` no such conversation, `Some(state)`
    /// not ready, `Some("agent")` no such agent.
    pub fn take_lease(
        &self,
        conversation: &str,
        agent: &str,
        session: &str,
        owner: &str,
    ) -> Result<Result<i64, Option<String>>, StoreError> {
        self.write(|tx| {
            let st: Option<String> = tx
                .query_row("SELECT state FROM conversations WHERE id = ?1", [conversation], |r| r.get(0))
                .optional()?;
            match st.as_deref() {
                Some(state::READY) => {}
                other => return Ok(Err(other.map(str::to_owned))),
            }
            let known: Option<i64> = tx
                .query_row(
                    "SELECT 1 FROM agents WHERE conversation = ?1 AND name = ?2",
                    params![conversation, agent],
                    |r| r.get(0),
                )
                .optional()?;
            if known.is_none() {
                return Ok(Err(Some("agent".into())));
            }
            tx.execute(
                "INSERT INTO leases (conversation, agent, session, owner, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![conversation, agent, session, owner, now()],
            )?;
            Ok(Ok(tx.last_insert_rowid()))
        })
    }

    /// Records a minted forge token, held by `owner` until revoked.
    pub fn record_token(
        &self,
        token: &str,
        owner: &str,
        expires_at: &str,
    ) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "INSERT OR REPLACE INTO forge_tokens (token, owner, expires_at, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![token, owner, expires_at, now()],
            )
            .map(drop)
        })
    }

    /// Forgets a revoked forge token.
    pub fn forget_token(&self, token: &str) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute("DELETE FROM forge_tokens WHERE token = ?1", [token])
                .map(drop)
        })
    }

    /// Under the write lock: the forge tokens of gone owners, taken over by
    /// `owner` (to revoke, then [`Store::forget_token`]).
    pub fn claim_left_tokens(
        &self,
        owner: &str,
        is_gone: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<String>, StoreError> {
        self.write(|tx| {
            let mut stmt = tx.prepare("SELECT token, owner FROM forge_tokens")?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            let mut left = Vec::new();
            for (token, row_owner) in rows {
                if row_owner != owner && is_gone(&row_owner) {
                    tx.execute(
                        "UPDATE forge_tokens SET owner = ?2 WHERE token = ?1",
                        params![token, owner],
                    )?;
                    left.push(token);
                }
            }
            Ok(left)
        })
    }

    /// Lets a lease go.
    pub fn drop_lease(&self, id: i64) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute("DELETE FROM leases WHERE id = ?1", [id])
                .map(drop)
        })
    }

    /// The live leases of a conversation (those of gone owners dropped).
    pub fn leases(
        &self,
        conversation: &str,
        is_gone: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<LeaseRow>, StoreError> {
        self.write(|tx| live_leases(tx, conversation, is_gone))
    }

    /// Marks a conversation as being removed by `owner`, unless a sandbox
    /// uses it: `Err(sessions)` then; `Ok(false)` when there is none.
    pub fn begin_removal(
        &self,
        id: &str,
        owner: &str,
        is_gone: &dyn Fn(&str) -> bool,
    ) -> Result<Result<bool, Vec<String>>, StoreError> {
        self.write(|tx| {
            let exists: Option<String> = tx
                .query_row("SELECT state FROM conversations WHERE id = ?1", [id], |r| {
                    r.get(0)
                })
                .optional()?;
            if exists.is_none() {
                return Ok(Ok(false));
            }
            let live = live_leases(tx, id, is_gone)?;
            if !live.is_empty() {
                return Ok(Err(live.into_iter().map(|l| l.session).collect()));
            }
            tx.execute(
                "UPDATE conversations SET state = ?2, owner = ?3 WHERE id = ?1",
                params![id, state::REMOVING, owner],
            )?;
            Ok(Ok(true))
        })
    }

    /// Forgets a conversation (its directory is gone).
    pub fn forget_conversation(&self, id: &str) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute("DELETE FROM conversations WHERE id = ?1", [id])
                .map(drop)
        })
    }

    /// Under the write lock: every conversation a gone owner left being
    /// made or removed is taken over by `owner` (marked `removing`), and
    /// the ids of every conversation are returned, so the caller removes
    /// the taken-over ones and any directory no row names.
    pub fn claim_leftovers(
        &self,
        owner: &str,
        is_gone: &dyn Fn(&str) -> bool,
    ) -> Result<(Vec<String>, Vec<String>), StoreError> {
        self.write(|tx| {
            let mut stmt = tx.prepare("SELECT id, state, owner FROM conversations")?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, Option<String>>(2)?,
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            let mut claimed = Vec::new();
            let mut all = Vec::new();
            for (id, st, row_owner) in rows {
                all.push(id.clone());
                let left = st != state::READY && row_owner.as_deref().is_none_or(is_gone);
                if left {
                    tx.execute(
                        "UPDATE conversations SET state = ?2, owner = ?3 WHERE id = ?1",
                        params![id, state::REMOVING, owner],
                    )?;
                    claimed.push(id);
                }
            }
            Ok((claimed, all))
        })
    }
}

/// The leases of a conversation whose owners live; the others deleted.
fn live_leases(
    tx: &rusqlite::Transaction<'_>,
    conversation: &str,
    is_gone: &dyn Fn(&str) -> bool,
) -> Result<Vec<LeaseRow>, rusqlite::Error> {
    let mut stmt = tx.prepare(
        "SELECT id, agent, session, owner FROM leases WHERE conversation = ?1 ORDER BY id",
    )?;
    let rows = stmt
        .query_map([conversation], |r| {
            Ok(LeaseRow {
                id: r.get(0)?,
                agent: r.get(1)?,
                session: r.get(2)?,
                owner: r.get(3)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    let mut live = Vec::new();
    for row in rows {
        if is_gone(&row.owner) {
            tx.execute("DELETE FROM leases WHERE id = ?1", [row.id])?;
        } else {
            live.push(row);
        }
    }
    Ok(live)
}

/// The state directory: ours, and closed to group and others.
fn check_private(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).map_err(|source| StoreError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let unsafe_dir = |problem: String, fix: String| StoreError::Unsafe {
        path: dir.to_path_buf(),
        problem,
        fix,
    };
    if !meta.is_dir() {
        return Err(unsafe_dir(
            "is not a directory (a link?)".into(),
            "point `[workspaces] state_dir` at a directory".into(),
        ));
    }
    if meta.uid() != uid {
        return Err(unsafe_dir(
            format!(
                "belongs to uid {}, not {uid} the server runs as",
                meta.uid()
            ),
            format!("`chown {uid} {}`", dir.display()),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(unsafe_dir(
            format!(
                "has mode {:o}: group or others may enter it",
                meta.mode() & 0o777
            ),
            format!("`chmod 700 {}`", dir.display()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(name: &str) -> Workspace {
        Workspace {
            name: name.into(),
            repositories: vec![Repository {
                name: "r".into(),
                path: "/src/r".into(),
            }],
            attachments: None,
            include_secrets: vec![".env".into()],
            created_at: 0,
        }
    }

    #[test]
    fn a_store_keeps_its_rows_across_opens() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        assert!(Store::open(&state, false).unwrap().is_none());
        let store = Store::open(&state, true).unwrap().unwrap();
        assert!(store.add_workspace(&ws("w")).unwrap());
        assert!(!store.add_workspace(&ws("w")).unwrap(), "taken");
        drop(store);
        let again = Store::open(&state, false).unwrap().unwrap();
        let got = again.workspace("w").unwrap().unwrap();
        assert_eq!(got.repositories, ws("w").repositories);
        assert_eq!(got.include_secrets, vec![".env".to_owned()]);
        assert_eq!(
            again.registered_paths().unwrap(),
            vec![PathBuf::from("/src/r")]
        );
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&state).unwrap().mode() & 0o777, 0o700);
        assert_eq!(
            std::fs::metadata(again.path()).unwrap().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn leases_hold_a_conversation_until_dropped_or_their_owner_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s"), true).unwrap().unwrap();
        store.add_workspace(&ws("w")).unwrap();
        store.begin_conversation("c1", "w", "1 1").unwrap();
        assert_eq!(
            store.take_lease("c1", "a", "s", "1 1").unwrap(),
            Err(Some("provisioning".into()))
        );
        store.finish_conversation("c1", &[]).unwrap();
        assert_eq!(
            store.take_lease("c1", "a", "s", "1 1").unwrap(),
            Err(Some("agent".into()))
        );
        assert_eq!(store.add_agent("c1", "a").unwrap(), Ok(true));
        let lease = store.take_lease("c1", "a", "s", "1 1").unwrap().unwrap();
        let alive = |_: &str| false;
        assert_eq!(
            store.begin_removal("c1", "2 2", &alive).unwrap(),
            Err(vec!["s".to_owned()])
        );
        assert_eq!(
            store.remove_workspace("w").unwrap(),
            Err(vec!["c1".to_owned()])
        );
        store.drop_lease(lease).unwrap();
        store.take_lease("c1", "a", "t", "9 9").unwrap().unwrap();
        let gone = |o: &str| o == "9 9";
        assert_eq!(store.begin_removal("c1", "2 2", &gone).unwrap(), Ok(true));
        store.forget_conversation("c1").unwrap();
        assert_eq!(store.remove_workspace("w").unwrap(), Ok(true));
    }

    #[test]
    fn a_damaged_newer_or_foreign_file_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(DATABASE);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(&file, vec![0x5a; 8192]).unwrap();
        let err = Store::open(dir.path(), false).unwrap_err().to_string();
        assert!(
            err.contains(&file.display().to_string()) && err.contains("damaged"),
            "{err}"
        );
        std::fs::remove_file(&file).unwrap();
        let store = Store::open(dir.path(), true).unwrap().unwrap();
        store
            .read(|c| c.execute_batch("PRAGMA user_version = 99"))
            .unwrap();
        drop(store);
        let err = Store::open(dir.path(), false).unwrap_err().to_string();
        assert!(err.contains("newer") && err.contains("99"), "{err}");
        std::fs::remove_file(&file).unwrap();
        let other = Connection::open(&file).unwrap();
        other.execute_batch("CREATE TABLE t (x)").unwrap();
        drop(other);
        let err = Store::open(dir.path(), false).unwrap_err().to_string();
        assert!(err.contains("not a cc_server workspaces database"), "{err}");
    }

    #[test]
    fn a_loose_state_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = Store::open(dir.path(), true).unwrap_err().to_string();
        assert!(err.contains("chmod 700"), "{err}");
    }
}
