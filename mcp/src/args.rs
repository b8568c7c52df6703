//! Every tool's arguments and results as typed structs: their JSON schemas
//! (`inputSchema`, `outputSchema`) are generated from these, and an
//! argument that is missing, of the wrong type or unknown is an MCP error
//! naming it before the tool runs.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `exec`: run a command in the sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    /// The command and its arguments (`["cargo", "test"]`; a shell line is
    /// `["sh", "-c", "…"]`).
    pub argv: Vec<String>,
    /// Working directory inside the sandbox (default: the sandbox's).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Extra environment variables (injection vectors and credentials are
    /// removed, as for every command).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Written to the command's stdin, which is then closed.
    #[serde(default)]
    pub input: Option<String>,
    /// Kill the command after this many milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// A violation the sandbox reported while the command ran.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ViolationOut {
    /// `file-write-create`, `network-outbound`, ….
    pub action: String,
    /// The path or host refused.
    pub target: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

/// `exec`'s result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ExecOutput {
    /// The exit status, when the command exited.
    pub exit_code: Option<i32>,
    /// Why it was killed (`timeout`, `manual`, `oom`, `destroyed`), when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub killed: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Its stdout (UTF-8, invalid bytes replaced), up to 1 MiB.
    pub stdout: String,
    /// Its stderr, likewise.
    pub stderr: String,
    /// Whether stdout or stderr was longer than what is shown (all of it
    /// went out as progress notifications).
    pub truncated: bool,
    /// What the sandbox refused while it ran.
    pub violations: Vec<ViolationOut>,
    /// The command policy's verdict that let it run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<serde_json::Value>,
    /// The backend it ran in (`bwrap`, `none`, …).
    pub backend: String,
}

/// How `read` returns a file's bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Encoding {
    /// Text when the file is UTF-8 without NUL bytes, else base64.
    #[default]
    Auto,
    /// Text: `offset` and `limit` count lines.
    Utf8,
    /// Base64: `offset` and `limit` count bytes.
    Base64,
}

/// `read`: a file, or a page of it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The file, as the sandbox sees it (relative to its working directory,
    /// or absolute beneath one of its binds).
    pub path: String,
    /// Text: the first line, from 1 (default 1). Base64: the first byte,
    /// from 0 (default 0).
    #[serde(default)]
    pub offset: Option<u64>,
    /// Text: at most this many lines (default 2000). Base64: bytes (default
    /// and at most 1 MiB). A page never holds more than 256 KiB of text.
    #[serde(default)]
    pub limit: Option<u64>,
    #[serde(default)]
    pub encoding: Encoding,
}

/// `read`'s result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReadOutput {
    pub path: String,
    /// `utf-8` or `base64`.
    pub encoding: String,
    /// The page's content.
    pub content: String,
    /// Text: the first line given; base64: the first byte.
    pub offset: u64,
    /// Text: lines given; base64: bytes given.
    pub count: u64,
    /// Where the next page starts, when there is more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
    /// The file's size in bytes.
    pub size: u64,
}

/// `write`: a whole file, created or replaced.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    pub path: String,
    /// The new content (text, or base64 with `"encoding": "base64"`).
    pub content: String,
    /// `utf-8` (default) or `base64`.
    #[serde(default)]
    pub encoding: Option<WriteEncoding>,
}

/// How `write`'s content is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WriteEncoding {
    Utf8,
    Base64,
}

/// What the guardrails decided before a mutating tool acted (SPEC H4).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct GuardrailOut {
    /// `allow`, `prompt` (and then allowed by an owner) or `deny`.
    pub decision: String,
    /// What decided.
    pub rule: String,
    /// Each effect of the call, with its class.
    pub effects: Vec<EffectOut>,
    /// The owner's answer, when one was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

/// One effect: its class (`write_file`, `write_protected_file`) and path.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct EffectOut {
    pub class: String,
    pub path: String,
}

/// `write`'s result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WriteOutput {
    pub path: String,
    pub bytes: u64,
    /// Whether the file was new.
    pub created: bool,
    pub guardrail: GuardrailOut,
}

/// `edit`: replace an exact string in a file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    pub path: String,
    /// The exact text to replace; it must occur once unless `replace_all`.
    pub old_string: String,
    pub new_string: String,
    /// Replace every occurrence.
    #[serde(default)]
    pub replace_all: bool,
}

/// `edit`'s result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EditOutput {
    pub path: String,
    pub replacements: u64,
    pub guardrail: GuardrailOut,
}

/// `apply_patch`: several files changed at once, or none.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyPatchArgs {
    /// The patch, from `*** Begin Patch` to `*** End Patch` (README:
    /// "The patch format").
    pub patch: String,
}

/// One file a patch changed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PatchedFile {
    pub path: String,
    /// `add`, `update` or `delete`.
    pub action: String,
    /// Where an update moved it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_to: Option<String>,
}

/// `apply_patch`'s result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ApplyPatchOutput {
    pub files: Vec<PatchedFile>,
    pub guardrail: GuardrailOut,
}

/// `search`: lines matching a regex, in the files beneath a directory.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// A regular expression (Rust `regex` syntax), or a literal with
    /// `fixed_strings`.
    pub pattern: String,
    /// Where to search: a directory or a file (default: the working directory).
    #[serde(default)]
    pub path: Option<String>,
    /// Only files whose path relative to `path` matches this glob (`*.rs`,
    /// `src/**/*.ts`).
    #[serde(default)]
    pub glob: Option<String>,
    #[serde(default)]
    pub case_insensitive: bool,
    #[serde(default)]
    pub fixed_strings: bool,
    /// Also hidden files and directories (`.github`); `.git` never.
    #[serde(default)]
    pub hidden: bool,
    /// Also what `.gitignore` files name.
    #[serde(default)]
    pub no_ignore: bool,
    /// At most this many results (default 200, at most 10000).
    #[serde(default)]
    pub max_results: Option<u32>,
}

/// One matching line.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SearchMatch {
    pub path: String,
    /// From 1.
    pub line: u64,
    /// The line (UTF-8, invalid bytes replaced; long lines cut at 500 bytes).
    pub text: String,
}

/// `search`'s result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchOutput {
    pub matches: Vec<SearchMatch>,
    /// Whether `max_results` stopped the search.
    pub truncated: bool,
    pub files_searched: u64,
    /// Entries that could not be searched, with why (a directory swapped
    /// for a symlink, a file with several names, …).
    pub skipped: Vec<String>,
}

/// `search_files`: which files match a regex, and how often.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchFilesArgs {
    pub pattern: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub glob: Option<String>,
    #[serde(default)]
    pub case_insensitive: bool,
    #[serde(default)]
    pub fixed_strings: bool,
    #[serde(default)]
    pub hidden: bool,
    #[serde(default)]
    pub no_ignore: bool,
    /// At most this many files (default 200, at most 10000).
    #[serde(default)]
    pub max_results: Option<u32>,
}

/// A file and how many of its lines match.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FileMatches {
    pub path: String,
    pub matching_lines: u64,
}

/// `search_files`' result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchFilesOutput {
    pub files: Vec<FileMatches>,
    pub truncated: bool,
    pub files_searched: u64,
    pub skipped: Vec<String>,
}

/// `find`: names matching a glob beneath a directory.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindArgs {
    /// A glob over the path relative to `path` (`**/*.rs`, `Cargo.toml`,
    /// `src/*/mod.rs`); a pattern without `/` matches the name at any depth.
    pub pattern: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub hidden: bool,
    #[serde(default)]
    pub no_ignore: bool,
    /// At most this many paths (default 500, at most 10000).
    #[serde(default)]
    pub max_results: Option<u32>,
}

/// `find`'s result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FindOutput {
    /// Guest paths; directories end in `/`.
    pub paths: Vec<String>,
    pub truncated: bool,
    pub skipped: Vec<String>,
}
