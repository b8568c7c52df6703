//! A tool's failure as the agent sees it: a result with `isError: true`
//! whose text says what was refused and by which rule, and whose
//! structured content carries the same as fields (`error`, `rule`,
//! `path`, `decision`). Protocol errors (an unknown tool, a malformed
//! call) are rmcp's own; everything a tool decides is one of these.

use rmcp::model::CallToolResult;
use serde_json::{Map, Value, json};

/// What went wrong, and the rule when a rule refused.
#[derive(Debug, Clone)]
pub struct ToolError {
    pub message: String,
    pub rule: Option<String>,
    pub path: Option<String>,
    /// `deny` when a decision refused (a rule, the guardrails, the policy).
    pub decision: Option<&'static str>,
    /// More fields (a policy verdict, the effects).
    pub extra: Map<String, Value>,
}

impl ToolError {
    /// A failure that is not a refusal (no such file, bad input).
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            rule: None,
            path: None,
            decision: None,
            extra: Map::new(),
        }
    }

    /// A refusal by a named rule.
    pub fn refused(message: impl Into<String>, rule: impl Into<String>) -> Self {
        Self {
            rule: Some(rule.into()),
            decision: Some("deny"),
            ..Self::failed(message)
        }
    }

    pub fn at(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }

    pub fn with(mut self, key: &str, value: Value) -> Self {
        self.extra.insert(key.to_owned(), value);
        self
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<ToolError> for CallToolResult {
    fn from(e: ToolError) -> Self {
        let mut body = json!({ "error": e.message });
        if let Some(rule) = e.rule {
            body["rule"] = rule.into();
        }
        if let Some(path) = e.path {
            body["path"] = path.into();
        }
        if let Some(decision) = e.decision {
            body["decision"] = decision.into();
        }
        if let Value::Object(fields) = &mut body {
            for (key, value) in e.extra {
                fields.entry(key).or_insert(value);
            }
        }
        CallToolResult::structured_error(body)
    }
}
