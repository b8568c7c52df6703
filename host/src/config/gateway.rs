//! `[gateway]` and `[gateway.app]`: the push gateway's keys, checked, and
//! the gateway mounted on the sessions' channel (SPEC H5, H8).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::{Settings, beside_config, read_private_token};

/// `[gateway.app]`: the GitHub App whose installation tokens are brokered.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppSection {
    pub app_id: String,
    /// The installation that mints the tokens of owners not in
    /// `installations`.
    pub installation_id: Option<String>,
    /// Owner → installation id: a repository's tokens are minted by its
    /// owner's installation.
    #[serde(default)]
    pub installations: std::collections::BTreeMap<String, String>,
    /// The private key (PEM, 0600); relative to the config file. Read once
    /// at start, never bound, never in an environment or a log.
    pub private_key_file: PathBuf,
    /// The REST API's base URL (default `https://api.github.com`; GitHub
    /// Enterprise and the tests override it).
    pub api_url: Option<String>,
}

/// `[gateway]` resolved: the gateway, the push URLs sent there, the read token.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    pub config: sandbox_gateway::GatewayConfig,
    pub push_urls: Vec<String>,
    pub read: Option<sandbox_gateway::credential::ReadToken>,
    /// The credential files `[gateway]` names, with their keys: no bind
    /// may show them.
    pub secret_files: Vec<(PathBuf, &'static str)>,
}

/// `[gateway]`: where sandboxes' pushes are forwarded once judged.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySection {
    /// The forge's git base URL (`http://host:port[/prefix]`).
    pub upstream: String,
    /// Repository paths (`owner/repo.git`) pushes may go to.
    #[serde(default)]
    pub repositories: Vec<String>,
    /// A file (0600) holding the token forwarded pushes carry, never shown
    /// to a sandbox; relative to the config file.
    pub token_file: Option<PathBuf>,
    /// A file (0600) holding the read token git gets through the credential
    /// helper over the channel, for `read_url`.
    pub read_token_file: Option<PathBuf>,
    /// The forge URL the read token is for (default `https://github.com`).
    pub read_url: Option<String>,
    /// A GitHub App: write tokens minted per push, read tokens per session.
    pub app: Option<AppSection>,
    /// A CA (PEM) trusted besides the system's roots for the forge and its
    /// API over https (GitHub Enterprise behind a private CA; the tests);
    /// relative to the config file.
    pub ca_file: Option<PathBuf>,
    /// Push URL prefixes sent to the gateway (`pushInsteadOf`); default
    /// GitHub's `https://github.com/`, `git@github.com:`, `ssh://git@github.com/`.
    pub push_urls: Option<Vec<String>>,
}

impl Settings {
    /// Mounts the push gateway on the sessions' server channel when
    /// `[gateway]` is configured (SPEC H8); with an app, its tokens are
    /// written into the workspaces database until revoked, and what a
    /// killed server left there is revoked now (SPEC H5).
    pub async fn install_gateway(
        &self,
        sessions: &sandbox_runtime::Sessions,
    ) -> anyhow::Result<()> {
        if let (Some(gateway), Some(state_dir)) = (&self.gateway, &self.state_dir)
            && let Some(app) = &gateway.config.app
        {
            crate::forge_ledger::keep(app, state_dir).await?;
        }
        if let Some(GatewaySettings {
            config,
            push_urls,
            read,
            ..
        }) = &self.gateway
        {
            // Force pushes are told apart in mirrors in the state directory.
            let upstream = config.upstream.clone();
            let mut config = config.clone();
            config.mirrors = self
                .state_dir
                .as_ref()
                .map(|dir| sandbox_gateway::mirror::Mirrors {
                    dir: dir.join("gateway-mirrors"),
                });
            config.links =
                crate::gateway_links::links(self.state_dir.as_deref(), push_urls, &upstream);
            sandbox_gateway::session::install(sessions.channel(), config, push_urls, read.clone())
                .map_err(|e| anyhow::anyhow!("the push gateway: {e}"))?;
            tracing::info!(%upstream, "push gateway on http://{}/git/", sandbox_egress::local::HOST);
        }
        Ok(())
    }
}

/// The credential files of `[gateway]`, resolved as they are read.
pub(super) fn gateway_secret_files(
    section: &GatewaySection,
    config: Option<&Path>,
) -> Vec<(PathBuf, &'static str)> {
    let named = [
        (section.token_file.as_ref(), "[gateway] token_file"),
        (
            section.read_token_file.as_ref(),
            "[gateway] read_token_file",
        ),
        (
            section.app.as_ref().map(|app| &app.private_key_file),
            "[gateway.app] private_key_file",
        ),
    ];
    named
        .into_iter()
        .filter_map(|(file, key)| Some((beside_config(file?, config), key)))
        .collect()
}

/// `[gateway]`: the token file must be the owner's alone (0600), never
/// group- or world-readable; its token becomes the forwarded
/// `Authorization` (`x-access-token`, as the forge takes installation
/// tokens over git).
pub(super) fn resolve_gateway(
    section: &GatewaySection,
    config: Option<&Path>,
) -> Result<sandbox_gateway::GatewayConfig, String> {
    let authorization = match &section.token_file {
        Some(file) => {
            let token = read_private_token(file, config)
                .map_err(|message| format!("[gateway] token_file: {message}"))?;
            use base64::Engine as _;
            let basic =
                base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
            Some(format!("Basic {basic}"))
        }
        None => None,
    };
    let ca_file = section
        .ca_file
        .as_ref()
        .map(|file| match config.and_then(Path::parent) {
            Some(dir) if file.is_relative() => dir.join(file),
            _ => file.clone(),
        });
    let app = match &section.app {
        Some(app) => {
            let key = read_private_token(&app.private_key_file, config)
                .map_err(|message| format!("[gateway.app] private_key_file: {message}"))?;
            let api = app.api_url.as_deref().unwrap_or("https://api.github.com");
            if app.installation_id.is_none() && app.installations.is_empty() {
                return Err("[gateway.app] names no installation: set installations (owner → installation id) or installation_id".into());
            }
            let installations = sandbox_gateway::app::Installations {
                by_owner: app.installations.clone(),
                default: app.installation_id.clone(),
            };
            let made = sandbox_gateway::app::App::new(
                &app.app_id,
                installations,
                api,
                &key,
                ca_file.as_deref(),
            )
            .map_err(|e| format!("[gateway.app] {e}"))?;
            Some(Arc::new(made))
        }
        None => None,
    };
    let config = sandbox_gateway::GatewayConfig {
        upstream: section.upstream.clone(),
        repositories: section.repositories.clone(),
        authorization,
        ca_file,
        mirrors: None,
        app,
        links: None,
    };
    sandbox_gateway::Gateway::new(config.clone()).map_err(|e| format!("[gateway] {e}"))?;
    Ok(config)
}
