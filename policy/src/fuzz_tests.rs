//! Fuzz-style robustness tests: the classifier runs on many generated and
//! mutated inputs and must never panic, never hang, and always return a
//! verdict consistent with its own analysis.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::table::TABLE;
use crate::{
    Analysis, Barrier, Class, Decision, Guardrails, SandboxMode, analyze, class_decision,
    computed_name_decision, decide, decide_behind, opaque_decision,
};

/// A hang, not a benchmark: generous for a debug build on a 2-core box.
const HARD_LIMIT: Duration = Duration::from_secs(5);

/// Bytes that matter to the shell, used for mutations and random text.
const SHELL_BYTES: &[u8] = b"$(){}[]'\"`\\;|&<>\n\t #~*?!=-/:0123456789abcgpstuxEOF";

/// xorshift64*: a fixed-seed PRNG, so every run tests the same inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Shell fragments for "token soup" inputs (these found the tokenizer hangs).
const FRAGMENTS: &[&str] = &[
    "$(",
    ")",
    "`",
    "\\`",
    "<<",
    "<<-",
    "<<<",
    "EOF",
    "\nEOF\n",
    "${",
    "}",
    "${x#",
    "${x:-",
    "$((",
    "))",
    "((",
    "case x in",
    "esac",
    "if",
    "then",
    "fi",
    "do",
    "done",
    "for x in",
    "while",
    "select",
    "function",
    "f()",
    "{",
    "(",
    ";",
    ";;",
    "&",
    "&&",
    "||",
    "|",
    "|&",
    "<(",
    ">(",
    ">",
    ">>",
    "2>&1",
    "'",
    "\"",
    "$'",
    "\\",
    "\n",
    " ",
    "git push",
    "sudo",
    "eval",
    "bash -c",
    "xargs",
    "find . -exec",
    "\\;",
    "~",
    "~+",
    "=",
    "a=",
    "arr=(",
    "[[",
    "]]",
    "coproc",
    "!",
    "#",
    "$",
    "${!",
    "[",
    "]",
    "*",
    "?",
];

/// What the watchdog sees: when the current input started, and the input.
type Current = Arc<Mutex<(Instant, String)>>;

/// Runs every input, checks the invariants, and collects failures.
struct Harness {
    inputs: usize,
    slowest: (Duration, String),
    failures: Vec<String>,
    current: Current,
}

/// Run a campaign on a 2 MiB stack (like a tokio worker thread, so too deep
/// a recursion overflows here rather than in the server) under a watchdog:
/// an input still running after [`HARD_LIMIT`] fails the test (its thread
/// is left behind).
fn guarded(min_inputs: usize, campaign: impl FnOnce(&mut Harness) + Send + 'static) {
    let current: Current = Arc::new(Mutex::new((Instant::now(), String::new())));
    let mut h = Harness {
        inputs: 0,
        slowest: (Duration::ZERO, String::new()),
        failures: Vec::new(),
        current: current.clone(),
    };
    let worker = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            campaign(&mut h);
            h
        });
    let worker = match worker {
        Ok(w) => w,
        Err(e) => panic!("cannot spawn: {e}"),
    };
    while !worker.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
        let (started, input) = match current.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        assert!(
            started.elapsed() < HARD_LIMIT,
            "hangs on {:?}",
            input.chars().take(200).collect::<String>()
        );
    }
    match worker.join() {
        Ok(h) => h.finish(min_inputs),
        Err(p) => std::panic::resume_unwind(p),
    }
}

impl Harness {
    fn bytes(&mut self, input: &[u8]) {
        self.line(&String::from_utf8_lossy(input));
    }

    fn line(&mut self, line: &str) {
        self.inputs += 1;
        if std::env::var_os("POLICY_FUZZ_TRACE").is_some() {
            eprintln!("input {}: {line:?}", self.inputs);
        }
        let start = Instant::now();
        if let Ok(mut g) = self.current.lock() {
            *g = (start, line.to_string());
        }
        let result = catch_unwind(AssertUnwindSafe(|| analyze(line)));
        let took = start.elapsed();
        if took > self.slowest.0 {
            self.slowest = (took, line.chars().take(80).collect());
        }
        let analysis = match result {
            Ok(a) => a,
            Err(_) => {
                self.failures.push(format!("panicked on {line:?}"));
                return;
            }
        };
        if took > HARD_LIMIT {
            self.failures.push(format!(
                "took {took:?} on {:?}",
                line.chars().take(200).collect::<String>()
            ));
        }
        if let Err(e) = consistent(&analysis) {
            self.failures.push(format!("{e} on {line:?}"));
        }
    }

    fn finish(self, min_inputs: usize) {
        println!(
            "{} inputs; slowest {:?}: {:?}",
            self.inputs, self.slowest.0, self.slowest.1
        );
        assert!(
            self.failures.is_empty(),
            "{} failures:\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
        assert!(self.inputs >= min_inputs, "only {} inputs ran", self.inputs);
        assert!(
            self.slowest.0 < HARD_LIMIT,
            "slowest {:?}: {:?}",
            self.slowest.0,
            self.slowest.1
        );
    }
}

/// The verdict in every mode must follow from the analysis.
fn consistent(a: &Analysis) -> Result<(), String> {
    if a.why.len() != a.classes.len() {
        return Err("why and classes differ in length".to_string());
    }
    for (i, entry) in a.classes.iter().enumerate() {
        if a.classes[..i].contains(entry) {
            return Err(format!("duplicate entry {entry:?}"));
        }
        if entry.1.len() > 200 {
            return Err(format!("overlong command text ({} bytes)", entry.1.len()));
        }
    }
    for (mode, barrier) in SandboxMode::ALL
        .into_iter()
        .flat_map(|m| [(m, Barrier::PolicyOnly), (m, Barrier::Sandbox)])
    {
        let v = decide_behind(a, mode, &Guardrails::default(), barrier);
        let mut want = Decision::Allow;
        for (c, _) in &a.classes {
            want = want.max(class_decision(*c, mode));
        }
        if !a.opaque.is_empty() {
            want = want.max(opaque_decision(mode));
        }
        if !a.computed_names.is_empty() {
            want = want.max(computed_name_decision(mode, barrier));
        }
        if v.decision != want {
            return Err(format!(
                "{}: decision {} but the strictest part is {want}",
                mode.as_str(),
                v.decision
            ));
        }
        if mode.is_read_only()
            && v.decision == Decision::Allow
            && (v.opaque || v.classes.iter().any(|(c, _)| *c != Class::ReadOnly))
        {
            return Err(format!("{}: allowed a non-read-only line", mode.as_str()));
        }
        if v.reasons.len() != a.classes.len() + a.opaque.len() + a.computed_names.len() {
            return Err("a reason is missing".to_string());
        }
        if v.rule.is_empty() || !v.rule.starts_with(mode.as_str()) {
            return Err(format!("bad rule {:?}", v.rule));
        }
    }
    let hard = [
        Class::PrivilegeEscalation,
        Class::SystemDestruction,
        Class::ContainerEscape,
    ];
    let chat = decide(a, SandboxMode::Chat).decision;
    if (chat == Decision::Deny) != a.classes.iter().any(|(c, _)| hard.contains(c)) {
        return Err("chat denies exactly the hard-deny classes".to_string());
    }
    Ok(())
}

#[test]
fn every_prefix_of_every_table_line() {
    guarded(TABLE.len() * 10, |h| {
        for row in TABLE {
            let b = row.line.as_bytes();
            for end in 0..=b.len() {
                h.bytes(&b[..end]);
            }
        }
    });
}

#[test]
fn every_single_byte_mutation_of_every_table_line() {
    guarded(TABLE.len() * 100, |h| {
        // Deletion, and replacement by each of these.
        let replacements: &[u8] = b"$()`'\"\\;|&<>{}\n\xff";
        for row in TABLE {
            let b = row.line.as_bytes();
            for i in 0..b.len() {
                let mut m = b.to_vec();
                m.remove(i);
                h.bytes(&m);
                for &r in replacements {
                    if b[i] != r {
                        let mut m = b.to_vec();
                        m[i] = r;
                        h.bytes(&m);
                    }
                }
            }
        }
    });
}

#[test]
fn random_bytes_token_soup_and_splices() {
    guarded(60_000, |h| {
        let mut rng = Rng(0x5eed_cafe_f00d_d00d);
        for _ in 0..20_000 {
            let len = rng.below(160);
            let input: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.below(4) == 0 {
                        rng.next() as u8
                    } else {
                        SHELL_BYTES[rng.below(SHELL_BYTES.len())]
                    }
                })
                .collect();
            h.bytes(&input);
        }
        for _ in 0..20_000 {
            let sep = if rng.below(2) == 0 { "" } else { " " };
            let soup: Vec<&str> = (0..rng.below(30))
                .map(|_| FRAGMENTS[rng.below(FRAGMENTS.len())])
                .collect();
            h.line(&soup.join(sep));
        }
        // Splices: pieces of table lines glued with shell operators.
        let glue = [
            " ", "; ", " | ", " && ", " $(", "`", " <<EOF\n", "\"", "'", " ${x#", "\n",
        ];
        for _ in 0..20_000 {
            let mut s = String::new();
            for _ in 0..1 + rng.below(4) {
                let line = TABLE[rng.below(TABLE.len())].line;
                let a = rng.below(line.len() + 1);
                let b = a + rng.below(line.len() + 1 - a);
                s.push_str(line.get(a..b).unwrap_or(line));
                s.push_str(glue[rng.below(glue.len())]);
            }
            h.line(&s);
        }
    });
}

/// Inputs that hung, panicked or took seconds in brush-parser 0.4.0 before
/// the guards in `parse.rs` and `walk.rs`; each must now finish quickly.
#[test]
fn known_parser_traps_finish() {
    const TRAPS: &[&str] = &[
        "p $(<<  ",
        " git p $(<< &&  ",
        "cat <<''  ",
        "[[ done $( <<-    # ? )) xargs a=",
        "[ ${x:- $ [[ <<- $(( )) |&   ",
        "${x:-<<- $(( )) ",
        "|& $( [ <<    git push fi || then ${",
        "99999999999999999999>x",
        "echo ~99999999999999999999999",
        "echo ${x:-~+99999999999999999999}",
    ];
    guarded(TRAPS.len() + 4, |h| {
        for t in TRAPS {
            h.line(t);
        }
        h.line(&"(".repeat(40));
        h.line(&"( ".repeat(40));
        h.line(&"case x in x) ".repeat(30));
        h.line(&format!("{}ls", "case x in x) (".repeat(10)));
    });
    for t in TRAPS {
        assert!(analyze(t).is_opaque(), "{t:?}");
    }
}

#[test]
fn deep_and_wide_inputs_are_bounded() {
    guarded(270, |h| {
        let shapes: [(&str, &str); 12] = [
            ("(", ")"),
            ("{ ", "; }"),
            ("$(", ")"),
            ("\"$(", ")\""),
            ("if true; then ", "; fi"),
            ("${a:-", "}"),
            ("$((", "))"),
            ("bash -c '", "'"),
            ("eval ", ""),
            ("sudo ", ""),
            ("for x in a; do ", "; done"),
            ("case x in x) ", ";; esac"),
        ];
        for (open, close) in shapes {
            for n in [1, 2, 5, 10, 20, 30, 40, 64, 100, 200, 1000] {
                h.line(&format!("{}git push{}", open.repeat(n), close.repeat(n)));
                h.line(&format!("{}git push", open.repeat(n)));
            }
        }
        // Nested backticks: level k needs 2^k - 1 backslashes.
        let mut s = "git push".to_string();
        for _ in 0..12 {
            s = format!("echo `{}`", s.replace('\\', "\\\\").replace('`', "\\`"));
            h.line(&s);
        }
        // Wide: long but shallow.
        h.line(&"ls -la /tmp && ".repeat(3000));
        h.line(&format!("echo {}", "word ".repeat(12_000)));
        h.line(&format!("cat <<EOF\n{}EOF\n", "line $x `y`\n".repeat(4000)));
        h.line(&"$(".repeat(20_000));
        h.line(&"\\".repeat(60_000));
        h.line(&"'".repeat(60_000));
        h.line(&"<<EOF ".repeat(5_000));
    });
}

#[test]
fn nested_backticks_are_found_at_every_level() {
    let mut s = "git push".to_string();
    for level in 1..=5 {
        s = format!("echo `{}`", s.replace('\\', "\\\\").replace('`', "\\`"));
        let a = analyze(&s);
        assert!(
            a.classes
                .iter()
                .any(|(c, t)| *c == Class::PushRemote && t == "git push"),
            "level {level}: {s} → {a:?}"
        );
    }
}
