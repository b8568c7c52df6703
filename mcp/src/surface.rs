//! The mode's tool surface (SPEC H3): read-only modes (review, plan,
//! orchestrate) do not list the mutating tools at all, and a call to one is
//! an unknown tool there — rmcp's own "tool not found" — not a refusal: a
//! tool that is not there cannot be called. `exec` stays, since the mode's
//! command policy allows only read-only commands.

use sandbox_plugin_api::SandboxMode;

/// Tools that only read (and `exec`, which the command policy governs).
pub const READING: &[&str] = &["exec", "find", "read", "search", "search_files"];

/// Tools that change files: absent in the read-only modes.
pub const MUTATING: &[&str] = &["apply_patch", "edit", "write"];

/// Whether `mode` lists `tool`.
pub fn lists(mode: SandboxMode, tool: &str) -> bool {
    READING.contains(&tool) || (!mode.is_read_only() && MUTATING.contains(&tool))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_modes_list_no_mutating_tool() {
        for mode in [
            SandboxMode::Review,
            SandboxMode::Plan,
            SandboxMode::Orchestrate,
        ] {
            for tool in MUTATING {
                assert!(!lists(mode, tool), "{tool} in {}", mode.as_str());
            }
            for tool in READING {
                assert!(lists(mode, tool));
            }
        }
        for tool in READING.iter().chain(MUTATING) {
            assert!(lists(SandboxMode::Chat, tool));
        }
        assert!(!lists(SandboxMode::Chat, "rm"));
    }
}
