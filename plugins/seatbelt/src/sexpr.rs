//! A small reader and checker for the Seatbelt profile language (SBPL, a
//! Scheme dialect), enough to prove a generated profile is well formed and to
//! ask what it decides.
//!
//! - [`parse`] reads S-expressions: lists, symbols, and strings whose only
//!   escapes are `\\` and `\"` (the only ones the generator writes). Anything
//!   else — an unbalanced parenthesis, an unterminated string, a raw control
//!   character, `#` syntax — is an error with its byte offset.
//! - [`CheckedProfile::check`] proves the shape the generator promises:
//!   `(version 1)` first, then only `allow`/`deny` rules with known filters;
//!   every `literal`/`subpath`/`path-literal` argument is a `(param …)` (no
//!   path is spliced into the text); every `(param …)` is one of the `-D`
//!   parameters and every parameter is used; every regex compiles in the
//!   dialect of [`Regex`].
//! - Queries: [`CheckedProfile::rules`], [`CheckedProfile::has_rule`],
//!   [`CheckedProfile::param_named`] and [`CheckedProfile::decide`], which
//!   evaluates the profile for one operation the way Seatbelt does: the last
//!   matching rule wins, `(allow default)` when none matches.
//!
//! The generator runs the checker on every profile it returns, so a malformed
//! profile never reaches `sandbox-exec`; the tests use the queries to prove
//! each required rule is there.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One S-expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sexpr {
    /// A bare word: `allow`, `file-write*`, `1`.
    Symbol(String),
    /// A string literal, unescaped.
    Str(String),
    /// A parenthesised list.
    List(Vec<Sexpr>),
}

impl Sexpr {
    /// A symbol.
    pub fn sym(s: &str) -> Self {
        Self::Symbol(s.to_owned())
    }

    /// A string.
    pub fn str(s: &str) -> Self {
        Self::Str(s.to_owned())
    }

    /// `(param "NAME")`.
    pub fn param(name: &str) -> Self {
        Self::List(vec![Self::sym("param"), Self::str(name)])
    }

    /// `(head arg)`, e.g. `Sexpr::call("literal", Sexpr::param("P0"))`.
    pub fn call(head: &str, arg: Sexpr) -> Self {
        Self::List(vec![Self::sym(head), arg])
    }

    /// Parses exactly one expression.
    pub fn parse_one(text: &str) -> Result<Self, ParseError> {
        let mut all = parse(text)?;
        match (all.pop(), all.is_empty()) {
            (Some(one), true) => Ok(one),
            _ => Err(ParseError {
                offset: 0,
                reason: "expected exactly one expression",
            }),
        }
    }

    /// The head symbol of a list.
    pub fn head(&self) -> Option<&str> {
        match self {
            Self::List(items) => match items.first() {
                Some(Self::Symbol(s)) => Some(s),
                _ => None,
            },
            _ => None,
        }
    }

    /// The items of a list after its head.
    pub fn args(&self) -> &[Sexpr] {
        match self {
            Self::List(items) if !items.is_empty() => &items[1..],
            _ => &[],
        }
    }
}

impl fmt::Display for Sexpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Symbol(s) => f.write_str(s),
            Self::Str(s) => write!(f, "\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
            Self::List(items) => {
                f.write_str("(")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str(")")
            }
        }
    }
}

/// Why a text is not well formed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// Byte offset of the problem.
    pub offset: usize,
    /// What is wrong.
    pub reason: &'static str,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.reason)
    }
}

impl std::error::Error for ParseError {}

/// Reads every expression of a text.
pub fn parse(text: &str) -> Result<Vec<Sexpr>, ParseError> {
    let mut stack: Vec<(usize, Vec<Sexpr>)> = Vec::new();
    let mut top = Vec::new();
    let mut chars = text.char_indices().peekable();
    let err = |offset, reason| Err(ParseError { offset, reason });
    while let Some((at, c)) = chars.next() {
        let item = match c {
            ' ' | '\t' | '\n' | '\r' => continue,
            ';' => {
                for (_, c) in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
                continue;
            }
            '(' => {
                stack.push((at, Vec::new()));
                continue;
            }
            ')' => match stack.pop() {
                Some((_, items)) => Sexpr::List(items),
                None => return err(at, "`)` without a matching `(`"),
            },
            '"' => {
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None => return err(at, "unterminated string"),
                        Some((_, '"')) => break,
                        Some((e, '\\')) => match chars.next() {
                            Some((_, '\\')) => s.push('\\'),
                            Some((_, '"')) => s.push('"'),
                            _ => return err(e, "unsupported escape in a string"),
                        },
                        Some((e, c)) if c.is_control() => {
                            return err(e, "control character in a string");
                        }
                        Some((_, c)) => s.push(c),
                    }
                }
                Sexpr::Str(s)
            }
            '#' => return err(at, "`#` syntax is not used by the generator"),
            c if c.is_control() => return err(at, "control character"),
            c => {
                let mut s = String::from(c);
                while let Some(&(_, n)) = chars.peek() {
                    if n.is_whitespace() || matches!(n, '(' | ')' | '"' | ';') || n.is_control() {
                        break;
                    }
                    s.push(n);
                    chars.next();
                }
                Sexpr::Symbol(s)
            }
        };
        match stack.last_mut() {
            Some((_, items)) => items.push(item),
            None => top.push(item),
        }
    }
    if let Some((at, _)) = stack.last() {
        return err(*at, "`(` never closed");
    }
    Ok(top)
}

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// `allow`.
    Allow,
    /// `deny`.
    Deny,
}

/// One top-level rule: `(allow|deny op… filter… (with message "…"))`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Allow or deny.
    pub decision: Decision,
    /// The operations, e.g. `file-write*`.
    pub ops: Vec<String>,
    /// The filters; the rule applies when any one matches, or always when
    /// there is none.
    pub filters: Vec<Sexpr>,
    /// The `(with message …)` text, if any.
    pub message: Option<String>,
    /// Index among the top-level forms (later wins).
    pub index: usize,
}

/// What a profile is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// A file operation on a path (`dir`: whether it is a directory).
    Path {
        /// The path, as Seatbelt sees it (resolved).
        path: &'a str,
        /// Whether the path is a directory.
        dir: bool,
    },
    /// A connection to `host:port`.
    RemoteIp(&'a str),
    /// A connection to a unix socket.
    UnixSocket(&'a str),
    /// A Mach service lookup.
    GlobalName(&'a str),
    /// An operation with no argument (`lsopen`, `appleevent-send`).
    Plain,
}

impl<'a> Request<'a> {
    /// A file (not a directory).
    pub fn file(path: &'a str) -> Self {
        Self::Path { path, dir: false }
    }

    /// A directory.
    pub fn dir(path: &'a str) -> Self {
        Self::Path { path, dir: true }
    }
}

/// Why a profile does not have the promised shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckError(pub String);

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CheckError {}

impl From<ParseError> for CheckError {
    fn from(e: ParseError) -> Self {
        Self(format!("not well formed: {e}"))
    }
}

/// A profile proven well formed, with its parameters.
#[derive(Debug, Clone)]
pub struct CheckedProfile {
    rules: Vec<Rule>,
    params: BTreeMap<String, String>,
    default: Decision,
}

const FILTERS: &[&str] = &[
    "literal",
    "subpath",
    "regex",
    "require-all",
    "require-any",
    "require-not",
    "remote",
    "global-name",
    "global-name-regex",
    "vnode-type",
];

impl CheckedProfile {
    /// Parses and checks a profile against its `-D` parameters.
    pub fn check(text: &str, params: &[(String, String)]) -> Result<Self, CheckError> {
        let forms = parse(text)?;
        let mut map = BTreeMap::new();
        for (name, value) in params {
            if map.insert(name.clone(), value.clone()).is_some() {
                return Err(CheckError(format!("parameter {name} given twice")));
            }
        }
        let mut used = BTreeSet::new();
        let mut rules = Vec::new();
        let mut default = None;
        match forms.first() {
            Some(first) if *first == Sexpr::parse_one("(version 1)")? => {}
            _ => return Err(CheckError("the profile must start with (version 1)".into())),
        }
        for (index, form) in forms.iter().enumerate().skip(1) {
            let decision = match form.head() {
                Some("allow") => Decision::Allow,
                Some("deny") => Decision::Deny,
                _ => return Err(CheckError(format!("not a rule: {form}"))),
            };
            let mut ops = Vec::new();
            let mut filters = Vec::new();
            let mut message = None;
            for arg in form.args() {
                match arg {
                    Sexpr::Symbol(op) if filters.is_empty() && message.is_none() => {
                        ops.push(op.clone());
                    }
                    Sexpr::List(_) if arg.head() == Some("with") => match arg.args() {
                        [Sexpr::Symbol(m), Sexpr::Str(text)] if m == "message" => {
                            message = Some(text.clone());
                        }
                        _ => return Err(CheckError(format!("bad modifier {arg} in {form}"))),
                    },
                    Sexpr::List(_) if message.is_none() => {
                        check_filter(arg, &map, &mut used)?;
                        filters.push(arg.clone());
                    }
                    _ => return Err(CheckError(format!("unexpected {arg} in {form}"))),
                }
            }
            if ops.is_empty() {
                return Err(CheckError(format!("rule without an operation: {form}")));
            }
            if ops.iter().any(|o| o == "default") {
                if ops.len() != 1 || !filters.is_empty() {
                    return Err(CheckError(format!("bad default rule: {form}")));
                }
                if default.replace(decision).is_some() {
                    return Err(CheckError("two default rules".into()));
                }
                continue;
            }
            rules.push(Rule {
                decision,
                ops,
                filters,
                message,
                index,
            });
        }
        let Some(default) = default else {
            return Err(CheckError("no default rule".into()));
        };
        if let Some(unused) = map.keys().find(|k| !used.contains(*k)) {
            return Err(CheckError(format!("parameter {unused} is never used")));
        }
        Ok(Self {
            rules,
            params: map,
            default,
        })
    }

    /// Every rule but the default one, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The default decision.
    pub fn default_decision(&self) -> Decision {
        self.default
    }

    /// The name of the parameter holding exactly this value.
    pub fn param_named(&self, value: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(_, v)| v.as_str() == value)
            .map(|(k, _)| k.as_str())
    }

    /// The value of a parameter.
    pub fn param_value(&self, name: &str) -> Option<&str> {
        self.params.get(name).map(String::as_str)
    }

    /// Whether a rule with this decision lists `op` and has `filter` among
    /// its filters (structurally equal).
    pub fn has_rule(&self, decision: Decision, op: &str, filter: &Sexpr) -> bool {
        self.find_rule(decision, op, filter).is_some()
    }

    /// The first such rule.
    pub fn find_rule(&self, decision: Decision, op: &str, filter: &Sexpr) -> Option<&Rule> {
        self.rules.iter().find(|r| {
            r.decision == decision && r.ops.iter().any(|o| o == op) && r.filters.contains(filter)
        })
    }

    /// Whether a rule with this decision lists `op` with no filter at all.
    pub fn has_unfiltered(&self, decision: Decision, op: &str) -> bool {
        self.rules.iter().any(|r| {
            r.decision == decision && r.filters.is_empty() && r.ops.iter().any(|o| o == op)
        })
    }

    /// What Seatbelt decides for `op` (e.g. `file-write-create`): the last
    /// rule whose operation covers `op` and whose filter matches wins.
    pub fn decide(&self, op: &str, request: Request<'_>) -> Decision {
        self.deciding_rule(op, request)
            .map_or(self.default, |r| r.decision)
    }

    /// The rule that decides, if any does.
    pub fn deciding_rule(&self, op: &str, request: Request<'_>) -> Option<&Rule> {
        self.rules.iter().rev().find(|r| {
            r.ops.iter().any(|o| op_covers(o, op))
                && (r.filters.is_empty() || r.filters.iter().any(|f| self.matches(f, request)))
        })
    }

    fn value(&self, e: &Sexpr) -> Option<String> {
        value_of(e, &self.params)
    }

    fn matches(&self, filter: &Sexpr, request: Request<'_>) -> bool {
        let args = filter.args();
        let first = args.first().and_then(|a| self.value(a));
        match (filter.head(), request) {
            (Some("require-all"), _) => args.iter().all(|f| self.matches(f, request)),
            (Some("require-any"), _) => args.iter().any(|f| self.matches(f, request)),
            (Some("require-not"), _) => args.first().is_some_and(|f| !self.matches(f, request)),
            (Some("literal"), Request::Path { path, .. }) => first.as_deref() == Some(path),
            (Some("subpath"), Request::Path { path, .. }) => first.is_some_and(|root| {
                path == root
                    || root == "/"
                    || path
                        .strip_prefix(root.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            }),
            (Some("regex"), Request::Path { path, .. }) => {
                first.is_some_and(|re| Regex::new(&re).is_ok_and(|re| re.is_match(path)))
            }
            (Some("vnode-type"), Request::Path { dir, .. }) => {
                matches!(args, [Sexpr::Symbol(t)] if (t == "DIRECTORY") == dir)
            }
            (Some("remote"), _) => match (args, request) {
                ([Sexpr::Symbol(kind), addr], Request::RemoteIp(target)) if kind == "ip" => {
                    self.value(addr).as_deref() == Some(target)
                }
                ([Sexpr::Symbol(kind), inner], Request::UnixSocket(target))
                    if kind == "unix-socket" && inner.head() == Some("path-literal") =>
                {
                    inner.args().first().and_then(|a| self.value(a)).as_deref() == Some(target)
                }
                _ => false,
            },
            (Some("global-name"), Request::GlobalName(name)) => first.as_deref() == Some(name),
            (Some("global-name-regex"), Request::GlobalName(name)) => {
                first.is_some_and(|re| Regex::new(&re).is_ok_and(|re| re.is_match(name)))
            }
            _ => false,
        }
    }
}

/// Whether rule operation `rule_op` covers the requested `op`: equal, or a
/// `prefix*` wildcard (`file-write*` covers `file-write-unlink`).
pub fn op_covers(rule_op: &str, op: &str) -> bool {
    match rule_op.strip_suffix('*') {
        Some(prefix) => op.starts_with(prefix),
        None => rule_op == op,
    }
}

fn value_of(e: &Sexpr, params: &BTreeMap<String, String>) -> Option<String> {
    match e {
        Sexpr::Str(s) => Some(s.clone()),
        Sexpr::List(_) if e.head() == Some("param") => match e.args() {
            [Sexpr::Str(name)] => params.get(name).cloned(),
            _ => None,
        },
        Sexpr::List(_) if e.head() == Some("string-append") => {
            let mut out = String::new();
            for part in e.args() {
                out.push_str(&value_of(part, params)?);
            }
            Some(out)
        }
        _ => None,
    }
}

/// Checks one filter; records the parameters it uses.
fn check_filter(
    f: &Sexpr,
    params: &BTreeMap<String, String>,
    used: &mut BTreeSet<String>,
) -> Result<(), CheckError> {
    let bad = |why: &str| Err(CheckError(format!("{why}: {f}")));
    let head = f.head().unwrap_or("");
    if !FILTERS.contains(&head) {
        return bad("unknown filter");
    }
    let args = f.args();
    match head {
        "require-all" | "require-any" => {
            if args.is_empty() {
                return bad("empty combination");
            }
            for a in args {
                check_filter(a, params, used)?;
            }
        }
        "require-not" => match args {
            [one] => check_filter(one, params, used)?,
            _ => return bad("require-not takes one filter"),
        },
        "literal" | "subpath" => match args {
            [p] if p.head() == Some("param") => {
                check_param(p, params, used)?;
            }
            _ => return bad("a path must be a (param …), never text"),
        },
        "regex" | "global-name-regex" => match args {
            [e] => {
                let text = check_string_expr(e, params, used)?;
                if !text.starts_with('^') {
                    return bad("a regex must be anchored with ^");
                }
                if let Err(why) = Regex::new(&text) {
                    return Err(CheckError(format!("regex {text:?}: {why}")));
                }
            }
            _ => return bad("regex takes one argument"),
        },
        "global-name" => match args {
            [Sexpr::Str(_)] => {}
            _ => return bad("global-name takes one string"),
        },
        "vnode-type" => match args {
            [Sexpr::Symbol(_)] => {}
            _ => return bad("vnode-type takes one symbol"),
        },
        "remote" => match args {
            [Sexpr::Symbol(k), Sexpr::Str(addr)] if k == "ip" => {
                let port = addr.strip_prefix("localhost:").unwrap_or("");
                if port.parse::<u16>().is_err() {
                    return bad("only localhost:<port> is ever allowed");
                }
            }
            [Sexpr::Symbol(k), inner] if k == "unix-socket" => match inner.args() {
                [p] if inner.head() == Some("path-literal") && p.head() == Some("param") => {
                    check_param(p, params, used)?;
                }
                _ => return bad("a unix socket must be (path-literal (param …))"),
            },
            _ => return bad("unknown remote filter"),
        },
        _ => return bad("unknown filter"),
    }
    Ok(())
}

fn check_param(
    p: &Sexpr,
    params: &BTreeMap<String, String>,
    used: &mut BTreeSet<String>,
) -> Result<String, CheckError> {
    match p.args() {
        [Sexpr::Str(name)] => match params.get(name) {
            Some(v) => {
                used.insert(name.clone());
                Ok(v.clone())
            }
            None => Err(CheckError(format!("parameter {name} is not given"))),
        },
        _ => Err(CheckError(format!("bad parameter reference {p}"))),
    }
}

fn check_string_expr(
    e: &Sexpr,
    params: &BTreeMap<String, String>,
    used: &mut BTreeSet<String>,
) -> Result<String, CheckError> {
    match e {
        Sexpr::Str(s) => Ok(s.clone()),
        _ if e.head() == Some("param") => check_param(e, params, used),
        _ if e.head() == Some("string-append") => {
            let mut out = String::new();
            for part in e.args() {
                out.push_str(&check_string_expr(part, params, used)?);
            }
            Ok(out)
        }
        _ => Err(CheckError(format!("not a string expression: {e}"))),
    }
}

// ---------------------------------------------------------------------------
// The regex dialect the generator writes (a subset of POSIX ERE).

/// A compiled regex of the subset the generator writes: `^`, `$`, `.`,
/// bracket expressions (`[^/]`, `[0-9]`), groups with `|`, the quantifiers
/// `*`, `+`, `?`, and `\` before any character to take it literally. Matching
/// is a search (like Seatbelt's), by sets of positions: linear in the
/// pattern, no backtracking blow-up.
#[derive(Debug, Clone)]
pub struct Regex {
    alt: Vec<Vec<Node>>,
}

/// A pattern outside the subset [`Regex`] compiles.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegexError {
    #[error("unbalanced `)` at {at}")]
    UnbalancedClose { at: usize },
    #[error("`)` without `(`")]
    CloseWithoutOpen,
    #[error("`(` never closed")]
    GroupNeverClosed,
    #[error("trailing `\\`")]
    TrailingBackslash,
    #[error("empty alternative")]
    EmptyAlternative,
    #[error("quantifier without an atom")]
    QuantifierWithoutAtom,
    #[error("quantifier on a quantifier or an anchor")]
    QuantifierOnQuantifier,
    #[error("`{0}` is outside the supported dialect")]
    Unsupported(char),
    #[error("`[` never closed")]
    ClassNeverClosed,
}

#[derive(Debug, Clone)]
enum Node {
    Char(char),
    Any,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    Start,
    End,
    Group(Vec<Vec<Node>>),
    Repeat {
        node: Box<Node>,
        min_one: bool,
        max_one: bool,
    },
}

impl Regex {
    /// Compiles a pattern; refuses what is outside the subset.
    pub fn new(pattern: &str) -> Result<Self, RegexError> {
        let chars: Vec<char> = pattern.chars().collect();
        let mut at = 0;
        let alt = parse_alt(&chars, &mut at, 0)?;
        if at != chars.len() {
            return Err(RegexError::UnbalancedClose { at });
        }
        Ok(Self { alt })
    }

    /// Whether the pattern matches somewhere in `text`.
    pub fn is_match(&self, text: &str) -> bool {
        let chars: Vec<char> = text.chars().collect();
        let starts: BTreeSet<usize> = (0..=chars.len()).collect();
        !step_alt(&self.alt, &chars, &starts).is_empty()
    }
}

fn parse_alt(p: &[char], at: &mut usize, depth: usize) -> Result<Vec<Vec<Node>>, RegexError> {
    let mut alt = vec![Vec::new()];
    while *at < p.len() {
        let c = p[*at];
        *at += 1;
        let node = match c {
            '|' => {
                alt.push(Vec::new());
                continue;
            }
            ')' if depth > 0 => return Ok(alt),
            ')' => return Err(RegexError::CloseWithoutOpen),
            '(' => {
                let inner = parse_alt(p, at, depth + 1)?;
                if p.get(*at - 1) != Some(&')') {
                    return Err(RegexError::GroupNeverClosed);
                }
                Node::Group(inner)
            }
            '^' => Node::Start,
            '$' => Node::End,
            '.' => Node::Any,
            '\\' => {
                let Some(&n) = p.get(*at) else {
                    return Err(RegexError::TrailingBackslash);
                };
                *at += 1;
                Node::Char(n)
            }
            '[' => parse_class(p, at)?,
            '*' | '+' | '?' => {
                let seq = alt.last_mut().ok_or(RegexError::EmptyAlternative)?;
                let prev = seq.pop().ok_or(RegexError::QuantifierWithoutAtom)?;
                if matches!(prev, Node::Repeat { .. } | Node::Start | Node::End) {
                    return Err(RegexError::QuantifierOnQuantifier);
                }
                Node::Repeat {
                    node: Box::new(prev),
                    min_one: c == '+',
                    max_one: c == '?',
                }
            }
            '{' | '}' | ']' => return Err(RegexError::Unsupported(c)),
            c => Node::Char(c),
        };
        if let Some(seq) = alt.last_mut() {
            seq.push(node);
        }
    }
    if depth > 0 {
        return Err(RegexError::GroupNeverClosed);
    }
    Ok(alt)
}

fn parse_class(p: &[char], at: &mut usize) -> Result<Node, RegexError> {
    let negated = p.get(*at) == Some(&'^');
    if negated {
        *at += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    loop {
        let Some(&c) = p.get(*at) else {
            return Err(RegexError::ClassNeverClosed);
        };
        *at += 1;
        if c == ']' && !first {
            break;
        }
        first = false;
        if p.get(*at) == Some(&'-') && p.get(*at + 1).is_some_and(|&e| e != ']') {
            let end = p[*at + 1];
            *at += 2;
            ranges.push((c, end));
        } else {
            ranges.push((c, c));
        }
    }
    Ok(Node::Class { negated, ranges })
}

fn step_alt(alt: &[Vec<Node>], text: &[char], from: &BTreeSet<usize>) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    for seq in alt {
        let mut cur = from.clone();
        for node in seq {
            cur = step(node, text, &cur);
            if cur.is_empty() {
                break;
            }
        }
        out.extend(cur);
    }
    out
}

fn step(node: &Node, text: &[char], from: &BTreeSet<usize>) -> BTreeSet<usize> {
    let one = |pred: &dyn Fn(char) -> bool| -> BTreeSet<usize> {
        from.iter()
            .filter(|&&i| text.get(i).is_some_and(|&c| pred(c)))
            .map(|i| i + 1)
            .collect()
    };
    match node {
        Node::Char(c) => one(&|x| x == *c),
        Node::Any => one(&|_| true),
        Node::Class { negated, ranges } => {
            one(&|x| ranges.iter().any(|&(a, b)| a <= x && x <= b) != *negated)
        }
        Node::Start => from.iter().copied().filter(|&i| i == 0).collect(),
        Node::End => from.iter().copied().filter(|&i| i == text.len()).collect(),
        Node::Group(alt) => step_alt(alt, text, from),
        Node::Repeat {
            node,
            min_one,
            max_one,
        } => {
            let first = step(node, text, from);
            let mut all: BTreeSet<usize> = if *min_one {
                BTreeSet::new()
            } else {
                from.clone()
            };
            all.extend(first.iter().copied());
            if *max_one {
                return all;
            }
            let mut frontier = first;
            while !frontier.is_empty() {
                let next: BTreeSet<usize> = step(node, text, &frontier)
                    .into_iter()
                    .filter(|i| !all.contains(i))
                    .collect();
                all.extend(next.iter().copied());
                frontier = next;
            }
            all
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_lists_strings_symbols_and_comments() {
        let forms =
            parse("(version 1) ; a comment\n(deny file-read* (literal \"/a \\\"b\\\\\"))").unwrap();
        assert_eq!(forms.len(), 2);
        assert_eq!(forms[1].head(), Some("deny"));
        assert_eq!(
            forms[1].args()[1],
            Sexpr::call("literal", Sexpr::str("/a \"b\\"))
        );
        assert_eq!(
            forms[1].to_string(),
            "(deny file-read* (literal \"/a \\\"b\\\\\"))"
        );
    }

    #[test]
    fn refuses_malformed_text() {
        for (text, reason) in [
            ("(a (b)", "never closed"),
            ("(a))", "without a matching"),
            ("(a \"b)", "unterminated"),
            ("(a \"b\\n\")", "unsupported escape"),
            ("(a \"b\nc\")", "control character"),
            ("(regex #\"^/x\")", "`#` syntax"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.reason.contains(reason), "{text}: {err}");
        }
    }

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn checks_the_promised_shape() {
        let ok = "(version 1)\n(allow default)\n(deny file-write* (subpath (param \"P0\")) (with message \"T\"))";
        let p = params(&[("P0", "/w")]);
        let checked = CheckedProfile::check(ok, &p).unwrap();
        assert_eq!(checked.rules().len(), 1);
        assert_eq!(checked.rules()[0].message.as_deref(), Some("T"));
        for (text, given, why) in [
            ("(allow default)", p.clone(), "(version 1)"),
            (
                "(version 1)(allow default)(deny file-write* (subpath \"/w\"))",
                vec![],
                "never text",
            ),
            (
                "(version 1)(allow default)(deny file-write* (subpath (param \"P1\")))",
                p.clone(),
                "not given",
            ),
            ("(version 1)(allow default)", p.clone(), "never used"),
            (
                "(version 1)(allow default)(deny file-write* (subpth (param \"P0\")))",
                p.clone(),
                "unknown filter",
            ),
            (
                "(version 1)(allow default)(deny file-write* (regex \"/x\"))",
                vec![],
                "anchored",
            ),
            (
                "(version 1)(allow default)(deny file-write* (regex \"^/x{2}\"))",
                vec![],
                "dialect",
            ),
            (
                "(version 1)(allow default)(allow network-outbound (remote ip \"*:443\"))",
                vec![],
                "localhost",
            ),
            ("(version 1)(deny file-read*)", vec![], "no default"),
        ] {
            let err = CheckedProfile::check(text, &given).unwrap_err();
            assert!(err.0.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn the_last_matching_rule_wins() {
        let text = "(version 1)(allow default)\
            (deny file-write*)\
            (allow file-write* (subpath (param \"W\")))\
            (deny file-write* (regex (string-append \"^\" (param \"R\") \"(/[^/]+)*/\\\\.env$\")))\
            (deny file-write-unlink (literal (param \"W\")))";
        let p = params(&[("W", "/w"), ("R", "/w")]);
        let c = CheckedProfile::check(text, &p).unwrap();
        assert_eq!(
            c.decide("file-write-create", Request::file("/w/a")),
            Decision::Allow
        );
        assert_eq!(
            c.decide("file-write-create", Request::file("/w/a/.env")),
            Decision::Deny
        );
        assert_eq!(
            c.decide("file-write-create", Request::file("/x")),
            Decision::Deny
        );
        assert_eq!(
            c.decide("file-read-data", Request::file("/x")),
            Decision::Allow
        );
        assert_eq!(
            c.decide("file-write-unlink", Request::dir("/w")),
            Decision::Deny
        );
        assert_eq!(
            c.decide("file-write-unlink", Request::dir("/w/a")),
            Decision::Allow
        );
        assert_eq!(
            c.decide("file-write-create", Request::file("/wx")),
            Decision::Deny,
            "subpath is by component"
        );
    }

    #[test]
    fn regex_subset() {
        let m = |re: &str, s: &str| Regex::new(re).unwrap().is_match(s);
        assert!(m("^/a(/[^/]+)*/\\.env$", "/a/.env"));
        assert!(m("^/a(/[^/]+)*/\\.env$", "/a/b/c/.env"));
        assert!(!m("^/a(/[^/]+)*/\\.env$", "/a/b/xenv"));
        assert!(!m("^/a(/[^/]+)*/\\.env$", "/a/.env.local"));
        assert!(m("^/a/[^/]*\\.pem$", "/a/x.pem"));
        assert!(!m("^/a/[^/]*\\.pem$", "/a/b/x.pem"));
        assert!(m("^/a/(node_modules|\\.venv)/x$", "/a/.venv/x"));
        assert!(!m("^/a/(node_modules|\\.venv)/x$", "/a/xvenv/x"));
        assert!(m("^/dev/ttys[0-9]+$", "/dev/ttys003"));
        assert!(!m("^/dev/ttys[0-9]+$", "/dev/ttys"));
        assert!(m("x?y", "y"));
        assert!(m("^a.c$", "abc"));
        assert!(m("b", "abc"), "unanchored is a search");
        assert!(!m("^b", "abc"));
        assert!(m(
            "^\\(\\)\\[\\]\\*\\+\\?\\{\\}\\|\\^\\$\\\\$",
            "()[]*+?{}|^$\\"
        ));
        for bad in ["(a", "a)", "*a", "a{2}", "[a", "a\\"] {
            assert!(Regex::new(bad).is_err(), "{bad}");
        }
    }
}
