//! The words of a command: each word's value as far as it is known, and every
//! substitution inside it (command and process substitutions, parameter
//! expansions' operands, arithmetic text) walked.

use brush_parser::word::{Parameter, ParameterExpr, WordPiece, WordPieceWithSource};

use super::{Stdin, Walker};
use crate::parse;
use crate::words::{Arg, ansi_c, backquoted, has_glob, quoted};

impl Walker {
    /// Analyse one raw word: walk every substitution in it, and return its
    /// value as far as it is known.
    pub(crate) fn word(&mut self, raw: &str) -> Arg {
        let mut out = Arg {
            text: String::new(),
            literal: true,
            procsubst: false,
        };
        if raw.is_empty() {
            return out;
        }
        if !self.spend(raw.len()) {
            out.literal = false;
            out.text = raw.to_string();
            return out;
        }
        match parse::word(raw) {
            Ok(pieces) => self.pieces(&pieces, raw, false, &mut out),
            Err(e) => {
                self.opaque(format!("cannot parse word {}: {e}", quoted(raw)), None);
                out.text = raw.to_string();
                out.literal = false;
            }
        }
        out
    }

    pub(super) fn heredoc_body(&mut self, raw: &str) -> Arg {
        let mut out = Arg {
            text: String::new(),
            literal: true,
            procsubst: false,
        };
        if !self.spend(raw.len()) {
            out.literal = false;
            out.text = raw.to_string();
            return out;
        }
        match parse::heredoc(raw) {
            Ok(pieces) => self.pieces(&pieces, raw, true, &mut out),
            Err(e) => {
                self.opaque(format!("cannot parse heredoc: {e}"), None);
                out.text = raw.to_string();
                out.literal = false;
            }
        }
        out
    }

    /// `src` is the text the pieces were parsed from (their offsets point
    /// into it).
    fn pieces(
        &mut self,
        pieces: &[WordPieceWithSource],
        src: &str,
        quoted_ctx: bool,
        out: &mut Arg,
    ) {
        for p in pieces {
            match &p.piece {
                WordPiece::Text(t) => {
                    if !quoted_ctx && has_glob(t) {
                        out.literal = false;
                    }
                    out.text.push_str(t);
                }
                WordPiece::SingleQuotedText(t) => out.text.push_str(t),
                WordPiece::AnsiCQuotedText(t) => out.text.push_str(&ansi_c(t)),
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, src, true, out)
                }
                WordPiece::TildeExpansion(t) => {
                    use brush_parser::word::TildeExpr;
                    match t {
                        TildeExpr::Home => out.text.push('~'),
                        TildeExpr::UserHome(u) => {
                            out.text.push('~');
                            out.text.push_str(u);
                        }
                        _ => {
                            out.text.push_str("~+");
                            out.literal = false;
                        }
                    }
                }
                WordPiece::ParameterExpansion(expr) => {
                    out.literal = false;
                    let r = self.parameter(expr);
                    out.text.push_str(&r);
                }
                WordPiece::CommandSubstitution(s) => {
                    out.literal = false;
                    out.text.push_str("$(…)");
                    self.program(s, &Stdin::Inherited);
                }
                WordPiece::BackquotedCommandSubstitution(s) => {
                    out.literal = false;
                    out.text.push_str("$(…)");
                    let body = backquoted(src, p, quoted_ctx).unwrap_or_else(|| s.clone());
                    self.program(&body, &Stdin::Inherited);
                }
                WordPiece::EscapeSequence(s) => {
                    let mut chars = s.chars();
                    match (chars.next(), chars.next()) {
                        (Some('\\'), Some('\n')) => {}
                        (Some('\\'), Some(c)) => {
                            if quoted_ctx && !matches!(c, '$' | '`' | '"' | '\\') {
                                out.text.push('\\');
                            }
                            out.text.push(c);
                            out.text.push_str(chars.as_str());
                        }
                        _ => out.text.push_str(s),
                    }
                }
                WordPiece::ArithmeticExpression(e) => {
                    out.literal = false;
                    out.text.push_str("$((…))");
                    self.scan_text(&e.value);
                }
            }
        }
    }

    /// Render a parameter expansion and walk the substitutions hidden in its
    /// operands (`${x#$(cmd)}`, `${x:-$(cmd)}`, `${a[$(cmd)]}`, …).
    fn parameter(&mut self, expr: &ParameterExpr) -> String {
        let mut operands: Vec<&str> = Vec::new();
        let param = match expr {
            ParameterExpr::Parameter { parameter, .. }
            | ParameterExpr::ParameterLength { parameter, .. }
            | ParameterExpr::Transform { parameter, .. } => parameter,
            ParameterExpr::UseDefaultValues {
                parameter,
                default_value: v,
                ..
            }
            | ParameterExpr::AssignDefaultValues {
                parameter,
                default_value: v,
                ..
            }
            | ParameterExpr::IndicateErrorIfNullOrUnset {
                parameter,
                error_message: v,
                ..
            }
            | ParameterExpr::UseAlternativeValue {
                parameter,
                alternative_value: v,
                ..
            }
            | ParameterExpr::RemoveSmallestSuffixPattern {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::RemoveLargestSuffixPattern {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::RemoveSmallestPrefixPattern {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::RemoveLargestPrefixPattern {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::UppercaseFirstChar {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::UppercasePattern {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::LowercaseFirstChar {
                parameter,
                pattern: v,
                ..
            }
            | ParameterExpr::LowercasePattern {
                parameter,
                pattern: v,
                ..
            } => {
                operands.extend(v.as_deref());
                parameter
            }
            ParameterExpr::Substring {
                parameter,
                offset,
                length,
                ..
            } => {
                operands.push(&offset.value);
                operands.extend(length.as_ref().map(|l| l.value.as_str()));
                parameter
            }
            ParameterExpr::ReplaceSubstring {
                parameter,
                pattern,
                replacement,
                ..
            } => {
                operands.push(pattern);
                operands.extend(replacement.as_deref());
                parameter
            }
            ParameterExpr::VariableNames { prefix, .. } => return format!("${{!{prefix}*}}"),
            ParameterExpr::MemberKeys { variable_name, .. } => {
                return format!("${{!{variable_name}[@]}}");
            }
        };
        let rendered = match param {
            Parameter::Named(n) => format!("${n}"),
            Parameter::Positional(n) => format!("${n}"),
            Parameter::Special(s) => format!("${s}"),
            Parameter::NamedWithIndex { name, index } => {
                operands.push(index);
                format!("${{{name}[…]}}")
            }
            Parameter::NamedWithAllIndices { name, .. } => format!("${{{name}[@]}}"),
        };
        for o in operands {
            self.scan_text(o);
        }
        rendered
    }

    /// Find and walk every substitution inside an operand or arithmetic
    /// text. It is read both as a word and as heredoc text (quotes literal),
    /// because inside `"${x:-'$(cmd)'}"` bash treats the single quotes as
    /// literal and runs `cmd`; the union over-approximates.
    pub(super) fn scan_text(&mut self, text: &str) {
        if !text.contains(['$', '`']) {
            return;
        }
        if !self.enter() {
            return;
        }
        if self.spend(text.len().saturating_mul(2)) {
            let nest = parse::shape(text);
            if self.nesting_ok(nest) {
                let nest = nest.depth;
                self.structure += nest;
                let mut seen: Vec<String> = Vec::new();
                let as_word = parse::word(text);
                let as_doc = parse::heredoc(text);
                if as_word.is_err() && as_doc.is_err() {
                    self.opaque(format!("cannot parse {}", quoted(text)), None);
                }
                for pieces in [as_word, as_doc].into_iter().flatten() {
                    self.scan_pieces(&pieces, text, &mut seen);
                }
                self.structure -= nest;
            }
        }
        self.leave();
    }

    fn scan_pieces(&mut self, pieces: &[WordPieceWithSource], src: &str, seen: &mut Vec<String>) {
        for p in pieces {
            match &p.piece {
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.scan_pieces(inner, src, seen)
                }
                WordPiece::CommandSubstitution(s) | WordPiece::BackquotedCommandSubstitution(s) => {
                    let body = match &p.piece {
                        WordPiece::BackquotedCommandSubstitution(_) => {
                            backquoted(src, p, false).unwrap_or_else(|| s.clone())
                        }
                        _ => s.clone(),
                    };
                    if !seen.contains(&body) {
                        self.program(&body, &Stdin::Inherited);
                        seen.push(body);
                    }
                }
                WordPiece::ParameterExpansion(e) => {
                    self.parameter(e);
                }
                WordPiece::ArithmeticExpression(e) => self.scan_text(&e.value),
                _ => {}
            }
        }
    }
}
