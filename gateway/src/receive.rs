//! The head of a receive-pack request (gitprotocol-pack, "Pushing Data To
//! a Server"): optional `shallow` lines, the command list (the first
//! command carries the client's capabilities after a NUL), a flush, and —
//! when the client asked for `push-options` — the options and a flush.
//! Everything after it is the pack, which the gateway never reads.

use crate::pktline::{self, Pkt, PktError};

/// The longest head read before the request is refused (a command list of
/// thousands of refs fits).
pub const MAX_HEAD: usize = 4 << 20;

/// What a ref update does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateKind {
    Create,
    Update,
    Delete,
}

/// One command: `old new ref`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    pub old: String,
    pub new: String,
    pub name: String,
}

impl RefUpdate {
    pub fn kind(&self) -> UpdateKind {
        if is_zero(&self.old) {
            UpdateKind::Create
        } else if is_zero(&self.new) {
            UpdateKind::Delete
        } else {
            UpdateKind::Update
        }
    }

    /// `main` for `refs/heads/main`.
    pub fn branch(&self) -> Option<&str> {
        self.name.strip_prefix("refs/heads/")
    }

    /// `v1` for `refs/tags/v1`.
    pub fn tag(&self) -> Option<&str> {
        self.name.strip_prefix("refs/tags/")
    }
}

fn is_zero(oid: &str) -> bool {
    oid.bytes().all(|b| b == b'0')
}

/// The parsed head and its length in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushHead {
    pub commands: Vec<RefUpdate>,
    pub capabilities: Vec<String>,
    pub push_options: Vec<String>,
    /// Bytes of the request the head took.
    pub len: usize,
}

impl PushHead {
    pub fn has(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }
}

/// Why a head is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeadError {
    #[error(transparent)]
    Pkt(#[from] PktError),
    #[error("malformed command {0:?}: want `<old-oid> <new-oid> <ref>`")]
    Command(String),
    #[error(
        "a signed push (push-cert) is not supported by the cc_server gateway; push without --signed"
    )]
    PushCert,
    #[error("the push has no commands")]
    Empty,
    #[error("the command list is over {MAX_HEAD} bytes")]
    TooLong,
    #[error("the request ended inside the command list")]
    Truncated,
}

/// Parses the head at the start of `buf`: `Ok(None)` when more bytes are
/// needed (`ended`: no more will come, which makes that an error).
pub fn parse(buf: &[u8], ended: bool) -> Result<Option<PushHead>, HeadError> {
    match parse_inner(buf)? {
        Some(head) => Ok(Some(head)),
        None if ended => Err(HeadError::Truncated),
        None if buf.len() > MAX_HEAD => Err(HeadError::TooLong),
        None => Ok(None),
    }
}

fn parse_inner(buf: &[u8]) -> Result<Option<PushHead>, HeadError> {
    let mut at = 0;
    let mut commands = Vec::new();
    let mut capabilities = Vec::new();
    loop {
        let Some((pkt, next)) = pktline::read(buf, at)? else {
            return Ok(None);
        };
        at = next;
        let line = match pkt {
            Pkt::Flush => break,
            Pkt::Data(line) => line,
            Pkt::Delim | Pkt::ResponseEnd => {
                return Err(HeadError::Command("a special packet".into()));
            }
        };
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let (command, caps) = match line.iter().position(|&b| b == 0) {
            Some(nul) => (&line[..nul], Some(&line[nul + 1..])),
            None => (line, None),
        };
        let text = String::from_utf8_lossy(command).into_owned();
        if text.starts_with("shallow ") && commands.is_empty() {
            continue;
        }
        if text == "push-cert" {
            return Err(HeadError::PushCert);
        }
        if let Some(caps) = caps
            && commands.is_empty()
        {
            capabilities = String::from_utf8_lossy(caps)
                .split_ascii_whitespace()
                .map(str::to_owned)
                .collect();
        }
        let mut parts = text.splitn(3, ' ');
        let (Some(old), Some(new), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(HeadError::Command(text));
        };
        let oid =
            |o: &str| (o.len() == 40 || o.len() == 64) && o.bytes().all(|b| b.is_ascii_hexdigit());
        if !oid(old) || !oid(new) || !name.starts_with("refs/") {
            return Err(HeadError::Command(text));
        }
        commands.push(RefUpdate {
            old: old.to_owned(),
            new: new.to_owned(),
            name: name.to_owned(),
        });
    }
    if commands.is_empty() {
        return Err(HeadError::Empty);
    }
    let mut push_options = Vec::new();
    if capabilities.iter().any(|c| c == "push-options") {
        loop {
            let Some((pkt, next)) = pktline::read(buf, at)? else {
                return Ok(None);
            };
            at = next;
            match pkt {
                Pkt::Flush => break,
                Pkt::Data(line) => {
                    let line = line.strip_suffix(b"\n").unwrap_or(line);
                    push_options.push(String::from_utf8_lossy(line).into_owned());
                }
                Pkt::Delim | Pkt::ResponseEnd => {
                    return Err(HeadError::Command(
                        "a special packet among push options".into(),
                    ));
                }
            }
        }
    }
    Ok(Some(PushHead {
        commands,
        capabilities,
        push_options,
        len: at,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pktline::encode;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";
    const Z: &str = "0000000000000000000000000000000000000000";

    fn body(lines: &[String], options: Option<&[&str]>) -> Vec<u8> {
        let mut out = Vec::new();
        for line in lines {
            out.extend(encode(line.as_bytes()));
        }
        out.extend_from_slice(b"0000");
        if let Some(options) = options {
            for o in options {
                out.extend(encode(o.as_bytes()));
            }
            out.extend_from_slice(b"0000");
        }
        out.extend_from_slice(b"PACK....");
        out
    }

    #[test]
    fn commands_capabilities_and_options_before_the_pack() {
        let first = format!(
            "{A} {B} refs/heads/main\0 report-status-v2 side-band-64k push-options atomic\n"
        );
        let buf = body(
            &[
                first,
                format!("{Z} {B} refs/tags/v1\n"),
                format!("{A} {Z} refs/heads/old\n"),
            ],
            Some(&["ci.skip"]),
        );
        let head = parse(&buf, true).unwrap().unwrap();
        assert_eq!(head.commands.len(), 3);
        assert_eq!(head.commands[0].branch(), Some("main"));
        assert_eq!(head.commands[0].kind(), UpdateKind::Update);
        assert_eq!(head.commands[1].tag(), Some("v1"));
        assert_eq!(head.commands[1].kind(), UpdateKind::Create);
        assert_eq!(head.commands[2].kind(), UpdateKind::Delete);
        assert!(head.has("atomic") && head.has("side-band-64k"));
        assert_eq!(head.push_options, ["ci.skip"]);
        assert_eq!(&buf[head.len..], b"PACK....");
    }

    #[test]
    fn a_partial_head_needs_more_and_a_truncated_one_is_an_error() {
        let first = format!("{A} {B} refs/heads/main\0 report-status\n");
        let buf = body(&[first], None);
        assert_eq!(parse(&buf[..10], false), Ok(None));
        assert_eq!(parse(&buf[..10], true), Err(HeadError::Truncated));
    }

    #[test]
    fn malformed_and_signed_pushes_are_refused() {
        assert!(matches!(parse(b"zzzz", true), Err(HeadError::Pkt(_))));
        assert!(matches!(
            parse(&body(&["not a command\n".into()], None), true),
            Err(HeadError::Command(_))
        ));
        assert_eq!(
            parse(&body(&["push-cert\0 report-status\n".into()], None), true),
            Err(HeadError::PushCert)
        );
        assert_eq!(parse(b"0000", true), Err(HeadError::Empty));
    }
}
