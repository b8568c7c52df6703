//! The git identity a private `$HOME` gets (SPEC G4): the host
//! user's `user.name` and `user.email` and nothing else of the host's git
//! config — no credential helpers, `!` aliases, `core.hooksPath` or
//! includes reach the sandbox, and the host's file is never visible or
//! written. Commits work as they would on the host.

use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// `user.name` and `user.email` as the host's global git config says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitIdentity {
    pub name: Option<String>,
    pub email: Option<String>,
}

impl GitIdentity {
    /// The server user's identity, asked of git once per process (git
    /// resolves `$HOME`, `$XDG_CONFIG_HOME`, `GIT_CONFIG_GLOBAL` and
    /// includes the way the user's own git does).
    pub fn of_host_user() -> &'static GitIdentity {
        static IDENTITY: OnceLock<GitIdentity> = OnceLock::new();
        IDENTITY.get_or_init(|| {
            let output = Command::new("git")
                .args(["config", "--global", "--includes", "-z", "--get-regexp"])
                .arg(r"^user\.(name|email)$")
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output();
            match output {
                Ok(out) => Self::parse(&out.stdout),
                Err(_) => Self::default(),
            }
        })
    }

    /// `git config -z --get-regexp` output: `key\nvalue\0` per entry; the
    /// last of each key wins, as in git.
    pub fn parse(raw: &[u8]) -> Self {
        let mut identity = Self::default();
        for entry in raw.split(|b| *b == 0) {
            let text = String::from_utf8_lossy(entry);
            let Some((key, value)) = text.split_once('\n') else {
                continue;
            };
            match key {
                "user.name" => identity.name = Some(value.to_owned()),
                "user.email" => identity.email = Some(value.to_owned()),
                _ => {}
            }
        }
        identity
    }

    /// The `.gitconfig` for the private home, or `None` when the host user
    /// has no identity (then git inside asks, as it would on the host).
    pub fn gitconfig(&self) -> Option<String> {
        let mut text = String::from("[user]\n");
        for (key, value) in [("name", &self.name), ("email", &self.email)] {
            if let Some(value) = value {
                text.push_str(&format!("\t{key} = \"{}\"\n", quoted(value)));
            }
        }
        (self.name.is_some() || self.email.is_some()).then_some(text)
    }
}

/// A value inside git's double quotes: `\` and `"` escaped, control
/// characters (a newline would start a new key) dropped.
fn quoted(value: &str) -> String {
    let mut out = String::new();
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_is_parsed_and_written_alone() {
        let raw = b"user.name\nAda Lovelace\0user.email\nada@example.test\0user.name\nAda L.\0";
        let identity = GitIdentity::parse(raw);
        assert_eq!(identity.name.as_deref(), Some("Ada L."));
        assert_eq!(identity.email.as_deref(), Some("ada@example.test"));
        assert_eq!(
            identity.gitconfig().unwrap(),
            "[user]\n\tname = \"Ada L.\"\n\temail = \"ada@example.test\"\n"
        );
        assert_eq!(GitIdentity::default().gitconfig(), None);
    }

    #[test]
    fn a_value_cannot_add_keys_or_break_out_of_its_quotes() {
        let identity = GitIdentity {
            name: Some("x\"\n[core]\n\thooksPath = /tmp/h\\".into()),
            email: None,
        };
        let text = identity.gitconfig().unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert_eq!(
            text,
            "[user]\n\tname = \"x\\\"[core]hooksPath = /tmp/h\\\\\"\n"
        );
    }
}
