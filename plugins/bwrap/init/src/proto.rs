//! The wire between the bwrap backend (in the server) and `sandbox-init`
//! (PID 1 inside the sandbox): a stream socket pair, inherited by bwrap.
//!
//! A frame is a 4-byte little-endian length and that many bytes of JSON.
//! File descriptors travel as `SCM_RIGHTS` on the frame's first bytes: an
//! exec sends the write ends of the host's stdout/stderr pipes (and the read
//! end of its stdin pipe), so output flows from the command straight to the
//! backend — never copied through PID 1 — and ends when the command's last
//! writer is gone.
//!
//! Every request carries a `seq`; its answer carries the same `seq`. Events
//! that answer nothing (`ready`, `exited`) carry `seq` 0.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The protocol version `ready` announces; the backend refuses another.
pub const VERSION: u32 = 1;

/// The largest frame either side accepts (an exec's argv and environment).
pub const MAX_FRAME: usize = 16 << 20;

/// The most descriptors one frame may carry.
pub const MAX_FDS: usize = sandbox_fdpass::MAX_FDS;

/// What the backend asks of PID 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Request {
    /// Start a command. Descriptors: stdout, stderr, stdin when `stdin`
    /// (none of the three with `pty`), then the exec's `cgroup.procs` when
    /// `cgroup`, then its cgroup directory when `cgroup_dir` too.
    Exec {
        /// The backend's exec id.
        id: u64,
        argv: Vec<String>,
        /// The complete environment.
        env: Vec<(String, String)>,
        cwd: String,
        /// Whether a stdin descriptor follows; otherwise stdin is /dev/null.
        stdin: bool,
        /// Whether the exec's `cgroup.procs` follows, open for writing: the
        /// command joins that group before anything else, so its timeout
        /// and kill reach every process it starts (threat model T31).
        #[serde(default)]
        cgroup: bool,
        /// Whether the exec's cgroup directory follows `cgroup.procs`: the
        /// command is made in the group (`clone3(CLONE_INTO_CGROUP)`)
        /// where the kernel allows it, which spares it the join's wait.
        #[serde(default, rename = "cgroupDir")]
        cgroup_dir: bool,
        /// Run on a new terminal of this size, made here from the
        /// sandbox's own devpts: the command's stdin, stdout, stderr and
        /// controlling terminal. `started` brings back its master side.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pty: Option<sandbox_plugin_api::PtySize>,
    },
    /// Signal an exec's whole process group.
    Signal { id: u64, signal: i32 },
    /// Stop every process of the sandbox (SIGSTOP).
    Freeze,
    /// Continue them (SIGCONT).
    Thaw,
}

/// What PID 1 says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Reply {
    /// PID 1 is up, its filter installed; sent once, first.
    Ready { version: u32 },
    /// The request was done.
    Done,
    /// The exec's command is running with this pid (in the sandbox's pid
    /// namespace). With `pty`, its terminal's master side comes with it.
    Started { pid: i32 },
    /// The exec could not start: `errno` from chdir or execve.
    Failed { errno: i32, message: String },
    /// The request was refused.
    Refused { message: String },
    /// The guard refused a call of an exec's command (sent before the
    /// refused call returns, so before the exec's `exited`).
    Violation {
        id: u64,
        action: String,
        target: String,
        raw: String,
    },
    /// An exec's command ended: its exit code, or the signal that ended it.
    Exited {
        id: u64,
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// A request or reply and its sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope<T> {
    pub seq: u64,
    #[serde(flatten)]
    pub body: T,
}

/// Sends one frame, with `fds` attached.
pub fn send<T: Serialize>(
    socket: BorrowedFd<'_>,
    seq: u64,
    body: &T,
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let json = serde_json::to_vec(&Envelope { seq, body }).map_err(io::Error::other)?;
    if json.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "message of {} bytes is over the {MAX_FRAME}-byte limit",
                json.len()
            ),
        ));
    }
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors",
        ));
    }
    let len = u32::try_from(json.len())
        .map_err(io::Error::other)?
        .to_le_bytes();
    let mut frame = Vec::with_capacity(4 + json.len());
    frame.extend_from_slice(&len);
    frame.extend_from_slice(&json);
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let mut sent = sendmsg(socket.as_raw_fd(), &frame, &raw)?;
    // A stream may take the frame in pieces; the descriptors went with the first.
    while sent < frame.len() {
        sent += sendmsg(socket.as_raw_fd(), &frame[sent..], &[])?;
    }
    Ok(())
}

/// Receives one frame and the descriptors that came with it; `None` when the
/// other side has closed the socket.
pub fn recv<T: DeserializeOwned>(
    socket: BorrowedFd<'_>,
) -> io::Result<Option<(Envelope<T>, Vec<OwnedFd>)>> {
    let mut fds = Vec::new();
    let mut header = [0u8; 4];
    if !read_exact(socket.as_raw_fd(), &mut header, &mut fds)? {
        return Ok(None);
    }
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes"),
        ));
    }
    let mut body = vec![0u8; len];
    if !read_exact(socket.as_raw_fd(), &mut body, &mut fds)? {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the socket closed inside a frame",
        ));
    }
    let envelope =
        serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Some((envelope, fds)))
}

/// Fills `buf`; `false` on end-of-file before the first byte.
fn read_exact(socket: RawFd, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = recvmsg(socket, &mut buf[filled..], fds)?;
        if n == 0 {
            if filled == 0 {
                return Ok(false);
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the socket closed inside a frame",
            ));
        }
        filled += n;
    }
    Ok(true)
}

/// One `sendmsg` of `data` with `fds` attached ([`sandbox_fdpass::send`]).
fn sendmsg(socket: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    sandbox_fdpass::send(socket, data, fds)
}

/// One `recvmsg` into `buf`, the descriptors that came with it appended to
/// `fds` (close-on-exec); retried on EINTR; a message whose descriptors did
/// not fit is an error. The one receive of descriptors in sandbox-init
/// ([`sandbox_fdpass::recv`]).
pub use sandbox_fdpass::recv as recvmsg;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn frames_and_descriptors_cross() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut r, w) = std::io::pipe().unwrap();
        let request = Request::Exec {
            id: 7,
            argv: vec!["echo".into(), "hi".into()],
            env: vec![("PATH".into(), "/bin".into())],
            cwd: "/".into(),
            stdin: false,
            cgroup: false,
            cgroup_dir: false,
            pty: None,
        };
        send(a.as_fd(), 3, &request, &[w.as_fd()]).unwrap();
        drop(w);
        let (got, fds) = recv::<Request>(b.as_fd()).unwrap().unwrap();
        assert_eq!(
            got,
            Envelope {
                seq: 3,
                body: request
            }
        );
        assert_eq!(fds.len(), 1);
        // The received descriptor is the pipe's write end.
        let mut writer = std::fs::File::from(fds.into_iter().next().unwrap());
        writer.write_all(b"through").unwrap();
        drop(writer);
        let mut text = String::new();
        r.read_to_string(&mut text).unwrap();
        assert_eq!(text, "through");
    }

    #[test]
    fn large_frames_and_end_of_file() {
        let (a, b) = UnixStream::pair().unwrap();
        let big = "x".repeat(3 << 20);
        let reader = std::thread::spawn(move || {
            let first = recv::<Reply>(b.as_fd()).unwrap().unwrap().0;
            let end = recv::<Reply>(b.as_fd()).unwrap();
            (first, end.is_none())
        });
        send(
            a.as_fd(),
            1,
            &Reply::Refused {
                message: big.clone(),
            },
            &[],
        )
        .unwrap();
        drop(a);
        let (first, ended) = reader.join().unwrap();
        assert_eq!(first.body, Reply::Refused { message: big });
        assert!(ended);
    }

    #[test]
    fn the_wire_names_are_stable() {
        let json = serde_json::to_string(&Envelope {
            seq: 0,
            body: Reply::Exited {
                id: 2,
                code: Some(1),
                signal: None,
            },
        })
        .unwrap();
        assert_eq!(
            json,
            r#"{"seq":0,"op":"exited","id":2,"code":1,"signal":null}"#
        );
    }
}
