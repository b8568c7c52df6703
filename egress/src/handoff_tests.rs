//! The hand-off of decided tunnels to the forwarder (SPEC E1, T8), over
//! real sockets: the test plays the forwarder's side of the wire by hand
//! (`sandbox_fdpass::handoff`), so every step of it is checked here, and
//! the forwarder's own tests check it against a fake proxy.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use sandbox_fdpass::handoff::{DRAINED, HANDED};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::{TcpStream, UnixStream};

use super::proxy_tests::*;
use crate::Ingress;
use crate::server::{HTTP_SOCKET, SOCKS_SOCKET};

/// The forwarder's channel, by hand.
struct Forwarder {
    channel: UnixStream,
}

impl Forwarder {
    async fn start(h: &mut Harness) -> Self {
        let path = h.proxies.as_mut().unwrap().accept_forwarders().unwrap();
        let channel = within("channel", UnixStream::connect(path)).await.unwrap();
        Self { channel }
    }

    /// A connection for the listener `name`, offered the hand-off.
    async fn offer(&self, name: &str) -> UnixStream {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let raw = self.channel.as_raw_fd();
        let sent = self
            .channel
            .async_io(Interest::WRITABLE, || {
                sandbox_fdpass::send(raw, name.as_bytes(), &[theirs.as_raw_fd()])
            })
            .await
            .unwrap();
        assert_eq!(sent, name.len());
        ours.set_nonblocking(true).unwrap();
        UnixStream::from_std(ours).unwrap()
    }
}

/// Reads what the proxy sends, as the forwarder does (`recvmsg`), until a
/// hand-off or the end: the bytes before it, and the upstream.
async fn until_handed(conn: &UnixStream) -> (Vec<u8>, Option<OwnedFd>) {
    let raw = conn.as_raw_fd();
    let mut got = Vec::new();
    loop {
        let (mut buf, mut fds) = ([0u8; 4096], Vec::new());
        let n = within(
            "until the hand-off",
            conn.async_io(Interest::READABLE, || {
                sandbox_fdpass::recv(raw, &mut buf, &mut fds)
            }),
        )
        .await
        .unwrap();
        if !fds.is_empty() {
            assert_eq!(fds.len(), 1, "one upstream per hand-off");
            assert_eq!(buf[n - 1], HANDED, "the descriptor comes with HANDED");
            got.extend_from_slice(&buf[..n - 1]);
            return (got, fds.pop());
        }
        if n == 0 {
            return (got, None);
        }
        got.extend_from_slice(&buf[..n]);
    }
}

/// The forwarder's side after the hand-off: `middle` is what the command
/// sent before it stopped reading; then the write side is shut and the
/// proxy must answer DRAINED. Returns the upstream, ready to use.
async fn finish(conn: &mut UnixStream, upstream: OwnedFd, middle: &[u8]) -> TcpStream {
    conn.write_all(middle).await.unwrap();
    conn.shutdown().await.unwrap();
    let mut byte = [0u8; 1];
    within("DRAINED", conn.read_exact(&mut byte)).await.unwrap();
    assert_eq!(byte[0], DRAINED);
    let upstream = std::net::TcpStream::from(upstream);
    upstream.set_nonblocking(true).unwrap();
    TcpStream::from_std(upstream).unwrap()
}

/// `CONNECT svc.test:port` with `early` right behind it, on a connection
/// offered over the channel: the 200 and the upstream.
async fn handed_connect(f: &Forwarder, port: u16, early: &[u8]) -> (UnixStream, Vec<u8>, OwnedFd) {
    let mut conn = f.offer(HTTP_SOCKET).await;
    let mut req = format!("CONNECT svc.test:{port} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes();
    req.extend_from_slice(early);
    conn.write_all(&req).await.unwrap();
    let (reply, upstream) = until_handed(&conn).await;
    (
        conn,
        reply,
        upstream.expect("a CONNECT from the forwarder is handed off"),
    )
}

/// A SOCKS5 CONNECT to `svc.test:port` with `early` behind it, offered.
async fn handed_socks(f: &Forwarder, port: u16, early: &[u8]) -> (UnixStream, Vec<u8>, OwnedFd) {
    let mut conn = f.offer(SOCKS_SOCKET).await;
    let mut req = vec![5, 1, 0, 5, 1, 0, 3, 8];
    req.extend_from_slice(b"svc.test");
    req.extend_from_slice(&port.to_be_bytes());
    req.extend_from_slice(early);
    conn.write_all(&req).await.unwrap();
    let (reply, upstream) = until_handed(&conn).await;
    (
        conn,
        reply,
        upstream.expect("a SOCKS CONNECT from the forwarder is handed off"),
    )
}

/// Writes `late` on the upstream, half-closes, and reads the echo to its end.
async fn echo_to_end(upstream: &mut TcpStream, late: &[u8]) -> Vec<u8> {
    upstream.write_all(late).await.unwrap();
    upstream.shutdown().await.unwrap();
    let mut back = Vec::new();
    within("echo to its end", upstream.read_to_end(&mut back))
        .await
        .unwrap();
    back
}

/// Bytes sent with the request (hyper's or the SOCKS reader's buffer),
/// between the reply and the forwarder's end of file (the drain), and on
/// the upstream itself arrive in that order; the echo's half-close comes
/// back as end of file; a large payload crosses both ways.
#[tokio::test]
async fn a_handed_off_tunnel_carries_both_ways_with_half_close() {
    let port = echo_server().await;
    let mut h = Harness::start(policy_for(&["svc.test"]), Kind::Unix).await;
    let f = Forwarder::start(&mut h).await;
    let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    for socks in [false, true] {
        let (mut conn, reply, upstream) = if socks {
            handed_socks(&f, port, b"early-").await
        } else {
            handed_connect(&f, port, b"early-").await
        };
        if socks {
            assert_eq!(&reply[..4], &[5, 0, 5, 0], "{reply:?}");
            assert_eq!(reply.len(), 2 + 10, "{reply:?}");
        } else {
            let head = String::from_utf8_lossy(&reply);
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert!(
                head.ends_with("\r\n\r\n"),
                "nothing follows the 200: {head}"
            );
        }
        let mut upstream = finish(&mut conn, upstream, b"middle-").await;
        let mut late = b"late-".to_vec();
        late.extend_from_slice(&big);
        let back = echo_to_end(&mut upstream, &late).await;
        let mut want = b"early-middle-".to_vec();
        want.extend_from_slice(&late);
        assert!(back == want, "socks {socks}: {} bytes back", back.len());
    }
    assert!(h.take_violations().is_empty());
}

/// Teardown of the session ends a handed-off tunnel although the forwarder
/// holds the upstream: the kept handle is shut down both ways. And the
/// forwarder closing its end lets the proxy's handle and the connection's
/// slot go.
#[tokio::test]
async fn teardown_ends_a_handed_off_tunnel() {
    let port = echo_server().await;
    for via_drop in [false, true] {
        let mut h = Harness::start(policy_for(&["svc.test"]), Kind::Unix).await;
        let f = Forwarder::start(&mut h).await;
        let (mut conn, _, upstream) = handed_connect(&f, port, b"").await;
        let mut upstream = finish(&mut conn, upstream, b"").await;
        upstream.write_all(b"ping").await.unwrap();
        let mut back = [0u8; 4];
        within("echo", upstream.read_exact(&mut back))
            .await
            .unwrap();
        let started = Instant::now();
        let proxies = h.proxies.take().unwrap();
        if via_drop {
            drop(proxies);
        } else {
            within("shutdown", proxies.shutdown()).await;
        }
        let mut buf = [0u8; 16];
        let r = within("handed-off tunnel end", upstream.read(&mut buf)).await;
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
        let r = within("forwarder connection end", conn.read(&mut buf)).await;
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    // The forwarder goes (its end closes): the proxy shuts the upstream
    // down too, and the slot comes back (a cap of one lets the next in).
    let mut h = Harness::start_capped(policy_for(&["svc.test"]), Kind::Unix, 1).await;
    let f = Forwarder::start(&mut h).await;
    let (mut conn, _, upstream) = handed_connect(&f, port, b"").await;
    let mut upstream = finish(&mut conn, upstream, b"").await;
    drop(conn);
    let mut buf = [0u8; 16];
    let r = within("upstream end", upstream.read(&mut buf)).await;
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    let deadline = Instant::now() + STEP;
    loop {
        match http_connect(&h, &format!("svc.test:{port}")).await {
            Ok(mut io) => {
                echo_round_trip(&mut io, b"again").await;
                break;
            }
            Err(resp) => assert!(Instant::now() < deadline, "{resp:?}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A client that did not come over the channel — by the socket's path, as
/// the microvm's agent and direct users connect — never gets a descriptor
/// and is relayed as before; a refusal over the channel is the same 403
/// and the same violation as by path, with no descriptor either.
#[tokio::test]
async fn a_client_that_does_not_ask_is_relayed() {
    let port = echo_server().await;
    let mut h = Harness::start(policy_for(&["svc.test"]), Kind::Unix).await;
    let f = Forwarder::start(&mut h).await;
    let crate::server::Endpoints::Unix { http, socks } = h.proxies().endpoints().clone() else {
        panic!()
    };
    for (path, request) in [
        (
            http,
            format!("CONNECT svc.test:{port} HTTP/1.1\r\nHost: x\r\n\r\nping").into_bytes(),
        ),
        (socks, {
            let mut r = vec![5, 1, 0, 5, 1, 0, 3, 8];
            r.extend_from_slice(b"svc.test");
            r.extend_from_slice(&port.to_be_bytes());
            r.extend_from_slice(b"ping");
            r
        }),
    ] {
        let mut conn = within("connect", UnixStream::connect(&path)).await.unwrap();
        conn.write_all(&request).await.unwrap();
        conn.shutdown().await.unwrap();
        // The reply, the echo, and the end: all bytes, no descriptor.
        let (got, upstream) = until_handed(&conn).await;
        assert!(upstream.is_none(), "{}: a descriptor", path.display());
        assert!(
            got.ends_with(b"ping"),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
    }

    let mut conn = f.offer(HTTP_SOCKET).await;
    conn.write_all(b"CONNECT other.test:443 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (got, upstream) = until_handed(&conn).await;
    assert!(upstream.is_none());
    let head = String::from_utf8_lossy(&got);
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(
        head.contains("cc_server egress: other.test:443 refused"),
        "{head}"
    );
    let seen = h.take_violations();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].ingress, Ingress::Connect);
    assert_eq!(seen[0].refusal.target, "other.test:443");

    let mut conn = f.offer(SOCKS_SOCKET).await;
    let mut req = vec![5, 1, 0, 5, 1, 0, 3, 10];
    req.extend_from_slice(b"other.test");
    req.extend_from_slice(&443u16.to_be_bytes());
    conn.write_all(&req).await.unwrap();
    let (got, upstream) = until_handed(&conn).await;
    assert!(upstream.is_none());
    assert_eq!(&got[..4], &[5, 0, 5, 2], "not allowed: {got:?}");
    let seen = h.take_violations();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].ingress, Ingress::Socks5Domain);

    // A message that names no listener is dropped, and the channel serves on.
    let mut stray = f.offer("known_hosts").await;
    let mut buf = [0u8; 1];
    let r = within("stray end", stray.read(&mut buf)).await;
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    let (mut conn, _, upstream) = handed_connect(&f, port, b"").await;
    let mut upstream = finish(&mut conn, upstream, b"").await;
    assert_eq!(echo_to_end(&mut upstream, b"still").await, b"still");
}
