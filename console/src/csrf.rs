//! What a request authenticated by the console's cookie must also show,
//! so that no other page can use the owner's signed-in browser (CSRF).
//!
//! `SameSite=Strict` already keeps the cookie off requests another site
//! starts; these rules hold without relying on it:
//!
//! - `Sec-Fetch-Site`, when the browser sends it, is `same-origin` (or
//!   `none`: the owner typed the address) — never `same-site` or
//!   `cross-site`.
//! - A request that changes state (any method but `GET`/`HEAD`) carries
//!   `Origin` equal to the console's own origin (`http://` and the `Host`
//!   the request passed the Host rule with), and the header
//!   [`HEADER`]`: 1`, which a cross-origin page cannot add without a CORS
//!   preflight this server never grants.

/// The header every state-changing console request carries.
pub const HEADER: &str = "x-cc-console";

/// The parts of a request the rules read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Seen<'a> {
    pub method: &'a str,
    pub host: Option<&'a str>,
    pub origin: Option<&'a str>,
    pub fetch_site: Option<&'a str>,
    pub console_header: Option<&'a str>,
}

/// A refusal: the rule's name and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub rule: &'static str,
    pub message: String,
}

/// The console's own origin, as a browser writes it in `Origin`, for a
/// request whose `Host` is `host`.
pub fn own_origin(host: &str) -> String {
    format!("http://{}", host.trim().to_ascii_lowercase())
}

/// Checks a cookie-authenticated request (see the module doc).
pub fn check(seen: &Seen<'_>) -> Result<(), Refused> {
    let refuse = |rule, what: String| {
        Err(Refused {
            rule,
            message: format!(
                "{what}: a request signed in with the console's cookie must come from the \
                 console's own page; other clients send `Authorization: Bearer <token>`"
            ),
        })
    };
    if let Some(site) = seen.fetch_site
        && !matches!(site, "same-origin" | "none")
    {
        return refuse(
            "console same-origin",
            format!(
                "the browser says this request came from another page (Sec-Fetch-Site `{site}`)"
            ),
        );
    }
    if matches!(seen.method, "GET" | "HEAD") {
        return Ok(());
    }
    let own = seen.host.map(own_origin);
    match (seen.origin, own) {
        (Some(origin), Some(own)) if origin.trim().eq_ignore_ascii_case(&own) => {}
        (origin, _) => {
            return refuse(
                "console origin",
                format!(
                    "a {} with the console's cookie has Origin `{}`, not the console's own",
                    seen.method,
                    origin.unwrap_or("(none)")
                ),
            );
        }
    }
    if seen.console_header.map(str::trim) != Some("1") {
        return refuse(
            "console header",
            format!(
                "a {} with the console's cookie lacks `{HEADER}: 1`",
                seen.method
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post<'a>(
        origin: Option<&'a str>,
        site: Option<&'a str>,
        header: Option<&'a str>,
    ) -> Seen<'a> {
        Seen {
            method: "POST",
            host: Some("127.0.0.1:7878"),
            origin,
            fetch_site: site,
            console_header: header,
        }
    }

    #[test]
    fn only_the_consoles_own_page_changes_state() {
        let own = Some("http://127.0.0.1:7878");
        assert!(check(&post(own, Some("same-origin"), Some("1"))).is_ok());
        assert!(check(&post(own, None, Some("1"))).is_ok());
        let refused = [
            (
                post(own, Some("cross-site"), Some("1")),
                "console same-origin",
            ),
            (
                post(own, Some("same-site"), Some("1")),
                "console same-origin",
            ),
            (
                post(Some("http://evil.example"), None, Some("1")),
                "console origin",
            ),
            (
                post(Some("http://127.0.0.1:7879"), None, Some("1")),
                "console origin",
            ),
            (post(Some("null"), None, Some("1")), "console origin"),
            (post(None, None, Some("1")), "console origin"),
            (post(own, None, None), "console header"),
            (post(own, None, Some("0")), "console header"),
        ];
        for (seen, rule) in refused {
            let refusal = check(&seen).unwrap_err();
            assert_eq!(refusal.rule, rule, "{seen:?}");
            assert!(
                refusal.message.contains("Authorization"),
                "{}",
                refusal.message
            );
        }
    }

    #[test]
    fn reads_need_no_header_but_not_another_sites_page() {
        let get = |site| Seen {
            method: "GET",
            host: Some("localhost:1"),
            fetch_site: site,
            ..Seen::default()
        };
        assert!(check(&get(None)).is_ok());
        assert!(check(&get(Some("same-origin"))).is_ok());
        assert!(check(&get(Some("cross-site"))).is_err());
        assert_eq!(own_origin("LocalHost:1"), "http://localhost:1");
    }
}
