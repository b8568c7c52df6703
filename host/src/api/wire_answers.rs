//! Error answers the API writes on a connection's socket itself, outside
//! the router: the 503 of a connection refused for room, the 408 of a
//! request whose head did not arrive in time, and the answer that replaces
//! hyper's own (a status and an empty body) to a request it could not
//! parse. Each has the API's error shape (`{"error": …}`, with the config
//! key where one changes it) and `Content-Type: application/json`, like
//! every other error (threat model T19; `http_errors` does the same for the
//! router's).
//!
//! Building an answer is pure; the listener writes it.

use axum::http::StatusCode;

/// A whole HTTP/1.1 response that ends its connection: `status`, the JSON
/// `body`, and `extra` header lines (each ending in CRLF).
pub fn response(status: StatusCode, body: &serde_json::Value, extra: &str) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n{extra}\r\n{body}",
        status.as_str(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes()
}

/// The 408 for a connection whose request head did not arrive within
/// `[api] header_read_timeout_secs` (the client began one and then was too
/// slow: the deadline is only judged after what arrived has been read).
pub fn header_timeout() -> Vec<u8> {
    let body = serde_json::json!({
        "error": "the request's headers did not arrive within `[api] header_read_timeout_secs` \
                  of the connection's opening (or of the request's first byte); send the whole \
                  head at once, or raise that key in the config",
        "configKey": "[api] header_read_timeout_secs",
    });
    response(StatusCode::REQUEST_TIMEOUT, &body, "")
}

/// The longest write [`plan_parse_error_replacement`] looks at (hyper's
/// answers are a short head; body chunks are not read through).
pub const LONGEST_REPLACED: usize = 512;

/// What replaces hyper's answer to a request it could not parse, when
/// `written` — what hyper is writing — is exactly that answer: the head
/// of a 400, 414 or 431 without a body or a `content-type` (every answer
/// of the router's has one: `http_errors`). `None` for anything else.
pub fn plan_parse_error_replacement(written: &[u8]) -> Option<Vec<u8>> {
    if written.len() > LONGEST_REPLACED || !written.starts_with(b"HTTP/1.1 4") {
        return None;
    }
    let head = written.strip_suffix(b"\r\n\r\n")?;
    let head = std::str::from_utf8(head).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.strip_prefix("HTTP/1.1 ")?.split(' ').next()?;
    let message = match status {
        "400" => {
            "the request is not valid HTTP/1.1: its request line (method, path, version) or \
             a header could not be parsed"
        }
        "414" => "the request's path is too long to be parsed",
        "431" => "the request's head (request line and headers) is larger than the server reads",
        _ => return None,
    };
    let mut bodiless = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let name = name.trim().to_ascii_lowercase();
        match name.as_str() {
            "content-type" | "transfer-encoding" => return None,
            "content-length" if value.trim() != "0" => return None,
            "content-length" => bodiless = true,
            _ => {}
        }
    }
    if !bodiless {
        return None;
    }
    let body = serde_json::json!({ "error": message });
    let status = StatusCode::from_bytes(status.as_bytes()).ok()?;
    Some(response(status, &body, ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(answer: &[u8]) -> (String, serde_json::Value) {
        let text = String::from_utf8(answer.to_vec()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len(), "{text}");
        (head.to_owned(), serde_json::from_str(body).unwrap())
    }

    #[test]
    fn the_408_names_the_key() {
        let (head, body) = parts(&header_timeout());
        assert!(
            head.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
            "{head}"
        );
        assert!(head.contains("content-type: application/json"), "{head}");
        assert_eq!(body["configKey"], "[api] header_read_timeout_secs");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("header_read_timeout_secs")
        );
    }

    #[test]
    fn hypers_bodiless_parse_error_answers_are_replaced() {
        for (status, said) in [
            ("400 Bad Request", "not valid HTTP/1.1"),
            ("414 URI Too Long", "too long"),
            ("431 Request Header Fields Too Large", "larger"),
        ] {
            let hyper = format!(
                "HTTP/1.1 {status}\r\ncontent-length: 0\r\ndate: Wed, 02 Dec 2026 03:00:00 GMT\r\n\r\n"
            );
            let replaced = plan_parse_error_replacement(hyper.as_bytes()).unwrap();
            let (head, body) = parts(&replaced);
            assert!(
                head.starts_with(&format!("HTTP/1.1 {status}\r\n")),
                "{head}"
            );
            assert!(head.contains("connection: close"), "{head}");
            assert!(body["error"].as_str().unwrap().contains(said), "{body}");
        }
    }

    #[test]
    fn other_answers_pass_unchanged() {
        for written in [
            // The router's errors are JSON already.
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            "HTTP/1.1 400 Bad Request\r\ntransfer-encoding: chunked\r\n\r\n",
            // Not a whole head, or body bytes.
            "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
            "0\r\n\r\n",
        ] {
            assert_eq!(
                plan_parse_error_replacement(written.as_bytes()),
                None,
                "{written:?}"
            );
        }
    }
}
