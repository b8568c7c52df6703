//! Hand-off of a decided tunnel to the bwrap sandbox's forwarder (SPEC E1,
//! threat model T8): a CONNECT or SOCKS connection that came over the
//! forwarder's channel ([`Handoff::Offer`]) is given its upstream socket once
//! the request is decided, dialled and answered, and the forwarder splices
//! between the command and the upstream itself — one relay instead of three.
//! Every other connection (the unix sockets by path, the microvm's, the `none`
//! backend's TCP ports, plain HTTP) is relayed here as before.
//!
//! The wire is [`sandbox_fdpass::handoff`]. Only the forwarder holds the
//! channel, so nothing a command sends can make the proxy hand it a socket:
//! the command only ever holds its own connection to the forwarder.
//!
//! The proxy keeps a duplicate of every upstream it handed off, in a task of
//! the session, until the forwarder closes its end of the connection: ending
//! the session aborts the task and shuts the socket down both ways
//! ([`Kept`]), which ends the forwarder's relay as it ended the proxy's.

use std::any::Any;
use std::io;
use std::net::Shutdown;
use std::os::fd::{AsFd, AsRawFd};

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use sandbox_fdpass::handoff::{DRAINED, HANDED};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::{TcpStream, UnixStream};

use crate::conn::tunnel;

/// Whether a client connection may be handed its upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handoff {
    /// Relay every tunnel here (every client but the forwarder's channel).
    Relay,
    /// The connection came over the forwarder's channel: hand it off.
    Offer,
}

/// Carries a decided, dialled and answered connection to its end: hands
/// `upstream` to the forwarder when `client` is one of its connections,
/// else (or if the descriptor cannot be sent) relays both ways here.
pub(crate) async fn carry<C>(client: &mut C, mut upstream: TcpStream, handoff: Handoff)
where
    C: AsyncRead + AsyncWrite + Unpin + 'static,
{
    if handoff == Handoff::Offer
        && let Some(unix) = (client as &mut dyn Any).downcast_mut::<UnixStream>()
    {
        match give(unix, upstream).await {
            Ok(()) => return,
            Err(back) => upstream = back,
        }
    }
    tunnel(client, &mut upstream).await;
}

/// [`carry`] for a CONNECT: the upgraded connection is the client's unix
/// stream again, and the bytes hyper read past the request head go to the
/// upstream first.
pub(crate) async fn carry_upgraded(upgraded: Upgraded, mut upstream: TcpStream, handoff: Handoff) {
    if handoff == Handoff::Offer {
        match upgraded.downcast::<TokioIo<UnixStream>>() {
            Ok(parts) => {
                if !parts.read_buf.is_empty() && upstream.write_all(&parts.read_buf).await.is_err()
                {
                    return;
                }
                let mut client = parts.io.into_inner();
                return carry(&mut client, upstream, handoff).await;
            }
            Err(upgraded) => return tunnel(&mut TokioIo::new(upgraded), &mut upstream).await,
        }
    }
    tunnel(&mut TokioIo::new(upgraded), &mut upstream).await;
}

/// The proxy's handle on a handed-off upstream: dropping it (the
/// forwarder closed its end, or the session ended and aborted the task)
/// shuts the connection down both ways, whoever else holds it.
struct Kept(std::net::TcpStream);

impl Drop for Kept {
    fn drop(&mut self) {
        // ENOTCONN: it has ended already.
        let _ = self.0.shutdown(Shutdown::Both);
    }
}

/// Sends `upstream` to the forwarder, passes on what the command sent
/// before the forwarder saw it, and holds a duplicate until the forwarder
/// closes `client`. `Err` gives `upstream` back when it could not be sent
/// (nothing reached the forwarder): the caller relays.
async fn give(client: &mut UnixStream, mut upstream: TcpStream) -> Result<(), TcpStream> {
    // Made before the send, so there is no moment after it without a handle.
    let dup = match upstream.as_fd().try_clone_to_owned() {
        Ok(fd) => std::net::TcpStream::from(fd),
        Err(e) => {
            tracing::debug!("egress hand-off: duplicating the upstream: {e}; relaying");
            return Err(upstream);
        }
    };
    let (socket, fd) = (client.as_raw_fd(), upstream.as_raw_fd());
    let sent = client
        .async_io(Interest::WRITABLE, || {
            sandbox_fdpass::send(socket, &[HANDED], &[fd])
        })
        .await;
    match sent {
        Ok(1) => {}
        Ok(_) => {
            tracing::debug!("egress hand-off: nothing sent; relaying");
            return Err(upstream);
        }
        Err(e) => {
            tracing::debug!("egress hand-off: {e}; relaying");
            return Err(upstream);
        }
    }
    let kept = Kept(dup);
    // Until the forwarder's end of file, bytes here are the command's,
    // sent before it stopped reading the command: the upstream's, in order.
    if let Err(e) = tokio::io::copy(client, &mut upstream).await {
        tracing::debug!("egress hand-off: passing on early bytes: {e}");
        return Ok(());
    }
    drop(upstream);
    if client.write_all(&[DRAINED]).await.is_err() {
        return Ok(());
    }
    closed(client).await;
    drop(kept);
    Ok(())
}

/// Waits until the peer has closed its end entirely (`EPOLLHUP`): its
/// write side is shut already, so a read would only see end of file.
async fn closed(client: &UnixStream) {
    loop {
        match client.ready(Interest::WRITABLE).await {
            Ok(ready) if !ready.is_write_closed() => {
                // Writable is not closed: forget it and wait for the next change.
                let _ = client.try_io(Interest::WRITABLE, || {
                    Err::<(), _>(io::ErrorKind::WouldBlock.into())
                });
            }
            _ => return,
        }
    }
}
