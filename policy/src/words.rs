//! A word as far as it is known statically ([`Arg`]), and the string helpers
//! for words and findings: `$'…'` and backquote unescaping,
//! glob detection, harmless redirect targets, and the text a verdict shows.

use brush_parser::word::WordPieceWithSource;

/// One word after quote removal, as far as it can be known statically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Arg {
    /// The word's value; expansions are kept in a readable form (`$HOME`,
    /// `~`, `$(…)`), so `rm -rf "$HOME"` can still be recognised.
    pub text: String,
    /// The value is exactly `text` and stays one word: no expansion,
    /// substitution, glob or brace expansion.
    pub literal: bool,
    /// A process substitution `<(…)` / `>(…)` (its commands are walked).
    pub procsubst: bool,
}

impl Arg {
    pub(crate) fn lit(text: &str) -> Self {
        Self {
            text: text.to_string(),
            literal: true,
            procsubst: false,
        }
    }
}

/// Longest command text kept in a finding.
const MAX_SHOWN: usize = 160;

/// The command inside `` `…` ``, unescaped the way bash does it: a
/// backslash is removed before `` ` ``, `\` and `$` (and `"` inside double
/// quotes), kept before anything else. brush-parser 0.4.0 keeps `\\` and
/// `\$` as they are, which loses the third level of nested backticks
/// (`` echo `echo \`echo \\\`cmd\\\`\`` `` runs `cmd` in bash) — so the raw
/// source span is unescaped here instead.
pub(crate) fn backquoted(
    src: &str,
    p: &WordPieceWithSource,
    in_double_quotes: bool,
) -> Option<String> {
    let raw = src.get(p.start_index..p.end_index)?;
    let body = raw.strip_prefix('`')?.strip_suffix('`')?;
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(&n) = chars.peek()
            && (matches!(n, '`' | '\\' | '$') || (in_double_quotes && n == '"'))
        {
            out.push(n);
            chars.next();
            continue;
        }
        out.push(c);
    }
    Some(out)
}

pub(crate) fn is_fd_word(t: &str) -> bool {
    t == "-" || (!t.is_empty() && t.trim_end_matches('-').bytes().all(|b| b.is_ascii_digit()))
}

/// Output targets that write nowhere that matters.
pub(crate) fn is_harmless_sink(t: &str) -> bool {
    matches!(t, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty")
        || t.starts_with("/dev/fd/")
        || t.starts_with("/proc/self/fd/")
}

/// Unquoted text that the shell would glob or brace-expand.
pub(crate) fn has_glob(t: &str) -> bool {
    if t.contains(['*', '?']) {
        return true;
    }
    if let Some(i) = t.find('[')
        && t[i..].contains(']')
    {
        return true;
    }
    if let Some(i) = t.find('{')
        && let Some(j) = t[i..].find('}')
    {
        let inner = &t[i..i + j];
        if inner.contains(',') || inner.contains("..") {
            return true;
        }
    }
    t.contains('(')
}

/// Decode the body of `$'…'`.
pub(crate) fn ansi_c(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let simple = match e {
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'e' | 'E' => Some('\x1b'),
            'f' => Some('\x0c'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\x0b'),
            '\\' | '\'' | '"' | '?' => Some(e),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            continue;
        }
        let (radix, max) = match e {
            'x' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            '0'..='7' => (8, 2),
            'c' => {
                if let Some(n) = chars.next() {
                    out.push(char::from((n as u32 as u8) & 0x1f));
                }
                continue;
            }
            _ => {
                out.push('\\');
                out.push(e);
                continue;
            }
        };
        let mut value: u32 = if radix == 8 {
            e.to_digit(8).unwrap_or(0)
        } else {
            0
        };
        let mut n = 0;
        while n < max {
            match chars.peek().and_then(|c| c.to_digit(radix)) {
                Some(d) => {
                    value = value.saturating_mul(radix).saturating_add(d);
                    chars.next();
                    n += 1;
                }
                None => break,
            }
        }
        if radix == 16 && n == 0 {
            out.push('\\');
            out.push(e);
            continue;
        }
        if radix == 8 || e == 'x' {
            // A byte; bytes ≥ 0x80 are not valid UTF-8 alone: keep them visible.
            out.push(char::from_u32(value & 0xff).unwrap_or('\u{fffd}'));
        } else {
            out.push(char::from_u32(value).unwrap_or('\u{fffd}'));
        }
    }
    out
}

/// The command as shown in a verdict.
pub(crate) fn shown(args: &[Arg]) -> String {
    let mut s = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(&a.text);
        if s.len() > MAX_SHOWN {
            break;
        }
    }
    cut(&s)
}

pub(crate) fn cut(s: &str) -> String {
    if s.len() <= MAX_SHOWN {
        return s.to_string();
    }
    let mut end = MAX_SHOWN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

pub(crate) fn quoted(s: &str) -> String {
    let one_line: String = s.chars().map(|c| if c == '\n' { ' ' } else { c }).collect();
    format!("`{}`", cut(one_line.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi_c_decodes_escapes() {
        assert_eq!(ansi_c(r"\x67it"), "git");
        assert_eq!(ansi_c(r"\147it"), "git");
        assert_eq!(ansi_c(r"\u0067it"), "git");
        assert_eq!(ansi_c(r"a\'b\n"), "a'b\n");
        assert_eq!(ansi_c(r"\q\"), "\\q\\");
        assert_eq!(ansi_c(r"\xZ"), "\\xZ");
    }

    #[test]
    fn globs_are_not_literal() {
        assert!(has_glob("gi?"));
        assert!(has_glob("/usr/bin/g[i]t"));
        assert!(has_glob("{git,push}"));
        assert!(has_glob("x{1..3}"));
        assert!(!has_glob("HEAD@{1}"));
        assert!(!has_glob("git"));
        assert!(!has_glob("["));
    }

    #[test]
    fn shown_is_cut_on_a_char_boundary() {
        let long = "é".repeat(200);
        let s = shown(&[Arg::lit(&long)]);
        assert!(s.ends_with('…'));
        assert!(s.len() <= MAX_SHOWN + '…'.len_utf8());
    }
}
