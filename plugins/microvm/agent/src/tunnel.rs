//! Egress without a NIC (docs/research/microvm.md §4.7): the agent listens on
//! the guest's loopback ports the host names, and carries every accepted
//! connection as a tunnel stream to the host, which connects it to the
//! session's own proxy — the same allowlist, the same refusals. The guest
//! has no other way out: no network device, no resolver.
//!
//! Per tunnel, one thread reads the guest socket into `TunnelData` frames
//! (end of file: `TunnelClose`), and one writes the host's data into it
//! from a queue, so a slow guest reader never stalls the frame loop. The
//! tunnel is forgotten when both directions are closed.
//!
//! Both directions are flow-controlled (`window`): the reader sends at
//! most a window the host has not written on to the proxy, and the writer
//! acknowledges what it wrote into the guest socket, so a guest program
//! that stops reading stops the proxy side, not the agent's memory.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};

use sandbox_microvm_proto::window::{Owed, Window};
use sandbox_microvm_proto::{CHUNK, Frame, Kind, TUNNEL_STREAMS, TunnelOpen};

use crate::outbox::Outbox;
use crate::{lock, log};

/// What the frame loop sends a tunnel's writer: bytes, or the end.
enum ToGuest {
    Data(Vec<u8>),
    Close,
}

/// One live tunnel.
struct Tunnel {
    /// To the writer into the guest socket, while it runs.
    writer: Option<Sender<ToGuest>>,
    /// What the host still lets the reader send.
    window: Arc<Window>,
    /// How many of its two threads have ended.
    ended: u8,
}

/// The live tunnels, by stream.
#[derive(Default)]
pub struct Tunnels {
    tunnels: Mutex<HashMap<u32, Tunnel>>,
    next: AtomicU32,
}

impl Tunnels {
    /// Listens on `127.0.0.1:port` for each port (bringing `lo` up first)
    /// and tunnels what connects. The error names the port that failed.
    pub fn listen<W: Write + Send + 'static>(
        self: &Arc<Self>,
        ports: &[u16],
        outbox: &Arc<Outbox<W>>,
    ) -> Result<(), String> {
        loopback_up().map_err(|e| format!("bringing up lo: {e}"))?;
        for &port in ports {
            let listener = TcpListener::bind(("127.0.0.1", port))
                .map_err(|e| format!("listening on 127.0.0.1:{port}: {e}"))?;
            let tunnels = Arc::clone(self);
            let outbox = Arc::clone(outbox);
            std::thread::Builder::new()
                .name(format!("egress-{port}"))
                .spawn(move || {
                    for conn in listener.incoming() {
                        match conn {
                            Ok(socket) => tunnels.open(port, socket, &outbox),
                            Err(e) => log!("accept on 127.0.0.1:{port}: {e}"),
                        }
                    }
                })
                .map_err(|e| format!("starting the listener of port {port}: {e}"))?;
        }
        Ok(())
    }

    fn open<W: Write + Send + 'static>(
        self: &Arc<Self>,
        port: u16,
        socket: TcpStream,
        outbox: &Arc<Outbox<W>>,
    ) {
        let stream = TUNNEL_STREAMS | (self.next.fetch_add(1, Ordering::Relaxed) & !TUNNEL_STREAMS);
        let Ok(reader) = socket.try_clone() else {
            return;
        };
        let (to_guest, queue) = channel::<ToGuest>();
        let window = Arc::new(Window::default());
        lock(&self.tunnels).insert(
            stream,
            Tunnel {
                writer: Some(to_guest),
                window: Arc::clone(&window),
                ended: 0,
            },
        );
        outbox.send(&Frame::json(stream, Kind::TunnelOpen, &TunnelOpen { port }));
        // Guest → host.
        let out = Arc::clone(outbox);
        let tunnels = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("tunnel-read".into())
            .spawn(move || {
                pump_to_host(stream, reader, &out, &window);
                tunnels.ended(stream, false);
            });
        if spawned.is_err() {
            outbox.send(&Frame::new(stream, Kind::TunnelClose, Vec::new()));
            self.ended(stream, false);
        }
        // Host → guest.
        let tunnels = Arc::clone(self);
        let out = Arc::clone(outbox);
        let ended = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("tunnel-write".into())
            .spawn(move || {
                let mut socket = socket;
                let mut owed = Owed::default();
                for message in queue {
                    match message {
                        ToGuest::Data(bytes) => {
                            if socket.write_all(&bytes).is_err() {
                                // The guest program is gone: let the
                                // host send what it has (it is dropped).
                                out.send(&Frame::credit(stream, u32::MAX));
                                break;
                            }
                            if let Some(ack) = owed.handed_on(bytes.len()) {
                                out.send(&Frame::credit(stream, ack));
                            }
                        }
                        ToGuest::Close => break,
                    }
                }
                let _ = socket.shutdown(Shutdown::Write);
                tunnels.ended(stream, true);
            });
        if spawned.is_err() {
            ended.ended(stream, true);
        }
    }

    /// Bytes from the host for a tunnel (dropped if it is gone).
    pub fn data(&self, stream: u32, bytes: Vec<u8>) {
        if let Some(writer) = lock(&self.tunnels)
            .get(&stream)
            .and_then(|t| t.writer.as_ref())
        {
            let _ = writer.send(ToGuest::Data(bytes));
        }
    }

    /// The host sends no more on this tunnel.
    pub fn close(&self, stream: u32) {
        if let Some(writer) = lock(&self.tunnels)
            .get(&stream)
            .and_then(|t| t.writer.as_ref())
        {
            let _ = writer.send(ToGuest::Close);
        }
    }

    /// The host wrote `bytes` more of the tunnel to its proxy.
    pub fn credit(&self, stream: u32, bytes: u32) {
        if let Some(tunnel) = lock(&self.tunnels).get(&stream) {
            tunnel.window.grant(bytes);
        }
    }

    /// One of a tunnel's threads ended (`writer`: the one into the guest
    /// socket); after both, the tunnel is forgotten.
    fn ended(&self, stream: u32, writer: bool) {
        let mut tunnels = lock(&self.tunnels);
        let Some(tunnel) = tunnels.get_mut(&stream) else {
            return;
        };
        if writer {
            tunnel.writer = None;
        }
        tunnel.ended += 1;
        if tunnel.ended >= 2 {
            tunnels.remove(&stream);
        }
    }
}

/// Reads the guest socket into frames, within the window, until end of
/// file or an error, then says `TunnelClose`.
fn pump_to_host<W: Write + Send + 'static>(
    stream: u32,
    mut socket: TcpStream,
    out: &Outbox<W>,
    window: &Window,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let allowed = window.wait_for_some(buf.len());
        match socket.read(&mut buf[..allowed]) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                window.spend(n);
                out.send(&Frame::new(stream, Kind::TunnelData, buf[..n].to_vec()));
            }
        }
    }
    out.send(&Frame::new(stream, Kind::TunnelClose, Vec::new()));
}

/// `ip link set lo up`, by ioctl: the guest kernel starts with `lo` down.
fn loopback_up() -> io::Result<()> {
    // SAFETY: a datagram socket only used for interface ioctls, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `ifreq` is plain data; the name fits with its NUL; both
    // ioctls read and write only the struct we pass.
    let result = unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        let ok = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) == 0 && {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) == 0
        };
        if ok {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    // SAFETY: closing the socket made above.
    unsafe { libc::close(fd) };
    result
}
