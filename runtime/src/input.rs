//! Strict parsing of what users send: malformed JSON, a wrong type or an
//! unknown field is an error naming the field. (Across the plugin boundary
//! unknown fields are tolerated; from a user they are most likely a typo in
//! a security setting.)

use serde::de::DeserializeOwned;

/// A rejected input, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {message}{}", field_suffix(.field))]
pub struct InputError {
    /// What was being read ("the sandbox spec").
    pub what: String,
    /// The field's path (`bindMounts[0].readOnly`), when one is to blame.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

fn field_suffix(field: &Option<String>) -> String {
    match field {
        Some(f) => format!(" (field `{f}`)"),
        None => String::new(),
    }
}

/// Parses JSON into `T`, refusing unknown fields anywhere in the document.
pub fn parse_strict<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, InputError> {
    // serde also reads a struct from a JSON array; a user means an object.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(InputError {
            what: what.to_owned(),
            field: None,
            message: "expected a JSON object".to_owned(),
        });
    }
    let mut unknown = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut note_unknown = |path: serde_ignored::Path<'_>| unknown.push(render(&path));
    let ignored = serde_ignored::Deserializer::new(&mut de, &mut note_unknown);
    let value: T = serde_path_to_error::deserialize(ignored).map_err(|e| {
        let path = e.path().to_string();
        InputError {
            what: what.to_owned(),
            field: (path != ".").then_some(path),
            message: e.into_inner().to_string(),
        }
    })?;
    de.end().map_err(|e| InputError {
        what: what.to_owned(),
        field: None,
        message: e.to_string(),
    })?;
    if let Some(field) = unknown.into_iter().next() {
        return Err(InputError {
            what: what.to_owned(),
            message: "unknown field; check its spelling against the documented names".to_owned(),
            field: Some(field),
        });
    }
    Ok(value)
}

/// `bindMounts[0].readOnly`, the spelling serde_path_to_error uses too.
fn render(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", render(parent)),
        Path::Map { parent, key } => match render(parent) {
            p if p.is_empty() => key.clone(),
            p => format!("{p}.{key}"),
        },
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => render(parent),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_plugin_api::SandboxSpec;

    #[test]
    fn wrong_types_name_their_field() {
        let err = parse_strict::<SandboxSpec>(
            br#"{"bindMounts":[{"hostPath":"/a","readOnly":"yes"}]}"#,
            "the sandbox spec",
        )
        .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("bindMounts[0].readOnly"));
        assert!(err.to_string().contains("bindMounts[0].readOnly"), "{err}");
    }

    #[test]
    fn unknown_modes_list_the_valid_ones() {
        let err = parse_strict::<SandboxSpec>(br#"{"mode":"yolo"}"#, "spec").unwrap_err();
        assert_eq!(err.field.as_deref(), Some("mode"));
        assert!(
            err.message.contains("chat") && err.message.contains("orchestrate"),
            "{err}"
        );
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let err = parse_strict::<SandboxSpec>(br#"{"protectedPath":["/x"]}"#, "spec").unwrap_err();
        assert_eq!(err.field.as_deref(), Some("protectedPath"));
        let err = parse_strict::<SandboxSpec>(
            br#"{"bindMounts":[{"hostPath":"/a","readonly":true}]}"#,
            "spec",
        )
        .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("bindMounts[0].readonly"));
    }

    #[test]
    fn malformed_json_and_trailing_garbage_are_refused() {
        assert!(parse_strict::<SandboxSpec>(b"{\"mode\":", "spec").is_err());
        assert!(parse_strict::<SandboxSpec>(b"{} {}", "spec").is_err());
        assert!(parse_strict::<SandboxSpec>(b"[]", "spec").is_err());
        assert!(parse_strict::<SandboxSpec>(b"{}", "spec").is_ok());
    }
}
