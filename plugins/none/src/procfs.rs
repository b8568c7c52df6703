//! Which process groups still have a live member, from `/proc`.

use std::collections::HashSet;

/// Process group ids with at least one member that is not a zombie.
pub(crate) fn live_process_groups() -> HashSet<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashSet::new();
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|stat| parse_stat(&stat))
        .filter(|(state, _)| *state != 'Z')
        .map(|(_, pgrp)| pgrp)
        .collect()
}

/// `(state, pgrp)` from a `/proc/<pid>/stat` line. The command name may hold
/// spaces and parentheses, so fields are counted after the last `)`.
fn parse_stat(stat: &str) -> Option<(char, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_spaces_and_parens() {
        let stat = "1234 (a (weird) name) Z 1 4321 4321 0 -1 4194560";
        assert_eq!(parse_stat(stat), Some(('Z', 4321)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn our_own_group_is_live() {
        // SAFETY: plain syscall without arguments.
        let own = unsafe { libc::getpgrp() };
        assert!(live_process_groups().contains(&own));
    }
}
