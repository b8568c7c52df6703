//! The gateway in the server: mounted on the server channel at `/git/`
//! (so a push reaches it through the session's own HTTP proxy, which names
//! the session), judging each ref update by the session's guardrails
//! (`push_remote`, branch-scoped), a prompt going to the owner through the
//! same approver the command policy asks.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use sandbox_egress::local::Refused;
use sandbox_policy::{Class, Decision, Targets};
use sandbox_runtime::channel::{Call, Caller, Channel, Handler, HttpHandler, RegisterError};
use sandbox_runtime::command_policy::approvals::Question;

use crate::credential::{self, Broker, ReadToken};
use crate::forward::{Gateway, GatewayConfig, Judge, Verdict};
use crate::receive::{PushHead, RefUpdate, UpdateKind};

/// Where the gateway is mounted on the channel.
pub const MOUNT: &str = "/git/";

/// The push URLs sent to the gateway by default: GitHub's three forms.
pub const GITHUB_PUSH_URLS: [&str; 3] = [
    "https://github.com/",
    "git@github.com:",
    "ssh://git@github.com/",
];

/// The git config entries sending every push to these URL prefixes to
/// the gateway.
pub fn push_instead_of(prefixes: &[String]) -> Vec<(String, String)> {
    let gateway = format!("http://{}{MOUNT}", sandbox_runtime::channel::HOST);
    prefixes
        .iter()
        .map(|prefix| (format!("url.{gateway}.pushInsteadOf"), prefix.clone()))
        .collect()
}

/// The ssh endpoints of the forges behind these push URLs (`git@host:`,
/// `ssh://git@host[:port]/`; GitHub's ssh over 443 too), refused by the
/// session's proxies: with the forge's tokens brokered, a push goes over
/// https to the gateway, never around it over ssh.
pub fn ssh_refusals(push_urls: &[String]) -> Vec<Refused> {
    let mut targets: Vec<(String, u16)> = Vec::new();
    for url in push_urls {
        let target = if let Some(rest) = url.strip_prefix("ssh://") {
            let authority = rest.split('/').next().unwrap_or_default();
            let host_port = authority.rsplit('@').next().unwrap_or_default();
            match host_port.rsplit_once(':') {
                Some((host, port)) => port.parse().ok().map(|p| (host.to_owned(), p)),
                None => Some((host_port.to_owned(), 22)),
            }
        } else if !url.contains("://")
            && let Some((user_host, _)) = url.split_once(':')
        {
            let host = user_host.rsplit('@').next().unwrap_or_default();
            Some((host.to_owned(), 22))
        } else {
            None
        };
        if let Some((host, port)) = target
            && !host.is_empty()
        {
            if host.eq_ignore_ascii_case("github.com") {
                targets.push(("ssh.github.com".to_owned(), 443));
            }
            targets.push((host, port));
        }
    }
    targets.sort();
    targets.dedup();
    targets
        .into_iter()
        .map(|(host, port)| Refused {
            rule: format!(
                "the push gateway brokers this forge's tokens, so git over ssh to {host}:{port} is refused: use the https URL (pushes go to the gateway); `[gateway] push_urls` in the config"
            ),
            host,
            port,
        })
        .collect()
}

/// git config entries as environment (`GIT_CONFIG_COUNT`, `_KEY_n`,
/// `_VALUE_n`): read by every git, written to no file.
pub fn git_config_env(entries: &[(String, String)]) -> Vec<(String, String)> {
    let mut env = vec![("GIT_CONFIG_COUNT".to_owned(), entries.len().to_string())];
    for (i, (key, value)) in entries.iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{i}"), key.clone()));
        env.push((format!("GIT_CONFIG_VALUE_{i}"), value.clone()));
    }
    env
}

/// Mounts a gateway with `config` on `channel`; sends pushes to the
/// `push_urls` prefixes there in every command's git config; with a read
/// token, registers the credential helper that hands it to git.
pub fn install(
    channel: &Channel,
    config: GatewayConfig,
    push_urls: &[String],
    read: Option<ReadToken>,
) -> Result<(), String> {
    let gateway = Arc::new(Gateway::new(config.clone())?);
    let tokens = match (&config.app, &read) {
        (Some(_), _) => {
            "GitHub App: a read token per session (contents read, pull requests write) through git's credential helper over the channel; a write token per forwarded push without workflows; all revoked"
        }
        (None, Some(_)) => {
            "fixed: the read token from [gateway] read_token_file through git's credential helper over the channel; the write token stays in the server"
        }
        (None, None) if config.authorization.is_some() => {
            "fixed: the write token stays in the server; no read token is issued"
        }
        (None, None) => "none: no forge token is issued",
    };
    channel.set_handle_detail(
        "pushGateway",
        serde_json::json!({
            "url": format!("http://{}{MOUNT}", sandbox_runtime::channel::HOST),
            "upstream": config.upstream,
            "repositories": config.repositories,
            "pushUrls": push_urls,
            "tokens": tokens,
            "sshToForge": "refused",
            "holds": "pushes are judged per ref by push_remote; on the none backend the gateway is advisory",
        }),
    );
    channel.refuse_egress(ssh_refusals(push_urls));
    channel.strip_command_env("SSH_AUTH_SOCK");
    let mut entries = push_instead_of(push_urls);
    if let Some(read) = read {
        entries.extend(credential::helper_entries(&read));
        let broker = Arc::new(Broker::new(read));
        let answering = Arc::clone(&broker);
        let helper: Handler = Arc::new(move |call: Call| {
            let broker = Arc::clone(&answering);
            Box::pin(async move { broker.answer(&call).await })
        });
        channel
            .register(credential::NAME, helper)
            .map_err(|e| e.to_string())?;
        channel.on_session_end(Arc::new(move |session: String| {
            let broker = Arc::clone(&broker);
            Box::pin(async move { broker.session_ended(&session).await })
        }));
    }
    if !entries.is_empty() {
        channel.add_command_env(git_config_env(&entries));
    }
    let handler: HttpHandler = Arc::new(move |caller: Caller, request| {
        let gateway = Arc::clone(&gateway);
        Box::pin(async move {
            let path = request
                .uri()
                .path()
                .strip_prefix(MOUNT)
                .unwrap_or_default()
                .to_owned();
            let judge = SessionJudge { caller };
            gateway.handle(&path, request, &judge).await
        })
    });
    channel
        .mount(MOUNT, handler)
        .map_err(|e: RegisterError| e.to_string())
}

/// The class a ref update is judged as, and the least it asks: a tag and
/// a deletion always ask at least the owner.
pub fn plan(update: &RefUpdate, forced: bool) -> (Targets, Decision, String) {
    let kind = update.kind();
    if forced {
        let name = update.branch().or(update.tag()).unwrap_or(&update.name);
        let targets = match update.branch() {
            Some(branch) => Targets::Known(vec![branch.to_owned()]),
            None => Targets::Unknown,
        };
        return (targets, Decision::Prompt, format!("force-push to {name}"));
    }
    if let Some(tag) = update.tag() {
        let what = match kind {
            UpdateKind::Delete => format!("delete the tag {tag}"),
            _ => format!("push the tag {tag}"),
        };
        return (Targets::Unknown, Decision::Prompt, what);
    }
    let Some(branch) = update.branch() else {
        return (
            Targets::Unknown,
            Decision::Prompt,
            format!("update {}", update.name),
        );
    };
    let targets = Targets::Known(vec![branch.to_owned()]);
    match kind {
        UpdateKind::Delete => (
            targets,
            Decision::Prompt,
            format!("delete the branch {branch}"),
        ),
        UpdateKind::Create => (
            targets,
            Decision::Allow,
            format!("create the branch {branch}"),
        ),
        UpdateKind::Update => (
            targets,
            Decision::Allow,
            format!("push to the branch {branch}"),
        ),
    }
}

struct SessionJudge {
    caller: Caller,
}

/// The `git-push` violation of one refused ref.
fn refused(repository: &str, name: &str, why: &str) -> sandbox_plugin_api::SandboxViolation {
    sandbox_plugin_api::SandboxViolation {
        action: sandbox_plugin_api::violation::GIT_PUSH.into(),
        target: format!("{repository} {name}"),
        raw: Some(why.to_owned()),
    }
}

impl Judge for SessionJudge {
    fn judge<'a>(
        &'a self,
        repository: &'a str,
        head: &'a PushHead,
        forced: &'a [bool],
    ) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let Some(session) = self.caller.session() else {
                let why = "cc_server policy: the session is not live".to_owned();
                return vec![Verdict::Refuse(why); head.commands.len()];
            };
            let policy = session.commands();
            let mut verdicts = Vec::with_capacity(head.commands.len());
            for (i, update) in head.commands.iter().enumerate() {
                if !policy.enforce {
                    verdicts.push(Verdict::Allow);
                    continue;
                }
                let (targets, floor, what) = plan(update, forced.get(i).copied().unwrap_or(false));
                let (decision, rule) =
                    policy
                        .guardrails
                        .resolve(Class::PushRemote, session.mode(), &targets);
                let decision = decision.max(floor);
                let rule = match rule {
                    Some(rule) => rule.to_string(),
                    None if floor > Decision::Allow => format!("{what}: asks the owner"),
                    None => format!("the {} mode's push_remote", session.mode().as_str()),
                };
                let verdict = match decision {
                    Decision::Allow => Verdict::Allow,
                    Decision::Deny => Verdict::Refuse(format!(
                        "cc_server policy: {what} refused by {rule}; change it in the guardrails file ([policy] guardrails)"
                    )),
                    Decision::Prompt => {
                        let question = Question {
                            session_id: self.caller.session.clone(),
                            command: format!(
                                "git push {repository} {}:{}",
                                update.new, update.name
                            ),
                            mode: session.mode().as_str().to_owned(),
                            rule: rule.clone(),
                            reasons: vec![format!("push to a remote: {what} of {repository}")],
                            asking: vec![format!("push to a remote: {what}")],
                        };
                        match policy.ask(&question).await {
                            Ok(()) => Verdict::Allow,
                            Err(why) => Verdict::Refuse(format!("cc_server policy: {what}: {why}")),
                        }
                    }
                };
                tracing::info!(session = %self.caller.session, %repository, r#ref = %update.name, ?verdict, "push judged");
                verdicts.push(verdict);
            }
            verdicts
        })
    }

    fn conversation(&self) -> Option<&str> {
        self.caller.conversation.as_deref()
    }

    fn refused(&self, repository: &str, name: &str, why: &str) {
        if let Some(session) = self.caller.session() {
            session.report_violation(refused(repository, name, why));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(old: char, new: char, name: &str) -> RefUpdate {
        RefUpdate {
            old: old.to_string().repeat(40),
            new: new.to_string().repeat(40),
            name: name.to_owned(),
        }
    }

    #[test]
    fn the_ssh_forms_of_the_push_urls_are_refused() {
        let urls: Vec<String> = GITHUB_PUSH_URLS.iter().map(|u| (*u).to_owned()).collect();
        let refused: Vec<(String, u16)> = ssh_refusals(&urls)
            .into_iter()
            .map(|r| (r.host, r.port))
            .collect();
        assert_eq!(
            refused,
            [
                ("github.com".to_owned(), 22),
                ("ssh.github.com".to_owned(), 443)
            ]
        );
        let other = ssh_refusals(&["ssh://git@forge.test:2222/".to_owned()]);
        assert_eq!(
            (other[0].host.as_str(), other[0].port),
            ("forge.test", 2222)
        );
    }

    #[test]
    fn tags_and_deletions_ask_at_least_branches_by_name() {
        let (t, floor, _) = plan(&update('1', '2', "refs/heads/agent/x"), false);
        assert_eq!(
            (t, floor),
            (Targets::Known(vec!["agent/x".into()]), Decision::Allow)
        );
        let (_, floor, what) = plan(&update('1', '0', "refs/heads/agent/x"), false);
        assert_eq!(floor, Decision::Prompt);
        assert!(what.contains("delete"));
        let (t, floor, what) = plan(&update('0', '2', "refs/tags/v1"), false);
        assert_eq!((t, floor), (Targets::Unknown, Decision::Prompt));
        assert!(what.contains("tag v1"));
        let (_, floor, what) = plan(&update('1', '2', "refs/heads/agent/x"), true);
        assert_eq!(floor, Decision::Prompt);
        assert!(what.contains("force-push to agent/x"));
    }
}
