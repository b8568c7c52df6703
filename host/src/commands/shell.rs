//! `cc_server shell`: an interactive shell in a fresh sandbox, on the
//! user's own terminal (SPEC D3). The sandbox is made from the same flags
//! as `run`; the shell runs on a terminal made inside it (on bwrap, from the
//! sandbox's own devpts), never on this one: our terminal only gets the
//! bytes, copied both ways, so nothing in the sandbox can push input into
//! it (`TIOCSTI`) or change its modes. This terminal is in raw mode while
//! the shell runs, follows its size (SIGWINCH), and is restored on every
//! way out; the exit status is the shell's.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use sandbox_plugin_api::{EventBody, ExecRequest, PtySize};
use tokio::io::AsyncReadExt;
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::ShellArgs;
use crate::config::Settings;
use sandbox_runtime::env;
use sandbox_runtime::sessions::Session;
use sandbox_runtime::start::start;

pub async fn run(settings: &Settings, args: ShellArgs) -> anyhow::Result<ExitCode> {
    // SAFETY: isatty on our own descriptor.
    if unsafe { libc::isatty(libc::STDIN_FILENO) } != 1 {
        anyhow::bail!(
            "`cc_server shell` needs a terminal on stdin; for a command without one, use `cc_server run`"
        );
    }
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let spec = super::run::build_spec(&args.sandbox, &cwd)?;
    let sessions = start(&settings.start_options_with(None), None).await?;
    let session = sessions
        .create(spec, args.sandbox.backend.as_deref())
        .await?;
    eprintln!(
        "cc_server: a shell in {} — {}",
        session.backend_name(),
        session.handle().note
    );
    if let Some(notice) = session.selection.notice() {
        eprintln!("cc_server: {notice}");
    }
    let outcome = shell(&session, &args).await;
    session.destroy().await;
    outcome
}

/// The shell asked for, or `bash -i` (else `sh -i`).
fn argv(args: &ShellArgs) -> Vec<String> {
    if !args.command.is_empty() {
        return args.command.clone();
    }
    let bash = ["/usr/bin/bash", "/bin/bash"]
        .iter()
        .any(|p| std::path::Path::new(p).exists());
    let shell = if bash { "bash" } else { "sh" };
    vec![shell.to_owned(), "-i".to_owned()]
}

async fn shell(session: &Arc<Session>, args: &ShellArgs) -> anyhow::Result<ExitCode> {
    let mut environment = env::inherited();
    environment
        .entry("TERM".into())
        .or_insert_with(|| "xterm-256color".into());
    let request = ExecRequest {
        argv: argv(args),
        env: environment,
        cwd: None,
        stdin: true,
        timeout_ms: None,
        pty: Some(window_size()),
        host_fds: None,
    };
    let mut stream = session.exec_interactive(request).await?;
    let exec_id = stream.exec_id;
    // Restored when this returns, whichever way.
    let _raw = RawMode::enter()?;
    let input = tokio::spawn(forward_input(Arc::clone(session), exec_id));
    let mut winch = signal(SignalKind::window_change()).context("listening for SIGWINCH")?;
    let mut hangup = signal(SignalKind::hangup()).context("listening for SIGHUP")?;
    let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut stdout = std::io::stdout();
    let code = loop {
        tokio::select! {
            event = stream.next() => match event.map(|e| e.body) {
                Some(EventBody::Stdout(bytes) | EventBody::Stderr(bytes)) => {
                    if stdout.write_all(&bytes).and_then(|()| stdout.flush()).is_err() {
                        break 1;
                    }
                }
                Some(EventBody::Exit { code, .. }) => break code,
                Some(EventBody::Killed { signal, .. }) => break 128 + signal.unwrap_or(libc::SIGKILL),
                Some(_) => {}
                None => break 1,
            },
            _ = winch.recv() => {
                let _ = session.resize(exec_id, window_size()).await;
            }
            _ = hangup.recv() => break 128 + libc::SIGHUP,
            _ = terminate.recv() => break 128 + libc::SIGTERM,
        }
    };
    input.abort();
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// Copies what is typed here into the shell's terminal.
async fn forward_input(session: Arc<Session>, exec_id: u64) {
    let mut stdin = tokio::io::stdin();
    let mut buf = vec![0u8; 4096];
    loop {
        match stdin.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = session.close_stdin(exec_id).await;
                return;
            }
            Ok(n) => {
                if session
                    .write_stdin(exec_id, buf[..n].to_vec())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

/// This terminal's size (80×24 if it cannot be read).
fn window_size() -> PtySize {
    // SAFETY: an all-zero winsize is a valid value.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize into `size`.
    let rc = unsafe { libc::ioctl(libc::STDIN_FILENO, libc::TIOCGWINSZ, &mut size) };
    if rc != 0 || size.ws_col == 0 || size.ws_row == 0 {
        return PtySize { cols: 80, rows: 24 };
    }
    PtySize {
        cols: size.ws_col,
        rows: size.ws_row,
    }
}

/// This terminal in raw mode until dropped: keys go to the shell as typed
/// (`^C` is the shell's, not ours), and the modes it had come back.
struct RawMode {
    saved: libc::termios,
}

impl RawMode {
    fn enter() -> anyhow::Result<Self> {
        // SAFETY: an all-zero termios is a valid value to fill.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: tcgetattr fills `saved` from our own stdin.
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut saved) } != 0 {
            return Err(std::io::Error::last_os_error()).context("reading the terminal's modes");
        }
        let mut raw = saved;
        // SAFETY: cfmakeraw edits the struct we own.
        unsafe { libc::cfmakeraw(&mut raw) };
        // SAFETY: tcsetattr on our own stdin with a valid termios.
        if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw) } != 0 {
            return Err(std::io::Error::last_os_error())
                .context("putting the terminal in raw mode");
        }
        Ok(Self { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: tcsetattr on our own stdin with the modes read before.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSADRAIN, &self.saved) };
    }
}
