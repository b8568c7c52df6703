//! The protocol loop, over any transport: says `Hello`, then reads the
//! host's frames and dispatches them until the host shuts the agent down or
//! goes away. Only this thread reads; replies and output go through the one
//! [`Outbox`].

use std::io::{self, BufReader, Read, Write};
use std::sync::Arc;

use sandbox_microvm_proto::{
    Egress, Exec, Failed, Frame, Hello, Kind, Mount, Mounted, PtySize, Restored, Signal,
    TUNNEL_STREAMS, VERSION,
};

use crate::command::Streams;
use crate::outbox::Outbox;
use crate::power::Role;
use crate::tunnel::Tunnels;
use crate::{log, reaper};

/// Why serving ended.
#[derive(Debug)]
pub enum End {
    /// The host sent `Shutdown`.
    Shutdown,
    /// The host closed the transport.
    Closed,
    /// The transport failed or carried garbage.
    Broken(io::Error),
}

/// Serves the host on `input`/`output` until the [`End`].
pub fn serve<R: Read, W: Write + Send + 'static>(input: R, output: W, role: Role) -> End {
    if let Err(e) = reaper::start() {
        return End::Broken(io::Error::new(
            e.kind(),
            format!("cannot start the reaper: {e}"),
        ));
    }
    let outbox = Arc::new(Outbox::new(output, role));
    let streams = Arc::new(Streams::default());
    let tunnels = Arc::new(Tunnels::default());
    outbox.send(&Frame::json(
        0,
        Kind::Hello,
        &Hello {
            version: VERSION,
            boot_id: boot_id(),
        },
    ));
    let mut input = BufReader::new(input);
    loop {
        let frame = match Frame::read_from(&mut input) {
            Ok(Some(frame)) => frame,
            Ok(None) => return End::Closed,
            Err(e) => return End::Broken(e),
        };
        let stream = frame.stream;
        match frame.kind {
            Kind::Ping => outbox.send(&Frame::new(stream, Kind::Pong, frame.payload)),
            Kind::Pong => {}
            Kind::Exec => {
                let started = match frame.body::<Exec>() {
                    _ if stream == 0 => Err(Failed {
                        errno: libc::EINVAL,
                        message: "stream 0 is the control stream".into(),
                    }),
                    Ok(exec) => streams.start(stream, &exec, &outbox),
                    Err(e) => Err(Failed {
                        errno: libc::EINVAL,
                        message: e.to_string(),
                    }),
                };
                if let Err(failed) = started {
                    outbox.send(&Frame::json(stream, Kind::Failed, &failed));
                }
            }
            Kind::Stdin => streams.stdin(stream, frame.payload),
            Kind::Credit => match frame.credited() {
                Some(bytes) if stream & TUNNEL_STREAMS != 0 => tunnels.credit(stream, bytes),
                Some(bytes) => streams.credit(stream, bytes),
                None => log!("a Credit frame of {} bytes", frame.payload.len()),
            },
            Kind::Resize => match frame.body::<PtySize>() {
                Ok(size) => streams.resize(stream, size),
                Err(e) => log!("{e}"),
            },
            Kind::Signal => match frame.body::<Signal>() {
                Ok(Signal { signal }) => streams.signal(stream, signal),
                Err(e) => log!("{e}"),
            },
            Kind::Mount => {
                let error = match frame.body::<Mount>() {
                    Ok(share) => crate::share::mount(&share).err(),
                    Err(e) => Some(e.to_string()),
                };
                outbox.send(&Frame::json(stream, Kind::Mounted, &Mounted { error }));
            }
            Kind::Restored => {
                let error = match frame.body::<Restored>() {
                    Ok(restored) => crate::restored::apply(&restored).err(),
                    Err(e) => Some(e.to_string()),
                };
                outbox.send(&Frame::json(stream, Kind::Mounted, &Mounted { error }));
            }
            Kind::Unmount => {
                let error = match frame.body::<Mount>() {
                    Ok(share) => crate::share::unmount(&share).err(),
                    Err(e) => Some(e.to_string()),
                };
                outbox.send(&Frame::json(stream, Kind::Mounted, &Mounted { error }));
            }
            Kind::Egress => {
                let error = match frame.body::<Egress>() {
                    Ok(egress) => tunnels.listen(&egress.ports, &outbox).err(),
                    Err(e) => Some(e.to_string()),
                };
                outbox.send(&Frame::json(stream, Kind::Listening, &Mounted { error }));
            }
            Kind::TunnelData => tunnels.data(stream, frame.payload),
            Kind::TunnelClose => tunnels.close(stream),
            Kind::Shutdown => return End::Shutdown,
            kind => log!("ignoring a {kind:?} frame from the host"),
        }
    }
}

/// The kernel's boot id: tells the host a rebooted guest from a resumed one.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_owned())
        .unwrap_or_default()
}
