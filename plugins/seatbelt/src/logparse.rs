//! Violations from the macOS system log (SPEC F12): a pure parser for the
//! lines of `log stream --style compact`, with noise filtering, storm
//! deduplication and per-session tagging.
//!
//! # The lines
//!
//! When a Seatbelt rule denies an operation, the kernel logs a message of
//! the form
//!
//! ```text
//! Sandbox: <process>(<pid>) deny(<n>) <operation> <target>
//! ```
//!
//! e.g. `Sandbox: zsh(4242) deny(1) file-write-create /Users/dev/proj/.env`.
//! A rule written `(deny … (with message "<tag>"))` adds its message to that
//! log entry; in compact style the entry's further lines follow the first one
//! unprefixed, the tag last (srt reads its tag the same way). Repeats may be
//! folded by the kernel into `Sandbox: <n> duplicate reports for <process>
//! deny(1) <operation> <target>`.
//!
//! # Sessions
//!
//! Every deny rule of a session's profile carries that session's
//! [`SessionTag`]. [`ViolationMonitor`] accepts a violation only when its
//! entry carries *its* tag (on the violation line or a continuation line of
//! the same entry), so two sessions tapping the same log never see each
//! other's violations, nor those of other sandboxed programs.
//!
//! # Noise
//!
//! Some denials are expected, harmless and frequent; [`NOISE`] lists them,
//! each with the reason it is dropped.
//!
//! # Storms
//!
//! A loop hitting one denied path can log thousands of identical lines.
//! Within a window (first sighting + [`ViolationMonitor::window`]) the same
//! `(operation, target)` is one event with a count, emitted when the window
//! closes.

use std::fmt;
use std::time::{Duration, Instant};

use sandbox_plugin_api::SandboxViolation;

/// The per-session tag every deny rule carries: `CCSBX_<16 hex>_<16 hex>`,
/// from a hash of the session id and a per-launch nonce. Fixed length and
/// alphabet, so it can be written into the profile as is, and no tag is
/// part of another.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionTag(String);

/// A string that is not a session tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTag(pub String);

impl fmt::Display for BadTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a session tag (CCSBX_<16 hex>_<16 hex>)",
            self.0
        )
    }
}

impl std::error::Error for BadTag {}

const TAG_PREFIX: &str = "CCSBX_";
const TAG_LEN: usize = TAG_PREFIX.len() + 16 + 1 + 16;

impl SessionTag {
    /// The tag of a session for one launch. The nonce should be random per
    /// launch so a tag cannot be predicted from the session id alone.
    pub fn new(session_id: &str, nonce: u64) -> Self {
        Self(format!(
            "{TAG_PREFIX}{:016x}_{nonce:016x}",
            fnv1a(session_id.as_bytes())
        ))
    }

    /// Parses a tag written by [`SessionTag::new`].
    pub fn parse(text: &str) -> Result<Self, BadTag> {
        let ok = text.len() == TAG_LEN
            && text.starts_with(TAG_PREFIX)
            && text[TAG_PREFIX.len()..].char_indices().all(|(i, c)| {
                if i == 16 {
                    c == '_'
                } else {
                    c.is_ascii_hexdigit() && !c.is_ascii_uppercase()
                }
            });
        if ok {
            Ok(Self(text.to_owned()))
        } else {
            Err(BadTag(text.to_owned()))
        }
    }

    /// The tag.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `text` carries this tag as a whole word.
    pub fn is_in(&self, text: &str) -> bool {
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
        text.match_indices(self.0.as_str()).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + self.0.len()..].chars().next();
            !before.is_some_and(word) && !after.is_some_and(word)
        })
    }
}

impl fmt::Display for SessionTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The arguments of the `log` command that streams one session's entries:
/// only messages ending with the session's tag (srt filters the same way).
pub fn log_stream_args(tag: &SessionTag) -> Vec<String> {
    vec![
        "stream".into(),
        "--style".into(),
        "compact".into(),
        "--predicate".into(),
        format!("(eventMessage ENDSWITH \"{tag}\")"),
    ]
}

/// Denials dropped as noise: (operation or `*`, text in the target, reason).
pub const NOISE: &[(&str, &str, &str)] = &[
    (
        "*",
        "mDNSResponder",
        "DNS chatter through the resolver socket; with the network off every lookup is denied, \
         and the session's proxy reports the host names that matter",
    ),
    (
        "mach-lookup",
        "com.apple.diagnosticd",
        "os_log's diagnostics service, looked up by many programs at start (srt drops it too)",
    ),
    (
        "mach-lookup",
        "com.apple.analyticsd",
        "the analytics service, looked up by many programs at start (srt drops it too)",
    ),
    (
        "file-write",
        "_history",
        "shells and REPLs saving their history (.zsh_history, .python_history, \
         .node_repl_history) into a read-only $HOME on exit; nothing is lost",
    ),
    (
        "file-write",
        "/.lesshst",
        "less saving its history into a read-only $HOME",
    ),
    (
        "file-write",
        "/.viminfo",
        "vim saving its state into a read-only $HOME",
    ),
];

/// Whether a denial is noise, and why.
pub fn noise_reason(action: &str, target: &str) -> Option<&'static str> {
    NOISE.iter().find_map(|(op, text, why)| {
        let op_matches = *op == "*" || action.starts_with(op);
        (op_matches && target.contains(text)).then_some(*why)
    })
}

/// One denial as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The process name.
    pub process: String,
    /// Its pid, when logged.
    pub pid: Option<u32>,
    /// The operation, e.g. `file-write-create`.
    pub action: String,
    /// The path, address or service; may be empty.
    pub target: String,
    /// How many denials the line stands for (`N duplicate reports`).
    pub count: u64,
    /// The line from `Sandbox:` on.
    pub raw: String,
}

/// Parses the violation part of one line: the text from `Sandbox: ` on.
/// Returns `None` for every other line, and for `allow` reports.
pub fn parse_denial(line: &str) -> Option<Denial> {
    let start = line.find("Sandbox: ")?;
    let raw = line[start..].trim_end().to_owned();
    let body = &line[start + "Sandbox: ".len()..];
    let deny_at = body.find(" deny(")?;
    let (head, rest) = (&body[..deny_at], &body[deny_at + " deny(".len()..]);
    let close = rest.find(')')?;
    let folded: u64 = rest[..close].parse().ok()?;
    let rest = rest[close + 1..].trim_start();
    let (action, target) = match rest.split_once(char::is_whitespace) {
        Some((a, t)) => (a, t.trim()),
        None => (rest.trim(), ""),
    };
    if action.is_empty()
        || !action
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '*')
    {
        return None;
    }
    // `<n> duplicate reports for <process>` or `<process>(<pid>)`.
    let (process, pid, count) = if let Some((n, process)) = head
        .split_once(" duplicate report")
        .and_then(|(n, rest)| Some((n.trim().parse::<u64>().ok()?, rest.split_once(" for ")?.1)))
    {
        (process.trim().to_owned(), None, n)
    } else {
        let open = head.rfind('(')?;
        let pid = head[open + 1..].strip_suffix(')')?.parse().ok()?;
        (head[..open].to_owned(), Some(pid), folded.max(1))
    };
    Some(Denial {
        process,
        pid,
        action: action.to_owned(),
        target: target.to_owned(),
        count,
        raw,
    })
}

/// Whether a line starts a new log entry in compact style
/// (`2025-01-31 12:00:00.000 …`), rather than continuing one.
fn starts_entry(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
}

/// A violation ready for the event stream, with how often it was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    /// What to send: `raw` is the first line, with ` [seen N times]` added
    /// when a storm was folded into it.
    pub violation: SandboxViolation,
    /// How many denials this event stands for.
    pub count: u64,
}

struct Group {
    action: String,
    target: String,
    raw: String,
    count: u64,
    first: Instant,
}

impl Group {
    fn report(self) -> Reported {
        let raw = if self.count > 1 {
            format!("{} [seen {} times]", self.raw, self.count)
        } else {
            self.raw
        };
        Reported {
            violation: SandboxViolation {
                action: self.action,
                target: self.target,
                raw: Some(raw),
            },
            count: self.count,
        }
    }
}

/// Turns one session's log lines into violations: tag check, noise filter,
/// storm folding. Time is passed in, so it is tested without waiting.
pub struct ViolationMonitor {
    tag: SessionTag,
    window: Duration,
    /// A denial whose entry has not shown the tag yet.
    pending: Option<Denial>,
    groups: Vec<Group>,
    /// Denials dropped as noise, for diagnostics.
    noise: u64,
}

impl ViolationMonitor {
    /// A monitor for one session's tag, folding repeats within `window`.
    pub fn new(tag: SessionTag, window: Duration) -> Self {
        Self {
            tag,
            window,
            pending: None,
            groups: Vec::new(),
            noise: 0,
        }
    }

    /// The storm window.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// How many of this session's denials were dropped as noise.
    pub fn noise_dropped(&self) -> u64 {
        self.noise
    }

    /// Feeds one line of `log stream --style compact` output; returns the
    /// violations whose window has closed by `now`.
    pub fn feed(&mut self, line: &str, now: Instant) -> Vec<Reported> {
        if let Some(denial) = parse_denial(line) {
            // A new entry: the previous one never showed our tag.
            self.pending = None;
            if self.tag.is_in(line) {
                self.accept(denial, now);
            } else {
                self.pending = Some(denial);
            }
        } else if starts_entry(line) {
            self.pending = None;
        } else if self.tag.is_in(line)
            && let Some(denial) = self.pending.take()
        {
            self.accept(denial, now);
        }
        self.tick(now)
    }

    /// The violations whose window has closed by `now`.
    pub fn tick(&mut self, now: Instant) -> Vec<Reported> {
        let window = self.window;
        let (due, open): (Vec<Group>, Vec<Group>) = std::mem::take(&mut self.groups)
            .into_iter()
            .partition(|g| now.saturating_duration_since(g.first) >= window);
        self.groups = open;
        due.into_iter().map(Group::report).collect()
    }

    /// Everything still held, at the end of the stream.
    pub fn finish(&mut self) -> Vec<Reported> {
        self.pending = None;
        std::mem::take(&mut self.groups)
            .into_iter()
            .map(Group::report)
            .collect()
    }

    fn accept(&mut self, mut denial: Denial, now: Instant) {
        // A tag on the violation line itself is not part of the target.
        if let Some(at) = denial.target.find(self.tag.as_str()) {
            denial.target = denial.target[..at].trim_end().to_owned();
        }
        if noise_reason(&denial.action, &denial.target).is_some() {
            self.noise += denial.count;
            return;
        }
        let window = self.window;
        match self.groups.iter_mut().find(|g| {
            g.action == denial.action
                && g.target == denial.target
                && now.saturating_duration_since(g.first) < window
        }) {
            Some(group) => group.count += denial.count,
            None => self.groups.push(Group {
                action: denial.action,
                target: denial.target,
                raw: denial.raw,
                count: denial.count,
                first: now,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The sample lines below are written by us in the documented format of
    //! `log stream --style compact` (timestamp, type, process[pid:tid],
    //! subsystem, message; continuation lines unprefixed); they are not
    //! captured from a Mac. Capturing real ones is on the macOS checklist.

    use super::*;

    fn tag(n: u64) -> SessionTag {
        SessionTag::new("session-a", n)
    }

    fn line(msg: &str) -> String {
        format!("2025-03-14 09:26:53.589 E  kernel[0:2f1a] (Sandbox) {msg}")
    }

    #[test]
    fn tags_are_fixed_shape_and_per_session() {
        let a = SessionTag::new("s1", 7);
        let b = SessionTag::new("s2", 7);
        assert_ne!(a, b);
        assert_ne!(a, SessionTag::new("s1", 8), "the nonce matters");
        assert_eq!(SessionTag::parse(a.as_str()), Ok(a.clone()));
        assert_eq!(a.as_str().len(), TAG_LEN);
        for bad in [
            "",
            "CCSBX_",
            "CCSBX_x\")(allow default)",
            &a.as_str().to_uppercase(),
        ] {
            assert!(SessionTag::parse(bad).is_err(), "{bad}");
        }
        assert!(a.is_in(&format!("x {a}")));
        assert!(!a.is_in(&format!("x {a}0")), "whole word only");
        assert!(!a.is_in(&format!("x X{a}")), "whole word only");
        let args = log_stream_args(&a);
        assert_eq!(
            args.last().map(String::as_str),
            Some(format!("(eventMessage ENDSWITH \"{a}\")").as_str())
        );
    }

    #[test]
    fn parses_each_kind_of_denial() {
        let cases = [
            (
                "Sandbox: zsh(4242) deny(1) file-write-create /Users/dev/proj/.env",
                "zsh",
                "file-write-create",
                "/Users/dev/proj/.env",
            ),
            (
                "Sandbox: cat(501) deny(1) file-read-data /Users/dev/.ssh/id_ed25519",
                "cat",
                "file-read-data",
                "/Users/dev/.ssh/id_ed25519",
            ),
            (
                "Sandbox: curl(777) deny(1) network-outbound 93.184.216.34:443",
                "curl",
                "network-outbound",
                "93.184.216.34:443",
            ),
            (
                "Sandbox: sh(12) deny(1) process-exec* /Users/dev/proj/evil",
                "sh",
                "process-exec*",
                "/Users/dev/proj/evil",
            ),
            (
                "Sandbox: open(88) deny(1) mach-lookup com.apple.coreservices.launchservicesd",
                "open",
                "mach-lookup",
                "com.apple.coreservices.launchservicesd",
            ),
            (
                "Sandbox: osascript(90) deny(1) appleevent-send com.apple.Terminal",
                "osascript",
                "appleevent-send",
                "com.apple.Terminal",
            ),
            (
                "Sandbox: Google Chrome Helper (Renderer)(9) deny(1) file-write-unlink /Users/dev/proj/.git",
                "Google Chrome Helper (Renderer)",
                "file-write-unlink",
                "/Users/dev/proj/.git",
            ),
            (
                "Sandbox: python3(5) deny(1) file-write-create /Users/dev/My Project/x.pem",
                "python3",
                "file-write-create",
                "/Users/dev/My Project/x.pem",
            ),
        ];
        for (msg, process, action, target) in cases {
            let d = parse_denial(&line(msg)).unwrap_or_else(|| panic!("{msg}"));
            assert_eq!(
                (d.process.as_str(), d.action.as_str(), d.target.as_str()),
                (process, action, target)
            );
            assert_eq!(d.raw, msg);
            assert_eq!(d.count, 1);
        }
        let d = parse_denial("Sandbox: 17 duplicate reports for zsh deny(1) file-read-data /Users/dev/.aws/credentials").unwrap();
        assert_eq!((d.count, d.pid, d.process.as_str()), (17, None, "zsh"));
        for not in [
            "Sandbox: zsh(1) allow(1) file-read-data /x",
            "kernel: something else entirely",
            "Sandbox: garbage",
            "Sandbox: zsh(x) deny(1) file-read-data /x",
            "Sandbox: zsh(1) deny(1) Weird-Op /x",
        ] {
            assert_eq!(parse_denial(not), None, "{not}");
        }
    }

    fn run(monitor: &mut ViolationMonitor, lines: &[String], now: Instant) -> Vec<Reported> {
        let mut out = Vec::new();
        for l in lines {
            out.extend(monitor.feed(l, now));
        }
        out.extend(monitor.finish());
        out
    }

    #[test]
    fn only_lines_with_the_sessions_tag_are_accepted() {
        let (a, b) = (
            SessionTag::new("session-a", 1),
            SessionTag::new("session-b", 2),
        );
        let t0 = Instant::now();
        let lines = vec![
            // Session A: tag on the continuation line (compact style).
            line("Sandbox: zsh(10) deny(1) file-write-create /Users/dev/a/.env"),
            a.to_string(),
            // Session B's entry.
            line("Sandbox: zsh(11) deny(1) file-write-create /Users/dev/b/.env"),
            b.to_string(),
            // Another sandboxed program, no tag at all.
            line("Sandbox: Safari(12) deny(1) file-read-data /Library/x"),
            line("some other entry"),
            // Session B with the tag on the same line.
            line(&format!(
                "Sandbox: cat(13) deny(1) file-read-data /Users/dev/.ssh/id_rsa {b}"
            )),
            // Session A, untagged continuation first, then the tag.
            line("Sandbox: git(14) deny(1) file-write-unlink /Users/dev/a/.git"),
            "Violation:       deny(1) file-write-unlink /Users/dev/a/.git".into(),
            a.to_string(),
        ];
        let got_a: Vec<String> = run(
            &mut ViolationMonitor::new(a, Duration::from_secs(1)),
            &lines,
            t0,
        )
        .into_iter()
        .map(|r| r.violation.target)
        .collect();
        let got_b: Vec<String> = run(
            &mut ViolationMonitor::new(b, Duration::from_secs(1)),
            &lines,
            t0,
        )
        .into_iter()
        .map(|r| r.violation.target)
        .collect();
        assert_eq!(got_a, ["/Users/dev/a/.env", "/Users/dev/a/.git"]);
        assert_eq!(got_b, ["/Users/dev/b/.env", "/Users/dev/.ssh/id_rsa"]);
    }

    #[test]
    fn a_tag_line_after_a_new_entry_does_not_adopt_an_old_denial() {
        let a = tag(1);
        let lines = vec![
            line("Sandbox: zsh(10) deny(1) file-write-create /Users/dev/other/.env"),
            line("unrelated entry"),
            a.to_string(),
        ];
        assert!(
            run(
                &mut ViolationMonitor::new(a, Duration::from_secs(1)),
                &lines,
                Instant::now()
            )
            .is_empty()
        );
    }

    #[test]
    fn noise_is_dropped_and_counted() {
        let a = tag(1);
        let mut m = ViolationMonitor::new(a.clone(), Duration::from_secs(1));
        let lines: Vec<String> = [
            "Sandbox: curl(1) deny(1) network-outbound /private/var/run/mDNSResponder",
            "Sandbox: node(2) deny(1) mach-lookup com.apple.diagnosticd",
            "Sandbox: node(2) deny(1) mach-lookup com.apple.analyticsd",
            "Sandbox: zsh(3) deny(1) file-write-create /Users/dev/.zsh_history",
            "Sandbox: python3(4) deny(1) file-write-data /Users/dev/.python_history",
            "Sandbox: less(5) deny(1) file-write-create /Users/dev/.lesshst",
            "Sandbox: zsh(6) deny(1) file-write-create /Users/dev/proj/.env",
        ]
        .iter()
        .map(|m| format!("{} {a}", line(m)))
        .collect();
        let got = run(&mut m, &lines, Instant::now());
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].violation.target, "/Users/dev/proj/.env");
        assert_eq!(m.noise_dropped(), 6);
        assert_eq!(
            noise_reason("file-read-data", "/Users/dev/.zsh_history"),
            None,
            "reading history is not noise"
        );
    }

    #[test]
    fn a_storm_is_one_event_with_a_count() {
        let a = tag(1);
        let mut m = ViolationMonitor::new(a.clone(), Duration::from_secs(2));
        let t0 = Instant::now();
        let storm = line(&format!(
            "Sandbox: node(77) deny(1) file-write-create /Users/dev/proj/x.pem {a}"
        ));
        let mut out = Vec::new();
        for i in 0..100u64 {
            out.extend(m.feed(&storm, t0 + Duration::from_millis(i * 10)));
        }
        assert!(out.is_empty(), "nothing before the window closes: {out:?}");
        // A different target is its own event.
        out.extend(m.feed(
            &line(&format!(
                "Sandbox: node(77) deny(1) file-write-create /Users/dev/proj/y.pem {a}"
            )),
            t0 + Duration::from_millis(1500),
        ));
        out.extend(m.tick(t0 + Duration::from_secs(2)));
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].count, 100);
        assert_eq!(out[0].violation.action, "file-write-create");
        assert_eq!(out[0].violation.target, "/Users/dev/proj/x.pem");
        assert!(
            out[0]
                .violation
                .raw
                .as_deref()
                .unwrap_or("")
                .ends_with("[seen 100 times]")
        );
        // After the window the same denial starts a new event.
        let late = m.feed(&storm, t0 + Duration::from_secs(3));
        let rest = m.finish();
        assert!(late.is_empty());
        let counts: Vec<(String, u64)> = rest
            .into_iter()
            .map(|r| (r.violation.target, r.count))
            .collect();
        assert_eq!(
            counts,
            [
                ("/Users/dev/proj/y.pem".to_owned(), 1),
                ("/Users/dev/proj/x.pem".to_owned(), 1)
            ]
        );
    }

    #[test]
    fn kernel_folded_duplicates_add_to_the_count() {
        let a = tag(1);
        let lines = vec![
            line("Sandbox: zsh(10) deny(1) file-read-data /Users/dev/.aws/credentials"),
            a.to_string(),
            line(
                "Sandbox: 41 duplicate reports for zsh deny(1) file-read-data /Users/dev/.aws/credentials",
            ),
            a.to_string(),
        ];
        let got = run(
            &mut ViolationMonitor::new(a, Duration::from_secs(5)),
            &lines,
            Instant::now(),
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].count, 42);
    }
}
