//! git's own report-status, written by the gateway for a push it refuses
//! (gitprotocol-pack, "Report Status"): `unpack ok`, then `ng <ref>
//! <reason>` per command, so git prints ` ! [remote rejected] main -> main
//! (reason)` and exits non-zero. Inside band 1 when the client asked for
//! side-band, with the reasons also on band 2 (`remote: …`).

use crate::pktline::{FLUSH, MAX_PKT, encode};
use crate::receive::PushHead;

/// What the gateway decided about one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed, but not forwarded because another ref was refused.
    NotForwarded,
    Refused(String),
}

/// git's wording for the refs an `--atomic` push did not apply because
/// another failed.
pub const ATOMIC_FAILED: &str = "atomic push failed";

/// The reason given to an allowed ref of a refused non-atomic push.
pub const OTHER_REFUSED: &str = "cc_server: not forwarded, another ref of this push was refused";

/// The whole answer body for a refused push, or `None` when the client
/// asked for no report (then only an HTTP error can say it).
pub fn refusal(head: &PushHead, decisions: &[Decision]) -> Option<Vec<u8>> {
    let v2 = head.has("report-status-v2");
    if !v2 && !head.has("report-status") {
        return None;
    }
    let atomic = head.has("atomic");
    let mut report = encode(b"unpack ok\n");
    let mut messages = Vec::new();
    for (command, decision) in head.commands.iter().zip(decisions) {
        let reason = match decision {
            Decision::Refused(reason) => {
                messages.push(format!("{}: {reason}", command.name));
                one_line(reason)
            }
            Decision::NotForwarded if atomic => ATOMIC_FAILED.to_owned(),
            Decision::NotForwarded => OTHER_REFUSED.to_owned(),
        };
        report.extend(encode(format!("ng {} {reason}\n", command.name).as_bytes()));
    }
    report.extend_from_slice(FLUSH);
    let sideband = head.has("side-band-64k") || head.has("side-band");
    if !sideband {
        return Some(report);
    }
    let mut out = Vec::new();
    for message in messages {
        let mut line = vec![2u8];
        line.extend_from_slice(one_line(&message).as_bytes());
        line.push(b'\n');
        out.extend(encode(&line));
    }
    // side-band (not -64k) carries at most 1000 bytes a packet.
    let most = if head.has("side-band-64k") {
        MAX_PKT - 5
    } else {
        995
    };
    for chunk in report.chunks(most) {
        let mut line = vec![1u8];
        line.extend_from_slice(chunk);
        out.extend(encode(&line));
    }
    out.extend_from_slice(FLUSH);
    Some(out)
}

/// A reason fit for one report line.
fn one_line(reason: &str) -> String {
    let line: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    line.chars().take(900).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receive::RefUpdate;

    fn head(caps: &[&str], refs: &[&str]) -> PushHead {
        PushHead {
            commands: refs
                .iter()
                .map(|r| RefUpdate {
                    old: "1".repeat(40),
                    new: "2".repeat(40),
                    name: (*r).to_owned(),
                })
                .collect(),
            capabilities: caps.iter().map(|c| (*c).to_owned()).collect(),
            push_options: Vec::new(),
            len: 0,
        }
    }

    #[test]
    fn a_bare_report_names_each_ref() {
        let h = head(
            &["report-status"],
            &["refs/heads/main", "refs/heads/agent/x"],
        );
        let body = refusal(
            &h,
            &[
                Decision::Refused("cc_server policy: no".into()),
                Decision::NotForwarded,
            ],
        )
        .unwrap();
        let mut want = encode(b"unpack ok\n");
        want.extend(encode(b"ng refs/heads/main cc_server policy: no\n"));
        want.extend(encode(
            format!("ng refs/heads/agent/x {OTHER_REFUSED}\n").as_bytes(),
        ));
        want.extend_from_slice(FLUSH);
        assert_eq!(
            String::from_utf8_lossy(&body),
            String::from_utf8_lossy(&want)
        );
    }

    #[test]
    fn atomic_and_sideband_as_git_words_them() {
        let h = head(
            &["report-status-v2", "side-band-64k", "atomic"],
            &["refs/heads/main", "refs/heads/agent/x"],
        );
        let body = refusal(
            &h,
            &[Decision::Refused("no\nmore".into()), Decision::NotForwarded],
        )
        .unwrap();
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("\u{2}refs/heads/main: no more\n"), "{text}");
        assert!(text.contains("\u{1}000eunpack ok\n"), "{text}");
        assert!(
            text.contains("ng refs/heads/agent/x atomic push failed\n"),
            "{text}"
        );
        assert!(text.ends_with("00000000"), "{text}");
    }

    #[test]
    fn no_report_asked_is_none() {
        assert!(
            refusal(
                &head(&["side-band-64k"], &["refs/heads/x"]),
                &[Decision::NotForwarded]
            )
            .is_none()
        );
    }
}
