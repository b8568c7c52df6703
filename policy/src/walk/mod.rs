//! Walks the AST: every simple command, every word, every substitution.

mod expand;

use brush_parser::ast::{
    AndOrList, Assignment, AssignmentName, AssignmentValue, Command, CommandPrefixOrSuffixItem,
    CompoundCommand, CompoundList, ExtendedTestExpr, FunctionDefinition, IoFileRedirectKind,
    IoFileRedirectTarget, IoRedirect, Pipeline, SeparatorOperator, SimpleCommand,
};

use crate::guardrails::{BRANCH_SCOPED, Targets};
use crate::parse;
use crate::words::{Arg, cut, is_fd_word, is_harmless_sink, quoted, shown};
use crate::{Analysis, Class, Workdir};

/// Re-parses, unwraps and operand scans nested inside each other.
const MAX_DEPTH: usize = 24;
/// Sum of the nesting depths ([`parse::shape`]) of the texts being parsed
/// on the current path (an inner text is counted again inside its outer
/// one, so this also bounds re-parse chains). Balanced nesting costs
/// brush-parser polynomial time: 16 levels of the worst shape (`if`) take
/// tens of milliseconds in a debug build.
const MAX_STRUCTURE: usize = 16;
/// Unclosed openers in one text: each doubles brush-parser's time.
const MAX_UNCLOSED: usize = 5;
/// Bytes handed to brush-parser over the whole line (re-parses included).
const MAX_PARSE_BYTES: usize = 512 * 1024;
/// Simple commands visited over the whole line.
const MAX_COMMANDS: usize = 4096;

pub(crate) fn analyze(line: &str, workdir: &Workdir) -> Analysis {
    let mut w = Walker {
        workdir: workdir.clone(),
        ..Walker::default()
    };
    if line.len() > parse::MAX_LINE_BYTES {
        w.opaque(
            format!("command line longer than {} bytes", parse::MAX_LINE_BYTES),
            None,
        );
    } else {
        w.program(line, &Stdin::Inherited);
    }
    w.finish()
}

/// Where a command's standard input comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stdin {
    /// Whatever the line itself was given.
    Inherited,
    /// The previous command of a pipeline.
    Pipe,
    /// A named file (`< script.sh`).
    File,
    /// Text known only at run time (process substitution, a heredoc or
    /// here-string with expansions); the template, if any, is its raw text.
    Computed(Option<String>),
    /// Literal text (a quoted heredoc, a here-string without expansions).
    Literal(String),
}

#[derive(Default)]
pub(crate) struct Walker {
    classes: Vec<(Class, String)>,
    why: Vec<String>,
    targets: Vec<Targets>,
    opaque: Vec<String>,
    computed_names: Vec<String>,
    depth: usize,
    structure: usize,
    bytes: usize,
    commands: usize,
    /// Functions defined so far in the line; calling one runs its body,
    /// which was walked at its definition.
    functions: Vec<String>,
    /// While > 0, opaque reasons are dropped: a template is being looked
    /// into for extra findings, and the line is already opaque.
    quiet: usize,
    /// What the host found in the working directory (see [`Workdir`]).
    pub(crate) workdir: Workdir,
    /// A `cd`, `pushd` or `popd` was seen: from here on the working
    /// directory may not be the one `workdir` describes.
    pub(crate) moved: bool,
}

impl Walker {
    fn finish(self) -> Analysis {
        let unique = |all: Vec<String>| {
            let mut kept: Vec<String> = Vec::new();
            for o in all {
                if !kept.contains(&o) {
                    kept.push(o);
                }
            }
            kept
        };
        Analysis {
            classes: self.classes,
            why: self.why,
            targets: self.targets,
            opaque: unique(self.opaque),
            computed_names: unique(self.computed_names),
        }
    }

    /// Record a command and its class (deduplicated).
    pub(crate) fn found(&mut self, class: Class, args: &[Arg], why: &str) {
        let command = shown(args);
        self.found_text(class, command, why);
    }

    pub(crate) fn found_text(&mut self, class: Class, command: String, why: &str) {
        // A branch-changing command whose branch is not worked out below
        // changes an unknown branch (guardrails treat that strictly).
        let targets = if BRANCH_SCOPED.contains(&class) {
            Targets::Unknown
        } else {
            Targets::NotApplicable
        };
        self.found_with(class, command, why, targets);
    }

    /// Record a command that changes the branches `targets` (SPEC H4's
    /// branch-scoped guardrails).
    pub(crate) fn found_targets(
        &mut self,
        class: Class,
        args: &[Arg],
        why: &str,
        targets: Targets,
    ) {
        self.found_with(class, shown(args), why, targets);
    }

    fn found_with(&mut self, class: Class, command: String, why: &str, targets: Targets) {
        if self
            .classes
            .iter()
            .any(|(c, t)| *c == class && *t == command)
        {
            return;
        }
        self.classes.push((class, command));
        self.why.push(why.to_string());
        self.targets.push(targets);
    }

    /// Mark the line opaque. When the hidden program has a visible
    /// `template` (`eval "git push $X"`), it is walked too, so its visible
    /// commands still count (`sudo` in it is still denied).
    pub(crate) fn opaque(&mut self, why: String, template: Option<&str>) {
        if self.quiet == 0 {
            self.opaque.push(cut(&why));
        }
        if let Some(t) = template {
            self.quiet += 1;
            self.program(t, &Stdin::Inherited);
            self.quiet -= 1;
        }
    }

    /// Mark the line opaque in name only: a command whose name is computed
    /// at run time (`$d/prog`, `"$CC" …`), its arguments walked like any
    /// other's (see [`crate::computed_name_decision`]).
    pub(crate) fn computed_name(&mut self, why: String) {
        if self.quiet == 0 {
            self.computed_names.push(cut(&why));
        }
    }

    /// Step one level deeper (re-parse, unwrap, operand scan); `false` when
    /// the line nests too deeply (then it is opaque).
    pub(crate) fn enter(&mut self) -> bool {
        if self.depth >= MAX_DEPTH {
            self.opaque(format!("nested more than {MAX_DEPTH} levels deep"), None);
            return false;
        }
        self.depth += 1;
        true
    }

    pub(crate) fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    pub(crate) fn is_function(&self, name: &str) -> bool {
        self.functions.iter().any(|f| f == name)
    }

    fn spend(&mut self, n: usize) -> bool {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > MAX_PARSE_BYTES {
            self.opaque(format!("more than {MAX_PARSE_BYTES} bytes to parse"), None);
            return false;
        }
        true
    }

    // ----- programs -----

    /// Parse `text` as shell and walk it, its commands reading `stdin`.
    pub(crate) fn program(&mut self, text: &str, stdin: &Stdin) {
        if !self.enter() {
            return;
        }
        self.program_inner(text, stdin);
        self.leave();
    }

    fn program_inner(&mut self, text: &str, stdin: &Stdin) {
        if !self.spend(text.len()) {
            return;
        }
        let nest = parse::shape(text);
        if !self.nesting_ok(nest) {
            return;
        }
        let nest = nest.depth;
        match parse::program(text) {
            Ok(program) => {
                self.structure += nest;
                for list in &program.complete_commands {
                    self.list(list, stdin);
                }
                self.structure -= nest;
            }
            Err(e) => self.opaque(format!("cannot parse {}: {e}", quoted(text)), None),
        }
    }

    /// Whether a text of this nesting may go to brush-parser here; if not,
    /// the line is opaque.
    fn nesting_ok(&mut self, nest: parse::Shape) -> bool {
        if self.structure + nest.depth > MAX_STRUCTURE {
            self.opaque(
                format!("nested more than {MAX_STRUCTURE} levels deep"),
                None,
            );
            false
        } else if nest.unclosed > MAX_UNCLOSED {
            self.opaque(
                format!("more than {MAX_UNCLOSED} unclosed brackets or keywords"),
                None,
            );
            false
        } else {
            true
        }
    }

    /// Split `text` into words the way the shell would (for `env -S`).
    /// `None` when it is not one plain simple command.
    pub(crate) fn split_words(&mut self, text: &str) -> Option<Vec<Arg>> {
        let nest = parse::shape(text);
        if !self.spend(text.len())
            || self.structure + nest.depth > MAX_STRUCTURE
            || nest.unclosed > MAX_UNCLOSED
        {
            return None;
        }
        let program = parse::program(text).ok()?;
        let [list] = program.complete_commands.as_slice() else {
            return None;
        };
        let [item] = list.0.as_slice() else {
            return None;
        };
        if !item.0.additional.is_empty() || item.0.first.seq.len() != 1 {
            return None;
        }
        let Command::Simple(sc) = &item.0.first.seq[0] else {
            return None;
        };
        let mut out = Vec::new();
        for item in sc.prefix.iter().flat_map(|p| p.0.iter()) {
            match item {
                CommandPrefixOrSuffixItem::AssignmentWord(_, w) => out.push(self.word(&w.value)),
                _ => return None,
            }
        }
        if let Some(w) = &sc.word_or_name {
            out.push(self.word(&w.value));
        }
        for item in sc.suffix.iter().flat_map(|s| s.0.iter()) {
            match item {
                CommandPrefixOrSuffixItem::Word(w)
                | CommandPrefixOrSuffixItem::AssignmentWord(_, w) => out.push(self.word(&w.value)),
                _ => return None,
            }
        }
        Some(out)
    }

    fn list(&mut self, list: &CompoundList, stdin: &Stdin) {
        for item in &list.0 {
            self.and_or(&item.0, stdin);
        }
    }

    fn and_or(&mut self, list: &AndOrList, stdin: &Stdin) {
        for (_, pipeline) in list.iter() {
            self.pipeline(pipeline, stdin);
        }
    }

    fn pipeline(&mut self, p: &Pipeline, stdin: &Stdin) {
        for (i, cmd) in p.seq.iter().enumerate() {
            let s = if i == 0 { stdin.clone() } else { Stdin::Pipe };
            self.command(cmd, &s);
        }
    }

    fn command(&mut self, cmd: &Command, stdin: &Stdin) {
        match cmd {
            Command::Simple(sc) => self.simple(sc, stdin),
            Command::Compound(cc, redirects) => {
                let mut stdin = stdin.clone();
                let mut writes = Vec::new();
                for r in redirects.iter().flat_map(|r| r.0.iter()) {
                    self.redirect(r, &mut writes, &mut stdin);
                }
                self.compound(cc, &stdin);
                for w in &writes {
                    self.write_target(w, "(compound command)");
                }
            }
            Command::Function(f) => self.function(f),
            Command::ExtendedTest(t, redirects) => {
                let mut stdin = stdin.clone();
                let mut writes = Vec::new();
                for r in redirects.iter().flat_map(|r| r.0.iter()) {
                    self.redirect(r, &mut writes, &mut stdin);
                }
                self.ext_test(&t.expr);
                self.found_text(Class::ReadOnly, "[[ … ]]".to_string(), "a test");
                for w in &writes {
                    self.write_target(w, "[[ … ]]");
                }
            }
        }
    }

    fn compound(&mut self, cc: &CompoundCommand, stdin: &Stdin) {
        match cc {
            CompoundCommand::Arithmetic(a) => self.scan_text(&a.expr.value),
            CompoundCommand::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.scan_text(&e.value);
                }
                self.list(&f.body.list, stdin);
            }
            CompoundCommand::BraceGroup(b) => self.list(&b.list, stdin),
            CompoundCommand::Subshell(s) => self.list(&s.list, stdin),
            CompoundCommand::ForClause(f) => {
                for w in f.values.iter().flatten() {
                    self.word(&w.value);
                }
                self.list(&f.body.list, stdin);
            }
            CompoundCommand::CaseClause(c) => {
                self.word(&c.value.value);
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value);
                    }
                    if let Some(cmd) = &item.cmd {
                        self.list(cmd, stdin);
                    }
                }
            }
            CompoundCommand::IfClause(i) => {
                self.list(&i.condition, stdin);
                self.list(&i.then, stdin);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.list(c, stdin);
                    }
                    self.list(&e.body, stdin);
                }
            }
            CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
                self.list(&w.0, stdin);
                self.list(&w.1.list, stdin);
            }
            CompoundCommand::Coprocess(c) => {
                if let Some(n) = &c.name {
                    self.word(&n.value);
                }
                self.command(&c.body, &Stdin::Inherited);
            }
        }
    }

    fn function(&mut self, f: &FunctionDefinition) {
        let name = self.word(&f.fname.value).text;
        if fork_bomb(&name, &f.body.0) {
            self.found_text(
                Class::SystemDestruction,
                format!("{name}() {{ … }}"),
                "fork bomb: the function starts copies of itself in a pipeline or in the background",
            );
        }
        if !self.is_function(&name) {
            self.functions.push(name);
        }
        let mut stdin = Stdin::Inherited;
        let mut writes = Vec::new();
        for r in f.body.1.iter().flat_map(|r| r.0.iter()) {
            self.redirect(r, &mut writes, &mut stdin);
        }
        self.compound(&f.body.0, &stdin);
        for w in &writes {
            self.write_target(w, "(function body)");
        }
    }

    fn ext_test(&mut self, e: &ExtendedTestExpr) {
        match e {
            ExtendedTestExpr::And(a, b) | ExtendedTestExpr::Or(a, b) => {
                self.ext_test(a);
                self.ext_test(b);
            }
            ExtendedTestExpr::Not(a) | ExtendedTestExpr::Parenthesized(a) => self.ext_test(a),
            ExtendedTestExpr::UnaryTest(_, w) => {
                self.word(&w.value);
            }
            ExtendedTestExpr::BinaryTest(_, a, b) => {
                self.word(&a.value);
                self.word(&b.value);
            }
        }
    }

    // ----- simple commands -----

    fn simple(&mut self, sc: &SimpleCommand, stdin: &Stdin) {
        self.commands += 1;
        if self.commands > MAX_COMMANDS {
            if self.commands == MAX_COMMANDS + 1 {
                self.opaque(format!("more than {MAX_COMMANDS} commands"), None);
            }
            return;
        }
        let mut stdin = stdin.clone();
        let mut args: Vec<Arg> = Vec::new();
        let mut assigns: Vec<Arg> = Vec::new();
        let mut writes: Vec<Arg> = Vec::new();
        let prefix = sc.prefix.iter().flat_map(|p| p.0.iter());
        for item in prefix {
            self.item(item, &mut assigns, &mut writes, &mut stdin);
        }
        if let Some(w) = &sc.word_or_name {
            let a = self.word(&w.value);
            args.push(a);
        }
        for item in sc.suffix.iter().flat_map(|s| s.0.iter()) {
            self.item(item, &mut args, &mut writes, &mut stdin);
        }
        if args.is_empty() {
            let shown_as = if assigns.is_empty() {
                "(redirections only)".to_string()
            } else {
                shown(&assigns)
            };
            if writes.is_empty() {
                self.found_text(Class::ReadOnly, shown_as, "sets shell variables only");
            }
        } else {
            crate::commands::classify(self, &args, &stdin, false);
            sockets(self, &args);
        }
        for w in &writes {
            let by = if args.is_empty() {
                ">".to_string()
            } else {
                shown(&args)
            };
            self.write_target(w, &by);
        }
    }

    fn item(
        &mut self,
        item: &CommandPrefixOrSuffixItem,
        args: &mut Vec<Arg>,
        writes: &mut Vec<Arg>,
        stdin: &mut Stdin,
    ) {
        match item {
            CommandPrefixOrSuffixItem::IoRedirect(r) => self.redirect(r, writes, stdin),
            CommandPrefixOrSuffixItem::Word(w) => {
                let a = self.word(&w.value);
                args.push(a);
            }
            CommandPrefixOrSuffixItem::AssignmentWord(a, _) => {
                let arg = self.assignment(a);
                args.push(arg);
            }
            CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                self.list(&sub.list, &Stdin::Inherited);
                args.push(Arg {
                    text: "<(…)".to_string(),
                    literal: false,
                    procsubst: true,
                });
            }
        }
    }

    /// Walk an assignment and render it (`NAME=value`).
    fn assignment(&mut self, a: &Assignment) -> Arg {
        let mut out = Arg {
            text: String::new(),
            literal: true,
            procsubst: false,
        };
        match &a.name {
            AssignmentName::VariableName(n) => out.text.push_str(n),
            AssignmentName::ArrayElementName(n, index) => {
                self.scan_text(index);
                out.text.push_str(&format!("{n}[{index}]"));
                out.literal = false;
            }
        }
        out.text.push_str(if a.append { "+=" } else { "=" });
        match &a.value {
            AssignmentValue::Scalar(w) => {
                let v = self.word(&w.value);
                out.literal &= v.literal;
                out.text.push_str(&v.text);
            }
            AssignmentValue::Array(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        self.word(&k.value);
                    }
                    self.word(&v.value);
                }
                out.text.push_str("(…)");
                out.literal = false;
            }
        }
        out
    }

    fn redirect(&mut self, r: &IoRedirect, writes: &mut Vec<Arg>, stdin: &mut Stdin) {
        match r {
            IoRedirect::File(fd, kind, target) => {
                let is_stdin = matches!(fd, None | Some(0));
                match target {
                    IoFileRedirectTarget::Filename(w) => {
                        let a = self.word(&w.value);
                        self.network_target(&a);
                        match kind {
                            IoFileRedirectKind::Read => {
                                if is_stdin {
                                    *stdin = Stdin::File;
                                }
                            }
                            IoFileRedirectKind::ReadAndWrite => {
                                if is_stdin {
                                    *stdin = Stdin::File;
                                }
                                writes.push(a);
                            }
                            IoFileRedirectKind::Write
                            | IoFileRedirectKind::Append
                            | IoFileRedirectKind::Clobber => writes.push(a),
                            IoFileRedirectKind::DuplicateOutput => {
                                if !is_fd_word(&a.text) {
                                    writes.push(a);
                                }
                            }
                            IoFileRedirectKind::DuplicateInput => {}
                        }
                    }
                    IoFileRedirectTarget::Fd(_) => {}
                    IoFileRedirectTarget::ProcessSubstitution(_, sub) => {
                        self.list(&sub.list, &Stdin::Inherited);
                        if is_stdin && matches!(kind, IoFileRedirectKind::Read) {
                            *stdin = Stdin::Computed(None);
                        }
                    }
                    IoFileRedirectTarget::Duplicate(w) => {
                        let a = self.word(&w.value);
                        if matches!(kind, IoFileRedirectKind::DuplicateOutput)
                            && !is_fd_word(&a.text)
                        {
                            writes.push(a);
                        }
                    }
                }
            }
            IoRedirect::HereDocument(fd, doc) => {
                let text = if doc.requires_expansion {
                    self.heredoc_body(&doc.doc.value)
                } else {
                    Arg::lit(&doc.doc.value)
                };
                if matches!(fd, None | Some(0)) {
                    *stdin = if text.literal {
                        Stdin::Literal(text.text)
                    } else {
                        Stdin::Computed(Some(text.text))
                    };
                }
            }
            IoRedirect::HereString(fd, w) => {
                let a = self.word(&w.value);
                if matches!(fd, None | Some(0)) {
                    *stdin = if a.literal {
                        Stdin::Literal(a.text)
                    } else {
                        Stdin::Computed(Some(a.text))
                    };
                }
            }
            IoRedirect::OutputAndError(w, _) => {
                let a = self.word(&w.value);
                writes.push(a);
            }
        }
    }

    fn network_target(&mut self, a: &Arg) {
        if a.text.starts_with("/dev/tcp/") || a.text.starts_with("/dev/udp/") {
            self.found_text(
                Class::AccessNetwork,
                format!("<> {}", a.text),
                "bash network redirect",
            );
        }
    }

    /// Classify an output redirect's target.
    pub(crate) fn write_target(&mut self, a: &Arg, by: &str) {
        let t = a.text.as_str();
        let shown_as = cut(&format!("{by} > {t}"));
        if is_harmless_sink(t) || t.starts_with("/dev/tcp/") || t.starts_with("/dev/udp/") {
            return;
        }
        if t.starts_with("/dev/") {
            self.found_text(Class::SystemDestruction, shown_as, "writes to a device");
        } else if t.starts_with("/proc/sys") || t.starts_with("/sys/") || t == "/proc/sysrq-trigger"
        {
            self.found_text(Class::ContainerEscape, shown_as, "writes kernel settings");
        } else {
            self.found_text(Class::Other, shown_as, "writes a file");
        }
    }
}

/// The docker/containerd/podman/cri-o API sockets: talking to one is
/// starting a container of one's choosing on the host.
fn sockets(w: &mut Walker, args: &[Arg]) {
    const SOCKETS: [&str; 4] = ["docker.sock", "containerd.sock", "podman.sock", "crio.sock"];
    if args
        .iter()
        .any(|a| SOCKETS.iter().any(|s| a.text.contains(s)))
    {
        w.found(
            Class::ContainerEscape,
            args,
            "talks to a container runtime socket",
        );
    }
}

/// Does `name`'s body start copies of itself in a pipeline or in the
/// background (`:(){ :|:& };:`)?
fn fork_bomb(name: &str, body: &CompoundCommand) -> bool {
    fn calls(cmd: &Command, name: &str) -> bool {
        match cmd {
            Command::Simple(sc) => sc.word_or_name.as_ref().is_some_and(|w| w.value == name),
            Command::Compound(CompoundCommand::BraceGroup(b), _) => list_calls(&b.list, name),
            Command::Compound(CompoundCommand::Subshell(s), _) => list_calls(&s.list, name),
            _ => false,
        }
    }
    fn list_calls(list: &CompoundList, name: &str) -> bool {
        list.0.iter().any(|i| {
            i.0.iter()
                .any(|(_, p)| p.seq.iter().any(|c| calls(c, name)))
        })
    }
    fn spawns(list: &CompoundList, name: &str) -> bool {
        list.0.iter().any(|item| {
            let is_async = matches!(item.1, SeparatorOperator::Async);
            item.0.iter().any(|(_, p)| {
                let hits = p.seq.iter().filter(|c| calls(c, name)).count();
                (hits > 0 && (is_async || p.seq.len() > 1))
                    || p.seq.iter().any(|c| match c {
                        Command::Compound(CompoundCommand::BraceGroup(b), _) => {
                            spawns(&b.list, name)
                        }
                        Command::Compound(CompoundCommand::Subshell(s), _) => spawns(&s.list, name),
                        _ => false,
                    })
            })
        })
    }
    match body {
        CompoundCommand::BraceGroup(b) => spawns(&b.list, name),
        CompoundCommand::Subshell(s) => spawns(&s.list, name),
        _ => false,
    }
}
