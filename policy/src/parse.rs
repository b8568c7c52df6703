//! The only place that calls `brush-parser`. Every call is guarded:
//!
//! - **Panics.** brush-parser 0.4.0 has `unwrap()`s reachable from input
//!   (`99999999999999999999>f` overflows the fd number, `~99999999999999999999`
//!   the tilde index). Each call runs under `catch_unwind`; a panic is an
//!   opaque line. (The process's panic hook still prints the message.)
//! - **Hangs.** Some inputs make its tokenizer loop forever (see [`shape`]);
//!   they are refused before brush sees them.
//! - **Stack and time.** The PEG parser recurses per nesting level; its time
//!   grows about cubically with balanced nesting and doubles with every
//!   unclosed `(` or `case` (see [`Shape`]). [`shape`] measures a text
//!   cheaply and callers refuse texts past their budget.

use std::panic::{AssertUnwindSafe, catch_unwind};

use brush_parser::ast::Program;
use brush_parser::word::WordPieceWithSource;
use brush_parser::{Parser, ParserOptions};

/// Longest command line looked at; longer is opaque. Parsing is linear in width
/// (tens of microseconds a token in a debug build), so this bounds the time.
pub(crate) const MAX_LINE_BYTES: usize = 64 * 1024;

fn options() -> ParserOptions {
    ParserOptions::default()
}

/// What brush-parser's program parser will face in a text, measured by a
/// small quote-aware lexer before brush sees the text.
///
/// Only the token-level structure costs the parser: quoted text, comments
/// and here-document bodies are single tokens (scanned linearly by brush's
/// tokenizer), and `if`/`case`/`do` are keywords only where a command
/// starts. So a Python file written through `cat <<'EOF'` or a commit
/// message saying "in case … if … do" costs nothing, while
/// `case x in x) case x in x) …` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// The deepest nesting of brackets and compound commands. Balanced
    /// nesting costs polynomial time, and deep enough nesting overflows a
    /// 2 MiB stack (figures in docs/measurements.md).
    pub depth: usize,
    /// Openers never closed. Each doubles the time (figures in
    /// docs/measurements.md).
    pub unclosed: usize,
    /// A reason brush-parser must not see this text at all.
    pub hazard: Option<&'static str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Paren,
    /// `((` or `$((`: inside, `<<` is a shift.
    Arith,
    Brace,
    Bracket,
    If,
    Case,
    Do,
    Double,
    Tick,
}

impl Frame {
    /// Levels of nesting this frame stands for: `((` is two parentheses.
    fn weight(self) -> usize {
        match self {
            Frame::Double | Frame::Tick => 0,
            Frame::Arith => 2,
            _ => 1,
        }
    }
}

struct Lexer {
    stack: Vec<Frame>,
    counted: usize,
    depth: usize,
    /// Counted frames dropped by a closer further down (still unclosed).
    dropped: usize,
    hazard: Option<&'static str>,
}

impl Lexer {
    fn push(&mut self, f: Frame) {
        self.stack.push(f);
        self.counted += f.weight();
        self.depth = self.depth.max(self.counted);
    }

    /// Close the nearest `f` within the current quoting context, dropping
    /// whatever was opened after it (as brush's tokenizer does). `false`
    /// when there is none.
    fn close(&mut self, f: Frame) -> bool {
        let mut k = self.stack.len();
        while k > 0 {
            k -= 1;
            let here = self.stack[k];
            if here == f {
                for g in self.stack.drain(k..).skip(1) {
                    self.counted -= g.weight();
                    self.dropped += g.weight();
                }
                self.counted -= f.weight();
                return true;
            }
            if matches!(here, Frame::Double | Frame::Tick) {
                return false;
            }
        }
        false
    }

    /// Is a `<<` here a shift? Only right inside `((…))` (through plain
    /// parentheses): anywhere else it is a here-document.
    fn in_arith(&self) -> bool {
        for f in self.stack.iter().rev() {
            match f {
                Frame::Arith => return true,
                Frame::Paren | Frame::Bracket => {}
                _ => return false,
            }
        }
        false
    }
}

/// Measure a text (see [`Shape`]), and refuse inputs that hang brush-parser
/// 0.4.0's tokenizer: every one found by the fuzz tests ends the input
/// while a here-document is still open inside some construct (`p $(<<  `,
/// `cat <<''  `, `${x:-<<- $(( )) `, `|& $( [ <<    git push fi || then
/// ${`). So every here-document must have a plain delimiter word — `EOF`,
/// `'EOF'`, `"EOF"`, `\EOF`: letters, digits, `_ . -` — and a later line
/// that closes it. brush-parser rejects unterminated here-documents anyway
/// (bash runs them with a warning), so this costs no verdict.
pub(crate) fn shape(text: &str) -> Shape {
    /// Past this the text is refused anyway; stop counting.
    const GIVE_UP: usize = 1024;
    let b = text.as_bytes();
    let mut lx = Lexer {
        stack: Vec::new(),
        counted: 0,
        depth: 0,
        dropped: 0,
        hazard: None,
    };
    let mut command_position = true;
    let mut extra = 0;
    let mut heredocs: Vec<(&str, bool)> = Vec::new();
    let mut i = 0;
    while i < b.len() && lx.counted <= GIVE_UP {
        let c = b[i];
        if lx.stack.last() == Some(&Frame::Double) {
            match c {
                b'\\' => i += 2,
                b'"' => {
                    lx.stack.pop();
                    i += 1;
                }
                b'`' => {
                    lx.push(Frame::Tick);
                    command_position = true;
                    i += 1;
                }
                b'$' if b.get(i + 1) == Some(&b'(') => {
                    let arith = b.get(i + 2) == Some(&b'(');
                    lx.push(if arith { Frame::Arith } else { Frame::Paren });
                    command_position = !arith;
                    i += if arith { 3 } else { 2 };
                }
                b'$' if b.get(i + 1) == Some(&b'{') => {
                    lx.push(Frame::Brace);
                    i += 2;
                }
                _ => i += 1,
            }
            continue;
        }
        match c {
            b'\\' => {
                // An escaped character; a line continuation changes nothing.
                if b.get(i + 1) != Some(&b'\n') {
                    command_position = false;
                }
                i += 2;
            }
            b'\'' => {
                let ansi_c = i > 0 && b[i - 1] == b'$';
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += if ansi_c && b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                command_position = false;
            }
            b'"' => {
                lx.push(Frame::Double);
                command_position = false;
                i += 1;
            }
            b'`' => {
                if !lx.close(Frame::Tick) {
                    lx.push(Frame::Tick);
                    command_position = true;
                } else {
                    command_position = false;
                }
                i += 1;
            }
            b'#' if i == 0
                || matches!(
                    b[i - 1],
                    b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')'
                ) =>
            {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'$' if b.get(i + 1) == Some(&b'(') => {
                let arith = b.get(i + 2) == Some(&b'(');
                lx.push(if arith { Frame::Arith } else { Frame::Paren });
                command_position = !arith;
                i += if arith { 3 } else { 2 };
            }
            b'(' => {
                let arith = command_position && b.get(i + 1) == Some(&b'(');
                lx.push(if arith { Frame::Arith } else { Frame::Paren });
                command_position = !arith;
                i += if arith { 2 } else { 1 };
            }
            b')' => {
                if lx.stack.last() == Some(&Frame::Arith) && b.get(i + 1) == Some(&b')') {
                    lx.close(Frame::Arith);
                    i += 2;
                } else {
                    lx.close(Frame::Paren);
                    i += 1;
                }
                command_position = true;
            }
            b'{' => {
                lx.push(Frame::Brace);
                command_position = true;
                i += 1;
            }
            b'}' => {
                lx.close(Frame::Brace);
                command_position = false;
                i += 1;
            }
            b'[' => {
                lx.push(Frame::Bracket);
                command_position = false;
                i += 1;
            }
            b']' => {
                lx.close(Frame::Bracket);
                i += 1;
            }
            b';' | b'&' | b'|' => {
                command_position = true;
                i += 1;
            }
            b'\n' => {
                command_position = true;
                i += 1;
                // Here-document bodies start on the next line.
                for (delimiter, remove_tabs) in heredocs.drain(..) {
                    while i < b.len() {
                        let end = text[i..].find('\n').map_or(b.len(), |k| i + k);
                        let line = &text[i..end];
                        let line = if remove_tabs {
                            line.trim_start_matches('\t')
                        } else {
                            line
                        };
                        i = (end + 1).min(b.len());
                        if line == delimiter {
                            break;
                        }
                    }
                }
            }
            b'<' if b.get(i + 1) == Some(&b'<') && b.get(i + 2) == Some(&b'<') => i += 3,
            b'<' if b.get(i + 1) == Some(&b'<') && !lx.in_arith() => {
                let mut j = i + 2;
                let remove_tabs = b.get(j) == Some(&b'-');
                if remove_tabs {
                    j += 1;
                }
                while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
                    j += 1;
                }
                match plain_delimiter(&text[j..]) {
                    None => {
                        lx.hazard.get_or_insert("unusual here-document delimiter");
                        i = j;
                    }
                    Some((delimiter, len)) => {
                        if closed(&text[j + len..], delimiter, remove_tabs) {
                            heredocs.push((delimiter, remove_tabs));
                        } else {
                            lx.hazard.get_or_insert("unterminated here-document");
                        }
                        i = j + len;
                    }
                }
                command_position = false;
            }
            b' ' | b'\t' | b'!' => i += 1,
            b'a'..=b'z' if command_position => {
                let start = i;
                while i < b.len() && b[i].is_ascii_lowercase() {
                    i += 1;
                }
                let ends = b.get(i).is_none_or(|c| {
                    matches!(
                        c,
                        b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')' | b'<' | b'>'
                    )
                });
                command_position = false;
                if ends {
                    match &text[start..i] {
                        "if" => {
                            lx.push(Frame::If);
                            command_position = true;
                        }
                        "case" => lx.push(Frame::Case),
                        "do" => {
                            lx.push(Frame::Do);
                            command_position = true;
                        }
                        "fi" => {
                            lx.close(Frame::If);
                        }
                        "esac" => {
                            lx.close(Frame::Case);
                        }
                        "done" => {
                            lx.close(Frame::Do);
                        }
                        "then" | "else" | "elif" | "while" | "until" | "time" => {
                            command_position = true
                        }
                        "coproc" => {
                            extra += 1;
                            command_position = true;
                        }
                        _ => {}
                    }
                }
            }
            _ => {
                command_position = false;
                i += 1;
            }
        }
    }
    if lx.counted > GIVE_UP {
        lx.depth = lx.depth.max(lx.counted);
    }
    Shape {
        depth: lx.depth + extra,
        unclosed: lx.counted + lx.dropped + extra,
        hazard: lx.hazard.or_else(|| number_hazard(text)),
    }
}

/// Numbers known to reach an `unwrap()` inside brush-parser 0.4.0 (the
/// `catch_unwind` below stays as a backstop, but a caught panic still
/// prints through the panic hook): digits right before `<`/`>` are an fd
/// number parsed as `i32`; digits after `~`, `~+` or `~-` a directory-stack
/// index (`usize`). Quoting is ignored: this may refuse a harmless line,
/// never the reverse.
fn number_hazard(text: &str) -> Option<&'static str> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i < b.len()
                && (b[i] == b'<' || b[i] == b'>')
                && text[start..i].parse::<i32>().is_err()
            {
                return Some("file descriptor number out of range");
            }
            continue;
        }
        if b[i] == b'~' {
            let mut j = i + 1;
            if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
                j += 1;
            }
            let start = j;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j > start && text[start..j].parse::<u32>().is_err() {
                return Some("directory stack index out of range");
            }
        }
        i += 1;
    }
    None
}

/// Parse a program. `Err` carries a short reason.
pub(crate) fn program(text: &str) -> Result<Program, String> {
    if let Some(h) = shape(text).hazard {
        return Err(h.to_string());
    }
    let opts = options();
    guarded(|| Parser::new(std::io::Cursor::new(text.as_bytes()), &opts).parse_program())
}

/// Runs one brush-parser call; its error or its panic (a backstop: the
/// known panics are refused before) becomes a short reason.
fn guarded<T, E: std::fmt::Display>(call: impl FnOnce() -> Result<T, E>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(p)) => Ok(p),
        Ok(Err(e)) => Err(format!("brush-parser: {e}")),
        Err(_) => Err("brush-parser panicked".to_string()),
    }
}

/// Split a word into pieces (quotes, expansions, substitutions).
pub(crate) fn word(text: &str) -> Result<Vec<WordPieceWithSource>, String> {
    if let Some(h) = number_hazard(text) {
        return Err(h.to_string());
    }
    let opts = options();
    guarded(|| brush_parser::word::parse(text, &opts))
}

/// Split a heredoc body (quotes are literal there) into pieces.
pub(crate) fn heredoc(text: &str) -> Result<Vec<WordPieceWithSource>, String> {
    if let Some(h) = number_hazard(text) {
        return Err(h.to_string());
    }
    let opts = options();
    guarded(|| brush_parser::word::parse_heredoc(text, &opts))
}

/// A plain here-document delimiter at the start of `rest`, followed by the
/// end of the word: the delimiter without its quotes, and the length of the
/// word as written.
fn plain_delimiter(rest: &str) -> Option<(&str, usize)> {
    let b = rest.as_bytes();
    let plain = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-');
    let (start, len, after) = match b.first() {
        Some(&q @ (b'\'' | b'"')) => {
            let len = b[1..].iter().take_while(|c| plain(c)).count();
            if b.get(1 + len) != Some(&q) {
                return None;
            }
            (1, len, 2 + len)
        }
        Some(b'\\') => {
            let len = b[1..].iter().take_while(|c| plain(c)).count();
            (1, len, 1 + len)
        }
        _ => {
            let len = b.iter().take_while(|c| plain(c)).count();
            (0, len, len)
        }
    };
    let ends = b.get(after).is_none_or(|c| {
        matches!(
            c,
            b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b')' | b'<' | b'>'
        )
    });
    (len > 0 && ends).then(|| (&rest[start..start + len], after))
}

/// Is there a line in `rest` (after its first newline) that is exactly
/// `delimiter` (after leading tabs, for `<<-`)?
fn closed(rest: &str, delimiter: &str, remove_tabs: bool) -> bool {
    rest.split('\n').skip(1).any(|line| {
        let line = if remove_tabs {
            line.trim_start_matches('\t')
        } else {
            line
        };
        line == delimiter
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(depth: usize, unclosed: usize) -> (usize, usize) {
        (depth, unclosed)
    }

    fn dims(text: &str) -> (usize, usize) {
        let s = shape(text);
        (s.depth, s.unclosed)
    }

    #[test]
    fn shape_counts_structure() {
        assert_eq!(dims("ls -la"), n(0, 0));
        assert_eq!(dims("(ls)"), n(1, 0));
        assert_eq!(dims("echo $(a $(b))"), n(2, 0));
        assert_eq!(dims("if a; then if b; then c; fi; fi"), n(2, 0));
        assert_eq!(dims("for x in a; do if y; then z; fi; done"), n(2, 0));
        assert_eq!(dims("coproc ls"), n(1, 1));
        // Sequential structures do not add up.
        assert_eq!(dims("(a); (b); { c; }; if d; then e; fi"), n(1, 0));
        // A case pattern's `)` does not close the `case`.
        assert_eq!(dims("case x in x) ls;; esac"), n(1, 0));
        assert_eq!(dims("case x in x) case x in x) "), n(2, 2));
        assert_eq!(dims("(((("), n(4, 4));
        assert_eq!(dims("echo ))) ((("), n(3, 3));
        assert_eq!(dims("echo $((1 + (2 * 3)))"), n(3, 0));
        assert_eq!(dims("x=\"$(ls \"$(pwd)\")\""), n(2, 0));
    }

    #[test]
    fn shape_ignores_text_the_parser_sees_as_one_token() {
        // Quoted text, comments, here-document bodies, non-command words.
        assert_eq!(dims("echo '((((((((' \"[[[[[[\" $'(((\\'(('"), n(0, 0));
        assert_eq!(dims("ls # (((((((("), n(0, 0));
        assert_eq!(
            dims("git commit -m 'in case if do' && echo if case do"),
            n(0, 0)
        );
        let py = format!(
            "cat > a.py <<'EOF'\n{}EOF\nls",
            "if x:\n    f((((\n".repeat(20)
        );
        assert_eq!(dims(&py), n(0, 0));
        // But a here-document *operator's* structure counts.
        assert_eq!(dims("cat <<EOF\nbody\nEOF\n(((((("), n(6, 6));
        // Code in double quotes counts.
        assert_eq!(dims("echo \"$( ( ( ls ) ) )\""), n(3, 0));
        // A closer drops what was opened after its opener (as brush does).
        assert_eq!(dims("\"$( { )\" (((("), n(4, 5));
    }

    #[test]
    fn shape_refuses_here_documents_that_hang_brush() {
        for h in [
            "p $(<<  ",
            "cat <<",
            "cat <<- ;",
            "x <<\nEOF",
            "a <<&&",
            "cat <<''  ",
            "${x:-<<- $(( )) ",
            "<<-    # x",
            "cat <<'EOF",
            "cat <<$x",
        ] {
            assert_eq!(
                shape(h).hazard,
                Some("unusual here-document delimiter"),
                "{h:?}"
            );
        }
        for h in [
            "|& $( [ <<    git push fi || then ${",
            "cat <<EOF",
            "cat <<EOF\nEOFX",
            "cat <<EOF\n\tEOF",
            "cat <<A <<B\nA\n",
        ] {
            assert_eq!(shape(h).hazard, Some("unterminated here-document"), "{h:?}");
        }
        for ok in [
            "cat <<EOF\nx\nEOF",
            "cat <<-'EOF'\n\tx\n\tEOF",
            "cat <<\"END\"\nEND",
            "cat <<\\EOF\nEOF\n",
            "cat <<< x",
            "cat << EOF >out\nEOF",
            "a<<<b",
            "cat <<A <<B\nA\nB",
            "echo $((1<<3)) $(( (x) << 2 ))",
            "((x <<= 1))",
            "echo '<<' \"<<\"",
        ] {
            assert_eq!(shape(ok).hazard, None, "{ok:?}");
        }
    }

    #[test]
    fn inputs_that_panic_brush_are_refused_first() {
        // Both overflow an integer parse inside brush-parser 0.4.0.
        assert_eq!(
            number_hazard("99999999999999999999>x"),
            Some("file descriptor number out of range")
        );
        assert_eq!(
            number_hazard("echo ~+99999999999999999999999"),
            Some("directory stack index out of range")
        );
        assert!(program("99999999999999999999>x").is_err());
        assert!(word("~99999999999999999999999").is_err());
        // Ordinary numbers pass.
        assert_eq!(number_hazard("echo 2>&1 3>x ~1 ~+2 ~-3 123"), None);
    }

    #[test]
    fn a_panic_inside_brush_is_contained() {
        // The backstop: the same input, straight to brush, panics; under
        // catch_unwind it becomes an error.
        let caught = catch_unwind(|| {
            let opts = options();
            Parser::new(std::io::Cursor::new(&b"99999999999999999999>x"[..]), &opts).parse_program()
        });
        assert!(
            caught.is_err(),
            "brush-parser no longer panics here: drop the number hazard?"
        );
    }
}
