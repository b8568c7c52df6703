//! QEMU's machine protocol, for what the agent cannot do from inside:
//! pausing every vCPU (`stop`) and letting them go on (`cont`), and a
//! checkpoint — the machine's state written to a descriptor we pass
//! (`getfd`, `migrate fd:`; QEMU's own `exec:` would need a fork, which its
//! sandbox denies) and read back by a new QEMU (`migrate-incoming`). One
//! connection per QEMU; commands are answered in order, with asynchronous
//! events in between that are skipped.
//!
//! Hand-written rather than the `qapi` crates: eight commands over a line
//! protocol, and `getfd` needs a descriptor passed (`sandbox_fdpass`),
//! which qapi does not do; `qapi-qmp` generates the whole QEMU schema in
//! its build script.

use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// How long QEMU may take to answer a command.
const PATIENCE: Duration = Duration::from_secs(10);

/// A negotiated QMP connection.
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects, reads the greeting and leaves capabilities negotiation.
    pub fn connect(socket: &Path) -> io::Result<Self> {
        let stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(Some(PATIENCE))?;
        let writer = stream.try_clone()?;
        let mut qmp = Self {
            reader: BufReader::new(stream),
            writer,
        };
        let mut greeting = String::new();
        qmp.reader.read_line(&mut greeting)?;
        if !greeting.contains("\"QMP\"") {
            return Err(io::Error::other(format!(
                "not a QMP greeting: {}",
                greeting.trim()
            )));
        }
        qmp.execute("qmp_capabilities")?;
        Ok(qmp)
    }

    /// Runs a command without arguments; `Ok` on its `return`, the error's
    /// description otherwise.
    pub fn execute(&mut self, command: &str) -> io::Result<()> {
        self.call(command, serde_json::Value::Null).map(drop)
    }

    /// Runs a command (`arguments` null for none); returns its `return`.
    pub fn call(
        &mut self,
        command: &str,
        arguments: serde_json::Value,
    ) -> io::Result<serde_json::Value> {
        let request = request(command, arguments);
        writeln!(self.writer, "{request}")?;
        self.answer(command)
    }

    /// `getfd`: hands QEMU a copy of `fd` under `name` (SCM_RIGHTS on the
    /// QMP socket), for a later `fd:NAME`.
    pub fn pass_fd(&mut self, name: &str, fd: RawFd) -> io::Result<()> {
        let request = format!(
            "{}\n",
            request("getfd", serde_json::json!({"fdname": name}))
        );
        send_with_fd(self.writer.as_raw_fd(), request.as_bytes(), fd)?;
        self.answer("getfd").map(drop)
    }

    /// `query-migrate` until the migration completed, failed or `deadline`.
    pub fn wait_for_migration(&mut self, deadline: std::time::Instant) -> io::Result<()> {
        loop {
            let info = self.call("query-migrate", serde_json::Value::Null)?;
            match info.get("status").and_then(|s| s.as_str()) {
                Some("completed") => return Ok(()),
                Some(status @ ("failed" | "cancelled")) => {
                    let why = info
                        .get("error-desc")
                        .and_then(|e| e.as_str())
                        .unwrap_or("no reason given");
                    return Err(io::Error::other(format!("migration {status}: {why}")));
                }
                _ if std::time::Instant::now() > deadline => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("migration not done in time: {info}"),
                    ));
                }
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    fn answer(&mut self, command: &str) -> io::Result<serde_json::Value> {
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "QEMU closed its QMP socket",
                ));
            }
            match answer(&line) {
                Answer::Return(value) => return Ok(value),
                Answer::Error(why) => {
                    return Err(io::Error::other(format!("QMP {command}: {why}")));
                }
                Answer::Event => {}
            }
        }
    }
}

/// A QMP command line.
fn request(command: &str, arguments: serde_json::Value) -> serde_json::Value {
    if arguments.is_null() {
        serde_json::json!({ "execute": command })
    } else {
        serde_json::json!({ "execute": command, "arguments": arguments })
    }
}

/// Writes `bytes` with one descriptor attached ([`sandbox_fdpass::send`]).
fn send_with_fd(socket: RawFd, bytes: &[u8], fd: RawFd) -> io::Result<()> {
    let sent = sandbox_fdpass::send(socket, bytes, &[fd])?;
    if sent != bytes.len() {
        return Err(io::Error::other("a short write on the QMP socket"));
    }
    Ok(())
}

/// One line from QEMU.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Return(serde_json::Value),
    Error(String),
    Event,
}

fn answer(line: &str) -> Answer {
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(line) else {
        return Answer::Error(format!("unreadable: {}", line.trim()));
    };
    if let Some(returned) = value.get_mut("return") {
        Answer::Return(returned.take())
    } else if let Some(error) = value.get("error") {
        Answer::Error(
            error
                .get("desc")
                .and_then(|d| d.as_str())
                .unwrap_or("unknown error")
                .to_owned(),
        )
    } else {
        Answer::Event
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_events_and_errors_are_told_apart() {
        assert_eq!(
            answer("{\"return\": {}}\n"),
            Answer::Return(serde_json::json!({}))
        );
        assert_eq!(
            answer("{\"return\": {\"status\": \"completed\"}}"),
            Answer::Return(serde_json::json!({"status": "completed"}))
        );
        assert_eq!(
            answer("{\"timestamp\": {\"seconds\": 1}, \"event\": \"STOP\"}"),
            Answer::Event
        );
        assert_eq!(
            answer("{\"error\": {\"class\": \"GenericError\", \"desc\": \"nope\"}}"),
            Answer::Error("nope".into())
        );
        assert!(matches!(answer("garbage"), Answer::Error(_)));
    }
}
