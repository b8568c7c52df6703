//! The host ↔ guest-agent protocol of the `microvm` backend
//! (docs/research/microvm.md §4.5): one virtio-serial port carries every stream
//! as frames `u32 len | u32 stream | u8 kind | payload` (little-endian; `len`
//! counts the payload only). Control payloads are JSON; data payloads are raw.
//! Stream 0 is the control stream; each exec is a stream of its own, its id
//! chosen by the host (never 0).
//!
//! Pure data and codecs: the agent and the plugin share this crate, so they
//! cannot disagree on the wire.

#![forbid(unsafe_code)]

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

pub mod window;

/// Bumped on any incompatible change; the agent says its own in `Hello`.
/// 2: `Exec.pty`, `Resize`, `Credit` (per-stream flow control), `Unmount`,
/// `Restored`.
pub const VERSION: u32 = 2;

/// The largest payload a frame may carry; bigger ones are a protocol error
/// (a corrupt or hostile peer must not make the other allocate at will).
pub const MAX_PAYLOAD: u32 = 1 << 20;

/// Tunnel streams are the agent's to number, from this bit up, so they
/// never meet the host's exec and request streams.
pub const TUNNEL_STREAMS: u32 = 1 << 31;

/// Output is sent in chunks of at most this many bytes.
pub const CHUNK: usize = 64 << 10;

/// Flow control: an exec stream may have this many bytes of output sent
/// that the host has not yet handed on (`Credit`), and each direction of a
/// tunnel this many bytes its receiver has not written on. A command whose
/// output nobody takes stops at its next write, a tunnel whose reader
/// stopped stops; other streams go on. See [`window`].
pub const WINDOW: u32 = 1 << 20;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Agent → host, stream 0, JSON [`Hello`]: the agent is up.
    Hello = 1,
    /// Either way, stream 0: answered by `Pong` with the same payload.
    Ping = 2,
    Pong = 3,
    /// Host → agent, JSON [`Exec`]: start a command on this stream.
    Exec = 10,
    /// Host → agent: bytes for the command's stdin; empty = end of file.
    Stdin = 11,
    /// Host → agent, JSON [`Signal`]: signal the command's process group.
    Signal = 12,
    /// Host → agent, JSON [`PtySize`]: the terminal of the command on this
    /// stream (started with `Exec.pty`) has a new size.
    Resize = 18,
    /// Host → agent, JSON [`Restored`]: this machine was started from a
    /// saved state (a checkpoint or a template): reseed the kernel's RNG
    /// and set the clock; answered on the same stream by `Mounted`.
    Restored = 28,
    /// Host → agent, JSON [`Mount`] (only `path` counts): unmount that
    /// export, before a checkpoint (QEMU cannot migrate a mounted 9p
    /// device); answered on the same stream by `Mounted`.
    Unmount = 29,
    /// Either way, a little-endian `u32`: the receiver handed on this many
    /// more bytes of the stream (exec output: host; a tunnel: either); the
    /// sender may send that many more (see [`WINDOW`]).
    Credit = 19,
    /// Host → agent, JSON [`Mount`]: mount a 9p export; answered on the
    /// same stream by `Mounted`.
    Mount = 13,
    /// Host → agent, JSON [`Egress`]: listen on these guest loopback ports
    /// and tunnel every connection to the host; answered by `Listening`.
    Egress = 14,
    /// Agent → host, JSON [`TunnelOpen`]: a guest program connected to an
    /// egress port; the stream id is the agent's ([`TUNNEL_STREAMS`]).
    TunnelOpen = 15,
    /// Either way: bytes of a tunnel.
    TunnelData = 16,
    /// Either way: the sender will send no more on this tunnel (a
    /// half-close); a tunnel ends when both sides sent it.
    TunnelClose = 17,
    /// Agent → host, JSON [`Started`].
    Started = 20,
    /// Agent → host: bytes the command wrote.
    Stdout = 21,
    Stderr = 22,
    /// Agent → host, JSON [`Exit`]: the last frame of a stream.
    Exit = 23,
    /// Agent → host, JSON [`Failed`]: the command could not start; the last
    /// frame of its stream.
    Failed = 24,
    /// Agent → host, JSON [`Mounted`].
    Mounted = 25,
    /// Agent → host, JSON [`Mounted`]: the answer to `Egress`.
    Listening = 26,
    /// Host → agent, stream 0: kill everything, sync, power off.
    Shutdown = 30,
}

impl Kind {
    pub fn from_u8(value: u8) -> Option<Kind> {
        Some(match value {
            1 => Kind::Hello,
            2 => Kind::Ping,
            3 => Kind::Pong,
            10 => Kind::Exec,
            11 => Kind::Stdin,
            12 => Kind::Signal,
            13 => Kind::Mount,
            14 => Kind::Egress,
            15 => Kind::TunnelOpen,
            16 => Kind::TunnelData,
            17 => Kind::TunnelClose,
            18 => Kind::Resize,
            19 => Kind::Credit,
            28 => Kind::Restored,
            29 => Kind::Unmount,
            20 => Kind::Started,
            21 => Kind::Stdout,
            22 => Kind::Stderr,
            23 => Kind::Exit,
            24 => Kind::Failed,
            25 => Kind::Mounted,
            26 => Kind::Listening,
            30 => Kind::Shutdown,
            _ => return None,
        })
    }
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub stream: u32,
    pub kind: Kind,
    pub payload: Vec<u8>,
}

impl Frame {
    pub fn new(stream: u32, kind: Kind, payload: Vec<u8>) -> Self {
        Self {
            stream,
            kind,
            payload,
        }
    }

    /// A frame with a JSON payload.
    pub fn json<T: Serialize>(stream: u32, kind: Kind, body: &T) -> Self {
        // Serialising these plain structs cannot fail.
        Self::new(stream, kind, serde_json::to_vec(body).unwrap_or_default())
    }

    /// A `Credit` frame: the receiver handed on `bytes` more of `stream`.
    pub fn credit(stream: u32, bytes: u32) -> Self {
        Self::new(stream, Kind::Credit, bytes.to_le_bytes().to_vec())
    }

    /// The bytes a `Credit` frame grants; `None` for a malformed one.
    pub fn credited(&self) -> Option<u32> {
        <[u8; 4]>::try_from(self.payload.as_slice())
            .ok()
            .map(u32::from_le_bytes)
    }

    /// The JSON payload, decoded.
    pub fn body<T: for<'de> Deserialize<'de>>(&self) -> io::Result<T> {
        serde_json::from_slice(&self.payload).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{:?} frame: {e}", self.kind),
            )
        })
    }

    /// The bytes on the wire.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + self.payload.len());
        out.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.stream.to_le_bytes());
        out.push(self.kind as u8);
        out.extend_from_slice(&self.payload);
        out
    }

    /// Writes the frame in one `write_all` (callers that share a writer
    /// hold its lock around this call).
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(&self.encode())?;
        out.flush()
    }

    /// Reads one frame; `Ok(None)` at a clean end of stream (before a
    /// header). Unknown kinds and oversized payloads are errors.
    pub fn read_from(input: &mut impl Read) -> io::Result<Option<Frame>> {
        let mut header = [0u8; 9];
        let mut got = 0;
        while got < header.len() {
            match input.read(&mut header[got..]) {
                Ok(0) if got == 0 => return Ok(None),
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let stream = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let kind = Kind::from_u8(header[8]).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unknown frame kind {}", header[8]),
            )
        })?;
        if len > MAX_PAYLOAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a {len}-byte frame is over the {MAX_PAYLOAD}-byte limit"),
            ));
        }
        let mut payload = vec![0u8; len as usize];
        input.read_exact(&mut payload)?;
        Ok(Some(Frame {
            stream,
            kind,
            payload,
        }))
    }
}

/// The agent's greeting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hello {
    pub version: u32,
    /// The guest kernel's boot id (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
}

/// A command to start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Exec {
    pub argv: Vec<String>,
    /// The whole environment, in order.
    pub env: Vec<(String, String)>,
    pub cwd: Option<String>,
    /// Whether `Stdin` frames follow; without, stdin is /dev/null (or,
    /// with `pty`, a terminal nobody types into).
    pub stdin: bool,
    /// Run on a pseudo-terminal of this size: stdin, stdout and stderr are
    /// its slave side, the command leads its session with it as the
    /// controlling terminal, and all output comes as `Stdout`.
    pub pty: Option<PtySize>,
}

/// What a restored machine needs first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Restored {
    /// Fresh randomness from the host, mixed into the guest kernel's pool:
    /// every machine started from one template had the same pool.
    pub seed: Vec<u8>,
    /// The host's time (nanoseconds since the epoch): the saved clock is
    /// as old as the state.
    pub unix_nanos: u64,
}

/// A terminal size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    pub cols: u16,
    pub rows: u16,
}

/// A signal for a command's process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signal {
    pub signal: i32,
}

/// A 9p export to mount (`mount -t 9p -o trans=virtio,version=9p2000.L`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// The export's mount tag.
    pub tag: String,
    /// Where in the guest (created if missing).
    pub path: String,
    /// Mount read-only in the guest too (QEMU enforces it on the host).
    pub read_only: bool,
}

/// The answer to a [`Mount`]: `error` is `None` when it is mounted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mounted {
    pub error: Option<String>,
}

/// The guest loopback ports to listen on (`127.0.0.1`), each tunnelled to
/// the host's proxy of the same role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Egress {
    pub ports: Vec<u16>,
}

/// A guest connection to one of the egress ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelOpen {
    pub port: u16,
}

/// A command started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    pub pid: i32,
}

/// How a command ended: an exit code, or the signal that killed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// Why a command did not start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failed {
    pub errno: i32,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_end_cleanly() {
        let frames = [
            Frame::json(
                0,
                Kind::Hello,
                &Hello {
                    version: VERSION,
                    boot_id: "b".into(),
                },
            ),
            Frame::new(7, Kind::Stdout, vec![0, 1, 2, 255]),
            Frame::new(7, Kind::Stdin, Vec::new()),
            Frame::json(
                7,
                Kind::Exit,
                &Exit {
                    code: Some(3),
                    signal: None,
                },
            ),
        ];
        let mut wire = Vec::new();
        for f in &frames {
            f.write_to(&mut wire).unwrap();
        }
        let mut input = wire.as_slice();
        for f in &frames {
            assert_eq!(Frame::read_from(&mut input).unwrap().as_ref(), Some(f));
        }
        assert_eq!(Frame::read_from(&mut input).unwrap(), None);
        let exit: Exit = frames[3].body().unwrap();
        assert_eq!(exit.code, Some(3));
    }

    #[test]
    fn bad_frames_are_errors_not_allocations() {
        let mut truncated: &[u8] = &[5, 0, 0, 0, 1, 0, 0, 0, 21, b'a'];
        assert!(Frame::read_from(&mut truncated).is_err());
        let mut half_header: &[u8] = &[5, 0, 0];
        assert!(Frame::read_from(&mut half_header).is_err());
        let mut unknown: &[u8] = &[0, 0, 0, 0, 1, 0, 0, 0, 99];
        assert!(Frame::read_from(&mut unknown).is_err());
        let mut huge = Vec::from((MAX_PAYLOAD + 1).to_le_bytes());
        huge.extend_from_slice(&[1, 0, 0, 0, 21]);
        assert!(Frame::read_from(&mut huge.as_slice()).is_err());
        assert!(
            Frame::new(1, Kind::Exit, b"{".to_vec())
                .body::<Exit>()
                .is_err()
        );
    }

    #[test]
    fn every_kind_maps_back() {
        for v in 0..=255u8 {
            if let Some(k) = Kind::from_u8(v) {
                assert_eq!(k as u8, v);
            }
        }
    }
}
