//! Fuzz-style tests without cargo-fuzz: random and mutated byte strings fed
//! to the SOCKS parsers (pure functions, so tens of thousands are cheap) and
//! over real connections to running proxies (bounded count, each connection
//! under a timeout), then a check that the proxies still serve.
//!
//! The mutated inputs only ever meet a session whose network is off, so no
//! mutated target is dialled; the session with a grant gets intact requests
//! followed by random tunnel bytes.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use super::proxy_tests::{
    Addr5, Auth5, BoxIo, Harness, Kind, echo_server, http_connect, http_origin, origin_through,
    policy_for, policy_off, socks5,
};
use crate::socks::{
    Step, parse_greeting, parse_socks4_request, parse_socks5_request, parse_user_pass,
};

/// xorshift64*: deterministic, so a failure is reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn byte(&mut self) -> u8 {
        // Bias towards the bytes that mean something in these protocols.
        const INTERESTING: &[u8] = &[
            0, 1, 2, 3, 4, 5, 0x7f, 0x80, 0xff, 0xfe, b'\r', b'\n', b':', b' ', b'@', b'[',
        ];
        if self.below(3) == 0 {
            INTERESTING[self.below(INTERESTING.len())]
        } else {
            self.next() as u8
        }
    }

    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let len = self.below(max + 1);
        (0..len).map(|_| self.byte()).collect()
    }
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.byte();
            }
            2 => v.truncate(rng.below(v.len() + 1)),
            3 => {
                let i = rng.below(v.len() + 1);
                let extra = rng.bytes(16);
                v.splice(i..i, extra);
            }
            4 if !v.is_empty() => {
                let a = rng.below(v.len());
                let b = a + rng.below(v.len() - a);
                let dup = v[a..=b.min(v.len() - 1)].to_vec();
                let at = rng.below(v.len() + 1);
                v.splice(at..at, dup);
            }
            5 => v.extend(rng.bytes(64)),
            _ if !v.is_empty() => {
                let i = rng.below(v.len());
                v.remove(i);
            }
            _ => v.push(rng.byte()),
        }
    }
    v
}

fn socks_seeds() -> Vec<Vec<u8>> {
    let mut name_req = vec![5, 1, 0, 3, 8];
    name_req.extend_from_slice(b"svc.test");
    name_req.extend_from_slice(&[0, 80]);
    let mut v6_req = vec![5, 1, 0, 4];
    v6_req.extend_from_slice(&[0; 15]);
    v6_req.extend_from_slice(&[1, 0, 22]);
    let mut s4a = vec![4, 1, 0, 22, 0, 0, 0, 1];
    s4a.extend_from_slice(b"user\0svc.test\0");
    let mut auth = vec![1, 6];
    auth.extend_from_slice(b"sess-1");
    auth.push(18);
    auth.extend_from_slice(b"s3cret:with:colons");
    vec![
        vec![5, 1, 0],
        vec![5, 2, 0, 2],
        auth.clone(),
        [&[5, 1, 2][..], &auth, &name_req].concat(),
        [&[5, 1, 0][..], &name_req].concat(),
        name_req,
        vec![5, 1, 0, 1, 127, 0, 0, 1, 0, 80],
        v6_req,
        vec![4, 1, 0, 80, 127, 0, 0, 1, 0],
        s4a,
    ]
}

/// Checks one parser's contract on one input: `Done` uses at most the input
/// and the bound, re-parses identically from exactly its bytes, and every
/// shorter prefix of a whole message is `More`; `More` only below the bound.
fn check<T: PartialEq + std::fmt::Debug>(
    parse: fn(&[u8]) -> Step<T>,
    bound: usize,
    buf: &[u8],
    rng: &mut Rng,
) {
    match parse(buf) {
        Step::Done(msg, used) => {
            assert!(
                used > 0 && used <= buf.len() && used <= bound,
                "{buf:?}: used {used}"
            );
            assert_eq!(parse(&buf[..used]), Step::Done(msg, used), "{buf:?}");
            let cut = rng.below(used);
            assert_eq!(parse(&buf[..cut]), Step::More, "{buf:?} cut at {cut}");
        }
        Step::More => assert!(buf.len() < bound, "{buf:?}: More beyond the bound"),
        Step::Bad(_) => {}
    }
}

#[test]
fn socks_parsers_never_panic_and_stay_bounded() {
    let mut rng = Rng(0x5eed_0001);
    let seeds = socks_seeds();
    let start = Instant::now();
    let mut done = 0usize;
    for i in 0..80_000 {
        let buf = if i % 4 == 0 {
            let mut b = rng.bytes(600);
            if let Some(first) = b.first_mut() {
                *first = [1, 4, 5][rng.below(3)];
            }
            b
        } else {
            let seed = &seeds[rng.below(seeds.len())];
            mutate(&mut rng, seed)
        };
        check(parse_greeting, 257, &buf, &mut rng);
        check(parse_user_pass, 513, &buf, &mut rng);
        check(parse_socks5_request, 262, &buf, &mut rng);
        check(parse_socks4_request, 520, &buf, &mut rng);
        if matches!(parse_socks5_request(&buf), Step::Done(..))
            || matches!(parse_socks4_request(&buf), Step::Done(..))
        {
            done += 1;
        }
    }
    // The mutations keep enough structure to reach the end of the parsers.
    assert!(done > 5_000, "only {done} complete requests");
    assert!(start.elapsed() < Duration::from_secs(60));
}

fn http_seeds() -> Vec<Vec<u8>> {
    [
        "CONNECT svc.test:443 HTTP/1.1\r\nHost: svc.test:443\r\n\r\n",
        "CONNECT [::1]:22 HTTP/1.1\r\n\r\n",
        "GET http://svc.test/x?y=1 HTTP/1.1\r\nHost: a\r\nConnection: close, X\r\nX: 1\r\n\r\n",
        "POST http://svc.test:8080/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "POST http://svc.test/ HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello",
        "GET /origin-form HTTP/1.1\r\nHost: svc.test\r\n\r\n",
        "GET http://svc.test/ HTTP/1.0\r\nProxy-Authorization: Basic c2Vzcy0xOnMzY3JldDp3aXRoOmNvbG9ucw==\r\n\r\n",
        "GET http://svc.test/ HTTP/1.1\r\n\r\nGET http://svc.test/ HTTP/1.1\r\n\r\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// Sends `bytes`, half-closes, and reads until the proxy closes: how many
/// bytes came back, or `None` if that took longer than the bound (a hang).
async fn poke(mut io: BoxIo, bytes: Vec<u8>) -> Option<usize> {
    tokio::time::timeout(Duration::from_secs(20), async move {
        // The proxy may close before reading it all: write errors are fine.
        let _ = io.write_all(&bytes).await;
        let _ = io.shutdown().await;
        let mut sink = [0u8; 4096];
        let mut total = 0;
        loop {
            match io.read(&mut sink).await {
                Ok(0) | Err(_) => break total,
                Ok(n) => total += n,
            }
        }
    })
    .await
    .ok()
}

/// Runs pokes with bounded concurrency; returns how many got an answer.
struct Pokes {
    set: JoinSet<Option<usize>>,
    answered: usize,
}

impl Pokes {
    fn new() -> Self {
        Self {
            set: JoinSet::new(),
            answered: 0,
        }
    }

    async fn add(&mut self, io: BoxIo, bytes: Vec<u8>) {
        self.set.spawn(poke(io, bytes));
        while self.set.len() >= 32 {
            self.reap_one().await;
        }
    }

    async fn reap_one(&mut self) {
        if let Some(r) = self.set.join_next().await {
            let n = r.unwrap().expect("a connection hung");
            self.answered += usize::from(n > 0);
        }
    }

    async fn finish(mut self) -> usize {
        while !self.set.is_empty() {
            self.reap_one().await;
        }
        self.answered
    }
}

async fn campaign(
    h: &Harness,
    http: bool,
    seeds: &[Vec<u8>],
    rng: &mut Rng,
    count: usize,
) -> usize {
    let mut pokes = Pokes::new();
    for i in 0..count {
        let bytes = if i % 5 == 0 {
            rng.bytes(300)
        } else {
            let seed = &seeds[rng.below(seeds.len())];
            mutate(rng, seed)
        };
        let io = if http {
            h.http().await
        } else {
            h.socks().await
        };
        pokes.add(io, bytes).await;
    }
    pokes.finish().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxies_survive_garbage() {
    let mut rng = Rng(0x5eed_0002);
    let start = Instant::now();
    for (kind, count) in [(Kind::Unix, 8000), (Kind::Tcp, 2000)] {
        // Mutated requests meet a session with the network off: nothing is dialled.
        let h = Harness::start(policy_off(), kind).await;
        let answered = campaign(&h, true, &http_seeds(), &mut rng, count).await;
        // hyper answers nearly every malformed head with a 4xx.
        assert!(
            answered > count / 2,
            "{kind:?}: only {answered}/{count} HTTP answers"
        );
        let answered = campaign(&h, false, &socks_seeds(), &mut rng, count).await;
        assert!(
            answered > count / 4,
            "{kind:?}: only {answered}/{count} SOCKS answers"
        );
        println!(
            "{kind:?}: {count} HTTP and {count} SOCKS garbage connections, {answered} SOCKS answers"
        );
        // Still serving, and still refusing.
        let resp = http_connect(&h, "svc.test:443").await.err().unwrap();
        assert_eq!(resp.status, 403);
        let auth = if kind == Kind::Tcp {
            Auth5::UserPass
        } else {
            Auth5::NoAuth
        };
        let rep = socks5(&h, auth, 1, &Addr5::Name(b"svc.test".to_vec()), 443)
            .await
            .err();
        assert_eq!(rep, Some(0x02));
        // Every violation came from a request the policy saw; none is malformed beyond `Violation`'s shape.
        assert!(
            h.take_violations()
                .iter()
                .all(|v| !v.refusal.tag.is_empty())
        );
    }
    // A session with a grant: intact requests followed by random tunnel bytes.
    let echo = echo_server().await;
    let (origin, _seen) = http_origin().await;
    let h = Harness::start(policy_for(&["svc.test"]), Kind::Unix).await;
    let mut pokes = Pokes::new();
    for i in 0..400 {
        let tail = rng.bytes(2000);
        let mut bytes = match i % 3 {
            0 => format!("CONNECT svc.test:{echo} HTTP/1.1\r\n\r\n").into_bytes(),
            1 => format!(
                "GET http://svc.test:{origin}/ HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
                tail.len()
            )
            .into_bytes(),
            _ => {
                let mut m = vec![5, 1, 0, 5, 1, 0, 3, 8];
                m.extend_from_slice(b"svc.test");
                m.extend_from_slice(&echo.to_be_bytes());
                m
            }
        };
        bytes.extend_from_slice(&tail);
        let io = if i % 3 == 2 {
            h.socks().await
        } else {
            h.http().await
        };
        pokes.add(io, bytes).await;
    }
    // Every one of these reaches a tunnel or the origin and gets bytes back.
    // Every one of these reaches a tunnel or the origin and gets bytes back
    // (the client half-closes right after its request: it still gets the answer).
    assert_eq!(pokes.finish().await, 400);
    assert!(
        origin_through(
            http_connect(&h, &format!("svc.test:{origin}"))
                .await
                .unwrap()
        )
        .await
    );
    assert!(h.take_violations().is_empty());
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "{:?}",
        start.elapsed()
    );
}
