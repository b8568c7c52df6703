//! Error answers the API writes on a connection's socket itself, outside
//! the router: the 503 of a connection refused for room and the 408 of a
//! request whose head did not arrive in time. Each has the API's error
//! shape (`{"error": …}`, with the config key where one changes it) and
//! `Content-Type: application/json`, like every other error (issue 16 item
//! 7; `http_errors` does the same for the router's).
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
}
