//! The egress forwarder: how commands in a sandbox's empty network
//! namespace reach the session's proxies (SPEC E2).
//!
//! PID 1 binds and listens on each `127.0.0.1:PORT` itself
//! ([`listen_loopback`]) before it announces `ready`, so a command can
//! connect at once; then it starts this forwarder as a separate process
//! (`sandbox-init --forwarder PORT=FD:SOCKET …`, under the hardening filter)
//! that inherits the listeners and is their only holder from then on. The
//! forwarder accepts each connection, connects to the route's unix socket
//! (the host's proxy, bound into the sandbox) and relays both ways until
//! both directions are closed, passing a half-close on (`shutdown(SHUT_WR)`
//! when one side reaches end of file). If it dies, the listeners close with
//! it and connections are refused: fail closed.
//!
//! With a channel to the proxy (`channel=FD`, a connected socket the
//! backend passed down; no command can reach it), a connection goes to the
//! proxy over it instead ([`offer`]), and once the proxy has decided,
//! dialled and answered a CONNECT or SOCKS request it hands over the
//! upstream socket: the relay switches to command ↔ upstream, one relay
//! instead of three ([`relay_offered`]; the wire is
//! `sandbox_fdpass::handoff`). What the proxy relays itself (plain HTTP,
//! refusals) is read with `recvmsg`, so the hand-off is never spliced away.
//! Without a channel, or if it fails, connections go by the socket's path.
//!
//! One thread per connection, at most [`MAX_CONNECTIONS`] of them (more are
//! closed at once). Each thread moves bytes with `splice(2)` through one
//! pipe per direction, never through user space, and waits in `poll(2)`;
//! if a pipe cannot be made or the descriptors do not splice, it falls back
//! to a 256 KiB buffer per direction.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sandbox_fdpass::handoff::{DRAINED, HANDED};

/// The listen backlog PID 1 asks for (the kernel caps it at
/// `net.core.somaxconn`, 4096 by default since Linux 5.4).
pub const BACKLOG: i32 = 4096;

/// Connections relayed at once; more are closed as soon as accepted.
pub const MAX_CONNECTIONS: usize = 1024;

/// The size each direction's pipe is asked to have (`F_SETPIPE_SZ`; the
/// default `fs.pipe-max-size` allows it). If the kernel refuses (the user's
/// pipe pages are over `fs.pipe-user-pages-soft`), the pipe keeps its size.
const PIPE_SIZE: usize = 1 << 20;

/// The buffer each direction gets when it cannot splice.
const BUFFER_SIZE: usize = 256 << 10;

/// Bytes one direction moves before the other gets its turn.
const TURN: usize = 4 << 20;

/// Wake-ups in a row that move nothing before a relay gives up (a guard
/// against spinning on a descriptor state `poll` keeps reporting).
const IDLE_WAKES: u32 = 1000;

/// Stack of each connection's thread: it holds no buffers.
const THREAD_STACK: usize = 128 << 10;

/// Descriptors a connection holds: its two sockets and two pipes, and a
/// handed-off upstream.
const FDS_PER_CONNECTION: usize = 7;

/// How long a handed-off connection waits for the proxy's [`DRAINED`].
const DRAIN_PATIENCE: Duration = Duration::from_secs(10);

/// A socket listening on `127.0.0.1:port` (0: any free port) with a backlog
/// of [`BACKLOG`], close-on-exec, at a descriptor number above 2 (so a
/// child's `dup2` onto its stdio cannot clobber it).
pub fn listen_loopback(port: u16) -> io::Result<TcpListener> {
    // SAFETY: plain syscall; the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `socket` just returned this descriptor; nothing else owns it.
    let mut fd = unsafe { OwnedFd::from_raw_fd(raw) };
    if fd.as_raw_fd() <= 2 {
        // SAFETY: plain fcntl on a descriptor we own; the duplicate is new.
        let above = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
        if above < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: F_DUPFD_CLOEXEC returned a fresh descriptor we own.
        fd = unsafe { OwnedFd::from_raw_fd(above) };
    }
    // Nothing lingers in a fresh namespace, but a restart must not wait.
    set_int_option(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `addr` is a valid sockaddr_in of the size passed.
    let bound = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if bound != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain syscall on a bound socket we own.
    if unsafe { libc::listen(fd.as_raw_fd(), BACKLOG) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TcpListener::from(fd))
}

/// Why a `PORT=FD:SOCKET` argument cannot become a [`Route`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdoptError {
    #[error("`{arg}`: use PORT=FD:/path/to/socket")]
    Usage { arg: String },
    #[error("`{arg}`: descriptor {fd} is used twice")]
    Twice { arg: String, fd: RawFd },
    #[error("`{arg}`: descriptor {fd} is not a listening socket")]
    NotListening { arg: String, fd: RawFd },
    #[error("`{arg}`: descriptor {fd} is not a connected stream socket")]
    NotChannel { arg: String, fd: RawFd },
}

/// One forward: a listening socket and the unix socket its connections go to.
#[derive(Debug)]
pub struct Route {
    pub port: u16,
    pub listener: TcpListener,
    pub target: PathBuf,
}

/// The forwarder's argument for one route: `PORT=FD:SOCKET`.
pub fn route_arg(port: u16, fd: RawFd, target: &str) -> String {
    format!("{port}={fd}:{target}")
}

/// The forwarder's argument for its channel to the proxy: `channel=FD`.
pub fn channel_arg(fd: RawFd) -> String {
    format!("{CHANNEL_PREFIX}{fd}")
}

const CHANNEL_PREFIX: &str = "channel=";

/// Parses a `channel=FD` argument (`None`: it is not one) and takes
/// ownership of `FD`, which must be a connected stream socket not claimed
/// by a route in `taken`.
pub fn adopt_channel(arg: &str, taken: &[RawFd]) -> Option<Result<OwnedFd, AdoptError>> {
    let fd = arg.strip_prefix(CHANNEL_PREFIX)?;
    let Ok(fd) = fd.parse::<RawFd>() else {
        return Some(Err(AdoptError::Usage {
            arg: arg.to_owned(),
        }));
    };
    if taken.contains(&fd) {
        return Some(Err(AdoptError::Twice {
            arg: arg.to_owned(),
            fd,
        }));
    }
    let stream = int_option(fd, libc::SOL_SOCKET, libc::SO_TYPE) == Some(libc::SOCK_STREAM);
    let listening = int_option(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN) != Some(0);
    if !stream || listening {
        return Some(Err(AdoptError::NotChannel {
            arg: arg.to_owned(),
            fd,
        }));
    }
    // SAFETY: the descriptor is an open socket (checked above), handed to
    // this process as its channel alone.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain fcntl on a descriptor we own.
    unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    Some(Ok(owned))
}

/// `getsockopt` of one int; `None` if `fd` is not an open socket.
fn int_option(fd: RawFd, level: libc::c_int, name: libc::c_int) -> Option<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `value`; on a
    // descriptor that is not an open socket it only fails.
    let ok = unsafe { libc::getsockopt(fd, level, name, (&raw mut value).cast(), &mut len) } == 0;
    ok.then_some(value)
}

impl Route {
    /// Parses one `PORT=FD:SOCKET` argument and takes ownership of the
    /// inherited descriptor `FD`, which must be an open, listening TCP
    /// socket not claimed by an earlier route in `taken`.
    pub fn adopt(arg: &str, taken: &[RawFd]) -> Result<Route, AdoptError> {
        let usage = || AdoptError::Usage {
            arg: arg.to_owned(),
        };
        let (port, rest) = arg.split_once('=').ok_or_else(usage)?;
        let (fd, target) = rest.split_once(':').ok_or_else(usage)?;
        let port = port.parse::<u16>().map_err(|_| usage())?;
        let fd = fd.parse::<RawFd>().map_err(|_| usage())?;
        if target.is_empty() || fd < 0 {
            return Err(usage());
        }
        if taken.contains(&fd) {
            return Err(AdoptError::Twice {
                arg: arg.to_owned(),
                fd,
            });
        }
        if int_option(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN) != Some(1) {
            return Err(AdoptError::NotListening {
                arg: arg.to_owned(),
                fd,
            });
        }
        // SAFETY: the descriptor is open (checked above), was handed to this
        // process for this route alone, and no other route claims it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain fcntl on a descriptor we own; nothing we start may
        // inherit it.
        unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
        Ok(Route {
            port,
            listener: TcpListener::from(owned),
            target: PathBuf::from(target),
        })
    }
}

/// Raises the soft limit on open descriptors to the hard one and returns
/// how many connections fit in it (at most [`MAX_CONNECTIONS`]).
pub fn connection_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `limit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return MAX_CONNECTIONS;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads `raised`; lowering nothing.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = limit.rlim_max;
        }
    }
    let fds = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX);
    // A connection that cannot get its pipes still runs, on buffers.
    (fds.saturating_sub(32) / FDS_PER_CONNECTION).clamp(1, MAX_CONNECTIONS)
}

/// Serves every route until one of them fails for good; returns that error.
/// At most `limit` connections are relayed at once, across all routes.
/// `channel`: the proxy's channel, if the backend passed one.
pub fn serve(routes: Vec<Route>, limit: usize, channel: Option<OwnedFd>) -> io::Error {
    if routes.is_empty() {
        return io::Error::other("no routes to serve");
    }
    let active = Arc::new(AtomicUsize::new(0));
    let channel = channel.map(Arc::new);
    let (failed, failure) = std::sync::mpsc::channel::<io::Error>();
    for route in routes {
        let active = Arc::clone(&active);
        let failed = failed.clone();
        let channel = channel.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("accept-{}", route.port))
            .spawn(move || {
                let error = accept_loop(&route, channel.as_ref(), &active, limit);
                let _ = failed.send(io::Error::new(
                    error.kind(),
                    format!("127.0.0.1:{}: {error}", route.port),
                ));
            });
        if let Err(e) = spawned {
            return e;
        }
    }
    drop(failed);
    failure
        .recv()
        .unwrap_or_else(|_| io::Error::other("every accept loop ended"))
}

/// Gives a connection's slot back when its thread ends (or never starts).
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn accept_loop(
    route: &Route,
    channel: Option<&Arc<OwnedFd>>,
    active: &Arc<AtomicUsize>,
    limit: usize,
) -> io::Error {
    loop {
        let stream = match route.listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) => match e.raw_os_error() {
                // The connection went away before we took it, or a signal.
                Some(
                    libc::EINTR | libc::ECONNABORTED | libc::EPROTO | libc::EPERM | libc::EAGAIN,
                ) => continue,
                // Out of descriptors or memory: wait for connections to end.
                Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                    warn(&format!("accept on port {}: {e}; retrying", route.port));
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                _ => return e,
            },
        };
        if active.fetch_add(1, Ordering::AcqRel) >= limit {
            active.fetch_sub(1, Ordering::AcqRel);
            warn(&format!(
                "{limit} connections already relayed; closing a new one on port {}",
                route.port
            ));
            continue; // `stream` is closed here
        }
        let slot = Slot(Arc::clone(active));
        let target = route.target.clone();
        let channel = channel.cloned();
        let spawned = std::thread::Builder::new()
            .stack_size(THREAD_STACK)
            .spawn(move || {
                let _slot = slot;
                connect_and_relay(stream, &target, channel.as_deref());
            });
        if let Err(e) = spawned {
            // The closure, stream and slot included, is dropped: closed.
            warn(&format!("cannot start a relay thread: {e}"));
        }
    }
}

fn connect_and_relay(stream: TcpStream, target: &Path, channel: Option<&OwnedFd>) {
    let _ = tune_tcp(&stream);
    let name = target.file_name().map_or(&[][..], |n| n.as_bytes());
    // Ends of connections (resets, broken pipes) are not worth a log line.
    match channel.map(|channel| offer(channel, name)) {
        Some(Ok(proxy)) => {
            let _ = relay_offered(stream.into(), proxy.into());
            return;
        }
        Some(Err(e)) => warn(&format!(
            "the proxy's channel: {e}; connecting to {} instead",
            target.display()
        )),
        None => {}
    }
    let proxy = match UnixStream::connect(target) {
        Ok(proxy) => proxy,
        Err(e) => {
            warn(&format!("cannot reach {}: {e}", target.display()));
            return;
        }
    };
    let _ = relay(stream.into(), proxy.into(), true);
}

/// A connection to the proxy that may be handed its upstream: one end of a
/// new socket pair, the other sent over the channel under `name`, the file
/// name of the proxy socket it stands for.
fn offer(channel: &OwnedFd, name: &[u8]) -> io::Result<UnixStream> {
    let (ours, theirs) = UnixStream::pair()?;
    // One small message with its descriptor: one skb, never interleaved
    // with another thread's.
    let sent = sandbox_fdpass::send(channel.as_raw_fd(), name, &[theirs.as_raw_fd()])?;
    if sent != name.len() {
        return Err(io::Error::other("the channel took part of a message"));
    }
    Ok(ours)
}

/// Relays a connection [`offer`]ed to the proxy: as [`relay`] until the
/// proxy hands over the upstream, then, once the proxy has passed on what
/// the command sent before ([`DRAINED`]), between the command and the
/// upstream. `proxy` stays open until the end: while it is, the proxy
/// keeps its own handle on the upstream, and closing it lets that go.
fn relay_offered(command: OwnedFd, proxy: OwnedFd) -> io::Result<()> {
    let Some(upstream) = relay_until_handed(&command, &proxy, true, true)? else {
        return Ok(());
    };
    wait_drained(&proxy)?;
    relay_until_handed(&command, &upstream, true, false).map(drop)
}

/// Waits for the proxy's one byte saying it passed on every early byte.
fn wait_drained(proxy: &OwnedFd) -> io::Result<()> {
    let mut polled = libc::pollfd {
        fd: proxy.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let patience = DRAIN_PATIENCE.as_millis() as libc::c_int;
    loop {
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut polled, 1, patience) };
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the proxy never finished the hand-off",
            ));
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let mut byte = 0u8;
        // SAFETY: reads at most one byte into `byte`.
        let got = unsafe { libc::read(proxy.as_raw_fd(), (&raw mut byte).cast(), 1) };
        match got {
            1 if byte == DRAINED => return Ok(()),
            1 => return Err(io::Error::other("the proxy sent bytes after the hand-off")),
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            _ => {
                let e = io::Error::last_os_error();
                if !matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN)) {
                    return Err(e);
                }
            }
        }
    }
}

/// The upstream in a message that carried descriptors: exactly one, after
/// [`HANDED`], the message's last byte (a read stops after the bytes that
/// carried descriptors). Anything else is the end of the connection.
fn handed_upstream(data: &[u8], mut fds: Vec<OwnedFd>) -> io::Result<OwnedFd> {
    if data.last() != Some(&HANDED) || fds.len() != 1 {
        return Err(io::Error::other(
            "the proxy sent descriptors that are no hand-off",
        ));
    }
    Ok(fds.remove(0))
}

/// No coalescing delay of our own (the bytes are already late), and
/// keepalive probes so a relay whose client vanished without a trace ends.
fn tune_tcp(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    set_int_option(stream, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set_int_option(stream, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 60)?;
    set_int_option(stream, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 10)?;
    set_int_option(stream, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3)
}

fn set_int_option(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: setsockopt reads one c_int from `value`.
    let set = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if set == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Logs to stderr, at most once a minute (a command hammering the ports
/// must not flood the server's log).
fn warn(message: &str) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = LAST.load(Ordering::Relaxed);
    if now >= last.saturating_add(60)
        && LAST
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        eprintln!("sandbox-init forwarder: {message}");
    }
}

/// Relays between two stream sockets until both directions are closed; a
/// direction that reaches end of file shuts the other socket's write side.
/// Returns at the first error (a reset, a broken pipe), closing both.
/// `splice`: move bytes through pipes (else through buffers).
fn relay(a: OwnedFd, b: OwnedFd, splice: bool) -> io::Result<()> {
    relay_until_handed(&a, &b, splice, false).map(drop)
}

/// [`relay`], and with `watch` `b` is the proxy end of an [`offer`]ed
/// connection: what comes from it is read with `recvmsg`, and on a hand-off
/// the relay stops reading `a`, writes to `a` what came before it, flushes
/// to `b` what `a` sent and shuts `b`'s write side, then returns the
/// upstream.
fn relay_until_handed(
    a: &OwnedFd,
    b: &OwnedFd,
    splice: bool,
    watch: bool,
) -> io::Result<Option<OwnedFd>> {
    set_nonblocking(a.as_raw_fd())?;
    set_nonblocking(b.as_raw_fd())?;
    let mut ab = Pump::new(a.as_raw_fd(), b.as_raw_fd(), splice);
    let mut ba = Pump::new(b.as_raw_fd(), a.as_raw_fd(), splice && !watch);
    ba.watch = watch;
    // A socket whose hang-up was seen while nothing was asked of it.
    let mut hung_up = [false, false];
    let mut idle = 0u32;
    loop {
        let one = ab.step()?;
        let two = ba.step()?;
        if ba.handed.is_some() {
            if !ab.eof {
                // What `a` sends from now on is the upstream's: stop reading
                // it, and shut `b` once what was read is flushed.
                ab.eof = true;
                continue;
            }
            if ba.pending == 0 && ab.shut {
                return Ok(ba.handed.take());
            }
        }
        if ab.done() && ba.done() {
            return Ok(None);
        }
        if one.turn_over || two.turn_over {
            continue;
        }
        if one.moved || two.moved {
            idle = 0;
        } else {
            idle += 1;
            if idle > IDLE_WAKES {
                return Err(io::Error::other("the relay stopped making progress"));
            }
        }
        // A socket is watched while either direction still uses it, even
        // with no events asked: an error (a reset, a failed keepalive) on
        // it ends the relay.
        let watch =
            |fd: RawFd, events: libc::c_short, finished: bool, hung_up: bool| libc::pollfd {
                fd: if finished || (hung_up && events == 0) {
                    -1
                } else {
                    fd
                },
                events,
                revents: 0,
            };
        let mut polled = [
            watch(
                a.as_raw_fd(),
                ab.reading() | ba.writing(),
                ab.eof && ba.shut,
                hung_up[0],
            ),
            watch(
                b.as_raw_fd(),
                ba.reading() | ab.writing(),
                ba.eof && ab.shut,
                hung_up[1],
            ),
        ];
        // SAFETY: `polled` is a valid array of two pollfd.
        if unsafe { libc::poll(polled.as_mut_ptr(), 2, -1) } < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for (i, p) in polled.iter().enumerate() {
            if p.revents & libc::POLLERR != 0
                && let Some(e) = socket_error(p.fd)
            {
                return Err(e);
            }
            if p.revents & libc::POLLHUP != 0 && p.events == 0 {
                // Both halves of that socket are shut; what is left to do
                // there shows up as an error when it is tried.
                hung_up[i] = true;
            }
        }
    }
}

fn socket_error(fd: RawFd) -> Option<io::Error> {
    let mut error: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `error`.
    let got = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&raw mut error).cast(),
            &mut len,
        )
    };
    if got != 0 {
        return Some(io::Error::last_os_error());
    }
    (error != 0).then(|| io::Error::from_raw_os_error(error))
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: plain fcntl calls on a descriptor the caller owns.
    let set = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if set {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Where one direction's bytes wait between reading and writing.
enum Carrier {
    /// Not made yet: the first read makes it.
    Unmade { splice: bool },
    /// A pipe the bytes are spliced into and out of.
    Pipe {
        read: OwnedFd,
        write: OwnedFd,
        capacity: usize,
    },
    /// A buffer, with the waiting bytes at `start..start + pending`.
    Buffer { data: Box<[u8]>, start: usize },
}

/// One direction of a relay.
struct Pump {
    src: RawFd,
    dst: RawFd,
    carrier: Carrier,
    /// Bytes read from `src` and not yet written to `dst`.
    pending: usize,
    /// `src` reached end of file.
    eof: bool,
    /// `dst`'s write side is shut (after `eof` and the last byte).
    shut: bool,
    /// Read `src` with `recvmsg` (a buffer carrier), for a hand-off.
    watch: bool,
    /// The upstream `src` handed over; nothing more is read from it.
    handed: Option<OwnedFd>,
}

/// What a [`Pump::step`] did.
struct Step {
    /// It moved bytes or changed state.
    moved: bool,
    /// It stopped because it used its turn, not because it would block.
    turn_over: bool,
}

impl Pump {
    fn new(src: RawFd, dst: RawFd, splice: bool) -> Self {
        Self {
            src,
            dst,
            carrier: Carrier::Unmade { splice },
            pending: 0,
            eof: false,
            shut: false,
            watch: false,
            handed: None,
        }
    }

    fn done(&self) -> bool {
        self.shut
    }

    /// The events it waits for on `src`.
    fn reading(&self) -> libc::c_short {
        if !self.eof && self.pending == 0 && self.handed.is_none() {
            libc::POLLIN
        } else {
            0
        }
    }

    /// The events it waits for on `dst`.
    fn writing(&self) -> libc::c_short {
        if self.pending > 0 { libc::POLLOUT } else { 0 }
    }

    /// Moves bytes until it would block, is done, or has used its turn.
    fn step(&mut self) -> io::Result<Step> {
        let mut step = Step {
            moved: false,
            turn_over: false,
        };
        let mut moved = 0usize;
        loop {
            if moved >= TURN {
                step.turn_over = true;
                return Ok(step);
            }
            if self.pending > 0 {
                match self.write()? {
                    Some(n) => {
                        self.pending -= n;
                        moved += n;
                        step.moved = true;
                    }
                    None => return Ok(step),
                }
            } else if self.eof {
                if !self.shut {
                    // SAFETY: plain syscall on a socket the relay owns.
                    if unsafe { libc::shutdown(self.dst, libc::SHUT_WR) } != 0 {
                        let e = io::Error::last_os_error();
                        // ENOTCONN: the other side is already gone entirely.
                        if e.raw_os_error() != Some(libc::ENOTCONN) {
                            return Err(e);
                        }
                    }
                    self.shut = true;
                    step.moved = true;
                }
                return Ok(step);
            } else if self.handed.is_some() {
                return Ok(step);
            } else {
                match self.read()? {
                    // A hand-off with nothing before it is not an end of file.
                    Some(0) if self.handed.is_none() => self.eof = true,
                    Some(n) => self.pending = n,
                    None => return Ok(step),
                }
                step.moved = true;
            }
        }
    }

    /// Reads what `src` has into the (empty) carrier: `Some(0)` at end of
    /// file, `None` if it would block.
    fn read(&mut self) -> io::Result<Option<usize>> {
        loop {
            if let Carrier::Unmade { splice } = self.carrier {
                self.carrier = make_carrier(splice);
            }
            let n = match &mut self.carrier {
                Carrier::Pipe {
                    write, capacity, ..
                } => {
                    // SAFETY: splice from a socket into a pipe we own; no
                    // offsets (both are streams).
                    unsafe {
                        libc::splice(
                            self.src,
                            std::ptr::null_mut(),
                            write.as_raw_fd(),
                            std::ptr::null_mut(),
                            *capacity,
                            libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
                        )
                    }
                }
                Carrier::Buffer { data, start } if self.watch => {
                    *start = 0;
                    let mut fds = Vec::new();
                    match sandbox_fdpass::recv(self.src, data, &mut fds) {
                        Ok(n) if fds.is_empty() => return Ok(Some(n)),
                        Ok(n) => {
                            self.handed = Some(handed_upstream(&data[..n], fds)?);
                            return Ok(Some(n - 1));
                        }
                        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(None),
                        Err(e) => return Err(e),
                    }
                }
                Carrier::Buffer { data, start } => {
                    *start = 0;
                    // SAFETY: reads at most `data.len()` bytes into `data`.
                    unsafe { libc::read(self.src, data.as_mut_ptr().cast(), data.len()) }
                }
                Carrier::Unmade { .. } => continue,
            };
            if n >= 0 {
                return Ok(Some(n as usize));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(None),
                // This pair of descriptors does not splice: use a buffer
                // (the pipe is empty, nothing is lost).
                Some(libc::EINVAL) if matches!(self.carrier, Carrier::Pipe { .. }) => {
                    self.carrier = Carrier::Unmade { splice: false };
                }
                _ => return Err(e),
            }
        }
    }

    /// Writes pending bytes to `dst`: how many, or `None` if it would block.
    fn write(&mut self) -> io::Result<Option<usize>> {
        loop {
            let n = match &mut self.carrier {
                // SAFETY: splice from a pipe we own to a socket; no offsets.
                Carrier::Pipe { read, .. } => unsafe {
                    libc::splice(
                        read.as_raw_fd(),
                        std::ptr::null_mut(),
                        self.dst,
                        std::ptr::null_mut(),
                        self.pending,
                        libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
                    )
                },
                Carrier::Buffer { data, start } => {
                    let waiting = &data[*start..*start + self.pending];
                    // SAFETY: sends from a live slice of `waiting.len()` bytes.
                    let n = unsafe {
                        libc::send(
                            self.dst,
                            waiting.as_ptr().cast(),
                            waiting.len(),
                            libc::MSG_NOSIGNAL,
                        )
                    };
                    if n > 0 {
                        *start += n as usize;
                    }
                    n
                }
                Carrier::Unmade { .. } => {
                    return Err(io::Error::other("bytes pending without a carrier"));
                }
            };
            if n > 0 {
                return Ok(Some(n as usize));
            }
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return Ok(None),
                _ => return Err(e),
            }
        }
    }
}

/// A pipe sized to [`PIPE_SIZE`] if the kernel allows (else its default
/// size), or a buffer if no pipe can be made (out of descriptors).
fn make_carrier(splice: bool) -> Carrier {
    let buffer = || Carrier::Buffer {
        data: vec![0u8; BUFFER_SIZE].into_boxed_slice(),
        start: 0,
    };
    if !splice {
        return buffer();
    }
    let mut ends = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into `ends`.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return buffer();
    }
    // SAFETY: pipe2 just returned both descriptors; we own them.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    // SAFETY: plain fcntl calls on our pipe; failure leaves its size as it was.
    let capacity = unsafe {
        libc::fcntl(
            write.as_raw_fd(),
            libc::F_SETPIPE_SZ,
            PIPE_SIZE as libc::c_int,
        );
        libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ)
    };
    match usize::try_from(capacity) {
        Ok(capacity) if capacity > 0 => Carrier::Pipe {
            read,
            write,
            capacity,
        },
        _ => buffer(),
    }
}

/// The address a route's listener is bound to (for logs and tests).
pub fn local_port(listener: &TcpListener) -> io::Result<u16> {
    listener.local_addr().map(|a: SocketAddr| a.port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::Shutdown;
    use std::os::unix::net::UnixListener;
    use std::sync::atomic::AtomicU32;
    use std::thread;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
            .collect()
    }

    /// A connected TCP pair on loopback: (client, accepted).
    fn tcp_pair() -> (TcpStream, TcpStream) {
        let listener = listen_loopback(0).unwrap();
        let port = local_port(&listener).unwrap();
        let client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        (client, accepted)
    }

    /// A fresh directory for unix sockets, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            static N: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "sandbox-init-forward-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Client sends `up` then half-closes; the proxy reads it all, then
    /// answers `down` and closes; both sides check what they got.
    fn carries_both_ways(splice: bool, up: usize, down: usize) {
        let (mut client, accepted) = tcp_pair();
        let (near, mut proxy) = UnixStream::pair().unwrap();
        let relay = thread::spawn(move || relay(accepted.into(), near.into(), splice));
        let (up_bytes, down_bytes) = (pattern(up, 1), pattern(down, 2));
        let proxy_side = {
            let (up_bytes, down_bytes) = (up_bytes.clone(), down_bytes.clone());
            thread::spawn(move || {
                let mut got = Vec::new();
                proxy.read_to_end(&mut got).unwrap();
                assert!(got == up_bytes, "upstream bytes differ");
                proxy.write_all(&down_bytes).unwrap();
            })
        };
        let mut writer = client.try_clone().unwrap();
        let sender = thread::spawn(move || {
            writer.write_all(&up_bytes).unwrap();
            writer.shutdown(Shutdown::Write).unwrap();
        });
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        sender.join().unwrap();
        proxy_side.join().unwrap();
        assert!(got == down_bytes, "downstream bytes differ");
        relay.join().unwrap().unwrap();
    }

    #[test]
    fn relays_both_ways_with_half_close_by_splice() {
        carries_both_ways(true, 3 << 20, 24 << 20);
        carries_both_ways(true, 0, 1);
        carries_both_ways(true, 1, 0);
    }

    #[test]
    fn relays_both_ways_with_half_close_by_buffer() {
        carries_both_ways(false, 3 << 20, 24 << 20);
        carries_both_ways(false, 0, 0);
    }

    /// The proxy closes its sending side first; the client keeps sending
    /// afterwards and the proxy still gets every byte.
    #[test]
    fn a_half_close_from_the_proxy_side_leaves_the_other_way_open() {
        let (mut client, accepted) = tcp_pair();
        let (near, mut proxy) = UnixStream::pair().unwrap();
        let relay = thread::spawn(move || relay(accepted.into(), near.into(), true));
        proxy.write_all(b"banner").unwrap();
        proxy.shutdown(Shutdown::Write).unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"banner");
        // Read while writing: 5 MiB is more than every buffer on the way,
        // so a writer that waits for the reader to start would wait forever.
        let reader = thread::spawn(move || {
            let mut up = Vec::new();
            proxy.read_to_end(&mut up).map(|_| up)
        });
        let late = pattern(5 << 20, 7);
        client.write_all(&late).unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let up = reader.join().unwrap().unwrap();
        assert!(up == late);
        relay.join().unwrap().unwrap();
    }

    /// A client that resets ends the relay with an error and closes the
    /// proxy's connection.
    #[test]
    fn a_reset_ends_the_relay() {
        let (client, accepted) = tcp_pair();
        let (near, mut proxy) = UnixStream::pair().unwrap();
        let relay = thread::spawn(move || relay(accepted.into(), near.into(), true));
        // SO_LINGER 0: close sends a reset.
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: setsockopt reads one linger struct.
        unsafe {
            libc::setsockopt(
                client.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&raw const linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
        drop(client);
        // Keep writing until the relay notices and closes our peer.
        let chunk = vec![0u8; 64 << 10];
        let mut ended = false;
        for _ in 0..1000 {
            if proxy.write_all(&chunk).is_err() {
                ended = true;
                break;
            }
        }
        assert!(ended, "the relay kept the proxy's side open");
        assert!(relay.join().unwrap().is_err());
    }

    /// An echo server on a unix socket: what the proxy would be.
    fn echo_server(path: &Path) {
        let listener = UnixListener::bind(path).unwrap();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                thread::spawn(move || {
                    let mut buf = vec![0u8; 64 << 10];
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if stream.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                    let _ = stream.shutdown(Shutdown::Write);
                });
            }
        });
    }

    fn start(limit: usize, target: &Path) -> u16 {
        start_with(limit, target, None)
    }

    fn start_with(limit: usize, target: &Path, channel: Option<OwnedFd>) -> u16 {
        let listener = listen_loopback(0).unwrap();
        let port = local_port(&listener).unwrap();
        let route = Route {
            port,
            listener,
            target: target.to_owned(),
        };
        thread::spawn(move || serve(vec![route], limit, channel));
        port
    }

    /// An echo server on loopback TCP (passes the half-close on): what an
    /// upstream would be.
    fn tcp_echo() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                thread::spawn(move || {
                    let mut writer = stream.try_clone().unwrap();
                    let _ = io::copy(&mut stream, &mut writer);
                    let _ = writer.shutdown(Shutdown::Write);
                });
            }
        });
        port
    }

    /// The proxy's side of the channel, by hand (the real one is
    /// `sandbox-egress`'s, tested there against this wire): each connection
    /// names `http.sock`, sends one line, gets `OK\n`, and then, with
    /// `hand`, a fresh connection to `upstream` handed over; the proxy
    /// passes on what it reads until end of file, answers DRAINED, keeps
    /// its duplicate in `kept`, and shuts it down when the forwarder closes
    /// its end. Without `hand` the proxy echoes the connection itself.
    fn fake_proxy(
        hand: bool,
        upstream: u16,
        kept: Arc<std::sync::Mutex<Vec<TcpStream>>>,
    ) -> OwnedFd {
        let (ours, theirs) = UnixStream::pair().unwrap();
        thread::spawn(move || {
            loop {
                let (mut name, mut fds) = ([0u8; 32], Vec::new());
                match sandbox_fdpass::recv(theirs.as_raw_fd(), &mut name, &mut fds) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => assert_eq!(&name[..n], b"http.sock"),
                }
                let mut conn = UnixStream::from(fds.pop().unwrap());
                let kept = Arc::clone(&kept);
                thread::spawn(move || {
                    let mut line = Vec::new();
                    let mut byte = [0u8; 1];
                    while conn.read_exact(&mut byte).is_ok() && byte[0] != b'\n' {
                        line.push(byte[0]);
                    }
                    if !hand {
                        conn.write_all(b"OK\n").unwrap();
                        let mut writer = conn.try_clone().unwrap();
                        let _ = io::copy(&mut conn, &mut writer);
                        let _ = writer.shutdown(Shutdown::Write);
                        return;
                    }
                    let up = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
                    let mut dup = up.try_clone().unwrap();
                    conn.write_all(b"OK\n").unwrap();
                    sandbox_fdpass::send(conn.as_raw_fd(), &[HANDED], &[up.as_raw_fd()]).unwrap();
                    drop(up);
                    kept.lock().unwrap().push(dup.try_clone().unwrap());
                    let mut early = Vec::new();
                    conn.read_to_end(&mut early).unwrap();
                    dup.write_all(&early).unwrap();
                    conn.write_all(&[DRAINED]).unwrap();
                    let mut hup = libc::pollfd {
                        fd: conn.as_raw_fd(),
                        events: 0,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd.
                    while unsafe { libc::poll(&mut hup, 1, -1) } == 0
                        || hup.revents & libc::POLLHUP == 0
                    {}
                    let _ = dup.shutdown(Shutdown::Both);
                });
            }
        });
        ours.into()
    }

    /// Sends `bytes`, half-closes, reads the echo to its end.
    fn try_echo_round(port: u16, bytes: &[u8]) -> io::Result<Vec<u8>> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        let mut writer = stream.try_clone()?;
        let bytes = bytes.to_vec();
        let sender = thread::spawn(move || {
            writer.write_all(&bytes)?;
            writer.shutdown(Shutdown::Write)
        });
        let mut got = Vec::new();
        let read = stream.read_to_end(&mut got);
        let sent = sender.join().unwrap();
        read?;
        sent?;
        Ok(got)
    }

    fn echo_round(port: u16, bytes: &[u8]) -> Vec<u8> {
        try_echo_round(port, bytes).unwrap()
    }

    #[test]
    fn many_concurrent_connections_are_relayed() {
        let dir = TempDir::new();
        let socket = dir.0.join("echo.sock");
        echo_server(&socket);
        let port = start(MAX_CONNECTIONS, &socket);
        let clients: Vec<_> = (0..200u8)
            .map(|i| {
                thread::spawn(move || {
                    let bytes = pattern(100_000 + usize::from(i) * 997, i);
                    assert!(echo_round(port, &bytes) == bytes, "client {i}");
                })
            })
            .collect();
        for client in clients {
            client.join().unwrap();
        }
    }

    #[test]
    fn connections_over_the_limit_are_closed_and_slots_come_back() {
        let dir = TempDir::new();
        let socket = dir.0.join("echo.sock");
        echo_server(&socket);
        let port = start(2, &socket);
        let mut held: Vec<TcpStream> = (0..2)
            .map(|_| {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.write_all(b"ping").unwrap();
                let mut buf = [0u8; 4];
                s.read_exact(&mut buf).unwrap();
                assert_eq!(&buf, b"ping");
                s
            })
            .collect();
        let mut extra = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _ = extra.write_all(b"ping");
        let mut buf = Vec::new();
        // Closed at once: end of file (or a reset), never an echo.
        let n = extra.read_to_end(&mut buf).unwrap_or(0);
        assert_eq!(n, 0);
        // One ends; its slot is given back once its relay notices.
        held.pop();
        let mut ok = false;
        for _ in 0..200 {
            if try_echo_round(port, b"again").is_ok_and(|got| got == b"again") {
                ok = true;
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        assert!(ok, "the slot of the closed connection never came back");
    }

    #[test]
    fn an_unreachable_proxy_closes_the_connection() {
        let dir = TempDir::new();
        let port = start(4, &dir.0.join("nobody.sock"));
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut buf = Vec::new();
        assert_eq!(stream.read_to_end(&mut buf).unwrap_or(0), 0);
    }

    #[test]
    fn the_listener_has_the_backlog_and_a_high_descriptor() {
        let listener = listen_loopback(0).unwrap();
        assert!(listener.as_raw_fd() > 2);
        // SAFETY: F_GETFD only inspects the descriptor table.
        let flags = unsafe { libc::fcntl(listener.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        // Connections queue before anyone accepts: more than socat's 5.
        let port = local_port(&listener).unwrap();
        let queued: Vec<_> = (0..64)
            .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        assert_eq!(queued.len(), 64);
    }

    #[test]
    fn routes_are_parsed_and_their_descriptors_checked() {
        assert_eq!(route_arg(3128, 7, "/s/http.sock"), "3128=7:/s/http.sock");
        let listener = listen_loopback(0).unwrap();
        let fd = listener.as_raw_fd();
        let arg = route_arg(3128, fd, "/a:b/http.sock");
        assert!(
            Route::adopt(&arg, &[fd])
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
        // Not a listening socket: a connected one, or a pipe.
        let (client, _accepted) = {
            let port = local_port(&listener).unwrap();
            (TcpStream::connect(("127.0.0.1", port)).unwrap(), ())
        };
        let bad = route_arg(1, client.as_raw_fd(), "/x");
        assert!(
            Route::adopt(&bad, &[])
                .unwrap_err()
                .to_string()
                .contains("not a listening")
        );
        for bad in ["3128", "3128=x:/s", "99999=3:/s", "3128=3:", "3128=3"] {
            assert!(Route::adopt(bad, &[]).is_err(), "{bad}");
        }
        let fd = {
            use std::os::fd::IntoRawFd;
            listener.into_raw_fd()
        };
        let route = Route::adopt(&arg, &[]).unwrap();
        assert_eq!(route.port, 3128);
        assert_eq!(route.target, Path::new("/a:b/http.sock"));
        assert_eq!(route.listener.as_raw_fd(), fd);
    }

    /// Through a channel, a connection the proxy hands off goes straight to
    /// the upstream: the proxy relays nothing after DRAINED, so every echoed
    /// byte crossed the forwarder's own relay; bytes sent before the hand-off
    /// came through the proxy's drain first, in order; half-closes pass.
    #[test]
    fn a_handed_off_connection_carries_both_ways_with_half_close() {
        let kept = Arc::default();
        let channel = fake_proxy(true, tcp_echo(), Arc::clone(&kept));
        let dir = TempDir::new();
        let port = start_with(4, &dir.0.join("http.sock"), Some(channel));
        for (early, late) in [(0, 3 << 20), (100_000, 1), (5, 0)] {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let mut up = b"GO\n".to_vec();
            let (early, late) = (pattern(early, 3), pattern(late, 4));
            up.extend_from_slice(&early);
            stream.write_all(&up).unwrap();
            let mut ok = [0u8; 3];
            stream.read_exact(&mut ok).unwrap();
            assert_eq!(&ok, b"OK\n");
            let mut writer = stream.try_clone().unwrap();
            let sent = late.clone();
            let sender = thread::spawn(move || {
                writer.write_all(&sent).unwrap();
                writer.shutdown(Shutdown::Write).unwrap();
            });
            let mut back = Vec::new();
            stream.read_to_end(&mut back).unwrap();
            sender.join().unwrap();
            let mut want = early;
            want.extend_from_slice(&late);
            assert!(
                back == want,
                "{} bytes back, {} sent",
                back.len(),
                want.len()
            );
        }
        // Each connection's end (the forwarder closing its end of the pair)
        // let the proxy shut its duplicate down.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let kept = kept.lock().unwrap();
            if kept.len() == 3 && kept.iter().all(hung_up) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "a kept upstream is still open"
            );
            drop(kept);
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether a socket reports hang-up (both directions shut).
    fn hung_up(s: &TcpStream) -> bool {
        let mut p = libc::pollfd {
            fd: s.as_raw_fd(),
            events: 0,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, 0) };
        p.revents & libc::POLLHUP != 0
    }

    /// The proxy shuts its kept handle down (the session ended): the
    /// handed-off connection ends for the command too.
    #[test]
    fn the_proxy_shutting_its_handle_ends_a_handed_off_connection() {
        let kept: Arc<std::sync::Mutex<Vec<TcpStream>>> = Arc::default();
        let channel = fake_proxy(true, tcp_echo(), Arc::clone(&kept));
        let dir = TempDir::new();
        let port = start_with(4, &dir.0.join("http.sock"), Some(channel));
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(b"GO\nping").unwrap();
        let mut got = [0u8; 7];
        stream.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"OK\nping");
        for s in kept.lock().unwrap().iter() {
            s.shutdown(Shutdown::Both).unwrap();
        }
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 16];
        // End of file or a reset, not the read timeout.
        let r = stream.read(&mut buf);
        let timed_out = r
            .as_ref()
            .is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock);
        assert!(matches!(r, Ok(0) | Err(_)) && !timed_out, "{r:?}");
    }

    /// An offered connection the proxy relays itself (plain HTTP, a
    /// refusal) is relayed as before, read with `recvmsg`; a channel that
    /// is gone falls back to the socket's path.
    #[test]
    fn offered_connections_the_proxy_relays_and_a_dead_channel_still_work() {
        let channel = fake_proxy(false, 0, Arc::default());
        let dir = TempDir::new();
        let port = start_with(4, &dir.0.join("http.sock"), Some(channel));
        let mut want = b"OK\n".to_vec();
        let bytes = pattern(4 << 20, 9);
        want.extend_from_slice(&bytes);
        let mut up = b"GO\n".to_vec();
        up.extend_from_slice(&bytes);
        assert!(echo_round(port, &up) == want);

        let (dead, peer) = UnixStream::pair().unwrap();
        drop(peer);
        let socket = dir.0.join("echo.sock");
        echo_server(&socket);
        let port = start_with(4, &socket, Some(dead.into()));
        assert_eq!(echo_round(port, b"by path"), b"by path");
    }

    #[test]
    fn the_channel_argument_is_parsed_and_checked() {
        assert_eq!(channel_arg(9), "channel=9");
        assert!(adopt_channel("3128=7:/s", &[]).is_none());
        let (a, _b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        let e = adopt_channel(&channel_arg(fd), &[fd]).unwrap().unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        let listener = listen_loopback(0).unwrap();
        let e = adopt_channel(&channel_arg(listener.as_raw_fd()), &[])
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("not a connected stream"), "{e}");
        assert!(adopt_channel("channel=x", &[]).unwrap().is_err());
        let fd = {
            use std::os::fd::IntoRawFd;
            a.into_raw_fd()
        };
        let owned = adopt_channel(&channel_arg(fd), &[]).unwrap().unwrap();
        assert_eq!(owned.as_raw_fd(), fd);
    }
}
