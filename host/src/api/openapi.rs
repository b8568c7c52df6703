//! `GET /v1/openapi.json`: the API described as OpenAPI 3.1 (SPEC F10),
//! generated, not written: the routes are [`credentials::ROUTES`] (which a
//! unit test holds to the router), each with the credential it takes; a
//! request body's schema is derived (`schemars`) from the very type its
//! handler parses, the answers' from the types they serialize; every error
//! is the API's JSON. JSON Schema 2020-12 is OpenAPI 3.1's own dialect, so
//! the derived schemas go in as they are, under `components/schemas`.

use axum::Json;
use axum::Router;
use axum::routing::get;
use sandbox_plugin_api::{ProbeReport, SandboxHandle, SandboxSpec};
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use super::credentials::{self, Credential};
use super::{AppState, console, execs, policy, terminals, workspaces};

/// The area's routes, with their full paths (the entry-point scan reads them
/// as written: see `entry_points`).
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/openapi.json", get(serve))
}

async fn serve() -> Json<Value> {
    Json(document())
}

/// What a route takes in and gives back.
struct Shape {
    /// The request body's schema and media type.
    body: Option<(Value, &'static str)>,
    /// The success status, its schema and media type.
    answer: (u16, Option<(Value, &'static str)>),
}

const JSON: &str = "application/json";

/// The document.
pub fn document() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    let mut generator = settings.into_generator();
    let mut paths = Map::new();
    for (route, credential) in credentials::ROUTES {
        let Some((method, path)) = route.split_once(' ') else {
            continue;
        };
        let shape = shape(method, path, &mut generator);
        let operation = operation(method, path, *credential, shape, &mut generator);
        let entry = paths
            .entry(path.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(methods) = entry {
            methods.insert(method.to_lowercase(), operation);
        }
    }
    let schemas = generator.take_definitions(true);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "cc_server",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The sandbox runtime's HTTP API. Every error is `{\"error\": …, \"field\"?: …}`."
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "owner": {"type": "http", "scheme": "bearer", "description": "the owner's token (the token file)"},
                "agent": {"type": "http", "scheme": "bearer", "description": "a sandbox's agent credential (`agentCredential` of `POST /v1/sandboxes`)"}
            }
        }
    })
}

fn schema<T: schemars::JsonSchema>(generator: &mut SchemaGenerator) -> Value {
    generator.subschema_for::<T>().to_value()
}

/// What each route takes and gives, from its handler's types.
fn shape(method: &str, path: &str, g: &mut SchemaGenerator) -> Shape {
    let handle = |g: &mut SchemaGenerator| Some((schema::<SandboxHandle>(g), JSON));
    let any_json = Some((json!({"type": "object"}), JSON));
    let body = |v: Value| Some((v, JSON));
    match (method, path) {
        ("GET", "/healthz") => Shape { body: None, answer: (200, any_json) },
        ("GET", "/v1/openapi.json") => Shape { body: None, answer: (200, any_json) },
        ("GET", "/") => Shape { body: None, answer: (200, Some((json!({"type": "string"}), "text/html"))) },
        ("GET", "/console/{file}") => Shape { body: None, answer: (200, Some((json!({"type": "string"}), "text/javascript"))) },
        ("POST", "/v1/console/session") => Shape {
            body: body(schema::<console::SignInCall>(g)),
            answer: (204, None),
        },
        ("DELETE", "/v1/console/session") => Shape { body: None, answer: (204, None) },
        ("GET", "/v1/events") => Shape {
            body: None,
            answer: (200, Some((json!({"type": "string", "description": "one JSON event per line, each with its `sandboxId`"}), "application/x-ndjson"))),
        },
        ("GET", "/v1/backends") => Shape {
            body: None,
            answer: (200, body(json!({"type": "object", "properties": {"backends": {"type": "array", "items": {"type": "object", "properties": {"probe": schema::<ProbeReport>(g)}}}}}))),
        },
        ("GET", "/v1/sandboxes") => Shape {
            body: None,
            answer: (200, body(json!({"type": "array", "items": schema::<SandboxHandle>(g)}))),
        },
        ("POST", "/v1/sandboxes") => Shape {
            body: body(schema::<SandboxSpec>(g)),
            answer: (201, handle(g)),
        },
        ("GET" | "DELETE", "/v1/sandboxes/{id}")
        | ("POST", "/v1/sandboxes/{id}/suspend" | "/v1/sandboxes/{id}/resume") => Shape {
            body: None,
            answer: (200, handle(g)),
        },
        ("POST", "/v1/sandboxes/{id}/execs" | "/v1/sandboxes/{id}/exec") => Shape {
            body: body(schema::<execs::ExecCall>(g)),
            answer: (200, Some((json!({"type": "string", "description": "one JSON event per line, ending with `exit` or `killed`"}), "application/x-ndjson"))),
        },
        ("POST", "/v1/sandboxes/{id}/execs/{exec_id}/kill") => Shape {
            body: body(schema::<execs::KillCall>(g)),
            answer: (204, None),
        },
        ("POST", "/v1/sandboxes/{id}/execs/{exec_id}/resize") => Shape {
            body: body(schema::<execs::ResizeCall>(g)),
            answer: (204, None),
        },
        ("POST", "/v1/sandboxes/{id}/execs/{exec_id}/stdin") => Shape {
            body: Some((json!({"type": "string", "contentMediaType": "application/octet-stream"}), "application/octet-stream")),
            answer: (204, None),
        },
        ("POST", "/v1/policy/check") => Shape {
            body: body(schema::<policy::CheckCall>(g)),
            answer: (200, any_json),
        },
        ("POST", "/v1/approvals/{id}") => Shape {
            body: body(schema::<policy::AnswerCall>(g)),
            answer: (204, None),
        },
        ("POST", "/v1/workspaces") => Shape {
            body: body(schema::<workspaces::WorkspaceBody>(g)),
            answer: (201, any_json),
        },
        ("POST", "/v1/conversations") => Shape {
            body: body(schema::<workspaces::ConversationBody>(g)),
            answer: (201, any_json),
        },
        ("POST", "/v1/conversations/{id}/agents") => Shape {
            body: body(schema::<workspaces::AgentBody>(g)),
            answer: (201, any_json),
        },
        ("POST", "/v1/terminals") => Shape {
            body: body(schema::<terminals::CreateCall>(g)),
            answer: (201, any_json),
        },
        ("POST", "/v1/terminals/{id}/tickets") => Shape {
            body: None,
            answer: (201, body(json!({"type": "object", "properties": {"ticket": {"type": "string"}, "expiresInSecs": {"type": "integer"}}}))),
        },
        ("GET", "/v1/terminals/{id}/ws") => Shape {
            body: None,
            answer: (101, None),
        },
        ("DELETE", "/v1/terminals/{id}" | "/v1/workspaces/{name}" | "/v1/conversations/{id}" | "/v1/conversations/{id}/agents/{agent}") => {
            Shape { body: None, answer: (204, None) }
        }
        (_, "/mcp") => Shape {
            body: (method == "POST").then(|| (json!({"type": "object", "description": "a JSON-RPC message of MCP's streamable HTTP transport"}), JSON)),
            answer: (200, any_json),
        },
        ("DELETE", _) => Shape { body: None, answer: (200, any_json) },
        _ => Shape { body: None, answer: (200, any_json) },
    }
}

fn operation(
    method: &str,
    path: &str,
    credential: Credential,
    shape: Shape,
    _g: &mut SchemaGenerator,
) -> Value {
    let mut parameters: Vec<Value> = path
        .split('/')
        .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            let schema = if name == "exec_id" {
                json!({"type": "integer", "minimum": 0})
            } else {
                json!({"type": "string"})
            };
            json!({"name": name, "in": "path", "required": true, "schema": schema})
        })
        .collect();
    let security = match credential {
        Credential::None => json!([]),
        Credential::Owner => json!([{"owner": []}]),
        Credential::OwnerOrAgent => json!([{"owner": []}, {"agent": []}]),
        Credential::Agent => json!([{"agent": []}]),
        Credential::Ticket => {
            parameters.push(json!({"name": "ticket", "in": "query", "required": true, "schema": {"type": "string"}, "description": "a single-use ticket from `POST /v1/terminals/{id}/tickets`"}));
            json!([])
        }
    };
    let error = json!({
        "description": "an error, as the API's JSON",
        "content": {JSON: {"schema": {
            "type": "object",
            "required": ["error"],
            "properties": {"error": {"type": "string"}, "field": {"type": "string"}}
        }}}
    });
    let (status, answer) = shape.answer;
    let mut success = json!({"description": "done"});
    if let Some((schema, media)) = answer {
        success["content"] = json!({media: {"schema": schema}});
    }
    let mut operation = json!({
        "operationId": format!("{} {path}", method.to_lowercase()),
        "parameters": parameters,
        "security": security,
        "responses": {status.to_string(): success, "default": error},
    });
    if let Some((schema, media)) = shape.body {
        operation["requestBody"] =
            json!({"required": true, "content": {media: {"schema": schema}}});
    }
    operation
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route the router serves (`credentials::ROUTES`, held to the
    /// router by the entry-point test) is in the document with its method,
    /// and nothing else is; each `$ref` resolves.
    #[test]
    fn the_document_describes_exactly_the_routers_routes() {
        let doc = document();
        assert_eq!(doc["openapi"], "3.1.0");
        let mut described = Vec::new();
        for (path, methods) in doc["paths"].as_object().unwrap() {
            for method in methods.as_object().unwrap().keys() {
                described.push(format!("{} {path}", method.to_uppercase()));
            }
        }
        described.sort();
        let mut routed: Vec<String> = credentials::ROUTES
            .iter()
            .map(|(r, _)| (*r).to_owned())
            .collect();
        routed.sort();
        assert_eq!(described, routed);
        let text = doc.to_string();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for reference in text.split("\"$ref\":\"").skip(1) {
            let target = reference.split('"').next().unwrap();
            let name = target
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("{target}"));
            assert!(
                schemas.contains_key(name),
                "{target} is not in components/schemas"
            );
        }
        let exec = &doc["paths"]["/v1/sandboxes/{id}/execs"]["post"]["requestBody"];
        assert!(exec.to_string().contains("ExecCall"), "{exec}");
        assert!(
            schemas["ExecCall"]["properties"]["pty"].is_object(),
            "{}",
            schemas["ExecCall"]
        );
    }
}
