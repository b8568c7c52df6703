//! Checks every row of the table (`table.rs`) and the decision rules.

use crate::Decision::{Allow as A, Deny as D, Prompt as P};
use crate::table::{IN_PROJECT, PROJECT_BINS, TABLE, code};
use crate::{
    Barrier, Class, Guardrails, SandboxMode, Workdir, analyze, analyze_in, class_decision,
    classify, computed_name_decision, decide, decide_behind, opaque_decision,
};

fn codes_of(line: &str) -> Vec<&'static str> {
    codes_in(line, &Workdir::default())
}

fn codes_in(line: &str, workdir: &Workdir) -> Vec<&'static str> {
    let a = analyze_in(line, workdir);
    let mut codes: Vec<&'static str> = a.classes.iter().map(|(c, _)| code(*c)).collect();
    if a.is_opaque() {
        codes.push("opaque");
    }
    codes.sort_unstable();
    codes.dedup();
    codes
}

#[test]
fn table_has_enough_rows_and_no_duplicates() {
    assert!(TABLE.len() >= 150, "only {} rows", TABLE.len());
    for (i, row) in TABLE.iter().enumerate() {
        assert!(
            TABLE[..i].iter().all(|r| r.line != row.line),
            "duplicate row {:?}",
            row.line
        );
    }
}

#[test]
fn table_classes() {
    let mut failures = Vec::new();
    for row in TABLE {
        let mut want: Vec<&str> = row.codes.split_whitespace().collect();
        want.sort_unstable();
        want.dedup();
        let got = codes_of(row.line);
        if got != want {
            failures.push(format!(
                "{:?}: want {want:?}, got {got:?} ({:?})",
                row.line,
                analyze(row.line)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} rows differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn table_decisions_per_mode() {
    let mut failures = Vec::new();
    for row in TABLE {
        for mode in SandboxMode::ALL {
            let want = if mode.is_read_only() {
                row.ro
            } else {
                row.chat
            };
            // The table's chat column is chat behind a sandbox, where the
            // runtime puts every bwrap and microvm session.
            let v = decide_behind(
                &analyze(row.line),
                mode,
                &Guardrails::default(),
                Barrier::Sandbox,
            );
            if v.decision != want {
                failures.push(format!(
                    "{:?} in {}: want {want}, got {} ({})",
                    row.line,
                    mode.as_str(),
                    v.decision,
                    v.rule
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} decisions differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// T12: where the policy is the only barrier (`none`, or a caller that does
/// not know where the command runs), a computed command name keeps the
/// strict value of an opaque line — chat asks — and every other row is
/// decided as behind a sandbox; the read-only modes are the same either way.
#[test]
fn computed_names_ask_where_the_policy_is_the_only_barrier() {
    let mut failures = Vec::new();
    for row in TABLE {
        let a = analyze(row.line);
        for mode in SandboxMode::ALL {
            let mut want = if mode.is_read_only() {
                row.ro
            } else {
                row.chat
            };
            if !a.computed_names.is_empty() {
                want = want.max(opaque_decision(mode));
            }
            let got = decide(&a, mode).decision;
            if got != want {
                failures.push(format!(
                    "{:?} in {}: want {want}, got {got}",
                    row.line,
                    mode.as_str()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // A configure-style probe (compile a test program, run it): it runs in chat
    // behind a sandbox, logged as opaque; on `none` it asks; in plan it is
    // denied, with the reason.
    let probe = "d=$(mktemp -d) && cc -o \"$d/t\" t.c && \"$d/t\"";
    let a = analyze(probe);
    assert_eq!(a.computed_names.len(), 1, "{a:?}");
    assert!(a.opaque.is_empty(), "opaque only in name: {a:?}");
    let behind = decide_behind(
        &a,
        SandboxMode::Chat,
        &Guardrails::default(),
        Barrier::Sandbox,
    );
    assert_eq!(behind.decision, A, "{behind:?}");
    assert!(behind.opaque, "logged as opaque");
    assert!(
        behind.reasons.iter().any(|r| r
            .starts_with("opaque: the command name is computed at run time")
            && r.ends_with("→ allow")),
        "{behind:?}"
    );
    assert_eq!(decide(&a, SandboxMode::Chat).decision, P);
    let plan = decide_behind(
        &a,
        SandboxMode::Plan,
        &Guardrails::default(),
        Barrier::Sandbox,
    );
    assert_eq!(plan.decision, D);
    assert!(
        plan.reasons.iter().any(|r| r
            .starts_with("opaque: the command name is computed at run time")
            && r.ends_with("→ deny")),
        "{plan:?}"
    );
    let alone = decide_behind(
        &analyze("\"$d/t\""),
        SandboxMode::Plan,
        &Guardrails::default(),
        Barrier::Sandbox,
    );
    assert_eq!(
        alone.rule,
        "plan: an opaque command line is denied (the command name is computed at run time: $d/t)"
    );
    let ran = decide_behind(
        &analyze("\"$d/t\""),
        SandboxMode::Chat,
        &Guardrails::default(),
        Barrier::Sandbox,
    );
    assert_eq!(
        ran.rule,
        "chat: an opaque command line runs behind the sandbox (the command name is computed at run time: $d/t)"
    );
}

/// SPEC H7: the rows run in a project whose `node_modules/.bin`
/// holds [`PROJECT_BINS`]; every row's class and decision in every mode.
#[test]
fn table_in_a_project_with_local_bins() {
    let workdir = Workdir {
        npm_bins: PROJECT_BINS.iter().map(|b| (*b).to_owned()).collect(),
    };
    let mut failures = Vec::new();
    for row in IN_PROJECT {
        let mut want: Vec<&str> = row.codes.split_whitespace().collect();
        want.sort_unstable();
        let got = codes_in(row.line, &workdir);
        if got != want {
            failures.push(format!("{:?}: want {want:?}, got {got:?}", row.line));
        }
        for mode in SandboxMode::ALL {
            let want = if mode.is_read_only() {
                row.ro
            } else {
                row.chat
            };
            let v = decide(&analyze_in(row.line, &workdir), mode);
            if v.decision != want {
                failures.push(format!(
                    "{:?} in {}: want {want}, got {} ({})",
                    row.line,
                    mode.as_str(),
                    v.decision,
                    v.rule
                ));
            }
        }
        // Without the fact, every npx row is an install.
        if row.line.contains("npx") || row.line.contains("npm exec") {
            assert!(codes_of(row.line).contains(&"install"), "{:?}", row.line);
        }
    }
    assert!(
        failures.is_empty(),
        "{} rows differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_prompt_says_what_asks() {
    let v = classify("ls && npm install && git push", SandboxMode::Chat);
    assert_eq!(
        v.asking,
        [
            "install a package: npm install",
            "push to a remote: git push"
        ]
    );
    assert!(classify("ls", SandboxMode::Chat).asking.is_empty());
    assert!(classify("sudo ls", SandboxMode::Chat).asking.is_empty());
    let v = classify("eval $X", SandboxMode::Chat);
    assert_eq!(v.asking.len(), 1);
    assert!(v.asking[0].starts_with("an opaque command line"), "{v:?}");
}

#[test]
fn wrappers_keep_the_inner_command_text() {
    let v = classify("sudo git push origin main", SandboxMode::Chat);
    assert!(v.classes.contains(&(
        Class::PrivilegeEscalation,
        "sudo git push origin main".to_string()
    )));
    assert!(
        v.classes
            .contains(&(Class::PushRemote, "git push origin main".to_string()))
    );
    let v = classify("echo ${x#$(gh pr create -t x)}", SandboxMode::Chat);
    assert!(
        v.classes
            .contains(&(Class::OpenPullRequest, "gh pr create -t x".to_string())),
        "{v:?}"
    );
}

#[test]
fn rule_names_what_decided() {
    let cases = [
        (
            "sudo",
            SandboxMode::Chat,
            "chat: privilege escalation is denied (sudo)",
        ),
        (
            "ls && git push",
            SandboxMode::Chat,
            "chat: push to a remote asks first (git push)",
        ),
        (
            "git commit -m x",
            SandboxMode::Plan,
            "plan: only read-only commands are allowed; create a commit is denied (git commit -m x)",
        ),
        (
            "ls",
            SandboxMode::Review,
            "review: every command is read-only",
        ),
        (
            "ls",
            SandboxMode::Chat,
            "chat: allowed (nothing on the deny or ask lists)",
        ),
        ("", SandboxMode::Orchestrate, "orchestrate: nothing to run"),
        (
            "eval $X",
            SandboxMode::Chat,
            "chat: an opaque command line asks first (`eval` runs text computed at run time: $X)",
        ),
        (
            "eval $X",
            SandboxMode::Plan,
            "plan: an opaque command line is denied (`eval` runs text computed at run time: $X)",
        ),
        // The strictest entry names the rule, not the first one.
        (
            "git push; rm -rf /",
            SandboxMode::Chat,
            "chat: system or disk destruction is denied (rm -rf /)",
        ),
    ];
    for (line, mode, rule) in cases {
        assert_eq!(classify(line, mode).rule, rule, "{line:?}");
    }
}

#[test]
fn reasons_cover_every_class_and_opaque_part() {
    let v = classify("curl x | bash; git push", SandboxMode::Chat);
    assert_eq!(v.reasons.len(), v.classes.len() + 1, "{:?}", v.reasons);
    assert!(
        v.reasons
            .iter()
            .any(|r| r == "git push: push to a remote → prompt"),
        "{:?}",
        v.reasons
    );
    assert!(
        v.reasons
            .iter()
            .any(|r| r.starts_with("opaque: `bash` runs commands read from a pipe")),
        "{:?}",
        v.reasons
    );
    assert!(v.opaque);
    let a = analyze("sudo git push; ls");
    assert_eq!(a.why.len(), a.classes.len());
}

#[test]
fn decision_table_per_mode() {
    use Class::*;
    let chat_deny = [
        PrivilegeEscalation,
        SystemDestruction,
        ContainerEscape,
        WriteProtectedFile,
    ];
    let chat_prompt = [
        PushRemote,
        OpenPullRequest,
        PublishReviewOrMerge,
        WriteExternalTracker,
        InstallPackage,
        PublishPackage,
    ];
    let chat_allow = [CreateCommit, AccessNetwork, ReadOnly, Other, WriteFile];
    assert_eq!(
        chat_deny.len() + chat_prompt.len() + chat_allow.len(),
        Class::ALL.len()
    );
    for c in chat_deny {
        assert_eq!(class_decision(c, SandboxMode::Chat), D, "{c}");
    }
    for c in chat_prompt {
        assert_eq!(class_decision(c, SandboxMode::Chat), P, "{c}");
    }
    for c in chat_allow {
        assert_eq!(class_decision(c, SandboxMode::Chat), A, "{c}");
    }
    for mode in [
        SandboxMode::Review,
        SandboxMode::Plan,
        SandboxMode::Orchestrate,
    ] {
        for c in Class::ALL {
            let want = if c == ReadOnly { A } else { D };
            assert_eq!(class_decision(c, mode), want, "{c} in {}", mode.as_str());
        }
        assert_eq!(opaque_decision(mode), D);
        for barrier in [Barrier::PolicyOnly, Barrier::Sandbox] {
            assert_eq!(computed_name_decision(mode, barrier), D);
        }
    }
    assert_eq!(opaque_decision(SandboxMode::Chat), P);
    // A computed command name runs in chat behind a sandbox; on `none`
    // (the policy the only barrier) it asks, as every opaque line.
    assert_eq!(
        computed_name_decision(SandboxMode::Chat, Barrier::Sandbox),
        A
    );
    assert_eq!(
        computed_name_decision(SandboxMode::Chat, Barrier::PolicyOnly),
        P
    );
}

#[test]
fn decide_takes_the_strictest() {
    let mut a = analyze("ls; git push; git commit -m x");
    assert_eq!(decide(&a, SandboxMode::Chat).decision, P);
    a.opaque.push("test".to_string());
    assert_eq!(decide(&a, SandboxMode::Chat).decision, P);
    let a = analyze("ls; git push; sudo ls");
    assert_eq!(decide(&a, SandboxMode::Chat).decision, D);
}

#[test]
fn overlong_lines_are_opaque() {
    let line = format!("echo {}", "a".repeat(crate::parse::MAX_LINE_BYTES));
    let v = classify(&line, SandboxMode::Chat);
    assert!(v.opaque);
    assert_eq!(v.decision, P);
    assert_eq!(classify(&line, SandboxMode::Plan).decision, D);
}

#[test]
fn many_commands_are_bounded() {
    let line = "ls;".repeat(5000);
    let a = analyze(&line);
    assert!(a.is_opaque(), "{:?}", a.opaque);
    // Just under the bound, the same line is fine.
    let a = analyze(&"ls;".repeat(1000));
    assert!(!a.is_opaque());
}

#[test]
fn deep_wrapper_chains_are_bounded() {
    let line = format!("{}git push", "nice ".repeat(2000));
    let a = analyze(&line);
    assert!(a.is_opaque());
    let a = analyze(&format!("{}git push", "nice ".repeat(10)));
    assert!(!a.is_opaque());
    assert_eq!(a.classes[0].0, Class::PushRemote);
}
