//! `process.v1.ProcessService`: every command through `Session::exec`, the
//! one dispatch path (SPEC B10) — the mode's command policy and the
//! guardrails decide before the sandbox sees anything, the environment is
//! sanitized (H5, H6). A refusal is `PERMISSION_DENIED` with the policy's
//! words; a violation while a command runs (a refused connection, a
//! refused creation) is written to its stderr as one `cc_server:` line,
//! the only channel the contract has for it (SPEC H14).
//!
//! Process ids are the daemon's own small numbers (the contract's `int32`),
//! each naming one command still running.

use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

use futures_util::Stream;
use sandbox_plugin_api::{EventBody, ExecRequest, PtySize};
use sandbox_runtime::env;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use crate::Daemon;
use crate::proto::{
    ExecuteRequest, ExecuteResponse, ExitEvent, InitEvent, ProcessConfig, ResizeTtyRequest,
    ResizeTtyResponse, SendSignalRequest, SendSignalResponse, Signal, StartRequest, StartResponse,
    WriteStdinRequest, WriteStdinResponse, process_service_server::ProcessService, start_response,
    write_stdin_request,
};
use crate::status::{session_status, violation_line};

/// Output `Execute` keeps per stream: its answer must stay under the
/// 4 MiB a gRPC client takes by default. The rest is cut, and said so.
pub const EXECUTE_OUTPUT_LIMIT: usize = 1 << 20;

/// The commands started by `Start` and still running.
#[derive(Default)]
pub struct Processes {
    next: AtomicI32,
    running: Mutex<HashMap<i32, Running>>,
}

#[derive(Debug, Clone, Copy)]
struct Running {
    exec_id: u64,
    pty: bool,
    stdin: bool,
}

impl Processes {
    fn add(&self, running: Running) -> i32 {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.lock().insert(id, running);
        id
    }

    fn get(&self, id: i32) -> Result<Running, Status> {
        self.lock().get(&id).copied().ok_or_else(|| {
            Status::not_found(format!(
                "no running process {id}: it ended, or was never started here"
            ))
        })
    }

    fn remove(&self, id: i32) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The service, over one daemon.
pub struct ProcessApi {
    daemon: Arc<Daemon>,
}

impl ProcessApi {
    pub fn new(daemon: Arc<Daemon>) -> Self {
        Self { daemon }
    }

    /// The request the runtime gets for a contract's `ProcessConfig`.
    async fn exec_request(
        &self,
        config: Option<ProcessConfig>,
        stdin: bool,
        pty: Option<PtySize>,
    ) -> Result<ExecRequest, Status> {
        let config = config.ok_or_else(|| {
            Status::invalid_argument("config is missing: give the command in config.command")
        })?;
        if config.command.is_empty() {
            return Err(Status::invalid_argument(
                "config.command is empty: give the command and its arguments",
            ));
        }
        // The jail is made, and judges, off the async threads.
        let cwd = match config.cwd.filter(|c| !c.is_empty()) {
            Some(cwd) => {
                let daemon = Arc::clone(&self.daemon);
                let confined =
                    tokio::task::spawn_blocking(move || crate::files::confined_cwd(&daemon, &cwd))
                        .await
                        .map_err(|e| Status::internal(e.to_string()))??;
                Some(confined)
            }
            None => None,
        };
        let mut environment = env::api_base();
        environment.extend(config.env_vars);
        Ok(ExecRequest {
            argv: config.command,
            env: environment,
            cwd: cwd.map(PathBuf::from),
            stdin,
            timeout_ms: None,
            pty,
            host_fds: None,
        })
    }
}

type StartStream = Pin<Box<dyn Stream<Item = Result<StartResponse, Status>> + Send>>;

fn event(event: start_response::Event) -> StartResponse {
    StartResponse { event: Some(event) }
}

#[tonic::async_trait]
impl ProcessService for ProcessApi {
    type StartStream = StartStream;

    async fn start(
        &self,
        request: Request<StartRequest>,
    ) -> Result<Response<Self::StartStream>, Status> {
        let request = request.into_inner();
        let pty = request.pty.map(|p| PtySize {
            cols: u16::try_from(p.cols).unwrap_or(u16::MAX).max(1),
            rows: u16::try_from(p.rows).unwrap_or(u16::MAX).max(1),
        });
        let session = Arc::clone(&self.daemon.session);
        // Stdin stays open for `WriteStdin` where the backend can feed it.
        let stdin = session.supports(sandbox_plugin_api::capability::STDIN);
        let exec = self.exec_request(request.config, stdin, pty).await?;
        let mut stream = session.exec(exec).await.map_err(|e| session_status(&e))?;
        let id = self.daemon.processes.add(Running {
            exec_id: stream.exec_id,
            pty: pty.is_some(),
            stdin,
        });
        let (tx, rx) = mpsc::channel::<Result<StartResponse, Status>>(64);
        let daemon = Arc::clone(&self.daemon);
        tokio::spawn(async move {
            let init = event(start_response::Event::Init(InitEvent { process_id: id }));
            let mut open = tx.send(Ok(init)).await.is_ok();
            while open {
                let Some(ev) = stream.next().await else {
                    let _ = tx
                        .send(Err(Status::unavailable(
                            "the sandbox ended without reporting the command's exit",
                        )))
                        .await;
                    break;
                };
                let out = match ev.body {
                    EventBody::Stdout(data) => start_response::Event::Stdout(data),
                    EventBody::Stderr(data) => start_response::Event::Stderr(data),
                    EventBody::Violation(v) => {
                        start_response::Event::Stderr(violation_line(&v).into_bytes())
                    }
                    EventBody::Exit { code, .. } => {
                        start_response::Event::Exit(ExitEvent { exit_code: code })
                    }
                    EventBody::Killed { signal, .. } => start_response::Event::Exit(ExitEvent {
                        exit_code: 128 + signal.unwrap_or(libc::SIGKILL),
                    }),
                    _ => continue,
                };
                let last = matches!(out, start_response::Event::Exit(_));
                // A client gone away drops the stream here, which kills
                // the command (its guard).
                open = tx.send(Ok(event(out))).await.is_ok() && !last;
            }
            daemon.processes.remove(id);
        });
        let out = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        Ok(Response::new(Box::pin(out)))
    }

    async fn execute(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<ExecuteResponse>, Status> {
        let exec = self
            .exec_request(request.into_inner().config, false, None)
            .await?;
        let session = &self.daemon.session;
        let mut stream = session.exec(exec).await.map_err(|e| session_status(&e))?;
        let (mut stdout, mut stderr, mut cut) = (Vec::new(), Vec::new(), false);
        let exit_code = loop {
            let Some(ev) = stream.next().await else {
                return Err(Status::unavailable(
                    "the sandbox ended without reporting the command's exit",
                ));
            };
            match ev.body {
                EventBody::Stdout(data) => keep(&mut stdout, &data, &mut cut),
                EventBody::Stderr(data) => keep(&mut stderr, &data, &mut cut),
                EventBody::Violation(v) => {
                    keep(&mut stderr, violation_line(&v).as_bytes(), &mut cut)
                }
                EventBody::Exit { code, .. } => break code,
                EventBody::Killed { signal, .. } => break 128 + signal.unwrap_or(libc::SIGKILL),
                _ => {}
            }
        };
        if cut {
            stderr.extend_from_slice(
                format!(
                    "\ncc_server: output cut at {EXECUTE_OUTPUT_LIMIT} bytes per stream; \
                     use Start to stream all of it\n"
                )
                .as_bytes(),
            );
        }
        Ok(Response::new(ExecuteResponse {
            exit_code,
            stdout,
            stderr,
        }))
    }

    async fn write_stdin(
        &self,
        request: Request<WriteStdinRequest>,
    ) -> Result<Response<WriteStdinResponse>, Status> {
        let request = request.into_inner();
        let running = self.daemon.processes.get(request.process_id)?;
        if !running.stdin {
            return Err(Status::failed_precondition(format!(
                "process {}: the backend `{}` cannot feed a command's stdin",
                request.process_id,
                self.daemon.session.backend_name()
            )));
        }
        let session = &self.daemon.session;
        let done = match request.payload {
            Some(write_stdin_request::Payload::Input(data)) => {
                session.write_stdin(running.exec_id, data).await
            }
            Some(write_stdin_request::Payload::Eof(())) => {
                session.close_stdin(running.exec_id).await
            }
            None => {
                return Err(Status::invalid_argument(
                    "give input (bytes) or eof to close stdin",
                ));
            }
        };
        done.map_err(|e| session_status(&e))?;
        Ok(Response::new(WriteStdinResponse {}))
    }

    async fn send_signal(
        &self,
        request: Request<SendSignalRequest>,
    ) -> Result<Response<SendSignalResponse>, Status> {
        let request = request.into_inner();
        let signal = match Signal::try_from(request.signal) {
            Ok(Signal::Sigint) => libc::SIGINT,
            Ok(Signal::Sigterm) => libc::SIGTERM,
            Ok(Signal::Sigkill) => libc::SIGKILL,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "signal {}: give SIGNAL_SIGINT, SIGNAL_SIGTERM or SIGNAL_SIGKILL",
                    request.signal
                )));
            }
        };
        let running = self.daemon.processes.get(request.process_id)?;
        self.daemon
            .session
            .kill(running.exec_id, signal)
            .await
            .map_err(|e| session_status(&e))?;
        Ok(Response::new(SendSignalResponse {}))
    }

    async fn resize_tty(
        &self,
        request: Request<ResizeTtyRequest>,
    ) -> Result<Response<ResizeTtyResponse>, Status> {
        let request = request.into_inner();
        let running = self.daemon.processes.get(request.process_id)?;
        if !running.pty {
            return Err(Status::failed_precondition(format!(
                "process {} has no terminal: start it with a pty to resize it",
                request.process_id
            )));
        }
        let size = PtySize {
            cols: u16::try_from(request.cols).unwrap_or(u16::MAX).max(1),
            rows: u16::try_from(request.rows).unwrap_or(u16::MAX).max(1),
        };
        self.daemon
            .session
            .resize(running.exec_id, size)
            .await
            .map_err(|e| session_status(&e))?;
        Ok(Response::new(ResizeTtyResponse {}))
    }
}

fn keep(kept: &mut Vec<u8>, data: &[u8], cut: &mut bool) {
    let room = EXECUTE_OUTPUT_LIMIT.saturating_sub(kept.len());
    if data.len() > room {
        *cut = true;
    }
    kept.extend_from_slice(&data[..data.len().min(room)]);
}
