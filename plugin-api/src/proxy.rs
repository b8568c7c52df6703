//! Where commands in a sandbox without a network find the session's
//! proxies, and the environment that points them there (SPEC E2). Every
//! backend that offers `net.proxy-only` listens on these loopback ports
//! inside the sandbox and forwards them to the session's proxies.

/// The HTTP proxy (CONNECT and absolute-form requests).
pub const HTTP_PORT: u16 = 3128;

/// The SOCKS proxy (SOCKS5, SOCKS4a).
pub const SOCKS_PORT: u16 = 1080;

/// Both spellings of the proxy variables, `socks5h` so names resolve in
/// the proxy (there is no resolver inside), and no proxy for the sandbox's
/// own loopback.
pub fn env() -> Vec<(String, String)> {
    let mut env = variables(
        &format!("http://127.0.0.1:{HTTP_PORT}"),
        &format!("socks5h://127.0.0.1:{SOCKS_PORT}"),
    );
    for name in ["NO_PROXY", "no_proxy"] {
        env.push((name.to_owned(), "localhost,127.0.0.1,::1".to_owned()));
    }
    env
}

/// `HTTP(S)_PROXY` and `ALL_PROXY`, both spellings, for these proxy URLs.
pub fn variables(http: &str, socks: &str) -> Vec<(String, String)> {
    let http_names = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"];
    let socks_names = ["ALL_PROXY", "all_proxy"];
    http_names
        .iter()
        .map(|n| ((*n).to_owned(), http.to_owned()))
        .chain(
            socks_names
                .iter()
                .map(|n| ((*n).to_owned(), socks.to_owned())),
        )
        .collect()
}
