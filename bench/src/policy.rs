//! `sandbox-bench policy [ROUNDS]`: command classification (SPEC H6) on the
//! classifier's own table — throughput in lines per second and the latency
//! of one decision — next to brush-parser's bare parse of the same lines,
//! the floor every classification pays.

use std::time::{Duration, Instant};

use sandbox_policy::{SandboxMode, classify};

use super::{Stats, row, stats};

/// Times `f` once per line, `rounds` times over all lines.
fn per_line(lines: &[&str], rounds: usize, mut f: impl FnMut(&str)) -> (Stats, Duration) {
    for line in lines {
        f(line); // warm up
    }
    let mut samples = Vec::with_capacity(lines.len() * rounds);
    let started = Instant::now();
    for _ in 0..rounds {
        for line in lines {
            let start = Instant::now();
            f(line);
            samples.push(start.elapsed());
        }
    }
    let total = started.elapsed();
    (stats(samples), total)
}

/// brush-parser's parse of one line, as the classifier's first step.
fn bare_parse(line: &str) -> bool {
    let options = brush_parser::ParserOptions::default();
    let mut parser = brush_parser::Parser::new(std::io::Cursor::new(line.as_bytes()), &options);
    parser.parse_program().is_ok()
}

/// The lines brush-parser parses without panicking, hanging or taking
/// over 100 ms: the classifier keeps the others from brush (they are in the
/// table on purpose), so the baseline cannot be measured on them.
fn bare_parseable<'a>(lines: &[&'a str]) -> Vec<&'a str> {
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut ok = Vec::new();
    for line in lines {
        let (tx, rx) = std::sync::mpsc::channel();
        let owned = (*line).to_owned();
        std::thread::spawn(move || {
            let parsed = std::panic::catch_unwind(|| bare_parse(&owned)).is_ok();
            let _ = tx.send(parsed);
        });
        if rx.recv_timeout(Duration::from_millis(100)) == Ok(true) {
            ok.push(*line);
        }
    }
    std::panic::set_hook(quiet);
    ok
}

pub fn run(rounds: usize) {
    let lines: Vec<&str> = sandbox_policy::table::lines().collect();
    let count = lines.len() * rounds;
    println!(
        "classification of the policy table: {} lines × {rounds} rounds",
        lines.len()
    );
    let (chat, chat_total) = per_line(&lines, rounds, |line| {
        std::hint::black_box(classify(line, SandboxMode::Chat));
    });
    let (plan, _) = per_line(&lines, rounds, |line| {
        std::hint::black_box(classify(line, SandboxMode::Plan));
    });
    println!(
        "all lines: classify (chat) {:.0} lines/s; one decision p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs; plan p99 {:.1} µs",
        count as f64 / chat_total.as_secs_f64(),
        chat.p50.as_secs_f64() * 1e6,
        chat.p99.as_secs_f64() * 1e6,
        chat.max.as_secs_f64() * 1e6,
        plan.p99.as_secs_f64() * 1e6,
    );

    let parseable = bare_parseable(&lines);
    println!(
        "against the bare parse, on the {} lines brush-parser alone survives:",
        parseable.len()
    );
    let (parse, parse_total) = per_line(&parseable, rounds, |line| {
        std::hint::black_box(bare_parse(line));
    });
    let (classified, classified_total) = per_line(&parseable, rounds, |line| {
        std::hint::black_box(classify(line, SandboxMode::Chat));
    });
    row("brush-parser parse only (baseline)", &parse, &parse);
    row("classify, chat", &classified, &parse);
    println!(
        "throughput ratio: classify takes {:.2}× the bare parse",
        classified_total.as_secs_f64() / parse_total.as_secs_f64()
    );
}
