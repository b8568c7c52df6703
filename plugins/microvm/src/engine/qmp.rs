//! QEMU's machine protocol, for what the agent cannot do from inside:
//! pausing every vCPU (`stop`) and letting them go on (`cont`). One
//! connection per VM, opened after boot; commands are answered in order,
//! with asynchronous events in between that are skipped.

use std::io::{self, BufRead, BufReader, Write};
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
        writeln!(self.writer, "{{\"execute\":\"{command}\"}}")?;
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "QEMU closed its QMP socket",
                ));
            }
            match answer(&line) {
                Answer::Return => return Ok(()),
                Answer::Error(why) => {
                    return Err(io::Error::other(format!("QMP {command}: {why}")));
                }
                Answer::Event => {}
            }
        }
    }
}

/// One line from QEMU.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Return,
    Error(String),
    Event,
}

fn answer(line: &str) -> Answer {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
        return Answer::Error(format!("unreadable: {}", line.trim()));
    };
    if value.get("return").is_some() {
        Answer::Return
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
        assert_eq!(answer("{\"return\": {}}\n"), Answer::Return);
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
