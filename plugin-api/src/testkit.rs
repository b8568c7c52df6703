//! The conformance kit: the contract of this crate, as checks every backend
//! runs in its own tests (feature `testkit`).
//!
//! ```ignore
//! #[test]
//! fn conforms() {
//!     sandbox_plugin_api::testkit::assert_conformance(|| MyBackend::new(), &Options::default());
//! }
//! ```
//!
//! The checks drive the backend through the real ABI objects and guards, the
//! way the server does (minus dlopen; [`run_on`] also takes a loaded backend).
//! They run POSIX shell commands (`sh`, `printf`, `cat`, `sleep`, `head`), so
//! the sandbox must offer a shell.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use abi_stable::std_types::{RResult, RStr};

use crate::host::{BackendObject, EventHandler, SandboxObject};
use crate::sdk::{BackendImpl, EventSender, SandboxImpl};
use crate::{
    ErrorCode, Event, EventBody, ExecRequest, KillReason, PluginError, ProbeContext, ProbeReport,
    PtySize, ResizeRequest, SandboxInfo, SandboxSpec, calls, capability,
};

/// How to run the checks.
#[derive(Debug, Clone)]
pub struct Options {
    /// The spec every check launches with.
    pub spec: SandboxSpec,
    /// The environment of every exec (the host always sends a complete one).
    pub env: BTreeMap<String, String>,
    /// How long any one wait may take before the check fails.
    pub patience: Duration,
}

impl Default for Options {
    fn default() -> Self {
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
        Self {
            spec: SandboxSpec {
                session_id: "conformance".into(),
                workspace_id: "conformance".into(),
                ..SandboxSpec::default()
            },
            env: BTreeMap::from([
                ("PATH".to_owned(), path),
                ("LC_ALL".to_owned(), "C".to_owned()),
            ]),
            patience: Duration::from_secs(30),
        }
    }
}

/// Runs every check on backends made by `make`, including panic containment;
/// panics with the list of failed checks.
pub fn assert_conformance<B: BackendImpl>(make: impl Fn() -> B, options: &Options) {
    let failures = run(make, options);
    assert!(
        failures.is_empty(),
        "conformance failures:\n- {}",
        failures.join("\n- ")
    );
}

/// Runs every check; returns what failed, one line each.
pub fn run<B: BackendImpl>(make: impl Fn() -> B, options: &Options) -> Vec<String> {
    let mut failures = match BackendObject::builtin(make()) {
        Ok(backend) => run_on(&backend, options),
        Err(e) => return vec![format!("the backend could not be wrapped: {e}")],
    };
    failures.extend(check_panics(&make, options));
    failures.extend(check_unknown_fields(make(), options));
    failures
}

/// Runs the checks that need no access to the backend's code, so they also
/// apply to a backend loaded from a library.
pub fn run_on(backend: &BackendObject, options: &Options) -> Vec<String> {
    let report = match backend.probe(&ProbeContext::default()) {
        Ok(report) if report.available => report,
        Ok(report) => {
            return vec![format!(
                "probe: unavailable here ({}; {})",
                report.note, report.hint
            )];
        }
        Err(e) => return vec![format!("probe: {e}")],
    };
    let kit = Kit {
        backend,
        options,
        report: &report,
    };
    kit.run_all()
}

impl<'a> Kit<'a> {
    fn run_all(&self) -> Vec<String> {
        type Check<'k> = fn(&Kit<'k>) -> Result<(), String>;
        let checks: Vec<(&str, Check<'a>)> = vec![
            ("ready before exec", Kit::ready_before_exec),
            ("output and exit code", Kit::output_and_exit),
            ("binary and large output", Kit::binary_and_large_output),
            ("concurrent execs keep order", Kit::concurrent_execs),
            ("manual kill", Kit::manual_kill),
            ("timeout", Kit::timeout),
            ("stdin", Kit::stdin),
            ("terminal", Kit::terminal),
            ("terminal end of input", Kit::terminal_end_of_input),
            ("unknown exec ids and calls", Kit::unknowns),
            ("destroy is idempotent and final", Kit::destroy_is_final),
        ];
        checks
            .into_iter()
            .filter_map(|(name, check)| check(self).err().map(|e| format!("{name}: {e}")))
            .collect()
    }
}

/// Records a sandbox's events and lets a check wait for them.
#[derive(Default)]
pub struct Recorder {
    events: Mutex<Vec<Event>>,
    changed: Condvar,
}

impl EventHandler for Recorder {
    fn handle(&self, event: Event) -> bool {
        self.events.lock().unwrap().push(event);
        self.changed.notify_all();
        true
    }
}

impl Recorder {
    /// Everything so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }

    /// Waits until `done` holds for the events so far.
    pub fn wait_for(
        &self,
        patience: Duration,
        done: impl Fn(&[Event]) -> bool,
    ) -> Result<Vec<Event>, String> {
        let deadline = Instant::now() + patience;
        let mut events = self.events.lock().unwrap();
        loop {
            if done(&events) {
                return Ok(events.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "gave up after {patience:?}; events so far: {}",
                    summary(&events)
                ));
            }
            events = self.changed.wait_timeout(events, left).unwrap().0;
        }
    }

    /// Waits for the exec's last event and returns the exec's events.
    pub fn wait_exec(&self, exec_id: u64, patience: Duration) -> Result<Vec<Event>, String> {
        let all = self.wait_for(patience, |events| {
            events
                .iter()
                .any(|e| e.exec_id == exec_id && e.body.is_terminal())
        })?;
        Ok(all.into_iter().filter(|e| e.exec_id == exec_id).collect())
    }
}

/// An [`EventSender`] whose events go straight to a [`Recorder`], for unit
/// tests of a backend's parts (its output relay, say) without a sandbox.
pub fn recording_sender() -> (EventSender, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    let handler: Arc<dyn EventHandler> = Arc::clone(&recorder) as Arc<dyn EventHandler>;
    let sink = crate::abi::SinkBox::from_value(
        crate::host::HandlerSink { handler },
        abi_stable::sabi_trait::TD_Opaque,
    );
    (EventSender::new(sink), recorder)
}

/// The bytes of one stream of an exec.
pub fn stream(events: &[Event], stderr: bool) -> Vec<u8> {
    events
        .iter()
        .flat_map(|e| match (&e.body, stderr) {
            (EventBody::Stdout(d), false) | (EventBody::Stderr(d), true) => d.as_slice(),
            _ => &[],
        })
        .copied()
        .collect()
}

fn summary(events: &[Event]) -> String {
    let names: Vec<String> = events
        .iter()
        .map(|e| format!("{}#{}", e.body.type_name(), e.exec_id))
        .collect();
    if names.len() > 20 {
        format!(
            "{} … ({} in all)",
            names[names.len() - 20..].join(" "),
            names.len()
        )
    } else {
        names.join(" ")
    }
}

/// Checks that an exec's events end with exactly one terminal event.
fn ends_once(events: &[Event]) -> Result<&EventBody, String> {
    let terminal = events.iter().filter(|e| e.body.is_terminal()).count();
    let last = events.last().ok_or("no events")?;
    if terminal != 1 || !last.body.is_terminal() {
        return Err(format!(
            "want exactly one exit/killed, last; got {}",
            summary(events)
        ));
    }
    Ok(&last.body)
}

struct Kit<'a> {
    backend: &'a BackendObject,
    options: &'a Options,
    report: &'a ProbeReport,
}

impl Kit<'_> {
    fn launch(&self) -> Result<(SandboxObject, Arc<Recorder>), String> {
        let recorder = Arc::new(Recorder::default());
        let sandbox = self
            .backend
            .launch(&self.options.spec, recorder.clone())
            .map_err(|e| format!("launch: {e}"))?;
        Ok((sandbox, recorder))
    }

    fn request(&self, script: &str) -> ExecRequest {
        ExecRequest {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            env: self.options.env.clone(),
            ..ExecRequest::default()
        }
    }

    fn run(
        &self,
        sandbox: &SandboxObject,
        rec: &Recorder,
        req: &ExecRequest,
    ) -> Result<(u64, Vec<Event>), String> {
        let id = sandbox
            .exec(req)
            .map_err(|e| format!("exec {:?}: {e}", req.argv))?;
        if id == 0 {
            return Err("exec returned id 0, which means the sandbox itself".into());
        }
        Ok((id, rec.wait_exec(id, self.options.patience)?))
    }

    fn ready_before_exec(&self) -> Result<(), String> {
        let (sandbox, rec) = self.launch()?;
        let (id, _) = self.run(&sandbox, &rec, &self.request("true"))?;
        let all = rec.events();
        let ready = all
            .iter()
            .position(|e| e.body == EventBody::Ready)
            .ok_or("no ready event")?;
        let first_exec = all
            .iter()
            .position(|e| e.exec_id == id)
            .ok_or("no exec event")?;
        if ready > first_exec {
            return Err(format!(
                "ready came after the exec's first event: {}",
                summary(&all)
            ));
        }
        if let Some(starting) = all.iter().position(|e| e.body == EventBody::Starting)
            && starting > ready
        {
            return Err("starting came after ready".into());
        }
        sandbox.destroy().map_err(|e| format!("destroy: {e}"))
    }

    fn output_and_exit(&self) -> Result<(), String> {
        let (sandbox, rec) = self.launch()?;
        let (_, events) = self.run(
            &sandbox,
            &rec,
            &self.request("printf out; printf err >&2; exit 3"),
        )?;
        let end = ends_once(&events)?;
        if *end
            != (EventBody::Exit {
                code: 3,
                signal: None,
            })
        {
            return Err(format!("want exit code 3, got {end:?}"));
        }
        let (out, err) = (stream(&events, false), stream(&events, true));
        if out != b"out" || err != b"err" {
            return Err(format!(
                "want stdout \"out\" and stderr \"err\", got {:?} and {:?}",
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&err)
            ));
        }
        sandbox.destroy().map_err(|e| format!("destroy: {e}"))
    }

    fn binary_and_large_output(&self) -> Result<(), String> {
        let (sandbox, rec) = self.launch()?;
        let (_, events) = self.run(&sandbox, &rec, &self.request(r"printf '\000\377\n'"))?;
        ends_once(&events)?;
        if stream(&events, false) != [0u8, 255, 10] {
            return Err(format!(
                "binary output mangled: {:?}",
                stream(&events, false)
            ));
        }
        // 4 MiB on stdout and 1 MiB on stderr at once: no deadlock, nothing lost.
        let script = "head -c 4194304 /dev/zero & head -c 1048576 /dev/zero >&2; wait";
        let (_, events) = self.run(&sandbox, &rec, &self.request(script))?;
        ends_once(&events)?;
        let (out, err) = (stream(&events, false).len(), stream(&events, true).len());
        if out != 4 << 20 || err != 1 << 20 {
            return Err(format!("want 4194304 + 1048576 bytes, got {out} + {err}"));
        }
        sandbox.destroy().map_err(|e| format!("destroy: {e}"))
    }

    fn concurrent_execs(&self) -> Result<(), String> {
        let (sandbox, rec) = self.launch()?;
        let lines = 300;
        let mut ids = Vec::new();
        for n in 0..4 {
            let script =
                format!("i=0; while [ $i -lt {lines} ]; do echo \"{n} $i\"; i=$((i+1)); done");
            ids.push((
                n,
                sandbox
                    .exec(&self.request(&script))
                    .map_err(|e| format!("exec: {e}"))?,
            ));
        }
        for (n, id) in ids {
            let events = rec.wait_exec(id, self.options.patience)?;
            if *ends_once(&events)?
                != (EventBody::Exit {
                    code: 0,
                    signal: None,
                })
            {
                return Err(format!("exec {n} did not exit 0"));
            }
            let want: String = (0..lines).map(|i| format!("{n} {i}\n")).collect();
            let got = stream(&events, false);
            if got != want.as_bytes() {
                return Err(format!(
                    "exec {n}: output mixed or reordered ({} bytes)",
                    got.len()
                ));
            }
        }
        sandbox.destroy().map_err(|e| format!("destroy: {e}"))
    }

    fn manual_kill(&self) -> Result<(), String> {
        let (sandbox, rec) = self.launch()?;
        let id = sandbox
            .exec(&self.request("echo started; exec sleep 60"))
            .map_err(|e| format!("exec: {e}"))?;
        rec.wait_for(self.options.patience, |ev| {
            ev.iter()
                .any(|e| e.exec_id == id && matches!(&e.body, EventBody::Stdout(_)))
        })?;
        sandbox.kill(id, 9).map_err(|e| format!("kill: {e}"))?;
        let events = rec.wait_exec(id, self.options.patience)?;
        match ends_once(&events)? {
            EventBody::Killed {
                reason: KillReason::Manual,
                ..
            } => {}
            other => return Err(format!("want killed (manual), got {other:?}")),
        }
        sandbox.destroy().map_err(|e| format!("destroy: {e}"))
    }

    fn timeout(&self) -> Result<(), String> {
        if !self.report.has(capability::EXEC_TIMEOUT) {
            return Ok(());
        }
        let (sandbox, rec) = self.launch()?;
        let request = ExecRequest {
            timeout_ms: Some(300),
            ..self.request("exec sleep 60")
        };
        let started = Instant::now();
        let (_, events) = self.run(&sandbox, &rec, &request)?;
        match ends_once(&events)? {
            EventBody::Killed {
                reason: KillReason::Timeout,
                ..
            } => {}
            other => return Err(format!("want killed (timeout), got {other:?}")),
        }
        if started.elapsed() > Duration::from_secs(20) {
            return Err(format!("a 300 ms timeout took {:?}", started.elapsed()));
        }
        sandbox.destroy().map_err(|e| format!("destroy: {e}"))
    }

    fn stdin(&self) -> Result<(), String> {
        if !self.report.has(capability::STDIN) {
            return Ok(());
        }
        let (sandbox, rec) = self.launch()?;
        let request = ExecRequest {
            stdin: true,
            ..self.request("cat; echo done")
        };
        let id = sandbox.exec(&request).map_err(|e| format!("exec: {e}"))?;
        sandbox
            .write_stdin(id, b"hello ")
            .map_err(|e| format!("write_stdin: {e}"))?;
        sandbox
            .write_stdin(id, b"stdin\n")
            .map_err(|e| format!("write_stdin: {e}"))?;
        sandbox
            .close_stdin(id)
            .map_err(|e| format!("close_stdin: {e}"))?;
        let events = rec.wait_exec(id, self.options.patience)?;
        ends_once(&events)?;
        if stream(&events, false) != b"hello stdin\ndone\n" {
            return Err(format!(
                "got {:?}",
                String::from_utf8_lossy(&stream(&events, false))
            ));
        }
        // Without `stdin: true` the command reads end-of-file at once.
        let (_, events) = self.run(&sandbox, &rec, &self.request("cat; echo eof"))?;
        if stream(&events, false) != b"eof\n" {
            return Err("a command without stdin did not read end-of-file".into());
        }
        sandbox.destroy().map_err(|e| format!("destroy: {e}"))
    }

    /// With [`capability::PTY`]: the command runs on a terminal of the
    /// size asked for (`tty` names one, `stty size` reads it), follows a
    /// resize, reads what is typed and ends with its own exit code.
    fn terminal(&self) -> Result<(), String> {
        if !self.report.has(capability::PTY) {
            return Ok(());
        }
        let (sandbox, rec) = self.launch()?;
        let script = "tty; stty size; read line; stty size; echo \"got $line\"; exit 3";
        let request = ExecRequest {
            stdin: true,
            pty: Some(PtySize { cols: 80, rows: 24 }),
            ..self.request(script)
        };
        let id = sandbox.exec(&request).map_err(|e| format!("exec: {e}"))?;
        let output = |events: &[Event]| {
            let own: Vec<Event> = events.iter().filter(|e| e.exec_id == id).cloned().collect();
            String::from_utf8_lossy(&stream(&own, false)).into_owned()
        };
        rec.wait_for(self.options.patience, |ev| output(ev).contains("24 80"))
            .map_err(|e| format!("no `stty size` of 24 80: {e}"))?;
        let resize = serde_json::to_string(&ResizeRequest {
            exec_id: id,
            cols: 100,
            rows: 40,
        })
        .map_err(|e| e.to_string())?;
        sandbox
            .call(calls::RESIZE, &resize)
            .map_err(|e| format!("resize: {e}"))?;
        sandbox
            .write_stdin(id, b"typed\n")
            .map_err(|e| format!("write_stdin: {e}"))?;
        let events = rec.wait_exec(id, self.options.patience)?;
        let end = ends_once(&events)?;
        let text = output(&events);
        if !text.starts_with("/dev/pts/") || !text.contains("40 100") || !text.contains("got typed")
        {
            return Err(format!(
                "want a tty, 24 80, 40 100 and the typed line; got {text:?}"
            ));
        }
        if !stream(&events, true).is_empty() {
            return Err("a terminal's output came as stderr".into());
        }
        if *end
            != (EventBody::Exit {
                code: 3,
                signal: None,
            })
        {
            return Err(format!("want exit code 3, got {end:?}"));
        }
        let zero = ExecRequest {
            pty: Some(PtySize { cols: 0, rows: 24 }),
            ..self.request("true")
        };
        if sandbox.exec(&zero).is_ok() {
            return Err("a terminal of 0 columns was accepted".into());
        }
        sandbox.destroy().map_err(|e| format!("destroy: {e}"))
    }

    /// With [`capability::PTY`]: closing a terminal's input types `^D`,
    /// end of file for a reader at the start of a line, as at a keyboard.
    fn terminal_end_of_input(&self) -> Result<(), String> {
        if !self.report.has(capability::PTY) {
            return Ok(());
        }
        let (sandbox, rec) = self.launch()?;
        let request = ExecRequest {
            stdin: true,
            pty: Some(PtySize { cols: 80, rows: 24 }),
            ..self.request("cat; echo after-eof")
        };
        let id = sandbox.exec(&request).map_err(|e| format!("exec: {e}"))?;
        sandbox
            .write_stdin(id, b"line\n")
            .map_err(|e| format!("write_stdin: {e}"))?;
        sandbox
            .close_stdin(id)
            .map_err(|e| format!("close_stdin: {e}"))?;
        let events = rec.wait_exec(id, self.options.patience)?;
        let text = String::from_utf8_lossy(&stream(&events, false)).into_owned();
        if *ends_once(&events)?
            != (EventBody::Exit {
                code: 0,
                signal: None,
            })
            || !text.contains("after-eof")
        {
            return Err(format!("`cat` did not end at ^D: {text:?}"));
        }
        sandbox.destroy().map_err(|e| format!("destroy: {e}"))
    }

    fn unknowns(&self) -> Result<(), String> {
        let (sandbox, _rec) = self.launch()?;
        if sandbox.kill(987_654, 9).is_ok() {
            return Err("kill of an unknown exec id succeeded".into());
        }
        let unsupported = |r: Result<String, PluginError>| matches!(r, Err(e) if e.code == ErrorCode::UNSUPPORTED);
        if !unsupported(sandbox.call("conformance.no-such-method", "{}")) {
            return Err("sandbox call of an unknown method is not UNSUPPORTED".into());
        }
        if !unsupported(self.backend.call("conformance.no-such-method", "{}")) {
            return Err("backend call of an unknown method is not UNSUPPORTED".into());
        }
        if sandbox.exec(&ExecRequest::default()).is_ok() {
            return Err("an exec with an empty argv was accepted".into());
        }
        sandbox.destroy().map_err(|e| format!("destroy: {e}"))
    }

    fn destroy_is_final(&self) -> Result<(), String> {
        let (sandbox, rec) = self.launch()?;
        let id = sandbox
            .exec(&self.request("while :; do echo tick; sleep 0.01; done"))
            .map_err(|e| format!("exec: {e}"))?;
        rec.wait_for(self.options.patience, |ev| {
            ev.iter()
                .any(|e| e.exec_id == id && matches!(&e.body, EventBody::Stdout(_)))
        })?;
        sandbox.destroy().map_err(|e| format!("destroy: {e}"))?;
        let after_destroy = rec.events().len();
        sandbox
            .destroy()
            .map_err(|e| format!("second destroy: {e}"))?;
        std::thread::sleep(Duration::from_millis(300));
        let later = rec.events();
        if later.len() != after_destroy {
            return Err(format!(
                "events arrived after destroy returned: {}",
                summary(&later[after_destroy..])
            ));
        }
        match sandbox.exec(&self.request("true")) {
            Err(e) if e.code == ErrorCode::DESTROYED => Ok(()),
            Err(e) => Err(format!("exec after destroy: want DESTROYED, got {e}")),
            Ok(_) => Err("exec after destroy was accepted".into()),
        }
    }
}

/// Which entry point the wrapper panics in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PanicIn {
    Probe,
    Launch,
    ExecAfterStart,
    Destroy,
}

/// Wraps a real backend and panics in one entry point.
struct Panicking<B> {
    inner: B,
    at: PanicIn,
}

struct PanickingSandbox {
    inner: Box<dyn SandboxImpl>,
    at: PanicIn,
}

impl<B: BackendImpl> BackendImpl for Panicking<B> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn probe(&self, ctx: &ProbeContext) -> ProbeReport {
        assert!(
            self.at != PanicIn::Probe,
            "conformance: deliberate panic in probe"
        );
        self.inner.probe(ctx)
    }

    fn launch(
        &self,
        spec: SandboxSpec,
        events: EventSender,
    ) -> Result<Box<dyn SandboxImpl>, PluginError> {
        assert!(
            self.at != PanicIn::Launch,
            "conformance: deliberate panic in launch"
        );
        Ok(Box::new(PanickingSandbox {
            inner: self.inner.launch(spec, events)?,
            at: self.at,
        }))
    }
}

impl SandboxImpl for PanickingSandbox {
    fn info(&self) -> SandboxInfo {
        self.inner.info()
    }

    fn exec(&self, request: ExecRequest) -> Result<u64, PluginError> {
        let id = self.inner.exec(request)?;
        assert!(
            self.at != PanicIn::ExecAfterStart,
            "conformance: deliberate panic in exec (id {id})"
        );
        Ok(id)
    }

    fn kill(&self, exec_id: u64, signal: i32) -> Result<(), PluginError> {
        self.inner.kill(exec_id, signal)
    }

    fn destroy(&self) -> Result<(), PluginError> {
        if self.at == PanicIn::Destroy {
            // Clean up first so the check leaves nothing behind, then panic.
            let _ = self.inner.destroy();
            panic!("conformance: deliberate panic in destroy");
        }
        self.inner.destroy()
    }
}

fn check_panics<B: BackendImpl>(make: &impl Fn() -> B, options: &Options) -> Vec<String> {
    let mut failures = Vec::new();
    let panicked = |r: Result<(), PluginError>, what: &str, failures: &mut Vec<String>| match r {
        Err(e) if e.code == ErrorCode::PANICKED => {}
        other => failures.push(format!(
            "panic in {what}: want a PANICKED error, got {other:?}"
        )),
    };
    let wrap = |at| BackendObject::builtin(Panicking { inner: make(), at });
    let spec = &options.spec;
    let Ok(backend) = wrap(PanicIn::Probe) else {
        return vec!["panic checks: could not wrap the backend".into()];
    };
    panicked(
        backend.probe(&ProbeContext::default()).map(drop),
        "probe",
        &mut failures,
    );

    if let Ok(backend) = wrap(PanicIn::Launch) {
        let r = backend.launch(spec, Arc::new(Recorder::default()));
        panicked(r.map(drop), "launch", &mut failures);
    }

    if let Ok(backend) = wrap(PanicIn::ExecAfterStart) {
        match backend.launch(spec, Arc::new(Recorder::default())) {
            Ok(sandbox) => {
                let request = ExecRequest {
                    argv: vec!["sleep".into(), "60".into()],
                    env: options.env.clone(),
                    ..ExecRequest::default()
                };
                panicked(sandbox.exec(&request).map(drop), "exec", &mut failures);
                // The command started before the panic: destroy must still end it.
                if let Err(e) = sandbox.destroy() {
                    failures.push(format!("destroy after a panicking exec: {e}"));
                }
            }
            Err(e) => failures.push(format!("panic checks: launch: {e}")),
        }
    }

    if let Ok(backend) = wrap(PanicIn::Destroy) {
        match backend.launch(spec, Arc::new(Recorder::default())) {
            Ok(sandbox) => panicked(sandbox.destroy(), "destroy", &mut failures),
            Err(e) => failures.push(format!("panic checks: launch: {e}")),
        }
    }
    failures
}

/// JSON from a newer host: unknown fields must be ignored (SPEC A2, A3).
fn check_unknown_fields<B: BackendImpl>(backend: B, options: &Options) -> Vec<String> {
    let abi = match crate::sdk::into_abi_backend(Box::new(backend)) {
        Ok(abi) => abi,
        Err(e) => return vec![format!("unknown fields: {e}")],
    };
    let mut spec = serde_json::to_value(&options.spec).unwrap();
    spec["fieldFromTheFuture"] = serde_json::json!({"nested": [1, 2, 3]});
    let sink = crate::abi::SinkBox::from_value(NullSink, abi_stable::sabi_trait::TD_Opaque);
    let sandbox = match abi.launch(RStr::from_str(&spec.to_string()), sink) {
        RResult::ROk(sandbox) => sandbox,
        RResult::RErr(e) => {
            return vec![format!(
                "unknown fields: a spec with an extra field was refused: {}",
                e.message
            )];
        }
    };
    let mut failures = Vec::new();
    let mut request = serde_json::to_value(ExecRequest {
        argv: vec!["true".into()],
        env: options.env.clone(),
        ..ExecRequest::default()
    })
    .unwrap();
    request["fieldFromTheFuture"] = serde_json::json!(true);
    if let RResult::RErr(e) = sandbox.exec(RStr::from_str(&request.to_string())) {
        failures.push(format!(
            "unknown fields: an exec request with an extra field was refused: {}",
            e.message
        ));
    }
    if let RResult::RErr(e) = sandbox.destroy() {
        failures.push(format!("unknown fields: destroy: {}", e.message));
    }
    failures
}

struct NullSink;

impl crate::abi::EventSink for NullSink {
    fn emit(&self, _event: crate::abi::RawEvent) -> crate::abi::SinkStatus {
        crate::abi::SinkStatus::ACCEPTED
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Breaks the contract on purpose: no `ready`, output after `exit`, a
    /// fixed exit code, kills ignored.
    struct Sloppy;

    struct SloppySandbox {
        events: EventSender,
        next: AtomicU64,
    }

    impl BackendImpl for Sloppy {
        fn name(&self) -> &str {
            "sloppy"
        }

        fn probe(&self, _ctx: &ProbeContext) -> ProbeReport {
            ProbeReport {
                available: true,
                capabilities: vec![capability::STDIN.into()],
                ..ProbeReport::default()
            }
        }

        fn launch(
            &self,
            _spec: SandboxSpec,
            events: EventSender,
        ) -> Result<Box<dyn SandboxImpl>, PluginError> {
            Ok(Box::new(SloppySandbox {
                events,
                next: AtomicU64::new(1),
            }))
        }
    }

    impl SandboxImpl for SloppySandbox {
        fn info(&self) -> SandboxInfo {
            SandboxInfo::default()
        }

        fn exec(&self, _request: ExecRequest) -> Result<u64, PluginError> {
            let id = self.next.fetch_add(1, Ordering::SeqCst);
            self.events.exit(id, 0, None);
            self.events.stdout(id, b"late".to_vec());
            Ok(id)
        }

        fn write_stdin(&self, _exec_id: u64, _data: &[u8]) -> Result<(), PluginError> {
            Ok(())
        }

        fn close_stdin(&self, _exec_id: u64) -> Result<(), PluginError> {
            Ok(())
        }

        fn kill(&self, _exec_id: u64, _signal: i32) -> Result<(), PluginError> {
            Ok(())
        }

        fn destroy(&self) -> Result<(), PluginError> {
            Ok(())
        }
    }

    #[test]
    fn the_kit_catches_a_backend_that_breaks_the_contract() {
        let options = Options {
            patience: Duration::from_millis(300),
            ..Options::default()
        };
        let failures = run(|| Sloppy, &options).join("\n");
        for check in [
            "ready before exec",
            "output and exit code",
            "concurrent execs keep order",
            "manual kill",
            "stdin",
            "unknown exec ids and calls",
        ] {
            assert!(
                failures.contains(check),
                "`{check}` not reported in:\n{failures}"
            );
        }
    }

    #[test]
    fn panics_become_errors_and_the_host_survives() {
        // Sloppy does nothing that could fail, so every failure here is a
        // panic that was not contained.
        let failures = check_panics(&|| Sloppy, &Options::default());
        assert!(failures.is_empty(), "{failures:?}");
    }
}
