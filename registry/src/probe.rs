//! Probing every backend once, in parallel, each under a timeout (SPEC B1).
//! A probe that hangs or panics makes its backend unavailable; start-up
//! never waits longer than the timeout.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sandbox_plugin_api::host::BackendObject;
use sandbox_plugin_api::{API_VERSION, ErrorCode, ProbeContext, ProbeReport};

/// Probes started one by one as their backends are found, each on a
/// thread of its own under a timeout of its own, and gathered at the end:
/// the first plugin's probe (bwrap's is the longest) runs while the next
/// plugins load instead of after them, so a start waits less (SPEC B1).
pub(crate) struct Probes<'a> {
    options: &'a BTreeMap<String, serde_json::Value>,
    fresh: bool,
    timeout: Duration,
    tx: mpsc::Sender<(usize, ProbeReport)>,
    rx: mpsc::Receiver<(usize, ProbeReport)>,
    /// Each backend in the order found, and when its probe started (or why
    /// it could not).
    started: Vec<(BackendObject, Result<Instant, ProbeReport>)>,
}

impl<'a> Probes<'a> {
    pub(crate) fn new(
        options: &'a BTreeMap<String, serde_json::Value>,
        fresh: bool,
        timeout: Duration,
    ) -> Self {
        let (tx, rx) = mpsc::channel();
        Probes {
            options,
            fresh,
            timeout,
            tx,
            rx,
            started: Vec::new(),
        }
    }

    /// Starts `backend`'s probe; its report is the next one [`finish`]
    /// returns.
    ///
    /// [`finish`]: Probes::finish
    pub(crate) fn start(&mut self, backend: &BackendObject) {
        let index = self.started.len();
        let ctx = ProbeContext {
            os: std::env::consts::OS.to_owned(),
            host_api_version: API_VERSION.to_owned(),
            options: self
                .options
                .get(backend.name())
                .cloned()
                .unwrap_or_default(),
            fresh: self.fresh,
        };
        let probed = backend.clone();
        let tx = self.tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("probe-{}", backend.name()))
            .spawn(move || {
                let report = match probed.probe(&ctx) {
                    Ok(report) => report,
                    Err(e) if e.code == ErrorCode::PANICKED => {
                        ProbeReport::unavailable("its probe panicked", e.message)
                    }
                    Err(e) => ProbeReport::unavailable("its probe failed", e.to_string()),
                };
                let _ = tx.send((index, report));
            });
        let started = spawned
            .map(|_| Instant::now())
            .map_err(|e| ProbeReport::unavailable("could not be probed", e.to_string()));
        self.started.push((backend.clone(), started));
    }

    /// Every report, in the order the probes were started; a probe that has
    /// not answered within its timeout makes its backend unavailable.
    pub(crate) fn finish(self) -> Vec<ProbeReport> {
        let Probes {
            timeout,
            tx,
            rx,
            started,
            ..
        } = self;
        drop(tx);
        let mut reports: Vec<Option<ProbeReport>> = started
            .iter()
            .map(|(_, started)| started.as_ref().err().cloned())
            .collect();
        let deadline = |index: usize| match &started[index].1 {
            Ok(at) => *at + timeout,
            Err(_) => Instant::now(),
        };
        loop {
            let waiting = (0..reports.len()).filter(|&i| reports[i].is_none());
            let Some(next) = waiting.map(deadline).min() else {
                break;
            };
            match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok((index, report)) => {
                    reports[index].get_or_insert(report);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    for index in 0..reports.len() {
                        if reports[index].is_none() && deadline(index) <= now {
                            reports[index] = Some(timed_out(&started[index].0, timeout));
                        }
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        reports
            .into_iter()
            .zip(&started)
            .map(|(report, (backend, _))| report.unwrap_or_else(|| timed_out(backend, timeout)))
            .collect()
    }
}

/// The report of a probe that did not answer in time.
fn timed_out(backend: &BackendObject, timeout: Duration) -> ProbeReport {
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
}
