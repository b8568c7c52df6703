//! Probing every backend once, in parallel, each under a timeout (SPEC B1).
//! A probe that hangs or panics makes its backend unavailable; start-up
//! never waits longer than the timeout.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sandbox_plugin_api::host::BackendObject;
use sandbox_plugin_api::{API_VERSION, ErrorCode, ProbeContext, ProbeReport};

pub(crate) fn probe_all(
    backends: Vec<BackendObject>,
    options: &BTreeMap<String, serde_json::Value>,
    fresh: bool,
    timeout: Duration,
) -> Vec<ProbeReport> {
    let (tx, rx) = mpsc::channel();
    let count = backends.len();
    let mut reports: Vec<Option<ProbeReport>> = vec![None; count];
    for (index, backend) in backends.iter().enumerate() {
        let ctx = ProbeContext {
            os: std::env::consts::OS.to_owned(),
            host_api_version: API_VERSION.to_owned(),
            options: options.get(backend.name()).cloned().unwrap_or_default(),
            fresh,
        };
        let backend = backend.clone();
        let tx = tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("probe-{}", backend.name()))
            .spawn(move || {
                let report = match backend.probe(&ctx) {
                    Ok(report) => report,
                    Err(e) if e.code == ErrorCode::PANICKED => {
                        ProbeReport::unavailable("its probe panicked", e.message)
                    }
                    Err(e) => ProbeReport::unavailable("its probe failed", e.to_string()),
                };
                let _ = tx.send((index, report));
            });
        if let Err(e) = spawned {
            reports[index] = Some(ProbeReport::unavailable(
                "could not be probed",
                e.to_string(),
            ));
        }
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    while reports.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((index, report)) => reports[index] = Some(report),
            Err(_) => break,
        }
    }
    reports
        .into_iter()
        .zip(backends)
        .map(|(report, backend)| {
            report.unwrap_or_else(|| {
                tracing::warn!(
                    backend = backend.name(),
                    "probe did not answer within {timeout:?}"
                );
                ProbeReport::unavailable(
                    "its probe did not answer in time",
                    format!(
                        "the probe did not answer within {} s",
                        timeout.as_secs_f64()
                    ),
                )
            })
        })
        .collect()
}
